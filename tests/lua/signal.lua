-- baton.signal: waiting for SIGTERM in a child baton, the default action
-- when nobody ever waited, the pending count between waits, broadcast to
-- several waiters, timeouts, misuse, and that handlers never keep a
-- finished script alive.
local T = require "tap"

local function trim(s) return (s:gsub("%s+$", "")) end

local files = require "files"
local write_file, read_file = files.write, files.read

local function self_pid()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("*n")
  f:close()
  return pid
end

local function baton_bin()
  local b = os.getenv("BATON_BIN")
  if b and b ~= "" then return b end
  local r = baton.exec{"readlink", "/proc/" .. self_pid() .. "/exe"}
  if r and r.code == 0 then return trim(r.stdout) end
end

-- Polls cond every 20 ms for at most secs; returns its last value.
local function within(secs, cond)
  local deadline = baton.monotime() + secs
  local v = cond()
  while not v and baton.monotime() < deadline do
    baton.sleep(0.02)
    v = cond()
  end
  return v
end

local function kill(sig, pid)
  local r = baton.exec{"kill", "-" .. sig, tostring(pid)}
  return r and r.code == 0
end

-- Every inner script starts with ready(): it writes the script's pid to
-- arg[1] (atomically) once it is ready to get signals; go() waits until
-- the test creates arg[2].
local PRELUDE = [[
local function ready()
  local f = io.open("/proc/self/stat")
  local pid = f:read("*n")
  f:close()
  f = io.open(arg[1] .. ".tmp", "w")
  f:write(pid)
  f:close()
  os.rename(arg[1] .. ".tmp", arg[1])
end
local function go()
  for _ = 1, 1000 do
    local f = io.open(arg[2])
    if f then f:close() return end
    baton.sleep(0.01)
  end
  error("go file never came")
end
]]

