-- spread: the shards of each instant spread evenly over the eligible nodes
-- (counts differ by at most one), or with .with{by = "zone"} evenly over
-- the values of a label first (zones get equal shares, nodes without the
-- label count as one more zone, ""), then evenly over the nodes of each
-- zone. Within those shares a shard goes to its rendezvous favourite, so
-- an unchanged cluster keeps the same assignment. Placement of unsharded
-- jobs is the default's.
--
--   policy = "spread"    like the default's assign_shards
--   a stored policy      return require("baton.policies.spread").with { by = "zone" }
local util = require "baton.policies.util"

local M

local function make(opts)
  local by = opts.by
  local P = {}
  P.description = by and ("shards evenly over the values of label " .. by .. ", then over their nodes")
    or "shards evenly over the eligible nodes"

  function P.assign_shards(job, shards, nodes)
    local list = util.eligible_nodes(job, nodes)
    if #list == 0 then return nil end
    local name = job.name or ""
    if not by then return (util.balanced(name, shards, list)) end
    -- the groups, as pseudo-nodes named by the label's value
    local groups, members = {}, {}
    for _, n in ipairs(list) do
      local v = n.labels and n.labels[by] or ""
      if not members[v] then
        members[v] = {}
        groups[#groups + 1] = { name = v }
      end
      table.insert(members[v], n)
    end
    table.sort(groups, function(a, b) return a.name < b.name end)
    local to_group = util.balanced(name .. "@" .. by, shards, groups)
    -- within a group, its shards (in index order) evenly over its nodes
    local indexes = {}
    for i = 1, shards do
      local g = to_group[i]
      indexes[g] = indexes[g] or {}
      table.insert(indexes[g], i)
    end
    local out = {}
    for g, idx in pairs(indexes) do
      local inner = util.balanced(name .. "@" .. by .. "=" .. g, #idx, members[g])
      for k, i in ipairs(idx) do out[i] = inner[k] end
    end
    return out
  end

  function P.selftest()
    local s = util.sample() -- n1 zone a, n2 zone b, n3 zone a
    local job, nodes = s.job, s.nodes
    local a = P.assign_shards(job, 6, nodes)
    local text, c = util.counts(a)
    local lines = { "6 shards: " .. util.show_assignment(a, 6) .. " (" .. text .. ")" }
    if not by then
      assert(c.n1 == 2 and c.n2 == 2 and c.n3 == 2, "2-2-2, got " .. text)
    else
      local per = {}
      for _, n in ipairs(nodes) do
        local v = n.labels[by] or ""
        per[v] = (per[v] or 0) + (c[n.name] or 0)
      end
      local zones = {}
      for v, k in pairs(per) do zones[#zones + 1] = v .. " " .. k end
      table.sort(zones)
      if by == "zone" then assert(per.a == 3 and per.b == 3, "3 shards per zone") end
      lines[#lines + 1] = "per " .. by .. ": " .. table.concat(zones, ", ")
    end
    return lines
  end
  return P
end

M = make {}
-- spread.with{by = "zone"}: spread over the values of a label first.
function M.with(opts)
  if type(opts) ~= "table" or (opts.by ~= nil and type(opts.by) ~= "string") then
    error("spread.with expects {by = label name}", 2)
  end
  return make(opts)
end

return M
