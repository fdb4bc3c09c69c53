-- The cost of a policy decision: calls per second of claim_delay and
-- assign_shards for 100 nodes (and 1,000 shards), for each placement
-- built-in, through policy.call (bounded, result checked; arguments copied
-- for a stored policy) and raw (a plain Lua call). Run by tests/bench/policies.
local policy = require "baton.policy"

local NODES, SHARDS = 100, 1000
local nodes = {}
for i = 1, NODES do
  nodes[i] = { name = ("node-%03d"):format(i), labels = { zone = "z" .. (i % 3) }, running = i % 7,
    started = 1000 + i }
end
local job = { name = "bench-job", labels = {}, policy = "bench", schedule = "*/10 * * * *",
  timezone = "UTC", timeout = 600, concurrency = "forbid", shards = SHARDS,
  retry = { attempts = 3, backoff = 10, max_backoff = 300, jitter = 0.2 }, on_node_loss = "rerun" }
local me = nodes[37]
-- (as a node's own are: never changed, so a sandbox keeps them; stored.lua)
local S = require "baton.stored"
S.shareable(nodes); S.shareable(job); for _, n in ipairs(nodes) do S.shareable(n) end
local fire0 = 1767225600

-- Calls per second of fn, run for at least `secs` seconds.
local function rate(fn, secs)
  local n, t0 = 0, baton.now()
  local t = t0
  repeat
    for _ = 1, 10 do fn(); n = n + 1 end
    t = baton.now()
  until t - t0 >= secs
  return n / (t - t0)
end

local function fmt(r)
  if r >= 1000 then return ("%.0f/s"):format(r) end
  return ("%.1f/s"):format(r)
end

-- A stored (untrusted) copy of a built-in, loaded from its source text:
-- in this process (what the sandbox does inside), and in a sandbox, as a
-- node has it (baton.stored: each decision a round trip to that process).
local function source_of(name)
  local f = assert(io.open((os.getenv("BATON_ROOT") or ".") .. "/lua/baton/policies/" .. name .. ".lua"))
  local src = f:read("*a")
  f:close()
  return src
end
local function stored(name) return assert(policy.load(source_of(name), name)) end
local function sandboxed(name)
  return assert(require("baton.stored").policy(name, { value = source_of(name), mod_revision = 1 },
                                                 { file = true, role = "decide" }))
end

print(("claim_delay: %d nodes; assign_shards: %d shards over %d nodes (calls per second)"):format(NODES, SHARDS, NODES))
print(("%-13s %12s %12s %12s %12s   %12s %12s %12s %12s"):format("policy", "claim raw", "claim call",
  "claim stored", "claim sandbox", "shards raw", "shards call", "shards stored", "shards sandbox"))
for _, name in ipairs { "default", "race", "hash", "round_robin", "least_loaded", "pinned", "spread" } do
  local mod, copy, boxed = policy.builtin(name), stored(name), sandboxed(name)
  local cd = mod.claim_delay or policy.builtin("default").claim_delay
  local as = mod.assign_shards or policy.builtin("default").assign_shards
  local k = 0
  local function fire() k = k + 1; return fire0 + 600 * (k % 1000) end
  local c_raw = rate(function() cd(job, fire(), nodes, me) end, 0.3)
  local c_call = rate(function() assert(policy.call(mod, "claim_delay", job, fire(), nodes, me)) end, 0.3)
  local c_st = rate(function() assert(policy.call(copy, "claim_delay", job, fire(), nodes, me)) end, 0.3)
  local s_raw = rate(function() as(job, SHARDS, nodes, fire0) end, 0.5)
  local s_call = rate(function() assert(policy.call(mod, "assign_shards", job, SHARDS, nodes, fire0)) end, 0.5)
  local s_st = rate(function() assert(policy.call(copy, "assign_shards", job, SHARDS, nodes, fire0)) end, 0.5)
  local c_box = rate(function() assert(policy.call(boxed, "claim_delay", job, fire(), nodes, me)) end, 0.3)
  local s_box = rate(function() assert(policy.call(boxed, "assign_shards", job, SHARDS, nodes, fire0)) end, 0.5)
  print(("%-13s %12s %12s %12s %12s   %12s %12s %12s %12s"):format(name, fmt(c_raw), fmt(c_call), fmt(c_st),
    fmt(c_box), fmt(s_raw), fmt(s_call), fmt(s_st), fmt(s_box)))
end
print("(raw: a plain call; call: policy.call on the built-in (bounded, result checked); "
  .. "stored: the same file loaded by policy.load, JIT off, arguments copied; "
  .. "sandbox: that file in a sandbox process, as a node's stored policy decides)")
