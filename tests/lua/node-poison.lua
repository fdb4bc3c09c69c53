-- Bytes a run cannot be given or a record cannot hold as they are (issue
-- 22: a queue task with a NUL byte took a worker slot for good):
--   0. Pool:with_slot gives the slot back whatever the function does
--      (returns, raises, gives it back early and then raises);
--   1. queue tasks whose value or key holds a NUL, on a --workers 2 node:
--      recorded failed with the reason, never given to the job, not
--      retried; the good tasks run; every slot and worker is free once the
--      runs end (/metrics); the event of such a failure is made; after a
--      restart none runs again;
--   2. a job whose error holds a NUL: recorded failed with it (U+FFFD), at
--      once, not after its timeout;
--   3. a trigger written raw to etcd whose param spells \u0000: recorded
--      failed, not run with the param cut or dropped;
--   4. ctx:put_fenced of a small value with a NUL byte: written as it is;
--   5. a job whose top level raises a NUL: its status says so, and the
--      jobs after it load;
--   6. a run given what JSON cannot hold at all (NaN among a
--      job's shard_params): failed with the reason, not retried;
--   7. kill -9 of the node while it records such failures: after the
--      restart every poisoned task is recorded failed once and never run,
--      every good task succeeded, no slot is left taken.
local T = require "tap"
local N = require "nodes"
local json = baton.json

local FFFD = "\239\191\189"

-- 0. The pool alone.
do
  local pool = require "baton.node.pool"
  local node = { max_workers = 2 }
  local p = pool.new(node)
  local ok, err = pcall(p.with_slot, p, nil, function() error("boom", 0) end)
  T.ok(not ok and tostring(err):find("^boom\nstack traceback:"), "with_slot: an error of the function is raised again, with its traceback")
  T.is(p.slots, 0, "with_slot: the slot is back after a raise")
  ok, err = pcall(p.with_slot, p, nil, function(release) release(); release(); error("late") end)
  T.ok(not ok and tostring(err):find("late", 1, true), "with_slot: raised after an early release")
  T.is(p.slots, 0, "with_slot: given back once, not twice")
  local a, b, c = p:with_slot(nil, function(_, x) return x, "two" end, "one")
  T.ok(a == true and b == "one" and c == "two", "with_slot: true and what the function returned")
  T.is(p.slots, 0, "with_slot: back after a return")
  -- Two slots, held; a third waits and gets one when a holder raises.
  local gate, order = baton._cond(), {}
  for i = 1, 2 do
    baton.go(function()
      pcall(p.with_slot, p, nil, function() gate:wait(); error("holder " .. i) end)
    end)
  end
  baton.sleep(0)
  T.is(p.slots, 2, "two holders take both slots")
  baton.go(function() p:with_slot(nil, function() order[#order + 1] = "third" end) end)
  baton.sleep(0)
  T.is(#order, 0, "a third waits")
  gate:signal()
  baton.sleep(0); baton.sleep(0)
  T.is(order[1], "third", "and runs once a holder raised")
  gate:signal()
  baton.sleep(0); baton.sleep(0)
  T.is(p.slots, 0, "every slot is free in the end")
  node.stopping = true
  p:close()
  T.is(p:with_slot(nil, function() error("not called") end), false, "a closed pool calls nothing")
end

local c = N.new("nodepoison")
local e, P = c.e, c.P
c:start("a", 3, "--workers 2 --http 127.0.0.1:0")

local function addr()
  return N.wait(10, function() return c:log("a"):match('.*msg="http listening"[^\n]* addr=(%S+)') end)
end

local function metric(name)
  local r = baton.exec { "curl", "-sS", "--max-time", "5", "http://" .. tostring(addr()) .. "/metrics" }
  return tonumber((r.stdout or ""):match("\n" .. name:gsub("[%[%]{}\"=]", "%%%0") .. " (%S+)"))
end

-- The queue job puts P ran/<task id> (fenced) for each task it is given.
local qrev = c:put_job("q", ([[
return { queue = "q", run = function(ctx)
  baton.sleep(0.2)
  assert(ctx:put_fenced(%q .. ctx.task.key:match("[^/]+$"), ctx.task.value))
end }]]):format(P .. "ran/"))
-- An event job for q's failures: P alerts/<event id> = the failed run's id.
local arev = c:put_job("alert", ([[
return { on = { failed = { "q" } }, run = function(ctx)
  assert(ctx:put_fenced(%q .. ctx.job .. "/" .. ctx.event.id, ctx.event.id))
end }]]):format(P .. "alerts/"))
T.ok(c:loaded("q", qrev) and c:loaded("alert", arev), "jobs loaded")

local function rec_of(job, id)
  for _, r in ipairs(c:records(job)) do
    if r.id == id then return r end
  end
end

local function ended(job, ids, secs)
  return N.wait(secs or 30, function()
    for _, id in ipairs(ids) do
      local r = rec_of(job, id)
      if not r or r.state == "running" or r.state == "retrying" then return false end
    end
    return true
  end)
end

local function count(prefix)
  return assert(e:get(P .. prefix, { prefix = true, count_only = true })).count
end

-- 1. Five poisoned tasks (4 values, 1 key with a NUL) before three good
-- ones, on a node with 2 slots.
local qp = P .. "queue/q/"
for i = 1, 4 do assert(e:put(qp .. "p" .. i, "a\0b" .. i)) end
assert(e:put(qp .. "bad\0id", "fine value"))
for i = 1, 3 do assert(e:put(qp .. "g" .. i, "good " .. i)) end
local poisoned = { "p1", "p2", "p3", "p4", "bad\0id" }
T.ok(ended("q", { "g1", "g2", "g3" }), "the good tasks ran after five poisoned ones on a --workers 2 node")
T.ok(ended("q", poisoned, 10), "the poisoned tasks ended")
for _, id in ipairs(poisoned) do
  local r = rec_of("q", id) or {}
  local name = id:gsub("%z", "\\0")
  T.is(r.state, "failed", name .. ": recorded failed")
  T.like(r.error or "", id == "bad\0id" and "^cannot be run: its id holds a NUL byte %(byte 4%)"
    or "^cannot be run: its task's value holds a NUL byte %(byte 2%); a run is given text without NUL bytes$",
    name .. ": the reason says why")
  T.is(r.attempt, 1, name .. ": one attempt, not retried")
end
for i = 1, 3 do T.is((rec_of("q", "g" .. i) or {}).state, "succeeded", "g" .. i .. " succeeded") end
T.is(count("ran/"), 3, "the job was given the three good tasks only")
T.is(count("queue/q/"), 0, "every task left the queue, the poisoned ones too")
T.is(count("pending/q/"), 0, "no retry is pending")
T.ok(N.wait(10, function() return count("alerts/alert/") >= 5 end),
  "the event job ran for each failure, the NUL id's too")
local ev = assert(e:get(P .. "alerts/alert/", { prefix = true }))
local ids = {}
for _, kv in ipairs(ev.kvs) do ids[kv.value] = true end
T.ok(ids["bad" .. FFFD .. "id"], "its event names the run with U+FFFD for the NUL")
T.ok(N.wait(10, function()
  return metric("baton_worker_slots_taken") == 0 and metric('baton_workers{state="busy"}') == 0
end), "/metrics: no slot taken, no worker busy once the runs ended")
T.unlike(c:log("a"), "node task failed", "nothing raised in the node")

-- The runs listing (ids from raw keys) answers.
local r = baton.exec { "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
                       "http://" .. tostring(addr()) .. "/api/v1/jobs/q/runs?limit=100" }
T.is(r.stdout, "200", "GET /api/v1/jobs/q/runs: 200 with a NUL in a run id")
r = c:cli("job", "history", "q", "--json")
T.ok(r.code == 0 and r.stdout:find("bad" .. FFFD .. "id", 1, true),
  "job history --json: the run id with U+FFFD for its NUL: " .. r.stderr)

-- 2. A job whose error holds a NUL byte, with a long timeout.
local erev = c:put_job("err", [[
return { schedule = "@manual", timeout = 120, run = function() error("bad\0byte", 0) end }]])
T.ok(c:loaded("err", erev), "err loaded")
local t0 = baton.monotime()
c:cli("job", "run", "err")
local er = N.wait(20, function()
  local x = c:records("err")[1]
  return x and x.state ~= "running" and x
end)
-- (as the run's output keeps it: the four characters \x00, worker/output.lua)
T.ok(er and er.state == "failed" and er.error == "bad\\x00byte",
  "an error with a NUL is recorded failed, the NUL as \\x00: " .. tostring(er and er.error))
T.ok(baton.monotime() - t0 < 20, "at once, not after its timeout")

-- 3. A trigger written raw to etcd, with a param that spells \u0000.
local prev = c:put_job("pj", ([[
return { schedule = "@manual", params = { who = "nobody" }, run = function(ctx)
  assert(ctx:put_fenced(%q, ctx.params.who))
end }]]):format(P .. "pj-ran"))
T.ok(c:loaded("pj", prev), "pj loaded")
assert(e:put(P .. "trigger/pj/raw1", '{"params":{"who":"a\\u0000b"}}'))
local pr = N.wait(20, function()
  local x = c:records("pj")[1]
  return x and x.state ~= "running" and x
end)
T.is(pr and pr.state, "failed", "a trigger whose param spells \\u0000: recorded failed")
T.like(pr and pr.error or "", "^cannot be run: param who holds a NUL byte %(byte 2%)", "saying why")
T.is(pr and pr.params and pr.params.who, "a" .. FFFD .. "b", "the record shows the param, U+FFFD for the NUL")
T.is(count("pj-ran"), 0, "the job did not run, neither with the param cut nor dropped")
T.is(count("trigger/pj/"), 0, "the trigger is gone")

-- 4. ctx:put_fenced of a small value with a NUL byte.
local brev = c:put_job("bin", ([[
return { schedule = "@manual", run = function(ctx)
  assert(ctx:put_fenced(%q, "x\0y"))
end }]]):format(P .. "bin"))
T.ok(c:loaded("bin", brev), "bin loaded")
c:cli("job", "run", "bin")
local br = N.wait(20, function()
  local x = c:records("bin")[1]
  return x and x.state ~= "running" and x
end)
T.is(br and br.state, "succeeded", "put_fenced of a value with a NUL succeeds: " .. tostring(br and br.error))
local bkv = assert(e:get(P .. "bin")).kvs[1]
T.is(bkv and bkv.value, "x\0y", "and the value is written as it is")

-- 5. A job whose top level raises a NUL (written raw: job put refuses it),
-- then one put after it.
local krev = assert(e:put(P .. "jobs/boom", 'error("top\\0level", 0)')).revision
local okrev = c:put_job("after", [[return { schedule = "@manual", run = function() end }]])
T.ok(c:loaded("after", okrev), "a job put after it loads")
local st = N.wait(10, function()
  local kv = assert(e:get(P .. "status/boom/a")).kvs[1]
  local v = kv and json.decode(kv.value)
  return v and v.revision == krev and v
end)
T.like(st and st.error or "", "top" .. FFFD .. "level", "its status says why, U+FFFD for the NUL")

-- 6. A run whose data JSON cannot hold at all (NaN among a
-- scheduled job's shard_params): failed with the reason, not retried; the
-- other shard runs; every slot comes back.
local srev = c:put_job("sh", [[
return { schedule = "@every 2s", shards = 2, shard_params = { 0/0, "two" },
         retry = { attempts = 3, backoff = 1 }, run = function(ctx) end }]])
T.ok(c:loaded("sh", srev), "sh loaded")
local sh = N.wait(20, function()
  local one, two
  for _, x in ipairs(c:records("sh")) do
    if x.shard == 1 and x.state == "failed" then one = x end
    if x.shard == 2 and x.state == "succeeded" then two = x end
  end
  return one and two and { one, two }
end)
c:cli("job", "pause", "sh")
T.ok(sh, "a shard whose param cannot be sent failed, the other succeeded")
T.is(sh and sh[1].error, "cannot be run: what it is given cannot be sent to a worker (cannot encode NaN number)",
  "the reason says why")
T.is(sh and sh[1].attempt, 1, "not retried, although the job retries")
T.ok(N.wait(10, function()
  return metric("baton_worker_slots_taken") == 0 and metric('baton_workers{state="busy"}') == 0
end), "/metrics: no slot taken, no worker busy")

-- 1b. After a restart nothing poisoned runs again.
local before = {}
for _, id in ipairs(poisoned) do before[id] = (rec_of("q", id) or {}).attempt end
T.ok(c:stop("a"), "node stopped")
c:start("a", 3, "--workers 2 --http 127.0.0.1:0")
T.ok(c:loaded("q", qrev, 20), "node back")
baton.sleep(2)
for _, id in ipairs(poisoned) do
  local x = rec_of("q", id) or {}
  T.ok(x.state == "failed" and x.attempt == before[id], id:gsub("%z", "\\0") .. ": not run again after a restart")
end
T.is(count("ran/"), 3, "no task ran again")

-- 7. kill -9 while the node records such failures: poisoned and good tasks
-- interleaved, the node killed while it works through them.
local good, bad = {}, {}
for i = 1, 30 do
  local id = ("k%02d"):format(i)
  if i % 3 == 0 then good[#good + 1] = id; assert(e:put(qp .. id, "ok " .. i))
  else bad[#bad + 1] = id; assert(e:put(qp .. id, "x\0" .. i)) end
end
N.wait(5, function() return #c:records("q") > #poisoned + 3 + 8 end)
c:signal("a", "KILL")
c.nodes.a:wait()
c.nodes.a = nil
-- (its registration goes with its lease, 3 s; then the name is free)
T.ok(N.wait(15, function() return count("nodes/a") == 0 end), "the killed node's lease expired")
c:start("a", 3, "--workers 2 --http 127.0.0.1:0")
local all = {}
for _, id in ipairs(good) do all[#all + 1] = id end
for _, id in ipairs(bad) do all[#all + 1] = id end
T.ok(ended("q", all, 60), "after kill -9 and a restart every task ended")
local again = 0
for _, id in ipairs(all) do
  if ((rec_of("q", id) or {}).attempt or 0) > 1 then again = again + 1 end
end
T.note(("%d of the 30 runs were in flight when the node was killed"):format(again))
local wrong = {}
for _, id in ipairs(bad) do
  local x = rec_of("q", id) or {}
  if x.state ~= "failed" or not (x.error or ""):find("NUL byte", 1, true) then
    wrong[#wrong + 1] = id .. "=" .. tostring(x.state) .. ":" .. tostring(x.error)
  end
  if assert(e:get(P .. "ran/" .. id)).kvs[1] then wrong[#wrong + 1] = id .. " ran" end
end
T.is(table.concat(wrong, " "), "", "every poisoned task: failed with the reason, never given to the job")
wrong = {}
for _, id in ipairs(good) do
  local x = rec_of("q", id) or {}
  if x.state ~= "succeeded" or not assert(e:get(P .. "ran/" .. id)).kvs[1] then
    wrong[#wrong + 1] = id .. "=" .. tostring(x.state)
  end
end
T.is(table.concat(wrong, " "), "", "every good task succeeded")
T.is(count("queue/q/"), 0, "the queue is empty")
T.ok(N.wait(10, function()
  return metric("baton_worker_slots_taken") == 0 and metric('baton_workers{state="busy"}') == 0
end), "/metrics: no slot taken, no worker busy")
T.unlike(c:log("a"), "node task failed", "nothing raised in the node")

-- 7b. The same, made certain: what a node killed between its claim of a
-- poisoned task and the record of its end leaves (the record running,
-- inflight/, the task; the lease-bound marker gone with the lease). The
-- leader hands the run on, and the next attempt is recorded failed.
local function orphan(id, value)
  local key = qp .. id
  local rec = { job = "q", fire = baton.now(), node = "gone", attempt = 1, state = "running",
                started = baton.now(), code_revision = qrev, attempts = json.array {}, token = "gone:1:1",
                task = key }
  assert(e:txn { success = {
    { put = { key = P .. "runs/q/" .. id, value = json.encode(rec, { nul = "replace" }) } },
    { put = { key = P .. "inflight/q/" .. id, value = json.encode { node = "gone", attempt = 1, token = "gone:1:1" } } },
    { put = { key = key, value = value } } } })
end
orphan("o1", "v\0")
orphan("o\0x", "fine")
T.ok(ended("q", { "o1", "o\0x" }, 30), "orphaned poisoned runs ended")
for _, id in ipairs { "o1", "o\0x" } do
  local x = rec_of("q", id) or {}
  local name = id:gsub("%z", "\\0")
  T.ok(x.state == "failed" and x.attempt == 2 and (x.error or ""):find("NUL byte", 1, true),
    name .. ": the next attempt is recorded failed with the reason: " .. tostring(x.state) .. " " .. tostring(x.error))
  T.is(count("ran/" .. id), 0, name .. ": never given to the job")
end
T.is(count("queue/q/"), 0, "their tasks left the queue, the one with a NUL in its key too")

c:destroy()
T.done()
