-- Bounded calls of untrusted Lua (job files at load time, policy
-- decisions), shared by baton.job and baton.policy.
local sethook, gethook, getinfo = debug.sethook, debug.gethook, debug.getinfo
local pcall, select, unpack = pcall, select, unpack

local M = {}

-- What a call that ran out of budget raised; callers compare against it.
M.BUDGET_MSG = "\0baton: instruction budget exceeded"

local HOOK_EVERY = 1000

-- Calls fn(...) under a bound of `budget` Lua instructions, from inside a C
-- call (string.gsub's callback) so that a waiting call such as baton.sleep
-- raises instead of suspending the caller. Once the bound is passed, every
-- instruction of code from fn's file raises, so a pcall loop inside it
-- cannot swallow the error and go on; library code it called is left to
-- return. Compiled loops do not run count hooks: the caller turns the JIT
-- off for the code it does not trust. Returns pcall's status and up to one
-- result.
function M.bounded(budget, fn, ...)
  local old_hook, old_mask, old_count = gethook()
  local left = budget
  local source = getinfo(fn, "S").source
  local function hook()
    if left > 0 then
      left = left - HOOK_EVERY
      if left > 0 then return end
      sethook(hook, "", 1)
    end
    local info = getinfo(2, "S")
    if info and info.source == source then error(M.BUDGET_MSG, 0) end
  end
  local n, args = select("#", ...), { ... }
  local ok, res
  sethook(hook, "", HOOK_EVERY)
  local cok, cerr = pcall(string.gsub, "x", "x", function()
    ok, res = pcall(fn, unpack(args, 1, n))
    return ""
  end)
  sethook(old_hook, old_mask or "", old_count or 0)
  if not cok then return false, cerr end
  return ok, res
end

return M
