-- Takeovers keep every rule a first run keeps: a forbid job whose node
-- dies stays exclusive (the next instants are skipped until its re-run
-- ends, never run beside it), and an orphaned run is re-run only by a node
-- its labels allow (never by the leader for being the leader), waiting for
-- one if none is alive.
local T = require "tap"
local N = require "nodes"
local beats = require "beats"
local TTL = 3

local c = N.new("nodetakeover")
local B = beats.new(c.dir)

local function running(job)
  return N.wait(20, function()
    for _, r in ipairs(c:records(job)) do
      if r.state == "running" and #B:list(job .. ":") > 0 then return r end
    end
  end)
end

-- The leader ("boss", a longer TTL, no label) starts first and leads; "w1"
-- and "w2" may run the forbid job.
c:start("boss", 10)
T.ok(N.wait(10, function() return c:cli("leader").stdout == "boss\n" end), "boss leads")
c:start("w1", TTL, "--labels role=w")
c:start("w2", TTL, "--labels role=w")

-- 1. forbid across a node loss, while the leader, which hands out lost
-- runs, is frozen: another node does it (the backstop), and the next
-- instants start neither beside the lost run's re-run nor before it ends.
local rev = c:put_job("guard", ([[
return { schedule = "* * * * * *", concurrency = "forbid", timeout = 60, labels = { role = "w" },
         run = function(ctx)
           assert(baton.exec { "sh", %q, ctx.job .. ":" .. ctx.fence, %q,
                               ctx.attempt == 1 and "60" or "20", timeout = 60 })
         end }]]):format(B.script, B.file))
T.ok(c:loaded("guard", rev), "forbid job loaded")
local rec = running("guard")
T.ok(rec, "a run is on, on " .. tostring(rec and rec.node))
local victim = rec and rec.node or "w1"
c:signal(victim, "KILL")
c.nodes[victim] = nil
local killed = baton.now()
c:signal("boss", "STOP")
baton.sleep(TTL + 3)
local woke = baton.now()
c:signal("boss", "CONT")
local fin = N.wait(TTL + 20, function()
  for _, r in ipairs(c:records("guard")) do
    if r.attempt == 2 and r.state == "succeeded" then return r end
  end
end)
T.ok(fin, "the lost run was re-run and succeeded")
T.ok(fin and fin.node ~= "boss", "by a node with the job's label (" .. tostring(fin and fin.node) .. ")")
T.ok(fin and fin.started < woke and fin.started - killed < TTL + 2,
     ("while the leader was frozen, another node handed it out (%.2f s after the kill)")
       :format(fin and fin.started - killed or -1))
baton.sleep(2.5)
c:cli("job", "pause", "guard")
baton.sleep(2.5)
local list, overlap = B:list("guard:"), {}
for i = 2, #list do
  if list[i].first <= list[i - 1].last then
    overlap[#overlap + 1] = ("%s [%.2f, %.2f] and %s [%.2f, %.2f]"):format(list[i - 1].tag,
      list[i - 1].first, list[i - 1].last, list[i].tag, list[i].first, list[i].last)
  end
end
T.ok(#list >= 2, "executions: " .. #list)
if not T.is(#overlap, 0, "no two executions of the forbid job overlapped") then
  for _, o in ipairs(overlap) do T.diag(o) end
end
local skipped = 0
for _, r in ipairs(c:records("guard")) do if r.state == "skipped" then skipped = skipped + 1 end end
T.ok(skipped >= 2, "instants that came meanwhile were skipped (" .. skipped .. ")")
c:start(victim, TTL, "--labels role=w")
c:start("n3", TTL, "--labels role=n3")

-- 2. An orphan is re-run only by an eligible node.
rev = c:put_job("pinned", ([[
return { schedule = "@manual", timeout = 60, labels = { role = "n3" },
         run = function(ctx)
           assert(baton.exec { "sh", %q, ctx.job .. ":" .. ctx.node .. ":" .. ctx.fence, %q,
                               ctx.attempt == 1 and "100" or "5", timeout = 60 })
         end }]]):format(B.script, B.file))
T.ok(c:loaded("pinned", rev, 15), "labelled job loaded")
c:cli("job", "run", "pinned")
rec = running("pinned")
T.is(rec and rec.node, "n3", "it runs on the one node with its label")
c:signal("n3", "KILL")
c.nodes.n3 = nil
baton.sleep(TTL + 4)
local waiting = c:records("pinned")[1]
T.is(waiting and waiting.state, "retrying", "its run waits for an eligible node")
T.is(waiting and waiting.attempt, 1, "no other node took it")
for _, s in ipairs(B:list("pinned:")) do
  T.like(s.tag, "^pinned:n3:", "only n3 ever ran it (" .. s.tag .. ")")
end
c:start("n3", TTL, "--labels role=n3")
fin = N.wait(30, function()
  local r = c:records("pinned")[1]
  return r and r.state == "succeeded" and r
end)
T.ok(fin, "once n3 is back, the run runs again there")
T.is(fin and fin.node, "n3", "on n3")
T.is(fin and fin.attempts[1].state, "lost", "attempt 1 is recorded lost")

-- 3. The only eligible node was cut off while its lost run was handed out:
-- once it has a session again, it takes the run.
do
  local d = N.new("nodetakeover3")
  local D = beats.new(d.dir)
  d:start("solo", TTL, "--labels role=solo")
  d:start("other", TTL)
  local rev3 = d:put_job("only", ([[
return { schedule = "@manual", timeout = 60, labels = { role = "solo" },
         run = function(ctx)
           assert(baton.exec { "sh", %q, ctx.job .. ":" .. ctx.fence, %q,
                               ctx.attempt == 1 and "100" or "5", timeout = 60 })
         end }]]):format(D.script, D.file))
  T.ok(d:loaded("only", rev3), "job for one node loaded")
  d:cli("job", "run", "only")
  T.ok(N.wait(15, function()
    local r = d:records("only")[1]
    return r and r.state == "running" and #D:list() > 0
  end), "it runs on solo")
  d:signal("solo", "STOP")
  T.ok(N.wait(TTL + 10, function()
    local r = d:records("only")[1]
    return r and r.state == "retrying"
  end), "solo's lease expired: the run waits for an eligible node")
  d:signal("solo", "CONT")
  local done = N.wait(20, function()
    local r = d:records("only")[1]
    return r and r.state == "succeeded" and r
  end)
  T.ok(done, "back with a new session, solo took the run and finished it")
  T.is(done and done.attempt, 2, "as attempt 2")
  d:destroy()
end

c:destroy()
T.done()
