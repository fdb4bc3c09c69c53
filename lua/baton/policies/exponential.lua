-- exponential: retry after backoff * 2^(n-1) seconds following the n-th
-- attempt, at most max_backoff, randomised by +/- jitter (all from the
-- job's retry table), up to retry.attempts more attempts. This is the
-- default's curve, as a module of its own; .with{factor = 3} changes the
-- growth factor.
local M

local function make(factor)
  local P = {}
  P.description = "retry after backoff * " .. factor .. "^(n-1) s, capped at max_backoff, +/- jitter"

  function P.retry_delay(job, run, err)
    local r = job.retry or {}
    local attempt = run.attempt or 1
    if attempt > (r.attempts or 0) then return nil end
    local d = (r.backoff or 10) * factor ^ (attempt - 1)
    if r.max_backoff and d > r.max_backoff then d = r.max_backoff end
    local j = r.jitter or 0
    if j > 0 then d = d * (1 - j + 2 * j * math.random()) end
    return d
  end

  function P.selftest()
    local job = { name = "sample", retry = { attempts = 5, backoff = 10, max_backoff = 60, jitter = 0.2 } }
    local lines = {}
    for attempt = 1, 6 do
      local d = P.retry_delay(job, { attempt = attempt }, "boom")
      if attempt <= 5 then
        local want = math.min(10 * factor ^ (attempt - 1), 60)
        assert(d >= want * 0.8 - 1e-9 and d <= want * 1.2 + 1e-9, "within 20 % of " .. want)
        lines[#lines + 1] = ("retry after attempt %d: %.1fs (curve %gs)"):format(attempt, d, want)
      else
        assert(d == nil, "gives up after retry.attempts")
        lines[#lines + 1] = "retry after attempt " .. attempt .. ": give up"
      end
    end
    return lines
  end
  return P
end

M = make(2)
function M.with(opts)
  if type(opts) ~= "table" or type(opts.factor) ~= "number" or opts.factor < 1 then
    error("exponential.with expects {factor = number >= 1}", 2)
  end
  return make(opts.factor)
end

return M
