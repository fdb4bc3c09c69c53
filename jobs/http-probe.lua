-- http-probe: an HTTP health check every 30 seconds.
--
-- GETs PROBE_URL (default http://127.0.0.1:8080/healthz) with a 5 s
-- timeout. A transport error or a status other than 2xx fails the run (so it
-- shows as failed in `baton job history http-probe`); the outcome and the
-- latency go to the log. Probes never overlap (concurrency "forbid"), and
-- missed probes are not replayed (misfire "skip"): only the current state
-- matters.
--
--   baton job put jobs/http-probe.lua
return {
  description = "GET PROBE_URL every 30 s; fail on errors and non-2xx",
  schedule = "@every 30s",
  timeout = 10,
  concurrency = "forbid",
  misfire = "skip",
  on_node_loss = "abandon",

  run = function(ctx)
    local url = os.getenv("PROBE_URL") or "http://127.0.0.1:8080/healthz"
    local t0 = baton.monotime()
    local r, err = baton.http { url = url, timeout = 5 }
    local ms = math.floor((baton.monotime() - t0) * 1000)
    if not r then
      ctx.log.error("probe failed", { url = url, err = err, ms = ms })
      error(err)
    end
    if r.status < 200 or r.status > 299 then
      ctx.log.error("probe unhealthy", { url = url, status = r.status, ms = ms })
      error(("%s answered %d"):format(url, r.status))
    end
    ctx.log.info("probe ok", { url = url, status = r.status, ms = ms })
  end,
}
