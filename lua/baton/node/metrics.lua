-- Prometheus metrics of a node (GET /metrics; docs/operations.md lists every
-- series with its meaning), on the registry of baton/prom.lua.
--
-- The node (lua/baton/node/init.lua) keeps one registry at self.metrics, made by
-- M.for_node(): the families below plus one method per fact the conductor
-- learns (a run ended, an instant was skipped, a claim was lost, ...), so
-- each instrumented place is one line. M.render(self) refreshes the gauges
-- from the node's state and returns the text.
--
-- Cardinality: a per-job series exists only for a job that did something
-- on this node (ran, lost a claim, was skipped by it), and goes when the
-- job is removed. A job that runs here has about 30 series: its states in
-- runs_total, claims_lost_total and two histograms of 11 buckets (+Inf,
-- _sum and _count: 14 series each). Everything else is a few dozen series.
local baton = require "baton"
local prom = require "baton.prom"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local setmetatable, pcall = setmetatable, pcall

local M = {}
M.new, M.escape_label = prom.new, prom.escape_label
local Registry = prom.Registry

-- Upper bounds, in seconds. Lateness: a claim is made within milliseconds
-- of its instant on a healthy node; seconds mean a saturated or stalled
-- node, or a clock being corrected. Duration: from cron-tick jobs to
-- hour-long batch runs (the default timeout is 3600 s).
M.LATENESS_BUCKETS = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 15, 60 }
M.DURATION_BUCKETS = { 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600 }
M.DISPATCH_BUCKETS = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1 }
M.ETCD_BUCKETS = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5 }

-- The final states of a run record (docs/jobs.md) and the reasons an
-- instant is recorded skipped; anything else counts as "other", so that a
-- label never takes a value from free text.
local FINAL = { succeeded = true, failed = true, killed = true, abandoned = true, skipped = true }
local SKIP_REASONS = { concurrency = true, misfire = true, deadline = true, paused = true }

-- The reason label of a skip from the error its record carries:
-- "concurrency forbid: ...", "misfire: not started within
-- starting_deadline ...", "misfire: missed while ...", "paused: ...".
function M.skip_reason(why)
  why = tostring(why or "")
  if why:find("starting_deadline", 1, true) then return "deadline" end
  local word = why:match("^(%a+)")
  return SKIP_REASONS[word] and word or "other"
end

local Node = setmetatable({}, { __index = Registry })
Node.__index = Node

