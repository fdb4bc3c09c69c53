-- Runs: claiming an instant (or a manual trigger, or a queue task),
-- executing it in a worker process, recording every attempt, retrying with
-- backoff, and the next attempt after a failure or a lost node.
--
-- Keys under the prefix P, for a run <id> (an instant such as
-- 2026-11-29T02:00:00Z, a manual run's 2026-11-29T02:00:00.123Z, or a queue
-- task id) of job <job>:
--   runs/<job>/<id>      the run record (design.md section 9), one per run,
--                        updated at each attempt; attempts[] keeps them all
--   running/<job>/<id>   bound to the running node's lease: while it exists
--                        the run is in progress there; its create revision
--                        is the attempt's fence (ctx:put_fenced compares it)
--   inflight/<job>/<id>  no lease: the run is not finished; with no running/
--                        marker, its node is gone (the leader handles it)
--   active/<job>         lease-bound, for forbid/replace jobs: which run is on
--   cancel/<job>/<id>    a request to stop that run (replace)
local baton = require "baton"
local util = require "baton.cli.util"
local json = baton.json

local format, floor, random = string.format, math.floor, math.random

local M = {}

local function log(level, msg, fields) baton.log[level](msg, fields) end

function M.keys(P, job, id)
  -- A shard run's id is <instant>/<shard>: concurrency applies per shard.
  local shard = id:match("/(%d+)$")
  return {
    run = P .. "runs/" .. job .. "/" .. id,
    marker = P .. "running/" .. job .. "/" .. id,
    inflight = P .. "inflight/" .. job .. "/" .. id,
    active = P .. "active/" .. job .. (shard and ("/" .. shard) or ""),
    cancel = P .. "cancel/" .. job .. "/" .. id,
  }
end

-- The shard of a run id (<instant>/<index>) of a job spec, or nil.
function M.shard_of(spec, id)
  local i = tonumber(id:match("/(%d+)$"))
  if not i or (spec.shards or 1) < 2 then return nil end
  return { index = i, total = spec.shards, param = spec.shard_params and spec.shard_params[i] }
end

local function fields_of(self, run, extra)
  local f = { job = run.job, instant = run.id, node = self.name, attempt = run.attempt }
  for k, v in pairs(extra or {}) do f[k] = v end
  return f
end

-- The record of a run's current attempt, with the earlier ones in attempts[].
local function new_record(self, run, spec)
  local now = baton.now()
  return {
    job = run.job, fire = run.fire, node = self.name, attempt = run.attempt,
    state = "running", started = now, code_revision = spec.revision,
    manual = run.manual or nil, task = run.task and run.task.key or nil,
    shard = run.shard and run.shard.index or nil,
    attempts = run.attempts or {},
  }
end

local function exclusive(spec)
  return spec.concurrency == "forbid" or spec.concurrency == "replace"
end

