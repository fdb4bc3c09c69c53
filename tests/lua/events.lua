-- baton.events without etcd: which event jobs a run's end triggers ("*"
-- excludes the event job itself and every other event job), the event id
-- (unique per run and outcome, never an instant's, "/" escaped), the
-- pending entries added to a final record's transaction, the chain bound,
-- and the cycle finder of baton check / baton job put.
local T = require "tap"
local job = require "baton.job"
local events = require "baton.events"
local json = baton.json

local function L(name, fields)
  return assert(job.load("return {" .. fields .. ", run = function(ctx) end }", name))
end
-- A node's job store, indexed as the node does it.
local function store(specs)
  local node = { jobs = {} }
  for n, s in pairs(specs) do
    node.jobs[n] = { spec = s }
    events.note(node, n, s)
  end
  return node
end

-- 1. targets
do
  local jobs = store {
    plain = L("plain", 'schedule = "@daily"'),
    other = L("other", 'schedule = "@daily"'),
    star = L("star", 'on = { failed = { "*" }, skipped = { "*" } }'),
    chain = L("chain", 'on = { succeeded = { "plain" }, failed = { "star" } }'),
    both = L("both", 'schedule = "@daily", on = { killed = { "*", "plain" } }'),
  }
  T.is_deeply(events.targets(jobs, "plain"),
              { failed = { "star" }, skipped = { "star" }, succeeded = { "chain" }, killed = { "both" } },
              "a plain job's outcomes trigger every event job that names it or has \"*\"")
  T.is_deeply(events.targets(jobs, "star"), { failed = { "chain" } },
              "\"*\" does not match the event job itself; a name does match an event job")
  T.is(events.targets(jobs, "chain"), nil, "\"*\" does not match other event jobs")
  T.is(events.targets(jobs, "both"), nil, "a job with schedule and on is an event job too")
  T.is_deeply(events.targets(jobs, "gone"), { failed = { "star" }, skipped = { "star" }, killed = { "both" } },
              "a job no longer in the store is matched by \"*\"")
  T.is_deeply(events.targets({ jobs = jobs.jobs }, "plain"), events.targets(jobs, "plain"),
              "the index gives what a look at every job gives")
  T.is_deeply(jobs.event_jobs, { star = true, chain = true, both = true }, "the index holds the event jobs")
  jobs.jobs.star = { spec = L("star", 'schedule = "@daily"') }
  events.note(jobs, "star", jobs.jobs.star.spec)
  jobs.jobs.chain = nil
  events.note(jobs, "chain", nil)
  T.is_deeply(events.targets(jobs, "plain"), { killed = { "both" } },
              "a job that loses on, or is removed, leaves the index")
end

-- 2. ids
do
  local at = 1796000000.1234
  local id = events.id(at, "extract", "2026-11-29T02:00:00Z/3", "failed")
  T.is(id, "2026-11-30T00:53:20.123Z~extract~2026-11-29T02:00:00Z%2F3~failed",
       "time~job~escaped id~state")
  T.ok(not id:find("/", 1, true), "no / in an event id (it would read as a shard)")
  T.isnt(events.id(at, "a", "x/y", "failed"), events.id(at, "a", "x%2Fy", "failed"), "the escape is one-to-one")
  T.isnt(events.id(at, "a", "1", "failed"), events.id(at, "a", "1", "killed"), "the state is part of the id")
  T.like(events.id(at, "a", "b~c", "failed"), "~b%%7Ec~", "~ in an id is escaped too")
  T.ok(id:find("~", 1, true) and not ("2026-11-29T02:00:00Z"):find("~", 1, true),
       "an instant, a manual run or a queue task id has no ~: no collision")
end

-- 3. the pending entries of a final record
do
  local run = { job = "plain", id = "2026-11-29T02:00:00Z", events = { failed = { "a", "b" } } }
  local rec = { state = "failed", error = "boom", fire = 1796000000, node = "n1", attempt = 3,
                finished = 1796000004.5 }
  local ops, n = events.add("/p/", run, rec, { { put = { key = "/p/runs/plain/x" } } })
  T.is(n, 2, "one entry per event job of the state")
  T.is(#ops, 3, "appended to the transaction's operations")
  local eid = events.id(rec.finished, "plain", run.id, "failed")
  T.is(ops[2].put.key, "/p/pending/a/" .. eid, "at pending/<event job>/<event id>")
  T.is(ops[3].put.key, "/p/pending/b/" .. eid, "for each")
  T.is(ops[2].put.lease, nil, "with no lease: it outlives the node that wrote it")
  local v = json.decode(ops[2].put.value)
  T.is(v.reason, "event", "reason event")
  T.is(v.attempt, 1, "the first attempt of the event run")
  T.is(v.fire, rec.finished, "fire: when the triggering run ended")
  T.is_deeply(v.event, { job = "plain", id = run.id, fire = 1796000000, state = "failed", error = "boom",
                         node = "n1", attempt = 3, depth = 1,
                         origin = { job = "plain", id = run.id, fire = 1796000000 } }, "the event")
  local chained = { state = "failed", finished = 2, fire = 5, event = v.event }
  local w = json.decode(events.add("/p/", { job = "a", id = "x", events = { failed = { "c" } } }, chained, {})[1].put.value)
  T.is(w.event.depth, 2, "an event of an event run: depth 2")
  T.is_deeply(w.event.origin, v.event.origin, "the origin stays the chain's first run")
  local _, none = events.add("/p/", run, { state = "succeeded", finished = 1 }, {})
  T.is(none, 0, "a state nobody listens to adds nothing")
  local _, retr = events.add("/p/", run, { state = "retrying", finished = 1 }, {})
  T.is(retr, 0, "a retried attempt adds nothing")
  _, none = events.add("/p/", { job = "plain", id = "x" }, rec, {})
  T.is(none, 0, "no targets given, none added")
  local long = events.add("/p/", run, { state = "failed", error = ("x"):rep(10000), finished = 1 }, {})
  T.ok(#json.decode(long[1].put.value).event.error <= events.ERROR_CAP + 3, "a long error is cut to its tail")
  local deep = { state = "failed", finished = 1, event = { depth = events.MAX_DEPTH } }
  local _, cut = events.add("/p/", run, deep, {})
  T.is(cut, 0, "a chain longer than MAX_DEPTH is cut (a cycle stored by a raw put)")
  local _, ok = events.add("/p/", run, { state = "failed", finished = 1, event = { depth = 3 } }, {})
  T.is(ok, 2, "a shorter chain goes on")
end

-- 4. cycles
do
  local specs = {
    extract = L("extract", 'schedule = "@daily", on = { succeeded = { "load" } }'),
    transform = L("transform", 'on = { succeeded = { "extract" } }'),
    load = L("load", 'on = { succeeded = { "transform" }, failed = { "*" } }'),
    notify = L("notify", 'on = { failed = { "*", "load" } }'),
  }
  T.is(events.find_cycle(specs, "transform"), "transform -> load -> extract -> transform",
       "a cycle of successes, named from the job being put")
  T.is(events.find_cycle(specs, "notify"), nil, "a job outside the cycle has none")
  specs.extract = L("extract", 'schedule = "@daily", on = { failed = { "load" } }')
  T.is(events.find_cycle(specs, "load"), "load -[failed]-> extract -> transform -> load",
       "a trigger other than success is labelled")
  specs.extract = L("extract", 'schedule = "@daily"')
  T.is(events.find_cycle(specs, "load"), nil, "no cycle once it is broken")
  T.is(events.find_cycle({ a = L("a", 'on = { failed = { "*" } }'), b = L("b", 'on = { failed = { "*" } }') }, "a"),
       nil, "\"*\" never makes a cycle")
  T.is(events.describe(specs.load.on), "succeeded: transform; failed: *", "describe")
  T.is(events.describe(specs.load.on, true), "succeeded(transform),failed(*)", "describe, short")
end

-- 5. the output hook: the triggering attempt's kept lines, else the error
do
  local json = baton.json
  local ev = { job = "a", id = "1", attempt = 2, error = "boom" }
  T.is(events.tail_of(ev, {}), "boom", "no kept output: the error")
  T.is(events.tail_of({ job = "a", id = "1", attempt = 1 }, {}), "", "nor an error: empty")
  local function chunk(k, lines) return { key = "/p/output/a/1/@2/" .. k, value = json.encode { lines = lines } } end
  local kvs = { chunk("00000002", { { n = 3, t = 1, stream = "stdout", text = "third" } }),
                chunk("00000001", { { n = 1, t = 1, stream = "stdout", text = "first" } }) }
  T.is(events.tail_of(ev, kvs),
       "first\n... 1 line dropped (the output of an attempt is capped at 64 KiB) ...\nthird\n",
       "kept output: its lines in order, with the cap's marker")
  local big = { chunk("00000001", { { n = 1, t = 1, stream = "stdout", text = ("y"):rep(10000) .. "end" } }) }
  T.is(#events.tail_of(ev, big), events.TAIL_CAP + 3, "its tail only")
end

T.done()
