-- What a run is, for the modules that claim, execute and cancel runs
-- (node/claim.lua, node/execute.lua, node/cancel.lua): its shard, its
-- parameters, whether its job's runs exclude one another, whether it can
-- be given to a worker at all, the request that asks for it; and the
-- session checks every write of a run goes through.
--
-- Keys under the prefix P, for a run <id> (an instant such as
-- 2026-11-29T02:00:00Z, <instant>/<shard> for a shard, a manual run's
-- 2026-11-29T02:00:00.123Z, or a queue task id) of job <job>:
--   runs/<job>/<id>      the run record (docs/architecture.md), one per run,
--                        updated at each attempt; attempts[] keeps them all
--   running/<job>/<id>   bound to the running node's lease: while it exists
--                        the attempt is in progress there; its create
--                        revision is the attempt's fence (ctx:put_fenced)
--   inflight/<job>/<id>  no lease: the run is not finished; with no running/
--                        marker, its node is gone (the leader handles it)
--   pending/<job>/<id>   no lease: the run waits for its next attempt (a
--                        retry after a failure, or a re-run after its node
--                        was lost or stopped); any eligible node claims it
--   active/<job>[/<shard>]  no lease, for forbid/replace jobs: the run that
--                        is on, from its first claim until it ends for good
--                        (retries and re-runs included), so no other run of
--                        the job starts in between
--   cancel/<job>/<id>    a request to stop that run for good, JSON {reason=,
--                        by=}: a replace ("replaced by run ...") or baton job
--                        kill ("killed by alice@host", by = "alice@host").
--                        The run is recorded killed with that reason; an
--                        attempt claimed while it exists does not start
--   last/<job>           the job's newest run, {"run":id,"state":...,"fire":,
--                        "started":,"finished":,"node":,"attempt":}: every
--                        write of a record also writes it, unless a run
--                        with a greater id (key order) is there already
--                        (run_end.last_op), so that job ls and GET /api/v1/jobs
--                        read every job's last run in one range request
--                        (and the newest record of a job without one).
--
-- A node never claims, records or fences on a session it has declared lost
-- (M.session).
local baton = require "baton"
local keys = require "baton.keys"
local json = baton.json

local format = string.format

local M = {}

-- Records, markers and pending entries hold text read from etcd (a task's
-- key, a run id from a raw key) or said by a job (its error): a NUL byte
-- there is written as U+FFFD (baton.json's nul = "replace"), so that the
-- write cannot fail and the run is recorded; what a run is given must
-- hold none (M.unfit).
M.TEXT = { nul = "replace" }
local TEXT = M.TEXT

-- The shard of a run id (<instant>/<index>) of a job spec, or nil.
function M.shard_of(spec, id)
  local i = tonumber(id:match("/(%d+)$"))
  if not i or (spec.shards or 1) < 2 then return nil end
  return { index = i, total = spec.shards, param = spec.shard_params and spec.shard_params[i] }
end

-- The fields of a log line about run on this node, with extra's.
function M.fields_of(self, run, extra)
  local f = { job = run.job, instant = run.id, node = self.name, attempt = run.attempt }
  for k, v in pairs(extra or {}) do f[k] = v end
  return f
end

-- Whether a job's runs exclude one another (concurrency forbid or replace:
-- a run holds the job's active/ key).
function M.exclusive(spec)
  return spec.concurrency == "forbid" or spec.concurrency == "replace"
end

-- The parameters of a run (ctx.params, the record's params): the job's
-- defaults, overridden by those a manual run was given (strings only);
-- nil when there are none.
function M.run_params(spec, given)
  local p, any = {}, false
  for k, v in pairs(spec.params or {}) do p[k], any = v, true end
  if type(given) == "table" then
    for k, v in pairs(given) do
      if type(k) == "string" and type(v) == "string" then p[k], any = v, true end
    end
  end
  return any and p or nil
end

-- Where string v holds a NUL byte: "<what> holds a NUL byte (byte N)", or
-- nil; in a table (its keys and values, nested ones too) likewise.
local function nul_in(v, what, depth)
  if type(v) == "string" then
    local i = v:find("\0", 1, true)
    return i and format("%s holds a NUL byte (byte %d)", what, i)
  end
  depth = depth or 0
  if type(v) ~= "table" or depth > 20 then return nil end -- (deeper: JSON refuses it anyway)
  for k, x in pairs(v) do
    if type(k) == "string" and k:find("\0", 1, true) then
      return format("a name in %s holds a NUL byte", what)
    end
    local why = nul_in(x, format("%s %s", what, tostring(k)), depth + 1)
    if why then return why end
  end
end

-- Why run (attempt rec) cannot be given to a worker, or nil. What a run is
-- given (its id, its task, its parameters, its event, its shard) is the
-- job's data, and goes to the worker as JSON text, which holds no NUL
-- byte: such a run is not run with its data changed (nor with a part of
-- it dropped) but recorded failed with this reason, and not retried (it
-- would fail the same way). run.unfit is a reason found earlier (a request
-- that spelled a NUL: M.read_request).
function M.unfit(run, rec)
  local why = run.unfit or nul_in(run.id, "its id")
    or nul_in(run.task and run.task.key, "its task's key")
    or nul_in(run.task and run.task.value, "its task's value")
    or nul_in(rec.params, "param")
    or nul_in(run.event, "its event's")
    or nul_in(run.shard, "its shard's")
  return why and ("cannot be run: " .. why .. "; a run is given text without NUL bytes")
end

-- A request read from etcd (the JSON value of a trigger or a pending
-- entry) as a table ({} when it is not one) and, when its JSON spells a
-- NUL byte (\u0000), why the run it asks for cannot be run (M.unfit): the
-- request is then read with U+FFFD for each NUL, for the record, so that
-- its parameters are neither passed on changed nor dropped in silence.
-- what names it in that reason.
function M.read_request(value, what)
  local req = json.decode(value or "")
  if type(req) == "table" then return req end
  req = json.decode(value or "", TEXT)
  if type(req) == "table" then return req, format("its %s holds a NUL byte (\\u0000)", what) end
  return {}
end

-- Session s (default: the node's) if the node may still write on it: the
-- current one, not declared lost (the test is on the monotonic clock, so a
-- node that was stopped past its lease knows it before anything else
-- runs). Every record of this node goes through here.
function M.live(self, s)
  s = s or self.s
  if s ~= self.s or self.fenced or s:done() then return nil end
  return s
end

-- The session a new claim may be made on: live, and the node not stopping.
function M.session(self, s)
  if self.stopping then return nil end
  return M.live(self, s)
end

-- The compare that makes a write of this node succeed only while etcd
-- still holds its session: its registration lives on the session's lease.
function M.alive_compare(self, s)
  return { key = keys.key(self.P, "nodes", self.name), target = "lease", op = "==", value = s.lease }
end

return M
