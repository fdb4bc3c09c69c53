-- Notifications (docs/guide.md section 7, "Alerting"): where the shipped
-- notifiers (jobs/notify-webhook.lua, jobs/notify-mail.lua) send, read from
-- etcd when they run, and what becomes of a message that cannot be sent.
--
--   P config/notify          JSON: the channels, {name: {type, ...}}:
--     {"webhook": {"url": "https://hooks.slack.com/services/T0/B0/XX"},
--      "mail":    {"to": "ops@example.com, dba@example.com"},
--      "oncall":  {"type": "webhook", "url_secret": "ONCALL_URL", "timeout": 10}}
--     type webhook: url (http:// or https://) or url_secret (the name of a
--       node secret holding the URL, which the job must list in its
--       `secrets`), timeout (seconds, default 15)
--     type mail: to (addresses, comma-separated), from (default baton@<node>);
--       sent through the node's sendmail (BATON_SENDMAIL, default
--       "sendmail": a program is never taken from etcd)
--     A channel's type defaults to its name when that is a type.
--   P notify/outbox/<job>/<run id>   a notification not delivered yet
--     {job, run, channel, event, since, attempts, error, at, node
--      [, draining = {by, ["until"]}]}
--
-- A notifier is a job with `on` and a `channel` parameter whose run calls
-- M.run(ctx). Each run reads P config/notify afresh (a `baton notify set`
-- applies to the next message, on every node, with no restart) and:
--   1. sends its own message (ctx.event's; a test message for a run
--      without an event). An event's message that fails is kept in the
--      outbox, under the run's id, with the error and the attempts so far,
--      a warning goes to the node's log, and the run fails: the job's
--      `retry` sends it again later, from whichever node takes the retry.
--      Once sent, its entry goes.
--   2. once its own message went, sends what runs of the same job left in
--      the outbox for the same channel when their retries ran out (an
--      entry whose run is no longer running or retrying), oldest first,
--      each claimed first (a
--      transaction on its revision) so that two runs do not send it twice.
-- So a message is never dropped: it is sent by its own run's retries, or
-- kept until a later run of the notifier (the next event, or `baton job
-- run NOTIFIER`) sends it. The outbox is counted on every node's /metrics
-- (baton_notifications_pending, node/metrics.lua) and listed by `baton
-- notify show`.
--
-- This module serves the job's run (a worker), the node's metrics, the
-- CLI (`baton notify`) and `baton job put` (put_warnings).
local baton = require "baton"
local util = require "baton.util"
local keys = require "baton.keys"

local json = baton.json
local format, concat, floor = string.format, table.concat, math.floor

local M = {}

-- (the keys without the prefix, as messages name them)
M.CONFIG = keys.key("", "config", "notify")
M.OUTBOX = keys.dir("", "notify", "outbox")
M.TYPES = { "webhook", "mail" }
M.WEBHOOK_TIMEOUT = 15 -- seconds, a webhook channel's default timeout
M.DRAIN_MAX = 100      -- outbox entries one run sends at most
M.CLAIM_SLACK = 30     -- seconds a claim of an entry outlives its delivery's timeout
M.COUNT_LIMIT = 10000  -- outbox keys read per count (the total is exact beyond it)

local CHANNEL_NAME = "^[%a][%w_-]*$"
local SECRET_NAME = "^[%a_][%w_]*$"
local ADDRESS = "^[^%s@,<>\"]+@[^%s@,<>\"]+$"

-- The fields of each type of channel, in the order `baton notify show`
-- prints them.
local FIELDS = {
  webhook = { "type", "url", "url_secret", "timeout" },
  mail = { "type", "to", "from" },
}
local ALL_FIELDS = { "type", "url", "url_secret", "timeout", "to", "from" }

local function is_type(t) return t == "webhook" or t == "mail" end

-- The type of channel name with settings ch: its `type`, or its name.
local function type_of(name, ch)
  local t = ch.type
  if t == nil and is_type(name) then t = name end
  return t
end

---------------------------------------------------------------------------
-- the configuration

