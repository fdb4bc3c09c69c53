-- baton check, job put|ls|show|rm|run|pause|resume|history, queue push, nodes
-- and leader as processes against the harness's etcd (docs/jobs.md, "The job
-- CLI"; docs/architecture.md, "Key layout"). Run records, node info and
-- statuses, which the node writes, are written here directly in the
-- documented format.
local T = require "tap"
local _ -- results a check ignores
local bin = os.getenv("BATON_BIN") or "bin/baton"
local root = os.getenv("BATON_ROOT") or "."
local e = baton.etcd
local P = "/test/jobcli/" .. tostring(baton.now()) .. "/"
local tmp = (os.getenv("BATON_TEST_TMP") or "/tmp") .. "/jobcli-" .. tostring(baton.now())
assert(baton.exec { "mkdir", "-p", tmp })

-- Runs baton with the test's prefix; returns stdout, stderr, status.
local function run(...)
  local cmd = { bin, "--prefix", P, timeout = 60 }
  for _, a in ipairs { ... } do cmd[#cmd + 1] = a end
  local r = assert(baton.exec(cmd))
  return r.stdout, r.stderr, r.code
end

local function write(name, text)
  local path = tmp .. "/" .. name
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

local function count(prefix)
  return assert(e:get(P .. prefix, { prefix = true, count_only = true })).count
end

local function lit(s) return (s:gsub("%p", "%%%0")) end

local good = write("nightly.lua", [[
-- a test job
return {
  schedule = "0 2 * * *", timezone = "Asia/Shanghai", timeout = 60,
  retry = { attempts = 2 }, labels = { region = "eu" },
  run = function(ctx) end,
}]])
local bad = write("bad.lua", 'return { schedule = "0 25 * * *", run = function() end }')

-- 1. baton check
do
  local out, err, code = run("check", good)
  T.is(code, 0, "check: a valid job exits 0")
  T.is(err, "", "check: nothing on stderr")
  local lines = {}
  for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
  T.is(lines[1], 'ok: job nightly, schedule "0 2 * * *" Asia/Shanghai, timeout 60s, concurrency forbid, '
    .. "misfire run_once, retries 2, labels region=eu", "check: the one-line summary")
  T.is(#lines, 6, "check: then 5 fire instants")
  local ok = true
  for i = 2, 6 do ok = ok and lines[i]:find("^%d%d%d%d%-%d%d%-%d%dT02:00:00%+08:00$") ~= nil end
  T.ok(ok, "check: instants printed in the job's zone (02:00+08:00)")
  T.ok(lines[2] < lines[3] and lines[5] < lines[6], "check: in order")

  out, err, code = run("check", bad)
  T.is(code, 1, "check: an invalid job exits 1")
  T.is(out, "", "check: nothing on stdout")
  T.is(err, "baton: check " .. bad .. [[: EINVAL: job bad: field 'schedule': invalid cron expression "0 25 * * *": ]]
    .. "field 2 (hour) at column 3: 25 is out of range 0-23\n", "check: the one-line error naming the field")

  local _, err2, code2 = run("check")
  T.is(code2, 2, "check without FILE: usage error, exit 2")
  T.like(err2, "^baton: check: needs a FILE\nusage: baton check FILE%.lua\n$", "check: usage message")
  _, err2, code2 = run("check", tmp .. "/missing.lua")
  T.is(code2, 1, "check: a missing file exits 1")
  T.like(err2, "^baton: check .-missing%.lua: ENOENT: .-No such file or directory\n$", "check: says why")
  _, err2, code2 = run("check", write("syntax.lua", "return {"))
  T.is(code2, 1, "check: a syntax error exits 1")
  T.like(err2, "^baton: check .-syntax%.lua: EINVAL: job syntax: syntax error: .-syntax%.lua:1: "
    .. "unexpected symbol near '<eof>'\n$", "check: the syntax error, one line, no traceback")
  _, err2, code2 = run("check", write("loop.lua", "while true do end"))
  T.is(code2, 1, "check: an endless loop at load time exits 1")
  T.like(err2, "ran for more than %d+ Lua instructions while loading", "check: bounded")
  out, _, code2 = run("check", write("manual.lua", 'return { schedule = "@manual", run = function() end }'))
  T.is(code2, 0, "check: @manual is valid")
  T.like(out, "\n@manual: runs only when triggered %(baton job run manual%)\n$", "check: @manual has no fires")
  out, _, code2 = run("check", write("pol.lua", "return { claim_delay = function() return 0 end }"))
  T.is(code2, 0, "check: a policy file exits 0")
  T.like(out, "^ok: policy pol %(claim_delay%)\n", "check: a policy is checked as a policy")
  local sun = write("sunday.lua", 'return { schedule = "0 0 * * 5-0", run = function() end }')
  out, err2, code2 = run("check", sun)
  T.is(code2, 1, "check: a day-of-week range ending at 0 exits 1")
  T.is(out, "", "check: a backwards range prints nothing on stdout")
  T.is(err2, "baton: check " .. sun .. [[: EINVAL: job sunday: field 'schedule': invalid cron expression "0 0 * * 5-0": ]]
    .. "field 5 (day-of-week) at column 9: range 5-0 runs backwards (Sunday at the end of a range is 7: "
    .. "write 5-7)\n", "check: one line, pointing at the range")
end

-- 2. The sample jobs in jobs/ pass baton check.
do
  local ls = assert(baton.exec { "sh", "-c", "ls " .. root .. "/jobs/*.lua" })
  local n = 0
  for f in ls.stdout:gmatch("[^\n]+") do
    n = n + 1
    local out, err, code = run("check", f)
    if not T.is(code, 0, "jobs/" .. f:match("[^/]+$") .. " passes baton check") then T.diag(err) end
    T.like(out, "^ok: job ", "with an ok line")
    local fh = assert(io.open(f))
    T.like(fh:read("*l"), "^%-%- ", "and starts with a header comment")
    fh:close()
  end
  T.ok(n >= 3, "at least three sample jobs (" .. n .. ")")
end

-- 3. job put
do
  local out, err, code = run("job", "put", bad)
  T.is(code, 1, "put: an invalid job exits 1")
  T.like(err, "^baton: job put .-bad%.lua: EINVAL: job bad: field 'schedule': ", "put: with the validation error")
  T.is(count("jobs/"), 0, "put: nothing was written")
  _, err, code = run("job", "put", good, "--name", "no/slash")
  T.is(code, 2, "put: an invalid --name is a usage error")
  T.like(err, '^baton: job put: invalid job name "no/slash"', "put: says so")
  _, err, code = run("job", "put", write("my job.lua", "return {}"))
  T.is(code, 2, "put: a file name that is no job name is a usage error")
  T.like(err, "choose one with %-%-name", "put: suggests --name")
  T.is(count("jobs/"), 0, "put: still nothing written")

  out, err, code = run("job", "put", good)
  T.is(code, 0, "put: a valid job exits 0")
  T.like(out, "^created job nightly at " .. lit(P) .. "jobs/nightly %(revision %d+%)\n$", "put: says where")
  local kv = assert(e:get(P .. "jobs/nightly")).kvs[1]
  local fh = assert(io.open(good))
  T.is(kv and kv.value, fh:read("*a"), "put: the stored value is the file's source")
  fh:close()
  out, _, code = run("job", "put", good, "--name", "other")
  T.is(code, 0, "put --name")
  T.like(out, "^created job other at " .. lit(P) .. "jobs/other ", "put --name: stored under the name")
  out = run("job", "put", good, "--name=other")
  T.like(out, "^updated job other ", "put again: updated")
end

-- 4. run records, statuses and the history/show views
local function record(job, fire, fields)
  local rec = { job = job, fire = fire, node = "n1", attempt = 1, state = "succeeded",
                started = fire + 0.5, finished = fire + 75.5, error = baton.json.null, fence = 7,
                code_revision = 3 }
  for k, v in pairs(fields or {}) do rec[k] = v end
  assert(e:put(P .. "runs/" .. job .. "/" .. os.date("!%Y-%m-%dT%H:%M:%SZ", fire), baton.json.encode(rec)))
end
local day = 1795989600 -- 2026-11-29T22:00:00Z
do
  record("nightly", day, {})
  record("nightly", day + 86400, { node = "n2", attempt = 2, state = "failed", error = "pg_dump exited 1", finished = day + 86400 + 5.5 })
  record("nightly", day + 2 * 86400, { node = "n3", state = "running", finished = baton.json.null })
  -- another job whose name is a prefix of this one must not mix in
  record("nightly2", day + 3 * 86400, {})

  local out, err, code = run("job", "history", "nightly")
  T.is(code, 0, "history: exit 0")
  local i1, i2, i3 = os.date("!%Y-%m-%dT%H:%M:%SZ", day), os.date("!%Y-%m-%dT%H:%M:%SZ", day + 86400),
    os.date("!%Y-%m-%dT%H:%M:%SZ", day + 2 * 86400)
  local lines = {}
  for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
  T.is(lines[1], "FIRE                  NODE  ATTEMPT  STATE      DURATION  ERROR", "history: header")
  T.like(lines[2] or "", "^" .. lit(i3) .. "  n3    1        running    %S+%+$", "history: newest first, a running run")
  T.is(lines[3], i2 .. "  n2    2        failed     5s        pg_dump exited 1", "history: a failed attempt")
  T.is(lines[4], i1 .. "  n1    1        succeeded  1m15s", "history: a success with its duration")
  T.is(#lines, 4, "history: only this job's records")
  out = run("job", "history", "nightly", "-n", "1")
  T.is(select(2, out:gsub("\n", "")), 2, "history -n 1: header and one record")
  out = run("job", "history", "nightly", "--json")
  local list = baton.json.decode(out)
  T.is(type(list) == "table" and #list, 3, "history --json: an array of the records")
  T.is(list and list[2].error, "pg_dump exited 1", "history --json: with their fields")
  T.is(list and list[1].key, i3, "history --json: and the instant of the run key")
  out, err, code = run("job", "history", "nobody")
  T.is(code .. "|" .. out, "1|", "history of a job that is not there and has no records: exit 1")
  T.is(err, "baton: job history nobody: ENOENT: no job nobody at " .. P .. "jobs/nobody\n", "naming it")
  out, err, code = run("job", "history", "nightly2")
  T.is(code, 0, "history of a removed job whose records are kept: exit 0")
  T.like(out, "\n" .. lit(os.date("!%Y-%m-%dT%H:%M:%SZ", day + 3 * 86400)) .. "  n1 ", "with its records")
  _, err, code = run("job", "history", "nightly", "-n", "x")
  T.is(code, 2, "history -n x: usage error")
end

-- 5. pause, resume, ls, show, statuses, broken jobs
do
  local out, err, code = run("job", "pause", "nightly")
  T.is(code .. out, "0paused job nightly\n", "pause")
  T.is(count("paused/nightly"), 1, "pause: the paused key exists")
  out = run("job", "pause", "nightly")
  T.is(out, "job nightly was already paused\n", "pause twice")
  _, err, code = run("job", "pause", "ghost")
  T.is(code, 1, "pause: no such job exits 1")
  T.is(err, "baton: job pause ghost: ENOENT: no job ghost at " .. P .. "jobs/ghost\n", "pause: says so")
  T.is(count("paused/ghost"), 0, "pause: nothing written for a missing job")

  assert(e:put(P .. "status/nightly/n1", baton.json.encode { revision = 1, time = baton.now() }))
  -- a raw put of a job that validates here but that a node reports as broken
  assert(e:put(P .. "jobs/flaky", 'return { schedule = "@hourly", run = function() end }'))
  -- a raw put of an invalid job (etcdctl put bypasses validation)
  assert(e:put(P .. "jobs/rawbad", 'return { schedule = "every day", run = function() end }'))
  out = run("job", "ls")
  T.like(out, "\nflaky +@hourly +UTC +%S+ +active +%-\n", "ls: a raw put shows as active until a node reports")
  assert(e:put(P .. "status/flaky/n2", baton.json.encode { revision = 5, error = "EINVAL: job flaky: boom" }))
  out, err, code = run("job", "ls")
  T.is(code, 0, "ls: exit 0")
  local lines = {}
  for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
  T.like(lines[1], "^NAME +SCHEDULE +TIMEZONE +NEXT +STATE +LAST RUN$", "ls: header")
  T.like(out, "\nflaky +@hourly +UTC +%S+ +broken +%-\n", "ls: broken once a node's status holds an error")
  T.like(out, "\nnightly +0 2 %* %* %* +Asia/Shanghai +%- +paused +running " ..
    lit(os.date("!%Y-%m-%dT%H:%M:%SZ", day + 2 * 86400)) .. "\n", "ls: paused (no next instant), last run state")
  T.like(out, "\nrawbad +%- +%- +%- +broken +%-\n", "ls: an invalid raw put is broken")
  T.like(out, "\nother +0 2 %* %* %* +Asia/Shanghai +%d%d%d%d%-%d%d%-%d%dT02:00:00%+08:00 +active +%-\n",
    "ls: the next instant")
  T.is(#lines, 5, "ls: one line per job")
  local list = baton.json.decode((run("job", "ls", "--json")))
  T.is(type(list) == "table" and #list, 4, "ls --json: an array")
  local by = {}
  for _, j in ipairs(list or {}) do by[j.name] = j end
  T.is(by.nightly and by.nightly.paused, true, "ls --json: paused")
  T.is(by.flaky and by.flaky.broken, true, "ls --json: broken")
  T.is(by.flaky and by.flaky.error, "n2: EINVAL: job flaky: boom", "ls --json: the node's error")
  T.like(by.rawbad and by.rawbad.error or "", "^EINVAL: job rawbad: field 'schedule': invalid cron expression",
    "ls --json: the validation error of a raw put")
  T.is(by.nightly and by.nightly.last and by.nightly.last.state, "running", "ls --json: last run state")

  out, err, code = run("job", "show", "nightly")
  T.is(code, 0, "show: exit 0")
  T.like(out, "^job: +nightly\nkey: +" .. lit(P) .. "jobs/nightly %(revision %d+, version 1%)\n", "show: name and key")
  T.like(out, "\nschedule: +0 2 %* %* %* %(Asia/Shanghai%)\nnext: +%- %(paused%)\n", "show: schedule, paused")
  T.like(out, "\ntimeout: +60s\nconcurrency: +forbid\nmisfire: +run_once %(no starting deadline%)\n",
    "show: timeout, concurrency, misfire")
  T.like(out, "\nretry: +2 more attempts, backoff 10s up to 300s, jitter 0%.2\n", "show: retry")
  T.like(out, "\nlabels: +region=eu\npaused: +yes\n", "show: labels, paused")
  T.like(out, "\nnodes:\n +NODE +REVISION +STATUS\n +n1 +1 %(stale%) +ok\n", "show: per-node status")
  T.like(out, "\nlast runs:\n +FIRE +NODE +ATTEMPT +STATE +DURATION +ERROR\n +%S+ +n3 ", "show: last runs, newest first")
  T.like(out, "pg_dump exited 1\n", "show: with their errors")
  out = run("job", "show", "flaky")
  T.like(out, "\nerror: +n2: EINVAL: job flaky: boom\n", "show: a broken job's error")
  T.like(out, "\n +n2 +5 %(stale%)? *EINVAL: job flaky: boom\n", "show: and the node reporting it")
  local j = baton.json.decode((run("job", "show", "nightly", "--json")))
  T.is(j and j.spec and j.spec.timezone, "Asia/Shanghai", "show --json: the spec")
  T.is(j and #j.runs, 3, "show --json: the runs")
  T.is(j and j.status[1].node, "n1", "show --json: the statuses")
  T.is(j and #j.next, 0, "show --json: no next instants while paused")
  _, err, code = run("job", "show", "ghost")
  T.is(code, 1, "show: no such job exits 1")
  T.is(err, "baton: job show ghost: ENOENT: no job ghost at " .. P .. "jobs/ghost\n", "show: says so")

  out, _, code = run("job", "resume", "nightly")
  T.is(code .. out, "0resumed job nightly\n", "resume")
  T.is(count("paused/nightly"), 0, "resume: the paused key is gone")
  out = run("job", "resume", "nightly")
  T.is(out, "job nightly was not paused\n", "resume twice")
  T.like((run("job", "show", "nightly")), "\nnext: +%d%d%d%d%-%d%d%-%d%dT02:00:00%+08:00\n", "show: next instant once resumed")
end

-- 6. job run (a trigger request for the node), with a live node that has
-- the job's labels (region=eu)
do
  local lease = assert(e:grant(30))
  assert(e:put(P .. "nodes/n-eu", baton.json.encode { name = "n-eu", labels = { region = "eu" } },
               { lease = lease }))
  local out, _, code = run("job", "run", "nightly")
  T.is(code, 0, "run: exit 0")
  local key = out:match("%((" .. lit(P) .. "trigger/nightly/%d+%-%x+)%)")
  T.ok(key, "run: prints the trigger key")
  local kv = key and assert(e:get(key)).kvs[1]
  local v = kv and baton.json.decode(kv.value)
  T.is(v and v.force, false, "run: force = false")
  T.ok(v and math.abs(v.at - baton.now()) < 60, "run: at = now")
  out = run("job", "run", "nightly", "--force")
  key = out:match("%((" .. lit(P) .. "trigger/nightly/%d+%-%x+)%)")
  v = key and baton.json.decode(assert(e:get(key)).kvs[1].value)
  T.is(v and v.force, true, "run --force: force = true")
  local _, err, code2 = run("job", "run", "ghost")
  T.is(code2, 1, "run: no such job exits 1")
  T.like(err, "ENOENT: no job ghost", "run: says so")
  assert(lease:revoke())
  _, err, code2 = run("job", "run", "nightly")
  T.is(code2, 1, "run: no live node exits 1")
  T.like(err, "^baton: job run nightly: no node is live under ", "run: says so")
end

-- 7. job rm
do
  assert(e:put(P .. "paused/nightly", "{}"))
  local out, err, code = run("job", "rm", "nightly")
  T.is(code, 0, "rm: exit 0")
  T.is(out, "removed job nightly (run history kept; --purge removes it)\n", "rm: says what it kept")
  T.is(count("jobs/nightly"), 0, "rm: the job is gone")
  T.is(count("paused/nightly"), 0, "rm: its paused flag too")
  T.is(count("status/nightly/"), 0, "rm: and its statuses")
  T.is(count("runs/nightly/"), 3, "rm: the history is kept")
  _, err, code = run("job", "rm", "nightly")
  T.is(code, 1, "rm again: exit 1")
  T.is(err, "baton: job rm nightly: ENOENT: no job nightly at " .. P .. "jobs/nightly\n", "rm again: says so")
  assert(e:put(P .. "jobs/nightly", "return {}"))
  out, _, code = run("job", "rm", "nightly", "--purge")
  T.is(code .. out, "0removed job nightly and its 3 run records\n", "rm --purge")
  T.is(count("runs/nightly/"), 0, "rm --purge: the history is gone")
  T.is(count("runs/nightly2/"), 1, "rm --purge: another job's history is not")
end

-- 8. usage errors
do
  local _, err, code = run("job")
  T.is(code, 2, "job without a subcommand: exit 2")
  T.like(err, "^baton: job: needs a subcommand\nusage: ", "with the usage")
  _, err, code = run("job", "frobnicate")
  T.is(code, 2, "unknown subcommand: exit 2")
  _, err, code = run("job", "ls", "--bogus")
  T.is(code, 2, "unknown flag: exit 2")
  T.is(err, "baton: job ls: unknown flag --bogus\nusage: baton job ls [--json]\n", "names the flag")
  _, err, code = run("job", "show")
  T.is(code .. err, "2baton: job show: needs a NAME\nusage: baton job show NAME [--json]\n", "show without NAME")
  _, _, code = run("job", "show", "a", "b")
  T.is(code, 2, "show with two names: exit 2")
end

-- 9. queue push
do
  local out1, err, code = run("queue", "push", "orders", '{"id":1}')
  T.is(code, 0, "queue push: exit 0")
  T.is(err, "", "queue push: nothing on stderr")
  local k1 = out1:match("^(%S+)\n$")
  T.like(k1 or "", "^" .. lit(P) .. "queue/orders/%d%d%d%d%d%d%d%d%d%d%d%d%d%-%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x$",
    "queue push: prints the task key <prefix>queue/<queue>/<ms>-<hex>")
  T.is(k1 and assert(e:get(k1)).kvs[1].value, '{"id":1}', "queue push: the value is stored as given")
  local keys = { k1 }
  for i = 2, 5 do keys[i] = (run("queue", "push", "orders", tostring(i))):match("^(%S+)\n$") end
  local r = assert(e:get(P .. "queue/orders/", { prefix = true, sort = "key", order = "asc" }))
  local ok = r.count == 5
  for i, kv in ipairs(r.kvs) do ok = ok and kv.key == keys[i] end
  T.ok(ok, "queue push: task ids sort in push order")
  _, err, code = run("queue", "push", "bad queue", "x")
  T.is(code, 2, "queue push: an invalid queue name is a usage error")
  T.like(err, '^baton: queue: invalid queue name "bad queue"', "queue push: says so")
  _, _, code = run("queue", "push", "orders")
  T.is(code, 2, "queue push without VALUE: exit 2")
  _, _, code = run("queue", "pop", "orders")
  T.is(code, 2, "queue: unknown subcommand, exit 2")
end

-- 10. nodes and leader
do
  local out, err, code = run("nodes")
  T.is(code .. "|" .. out, "0|", "nodes: none, nothing on stdout, exit 0")
  T.is(err, "baton: nodes: no live nodes under " .. P .. "nodes/ (is --prefix right?)\n", "nodes: says so on stderr")
  out, err, code = run("leader")
  T.is(code, 1, "leader: none, exit 1")
  T.is(err, "baton: leader: no leader (nothing under " .. P .. "election/)\n", "leader: says so")

  local lease = assert(e:grant(30))
  assert(e:put(P .. "nodes/n-b", baton.json.encode { name = "n-b", labels = { region = "eu", role = "db" },
    version = "0.1.0", running = 2, started = 1795989600 }, { lease = lease }))
  assert(e:put(P .. "nodes/n-a", baton.json.encode { name = "n-a", labels = {}, version = "0.1.0",
    running = 0, started = 1795989601 }, { lease = lease }))
  out, err, code = run("nodes")
  T.is(code, 0, "nodes: exit 0")
  T.is(out, "NAME  VERSION  RUNNING  STARTED               LABELS             TRUST  OFFSET\n"
    .. "n-a   0.1.0    0        2026-11-29T22:00:01Z  -                  -      -\n"
    .. "n-b   0.1.0    2        2026-11-29T22:00:00Z  region=eu,role=db  -      -\n", "nodes: aligned columns")
  local list = baton.json.decode((run("nodes", "--json")))
  T.is(list and #list, 2, "nodes --json: an array")
  T.is(list and list[2].labels.role, "db", "nodes --json: with labels")
  T.is(list and list[1].lease, lease.id, "nodes --json: and the lease")

  -- OFFSET: the clock against the cluster's, marked beyond --max-skew.
  local clocks = {
    ["n-c"] = { known = true, correction = 2.0031, error = 0.0024, offset = 2.0033, ref = "n-a", skewed = true },
    ["n-d"] = { known = true, correction = -0.0004, error = 0.0019, offset = 0.001, ref = "n-a", skewed = false },
    ["n-e"] = { known = false },
  }
  for name, k in pairs(clocks) do
    assert(e:put(P .. "nodes/" .. name, baton.json.encode { name = name, version = "0.1.0", running = 0,
      started = 1795989602, clock = k, max_skew = 0.5 }, { lease = lease }))
  end
  out = run("nodes")
  T.like(out, "\nn%-c [^\n]*  %+2%.003s±0%.002!\n", "nodes: a skewed clock, marked")
  T.like(out, "\nn%-d [^\n]*  %+0%.000s±0%.002\n", "nodes: a clock within --max-skew (never -0.000)")
  T.like(out, "\nn%-e [^\n]*  %?\n", "nodes: a clock not known yet")
  list = baton.json.decode((run("nodes", "--json")))
  T.is(list and list[3].clock.correction, 2.0031, "nodes --json: the clock fields")
  T.is(list and list[3].max_skew, 0.5, "nodes --json: and max_skew")
  for name in pairs(clocks) do assert(e:delete(P .. "nodes/" .. name)) end

  local hex1, hex2 = "694d0000000000a1", "694d0000000000a0"
  assert(e:put(P .. "election/" .. hex1, "n-b", { lease = lease }))
  assert(e:put(P .. "election/" .. hex2, "n-a", { lease = lease }))
  out, err, code = run("leader")
  T.is(code .. "|" .. out, "0|n-b\n", "leader: the oldest campaigner (smallest create revision), not the smallest key")
  local j = baton.json.decode((run("leader", "--json")))
  T.is(j and j.key, P .. "election/" .. hex1, "leader --json: key")
  assert(lease:revoke())
  out, _, code = run("nodes")
  T.is(code .. out, "0", "nodes: gone with their lease")
end

-- 11. Another prefix does not see these jobs; the prefix gets its "/".
do
  local out = run("job", "ls")
  T.like(out, "\nother ", "sanity: ls sees the jobs under the prefix")
  local r = assert(baton.exec { bin, "--prefix", P:sub(1, -2), "job", "ls" })
  T.is(r.stdout, out, "a prefix without its trailing / gets one")
  r = assert(baton.exec { bin, "--prefix", P .. "x/", "job", "ls" })
  T.is(r.code .. r.stdout, "0", "another prefix: no jobs")
end

assert(e:delete(P, { prefix = true }))
baton.exec { "rm", "-rf", tmp }
T.done()
