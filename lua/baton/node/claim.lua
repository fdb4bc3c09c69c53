-- Runs: claiming an attempt (an instant, a shard of one, a manual trigger,
-- a queue task, or the next attempt of any of them), executing it in a
-- worker process, and recording how it ended.
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
-- Every attempt, whatever its kind, is claimed by M.claim: one etcd
-- transaction that creates (or, for a next attempt, takes over) the record,
-- compares the job's concurrency (active/) and the node's own session, and
-- creates the lease-bound marker. A node never claims, records or fences on
-- a session it has declared lost (M.session).
local baton = require "baton"
local events = require "baton.events"
local missed = require "baton.node.missed"
local keys = require "baton.keys"
local record = require "baton.record"
local run_end = require "baton.run_end"
local protocol = require "baton.worker.protocol"
local decide = require "baton.node.decide"
local json = baton.json

local format = string.format

local M = {}

-- Records, markers and pending entries hold text read from etcd (a task's
-- key, a run id from a raw key) or said by a job (its error): a NUL byte
-- there is written as U+FFFD (baton.json's nul = "replace"), so that the
-- write cannot fail and the run is recorded; what a run is given must
-- hold none (M.unfit).
local TEXT = { nul = "replace" }

local function log(level, msg, fields) baton.log[level](msg, fields) end

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

local function exclusive(spec)
  return spec.concurrency == "forbid" or spec.concurrency == "replace"
end

-- The value of a cancel/ key: why the run is stopped, and who asked.
function M.cancel_value(reason, by)
  return json.encode({ reason = reason, by = by, at = baton.now() }, TEXT)
end

-- A cancel/ key's value as {reason=, by=}. (A value that is not JSON is
-- the id of the run that replaces it, as earlier versions wrote it.)
function M.cancel_request(value)
  local ok, v = pcall(json.decode, value or "")
  if ok and type(v) == "table" and type(v.reason) == "string" then
    return { reason = v.reason, by = type(v.by) == "string" and v.by or nil }
  end
  return { reason = "replaced by run " .. tostring(value) }
end

