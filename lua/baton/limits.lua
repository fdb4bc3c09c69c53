-- Memory limits of runs (docs/jobs.md, field `memory`; docs/security.md,
-- "Limits"): the size of a job's `memory = "512M"` and of `baton node
-- --run-memory`, and what a run over its limit is recorded with.
--
--   limits.parse("512M")           --> 536870912 | nil, message
--   limits.format(536870912)       --> "512M"
--   limits.oom_error(536870912)    --> "out of memory: ..."
--
-- A run's limit holds for its worker and every process the run starts: in
-- a cgroup of the worker's own where the node may make one (cgroup v2,
-- systemd's Delegate=), else by the worker's containment process, which
-- adds up their resident memory every 50 ms (runtime/core/contain.h).
local M = {}

local floor, format = math.floor, string.format

-- The smallest limit: a worker alone holds about 6 MiB.
M.MIN = 16 * 2^20
-- The largest: 1 PiB (and exact in a double).
M.MAX = 2^50
local UNITS = { K = 2^10, M = 2^20, G = 2^30, T = 2^40 }

local function is_int(v) return v == floor(v) and v > -math.huge and v < math.huge end

local EXPECTED = 'a size such as "512M" (K, M, G or T: powers of 1024) or a whole number of bytes'

-- The number of bytes v says ("512M", "1.5G", "64k", 536870912), or nil and
-- why not (for "field 'memory': " or "--run-memory: ").
function M.parse(v)
  local bytes
  if type(v) == "number" then
    if not is_int(v) then return nil, format("must be %s, got %s", EXPECTED, tostring(v)) end
    bytes = v
  elseif type(v) == "string" then
    local num, unit = v:match("^(%d+%.?%d*)(%a?)$")
    local mult = num and (unit == "" and 1 or UNITS[unit:upper()])
    if not mult then return nil, format("must be %s, got %q", EXPECTED, v) end
    bytes = tonumber(num) * mult
    if not is_int(bytes) then
      return nil, format("must be a whole number of bytes, got %q (%s bytes)", v, tostring(bytes))
    end
  else
    return nil, format("expected %s, got %s", EXPECTED, type(v))
  end
  if bytes < M.MIN then
    return nil, format("must be at least %s (a worker alone holds about 6M), got %s",
                       M.format(M.MIN), type(v) == "string" and format("%q", v) or tostring(v))
  end
  if bytes > M.MAX then
    return nil, format("must be at most %s, got %s", M.format(M.MAX),
                       type(v) == "string" and format("%q", v) or tostring(v))
  end
  return bytes
end

-- bytes in the largest unit that divides it ("512M", "1536M", "1000").
function M.format(bytes)
  for _, u in ipairs { "T", "G", "M", "K" } do
    if bytes >= UNITS[u] and bytes % UNITS[u] == 0 then return format("%.0f%s", bytes / UNITS[u], u) end
  end
  return format("%.0f", bytes)
end

-- The error of a run that went over its limit of bytes.
function M.oom_error(bytes)
  return "out of memory: the run went over its memory limit of " .. M.format(bytes)
end

-- The limit of a run on node (bytes, or nil: none): the job's memory, else
-- the node's --run-memory.
function M.of(spec, node)
  return spec and spec.memory or node.run_memory
end

return M
