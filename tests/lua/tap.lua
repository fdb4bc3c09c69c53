-- tests/lua/tap.lua: TAP output for Lua tests (run by `baton eval`, or by
-- plain `luajit` since it uses nothing but Lua 5.1).
--
--   local T = require "tap"
--   T.ok(v, name)                   T.is(got, expected, name)
--   T.isnt(got, unexpected, name)   T.like(str, lua_pattern, name)
--   T.unlike(str, lua_pattern, name)
--   T.is_deeply(got, expected, name)          recursive table comparison
--   T.error_like(fn, lua_pattern, name)       fn must raise a matching error
--                                             ("file:line: " prefix removed)
--   T.pass(name)  T.fail(name)  T.diag(msg)  T.note(msg)
--   T.skip(reason [, count])                  count tests as skipped
--   T.plan(n)     (optional) announce the count up front
--   return T.skip_all(reason)                 skip the whole file
--   T.done()      prints 1..N; raises an error if any test failed, so the
--                 process exits non-zero
--
-- Every assertion returns true or false, so a test can stop early:
--   if not T.ok(x, "got x") then return T.done() end
--
-- Failure details go to stderr as "#" lines, as Test::More does, so prove
-- shows them even without -v.

local T = {}

local count, failed, planned, finished = 0, 0, nil, false

local function out(s)
  io.stdout:write(s, "\n")
  io.stdout:flush()
end

local function err(s)
  io.stdout:flush()
  io.stderr:write(s, "\n")
  io.stderr:flush()
end

-- Prefixes every line of msg with "# " (TAP's comment syntax).
local function comment(msg)
  return "# " .. tostring(msg):gsub("\n", "\n# ")
end

-- A value as a reader wants to see it: strings quoted (so "1" and 1 differ
-- visibly), tables by their contents one level deep.
local function show(v, depth)
  local t = type(v)
  if t == "string" then
    return (string.format("%q", v):gsub("\\\n", "\\n"))
  elseif t == "table" then
    if (depth or 0) >= 1 then return tostring(v) end
    local parts, n = {}, 0
    for k, x in pairs(v) do
      n = n + 1
      if n > 10 then parts[#parts + 1] = "..."; break end
      parts[#parts + 1] = "[" .. show(k, 1) .. "]=" .. show(x, 1)
    end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end

-- Emits one test line; returns pass.
local function report(pass, name, directive)
  count = count + 1
  local line = (pass and "ok " or "not ok ") .. count
  if name ~= nil and name ~= "" then
    -- "#" would start a directive in TAP.
    line = line .. " - " .. tostring(name):gsub("#", "\\#"):gsub("\n", " ")
  end
  if directive then line = line .. " # " .. directive end
  out(line)
  if not pass then
    failed = failed + 1
    -- The first stack frame outside this file is the test's own line.
    local here, where = debug.getinfo(1, "S").source, "?"
    for level = 2, 20 do
      local info = debug.getinfo(level, "Sl")
      if not info then break end
      if info.source ~= here then
        where = info.short_src .. ":" .. (info.currentline or "?")
        break
      end
    end
    err(comment(string.format("Failed test %s\nat %s.",
      name and ("'" .. tostring(name) .. "'") or count, where)))
  end
  return pass
end

function T.ok(v, name)
  return report(not not v, name)
end

function T.pass(name) return report(true, name) end
function T.fail(name) return report(false, name) end

function T.is(got, expected, name)
  local pass = got == expected or (got ~= got and expected ~= expected) -- NaN
  if not report(pass, name) then
    err(comment("     got: " .. show(got) .. "\nexpected: " .. show(expected)))
  end
  return pass
end

function T.isnt(got, unexpected, name)
  local pass = got ~= unexpected
  if not report(pass, name) then
    err(comment("     got: " .. show(got) .. "\nexpected: anything else"))
  end
  return pass
end

local function match(str, pattern, name, want)
  if type(str) ~= "string" then
    report(false, name)
    err(comment("     got: " .. show(str) .. "\nexpected: a string"))
    return false
  end
  local pass = (str:find(pattern) ~= nil) == want
  if not report(pass, name) then
    err(comment(string.format("                  %s\n%18s '%s'", show(str),
      want and "doesn't match" or "matches", pattern)))
  end
  return pass
end

function T.like(str, pattern, name) return match(str, pattern, name, true) end
function T.unlike(str, pattern, name) return match(str, pattern, name, false) end

-- Returns nil if a and b are deeply equal, else the path to the first
-- difference and the two values found there. seen breaks cycles.
local function diff(a, b, path, seen)
  if a == b or (a ~= a and b ~= b) then return nil end
  if type(a) ~= "table" or type(b) ~= "table" then return path, a, b end
  if seen[a] == b then return nil end
  seen[a] = b
  local keys = {}
  for k in pairs(a) do keys[#keys + 1] = k end
  for k in pairs(b) do if a[k] == nil then keys[#keys + 1] = k end end
  table.sort(keys, function(x, y)
    local tx, ty = type(x), type(y)
    if tx ~= ty then return tx < ty end
    if tx == "number" or tx == "string" then return x < y end
    return tostring(x) < tostring(y)
  end)
  for _, k in ipairs(keys) do
    local sub = type(k) == "string" and k:match("^[%a_][%w_]*$") and (path .. "." .. k)
      or (path .. "[" .. show(k, 1) .. "]")
    local p, x, y = diff(a[k], b[k], sub, seen)
    if p then return p, x, y end
  end
  return nil
end

function T.is_deeply(got, expected, name)
  local path, x, y = diff(got, expected, "got", {})
  if not report(path == nil, name) then
    err(comment(string.format("at %s:\n     got: %s\nexpected: %s", path,
      x == nil and "nil (absent)" or show(x),
      y == nil and "nil (absent)" or show(y))))
    return false
  end
  return true
end

function T.error_like(fn, pattern, name)
  local okay, e = pcall(fn)
  if okay then
    report(false, name)
    err(comment("expected an error matching '" .. pattern .. "', but none was raised"))
    return false
  end
  -- error("msg") prefixes "file:line: "; match what the code said.
  e = tostring(e):gsub("^[^\n]-:%d+: ", "", 1)
  return match(e, pattern, name, true)
end

-- Diagnostics for humans, shown by prove even when not verbose.
function T.diag(msg) err(comment(msg)) end

-- Notes, shown only with prove -v.
function T.note(msg) out(comment(msg)) end

function T.skip(reason, n)
  for _ = 1, n or 1 do report(true, nil, "skip " .. tostring(reason or "")) end
end

function T.plan(n)
  assert(type(n) == "number" and n >= 0, "T.plan: a number of tests is required")
  assert(planned == nil and count == 0, "T.plan: must come first, once")
  planned = n
  out("1.." .. n)
end

-- Ends the file with a "1..0 # SKIP" plan; use as `return T.skip_all(why)`.
function T.skip_all(reason)
  assert(count == 0 and planned == nil, "T.skip_all: tests already ran")
  out("1..0 # SKIP " .. tostring(reason or ""))
  finished = true
end

function T.done()
  if finished then return end
  finished = true
  if planned == nil then
    out("1.." .. count)
  elseif planned ~= count then
    err(comment(string.format("planned %d tests but ran %d", planned, count)))
    error(string.format("tap: planned %d tests, ran %d", planned, count), 0)
  end
  if failed > 0 then
    error(string.format("tap: %d of %d tests failed", failed, count), 0)
  end
end

-- How many tests ran and failed so far (for helpers that build on T).
function T.counts() return count, failed end

return T
