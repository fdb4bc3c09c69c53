-- notify-webhook: posts every final failure (and abandoned run) of any job
-- to a chat webhook, once per event across the cluster.
--
-- The message is Slack-compatible JSON ({"text": ..., "attachments": [...]}),
-- which Slack incoming webhooks, Mattermost, Rocket.Chat and Discord's
-- /slack endpoints accept. The URL comes from the node's environment, never
-- from etcd: set BATON_WEBHOOK_URL for `baton node` (for example in the
-- systemd unit's EnvironmentFile). A node without it fails the run with
-- that reason, and the retry may land on a node that has it.
--
-- "*" means every job but this one and the other event jobs (a failing
-- notifier does not notify about itself). Name jobs instead of "*" to
-- narrow it, or add states: succeeded, failed, skipped, abandoned, killed.
-- Run it by hand to check the hook: `baton job run notify-webhook` posts a
-- test message.
--
--   baton check jobs/notify-webhook.lua && baton job put jobs/notify-webhook.lua
return {
  description = "post failed and abandoned runs to BATON_WEBHOOK_URL (Slack-compatible)",
  on = { failed = { "*" }, abandoned = { "*" } },
  timeout = 60,
  retry = { attempts = 3, backoff = 5, max_backoff = 60 },
  misfire = "run_all",            -- after an outage, every missed event is still posted...
  starting_deadline = 6 * 3600,   -- ...unless it is older than 6 hours (then recorded skipped)
  on_node_loss = "rerun",         -- a duplicate message is better than a lost one

  run = function(ctx)
    local url = os.getenv("BATON_WEBHOOK_URL")
    if not url or url == "" then
      return nil, "BATON_WEBHOOK_URL is not set in the environment of node " .. ctx.node
    end
    local ev = ctx.event
    local text, attachments
    if not ev then
      text = ("baton: test message from notify-webhook on node %s"):format(ctx.node)
    else
      local when = os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(ev.fire or ctx.fire))
      text = ("baton: job %s %s (run %s, node %s, attempt %s)"):format(
        ev.job, ev.state, ev.id, tostring(ev.node), tostring(ev.attempt))
      local detail = ev.output_tail ~= "" and ev.output_tail or ev.error
      attachments = { {
        color = ev.state == "succeeded" and "good" or "danger",
        title = ev.job .. " " .. ev.state,
        text = detail and ("```\n" .. detail .. "\n```") or nil,
        fields = {
          { title = "error", value = ev.error or "-", short = false },
          { title = "scheduled", value = when, short = true },
          { title = "node", value = tostring(ev.node), short = true },
        },
        footer = "baton",
      } }
    end
    local r, err = baton.http {
      method = "POST", url = url, timeout = 15,
      headers = { ["Content-Type"] = "application/json" },
      body = baton.json.encode { text = text, attachments = attachments },
    }
    if not r then return nil, "webhook: " .. err end
    if r.status < 200 or r.status > 299 then
      return nil, ("webhook answered %d: %s"):format(r.status, r.body:sub(1, 200))
    end
    ctx.log.info("notified", { event_job = ev and ev.job, state = ev and ev.state, status = r.status })
  end,
}
