-- The job loader and validator (docs/jobs.md), pure Lua and
-- synchronous: nothing here waits, so the node can call it from a watch
-- handler and the CLI before it writes anything.
--
--   local job = require "baton.job"
--   local spec, err, code = job.load(source, "backup" [, revision [, chunkname]])
--   job.next_fires(spec, 5 [, after])  --> {epoch, ...} ({} for @manual and queues)
--   job.summary(spec)                  --> plain data (no functions): for JSON and display
--
-- load compiles source text (never bytecode) into an environment of its own,
-- runs the chunk under an instruction bound and where no waiting call is
-- possible, requires a table back and validates it. It returns a normalised
-- spec (defaults filled, see DEFAULTS and docs/jobs.md) or
-- nil, "EINVAL: job NAME: field 'F': ...", "EINVAL".
local baton = require "baton"
local events = require "baton.events"

local type, pairs, ipairs, next, tostring = type, pairs, ipairs, next, tostring
local pcall, error, setmetatable, rawget = pcall, error, setmetatable, rawget
local format, byte, floor, huge = string.format, string.byte, math.floor, math.huge
local sort, concat = table.sort, table.concat
local loadstring, setfenv = loadstring, setfenv
local jit = rawget(_G, "jit")

local M = {}
local building_mt, finish -- (below: a spec without its defaults)

-- Instructions a chunk may execute at load time (baton.sandbox counts
-- them). A job file only builds and returns a table; 10 million VM
-- instructions is a few tens of milliseconds, far more than any real file.
M.LOAD_BUDGET = 1e7

-- Defaults of the optional fields (documented in docs/jobs.md).
local DEFAULTS = {
  timezone = "UTC",
  timeout = 3600,
  concurrency = "forbid",
  misfire = "run_once",
  starting_deadline = nil, -- no limit
  shards = 1,
  policy = "default",
  on_node_loss = "rerun",
}
M.DEFAULTS = DEFAULTS
local RETRY_DEFAULTS = { attempts = 0, backoff = 10, max_backoff = 300, jitter = 0.2 }
M.RETRY_DEFAULTS = RETRY_DEFAULTS
-- The retry table of every job that gives none: one table for all of them
-- (SPEC_DEFAULTS below). Nothing may change it; policies get a copy
-- (node/decide.lua, job_view).
local DEFAULT_RETRY = { attempts = 0, backoff = 10, max_backoff = 300, jitter = 0.2 }

local FIELDS = {
  "schedule", "queue", "timezone", "timeout", "concurrency", "misfire",
  "starting_deadline", "retry", "shards", "shard_params", "policy",
  "on_node_loss", "labels", "params", "secrets", "description", "on", "run", "memory",
  "command", "env", "cwd",
}
local RETRY_FIELDS = { "attempts", "backoff", "max_backoff", "jitter" }
local ENUMS = {
  concurrency = { "allow", "forbid", "replace" },
  misfire = { "skip", "run_once", "run_all" },
  on_node_loss = { "rerun", "abandon" },
}
-- Names people reach for out of habit in other schedulers.
local ALIASES = {
  tz = "timezone", zone = "timezone", time_zone = "timezone", cron = "schedule",
  retries = "retry", handler = "run", fn = "run", main = "run", deadline = "starting_deadline",
  concurrency_policy = "concurrency", node_selector = "labels", parameters = "params",
  triggers = "on", events = "on", trigger = "on", secret = "secrets",
  cmd = "command", exec = "command", shell = "command", script = "command", argv = "command",
  workdir = "cwd", dir = "cwd", directory = "cwd", working_dir = "cwd", chdir = "cwd",
  environment = "env", environ = "env",
}
-- The functions of a scheduling policy (docs/policies.md, "The interface").
M.POLICY_FUNCTIONS = { "claim_delay", "assign_shards", "retry_delay", "on_orphan" }

local NAME_PATTERN = "^[%w][%w_.-]*$"

-- True if s is a valid job (or policy, queue) name: letters, digits, "_",
-- "." and "-", starting with a letter or a digit.
function M.valid_name(s)
  return type(s) == "string" and #s <= 200 and s:find(NAME_PATTERN) ~= nil
end

