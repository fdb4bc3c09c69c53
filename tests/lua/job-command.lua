-- Commands as jobs (job.lua `command`, worker/main.lua): a job whose
-- `command` is a program (a list, no shell) or shell text (/bin/sh -c) runs
-- it on a real node. A non-zero exit or a signal fails the run with the
-- status and the tail of stderr (secrets redacted); its output is kept;
-- env, cwd, params, secrets, a queue task and an event reach it; its
-- timeout ends it and everything it started; and the file is checked as any
-- job file is (exactly one of run and command, the types, did-you-mean).
local T = require "tap"
local N = require "nodes"
local job = require "baton.job"

local c = N.new("jobcommand")
local stamp = tostring(math.floor(baton.now() * 1000))
local SECRET = "s3cret-" .. stamp .. "-xyz"
local sdir = c.dir .. "/secrets"
assert(baton.exec { "mkdir", "-p", sdir, c.dir .. "/work" })
do
  local f = assert(io.open(sdir .. "/DB_PASSWORD", "w"))
  f:write(SECRET, "\n")
  f:close()
  assert(baton.exec { "chmod", "600", sdir .. "/DB_PASSWORD" })
end
c:start("a", 3, "--secrets-dir " .. sdir)

local function ended(name, secs)
  return N.wait(secs or 30, function()
    local rec = c:records(name)[1]
    return rec and rec.state ~= "running" and rec.state ~= "retrying" and rec
  end)
end

local function put(name, source)
  local rev = c:put_job(name, source)
  T.ok(c:loaded(name, rev), name .. " loaded")
end

-- Puts the job and asks for a run (baton job run NAME ...).
local function start(name, source, ...)
  put(name, source)
  local r = c:cli("job", "run", name, ...)
  T.is(r.code, 0, name .. ": job run NAME of a command job: " .. r.stderr)
end

local function logs(name)
  local r = c:cli("job", "logs", name)
  return r.stdout, r.code
end

