-- baton job kill against real nodes: the run is asked to stop
-- (ctx:cancelled()), then every process of it is killed after the node's
-- grace period, even processes that ignore SIGTERM in a session of their
-- own; it is recorded killed with who asked, and neither retried nor run
-- again. Killing what is not running is a one-line error, exit 1.
local T = require "tap"
local _ -- results a check ignores
local N = require "nodes"
local F = require "files"
local bin = os.getenv("BATON_BIN") or "bin/baton"
local eps = os.getenv("BATON_ENDPOINTS")

local c = N.new("jobkill")
local e, P = c.e, c.P
for _, n in ipairs { "a", "b" } do c:start(n, 3) end

local host = F.read("/proc/sys/kernel/hostname"):match("^%S+")
local WHO = "kill-tester@" .. host

-- Runs the CLI on the test's prefix as user kill-tester.
local function cli(...)
  local args = { bin, "--endpoints", eps, "--prefix", P, timeout = 60, env = { USER = "kill-tester" } }
  for _, a in ipairs { ... } do args[#args + 1] = a end
  local r = assert(baton.exec(args))
  return r.stdout, r.stderr, r.code
end

-- True if no process pid is left (a zombie counts as gone).
local function gone(pid)
  local st = F.read("/proc/" .. tostring(pid) .. "/stat")
  return st == nil or st:match("^%d+ %b() (%a)") == "Z"
end

local function rec_of(job, id)
  local kv = assert(e:get(P .. "runs/" .. job .. "/" .. id)).kvs[1]
  return kv and baton.json.decode(kv.value)
end

-- Waits until job has a running run whose processes wrote their pids;
-- returns its record and the pids.
local function started(job, dir)
  local got = N.wait(20, function()
    local r = c:records(job)[1]
    if not (r and r.state == "running") then return end
    local p1, p2 = F.read(dir .. "/pid1"), F.read(dir .. "/pid2")
    if p1 and p2 and p1:match("%d+\n") and p2:match("%d+\n") then
      return { r, tonumber(p1:match("%d+")), tonumber(p2:match("%d+")) }
    end
  end) or {}
  return got[1], got[2], got[3]
end

-- 1. A run whose processes ignore SIGTERM, one of them in a session of its
-- own: killed after the grace, processes and all, recorded killed by the
-- asker, not retried although it has retries left.
do
  local dir = c.dir .. "/stubborn"
  assert(baton.exec { "mkdir", "-p", dir })
  local rev = c:put_job("stubborn", ([[
return { schedule = "@manual", timeout = 120, retry = { attempts = 2, backoff = 0 },
         run = function(ctx)
           baton.exec { "sh", "-c", %q, timeout = 120 }
         end }]]):format("trap '' TERM; echo $$ > " .. dir .. "/pid1; "
    .. "setsid sh -c 'trap \"\" TERM; echo $$ > " .. dir .. "/pid2; exec sleep 300' & "
    .. "while :; do sleep 0.2; done"))
  T.ok(c:loaded("stubborn", rev), "both nodes loaded the job")
  local out, err, code = cli("job", "run", "stubborn")
  T.is(code, 0, "job run: exit 0")
  local id = out:match(": run (%S+);")
  T.like(id or "", "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$", "job run prints the run id, with milliseconds")
  local rec, pid1, pid2 = started("stubborn", dir)
  T.ok(rec, "the run started, its processes wrote their pids")
  T.ok(pid1 and not gone(pid1) and pid2 and not gone(pid2), "they are alive before the kill")
  T.is(rec and rec.id, id, "under the id job run printed")
  local t0 = baton.monotime()
  out, err, code = cli("job", "kill", "stubborn")
  local took = baton.monotime() - t0
  T.is(code, 0, "job kill: exit 0")
  if code ~= 0 then T.diag(err) end
  T.like(out, "^stopping run " .. id:gsub("%p", "%%%0") .. " of job stubborn on node [ab] %(attempt 1%)\n",
    "job kill says which run it stops, on which node")
  T.like(out, "\nkilled run " .. id:gsub("%p", "%%%0") .. " of job stubborn %(killed by " .. WHO:gsub("%p", "%%%0")
    .. "%)\n$", "and that it was killed, by whom")
  T.ok(took >= 4, ("the processes ignoring SIGTERM were killed after the grace (%.1f s)"):format(took))
  T.ok(pid1 and gone(pid1), "the run's child process is gone (pid " .. tostring(pid1) .. ")")
  T.ok(pid2 and gone(pid2), "its grandchild in a session of its own too (pid " .. tostring(pid2) .. ")")
  local r = rec_of("stubborn", id)
  T.is(r and r.state, "killed", "recorded killed")
  T.is(r and r.killed_by, WHO, "with who asked, $USER@host")
  T.is(r and r.error, "killed by " .. WHO, "and the reason")
  T.is(r and r.attempts and r.attempts[1].state, "killed", "the attempt is killed")
  baton.sleep(2)
  r = rec_of("stubborn", id)
  T.is(r and r.state .. "/" .. #r.attempts, "killed/1", "not retried, though retries were left")
  T.is(#c:records("stubborn"), 1, "and not run again")
  for _, k in ipairs { "pending/", "inflight/", "cancel/", "running/", "active/" } do
    T.is(assert(e:get(P .. k .. "stubborn", { prefix = true, count_only = true })).count, 0,
      "nothing left under " .. k)
  end

  -- 2. Killing what is not running.
  out, err, code = cli("job", "kill", "stubborn", id)
  T.is(code, 1, "kill of a finished run: exit 1")
  T.is(err, "baton: job kill stubborn " .. id .. ": run " .. id .. " of job stubborn is not running: it is killed\n",
    "one line saying so")
  out, err, code = cli("job", "kill", "stubborn")
  T.is(code .. "|" .. out, "1|", "kill with no running run: exit 1")
  T.is(err, "baton: job kill stubborn: no run of job stubborn is running (baton job history stubborn lists its runs)\n",
    "one line saying so")
  _, err, code = cli("job", "kill", "stubborn", "2026-01-01T00:00:00Z")
  T.is(code, 1, "kill of a run that never was: exit 1")
  T.like(err, "^baton: job kill stubborn 2026%-01%-01T00:00:00Z: ENOENT: no run 2026%-01%-01T00:00:00Z of job stubborn",
    "says so")
  _, err, code = cli("job", "kill", "nosuch")
  T.is(code, 1, "kill of a job that does not exist: exit 1")
  T.like(err, "^baton: job kill nosuch: ENOENT: no job nosuch at " .. P:gsub("%p", "%%%0") .. "jobs/nosuch\n$",
    "names it")
  _, err, code = cli("job", "kill")
  T.is(code, 2, "kill without NAME: usage error")
  T.like(err, "^baton: job kill: needs a NAME\nusage: baton job kill NAME %[ID%]\n$", "with the usage")
end

-- 3. A run that honours ctx:cancelled() ends at once, recorded killed; a
-- scheduled run is killed the same way (kill NAME ID).
do
  local mark = c.dir .. "/saw-cancel"
  local rev = c:put_job("polite", ([[
return { schedule = "@manual", timeout = 120,
         run = function(ctx)
           while not ctx:cancelled() do baton.sleep(0.05) end
           local f = io.open(%q, "w"); f:write("yes"); f:close()
         end }]]):format(mark))
  T.ok(c:loaded("polite", rev), "both nodes loaded the polite job")
  local out = cli("job", "run", "polite")
  local id = out:match(": run (%S+);")
  T.ok(N.wait(15, function() local r = c:records("polite")[1]; return r and r.state == "running" end),
    "the polite run is running")
  local t0 = baton.monotime()
  local _, err, code = cli("job", "kill", "polite", id)
  T.is(code, 0, "kill NAME ID: exit 0")
  if code ~= 0 then T.diag(err) end
  -- (kill only asks: the run ends when its node has stopped it)
  local r = N.wait(15, function()
    local x = rec_of("polite", id)
    return x and x.state ~= "running" and x
  end)
  T.ok(baton.monotime() - t0 < 4, ("a run that sees ctx:cancelled() ends before the grace (%.2f s)")
    :format(baton.monotime() - t0))
  T.is(F.read(mark), "yes", "ctx:cancelled() turned true in the run")
  T.is(r and r.state, "killed", "recorded killed (not succeeded, though run returned)")
  T.is(r and r.killed_by, WHO, "with who asked")
end

-- 4. A stop request that is there when an attempt is claimed (the run
-- failed and waited for its retry meanwhile): the attempt does not start,
-- the run is recorded killed.
do
  local ran = c.dir .. "/ran-"
  local rev = c:put_job("flaky", ([[
return { schedule = "@manual", retry = { attempts = 1, backoff = 2, jitter = 0 },
         run = function(ctx)
           local f = io.open(%q .. ctx.attempt, "w"); f:write("x"); f:close()
           error("attempt " .. ctx.attempt .. " fails")
         end }]]):format(ran))
  T.ok(c:loaded("flaky", rev), "both nodes loaded the flaky job")
  local out = cli("job", "run", "flaky")
  local id = out:match(": run (%S+);")
  T.ok(N.wait(15, function() local r = rec_of("flaky", id); return r and r.state == "retrying" end),
    "attempt 1 failed, the run waits for its retry")
  assert(e:put(P .. "cancel/flaky/" .. id, baton.json.encode { reason = "killed by " .. WHO, by = WHO }))
  local r = N.wait(15, function() local x = rec_of("flaky", id); return x and x.state == "killed" and x end)
  T.ok(r, "at its retry, the run is recorded killed")
  T.is(r and r.killed_by, WHO, "with who asked")
  T.is(F.read(ran .. "2"), nil, "attempt 2 did not start")
  T.is(assert(e:get(P .. "cancel/flaky/" .. id)).count, 0, "the request is gone with the run")
end

c:destroy()
T.done()
