-- The node table: every field of the conductor's `self`, the module that
-- owns it (sets it; others may read it) and what it holds. A field not
-- declared here is a bug: the node's table is strict (M.strict), and a
-- unit test (tests/lua/node-state.lua) checks the declarations against the
-- table state.new builds and the fields the node's modules name.
--
-- Fields that hold nothing yet are declared all the same (nil until their
-- owner sets them). The top level is what modules share: the node's
-- configuration, its parts, its session, the loaded jobs and policies,
-- the registered nodes and the counts of runs. A module's private state
-- is a sub-table of its own (self.store, self.triggers, self.decisions,
-- self.misfires, self.prune, self.health, self.gc, self.claims,
-- self.cancels, self.queues, self.timetable), its fields listed here.
local baton = require "baton"

local M = {}

-- { field, owning module (under lua/baton/), what it holds }
M.FIELDS = {
  -- configuration (node/init.lua, from baton node's options)
  { "name", "node/init", "this node's name (--name)" },
  { "ttl", "node/init", "the session's TTL in seconds (--ttl)" },
  { "labels", "node/init", "{key = value} labels (--labels), given to policies" },
  { "P", "node/init", "the key prefix (--prefix)" },
  { "e", "node/init", "the etcd client" },
  { "started", "node/init", "when the node started (epoch seconds)" },
  { "pid", "node/init", "the conductor's pid, published" },
  { "grace", "node/init", "seconds a stopping run is given before it is killed" },
  { "history", "node/init", "run records kept per job (the leader prunes the rest)" },
  { "max_workers", "node/init", "runs at once (--workers)" },
  { "max_skew", "node/init", "clock correction beyond which the node is flagged (--max-skew)" },
  { "trust", "node/init", "--trust: the keys signed code is checked against, or nil" },
  { "trust_info", "node/init", "what the node publishes of --trust" },
  { "secrets_dir", "node/init", "--secrets-dir: where runs' secrets are read (node/secrets.lua)" },
  { "run_as", "node/init", "--run-as {name, uid, gid, home}: the user workers run as" },
  { "run_memory", "node/init", "--run-memory: a run's memory limit when its job sets none" },
  -- lifecycle and parts (node/init.lua)
  { "stopping", "node/init", "true once a signal asked the node to stop" },
  { "go", "node/init", "go(fn, ...): a short-lived coroutine of the node, its failure logged" },
  { "forever", "node/init", "starts a long-lived task by its name in init.TASKS, with fn and its args" },
  { "metrics", "node/init", "the node's metrics (node/metrics.lua)" },
  { "batch", "node/init", "the write batcher for claims and ends (node/batch.lua)" },
  { "board", "node/init", "the claims board (node/board.lua)" },
  { "pool", "node/init", "the worker pool (node/pool.lua)" },
  -- session and registration (node/session.lua)
  { "s", "node/session", "the current session" },
  { "fence_fd", "node/session", "the session's fence board descriptor, given to workers" },
  { "fenced", "node/session", "true once the session is lost, until the node rejoins" },
  { "registered", "node/session", "revision of this session's registration at P nodes/<name>" },
  { "leader", "node/session", "a fresh table for each term while this node leads, else false/nil" },
  -- the job store (node/store.lua)
  { "jobs", "node/store", "{[name] = {spec, paused, loaded_at}}: the loaded jobs" },
  { "bad", "node/store", "{[name] = revision}: rejected job versions" },
  { "paused", "node/store", "{[name] = true}: paused jobs" },
  { "policies", "node/store", "{[name] = {mod, revision}}: the loaded stored policies" },
  { "store_version", "node/store", "counts changes of what GET /api/v1/jobs lists" },
  { "listed", "node/store", "true once the store was listed" },
  -- the store's own: want, want_policy ({[name] = revision} being loaded),
  -- bad_policies ({[name] = rejected revision}), listing (the counts of the
  -- listing under way, or nil), status_batch (status writes gathered during
  -- a listing, or nil), status_inflight (status transactions in flight),
  -- watchers (its watches)
  { "store", "node/store", "the store's own state (above)" },
  -- policy decisions (node/decide.lua)
  { "nodes", "node/decide", "{[name] = registration}: the registered nodes" },
  -- decide's own: live_list (self.nodes sorted by name, as policies get it;
  -- nil: to build again), warned ({[job, function, error] = when}: policy
  -- failures logged)
  { "decisions", "node/decide", "the policy gateway's own state (above)" },
  -- claims (node/triggers.lua, node/timetable.lua); the triggers' own:
  -- turns (heap of this node's later turns at instants), pending_seen
  -- ({[key] = mod revision}: pending runs being taken), parked ({[job] =
  -- {[key] = request}}: requests of jobs not loaded yet) and nparked
  { "triggers", "node/triggers", "the triggers' own state (above)" },
  { "timetable", "node/timetable", "heap of every job's next instant" },
  -- runs (node/claim.lua, node/execute.lua, node/cancel.lua)
  { "nrunning", "node/execute", "runs executing on this node" },
  { "executing", "node/execute", "runs whose end is not recorded yet" },
  { "claims", "node/claim", "claims made, for the claim tokens" },
  { "cancels", "node/cancel", "{[job/id] = request}: cancels that came before their run" },
  -- the leader's housekeeping (node/leader.lua): the misfire check
  -- (node/misfires.lua) and history pruning (node/prune.lua)
  -- misfires' own: marks ({[job] = last instant accounted for}, kept from
  -- term to term), outage ({[job] = true}: misfires seen during an
  -- outage), and the term's queue (jobs by when their next check is due),
  -- queued ({[job] = revision} in the queue) and todo ({[job] = true}:
  -- jobs whose marks are not seeded yet)
  { "misfires", "node/misfires", "the misfire check's own state (above)" },
  -- prune's own: dirty ({[job] = true}: jobs with new records to prune),
  -- sweep (the history sweep under way, or nil)
  { "prune", "node/prune", "history pruning's own state (above)" },
  -- the rest
  { "clock", "node/clock", "{offset, error, correction, ref, known, skewed, ...}" },
  { "clock_state", "node/clock", "the clock's samples and base" },
  { "now", "node/clock", "now(): the corrected clock (baton.now until clock.start)" },
  { "event_jobs", "events", "{[name] = spec}: jobs triggered by events" },
  { "queues", "node/queue", "{[queue] = state}: the queues this node follows" },
  { "http", "node/http", "the HTTP API's state, or nil" },
  -- health's: etcd_ok_at (monotonic time of etcd's last answer), etcd_err
  -- (the last etcd error, nil after a success), notify_reader (the
  -- notifiers' outbox reader, or nil), notify_pending ({[job] = n}:
  -- notifications waiting)
  { "health", "node/metrics", "what the node observes of etcd and its outbox (above)" },
  { "gc", "node/gc", "{bursts}: garbage bursts under way (node/gc.lua)" },
}

