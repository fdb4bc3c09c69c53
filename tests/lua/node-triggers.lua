-- A manual run asked for right after the job's put (`baton job put &&
-- baton job run`): the request can reach a node before the job has
-- loaded there (jobs/ and trigger/ are watched apart, and a load waits on
-- the sandbox). It waits for the job, and runs once; a request deleted
-- while it waited does not run.
local T = require "tap"
local N = require "nodes"
local c = N.new("nodetriggers")
local e, P = c.e, c.P
for _, n in ipairs { "a", "b" } do c:start(n, 3) end
T.ok(N.wait(10, function()
  return assert(e:get(P .. "nodes/", { prefix = true })).count == 2
end), "two nodes up")

local function job(name, extra)
  return ([[return { schedule = "@manual", timeout = 10, %s
  run = function(ctx) baton.log.info("ran " .. ctx.job) end }]]):format(extra or "")
end

local function trigger(name, id)
  local key = P .. "trigger/" .. name .. "/" .. id
  assert(e:put(key, baton.json.encode { at = baton.now() }))
  return key
end

local function settled(name, n, secs)
  return N.wait(secs or 15, function()
    local list = c:records(name)
    if #list < n then return end
    for _, r in ipairs(list) do if r.state ~= "succeeded" then return end end
    return list
  end)
end

-- 1. The request is in etcd before the job is: it waits on both nodes,
-- and runs once when the job loads.
local k1 = trigger("early", "1-a")
baton.sleep(1)
local rev = c:put_job("early", job("early"))
local recs = settled("early", 1)
T.ok(recs, "the request that came before its job ran")
baton.sleep(1.5)
T.is(#c:records("early"), 1, "once")
T.is(assert(e:get(k1)).count, 0, "and its request is gone")
T.ok(c:loaded("early", rev), "both nodes loaded the job")

-- 2. A request deleted while it waited does not run when the job comes;
-- one that still waits does.
trigger("late", "1-gone")
local keep = trigger("late", "2-kept")
baton.sleep(0.5)
assert(e:delete(P .. "trigger/late/1-gone"))
baton.sleep(0.5)
c:put_job("late", job("late"))
recs = settled("late", 1)
T.ok(recs, "the request that still waited ran")
baton.sleep(1.5)
T.is(#c:records("late"), 1, "the deleted one did not")
T.is(assert(e:get(keep)).count, 0, "the request that ran is gone")

-- 3. Put and run at once, as a deploy script does, many times over: every
-- request runs, once. The job's file takes a moment to load (its top
-- level works), so the request mostly arrives while it loads.
local slow = [[local x = 0
for i = 1, 3e6 do x = x + i % 7 end
return { schedule = "@manual", timeout = 10,
  run = function(ctx) baton.log.info("ran " .. ctx.job) end }]]
local lost = 0
for i = 1, 5 do
  local name = "deploy" .. i
  c:put_job(name, slow)
  local r = c:cli("job", "run", name)
  T.is(r.code, 0, "job run " .. name .. " right after its put: " .. r.stderr:gsub("\n$", ""))
  if not settled(name, 1, 15) then lost = lost + 1 end
end
T.is(lost, 0, "no request made right after a put was lost")

c:destroy()
T.done()