-- Starts src (after PRELUDE) as an inner `baton eval`, via baton.exec in
-- a coroutine. Returns a handle: h.pid (nil if it never got ready),
-- h:go(), h:result() (baton.exec's result, waited for).
local function start(src)
  local script, pidfile, gofile = os.tmpname(), os.tmpname(), os.tmpname()
  os.remove(pidfile)
  os.remove(gofile)
  write_file(script, PRELUDE .. src)
  local h = {}
  baton.go(function()
    local r, err = baton.exec{baton_bin(), "eval", script, pidfile, gofile,
                              timeout = 30}
    h.r = r or {code = -1, stdout = "", stderr = err}
  end)
  -- Waits for the next ready(); returns the pid or nil.
  function h.ready()
    local pid = within(10, function()
      return h.r == nil and tonumber(read_file(pidfile)) or h.r ~= nil
    end)
    os.remove(pidfile)
    if pid ~= true then return pid end
  end
  h.pid = h.ready()
  function h.go() write_file(gofile, "") end
  function h.result()
    within(30, function() return h.r end)
    os.remove(script)
    os.remove(pidfile)
    os.remove(gofile)
    return h.r or {code = -1, stdout = "", stderr = "never finished"}
  end
  return h
end

-- waiting for SIGTERM: the signal's name, exit 0
do
  local h = start([[
baton.go(function() print(baton.signal{"SIGINT", "SIGTERM"}) end)
baton.sleep(0.05)   -- the coroutine above is waiting now
ready()
]])
  T.ok(h.pid, "inner script is ready")
  T.ok(kill("TERM", h.pid), "sent SIGTERM")
  local r = h.result()
  T.is(r.stdout, "SIGTERM\n", "baton.signal returned \"SIGTERM\"")
  T.is(r.code, 0, "and the script ended normally (exit 0)")
  T.is(r.signal, nil, "not by the signal")
end

-- Nobody ever waited for SIGTERM: its default action (the process dies).
-- Naming one signal does not handle the others.
do
  local t0 = baton.monotime()
  local h = start([[
ready()
baton.sleep(20)
print("not reached")
]])
  kill("TERM", h.pid)
  local r = h.result()
  T.is(r.signal, 15, "SIGTERM with no waiter ever: killed by the signal")
  T.is(r.code, 143, "code 143")
  T.ok(baton.monotime() - t0 < 10, "at once")

  h = start([[
baton.go(function() print(baton.signal("SIGTERM", 20)) end)
baton.sleep(0.05)
ready()
baton.sleep(20)
]])
  kill("INT", h.pid)
  r = h.result()
  T.is(r.signal, 2, "SIGINT while waiting only for SIGTERM: default action")
  T.is(r.stdout, "", "the SIGTERM waiter got nothing")
end

-- The pending count: once a handler is installed (here by a call with
-- timeout 0), deliveries nobody waits for are counted, and the next calls
-- take them: the first signal named in the call's list first.
do
  local h = start([[
local function show(...)
  local s, _, code = ...
  io.write(s or code, "\n")
end
show(baton.signal({"SIGUSR1", "SIGUSR2"}, 0))   -- installs both
ready()
go()
baton.sleep(0.3)      -- the deliveries have been handled by now
show(baton.signal({"SIGUSR1", "SIGUSR2"}, 0))
show(baton.signal({"SIGUSR1", "SIGUSR2"}, 0))
show(baton.signal({"SIGUSR1", "SIGUSR2"}, 0))
show(baton.signal({"SIGUSR1", "SIGUSR2"}, 0))
-- a signal arriving between two waits
ready()
show(baton.signal("SIGUSR1", 10))
ready()
baton.sleep(0.5)      -- busy: the test sends SIGUSR1 now
show(baton.signal("SIGUSR1", 0))
show(baton.signal("SIGUSR1", 0))
]])
  T.ok(h.pid, "inner script installed its handlers")
  kill("USR2", h.pid)
  baton.sleep(0.1)
  kill("USR1", h.pid)
  baton.sleep(0.1)
  kill("USR1", h.pid)
  baton.sleep(0.1)
  h.go()
  T.ok(h.ready(), "inner script took the pending signals")
  baton.sleep(0.1)
  kill("USR1", h.pid)   -- ends show(baton.signal("SIGUSR1", 10))
  T.ok(h.ready(), "inner script got it")
  kill("USR1", h.pid)   -- while it is busy, nobody waiting
  local r = h.result()
  T.is(r.code, 0, "inner script exits 0 (no default action once installed)")
  T.is(r.stdout, table.concat({
    "ETIMEDOUT",                   -- nothing pending at first
    "SIGUSR1", "SIGUSR1",          -- two SIGUSR1 counted, listed first
    "SIGUSR2",                     -- then the SIGUSR2
    "ETIMEDOUT",                   -- each delivery is returned once
    "SIGUSR1",                     -- the wait
    "SIGUSR1",                     -- the one that came while busy
    "ETIMEDOUT",
  }, "\n") .. "\n", "pending counts, taken in list order, each once")
  T.is(r.stderr, "", "no error")
end

-- In this process: timeouts, broadcast to several waiters, lists.
do
  local pid = self_pid()
  local t0 = baton.monotime()
  local s, msg, code = baton.signal("SIGUSR1", 0.3)
  local el = baton.monotime() - t0
  T.is(s, nil, "timeout returns nil")
  T.is(msg, "ETIMEDOUT: no SIGUSR1 within 0.3 s", "timeout message")
  T.is(code, "ETIMEDOUT", "timeout code")
  T.ok(el >= 0.28 and el < 2, ("after the timeout (%.2f s)"):format(el))
  s, msg = baton.signal({"SIGUSR1", "SIGUSR2", "SIGHUP"}, 0)
  T.is(msg, "ETIMEDOUT: no SIGUSR1, SIGUSR2 or SIGHUP pending",
    "timeout 0 message lists the signals")

  local got, n = {}, 0
  local function waiter(i, names, timeout)
    baton.go(function()
      local a, _, c = baton.signal(names, timeout)
      got[i] = a or c
      n = n + 1
    end)
  end
  waiter(1, "SIGUSR1", 10)
  waiter(2, {"SIGUSR2", "SIGUSR1"}, 10)
  waiter(3, "SIGUSR2", 0.5)
  baton.sleep(0.05)
  kill("USR1", pid)
  within(5, function() return n == 3 end)
  T.is(got[1], "SIGUSR1", "first waiter woken")
  T.is(got[2], "SIGUSR1", "a waiter for a list woken by either signal")
  T.is(got[3], "ETIMEDOUT", "a waiter for another signal is not woken")
  s = baton.signal("SIGUSR1", 0)
  T.is(s, nil, "a delivery that woke waiters is not also counted")

  -- a waiter that timed out leaves nothing behind: the next delivery is
  -- pending
  kill("USR2", pid)
  T.is(baton.signal("SIGUSR2", 5), "SIGUSR2", "the next delivery arrives")

  -- in a user's own coroutine
  local f = coroutine.wrap(function() return baton.signal("SIGHUP", 5) end)
  baton.go(function() baton.sleep(0.1); kill("HUP", pid) end)
  T.is(f(), "SIGHUP", "baton.signal inside coroutine.wrap")
  T.is(baton.signal("SIGTERM", 0), nil, "nothing else pending")
end

-- misuse raises
do
  T.error_like(function() baton.signal() end,
    "^baton%.signal: expects a signal name or a list of names %(got no value%)",
    "no argument")
  T.error_like(function() baton.signal(15) end,
    "^baton%.signal: expects a signal name or a list", "a number")
  T.error_like(function() baton.signal{} end,
    "^baton%.signal: no signal named", "empty list")
  T.error_like(function() baton.signal("SIGFOO") end,
    "^baton%.signal: unknown signal 'SIGFOO' %(expected SIGHUP, SIGINT, ",
    "unknown name")
  T.error_like(function() baton.signal("TERM") end,
    "^baton%.signal: unknown signal 'TERM'", "names need SIG")
  T.error_like(function() baton.signal{"SIGINT", "SIGKILL"} end,
    "^baton%.signal: cannot wait for SIGKILL", "SIGKILL cannot be caught")
  T.error_like(function() baton.signal("SIGSEGV") end,
    "^baton%.signal: cannot wait for SIGSEGV", "SIGSEGV")
  T.error_like(function() baton.signal("SIGCHLD") end,
    "^baton%.signal: cannot wait for SIGCHLD", "SIGCHLD")
  T.error_like(function() baton.signal{"SIGINT", 2} end,
    "^baton%.signal: signal names must be strings %(got number%)",
    "a number in the list")
  T.error_like(function() baton.signal("SIGINT", -1) end,
    "^baton%.signal: timeout must be >= 0", "negative timeout")
  T.error_like(function() baton.signal("SIGINT", "1") end,
    "^baton%.signal: timeout must be a number", "timeout string")
  T.error_like(function()
    table.sort({3, 1, 2}, function(a, b)
      baton.signal("SIGINT", 1)
      return a < b
    end)
  end, "^baton%.signal: cannot wait here", "waiting inside a C call raises")
end

-- Handlers never keep a script alive, and a killed waiter is forgotten.
do
  local t0 = baton.monotime()
  local function run(src)
    local script = os.tmpname()
    write_file(script, src)
    local r = assert(baton.exec{baton_bin(), "eval", script, timeout = 20})
    os.remove(script)
    return r
  end
  local r = run('print(baton.signal({"SIGTERM", "SIGINT"}, 0)); print("done")')
  T.is(r.stdout,
    "nil\tETIMEDOUT: no SIGTERM or SIGINT pending\tETIMEDOUT\ndone\n",
    "an installed handler with nobody waiting")
  T.is(r.code, 0, "does not keep the script running")

  r = run([[
baton.go(function() baton.signal("SIGUSR1") end)
baton.sleep(0.1)
error("boom")
]])
  T.is(r.code, 1, "a script failing while a coroutine waits for a signal")
  T.like(r.stderr, "boom", "exits with its error")
  T.ok(baton.monotime() - t0 < 10, "promptly")
end

T.done()