-- A registry with the node's families (names and help: docs/operations.md).
function M.for_node()
  local m = setmetatable(M.new(), Node)
  local J = { "job_name" }
  m.runs = m:counter("baton_runs_total",
    "Runs whose final record this node wrote, by job and final state (succeeded, failed, killed, abandoned, skipped).",
    { "job_name", "state" })
  m.duration = m:histogram("baton_run_duration_seconds",
    "Duration of each attempt this node executed, from its claim to its end.", J, M.DURATION_BUCKETS)
  m.lateness = m:histogram("baton_fire_lateness_seconds",
    "Start of the first attempt of a scheduled instant on this node minus the instant.", J,
    M.LATENESS_BUCKETS)
  m.skipped = m:counter("baton_instants_skipped_total",
    "Instants (and events) this node recorded skipped, by job and reason (concurrency, misfire, deadline, paused).",
    { "job_name", "reason" })
  m.claims_lost = m:counter("baton_claims_lost_total",
    "Claims this node tried that another node had won: duplicate runs prevented.", J)
  m.retries = m:counter("baton_retries_total",
    "Failed attempts on this node after which the run waits for another attempt.", J)
  m.orphans = m:counter("baton_orphans_taken_over_total",
    "Runs of lost nodes this node handled: handed out again, abandoned or recorded killed.", J)
  m.session_losses = m:counter("baton_session_losses_total",
    "Times this node declared its etcd session lost and stopped its runs.")
  m.session_rejoins = m:counter("baton_session_rejoins_total",
    "Times this node joined again with a new session after losing one.")
  m.watch_resyncs = m:counter("baton_watch_resyncs_total",
    "Times this node listed the job store again after its watch was compacted or failed.")
  m.etcd_duration = m:histogram("baton_etcd_request_duration_seconds",
    "Duration of this node's etcd requests, by operation.", { "operation" }, M.ETCD_BUCKETS)
  m.batches = m:counter("baton_etcd_batches_total",
    "Requests of this node's write batcher: each carries one or more claims or ends of runs as one etcd transaction.")
  m.batched = m:counter("baton_etcd_batched_transactions_total",
    "Claims and ends of runs this node's write batcher carried (divided by baton_etcd_batches_total: the batching factor).")
  m.dispatch = m:histogram("baton_worker_dispatch_seconds",
    "Time from sending a run to a warm worker to reading its reply, less the time the worker spent on the run.",
    nil, M.DISPATCH_BUCKETS)
  m.etcd_errors = m:counter("baton_etcd_request_errors_total",
    "etcd requests of this node that failed, by operation and error code.", { "operation", "code" })
  m.http = m:counter("baton_http_requests_total",
    "HTTP requests this node answered, by status code and route.", { "code", "route" })
  m.workers = m:gauge("baton_workers", "Worker processes of this node, by state (busy, idle).", { "state" })
  m.workers_max = m:gauge("baton_workers_max", "Runs this node executes at once at most (--workers).")
  m.waiting = m:gauge("baton_runs_waiting",
    "Runs waiting on this node for a free worker slot.")
  m.slots = m:gauge("baton_worker_slots_taken",
    "Worker slots (--workers) taken now on this node: by a run being claimed or executing.")
  m.jobs = m:gauge("baton_jobs",
    "Jobs on this node: loaded, broken (the newest version was rejected) and paused (of those loaded).",
    { "state" })
  m.leader = m:gauge("baton_leader", "1 while this node is the elected cluster leader, else 0.")
  m.clock_offset = m:gauge("baton_clock_offset_seconds",
    "This node's clock minus the cluster's median clock, as measured (positive: ahead).")
  m.clock_error = m:gauge("baton_clock_offset_uncertainty_seconds",
    "Half the round trip of the measurement behind baton_clock_offset_seconds: the true offset lies within it.")
  m.notify_pending = m:gauge("baton_notifications_pending",
    "Notifications not delivered yet, in the whole cluster, by notifier job (P notify/outbox/; read from etcd "
      .. "every 10 s while /metrics is scraped).", J)
  m.build = m:gauge("baton_build_info", "1, with the version of baton in a label.", { "version" })
  m.start_time = m:gauge("baton_node_start_time_seconds", "When this node started, in Unix seconds.")
  -- The process's own figures, under the names every Prometheus client
  -- library uses, so that the usual dashboards and alerts apply.
  m.rss = m:gauge("process_resident_memory_bytes", "Resident memory size of the node's conductor process in bytes.")
  m.vsize = m:gauge("process_virtual_memory_bytes", "Virtual memory size of the node's conductor process in bytes.")
  m.cpu = m:counter("process_cpu_seconds_total", "User and system CPU time of the node's conductor process in seconds.")
  m.lua_heap = m:gauge("baton_lua_memory_bytes", "Memory held by the conductor's Lua state (part of the resident size) in bytes.")
  m.workers:set({ state = "busy" }, 0)
  m.workers:set({ state = "idle" }, 0)
  for _, st in ipairs { "loaded", "broken", "paused" } do m.jobs:set({ state = st }, 0) end
  m.build:set({ version = baton.version or "unknown" }, 1)
  -- (Prometheus drops a series with no sample; these have none until the
  -- clock is measured)
  m.clock_offset:clear()
  m.clock_error:clear()
  return m
end

