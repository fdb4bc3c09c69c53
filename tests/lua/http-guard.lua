-- baton node --http against hostile requests (issue 22, findings 7, 8
-- and 10), with real nodes, curl and raw sockets (bash /dev/tcp):
--   1. the Host header: DNS rebinding gets 421 on every route; loopback
--      names, the listen address, IP literals on a wildcard listen and
--      --http-allow-host names pass; HTTP/1.0 without Host passes;
--   2. CSP, X-Frame-Options, nosniff, no-referrer on every answer;
--   3. a write without a valid token is answered 401 at its headers,
--      its body never read: 40 such uploads of 2 MiB leave the node's
--      RSS where it was; authenticated uploads are bounded all together
--      (503 EBUSY), and a large one still works up to the limit;
--   4. bytes that cannot be in a name or a query (NUL, control, non-ASCII)
--      and other bad input get 400 with a one-line JSON error, never 500;
--   5. random requests fed to the request layer (node/http.lua admit):
--      never an error, only a plan or a 4xx.
local T = require "tap"
local N = require "nodes"
local F = require "files"
local json = baton.json
local http_mod = require "baton.node.http"
local bin = os.getenv("BATON_BIN") or "bin/baton"
local eps = os.getenv("BATON_ENDPOINTS")

local c = N.new("httpguard")
local e, P, dir = c.e, c.P, c.dir
local TOKEN = "guard-" .. tostring(math.floor(baton.now() * 1000))
F.write(dir .. "/token", TOKEN .. "\n")

local free_port = N.free_port

