-- baton worker: runs one claimed job run for `baton node` (not for direct
-- use). The node passes the run in BATON_RUN (JSON: job, fire, fence,
-- attempt, node, code_revision, deadline, marker, result, id, task); the
-- worker loads
-- the job's source at the revision the node loaded, calls run(ctx), and
-- writes {ok=, error=} to the result file. Being a process of its own, a
-- job that loops, blocks or crashes costs this worker only.
local baton = require "baton"
local jobmod = require "baton.job"
local util = require "baton.cli.util"
local json = baton.json

local function finish(path, ok, err, recorded)
  local f = io.open(path, "w")
  if f then
    f:write(json.encode { ok = ok, error = err and tostring(err) or json.null,
                          recorded = recorded or false })
    f:close()
  end
  baton.exit(ok and 0 or 1)
end

-- Records a success right here, guarded by the run's fence, so that a run
-- that completed is recorded even if the node froze after it.
local function record_success(run, started)
  local runs = require "baton.node.runs"
  local P = util.prefix()
  local k = runs.keys(P, run.job, run.id)
  local r = baton.etcd:get(k.run)
  local ok, rec = pcall(json.decode, r and r.kvs[1] and r.kvs[1].value or "")
  if not ok or type(rec) ~= "table" or rec.attempt ~= run.attempt then return false end
  rec.state, rec.finished, rec.error, rec.fence = "succeeded", baton.now(), nil, run.fence
  rec.duration = rec.finished - (rec.started or started)
  local task = run.task ~= json.null and type(run.task) == "table" and run.task or nil
  return runs.record_end(baton.etcd, P, { job = run.job, id = run.id, task = task },
                         run.fence, rec) ~= nil
end

-- A worker must not outlive its node: if the node dies (even by SIGKILL),
-- the kernel kills the worker (PR_SET_PDEATHSIG), so a dead node's runs stop
-- and the leader can run them elsewhere.
local function die_with_parent(node_pid)
  local ok, ffi = pcall(require, "ffi")
  if not ok then return end
  pcall(ffi.cdef, [[
    int prctl(int option, unsigned long a2, unsigned long a3, unsigned long a4, unsigned long a5);
    int getppid(void);
  ]])
  ffi.C.prctl(1 --[[PR_SET_PDEATHSIG]], 9 --[[SIGKILL]], 0, 0, 0)
  if node_pid and ffi.C.getppid() ~= node_pid then os.exit(1) end
end

return function()
  local run = json.decode(os.getenv("BATON_RUN") or "")
  if type(run) ~= "table" then
    io.stderr:write("baton: worker: started without a run (BATON_RUN); this command is for baton node\n")
    return baton.exit(2)
  end
  die_with_parent(run.node_pid)
  local e = baton.etcd
  local key = util.prefix() .. "jobs/" .. run.job
  local r, err = e:get(key, { revision = run.code_revision })
  local kv = r and r.kvs[1]
  if not kv then
    return finish(run.result, false, "cannot read the job source at revision "
      .. tostring(run.code_revision) .. ": " .. tostring(err or "not found"))
  end
  local spec, lerr = jobmod.load(kv.value, run.job, kv.mod_revision)
  if not spec then return finish(run.result, false, lerr) end

  local cancelled = false
  baton.go(function()
    baton.signal { "SIGTERM", "SIGINT" }
    cancelled = true
  end)
  local fields = { job = run.job, instant = run.id or util.instant(run.fire), node = run.node,
                   attempt = run.attempt }
  local function logger(level)
    return function(msg, extra)
      local f = {}
      for k, v in pairs(fields) do f[k] = v end
      for k, v in pairs(extra or {}) do f[k] = v end
      baton.log[level](msg, f)
    end
  end
  local ctx = {
    job = run.job, fire = run.fire, attempt = run.attempt, node = run.node,
    deadline = run.deadline, fence = run.fence,
    task = run.task ~= json.null and type(run.task) == "table" and run.task or nil,
    shard = run.shard ~= json.null and type(run.shard) == "table" and run.shard or nil,
    log = { info = logger("info"), warn = logger("warn"), error = logger("error"),
            debug = logger("debug") },
  }
  function ctx:cancelled() return cancelled end
  -- A put that succeeds only while this run still owns its claim: the
  -- lease-bound marker must still be the one created with the claim.
  function ctx:put_fenced(k, v)
    if type(k) ~= "string" or type(v) ~= "string" then
      error("put_fenced: string key and value expected", 2)
    end
    local t, terr, code = e:txn {
      compare = { { key = run.marker, target = "create", op = "==", value = run.fence } },
      success = { { put = { key = k, value = v } } },
    }
    if not t then return nil, terr, code end
    if not t.succeeded then
      return nil, "ELOST: the run's claim was lost (node lease expired or run taken over)", "ELOST"
    end
    return true
  end
  local started = baton.now()
  local ok, rerr = pcall(spec.run, ctx)
  if ok and cancelled then return finish(run.result, false, "cancelled") end
  if ok then return finish(run.result, true, nil, record_success(run, started)) end
  finish(run.result, false, rerr)
end
