-- The parts of the `baton` module written in Lua. The C core has already
-- filled `baton` with its functions (sleep, now, go, json, log, exec, http,
-- cron, _etcd); this adds the etcd client API and makes a user's own
-- coroutines able to call waiting functions.
local baton = require "baton"

---------------------------------------------------------------------------
-- coroutines
--
-- A waiting baton call made inside a coroutine the user created yields a
-- marker (baton._WAIT) to whoever resumed it. baton's coroutine.resume
-- recognises the marker, yields it further up until it reaches the
-- coroutine baton runs (which the C scheduler then parks), and hands the
-- results back down when the call completes.
local WAIT = baton._WAIT
local co_resume, co_yield = coroutine.resume, coroutine.yield
local co_status, co_create = coroutine.status, coroutine.create
local parked = setmetatable({}, { __mode = "k" })

local pass

local function resume_with(co, ...)
  parked[co] = nil
  return pass(co, co_resume(co, ...))
end

function pass(co, ok, first, ...)
  if ok and first == WAIT and co_status(co) == "suspended" then
    parked[co] = true
    return resume_with(co, co_yield(WAIT))
  end
  return ok, first, ...
end

function coroutine.resume(co, ...)
  if parked[co] then
    return false, "cannot resume a coroutine that is waiting in a baton call"
  end
  return pass(co, co_resume(co, ...))
end

local function wrap_results(ok, ...)
  if not ok then error((...), 0) end
  return ...
end

function coroutine.wrap(fn)
  local co = co_create(fn)
  return function(...)
    return wrap_results(coroutine.resume(co, ...))
  end
end

---------------------------------------------------------------------------
-- etcd
local etcd = require "baton.etcd"
baton.etcd = etcd.default(function() return baton.config or {} end)

---------------------------------------------------------------------------
-- coordination (etcd's concurrency recipes)
local concurrency = require "baton.concurrency"
baton.session = concurrency.session
baton.mutex = concurrency.mutex
baton.election = concurrency.election

return baton
