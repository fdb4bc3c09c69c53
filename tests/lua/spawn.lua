-- baton.spawn: process objects (pid, wait, kill, done), exit codes and
-- signals, wait timeouts, group kills, several waiters, inherited stdio
-- (checked through an inner `baton eval` run by baton.exec), env/cwd,
-- spawn failures, misuse, and the shutdown that kills what is left.
local T = require "tap"

local function trim(s) return (s:gsub("%s+$", "")) end

local files = require "files"
local write_file, read_file = files.write, files.read

-- The baton binary, to run inner scripts with.
local function baton_bin()
  local b = os.getenv("BATON_BIN")
  if b and b ~= "" then return b end
  local r = baton.exec{"readlink", "/proc/" ..
    io.open("/proc/self/stat"):read("*n") .. "/exe"}
  if r and r.code == 0 then return trim(r.stdout) end
end

-- Runs src as an inner `baton eval` script (extra arguments follow) and
-- returns baton.exec's result.
local function eval(src, opts, ...)
  local script = os.tmpname()
  write_file(script, src)
  local t = {baton_bin(), "eval", script, ...}
  t.timeout = 30
  for k, v in pairs(opts or {}) do t[k] = v end
  local r, err = baton.exec(t)
  os.remove(script)
  return r or {code = -1, stdout = "", stderr = err}
end

-- The processes alive (not zombies) whose process group is pgid, as
-- {pid = comm}; and their count.
local function group(pgid)
  local r = baton.exec{"sh", "-c", "cat /proc/[0-9]*/stat 2>/dev/null"}
  local found, n = {}, 0
  for line in r.stdout:gmatch("[^\n]+") do
    local pid, comm, state, pgrp =
      line:match("^(%d+) %((.*)%) (%a) %-?%d+ (%-?%d+)")
    if pid and tonumber(pgrp) == pgid and state ~= "Z" then
      found[tonumber(pid)] = comm
      n = n + 1
    end
  end
  return found, n
end

-- Polls cond every 20 ms for at most secs; returns its last value.
local function within(secs, cond)
  local deadline = baton.monotime() + secs
  local v = cond()
  while not v and baton.monotime() < deadline do
    baton.sleep(0.02)
    v = cond()
  end
  return v
end

local function alive(pid)
  local st = read_file("/proc/" .. pid .. "/stat")
  return st ~= nil and st:match("^%d+ %b() (%a)") ~= "Z"
end

-- the process object, exit codes
do
  local p, err = baton.spawn{"sh", "-c", "exit 3", stdio = "null"}
  T.ok(p, "spawn returns a process: " .. tostring(err))
  T.is(type(p.pid), "number", "p.pid is a number")
  T.ok(p.pid > 1, "p.pid is a real pid")
  T.is(getmetatable(p).__name, "baton.process", "metatable baton.process")
  T.like(tostring(p), "^baton%.process: sh %(pid " .. p.pid .. ", ",
    "tostring names the command and the pid")
  T.is_deeply(p:wait(10), {code = 3}, "wait: code 3, signal nil")
  T.ok(p:done(), "done() after the exit")
  T.is_deeply(p:wait(), {code = 3}, "wait again: the same result at once")
  T.like(tostring(p), "exited with code 3%)$", "tostring after the exit")

  p = baton.spawn{"true", stdio = "null"}
  T.is_deeply(p:wait(), {code = 0}, "true: code 0")

  -- its own session and process group, not ours
  p = baton.spawn{"sleep", "10", stdio = "null"}
  local st = read_file("/proc/" .. p.pid .. "/stat") or ""
  local pgrp, sid = st:match("^%d+ %b() %a %-?%d+ (%-?%d+) (%-?%d+)")
  T.is(tonumber(pgrp), p.pid, "the child leads its own process group")
  T.is(tonumber(sid), p.pid, "in a new session")
  T.is(p:done(), false, "done() while it runs")
  T.is(p:kill("SIGKILL"), true, "kill(\"SIGKILL\") returns true")
  T.is_deeply(p:wait(10), {code = 137, signal = 9},
    "killed by SIGKILL: code 137, signal 9")
