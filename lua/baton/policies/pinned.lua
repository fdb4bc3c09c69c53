-- pinned: the job runs on one node and stays there until that node is gone
-- from the live list; only then do the others take over, after `takeover`
-- seconds, in rendezvous order.
--
--   policy = "pinned"        the pin is the eligible node that has been up
--                            longest (smallest `started`, ties by name): a
--                            node that joins never takes the job away, and
--                            a pinned node that restarts does not take it
--                            back from its successor.
--   a stored policy          return require("baton.policies.pinned").with {
--                              node = "db-1", takeover = 5 }
--                            pins to the node named db-1: it gets the job
--                            back whenever it is live.
--
-- While the pin is live, no other node tries, even if the pin is stuck;
-- between a pin's death and the expiry of its lease (the node TTL) the
-- job's instants are missed and handled by its misfire setting.
local util = require "baton.policies.util"


-- The pin among nodes: the named node (if live and eligible), or without
-- a name the longest-running eligible node. nil if none.
local function find_pin(opts, job, nodes)
  if opts.node then
    local n = util.find(nodes, opts.node)
    if n and util.eligible(job, n) then return n end
    return nil
  end
  local best
  for _, n in ipairs(nodes) do
    if util.eligible(job, n) then
      local s, bs = n.started or math.huge, best and (best.started or math.huge)
      if not best or s < bs or (s == bs and n.name < best.name) then best = n end
    end
  end
  return best
end

-- A pinned policy for opts = {node = name (default: the oldest node),
-- takeover = seconds (default 2), grace = seconds between successors
-- (default 0.5)}.
local function make(opts)
  local P = {}
  local takeover, grace = opts.takeover or 2, opts.grace or 0.5
  P.description = opts.node and ("runs on node " .. opts.node .. "; others take over "
    .. takeover .. " s after it is gone") or "runs on the longest-running eligible node until it is gone"

  function P.claim_delay(job, fire, nodes, me)
    if not util.eligible(job, me) then return nil end
    local pin = find_pin(opts, job, nodes)
    if pin then return pin.name == me.name and 0 or nil end
    if opts.node == me.name then return 0 end -- the pin, not yet in the list
    local eligible = function(n) return util.eligible(job, n) end
    return takeover + util.rank_of(util.instant_key(job, fire), nodes, me, eligible) * grace
  end

  -- every shard on the pin; without one, on the job's rendezvous favourite
  function P.assign_shards(job, shards, nodes)
    local pin = find_pin(opts, job, nodes)
    if not pin then
      local list = util.eligible_nodes(job, nodes)
      if #list == 0 then return nil end
      pin = util.rank(job.name or "", list)[1]
    end
    local out = {}
    for i = 1, shards do out[i] = pin.name end
    return out
  end

  function P.selftest()
    local s = util.sample()
    local job, nodes = s.job, s.nodes
    local pin = opts.node or "n1" -- n1 has the smallest `started`
    local live = nodes
    if opts.node and not util.find(nodes, opts.node) then
      live = { nodes[1], nodes[2], nodes[3], { name = opts.node, labels = {}, running = 0, started = 2000 } }
    end
    local function who(list)
      local w = {}
      for _, me in ipairs(list) do
        local d = P.claim_delay(job, s.instants[1], list, me)
        if d then w[#w + 1] = me.name .. " " .. util.show_delay(d) end
      end
      return table.concat(w, ", ")
    end
    for _, me in ipairs(live) do
      local d = P.claim_delay(job, s.instants[1], live, me)
      if me.name == pin then assert(d == 0, "the pin claims at once")
      else assert(d == nil, "the others never try while the pin is live") end
    end
    local lines = { "pin " .. pin .. " live: " .. who(live) }
    -- a node joins: the pin stays
    local joined = { { name = "n0", labels = {}, running = 0, started = 5000 } }
    for _, n in ipairs(live) do joined[#joined + 1] = n end
    for _, me in ipairs(joined) do
      assert((P.claim_delay(job, s.instants[1], joined, me) == 0) == (me.name == pin), "a join moves nothing")
    end
    lines[#lines + 1] = "n0 joins: " .. who(joined)
    -- the pin leaves: the others take over, after the takeover delay
    local rest = {}
    for _, n in ipairs(live) do if n.name ~= pin then rest[#rest + 1] = n end end
    local zero = 0
    for _, me in ipairs(rest) do
      local d = P.claim_delay(job, s.instants[1], rest, me)
      if opts.node then
        assert(d and d >= takeover, "a survivor takes over, not before the takeover delay")
      else
        assert(d == 0 or d == nil, "the next-oldest is the new pin, the others wait")
        if d == 0 then zero = zero + 1 end
      end
    end
    assert(opts.node or zero == 1, "one new pin")
    lines[#lines + 1] = pin .. " gone: " .. who(rest)
    local a = P.assign_shards(job, 6, live)
    for i = 1, 6 do assert(a[i] == pin, "every shard on the pin") end
    lines[#lines + 1] = "6 shards: " .. util.show_assignment(a, 6)
    return lines
  end
  return P
end

local M = make {}
-- pinned.with{node = "db-1", takeover = 5}: a policy pinned to a named node.
function M.with(opts)
  if type(opts) ~= "table" then error("pinned.with expects a table {node = name, takeover = seconds}", 2) end
  if opts.node ~= nil and type(opts.node) ~= "string" then error("pinned.with: node must be a node name", 2) end
  if opts.takeover ~= nil and (type(opts.takeover) ~= "number" or opts.takeover < 0) then
    error("pinned.with: takeover must be a number of seconds >= 0", 2)
  end
  return make(opts)
end

return M
