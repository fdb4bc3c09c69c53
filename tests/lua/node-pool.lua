-- The worker pool of a node: --workers caps the runs at once (the others
-- wait for a slot, none is lost), workers are reused, each run loads the
-- job afresh (no top-level state carried over), a run that leaves a
-- coroutine behind or patches a shared module retires its worker, and a worker whose run timed out is
-- killed and replaced.
local T = require "tap"
local N = require "nodes"
local json = baton.json

-- 0. The pool alone: only an unclaimed scheduled instant waiting for a
-- slot is published as oldest_waiting (a retry or a queue task waiting must
-- not hold back the leader's misfire check).
do
  local pool = require "baton.node.pool"
  local node = { max_workers = 1 }
  local p = pool.new(node)
  T.ok(p:acquire(), "a free slot is taken at once")
  local got = {}
  baton.go(function() got[1] = p:acquire() end)          -- a retry: no instant
  baton.sleep(0)
  T.is(p:oldest_waiting(), nil, "a waiting retry publishes no instant")
  baton.go(function() got[2] = p:acquire(1234) end)      -- a scheduled instant
  baton.sleep(0)
  T.is(p:oldest_waiting(), 1234, "a waiting instant is published")
  p:release(); baton.sleep(0)
  T.is(got[1], true, "the first waiter got the slot first")
  p:release(); baton.sleep(0)
  T.is(got[2], true, "then the second")
  T.is(p:oldest_waiting(), nil, "nothing waits any more")
  node.stopping = true
  p:close()
end

local c = N.new("nodepool")
local e, P = c.e, c.P
c:start("a", 5, "--workers 2")

-- Every job records, through put_fenced, its worker's pid and when it ran.
local function job(name, body, extra)
  return c:put_job(name, ([[
return { schedule = "@manual", concurrency = "allow", %s
  run = function(ctx)
    -- (in run: a job file's top level is also described in a sandbox
    -- that opens no file)
    local pid = io.open("/proc/self/stat"):read("*n")
    %s
    assert(ctx:put_fenced(%q .. ctx.job .. "/" .. baton.now(),
      baton.json.encode { pid = pid, started = baton.now(), finished = baton.now() }))
  end }
]]):format(extra or "", body, P .. "out/"))
end

local function outputs(name)
  local r = assert(e:get(P .. "out/" .. name .. "/", { prefix = true }))
  local list = {}
  for _, kv in ipairs(r.kvs) do list[#list + 1] = json.decode(kv.value) end
  return list
end

local function ended(name, n, secs)
  return N.wait(secs or 20, function()
    local done = 0
    for _, r in ipairs(c:records(name)) do
      if r.state ~= "running" and r.state ~= "retrying" then done = done + 1 end
    end
    return done >= n
  end)
end

local function alive(pid)
  return baton.exec { "kill", "-0", tostring(pid) }.code == 0
end

-- 1. Five runs of a 1.5 s job on a node with --workers 2.
local rev = job("slow", [[
    local t0 = baton.now()
    baton.sleep(1.5)
    assert(ctx:put_fenced(]] .. ("%q"):format(P .. "span/") .. [[ .. baton.now(),
      baton.json.encode { from = t0, to = baton.now() }))]])
T.ok(c:loaded("slow", rev), "job loaded")
for _ = 1, 5 do c:cli("job", "run", "slow") end
T.ok(ended("slow", 5, 30), "all five runs ended")
local ok = 0
for _, r in ipairs(c:records("slow")) do if r.state == "succeeded" then ok = ok + 1 end end
T.is(ok, 5, "all five succeeded: runs beyond --workers wait for a slot, none is lost")
local spans = {}
for _, kv in ipairs(assert(e:get(P .. "span/", { prefix = true })).kvs) do
  spans[#spans + 1] = json.decode(kv.value)
end
local most = 0
for _, s in ipairs(spans) do
  local at = s.from + 0.01
  local n = 0
  for _, o in ipairs(spans) do if o.from <= at and at < o.to then n = n + 1 end end
  if n > most then most = n end
end
T.is(most, 2, "at most 2 runs at once, and 2 did run at once")
local pids = {}
for _, o in ipairs(outputs("slow")) do pids[o.pid] = true end
local npids = 0
for _ in pairs(pids) do npids = npids + 1 end
T.ok(npids <= 2, "the five runs used " .. npids .. " worker processes (reused)")

-- 2. Top-level state is not carried from one run to the next.
rev = c:put_job("count", ([[
local n = 0
return { schedule = "@manual", run = function(ctx)
  n = n + 1
  assert(ctx:put_fenced(%q .. baton.now(), tostring(n)))
end }
]]):format(P .. "count/"))
T.ok(c:loaded("count", rev), "counting job loaded")
for i = 1, 3 do
  c:cli("job", "run", "count")
  ended("count", i)
end
local counts = {}
for _, kv in ipairs(assert(e:get(P .. "count/", { prefix = true })).kvs) do counts[#counts + 1] = kv.value end
T.is(table.concat(counts, ","), "1,1,1", "each run starts from a fresh load of the file")

-- 2b. A run that patches a module all runs share retires its worker: the
-- next job must not see the patch.
rev = job("patch", [[
    local b = require "baton"
    local seen = b.patched_by_a_job
    b.patched_by_a_job = true
    assert(ctx:put_fenced(]] .. ("%q"):format(P .. "patch/") .. [[ .. baton.now(), tostring(seen)))]])
T.ok(c:loaded("patch", rev), "patching job loaded")
c:cli("job", "run", "patch")
T.ok(ended("patch", 1), "first patching run ended")
c:cli("job", "run", "patch")
T.ok(ended("patch", 2), "second patching run ended")
local seen = {}
for _, kv in ipairs(assert(e:get(P .. "patch/", { prefix = true })).kvs) do seen[#seen + 1] = kv.value end
T.is(table.concat(seen, ","), "nil,nil", "the second run did not see the first one's patch")
local pp = outputs("patch")
T.ok(pp[1] and pp[2] and pp[1].pid ~= pp[2].pid, "it ran on another worker")

-- 2c. So does a run that patches a module an earlier run of the worker
-- loaded: the first run registers it (its own: no retire), a later run
-- that finds it sets a field; no run may see that field.
rev = job("latemod", [[
    local m = package.loaded["baton_test_shared"]
    local seen = "fresh"
    if m then seen = tostring(m.patched); m.patched = true
    else package.loaded["baton_test_shared"] = {} end
    assert(ctx:put_fenced(]] .. ("%q"):format(P .. "latemod/") .. [[ .. baton.now(), seen))]])
T.ok(c:loaded("latemod", rev), "late-module job loaded")
for i = 1, 4 do
  c:cli("job", "run", "latemod")
  T.ok(ended("latemod", i), "late-module run " .. i .. " ended")
end
local lm = {}
for _, kv in ipairs(assert(e:get(P .. "latemod/", { prefix = true })).kvs) do lm[#lm + 1] = kv.value end
T.unlike(table.concat(lm, ","), "true", "no run saw another's patch of a module loaded after the worker started: " .. table.concat(lm, ","))
T.like(table.concat(lm, ","), "nil", "a run did find the module an earlier run of its worker loaded")

-- 3. A run that leaves a coroutine behind retires its worker.
rev = job("leaky", [[baton.go(function() baton.sleep(60) end)]])
T.ok(c:loaded("leaky", rev), "leaky job loaded")
c:cli("job", "run", "leaky")
T.ok(ended("leaky", 1), "first leaky run ended")
c:cli("job", "run", "leaky")
T.ok(ended("leaky", 2), "second leaky run ended")
local lk = outputs("leaky")
T.ok(lk[1] and lk[2] and lk[1].pid ~= lk[2].pid, "the second run got another worker")
T.ok(lk[1] and N.wait(5, function() return not alive(lk[1].pid) end), "the first worker exited")

-- 4. A run that times out: its worker is killed; the next run gets a new one.
rev = job("stuck", [[
    assert(ctx:put_fenced(]] .. ("%q"):format(P .. "stuckpid") .. [[, tostring(pid)))
    while true do end]], "timeout = 1,")
T.ok(c:loaded("stuck", rev), "stuck job loaded")
c:cli("job", "run", "stuck")
T.ok(ended("stuck", 1, 30), "the stuck run ended")
local rec = c:records("stuck")[1]
T.like(rec and rec.error or "", "timed out after 1 s", "recorded as timed out")
local spid = tonumber((assert(e:get(P .. "stuckpid")).kvs[1] or {}).value)
T.ok(spid and not alive(spid), "its worker was killed")
local before = #outputs("slow")
c:cli("job", "run", "slow")
T.ok(ended("slow", 6), "a run after it works")
local after = outputs("slow")
T.is(#after, before + 1, "and ran once")
T.isnt(after[#after].pid, spid, "on another worker")

T.unlike(c:log("a"), "session lost", "the node kept its lease throughout")

-- 5. A success is handed over to the node, which records it with others
-- (node/batch.lua); a node that froze right after its run returned does
-- not lose it: the worker records it itself after a second.
do
  local h = N.new("nodehandoff")
  h:start("h", 10)
  local hrev = h:put_job("quick", ([[
return { schedule = "@manual", run = function(ctx)
  assert(ctx:put_fenced(%q, "1"))
  baton.sleep(0.5)
end }]]):format(h.P .. "started"))
  T.ok(h:loaded("quick", hrev), "handoff: job loaded")
  h:cli("job", "run", "quick")
  T.ok(N.wait(15, function() return (assert(h.e:get(h.P .. "started")).kvs[1]) ~= nil end), "the run started")
  h:signal("h", "STOP")
  local frozen = baton.monotime()
  local r = N.wait(8, function()
    local x = h:records("quick")[1]
    return x and x.state == "succeeded" and x
  end)
  T.ok(r, ("recorded succeeded while its node was frozen (%.1f s after the freeze)")
    :format(baton.monotime() - frozen))
  T.ok(baton.monotime() - frozen < 8, "within the node's TTL")
  h:signal("h", "CONT")
  T.ok(N.wait(10, function() return h:log("h"):find("run ended", 1, true) end),
    "the node, thawed, ends the run")
  local x = h:records("quick")[1]
  T.is(x and #x.attempts, 1, "one attempt in the record")
  T.unlike(h:log("h"), "run result not recorded", "the node sees the worker's record as the run's end")
  T.unlike(h:log("h"), "session lost", "and kept its session")

  -- A node killed (kill -9) while it held a success it had not written:
  -- its worker writes it as it sees the node go, before its containment
  -- process ends it (without that, nothing would: the node is gone and
  -- the worker with it before its second is up).
  assert(h.e:delete(h.P .. "started"))
  h:cli("job", "run", "quick")
  T.ok(N.wait(15, function() return (assert(h.e:get(h.P .. "started")).kvs[1]) ~= nil end),
       "a second run started")
  h:signal("h", "STOP")
  baton.sleep(0.8) -- (the run returns 0.5 s after it started; the worker waits a second)
  h:signal("h", "KILL")
  local r2 = N.wait(10, function()
    for _, x in ipairs(h:records("quick")) do
      if x.state == "succeeded" and x.attempt == 1 and x ~= r and x.fire ~= r.fire then return x end
    end
  end)
  T.ok(r2, "the run of a node killed after it returned is recorded succeeded")
  h:destroy()
end

-- 6. ctx:put_fenced is made by the node (worker/main.lua): each write is a
-- member of its write batcher, guarded by the run's fence, and a run whose
-- claim is gone gets ELOST, as a write of its own would.
do
  local f = N.new("noderelay")
  f:start("f", 10, "--http 127.0.0.1:0")
  local prev = f:put_job("noop", [[return { schedule = "@manual", run = function() end }]])
  local frev = f:put_job("puts", ([[
return { schedule = "@manual", run = function(ctx)
  local done = 0
  for i = 1, 3 do
    baton.go(function()
      for j = 1, 10 do assert(ctx:put_fenced(%q .. i .. "/" .. j, tostring(ctx.fence))) end
      done = done + 1
    end)
  end
  while done < 3 do baton.sleep(0.01) end
end }]]):format(f.P .. "fenced/"))
  -- (the claim taken away: its lease-bound marker deleted; the leader then
  -- takes the run over, whose second attempt only returns)
  local lrev = f:put_job("late", ([[
return { schedule = "@manual", run = function(ctx)
  if ctx.attempt > 1 then return end
  assert(baton.etcd:delete(%q, { prefix = true }).deleted == 1)
  local ok, err, code = ctx:put_fenced(%q, "late")
  assert(baton.etcd:put(%q, baton.json.encode { ok = ok or false, err = err, code = code }))
end }]]):format(f.P .. "running/late/", f.P .. "late", f.P .. "answer"))
  -- (a put too large for the conductor to carry: the worker makes it)
  local grev = f:put_job("big", ([[
return { schedule = "@manual", run = function(ctx)
  assert(ctx:put_fenced(%q, string.rep("x", 64 * 1024)))
end }]]):format(f.P .. "big"))
  T.ok(f:loaded("noop", prev) and f:loaded("puts", frev) and f:loaded("late", lrev)
       and f:loaded("big", grev), "relay: jobs loaded")
  local addr = N.wait(10, function() return f:log("f"):match('msg="http listening"[^\n]* addr=(%S+)') end)
  local function batched()
    local r = baton.exec { "curl", "-sS", "--max-time", "5", "http://" .. tostring(addr) .. "/metrics" }
    return tonumber((r.stdout or ""):match("\nbaton_etcd_batched_transactions_total (%d+)")) or 0
  end
  local function run(name) -- the batcher's transactions during a run of name
    local before = batched()
    f:cli("job", "run", name)
    local rec = N.wait(20, function()
      local x = f:records(name)[1]
      return x and x.state ~= "running" and x
    end)
    baton.sleep(0.2) -- (the end's own write)
    return batched() - before, rec
  end
  local quiet = run("noop")
  local busy, rec = run("puts")
  local puts = assert(f.e:get(f.P .. "fenced/", { prefix = true }))
  T.is(#puts.kvs, 30, "30 fenced puts from 3 coroutines of one run, all written")
  local fences = {}
  for _, kv in ipairs(puts.kvs) do fences[kv.value] = true end
  T.ok(rec and fences[tostring(rec.fence)] and next(fences, next(fences)) == nil,
       "each guarded by the run's fence: " .. tostring(rec and rec.fence))
  T.ok(busy - quiet >= 30, ("each a member of the node's batcher: %d transactions for the run, %d for one that puts nothing")
    :format(busy, quiet))
  local large, brec = run("big")
  local bkv = assert(f.e:get(f.P .. "big")).kvs[1]
  T.ok(brec and brec.state == "succeeded" and bkv and #bkv.value == 64 * 1024,
       "a 64 KiB fenced put is written: " .. tostring(brec and brec.state))
  T.is(large, quiet, "by the worker itself, not in the node's batches")
  run("late")
  local a = json.decode(assert(f.e:get(f.P .. "answer")).kvs[1].value)
  T.ok(a and a.ok == false, "a fenced put after the claim was taken away is refused")
  T.is(a and a.code, "ELOST", "with ELOST")
  T.like(a and a.err or "", "^ELOST: ", "and a message that says so")
  T.is(#assert(f.e:get(f.P .. "late")).kvs, 0, "the refused value is not in etcd")
  f:destroy()
end

-- 7. An instant that waits for a slot past its job's starting_deadline is
-- recorded skipped, saying why, instead of starting late.
do
  local d = N.new("nodedeadline")
  d:start("d", 10, "--workers 1")
  local brev = d:put_job("busy", [[
return { schedule = "@manual", concurrency = "allow", run = function() baton.sleep(3.5) end }]])
  local trev = d:put_job("tick", [[
return { schedule = "* * * * * *", starting_deadline = 1, concurrency = "allow", run = function() end }]])
  T.ok(d:loaded("busy", brev) and d:loaded("tick", trev), "deadline: jobs loaded")
  baton.sleep(1.5)
  d:cli("job", "run", "busy")
  T.ok(N.wait(10, function()
    for _, x in ipairs(d:records("busy")) do if x.state == "succeeded" then return true end end
  end), "the slot's run ended")
  baton.sleep(1.5)
  d:cli("job", "pause", "tick")
  baton.sleep(0.5)
  local skipped, late = 0, {}
  for _, x in ipairs(d:records("tick")) do
    if x.state == "skipped" then
      skipped = skipped + 1
      T.like(x.error or "", "not started within starting_deadline %(1 s%)", "a skip says why: " .. tostring(x.error))
    elseif x.attempts and x.attempts[1] and x.attempts[1].started - x.fire > 1.5 then
      late[#late + 1] = ("%s started %.1f s late"):format(x.fire, x.attempts[1].started - x.fire)
    end
  end
  T.ok(skipped >= 1, ("instants that waited past the deadline were skipped: %d"):format(skipped))
  T.is(table.concat(late, ", "), "", "none started later than its deadline allows")
  T.like(d:log("d"), "not started within its starting_deadline", "the node says so")
  d:destroy()
end

-- Bad input: a node that could run nothing is refused.
local bad = c:cli("node", "--name", "b", "--workers", "0")
T.is(bad.code, 2, "--workers 0: usage error")
T.like(bad.stderr, "%-%-workers needs a whole number >= 1", "saying what is allowed")
c:destroy()
T.done()
