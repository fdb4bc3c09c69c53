-- baton job put|ls|show|rm|run|kill|pause|resume|history|logs (docs/jobs.md,
-- "The job CLI"; the keys: docs/architecture.md, "Key layout"). Everything
-- here reads and writes etcd keys under the prefix; the node does the
-- scheduling. The reads and writes are those of baton.ops, which the node's
-- HTTP API shares; this file parses arguments and formats (the --json output
-- is ops' data as it is).
--
--   P jobs/<name>                      the job's Lua source
--   P paused/<name>                    present while paused
--   P status/<name>/<node>             JSON {revision=, error=, running=, time=} a
--                                      node writes (running: the revision it
--                                      still runs when `revision` was rejected)
--   P runs/<name>/<instant>[/<shard>]  JSON run records
--   P running/<name>/<id>              present while an attempt of the run executes
--   P trigger/<name>/<id>              manual-run requests (baton.ops, run_job)
--   P cancel/<name>/<id>               a request to stop a run (baton job kill)
--   P output/<name>/<id>/@<attempt>/<chunk>  a run's kept output (output.lua)
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"
local job = require "baton.job"
local events = require "baton.events"
local keys = require "baton.keys"
local ops = require "baton.ops"
local logs = require "baton.cli.logs"

local format, concat = string.format, table.concat

local USAGES = {
  put = "baton job put FILE.lua [--name NAME] [--sign KEY] [--author WHO] [--keep-versions N] [--json]",
  ls = "baton job ls [--json]",
  show = "baton job show NAME [--json]",
  rm = "baton job rm NAME [--purge] [--author WHO] [--json]",
  run = "baton job run NAME [--force] [--param k=v ...] [--wait [--start-timeout S]] [--json]",
  kill = "baton job kill NAME [ID]",
  pause = "baton job pause NAME [--json]",
  resume = "baton job resume NAME [--json]",
  history = "baton job history NAME [-n N] [--json]",
  logs = "baton job logs NAME [ID] [--attempt N] [-f|--follow] [--json]",
}
local ORDER = { "put", "ls", "show", "rm", "run", "kill", "pause", "resume", "history", "logs" }
local USAGE -- set below, once versions|diff|rollback are added
-- What --help says after the usage line.
local HELPS = {
  put = [[Validates FILE.lua as baton check does, refuses a policy that is neither
stored nor built in and a file over etcd's request limit, then stores the
source at <prefix>jobs/NAME (default NAME: the file's base name). Warns when
no live node has the job's labels. --sign KEY stores a signature by the
secret key KEY (baton keygen) with the source: nodes started with --trust
run only signed code (docs/security.md). Records a version (baton job
versions): --author WHO (default: the etcd user when etcd auth is on, else
$USER@host), the last --keep-versions N kept (default 20). --json prints
{name, key, revision, created, signed_by, warnings}, the body of PUT
/api/v1/jobs/NAME (docs/api.md).]],
  ls = "One line per job: schedule, zone, next instant, state, last run.",
  show = "The job's spec, the revision each node loaded (or its error), the last 10 runs.",
  rm = [[Deletes the job, its paused flag, node statuses and triggers; --purge also its
run records. --json prints {name, removed, purged}.]],
  run = [[Asks for one run now, honouring the job's concurrency unless --force. Each
--param k=v sets ctx.params.k for this run; the job must declare k in its
params table, whose values are the defaults. Refused when no live node can
run the job. --json prints {job, id, key, force, params}, the body of POST
/api/v1/jobs/NAME/run.

--wait then prints the run's output as job logs -f does (the line that says
it was queued goes to stderr) and exits with how the run ended:
  0  succeeded
  1  baton could not ask etcd or follow the run (the run may go on)
  2  usage error
  3  failed (also abandoned, or lost with its node)
  4  timed out (the job's timeout)
  5  killed (baton job kill, or replaced)
  6  skipped (concurrency = "forbid" and a run of the job was running)
  7  not started: no live node has the job's labels, or none started it
     within --start-timeout S (default 60); the request is withdrawn
A retry is followed into its next attempt: the status is the run's final
one. Interrupting baton (Ctrl-C) does not stop the run.]],
  kill = [[Stops a running run of the job (without ID: every running run of it):
ctx:cancelled() turns true and its processes get SIGTERM, then after the
node's grace period every process of the run is killed. The run is recorded
killed, by $USER@host, and is not retried or run again.]],
  pause = "No new instants of the job until resume (runs already started finish).\n"
    .. "--json prints {job, paused, changed}.",
  resume = "The job fires again from its next instant. --json prints {job, paused, changed}.",
  history = "Run records, newest first (default 20): id, node, attempt, state, duration, error.",
  logs = [[Prints the kept output of the job's newest run (or run ID), its last
attempt unless --attempt N. When the newest run is a shard of a sharded
instant, every shard of that instant is printed, each under a header that
gives its ID (INSTANT/SHARD): job logs NAME INSTANT/SHARD picks one. -f
follows a running run live, through an etcd watch, ends with the run's
final state and exits with it, as job run --wait does (0 succeeded, 3
failed, 4 timed out, 5 killed, 6 skipped; with --attempt N, that
attempt's). --json prints one object a line.]],
}
local HELP = "Jobs stored under <prefix>jobs/. baton job SUBCOMMAND --help says more."
local current -- the subcommand being run, for its usage line
local NAME_RULE = U.NAME_RULE

local function die(sub, what, err, status)
  return A.die("job " .. sub .. (what and (" " .. what) or "") .. ": " .. err, status)
end
local function usage(msg)
  return A.usage(current and ("job " .. current) or "job", current and USAGES[current] or USAGE, msg)
end

-- Checks the positional arguments of a subcommand that takes one NAME.
local function one_name(sub, pos)
  local name = pos[2]
  if not name then return usage("needs a NAME") end
  if pos[3] then return usage("unexpected argument \"" .. pos[3] .. "\"") end
  if not job.valid_name(name) then
    return usage(format("invalid job name \"%s\" (%s)", name, NAME_RULE))
  end
  return name
end

-- One run record as a table row.
local function run_row(rec)
  local fire = U.field(rec, "fire")
  local started, finished = U.field(rec, "started"), U.field(rec, "finished")
  local dur = "-"
  if type(started) == "number" and type(finished) == "number" then
    dur = U.duration(finished - started)
  elseif type(started) == "number" and U.field(rec, "state") == "running" then
    dur = U.duration(baton.now() - started) .. "+"
  end
  local err = U.field(rec, "error")
  -- The run's id, as baton job kill takes it: the instant (with its
  -- milliseconds for a manual run), /N for a shard, a queue task's id.
  local where = rec.key or (type(fire) == "number" and U.instant(fire)) or "-"
  return {
    where, tostring(U.field(rec, "node") or "-"), tostring(U.field(rec, "attempt") or "-"),
    tostring(U.field(rec, "state") or "-"), dur, err and tostring(err):gsub("\n", " ") or "",
  }
end
local RUN_HEADER = { "FIRE", "NODE", "ATTEMPT", "STATE", "DURATION", "ERROR" }
-- (on a terminal: the error cut to fit, the state in colour)
local RUN_TABLE = { flex = { 6 }, color = { [4] = U.state_color } }

---------------------------------------------------------------------------
-- subcommands: the data comes from baton.ops (shared with the node's HTTP
-- API); here are the arguments and the formatting.

local sub = {}

function sub.put(pos, opts)
  local name, source, file = U.put_args(pos, opts, "job", usage, die)
  local secret, serr = U.signing_key(opts)
  if serr then return die("put", name, serr) end
  local r, err, code, extra = ops.put_job(name, source, { chunkname = file, sign = secret,
                                                          author = opts.author, keep = opts["keep-versions"] })
  if not r then
    -- (a source that does not validate is named by its file; etcd's
    -- refusal by the job)
    return die("put", ((extra and extra.invalid) or code == "EFBIG") and file or name, err)
  end
  if opts.json then
    U.print_json(r)
    return baton.exit(0)
  end
  io.stdout:write(format("%s job %s at %s (revision %d)%s\n",
    r.created and "created" or "updated", name, r.key, r.revision,
    r.signed_by and (", signed by key " .. r.signed_by) or ""))
  io.stdout:flush()
  for _, w in ipairs(r.warnings) do
    io.stderr:write(format("baton: job put %s: warning: %s\n", name, w))
  end
  baton.exit(0)
end

-- The STATE column of a job.
local function state_text(d)
  local b = d.untrusted and "untrusted" or "broken"
  local s = d.broken and (d.paused and b .. ",paused" or b) or (d.paused and "paused" or "active")
  if d.running_revision then s = s .. format(" (runs rev %d)", d.running_revision) end
  return s
end

function sub.ls(pos, opts)
  if pos[2] then return usage("unexpected argument \"" .. pos[2] .. "\"") end
  local list, err = ops.list_jobs()
  if not list then return die("ls", nil, err) end
  if opts.json then
    U.print_json(list)
    return baton.exit(0)
  end
  if #list == 0 then
    io.stderr:write("baton: job ls: no jobs under ", keys.key(U.prefix(), "jobs"), "/ (is --prefix right?)\n")
  end
  local rows = {}
  for _, d in ipairs(list) do
    rows[#rows + 1] = {
      d.name, d.schedule or (d.queue and "queue:" .. d.queue) or (d.on and "on:" .. events.describe(d.on, true)) or "-",
      d.timezone or "-", d.next or "-", state_text(d), d.last and (tostring(d.last.state) .. " " .. d.last.run) or "-",
    }
  end
  U.print_table({ "NAME", "SCHEDULE", "TIMEZONE", "NEXT", "STATE", "LAST RUN" }, rows, nil,
    { flex = { 6, 2 }, color = { [5] = U.state_color, [6] = U.state_color } })
  baton.exit(0)
end

-- The lines of job show that say what spec (the job's spec, from
-- ops.show_job's d) does, appended to f.
local function spec_fields(f, d, spec)
  if spec.description then f[#f + 1] = { "description", spec.description } end
  if spec.on then f[#f + 1] = { "on", events.describe(spec.on) } end
  if spec.queue then
    f[#f + 1] = { "queue", spec.queue .. " (" .. keys.key(U.prefix(), "queue", spec.queue) .. "/)" }
  elseif not spec.schedule then
    f[#f + 1] = { "schedule", "- (runs on events, and when triggered)" }
  else
    f[#f + 1] = { "schedule", format("%s (%s)", spec.schedule, spec.timezone) }
    f[#f + 1] = { "next", d.paused and "- (paused)" or (d.next[1] or "- (only when triggered)") }
  end
  f[#f + 1] = { "timeout", spec.timeout .. "s" }
  f[#f + 1] = { "concurrency", spec.concurrency }
  f[#f + 1] = { "misfire", spec.misfire .. (spec.starting_deadline
    and format(" (starting deadline %ss)", spec.starting_deadline) or " (no starting deadline)") }
  local r = spec.retry
  f[#f + 1] = { "retry", r.attempts == 0 and "none" or format("%d more attempts, backoff %ss up to %ss, jitter %s",
    r.attempts, r.backoff, r.max_backoff, r.jitter) }
  f[#f + 1] = { "shards", tostring(spec.shards) }
  f[#f + 1] = { "policy", spec.policy }
  f[#f + 1] = { "on_node_loss", spec.on_node_loss }
  local l = {}
  for _, k in ipairs(U.sorted_keys(spec.labels)) do l[#l + 1] = k .. "=" .. spec.labels[k] end
  f[#f + 1] = { "labels", #l > 0 and concat(l, ",") or "(any node)" }
  if next(spec.params) then
    local p = {}
    for _, k in ipairs(U.sorted_keys(spec.params)) do p[#p + 1] = format("%s=%q", k, spec.params[k]) end
    f[#f + 1] = { "params", concat(p, " ") .. " (defaults; baton job run --param k=v)" }
  end
  if spec.secrets and #spec.secrets > 0 then
    f[#f + 1] = { "secrets", concat(spec.secrets, ", ") .. " (from each node's --secrets-dir or environment)" }
  end
end

function sub.show(pos, opts)
  local name = one_name("show", pos)
  local d, err = ops.show_job(name)
  if not d then return die("show", name, err) end
  if opts.json then
    U.print_json(d)
    return baton.exit(0)
  end

  local spec = U.field(d, "spec")
  local f = {
    { "job", name },
    { "key", format("%s (revision %d, version %d)", d.key, d.revision, d.version) },
  }
  if d.running_revision then
    f[#f + 1] = { "running", format("revision %d, the last good version (what follows is its spec)",
      d.running_revision) }
  end
  if spec then spec_fields(f, d, spec) end
  f[#f + 1] = { "paused", d.paused and "yes" or "no" }
  f[#f + 1] = { "signed", d.signed_by and ("by key " .. d.signed_by) or "no" }
  if d.error then f[#f + 1] = { "error", d.error } end
  U.print_fields(f)

  io.stdout:write("\nnodes:\n")
  if #d.status == 0 then
    io.stdout:write("  (no node has reported loading it)\n")
  else
    local rows = {}
    for _, s in ipairs(d.status) do
      local loaded = s.revision and tostring(s.revision) or "-"
      if s.revision and s.revision ~= d.revision then loaded = loaded .. " (stale)" end
      rows[#rows + 1] = { "  " .. s.node, loaded, s.error and tostring(s.error):gsub("\n", " ") or "ok" }
    end
    U.print_table({ "  NODE", "REVISION", "STATUS" }, rows, nil, U.STATUS_TABLE)
  end
  io.stdout:write("\nlast runs:\n")
  if #d.runs == 0 then
    io.stdout:write("  (none)\n")
  else
    local rows = {}
    for _, rec in ipairs(d.runs) do
      local row = run_row(rec)
      row[1] = "  " .. row[1]
      rows[#rows + 1] = row
    end
    local h = { unpack(RUN_HEADER) }
    h[1] = "  " .. h[1]
    U.print_table(h, rows, nil, RUN_TABLE)
  end
  baton.exit(0)
end

function sub.history(pos, opts)
  local name = one_name("history", pos)
  local rs, err = ops.history(name, opts.n or 20)
  if not rs then return die("history", name, err) end
  if opts.json then
    U.print_json(rs)
    return baton.exit(0)
  end
  if #rs == 0 then
    io.stderr:write("baton: job history ", name, ": no runs of job ", name, " yet\n")
  end
  local rows = {}
  for _, rec in ipairs(rs) do rows[#rows + 1] = run_row(rec) end
  U.print_table(RUN_HEADER, rows, nil, RUN_TABLE)
  baton.exit(0)
end

function sub.rm(pos, opts)
  local name = one_name("rm", pos)
  local r, err = ops.rm_job(name, { purge = opts.purge, author = opts.author })
  if not r then return die("rm", name, err) end
  if opts.json then
    U.print_json(r)
    return baton.exit(0)
  end
  io.stdout:write(format("removed job %s%s\n", name,
    opts.purge and format(" and its %d run records", r.purged) or " (run history kept; --purge removes it)"))
  io.stdout:flush()
  for _, w in ipairs(r.warnings or {}) do io.stderr:write(format("baton: job rm %s: warning: %s\n", name, w)) end
  baton.exit(0)
end

-- Sets or clears the paused flag of an existing job.
local function set_paused(sub_name, pos, opts, paused)
  local name = one_name(sub_name, pos)
  local r, err = (paused and ops.pause_job or ops.resume_job)(name)
  if not r then return die(sub_name, name, err) end
  if opts.json then
    U.print_json(r)
    return baton.exit(0)
  end
  if paused then
    io.stdout:write(r.changed and format("paused job %s\n", name) or format("job %s was already paused\n", name))
  else
    io.stdout:write(r.changed and format("resumed job %s\n", name) or format("job %s was not paused\n", name))
  end
  baton.exit(0)
end

function sub.pause(pos, opts) return set_paused("pause", pos, opts, true) end
function sub.resume(pos, opts) return set_paused("resume", pos, opts, false) end

-- The --param k=v of baton job run, as {k = v}; a malformed one is a usage
-- error.
local function given_params(list)
  local given = {}
  for _, kv in ipairs(list or {}) do
    local k, v = kv:match("^([^=]+)=(.*)$")
    if not k then return usage(format("--param needs k=v, not \"%s\"", kv)) end
    if given[k] then return usage("--param " .. k .. " is given twice") end
    given[k] = v
  end
  return given
end

-- How long baton job kill waits for a run to end: the node's grace period
-- (5 s) and the time its processes take to go, with room to spare.
local KILL_WAIT = 30

function sub.kill(pos)
  local name, id = pos[2], pos[3]
  if not name then return usage("needs a NAME") end
  if pos[4] then return usage("unexpected argument \"" .. pos[4] .. "\"") end
  if not job.valid_name(name) then return usage(format("invalid job name \"%s\" (%s)", name, NAME_RULE)) end
  local r, err = ops.kill_job(name, { id = id })
  if not r then return die("kill", id and (name .. " " .. id) or name, err) end
  local targets = r.runs
  for _, t in ipairs(targets) do
    -- (when the attempt ended meanwhile, its record says how, below)
    if t.asked then
      io.stdout:write(U.escape(format("stopping run %s of job %s on node %s (attempt %s)", t.id, name,
        tostring(t.node or "?"), tostring(t.attempt or "?"))), "\n")
    end
  end
  io.stdout:flush()
  -- Wait for the records to say how each run ended.
  local ids = {}
  for i, t in ipairs(targets) do ids[i] = t.id end
  local failed = false
  local ended, werr = ops.wait_runs(name, ids, KILL_WAIT, function(rid, rec)
    local state = rec and U.field(rec, "state")
    if state == "killed" then
      io.stdout:write(U.escape(format("killed run %s of job %s (%s)", rid, name,
        tostring(U.field(rec, "error") or "killed"))), "\n")
      io.stdout:flush()
    elseif state then
      failed = true
      io.stderr:write(U.escape(format("baton: job kill %s %s: the run ended %s before it could be stopped",
        name, rid, tostring(state))), "\n")
    else
      failed = true
      io.stderr:write(U.escape(format("baton: job kill %s %s: asked to stop, but it is still running after %d s "
        .. "(it is recorded killed once its processes are gone)", name, rid, KILL_WAIT)), "\n")
    end
  end)
  if not ended then return die("kill", name, werr) end
  baton.exit(failed and 1 or 0)
end

---------------------------------------------------------------------------
-- logs and run --wait: a run's kept output, followed live (cli/logs.lua)

function sub.logs(pos, opts)
  local name = pos[2]
  if not name then return usage("needs a NAME") end
  if pos[4] then return usage("unexpected argument \"" .. pos[4] .. "\"") end
  if not job.valid_name(name) then
    return usage(format("invalid job name \"%s\" (%s)", name, NAME_RULE))
  end
  local follow = opts.f or opts.follow
  local kv, rec, rev
  if follow and not pos[3] then
    -- `job run NAME && job logs NAME -f`: a manual run asked for and not
    -- claimed yet is the run to follow, once a node has claimed it.
    kv, rec, rev = logs.wait_triggered(name)
    if kv == nil then return die("logs", name, rec) end
  end
  if not kv then kv, rec, rev = logs.run_record(name, pos[3]) end
  if not kv then return die("logs", name, rec) end
  local _, id = keys.split(U.prefix(), "runs", kv.key)
  local instant = not pos[3] and id:match("^(.+)/%d+$")
  if instant then
    -- The newest run is a shard of a sharded instant: all its shards, each
    -- under its own header; one of them to follow or to pick an attempt of.
    local list, at = logs.shard_records(name, instant)
    if not list then return die("logs", name, at) end
    local ids = {}
    for _, s in ipairs(list) do ids[#ids + 1] = instant .. "/" .. s.i end
    if follow or opts.attempt then
      return usage(format("the newest run of job %s is instant %s, in %d shards: %s one of them by its ID (%s)",
        name, instant, #list, follow and "follow" or "pick an attempt of", concat(ids, ", ")))
    end
    for k, s in ipairs(list) do
      if k > 1 and not opts.json then io.stdout:write("\n") end
      local x = logs.ending(s.rec)
      local head = format("=== shard %d of %d: %s, %s%s ===", s.i, #list, ids[k], tostring(x.state or "?"),
        x.node and (" on " .. tostring(x.node)) or "")
      logs.show_run(name, s.kv, s.rec, at, opts, false, U.escape(head))
    end
    return baton.exit(0)
  end
  logs.show_run(name, kv, rec, rev, opts, follow)
  baton.exit(0)
end

function sub.run(pos, opts)
  local name = one_name("run", pos)
  local given = given_params(opts.param)
  if opts["start-timeout"] and not opts.wait then return usage("--start-timeout goes with --wait") end
  local r, err, code = ops.run_job(name, { params = given, force = opts.force or false })
  if not r then
    -- (--wait: a run that cannot start, no live node having the job's
    -- labels, has the status of one that did not)
    return die("run", name, err, opts.wait and code == "ECONFLICT" and logs.EXIT.not_started or nil)
  end
  if opts.json then
    U.print_json(r)
    if not opts.wait then return baton.exit(0) end
  else
    local p = {}
    for _, k in ipairs(U.sorted_keys(given)) do p[#p + 1] = format("%s=%q", k, given[k]) end
    -- (--wait: stdout is the run's output)
    local out = opts.wait and io.stderr or io.stdout
    out:write(format("%squeued a manual run of %s%s (%s): run %s%s; %s\n", opts.wait and "baton: job run: " or "",
      name, opts.force and " (--force: ignoring concurrency)" or "", r.key, r.id,
      #p > 0 and (", params " .. concat(p, " ")) or "",
      opts.wait and "waiting for it to end" or "a live node will start it"))
    if not opts.wait then return baton.exit(0) end
  end
  local kv, rec, rev = logs.wait_claimed(name, r, opts["start-timeout"] or logs.START_TIMEOUT)
  if not kv then
    return die("run", name, rec, tostring(rec):find("^ETIMEDOUT: no node started") and logs.EXIT.not_started or nil)
  end
  return logs.show_run(name, kv, rec, rev, opts, true)
end

local FLAGS = {
  logs = { attempt = "count", f = "flag", follow = "flag", json = "flag" },
  put = { name = "string", sign = "string", author = "string", ["keep-versions"] = "count", json = "flag" },
  ls = { json = "flag" },
  show = { json = "flag" },
  history = { n = "count", json = "flag" },
  rm = { purge = "flag", author = "string", json = "flag" },
  run = { force = "flag", param = "list", json = "flag", wait = "flag", ["start-timeout"] = "number" },
  kill = {},
  pause = { json = "flag" }, resume = { json = "flag" },
}

require "baton.cli.versions" ("job", { sub = sub, usages = USAGES, helps = HELPS, flags = FLAGS,
  order = ORDER, usage = usage, die = die })
USAGE = "baton job " .. table.concat(ORDER, "|") .. " ..."
for _, k in ipairs(ORDER) do
  USAGE = USAGE .. "\n       " .. USAGES[k]
end

return function(...)
  return A.dispatch("job", { ... }, { sub = sub, usages = USAGES, helps = HELPS, usage = USAGE,
    help = HELP, flags = FLAGS, fail = usage, select = function(what) current = what end })
end
