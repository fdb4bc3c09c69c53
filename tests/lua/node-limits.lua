-- Memory limits of runs (docs/jobs.md, field memory; docs/security.md,
-- "Limits"): a job's memory = "64M" holds for its worker's Lua and for the
-- programs it starts; a run over it is recorded failed "out of memory",
-- never succeeded, and the node goes on; a run without a limit on the same
-- node afterwards has none; baton node --run-memory is the default of jobs
-- that set none. Bad values are refused with their message.
--
-- The limit is held by the kernel in a cgroup where the node may make one
-- (cgroup v2 with delegation, as under the shipped systemd unit), else by
-- each worker's containment process; the node's log says which, and this
-- test holds for both (it notes which one it saw).
local T = require "tap"
local N = require "nodes"
local job = require "baton.job"
local bin = os.getenv("BATON_BIN") or "bin/baton"

-- 1. The field.
do
  local function load(v)
    return job.load("return { schedule = '@manual', memory = " .. v .. ", run = function() end }", "j")
  end
  local cases = {
    { '"64M"', 64 * 2^20 }, { "67108864", 64 * 2^20 }, { '"1.5G"', 1.5 * 2^30 }, { '"16384k"', 16 * 2^20 },
    { '"2T"', 2 * 2^40 }, { '"16777216"', 16 * 2^20 },
  }
  for _, c in ipairs(cases) do
    local spec, err = load(c[1])
    T.is(spec and spec.memory, c[2], "memory = " .. c[1] .. " is " .. ("%.0f"):format(c[2]) .. " bytes")
    if not spec then T.diag(err) end
  end
  local spec = job.load("return { schedule = '@manual', run = function() end }", "j")
  T.is(spec.memory, nil, "no memory: no limit of its own")
  T.is(job.summary(load('"64M"')).memory, 64 * 2^20, "job.summary shows it")

  local SIZE = 'a size such as "512M" (K, M, G or T: powers of 1024) or a whole number of bytes'
  local bad = {
    { '"64MB"', 'must be ' .. SIZE .. ', got "64MB"' },
    { '"64 M"', 'must be ' .. SIZE .. ', got "64 M"' },
    { '"lots"', 'must be ' .. SIZE .. ', got "lots"' },
    { '""', 'must be ' .. SIZE .. ', got ""' },
    { '"-64M"', 'must be ' .. SIZE .. ', got "-64M"' },
    { '"64X"', 'must be ' .. SIZE .. ', got "64X"' },
    { "true", "expected " .. SIZE .. ", got boolean" },
    { "{}", "expected " .. SIZE .. ", got table" },
    { "1.5", "must be " .. SIZE .. ", got 1.5" },
    { "0/0", "must be " .. SIZE .. ", got nan" },
    { "1/0", "must be " .. SIZE .. ", got inf" },
    { '"16777216.5"', 'must be a whole number of bytes, got "16777216.5" (16777216.5 bytes)' },
    { '"1M"', 'must be at least 16M (a worker alone holds about 6M), got "1M"' },
    { "1048576", "must be at least 16M (a worker alone holds about 6M), got 1048576" },
    { "-5", "must be at least 16M (a worker alone holds about 6M), got -5" },
    { '"2048T"', 'must be at most 1024T, got "2048T"' },
  }
  for _, b in ipairs(bad) do
    local s, err, code = load(b[1])
    T.is(s, nil, "memory = " .. b[1] .. " is refused")
    T.is(err, "EINVAL: job j: field 'memory': " .. b[2], "with its message")
    T.is(code, "EINVAL", "EINVAL")
  end
  -- (0/0 and 1/0 print as nan/inf or -nan/inf depending on libc)
  local r = assert(baton.exec { bin, "node", "--run-memory", "64MB" })
  T.is(r.code, 2, "baton node --run-memory 64MB: a usage error")
  T.like(r.stderr, '^baton: node: %-%-run%-memory: must be ' .. SIZE:gsub("%p", "%%%0") .. ', got "64MB"\n',
         "naming the flag, in one line")