-- The parameters of a run (ctx.params, the record's params): the job's
-- defaults, overridden by those a manual run was given (strings only);
-- nil when there are none.
local function run_params(spec, given)
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
local function alive_compare(self, s)
  return { key = keys.key(self.P, "nodes", self.name), target = "lease", op = "==", value = s.lease }
end

-- Whether the claim with this token is in etcd (after a request whose
-- result was lost): the marker it created says so. Asks until etcd answers
-- or the session is lost. Returns the marker's kv, false, or nil.
local function claimed_by(self, s, k, token)
  while M.session(self, s) do
    local r = self.e:get(k.marker)
    if r then
      local kv = r.kvs[1]
      local ok, m = pcall(json.decode, kv and kv.value or "")
      return ok and type(m) == "table" and m.token == token and kv or false
    end
    baton.sleep(0.2)
  end
end

-- This node created the run key of run (claimed or skipped it): a run
-- that other nodes go for in turn (opts.turn: M.start) goes on the claims
-- board (node/board.lua).
local function posted(self, run, opts)
  if opts.turn then self.board:note(run.job, run.id) end
end

-- A failure branch that says whether active/ and the run key are there
-- (a failed claim or skip reads it: M.claim, found).
local function what_is_there(k)
  return { { get = { key = k.active, count_only = true } }, { get = { key = k.run, count_only = true } } }
end

-- The transaction that records attempt 0 of run skipped for why: only
-- while this node's session s holds, and only if nobody claimed (or
-- recorded) the instant meanwhile; compare adds conditions (the
-- concurrency skip: a run of the job holds active/). Its failure branch
-- says whether active/ and the run key are there. Returns the transaction
-- and its register write (node/batch.lua).
local function skip_txn(self, run, s, why, opts)
  opts = opts or {}
  local P, spec, now = self.P, run.spec, self.now()
  local k = keys.run(P, run.job, run.id)
  local j = self.jobs and self.jobs[run.job]
  local cmp = { { key = k.run, target = "create", op = "==", value = 0 }, alive_compare(self, s) }
  for _, c in ipairs(opts.compare or {}) do cmp[#cmp + 1] = c end
  for _, c in ipairs(opts.extra_compare or {}) do cmp[#cmp + 1] = c end
  local skipped = record.skipped(run, self.name, now, why,
                                 { code_revision = spec.revision, params = run_params(spec, run.params) })
  local last = run_end.last_op(P, run.job, run.id, skipped, j and j.last_known)
  local ops = { { put = { key = k.run, value = record.encode(skipped) } }, last }
  for _, op in ipairs(opts.skip_ops or {}) do ops[#ops + 1] = op end
  events.add(P, { job = run.job, id = run.id, events = events.targets(self, run.job) }, skipped, ops)
  return { compare = cmp, success = ops, failure = what_is_there(k) },
         run_end.last_register(P, run.job, run.id, last)
end

-- Claims the next attempt of run on this node, in one transaction:
--   * attempt 1 (opts.prev absent): the record must not exist;
--   * a next attempt (opts.prev = {rec =, mod =, pending =}): the record
--     must be at mod revision prev.mod and its pending/ entry at mod
--     revision prev.pending (it is deleted here);
--   * forbid/replace (unless opts.force): active/ must be free, or already
--     held by this run; the claim takes it. When it is held by another
--     run, attempt 1 is recorded skipped instead, by the failure branch. A
--     next attempt holds it only if the run did (prev.rec.exclusive): the
--     tasks of a queue, and runs forced, are claimed without it, and their
--     next attempts must not wait for one another's active/;
--   * the node's registration must still be on this node's session lease.
-- opts.extra_compare / extra_success / skip_ops let triggers and queues add
-- their own conditions. The same transaction reads the run's cancel/ key:
-- a run killed between its attempts gets run.cancel and does not start.
-- Returns the fence and the record, or nil.
function M.claim(self, run, opts)
  opts = opts or {}
  local s = M.session(self)
  if not s then return nil end
  local P, spec, prev = self.P, run.spec, opts.prev
  local k = keys.run(P, run.job, run.id)
  self.claims = (self.claims or 0) + 1
  local token = format("%s:%s:%d", self.name, s.lease, self.claims)
  local now = self.now()
  run.attempt = prev and (prev.rec.attempt or 0) + 1 or 1
  local holds = exclusive(spec) and not opts.force and (not prev or prev.rec.exclusive == true)
  local rec = record.claimed(run, self.name, now, {
    code_revision = spec.revision, token = token, exclusive = holds, prev = prev and prev.rec,
    params = run_params(spec, run.params) })
  local marker = json.encode({ node = self.name, attempt = run.attempt, token = token }, TEXT)
  local compare = { alive_compare(self, s) }
  local success = {
    { get = { key = k.cancel } },
    { put = { key = k.run, value = record.encode(rec) } },
    { put = { key = k.marker, value = marker, lease = s.lease } },
    { put = { key = k.inflight, value = marker } },
  }
  if prev then
    compare[#compare + 1] = { key = k.run, target = "mod", op = "==", value = prev.mod }
    compare[#compare + 1] = { key = k.pending, target = "mod", op = "==", value = prev.pending }
    compare[#compare + 1] = { key = k.marker, target = "create", op = "==", value = 0 }
    success[#success + 1] = { delete = { key = k.pending } }
  else
    compare[#compare + 1] = { key = k.run, target = "create", op = "==", value = 0 }
  end
  -- (P last/<job> is there once a claim of this version of the job has
  -- succeeded here: it wrote it. Every byte of a claim goes through etcd's
  -- raft log, its store and every watcher, so the value is not sent twice
  -- after that. A last/ deleted by hand comes back when the job is put
  -- again.)
  local j = self.jobs and self.jobs[run.job]
  local last_known = j and j.last_known
  local last = run_end.last_op(P, run.job, run.id, rec, last_known)
  success[#success + 1] = last
  for _, c in ipairs(opts.extra_compare or {}) do compare[#compare + 1] = c end
  for _, op in ipairs(opts.extra_success or {}) do success[#success + 1] = op end
  local failure, skip = {}, nil
  if holds then
    if prev and prev.rec.exclusive then
      compare[#compare + 1] = { key = k.active, target = "value", op = "==", value = run.id }
    else
      compare[#compare + 1] = { key = k.active, target = "create", op = "==", value = 0 }
      success[#success + 1] = { put = { key = k.active, value = run.id } }
    end
    if not prev then
      -- Nobody claimed it, but another run of the job is on: record the
      -- skip, once, and only while this node's session holds. That is a
      -- transaction of its own, made (skip_txn) and sent only when the
      -- claim failed on active/ (the failure branch says which keys were
      -- there): as the claim's failure branch, the skip record went to etcd
      -- with every claim of such a job, and every byte of a request costs
      -- etcd.
      failure = what_is_there(k)
      skip = function()
        return skip_txn(self, run, s,
                        "concurrency " .. spec.concurrency .. ": a previous run is still running",
                        { compare = { { key = k.active, target = "create", op = ">", value = 0 } },
                          extra_compare = opts.extra_compare, skip_ops = opts.skip_ops })
      end
    end
  end
  -- What a failed claim (or skip) x found (the failure branch above):
  -- whether a run of the job holds active/, and whether this instant is
  -- claimed; nil when it says nothing (etcd failed, or no such branch).
  local function found(x)
    local rs = x and x.responses or {}
    local a, c = rs[1], rs[2]
    if a and c then return (a.count or 0) > 0, (c.count or 0) > 0 end
  end
  local r, err
  for round = 1, 2 do
    r = nil
    for try = 1, 3 do
      -- (with the claims of other runs due now: node/batch.lua)
      r, err = self.batch:txn({ compare = compare, success = success, failure = failure }, nil,
                              run_end.last_register(P, run.job, run.id, last))
      if r then break end
      -- The answer was lost: the transaction may have been applied.
      local kv = claimed_by(self, s, k, token)
      if kv then
        r = { succeeded = true, revision = kv.create_revision }
        break
      end
      if kv == nil then return nil end -- the session was lost meanwhile
      log("warn", "claim failed; trying again", fields_of(self, run, { error = err, try = try }))
      baton.sleep(0.2 * try)
      if not M.session(self, s) then return nil end
    end
    if not r then return nil end
    local held, claimed = found(r)
    if r.succeeded or not skip or not held or claimed or not M.live(self, s) then break end
    local st, sreg = skip()
    local sr = self.batch:txn(st, nil, sreg)
    if sr and sr.succeeded then
      posted(self, run, opts)
      log("info", "run skipped: a previous run is still running", fields_of(self, run))
      self.metrics:skip(run.job, "concurrency")
      return nil
    end
    -- Unless the run that was on has ended meanwhile (claim again, once),
    -- the instant is another node's, or the leader's misfire check's.
    held, claimed = found(sr)
    if held ~= false or claimed then break end
  end
  if not r.succeeded then
    if M.live(self, s) then self.metrics:claim_lost(run.job) end -- (another node has it)
    return nil
  end
  if not M.session(self, s) then
    -- Applied while etcd still held the lease, answered after the node
    -- declared the session lost: not run here. The claim goes with the
    -- lease, and the leader hands the run to another node.
    log("info", "claim came back after the session was lost; not run", fields_of(self, run))
    return nil
  end
  posted(self, run, opts)
  rec = record.fenced(rec, r.revision)
  run.session = s
  run.last_known = true
  if j and self.jobs[run.job] == j then j.last_known = true end
  local c = r.responses and r.responses[1].kvs[1]
  if c then run.cancel = M.cancel_request(c.value) end
  return r.revision, rec
end

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
-- never run (M.unfit: failed
-- for good, no retry). The run's processes are gone when it returns: the
-- worker ends them before it replies, and a worker that is stopped is
-- waited for; a worker is given back (Pool:put) whatever raises while it
-- has the run, and stopped then.
local function attempt(self, run, fence, rec)
  local pool = self.pool
  if not M.live(self, run.session) then
    return "failed", "the node's session was lost before the run started"
  end
  if self.stopping then
    return "interrupted", "interrupted: node " .. self.name .. " was stopping when the run was due"
  end
  -- (a stop request that came before this node read its claim's answer)
  run.cancel = run.cancel or (self.cancels and self.cancels[run.job .. "/" .. run.id])
  if run.cancel then return "killed", run.cancel.reason end
  local unfit = M.unfit(run, rec)
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
    return "failed", require("baton.limits").oom_error(w.memory)
  end
  if ended.signal then return "failed", format("worker killed by signal %d", ended.signal) end
  if ended.error then return "failed", "worker lost: " .. tostring(ended.error) end
  return "failed", format("worker exited with status %d before the run returned", ended.code)
end

-- What happens after an attempt ended in state with reason why: the delay
-- before the next attempt (nil: the run ends) and the run's final state.
-- A run that can never run (unfit: M.unfit) is not tried again.
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
  local f = fields_of(self, run, { fence = fence, revision = spec.revision,
                                   lease = run.session.lease })
  log("info", "run started", f)
  self.metrics:run_started(run, rec)
  self.nrunning = self.nrunning + 1
  local ok, state, why, handoff, unfit = xpcall(attempt, debug.traceback, self, run, fence, rec)
  self.nrunning = self.nrunning - 1
  release()
  if not ok then
    log("error", "a run's attempt failed inside the node", fields_of(self, run, { error = state }))
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
    attempt_state = state, alive = alive_compare(self, s), linger = M.RECORD_LINGER,
    still_ok = function() return M.live(self, s) end })
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
local function execute(self, run, fence, rec, release)
  self.executing = self.executing + 1
  local ok, err = xpcall(execute_counted, debug.traceback, self, run, fence, rec, release)
  self.executing = self.executing - 1
  if not ok then log("error", "a run's end was not recorded", fields_of(self, run, { error = err })) end
end

-- Whether instant id of job is claimed (or recorded) already: one small
-- read, with the node's other writes (node/batch.lua). nil when etcd did
-- not answer.
local function taken(self, job, id)
  local r = self.batch:txn { success = { { get = { key = keys.run(self.P, job, id).run, count_only = true } } } }
  local c = r and r.responses and r.responses[1]
  if c then return (c.count or 0) > 0 end
end

-- Whether another node has run id of job already (counted as a claim
-- this node lost): the claims board (node/board.lua) says so or, with
-- ask, a read does (taken).
function M.taken_elsewhere(self, job, id, ask)
  if self.board:has(job, id) or (ask and taken(self, job, id)) then
    self.metrics:claim_lost(job)
    return true
  end
  return false
end

-- M.start once it holds a worker slot (release() gives it back).
local function start_in_slot(release, self, run, opts)
  local fire = not run.task and not opts.prev and run.fire or nil
  if opts.turn == "later" and M.taken_elsewhere(self, run.job, run.id, true) then return false end
  if fire and not run.manual and not events.in_time(run.spec, fire, self.now()) then
    -- Past its starting_deadline before a slot was free (a node with more
    -- due than it can run): recorded skipped, as the leader records an
    -- instant missed so, unless another node ran it in time.
    release()
    local s = M.session(self)
    if s then
      local t, reg = skip_txn(self, run, s, events.late_reason(run.spec))
      local r = self.batch:txn(t, nil, reg)
      if r and r.succeeded then
        posted(self, run, opts)
        log("info", "run skipped: not started within its starting_deadline", fields_of(self, run))
        self.metrics:skip(run.job, "deadline")
      end
    end
    return false
  end
  local fence, rec = M.claim(self, run, opts)
  if not fence then return false end
  execute(self, run, fence, rec, release)
  return true
end

-- Takes a worker slot, claims attempt 1 (or, with opts.prev, the next
-- attempt) of run (see M.claim) and executes it. Returns whether this node
-- ran it. opts.turn, for a run that every eligible node goes for in turn
-- (a scheduled instant or shard: node/triggers.lua, instant_due; a queue task:
-- node/queue.lua): "first", or "later" when another node's turn came
-- first, and mostly it has the run. Then the claims board (node/board.lua)
-- or, when it does not say, a small read (taken) says so before a claim is
-- sent, which would cost etcd the whole record to fail. (The read
-- comes after the slot, as the claim does: a busy node asks no faster than
-- it could run.) A node that claims or skips such a run posts it on the
-- board.
function M.start(self, run, opts)
  opts = opts or {}
  -- A queue task or a next attempt is no scheduled instant: it cannot misfire.
  local fire = not run.task and not opts.prev and run.fire or nil
  if opts.turn == "later" and M.taken_elsewhere(self, run.job, run.id) then return false end
  -- (the slot is held from here on, and given back however this ends:
  -- Pool:with_slot)
  local ok, took, ran = pcall(self.pool.with_slot, self.pool, fire, start_in_slot, self, run, opts)
  if not ok then
    log("error", "starting a run failed", fields_of(self, run, { error = took }))
    return false
  end
  return took and ran or false
end

-- Stops a local run on request (a cancel/ key with value, see the top of
-- this file: replace, baton job kill): cooperative stop, then every process
-- of the run is killed after the grace period; it is recorded killed and
-- not run again. A request for a run this node does not have at hand is
-- kept a few seconds: it may be this node's run, claimed in a transaction
-- whose answer has not been read yet (attempt looks).
function M.cancel_local(self, job, id, value)
  local req, found = M.cancel_request(value), false
  for w, run in pairs(self.pool.busy) do
    if run.job == job and run.id == id then
      found = true
      if not run.cancel then
        run.cancel = req
        log("info", "run cancelled", { job = job, instant = id, node = self.name, reason = req.reason,
                                       by = req.by })
        self.pool:interrupt(w)
        self.go(function()
          baton.sleep(self.grace)
          if self.pool.busy[w] == run then self.pool:stop(w) end
        end)
      end
    end
  end
  if not found then
    local key = job .. "/" .. id
    self.cancels = self.cancels or {}
    self.cancels[key] = req
    self.go(function()
      baton.sleep(10)
      if self.cancels[key] == req then self.cancels[key] = nil end
    end)
  end
end

-- For replace: stops the run that holds the job's active/ key, and waits
-- (up to the job's timeout + grace) until it has ended. A running one is
-- asked to stop (cancel/); one that is not running anywhere (waiting for
-- its next attempt, or its node lost) is recorded killed here. Returns
-- false, stopping nothing, when run itself was claimed already (by a node
-- whose turn came first), or when the old run would not end in time.
function M.replace_active(self, run)
  local P, e, spec = self.P, self.e, run.spec
  local k = keys.run(P, run.job, run.id)
  local mine = e:get(k.run, { count_only = true })
  if not mine or mine.count > 0 then return false end
  local deadline = baton.monotime() + spec.timeout + self.grace * 2
  local asked
  while baton.monotime() < deadline do
    local g = e:get(k.active)
    local kv = g and g.kvs[1]
    if g and not kv then return true end
    if kv then
      local old = kv.value
      local ok = keys.run(P, run.job, old)
      local r = e:txn { success = { { get = { key = ok.marker } }, { get = { key = ok.run } } } }
      if r and r.responses[1].count > 0 and asked ~= old then
        e:put(ok.cancel, M.cancel_value("replaced by run " .. run.id))
        asked = old
      elseif r and r.responses[1].count == 0 then
        local rk = r.responses[2].kvs[1]
        local dok, orec = pcall(json.decode, rk and rk.value or "")
        if dok and type(orec) == "table" then
          orec = record.killed(orec, self.now(), "replaced by run " .. run.id)
          local ops = run_end.final_ops(P, { job = run.job, id = old,
            task = orec.task and { key = orec.task } or nil,
            events = events.targets(self, run.job) },
            { { put = { key = ok.run, value = record.encode(orec) } } }, orec)
          local w = e:txn { compare = { { key = ok.run, target = "mod", op = "==", value = rk.mod_revision },
                                        { key = ok.marker, target = "create", op = "==", value = 0 },
                                        { key = k.active, target = "value", op = "==", value = old } },
                            success = ops }
          if w and w.succeeded then self.metrics:ended(run.job, "killed") end
        else
          e:txn { compare = { { key = k.active, target = "value", op = "==", value = old } },
                  success = { { delete = { key = k.active } } } }
        end
      end
    end
    baton.sleep(0.1)
  end
  return false
end

-- The attempt a pending entry (P pending/<job>/<id> at mod revision pmod)
-- waits for: read the record, and claim it as the next attempt — or, with
-- no record yet, as the first attempt of an instant the leader found
-- missed. Returns whether this node ran it; nil, "again" when etcd could
-- not be asked.
function M.take_pending(self, job, j, id, pmod)
  local P, e = self.P, self.e
  local k = keys.run(P, job, id)
  local r = e:txn { success = { { get = { key = k.run } }, { get = { key = k.pending } } } }
  if not r then return nil, "again" end
  local kv, pkv = r.responses[1].kvs[1], r.responses[2].kvs[1]
  if not pkv or pkv.mod_revision ~= pmod then return false end
  if not kv then
    local req, unfit = M.read_request(pkv.value, "pending entry")
    if type(req.fire) ~= "number" then return false end
    if type(req.event) == "table" and j.paused then
      missed.skip(self, job, j, id, pmod, req, "paused: the event came while the job was paused")
      return false
    end
    local run = { job = job, id = id, fire = req.fire, spec = j.spec, shard = M.shard_of(j.spec, id),
                  event = type(req.event) == "table" and req.event or nil, unfit = unfit }
    if j.spec.concurrency == "replace" and not M.replace_active(self, run) then return false end
    local gone = { { delete = { key = k.pending } } }
    return M.start(self, run, {
      extra_compare = { { key = k.pending, target = "mod", op = "==", value = pmod } },
      extra_success = gone, skip_ops = gone })
  end
  local ok, rec = pcall(json.decode, kv.value)
  if not ok or type(rec) ~= "table" then return false end
  if rec.state ~= "retrying" then
    -- Nothing waits for it any more (the run went on or ended another way).
    e:txn { compare = { { key = k.pending, target = "mod", op = "==", value = pmod } },
            success = { { delete = { key = k.pending } } } }
    return false
  end
  local run = { job = job, id = id, fire = rec.fire, spec = j.spec, manual = rec.manual,
                shard = M.shard_of(j.spec, id), event = type(rec.event) == "table" and rec.event or nil,
                events = events.targets(self, job) }
  if rec.task then
    -- (the task's key is that of the run, id as it is in etcd: the
    -- record's copy has U+FFFD for a NUL byte, M.unfit)
    local dir = rec.task:match("^(.*/)")
    rec.task = dir and dir .. id or rec.task
    local t = e:get(rec.task)
    if not t then return nil, "again" end
    if not t.kvs[1] then
      -- Its task was deleted meanwhile: nothing is left to run.
      rec = record.abandoned(rec, self.now(), "its queue task " .. rec.task .. " was deleted")
      local w = e:txn { compare = { { key = k.run, target = "mod", op = "==", value = kv.mod_revision },
                                    { key = k.pending, target = "mod", op = "==", value = pmod } },
                        success = run_end.final_ops(P, run, { { put = { key = k.run, value = record.encode(rec) } } }, rec) }
      if w and w.succeeded then self.metrics:ended(job, "abandoned") end
      return false
    end
    run.task = { key = rec.task, value = t.kvs[1].value }
  end
  return M.start(self, run, { prev = { rec = rec, mod = kv.mod_revision, pending = pmod } })
end

return M
