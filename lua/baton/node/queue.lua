-- Queue jobs (docs/guide.md, "5. Queues"): a job with queue = "orders" runs
-- once per task under P queue/orders/. Every node follows the queue; a node
-- takes a task only when it has a free worker slot (--workers), after its
-- policy's delay, by the same claim transaction as an instant (plus: the task
-- must still exist, as the node saw it). The task is deleted when its run
-- ends for good; a task whose node dies is re-run or abandoned by the leader
-- like any run.
--
-- One dispatcher per queue and node: the tasks the node knows (listed, then
-- watched) wait in a heap ordered by when they become ready (the time the
-- node saw them plus its policy's claim_delay: with the default policy, 0 on
-- the node ranked first for the task, 0.5 s, 1 s... on the others), then by
-- create revision, then by key (tasks of one push transaction share a
-- revision; their ids sort in push order). The dispatcher waits for a worker
-- slot (first come, first served with the node's other runs), takes the
-- first ready task and starts it (claim.start: the one claim path), and goes
-- on while slots are free, so that the claims of several free slots leave at
-- once (and can share a request). 10,000 queued tasks cost a heap entry
-- each, not a coroutine. A node thus works through the tasks it ranks first
-- for, in order, and takes over another node's only once they have waited
-- that node's grace: busy nodes rarely race for one task.
local baton = require "baton"
local keys = require "baton.keys"
local claim = require "baton.node.claim"
local decide = require "baton.node.decide"
local heap = require "baton.heap"
local etcd = require "baton.etcd"

local M = {}

local LIST_PAGE = 1000 -- tasks per range request when (re)listing a queue

local function log(level, msg, fields) baton.log[level](msg, fields) end

---------------------------------------------------------------------------
-- the heap of waiting tasks: entries {key=, value=, rev=, ready=}

local function before(a, b)
  if a.ready ~= b.ready then return a.ready < b.ready end
  if a.rev ~= b.rev then return a.rev < b.rev end
  return a.key < b.key
end

-- The first task still waiting (deleted ones leave the heap here).
local function first(qs)
  local h = qs.heap
  while h[1] and h[1].gone do heap.pop(h, before) end
  return h[1]
end

---------------------------------------------------------------------------

-- The job that consumes queue q: the one found last time while it still
-- does (and is not paused, unless paused_ok), else the first unpaused one,
-- else a paused one. (A node may hold 100,000 jobs: they are scanned only
-- when the one found last no longer fits, and at most once a second while
-- the store does not change.)
local function consumer(self, q, qs, paused_ok)
  local j = qs.job and self.jobs[qs.job]
  if j and j.spec.queue == q and (paused_ok or not j.paused) then return qs.job, j end
  local last = qs.scan
  if last and last.version == self.store_version and baton.monotime() - last.at < 1 then
    return last.name, last.name and self.jobs[last.name]
  end
  local found, paused
  for name, jj in pairs(self.jobs) do
    if jj.spec.queue == q then
      if not jj.paused then found = name; break end
      paused = paused or name
    end
  end
  found = found or paused
  qs.job = found
  qs.scan = { version = self.store_version, at = baton.monotime(), name = found }
  return found, found and self.jobs[found]
end

-- Wakes the dispatcher of qs (it re-reads the heap and the pool).
local function wake(qs) qs.cond:signal() end

-- Waits until woken, or secs seconds at most (nil: no limit). One alarm
-- coroutine serves every wait that ends no earlier than it.
local function wait(qs, secs)
  if secs then
    local due = baton.monotime() + secs
    if not qs.alarm or qs.alarm > due + 0.002 then
      qs.alarm = due
      baton.go(function()
        baton.sleep(secs)
        if qs.alarm == due then qs.alarm = nil end
        wake(qs)
      end)
    end
  end
  qs.cond:wait()
end

-- A task the node saw at now (listed, or a put event creating it): into
-- the heap, unless known already or the node's policy says it never takes
-- it. (Tasks seen together share now, so that they keep their create order
-- among those of equal delay.) gen marks the listing that saw it.
local function add(self, q, qs, key, value, rev, now, gen)
  local t = qs.tasks[key]
  if t then
    t.gen = gen
    if t.rev == rev then t.value = value; return end
    t.gone = true -- deleted and created again meanwhile: a new task
  end
  if qs.running[key] then return end
  local name, j = consumer(self, q, qs, true) -- (a paused job's policy decides too)
  local delay = 0
  if name then
    delay = decide.claim_delay(self, name, j.spec, key)
    if delay == nil then return end
  end
  t = { key = key, value = value, rev = rev, ready = now + delay, gen = gen, later = delay > 0 }
  qs.tasks[key] = t
  heap.push(qs.heap, t, before)
  wake(qs)
end

local function remove(qs, key)
  local t = qs.tasks[key]
  if t then
    t.gone = true
    qs.tasks[key] = nil
  end
end

-- One task, taken by the dispatcher: claims and runs it (claim.start takes
-- the worker slot itself: the dispatcher waited for one to be free and let
-- it go just before).
local function run_task(self, qs, name, j, t)
  qs.handing = false
  wake(qs)
  local run = { job = name, id = t.key:match("[^/]+$"), fire = baton.now(), spec = j.spec,
                task = { key = t.key, value = t.value } }
  claim.start(self, run, {
    force = true, -- tasks of one queue run in parallel by design
    turn = t.later and "later" or "first", -- (the claims board: node/board.lua)
    -- the task is still there, as this node saw it
    extra_compare = { { key = t.key, target = "create", op = "==", value = t.rev } },
  })
  qs.running[t.key] = nil
end

-- The dispatcher of queue q: while the node runs, hands each ready task
-- to a free worker slot, in heap order.
local function dispatch(self, q, qs)
  while not self.stopping do
    local t = first(qs)
    local name, j = consumer(self, q, qs)
    local now = baton.monotime()
    if not t then
      wait(qs)
    elseif not name or j.paused then
      wait(qs, 1) -- (a job resumed or loaded again is seen within a second)
    elseif t.ready > now then
      wait(qs, t.ready - now)
    else
      -- Wait for a free slot, then let it go to run_task, which starts at
      -- once (claim.start takes a free slot without waiting); go on when it
      -- has, so that this loop never holds more than one task in hand.
      if not self.pool:with_slot(nil, function()
        t = first(qs)
        name, j = consumer(self, q, qs)
      end) then
        return
      end
      if t and name and not j.paused and t.ready <= baton.monotime() and not self.stopping then
        heap.pop(qs.heap, before)
        qs.tasks[t.key] = nil
        qs.running[t.key] = true
        qs.handing = true
        self.go(run_task, self, qs, name, j, t)
        while qs.handing and not self.stopping do qs.cond:wait() end
      end
    end
  end
end

-- Lists queue q's tasks at one revision, a page at a time; returns that
-- revision, or nil and the error. Waiting tasks that are no longer there
-- (deleted while the node did not watch) leave the heap.
local function list(self, q, qs, prefix)
  local e = self.e
  local from, rev = prefix, nil
  local stop = etcd.prefix_end(prefix)
  local now = baton.monotime()
  qs.gen = (qs.gen or 0) + 1
  while true do
    local r, err = e:get(from, { range_end = stop, sort = "key", order = "asc", limit = LIST_PAGE,
                                 revision = rev })
    if not r then return nil, err end
    rev = rev or r.revision
    for _, kv in ipairs(r.kvs) do add(self, q, qs, kv.key, kv.value, kv.create_revision, now, qs.gen) end
    if #r.kvs < LIST_PAGE then break end
    from = r.kvs[#r.kvs].key .. "\0"
  end
  for key, t in pairs(qs.tasks) do
    if t.gen ~= qs.gen then remove(qs, key) end
  end
  return rev
end

-- Follows queue q (once per node): lists the tasks, then watches for more
-- (and for deletions: a task deleted before its claim is not run).
function M.follow(self, q)
  if self.queues[q] then return end
  local qs = { tasks = {}, heap = {}, running = {}, cond = baton._cond() }
  self.queues[q] = qs
  local e = self.e
  local prefix = keys.dir(self.P, "queue", q)
  self.forever("queue.dispatch", dispatch, self, q, qs)
  self.forever("queue.follow", function()
    while not self.stopping do
      local rev, err = list(self, q, qs, prefix)
      if not rev then
        log("warn", "listing a queue failed", { queue = q, error = err })
        baton.sleep(1)
      else
        local w, werr = e:watch(prefix, { prefix = true, start_revision = rev + 1 })
        if not w then
          log("warn", "watching a queue failed", { queue = q, error = werr })
          baton.sleep(1)
        else
          qs.w = w
          while not self.stopping do
            local evs, _, code = w:next(5)
            if not evs and code ~= "ETIMEDOUT" then break end
            local now = baton.monotime()
            for _, ev in ipairs(evs or {}) do
              local kv = ev.kv
              if ev.type == "put" then
                -- (an update of a task this node no longer waits for: it
                -- was claimed, here or elsewhere)
                if kv.version == 1 or qs.tasks[kv.key] then
                  add(self, q, qs, kv.key, kv.value, kv.create_revision, now, qs.gen)
                end
              else
                remove(qs, kv.key)
              end
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
