-- baton.http's redirects, proxies, cacert and HTTP/2 (libcurl's, asked
-- for through options): following up to n redirects, only to http(s),
-- without carrying credentials to another host; where it ended (r.url,
-- r.redirects); too many -> EHTTP. A proxy option, proxy = false, and the
-- environment's http_proxy / no_proxy by default (in a child process, as
-- curl reads them from the environment). HTTP/2 over https with cacert
-- against node's http2 server, directly and through a CONNECT proxy.
-- Origins are baton.httpd servers of this process; the proxy and the
-- HTTP/2 server are tests/lua/lib/http-proxy-h2.js under node.
local T = require "tap"
local F = require "lib.files"

local function have(cmd)
  local r = baton.exec { "sh", "-c", "command -v " .. cmd }
  return r and r.code == 0
end

-- Two origins on different ports. Each answers a path in `routes` with a
-- redirect there, /echo with the Authorization and Cookie headers it got,
-- and anything else with "METHOD PATH BODY-LENGTH".
local routes = {}
local function handler(req)
  local to = routes[req.path]
  if to then
    req:respond(to.status or 302, { location = to.url }, "moved to " .. to.url)
  elseif req.path == "/echo" then
    req:respond(200, { ["content-type"] = "text/plain" },
      "auth=" .. (req.headers.authorization or "-") .. " cookie=" .. (req.headers.cookie or "-"))
  else
    req:respond(200, { ["content-type"] = "text/plain" }, req.method .. " " .. req.path .. " " .. #(req.body or ""))
  end
end
local a = assert(baton.httpd.listen { addr = "127.0.0.1:0", handler = handler })
local b = assert(baton.httpd.listen { addr = "127.0.0.1:0", handler = handler })
local A = "http://127.0.0.1:" .. a.port
local B = "http://127.0.0.1:" .. b.port
local LA = "http://localhost:" .. a.port   -- A's server under another host name

-- 1. redirects: off by default, followed when asked for
do
  routes["/one"] = { url = "/two" }
  routes["/two"] = { url = B .. "/end" }
  local r = assert(baton.http { url = A .. "/one" })
  T.is(r.status, 302, "default: a 3xx is returned, not followed")
  T.is(r.headers.location, "/two", "with its location")
  T.is(r.url, nil, "and no r.url without the option")

  r = assert(baton.http { url = A .. "/one", redirects = 5 })
  T.is(r.status, 200, "redirects = 5: followed to the end")
  T.is(r.body, "GET /end 0", "the final answer's body, not a redirect's")
  T.is(r.url, B .. "/end", "r.url: where it ended")
  T.is(r.redirects, 2, "r.redirects: 2 followed")
  T.is(r.headers.location, nil, "the final answer's headers only")

  r = assert(baton.http { url = A .. "/plain", redirects = 3 })
  T.is(r.redirects, 0, "none to follow: r.redirects = 0")
  T.is(r.url, A .. "/plain", "and r.url is the request's")

  r = assert(baton.http { url = A .. "/one", redirects = 2 })
  T.is(r.status, 200, "exactly as many as allowed: fine")

  local _, msg, code = baton.http { url = A .. "/one", redirects = 1 }
  T.is(code, "EHTTP", "one more than allowed: EHTTP")
  T.like(msg, "^EHTTP: http://127%.0%.0%.1:%d+/one: unexpected http response %(Maximum %(1%) redirects followed%)$", msg)

  routes["/loop"] = { url = "/loop" }
  _, msg, code = baton.http { url = A .. "/loop", redirects = 10 }
  T.is(code, "EHTTP", "a redirect loop: EHTTP after 10 (" .. tostring(msg) .. ")")

  routes["/ftp"] = { url = "ftp://127.0.0.1:" .. a.port .. "/x" }
  routes["/file"] = { url = "file:///etc/passwd" }
  _, msg, code = baton.http { url = A .. "/ftp", redirects = 5 }
  T.is(code, "EHTTP", "a redirect to ftp:// is refused: EHTTP (" .. tostring(msg) .. ")")
  _, msg, code = baton.http { url = A .. "/file", redirects = 5 }
  T.is(code, "EHTTP", "a redirect to file:// is refused: EHTTP (" .. tostring(msg) .. ")")

  routes["/post"] = { url = "/landed", status = 303 }
  r = assert(baton.http { url = A .. "/post", body = "abc", redirects = 1 })
  T.is(r.body, "GET /landed 0", "POST, then 303: GET without the body")
  routes["/post307"] = { url = "/landed", status = 307 }
  r = assert(baton.http { url = A .. "/post307", body = "abc", redirects = 1 })
  T.is(r.body, "POST /landed 3", "POST, then 307: POST again with the body")

  routes["/put302"] = { url = "/landed" }
  routes["/put303"] = { url = "/landed", status = 303 }
  r = assert(baton.http { method = "PUT", url = A .. "/put302", body = "abc", redirects = 1 })
  T.is(r.body, "PUT /landed 3", "PUT, then 302: PUT again with its body (not an empty PUT)")
  r = assert(baton.http { method = "PUT", url = A .. "/put303", body = "abc", redirects = 1 })
  T.is(r.body, "PUT /landed 3", "PUT, then 303: the same (curl repeats the method)")
  r = assert(baton.http { method = "DELETE", url = A .. "/put302", redirects = 1 })
  T.is(r.body, "DELETE /landed 0", "DELETE, then 302: DELETE")

  -- a Location carrying credentials: r.url without them
  routes["/cred"] = { url = "http://u:pw@127.0.0.1:" .. b.port .. "/landed" }
  r = assert(baton.http { url = A .. "/cred", redirects = 1 })
  T.is(r.url, B .. "/landed", "r.url never shows user:password")
end

-- 2. credentials stay with the host they were given for
do
  local secret = { Authorization = "Bearer s3cret", Cookie = "sid=s3cret" }
  routes["/to-b"] = { url = B .. "/echo" }
  routes["/to-localhost"] = { url = LA .. "/echo" }
  routes["/to-self"] = { url = "/echo" }

  local r = assert(baton.http { url = A .. "/to-self", headers = secret, redirects = 1 })
  T.is(r.body, "auth=Bearer s3cret cookie=sid=s3cret", "same host and port: the headers go on")

  r = assert(baton.http { url = A .. "/to-b", headers = secret, redirects = 1 })
  T.is(r.status, 200, "to another port: followed")
  T.is(r.body, "auth=- cookie=-", "another port: no Authorization, no Cookie")

  r = assert(baton.http { url = A .. "/to-localhost", headers = secret, redirects = 1 })
  T.is(r.url, LA .. "/echo", "to another host name (localhost): followed")
  T.is(r.body, "auth=- cookie=-", "another host name: no Authorization, no Cookie")

  local basic = "Basic " .. "dXNlcjpwdw=="   -- user:pw
  r = assert(baton.http { url = "http://user:pw@127.0.0.1:" .. a.port .. "/to-self", redirects = 1 })
  T.is(r.body, "auth=" .. basic .. " cookie=-", "URL credentials: sent to the same host")
  T.is(r.url, A .. "/echo", "r.url without them")
  r = assert(baton.http { url = "http://user:pw@127.0.0.1:" .. a.port .. "/to-localhost", redirects = 1 })
  T.is(r.body, "auth=- cookie=-", "URL credentials: not sent to another host")
end

-- misuse
do
  T.error_like(function() baton.http { url = A, redirects = -1 } end,
    "redirects must be a whole number from 0 to 50", "redirects = -1 raises")
  T.error_like(function() baton.http { url = A, redirects = 1.5 } end,
    "redirects must be a whole number", "redirects = 1.5 raises")
  T.error_like(function() baton.http { url = A, redirects = "3" } end,
    "redirects must be a number %(got string%)", "redirects = '3' raises")
  T.error_like(function() baton.http { url = A, proxy = true } end,
    "proxy must be a URL or false %(got boolean%)", "proxy = true raises")
  T.error_like(function() baton.http { url = A, proxy = "socks9://x" } end,
    "proxy must be an http:// or https:// URL", "a proxy of another scheme raises")
  T.error_like(function() baton.http { url = A, cacert = 1 } end,
    "cacert must be a file name", "cacert = 1 raises")
  T.error_like(function() baton.http { url = A, cacert = "" } end,
    "cacert must be a file name %(got an empty string%)", "cacert = '' raises")
  local ok, err = pcall(baton.http, { url = A, proxy = "socks5://u:s3cret@127.0.0.1:1" })
  T.ok(not ok and err:find("got 'socks5://127.0.0.1:1'", 1, true) and not err:find("s3cret"),
    "an invalid proxy is echoed without its user:password (" .. tostring(err) .. ")")
  ok, err = pcall(baton.http, { url = A, proxy = "u:s3cret@127.0.0.1:1" })
  T.ok(not ok and not err:find("s3cret"), "nor one without a scheme (" .. tostring(err) .. ")")
  T.error_like(function() baton.http { url = A, follow = true } end,
    "unknown option 'follow' %(options are method, url, headers, body, timeout, redirects, proxy, cacert%)",
    "an unknown option names the known ones")
end

-- A proxy that refuses is named in the error (without its user:password):
-- the target did not refuse. Nothing is sent to 10.1.2.3 itself.
do
  local want = "ECONNREFUSED: http://10.1.2.3/x: connection refused (proxy http://127.0.0.1:1)"
  local _, msg, code = baton.http { url = "http://10.1.2.3/x", proxy = "http://u:s3cret@127.0.0.1:1", timeout = 5 }
  T.is(code, "ECONNREFUSED", "proxy = URL that refuses: ECONNREFUSED")
  T.is(msg, want, "the message names the proxy")
  local bin = os.getenv("BATON_BIN")
  if bin and bin ~= "" then
    local script = os.tmpname()
    F.write(script, [[print((select(2, baton.http { url = "http://10.1.2.3/x", timeout = 5 })))]])
    local x = assert(baton.exec { bin, "eval", script, timeout = 30,
      env = { http_proxy = "http://u:s3cret@127.0.0.1:1", no_proxy = false, NO_PROXY = false } })
    os.remove(script)
    T.is(x.stdout, want .. "\n", "so does the environment's http_proxy (" .. x.stderr .. ")")
  else
    T.skip("BATON_BIN is not set", 1)
  end
end

-- http:// stays HTTP/1.1 (no h2c upgrade)
do
  local r = assert(baton.http { url = A .. "/plain11" })
  T.is(r.http_version, "1.1", "plain http stays HTTP/1.1")
end

-- 3. proxies and HTTP/2: node's forward proxy and http2 server
local bin = os.getenv("BATON_BIN")
local root = os.getenv("BATON_ROOT") or "."
local dir = os.tmpname()
os.remove(dir)
assert(baton.exec { "mkdir", "-p", dir })
local tls = have("openssl") and baton.exec { "sh", "-c", "cd " .. dir .. " && openssl req -x509 -newkey ec " ..
  "-pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost -days 1 " ..
  "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout key.pem -out cert.pem 2>&1" }
tls = tls and tls.code == 0
local ports, node
if have("node") then
  local args = { "node", root .. "/tests/lua/lib/http-proxy-h2.js", dir .. "/ports" }
  if tls then
    args[#args + 1] = dir .. "/cert.pem"
    args[#args + 1] = dir .. "/key.pem"
  end
  args.stdio = "null"
  node = assert(baton.spawn(args))
  for _ = 1, 200 do
    local s = F.read(dir .. "/ports")
    if s then
      ports = baton.json.decode(s)
      break
    end
    baton.sleep(0.05)
  end
  T.ok(ports, "node's proxy is listening")
end

local function stats()
  return baton.json.decode(assert(baton.http { url = "http://127.0.0.1:" .. ports.proxy .. "/stats" }).body)
end

if ports then
  local P = "http://127.0.0.1:" .. ports.proxy
  local r = assert(baton.http { url = A .. "/via", proxy = P })
  T.is(r.body, "GET /via 0", "proxy = URL: the answer")
  T.is(r.headers["x-proxied"], "yes", "came through the proxy")
  T.is(stats().forwarded, 1, "the proxy forwarded one request")

  r = assert(baton.http { url = A .. "/direct" })
  T.is(r.headers["x-proxied"], nil, "no proxy option, no proxy variable: direct")

  routes["/hop"] = { url = B .. "/hopped" }
  r = assert(baton.http { url = A .. "/hop", proxy = P, redirects = 1 })
  T.is(r.body, "GET /hopped 0", "a redirect through the proxy")
  T.is(stats().forwarded, 3, "both hops through it")

  local _, msg, code = baton.http { url = A .. "/x", proxy = "http://127.0.0.1:1", timeout = 5 }
  T.is(code, "ECONNREFUSED", "a proxy that refuses: ECONNREFUSED (" .. tostring(msg) .. ")")

  -- The environment's variables, in a child (curl reads them per request).
  if bin and bin ~= "" then
    local script = dir .. "/env.lua"
    F.write(script, ([[
      local function via(url, extra)
        local o = { url = url, timeout = 10 }
        for k, v in pairs(extra or {}) do o[k] = v end
        local ok, r, err = pcall(baton.http, o)
        if not ok or not r then return tostring(r or err) end
        return r.headers["x-proxied"] or "direct"
      end
      print(via("%s/env"), via("%s/env-false", { proxy = false }), via("%s/env-nop"))
    ]]):format(A, A, LA))
    local x = assert(baton.exec { bin, "eval", script, timeout = 30,
      env = { http_proxy = P, no_proxy = "localhost", NO_PROXY = false, HTTP_PROXY = false } })
    T.is(x.stdout, "yes\tdirect\tdirect\n",
      "http_proxy honoured by default; proxy = false goes direct; no_proxy honoured (" .. x.stderr .. ")")
    x = assert(baton.exec { bin, "eval", script, timeout = 30,
      env = { http_proxy = false, no_proxy = false, NO_PROXY = false, HTTP_PROXY = P } })
    T.is(x.stdout, "direct\tdirect\tdirect\n", "upper-case HTTP_PROXY is ignored (as curl does: httpoxy)")
    -- an explicit proxy serves every host, whatever no_proxy says
    F.write(script, ([[
      local r = assert(baton.http{url = "%s/x", proxy = "%s", timeout = 10})
      print(r.headers["x-proxied"])
    ]]):format(LA, P))
    x = assert(baton.exec { bin, "eval", script, timeout = 30, env = { no_proxy = "*" } })
    T.is(x.stdout, "yes\n", "proxy = URL overrides no_proxy (" .. x.stderr .. ")")
  else
    T.skip("BATON_BIN is not set", 3)
  end
else
  T.skip("node is not installed", 10)
end

if ports and ports.h2 then
  local H = "https://127.0.0.1:" .. ports.h2
  local ca = dir .. "/cert.pem"
  local r, err = baton.http { url = H .. "/hello", cacert = ca }
  T.is(r and r.status, 200, "https with cacert: " .. tostring(err))
  T.is(r and r.http_version, "2", "negotiated HTTP/2")
  T.is(r and r.body, "2.0 /hello", "the server saw HTTP/2")
  T.is(r and r.headers["content-type"], "text/plain", "HTTP/2 headers parsed")
  T.is(r and r.headers["x-mixed-case"], "yes", "names lower-cased")

  r, err = baton.http { url = H .. "/r", cacert = ca, redirects = 1 }
  T.is(r and r.body, "2.0 /final", "a redirect over HTTP/2: " .. tostring(err))
  T.is(r and r.url, H .. "/final", "r.url")

  -- node answers /post without reading the body, then resets the stream
  r, err = baton.http { url = H .. "/post", cacert = ca, body = string.rep("x", 1000) }
  T.is(r and r.body, "2.0 /post", "a small POST over HTTP/2: " .. tostring(err))
  r, err = baton.http { url = H .. "/post", cacert = ca, body = string.rep("x", 100000) }
  T.is(r and r.body, "1.1 /post", "a 100 kB POST answered early: the answer, over HTTP/1.1 " ..
    "(libcurl 7.88 loses it on HTTP/2): " .. tostring(err))

  local _, msg, code = baton.http { url = H .. "/hello" }
  T.is(code, "ETLS", "without cacert: ETLS (" .. tostring(msg) .. ")")
  _, msg, code = baton.http { url = H .. "/hello", cacert = dir .. "/missing.pem" }
  T.is(code, "ETLS", "a missing cacert file: ETLS (" .. tostring(msg) .. ")")

  local before = stats().connects
  r, err = baton.http { url = H .. "/tunnel", cacert = ca, proxy = "http://127.0.0.1:" .. ports.proxy }
  T.is(r and r.body, "2.0 /tunnel", "https through the proxy's CONNECT, HTTP/2 inside: " .. tostring(err))
  T.is(stats().connects, before + 1, "one CONNECT")
else
  T.skip("no node or no openssl for an HTTP/2 server", 13)
end

if node then node:kill("SIGKILL"); node:wait(10) end
baton.exec { "rm", "-rf", dir }
a:close()
b:close()
T.done()
