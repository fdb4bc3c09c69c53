-- none: never retry, whatever the job's retry table says. A failed run
-- stays failed; the next instant runs as scheduled.
local M = {}

M.description = "never retry"

function M.retry_delay(job, run, err)
  return nil
end

function M.selftest()
  local job = { name = "sample", retry = { attempts = 3, backoff = 10 } }
  for attempt = 1, 3 do assert(M.retry_delay(job, { attempt = attempt }, "boom") == nil, "never") end
  return { "retry after attempts 1, 2, 3: give up" }
end

return M
