-- The handlers of the node's HTTP API (docs/api.md) and its probes and
-- metrics: each takes (self: the node, req, the route's params, the
-- query) and returns status, body (a table, sent as JSON, or a string),
-- headers. node/http.lua admits a request and routes it here; what a
-- handler does is baton.ops's, as the CLI does it.
local baton = require "baton"
local keys = require "baton.keys"
local ops = require "baton.ops"
local runs = require "baton.node.runs"
local U = require "baton.util"
local view = require "baton.node.view"

local json = baton.json
local format, concat = string.format, table.concat

local M = {}

M.MAX_LIMIT = 1000 -- ?limit= at most
M.ETCD_FRESH = 5 -- seconds: /readyz trusts an etcd answer this recent
M.PROBE_WAIT = 2 -- seconds /readyz waits for its own etcd probe

local JSON = "application/json"
-- Answers hold names and text read from etcd (a run id from a raw key, an
-- error a job raised): a NUL byte there is sent as U+FFFD (baton.json), not
-- a 500.
local TEXT = { nul = "replace" }
M.JSON, M.TEXT = JSON, TEXT

-- The status of an error code from baton.ops (extra.invalid: 422). Codes
-- not here are etcd's (refused, timed out, unavailable, auth): 503.
local STATUS = {
  EINVAL = 400, EACCES = 403, ENOENT = 404, EMETHOD = 405,
  EEXIST = 409, ECONFLICT = 409, EFBIG = 413, EINTERNAL = 500,
}

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
-- (self.health.etcd_ok_at, set by the etcd observer of node/metrics.lua); else a
-- probe of our own, at most one a second, waited for M.PROBE_WAIT s.
local function etcd_reachable(self)
  local now = baton.monotime()
  if self.health.etcd_ok_at and now - self.health.etcd_ok_at <= M.ETCD_FRESH then return true end
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
    if not ok then why = "etcd unreachable: " .. tostring(self.health.etcd_err or err or "no answer") end
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

M.API = API
return M
