-- Prometheus metrics of a node (GET /metrics; docs/operations.md lists every
-- series with its meaning).
--
-- A registry of counters, gauges and histograms rendered in the text
-- exposition format 0.0.4: each family's lines together, HELP and TYPE once
-- before its samples, series in a stable (sorted) order, label values
-- escaped, histogram buckets cumulative and ending in le="+Inf" (equal to
-- _count), no timestamps. Nothing here waits.
--
--   local metrics = require "baton.node.metrics"
--   local reg = metrics.new()
--   local c = reg:counter("baton_x_total", "What it counts.", { "job_name" })
--   c:inc({ job_name = "backup" })         c:inc(labels, n)   (n >= 0)
--   local g = reg:gauge("baton_y", "...")  g:set(nil, 3)
--   local h = reg:histogram("baton_z_seconds", "...", { "job_name" }, { 0.1, 1, 10 })
--   h:observe({ job_name = "backup" }, 0.42)
--   reg:forget("job_name", "backup")       drops every series of that job
--   reg:render()                           --> the text
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

local type, pairs, ipairs, tostring, error, select = type, pairs, ipairs, tostring, error, select
local setmetatable, pcall = setmetatable, pcall
local concat, sort = table.concat, table.sort
local huge = math.huge

local M = {}

---------------------------------------------------------------------------
-- output buffer: LuaJIT's string.buffer when there is one, else a table

local newbuf
do
  local ok, sb = pcall(require, "string.buffer")
  if ok and type(sb) == "table" and sb.new then
    newbuf = function(size) return sb.new(size) end
  else
    local Buf = {}
    Buf.__index = Buf
    function Buf:put(...)
      local n = self.n
      for i = 1, select("#", ...) do
        n = n + 1
        self[n] = tostring((select(i, ...)))
      end
      self.n = n
      return self
    end
    function Buf:tostring() return concat(self, "", 1, self.n) end
    newbuf = function() return setmetatable({ n = 0 }, Buf) end
  end
end

---------------------------------------------------------------------------
-- formatting

local NAME = "^[a-zA-Z_:][a-zA-Z0-9_:]*$"
local LABEL = "^[a-zA-Z_][a-zA-Z0-9_]*$"

-- A sample value as Go's ParseFloat reads it: numbers as Lua prints them
-- (%.14g), and the three that Lua spells otherwise.
local function value(v)
  if v ~= v then return "NaN" end
  if v == huge then return "+Inf" end
  if v == -huge then return "-Inf" end
  return v
end

