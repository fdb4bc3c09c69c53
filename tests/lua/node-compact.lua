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

-- At scale (issue 13): thousands of jobs, listed in pages at one revision.
-- While the node is cut off, a tenth of them change, a tenth go and as
-- many new ones come, and the store is compacted past the node's watch
-- revision: the node lists again and ends with exactly the store's jobs,
-- each at its stored revision.
local JOBS = 3000
local function src(i, v)
  return ("-- v%d\nreturn { schedule = %q, run = function(ctx) end }\n")
    :format(v, i % 2 == 0 and "@manual" or "0 0 1 1 *")
end
local function put_many(list) -- list of {name, source}, in txns of 128
  for i = 1, #list, 128 do
    local ops = {}
    for k = i, math.min(i + 127, #list) do
      ops[#ops + 1] = { put = { key = P .. "jobs/" .. list[k][1], value = list[k][2] } }
    end
    assert(other:txn { success = ops })
  end
end
local function name(i) return ("many-%05d"):format(i) end
local first = {}
for i = 1, JOBS do first[#first + 1] = { name(i), src(i, 1) } end
-- and one the node rejects (its status holds the error), deleted below
first[#first + 1] = { "broken", "return { schedule = 'nope', run = function(ctx) end }" }
put_many(first)
-- The store's jobs and revisions, and this node's statuses of them.
local function store()
  local jobs, from, stop, rev = {}, P .. "jobs/", require("baton.etcd").prefix_end(P .. "jobs/"), nil
  repeat
    local r = assert(other:get(from, { range_end = stop, limit = 1000, revision = rev }))
    rev = r.revision
    for _, kv in ipairs(r.kvs) do jobs[kv.key:sub(#P + 6)] = kv.mod_revision end
    from = r.kvs[#r.kvs] and r.kvs[#r.kvs].key .. "\0"
  until not r.more
  return jobs
end
local function statuses()
  local st, from, stop = {}, P .. "status/", require("baton.etcd").prefix_end(P .. "status/")
  repeat
    local r = assert(other:get(from, { range_end = stop, limit = 1000 }))
    for _, kv in ipairs(r.kvs) do
      local job, node = kv.key:sub(#P + 8):match("^(.+)/([^/]+)$")
      local ok, v = pcall(baton.json.decode, kv.value)
      if node == "solo" then st[job] = ok and type(v) == "table" and v.revision or false end
    end
    from = r.kvs[#r.kvs] and r.kvs[#r.kvs].key .. "\0"
  until not r.more
  return st
end
-- What differs between the store and the node's statuses (nil: nothing).
local function diff()
  local want, have = store(), statuses()
  local missing, extra, stale = 0, 0, 0
  for j, rev in pairs(want) do
    if have[j] == nil then missing = missing + 1 elseif have[j] ~= rev then stale = stale + 1 end
  end
  for j in pairs(have) do if not want[j] then extra = extra + 1 end end
  if missing + extra + stale == 0 then return nil end
  return ("%d jobs without a status, %d statuses of jobs not stored, %d at another revision")
    :format(missing, extra, stale)
end
local why
T.ok(N.wait(60, function() why = diff(); return not why end),
     ("the node loaded %d jobs (one rejected): one status each, at the stored revision"):format(JOBS + 3))
if why then T.diag(why) end

cl:member_stop(1)
local changes = {}
for i = 1, JOBS, 10 do changes[#changes + 1] = { name(i), src(i, 2) } end          -- changed
for i = JOBS + 1, JOBS + JOBS / 10 do changes[#changes + 1] = { name(i), src(i, 1) } end -- added
put_many(changes)
local gone = { { delete = { key = P .. "jobs/broken" } } }
for i = 5, JOBS, 10 do gone[#gone + 1] = { delete = { key = P .. "jobs/" .. name(i) } } end
for i = 1, #gone, 128 do                                                           -- removed
  assert(other:txn { success = { unpack(gone, i, math.min(i + 127, #gone)) } })
end
for i = 1, 5 do assert(other:put(P .. "filler", "more" .. i)) end
assert(other:compact(assert(other:get(P .. "filler")).revision))
cl:member_start(1)

T.ok(N.wait(60, function() why = diff(); return not why end),
     "after the compaction the node's statuses are exactly the store's jobs at their revisions")
if why then T.diag(why) end
local st = statuses()
T.ok(st[name(5)] == nil and st[name(JOBS - 5)] == nil and st.broken == nil,
     "removed jobs' status keys are gone (the rejected one's too)")
T.like(c:log("solo"), "job store listed[^\n]*pages=[2-9][^\n]*removed=" .. JOBS / 10 + 1,
       "the listing after the compaction came in pages and removed the deleted jobs")
-- A changed job runs its new revision.
local changed = name(11)
local rev2 = assert(other:get(P .. "jobs/" .. changed)).kvs[1].mod_revision
local r = c:cli("job", "run", changed)
T.is(r.code, 0, "baton job run of a changed job", r.stderr)
local rec
T.ok(N.wait(20, function()
  for _, x in ipairs(c:records(changed)) do if x.state == "succeeded" then rec = x end end
  return rec
end), "its run finished")
T.is(rec and rec.code_revision, rev2, "the run ran the job's new revision")
if not rec then
  T.diag(baton.json.encode(c:records(changed)))
  T.diag(c:log("solo"):sub(-3000))
end

c:destroy()
other:close()
c.e:close()
cl:destroy()
T.done()