-- 1. Validation, where job put, check and the nodes do it.
do
  local function err(src)
    local spec, e = job.load(src, "v")
    return spec and "loaded" or e
  end
  T.is(err [[return { schedule = "@manual", command = "true", run = function() end }]],
    "EINVAL: job v: fields 'run' and 'command' exclude each other: a job runs a Lua function or a program",
    "run and command: refused")
  T.like(err [[return { schedule = "@manual" }]],
    "field 'run' is missing: a job needs run = function%(ctx%) ... end, or command = ", "neither: refused")
  T.is(err [[return { schedule = "@manual", command = 5 }]],
    "EINVAL: job v: field 'command': expected a list {\"program\", \"arg\", ...} or a string run by "
      .. "/bin/sh -c, got number", "a number is not a command")
  T.is(err [[return { schedule = "@manual", command = { "ls", true } }]],
    "EINVAL: job v: field 'command': entry 2 is a boolean (arguments are strings or numbers)",
    "an argument that is not a string")
  T.is(err [[return { schedule = "@manual", command = {} }]],
    "EINVAL: job v: field 'command': must be a list {\"program\", \"arg\", ...} with no holes", "an empty list")
  T.is(err [[return { schedule = "@manual", command = "  " }]],
    "EINVAL: job v: field 'command': is empty", "blank shell text")
  T.is(err [[return { schedule = "@manual", command = "true", env = { A = 1 } }]],
    "EINVAL: job v: field 'env': the value of A must be a string, got number", "env values are strings")
  T.is(err [[return { schedule = "@manual", command = "true", env = { ["A-B"] = "1" } }]],
    "EINVAL: job v: field 'env': \"A-B\" is not a variable name (letters, digits and '_', not starting with a "
      .. "digit)", "env names are variable names")
  T.is(err [[return { schedule = "@manual", command = "true", cwd = "tmp" }]],
    "EINVAL: job v: field 'cwd': must be an absolute directory, got \"tmp\"", "cwd is absolute")
  T.is(err [[return { schedule = "@manual", run = function() end, cwd = "/tmp" }]],
    "EINVAL: job v: field 'cwd': only a job with a command has one (in run, give cwd to baton.exec)",
    "cwd without a command")
  T.is(err [[return { schedule = "@manual", command = "true", secrets = { "PW" }, env = { PW = "x" } }]],
    "EINVAL: job v: field 'env': PW is one of the job's secrets: the command gets its value from the node, "
      .. "remove it here", "env does not shadow a secret")
  T.is(err [[return { schedule = "@manual", cmd = "true" }]],
    "EINVAL: job v: unknown field 'cmd' (did you mean 'command'?)", "did you mean: cmd")
  T.is(err [[return { schedule = "@manual", comand = { "true" } }]],
    "EINVAL: job v: unknown field 'comand' (did you mean 'command'?)", "did you mean: a typo")
  T.is(err [[return { schedule = "@manual", run = "pg_dump app" }]],
    "EINVAL: job v: field 'run': expected a function, got string (a program to run goes in command = "
      .. "{\"program\", \"arg\", ...} or command = \"shell text\")", "run given a command line: a hint")

  local _, perr = require("baton.policy").load([[return { schedule = "@daily", command = "true" }]], "p")
  T.is(perr, "EINVAL: policy p: this looks like a job (it has command), not a policy: store it with baton job put",
    "a command job given as a policy: said so")

  -- The same through the sandbox: baton check and job put.
  local f = c.dir .. "/both.lua"
  local fh = assert(io.open(f, "w"))
  fh:write [[return { schedule = "@manual", command = "true", run = function() end }]]
  fh:close()
  local r = c:cli("check", f)
  T.is(r.code, 1, "baton check of run and command: exit 1")
  T.like(r.stderr, "fields 'run' and 'command' exclude each other", "baton check says why")
  r = c:cli("job", "put", f)
  T.is(r.code, 1, "job put of run and command: refused")
  fh = assert(io.open(f, "w"))
  fh:write [[return { schedule = "@daily", command = { "pg_dump", "-f", "/backup/db.sql" }, timeout = 60 }]]
  fh:close()
  r = c:cli("check", f)
  T.is(r.code, 0, "baton check of a command job: ok " .. r.stderr)
  T.like(r.stdout, "^ok: job both, command pg_dump %-f /backup/db%.sql, schedule", "check shows the command")
end

-- 2. A command that fails: failed, with the status and stderr's tail; its
-- output kept. An event job (itself a command) gets the failure.
put("onfail", [[
return { on = { failed = { "failing" } }, command = 'printf "event=%s\\n" "$BATON_EVENT"' }]])
start("failing", [[
return { schedule = "@manual", command = { "sh", "-c", "echo out-before; echo first >&2; echo boom >&2; exit 3" } }]])
local rec = ended("failing")
T.is(rec and rec.state, "failed", "a command that exits 3 is recorded failed")
T.is(rec and rec.error, "command exited with status 3: first | boom", "with the status and the tail of stderr")
local out = logs("failing")
T.like(out, "sh:out%s+out%-before\n", "its stdout is kept")
T.like(out, "sh:err%s+boom\n", "its stderr is kept")
-- (and job run --wait of it exits by its outcome: 3, failed)
local w = c:cli("job", "run", "failing", "--wait")
T.is(w.code, 3, "job run --wait of a command that exits 3: exit 3 (failed)")
T.like(w.stdout, "run ended: failed", "and it says so")
rec = ended("onfail")
T.is(rec and rec.state, "succeeded", "a command job started by the failure: succeeded")
T.like(logs("onfail"), 'event={[^\n]*"job":"failing"', "it got the event in BATON_EVENT")

-- 3. Commands that succeed: a list, and shell text with a pipe.
start("hello", [[return { schedule = "@manual", command = { "echo", "hello-from-command", 42 } }]])
start("piped", [[return { schedule = "@manual", command = "echo piped-text | tr a-z A-Z" }]])
rec = ended("hello")
T.is(rec and rec.state, "succeeded", "a command that exits 0 is recorded succeeded")
T.like(logs("hello"), "echo:out%s+hello%-from%-command 42\n", "its output is kept (baton job logs)")
T.ok(not c:log("a"):find("hello-from-command", 1, true), "and is not in the node's log")
rec = ended("piped")
T.is(rec and rec.state, "succeeded", "shell text with a pipe: succeeded")
T.like(logs("piped"), "sh:out%s+PIPED%-TEXT\n", "the pipe ran in /bin/sh")

