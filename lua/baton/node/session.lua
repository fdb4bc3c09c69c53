-- The node's session and registration: the session lease (kept alive by
-- the C core), P nodes/<name> on it (what this node publishes of itself:
-- name, labels, version, running runs, clock, trust), the campaign in the
-- cluster election, and self-fencing: when the session is lost, every run
-- is stopped, then the node joins again on a new session and takes up the
-- work it could not claim meanwhile.
local baton = require "baton"
local keys = require "baton.keys"
local runs = require "baton.node.runs"
local leader = require "baton.node.leader"
local queue = require "baton.node.queue"
local triggers = require "baton.node.triggers"
local json = baton.json

local M = {}

local function log(level, msg, fields)
  baton.log[level](msg, fields)
end

local function round(x)
  if type(x) ~= "number" then return nil end
  local r = math.floor(x * 1e4 + 0.5) / 1e4
  if r == 0 then r = 0 end -- no "-0" in the JSON
  return r
end

-- The clock fields of the node's published info, from self.clock
-- (node/clock.lua keeps it, and asks for a publish when it moves).
local function clock_info(self)
  local c = self.clock
  if not c then return { known = false } end
  return { offset = round(c.offset), error = round(c.error),
           correction = c.known and round(c.correction) or nil, ref = c.ref, frame = c.frame,
           known = c.known, skewed = c.skewed, measured_at = round(c.measured_at) }
end

local function node_info(self)
  return json.encode {
    name = self.name, labels = self.labels, version = baton.version,
    started = self.started, running = self.nrunning, pid = self.pid,
    oldest_waiting = self.pool and self.pool:oldest_waiting() or nil,
    clock = clock_info(self), max_skew = self.max_skew, trust = self.trust_info,
  }
end

-- Registers P nodes/<name> on session s's lease; refuses a name that a
-- live node already has, but replaces this node's own registration on the
-- lease of its previous session (old_lease), which may outlive the session
-- the node declared lost.
local function register(self, s, old_lease)
  local e, key = self.e, keys.key(self.P, "nodes", self.name)
  local put = { { put = { key = key, value = node_info(self), lease = s.lease } } }
  local r, err, code = e:txn {
    compare = { { key = key, target = "create", op = "==", value = 0 } },
    success = put,
    failure = old_lease and { { txn = {
      compare = { { key = key, target = "lease", op = "==", value = old_lease } },
      success = put } } } or nil,
  }
  if not r then return nil, err, code end
  if not r.succeeded and not (old_lease and r.responses[1] and r.responses[1].succeeded) then
    return nil, "EEXIST: the name is in use by a live node", "EEXIST"
  end
  return r.revision
end

-- Puts P nodes/<name> again with what the node is now (on the live
-- session only).
function M.publish(self)
  local s = runs.live(self)
  if s then self.e:put(keys.key(self.P, "nodes", self.name), node_info(self), { lease = s.lease }) end
end

-- Starts a session, makes it the one the node's runs are fenced by (its
-- keepalive publishes its deadline on the fence board that each worker's
-- containment process reads), registers the node on it (replacing the
-- registration of old, the node's previous session, if that is still
-- there) and campaigns.
function M.join(self, old)
  local s, err, code = baton.session { ttl = self.ttl }
  if not s then return nil, err, code end
  local fd, ferr, fcode = s:_fence()
  if not fd then s:close(); return nil, ferr, fcode end
  local rev, rerr, rcode = register(self, s, old and old.lease)
  if not rev then s:close(); return nil, rerr, rcode end
  self.s, self.fence_fd, self.fenced, self.registered = s, fd, false, rev
  -- The cluster election: the leader does the housekeeping that needs one
  -- decider (node/leader.lua) until its session ends.
  self.go(function()
    local el = baton.election(s, keys.key(self.P, "election"))
    if el:campaign(self.name) and runs.live(self, s) and not self.stopping then
      local term = {}
      self.leader = term
      log("info", "elected cluster leader", { node = self.name })
      -- (leader.run returns when the term ends; a failure in it starts it
      -- again while the term lasts)
      self.forever("leader", function() if self.leader == term then leader.run(self) end end)
    end
  end)
  return true
end

-- Self-fencing. The C keepalive declares the session lost before its lease
-- can have expired on etcd (on the monotonic clock, with a margin); each
-- worker's containment process ends its run at the same moment by itself,
-- even if this process is stopped. From then on nothing uses the session
-- (runs.live): every run and its processes are stopped first, and only
-- then is anything else done: the log line, the revocation of the old
-- lease (etcd may keep it alive across its own leader changes: revoking
-- frees the runs for takeover at once, now that they are provably
-- stopped), and a new session, retried until it works.
function M.fence(self)
  while not self.stopping do
    local s = self.s
    local why = s:wait()
    if self.stopping then return end
    self.metrics:session_lost()
    self.fenced = true
    self.leader = false
    self.pool:stop_all()
    log("error", "session lost; runs stopped", { node = self.name, lease = s.lease, reason = why })
    local revoked
    while not self.stopping do
      if not revoked then
        revoked = s:close()
      end
      local jok, jerr = M.join(self, s)
      if jok then
        log("info", "node rejoined", { node = self.name, lease = self.s.lease, old_lease = s.lease })
        self.metrics:rejoined()
        -- Work that came while this node could not claim it: its turn for
        -- it came and went, and no event will come again.
        local r = self.e:txn { success = { { get = { key = keys.dir(self.P, "pending"), prefix = true } },
                                           { get = { key = keys.dir(self.P, "trigger"), prefix = true } } } }
        for _, kv in ipairs(r and r.responses[1].kvs or {}) do
          self.go(triggers.on_pending, self, kv.key, kv.value, kv.mod_revision)
        end
        for _, kv in ipairs(r and r.responses[2].kvs or {}) do
          self.go(triggers.on_trigger, self, kv.key, kv.value, kv.mod_revision)
        end
        queue.resync(self)
        break
      end
      log("warn", "rejoin failed; retrying", { node = self.name, error = jerr })
      baton.sleep(1)
    end
  end
end

-- Keeps the published node info (running runs, the oldest instant waiting
-- for a worker) fresh: a task of the node (node/init.lua).
function M.refresh(self)
  local last
  while not self.stopping do
    baton.sleep(1)
    local shown = self.nrunning .. " " .. tostring(self.pool:oldest_waiting())
    if shown ~= last then last = shown; M.publish(self) end
  end
end

return M
