-- The node's policy gateway (lua/baton/node/decide.lua), without etcd and
-- without a running node: a bare node table (node/state.lua's, strict) and
-- jobs compiled in this process. Which policy decides (a stored one before
-- a built-in of the same name, else the built-in, else the default), what
-- a policy is given (the job's view, the live nodes, this node), that it
-- cannot change the node's own tables, and the fallback when it fails or
-- answers nonsense (docs/policies.md, "Fallback"): the default decides,
-- and the failure is logged once a POLICY_WARN_EVERY.
local T = require "tap"
local decide = require "baton.node.decide"
local state = require "baton.node.state"
local policy = require "baton.policy"
local job = require "baton.job"

local default = policy.builtin("default")
local FIRE = 1767225600 -- 2026-01-01T00:00:00Z, an instant of */10

-- A node table as node/init.lua starts it, strict: decide may use only
-- the fields node/state.lua declares.
local function new_node(name, labels)
  return state.strict(state.new { name = name, labels = labels or {}, prefix = "/t/" }, true, true)
end

-- Registers nodes {name, labels, running} on self.
local function register(self, list)
  for _, n in ipairs(list) do
    decide.set_node(self, n[1], { name = n[1], labels = n[2] or {}, running = n[3] or 0, started = 1000 })
  end
end

-- A job spec as a node loads it (compiled here; a node has the sandbox
-- describe it, which gives the same spec).
local function spec_of(name, fields)
  local src = "return { schedule = \"*/10 * * * *\", run = function() end, " .. (fields or "") .. " }"
  return assert(job.load(src, name, 7))
end

-- A stored policy, loaded in this process as the sandbox loads it
-- (policy.load: its own environment, bounded calls, copied arguments),
-- named as self.policies holds it.
local function store_policy(self, name, source)
  local mod = assert(policy.load(source, name))
  self.policies[name] = { mod = mod, revision = 1 }
  return mod
end

-- baton.log.warn captured while fn runs: the lines logged.
local log = require("baton").log -- (the one baton.log, which decide.lua logs through)
local function warnings(fn)
  local lines, orig = {}, log.warn
  log.warn = function(msg, fields) lines[#lines + 1] = { msg = msg, fields = fields } end
  local ok, err = pcall(fn)
  log.warn = orig
  assert(ok, err)
  return lines
end

-- 1. Which policy decides.
do
  local self = new_node("n1")
  T.is(decide.policy_for(self, spec_of("a")), default, "no policy named: the default")
  T.is(decide.policy_for(self, spec_of("a", "policy = \"race\"")), policy.builtin("race"),
       "a built-in by its name")
  T.is(decide.policy_for(self, spec_of("a", "policy = \"nosuch\"")), default,
       "a name that is neither stored nor built in: the default")
  local mine = store_policy(self, "race", "return { claim_delay = function() return 7 end }")
  T.is(decide.policy_for(self, spec_of("a", "policy = \"race\"")), mine,
       "a stored policy wins over the built-in of the same name")
  self.policies.race = nil
  T.is(decide.policy_for(self, spec_of("a", "policy = \"race\"")), policy.builtin("race"),
       "and the built-in decides again once it is removed")
end

-- 2. live_nodes: the registrations as a list sorted by name, built once
-- per change.
do
  local self = new_node("n2")
  register(self, { { "n3" }, { "n10" }, { "n1" }, { "b" }, { "n2" }, { "a" } })
  local list = decide.live_nodes(self)
  local names = {}
  for i, n in ipairs(list) do names[i] = n.name end
  T.is(table.concat(names, ","), "a,b,n1,n10,n2,n3", "live_nodes: every registration, sorted by name")
  T.ok(decide.live_nodes(self) == list, "the same list until a registration changes")
  decide.set_node(self, "n2", nil)
  local after = decide.live_nodes(self)
  T.ok(after ~= list, "a node that left: the list is built again")
  names = {}
  for i, n in ipairs(after) do names[i] = n.name end
  T.is(table.concat(names, ","), "a,b,n1,n10,n3", "without the node that left")
  decide.set_node(self, "c", { name = "c", labels = {} })
  T.is(decide.live_nodes(self)[3].name, "c", "a node that joined is in it, in its place")
  decide.forget_nodes(self)
  T.is(#decide.live_nodes(self), 0, "forget_nodes: none until a listing notes them again")
end

-- 3. job_view: the plain data a policy gets, and nothing else of the spec.
do
  local spec = spec_of("v", [[labels = { zone = "a" }, shards = 3, timeout = 60, concurrency = "allow",
    on_node_loss = "abandon", retry = { attempts = 2, backoff = 5, max_backoff = 50, jitter = 0.1 }]])
  local v = decide.job_view("v", spec)
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys)
  T.is(table.concat(keys, ","),
       "concurrency,labels,name,on_node_loss,policy,retry,schedule,shards,timeout,timezone",
       "the view holds the documented fields that are set, and neither run, cron nor source")
  T.is(v.policy, "default", "its policy, defaulted")
  T.is(v.name, "v", "the job's name")
  T.is(v.shards, 3, "its shards")
  T.is(v.labels.zone, "a", "its labels")
  T.is(v.on_node_loss, "abandon", "its on_node_loss")
  T.is(v.timezone, "UTC", "its time zone, defaulted")
  T.is(v.retry.attempts .. "/" .. v.retry.backoff .. "/" .. v.retry.max_backoff .. "/" .. v.retry.jitter,
       "2/5/50/0.1", "its retry table")
  T.ok(v.retry ~= spec.retry, "the view's retry table is a copy of the spec's")
  T.ok(decide.job_view("v", spec) == v, "made once per job version")
  T.ok(decide.job_view("w", spec) ~= v, "another name: a view of its own")
  T.is(decide.job_view("v", spec_of("v")).shards, 1, "a new version of the job: a new view")
  -- A built-in gets the view as it is: changing its retry table leaves the
  -- spec's alone (the spec's may be the one all jobs without retry share).
  local plain = spec_of("p")
  local pv = decide.job_view("p", plain)
  local before = plain.retry.attempts
  pv.retry.attempts = before + 40
  T.is(plain.retry.attempts, before, "changing the view's retry does not change the spec's")
  T.is(spec_of("q").retry.attempts, before, "nor any other job's")
end

-- 4. claim_delay through the default and the built-ins.
do
  local nodes = { { "n1" }, { "n2" }, { "n3" } }
  local seen = {}
  local spec = spec_of("d")
  for _, n in ipairs(nodes) do
    local self = new_node(n[1])
    register(self, nodes)
    local d = decide.claim_delay(self, "d", spec, FIRE)
    local want = default.claim_delay(decide.job_view("d", spec), FIRE, decide.live_nodes(self),
                                     self.nodes[n[1]])
    T.is(d, want, "default: " .. n[1] .. "'s delay is the default policy's answer for it")
    seen[#seen + 1] = d
  end
  table.sort(seen)
  T.is(table.concat(seen, ","), "0,0.5,1", "default: one node at once, the next ones GRACE apart")
  local race = spec_of("r", "policy = \"race\"")
  local all0 = true
  for _, n in ipairs(nodes) do
    local self = new_node(n[1])
    register(self, nodes)
    all0 = all0 and decide.claim_delay(self, "r", race, FIRE) == 0
  end
  T.ok(all0, "race: every node at once")
  -- labels: the node's own registration, or before it is registered its
  -- own name and labels
  local zoned = spec_of("z", "labels = { zone = \"a\" }")
  local b = new_node("b", { zone = "b" })
  register(b, { { "a", { zone = "a" } } })
  T.is(decide.claim_delay(b, "z", zoned, FIRE), nil, "a node without the job's labels never tries")
  local a = new_node("a", { zone = "a" })
  T.is(decide.claim_delay(a, "z", zoned, FIRE), 0,
       "a node not registered yet decides with its own labels")
  local moved = new_node("a", { zone = "a" })
  register(moved, { { "a", { zone = "b" } } })
  T.is(decide.claim_delay(moved, "z", zoned, FIRE), nil, "a registered node, with its registration")
end

-- 5. assign_shards.
do
  local self = new_node("n1")
  register(self, { { "n1" }, { "n2" }, { "n3" } })
  local spec = spec_of("s", "shards = 6")
  local a = decide.assign_shards(self, "s", spec, FIRE)
  local count = {}
  for i = 1, 6 do count[a[i]] = (count[a[i]] or 0) + 1 end
  T.is((count.n1 or 0) .. (count.n2 or 0) .. (count.n3 or 0), "222", "default: 6 shards, 2 a node")
  T.is(a[7], nil, "no shard past the job's")
  local hash = decide.assign_shards(self, "s", spec_of("s", "shards = 6, policy = \"hash\""), FIRE)
  local want = policy.builtin("hash").assign_shards(decide.job_view("s", spec), 6, decide.live_nodes(self))
  local same = true
  for i = 1, 6 do same = same and hash[i] == want[i] end
  T.ok(same, "hash: the built-in's assignment")
  local none = decide.assign_shards(self, "z", spec_of("z", "shards = 2, labels = { zone = \"x\" }"), FIRE)
  T.is(type(none), "table", "no eligible node: a table all the same")
  T.is(type(none) == "table" and next(none) or nil, nil, "giving no shard to anyone")
end

-- 6. A stored policy: decides with copies; what it changes stays its own.
do
  local me = new_node("n1", { zone = "a" })
  register(me, { { "n1", { zone = "a" } }, { "n2", { zone = "a" } } })
  store_policy(me, "meddle", [[
return { claim_delay = function(job, fire, nodes, me)
  job.name, job.labels.zone, job.retry.attempts, job.shards = "evil", "z", 99, 9
  nodes[1].name, me.labels.zone = "gone", "z"
  nodes[3] = { name = "n9", labels = {} }
  return 3
end }]])
  local spec = spec_of("m", "policy = \"meddle\", labels = { zone = \"a\" }, retry = { attempts = 3 }")
  T.is(decide.claim_delay(me, "m", spec, FIRE), 3, "the stored policy decided")
  local v = decide.job_view("m", spec)
  T.is(v.name .. "/" .. v.labels.zone .. "/" .. v.retry.attempts .. "/" .. v.shards, "m/a/3/1",
       "the job's view is unchanged")
  T.is(spec.name .. "/" .. spec.labels.zone .. "/" .. spec.retry.attempts .. "/" .. spec.shards, "m/a/3/1",
       "the node's spec is unchanged")
  local list = decide.live_nodes(me)
  T.is(#list .. list[1].name .. list[2].name, "2n1n2", "the live nodes are unchanged")
  T.is(me.nodes.n1.labels.zone, "a", "this node's registration is unchanged")
end

-- 7. A stored policy the sandbox holds (policy.remote, as baton.stored makes
-- one): asked with the job's view, the instant, the live nodes and this node.
do
  local self = new_node("n2")
  register(self, { { "n1" }, { "n2" } })
  local asked
  local mod = policy.remote({ claim_delay = function() end }, function(_, fname, ...)
    asked = { fname = fname, n = select("#", ...), ... }
    return true, 1.5
  end)
  self.policies.far = { mod = mod, revision = 3 }
  local spec = spec_of("f", "policy = \"far\"")
  T.is(decide.claim_delay(self, "f", spec, FIRE), 1.5, "the sandbox's answer")
  T.is(asked.fname, "claim_delay", "asked for claim_delay")
  T.is(asked.n, 4, "with four arguments")
  T.ok(asked[1] == decide.job_view("f", spec), "the job's view")
  T.is(asked[2], FIRE, "the instant")
  T.ok(asked[3] == decide.live_nodes(self), "the live nodes")
  T.ok(asked[4] == self.nodes.n2, "this node's registration")
  -- a sandbox that fails (stopped, timed out): the default decides
  local far_fail = policy.remote({ claim_delay = function() end }, function()
    return false, "claim_delay: the sandbox was stopped"
  end)
  self.policies.far = { mod = far_fail, revision = 4 }
  local d
  local lines = warnings(function() d = decide.claim_delay(self, "f", spec, FIRE) end)
  T.is(d, default.claim_delay(decide.job_view("f", spec), FIRE, decide.live_nodes(self), self.nodes.n2),
       "a failed sandbox call: the default's delay")
  T.is(#lines, 1, "and it is logged")
end

-- 8. The fallback: a policy that raises, waits, loops or answers nonsense;
-- the default decides that case, and the failure is logged, once a
-- POLICY_WARN_EVERY for the same job, function and error.
do
  local self = new_node("n1")
  register(self, { { "n1" }, { "n2" }, { "n3" } })
  local function policy_of(name, body) store_policy(self, name, "return { " .. body .. " }") end
  policy_of("raises", "claim_delay = function() error('boom') end")
  policy_of("waits", "claim_delay = function() baton.sleep(0.01) return 0 end")
  policy_of("loops", "claim_delay = function() while true do end end")
  policy_of("negative", "claim_delay = function() return -1 end")
  policy_of("word", "claim_delay = function() return 'soon' end")
  policy_of("nan", "claim_delay = function() return 0/0 end")
  policy_of("forever", "claim_delay = function() return math.huge end")
  local cases = {
    { "raises", "raised an error: .*boom" },
    { "waits", "must not wait" },
    { "loops", "more than %d+ Lua instructions" },
    { "negative", "returned %-1; expected a number of seconds >= 0, or nil" },
    { "word", "returned \"soon\"" },
    { "nan", "returned NaN" },
    { "forever", "returned inf" },
  }
  for _, c in ipairs(cases) do
    local spec = spec_of("j-" .. c[1], "policy = \"" .. c[1] .. "\"")
    local want = default.claim_delay(decide.job_view("j-" .. c[1], spec), FIRE, decide.live_nodes(self),
                                     self.nodes.n1)
    local d
    local lines = warnings(function() d = decide.claim_delay(self, "j-" .. c[1], spec, FIRE) end)
    T.is(d, want, c[1] .. ": the default's delay instead")
    local l = lines[1] or { fields = {} }
    T.is(#lines .. " " .. tostring(l.msg), "1 policy failed; the default decided", c[1] .. ": logged")
    T.like(tostring(l.fields.error), c[2], c[1] .. ": with the reason")
    T.is(tostring(l.fields.job) .. " " .. tostring(l.fields.policy) .. " " .. tostring(l.fields["function"])
         .. " " .. tostring(l.fields.instant), "j-" .. c[1] .. " " .. c[1] .. " claim_delay " .. FIRE,
         c[1] .. ": naming the job, the policy, the decision and the instant")
  end
  -- once a POLICY_WARN_EVERY
  local spec = spec_of("j-raises", "policy = \"raises\"")
  local again = warnings(function()
    for _ = 1, 5 do decide.claim_delay(self, "j-raises", spec, FIRE + 600) end
  end)
  T.is(#again, 0, "the same failure again within POLICY_WARN_EVERY: not logged again")
  local other = warnings(function() decide.claim_delay(self, "j-other", spec_of("j-other", "policy = \"raises\""), FIRE) end)
  T.is(#other, 1, "the same failure for another job is logged")
  local every = decide.POLICY_WARN_EVERY
  decide.POLICY_WARN_EVERY = 0
  local later = warnings(function() decide.claim_delay(self, "j-raises", spec, FIRE) end)
  decide.POLICY_WARN_EVERY = every
  T.is(#later, 1, "once POLICY_WARN_EVERY has passed, logged again")

  -- assign_shards: nonsense gets the default's assignment
  local sspec = function(name) return spec_of("s-" .. name, "shards = 3, policy = \"" .. name .. "\"") end
  policy_of("dead", "assign_shards = function(job, shards) return { 'n1', 'n2', 'n9' } end")
  policy_of("short", "assign_shards = function(job, shards) return { 'n1', 'n2' } end")
  policy_of("zero", "assign_shards = function(job, shards) return { [0] = 'n1', 'n1', 'n2', 'n3' } end")
  policy_of("string", "assign_shards = function() return 'n1' end")
  for _, c in ipairs { { "dead", "gave shard 3 to \"n9\", which is not a live node's name" },
                       { "short", "left shard 3 of 3 without a node" },
                       { "zero", "returned a key 0; shards are numbered 1..3" },
                       { "string", "returned a string; expected" } } do
    local spec = sspec(c[1])
    local a
    local lines = warnings(function() a = decide.assign_shards(self, "s-" .. c[1], spec, FIRE) end)
    local want = default.assign_shards(decide.job_view("s-" .. c[1], spec), 3, decide.live_nodes(self))
    T.is(table.concat(a, ","), table.concat(want, ","), "assign_shards " .. c[1] .. ": the default's assignment")
    T.like(tostring((lines[1] or { fields = {} }).fields.error), c[2], "assign_shards " .. c[1] .. ": logged, why")
  end
  policy_of("fine", "assign_shards = function() return { 'n3', 'n3', 'n3' } end")
  local ok
  local lines = warnings(function()
    ok = decide.assign_shards(self, "s-fine", spec_of("s-fine", "shards = 3, policy = \"fine\""), FIRE)
  end)
  T.is(table.concat(ok, ",") .. " " .. #lines, "n3,n3,n3 0", "a valid assignment is taken as it is, silently")
end

-- 9. on_orphan and retry_delay, through decide.decide as the node asks
-- them (node/orphans.lua, the run's end).
do
  local self = new_node("n1")
  local rec = { job = "o", node = "n2", attempt = 1, state = "running" }
  local function orphan(spec)
    return decide.decide(self, "o", spec, "on_orphan", { instant = "x" }, decide.job_view("o", spec), rec)
  end
  T.is(orphan(spec_of("o")), "rerun", "on_orphan, default: the job's on_node_loss (rerun)")
  T.is(orphan(spec_of("o", "on_node_loss = \"abandon\"")), "abandon", "on_orphan, default: abandon")
  store_policy(self, "keep", "return { on_orphan = function() return 'abandon' end }")
  T.is(orphan(spec_of("o", "policy = \"keep\"")), "abandon", "a stored policy's on_orphan")
  store_policy(self, "maybe", "return { on_orphan = function() return 'maybe' end }")
  local d
  local lines = warnings(function() d = orphan(spec_of("o", "policy = \"maybe\", on_node_loss = \"abandon\"")) end)
  T.is(d, "abandon", "on_orphan answering nonsense: the default's (the job's on_node_loss)")
  T.like(tostring((lines[1] or { fields = {} }).fields.error), "expected \"rerun\" or \"abandon\"", "logged, why")
  local function retry(spec, attempt)
    return decide.decide(self, "o", spec, "retry_delay", nil, decide.job_view("o", spec),
                         { attempt = attempt }, "exit status 1")
  end
  local none = spec_of("o", "policy = \"none\", retry = { attempts = 3, backoff = 10 }")
  T.is(retry(none, 1), nil, "retry_delay, none: give up")
  local fixed = spec_of("o", "policy = \"fixed\", retry = { attempts = 2, backoff = 7 }")
  T.is(tostring(retry(fixed, 1)) .. " " .. tostring(retry(fixed, 3)), "7 nil", "retry_delay, fixed: 7 s, then give up")
  store_policy(self, "table", "return { retry_delay = function() return {} end }")
  local bad = spec_of("o", "policy = \"table\", retry = { attempts = 2, backoff = 4, jitter = 0 }")
  lines = warnings(function() d = retry(bad, 2) end)
  T.is(d, 8, "retry_delay answering a table: the default's backoff (4 * 2^1)")
  T.is(#lines, 1, "logged")
end

T.done()
