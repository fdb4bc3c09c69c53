-- baton queue push QUEUE VALUE: add a task under P queue/<QUEUE>/<id>
-- (design.md section 7.3). The id is <unix ms, 13 digits>-<16 random hex
-- digits>: unique across machines and sorted by push time (up to clock skew
-- between machines; the exact order is the keys' create revision, which is
-- what a node should claim by). VALUE "-" reads the task from stdin.
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"
local job = require "baton.job"

local USAGE = "baton queue push QUEUE VALUE [--json]"
local HELP = [[Adds a task under <prefix>queue/QUEUE/ for the job with queue = "QUEUE"
(VALUE - reads it from stdin) and prints its key (--json: {queue, key,
revision}, the body of POST /api/v1/queues/QUEUE/tasks).]]

return function(...)
  local opts, pos = A.parse("queue", USAGE, { json = "flag" }, { ... }, HELP)
  if pos[1] ~= "push" then
    return A.usage("queue", USAGE, pos[1] and ("unknown subcommand \"" .. pos[1] .. "\"") or "needs a subcommand")
  end
  local queue, value = pos[2], pos[3]
  if not queue then return A.usage("queue", USAGE, "push needs a QUEUE") end
  if not job.valid_name(queue) then
    return A.usage("queue", USAGE, ("invalid queue name \"%s\" (letters, digits, '_', '.', '-', "
      .. "starting with a letter or digit)"):format(queue))
  end
  if not value then return A.usage("queue", USAGE, "push needs a VALUE (or - to read it from stdin)") end
  if pos[4] then return A.usage("queue", USAGE, "unexpected argument \"" .. pos[4] .. "\"") end
  if value == "-" then value = io.stdin:read("*a") or "" end
  local r, err = require("baton.ops").queue_push(queue, value)
  if not r then return A.die("queue push " .. queue .. ": " .. err) end
  if opts.json then U.print_json(r) else io.stdout:write(r.key, "\n") end
  baton.exit(0)
end
