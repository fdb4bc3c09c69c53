-- The conductor of `baton node` (docs/architecture.md).
--
-- One process per machine: a session lease, registration at P nodes/<name>,
-- a campaign in the cluster election, the job store (list, then watch from
-- the listed revision + 1; re-list and apply the difference after a
-- compaction), one scheduling coroutine per job, and claims: an instant runs
-- only on the node whose transaction creates P runs/<job>/<instant>. Runs
-- execute in a pool of worker processes (`baton worker`, node/pool.lua), so
-- nothing a job does can stall the conductor's keepalives, watches and
-- timers.
--
-- Runs, attempts and their keys: lua/baton/node/runs.lua. Housekeeping by
-- the elected leader (orphaned runs, misfires, history): node/leader.lua.
-- Queue jobs: node/queue.lua.
local baton = require "baton"
local stored = require "baton.stored"
local keys = require "baton.keys"
local util = require "baton.cli.util"
local runs = require "baton.node.runs"
local batch = require "baton.node.batch"
local board = require "baton.node.board"
local heap = require "baton.heap"
local leader = require "baton.node.leader"
local queue = require "baton.node.queue"
local pool = require "baton.node.pool"
local clock = require "baton.node.clock"
local http = require "baton.node.http"
local metrics = require "baton.node.metrics"
local policymod = require "baton.policy"
local events = require "baton.events"
local sign = require "baton.sign"
local json = baton.json

local format, floor = string.format, math.floor

local M = {}

M.WORKERS = 16 -- runs at once on a node unless --workers says otherwise

local function log(level, msg, fields)
  baton.log[level](msg, fields)
end

local function node_info(self)
  return json.encode {
    name = self.name, labels = self.labels, version = baton.version,
    started = self.started, running = self.nrunning, pid = self.pid,
    oldest_waiting = self.pool and self.pool:oldest_waiting() or nil,
    clock = clock.info(self), max_skew = self.max_skew, trust = self.trust_info,
  }
end

-- Registers P nodes/<name> on session s's lease; refuses a name that a
-- live node already has, but replaces this node's own registration on the
-- lease of its previous session (old_lease), which may outlive the session
-- the node declared lost.
local function register(self, s, old_lease)
  local e, key = self.e, keys.key(self.P, "nodes", self.name)
  local put = { { put = { key = key, value = node_info(self), lease = s.lease } } }
  local r, err, code = e:txn {
    compare = { { key = key, target = "create", op = "==", value = 0 } },
    success = put,
    failure = old_lease and { { txn = {
      compare = { { key = key, target = "lease", op = "==", value = old_lease } },
      success = put } } } or nil,
  }
  if not r then return nil, err, code end
  if not r.succeeded and not (old_lease and r.responses[1] and r.responses[1].succeeded) then
    return nil, "EEXIST: the name is in use by a live node", "EEXIST"
  end
  return r.revision
end

local function publish(self)
  local s = runs.live(self)
  if s then self.e:put(keys.key(self.P, "nodes", self.name), node_info(self), { lease = s.lease }) end
end

---------------------------------------------------------------------------
-- policies

-- The module a job's policy names: stored in etcd (P policies/<name>,
-- hot-reloaded), else shipped in lua/baton/policies/, else the default.
local function policy_for(self, spec)
  local name = spec.policy or "default"
  local entry = self.policies[name]
  if entry then return entry.mod end
  return policymod.builtin(name) or policymod.builtin("default")
end

-- Seconds during which the same failure of a job's policy is logged once.
M.POLICY_WARN_EVERY = 60

-- One policy decision, guarded (budget, errors, result type): the default
-- decides when the job's policy fails, and the failure is logged (the same
-- one, for the same job and function, once a POLICY_WARN_EVERY: a policy
-- that fails for every instant would fill the log).
local function decide(self, name, spec, fname, fields, ...)
  local res, why = policymod.decide(policy_for(self, spec), fname, ...)
  if why then
    local key = name .. "\0" .. fname .. "\0" .. why
    local now, warned = baton.monotime(), self.policy_warned
    if not warned[key] or now - warned[key] >= M.POLICY_WARN_EVERY then
      if not warned[key] and next(warned) and #why < 2000 then
        for k, t in pairs(warned) do if now - t >= M.POLICY_WARN_EVERY then warned[k] = nil end end
      end
      warned[key] = now
      local f = { job = name, policy = spec.policy or "default", ["function"] = fname, error = why,
                  repeats = format("logged once a %d s", M.POLICY_WARN_EVERY) }
      for k, v in pairs(fields or {}) do f[k] = v end
      log("warn", "policy failed; the default decided", f)
    end
  end
  return res
end

