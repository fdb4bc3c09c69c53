-- baton node: retries with backoff, manual runs, pause/resume, forbid,
-- replace, and a queue processed exactly once by three nodes.
local T = require "tap"
local N = require "nodes"
local c = N.new("noderuns")
local e = c.e
local P = c.P

for _, n in ipairs { "a", "b", "c" } do c:start(n, 3) end

-- 1. Retries: fails twice, then succeeds; three attempts, delays ~1 s, ~2 s.
local rev = c:put_job("flaky", ([[
return {
  schedule = "@manual", timeout = 10,
  retry = { attempts = 3, backoff = 1, max_backoff = 8, jitter = 0 },
  run = function(ctx)
    local r = assert(baton.etcd:txn { success = { { get = { key = %q } } } })
    local n = tonumber(r.responses[1].kvs[1] and r.responses[1].kvs[1].value or "0") + 1
    assert(baton.etcd:put(%q, tostring(n)))
    if n < 3 then error("failing on purpose, try " .. n) end
  end,
}]]):format(P .. "flaky-count", P .. "flaky-count"))
T.ok(c:loaded("flaky", rev), "flaky job loaded on every node")
local out = c:cli("job", "run", "flaky")
T.is(out.code, 0, "baton job run queues a manual run")
local rec = N.wait(20, function()
  local list = c:records("flaky")
  return list[1] and list[1].state == "succeeded" and list[1]
end)
T.ok(rec, "the manual run ends succeeded")
rec = rec or { attempts = {} }
T.is(rec.manual, true, "the record says manual")
T.is(rec.attempt, 3, "on its third attempt")
T.is(#rec.attempts, 3, "three attempts recorded")
T.is((rec.attempts[1] or {}).state, "failed", "attempt 1 failed")
T.like((rec.attempts[1] or {}).error or "", "failing on purpose, try 1", "with its error")
T.is((rec.attempts[2] or {}).state, "failed", "attempt 2 failed")
T.is((rec.attempts[3] or {}).state, "succeeded", "attempt 3 succeeded")
local d1 = (rec.attempts[2] or {}).started and rec.attempts[2].started - rec.attempts[1].finished or -1
local d2 = (rec.attempts[3] or {}).started and rec.attempts[3].started - rec.attempts[2].finished or -1
T.ok(d1 >= 0.9 and d1 < 2.5, ("first backoff ~1 s (%.2f)"):format(d1))
T.ok(d2 >= 1.9 and d2 < 3.5, ("second backoff ~2 s (%.2f)"):format(d2))
T.is(assert(e:get(P .. "inflight/", { prefix = true })).count, 0, "nothing left in flight")

-- 2. Pause and resume.
rev = c:put_job("tick", [[
return { schedule = "* * * * * *", run = function(ctx) end }]])
T.ok(c:loaded("tick", rev), "tick loaded")
baton.sleep(2.5)
T.is(c:cli("job", "pause", "tick").code, 0, "pause")
baton.sleep(1.2)
local n1 = #c:records("tick")
baton.sleep(2.5)
local n2 = #c:records("tick")
T.is(n2, n1, "no run while paused")
T.is(c:cli("job", "resume", "tick").code, 0, "resume")
baton.sleep(2.5)
T.ok(#c:records("tick") > n2, "runs again after resume")
c:cli("job", "rm", "tick")

-- 3. forbid: instants that come while a run is on are skipped, with the reason.
rev = c:put_job("slow", [[
return { schedule = "* * * * * *", concurrency = "forbid", timeout = 10,
         run = function(ctx) baton.sleep(2.5) end }]])
T.ok(c:loaded("slow", rev), "slow loaded")
baton.sleep(6)
c:cli("job", "rm", "slow")
local list = c:records("slow")
local skipped, ran, overlap = 0, {}, false
for _, r in ipairs(list) do
  if r.state == "skipped" then
    skipped = skipped + 1
    T.like(r.error or "", "a previous run is still running", "skip reason: " .. r.id)
  elseif r.started and r.finished then
    ran[#ran + 1] = r
  end
end
table.sort(ran, function(x, y) return x.started < y.started end)
for i = 2, #ran do if ran[i].started < ran[i - 1].finished - 0.05 then overlap = true end end
T.ok(skipped >= 2, "instants skipped while a run was on (" .. skipped .. ")")
T.ok(#ran >= 1 and not overlap, "runs never overlapped (" .. #ran .. " ran)")

-- 4. replace: a new instant stops the running run first.
rev = c:put_job("repl", [[
return { schedule = "*/2 * * * * *", concurrency = "replace", timeout = 30,
         run = function(ctx)
           for i = 1, 300 do
             if ctx:cancelled() then error("cancelled") end
             baton.sleep(0.1)
           end
         end }]])
T.ok(c:loaded("repl", rev), "repl loaded")
baton.sleep(7)
c:cli("job", "pause", "repl")
list = c:records("repl")
local replaced = 0
for _, r in ipairs(list) do
  if r.state == "killed" and (r.error or ""):find("replaced by run") then replaced = replaced + 1 end
end
T.ok(replaced >= 1, "a running run was replaced by the next instant (" .. replaced .. ")")

-- 5. A queue processed exactly once by three nodes.
rev = c:put_job("orders", ([[
return { queue = "orders", timeout = 10,
         run = function(ctx)
           local id = baton.json.decode(ctx.task.value).id
           baton.sleep(0.1)
           assert(ctx:put_fenced(%q .. id .. "/" .. ctx.node .. "-" .. math.random(1e9), "done"))
         end }]]):format(P .. "done/"))
T.ok(c:loaded("orders", rev), "queue job loaded")
for i = 1, 30 do
  local r = c:cli("queue", "push", "orders", baton.json.encode { id = i })
  if r.code ~= 0 then T.fail("push " .. i .. ": " .. r.stderr) end
end
local all = N.wait(30, function()
  local r = assert(e:get(P .. "queue/orders/", { prefix = true, count_only = true }))
  return r.count == 0
end)
T.ok(all, "the queue drained")
local done = assert(e:get(P .. "done/", { prefix = true, keys_only = true }))
local per = {}
for _, kv in ipairs(done.kvs) do
  local id = kv.key:sub(#P + 6):match("^(%d+)/")
  per[id] = (per[id] or 0) + 1
end
local once, missing = 0, 0
for i = 1, 30 do
  if per[tostring(i)] == 1 then once = once + 1 elseif not per[tostring(i)] then missing = missing + 1 end
end
T.is(once, 30, "each of 30 tasks processed exactly once (" .. missing .. " missing)")
local nodes_used = {}
for _, r in ipairs(c:records("orders")) do nodes_used[r.node] = true end
local nu = 0
for _ in pairs(nodes_used) do nu = nu + 1 end
T.ok(nu >= 2, "tasks spread over nodes (" .. nu .. ")")

-- 6. A run that started on version 1 finishes on version 1 after a put of
-- version 2, and its record names the revision it ran.
local function versioned(v)
  return ([[
return { schedule = "@manual", timeout = 20,
         run = function(ctx) baton.sleep(2); assert(ctx:put_fenced(%q .. ctx.attempt .. "-" .. %q, %q)) end }]])
    :format(P .. "ver/", v, v)
end
local rv1 = c:put_job("ver", versioned("v1"))
T.ok(c:loaded("ver", rv1), "version 1 loaded")
c:cli("job", "run", "ver")
local started = N.wait(10, function()
  local r = c:records("ver")[1]
  return r and r.state == "running" and r
end)
T.ok(started, "the run started on version 1")
local rv2 = c:put_job("ver", versioned("v2"))
T.ok(c:loaded("ver", rv2), "version 2 loaded while it runs")
done = N.wait(15, function()
  local r = c:records("ver")[1]
  return r and r.state == "succeeded" and r
end)
T.ok(done, "the run finished")
T.is(done and done.code_revision, rv1, "its record names version 1's revision")
local outs = assert(e:get(P .. "ver/", { prefix = true }))
T.is(outs.kvs[1] and outs.kvs[1].value, "v1", "and it ran version 1's code")

c:destroy()
T.done()
