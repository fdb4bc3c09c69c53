-- notify-mail: mails every final failure (and abandoned run) of any job,
-- once per event across the cluster, through the system's sendmail, and
-- never drops one.
--
-- The recipients are read from etcd at each run, so a change reaches every
-- node at once, with no restart:
--
--   baton notify set mail.to "ops@example.com, dba@example.com"
--   baton notify set mail.from baton@example.com      # default baton@<node>
--
-- The mail goes through the sendmail of the node that runs the job (any
-- MTA's sendmail interface works, e.g. postfix, exim, msmtp, nullmailer):
-- BATON_SENDMAIL in the node's environment, default "sendmail" (a program
-- to run is never taken from etcd). A node without one fails the attempt,
-- and the retry may land on a node that has it. The message is plain
-- text: the event, the error and the tail of the run's output.
--
-- A message that cannot be sent is kept (P notify/outbox/notify-mail/),
-- with a warning in the node's log, and counted in every node's /metrics
-- (baton_notifications_pending); the retries below send it again for about
-- 7 hours, and after that the next run of this job does.
--
-- "*" means every job but this one and the other event jobs. `baton job
-- run notify-mail` sends a test message (and whatever is kept).
--
--   baton check jobs/notify-mail.lua && baton job put jobs/notify-mail.lua
return {
  description = "mail failed and abandoned runs to the recipients of `baton notify` through sendmail",
  on = { failed = { "*" }, abandoned = { "*" } },
  params = { channel = "mail" },
  timeout = 60,
  retry = { attempts = 50, backoff = 10, max_backoff = 600, jitter = 0.2 },
  misfire = "run_all",
  on_node_loss = "rerun",

  run = function(ctx)
    return require("baton.notify").run(ctx)
  end,
}
