-- The global tables job code runs in (docs/jobs.md, "What a job sees"):
-- a job's own table over read-only views of the standard libraries and of
-- baton, or the sandbox's restricted one for stored code nobody vouched for
-- yet (docs/security.md, "The sandbox").
--
--   env.new(restricted)     --> a fresh global table for one job file
--   env.required_name(t)    --> the module name of what the sandbox's require returned
local baton = require "baton"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local error, setmetatable, getmetatable, rawget, rawset = error, setmetatable, getmetatable, rawget, rawset
local format = string.format

local M = {}


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
function M.new(restricted)
  local env
  if restricted then
    env = setmetatable({}, restricted_env())
  else
    env = setmetatable({}, env_mt)
  end
  env._G = env
  return env
end

return M
