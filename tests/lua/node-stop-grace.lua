-- A node stopped with SIGTERM gives its runs a grace to finish (issue 23):
-- a run that returns success within it is done, recorded succeeded, and
-- never runs again; one that fails once asked to stop, or is still running
-- when the grace ends, is interrupted and runs again elsewhere. Judged by
-- what the runs did: each execution appends a line to a file outside
-- etcd, as the issue's reproduction does (a 1.5 s run, SIGTERM to its node
-- 0.5 s in, other nodes up to run it again), ten times in a row.
local T = require "tap"
local N = require "nodes"
local TTL = 3
local c = N.new("stopgrace")
local dir = c.dir
local LOG = dir .. "/executions"

-- (three: while the stopped one starts again, two can run the next round)
for _, n in ipairs { "a", "b", "c" } do c:start(n, TTL) end
T.ok(N.wait(15, function()
  local out = c:cli("nodes").stdout
  return out:match("\na ") and out:match("\nb ") and out:match("\nc ")
end), "three nodes")

-- The job: works for `secs` seconds, then appends "<run id> <node>" to LOG.
-- cooperative: a run that sees ctx:cancelled() stops early and fails.
local function job(name, secs, cooperative)
  return c:put_job(name, ([[
return { schedule = "@manual", timeout = 60, concurrency = "allow",
  run = function(ctx)
    local deadline = baton.monotime() + %s
    while baton.monotime() < deadline do
      if %s and ctx:cancelled() then error("stopped before the work was done") end
      baton.sleep(0.05)
    end
    local f = assert(io.open(%q, "a"))
    f:write(ctx.job, " ", ctx.fire, " ", ctx.node, "\n")
    f:close()
  end }]]):format(secs, cooperative and "true" or "false", LOG))
end

local function executions(name, fire)
  local n, f = 0, io.open(LOG)
  if not f then return 0 end
  for line in f:lines() do
    local j, t = line:match("^(%S+) (%S+)")
    if j == name and math.abs(tonumber(t) - fire) < 0.001 then n = n + 1 end
  end
  f:close()
  return n
end

-- Starts one run of name, waits until it runs, SIGTERMs its node `after`
-- seconds in, restarts that node; returns the run's record once it ended.
local function stop_during(name, after)
  c:cli("job", "run", name)
  local rec = N.wait(15, function()
    for _, r in ipairs(c:records(name)) do
      if r.state == "running" and r.started then return r end
    end
  end)
  if not rec then return nil end
  baton.sleep(after)
  local victim = rec.node
  c:stop(victim)
  local fin = N.wait(30, function()
    for _, r in ipairs(c:records(name)) do
      if r.fire == rec.fire and r.state ~= "running" and r.state ~= "retrying" then return r end
    end
  end)
  c:start(victim, TTL)
  return fin, rec
end

-- 1. The issue's scenario, ten times in a row: the run finishes within the
-- grace; it executed once and is recorded succeeded.
local rev = job("grace", 1.5)
T.ok(c:loaded("grace", rev), "the job is loaded")
local once, succeeded = 0, 0
for i = 1, 10 do
  -- (fin is the run's final state: a second execution would come before it)
  local fin, rec = stop_during("grace", 0.5)
  local n = rec and executions("grace", rec.fire) or -1
  if n == 1 then once = once + 1 end
  if fin and fin.state == "succeeded" then succeeded = succeeded + 1 end
  if n ~= 1 or not fin or fin.state ~= "succeeded" then
    T.diag(("round %d: %d executions, recorded %s (%s)"):format(i, n, tostring(fin and fin.state),
      tostring(fin and fin.error)))
  end
end
T.is(once, 10, "each of 10 runs finished within its node's grace executed once")
T.is(succeeded, 10, "and is recorded succeeded")

-- 2. A run that stops because it was asked (it looks at ctx:cancelled())
-- did not do its work: interrupted, and another node runs it.
rev = job("coop", 4, true)
T.ok(c:loaded("coop", rev), "a cooperative job")
local fin, rec = stop_during("coop", 0.5)
local a1 = fin and fin.attempts and fin.attempts[1] or {}
T.is(a1.state, "interrupted", "a run that stopped as asked: attempt 1 interrupted")
T.is(fin and fin.state, "succeeded", "and it ran again, to the end")
T.is(rec and executions("coop", rec.fire), 1, "its work was done once")

-- 3. A run still running when the grace ends: interrupted, run again.
rev = job("long", 6)
T.ok(c:loaded("long", rev), "a run longer than the grace")
fin, rec = stop_during("long", 0.5)
a1 = fin and fin.attempts and fin.attempts[1] or {}
T.is(a1.state, "interrupted", "cut at the end of the grace: attempt 1 interrupted")
T.is(fin and fin.state, "succeeded", "and it ran again, to the end")
T.is(rec and executions("long", rec.fire), 1, "its work was done once")

c:destroy()
T.done()
