-- Housekeeping done by the elected leader of the cluster only:
--   * orphaned runs: an inflight/ entry without its lease-bound running/
--     marker belongs to a node that is gone. The job's policy (on_orphan) or
--     on_node_loss decides: rerun it (the record waits for its next attempt
--     with a pending/ entry, which any eligible node claims, chosen by the
--     job's policy as for a first run), or record it abandoned. A run that
--     a replace asked to stop is recorded killed. (The other nodes do this
--     too for runs the leader leaves unhandled: M.backstop.)
--   * misfires: instants (and shards of instants) of a job that no node
--     started (the cluster was down, or every claim failed) follow the
--     job's misfire policy and starting_deadline; every instant or shard not
--     run is recorded as skipped with the reason.
--   * history: keeps the newest `history` run records per job; a record's
--     kept output (output/<job>/<id>/@..., output.lua) goes with it.
local baton = require "baton"
local runs = require "baton.node.runs"
local cancel = require "baton.node.cancel"
local run_end = require "baton.run_end"
local keys = require "baton.keys"
local record = require "baton.record"
local events = require "baton.events"
local unrun = require "baton.node.missed"
local util = require "baton.util"
local decide = require "baton.node.decide"
local gc = require "baton.node.gc"

local json = baton.json

local format = string.format

local M = {}

local function log(level, msg, fields) baton.log[level](msg, fields) end

-- Handles one inflight entry if its node is gone.
local function check_inflight(self, job, id)
  local P, e = self.P, self.e
  local k = keys.run(P, job, id)
  local r = e:txn { success = { { get = { key = k.marker } }, { get = { key = k.run } },
                                { get = { key = k.inflight } }, { get = { key = k.pending } },
                                { get = { key = k.cancel } } } }
  if not r then return end
  if r.responses[1].count > 0 or r.responses[3].count == 0 then return end
  local kv = r.responses[2].kvs[1]
  local ok, rec = pcall(json.decode, kv and kv.value or "")
  if not kv or not ok or type(rec) ~= "table" then
    e:delete(k.inflight)
    return
  end
  local j = self.jobs[job]
  if not j then return end -- the job is gone or not loaded here
  local fields = { job = job, instant = id, node = self.name, lost_node = rec.node,
                   attempt = rec.attempt }
  local now = self.now()
  local guard = { { key = k.run, target = "mod", op = "==", value = kv.mod_revision },
                  { key = k.marker, target = "create", op = "==", value = 0 } }
  if rec.state == "retrying" then
    -- Waiting for its next attempt: its pending/ entry lets any eligible
    -- node claim it. Only one lost with an older version is written here.
    if r.responses[4].count > 0 then return end
    guard[3] = { key = k.pending, target = "create", op = "==", value = 0 }
    e:txn { compare = guard, success = { { put = { key = k.pending, value = json.encode {
      at = rec.retry_at or now, attempt = (rec.attempt or 0) + 1, reason = "retry" } } } } }
    return
  elseif rec.state ~= "running" then
    e:delete(k.inflight) -- finished records carry no inflight entry
    return
  end
  -- (Its fence, when the record names none, is the record's mod revision:
  -- the claim wrote the record in the transaction that made the fence.)
  local why = "node " .. tostring(rec.node) .. " was lost"
  rec = record.lost(rec, now, why, kv.mod_revision)
  local decision
  if r.responses[5].count > 0 then
    -- Asked to stop for good (replace, baton job kill): not run again.
    local c = cancel.cancel_request(r.responses[5].kvs[1].value)
    decision = "killed"
    rec = record.killed(rec, now, c.reason .. "; " .. why, c.by)
  else
    decision = decide.decide(self, job, j.spec, "on_orphan", { instant = id }, decide.job_view(job, j.spec), rec)
    rec = decision == "rerun" and record.retrying(rec, now, why) or record.abandoned(rec, now, why)
  end
  fields.decision = decision
  local ops = { { put = { key = k.run, value = record.encode(rec) } } }
  if decision == "rerun" then
    ops[2] = { put = { key = k.pending, value = json.encode {
      at = now, attempt = (rec.attempt or 0) + 1, reason = "lost" } } }
    ops[3] = run_end.last_op(P, job, id, rec)
  else
    run_end.final_ops(P, { job = job, id = id, task = rec.task and { key = rec.task } or nil,
                        events = events.targets(self, job) }, ops, rec)
  end
  local w = e:txn { compare = guard, success = ops }
  if not (w and w.succeeded) then return end
  self.metrics:orphan(job, rec.state)
  if decision == "rerun" then
    log("warn", "run lost with its node; an eligible node runs it again", fields)
  elseif decision == "abandon" then
    log("warn", "run abandoned: its node was lost", fields)
  else
    log("warn", "run killed: stopped on request while its node was lost", fields)
  end
end

-- Every run in flight whose marker is gone (one read, whatever the number
-- of runs), then those runs one by one; with ready (the backstop below),
-- only those ready(job/id) says. An active/ key whose run is no longer in
-- flight (left by a version that bound it to a lease) is freed.
local function scan_inflight(self, ready)
  local P, e = self.P, self.e
  if not runs.live(self) then return end -- a lost session leads nothing
  local r = e:txn { success = { { get = { key = keys.dir(P, "inflight"), prefix = true, keys_only = true } },
                                { get = { key = keys.dir(P, "running"), prefix = true, keys_only = true } },
                                { get = { key = keys.dir(P, "active"), prefix = true } } } }
  if not r then return end
  local marked, inflight = {}, {}
  for _, kv in ipairs(r.responses[2].kvs) do marked[keys.rest(P, "running", kv.key)] = true end
  for _, kv in ipairs(r.responses[1].kvs) do
    local rest = keys.rest(P, "inflight", kv.key)
    inflight[rest] = true
    local job, id = rest:match("^([^/]+)/(.+)$")
    if job and not marked[rest] and (not ready or ready(rest)) then check_inflight(self, job, id) end
  end
  if ready then return end
  for _, kv in ipairs(r.responses[3].kvs) do
    local job = keys.rest(P, "active", kv.key):match("^[^/]+")
    if job and not inflight[job .. "/" .. kv.value] then
      e:txn { compare = { { key = kv.key, target = "mod", op = "==", value = kv.mod_revision },
                          { key = keys.key(P, "inflight", job, kv.value), target = "create",
                            op = "==", value = 0 } },
              success = { { delete = { key = kv.key } } } }
    end
  end
end

-- The fire time of a job's newest run record (kv), or nil.
function M.last_fire(kv)
  local ok, rec = pcall(json.decode, kv and kv.value or "")
  if ok and type(rec) == "table" and type(rec.fire) == "number" then return rec.fire end
end

-- Sets where the misfire check of every job not yet checked starts (its
-- newest run record from before this node loaded it, else that moment; see
-- below), reading 64 jobs per transaction: a leader that takes over a
-- store of thousands of jobs makes tens of requests, not thousands. For a
-- sharded job it starts before the newest two instants
-- with a record, so a shard of theirs that no node ran (say, the previous
-- leader died before it checked them) is found too. A batch whose read
-- fails stays unseeded and is read again at the next check, so no outage
-- is forgotten.
-- names: the jobs to seed; returns the names whose read failed. Up to
-- SEED_INFLIGHT transactions are in flight at once (a term's first check
-- at 100,000 jobs is 1,563 of them, and etcd serves reads in parallel).
M.SEED_INFLIGHT = 4

local function seed_batch(self, batch, now, failed)
  local P, ops, jobs = self.P, {}, {}
  for k, name in ipairs(batch) do
    -- From the newest record from before this node loaded the job, or
    -- else from when it loaded it: an earlier leader may have died before
    -- it looked at what came since, and this node's own timer firing is
    -- no proof that a run started (it may not be eligible). But not
    -- before the oldest record kept: history pruning deleted the ones
    -- before it, and their instants are not misfires.
    local j = self.jobs[name]
    jobs[k] = j
    local base = keys.dir(P, "runs", name)
    local loaded = j and j.loaded_at or now
    local shards = j and j.spec.shards or 1
    ops[#ops + 1] = { get = { key = base, range_end = keys.key(P, "runs", name, util.instant(loaded)), sort = "key",
                              order = "desc", limit = shards > 1 and 2 * shards or 1 } }
    ops[#ops + 1] = { get = { key = base, prefix = true, sort = "key", order = "asc", limit = 1 } }
  end
  local r = self.e:txn { success = ops }
  if not r then
    for _, name in ipairs(batch) do failed[#failed + 1] = name end
    return
  end
  for k, name in ipairs(batch) do
    local kvs, from = r.responses[2 * k - 1].kvs, nil
    for _, kv in ipairs(kvs) do
      local f = M.last_fire(kv)
      if f and (not from or f < from) then from = f end
    end
    if from and #kvs > 1 then from = from - 0.001 end
    from = from or jobs[k] and jobs[k].loaded_at or now
    local oldest = r.responses[2 * k].kvs[1]
    local floor = oldest and M.last_fire(oldest)
    if floor and floor - 0.001 > from then from = floor - 0.001 end
    self.marks[name] = from
  end
end

local function seed_marks(self, names)
  local now, failed, inflight = self.now(), {}, 0
  for i = 1, #names, 64 do
    local batch = {}
    for k = i, math.min(i + 63, #names) do batch[#batch + 1] = names[k] end
    while inflight >= M.SEED_INFLIGHT do baton.sleep(0.002) end
    inflight = inflight + 1
    self.go(function()
      local ok, err = pcall(seed_batch, self, batch, now, failed)
      inflight = inflight - 1
      if not ok then
        for _, name in ipairs(batch) do failed[#failed + 1] = name end -- (next check)
        error(err, 0)
      end
    end)
  end
  while inflight > 0 do baton.sleep(0.002) end
  return failed
end

-- Up to where instants without a record count as missed: instants more
-- recent may still be being claimed (policy delays are a fraction of a
-- second per node), and an instant a node holds while it waits for a free
-- worker (its published oldest_waiting) is not missed either.
local function misfire_horizon(self, now)
  local nodes, oldest = 0, math.huge
  for _, n in pairs(self.nodes) do
    nodes = nodes + 1
    if type(n.oldest_waiting) == "number" and n.oldest_waiting < oldest then oldest = n.oldest_waiting end
  end
  return math.min(now - 2 - 0.5 * nodes, oldest - 0.001)
end

-- The instants of job to look for in this misfire check: from where the
-- last check ended (or the newest run record) up to the horizon.
-- Returns {name, j, from, cand} when there is something to look at.
local function misfire_plan(self, name, j, now, horizon)
  local spec = j.spec
  local from = self.marks[name]
  if not from or horizon <= from then return end
  local cand, t = {}, from
  while #cand < 1000 do
    t = spec.cron:next(t)
    if not t or t > horizon then break end
    cand[#cand + 1] = t
  end
  self.marks[name] = cand[#cand] or horizon
  if #cand == 0 then return end
  return { name = name, j = j, from = from, cand = cand }
end

-- The misfire queue: a min-heap, in three parallel arrays, of (the next
-- instant after a job's mark, job name, job revision), so that a check
-- looks only at the jobs with an instant up to its horizon, not at every
-- job: a node with 100,000 jobs due once a year does nothing for them
-- between their instants. A job enters it when the leader first sees its
-- version (M.job_changed, and every job when a term starts); an entry
-- whose job was replaced or removed is dropped when it comes up
-- (self.mf_queued[name] names the revision of the one live entry).
local function mf_push(q, due, name, rev)
  local i = q.n + 1
  q.n = i
  local d, nm, rv = q.due, q.name, q.rev
  while i > 1 do
    local p = (i - i % 2) / 2
    if d[p] <= due then break end
    d[i], nm[i], rv[i] = d[p], nm[p], rv[p]
    i = p
  end
  d[i], nm[i], rv[i] = due, name, rev
end

local function mf_pop(q)
  local d, nm, rv, n = q.due, q.name, q.rev, q.n
  local due, name, rev = d[1], nm[1], rv[1]
  local ld, ln, lr = d[n], nm[n], rv[n]
  d[n], nm[n], rv[n] = nil, nil, nil
  n = n - 1
  q.n = n
  if n > 0 then
    local i = 1
    while true do
      local c = 2 * i
      if c > n then break end
      if c < n and d[c + 1] < d[c] then c = c + 1 end
      if ld <= d[c] then break end
      d[i], nm[i], rv[i] = d[c], nm[c], rv[c]
      i = c
    end
    d[i], nm[i], rv[i] = ld, ln, lr
  end
  return due, name, rev
end

-- Queues job name (version j) at its next instant after its mark.
local function mf_queue(self, name, j)
  local rev = j.spec.revision or 0
  if self.mf_queued[name] == rev then return end
  local due = j.spec.cron:next(self.marks[name])
  if not due then self.mf_queued[name] = nil; return end
  self.mf_queued[name] = rev
  mf_push(self.mfq, due, name, rev)
end

-- A job version was loaded (node/store.lua, on the leader): the next misfire
-- check queues it (and seeds its mark first if it has none).
function M.job_changed(self, name)
  if self.leader and self.mf_todo then self.mf_todo[name] = true end
end

-- A new term: every job is looked at once.
local function mf_start(self)
  self.marks = self.marks or {}
  self.mfq = { n = 0, due = {}, name = {}, rev = {} }
  self.mf_queued, self.mf_todo = {}, {}
  for name in pairs(self.jobs) do self.mf_todo[name] = true end
end

-- Records instants of a job that nobody started, per its misfire policy.
-- The leader checks every job every few seconds, reading the run records of
-- 128 jobs per transaction, so an instant with no record is never missed
-- silently and a store of thousands of jobs costs tens of requests.
function M.misfires(self)
  if not runs.live(self) then return end
  if not self.mfq then mf_start(self) end
  local P, e = self.P, self.e
  -- Versions new since the last check: seed the marks they lack, queue them.
  local todo, seeds = self.mf_todo, {}
  self.mf_todo = {}
  for name in pairs(todo) do
    local j = self.jobs[name]
    if j and not j.spec.manual and not j.spec.queue then
      if self.marks[name] then mf_queue(self, name, j) else seeds[#seeds + 1] = name end
    end
  end
  for _, name in ipairs(seed_marks(self, seeds)) do self.mf_todo[name] = true end -- (read failed: next check)
  for _, name in ipairs(seeds) do
    local j = self.jobs[name]
    if j and self.marks[name] then mf_queue(self, name, j) end
  end
  local now = self.now()
  local plans, horizon, popped = {}, misfire_horizon(self, now), {}
  local q = self.mfq
  while q.n > 0 and q.due[1] <= horizon do
    local _, name, rev = mf_pop(q)
    if self.mf_queued[name] == rev then
      self.mf_queued[name] = nil
      local j = self.jobs[name]
      if j and j.spec.revision == rev then
        popped[#popped + 1] = name
        -- (a paused job's instants wait: it stays queued at the same one)
        if not j.paused then plans[#plans + 1] = misfire_plan(self, name, j, now, horizon) end
      end
    end
  end
  -- (jobs with instants since the last check may have new records to prune)
  self.prune_dirty = self.prune_dirty or {}
  for _, pl in ipairs(plans) do self.prune_dirty[pl.name] = true end
  for i = 1, #plans, 128 do
    local ops = {}
    for k = i, math.min(i + 127, #plans) do
      local pl = plans[k]
      ops[#ops + 1] = { get = { key = keys.key(P, "runs", pl.name, util.instant(pl.cand[1])),
                                range_end = keys.key(P, "runs", pl.name, util.instant(pl.cand[#pl.cand])) .. "\255",
                                keys_only = true } }
    end
    local r = e:txn { success = ops }
    for k = i, math.min(i + 127, #plans) do
      local pl = plans[k]
      if not r then
        self.marks[pl.name] = pl.from -- look again next time
      else
        local have = {}
        for _, kv in ipairs(r.responses[k - i + 1].kvs) do have[select(2, keys.split(P, "runs", kv.key))] = true end
        -- Each shard of an instant is a run of its own: one with no record
        -- is missed even when its siblings ran.
        local shards, missed = pl.j.spec.shards or 1, {}
        for _, f in ipairs(pl.cand) do
          local inst = util.instant(f)
          if shards > 1 then
            for sh = 1, shards do
              if not have[inst .. "/" .. sh] then missed[#missed + 1] = { fire = f, shard = sh } end
            end
          elseif not have[inst] then
            missed[#missed + 1] = { fire = f }
          end
        end
        M.settle_misfires(self, pl.name, pl.j, missed, now)
      end
    end
  end
  -- Each job looked at waits for its next instant after its new mark.
  for _, name in ipairs(popped) do
    local j = self.jobs[name]
    if j and self.marks[name] then mf_queue(self, name, j) end
  end
  -- Events no node claimed: the same misfire rules (baton.events).
  unrun.misfires(self, horizon, now)
end

-- What to do with the missed instants (or shards: {fire =, shard =}) of
-- one job, possibly none: run them (misfire = run_all; run_once runs the
-- newest missed instant, those of its shards that were missed), or record
-- each one skipped with the reason.
function M.settle_misfires(self, name, j, missed, now)
  local spec, P, e = j.spec, self.P, self.e
  -- An outage seen over several checks is one misfire: run_once runs one
  -- instant for all of it, not one per check.
  self.outage = self.outage or {}
  local continuing = self.outage[name]
  if #missed == 0 then self.outage[name] = nil; return end
  self.outage[name] = true
  local function in_time(f) return events.in_time(spec, f, now) end
  local newest
  for _, m in ipairs(missed) do
    if in_time(m.fire) and (not newest or m.fire > newest) then newest = m.fire end
  end
  local function runs_it(m)
    if not in_time(m.fire) then return false end
    if spec.misfire == "run_all" then return true end
    return spec.misfire == "run_once" and not continuing and m.fire == newest
  end
  local ran, skipped = 0, 0
  for _, m in ipairs(missed) do
    local id = util.instant(m.fire) .. (m.shard and "/" .. m.shard or "")
    local key = keys.key(P, "runs", name, id)
    -- (An instant handed out already, by a pending entry, is neither
    -- handed out again nor skipped: its claim is on the way.)
    local pk = keys.run(P, name, id).pending
    local absent = { { key = key, target = "create", op = "==", value = 0 },
                     { key = pk, target = "create", op = "==", value = 0 } }
    if runs_it(m) then
      -- Any eligible node runs it, as the job's policy orders them: a
      -- pending entry for its first attempt (node/triggers.lua, claim.take_pending).
      local r = e:txn { compare = absent, success = { { put = { key = pk, value = json.encode {
        at = now, attempt = 1, reason = "misfire", fire = m.fire } } } } }
      if r and r.succeeded then ran = ran + 1 end
    else
      local why = not in_time(m.fire) and events.late_reason(spec)
        or format("misfire: missed while no node ran it (misfire = %s)", spec.misfire)
      local run = { job = name, id = id, fire = m.fire, shard = m.shard and { index = m.shard } or nil,
                    events = events.targets(self, name) }
      local rec = record.skipped(run, self.name, now, why, { code_revision = spec.revision })
      local r = e:txn { compare = absent,
        success = events.add(P, run, rec, { { put = { key = key, value = record.encode(rec) } },
                                            run_end.last_op(P, name, id, rec) }) }
      if r and r.succeeded then skipped = skipped + 1; self.metrics:skip(name, why) end
    end
  end
  if ran + skipped > 0 then
    log("warn", "misfired instants", { job = name, node = self.name, missed = #missed,
                                       skipped = skipped, run = ran, misfire = spec.misfire })
  end
end

-- History pruning does not read every job's records every round: a store
-- of 100,000 jobs would cost 100,000 requests a minute. A round counts the
-- records (count_only, PRUNE_TXN jobs per transaction) of the jobs that may
-- have new ones (self.prune_dirty: jobs with scheduled instants since the
-- last round, from the misfire check; jobs run by hand, from node/store.lua's
-- trigger events; every queue and event job), plus a slice of all jobs in
-- turn, so that every job is counted at least once every PRUNE_SWEEP
-- rounds whatever made its records; only the jobs over `history` are
-- listed and pruned.
M.PRUNE_SWEEP, M.PRUNE_TXN = 30, 128

local function prune_job(self, name, count)
  local P, e, keep = self.P, self.e, self.history
  local dir = keys.dir(P, "runs", name)
  local r = e:get(dir, { prefix = true, keys_only = true, sort = "key", limit = count - keep })
  if not r then return end
  local n = math.min(#r.kvs, r.count - keep)
  local ops = {}
  for i = 1, n do
    local key = r.kvs[i].key
    -- (the id as it is, "" for a stray runs/<job>/ key: it counts towards
    -- the history and goes like any record)
    local id = keys.under(dir, key)
    ops[#ops + 1] = { txn = {
      compare = { { key = keys.key(P, "inflight", name, id), target = "create", op = "==", value = 0 } },
      success = { { delete = { key = key } },
                  { delete = { key = keys.output(P, name, id), prefix = true } } } } }
    if #ops == 100 or i == n then e:txn { success = ops }; ops = {} end
  end
end

local function prune(self)
  local P, e = self.P, self.e
  local want = self.prune_dirty or {}
  self.prune_dirty = {}
  for name in pairs(self.event_jobs or {}) do want[name] = true end
  for name, j in pairs(self.jobs) do
    if j.spec.queue then want[name] = true end
  end
  -- the sweep: a sorted list of all jobs, taken in PRUNE_SWEEP slices
  local sw = self.prune_sweep
  if not sw or sw.next > #sw.names then
    local names = {}
    for name in pairs(self.jobs) do names[#names + 1] = name end
    table.sort(names)
    sw = { names = names, next = 1, step = math.ceil(#names / M.PRUNE_SWEEP) }
    self.prune_sweep = sw
  end
  for i = sw.next, math.min(#sw.names, sw.next + sw.step - 1) do want[sw.names[i]] = true end
  sw.next = sw.next + math.max(sw.step, 1)
  local names = {}
  for name in pairs(want) do if self.jobs[name] then names[#names + 1] = name end end
  for i = 1, #names, M.PRUNE_TXN do
    local ops = {}
    for k = i, math.min(i + M.PRUNE_TXN - 1, #names) do
      ops[#ops + 1] = { get = { key = keys.dir(P, "runs", names[k]), prefix = true, count_only = true } }
    end
    local r = e:txn { success = ops }
    for k = i, math.min(i + M.PRUNE_TXN - 1, #names) do
      local name = names[k]
      if not r then
        self.prune_dirty[name] = true -- counted again next round
      elseif r.responses[k - i + 1].count > self.history then
        prune_job(self, name, r.responses[k - i + 1].count)
      end
    end
  end
end

-- Every node but the leader: a backstop for a leader that cannot act (cut
-- off from etcd, stopped, or kept alive by etcd's elections renewing its
-- lease). A run whose marker has been gone for BACKSTOP seconds, which the
-- leader would have handed out within a fraction of a second, is handled
-- by whichever node finds it (check_inflight's compares let only one do it).
M.BACKSTOP = 0.75

-- A node's registration went (its lease expired or was revoked): its runs
-- are lost now. Unless the leader has handed them out meanwhile (it goes
-- first: this waits LOST_DELAY), any node does; so a leader that died
-- with the node costs no extra wait.
M.LOST_DELAY = 0.3

function M.node_gone(self)
  if self.leader then return end
  baton.sleep(M.LOST_DELAY)
  if not self.leader then scan_inflight(self, function() return true end) end
end

function M.backstop(self)
  local since = {}
  while not self.stopping do
    baton.sleep(0.5)
    if not self.leader then
      local now, still = baton.monotime(), {}
      scan_inflight(self, function(rest)
        still[rest] = since[rest] or now
        return now - still[rest] >= M.BACKSTOP
      end)
      since = still
    else
      since = {}
    end
  end
end

-- Runs while this node leads (until its term ends or the node stops).
function M.run(self)
  local P, e = self.P, self.e
  -- self.leader is a fresh table for each term: the loops of an earlier
  -- term (its session lost, the node elected again) end.
  local term = self.leader
  local function leading() return self.leader == term and not self.stopping end
  -- A node can win the election before its first listing of the store is
  -- applied; the first misfire check needs the jobs, or it finds nothing
  -- and the next one, a period later, judges a later stretch of time.
  while not self.listed and leading() do baton.sleep(0.05) end
  mf_start(self)
  local t0, njobs = baton.monotime(), 0
  for _ in pairs(self.jobs) do njobs = njobs + 1 end
  -- (a term's first check reads every job's newest records: 64 jobs a
  -- request, a burst of garbage; from then on a check costs only the jobs
  -- that came due)
  gc.burst(self, M.misfires, self)
  local left = 0
  for _ in pairs(self.mf_todo or {}) do left = left + 1 end
  log("info", "first misfire check of the term done", { node = self.name, jobs = njobs,
    unseeded = left, seconds = math.floor((baton.monotime() - t0) * 1000) / 1000 })
  -- (with thousands of jobs its responses were tens of MB: hand them back,
  -- as after a listing)
  if njobs >= 1000 then baton._release_memory() end
  scan_inflight(self)
  -- Markers disappear when their node's lease expires: scan within 0.2 s
  -- of a deletion (one scan for any number of them; most are runs that
  -- ended). A watch that ends, compacted or failed, is made again; the
  -- periodic scan below covers the gap.
  local ended = false
  self.forever("leader.rescan", function()
    while leading() do
      baton.sleep(0.2)
      if ended then
        ended = false
        scan_inflight(self)
      end
    end
  end)
  self.forever("leader.running_watch", function()
    while leading() do
      local w = e:watch(keys.dir(P, "running"), { prefix = true, no_put = true })
      if not w then
        baton.sleep(1)
      else
        while leading() do
          local evs, _, code = w:next(1)
          if not evs and code ~= "ETIMEDOUT" then break end
          if evs and #evs > 0 then ended = true end
        end
        w:cancel()
      end
    end
  end)
  -- The periodic scan (every 0.5 s) finds what a lagging watch delivers
  -- late: a lost run is handed out within TTL + 1 s of its node's death.
  local n = 0
  while leading() do
    baton.sleep(0.5)
    n = n + 1
    scan_inflight(self)
    if n % 4 == 0 then M.misfires(self) end
    if n % 120 == 0 then prune(self) end
  end
end

return M
