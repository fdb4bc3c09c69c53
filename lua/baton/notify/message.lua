-- A notification's message (docs/guide.md, "Alerting"): a webhook's
-- Slack-compatible JSON body or a mail, the note of a message sent late,
-- and its delivery through one channel from inside a notifier's run.
local baton = require "baton"
local C = require "baton.notify.config"

local json = baton.json
local format, concat, floor = string.format, table.concat, math.floor

local M = {}

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
      if C.check_url(url) then
        return nil, format("channel %s: the secret %s is not an http:// or https:// URL", ch.name, ch.url_secret)
      end
    end
    local r, err = baton.http {
      method = "POST", url = url, timeout = ch.timeout or C.WEBHOOK_TIMEOUT,
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

M.late_note = late_note
return M
