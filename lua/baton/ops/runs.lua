-- The runs of jobs: a job's history, the newest runs across jobs, one run
-- with its output, asking for a run now (job run) and stopping runs (job
-- kill). The run records themselves are written by the nodes and workers;
-- here they are read, and requests are put for a node to act on.
local baton = require "baton"
local util = require "baton.util"
local job = require "baton.job"
local keys = require "baton.keys"
local stored = require "baton.stored"
local node_cancel = require "baton.node.cancel"
local output = require "baton.output"
local common = require "baton.ops.common"
local cluster = require "baton.ops.cluster"
local jobs_mod = require "baton.ops.jobs"

local json = baton.json
local format, concat = string.format, table.concat
local type, ipairs, pairs, tostring, tonumber = type, ipairs, pairs, tostring, tonumber

local M = {}

local function etcd() return baton.etcd end

local fail, check_name = common.fail, common.check_name
local get_job, no_job, statuses = jobs_mod.get_job, jobs_mod.no_job, jobs_mod.statuses
local describe, records = jobs_mod.describe, jobs_mod.records
local decode_object, field = util.decode_object, util.field

-- history(name [, limit]) --> the job's run records, newest first (default
-- 20), each with key = its run id (`baton job history --json`). The
-- records of a removed job are kept, and listed; no job and no records is
-- ENOENT.
function M.history(name, limit)
  local ok, nerr, ncode = check_name("job", name)
  if not ok then return nil, nerr, ncode end
  local rs, err, code = records(name, limit or 20)
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
    local lpfx = keys.dir(util.prefix(), "last")
    local r, err, code = e:get(lpfx, { prefix = true })
    if not r then return nil, err, code end
    last = {}
    for _, kv in ipairs(r.kvs) do last[keys.under(lpfx, kv.key)] = jobs_mod.last_entry(kv.value) end
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
      ops[#ops + 1] = { get = { key = keys.dir(util.prefix(), "runs", jobs[k].name), prefix = true, sort = "key",
                                order = "desc", limit = limit } }
    end
    i = i + #ops
    local tr, terr, tcode = e:txn { success = ops }
    if not tr then return nil, terr, tcode end
    for k, resp in ipairs(tr.responses) do
      local pfx = keys.dir(util.prefix(), "runs", names[k])
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
  local P = util.prefix()
  if id == "latest" then
    -- (no run id is a word: instants, task and event ids start with digits)
    local l, lerr, lcode = e:get(keys.dir(util.prefix(), "runs", name), { prefix = true, sort = "create", order = "desc",
                                                               limit = 1, keys_only = true })
    if not l then return nil, lerr, lcode end
    if not l.kvs[1] then
      local jkv, jerr, jcode = get_job(name)
      if jkv == nil then return nil, jerr, jcode end
      if not jkv then return fail("ENOENT: no job " .. name .. " at " .. keys.key(util.prefix(), "jobs", name), "ENOENT") end
      return fail("ENOENT: job " .. name .. " has no runs yet", "ENOENT")
    end
    id = select(2, keys.split(util.prefix(), "runs", l.kvs[1].key))
  end
  local r, err, code = e:txn { success = {
    { get = { key = keys.key(util.prefix(), "runs", name, id) } },
    { get = { key = keys.output(P, name, id), prefix = true } },
  } }
  if not r then return nil, err, code end
  local kv = r.responses[1].kvs[1]
  if not kv then
    local jkv, jerr, jcode = get_job(name)
    if jkv == nil then return nil, jerr, jcode end
    if not jkv then return fail("ENOENT: no job " .. name .. " at " .. keys.key(util.prefix(), "jobs", name), "ENOENT") end
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
  local attempts = util.sorted_keys(by)
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

-- The manual-trigger mechanism: a request key P trigger/<job>/<ms>-<rand>
-- with {force=, at=, params=}; the node consumes (and deletes) it and
-- claims the run util.manual_id(at). Returns the key and that run id, or nil,
-- err, code; ENOENT if there is no such job.
local function request_run(name, force, params)
  local jkey = keys.key(util.prefix(), "jobs", name)
  local key = keys.key(util.prefix(), "trigger", name, util.time_id())
  local value = json.encode { force = force, at = baton.now(), params = params }
  local r, err, code = etcd():txn {
    compare = { { key = jkey, target = "create", op = ">", value = 0 } },
    success = { { put = { key = key, value = value } } },
  }
  if not r then return nil, err, code end
  if not r.succeeded then return fail(no_job(name), "ENOENT") end
  -- (the id from `at` as the node will decode it)
  return key, util.manual_id(json.decode(value).at)
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
  local known = util.sorted_keys(spec.params)
  for _, k in ipairs(util.sorted_keys(given)) do
    if spec.params[k] == nil then
      local hint = job.did_you_mean(k, known)
      return fail(format("EINVAL: unknown parameter \"%s\"%s; %s", k,
        hint and format(" (did you mean \"%s\"?)", hint) or "",
        #known > 0 and "the job's parameters are " .. concat(known, ", ")
          or "the job declares no params"), "EINVAL")
    end
  end
  local nodes, lerr, lcode = cluster.live_nodes()
  if not nodes then return nil, lerr, lcode end
  local why = cluster.no_eligible_node(spec.labels, nodes)
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
  local mpfx = keys.dir(util.prefix(), "running", name)
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
  local r, err, code = e:txn { success = { { get = { key = keys.key(util.prefix(), "running", name, id) } },
                                           { get = { key = keys.key(util.prefix(), "runs", name, id) } } } }
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
  local who = opts.by or util.who()
  local value = node_cancel.cancel_value("killed by " .. who, who)
  local killed = {}
  for _, t in ipairs(targets) do
    local k = keys.run(util.prefix(), name, t.id)
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

-- wait_runs(name, ids, timeout [, each]) --> {[id] = record}: waits until
-- the record of each run ids[i] of job name says it ended (a state other
-- than running), checking every 0.1 s, the runs in turn, for timeout
-- seconds in all (`baton job kill` waits for the runs it stopped). each(id,
-- record), when given, is called for every run in order as soon as its
-- wait is over (record nil: still running at the deadline), so that the
-- caller can say at once how it ended. A run still running at the deadline
-- has no record in the answer; a record etcd cannot give meanwhile counts
-- as still running.
function M.wait_runs(name, ids, timeout, each)
  local ok, nerr, ncode = check_name("job", name)
  if not ok then return nil, nerr, ncode end
  local deadline, ended = baton.monotime() + timeout, {}
  for _, id in ipairs(ids) do
    while true do
      local g = etcd():get(keys.key(util.prefix(), "runs", name, id))
      local rec = g and g.kvs[1] and decode_object(g.kvs[1].value)
      if rec and field(rec, "state") ~= "running" then
        ended[id] = rec
        break
      end
      if baton.monotime() > deadline then break end
      baton.sleep(0.1)
    end
    if each then each(id, ended[id]) end
  end
  return ended
end

return M
