-- notify-webhook: posts every final failure (and abandoned run) of any job
-- to a chat webhook, once per event across the cluster, and never drops one.
--
-- The message is Slack-compatible JSON ({"text": ..., "attachments": [...]}),
-- which Slack incoming webhooks, Mattermost, Rocket.Chat and Discord's
-- /slack endpoints accept. The URL is read from etcd at each run, so a
-- change reaches every node at once, with no restart:
--
--   baton notify set webhook.url https://hooks.slack.com/services/T0000/B0000/XXXXXXXX
--
-- (or, to keep the URL out of etcd, a node secret: `baton notify set
-- webhook.url_secret SLACK_URL` and secrets = {"SLACK_URL"} below; see
-- docs/guide.md, "Alerting"). `channel` below names the channel of
-- `baton notify`; a copy of this file with another channel sends elsewhere.
--
-- A message that cannot be sent is kept (P notify/outbox/notify-webhook/),
-- with a warning in the node's log, and counted in every node's /metrics
-- (baton_notifications_pending); the retries below send it again for about
-- 7 hours, from whichever node takes them, and after that the next run
-- of this job does (the next failure, or `baton job run notify-webhook`).
--
-- "*" means every job but this one and the other event jobs (a failing
-- notifier does not notify about itself). Name jobs instead of "*" to
-- narrow it, or add states: succeeded, failed, skipped, abandoned, killed.
-- Run it by hand to check the hook: `baton job run notify-webhook` posts a
-- test message (and whatever is kept).
--
--   baton check jobs/notify-webhook.lua && baton job put jobs/notify-webhook.lua
return {
  description = "post failed and abandoned runs to the webhook of `baton notify` (Slack-compatible)",
  on = { failed = { "*" }, abandoned = { "*" } },
  params = { channel = "webhook" },
  timeout = 60,
  -- 10 s, 20 s, ... then every 10 minutes: 50 attempts, about 7.5 hours
  retry = { attempts = 50, backoff = 10, max_backoff = 600, jitter = 0.2 },
  misfire = "run_all",            -- after an outage, every missed event is still posted
  on_node_loss = "rerun",         -- a duplicate message is better than a lost one

  run = function(ctx)
    return require("baton.notify").run(ctx)
  end,
}
