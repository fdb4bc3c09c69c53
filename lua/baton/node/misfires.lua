-- The leader's misfire check (node/leader.lua runs it every 2 s): instants
-- (and shards of instants) of a job that no node started (the cluster was
-- down, or every claim failed) follow the job's misfire policy and
-- starting_deadline; every instant or shard not run is recorded as skipped
-- with the reason. It owns where each job's check stands (self.misfires.marks,
-- seeded from the job's newest run records), the queue of jobs by their
-- next instant after it (self.misfires.queue), and the outages seen (self.misfires.outage).
-- Events no node claimed: node/missed.lua, called from the check.
local baton = require "baton"
local runs = require "baton.node.runs"
local run_end = require "baton.run_end"
local keys = require "baton.keys"
local heap = require "baton.heap"
local record = require "baton.record"
local events = require "baton.events"
local unrun = require "baton.node.missed"
local util = require "baton.util"
local prune = require "baton.node.prune"

local json = baton.json

local format = string.format

local M = {}

local function log(level, msg, fields) baton.log[level](msg, fields) end

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
    self.misfires.marks[name] = from
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
  local from = self.misfires.marks[name]
  if not from or horizon <= from then return end
  local cand, t = {}, from
  while #cand < 1000 do
    t = spec.cron:next(t)
    if not t or t > horizon then break end
    cand[#cand + 1] = t
  end
  self.misfires.marks[name] = cand[#cand] or horizon
  if #cand == 0 then return end
  return { name = name, j = j, from = from, cand = cand }
end

-- The misfire queue: a min-heap (baton.heap) of {due = the next instant
-- after a job's mark, name = the job, rev = its revision}, so that a check
-- looks only at the jobs with an instant up to its horizon, not at every
-- job: a node with 100,000 jobs due once a year does nothing for them
-- between their instants. A job enters it when the leader first sees its
-- version (M.job_changed, and every job when a term starts); an entry
-- whose job was replaced or removed is dropped when it comes up
-- (self.misfires.queued[name] names the revision of the one live entry). It is
-- not the node's timetable (node/timetable.lua): that holds each job's
-- next instant from now, this one the next after the leader's mark, which
-- is mostly in the past, for one term.
local function due_first(a, b) return a.due < b.due end

-- Queues job name (version j) at its next instant after its mark.
local function mf_queue(self, name, j)
  local rev = j.spec.revision or 0
  if self.misfires.queued[name] == rev then return end
  local due = j.spec.cron:next(self.misfires.marks[name])
  if not due then self.misfires.queued[name] = nil; return end
  self.misfires.queued[name] = rev
  heap.push(self.misfires.queue, { due = due, name = name, rev = rev }, due_first)
end

-- A job version was loaded (node/store.lua, on the leader): the next misfire
-- check queues it (and seeds its mark first if it has none).
function M.job_changed(self, name)
  local m = self.misfires
  if self.leader and m.todo then m.todo[name] = true end
end

-- A new term (node/leader.lua): every job is looked at once. (The marks
-- and outages are kept from term to term; the queue is the term's.)
function M.start(self)
  local m = self.misfires
  m.queue, m.queued, m.todo = {}, {}, {}
  for name in pairs(self.jobs) do m.todo[name] = true end
end

-- How many jobs' marks are not seeded yet (their read failed: the next
-- check tries again).
function M.unseeded(self)
  local n = 0
  for _ in pairs(self.misfires.todo or {}) do n = n + 1 end
  return n
end

-- Versions new since the last check: seed the marks they lack, queue them.
local function queue_new(self)
  local todo, seeds = self.misfires.todo, {}
  self.misfires.todo = {}
  for name in pairs(todo) do
    local j = self.jobs[name]
    if j and not j.spec.manual and not j.spec.queue then
      if self.misfires.marks[name] then mf_queue(self, name, j) else seeds[#seeds + 1] = name end
    end
  end
  for _, name in ipairs(seed_marks(self, seeds)) do self.misfires.todo[name] = true end -- (read failed: next check)
  for _, name in ipairs(seeds) do
    local j = self.jobs[name]
    if j and self.misfires.marks[name] then mf_queue(self, name, j) end
  end
end

-- The jobs queued with an instant up to horizon, taken off the queue: the
-- plans of those to look at (misfire_plan), and the names of all of them.
local function take_due(self, now, horizon)
  local plans, popped = {}, {}
  local q = self.misfires.queue
  while q[1] and q[1].due <= horizon do
    local top = heap.pop(q, due_first)
    local name, rev = top.name, top.rev
    if self.misfires.queued[name] == rev then
      self.misfires.queued[name] = nil
      local j = self.jobs[name]
      if j and j.spec.revision == rev then
        popped[#popped + 1] = name
        -- (a paused job's instants wait: it stays queued at the same one)
        if not j.paused then plans[#plans + 1] = misfire_plan(self, name, j, now, horizon) end
      end
    end
  end
  return plans, popped
end

-- The instants (or shards: {fire =, shard =}) of plan pl without a record
-- among kvs (the keys of its records from the first candidate to the last).
local function missed_of(P, pl, kvs)
  local have = {}
  for _, kv in ipairs(kvs) do have[select(2, keys.split(P, "runs", kv.key))] = true end
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
  return missed
end

-- Reads the records of the plans' candidate instants, 128 jobs a
-- transaction, and settles what each job missed; a job whose read failed
-- is looked at again next time.
local function check_plans(self, plans, now)
  local P, e = self.P, self.e
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
        self.misfires.marks[pl.name] = pl.from -- look again next time
      else
        M.settle(self, pl.name, pl.j, missed_of(P, pl, r.responses[k - i + 1].kvs), now)
      end
    end
  end
end

-- Records instants of a job that nobody started, per its misfire policy.
-- The leader checks every job every few seconds, reading the run records of
-- 128 jobs per transaction, so an instant with no record is never missed
-- silently and a store of thousands of jobs costs tens of requests.
function M.check(self)
  if not runs.live(self) then return end
  if not self.misfires.queue then M.start(self) end
  queue_new(self)
  local now = self.now()
  local horizon = misfire_horizon(self, now)
  local plans, popped = take_due(self, now, horizon)
  -- (jobs with instants since the last check may have new records to prune)
  for _, pl in ipairs(plans) do prune.note(self, pl.name) end
  check_plans(self, plans, now)
  -- Each job looked at waits for its next instant after its new mark.
  for _, name in ipairs(popped) do
    local j = self.jobs[name]
    if j and self.misfires.marks[name] then mf_queue(self, name, j) end
  end
  -- Events no node claimed: the same misfire rules (baton.events).
  unrun.misfires(self, horizon, now)
end

-- What to do with the missed instants (or shards: {fire =, shard =}) of
-- one job, possibly none: run them (misfire = run_all; run_once runs the
-- newest missed instant, those of its shards that were missed), or record
-- each one skipped with the reason.
function M.settle(self, name, j, missed, now)
  local spec, P, e = j.spec, self.P, self.e
  -- An outage seen over several checks is one misfire: run_once runs one
  -- instant for all of it, not one per check.
  local continuing = self.misfires.outage[name]
  if #missed == 0 then self.misfires.outage[name] = nil; return end
  self.misfires.outage[name] = true
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

return M
