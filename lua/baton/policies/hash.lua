-- hash: each job (each shard of a job) has a home node, chosen by
-- rendezvous hashing of the job's name over the live eligible nodes. Every
-- instant of the job runs there; if the home node is dead or slow, the
-- next node in the job's order tries GRACE seconds later. When a node
-- joins, only the jobs whose new favourite it is move to it (about 1/n of
-- them with n nodes); when a node leaves, only its own jobs move. Good for
-- jobs that like a warm cache or a local file.
local util = require "baton.policies.util"

local M = {}

M.description = "each job (and shard) sticks to the node its name hashes to; ~1/n move when a node joins"

local GRACE = 0.5

-- The key a job's placement is hashed by: its name, and its shard when the
-- node asks about one shard.
local function job_key(job)
  if job.shard then return (job.name or "") .. "#" .. tostring(job.shard) end
  return job.name or ""
end

-- The name of key's home node among nodes, whose name hashes are hn.
local function owner(key, nodes, hn)
  local hk, best, best_score = util.hash(key), nil, -1
  for i, n in ipairs(nodes) do
    local sc = util.score(hk, hn[i])
    if sc > best_score or (sc == best_score and n.name < best.name) then best, best_score = n, sc end
  end
  return best and best.name
end

local function name_hashes(nodes)
  local hn = {}
  for i, n in ipairs(nodes) do hn[i] = util.hash(n.name) end
  return hn
end

function M.claim_delay(job, fire, nodes, me)
  if not util.eligible(job, me) then return nil end
  local key = job_key(job)
  local hk, mine = util.hash(key), util.score(util.hash(key), util.hash(me.name))
  local rank = 0
  for _, n in ipairs(nodes) do
    if n.name ~= me.name and util.eligible(job, n) then
      local sc = util.score(hk, util.hash(n.name))
      if sc > mine or (sc == mine and n.name < me.name) then rank = rank + 1 end
    end
  end
  return rank * GRACE
end

-- Each shard on its own home node: not balanced (two shards may share a
-- node), but a shard only moves when its home node leaves or a better one
-- joins.
function M.assign_shards(job, shards, nodes)
  local list = util.eligible_nodes(job, nodes)
  if #list == 0 then return nil end
  local out, hn = {}, name_hashes(list)
  for i = 1, shards do out[i] = owner((job.name or "") .. "#" .. i, list, hn) end
  return out
end

function M.selftest()
  local s = util.sample()
  local job, nodes = s.job, s.nodes
  local lines = {}
  -- the same home for every instant, whatever the order of the list
  local home
  for _, me in ipairs(nodes) do
    if M.claim_delay(job, s.instants[1], nodes, me) == 0 then home = me.name end
  end
  assert(home, "one node has delay 0")
  local reversed = { nodes[3], nodes[1], nodes[2] }
  for _, fire in ipairs(s.instants) do
    for _, me in ipairs(nodes) do
      local d = M.claim_delay(job, fire, reversed, me)
      assert((d == 0) == (me.name == home), "the home node is the same for every instant and order")
    end
  end
  lines[#lines + 1] = "job sample lives on " .. home .. " at every instant"
  -- few jobs move when a fourth node joins
  local four = { nodes[1], nodes[2], nodes[3], { name = "n4", labels = {}, running = 0 } }
  local moved, h3, h4 = 0, name_hashes(nodes), name_hashes(four)
  for i = 1, 100 do
    local before, after = owner("job" .. i, nodes, h3), owner("job" .. i, four, h4)
    if before ~= after then
      assert(after == "n4", "a job only moves to the new node")
      moved = moved + 1
    end
  end
  assert(moved > 10 and moved < 40, "about 1/4 of 100 jobs move to n4, got " .. moved)
  lines[#lines + 1] = moved .. " of 100 jobs move when n4 joins, all to n4"
  lines[#lines + 1] = "6 shards: " .. util.show_assignment(M.assign_shards(job, 6, nodes), 6)
  return lines
end

return M
