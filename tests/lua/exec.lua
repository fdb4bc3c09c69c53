-- baton.exec: spawn without a shell, capture stdout/stderr, exit codes and
-- signals, timeouts (group kill, SIGKILL after the grace), the output cap,
-- env/cwd/stdin, misuse, concurrency, user coroutines, and a killed
-- coroutine (the child and its group are killed, the process exits).
local T = require "tap"
local _ -- results a check ignores

local function sh(script, opts)
  local t = {"sh", "-c", script}
  for k, v in pairs(opts or {}) do t[k] = v end
  return baton.exec(t)
end

local function trim(s) return (s:gsub("%s+$", "")) end

-- True while pid runs (a zombie, killed but not yet reaped by init, is
-- not running).
local function alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local st = f:read("*a")
  f:close()
  return st:match("^%d+ %b() (%a)") ~= "Z"
end

-- The baton binary, to run child scripts with.
local function baton_bin()
  local b = os.getenv("BATON_BIN")
  if b and b ~= "" then return b end
  local r = sh("readlink /proc/$PPID/exe")
  if r and r.code == 0 then return trim(r.stdout) end
end

local files = require "files"
local write_file, read_file = files.write, files.read

-- success, stdout, stderr, exit code
do
  local r, err = baton.exec{"echo", "hello", "world"}
  T.ok(r, "echo succeeds: " .. tostring(err))
  r = r or {}
  T.is(r.code, 0, "exit code 0")
  T.is(r.signal, nil, "no signal: signal is nil")
  T.is(r.stdout, "hello world\n", "stdout captured")
  T.is(r.stderr, "", "stderr empty")

  r = sh("echo out; echo err 1>&2; exit 3")
  T.is(r.code, 3, "non-zero exit code is returned, not an error")
  T.is(r.stdout, "out\n", "stdout with a failing exit")
  T.is(r.stderr, "err\n", "stderr captured")

  r = baton.exec{"printf", "%s|", "a b", "", "c\"d", 42}
  T.is(r.stdout, "a b||c\"d|42|",
    "arguments passed verbatim (no shell), numbers ok")

  r = baton.exec{"/bin/echo", "abs"}
  T.is(r.stdout, "abs\n", "absolute path")
end

-- signals
do
  local r = sh("kill -TERM $$")
  T.is(r.signal, 15, "killed by SIGTERM: signal = 15")
  T.is(r.code, 143, "killed by a signal: code = 128 + signal")
  r = sh("kill -KILL $$")
  T.is(r.signal, 9, "SIGKILL")
end

-- spawn failures
do
  local r, msg, code = baton.exec{"baton-no-such-command", "x"}
  T.is(r, nil, "missing command returns nil")
  T.is(msg, "ENOENT: baton-no-such-command: no such file or directory",
       "missing command message")
  T.is(code, "ENOENT", "missing command code")

  local path = os.tmpname()
  write_file(path, "not a program\n")
  r, msg, code = baton.exec{path}
  T.is(code, "EACCES", "non-executable file: EACCES")
  T.is(msg, "EACCES: " .. path .. ": permission denied", "EACCES message")
  os.remove(path)

  r, msg, code = baton.exec{"pwd", cwd = "/nonexistent/baton-dir"}
  T.is(code, "ENOENT", "missing cwd: ENOENT")
  T.like(msg, "^ENOENT: pwd: cwd /nonexistent/baton%-dir: ",
    "missing cwd message names the cwd")
end

-- timeout
do
  local t0 = baton.now()
  local r, msg, code = baton.exec{"sleep", "5", timeout = 1}
  local el = baton.now() - t0
  T.is(r, nil, "timeout returns nil")
  T.is(msg, "ETIMEDOUT: sleep timed out after 1 s", "timeout message")
  T.is(code, "ETIMEDOUT", "timeout code")
  T.ok(el >= 0.9 and el < 2.5,
    string.format("timed out after ~1 s (%.2f s)", el))

  -- The whole process group is signalled: the sleep started by sh must not
  -- keep the pipes open until it ends.
  t0 = baton.now()
  r, msg = sh("sleep 30; echo never", {timeout = 0.5})
  el = baton.now() - t0
  T.is(msg, "ETIMEDOUT: sh timed out after 0.5 s", "group timeout message")
  T.ok(el < 2, string.format("grandchild killed with the group (%.2f s)", el))

  -- A child that ignores SIGTERM gets SIGKILL after the grace (2 s).
  t0 = baton.now()
  r, msg = sh("trap '' TERM; sleep 30", {timeout = 0.3})
  el = baton.now() - t0
  T.is(r, nil, "SIGTERM ignored: still times out")
  T.ok(el >= 2 and el < 5,
    string.format("SIGKILL after the grace (%.2f s)", el))

  r = baton.exec{"true", timeout = 5}
  T.is(r and r.code, 0, "a timeout that does not fire changes nothing")
