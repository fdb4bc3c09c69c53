-- nightly-backup: the first scenario baton was designed from. Every machine
-- of a cluster carries the same job; each night exactly one of them makes
-- the backup, and if that machine dies in the middle of it, another one
-- makes it again.
--
-- A real nightly backup says schedule = "0 2 * * *" (02:00 every night; see
-- jobs/pg-backup.lua for one that runs pg_dump). This example fires every 5
-- seconds instead ("*/5 * * * * *": six fields, seconds first) so that you
-- can watch a dozen "nights" in a minute; nothing else about the job
-- depends on the schedule.
--
-- The "backup" takes BACKUP_SECONDS (from the node's environment, default
-- 4: longer than the nodes' lease TTL in the examples, so that a node killed
-- in the middle of a backup has lost its claim before the backup would end) and then records itself twice with ctx:put_fenced, which succeeds only
-- while this run still owns its claim:
--   <prefix>backups/latest                       the newest backup
--   <prefix>backups/done/<instant>/<node>-<attempt>   one key per completed backup,
--                                                so that anyone can count them
return {
  description = "a simulated nightly backup (every 5 s for the example)",
  schedule = "*/5 * * * * *",
  timeout = 60,
  concurrency = "forbid",   -- never two backups at once
  misfire = "run_once",     -- after an outage, one catch-up backup
  on_node_loss = "rerun",   -- a backup whose node died is made again elsewhere

  run = function(ctx)
    local P = baton.config.prefix
    if P:sub(-1) ~= "/" then P = P .. "/" end
    local secs = tonumber(os.getenv("BACKUP_SECONDS") or "") or 4
    local instant = os.date("!%Y-%m-%dT%H:%M:%SZ", ctx.fire)
    ctx.log.info("backup started", { seconds = secs })
    local t0 = baton.monotime()
    while baton.monotime() - t0 < secs do
      if ctx:cancelled() then error("cancelled") end
      baton.sleep(0.1)
    end
    local rec = baton.json.encode { instant = instant, node = ctx.node, attempt = ctx.attempt,
                                    fence = ctx.fence, at = baton.now() }
    assert(ctx:put_fenced(P .. "backups/done/" .. instant .. "/" .. ctx.node .. "-" .. ctx.attempt, rec))
    assert(ctx:put_fenced(P .. "backups/latest", rec))
    ctx.log.info("backup written", { key = P .. "backups/latest" })
  end,
}
