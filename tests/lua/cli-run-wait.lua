-- `baton job run NAME --wait` and `baton job logs -f` exit with how the
-- run ended (docs/jobs.md, "The job CLI"): 0 succeeded, 3 failed, 4 timed
-- out, 5 killed, 6 skipped, 7 not started (no eligible node, or none
-- started it within --start-timeout, the request then withdrawn); --wait
-- prints the run's output as logs -f does. And `job logs NAME` of a
-- sharded instant shows every shard, labelled, and -f asks which.
local T = require "tap"
local _ -- results a check ignores
local N = require "nodes"

local c = N.new("clirunwait")
local e, P = c.e, c.P
c:start("a", 3, "--workers 4")

local function cli(...)
  local r = c:cli(...)
  return r.stdout, r.stderr, r.code
end

local function put(name, source)
  local rev = c:put_job(name, source)
  T.ok(c:loaded(name, rev), name .. " loaded")
end

local function record(job, id)
  local g = assert(e:get(P .. "runs/" .. job .. "/" .. id))
  return g.kvs[1] and baton.json.decode(g.kvs[1].value)
end

-- 1. A success: the output on stdout, the end line last, exit 0; the
-- line that says it was queued on stderr.
put("fine", [[
return { schedule = "@manual", run = function(ctx) print("working"); baton.sleep(0.3); print("done") end }]])
local out, err, code = cli("job", "run", "fine", "--wait")
T.is(code, 0, "fine: --wait exits 0 for a success")
T.like(out, "stdout  working\n.-stdout  done\n%-%-%- run ended: succeeded %(attempt 1 on a [^)]*%) %-%-%-\n$",
  "fine: its output on stdout, then how it ended")
T.like(err, "^baton: job run: queued a manual run of fine %(.-%): run %S+; waiting for it to end\n$",
  "fine: the queued line on stderr")
local id = err:match("run (%S+); waiting") or "?"
T.is((record("fine", id) or {}).state, "succeeded", "fine: the run it waited for is the one recorded")
_, _, code = cli("job", "logs", "fine", "-f")
T.is(code, 0, "fine: logs -f of it exits 0")

-- 2. A failure: 3, with the error.
put("boom", [[
return { schedule = "@manual", run = function() print("about to fail"); error("boom!") end }]])
out, _, code = cli("job", "run", "boom", "--wait")
T.is(code, 3, "boom: --wait exits 3 for a failed run")
T.like(out, "about to fail\n%-%-%- run ended: failed %(.-%): jobs/boom:1: boom! %-%-%-\n$", "boom: says how")
-- (job run, then logs -f: it follows the run requested)
cli("job", "run", "boom")
out, _, code = cli("job", "logs", "boom", "-f")
T.is(code, 3, "boom: logs -f of a failed run exits 3 (it exited 0)")
T.like(out, "about to fail\n%-%-%- run ended: failed", "boom: logs -f says so")
_, _, code = cli("job", "logs", "boom", "-f")
T.is(code, 3, "boom: logs -f of a run that has ended: 3 as well")
_, _, code = cli("job", "logs", "boom")
T.is(code, 0, "boom: logs without -f only prints: exit 0")
-- A failure that is a return nil, err too, with a retry followed to the end.
put("retried", [[
return { schedule = "@manual", retry = { attempts = 1, backoff = 0.1 },
  run = function(ctx) print("attempt " .. ctx.attempt); return nil, "no luck" end }]])
out, _, code = cli("job", "run", "retried", "--wait")
T.is(code, 3, "retried: exits 3 once its last attempt failed")
T.like(out, "^%S+ stdout  attempt 1\n%-%-%- attempt 1 ended: no luck; it runs again %-%-%-\n%-%-%- attempt 2 on a %-%-%-\n"
  .. "%S+ stdout  attempt 2\n%-%-%- run ended: failed %(attempt 2 .-no luck %-%-%-\n$",
  "retried: both attempts followed, each in its place")

-- 3. A timeout: 4.
put("slow", [[
return { schedule = "@manual", timeout = 1, run = function(ctx)
  print("sleeping")
  while not ctx:cancelled() do baton.sleep(0.05) end
end }]])
out, _, code = cli("job", "run", "slow", "--wait")
T.is(code, 4, "slow: --wait exits 4 for a run that timed out")
T.like(out, "run ended: failed %(.-%): timed out after 1 s %-%-%-\n$", "slow: says so")

-- 4. Killed: 5, for --wait and for logs -f following it.
put("long", [[
return { schedule = "@manual", run = function(ctx)
  print("started")
  while not ctx:cancelled() do baton.sleep(0.05) end
end }]])
local waited, followed = {}, {}
baton.go(function()
  local r = c:cli("job", "run", "long", "--wait")
  waited.code, waited.out = r.code, r.stdout
end)
local rid = N.wait(20, function()
  local rs = c:records("long")
  return rs[1] and rs[1].state == "running" and rs[1].id
end)
T.ok(rid, "long: running")
baton.go(function()
  local r = c:cli("job", "logs", "long", rid, "-f")
  followed.code, followed.out = r.code, r.stdout
end)
baton.sleep(0.5)
_, err, code = cli("job", "kill", "long")
T.is(code, 0, "long: job kill " .. err)
T.ok(N.wait(20, function() return waited.code and followed.code end), "long: both ended")
T.is(waited.code, 5, "long: --wait exits 5 for a killed run")
T.like(waited.out or "", "started\n.-run ended: killed", "long: --wait says so")
T.is(followed.code, 5, "long: logs -f exits 5 for it too (it exited 0)")