-- A run's attempt was claimed here and starts now (execute.lua): the
-- first attempt of a scheduled instant counts its lateness.
function Node:run_started(run, rec)
  if rec.attempt == 1 and not (run.manual or run.task or run.event) and type(run.fire) == "number" then
    local late = rec.started - run.fire
    self.lateness:observe({ job_name = run.job }, late > 0 and late or 0)
  end
end

-- An attempt executed here ended in state (execute.lua); recorded: its end
-- is written; retrying: it waits for another attempt (delay not nil).
function Node:attempt_ended(run, rec, state, recorded, retrying)
  self.duration:observe({ job_name = run.job }, rec.duration or 0)
  if not recorded then return end
  if retrying then
    if state == "failed" then self.retries:inc({ job_name = run.job }) end
  else
    self:ended(run.job, rec.state)
  end
end

-- This node wrote the final record of a run of job in state.
function Node:ended(job, state)
  self.runs:inc({ job_name = job, state = FINAL[state] and state or "other" })
end

-- This node recorded an instant (or event) of job skipped, for reason why
-- (the record's error, or a reason word).
function Node:skip(job, why)
  self.skipped:inc({ job_name = job, reason = M.skip_reason(why) })
  self:ended(job, "skipped")
end

function Node:claim_lost(job) self.claims_lost:inc({ job_name = job }) end

-- The write batcher sent one request carrying n transactions (node/batch.lua).
function Node:batch_sent(n)
  self.batches:inc()
  self.batched:inc(nil, n)
end

-- A worker's reply came secs after the run was sent, less its own time on it.
function Node:dispatched(secs) self.dispatch:observe(nil, secs > 0 and secs or 0) end

-- This node handled a run of a lost node (node/orphans.lua); state is the
-- record's new state ("retrying" when it waits for another attempt).
function Node:orphan(job, state)
  self.orphans:inc({ job_name = job })
  if state ~= "retrying" then self:ended(job, state) end
end

function Node:session_lost() self.session_losses:inc() end
function Node:rejoined() self.session_rejoins:inc() end
function Node:resynced() self.watch_resyncs:inc() end
-- One HTTP request answered (node/http.lua): its route pattern and status.
function Node:http_request(route, status) self.http:inc({ code = tostring(status), route = route }) end

-- The observer the node installs on its etcd client (client:observe): one
-- request of operation took secs and failed with code (nil: it succeeded).
-- It also keeps self.health.etcd_ok_at (monotonic time of the last success) and
-- self.health.etcd_err ("ECODE: message" of the last failure; nil after a success)
-- for /readyz.
function M.etcd_observer(self)
  return function(op, secs, code, err)
    local m = self.metrics
    m.etcd_duration:observe({ operation = op }, secs)
    if code then
      m.etcd_errors:inc({ operation = op, code = code })
      self.health.etcd_err = err or code
    else
      self.health.etcd_ok_at = baton.monotime()
      self.health.etcd_err = nil
    end
  end
end

local USER_HZ = 100 -- the unit of /proc's CPU times on Linux, whatever the kernel's HZ

local function read_proc(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- The conductor's resident and virtual size in bytes and its CPU seconds,
-- from /proc/self (nil off Linux). The fields of stat are counted from the
-- command's closing parenthesis, since the command may hold spaces.
function M.process_stats()
  local status, stat = read_proc("/proc/self/status"), read_proc("/proc/self/stat")
  local rss = status and tonumber(status:match("\nVmRSS:%s*(%d+) kB"))
  local vsize = status and tonumber(status:match("\nVmSize:%s*(%d+) kB"))
  local utime, stime = (stat and stat:match("%) (.*)$") or ""):match(
    "^%S+" .. ("%s+%S+"):rep(10) .. "%s+(%d+)%s+(%d+)")
  if not (rss and vsize and utime) then return nil end
  return rss * 1024, vsize * 1024, (tonumber(utime) + tonumber(stime)) / USER_HZ
end

-- The outbox of the notifiers (baton.notify) is read from etcd, not known
-- from the node's own state: the first render starts a reader (on the
-- node's loop: render itself never waits) that counts it every
-- NOTIFY_EVERY seconds into self.health.notify_pending ({[job] = n}) and stops
-- NOTIFY_IDLE seconds after the last render, so a node nobody scrapes
-- asks etcd nothing.
M.NOTIFY_EVERY = 10
M.NOTIFY_IDLE = 300

local function read_outbox(self)
  local st = self.health.notify_reader
  if not st then
    st = {}
    self.health.notify_reader = st
  end
  st.wanted = baton.monotime()
  if st.running or type(self.go) ~= "function" or not (self.e and self.P) then return end
  st.running = true
  self.go(function()
    local notify = require "baton.notify"
    while not self.stopping and baton.monotime() - st.wanted < M.NOTIFY_IDLE do
      local ok, counts = pcall(notify.pending_counts, self.e, self.P)
      if ok and counts then self.health.notify_pending = counts end
      baton.sleep(M.NOTIFY_EVERY)
    end
    st.running = false
  end)
end

-- baton_notifications_pending from self.health.notify_pending: every job in it,
-- and every notifier job loaded (0 when none of its messages waits).
-- Nothing until the outbox was read once.
local function notify_gauge(self, m)
  local counts = self.health.notify_pending
  if type(counts) ~= "table" then return end
  local is_notifier = require("baton.notify").is_notifier
  for name, j in pairs(self.jobs or {}) do
    if counts[name] == nil and is_notifier(j.spec) then m.notify_pending:set({ job_name = name }, 0) end
  end
  for name, n in pairs(counts) do m.notify_pending:set({ job_name = name }, n) end
  -- (a job whose series is there and is in neither: its messages went)
  for _, key in ipairs(m.notify_pending.keys) do
    if counts[key] == nil then m.notify_pending.series[key][2] = 0 end
  end
end

-- Refreshes the gauges from the node's state (self: the node, node/state.lua)
-- and returns the exposition text.
function M.render(self)
  local m = self.metrics
  local pool = self.pool
  local busy, idle, waiting = 0, 0, 0
  if pool then
    for _ in pairs(pool.busy) do busy = busy + 1 end
    idle = #pool.idle
    for _ in pairs(pool.queued) do waiting = waiting + 1 end
  end
  m.workers:set({ state = "busy" }, busy)
  m.workers:set({ state = "idle" }, idle)
  m.workers_max:set(nil, self.max_workers or 0)
  m.waiting:set(nil, waiting)
  m.slots:set(nil, pool and tonumber(pool.slots) or 0) -- (each taken by a run, or handed to a waiter)
  local loaded, paused, broken = 0, 0, 0
  for _, j in pairs(self.jobs or {}) do
    loaded = loaded + 1
    if j.paused then paused = paused + 1 end
  end
  for _ in pairs(self.bad or {}) do broken = broken + 1 end
  m.jobs:set({ state = "loaded" }, loaded)
  m.jobs:set({ state = "broken" }, broken)
  m.jobs:set({ state = "paused" }, paused)
  m.leader:set(nil, self.leader and 1 or 0)
  local c = self.clock
  if c and c.known and type(c.correction) == "number" then
    m.clock_offset:set(nil, c.correction)
    m.clock_error:set(nil, type(c.error) == "number" and c.error or 0)
  end
  m.start_time:set(nil, self.started or 0)
  local rss, vsize, cpu = M.process_stats()
  if rss then
    m.rss:set(nil, rss)
    m.vsize:set(nil, vsize)
    m.cpu:touch(nil)[2] = cpu
  end
  m.lua_heap:set(nil, collectgarbage("count") * 1024)
  read_outbox(self)
  notify_gauge(self, m)
  return m:render()
end

M.Node = Node

return M
