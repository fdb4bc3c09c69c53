-- baton.job: compiling and validating job files (docs/jobs.md).
-- Every validation rule has a test with its exact message: the message is
-- part of the contract.
local T = require "tap"
local job = require "baton.job"

local RUN = "run = function(ctx) end"

-- Loads a job whose table has these fields (Lua source text) plus run.
local function with(fields, name)
  return job.load("return {" .. fields .. ", " .. RUN .. "}", name or "j")
end

-- Asserts that source fails with exactly "EINVAL: job j: " .. msg.
local function rejects(source, msg, what)
  local spec, err, code = job.load(source, "j")
  T.is(spec, nil, what .. ": refused")
  T.is(err, "EINVAL: job j: " .. msg, what .. ": message")
  T.is(code, "EINVAL", what .. ": code")
end
local function rejects_field(fields, msg, what)
  rejects("return {" .. fields .. ", " .. RUN .. "}", msg, what)
end

-- 1. A valid job and its defaults.
do
  local spec, err = with('schedule = "0 2 * * *"')
  T.ok(spec, "a minimal job loads") ; if not spec then T.diag(err) end
  T.is(spec.name, "j", "name")
  T.is(spec.schedule, "0 2 * * *", "schedule kept")
  T.is(spec.timezone, "UTC", "default timezone UTC")
  T.is(spec.timeout, 3600, "default timeout 3600 s")
  T.is(spec.concurrency, "forbid", "default concurrency forbid")
  T.is(spec.misfire, "run_once", "default misfire run_once")
  T.is(spec.starting_deadline, nil, "no default starting deadline")
  T.is_deeply(spec.retry, { attempts = 0, backoff = 10, max_backoff = 300, jitter = 0.2 }, "default retry: none")
  T.is(spec.shards, 1, "default shards 1")
  T.is(spec.policy, "default", "default policy")
  T.is(spec.on_node_loss, "rerun", "default on_node_loss rerun")
  T.is_deeply(spec.labels, {}, "default labels: none")
  T.is(type(spec.run), "function", "run kept")
  T.is(spec.manual, false, "not manual")
  T.is(spec.revision, nil, "no revision given")
  local s2 = job.load("return {schedule='@daily', " .. RUN .. "}", "j", 42)
  T.is(s2.revision, 42, "the revision is kept")

  local full = assert(with([[
    schedule = "0 2 * * *", timezone = "Asia/Shanghai", timeout = 1800,
    concurrency = "replace", misfire = "run_all", starting_deadline = 300,
    retry = { attempts = 3, backoff = 10, max_backoff = 300, jitter = 0.2 },
    shards = 4, shard_params = { "Beijing", "Shanghai", "Guangzhou", "Shenzhen" },
    policy = "spread", on_node_loss = "abandon", labels = { region = "eu" },
    description = "the design's example"]]))
  T.is(full.timezone, "Asia/Shanghai", "timezone kept")
  T.is(full.concurrency .. " " .. full.misfire .. " " .. full.on_node_loss, "replace run_all abandon", "enums kept")
  T.is(full.retry.attempts, 3, "retry kept")
  T.is(full.shards, 4, "shards kept")
  T.is(full.shard_params[4], "Shenzhen", "shard_params kept")
  T.is(full.labels.region, "eu", "labels kept")
  T.is(full.description, "the design's example", "description kept")
  local d = job.summary(full)
  T.is(d.run, nil, "summary has no function")
  T.ok(baton.json.encode(d):find('"timezone":"Asia/Shanghai"', 1, true), "summary encodes as JSON")

  -- only backoff given: max_backoff follows it up
  local b = assert(with('schedule = "@daily", retry = { attempts = 1, backoff = 600 }'))
  T.is(b.retry.max_backoff, 600, "max_backoff defaults up to a larger backoff")
  -- shard_params alone sets shards
  local sp = assert(with('schedule = "@daily", shard_params = { "a", "b", "c" }'))
  T.is(sp.shards, 3, "shards defaults to #shard_params")
end

