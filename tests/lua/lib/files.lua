-- Files for tests: write a whole file, read one back (nil if missing).
local M = {}

function M.write(path, s)
  local f = assert(io.open(path, "w"))
  f:write(s)
  f:close()
end

function M.read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

return M
