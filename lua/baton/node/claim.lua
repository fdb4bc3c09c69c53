-- Claiming runs: every attempt, whatever its kind (an instant, a shard of
-- one, a manual trigger, a queue task, or the next attempt of any of them),
-- is claimed by M.claim: one etcd transaction (M.claim_txn builds it) that
-- creates (or, for a next attempt, takes over) the record, compares the
-- job's concurrency (active/) and the node's own session, and creates the
-- lease-bound marker (the keys: node/runs.lua). A run nobody may run is
-- recorded skipped instead (M.skip_txn). M.start takes a worker slot and
-- claims; M.take_pending claims a run's next attempt; a claimed attempt is
-- executed by node/execute.lua. A node never claims on a session it has
-- declared lost (runs.session).
local baton = require "baton"
local events = require "baton.events"
local missed = require "baton.node.missed"
local keys = require "baton.keys"
local record = require "baton.record"
local run_end = require "baton.run_end"
local runs = require "baton.node.runs"
local execute = require "baton.node.execute"
local cancel = require "baton.node.cancel"
local json = baton.json

local format = string.format

local M = {}

local function log(level, msg, fields) baton.log[level](msg, fields) end

-- Whether the claim with this token is in etcd (after a request whose
-- result was lost): the marker it created says so. Asks until etcd answers
-- or the session is lost. Returns the marker's kv, false, or nil.
local function claimed_by(self, s, k, token)
  while runs.session(self, s) do
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