-- 2. next_fires.
do
  local spec = assert(with('schedule = "0 2 * * *", timezone = "Asia/Shanghai"'))
  local t = job.next_fires(spec, 3, 1796000000) -- 2026-11-30T00:53:20Z
  T.is_deeply(t, { 1796061600, 1796148000, 1796234400 }, "next_fires: 02:00 Shanghai is 18:00Z the day before")
  T.is(os.date("!%Y-%m-%dT%H:%M:%SZ", t[1]), "2026-11-30T18:00:00Z", "first fire")
  T.is(#job.next_fires(spec, 0, 1796000000), 0, "n = 0")
  T.is(#job.next_fires(assert(with('schedule = "@manual"')), 5), 0, "@manual never fires")
  local m = assert(with('schedule = " @MANUAL "'))
  T.is(m.manual, true, "@manual is recognised in any case")
  T.is(#job.next_fires(assert(with('queue = "orders"')), 5), 0, "a queue job has no fires")
  T.error_like(function() job.next_fires(spec, -1) end, "a whole number >= 0 expected", "next_fires: bad n raises")
end

-- 3. Each validation rule, with its message.
rejects_field('schedule = "0 25 * * *"',
  [[field 'schedule': invalid cron expression "0 25 * * *": field 2 (hour) at column 3: 25 is out of range 0-23]],
  "schedule out of range")
rejects_field('schedule = "* * * *"',
  [[field 'schedule': invalid cron expression "* * * *": expected 5 fields (minute hour day-of-month month day-of-week), 6 with seconds first, or a descriptor such as @daily; got 4]],
  "schedule with 4 fields")
rejects_field('schedule = 5', "field 'schedule': expected a string, got number", "schedule type")
rejects_field('schedule = "@daily", timezone = "Mars/Olympus"',
  [[field 'timezone': unknown time zone "Mars/Olympus"]], "unknown zone")
rejects_field('schedule = "0 25 * * *", timezone = "Mars/Olympus"',
  [[field 'timezone': unknown time zone "Mars/Olympus"]], "the zone is checked before the schedule")
rejects_field('schedule = "@daily", timezone = 8', "field 'timezone': expected a string, got number", "timezone type")
rejects_field('schedule = "@daily", timout = 10', "unknown field 'timout' (did you mean 'timeout'?)", "misspelt timeout")
rejects_field('schedule = "@daily", shedule = "@daily"', "unknown field 'shedule' (did you mean 'schedule'?)",
  "misspelt schedule")
rejects_field('schedule = "@daily", tz = "UTC"', "unknown field 'tz' (did you mean 'timezone'?)", "alias tz")
rejects_field('schedule = "@daily", retries = 3', "unknown field 'retries' (did you mean 'retry'?)", "alias retries")
rejects_field('schedule = "@daily", color = "red"', "unknown field 'color'", "unknown field, nothing near")
rejects_field('schedule = "@daily", [1] = true',
  "the table: unexpected number key 1 (fields are names such as 'schedule')", "a list entry")
rejects_field('schedule = "@daily", timeout = 0', "field 'timeout': must be a number of seconds > 0, got 0",
  "timeout 0")
rejects_field('schedule = "@daily", timeout = -5', "field 'timeout': must be a number of seconds > 0, got -5",
  "negative timeout")
rejects_field('schedule = "@daily", timeout = "1h"', "field 'timeout': expected a number, got string",
  "timeout type")
rejects_field('schedule = "@daily", timeout = 1/0', "field 'timeout': must be a number of seconds > 0, got inf",
  "infinite timeout")
rejects_field('schedule = "@daily", starting_deadline = 0',
  "field 'starting_deadline': must be a number of seconds > 0, got 0", "starting_deadline 0")
rejects_field('schedule = "@daily", concurrency = "parallel"',
  [[field 'concurrency': must be "allow", "forbid" or "replace", got "parallel"]], "concurrency value")
rejects_field('schedule = "@daily", concurrency = true',
  "field 'concurrency': expected a string, got boolean", "concurrency type")
rejects_field('schedule = "@daily", misfire = "catch_up"',
  [[field 'misfire': must be "skip", "run_once" or "run_all", got "catch_up"]], "misfire value")
rejects_field('schedule = "@daily", on_node_loss = "retry"',
  [[field 'on_node_loss': must be "rerun" or "abandon", got "retry"]], "on_node_loss value")
rejects_field('schedule = "@daily", retry = 3', "field 'retry': expected a table, got number", "retry type")
rejects_field('schedule = "@daily", retry = { attemps = 3 }',
  "unknown field 'retry.attemps' (did you mean 'retry.attempts'?)", "misspelt retry field")
rejects_field('schedule = "@daily", retry = { attempts = 1.5 }',
  "field 'retry.attempts': must be a whole number >= 0, got 1.5", "fractional attempts")
rejects_field('schedule = "@daily", retry = { attempts = -1 }',
  "field 'retry.attempts': must be a whole number >= 0, got -1", "negative attempts")
rejects_field('schedule = "@daily", retry = { backoff = -1 }',
  "field 'retry.backoff': must be a number of seconds >= 0, got -1", "negative backoff")
rejects_field('schedule = "@daily", retry = { backoff = 60, max_backoff = 30 }',
  "field 'retry.max_backoff': must be >= retry.backoff (60), got 30", "max_backoff below backoff")
rejects_field('schedule = "@daily", retry = { jitter = 1.5 }',
  "field 'retry.jitter': must be a fraction from 0 to 1, got 1.5", "jitter above 1")
rejects_field('schedule = "@daily", retry = { jitter = -0.1 }',
  "field 'retry.jitter': must be a fraction from 0 to 1, got -0.1", "negative jitter")
rejects_field('schedule = "@daily", shards = 0', "field 'shards': must be a whole number >= 1, got 0", "shards 0")
rejects_field('schedule = "@daily", shards = 2.5', "field 'shards': must be a whole number >= 1, got 2.5",
  "fractional shards")
rejects_field('schedule = "@daily", shards = 3, shard_params = { "a", "b" }',
  "field 'shard_params': has 2 entries for 3 shards", "shard_params length")
rejects_field('schedule = "@daily", shard_params = { a = 1 }',
  "field 'shard_params': must be a list {p1, p2, ...} with one entry per shard", "shard_params not a list")
rejects_field('schedule = "@daily", shard_params = {}', "field 'shard_params': must not be empty",
  "empty shard_params")
rejects_field('schedule = "@daily", shard_params = { print }',
  "field 'shard_params': entry 1 is a function (strings, numbers, booleans and tables only)",
  "a function as a shard param")
rejects_field('schedule = "@daily", policy = 1', "field 'policy': expected a string, got number", "policy type")
rejects_field('schedule = "@daily", policy = "../x"',
  [[field 'policy': "../x" is not a policy name (letters, digits, '_', '.', '-')]], "policy name")
rejects_field('schedule = "@daily", labels = "eu"', "field 'labels': expected a table, got string", "labels type")
rejects_field('schedule = "@daily", labels = { region = 1 }',
  [[field 'labels': the value of "region" must be a string, got number]], "label value type")
rejects_field('schedule = "@daily", labels = { "eu" }',
  [[field 'labels': key 1 is a number; labels map names to values, {region = "eu"}]], "label key type")
rejects_field('schedule = "@daily", description = 1', "field 'description': expected a string, got number",
  "description type")
rejects('return { schedule = "@daily" }',
  "field 'run' is missing: a job needs run = function(ctx) ... end, or command = {\"program\", \"arg\", ...} "
  .. "to run a program", "missing run")
rejects('return { schedule = "@daily", run = "echo hi" }', "field 'run': expected a function, got string "
  .. "(a program to run goes in command = {\"program\", \"arg\", ...} or command = \"shell text\")",
  "run not a function")
rejects('return { ' .. RUN .. ' }',
  "needs a 'schedule' (cron, @daily, @every 30s, @manual), a 'queue' (a queue name) "
    .. "or 'on' (the outcomes of other jobs' runs that start it)", "neither schedule nor queue nor on")
rejects_field('schedule = "@daily", queue = "q"',
  "fields 'schedule' and 'queue' exclude each other: a job runs on a schedule or per queue task",
  "both schedule and queue")
rejects_field('queue = "my queue"',
  [[field 'queue': "my queue" is not a queue name (letters, digits, '_', '.', '-'; starting with a letter or digit)]],
  "queue name")
rejects_field('queue = 7', "field 'queue': expected a string, got number", "queue type")
rejects_field('queue = "q", timezone = "UTC"',
  "field 'timezone': a queue job has no schedule to read on a clock; remove it", "queue with a timezone")
do
  local q = assert(with('queue = "orders.eu-1"'))
  T.is(q.queue, "orders.eu-1", "a queue job loads")
end

-- on: event-triggered jobs (baton.events).
do
  local ev = assert(with('on = { failed = { "backup", "report", "backup" }, lost = { "x" }, abandoned = { "*" } }'))
  T.is_deeply(ev.on, { failed = { "backup", "report" }, abandoned = { "*", "x" } },
              "on: lists sorted, duplicates dropped, lost folded into abandoned")
  T.is(ev.schedule, nil, "an event job needs no schedule")
  T.is(ev.manual, true, "and has no instants of its own (only events and manual triggers)")
  T.is_deeply(job.next_fires(ev, 3), {}, "no next fires")
  T.is(ev.concurrency, "allow", "its runs may overlap by default: one per event")
  T.is(assert(with('on = { failed = { "a" } }, concurrency = "forbid"')).concurrency, "forbid",
       "unless it says otherwise")
  local both = assert(with('schedule = "@daily", on = { succeeded = { "a" } }'))
  T.is(both.concurrency, "forbid", "a scheduled job with on keeps the default concurrency")
  T.is(both.manual, false, "and its schedule")
  T.is_deeply(job.summary(ev).on, ev.on, "summary has on")
end
rejects_field('on = 5', "field 'on': expected a table, got number", "on type")
rejects_field('on = {}', [[field 'on': names no outcome; give {failed = {"job", ...}, ...}]], "on empty")
rejects_field('on = { "backup" }',
  [[field 'on': keys are outcomes, {failed = {"backup"}}; got the number key 1]], "on as a list")
rejects_field('on = { faild = { "a" } }', "unknown field 'on.faild' (did you mean 'on.failed'?)", "on state typo")
rejects_field('on = { done = { "a" } }',
  "unknown field 'on.done' (outcomes: succeeded, failed, skipped, abandoned, killed, lost)", "on unknown state")
rejects_field('on = { failed = "a" }',
  [[field 'on.failed': expected a list of job names ({"backup"} or {"*"}), got string]], "on list type")
rejects_field('on = { failed = {} }',
  [[field 'on.failed': expected a list of job names ({"backup"} or {"*"}), got an empty list]], "on empty list")
rejects_field('on = { failed = { x = "a" } }',
  [[field 'on.failed': expected a list of job names ({"backup"} or {"*"}), got a table that is not a list]],
  "on map instead of list")
rejects_field('on = { failed = { 1 } }', "field 'on.failed': entry 1 is a number, not a job name", "on entry type")
rejects_field('on = { failed = { "a b" } }',
  [[field 'on.failed': "a b" is not a job name (letters, digits, '_', '.', '-'; or "*" for every job)]],
  "on entry name")
rejects_field('on = { succeeded = { "j" } }',
  "field 'on.succeeded': names the job itself: each of its runs would start the next (cycle: j -> j)",
  "on naming itself")
rejects_field('on = { failed = { "a" } }, queue = "q"',
  "fields 'on' and 'queue' exclude each other: a queue job runs once per queue task", "on with queue")
rejects_field('on = { failed = { "a" } }, timezone = "UTC"',
  "field 'timezone': a job with 'on' and no 'schedule' has no schedule to read on a clock; remove it",
  "on without schedule, with a timezone")
rejects_field('on = { failed = { "a" } }, schedule = "@daily", shards = 2',
  "field 'shards': an event runs a job once, not per shard: remove 'shards' or 'on'", "on with shards")
rejects_field('triggers = { failed = { "a" } }', "unknown field 'triggers' (did you mean 'on'?)", "on alias")
rejects('return { claim_delay = function() end, on_orphan = function() end }',
  "this looks like a scheduling policy (claim_delay, on_orphan), not a job: store it with baton policy put",
  "a policy file is named as such")

-- 4. What the file itself does.
rejects('return 42', "the file must return a table ({schedule = ..., run = function(ctx) ... end}), got number",
  "not a table")
rejects('x = 1', "the file must return a table ({schedule = ..., run = function(ctx) ... end}), got nil",
  "returns nothing")
rejects('return {', "syntax error: jobs/j:1: unexpected symbol near '<eof>'", "syntax error")
rejects('error("boom")', "error while loading: jobs/j:1: boom", "error at load time")
do
  local _, err = job.load("return {", "j", nil, "/etc/jobs/j.lua")
  T.is(err, "EINVAL: job j: syntax error: /etc/jobs/j.lua:1: unexpected symbol near '<eof>'", "chunkname names the file")
  local bc = string.dump(function() return { schedule = "@daily", run = function() end } end)
  rejects(bc, "precompiled bytecode is refused: store the Lua source text", "bytecode")
  T.ok(select(2, job.load("\27Lua", "j")):find("bytecode", 1, true), "anything starting with ESC is bytecode")
  local s, e2 = job.load("return {}", "bad name")
  T.is(s, nil, "an invalid name is refused")
  T.is(e2, [[EINVAL: invalid job name "bad name" (letters, digits, '_', '.', '-'; starting with a letter or digit)]],
    "with a message")
  T.error_like(function() job.load(nil, "j") end, "bad argument #1 to 'load' %(string expected, got nil%)",
    "misuse raises: source")
  T.error_like(function() job.load("", 1) end, "bad argument #2 to 'load' %(string expected, got number%)",
    "misuse raises: name")
end

-- 5. A file that never ends or waits at load time fails, in bounded time.
do
  local budget = "the file ran for more than 10000000 Lua instructions while loading (an endless loop?); "
    .. "a job file should only build and return its table"
  local t0 = baton.monotime()
  rejects("while true do end", budget, "while true do end")
  T.ok(baton.monotime() - t0 < 5, "stopped in bounded time (" .. math.floor((baton.monotime() - t0) * 1000) .. " ms)")
  rejects("for i = 1, 1e12 do end", budget, "a long numeric loop (JIT-compilable)")
  rejects("local function f() while true do end end f()", budget, "a loop in a function of the file")
  rejects("while true do pcall(function() while true do end end) end", budget,
    "a pcall loop cannot swallow the bound")
  rejects("baton.sleep(1)",
    "the file called baton.sleep while loading; calls that wait (etcd, exec, http, sleep) belong inside run",
    "a waiting call at load time")
  -- the hook is gone afterwards and this script's loops still run
  local n = 0
  for i = 1, 2e7 do n = n + 1 end
  T.is(n, 2e7, "no bound left behind on the caller")
  T.is(debug.gethook(), nil, "no hook left behind")
  T.ok(baton.sleep(0.01), "waiting still works after a load")
end

-- 6. Each job has its own globals.
do
  local a = assert(job.load([[
    counter = 10
    function bump() counter = counter + 1; return counter end
    return { schedule = "@daily", run = function() return bump() end }]], "a"))
  local b = assert(job.load([[
    return { schedule = "@daily", run = function() return counter, bump end }]], "b"))
  T.is(a.run(), 11, "a job's functions see its globals")
  local c, f = b.run()
  T.is(c, nil, "another job does not see them")
  T.is(f, nil, "nor its global functions")
  T.is(rawget(_G, "counter"), nil, "the process's globals are untouched")
  T.is(rawget(_G, "bump"), nil, "no global function leaked")
  T.is(a.globals.counter, 11, "spec.globals is the job's global table")
  T.is(a.globals._G, a.globals, "_G in a job is its own table")
  rejects("string.upper = nil return {}",
    "error while loading: jobs/j:1: string is shared and read-only: cannot set string.upper", "libraries are read-only")
  T.is(type(string.upper), "function", "and stay intact")
  rejects("baton.etcd = nil return {}",
    "error while loading: jobs/j:1: baton is shared and read-only: cannot set baton.etcd", "baton is read-only")
  T.ok(baton.etcd, "and stays intact")
  local s = assert(job.load([[
    local fmt = string.format
    return { schedule = "@daily", timezone = os.getenv("NO_SUCH_VAR_XYZ") or "Europe/Paris",
             run = function() return fmt("%s %s", type(baton.json), type(require)) end }]], "c"))
  T.is(s.run(), "table function", "standard libraries, baton and require are visible")
  T.is(s.timezone, "Europe/Paris", "load-time code may read the environment")
  local g = assert(job.load("return { schedule = '@daily', run = function() return getfenv, setfenv, debug end }", "g"))
  local x, y, z = g.run()
  T.ok(x == nil and y == nil and z == nil, "getfenv, setfenv and debug are not visible to jobs")
end

-- 7. what a spec holds (issue 13: 100,000 jobs on one node): only what
-- differs from the defaults; the defaults read through; jobs without a
-- retry share one table, jobs with one schedule and zone one cron
do
  local a = assert(job.load("return { schedule = '0 0 1 1 *', timeout = 60, run = function() end }", "a", 7))
  local b = assert(job.load("return { schedule = '0 0 1 1 *', run = function() end }", "b", 8))
  local own = {}
  for k in pairs(a) do own[#own + 1] = k end
  table.sort(own)
  T.is(table.concat(own, " "), "cron globals name revision run schedule timeout",
       "a spec stores only the fields the job set (and its compiled parts)")
  T.is(a.timezone .. " " .. a.concurrency .. " " .. a.misfire .. " " .. a.shards .. " " .. a.policy
       .. " " .. a.on_node_loss .. " " .. tostring(a.manual),
       "UTC forbid run_once 1 default rerun false", "the defaults read through")
  T.is(a.retry.attempts .. " " .. a.retry.backoff .. " " .. a.retry.max_backoff .. " " .. a.retry.jitter,
       "0 10 300 0.2", "the default retry reads through")
  T.ok(a.retry == b.retry, "jobs without a retry share one retry table")
  T.ok(a.cron == b.cron, "jobs with the same schedule and zone share one cron")
  local c = assert(job.load("return { schedule = '0 0 1 1 *', timezone = 'Asia/Tokyo', retry = { attempts = 2 }, run = function() end }", "c"))
  T.ok(c.cron ~= a.cron and c.retry ~= a.retry and c.retry.attempts == 2 and c.retry.backoff == 10,
       "a job's own zone and retry are its own")
  local d = job.summary(b)
  T.is(d.timezone .. " " .. d.concurrency .. " " .. d.retry.attempts, "UTC forbid 0", "summary shows the defaults")
  T.ok(baton.json.encode(d):find('"concurrency":"forbid"', 1, true), "and encodes them")
  local ev = assert(job.load("return { on = { failed = { 'x' } }, run = function() end }", "ev"))
  T.is(ev.concurrency, "allow", "an event job's own default (allow) is stored")
end

-- 8. misc
T.ok(job.valid_name("db-backup.v2_x"), "valid_name accepts letters, digits, - . _")
T.ok(not job.valid_name(".hidden"), "valid_name refuses a leading dot")
T.ok(not job.valid_name("a/b"), "valid_name refuses a slash")
T.ok(not job.valid_name(""), "valid_name refuses the empty name")
T.is(job.did_you_mean("concurency", job.FIELDS), "concurrency", "did_you_mean")

T.done()
