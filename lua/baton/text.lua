-- Plain text for a reader, shared by the CLI, the node and the worker
-- (which may not require cli/): how a number of bytes is said.
local format = string.format

local M = {}

-- Bytes as a reader says them: 812 bytes, 1.5 MiB, 200.0 MiB.
function M.bytes(n)
  if n < 1024 then return format("%d bytes", n) end
  if n < 1024 * 1024 then return format("%.1f KiB", n / 1024) end
  if n < 1024 * 1024 * 1024 then return format("%.1f MiB", n / 1048576) end
  return format("%.1f GiB", n / 1073741824)
end

return M
