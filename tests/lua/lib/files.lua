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

-- Runs `$BATON_BIN eval SCRIPT ARGS...` where the shared objects named in
-- libs cannot be loaded: files that are not shared objects, found first
-- through LD_LIBRARY_PATH. Returns the first two lines of its output and
-- the baton.exec result; nil when BATON_BIN is not set.
function M.eval_without(libs, script, ...)
  local bin = os.getenv("BATON_BIN")
  if not bin or bin == "" then return nil end
  local dir = os.tmpname()
  os.remove(dir)
  assert(baton.exec{"mkdir", "-p", dir})
  for _, lib in ipairs(libs) do M.write(dir .. "/" .. lib, "not a library\n") end
  M.write(dir .. "/t.lua", script)
  local argv = {bin, "eval", dir .. "/t.lua", ...}
  argv.timeout, argv.env = 30, {LD_LIBRARY_PATH = dir}
  local res = baton.exec(argv)
  baton.exec{"rm", "-rf", dir}
  local l1, l2 = (res and res.stdout or ""):match("([^\n]*)\n([^\n]*)")
  return l1, l2, res
end

return M
