-- baton.spawn{..., channel = true} and baton.channel(): lines both ways in
-- order, long lines, timeouts, the end of the channel when the child exits
-- (also when the child's own children live on), a reply sent just before
-- exiting, failures after the other end is gone, misuse; and the internal
-- condition (baton._cond) the worker pool waits on.
local T = require "tap"

local write_file = require("files").write

-- Starts src as a `baton eval` child with a channel.
local function child(src)
  local path = os.tmpname()
  write_file(path, src)
  return assert(baton.spawn { os.getenv("BATON_BIN"), "eval", path, channel = true })
end

do
  local p = child [[
    local ch = assert(baton.channel())
    while true do
      local m = ch:recv()
      if not m or m == "bye" then break end
      ch:send(#m .. ":" .. m:sub(1, 8))
    end
  ]]
  local ch = p.channel
  T.like(tostring(ch), "^baton.channel %(open%)", "p.channel is a channel")
  for i = 1, 200 do assert(ch:send("msg" .. i)) end
  local ok = true
  for i = 1, 200 do
    local m = ch:recv(10)
    local want = #("msg" .. i) .. ":" .. ("msg" .. i)
    if m ~= want then ok = false; T.diag(("message %d: %s, want %s"):format(i, tostring(m), want)); break end
  end
  T.ok(ok, "200 messages come back in order")
  local big = string.rep("x", 1048576)
  assert(ch:send(big))
  T.is(ch:recv(10), "1048576:xxxxxxxx", "a 1 MiB line goes through whole")
  local t0 = baton.monotime()
  local m, err, code = ch:recv(0.2)
  T.ok(m == nil and code == "ETIMEDOUT" and baton.monotime() - t0 >= 0.19,
       "recv with a timeout: ETIMEDOUT when nothing comes (" .. tostring(err) .. ")")
  m, err, code = ch:recv(0)
  T.is(code, "ETIMEDOUT", "recv(0) only polls")
  T.error_like(function() ch:send("a\nb") end, "one line", "a message with a newline is refused")
  baton.go(function() ch:recv(5) end)
  baton.sleep(0.05)
  T.error_like(function() ch:recv(1) end, "already receiving", "one receiver at a time")
  ch:send("bye")
  baton.sleep(0.1)
  m, err, code = ch:recv(5)
  T.is(code, "EOF", "the end of the channel once the child exits: " .. tostring(err))
  T.is(p:wait(5).code, 0, "the child exited by itself")
  local failed
  for _ = 1, 20 do
    local s, _, scode = ch:send("late")
    if not s then failed = scode; break end
    baton.sleep(0.05)
  end
  T.ok(failed == "EPIPE" or failed == "EOF", "sends fail once the other end is gone: " .. tostring(failed))
  ch:close()
  T.like(tostring(ch), "closed", "closed")
  T.is(select(3, ch:send("x")), "EOF", "send after close: EOF")
end

do
  -- A reply sent right before exit arrives.
  local p = child [[
    local ch = assert(baton.channel())
    ch:send("last words")
    baton.exit(0)
  ]]
  T.is(p.channel:recv(10), "last words", "a line sent just before exit arrives")
  T.is(select(3, p.channel:recv(10)), "EOF", "then the end of the channel")
end

do
  -- The child's own children do not hold the channel open: when the child
  -- is killed, the end comes at once though a grandchild (in a session of
  -- its own, out of reach of the group kill) still runs.
  local p = child [[
    local ch = assert(baton.channel())
    os.execute("setsid sleep 5 >/dev/null 2>&1 &")
    baton.sleep(0.5) -- (until the grandchild has left the process group)
    ch:send("ready")
    baton.sleep(30)
  ]]
  T.is(p.channel:recv(10), "ready", "the child started a grandchild")
  p:kill("SIGKILL")
  local t0 = baton.monotime()
  T.is(select(3, p.channel:recv(10)), "EOF", "killed: the end of the channel")
  T.ok(baton.monotime() - t0 < 3, ("at once (%.2f s), though the grandchild still runs")
       :format(baton.monotime() - t0))
end

do
  local p = child [[ baton.sleep(0.2) ]]
  T.is(select(3, p.channel:recv(10)), "EOF", "a child that never opens it: EOF when it exits")
  local q = assert(baton.spawn { "true" })
  T.is(q.channel, nil, "no channel unless asked")
  q:wait()
  T.error_like(function() baton.spawn { "true", channel = "yes" } end, "channel must be a boolean",
               "channel must be a boolean")
  local ch, err, code = baton.channel()
  T.ok(ch == nil and code == "EBADF", "baton.channel() without one: " .. tostring(err))
  T.like(err, "baton.spawn", "the error says how to get one")
  T.error_like(function() baton.channel(-1) end, "must be a file descriptor", "a negative fd raises")
  T.error_like(function() baton.channel("three") end, "number expected", "a fd that is not a number raises")
  local r = child [[ baton.sleep(5) ]]
  T.error_like(function() r.channel:recv(-1) end, "timeout must be >= 0", "a negative timeout raises")
  T.error_like(function() r.channel:send({}) end, "string expected", "send of a table raises")
  T.is(select(3, r.channel:recv(0)), "ETIMEDOUT", "the channel is still usable after misuse")
  r:kill("SIGKILL")
end

do
  -- baton worker is for baton node, which gives it a channel.
  local r = assert(baton.exec { os.getenv("BATON_BIN"), "worker", timeout = 30 })
  T.is(r.code, 2, "baton worker run by hand: exit 2")
  T.like(r.stderr, "started without a channel; this command is for baton node", "saying what it is for")
end

do
  local c = baton._cond()
  local order = {}
  for i = 1, 3 do baton.go(function() c:wait(); order[#order + 1] = i end) end
  baton.sleep(0.05)
  T.is(c:signal(), true, "signal wakes a waiter")
  baton.sleep(0.05)
  T.is_deeply(order, { 1 }, "the longest waiter first")
  c:broadcast()
  baton.sleep(0.05)
  T.is_deeply(order, { 1, 2, 3 }, "broadcast wakes the rest, in order")
  T.is(c:signal(), false, "signal with nobody waiting: false")
end

T.done()