-- Claims attempt 1 of run on this node. opts.force ignores concurrency;
-- opts.extra_compare / extra_success / skip_ops let triggers and queues
-- add their own conditions. Returns the fence and record, or nil.
function M.claim(self, run, opts)
  opts = opts or {}
  local P, e, spec = self.P, self.e, run.spec
  local k = M.keys(P, run.job, run.id)
  run.attempt = 1
  local rec = new_record(self, run, spec)
  local marker = json.encode { node = self.name, attempt = 1 }
  local compare = { { key = k.run, target = "create", op = "==", value = 0 } }
  local success = {
    { put = { key = k.run, value = json.encode(rec) } },
    { put = { key = k.marker, value = marker, lease = self.s.lease } },
    { put = { key = k.inflight, value = marker } },
  }
  for _, c in ipairs(opts.extra_compare or {}) do compare[#compare + 1] = c end
  for _, op in ipairs(opts.extra_success or {}) do success[#success + 1] = op end
  local failure = {}
  if exclusive(spec) and not opts.force then
    compare[#compare + 1] = { key = k.active, target = "create", op = "==", value = 0 }
    success[#success + 1] = { put = { key = k.active, value = run.id, lease = self.s.lease } }
    -- Nobody claimed it, but a run is active: record the skip once.
    local skip_cmp = { { key = k.run, target = "create", op = "==", value = 0 } }
    for _, c in ipairs(opts.extra_compare or {}) do skip_cmp[#skip_cmp + 1] = c end
    local now = baton.now()
    local skip_ops = { { put = { key = k.run, value = json.encode {
      job = run.job, fire = run.fire, node = self.name, attempt = 0, state = "skipped",
      started = now, finished = now, code_revision = spec.revision, manual = run.manual or nil,
      error = "concurrency " .. spec.concurrency .. ": a previous run is still running" } } } }
    for _, op in ipairs(opts.skip_ops or {}) do skip_ops[#skip_ops + 1] = op end
    failure[1] = { txn = { compare = skip_cmp, success = skip_ops } }
  elseif exclusive(spec) then
    success[#success + 1] = { put = { key = k.active, value = run.id, lease = self.s.lease } }
  end
  local r, err = e:txn { compare = compare, success = success, failure = failure }
  if not r then
    log("warn", "claim failed", fields_of(self, run, { error = err }))
    return nil
  end
  if not r.succeeded then
    if failure[1] and r.responses[1] and r.responses[1].succeeded then
      log("info", "run skipped: a previous run is still running", fields_of(self, run))
    end
    return nil
  end
  rec.fence = r.revision
  rec.mod_revision = r.revision
  return r.revision, rec
end

-- Claims the next attempt of a run whose record is at mod revision seen
-- (after a failure with retries left, or when its node was lost).
function M.claim_next(self, run, rec, seen)
  local P, e, spec = self.P, self.e, run.spec
  local k = M.keys(P, run.job, run.id)
  run.attempt = (rec.attempt or 0) + 1
  run.attempts = rec.attempts or {}
  local nrec = new_record(self, run, spec)
  local marker = json.encode { node = self.name, attempt = run.attempt }
  local success = {
    { put = { key = k.run, value = json.encode(nrec) } },
    { put = { key = k.marker, value = marker, lease = self.s.lease } },
    { put = { key = k.inflight, value = marker } },
  }
  if exclusive(spec) then
    success[#success + 1] = { put = { key = k.active, value = run.id, lease = self.s.lease } }
  end
  local r, err = e:txn {
    compare = { { key = k.run, target = "mod", op = "==", value = seen },
                { key = k.marker, target = "create", op = "==", value = 0 } },
    success = success,
  }
  if not r or not r.succeeded then
    if not r then log("warn", "claim of the next attempt failed", fields_of(self, run, { error = err })) end
    return nil
  end
  nrec.fence = r.revision
  nrec.mod_revision = r.revision
  return r.revision, nrec
end

-- Seconds before attempt n+1 after attempt n failed, or nil to give up:
-- the job's policy decides (the default: the job's retry table, exponential
-- backoff with jitter).
function M.retry_delay(self, run, rec, err)
  return self.decide(run.job, run.spec, "retry_delay", { instant = run.id, attempt = rec.attempt },
                     self.job_view(run.job, run.spec), rec, err)
end

-- Writes the end of an attempt, guarded by its fence: final, or retrying.
-- Returns the record's new mod revision, or nil if the claim was lost.
-- The worker calls it too, to record a success itself: then a run that
-- completed is recorded even if its node froze right after.
function M.record_end(e, P, run, fence, rec, retry_at)
  local k = M.keys(P, run.job, run.id)
  local entry = { attempt = rec.attempt, node = rec.node, state = rec.state, started = rec.started,
                  finished = rec.finished, error = rec.error, fence = fence }
  rec.attempts = rec.attempts or {}
  rec.attempts[#rec.attempts + 1] = entry
  local success = { { delete = { key = k.marker } } }
  if retry_at then
    rec.state, rec.retry_at = "retrying", retry_at
  else
    rec.retry_at = nil
    success[#success + 1] = { delete = { key = k.inflight } }
    success[#success + 1] = { delete = { key = k.cancel } }
    success[#success + 1] = { txn = {
      compare = { { key = k.active, target = "value", op = "==", value = run.id } },
      success = { { delete = { key = k.active } } } } }
    if run.task then success[#success + 1] = { delete = { key = run.task.key } } end
  end
  rec.mod_revision = nil
  table.insert(success, 1, { put = { key = k.run, value = json.encode(rec) } })
  local r = e:txn {
    compare = { { key = k.marker, target = "create", op = "==", value = fence } },
    success = success,
  }
  if r and r.succeeded then return r.revision end
  return nil
end

-- One attempt in a pooled worker. Returns the reason it failed (nil if it
-- succeeded) and whether the worker already recorded the success.
local function attempt(self, run, fence, rec)
  local spec, pool = run.spec, self.pool
  local w, err = pool:get()
  if not w then return "cannot start a worker: " .. tostring(err) end
  self.workers[w.p] = run
  local reply, ended = pool:call(w, {
    job = run.job, id = run.id, fire = run.fire, fence = fence, attempt = rec.attempt,
    node = self.name, code_revision = spec.revision, deadline = rec.started + spec.timeout,
    marker = M.keys(self.P, run.job, run.id).marker, task = run.task or json.null,
    shard = run.shard or json.null, record = rec,
  }, rec.started + spec.timeout - baton.now())
  local why
  if ended == "timeout" then
    -- Cooperative cancel first (ctx:cancelled() turns true), then SIGKILL;
    -- the worker is not reused either way.
    w.p:kill("SIGTERM")
    reply = pool:late_reply(w, self.grace)
    if reply and reply.ok then
      reply.retire = true -- it finished in time after all; a fresh worker follows
    else
      reply, why = nil, format("timed out after %g s", spec.timeout)
    end
  end
  self.workers[w.p] = nil
  pool:put(w, reply and not reply.retire and not run.cancelled_by and not self.stopping)
  if run.cancelled_by then return "replaced by run " .. run.cancelled_by end
  if why then return why end
  if reply then
    if reply.ok then return nil, reply.recorded end
    return reply.error ~= json.null and reply.error or "failed"
  end
  if ended.signal then return format("worker killed by signal %d", ended.signal) end
  if ended.error then return "worker lost: " .. tostring(ended.error) end
  return format("worker exited with status %d before the run returned", ended.code)
end

-- Runs attempt rec of run (the claim is done) in a worker, records its end,
-- and retries while the retry policy says so. The run holds one of the
-- node's worker slots (--workers) while it executes; has_slot says the
-- caller took it already.
function M.execute(self, run, fence, rec, has_slot)
  local spec, P = run.spec, self.P
  if not has_slot and not self.pool:acquire() then return end
  while true do
    local f = fields_of(self, run, { fence = fence, revision = spec.revision })
    log("info", "run started", f)
    self.nrunning = self.nrunning + 1
    local why, recorded = attempt(self, run, fence, rec)
    self.nrunning = self.nrunning - 1
    rec.state = why and "failed" or "succeeded"
    rec.finished, rec.error = baton.now(), why
    rec.duration = rec.finished - rec.started
    rec.fence = fence
    local delay = why and not run.cancelled_by and M.retry_delay(self, run, rec, why)
    local retry_at = delay and (baton.now() + delay)
    local state_for_log = rec.state
    local rev
    if recorded then rev = true
    else rev = M.record_end(self.e, P, run, fence, rec, retry_at) end
    f.state, f.error, f.duration = state_for_log, why, format("%.3f", rec.duration)
    if not rev or not retry_at then
      self.pool:release()
      if not rev then
        f.reason = "the claim was lost (lease expired or run taken over)"
        log("error", "run result not recorded", f)
      else
        log(state_for_log == "succeeded" and "info" or "warn", "run ended", f)
      end
      return
    end
    f.retry_in = format("%.2f", delay)
    log("warn", "run failed; retrying", f)
    -- The slot is free while the run waits for its next attempt.
    self.pool:release()
    baton.sleep(delay)
    if self.stopping then return end
    fence, rec = M.claim_next(self, run, rec, rev)
    if not fence then return end
    if not self.pool:acquire() then return end
  end
end

-- Takes a worker slot, claims attempt 1 of run (see M.claim) and executes
-- it. Returns whether this node ran it.
function M.start(self, run, opts)
  -- A queue task is no scheduled instant: it cannot misfire.
  if not self.pool:acquire(not run.task and run.fire or nil) then return false end
  local fence, rec = M.claim(self, run, opts)
  if not fence then
    self.pool:release()
    return false
  end
  M.execute(self, run, fence, rec, true)
  return true
end

-- Stops a local run on request (replace): cooperative cancel, then kill.
function M.cancel_local(self, job, id, by)
  for p, run in pairs(self.workers) do
    if run.job == job and run.id == id then
      run.cancelled_by = by
      log("info", "run cancelled", { job = job, instant = id, node = self.name, by = by })
      p:kill("SIGTERM")
      baton.go(function()
        baton.sleep(self.grace)
        if self.workers[p] == run then p:kill("SIGKILL") end
      end)
    end
  end
end

-- For replace: asks whoever runs the active run of the job to stop it, and
-- waits (up to the job's timeout + grace) until it has ended.
function M.replace_active(self, run)
  local P, e, spec = self.P, self.e, run.spec
  local k = M.keys(P, run.job, run.id)
  local r = e:get(k.active)
  local kv = r and r.kvs[1]
  if not kv then return true end
  local old = kv.value
  e:put(M.keys(P, run.job, old).cancel, run.id)
  local deadline = baton.monotime() + spec.timeout + self.grace * 2
  while baton.monotime() < deadline do
    local g = e:get(k.active)
    if g and g.count == 0 then return true end
    baton.sleep(0.1)
  end
  return false
end

return M
