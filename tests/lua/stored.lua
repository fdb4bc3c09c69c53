-- lua/baton/stored.lua from one process: what the sandbox gives back for
-- a job file (plain data, validated here), what it refuses and why, a
-- batch of files, a stored policy deciding there, arguments it keeps
-- between decisions (and sends again after it is replaced or told to
-- forget), and a source that is not text. No etcd.
local T = require "tap"
local stored = require "baton.stored"
local policy = require "baton.policy"
local sign = require "baton.sign"

local function kv(src, rev) return { value = src, mod_revision = rev or 1 } end
local F = { file = true }

-- 1. A job file described: its fields, validated here, its run a stand-in.
local spec, err = stored.job("hello", kv([[
return { schedule = "*/5 * * * *", timezone = "Europe/Paris", labels = { a = "b" },
         params = { who = "world" }, shard_params = { 1, "two", { x = 0 / 0 } }, run = function(ctx) end }]], 7), F)
T.ok(spec, "a job file is described " .. tostring(err))
T.is(spec and spec.schedule, "*/5 * * * *", "its schedule")
T.is(spec and spec.timezone, "Europe/Paris", "its zone (validated here: a cron of that zone)")
T.is(spec and spec.labels.a, "b", "its labels")
T.is(spec and spec.revision, 7, "the revision it was read at")
T.ok(spec and spec.shard_params[3].x ~= spec.shard_params[3].x, "plain data survives: NaN in a table")
T.is(spec and spec.shards, 3, "shards from shard_params")
T.error_like(function() spec.run() end, "described in the sandbox and does not run here", "its run is a stand-in")

-- 2. What the sandbox refuses, in one line each.
local function refused(name, src, pattern, what)
  local s, e = stored.job(name, kv(src), F)
  T.ok(not s, what .. ": refused")
  T.like(e or "", pattern, what .. ": says why")
  T.unlike(e or "", "\n", what .. ": in one line")
end
refused("io", [[local f = io.open("/etc/passwd") return {}]], "attempt to index global 'io'", "io")
refused("ffi", [[return require "ffi"]], 'require "ffi" is not available here', "require ffi")
refused("loop", [[while true do end]], "ran for more than 10000000 Lua instructions", "an endless loop")
refused("big", [[local t = {} for i = 1, 40 do t[i] = ("x"):rep(2^23) .. i end return {}]],
  "used more than 256 MB of memory", "too much memory")
refused("wait", [[baton.sleep(1) return {}]], "called baton.sleep while loading", "a waiting call")
refused("bytes", "\27LJ", "precompiled bytecode is refused", "bytecode")
refused("nul", "return {}\0", "the source holds a NUL byte", "a NUL byte")
refused("typo", [[return { schedul = "@daily", run = function() end }]], "unknown field 'schedul' %(did you mean 'schedule'%?%)",
  "a validation error, worded as the worker's")
local s, e = stored.job("ph", kv(sign.PLACEHOLDER), {})
T.ok(not s and e:find("^ENOENT: job ph is being stored"), "a signed put's placeholder is no job yet")

-- 3. A batch: answers in order, each as it comes.
local list, seen = {}, {}
for i = 1, 300 do
  list[i] = { name = "j" .. i, kv = kv((i % 50 == 0) and "syntax error here"
    or ('return { schedule = "%d * * * *", run = function() end }'):format(i % 60), i) }
end
local out = stored.jobs(list, F, function(i) seen[#seen + 1] = i end)
local good, bad = 0, 0
for i, d in ipairs(out) do
  if d.spec and d.spec.schedule == ("%d * * * *"):format(i % 60) then good = good + 1 end
  if d.error and d.error:find("syntax error") then bad = bad + 1 end
end
T.is(good, 294, "a batch of 300: 294 described")
T.is(bad, 6, "and 6 refused for their syntax")
local ordered = #seen == 300
for k, i in ipairs(seen) do if k ~= i then ordered = false end end
T.ok(ordered, "each answer handed over as it came, in order")

-- 4. A stored policy decides in the sandbox; shared arguments are kept
-- there, and sent again when it forgets them or is replaced.
local pol = assert(stored.policy("p", kv([[
return { claim_delay = function(job, fire, nodes, me) return #nodes + fire end }]]), { file = true, role = "decide" }))
T.ok(policy.is_remote(pol), "a stored policy decides in the sandbox")
local nodes = stored.shareable { { name = "a" }, { name = "b" } }
T.is(select(2, policy.call(pol, "claim_delay", { name = "j" }, 1, nodes, { name = "a" })), 3, "a decision")
T.is(select(2, policy.call(pol, "claim_delay", { name = "j" }, 2, nodes, { name = "a" })), 4,
  "again, the nodes named by number")
local max = stored.MAX_REFS
stored.MAX_REFS = 3
local all = true
for i = 1, 10 do
  local l = stored.shareable { { name = "x" } }
  local ok, v = policy.call(pol, "claim_delay", { name = "j" }, i, l, { name = "a" })
  if not ok or v ~= 1 + i then all = false end
end
T.ok(all, "more shared tables than it keeps: it forgets, and gets them again")
T.is(select(2, policy.call(pol, "claim_delay", { name = "j" }, 5, nodes, { name = "a" })), 7,
  "a table it forgot is sent again")
stored.MAX_REFS = max
stored.box("decide"):stop()
T.is(select(2, policy.call(pol, "claim_delay", { name = "j" }, 7, nodes, { name = "a" })), 9,
  "after the sandbox was replaced: the policy and the tables again")
-- A table it was told to keep but never got (the call that sent it was
-- cancelled before the sandbox read it): the arguments are sent again in
-- full, and the policy stays loaded (its own count goes on).
local counting = assert(stored.policy("c", kv([[
local calls = 0
return { claim_delay = function(job, fire, nodes) calls = calls + 1 return calls end }]]),
  { file = true, role = "decide" }))
T.is(select(2, policy.call(counting, "claim_delay", { name = "j" }, 1, nodes)), 1, "a counting policy: 1")
T.is(select(2, policy.call(counting, "claim_delay", { name = "j" }, 1, nodes)), 2, "2, the nodes by number")
stored.box("decide").sent[nodes].id = 1e6 -- a number the sandbox never kept
local ok, v = policy.call(counting, "claim_delay", { name = "j" }, 1, nodes)
T.is(ok and v, 3, "an argument it lacks: sent again in full, and the policy kept its count")
local hashed = stored.policy("hashy", kv([[return require "baton.policies.hash"]]), F)
T.is(hashed, policy.builtin("hash"), "a file that is a built-in, as it is, is that built-in")
stored.close()
T.done()
