-- A little cluster of baton nodes for tests: starts nodes on a private
-- prefix, puts jobs, reads run records.
local M = {}
local bin = os.getenv("BATON_BIN") or "bin/baton"
local eps = os.getenv("BATON_ENDPOINTS")

local C = {}
C.__index = C

function M.new(tag, endpoints)
  if endpoints then eps = endpoints end
  local P = "/test/" .. tag .. "/" .. tostring(baton.now()):gsub("%.", "") .. "/"
  local dir = os.tmpname()
  os.remove(dir)
  assert(baton.exec { "mkdir", "-p", dir })
  local e = endpoints and baton.etcd.new { endpoints = endpoints } or baton.etcd
  return setmetatable({ P = P, dir = dir, e = e, nodes = {} }, C)
end

function C:cli(...)
  local args = { bin, "--endpoints", eps, "--prefix", self.P, ... }
  args.timeout = 30
  return assert(baton.exec(args))
end

-- env: an optional prefix of VAR=value words for the node's command line
-- (for example a libfaketime LD_PRELOAD and FAKETIME).
function C:start(name, ttl, extra, env)
  self.nodes[name] = assert(baton.spawn { "sh", "-c",
    ("exec %s %q --endpoints %q --prefix %q node --name %s --ttl %d %s >>%s/%s.log 2>&1")
      :format(env and ("env " .. env) or "", bin, eps, self.P, name, ttl or 3, extra or "",
              self.dir, name), stdio = "null" })
  return self.nodes[name]
end

function C:pid(name) return self.nodes[name] and self.nodes[name].pid end

function C:signal(name, sig)
  return assert(baton.exec { "kill", "-" .. sig, tostring(self.nodes[name].pid) })
end

function C:stop(name)
  local p = self.nodes[name]
  if not p then return end
  p:kill("SIGTERM")
  local r = p:wait(20)
  if not r then p:kill("SIGKILL"); p:wait() end
  self.nodes[name] = nil
  return r
end

function C:put_job(name, source)
  local f = self.dir .. "/" .. name .. ".lua"
  local fh = assert(io.open(f, "w"))
  fh:write(source)
  fh:close()
  local r = self:cli("job", "put", f, "--name", name)
  assert(r.code == 0, r.stderr)
  return assert(self.e:get(self.P .. "jobs/" .. name)).kvs[1].mod_revision
end

-- Waits until every started node reports revision rev of job in its status.
function C:loaded(job, rev, secs)
  return M.wait(secs or 10, function()
    local r = assert(self.e:get(self.P .. "status/" .. job .. "/", { prefix = true }))
    local n = 0
    for _, kv in ipairs(r.kvs) do
      local st = baton.json.decode(kv.value)
      if st.revision == rev then n = n + 1 end
    end
    local want = 0
    for _ in pairs(self.nodes) do want = want + 1 end
    return n >= want
  end)
end

function C:records(job)
  local r = assert(self.e:get(self.P .. "runs/" .. job .. "/", { prefix = true }))
  local list = {}
  for _, kv in ipairs(r.kvs) do
    local rec = baton.json.decode(kv.value)
    rec.id = kv.key:match("[^/]+$")
    list[#list + 1] = rec
  end
  return list
end

function C:log(name)
  local f = io.open(self.dir .. "/" .. name .. ".log")
  local s = f and f:read("*a") or ""
  if f then f:close() end
  return s
end

-- (The suite runs nodes strict, BATON_NODE_STRICT in tests/harness/run-tests:
-- a node that set or read a field node/state.lua does not declare logged
-- it, and fails the test here.)
function C:destroy()
  for name in pairs(self.nodes) do self:stop(name) end
  self.e:delete(self.P, { prefix = true })
  local undeclared = baton.exec { "sh", "-c",
    "cat \"$0\"/*.log 2>/dev/null | grep -m 3 'not declared in node/state.lua'", self.dir }
  baton.exec { "rm", "-rf", self.dir }
  if undeclared and undeclared.stdout ~= "" then
    error("a node used a field node/state.lua does not declare:\n" .. undeclared.stdout, 2)
  end
end

function M.wait(secs, fn)
  local deadline = baton.monotime() + secs
  while baton.monotime() < deadline do
    local v = fn()
    if v then return v end
    baton.sleep(0.1)
  end
  return nil
end

-- A loopback port free now (for a node's --http): listened on, then let go.
function M.free_port()
  local srv = assert(baton.httpd.listen { addr = "127.0.0.1:0", handler = function(req) req:respond(200, {}, "") end })
  local port = srv.port
  srv:close()
  return port
end

return M
