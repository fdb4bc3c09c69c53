-- pg-backup: a nightly PostgreSQL dump, once per night across the cluster.
--
-- Runs pg_dump at 02:00 Shanghai time on one node with label role=db-backup,
-- writes /var/backups/postgres/<db>-<instant>.dump and records the file's
-- path and size under <prefix>backups/<db>/latest with ctx:put_fenced, so a
-- node that lost its claim cannot overwrite a newer record.
-- Settings come from the environment of the node: PGHOST, PGUSER,
-- PGPASSWORD (or ~/.pgpass), BACKUP_DB (default "app"), BACKUP_DIR.
-- (A run, not a command job, for that fenced record: a plain dump needs no
-- Lua, `command = {"pg_dump", "-Fc", "-f", PATH, "app"}`, docs/jobs.md.)
--
--   baton check jobs/pg-backup.lua && baton job put jobs/pg-backup.lua
return {
  description = "nightly pg_dump of the application database",
  schedule = "0 2 * * *",
  timezone = "Asia/Shanghai",
  timeout = 2 * 3600,
  concurrency = "forbid",   -- never two dumps at once
  misfire = "run_once",     -- after an outage, one catch-up dump
  starting_deadline = 6 * 3600,
  retry = { attempts = 2, backoff = 60, max_backoff = 600, jitter = 0.2 },
  on_node_loss = "rerun",
  labels = { role = "db-backup" },

  run = function(ctx)
    local db = os.getenv("BACKUP_DB") or "app"
    local dir = os.getenv("BACKUP_DIR") or "/var/backups/postgres"
    local stamp = os.date("!%Y%m%dT%H%M%SZ", ctx.fire)
    local path = ("%s/%s-%s.dump"):format(dir, db, stamp)
    -- check = true: a non-zero exit fails the run, with the end of stderr
    assert(baton.exec { "pg_dump", "-Fc", "-f", path, db, timeout = 2 * 3600 - 60, check = true })
    local st = assert(baton.exec { "stat", "-c", "%s", path })
    local size = tonumber(st.stdout) or 0
    ctx.log.info("backup done", { path = path, bytes = size })
    assert(ctx:put_fenced(baton.config.prefix .. "backups/" .. db .. "/latest",
      baton.json.encode { path = path, bytes = size, fire = ctx.fire, node = ctx.node }))
  end,
}
