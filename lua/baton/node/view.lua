-- What GET /api/v1/jobs and /api/v1/runs read, kept in the node's memory
-- (node/http.lua), so that listing 10,000 jobs reads nothing from etcd:
--   * the jobs, their revisions, specs and paused flags: the node's own
--     job store (self.jobs, self.bad, self.paused, which its watches keep);
--   * every node's status of every job (P status/): a mirror, listed once
--     and then followed by a watch;
--   * every job's last run (P last/): a mirror too; a job without a last/
--     entry gets its newest record read once (baton.ops' fallback).
-- Mirrors start on the first request that needs them and live until the
-- node stops. v.version changes whenever a mirror does.
local baton = require "baton"
local keys = require "baton.keys"
local ops = require "baton.ops"
local stored = require "baton.stored"
local U = require "baton.util"

local M = {}
M.PAGE = 1000 -- keys per request while listing a mirror
local V = {}
V.__index = V

function M.new(self)
  return setmetatable({ node = self, status = {}, last = {}, fallback = {}, errors = {},
                        version = 0, ready = false, watchers = {} }, V)
end

-- Applies one put (value) or delete (nil) of P status/<job>/<node>. Only
-- the statuses that say something to a listing are kept: an error, or the
-- revision a node still runs (a healthy status says neither).
local function apply_status(v, rest, value)
  local jname, node = rest:match("^([^/]+)/(.+)$")
  if not jname then return end
  local t = v.status[jname]
  local d = value and (U.decode_object(value) or {}) -- (as job ls reads it)
  local err, running = d and U.field(d, "error"), d and U.field(d, "running")
  if err or running then
    if not t then t = {}; v.status[jname] = t end
    t[node] = { node = node, error = err, running = running }
  elseif t then
    t[node] = nil
    if next(t) == nil then v.status[jname] = nil end
  end
end

local function apply_last(v, name, value)
  v.last[name] = value and ops.last_entry(value) or nil
end

-- Lists P <kind>/ and follows it until the node stops; apply(v, rest,
-- value) for each key (value nil: deleted). After a compaction or a failed
-- watch, lists again (clear: the old content goes first).
local function follow(v, kind, apply, clear)
  local self = v.node
  local pfx = keys.dir(self.P, kind)
  local stop = require("baton.etcd").prefix_end(pfx)
  -- Lists the prefix at one revision in pages of M.PAGE keys (a response
  -- of 30,000 statuses at once would grow the heap by tens of MB for a
  -- moment). Returns the revision, or nil.
  local function list()
    clear(v)
    local from, rev = pfx, nil
    while true do
      local r = self.e:get(from, { range_end = stop, limit = M.PAGE, revision = rev, sort = "key" })
      if not r then return nil end
      rev = rev or r.revision
      for _, kv in ipairs(r.kvs) do apply(v, keys.under(pfx, kv.key), kv.value) end
      if not r.more or #r.kvs == 0 then return rev end
      from = r.kvs[#r.kvs].key .. "\0"
    end
  end
  self.forever("view.follow", function()
    while not self.stopping and not v.closed do
      local rev = list()
      if not rev then
        baton.sleep(1)
      else
        v.version = v.version + 1
        v.listed[kind] = true
        local w = self.e:watch(pfx, { prefix = true, start_revision = rev + 1 })
        if w then
          v.watchers[kind] = w
          while not self.stopping and not v.closed do
            local evs = w:next()
            if not evs then break end
            for _, ev in ipairs(evs) do
              apply(v, keys.under(pfx, ev.kv.key), ev.type == "put" and ev.kv.value or nil)
            end
            v.version = v.version + 1
          end
          w:cancel()
          v.watchers[kind] = nil
        else
          baton.sleep(1) -- (no watch: list again, but not in a tight loop)
        end
      end
    end
  end)
end

-- Starts the mirrors (once) and waits until both have listed, at most
-- secs seconds. Returns true, or nil, err.
function V:start(secs)
  if not self.started then
    self.started, self.listed = true, {}
    follow(self, "status", apply_status, function(v) v.status = {} end)
    follow(self, "last", apply_last, function(v) v.last, v.fallback = {}, {} end)
  end
  local deadline = baton.monotime() + (secs or 10)
  while not (self.listed.status and self.listed.last) do
    if baton.monotime() > deadline then
      return nil, "EUNAVAILABLE: the job statuses and last runs are not read yet (is etcd up?)"
    end
    baton.sleep(0.02)
  end
  return true
end

-- The spec of job name at revision rev if the node has it loaded; nil,
-- err for the version the node rejected (its error kept per revision);
-- nil for anything else (baton.ops then reads and compiles it).
function V:spec_for(name, rev)
  local self_ = self.node
  local j = self_.jobs[name]
  if j and j.spec.revision == rev then return j.spec end
  if self_.bad[name] == rev then
    local e = self.errors[name]
    if e and e.rev == rev then return nil, e.err end
    local r = self_.e:get(keys.key(self_.P, "jobs", name), { revision = rev })
    local kv = r and r.kvs[1]
    if kv then
      -- (a node with --trust rejects what no trusted key signed first)
      local _, err = stored.job(name, kv)
      if err then
        self.errors[name] = { rev = rev, err = err }
        return nil, err
      end
    end
  end
end

-- The jobs view of baton.ops (jobs_view's shape) from the node's memory;
-- the last runs of jobs without a last/ entry are read once (128 jobs a
-- request). Returns the view, or nil, err, code.
function V:jobs()
  local node = self.node
  local list = {}
  for name, j in pairs(node.jobs) do
    list[#list + 1] = { name = name, revision = node.bad[name] or j.spec.revision }
  end
  for name, rev in pairs(node.bad) do
    if not node.jobs[name] then list[#list + 1] = { name = name, revision = rev } end
  end
  table.sort(list, function(a, b) return a.name < b.name end)
  for name in pairs(self.errors) do
    if node.bad[name] == nil then self.errors[name] = nil end
  end
  local missing = {}
  for _, j in ipairs(list) do
    if not self.last[j.name] and self.fallback[j.name] == nil then missing[#missing + 1] = j.name end
  end
  if #missing > 0 then
    local found = {}
    local ok, err, code = ops.last_fallback(missing, found)
    if not ok then return nil, err, code end
    for _, name in ipairs(missing) do self.fallback[name] = found[name] or false end
  end
  local last = {}
  for _, j in ipairs(list) do last[j.name] = self.last[j.name] or self.fallback[j.name] or nil end
  local status = {}
  for name, t in pairs(self.status) do
    local l = {}
    for _, s in pairs(t) do l[#l + 1] = s end
    table.sort(l, function(a, b) return a.node < b.node end)
    status[name] = l
  end
  return { jobs = list, paused = node.paused, status = status, last = last }
end

-- The last run of every job that has one: {[job] = last run}.
function V:last_runs()
  local t = {}
  for name, l in pairs(self.fallback) do if l then t[name] = l end end
  for name, l in pairs(self.last) do t[name] = l end
  return t
end

function V:close()
  self.closed = true
  for _, w in pairs(self.watchers) do w:cancel() end
end

return M
