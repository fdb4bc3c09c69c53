-- Event-triggered jobs on a real cluster (baton.events): a failing job with
-- retries triggers its notifier once per final failure and never for a
-- retried attempt; a notifier whose node is killed mid-way runs again once
-- on another node, still once per event; a three-job chain of successes
-- runs in order, once per instant; a cycle is refused by check and put
-- with its name; "*" matches neither the event job itself nor other event
-- jobs; the shipped webhook notifier posts Slack-compatible JSON to a local
-- listener and the mail notifier hands a message to a fake sendmail.
local T = require "tap"
local N = require "nodes"
local F = require "files"
local json = baton.json
local TTL = 3

local root = os.getenv("BATON_ROOT") or "."
local bin = os.getenv("BATON_BIN") or "bin/baton"
local c = N.new("nodeevents")
local P = c.P

-- The webhook listener and the fake sendmail, before the nodes: their
-- environment says where to post and what sendmail is.
local hooks, portfile = c.dir .. "/hooks", c.dir .. "/sink.port"
local sink = assert(baton.spawn { "sh", "-c", ("exec %q eval %q %q > %q"):format(bin,
  root .. "/tests/lua/lib/http-sink.lua", hooks, portfile), stdio = "null" })
local port = N.wait(10, function() return tonumber((F.read(portfile) or ""):match("port (%d+)")) end)
T.ok(port, "the webhook listener is up")
local mails = c.dir .. "/mails"
assert(baton.exec { "mkdir", "-p", c.dir .. "/bin" })
F.write(c.dir .. "/bin/sendmail", ("#!/bin/sh\n{ echo \"ARGS: $*\"; cat; echo '--END--'; } >> %q\n"):format(mails))
assert(baton.exec { "chmod", "+x", c.dir .. "/bin/sendmail" })
local env = ("PATH=%s/bin:$PATH BATON_WEBHOOK_URL=http://127.0.0.1:%d/hook BATON_MAIL_TO=ops@example.com")
  :format(c.dir, port or 1)
for _, n in ipairs { "a", "b", "c" } do c:start(n, TTL, nil, env) end
T.ok(N.wait(15, function() return c:cli("leader").code == 0 end), "the cluster has a leader")

local function count(prefix)
  return assert(c.e:get(P .. prefix, { prefix = true, count_only = true })).count
