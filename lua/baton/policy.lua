-- Scheduling policies (docs/policies.md): loading a
-- policy's source, calling its decisions safely, and the built-ins.
--
--   local policy = require "baton.policy"
--   local mod, err, code = policy.load(source, "near-db" [, chunkname])   (the sandbox's)
--   local ok, res = policy.call(mod, "claim_delay", job, fire, nodes, me)
--   local res, why = policy.decide(mod, "claim_delay", job, fire, nodes, me)
--   local ok, lines = policy.selftest(mod)
--   policy.builtin("hash")  --> the module lua/baton/policies/hash.lua, or nil
--   policy.functions(mod)   --> {"claim_delay", ...}: the decisions it defines
--
-- load compiles source text (never bytecode) into an environment of its
-- own (the job's, baton.job.new_env), runs the chunk under an instruction
-- bound where no waiting call is possible, and checks the table it
-- returns. call runs one decision the same way, under a much smaller
-- bound, and checks what it returned; it never raises for the policy's
-- sake, so the node can call it for every decision and use the default's
-- answer when it says false.
local job = require "baton.job"

local type, pairs, ipairs, tostring, select = type, pairs, ipairs, tostring, select
local pcall, error, rawget = pcall, error, rawget
local format, byte, floor, huge, concat, sort = string.format, string.byte, math.floor, math.huge,
  table.concat, table.sort
local loadstring, setfenv, unpack = loadstring, setfenv, unpack
local jit = rawget(_G, "jit")

local M = {}

-- Instructions a policy file may execute while loading (as for a job), a
-- decision may take (about a millisecond interpreted: balanced shards for
-- 100 nodes x 1,000 shards need about 6 million; a claim among 100 nodes
-- about 50,000), and a self-test may take.
M.LOAD_BUDGET = 1e7
M.CALL_BUDGET = 2e7
M.SELFTEST_BUDGET = 5e7

-- The decisions (docs/policies.md, "The interface"), and everything a policy
-- table may hold.
M.DECISIONS = { "claim_delay", "assign_shards", "retry_delay", "on_orphan" }
M.FIELDS = { "claim_delay", "assign_shards", "retry_delay", "on_orphan", "selftest", "description" }
local ALIASES = {
  placement = "claim_delay", delay = "claim_delay", claim = "claim_delay", place = "claim_delay",
  shard = "assign_shards", shards = "assign_shards", sharding = "assign_shards",
  retry = "retry_delay", backoff = "retry_delay", failover = "on_orphan", orphan = "on_orphan",
  on_node_loss = "on_orphan", test = "selftest", self_test = "selftest", desc = "description",
}

-- The built-in policies, lua/baton/policies/<name>.lua.
M.BUILTINS = { "default", "race", "hash", "round_robin", "least_loaded", "pinned", "spread",
  "fixed", "exponential", "none" }
local is_builtin_name = {}
for _, n in ipairs(M.BUILTINS) do is_builtin_name[n] = true end

-- Modules whose code ships with baton: called without copying arguments.
local trusted = setmetatable({}, { __mode = "k" })
-- Stand-ins for stored policies the sandbox holds (baton.stored): each
-- with the function that asks the sandbox for a decision.
local remote = setmetatable({}, { __mode = "k" })

-- policy.remote(mod, call): mod (a table with stand-ins for the decisions
-- it defines) decides through call(mod, fname, ...) --> true, result |
-- false, "reason"; policy.call checks the result as any other's.
function M.remote(mod, call)
  remote[mod] = call
  return mod
end

-- True when mod decides in the sandbox (a decision waits for it).
function M.is_remote(mod) return remote[mod] ~= nil end

-- A value's type as messages name it (NaN apart): the job checks' own.
local typename = require("baton.job.spec").typename

---------------------------------------------------------------------------
-- bounded calls

local sandbox = require "baton.sandbox"
local BUDGET_MSG = sandbox.BUDGET_MSG
-- (Policy files are loaded with the JIT off for all their functions, see
-- load; built-ins are trusted.)
local bounded = sandbox.bounded

-- The message for an error raised while loading ("while loading") or in a
-- function (what = nil).
local function raised(err, budget, what)
  err = tostring(err)
  local at = what and (" " .. what) or ""
  if err == BUDGET_MSG then
    return format("ran for more than %d Lua instructions%s (an endless loop?)", budget, at)
  end
  if err:find("cannot wait here", 1, true) or err:find("yield across", 1, true) then
    local fn = err:match("([%w_.:]+): cannot wait here") or "a waiting call"
    return "called " .. fn .. at .. "; a policy decides from its arguments alone "
      .. "and must not wait (etcd, exec, http, sleep)"
  end
  return "raised an error" .. at .. ": " .. err
end

---------------------------------------------------------------------------
-- loading

local function fail(name, msg)
  return nil, format("EINVAL: policy %s: %s", name, msg), "EINVAL"
end

-- Checks the table a policy file returned; nil when fine, else a message.
-- Fields: those of FIELDS, plus UPPER_CASE constants and `with`.
local function check_table(t)
  local known = {}
  for _, f in ipairs(M.FIELDS) do known[f] = true end
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    if type(k) ~= "string" then
      return format("the table: unexpected %s key %s (fields are names such as 'claim_delay')",
        type(k), tostring(k))
    end
    -- UPPER_CASE constants (GRACE = 0.5) and a `with` constructor for
    -- variants (pinned.with{node = "db-1"}) are the file's own business.
    local own = k:find("^[%u_][%u%d_]*$") and type(t[k]) ~= "function" or (k == "with" and type(t[k]) == "function")
    if not known[k] and not own then
      local msg = format("unknown field '%s'", k)
      local hint = job.did_you_mean(k, M.FIELDS, ALIASES)
      if hint then msg = msg .. format(" (did you mean '%s'?)", hint) end
      return msg .. "; a policy may define " .. concat(M.FIELDS, ", ")
    end
  end
  for _, k in ipairs(M.FIELDS) do
    local v = t[k]
    if k == "description" then
      if v ~= nil and type(v) ~= "string" then
        return format("field 'description': expected a string, got %s", typename(v))
      end
    elseif v ~= nil and type(v) ~= "function" then
      return format("field '%s': expected a function, got %s", k, typename(v))
    end
  end
  for _, k in ipairs(M.DECISIONS) do
    if t[k] then return nil end
  end
  return "defines no decision: a policy needs at least one of " .. concat(M.DECISIONS, ", ")
end

-- policy.run_file(source, name [, chunkname]) --> true, what the file
-- returned | nil, "EINVAL: policy NAME: ...", "EINVAL": compiled from
-- source text (never bytecode) into the sandbox's environment
-- (baton.job.new_env(true)), every function it defines interpreted (so the
-- count hook bounds its loops), run under the load budget where no waiting
-- call is possible. Raises on misuse.
function M.run_file(source, name, chunkname)
  if type(source) ~= "string" then
    error(format("bad argument #1 to 'load' (string expected, got %s)", type(source)), 2)
  end
  if type(name) ~= "string" then
    error(format("bad argument #2 to 'load' (string expected, got %s)", type(name)), 2)
  end
  if not job.valid_name(name) then
    return nil, format("EINVAL: invalid policy name %q (letters, digits, '_', '.', '-'; "
      .. "starting with a letter or digit)", name), "EINVAL"
  end
  if byte(source, 1) == 27 then
    return fail(name, "precompiled bytecode is refused: store the Lua source text")
  end
  local chunk, err = loadstring(source, "@" .. (chunkname or ("policies/" .. name))) -- keys: not a key
  if not chunk then return fail(name, "syntax error: " .. tostring(err)) end
  setfenv(chunk, job.new_env(true))
  if jit then jit.off(chunk, true) end
  local ok, t = bounded(M.LOAD_BUDGET, chunk)
  if not ok then return fail(name, raised(t, M.LOAD_BUDGET, "while loading")) end
  return true, t
end

-- policy.from_table(t, name) --> module | nil, "EINVAL: policy NAME: ...",
-- "EINVAL": the table a policy file returned, checked. A file that returns
-- a built-in (`return require "baton.policies.hash"`) is that built-in.
function M.from_table(t, name)
  if type(t) ~= "table" then
    return fail(name, "the file must return a table ({claim_delay = function(job, fire, nodes, me) "
      .. "... end, ...}), got " .. typename(t))
  end
  local what = t.run ~= nil and "run" or t.command ~= nil and "command" or nil
  if what and t.claim_delay == nil and t.assign_shards == nil then
    return fail(name, "this looks like a job (it has " .. what .. "), not a policy: store it with baton job put")
  end
  local req = job.required_name(t)
  if req then
    local b = M.builtin(req:match("^baton%.policies%.(.+)$"))
    if b then return b end
  end
  if trusted[t] then return t end -- (made by a built-in: pinned.with{...})
  local verr = check_table(t)
  if verr then return fail(name, verr) end
  return t
end

-- policy.load(source, name [, chunkname]) --> module table
-- | nil, "EINVAL: policy NAME: ...", "EINVAL": run_file, then from_table,
-- in this process. Raises on misuse. chunkname is what error positions
-- name (default "policies/NAME"). This is the sandbox's (baton.stored):
-- a node and the CLI reach a stored policy only through it.
function M.load(source, name, chunkname)
  local ok, t, code = M.run_file(source, name, chunkname)
  if not ok then return nil, t, code end
  return M.from_table(t, name)
end

-- True when t (what a file returned) is meant as a policy (no run, and a
-- field that is, or nearly is, a policy field); false otherwise. For
-- `baton check`, to tell a broken policy from a broken job.
function M.looks_like(t)
  if type(t) ~= "table" or t.run ~= nil then return false end
  if trusted[t] or job.required_name(t) then return true end
  for _, f in ipairs(job.FIELDS) do
    if f ~= "description" and t[f] ~= nil then return false end -- a job's field
  end
  for k in pairs(t) do
    if type(k) == "string" and k ~= "description"
      and (job.did_you_mean(k, M.FIELDS, ALIASES) or ALIASES[k]) then
      return true
    end
  end
  return false
end

-- policy.builtin(name) --> the built-in module lua/baton/policies/NAME.lua,
-- or nil when there is none.
function M.builtin(name)
  if type(name) ~= "string" or not is_builtin_name[name] then return nil end
  local ok, mod = pcall(require, "baton.policies." .. name)
  if not ok or type(mod) ~= "table" then return nil end
  trusted[mod] = true
  return mod
end

-- Marks a module made by a built-in (pinned.with{...}) as trusted.
function M.trust(mod)
  trusted[mod] = true
  return mod
end

-- The decisions a module defines itself, in DECISIONS order.
function M.functions(mod)
  local list = {}
  for _, f in ipairs(M.DECISIONS) do
    if type(mod[f]) == "function" then list[#list + 1] = f end
  end
  return list
end

---------------------------------------------------------------------------
-- calling

local function is_finite(v) return type(v) == "number" and v == v and v > -huge and v < huge end

-- A returned value as a message shows it: "x" quoted, 5, NaN, a table.
local function show(r)
  if type(r) == "string" then return format("%q", r) end
  if r ~= r then return "NaN" end
  if type(r) == "number" then return tostring(r) end
  return "a " .. typename(r)
end

local function seconds_or_nil(fname)
  return function(r)
    if r == nil then return nil end
    if not is_finite(r) or r < 0 then
      return format("%s returned %s; expected a number of seconds >= 0, or nil", fname, show(r))
    end
  end
end

-- Checks of each decision's result: nil when fine, else the message.
local CHECKS = {
  claim_delay = seconds_or_nil("claim_delay"),
  retry_delay = seconds_or_nil("retry_delay"),
  on_orphan = function(r)
    if r ~= "rerun" and r ~= "abandon" then
      return format("on_orphan returned %s; expected \"rerun\" or \"abandon\"", show(r))
    end
  end,
  -- args: job, shards, nodes. nil means no node can run the shards now.
  assign_shards = function(r, _, shards, nodes)
    if r == nil then return nil end
    if type(r) ~= "table" then
      return format("assign_shards returned a %s; expected {[shard] = node name} or nil", typename(r))
    end
    local live = {}
    for _, n in ipairs(nodes or {}) do live[n.name] = true end
    for k in pairs(r) do
      if type(k) ~= "number" or k ~= floor(k) or k < 1 or k > shards then
        return format("assign_shards returned a key %s; shards are numbered 1..%d", tostring(k), shards)
      end
    end
    for i = 1, shards do
      local v = r[i]
      if v == nil then return format("assign_shards left shard %d of %d without a node", i, shards) end
      if type(v) ~= "string" or not live[v] then
        return format("assign_shards gave shard %d to %s, which is not a live node's name", i, show(v))
      end
    end
  end,
}

-- A deep copy of plain data (tables, strings, numbers, booleans), so that
-- a stored policy cannot change the node's own tables.
local function copy(v, seen)
  if type(v) ~= "table" then return v end
  seen = seen or {}
  if seen[v] then return seen[v] end
  local c = {}
  seen[v] = c
  for k, x in pairs(v) do c[copy(k, seen)] = copy(x, seen) end
  return c
end

local default -- the default module, loaded on first use

-- policy.call(mod, fname, ...) --> true, result | false, "reason".
-- Calls mod[fname] (the default's when mod has none) and checks the
-- result. A stored policy gets copies of the arguments and runs under
-- CALL_BUDGET instructions, where waiting raises; a built-in gets them as
-- they are, in a plain pcall:
--   claim_delay(job, fire, nodes, me)        number >= 0 or nil (never)
--   assign_shards(job, shards, nodes [, fire]) {[1..shards] = live node name},
--                                            or nil (no node can run them)
--   retry_delay(job, run, err)               number >= 0 or nil (give up)
--   on_orphan(job, run)                      "rerun" or "abandon"
-- Raises only on misuse (mod not a table, an unknown fname).
function M.call(mod, fname, ...)
  if type(mod) ~= "table" then
    error(format("bad argument #1 to 'call' (table expected, got %s)", type(mod)), 2)
  end
  local check = CHECKS[fname]
  if not check then
    error(format("bad argument #2 to 'call' (one of %s expected, got %s)",
      concat(M.DECISIONS, ", "), tostring(fname)), 2)
  end
  local fn = mod[fname]
  if fn == nil then
    default = default or M.builtin("default")
    mod, fn = default, default[fname]
  end
  if type(fn) ~= "function" then return false, fname .. " is a " .. typename(fn) .. ", not a function" end
  local ok, res
  if trusted[mod] then
    -- The node's own code, which neither loops without end nor waits: no
    -- budget hook, so it runs compiled (a node asks claim_delay for every
    -- instant of every job, on every node).
    ok, res = pcall(fn, ...)
  elseif remote[mod] then
    -- A stored policy the sandbox holds (baton.stored): the decision is
    -- made there, and this waits for it.
    ok, res = remote[mod](mod, fname, ...)
    if not ok then return false, res end
  else
    local n, args = select("#", ...), { ... }
    for i = 1, n do args[i] = copy(args[i]) end
    ok, res = bounded(M.CALL_BUDGET, fn, unpack(args, 1, n))
  end
  if not ok then return false, fname .. " " .. raised(res, M.CALL_BUDGET) end
  local cerr = check(res, ...)
  if cerr then return false, cerr end
  return true, res
end

-- policy.decide(mod, fname, ...) --> result, nil when mod decided;
-- result, "reason" when mod failed and the default decided instead. What
-- the node calls for each decision (and logs the reason when there is one).
function M.decide(mod, fname, ...)
  local ok, res = M.call(mod, fname, ...)
  if ok then return res, nil end
  default = default or M.builtin("default")
  local dok, dres = M.call(default, fname, ...)
  if not dok then error("the default policy failed: " .. tostring(dres)) end
  return dres, res
end

-- policy.selftest(mod) --> true, {line, ...} | false, "reason". Runs
-- mod.selftest() under SELFTEST_BUDGET; true, {} when it has none. The
-- self-test asserts its own behaviour (on util.sample(), say) and returns
-- lines describing the decisions it checked.
function M.selftest(mod)
  if type(mod) ~= "table" then
    error(format("bad argument #1 to 'selftest' (table expected, got %s)", type(mod)), 2)
  end
  if mod.selftest == nil then return true, {} end
  local ok, res = bounded(M.SELFTEST_BUDGET, mod.selftest)
  if not ok then return false, "selftest " .. raised(res, M.SELFTEST_BUDGET) end
  if res == nil then return true, {} end
  if type(res) ~= "table" then
    return false, "selftest returned a " .. typename(res) .. "; expected a list of lines (or nothing)"
  end
  local lines = {}
  for i, l in ipairs(res) do lines[i] = tostring(l) end
  return true, lines
end

-- policy.preview(mod) --> ok, {line, ...}: the decisions mod makes for the
-- sample cluster (policies/util.lua's sample(): 3 nodes with labels and
-- loads, a job with 6 shards every 10 minutes, 3 instants), through call,
-- as `baton check` prints them. ok is false if a decision failed (the lines
-- say which and why).
function M.preview(mod)
  local util = require "baton.policies.util"
  local s = util.sample()
  local sjob, nodes = s.job, s.nodes
  local ok, lines = true, {}
  local function line(l) lines[#lines + 1] = l end
  local function from(f) return mod[f] == nil and " (default's)" or "" end
  local parts = {}
  for _, n in ipairs(nodes) do
    local l = {}
    for _, k in ipairs { "zone", "region" } do l[#l + 1] = k .. "=" .. n.labels[k] end
    parts[#parts + 1] = format("%s (%s; %d running)", n.name, concat(l, ","), n.running)
  end
  line("sample cluster: " .. concat(parts, ", "))
  line(format("sample job: schedule %q, %d shards, retry {attempts = %d, backoff = %g, max_backoff = %g, "
    .. "jitter = %g}, on_node_loss %s", sjob.schedule, sjob.shards, sjob.retry.attempts, sjob.retry.backoff,
    sjob.retry.max_backoff, sjob.retry.jitter, sjob.on_node_loss))
  line("claim_delay" .. from("claim_delay") .. ":")
  local reasons, seen = {}, {}
  for _, fire in ipairs(s.instants) do
    local cells = {}
    for _, me in ipairs(nodes) do
      local cok, d = M.call(mod, "claim_delay", sjob, fire, nodes, me)
      if not cok then
        ok = false
        cells[#cells + 1] = me.name .. " FAILED"
        if not seen[d] then seen[d] = true; reasons[#reasons + 1] = d end
      else
        cells[#cells + 1] = me.name .. " " .. util.show_delay(d)
      end
    end
    line("  " .. os.date("!%Y-%m-%dT%H:%M:%SZ", fire) .. "  " .. concat(cells, ", "))
  end
  for _, r in ipairs(reasons) do line("  FAILED: " .. r) end
  local aok, a = M.call(mod, "assign_shards", sjob, sjob.shards, nodes, s.instants[1])
  if not aok then ok = false; line("assign_shards" .. from("assign_shards") .. ": FAILED: " .. a)
  elseif a == nil then line("assign_shards" .. from("assign_shards") .. ": nil (no node runs them)")
  else
    line(format("assign_shards%s: %s (%s)", from("assign_shards"), util.show_assignment(a, sjob.shards),
      (util.counts(a))))
  end
  local cells = {}
  for attempt = 1, 4 do
    -- not a run record: a sample the policy is asked about
    local rok, d = M.call(mod, "retry_delay", sjob, { job = sjob.name, attempt = attempt, state = "failed",
      node = "n1", error = "exit status 1" }, "exit status 1")
    if not rok then ok = false; cells[#cells + 1] = attempt .. " FAILED: " .. d
    else cells[#cells + 1] = attempt .. " -> " .. (d and util.show_delay(d) or "give up") end
  end
  line("retry_delay" .. from("retry_delay") .. " after attempt: " .. concat(cells, ", "))
  -- not a run record: a sample the policy is asked about
  local ook, o = M.call(mod, "on_orphan", sjob, { job = sjob.name, attempt = 1, state = "running", node = "n2" })
  if not ook then ok = false; line("on_orphan" .. from("on_orphan") .. ": FAILED: " .. o)
  else line("on_orphan" .. from("on_orphan") .. ": " .. o) end
  return ok, lines
end

return M
