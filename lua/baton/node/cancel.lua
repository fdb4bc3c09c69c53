-- Cancelling runs: the cancel/ key's value (a replace, baton job kill),
-- stopping a local run it names, and replace's stop of the run that holds
-- its job's active/ key (keys: node/runs.lua).
local baton = require "baton"
local events = require "baton.events"
local keys = require "baton.keys"
local record = require "baton.record"
local run_end = require "baton.run_end"
local runs = require "baton.node.runs"
local json = baton.json

local TEXT = runs.TEXT

local M = {}

local function log(level, msg, fields) baton.log[level](msg, fields) end

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

-- Stops a local run on request (a cancel/ key with value, see
-- node/runs.lua: replace, baton job kill): cooperative stop, then every
-- process of the run is killed after the grace period; it is recorded
-- killed and not run again. A request for a run this node does not have at hand is
-- kept a few seconds: it may be this node's run, claimed in a transaction
-- whose answer has not been read yet (node/execute.lua, attempt, looks).
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

return M
