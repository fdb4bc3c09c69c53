-- baton check FILE.lua: validate a job file the way `baton job put` and the
-- node do (compile from source, own environment, spec), then print a
-- one-line summary and the next 5 fire instants. Exit 0 when valid, 1 with
-- the validation error, 2 on a usage error. A scheduling policy file (a
-- table of policy functions and no run) is checked as `baton policy put`
-- checks it (compile, fields, selftest) and the decisions it would make for
-- a sample cluster are printed; exit 1 if any of that fails.
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"
local job = require "baton.job"
local policy = require "baton.policy"
local events = require "baton.events"
local cycles = require "baton.cli.cycles"

local USAGE = "baton check FILE.lua"
local HELP = [[Validates a job file as baton job put and the nodes do (compile from source,
spec), then prints a one-line summary and the next 5 instants; writes
nothing. A scheduling policy file is checked as baton policy put checks it:
its self-test, then its decisions on a sample cluster. Exit 0 when valid,
1 with the error.]]

-- One line describing a valid spec.
local function summary(spec)
  local parts = { "ok: job " .. spec.name }
  if spec.queue then
    parts[#parts + 1] = "queue " .. spec.queue
  elseif spec.schedule then
    parts[#parts + 1] = ("schedule %q %s"):format(spec.schedule, spec.timezone)
  end
  if spec.on then parts[#parts + 1] = "on " .. events.describe(spec.on) end
  parts[#parts + 1] = ("timeout %ss"):format(spec.timeout)
  parts[#parts + 1] = "concurrency " .. spec.concurrency
  parts[#parts + 1] = "misfire " .. spec.misfire
  if spec.retry.attempts > 0 then parts[#parts + 1] = "retries " .. spec.retry.attempts end
  if spec.shards > 1 then parts[#parts + 1] = "shards " .. spec.shards end
  if spec.policy ~= "default" then parts[#parts + 1] = "policy " .. spec.policy end
  if next(spec.labels) then
    local l = {}
    for _, k in ipairs(U.sorted_keys(spec.labels)) do l[#l + 1] = k .. "=" .. spec.labels[k] end
    parts[#parts + 1] = "labels " .. table.concat(l, ",")
  end
  if next(spec.params) then parts[#parts + 1] = "params " .. table.concat(U.sorted_keys(spec.params), ",") end
  return table.concat(parts, ", ")
end

-- Checks a policy file: load, selftest, the sample cluster's decisions.
local function check_policy(file, source, name)
  local mod, err = policy.load(source, name, file)
  if not mod then return A.die("check " .. file .. ": " .. err) end
  local fns = policy.functions(mod)
  local out = io.stdout
  out:write(("ok: policy %s (%s)%s\n"):format(name, table.concat(fns, ", "),
    type(mod.description) == "string" and (": " .. mod.description) or ""))
  local sok, lines = policy.selftest(mod)
  if not sok then
    out:flush()
    return A.die(("check %s: EINVAL: policy %s: %s"):format(file, name, lines))
  end
  if mod.selftest then
    out:write(("selftest: passed (%d decisions)\n"):format(#lines))
    for _, l in ipairs(lines) do out:write("  ", l, "\n") end
  else
    out:write("selftest: none (add selftest = function() ... end to check your own cases)\n")
  end
  local pok, plines = policy.preview(mod)
  for _, l in ipairs(plines) do out:write(l, "\n") end
  if not pok then
    out:flush()
    return A.die(("check %s: EINVAL: policy %s: a decision failed on the sample cluster (see above); "
      .. "the node would use the default's"):format(file, name))
  end
  baton.exit(0)
end

return function(...)
  local _, pos = A.parse("check", USAGE, {}, { ... }, HELP)
  local file = pos[1]
  if not file then return A.usage("check", USAGE, "needs a FILE") end
  if pos[2] then return A.usage("check", USAGE, "unexpected argument \"" .. pos[2] .. "\"") end
  local source, err = U.read_file(file)
  if not source then return A.die("check " .. file .. ": " .. err) end
  local name = U.base_name(file)
  if not job.valid_name(name) then name = "check" end
  if job.looks_like_policy(source) or policy.looks_like(source) then
    return check_policy(file, source, name)
  end
  local spec, verr = job.load(source, name, nil, file)
  if not spec then return A.die("check " .. file .. ": " .. verr) end
  local cerr, rerr = cycles.check(name, spec)
  if cerr then return A.die("check " .. file .. ": " .. cerr) end
  if rerr then
    io.stderr:write("baton: check ", file, ": note: cannot read the stored jobs (", tostring(rerr),
                    "): cycles through them are not checked\n")
  end
  io.stdout:write(summary(spec), "\n")
  if spec.queue then
    io.stdout:write("runs once per task put under ", U.key("queue", spec.queue), "/\n")
  elseif spec.on and not spec.schedule then
    io.stdout:write("runs once per final outcome it names (", events.describe(spec.on),
                    "), and when triggered (baton job run ", spec.name, ")\n")
  elseif spec.manual then
    io.stdout:write("@manual: runs only when triggered (baton job run ", spec.name, ")\n")
  else
    for _, t in ipairs(job.next_fires(spec, 5)) do
      io.stdout:write(U.rfc3339(t, spec.cron), "\n")
    end
  end
  baton.exit(0)
end
