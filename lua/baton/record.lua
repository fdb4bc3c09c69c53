-- The run record (P runs/<job>/<id>; its fields: docs/api.md, "A record"),
-- built here and nowhere else: one constructor per state a record takes,
-- the entry each attempt leaves in attempts[], the job's last run (P
-- last/<job>) and their JSON. Values only: the keys are keys.lua's, the
-- transactions that write them node/claim.lua's and run_end.lua's (and
-- the leader's, events' and the worker's, which call these). No etcd, no node: every constructor
-- takes what it needs and returns a new table, leaving the record it was
-- given as it was.
--
-- A run goes through these states:
--   claimed    "running"    an attempt is claimed (attempt 1, or the next);
--                           fenced once the claim is in etcd
--   skipped    "skipped"    attempt 0: the run was never started
--   ended      the attempt's end, on the node or (a success) its worker:
--              "succeeded", "failed", "killed", "abandoned", or "retrying"
--              when a next attempt is due (an interrupted one, too)
--   lost       its node was lost: the attempt is closed ("lost"), and the
--              leader makes it retrying, abandoned or killed
--   retrying   waits for its next attempt (retry_at)
--   killed     stopped for good on request (replace, baton job kill)
--   abandoned  not run again (its node was lost, its queue task deleted)
-- Each attempt that ends adds its entry to attempts[] (M.attempt), which a
-- next attempt's record keeps.
local baton = require "baton"
local json = baton.json

local M = {}

-- A record may hold text read from etcd (a task's key, a run id) or said
-- by a job (its error): a NUL byte there is written as U+FFFD (baton.json's
-- nul = "replace"), so that the write cannot fail and the run is recorded.
local TEXT = { nul = "replace" }

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

-- list with x added at its end, as a new list.
local function appended(list, x)
  local c = {}
  for i = 1, #list do c[i] = list[i] end
  c[#c + 1] = x
  return c
end

-- A field of a record read from etcd, JSON null as nil.
local function field(t, k)
  local v = t[k]
  if v == json.null then return nil end
  return v
end

-- The JSON of record rec, as it is written to etcd.
function M.encode(rec)
  return json.encode(rec, TEXT)
end

-- Attempt run.attempt of run, claimed by node at now: state "running". run
-- is the node's run (node/claim.lua): job, fire, manual, task = {key =},
-- shard = {index =}, event. o: code_revision (the job's, as loaded), token
-- (the claim's: a lost answer is read back by it), exclusive (the run holds
-- the job's active/ key), params (a first attempt's), prev (the record of
-- the attempt before: a next attempt keeps its attempts[] and params).
function M.claimed(run, node, now, o)
  local prev = o.prev
  return {
    job = run.job, fire = run.fire, node = node, attempt = run.attempt,
    state = "running", started = now, code_revision = o.code_revision,
    manual = run.manual or nil, task = run.task and run.task.key or nil,
    shard = run.shard and run.shard.index or nil, exclusive = o.exclusive or nil,
    attempts = prev and prev.attempts or {}, token = o.token, event = run.event,
    params = prev and prev.params or o.params,
  }
end

-- The claimed record rec once its claim is in etcd at revision: the fence
-- of the attempt (the marker's create revision) and the record's mod
-- revision.
function M.fenced(rec, revision)
  local r = copy(rec)
  r.fence, r.mod_revision = revision, revision
  return r
end

-- Attempt 0 of run (job, fire, manual, shard = {index =}, event: as for
-- M.claimed), recorded skipped by node at now for why. o: code_revision,
-- params.
function M.skipped(run, node, now, why, o)
  return {
    job = run.job, fire = run.fire, node = node, attempt = 0, state = "skipped",
    started = now, finished = now, code_revision = o.code_revision, manual = run.manual or nil,
    shard = run.shard and run.shard.index or nil, params = o.params,
    event = run.event, error = why }
end

-- The entry in attempts[] of the attempt of record rec that ended (finished)
-- in state (succeeded, failed, killed, interrupted, lost) with error err.
function M.attempt(rec, state, err, finished)
  return { attempt = rec.attempt, node = rec.node, state = state, started = rec.started,
           finished = finished, error = err, fence = rec.fence }
end

-- The claimed record rec once its attempt ended in state (succeeded,
-- failed, killed, interrupted: its entry in attempts[]), on its node or (a
-- success) in its worker. o: final (the run's state, when not that one),
-- finished, error, fence, started (when rec has none), retry_at (a next
-- attempt is due then: the record is "retrying"), killed_by (who asked,
-- for a killed attempt). The claim's own fields (token, mod_revision) go.
function M.ended(rec, state, o)
  local r = copy(rec)
  r.finished, r.error, r.fence = o.finished, o.error, o.fence
  r.duration = r.finished - (r.started or o.started)
  r.state = o.final or state
  r.retry_at = o.retry_at
  if state == "killed" then r.killed_by = o.killed_by end
  r.attempts = appended(rec.attempts or {}, M.attempt(r, state, r.error, r.finished))
  r.mod_revision, r.token = nil, nil
  if r.retry_at then r.state = "retrying" end
  return r
end

-- Record rec (read from etcd, still "running") of a run whose node was
-- lost, noticed at now for why: its attempt is closed as "lost" in
-- attempts[], under its fence (fence when the record names none: the claim
-- wrote the record in the transaction that made the fence). Its state is
-- then the leader's to say (M.retrying, M.abandoned, M.killed).
function M.lost(rec, now, why, fence)
  local r = copy(rec)
  r.fence = rec.fence or fence
  r.attempts = appended(rec.attempts or {}, M.attempt(r, "lost", why, now))
  r.token = nil
  return r
end

-- Record rec, waiting for its next attempt, due at, after error err.
function M.retrying(rec, at, err)
  local r = copy(rec)
  r.state, r.retry_at, r.error = "retrying", at, err
  return r
end

-- Record rec stopped for good at now on a request (reason; by: who asked,
-- or nil): not run again.
function M.killed(rec, now, reason, by)
  local r = copy(rec)
  r.attempts = rec.attempts or {}
  r.state, r.finished, r.error, r.retry_at, r.killed_by = "killed", now, reason, nil, by
  return r
end

-- Record rec given up at now for why: not run again.
function M.abandoned(rec, now, why)
  local r = copy(rec)
  r.state, r.finished, r.error, r.retry_at = "abandoned", now, why, nil
  return r
end

-- The job's last run, {run, state, fire, started, finished, node, attempt},
-- from the record rec of run id (JSON nulls read as absent): the value of
-- P last/<job> (M.last_value), and `last` in job ls.
function M.last(id, rec)
  return { run = id, state = field(rec, "state"), fire = field(rec, "fire"),
           started = field(rec, "started"), finished = field(rec, "finished"),
           node = field(rec, "node"), attempt = field(rec, "attempt") }
end

-- The JSON of M.last for P last/<job>, the id first: values then compare
-- as the run keys do (run_end.lua, last_op).
function M.last_value(id, rec)
  local l = M.last(id, rec)
  l.run = nil
  local rest = json.encode(l, TEXT)
  return '{"run":' .. json.encode(id, TEXT) .. (rest == "{}" and "}" or ("," .. rest:sub(2)))
end

return M
