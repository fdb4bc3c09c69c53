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
local output = require "baton.output"
local keys = require "baton.keys"
local ops = require "baton.ops"

local format, concat = string.format, table.concat
local e = baton.etcd

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

-- The job's source kv, or false when there is none; nil, err on failure.
local function get_job(name)
  local r, err = e:get(keys.key(U.prefix(), "jobs", name))
  if not r then return nil, err end
  return r.kvs[1] or false, r.revision
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
  if spec then
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
  local deadline, failed = baton.monotime() + KILL_WAIT, false
  for _, t in ipairs(targets) do
    local rec
    while true do
      local g = e:get(keys.key(U.prefix(), "runs", name, t.id))
      rec = g and g.kvs[1] and U.decode_object(g.kvs[1].value)
      if rec and U.field(rec, "state") ~= "running" then break end
      if baton.monotime() > deadline then rec = nil; break end
      baton.sleep(0.1)
    end
    local state = rec and U.field(rec, "state")
    if state == "killed" then
      io.stdout:write(U.escape(format("killed run %s of job %s (%s)", t.id, name,
        tostring(U.field(rec, "error") or "killed"))), "\n")
    elseif state then
      failed = true
      io.stderr:write(U.escape(format("baton: job kill %s %s: the run ended %s before it could be stopped",
        name, t.id, tostring(state))), "\n")
    else
      failed = true
      io.stderr:write(U.escape(format("baton: job kill %s %s: asked to stop, but it is still running after %d s "
        .. "(it is recorded killed once its processes are gone)", name, t.id, KILL_WAIT)), "\n")
    end
  end
  baton.exit(failed and 1 or 0)
end

---------------------------------------------------------------------------
-- logs: a run's kept output

-- How a run ended, as the exit status of `job run --wait` and `job logs
-- -f` (docs/jobs.md): 0 only for a success. 1 and 2 are every command's
-- (baton could not ask etcd or follow the run; a usage error).
local EXIT = { succeeded = 0, failed = 3, timed_out = 4, killed = 5, skipped = 6, not_started = 7 }

-- The record of run id of job name (the newest run without id), as
-- (kv, rec, revision); or nil, err.
local function run_record(name, id)
  local pfx = keys.dir(U.prefix(), "runs", name)
  local r, err
  if id then
    r, err = e:get(pfx .. id)
  else
    r, err = e:get(pfx, { prefix = true, sort = "create", order = "desc", limit = 1 })
  end
  if not r then return nil, err end
  local kv = r.kvs[1]
  if not kv then
    local jkv, jerr = get_job(name)
    if jkv == nil then return nil, jerr end
    if not jkv then return nil, "ENOENT: no job " .. name .. " at " .. keys.key(U.prefix(), "jobs", name) end
    if id then return nil, "ENOENT: no run " .. id .. " of job " .. name .. " (see baton job history " .. name .. ")" end
    return nil, "ENOENT: job " .. name .. " has no runs yet"
  end
  return kv, U.decode_object(kv.value) or {}, r.revision
end

-- While a manual run of job name is requested (P trigger/<name>/...) and
-- not claimed: the record of the run claimed next, (kv, rec, revision).
-- false when none is requested; nil, err on failure.
local function wait_triggered(name)
  local tp, rp = keys.dir(U.prefix(), "trigger", name), keys.dir(U.prefix(), "runs", name)
  local r, err = e:get(tp, { prefix = true, count_only = true })
  if not r then return nil, err end
  if r.count == 0 then return false end
  local w, werr = e:watch(rp, { prefix = true, start_revision = r.revision + 1 })
  if not w then return nil, werr end
  io.stderr:write("baton: job logs " .. name .. ": waiting for a node to start the requested run\n")
  while true do
    local evs, _, code = w:next()
    if not evs and code ~= "ETIMEDOUT" then return nil, "watching the run records: " .. tostring(code) end
    for _, ev in ipairs(evs or {}) do
      if ev.type == "put" and ev.kv.version == 1 then
        w:cancel()
        return ev.kv, U.decode_object(ev.kv.value) or {}, ev.kv.mod_revision
      end
    end
  end
end

-- Final states: the run has ended for good.
local ENDED = { succeeded = true, failed = true, abandoned = true, skipped = true, killed = true,
                lost = true }