-- The transaction that records attempt 0 of run skipped for why, at now:
-- only while this node's session s holds, and only if nobody claimed (or
-- recorded) the instant meanwhile; opts.compare adds conditions (the
-- concurrency skip: a run of the job holds active/), opts.extra_compare
-- and opts.skip_ops a trigger's or a queue's own. Its failure branch says
-- whether active/ and the run key are there. Pure: returns the
-- transaction and its register write (node/batch.lua).
function M.skip_txn(self, run, s, why, now, opts)
  opts = opts or {}
  local P, spec = self.P, run.spec
  local k = keys.run(P, run.job, run.id)
  local j = self.jobs and self.jobs[run.job]
  local cmp = { { key = k.run, target = "create", op = "==", value = 0 }, runs.alive_compare(self, s) }
  for _, c in ipairs(opts.compare or {}) do cmp[#cmp + 1] = c end
  for _, c in ipairs(opts.extra_compare or {}) do cmp[#cmp + 1] = c end
  local skipped = record.skipped(run, self.name, now, why,
                                 { code_revision = spec.revision, params = runs.run_params(spec, run.params) })
  local last = run_end.last_op(P, run.job, run.id, skipped, j and j.last_known)
  local ops = { { put = { key = k.run, value = record.encode(skipped) } }, last }
  for _, op in ipairs(opts.skip_ops or {}) do ops[#ops + 1] = op end
  events.add(P, { job = run.job, id = run.id, events = events.targets(self, run.job) }, skipped, ops)
  return { compare = cmp, success = ops, failure = what_is_there(k) },
         run_end.last_register(P, run.job, run.id, last)
end

-- The skip of attempt 1 of run, at now, because another run of its
-- (forbid or replace) job holds active/: M.skip_txn, on the conditions of
-- the claim it replaces (opts, as for M.claim).
function M.concurrency_skip_txn(self, run, s, now, opts)
  local k = keys.run(self.P, run.job, run.id)
  return M.skip_txn(self, run, s, "concurrency " .. run.spec.concurrency .. ": a previous run is still running", now,
                    { compare = { { key = k.active, target = "create", op = ">", value = 0 } },
                      extra_compare = opts.extra_compare, skip_ops = opts.skip_ops })
end

-- The number of the attempt that follows prev (the record of the attempt
-- before: opts.prev.rec), or 1.
function M.next_attempt(prev)
  return prev and (prev.rec.attempt or 0) + 1 or 1
end

-- The token of the claim this node makes now (self.claims counts them):
-- the marker holds it, so that a claim whose answer was lost is read back
-- (claimed_by).
local function next_token(self, s)
  self.claims = (self.claims or 0) + 1
  return format("%s:%s:%d", self.name, s.lease, self.claims)
end

-- The transaction that claims attempt run.attempt (M.next_attempt) of run
-- on this node's session s at now, with token (see M.claim for what it
-- compares). Pure: a function of the node's name, prefix and loaded jobs
-- (whether a job's last/ is known to be there), of s's lease, the run,
-- opts and now. Returns the transaction, the claimed record (not fenced
-- yet), the register write of P last/<job> (node/batch.lua), and whether a
-- failed claim may be recorded skipped (M.concurrency_skip_txn): attempt 1
-- of a run that takes its job's active/, whose failure branch then says
-- which keys were there (what_is_there).
function M.claim_txn(self, run, opts, now, s, token)
  local P, spec, prev = self.P, run.spec, opts.prev
  local k = keys.run(P, run.job, run.id)
  local holds = runs.exclusive(spec) and not opts.force and (not prev or prev.rec.exclusive == true)
  local rec = record.claimed(run, self.name, now, {
    code_revision = spec.revision, token = token, exclusive = holds, prev = prev and prev.rec,
    params = runs.run_params(spec, run.params) })
  local marker = json.encode({ node = self.name, attempt = run.attempt, token = token }, runs.TEXT)
  local compare = { runs.alive_compare(self, s) }
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
  local last = run_end.last_op(P, run.job, run.id, rec, j and j.last_known)
  success[#success + 1] = last
  for _, c in ipairs(opts.extra_compare or {}) do compare[#compare + 1] = c end
  for _, op in ipairs(opts.extra_success or {}) do success[#success + 1] = op end
  local failure, skippable = {}, false
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
      -- transaction of its own, made (M.concurrency_skip_txn) and sent only
      -- when the claim failed on active/ (the failure branch says which
      -- keys were there): as the claim's failure branch, the skip record
      -- went to etcd with every claim of such a job, and every byte of a
      -- request costs etcd.
      failure, skippable = what_is_there(k), true
    end
  end
  return { compare = compare, success = success, failure = failure }, rec,
         run_end.last_register(P, run.job, run.id, last), skippable
end

-- What a failed claim (or skip) x found (what_is_there, its failure
-- branch): whether a run of the job holds active/, and whether this
-- instant is claimed; nil when it says nothing (etcd failed, or no such
-- branch).
local function found(x)
  local rs = x and x.responses or {}
  local a, c = rs[1], rs[2]
  if a and c then return (a.count or 0) > 0, (c.count or 0) > 0 end
end

-- Sends claim transaction txn (with its register write reg) of run on
-- session s: with the claims of other runs due now (node/batch.lua), up to
-- three times while the answer is lost, reading back meanwhile whether the
-- claim with token was applied (claimed_by). Returns etcd's answer, or nil.
local function send_claim(self, run, s, txn, reg, token)
  local k = keys.run(self.P, run.job, run.id)
  for try = 1, 3 do
    local r, err = self.batch:txn(txn, nil, reg)
    if r then return r end
    -- The answer was lost: the transaction may have been applied.
    local kv = claimed_by(self, s, k, token)
    if kv then return { succeeded = true, revision = kv.create_revision } end
    if kv == nil then return nil end -- the session was lost meanwhile
    log("warn", "claim failed; trying again", runs.fields_of(self, run, { error = err, try = try }))
    baton.sleep(0.2 * try)
    if not runs.session(self, s) then return nil end
  end
end

-- The claim of run failed (answer r): when the failure branch says another
-- run of the job holds active/ and nobody has this instant, records
-- attempt 1 skipped (M.concurrency_skip_txn). Returns "skipped", "again"
-- when the run that held active/ has ended meanwhile (claim again), or nil
-- (the instant is another node's, or the leader's misfire check's).
local function skip_for_concurrency(self, run, s, opts, r)
  local held, claimed = found(r)
  if not held or claimed or not runs.live(self, s) then return nil end
  local st, sreg = M.concurrency_skip_txn(self, run, s, self.now(), opts)
  local sr = self.batch:txn(st, nil, sreg)
  if sr and sr.succeeded then
    posted(self, run, opts)
    log("info", "run skipped: a previous run is still running", runs.fields_of(self, run))
    self.metrics:skip(run.job, "concurrency")
    return "skipped"
  end
  held, claimed = found(sr)
  if held == false and not claimed then return "again" end
end

-- What this node makes of r, etcd's answer to its claim of run (record
-- rec) on session s (j: the job as it was loaded when the claim was built).
-- Returns the fence and the fenced record when the claim is this node's
-- to run, or nil: lost to another node, or applied on a session the node
-- has given up meanwhile.
function M.claimed(self, run, opts, s, rec, r, j)
  if not r.succeeded then
    if runs.live(self, s) then self.metrics:claim_lost(run.job) end -- (another node has it)
    return nil
  end
  if not runs.session(self, s) then
    -- Applied while etcd still held the lease, answered after the node
    -- declared the session lost: not run here. The claim goes with the
    -- lease, and the leader hands the run to another node.
    log("info", "claim came back after the session was lost; not run", runs.fields_of(self, run))
    return nil
  end
  posted(self, run, opts)
  rec = record.fenced(rec, r.revision)
  run.session = s
  run.last_known = true
  if j and self.jobs[run.job] == j then j.last_known = true end
  local c = r.responses and r.responses[1].kvs[1]
  if c then run.cancel = cancel.cancel_request(c.value) end
  return r.revision, rec
end

-- Claims the next attempt of run on this node, in one transaction
-- (M.claim_txn):
--   * attempt 1 (opts.prev absent): the record must not exist;
--   * a next attempt (opts.prev = {rec =, mod =, pending =}): the record
--     must be at mod revision prev.mod and its pending/ entry at mod
--     revision prev.pending (it is deleted here);
--   * forbid/replace (unless opts.force): active/ must be free, or already
--     held by this run; the claim takes it. When it is held by another
--     run, attempt 1 is recorded skipped instead (skip_for_concurrency). A
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
  local s = runs.session(self)
  if not s then return nil end
  local token = next_token(self, s)
  run.attempt = M.next_attempt(opts.prev)
  local j = self.jobs and self.jobs[run.job]
  local txn, rec, reg, skippable = M.claim_txn(self, run, opts, self.now(), s, token)
  local r
  for _ = 1, 2 do
    r = send_claim(self, run, s, txn, reg, token)
    if not r then return nil end
    if r.succeeded or not skippable then break end
    local skip = skip_for_concurrency(self, run, s, opts, r)
    if skip == "skipped" then return nil end
    if skip ~= "again" then break end
  end
  return M.claimed(self, run, opts, s, rec, r, j)
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
    local s = runs.session(self)
    if s then
      local t, reg = M.skip_txn(self, run, s, events.late_reason(run.spec), self.now())
      local r = self.batch:txn(t, nil, reg)
      if r and r.succeeded then
        posted(self, run, opts)
        log("info", "run skipped: not started within its starting_deadline", runs.fields_of(self, run))
        self.metrics:skip(run.job, "deadline")
      end
    end
    return false
  end
  local fence, rec = M.claim(self, run, opts)
  if not fence then return false end
  execute.execute(self, run, fence, rec, release)
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
    log("error", "starting a run failed", runs.fields_of(self, run, { error = took }))
    return false
  end
  return took and ran or false
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
    local req, unfit = runs.read_request(pkv.value, "pending entry")
    if type(req.fire) ~= "number" then return false end
    if type(req.event) == "table" and j.paused then
      missed.skip(self, job, j, id, pmod, req, "paused: the event came while the job was paused")
      return false
    end
    local run = { job = job, id = id, fire = req.fire, spec = j.spec, shard = runs.shard_of(j.spec, id),
                  event = type(req.event) == "table" and req.event or nil, unfit = unfit }
    if j.spec.concurrency == "replace" and not cancel.replace_active(self, run) then return false end
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
                shard = runs.shard_of(j.spec, id), event = type(rec.event) == "table" and rec.event or nil,
                events = events.targets(self, job) }
  if rec.task then
    -- (the task's key is that of the run, id as it is in etcd: the
    -- record's copy has U+FFFD for a NUL byte, runs.unfit)
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