end

-- signals: by the child itself, by name, by number, the default SIGTERM
do
  local p = baton.spawn{"sh", "-c", "kill -TERM $$", stdio = "null"}
  T.is_deeply(p:wait(10), {code = 143, signal = 15},
    "killed by its own SIGTERM: code 143, signal 15")

  p = baton.spawn{"sleep", "10", stdio = "null"}
  T.is(p:kill(), true, "kill() with no signal")
  T.is_deeply(p:wait(10), {code = 143, signal = 15}, "the default is SIGTERM")

  p = baton.spawn{"sleep", "10", stdio = "null"}
  T.is(p:kill(2), true, "kill(2)")
  T.is_deeply(p:wait(10), {code = 130, signal = 2}, "a signal number")

  p = baton.spawn{"sh", "-c", "trap 'exit 7' USR1; sleep 10 & wait",
                  stdio = "null"}
  baton.sleep(0.3)   -- let sh set its trap
  T.is(p:kill("SIGUSR1"), true, "kill(\"SIGUSR1\")")
  T.is_deeply(p:wait(10), {code = 7},
    "a handled signal: the child's own exit code")
end

-- wait timeouts; kill after the exit
do
  local p = baton.spawn{"sleep", "10", stdio = "null"}
  local t0 = baton.monotime()
  local r, msg, code = p:wait(0.3)
  local el = baton.monotime() - t0
  T.is(r, nil, "wait timeout returns nil")
  T.is(msg, "ETIMEDOUT: sleep (pid " .. p.pid .. ") still running after 0.3 s",
    "wait timeout message")
  T.is(code, "ETIMEDOUT", "wait timeout code")
  T.ok(el >= 0.28 and el < 2, ("after the timeout (%.2f s)"):format(el))
  T.ok(alive(p.pid) and not p:done(), "the child keeps running")
  r, msg, code = p:wait(0)
  T.ok(r == nil and code == "ETIMEDOUT", "wait(0) polls: " .. tostring(msg))
  T.is(p:kill(), true, "then kill")
  T.is_deeply(p:wait(10), {code = 143, signal = 15}, "and wait")
  r, msg, code = p:kill()
  T.is(r, nil, "kill after the exit returns nil")
  T.is(msg, "ESRCH: sleep (pid " .. p.pid .. ") has exited", "ESRCH message")
  T.is(code, "ESRCH", "ESRCH code")
  T.is_deeply(p:wait(0), {code = 143, signal = 15},
    "wait(0) after the exit returns the result")
end

-- kill reaches the whole process group
do
  local p = baton.spawn{"sh", "-c", "sleep 100 & sleep 100; wait",
                        stdio = "null"}
  local members = within(5, function()
    local g, n = group(p.pid)
    return n == 3 and g
  end)
  local sleeps = 0
  for _, comm in pairs(members or {}) do
    if comm == "sleep" then sleeps = sleeps + 1 end
  end
  T.is(sleeps, 2, "the pipeline started two sleeps in the child's group")
  T.is(p:kill(), true, "kill the group")
  T.is_deeply(p:wait(10), {code = 143, signal = 15}, "sh killed by SIGTERM")
  local empty = within(5, function() return select(2, group(p.pid)) == 0 end)
  T.ok(empty, "no process of the group is left (no sleep 100)")

  -- A straggler outlives the leader: kill still reaches it, then ESRCH.
  local pidfile = os.tmpname()
  p = baton.spawn{"sh", "-c", "sleep 100 & echo $! > " .. pidfile,
                  stdio = "null"}
  T.is_deeply(p:wait(10), {code = 0}, "the leader exits, its child stays")
  local straggler = tonumber(read_file(pidfile))
  T.ok(straggler and alive(straggler), "the straggler runs")
  T.is(p:kill("SIGKILL"), true, "kill after the leader's exit: true while "
    .. "the group has members")
  T.ok(within(5, function() return not alive(straggler) end),
    "the straggler is killed")
  T.ok(within(5, function() return p:kill() == nil end),
    "then kill returns nil (the group is empty)")
  os.remove(pidfile)
