-- Files for tests: write a whole file, read one back (nil if missing), and
-- whether a shared object is mapped into this process.
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

-- Whether this process has a shared object whose path contains lib
-- mapped (/proc/self/maps); nil where there is no such file.
function M.mapped(lib)
  local maps = M.read("/proc/self/maps")
  if not maps then return nil end
  return maps:find(lib, 1, true) ~= nil
end

return M
