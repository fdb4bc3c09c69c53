-- baton eval tests/chaos/beat.lua LOG JOB ID NODE ATTEMPT FENCE INTERVAL SECS
-- A job's child process in the nemesis suite: appends a beat line for the
-- attempt (same fields as the job's own lines, kind = "beat", child = true)
-- every INTERVAL seconds for SECS seconds, then exits. Under the node's
-- libfaketime its wall clock is skewed like the node's, but baton.monotime()
-- is not (FAKETIME_DONT_FAKE_MONOTONIC), so its lines line up with the rest.
local log, job, id, node, attempt, fence, interval, secs = ...
local f = io.open("/proc/self/stat")
local pid = tonumber(f:read("*l"):match("^%d+"))
f:close()
local line = { job = job, id = id, node = node, attempt = tonumber(attempt), fence = tonumber(fence),
               pid = pid, kind = "beat", child = true }
local deadline = baton.monotime() + tonumber(secs)
while baton.monotime() < deadline do
  line.mono, line.wall = baton.monotime(), baton.now()
  local out = assert(io.open(log, "a"))
  out:write(baton.json.encode(line) .. "\n")
  out:close()
  baton.sleep(tonumber(interval))
end
