-- The node's job store: the jobs (self.jobs), their paused flags and the
-- stored policies as etcd has them, listed in pages at one revision and
-- then followed by watches from the listed revision + 1 (after a
-- compaction: listed again, the difference applied). Each job version is
-- described in the sandbox (stored.lua) and put on the timetable; each
-- policy is loaded into the deciding sandbox. This node's status of each
-- job and policy (P status/<job>/<node>, P policy-status/<policy>/<node>)
-- is written here.
--
-- The same watches bring the registered nodes (node/decide.lua keeps
-- them), manual runs and pending attempts (node/triggers.lua) and cancels
-- (node/cancel.lua): on_event dispatches them.
local baton = require "baton"
local stored = require "baton.stored"
local keys = require "baton.keys"
local etcd = require "baton.etcd"
local events = require "baton.events"
local sign = require "baton.sign"
local runs = require "baton.node.runs"
local cancel = require "baton.node.cancel"
local misfires = require "baton.node.misfires"
local orphans = require "baton.node.orphans"
local prune = require "baton.node.prune"
local queue = require "baton.node.queue"
local decide = require "baton.node.decide"
local triggers = require "baton.node.triggers"
local timetable = require "baton.node.timetable"
local gc = require "baton.node.gc"
local json = baton.json

local floor = math.floor

local M = {}

local function log(level, msg, fields)
  baton.log[level](msg, fields)
end

