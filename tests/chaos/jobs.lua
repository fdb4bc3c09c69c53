-- The jobs of the nemesis suite: require "jobs" (tests/chaos on package.path)
-- returns a list of {name =, source =, kind =, ...} that the nemesis stores
-- with `baton job put` and the checker reads back from meta.json.
--
-- Every job records each real execution outside etcd: it appends JSON lines
-- to the file named by CHAOS_EXEC_LOG (the node's environment, inherited by
-- its workers and their children), one write per line (O_APPEND, < 4 KiB,
-- so lines from concurrent processes never mix):
--   {job, id, node, attempt, fence, pid, mono, wall, kind = start|beat|end}
-- id is the instant (ctx.fire as in the runs/ keys, plus /shard) or the
-- queue task id; mono is baton.monotime() (CLOCK_MONOTONIC, not faked by
-- libfaketime here, and the same for every process of the machine); wall is
-- the process's own, possibly skewed, baton.now(): the checker compares the
-- two to show the skew each node really had.
--
-- A job is honest about completion: an end line without `cancelled` or
-- `failed` says the run did all its work (the checker's rule 1b: such an
-- execution must not run again unless its attempt is recorded lost). A
-- run whose work was cut short (ctx:cancelled() turned true: a timeout, its
-- node stopping) writes `cancelled = true` in its end line and fails, so
-- that running it again is legitimate.
local M = {}

-- Shared by every job file (each job is compiled in its own environment).
local PRELUDE = [==[
local LOG, BEAT = os.getenv("CHAOS_EXEC_LOG"), os.getenv("CHAOS_BEAT")
local mypid
local function pid()
  if not mypid then
    local f = io.open("/proc/self/stat")
    mypid = tonumber(f:read("*l"):match("^%d+"))
    f:close()
  end
  return mypid
end
local function id_of(ctx)
  if ctx.task then return (ctx.task.key:match("[^/]+$")) end
  local id = os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(ctx.fire))
  if ctx.shard then id = id .. "/" .. ctx.shard.index end
  return id
end
local function rec(ctx, kind, extra)
  local t = { job = ctx.job, id = id_of(ctx), node = ctx.node, attempt = ctx.attempt,
              fence = ctx.fence, pid = pid(), mono = baton.monotime(), wall = baton.now(),
              kind = kind }
  for k, v in pairs(extra or {}) do t[k] = v end
  local f = assert(io.open(assert(LOG, "CHAOS_EXEC_LOG is not set"), "a"))
  f:write(baton.json.encode(t) .. "\n")
  f:close()
end
-- A child process (baton eval tests/chaos/beat.lua) that appends a beat line
-- for this attempt every interval seconds for up to secs seconds: one that
-- outlives its run shows up in the checker.
local function beat_argv(ctx, interval, secs)
  return { baton._exe, "eval", BEAT, LOG, ctx.job, id_of(ctx), ctx.node, tostring(ctx.attempt),
           tostring(ctx.fence), tostring(interval), tostring(secs) }
end
-- Sleeps secs in small steps; false if the node asked the run to stop.
local function nap(ctx, secs)
  local deadline = baton.monotime() + secs
  while true do
    if ctx:cancelled() then return false end
    local left = deadline - baton.monotime()
    if left <= 0 then return true end
    baton.sleep(math.min(0.1, left))
  end
end
-- The end of a run whose work was cut short: its end line says so, and the
-- run fails (a run that fails once asked to stop is interrupted, and runs
-- again elsewhere).
local function cut_short(ctx, extra)
  extra = extra or {}
  extra.cancelled = true
  rec(ctx, "end", extra)
  error("stopped before its work was done", 0)
end
-- A run of secs seconds of work that stops early when asked to.
local function work(ctx, secs)
  rec(ctx, "start")
  if not nap(ctx, secs) then cut_short(ctx) end
  rec(ctx, "end")
end
]==]

