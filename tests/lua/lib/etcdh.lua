-- Private etcd servers for Lua tests that must restart, compact or
-- reconfigure etcd without disturbing the shared one (BATON_ENDPOINTS).
-- Wraps tests/harness/etcd through baton.exec.
local M = {}
local root = os.getenv("BATON_ROOT") or "."
M.script = root .. "/tests/harness/etcd"

local Server = {}
Server.__index = Server

local function run(args)
  args.timeout = args.timeout or 90
  local r, err = baton.exec(args)
  if not r then error("harness: " .. err, 2) end
  if r.code ~= 0 then
    error("harness " .. table.concat(args, " ") .. " failed: " .. r.stderr, 2)
  end
  return (r.stdout:gsub("%s+$", ""))
end

-- Starts a single member (extra args go to `etcd start`: --auth, etcd flags).
function M.start(...)
  local dir = os.tmpname()
  os.remove(dir)
  local args = { M.script, "start", dir, ... }
  local url = run(args)
  return setmetatable({ dir = dir, url = url }, Server)
end

function M.cluster(...)
  local dir = os.tmpname()
  os.remove(dir)
  local urls = run { M.script, "cluster-start", dir, ... }
  return setmetatable({ dir = dir, url = urls, cluster = true }, Server)
end

function Server:restart() self.url = run { M.script, "restart", self.dir }; return self.url end
function Server:stop() return run { M.script, "stop", self.dir } end
function Server:start_again() return run { M.script, "restart", self.dir } end
function Server:member_stop(i) return run { M.script, "member-stop", self.dir, tostring(i) } end
function Server:member_start(i) return run { M.script, "member-start", self.dir, tostring(i) } end
function Server:member_url(i) return run { M.script, "url", self.dir, tostring(i) } end
function Server:leader() return tonumber(run { M.script, "leader", self.dir }) end
function Server:destroy() return run { M.script, "destroy", self.dir } end
function Server:ctl(...) return run { M.script, "ctl", self.dir, ... } end

return M
