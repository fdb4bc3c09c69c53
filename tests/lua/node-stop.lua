-- A node that stops (SIGTERM) or dies (kill -9) while a run's child
-- process works: the run's processes end with it, its end says what
-- happened (interrupted, lost), and the re-run on another node starts only
-- after the first copy's processes are gone.
local T = require "tap"
local N = require "nodes"
local beats = require "beats"
local TTL = 3

local c = N.new("nodestop")
local e, P = c.e, c.P
local B = beats.new(c.dir)
for _, n in ipairs { "a", "b", "c" } do c:start(n, TTL) end

-- The job's child beats with its run's tag: its job name and fence.
local function put(name, extra)
  return c:put_job(name, ([[
return { schedule = "@manual", timeout = 60, %s
         run = function(ctx)
           local r = assert(baton.exec { "sh", %q, ctx.job .. ":" .. ctx.fence, %q,
                                         ctx.attempt == 1 and "300" or "15", timeout = 60 })
           -- (a child that was stopped did not do its work: the run fails)
           assert(r.code == 0, "the child ended with " .. tostring(r.code or ("signal " .. tostring(r.signal))))
         end }]]):format(extra or "", B.script, B.file))
end

-- Starts job's run and waits until its child beats; returns the record.
local function started(job)
  c:cli("job", "run", job)
  return N.wait(15, function()
    local r = c:records(job)[1]
    if not (r and r.state == "running") then return end
    if #B:list(job .. ":") > 0 then return r end
  end)
end

local function finished(job, secs)
  return N.wait(secs, function()
    local r = c:records(job)[1]
    return r and r.state == "succeeded" and r
  end)
end

-- How many copies of job beat, and the first two copies' spans.
local function copies(job)
  local list = B:list(job .. ":")
  return #list, list[1], list[2]
end

-- 1. SIGTERM: the node asks the run to stop, ends its processes, records
-- it interrupted, and another node runs it again.
do
  put("term")
  local rec = started("term")
  T.ok(rec, "the run started on " .. tostring(rec and rec.node))
  local victim = rec and rec.node or "a"
  local stopped = c:stop(victim)
  T.ok(stopped, "the node stopped on SIGTERM")
  local fin = finished("term", 30)
  T.ok(fin, "the run ran again and succeeded")
  local a1 = fin and fin.attempts and fin.attempts[1] or {}
  T.is(a1.state, "interrupted", "attempt 1 is recorded interrupted")
  T.like(a1.error or "", "node " .. victim .. " was stopped", "saying the node was stopped")
  T.ok(fin and fin.node ~= victim, "attempt 2 ran on another node")
  local n, s1, s2 = copies("term")
  T.is(n, 2, "two copies beat")
  T.ok(s1 and s2 and s1.last < s2.first, ("the first copy ended (%.2f) before the second began (%.2f)")
    :format(s1 and s1.last or -1, s2 and s2.first or -1))
  c:start(victim, TTL)
end

-- 2. kill -9: the run's processes die with the node, at once (long before
-- its lease expires and the run is taken over).
do
  put("kill")
  T.ok(N.wait(10, function()
    local r = assert(e:get(P .. "nodes/", { prefix = true }))
    return r.count == 3
  end), "three nodes again")
  local rec = started("kill")
  T.ok(rec, "the run started on " .. tostring(rec and rec.node))
  local victim = rec and rec.node or "a"
  c:signal(victim, "KILL")
  c.nodes[victim] = nil
  local killed = beats.now()
  baton.sleep(1)
  local _, s1 = copies("kill")
  T.ok(s1 and s1.last < killed + 0.5, ("the child stopped beating within 0.5 s of the kill (%.2f after)")
    :format(s1 and s1.last - killed or -1))
  local fin = finished("kill", TTL + 20)
  T.ok(fin, "the run ran again and succeeded")
  T.is(fin and fin.attempts[1].state, "lost", "attempt 1 is recorded lost")
  local n, f1, f2 = copies("kill")
  T.is(n, 2, "two copies beat")
  T.ok(f1 and f2 and f1.last < f2.first, "and never at the same time")
end

c:destroy()
T.done()
