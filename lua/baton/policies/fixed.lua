-- fixed: retry a failed run after the job's retry.backoff seconds, every
-- time, up to retry.attempts more attempts. No growth, no jitter.
local M = {}

M.description = "retry after retry.backoff seconds each time, up to retry.attempts"

function M.retry_delay(job, run, err)
  local r = job.retry or {}
  if (run.attempt or 1) > (r.attempts or 0) then return nil end
  return r.backoff or 10
end

function M.selftest()
  local job = { name = "sample", retry = { attempts = 3, backoff = 10, max_backoff = 300, jitter = 0.2 } }
  local lines = {}
  for attempt = 1, 4 do
    local d = M.retry_delay(job, { attempt = attempt }, "boom")
    assert(d == (attempt <= 3 and 10 or nil), "10 s three times, then give up")
    lines[#lines + 1] = "retry after attempt " .. attempt .. ": " .. (d and d .. "s" or "give up")
  end
  return lines
end

return M
