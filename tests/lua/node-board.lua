-- The claims board (node/board.lua): a node alone posts nothing; on three
-- nodes, each posts the instants it claimed, the nodes whose turn came
-- later go no further on what was posted (no read: fewer batched
-- transactions per run than claim + end + one read per later node), every
-- posted run is one its poster holds, and every instant runs. A frozen node
-- posts nothing, so its instants are still taken over within the grace;
-- posts that are not the board's format change nothing.
local T = require "tap"
local N = require "nodes"
local X = require "exposition"
local c = N.new("nodeboard")
local e, P = c.e, c.P
local JOBS = 12

local function iso(t) return os.date("!%Y-%m-%dT%H:%M:%SZ", t) end

local function log_addr(name)
  return c:log(name):match('msg="http listening".- addr=(%S+)')
end

-- The sum over the nodes of a counter (all its series).
local function total(metric)
  local sum = 0
  for _, name in ipairs { "a", "b", "c" } do
    local r = assert(baton.exec { "curl", "-sS", "--max-time", "5", "http://" .. log_addr(name) .. "/metrics" })
    sum = sum + X.sum(X.parse(r.stdout), metric)
  end
  return sum
end

-- Every event under P claims/ from revision rev on: {node=, runs=}.
local function posts(from_rev)
  local r = assert(e:get(P .. "claims/", { prefix = true }))
  local w = assert(e:watch(P .. "claims/", { prefix = true, start_revision = from_rev }))
  local out = {}
  while true do
    local evs = w:next(0.3)
    if not evs or #evs == 0 then break end
    for _, ev in ipairs(evs) do
      if ev.type == "put" then
        local ok, v = pcall(baton.json.decode, ev.kv.value)
        out[#out + 1] = { node = ev.kv.key:sub(#P + 8), runs = ok and type(v) == "table" and v.runs,
                          raw = ev.kv.value, lease = ev.kv.lease }
      end
    end
    if evs[#evs].kv.mod_revision >= r.revision then break end
  end
  w:cancel()
  return out
end

-- 0. A burst longer than a post goes in several, each run once.
do
  local board = require "baton.node.board"
  local max = board.MAX_POST
  board.MAX_POST = 3
  local b = board.new { nodes = { a = {}, b = {} }, name = "a" }
  for i = 1, 4 do b:note("j1", "i" .. i) end
  b:note("j2", "x")
  b:note("j3", "y")
  local seen, sizes, posts = {}, {}, 0
  while b.n > 0 and posts < 10 do
    local v = baton.json.decode(b:take())
    posts = posts + 1
    local size = 0
    for job, ids in pairs(v.runs) do
      for _, id in ipairs(ids) do
        seen[job .. "/" .. id] = (seen[job .. "/" .. id] or 0) + 1
        size = size + 1
      end
    end
    sizes[#sizes + 1] = size
  end
  board.MAX_POST = max
  local all = {}
  for k, n in pairs(seen) do all[#all + 1] = k .. "=" .. n end
  table.sort(all)
  T.is(table.concat(all, " "), "j1/i1=1 j1/i2=1 j1/i3=1 j1/i4=1 j2/x=1 j3/y=1", "6 noted runs, each posted once")
  T.is(table.concat(sizes, ","), "3,3", "in 2 posts of at most 3")
  local alone = board.new { nodes = { a = {} }, name = "a" }
  alone:note("j1", "i1")
  T.is(alone.n, 0, "a node alone notes nothing")
end

for i = 1, JOBS do
  c:put_job("t" .. i, [[
return { schedule = "* * * * * *", concurrency = "allow", timeout = 10, run = function(ctx) end }]])
end
local rev0 = assert(e:get(P .. "jobs/", { prefix = true, count_only = true })).revision

-- 1. A node alone: nobody would read its posts.
c:start("a", 10, "--http 127.0.0.1:0")
T.ok(N.wait(10, function() return #c:records("t1") >= 3 end), "node a alone runs the jobs")
T.is(#posts(rev0 + 1), 0, "and posts nothing on the board")

-- 2. Three nodes.
c:start("b", 10, "--http 127.0.0.1:0")
c:start("c", 10, "--http 127.0.0.1:0")
T.ok(N.wait(15, function()
  local r = assert(e:get(P .. "status/t" .. JOBS .. "/", { prefix = true, count_only = true }))
  return r.count == 3 and log_addr("b") and log_addr("c")
end), "nodes b and c loaded the jobs")
baton.sleep(2)
local rev1 = assert(e:get(P .. "jobs/", { count_only = true })).revision
local txn0, lost0 = total("baton_etcd_batched_transactions_total"), total("baton_claims_lost_total")
local from = math.floor(baton.now()) + 1
baton.sleep(6.5)
local to = math.floor(baton.now()) - 1
local txn1, lost1 = total("baton_etcd_batched_transactions_total"), total("baton_claims_lost_total")
-- (the posts first: a run is posted after its claim, so every run posted
-- by now has its record when the records are read next)
local list = posts(rev1)

local by = {} -- job/id -> record
local window, missing, bad_state = 0, {}, {}
for i = 1, JOBS do
  local recs = {}
  for _, rec in ipairs(c:records("t" .. i)) do recs[rec.id] = rec; by["t" .. i .. "/" .. rec.id] = rec end
  for f = from, to do
    window = window + 1
    local rec = recs[iso(f)]
    if not rec then missing[#missing + 1] = "t" .. i .. "@" .. f
    elseif rec.state ~= "succeeded" or rec.attempt ~= 1 then bad_state[#bad_state + 1] = "t" .. i .. "@" .. f end
  end
end
T.is(#missing, 0, ("every instant of the window ran (%d): %s"):format(window, table.concat(missing, " ")))
T.is(#bad_state, 0, "each once, at its first attempt: " .. table.concat(bad_state, " "))

local posted, wrong, own, leaseless = 0, {}, {}, 0
for _, p in ipairs(list) do
  if not p.lease or p.lease == 0 then leaseless = leaseless + 1 end
  for job, ids in pairs(p.runs or {}) do
    for _, id in ipairs(ids) do
      posted = posted + 1
      own[p.node] = (own[p.node] or 0) + 1
      local rec = by[job .. "/" .. id]
      if not rec or rec.node ~= p.node then wrong[#wrong + 1] = job .. "/" .. id .. " by " .. p.node end
    end
  end
end
T.ok(posted >= window, ("the nodes posted their claims (%d runs in %d posts)"):format(posted, #list))
T.is(#wrong, 0, "every posted run is held by its poster: " .. table.concat(wrong, " "))
T.is(leaseless, 0, "every post is on its node's session lease")
T.ok((own.a or 0) > 0 and (own.b or 0) > 0 and (own.c or 0) > 0, "each node posted")

-- Per run: its claim and its end, and the posts (about one per node and
-- second); a read per later node would make it 4.
local per_run = (txn1 - txn0) / window
T.ok(per_run < 3.2, ("batched transactions per run %.2f < 3.2 (claim, end, posts; no reads)"):format(per_run))
local lost = (lost1 - lost0) / window
T.ok(lost >= 1.5, ("the later nodes counted the instants they found taken (%.2f per run)"):format(lost))

-- 3. Posts not in the board's format are ignored.
assert(e:put(P .. "claims/zz", "not json"))
assert(e:put(P .. "claims/zz", '{"runs":{"t1":[1,2,{}],"t2":"x"}}'))
assert(e:put(P .. "claims/zz", '[1,2]'))

-- 4. Node a frozen: it posts nothing, the others take its instants over
-- after the grace, none is missed.
local ffrom = math.floor(baton.now()) + 1
c:signal("a", "STOP")
baton.sleep(3.2)
c:signal("a", "CONT")
local fto = ffrom + 1
baton.sleep(3)
local late, fmissing, taken_over = 0, {}, 0
for i = 1, JOBS do
  local recs = {}
  for _, rec in ipairs(c:records("t" .. i)) do recs[rec.id] = rec end
  for f = ffrom, fto do
    local rec = recs[iso(f)]
    if not rec or rec.state ~= "succeeded" then fmissing[#fmissing + 1] = "t" .. i .. "@" .. f
    else
      late = math.max(late, rec.started - f)
      if rec.node ~= "a" then taken_over = taken_over + 1 end
    end
  end
end
T.is(#fmissing, 0, "while a was frozen every instant ran: " .. table.concat(fmissing, " "))
T.is(taken_over, 2 * JOBS, "by b and c")
T.ok(late < 2, ("at most %.2f s late (a later node's turn: 0.5 or 1 s)"):format(late))
T.ok(N.wait(10, function()
  local recs = c:records("t1")
  for _, rec in ipairs(recs) do
    if rec.node == "a" and rec.fire > fto + 1 then return true end
  end
end), "a runs instants again once it goes on")
for _, name in ipairs { "a", "b", "c" } do
  T.unlike(c:log(name), 'msg="node task failed', name .. ": no node task failed")
end

c:destroy()
T.done()