-- 4. env, cwd, params, the run's facts and secrets; a secret in stderr is
-- redacted in the error.
start("envcwd", ([[
return {
  schedule = "@manual", params = { region = "eu" }, secrets = { "DB_PASSWORD" },
  env = { GREETING = "hi there" }, cwd = %q,
  command = 'echo "greet=$GREETING cwd=$(pwd) region=$BATON_PARAM_region job=$BATON_JOB attempt=$BATON_ATTEMPT '
    .. 'pw=$DB_PASSWORD"; test "$DB_PASSWORD" = %q',
}]]):format(c.dir .. "/work", SECRET), "--param", "region=us")
start("leaky", [[
return { schedule = "@manual", secrets = { "DB_PASSWORD" },
         command = 'echo "the password is $DB_PASSWORD" >&2; exit 1' }]])
rec = ended("envcwd")
T.is(rec and rec.state, "succeeded", "env/cwd/params/secrets: succeeded (it got the secret's value) "
  .. tostring(rec and rec.error))
out = logs("envcwd")
T.like(out, "greet=hi there cwd=" .. (c.dir .. "/work"):gsub("%p", "%%%0") .. " region=us job=envcwd attempt=1 pw=%*%*%*\n",
  "env, cwd, BATON_PARAM_region (from job run --param), BATON_JOB, BATON_ATTEMPT; the secret redacted")
T.ok(not out:find(SECRET, 1, true), "the secret's value is not in the kept output")
rec = ended("leaky")
T.is(rec and rec.error, "command exited with status 1: the password is ***",
  "a secret in stderr is redacted in the error")

-- 5. A queue task is the command's stdin, its key in BATON_TASK_KEY.
put("qcmd", [[return { queue = "cmdq", command = 'read v; echo "task=$v key=${BATON_TASK_KEY##*/}"' }]])
local qr = c:cli("queue", "push", "cmdq", "payload-" .. stamp)
T.is(qr.code, 0, "queue push " .. qr.stderr)
rec = ended("qcmd")
T.is(rec and rec.state, "succeeded", "a queue command job: succeeded")
T.like(logs("qcmd"), "task=payload%-" .. stamp .. " key=%S+\n", "the task's value on stdin, its key in the env")

-- 6. Timeouts: a command that takes SIGTERM, and one that ignores it (killed
-- after the node's grace); neither leaves a process behind.
local function pids(file)
  local f = io.open(file)
  if not f then return {} end
  local list = {}
  for p in f:read("*a"):gmatch("%d+") do list[#list + 1] = p end
  f:close()
  return list
end
local function alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local st = f:read("*a")
  f:close()
  return st:match("^%d+ %b() (%a)") ~= "Z"
end
for _, case in ipairs { { "slow", "" }, { "stubborn", "trap '' TERM; " } } do
  local name, trap = case[1], case[2]
  local pidf = c.dir .. "/" .. name .. ".pids"
  start(name, ([[
return { schedule = "@manual", timeout = 2,
         command = { "sh", "-c", %q } }]]):format(trap .. "echo $$ > " .. pidf
    .. "; sleep 300 & echo $! >> " .. pidf .. "; wait; sleep 300"))
end
for _, name in ipairs { "slow", "stubborn" } do
  rec = ended(name, 40)
  T.is(rec and rec.state, "failed", name .. ": timed out: failed")
  T.is(rec and rec.error, "timed out after 2 s", name .. ": the error says so")
  local list = pids(c.dir .. "/" .. name .. ".pids")
  T.is(#list, 2, name .. ": the shell and its background sleep wrote their pids")
  local left = N.wait(10, function()
    for _, p in ipairs(list) do if alive(p) then return false end end
    return true
  end)
  T.ok(left, name .. ": no process of the command is left")
end

c:destroy()
T.done()
