-- Stored code cannot stall, starve or fill a node (issue 22, finding 6):
-- job files' top levels and stored policies run in the node's sandbox
-- (lua/baton/stored.lua), not in its conductor, under bounds on Lua
-- instructions, time (C calls included: the sandbox is stopped) and
-- memory, without debug, ffi, collectgarbage or require beyond baton's
-- policy library. Each case below stalled, starved or grew the conductor
-- before; here the node keeps its session, its other jobs keep their
-- pace, its memory stays small, and each bad file is refused with a line
-- that says why.
local T = require "tap"
local N = require "nodes"
local json = baton.json
local c = N.new("budgets")
local e, P, dir = c.e, c.P, c.dir
local MARK = dir .. "/marker"

-- A module a top level might reach through require (package.path, the
-- node's LUA_PATH): it leaves a mark if it ever loads.
local fh = assert(io.open(dir .. "/evilmod.lua", "w"))
fh:write(("local f = io.open(%q, 'a') f:write('evilmod loaded\\n') f:close() return {}\n"):format(MARK))
fh:close()
c:start("a", 3, "--workers 4", ("LUA_PATH='%s/?.lua;;'"):format(dir))
T.ok(N.wait(10, function() return c:cli("nodes").stdout:match("\na ") end), "the node is up")

local function rss_kb(pid)
  local f = io.open("/proc/" .. pid .. "/status")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)"))
end
local node_pid = c:pid("a")
-- (the node runs under sh -c exec: the same process)
local rss0 = rss_kb(node_pid)

-- A job every second with the default policy: its lateness shows whether
-- the conductor keeps its pace while the bad code below is handled.
local steady = c:put_job("steady", [[return { schedule = "* * * * * *", run = function() end }]])
T.ok(c:loaded("steady", steady), "a steady job, every second")

local function status(job)
  local kv = assert(e:get(P .. "status/" .. job .. "/a")).kvs[1]
  return kv and json.decode(kv.value)
end
local function refused(job, pattern, what, secs)
  local st = N.wait(secs or 15, function()
    local s = status(job)
    return s and s.error ~= json.null and s
  end)
  T.like(st and st.error or "(no status)", pattern, what)
end
local function raw_job(name, src) assert(e:put(P .. "jobs/" .. name, src)) end
local function raw_policy(name, src) assert(e:put(P .. "policies/" .. name, src)) end
local t_bad = baton.now()

-- 1. Job top levels.
raw_job("sleeper", [[os.execute("sleep 8") return { schedule = "@manual", run = function() end }]])
raw_job("unhook", [[require("debug").sethook() while true do end]])
raw_job("ffi", [[local ffi = require "ffi" ffi.cdef "int getpid(void);" return {}]])
raw_job("hog", [[
local t = {}
for i = 1, 60 do t[i] = string.rep("x", 10 * 2^20) .. i end
return { schedule = "@manual", run = function() end }]])
raw_job("nogc", [[collectgarbage("stop") return { schedule = "@manual", run = function() end }]])
raw_job("cwdmod", [[local m = require "evilmod" return { schedule = "@manual", run = function() end }]])
raw_job("backtrack", [[
local s = ("a"):rep(40)
s:find(("a*"):rep(25) .. "b")
return { schedule = "@manual", run = function() end }]])
refused("sleeper", "^EINVAL: job sleeper: error while loading: jobs/sleeper:1: attempt to call field 'execute'",
  "os.execute at the top level: not there")
refused("unhook", "^EINVAL: job unhook: error while loading: jobs/unhook:1: require \"debug\" is not available here",
  "require \"debug\": refused")
refused("ffi", "require \"ffi\" is not available here", "require \"ffi\": refused")
refused("hog", "^EINVAL: job hog: the file used more than 256 MB of memory while loading", "600 MB: refused")
refused("nogc", "attempt to call global 'collectgarbage'", "collectgarbage: not there")
refused("cwdmod", "require \"evilmod\" is not available here", "a module on the node's path: refused")
refused("backtrack", "^EINVAL: job backtrack: the file ran for more than 5 seconds while loading, in a call that "
  .. "does not return", "a pattern that backtracks (a C call): stopped", 30)

-- 2. Stored policies: one that loops, one that never returns from C.
raw_policy("loops", [[return { claim_delay = function() while true do end end }]])
raw_policy("stuck", [[return { claim_delay = function()
  local s = ("a"):rep(40)
  s:find(("a*"):rep(25) .. "b")
  return 0
end }]])
local ploops = c:put_job("ploops", [[return { schedule = "* * * * * *", policy = "loops", run = function() end }]])
local pstuck = c:put_job("pstuck", [[return { schedule = "* * * * * *", policy = "stuck", run = function() end }]])
T.ok(c:loaded("ploops", ploops) and c:loaded("pstuck", pstuck), "jobs that use them")
baton.sleep(12)

-- 3. What the node did meanwhile.
local late, n = 0, 0
for _, rec in ipairs(c:records("steady")) do
  if rec.fire > t_bad and rec.started then
    n = n + 1
    if rec.started - rec.fire > late then late = rec.started - rec.fire end
  end
end
T.ok(n >= 12, "the steady job kept running (" .. n .. " runs)")
T.ok(late < 1, ("its runs started on time throughout (latest %.3f s after its instant)"):format(late))
local ran = 0
for _, job in ipairs { "ploops", "pstuck" } do
  for _, rec in ipairs(c:records(job)) do if rec.fire > t_bad then ran = ran + 1 end end
end
T.ok(ran >= 10, "the jobs of the bad policies ran too, placed by the default (" .. ran .. " runs)")
local log = c:log("a")
T.unlike(log, "session lost", "the node never lost its session")
T.like(log, "policy failed; the default decided[^\n]*instructions[^\n]*policy=loops", "the looping policy: the "
  .. "default decided, and the log says why")
T.like(log, "not asked again until it changes[^\n]*policy=stuck", "the stuck policy: not asked again")
local _, warned = log:gsub("policy failed[^\n]*policy=stuck", "")
T.ok(warned <= 3, "and that is logged once, not for every instant (" .. warned .. " lines)")
local rss = rss_kb(node_pid)
T.ok(rss and rss0 and rss - rss0 < 64 * 1024, ("the node's memory stayed small (%s -> %s kB)"):format(
  tostring(rss0), tostring(rss)))
T.is(io.open(MARK) and "marked" or nil, nil, "the module on the node's path never loaded")

c:destroy()
T.done()