-- How the run (rec) ended, or (a given and not the run's last attempt, or
-- the run not ended) how attempt a ended: {what, state, node, started,
-- finished, error, attempt (nil for an attempt's end)}.
local function ending(rec, a)
  local x = { what = "run ended", state = U.field(rec, "state"), node = U.field(rec, "node"),
              started = U.field(rec, "started"), finished = U.field(rec, "finished"),
              error = U.field(rec, "error"), attempt = U.field(rec, "attempt") }
  if not ENDED[x.state] or (a and a ~= x.attempt) then
    x.what, x.attempt = "attempt " .. tostring(a) .. " ended", nil
    for _, at in ipairs(type(rec.attempts) == "table" and rec.attempts or {}) do
      if type(at) == "table" and at.attempt == a then
        x.state, x.node, x.started = U.field(at, "state"), U.field(at, "node"), U.field(at, "started")
        x.finished, x.error = U.field(at, "finished"), U.field(at, "error")
      end
    end
  end
  return x
end

-- The exit status of an ending (EXIT): a failure that is a timeout
-- ("timed out after 60 s") has its own; abandoned and lost runs are
-- failures.
local function exit_status(x)
  if x.state == "succeeded" then return EXIT.succeeded end
  if x.state == "killed" then return EXIT.killed end
  if x.state == "skipped" then return EXIT.skipped end
  if type(x.error) == "string" and x.error:find("^timed out") then return EXIT.timed_out end
  return EXIT.failed
end

-- The line that ends `logs -f`: how the run (or attempt a) ended, its
-- state in colour on a terminal.
local function end_line(rec, a)
  local x = ending(rec, a)
  local bits = {}
  if x.attempt then bits[#bits + 1] = "attempt " .. tostring(x.attempt) end
  if x.node then bits[#bits + 1] = "on " .. tostring(x.node) end
  if type(x.started) == "number" and type(x.finished) == "number" then
    bits[#bits + 1] = U.duration(x.finished - x.started)
  end
  local tail = #bits > 0 and (" (" .. concat(bits, " ") .. ")") or ""
  if x.error then tail = tail .. ": " .. tostring(x.error):gsub("\n", " ") end
  local st = U.escape(tostring(x.state or "?"))
  return "--- " .. U.escape(x.what) .. ": " .. U.paint(st, U.state_color(st)) .. U.escape(tail) .. " ---"
end

-- Prints the kept output of run (kv, rec at revision rev) of job name, its
-- last attempt unless opts.attempt; with follow, follows it live until it
-- ends and exits with its status (EXIT). label, when given, comes first
-- (a shard's header). Without follow, returns.
local function show_run(name, kv, rec, rev, opts, follow, label)
  local P = U.prefix()
  local _, id = keys.split(P, "runs", kv.key)
  local want = opts.attempt
  local last = tonumber(U.field(rec, "attempt")) or 0
  if want and want > last then
    return die("logs", name, format("ENOENT: run %s has no attempt %d (it has %d)", id, want, last))
  end
  local attempt = want or (last > 0 and last or 1)
  if label and not opts.json then io.stdout:write(label, "\n") end
  local shown = {} -- attempt -> the last line number printed
  local function emit(a, l)
    if opts.json then
      l.attempt = a
      if label then l.id = id end
      U.print_json(l)
    else
      io.stdout:write(U.escape(output.format(l)), "\n")
    end
  end
  -- Prints the lines of attempt a's chunk kvs not printed yet, with a
  -- marker where lines are missing (dropped by the cap).
  local function show(a, kvs)
    local n = shown[a] or 0
    local lines, _, cap = output.lines(kvs)
    for _, l in ipairs(lines) do
      if not l.dropped and l.n > n then
        if l.n > n + 1 then emit(a, { dropped = l.n - n - 1, cap = cap }) end
        emit(a, l)
        n = l.n
      end
    end
    shown[a] = n
    io.stdout:flush()
  end
  local function read(a, at)
    local r, err = e:get(keys.output(P, name, id, a), { prefix = true, revision = at })
    if not r then return die("logs", name, err) end
    return r.kvs, r.revision
  end
  -- The end of the run (or of the attempt followed): its line, then exit
  -- with its status.
  local function the_end(final)
    if opts.json then U.print_json { ["end"] = final } else io.stdout:write(end_line(final, want), "\n") end
    io.stdout:flush()
    baton.exit(exit_status(ending(final, want)))
  end
  show(attempt, (read(attempt, rev)))
  local state = U.field(rec, "state")
  if not follow then return end
  if (want and (want < last or state == "retrying")) or ENDED[state] then return the_end(rec) end

  -- Follow: the attempt's chunks as they are written, until the record
  -- says the run has ended (for good; a retry is followed into its next
  -- attempt unless --attempt was given). A record is written after its
  -- attempt's last chunk, so reading at the record's revision gets them
  -- all. Two watches feed it, each in its own coroutine, and what each
  -- saw may come before or after the other's; so each event is handled
  -- by serially, one at a time and in the order they came, even while
  -- one handler waits on etcd.
  local ow, oerr = e:watch(keys.output(P, name, id), { prefix = true, start_revision = rev + 1 })
  if not ow then return die("logs", name, oerr) end
  local rw, rerr = e:watch(kv.key, { start_revision = rev + 1 })
  if not rw then return die("logs", name, rerr) end
  local queue, draining = {}, false
  local function serially(fn)
    queue[#queue + 1] = fn
    if draining then return end
    draining = true
    while queue[1] do table.remove(queue, 1)() end
    draining = false
  end
  local closed = {} -- attempt -> its "ended; it runs again" line is printed
  -- Attempt a ended and the run goes on (nrec, a record written after
  -- that end, has it in attempts[]): its last lines, then how it ended.
  local function close(a, nrec)
    if closed[a] then return end
    closed[a] = true
    show(a, (read(a, nrec and nrec.revision)))
    if not opts.json then
      local x = ending(nrec and nrec.rec or {}, a)
      io.stdout:write(U.escape(format("--- attempt %d ended: %s; it runs again ---", a,
        (tostring(x.error or x.state or "failed"):gsub("\n", " ")))), "\n")
    end
  end
  -- A next attempt began (seen in its record or in its first chunk, which
  -- may come first): the end of the one before, its header and what it
  -- said so far.
  local function switch(a, nrec)
    if want or a <= attempt then return end
    close(attempt, nrec)
    attempt = a
    if not opts.json then
      local node = nrec and tonumber(U.field(nrec.rec, "attempt")) == a and U.field(nrec.rec, "node")
      io.stdout:write(U.escape(format("--- attempt %d%s ---", a, node and (" on " .. tostring(node)) or "")), "\n")
    end
    show(a, (read(a)))
  end
  local function on_record(ev)
    if ev.type == "delete" then
      io.stdout:write("--- the run's record was deleted ---\n")
      io.stdout:flush()
      return die("logs", name, "the record of run " .. id .. " was deleted before it ended")
    end
    local nrec = { rec = U.decode_object(ev.kv.value) or {}, revision = ev.kv.mod_revision }
    local st = U.field(nrec.rec, "state")
    local a = tonumber(U.field(nrec.rec, "attempt")) or attempt
    if ENDED[st] or (want and (a > want or st == "retrying")) then
      switch(a, nrec)
      show(attempt, (read(attempt, nrec.revision)))
      return the_end(nrec.rec)
    end
    if st == "retrying" and a == attempt then close(a, nrec) end
    switch(a, nrec)
  end
  local function on_output(ev)
    local a = ev.type == "put" and output.parse_key(P, name, id, ev.kv.key)
    if a and a > attempt then
      -- (its first chunk came before its record, on the other watch: the
      -- record, written with its claim, says which node runs it)
      local g = e:get(kv.key)
      local gkv = g and g.kvs[1]
      switch(a, gkv and { rec = U.decode_object(gkv.value) or {}, revision = gkv.mod_revision })
    end
    if a == attempt then show(a, { ev.kv }) end
  end
  local function follow_watch(w, what, handle)
    while true do
      local evs, _, code = w:next()
      if not evs then
        if code ~= "ETIMEDOUT" then return die("logs", name, what .. ": " .. tostring(code)) end
      else
        for _, ev in ipairs(evs) do serially(function() handle(ev) end) end
      end
    end
  end
  baton.go(follow_watch, rw, "watching the run record", on_record)
  follow_watch(ow, "watching the output", on_output)
end

-- The shards of a sharded instant (its runs INSTANT/1, INSTANT/2, ...),
-- in order: a list of {kv, rec}, and the revision read at; or nil, err.
local function shard_records(name, instant)
  local pfx = keys.dir(U.prefix(), "runs", name, instant)
  local r, err = e:get(pfx, { prefix = true })
  if not r then return nil, err end
  local list = {}
  for _, kv in ipairs(r.kvs) do
    local i = tonumber(keys.under(pfx, kv.key):match("^(%d+)$"))
    if i then list[#list + 1] = { i = i, kv = kv, rec = U.decode_object(kv.value) or {} } end
  end
  table.sort(list, function(a, b) return a.i < b.i end)
  return list, r.revision
end

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
    kv, rec, rev = wait_triggered(name)
    if kv == nil then return die("logs", name, rec) end
  end
  if not kv then kv, rec, rev = run_record(name, pos[3]) end
  if not kv then return die("logs", name, rec) end
  local _, id = keys.split(U.prefix(), "runs", kv.key)
  local instant = not pos[3] and id:match("^(.+)/%d+$")
  if instant then
    -- The newest run is a shard of a sharded instant: all its shards, each
    -- under its own header; one of them to follow or to pick an attempt of.
    local list, at = shard_records(name, instant)
    if not list then return die("logs", name, at) end
    local ids = {}
    for _, s in ipairs(list) do ids[#ids + 1] = instant .. "/" .. s.i end
    if follow or opts.attempt then
      return usage(format("the newest run of job %s is instant %s, in %d shards: %s one of them by its ID (%s)",
        name, instant, #list, follow and "follow" or "pick an attempt of", concat(ids, ", ")))
    end
    for k, s in ipairs(list) do
      if k > 1 and not opts.json then io.stdout:write("\n") end
      local x = ending(s.rec)
      local head = format("=== shard %d of %d: %s, %s%s ===", s.i, #list, ids[k], tostring(x.state or "?"),
        x.node and (" on " .. tostring(x.node)) or "")
      show_run(name, s.kv, s.rec, at, opts, false, U.escape(head))
    end
    return baton.exit(0)
  end
  show_run(name, kv, rec, rev, opts, follow)
  baton.exit(0)
end

-- How long `job run --wait` waits for a node to start the run, unless
-- --start-timeout says.
local START_TIMEOUT = 60

-- The record of the manual run r (what ops.run_job returned) of job
-- name, once a node has claimed it (or recorded it skipped): (kv, rec,
-- revision). If none has within secs seconds, the request is withdrawn
-- (unless a node takes it at that moment): nil, why.
local function wait_claimed(name, r, secs)
  local rkey = keys.key(U.prefix(), "runs", name, r.id)
  local g, err = e:get(rkey)
  if not g then return nil, err end
  if g.kvs[1] then return g.kvs[1], U.decode_object(g.kvs[1].value) or {}, g.revision end
  local w, werr = e:watch(rkey, { start_revision = g.revision + 1 })
  if not w then return nil, werr end
  local deadline, withdrawn = baton.monotime() + secs, false
  while true do
    local left = deadline - baton.monotime()
    if left <= 0 then
      if withdrawn then
        w:cancel()
        return nil, format("ETIMEDOUT: the request was taken but no record of run %s came", r.id)
      end
      -- Withdraw the request, unless a node took it meanwhile (the claim
      -- deletes it in the transaction that writes the record).
      local t, terr = e:txn { compare = { { key = r.key, target = "create", op = ">", value = 0 } },
                              success = { { delete = { key = r.key } } },
                              failure = { { get = { key = rkey } } } }
      if not t then return nil, terr end
      if t.succeeded then
        w:cancel()
        return nil, format("ETIMEDOUT: no node started run %s within %g s; the request was withdrawn "
          .. "(baton job show %s says which nodes loaded the job; --start-timeout S waits longer)", r.id, secs, name)
      end
      local rk = t.responses[1].kvs[1]
      if rk then
        w:cancel()
        return rk, U.decode_object(rk.value) or {}, t.revision
      end
      -- (gone, and no record: removed with the job, or a record on its way)
      withdrawn, deadline = true, baton.monotime() + 5
    else
      local evs, _, code = w:next(math.min(left, 1))
      if not evs and code ~= "ETIMEDOUT" then return nil, "watching the run record: " .. tostring(code) end
      for _, ev in ipairs(evs or {}) do
        if ev.type == "put" then
          w:cancel()
          return ev.kv, U.decode_object(ev.kv.value) or {}, ev.kv.mod_revision
        end
      end
    end
  end
end

function sub.run(pos, opts)
  local name = one_name("run", pos)
  local given = given_params(opts.param)
  if opts["start-timeout"] and not opts.wait then return usage("--start-timeout goes with --wait") end
  local r, err, code = ops.run_job(name, { params = given, force = opts.force or false })
  if not r then
    -- (--wait: a run that cannot start, no live node having the job's
    -- labels, has the status of one that did not)
    return die("run", name, err, opts.wait and code == "ECONFLICT" and EXIT.not_started or nil)
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
  local kv, rec, rev = wait_claimed(name, r, opts["start-timeout"] or START_TIMEOUT)
  if not kv then
    return die("run", name, rec, tostring(rec):find("^ETIMEDOUT: no node started") and EXIT.not_started or nil)
  end
  return show_run(name, kv, rec, rev, opts, true)
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
