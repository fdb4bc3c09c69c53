-- GET /metrics of real nodes, checked by Prometheus' own tools: two nodes
-- with --http on loopback run a job every second and one that fails;
-- `curl URL/metrics | promtool check metrics` passes on both, the series of
-- docs/operations.md are there with values that match the run records in
-- etcd, and a real Prometheus started here scrapes both nodes and answers
-- a PromQL query with the runs of the job that ran. Prometheus and its
-- directory are removed at the end, also on failure.
local T = require "tap"
local N = require "nodes"
local X = require "exposition"
local files = require "files"

-- n distinct free ports on 127.0.0.1, outside the kernel's ephemeral range
-- (an outgoing connection could take one meanwhile).
local function free_ports(n)
  local used = {}
  for _, f in ipairs { "/proc/net/tcp", "/proc/net/tcp6" } do
    local fh = io.open(f)
    if fh then
      for hex in fh:read("*a"):gmatch("\n%s*%d+: %x+:(%x+)") do used[tonumber(hex, 16)] = true end
      fh:close()
    end
  end
  local elo, ehi = 32768, 60999
  local fh = io.open("/proc/sys/net/ipv4/ip_local_port_range")
  if fh then
    elo, ehi = fh:read("*n", "*n")
    fh:close()
  end
  local ports = {}
  math.randomseed(baton.monotime() * 1e6 % 2 ^ 31)
  while #ports < n do
    local p = math.random(20000, 60999)
    if not used[p] and not (p >= elo and p <= ehi) then
      used[p] = true
      ports[#ports + 1] = p
    end
  end
  return ports
end

local function sh(cmd, timeout)
  return assert(baton.exec { "bash", "-c", "set -o pipefail; " .. cmd, timeout = timeout or 30 })
end

-- The body of a GET (nil unless 2xx) and the response's head. (-i, not
-- -D /dev/stderr: a child's stderr here is a socket, which cannot be
-- opened again by name.)
local function curl(url, timeout)
  local r = sh("curl -sSfi --max-time " .. (timeout or 5) .. " " .. ("%q"):format(url))
  local head, body = r.stdout:match("^(.-\r\n)\r\n(.*)$")
  return r.code == 0 and body or nil, head
end

local c = N.new("httpprom")
local ports = free_ports(3)
local url = { a = "http://127.0.0.1:" .. ports[1], b = "http://127.0.0.1:" .. ports[2] }
local prom_url = "http://127.0.0.1:" .. ports[3]
local prom, prom_dir

