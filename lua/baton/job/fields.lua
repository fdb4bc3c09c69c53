-- The fields of a job file, their defaults (docs/jobs.md), and how a spec
-- holds them: only what differs from the defaults, read through its
-- metatable.
local setmetatable, rawset, error = setmetatable, rawset, error

local M = {}

-- Defaults of the optional fields (documented in docs/jobs.md).
local DEFAULTS = {
  timezone = "UTC",
  timeout = 3600,
  concurrency = "forbid",
  misfire = "run_once",
  starting_deadline = nil, -- no limit
  shards = 1,
  policy = "default",
  on_node_loss = "rerun",
}
M.DEFAULTS = DEFAULTS
local RETRY_DEFAULTS = { attempts = 0, backoff = 10, max_backoff = 300, jitter = 0.2 }
M.RETRY_DEFAULTS = RETRY_DEFAULTS
-- The retry table of every job that gives none: one table for all of them
-- (SPEC_DEFAULTS below). Nothing may change it; policies get a copy
-- (node/decide.lua, job_view).
local DEFAULT_RETRY = { attempts = 0, backoff = 10, max_backoff = 300, jitter = 0.2 }

local FIELDS = {
  "schedule", "queue", "timezone", "timeout", "concurrency", "misfire",
  "starting_deadline", "retry", "shards", "shard_params", "policy",
  "on_node_loss", "labels", "params", "secrets", "description", "on", "run", "memory",
  "command", "env", "cwd",
}
local RETRY_FIELDS = { "attempts", "backoff", "max_backoff", "jitter" }
local ENUMS = {
  concurrency = { "allow", "forbid", "replace" },
  misfire = { "skip", "run_once", "run_all" },
  on_node_loss = { "rerun", "abandon" },
}
-- Names people reach for out of habit in other schedulers.
local ALIASES = {
  tz = "timezone", zone = "timezone", time_zone = "timezone", cron = "schedule",
  retries = "retry", handler = "run", fn = "run", main = "run", deadline = "starting_deadline",
  concurrency_policy = "concurrency", node_selector = "labels", parameters = "params",
  triggers = "on", events = "on", trigger = "on", secret = "secrets",
  cmd = "command", exec = "command", shell = "command", script = "command", argv = "command",
  workdir = "cwd", dir = "cwd", directory = "cwd", working_dir = "cwd", chdir = "cwd",
  environment = "env", environ = "env",
}
-- The functions of a scheduling policy (docs/policies.md, "The interface").
M.POLICY_FUNCTIONS = { "claim_delay", "assign_shards", "retry_delay", "on_orphan" }

-- The labels or params of a job that has none: one table for all such
-- jobs (10,000 jobs, 1.5 MB less), which nothing may change.
local NONE = setmetatable({}, { __newindex = function()
  error("a job's labels and params are read-only", 2)
end, __metatable = false })
M.NONE = NONE

-- A spec holds only the fields that differ from SPEC_DEFAULTS, which it
-- reads through its metatable: most jobs keep most defaults, and a table
-- of 7 fields instead of 17 is a third of the size (100,000 jobs: about 60
-- MB less). Reading a field is unchanged; pairs() over a spec sees only
-- what the job set (nothing iterates a spec: job.summary and job_view read
-- fields by name).
local SPEC_DEFAULTS = {
  timezone = DEFAULTS.timezone, timeout = DEFAULTS.timeout, concurrency = DEFAULTS.concurrency,
  misfire = DEFAULTS.misfire, shards = DEFAULTS.shards, policy = DEFAULTS.policy,
  on_node_loss = DEFAULTS.on_node_loss, manual = false, labels = NONE, params = NONE,
  retry = DEFAULT_RETRY,
}
local spec_mt = { __index = SPEC_DEFAULTS }
-- While validate fills a spec, a default is not stored at all.
M.building_mt = { __index = SPEC_DEFAULTS, __newindex = function(t, k, v)
  if SPEC_DEFAULTS[k] ~= v then rawset(t, k, v) end
end }

function M.finish(spec)
  return setmetatable(spec, spec_mt)
end

M.FIELDS, M.RETRY_FIELDS, M.ENUMS, M.ALIASES, M.DEFAULT_RETRY = FIELDS, RETRY_FIELDS, ENUMS, ALIASES, DEFAULT_RETRY

return M
