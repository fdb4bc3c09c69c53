-- What a valid job is: the fields of a job file, their defaults, and the
-- checks that turn the table a job file returned into a spec (docs/jobs.md)
-- or the one message that says what is wrong. Pure and synchronous.
--
--   spec.validate(t, name) --> spec (defaults read through its metatable) | nil, msg
local baton = require "baton"
local events = require "baton.events"
local names = require "baton.names"
local F = require "baton.job.fields"
local limits = require "baton.limits"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local pcall, setmetatable = pcall, setmetatable
local format, floor, huge = string.format, math.floor, math.huge
local sort, concat = table.sort, table.concat
local did_you_mean = names.did_you_mean

local M = {}

local DEFAULTS, RETRY_DEFAULTS, DEFAULT_RETRY = F.DEFAULTS, F.RETRY_DEFAULTS, F.DEFAULT_RETRY
local FIELDS, RETRY_FIELDS, ENUMS, ALIASES = F.FIELDS, F.RETRY_FIELDS, F.ENUMS, F.ALIASES
local building_mt, NONE = F.building_mt, F.NONE

local function typename(v)
  if v == nil then return "nil" end
  local t = type(v)
  if t == "number" and v ~= v then return "NaN" end
  return t
end

local function qs(s) return format("%q", s) end

-- The message of field f being wrong (field: nil and it).
local function field_msg(f, msg) return format("field '%s': %s", f, msg) end
local function field(f, msg) return nil, field_msg(f, msg) end

local function is_int(v) return type(v) == "number" and v == floor(v) and v > -huge and v < huge end
M.typename, M.is_int = typename, is_int
local function is_finite(v) return type(v) == "number" and v == v and v > -huge and v < huge end

