-- What runs untrusted Lua (a job file's top level, a stored policy) needs,
-- on both sides of the sandbox process (lua/baton/stored.lua starts it,
-- lua/baton/cli/sandbox.lua is it):
--
--   bounded(budget, fn, ...)   a call under a bound of Lua instructions and
--                              of seconds (BUDGET_MSG / TIME_MSG when passed)
--   encode(v) / decode(s)      any Lua value as plain data, one line of
--                              JSON: tables keep their non-string keys,
--                              numbers their NaN and infinities, strings
--                              their NUL bytes; functions and other values
--                              that cannot cross become stand-ins of the
--                              same type (FN: a function that cannot run)
local baton = require "baton"

local sethook, gethook, getinfo = debug.sethook, debug.gethook, debug.getinfo
local pcall, select, unpack, type, ipairs, next, error = pcall, select, unpack, type, ipairs, next, error
local tostring = tostring
local monotime = baton.monotime
local json = baton.json
local b64encode, b64decode = baton._etcd.b64encode, baton._etcd.b64decode

local M = {}

-- What a call that ran out of budget raised; callers compare against them.
M.BUDGET_MSG = "\0baton: instruction budget exceeded"
M.TIME_MSG = "\0baton: time budget exceeded"

-- Seconds any one bounded call may run (its Lua code; a C function that
-- does not return is the sandbox's parent's to stop: stored.lua).
M.TIME_LIMIT = 2
-- Bytes of Lua memory one request to the sandbox may take on top of what
-- the sandbox holds already (its counting allocator refuses the rest).
M.MEMORY = 256 * 2^20

local HOOK_EVERY = 1000

-- Calls fn(...) under a bound of `budget` Lua instructions and of
-- M.TIME_LIMIT seconds, from inside a C call (string.gsub's callback) so
-- that a waiting call such as baton.sleep raises instead of suspending the
-- caller. Once a bound is passed, every instruction of code from fn's file
-- raises, so a pcall loop inside it cannot swallow the error and go on;
-- library code it called is left to return. Compiled loops do not run
-- count hooks: the caller turns the JIT off for the code it does not
-- trust. Returns pcall's status and up to one result.
function M.bounded(budget, fn, ...)
  local old_hook, old_mask, old_count = gethook()
  local left, deadline, msg = budget, monotime() + M.TIME_LIMIT, nil
  local source = getinfo(fn, "S").source
  local function hook()
    if not msg then
      left = left - HOOK_EVERY
      if left > 0 and monotime() < deadline then return end
      msg = left > 0 and M.TIME_MSG or M.BUDGET_MSG
      sethook(hook, "", 1)
    end
    local info = getinfo(2, "S")
    if info and info.source == source then error(msg, 0) end
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

---------------------------------------------------------------------------
-- plain data across the sandbox

M.MAX_DEPTH = 64
M.MAX_ITEMS = 1e6

-- A function that stands for one the sandbox described: it exists, it is a
-- function, and it never runs where it was described.
function M.FN()
  error("this function was described in the sandbox and does not run here", 2)
end
local FN = M.FN
local USERDATA = newproxy(false)
local THREAD = coroutine.create(function() end)

-- The tree of v that json.encode takes: {"$t": [[k, v], ...]} for a table,
-- {"$s": base64} for a string with a NUL byte, {"$n": "nan"|"inf"|"-inf"},
-- {"$f": 1} for a function, {"$x": "userdata"} for what cannot cross,
-- {"$0": 1} for json.null. Raises on a cycle, depth or size.
local function tree(v, depth, seen, count)
  local t = type(v)
  if t == "string" then
    if v:find("\0", 1, true) then return { ["$s"] = b64encode(v) } end
    return v
  elseif t == "number" then
    if v ~= v then return { ["$n"] = "nan" } end
    if v == math.huge then return { ["$n"] = "inf" } end
    if v == -math.huge then return { ["$n"] = "-inf" } end
    return v
  elseif t == "boolean" then
    return v
  elseif t == "function" then
    return { ["$f"] = 1 }
  elseif t == "table" then
    if depth > M.MAX_DEPTH then error("the table is nested more than " .. M.MAX_DEPTH .. " deep", 0) end
    if seen[v] then error("the table refers to itself", 0) end
    seen[v] = true
    local pairs_ = {}
    for k, x in next, v do
      count[1] = count[1] + 1
      if count[1] > M.MAX_ITEMS then error("the table has more than " .. M.MAX_ITEMS .. " entries", 0) end
      pairs_[#pairs_ + 1] = { tree(k, depth + 1, seen, count), tree(x, depth + 1, seen, count) }
    end
    seen[v] = nil
    return { ["$t"] = json.array(pairs_) }
  elseif v == json.null then
    return { ["$0"] = 1 }
  elseif v == nil then
    return { ["$x"] = "nil" }
  end
  return { ["$x"] = t }
end

-- tree(v) --> v as plain data that json.encode takes (decode's untree
-- turns it back), or nil, "why" (a cycle, too deep, too big): for a value
-- inside a message of its own.
function M.tree(v)
  local ok, res = pcall(tree, v, 0, {}, { 0 })
  if not ok then return nil, tostring(res) end
  return res
end

-- encode(v) --> one line of JSON, or nil, "why".
function M.encode(v)
  local t, err = M.tree(v)
  if err then return nil, err end
  return json.encode({ v = t })
end

local STANDIN = { userdata = USERDATA, thread = THREAD, cdata = USERDATA }

local function untree(x)
  if type(x) ~= "table" then return x end
  local t = x["$t"]
  if t then
    local out = {}
    for _, kv in ipairs(t) do
      local k = untree(kv[1])
      if k ~= nil and k == k then out[k] = untree(kv[2]) end
    end
    return out
  end
  if x["$s"] then return b64decode(x["$s"]) end
  if x["$n"] then return x["$n"] == "nan" and 0 / 0 or x["$n"] == "inf" and math.huge or -math.huge end
  if x["$f"] then return FN end
  if x["$0"] then return json.null end
  if x["$x"] then
    if x["$x"] == "nil" then return nil end
    return STANDIN[x["$x"]] or USERDATA
  end
  return nil
end

-- decode(s) --> the value encode(v) was made from (stand-ins for what
-- could not cross); raises on text encode did not make.
function M.decode(s)
  local w = json.decode(s)
  if type(w) ~= "table" then error("not an encoded value", 0) end
  return untree(w.v)
end

-- untree(x) --> the value tree(v) was made from.
M.untree = untree

return M
