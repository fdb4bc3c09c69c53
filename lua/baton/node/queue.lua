-- Queue jobs (design.md section 7.3): a job with queue = "orders" runs once
-- per task under P queue/orders/. Every node follows the queue; a node takes
-- a task only when it has a free worker slot (--workers), after its
-- policy's delay, by the same claim transaction as an instant (plus: the
-- task must still exist). The task is deleted when its run ends for good;
-- a task whose node dies is re-run or abandoned by the leader like any run.
local baton = require "baton"
local runs = require "baton.node.runs"

local M = {}

local function log(level, msg, fields) baton.log[level](msg, fields) end

-- The job that consumes queue q, if one is loaded here.
local function consumer(self, q)
  for name, j in pairs(self.jobs) do
    if j.spec.queue == q and not j.paused then return name, j end
  end
end

local function take(self, q, key, value)
  local qs = self.queues[q]
  if qs.seen[key] then return end
  qs.seen[key] = true
  local name, j = consumer(self, q)
  if not name then qs.seen[key] = nil; return end
  local id = key:match("[^/]+$")
  local delay = self.claim_delay(name, j.spec, key)
  if delay == nil then qs.seen[key] = nil; return end
  if delay > 0 then baton.sleep(delay) end
  local run = { job = name, id = id, fire = baton.now(), spec = j.spec,
                task = { key = key, value = value } }
  runs.start(self, run, {
    force = true, -- tasks of one queue run in parallel by design
    extra_compare = { { key = key, target = "create", op = ">", value = 0 } },
  })
  qs.seen[key] = nil
end

-- Follows queue q (once per node): lists the tasks, then watches for more.
function M.follow(self, q)
  if self.queues[q] then return end
  local qs = { seen = {} }
  self.queues[q] = qs
  local P, e = self.P, self.e
  local prefix = P .. "queue/" .. q .. "/"
  self.forever(function()
    while not self.stopping do
      local r, err = e:get(prefix, { prefix = true, sort = "create" })
      if not r then
        log("warn", "listing a queue failed", { queue = q, error = err })
        baton.sleep(1)
      else
        for _, kv in ipairs(r.kvs) do self.go(take, self, q, kv.key, kv.value) end
        local w, werr = e:watch(prefix, { prefix = true, start_revision = r.revision + 1 })
        if not w then
          log("warn", "watching a queue failed", { queue = q, error = werr })
          baton.sleep(1)
        else
          qs.w = w
          while not self.stopping do
            local evs, _, code = w:next(5)
            if not evs and code ~= "ETIMEDOUT" then break end
            for _, ev in ipairs(evs or {}) do
              if ev.type == "put" then self.go(take, self, q, ev.kv.key, ev.kv.value) end
            end
          end
          qs.w = nil
          w:cancel()
        end
      end
    end
  end)
end

-- The node has a session again: every queue is listed again, so tasks it
-- saw but could not claim while it was fenced get another turn.
function M.resync(self)
  for _, qs in pairs(self.queues) do
    if qs.w then qs.w:cancel() end
  end
end

return M
