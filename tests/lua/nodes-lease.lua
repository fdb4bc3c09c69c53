-- A P nodes/ record on no lease is no node (issue 22, finding 12): a node
-- keeps its record on its session's lease, and etcd deletes it with the
-- lease; a record without one (forged, or written by hand) is not shown as
-- live by `baton nodes` (and --json), GET /api/v1/nodes (the dashboard's
-- list), nor counted by the CLI's eligibility checks (job put's warning,
-- job run's refusal) or in the node list the nodes' policies get, whether
-- it was there when the node started (its listing) or came later (its
-- watch).
local T = require "tap"
local N = require "nodes"
local F = require "files"
local json = baton.json

local c = N.new("nodeslease")

-- a forged record before the node starts, another after
local function forge(name)
  assert(c.e:put(c.P .. "nodes/" .. name, json.encode {
    name = name, labels = { region = "mars" }, version = baton.version, started = baton.now(), running = 0 }))
end
forge("ghost1")

local l = assert(baton.httpd.listen { addr = "127.0.0.1:0", handler = function(req) req:respond(200, {}, "") end })
local port = l.port
l:close()
c:start("n1", 3, "--labels region=eu --http 127.0.0.1:" .. port)
T.ok(N.wait(15, function()
  local kv = assert(c.e:get(c.P .. "nodes/n1")).kvs[1]
  return kv and kv.lease
end), "n1 is up")
forge("ghost2")

-- The nodes' policies: a stored policy that fails with the names of the
-- nodes it was given, which the node logs (and the default decides).
F.write(c.dir .. "/spy.lua", [[
return {
  claim_delay = function(job, fire, nodes, me)
    local names = {}
    for i, n in ipairs(nodes) do names[i] = n.name end
    error("NODES=" .. table.concat(names, ","), 0)
  end,
}
]])
local r = c:cli("policy", "put", c.dir .. "/spy.lua")
T.is(r.code, 0, "policy put " .. r.stderr)
local rev = c:put_job("spied", 'return { schedule = "@manual", policy = "spy", run = function() end }\n')
T.ok(c:loaded("spied", rev), "a job with that policy loaded")
T.ok(N.wait(10, function()
  local kv = assert(c.e:get(c.P .. "policy-status/spy/n1")).kvs[1]
  return kv
end), "the node loaded the policy")
r = c:cli("job", "run", "spied")
T.is(r.code, 0, "job run " .. r.stderr)
local nodes_seen = N.wait(15, function() return c:log("n1"):match("NODES=([%w,]*)") end)
T.is(nodes_seen, "n1", "the policy is given the live node only (not the record n1 found, nor the one that came later)")

-- baton nodes, --json
r = c:cli("nodes")
T.is(r.code, 0, "baton nodes " .. r.stderr)
T.like(r.stdout, "\nn1%s", "lists n1")
T.unlike(r.stdout, "ghost", "not the records on no lease")
r = c:cli("nodes", "--json")
local ok, list = pcall(json.decode, r.stdout)
local names = {}
for _, n in ipairs(ok and list or {}) do names[#names + 1] = n.name end
T.is(table.concat(names, ","), "n1", "baton nodes --json: n1 only")

-- GET /api/v1/nodes
local res = assert(baton.exec { "curl", "-sS", "--max-time", "20", "http://127.0.0.1:" .. port .. "/api/v1/nodes",
                                timeout = 30 })
ok, list = pcall(json.decode, res.stdout)
names = {}
for _, n in ipairs(ok and list or {}) do names[#names + 1] = n.name end
T.is(table.concat(names, ","), "n1", "GET /api/v1/nodes: n1 only " .. res.stderr)

-- eligibility: only the forged records have region=mars
F.write(c.dir .. "/mars.lua", 'return { schedule = "@manual", labels = { region = "mars" }, run = function() end }\n')
r = c:cli("job", "put", c.dir .. "/mars.lua")
T.is(r.code, 0, "job put of a job for region=mars")
T.like(r.stderr, "warning: no live node has the labels region=mars %(live: n1 %(region=eu%)%)",
  "warns that no live node can run it: " .. r.stderr)
r = c:cli("job", "run", "mars")
T.is(r.code, 1, "job run refuses it")
T.like(r.stderr, "no live node has the labels region=mars %(live: n1 %(region=eu%)%); nothing was queued",
  "saying why: " .. r.stderr)

-- the node's own record is on its lease, and it still counts itself
T.ok(assert(c.e:get(c.P .. "nodes/n1")).kvs[1].lease, "n1's record is on a lease")

c:destroy()
T.done()