-- The error of one field: "channel webhook: url: must be ...".
local function ferr(name, field, msg)
  return format("channel %s: %s%s", name, field and (field .. ": ") or "", msg)
end

local function check_url(s)
  if type(s) ~= "string" then return "must be a string" end
  if #s > 2048 then return "is longer than 2048 bytes" end
  if not s:find("^[hH][tT][tT][pP][sS]?://[^%s/?#]+[^%s]*$") then
    return format("must be an http:// or https:// URL, got %q", s)
  end
end

-- "a@x, b@y" as a list of addresses, or nil, why.
local function addresses(s, one)
  if type(s) ~= "string" then return nil, "must be a string" end
  local list = {}
  for part in (s .. ","):gmatch("([^,]*),") do
    part = part:match("^%s*(.-)%s*$")
    if part ~= "" then
      if not part:find(ADDRESS) then return nil, format("%q is not a mail address (name@domain)", part) end
      list[#list + 1] = part
    end
  end
  if #list == 0 then return nil, "names no address" end
  if one and #list > 1 then return nil, "must be one address" end
  return list
end

-- Checks one channel's settings: nil when they are valid, else why (one
-- line naming the channel and the field).
local function check_channel(name, ch)
  if type(name) ~= "string" or not name:find(CHANNEL_NAME) or #name > 64 then
    return format("%q is not a channel name (letters, digits, '_' and '-', starting with a letter)", tostring(name))
  end
  if type(ch) ~= "table" or ch[1] ~= nil then return ferr(name, nil, "must be an object of settings") end
  local t = type_of(name, ch)
  if t == nil then
    local hint = require("baton.job").did_you_mean(name, M.TYPES)
    return ferr(name, "type", "missing (webhook or mail; the type is the name only for a channel named webhook or mail)"
      .. (hint and format(" (did you mean channel %s?)", hint) or ""))
  end
  if not is_type(t) then return ferr(name, "type", format("must be webhook or mail, got %s", json.encode(t))) end
  local known = {}
  for _, f in ipairs(FIELDS[t]) do known[f] = true end
  for k in pairs(ch) do
    if not known[k] then
      local hint = type(k) == "string" and require("baton.job").did_you_mean(k, FIELDS[t])
      return ferr(name, nil, format("unknown setting %s for a %s channel (settings: %s)%s", json.encode(k), t,
        concat(FIELDS[t], ", "), hint and format(" (did you mean %s?)", hint) or ""))
    end
  end
  if t == "webhook" then
    if ch.url ~= nil and ch.url_secret ~= nil then return ferr(name, nil, "give url or url_secret, not both") end
    if ch.url == nil and ch.url_secret == nil then return ferr(name, "url", "missing (or url_secret)") end
    if ch.url ~= nil then
      local e = check_url(ch.url)
      if e then return ferr(name, "url", e) end
    end
    if ch.url_secret ~= nil and (type(ch.url_secret) ~= "string" or not ch.url_secret:find(SECRET_NAME)) then
      return ferr(name, "url_secret", format("must be a secret's name (letters, digits and '_'), got %s",
        json.encode(ch.url_secret)))
    end
    if ch.timeout ~= nil and (type(ch.timeout) ~= "number" or ch.timeout < 1 or ch.timeout > 300) then
      return ferr(name, "timeout", format("must be a number of seconds from 1 to 300, got %s", json.encode(ch.timeout)))
    end
  else
    if ch.to == nil then return ferr(name, "to", "missing (one or more addresses, comma-separated)") end
    local _, e = addresses(ch.to)
    if e then return ferr(name, "to", e) end
    if ch.from ~= nil then
      _, e = addresses(ch.from, true)
      if e then return ferr(name, "from", e) end
    end
  end
end

-- Checks a whole configuration (decoded JSON): true, or nil, "EINVAL: ...".
function M.check(cfg)
  if type(cfg) ~= "table" or cfg[1] ~= nil then
    return nil, "EINVAL: " .. M.CONFIG .. " must be a JSON object of channels", "EINVAL"
  end
  for _, name in ipairs(util.sorted_keys(cfg)) do
    local e = check_channel(name, cfg[name])
    if e then return nil, "EINVAL: " .. M.CONFIG .. ": " .. e, "EINVAL" end
  end
  return true