local function main()
  c:start("a", 3, "--http 127.0.0.1:" .. ports[1])
  c:start("b", 3, "--http 127.0.0.1:" .. ports[2])
  local up = N.wait(20, function()
    return curl(url.a .. "/healthz") and curl(url.b .. "/healthz")
  end)
  if not T.ok(up, "both nodes answer /healthz") then
    T.diag(c:log("a"))
    return
  end
  local rev = c:put_job("tick", [[return { schedule = "* * * * * *", run = function(ctx) end }]])
  local rev2 = c:put_job("boom", [[
return { schedule = "* * * * * *", concurrency = "allow",
         run = function(ctx) error("boom on purpose") end }]])
  T.ok(c:loaded("tick", rev) and c:loaded("boom", rev2), "both jobs loaded on both nodes")

  local function count(job, state)
    local by = { a = 0, b = 0 }
    for _, rec in ipairs(c:records(job)) do
      if rec.state == state and by[rec.node] then by[rec.node] = by[rec.node] + 1 end
    end
    return by
  end
  T.ok(N.wait(30, function() local n = count("tick", "succeeded"); return n.a + n.b >= 4 end),
       "tick ran on the cluster")
  T.ok(N.wait(30, function() local n = count("boom", "failed"); return n.a + n.b >= 2 end),
       "boom failed")

  -- Paused, with nothing in flight, the records stop changing: each
  -- node's counters must then match the records it wrote, exactly.
  T.is(c:cli("job", "pause", "tick").code + c:cli("job", "pause", "boom").code, 0, "both jobs paused")
  T.ok(N.wait(15, function()
    return assert(c.e:get(c.P .. "inflight/", { prefix = true, count_only = true })).count == 0
  end), "no run in flight")
  baton.sleep(0.5)
  local recs = { tick = count("tick", "succeeded"), boom = count("boom", "failed") }

  -- 1. the text of each node: promtool, our reader, content type
  local fams = {}
  for _, n in ipairs { "a", "b" } do
    local r = sh("curl -sS --max-time 10 " .. url[n] .. "/metrics | promtool check metrics")
    if not T.is(r.code, 0, "node " .. n .. ": curl /metrics | promtool check metrics exits 0") then
      T.diag(r.stdout .. r.stderr)
    end
    local text, head = curl(url[n] .. "/metrics", 10)
    T.like(head or "", "\n[Cc]ontent%-[Tt]ype: text/plain; version=0%.0%.4; charset=utf%-8\r\n",
           "node " .. n .. ": content type of format 0.0.4")
    local problems
    fams[n], problems = X.parse(text or "")
    T.is_deeply(problems, {}, "node " .. n .. ": well formed (families grouped, buckets cumulative, +Inf == _count)")
  end

  local function v(n, name, labels, sample) return X.value(fams[n], name, labels, sample) or 0 end
  local function both(name, labels, sample)
    return X.sum(fams.a, name, labels, sample) + X.sum(fams.b, name, labels, sample)
  end
  -- Each node counts the final records it wrote.
  for _, n in ipairs { "a", "b" } do
    T.is(v(n, "baton_runs_total", { job_name = "tick", state = "succeeded" }), recs.tick[n],
         ("node %s: runs_total{tick,succeeded} = its succeeded records of tick (%d)"):format(n, recs.tick[n]))
    T.is(v(n, "baton_runs_total", { job_name = "boom", state = "failed" }), recs.boom[n],
         ("node %s: runs_total{boom,failed} = its failed records of boom (%d)"):format(n, recs.boom[n]))
  end
  T.ok(both("baton_runs_total", { job_name = "tick", state = "succeeded" }) > 0,
       "runs_total of tick > 0 summed over the nodes")
  T.ok(both("baton_runs_total", { job_name = "boom", state = "failed" }) > 0, "boom's failed runs counted")
  T.is(both("baton_runs_total", { job_name = "boom", state = "succeeded" }), 0, "and no success of boom")
  T.is(v("a", "baton_leader") + v("b", "baton_leader"), 1, "leader 1 on exactly one node")
  T.ok(both("baton_claims_lost_total", { job_name = "tick" }) > 0,
       "claims lost: both nodes claim every instant, one wins")
  T.ok(both("baton_fire_lateness_seconds", { job_name = "tick" }, "baton_fire_lateness_seconds_count") > 0,
       "fire lateness observed for tick")
  T.ok(both("baton_run_duration_seconds", { job_name = "boom" }, "baton_run_duration_seconds_count") > 0,
       "run duration observed for boom")
  for _, n in ipairs { "a", "b" } do
    local f = fams[n]
    T.is(v(n, "baton_build_info", { version = baton.version }), 1, "node " .. n .. ": build_info{version} 1")
    T.is(v(n, "baton_jobs", { state = "loaded" }), 2, "node " .. n .. ": 2 jobs loaded")
    T.is(v(n, "baton_jobs", { state = "broken" }), 0, "node " .. n .. ": none broken")
    T.ok(f.baton_workers and f.baton_workers.type == "gauge", "node " .. n .. ": workers gauge")
    T.is(v(n, "baton_session_losses_total"), 0, "node " .. n .. ": no session lost")
    T.ok(f.baton_session_rejoins_total and f.baton_watch_resyncs_total, "node " .. n .. ": rejoins and resyncs at 0")
    T.ok(X.sum(f, "baton_etcd_request_duration_seconds", { operation = "txn" },
               "baton_etcd_request_duration_seconds_count") > 0, "node " .. n .. ": etcd txn latency")
    local start = v(n, "baton_node_start_time_seconds")
    T.ok(start > baton.now() - 300 and start <= baton.now(), "node " .. n .. ": start time is recent")
    T.ok(f.baton_clock_offset_seconds, "node " .. n .. ": clock offset measured")
  end

  -- 2. a real Prometheus scraping both nodes
  prom_dir = sh('mktemp -d "${BATON_TEST_TMP:-/tmp}/prometheus.XXXXXX"').stdout:gsub("%s+$", "")
  local cfg = prom_dir .. "/prometheus.yml"
  files.write(cfg, ([[
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: baton
    static_configs: [{targets: ['127.0.0.1:%d', '127.0.0.1:%d']}]
]]):format(ports[1], ports[2]))
  local chk = sh("promtool check config " .. cfg)
  T.is(chk.code, 0, "promtool check config")
  prom = assert(baton.spawn { "sh", "-c", ("exec prometheus --config.file=%s --storage.tsdb.path=%s/data "
    .. "--web.listen-address=127.0.0.1:%d --log.level=warn >%s/prometheus.log 2>&1"):format(
      cfg, prom_dir, ports[3], prom_dir), stdio = "null" })
  local ready = N.wait(30, function() return curl(prom_url .. "/-/ready") end)
  if not T.ok(ready, "Prometheus is ready") then
    T.diag(files.read(prom_dir .. "/prometheus.log") or "")
    return
  end
  local function query(q)
    local r = sh(("curl -sS --max-time 5 %s/api/v1/query --data-urlencode %q"):format(prom_url, "query=" .. q))
    local ok, body = pcall(baton.json.decode, r.stdout)
    return ok and type(body) == "table" and body.status == "success" and body.data.result or nil
  end
  local result = N.wait(30, function()
    local res = query('sum by (job_name) (baton_runs_total{state="succeeded"})')
    for _, s in ipairs(res or {}) do
      if s.metric.job_name == "tick" and tonumber(s.value[2]) > 0 then return s end
    end
  end)
  if T.ok(result, 'PromQL sum by (job_name) (baton_runs_total{state="succeeded"}) returns tick') then
    T.ok(tonumber(result.value[2]) > 0, "with a value > 0 (" .. tostring(result.value[2]) .. ")")
  end
  local targets = N.wait(15, function()
    local res = query('up{job="baton"} == 1')
    return res and #res == 2 and res
  end)
  T.ok(targets, "Prometheus scrapes both nodes (up == 1 for each)")
  local leaders = query("sum(baton_leader)")
  T.is(leaders and leaders[1] and tonumber(leaders[1].value[2]), 1, "sum(baton_leader) == 1 in Prometheus")
  local failed = query('sum by (job_name) (baton_runs_total{state="failed"})')
  local boom
  for _, s in ipairs(failed or {}) do if s.metric.job_name == "boom" then boom = s end end
  T.ok(boom and tonumber(boom.value[2]) > 0, "and the failed runs of boom")

  -- 3. a session lost and renewed: node b stopped past its lease (TTL 3 s)
  c:signal("b", "STOP")
  baton.sleep(5)
  c:signal("b", "CONT")
  local seen = N.wait(20, function()
    local f = X.parse(curl(url.b .. "/metrics") or "")
    return (X.value(f, "baton_session_rejoins_total") or 0) >= 1 and f
  end)
  T.ok(seen, "node b: session_rejoins_total 1 after it was stopped past its lease")
  T.is(seen and X.value(seen, "baton_session_losses_total"), 1, "node b: session_losses_total 1")
  T.is(X.value(X.parse(curl(url.a .. "/metrics") or ""), "baton_session_losses_total"), 0,
       "node a: none")
end

local ok, err = xpcall(main, debug.traceback)
if prom then
  prom:kill("SIGTERM")
  if not prom:wait(10) then prom:kill("SIGKILL"); prom:wait() end
end
if prom_dir and prom_dir:match("/prometheus%.%w+$") then baton.exec { "rm", "-rf", prom_dir } end
c:destroy()
T.ok(ok, "no error in the test" .. (ok and "" or (": " .. tostring(err))))
T.done()
