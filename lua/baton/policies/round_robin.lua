-- round_robin: successive instants of a job go to successive nodes, in name
-- order. Nodes agree without talking because the turn is derived from the
-- instant itself: its sequence number in the schedule (util.instant_number:
-- round(fire / period) for a schedule with a fixed period) modulo the
-- number of eligible nodes. If the node whose turn it is does not claim,
-- the next one in the ring tries GRACE seconds later. Shards rotate too:
-- shard i of instant k goes to node (i + k) in the ring.
local util = require "baton.policies.util"

local M = {}

M.description = "successive instants on successive nodes (name order), shards rotate"

M.GRACE = 0.5

-- The eligible nodes in name order and the ring index (1-based) of the
-- node whose turn instant fire is.
local function turn(job, fire, nodes)
  local ring = util.eligible_nodes(job, nodes)
  if #ring == 0 then return ring, nil end
  return ring, util.instant_number(job, fire) % #ring + 1
end

function M.claim_delay(job, fire, nodes, me)
  if not util.eligible(job, me) then return nil end
  local ring, first = turn(job, fire, nodes)
  for pos, n in ipairs(ring) do
    if n.name == me.name then return ((pos - first) % #ring) * M.GRACE end
  end
  return #ring * M.GRACE -- me is not in the live list (yet): after everyone
end

function M.assign_shards(job, shards, nodes, fire)
  local ring, first = turn(job, fire or 0, nodes)
  if #ring == 0 then return nil end
  local out = {}
  for i = 1, shards do out[i] = ring[(first - 1 + i - 1) % #ring + 1].name end
  return out
end

function M.selftest()
  local s = util.sample()
  local job, nodes = s.job, s.nodes
  local lines, order = {}, {}
  for k = 0, 5 do
    local fire = s.instants[1] + 600 * k -- the sample job runs every 10 minutes
    local who
    for _, me in ipairs(nodes) do
      if M.claim_delay(job, fire, nodes, me) == 0 then
        assert(not who, "one node per instant")
        who = me.name
      end
    end
    order[#order + 1] = who
  end
  for k = 4, 6 do assert(order[k] == order[k - 3], "the ring repeats every 3 instants") end
  assert(order[1] ~= order[2] and order[2] ~= order[3] and order[1] ~= order[3], "3 instants, 3 nodes")
  local idx = { n1 = 1, n2 = 2, n3 = 3 }
  for k = 2, 6 do assert(idx[order[k]] == idx[order[k - 1]] % 3 + 1, "in name order") end
  lines[#lines + 1] = "6 successive instants: " .. table.concat(order, " ")
  local a = M.assign_shards(job, 6, nodes, s.instants[1])
  local _, c = util.counts(a)
  assert(c.n1 == 2 and c.n2 == 2 and c.n3 == 2, "6 shards, 2 per node")
  lines[#lines + 1] = "6 shards: " .. util.show_assignment(a, 6)
  return lines
end

return M
