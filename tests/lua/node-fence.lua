-- Self-fencing: a node that declared its session lost never claims on it
-- again, even while etcd still honours its lease (as etcd does across its
-- own leader changes); it replaces its own stale registration when it
-- rejoins; and a node stopped (SIGSTOP) past its lease has its run's
-- processes ended by their containment process at the fence deadline, so
-- the re-run on another node never overlaps the first copy.
local T = require "tap"
local N = require "nodes"
local beats = require "beats"
local TTL = 3

-- Lines of a node's log (logfmt) with their message and fields.
local function log_lines(c, name)
  local out = {}
  for line in c:log(name):gmatch("[^\n]+") do
    out[#out + 1] = { text = line, msg = line:match('msg="([^"]*)"') or line:match("msg=(%S+)"),
                      lease = line:match(" lease=(%d+)") }
  end
  return out
end

-- 1. The lease outlives the session the node declared lost.
do
  local c = N.new("nodefence1")
  local e, P = c.e, c.P
  c:start("a", TTL)
  local rev = c:put_job("tick", [[
return { schedule = "* * * * * *", concurrency = "allow", run = function(ctx) baton.sleep(0.05) end }]])
  T.ok(c:loaded("tick", rev), "job loaded")
  T.ok(N.wait(10, function() return #c:records("tick") >= 2 end), "runs go on")
  local old = assert(e:get(P .. "nodes/a")).kvs[1].lease
  c:signal("a", "STOP")
  -- Keep the node's lease alive at etcd from here, as a new etcd leader
  -- does: the node must still treat the session it lost as lost.
  local lease = e:lease(old)
  assert(lease:keepalive())
  baton.sleep(TTL + 2)
  c:signal("a", "CONT")
  local rejoined = N.wait(15, function() return c:log("a"):find("node rejoined", 1, true) end)
  T.ok(rejoined, "the node rejoined while its old lease was still alive at etcd")
  baton.sleep(3)
  local lines = log_lines(c, "a")
  local lost_at, back, stale, started_after = nil, false, 0, 0
  for i, l in ipairs(lines) do
    if l.msg == "session lost; runs stopped" and not lost_at then lost_at = i end
    if lost_at and l.msg == "node rejoined" then back = true end
    if lost_at and i > lost_at and l.msg == "run started" then
      -- (before the node has a new session, any run is on the old one)
      if l.lease == old or not back then stale = stale + 1 else started_after = started_after + 1 end
    end
  end
  T.ok(lost_at, "the node declared its session lost")
  T.like(lost_at and lines[lost_at].text or "", "lease=" .. old, "naming the lease")
  T.is(stale, 0, "no run started on the lost session's lease after that")
  T.ok(started_after >= 1, "runs started again on the new session (" .. started_after .. ")")
  local now = assert(e:get(P .. "nodes/a")).kvs[1]
  T.ok(now and now.lease ~= old, "its registration moved to the new lease")
  T.is(select(3, lease:timetolive()), "ENOLEASE", "and the node revoked the old lease itself")
  lease:revoke()
  c:destroy()
end

-- 2. SIGSTOP of the node running a job whose child process keeps working:
-- the child is killed at the fence deadline, before another node may
-- re-run the job, and the two copies never overlap.
do
  local c = N.new("nodefence2")
  local B = beats.new(c.dir)
  c:start("a", TTL)
  c:start("b", TTL)
  local rev = c:put_job("long", ([[
return { schedule = "@manual", timeout = 60,
         run = function(ctx)
           assert(baton.exec { "sh", %q, tostring(ctx.fence), %q, ctx.attempt == 1 and "200" or "20",
                               timeout = 60 })
         end }]]):format(B.script, B.file))
  T.ok(c:loaded("long", rev), "job loaded on two nodes")
  c:cli("job", "run", "long")
  local rec = N.wait(15, function()
    local r = c:records("long")[1]
    return r and r.state == "running" and B:count() > 0 and r
  end)
  T.ok(rec, "the run and its child process started on " .. tostring(rec and rec.node))
  local victim = rec and rec.node or "a"
  c:signal(victim, "STOP")
  local fin = N.wait(TTL + 25, function()
    local r = c:records("long")[1]
    return r and r.state == "succeeded" and r
  end)
  c:signal(victim, "CONT")
  T.ok(fin, "the run was re-run elsewhere and succeeded")
  T.is(fin and fin.attempts[1] and fin.attempts[1].state, "lost", "attempt 1 is recorded lost")
  T.ok(fin and fin.node ~= victim, "attempt 2 ran on the other node")
  local list = B:list()
  T.is(#list, 2, "two copies beat, one per attempt")
  local f1, f2 = list[1] or { last = math.huge }, list[2] or { first = -1 }
  T.ok(f1.last < f2.first, ("the first copy's child stopped (%.2f) before the re-run began (%.2f)")
    :format(f1.last, f2.first))
  T.like(c:log(victim), "run fenced", "its containment process killed the run at the fence deadline")
  baton.sleep(1)
  local n = B:count()
  baton.sleep(1)
  T.is(B:count(), n, "nothing beats any more")
  c:destroy()
end

-- 3. etcd drops a node's lease long before its TTL (a stalled etcd leader
-- can, etcd #12528): the node sees its registration deleted and fences at
-- once, so its run's child stops before the run is taken over.
do
  local c = N.new("nodefence4")
  local e, P = c.e, c.P
  local B = beats.new(c.dir, 0.05)
  c:start("a", 9)
  c:start("b", 9)
  local rev = c:put_job("long", ([[
return { schedule = "@manual", timeout = 60, policy = "race",
         run = function(ctx)
           assert(baton.exec { "sh", %q, tostring(ctx.fence), %q, ctx.attempt == 1 and "600" or "20",
                               timeout = 60 })
         end }]]):format(B.script, B.file))
  T.ok(c:loaded("long", rev), "job loaded")
  c:cli("job", "run", "long")
  local rec = N.wait(15, function()
    local r = c:records("long")[1]
    return r and r.state == "running" and B:count() > 0 and r
  end)
  T.ok(rec, "the run and its child started on " .. tostring(rec and rec.node))
  local victim = rec and rec.node or "a"
  local lease = assert(e:get(P .. "nodes/" .. victim)).kvs[1].lease
  baton.sleep(0.5)
  assert(e:lease(lease):revoke())
  local revoked = beats.now()
  local fin = N.wait(30, function()
    local r = c:records("long")[1]
    return r and r.state == "succeeded" and r
  end)
  T.ok(fin and fin.attempt == 2, "the run ran again (on " .. tostring(fin and fin.node) .. ")")
  local list = B:list()
  local s1, s2 = list[1], list[2]
  T.ok(s1 and s1.last - revoked < 0.3, ("the first copy's child stopped within 0.3 s of the revocation (%.2f)")
    :format(s1 and s1.last - revoked or -1))
  T.ok(s1 and s2 and s1.last < s2.first, "before the re-run began")
  T.like(c:log(victim), "own registration deleted", "the node says why it fenced")
  T.ok(N.wait(10, function() return c:log(victim):find("node rejoined", 1, true) end), "and it rejoined")
  c:destroy()
end

-- 4. A node whose etcd is gone for good loses its session, cannot rejoin
-- (connection refused, at once, again and again) and still answers: it
-- stops on SIGTERM. (Its clock measurement once spun on such failures and
-- froze the node.)
do
  local H = require "etcdh"
  local srv = H.start()
  local c = N.new("nodefence3", srv.url)
  c:start("a", TTL)
  c:start("b", TTL)
  local rev = c:put_job("tick", [[
return { schedule = "* * * * * *", concurrency = "allow", run = function(ctx) end }]])
  T.ok(c:loaded("tick", rev), "job loaded on a private etcd")
  srv:stop()
  T.ok(N.wait(15, function()
    return c:log("a"):find("rejoin failed", 1, true) and c:log("b"):find("rejoin failed", 1, true)
  end), "both nodes lost their session and fail to rejoin")
  baton.sleep(3)
  local t0 = baton.monotime()
  local ra, rb = c:stop("a"), c:stop("b")
  T.ok(ra and rb, "both stop on SIGTERM")
  T.ok(baton.monotime() - t0 < 15, ("within the grace periods (%.1f s)"):format(baton.monotime() - t0))
  c.e:close()
  srv:destroy()
  baton.exec { "rm", "-rf", c.dir }
end

T.done()
