-- The cycle check of `baton check` and `baton job put` for a job with `on`
-- (baton.events): the job, as it would be stored under its name, together
-- with the jobs already in etcd, must not make a cycle of triggers (a run
-- of each would start the next, forever). Stored jobs that do not load are
-- left out (the nodes run their last good version, whose triggers this
-- cannot know).
local baton = require "baton"
local util = require "baton.util"
local keys = require "baton.keys"
local stored = require "baton.stored"
local events = require "baton.events"

local M = {}

-- nil when spec (job name) closes no cycle; else the error, one line:
-- "EINVAL: job NAME: field 'on': cycle: a -> b -> a". When the stored jobs
-- cannot be read, returns nil and the reason (the file alone was checked:
-- job.load refuses a job that names itself).
function M.check(name, spec)
  local named = false
  for _, list in pairs(spec.on or {}) do
    for _, n in ipairs(list) do if n ~= "*" then named = true end end
  end
  if not named then return nil end -- ("*" never closes a cycle: see events.find_cycle)
  local pfx = keys.dir(util.prefix(), "jobs")
  local r, err = baton.etcd:get(pfx, { prefix = true })
  if not r then return nil, err end
  -- (described by the sandbox, where the process trusts keys after they
  -- verify: stored.lua; none runs here)
  local list = {}
  for _, kv in ipairs(r.kvs) do
    local n = keys.under(pfx, kv.key)
    if n ~= name then list[#list + 1] = { name = n, kv = kv } end
  end
  local specs = {}
  for i, d in ipairs(stored.jobs(list)) do
    if d.spec and d.spec.on then specs[list[i].name] = d.spec end
  end
  specs[name] = spec
  local cycle = events.find_cycle(specs, name)
  if cycle then
    return ("EINVAL: job %s: field 'on': cycle: %s (each run would start the next, forever)")
      :format(name, cycle)
  end
end

return M