end

-- several coroutines wait on one process
do
  local p = baton.spawn{"sleep", "0.5", stdio = "null"}
  local got, n = {}, 0
  for i = 1, 3 do
    baton.go(function()
      local r, msg = p:wait(i == 3 and 0.1 or 10)
      got[i] = r or msg
      n = n + 1
    end)
  end
  local r = p:wait(10)
  T.is_deeply(r, {code = 0}, "the main chunk waits too")
  within(5, function() return n == 3 end)
  T.is_deeply(got[1], {code = 0}, "first waiter gets the result")
  T.is_deeply(got[2], {code = 0}, "second waiter gets the result")
  T.ok(got[1] ~= got[2] and got[1] ~= r, "each gets its own table")
  T.like(got[3], "^ETIMEDOUT: ", "a third waiter timed out on its own")
end

-- stdio: inherited by default (through an inner baton eval), or /dev/null
do
  local r = eval([[
print("before")
local p = assert(baton.spawn{"sh", "-c", "echo out-$1; echo err-$1 >&2",
                             "sh", arg[1]})
print("code", p:wait(10).code)
p = assert(baton.spawn{"sh", "-c", "echo hidden; echo hidden >&2",
                       stdio = "null"})
print("code", p:wait(10).code)
p = assert(baton.spawn{"cat", stdio = "inherit"})
print("cat", p:wait(10).code)
]], {stdin = "from stdin\n"}, "X")
  T.is(r.code, 0, "inner script exits 0")
  T.is(r.stdout, "before\nout-X\ncode\t0\ncode\t0\nfrom stdin\ncat\t0\n",
    "the child writes to baton's stdout (after what Lua printed before), "
    .. "reads baton's stdin; stdio=null hides its output")
  T.is(r.stderr, "err-X\n", "the child writes to baton's stderr")
end

-- env and cwd
do
  local dir = trim(baton.exec{"mktemp", "-d"}.stdout)
  local p = baton.spawn{"sh", "-c",
                        'echo "$BATON_T_A|${HOME-unset}" > out; pwd -P >> out',
                        env = {BATON_T_A = "a b", HOME = false}, cwd = dir}
  T.is_deeply(p:wait(10), {code = 0}, "env/cwd child exits 0")
  local real = trim(baton.exec{"sh", "-c",
                               "cd '" .. dir .. "' && pwd -P"}.stdout)
  T.is(read_file(dir .. "/out"), "a b|unset\n" .. real .. "\n",
    "env adds and removes variables, cwd is used")
  baton.exec{"rm", "-rf", dir}
end

-- spawn failures
do
  local p, msg, code = baton.spawn{"baton-no-such-command", "x"}
  T.is(p, nil, "missing command returns nil")
  T.is(msg, "ENOENT: baton-no-such-command: no such file or directory",
    "missing command message")
  T.is(code, "ENOENT", "missing command code")

  local path = os.tmpname()
  write_file(path, "not a program\n")
  p, msg, code = baton.spawn{path}
  T.is(code, "EACCES", "non-executable file: EACCES")
  T.is(msg, "EACCES: " .. path .. ": permission denied", "EACCES message")
  os.remove(path)

  p, msg, code = baton.spawn{"pwd", cwd = "/nonexistent/baton-dir"}
  T.is(code, "ENOENT", "missing cwd: ENOENT")
  T.like(msg, "^ENOENT: pwd: cwd /nonexistent/baton%-dir: ",
    "missing cwd message names the cwd")
end