end

-- Waits for the end of the run of job that node c started (c:cli job run).
local function ended(c, name)
  return N.wait(40, function()
    local rec = c:records(name)[1]
    return rec and rec.state ~= "running" and rec.state ~= "retrying" and rec
  end)
end

local function run(c, name)
  c:cli("job", "run", name)
  return ended(c, name) or {}
end

-- 300 MB built in the worker's Lua, held a moment (the resident memory of a
-- run is looked at every 50 ms where no cgroup holds the limit).
local LUA_300M = [[
    local t = {}
    local mb = string.rep("x", 2^20 - 16)
    for i = 1, 300 do t[i] = mb .. ("%08d"):format(i) end
    baton.sleep(1)
    t = nil
]]
-- 300 MB held by a program the run starts: tail keeps a line that never
-- ends, then waits to write it to a reader that does not read.
local EXEC_300M = [[
    local r = assert(baton.exec { "sh", "-c", "head -c 300M /dev/zero | tail -n 1 | sleep 2", timeout = 20 })
]]
local OOM = "out of memory: the run went over its memory limit of 64M"

-- 2. A node with jobs of 64M, and one without a limit; one worker slot, so
-- the runs follow each other on the node.
do
  local c = N.new("nodelimits")
  c:start("a", 3, "--workers 1")
  local revs = {
    lua64 = c:put_job("lua64", ([[
return { schedule = "@manual", memory = "64M", timeout = 30, run = function(ctx)
  %s
end }]]):format(LUA_300M)),
    exec64 = c:put_job("exec64", ([[
return { schedule = "@manual", memory = "64M", timeout = 30, run = function(ctx)
  %s
  return nil, "exec returned: " .. tostring(r.code) .. " " .. tostring(r.signal)
end }]]):format(EXEC_300M)),
    -- within its limit: 8 MB in Lua and in a program; it sees its limit
    small64 = c:put_job("small64", [[
return { schedule = "@manual", memory = "64M", timeout = 30, run = function(ctx)
  local s = string.rep("y", 8 * 2^20)
  local r = assert(baton.exec { "sh", "-c", "head -c 8M /dev/zero | tail -n 1 | wc -c" })
  assert(r.stdout:match("%d+") == "8388608", "wc: " .. r.stdout)
  assert(os.getenv("BATON_RUN_MEMORY") == "67108864", "BATON_RUN_MEMORY: " .. tostring(os.getenv("BATON_RUN_MEMORY")))
end }]]),
    -- 300 MB for an instant, let go before the run returns
    spike64 = c:put_job("spike64", [[
return { schedule = "@manual", memory = "64M", timeout = 30, run = function(ctx)
  local s = string.rep("z", 300 * 2^20)
  s = nil
  collectgarbage()
end }]]),
    -- the run's processes are the first the kernel's OOM killer takes
    score = c:put_job("score", [[
return { schedule = "@manual", timeout = 30, run = function(ctx)
  local f = assert(io.open("/proc/self/oom_score_adj"))
  local mine = tonumber(f:read("*l"))
  f:close()
  local r = assert(baton.exec { "cat", "/proc/self/oom_score_adj" })
  local child = tonumber(r.stdout:match("-?%d+"))
  if mine < 500 or child < 500 then return nil, "oom_score_adj: worker " .. mine .. ", program " .. child end
end }]]),
    -- no limit: 300 MB in Lua and in a program are fine
    free = c:put_job("free", ([[
return { schedule = "@manual", timeout = 30, run = function(ctx)
  assert(os.getenv("BATON_RUN_MEMORY") == nil, "limited: " .. tostring(os.getenv("BATON_RUN_MEMORY")))
  %s
  local r = assert(baton.exec { "sh", "-c", "head -c 300M /dev/zero | tail -n 1 | wc -c", timeout = 20 })
  assert(r.stdout:match("%%d+") == "314572800", "wc: " .. r.stdout)
end }]]):format(LUA_300M)),
  }
  for name, rev in pairs(revs) do T.ok(c:loaded(name, rev), name .. " loaded") end

  local before = run(c, "free")
  T.is(before.state, "succeeded", "without a limit, 300 MB in Lua and in a program: succeeded")
  if before.state ~= "succeeded" then T.diag(tostring(before.error)) end

  local l = run(c, "lua64")
  T.is(l.state, "failed", "memory = 64M and 300 MB built in Lua: failed")
  T.is(l.error, OOM, "out of memory, with the limit")

  local s = run(c, "small64")
  T.is(s.state, "succeeded", "memory = 64M and 8 MB in Lua and in a program: succeeded, it saw its limit")
  if s.state ~= "succeeded" then T.diag(tostring(s.error)) end

  local x = run(c, "exec64")
  T.is(x.state, "failed", "memory = 64M and a program that holds 300 MB: failed")
  T.is(x.error, OOM, "out of memory, with the limit")

  local after = run(c, "free")
  T.is(after.state, "succeeded", "then, on the same node, a run without a limit is not limited")
  if after.state ~= "succeeded" then T.diag(tostring(after.error)) end

  local sp = run(c, "spike64")
  T.is(sp.state, "failed", "memory = 64M and 300 MB let go before the run returns: failed all the same")
  T.is(sp.error, OOM, "out of memory, with the limit")

  local sc = run(c, "score")
  T.is(sc.state, "succeeded", "a run's worker and its programs have an OOM score adjustment of 500 or more")
  if sc.state ~= "succeeded" then T.diag(tostring(sc.error)) end
  local f = io.open("/proc/" .. c:pid("a") .. "/oom_score_adj")
  local node_score = f and tonumber(f:read("*l"))
  if f then f:close() end
  T.ok(node_score and node_score < 500, "the node's is lower: " .. tostring(node_score))

  -- Twice more, so that a reused worker is tried both ways.
  local s2, l2 = run(c, "small64"), run(c, "lua64")
  T.ok(s2.state == "succeeded" and l2.state == "failed" and l2.error == OOM,
       "a worker of the 64M limit, reused: within it succeeds, over it fails")

  local log = c:log("a")
  local mode = log:match('msg="run memory limits" held_by=(%a+)')
  T.ok(mode == "cgroup" or mode == "watching", "the node says who holds the limits: " .. tostring(mode))
  T.note("memory limits held by " .. tostring(mode) .. ": " .. (log:match('msg="run memory limits"[^\n]*') or ""))
  T.like(log, 'msg="run out of memory: every process of its run was killed"', "the node's log says why")
  T.ok(not c.nodes.a:done(), "the node itself still runs")
  T.is(assert(c.e:get(c.P .. "nodes/a")).count, 1, "and is in the cluster")
  T.unlike(log, "session lost", "it never lost its lease")
  c:destroy()
end

-- 3. --run-memory: the limit of every job that sets none; a job's own
-- memory wins over it.
do
  local c = N.new("nodelimitsdefault")
  c:start("d", 3, "--workers 2 --run-memory 64M")
  local r1 = c:put_job("plain", ([[
return { schedule = "@manual", timeout = 30, run = function(ctx)
  %s
end }]]):format(LUA_300M))
  local r2 = c:put_job("roomy", ([[
return { schedule = "@manual", memory = "1G", timeout = 30, run = function(ctx)
  %s
end }]]):format(LUA_300M))
  T.ok(c:loaded("plain", r1) and c:loaded("roomy", r2), "jobs loaded")
  local p = run(c, "plain")
  T.is(p.state, "failed", "--run-memory 64M: a job without memory that builds 300 MB fails")
  T.is(p.error, OOM, "out of memory, with the node's limit")
  local q = run(c, "roomy")
  T.is(q.state, "succeeded", "a job with memory = \"1G\" on that node: its own limit")
  if q.state ~= "succeeded" then T.diag(tostring(q.error)) end
  c:destroy()
end

T.done()