local function one_of(list)
  local parts = {}
  for i, v in ipairs(list) do parts[i] = qs(v) end
  return concat(parts, ", ", 1, #parts - 1) .. " or " .. parts[#parts]
end

-- Each checker returns nil when fine, else the message after
-- "field 'F': ".
local function want_type(v, t)
  if type(v) ~= t then return format("expected a %s, got %s", t, typename(v)) end
end

local function check_positive(v)
  local e = want_type(v, "number")
  if e then return e end
  if not is_finite(v) or v <= 0 then return format("must be a number of seconds > 0, got %s", tostring(v)) end
end

local function check_enum(name)
  return function(v)
    local e = want_type(v, "string")
    if e then return e end
    for _, x in ipairs(ENUMS[name]) do if v == x then return nil end end
    return format("must be %s, got %s", one_of(ENUMS[name]), qs(v))
  end
end

local function unknown_field(what, k, known, aliases, prefix)
  if type(k) ~= "string" then
    return format("%s: unexpected %s key %s (fields are names such as 'schedule')", what, type(k), tostring(k))
  end
  local msg = format("unknown field '%s%s'", prefix or "", k)
  local hint = did_you_mean(k, known, aliases)
  if hint then msg = msg .. format(" (did you mean '%s%s'?)", prefix or "", hint) end
  return msg
end

local function is_list(t)
  local n = #t
  for k in pairs(t) do
    if not is_int(k) or k < 1 or k > n then return false end
  end
  return true
end

-- Checks the `on` table of job name (baton.events): {state = {job names or
-- "*"}, ...} with the states of events.STATES (or their aliases). Returns
-- it normalised ({[state] = sorted names}, aliases folded in), or nil, the
-- message.
local function check_on(on, name)
  local e = want_type(on, "table")
  if e then return nil, "field 'on': " .. e end
  local known, keys = {}, {}
  for _, s in ipairs(events.STATES) do known[s] = s end
  for a, s in pairs(events.ALIASES) do known[a] = s end
  for k in pairs(on) do keys[#keys + 1] = k end
  if #keys == 0 then
    return nil, format("field 'on': names no outcome; give {%s = {\"job\", ...}, ...}", events.STATES[2])
  end
  sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local out = {}
  for _, k in ipairs(keys) do
    if type(k) ~= "string" then
      return nil, format("field 'on': keys are outcomes, {failed = {\"backup\"}}; got the %s key %s",
        type(k), tostring(k))
    end
    if not known[k] then
      local all = {}
      for _, s in ipairs(events.STATES) do all[#all + 1] = s end
      for a in pairs(events.ALIASES) do all[#all + 1] = a end
      local msg = unknown_field("on", k, all, nil, "on.")
      if not msg:find("did you mean", 1, true) then
        msg = msg .. " (outcomes: " .. concat(all, ", ") .. ")"
      end
      return nil, msg
    end
    local f, list = "on." .. k, on[k]
    if type(list) ~= "table" or not is_list(list) or #list == 0 then
      return field(f, format("expected a list of job names ({\"backup\"} or {\"*\"}), got %s",
        type(list) ~= "table" and typename(list) or next(list) == nil and "an empty list"
          or "a table that is not a list"))
    end
    local state = known[k]
    local set = out[state] or {}
    out[state] = set
    for i, n in ipairs(list) do
      if type(n) ~= "string" then
        return field(f, format("entry %d is a %s, not a job name", i, typename(n)))
      end
      if n ~= "*" and not names.valid_name(n) then
        return field(f, format("%s is not a job name (letters, digits, '_', '.', '-'; or \"*\" "
          .. "for every job)", qs(n)))
      end
      if n == name then
        return field(f, format("names the job itself: each of its runs would start the next "
          .. "(cycle: %s -> %s)", name, name))
      end
      local dup = false
      for _, x in ipairs(set) do if x == n then dup = true end end
      if not dup then set[#set + 1] = n end
    end
  end
  for _, set in pairs(out) do sort(set) end
  return out
end

-- A table of string keys to string values (labels, params), checked in
-- key order so the message names the first bad entry; nil, message naming
-- field when it is not one. name_pattern, when given, is what keys match.

local function string_map(v, name, what, value_is, name_pattern)
  if v == nil or (type(v) == "table" and next(v) == nil) then return NONE end
  local out = {}
  local e = want_type(v, "table")
  if e then return field(name, e) end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    if type(k) ~= "string" then
      return field(name, format("key %s is a %s; %s, {region = \"eu\"}", tostring(k), type(k), what))
    end
    if name_pattern and not k:find(name_pattern) then
      return field(name, format("%s is not a parameter name (letters, digits and '_', "
        .. "not starting with a digit)", qs(k)))
    end
    if type(v[k]) ~= "string" then
      return field(name, format("%s of %s must be a string, got %s", value_is, qs(k), typename(v[k])))
    end
    out[k] = v[k]
  end
  return out
end

-- Cron objects are immutable: jobs with the same schedule and zone share
-- one (kept while a job holds it).
local crons = setmetatable({}, { __mode = "v" })
-- Returns true, the cron, or false, baton.cron's message.
local function cron_of(expr, tz)
  local key = expr .. "\0" .. tz
  local c = crons[key]
  if c then return true, c end
  local ok, res = pcall(baton.cron, expr, tz)
  if ok then crons[key] = res end
  return ok, res
end

local KNOWN = {}
for _, f in ipairs(FIELDS) do KNOWN[f] = true end

local function no_nul(s) return not s:find("%z") end

-- Checks what a job does, into spec: run (a function) or command (a
-- program: a list {program, args...} run as it is, or a string run by
-- /bin/sh -c; worker/main.lua runs it), exactly one of them. Returns nil
-- when fine, else the message.
local function check_command(t, spec)
  if t.run ~= nil and t.command ~= nil then
    return "fields 'run' and 'command' exclude each other: a job runs a Lua function or a program"
  end
  if t.command == nil then
    if t.run == nil then
      return "field 'run' is missing: a job needs run = function(ctx) ... end, "
        .. "or command = {\"program\", \"arg\", ...} to run a program"
    end
    if type(t.run) ~= "function" then
      local hint = (type(t.run) == "string" or type(t.run) == "table")
        and " (a program to run goes in command = {\"program\", \"arg\", ...} or command = \"shell text\")" or ""
      return field_msg("run", "expected a function, got " .. typename(t.run) .. hint)
    end
    for _, f in ipairs { "env", "cwd" } do
      if t[f] ~= nil then
        return field_msg(f, "only a job with a command has one (in run, give " .. f
          .. " to baton.exec)")
      end
    end
    spec.run = t.run
    return nil
  end
  local c = t.command
  if type(c) == "string" then
    if not c:find("%S") then return field_msg("command", "is empty") end
    if not no_nul(c) then return field_msg("command", "contains a NUL byte") end
  elseif type(c) == "table" then
    if not is_list(c) or #c == 0 then
      return field_msg("command", "must be a list {\"program\", \"arg\", ...} with no holes")
    end
    for i, a in ipairs(c) do
      if type(a) ~= "string" and not is_finite(a) then
        return field_msg("command", format("entry %d is a %s (arguments are strings or numbers)",
          i, typename(a)))
      end
      if type(a) == "string" and not no_nul(a) then
        return field_msg("command", format("entry %d contains a NUL byte", i))
      end
    end
    if type(c[1]) ~= "string" or c[1] == "" then
      return field_msg("command", "entry 1 must be the program: a non-empty string")
    end
  else
    return field_msg("command", "expected a list {\"program\", \"arg\", ...} or a string run by "
      .. "/bin/sh -c, got " .. typename(c))
  end
  spec.command = c
  return nil
end

-- A command's env and cwd, into spec. Returns nil when fine, else the
-- message.
local function check_command_env(t, spec)
  if t.env ~= nil then
    if type(t.env) ~= "table" then return field_msg("env", want_type(t.env, "table")) end
    local keys = {}
    for k in pairs(t.env) do keys[#keys + 1] = k end
    sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    local secret = {}
    if type(t.secrets) == "table" then
      for _, s in ipairs(t.secrets) do secret[s] = true end
    end
    for _, k in ipairs(keys) do
      if type(k) ~= "string" or not k:find("^[%a_][%w_]*$") then
        return field_msg("env", format("%s is not a variable name (letters, digits and '_', "
          .. "not starting with a digit)", type(k) == "string" and qs(k) or tostring(k)))
      end
      local v = t.env[k]
      if type(v) ~= "string" then
        return field_msg("env", format("the value of %s must be a string, got %s", k, typename(v)))
      end
      if not no_nul(v) then return field_msg("env", format("the value of %s contains a NUL byte", k)) end
      if secret[k] then
        return field_msg("env", format("%s is one of the job's secrets: the command gets its value "
          .. "from the node, remove it here", k))
      end
    end
    spec.env = t.env
  end
  if t.cwd ~= nil then
    local e = want_type(t.cwd, "string")
    if e then return field_msg("cwd", e) end
    if t.cwd:sub(1, 1) ~= "/" or not no_nul(t.cwd) then
      return field_msg("cwd", format("must be an absolute directory, got %s", qs(t.cwd)))
    end
    spec.cwd = t.cwd
  end
  return nil
end

-- The steps of validate, in the order their messages matter: each takes
-- the file's table t, the spec being built and the job's name, fills its
-- fields of the spec and returns nil, or the message of the first problem.
local step = {}

-- A key that is no field (the keys are sorted only to name the first).
function step.known(t)
  local unknown = false
  for k in pairs(t) do if not KNOWN[k] then unknown = true end end
  if not unknown then return nil end
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    if not KNOWN[k] then return unknown_field("the table", k, FIELDS, ALIASES) end
  end
end

-- run | command (with its env and cwd); description.
function step.what(t, spec)
  local cerr = check_command(t, spec) or (t.command ~= nil and check_command_env(t, spec))
  if cerr then return cerr end
  if t.description ~= nil then
    local e = want_type(t.description, "string")
    if e then return field_msg("description", e) end
    spec.description = t.description
  end
end

-- What starts it: schedule | queue | on, and the timezone (checked first:
-- the schedule is read on its clock).
function step.start(t, spec)
  if t.schedule ~= nil and t.queue ~= nil then
    return "fields 'schedule' and 'queue' exclude each other: a job runs on a schedule or per queue task"
  end
  if t.on ~= nil and t.queue ~= nil then
    return "fields 'on' and 'queue' exclude each other: a queue job runs once per queue task"
  end
  if t.schedule == nil and t.queue == nil and t.on == nil then
    return "needs a 'schedule' (cron, @daily, @every 30s, @manual), a 'queue' (a queue name) "
      .. "or 'on' (the outcomes of other jobs' runs that start it)"
  end
  local tz = DEFAULTS.timezone
  if t.timezone ~= nil then
    local e = want_type(t.timezone, "string")
    if e then return field_msg("timezone", e) end
    local ok, err = pcall(baton.cron, "@manual", t.timezone)
    if not ok then return field_msg("timezone", tostring(err)) end
    tz = t.timezone
  end
  spec.timezone = tz
  if t.schedule ~= nil then
    local e = want_type(t.schedule, "string")
    if e then return field_msg("schedule", e) end
    local ok, c = cron_of(t.schedule, tz)
    if not ok then return field_msg("schedule", tostring(c)) end
    spec.schedule, spec.cron = t.schedule, c
    spec.manual = t.schedule:lower():find("^%s*@manual%s*$") ~= nil
  elseif t.queue == nil then
    -- Only events (and manual triggers) start it: no instants of its own.
    spec.manual = true
    if t.timezone ~= nil then
      return field_msg("timezone", "a job with 'on' and no 'schedule' has no schedule to read on a clock; remove it")
    end
  else
    local e = want_type(t.queue, "string")
    if e then return field_msg("queue", e) end
    if not names.valid_name(t.queue) then
      return field_msg("queue", format("%s is not a queue name (letters, digits, '_', '.', '-'; "
        .. "starting with a letter or digit)", qs(t.queue)))
    end
    spec.queue = t.queue
    if t.timezone ~= nil then
      -- harmless, but a sign of a misunderstanding
      return field_msg("timezone", "a queue job has no schedule to read on a clock; remove it")
    end
  end
end

-- timeout, starting_deadline, memory (the most a run may hold, with every
-- process it starts: baton/limits.lua, in bytes), and the enums.
function step.limits(t, spec)
  spec.timeout = DEFAULTS.timeout
  if t.timeout ~= nil then
    local e = check_positive(t.timeout)
    if e then return field_msg("timeout", e) end
    spec.timeout = t.timeout
  end
  if t.starting_deadline ~= nil then
    local e = check_positive(t.starting_deadline)
    if e then return field_msg("starting_deadline", e) end
    spec.starting_deadline = t.starting_deadline
  end
  if t.memory ~= nil then
    local bytes, e = limits.parse(t.memory)
    if not bytes then return field_msg("memory", e) end
    spec.memory = bytes
  end
  for _, f in ipairs { "concurrency", "misfire", "on_node_loss" } do
    spec[f] = DEFAULTS[f]
    -- Each event is a piece of work of its own, like a queue task: runs of
    -- a job that only events start may overlap unless it says otherwise.
    if f == "concurrency" and t.on ~= nil and t.schedule == nil then spec[f] = "allow" end
    if t[f] ~= nil then
      local e = check_enum(f)(t[f])
      if e then return field_msg(f, e) end
      spec[f] = t[f]
    end
  end
end

function step.retry(t, spec)
  spec.retry = DEFAULT_RETRY
  if t.retry == nil then return nil end
  local e = want_type(t.retry, "table")
  if e then return field_msg("retry", e) end
  local r = {}
  for k, v in pairs(RETRY_DEFAULTS) do r[k] = v end
  local rk = {}
  for k in pairs(t.retry) do rk[#rk + 1] = k end
  sort(rk, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(rk) do
    local ok = false
    for _, f in ipairs(RETRY_FIELDS) do if k == f then ok = true end end
    if not ok then
      if type(k) ~= "string" then
        return field_msg("retry", format("unexpected %s key %s (fields are attempts, backoff, max_backoff, jitter)",
          type(k), tostring(k)))
      end
      return unknown_field("retry", k, RETRY_FIELDS, nil, "retry.")
    end
  end
  local tr = t.retry
  if tr.attempts ~= nil then
    if not is_int(tr.attempts) or tr.attempts < 0 then
      return field_msg("retry.attempts", format("must be a whole number >= 0, got %s", tostring(tr.attempts)))
    end
    r.attempts = tr.attempts
  end
  for _, f in ipairs { "backoff", "max_backoff" } do
    if tr[f] ~= nil then
      if not is_finite(tr[f]) or tr[f] < 0 then
        return field_msg("retry." .. f, format("must be a number of seconds >= 0, got %s", tostring(tr[f])))
      end
      r[f] = tr[f]
    end
  end
  if tr.backoff ~= nil and tr.max_backoff == nil and r.backoff > r.max_backoff then
    r.max_backoff = r.backoff
  end
  if r.max_backoff < r.backoff then
    return field_msg("retry.max_backoff", format("must be >= retry.backoff (%s), got %s",
      tostring(r.backoff), tostring(r.max_backoff)))
  end
  if tr.jitter ~= nil then
    if not is_finite(tr.jitter) or tr.jitter < 0 or tr.jitter > 1 then
      return field_msg("retry.jitter", format("must be a fraction from 0 to 1, got %s", tostring(tr.jitter)))
    end
    r.jitter = tr.jitter
  end
  spec.retry = r
end

-- shards, shard_params; policy.
function step.placement(t, spec)
  spec.shards = DEFAULTS.shards
  if t.shards ~= nil then
    if not is_int(t.shards) or t.shards < 1 then
      return field_msg("shards", format("must be a whole number >= 1, got %s", tostring(t.shards)))
    end
    spec.shards = t.shards
  end
  if t.shard_params ~= nil then
    local e = want_type(t.shard_params, "table")
    if e then return field_msg("shard_params", e) end
    if not is_list(t.shard_params) then
      return field_msg("shard_params", "must be a list {p1, p2, ...} with one entry per shard")
    end
    local n = #t.shard_params
    if t.shards == nil then
      spec.shards = n
      if n < 1 then return field_msg("shard_params", "must not be empty") end
    elseif n ~= spec.shards then
      return field_msg("shard_params", format("has %d entries for %d shards", n, spec.shards))
    end
    for i, p in ipairs(t.shard_params) do
      local tp = type(p)
      if tp ~= "string" and tp ~= "number" and tp ~= "boolean" and tp ~= "table" then
        return field_msg("shard_params", format("entry %d is a %s (strings, numbers, booleans and tables only)", i, tp))
      end
    end
    spec.shard_params = t.shard_params
  end
  spec.policy = DEFAULTS.policy
  if t.policy ~= nil then
    local e = want_type(t.policy, "string")
    if e then return field_msg("policy", e) end
    if not names.valid_name(t.policy) then
      return field_msg("policy", format("%s is not a policy name (letters, digits, '_', '.', '-')", qs(t.policy)))
    end
    spec.policy = t.policy
  end
end

-- labels, and params: the parameters a manual run may give (baton job run
-- --param k=v), with their defaults; every run gets them in ctx.params.
-- secrets: the names of the values each node gives the run in
-- ctx.secrets, from its --secrets-dir or its environment (the worker
-- resolves them; the values never reach etcd).
function step.inputs(t, spec)
  local labels, lerr = string_map(t.labels, "labels", "labels map names to values", "the value")
  if not labels then return lerr end
  spec.labels = labels
  local params, perr = string_map(t.params, "params", "params map names to default values",
                                  "the default", "^[%a_][%w_]*$")
  if not params then return perr end
  spec.params = params
  if t.secrets == nil then return nil end
  local e = want_type(t.secrets, "table")
  if e then return field_msg("secrets", e) end
  if not is_list(t.secrets) then
    return field_msg("secrets", 'must be a list of names {"DB_PASSWORD", ...}')
  end
  local seen = {}
  for i, s in ipairs(t.secrets) do
    if type(s) ~= "string" then
      return field_msg("secrets", format("entry %d is a %s, not a name", i, typename(s)))
    end
    if not s:find("^[%a_][%w_]*$") or #s > 200 then
      return field_msg("secrets", format("%s is not a secret name (letters, digits and '_', "
        .. "not starting with a digit)", qs(s)))
    end
    if seen[s] then return field_msg("secrets", format("%s is named twice", qs(s))) end
    seen[s] = true
  end
  spec.secrets = t.secrets
end

-- on: the outcomes of other jobs' runs that start it.
function step.on(t, spec, name)
  if t.on == nil then return nil end
  local on, e = check_on(t.on, name)
  if not on then return e end
  if spec.shards > 1 then
    return field_msg("shards", "an event runs a job once, not per shard: remove 'shards' or 'on'")
  end
  spec.on = on
end

local STEPS = { step.known, step.what, step.start, step.limits, step.retry, step.placement, step.inputs, step.on }

-- Validates the table a job file returned: the spec (defaults read
-- through its metatable once finished: M.finish), or nil, the message.
function M.validate(t, name)
  local spec = setmetatable({ name = name }, building_mt)
  for _, check in ipairs(STEPS) do
    local err = check(t, spec, name)
    if err then return nil, err end
  end
  return spec
end

return M