-- misuse raises
do
  T.error_like(function() baton.spawn("ls") end,
    "^baton%.spawn: expects a table {cmd, args%.%.%., env=, cwd=, stdio=, channel=, stop_signal=, output=, argv0=, clear_env=, uid=, gid=}",
    "not a table")
  T.error_like(function() baton.spawn{} end,
    "^baton%.spawn: no command", "empty table")
  T.error_like(function() baton.spawn{"sleep", "1", timeout = 1} end,
    "^baton%.spawn: unknown option 'timeout' %(expected env, cwd, stdio, channel, stop_signal, output, argv0, clear_env, uid or gid%)",
    "timeout is not a spawn option")
  T.error_like(function() baton.spawn{"ls", stdio = "pipe"} end,
    '^baton%.spawn: stdio must be "inherit" or "null" %(got "pipe"%)',
    "stdio pipe")
  T.error_like(function() baton.spawn{"ls", stdio = 1} end,
    '^baton%.spawn: stdio must be "inherit" or "null" %(got number%)',
    "stdio number")
  T.error_like(function() baton.spawn{"ls", {}} end,
    "^baton%.spawn: argument 2 must be a string %(got table%)",
    "table argument")
  T.error_like(function() baton.spawn{"ls", env = {A = {}}} end,
    "^baton%.spawn: env A must be a string", "env value table")
  T.error_like(function() baton.spawn{""} end,
    "^baton%.spawn: empty command", "empty command")
  T.error_like(function() baton.spawn{"ls", argv0 = 1} end,
    "^baton%.spawn: argv0 must be a string %(got number%)", "argv0 number")

  local p = baton.spawn{"sleep", "10", stdio = "null"}
  T.error_like(function() p:kill("SIGFOO") end,
    "^baton%.process:kill: unknown signal 'SIGFOO'", "unknown signal name")
  T.error_like(function() p:kill("TERM") end,
    "^baton%.process:kill: unknown signal 'TERM'", "names need SIG")
  T.error_like(function() p:kill(0) end,
    "^baton%.process:kill: signal number must be an integer from 1 to",
    "signal 0")
  T.error_like(function() p:kill(1.5) end,
    "^baton%.process:kill: signal number must be", "fractional signal")
  T.error_like(function() p:kill({}) end,
    "^baton%.process:kill: signal must be a name", "signal table")
  T.error_like(function() p:wait("1") end,
    "^baton%.process:wait: timeout must be a number", "timeout string")
  T.error_like(function() p:wait(-1) end,
    "^baton%.process:wait: timeout must be >= 0", "negative timeout")
  T.error_like(function() p.wait(42) end,
    "baton%.process expected", "wait on something else")
  T.error_like(function()
    table.sort({3, 1, 2}, function(a, b) p:wait(); return a < b end)
  end, "^baton%.process:wait: cannot wait here", "wait inside a C call")
  T.ok(p:kill() and p:wait(10), "the process was unharmed by the misuse")
end

-- a user's own coroutine around wait
do
  local p = baton.spawn{"sh", "-c", "exit 4", stdio = "null"}
  local f = coroutine.wrap(function() return p:wait(10) end)
  T.is_deeply(f(), {code = 4}, "wait inside coroutine.wrap")
end

-- A dropped process object does not stop the child.
do
  local flag = os.tmpname()
  os.remove(flag)
  baton.spawn{"sh", "-c", "sleep 0.3; echo done > " .. flag, stdio = "null"}
  collectgarbage()
  collectgarbage()
  T.ok(within(10, function() return read_file(flag) == "done\n" end),
    "a collected process object leaves its child running")
  os.remove(flag)
end

