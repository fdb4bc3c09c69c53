-- race: every eligible node tries to claim each instant at once (delay 0).
-- The claim is an etcd transaction, so exactly one wins; the others' tries
-- fail harmlessly. Fastest failover (nobody waits for a dead node's turn),
-- at the price of one failed transaction per losing node per instant, and
-- the instant lands wherever etcd answered first.
local util = require "baton.policies.util"

local M = {}

M.description = "every eligible node tries at once; the first claim wins"

function M.claim_delay(job, fire, nodes, me)
  if not util.eligible(job, me) then return nil end
  return 0
end

function M.selftest()
  local s = util.sample()
  local parts = {}
  for _, me in ipairs(s.nodes) do
    local d = M.claim_delay(s.job, s.instants[1], s.nodes, me)
    assert(d == 0, me.name .. " tries at once")
    parts[#parts + 1] = me.name .. " " .. util.show_delay(d)
  end
  assert(M.claim_delay({ name = "z", labels = { zone = "a" } }, 1, s.nodes, s.nodes[2]) == nil,
    "a node without the job's labels never tries")
  return { "every instant: " .. table.concat(parts, ", "), "a job for zone=a: n2 never tries" }
end

return M
