-- Executing a claimed attempt of a run (node/claim.lua claims it): the
-- conversation with a pooled worker (node/pool.lua, worker/protocol.lua),
-- the attempt's end (a retry, a re-run, or the run's final state, as the
-- job's policy decides: node/decide.lua) and its record (run_end.lua,
-- with the node's other writes: node/batch.lua).
local baton = require "baton"
local events = require "baton.events"
local keys = require "baton.keys"
local record = require "baton.record"
local run_end = require "baton.run_end"
local protocol = require "baton.worker.protocol"
local decide = require "baton.node.decide"
local limits = require "baton.limits"
local runs = require "baton.node.runs"
local json = baton.json

local format = string.format

local M = {}

local function log(level, msg, fields) baton.log[level](msg, fields) end

-- Seconds before attempt n+1 after attempt n failed, or nil to give up:
-- the job's policy decides (the default: the job's retry table, exponential
-- backoff with jitter).
function M.retry_delay(self, run, rec, err)
  return decide.decide(self, run.job, run.spec, "retry_delay", { instant = run.id, attempt = rec.attempt },
                       decide.job_view(run.job, run.spec), rec, err)
end

-- How long the end of a run may wait for the ends (or claims) of others
-- to go to etcd in the same request (node/batch.lua).
M.RECORD_LINGER = 0.01

