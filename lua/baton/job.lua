-- The job loader (docs/jobs.md), pure Lua and synchronous: nothing here
-- waits, so the node can call it from a watch handler and the CLI before
-- it writes anything.
--
--   local job = require "baton.job"
--   local spec, err, code = job.load(source, "backup" [, revision [, chunkname]])
--   job.next_fires(spec, 5 [, after])  --> {epoch, ...} ({} for @manual and queues)
--   job.summary(spec)                  --> plain data (no functions): for JSON and display
--
-- load compiles source text (never bytecode) into an environment of its own
-- (baton.job.env), runs the chunk under an instruction bound and where no
-- waiting call is possible, requires a table back and validates it
-- (baton.job.spec). It returns a normalised spec (defaults filled, see
-- spec.DEFAULTS and docs/jobs.md) or nil, "EINVAL: job NAME: field 'F': ...",
-- "EINVAL".
local names = require "baton.names"
local jenv = require "baton.job.env"
local F = require "baton.job.fields"
local S = require "baton.job.spec"

local type, ipairs, tostring, error = type, ipairs, tostring, error
local format, byte = string.format, string.byte
local concat = table.concat
local loadstring, setfenv = loadstring, setfenv
local jit = rawget(_G, "jit")

local M = {}
-- Instructions a chunk may execute at load time (baton.sandbox counts
-- them). A job file only builds and returns a table; 10 million VM
-- instructions is a few tens of milliseconds, far more than any real file.
M.LOAD_BUDGET = 1e7
M.DEFAULTS, M.RETRY_DEFAULTS, M.NONE = F.DEFAULTS, F.RETRY_DEFAULTS, F.NONE
M.POLICY_FUNCTIONS, M.FIELDS = F.POLICY_FUNCTIONS, F.FIELDS
M.valid_name, M.did_you_mean = names.valid_name, names.did_you_mean
M.new_env, M.required_name = jenv.new, jenv.required_name


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
      .. "starting with a letter or digit)", format("%q", name)), "EINVAL"
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
      .. S.typename(t))
  end
  -- A policy file given where a job was expected: say so.
  if t.run == nil and t.command == nil then
    local fns = {}
    for _, f in ipairs(F.POLICY_FUNCTIONS) do
      if type(t[f]) == "function" then fns[#fns + 1] = f end
    end
    if #fns > 0 then
      return fail(name, format("this looks like a scheduling policy (%s), not a job: "
        .. "store it with baton policy put", concat(fns, ", ")))
    end
  end
  local spec, verr = S.validate(t, name)
  if not spec then return fail(name, verr) end
  spec.revision = revision
  return F.finish(spec)
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
  for _, f in ipairs(F.POLICY_FUNCTIONS) do
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
  if not S.is_int(n) or n < 0 then
    error("bad argument #2 to 'next_fires' (a whole number >= 0 expected)", 2)
  end
  if spec.queue or not spec.cron or spec.manual then return {} end
  return spec.cron:next_n(n, after)
end

-- Plain data describing a spec (no functions or userdata): for --json and
-- for the node's status.
function M.summary(spec)
  local s = {}
  for _, f in ipairs(F.FIELDS) do
    if f ~= "run" then s[f] = spec[f] end
  end
  s.name, s.revision = spec.name, spec.revision
  return s
end

return M