-- The registered nodes (self.nodes, name -> its registration) as a list
-- sorted by name, what policies get: built once per change of
-- self.nodes (set_node), not for every instant.
local function live_nodes(self)
  local list = self.live_list
  if list then return list end
  list = {}
  for _, n in pairs(self.nodes) do list[#list + 1] = n end
  table.sort(list, function(a, b) return a.name < b.name end)
  -- (never changed once made: a stored policy's sandbox keeps it, stored.lua)
  self.live_list = stored.shareable(list)
  return list
end

-- Notes node name's registration n (nil: it left), which is never changed.
local function set_node(self, name, n)
  self.nodes[name] = stored.shareable(n)
  self.live_list = nil
end

---------------------------------------------------------------------------
-- instants and manual runs

-- The plain data a policy gets for a job, made once per job version (a
-- spec is never changed once compiled: a put compiles a new one). Its
-- retry table is a copy: the spec's may be the one all jobs without a
-- retry share (job.lua). Built-ins read it; stored policies get a copy
-- (policy.call).
local views = setmetatable({}, { __mode = "k" })
local function job_view(name, spec)
  local v = views[spec]
  if v and v.name == name then return v end
  local r = spec.retry
  v = { name = name, labels = spec.labels, policy = spec.policy, schedule = spec.schedule,
        queue = spec.queue, timezone = spec.timezone, timeout = spec.timeout,
        concurrency = spec.concurrency, shards = spec.shards, on_node_loss = spec.on_node_loss,
        retry = { attempts = r.attempts, backoff = r.backoff, max_backoff = r.max_backoff,
                  jitter = r.jitter } }
  views[spec] = stored.shareable(v)
  return v
end

-- Seconds this node waits before trying to claim key (nil: never), from
-- the job's policy; a policy that fails falls back to the default.
local function claim_delay(self, name, spec, key)
  local me = self.nodes[self.name] or { name = self.name, labels = self.labels }
  return decide(self, name, spec, "claim_delay", { instant = key },
                job_view(name, spec), key, live_nodes(self), me)
end

local SHARD_GRACE = 1 -- seconds before a node takes a shard assigned to another

-- {[i] = node name} for the shards of one instant, from the job's policy
-- (assign_shards), checked, else rendezvous hashing of each shard.
local function assign_shards(self, name, spec, fire)
  return decide(self, name, spec, "assign_shards", { instant = util.instant(fire) },
                job_view(name, spec), spec.shards, live_nodes(self), fire) or {}
end

-- Claims one instant of job version j (id: util.instant(fire)) on this
-- node's turn ("first" or "later", see runs.start).
local function claim_instant(self, name, j, fire, id, turn)
  if self.stopping or self.jobs[name] ~= j or j.paused then return end
  local run = { job = name, id = id, fire = fire, spec = j.spec }
  if j.spec.concurrency == "replace" and not runs.replace_active(self, run) then return end
  runs.start(self, run, { turn = turn })
end

-- A sharded job's instant is one run per shard: this node claims the
-- shards the policy assigned to it at once, and the others after
-- SHARD_GRACE (the claim fails harmlessly for a shard another node has).
local function claim_shards(self, name, j, fire)
  local spec, instant = j.spec, util.instant(fire)
  local a = assign_shards(self, name, spec, fire)
  for i = 1, spec.shards do
    self.go(function()
      if a[i] ~= self.name then baton.sleep(SHARD_GRACE) end
      if self.stopping or self.jobs[name] ~= j or j.paused then return end
      runs.start(self, { job = name, id = instant .. "/" .. i, fire = fire, spec = spec,
                         shard = runs.shard_of(spec, instant .. "/" .. i) },
                 { turn = a[i] == self.name and "first" or "later" })
    end)
  end
end

-- The turns heap (self.turns): this node's later turns at instants (the
-- policy's claim_delay > 0), by monotonic due time. When one is due, the
-- claims board mostly says that the first node has the run already, and
-- the turn ends there.
local function due_first(a, b) return a.at < b.at end

-- This node's turn at an instant of job version j that came due at
-- monotonic time asked: the policy's claim_delay says whether and when
-- this node goes for it. The first in line claims at once; a later turn
-- waits on the node's turns heap (served with the timetable, no coroutine
-- or timer of its own until it is due and still open).
local function take_turn(self, name, j, fire, asked)
  local delay = claim_delay(self, name, j.spec, fire)
  if delay == nil then return end
  if (j.spec.shards or 1) > 1 then
    self.go(claim_shards, self, name, j, fire)
  elseif delay == 0 then
    self.go(claim_instant, self, name, j, fire, util.instant(fire), "first")
  else
    heap.push(self.turns, { at = asked + delay, name = name, j = j, fire = fire }, due_first)
  end
end

-- One instant came due on this node (called by the timetable, without
-- waiting). A stored policy decides in the node's sandbox (stored.lua):
-- that answer is waited for in a coroutine of its own.
local function instant_due(self, name, j, fire)
  if policymod.is_remote(policy_for(self, j.spec)) then
    self.go(take_turn, self, name, j, fire, baton.monotime())
  else
    take_turn(self, name, j, fire, baton.monotime())
  end
end

-- The turns of the heap that are due.
local function turns_due(self)
  local t, mono = self.turns, baton.monotime()
  while t[1] and t[1].at <= mono do
    local ev = heap.pop(t, due_first)
    local id = util.instant(ev.fire)
    if self.jobs[ev.name] == ev.j and not ev.j.paused and not runs.taken_elsewhere(self, ev.name, id) then
      self.go(claim_instant, self, ev.name, ev.j, ev.fire, id, "later")
    end
  end
  return t[1] and t[1].at - mono
end

-- A manual run was requested (P trigger/<job>/<id>, see baton job run).
local function on_trigger(self, key, value)
  local name = keys.split(self.P, "trigger", key)
  local j = name and self.jobs[name]
  if not j then return end
  -- (one that spells a NUL byte is recorded failed, not run: runs.unfit)
  local req, unfit = runs.read_request(value, "trigger")
  local at = tonumber(req.at) or self.now()
  local delay = claim_delay(self, name, j.spec, key)
  if delay == nil then return end
  if delay > 0 then baton.sleep(delay) end
  if self.stopping then return end
  local run = { job = name, id = util.manual_id(at), fire = at, spec = j.spec, manual = true,
                params = type(req.params) == "table" and req.params or nil, unfit = unfit }
  runs.start(self, run, {
    force = req.force == true,
    extra_compare = { { key = key, target = "create", op = ">", value = 0 } },
    extra_success = { { delete = { key = key } } },
    skip_ops = { { delete = { key = key } } },
  })
end

-- A run waits for its next attempt (P pending/<job>/<id>: a retry, a
-- re-run after its node was lost or stopped, or the first attempt of an
-- instant the leader found missed). Every node that may run the job takes
-- its turn from the job's policy, as for a first run (the key it ranks is
-- the pending key and the attempt), once the attempt is due; the claim
-- (runs.take_pending) succeeds on one node only. While etcd
-- cannot be asked, it tries again; it stops once the entry is gone or
-- changed (mod is its mod revision: a new entry gets a turn of its own).
local function on_pending(self, key, value, mod)
  local job, id = keys.split(self.P, "pending", key)
  if not job or self.pending_seen[key] == mod then return end
  local ok, req = pcall(json.decode, value)
  if not ok or type(req) ~= "table" then req = {} end
  self.pending_seen[key] = mod
  local function go()
    local j = self.jobs[job]
    if not j then return end
    local wait = (tonumber(req.at) or 0) - self.now()
    if wait > 0 then baton.sleep(wait) end
    local delay = claim_delay(self, job, j.spec, key .. "#" .. tostring(req.attempt))
    if delay == nil then return end
    if delay > 0 then baton.sleep(delay) end
    while not self.stopping and self.jobs[job] do
      local ran, why = runs.take_pending(self, job, self.jobs[job], id, mod)
      if ran ~= nil or why ~= "again" then return end
      baton.sleep(1)
    end
  end
  go()
  if self.pending_seen[key] == mod then self.pending_seen[key] = nil end
