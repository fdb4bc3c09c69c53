-- Helper of tests/bench/policies: two nodes run a job every second under a
-- stored policy that places every instant on one node; each round puts a
-- version that names the other node, and measures (1) until both nodes
-- report the new version loaded and (2) until the first instant placed by
-- it has started (this includes waiting for the next instant, up to 1 s).
local bin, eps = baton._exe, baton.config.endpoints
local e = baton.etcd
local P = "/bench/policy-e2e/" .. tostring(baton.now()):gsub("%.", "") .. "/"
local ROUNDS = tonumber(arg[1] or "8")

local function only(node)
  return ("return { claim_delay = function(job, fire, nodes, me) if me.name == %q then return 0 end end }")
    :format(node)
end
local function loaded_everywhere(rev)
  local r = e:get(P .. "policy-status/flip/", { prefix = true })
  local n = 0
  for _, kv in ipairs(r and r.kvs or {}) do
    if baton.json.decode(kv.value).revision == rev then n = n + 1 end
  end
  return n >= 2
end

assert(e:put(P .. "policies/flip", only("a")))
assert(e:put(P .. "jobs/tick", [[
return { schedule = "* * * * * *", policy = "flip", concurrency = "allow", run = function(ctx) end }]]))
local nodes = {}
for _, n in ipairs { "a", "b" } do
  nodes[n] = assert(baton.spawn { bin, "--endpoints", eps, "--prefix", P, "node", "--name", n,
                                  "--ttl", "5", stdio = "null" })
end
baton.sleep(2)

local reload, placed = {}, {}
local target = "b"
for i = 1, ROUNDS do
  local t0 = baton.now()
  local rev = assert(e:put(P .. "policies/flip", only(target))).revision
  while not loaded_everywhere(rev) do baton.sleep(0.005) end
  reload[i] = (baton.now() - t0) * 1000
  local found
  while not found do
    local r = e:get(P .. "runs/tick/", { prefix = true, sort = "create", order = "desc", limit = 3 })
    for _, kv in ipairs(r and r.kvs or {}) do
      local rec = baton.json.decode(kv.value)
      if rec.node == target and rec.started and rec.started >= t0 then found = rec.started end
    end
    if not found then baton.sleep(0.01) end
  end
  placed[i] = (found - t0) * 1000
  target = target == "b" and "a" or "b"
  baton.sleep(0.3)
end
for _, p in pairs(nodes) do p:kill("SIGTERM"); p:wait(10) end
e:delete(P, { prefix = true })

local function pct(t, p) table.sort(t); return t[math.max(1, math.ceil(#t * p))] end
print(("policy put -> loaded on both nodes: p50 %.1f ms, max %.1f ms (%d rounds)")
  :format(pct(reload, 0.5), pct(reload, 1), ROUNDS))
print(("policy put -> first instant placed by the new version started: p50 %.0f ms, max %.0f ms")
  :format(pct(placed, 0.5), pct(placed, 1)))
print("(the second includes waiting for the job's next instant: it fires every second)")
