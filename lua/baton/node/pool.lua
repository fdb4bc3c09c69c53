-- The worker pool of a node (docs/architecture.md, "The pieces"): long-lived
-- `baton worker` processes, each running one run at a time, reached over a
-- channel (baton.spawn{..., channel = true}; the messages are
-- worker/protocol.lua's).
--
-- --workers N caps how many runs the node executes at once (scheduled,
-- manual and queue runs alike): a run takes a slot before it is claimed, so
-- a saturated node leaves instants to the others. Workers start on demand,
-- are reused, and an idle one is stopped after IDLE_STOP seconds (one is
-- kept). A worker whose run timed out, was cancelled, or left coroutines or
-- child processes behind is not reused: it is stopped or retires, and the
-- next run gets a fresh one.
--
-- Each worker runs below its containment process (runtime/core/contain.h): the
-- process the pool spawns and holds (w.p). Stopping a worker (SIGUSR1 to
-- it) ends every process of its run, and the process exits only once they
-- are gone, so Pool:stop returning means the run is over. It also reads
-- the node's fence board, so runs end when the node's lease may have
-- expired even if the node itself is stopped or hung.
local baton = require "baton"
local limits = require "baton.limits"
local secrets = require "baton.node.secrets"
local protocol = require "baton.worker.protocol"

local IDLE_STOP = 60

local function pack(...) return { n = select("#", ...), ... } end

local Pool = {}
Pool.__index = Pool

local M = {}

function M.new(node)
  local self = setmetatable({ node = node, max = node.max_workers, slots = 0, idle = {},
                              busy = {}, queued = {}, freed = baton._cond() }, Pool)
  -- Runs' memory limits (limits.lua): held by the kernel in a cgroup per
  -- worker when this node may manage its own cgroup (it moves into a leaf
  -- of it now, before any worker starts), else watched by each worker's
  -- containment process.
  local cerr
  self.cgroup, cerr = baton._cgroup_prepare()
  baton.log.info("run memory limits", { node = node.name, held_by = self.cgroup and "cgroup" or "watching",
                                        cgroup = self.cgroup, why = cerr })
  -- (node.forever: a task of the node, started again if it fails; a bare
  -- table stands for the node in tests)
  local function trim()
    while not node.stopping do
      baton.sleep(IDLE_STOP / 4)
      self:trim(IDLE_STOP)
    end
  end
  if node.forever then node.forever("pool.trim", trim) else baton.go(trim) end
  return self
end

-- Takes a run slot, waiting (first come, first served) while all are
-- taken. Returns false once the pool is stopped.
-- fire (optional) is the unclaimed scheduled instant the run is for: while
-- it waits, the node publishes the oldest such instant, so the leader does
-- not take it for a misfire. Runs already claimed (retries, takeovers) pass
-- none: they cannot misfire, and must not hold back the leader's check.
function Pool:acquire(fire)
  if self.closed then return false end
  if self.slots >= self.max or next(self.queued) then
    local token = {}
    self.queued[token] = fire or false
    self.freed:wait()
    self.queued[token] = nil
  else
    self.slots = self.slots + 1
  end
  return not self.closed
end

-- The oldest instant a run waits for a slot for, or nil.
function Pool:oldest_waiting()
  local oldest
  for _, f in pairs(self.queued) do
    if f and (not oldest or f < oldest) then oldest = f end
  end
  return oldest
end

-- Frees a slot: the longest waiter takes it over.
function Pool:release()
  if self.closed or not self.freed:signal() then self.slots = self.slots - 1 end
end

-- Calls fn(release, ...) holding a run slot (waiting for one as acquire
-- does, fire as there), and gives the slot back however fn ends: when it
-- returns or raises, unless it gave it back earlier by calling release()
-- (only the first call counts). This is the one place that holds a slot
-- across code that may fail: the slot cannot leak. Returns false (fn is
-- not called) once the pool is closed, else true and what fn returned; an
-- error fn raised is raised again, with its traceback, once the slot is back.
function Pool:with_slot(fire, fn, ...)
  if not self:acquire(fire) then return false end
  local held = true
  local function release()
    if held then held = false; self:release() end
  end
  local r = pack(xpcall(fn, debug.traceback, release, ...))
  release()
  if not r[1] then error(r[2], 0) end
  return true, unpack(r, 2, r.n)
end

-- The node is stopping: every waiter gives up, idle workers exit.
function Pool:close()
  self.closed = true
  self.freed:broadcast()
  self:trim(0)
end

local function env(node)
  local cfg = baton.config or {}
  return {
    BATON_ENDPOINTS = cfg.endpoints, BATON_PREFIX = node.P, BATON_USER = cfg.user,
    BATON_PASSWORD = cfg.password, BATON_CACERT = cfg.cacert, BATON_CERT = cfg.cert,
    BATON_KEY = cfg.key, BATON_NODE_PID = tostring(node.pid),
    BATON_FENCE_FD = node.fence_fd and tostring(node.fence_fd) or false,
    -- (a run's secrets come with the run, read by the conductor: where
    -- they are kept is not the worker's to know, node/secrets.lua)
    BATON_SECRETS_DIR = false,
    -- (--run-as: the user's own)
    HOME = node.run_as and node.run_as.home or nil, USER = node.run_as and node.run_as.name or nil,
    LOGNAME = node.run_as and node.run_as.name or nil,
    -- (what the worker verifies a job's source with: stored.lua)
    BATON_TRUST = node.trust and require("baton.sign").trust_text(node.trust) or false,
  }
end

-- An idle worker, or a new one, for run (pool.busy[w] is the run while it
-- has the worker). A worker holds one memory limit (w.memory, set when it
-- starts: limits.lua) and runs only the runs that have that limit.
function Pool:get(run)
  if self.node.fenced then return nil, "ELOST: the node's session is lost" end
  local w
  local memory = limits.of(run.spec, self.node)
  for i = #self.idle, 1, -1 do
    local c = self.idle[i]
    if c.p:done() then
      table.remove(self.idle, i)
      c.ch:close() -- it died while idle
    elseif c.memory == memory then
      w = table.remove(self.idle, i)
      break
    end
  end
  if not w then
    -- A worker runs the node's own code, whatever happened on disk since
    -- the node started (a package upgrade, a make install, an edit of
    -- lua/): the binary is /proc/self/exe (baton._self_exe), the node's
    -- executable even once its file is replaced or deleted (a new file
    -- cannot be written into a running executable: ETXTBSY), and the Lua
    -- library is the snapshot
    -- the node read when it started, handed over as a sealed memfd
    -- (BATON_LIB_FD, runtime/core/lib.h). argv0 keeps `ps` saying "baton".
    -- (Should the node's runtime shut down with workers left, each gets
    -- SIGUSR1: its containment process ends the run's processes, where
    -- SIGKILL would leave them behind.)
    local fd, ferr = baton._lib_fd()
    if not fd then return nil, ferr end
    local e = env(self.node)
    e.BATON_LIB_FD = tostring(fd)
    e.BATON_RUN_MEMORY = memory and ("%.0f"):format(memory) or false
    e.BATON_CGROUP = memory and self.cgroup or false
    local ra = self.node.run_as
    local p, err = baton.spawn { baton._self_exe, "worker", argv0 = baton._exe or "baton",
                                 env = e, channel = true, stop_signal = "SIGUSR1",
                                 uid = ra and ra.uid, gid = ra and ra.gid }
    if not p then return nil, err end
    -- (known: the revision of each job whose source it was sent)
    w = { p = p, ch = p.channel, known = {}, memory = memory }
  end
  self.busy[w] = run
  return w
end

-- Gives w back after a run; a worker that must not be reused is stopped
-- (and waited for: see Pool:stop).
function Pool:put(w, reuse)
  if reuse and not w.restricted and not w.p:done() and not self.node.stopping and not self.node.fenced then
    w.since = baton.monotime()
    self.idle[#self.idle + 1] = w
  else
    self:stop(w)
  end
  self.busy[w] = nil
end

-- Asks w's run to stop: SIGTERM reaches the worker (ctx:cancelled()) and
-- every process of the run.
function Pool:interrupt(w)
  if not w.p:done() then w.p:kill("SIGTERM") end
end

-- Ends w and every process of its run, and returns once they are gone (its
-- containment process has exited). Says so in the log while that takes
-- long (a process stuck in the kernel cannot be killed until it returns).
function Pool:stop(w)
  w.ch:close()
  if w.p:done() then return end
  w.p:kill("SIGUSR1")
  local waited = 0
  while not w.p:wait(10) do
    waited = waited + 10
    baton.log.warn("a run's processes have not ended yet", { pid = w.p.pid, waited = waited })
  end
end

-- Ends every worker and every process of their runs, idle or busy, and
-- returns once all are gone (the node fences itself, or stops).
function Pool:stop_all()
  local left = 0
  local all = {}
  for _, w in ipairs(self.idle) do all[#all + 1] = w end
  self.idle = {}
  for w in pairs(self.busy) do all[#all + 1] = w end
  local done, go = baton._cond(), self.node.go or baton.go
  for _, w in ipairs(all) do
    left = left + 1
    go(function()
      self:stop(w)
      left = left - 1
      done:signal()
    end)
  end
  while left > 0 do done:wait() end
end

-- Stops the workers idle for longer than secs (all of them with secs = 0),
-- keeping the most recently used one unless secs is 0.
function Pool:trim(secs)
  local now, keep = baton.monotime(), {}
  for i, w in ipairs(self.idle) do
    if secs > 0 and (i == #self.idle or now - w.since < secs) then
      keep[#keep + 1] = w
    else
      w.ch:close() -- the worker exits at the end of its channel
    end
  end
  self.idle = keep
end

-- Answers the worker's request req (a txn message, worker/protocol.lua)
-- for a fenced transaction of its run: made by run.txn(ops) when the
-- request is for run, else (a request of another attempt, or after the run
-- is given up) refused with ELOST; one whose ops are not puts of strings is
-- refused with EINVAL.
local function answer_txn(self, w, req, run)
  local go = self.node.go or baton.go
  go(function()
    local a
    if not req.ops then
      a = { error = req.why, code = "EINVAL" }
    elseif run and run.txn and req.run == run.key then
      a = run.txn(req.ops)
    else
      a = { error = "ELOST: the run is no longer this worker's", code = "ELOST" }
    end
    w.ch:send(protocol.txn_done(req.n, a))
  end)
end

-- The worker's reply to the run, within secs; its requests meanwhile are
-- answered (answer_txn). nil and "timeout", or nil and the process's exit
-- ({code, signal}) when the worker ended first.
local function reply_of(self, w, secs, run)
  local deadline = baton.monotime() + secs
  while true do
    local line, rerr, code = w.ch:recv(math.max(deadline - baton.monotime(), 0.001))
    if not line then
      if code == "ETIMEDOUT" then return nil, "timeout" end
      return nil, w.p:wait(5) or { code = -1, error = rerr }
    end
    local m, err = protocol.decode_for_node(line)
    if not m then
      return { ok = false, error = "the worker sent a malformed reply: " .. err, retire = true }
    elseif m.kind == "txn" then
      answer_txn(self, w, m, run)
    else
      return m
    end
  end
end

-- Runs msg (the run for the worker) on w. Returns the worker's reply, or
-- nil and the process's exit ({code, signal}) if the worker ended first, or
-- nil and "timeout" if timeout seconds passed (the worker still runs), or
-- nil and {unsendable = why} if msg cannot be sent (it was not).
-- run (optional): {key = job/id/attempt, txn = function(ops)} makes the
-- run's fenced writes (ctx:put_fenced: worker/main.lua) while it runs; txn
-- answers {succeeded = bool} or {error =, code =}.
function Pool:call(w, msg, timeout, run)
  -- The run's secrets (node/secrets.lua); a worker given a restricted one
  -- serves no other run.
  local r = self.busy[w]
  local s = r and secrets.for_run(self.node, r.job, r.spec)
  if s then
    msg.secrets, msg.secrets_error = s.secrets, s.secrets_error
    w.restricted = w.restricted or s.restricted
  end
  -- (a message JSON cannot hold, a function or NaN from the job's file: nil
  -- and {unsendable = why}, the worker told nothing)
  local text, why = protocol.run(msg)
  if not text then return nil, { unsendable = why } end
  local ok, err = w.ch:send(text)
  if not ok then return nil, w.p:wait(5) or { code = -1, error = err } end
  return reply_of(self, w, timeout, run)
end

-- After a timeout: the result the worker sends within secs, if any (its
-- requests meanwhile are answered through run, as in Pool:call).
function Pool:late_reply(w, secs, run)
  return (reply_of(self, w, secs, run))
end

return M
