-- baton job put|ls|show|rm|run|pause|resume|history|logs (design.md
-- sections 4 and 9). Everything here reads and writes etcd keys under the prefix; the
-- node does the scheduling.
--
--   P jobs/<name>                      the job's Lua source
--   P paused/<name>                    present while paused
--   P status/<name>/<node>             JSON {revision=, error=, time=} a node writes
--   P runs/<name>/<instant>[/<shard>]  JSON run records
--   P trigger/<name>/<id>              manual-run requests (see request_run)
--   P output/<name>/<id>/@<attempt>/<chunk>  a run's kept output (node/output.lua)
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"
local job = require "baton.job"
local output = require "baton.node.output"

local format, concat = string.format, table.concat
local e = baton.etcd

local USAGES = {
  put = "baton job put FILE.lua [--name NAME]",
  ls = "baton job ls [--json]",
  show = "baton job show NAME [--json]",
  rm = "baton job rm NAME [--purge]",
  run = "baton job run NAME [--force]",
  pause = "baton job pause NAME",
  resume = "baton job resume NAME",
  history = "baton job history NAME [-n N] [--json]",
  logs = "baton job logs NAME [ID] [--attempt N] [-f] [--json]",
}
local USAGE = "baton job put|ls|show|rm|run|pause|resume|history|logs ..."
for _, k in ipairs { "put", "ls", "show", "rm", "run", "pause", "resume", "history", "logs" } do
  USAGE = USAGE .. "\n       " .. USAGES[k]
end
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
      error = U.field(v, "error"), time = U.field(v, "time"),
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
  local where = type(fire) == "number" and U.instant(fire) or rec.key
  local shard = U.field(rec, "shard")
  if type(shard) == "table" then shard = shard.index end
  if shard then where = where .. "/" .. tostring(shard) end
  return {
    where, tostring(U.field(rec, "node") or "-"), tostring(U.field(rec, "attempt") or "-"),
    tostring(U.field(rec, "state") or "-"), dur, err and tostring(err):gsub("\n", " ") or "",
  }
end
local RUN_HEADER = { "FIRE", "NODE", "ATTEMPT", "STATE", "DURATION", "ERROR" }

---------------------------------------------------------------------------
-- subcommands

local sub = {}

function sub.put(pos, opts)
  local name, source, file = U.put_args(pos, opts, "job", usage, die)
  local spec, verr = job.load(source, name, nil, file)
  if not spec then return die("put", file, verr) end
  local key = U.key("jobs", name)
  local r, perr = e:put(key, source, { prev_kv = true })
  if not r then return die("put", name, perr) end
  io.stdout:write(format("%s job %s at %s (revision %d)\n",
    r.prev_kv and "updated" or "created", name, key, r.revision))
  baton.exit(0)
end

-- The row (and JSON) describing one stored job for ls.
local function describe(name, kv, paused, status_list)
  local spec, verr = job.load(kv.value, name, kv.mod_revision)
  local d = {
    name = name, revision = kv.mod_revision, paused = paused or false, broken = false,
  }
  if spec then
    d.schedule, d.queue, d.timezone = spec.schedule, spec.queue, spec.timezone
    local nf = job.next_fires(spec, 1)[1]
    if nf and not paused then d.next = U.rfc3339(nf, spec.cron) end
  else
    d.broken, d.error = true, verr
  end
  for _, st in ipairs(status_list or {}) do
    if st.error then d.broken, d.error = true, d.error or (st.node .. ": " .. tostring(st.error)) end
  end
  return d, spec
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
      table.insert(status[jname], { node = node, error = U.field(v, "error") })
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
    local state = d.broken and (d.paused and "broken,paused" or "broken") or (d.paused and "paused" or "active")
    rows[#rows + 1] = {
      name, d.schedule or (d.queue and "queue:" .. d.queue) or "-", d.timezone or "-",
      d.next or "-", state, d.last and (tostring(d.last.state) .. " " .. d.last.run) or "-",
    }
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
  if not kv then return die("show", name, "ENOENT: no job " .. name .. " at " .. U.key("jobs", name)) end
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
  if spec then
    if spec.description then f[#f + 1] = { "description", spec.description } end
    if spec.queue then
      f[#f + 1] = { "queue", spec.queue .. " (" .. U.key("queue", spec.queue) .. "/)" }
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
-- {force=, at=}; the node consumes (and deletes) it and claims a run.
-- Returns the key, or nil, err; ENOENT if there is no such job.
local function request_run(name, force)
  local jkey = U.key("jobs", name)
  local key = U.key("trigger", name, U.time_id())
  local r, err = e:txn {
    compare = { { key = jkey, target = "create", op = ">", value = 0 } },
    success = { { put = { key = key, value = baton.json.encode { force = force, at = baton.now() } } } },
  }
  if not r then return nil, err end
  if not r.succeeded then return nil, "ENOENT: no job " .. name .. " at " .. jkey end
  return key
end

function sub.run(pos, opts)
  local name = one_name("run", pos)
  local key, err = request_run(name, opts.force or false)
  if not key then return die("run", name, err) end
  io.stdout:write(format("queued a manual run of %s%s (%s); a node will start it\n", name,
    opts.force and " (--force: ignoring concurrency)" or "", key))
  baton.exit(0)
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
  run = { force = "flag" },
  pause = {}, resume = {},
}

return function(...)
  local argv = { ... }
  local what = argv[1]
  if not what then return usage("needs a subcommand") end
  if not sub[what] then return usage("unknown subcommand \"" .. what .. "\"") end
  current = what
  local rest = {}
  for i = 2, #argv do rest[#rest + 1] = argv[i] end
  -- the subcommand's name is positional 1, so flags before NAME are parsed
  local opts, pos = A.parse("job " .. what, USAGES[what], FLAGS[what], { what, unpack(rest) })
  -- a flag the subcommand does not know lands in pos after NAME: refuse it
  for i = 2, #pos do
    if pos[i]:match("^%-") and pos[i] ~= "-" then return usage("unknown flag " .. pos[i]) end
  end
  return sub[what](pos, opts)
end
