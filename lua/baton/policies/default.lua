-- The default scheduling policy (docs/policies.md).
-- Any function another policy leaves out comes from here.
--
-- Placement: every eligible node (its labels include the job's) ranks the
-- live eligible nodes by rendezvous hashing of (job, instant) and waits
-- rank x GRACE seconds before trying to claim. The first-ranked node claims
-- at once; if it is dead or slow, the next one tries GRACE seconds later,
-- and so on. The claim itself is an etcd transaction, so whatever the
-- delays, one node wins each instant. Successive instants land on
-- different nodes, so the load evens out over time.
--
-- Shards: spread evenly over the eligible nodes (counts differ by at most
-- one), each shard going to its rendezvous favourite among the nodes that
-- still have room, so an unchanged cluster keeps the same assignment.
--
-- Retries: the job's retry table, exponential backoff with jitter.
-- Failover: the job's on_node_loss.
local util = require "baton.policies.util"

local M = {}

M.description = "rendezvous rank per instant, shards spread evenly, the job's retry table and on_node_loss"

-- Seconds between one node's turn to claim and the next one's.
M.GRACE = 0.5

-- default.hash is util.hash (the node uses it too). Reached through the
-- metatable so that the policy's own fields stay the contract's: a copy of
-- this file passes `baton policy put`.
setmetatable(M, { __index = { hash = util.hash } })

function M.claim_delay(job, fire, nodes, me)
  if not util.eligible(job, me) then return nil end
  local key = util.instant_key(job, fire)
  local eligible = function(n) return util.eligible(job, n) end
  return util.rank_of(key, nodes, me, eligible) * M.GRACE
end

-- nil when no live node may run the job: nobody runs these shards.
function M.assign_shards(job, shards, nodes)
  local list = util.eligible_nodes(job, nodes)
  if #list == 0 then return nil end
  return (util.balanced(job.name or "", shards, list))
end

-- Attempt n failed (run.attempt = n): wait backoff * 2^(n-1) seconds,
-- at most max_backoff, randomised by +/- jitter; nil once the job's
-- retry.attempts more attempts have been made.
function M.retry_delay(job, run, err)
  local r = job.retry or {}
  local attempt = run and run.attempt or 1
  if attempt > (r.attempts or 0) then return nil end
  local d = (r.backoff or 10) * 2 ^ (attempt - 1)
  if r.max_backoff and d > r.max_backoff then d = r.max_backoff end
  local j = r.jitter or 0
  if j > 0 then d = d * (1 - j + 2 * j * math.random()) end
  return d
end

function M.on_orphan(job, run)
  return job.on_node_loss or "rerun"
end

function M.selftest()
  local s = util.sample()
  local job, nodes = s.job, s.nodes
  local lines = {}
  -- one node ranks first (delay 0), the others follow GRACE apart
  for _, fire in ipairs(s.instants) do
    local seen, parts = {}, {}
    for _, me in ipairs(nodes) do
      local d = M.claim_delay(job, fire, nodes, me)
      assert(d and d % M.GRACE == 0, "claim_delay is a multiple of GRACE")
      assert(not seen[d], "two nodes with the same delay")
      seen[d] = true
      parts[#parts + 1] = me.name .. " " .. util.show_delay(d)
    end
    assert(seen[0] and seen[M.GRACE] and seen[2 * M.GRACE], "ranks 0, 1, 2")
    lines[#lines + 1] = "instant " .. fire .. ": " .. table.concat(parts, ", ")
  end
  -- labels: a job for zone a never runs on n2
  local zoned = { name = "zoned", labels = { zone = "a" } }
  assert(M.claim_delay(zoned, s.instants[1], nodes, nodes[2]) == nil, "n2 is not in zone a")
  lines[#lines + 1] = "a job for zone=a: n2 never tries"
  -- shards: 6 over 3 nodes, 2 each, and the same again
  local a = M.assign_shards(job, 6, nodes)
  local text, c = util.counts(a)
  assert(c.n1 == 2 and c.n2 == 2 and c.n3 == 2, "6 shards over 3 nodes: 2 each, got " .. text)
  assert(util.show_assignment(M.assign_shards(job, 6, nodes), 6) == util.show_assignment(a, 6), "stable")
  lines[#lines + 1] = "6 shards: " .. util.show_assignment(a, 6) .. " (" .. text .. ")"
  -- retries: 10, 20, 40 (+/- 20 %), then give up
  for attempt = 1, 4 do
    local d = M.retry_delay(job, { attempt = attempt }, "boom")
    if attempt <= 3 then
      local base = 10 * 2 ^ (attempt - 1)
      assert(d >= base * 0.8 and d <= base * 1.2, "retry delay within the jitter")
    else
      assert(d == nil, "gives up after retry.attempts")
    end
    lines[#lines + 1] = "retry after attempt " .. attempt .. ": " .. (d and util.show_delay(d) or "give up")
  end
  assert(M.on_orphan(job, {}) == "rerun", "on_orphan follows on_node_loss")
  assert(M.on_orphan({ on_node_loss = "abandon" }, {}) == "abandon", "on_orphan follows on_node_loss")
  lines[#lines + 1] = "orphaned run: rerun (the job's on_node_loss)"
  return lines
end

return M
