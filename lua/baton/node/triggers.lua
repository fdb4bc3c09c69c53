-- What makes this node try to claim a run: an instant of a job came due
-- (instant_due, called by node/timetable.lua), a manual run was requested
-- (on_trigger: P trigger/<job>/<id>), a run waits for its next attempt
-- (on_pending: P pending/<job>/<id>). Each asks the job's policy for this
-- node's turn (node/decide.lua) and claims through node/claim.lua.
--
-- A later turn at an instant (the policy's claim_delay > 0) waits on the
-- turns heap (self.triggers.turns, owned here), which the timetable's loop serves
-- (turns_due): no coroutine or timer of its own until it is due and still
-- open.
--
-- A trigger or pending entry of a job this node has not loaded (yet) is
-- parked (self.triggers.parked) until the job loads (job_loaded) or the
-- key is deleted (unpark): the watches of jobs/ and trigger/ are apart,
-- and a job's load waits on the sandbox, so `baton job put && baton job
-- run` can bring the request first.
local baton = require "baton"
local keys = require "baton.keys"
local util = require "baton.util"
local heap = require "baton.heap"
local policymod = require "baton.policy"
local runs = require "baton.node.runs"
local claim = require "baton.node.claim"
local cancel = require "baton.node.cancel"
local decide = require "baton.node.decide"
local json = baton.json

local M = {}

local SHARD_GRACE = 1 -- seconds before a node takes a shard assigned to another
-- Requests parked at most (each is a key in etcd, which a listing brings
-- again: past this many, one is dropped with a warning rather than kept).
M.MAX_PARKED = 10000

-- Keeps a request (handle: M.on_trigger or M.on_pending, and its key,
-- value and mod revision) of job name, which this node has not loaded,
-- until it does.
local function park(self, name, handle, key, value, mod)
  local t = self.triggers
  local byjob = t.parked[name]
  if not (byjob and byjob[key]) then
    if t.nparked >= M.MAX_PARKED then
      baton.log.warn("a request for a job this node has not loaded was dropped: too many wait",
        { job = name, key = key, parked = t.nparked })
      return
    end
    t.nparked = t.nparked + 1
  end
  byjob = byjob or {}
  t.parked[name] = byjob
  byjob[key] = { handle = handle, value = value, mod = mod }
end

-- A trigger or pending key was deleted (claimed, or removed): nothing
-- waits for it any more.
function M.unpark(self, key)
  local t = self.triggers
  local name = keys.split(self.P, "trigger", key) or keys.split(self.P, "pending", key)
  local byjob = name and t.parked[name]
  if not (byjob and byjob[key]) then return end
  byjob[key], t.nparked = nil, t.nparked - 1
  if next(byjob) == nil then t.parked[name] = nil end
end

-- Job name was loaded (node/store.lua): the requests that came before it
-- are taken now.
function M.job_loaded(self, name)
  local t = self.triggers
  local byjob = t.parked[name]
  if not byjob then return end
  t.parked[name] = nil
  for key, p in pairs(byjob) do
    t.nparked = t.nparked - 1
    self.go(p.handle, self, key, p.value, p.mod)
  end
end

-- Claims one instant of job version j (id: util.instant(fire)) on this
-- node's turn ("first" or "later", see claim.start).
local function claim_instant(self, name, j, fire, id, turn)
  if self.stopping or self.jobs[name] ~= j or j.paused then return end
  local run = { job = name, id = id, fire = fire, spec = j.spec }
  if j.spec.concurrency == "replace" and not cancel.replace_active(self, run) then return end
  claim.start(self, run, { turn = turn })
end

-- A sharded job's instant is one run per shard: this node claims the
-- shards the policy assigned to it at once, and the others after
-- SHARD_GRACE (the claim fails harmlessly for a shard another node has).
local function claim_shards(self, name, j, fire)
  local spec, instant = j.spec, util.instant(fire)
  local a = decide.assign_shards(self, name, spec, fire)
  for i = 1, spec.shards do
    self.go(function()
      if a[i] ~= self.name then baton.sleep(SHARD_GRACE) end
      if self.stopping or self.jobs[name] ~= j or j.paused then return end
      claim.start(self, { job = name, id = instant .. "/" .. i, fire = fire, spec = spec,
                         shard = runs.shard_of(spec, instant .. "/" .. i) },
                 { turn = a[i] == self.name and "first" or "later" })
    end)
  end
end

-- The turns heap (self.triggers.turns): this node's later turns at instants (the
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
  local delay = decide.claim_delay(self, name, j.spec, fire)
  if delay == nil then return end
  if (j.spec.shards or 1) > 1 then
    self.go(claim_shards, self, name, j, fire)
  elseif delay == 0 then
    self.go(claim_instant, self, name, j, fire, util.instant(fire), "first")
  else
    heap.push(self.triggers.turns, { at = asked + delay, name = name, j = j, fire = fire }, due_first)
  end
end

-- One instant came due on this node (called by the timetable, without
-- waiting). A stored policy decides in the node's sandbox (stored.lua):
-- that answer is waited for in a coroutine of its own.
function M.instant_due(self, name, j, fire)
  if policymod.is_remote(decide.policy_for(self, j.spec)) then
    self.go(take_turn, self, name, j, fire, baton.monotime())
  else
    take_turn(self, name, j, fire, baton.monotime())
  end
end

-- Claims the turns of the heap that are due; returns the seconds until
-- the next one (nil: none waits).
function M.turns_due(self)
  local t, mono = self.triggers.turns, baton.monotime()
  while t[1] and t[1].at <= mono do
    local ev = heap.pop(t, due_first)
    local id = util.instant(ev.fire)
    if self.jobs[ev.name] == ev.j and not ev.j.paused and not claim.taken_elsewhere(self, ev.name, id) then
      self.go(claim_instant, self, ev.name, ev.j, ev.fire, id, "later")
    end
  end
  return t[1] and t[1].at - mono
end

-- A manual run was requested (P trigger/<job>/<id>, see baton job run).
function M.on_trigger(self, key, value, mod)
  local name = keys.split(self.P, "trigger", key)
  if not name then return end
  local j = self.jobs[name]
  if not j then return park(self, name, M.on_trigger, key, value, mod) end
  -- (one that spells a NUL byte is recorded failed, not run: runs.unfit)
  local req, unfit = runs.read_request(value, "trigger")
  local at = tonumber(req.at) or self.now()
  local delay = decide.claim_delay(self, name, j.spec, key)
  if delay == nil then return end
  if delay > 0 then baton.sleep(delay) end
  if self.stopping then return end
  local run = { job = name, id = util.manual_id(at), fire = at, spec = j.spec, manual = true,
                params = type(req.params) == "table" and req.params or nil, unfit = unfit }
  claim.start(self, run, {
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
-- (claim.take_pending) succeeds on one node only. While etcd
-- cannot be asked, it tries again; it stops once the entry is gone or
-- changed (mod is its mod revision: a new entry gets a turn of its own).
function M.on_pending(self, key, value, mod)
  local job, id = keys.split(self.P, "pending", key)
  if not job or self.triggers.pending_seen[key] == mod then return end
  if not self.jobs[job] then return park(self, job, M.on_pending, key, value, mod) end
  local ok, req = pcall(json.decode, value)
  if not ok or type(req) ~= "table" then req = {} end
  self.triggers.pending_seen[key] = mod
  local function go()
    local j = self.jobs[job]
    if not j then return end
    local wait = (tonumber(req.at) or 0) - self.now()
    if wait > 0 then baton.sleep(wait) end
    local delay = decide.claim_delay(self, job, j.spec, key .. "#" .. tostring(req.attempt))
    if delay == nil then return end
    if delay > 0 then baton.sleep(delay) end
    while not self.stopping and self.jobs[job] do
      local ran, why = claim.take_pending(self, job, self.jobs[job], id, mod)
      if ran ~= nil or why ~= "again" then return end
      baton.sleep(1)
    end
  end
  go()
  if self.triggers.pending_seen[key] == mod then self.triggers.pending_seen[key] = nil end
end

return M
