-- The node's HTTP face (docs/api.md): `baton node
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
--
-- What the headers decide is decided before any of the body is read (the
-- server's check, admit below): the Host (against the listen address and
-- --http-allow-host: no DNS rebinding), the route and method, the token,
-- the query. Bodies are bounded per request (M.MAX_BODY) and all together
-- (M.MAX_BODY_TOTAL), and every answer carries M.HEADERS (CSP, no
-- framing, no sniffing, no referrer).
local baton = require "baton"
local keys = require "baton.keys"
local ops = require "baton.ops"
local runs = require "baton.node.runs"
local U = require "baton.util"
local view = require "baton.node.view"

local json = baton.json
local format, concat, byte, char = string.format, table.concat, string.byte, string.char
local bit = require "bit"
local bxor, bor = bit.bxor, bit.bor

local M = {}

M.MAX_BODY = 2 * 1024 * 1024 -- bytes; a job source over etcd's limit gets a 413 that says so
M.MAX_BODY_TOTAL = 8 * M.MAX_BODY -- bytes of bodies held at once, all requests together (then 503)
M.MAX_CONNECTIONS = 512 -- connections at once (each may hold MHD's 32 KiB of headers)
M.MAX_LIMIT = 1000 -- ?limit= at most
M.ETCD_FRESH = 5 -- seconds: /readyz trusts an etcd answer this recent
M.PROBE_WAIT = 2 -- seconds /readyz waits for its own etcd probe

local JSON = "application/json"
-- Answers hold names and text read from etcd (a run id from a raw key, an
-- error a job raised): a NUL byte there is sent as U+FFFD (baton.json), not
-- a 500.
local TEXT = { nul = "replace" }

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

---------------------------------------------------------------------------
-- the routes

local API = {} -- handlers: fn(self, req, params, query) -> status, body (a table or a string), headers

local function fail_of(err, code, extra)
  local status = (extra and extra.invalid) and 422 or STATUS[code] or 503
  return status, { error = err, code = code or "EIO", field = extra and extra.field or nil }
end

-- A put or rm of a job or policy (kind "jobs" or "policies") that failed:
-- with tools/etcd-roles.sh's node role the node's etcd user may not write
-- code (docs/security.md, "etcd roles"), so its API cannot deploy: the
-- 403 says so, and where deploys go.
local function code_fail(kind, err, code, extra)
  -- (etcd's refusal; not a source this node refuses: untrusted, stored.lua)
  if code == "EACCES" and tostring(err):find("permission denied", 1, true) then
    err = format("EACCES: this node's etcd user may not write %s (%s): put and remove them with the baton CLI "
      .. "under a deployer's etcd user (docs/security.md, \"etcd roles\")", kind, (tostring(err):gsub("^EACCES: ", "")))
  end
  return fail_of(err, code, extra)
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
-- (15 digits at most: a revision is an integer a double holds exactly)
local function revision_of(query)
  local v = query.revision
  if v == nil then return nil end
  if not v:match("^%d+$") or #v > 15 then
    return false, format("revision must be a whole number from 0 to 999999999999999, not %q", v)
  end
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
  if not r then return code_fail("jobs", err, code, extra) end
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
  if not r then return code_fail("jobs", err, code) end
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
  if type(v) ~= "table" or (v[1] ~= nil) or v == json.null then
    return nil, "EINVAL: the body must be a JSON object"
  end
  -- (a decoded string ends at its first NUL: refuse rather than cut)
  for bs in req.body:gmatch("(\\+)u0000") do
    if #bs % 2 == 1 then return nil, "EINVAL: the body holds \\u0000 (a NUL character), which no field may hold" end
  end
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
  if not r then return code_fail("policies", err, code, extra) end
  return r.created and 201 or 200, r
end

function API.policy_delete(_, req, p)
  local r, err, code = ops.rm_policy(p.name, { author = "http " .. tostring(req.remote) })
  if not r then return code_fail("policies", err, code) end
  return 200, r
end

-- The version log of a job or policy (baton.versions), newest first.
function API.job_versions(_, _, p) return answer(200, ops.versions("job", p.name)) end
function API.policy_versions(_, _, p) return answer(200, ops.versions("policy", p.name)) end

-- GET /api/v1/jobs/{name}/diff[?from=R1&to=R2]: `baton job diff NAME R1
-- R2` as {name, from, to, diff}; to defaults to the revision stored now,
-- from to the version before it (what changed last).
function API.job_diff(_, _, p, q)
  local rev = {}
  for _, k in ipairs { "from", "to" } do
    local v = q[k]
    if v ~= nil then
      if not v:match("^%d+$") or #v > 15 or tonumber(v) < 1 then
        return bad(format("%s must be a revision (a whole number >= 1), not %q", k, v))
      end
      rev[k] = tonumber(v)
    end
  end
  local text, from, to = ops.diff_versions("job", p.name, rev.from, rev.to)
  if not text then return fail_of(from, to) end
  return 200, { name = p.name, from = from, to = to, diff = text }
end

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
      local r, err = self.e:get(keys.key(self.P, "nodes", self.name), { count_only = true })
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