local function job(t)
  t.source = PRELUDE .. t.body
  t.body = nil
  M[#M + 1] = t
end

-- Every second, short runs that may overlap.
job { name = "tick", kind = "cron", schedule = "* * * * * *", period = 1, body = [[
return { schedule = "* * * * * *", concurrency = "allow", timeout = 10,
  run = function(ctx) work(ctx, 0.3) end }
]] }

-- Every 2 s, 3 shards (one run per shard and instant).
job { name = "shard", kind = "cron", schedule = "*/2 * * * * *", period = 2, shards = 3, body = [[
return { schedule = "*/2 * * * * *", shards = 3, concurrency = "allow", timeout = 10,
  run = function(ctx) work(ctx, 0.5) end }
]] }

-- Every 5 s, runs ~7 s, forbid: every other instant must be skipped. It
-- beats from a child process every 0.2 s and stops the child (and waits for
-- it) before its end line, also when the node asks it to stop (then it is
-- cut short: cancelled, and it fails).
job { name = "long", kind = "cron", schedule = "*/5 * * * * *", period = 5, forbid = true, body = [[
return { schedule = "*/5 * * * * *", concurrency = "forbid", timeout = 30,
  run = function(ctx)
    rec(ctx, "start")
    local argv = beat_argv(ctx, 0.2, 120)
    argv.stdio = "null"
    local child = assert(baton.spawn(argv))
    local done = nap(ctx, 7)
    child:kill("SIGKILL")
    child:wait()
    if not done then cut_short(ctx) end
    rec(ctx, "end")
  end }
]] }

-- Every 3 s; attempt 1 fails, attempt 2 (1 s later) succeeds.
job { name = "retry", kind = "cron", schedule = "*/3 * * * * *", period = 3, forbid = true, body = [[
return { schedule = "*/3 * * * * *", timeout = 10, retry = { attempts = 2, backoff = 1 },
  run = function(ctx)
    rec(ctx, "start")
    if not nap(ctx, 0.2) then cut_short(ctx) end
    if ctx.attempt == 1 then
      rec(ctx, "end", { failed = true })
      error("planned failure of attempt 1")
    end
    rec(ctx, "end")
  end }
]] }

-- Only nodes started with --labels role=x may run it.
job { name = "labelled", kind = "cron", schedule = "*/2 * * * * *", period = 2,
      labels = { role = "x" }, body = [[
return { schedule = "*/2 * * * * *", labels = { role = "x" }, concurrency = "allow", timeout = 10,
  run = function(ctx) work(ctx, 0.2) end }
]] }

-- One run per task the suite pushes under P queue/orders/.
job { name = "orders", kind = "queue", queue = "orders", body = [[
return { queue = "orders", timeout = 10,
  run = function(ctx) work(ctx, 0.2) end }
]] }

-- Every 10 s, timeout 2 s, exceeded by a child it waits for (30 s of beats):
-- the child must not outlive the timed-out run. Its work (the child's 30 s)
-- is never done: its end line, if it gets to write one, says cancelled.
job { name = "hang", kind = "cron", schedule = "*/10 * * * * *", period = 10, forbid = true,
      body = [[
return { schedule = "*/10 * * * * *", timeout = 2,
  run = function(ctx)
    rec(ctx, "start")
    local r = baton.exec(beat_argv(ctx, 0.2, 30))
    if ctx:cancelled() or not r or r.code ~= 0 then cut_short(ctx) end
    rec(ctx, "end")
  end }
]] }

-- Every 2 s, 1.0-1.5 s of work that ignores ctx:cancelled() (baton.sleep):
-- the node-term-grace fault SIGTERMs its node ~0.3 s into one such run,
-- which then finishes within the node's grace (5 s) and must be recorded
-- with its own result, never run again (issue 23).
job { name = "graceful", kind = "cron", schedule = "*/2 * * * * *", period = 2, body = [[
return { schedule = "*/2 * * * * *", concurrency = "allow", timeout = 20,
  run = function(ctx)
    rec(ctx, "start")
    baton.sleep(1 + (math.floor(ctx.fire) % 6) / 10)
    rec(ctx, "end")
  end }
]] }

return M
