-- The node's watches resume after a disconnect, and when the revision they
-- must resume from was compacted meanwhile, the node lists the store again
-- and applies only the difference: a job changed, a job added and a job
-- removed while it was cut off are all picked up.
local T = require "tap"
local H = require "etcdh"
local N = require "nodes"

local cl = H.cluster()
local m1 = cl:member_url(1)
local urls = {}
for u in cl.url:gmatch("[^,]+") do if u ~= m1 then urls[#urls + 1] = u end end
-- The node talks to member 1 only; the test writes through the others.
local c = N.new("nodecompact", m1)
local other = baton.etcd.new { endpoints = table.concat(urls, ",") }
local P = c.P

c:start("solo", 5)
local r1 = c:put_job("keep", [[return { schedule = "@manual", run = function(ctx) end }]])
local r2 = c:put_job("gone", [[return { schedule = "@manual", run = function(ctx) end }]])
T.ok(c:loaded("keep", r1) and c:loaded("gone", r2), "the node loaded two jobs")

cl:member_stop(1)
-- While member 1 is down: change one job, add one, remove one, compact.
assert(other:put(P .. "jobs/keep", [[return { schedule = "@manual", description = "v2", run = function(ctx) end }]]))
assert(other:put(P .. "jobs/added", [[return { schedule = "@manual", run = function(ctx) end }]]))
assert(other:delete(P .. "jobs/gone"))
local cur = assert(other:get(P .. "jobs/keep")).revision
for i = 1, 5 do assert(other:put(P .. "filler", tostring(i))) end
assert(other:compact(assert(other:get(P .. "filler")).revision))
cl:member_start(1)

local keep_rev = assert(other:get(P .. "jobs/keep")).kvs[1].mod_revision
local function status(job)
  local r = other:get(P .. "status/" .. job .. "/solo")
  return r and r.kvs[1] and baton.json.decode(r.kvs[1].value)
end
T.ok(N.wait(30, function()
  local s = status("keep")
  return s and s.revision == keep_rev
end), "after the compaction the changed job's new version is loaded")
T.ok(N.wait(10, function() return status("added") end), "the added job is loaded")
T.ok(N.wait(10, function() return not status("gone") end), "the removed job is unloaded (its status is gone)")
T.like(c:log("solo"), "compact", "the node logged the compaction and the new listing")
T.ok(cur > 0, "revision moved on")

c:destroy()
other:close()
c.e:close()
cl:destroy()
T.done()