-- The edit distance of a and b, a swap of two neighbours counting as one
-- edit ("hsah" is one from "hash"): optimal string alignment.
local function levenshtein(a, b)
  local older, prev, cur = {}, {}, {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    cur[0] = i
    local ca = byte(a, i)
    for j = 1, #b do
      local cost = ca == byte(b, j) and 0 or 1
      local d = prev[j] + 1
      if cur[j - 1] + 1 < d then d = cur[j - 1] + 1 end
      if prev[j - 1] + cost < d then d = prev[j - 1] + cost end
      if i > 1 and j > 1 and ca == byte(b, j - 1) and byte(a, i - 1) == byte(b, j)
         and older[j - 2] + 1 < d then
        d = older[j - 2] + 1
      end
      cur[j] = d
    end
    older, prev, cur = prev, cur, older
  end
  return prev[#b]
end

-- The known name closest to a misspelt one, or nil if none is close.
local function did_you_mean(name, known, aliases)
  if aliases and aliases[name:lower()] then return aliases[name:lower()] end
  local best, best_d = nil, huge
  local limit = #name <= 4 and 1 or 2
  for _, k in ipairs(known) do
    local d = levenshtein(name:lower(), k)
    if d < best_d then best, best_d = k, d end
  end
  if best_d <= limit then return best end
  return nil
end
M.did_you_mean = did_you_mean

---------------------------------------------------------------------------
-- the environment of a job

-- Read-only views of the standard libraries and of baton, shared by every
-- job: a job reads string.format or baton.etcd through them and cannot change
-- them for the others. (pairs() over a view sees nothing: it is a proxy. This
-- is isolation between jobs, not a security sandbox: a worker process is the
-- containment boundary: docs/architecture.md, "The pieces".)
local views = {}
local function view(name, t)
  local v = views[name]
  if v then return v end
  v = setmetatable({}, {
    __index = t,
    __newindex = function(_, k)
      error(format("%s is shared and read-only: cannot set %s.%s", name, name, tostring(k)), 2)
    end,
    __metatable = false,
  })
  views[name] = v
  return v
end

-- What a job sees as globals unless it defines its own. getfenv/setfenv
-- (they reach the process's globals) and debug (it could lift the load
-- bound) are left out.
local SHARED_FUNCTIONS = {
  "assert", "error", "ipairs", "next", "pairs", "pcall", "print", "rawequal",
  "rawget", "rawset", "select", "setmetatable", "getmetatable", "tonumber",
  "tostring", "type", "unpack", "xpcall", "require", "collectgarbage",
}
local SHARED_LIBS = { "string", "table", "math", "os", "io", "coroutine", "bit", "jit", "package" }

local base
local function base_env()
  if base then return base end
  base = {}
  for _, k in ipairs(SHARED_FUNCTIONS) do base[k] = rawget(_G, k) end
  for _, k in ipairs(SHARED_LIBS) do
    local lib = rawget(_G, k)
    if type(lib) == "table" then base[k] = view(k, lib) end
  end
  base.baton = view("baton", baton)
  base._VERSION = _VERSION
  return base
end

local env_mt = { __index = function(_, k) return base_env()[k] end }

-- The sandbox's environment (restricted = true, below): what stored code
-- that nobody vouched for yet may reach while the sandbox describes it
-- (docs/security.md, "The sandbox"): pure functions, no files, processes,
-- network, debug, ffi, jit or collector settings; require only of baton's
-- policy library; print goes nowhere. Its tables are built once and
-- shared, read-only (rawset refuses them too), so that one file cannot
-- change what the next one sees.
local RESTRICTED_FUNCTIONS = {
  "assert", "error", "ipairs", "next", "pairs", "pcall", "rawequal", "rawget",
  "select", "setmetatable", "tonumber", "tostring", "type", "unpack", "xpcall",
}
local RESTRICTED_LIBS = {
  string = { "byte", "char", "find", "format", "gmatch", "gsub", "len", "lower", "match", "rep",
             "reverse", "sub", "upper" },
  table = { "concat", "insert", "maxn", "remove", "sort" },
  math = true, bit = true,
  coroutine = { "create", "resume", "running", "status", "wrap", "yield" },
  os = { "clock", "date", "difftime", "time", "getenv" },
}
-- What of baton is there: plain data and pure functions; the calls that
-- wait are there only to say that they cannot.
local RESTRICTED_BATON = { "json", "cron", "now", "monotime", "version" }
local WAITING = { "sleep", "exec", "spawn", "http", "session", "mutex", "election", "signal", "go" }
local function cannot_wait(name)
  return function() error(name .. ": cannot wait here (not inside run)", 2) end
end

local is_frozen = setmetatable({}, { __mode = "k" })
-- A read-only table of the listed fields of t (all of them: names = true).
local function frozen(what, t, names)
  local own = {}
  if names == true then
    for k, v in pairs(t) do own[k] = v end
  else
    for _, k in ipairs(names) do own[k] = t[k] end
  end
  local v = setmetatable({}, {
    __index = own,
    __newindex = function(_, k)
      error(format("%s is shared and read-only: cannot set %s.%s", what, what, tostring(k)), 2)
    end,
    __metatable = false,
  })
  is_frozen[v] = what
  return v
end

local function restricted_rawset(t, k, v)
  if is_frozen[t] then
    error(format("%s is shared and read-only: cannot set %s.%s", is_frozen[t], is_frozen[t], tostring(k)), 2)
  end
  return rawset(t, k, v)
end

-- require in the sandbox: baton's policy library only, as read-only views
-- (required[view] = the module's name: `return require "baton.policies.hash"`
-- names a built-in policy as it is).
local required, views_of = setmetatable({}, { __mode = "k" }), {}
local function restricted_require(name)
  if type(name) ~= "string" or not name:find("^baton%.policies%.[%w_]+$") then
    error(format("require %q is not available here: a job file's top level and a policy are "
      .. "described in a sandbox that loads only baton's policy library (baton.policies.*); "
      .. "require other modules inside run", tostring(name)), 2)
  end
  local v = views_of[name]
  if not v then
    v = frozen(name, require(name), true)
    required[v], views_of[name] = name, v
  end
  return v
end

-- The module name of t when t is what the sandbox's require returned.
function M.required_name(t) return required[t] end

local function restricted_getmetatable(v)
  if type(v) ~= "table" then return nil end -- (the string metatable is the process's)
  return getmetatable(v)
end

local restricted_base
local function restricted_env()
  if restricted_base then return restricted_base end
  local b = {}
  for _, k in ipairs(RESTRICTED_FUNCTIONS) do b[k] = rawget(_G, k) end
  b.rawset = restricted_rawset
  b.getmetatable = restricted_getmetatable
  b.require = restricted_require
  b.print = function() end
  for lib, names in pairs(RESTRICTED_LIBS) do b[lib] = frozen(lib, rawget(_G, lib), names) end
  local bt = {}
  for _, k in ipairs(RESTRICTED_BATON) do bt[k] = baton[k] end
  for _, k in ipairs(WAITING) do bt[k] = cannot_wait("baton." .. k) end
  bt.etcd = setmetatable({}, { __index = function(_, k) return cannot_wait("baton.etcd:" .. tostring(k)) end,
                               __newindex = function() error("baton is shared and read-only", 2) end,
                               __metatable = false })
  is_frozen[bt.etcd] = "baton.etcd"
  bt.config = frozen("baton.config", { prefix = (baton.config or {}).prefix }, true)
  b.baton = frozen("baton", bt, true)
  b._VERSION = _VERSION
  restricted_base = { __index = b }
  return restricted_base
end

-- A fresh global table for one job: reads fall through to the shared
-- views, writes stay in it, and _G is the job's own table. restricted:
-- the sandbox's environment instead (above).
function M.new_env(restricted)
  local env
  if restricted then
    env = setmetatable({}, restricted_env())
  else
    env = setmetatable({}, env_mt)
  end
  env._G = env
  return env
end

---------------------------------------------------------------------------
-- running the chunk

local function fail(name, msg)
  return nil, format("EINVAL: job %s: %s", name, msg), "EINVAL"
end

local sandbox = require "baton.sandbox"
local BUDGET_MSG = sandbox.BUDGET_MSG

-- Calls fn() (a job file's chunk) under the load budget, with the JIT off
-- for it meanwhile (compiled loops do not run count hooks) and back on
-- after, so that run() may be compiled when it runs.
local function bounded_call(fn)
  if jit then jit.off(fn, true) end
  local ok, res = sandbox.bounded(M.LOAD_BUDGET, fn)
  if jit then jit.on(fn, true) end
  return ok, res
end

-- Turns a load-time error into the message the user should read.
local function load_error(err)
  err = tostring(err)
  if err == BUDGET_MSG then
    return format("the file ran for more than %d Lua instructions while loading "
      .. "(an endless loop?); a job file should only build and return its table", M.LOAD_BUDGET)
  end
  if err == sandbox.TIME_MSG then
    return format("the file ran for more than %g seconds while loading (an endless loop?); "
      .. "a job file should only build and return its table", sandbox.TIME_LIMIT)
  end
  if err:find("not enough memory", 1, true) then
    return format("the file used more than %d MB of memory while loading; a job file should only "
      .. "build and return its table", math.floor(sandbox.MEMORY / 2^20))
  end
  if err:find("cannot wait here", 1, true) or err:find("yield across", 1, true) then
    local fn = err:match("([%w_.:]+): cannot wait here") or "a waiting call"
    return "the file called " .. fn .. " while loading; calls that wait (etcd, exec, http, "
      .. "sleep) belong inside run"
  end
  return "error while loading: " .. err
end

---------------------------------------------------------------------------
-- validation

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
      if n ~= "*" and not M.valid_name(n) then
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

-- Validates the table a job file returned; returns the spec or nil, msg.
-- A table of string keys to string values (labels, params), checked in
-- key order so the message names the first bad entry; nil, message naming
-- field when it is not one. name_pattern, when given, is what keys match.
-- The labels or params of a job that has none: one table for all such
-- jobs (10,000 jobs, 1.5 MB less), which nothing may change.
local NONE = setmetatable({}, { __newindex = function()
  error("a job's labels and params are read-only", 2)
end, __metatable = false })
M.NONE = NONE

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
-- /bin/sh -c; cli/worker.lua runs it), exactly one of them, and the
-- command's env and cwd. Returns nil when fine, else the message.
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

local function validate(t, name)
  -- (the keys are sorted only to name the first unknown one)
  local unknown = false
  for k in pairs(t) do if not KNOWN[k] then unknown = true end end
  if unknown then
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = k end
    sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do
      if not KNOWN[k] then return nil, unknown_field("the table", k, FIELDS, ALIASES) end
    end
  end

  local spec = setmetatable({ name = name }, building_mt)

  -- run | command (with its env and cwd)
  local cerr = check_command(t, spec)
  if cerr then return nil, cerr end

  -- description
  if t.description ~= nil then
    local e = want_type(t.description, "string")
    if e then return field("description", e) end
    spec.description = t.description
  end

  -- schedule | queue | on
  if t.schedule ~= nil and t.queue ~= nil then
    return nil, "fields 'schedule' and 'queue' exclude each other: a job runs on a schedule or per queue task"
  end
  if t.on ~= nil and t.queue ~= nil then
    return nil, "fields 'on' and 'queue' exclude each other: a queue job runs once per queue task"
  end
  if t.schedule == nil and t.queue == nil and t.on == nil then
    return nil, "needs a 'schedule' (cron, @daily, @every 30s, @manual), a 'queue' (a queue name) "
      .. "or 'on' (the outcomes of other jobs' runs that start it)"
  end

  -- timezone (checked first: the schedule is read on its clock)
  local tz = DEFAULTS.timezone
  if t.timezone ~= nil then
    local e = want_type(t.timezone, "string")
    if e then return field("timezone", e) end
    local ok, err = pcall(baton.cron, "@manual", t.timezone)
    if not ok then return field("timezone", tostring(err)) end
    tz = t.timezone
  end
  spec.timezone = tz

  if t.schedule ~= nil then
    local e = want_type(t.schedule, "string")
    if e then return field("schedule", e) end
    local ok, c = cron_of(t.schedule, tz)
    if not ok then return field("schedule", tostring(c)) end
    spec.schedule, spec.cron = t.schedule, c
    spec.manual = t.schedule:lower():find("^%s*@manual%s*$") ~= nil
  elseif t.queue == nil then
    -- Only events (and manual triggers) start it: no instants of its own.
    spec.manual = true
    if t.timezone ~= nil then
      return field("timezone", "a job with 'on' and no 'schedule' has no schedule to read on a clock; remove it")
    end
  else
    local e = want_type(t.queue, "string")
    if e then return field("queue", e) end
    if not M.valid_name(t.queue) then
      return field("queue", format("%s is not a queue name (letters, digits, '_', '.', '-'; "
        .. "starting with a letter or digit)", qs(t.queue)))
    end
    spec.queue = t.queue
    if t.timezone ~= nil then
      -- harmless, but a sign of a misunderstanding
      return field("timezone", "a queue job has no schedule to read on a clock; remove it")
    end
  end

  -- timeout, starting_deadline
  spec.timeout = DEFAULTS.timeout
  if t.timeout ~= nil then
    local e = check_positive(t.timeout)
    if e then return field("timeout", e) end
    spec.timeout = t.timeout
  end
  if t.starting_deadline ~= nil then
    local e = check_positive(t.starting_deadline)
    if e then return field("starting_deadline", e) end
    spec.starting_deadline = t.starting_deadline
  end

  -- memory: the most a run may hold, with every process it starts
  -- (baton/limits.lua), in bytes
  if t.memory ~= nil then
    local bytes, e = require("baton.limits").parse(t.memory)
    if not bytes then return field("memory", e) end
    spec.memory = bytes
  end

  -- enums
  for _, f in ipairs { "concurrency", "misfire", "on_node_loss" } do
    spec[f] = DEFAULTS[f]
    -- Each event is a piece of work of its own, like a queue task: runs of
    -- a job that only events start may overlap unless it says otherwise.
    if f == "concurrency" and t.on ~= nil and t.schedule == nil then spec[f] = "allow" end
    if t[f] ~= nil then
      local e = check_enum(f)(t[f])
      if e then return field(f, e) end
      spec[f] = t[f]
    end
  end

  -- retry
  local r = DEFAULT_RETRY
  if t.retry ~= nil then
    r = {}
    for k, v in pairs(RETRY_DEFAULTS) do r[k] = v end
    local e = want_type(t.retry, "table")
    if e then return field("retry", e) end
    local rk = {}
    for k in pairs(t.retry) do rk[#rk + 1] = k end
    sort(rk, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(rk) do
      local ok = false
      for _, f in ipairs(RETRY_FIELDS) do if k == f then ok = true end end
      if not ok then
        if type(k) ~= "string" then
          return field("retry", format("unexpected %s key %s (fields are attempts, backoff, max_backoff, jitter)",
            type(k), tostring(k)))
        end
        return nil, unknown_field("retry", k, RETRY_FIELDS, nil, "retry.")
      end
    end
    local tr = t.retry
    if tr.attempts ~= nil then
      if not is_int(tr.attempts) or tr.attempts < 0 then
        return field("retry.attempts", format("must be a whole number >= 0, got %s", tostring(tr.attempts)))
      end
      r.attempts = tr.attempts
    end
    for _, f in ipairs { "backoff", "max_backoff" } do
      if tr[f] ~= nil then
        if not is_finite(tr[f]) or tr[f] < 0 then
          return field("retry." .. f, format("must be a number of seconds >= 0, got %s", tostring(tr[f])))
        end
        r[f] = tr[f]
      end
    end
    if tr.backoff ~= nil and tr.max_backoff == nil and r.backoff > r.max_backoff then
      r.max_backoff = r.backoff
    end
    if r.max_backoff < r.backoff then
      return field("retry.max_backoff", format("must be >= retry.backoff (%s), got %s",
        tostring(r.backoff), tostring(r.max_backoff)))
    end
    if tr.jitter ~= nil then
      if not is_finite(tr.jitter) or tr.jitter < 0 or tr.jitter > 1 then
        return field("retry.jitter", format("must be a fraction from 0 to 1, got %s", tostring(tr.jitter)))
      end
      r.jitter = tr.jitter
    end
  end
  spec.retry = r

  -- shards, shard_params
  spec.shards = DEFAULTS.shards
  if t.shards ~= nil then
    if not is_int(t.shards) or t.shards < 1 then
      return field("shards", format("must be a whole number >= 1, got %s", tostring(t.shards)))
    end
    spec.shards = t.shards
  end
  if t.shard_params ~= nil then
    local e = want_type(t.shard_params, "table")
    if e then return field("shard_params", e) end
    if not is_list(t.shard_params) then
      return field("shard_params", "must be a list {p1, p2, ...} with one entry per shard")
    end
    local n = #t.shard_params
    if t.shards == nil then
      spec.shards = n
      if n < 1 then return field("shard_params", "must not be empty") end
    elseif n ~= spec.shards then
      return field("shard_params", format("has %d entries for %d shards", n, spec.shards))
    end
    for i, p in ipairs(t.shard_params) do
      local tp = type(p)
      if tp ~= "string" and tp ~= "number" and tp ~= "boolean" and tp ~= "table" then
        return field("shard_params", format("entry %d is a %s (strings, numbers, booleans and tables only)", i, tp))
      end
    end
    spec.shard_params = t.shard_params
  end

  -- policy
  spec.policy = DEFAULTS.policy
  if t.policy ~= nil then
    local e = want_type(t.policy, "string")
    if e then return field("policy", e) end
    if not M.valid_name(t.policy) then
      return field("policy", format("%s is not a policy name (letters, digits, '_', '.', '-')", qs(t.policy)))
    end
    spec.policy = t.policy
  end

  -- labels, and params: the parameters a manual run may give (baton job
  -- run --param k=v), with their defaults; every run gets them in
  -- ctx.params
  local labels, lerr = string_map(t.labels, "labels", "labels map names to values", "the value")
  if not labels then return nil, lerr end
  spec.labels = labels
  local params, perr = string_map(t.params, "params", "params map names to default values",
                                  "the default", "^[%a_][%w_]*$")
  if not params then return nil, perr end
  spec.params = params
  -- secrets: the names of the values each node gives the run in
  -- ctx.secrets, from its --secrets-dir or its environment (the worker
  -- resolves them; the values never reach etcd)
  if t.secrets ~= nil then
    local e = want_type(t.secrets, "table")
    if e then return field("secrets", e) end
    if not is_list(t.secrets) then
      return field("secrets", 'must be a list of names {"DB_PASSWORD", ...}')
    end
    local seen = {}
    for i, s in ipairs(t.secrets) do
      if type(s) ~= "string" then
        return field("secrets", format("entry %d is a %s, not a name", i, typename(s)))
      end
      if not s:find("^[%a_][%w_]*$") or #s > 200 then
        return field("secrets", format("%s is not a secret name (letters, digits and '_', "
          .. "not starting with a digit)", qs(s)))
      end
      if seen[s] then return field("secrets", format("%s is named twice", qs(s))) end
      seen[s] = true
    end
    spec.secrets = t.secrets
  end
  -- on
  if t.on ~= nil then
    local on, e = check_on(t.on, name)
    if not on then return nil, e end
    if spec.shards > 1 then
      return field("shards", "an event runs a job once, not per shard: remove 'shards' or 'on'")
    end
    spec.on = on
  end
  return spec
end

-- A spec holds only the fields that differ from SPEC_DEFAULTS, which it
-- reads through its metatable: most jobs keep most defaults, and a table
-- of 7 fields instead of 17 is a third of the size (100,000 jobs: about 60
-- MB less). Reading a field is unchanged; pairs() over a spec sees only
-- what the job set (nothing iterates a spec: job.summary and job_view read
-- fields by name).
local SPEC_DEFAULTS = {
  timezone = DEFAULTS.timezone, timeout = DEFAULTS.timeout, concurrency = DEFAULTS.concurrency,
  misfire = DEFAULTS.misfire, shards = DEFAULTS.shards, policy = DEFAULTS.policy,
  on_node_loss = DEFAULTS.on_node_loss, manual = false, labels = NONE, params = NONE,
  retry = DEFAULT_RETRY,
}
local spec_mt = { __index = SPEC_DEFAULTS }
-- While validate fills a spec, a default is not stored at all.
building_mt = { __index = SPEC_DEFAULTS, __newindex = function(t, k, v)
  if SPEC_DEFAULTS[k] ~= v then rawset(t, k, v) end
end }

finish = function(spec)
  return setmetatable(spec, spec_mt)
end

---------------------------------------------------------------------------
-- the API

-- job.run_file(source, name [, chunkname [, restricted]]) --> true, what
-- the file returned, its environment | nil, "EINVAL: job NAME: ...",
-- "EINVAL". Compiles source text (never bytecode) into an environment of
-- its own (the sandbox's when restricted) and runs the chunk under the
-- load budget, where no waiting call is possible. Raises on misuse.
function M.run_file(source, name, chunkname, restricted)
  if type(source) ~= "string" then
    error(format("bad argument #1 to 'load' (string expected, got %s)", type(source)), 2)
  end
  if type(name) ~= "string" then
    error(format("bad argument #2 to 'load' (string expected, got %s)", type(name)), 2)
  end
  if not M.valid_name(name) then
    return nil, format("EINVAL: invalid job name %s (letters, digits, '_', '.', '-'; "
      .. "starting with a letter or digit)", qs(name)), "EINVAL"
  end
  if byte(source, 1) == 27 then
    return fail(name, "precompiled bytecode is refused: store the Lua source text")
  end
  local chunk, err = loadstring(source, "@" .. (chunkname or ("jobs/" .. name))) -- keys: not a key
  if not chunk then return fail(name, "syntax error: " .. tostring(err)) end
  local env = M.new_env(restricted)
  setfenv(chunk, env)
  local ok, t = bounded_call(chunk)
  if not ok then return fail(name, load_error(t)) end
  return true, t, env
end

-- job.from_table(t, name [, revision]) --> spec | nil, "EINVAL: job NAME:
-- ...", "EINVAL": the table a job file returned, validated, as a spec
-- (defaults filled, see DEFAULTS and docs/jobs.md). t may be the
-- sandbox's plain copy of it (baton.sandbox.decode): its functions are
-- stand-ins, so such a spec describes the job but cannot run it.
function M.from_table(t, name, revision)
  if type(t) ~= "table" then
    return fail(name, "the file must return a table ({schedule = ..., run = function(ctx) ... end}), got "
      .. typename(t))
  end
  -- A policy file given where a job was expected: say so.
  if t.run == nil and t.command == nil then
    local fns = {}
    for _, f in ipairs(M.POLICY_FUNCTIONS) do
      if type(t[f]) == "function" then fns[#fns + 1] = f end
    end
    if #fns > 0 then
      return fail(name, format("this looks like a scheduling policy (%s), not a job: "
        .. "store it with baton policy put", concat(fns, ", ")))
    end
  end
  local spec, verr = validate(t, name)
  if not spec then return fail(name, verr) end
  spec.revision = revision
  return finish(spec)
end

-- job.load(source, name [, revision [, chunkname]]) --> spec
-- | nil, "EINVAL: job NAME: ...", "EINVAL": run_file, then from_table, in
-- this process (a worker, which runs the job: spec.run is the job's own).
-- Raises on misuse. chunkname is what error positions name (default
-- "jobs/NAME"). Code stored in etcd is loaded through baton.stored, which
-- verifies it first.
function M.load(source, name, revision, chunkname)
  if revision ~= nil and type(revision) ~= "number" then
    error(format("bad argument #3 to 'load' (number expected, got %s)", type(revision)), 2)
  end
  local ok, t, env = M.run_file(source, name, chunkname)
  if not ok then return nil, t, env end
  local spec, err, ecode = M.from_table(t, name, revision)
  if not spec then return nil, err, ecode end
  spec.globals = env -- (the file's global table; spec.env is a command's env field)
  return spec
end

-- True if the table a file returns looks like a scheduling policy (one of
-- the policy functions and no run): {names of those functions} or false.
-- t: what the file returned (run_file, or the sandbox's copy).
function M.looks_like_policy(t)
  if type(t) ~= "table" or t.run ~= nil or t.command ~= nil then return false end
  local found = {}
  for _, f in ipairs(M.POLICY_FUNCTIONS) do
    if type(t[f]) == "function" then found[#found + 1] = f end
  end
  return #found > 0 and found or false
end

-- job.next_fires(spec, n [, after]) --> the next n fire instants (epoch
-- seconds) strictly after `after` (default now); {} for @manual and queue
-- jobs.
function M.next_fires(spec, n, after)
  if type(spec) ~= "table" then
    error(format("bad argument #1 to 'next_fires' (table expected, got %s)", type(spec)), 2)
  end
  if not is_int(n) or n < 0 then
    error("bad argument #2 to 'next_fires' (a whole number >= 0 expected)", 2)
  end
  if spec.queue or not spec.cron or spec.manual then return {} end
  return spec.cron:next_n(n, after)
end

-- Plain data describing a spec (no functions or userdata): for --json and
-- for the node's status.
function M.summary(spec)
  local s = {}
  for _, f in ipairs(FIELDS) do
    if f ~= "run" then s[f] = spec[f] end
  end
  s.name, s.revision = spec.name, spec.revision
  return s
end

M.FIELDS = FIELDS
return M
