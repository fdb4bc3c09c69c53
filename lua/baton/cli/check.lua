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
local keys = require "baton.keys"
local job = require "baton.job"
local stored = require "baton.stored"
local events = require "baton.events"
local cycles = require "baton.ops.cycles"

local USAGE = "baton check FILE.lua"
local HELP = [[Validates a job file as baton job put and the nodes do (compile from source,
spec), then prints a one-line summary and the next 5 instants; writes
nothing. A scheduling policy file is checked as baton policy put checks it:
its self-test, then its decisions on a sample cluster. Exit 0 when valid,
1 with the error.]]

-- A job's command as one line: shell text as it is, a list's words joined
-- (quoted when they hold a blank or a quote), control characters escaped.
local function command_line(cmd)
  if type(cmd) == "string" then return U.escape(cmd) end
  local words = {}
  for i, w in ipairs(cmd) do
    w = tostring(w)
    words[i] = (w == "" or w:find("[%s\"'\\]")) and ("%q"):format(w):gsub("\\\n", "\\n") or w
  end
  return U.escape(table.concat(words, " "))
end

-- One line describing a valid spec.
local function summary(spec)
  local parts = { "ok: job " .. spec.name }
  if spec.command then parts[#parts + 1] = "command " .. command_line(spec.command) end
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

-- Prints what the sandbox found of a policy file (stored.check): its
-- self-test, then the sample cluster's decisions.
local function check_policy(file, r, name)
  local out = io.stdout
  out:write(("ok: policy %s (%s)%s\n"):format(name, table.concat(r.functions or {}, ", "),
    type(r.description) == "string" and (": " .. r.description) or ""))
  local st = r.selftest or { ok = true, lines = {} }
  if not st.ok then
    out:flush()
    return A.die(("check %s: EINVAL: policy %s: %s"):format(file, name, tostring(st.error)))
  end
  if r.has_selftest then
    out:write(("selftest: passed (%d decisions)\n"):format(#(st.lines or {})))
    for _, l in ipairs(st.lines or {}) do out:write("  ", l, "\n") end
  else
    out:write("selftest: none (add selftest = function() ... end to check your own cases)\n")
  end
  local pv = r.preview or { ok = false, lines = {} }
  for _, l in ipairs(pv.lines or {}) do out:write(l, "\n") end
  if not pv.ok then
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
  -- (compiled and run in the sandbox, as every file of code is: stored.lua)
  local r, verr = stored.check(name, source, file)
  if not r then return A.die("check " .. file .. ": " .. verr) end
  if r.kind == "policy" then return check_policy(file, r, name) end
  local spec = r.spec
  local cerr, rerr = cycles.check(name, spec)
  if cerr then return A.die("check " .. file .. ": " .. cerr) end
  if rerr then
    io.stderr:write("baton: check ", file, ": note: cannot read the stored jobs (", tostring(rerr),
                    "): cycles through them are not checked\n")
  end
  io.stdout:write(summary(spec), "\n")
  if spec.queue then
    io.stdout:write("runs once per task put under ", keys.key(U.prefix(), "queue", spec.queue), "/\n")
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