end

-- Decodes the text stored at P config/notify: the configuration (a
-- table; with strict, every channel checked), or nil, "EINVAL: ...".
function M.decode(text, strict)
  local ok, cfg, derr = pcall(json.decode, text)
  if not ok or cfg == nil then
    return nil, "EINVAL: " .. M.CONFIG .. " is not JSON: " .. tostring(ok and derr or cfg), "EINVAL"
  end
  if type(cfg) ~= "table" or cfg[1] ~= nil then
    return nil, "EINVAL: " .. M.CONFIG .. " must be a JSON object of channels", "EINVAL"
  end
  if strict then
    local good, err = M.check(cfg)
    if not good then return nil, err, "EINVAL" end
  end
  return cfg
end

-- The stored configuration: cfg ({} when there is none; with strict,
-- every channel checked, else each is checked when it is used: a channel
-- stored wrong by a raw etcd put stops only the notifiers that use it),
-- its kv (nil when absent); or nil, err, code (etcd failed, or what is
-- stored is not valid).
function M.read(e, P, strict)
  local r, err, code = e:get(keys.key(P, "config", "notify"))
  if not r then return nil, err, code end
  local kv = r.kvs[1]
  if not kv then return {}, nil end
  local cfg, derr = M.decode(kv.value, strict)
  if not cfg then return nil, derr, "EINVAL" end
  return cfg, kv
end

-- The channel a run sends to: {name, type, url | url_secret, timeout, to,
-- from, env}, from cfg, or else (the way of earlier versions, on this node
-- only) from the node's environment: BATON_WEBHOOK_URL for a channel named
-- webhook, BATON_MAIL_TO (and BATON_MAIL_FROM) for one named mail. nil,
-- why when there is none.
function M.channel(cfg, name)
  local ch = cfg and cfg[name]
  if ch ~= nil then
    local bad = check_channel(name, ch)
    if bad then return nil, "EINVAL: " .. M.CONFIG .. ": " .. bad end
    local out = { name = name, type = type_of(name, ch) }
    for k, v in pairs(ch) do if k ~= "type" then out[k] = v end end
    return out
  end
  if name == "webhook" and (os.getenv("BATON_WEBHOOK_URL") or "") ~= "" then
    return { name = name, type = "webhook", url = os.getenv("BATON_WEBHOOK_URL"), env = true }
  end
  if name == "mail" and (os.getenv("BATON_MAIL_TO") or "") ~= "" then
    local from = os.getenv("BATON_MAIL_FROM")
    return { name = name, type = "mail", to = os.getenv("BATON_MAIL_TO"), env = true,
             from = from ~= "" and from or nil }
  end
  return nil, format("channel %s is not set in %s (baton notify set %s)", name, M.CONFIG,
    name == "mail" and "mail.to ADDRESS" or
      (name == "webhook" and "webhook.url URL" or (name .. ".type webhook " .. name .. ".url URL")))
end

-- Whether spec (a loaded job) is a notifier: a job with `on` and a
-- `channel` parameter.
function M.is_notifier(spec)
  local p = type(spec) == "table" and spec.params
  return type(spec) == "table" and spec.on ~= nil and type(p) == "table"
    and type(p.channel) == "string" and p.channel ~= ""
end

---------------------------------------------------------------------------
-- messages

local function when(t) return os.date("!%Y-%m-%dT%H:%M:%SZ", floor(t)) end

-- "first tried at T, N attempts failed": the note of a message that is
-- sent late (entry: its outbox entry), or nil.
local function late_note(entry)
  if type(entry) ~= "table" or type(entry.since) ~= "number" then return nil end
  return format("delayed: first tried at %s, %d failed attempt%s (%s)", when(entry.since),
    tonumber(entry.attempts) or 0, entry.attempts == 1 and "" or "s", tostring(entry.error or "?"))
end

