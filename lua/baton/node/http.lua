-- The node's HTTP face (docs/api.md): `baton node
-- --http ADDR` serves, on the node's loop (baton.httpd, libmicrohttpd in
-- runtime/core/httpd.c), each request in its own coroutine:
--
--   /healthz /readyz /metrics      probes and Prometheus (node/metrics.lua)
--   / /app.js /style.css           the dashboard (lua/baton/web/, read once)
--   /api/v1/...                    the REST API: baton.ops, the operations
--                                  the CLI runs, with the CLI's --json shapes
--
-- This file admits and routes a request; the handlers are node/api.lua's.
-- Errors are JSON {"error": "...", "code": "ECODE"} with the status of
-- node/api.lua's STATUS. Writes (PUT, POST, DELETE) need `Authorization: Bearer
-- TOKEN`, TOKEN being the first line of --http-token-file; without a token
-- file the API is read-only. Requests are counted per route and status in
-- the node's metrics (baton_http_requests_total).
--
-- What the headers decide is decided before any of the body is read (the
-- server's check, admit below): the Host (against the listen address and
-- --http-allow-host: no DNS rebinding), the route and method, the token,
-- the query. Bodies are bounded per request (M.MAX_BODY) and all together
-- (M.MAX_BODY_TOTAL), and every answer carries M.HEADERS (CSP, no
-- framing, no sniffing, no referrer).
local baton = require "baton"
local api = require "baton.node.api"
local U = require "baton.util"

local json = baton.json
local format, concat, byte, char = string.format, table.concat, string.byte, string.char
local bit = require "bit"
local bxor, bor = bit.bxor, bit.bor

local M = {}

M.MAX_BODY = 2 * 1024 * 1024 -- bytes; a job source over etcd's limit gets a 413 that says so
M.MAX_BODY_TOTAL = 8 * M.MAX_BODY -- bytes of bodies held at once, all requests together (then 503)
M.MAX_CONNECTIONS = 512 -- connections at once (each may hold MHD's 32 KiB of headers)
local JSON, TEXT = api.JSON, api.TEXT
local API = api.API

-- On every answer (the server's own 413 and 503 too): the dashboard's
-- files come from this node only, nothing runs inline, no page may frame
-- it, types are not sniffed, no referrer leaves it, and no other origin
-- may embed its answers.
M.HEADERS = {
  ["content-security-policy"] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    .. "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  ["x-frame-options"] = "DENY",
  ["x-content-type-options"] = "nosniff",
  ["referrer-policy"] = "no-referrer",
  ["cross-origin-resource-policy"] = "same-origin",
}
local CONTENT_TYPES = {
  html = "text/html; charset=utf-8", js = "text/javascript; charset=utf-8", css = "text/css; charset=utf-8",
}


---------------------------------------------------------------------------
-- helpers

-- Percent-decodes s; nil when a % is not followed by two hex digits.
local function unescape(s, plus)
  if plus then s = s:gsub("%+", " ") end
  if s:find("%%") then
    if s:find("%%%X") or s:find("%%%x%X") or s:find("%%%x?$") then return nil end
    s = s:gsub("%%(%x%x)", function(h) return char(tonumber(h, 16)) end)
  end
  return s
end
M.unescape = unescape

-- Names, run ids and query values are printable ASCII: the first byte of
-- s that is not (a control character, NUL, or past 0x7E), or nil.
local function bad_byte(s)
  local i = s:find("[%z\1-\31\127-\255]")
  return i and byte(s, i)
end

-- s with every byte that is not printable ASCII (or is a space)
-- percent-encoded, as a client would have sent it: raw request text made
-- safe to quote in a message (a % stays as sent).
local function printable(s)
  return (s:gsub("[^\33-\126]", function(c) return format("%%%02X", byte(c)) end))
end

-- Percent-decodes one part of a path or query (what, for the message);
-- nil, err when it is badly encoded or decodes to a byte that cannot be in
-- a name, a run id or a query value.
local function decode(s, what, plus)
  local v = unescape(s, plus)
  if not v then return nil, "bad percent-encoding in the " .. what end
  local b = bad_byte(v)
  if b then
    return nil, format("the %s holds the byte 0x%02X once percent-decoded (names, run ids and query values are "
      .. "printable ASCII)", what, b)
  end
  return v
end

-- The query string as {name = value}; nil, err when malformed.
local function parse_query(q)
  local t = {}
  if q == "" then return t end
  for part in (q .. "&"):gmatch("([^&]*)&") do
    if part ~= "" then
      local k, v = part:match("^([^=]*)=(.*)$")
      local kerr, verr
      k, kerr = decode(k or part, "query string", true)
      v, verr = decode(v or "", "query string", true)
      if not k or not v then return nil, "EINVAL: " .. (kerr or verr) end
      if t[k] ~= nil then return nil, format("EINVAL: query parameter %q given twice", k) end
      t[k] = v
    end
  end
  return t
end

-- Equal strings, in a time that depends on their lengths only.
local function same(a, b)
  local d = bxor(#a, #b)
  for i = 1, math.max(#a, #b) do d = bor(d, bxor(byte(a, i) or 0, byte(b, i) or 0)) end
  return d == 0
end
M.same = same

local function read_all(path, what)
  local f, err, errno = io.open(path, "rb")
  if not f then
    -- (the code as the error is: no such file is not a permission problem)
    local code = errno == 2 and "ENOENT" or errno == 13 and "EACCES" or errno == 21 and "EISDIR" or "EIO"
    return nil, format("%s: %s %s: %s", code, what, path, ((err or "cannot open"):gsub("^[^:]*: ", "")))
  end
  local s, _, rerrno = f:read("*a")
  f:close()
  if not s then
    return nil, rerrno == 21 and format("EISDIR: %s %s: is a directory", what, path)
      or format("EIO: %s %s: cannot read", what, path)
  end
  return s
end

-- Where the dashboard's files are, for messages: baton/web/ of the library
-- snapshot every process reads once at start (runtime/core/lib.c), which
-- is also where they are served from.
local function web_dir()
  return (baton._libdir or "lua") .. "/baton/web/"
end


-- path segments (":x" binds one decoded segment, "*x" the decoded rest),
-- the route's name for the counts, handlers by method, the query
-- parameters each method takes, and whether it is an API route (JSON 404s
-- and the token for writes).
local ROUTES = {
  { "healthz", GET = "healthz" },
  { "readyz", GET = "readyz" },
  { "metrics", GET = "metrics" },
  { "api/v1/info", GET = "info" },
  { "api/v1/jobs", GET = "jobs" },
  { "api/v1/jobs/:name", GET = "job_get", PUT = "job_put", DELETE = "job_delete",
    query = { PUT = { revision = true }, DELETE = { purge = true } } },
  { "api/v1/jobs/:name/run", POST = "job_run" },
  { "api/v1/jobs/:name/pause", POST = "job_pause" },
  { "api/v1/jobs/:name/resume", POST = "job_resume" },
  { "api/v1/jobs/:name/kill", POST = "job_kill", query = { POST = { id = true } } },
  { "api/v1/jobs/:name/runs", GET = "job_runs", query = { GET = { limit = true } } },
  { "api/v1/jobs/:name/versions", GET = "job_versions" },
  { "api/v1/jobs/:name/diff", GET = "job_diff", query = { GET = { from = true, to = true } } },
  { "api/v1/runs", GET = "runs", query = { GET = { limit = true } } },
  { "api/v1/runs/:job/*id", GET = "run_get", query = { GET = { attempt = true } } },
  { "api/v1/nodes", GET = "nodes" },
  { "api/v1/leader", GET = "leader" },
  { "api/v1/policies", GET = "policies" },
  { "api/v1/policies/:name", GET = "policy_get", PUT = "policy_put", DELETE = "policy_delete",
    query = { PUT = { revision = true } } },
  { "api/v1/policies/:name/versions", GET = "policy_versions" },
  { "api/v1/queues/:queue/tasks", POST = "queue_push", query = { POST = { batch = true } } },
}
local METHODS = { "GET", "PUT", "POST", "DELETE" }
for _, r in ipairs(ROUTES) do
  r.name = "/" .. r[1]:gsub(":(%w+)", "{%1}"):gsub("%*(%w+)", "{%1}")
  r.parts = {}
  for seg in r[1]:gmatch("[^/]+") do r.parts[#r.parts + 1] = seg end
  local allow = {}
  for _, m in ipairs(METHODS) do if r[m] then allow[#allow + 1] = m end end
  if r.GET then table.insert(allow, 2, "HEAD") end
  r.allow = concat(allow, ", ")
end

-- The route of a raw path and its decoded parameters; or nil; or false,
-- err for a segment that does not decode.
local function match(segs)
  for _, r in ipairs(ROUTES) do
    local parts, p, ok = r.parts, {}, true
    local rest = parts[#parts]:sub(1, 1) == "*"
    if #segs == #parts or (rest and #segs >= #parts) then
      for i, part in ipairs(parts) do
        local c = part:sub(1, 1)
        if c == ":" or c == "*" then
          local v, err = decode(c == ":" and segs[i] or concat(segs, "/", i), "path")
          if not v then return false, err end
          p[part:sub(2)] = v
        elseif part ~= segs[i] then
          ok = false
          break
        end
      end
      if ok then return r, p end
    end
  end
end

local STATIC = { ["/"] = "index.html", ["/index.html"] = "index.html", ["/app.js"] = "app.js",
                 ["/style.css"] = "style.css" }

-- An error answer: status, JSON body, headers (with extra), route name.
local function refuse(status, msg, code, route, extra)
  local hdr = { ["content-type"] = JSON, ["cache-control"] = "no-store" }
  for k, v in pairs(extra or {}) do hdr[k] = v end
  return status, json.encode({ error = msg, code = code }, TEXT), hdr, route
end

-- The name in a Host header value, lower-cased ("[::1]" keeps its
-- brackets; the port, which may be any, left out), or nil when the value
-- is not HOST[:PORT].
local function host_name(v)
  local name, port = v:match("^(%[[%x:%.]+%])(.*)$")
  if not name then name, port = v:match("^([%w%-_%.]+)(.*)$") end
  if not name or not (port == "" or port:match("^:%d%d?%d?%d?%d?$")) then return nil end
  return name:lower()
end

-- Whether a Host name is an IP address literal (a.b.c.d or [v6]): no DNS
-- name, so no rebinding.
local function is_ip(name)
  if name:sub(1, 1) == "[" then return true end
  local a, b, c, d = name:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  return a ~= nil and tonumber(a) < 256 and tonumber(b) < 256 and tonumber(c) < 256 and tonumber(d) < 256
end

-- The Host names the node answers to (set once listening): the loopback
-- names (a tunnel or port-forward arrives as one of them), the listen
-- address, any IP literal when it listens on all interfaces, and the
-- names of --http-allow-host.
local function hosts_of(h, addr)
  local listen = addr:match("^(.*):%d+$") or addr
  local t = { localhost = true, ["127.0.0.1"] = true, ["[::1]"] = true, [listen:lower()] = true }
  for _, name in ipairs(h.allow_hosts or {}) do t[name] = true end
  h.hosts, h.any_ip = t, listen == "0.0.0.0" or listen == "[::]"
  local names = { "localhost", "127.0.0.1", "[::1]" }
  if h.any_ip then
    names[#names + 1] = "any IP address"
  elseif listen ~= "127.0.0.1" and listen ~= "[::1]" then
    names[#names + 1] = listen
  end
  for _, name in ipairs(h.allow_hosts or {}) do names[#names + 1] = name end
  h.hosts_text = concat(names, ", ")
end

-- The Host check against DNS rebinding: a page of another site that got
-- its name to resolve to this node's address is refused, since its
-- requests carry that name. A request without Host (HTTP/1.0; no browser
-- sends one) is let through.
local function check_host(h, req)
  local v = req.headers.host
  if v == nil then
    if req.version == "HTTP/1.0" then return nil end
    return refuse(400, "EINVAL: an " .. printable(req.version or "HTTP/1.1") .. " request needs a Host header",
      "EINVAL", "other")
  end
  local name = host_name(v)
  if not name then return refuse(400, format("EINVAL: bad Host header %q", printable(v)), "EINVAL", "other") end
  if h.hosts[name] or (h.any_ip and is_ip(name)) then return nil end
  return refuse(421, format("EHOST: this node does not answer to the name %q (it answers to %s): start it with "
    .. "--http-allow-host %s to allow it", printable(name), h.hosts_text, printable(name)), "EHOST", "other")
end

-- Decides what can be decided of a request from its headers alone, before
-- any of its body is read (the server's check, and again for the
-- handler): the Host, the route, the method, the token, the query.
-- Returns the answer (status, body, headers, route name) when that decides
-- it; else nil and what to serve: {file =} or {route =, params =, query =}.
local function admit(self, req)
  local h = self.http
  local method, path = req.method, req.path
  local get = method == "GET" or method == "HEAD"
  local st, body, hdr, rname = check_host(h, req)
  if st then return st, body, hdr, rname end
  local file = STATIC[path]
  if file then
    if not get then
      return refuse(405, "method " .. printable(method) .. " not allowed on " .. path, "EMETHOD", path,
        { allow = "GET, HEAD" })
    end
    return nil, { file = file, path = path }
  end
  local segs = {}
  for seg in path:gmatch("[^/]+") do segs[#segs + 1] = seg end
  if path:sub(1, 1) ~= "/" or path:find("//", 1, true) then segs = {} end
  local r, p = match(segs)
  if r == false then return refuse(400, "EINVAL: " .. p, "EINVAL", "other") end
  if not r then
    return refuse(404, "ENOENT: no such route: " .. printable(method) .. " " .. printable(path)
      .. " (docs/api.md lists them)", "ENOENT", "other")
  end
  local fn = r[get and "GET" or method]
  if not fn then
    return refuse(405, format("method %s not allowed on %s (allowed: %s)", printable(method), r.name, r.allow),
      "EMETHOD", r.name, { allow = r.allow })
  end
  if not get then
    if not h.token then
      return refuse(403, "EACCES: this node's API is read-only: start the node with --http-token-file FILE "
        .. "to enable writes", "EACCES", r.name)
    end
    local auth = req.headers.authorization or ""
    local given = auth:lower():find("^bearer%s") and auth:match("^%S+%s+(.-)%s*$")
    if not given or not same(given, h.token) then
      return refuse(401, auth == "" and "EAUTH: writes need the header Authorization: Bearer TOKEN"
        or "EAUTH: wrong bearer token", "EAUTH", r.name, { ["www-authenticate"] = 'Bearer realm="baton"' })
    end
  end
  local q, qerr = parse_query(req.query)
  if not q then return refuse(400, qerr, "EINVAL", r.name) end
  local takes = r.query and r.query[get and "GET" or method] or {}
  for k in pairs(q) do
    if not takes[k] then
      local names = U.sorted_keys(takes)
      return refuse(400, format("EINVAL: unknown query parameter %q%s", k,
        #names > 0 and " (this route takes " .. concat(names, ", ") .. ")" or " (this route takes none)"),
        "EINVAL", r.name)
    end
  end
  return nil, { route = r, fn = fn, params = p, query = q }
end

M.admit, M.hosts_of = admit, hosts_of -- (for tests/lua/http-guard.lua, which feeds them random requests)

-- The server's check: answers at once what the headers decide (nothing of
-- the body is read then); else the request goes on to handle.
local function check(self, req)
  local status, body, hdr, route = admit(self, req)
  if not status then return end
  self.metrics:http_request(route, status)
  req:respond(status, hdr, body)
end

-- Answers one request. Returns status, body (string), headers, route name.
local function serve(self, req)
  local h = self.http
  local status, body, hdr, route = admit(self, req)
  if status then return status, body, hdr, route end
  local plan = body
  if plan.file then
    local f = h.files[plan.file]
    if not f then
      return refuse(404, "ENOENT: the dashboard's " .. plan.file .. " is not installed (" .. h.web
        .. plan.file .. ")", "ENOENT", plan.path)
    end
    return 200, f.body, { ["content-type"] = f.type, ["cache-control"] = "no-cache" }, plan.path
  end
  status, body, hdr = API[plan.fn](self, req, plan.params, plan.query)
  hdr = hdr or { ["content-type"] = JSON, ["cache-control"] = "no-store" }
  if type(body) ~= "string" then body = json.encode(body, TEXT) end
  return status, body, hdr, plan.route.name
end

local function handle(self, req)
  local ok, status, body, hdr, route = xpcall(serve, debug.traceback, self, req)
  if not ok then
    baton.log.error("http: request failed", { method = req.method, path = req.path, error = status })
    status, body, hdr, route = 500, '{"error":"internal error","code":"EINTERNAL"}',
      { ["content-type"] = JSON }, "other"
  end
  self.metrics:http_request(route, status)
  req:respond(status, hdr, body)
end

---------------------------------------------------------------------------
-- start and stop

-- Reads what the server serves with: the token (the first line of
-- opts.token_file, trimmed), the certificate and key (PEM, both or
-- neither) and the dashboard's files. opts = {addr =, token_file =,
-- cert_file =, key_file =, allow_hosts = {NAME, ...}}. Returns the
-- prepared server, or nil, "ECODE: message", code (one line: an
-- unreadable file, an empty token, a bad name).
function M.prepare(opts)
  local h = { addr = opts.addr, files = {}, web = web_dir(), prepared = true, allow_hosts = {} }
  if type(opts.addr) ~= "string" or opts.addr == "" then
    return nil, "EINVAL: --http needs an address (HOST:PORT, [::1]:PORT, :PORT)", "EINVAL"
  end
  for _, name in ipairs(opts.allow_hosts or {}) do
    local n = host_name(name)
    if not n or n ~= name:lower() then
      return nil, format("EINVAL: --http-allow-host %q: a host name or IP address (no port, no scheme), "
        .. "as browsers send it in the Host header: baton.example.com, 10.0.0.5, [fd00::5]", printable(name)), "EINVAL"
    end
    h.allow_hosts[#h.allow_hosts + 1] = n
  end
  if opts.token_file then
    local s, err = read_all(opts.token_file, "--http-token-file")
    if not s then return nil, err, err:match("^%u+") end
    local token = s:match("^[^\r\n]*"):match("^%s*(.-)%s*$")
    if token == "" then
      return nil, "EINVAL: --http-token-file " .. opts.token_file .. " is empty: its first line is the token",
        "EINVAL"
    end
    h.token = token
  end
  if (opts.cert_file == nil) ~= (opts.key_file == nil) then
    return nil, "EINVAL: --http-cert and --http-key go together", "EINVAL"
  end
  if opts.cert_file then
    local err
    h.cert, err = read_all(opts.cert_file, "--http-cert")
    if not h.cert then return nil, err, err:match("^%u+") end
    h.key, err = read_all(opts.key_file, "--http-key")
    if not h.key then return nil, err, err:match("^%u+") end
  end
  for _, name in ipairs { "index.html", "app.js", "style.css" } do
    local body = baton._libfile("baton/web/" .. name)
    if body then h.files[name] = { body = body, type = CONTENT_TYPES[name:match("%.(%w+)$")] } end
  end
  return h
end

-- Starts serving for node self: opts as for M.prepare, or what it
-- returned. Sets self.http (the server and what it serves). Returns the server (srv.addr, srv.port), or nil,
-- "ECODE: message", code (a file as in M.prepare; the address in use).
function M.start(self, opts)
  local h = opts
  if not h.prepared then
    local err, code
    h, err, code = M.prepare(opts)
    if not h then return nil, err, code end
  end
  self.http = h
  local srv, err, code = baton.httpd.listen {
    addr = h.addr, cert = h.cert, key = h.key, max_body = M.MAX_BODY, max_body_total = M.MAX_BODY_TOTAL,
    max_connections = M.MAX_CONNECTIONS, headers = M.HEADERS,
    check = function(req) return check(self, req) end,
    handler = function(req) return handle(self, req) end,
  }
  if not srv then return nil, err, code end
  hosts_of(h, srv.addr)
  h.server = srv
  -- The first GET /api/v1/jobs would read every status and last run: do
  -- it now, once the job store is listed.
  self.go(function()
    while not self.listed and not self.stopping do baton.sleep(0.1) end
    if not self.stopping and h.server then
      API.jobs(self)
      -- (the listing's garbage goes at once, as after the node's own)
      baton._release_memory()
    end
  end)
  return srv
end

-- Stops listening (requests in flight are answered).
function M.stop(self)
  local h = self.http
  if h and h.server then
    h.server:close()
    h.server = nil
  end
  if h and h.view then h.view:close() end
end

return M
