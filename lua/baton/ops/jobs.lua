-- The job resource: listing and describing stored jobs (with the view of
-- statuses and last runs that ls and the node's API list), showing one,
-- checking a source as put does, storing, removing, pausing and resuming.
-- The reads of one job that ops/runs.lua shares (its source kv, the
-- ENOENT message, its statuses and run records, its description) are
-- exported too; ops/init.lua says which functions are the API.
local baton = require "baton"
local util = require "baton.util"
local job = require "baton.job"
local policy = require "baton.policy"
local keys = require "baton.keys"
local record = require "baton.record"
local sign = require "baton.sign"
local stored = require "baton.stored"
local versions = require "baton.versions"
local common = require "baton.ops.common"
local cycles = require "baton.ops.cycles"
local cluster = require "baton.ops.cluster"
local store = require "baton.ops.store"

local json = baton.json
local format = string.format
local type, ipairs, tostring = type, ipairs, tostring

local M = {}

local function etcd() return baton.etcd end

local fail, invalid, check_name, too_big = common.fail, common.invalid, common.check_name, common.too_big
local decode_object, field = util.decode_object, util.field

-- The job's source kv, or false when there is none; nil, err, code on failure.
local function get_job(name)
  local r, err, code = etcd():get(keys.key(util.prefix(), "jobs", name))
  if not r then return nil, err, code end
  return r.kvs[1] or false, r.revision
end

-- The error for a job that is not there, with a hint when the prefix holds
-- no job at all (the usual reason: another --prefix or BATON_PREFIX).
local function no_job(name)
  local msg = "ENOENT: no job " .. name .. " at " .. keys.key(util.prefix(), "jobs", name)
  local r = etcd():get(keys.dir(util.prefix(), "jobs"), { prefix = true, count_only = true })
  if r and r.count == 0 then
    msg = msg .. " (there are no jobs under " .. keys.key(util.prefix(), "jobs") .. "/ at all; is --prefix right?)"
  end
  return msg
end
M.no_job = no_job

-- Status records of one job: list of {node=, revision=, error=, time=, running=}.
local function statuses(name)
  local r, err, code = etcd():get(keys.dir(util.prefix(), "status", name), { prefix = true })
  if not r then return nil, err, code end
  local list = {}
  for _, kv in ipairs(r.kvs) do
    local v = decode_object(kv.value) or { error = "unreadable status: " .. kv.value }
    list[#list + 1] = {
      node = select(2, keys.split(util.prefix(), "status", kv.key)), revision = field(v, "revision"),
      error = field(v, "error"), time = field(v, "time"), running = field(v, "running"),
    }
  end
  return list
end

-- Run records of one job, newest first (key order), at most n (nil: all);
-- each with key = its run id.
local function records(name, n)
  local pfx = keys.dir(util.prefix(), "runs", name)
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
    local r, err = etcd():get(keys.key(util.prefix(), "jobs", name), { revision = rev })
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
    if nf and not paused then d.next = util.rfc3339(nf, spec.cron) end
  end
  return d, spec, not paused and nf or nil
end

-- {run=, state=, fire=, started=, finished=, node=, attempt=} of a record
-- (rec.key its id), as `last` in job ls.
local function last_of(rec)
  return record.last(rec.key, rec)
end

-- The last runs of the jobs in names that have no P last/ entry (records
-- written before it existed, raw puts): the newest record of each, 128
-- jobs per request. Fills last[name].
local function last_fallback(names, last)
  local e = etcd()
  for i = 1, #names, 128 do
    local ops = {}
    for k = i, math.min(i + 127, #names) do
      ops[#ops + 1] = { get = { key = keys.dir(util.prefix(), "runs", names[k]), prefix = true, sort = "key",
                                order = "desc", limit = 1 } }
    end
    local r, err, code = e:txn { success = ops }
    if not r then return nil, err, code end
    for k, resp in ipairs(r.responses) do
      local name, kv = names[i + k - 1], resp.kvs[1]
      if kv then
        local rec = decode_object(kv.value) or { state = "unreadable" }
        rec.key = select(2, keys.split(util.prefix(), "runs", kv.key))
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
  local P = util.prefix()
  local jpfx, ppfx, spfx, lpfx = keys.dir(P, "jobs"), keys.dir(P, "paused"), keys.dir(P, "status"), keys.dir(P, "last")
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
  local P, every = util.prefix(), opts.yield_every
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
  local pr, perr, pcode = e:get(keys.key(util.prefix(), "paused", name))
  if not pr then return nil, perr, pcode end
  local st, serr, scode = statuses(name)
  if not st then return nil, serr, scode end
  local rs, rerr, rcode = records(name, 10)
  if not rs then return nil, rerr, rcode end
  local d, spec = describe(name, kv, pr.count > 0, st)
  local next = {}
  if spec and not d.paused then
    for i, f in ipairs(job.next_fires(spec, 5)) do next[i] = util.rfc3339(f, spec.cron) end
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

-- nil if the job's policy exists (built in, or stored under P policies/),
-- else the message refusing it, with the closest known name; nil, err,
-- code when etcd cannot be asked.
local function unknown_policy(spec)
  if policy.builtin(spec.policy) then return false end
  local pfx = keys.dir(util.prefix(), "policies")
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
  local kv, kopts, kcode = store.incoming("job", name, source, chunkname)
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
  local res, vwarn, code = store.store_source("job", name, source, opts)
  if not res then return nil, vwarn, code end
  local warnings = {}
  local nodes = cluster.live_nodes()
  local why = nodes and cluster.no_eligible_node(spec.labels, nodes)
  if why then warnings[1] = why .. "; the job runs only once such a node is up" end
  warnings[#warnings + 1] = vwarn
  -- (a notifier whose channel P config/notify does not set: baton.notify,
  -- required here, not at the top: only a put needs it, and loading it
  -- costs every process that loads baton.ops ~0.35 ms)
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
  local jkey = keys.key(util.prefix(), "jobs", name)
  local ops = {
    { delete = { key = jkey, prev_kv = true } },
    { delete = { key = keys.key(util.prefix(), "paused", name) } },
    { delete = { key = keys.dir(util.prefix(), "status", name), prefix = true } },
    { delete = { key = keys.dir(util.prefix(), "trigger", name), prefix = true } },
  }
  -- Events waiting for the job (pending/ entries with an event id, which
  -- have no record yet) go with it; pending retries of runs that have a
  -- record stay, so those runs are still ended (abandoned) by a node.
  local pend = keys.dir(util.prefix(), "pending", name)
  local pr, perr, pcode = e:get(pend, { prefix = true, keys_only = true })
  if not pr then return nil, perr, pcode end
  for _, kv in ipairs(pr.kvs) do
    if keys.under(pend, kv.key):find("~", 1, true) then ops[#ops + 1] = { delete = { key = kv.key } } end
  end
  if opts.purge then
    ops[#ops + 1] = { delete = { key = keys.key(util.prefix(), "last", name) } }
    ops[#ops + 1] = { delete = { key = keys.dir(util.prefix(), "output", name), prefix = true } }
    ops[#ops + 1] = { delete = { key = keys.dir(util.prefix(), "runs", name), prefix = true } }
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
  local jkey, pkey = keys.key(util.prefix(), "jobs", name), keys.key(util.prefix(), "paused", name)
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

M.get_job, M.statuses, M.records, M.describe = get_job, statuses, records, describe

return M