local ESC_LABEL = { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n" }
local ESC_HELP = { ["\\"] = "\\\\", ["\n"] = "\\n" }

function M.escape_label(s) return (s:gsub('[\\"\n]', ESC_LABEL)) end

-- A bucket bound as written in le="...": %.14g as for values ("0.005",
-- "60"), "+Inf" for the last.
local function le(b)
  if b == huge then return "+Inf" end
  return tostring(b)
end

---------------------------------------------------------------------------
-- the registry

local Registry = {}
Registry.__index = Registry
local Family = {}
Family.__index = Family

function M.new()
  return setmetatable({ families = {}, by_name = {} }, Registry)
end

local function check_labels(fn, labelnames)
  labelnames = labelnames or {}
  if type(labelnames) ~= "table" then error(fn .. ": label names: table expected", 3) end
  for _, l in ipairs(labelnames) do
    if type(l) ~= "string" or not l:match(LABEL) or l:sub(1, 2) == "__" or l == "le" then
      error(fn .. ": bad label name " .. tostring(l), 3)
    end
  end
  return labelnames
end

-- extra: fields the family needs before its first series (a histogram's
-- bounds).
local function family(reg, kind, fn, name, help, labelnames, extra)
  if type(name) ~= "string" or not name:match(NAME) then error(fn .. ": bad metric name " .. tostring(name), 3) end
  if reg.by_name[name] then error(fn .. ": " .. name .. " is registered already", 3) end
  if type(help) ~= "string" then error(fn .. ": help text expected", 3) end
  local f = setmetatable({
    reg = reg, name = name, kind = kind, labelnames = check_labels(fn, labelnames),
    help = (help:gsub("[\\\n]", ESC_HELP)),
    -- key (the label values joined by "\0") -> series:
    --   counter, gauge: { 'name{a="x",b="y"} ', value }
    --   histogram:      { '{a="x"' or "", sum, count, bucket counts... }
    series = {},
    keys = {},     -- the keys in render order (sorted when `sorted`)
    sorted = true,
  }, Family)
  for k, v in pairs(extra or {}) do f[k] = v end
  reg.families[#reg.families + 1] = f
  reg.by_name[name] = f
  -- A family without labels has its one series from the start (at 0).
  if #f.labelnames == 0 then f:touch() end
  return f
end

function Registry:counter(name, help, labelnames)
  return family(self, "counter", "counter", name, help, labelnames)
end

function Registry:gauge(name, help, labelnames)
  return family(self, "gauge", "gauge", name, help, labelnames)
end

-- buckets: increasing upper bounds; +Inf is added.
function Registry:histogram(name, help, labelnames, buckets)
  if type(buckets) ~= "table" or #buckets == 0 then error("histogram: buckets expected", 2) end
  local bounds = {}
  for i, b in ipairs(buckets) do
    if type(b) ~= "number" or b ~= b or (i > 1 and b <= buckets[i - 1]) then
      error("histogram: buckets must be increasing numbers", 2)
    end
    if b ~= huge then bounds[#bounds + 1] = b end
  end
  local text, open = {}, #(labelnames or {}) > 0 and ',le="' or '{le="'
  -- The text after the labels of each bucket line: ,le="0.1"} or {le="0.1"} .
  for i = 1, #bounds + 1 do text[i] = open .. le(bounds[i] or huge) .. '"} ' end
  return family(self, "histogram", "histogram", name, help, labelnames,
                { bounds = bounds, le_text = text })
end

local function key_of(f, labels, level)
  local names = f.labelnames
  local n = #names
  if n == 0 then return "" end
  if n == 1 then
    local v = labels and labels[names[1]]
    if v == nil then error(f.name .. ": label " .. names[1] .. " missing", level + 1) end
    return tostring(v)
  end
  local parts = {}
  for i = 1, n do
    local v = labels and labels[names[i]]
    if v == nil then error(f.name .. ": label " .. names[i] .. " missing", level + 1) end
    parts[i] = tostring(v)
  end
  return concat(parts, "\0")
end

local purge

-- The series of labels (a table name -> value; nil when the family has
-- none), made at 0 when it does not exist yet.
function Family:touch(labels)
  local key = key_of(self, labels, 3)
  local s = self.series[key]
  if s then return s end
  local names = self.labelnames
  -- A job forgotten and back before the next render keeps its new series.
  if self.reg.forgotten then purge(self.reg) end
  local text = {}
  for i = 1, #names do
    text[i] = names[i] .. '="' .. M.escape_label(tostring(labels[names[i]])) .. '"'
  end
  local lbl = concat(text, ",")
  if self.kind == "histogram" then
    s = { lbl == "" and "" or "{" .. lbl, 0, 0 }
    for i = 1, #self.bounds do s[3 + i] = 0 end
  else
    s = { lbl == "" and self.name .. " " or self.name .. "{" .. lbl .. "} ", 0 }
  end
  self.series[key] = s
  self.keys[#self.keys + 1] = key
  self.sorted = false
  return s
end

-- Counters: adds n (default 1; a counter never goes down).
function Family:inc(labels, n)
  n = n or 1
  if self.kind == "counter" and not (n >= 0) then -- luacheck: ignore 581 (NaN too)
    error(self.name .. ": a counter only rises (inc by " .. tostring(n) .. ")", 2)
  end
  local s = self:touch(labels)
  s[2] = s[2] + n
end

-- Gauges: sets the value.
function Family:set(labels, v)
  if self.kind ~= "gauge" then error(self.name .. ": set on a " .. self.kind, 2) end
  self:touch(labels)[2] = v
end

-- Histograms: counts one observation (NaN is ignored).
function Family:observe(labels, v)
  if v ~= v then return end
  local s = self:touch(labels)
  local bounds = self.bounds
  for i = 1, #bounds do
    if v <= bounds[i] then s[3 + i] = s[3 + i] + 1; break end
  end
  s[2] = s[2] + v
  s[3] = s[3] + 1
end

-- The value of a series (counters, gauges), or a histogram's count, sum
-- and cumulative bucket counts {[bound] = n}; nil when the series does not
-- exist.
function Family:get(labels)
  local s = self.series[key_of(self, labels, 2)]
  if not s then return nil end
  if self.kind ~= "histogram" then return s[2] end
  local cum, buckets = 0, {}
  for i, b in ipairs(self.bounds) do cum = cum + s[3 + i]; buckets[b] = cum end
  return s[3], s[2], buckets
end

-- Drops every series.
function Family:clear()
  self.series, self.keys, self.sorted = {}, {}, true
end

-- Drops every series whose label `label` (the first label of its family)
-- is v: a job that was removed takes its series with it. (Done at the
-- next render, in one pass whatever the number of jobs removed.)
function Registry:forget(label, v)
  self.forgotten = self.forgotten or {}
  local set = self.forgotten[label] or {}
  self.forgotten[label] = set
  set[tostring(v)] = true
end

function purge(reg)
  local forgotten = reg.forgotten
  reg.forgotten = nil
  for _, f in ipairs(reg.families) do
    local set = forgotten[f.labelnames[1]]
    if set then
      local keep, series = {}, f.series
      for _, key in ipairs(f.keys) do
        if set[key:match("^[^%z]*")] then series[key] = nil else keep[#keep + 1] = key end
      end
      f.keys = keep
    end
  end
end

local function render_family(f, b)
  local keys = f.keys
  if #keys == 0 then return end
  if not f.sorted then
    sort(keys)
    f.sorted = true
  end
  local name, series = f.name, f.series
  b:put("# HELP ", name, " ", f.help, "\n# TYPE ", name, " ", f.kind, "\n")
  if f.kind ~= "histogram" then
    for i = 1, #keys do
      local s = series[keys[i]]
      b:put(s[1], value(s[2]), "\n")
    end
    return
  end
  local bucket, le_text, nb = name .. "_bucket", f.le_text, #f.bounds
  local sum_name, count_name = name .. "_sum", name .. "_count"
  for i = 1, #keys do
    local s = series[keys[i]]
    local open, cum = s[1], 0
    for k = 1, nb do
      cum = cum + s[3 + k]
      b:put(bucket, open, le_text[k], cum, "\n")
    end
    b:put(bucket, open, le_text[nb + 1], s[3], "\n")
    if open == "" then
      b:put(sum_name, " ", value(s[2]), "\n", count_name, " ", s[3], "\n")
    else
      b:put(sum_name, open, "} ", value(s[2]), "\n", count_name, open, "} ", s[3], "\n")
    end
  end
end

function Registry:render()
  if self.forgotten then purge(self) end
  -- (room for as much as last time: the buffer does not grow by copies)
  local b = newbuf(self.size)
  for _, f in ipairs(self.families) do render_family(f, b) end
  local text = b:tostring()
  self.size = #text + 4096
  return text
end

---------------------------------------------------------------------------
-- the node's metrics

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

-- A run's attempt was claimed here and starts now (runs.execute): the
-- first attempt of a scheduled instant counts its lateness.
function Node:run_started(run, rec)
  if rec.attempt == 1 and not (run.manual or run.task or run.event) and type(run.fire) == "number" then
    local late = rec.started - run.fire
    self.lateness:observe({ job_name = run.job }, late > 0 and late or 0)
  end
end

-- An attempt executed here ended in state (runs.execute); recorded: its end
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

-- This node handled a run of a lost node (leader.lua); state is the
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
-- It also keeps self.etcd_ok_at (monotonic time of the last success) and
-- self.etcd_err ("ECODE: message" of the last failure; nil after a success)
-- for /readyz.
function M.etcd_observer(self)
  return function(op, secs, code, err)
    local m = self.metrics
    m.etcd_duration:observe({ operation = op }, secs)
    if code then
      m.etcd_errors:inc({ operation = op, code = code })
      self.etcd_err = err or code
    else
      self.etcd_ok_at = baton.monotime()
      self.etcd_err = nil
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
-- NOTIFY_EVERY seconds into self.notify_pending ({[job] = n}) and stops
-- NOTIFY_IDLE seconds after the last render, so a node nobody scrapes
-- asks etcd nothing.
M.NOTIFY_EVERY = 10
M.NOTIFY_IDLE = 300

local function read_outbox(self)
  local st = self.notify_reader
  if not st then
    st = {}
    self.notify_reader = st
  end
  st.wanted = baton.monotime()
  if st.running or type(self.go) ~= "function" or not (self.e and self.P) then return end
  st.running = true
  self.go(function()
    local notify = require "baton.notify"
    while not self.stopping and baton.monotime() - st.wanted < M.NOTIFY_IDLE do
      local ok, counts = pcall(notify.pending_counts, self.e, self.P)
      if ok and counts then self.notify_pending = counts end
      baton.sleep(M.NOTIFY_EVERY)
    end
    st.running = false
  end)
end

-- baton_notifications_pending from self.notify_pending: every job in it,
-- and every notifier job loaded (0 when none of its messages waits).
-- Nothing until the outbox was read once.
local function notify_gauge(self, m)
  local counts = self.notify_pending
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

M.Registry, M.Family, M.Node = Registry, Family, Node

return M
