-- baton queue push QUEUE VALUE: add a task under P queue/<QUEUE>/<id>
-- (docs/guide.md, "5. Queues"). The id is <unix ms, 13 digits>-<16 random hex
-- digits>: unique across machines and sorted by push time (up to clock skew
-- between machines; the exact order is the keys' create revision, which is
-- what a node claims by).
--
-- baton queue push QUEUE - (or --file FILE) pushes many tasks: one per
-- line, or the elements of a JSON array (ops.queue_tasks), in batched txns
-- (ops.queue_push_many); ids of one push sort in input order.
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"
local job = require "baton.job"

local USAGE = "baton queue push QUEUE VALUE [--json]\n"
  .. "       baton queue push QUEUE - | --file FILE [--json]"
local HELP = [[Adds a task under <prefix>queue/QUEUE/ for the job with queue = "QUEUE"
and prints its key (--json: {queue, key, revision}, the body of POST
/api/v1/queues/QUEUE/tasks).

With - (standard input) or --file FILE, adds many tasks: one per line
(blank lines skipped), or, when the first non-blank character is '[', the
elements of a JSON array (a string element is the task as it is, any other
element its JSON text). They are stored in transactions of up to 128 tasks,
with ids that sort in input order, and one line says how many went where
(--json: {queue, count, keys, revision}). Input that is not valid, or a
task over etcd's request limit, stores nothing. Should etcd fail midway,
the error says how many tasks (the first of the input) were stored.]]

-- One line for a batch push: "3 tasks pushed to queue orders: FIRST .. LAST".
local function summary(r)
  local keys = r.keys
  if r.count == 1 then return ("1 task pushed to queue %s: %s"):format(r.queue, keys[1]) end
  return ("%d tasks pushed to queue %s: %s .. %s"):format(r.count, r.queue, keys[1], keys[#keys])
end

return function(...)
  local opts, pos = A.parse("queue", USAGE, { json = "flag", file = "string" }, { ... }, HELP)
  if pos[1] ~= "push" then
    return A.usage("queue", USAGE, pos[1] and ("unknown subcommand \"" .. pos[1] .. "\"") or "needs a subcommand")
  end
  local queue, value = pos[2], pos[3]
  if not queue then return A.usage("queue", USAGE, "push needs a QUEUE") end
  if not job.valid_name(queue) then
    return A.usage("queue", USAGE, ("invalid queue name \"%s\" (letters, digits, '_', '.', '-', "
      .. "starting with a letter or digit)"):format(queue))
  end
  if opts.file and value then
    return A.usage("queue", USAGE, "give either a VALUE or --file, not both")
  end
  if not value and not opts.file then
    return A.usage("queue", USAGE, "push needs a VALUE (or - or --file FILE for many tasks)")
  end
  if pos[4] then return A.usage("queue", USAGE, "unexpected argument \"" .. pos[4] .. "\"") end
  local ops = require "baton.ops"
  if value ~= "-" and not opts.file then
    local r, err = ops.queue_push(queue, value)
    if not r then return A.die("queue push " .. queue .. ": " .. err) end
    if opts.json then U.print_json(r) else io.stdout:write(r.key, "\n") end
    return baton.exit(0)
  end
  -- many tasks
  local text, rerr
  if opts.file then
    text, rerr = U.read_file(opts.file)
    if not text then return A.die("queue push " .. queue .. ": " .. rerr) end
  else
    text = io.stdin:read("*a") or ""
  end
  local from = opts.file or "standard input"
  local values, where = ops.queue_tasks(text, from)
  if not values then return A.die("queue push " .. queue .. ": " .. where) end
  local r, err = ops.queue_push_many(queue, values, where)
  if not r then return A.die("queue push " .. queue .. ": " .. err) end
  if opts.json then U.print_json(r) else io.stdout:write(summary(r), "\n") end
  baton.exit(0)
end
