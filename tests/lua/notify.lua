-- Notifications configured in etcd (baton.notify, `baton notify`), on a
-- real cluster of two nodes whose environment has no webhook URL, and
-- none of them restarted:
--   1. `job put` of the shipped webhook notifier warns while no channel
--      is set, and not once `baton notify set webhook.url` has set it;
--   2. a job's failure is posted to a local receiver, at the URL from
--      etcd; a new URL applies to the next failure (hot, no restart);
--   3. with the receiver down, the message is kept (P notify/outbox/),
--      shows in /metrics (baton_notifications_pending), in the node's log
--      at warn and in `baton notify show`; the receiver back on its port,
--      the retry delivers it once, and the gauge goes back to 0;
--   4. a message whose run gave up is kept, and the next run of the
--      notifier (here by hand) sends it, marked delayed;
--   5. put warns about a channel whose url_secret the job does not declare;
--   6. a mail channel set in etcd goes through the node's sendmail;
--   7. `baton notify` refuses bad input with one line, storing nothing.
local T = require "tap"
local N = require "nodes"
local F = require "files"
local json = baton.json

local notify = require "baton.notify"

---------------------------------------------------------------------------
-- 0. the configuration's checks, one line naming channel and setting
do
  local function err(cfg) return select(2, notify.check(cfg)) end
  T.ok(notify.check { webhook = { url = "https://hooks.example.com/T/B/X", timeout = 10 },
                      mail = { to = "ops@example.com, dba@example.com", from = "baton@example.com" },
                      oncall = { type = "webhook", url_secret = "ONCALL_URL" } }, "a valid configuration")
  T.is(err { webhook = { url = "ftp://x" } },
       'EINVAL: config/notify: channel webhook: url: must be an http:// or https:// URL, got "ftp://x"', "a bad URL")
  T.is(err { webhok = { url = "https://x" } }, "EINVAL: config/notify: channel webhok: type: missing (webhook or "
       .. "mail; the type is the name only for a channel named webhook or mail) (did you mean channel webhook?)",
       "a misspelt channel")
  T.like(err { webhook = { url = "https://x", tiemout = 3 } }, 'unknown setting "tiemout" .*did you mean timeout',
         "a misspelt setting")
  T.like(err { webhook = { url = "https://x", url_secret = "X" } }, "give url or url_secret, not both", "both")
  T.like(err { mail = { to = "ops" } }, 'channel mail: to: "ops" is not a mail address', "a bad address")
  T.like(err { mail = { to = "a@x\nBcc: b@y" } }, "is not a mail address", "no header injection")
  T.like(err { x = { type = "sms", url = "https://x" } }, 'type: must be webhook or mail, got "sms"', "a bad type")
  T.like(err { webhook = { url = "https://x", timeout = 0 } }, "timeout: must be a number of seconds from 1 to 300",
         "a bad timeout")
  T.is(notify.elide("ECONNREFUSED: https://hooks.example.com/T/B/SECRET?x=1: refused",
                    "https://hooks.example.com/T/B/SECRET?x=1"),
       "ECONNREFUSED: https://hooks.example.com/...: refused", "errors name a webhook's host, not its token")
end

local root = os.getenv("BATON_ROOT") or "."
local bin = os.getenv("BATON_BIN") or "bin/baton"
local c = N.new("notify")
local P = c.P

local free_port = N.free_port

-- A webhook receiver (tests/lua/lib/http-sink.lua) on port, writing to out;
-- every one started is killed at the end, whatever happens.
local sinks, stopped = {}, {}
local function stop(p)
  if stopped[p] then return end
  stopped[p] = true
  p:kill("SIGKILL")
  p:wait()
