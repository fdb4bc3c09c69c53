-- baton job put|ls|show|rm|run|kill|pause|resume|history|logs (design.md
-- sections 4 and 9). Everything here reads and writes etcd keys under the
-- prefix; the node does the scheduling.
--
--   P jobs/<name>                      the job's Lua source
--   P paused/<name>                    present while paused
--   P status/<name>/<node>             JSON {revision=, error=, running=, time=} a
--                                      node writes (running: the revision it
--                                      still runs when `revision` was rejected)
--   P runs/<name>/<instant>[/<shard>]  JSON run records
--   P running/<name>/<id>              present while an attempt of the run executes
--   P trigger/<name>/<id>              manual-run requests (see request_run)
--   P cancel/<name>/<id>               a request to stop a run (baton job kill)
--   P output/<name>/<id>/@<attempt>/<chunk>  a run's kept output (node/output.lua)
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"
local job = require "baton.job"
local runs_mod = require "baton.node.runs"
local policy = require "baton.policy"
local events = require "baton.events"
local cycles = require "baton.cli.cycles"
local output = require "baton.node.output"

local format, concat = string.format, table.concat
local e = baton.etcd

local USAGES = {
  put = "baton job put FILE.lua [--name NAME]",
  ls = "baton job ls [--json]",
  show = "baton job show NAME [--json]",
  rm = "baton job rm NAME [--purge]",
  run = "baton job run NAME [--force] [--param k=v ...]",
  kill = "baton job kill NAME [ID]",
  pause = "baton job pause NAME",
  resume = "baton job resume NAME",
  history = "baton job history NAME [-n N] [--json]",
  logs = "baton job logs NAME [ID] [--attempt N] [-f] [--json]",
}
local ORDER = { "put", "ls", "show", "rm", "run", "kill", "pause", "resume", "history", "logs" }
local USAGE = "baton job put|ls|show|rm|run|kill|pause|resume|history|logs ..."
for _, k in ipairs(ORDER) do
  USAGE = USAGE .. "\n       " .. USAGES[k]
