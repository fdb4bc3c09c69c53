-- The operations that `baton job|policy|queue|nodes|leader` and the node's
-- HTTP API (node/http.lua, docs/api.md) share, as data: each takes plain
-- arguments, reads and writes etcd under the prefix (docs/architecture.md,
-- "Key layout"), and returns plain data -- the CLI's --json output and the
-- API's response bodies are these values -- or, luv style,
--
--   nil, "ECODE: message", "ECODE" [, {invalid = true}]
--
-- Codes: EINVAL (bad input: a name, a parameter, a limit), ENOENT (no such
-- job, run, policy, leader), EEXIST (a put with revision = 0 found the key,
-- a queue id collision), ECONFLICT (the state forbids it: a put whose
-- revision no longer matches, no live node can run the job, the run is not
-- running), EFBIG (over etcd's request limit), and the etcd client's own
-- codes (ECONNREFUSED, ETIMEDOUT, EAUTH, ...) when etcd cannot be asked.
-- A job or policy source that does not validate is EINVAL with a fourth
-- value {invalid = true, field = "schedule"|nil}: the message is the one
-- `baton check` prints ("EINVAL: job NAME: field 'F': ..."), and the API
-- answers it 422 rather than 400. Messages that the CLI printed without a
-- code before this module existed keep their words (their code is only
-- the third value).
--
-- Every function may wait (etcd requests): call it in a coroutine that
-- baton runs.
local baton = require "baton"
local U = require "baton.cli.util"
local job = require "baton.job"
local policy = require "baton.policy"
local cycles = require "baton.cli.cycles"
local runs_mod = require "baton.node.runs"
local output = require "baton.output"
local keys = require "baton.keys"
local sign = require "baton.sign"
local stored = require "baton.stored"
local versions = require "baton.versions"

local json = baton.json
local format, concat = string.format, table.concat
local type, ipairs, pairs, tostring, tonumber = type, ipairs, pairs, tostring, tonumber

local M = {}

local function etcd() return baton.etcd end

-- nil, msg, code (code taken from the message when not given).
local function fail(msg, code, extra)
  return nil, msg, code or msg:match("^(E[%u%d]+):") or "EIO", extra
end

-- The error of an invalid job or policy source, as job.load / policy.load
-- word it: EINVAL with {invalid = true, field = F}.
local function invalid(msg)
  return nil, msg, "EINVAL", { invalid = true, field = msg:match("field '([^']+)'") }
end

local function check_name(kind, name)
  if not job.valid_name(name) then
    return fail(format("EINVAL: invalid %s name \"%s\" (%s)", kind, tostring(name), U.NAME_RULE), "EINVAL")
  end
  return true
end
M.check_name = check_name

-- The largest source job put / policy put store: etcd's request limit, less
-- the key and the request's framing.
function M.max_source(kind, name)
  return U.MAX_REQUEST - #keys.key(U.prefix(), kind == "job" and "jobs" or "policies", name) - 512
end

local function too_big(kind, name, n)
  local max = M.max_source(kind, name)
  if n > max then
    return format("EFBIG: the %s source is %s, larger than etcd's request limit of %s "
      .. "(etcd's default --max-request-bytes); nothing was stored", kind, U.bytes(n), U.bytes(U.MAX_REQUEST))
  end
end

-- Decodes a JSON object value; nil when it is not one.
local decode_object, field = U.decode_object, U.field

---------------------------------------------------------------------------
-- jobs: reading

-- The job's source kv, or false when there is none; nil, err, code on failure.
local function get_job(name)
  local r, err, code = etcd():get(keys.key(U.prefix(), "jobs", name))
  if not r then return nil, err, code end
  return r.kvs[1] or false, r.revision
end

-- The error for a job that is not there, with a hint when the prefix holds
-- no job at all (the usual reason: another --prefix or BATON_PREFIX).
local function no_job(name)
  local msg = "ENOENT: no job " .. name .. " at " .. keys.key(U.prefix(), "jobs", name)
  local r = etcd():get(keys.dir(U.prefix(), "jobs"), { prefix = true, count_only = true })
  if r and r.count == 0 then
    msg = msg .. " (there are no jobs under " .. keys.key(U.prefix(), "jobs") .. "/ at all; is --prefix right?)"
  end
  return msg
end
M.no_job = no_job

-- Status records of one job: list of {node=, revision=, error=, time=, running=}.
local function statuses(name)
  local r, err, code = etcd():get(keys.dir(U.prefix(), "status", name), { prefix = true })
  if not r then return nil, err, code end
  local list = {}
  for _, kv in ipairs(r.kvs) do
    local v = decode_object(kv.value) or { error = "unreadable status: " .. kv.value }
    list[#list + 1] = {
      node = select(2, keys.split(U.prefix(), "status", kv.key)), revision = field(v, "revision"),
      error = field(v, "error"), time = field(v, "time"), running = field(v, "running"),
    }
  end
  return list
end

-- Run records of one job, newest first (key order), at most n (nil: all);
-- each with key = its run id.
local function runs(name, n)
  local pfx = keys.dir(U.prefix(), "runs", name)
  local r, err, code = etcd():get(pfx, { prefix = true, sort = "key", order = "desc", limit = n })
  if not r then return nil, err, code end
  local list = {}
  for _, kv in ipairs(r.kvs) do
    local v = decode_object(kv.value) or { state = "unreadable", error = kv.value }
    v.key = keys.under(pfx, kv.key)
    list[#list + 1] = v
  end
  return list
end

-- A job's spec at revision rev: the caller's (spec_for(name, rev), the
-- node's loaded spec, or nil, err for a version it knows does not load) or
-- described by the sandbox from kv (read at rev when kv has no value):
-- stored.job, which verifies first where the process trusts keys. Returns
-- spec or nil, err.
local function spec_at(name, rev, kv, spec_for)
  if spec_for then
    local s, serr = spec_for(name, rev)
    if s then return s end
    if serr then return nil, serr end
  end
  if not kv or kv.value == nil or kv.value == "" then
    local r, err = etcd():get(keys.key(U.prefix(), "jobs", name), { revision = rev })
    kv = r and r.kvs[1]
    if not kv then return nil, err or ("ENOENT: job " .. name .. " at revision " .. tostring(rev)) end
  end
  return stored.job(name, kv)
end

-- The description of one stored job that ls lists and show starts from,
-- and the spec it shows. For a broken job that the nodes still run an
-- earlier version of (their status says which: running), that version's
-- schedule and next instant are shown, with d.running_revision. kv may
-- come without its value (keys_only); spec_for: see spec_at.
local function describe(name, kv, paused, status_list, spec_for)
  local spec, verr = spec_at(name, kv.mod_revision, kv, spec_for)
  local d = {
    name = name, revision = kv.mod_revision, paused = paused or false, broken = false,
  }
  if not spec then d.broken, d.error = true, verr end
  local running
  for _, st in ipairs(status_list or {}) do
    if st.error then
      d.broken, d.error = true, d.error or (st.node .. ": " .. tostring(st.error))
      -- (a node started with --trust refused the source: sign.verify)
      if tostring(st.error):match("^untrusted:") then d.untrusted = true end
    end
    local rr = st.running
    if type(rr) == "number" and rr ~= kv.mod_revision and (not running or rr > running) then running = rr end
  end
  if d.broken and running then
    local ospec = spec_at(name, running, nil, spec_for)
    if ospec then spec, d.running_revision = ospec, running end
  end
  local nf
  if spec then
    d.schedule, d.queue, d.timezone = spec.schedule, spec.queue, spec.timezone
    d.on = spec.on
    nf = job.next_fires(spec, 1)[1]
    if nf and not paused then d.next = U.rfc3339(nf, spec.cron) end
  end
  return d, spec, not paused and nf or nil
end

-- {run=, state=, fire=, started=, finished=, node=, attempt=} of a record
-- (rec.key its id), as `last` in job ls.
local function last_of(rec)
  return { run = rec.key, state = field(rec, "state"), fire = field(rec, "fire"),
           started = field(rec, "started"), finished = field(rec, "finished"),
           node = field(rec, "node"), attempt = field(rec, "attempt") }
end

-- The last runs of the jobs in names that have no P last/ entry (records
-- written before it existed, raw puts): the newest record of each, 128
-- jobs per request. Fills last[name].
local function last_fallback(names, last)
  local e = etcd()
  for i = 1, #names, 128 do
    local ops = {}
    for k = i, math.min(i + 127, #names) do
      ops[#ops + 1] = { get = { key = keys.dir(U.prefix(), "runs", names[k]), prefix = true, sort = "key",
                                order = "desc", limit = 1 } }
    end
    local r, err, code = e:txn { success = ops }
    if not r then return nil, err, code end
    for k, resp in ipairs(r.responses) do
      local name, kv = names[i + k - 1], resp.kvs[1]
      if kv then
        local rec = decode_object(kv.value) or { state = "unreadable" }
        rec.key = select(2, keys.split(U.prefix(), "runs", kv.key))
        last[name] = last_of(rec)
      end
    end
  end
  return true
end

-- jobs_view([opts]) --> what list_jobs lists, read from etcd in one
-- transaction (at one revision): {jobs = {{name, revision, value}, ...}
-- (by name; without values when opts.keys_only), paused = {[name] = true},
-- status = {[name] = {{node, error, running}, ...}}, last = {[name] =
-- last run}}. The last run of a job comes from P last/<job>; for a job
-- without one (records older than it, raw writes), from its newest record.
function M.jobs_view(opts)
  opts = opts or {}
  local jpfx, ppfx, spfx, lpfx = keys.dir(U.prefix(), "jobs"), keys.dir(U.prefix(), "paused"), keys.dir(U.prefix(), "status"),
    keys.dir(U.prefix(), "last")
  local r, err, code = etcd():txn { success = {
    { get = { key = jpfx, prefix = true, sort = "key", order = "asc", keys_only = opts.keys_only or nil } },
    { get = { key = ppfx, prefix = true, keys_only = true } },
    { get = { key = spfx, prefix = true } },
    { get = { key = lpfx, prefix = true } },
  } }
  if not r then return nil, err, code end
  local view = { jobs = {}, paused = {}, status = {}, last = {} }
  for _, kv in ipairs(r.responses[2].kvs) do view.paused[keys.under(ppfx, kv.key)] = true end
  for _, kv in ipairs(r.responses[3].kvs) do
    local jname, node = keys.under(spfx, kv.key):match("^([^/]+)/(.+)$")
    if jname then
      local v = decode_object(kv.value) or {}
      view.status[jname] = view.status[jname] or {}
      table.insert(view.status[jname], { node = node, error = field(v, "error"), running = field(v, "running") })
    end
  end
  local has_last = {}
  for _, kv in ipairs(r.responses[4].kvs) do
    local name = keys.under(lpfx, kv.key)
    has_last[name] = true
    view.last[name] = M.last_entry(kv.value)
  end
  local missing = {}
  for _, kv in ipairs(r.responses[1].kvs) do
    local name = keys.under(jpfx, kv.key)
    view.jobs[#view.jobs + 1] = { name = name, revision = kv.mod_revision, created = kv.create_revision,
                                  version = kv.version, value = not opts.keys_only and kv.value or nil }
    if not has_last[name] then missing[#missing + 1] = name end
  end
  if #missing > 0 then
    local ok, ferr, fcode = M.last_fallback(missing, view.last)
    if not ok then return nil, ferr, fcode end
  end
  return view
end

-- A job's last run ({run, state, fire, started, finished, node, attempt})
-- from the value of its P last/<job>; nil when it is not one.
function M.last_entry(value)
  local v = decode_object(value)
  if not v or type(field(v, "run")) ~= "string" then return nil end
  v.key = v.run
  return last_of(v)
end

M.last_fallback = last_fallback

-- list_jobs([opts]) --> array of job descriptions (`baton job ls --json`,
-- GET /api/v1/jobs): {name, revision, paused, broken, error?,
-- running_revision?, schedule?, queue?, timezone?, on?, next? (RFC 3339),
-- last? {run, state, fire, started, finished, node, attempt}}, by name;
-- and the soonest next instant among them (epoch seconds, or nil), after
-- which the list says something else. opts.view: what to list (see
-- jobs_view; default: read from etcd). opts.spec_for(name, revision) may
-- return a spec already loaded at that revision (the node's), or nil, err
-- for one it knows does not load, so that only the other jobs are
-- compiled; then the sources themselves are not read either.
-- opts.yield_every = n lets the loop run every n jobs.
function M.list_jobs(opts)
  opts = opts or {}
  local spec_for = opts.spec_for
  local view = opts.view
  if not view then
    local err, code
    view, err, code = M.jobs_view { keys_only = spec_for ~= nil }
    if not view then return nil, err, code end
  end
  if not spec_for then
    -- (the sandbox describes them all in as few round trips as it can)
    local todo = {}
    for _, j in ipairs(view.jobs) do
      if j.value then
        todo[#todo + 1] = { name = j.name, kv = { value = j.value, mod_revision = j.revision,
                                                  create_revision = j.created, version = j.version } }
      end
    end
    local described, by = stored.jobs(todo), {}
    for i, item in ipairs(todo) do
      by[item.name] = { rev = item.kv.mod_revision, spec = described[i].spec, error = described[i].error }
    end
    spec_for = function(name, rev)
      local d = by[name]
      if d and d.rev == rev then return d.spec, d.error end
    end
  end
  local list, soonest = {}, nil
  local P, every = U.prefix(), opts.yield_every
  for i, j in ipairs(view.jobs) do
    local d, _, nf = describe(j.name, { key = keys.key(P, "jobs", j.name), mod_revision = j.revision, value = j.value or "",
                                         create_revision = j.created, version = j.version },
      view.paused[j.name], view.status[j.name], spec_for)
    d.last = view.last[j.name]
    list[i] = d
    if nf and (not soonest or nf < soonest) then soonest = nf end
    if every and i % every == 0 then baton.sleep(0) end
  end
  return json.array(list), soonest
end

-- show_job(name) --> `baton job show --json`: {name, key, revision,
-- created_revision, version, paused, broken, error?, running_revision?,
-- spec (job.summary, or null when no version loads), source (as stored),
-- next [5 instants], status [{node, revision, error, time, running}], runs
-- [10 newest records]}.
function M.show_job(name)
  local ok, nerr, ncode = check_name("job", name)
  if not ok then return nil, nerr, ncode end
  local kv, err, code = get_job(name)
  if kv == nil then return nil, err, code end
  if not kv then return fail(no_job(name), "ENOENT") end
  local e = etcd()
  local pr, perr, pcode = e:get(keys.key(U.prefix(), "paused", name))
  if not pr then return nil, perr, pcode end
  local st, serr, scode = statuses(name)
  if not st then return nil, serr, scode end
  local rs, rerr, rcode = runs(name, 10)
  if not rs then return nil, rerr, rcode end
  local d, spec = describe(name, kv, pr.count > 0, st)
  local next = {}
  if spec and not d.paused then
    for i, f in ipairs(job.next_fires(spec, 5)) do next[i] = U.rfc3339(f, spec.cron) end
  end
  return {
    name = name, key = kv.key, revision = kv.mod_revision, created_revision = kv.create_revision,
    version = kv.version, paused = d.paused, broken = d.broken, error = d.error,
    running_revision = d.running_revision, untrusted = d.untrusted,
    signed_by = sign.signer(kv.value),
    spec = spec and job.summary(spec) or json.null, source = kv.value,
    next = json.array(next), status = json.array(st), runs = json.array(rs),
  }
end

-- history(name [, limit]) --> the job's run records, newest first (default
-- 20), each with key = its run id (`baton job history --json`). The
-- records of a removed job are kept, and listed; no job and no records is
-- ENOENT.
function M.history(name, limit)
  local ok, nerr, ncode = check_name("job", name)
  if not ok then return nil, nerr, ncode end
  local rs, err, code = runs(name, limit or 20)
  if not rs then return nil, err, code end
  if #rs == 0 then
    local kv, jerr, jcode = get_job(name)
    if kv == nil then return nil, jerr, jcode end
    if not kv then return fail(no_job(name), "ENOENT") end
  end
  return json.array(rs)
end

-- recent_runs([limit [, opts]]) --> the newest run records across all
-- jobs, by start time, newest first (default 20), each with job and key.
-- Reads the jobs' last runs (P last/; opts.last = {[job] = last run} when
-- the caller has them), then the newest records of the jobs that ran last,
-- 64 jobs per request, until no job left can have a newer run. Jobs with
-- no last/ entry (records older than it) are not seen until they run
-- again.
function M.recent_runs(limit, opts)
  limit = limit or 20
  local e = etcd()
  local last = opts and opts.last
  if not last then
    local lpfx = keys.dir(U.prefix(), "last")
    local r, err, code = e:get(lpfx, { prefix = true })
    if not r then return nil, err, code end
    last = {}
    for _, kv in ipairs(r.kvs) do last[keys.under(lpfx, kv.key)] = M.last_entry(kv.value) end
  end
  local jobs = {}
  for name, l in pairs(last) do
    jobs[#jobs + 1] = { name = name, t = tonumber(l.started) or tonumber(l.fire) or 0 }
  end
  table.sort(jobs, function(a, b) if a.t ~= b.t then return a.t > b.t end return a.name < b.name end)
  local function t_of(rec)
    return tonumber(field(rec, "started")) or tonumber(field(rec, "fire")) or 0
  end
  local found = {}
  local i = 1
  while i <= #jobs do
    local ops, names = {}, {}
    for k = i, math.min(i + 63, #jobs) do
      names[#names + 1] = jobs[k].name
      ops[#ops + 1] = { get = { key = keys.dir(U.prefix(), "runs", jobs[k].name), prefix = true, sort = "key",
                                order = "desc", limit = limit } }
    end
    i = i + #ops
    local tr, terr, tcode = e:txn { success = ops }
    if not tr then return nil, terr, tcode end
    for k, resp in ipairs(tr.responses) do
      local pfx = keys.dir(U.prefix(), "runs", names[k])
      for _, kv in ipairs(resp.kvs) do
        local rec = decode_object(kv.value) or { state = "unreadable", error = kv.value }
        rec.key, rec.job = keys.under(pfx, kv.key), names[k]
        found[#found + 1] = rec
      end
    end
    table.sort(found, function(a, b)
      local ta, tb = t_of(a), t_of(b)
      if ta ~= tb then return ta > tb end
      if a.job ~= b.job then return a.job < b.job end
      return a.key > b.key
    end)
    for k = #found, limit + 1, -1 do found[k] = nil end
    -- (a job's records start no later than its last run, give or take a
    -- clock: the jobs after this one cannot push these out)
    if #found >= limit and jobs[i] and t_of(found[#found]) > jobs[i].t then break end
  end
  return json.array(found)
end

-- get_run(job, id [, {attempt = n}]) --> the run record with job, key and
-- output: the kept lines of every attempt (or of attempt n), in order, as
-- `baton job logs --json` prints them ({attempt, n, t, stream, text, ...};
-- {attempt, dropped, cap} where the cap dropped lines). id "latest": the
-- run created last (as `baton job logs NAME` picks it).
function M.get_run(name, id, opts)
  opts = opts or {}
  local ok, nerr, ncode = check_name("job", name)
  if not ok then return nil, nerr, ncode end
  if type(id) ~= "string" or id == "" or id:find("%.%.") or id:find("^/") or id:find("/$") then
    return fail(format("EINVAL: invalid run id \"%s\"", tostring(id)), "EINVAL")
  end
  local e = etcd()
  local P = U.prefix()
  if id == "latest" then
    -- (no run id is a word: instants, task and event ids start with digits)
    local l, lerr, lcode = e:get(keys.dir(U.prefix(), "runs", name), { prefix = true, sort = "create", order = "desc",
                                                               limit = 1, keys_only = true })
    if not l then return nil, lerr, lcode end
    if not l.kvs[1] then
      local jkv, jerr, jcode = get_job(name)
      if jkv == nil then return nil, jerr, jcode end
      if not jkv then return fail("ENOENT: no job " .. name .. " at " .. keys.key(U.prefix(), "jobs", name), "ENOENT") end
      return fail("ENOENT: job " .. name .. " has no runs yet", "ENOENT")
    end
    id = select(2, keys.split(U.prefix(), "runs", l.kvs[1].key))
  end
  local r, err, code = e:txn { success = {
    { get = { key = keys.key(U.prefix(), "runs", name, id) } },
    { get = { key = keys.output(P, name, id), prefix = true } },
  } }
  if not r then return nil, err, code end
  local kv = r.responses[1].kvs[1]
  if not kv then
    local jkv, jerr, jcode = get_job(name)
    if jkv == nil then return nil, jerr, jcode end
    if not jkv then return fail("ENOENT: no job " .. name .. " at " .. keys.key(U.prefix(), "jobs", name), "ENOENT") end
    return fail("ENOENT: no run " .. id .. " of job " .. name .. " (see baton job history " .. name .. ")", "ENOENT")
  end
  local rec = decode_object(kv.value) or { state = "unreadable", error = kv.value }
  rec.job, rec.key = name, id
  local by = {}
  for _, okv in ipairs(r.responses[2].kvs) do
    local a = output.parse_key(P, name, id, okv.key)
    if a and (not opts.attempt or a == opts.attempt) then
      by[a] = by[a] or {}
      table.insert(by[a], okv)
    end
  end
  local attempts = U.sorted_keys(by)
  table.sort(attempts)
  local out = {}
  for _, a in ipairs(attempts) do
    for _, l in ipairs((output.lines(by[a]))) do
      l.attempt = a
      out[#out + 1] = l
    end
  end
  rec.output = json.array(out)
  return rec
end

---------------------------------------------------------------------------
-- jobs: writing

-- nil if the job's policy exists (built in, or stored under P policies/),
-- else the message refusing it, with the closest known name; nil, err,
-- code when etcd cannot be asked.
local function unknown_policy(spec)
  if policy.builtin(spec.policy) then return false end
  local pfx = keys.dir(U.prefix(), "policies")
  local r, err, code = etcd():get(pfx, { prefix = true, keys_only = true })
  if not r then return nil, err, code end
  local known = {}
  for _, n in ipairs(policy.BUILTINS) do known[#known + 1] = n end
  for _, kv in ipairs(r.kvs) do
    local n = keys.under(pfx, kv.key)
    if n == spec.policy then return false end
    known[#known + 1] = n
  end
  local hint = job.did_you_mean(spec.policy, known)
  return format("EINVAL: job %s: field 'policy': no policy %q: none is stored at %s%s nor built in%s",
    spec.name, spec.policy, pfx, spec.policy, hint and format(" (did you mean %q?)", hint)
      or "; baton policy ls lists them")
end

-- A source about to be stored, as stored.job / stored.policy take it: in a
-- process that trusts keys (a node's API with --trust), verified first,
-- for the place its signature names (it is stored there only: see
-- store_source); anywhere else, the caller's own text. Returns kv, opts,
-- or nil, err, code when it is not trusted here.
local function incoming(kind, name, source, chunkname)
  local kv = { value = source }
  if not stored.trusting() then return kv, { file = true, chunkname = chunkname } end
  kv.create_revision, kv.version = sign.binding(source)
  local ok, err = stored.verify(kind, name, kv)
  if not ok then
    return fail(format("EACCES: %s; this node runs only code signed by its --trust keys, so nothing was "
      .. "stored", err), "EACCES")
  end
  return kv, { chunkname = chunkname }
end

-- check_job(name, source [, chunkname]) --> spec, after everything job put
-- checks before it writes: size, compile and spec (in the sandbox:
-- stored.job), a policy that exists, no cycle of `on` triggers through
-- the stored jobs. chunkname is what error positions name (a file).
function M.check_job(name, source, chunkname)
  local ok, nerr, ncode = check_name("job", name)
  if not ok then return nil, nerr, ncode end
  if type(source) ~= "string" then return fail("EINVAL: the job source must be a string", "EINVAL") end
  local big = too_big("job", name, #source)
  if big then return fail(big, "EFBIG") end
  local kv, kopts, kcode = incoming("job", name, source, chunkname)
  if not kv then return nil, kopts, kcode end
  local spec, verr = stored.job(name, kv, kopts)
  if not spec then return invalid(verr) end
  local perr, eerr, ecode = unknown_policy(spec)
  if perr == nil then return nil, eerr, ecode end
  if perr then return invalid(perr) end
  local cerr, rerr = cycles.check(name, spec)
  if cerr then return invalid(cerr) end
  if rerr then return fail(rerr) end
  return spec
end

-- The compare of a put that must find the key in the state given: at mod
-- revision rev (0: absent), or created at c and at version v - 1.
local function where_compare(key, rev, c, v)
  local cmp = {}
  if rev then cmp[#cmp + 1] = { key = key, target = "mod", op = "==", value = rev } end
  if c then
    cmp[#cmp + 1] = { key = key, target = "create", op = "==", value = c }
    cmp[#cmp + 1] = { key = key, target = "version", op = "==", value = v - 1 }
  end
  return cmp
end

-- The key's state for a signed put: the current kv, after making the
-- placeholder a new key starts with (sign.lua); nil, err, code. rev: the
-- caller's precondition (a placeholder counts as no key).
local function signing_base(kind, name, key, rev)
  local e = etcd()
  local g, err, code = e:get(key)
  if not g then return nil, err, code end
  local cur = g.kvs[1]
  local absent = not cur or cur.value == sign.PLACEHOLDER
  if rev == 0 and not absent then
    return fail(format("EEXIST: %s %s exists (revision %d); nothing was stored", kind, name, cur.mod_revision),
      "EEXIST")
  elseif rev and rev ~= 0 and (absent or cur.mod_revision ~= rev) then
    return fail(format("ECONFLICT: %s %s is %s, not at revision %d; nothing was stored", kind, name,
      absent and "not stored" or format("at revision %d", cur.mod_revision), rev), "ECONFLICT")
  end
  if cur then return cur end
  local t, terr, tcode = e:txn {
    compare = { { key = key, target = "create", op = "==", value = 0 } },
    success = { { put = { key = key, value = sign.PLACEHOLDER } } },
  }
  if not t then return nil, terr, tcode end
  if not t.succeeded then return false end -- (created meanwhile: look again)
  return { key = key, value = sign.PLACEHOLDER, create_revision = t.revision, mod_revision = t.revision,
           version = 1 }
end

-- Stores a checked source of a job or policy (kind) at P jobs/<name> or
-- P policies/<name>, only if the stored one is at mod revision opts.revision
-- when that is given (0: only if there is none), then records it in the
-- version log (baton.versions: opts.author, opts.keep, opts.op).
--   opts.sign (a secret key, sign.lua): signed first, for the next version
--   of the key as it is (a new key is created holding sign.PLACEHOLDER
--   first; the signature line, a Lua comment, changes nothing the checks
--   saw); tried again should another put come in between.
--   A source signed already is stored only where its signature says: as
--   version V of the key created at revision C, else ECONFLICT.
-- Returns {name, key, revision, created, signed_by} and the version log's
-- warning (nil when it was recorded), or nil, err, code (EFBIG, EEXIST /
-- ECONFLICT when opts.revision or the signature's place did not hold;
-- nothing stored).
local function store_source(kind, name, source, opts)
  local key, rev = keys.key(U.prefix(), kind == "job" and "jobs" or "policies", name), opts.revision
  local r, err, code
  for _ = 1, 5 do
    local text, c, v = source, nil, nil
    if opts.sign then
      local base, berr, bcode = signing_base(kind, name, key, rev)
      if base == nil then return nil, berr, bcode end
      if base then
        c, v = sign.sign_for(base)
        text = sign.sign(kind, name, source, opts.sign,
                         { prefix = U.prefix(), create_revision = c, version = v })
        local big = too_big(kind, name, #text)
        if big then return fail(big, "EFBIG") end
      end
    else
      c, v = sign.binding(source)
    end
    if not opts.sign or c then
      r, err, code = etcd():txn {
        compare = where_compare(key, not opts.sign and rev or nil, c, v),
        success = { { put = { key = key, value = text, prev_kv = true } } },
        failure = { { get = { key = key, keys_only = true } } },
      }
      if not r then return nil, err, code end
      if r.succeeded then source = text; break end
      local cur = r.responses[1].kvs[1]
      if c and not opts.sign then
        local now = not cur and "not there"
          or cur.create_revision ~= c and format("created at revision %d (a %s put back after it was removed?)",
            cur.create_revision, kind)
          or cur.version >= v and format("at version %d already (a source stored before, put again?)", cur.version)
          or format("at version %d", cur.version)
        return fail(format("ECONFLICT: the source is signed for version %d of %s created at revision %d, and "
          .. "that key is %s; sign it again (baton %s put --sign, or baton %s sign); nothing was stored", v, key,
          c, now, kind, kind), "ECONFLICT")
      elseif not opts.sign then
        if rev == 0 then
          return fail(format("EEXIST: %s %s exists (revision %d); nothing was stored", kind, name,
            cur.mod_revision), "EEXIST")
        end
        return fail(format("ECONFLICT: %s %s is %s, not at revision %d; nothing was stored", kind, name,
          cur and format("at revision %d", cur.mod_revision) or "not stored", rev), "ECONFLICT")
      end
    end
    r = nil -- (another put came in between: sign again)
  end
  if not r then
    return fail(format("ECONFLICT: %s %s kept changing while it was signed; nothing was stored", kind, name),
      "ECONFLICT")
  end
  local prev = r.responses[1].prev_kv
  if prev and prev.value == sign.PLACEHOLDER then prev = nil end
  local vok, verr = versions.record(kind, name, r.revision, source, opts, prev)
  return { name = name, key = key, revision = r.revision, created = prev == nil,
           signed_by = sign.signer(source) }, not vok and versions.warning(kind, name, verr) or nil
end

-- sign_source(kind, name, source, secret [, chunkname]) --> {source,
-- key, create_revision, version, signed_by}: source checked as put checks
-- it, and signed by secret for the next version of its key (a new key is
-- created holding sign.PLACEHOLDER first, which nodes ignore), so that
-- anyone may then store it without the key (job put, the HTTP API's PUT),
-- until another put comes first.
function M.sign_source(kind, name, source, secret, chunkname)
  local check = kind == "job" and M.check_job or M.check_policy
  local ok, err, code, extra = check(name, source, chunkname)
  if not ok then return nil, err, code, extra end
  local key = keys.key(U.prefix(), kind == "job" and "jobs" or "policies", name)
  for _ = 1, 5 do
    local base, berr, bcode = signing_base(kind, name, key)
    if base == nil then return nil, berr, bcode end
    if base then
      local c, v = sign.sign_for(base)
      local text = sign.sign(kind, name, source, secret, { prefix = U.prefix(), create_revision = c, version = v })
      local big = too_big(kind, name, #text)
      if big then return fail(big, "EFBIG") end
      return { source = text, key = key, create_revision = c, version = v, signed_by = sign.signer(text) }
    end
  end
  return fail(format("ECONFLICT: %s %s kept changing while it was signed", kind, name), "ECONFLICT")
end

-- put_job(name, source [, opts]) --> {name, key, revision, created,
-- signed_by?, warnings = [...]}: stores the source at P jobs/<name> once
-- check_job passes. opts.chunkname: see check_job. opts.revision: store
-- only if the job is at that mod revision (0: only if there is no such
-- job), else EEXIST / ECONFLICT. opts.sign: a secret key (sign.load_secret)
-- whose signature is stored with the source (nodes started with --trust
-- load only signed code). A warning says when no live node has the job's
-- labels, or when nothing could deliver a notifier's messages (it is
-- stored all the same). opts.author, opts.keep, opts.op:
-- the version log's entry (baton.versions.record).
function M.put_job(name, source, opts)
  opts = opts or {}
  local spec, verr, vcode, extra = M.check_job(name, source, opts.chunkname)
  if not spec then return nil, verr, vcode, extra end
  local res, vwarn, code = store_source("job", name, source, opts)
  if not res then return nil, vwarn, code end
  local warnings = {}
  local nodes = U.live_nodes()
  local why = nodes and U.no_eligible_node(spec.labels, nodes)
  if why then warnings[1] = why .. "; the job runs only once such a node is up" end
  warnings[#warnings + 1] = vwarn
  -- (a notifier whose channel P config/notify does not set: baton.notify)
  for _, w in ipairs(require("baton.notify").put_warnings(name, spec)) do warnings[#warnings + 1] = w end
  res.warnings = json.array(warnings)
  return res
end

-- rm_job(name [, {purge = bool}]) --> {name, removed = true, purged = n}:
-- deletes the job, its paused flag, node statuses, manual-run requests and
-- the events waiting for it; with purge, its run records, their output and
-- its last/ entry too (otherwise its history is kept).
function M.rm_job(name, opts)
  opts = opts or {}
  local ok, nerr, ncode = check_name("job", name)
  if not ok then return nil, nerr, ncode end
  local e = etcd()
  local jkey = keys.key(U.prefix(), "jobs", name)
  local ops = {
    { delete = { key = jkey, prev_kv = true } },
    { delete = { key = keys.key(U.prefix(), "paused", name) } },
    { delete = { key = keys.dir(U.prefix(), "status", name), prefix = true } },
    { delete = { key = keys.dir(U.prefix(), "trigger", name), prefix = true } },
  }
  -- Events waiting for the job (pending/ entries with an event id, which
  -- have no record yet) go with it; pending retries of runs that have a
  -- record stay, so those runs are still ended (abandoned) by a node.
  local pend = keys.dir(U.prefix(), "pending", name)
  local pr, perr, pcode = e:get(pend, { prefix = true, keys_only = true })
  if not pr then return nil, perr, pcode end
  for _, kv in ipairs(pr.kvs) do
    if keys.under(pend, kv.key):find("~", 1, true) then ops[#ops + 1] = { delete = { key = kv.key } } end
  end
  if opts.purge then
    ops[#ops + 1] = { delete = { key = keys.key(U.prefix(), "last", name) } }
    ops[#ops + 1] = { delete = { key = keys.dir(U.prefix(), "output", name), prefix = true } }
    ops[#ops + 1] = { delete = { key = keys.dir(U.prefix(), "runs", name), prefix = true } }
  end
  local r, err, code = e:txn {
    compare = { { key = jkey, target = "create", op = ">", value = 0 } },
    success = ops,
  }
  if not r then return nil, err, code end
  if not r.succeeded then return fail("ENOENT: no job " .. name .. " at " .. jkey, "ENOENT") end
  local vok, verr = versions.record("job", name, r.revision, nil, { op = "rm", author = opts.author },
    r.responses[1].prev_kvs[1])
  return { name = name, removed = true, purged = opts.purge and r.responses[#ops].deleted or 0,
           warnings = not vok and json.array { versions.warning("job", name, verr) } or nil }
end

-- Sets or clears the paused flag of an existing job: {job, paused, changed}.
local function set_paused(name, paused)
  local ok, nerr, ncode = check_name("job", name)
  if not ok then return nil, nerr, ncode end
  local jkey, pkey = keys.key(U.prefix(), "jobs", name), keys.key(U.prefix(), "paused", name)
  local op = paused
    and { put = { key = pkey, value = json.encode { at = baton.now() } } }
    or { delete = { key = pkey } }
  local r, err, code = etcd():txn {
    compare = { { key = jkey, target = "create", op = ">", value = 0 } },
    success = { { get = { key = pkey, keys_only = true } }, op },
  }
  if not r then return nil, err, code end
  if not r.succeeded then return fail("ENOENT: no job " .. name .. " at " .. jkey, "ENOENT") end
  local was = r.responses[1].count > 0
  return { job = name, paused = paused, changed = was ~= paused }
end

-- pause_job(name) / resume_job(name) --> {job, paused, changed}: no new
-- instants until resume (runs already started finish).
function M.pause_job(name) return set_paused(name, true) end
function M.resume_job(name) return set_paused(name, false) end

-- The manual-trigger mechanism: a request key P trigger/<job>/<ms>-<rand>
-- with {force=, at=, params=}; the node consumes (and deletes) it and
-- claims the run U.manual_id(at). Returns the key and that run id, or nil,
-- err, code; ENOENT if there is no such job.
local function request_run(name, force, params)
  local jkey = keys.key(U.prefix(), "jobs", name)
  local key = keys.key(U.prefix(), "trigger", name, U.time_id())
  local value = json.encode { force = force, at = baton.now(), params = params }
  local r, err, code = etcd():txn {
    compare = { { key = jkey, target = "create", op = ">", value = 0 } },
    success = { { put = { key = key, value = value } } },
  }
  if not r then return nil, err, code end
  if not r.succeeded then return fail(no_job(name), "ENOENT") end
  -- (the id from `at` as the node will decode it)
  return key, U.manual_id(json.decode(value).at)
end

-- run_job(name [, {params = {k = "v"}, force = bool}]) --> {job, id, key,
-- force, params?}: asks for one run now (a node claims it), honouring the
-- job's concurrency unless force. Each param must be one the job declares
-- (a string); refused (ECONFLICT, nothing queued) when no live node has
-- the job's labels, or when no version of the job loads.
function M.run_job(name, opts)
  opts = opts or {}
  local ok, nerr, ncode = check_name("job", name)
  if not ok then return nil, nerr, ncode end
  local given = opts.params or {}
  if type(given) ~= "table" then return fail("EINVAL: params must be an object of strings", "EINVAL") end
  for k, v in pairs(given) do
    if type(k) ~= "string" then return fail("EINVAL: params must be an object of strings", "EINVAL") end
    -- (a NUL byte: the run's params are stored as JSON, which baton writes without one)
    if k:find("%z") then
      return fail(format("EINVAL: parameter \"%s\": a NUL byte (\\u0000) in its name", (k:gsub("%z", "\\u0000"))),
        "EINVAL")
    end
    if type(v) ~= "string" then
      return fail(format("EINVAL: parameter \"%s\": a string expected, got %s", k,
        v == json.null and "null" or type(v)), "EINVAL")
    end
    if v:find("%z") then
      return fail(format("EINVAL: parameter \"%s\": a NUL byte (\\u0000) in its value", k), "EINVAL")
    end
  end
  if opts.force ~= nil and type(opts.force) ~= "boolean" then
    return fail("EINVAL: force must be true or false", "EINVAL")
  end
  local kv, err, code = get_job(name)
  if kv == nil then return nil, err, code end
  if not kv then return fail(no_job(name), "ENOENT") end
  local st = statuses(name) or {}
  local _, spec = describe(name, kv, false, st)
  if not spec then
    -- Neither this version nor one a node runs loads: nothing can run.
    return fail(tostring(select(2, stored.job(name, kv))) .. "; nothing was queued", "ECONFLICT")
  end
  local known = U.sorted_keys(spec.params)
  for _, k in ipairs(U.sorted_keys(given)) do
    if spec.params[k] == nil then
      local hint = job.did_you_mean(k, known)
      return fail(format("EINVAL: unknown parameter \"%s\"%s; %s", k,
        hint and format(" (did you mean \"%s\"?)", hint) or "",
        #known > 0 and "the job's parameters are " .. concat(known, ", ")
          or "the job declares no params"), "EINVAL")
    end
  end
  local nodes, lerr, lcode = U.live_nodes()
  if not nodes then return nil, lerr, lcode end
  local why = U.no_eligible_node(spec.labels, nodes)
  if why then return fail(why .. "; nothing was queued", "ECONFLICT") end
  local key, id, rcode = request_run(name, opts.force or false, next(given) and given or nil)
  if not key then return nil, id, rcode end
  return { job = name, id = id, key = key, force = opts.force or false,
           params = next(given) and given or nil }
end

-- The runs of job name that kill_job stops: {id=, node=, attempt=} for run
-- id, or for every run of the job with an attempt executing (a running/
-- marker); or nil, err, code.
local function kill_targets(name, id)
  local e = etcd()
  local mpfx = keys.dir(U.prefix(), "running", name)
  if not id then
    local r, err, code = e:get(mpfx, { prefix = true })
    if not r then return nil, err, code end
    if #r.kvs == 0 then
      local kv = get_job(name)
      if kv == false then return fail(no_job(name), "ENOENT") end
      return fail("no run of job " .. name .. " is running (baton job history " .. name
        .. " lists its runs)", "ECONFLICT")
    end
    local list = {}
    for _, mkv in ipairs(r.kvs) do
      local m = decode_object(mkv.value) or {}
      list[#list + 1] = { id = keys.under(mpfx, mkv.key), node = field(m, "node"), attempt = field(m, "attempt") }
    end
    return list
  end
  local r, err, code = e:txn { success = { { get = { key = keys.key(U.prefix(), "running", name, id) } },
                                           { get = { key = keys.key(U.prefix(), "runs", name, id) } } } }
  if not r then return nil, err, code end
  local mkv, rkv = r.responses[1].kvs[1], r.responses[2].kvs[1]
  if mkv then
    local m = decode_object(mkv.value) or {}
    return { { id = id, node = field(m, "node"), attempt = field(m, "attempt") } }
  end
  if not rkv then
    local kv = get_job(name)
    if kv == false then return fail(no_job(name), "ENOENT") end
    return fail(format("ENOENT: no run %s of job %s (baton job history %s lists its runs)", id, name, name),
      "ENOENT")
  end
  local state = field(decode_object(rkv.value) or {}, "state")
  if state == "running" then
    return fail(format("run %s of job %s is not running on any node: its node is gone "
      .. "and the run is being handed over; try again in a moment", id, name), "ECONFLICT")
  end
  return fail(format("run %s of job %s is not running: it is %s", id, name, tostring(state)), "ECONFLICT")
end

-- kill_job(name [, {id = ID, by = WHO}]) --> {job, killed = [ids],
-- runs = [{id, node, attempt, asked}]}: asks the node running run ID (or
-- every running run of the job) to stop it: ctx:cancelled() turns true,
-- its processes get SIGTERM, then SIGKILL after the node's grace period;
-- it is recorded killed (killed_by = WHO) and not retried. killed lists
-- the runs asked; a run whose attempt ended meanwhile has asked = false.
-- It returns at once: the record says when the run has ended.
function M.kill_job(name, opts)
  opts = opts or {}
  local ok, nerr, ncode = check_name("job", name)
  if not ok then return nil, nerr, ncode end
  local targets, err, code = kill_targets(name, opts.id)
  if not targets then return nil, err, code end
  local who = opts.by or U.who()
  local value = runs_mod.cancel_value("killed by " .. who, who)
  local killed = {}
  for _, t in ipairs(targets) do
    local k = keys.run(U.prefix(), name, t.id)
    -- only while the attempt executes: a run that ended keeps no request
    local r, kerr, kcode = etcd():txn {
      compare = { { key = k.marker, target = "create", op = ">", value = 0 } },
      success = { { put = { key = k.cancel, value = value } } },
    }
    if not r then return nil, kerr, kcode end
    t.asked = r.succeeded
    if r.succeeded then killed[#killed + 1] = t.id end
  end
  return { job = name, killed = json.array(killed), runs = json.array(targets) }
end

---------------------------------------------------------------------------
-- nodes, leader, queues

-- nodes() --> the live nodes (`baton nodes --json`): the JSON each keeps
-- at P nodes/<name> ({name, labels, version, running, started, clock,
-- max_skew, ...}) with lease, by name. A record on no lease is no node's
-- (U.live_nodes): left out.
function M.nodes()
  local pfx = keys.dir(U.prefix(), "nodes")
  local r, err, code = etcd():get(pfx, { prefix = true, sort = "key", order = "asc" })
  if not r then return nil, err, code end
  local list = {}
  for _, kv in ipairs(r.kvs) do
    if kv.lease then
      local v = decode_object(kv.value) or {}
      v.name = field(v, "name") or keys.under(pfx, kv.key)
      v.lease = kv.lease
      list[#list + 1] = v
    end
  end
  return json.array(list)
end

-- leader() --> {value (the node's name), key, lease, create_revision}:
-- the oldest key under P election/ (etcd's election recipe); ENOENT when
-- there is none.
function M.leader()
  local pfx = keys.dir(U.prefix(), "election")
  local r, err, code = etcd():get(pfx, { prefix = true, sort = "create", order = "asc", limit = 1 })
  if not r then return nil, err, code end
  local kv = r.kvs[1]
  if not kv then return fail("no leader (nothing under " .. pfx .. ")", "ENOENT") end
  return { value = kv.value, key = kv.key, lease = kv.lease, create_revision = kv.create_revision }
end

-- The largest task value one push stores: etcd's request limit, less the
-- key and the request's framing.
local function max_task(key) return U.MAX_REQUEST - #key - 512 end

local function too_big_task(n, what)
  return format("EFBIG: %sthe task is %s, larger than etcd's request limit of %s "
    .. "(etcd's default --max-request-bytes); nothing was stored", what or "", U.bytes(n), U.bytes(U.MAX_REQUEST))
end

-- queue_push(queue, value) --> {queue, key, revision}: a task under
-- P queue/<queue>/<id>, id = <unix ms, 13 digits>-<16 random hex digits>
-- (docs/guide.md, "5. Queues"), created only if absent.
function M.queue_push(queue, value)
  if not job.valid_name(queue) then
    return fail(format("EINVAL: invalid queue name \"%s\" (%s)", tostring(queue), U.NAME_RULE), "EINVAL")
  end
  if type(value) ~= "string" then return fail("EINVAL: the task value must be a string", "EINVAL") end
  if value:find("\0", 1, true) then
    -- (a run is given text: node/runs.lua would record it failed, unfit)
    return fail("EINVAL: a task cannot hold a NUL byte; nothing was stored", "EINVAL")
  end
  local key = keys.key(U.prefix(), "queue", queue, U.time_id())
  if #value > max_task(key) then return fail(too_big_task(#value), "EFBIG") end
  -- created only if absent: an id collision must not overwrite a task
  local r, err, code = etcd():txn {
    compare = { { key = key, target = "create", op = "==", value = 0 } },
    success = { { put = { key = key, value = value } } },
  }
  if not r then return nil, err, code end
  if not r.succeeded then return fail("EEXIST: " .. key .. " exists; try again", "EEXIST") end
  return { queue = queue, key = key, revision = r.revision }
end

-- The ends of the JSON value that starts at byte i of s (a well-formed
-- array: json.decode has read it): the byte after it. Strings are skipped
-- whole, so brackets and commas inside them do not count.
local function skip_value(s, i)
  local depth = 0
  while true do
    local j = s:find('[%[%]{}",]', i)
    if not j then return #s + 1 end
    local c = s:sub(j, j)
    if c == '"' then
      local k = j + 1
      while true do
        local q = s:find('["\\]', k)
        if not q then return #s + 1 end
        if s:sub(q, q) == "\\" then k = q + 2 else k = q + 1; break end
      end
      i = k
    elseif c == "[" or c == "{" then
      depth, i = depth + 1, j + 1
    elseif depth > 0 then
      if c ~= "," then depth = depth - 1 end
      i = j + 1
    else
      return j -- a ',' or the array's ']' at the element's own level
    end
  end
end

-- queue_tasks(text[, name]) --> {values...}, where: the tasks of a batch push
-- (`baton queue push QUEUE -`, --file). When the first non-blank character
-- is '[', text is a JSON array and each element a task: a string as it
-- is, any other value as its JSON text (as written, not re-encoded);
-- otherwise each line is a task (a trailing "\r" removed; blank lines
-- skipped). name says what text is in messages ("standard input", a
-- file; default "the input"); where(i) names task i ("FILE, line 7",
-- "FILE, element 3").
-- Errors: EINVAL (not a JSON array, no task at all, a string with \u0000).
function M.queue_tasks(text, name)
  name = name or "the input"
  if type(text) ~= "string" then return fail("EINVAL: the tasks must be a string", "EINVAL") end
  local first = text:find("%S")
  local values, where = {}
  if first and text:sub(first, first) == "[" then
    -- (\u0000 read as U+FFFD, not cut short: refused below, naming the element)
    local arr, jerr = json.decode(text, { nul = "replace" })
    -- The elements' own text, between the commas of the array's level.
    local spans, i, stop = {}, first + 1
    if arr ~= nil and type(arr) == "table" then
      if text:find("^%s*%]", i) then
        stop = text:find("]", i, true)
      else
        while true do
          local j = skip_value(text, i)
          spans[#spans + 1] = text:sub(i, j - 1):match("^%s*(.-)%s*$")
          if text:sub(j, j) ~= "," then stop = j; break end
          i = j + 1
        end
      end
      -- (the decoder stops at the end of the array: text after it is ours to refuse)
      local rest = text:find("%S", stop + 1)
      if text:sub(stop, stop) ~= "]" or #spans ~= #arr then arr, jerr = nil, "not one JSON array"
      elseif rest then arr, jerr = nil, format("unexpected text after the array at byte %d", rest) end
    end
    if arr == nil or type(arr) ~= "table" then
      return fail("EINVAL: " .. name .. " starts with '[' but is not a JSON array of tasks: "
        .. tostring(jerr or "not one JSON array"):gsub("^EINVAL: ", "") .. "; nothing was stored", "EINVAL")
    end
    for n, raw in ipairs(spans) do
      local v = arr[n]
      if type(v) == "string" then
        -- (a task holds no NUL byte: one spelled \u0000, decoded as U+FFFD,
        -- or a raw one is refused rather than stored changed)
        if raw:find("\0", 1, true) then
          return fail(format("EINVAL: %s, element %d: a task cannot hold a NUL byte; nothing was stored", name, n), "EINVAL")
        end
        for bs in raw:gmatch("(\\+)u0000") do
          if #bs % 2 == 1 then
            return fail(format("EINVAL: %s, element %d: a task cannot hold \\u0000; nothing was stored", name, n), "EINVAL")
          end
        end
        values[n] = v
      else
        values[n] = raw
      end
    end
    where = function(k) return name .. ", element " .. k end
  else
    local lines = {}
    local ln = 0
    for line in (text:sub(-1) == "\n" and text or text .. "\n"):gmatch("([^\n]*)\n") do
      ln = ln + 1
      line = line:gsub("\r$", "")
      if line:find("%S") then
        values[#values + 1] = line
        lines[#values] = ln
      end
    end
    where = function(k) return name .. ", line " .. lines[k] end
  end
  if #values == 0 then
    return fail("EINVAL: no tasks in " .. name .. " (it is empty, blank, or an empty JSON array); "
      .. "nothing was stored", "EINVAL")
  end
  return values, where
end

-- How many puts one transaction of a batch push holds (etcd's default
-- --max-txn-ops is 128), and how many bytes of keys and values at most
-- (well under etcd's 1.5 MiB request limit; a bigger single task goes
-- alone).
M.PUSH_TXN_OPS = 128
M.PUSH_TXN_BYTES = 1024 * 1024

-- queue_push_many(queue, values[, where]) --> {queue, count, keys,
-- revision}: every value a task under P queue/<queue>/<id>, in txns of
-- PUSH_TXN_OPS puts (each created only if absent), one after the other,
-- so that both the ids and the create revisions follow the order of values
-- (and of the txns, a node claims tasks by create revision, then key). The
-- ids have the single push's format, <unix ms>-<16 hex digits>, where the
-- hex digits are 8 random ones for this push and a counter: ids of one
-- millisecond sort in push order too. Everything is checked before the
-- first txn: a bad queue name or a task over etcd's limit stores nothing.
-- When etcd fails midway, the txns already applied stay: the error says
-- how many tasks were stored, and the fourth value is {stored = n, keys =
-- the keys stored}. where(i) names task i in messages (M.queue_tasks).
function M.queue_push_many(queue, values, where)
  if not job.valid_name(queue) then
    return fail(format("EINVAL: invalid queue name \"%s\" (%s)", tostring(queue), U.NAME_RULE), "EINVAL")
  end
  if type(values) ~= "table" or #values == 0 then
    return fail("EINVAL: no tasks to push; nothing was stored", "EINVAL")
  end
  where = where or function(i) return "task " .. i end
  local pfx = keys.dir(U.prefix(), "queue", queue)
  local keylen = #pfx + 13 + 1 + 16
  local max = U.MAX_REQUEST - keylen - 512
  for i, v in ipairs(values) do
    if type(v) ~= "string" then
      return fail(format("EINVAL: %s: a task value must be a string; nothing was stored", where(i)), "EINVAL")
    end
    if #v > max then return fail(too_big_task(#v, where(i) .. ": "), "EFBIG") end
    if v:find("\0", 1, true) then
      return fail(format("EINVAL: %s: a task cannot hold a NUL byte; nothing was stored", where(i)), "EINVAL")
    end
  end
  local e = etcd()
  local salt, counter, last_ms = U.random_hex(4), 0, 0
  local made, n, rev = {}, #values, nil
  local i = 1
  while i <= n do
    local ms = math.max(math.floor(baton.now() * 1000), last_ms)
    last_ms = ms
    local compare, success, bytes = {}, {}, 0
    local first = i
    local dir = keys.dir(U.prefix(), "queue", queue)
    while i <= n and #success < M.PUSH_TXN_OPS do
      local size = 2 * keylen + #values[i] + 64
      if #success > 0 and bytes + size > M.PUSH_TXN_BYTES then break end
      local key = dir .. format("%013d-%s%08x", ms, salt, counter)
      counter = counter + 1
      compare[#compare + 1] = { key = key, target = "create", op = "==", value = 0 }
      success[#success + 1] = { put = { key = key, value = values[i] } }
      made[i] = key
      bytes, i = bytes + size, i + 1
    end
    local r, err, code
    for try = 1, 3 do
      r, err, code = e:txn { compare = compare, success = success }
      if r then break end
      -- (the answer may have been lost after the txn was applied: then a
      -- try again fails its compares, and the first key is there)
      if try < 3 then baton.sleep(0.2 * try) end
    end
    local applied = r and r.succeeded
    if not applied then
      -- A try whose answer was lost may have stored them (then the next
      -- try fails its compares): the first key says so.
      local g = e:get(made[first])
      if g and g.kvs[1] and g.kvs[1].value == values[first] then
        applied = true
      elseif r then
        err, code = "EEXIST: a task id of this push exists already; try again", "EEXIST"
      elseif g then
        code = code or "EIO"
      else
        err = tostring(err) .. " (whether the last txn was applied is unknown)"
      end
    end
    if not applied then
      local nstored = first - 1
      local kept = {}
      for k = 1, nstored do kept[k] = made[k] end
      return nil, format("%s; %d of %d tasks were stored (the first %d of the input), the rest were not",
        tostring(err), nstored, n, nstored), code or "EIO", { stored = nstored, keys = json.array(kept) }
    end
    rev = (r and r.succeeded) and r.revision or rev
  end
  return { queue = queue, count = n, keys = json.array(made), revision = rev }
end

---------------------------------------------------------------------------
-- policies

-- Status records of policies: {[name] = {{node=, revision=, error=}, ...}}
-- (of one policy when name is given).
local function policy_statuses(name, revision)
  local pfx = name and keys.dir(U.prefix(), "policy-status", name) or keys.dir(U.prefix(), "policy-status")
  local r, err, code = etcd():get(pfx, { prefix = true, revision = revision })
  if not r then return nil, err, code end
  local all = {}
  for _, kv in ipairs(r.kvs) do
    local pname, node = keys.split(U.prefix(), "policy-status", kv.key)
    if pname then
      local v = decode_object(kv.value) or { error = "unreadable status: " .. kv.value }
      all[pname] = all[pname] or {}
      table.insert(all[pname], { node = node, revision = field(v, "revision"), error = field(v, "error") })
    end
  end
  return all
end

-- What is known of one policy: stored kv (or nil), its module (described
-- by the sandbox: stored.policy, which verifies it first where the
-- process trusts keys) or load error, the built-in of the same name, and
-- node statuses. selftest: run its self-test too (the sandbox's result is
-- the third value).
local function describe_policy(name, kv, st, selftest)
  local d = { name = name, builtin = policy.builtin(name) ~= nil, stored = kv ~= nil, broken = false }
  local mod, err, described
  if kv then
    d.revision, d.key = kv.mod_revision, kv.key
    mod, err = stored.policy(name, kv, { selftest = selftest })
    if not mod then d.broken, d.error = true, err else described = err end
  else
    mod = policy.builtin(name)
  end
  if mod then
    d.description = type(mod.description) == "string" and mod.description or nil
    d.functions = json.array(policy.functions(mod))
    d.selftest = mod.selftest ~= nil
  end
  d.status = json.array(st or {})
  for _, s in ipairs(d.status) do
    if s.error and (not kv or s.revision == nil or s.revision == kv.mod_revision) then
      d.broken = true
      d.error = d.error or (s.node .. ": " .. tostring(s.error))
    end
  end
  return d, mod, described
end

-- The self-test result of a policy module: from the sandbox's description
-- of a stored one, run here for a built-in (the node's own code). ok,
-- lines | false, reason.
local function selftest_of(mod, described)
  if described then
    local t = described.selftest or { ok = true, lines = {} }
    if t.ok then return true, t.lines or {} end
    return false, t.error
  end
  return policy.selftest(mod)
end

-- list_policies() --> every policy, stored and built in, by name (`baton
-- policy ls --json`): {name, builtin, stored, broken, error?, revision?,
-- key?, description?, functions [...], selftest (has one), status [...]}.
function M.list_policies()
  local pfx = keys.dir(U.prefix(), "policies")
  local r, err, code = etcd():get(pfx, { prefix = true, sort = "key", order = "asc" })
  if not r then return nil, err, code end
  local st, serr, scode = policy_statuses(nil, r.revision)
  if not st then return nil, serr, scode end
  local kvs, names = {}, {}
  for _, kv in ipairs(r.kvs) do
    local name = keys.under(pfx, kv.key)
    kvs[name] = kv
    names[#names + 1] = name
  end
  for _, name in ipairs(policy.BUILTINS) do
    if not kvs[name] then names[#names + 1] = name end
  end
  table.sort(names)
  local list = {}
  for _, name in ipairs(names) do list[#list + 1] = (describe_policy(name, kvs[name], st[name])) end
  return json.array(list)
end

-- show_policy(name) --> as in list_policies, with source (when stored) and
-- selftest = {passed, lines | error} when it has one (`baton policy show
-- --json`); ENOENT when it is neither stored nor built in.
function M.show_policy(name)
  local ok, nerr, ncode = check_name("policy", name)
  if not ok then return nil, nerr, ncode end
  local key = keys.key(U.prefix(), "policies", name)
  local r, err, code = etcd():get(key)
  if not r then return nil, err, code end
  local kv = r.kvs[1]
  if not kv and not policy.builtin(name) then
    return fail("ENOENT: no policy " .. name .. " at " .. key .. " and no built-in of that name", "ENOENT")
  end
  local st, serr, scode = policy_statuses(name, r.revision)
  if not st then return nil, serr, scode end
  local d, mod, described = describe_policy(name, kv, st[name], true)
  local sok, slines
  if mod then sok, slines = selftest_of(mod, described) end
  d.source = kv and kv.value or nil
  d.version = kv and kv.version or nil
  d.signed_by = kv and sign.signer(kv.value) or nil
  d.selftest = mod and mod.selftest and { passed = sok, lines = sok and json.array(slines) or nil,
    error = not sok and slines or nil } or nil
  return d
end

-- check_policy(name, source [, chunkname]) --> module, selftest lines:
-- compile, fields and self-test, as policy put checks before it writes.
function M.check_policy(name, source, chunkname)
  local ok, nerr, ncode = check_name("policy", name)
  if not ok then return nil, nerr, ncode end
  if type(source) ~= "string" then return fail("EINVAL: the policy source must be a string", "EINVAL") end
  local big = too_big("policy", name, #source)
  if big then return fail(big, "EFBIG") end
  local kv, kopts, kcode = incoming("policy", name, source, chunkname)
  if not kv then return nil, kopts, kcode end
  kopts.selftest = true
  local mod, described = stored.policy(name, kv, kopts)
  if not mod then return invalid(described) end
  local sok, lines = selftest_of(mod, type(described) == "table" and described or nil)
  if not sok then return invalid(format("EINVAL: policy %s: %s; nothing stored", name, lines)) end
  return mod, lines
end

-- put_policy(name, source [, opts]) --> {name, key, revision, created,
-- overrides_builtin, selftest = {passed = true, decisions = n} | nil}:
-- stores it at P policies/<name> once check_policy passes; every node uses
-- it from its next decision on. opts.revision and opts.sign as in put_job.
function M.put_policy(name, source, opts)
  opts = opts or {}
  local mod, lines, vcode, extra = M.check_policy(name, source, opts.chunkname)
  if not mod then return nil, lines, vcode, extra end
  local res, vwarn, code = store_source("policy", name, source, opts)
  if not res then return nil, vwarn, code end
  res.warnings = vwarn and json.array { vwarn } or nil
  res.overrides_builtin = policy.builtin(name) ~= nil
  res.selftest = mod.selftest and { passed = true, decisions = #lines } or nil
  return res
end

-- rm_policy(name) --> {name, removed = true, now = "the built-in NAME" |
-- "the default policy"}: deletes a stored policy and its node statuses;
-- jobs naming it use the built-in of that name, or the default.
function M.rm_policy(name, opts)
  opts = opts or {}
  local ok, nerr, ncode = check_name("policy", name)
  if not ok then return nil, nerr, ncode end
  local key = keys.key(U.prefix(), "policies", name)
  local r, err, code = etcd():txn {
    compare = { { key = key, target = "create", op = ">", value = 0 } },
    success = {
      { delete = { key = key, prev_kv = true } },
      { delete = { key = keys.dir(U.prefix(), "policy-status", name), prefix = true } },
    },
  }
  if not r then return nil, err, code end
  if not r.succeeded then
    return fail("ENOENT: no policy " .. name .. " at " .. key
      .. (policy.builtin(name) and " (built-in policies cannot be removed)" or ""), "ENOENT")
  end
  local vok, verr = versions.record("policy", name, r.revision, nil, { op = "rm", author = opts.author },
    r.responses[1].prev_kvs[1])
  return { name = name, removed = true,
           warnings = not vok and json.array { versions.warning("policy", name, verr) } or nil,
           now = policy.builtin(name) and ("the built-in " .. name) or "the default policy" }
end

---------------------------------------------------------------------------
-- the version log (baton.versions): `baton job|policy versions|diff|
-- rollback`, GET /api/v1/jobs/{name}/versions

-- versions(kind, name) --> the log, newest first (versions.list).
function M.versions(kind, name)
  local ok, nerr, ncode = check_name(kind, name)
  if not ok then return nil, nerr, ncode end
  return versions.list(kind, name)
end

-- diff_versions(kind, name [, r1 [, r2]]) --> unified diff text ("" for
-- the same source), r1, r2: of the sources at revisions r1 and r2. r2
-- defaults to the revision stored now, r1 to the newest version before r2
-- that has a source (GET /api/v1/jobs/{name}/diff: what changed last).
function M.diff_versions(kind, name, r1, r2)
  local ok, nerr, ncode = check_name(kind, name)
  if not ok then return nil, nerr, ncode end
  if not r1 or not r2 then
    local list, err, code = versions.list(kind, name)
    if not list then return nil, err, code end
    for _, v in ipairs(list) do
      if not r2 and v.current then r2 = v.revision end
    end
    if not r2 then
      return fail(format("ENOENT: no %s %s is stored now; give two revisions (baton %s versions %s lists them)",
        kind, name, kind, name), "ENOENT")
    end
    for _, v in ipairs(list) do -- (newest first)
      if not r1 and v.revision < r2 and v.op ~= "rm" then r1 = v.revision end
    end
    if not r1 then
      return fail(format("ENOENT: %s %s has no version before revision %d to compare it with", kind, name, r2),
        "ENOENT")
    end
  end
  local text, err, code = versions.diff(kind, name, r1, r2)
  if not text then return nil, err, code end
  return text, r1, r2
end

-- rollback(kind, name, rev [, opts]) --> as put_job / put_policy, with
-- rolled_back = rev.
function M.rollback(kind, name, rev, opts)
  local ok, nerr, ncode = check_name(kind, name)
  if not ok then return nil, nerr, ncode end
  return versions.rollback(kind, name, rev, opts)
end

return M
