-- baton worker: a pooled worker process of `baton node` (not for direct
-- use). The node starts it with a channel (baton.spawn{..., channel = true})
-- and sends one message per line:
--
--   node -> worker  {"run": {job, id, fire, fence, attempt, node,
--                    code_revision, deadline, marker, task, shard, record}}
--   worker -> node  {"ok": bool, "error": string|null, "recorded": bool,
--                    "retire": bool}
--
-- One run at a time. For each run the worker reads the job's source at the
-- revision the node loaded (kept in a small cache), compiles it in a fresh
-- environment and calls run(ctx) with the full Lua API. SIGTERM asks the
-- current run to stop (ctx:cancelled()). A run that leaves coroutines or
-- child processes behind, or changes a loaded module or the string
-- metatable, makes the worker retire (exit after its reply), so the next
-- run starts clean; the node kills a worker whose run timed out and
-- starts a fresh one. When the channel closes (the node stopped) the worker
-- exits; if the node dies, the kernel kills the worker (PR_SET_PDEATHSIG).
local baton = require "baton"
local jobmod = require "baton.job"
local runs = require "baton.node.runs"
local util = require "baton.cli.util"
local json = baton.json

local SOURCE_CACHE = 8 * 1024 * 1024 -- bytes of job sources kept, by job and revision

local function opt(v)
  return v ~= json.null and type(v) == "table" and v or nil
end

-- Records a success right here, guarded by the run's fence, so that a run
-- that completed is recorded even if the node froze after it. The node
-- sent the record as it claimed it.
local function record_success(run, started)
  local rec = opt(run.record)
  if not rec then return false end
  rec.state, rec.finished, rec.error, rec.fence = "succeeded", baton.now(), nil, run.fence
  rec.duration = rec.finished - (rec.started or started)
  return runs.record_end(baton.etcd, util.prefix(), { job = run.job, id = run.id, task = opt(run.task) },
                         run.fence, rec) ~= nil
end

-- A worker must not outlive its node: if the node dies (even by SIGKILL),
-- the kernel kills the worker, so a dead node's runs stop and the leader
-- can run them elsewhere.
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

local sources, nsources = {}, 0

-- The job's source at the revision the node loaded.
local function source(run)
  local ck = run.job .. "@" .. tostring(run.code_revision)
  if sources[ck] then return sources[ck] end
  local key = util.prefix() .. "jobs/" .. run.job
  local r, err = baton.etcd:get(key, { revision = run.code_revision })
  local kv = r and r.kvs[1]
  if not kv then
    return nil, "cannot read the job source at revision " .. tostring(run.code_revision)
      .. ": " .. tostring(err or "not found")
  end
  if nsources + #kv.value > SOURCE_CACHE then sources, nsources = {}, 0 end
  sources[ck] = { text = kv.value, revision = kv.mod_revision }
  nsources = nsources + #kv.value
  return sources[ck]
end

local function context(run, state)
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
    deadline = run.deadline, fence = run.fence, task = opt(run.task), shard = opt(run.shard),
    log = { info = logger("info"), warn = logger("warn"), error = logger("error"),
            debug = logger("debug") },
  }
  function ctx:cancelled() return state.cancelled end
  -- A put that succeeds only while this run still owns its claim: the
  -- lease-bound marker must still be the one created with the claim.
  function ctx:put_fenced(k, v)
    if type(k) ~= "string" or type(v) ~= "string" then
      error("put_fenced: string key and value expected", 2)
    end
    local t, terr, code = baton.etcd:txn {
      compare = { { key = run.marker, target = "create", op = "==", value = run.fence } },
      success = { { put = { key = k, value = v } } },
    }
    if not t then return nil, terr, code end
    if not t.succeeded then
      return nil, "ELOST: the run's claim was lost (node lease expired or run taken over)", "ELOST"
    end
    return true
  end
  return ctx
end

-- What every run of this process shares: the loaded modules (_G, string,
-- baton, ...) and the string metatable, each with a copy of its fields.
local function shared_state()
  local function copy(t)
    local c = {}
    for k, v in pairs(t) do c[k] = v end
    return c
  end
  local snap = { mods = {}, smt = getmetatable("") }
  for name, mod in pairs(package.loaded) do
    snap.mods[name] = { mod = mod, fields = type(mod) == "table" and copy(mod) or nil }
  end
  snap.smt_fields = snap.smt and copy(snap.smt)
  return snap
end

local function same_fields(t, fields)
  for k, v in pairs(t) do if not rawequal(fields[k], v) then return false end end
  for k in pairs(fields) do if rawget(t, k) == nil then return false end end
  return true
end

-- True when what the run found shared is as it found it (a module it
-- loaded for itself does not count).
local function shared_unchanged(snap)
  for name, m in pairs(snap.mods) do
    local mod = package.loaded[name]
    if not rawequal(mod, m.mod) then return false end
    if m.fields and not same_fields(mod, m.fields) then return false end
  end
  local smt = getmetatable("")
  return rawequal(smt, snap.smt) and (not smt or same_fields(smt, snap.smt_fields))
end

-- Runs one run; returns the reply for the node.
local function execute(run, state)
  local src, serr = source(run)
  if not src then return { ok = false, error = serr } end
  local spec, lerr = jobmod.load(src.text, run.job, src.revision)
  if not spec then return { ok = false, error = lerr } end
  local started = baton.now()
  local ok, rerr = pcall(spec.run, context(run, state))
  -- A stop request may have ended what the run waited on (SIGTERM kills
  -- the children of the worker's group too): let it be seen first, and
  -- count a run that ends past its deadline as timed out.
  baton.sleep(0)
  if not ok then return { ok = false, error = tostring(rerr) } end
  if state.cancelled then return { ok = false, error = "cancelled" } end
  if run.deadline and baton.now() >= run.deadline then
    return { ok = false, error = "timed out" }
  end
  return { ok = true, recorded = record_success(run, started) }
end

return function()
  local ch = baton.channel()
  if not ch then
    io.stderr:write("baton: worker: started without a channel; this command is for baton node\n")
    return baton.exit(2)
  end
  die_with_parent(tonumber(os.getenv("BATON_NODE_PID")))
  local state = {}
  baton.go(function()
    while true do
      baton.signal { "SIGTERM", "SIGINT" }
      state.cancelled = true
    end
  end)
  while true do
    local line = ch:recv()
    if not line then return baton.exit(0) end
    local okd, msg = pcall(json.decode, line)
    local run = okd and type(msg) == "table" and opt(msg.run)
    if run and not state.busy then
      state.busy, state.cancelled = true, false
      local before, shared = baton._coroutines(), shared_state()
      baton.go(function()
        local reply = execute(run, state)
        -- Of the run, only this coroutine may be left, and what all runs
        -- share must be as it was: a job that patched a module or the
        -- string metatable would otherwise change the next job's world.
        reply.retire = baton._coroutines() > before + 1 or baton._children() > 0
          or not shared_unchanged(shared)
        state.busy = false
        ch:send(json.encode(reply))
        if reply.retire then baton.exit(0) end
      end)
    end
  end
end
