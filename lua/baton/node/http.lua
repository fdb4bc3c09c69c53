-- The node's HTTP face (design.md section 5.1, docs/api.md): `baton node
-- --http ADDR` serves, on the node's loop (baton.httpd, libmicrohttpd in
-- runtime/core/httpd.c), each request in its own coroutine:
--
--   /healthz /readyz /metrics      probes and Prometheus (node/metrics.lua)
--   / /app.js /style.css           the dashboard (lua/baton/web/, read once)
--   /api/v1/...                    the REST API: baton.ops, the operations
--                                  the CLI runs, with the CLI's --json shapes
--
-- Errors are JSON {"error": "...", "code": "ECODE"} with the status of
-- STATUS below. Writes (PUT, POST, DELETE) need `Authorization: Bearer
-- TOKEN`, TOKEN being the first line of --http-token-file; without a token
-- file the API is read-only. Requests are counted per route and status in
-- the node's metrics (baton_http_requests_total).
local baton = require "baton"
local ops = require "baton.ops"
local runs = require "baton.node.runs"
local U = require "baton.cli.util"
local view = require "baton.node.view"

local json = baton.json
local format, concat, byte, char = string.format, table.concat, string.byte, string.char
local bit = require "bit"
local bxor, bor = bit.bxor, bit.bor

local M = {}

M.MAX_BODY = 2 * 1024 * 1024 -- bytes; a job source over etcd's limit gets a 413 that says so
M.MAX_LIMIT = 1000 -- ?limit= at most
M.ETCD_FRESH = 5 -- seconds: /readyz trusts an etcd answer this recent
M.PROBE_WAIT = 2 -- seconds /readyz waits for its own etcd probe

local JSON = "application/json"
-- Answers hold names and text read from etcd (a run id from a raw key, an
-- error a job raised): a NUL byte there is sent as U+FFFD (baton.json), not
-- a 500.
local TEXT = { nul = "replace" }
local CONTENT_TYPES = {
  html = "text/html; charset=utf-8", js = "text/javascript; charset=utf-8", css = "text/css; charset=utf-8",
}

-- The status of an error code from baton.ops (extra.invalid: 422). Codes
-- not here are etcd's (refused, timed out, unavailable, auth): 503.
local STATUS = {
  EINVAL = 400, EACCES = 403, ENOENT = 404, EMETHOD = 405,
  EEXIST = 409, ECONFLICT = 409, EFBIG = 413, EINTERNAL = 500,
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

-- The query string as {name = value}; nil, err when malformed.
local function parse_query(q)
  local t = {}
  if q == "" then return t end
  for part in (q .. "&"):gmatch("([^&]*)&") do
    if part ~= "" then
      local k, v = part:match("^([^=]*)=(.*)$")
      k, v = unescape(k or part, true), unescape(v or "", true)
      if not k or not v then return nil, "EINVAL: bad percent-encoding in the query string" end
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
  local f, err = io.open(path, "rb")
  if not f then return nil, format("EACCES: %s %s: %s", what, path, (err or "cannot open"):gsub("^[^:]*: ", "")) end
  local s = f:read("*a")
  f:close()
  if not s then return nil, format("EIO: %s %s: cannot read", what, path) end
  return s
end

-- Where the dashboard's files are, for messages: baton/web/ of the library
-- snapshot every process reads once at start (runtime/core/lib.c), which
-- is also where they are served from.
local function web_dir()
  return (baton._libdir or "lua") .. "/baton/web/"
end

---------------------------------------------------------------------------
-- the routes

local API = {} -- handlers: fn(self, req, params, query) -> status, body (a table or a string), headers

local function fail_of(err, code, extra)
  local status = (extra and extra.invalid) and 422 or STATUS[code] or 503
  return status, { error = err, code = code or "EIO", field = extra and extra.field or nil }
end

-- The result of an ops call as a response: status ok with its data, or the
-- error's.
local function answer(ok, data, err, code, extra)
  if data == nil then return fail_of(err, code, extra) end
  return ok, data
end

local function bad(msg) return 400, { error = "EINVAL: " .. msg, code = "EINVAL" } end

-- ?limit=N: a whole number from 1 to M.MAX_LIMIT (default def).
local function limit_of(query, def)
  local v = query.limit
  if v == nil then return def end
  local n = tonumber(v)
  if not n or n ~= math.floor(n) or n < 1 or n > M.MAX_LIMIT or not v:match("^%d+$") then
    return nil, format("limit must be a whole number from 1 to %d, not %q", M.MAX_LIMIT, v)
  end
  return n
end

local function flag_of(query, name)
  local v = query[name]
  if v == nil or v == "0" or v == "false" then return false end
  if v == "" or v == "1" or v == "true" then return true end
  return nil, format("%s must be 1, true, 0 or false, not %q", name, v)
end

-- ?revision=N for a put: store only at that mod revision (0: only if new).
local function revision_of(query)
  local v = query.revision
  if v == nil then return nil end
  if not v:match("^%d+$") then return false, format("revision must be a whole number >= 0, not %q", v) end
  return tonumber(v)
end

-- The node's memory of the jobs, their statuses and last runs
-- (node/view.lua), started on first use.
local function the_view(self)
  local h = self.http
  h.view = h.view or view.new(self)
  local ok, err = h.view:start()
  if not ok then return nil, err end
  return h.view
end

-- GET /api/v1/jobs reads no etcd key: the node's view, listed by
-- baton.ops as job ls lists etcd. The body is kept until the job store, a
-- status or a last run changes, or the soonest next instant passes; one
-- request builds it at a time.
function API.jobs(self)
  local v, verr = the_view(self)
  if not v then return 503, { error = verr, code = "EUNAVAILABLE" } end
  local h = self.http
  while h.jobs_building do baton.sleep(0.005) end
  local stamp = self.store_version .. "/" .. v.version
  local c = h.jobs_cache
  if c and c.stamp == stamp and (not c.expires or baton.now() < c.expires) then return 200, c.body end
  h.jobs_building = true
  local ok, list, soonest, code = pcall(function()
    local jv, err, ecode = v:jobs()
    if not jv then return nil, err, ecode end
    return ops.list_jobs { view = jv, spec_for = function(name, rev) return v:spec_for(name, rev) end,
                           yield_every = 1000 }
  end)
  h.jobs_building = false
  if not ok then error(list, 0) end
  if not list then return fail_of(soonest, code) end
  local body = json.encode(list, TEXT)
  h.jobs_cache = { stamp = stamp, expires = soonest, body = body }
  return 200, body
end

function API.job_get(_, _, p) return answer(200, ops.show_job(p.name)) end

-- After a write through this node, waits (up to M.SETTLE s) until the
-- node's job store shows it, so that a GET that follows lists it (GET
-- /api/v1/jobs reads the node's memory, which its watch keeps).
M.SETTLE = 2
local function settle(done)
  local deadline = baton.monotime() + M.SETTLE
  while not done() and baton.monotime() < deadline do baton.sleep(0.005) end
end

function API.job_put(self, req, p, q)
  local rev, rerr = revision_of(q)
  if rev == false then return bad(rerr) end
  if req.body == "" then return bad("empty body: PUT the job's Lua source") end
  local r, err, code, extra = ops.put_job(p.name, req.body, { revision = rev, author = "http " .. tostring(req.remote) })
  if not r then return fail_of(err, code, extra) end
  settle(function()
    local j = self.jobs[p.name]
    return (j and j.spec.revision >= r.revision) or (self.bad[p.name] or 0) >= r.revision
  end)
  return r.created and 201 or 200, r
end

function API.job_delete(self, req, p, q)
  local purge, perr = flag_of(q, "purge")
  if purge == nil then return bad(perr) end
  local r, err, code = ops.rm_job(p.name, { purge = purge, author = "http " .. tostring(req.remote) })
  if not r then return fail_of(err, code) end
  settle(function() return not self.jobs[p.name] and not self.bad[p.name] end)
  return 200, r
end

-- The JSON object of a request body (nil for an empty body), or nil, err.
local function json_body(req, fields)
  if req.body:match("^%s*$") then return {} end
  local ok, v, err = pcall(json.decode, req.body)
  if not ok or v == nil then
    return nil, "EINVAL: the body is not JSON: " .. tostring(ok and err or v):gsub("^EINVAL: ", "")
  end
  if type(v) ~= "table" or (v[1] ~= nil) then return nil, "EINVAL: the body must be a JSON object" end
  for k in pairs(v) do
    if not fields[k] then
      local names = U.sorted_keys(fields)
      return nil, format("EINVAL: unknown field %q in the body (%s)", tostring(k), concat(names, ", "))
    end
  end
  return v
end

function API.job_run(_, req, p)
  local b, err = json_body(req, { params = true, force = true })
  if not b then return 400, { error = err, code = "EINVAL" } end
  local params = b.params
  if params == json.null then params = nil end
  if params ~= nil and (type(params) ~= "table" or params[1] ~= nil) then
    return bad("params must be an object of strings")
  end
  local force = b.force
  if force == json.null then force = nil end
  return answer(202, ops.run_job(p.name, { params = params, force = force }))
end

local function pause(self, name, paused)
  local r, err, code = (paused and ops.pause_job or ops.resume_job)(name)
  if not r then return fail_of(err, code) end
  settle(function() return (self.paused[name] or false) == paused end)
  return 200, r
end

function API.job_pause(self, _, p) return pause(self, p.name, true) end
function API.job_resume(self, _, p) return pause(self, p.name, false) end

function API.job_kill(_, req, p, q)
  if q.id == "" then return bad("id must not be empty") end
  return answer(200, ops.kill_job(p.name, { id = q.id, by = "http " .. tostring(req.remote) }))
end

function API.job_runs(_, _, p, q)
  local n, lerr = limit_of(q, 20)
  if not n then return bad(lerr) end
  return answer(200, ops.history(p.name, n))
end

function API.runs(self, _, _, q)
  local n, lerr = limit_of(q, 20)
  if not n then return bad(lerr) end
  local v, verr = the_view(self)
  if not v then return 503, { error = verr, code = "EUNAVAILABLE" } end
  return answer(200, ops.recent_runs(n, { last = v:last_runs() }))
end

function API.run_get(_, _, p, q)
  local a
  if q.attempt ~= nil then
    a = q.attempt:match("^%d+$") and tonumber(q.attempt)
    if not a or a < 1 then return bad(format("attempt must be a whole number >= 1, not %q", q.attempt)) end
  end
  return answer(200, ops.get_run(p.job, p.id, { attempt = a }))
end

function API.nodes() return answer(200, ops.nodes()) end
function API.leader() return answer(200, ops.leader()) end

function API.info(self)
  local l = ops.leader()
  return 200, {
    node = self.name, version = baton.version, writable = self.http.token ~= nil,
    leader = l and l.value or json.null, time = baton.now(), prefix = self.P,
  }
end

function API.policies() return answer(200, ops.list_policies()) end
function API.policy_get(_, _, p) return answer(200, ops.show_policy(p.name)) end

function API.policy_put(_, req, p, q)
  local rev, rerr = revision_of(q)
  if rev == false then return bad(rerr) end
  if req.body == "" then return bad("empty body: PUT the policy's Lua source") end
  local r, err, code, extra = ops.put_policy(p.name, req.body, { revision = rev,
                                                                  author = "http " .. tostring(req.remote) })
  if not r then return fail_of(err, code, extra) end
  return r.created and 201 or 200, r
end

function API.policy_delete(_, req, p)
  return answer(200, ops.rm_policy(p.name, { author = "http " .. tostring(req.remote) }))
end

-- The version log of a job or policy (baton.versions), newest first.
function API.job_versions(_, _, p) return answer(200, ops.versions("job", p.name)) end
function API.policy_versions(_, _, p) return answer(200, ops.versions("policy", p.name)) end

-- POST /api/v1/queues/{queue}/tasks: the body is one task; with
-- ?batch=true, many, as `baton queue push QUEUE -` reads them (one per line,
-- or a JSON array), answered {queue, count, keys, revision}.
function API.queue_push(_, req, p, q)
  local batch, berr = flag_of(q, "batch")
  if batch == nil then return bad(berr) end
  if not batch then return answer(201, ops.queue_push(p.queue, req.body)) end
  local ok, nerr, ncode = ops.check_name("queue", p.queue)
  if not ok then return fail_of(nerr, ncode) end
  local values, where, code = ops.queue_tasks(req.body or "", "the body")
  if not values then return fail_of(where, code) end
  return answer(201, ops.queue_push_many(p.queue, values, where))
end

function API.healthz(self)
  return 200, { status = "ok", node = self.name }
end

-- Whether etcd answered lately: the node's own requests say so
-- (self.etcd_ok_at, set by the etcd observer of node/metrics.lua); else a
-- probe of our own, at most one a second, waited for M.PROBE_WAIT s.
local function etcd_reachable(self)
  local now = baton.monotime()
  if self.etcd_ok_at and now - self.etcd_ok_at <= M.ETCD_FRESH then return true end
  local h = self.http
  if h.probe_at and now - h.probe_at < 1 and h.probe_ok ~= nil then return h.probe_ok, h.probe_err end
  if not h.probing then
    h.probing = true
    baton.go(function()
      local r, err = self.e:get(self.P .. "nodes/" .. self.name, { count_only = true })
      h.probing, h.probe_at = false, baton.monotime()
      h.probe_ok, h.probe_err = r ~= nil, err
    end)
  end
  local deadline = now + M.PROBE_WAIT
  while h.probing and baton.monotime() < deadline do baton.sleep(0.02) end
  if h.probing then return false, "no answer within " .. M.PROBE_WAIT .. " s" end
  return h.probe_ok, h.probe_err
end

function API.readyz(self)
  local why
  if self.stopping then
    why = "the node is stopping"
  elseif not runs.live(self) then
    why = "no live session: the node lost its lease and is rejoining"
  elseif not self.listed then
    why = "the job store is not listed yet"
  else
    local ok, err = etcd_reachable(self)
    if not ok then why = "etcd unreachable: " .. tostring(self.etcd_err or err or "no answer") end
  end
  if why then return 503, { status = "not ready", reason = why, node = self.name } end
  return 200, { status = "ready", node = self.name }
end

function API.metrics(self)
  local ok, m = pcall(require, "baton.node.metrics")
  if not ok or type(m.render) ~= "function" or not self.metrics then
    return 503, { error = "metrics are not available in this build", code = "EUNAVAILABLE" }
  end
  local rok, text = pcall(m.render, self)
  if not rok then
    baton.log.error("metrics: render failed", { error = tostring(text) })
    return 500, { error = "internal error", code = "EINTERNAL" }
  end
  return 200, text, { ["content-type"] = "text/plain; version=0.0.4; charset=utf-8" }
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
        if c == ":" then
          local v = unescape(segs[i])
          if not v then return false, "bad percent-encoding in the path" end
          p[part:sub(2)] = v
        elseif c == "*" then
          local v = unescape(concat(segs, "/", i))
          if not v then return false, "bad percent-encoding in the path" end
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


-- Answers one request. Returns status, body (string), headers, route name.
local function serve(self, req)
  local h = self.http
  local method, path = req.method, req.path
  local get = method == "GET" or method == "HEAD"
  local file = STATIC[path]
  if file then
    if not get then
      return 405, json.encode { error = "method " .. method .. " not allowed on " .. path, code = "EMETHOD" },
        { ["content-type"] = JSON, allow = "GET, HEAD" }, path
    end
    local f = h.files[file]
    if not f then
      return 404, json.encode { error = "ENOENT: the dashboard's " .. file .. " is not installed (" .. h.web
        .. file .. ")", code = "ENOENT" }, { ["content-type"] = JSON }, path
    end
    return 200, f.body, { ["content-type"] = f.type, ["cache-control"] = "no-cache" }, path
  end
  local segs = {}
  for seg in path:gmatch("[^/]+") do segs[#segs + 1] = seg end
  if path:sub(1, 1) ~= "/" or path:find("//", 1, true) then segs = {} end
  local r, p = match(segs)
  local function err(status, msg, code, route, extra)
    local hdr = { ["content-type"] = JSON, ["cache-control"] = "no-store" }
    for k, v in pairs(extra or {}) do hdr[k] = v end
    return status, json.encode({ error = msg, code = code }, TEXT), hdr, route
  end
  if r == false then return err(400, "EINVAL: " .. p, "EINVAL", "other") end
  if not r then
    return err(404, "ENOENT: no such route: " .. method .. " " .. path .. " (docs/api.md lists them)",
      "ENOENT", "other")
  end
  local fn = r[get and "GET" or method]
  if not fn then
    return err(405, format("method %s not allowed on %s (allowed: %s)", method, r.name, r.allow),
      "EMETHOD", r.name, { allow = r.allow })
  end
  if not get then
    if not h.token then
      return err(403, "EACCES: this node's API is read-only: start the node with --http-token-file FILE "
        .. "to enable writes", "EACCES", r.name)
    end
    local auth = req.headers.authorization or ""
    local given = auth:lower():find("^bearer%s") and auth:match("^%S+%s+(.-)%s*$")
    if not given or not same(given, h.token) then
      return err(401, auth == "" and "EAUTH: writes need the header Authorization: Bearer TOKEN"
        or "EAUTH: wrong bearer token", "EAUTH", r.name, { ["www-authenticate"] = 'Bearer realm="baton"' })
    end
  end
  local q, qerr = parse_query(req.query)
  if not q then return err(400, qerr, "EINVAL", r.name) end
  local takes = r.query and r.query[get and "GET" or method] or {}
  for k in pairs(q) do
    if not takes[k] then
      local names = U.sorted_keys(takes)
      return err(400, format("EINVAL: unknown query parameter %q%s", k,
        #names > 0 and " (this route takes " .. concat(names, ", ") .. ")" or " (this route takes none)"),
        "EINVAL", r.name)
    end
  end
  local status, body, hdr = API[fn](self, req, p, q)
  hdr = hdr or { ["content-type"] = JSON, ["cache-control"] = "no-store" }
  if type(body) ~= "string" then body = json.encode(body, TEXT) end
  return status, body, hdr, r.name
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
-- cert_file =, key_file =}. Returns the prepared server, or nil,
-- "ECODE: message", code (one line: an unreadable file, an empty token).
function M.prepare(opts)
  local h = { addr = opts.addr, files = {}, web = web_dir(), prepared = true }
  if type(opts.addr) ~= "string" or opts.addr == "" then
    return nil, "EINVAL: --http needs an address (HOST:PORT, [::1]:PORT, :PORT)", "EINVAL"
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
    addr = h.addr, cert = h.cert, key = h.key, max_body = M.MAX_BODY,
    handler = function(req) return handle(self, req) end,
  }
  if not srv then return nil, err, code end
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