-- The body of a webhook's POST: Slack-compatible JSON ({"text": ...,
-- "attachments": [...]}), which Slack incoming webhooks, Mattermost,
-- Rocket.Chat and Discord's /slack endpoints take. ev: the event (nil: a
-- test message from job on node).
function M.webhook_body(ev, job, node, note)
  local text, attachments
  if not ev then
    text = format("baton: test message from %s on node %s", job, node)
  else
    text = format("baton: job %s %s (run %s, node %s, attempt %s)",
      ev.job, ev.state, ev.id, tostring(ev.node), tostring(ev.attempt))
    local detail = (ev.output_tail and ev.output_tail ~= "") and ev.output_tail or ev.error
    local fields = {
      { title = "error", value = ev.error or "-", short = false },
      { title = "scheduled", value = when(ev.fire or 0), short = true },
      { title = "node", value = tostring(ev.node), short = true },
    }
    if note then fields[#fields + 1] = { title = "delayed", value = note, short = false } end
    attachments = { {
      color = ev.state == "succeeded" and "good" or "danger",
      title = ev.job .. " " .. ev.state,
      text = detail and ("```\n" .. detail .. "\n```") or nil,
      fields = fields,
      footer = "baton",
    } }
  end
  return json.encode { text = text, attachments = attachments }
end

-- The message handed to sendmail -t: headers (values on one line: the
-- addresses were checked, job names and states have no line ends), a
-- blank line, a plain-text body with the error and the output's tail.
function M.mail_message(ch, ev, job, node, note)
  local function oneline(s) return (tostring(s):gsub("[\r\n]+", " ")) end
  local subject, body
  if not ev then
    subject = "[baton] test message from " .. job
    body = "A test message from " .. job .. " on node " .. node .. ".\n"
  else
    subject = format("[baton] %s %s", ev.job, ev.state)
    local lines = {
      format("Job %s %s.", ev.job, ev.state),
      "",
      "run:       " .. tostring(ev.id),
      "scheduled: " .. when(ev.fire or 0),
      "node:      " .. tostring(ev.node),
      "attempt:   " .. tostring(ev.attempt),
      "error:     " .. tostring(ev.error or "-"),
    }
    if note then lines[#lines + 1] = "note:      " .. note end
    for _, l in ipairs {
      "",
      "Output (tail):",
      (ev.output_tail and ev.output_tail ~= "") and ev.output_tail or "(none kept)",
      "",
      "baton job history " .. ev.job,
    } do lines[#lines + 1] = l end
    body = concat(lines, "\n") .. "\n"
  end
  return concat({
    "From: " .. oneline(ch.from or ("baton@" .. node)),
    "To: " .. oneline(ch.to),
    "Subject: " .. oneline(subject),
    "MIME-Version: 1.0",
    "Content-Type: text/plain; charset=utf-8",
    "Auto-Submitted: auto-generated",
    "",
    body,
  }, "\n") -- (sendmail takes local line ends and writes CRLF on the wire)
end

---------------------------------------------------------------------------
-- delivery (in a run)

-- text with url written as its scheme and host alone ("https://hooks.slack.com/..."):
-- a webhook's URL holds its token in its path, and an error is kept in
-- run records, the outbox and the node's log.
function M.elide(text, url)
  local short = url:match("^(%a+://[^/?#]+)") or "the URL"
  local s, e = text:find(url, 1, true)
  while s do
    text = text:sub(1, s - 1) .. short .. "/..." .. text:sub(e + 1)
    s, e = text:find(url, s + #short + 4, true)
  end
  return text
end

-- Sends the message of ev (nil: a test message) through channel ch, from a
-- run of job on node; secrets: the run's ctx.secrets. true, or nil, why.
function M.deliver(ch, ev, job, node, secrets, note)
  if ch.type == "webhook" then
    local url = ch.url
    if ch.url_secret then
      url = secrets and secrets[ch.url_secret]
      if not url then
        return nil, format("channel %s: its url_secret %s is not one of the job's secrets "
          .. "(add secrets = {%q} to job %s)", ch.name, ch.url_secret, ch.url_secret, job)
      end
      if check_url(url) then
        return nil, format("channel %s: the secret %s is not an http:// or https:// URL", ch.name, ch.url_secret)
      end
    end
    local r, err = baton.http {
      method = "POST", url = url, timeout = ch.timeout or M.WEBHOOK_TIMEOUT,
      headers = { ["Content-Type"] = "application/json" },
      body = M.webhook_body(ev, job, node, note),
    }
    if not r then return nil, format("channel %s: webhook: %s", ch.name, M.elide(tostring(err), url)) end
    if r.status < 200 or r.status > 299 then
      return nil, format("channel %s: the webhook answered %d: %s", ch.name, r.status,
        tostring(r.body):sub(1, 200):gsub("%s+", " "))
    end
    return true
  end
  local r, err = baton.exec { os.getenv("BATON_SENDMAIL") or "sendmail", "-t", "-i",
                              stdin = M.mail_message(ch, ev, job, node, note), timeout = 50 }
  if not r then return nil, format("channel %s: sendmail: %s", ch.name, tostring(err)) end
  if r.code ~= 0 then
    return nil, format("channel %s: sendmail exited %s: %s", ch.name, tostring(r.code or r.signal),
      tostring(r.stderr):sub(1, 500))
  end
  return true
end

-- The id of the event run ctx is an attempt of: the key of its running/
-- marker that names its event ("<end time>~<job>~<id>~<state>", baton.events;
-- the end time as ctx.fire says it may differ in its last millisecond
-- from the one in the id, since a number's JSON text is rounded).
local function run_id(e, P, ctx, ev)
  local events = require "baton.events"
  local guess = events.id(ctx.fire, ev.job, ev.id, ev.state)
  local tail = guess:match("^[^~]*(~.*)$")
  local r = e:get(keys.dir(P, "running", ctx.job), { prefix = true, keys_only = true })
  for _, kv in ipairs(r and r.kvs or {}) do
    local _, id = keys.split(P, "running", kv.key)
    if id:sub(-#tail) == tail then return id end
  end
  return guess
end

local function decode_entry(kv)
  local ok, v = pcall(json.decode, kv and kv.value or "")
  return ok and type(v) == "table" and v or nil
end

-- Deletes key (if at mod revision mod, when given), trying a few times.
local function remove(e, key, mod)
  for _ = 1, 3 do
    local r = mod and e:txn { compare = { { key = key, target = "mod", op = "==", value = mod } },
                              success = { { delete = { key = key } } } }
      or e:delete(key)
    if r then return end
    baton.sleep(0.5)
  end
end

local LIVE = { running = true, retrying = true }

-- Sends what runs of ctx.job left in the outbox (not own_id), oldest
-- first, while it works and time is left. Returns the number sent, the
-- number of those it could not send (of the first DRAIN_MAX entries), and
-- the error that stopped it (nil when none).
local function drain(e, P, ctx, ch, own_id)
  local base = keys.dir(P, "notify", "outbox", ctx.job)
  local r, err = e:get(base, { prefix = true, limit = M.DRAIN_MAX })
  if not r then return 0, nil, err end
  local kvs = {}
  for _, kv in ipairs(r.kvs) do
    if keys.under(base, kv.key) ~= own_id then kvs[#kvs + 1] = kv end
  end
  if #kvs == 0 then return 0, 0 end
  -- Their runs' records: an entry whose run still tries is that run's.
  local states = {}
  for i = 1, #kvs, 64 do
    local ops = {}
    for k = i, math.min(i + 63, #kvs) do
      ops[#ops + 1] = { get = { key = keys.key(P, "runs", ctx.job, keys.under(base, kvs[k].key)) } }
    end
    local g, gerr = e:txn { success = ops }
    if not g then return 0, #kvs, gerr end
    for k = i, math.min(i + 63, #kvs) do
      local rec = decode_entry(g.responses[k - i + 1].kvs[1])
      states[k] = rec and rec.state
    end
  end
  local sent, left, failed = 0, 0, nil
  local limit = ch.timeout or 50
  for k, kv in ipairs(kvs) do
    local entry = decode_entry(kv)
    local now = baton.now()
    local claimed = entry and type(entry.draining) == "table" and (tonumber(entry.draining["until"]) or 0) > now
    if entry and type(entry.event) == "table" and entry.channel == ch.name and not LIVE[states[k] or ""]
       and not claimed then
      left = left + 1
      if failed or ctx:cancelled() or (ctx.deadline and now + limit + 5 > ctx.deadline) then
        goto continue
      end
      entry.draining = { by = ctx.node, ["until"] = now + limit + M.CLAIM_SLACK }
      local c = e:txn { compare = { { key = kv.key, target = "mod", op = "==", value = kv.mod_revision } },
                        success = { { put = { key = kv.key, value = json.encode(entry) } } } }
      if c and c.succeeded then
        local note = late_note(entry)
        local ok, derr = M.deliver(ch, entry.event, ctx.job, ctx.node, ctx.secrets, note)
        if ok then
          remove(e, kv.key, c.revision)
          sent, left = sent + 1, left - 1
          ctx.log.info("notification sent late", { channel = ch.name, run = entry.run,
            event_job = type(entry.event) == "table" and entry.event.job or nil, attempts = entry.attempts })
        else
          entry.draining, entry.attempts = nil, (tonumber(entry.attempts) or 0) + 1
          entry.error, entry.at, entry.node = derr, baton.now(), ctx.node
          e:txn { compare = { { key = kv.key, target = "mod", op = "==", value = c.revision } },
                  success = { { put = { key = kv.key, value = json.encode(entry) } } } }
          failed = derr
        end
      end
    end
    ::continue::
  end
  return sent, left, failed
end

-- The run of a notifier job (see the top of this file): ctx.params.channel
-- names its channel in P config/notify. Returns true, or nil and why.
function M.run(ctx)
  local e, P = baton.etcd, util.prefix()
  local name = (ctx.params and ctx.params.channel) or "webhook"
  local ev = ctx.event
  local cfg, cerr = M.read(e, P)
  local ch, why
  if cfg then ch, why = M.channel(cfg, name) else why = cerr end
  -- An event's own entry: there when an earlier attempt failed.
  local key, id, entry
  if ev then
    id = run_id(e, P, ctx, ev)
    key = keys.key(P, "notify", "outbox", ctx.job, id)
    local g = e:get(key)
    entry = g and decode_entry(g.kvs[1])
  end
  if not ev and (ctx.attempt or 1) > 1 then
    -- A test message is tried once: a retry of a run by hand sends only
    -- what is kept.
    if ch then drain(e, P, ctx, ch, nil) end
    ctx.log.info("a test message is not sent again by a retry", { channel = name })
    return true
  end
  local ok, err = nil, why
  if ch then ok, err = M.deliver(ch, ev, ctx.job, ctx.node, ctx.secrets, late_note(entry)) end
  if not ok then
    if not ev then return nil, err end
    local now = baton.now()
    entry = entry or {}
    local kept = {
      job = ctx.job, run = id, channel = name, event = ev,
      since = tonumber(entry.since) or now, attempts = (tonumber(entry.attempts) or 0) + 1,
      error = err, at = now, node = ctx.node,
    }
    local w, werr = e:put(key, json.encode(kept))
    ctx.log.warn("notification not delivered", { channel = name, event_job = ev.job, event_state = ev.state,
      attempt = ctx.attempt, error = err, kept = w and key or nil })
    if not w then return nil, format("%s; and it could not be kept in %s: %s", err, key, tostring(werr)) end
    return nil, format("not delivered (kept in %s, sent again by the next attempt or run): %s", key, err)
  end
  if entry then remove(e, key) end
  ctx.log.info(ev and "notified" or "test message sent", { channel = name, type = ch.type,
    event_job = ev and ev.job or nil, state = ev and ev.state or nil })
  local sent, left, derr = drain(e, P, ctx, ch, id)
  if derr or (left and left > 0) then
    ctx.log.warn("notifications still not delivered", { channel = name, sent = sent, left = left,
      error = derr })
  end
  return true
end

---------------------------------------------------------------------------
-- the outbox, for metrics and the CLI

-- The number of notifications in the outbox by notifier job ({[job] =
-- n}) and in all, or nil, err. Reads keys only (at most COUNT_LIMIT of
-- them; the total is exact beyond).
function M.pending_counts(e, P)
  local base = keys.dir(P, "notify", "outbox")
  local r, err = e:get(base, { prefix = true, keys_only = true, limit = M.COUNT_LIMIT })
  if not r then return nil, err end
  local counts = {}
  for _, kv in ipairs(r.kvs) do
    local job = keys.under(base, kv.key):match("^([^/]+)/")
    if job then counts[job] = (counts[job] or 0) + 1 end
  end
  return counts, r.count or #r.kvs
end

-- The outbox's entries (at most limit), oldest first per job:
-- {{job, run, channel, since, attempts, error, at, node, event_job,
-- event_state, key}, ...}, the total, or nil, err, code.
function M.pending(e, P, limit)
  local base = keys.dir(P, "notify", "outbox")
  local r, err, code = e:get(base, { prefix = true, limit = limit or 1000 })
  if not r then return nil, err, code end
  local list = {}
  for _, kv in ipairs(r.kvs) do
    local job, run = keys.under(base, kv.key):match("^([^/]+)/(.+)$")
    local v = decode_entry(kv) or {}
    local ev = type(v.event) == "table" and v.event or {}
    list[#list + 1] = { key = kv.key, job = job, run = run, channel = v.channel, since = v.since,
                        attempts = v.attempts, error = v.error, at = v.at, node = v.node,
                        event_job = ev.job, event_state = ev.state }
  end
  return list, r.count or #list
end

---------------------------------------------------------------------------
-- changing the configuration (baton notify set / unset)

-- A CHANNEL.FIELD path: channel, field (nil for the channel alone); or
-- nil, why.
function M.parse_path(path, need_field)
  local name, field = tostring(path):match("^([^.]+)%.([^.]+)$")
  if not name then name = tostring(path):match("^([^.]+)$") end
  if not name or not name:find(CHANNEL_NAME) then
    return nil, format("%q is not CHANNEL.SETTING (webhook.url, mail.to, ...)", tostring(path))
  end
  if need_field and not field then
    return nil, format("%q names no setting: CHANNEL.SETTING (%s.url, %s.to, ...)", path, name, name)
  end
  if field then
    local known = false
    for _, f in ipairs(ALL_FIELDS) do known = known or f == field end
    if not known then
      local hint = require("baton.job").did_you_mean(field, ALL_FIELDS)
      return nil, format("unknown setting %q (settings: %s)%s", field, concat(ALL_FIELDS, ", "),
        hint and format(" (did you mean %s?)", hint) or "")
    end
  end
  return name, field
end

-- Applies change(cfg) (which edits cfg in place, or returns nil, why) to
-- the stored configuration, checks the result and stores it only if
-- P config/notify is still as read (else reads again, 5 times). An empty
-- configuration deletes the key. Returns {config, revision, key} or nil,
-- err, code.
function M.update(e, P, change)
  local key = keys.key(P, "config", "notify")
  for _ = 1, 5 do
    local r, err, code = e:get(key)
    if not r then return nil, err, code end
    local kv = r.kvs[1]
    local cfg = {}
    if kv then
      local ok, v = pcall(json.decode, kv.value)
      -- (a stored value that is not an object is replaced, not merged)
      if ok and type(v) == "table" and v[1] == nil then cfg = v end
    end
    local ok, why = change(cfg)
    if not ok then return nil, "EINVAL: " .. why, "EINVAL" end
    local good, cerr = M.check(cfg)
    if not good then return nil, cerr .. "; nothing was stored", "EINVAL" end
    local empty = next(cfg) == nil
    local t, terr, tcode = e:txn {
      compare = { kv and { key = key, target = "mod", op = "==", value = kv.mod_revision }
                  or { key = key, target = "create", op = "==", value = 0 } },
      success = { empty and { delete = { key = key } } or { put = { key = key, value = json.encode(cfg) } } },
    }
    if not t then return nil, terr, tcode end
    if t.succeeded then return { config = cfg, revision = t.revision, key = key } end
  end
  return nil, "ECONFLICT: " .. key .. " kept changing; nothing was stored", "ECONFLICT"
end

-- The edit of `baton notify set CHANNEL.FIELD VALUE`: value as the field
-- takes it (timeout: a number). url and url_secret replace each other.
function M.setter(name, field, value)
  return function(cfg)
    local v = value
    if field == "timeout" then
      v = tonumber(value)
      if not v then return nil, format("%s.timeout: %q is not a number of seconds", name, value) end
    end
    if v == "" then return nil, format("%s.%s: empty value (baton notify unset %s.%s removes it)", name, field,
      name, field) end
    local ch = type(cfg[name]) == "table" and cfg[name] or {}
    cfg[name] = ch
    ch[field] = v
    if field == "url" then ch.url_secret = nil elseif field == "url_secret" then ch.url = nil end
    return true
  end
end

-- The edit of `baton notify unset CHANNEL[.FIELD]`.
function M.unsetter(name, field)
  return function(cfg)
    if cfg[name] == nil or (field and (type(cfg[name]) ~= "table" or cfg[name][field] == nil)) then
      return nil, format("%s is not set", field and (name .. "." .. field) or ("channel " .. name))
    end
    if field then cfg[name][field] = nil else cfg[name] = nil end
    return true
  end
end

-- A channel's settings as one line: "url=https://... timeout=10".
function M.settings_text(name, ch)
  local parts = {}
  for _, f in ipairs(FIELDS[type_of(name, ch)] or ALL_FIELDS) do
    if f ~= "type" and ch[f] ~= nil then parts[#parts + 1] = f .. "=" .. tostring(ch[f]) end
  end
  return concat(parts, " ")
end
M.type_of = type_of

---------------------------------------------------------------------------
-- baton job put

-- Warnings for a put of job name (its loaded spec): a notifier whose
-- channel P config/notify does not set (nothing could deliver its
-- messages), or names a secret the job does not declare. A list of
-- strings ({} when all is well or etcd cannot say).
function M.put_warnings(name, spec, e, P)
  if not M.is_notifier(spec) then return {} end
  e, P = e or baton.etcd, P or util.prefix()
  local chname = spec.params.channel
  local cfg, err = M.read(e, P)
  if not cfg then
    if err and err:find("^EINVAL") then
      return { format("job %s sends to channel %s, and %s; nothing can deliver its messages until it is fixed "
        .. "(baton notify show)", name, chname, err:gsub("^EINVAL: ", "")) }
    end
    return {}
  end
  local ch = cfg[chname]
  if not ch then
    local old = (chname == "mail" and "BATON_MAIL_TO") or (chname == "webhook" and "BATON_WEBHOOK_URL")
    return { format("job %s sends to channel %s, which is not set in %s%s: nothing can deliver its messages "
      .. "(they wait in %s%s/) until `baton notify set %s`%s", name, chname, keys.key(P, "config", "notify"),
      next(cfg) and (" (channels: " .. concat(util.sorted_keys(cfg), ", ") .. ")") or "",
      keys.dir(P, "notify", "outbox"), name,
      chname == "mail" and "mail.to ADDRESS" or
        (chname == "webhook" and "webhook.url URL" or (chname .. ".type webhook " .. chname .. ".url URL")),
      old and format(" (nodes with %s in their environment can still send them, the old way)", old) or "") }
  end
  local bad = check_channel(chname, ch)
  if bad then
    return { format("job %s sends to channel %s, which %s holds wrong (%s): nothing can deliver its messages "
      .. "until it is fixed (baton notify set)", name, chname, keys.key(P, "config", "notify"), bad) }
  end
  if ch.url_secret then
    local declared = false
    for _, s in ipairs(spec.secrets or {}) do declared = declared or s == ch.url_secret end
    if not declared then
      return { format("channel %s takes its URL from the secret %s, which job %s does not declare: "
        .. "nothing can deliver its messages until the job has secrets = {%q}", chname, ch.url_secret, name,
        ch.url_secret) }
    end
  end
  return {}
end

return M
