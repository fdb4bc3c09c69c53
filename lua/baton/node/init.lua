-- The conductor of `baton node` (docs/architecture.md): its wiring.
--
-- One process per machine: a session lease, registration at P nodes/<name>,
-- a campaign in the cluster election (node/session.lua), the job store
-- (list, then watch from the listed revision + 1; re-list and apply the
-- difference after a compaction: node/store.lua), one timetable of every
-- job's next instant (node/timetable.lua), and claims: an instant runs only
-- on the node whose transaction creates P runs/<job>/<instant>
-- (node/triggers.lua, node/decide.lua, node/claim.lua). Runs execute in a
-- pool of worker processes (`baton worker`, node/pool.lua), so nothing a
-- job does can stall the conductor's keepalives, watches and timers.
--
-- This file builds the node table (every field: node/state.lua), declares
-- the node's long-lived tasks (TASKS) and starts them, and stops the node.
-- Housekeeping by the elected leader: node/leader.lua (its term), with
-- node/orphans.lua (runs lost with their node; every node's backstop),
-- node/misfires.lua and node/prune.lua (history). Queue jobs: node/queue.lua.
local baton = require "baton"
local stored = require "baton.stored"
local util = require "baton.util"
local batch = require "baton.node.batch"
local board = require "baton.node.board"
local orphans = require "baton.node.orphans"
local pool = require "baton.node.pool"
local clock = require "baton.node.clock"
local http = require "baton.node.http"
local metrics = require "baton.node.metrics"
local state = require "baton.node.state"
local session = require "baton.node.session"
local store = require "baton.node.store"
local timetable = require "baton.node.timetable"
local decide = require "baton.node.decide"
local gc = require "baton.node.gc"
local json = baton.json

local M = {}

M.WORKERS = 16 -- runs at once on a node unless --workers says otherwise

local function log(level, msg, fields)
  baton.log[level](msg, fields)
end

-- Every long-lived task of the node: { name, what it does, and either the
-- function that M.run starts (with the node) once the node has joined, in
-- this order, or who starts it (self.forever(name, fn, ...), which refuses
-- a name not in this list). Each one that fails is logged with its
-- traceback and started again a second later (guarded, below).
M.TASKS = {
  { "clock.sample", "measures this node's clock against the leader's", clock.sample },
  { "clock.answer", "answers the other nodes' clock pings while this node leads", clock.answer },
  { "clock.follow", "updates the clock correction and republishes it", clock.follow },
  { "fence", "waits for the session's loss; stops the runs, rejoins", session.fence },
  { "backstop", "takes over orphaned runs the leader leaves unhandled", orphans.backstop },
  { "publish", "keeps the published node info (running runs) fresh", session.refresh },
  { "store", "lists and follows the job store, policies, nodes, triggers", store.follow },
  { "board.post", "posts this node's claims on the claims board", board.post },
  { "board.watch", "learns the other nodes' claims from the board", board.watch },
  { "timetable", "fires the instants and later turns that are due", timetable.run },
  { "gc", "tunes the collector's pause every second", gc.tune },
  { "pool.trim", "stops workers idle for a minute", "pool.new (node/pool.lua)" },
  { "leader", "the leader's housekeeping, for one term", "session.join, once elected" },
  { "leader.rescan", "scans inflight runs after a marker is deleted", "leader.run, each term" },
  { "leader.running_watch", "watches for deleted running/ markers", "leader.run, each term" },
  { "queue.dispatch", "claims the tasks of one queue", "queue.follow, once a queue" },
  { "queue.follow", "lists and watches one queue's tasks", "queue.follow, once a queue" },
  { "view.follow", "mirrors the statuses or last runs for the API", "view:start (node/view.lua)" },
}
local DECLARED_TASKS = {}
for _, t in ipairs(M.TASKS) do DECLARED_TASKS[t[1]] = t end

-- The node's own coroutines: one that fails (a bug of baton's, nothing a
-- job does: jobs run in workers) is logged with its traceback, and one that
-- serves the node for its whole life (a task) is started again a second
-- later, instead of ending the process and leaving its workers' runs to be
-- ended by their containment processes.
local function guarded(self, fn, task)
  return function(...)
    while true do
      local ok, err = xpcall(fn, debug.traceback, ...)
      if ok then return end
      log("error", task and "node task failed; starting it again" or "node task failed",
          { node = self.name, task = task, error = err })
      if not task or self.stopping then return end
      baton.sleep(1)
      if self.stopping then return end
    end
  end
end

local function forever(self, name, fn, ...)
  if not DECLARED_TASKS[name] then
    error("node task '" .. tostring(name) .. "' is not declared in node/init.lua's TASKS", 2)
  end
  return baton.go(guarded(self, fn, name), ...)
end

-- SIGINT/SIGTERM/SIGHUP: stop taking work, ask the runs to stop (SIGTERM to
-- every process of theirs, ctx:cancelled()) and give them the grace
-- period; then end what is left, wait until their ends are recorded (a run
-- the node had to interrupt is recorded so, and runs again elsewhere as its
-- on_node_loss says, now that its processes are gone), and close the
-- session.
local function stop(self, sig)
  self.stopping = true
  self.leader = false
  log("info", "stopping: waiting for runs to end", { node = self.name, signal = sig,
                                                    running = self.nrunning })
  self.pool:close()
  for w in pairs(self.pool.busy) do self.pool:interrupt(w) end
  local deadline = baton.monotime() + self.grace
  while self.nrunning > 0 and baton.monotime() < deadline do baton.sleep(0.1) end
  self.pool:stop_all()
  deadline = baton.monotime() + self.grace
  while self.executing > 0 and baton.monotime() < deadline do baton.sleep(0.05) end
  http.stop(self) -- (/readyz said 503 "stopping" until now)
  stored.close()
  self.s:close()
  log("info", "node stopped", { node = self.name })
end

-- What the node takes from its options beyond state.new's: trust, secrets,
-- the workers' user and memory.
local function configure(self, opts)
  self.max_skew = opts.max_skew or clock.MAX_SKEW
  -- --trust: only signed jobs and policies load (sign.lua); what the node
  -- publishes of it, for baton nodes: {signed = false} runs unsigned code.
  self.trust = opts.trust
  stored.configure { trust = opts.trust, prefix = self.P }
  -- --secrets-dir: where the conductor reads a run's secrets, which go to
  -- its worker with the run (node/secrets.lua); --run-as {name, uid, gid,
  -- home}: the user workers run as (node/pool.lua)
  self.secrets_dir = opts.secrets_dir
  self.run_as = opts.run_as
  -- --run-memory: the memory limit of a run whose job sets none (limits.lua)
  self.run_memory = opts.run_memory
  self.trust_info = opts.trust and { signed = true, keys = json.array(opts.trust.ids) } or { signed = false }
end

function M.run(opts)
  collectgarbage("setpause", gc.GC_PAUSE)
  local self = state.new {
    name = opts.name, ttl = opts.ttl, labels = opts.labels, prefix = util.prefix(), etcd = baton.etcd,
    grace = opts.grace, history = opts.history, workers = opts.workers or M.WORKERS,
    pid = tonumber((io.open("/proc/self/stat"):read("*l")):match("^%d+")),
    metrics = metrics.for_node(), -- (GET /metrics: metrics.render(self))
  }
  -- (reads are checked only under the test suite: an __index on the node
  -- table would be a function call for every read of a field that is nil,
  -- self.leader on every node that does not lead, on the claim path)
  local strict = (os.getenv("BATON_NODE_STRICT") or "") ~= ""
  state.strict(self, strict, strict)
  self.e:observe(metrics.etcd_observer(self))
  -- Claims and ends of runs go to etcd together (node/batch.lua).
  self.batch = batch.new(self.e, function(n) self.metrics:batch_sent(n) end)
  -- What the other nodes claimed lately (node/board.lua).
  self.board = board.new(self)
  self.now = baton.now -- corrected from clock.start on (node/clock.lua)
  self.go = function(fn, ...) return baton.go(guarded(self, fn, nil), ...) end
  self.forever = function(name, fn, ...) return forever(self, name, fn, ...) end
  configure(self, opts)
  -- --http: its files are read before the node joins, and it listens once
  -- it has (node/http.lua); a failure of either ends the node at once.
  local web
  if opts.http then
    local herr
    web, herr = http.prepare(opts.http)
    if not web then return nil, "node " .. self.name .. ": " .. herr end
  end
  -- Stored code is described in a sandbox (stored.lua): a machine that
  -- cannot run one would refuse every job, so the node says so now.
  local sok, serr = stored.probe()
  if not sok then return nil, "node " .. self.name .. ": " .. serr end
  local ok, err = session.join(self)
  if not ok then return nil, "node " .. self.name .. ": " .. err end
  if web then
    local srv, herr = http.start(self, web)
    if not srv then
      self.s:close()
      return nil, "node " .. self.name .. ": --http: " .. herr
    end
    log("info", "http listening", { node = self.name, addr = srv.addr, tls = web.cert and true or false,
                                    writable = web.token and true or false })
  end
  clock.start(self)
  self.pool = pool.new(self)
  decide.set_node(self, self.name, { name = self.name, labels = self.labels })
  log("info", "node started", { node = self.name, lease = self.s.lease, ttl = self.ttl,
                                prefix = self.P, trust = self.trust and table.concat(self.trust.ids, ",")
                                  or "unsigned code allowed", secrets_dir = self.secrets_dir })
  for _, t in ipairs(M.TASKS) do
    if type(t[3]) == "function" then forever(self, t[1], t[3], self) end
  end

  stop(self, baton.signal { "SIGINT", "SIGTERM", "SIGHUP" })
  return true
end

return M
