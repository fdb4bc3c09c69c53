-- Sessions, mutexes and elections: etcd's concurrency recipes
-- (clientv3/concurrency), with the same key layout, so `etcdctl lock` and
-- `etcdctl elect` interoperate with baton on the same names.
--
--   key of a lock/election member:  <name>/<lease id in lowercase hex>
--   owner/leader:                   the member with the smallest create revision
--   waiting:                        each member watches only its predecessor
--
-- A lock is a liveness tool, not a safety one: a holder paused past its
-- lease can act after another has the lock. Safety comes from fencing:
-- m.fence (the key's create revision, which only grows) and m:guard(), a txn
-- compare that makes an etcd write succeed only while the lock is held.
-- See docs/coordination.md.
local baton = require "baton"
local hexid = baton._etcd.hexid
local format, type, error, tostring = string.format, type, error, tostring

local M = {}

local function argerr(fn, n, msg)
  error(format("bad argument #%d to '%s' (%s)", n, fn, msg), 3)
end

local function fail(code, msg)
  return nil, code .. ": " .. msg, code
end

---------------------------------------------------------------------------
-- session

local Session = {}
Session.__index = Session

-- baton.session{ttl = 10, client = baton.etcd}: a lease kept alive every
-- TTL/3 by the C core, so a busy coroutine cannot starve it.
function M.session(opts)
  opts = opts or {}
  if type(opts) ~= "table" then argerr("session", 1, "table expected, got " .. type(opts)) end
  for k in pairs(opts) do
    if k ~= "ttl" and k ~= "client" then argerr("session", 1, "unknown option '" .. tostring(k) .. "'") end
  end
  local ttl = opts.ttl or 10
  if type(ttl) ~= "number" or ttl < 1 or ttl ~= math.floor(ttl) then
    argerr("session", 1, "ttl: a whole number of seconds >= 1 expected")
  end
  local e = opts.client or baton.etcd
  local lease, err, code = e:grant(ttl)
  if not lease then return nil, err, code end
  if lease.ttl ~= ttl then
    -- etcd raises a TTL below its minimum (1.5 x election timeout) silently;
    -- a session must not believe it has a shorter lease than it has.
    lease:revoke()
    return fail("EINVAL", format("session ttl %d s is below etcd's minimum lease TTL (%d s)",
                                 ttl, lease.ttl))
  end
  local ok, kerr, kcode = lease:keep()
  if not ok then lease:revoke(); return nil, kerr, kcode end
  return setmetatable({ client = e, lease = lease.id, ttl = ttl, _lease = lease,
                        _hex = hexid(lease.id) }, Session)
end

-- false while the lease is alive; true and the reason once it is lost or
-- the session closed. Never waits.
function Session:done()
  if self._closed then return true, "session closed" end
  local state, why = self._lease:state()
  if state == "alive" then
    -- Backstop on the monotonic clock, in case the keepalive timer has not
    -- run yet (the process was stopped, say): past the deadline the lease
    -- may be gone on the server.
    local keeper = self._lease._keeper
    if keeper and baton.monotime() < keeper:deadline() then return false end
    return true, "no successful keepalive within the lease TTL"
  end
  return true, why ~= "" and why or ("session lease " .. state)
end

-- Waits until the session ends; returns the reason.
function Session:wait()
  if self._closed then return "session closed" end
  local _, why = self._lease:wait()
  if self._closed then return "session closed" end
  return why ~= "" and why or "session lease lost"
end

-- Revokes the lease: every lock and election key of the session goes.
-- The session is closed at once; if etcd could not be told, a later call
-- tries the revocation again.
function Session:close()
  if self._revoked then return true end
  self._closed = true
  local ok, err, code = self._lease:revoke()
  if not ok and code ~= "ENOLEASE" then return nil, err, code end
  self._revoked = true
  return true
end

-- (baton node) Declares the session lost now, for why (a key on its lease
-- was deleted: etcd revoked the lease early), as its keepalive would.
function Session:_lose(why)
  local keeper = self._lease._keeper
  if keeper and not self._closed then keeper:lose(why) end
end

-- (baton node) Makes this session's keepalive publish its deadline on the
-- process's fence board (runtime/core/fence.h), which the node's workers read;
-- returns the board's descriptor.
function Session:_fence()
  local keeper = self._lease._keeper
  if self._closed or not keeper then return nil, "ECLOSED: the session is closed", "ECLOSED" end
  return keeper:fence()
end

local function check_session(s, fn)
  if getmetatable(s) ~= Session then argerr(fn, 1, "session expected") end
end

local function check_name(name, fn)
  if type(name) ~= "string" then argerr(fn, 2, "name: string expected, got " .. type(name)) end
  if name == "" then argerr(fn, 2, "name must not be empty") end
end

-- Waits until no key under pfx created before myrev is left (etcd's
-- waitDeletes): read the newest older key, watch it until deleted, repeat.
-- Each waiter watches only its predecessor. Every read also reads mykey, so
-- that the moment the wait ends we know our own key still exists with
-- myrev: etcd 3.4's lock hands out locks whose lease expired in the queue
-- (etcd #11456), and baton must not. The watch covers our key too, so when
-- the predecessor was the only older key (the usual hand-off: second in
-- line), its deletion ends the wait without another read. Gives up at
-- deadline (monotonic seconds) or when the session ends.
local function wait_deletes(s, pfx, mykey, myrev, deadline)
  local e = s.client
  while true do
    local r, err, code = e:txn { success = {
      { get = { key = pfx, prefix = true, sort = "create", order = "desc",
                limit = 1, max_create_revision = myrev - 1 } },
      { get = { key = mykey } },
      { get = { key = pfx, prefix = true, sort = "create", order = "asc", limit = 1,
                keys_only = true } },
    } }
    if not r then return nil, err, code end
    local mine = r.responses[2].kvs[1]
    if not mine or mine.create_revision ~= myrev then
      return fail("ELOST", "key " .. mykey .. " is gone (its session expired while waiting)")
    end
    local pred = r.responses[1].kvs[1]
    if not pred then return true end
    -- Keys created later than ours never get in front, so if the oldest
    -- key is our predecessor, no other key is older than us.
    local oldest = r.responses[3].kvs[1]
    local last_in_front = oldest ~= nil and oldest.key == pred.key
    local lo, hi = pred.key, mykey
    if hi < lo then lo, hi = hi, lo end
    local w
    w, err, code = e:watch(lo, { range_end = hi .. "\0", start_revision = r.revision + 1 })
    if not w then return nil, err, code end
    local gone = false
    -- Written to since our read: etcd catches such a watch up in a loop that
    -- runs every 100 ms, so a predecessor deleted in between (the usual
    -- hand-off: its holder unlocks as we queue) would reach us that late.
    -- Ask directly instead; a failed read just leaves it to the watch.
    if w.created_revision and w.created_revision > r.revision then
      local g = e:get(pred.key)
      if g and g.count == 0 then gone = true end
    end
    while not gone do
      local lost, why = s:done()
      if lost then w:cancel(); return fail("ELOST", why) end
      local slice = 0.25
      if deadline then
        local left = deadline - baton.monotime()
        if left <= 0 then w:cancel(); return fail("ETIMEDOUT", "timed out waiting for " .. pfx) end
        if left < slice then slice = left end
      end
      local evs, werr, wcode = w:next(slice)
      if evs then
        for _, ev in ipairs(evs) do
          if ev.type == "delete" then
            if ev.kv.key == mykey then
              w:cancel()
              return fail("ELOST", "key " .. mykey .. " was deleted while waiting")
            end
            if ev.kv.key == pred.key then gone = true end
          end
        end
      elseif wcode ~= "ETIMEDOUT" then
        w:cancel()
        if wcode ~= "ECOMPACTED" then return nil, werr, wcode end
        gone, last_in_front = true, false -- read again
      end
    end
    w:cancel()
    if last_in_front then
      local lost, why = s:done()
      if lost then return fail("ELOST", why) end
      return true
    end
  end
end

---------------------------------------------------------------------------
-- mutex

local Mutex = {}
Mutex.__index = Mutex

function M.mutex(s, name)
  check_session(s, "mutex")
  check_name(name, "mutex")
  local pfx = name .. "/"
  return setmetatable({ session = s, name = name, pfx = pfx,
                        key = pfx .. s._hex }, Mutex)
end

-- Step one of the recipe: create our key if absent, and read the owner.
local function enqueue(m)
  local e, key = m.session.client, m.key
  local first = { key = m.pfx, prefix = true, sort = "create", order = "asc", limit = 1 }
  local r, err, code = e:txn {
    compare = { { key = key, target = "create", op = "==", value = 0 } },
    success = { { put = { key = key, value = "", lease = m.session.lease } }, { get = first } },
    failure = { { get = { key = key } }, { get = first } },
  }
  if not r then return nil, err, code end
  local rev = r.succeeded and r.revision or r.responses[1].kvs[1].create_revision
  local owner = r.responses[2].kvs[1]
  return rev, (not owner) or owner.create_revision == rev
end

local function give_up(m, err, code)
  m.session.client:delete(m.key)
  m._rev = nil
  return nil, err, code
end

-- m:lock([timeout]): waits until this session holds the lock.
function Mutex:lock(timeout)
  if timeout ~= nil and (type(timeout) ~= "number" or timeout < 0) then
    argerr("lock", 1, "timeout: seconds >= 0 expected")
  end
  local s = self.session
  local lost, why = s:done()
  if lost then return fail("ELOST", why) end
  local deadline = timeout and baton.monotime() + timeout
  local rev, owned_or_err, code = enqueue(self)
  if not rev then return nil, owned_or_err, code end
  self._rev = rev
  if not owned_or_err then
    -- (When the txn itself found us first, it has just written or read
    -- our key; only a wait needs the key read back, which wait_deletes does.)
    local ok, err, wcode = wait_deletes(s, self.pfx, self.key, rev, deadline)
    if not ok then
      if wcode == "ETIMEDOUT" then err = "ETIMEDOUT: lock wait timed out" end
      return give_up(self, err, wcode)
    end
  end
  self.fence = rev
  return true
end

-- m:try_lock(): takes the lock if free, else fails with ELOCKED at once.
function Mutex:try_lock()
  local lost, why = self.session:done()
  if lost then return fail("ELOST", why) end
  local rev, owned, code = enqueue(self)
  if not rev then return nil, owned, code end
  self._rev = rev
  if not owned then
    return give_up(self, "ELOCKED: " .. self.name .. " is locked by another session", "ELOCKED")
  end
  self.fence = rev
  return true
end

function Mutex:unlock()
  if not self.fence and not self._rev then return true end
  self.fence, self._rev = nil, nil
  local r, err, code = self.session.client:delete(self.key)
  if not r then return nil, err, code end
  return true
end

-- true while the session is alive and our key is the one we created (one
-- read of the key); false once the lease is lost or the key was deleted.
function Mutex:held()
  if not self.fence or self.session:done() then return false end
  local r = self.session.client:get(self.key)
  if not r then return false end
  local kv = r.kvs[1]
  return kv ~= nil and kv.create_revision == self.fence
end

-- The txn compare that holds only while this lock does (etcd's IsOwner).
function Mutex:guard()
  if not self.fence then error("guard: the mutex is not locked", 2) end
  return { key = self.key, target = "create", op = "==", value = self.fence }
end

---------------------------------------------------------------------------
-- election

local Election = {}
Election.__index = Election

function M.election(s, name)
  check_session(s, "election")
  check_name(name, "election")
  local pfx = name .. "/"
  return setmetatable({ session = s, name = name, pfx = pfx, key = pfx .. s._hex }, Election)
end

-- el:campaign(value [, timeout]): waits until this session leads.
function Election:campaign(value, timeout)
  if type(value) ~= "string" then argerr("campaign", 1, "value: string expected") end
  if timeout ~= nil and (type(timeout) ~= "number" or timeout < 0) then
    argerr("campaign", 2, "timeout: seconds >= 0 expected")
  end
  local s, e, key = self.session, self.session.client, self.key
  local lost, why = s:done()
  if lost then return fail("ELOST", why) end
  local deadline = timeout and baton.monotime() + timeout
  local r, err, code = e:txn {
    compare = { { key = key, target = "create", op = "==", value = 0 } },
    success = { { put = { key = key, value = value, lease = s.lease } } },
    failure = { { get = { key = key } } },
  }
  if not r then return nil, err, code end
  local rev = r.succeeded and r.revision or r.responses[1].kvs[1].create_revision
  self.rev = rev
  if not r.succeeded and r.responses[1].kvs[1].value ~= value then
    local ok, perr, pcode = self:proclaim(value)
    if not ok then self:resign(); return nil, perr, pcode end
  end
  local ok, werr, wcode = wait_deletes(s, self.pfx, key, rev, deadline)
  if not ok then
    if wcode == "ETIMEDOUT" then werr = "ETIMEDOUT: campaign timed out" end
    self:resign()
    self.rev = nil
    return nil, werr, wcode
  end
  self.leading = true
  return true
end

-- Changes the leader's value; fails with ENOTLEADER unless we lead.
function Election:proclaim(value)
  if type(value) ~= "string" then argerr("proclaim", 1, "value: string expected") end
  if not self.rev then return fail("ENOTLEADER", "not a candidate of " .. self.name) end
  local r, err, code = self.session.client:txn {
    compare = { { key = self.key, target = "create", op = "==", value = self.rev } },
    success = { { put = { key = self.key, value = value, lease = self.session.lease } } },
  }
  if not r then return nil, err, code end
  if not r.succeeded then return fail("ENOTLEADER", "not the leader of " .. self.name) end
  return true
end

function Election:resign()
  if not self.rev then return true end
  local rev = self.rev
  self.rev, self.leading = nil, nil
  local r, err, code = self.session.client:txn {
    compare = { { key = self.key, target = "create", op = "==", value = rev } },
    success = { { delete = { key = self.key } } },
  }
  if not r then return nil, err, code end
  return true
end

local function leader_of(e, pfx)
  local r, err, code = e:get(pfx, { prefix = true, sort = "create", order = "asc", limit = 1 })
  if not r then return nil, err, code end
  return r.kvs[1] or false, r.revision
end

-- {key=, value=, rev=, lease=} of the current leader, or ENOENT.
function Election:leader()
  local kv, err, code = leader_of(self.session.client, self.pfx)
  if kv == nil then return nil, err, code end
  if not kv then return fail("ENOENT", "election " .. self.name .. " has no leader") end
  return { key = kv.key, value = kv.value, rev = kv.create_revision, lease = kv.lease }
end

-- An iterator over leader changes: the current leader first (once there is
-- one), then every new leader or new value. May skip intermediate values,
-- never the latest (as etcd's Observe). Raises on failure. The second value
-- has :cancel(), after which the iterator returns nil (ending a for loop).
--   for leader in el:observe() do print(leader.value) end
local Observer = {}
Observer.__index = Observer

function Observer:cancel()
  self.cancelled = true
  if self.w then self.w:cancel() end
  return true
end

function M.observe(e, name)
  local pfx = name .. "/"
  local current, w
  local obs = setmetatable({}, Observer)
  local function next_leader()
    while true do
      if obs.cancelled then return nil end
      if w then
        local evs, err = w:next()
        if obs.cancelled then return nil end
        if not evs then w = nil; current = nil; error("observe: " .. tostring(err), 2) end
        local changed
        for _, ev in ipairs(evs) do
          if ev.type == "delete" then
            current = nil
          elseif current and ev.kv.key == current.key then
            current = { key = ev.kv.key, value = ev.kv.value, rev = ev.kv.create_revision,
                        lease = ev.kv.lease }
            changed = current
          end
        end
        if not current then w:cancel(); w = nil end
        if changed and current then return changed end
      else
        local kv, rev = leader_of(e, pfx)
        if kv == nil then error("observe: " .. tostring(rev), 2) end
        if kv then
          current = { key = kv.key, value = kv.value, rev = kv.create_revision, lease = kv.lease }
          local err
          w, err = e:watch(kv.key, { start_revision = rev + 1 })
          if not w then error("observe: " .. tostring(err), 2) end
          obs.w = w
          return current
        end
        -- no leader: wait for the first put under the prefix
        local pw, err = e:watch(pfx, { prefix = true, start_revision = rev + 1, no_delete = true })
        if not pw then error("observe: " .. tostring(err), 2) end
        obs.w = pw
        local evs = pw:next()
        pw:cancel()
        if obs.cancelled then return nil end
        if not evs then error("observe: watch ended", 2) end
      end
    end
  end
  return next_leader, obs
end

function Election:observe()
  return M.observe(self.session.client, self.name)
end

return M