end
local function sink(out, port)
  local portfile = out .. ".port"
  os.remove(portfile)
  local p = assert(baton.spawn { "sh", "-c", ("exec %q eval %q %q %d > %q"):format(bin,
    root .. "/tests/lua/lib/http-sink.lua", out, port, portfile), stdio = "null" })
  sinks[#sinks + 1] = p
  T.ok(N.wait(10, function() return (F.read(portfile) or ""):match("port " .. port) end),
       "a receiver listens on port " .. port)
  return p
end
local function posts(out)
  local list = {}
  for l in (F.read(out) or ""):gmatch("[^\n]+") do
    local p = json.decode(l)
    p.json = json.decode(p.body or "") or {}
    list[#list + 1] = p
  end
  return list
end

-- (the checks run in main(); the cluster and the receivers are stopped
-- after it, even when it raises)
local function main()
local hooks, port = c.dir .. "/hooks", free_port()
local receiver = sink(hooks, port)

-- Two nodes, no BATON_WEBHOOK_URL or BATON_MAIL_TO (the old way) in their
-- environment; their sendmail (a program: never from etcd) is a fake one.
local mails = c.dir .. "/mails"
F.write(c.dir .. "/sendmail", ("#!/bin/sh\n{ echo \"ARGS: $*\"; cat; echo '--END--'; } >> %q\n"):format(mails))
assert(baton.exec { "chmod", "+x", c.dir .. "/sendmail" })
local http = {}
for _, n in ipairs { "a", "b" } do
  http[n] = free_port()
  c:start(n, 3, ("--http 127.0.0.1:%d"):format(http[n]),
          ("-u BATON_WEBHOOK_URL -u BATON_MAIL_TO BATON_SENDMAIL=%s/sendmail"):format(c.dir))
end
T.ok(N.wait(15, function() return c:cli("leader").code == 0 end), "the cluster has a leader")

local function metric(node, job)
  local r = baton.http { url = ("http://127.0.0.1:%d/metrics"):format(http[node]), timeout = 5 }
  if not r or r.status ~= 200 then return nil end
  return tonumber(r.body:match('\nbaton_notifications_pending{job_name="' .. job:gsub("%p", "%%%0") .. '"} (%S+)'))
end
local function records(job, pred)
  local list = {}
  for _, r in ipairs(c:records(job)) do if not pred or pred(r) then list[#list + 1] = r end end
  return list
end
local function final(r) return r.state ~= "running" and r.state ~= "retrying" end
local function outbox(job)
  return assert(c.e:get(P .. "notify/outbox/" .. job .. "/", { prefix = true })).kvs
end

-- The shipped notifier, with retries seconds apart instead of minutes.
local shipped = assert(F.read(root .. "/jobs/notify-webhook.lua"))
local fast, n = shipped:gsub("retry = { attempts = 50, backoff = 10, max_backoff = 600, jitter = 0.2 }",
                             "retry = { attempts = 50, backoff = 1, max_backoff = 2, jitter = 0 }")
T.is(n, 1, "(the shipped notifier's retry, made faster for the test)")
F.write(c.dir .. "/notify-webhook.lua", fast)

---------------------------------------------------------------------------
-- 1. put warns while no channel is set
do
  local r = c:cli("job", "put", c.dir .. "/notify-webhook.lua")
  T.is(r.code, 0, "the notifier is stored")
  T.like(r.stderr, "warning: job notify%-webhook sends to channel webhook, which is not set in "
    .. P:gsub("%p", "%%%0") .. "config/notify", "with a warning that nothing could deliver its messages")
  local s = c:cli("notify", "set", "webhook.url", ("http://127.0.0.1:%d/hook"):format(port))
  T.is(s.code, 0, "baton notify set webhook.url")
  T.like(s.stdout, "set webhook%.url in " .. P:gsub("%p", "%%%0") .. "config/notify", "says where")
  r = c:cli("job", "put", c.dir .. "/notify-webhook.lua")
  T.is(r.code, 0, "put again")
  T.unlike(r.stderr, "warning", "no warning once the channel is set")
end
local nrev = assert(c.e:get(P .. "jobs/notify-webhook")).kvs[1].mod_revision
local brev = c:put_job("boom", [[
return { schedule = "@manual", concurrency = "allow",
         run = function(ctx) return nil, "boom failed" end }]])
T.ok(c:loaded("notify-webhook", nrev) and c:loaded("boom", brev), "the notifier and boom loaded")

local function boom_once()
  local before = #records("boom")
  local r = c:cli("job", "run", "boom")
  T.is(r.code, 0, "baton job run boom")
  local rec = N.wait(20, function()
    local l = records("boom", final)
    if #l > before then
      table.sort(l, function(x, y) return x.id < y.id end)
      return l[#l]
    end
  end)
  T.is(rec and rec.state, "failed", "boom failed")
  return rec and rec.id or "?"
end
local function posts_of(out, id)
  local list = {}
  for _, p in ipairs(posts(out)) do
    if tostring(p.json.text):find("(run " .. id .. ",", 1, true) then list[#list + 1] = p end
  end
  return list
end

---------------------------------------------------------------------------
-- 2. a failure is posted at the URL from etcd; a new URL applies at once
do
  local id = boom_once()
  if not T.ok(N.wait(30, function() return #posts_of(hooks, id) >= 1 end), "the failure was posted") then
    -- (everything after depends on it: end here rather than wait out
    -- every bound below)
    T.diag("nothing was posted: the rest of the test is skipped")
    return
  end
  local p = posts_of(hooks, id)[1] or { json = {}, headers = {} }
  T.is(p.path, "/hook", "to the URL set in etcd")
  T.like(p.json.text or "", "^baton: job boom failed %(run ", "Slack-compatible text")
  T.is(#outbox("notify-webhook"), 0, "nothing kept")

  T.is(c:cli("notify", "set", "webhook.url", ("http://127.0.0.1:%d/hook2"):format(port)).code, 0,
       "a new URL")
  id = boom_once()
  T.ok(N.wait(30, function() return #posts_of(hooks, id) >= 1 end), "the next failure was posted")
  T.is((posts_of(hooks, id)[1] or {}).path, "/hook2", "to the new URL, no node restarted")
end

---------------------------------------------------------------------------
-- 3. the receiver down: kept, counted, logged; delivered once it is back
do
  stop(receiver)
  local id = boom_once()
  local kept = N.wait(30, function()
    local kvs = outbox("notify-webhook")
    return #kvs > 0 and kvs
  end)
  T.ok(kept, "the message that could not be posted is kept in notify/outbox/")
  local entry = kept and json.decode(kept[1].value) or {}
  T.is(entry.event and entry.event.job, "boom", "the event of boom's failure")
  T.like(tostring(entry.error), "webhook", "with the error")
  T.is(kept and kept[1].key:match("[^/]+$"), (records("notify-webhook", function(r)
    return r.event and r.event.id == id end)[1] or {}).id, "under the notifier run's id")
  -- /metrics: the first scrape starts the reader, a later one has it
  local seen = N.wait(40, function()
    local v = metric("a", "notify-webhook")
    return v and v >= 1 and v
  end)
  T.ok(seen, "node a's /metrics: baton_notifications_pending{job_name=\"notify-webhook\"} >= 1 (" .. tostring(seen) .. ")")
  T.ok(N.wait(40, function() return (metric("b", "notify-webhook") or 0) >= 1 end), "node b's too")
  T.ok(N.wait(10, function()
    return (c:log("a") .. c:log("b")):find('level=warn msg="notification not delivered"[^\n]*event_job=boom')
  end), "a warning in the node's log")
  local show = c:cli("notify", "show")
  T.like(show.stdout, "not delivered: %d", "baton notify show counts it")
  T.like(show.stdout, "notify%-webhook%s+webhook%s+boom failed", "and lists it")
  local nrec = records("notify-webhook", function(r) return r.event and r.event.id == id end)[1] or {}
  T.ok(nrec.state == "retrying" or nrec.state == "running", "the notifier's run waits for its retry ("
    .. tostring(nrec.state) .. ")")

  receiver = sink(hooks, port)
  T.ok(N.wait(30, function() return #posts_of(hooks, id) >= 1 end), "once the receiver is back, it is posted")
  T.ok(N.wait(20, function() return #outbox("notify-webhook") == 0 end), "and no longer kept")
  local done = N.wait(20, function()
    local r = records("notify-webhook", function(r) return r.event and r.event.id == id and final(r) end)[1]
    return r
  end)
  T.is(done and done.state, "succeeded", "the notifier's run succeeded on a retry")
  T.ok(done and done.attempt >= 2, "after " .. tostring(done and done.attempt) .. " attempts")
  T.ok(N.wait(40, function() return metric("a", "notify-webhook") == 0 end), "node a's gauge back to 0")
  baton.sleep(2)
  T.is(#posts_of(hooks, id), 1, "posted once")
  local late = (posts_of(hooks, id)[1] or { json = {} }).json
  local fields = late.attachments and late.attachments[1].fields or {}
  T.is(fields[4] and fields[4].title, "delayed", "marked delayed")
end

---------------------------------------------------------------------------
-- 4. a run that gave up: kept, sent by the next run of the notifier
do
  local hooks2, port2 = c.dir .. "/hooks2", free_port()
  T.is(c:cli("notify", "set", "second.type", "webhook", "second.url", ("http://127.0.0.1:%d/second"):format(port2)).code,
       0, "a second channel, whose receiver is down")
  local src = shipped:gsub('on = { failed = { "%*" }, abandoned = { "%*" } }', 'on = { failed = { "boom2" } }')
    :gsub('params = { channel = "webhook" }', 'params = { channel = "second" }')
    :gsub("retry = { attempts = 50, backoff = 10, max_backoff = 600, jitter = 0.2 }",
          "retry = { attempts = 1, backoff = 0.5, jitter = 0 }")
  local r2 = c:put_job("notify-second", src)
  local b2 = c:put_job("boom2", [[
return { schedule = "@manual", run = function(ctx) return nil, "boom2 failed" end }]])
  T.ok(c:loaded("notify-second", r2) and c:loaded("boom2", b2), "a notifier that gives up after 2 attempts")
  c:cli("job", "run", "boom2")
  local gave_up = N.wait(30, function()
    return records("notify-second", final)[1]
  end)
  T.is(gave_up and gave_up.state, "failed", "its run failed for good")
  T.like(gave_up and gave_up.error or "", "^not delivered %(kept in ", "saying where the message is kept")
  T.is(#outbox("notify-second"), 1, "the message is still kept")
  local rx = sink(hooks2, port2)
  c:cli("job", "run", "notify-second")
  T.ok(N.wait(30, function() return #posts(hooks2) >= 2 end), "the next run posts its test message and the kept one")
  T.ok(N.wait(10, function() return #outbox("notify-second") == 0 end), "nothing kept any more")
  local texts = {}
  for _, p in ipairs(posts(hooks2)) do texts[#texts + 1] = tostring(p.json.text) end
  table.sort(texts)
  T.like(texts[1] or "", "^baton: job boom2 failed", "boom2's failure, late")
  T.like(texts[2] or "", "^baton: test message from notify%-second", "and the test message")
  stop(rx)
end

---------------------------------------------------------------------------
-- 5. put warns about a url_secret the job does not declare
do
  T.is(c:cli("notify", "set", "third.type", "webhook", "third.url_secret", "THIRD_URL").code, 0,
       "a channel whose URL is a node secret")
  local src = shipped:gsub('params = { channel = "webhook" }', 'params = { channel = "third" }')
  F.write(c.dir .. "/notify-third.lua", src)
  local r = c:cli("job", "put", c.dir .. "/notify-third.lua")
  T.like(r.stderr, "channel third takes its URL from the secret THIRD_URL, which job notify%-third does not declare",
         "put warns that the job does not declare the secret")
  F.write(c.dir .. "/notify-third.lua", src:gsub('params = {', 'secrets = { "THIRD_URL" },\n  params = {'))
  r = c:cli("job", "put", c.dir .. "/notify-third.lua")
  T.unlike(r.stderr, "warning", "and not once it does")
  c:cli("job", "rm", "notify-third") -- (no node has THIRD_URL: its runs would fail)
end

---------------------------------------------------------------------------
-- 6. a mail channel from etcd, through the node's sendmail
do
  T.is(c:cli("notify", "set", "mail.to", "ops@example.com, dba@example.com", "mail.from", "baton@example.com").code,
       0, "baton notify set mail.to and mail.from")
  local src = assert(F.read(root .. "/jobs/notify-mail.lua"))
    :gsub('on = { failed = { "%*" }, abandoned = { "%*" } }', 'on = { failed = { "boom3" } }')
  local rm = c:put_job("notify-mail", src)
  local b3 = c:put_job("boom3", [[
return { schedule = "@manual", run = function(ctx) print("the disk is full"); return nil, "boom3 failed" end }]])
  T.ok(c:loaded("notify-mail", rm) and c:loaded("boom3", b3), "the mail notifier loaded")
  c:cli("job", "run", "boom3")
  local mail = N.wait(30, function() return (F.read(mails) or ""):match("(.-)%-%-END%-%-\n") end)
  T.ok(mail, "a mail was handed to the node's sendmail")
  mail = mail or ""
  T.like(mail, "^ARGS: %-t %-i\n", "sendmail -t -i")
  T.like(mail, "\nFrom: baton@example%.com\n", "from mail.from")
  T.like(mail, "\nTo: ops@example%.com, dba@example%.com\n", "to mail.to, from etcd")
  T.like(mail, "\nSubject: %[baton%] boom3 failed\n", "a subject naming job and state")
  T.like(mail, "\nthe disk is full\n", "the tail of the run's output")
end

---------------------------------------------------------------------------
-- 7. the command line: bad input stores nothing, with one line
do
  local before = assert(c.e:get(P .. "config/notify")).kvs[1].mod_revision
  local r = c:cli("notify", "set", "webhook.url", "ftp://x")
  T.is(r.code, 1, "a bad URL: exit 1")
  T.is(r.stderr, 'baton: notify set: EINVAL: config/notify: channel webhook: url: must be an http:// or https:// '
    .. 'URL, got "ftp://x"; nothing was stored\n', "one line saying what is wrong")
  r = c:cli("notify", "set", "webhook.ur", "https://x")
  T.is(r.code, 2, "an unknown setting: usage error")
  T.like(r.stderr, 'unknown setting "ur" .*%(did you mean url%?%)', "with a suggestion")
  T.is(c:cli("notify", "set", "webhook.url").code, 2, "a setting without a value: usage error")
  T.is(c:cli("notify", "unset", "nosuch").code, 1, "unset of a channel that is not there: exit 1")
  T.is(assert(c.e:get(P .. "config/notify")).kvs[1].mod_revision, before, "nothing was stored")
  r = c:cli("notify", "show", "--json")
  local j = json.decode(r.stdout) or {}
  T.is(j.config and j.config.webhook and j.config.webhook.url, ("http://127.0.0.1:%d/hook2"):format(port),
       "show --json: the configuration")
  T.is(j.pending_total, 0, "and nothing waiting")
  T.is(c:cli("notify", "unset", "third").code, 0, "unset a channel")
  T.is(c:cli("notify", "--help").code, 0, "notify --help")
  T.is(c:cli("help", "notify", "set").code, 0, "help notify set")
end

end

local ok, err = xpcall(main, debug.traceback)
if not ok then T.ok(false, "the test ran to its end"); T.diag(err) end
for _, p in ipairs(sinks) do stop(p) end
c:destroy()
T.done()