-- The conversation with worker w about attempt rec of run: the run goes
-- to it, its requests meanwhile are answered, and on a timeout it is asked
-- to stop. Returns the worker's reply (nil: none came) and, without one,
-- how it ended (the worker's exit, or "timeout") and the reason.
local function converse(self, run, fence, rec, w)
  local spec, pool = run.spec, self.pool
  -- The job's source goes with the run unless this worker has it already:
  -- a run reads nothing the node knows. (A source with a NUL byte does not
  -- go over the channel: the worker reads it from etcd.)
  local source
  if w.known[run.job] ~= spec.revision and not spec.source:find("\0", 1, true) then
    source, w.known[run.job] = spec.source, spec.revision
  end
  local sent = baton.monotime()
  -- The run's fenced writes (ctx:put_fenced), which its worker asks this
  -- node to make: with the node's other writes (node/batch.lua), guarded
  -- by the fence.
  local marker = keys.run(self.P, run.job, run.id).marker
  local relay = {
    key = protocol.attempt_key { job = run.job, id = run.id, attempt = rec.attempt },
    txn = function(ops)
      local r, err, code = self.batch:txn {
        compare = { { key = marker, target = "create", op = "==", value = fence } },
        success = ops,
      }
      if not r then return { error = err, code = code } end
      return { succeeded = r.succeeded == true }
    end,
  }
  local reply, ended = pool:call(w, {
    job = run.job, id = run.id, fire = run.fire, fence = fence, attempt = rec.attempt,
    node = self.name, code_revision = spec.revision, source = source, deadline = rec.started + spec.timeout,
    -- (the key's create revision and version, which its signature names)
    code_created = spec.created, code_version = spec.version,
    marker = marker, task = run.task or json.null,
    shard = run.shard or json.null, record = rec, clock = self.now() - baton.now(),
    params = rec.params or json.null, event = run.event or json.null,
    -- (for the success the worker records itself when this node is slow
    -- to; the node's other ends use the event jobs it has when the run ends)
    events = { succeeded = (events.targets(self, run.job) or {}).succeeded },
  }, rec.started + spec.timeout - self.now(), relay)
  if reply and type(reply.busy) == "number" then
    -- The round trip, less the time the worker spent on the run itself.
    self.metrics:dispatched(baton.monotime() - sent - reply.busy)
  end
  if ended ~= "timeout" then return reply, ended end
  -- Cooperative stop first (ctx:cancelled() turns true, the job's own
  -- processes get SIGTERM), then every process of the run is killed; the
  -- worker is not reused either way.
  pool:interrupt(w)
  reply = pool:late_reply(w, self.grace, relay)
  if reply and reply.ok then
    reply.retire = true -- it finished in time after all; a fresh worker follows
    return reply
  end
  return nil, ended, format("timed out after %g s", spec.timeout)
end

-- One attempt in a pooled worker. Returns how it ended: the state
-- ("succeeded", "failed", "killed" when replaced or killed (run.cancel),
-- "interrupted" when the node is stopping), the reason (nil on success),
-- for a success the worker hands over (its reply says handoff), the
-- worker and the key to tell it once the node has recorded the run, as
-- whatever it is recorded (see worker/main.lua), and true when the run can
-- never run (runs.unfit: failed
-- for good, no retry). The run's processes are gone when it returns: the
-- worker ends them before it replies, and a worker that is stopped is
-- waited for; a worker is given back (Pool:put) whatever raises while it
-- has the run, and stopped then.
local function attempt(self, run, fence, rec)
  local pool = self.pool
  if not runs.live(self, run.session) then
    return "failed", "the node's session was lost before the run started"
  end
  if self.stopping then
    return "interrupted", "interrupted: node " .. self.name .. " was stopping when the run was due"
  end
  -- (a stop request that came before this node read its claim's answer)
  run.cancel = run.cancel or (self.cancels and self.cancels[run.job .. "/" .. run.id])
  if run.cancel then return "killed", run.cancel.reason end
  local unfit = runs.unfit(run, rec)
  if unfit then return "failed", unfit, nil, true end
  local w, err = pool:get(run)
  if not w then return "failed", "cannot start a worker: " .. tostring(err) end
  local ok, reply, ended, why = xpcall(converse, debug.traceback, self, run, fence, rec, w)
  if not ok then
    pool:put(w, false) -- (stopped, and waited for: the run is over)
    error(reply, 0)
  end
  if type(ended) == "table" and ended.unsendable then
    pool:put(w, true) -- (it was told nothing)
    return "failed", "cannot be run: what it is given cannot be sent to a worker ("
      .. ended.unsendable .. ")", nil, true
  end
  pool:put(w, reply and not reply.retire and not run.cancel and not self.stopping)
  -- A success the worker would record itself unless told that this node
  -- has recorded the run: told whatever this node records it as (killed,
  -- say: a run that returned once asked to stop).
  local handoff = reply and reply.ok and type(reply.handoff) == "string" and { w = w, key = reply.handoff } or nil
  if run.cancel then return "killed", run.cancel.reason, handoff end
  if why then return "failed", why, handoff end
  if reply and reply.ok then return "succeeded", nil, handoff end
  -- Stopping, the node gave the run its grace: one that returned success
  -- is done (above); one still running when the grace ended, or that
  -- failed once asked to stop (reply.stopped: the stop may be why), did
  -- not finish, and runs again elsewhere as its job says.
  if self.stopping and (not reply or reply.stopped == true) then
    return "interrupted", "interrupted: node " .. self.name .. " was stopped during the run"
  end
  if reply then
    local e = reply.error
    return "failed", type(e) == "string" and e or (e ~= nil and e ~= json.null and tostring(e)) or "failed"
  end
  -- (its containment process ended every process of the run: limits.lua)
  if w.memory and ended.code == baton._contain_oom then
    return "failed", limits.oom_error(w.memory)
  end
  if ended.signal then return "failed", format("worker killed by signal %d", ended.signal) end
  if ended.error then return "failed", "worker lost: " .. tostring(ended.error) end
  return "failed", format("worker exited with status %d before the run returned", ended.code)
end

-- What happens after an attempt ended in state with reason why: the delay
-- before the next attempt (nil: the run ends) and the run's final state.
-- A run that can never run (unfit: runs.unfit) is not tried again.
local function next_step(self, run, rec, state, why, unfit)
  if state == "interrupted" then
    -- Stopped by its node: re-run elsewhere, or not, as for a lost node.
    local decision = decide.decide(self, run.job, run.spec, "on_orphan", { instant = run.id },
                                   decide.job_view(run.job, run.spec), rec)
    if decision == "abandon" then return nil, "abandoned" end
    return 0, nil
  end
  if state ~= "failed" then return nil, state end
  if unfit then return nil, "failed" end
  local delay = M.retry_delay(self, run, rec, why)
  return delay, "failed"
end

-- Runs attempt rec of run (the claim is done) in a worker and records its
-- end. A failed attempt with a retry left, or one its stopping node had to
-- interrupt, leaves a pending/ entry for its next attempt, which any
-- eligible node claims (node/triggers.lua). The caller holds one of the node's
-- worker slots (--workers) for the run: release() gives it back, as soon
-- as the attempt is over, before its end is written. Whatever raises in
-- the attempt fails it, with the error as the reason (the worker, the
-- slot and the node's counts of runs are given back): a claimed run is
-- always recorded.
local function execute_counted(self, run, fence, rec, release)
  local spec, P = run.spec, self.P
  local f = runs.fields_of(self, run, { fence = fence, revision = spec.revision,
                                   lease = run.session.lease })
  log("info", "run started", f)
  self.metrics:run_started(run, rec)
  self.nrunning = self.nrunning + 1
  local ok, state, why, handoff, unfit = xpcall(attempt, debug.traceback, self, run, fence, rec)
  self.nrunning = self.nrunning - 1
  release()
  if not ok then
    log("error", "a run's attempt failed inside the node", runs.fields_of(self, run, { error = state }))
    state, why, handoff = "failed", "the node failed to run it: " .. tostring(state):match("^[^\n]*"), nil
  end
  local delay, final = next_step(self, run, rec, state, why, unfit)
  local finished = self.now()
  rec = record.ended(rec, state, { final = final, finished = finished, error = why, fence = fence,
                                   retry_at = delay and finished + delay or nil,
                                   killed_by = run.cancel and run.cancel.by })
  -- not a run record: the fields of the log line
  f.state, f.error, f.duration = state, why, format("%.3f", rec.duration)
  local s = run.session
  run.events = events.targets(self, run.job)
  -- (with the ends of other runs: node/batch.lua)
  local rev = run_end.write(self.batch, P, run, fence, rec, {
    attempt_state = state, alive = runs.alive_compare(self, s), linger = M.RECORD_LINGER,
    still_ok = function() return runs.live(self, s) end })
  if handoff then
    -- The worker records the success itself unless this word comes in time
    -- (a worker stopped meanwhile reads it no more).
    handoff.w.ch:send(protocol.recorded(handoff.key))
  end
  self.metrics:attempt_ended(run, rec, state, rev, delay)
  if not rev then
    f.reason = "the claim was lost (lease expired or run taken over)"
    log("error", "run result not recorded", f)
  elseif delay then
    f.retry_in = format("%.2f", delay)
    log("warn", state == "interrupted" and "run interrupted; it will run again"
               or "run failed; retrying", f)
  else
    log(state == "succeeded" and "info" or "warn", "run ended", f)
  end
end

-- execute_counted, counted in self.executing (a stopping node waits for
-- that count to reach 0) however it ends; should the end not be written
-- (something raised), the run stays claimed on this node's lease until it
-- goes, and the leader hands it on as the run of a lost node.
function M.execute(self, run, fence, rec, release)
  self.executing = self.executing + 1
  local ok, err = xpcall(execute_counted, debug.traceback, self, run, fence, rec, release)
  self.executing = self.executing - 1
  if not ok then log("error", "a run's end was not recorded", runs.fields_of(self, run, { error = err })) end
end

return M