end
local function final(job)
  local list = {}
  for _, r in ipairs(c:records(job)) do
    if r.state ~= "running" and r.state ~= "retrying" then list[#list + 1] = r end
  end
  return list
end
-- A job source with the cluster's prefix in it as P.
local function src(s) return ("local P = %q\n"):format(P) .. s end

---------------------------------------------------------------------------
-- 1. Once per final failure, none for a retried attempt.
do
  local r1 = c:put_job("flaky", src [[
return { schedule = "@manual", concurrency = "allow", retry = { attempts = 2, backoff = 0.3, jitter = 0 },
         run = function(ctx)
           print("flaky output line " .. ctx.attempt)
           return nil, "flaky failed attempt " .. ctx.attempt
         end }]])
  local r2 = c:put_job("alert", src [[
return { on = { failed = { "flaky" } }, timeout = 30,
         run = function(ctx)
           assert(ctx:put_fenced(P .. "seen/alert/" .. ctx.fence, baton.json.encode(ctx.event)))
         end }]])
  T.ok(c:loaded("flaky", r1) and c:loaded("alert", r2), "flaky and its notifier loaded")
  c:cli("job", "run", "flaky")
  baton.sleep(0.05)
  c:cli("job", "run", "flaky")
  local failed = N.wait(30, function()
    local f = final("flaky")
    return #f == 2 and f
  end)
  T.is(failed and #failed, 2, "two runs of flaky failed for good")
  for _, r in ipairs(failed or {}) do
    T.is(r.attempt, 3, "after 3 attempts (" .. r.id .. ")")
    T.is(#r.attempts, 3, "each attempt recorded")
  end
  local alerts = N.wait(20, function()
    local a = final("alert")
    return #a >= 2 and a
  end)
  baton.sleep(3) -- anything more would come by now
  alerts = c:records("alert")
  T.is(#alerts, 2, "the notifier ran once per final failure, not for the 4 retried attempts")
  T.is(count("seen/alert/"), 2, "and executed twice in all")
  local ids = {}
  for _, f in ipairs(failed or {}) do ids[f.id] = f end
  local seen_ids = {}
  for _, a in ipairs(alerts) do
    T.is(a.state, "succeeded", "notifier run " .. a.id .. " succeeded")
    local ev = a.event or {}
    T.is(ev.job, "flaky", "its record has the event: job")
    T.is(ev.state, "failed", "state")
    T.is(ev.attempt, 3, "the final attempt")
    T.is(ev.error, "flaky failed attempt 3", "its error")
    T.ok(ids[ev.id], "the id of a failed run of flaky (" .. tostring(ev.id) .. ")")
    T.ok(not seen_ids[ev.id], "a different one each time")
    seen_ids[ev.id or ""] = true
    T.like(a.id, "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ~flaky~.+~failed$",
           "the event id: time~job~id~state")
    T.is(ev.fire, ids[ev.id] and ids[ev.id].fire, "fire: the failed run's")
    T.ok(ev.node and ids[ev.id] and ev.node == ids[ev.id].node, "node: the failed run's")
  end
  local r = assert(c.e:get(P .. "seen/alert/", { prefix = true }))
  for _, kv in ipairs(r.kvs) do
    local ev = json.decode(kv.value)
    T.is(ev.job, "flaky", "ctx.event.job")
    T.is(ev.state, "failed", "ctx.event.state")
    T.is(type(ev.output_tail), "string", "ctx.event.output_tail is there")
    T.ok(ev.output_tail:find("flaky failed attempt 3", 1, true) or ev.output_tail:find("flaky output line 3", 1, true),
         "with the failed attempt's output or error: " .. ev.output_tail)
  end
  T.is(count("pending/alert/"), 0, "no event is left pending")
end

---------------------------------------------------------------------------
-- 2. The notifier's node is killed mid-way: another node runs it again,
-- once (on_node_loss = "rerun"), and the event is still handled once.
do
  local r1 = c:put_job("dies", [[return { schedule = "@manual", run = function() error("dies on purpose") end }]])
  local r2 = c:put_job("slowalert", src [[
return { on = { failed = { "dies" } }, timeout = 120, on_node_loss = "rerun",
         run = function(ctx)
           assert(ctx:put_fenced(P .. "seen/slowalert/" .. ctx.fence, ctx.node))
           if ctx.attempt == 1 then baton.sleep(120) end
         end }]])
  T.ok(c:loaded("dies", r1) and c:loaded("slowalert", r2), "dies and slowalert loaded")
  c:cli("job", "run", "dies")
  local running = N.wait(20, function()
    local rec = c:records("slowalert")[1]
    return rec and rec.state == "running" and count("seen/slowalert/") == 1 and rec
  end)
  T.ok(running, "the notifier is running on " .. tostring(running and running.node))
  local victim = running and running.node or "a"
  c:signal(victim, "KILL")
  c.nodes[victim] = nil
  local done = N.wait(TTL + 20, function()
    local rec = c:records("slowalert")[1]
    return rec and rec.state == "succeeded" and rec
  end)
  T.ok(done, "the notifier was run again and succeeded")
  T.is(done and done.attempt, 2, "as its second attempt")
  T.isnt(done and done.node, victim, "on another node (" .. tostring(done and done.node) .. ")")
  T.is(done and done.attempts and done.attempts[1].state, "lost", "the first attempt is recorded lost")
  T.is(done and done.event and done.event.job, "dies", "with the same event")
  baton.sleep(3)
  T.is(#c:records("slowalert"), 1, "one run for the one event")
  T.is(count("seen/slowalert/"), 2, "executed twice: the killed attempt and its re-run, no more")
  c:start(victim, TTL, nil, env)
  T.ok(c:loaded("slowalert", r2), victim .. " is back")
end

---------------------------------------------------------------------------
-- 3. extract -> transform -> load, each on the previous one's success.
do
  local step = [[
return { on = { succeeded = { "%s" } },
         run = function(ctx)
           assert(ctx.event and ctx.event.job == "%s", "started by %s")
           assert(ctx:put_fenced(P .. "chain/%s/" .. ctx.fence, ctx.event.origin.id))
         end }]]
  local rl = c:put_job("load", src(step:format("transform", "transform", "transform", "load")))
  local rt = c:put_job("transform", src(step:format("extract", "extract", "extract", "transform")))
  local re = c:put_job("extract", src [[
return { schedule = "*/2 * * * * *",
         run = function(ctx) assert(ctx:put_fenced(P .. "chain/extract/" .. ctx.fence, "x")) end }]])
  T.ok(c:loaded("load", rl) and c:loaded("transform", rt) and c:loaded("extract", re), "the pipeline loaded")
  baton.sleep(7)
  c:cli("job", "pause", "extract")
  local function settled()
    local ex = final("extract")
    local tr, lo = final("transform"), final("load")
    return #ex > 0 and #tr == #ex and #lo == #tr and #c:records("extract") == #ex and { ex, tr, lo }
  end
  local s = N.wait(20, settled)
  baton.sleep(3)
  s = settled() or s
  local ex, tr, lo = s and s[1] or {}, s and s[2] or {}, s and s[3] or {}
  T.ok(#ex >= 2, "extract ran on its schedule (" .. #ex .. " instants)")
  local by = function(list)
    local m = {}
    for _, r in ipairs(list) do
      local id = r.event and r.event.id
      if id then m[id] = m[id] or {}; table.insert(m[id], r) end
    end
    return m
  end
  local tr_by, lo_by = by(tr), by(lo)
  for _, x in ipairs(ex) do
    T.is(x.state, "succeeded", "extract " .. x.id .. " succeeded")
    local t = tr_by[x.id] or {}
    T.is(#t, 1, "one transform for extract " .. x.id)
    local y = t[1]
    T.ok(y and y.state == "succeeded" and y.started >= x.finished - 0.01, "started after extract ended")
    local l = y and lo_by[y.id] or {}
    T.is(#l, 1, "one load for that transform")
    T.ok(l[1] and l[1].state == "succeeded" and l[1].started >= y.finished - 0.01, "started after transform ended")
  end
  T.is(#tr, #ex, "as many transforms as instants")
  T.is(#lo, #ex, "as many loads as instants")
  T.is(count("chain/transform/"), #ex, "each transform executed once")
  T.is(count("chain/load/"), #ex, "each load executed once")
  local origins = {}
  for _, kv in ipairs(assert(c.e:get(P .. "chain/load/", { prefix = true })).kvs) do origins[kv.value] = true end
  local all = true
  for _, x in ipairs(ex) do all = all and origins[x.id] end
  T.ok(all, "load saw, as ctx.event.origin, the extract instant its chain began with")
end

---------------------------------------------------------------------------
-- 4. Cycles are refused, by check and by put, with their name.
do
  local function file(name, body)
    local f = c.dir .. "/" .. name .. ".lua"
    F.write(f, body)
    return f
  end
  local fa = file("cyc-a", [[return { on = { succeeded = { "cyc-b" } }, run = function() end }]])
  local fb = file("cyc-b", [[return { on = { succeeded = { "cyc-a" } }, run = function() end }]])
  T.is(c:cli("job", "put", fa).code, 0, "cyc-a alone is fine")
  local show = c:cli("job", "show", "cyc-a")
  T.like(show.stdout, "\non: +succeeded: cyc%-b\n", "job show: its on")
  T.like(show.stdout, "\nschedule: +%- %(runs on events, and when triggered%)\n", "job show: no schedule of its own")
  T.like(c:cli("job", "ls").stdout, "\ncyc%-a +on:succeeded%(cyc%-b%) ", "job ls: on in the schedule column")
  local want = "EINVAL: job cyc-b: field 'on': cycle: cyc-b -> cyc-a -> cyc-b (each run would start the next, forever)"
  local r = c:cli("check", fb)
  T.is(r.code, 1, "check refuses the job that closes the cycle")
  T.is(r.stderr, "baton: check " .. fb .. ": " .. want .. "\n", "naming it")
  r = c:cli("job", "put", fb)
  T.is(r.code, 1, "put refuses it")
  T.is(r.stderr, "baton: job put " .. fb .. ": " .. want .. "\n", "naming it")
  T.is(count("jobs/cyc-b"), 0, "and writes nothing")
  local fe = file("extract", [[return { schedule = "@daily", on = { succeeded = { "load" } }, run = function() end }]])
  r = c:cli("check", fe)
  T.is(r.code, 1, "a new version of extract that would close the pipeline into a loop is refused")
  T.like(r.stderr, "cycle: extract %-> transform %-> load %-> extract ", "through the stored jobs")
  local ff = file("cyc-f", [[return { on = { failed = { "cyc-a" } }, run = function() end }]])
  T.is(c:cli("job", "put", ff).code, 0, "cyc-f, on failures of cyc-a, is fine")
  local fa2 = file("cyc-a", [[return { on = { succeeded = { "cyc-f" } }, run = function() end }]])
  r = c:cli("job", "put", fa2)
  T.is(r.code, 1, "a cycle through a failure is refused too")
  T.like(r.stderr, "cycle: cyc%-a %-%[failed%]%-> cyc%-f %-> cyc%-a ", "with the failure on its arrow")
  local off = assert(baton.exec { bin, "--endpoints", "http://127.0.0.1:1", "--prefix", P, "check", fb })
  T.is(off.code, 0, "without etcd, check still checks the file")
  T.like(off.stderr, "note: cannot read the stored jobs", "and says what it could not check")
  local fs = file("cyc-s", [[return { on = { failed = { "*" } }, run = function() end }]])
  off = assert(baton.exec { bin, "--endpoints", "http://127.0.0.1:1", "check", fs })
  T.is(off.code .. off.stderr, "0", "a job with only \"*\" needs no etcd to be checked (no cycle is possible)")
end

---------------------------------------------------------------------------
-- 5. "*": every job but the event job itself and the other event jobs.
do
  local rb = c:put_job("boom", [[return { schedule = "@manual", run = function() error("boom failed", 0) end }]])
  local rk = c:put_job("okjob", [[return { schedule = "@manual", run = function() end }]])
  local rv = c:put_job("evfail", [[return { on = { succeeded = { "okjob" } }, run = function() error("evfail fails", 0) end }]])
  local rs = c:put_job("star", src [[
return { on = { failed = { "*" } },
         run = function(ctx)
           assert(ctx:put_fenced(P .. "seen/star/" .. ctx.fence, ctx.event.job))
           error("star fails too", 0)
         end }]])
  T.ok(c:loaded("boom", rb) and c:loaded("okjob", rk) and c:loaded("evfail", rv) and c:loaded("star", rs),
       "boom, okjob, evfail and star loaded")
  c:cli("job", "run", "boom")
  c:cli("job", "run", "okjob")
  T.ok(N.wait(20, function() return #final("evfail") == 1 and #final("star") >= 1 end),
       "boom failed, okjob started evfail, which failed")
  baton.sleep(3)
  local stars = c:records("star")
  T.is(#stars, 1, "star ran once")
  T.is(stars[1] and stars[1].event.job, "boom", "for boom, a plain job")
  T.is(stars[1] and stars[1].state, "failed", "star failed, and its own failure started nothing")
  T.is(count("seen/star/"), 1, "star did not run for evfail, an event job")
end

---------------------------------------------------------------------------
-- 6. The shipped notifiers.
do
  for _, f in ipairs { "notify-webhook", "notify-mail" } do
    local r = c:cli("job", "put", root .. "/jobs/" .. f .. ".lua")
    T.is(r.code, 0, "jobs/" .. f .. ".lua is put")
  end
  local function rev(name) return assert(c.e:get(P .. "jobs/" .. name)).kvs[1].mod_revision end
  T.ok(c:loaded("notify-webhook", rev("notify-webhook")) and c:loaded("notify-mail", rev("notify-mail")),
       "the notifiers loaded")
  local before = #final("boom")
  c:cli("job", "run", "boom")
  local function posts()
    local list = {}
    for l in (F.read(hooks) or ""):gmatch("[^\n]+") do list[#list + 1] = json.decode(l) end
    return list
  end
  local function mail_list()
    local list = {}
    for m in (F.read(mails) or ""):gmatch("(.-)%-%-END%-%-\n") do list[#list + 1] = m end
    return list
  end
  T.ok(N.wait(20, function() return #posts() >= 1 and #mail_list() >= 1 end), "a post and a mail came")
  baton.sleep(3)
  local boom = final("boom")
  T.is(#boom, before + 1, "(boom failed once more)")
  local p = posts()
  T.is(#p, 1, "one post for one failure")
  local hook = p[1] or { headers = {} }
  T.is(hook.method, "POST", "POST")
  T.is(hook.path, "/hook", "to BATON_WEBHOOK_URL from the node's environment")
  T.like(hook.headers["content-type"] or "", "^application/json", "as JSON")
  local ok, body = pcall(json.decode, hook.body or "")
  T.ok(ok and type(body) == "table", "a JSON object")
  body = ok and type(body) == "table" and body or {}
  T.like(body.text or "", "^baton: job boom failed %(run .+, node %w+, attempt 1%)$", "Slack's text field")
  local att = type(body.attachments) == "table" and body.attachments[1] or {}
  T.is(att.color, "danger", "an attachment, coloured")
  T.is(att.title, "boom failed", "titled")
  T.is(att.fields and att.fields[1].value, "boom failed", "with the error")
  local m = mail_list()
  T.is(#m, 1, "one mail for one failure")
  local mail = m[1] or ""
  T.like(mail, "^ARGS: %-t %-i\n", "sendmail -t -i, from PATH")
  T.like(mail, "\nTo: ops@example.com\n", "to BATON_MAIL_TO")
  T.like(mail, "\nSubject: %[baton%] boom failed\n", "a subject naming job and state")
  T.like(mail, "\nerror: +boom failed\n", "the error in the body")
  c:cli("job", "run", "notify-webhook")
  T.ok(N.wait(15, function() return #posts() == 2 end), "a manual run posts")
  T.like((json.decode(posts()[2] and posts()[2].body or "{}") or {}).text or "", "test message",
         "a test message")
end

---------------------------------------------------------------------------
-- 7. The guide's pipeline, pasted as it is.
do
  local guide = assert(F.read(root .. "/docs/guide.md"))
  local files = {}
  for block in guide:gmatch("```lua\n(.-)```") do
    local name = block:match("^%-%- (%a+)%.lua: ")
    if name == "extract" or name == "transform" or name == "load" then
      files[name] = c.dir .. "/guide-" .. name .. ".lua"
      F.write(files[name], block)
    end
  end
  T.ok(files.extract and files.transform and files.load, "the guide has extract.lua, transform.lua and load.lua")
  local revs = {}
  for _, name in ipairs { "load", "transform", "extract" } do
    local r = c:cli("job", "put", files[name] or "/nonexistent", "--name", name)
    if not T.is(r.code, 0, "the guide's " .. name .. ".lua is put") then T.diag(r.stderr) end
    revs[name] = assert(c.e:get(P .. "jobs/" .. name)).kvs[1] and assert(c.e:get(P .. "jobs/" .. name)).kvs[1].mod_revision
  end
  T.ok(c:loaded("load", revs.load) and c:loaded("transform", revs.transform) and c:loaded("extract", revs.extract),
       "the guide's pipeline loaded")
  local before = #c:records("load")
  c:cli("job", "run", "extract")
  local last = N.wait(20, function()
    for _, r in ipairs(c:records("load")) do
      if r.code_revision == revs.load and r.state ~= "running" then return r end
    end
  end)
  T.is(last and last.state, "succeeded", "its load ran after its transform after the manual extract")
  T.is(#c:records("load"), before + 1, "once")
  local totals = assert(c.e:get(P .. "pipeline/", { prefix = true }))
  local total
  for _, kv in ipairs(totals.kvs) do if kv.key:match("/total$") then total = kv.value end end
  T.is(total, "2499", "transform wrote the batch's total where load read it")
end

-- 8. job rm of an event job takes the events waiting for it, not the
-- pending retries of its runs that have a record (with the nodes stopped,
-- so that none takes the entries first)
do
  for _, n in ipairs { "a", "b", "c" } do c:stop(n) end
  local src = "return { on = { failed = { 'nosuch' } }, run = function() end }"
  F.write(c.dir .. "/gone.lua", src)
  T.is(c:cli("job", "put", c.dir .. "/gone.lua").code, 0, "an event job to remove")
  local ev = P .. "pending/gone/2026-11-29T02:00:04.120Z~nosuch~2026-11-29T02:00:00Z~failed"
  local retry = P .. "pending/gone/2026-11-29T01:00:00Z"
  assert(c.e:put(ev, json.encode { at = 0, attempt = 1, reason = "event" }))
  assert(c.e:put(P .. "runs/gone/2026-11-29T01:00:00Z", json.encode { state = "retrying" }))
  assert(c.e:put(retry, json.encode { at = 0, attempt = 2, reason = "retry" }))
  local r = c:cli("job", "rm", "gone")
  T.is(r.code, 0, "job rm of an event job")
  T.is(#assert(c.e:get(ev)).kvs, 0, "its waiting event is gone with it")
  T.is(#assert(c.e:get(retry)).kvs, 1, "a pending retry of a recorded run stays")
end

c:destroy()
sink:kill("SIGKILL")
sink:wait()
T.done()