end

-- The timetable: one min-heap of (next instant, job version) for the whole
-- node, served by one coroutine that sleeps until the earliest instant but
-- at most a second, so a wall-clock step is noticed within a second. Idle,
-- a node wakes once a second whatever the number of jobs. An entry whose
-- job was replaced or removed is dropped when it comes up.
--
-- Time and clock steps (what this loop does; cron.h has the DST rules):
-- - Instants are absolute: each entry holds the next instant of its job
--   after a time (spec.cron:next), in epoch seconds by self.now(), and the
--   loop waits for the earliest one. Nothing "sleeps until 02:00".
-- - self.now() is the cluster's median clock riding on the monotonic clock
--   (node/clock.lua): a step of this machine's own wall clock does not move
--   it. It moves when the other clocks do, through new samples: back at
--   once, forward by more than clock.TOLERANCE only once the move has held.
--   Until the offset is known the loop does not start (clock.wait, at most
--   2 x TTL); if it stays unknown, self.now() is the uncorrected wall clock
--   (baton.now) and this machine's clock steps do move it.
-- - Forward (a stall of the loop, a suspend, self.now() moving forward): an
--   entry that is late fires once, with the instant that was due, and is
--   put back at its next instant after max(that instant, now - 1): the
--   instant of the current second, when there is one, fires next, at once.
--   The instants in between are not run here; they are the leader's misfire
--   accounting (node/leader.lua).
-- - Backward: computed instants are kept, so nothing fires twice; an entry
--   waits until self.now() reaches its instant again. There is no threshold
--   beyond which the entries are computed afresh: after a backward move of
--   hours, cron jobs wait those hours.
-- - @every: the next instant is the previous one plus the interval (the
--   first: when the job was loaded plus the interval; after a forward move,
--   now - 1 plus the interval), on self.now(): it moves when self.now() does.
-- - @manual and queue jobs have no entry.
local function sooner(a, b) return a.fire < b.fire end

-- Puts the next instant of job version j after `after` on the timetable.
local function schedule(self, name, j, after)
  local spec = j.spec
  if spec.manual or spec.queue then return end
  local fire = spec.cron:next(after or self.now())
  if fire then heap.push(self.timetable, { fire = fire, name = name, j = j }, sooner) end
end

local function timetable_loop(self)
  local h = self.timetable
  -- No instant before the node knows its clock (node/clock.lua), or 2 x TTL.
  clock.wait(self, 2 * self.ttl)
  while not self.stopping do
    local now = self.now()
    while h[1] and h[1].fire <= now do
      local ev = heap.pop(h, sooner)
      if self.jobs[ev.name] == ev.j then
        -- After a stall or a forward clock step, go on from now: the
        -- instants in between are the leader's misfire accounting.
        schedule(self, ev.name, ev.j, math.max(ev.fire, now - 1))
        if not ev.j.paused then
          local ok, err = xpcall(instant_due, debug.traceback, self, ev.name, ev.j, ev.fire)
          if not ok then
            log("error", "instant not taken here: deciding this node's turn failed",
                { node = self.name, job = ev.name, instant = util.instant(ev.fire), error = err })
          end
        end
      end
    end
    local d = h[1] and h[1].fire - self.now() or 1
    local t = turns_due(self)
    if t and t < d then d = t end
    baton.sleep(d < 0 and 0 or d < 1 and d or 1)
  end
end

---------------------------------------------------------------------------
-- the job store

