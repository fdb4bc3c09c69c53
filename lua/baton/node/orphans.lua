-- Runs lost with their node: an inflight/ entry without its lease-bound
-- running/ marker belongs to a node that is gone. The job's policy
-- (on_orphan) or on_node_loss decides: rerun it (the record waits for its
-- next attempt with a pending/ entry, which any eligible node claims,
-- chosen by the job's policy as for a first run), or record it abandoned.
-- A run that a replace asked to stop is recorded killed.
--
-- The leader scans for them (node/leader.lua: after a marker is deleted,
-- and every 0.5 s); every other node does too, as a backstop for a leader
-- that cannot act (M.backstop, M.node_gone). The check's compares let only
-- one node hand a run out.
local baton = require "baton"
local runs = require "baton.node.runs"
local cancel = require "baton.node.cancel"
local run_end = require "baton.run_end"
local keys = require "baton.keys"
local record = require "baton.record"
local events = require "baton.events"
local decide = require "baton.node.decide"

local json = baton.json

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
function M.scan(self, ready)
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
  if not self.leader then M.scan(self, function() return true end) end
end

function M.backstop(self)
  local since = {}
  while not self.stopping do
    baton.sleep(0.5)
    if not self.leader then
      local now, still = baton.monotime(), {}
      M.scan(self, function(rest)
        still[rest] = since[rest] or now
        return now - still[rest] >= M.BACKSTOP
      end)
      since = still
    else
      since = {}
    end
  end
end

return M
