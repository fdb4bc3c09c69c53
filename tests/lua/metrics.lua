-- The node's metrics registry and its text exposition (format 0.0.4), with
-- no server: escaping of label values, histograms (cumulative buckets,
-- +Inf == _count), families grouped under one HELP and TYPE, counters that
-- only rise, a removed job's series dropped, the gauges render() reads from
-- a node's state, `promtool check metrics` on a sample of many jobs, and
-- the render time with 10,000 jobs' series. The node's instrumentation is
-- tested with real nodes and a real Prometheus in http-prometheus.lua.
local T = require "tap"
local X = require "exposition"
local metrics = require "baton.node.metrics"

local function lines_of(text)
  local out = {}
  for l in text:gmatch("([^\n]*)\n") do out[#out + 1] = l end
  return out
end

-- promtool check metrics on text: exit status and what it printed.
local function promtool(text)
  local r, err = baton.exec { "promtool", "check", "metrics", stdin = text, timeout = 60 }
  if not r then return nil, err end
  return r.code, r.stdout .. r.stderr
end

---------------------------------------------------------------------------
-- 1. counters, escaping, grouping

local reg = metrics.new()
local c = reg:counter("t_events_total", "Events.\nSecond line with a \\ backslash.", { "job_name", "state" })
local g = reg:gauge("t_level", "A level.")
c:inc({ job_name = 'a"b\\c\nd', state = "failed" })
g:set(nil, 2.5)
c:inc({ job_name = "plain", state = "succeeded" }, 3)
c:inc({ job_name = "plain", state = "failed" })
c:inc({ job_name = "plain", state = "succeeded" })
local text = reg:render()
local fams, problems = X.parse(text)
T.is_deeply(problems, {}, "a registry renders well-formed text")
T.like(text, 'job_name="a\\"b\\\\c\\nd"', [[label value escaped: \ -> \\, " -> \", newline -> \n]])
T.is(X.value(fams, "t_events_total", { job_name = 'a"b\\c\nd', state = "failed" }), 1,
     "and read back as the original value")
T.like(text, "# HELP t_events_total Events%.\\nSecond line with a \\\\ backslash%.\n",
       "HELP text escapes newline and backslash")
T.is(X.value(fams, "t_events_total", { job_name = "plain", state = "succeeded" }), 4,
     "inc adds up (3 + 1)")
local l = lines_of(text)
local helps, types = 0, 0
for _, line in ipairs(l) do
  if line:match("^# HELP t_events_total ") then helps = helps + 1 end
  if line:match("^# TYPE t_events_total counter$") then types = types + 1 end
end
T.ok(helps == 1 and types == 1, "one HELP and one TYPE per family, whatever the number of series")
T.is(l[3], 't_events_total{job_name="a\\"b\\\\c\\nd",state="failed"} 1', "series sorted: first")
T.is(l[4], 't_events_total{job_name="plain",state="failed"} 1', "series sorted: second")
T.is(l[5], 't_events_total{job_name="plain",state="succeeded"} 4', "series sorted: third")
T.is(l[8], "t_level 2.5", "then the next family, without labels")
T.is(text:sub(-1), "\n", "the text ends with a newline")
T.unlike(text, "\r", "no carriage return")
T.is(reg:render(), text, "rendering twice gives the same text")

T.error_like(function() c:inc({ job_name = "x", state = "failed" }, -1) end, "only rises",
             "a counter refuses to go down")
T.error_like(function() c:inc({ job_name = "x" }) end, "label state missing", "a missing label raises")
T.error_like(function() reg:counter("t_events_total", "again") end, "registered already",
             "a name registers once")
T.error_like(function() reg:gauge("bad-name", "x") end, "bad metric name", "metric names are checked")
T.error_like(function() reg:gauge("t_ok", "x", { "le" }) end, "bad label name", "le is no label of ours")
T.error_like(function() reg:gauge("t_ok2", "x", { "__x" }) end, "bad label name", "__ is reserved")

-- Special values are spelled as Go reads them.
local sv = metrics.new()
local sg = sv:gauge("t_special", "Special values.", { "k" })
sg:set({ k = "inf" }, math.huge)
sg:set({ k = "minf" }, -math.huge)
sg:set({ k = "nan" }, 0 / 0)
local st = sv:render()
T.like(st, 't_special{k="inf"} %+Inf\n', "+Inf")
T.like(st, 't_special{k="minf"} %-Inf\n', "-Inf")
T.like(st, 't_special{k="nan"} NaN\n', "NaN")

---------------------------------------------------------------------------
-- 2. histograms

local hr = metrics.new()
local h = hr:histogram("t_wait_seconds", "Waits.", { "job_name" }, { 0.1, 1, 10 })
for _, v in ipairs { 0.05, 0.1, 0.5, 1, 3, 100, 0 / 0 } do h:observe({ job_name = "j" }, v) end
local hu = hr:histogram("t_plain_seconds", "No labels.", nil, { 1 })
hu:observe(nil, 2)
local ht = hr:render()
fams, problems = X.parse(ht)
T.is_deeply(problems, {}, "histograms render well-formed")
local function bucket(le) return X.value(fams, "t_wait_seconds", { job_name = "j", le = le }, "t_wait_seconds_bucket") end
T.is(bucket("0.1"), 2, "le=0.1 counts 0.05 and 0.1 (a bound is inclusive)")
T.is(bucket("1"), 4, "le=1 is cumulative: 0.5 and 1 more")
T.is(bucket("10"), 5, "le=10: 3 more")
T.is(bucket("+Inf"), 6, "le=+Inf: every observation (NaN ignored)")
T.is(X.value(fams, "t_wait_seconds", { job_name = "j" }, "t_wait_seconds_count"), 6, "_count == +Inf bucket")
T.ok(math.abs(X.value(fams, "t_wait_seconds", { job_name = "j" }, "t_wait_seconds_sum") - 104.65) < 1e-9,
     "_sum adds the observations")
T.like(ht, 't_plain_seconds_bucket{le="1"} 0\nt_plain_seconds_bucket{le="%+Inf"} 1\nt_plain_seconds_sum 2\nt_plain_seconds_count 1\n',
       "a histogram without labels: {le=...} alone, then _sum and _count")
local order = {}
for le in ht:gmatch('t_wait_seconds_bucket{job_name="j",le="([^"]+)"}') do order[#order + 1] = le end
T.is_deeply(order, { "0.1", "1", "10", "+Inf" }, "buckets in increasing le order, +Inf last")
local n, sum, b = h:get({ job_name = "j" })
T.ok(n == 6 and b[1] == 4, "get() gives count and cumulative buckets")
T.error_like(function() hr:histogram("t_bad_seconds", "x", nil, { 1, 1 }) end, "increasing",
             "bucket bounds must increase")

-- The checker itself finds what promtool lets pass.
local _, p2 = X.parse('# HELP a_total x\n# TYPE a_total counter\na_total 1\n# HELP b x\n# TYPE b gauge\nb 1\na_total{x="1"} 2\n')
T.ok(#p2 > 0 and p2[1]:match("family split"), "the checker finds a split family")
_, p2 = X.parse('# HELP h x\n# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 2\n')
T.ok(#p2 >= 2, "the checker finds buckets not cumulative and +Inf != _count")

---------------------------------------------------------------------------
-- 3. the node's registry: families, zeros up front, forget, render(self)

local m = metrics.for_node()
local node = {
  metrics = m, max_workers = 8, started = 1796000000.25,
  jobs = { a = { paused = false }, b = { paused = true }, c = { paused = false } },
  bad = { broken1 = 7 }, leader = {},
  pool = { busy = { [{}] = {}, [{}] = {} }, idle = { {} }, queued = { [{}] = 1796000001 } },
  clock = { known = true, correction = -0.0123, error = 0.0008 },
  -- (the notifiers' outbox as read from etcd, baton.notify)
  health = { notify_pending = { ["notify-webhook"] = 3 } },
}
for _ = 1, 5 do m:http_request("GET /metrics", 200) end
for _ = 1, 2 do m:http_request("GET /api/v1/jobs/{name}", 404) end
m:run_started({ job = "a", fire = 100 }, { attempt = 1, started = 100.02 })
m:run_started({ job = "a", fire = 100, manual = true }, { attempt = 1, started = 130 })
m:run_started({ job = "a", fire = 100 }, { attempt = 2, started = 140 })
m:attempt_ended({ job = "a" }, { duration = 1.5, state = "succeeded" }, "succeeded", 12, nil)
m:attempt_ended({ job = "a" }, { duration = 0.2, state = "retrying" }, "failed", 13, 4)
m:attempt_ended({ job = "a" }, { duration = 0.3, state = "failed" }, "failed", nil, nil)
m:skip("a", "concurrency forbid: a previous run is still running")
m:skip("c", "misfire: not started within starting_deadline (5 s)")
m:skip("c", "misfire: missed while no node ran it (misfire = skip)")
m:skip("c", "paused: the event came while the job was paused")
m:skip("c", "something new")
m:claim_lost("b")
m:orphan("b", "retrying")
m:orphan("b", "abandoned")
m:session_lost()
m:rejoined()
m:resynced()
local obs = metrics.etcd_observer(node)
obs("txn", 0.003, nil)
T.ok(type(node.health.etcd_ok_at) == "number" and node.health.etcd_err == nil, "the etcd observer keeps etcd_ok_at")
obs("txn", 1.2, "ETIMEDOUT", "ETIMEDOUT: etcd http://127.0.0.1:2379: timed out")
T.is(node.health.etcd_err, "ETIMEDOUT: etcd http://127.0.0.1:2379: timed out", "and etcd_err after a failure")

local nt = metrics.render(node)
fams, problems = X.parse(nt)
T.is_deeply(problems, {}, "the node's metrics are well formed")
local code, out = promtool(nt)
T.is(code, 0, "promtool check metrics passes the node's metrics")
if code ~= 0 then T.diag(out) end
local function v(name, labels, sample) return X.value(fams, name, labels, sample) end
T.is(v("baton_runs_total", { job_name = "a", state = "succeeded" }), 1, "runs_total: a final success")
T.is(v("baton_runs_total", { job_name = "a", state = "failed" }), nil,
     "an attempt whose end was not recorded (the claim was lost) is no run of this node")
T.is(v("baton_retries_total", { job_name = "a" }), 1, "retries_total: a failed attempt with a retry")
T.is(v("baton_run_duration_seconds", { job_name = "a" }, "baton_run_duration_seconds_count"), 3,
     "run_duration_seconds: every attempt executed")
T.is(v("baton_fire_lateness_seconds", { job_name = "a" }, "baton_fire_lateness_seconds_count"), 1,
     "fire_lateness_seconds: the scheduled first attempt only (not manual, not a retry)")
T.ok(math.abs(v("baton_fire_lateness_seconds", { job_name = "a" }, "baton_fire_lateness_seconds_sum") - 0.02) < 1e-6,
     "lateness = started - fire")
T.is(v("baton_instants_skipped_total", { job_name = "a", reason = "concurrency" }), 1, "skip reason concurrency")
T.is(v("baton_instants_skipped_total", { job_name = "c", reason = "deadline" }), 1, "skip reason deadline")
T.is(v("baton_instants_skipped_total", { job_name = "c", reason = "misfire" }), 1, "skip reason misfire")
T.is(v("baton_instants_skipped_total", { job_name = "c", reason = "paused" }), 1, "skip reason paused")
T.is(v("baton_instants_skipped_total", { job_name = "c", reason = "other" }), 1,
     "an unknown reason is 'other': no label value from free text")
T.is(v("baton_runs_total", { job_name = "c", state = "skipped" }), 4, "a skip is a final record: runs_total{state=skipped}")
T.is(v("baton_claims_lost_total", { job_name = "b" }), 1, "claims_lost_total")
T.is(v("baton_orphans_taken_over_total", { job_name = "b" }), 2, "orphans_taken_over_total")
T.is(v("baton_runs_total", { job_name = "b", state = "abandoned" }), 1, "an abandoned orphan is a final record")
T.is(v("baton_session_losses_total"), 1, "session_losses_total")
T.is(v("baton_session_rejoins_total"), 1, "session_rejoins_total")
T.is(v("baton_watch_resyncs_total"), 1, "watch_resyncs_total")
T.is(v("baton_etcd_request_duration_seconds", { operation = "txn" }, "baton_etcd_request_duration_seconds_count"), 2,
     "etcd_request_duration_seconds by operation")
T.is(v("baton_etcd_request_errors_total", { operation = "txn", code = "ETIMEDOUT" }), 1,
     "etcd_request_errors_total by operation and code")
T.is(v("baton_workers", { state = "busy" }), 2, "workers busy")
T.is(v("baton_workers", { state = "idle" }), 1, "workers idle")
T.is(v("baton_workers_max"), 8, "workers_max")
T.is(v("baton_runs_waiting"), 1, "runs_waiting")
T.is(v("baton_jobs", { state = "loaded" }), 3, "jobs loaded")
T.is(v("baton_jobs", { state = "paused" }), 1, "jobs paused")
T.is(v("baton_jobs", { state = "broken" }), 1, "jobs broken")
T.is(v("baton_leader"), 1, "leader 1 while self.leader")
T.is(v("baton_clock_offset_seconds"), -0.0123, "clock_offset_seconds: the correction")
T.is(v("baton_clock_offset_uncertainty_seconds"), 0.0008, "clock_offset_uncertainty_seconds")
T.is(v("baton_build_info", { version = baton.version }), 1, "build_info{version}")
T.is(v("baton_node_start_time_seconds"), 1796000000.25, "node_start_time_seconds")
T.is(v("baton_notifications_pending", { job_name = "notify-webhook" }), 3,
     "notifications_pending: the notifiers' outbox as last read")
T.is(v("baton_http_requests_total", { code = "404", route = "GET /api/v1/jobs/{name}" }), 2,
     "http_requests_total from the router's counts")
-- The conductor's own figures, as every Prometheus client library names them.
T.ok(v("process_resident_memory_bytes") > 1e6, "process_resident_memory_bytes: this process's RSS")
T.ok(v("process_virtual_memory_bytes") >= v("process_resident_memory_bytes"), "process_virtual_memory_bytes >= RSS")
T.ok(v("process_cpu_seconds_total") >= 0, "process_cpu_seconds_total is exported")
do
  local _, _, cpu0 = metrics.process_stats()
  local t0, x = os.clock(), 0
  while os.clock() - t0 < 0.05 do x = x + 1 end
  local _, _, cpu1 = metrics.process_stats()
  T.ok(cpu1 - cpu0 >= 0.03, ("process_cpu_seconds_total follows the CPU used (%.2f s for 0.05 s of work)")
    :format(cpu1 - cpu0))
end
T.ok(v("baton_lua_memory_bytes") > 1e5, "baton_lua_memory_bytes: the Lua heap")
for _, f in pairs(fams) do
  T.ok(f.name:match("^baton_") or f.name:match("^process_"), f.name .. ": prefixed baton_ (or process_)")
  if f.name:match("_total$") then T.is(f.type, "counter", f.name .. ": a counter") end
end

-- Known up front: zeros, and no clock offset before it is measured.
local fresh = { metrics = metrics.for_node(), jobs = {}, bad = {}, started = 1, health = {} }
fams = X.parse(metrics.render(fresh))
T.is(X.value(fams, "baton_session_losses_total"), 0, "session_losses_total is 0 from the start")
T.is(X.value(fams, "baton_session_rejoins_total"), 0, "session_rejoins_total is 0 from the start")
T.is(X.value(fams, "baton_watch_resyncs_total"), 0, "watch_resyncs_total is 0 from the start")
T.is(X.value(fams, "baton_leader"), 0, "leader 0")
T.is(fams.baton_clock_offset_seconds, nil, "no clock offset sample before it is known")
T.is(fams.baton_runs_total, nil, "no per-job family before a job did something here")

-- A removed job takes its series with it; one put back meanwhile keeps its new ones.
node.leader = false
m:forget("job_name", "a")
m:forget("job_name", "b")
m:ended("b", "succeeded")
fams, problems = X.parse(metrics.render(node))
T.is_deeply(problems, {}, "well formed after forget")
T.is(X.sum(fams, "baton_runs_total", { job_name = "a" }), 0, "job a's runs are gone")
local _, na = X.sum(fams, "baton_run_duration_seconds", { job_name = "a" }, "baton_run_duration_seconds_count")
T.is(na, 0, "and its histograms")
T.is(X.value(fams, "baton_runs_total", { job_name = "b", state = "succeeded" }), 1,
     "job b, forgotten and counted again before the render, keeps its new series")
T.is(X.value(fams, "baton_claims_lost_total", { job_name = "b" }), nil, "but not its old ones")
T.is(X.value(fams, "baton_runs_total", { job_name = "c", state = "skipped" }), 4, "job c untouched")
T.is(X.value(fams, "baton_leader"), 0, "leader 0 once self.leader is false")

-- The outbox emptied: a job's series goes to 0 rather than away, and a
-- notifier loaded here (a job with on and a channel parameter) has one at
-- 0; before the first read, none at all.
do
  local m2 = metrics.for_node()
  local n2 = { metrics = m2, jobs = { mailer = { spec = { on = { failed = { "*" } }, params = { channel = "mail" } } },
                                      plain = { spec = { params = { channel = "x" } } } }, bad = {},
               health = {} }
  local t2 = metrics.render(n2)
  T.unlike(t2, "baton_notifications_pending", "notifications_pending: nothing before the outbox was read")
  n2.health.notify_pending = { ["notify-webhook"] = 2 }
  metrics.render(n2)
  n2.health.notify_pending = {}
  local f2 = X.parse(metrics.render(n2))
  T.is(X.value(f2, "baton_notifications_pending", { job_name = "notify-webhook" }), 0, "a job whose messages went: 0")
  T.is(X.value(f2, "baton_notifications_pending", { job_name = "mailer" }), 0, "a notifier loaded here: 0")
  T.is(X.value(f2, "baton_notifications_pending", { job_name = "plain" }), nil, "not a job without on")
end

---------------------------------------------------------------------------
-- 4. scale: 10,000 jobs that all did something on this node

local big = metrics.for_node()
local jobs = {}
for i = 1, 10000 do
  -- (names as they come: odd characters are escaped, never dropped)
  local name = i % 1000 == 0 and ('odd "name" \\ ' .. i) or ("job-%05d"):format(i)
  jobs[name] = { paused = i % 10 == 0 }
  big:run_started({ job = name, fire = 1000 }, { attempt = 1, started = 1000 + (i % 50) / 1000 })
  big:attempt_ended({ job = name }, { duration = i / 100, state = "succeeded" }, "succeeded", 1, nil)
  if i % 7 == 0 then big:attempt_ended({ job = name }, { duration = 1, state = "failed" }, "failed", 1, nil) end
  big:claim_lost(name)
end
local bnode = { metrics = big, jobs = jobs, bad = {}, started = baton.now(), max_workers = 16, health = {} }
metrics.render(bnode) -- (the first render sorts the new series)
local best, t_first = math.huge, nil
for _ = 1, 3 do
  local t0 = baton.monotime()
  text = metrics.render(bnode)
  local dt = baton.monotime() - t0
  t_first = t_first or dt
  if dt < best then best = dt end
end
local nlines = select(2, text:gsub("\n", ""))
T.diag(("render with 10,000 jobs' series: %.1f ms (best of 3), %d lines, %.1f MB"):format(
  best * 1e3, nlines, #text / 1e6))
-- (generous: the node renders this in tens of milliseconds; valgrind is
-- 50 times slower)
local bound = os.getenv("BATON_VALGRIND") == "1" and 30 or 2
T.ok(best < bound, ("render of 10,000 jobs' series under %g s (%.3f s)"):format(bound, best))
fams, problems = X.parse(text)
T.is(#problems, 0, "10,000 jobs' exposition well formed" .. (problems[1] and (": " .. problems[1]) or ""))
T.is(X.sum(fams, "baton_runs_total", { state = "succeeded" }), 10000, "every job's success counted")
T.is(X.value(fams, "baton_jobs", { state = "paused" }), 1000, "jobs paused: 1,000 of 10,000")
code, out = promtool(text)
T.is(code, 0, "promtool check metrics passes 10,000 jobs' exposition")
if code ~= 0 then T.diag(out:sub(1, 2000)) end

---------------------------------------------------------------------------
-- 5. the shipped alert rules and scrape config (docs/operations.md)

local dir = (os.getenv("BATON_ROOT") or ".") .. "/examples/prometheus"
for _, cmd in ipairs {
  { "promtool", "check", "rules", "alerts.yml" },
  { "promtool", "check", "config", "prometheus.yml" },
  -- (the alerts fire on sample series of a 2-node cluster, and not when
  -- nothing is wrong)
  { "promtool", "test", "rules", "alerts.test.yml" },
} do
  cmd.cwd, cmd.timeout = dir, 60
  local r = assert(baton.exec(cmd))
  if not T.is(r.code, 0, table.concat(cmd, " ", 1, 3) .. " " .. cmd[4]) then T.diag(r.stdout .. r.stderr) end
end
-- Every metric an alert uses is one the node exports.
local rules = assert(io.open(dir .. "/alerts.yml")):read("*a")
local exported = {}
for name in nt:gmatch("# TYPE (baton_[%w_]+)") do exported[name] = true end
local used = {}
for name in rules:gmatch("(baton_[%w_]+)") do
  local base = name:gsub("_bucket$", "")
  if not used[base] then
    used[base] = true
    T.ok(exported[base], "alerts.yml uses " .. base .. ", which the node exports")
  end
end

T.done()