M.DECLARED = {}
for _, f in ipairs(M.FIELDS) do M.DECLARED[f[1]] = f end

-- A node table's fields that are not declared, sorted.
function M.undeclared(t)
  local out = {}
  for k in pairs(t) do if not M.DECLARED[k] then out[#out + 1] = tostring(k) end end
  table.sort(out)
  return out
end

-- The node table as it starts (node/init.lua adds the parts).
function M.new(opts)
  return {
    name = opts.name, ttl = opts.ttl or 10, labels = opts.labels or {},
    P = opts.prefix, e = opts.etcd, started = baton.now(),
    jobs = {}, bad = {}, paused = {}, nodes = {}, nrunning = 0, executing = 0, queues = {},
    timetable = {}, policies = {}, store_version = 0,
    store = { want = {}, want_policy = {}, bad_policies = {}, status_inflight = 0 },
    triggers = { turns = {}, pending_seen = {}, parked = {}, nparked = 0 },
    misfires = { marks = {}, outage = {} }, prune = { dirty = {} },
    health = {}, gc = { bursts = 0 },
    decisions = { warned = {} },
    grace = opts.grace or 5, history = opts.history or 100, max_workers = opts.workers,
    pid = opts.pid, metrics = opts.metrics,
  }
end

-- Makes t strict: a field not declared above can be neither set nor, with
-- check_reads, read. An undeclared field raises when `raise` is true (the
-- test suite sets BATON_NODE_STRICT, tests/harness/run-tests); otherwise it
-- is logged once, as the bug it is, and the node goes on.
function M.strict(t, raise, check_reads)
  local logged = {}
  local function undeclared(k, what)
    local msg = "node field '" .. tostring(k) .. "' " .. what .. " but not declared in node/state.lua"
    if raise then error(msg, 3) end
    if not logged[k] then
      logged[k] = true
      baton.log.error(msg, { node = rawget(t, "name"), trace = debug.traceback("", 3) })
    end
  end
  return setmetatable(t, {
    __newindex = function(_, k, v)
      if not M.DECLARED[k] then undeclared(k, "set") end
      rawset(t, k, v)
    end,
    __index = check_reads and function(_, k)
      if not M.DECLARED[k] then undeclared(k, "read") end
    end or nil,
  })
end

return M
