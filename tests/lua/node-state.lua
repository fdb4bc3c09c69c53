-- The node table (lua/baton/node/state.lua), without etcd: every field the
-- conductor's modules name is declared with its owner, the table a node
-- starts with holds nothing else, a strict table refuses an undeclared
-- field, and every long-lived task is one of node/init.lua's TASKS.
local T = require "tap"
local state = require "baton.node.state"
local node = require "baton.node"

local root = os.getenv("BATON_ROOT") or "."

local function exists(path)
  local f = io.open(root .. "/" .. path)
  if f then f:close() end
  return f ~= nil
end

-- 1. The declarations: one each, with an owner that is a module and a
-- sentence.
local seen, bad = {}, {}
for _, f in ipairs(state.FIELDS) do
  local name, owner, what = f[1], f[2], f[3]
  if seen[name] then bad[#bad + 1] = name .. ": declared twice" end
  seen[name] = true
  if not (exists("lua/baton/" .. owner .. ".lua") or exists("lua/baton/" .. owner .. "/init.lua")) then
    bad[#bad + 1] = name .. ": its owner " .. tostring(owner) .. " is no module"
  end
  if type(what) ~= "string" or #what < 8 then bad[#bad + 1] = name .. ": no comment" end
end
T.is(table.concat(bad, "; "), "", "every field declared once, with its owning module and what it holds")
T.ok(#state.FIELDS >= 45, "the node's fields are declared (" .. #state.FIELDS .. ")")

-- 2. The table a node starts with.
local t = state.new { name = "a", prefix = "/p/", workers = 2, pid = 1, metrics = {} }
T.is(table.concat(state.undeclared(t), ","), "", "state.new builds only declared fields")
T.is(table.concat(state.undeclared { name = "a", bogus = 1, zz = 2 }, ","), "bogus,zz",
     "state.undeclared names the others")

-- 3. Every field the node's modules read or set is declared: `self.x` in
-- the modules whose `self` is the node, `node.x` where the node is called so.
local self_files = { "node/init", "node/session", "node/store", "node/timetable", "node/triggers",
                     "node/decide", "node/gc", "node/runs", "node/claim", "node/execute", "node/cancel",
                     "node/leader", "node/orphans", "node/misfires", "node/prune", "node/clock", "node/queue",
                     "node/secrets", "node/http", "events" }
local node_files = { "node/pool", "node/board", "events" }
local function used(files, var, out)
  for _, m in ipairs(files) do
    local path = "lua/baton/" .. m .. ".lua"
    if not exists(path) then path = "lua/baton/" .. m .. "/init.lua" end
    local n = 0
    for line in io.lines(root .. "/" .. path) do
      n = n + 1
      local code = line:gsub("%-%-.*$", ""):gsub("baton%.node%.", "")
      for field in code:gmatch("%f[%w_]" .. var .. "%.([%a_][%w_]*)") do
        if not state.DECLARED[field] then out[#out + 1] = ("%s:%d: %s.%s"):format(path, n, var, field) end
      end
    end
  end
  return out
end
local undeclared = used(node_files, "node", used(self_files, "self", {}))
T.is(#undeclared, 0, "every node field the modules name is declared in node/state.lua")
for i = 1, math.min(#undeclared, 40) do T.diag(undeclared[i]) end

-- 4. A strict table.
local s = state.strict(state.new { name = "a" }, true, true)
s.http = { port = 1 }
T.is(s.http.port, 1, "a declared field is set")
s.http = nil
T.is(s.http, nil, "and read while it holds nothing")
T.error_like(function() s.prune_swept = {} end,
             "node field 'prune_swept' set but not declared in node/state%.lua", "an undeclared field cannot be set")
T.error_like(function() return s.publish end,
             "node field 'publish' read but not declared in node/state%.lua", "nor read")
T.is(rawget(s, "prune_swept"), nil, "and is not set")
local lax = state.strict(state.new { name = "a" }, false, false)
lax.extra = 1
T.is(lax.extra, 1, "without raise, an undeclared field is logged and set: the node goes on")

-- 5. The tasks: each declared once, with what it does and either its
-- function or who starts it; every self.forever(name, ...) in lua/ names
-- one of them.
local tasks, tbad = {}, {}
for _, task in ipairs(node.TASKS) do
  local name, what, start = task[1], task[2], task[3]
  if tasks[name] then tbad[#tbad + 1] = name .. ": declared twice" end
  tasks[name] = true
  if type(what) ~= "string" or #what < 8 then tbad[#tbad + 1] = name .. ": no comment" end
  if type(start) ~= "function" and type(start) ~= "string" then tbad[#tbad + 1] = name .. ": no start" end
end
T.is(table.concat(tbad, "; "), "", "every task declared once, with its start")
local files = assert(baton.exec { "sh", "-c", "cd \"$0\" && find lua -name '*.lua' | sort", root }).stdout
local calls, unknown = 0, {}
for f in files:gmatch("[^\n]+") do
  local src = assert(io.open(root .. "/" .. f)):read("*a"):gsub("%-%-[^\n]*", "")
  for name in src:gmatch("forever%(%s*\"([^\"]*)\"") do
    calls = calls + 1
    if not tasks[name] then unknown[#unknown + 1] = f .. ": " .. name end
  end
  for rest in src:gmatch("forever%(([^\n]*)") do
    if not rest:match("^%s*\"") and not rest:match("^self, ") then
      unknown[#unknown + 1] = f .. ": a task without a name: forever(" .. rest
    end
  end
end
T.ok(calls >= 7, "the tasks started by name were found (" .. calls .. ")")
T.is(table.concat(unknown, "; "), "", "every task started in lua/ is declared in node/init.lua")

T.done()
