-- A run's output stays out of the node's log beyond a small budget per
-- attempt (lua/baton/worker/main.lua, run_log): a run that prints 50 MB
-- grows the log of a node writing it to a file by less than 100 KB; the
-- log has the beginning of the output and one line saying how much was
-- left out and where it is; the kept output (baton job logs) still has the
-- end of it. A run that prints little is logged whole, and says nothing
-- of a budget. BATON_RUN_LOG_BYTES changes the budget.
local T = require "tap"
local N = require "nodes"

local c = N.new("nodelogbudget")
c:start("a", 3)

local function log_size()
  local f = io.open(c.dir .. "/a.log", "rb")
  if not f then return 0 end
  local n = f:seek("end")
  f:close()
  return n
end

local function run(job, source, secs)
  local rev = c:put_job(job, source)
  T.ok(c:loaded(job, rev), job .. " loaded")
  local r = c:cli("job", "run", job)
  T.is(r.code, 0, job .. ": job run " .. r.stderr)
  return N.wait(secs or 60, function()
    local rec = c:records(job)[1]
    return rec and rec.state ~= "running" and rec
  end)
end

-- 1. A little output: every line in the node's log, no word of a budget.
do
  local rec = run("quiet", [[
return { schedule = "@manual", run = function(ctx)
  for i = 1, 5 do print("quiet line " .. i) end
  ctx.log.info("quiet log line")
end }]])
  T.is(rec and rec.state, "succeeded", "quiet: succeeded")
  local log = c:log("a")
  T.ok(log:find('msg="quiet line 5"[^\n]*job=quiet'), "quiet: its printed lines are in the node's log")
  T.ok(log:find('msg="quiet log line"[^\n]*job=quiet'), "quiet: its ctx.log line too")
  T.ok(not log:find("run output:", 1, true), "quiet: nothing said of a budget")
end

-- 2. 50 MB: 10 MB in short lines, 40 MB in long ones, then a last line.
local before = log_size()
local rec = run("flood", [[
return { schedule = "@manual", timeout = 600, run = function(ctx)
  local short = string.rep("s", 99)
  for i = 1, 100000 do print(i, short) end
  local long = string.rep("L", 3999)
  for i = 1, 10000 do io.write(long, "\n") end
  ctx.log.info("flood done")
  print("the very last line")
end }]], 240)
T.is(rec and rec.state, "succeeded", "flood: succeeded")
local grown = log_size() - before
T.ok(grown < 100 * 1000, ("flood: 50 MB printed grew the node's log by %d bytes (< 100 KB)"):format(grown))
local log = c:log("a")
T.ok(log:find('msg="1\\tsssss', 1, true), "flood: the first line is in the node's log")
T.ok(not log:find("the very last line", 1, true), "flood: the last line is not")
T.ok(not log:find('msg="flood done"', 1, true), "flood: nor a ctx.log line past the budget")
local id = rec and rec.id or "?"
T.ok(log:find('msg="run output: the rest of this attempt\'s output is not logged here; baton job logs flood '
  .. id .. ' has it"', 1, true), "flood: the log says where the output stops, and where the rest is")
-- (plain finds: on a failing node the log is tens of MB)
local at = log:find(" omitted_lines=", 1, true)
local says = at and log:sub(log:sub(1, at):match(".*()\n") or 1, (log:find("\n", at, true) or #log)) or ""
local omitted = says:match('msg="run output: ([^"]*) more not logged here[^"]*"[^\n]*job=flood')
T.ok(omitted, "flood: one line says how much was left out: " .. tostring(omitted))
local lines = tonumber(says:match("omitted_lines=(%d+)"))
local bytes = tonumber(says:match("omitted_bytes=(%d+)"))
T.ok(lines and lines > 109000 and lines <= 110002, "flood: omitted_lines counts the lines left out: " .. tostring(lines))
T.ok(bytes and bytes > 50e6 and bytes < 51e6, "flood: omitted_bytes counts their bytes: " .. tostring(bytes))
local _, nsays = log:gsub("run output:", "")
T.is(nsays, 2, "flood: two lines about it, not one per line")

-- The kept output has the end of it.
local r = c:cli("job", "logs", "flood")
T.is(r.code, 0, "flood: job logs")
T.like(r.stdout, "stdout  the very last line\n$", "flood: job logs has the last line")
T.like(r.stdout, "info    flood done", "flood: and the ctx.log line")

-- 3. The next run of the same worker starts with a fresh budget.
rec = run("quiet2", [[
return { schedule = "@manual", run = function() print("after the flood") end }]])
T.is(rec and rec.state, "succeeded", "quiet2: succeeded")
T.ok(c:log("a"):find('msg="after the flood"[^\n]*job=quiet2'), "the next run's line is logged: the budget is per attempt")

c:destroy()

-- 4. BATON_RUN_LOG_BYTES in the node's environment sets the budget: 0,
-- none of a run's output, and the two lines that say so.
local z = N.new("nodelogbudget0")
z:start("z", 3, nil, "BATON_RUN_LOG_BYTES=0")
local zrev = z:put_job("zero", 'return { schedule = "@manual", run = function() print("not in the log") end }')
T.ok(z:loaded("zero", zrev), "zero loaded")
z:cli("job", "run", "zero")
T.ok(N.wait(30, function() local r = z:records("zero")[1]; return r and r.state == "succeeded" end), "zero: succeeded")
local zlog = z:log("z")
T.ok(not zlog:find("not in the log", 1, true), "BATON_RUN_LOG_BYTES=0: no line of the run's output")
T.ok(zlog:find('msg="run output: 15 bytes (1 line) more not logged here', 1, true),
  "and one line says what was left out")
z:destroy()
T.done()
