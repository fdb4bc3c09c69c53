-- baton node --http: the REST API, the probes and the static files, with
-- real nodes and curl (docs/api.md). Every route, each status it can
-- answer (200 201 202 400 401 403 404 405 409 413 422 503), tokens, the
-- read-only mode, and the API's bodies against the CLI's --json output for
-- the same state. Also: the node's --http usage errors, a bind failure,
-- HTTPS, and a node without --http listening on nothing.
local T = require "tap"
local N = require "nodes"
local F = require "files"
local H = require "etcdh"
local json = baton.json
local bin = os.getenv("BATON_BIN") or "bin/baton"
local eps = os.getenv("BATON_ENDPOINTS")

local c = N.new("httpapi")
local e, P, dir = c.e, c.P, c.dir
local TOKEN = "t0k3n-" .. tostring(math.floor(baton.now() * 1000))
F.write(dir .. "/token", TOKEN .. "\n")

-- A port nothing listens on now (bound and let go).
local free_port = N.free_port

-- One request with curl: {status, headers (lower-cased names), body, json}.
local n_req = 0
local function http(method, url, opts)
  opts = opts or {}
  n_req = n_req + 1
  local hf, bf = dir .. "/h" .. n_req, dir .. "/b" .. n_req
  local args = { "curl", "-sS", "-X", method, "-D", hf, "-o", bf, "-w", "%{http_code}", "--max-time", "30",
                 timeout = 40 }
  if opts.insecure then args[#args + 1] = "-k" end
  if opts.token then args[#args + 1] = "-H"; args[#args + 1] = "Authorization: Bearer " .. opts.token end
  for _, h in ipairs(opts.headers or {}) do args[#args + 1] = "-H"; args[#args + 1] = h end
  if opts.body then
    F.write(dir .. "/in" .. n_req, opts.body)
    args[#args + 1] = "--data-binary"; args[#args + 1] = "@" .. dir .. "/in" .. n_req
  end
  args[#args + 1] = url
  local r = assert(baton.exec(args))
  local res = { status = tonumber(r.stdout), headers = {}, body = F.read(bf) or "", err = r.stderr }
  for line in (F.read(hf) or ""):gmatch("[^\r\n]+") do
    local k, v = line:match("^([^:]+):%s*(.*)$")
    if k then res.headers[k:lower()] = v end
  end
  local ok, v = pcall(json.decode, res.body)
  if ok then res.json = v end
  os.remove(hf); os.remove(bf); os.remove(dir .. "/in" .. n_req)
  return res
end

-- The CLI on the test's prefix: stdout, stderr, status.
local function cli(...)
  local r = c:cli(...)
  return r.stdout, r.stderr, r.code
end

-- Decoded CLI --json output.
local function cli_json(...)
  local out, err, code = cli(...)
  if code ~= 0 then T.diag("baton " .. table.concat({ ... }, " ") .. ": " .. err) end
  return json.decode(out)
end

local function deep_equal(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= "table" then return a == b end
  for k, v in pairs(a) do if not deep_equal(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

-- Compares the API's body with the CLI's --json, again for a few seconds
-- while they differ (the node's view follows etcd by watches).
local function same_as_cli(path, args, name)
  local api, out
  local ok = N.wait(10, function()
    api = http("GET", path).json
    out = cli_json(unpack(args))
    return deep_equal(api, out)
  end)
  if not T.ok(ok, name) then
    T.diag("api: " .. json.encode(api))
    T.diag("cli: " .. json.encode(out))
  end
end

local function wait_ready(base, secs)
  return N.wait(secs or 20, function()
    local r = http("GET", base .. "/readyz")
    return r.status == 200 and r
  end)
end

local port1, port2 = free_port(), free_port()
local B1, B2 = "http://127.0.0.1:" .. port1, "http://127.0.0.1:" .. port2
c:start("n1", 3, ("--http 127.0.0.1:%d --http-token-file %s"):format(port1, dir .. "/token"))
c:start("n2", 3, ("--http 127.0.0.1:%d"):format(port2))
if not T.ok(wait_ready(B1) and wait_ready(B2), "both nodes answer /readyz 200") then
  T.diag(c:log("n1"))
  c:destroy()
  return T.done()
end

local function api(method, path, opts)
  opts = opts or {}
  if opts.token == nil and method ~= "GET" then opts.token = TOKEN end
  if opts.token == false then opts.token = nil end
  return http(method, (opts.base or B1) .. path, opts)
end

-- 1. Probes, info, metrics, static files.
do
  local r = api("GET", "/healthz")
  T.is(r.status, 200, "/healthz: 200")
  T.is_deeply(r.json, { status = "ok", node = "n1" }, "/healthz: status and node")
  T.like(r.headers["content-type"] or "", "^application/json", "/healthz: JSON")
  r = api("GET", "/readyz")
  T.is_deeply(r.json, { status = "ready", node = "n1" }, "/readyz: ready")
  r = api("GET", "/api/v1/info")
  T.is(r.status, 200, "info: 200")
  T.ok(r.json and r.json.node == "n1" and r.json.writable == true and type(r.json.time) == "number"
    and type(r.json.version) == "string", "info: node, version, writable, time")
  T.ok(r.json and (r.json.leader == "n1" or r.json.leader == "n2"), "info: the leader's name")
  T.is(api("GET", "/api/v1/info", { base = B2 }).json.writable, false, "info: writable false without a token file")
  r = api("GET", "/metrics")
  T.is(r.status, 200, "/metrics: 200")
  T.is(r.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8", "/metrics: Prometheus text 0.0.4")
  T.like(r.body, "\nbaton_build_info{", "/metrics: baton's series")
  for path, ct in pairs { ["/"] = "^text/html", ["/app.js"] = "^text/javascript", ["/style.css"] = "^text/css" } do
    r = api("GET", path)
    T.ok(r.status == 200 and (r.headers["content-type"] or ""):find(ct) and #r.body > 100,
      ("GET %s: 200, %s, the file (%s, %d bytes)"):format(path, ct, tostring(r.status), #r.body))
  end
  T.like(api("GET", "/").body, "<html", "GET /: the dashboard's page")
  r = api("POST", "/healthz")
  T.is(r.status, 405, "POST /healthz: 405")
  T.is(r.headers.allow, "GET, HEAD", "405: says which methods")
end

-- 2. Routes, methods, tokens.
do
  local r = api("GET", "/api/v1/nope")
  T.is(r.status, 404, "unknown route: 404")
  T.is(r.json and r.json.code, "ENOENT", "404: JSON with a code")
  T.like(r.json and r.json.error or "", "no such route: GET /api/v1/nope", "404: names the route")
  T.is(api("GET", "/nope.html").status, 404, "unknown file: 404")
  r = api("PATCH", "/api/v1/jobs")
  T.is(r.status, 405, "PATCH /api/v1/jobs: 405")
  T.is(r.json and r.json.code, "EMETHOD", "405: JSON with a code")
  T.is(api("DELETE", "/api/v1/jobs").status, 405, "DELETE /api/v1/jobs: 405")
  T.is(api("GET", "/api/v1/jobs/x/run").headers.allow, "POST", "GET of a POST route: 405 with Allow: POST")

  local src = 'return { schedule = "@manual", run = function() end }'
  r = api("PUT", "/api/v1/jobs/tok", { body = src, token = false })
  T.is(r.status, 401, "a write without a token: 401")
  T.like(r.headers["www-authenticate"] or "", "^Bearer", "401: WWW-Authenticate: Bearer")
  T.like(r.json and r.json.error or "", "Authorization: Bearer", "401: says which header")
  r = api("PUT", "/api/v1/jobs/tok", { body = src, token = TOKEN .. "x" })
  T.is(r.status, 401, "a wrong token: 401")
  T.is(r.json and r.json.code, "EAUTH", "401: code EAUTH")
  r = api("PUT", "/api/v1/jobs/tok", { body = src, headers = { "Authorization: Basic " .. TOKEN }, token = false })
  T.is(r.status, 401, "a token that is not a bearer token: 401")
  r = api("PUT", "/api/v1/jobs/tok", { body = src, base = B2 })
  T.is(r.status, 403, "a write to a node without a token file: 403")
  T.like(r.json and r.json.error or "", "start the node with %-%-http%-token%-file FILE to enable writes",
    "403: says how to enable writes")
  T.is(api("POST", "/api/v1/jobs/tok/run", { base = B2, token = false }).status, 403, "403 with no token given either")
  T.is(assert(e:get(P .. "jobs/tok")).count, 0, "nothing was stored by refused writes")
  T.is(api("GET", "/api/v1/jobs", { base = B2 }).status, 200, "reads need no token")
end

-- 3. PUT, GET, DELETE a job; validation; conflicts; names.
do
  local bad = 'return { schedule = "0 25 * * *", run = function() end }'
  F.write(dir .. "/broken.lua", bad)
  local _, cerr = cli("check", dir .. "/broken.lua")
  local want = cerr:match("^baton: check [^:]+: (.-)\n$")
  local r = api("PUT", "/api/v1/jobs/broken", { body = bad })
  T.is(r.status, 422, "PUT of an invalid job: 422")
  T.is(r.json and r.json.error, want, "422: the field's message, as baton check prints it")
  T.is(r.json and r.json.code, "EINVAL", "422: code EINVAL")
  T.is(r.json and r.json.field, "schedule", "422: and the field")
  T.is(assert(e:get(P .. "jobs/broken")).count, 0, "422: nothing stored")
  r = api("PUT", "/api/v1/jobs/broken", { body = "return {" })
  T.is(r.status, 422, "a syntax error: 422")
  T.like(r.json and r.json.error or "", "^EINVAL: job broken: syntax error: ", "422: the syntax error")
  r = api("PUT", "/api/v1/jobs/pol", { body = 'return { schedule = "@manual", policy = "hsah", run = function() end }' })
  T.is(r.status, 422, "an unknown policy: 422")
  T.like(r.json and r.json.error or "", 'did you mean "hash"%?', "with the closest name")
  T.is(api("PUT", "/api/v1/jobs/empty", { body = "" }).status, 400, "an empty body: 400")

  local src = [[
return {
  schedule = "@manual", timeout = 30,
  params = { who = "world" },
  run = function(ctx) print("hello " .. ctx.params.who); ctx.log.info("said hello", { who = ctx.params.who }) end,
}]]
  r = api("PUT", "/api/v1/jobs/hello", { body = src })
  T.is(r.status, 201, "PUT of a new job: 201")
  T.ok(r.json and r.json.name == "hello" and r.json.created == true and type(r.json.revision) == "number",
    "201: name, created, revision")
  local rev = r.json and r.json.revision
  T.is(assert(e:get(P .. "jobs/hello")).kvs[1].value, src, "stored byte for byte")
  local listed = api("GET", "/api/v1/jobs").json or {}
  T.ok(#listed == 1 and listed[1].name == "hello" and listed[1].revision == rev,
    "GET /api/v1/jobs right after the PUT lists it")
  r = api("PUT", "/api/v1/jobs/hello", { body = src .. "\n" })
  T.is(r.status, 200, "PUT of an existing job: 200")
  T.is(r.json and r.json.created, false, "200: created false")
  rev = r.json and r.json.revision
  r = api("PUT", "/api/v1/jobs/hello?revision=0", { body = src })
  T.is(r.status, 409, "PUT ?revision=0 of an existing job: 409")
  T.is(r.json and r.json.code, "EEXIST", "409: EEXIST")
  r = api("PUT", "/api/v1/jobs/hello?revision=" .. (rev - 1), { body = src })
  T.is(r.status, 409, "PUT ?revision=stale: 409")
  T.is(r.json and r.json.code, "ECONFLICT", "409: ECONFLICT")
  r = api("PUT", "/api/v1/jobs/hello?revision=" .. rev, { body = src })
  T.is(r.status, 200, "PUT ?revision=current: 200")
  rev = r.json and r.json.revision or rev
  T.is(api("PUT", "/api/v1/jobs/hello?revision=x", { body = src }).status, 400, "PUT ?revision=x: 400")
  T.is(api("PUT", "/api/v1/jobs/hello?bogus=1", { body = src }).status, 400, "an unknown query parameter: 400")

  r = api("PUT", "/api/v1/jobs/a%2Fb", { body = src })
  T.is(r.status, 400, "a name that decodes to a/b: 400")
  T.like(r.json and r.json.error or "", "invalid job name \"a/b\" %(letters, digits, '_', '%.', '%-'",
    "400: names the rule")
  T.is(api("GET", "/api/v1/jobs/%zz").status, 400, "bad percent-encoding: 400")
  r = api("GET", "/api/v1/jobs/h%65llo")
  T.ok(r.status == 200 and r.json.name == "hello", "a percent-encoded name is decoded")
  T.is(api("GET", "/api/v1/jobs/ghost").status, 404, "GET of a missing job: 404")

  -- A body over etcd's request limit: 413 from baton.ops; over the
  -- server's, 413 from the server.
  r = api("PUT", "/api/v1/jobs/big", { body = src .. "\n--" .. ("x"):rep(1600 * 1024) })
  T.is(r.status, 413, "a source over etcd's request limit: 413")
  T.like(r.json and r.json.error or "", "^EFBIG: the job source is 1%.6 MiB, larger than etcd's request limit",
    "413: says so")
  r = api("PUT", "/api/v1/jobs/big", { body = ("x"):rep(3 * 1024 * 1024) })
  T.is(r.status, 413, "a body over the server's limit: 413")
  T.is(assert(e:get(P .. "jobs/big")).count, 0, "413: nothing stored")

  T.ok(c:loaded("hello", rev), "the nodes loaded the job")
  same_as_cli(B1 .. "/api/v1/jobs/hello", { "job", "show", "hello", "--json" }, "GET /api/v1/jobs/hello = job show --json")
end

-- 4. Runs: run, history, recent runs, a run with its output, kill.
local run_id
do
  local r = api("POST", "/api/v1/jobs/hello/run", { body = "{" })
  T.is(r.status, 400, "run with a body that is not JSON: 400")
  T.like(r.json and r.json.error or "", "^EINVAL: the body is not JSON", "400: says so")
  T.is(api("POST", "/api/v1/jobs/hello/run", { body = "[1]" }).status, 400, "a body that is no object: 400")
  r = api("POST", "/api/v1/jobs/hello/run", { body = '{"prams":{}}' })
  T.is(r.status, 400, "an unknown field: 400")
  T.like(r.json and r.json.error or "", 'unknown field "prams"', "400: names it")
  r = api("POST", "/api/v1/jobs/hello/run", { body = '{"params":{"whom":"x"}}' })
  T.is(r.status, 400, "an unknown parameter: 400")
  T.like(r.json and r.json.error or "", 'unknown parameter "whom" %(did you mean "who"%?%)', "400: as the CLI says it")
  T.is(api("POST", "/api/v1/jobs/hello/run", { body = '{"params":{"who":1}}' }).status, 400,
    "a parameter that is not a string: 400")
  T.is(api("POST", "/api/v1/jobs/ghost/run").status, 404, "run of a missing job: 404")
  r = api("POST", "/api/v1/jobs/hello/run", { body = '{"params":{"who":"api"}}' })
  T.is(r.status, 202, "run: 202")
  T.ok(r.json and r.json.job == "hello" and type(r.json.id) == "string"
    and (r.json.key or ""):find(P .. "trigger/hello/", 1, true) == 1, "202: job, run id, trigger key")
  run_id = r.json and r.json.id
  local rec = N.wait(20, function()
    local kv = assert(e:get(P .. "runs/hello/" .. tostring(run_id))).kvs[1]
    local v = kv and json.decode(kv.value)
    return v and v.state == "succeeded" and v
  end)
  T.ok(rec, "the run asked for ran")
  T.is(rec and rec.params and rec.params.who, "api", "with the parameter given")

  r = api("GET", "/api/v1/jobs/hello/runs?limit=1")
  T.is(r.status, 200, "runs: 200")
  T.is(r.json and #r.json, 1, "runs?limit=1: one record")
  T.is(r.json and r.json[1] and r.json[1].key, run_id, "the newest, with its id as key")
  same_as_cli(B1 .. "/api/v1/jobs/hello/runs", { "job", "history", "hello", "--json" },
    "GET /api/v1/jobs/hello/runs = job history --json")
  for _, q in ipairs { "abc", "0", "1001", "-1", "1.5" } do
    T.is(api("GET", "/api/v1/jobs/hello/runs?limit=" .. q).status, 400, "runs?limit=" .. q .. ": 400")
  end
  T.is(api("GET", "/api/v1/jobs/ghost/runs").status, 404, "runs of a missing job: 404")

  r = api("GET", "/api/v1/runs?limit=5")
  T.is(r.status, 200, "recent runs: 200")
  T.ok(r.json and r.json[1] and r.json[1].job == "hello" and r.json[1].key == run_id,
    "recent runs: the newest first, with job and key")

  r = api("GET", "/api/v1/runs/hello/" .. tostring(run_id))
  T.is(r.status, 200, "a run: 200")
  T.is(r.json and r.json.state, "succeeded", "a run: its record")
  local outp = r.json and r.json.output or {}
  T.ok(#outp >= 2 and outp[1].text == "hello api" and outp[1].stream == "stdout" and outp[1].attempt == 1,
    "a run: its output lines, as job logs --json prints them")
  local lines = {}
  for l in (cli("job", "logs", "hello", run_id, "--json")):gmatch("[^\n]+") do lines[#lines + 1] = json.decode(l) end
  T.ok(deep_equal(outp, lines), "the output equals job logs --json, line for line")
  local enc = tostring(run_id):gsub(":", "%%3A")
  T.is(api("GET", "/api/v1/runs/hello/" .. enc).status, 200, "a percent-encoded run id")
  T.is(api("GET", "/api/v1/runs/hello/2020-01-01T00:00:00Z").status, 404, "a run that is not there: 404")
  T.is(api("GET", "/api/v1/runs/ghost/x").status, 404, "a run of a missing job: 404")
  T.is(api("GET", "/api/v1/runs/hello/" .. tostring(run_id) .. "?attempt=x").status, 400, "?attempt=x: 400")

  -- kill: nothing running is a conflict; a running run is asked to stop.
  r = api("POST", "/api/v1/jobs/hello/kill")
  T.is(r.status, 409, "kill with no run running: 409")
  T.like(r.json and r.json.error or "", "no run of job hello is running", "409: says so")
  api("PUT", "/api/v1/jobs/slow", { body = 'return { schedule = "@manual", run = function(ctx) baton.sleep(60) end }' })
  r = api("POST", "/api/v1/jobs/slow/run")
  local sid = r.json and r.json.id
  T.ok(N.wait(20, function() return assert(e:get(P .. "running/slow/" .. tostring(sid))).count > 0 end),
    "a slow run started")
  r = api("POST", "/api/v1/jobs/slow/kill?id=" .. tostring(sid):gsub(":", "%%3A"))
  T.is(r.status, 200, "kill: 200")
  T.is_deeply(r.json and r.json.killed, { sid }, "kill: the run asked to stop")
  local killed = N.wait(20, function()
    local kv = assert(e:get(P .. "runs/slow/" .. tostring(sid))).kvs[1]
    local v = kv and json.decode(kv.value)
    return v and v.state == "killed" and v
  end)
  T.ok(killed, "the run was killed")
  T.like(killed and killed.killed_by or "", "^http 127%.0%.0%.1:", "recorded as killed through the API")
  T.is(api("POST", "/api/v1/jobs/slow/kill?id=" .. tostring(sid)).status, 409, "kill of an ended run: 409")
  T.is(api("POST", "/api/v1/jobs/slow/kill?id=nope").status, 404, "kill of a run that is not there: 404")
  r = api("GET", "/api/v1/runs/slow/latest")
  T.ok(r.status == 200 and r.json.key == sid and r.json.state == "killed", "runs/JOB/latest: the newest run")
  api("PUT", "/api/v1/jobs/idle", { body = 'return { schedule = "@manual", run = function() end }' })
  r = api("GET", "/api/v1/runs/idle/latest")
  T.is(r.status, 404, "runs/JOB/latest of a job without runs: 404")
  T.like(r.json and r.json.error or "", "job idle has no runs yet", "404: says so")
end

-- 5. pause, resume; the listing against job ls --json; nodes; leader.
do
  local r = api("POST", "/api/v1/jobs/hello/pause")
  T.is(r.status, 200, "pause: 200")
  T.is_deeply(r.json, { job = "hello", paused = true, changed = true }, "pause: job, paused, changed")
  local listed = api("GET", "/api/v1/jobs").json or {}
  T.is(listed[1] and listed[1].paused, true, "GET /api/v1/jobs right after shows it paused")
  T.is(api("POST", "/api/v1/jobs/hello/pause").json.changed, false, "pause again: changed false")
  same_as_cli(B1 .. "/api/v1/jobs", { "job", "ls", "--json" }, "GET /api/v1/jobs = job ls --json (paused)")
  r = api("POST", "/api/v1/jobs/hello/resume")
  T.is_deeply(r.json, { job = "hello", paused = false, changed = true }, "resume")
  T.is(api("POST", "/api/v1/jobs/ghost/pause").status, 404, "pause of a missing job: 404")
  -- a raw put that does not validate, and one a node reports broken
  assert(e:put(P .. "jobs/rawbad", 'return { schedule = "every day", run = function() end }'))
  same_as_cli(B1 .. "/api/v1/jobs", { "job", "ls", "--json" }, "GET /api/v1/jobs = job ls --json (a broken raw put)")
  -- a good version loaded, then a broken one: the nodes run the good one
  local good = c:put_job("daily", 'return { schedule = "30 6 * * *", timezone = "Europe/Paris", run = function() end }')
  T.ok(c:loaded("daily", good), "the nodes loaded a good version")
  local badrev = assert(e:put(P .. "jobs/daily", 'return { schedule = "every day", run = function() end }')).revision
  T.ok(N.wait(10, function()
    local r = assert(e:get(P .. "status/daily/", { prefix = true }))
    local n = 0
    for _, kv in ipairs(r.kvs) do
      local st = json.decode(kv.value)
      if st.revision == badrev and st.error ~= json.null then n = n + 1 end
    end
    return n == 2
  end), "both nodes reported the broken version")
  same_as_cli(B1 .. "/api/v1/jobs", { "job", "ls", "--json" }, "GET /api/v1/jobs = job ls --json (broken, running rev)")
  local d
  for _, j in ipairs(api("GET", "/api/v1/jobs").json or {}) do if j.name == "daily" then d = j end end
  T.ok(d and d.broken and d.running_revision == good and d.schedule == "30 6 * * *",
    "a broken job shows the schedule and revision the nodes still run")
  same_as_cli(B2 .. "/api/v1/jobs", { "job", "ls", "--json" }, "and on the other node")
  local by = {}
  for _, j in ipairs(api("GET", "/api/v1/jobs").json or {}) do by[j.name] = j end
  T.ok(by.hello and by.hello.last and by.hello.last.run == run_id and by.hello.last.state == "succeeded",
    "the last run of a job (from P last/)")
  T.ok(by.rawbad and by.rawbad.broken == true and (by.rawbad.error or ""):find("field 'schedule'"),
    "a broken job with its error")
  same_as_cli(B1 .. "/api/v1/nodes", { "nodes", "--json" }, "GET /api/v1/nodes = nodes --json")
  same_as_cli(B1 .. "/api/v1/leader", { "leader", "--json" }, "GET /api/v1/leader = leader --json")
end

-- 6. Policies and queues.
do
  same_as_cli(B1 .. "/api/v1/policies", { "policy", "ls", "--json" }, "GET /api/v1/policies = policy ls --json")
  local pol = 'return { description = "eu first", claim_delay = function() return 0 end }'
  local r = api("PUT", "/api/v1/policies/near", { body = pol })
  T.is(r.status, 201, "PUT of a new policy: 201")
  T.ok(r.json and r.json.name == "near" and r.json.created == true, "201: name, created")
  T.is(api("PUT", "/api/v1/policies/near", { body = pol }).status, 200, "PUT again: 200")
  r = api("PUT", "/api/v1/policies/typo", { body = "return { claim_dealy = function() return 0 end }" })
  T.is(r.status, 422, "an invalid policy: 422")
  T.like(r.json and r.json.error or "", "claim_dealy", "422: the policy's error")
  T.is(assert(e:get(P .. "policies/typo")).count, 0, "422: nothing stored")
  same_as_cli(B1 .. "/api/v1/policies/near", { "policy", "show", "near", "--json" },
    "GET /api/v1/policies/near = policy show --json")
  T.is(api("GET", "/api/v1/policies/hash").status, 200, "a built-in policy: 200")
  T.is(api("GET", "/api/v1/policies/nothere").status, 404, "a policy that is neither: 404")
  r = api("DELETE", "/api/v1/policies/near")
  T.is(r.status, 200, "DELETE of a policy: 200")
  T.is(r.json and r.json.removed, true, "removed")
  T.is(api("DELETE", "/api/v1/policies/near").status, 404, "DELETE again: 404")

  r = api("POST", "/api/v1/queues/orders/tasks", { body = '{"id":7}' })
  T.is(r.status, 201, "queue push: 201")
  T.ok(r.json and r.json.queue == "orders" and (r.json.key or ""):find(P .. "queue/orders/", 1, true) == 1,
    "201: queue and key")
  T.is(r.json and r.json.key and assert(e:get(r.json.key)).kvs[1].value, '{"id":7}', "the task stored as given")
  T.is(api("POST", "/api/v1/queues/bad%20q/tasks", { body = "x" }).status, 400, "an invalid queue name: 400")
  r = api("POST", "/api/v1/queues/orders/tasks", { body = "a\0b" })
  T.is(r.status, 400, "a task with a NUL byte: 400")
  T.like(r.json and r.json.error or "", "^EINVAL: a task cannot hold a NUL byte; nothing was stored$", "400: says why")
  T.is(api("POST", "/api/v1/queues/orders/tasks", { body = ("x"):rep(1600 * 1024) }).status, 413,
    "a task over etcd's request limit: 413")
  r = api("POST", "/api/v1/queues/orders/tasks", { body = "y", token = false,
                                                   headers = { "Authorization: BEARER " .. TOKEN } })
  T.is(r.status, 201, "the scheme's case does not matter")
end

-- 6b. The CLI's writes with --json print what the API answers.
do
  local function keys(t)
    local l = {}
    for k in pairs(type(t) == "table" and t or {}) do l[#l + 1] = k end
    table.sort(l)
    return table.concat(l, ",")
  end
  local src = 'return { schedule = "@manual", run = function() end }'
  F.write(dir .. "/w.lua", src)
  local pairs_ = {
    { cli = { "job", "put", dir .. "/w.lua", "--json" }, api = { "PUT", "/api/v1/jobs/w", src }, what = "job put" },
    { cli = { "job", "pause", "w", "--json" }, api = { "POST", "/api/v1/jobs/w/pause" }, what = "job pause" },
    { cli = { "job", "resume", "w", "--json" }, api = { "POST", "/api/v1/jobs/w/resume" }, what = "job resume" },
    { cli = { "job", "run", "w", "--json" }, api = { "POST", "/api/v1/jobs/w/run" }, what = "job run" },
    { cli = { "queue", "push", "q", "v", "--json" }, api = { "POST", "/api/v1/queues/q/tasks", "v" }, what = "queue push" },
    { cli = { "policy", "put", dir .. "/w.lua", "--name", "pw", "--json" }, what = "policy put",
      api = { "PUT", "/api/v1/policies/pw", "return { claim_delay = function() return 0 end }" } },
  }
  F.write(dir .. "/w.lua", src)
  for _, pr in ipairs(pairs_) do
    if pr.what == "policy put" then F.write(dir .. "/w.lua", pr.api[3]) end
    local got = cli_json(unpack(pr.cli))
    local r = api(pr.api[1], pr.api[2], { body = pr.api[3] })
    T.ok(keys(got) ~= "" and keys(got) == keys(r.json), ("baton %s --json and %s %s: the same fields (%s | %s)")
      :format(pr.what, pr.api[1], pr.api[2], keys(got), keys(r.json)))
  end
  local got = cli_json("job", "rm", "w", "--json")
  T.is_deeply(got, { name = "w", removed = true, purged = 0 }, "baton job rm --json: the body of DELETE")
  got = cli_json("policy", "rm", "pw", "--json")
  T.is_deeply(got, { name = "pw", removed = true, now = "the default policy" }, "baton policy rm --json: the body of DELETE")
end

-- 7. DELETE a job; the request counts in /metrics.
do
  T.is(api("DELETE", "/api/v1/jobs/hello?purge=maybe").status, 400, "purge=maybe: 400")
  local r = api("DELETE", "/api/v1/jobs/hello?purge=1")
  T.is(r.status, 200, "DELETE ?purge=1: 200")
  T.is(r.json and r.json.removed, true, "removed")
  T.is(r.json and r.json.purged, 1, "purged: its one record")
  T.is(assert(e:get(P .. "last/hello")).count, 0, "its last/ entry went too")
  local listed = api("GET", "/api/v1/jobs").json or {}
  local still = false
  for _, j in ipairs(listed) do if j.name == "hello" then still = true end end
  T.ok(not still, "GET /api/v1/jobs right after no longer lists it")
  T.is(api("GET", "/api/v1/jobs/hello").status, 404, "GET after DELETE: 404")
  T.is(api("DELETE", "/api/v1/jobs/hello").status, 404, "DELETE again: 404")
  local m = api("GET", "/metrics").body
  T.like(m, '\nbaton_http_requests_total{code="201",route="/api/v1/jobs/{name}"} %d', "/metrics counts requests by route and code")
  T.like(m, '\nbaton_http_requests_total{code="404",route="other"} %d', "unknown routes count as route other")
end

-- 8. --http on the command line: usage errors, files, the address in use,
-- HTTPS, and no --http, no listener.
do
  local function node(...)
    local args = { bin, "--endpoints", eps, "--prefix", P, "node", "--name", "x1", "--ttl", "3", timeout = 30 }
    for _, a in ipairs { ... } do args[#args + 1] = a end
    return assert(baton.exec(args))
  end
  local r = node("--http", "127.0.0.1:1", "--http-cert", dir .. "/token")
  T.is(r.code, 2, "--http-cert without --http-key: usage error")
  T.like(r.stderr, "^baton: node: %-%-http%-cert needs %-%-http%-key\nusage: ", "says so")
  r = node("--http-token-file", dir .. "/token")
  T.is(r.code, 2, "--http-token-file without --http: usage error")
  r = node("--http", "127.0.0.1:" .. free_port(), "--http-token-file", dir .. "/missing")
  T.is(r.code, 1, "an unreadable token file: exit 1")
  T.like(r.stderr, "^baton: node x1: ENOENT: %-%-http%-token%-file .-missing: No such file or directory\n$",
    "one line naming the file, and why: no such file (not EACCES)")
  F.write(dir .. "/empty", "\n")
  r = node("--http", "127.0.0.1:" .. free_port(), "--http-token-file", dir .. "/empty")
  T.is(r.code, 1, "an empty token file: exit 1")
  T.like(r.stderr, "^baton: node x1: EINVAL: %-%-http%-token%-file .-empty is empty", "one line")
  r = node("--http", "127.0.0.1:" .. port1)
  T.is(r.code, 1, "an address in use: exit 1")
  T.is(r.stderr, "baton: node x1: --http: EADDRINUSE: 127.0.0.1:" .. port1 .. ": address already in use\n",
    "one line naming the address")
  T.is(assert(e:get(P .. "nodes/x1")).count, 0, "and the node is not left registered")

  local ssl = assert(baton.exec { "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", dir .. "/key.pem", "-out", dir .. "/cert.pem",
    "-days", "2", "-subj", "/CN=localhost", timeout = 30 })
  if ssl.code == 0 then
    local port = free_port()
    c:start("tls", 3, ("--http 127.0.0.1:%d --http-cert %s --http-key %s --http-token-file %s")
      :format(port, dir .. "/cert.pem", dir .. "/key.pem", dir .. "/token"))
    local base = "https://127.0.0.1:" .. port
    local ok = N.wait(20, function() return http("GET", base .. "/readyz", { insecure = true }).status == 200 end)
    T.ok(ok, "HTTPS: /readyz over TLS")
    r = http("GET", base .. "/api/v1/info", { insecure = true })
    T.is(r.json and r.json.node, "tls", "HTTPS: the API")
    r = http("POST", base .. "/api/v1/jobs/slow/pause", { insecure = true, token = TOKEN })
    T.is(r.status, 200, "HTTPS: a write with the token")
    T.isnt(http("GET", "http://127.0.0.1:" .. port .. "/healthz").status, 200, "HTTPS: no plain HTTP on it")
    c:stop("tls")
  else
    T.skip("openssl cannot make a certificate: " .. ssl.stderr, 4)
  end

  c:start("quiet", 3)
  T.ok(N.wait(10, function() return assert(e:get(P .. "nodes/quiet")).count > 0 end), "a node without --http runs")
  local ss = assert(baton.exec { "ss", "-Hltnp" })
  T.unlike(ss.stdout, "pid=" .. c:pid("quiet") .. ",", "and listens on nothing")
  c:stop("quiet")
end

-- 9. /readyz 503: a node whose etcd stops.
-- (last: nodes.lua then starts every node on the private etcd)
do
  local srv = H.start()
  local c2 = N.new("httpapi-ready", srv.url)
  local port = free_port()
  c2:start("r1", 3, "--http 127.0.0.1:" .. port)
  local base = "http://127.0.0.1:" .. port
  if not T.ok(wait_ready(base), "a node on a private etcd: ready") then T.diag(c2:log("r1")) end
  srv:stop()
  local r = N.wait(20, function()
    local x = http("GET", base .. "/readyz")
    return x.status == 503 and x
  end)
  T.ok(r, "/readyz: 503 once etcd is gone")
  T.ok(r and r.json and r.json.status == "not ready" and type(r.json.reason) == "string" and r.json.node == "r1",
    "503: status, reason, node (" .. tostring(r and r.json and r.json.reason) .. ")")
  T.is(http("GET", base .. "/healthz").status, 200, "/healthz: still 200 (the loop answers)")
  r = http("GET", base .. "/api/v1/nodes")
  T.is(r.status, 503, "an API read with etcd gone: 503")
  c2:stop("r1")
  srv:destroy()
  baton.exec { "rm", "-rf", c2.dir }
end

c:destroy()
T.done()
