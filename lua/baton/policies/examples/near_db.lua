-- An example policy (docs/policies.md, "Write your own policy"): run each
-- instant on a node in the database's region; nodes in other regions try
-- only 30 s later, so an instant crosses regions only when no node of the
-- database's region claimed it within 30 s.
--
--   baton check lua/baton/policies/examples/near_db.lua
--   baton policy put lua/baton/policies/examples/near_db.lua
--   and in a job: policy = "near_db"
local util = require "baton.policies.util"

local DB_REGION = "eu"     -- the `region` label of the database's nodes
local CROSS_REGION = 30    -- seconds before another region tries
local GRACE = 0.5          -- seconds between two nodes of the same side

local function near(node)
  return node.labels ~= nil and node.labels.region == DB_REGION
end

-- Nodes near the database claim in rendezvous order (0, 0.5, 1 s, ...);
-- the others in the same order after CROSS_REGION seconds. Whoever claims
-- first wins, so an instant nobody near the database claimed still runs.
local function claim_delay(job, fire, nodes, me)
  if not util.eligible(job, me) then return nil end
  local same_side = function(n) return util.eligible(job, n) and near(n) == near(me) end
  local rank = util.rank_of(util.instant_key(job, fire), nodes, me, same_side)
  if near(me) then return rank * GRACE end
  return CROSS_REGION + rank * GRACE
end

-- Shards of a sharded job: evenly over the eligible nodes near the
-- database, or over all eligible nodes when none of those is live.
local function assign_shards(job, shards, nodes)
  local list, near_list = util.eligible_nodes(job, nodes), {}
  for _, n in ipairs(list) do
    if near(n) then near_list[#near_list + 1] = n end
  end
  if #near_list > 0 then list = near_list end
  if #list == 0 then return nil end
  return (util.balanced(job.name or "", shards, list))
end

-- Run by `baton check` and `baton policy put` before anything is stored.
-- The sample cluster: n1 and n2 in region eu, n3 in us.
local function selftest()
  local s = util.sample()
  local lines = {}
  for _, fire in ipairs(s.instants) do
    local d1 = claim_delay(s.job, fire, s.nodes, s.nodes[1])
    local d2 = claim_delay(s.job, fire, s.nodes, s.nodes[2])
    local d3 = claim_delay(s.job, fire, s.nodes, s.nodes[3])
    assert(math.min(d1, d2) == 0 and math.max(d1, d2) == GRACE, "eu nodes first, 0.5 s apart")
    assert(d3 == CROSS_REGION, "us waits 30 s")
    lines[#lines + 1] = ("instant %d: n1 %gs, n2 %gs, n3 (us) %gs"):format(fire, d1, d2, d3)
  end
  -- eu gone: n3 still runs the job, 30 s late
  local us_only = { s.nodes[3] }
  assert(claim_delay(s.job, s.instants[1], us_only, s.nodes[3]) == CROSS_REGION, "us takes over after 30 s")
  lines[#lines + 1] = "no eu node: n3 claims after 30s"
  local a = assign_shards(s.job, 6, s.nodes)
  for i = 1, 6 do assert(a[i] == "n1" or a[i] == "n2", "shards stay in eu") end
  lines[#lines + 1] = "6 shards: " .. util.show_assignment(a, 6)
  return lines
end

return {
  description = "run in region " .. DB_REGION .. "; other regions take over after " .. CROSS_REGION .. " s",
  claim_delay = claim_delay,
  assign_shards = assign_shards,
  selftest = selftest,
}
