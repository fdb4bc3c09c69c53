-- baton worker: a pooled worker process of `baton node` (not for direct
-- use). The node starts it with a channel (baton.spawn{..., channel = true})
-- and gives it one run at a time; the messages they exchange, and their
-- text, are worker/protocol.lua's.
--
-- ctx:put_fenced of up to RELAY_MAX bytes goes through the node: its write
-- is a member of the node's write batcher (node/batch.lua), guarded by the
-- run's fence as it would be alone (succeeded false: the claim is gone),
-- and shares an etcd request with the claims and ends of the node's other
-- runs instead of making one of its own. While the node is frozen it waits
-- (the run is ended if the node's lease may have expired); should the node
-- be gone, it fails (the claim goes with the node's session). A larger put,
-- one with a NUL byte (which the channel's JSON cannot carry), and the
-- run's kept output, the worker writes itself, with the same
-- compare: a job's bulk stays out of the conductor, which nothing a job
-- does may stall (docs/architecture.md, "A run's output").
--
-- A success is handed over (handoff, key job/id/attempt): the node records
-- it, with the ends of its other runs in one etcd request (node/batch.lua),
-- and then says so. The worker may take other runs meanwhile; if the word
-- does not come within HANDOFF seconds (the node froze) it records the
-- success itself, guarded by the run's fence as the node's write is: a run
-- that completed is recorded even if its node froze right after, and of
-- the two writes at most one applies. Not a success that came after the
-- run was asked to stop (a kill, a replace, its node stopping): the node,
-- which asked, records that one as it sees fit.
--
-- One run at a time. For each run the worker takes the job's source at the
-- revision the node loaded (kept in a small cache; the node sends it with
-- the first run of that revision it gives this worker, and a source the
-- cache has dropped is read from etcd at that revision), compiles it in a fresh
-- environment and calls run(ctx) with the full Lua API. What the job
-- prints (print, io.write, io.stdout/io.stderr) becomes log lines of the
-- run, one per line, up to a budget per attempt (worker/io.lua: the node's
-- log is not the place for a run's megabytes); that, its ctx.log lines and
-- what the programs it starts print are also the run's kept output, which
-- the worker stores in etcd while the run runs (worker/output.lua), fenced like
-- ctx:put_fenced. SIGTERM asks the current run to stop
-- (ctx:cancelled()). When run returns, every process it started is ended
-- (native.sweep, by the worker's containment process, runtime/core/contain.h)
-- before its end is recorded or reported. A run that leaves coroutines
-- behind, or changes a loaded module or the string metatable, makes the
-- worker retire (exit after its reply), so the next run starts clean. When
-- the channel closes (the node stopped) the worker exits; if the node
-- dies, its containment process ends the worker and everything below it.
local baton = require "baton"
local keys = require "baton.keys"
local record = require "baton.record"
local native = require "baton.worker.native"
local util = require "baton.util"
local stored = require "baton.stored"
local sign = require "baton.sign"
local protocol = require "baton.worker.protocol"
local run_end = require "baton.run_end"
local events = require "baton.events"
local output = require "baton.worker.output"
local wio = require "baton.worker.io"
local secrets = require "baton.worker.secrets"
local json = baton.json

local SOURCE_CACHE = 8 * 1024 * 1024 -- bytes of job sources kept, by job and revision
local HANDOFF = 1 -- seconds a success waits for the node to record it
-- bytes (key and value) up to which ctx:put_fenced goes through the node;
-- a larger put the worker makes itself, fenced the same way
local RELAY_MAX = 8 * 1024
-- this worker's memory limit (bytes; node/pool.lua), or nil
local MEMORY = tonumber(os.getenv("BATON_RUN_MEMORY"))

local function opt(v)
  return v ~= json.null and type(v) == "table" and v or nil
end

-- The node's channel and the fenced transactions waiting for its answer
-- (by request number).
local relay = { ch = nil, n = 0, waiting = {} }

-- A fenced transaction of the current run (ops: puts), asked of the node
-- (a txn message; see the top of this file): {succeeded = bool} as etcd
-- answered (false: the claim is gone), or nil, an error and its code.
local function txn_by_node(run, ops)
  relay.n = relay.n + 1
  local n = relay.n
  local w = { cond = baton._cond() }
  relay.waiting[n] = w
  local ok, err = relay.ch:send(protocol.txn(n, protocol.attempt_key(run), ops))
  if ok then w.cond:wait() end
  relay.waiting[n] = nil
  if not ok then return nil, "ELOST: the node is gone: " .. tostring(err), "ELOST" end
  local a = w.answer
  if type(a.succeeded) == "boolean" then return { succeeded = a.succeeded } end
  return nil, a.error, a.code
end

-- The node's answer to a transaction it was asked for (a txn_done
-- message), or, a == nil, none will come.
local function txn_answered(a)
  if a == nil then
    for _, w in pairs(relay.waiting) do
      w.answer = { error = "ELOST: the node is gone", code = "ELOST" }
      w.cond:signal()
    end
    return
  end
  local w = relay.waiting[a.n]
  if w then
    w.answer = a
    w.cond:signal()
  end
end

-- Records a success right here, guarded by the run's fence, when the node
-- did not within HANDOFF seconds (see the top of this file). The node sent
-- the record as it claimed it. Not once the node's fence board says its
-- lease may be gone (the containment process is ending the run then). The
-- success makes the events that run.events (sent by the node) says.
local function record_success(run, started)
  local rec = opt(run.record)
  if not rec or native.fenced() then return false end
  rec = record.ended(rec, "succeeded", { finished = baton.now() + (run.clock or 0), fence = run.fence,
                                         started = started })
  return run_end.write(baton.etcd, util.prefix(), { job = run.job, id = run.id, task = opt(run.task),
                                                    events = opt(run.events) },
                       run.fence, rec) ~= nil
end

local sources, nsources = {}, 0

-- The job's source at the revision the node loaded, as a key of etcd's:
-- {value, mod_revision, create_revision, version} (what its signature is
-- checked against: stored.job_for_run).
local function source(run)
  local ck = run.job .. "@" .. tostring(run.code_revision)
  if type(run.source) == "string" then
    -- (sent by the node: kept, as a read would be)
    if nsources + #run.source > SOURCE_CACHE then sources, nsources = {}, 0 end
    sources[ck] = { value = run.source, mod_revision = run.code_revision,
                    create_revision = tonumber(run.code_created), version = tonumber(run.code_version) }
    nsources = nsources + #run.source
  end
  if sources[ck] then return sources[ck] end
  local key = keys.key(util.prefix(), "jobs", run.job)
  local r, err, code = baton.etcd:get(key, { revision = run.code_revision })
  if not r and code == "ECOMPACTED" then
    -- A compaction past the revision keeps the key's value if it is still
    -- the current one (a job unchanged since is the usual case): read that.
    local cur = baton.etcd:get(key)
    if cur and cur.kvs[1] and cur.kvs[1].mod_revision == run.code_revision then r = cur end
  end
  local kv = r and r.kvs[1]
  if not kv then
    return nil, "cannot read the job source at revision " .. tostring(run.code_revision)
      .. ": " .. tostring(err or "not found")
  end
  if nsources + #kv.value > SOURCE_CACHE then sources, nsources = {}, 0 end
  sources[ck] = { value = kv.value, mod_revision = kv.mod_revision, create_revision = kv.create_revision,
                  version = kv.version }
  nsources = nsources + #kv.value
  return sources[ck]
end

-- What the node knows and no stored output may show (worker/secrets.lua);
-- a run adds the values of its job's secrets (node/secrets.lua) for itself.
local NODE_SECRETS = secrets.node_secrets()

-- ctx.event of an event run (baton.events): the triggering run's job, id,
-- fire, state, error, node, attempt and depth, and the tail of its output.
local function event_of(run)
  local ev = opt(run.event)
  if not ev then return nil end
  for k, v in pairs(ev) do if v == json.null then ev[k] = nil end end
  ev.output_tail = events.output_tail(baton.etcd, util.prefix(), ev)
  return ev
end

local function context(run, state, kept, values, list, nlog)
  local fields = wio.run_fields(run)
  local ctx = {
    job = run.job, fire = run.fire, attempt = run.attempt, node = run.node,
    deadline = run.deadline, fence = run.fence, task = opt(run.task), shard = opt(run.shard),
    params = opt(run.params) or {}, secrets = values,
    event = event_of(run),
    log = { info = wio.logger(fields, "info", kept, list, nlog), warn = wio.logger(fields, "warn", kept, list, nlog),
            error = wio.logger(fields, "error", kept, list, nlog), debug = wio.logger(fields, "debug", kept, list, nlog) },
  }
  function ctx:cancelled() return state.cancelled end
  -- A put that succeeds only while this run still owns its claim: the
  -- lease-bound marker must still be the one created with the claim.
  function ctx:put_fenced(k, v)
    if type(k) ~= "string" or type(v) ~= "string" then
      error("put_fenced: string key and value expected", 2)
    end
    local r, err, code
    -- (bytes the channel's JSON cannot carry, NUL, go straight to etcd)
    if #k + #v <= RELAY_MAX and not k:find("\0", 1, true) and not v:find("\0", 1, true) then
      r, err, code = txn_by_node(run, { { put = { key = k, value = v } } })
    else
      r, err, code = baton.etcd:txn {
        compare = { { key = run.marker, target = "create", op = "==", value = run.fence } },
        success = { { put = { key = k, value = v } } },
      }
    end
    if not r then return nil, err, code end
    if not r.succeeded then
      return nil, "ELOST: the run's claim was lost (node lease expired or run taken over)", "ELOST"
    end
    return true
  end
  return ctx
end

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

-- What every run of this process shares: the loaded modules (_G, string,
-- baton, ...) and the string metatable, each with a copy of its fields.
-- Taken once per worker and extended with the modules loaded since
-- (shared_extend) before each run: a run that changes any of it makes the
-- worker retire, so what is in it stays as it was taken.
local function shared_extend(snap)
  for name, mod in pairs(package.loaded) do
    if not snap.mods[name] then
      snap.mods[name] = { mod = mod, fields = type(mod) == "table" and copy(mod) or nil }
    end
  end
  return snap
end

local function shared_state()
  local smt = getmetatable("")
  return shared_extend { mods = {}, smt = smt, smt_fields = smt and copy(smt) }
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

-- Bytes of a command's stdout and stderr that baton.exec keeps for the
-- worker (all of it is in the run's kept output): the end of stderr is
-- what a failure shows.
local COMMAND_KEEP = 16 * 1024

-- The run function of a job with a command (job.lua; docs/jobs.md,
-- "Commands"): its program runs through baton.exec, so its output is kept
-- as any program's a run starts, and it ends with the run like them. Its
-- environment is the worker's without the node's etcd password, with the
-- job's env, the facts of the run (BATON_JOB, BATON_RUN_ID, ...), its
-- params (BATON_PARAM_<name>) and its secrets (by their names); a queue
-- task's value is its stdin. A non-zero exit or a signal fails the run with
-- the tail of stderr, its secrets redacted before it is cut (list).
local function command_run(spec, run, values, list)
  return function(ctx)
    local cmd = {}
    if type(spec.command) == "string" then
      cmd = { "/bin/sh", "-c", spec.command }
    else
      for i, a in ipairs(spec.command) do cmd[i] = a end
    end
    local env = { BATON_PASSWORD = false }
    for k, v in pairs(spec.env or {}) do env[k] = v end
    env.BATON_JOB, env.BATON_RUN_ID = run.job, run.id or util.instant(run.fire)
    env.BATON_ATTEMPT, env.BATON_NODE = tostring(run.attempt), tostring(run.node)
    env.BATON_FIRE = run.fire and tostring(run.fire) or false
    env.BATON_DEADLINE = run.deadline and tostring(run.deadline) or false
    for k, v in pairs(ctx.params) do env["BATON_PARAM_" .. k] = tostring(v) end
    if ctx.shard then
      local p = ctx.shard.param
      env.BATON_SHARD, env.BATON_SHARDS = tostring(ctx.shard.index), tostring(ctx.shard.total)
      if p ~= nil and p ~= json.null then
        env.BATON_SHARD_PARAM = type(p) == "table" and json.encode(p) or tostring(p)
      end
    end
    if ctx.event then env.BATON_EVENT = json.encode(ctx.event) end
    if ctx.task then env.BATON_TASK_KEY, cmd.stdin = ctx.task.key, ctx.task.value end
    for name, v in pairs(values) do env[name] = v end
    cmd.env, cmd.cwd, cmd.tail = env, spec.cwd, COMMAND_KEEP
    local r, err = baton.exec(cmd)
    if not r then return nil, err end
    local how = native.exit_text(r.code, r.signal, output.redact(r.stderr, list))
    if how then return nil, "command " .. how end
    return true
  end
end

-- (a NUL byte in an error's JSON is written as U+FFFD, baton.json, never
-- raised: the node always gets its reply)
local TEXT = { nul = "replace" }

-- The reason a run failed, as text: a string as it is, anything else as
-- its JSON (error({code = 1}) is recorded as {"code":1}).
local function error_text(v)
  if type(v) == "string" then return v end
  local ok, text = pcall(json.encode, v, TEXT)
  return ok and text or tostring(v)
end

-- Runs one run; returns the reply for the node and, for a success to hand
-- over, what record_success needs. run(ctx) fails the run by raising, or
-- by returning nil (or false) and an error, as Lua functions report
-- failure; false alone fails it too.
local function execute(run, state)
  local src, serr = source(run)
  if not src then return { ok = false, error = serr } end
  local spec, lerr = stored.job_for_run(run.job, src)
  if not spec then return { ok = false, error = lerr } end
  -- Its secrets, read by the node for this run (node/secrets.lua): the
  -- run fails, naming the one missing or not allowed, if one is not there.
  if type(run.secrets_error) == "string" then return { ok = false, error = run.secrets_error } end
  local values, given = {}, opt(run.secrets) or {}
  run.secrets = nil -- (the run is kept for its handoff; the values are not)
  for _, name in ipairs(spec.secrets or {}) do
    if type(given[name]) ~= "string" then
      return { ok = false, error = "secret " .. name .. " was not given by node " .. tostring(run.node) }
    end
    values[name] = given[name]
  end
  local list = secrets.redaction_list(NODE_SECRETS, values)
  -- Whatever logs during the run (baton.log.* called by the job itself
  -- included) logs no secret.
  native.log_filter(function(text) return output.redact(text, list) end)
  -- The attempt's kept output, stored while it runs (output.lua).
  local kept = output.new { P = util.prefix(), job = run.job, id = run.id or util.instant(run.fire),
                            attempt = run.attempt, marker = run.marker, fence = run.fence,
                            secrets = list, capture = true }:start()
  local nlog = wio.run_log(run)
  local out = wio.printed(run, kept, list, nlog)
  if rawget(spec.globals, "print") == nil then spec.globals.print = out.print end
  if rawget(spec.globals, "io") == nil then spec.globals.io = out.io end
  local function now() return baton.now() + (run.clock or 0) end
  local started = now()
  local fn = spec.run or command_run(spec, run, values, list)
  local ok, res, err = pcall(fn, context(run, state, kept, values, list, nlog))
  -- A stop request may have ended what the run waited on: let it be seen
  -- first, and count a run that ends past its deadline as timed out.
  baton.sleep(0)
  out.flush()
  nlog.finish()
  -- A worker with a memory limit runs the next run of that limit with the
  -- garbage of this one gone (node/pool.lua, limits.lua).
  if MEMORY then collectgarbage() end
  -- Every process the run started ends before its end is known.
  local swept = native.sweep(30)
  -- What they wrote last is read first (a turn of the loop); the output is
  -- stored before the end is recorded, so a reader that sees the end (job
  -- logs -f) has all of it.
  baton.sleep(0)
  kept:finish()
  native.log_filter(nil)
  -- A run that returned success succeeded, even after it was asked to
  -- stop (its node stopping gives it a grace to finish: running it again
  -- would do its work twice); one that failed once asked to stop may have
  -- failed because of it (ctx:cancelled(), SIGTERM to its processes):
  -- stopped = true, and its node decides.
  local reply
  if not ok then reply = { ok = false, error = error_text(res) }
  elseif (res == nil or res == false) and err ~= nil then reply = { ok = false, error = error_text(err) }
  elseif res == false then reply = { ok = false, error = "run returned false" }
  elseif run.deadline and now() >= run.deadline then reply = { ok = false, error = "timed out" }
  else reply = { ok = true } end
  if not reply.ok and state.cancelled then reply.stopped = true end
  -- The error is recorded and logged by the node: none of the secrets,
  -- and no NUL byte (as in the kept output: \x00).
  if reply.error then reply.error = output.clean(output.redact(reply.error, list)) end
  if swept == nil then
    -- Some process of the run would not die: leave it to the node, which
    -- stops this worker and waits for them before it records the run.
    reply.retire = true
  elseif reply.ok and not state.cancelled then
    reply.handoff = true
    return reply, started
  end
  return reply
end

-- The successes handed over (state.handoffs[key] = {run, started,
-- deadline}, key = job/id/attempt) end when the node's word comes (a
-- recorded message: settle) or, past their deadline, in the coroutine
-- keep_handoffs starts: the worker records them itself. The worker takes
-- other runs meanwhile; state.settled wakes one that waits to retire until
-- none is left.
local function settle(state, key)
  state.handoffs[key] = nil
  if not next(state.handoffs) then state.settled:broadcast() end
end

local function keep_handoffs(state)
  state.handoffs, state.settled, state.armed = {}, baton._cond(), baton._cond()
  baton.go(function()
    while true do
      local key, h = nil, nil
      for k, x in pairs(state.handoffs) do
        if not h or x.deadline < h.deadline then key, h = k, x end
      end
      if not h then
        state.armed:wait()
      elseif baton.monotime() < h.deadline then
        baton.sleep(math.max(0, h.deadline - baton.monotime()))
      else
        h.deadline = math.huge -- (being recorded)
        record_success(h.run, h.started)
        if state.handoffs[key] == h then settle(state, key) end
      end
    end
  end)
end

-- The node stopped or died: what it had not recorded of the successes
-- handed to it is written now (its containment process gives this a moment
-- when the node died).
local function node_gone(state)
  txn_answered(nil)
  for key, h in pairs(state.handoffs) do
    if h.deadline ~= math.huge then record_success(h.run, h.started) end
    state.handoffs[key] = nil
  end
end

-- Runs run in a coroutine of its own, replies to the node on ch, hands a
-- success over, and retires the worker when the run left something behind.
local function start(ch, run, state)
  state.busy, state.cancelled = true, false
  state.shared = state.shared and shared_extend(state.shared) or shared_state()
  local before, shared = native.coroutines(), state.shared
  baton.go(function()
    local t0 = baton.monotime()
    local reply, started = execute(run, state)
    -- Of the run, only this coroutine may be left, and what all runs
    -- share must be as it was: a job that patched a module or the
    -- string metatable would otherwise change the next job's world.
    reply.retire = reply.retire or native.coroutines() > before + 1
      or native.children() > 0 or not shared_unchanged(shared)
    reply.busy = baton.monotime() - t0
    if reply.handoff then
      reply.handoff = protocol.attempt_key(run)
      state.handoffs[reply.handoff] = { run = run, started = started,
                                        deadline = baton.monotime() + HANDOFF }
      state.armed:signal()
    end
    state.busy = false
    ch:send(protocol.reply(reply))
    if reply.retire then
      if next(state.handoffs) then state.settled:wait() end
      baton.exit(0)
    end
  end)
end

return function()
  local ch = baton.channel()
  if not ch then
    io.stderr:write("baton: worker: started without a channel; this command is for baton node\n")
    return baton.exit(2)
  end
  relay.ch = ch
  -- The node's --trust keys (node/pool.lua): a job's source is verified
  -- before it is compiled here, as the node verified it (stored.lua).
  local trust = os.getenv("BATON_TRUST")
  stored.configure { prefix = util.prefix(),
                     trust = trust and trust ~= "" and assert(sign.trust_text_load(trust)) or nil }
  -- Whatever else writes to stdout (not a run: those are captured) goes
  -- out line by line, not minutes later when a buffer fills.
  io.stdout:setvbuf("line")
  output.start_flusher()
  local state = {}
  baton.go(function()
    while true do
      baton.signal { "SIGTERM", "SIGINT" }
      state.cancelled = true
    end
  end)
  keep_handoffs(state)
  while true do
    local line = ch:recv()
    if not line then
      node_gone(state)
      return baton.exit(0)
    end
    local msg, merr = protocol.decode_for_worker(line)
    if not msg then
      baton.log.error("worker: a message from the node is ignored", { error = merr })
    elseif msg.kind == "recorded" then
      if state.handoffs[msg.key] then settle(state, msg.key) end
    elseif msg.kind == "txn_done" then
      txn_answered(msg)
    elseif msg.kind == "run" and not state.busy then
      start(ch, msg.run, state)
    end
  end
end
