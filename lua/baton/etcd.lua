-- The etcd client API (docs/lua-api.md, "baton.etcd") over the C engine in
-- baton._etcd, which does the transport: endpoints and failover,
-- authentication, retries, watch resumption and lease keepalives. This file
-- gives requests and responses their shape: base64 for keys and values,
-- int64 strings to numbers (revisions) or kept as strings (lease ids),
-- omitted zero fields filled in.
local baton = require "baton"
local raw = baton._etcd
local b64, unb64 = raw.b64encode, raw.b64decode
local tonumber, type, pairs, ipairs, error = tonumber, type, pairs, ipairs, error
local format, char, byte = string.format, string.char, string.byte

local M = {}
local Client = {}
Client.__index = Client
local Lease = {}
Lease.__index = Lease
local Watcher = {}
Watcher.__index = Watcher

local function argerr(fn, n, msg)
  error(format("bad argument #%d to '%s' (%s)", n, fn, msg), 3)
end

local function check_str(v, fn, n, what)
  if type(v) ~= "string" then
    argerr(fn, n, (what or "string") .. " expected, got " .. type(v))
  end
end

-- Raises on option names the function does not know: etcd ignores unknown
-- fields silently, which turns a typo into a different request.
local function check_opts(opts, fn, n, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" then argerr(fn, n, "table expected, got " .. type(opts)) end
  for k in pairs(opts) do
    if not known[k] then argerr(fn, n, "unknown option '" .. tostring(k) .. "'") end
  end
  return opts
end

local function num(s) return tonumber(s) or 0 end

-- The smallest key greater than every key with this prefix.
local function prefix_end(key)
  for i = #key, 1, -1 do
    local b = byte(key, i)
    if b < 255 then return key:sub(1, i - 1) .. char(b + 1) end
  end
  return "\0"
end
M.prefix_end = prefix_end

local function map_kv(kv)
  if not kv then return nil end
  return {
    key = kv.key and unb64(kv.key) or "",
    value = kv.value and unb64(kv.value) or "",
    create_revision = num(kv.create_revision),
    mod_revision = num(kv.mod_revision),
    version = num(kv.version),
    lease = kv.lease,
  }
end

local function map_kvs(list)
  local out = {}
  for i, kv in ipairs(list or {}) do out[i] = map_kv(kv) end
  return out
end

local function revision(r)
  return num(r.header and r.header.revision)
end

local SORT_TARGET = { key = "KEY", create = "CREATE", mod = "MOD",
                      version = "VERSION", value = "VALUE" }
local SORT_ORDER = { asc = "ASCEND", desc = "DESCEND" }

local RANGE_OPTS = { prefix = true, range_end = true, limit = true,
  revision = true, keys_only = true, count_only = true, sort = true,
  order = true, serializable = true, min_mod_revision = true,
  max_mod_revision = true, min_create_revision = true,
  max_create_revision = true }

local function range_body(fn, key, opts)
  opts = check_opts(opts, fn, 2, RANGE_OPTS)
  local body = { key = b64(key) }
  if opts.prefix then
    body.range_end = b64(prefix_end(key))
  elseif opts.range_end ~= nil then
    check_str(opts.range_end, fn, 2, "range_end: string")
    body.range_end = b64(opts.range_end)
  end
  for _, f in ipairs { "limit", "revision", "min_mod_revision",
      "max_mod_revision", "min_create_revision", "max_create_revision" } do
    local v = opts[f]
    if v ~= nil then
      if type(v) ~= "number" then argerr(fn, 2, f .. ": number expected") end
      body[f] = format("%d", v)
    end
  end
  if opts.keys_only then body.keys_only = true end
  if opts.count_only then body.count_only = true end
  if opts.serializable then body.serializable = true end
  if opts.sort ~= nil or opts.order ~= nil then
    local t = SORT_TARGET[opts.sort or "key"]
    local o = SORT_ORDER[opts.order or "asc"]
    if not t then argerr(fn, 2, "sort: one of key, create, mod, version, value") end
    if not o then argerr(fn, 2, "order: asc or desc") end
    body.sort_target, body.sort_order = t, o
  end
  return body
end

local function map_range(r)
  local kvs = map_kvs(r.kvs)
  return { kvs = kvs, count = num(r.count), more = r.more == true,
           revision = revision(r) }
end

local PUT_OPTS = { lease = true, prev_kv = true, ignore_value = true,
                   ignore_lease = true }

local function lease_id(v, fn, n)
  if v == nil then return nil end
  if type(v) == "table" and v.id then v = v.id end
  if type(v) == "number" then
    if v >= 2^53 then argerr(fn, n, "lease: pass lease ids as strings") end
    v = format("%d", v)
  end
  if type(v) ~= "string" or not v:match("^%-?%d+$") then
    argerr(fn, n, "lease: a lease id (string of digits) or lease expected")
  end
  return v
end

local function put_body(fn, key, value, opts)
  opts = check_opts(opts, fn, 3, PUT_OPTS)
  local body = { key = b64(key), value = b64(value) }
  body.lease = lease_id(opts.lease, fn, 3)
  if opts.prev_kv then body.prev_kv = true end
  if opts.ignore_value then body.ignore_value = true; body.value = nil end
  if opts.ignore_lease then body.ignore_lease = true end
  return body
end

local DELETE_OPTS = { prefix = true, range_end = true, prev_kv = true }

local function delete_body(fn, key, opts)
  opts = check_opts(opts, fn, 2, DELETE_OPTS)
  local body = { key = b64(key) }
  if opts.prefix then body.range_end = b64(prefix_end(key))
  elseif opts.range_end ~= nil then body.range_end = b64(opts.range_end) end
  if opts.prev_kv then body.prev_kv = true end
  return body
end

---------------------------------------------------------------------------
-- client

-- config: a table of options, or a function returning one (read on first
-- use, so baton.config set after start-up applies to the default client).
function M.new(config)
  if config ~= nil and type(config) ~= "table" and type(config) ~= "function" then
    argerr("baton.etcd.new", 1, "table expected, got " .. type(config))
  end
  return setmetatable({ _config = config or {} }, Client)
end

function M.default(config_fn)
  return M.new(config_fn)
end

Client.new = function(self_or_opts, opts)
  -- baton.etcd.new{...} and baton.etcd:new{...} both work
  if getmetatable(self_or_opts) == Client then return M.new(opts) end
  return M.new(self_or_opts)
end

function Client:_raw()
  local c = self._c
  if c then return c end
  local cfg = self._config
  if type(cfg) == "function" then cfg = cfg() end
  local err, code
  c, err, code = raw.new(cfg)
  if not c then return nil, err, code end
  self._c = c
  return c
end

-- The short name of a request path for observers: /v3/kv/range -> range,
-- /v3/lease/grant -> lease_grant, /v3/maintenance/status ->
-- maintenance_status.
local op_names = {}
local function op_name(path)
  local n = op_names[path]
  if not n then
    n = path:gsub("^/v3/", ""):gsub("^kv/", ""):gsub("/", "_")
    op_names[path] = n
  end
  return n
end

-- Sets (fn) or removes (nil) the client's observer: after every request
-- of this client, fn(operation, seconds, code, message) with operation a
-- short name ("range", "put", "deleterange", "txn", "lease_grant",
-- "lease_keepalive", "watch", ...), and code and message nil on success or
-- the error's "ECODE" and "ECODE: message". The node feeds its metrics so.
function Client:observe(fn)
  if fn ~= nil and type(fn) ~= "function" then
    argerr("observe", 1, "function or nil expected, got " .. type(fn))
  end
  self._observer = fn
end

local monotime = baton.monotime

local function observed(obs, op, t0, r, err, code)
  obs(op, monotime() - t0, (not r) and (code or "EUNKNOWN") or nil, (not r) and err or nil)
  return r, err, code
end

function Client:call(path, body, idempotent)
  local c, err, code = self:_raw()
  local obs = self._observer
  if not c then
    if obs then obs(op_name(path), 0, code or "EUNKNOWN", err) end
    return nil, err, code
  end
  if not obs then return c:call(path, body, idempotent) end
  return observed(obs, op_name(path), monotime(), c:call(path, body, idempotent))
end

function Client:endpoint()
  local c = self:_raw()
  return c and c:endpoint()
end

function Client:close()
  if self._c then self._c:close(); self._c = nil end
  return true
end

function Client:get(key, opts)
  check_str(key, "get", 1)
  local r, err, code = self:call("/v3/kv/range", range_body("get", key, opts), true)
  if not r then return nil, err, code end
  return map_range(r)
end

function Client:put(key, value, opts)
  check_str(key, "put", 1)
  check_str(value, "put", 2)
  local r, err, code = self:call("/v3/kv/put", put_body("put", key, value, opts))
  if not r then return nil, err, code end
  return { revision = revision(r), prev_kv = map_kv(r.prev_kv) }
end

function Client:delete(key, opts)
  check_str(key, "delete", 1)
  local r, err, code = self:call("/v3/kv/deleterange", delete_body("delete", key, opts))
  if not r then return nil, err, code end
  return { deleted = num(r.deleted), revision = revision(r),
           prev_kvs = map_kvs(r.prev_kvs) }
end

local TARGETS = { create = { "CREATE", "create_revision" },
                  mod = { "MOD", "mod_revision" },
                  version = { "VERSION", "version" },
                  value = { "VALUE", "value" },
                  lease = { "LEASE", "lease" } }
local OPS = { ["=="] = "EQUAL", ["="] = "EQUAL", ["~="] = "NOT_EQUAL",
              ["!="] = "NOT_EQUAL", ["<"] = "LESS", [">"] = "GREATER" }

local function compare_body(c, i)
  if type(c) ~= "table" then argerr("txn", 1, "compare[" .. i .. "]: table expected") end
  if type(c.key) ~= "string" then argerr("txn", 1, "compare[" .. i .. "].key: string expected") end
  local t = TARGETS[c.target]
  if not t then
    argerr("txn", 1, "compare[" .. i .. "].target: one of create, mod, version, value, lease")
  end
  local op = OPS[c.op or "=="]
  if not op then argerr("txn", 1, "compare[" .. i .. "].op: one of ==, ~=, <, >") end
  local body = { key = b64(c.key), target = t[1], result = op }
  local v = c.value
  if c.target == "value" then
    if type(v) ~= "string" then argerr("txn", 1, "compare[" .. i .. "].value: string expected") end
    body.value = b64(v)
  elseif c.target == "lease" then
    body.lease = lease_id(v or "0", "txn", 1)
  else
    if type(v) ~= "number" then argerr("txn", 1, "compare[" .. i .. "].value: number expected") end
    body[t[2]] = format("%d", v)
  end
  if c.prefix then body.range_end = b64(prefix_end(c.key))
  elseif c.range_end then body.range_end = b64(c.range_end) end
  return body
end

local txn_body

local function op_body(op, i)
  if type(op) ~= "table" then argerr("txn", 1, "operation " .. i .. ": table expected") end
  if op.put then
    local p = op.put
    if type(p.key) ~= "string" or type(p.value) ~= "string" then
      argerr("txn", 1, "operation " .. i .. ": put needs string key and value")
    end
    local o = {}
    for k, v in pairs(p) do if k ~= "key" and k ~= "value" then o[k] = v end end
    return { request_put = put_body("txn", p.key, p.value, o) }
  elseif op.get then
    local g = op.get
    if type(g.key) ~= "string" then argerr("txn", 1, "operation " .. i .. ": get needs a string key") end
    local o = {}
    for k, v in pairs(g) do if k ~= "key" then o[k] = v end end
    return { request_range = range_body("txn", g.key, o) }
  elseif op.delete then
    local d = op.delete
    if type(d.key) ~= "string" then argerr("txn", 1, "operation " .. i .. ": delete needs a string key") end
    local o = {}
    for k, v in pairs(d) do if k ~= "key" then o[k] = v end end
    return { request_delete_range = delete_body("txn", d.key, o) }
  elseif op.txn then
    return { request_txn = txn_body(op.txn) }
  end
  argerr("txn", 1, "operation " .. i .. ": one of put, get, delete, txn expected")
end

function txn_body(t)
  if type(t) ~= "table" then argerr("txn", 1, "table expected, got " .. type(t)) end
  for k in pairs(t) do
    if k ~= "compare" and k ~= "success" and k ~= "failure" then
      argerr("txn", 1, "unknown field '" .. tostring(k) .. "'")
    end
  end
  local body = { compare = baton.json.array(), success = baton.json.array(),
                 failure = baton.json.array() }
  for i, c in ipairs(t.compare or {}) do body.compare[i] = compare_body(c, i) end
  for i, op in ipairs(t.success or {}) do body.success[i] = op_body(op, i) end
  for i, op in ipairs(t.failure or {}) do body.failure[i] = op_body(op, i) end
  return body
end

local map_txn

local function map_response(r)
  if r.response_range then
    local m = map_range(r.response_range)
    m.op = "get"
    return m
  elseif r.response_put then
    return { op = "put", prev_kv = map_kv(r.response_put.prev_kv) }
  elseif r.response_delete_range then
    local d = r.response_delete_range
    return { op = "delete", deleted = num(d.deleted), prev_kvs = map_kvs(d.prev_kvs) }
  elseif r.response_txn then
    local m = map_txn(r.response_txn)
    m.op = "txn"
    return m
  end
  return {}
end

function map_txn(r)
  local out = { succeeded = r.succeeded == true, responses = {},
                revision = revision(r) }
  for i, resp in ipairs(r.responses or {}) do out.responses[i] = map_response(resp) end
  return out
end

function Client:txn(t)
  local body = txn_body(t)
  local r, err, code = self:call("/v3/kv/txn", body)
  if not r then return nil, err, code end
  return map_txn(r)
end

function Client:compact(rev, physical)
  if type(rev) ~= "number" then argerr("compact", 1, "number expected") end
  local r, err, code = self:call("/v3/kv/compaction",
    { revision = format("%d", rev), physical = physical and true or nil })
  if not r then return nil, err, code end
  return { revision = revision(r) }
end

function Client:status()
  local r, err, code = self:call("/v3/maintenance/status", {}, true)
  if not r then return nil, err, code end
  return { version = r.version, leader = r.leader, revision = revision(r),
           db_size = num(r.dbSize), raft_index = num(r.raftIndex),
           raft_term = num(r.raftTerm), member_id = r.header and r.header.member_id }
end

---------------------------------------------------------------------------
-- leases

function Client:grant(ttl, opts)
  if type(ttl) ~= "number" then argerr("grant", 1, "number expected, got " .. type(ttl)) end
  opts = check_opts(opts, "grant", 2, { id = true })
  local body = { TTL = format("%d", ttl), ID = lease_id(opts.id, "grant", 2) }
  local r, err, code = self:call("/v3/lease/grant", body)
  if not r then return nil, err, code end
  if r.error and r.error ~= "" then return nil, "EETCD: " .. r.error, "EETCD" end
  return setmetatable({ id = r.ID, ttl = num(r.TTL), client = self }, Lease)
end

function Client:leases()
  local r, err, code = self:call("/v3/lease/leases", {}, true)
  if not r then return nil, err, code end
  local out = {}
  for i, l in ipairs(r.leases or {}) do out[i] = l.ID end
  return out
end

function Client:lease(id)
  return setmetatable({ id = lease_id(id, "lease", 1), ttl = 0, client = self }, Lease)
end

local function lost(id)
  return nil, "ENOLEASE: lease " .. id .. " not found or expired", "ENOLEASE"
end

-- One keepalive now; from then on the C core renews the lease every TTL/3
-- until revoke() or until it is lost (see :state()).
function Lease:keepalive()
  local r, err, code = self.client:call("/v3/lease/keepalive", { ID = self.id }, true)
  if not r then return nil, err, code end
  local ttl = num(r.TTL)
  if ttl <= 0 then return lost(self.id) end
  self.ttl = ttl
  if not self._keeper then
    local c = self.client:_raw()
    local k, kerr, kcode = c:keepalive(self.id, ttl)
    if not k then return nil, kerr, kcode end
    self._keeper = k
  end
  return ttl
end

-- Starts the automatic keepalive without renewing now: for a lease just
-- granted, whose TTL is already full. Used by sessions (one round trip less).
function Lease:keep()
  if self._keeper then return true end
  local c, err, code = self.client:_raw()
  if not c then return nil, err, code end
  local k
  k, err, code = c:keepalive(self.id, self.ttl)
  if not k then return nil, err, code end
  self._keeper = k
  return true
end

-- "alive", "lost" (with the reason) or "stopped"; "none" before keepalive().
function Lease:state()
  if not self._keeper then return "none", "" end
  return self._keeper:state()
end

-- Waits until automatic keepalive ends: returns "lost", reason or "stopped".
function Lease:wait()
  if not self._keeper then return nil, "EINVAL: keepalive() was not called", "EINVAL" end
  return self._keeper:wait()
end

function Lease:revoke()
  if self._keeper then self._keeper:stop(); self._keeper = nil end
  local r, err, code = self.client:call("/v3/lease/revoke", { ID = self.id })
  if not r then return nil, err, code end
  return true
end

-- (The contract also names this lease:ttl(), but `ttl` is the granted TTL
-- field of the same object, so the method carries etcd's own name.)
function Lease:timetolive()
  local r, err, code = self.client:call("/v3/lease/timetolive",
                                        { ID = self.id, keys = true }, true)
  if not r then return nil, err, code end
  local ttl = num(r.TTL)
  if ttl < 0 then return lost(self.id) end
  local keys = {}
  for i, k in ipairs(r.keys or {}) do keys[i] = unb64(k) end
  return ttl, { granted = num(r.grantedTTL), keys = keys }
end

---------------------------------------------------------------------------
-- watches

local WATCH_OPTS = { prefix = true, range_end = true, start_revision = true,
  prev_kv = true, no_put = true, no_delete = true, idle_timeout = true }

-- Returns once etcd has confirmed the watch, so every change made after the
-- call returns is seen.
function Client:watch(key, opts)
  check_str(key, "watch", 1)
  opts = check_opts(opts, "watch", 2, WATCH_OPTS)
  local o = { key = key, prev_kv = opts.prev_kv, no_put = opts.no_put,
              no_delete = opts.no_delete, idle_timeout = opts.idle_timeout,
              start_revision = opts.start_revision }
  if opts.prefix then o.range_end = prefix_end(key)
  elseif opts.range_end then o.range_end = opts.range_end end
  local c, err, code = self:_raw()
  if not c then return nil, err, code end
  local obs, t0 = self._observer, monotime()
  local w, rev, created = c:watch(o)
  if obs then obs("watch", monotime() - t0, (not w) and (created or "EUNKNOWN") or nil, (not w) and rev or nil) end
  if not w then return nil, rev, created end -- (nil, message, code)
  return setmetatable({ _w = w, start_revision = rev, created_revision = created },
                      Watcher)
end

local function map_events(evs, rev, ...)
  if not evs then return nil, rev, ... end
  local out = {}
  for i, ev in ipairs(evs) do
    out[i] = { type = ev.type == "DELETE" and "delete" or "put",
               kv = map_kv(ev.kv), prev_kv = map_kv(ev.prev_kv) }
  end
  return out, rev
end

-- The next batch of events (one etcd revision or more), in revision order.
function Watcher:next(timeout)
  if timeout ~= nil and type(timeout) ~= "number" then
    argerr("next", 1, "number expected, got " .. type(timeout))
  end
  return map_events(self._w:next(timeout))
end

function Watcher:cancel()
  return self._w:cancel()
end

-- The last revision this watcher has seen (events or progress).
function Watcher:revision()
  return self._w:revision()
end

-- How many times the stream was established (1 + reconnects).
function Watcher:connects()
  return self._w:connects()
end

return M