-- 5. Skipped: 6 (concurrency = "forbid" while a run of the job runs).
put("excl", [[
return { schedule = "@manual", concurrency = "forbid", run = function(ctx)
  while not ctx:cancelled() do baton.sleep(0.05) end
end }]])
_, err, code = cli("job", "run", "excl")
T.is(code, 0, "excl: first run " .. err)
T.ok(N.wait(20, function() local rs = c:records("excl"); return rs[1] and rs[1].state == "running" end),
  "excl: running")
out, _, code = cli("job", "run", "excl", "--wait")
T.is(code, 6, "excl: --wait exits 6 for a run skipped by concurrency")
T.like(out, "run ended: skipped", "excl: says so")
cli("job", "kill", "excl")

-- 6. Not started: no live node has the labels (at once), or no node
-- starts it within --start-timeout (withdrawn: it never runs later).
put("mars", [[
return { schedule = "@manual", labels = { planet = "mars" }, run = function() end }]])
_, err, code = cli("job", "run", "mars", "--wait")
T.is(code, 7, "mars: no eligible node: exits 7")
T.like(err, "no live node has the labels planet=mars", "mars: says why")
assert(e:put(P .. "policies/never", "return { claim_delay = function() return nil end }"))
put("never", [[
return { schedule = "@manual", policy = "never", run = function() print("ran") end }]])
local t0 = baton.monotime()
_, err, code = cli("job", "run", "never", "--wait", "--start-timeout", "2")
local took = baton.monotime() - t0
T.is(code, 7, "never: not started within --start-timeout: exits 7")
T.ok(took >= 2 and took < 15, ("never: after the bound (%.1f s)"):format(took))
T.like(err, "no node started run %S+ within 2 s; the request was withdrawn", "never: says so")
T.is(assert(e:get(P .. "trigger/never/", { prefix = true, count_only = true })).count, 0,
  "never: the request is gone")
baton.sleep(1)
T.is(#c:records("never"), 0, "never: and nothing ran")

-- 7. --json: the request first, the lines, the end; usage errors.
out, _, code = cli("job", "run", "boom", "--wait", "--json")
T.is(code, 3, "--json --wait: the same status")
local objs = {}
for l in out:gmatch("[^\n]+") do objs[#objs + 1] = baton.json.decode(l) end
T.ok(#objs >= 3 and objs[1].key and objs[1].id, "--json --wait: the request first")
T.is(objs[2] and objs[2].text, "about to fail", "--json --wait: then the lines")
T.is(objs[#objs]["end"] and objs[#objs]["end"].state, "failed", "--json --wait: the end last")
_, err, code = cli("job", "run", "fine", "--start-timeout", "5")
T.is(code, 2, "--start-timeout without --wait: usage error")
T.like(err, "%-%-start%-timeout goes with %-%-wait", "says so")
out, _, code = cli("job", "run", "--help")
T.like(out, "7  not started", "job run --help lists the exit statuses")

-- 8. job logs of a sharded instant: every shard, each under its ID; -f
-- asks which one.
put("sharded", [[
return { schedule = "@every 2s", shards = 3, run = function(ctx) print("I am shard " .. ctx.shard.index) end }]])
local instant = N.wait(30, function()
  local by = {}
  for _, r in ipairs(c:records("sharded")) do
    by[r.fire] = (by[r.fire] or 0) + (r.state == "succeeded" and 1 or 0)
    if by[r.fire] == 3 then return r.fire end
  end
end)
T.ok(instant, "sharded: an instant with its 3 shards done")
cli("job", "pause", "sharded")
baton.sleep(0.5)
out, err, code = cli("job", "logs", "sharded")
T.is(code, 0, "sharded: job logs " .. err)
local ids = {}
for i, inst in out:gmatch("=== shard (%d) of 3: (%S+), ") do ids[#ids + 1] = i .. "=" .. inst end
T.is(#ids, 3, "sharded: three headers, one per shard")
local all = true
for i = 1, 3 do
  all = all and out:find("=== shard " .. i .. " of 3: [^\n]*/" .. i .. ", [^\n]*===\n[^\n]*stdout  I am shard " .. i .. "\n") ~= nil
end
T.ok(all, "sharded: each shard's output under its own header")
local pick = out:match("=== shard 2 of 3: (%S+),")
_, err, code = cli("job", "logs", "sharded", "-f")
T.is(code, 2, "sharded: logs -f without an ID: usage error")
T.like(err, "in 3 shards: follow one of them by its ID %(.-/1, .-/2, .-/3%)", "sharded: names the IDs")
out, _, code = cli("job", "logs", "sharded", pick)
T.is(code .. "|" .. out:gsub("^%S+ ", ""), "0|stdout  I am shard 2\n", "sharded: INSTANT/SHARD picks one")

c:destroy()
T.done()