-- One request with curl: {status, headers (lower-cased names), body, json}.
local n_req = 0
local function http(method, url, opts)
  opts = opts or {}
  n_req = n_req + 1
  local hf, bf = dir .. "/h" .. n_req, dir .. "/b" .. n_req
  local args = { "curl", "-sS", "-X", method, "-D", hf, "-o", bf, "-w", "%{http_code}", "--max-time", "30",
                 timeout = 40 }
  if opts.token then args[#args + 1] = "-H"; args[#args + 1] = "Authorization: Bearer " .. opts.token end
  if opts.host then args[#args + 1] = "-H"; args[#args + 1] = "Host: " .. opts.host end
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

-- Sends the bytes of text on a new connection to port and returns what
-- came back within secs (and whether the server closed the connection).
local function raw(port, text, secs)
  n_req = n_req + 1
  local f = dir .. "/raw" .. n_req
  F.write(f, text)
  local r = assert(baton.exec { "bash", "-c", ("exec 3<>/dev/tcp/127.0.0.1/%d; cat %q >&3; timeout %s cat <&3; " ..
    "echo \" rc=$?\""):format(port, f, secs or 5), timeout = 30 })
  os.remove(f)
  return r.stdout, r.stdout:match(" rc=0\n$") ~= nil
end

local function rss_kb(pid)
  local s = F.read("/proc/" .. pid .. "/status") or ""
  return tonumber(s:match("VmRSS:%s*(%d+)")) or 0
end

local function wait_ready(base, opts)
  return N.wait(20, function() return http("GET", base .. "/readyz", opts).status == 200 end)
end

-- n1: loopback, writable; n2: all interfaces, with two allowed names; n3:
-- one specific address (127.0.0.2, a loopback address that is not a name).
local p1, p2, p3 = free_port(), free_port(), free_port()
local B1, B2, B3 = "http://127.0.0.1:" .. p1, "http://127.0.0.1:" .. p2, "http://127.0.0.2:" .. p3
c:start("n1", 3, ("--http 127.0.0.1:%d --http-token-file %s"):format(p1, dir .. "/token"))
c:start("n2", 3, ("--http :%d --http-allow-host baton.example --http-allow-host Dash.Example.ORG"):format(p2))
c:start("n3", 3, ("--http 127.0.0.2:%d"):format(p3))
if not T.ok(wait_ready(B1) and wait_ready(B2) and wait_ready(B3, { host = "127.0.0.2:" .. p3 }),
  "three nodes answer /readyz") then
  T.diag(c:log("n1") .. c:log("n2") .. c:log("n3"))
  c:destroy()
  return T.done()
end
local pid1 = c:pid("n1")

-- 1. Host.
do
  local routes = { "/", "/index.html", "/app.js", "/style.css", "/healthz", "/readyz", "/metrics",
                   "/api/v1/info", "/api/v1/jobs", "/api/v1/jobs/x", "/api/v1/runs", "/api/v1/runs/x/y",
                   "/api/v1/nodes", "/api/v1/leader", "/api/v1/policies", "/api/v1/policies/hash",
                   "/api/v1/jobs/x/runs", "/api/v1/jobs/x/versions", "/nope" }
  local bad = {}
  for _, path in ipairs(routes) do
    local r = http("GET", B1 .. path, { host = "rebind.attacker.test:" .. p1 })
    if r.status ~= 421 or not r.json or r.json.code ~= "EHOST" then bad[#bad + 1] = path .. " " .. r.status end
  end
  T.is(table.concat(bad, ", "), "", "a rebound name gets 421 EHOST on every route (" .. #routes .. ")")
  local r = http("GET", B1 .. "/api/v1/jobs", { host = "rebind.attacker.test:" .. p1 })
  T.is(r.json and r.json.error, 'EHOST: this node does not answer to the name "rebind.attacker.test" (it answers to '
    .. 'localhost, 127.0.0.1, [::1]): start it with --http-allow-host rebind.attacker.test to allow it',
    "421: one line saying which names it answers to, and how to allow one")
  T.like(r.headers["content-type"] or "", "^application/json", "421 is JSON")
  r = http("PUT", B1 .. "/api/v1/jobs/rebound", { host = "rebind.attacker.test", token = TOKEN,
                                                  body = 'return { schedule = "@manual", run = function() end }' })
  T.is(r.status, 421, "a write with the right token but a rebound name: 421")
  T.is(assert(e:get(P .. "jobs/rebound")).count, 0, "nothing stored")
  T.like(raw(p1, "HEAD / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"), "^HTTP/1%.1 421 ",
    "HEAD too")

  local good = {}
  for _, h in ipairs { "127.0.0.1:" .. p1, "localhost:" .. p1, "[::1]:" .. p1, "LOCALHOST:" .. p1, "127.0.0.1",
                       "localhost:9000" } do
    local x = http("GET", B1 .. "/api/v1/info", { host = h })
    if x.status ~= 200 then good[#good + 1] = h .. " " .. x.status end
  end
  T.is(table.concat(good, ", "), "", "loopback names pass, with any port (an ssh tunnel's, a port-forward's)")
  T.is(http("GET", B1 .. "/healthz", { host = "10.0.0.1:" .. p1 }).status, 421,
    "another IP address on a loopback listen: 421")
  T.is(http("GET", B1 .. "/healthz", { host = "127.0.0.1:" .. p1 .. ":1" }).status, 400, "a malformed Host: 400")
  T.is(http("GET", B1 .. "/healthz", { host = "a b" }).status, 400, "a Host with a space: 400")
  local out = raw(p1, "GET /healthz HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
  T.like(out, "^HTTP/1%.1 400 ", "two Host headers: 400")
  out = raw(p1, "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
  T.like(out, "^HTTP/1%.1 400 .-an HTTP/1%.1 request needs a Host header", "HTTP/1.1 without Host: 400, saying so")
  out = raw(p1, "GET /healthz HTTP/1.0\r\n\r\n")
  T.like(out, '^HTTP/1%.%d 200 .-"status":"ok"', "HTTP/1.0 without Host (no browser sends that): 200")

  -- all interfaces: IP literals (Prometheus, a kubelet), the allowed names
  for _, h in ipairs { "10.1.2.3:" .. p2, "192.168.0.9", "[fd00::5]:" .. p2, "baton.example", "BATON.example:80",
                       "dash.example.org:" .. p2, "localhost:" .. p2 } do
    T.is(http("GET", B2 .. "/metrics", { host = h }).status, 200, "all interfaces: Host " .. h .. " passes")
  end
  for _, h in ipairs { "other.example", "baton.example.evil", "999.1.1.1", "10.1.2.3.nip.io" } do
    T.is(http("GET", B2 .. "/metrics", { host = h }).status, 421, "all interfaces: Host " .. h .. ": 421")
  end
  r = http("GET", B2 .. "/healthz", { host = "other.example" })
  T.like(r.json and r.json.error or "", "it answers to localhost, 127%.0%.0%.1, %[::1%], any IP address, "
    .. "baton%.example, dash%.example%.org%)", "421 lists what it answers to")
  -- one address
  T.is(http("GET", B3 .. "/healthz", { host = "127.0.0.2:" .. p3 }).status, 200, "one address: its own passes")
  T.is(http("GET", B3 .. "/healthz", { host = "localhost:" .. p3 }).status, 200, "and loopback names")
  T.is(http("GET", B3 .. "/healthz", { host = "10.1.2.3:" .. p3 }).status, 421, "another IP address: 421")

  -- the flag
  local function node(...)
    local args = { bin, "--endpoints", eps, "--prefix", P, "node", "--name", "x1", "--ttl", "3", timeout = 30 }
    for _, a in ipairs { ... } do args[#args + 1] = a end
    return assert(baton.exec(args))
  end
  local x = node("--http-allow-host", "a.example")
  T.is(x.code, 2, "--http-allow-host without --http: usage error")
  T.like(x.stderr, "^baton: node: %-%-http%-allow%-host goes with %-%-http ADDR\n", "says so")
  for _, v in ipairs { "a.example:80", "http://a.example", "a example", "" } do
    x = node("--http", "127.0.0.1:" .. free_port(), "--http-allow-host", v)
    T.ok(x.code == 1 and x.stderr:match("^baton: node x1: EINVAL: %-%-http%-allow%-host .-a host name or IP "
      .. "address %(no port, no scheme%).-\n$"), ("--http-allow-host %q: one line, exit 1"):format(v))
  end
end

-- 2. Security headers on every answer: files, API, errors of the node's
-- and of the server's own.
do
  local want = {
    ["content-security-policy"] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
      .. "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ["x-frame-options"] = "DENY", ["x-content-type-options"] = "nosniff", ["referrer-policy"] = "no-referrer",
  }
  local cases = {
    { "GET", "/", 200 }, { "GET", "/app.js", 200 }, { "GET", "/style.css", 200 }, { "GET", "/metrics", 200 },
    { "GET", "/api/v1/info", 200 }, { "GET", "/nope", 404 }, { "POST", "/api/v1/jobs/x/run", 401 },
    { "GET", "/healthz", 421, { host = "evil.example" } },
    { "PUT", "/api/v1/jobs/big", 413, { token = TOKEN, body = ("x"):rep(3 * 1024 * 1024) } },
  }
  for _, k in ipairs(cases) do
    local r = http(k[1], B1 .. k[2], k[4])
    local missing = {}
    for name, v in pairs(want) do if r.headers[name] ~= v then missing[#missing + 1] = name end end
    table.sort(missing)
    T.ok(r.status == k[3] and #missing == 0, ("%s %s (%d): CSP, X-Frame-Options, nosniff, no-referrer%s")
      :format(k[1], k[2], k[3], #missing > 0 and (" (missing " .. table.concat(missing, ", ") .. "; status "
        .. tostring(r.status) .. ")") or ""))
  end
  local html = http("GET", B1 .. "/").body
  T.unlike(html, "<script>", "the dashboard's page has no inline script (CSP script-src 'self')")
  T.unlike(html, "<style", "nor inline style")
  T.unlike(html, " on%a+=", "nor inline event handlers")
  T.unlike(html, " style=", "nor style attributes")
end

-- 3. The token before the body; bodies bounded.
do
  local head = ("PUT /api/v1/jobs/up HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 2097152\r\n"):format(p1)
  local t0 = baton.monotime()
  local out, closed = raw(p1, head .. "\r\n", 10)
  T.like(out, "^HTTP/1%.1 401 ", "a write without a token, its 2 MiB body not sent: 401 at once")
  T.ok(closed and baton.monotime() - t0 < 5, ("and the connection closed (%.2f s): the body is not waited for")
    :format(baton.monotime() - t0))
  out = raw(p1, head .. "Authorization: Bearer wrong\r\n\r\n", 10)
  T.like(out, "^HTTP/1%.1 401 .-wrong bearer token", "a wrong token: the same")

  -- 40 connections each uploading 2 MiB without a token, held open
  local function flood(n, auth, secs)
    local lines = {}
    for i = 1, n do
      lines[#lines + 1] = ("( exec 3<>/dev/tcp/127.0.0.1/%d; printf 'POST /api/v1/queues/flood/tasks HTTP/1.1\\r\\n"
        .. "Host: 127.0.0.1:%d\\r\\n%sContent-Length: 2097152\\r\\n\\r\\n' >&3; sleep 0.3; "
        .. "timeout 1 head -c 12 <&3 > %s/st%d; head -c 2097000 /dev/zero >&3; sleep %d ) 2>/dev/null &")
        :format(p1, p1, auth and ("Authorization: Bearer " .. TOKEN .. "\\r\\n") or "", dir, i, secs)
    end
    lines[#lines + 1] = "wait"
    F.write(dir .. "/flood.sh", table.concat(lines, "\n") .. "\n")
    local done
    baton.go(function()
      done = baton.exec { "bash", dir .. "/flood.sh", timeout = 60 }
    end)
    return function() return done end
  end
  local function peak_while(pid, finished, secs)
    local peak, t = 0, baton.monotime()
    while not finished() and baton.monotime() - t < secs do
      peak = math.max(peak, rss_kb(pid))
      baton.sleep(0.05)
    end
    return peak
  end
  -- (a few requests first, so that the baseline has the node warm)
  for _ = 1, 3 do http("PUT", B1 .. "/api/v1/jobs/warm", { body = ("w"):rep(100000) }) end
  baton.sleep(0.5)
  local base = rss_kb(pid1)
  local peak = peak_while(pid1, flood(40, false, 3), 30)
  T.ok(base > 0 and peak - base < 10 * 1024, ("40 unauthenticated uploads of 2 MiB held open: the node's RSS "
    .. "%d -> %d KiB (at most 10 MiB more)"):format(base, peak))
  T.is(assert(e:get(P .. "queue/flood/", { prefix = true, count_only = true })).count, 0, "nothing was stored")

  -- 20 authenticated uploads of 2 MiB held open: 8 fit in the 16 MiB of
  -- bodies, the others are refused with 503 at their headers
  baton.sleep(0.5)
  base = rss_kb(pid1)
  peak = peak_while(pid1, flood(20, true, 3), 30)
  local n503, n_other = 0, 0
  for i = 1, 20 do
    local st = F.read(dir .. "/st" .. i) or ""
    if st == "HTTP/1.1 503" then n503 = n503 + 1 elseif st ~= "" then n_other = n_other + 1 end
  end
  T.is(n503, 20 - http_mod.MAX_BODY_TOTAL / http_mod.MAX_BODY, ("20 authenticated uploads held: %d fit in %d MiB, "
    .. "the others get 503 at once"):format(http_mod.MAX_BODY_TOTAL / http_mod.MAX_BODY,
      http_mod.MAX_BODY_TOTAL / 1048576))
  T.is(n_other, 0, "and no other early answer")
  T.ok(peak - base < (http_mod.MAX_BODY_TOTAL + 12 * 1048576) / 1024,
    ("the node's RSS %d -> %d KiB (the %d MiB of bodies, and a little)"):format(base, peak,
      http_mod.MAX_BODY_TOTAL / 1048576))
  local busy = flood(8, true, 3) -- (all the room taken again)
  baton.sleep(1)
  local r = http("POST", B1 .. "/api/v1/queues/flood/tasks", { token = TOKEN, body = ("b"):rep(1000) })
  T.is(r.status, 503, "a body that finds no room: 503")
  T.is(r.json and r.json.code, "EBUSY", "EBUSY")
  T.like(r.json and r.json.error or "", "^request bodies in memory would pass the server's limit of 16777216 bytes: "
    .. "try again later$", "one line saying why")
  T.is(r.headers["retry-after"], "1", "with Retry-After")
  N.wait(30, busy)

  -- then the documented limits: a job of 1.4 MiB is stored; a body of
  -- exactly 2 MiB passes the server (etcd's limit answers); one more byte
  -- does not
  local src = 'return { schedule = "@manual", run = function() end }\n--' .. ("z"):rep(1400 * 1024)
  r = http("PUT", B1 .. "/api/v1/jobs/large", { token = TOKEN, body = src })
  T.is(r.status, 201, "an authenticated job source of 1.4 MiB: 201")
  local kv = assert(e:get(P .. "jobs/large")).kvs[1]
  T.ok(kv and kv.value == src, "stored byte for byte")
  r = http("PUT", B1 .. "/api/v1/jobs/large2", { token = TOKEN, body = ("y"):rep(http_mod.MAX_BODY) })
  T.ok(r.status == 413 and r.json and r.json.code == "EFBIG", "a body of exactly 2 MiB reaches the API "
    .. "(413 EFBIG: over etcd's request limit)")
  r = http("PUT", B1 .. "/api/v1/jobs/large2", { token = TOKEN, body = ("y"):rep(http_mod.MAX_BODY + 1) })
  T.ok(r.status == 413 and r.json and r.json.code == "ETOOLARGE", "2 MiB and one byte: the server's 413 ETOOLARGE")
end

-- 4. Bad bytes and other bad input: 400 (or 4xx), one line of JSON, never
-- 500.
do
  c:put_job("x", 'return { schedule = "@manual", params = { who = "w" }, run = function() end }')
  local cases = {
    { "PUT", "/api/v1/jobs/a%00b", body = 'return { schedule = "@manual", run = function() end }' },
    { "GET", "/api/v1/jobs/a%00b" }, { "GET", "/api/v1/runs/x/ID%00" }, { "GET", "/api/v1/runs/x%00/1" },
    { "GET", "/api/v1/policies/a%00b" }, { "GET", "/api/v1/jobs/a%00/versions" },
    { "GET", "/api/v1/policies/a%00/versions" }, { "DELETE", "/api/v1/jobs/a%00" },
    { "DELETE", "/api/v1/policies/a%00" }, { "POST", "/api/v1/jobs/a%00/pause" },
    { "POST", "/api/v1/jobs/a%00/resume" }, { "POST", "/api/v1/jobs/a%00/run" },
    { "POST", "/api/v1/queues/a%00/tasks", body = "t" }, { "POST", "/api/v1/jobs/x/kill?id=a%00" },
    { "GET", "/api/v1/jobs/x/runs?limit=%00" }, { "GET", "/api/v1/jobs/x/runs?li%00mit=1" },
    { "GET", "/api/v1/jobs/%FF" }, { "GET", "/api/v1/runs/x/%1B%5B8m" }, { "GET", "/api/v1/runs/x/a%0Db" },
    { "GET", "/api/v1/jobs/x/runs?limit=%C3%A9" }, { "GET", "/api/v1/jobs/%zz" },
    { "PUT", "/api/v1/jobs/x?revision=99999999999999999999999", body = "return {}" },
    { "POST", "/api/v1/jobs/x/run", body = '{"params":{"who":"a\\u0000b"}}' },
    { "POST", "/api/v1/jobs/x/run", body = '{"params":{"\\u0000":"b"}}' },
    { "POST", "/api/v1/jobs/x/run", body = "null" }, { "POST", "/api/v1/jobs/x/run", body = "1e999" },
    { "POST", "/api/v1/jobs/x/run", body = '{"params":{"who":1e999}}' },
    { "POST", "/api/v1/jobs/x/run", body = ("["):rep(100000) .. ("]"):rep(100000) },
    { "POST", "/api/v1/jobs/x/run", body = "\255\254{}" },
  }
  local bad = {}
  for _, k in ipairs(cases) do
    local r = http(k[1], B1 .. k[2], { token = k[1] ~= "GET" and TOKEN or nil, body = k.body, headers = k.headers })
    local one_line = r.json and type(r.json.error) == "string" and not r.json.error:find("[\r\n]")
    if not (r.status == 400 and one_line and r.json.code == "EINVAL" and not r.body:find("[\128-\255%z]")) then
      bad[#bad + 1] = ("%s %s: %s %s"):format(k[1], k[2]:sub(1, 60), tostring(r.status), r.body:sub(1, 120))
    end
  end
  T.is(table.concat(bad, "\n"), "", #cases .. " kinds of bad input: 400 EINVAL, one line of ASCII JSON each")
  local r = http("GET", B1 .. "/api/v1/runs/x/ID%00")
  T.is(r.json and r.json.error, "EINVAL: the path holds the byte 0x00 once percent-decoded (names, run ids and "
    .. "query values are printable ASCII)", "the error names the byte")
  r = http("POST", B1 .. "/api/v1/jobs/x/run", { token = TOKEN, body = '{"params":{"who":"a\\u0000b"}}' })
  T.like(r.json and r.json.error or "", "^EINVAL: the body holds \\u0000 %(a NUL character%)",
    "a NUL in a JSON string is refused, not cut")
  baton.sleep(1.5) -- (time for a run asked for to be recorded)
  T.is(assert(e:get(P .. "runs/x/", { prefix = true, count_only = true })).count
    + assert(e:get(P .. "trigger/x/", { prefix = true, count_only = true })).count, 0,
    "none of them asked for a run")
  -- raw bytes the client sends unencoded are quoted percent-encoded
  local out = raw(p1, "GET /\255\254 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
  T.like(out, '"error":"ENOENT: no such route: GET /%%FF%%FE %(docs/api%.md lists them%)"',
    "a raw path with bytes past ASCII: 404 quoting them percent-encoded")
  out = raw(p1, "G\255T /api/v1/jobs HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
  T.like(out, '^HTTP/1%.1 405 .-"error":"method G%%FFT not allowed on /api/v1/jobs', "and a method")
  local m = http("GET", B1 .. "/metrics").body
  T.unlike(m, 'baton_http_requests_total{code="500"', "no request was answered 500 (per /metrics)")
  T.unlike(c:log("n1"), "http: request failed", "nor logged as failed")
end

-- 5. Random requests into the request layer: never an error; a plan with
-- printable ASCII parameters, or a 4xx with one line of JSON.
do
  local h = { token = "t", files = {}, allow_hosts = { "baton.example" } }
  http_mod.hosts_of(h, "127.0.0.1:8080")
  local self = { http = h }
  local seed = os.time()
  math.randomseed(seed)
  local alphabet = { "/", "%", "0", "a", "F", "?", "&", "=", "+", ".", ":", "[", "]", " ", "\0", "\r", "\255",
                     "api", "v1", "jobs", "runs", "policies", "queues", "tasks", "%00", "%zz", "%2F", "%FF", "%" }
  local function junk(n)
    local t = {}
    for i = 1, math.random(0, n) do
      t[i] = math.random() < 0.7 and alphabet[math.random(#alphabet)] or string.char(math.random(0, 255))
    end
    return table.concat(t)
  end
  local methods = { "GET", "GET", "GET", "HEAD", "PUT", "POST", "POST", "DELETE", "PATCH", "G\255T", "" }
  local hosts = { "127.0.0.1:8080", "localhost", "[::1]:1", "baton.example", "evil.example" }
  local paths = { "/api/v1/jobs/%s", "/api/v1/jobs/%s/run", "/api/v1/jobs/%s/kill", "/api/v1/jobs/%s/runs",
                  "/api/v1/runs/%s/%s", "/api/v1/policies/%s", "/api/v1/queues/%s/tasks", "/api/v1/jobs",
                  "/", "/app.js", "/metrics", "%s" }
  local keys = { "limit", "id", "revision", "purge", "batch", "attempt", "x", "" }
  local function query()
    local t = {}
    for i = 1, math.random(0, 3) do
      t[i] = (math.random() < 0.8 and keys[math.random(#keys)] or junk(4)) .. "=" .. junk(6)
    end
    return table.concat(t, math.random() < 0.9 and "&" or junk(2))
  end
  local fails, plans, answers = {}, 0, 0
  for i = 1, 20000 do
    local host = math.random() < 0.9 and hosts[math.random(#hosts)] or junk(12)
    local path = paths[math.random(#paths)]:gsub("%%s", function() return junk(6) end)
    local req = {
      method = methods[math.random(#methods)], path = path, query = math.random() < 0.5 and "" or query(),
      version = math.random() < 0.9 and "HTTP/1.1" or "HTTP/1.0",
      headers = { host = math.random() < 0.97 and host or nil,
                  authorization = math.random() < 0.7 and "Bearer t" or junk(8) },
    }
    local ok, status, body, _, route = pcall(http_mod.admit, self, req)
    local why
    if not ok then
      why = "raised " .. tostring(status)
    elseif status then
      answers = answers + 1
      local jok, v = pcall(json.decode, body)
      if not (status >= 400 and status < 500 and jok and type(v) == "table" and type(v.error) == "string"
          and not v.error:find("[\r\n]") and type(route) == "string") then
        why = "answered " .. tostring(status) .. " " .. tostring(body)
      end
    else
      plans = plans + 1
      for k, v in pairs(body.params or {}) do
        if v:find("[%z\1-\31\127-\255]") then why = "parameter " .. k .. " holds a bad byte" end
      end
    end
    if why and #fails < 5 then
      fails[#fails + 1] = ("%s %q %q host %q: %s"):format(req.method, req.path, req.query,
        tostring(req.headers.host), why)
    end
  end
  T.is(table.concat(fails, "\n"), "", ("20,000 random requests (seed %d): %d answered 4xx, %d to serve; no error")
    :format(seed, answers, plans))
  T.ok(plans > 100 and answers > 100, "both kinds were drawn")
end

c:destroy()
T.done()
