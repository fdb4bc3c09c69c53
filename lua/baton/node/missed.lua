-- Events nobody runs, recorded skipped by the node (a paused event job's
-- events) and by the leader (events missed past their job's misfire rule):
-- the record, and the skipped events it makes in turn, in one write.
local baton = require "baton"
local events = require "baton.events"
local keys = require "baton.keys"
local record = require "baton.record"
local run_end = require "baton.run_end"

local json = baton.json
local format, sort = string.format, table.sort

local M = {}

-- Records pending event id of event job name (entry at mod revision pmod,
-- decoded req) skipped with reason why, in one transaction that holds only
-- while no record exists and the entry is unchanged; the skip makes the
-- event job's own skipped events. self is the node. Returns whether it was
-- written.
function M.skip(self, name, j, id, pmod, req, why)
  local P, now = self.P, self.now()
  local run_key, pending_key = keys.key(P, "runs", name, id), keys.key(P, "pending", name, id)
  local run = { job = name, id = id, fire = req.fire, event = req.event, events = events.targets(self, name) }
  local rec = record.skipped(run, self.name, now, why, { code_revision = j.spec.revision })
  local ops = { { put = { key = run_key, value = record.encode(rec) } },
                { delete = { key = pending_key } },
                run_end.last_op(P, name, id, rec) }
  events.add(P, run, rec, ops)
  local r = self.e:txn {
    compare = { { key = run_key, target = "create", op = "==", value = 0 },
                { key = pending_key, target = "mod", op = "==", value = pmod } },
    success = ops }
  if r and r.succeeded and self.metrics then self.metrics:skip(name, why) end
  return r and r.succeeded or false
end

-- The leader's misfire check for events (called by misfires.check, with its
-- horizon: entries older than it were claimable and nobody claimed them).
-- Per event job: a paused one records its events skipped; past
-- starting_deadline, skipped; misfire = "skip" skips them, "run_once" keeps
-- the newest for a node to run when one can and skips the others,
-- "run_all" keeps them all. Reads the pending entries of 128 event jobs per
-- transaction.
function M.misfires(self, horizon, now)
  local P, e = self.P, self.e
  local names = {}
  for name in pairs(self.event_jobs or {}) do names[#names + 1] = name end
  sort(names)
  for i = 1, #names, 128 do
    local ops = {}
    for k = i, math.min(i + 127, #names) do
      ops[#ops + 1] = { get = { key = keys.dir(P, "pending", names[k]), prefix = true } }
    end
    local r = e:txn { success = ops }
    if not r then return end
    for k = i, math.min(i + 127, #names) do
      local name = names[k]
      local j = self.jobs[name]
      local missed = {}
      for _, kv in ipairs(j and r.responses[k - i + 1].kvs or {}) do
        local ok, req = pcall(json.decode, kv.value)
        local _, id = keys.split(P, "pending", kv.key)
        -- (a pending/<job>/ key with no id is no request baton wrote)
        if id and ok and type(req) == "table" and req.reason == "event" and type(req.fire) == "number"
           and (j.paused or req.fire <= horizon) then
          missed[#missed + 1] = { id = id, mod = kv.mod_revision, req = req }
        end
      end
      if #missed > 0 then M.settle(self, name, j, missed, now) end
    end
  end
end

-- What to do with the missed events of one event job (see M.misfires).
function M.settle(self, name, j, missed, now)
  local spec = j.spec
  sort(missed, function(a, b) return a.req.fire < b.req.fire or (a.req.fire == b.req.fire and a.id < b.id) end)
  local function in_time(m) return events.in_time(spec, m.req.fire, now) end
  local newest
  for _, m in ipairs(missed) do if in_time(m) then newest = m end end
  local skipped = 0
  for _, m in ipairs(missed) do
    local why
    if j.paused then
      why = "paused: the event came while the job was paused"
    elseif not in_time(m) then
      why = events.late_reason(spec)
    elseif spec.misfire == "skip" or (spec.misfire == "run_once" and m ~= newest) then
      why = format("misfire: missed while no node ran it (misfire = %s)", spec.misfire)
    end
    if why and M.skip(self, name, j, m.id, m.mod, m.req, why) then skipped = skipped + 1 end
  end
  if skipped > 0 then
    baton.log.warn("missed events", { job = name, node = self.name, missed = #missed,
                                      skipped = skipped, misfire = spec.misfire })
  end
end

return M