-- The job store is listed in pages of LIST_PAGE keys, all read at the
-- revision of the first, so that a store of 100,000 jobs never sits in
-- memory as one response (tens of MB of JSON and base64, and their decoded
-- copies): only the page being applied and the one being read are.
M.LIST_PAGE = 1000
-- Status writes in flight at once while a listing writes them (each a
-- transaction of STATUS_TXN puts, etcd's default --max-txn-ops): the next
-- page is read and compiled while etcd applies the previous one's.
M.STATUS_TXN, M.STATUS_INFLIGHT = 128, 8

-- Sends the gathered status operations (self.store.status_batch) in
-- transactions of STATUS_TXN, at most STATUS_INFLIGHT at once; with wait,
-- returns once all of them are answered. (A status write that fails is
-- not retried here, as a single one is not: the status is advisory, and
-- the next listing or reload writes it again.)
local function flush_status(self, wait)
  local writes = self.store.status_batch or {}
  if self.store.status_batch then self.store.status_batch = {} end
  for i = 1, #writes, M.STATUS_TXN do
    local ops = {}
    for k = i, math.min(i + M.STATUS_TXN - 1, #writes) do ops[#ops + 1] = writes[k] end
    while self.store.status_inflight >= M.STATUS_INFLIGHT do baton.sleep(0.002) end
    self.store.status_inflight = self.store.status_inflight + 1
    self.go(function()
      self.e:txn { success = ops }
      self.store.status_inflight = self.store.status_inflight - 1
    end)
  end
  if wait then
    while self.store.status_inflight > 0 do baton.sleep(0.002) end
  end
end

-- One write of P status/<job>/<this node> (op: a put or a delete): during
-- a listing it is gathered (self.store.status_batch) and sent with the page.
local function status_op(self, op)
  if self.store.status_batch then
    local b = self.store.status_batch
    b[#b + 1] = op
  elseif op.put then
    self.e:put(op.put.key, op.put.value)
  else
    self.e:delete(op.delete.key)
  end
end

-- Writes this node's status of a job (with the revision it still runs
-- when rev was rejected).
local function put_status(self, name, rev, err, running)
  status_op(self, { put = { key = keys.key(self.P, "status", name, self.name),
    -- (a load error may hold a NUL byte, from the job's code: U+FFFD)
    value = json.encode({ revision = rev, error = err or json.null, running = running,
                          time = baton.now() }, { nul = "replace" }) } })
end

-- What describing version kv of job name gave (stored.job: the spec, or
-- the error: invalid, untrusted), applied. During a listing
-- (self.store.listing: counts for its summary line), a job loaded for the first
-- time is counted instead of logged one line each; reloads and rejections
-- are logged one by one as always.
local function finish_job(self, name, kv, spec, err)
  local rev, source = kv.mod_revision, kv.value
  local cur = self.jobs[name]
  self.store_version = self.store_version + 1 -- (what GET /api/v1/jobs lists changed)
  local listing = self.store.listing
  if not spec then
    if self.bad[name] ~= rev then
      self.bad[name] = rev
      if listing then listing.rejected = listing.rejected + 1 end
      log("error", "job rejected; keeping the last good version", {
        job = name, revision = rev, error = err,
        running = cur and cur.spec.revision or json.null })
      put_status(self, name, rev, err, cur and cur.spec.revision)
    end
    return
  end
  self.bad[name] = nil
  -- (sent with a run to a worker that has not seen it, with what its
  -- signature is checked against there: node/execute.lua)
  spec.source, spec.created, spec.version = source, kv.create_revision, kv.version
  local j = { spec = spec, paused = self.paused[name] or false,
              loaded_at = cur and cur.loaded_at or baton.now() }
  self.jobs[name] = j
  events.note(self, name, spec)
  misfires.job_changed(self, name)
  if listing and not cur then
    listing.loaded = listing.loaded + 1
  else
    if listing then listing.reloaded = listing.reloaded + 1 end
    log("info", cur and "job reloaded" or "job loaded", { job = name, revision = rev,
      signed_by = stored.trusting() and sign.signer(source) or nil,
      schedule = spec.schedule or (spec.queue and "queue:" .. spec.queue) or "on events" })
  end
  put_status(self, name, rev, nil)
  if not cur then triggers.job_loaded(self, name) end
  if spec.queue then
    queue.follow(self, spec.queue)
  else
    -- (Misfires of a new job are the leader's periodic check, which goes
    -- through the jobs one at a time: a coroutine per job here meant
    -- thousands of concurrent requests when a leader loads its store.)
    timetable.schedule(self, name, j)
  end
end

-- Whether kv (a put of P jobs/<name>) needs describing: not when that
-- revision is loaded or was rejected already, nor for a signed put's
-- placeholder (sign.PLACEHOLDER: the signed source follows). Notes it as
-- the revision wanted, so that an answer for an older one is dropped.
local function wants(self, name, kv)
  local rev, cur = kv.mod_revision, self.jobs[name]
  if (cur and cur.spec.revision == rev) or self.bad[name] == rev or kv.value == sign.PLACEHOLDER then
    return false
  end
  self.store.want[name] = rev
  return true
end

-- Loads version kv of job name unless it is loaded already: described in
-- the sandbox (stored.job verifies it first on a --trust node), which the
-- watch's coroutine waits for. A later put or a delete of the job while it
-- waits wins (self.store.want).
local function apply_job(self, name, kv)
  if not wants(self, name, kv) then return end
  local spec, err = stored.job(name, kv)
  if self.store.want[name] ~= kv.mod_revision then return end
  finish_job(self, name, kv, spec, err)
end

local function put_policy_status(self, name, rev, err)
  self.e:put(keys.key(self.P, "policy-status", name, self.name),
             json.encode({ revision = rev, error = err or json.null, time = baton.now() }, { nul = "replace" }))
end

-- A policy put: load it into the node's deciding sandbox (stored.policy,
-- which verifies it first on a --trust node), swap it in at once, or keep
-- the last good version.
local function apply_policy(self, name, kv)
  local rev, source = kv.mod_revision, kv.value
  local cur = self.policies[name]
  if (cur and cur.revision == rev) or self.store.bad_policies[name] == rev or source == sign.PLACEHOLDER then
    return
  end
  self.store.want_policy[name] = rev
  local mod, err = stored.policy(name, kv, { role = "decide" })
  if self.store.want_policy[name] ~= rev then return end
  if not mod then
    if self.store.bad_policies[name] ~= rev then
      self.store.bad_policies[name] = rev
      log("error", "policy rejected; keeping the last good version", { policy = name,
        revision = rev, error = err, running = cur and cur.revision or json.null })
      put_policy_status(self, name, rev, err)
    end
    return
  end
  self.store.bad_policies[name] = nil
  if cur then stored.release(cur.mod) end
  self.policies[name] = { mod = mod, revision = rev }
  log("info", cur and "policy reloaded" or "policy loaded", { policy = name, revision = rev,
    signed_by = stored.trusting() and sign.signer(source) or nil })
  put_policy_status(self, name, rev, nil)
end

local function remove_policy(self, name)
  if self.policies[name] then
    log("info", "policy removed", { policy = name })
    stored.release(self.policies[name].mod)
  end
  self.policies[name] = nil
  self.store.want_policy[name] = nil
  self.store.bad_policies[name] = nil
  self.e:delete(keys.key(self.P, "policy-status", name, self.name))
end

local function remove_job(self, name)
  if self.jobs[name] then log("info", "job removed", { job = name }) end
  if self.store.listing then self.store.listing.removed = self.store.listing.removed + 1 end
  self.store_version = self.store_version + 1
  self.jobs[name] = nil
  self.store.want[name] = nil
  self.metrics:forget("job_name", name)
  events.note(self, name, nil)
  self.bad[name] = nil
  status_op(self, { delete = { key = keys.key(self.P, "status", name, self.name) } })
end

local function set_paused(self, name, paused)
  if (self.paused[name] or false) ~= paused then self.store_version = self.store_version + 1 end
  self.paused[name] = paused or nil
  local j = self.jobs[name]
  if j and j.paused ~= paused then
    j.paused = paused
    log("info", paused and "job paused" or "job resumed", { job = name })
  end
end

-- The jobs of a listing, page after page from its first (page, read at
-- revision rev): each described and applied, its name noted in seen.
-- Returns true, or nil, err, code when a page could not be read.
local function list_pages(self, page, rev, jobs_end, seen)
  local P, e = self.P, self.e
  while true do
    self.store.listing.pages = self.store.listing.pages + 1
    local kvs = page.kvs
    -- The next page is read while this one is compiled (etcd works on one
    -- core while the node works on the other).
    local nxt
    if page.more and #kvs > 0 then
      self.go(function()
        local p2, e2, c2 = e:get(kvs[#kvs].key .. "\0", { range_end = jobs_end,
          limit = M.LIST_PAGE, revision = rev })
        nxt = { p2, e2, c2 }
      end)
    end
    -- (described in the sandbox together, one round trip for the page,
    -- each applied as it comes while the sandbox goes on)
    local todo = {}
    for i = 1, #kvs do
      local kv = kvs[i]
      local name = keys.rest(P, "jobs", kv.key)
      seen[name] = true
      if wants(self, name, kv) then todo[#todo + 1] = { name = name, kv = kv } end
    end
    stored.jobs(todo, nil, function(i, d)
      local item = todo[i]
      if self.store.want[item.name] == item.kv.mod_revision then
        finish_job(self, item.name, item.kv, d.spec, d.error)
      end
    end)
    flush_status(self)
    if not page.more or #kvs == 0 then break end
    while not nxt do baton.sleep(0.002) end
    if not nxt[1] then return nil, nxt[2], nxt[3] end
    page = nxt[1]
  end
  return true
end

-- Lists jobs, paused flags, nodes, triggers, policies and pending runs at
-- one revision and applies the difference with what is loaded. The jobs
-- come in pages (M.LIST_PAGE keys, read at the revision of the first
-- page); a page that cannot be read (etcd gone, or the revision compacted
-- meanwhile) fails the listing, and follow() lists again from the start:
-- the pages applied so far are from the same revision, so nothing is
-- applied out of order, and what the next listing finds unchanged costs
-- nothing (apply_job skips a revision it has). Returns the revision. (It
-- runs at the node's usual GC pause: a page's garbage is small, and a
-- smaller pause while the heap grows by every job makes the collector go
-- over it again and again.)
local function list_all(self)
  local P, e = self.P, self.e
  local jobs_end = etcd.prefix_end(keys.dir(P, "jobs"))
  local r, err, code = e:txn { success = {
    { get = { key = keys.dir(P, "jobs"), range_end = jobs_end, limit = M.LIST_PAGE } },
    { get = { key = keys.dir(P, "paused"), prefix = true, keys_only = true } },
    { get = { key = keys.dir(P, "nodes"), prefix = true } },
    { get = { key = keys.dir(P, "trigger"), prefix = true } },
    { get = { key = keys.dir(P, "policies"), prefix = true } },
    { get = { key = keys.dir(P, "pending"), prefix = true } },
  } }
  if not r then return nil, err, code end
  local rev_of_listing = r.revision
  -- Policies first: the jobs' first decisions use them.
  local pseen = {}
  for _, kv in ipairs(r.responses[5].kvs) do
    local name = keys.rest(P, "policies", kv.key)
    pseen[name] = true
    apply_policy(self, name, kv)
  end
  for name in pairs(self.policies) do if not pseen[name] then remove_policy(self, name) end end
  local seen, paused = {}, {}
  for _, kv in ipairs(r.responses[2].kvs) do paused[keys.rest(P, "paused", kv.key)] = true end
  for name in pairs(self.paused) do if not paused[name] then set_paused(self, name, false) end end
  for name in pairs(paused) do set_paused(self, name, true) end
  local others = r.responses
  local page = r.responses[1]
  self.store.status_batch, self.store.status_inflight = {}, self.store.status_inflight or 0
  self.store.listing = { loaded = 0, reloaded = 0, rejected = 0, removed = 0, pages = 0 }
  local t0 = baton.monotime()
  local listed
  listed, err, code = list_pages(self, page, rev_of_listing, jobs_end, seen)
  if not listed then
    flush_status(self, true)
    self.store.status_batch, self.store.listing = nil, nil
    return nil, err, code
  end
  for name in pairs(self.jobs) do if not seen[name] then remove_job(self, name) end end
  for name in pairs(self.bad) do if not seen[name] then remove_job(self, name) end end
  flush_status(self, true)
  local l = self.store.listing
  self.store.status_batch, self.store.listing = nil, nil
  local njobs = 0
  for _ in pairs(seen) do njobs = njobs + 1 end
  log("info", "job store listed", { node = self.name, revision = rev_of_listing, jobs = njobs,
    loaded = l.loaded, reloaded = l.reloaded, rejected = l.rejected,
    removed = l.removed, pages = l.pages, seconds = floor((baton.monotime() - t0) * 1000) / 1000 })
  decide.forget_nodes(self)
  for _, kv in ipairs(others[3].kvs) do
    -- (a record on no lease is no node's session: a forged or stray key)
    local ok, n = pcall(json.decode, kv.value)
    if ok and type(n) == "table" and n.name and kv.lease then decide.set_node(self, n.name, n) end
  end
  for _, kv in ipairs(others[4].kvs) do
    self.go(triggers.on_trigger, self, kv.key, kv.value, kv.mod_revision)
  end
  for _, kv in ipairs(others[6].kvs) do
    self.go(triggers.on_pending, self, kv.key, kv.value, kv.mod_revision)
  end
  -- The listing's pages and their decoded copies are garbage now; collect
  -- them at once and hand the C heap's free pages back, so that a node that
  -- loaded a large store starts small.
  r, others, page = nil, nil, nil -- luacheck: ignore 311 (unreferenced for the collector)
  baton._release_memory()
  self.listed = true
  return rev_of_listing
end

local function on_event(self, ev)
  local P, key = self.P, ev.kv.key
  local kind, rest = keys.kind(P, key)
  if kind == "jobs" then
    local name = rest
    if ev.type == "put" then apply_job(self, name, ev.kv)
    else remove_job(self, name) end
  elseif kind == "paused" then
    set_paused(self, rest, ev.type == "put")
  elseif kind == "policies" then
    local name = rest
    if ev.type == "put" then apply_policy(self, name, ev.kv)
    else remove_policy(self, name) end
  elseif kind == "trigger" then
    if ev.type == "put" then
      self.go(triggers.on_trigger, self, key, ev.kv.value, ev.kv.mod_revision)
      -- (a run by hand: a new record, which the leader's next history
      -- pruning counts, node/prune.lua)
      local job = self.leader and rest:match("^([^/]+)/")
      if job then prune.note(self, job) end
    else
      triggers.unpark(self, key)
    end
  elseif kind == "pending" then
    if ev.type == "put" then self.go(triggers.on_pending, self, key, ev.kv.value, ev.kv.mod_revision)
    else triggers.unpark(self, key) end
  elseif kind == "cancel" then
    if ev.type == "put" then
      local job, id = keys.split(P, "cancel", key)
      if job then cancel.cancel_local(self, job, id, ev.kv.value) end
    end
  elseif kind == "nodes" then
    local name = rest
    if ev.type == "delete" and name == self.name and ev.kv.mod_revision > (self.registered or 0)
       and runs.live(self) then
      -- The registration of the current session is gone: etcd dropped the
      -- lease (an etcd leader that was stalled can revoke leases it wrongly
      -- thinks expired, etcd #12528) before the keepalive could know.
      -- Fence at once.
      log("error", "own registration deleted: the session's lease is gone",
          { node = self.name, lease = self.s.lease, revision = ev.kv.mod_revision })
      self.s:_lose("its key " .. key .. " was deleted at revision " .. ev.kv.mod_revision)
    end
    if ev.type == "put" then
      local ok, n = pcall(json.decode, ev.kv.value)
      if ok and type(n) == "table" and ev.kv.lease then decide.set_node(self, name, n)
      elseif not ev.kv.lease then decide.set_node(self, name, nil) end
    else
      decide.set_node(self, name, nil)
      if name ~= self.name then self.go(orphans.node_gone, self) end
    end
  end
end

-- Follows jobs/, paused/, nodes/, trigger/, cancel/, policies/ and
-- pending/ through one watch on each, each applied as it comes (so a
-- request can come before its job: node/triggers.lua parks it, and
-- node/cancel.lua keeps a cancel until its run); after a compaction, lists again and applies the difference:
-- the store's task (node/init.lua).
function M.follow(self)
  local P, e = self.P, self.e
  while not self.stopping do
    local again = self.listed
    local rev, err, code = gc.burst(self, list_all, self)
    if not rev then
      log("warn", "listing the job store failed; retrying", { error = err })
      -- (a revision compacted while the pages were read: list again at
      -- once, from a newer one)
      if code ~= "ECOMPACTED" then baton.sleep(1) end
    else
      if again then self.metrics:resynced() end
      local watchers = {}
      local compacted = false
      for _, kind in ipairs { "jobs", "paused", "nodes", "trigger", "cancel", "policies", "pending" } do
        local w, werr = e:watch(keys.dir(P, kind), { prefix = true, start_revision = rev + 1 })
        if not w then
          log("warn", "watch failed; listing again", { prefix = keys.dir(P, kind), error = werr })
          compacted = true
          break
        end
        watchers[#watchers + 1] = w
      end
      self.store.watchers = watchers
      local pending = #watchers
      for _, w in ipairs(watchers) do
        self.go(function()
          while not self.stopping and not compacted do
            local evs, _, wcode = w:next()
            if not evs then
              if wcode == "ECOMPACTED" then
                log("warn", "watch compacted; listing the store again", {})
              end
              compacted = true
              break
            end
            for _, ev in ipairs(evs) do on_event(self, ev) end
          end
          pending = pending - 1
        end)
      end
      while pending > 0 and not compacted and not self.stopping do baton.sleep(0.2) end
      for _, w in ipairs(watchers) do w:cancel() end
      while pending > 0 do baton.sleep(0.05) end
    end
  end
end

return M