-- Shutdown: children still running get SIGKILL, to their whole group.
do
  local pids = os.tmpname()
  os.remove(pids)
  local t0 = baton.monotime()
  local r = eval([[
local pids = arg[1]
local p = assert(baton.spawn{"sh", "-c",
  "trap '' TERM; sleep 100 & echo $$ $! > " .. pids .. ".tmp; mv " ..
  pids .. ".tmp " .. pids .. "; wait", stdio = "null"})
for _ = 1, 500 do
  if io.open(pids) then break end
  baton.sleep(0.01)
end
print("started")
]], nil, pids)
  local el = baton.monotime() - t0
  T.is(r.stdout, "started\n", "inner script ran")
  T.is(r.code, 0, "and ended without waiting for its child")
  T.ok(el < 10, ("promptly (%.2f s)"):format(el))
  local p1, p2 = (read_file(pids) or ""):match("(%d+) (%d+)")
  T.ok(p1 and within(5, function()
    return not alive(p1) and not alive(p2)
  end), "the child (which ignores SIGTERM) and its own child were killed")
  os.remove(pids)

  -- A script that fails while a coroutine waits on a child.
  t0 = baton.monotime()
  r = eval([[
local p = assert(baton.spawn{"sh", "-c", "sleep 100 & sleep 100; wait",
                             stdio = "null"})
local f = assert(io.open(arg[1], "w"))
f:write(p.pid)
f:close()
baton.go(function() p:wait() end)
baton.sleep(0.2)
error("boom")
]], nil, pids)
  el = baton.monotime() - t0
  T.is(r.code, 1, "failing script exits 1")
  T.like(r.stderr, "boom", "with its error")
  T.ok(el < 10, ("promptly (%.2f s)"):format(el))
  local pgid = tonumber(read_file(pids))
  T.ok(pgid and within(5, function() return select(2, group(pgid)) == 0 end),
    "the child's whole group was killed")
  os.remove(pids)

  -- stop_signal: what the shutdown sends instead, for a child that must
  -- clean up (a node's worker containment ends its run's processes).
  local out = os.tmpname()
  r = eval([[
local p = assert(baton.spawn{"sh", "-c",
  "trap 'echo got TERM > " .. arg[1] .. "; exit 0' TERM; echo ready > " .. arg[1] ..
  "; while :; do sleep 0.05; done", stdio = "null", stop_signal = "SIGTERM"})
for _ = 1, 500 do
  local f = io.open(arg[1])
  local s = f and f:read("*a")
  if f then f:close() end
  if s == "ready\n" then break end
  baton.sleep(0.01)
end
]], nil, out)
  T.is(r.code, 0, "a script whose child has stop_signal ends")
  T.ok(within(5, function() return read_file(out) == "got TERM\n" end),
       "and the child got SIGTERM, not SIGKILL, at the shutdown")
  os.remove(out)
  r = eval([[baton.spawn{"true", stop_signal = "SIGNOPE"}]])
  T.like(r.stderr, "unknown stop_signal 'SIGNOPE'", "an unknown stop_signal is refused")
  r = eval([[baton.spawn{"true", stop_signal = 9}]])
  T.like(r.stderr, "stop_signal must be a signal name", "so is a number")
end

-- argv0: the name the program gets (what ps shows); the command is what runs
do
  local p = assert(baton.spawn{"/bin/sleep", "10", argv0 = "napping", stdio = "null"})
  local f = assert(io.open("/proc/" .. p.pid .. "/cmdline"))
  local cmdline = f:read("*a")
  f:close()
  T.is(cmdline, "napping\0" .. "10\0", "argv0 is the program's argv[0]")
  p:kill("SIGKILL")
  p:wait()
  local q, msg = baton.spawn{"/nonexistent/prog", argv0 = "napping"}
  T.is(q, nil, "a missing command with argv0 fails")
  T.like(msg, "^ENOENT: /nonexistent/prog: ", "and the error names the command, not argv0")
end

-- clear_env: the child gets env and nothing it would have inherited
do
  local out = os.tmpname()
  local p = assert(baton.spawn { "sh", "-c", "env > " .. out, clear_env = true, env = { ONLY = "this" } })
  p:wait()
  local fh = assert(io.open(out))
  local text = fh:read("*a")
  fh:close()
  os.remove(out)
  T.like(text, "ONLY=this\n", "clear_env: the env given is there")
  T.unlike(text, "BATON_ENDPOINTS", "clear_env: nothing inherited (BATON_ENDPOINTS)")
  T.unlike(text, "HOME=", "clear_env: nothing inherited (HOME)")
  T.error_like(function() baton.spawn { "true", clear_env = "yes" } end,
    "^baton%.spawn: clear_env must be a boolean %(got string%)", "clear_env: a boolean")
end

T.done()
