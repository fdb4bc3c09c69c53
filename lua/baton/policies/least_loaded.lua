-- least_loaded: the eligible node with the fewest running runs (the
-- `running` each node publishes) claims first, the next least loaded
-- GRACE seconds later, and so on; nodes equally loaded are ordered by a
-- hash of the instant, so ties do not always go to the same node. Shards
-- are dealt one by one to the node with the least running plus already
-- given. The load figures are as fresh as the nodes' last publication.
local util = require "baton.policies.util"

local M = {}

M.description = "the node with the fewest running runs first; shards to the least loaded"

M.GRACE = 0.5

-- The eligible nodes, least loaded first (ties by a hash of key).
local function order(job, key, nodes)
  local list = util.eligible_nodes(job, nodes)
  local h = {}
  for _, n in ipairs(list) do h[n] = util.hash(key .. "/" .. n.name) end
  table.sort(list, function(a, b)
    local ra, rb = a.running or 0, b.running or 0
    if ra ~= rb then return ra < rb end
    if h[a] ~= h[b] then return h[a] > h[b] end
    return a.name < b.name
  end)
  return list
end

function M.claim_delay(job, fire, nodes, me)
  if not util.eligible(job, me) then return nil end
  local list = order(job, util.instant_key(job, fire), nodes)
  for rank, n in ipairs(list) do
    if n.name == me.name then return (rank - 1) * M.GRACE end
  end
  return #list * M.GRACE
end

function M.assign_shards(job, shards, nodes)
  local list = util.eligible_nodes(job, nodes)
  if #list == 0 then return nil end
  local load, hn = {}, {}
  for i, n in ipairs(list) do load[i], hn[i] = n.running or 0, util.hash(n.name) end
  local out = {}
  for s = 1, shards do
    local hk = util.hash((job.name or "") .. "#" .. s)
    local best, best_score
    for i = 1, #list do
      local sc = util.score(hk, hn[i])
      if not best or load[i] < load[best] or (load[i] == load[best] and sc > best_score) then
        best, best_score = i, sc
      end
    end
    load[best] = load[best] + 1
    out[s] = list[best].name
  end
  return out
end

function M.selftest()
  local s = util.sample() -- n1 runs 0, n2 runs 2, n3 runs 1
  local job, nodes = s.job, s.nodes
  local lines = {}
  for _, fire in ipairs(s.instants) do
    assert(M.claim_delay(job, fire, nodes, nodes[1]) == 0, "n1 (0 running) first")
    assert(M.claim_delay(job, fire, nodes, nodes[3]) == M.GRACE, "n3 (1 running) second")
    assert(M.claim_delay(job, fire, nodes, nodes[2]) == 2 * M.GRACE, "n2 (2 running) last")
  end
  lines[#lines + 1] = "every instant: n1 0s (0 running), n3 0.5s (1), n2 1s (2)"
  local a = M.assign_shards(job, 6, nodes)
  local text, c = util.counts(a)
  -- loads 0, 2, 1 plus 6 shards = 9: 3 each
  assert(c.n1 == 3 and (c.n2 or 0) == 1 and c.n3 == 2, "shards level the load, got " .. text)
  lines[#lines + 1] = "6 shards: " .. util.show_assignment(a, 6) .. " (" .. text .. ": 3 runs each)"
  return lines
end

return M