end
-- What --help says after the usage line.
local HELPS = {
  put = [[Validates FILE.lua as baton check does, refuses a policy that is neither
stored nor built in and a file over etcd's request limit, then stores the
source at <prefix>jobs/NAME (default NAME: the file's base name). Warns when
no live node has the job's labels.]],
  ls = "One line per job: schedule, zone, next instant, state, last run.",
  show = "The job's spec, the revision each node loaded (or its error), the last 10 runs.",
  rm = "Deletes the job, its paused flag, node statuses and triggers; --purge also its run records.",
  run = [[Asks for one run now, honouring the job's concurrency unless --force. Each
--param k=v sets ctx.params.k for this run; the job must declare k in its
params table, whose values are the defaults. Refused when no live node can
run the job.]],
  kill = [[Stops a running run of the job (without ID: every running run of it):
ctx:cancelled() turns true and its processes get SIGTERM, then after the
node's grace period every process of the run is killed. The run is recorded
killed, by $USER@host, and is not retried or run again.]],
  pause = "No new instants of the job until resume (runs already started finish).",
  resume = "The job fires again from its next instant.",
  history = "Run records, newest first (default 20): id, node, attempt, state, duration, error.",
  logs = [[Prints the kept output of the job's newest run (or run ID), its last
attempt unless --attempt N. -f follows a running run live, through an etcd
watch, and ends with the run's final state; --json prints one object a line.]],
}
local HELP = "Jobs stored under <prefix>jobs/. baton job SUBCOMMAND --help says more."
local current -- the subcommand being run, for its usage line
local NAME_RULE = U.NAME_RULE

local function die(sub, what, err) return A.die("job " .. sub .. (what and (" " .. what) or "") .. ": " .. err) end
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
  local r, err = e:get(U.key("jobs", name))
  if not r then return nil, err end
  return r.kvs[1] or false, r.revision
end

-- The error for a job that is not there, with a hint when the prefix holds
-- no job at all (the usual reason: another --prefix or BATON_PREFIX).
local function no_job(name)
  local msg = "ENOENT: no job " .. name .. " at " .. U.key("jobs", name)
  local r = e:get(U.key("jobs") .. "/", { prefix = true, count_only = true })
  if r and r.count == 0 then
    msg = msg .. " (there are no jobs under " .. U.key("jobs") .. "/ at all; is --prefix right?)"
  end
  return msg
end

---------------------------------------------------------------------------
-- reading state

-- Status records of one job: list of {node=, revision=, error=, time=}.
local function statuses(name)
  local r, err = e:get(U.key("status", name) .. "/", { prefix = true })
  if not r then return nil, err end
  local list = {}
  local pl = #U.key("status", name) + 2
  for _, kv in ipairs(r.kvs) do
    local v = U.decode_object(kv.value) or { error = "unreadable status: " .. kv.value }
    list[#list + 1] = {
      node = kv.key:sub(pl), revision = U.field(v, "revision"),
      error = U.field(v, "error"), time = U.field(v, "time"), running = U.field(v, "running"),
    }
  end
  return list
end

-- Run records of one job, newest instant first, at most n (nil: all).
local function runs(name, n)
  local pfx = U.key("runs", name) .. "/"
  local r, err = e:get(pfx, { prefix = true, sort = "key", order = "desc", limit = n })
  if not r then return nil, err end
  local list = {}
  for _, kv in ipairs(r.kvs) do
    local v = U.decode_object(kv.value) or { state = "unreadable", error = kv.value }
    v.key = kv.key:sub(#pfx + 1)
    list[#list + 1] = v
  end
  return list
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

---------------------------------------------------------------------------
-- subcommands

local sub = {}

-- nil if the job's policy exists (built in, or stored under P policies/),
-- else the message refusing it, with the closest known name.
local function unknown_policy(spec)
  if policy.builtin(spec.policy) then return nil end
  local pfx = U.key("policies") .. "/"
  local r, err = e:get(pfx, { prefix = true, keys_only = true })
  if not r then return err end
  local known = {}
  for _, n in ipairs(policy.BUILTINS) do known[#known + 1] = n end
  for _, kv in ipairs(r.kvs) do
    local n = kv.key:sub(#pfx + 1)
    if n == spec.policy then return nil end
    known[#known + 1] = n
  end
  local hint = job.did_you_mean(spec.policy, known)
  return format("EINVAL: job %s: field 'policy': no policy %q: none is stored at %s%s nor built in%s",
    spec.name, spec.policy, pfx, spec.policy, hint and format(" (did you mean %q?)", hint)
      or "; baton policy ls lists them")
end

function sub.put(pos, opts)
  local name, source, file = U.put_args(pos, opts, "job", usage, die)
  local spec, verr = job.load(source, name, nil, file)
  if not spec then return die("put", file, verr) end
  local perr0 = unknown_policy(spec)
  if perr0 then return die("put", file, perr0) end
  local cerr, rerr = cycles.check(name, spec)
  if cerr or rerr then return die("put", file, cerr or rerr) end
  local key = U.key("jobs", name)
  local r, perr = e:put(key, source, { prev_kv = true })
  if not r then return die("put", name, perr) end
  io.stdout:write(format("%s job %s at %s (revision %d)\n",
    r.prev_kv and "updated" or "created", name, key, r.revision))
  io.stdout:flush()
  local nodes = U.live_nodes()
  local why = nodes and U.no_eligible_node(spec.labels, nodes)
  if why then
    io.stderr:write(format("baton: job put %s: warning: %s; the job runs only once such a node is up\n",
      name, why))
  end
  baton.exit(0)
end

-- The row (and JSON) describing one stored job for ls and show, and the
-- spec it shows. For a broken job that the nodes still run an earlier
-- version of (their status says which: running), that version's schedule
-- and next instant are shown, with d.running_revision.
local function describe(name, kv, paused, status_list)
  local spec, verr = job.load(kv.value, name, kv.mod_revision)
  local d = {
    name = name, revision = kv.mod_revision, paused = paused or false, broken = false,
  }
  if not spec then d.broken, d.error = true, verr end
  local running
  for _, st in ipairs(status_list or {}) do
    if st.error then d.broken, d.error = true, d.error or (st.node .. ": " .. tostring(st.error)) end
    local rr = st.running
    if type(rr) == "number" and rr ~= kv.mod_revision and (not running or rr > running) then running = rr end
  end
  if d.broken and running then
    local old = e:get(kv.key, { revision = running })
    local okv = old and old.kvs[1]
    local ospec = okv and job.load(okv.value, name, okv.mod_revision)
    if ospec then spec, d.running_revision = ospec, running end
  end
  if spec then
    d.schedule, d.queue, d.timezone = spec.schedule, spec.queue, spec.timezone
    d.on = spec.on
    local nf = job.next_fires(spec, 1)[1]
    if nf and not paused then d.next = U.rfc3339(nf, spec.cron) end
  end
  return d, spec
end

-- The STATE column of a job.
local function state_text(d)
  local s = d.broken and (d.paused and "broken,paused" or "broken") or (d.paused and "paused" or "active")
  if d.running_revision then s = s .. format(" (runs rev %d)", d.running_revision) end
  return s
end

function sub.ls(pos, opts)
  if pos[2] then return usage("unexpected argument \"" .. pos[2] .. "\"") end
  local jpfx, ppfx, spfx = U.key("jobs") .. "/", U.key("paused") .. "/", U.key("status") .. "/"
  local jr, err = e:get(jpfx, { prefix = true, sort = "key", order = "asc" })
  if not jr then return die("ls", nil, err) end
  local pr, perr = e:get(ppfx, { prefix = true, keys_only = true, revision = jr.revision })
  if not pr then return die("ls", nil, perr) end
  local sr, serr = e:get(spfx, { prefix = true, revision = jr.revision })
  if not sr then return die("ls", nil, serr) end
  local paused, status = {}, {}
  for _, kv in ipairs(pr.kvs) do paused[kv.key:sub(#ppfx + 1)] = true end
  for _, kv in ipairs(sr.kvs) do
    local jname, node = kv.key:sub(#spfx + 1):match("^([^/]+)/(.+)$")
    if jname then
      local v = U.decode_object(kv.value) or {}
      status[jname] = status[jname] or {}
      table.insert(status[jname], { node = node, error = U.field(v, "error"), running = U.field(v, "running") })
    end
  end
  local list, rows = {}, {}
  for _, kv in ipairs(jr.kvs) do
    local name = kv.key:sub(#jpfx + 1)
    local d = describe(name, kv, paused[name], status[name])
    local last = runs(name, 1)
    if last and last[1] then
      d.last = { run = last[1].key, state = U.field(last[1], "state") }
    end
    list[#list + 1] = d
    rows[#rows + 1] = {
      name, d.schedule or (d.queue and "queue:" .. d.queue) or (d.on and "on:" .. events.describe(d.on, true)) or "-",
      d.timezone or "-", d.next or "-", state_text(d), d.last and (tostring(d.last.state) .. " " .. d.last.run) or "-",
    }
  end
  if #list == 0 and not opts.json then
    io.stderr:write("baton: job ls: no jobs under ", jpfx, " (is --prefix right?)\n")
  end
  if opts.json then
    U.print_json(baton.json.array(list))
  else
    U.print_table({ "NAME", "SCHEDULE", "TIMEZONE", "NEXT", "STATE", "LAST RUN" }, rows)
  end
  baton.exit(0)
end

function sub.show(pos, opts)
  local name = one_name("show", pos)
  local kv, err = get_job(name)
  if kv == nil then return die("show", name, err) end
  if not kv then return die("show", name, no_job(name)) end
  local pr, perr = e:get(U.key("paused", name))
  if not pr then return die("show", name, perr) end
  local st, serr = statuses(name)
  if not st then return die("show", name, serr) end
  local rs, rerr = runs(name, 10)
  if not rs then return die("show", name, rerr) end
  local d, spec = describe(name, kv, pr.count > 0, st)

  if opts.json then
    U.print_json {
      name = name, key = kv.key, revision = kv.mod_revision, created_revision = kv.create_revision,
      version = kv.version, paused = d.paused, broken = d.broken, error = d.error,
      running_revision = d.running_revision,
      spec = spec and job.summary(spec) or baton.json.null,
      next = spec and baton.json.array((function()
        local t = {}
        for i, f in ipairs(d.paused and {} or job.next_fires(spec, 5)) do t[i] = U.rfc3339(f, spec.cron) end
        return t
      end)()) or baton.json.array {},
      status = baton.json.array(st), runs = baton.json.array(rs),
    }
    return baton.exit(0)
  end

  local f = {
    { "job", name },
    { "key", format("%s (revision %d, version %d)", kv.key, kv.mod_revision, kv.version) },
  }
  if d.running_revision then
    f[#f + 1] = { "running", format("revision %d, the last good version (what follows is its spec)",
      d.running_revision) }
  end
  if spec then
    if spec.description then f[#f + 1] = { "description", spec.description } end
    if spec.on then f[#f + 1] = { "on", events.describe(spec.on) } end
    if spec.queue then
      f[#f + 1] = { "queue", spec.queue .. " (" .. U.key("queue", spec.queue) .. "/)" }
    elseif not spec.schedule then
      f[#f + 1] = { "schedule", "- (runs on events, and when triggered)" }
    else
      f[#f + 1] = { "schedule", format("%s (%s)", spec.schedule, spec.timezone) }
      f[#f + 1] = { "next", d.paused and "- (paused)" or (d.next or "- (only when triggered)") }
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
  end
  f[#f + 1] = { "paused", d.paused and "yes" or "no" }
  if d.error then f[#f + 1] = { "error", d.error } end
  U.print_fields(f)

  io.stdout:write("\nnodes:\n")
  if #st == 0 then
    io.stdout:write("  (no node has reported loading it)\n")
  else
    local rows = {}
    for _, s in ipairs(st) do
      local loaded = s.revision and tostring(s.revision) or "-"
      if s.revision and s.revision ~= kv.mod_revision then loaded = loaded .. " (stale)" end
      rows[#rows + 1] = { "  " .. s.node, loaded, s.error and tostring(s.error):gsub("\n", " ") or "ok" }
    end
    U.print_table({ "  NODE", "REVISION", "STATUS" }, rows)
  end
  io.stdout:write("\nlast runs:\n")
  if #rs == 0 then
    io.stdout:write("  (none)\n")
  else
    local rows = {}
    for _, rec in ipairs(rs) do
      local row = run_row(rec)
      row[1] = "  " .. row[1]
      rows[#rows + 1] = row
    end
    local h = { unpack(RUN_HEADER) }
    h[1] = "  " .. h[1]
    U.print_table(h, rows)
  end
  baton.exit(0)
end

function sub.history(pos, opts)
  local name = one_name("history", pos)
  local rs, err = runs(name, opts.n or 20)
  if not rs then return die("history", name, err) end
  if #rs == 0 then
    -- (the records of a removed job stay: only no job and no records is an error)
    local kv, jerr = get_job(name)
    if kv == nil then return die("history", name, jerr) end
    if not kv then return die("history", name, no_job(name)) end
    if not opts.json then
      io.stderr:write("baton: job history ", name, ": no runs of job ", name, " yet\n")
    end
  end
  if opts.json then
    local list = {}
    for i, rec in ipairs(rs) do list[i] = rec end
    U.print_json(baton.json.array(list))
  else
    local rows = {}
    for _, rec in ipairs(rs) do rows[#rows + 1] = run_row(rec) end
    U.print_table(RUN_HEADER, rows)
  end
  baton.exit(0)
end

function sub.rm(pos, opts)
  local name = one_name("rm", pos)
  local jkey = U.key("jobs", name)
  local ops = {
    { delete = { key = jkey } },
    { delete = { key = U.key("paused", name) } },
    { delete = { key = U.key("status", name) .. "/", prefix = true } },
    { delete = { key = U.key("trigger", name) .. "/", prefix = true } },
  }
  -- Events waiting for the job (pending/ entries with an event id, which
  -- have no record yet) go with it; pending retries of runs that have a
  -- record stay, so those runs are still ended (abandoned) by a node.
  local pend = U.key("pending", name) .. "/"
  local pr, perr = e:get(pend, { prefix = true, keys_only = true })
  if not pr then return die("rm", name, perr) end
  for _, kv in ipairs(pr.kvs) do
    if kv.key:sub(#pend + 1):find("~", 1, true) then ops[#ops + 1] = { delete = { key = kv.key } } end
  end
  if opts.purge then
    ops[#ops + 1] = { delete = { key = U.key("output", name) .. "/", prefix = true } }
    ops[#ops + 1] = { delete = { key = U.key("runs", name) .. "/", prefix = true } }
  end
  local r, err = e:txn {
    compare = { { key = jkey, target = "create", op = ">", value = 0 } },
    success = ops,
  }
  if not r then return die("rm", name, err) end
  if not r.succeeded then return die("rm", name, "ENOENT: no job " .. name .. " at " .. jkey) end
  local n = opts.purge and r.responses[#ops].deleted or 0
  io.stdout:write(format("removed job %s%s\n", name,
    opts.purge and format(" and its %d run records", n) or " (run history kept; --purge removes it)"))
  baton.exit(0)
end

-- Sets or clears the paused flag of an existing job.
local function set_paused(sub_name, pos, paused)
  local name = one_name(sub_name, pos)
  local jkey, pkey = U.key("jobs", name), U.key("paused", name)
  local op = paused
    and { put = { key = pkey, value = baton.json.encode { at = baton.now() } } }
    or { delete = { key = pkey } }
  local r, err = e:txn {
    compare = { { key = jkey, target = "create", op = ">", value = 0 } },
    success = { { get = { key = pkey, keys_only = true } }, op },
  }
  if not r then return die(sub_name, name, err) end
  if not r.succeeded then return die(sub_name, name, "ENOENT: no job " .. name .. " at " .. jkey) end
  local was = r.responses[1].count > 0
  if paused then
    io.stdout:write(was and format("job %s was already paused\n", name) or format("paused job %s\n", name))
  else
    io.stdout:write(was and format("resumed job %s\n", name) or format("job %s was not paused\n", name))
  end
  baton.exit(0)
end

function sub.pause(pos) return set_paused("pause", pos, true) end
function sub.resume(pos) return set_paused("resume", pos, false) end

-- The manual-trigger mechanism, kept in this one function until the node
-- decides its final form: a request key P trigger/<job>/<ms>-<rand> with
-- {force=, at=, params=}; the node consumes (and deletes) it and claims the
-- run U.manual_id(at). Returns the key and that run id, or nil, err; ENOENT
-- if there is no such job.
local function request_run(name, force, params)
  local jkey = U.key("jobs", name)
  local key = U.key("trigger", name, U.time_id())
  local value = baton.json.encode { force = force, at = baton.now(), params = params }
  local r, err = e:txn {
    compare = { { key = jkey, target = "create", op = ">", value = 0 } },
    success = { { put = { key = key, value = value } } },
  }
  if not r then return nil, err end
  if not r.succeeded then return nil, no_job(name) end
  -- (the id from `at` as the node will decode it)
  return key, U.manual_id(baton.json.decode(value).at)
end

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

function sub.run(pos, opts)
  local name = one_name("run", pos)
  local given = given_params(opts.param)
  local kv, err = get_job(name)
  if kv == nil then return die("run", name, err) end
  if not kv then return die("run", name, no_job(name)) end
  local st = statuses(name) or {}
  local _, spec = describe(name, kv, false, st)
  if not spec then
    -- Neither this version nor one a node runs loads: nothing can run.
    return die("run", name, select(2, job.load(kv.value, name)) .. "; nothing was queued")
  end
  local known = U.sorted_keys(spec.params)
  for _, k in ipairs(U.sorted_keys(given)) do
    if spec.params[k] == nil then
      local hint = job.did_you_mean(k, known)
      return die("run", name, format("EINVAL: unknown parameter \"%s\"%s; %s", k,
        hint and format(" (did you mean \"%s\"?)", hint) or "",
        #known > 0 and "the job's parameters are " .. concat(known, ", ")
          or "the job declares no params"))
    end
  end
  local nodes, nerr = U.live_nodes()
  if not nodes then return die("run", name, nerr) end
  local why = U.no_eligible_node(spec.labels, nodes)
  if why then return die("run", name, why .. "; nothing was queued") end
  local key, id = request_run(name, opts.force or false, next(given) and given or nil)
  if not key then return die("run", name, id) end
  local p = {}
  for _, k in ipairs(U.sorted_keys(given)) do p[#p + 1] = format("%s=%q", k, given[k]) end
  io.stdout:write(format("queued a manual run of %s%s (%s): run %s%s; a live node will start it\n", name,
    opts.force and " (--force: ignoring concurrency)" or "", key, id,
    #p > 0 and (", params " .. concat(p, " ")) or ""))
  baton.exit(0)
end

-- The runs of job name that baton job kill stops: {id=, node=, attempt=}
-- for the run id, or for every run of the job with an attempt executing
-- (a running/ marker). Dies when there is none.
local function kill_targets(name, id)
  local mpfx = U.key("running", name) .. "/"
  local what = id and (name .. " " .. id) or name
  if not id then
    local r, err = e:get(mpfx, { prefix = true })
    if not r then return die("kill", what, err) end
    if #r.kvs == 0 then
      local kv = get_job(name)
      if kv == false then return die("kill", what, no_job(name)) end
      return die("kill", what, "no run of job " .. name .. " is running (baton job history " .. name
        .. " lists its runs)")
    end
    local list = {}
    for _, mkv in ipairs(r.kvs) do
      local m = U.decode_object(mkv.value) or {}
      list[#list + 1] = { id = mkv.key:sub(#mpfx + 1), node = U.field(m, "node"), attempt = U.field(m, "attempt") }
    end
    return list
  end
  local r, err = e:txn { success = { { get = { key = mpfx .. id } }, { get = { key = U.key("runs", name, id) } } } }
  if not r then return die("kill", what, err) end
  local mkv, rkv = r.responses[1].kvs[1], r.responses[2].kvs[1]
  if mkv then
    local m = U.decode_object(mkv.value) or {}
    return { { id = id, node = U.field(m, "node"), attempt = U.field(m, "attempt") } }
  end
  if not rkv then
    local kv = get_job(name)
    if kv == false then return die("kill", what, no_job(name)) end
    return die("kill", what, format("ENOENT: no run %s of job %s (baton job history %s lists its runs)",
      id, name, name))
  end
  local state = U.field(U.decode_object(rkv.value) or {}, "state")
  if state == "running" then
    return die("kill", what, format("run %s of job %s is not running on any node: its node is gone "
      .. "and the run is being handed over; try again in a moment", id, name))
  end
  return die("kill", what, format("run %s of job %s is not running: it is %s", id, name, tostring(state)))
end

-- How long baton job kill waits for a run to end: the node's grace period
-- (5 s) and the time its processes take to go, with room to spare.
local KILL_WAIT = 30

function sub.kill(pos)
  local name, id = pos[2], pos[3]
  if not name then return usage("needs a NAME") end
  if pos[4] then return usage("unexpected argument \"" .. pos[4] .. "\"") end
  if not job.valid_name(name) then return usage(format("invalid job name \"%s\" (%s)", name, NAME_RULE)) end
  local targets = kill_targets(name, id)
  local who = U.who()
  local value = runs_mod.cancel_value("killed by " .. who, who)
  for _, t in ipairs(targets) do
    local k = runs_mod.keys(U.prefix(), name, t.id)
    -- only while the attempt executes: a run that ended keeps no request
    local r, err = e:txn {
      compare = { { key = k.marker, target = "create", op = ">", value = 0 } },
      success = { { put = { key = k.cancel, value = value } } },
    }
    if not r then return die("kill", name .. " " .. t.id, err) end
    -- (when the attempt ended meanwhile, its record says how, below)
    if r.succeeded then
      io.stdout:write(format("stopping run %s of job %s on node %s (attempt %s)\n", t.id, name,
        tostring(t.node or "?"), tostring(t.attempt or "?")))
    end
  end
  io.stdout:flush()
  -- Wait for the records to say how each run ended.
  local deadline, failed = baton.monotime() + KILL_WAIT, false
  for _, t in ipairs(targets) do
    local rec
    while true do
      local r = e:get(U.key("runs", name, t.id))
      rec = r and r.kvs[1] and U.decode_object(r.kvs[1].value)
      if rec and U.field(rec, "state") ~= "running" then break end
      if baton.monotime() > deadline then rec = nil; break end
      baton.sleep(0.1)
    end
    local state = rec and U.field(rec, "state")
    if state == "killed" then
      io.stdout:write(format("killed run %s of job %s (%s)\n", t.id, name,
        tostring(U.field(rec, "error") or "killed")))
    elseif state then
      failed = true
      io.stderr:write(format("baton: job kill %s %s: the run ended %s before it could be stopped\n",
        name, t.id, state))
    else
      failed = true
      io.stderr:write(format("baton: job kill %s %s: asked to stop, but it is still running after %d s "
        .. "(it is recorded killed once its processes are gone)\n", name, t.id, KILL_WAIT))
    end
  end
  baton.exit(failed and 1 or 0)
end

---------------------------------------------------------------------------
-- logs: a run's kept output

-- The record of run id of job name (the newest run without id), as
-- (kv, rec, revision); or nil, err.
local function run_record(name, id)
  local pfx = U.key("runs", name) .. "/"
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
    if not jkv then return nil, "ENOENT: no job " .. name .. " at " .. U.key("jobs", name) end
    if id then return nil, "ENOENT: no run " .. id .. " of job " .. name .. " (see baton job history " .. name .. ")" end
    return nil, "ENOENT: job " .. name .. " has no runs yet"
  end
  return kv, U.decode_object(kv.value) or {}, r.revision
end

-- While a manual run of job name is requested (P trigger/<name>/...) and
-- not claimed: the record of the run claimed next, (kv, rec, revision).
-- false when none is requested; nil, err on failure.
local function wait_triggered(name)
  local tp, rp = U.key("trigger", name) .. "/", U.key("runs", name) .. "/"
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

-- The line that ends `logs -f`: how the run ended, or (a given and not
-- the run's last attempt, or the run not ended) how attempt a ended.
local function end_line(rec, a)
  local st, node = U.field(rec, "state"), U.field(rec, "node")
  local started, finished, err = U.field(rec, "started"), U.field(rec, "finished"), U.field(rec, "error")
  local what, n = "run ended", U.field(rec, "attempt")
  if not ENDED[st] or (a and a ~= n) then
    what, n = "attempt " .. tostring(a) .. " ended", nil
    for _, at in ipairs(type(rec.attempts) == "table" and rec.attempts or {}) do
      if type(at) == "table" and at.attempt == a then
        st, node, started, finished = U.field(at, "state"), U.field(at, "node"), U.field(at, "started"), U.field(at, "finished")
        err = U.field(at, "error")
      end
    end
  end
  local bits = {}
  if n then bits[#bits + 1] = "attempt " .. tostring(n) end
  if node then bits[#bits + 1] = "on " .. tostring(node) end
  if type(started) == "number" and type(finished) == "number" then
    bits[#bits + 1] = U.duration(finished - started)
  end
  local s = format("--- %s: %s", what, tostring(st or "?"))
  if #bits > 0 then s = s .. " (" .. concat(bits, " ") .. ")" end
  if err then s = s .. ": " .. tostring(err):gsub("\n", " ") end
  return s .. " ---"
end

function sub.logs(pos, opts)
  local name = pos[2]
  if not name then return usage("needs a NAME") end
  if pos[4] then return usage("unexpected argument \"" .. pos[4] .. "\"") end
  if not job.valid_name(name) then
    return usage(format("invalid job name \"%s\" (%s)", name, NAME_RULE))
  end
  local follow, P = opts.f or opts.follow, U.prefix()
  local kv, rec, rev
  if follow and not pos[3] then
    -- `job run NAME && job logs NAME -f`: a manual run asked for and not
    -- claimed yet is the run to follow, once a node has claimed it.
    kv, rec, rev = wait_triggered(name)
    if kv == nil then return die("logs", name, rec) end
  end
  if not kv then kv, rec, rev = run_record(name, pos[3]) end
  if not kv then return die("logs", name, rec) end
  local id = kv.key:sub(#U.key("runs", name) + 2)
  local want = opts.attempt
  local last = tonumber(U.field(rec, "attempt")) or 0
  if want and want > last then
    return die("logs", name, format("ENOENT: run %s has no attempt %d (it has %d)", id, want, last))
  end
  local attempt = want or (last > 0 and last or 1)
  local shown = {} -- attempt -> the last line number printed
  local function emit(l)
    if opts.json then
      l.attempt = attempt
      U.print_json(l)
    else
      io.stdout:write(output.format(l), "\n")
    end
  end
  -- Prints the lines of the attempt's chunk kvs not printed yet, with a
  -- marker where lines are missing (dropped by the cap).
  local function show(kvs)
    local n = shown[attempt] or 0
    local lines, _, cap = output.lines(kvs)
    for _, l in ipairs(lines) do
      if not l.dropped and l.n > n then
        if l.n > n + 1 then emit { dropped = l.n - n - 1, cap = cap } end
        emit(l)
        n = l.n
      end
    end
    shown[attempt] = n
    io.stdout:flush()
  end
  local function read(a, at)
    local r, err = e:get(output.attempt_prefix(P, name, id, a), { prefix = true, revision = at })
    if not r then return die("logs", name, err) end
    return r.kvs, r.revision
  end
  local kvs = read(attempt, rev)
  show(kvs)
  local state = U.field(rec, "state")
  if not follow or (want and (want < last or state == "retrying")) or ENDED[state] then
    if follow then
      if opts.json then U.print_json { ["end"] = rec } else io.stdout:write(end_line(rec, attempt), "\n") end
    end
    return baton.exit(0)
  end

  -- Follow: the attempt's chunks as they are written, until the record
  -- says the run has ended (for good; a retry is followed into its next
  -- attempt unless --attempt was given). The record is written after the
  -- attempt's last chunk, so reading at the record's revision gets them all.
  local ow, oerr = e:watch(output.run_prefix(P, name, id), { prefix = true, start_revision = rev + 1 })
  if not ow then return die("logs", name, oerr) end
  local rw, rerr = e:watch(kv.key, { start_revision = rev + 1 })
  if not rw then return die("logs", name, rerr) end
  local ended
  -- A next attempt began (seen in its record or in its first chunk, which
  -- may come first): print its header and what it said so far.
  local function switch(a, node)
    if want or a <= attempt then return end
    attempt = a
    if not opts.json then
      io.stdout:write(format("--- attempt %d%s ---\n", a, node and (" on " .. tostring(node)) or ""))
    end
    show((read(attempt)))
  end
  local function finish(final)
    local fkvs = read(attempt, final.revision)
    show(fkvs)
    if opts.json then U.print_json { ["end"] = final.rec } else io.stdout:write(end_line(final.rec, attempt), "\n") end
    io.stdout:flush()
    baton.exit(0)
  end
  baton.go(function()
    while true do
      local evs, _, code = rw:next()
      if not evs then
        if code ~= "ETIMEDOUT" then return die("logs", name, "watching the run record: " .. tostring(code)) end
      else
        for _, ev in ipairs(evs) do
          if ev.type == "delete" then
            io.stdout:write("--- the run's record was deleted ---\n")
            return baton.exit(0)
          end
          local nrec = U.decode_object(ev.kv.value) or {}
          local st = U.field(nrec, "state")
          local a = tonumber(U.field(nrec, "attempt")) or attempt
          if ENDED[st] or (want and (a > want or st == "retrying")) then
            ended = { rec = nrec, revision = ev.kv.mod_revision }
            return finish(ended)
          end
          if st == "retrying" and a == attempt and not opts.json then
            io.stdout:write(format("--- attempt %d ended: %s; it runs again ---\n", a,
              tostring(U.field(nrec, "error") or "failed"):gsub("\n", " ")))
          end
          switch(a, U.field(nrec, "node"))
        end
      end
    end
  end)
  while true do
    local evs, _, code = ow:next()
    if not evs then
      if code ~= "ETIMEDOUT" then return die("logs", name, "watching the output: " .. tostring(code)) end
    elseif not ended then
      local mine = {}
      for _, ev in ipairs(evs) do
        local a = ev.type == "put" and output.parse_key(P, name, id, ev.kv.key)
        if a and a > attempt then switch(a) end
        if a == attempt then mine[#mine + 1] = ev.kv end
      end
      if #mine > 0 then show(mine) end
    end
  end
end

local FLAGS = {
  logs = { attempt = "count", f = "flag", follow = "flag", json = "flag" },
  put = { name = "string" },
  ls = { json = "flag" },
  show = { json = "flag" },
  history = { n = "count", json = "flag" },
  rm = { purge = "flag" },
  run = { force = "flag", param = "list" },
  kill = {},
  pause = {}, resume = {},
}

return function(...)
  return A.dispatch("job", { ... }, { sub = sub, usages = USAGES, helps = HELPS, usage = USAGE,
    help = HELP, flags = FLAGS, fail = usage, select = function(what) current = what end })
end
