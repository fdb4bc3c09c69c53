-- Writing a run's end: the transaction that records how an attempt ended
-- (M.write), fenced by the attempt's claim, with the operations that end a
-- run for good (M.final_ops) and the write of P last/<job>, the job's
-- newest run (M.last_op). The node writes every end (node/execute.lua, and
-- the leader's housekeeping, node/orphans.lua and node/misfires.lua); a worker writes a success itself when its
-- node is slow to (worker/main.lua, handoff): both use this module, so
-- that of the two writes at most one applies.
local baton = require "baton"
local events = require "baton.events"
local keys = require "baton.keys"
local record = require "baton.record"
local json = baton.json

local M = {}

-- Records, markers and pending entries hold text read from etcd (a task's
-- key, a run id from a raw key) or said by a job (its error): a NUL byte
-- there is written as U+FFFD (baton.json's nul = "replace"), so that the
-- write cannot fail and the run is recorded.
local TEXT = { nul = "replace" }

-- The operation that makes P last/<job> say record rec of run id, unless it
-- names a newer run: one etcd comparison of values. A value starts with
-- {"run":"<id>" and goes on with '"', so comparing it with
-- {"run":"<id># (one more than '"') is comparing the ids as etcd orders
-- keys: the stored id is the same or older exactly when the value is less.
-- A missing key compares false on its value, hence the inner create == 0;
-- when the caller knows the key is there (exists: see node/claim.lua, claim_txn), that
-- branch, which carries the value a second time, is left out.
function M.last_op(P, job, id, rec, exists)
  local key, value = keys.key(P, "last", job), record.last_value(id, rec)
  local put = { { put = { key = key, value = value } } }
  return { txn = {
    compare = { { key = key, target = "value", op = "<", value = '{"run":' .. json.encode(id, TEXT):sub(1, -2) .. "#" } },
    success = put,
    failure = not exists and { { txn = { compare = { { key = key, target = "create", op = "==", value = 0 } },
                                         success = put } } } or nil,
  } }
end

-- The operations that end a run for good: the record (already in ops[1]),
-- and away with its inflight entry, cancel request, the job's active/ if
-- the run holds it, its pending entry and its queue task; and, given the
-- final record rec, P last/<job> (M.last_op) and the events it makes for
-- the event jobs in run.events (baton.events: written with the record, so
-- both or neither).
function M.final_ops(P, run, ops, rec)
  local k = keys.run(P, run.job, run.id)
  ops[#ops + 1] = { delete = { key = k.inflight } }
  ops[#ops + 1] = { delete = { key = k.cancel } }
  ops[#ops + 1] = { delete = { key = k.pending } }
  if not rec or rec.exclusive then
    -- (only a run claimed as exclusive can hold it; the others leave the
    -- key out, so that the ends of one job's runs do not all touch it, and
    -- can share a request: node/batch.lua)
    ops[#ops + 1] = { txn = {
      compare = { { key = k.active, target = "value", op = "==", value = run.id } },
      success = { { delete = { key = k.active } } } } }
  end
  if run.task then ops[#ops + 1] = { delete = { key = run.task.key } } end
  local last
  if rec then
    last = M.last_op(P, run.job, run.id, rec, run.last_known)
    ops[#ops + 1] = last
    events.add(P, run, rec, ops)
  end
  return ops, last
end

-- The register write (node/batch.lua) that op, a M.last_op of run id of
-- job, is: P last/<job> only ever moves to a newer run.
function M.last_register(P, job, id, op)
  return op and { op = op, key = keys.key(P, "last", job), order = id }
end

-- Writes rec, the record of an attempt that ended (record.ended), guarded
-- by its fence (and, with opts.alive, by the node's session, and
-- opts.linger: see node/batch.lua): final, or waiting for its next attempt
-- (rec.state "retrying" with rec.retry_at: a pending/ entry that any
-- eligible node claims at that time; its reason is opts.attempt_state, how
-- the attempt ended, or "failed"). Returns the record's new mod revision,
-- or nil if the claim was lost. e is an etcd client or the node's write
-- batcher (node/batch.lua). The worker calls it too, to record a success
-- itself: then a run that completed is recorded even if its node froze
-- right after.
function M.write(e, P, run, fence, rec, opts)
  opts = opts or {}
  local k = keys.run(P, run.job, run.id)
  local ops = { { put = { key = k.run, value = record.encode(rec) } }, { delete = { key = k.marker } } }
  local last
  if rec.retry_at then
    ops[#ops + 1] = { put = { key = k.pending, value = json.encode({
      at = rec.retry_at, attempt = rec.attempt + 1, reason = opts.attempt_state or "failed" }, TEXT) } }
    last = M.last_op(P, run.job, run.id, rec, run.last_known)
    ops[#ops + 1] = last
  else
    last = select(2, M.final_ops(P, run, ops, rec))
  end
  local reg = M.last_register(P, run.job, run.id, last)
  local compare = { { key = k.marker, target = "create", op = "==", value = fence } }
  if opts.alive then compare[2] = opts.alive end
  for _ = 1, 5 do
    if opts.still_ok and not opts.still_ok() then return nil end
    local r = e:txn({ compare = compare, success = ops }, opts.linger, reg)
    if r and r.succeeded then return r.revision end
    -- The answer was lost, or the compare failed: see whether this end is
    -- written (the marker of this fence is gone and the record's last
    -- attempt is this one). It may be by the other party that can write a
    -- success: the node, or its worker when the node was slow to (see
    -- worker/main.lua, handoff).
    local g = e:txn { success = { { get = { key = k.marker } }, { get = { key = k.run } } } }
    if g then
      local m, kv = g.responses[1].kvs[1], g.responses[2].kvs[1]
      if m and m.create_revision == fence then
        if r then return nil end -- the compare failed on something else (opts.alive)
        -- not applied: write again
      else
        local ok, now = pcall(json.decode, kv and kv.value or "")
        local latest = ok and type(now) == "table" and type(now.attempts) == "table"
          and now.attempts[#now.attempts]
        return latest and latest.fence == fence and kv.mod_revision or nil
      end
    end
    baton.sleep(0.3)
  end
end

return M
