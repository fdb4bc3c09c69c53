-- Names: what a valid job, policy or queue name is, and the known name
-- closest to a misspelt one (for "did you mean" hints in every message
-- that rejects a name or a field).
local type, ipairs, huge, byte = type, ipairs, math.huge, string.byte

local M = {}

M.PATTERN = "^[%w][%w_.-]*$"
local NAME_PATTERN = M.PATTERN


-- True if s is a valid job (or policy, queue) name: letters, digits, "_",
-- "." and "-", starting with a letter or a digit.
function M.valid_name(s)
  return type(s) == "string" and #s <= 200 and s:find(NAME_PATTERN) ~= nil
end

-- The edit distance of a and b, a swap of two neighbours counting as one
-- edit ("hsah" is one from "hash"): optimal string alignment.
local function levenshtein(a, b)
  local older, prev, cur = {}, {}, {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    cur[0] = i
    local ca = byte(a, i)
    for j = 1, #b do
      local cost = ca == byte(b, j) and 0 or 1
      local d = prev[j] + 1
      if cur[j - 1] + 1 < d then d = cur[j - 1] + 1 end
      if prev[j - 1] + cost < d then d = prev[j - 1] + cost end
      if i > 1 and j > 1 and ca == byte(b, j - 1) and byte(a, i - 1) == byte(b, j)
         and older[j - 2] + 1 < d then
        d = older[j - 2] + 1
      end
      cur[j] = d
    end
    older, prev, cur = prev, cur, older
  end
  return prev[#b]
end

-- The known name closest to a misspelt one, or nil if none is close.
local function did_you_mean(name, known, aliases)
  if aliases and aliases[name:lower()] then return aliases[name:lower()] end
  local best, best_d = nil, huge
  local limit = #name <= 4 and 1 or 2
  for _, k in ipairs(known) do
    local d = levenshtein(name:lower(), k)
    if d < best_d then best, best_d = k, d end
  end
  if best_d <= limit then return best end
  return nil
end
M.did_you_mean = did_you_mean

return M
