-- notify-mail: mails every final failure (and abandoned run) of any job,
-- once per event across the cluster, through the system's sendmail.
--
-- Settings come from the node's environment: BATON_MAIL_TO (required, one
-- or more addresses separated by commas), BATON_MAIL_FROM (default
-- baton@<node>), BATON_SENDMAIL (default "sendmail": any MTA's sendmail
-- interface works, e.g. postfix, exim, msmtp, nullmailer). The message is
-- plain text: the event, the error and the tail of the run's output.
--
-- "*" means every job but this one and the other event jobs. `baton job
-- run notify-mail` sends a test message.
--
--   baton check jobs/notify-mail.lua && baton job put jobs/notify-mail.lua
return {
  description = "mail failed and abandoned runs to BATON_MAIL_TO through sendmail",
  on = { failed = { "*" }, abandoned = { "*" } },
  timeout = 60,
  retry = { attempts = 3, backoff = 10, max_backoff = 120 },
  misfire = "run_all",
  starting_deadline = 6 * 3600,
  on_node_loss = "rerun",

  run = function(ctx)
    local to = os.getenv("BATON_MAIL_TO")
    if not to or to == "" then
      return nil, "BATON_MAIL_TO is not set in the environment of node " .. ctx.node
    end
    local from = os.getenv("BATON_MAIL_FROM") or ("baton@" .. ctx.node)
    local ev = ctx.event
    -- Header values come from job names, states and the environment; the
    -- error and the output go in the body only.
    local function oneline(s) return (tostring(s):gsub("[\r\n]+", " ")) end
    local subject, body
    if not ev then
      subject = "[baton] test message from notify-mail"
      body = "A test message from notify-mail on node " .. ctx.node .. ".\n"
    else
      subject = ("[baton] %s %s"):format(ev.job, ev.state)
      body = table.concat({
        ("Job %s %s."):format(ev.job, ev.state),
        "",
        "run:       " .. tostring(ev.id),
        "scheduled: " .. os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(ev.fire or ctx.fire)),
        "node:      " .. tostring(ev.node),
        "attempt:   " .. tostring(ev.attempt),
        "error:     " .. tostring(ev.error or "-"),
        "",
        "Output (tail):",
        ev.output_tail ~= "" and ev.output_tail or "(none kept)",
        "",
        "baton job history " .. ev.job,
      }, "\n") .. "\n"
    end
    local msg = table.concat({
      "From: " .. oneline(from),
      "To: " .. oneline(to),
      "Subject: " .. oneline(subject),
      "MIME-Version: 1.0",
      "Content-Type: text/plain; charset=utf-8",
      "Auto-Submitted: auto-generated",
      "",
      body,
    }, "\n") -- (sendmail takes local line ends and writes CRLF on the wire)
    local r, err = baton.exec { os.getenv("BATON_SENDMAIL") or "sendmail", "-t", "-i",
                                stdin = msg, timeout = 50 }
    if not r then return nil, "sendmail: " .. err end
    if r.code ~= 0 then
      return nil, ("sendmail exited %d: %s"):format(r.code, r.stderr:sub(1, 500))
    end
    ctx.log.info("mailed", { to = to, event_job = ev and ev.job, state = ev and ev.state })
  end,
}
