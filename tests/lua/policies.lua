-- baton.policy and the built-in scheduling policies (docs/policies.md): each
-- built-in's behaviour, loading errors (the message is part of the contract),
-- the bounded, checked calls and their fallbacks, and every self-test. No
-- etcd needed.
local T = require "tap"
local policy = require "baton.policy"
local util = require "baton.policies.util"
local root = os.getenv("BATON_ROOT") or "."

local function node(name, labels, running, started)
  return { name = name, labels = labels or {}, running = running or 0, started = started or 1000 }
end
local function job(name, extra)
  local j = { name = name, labels = {}, policy = "p", schedule = "*/2 * * * * *", timezone = "UTC",
    timeout = 60, concurrency = "forbid", shards = 1, on_node_loss = "rerun",
    retry = { attempts = 3, backoff = 10, max_backoff = 300, jitter = 0.2 } }
  for k, v in pairs(extra or {}) do j[k] = v end
  return j
end
local three = { node("n1"), node("n2"), node("n3") }
local FIRE = 1767225600

-- The names of the nodes that would claim first (delay 0), in list order.
local function firsts(p, j, fire, nodes)
  local w = {}
  for _, me in ipairs(nodes) do
    if p.claim_delay(j, fire, nodes, me) == 0 then w[#w + 1] = me.name end
  end
  return table.concat(w, ",")
end

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("*a")
  f:close()
  return s
end

-- 0. The hash the default's claim order rests on is unchanged.
do
  T.is(util.hash(""), 2872998923, "hash(''): FNV-1a + murmur finaliser as before")
  T.is(policy.builtin("default").hash, util.hash, "default.hash is still there (the node uses it)")
  T.is(util.hash("nightly@1700000000/n1"), 4055937374, "hash of an instant key as before")
  T.is(policy.builtin("default").claim_delay({ name = "j", labels = {} }, 1700000000,
    { node("a"), node("b"), node("c") }, node("b")), 1, "default claim_delay: same rank as before")
end

-- 1. race: every eligible node at once.
do
  local p = policy.builtin("race")
  local all0 = true
  for _, me in ipairs(three) do all0 = all0 and p.claim_delay(job("j"), FIRE, three, me) == 0 end
  T.ok(all0, "race: every node's delay is 0")
  T.is(p.claim_delay(job("j", { labels = { zone = "a" } }), FIRE, three, three[1]), nil,
    "race: a node without the job's labels never tries")
end

-- 2. hash: the same home whatever the order; about 1/n move when a node joins.
do
  local p = policy.builtin("hash")
  local rev = { three[3], three[2], three[1] }
  local same = true
  for i = 1, 50 do
    local j = job("job" .. i)
    local a = firsts(p, j, FIRE, three)
    same = same and a ~= "" and not a:find(",") and a == firsts(p, j, FIRE, rev)
      and a == firsts(p, j, FIRE + 3600, three)
  end
  T.ok(same, "hash: one home per job, independent of list order and instant")
  local four = { three[1], three[2], three[3], node("n4") }
  local moved, wrong = 0, 0
  for i = 1, 300 do
    local j = job("job-" .. i)
    local before, after = firsts(p, j, FIRE, three), firsts(p, j, FIRE, four)
    if before ~= after then
      moved = moved + 1
      if after ~= "n4" then wrong = wrong + 1 end
    end
  end
  T.note(("hash: %d of 300 jobs moved when a 4th node joined (ideal 75)"):format(moved))
  T.ok(moved <= 300 / 4 + 25 and moved >= 300 / 4 - 25, "hash: about 1/4 of 300 jobs move (" .. moved .. ")")
  T.is(wrong, 0, "hash: jobs only move to the new node")
  -- shards: each has a home, stable across calls
  local a = p.assign_shards(job("sh"), 6, three)
  T.is_deeply(p.assign_shards(job("sh"), 6, rev), a, "hash: shard homes independent of list order")
  local smoved = 0
  for i = 1, 300 do
    local b4 = p.assign_shards(job("s" .. i), 1, three)[1]
    if b4 ~= p.assign_shards(job("s" .. i), 1, four)[1] then smoved = smoved + 1 end
  end
  T.ok(smoved <= 100, "hash: about 1/4 of 300 shards move (" .. smoved .. ")")
end

-- 3. round_robin: successive instants on successive nodes.
do
  local p = policy.builtin("round_robin")
  local j = job("rr") -- every 2 s
  local seq = {}
  for k = 0, 5 do seq[#seq + 1] = firsts(p, j, FIRE + 2 * k, three) end
  T.is(table.concat(seq, " "), "n1 n2 n3 n1 n2 n3", "round_robin: cycles in name order, one per instant")
  local shuffled = { three[2], three[3], three[1] }
  local seq2 = {}
  for k = 0, 5 do seq2[#seq2 + 1] = firsts(p, j, FIRE + 2 * k, shuffled) end
  T.is(table.concat(seq2, ","), "n1,n2,n3,n1,n2,n3", "round_robin: the list order does not matter")
  local daily = job("d", { schedule = "0 2 * * *", timezone = "Asia/Shanghai" })
  local fires = baton.cron("0 2 * * *", "Asia/Shanghai"):next_n(3, FIRE)
  local dseq = {}
  for _, f in ipairs(fires) do dseq[#dseq + 1] = firsts(p, daily, f, three) end
  T.ok(dseq[1] ~= dseq[2] and dseq[2] ~= dseq[3] and dseq[1] ~= dseq[3],
    "round_robin: a daily job in a zone rotates too (" .. table.concat(dseq, " ") .. ")")
  T.is(p.claim_delay(j, FIRE + 2, three, three[1]), 1, "round_robin: the others follow in the ring, 0.5 s apart")
  T.is(firsts(p, j, "P/trigger/rr/1-abc", three):find(",") , nil, "round_robin: a manual run has one first node")
end

-- 4. least_loaded: fewest running first.
do
  local p = policy.builtin("least_loaded")
  local nodes = { node("a", nil, 5), node("b", nil, 1), node("c", nil, 3) }
  T.is(firsts(p, job("ll"), FIRE, nodes), "b", "least_loaded: the node with the fewest running claims first")
  T.is(p.claim_delay(job("ll"), FIRE, nodes, nodes[1]), 1, "least_loaded: the busiest last")
  local tie = { node("a", nil, 1), node("b", nil, 1), node("c", nil, 1) }
  local seen = {}
  for k = 0, 29 do seen[firsts(p, job("ll"), FIRE + k, tie)] = true end
  local n = 0
  for _ in pairs(seen) do n = n + 1 end
  T.ok(n >= 2, "least_loaded: ties go to different nodes over instants")
  local a = p.assign_shards(job("ll"), 6, nodes) -- loads 5, 1, 3 + 6 = 15: 5 each
  local _, c = util.counts(a)
  T.is_deeply({ c.a, c.b, c.c }, { nil, 4, 2 }, "least_loaded: shards level the load")
end

-- 5. pinned: stays until its node leaves.
do
  local p = policy.builtin("pinned")
  local nodes = { node("n1", nil, 0, 300), node("n2", nil, 0, 100), node("n3", nil, 0, 200) }
  T.is(firsts(p, job("pin"), FIRE, nodes), "n2", "pinned: the longest-running node (n2) runs it")
  T.is(p.claim_delay(job("pin"), FIRE, nodes, nodes[1]), nil, "pinned: the others never try while it is live")
  local joined = { node("n0", nil, 0, 900), nodes[1], nodes[2], nodes[3] }
  T.is(firsts(p, job("pin"), FIRE, joined), "n2", "pinned: a joining node does not take it")
  local gone = { nodes[1], nodes[3] }
  T.is(firsts(p, job("pin"), FIRE, gone), "n3", "pinned: its node gone, the next-oldest takes it")
  local back = { nodes[1], node("n2", nil, 0, 1000), nodes[3] }
  T.is(firsts(p, job("pin"), FIRE, back), "n3", "pinned: the old pin coming back does not take it back")

  local db = require("baton.policies.pinned").with { node = "db-1", takeover = 5 }
  local cl = { node("app-1"), node("db-1"), node("app-2") }
  T.is(firsts(db, job("pin"), FIRE, cl), "db-1", "pinned.with{node}: the named node runs it")
  T.is(db.claim_delay(job("pin"), FIRE, cl, cl[1]), nil, "pinned.with{node}: the others never try")
  local without = { cl[1], cl[3] }
  local d1 = db.claim_delay(job("pin"), FIRE, without, cl[1])
  local d3 = db.claim_delay(job("pin"), FIRE, without, cl[3])
  T.ok(d1 and d3 and math.min(d1, d3) == 5 and math.max(d1, d3) == 5.5,
    "pinned.with{node}: its node gone, the others take over after 5 s, in order")
  T.is(firsts(db, job("pin"), FIRE, cl), "db-1", "pinned.with{node}: and it gets the job back when live")
  T.is_deeply(db.assign_shards(job("pin"), 3, cl), { "db-1", "db-1", "db-1" }, "pinned: every shard on the pin")
  T.error_like(function() require("baton.policies.pinned").with { node = 3 } end, "node must be a node name",
    "pinned.with: a bad option raises")
end

-- 6. spread and the default: 2-2-2, and over zones.
do
  for _, name in ipairs { "spread", "default" } do
    local p = policy.builtin(name)
    local a = p.assign_shards(job("sp"), 6, three)
    local _, c = util.counts(a)
    T.is_deeply({ c.n1, c.n2, c.n3 }, { 2, 2, 2 }, name .. ": 6 shards over 3 nodes, 2-2-2")
    T.is_deeply(p.assign_shards(job("sp"), 6, { three[3], three[1], three[2] }), a,
      name .. ": the same assignment whatever the list order")
    local _, c7 = util.counts(p.assign_shards(job("sp"), 7, three))
    T.ok(math.max(c7.n1, c7.n2, c7.n3) - math.min(c7.n1, c7.n2, c7.n3) == 1, name .. ": 7 shards, 3-2-2")
    local zoned = p.assign_shards(job("sp", { labels = { zone = "a" } }), 4,
      { node("a1", { zone = "a" }), node("b1", { zone = "b" }), node("a2", { zone = "a" }) })
    local _, cz = util.counts(zoned)
    T.is_deeply({ cz.a1, cz.a2, cz.b1 }, { 2, 2, nil }, name .. ": only eligible nodes get shards")
    T.is(p.assign_shards(job("sp", { labels = { zone = "x" } }), 4, three), nil, name .. ": no eligible node: nil")
  end
  local sp = require("baton.policies.spread").with { by = "zone" }
  local nodes = { node("a1", { zone = "a" }), node("a2", { zone = "a" }), node("a3", { zone = "a" }),
    node("b1", { zone = "b" }) }
  local a = sp.assign_shards(job("z"), 6, nodes)
  local _, c = util.counts(a)
  T.is(c.b1, 3, "spread by zone: zone b's one node gets half of the shards")
  T.is_deeply({ c.a1, c.a2, c.a3 }, { 1, 1, 1 }, "spread by zone: zone a's half evenly over its 3 nodes")
  local _, plain = util.counts(require("baton.policies.spread").assign_shards(job("z"), 6, nodes))
  T.ok(plain.b1 <= 2, "spread without by: by node, not by zone")
  -- movement: with the same nodes the assignment is the same; one node leaving moves few shards
  local d = policy.builtin("default")
  local ten = {}
  for i = 1, 10 do ten[i] = node("m" .. i) end
  local before = d.assign_shards(job("mv"), 100, ten)
  local nine = {}
  for i = 1, 9 do nine[i] = ten[i] end
  local after = d.assign_shards(job("mv"), 100, nine)
  local moved = 0
  for i = 1, 100 do if before[i] ~= after[i] then moved = moved + 1 end end
  T.note("default: " .. moved .. " of 100 shards moved when 1 of 10 nodes left (its own 10 must)")
  T.ok(moved >= 10 and moved <= 40, "default: a node leaving moves its shards and few others")
end

-- 7. Retry curves.
do
  local j = job("r") -- attempts 3, backoff 10, max 300, jitter 0.2
  local fixed, expo, none, default = policy.builtin("fixed"), policy.builtin("exponential"),
    policy.builtin("none"), policy.builtin("default")
  T.is_deeply({ fixed.retry_delay(j, { attempt = 1 }), fixed.retry_delay(j, { attempt = 3 }),
    fixed.retry_delay(j, { attempt = 4 }) }, { 10, 10, nil }, "fixed: backoff each time, then give up")
  local within = true
  for _ = 1, 50 do
    for n = 1, 3 do
      local d = expo.retry_delay(j, { attempt = n })
      local want = 10 * 2 ^ (n - 1)
      within = within and d >= want * 0.8 and d <= want * 1.2
      local dd = default.retry_delay(j, { attempt = n })
      within = within and dd >= want * 0.8 and dd <= want * 1.2
    end
  end
  T.ok(within, "exponential and default: 10, 20, 40 s within +/- 20 %")
  T.is(expo.retry_delay(j, { attempt = 4 }), nil, "exponential: gives up after retry.attempts")
  local capped = job("c", { retry = { attempts = 9, backoff = 10, max_backoff = 60, jitter = 0 } })
  T.is(expo.retry_delay(capped, { attempt = 8 }), 60, "exponential: capped at max_backoff")
  T.is(expo.with { factor = 3 }.retry_delay(capped, { attempt = 3 }), 60, "exponential.with{factor=3}: 90 capped")
  T.is(expo.with { factor = 3 }.retry_delay(capped, { attempt = 2 }), 30, "exponential.with{factor=3}: 30")
  T.is(none.retry_delay(j, { attempt = 1 }), nil, "none: never retries")
  T.is(default.on_orphan(job("o", { on_node_loss = "abandon" }), {}), "abandon", "default on_orphan: on_node_loss")
end

-- 8. policy.load: errors, one line each.
do
  local function rejects(src, pattern, what)
    local m, err, code = policy.load(src, "p")
    T.is(m, nil, what .. ": refused")
    T.like(err, pattern, what .. ": message")
    T.is(code, "EINVAL", what .. ": code")
  end
  rejects("return {", "^EINVAL: policy p: syntax error: policies/p:1: unexpected symbol near '<eof>'$", "syntax")
  rejects("return { claim_dealy = function() end }",
    "^EINVAL: policy p: unknown field 'claim_dealy' %(did you mean 'claim_delay'%?%); a policy may define "
    .. "claim_delay, assign_shards, retry_delay, on_orphan, selftest, description$", "unknown field")
  rejects("return { claim_delay = function() end, retry = function() end }",
    "unknown field 'retry' %(did you mean 'retry_delay'%?%)", "an alias")
  rejects("return { claim_delay = 3 }", "^EINVAL: policy p: field 'claim_delay': expected a function, got number$",
    "non-function")
  rejects("return { claim_delay = function() end, description = 1 }",
    "field 'description': expected a string, got number", "description not a string")
  rejects("return { description = 'x' }", "defines no decision: a policy needs at least one of claim_delay, "
    .. "assign_shards, retry_delay, on_orphan$", "no decision")
  rejects(string.dump(function() return {} end), "precompiled bytecode is refused", "bytecode")
  rejects("while true do end", "^EINVAL: policy p: ran for more than 10000000 Lua instructions while loading "
    .. "%(an endless loop%?%)$", "endless loop at load")
  rejects("while true do pcall(function() while true do end end) end", "ran for more than", "pcall loop at load")
  rejects("baton.sleep(1) return {}", "called baton.sleep while loading; a policy decides from its arguments "
    .. "alone and must not wait", "waiting at load")
  rejects("return 42", "the file must return a table", "not a table")
  rejects("error('nope')", "raised an error while loading: policies/p:1: nope", "raises at load")
  rejects("return { run = function() end, schedule = '@daily' }", "looks like a job", "a job file")
  local m, err = policy.load("return {}", "bad name")
  T.ok(m == nil and err:find("^EINVAL: invalid policy name"), "an invalid name")
  T.error_like(function() policy.load(nil, "p") end, "bad argument #1 to 'load'", "misuse raises")

  local ok = policy.load("GRACE = 1; return { GRACE = 2, claim_delay = function() return GRACE end, "
    .. "with = function() end }", "p")
  T.ok(ok, "UPPER_CASE constants and `with` are allowed")
  local g = policy.load("x = 1; return { claim_delay = function() return x end }", "g1")
  T.is(rawget(_G, "x"), nil, "a policy's globals are its own")
  T.ok(policy.load("return require 'baton.policies.hash'", "h"), "returning a built-in module is fine")
  T.ok(policy.load("return require('baton.policies.pinned').with { node = 'db-1' }", "h"),
    "a built-in's variant is a valid policy")
  T.is(select(2, policy.call(g, "claim_delay", job("j"), FIRE, three, three[1])), 1, "and its globals work")
end

-- 9. policy.call: checks, fallbacks, the budget.
do
  local function p(src) return assert(policy.load(src, "p")) end
  local j = job("j")
  local ok, why = policy.call(p("return { claim_delay = function() error('boom') end }"), "claim_delay",
    j, FIRE, three, three[1])
  T.is(ok, false, "a raising policy: false")
  T.like(why, "^claim_delay raised an error: policies/p:1: boom$", "with the reason")

  local bad = {
    { "claim_delay", "return 'x'", 'claim_delay returned "x"; expected a number of seconds >= 0, or nil' },
    { "claim_delay", "return -1", "claim_delay returned %-1; expected" },
    { "claim_delay", "return 0/0", "claim_delay returned NaN" },
    { "claim_delay", "return math.huge", "claim_delay returned inf" },
    { "retry_delay", "return {}", "retry_delay returned a table" },
    { "on_orphan", "return 'retry'", 'on_orphan returned "retry"; expected "rerun" or "abandon"' },
    { "assign_shards", "return 'n1'", "assign_shards returned a string" },
    { "assign_shards", "return { 'n1', 'n2' }", "assign_shards left shard 3 of 3 without a node" },
    { "assign_shards", "return { 'n1', 'n2', 'zz' }", 'gave shard 3 to "zz", which is not a live node' },
    { "assign_shards", "return { 'n1', 'n2', 'n3', 'n1' }", "returned a key 4; shards are numbered 1..3" },
    { "assign_shards", "return { 'n1', 'n2', 3 }", "gave shard 3 to 3, which is not a live node" },
  }
  for _, b in ipairs(bad) do
    local m = p("return { " .. b[1] .. " = function() " .. b[2] .. " end }")
    local args = {
      claim_delay = { j, FIRE, three, three[1] }, retry_delay = { j, { attempt = 1 }, "x" },
      on_orphan = { j, {} }, assign_shards = { j, 3, three },
    }
    local cok, reason = policy.call(m, b[1], unpack(args[b[1]]))
    T.is(cok, false, b[1] .. " " .. b[2] .. ": refused")
    T.like(reason, b[3]:gsub("[%(%)%.%[%]%+%?]", "%%%0"):gsub("%%%%%-", "%%-"), b[1] .. " " .. b[2] .. ": reason")
  end
  T.ok(policy.call(p("return { claim_delay = function() return nil end }"), "claim_delay", j, FIRE, three,
    three[1]), "nil is a valid claim_delay (never)")
  T.ok(policy.call(p("return { assign_shards = function() return nil end }"), "assign_shards", j, 3, three),
    "nil is a valid assign_shards (no node)")

  -- an endless loop in a decision is cut in bounded time
  local loop = p("return { claim_delay = function() while true do end end }")
  local t0 = baton.now()
  local lok, lwhy = policy.call(loop, "claim_delay", j, FIRE, three, three[1])
  local took = baton.now() - t0
  T.is(lok, false, "an endless loop in claim_delay: false")
  T.like(lwhy, "^claim_delay ran for more than %d+ Lua instructions %(an endless loop%?%)$", "the reason")
  T.ok(took < 2, ("cut in bounded time (%.3f s)"):format(took))
  T.note(("an endless claim_delay was cut after %.0f ms"):format(took * 1000))
  local sneaky = p([[
    local function spin() while true do end end
    return { claim_delay = function() while true do pcall(spin) end end }]])
  T.is((policy.call(sneaky, "claim_delay", j, FIRE, three, three[1])), false, "a pcall loop is cut too")
  local waits = p("return { claim_delay = function() baton.sleep(1) return 0 end }")
  local wok, wwhy = policy.call(waits, "claim_delay", j, FIRE, three, three[1])
  T.is(wok, false, "a waiting decision: false")
  T.like(wwhy, "called baton.sleep; a policy decides from its arguments alone and must not wait", "the reason")
  -- the hook of the caller is back
  T.is(debug.gethook(), nil, "no hook left behind")

  -- missing function: the default's
  local only = p("return { claim_delay = function() return 7 end }")
  local rok, r = policy.call(only, "retry_delay", j, { attempt = 4 }, "x")
  T.ok(rok and r == nil, "a missing retry_delay is the default's (attempt 4 of 3: give up)")
  local ook, o = policy.call(only, "on_orphan", job("j", { on_node_loss = "abandon" }), {})
  T.is(o, "abandon", "a missing on_orphan is the default's")
  local _, sh = policy.call(only, "assign_shards", j, 6, three)
  local _, c = util.counts(sh)
  T.is_deeply({ c.n1, c.n2, c.n3 }, { 2, 2, 2 }, "a missing assign_shards is the default's")

  -- decide: the default decides when the policy fails
  local d, reason = policy.decide(p("return { claim_delay = function() error('x') end }"), "claim_delay",
    job("j"), 1700000000, { node("a"), node("b"), node("c") }, node("b"))
  T.is(d, 1, "decide: the default's delay when the policy fails")
  T.like(reason, "raised an error", "decide: and why")
  local d2, r2 = policy.decide(only, "claim_delay", j, FIRE, three, three[1])
  T.ok(d2 == 7 and r2 == nil, "decide: the policy's answer when it works")

  -- arguments are copies for stored policies
  local mut = p("return { claim_delay = function(job, fire, nodes, me) nodes[1].name = 'x'; job.labels.a = 1; "
    .. "me.running = 99; return 0 end }")
  local n1 = node("n1")
  local jj = job("j")
  policy.call(mut, "claim_delay", jj, FIRE, { n1 }, n1)
  T.ok(n1.name == "n1" and n1.running == 0 and jj.labels.a == nil, "a stored policy cannot change the node's tables")

  T.error_like(function() policy.call(only, "nope") end, "bad argument #2 to 'call'", "an unknown decision raises")
end

-- 10. Self-tests: every built-in's passes, a failing one says why.
do
  for _, name in ipairs(policy.BUILTINS) do
    local m = policy.builtin(name)
    T.ok(m and m.description and #policy.functions(m) > 0, name .. ": a built-in with a description")
    local ok, lines = policy.selftest(m)
    if not T.ok(ok, name .. ": selftest passes") then T.diag(lines) end
    T.ok(ok and #lines > 0, name .. ": selftest describes its decisions")
    -- the file itself is a valid stored policy too (copy it to start your own)
    local src = read(root .. "/lua/baton/policies/" .. name .. ".lua")
    local loaded, err = policy.load(src, name)
    if not T.ok(loaded, name .. ": its file loads with policy.load") then T.diag(err) end
    if loaded then T.ok((policy.selftest(loaded)), name .. ": and its selftest passes as a stored policy") end
  end
  for _, v in ipairs {
    { "pinned.with", require("baton.policies.pinned").with { node = "db-1" } },
    { "spread.with", require("baton.policies.spread").with { by = "zone" } },
    { "exponential.with", require("baton.policies.exponential").with { factor = 3 } },
  } do
    local ok, lines = policy.selftest(v[2])
    if not T.ok(ok, v[1] .. ": selftest passes") then T.diag(lines) end
  end
  local failing = assert(policy.load("return { claim_delay = function() return 1 end, "
    .. "selftest = function() assert(false, 'expected 0') end }", "f"))
  local ok, why = policy.selftest(failing)
  T.is(ok, false, "a failing selftest: false")
  T.like(why, "^selftest raised an error: policies/f:1: expected 0$", "with the assertion")
  T.is(policy.builtin("nope"), nil, "builtin: nil for an unknown name")
  T.is(policy.builtin("util"), nil, "builtin: util is not a policy")
  local pv_ok, pv = policy.preview(policy.builtin("default"))
  T.ok(pv_ok and #pv >= 7, "preview: the sample cluster's decisions")
end

-- 11. The documented example (docs/policies.md).
do
  local path = root .. "/lua/baton/policies/examples/near_db.lua"
  local m, err = policy.load(read(path), "near_db", path)
  if not T.ok(m, "examples/near_db.lua loads") then T.diag(err) end
  local ok, lines = policy.selftest(m)
  if not T.ok(ok, "examples/near_db.lua: selftest passes") then T.diag(lines) end
  local eu1, eu2, us = node("eu-1", { region = "eu" }), node("eu-2", { region = "eu" }), node("us-1", { region = "us" })
  local all = { eu1, eu2, us }
  local _, d = policy.call(m, "claim_delay", job("backup"), FIRE, all, us)
  T.is(d, 30, "near_db: another region waits 30 s")
  local _, d1 = policy.call(m, "claim_delay", job("backup"), FIRE, all, eu1)
  local _, d2 = policy.call(m, "claim_delay", job("backup"), FIRE, all, eu2)
  T.ok(math.min(d1, d2) == 0 and math.max(d1, d2) == 0.5, "near_db: the database's region first")
  T.is(select(2, policy.call(m, "claim_delay", job("backup"), FIRE, { us }, us)), 30,
    "near_db: with no node in the region, the job still runs, 30 s late")
  -- the steps in docs/policies.md show this file's code: every line of
  -- them is a line of the file
  local doc = read(root .. "/docs/policies.md")
  local file = "\n" .. read(path)
  local steps = 0
  for block in doc:gmatch("```lua\n(.-)```") do
    if (block:find("DB_REGION", 1, true) or block:find("near(me)", 1, true)) and not block:find("^%-%- example:") then
      steps = steps + 1
      local missing
      for l in block:gmatch("[^\n]+") do
        if not missing and not file:find("\n" .. l .. "\n", 1, true) then missing = l end
      end
      if not T.ok(not missing, "docs/policies.md step " .. steps .. ": its code is in near_db.lua") then
        T.diag("not in the file: " .. missing)
      end
    end
  end
  T.is(steps, 3, "docs/policies.md: three steps of code")
end

T.done()