end

-- large outputs: both pipes are drained together, no deadlock
do
  local r = sh("head -c 2097152 /dev/zero | tr '\\0' x")
  T.is(#r.stdout, 2097152, "2 MiB of stdout")
  T.ok(r.stdout:match("^x+$"), "stdout content intact")
  r = sh("head -c 1048576 /dev/zero >&2; head -c 1048577 /dev/zero")
  T.is(#r.stderr, 1048576, "1 MiB of stderr")
  T.is(#r.stdout, 1048577, "then 1 MiB of stdout")

  local t0 = baton.now()
  local msg, code
  r, msg, code = sh("head -c 70000000 /dev/zero; sleep 30")
  T.is(code, "ETOOLARGE", "output over the cap: ETOOLARGE")
  T.is(msg, "ETOOLARGE: sh: stdout exceeds 64 MiB", "cap message")
  T.ok(baton.now() - t0 < 10, "the child is killed at the cap")
end

-- env, cwd, stdin
do
  local r = sh('echo "$BATON_T_A|$BATON_T_B|${HOME-unset}|$PATH"',
               {env = {BATON_T_A = "one two", BATON_T_B = 7, HOME = false}})
  local a, b, home, path = r.stdout:match("^(.-)|(.-)|(.-)|(.-)\n$")
  T.is(a, "one two", "env adds a variable")
  T.is(b, "7", "env number value")
  T.is(home, "unset", "env = false removes an inherited variable")
  T.is(path, os.getenv("PATH"), "the rest of the environment is inherited")

  r = sh('echo "$HOME"', {env = {HOME = "/baton-home"}})
  T.is(r.stdout, "/baton-home\n", "env overrides an inherited variable")
  r = sh('echo "${HOME-unset}"')
  T.is(trim(r.stdout), os.getenv("HOME") or "unset",
    "without env, the environment is inherited")

  local dir = trim(baton.exec{"mktemp", "-d"}.stdout)
  r = baton.exec{"pwd", "-P", cwd = dir}
  local real = trim(baton.exec{"sh", "-c",
    "cd '" .. dir .. "' && pwd -P"}.stdout)
  T.is(trim(r.stdout), real, "cwd")
  baton.exec{"rmdir", dir}

  r = baton.exec{"cat", stdin = "line 1\nline 2\n"}
  T.is(r.stdout, "line 1\nline 2\n", "stdin")
  local big = string.rep("0123456789abcdef", 65536 * 2)
  r = baton.exec{"wc", "-c", stdin = big}
  T.is(tonumber(r.stdout:match("%d+")), #big, "2 MiB of stdin")
  r = baton.exec{"cat", stdin = ""}
  T.is(r.stdout, "", "empty stdin is an immediate EOF")
  r = baton.exec{"true", stdin = big}
  T.is(r and r.code, 0, "a child that does not read its stdin (EPIPE ignored)")
  r = baton.exec{"cat"}
  T.is(r.stdout, "", "no stdin option: stdin is /dev/null")
end

-- misuse raises
do
  T.error_like(function() baton.exec("ls") end,
    "^baton%.exec: expects a table", "not a table")
  T.error_like(function() baton.exec{} end,
    "^baton%.exec: no command", "empty table")
  T.error_like(function() baton.exec{"ls", timout = 1} end,
    "^baton%.exec: unknown option 'timout'", "unknown option")
  T.error_like(function() baton.exec{"sleep", "1", timeout = 0} end,
    "^baton%.exec: timeout must be > 0", "timeout 0")
  T.error_like(function() baton.exec{"sleep", "1", timeout = "1"} end,
    "^baton%.exec: timeout must be a number", "timeout string")
  T.error_like(function() baton.exec{"ls", {}} end,
    "^baton%.exec: argument 2 must be a string %(got table%)", "table argument")
  T.error_like(function() baton.exec{"ls", nil, "x"} end,
    "^baton%.exec: ", "hole in the argument list")
  T.error_like(function() baton.exec{"ls", "a\0b"} end,
    "^baton%.exec: argument 2 contains a NUL byte", "NUL in an argument")
  T.error_like(function() baton.exec{"ls", env = "A=1"} end,
    "^baton%.exec: env must be a table", "env not a table")
  T.error_like(function() baton.exec{"ls", env = {["A=B"] = "1"}} end,
    "^baton%.exec: invalid env name 'A=B'", "env name with =")
  T.error_like(function() baton.exec{"ls", env = {A = {}}} end,
    "^baton%.exec: env A must be a string", "env value table")
  T.error_like(function() baton.exec{"ls", stdin = 5} end,
    "^baton%.exec: stdin must be a string", "stdin number")
  T.error_like(function() baton.exec{"ls", cwd = true} end,
    "^baton%.exec: cwd must be a string", "cwd boolean")
  T.error_like(function()
    table.sort({3, 1, 2}, function(a, b) baton.exec{"true"}; return a < b end)
  end, "^baton%.exec: cannot wait here", "waiting inside a C call raises")
end

-- check = true: a non-zero exit or a signal is a failure (nil, "ECHILD:
-- ...", "ECHILD") with the tail of stderr; success still returns the table
do
  local r, err, code = sh("echo out; echo boom >&2; exit 3", {check = true})
  T.is(r, nil, "check: a non-zero exit returns nil")
  T.is(err, "ECHILD: sh exited with status 3: boom", "check: the status and stderr's tail")
  T.is(code, "ECHILD", "check: code ECHILD")
  local ok, raised = pcall(function() return assert(sh("exit 4", {check = true})) end)
  T.ok(not ok and tostring(raised):find("ECHILD: sh exited with status 4", 1, true),
       "check: assert(baton.exec{..., check = true}) raises the error: " .. tostring(raised))
  r = sh("echo fine", {check = true})
  T.is(r and r.stdout, "fine\n", "check: a success returns the result")
  r, err = sh("kill -KILL $$", {check = true})
  T.is(err, "ECHILD: sh was killed by signal 9 (SIGKILL)", "check: a signal, named; no stderr, no tail")
  _, err = sh("for i in 1 2 3 4 5 6 7; do echo line$i >&2; echo >&2; done; exit 1", {check = true})
  T.is(err, "ECHILD: sh exited with status 1: line3 | line4 | line5 | line6 | line7",
       "check: the last 5 non-blank lines")
  _, err = sh("i=0; while [ $i -lt 4 ]; do head -c 400 /dev/zero | tr '\\0' x >&2; echo >&2; i=$((i+1)); done; exit 1",
              {check = true})
  T.like(err, "^ECHILD: sh exited with status 1: %.%.%. | x+ | x+$", "check: at most 1 KiB, '...' for the rest")
  T.ok(#err < 1024 + 60, "check: the tail is short (" .. #err .. " bytes)")
  _, err = sh("{ printf 'start '; head -c 3000 /dev/zero | tr '\\0' y; printf ' word%s' $(seq 1 80); "
              .. "echo ' end'; } >&2; exit 1", {check = true})
  T.ok(err, "check: a long line")
  local tail = err and err:match(": (%.%.%..*)$") or ""
  T.like(tail, "^%.%.%.word%d+ ", "check: a long line's end starts at a word")
  T.like(tail, " word80 end$", "check: and goes to its end")
  r, err = sh("exit 0", {check = false})
  T.is(r and r.code, 0, "check = false: as without it")
  r = sh("exit 5", {check = false})
  T.is(r and r.code, 5, "check = false: a non-zero exit returns the table")
  T.error_like(function() sh("true", {check = "yes"}) end, "check must be a boolean", "check: a boolean")
end

-- tail = n: only the last n bytes of each stream are returned, and more
-- output than the 64 MiB cap is no error
do
  local r = sh("printf 0123456789abcdef; printf ABCDEFGHIJ >&2", {tail = 10})
  T.is(r and r.stdout, "6789abcdef", "tail: the last 10 bytes of stdout")
  T.is(r and r.stderr, "ABCDEFGHIJ", "tail: all of a short stderr")
  r = sh("head -c 70000000 /dev/zero | tr '\\0' z; echo the-end", {tail = 100000})
  T.is(r and r.code, 0, "tail: 70 MB of output is no error")
  T.is(r and #r.stdout, 100000, "tail: 100000 bytes returned")
  T.ok(r and r.stdout:find("[^z]") == 99993 and r.stdout:sub(-8) == "the-end\n",
       "tail: they are the last ones")
  local _, err = sh("head -c 70000000 /dev/zero", {check = true, tail = 16})
  T.is(err, nil, "tail + check: a success")
  _, err = sh("head -c 100000 /dev/zero | tr '\\0' q >&2; echo >&2; echo last-words >&2; exit 2", {check = true, tail = 64})
  T.is(err, "ECHILD: sh exited with status 2: qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq | last-words",
       "tail + check: the error's tail comes from what is kept")
  T.error_like(function() sh("true", {tail = 0}) end, "tail must be a whole number of bytes", "tail: >= 1")
  T.error_like(function() sh("true", {tail = 1.5}) end, "tail must be a whole number of bytes", "tail: whole")
  T.error_like(function() sh("true", {tail = "1"}) end, "tail must be a number of bytes", "tail: a number")
end

-- concurrency: two coroutines' children run in parallel
do
  local t0, done = baton.now(), 0
  for _ = 1, 2 do
    baton.go(function()
      local r = baton.exec{"sleep", "1.5"}
      if r and r.code == 0 then done = done + 1 end
    end)
  end
  while done < 2 and baton.now() - t0 < 10 do baton.sleep(0.05) end
  local el = baton.now() - t0
  T.is(done, 2, "both coroutines finished")
  T.ok(el < 2.6, string.format("in parallel: %.2f s for 2 x 1.5 s", el))

  -- many at once
  local n, ok = 20, 0
  done = 0
  for i = 1, n do
    baton.go(function()
      local r = baton.exec{"sh", "-c", "echo $0", tostring(i)}
      if r and r.stdout == i .. "\n" then ok = ok + 1 end
      done = done + 1
    end)
  end
  while done < n and baton.now() - t0 < 20 do baton.sleep(0.02) end
  T.is(ok, n, n .. " concurrent execs each got their own output")
end

-- a user's own coroutine around baton.exec
do
  local f = coroutine.wrap(function(word)
    local r = baton.exec{"echo", word}
    coroutine.yield(r and r.stdout)
    local r2 = baton.exec{"echo", word .. "2"}
    return r2 and r2.stdout
  end)
  T.is(f("inner"), "inner\n", "baton.exec inside coroutine.wrap")
  T.is(f(), "inner2\n", "and again after a user yield")

  local co = coroutine.create(function() return baton.exec{"echo", "c"} end)
  local ok, r = coroutine.resume(co)
  T.ok(ok and r and r.stdout == "c\n",
    "baton.exec inside coroutine.create/resume")
end

-- A killed coroutine kills its child's whole group, without resuming:
-- a script whose main chunk fails while a baton.go waits in exec exits
-- promptly, and the child and grandchild are gone.
do
  local bin = baton_bin()
  if not bin then
    T.skip("cannot find the baton binary (set BATON_BIN)", 4)
  else
    local script, pids = os.tmpname(), os.tmpname()
    write_file(script, string.format([[
baton.go(function()
  baton.exec{"sh", "-c", "sleep 30 & echo $$ $! > %s; wait"}
end)
baton.sleep(0.5)
error("boom")
]], pids))
    local t0 = baton.now()
    local r = baton.exec{bin, "eval", script, timeout = 20}
    local el = baton.now() - t0
    T.ok(r and r.code == 1, "the script fails with status 1")
    T.ok(el < 5, string.format("and exits promptly (%.2f s)", el))
    T.like(r and r.stderr or "", "boom", "with its error")
    local p1, p2 = (read_file(pids) or ""):match("(%d+) (%d+)")
    T.ok(p1 and not alive(p1) and not alive(p2),
         "child and grandchild were killed")
    os.remove(script)
    os.remove(pids)
  end
end

T.done()
