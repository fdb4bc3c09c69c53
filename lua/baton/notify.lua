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
local C = require "baton.notify.config"
local msg = require "baton.notify.message"
local S = require "baton.notify.settings"

local json = baton.json
local format, concat = string.format, table.concat
local check_channel, late_note = C.check_channel, msg.late_note

local M = {}
for _, part in ipairs { C, msg, S } do
  for k, v in pairs(part) do M[k] = v end
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
        local ok, derr = msg.deliver(ch, entry.event, ctx.job, ctx.node, ctx.secrets, note)
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
  if ch then ok, err = msg.deliver(ch, ev, ctx.job, ctx.node, ctx.secrets, late_note(entry)) end
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