-- The job store is listed in pages of LIST_PAGE keys, all read at the
-- revision of the first, so that a store of 100,000 jobs never sits in
-- memory as one response (tens of MB of JSON and base64, and their decoded
-- copies): only the page being applied and the one being read are.
M.LIST_PAGE = 1000
-- Status writes in flight at once while a listing writes them (each a
-- transaction of STATUS_TXN puts, etcd's default --max-txn-ops): the next
-- page is read and compiled while etcd applies the previous one's.
M.STATUS_TXN, M.STATUS_INFLIGHT = 128, 8

-- Sends the gathered status operations (self.status_batch) in
-- transactions of STATUS_TXN, at most STATUS_INFLIGHT at once; with wait,
-- returns once all of them are answered. (A status write that fails is
-- not retried here, as a single one is not: the status is advisory, and
-- the next listing or reload writes it again.)
local function flush_status(self, wait)
  local writes = self.status_batch or {}
  if self.status_batch then self.status_batch = {} end
  for i = 1, #writes, M.STATUS_TXN do
    local ops = {}
    for k = i, math.min(i + M.STATUS_TXN - 1, #writes) do ops[#ops + 1] = writes[k] end
    while self.status_inflight >= M.STATUS_INFLIGHT do baton.sleep(0.002) end
    self.status_inflight = self.status_inflight + 1
    self.go(function()
      self.e:txn { success = ops }
      self.status_inflight = self.status_inflight - 1
    end)
  end
  if wait then
    while self.status_inflight > 0 do baton.sleep(0.002) end
  end
end

-- One write of P status/<job>/<this node> (op: a put or a delete): during
-- a listing it is gathered (self.status_batch) and sent with the page.
local function status_op(self, op)
  if self.status_batch then
    local b = self.status_batch
    b[#b + 1] = op
  elseif op.put then
    self.e:put(op.put.key, op.put.value)
  else
    self.e:delete(op.delete.key)
  end
end

-- Writes this node's status of a job (with the revision it still runs
-- when rev was rejected).
local function put_status(self, name, rev, err, running)
  status_op(self, { put = { key = keys.key(self.P, "status", name, self.name),
    -- (a load error may hold a NUL byte, from the job's code: U+FFFD)
    value = json.encode({ revision = rev, error = err or json.null, running = running,
                          time = baton.now() }, { nul = "replace" }) } })
end

-- What describing version kv of job name gave (stored.job: the spec, or
-- the error: invalid, untrusted), applied. During a listing
-- (self.listing: counts for its summary line), a job loaded for the first
-- time is counted instead of logged one line each; reloads and rejections
-- are logged one by one as always.
local function finish_job(self, name, kv, spec, err)
  local rev, source = kv.mod_revision, kv.value
  local cur = self.jobs[name]
  self.store_version = self.store_version + 1 -- (what GET /api/v1/jobs lists changed)
  local listing = self.listing
  if not spec then
    if self.bad[name] ~= rev then
      self.bad[name] = rev
      if listing then listing.rejected = listing.rejected + 1 end
      log("error", "job rejected; keeping the last good version", {
        job = name, revision = rev, error = err,
        running = cur and cur.spec.revision or json.null })
      put_status(self, name, rev, err, cur and cur.spec.revision)
    end
    return
  end
  self.bad[name] = nil
  -- (sent with a run to a worker that has not seen it, with what its
  -- signature is checked against there: runs.lua)
  spec.source, spec.created, spec.version = source, kv.create_revision, kv.version
  local j = { spec = spec, paused = self.paused[name] or false,
              loaded_at = cur and cur.loaded_at or baton.now() }
  self.jobs[name] = j
  events.note(self, name, spec)
  leader.job_changed(self, name)
  if listing and not cur then
    listing.loaded = listing.loaded + 1
  else
    if listing then listing.reloaded = listing.reloaded + 1 end
    log("info", cur and "job reloaded" or "job loaded", { job = name, revision = rev,
      signed_by = stored.trusting() and sign.signer(source) or nil,
      schedule = spec.schedule or (spec.queue and "queue:" .. spec.queue) or "on events" })
  end
  put_status(self, name, rev, nil)
  if spec.queue then
    queue.follow(self, spec.queue)
  else
    -- (Misfires of a new job are the leader's periodic check, which goes
    -- through the jobs one at a time: a coroutine per job here meant
    -- thousands of concurrent requests when a leader loads its store.)
    schedule(self, name, j)
  end
end

-- Whether kv (a put of P jobs/<name>) needs describing: not when that
-- revision is loaded or was rejected already, nor for a signed put's
-- placeholder (sign.PLACEHOLDER: the signed source follows). Notes it as
-- the revision wanted, so that an answer for an older one is dropped.
local function wants(self, name, kv)
  local rev, cur = kv.mod_revision, self.jobs[name]
  if (cur and cur.spec.revision == rev) or self.bad[name] == rev or kv.value == sign.PLACEHOLDER then
    return false
  end
  self.want[name] = rev
  return true
end

-- Loads version kv of job name unless it is loaded already: described in
-- the sandbox (stored.job verifies it first on a --trust node), which the
-- watch's coroutine waits for. A later put or a delete of the job while it
-- waits wins (self.want).
local function apply_job(self, name, kv)
  if not wants(self, name, kv) then return end
  local spec, err = stored.job(name, kv)
  if self.want[name] ~= kv.mod_revision then return end
  finish_job(self, name, kv, spec, err)
end

local function put_policy_status(self, name, rev, err)
  self.e:put(keys.key(self.P, "policy-status", name, self.name),
             json.encode({ revision = rev, error = err or json.null, time = baton.now() }, { nul = "replace" }))
end

-- A policy put: load it into the node's deciding sandbox (stored.policy,
-- which verifies it first on a --trust node), swap it in at once, or keep
-- the last good version.
local function apply_policy(self, name, kv)
  local rev, source = kv.mod_revision, kv.value
  local cur = self.policies[name]
  if (cur and cur.revision == rev) or self.bad_policies[name] == rev or source == sign.PLACEHOLDER then
    return
  end
  self.want_policy[name] = rev
  local mod, err = stored.policy(name, kv, { role = "decide" })
  if self.want_policy[name] ~= rev then return end
  if not mod then
    if self.bad_policies[name] ~= rev then
      self.bad_policies[name] = rev
      log("error", "policy rejected; keeping the last good version", { policy = name,
        revision = rev, error = err, running = cur and cur.revision or json.null })
      put_policy_status(self, name, rev, err)
    end
    return
  end
  self.bad_policies[name] = nil
  if cur then stored.release(cur.mod) end
  self.policies[name] = { mod = mod, revision = rev }
  log("info", cur and "policy reloaded" or "policy loaded", { policy = name, revision = rev,
    signed_by = stored.trusting() and sign.signer(source) or nil })
  put_policy_status(self, name, rev, nil)
end

local function remove_policy(self, name)
  if self.policies[name] then
    log("info", "policy removed", { policy = name })
    stored.release(self.policies[name].mod)
  end
  self.policies[name] = nil
  self.want_policy[name] = nil
  self.bad_policies[name] = nil
  self.e:delete(keys.key(self.P, "policy-status", name, self.name))
end

local function remove_job(self, name)
  if self.jobs[name] then log("info", "job removed", { job = name }) end
  if self.listing then self.listing.removed = self.listing.removed + 1 end
  self.store_version = self.store_version + 1
  self.jobs[name] = nil
  self.want[name] = nil
  self.metrics:forget("job_name", name)
  events.note(self, name, nil)
  self.bad[name] = nil
  status_op(self, { delete = { key = keys.key(self.P, "status", name, self.name) } })
end

local function set_paused(self, name, paused)
  if (self.paused[name] or false) ~= paused then self.store_version = self.store_version + 1 end
  self.paused[name] = paused or nil
  local j = self.jobs[name]
  if j and j.paused ~= paused then
    j.paused = paused
    log("info", paused and "job paused" or "job resumed", { job = name })
  end
end

-- Lists jobs, paused flags, nodes, triggers, policies and pending runs at
-- one revision and applies the difference with what is loaded. The jobs
-- come in pages (M.LIST_PAGE keys, read at the revision of the first
-- page); a page that cannot be read (etcd gone, or the revision compacted
-- meanwhile) fails the listing, and follow() lists again from the start:
-- the pages applied so far are from the same revision, so nothing is
-- applied out of order, and what the next listing finds unchanged costs
-- nothing (apply_job skips a revision it has). Returns the revision. (It
-- runs at the node's usual GC pause: a page's garbage is small, and a
-- smaller pause while the heap grows by every job makes the collector go
-- over it again and again.)
local function list_all(self)
  local P, e = self.P, self.e
  local jobs_end = require("baton.etcd").prefix_end(keys.dir(P, "jobs"))
  local r, err, code = e:txn { success = {
    { get = { key = keys.dir(P, "jobs"), range_end = jobs_end, limit = M.LIST_PAGE } },
    { get = { key = keys.dir(P, "paused"), prefix = true, keys_only = true } },
    { get = { key = keys.dir(P, "nodes"), prefix = true } },
    { get = { key = keys.dir(P, "trigger"), prefix = true } },
    { get = { key = keys.dir(P, "policies"), prefix = true } },
    { get = { key = keys.dir(P, "pending"), prefix = true } },
  } }
  if not r then return nil, err, code end
  local rev_of_listing = r.revision
  -- Policies first: the jobs' first decisions use them.
  local pseen = {}
  for _, kv in ipairs(r.responses[5].kvs) do
    local name = keys.rest(P, "policies", kv.key)
    pseen[name] = true
    apply_policy(self, name, kv)
  end
  for name in pairs(self.policies) do if not pseen[name] then remove_policy(self, name) end end
  local seen, paused = {}, {}
  for _, kv in ipairs(r.responses[2].kvs) do paused[keys.rest(P, "paused", kv.key)] = true end
  for name in pairs(self.paused) do if not paused[name] then set_paused(self, name, false) end end
  for name in pairs(paused) do set_paused(self, name, true) end
  local others = r.responses
  local page = r.responses[1]
  self.status_batch, self.status_inflight = {}, self.status_inflight or 0
  self.listing = { loaded = 0, reloaded = 0, rejected = 0, removed = 0, pages = 0 }
  local t0 = baton.monotime()
  while true do
    self.listing.pages = self.listing.pages + 1
    local kvs = page.kvs
    -- The next page is read while this one is compiled (etcd works on one
    -- core while the node works on the other).
    local nxt
    if page.more and #kvs > 0 then
      self.go(function()
        local p2, e2, c2 = e:get(kvs[#kvs].key .. "\0", { range_end = jobs_end,
          limit = M.LIST_PAGE, revision = rev_of_listing })
        nxt = { p2, e2, c2 }
      end)
    end
    -- (described in the sandbox together, one round trip for the page,
    -- each applied as it comes while the sandbox goes on)
    local todo = {}
    for i = 1, #kvs do
      local kv = kvs[i]
      local name = keys.rest(P, "jobs", kv.key)
      seen[name] = true
      if wants(self, name, kv) then todo[#todo + 1] = { name = name, kv = kv } end
    end
    stored.jobs(todo, nil, function(i, d)
      local item = todo[i]
      if self.want[item.name] == item.kv.mod_revision then
        finish_job(self, item.name, item.kv, d.spec, d.error)
      end
    end)
    flush_status(self)
    if not page.more or #kvs == 0 then break end
    while not nxt do baton.sleep(0.002) end
    page, err, code = nxt[1], nxt[2], nxt[3]
    if not page then
      flush_status(self, true)
      self.status_batch, self.listing = nil, nil
      return nil, err, code
    end
  end
  for name in pairs(self.jobs) do if not seen[name] then remove_job(self, name) end end
  for name in pairs(self.bad) do if not seen[name] then remove_job(self, name) end end
  flush_status(self, true)
  local l = self.listing
  self.status_batch, self.listing = nil, nil
  local njobs = 0
  for _ in pairs(seen) do njobs = njobs + 1 end
  log("info", "job store listed", { node = self.name, revision = rev_of_listing, jobs = njobs,
    loaded = l.loaded, reloaded = l.reloaded, rejected = l.rejected,
    removed = l.removed, pages = l.pages, seconds = floor((baton.monotime() - t0) * 1000) / 1000 })
  self.nodes, self.live_list = {}, nil
  for _, kv in ipairs(others[3].kvs) do
    -- (a record on no lease is no node's session: a forged or stray key)
    local ok, n = pcall(json.decode, kv.value)
    if ok and type(n) == "table" and n.name and kv.lease then set_node(self, n.name, n) end
  end
  for _, kv in ipairs(others[4].kvs) do self.go(on_trigger, self, kv.key, kv.value) end
  for _, kv in ipairs(others[6].kvs) do
    self.go(on_pending, self, kv.key, kv.value, kv.mod_revision)
  end
  -- The listing's pages and their decoded copies are garbage now; collect
  -- them at once and hand the C heap's free pages back, so that a node that
  -- loaded a large store starts small.
  r, others, page = nil, nil, nil -- luacheck: ignore 311 (unreferenced for the collector)
  baton._release_memory()
  self.listed = true
  return rev_of_listing
end

local function on_event(self, ev)
  local P, key = self.P, ev.kv.key
  local kind, rest = keys.kind(P, key)
  if kind == "jobs" then
    local name = rest
    if ev.type == "put" then apply_job(self, name, ev.kv)
    else remove_job(self, name) end
  elseif kind == "paused" then
    set_paused(self, rest, ev.type == "put")
  elseif kind == "policies" then
    local name = rest
    if ev.type == "put" then apply_policy(self, name, ev.kv)
    else remove_policy(self, name) end
  elseif kind == "trigger" then
    if ev.type == "put" then
      self.go(on_trigger, self, key, ev.kv.value)
      -- (a run by hand: a new record, which the leader's next history
      -- pruning counts, node/leader.lua)
      local job = self.leader and rest:match("^([^/]+)/")
      if job then
        self.prune_dirty = self.prune_dirty or {}
        self.prune_dirty[job] = true
      end
    end
  elseif kind == "pending" then
    if ev.type == "put" then self.go(on_pending, self, key, ev.kv.value, ev.kv.mod_revision) end
  elseif kind == "cancel" then
    if ev.type == "put" then
      local job, id = keys.split(P, "cancel", key)
      if job then runs.cancel_local(self, job, id, ev.kv.value) end
    end
  elseif kind == "nodes" then
    local name = rest
    if ev.type == "delete" and name == self.name and ev.kv.mod_revision > (self.registered or 0)
       and runs.live(self) then
      -- The registration of the current session is gone: etcd dropped the
      -- lease (an etcd leader that was stalled can revoke leases it wrongly
      -- thinks expired, etcd #12528) before the keepalive could know.
      -- Fence at once.
      log("error", "own registration deleted: the session's lease is gone",
          { node = self.name, lease = self.s.lease, revision = ev.kv.mod_revision })
      self.s:_lose("its key " .. key .. " was deleted at revision " .. ev.kv.mod_revision)
    end
    if ev.type == "put" then
      local ok, n = pcall(json.decode, ev.kv.value)
      if ok and type(n) == "table" and ev.kv.lease then set_node(self, name, n)
      elseif not ev.kv.lease then set_node(self, name, nil) end
    else
      set_node(self, name, nil)
      if name ~= self.name then self.go(leader.node_gone, self) end
    end
  end
end

-- How much the collector does per step, for each byte allocated, while the
-- node makes a burst of garbage: listing the job store, or the leader's
-- first misfire check reading every job's newest records (gc_burst). At
-- Lua's default, 200, such a burst outruns it: the heap peaks at more than
-- twice what is live, and LuaJIT's allocator keeps what it once took from
-- the OS, so the node stays that large. A larger multiplier keeps the peak
-- near what is live for about the same CPU: each cycle does the same work,
-- sooner. (Outside bursts the default stays: a busy node's garbage is
-- steady.)
M.GC_BURST_STEPMUL = 800
M.GC_STEPMUL = 200

-- Runs fn(...) as a burst (above); bursts may overlap (a listing again
-- after a compaction while the leader's first check runs).
local function gc_burst(self, fn, ...)
  self.bursts = (self.bursts or 0) + 1
  if self.bursts == 1 then collectgarbage("setstepmul", M.GC_BURST_STEPMUL) end
  -- (the traceback is taken where the error was raised, not here)
  local r = { xpcall(fn, debug.traceback, ...) }
  self.bursts = self.bursts - 1
  if self.bursts == 0 then collectgarbage("setstepmul", M.GC_STEPMUL) end
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, table.maxn(r))
end

-- Follows jobs/, paused/ and nodes/ through one watch on each, merged by
-- revision; after a compaction, lists again and applies the difference.
local function follow(self)
  local P, e = self.P, self.e
  while not self.stopping do
    local again = self.listed
    local rev, err, code = gc_burst(self, list_all, self)
    if not rev then
      log("warn", "listing the job store failed; retrying", { error = err })
      -- (a revision compacted while the pages were read: list again at
      -- once, from a newer one)
      if code ~= "ECOMPACTED" then baton.sleep(1) end
    else
      if again then self.metrics:resynced() end
      local watchers = {}
      local compacted = false
      for _, kind in ipairs { "jobs", "paused", "nodes", "trigger", "cancel", "policies", "pending" } do
        local w, werr = e:watch(keys.dir(P, kind), { prefix = true, start_revision = rev + 1 })
        if not w then
          log("warn", "watch failed; listing again", { prefix = keys.dir(P, kind), error = werr })
          compacted = true
          break
        end
        watchers[#watchers + 1] = w
      end
      self.watchers = watchers
      local pending = #watchers
      for _, w in ipairs(watchers) do
        self.go(function()
          while not self.stopping and not compacted do
            local evs, _, wcode = w:next()
            if not evs then
              if wcode == "ECOMPACTED" then
                log("warn", "watch compacted; listing the store again", {})
              end
              compacted = true
              break
            end
            for _, ev in ipairs(evs) do on_event(self, ev) end
          end
          pending = pending - 1
        end)
      end
      while pending > 0 and not compacted and not self.stopping do baton.sleep(0.2) end
      for _, w in ipairs(watchers) do w:cancel() end
      while pending > 0 do baton.sleep(0.05) end
    end
  end
end

---------------------------------------------------------------------------
-- the node

-- The node's own coroutines: one that fails (a bug of baton's, nothing a
-- job does: jobs run in workers) is logged with its traceback, and one that
-- serves the node for its whole life is started again a second later,
-- instead of ending the process and leaving its workers' runs to be ended
-- by their containment processes.
local function guarded(self, fn, again)
  return function(...)
    while true do
      local ok, err = xpcall(fn, debug.traceback, ...)
      if ok then return end
      log("error", again and "node task failed; starting it again" or "node task failed",
          { node = self.name, error = err })
      if not again or self.stopping then return end
      baton.sleep(1)
      if self.stopping then return end
    end
  end
end

-- Starts a session, makes it the one the node's runs are fenced by (its
-- keepalive publishes its deadline on the fence board that each worker's
-- containment process reads), registers the node on it (replacing the
-- registration of old, the node's previous session, if that is still
-- there) and campaigns.
local function join(self, old)
  local s, err, code = baton.session { ttl = self.ttl }
  if not s then return nil, err, code end
  local fd, ferr, fcode = s:_fence()
  if not fd then s:close(); return nil, ferr, fcode end
  local rev, rerr, rcode = register(self, s, old and old.lease)
  if not rev then s:close(); return nil, rerr, rcode end
  self.s, self.fence_fd, self.fenced, self.registered = s, fd, false, rev
  -- The cluster election: the leader does the housekeeping that needs one
  -- decider (node/leader.lua) until its session ends.
  self.go(function()
    local el = baton.election(s, keys.key(self.P, "election"))
    if el:campaign(self.name) and runs.live(self, s) and not self.stopping then
      local term = {}
      self.leader = term
      log("info", "elected cluster leader", { node = self.name })
      -- (leader.run returns when the term ends; a failure in it starts it
      -- again while the term lasts)
      self.forever(function() if self.leader == term then leader.run(self) end end)
    end
  end)
  return true
end

-- Self-fencing. The C keepalive declares the session lost before its lease
-- can have expired on etcd (on the monotonic clock, with a margin); each
-- worker's containment process ends its run at the same moment by itself,
-- even if this process is stopped. From then on nothing uses the session
-- (runs.live): every run and its processes are stopped first, and only
-- then is anything else done: the log line, the revocation of the old
-- lease (etcd may keep it alive across its own leader changes: revoking
-- frees the runs for takeover at once, now that they are provably
-- stopped), and a new session, retried until it works.
local function fence(self)
  while not self.stopping do
    local s = self.s
    local why = s:wait()
    if self.stopping then return end
    self.metrics:session_lost()
    self.fenced = true
    self.leader = false
    self.pool:stop_all()
    log("error", "session lost; runs stopped", { node = self.name, lease = s.lease, reason = why })
    local revoked
    while not self.stopping do
      if not revoked then
        revoked = s:close()
      end
      local jok, jerr = join(self, s)
      if jok then
        log("info", "node rejoined", { node = self.name, lease = self.s.lease, old_lease = s.lease })
        self.metrics:rejoined()
        -- Work that came while this node could not claim it: its turn for
        -- it came and went, and no event will come again.
        local r = self.e:txn { success = { { get = { key = keys.dir(self.P, "pending"), prefix = true } },
                                           { get = { key = keys.dir(self.P, "trigger"), prefix = true } } } }
        for _, kv in ipairs(r and r.responses[1].kvs or {}) do
          self.go(on_pending, self, kv.key, kv.value, kv.mod_revision)
        end
        for _, kv in ipairs(r and r.responses[2].kvs or {}) do
          self.go(on_trigger, self, kv.key, kv.value)
        end
        queue.resync(self)
        break
      end
      log("warn", "rejoin failed; retrying", { node = self.name, error = jerr })
      baton.sleep(1)
    end
  end
end

-- SIGINT/SIGTERM/SIGHUP: stop taking work, ask the runs to stop (SIGTERM to
-- every process of theirs, ctx:cancelled()) and give them the grace
-- period; then end what is left, wait until their ends are recorded (a run
-- the node had to interrupt is recorded so, and runs again elsewhere as its
-- on_node_loss says, now that its processes are gone), and close the
-- session.
local function stop(self, sig)
  self.stopping = true
  self.leader = false
  log("info", "stopping: waiting for runs to end", { node = self.name, signal = sig,
                                                    running = self.nrunning })
  self.pool:close()
  for w in pairs(self.pool.busy) do self.pool:interrupt(w) end
  local deadline = baton.monotime() + self.grace
  while self.nrunning > 0 and baton.monotime() < deadline do baton.sleep(0.1) end
  self.pool:stop_all()
  deadline = baton.monotime() + self.grace
  while self.executing > 0 and baton.monotime() < deadline do baton.sleep(0.05) end
  http.stop(self) -- (/readyz said 503 "stopping" until now)
  stored.close()
  self.s:close()
  log("info", "node stopped", { node = self.name })
end

-- The conductor's GC pause: how far its Lua heap grows past what was live
-- before a new cycle starts (Lua's default, 200, lets it double). A node's
-- live heap is mostly its jobs (10,000 jobs: about 34 MB): at 200 a burst
-- of garbage (a listing, a scrape) could grow it, and the pages it keeps,
-- by as much again. But every cycle marks the whole live heap, so the
-- smaller the room, the more CPU each run's garbage costs (at 120 five
-- times as much as at 200; a busy node spent a third of its time in the
-- collector). So the room is GC_ROOM bytes of garbage, between 20% and
-- 100% of what is live, tuned every second from the smallest heap seen in
-- the last GC_WINDOW seconds (about what is live).
M.GC_ROOM = 16 * 1024 * 1024
M.GC_WINDOW = 10
M.GC_PAUSE = 120 -- (until the first tuning)

function M.gc_pause(live_bytes)
  local room = 100 * M.GC_ROOM / math.max(live_bytes, 1)
  return math.floor(100 + math.max(20, math.min(100, room)))
end

local function gc_tune(self)
  local seen, i = {}, 0
  while not self.stopping do
    baton.sleep(1)
    i = i % M.GC_WINDOW + 1
    seen[i] = collectgarbage("count") * 1024
    local live = math.huge
    for _, b in pairs(seen) do if b < live then live = b end end
    collectgarbage("setpause", M.gc_pause(live))
  end
end

function M.run(opts)
  collectgarbage("setpause", M.GC_PAUSE)
  local self = {
    name = opts.name, ttl = opts.ttl or 10, labels = opts.labels or {},
    P = util.prefix(), e = baton.etcd, started = baton.now(),
    jobs = {}, bad = {}, paused = {}, nodes = {}, nrunning = 0, executing = 0, queues = {},
    timetable = {}, turns = {}, policies = {}, bad_policies = {}, pending_seen = {}, store_version = 0,
    want = {}, want_policy = {}, policy_warned = {},
    grace = opts.grace or 5, history = opts.history or 100, max_workers = opts.workers or M.WORKERS,
    pid = tonumber((io.open("/proc/self/stat"):read("*l")):match("^%d+")),
    metrics = metrics.for_node(), -- (GET /metrics: metrics.render(self))
  }
  self.e:observe(metrics.etcd_observer(self))
  -- Claims and ends of runs go to etcd together (node/batch.lua).
  self.batch = batch.new(self.e, function(n) self.metrics:batch_sent(n) end)
  -- What the other nodes claimed lately (node/board.lua).
  self.board = board.new(self)
  self.now = baton.now -- corrected from clock.start on (node/clock.lua)
  self.go = function(fn, ...) return baton.go(guarded(self, fn, false), ...) end
  self.forever = function(fn, ...) return baton.go(guarded(self, fn, true), ...) end
  self.policy_for = function(spec) return policy_for(self, spec) end
  self.job_view = job_view
  self.decide = function(name, spec, fname, fields, ...) return decide(self, name, spec, fname, fields, ...) end
  self.claim_delay = function(name, spec, key) return claim_delay(self, name, spec, key) end
  self.publish = function() publish(self) end
  self.gc_burst = function(fn, ...) return gc_burst(self, fn, ...) end
  self.max_skew = opts.max_skew or clock.MAX_SKEW
  -- --trust: only signed jobs and policies load (sign.lua); what the node
  -- publishes of it, for baton nodes: {signed = false} runs unsigned code.
  self.trust = opts.trust
  stored.configure { trust = opts.trust, prefix = self.P }
  -- --secrets-dir: where the conductor reads a run's secrets, which go to
  -- its worker with the run (node/secrets.lua); --run-as {name, uid, gid,
  -- home}: the user workers run as (node/pool.lua)
  self.secrets_dir = opts.secrets_dir
  self.run_as = opts.run_as
  -- --run-memory: the memory limit of a run whose job sets none (limits.lua)
  self.run_memory = opts.run_memory
  self.trust_info = opts.trust and { signed = true, keys = json.array(opts.trust.ids) } or { signed = false }
  -- --http: its files are read before the node joins, and it listens once
  -- it has (node/http.lua); a failure of either ends the node at once.
  local web
  if opts.http then
    local herr
    web, herr = http.prepare(opts.http)
    if not web then return nil, "node " .. self.name .. ": " .. herr end
  end
  -- Stored code is described in a sandbox (stored.lua): a machine that
  -- cannot run one would refuse every job, so the node says so now.
  local sok, serr = stored.probe()
  if not sok then return nil, "node " .. self.name .. ": " .. serr end
  local ok, err = join(self)
  if not ok then return nil, "node " .. self.name .. ": " .. err end
  if web then
    local srv, herr = http.start(self, web)
    if not srv then
      self.s:close()
      return nil, "node " .. self.name .. ": --http: " .. herr
    end
    log("info", "http listening", { node = self.name, addr = srv.addr, tls = web.cert and true or false,
                                    writable = web.token and true or false })
  end
  clock.start(self)
  self.pool = pool.new(self)
  set_node(self, self.name, { name = self.name, labels = self.labels })
  log("info", "node started", { node = self.name, lease = self.s.lease, ttl = self.ttl,
                                prefix = self.P, trust = self.trust and table.concat(self.trust.ids, ",")
                                  or "unsigned code allowed", secrets_dir = self.secrets_dir })
  self.forever(fence, self)
  self.forever(leader.backstop, self)

  -- Keep the published node info (running runs) fresh.
  self.forever(function()
    local last
    while not self.stopping do
      baton.sleep(1)
      local shown = self.nrunning .. " " .. tostring(self.pool:oldest_waiting())
      if shown ~= last then last = shown; publish(self) end
    end
  end)

  self.forever(follow, self)
  self.board:start()
  self.forever(timetable_loop, self)
  self.forever(gc_tune, self)

  stop(self, baton.signal { "SIGINT", "SIGTERM", "SIGHUP" })
  return true
end

return M
