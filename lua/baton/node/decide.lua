-- The policy gateway of the conductor: every decision a job's policy makes
-- for this node (claim_delay, assign_shards, retry_delay, on_orphan) goes
-- through decide(), which guards it (budget, errors, result type: a policy
-- that fails is replaced by the default, and the failure logged once a
-- POLICY_WARN_EVERY), and what policies are given is built here: the job's
-- plain view (job_view) and the live nodes sorted by name (live_nodes,
-- kept from self.nodes through set_node).
--
-- The policies themselves (stored ones in self.policies, loaded by
-- node/store.lua; built-ins in lua/baton/policies/) are run by
-- lua/baton/policy.lua.
local baton = require "baton"
local stored = require "baton.stored"
local util = require "baton.util"
local policymod = require "baton.policy"

local format = string.format

local M = {}

local function log(level, msg, fields)
  baton.log[level](msg, fields)
end

-- The module a job's policy names: stored in etcd (P policies/<name>,
-- hot-reloaded), else shipped in lua/baton/policies/, else the default.
function M.policy_for(self, spec)
  local name = spec.policy or "default"
  local entry = self.policies[name]
  if entry then return entry.mod end
  return policymod.builtin(name) or policymod.builtin("default")
end

-- Seconds during which the same failure of a job's policy is logged once.
M.POLICY_WARN_EVERY = 60

-- One policy decision, guarded (budget, errors, result type): the default
-- decides when the job's policy fails, and the failure is logged (the same
-- one, for the same job and function, once a POLICY_WARN_EVERY: a policy
-- that fails for every instant would fill the log).
function M.decide(self, name, spec, fname, fields, ...)
  local res, why = policymod.decide(M.policy_for(self, spec), fname, ...)
  if why then
    local key = name .. "\0" .. fname .. "\0" .. why
    local now, warned = baton.monotime(), self.decisions.warned
    if not warned[key] or now - warned[key] >= M.POLICY_WARN_EVERY then
      if not warned[key] and next(warned) and #why < 2000 then
        for k, t in pairs(warned) do if now - t >= M.POLICY_WARN_EVERY then warned[k] = nil end end
      end
      warned[key] = now
      local f = { job = name, policy = spec.policy or "default", ["function"] = fname, error = why,
                  repeats = format("logged once a %d s", M.POLICY_WARN_EVERY) }
      for k, v in pairs(fields or {}) do f[k] = v end
      log("warn", "policy failed; the default decided", f)
    end
  end
  return res
end

-- The registered nodes (self.nodes, name -> its registration) as a list
-- sorted by name, what policies get: built once per change of
-- self.nodes (set_node), not for every instant.
function M.live_nodes(self)
  local list = self.decisions.live_list
  if list then return list end
  list = {}
  for _, n in pairs(self.nodes) do list[#list + 1] = n end
  table.sort(list, function(a, b) return a.name < b.name end)
  -- (never changed once made: a stored policy's sandbox keeps it, stored.lua)
  self.decisions.live_list = stored.shareable(list)
  return list
end

-- Forgets every registration (a listing notes them again).
function M.forget_nodes(self)
  self.nodes, self.decisions.live_list = {}, nil
end

-- Notes node name's registration n (nil: it left), which is never changed.
function M.set_node(self, name, n)
  self.nodes[name] = stored.shareable(n)
  self.decisions.live_list = nil
end

---------------------------------------------------------------------------
-- instants and manual runs

-- The plain data a policy gets for a job, made once per job version (a
-- spec is never changed once compiled: a put compiles a new one). Its
-- retry table is a copy: the spec's may be the one all jobs without a
-- retry share (job.lua). Built-ins read it; stored policies get a copy
-- (policy.call).
local views = setmetatable({}, { __mode = "k" })
function M.job_view(name, spec)
  local v = views[spec]
  if v and v.name == name then return v end
  local r = spec.retry
  v = { name = name, labels = spec.labels, policy = spec.policy, schedule = spec.schedule,
        queue = spec.queue, timezone = spec.timezone, timeout = spec.timeout,
        concurrency = spec.concurrency, shards = spec.shards, on_node_loss = spec.on_node_loss,
        retry = { attempts = r.attempts, backoff = r.backoff, max_backoff = r.max_backoff,
                  jitter = r.jitter } }
  views[spec] = stored.shareable(v)
  return v
end

-- Seconds this node waits before trying to claim key (nil: never), from
-- the job's policy; a policy that fails falls back to the default.
function M.claim_delay(self, name, spec, key)
  local me = self.nodes[self.name] or { name = self.name, labels = self.labels }
  return M.decide(self, name, spec, "claim_delay", { instant = key },
                  M.job_view(name, spec), key, M.live_nodes(self), me)
end

-- {[i] = node name} for the shards of one instant, from the job's policy
-- (assign_shards), checked, else rendezvous hashing of each shard.
function M.assign_shards(self, name, spec, fire)
  return M.decide(self, name, spec, "assign_shards", { instant = util.instant(fire) },
                  M.job_view(name, spec), spec.shards, M.live_nodes(self), fire) or {}
end

return M
