-- The coroutine runtime: sleep, go, now, json; waiting inside the user's
-- own coroutines; misuse raising; how `baton eval` ends and reports errors.
local T = require "tap"
local bin = os.getenv("BATON_BIN") or "bin/baton"

T.is(require "baton", baton, "require 'baton' is the global baton")
T.like(baton.version, "^%d+%.%d+%.%d+", "baton.version")

-- now: epoch seconds with millisecond precision
local now = baton.now()
T.ok(math.abs(now - os.time()) < 2, "now() is epoch seconds")
T.ok(math.abs(now * 1000 - math.floor(now * 1000 + 0.5)) < 1e-3, "millisecond precision")

-- sleep yields; go runs concurrently
local t0 = baton.monotime()
local done = 0
for i = 1, 3 do baton.go(function(d) baton.sleep(d); done = done + 1 end, 0.3) end
baton.sleep(0.5)
T.is(done, 3, "three coroutines slept concurrently")
T.ok(baton.monotime() - t0 < 0.9, "in parallel, not in sequence")
T.ok(baton.sleep(0), "sleep(0) returns true")

-- waiting calls inside the user's own coroutines
local wrapped = coroutine.wrap(function(a)
  baton.sleep(0.01)
  local r = assert(baton.etcd:get("/nothing"))
  return a + 1, r.count
end)
local x, c = wrapped(41)
T.is(x, 42, "coroutine.wrap around waiting calls works")
T.is(c, 0, "and returns their results")
local gen = coroutine.wrap(function()
  for i = 1, 3 do baton.sleep(0.01); coroutine.yield(i) end
end)
T.is_deeply({ gen(), gen(), gen() }, { 1, 2, 3 }, "a generator that waits between yields")
local inner = coroutine.create(function()
  local deeper = coroutine.wrap(function() baton.sleep(0.01); return "deep" end)
  return deeper()
end)
T.is_deeply({ coroutine.resume(inner) }, { true, "deep" }, "nested user coroutines")
local failing = coroutine.wrap(function() baton.sleep(0.01); error("boom", 0) end)
T.error_like(failing, "^boom$", "an error after waiting propagates through wrap")

-- misuse
T.error_like(function() baton.sleep("x") end, "bad argument #1", "sleep('x') raises")
T.error_like(function() baton.sleep(-1) end, "must be >= 0", "sleep(-1) raises")
T.error_like(function() baton.go(5) end, "bad argument #1", "go(5) raises")
T.error_like(function() table.sort({ 3, 2, 1 }, function(a, b) baton.sleep(0) return a < b end) end,
  "cannot wait here", "waiting inside a C callback raises a clear error")

-- json
local j = baton.json
T.is(j.encode { a = 1 }, '{"a":1}', "encode object")
T.is(j.encode { 1, 2, "x" }, '[1,2,"x"]', "encode array")
T.is(j.encode(j.array {}), "[]", "empty array")
T.is(j.encode {}, "{}", "empty table is an object")
T.is(j.encode { n = j.null }, '{"n":null}', "null")
T.is_deeply(j.decode '{"a":[1,true,"s"],"b":{"c":null}}', { a = { 1, true, "s" }, b = { c = j.null } }, "decode")
local d, derr, dcode = j.decode("{bad")
T.is(dcode, "EINVAL", "invalid JSON returns EINVAL")
T.like(derr, "invalid JSON at byte", "with the position")
T.error_like(function() j.encode { f = print } end, "cannot encode a function", "encoding a function raises")
T.error_like(function() j.encode { [1] = 1, [3] = 3 } end, "sparse array", "sparse array raises")
local cyc = {}
cyc.self = cyc
T.error_like(function() j.encode(cyc) end, "too deep", "a cycle raises")
-- NUL bytes: cJSON's strings end at one, so they are refused by default
-- (where a key used to be cut at it, and a decoded string too), or written
-- as U+FFFD with nul = "replace".
local FFFD = "\239\191\189"
T.error_like(function() j.encode { s = "a\0b" } end, "cannot encode a string with a NUL byte", "a NUL in a string raises")
T.error_like(function() j.encode { ["a\0b"] = 1 } end, "cannot encode a key with a NUL byte", "a NUL in a key raises")
T.is(j.encode({ ["k\0"] = { "a\0b", "\0" } }, { nul = "replace" }), '{"k' .. FFFD .. '":["a' .. FFFD .. 'b","' .. FFFD .. '"]}',
  "nul = replace: U+FFFD in strings and keys")
T.is(j.encode({ "plain" }, { nul = "error" }), '["plain"]', "nul = error is the default")
T.error_like(function() j.encode("x", { nul = "drop" }) end, 'nul must be "error" or "replace"', "a bad nul raises")
T.error_like(function() j.encode("x", { nlu = "replace" }) end, "unknown option 'nlu'", "an unknown option raises")
T.is_deeply(j.decode '{"p\\u0000":"a\\u0000b"}', { ["p\0"] = "a\0b" },
  "decoding \\u0000 gives a NUL byte, in keys and strings, not a cut string")
T.is(j.decode '"a\\\\u0000b"', "a\\u0000b", "an escaped backslash before u0000 is no NUL")
T.is(select(3, j.decode '"a\0b"'), "EINVAL", "a raw NUL byte fails")
T.is_deeply(j.decode('{"p\\u0000":"a\\u0000b","q":"x\0"}', { nul = "replace" }),
  { ["p" .. FFFD] = "a" .. FFFD .. "b", q = "x" .. FFFD }, "nul = replace: U+FFFD for \\u0000 and raw NULs")

-- how eval ends
local function script(src)
  local f = os.tmpname()
  local fh = io.open(f, "w")
  fh:write(src)
  fh:close()
  return f
end
local function eval(src, ...)
  local f = script(src)
  local args = { bin, "eval", f, ... }
  args.timeout = 30
  local r = assert(baton.exec(args))
  os.remove(f)
  return r, f
end

local r = eval('baton.go(function() baton.sleep(0.3); print("late") end)\nprint("main")')
T.is(r.stdout, "main\nlate\n", "eval waits for baton.go coroutines")
T.is(r.code, 0, "and exits 0")

local r2, f2 = eval('local x = 1\nerror("broken here")\n')
T.is(r2.code, 1, "uncaught error: exit 1")
T.like(r2.stderr, "^baton: [^\n]*:2: broken here\n", "baton: FILE:LINE: message")
T.like(r2.stderr, "stack traceback:", "plus a traceback")

local r3 = eval('baton.go(function() baton.sleep(0.05); error("in go") end)\nbaton.sleep(10)\nprint("not reached")')
T.is(r3.code, 1, "an error in a baton.go coroutine fails the script")
T.like(r3.stderr, "in go", "and is reported")
T.unlike(r3.stdout, "not reached", "without waiting for the others")

local r4 = eval('print(select("#", ...), arg[0] ~= nil, arg[2], ...)', "a", "b")
T.is(r4.stdout, "2\ttrue\tb\ta\tb\n", "ARGS as ... and arg")

local r5 = eval('x = = 1')
T.is(r5.code, 1, "syntax error: exit 1")
T.like(r5.stderr, "^baton: [^\n]*:1: ", "syntax error names file and line")

local r6 = assert(baton.exec { bin, "eval", "/nonexistent.lua", timeout = 10 })
T.is(r6.code, 1, "missing file: exit 1")
T.like(r6.stderr, "^baton: cannot open /nonexistent.lua", "missing file: clear message")
local r7 = assert(baton.exec { bin, "eval", timeout = 10 })
T.is(r7.code, 2, "eval without a file: usage error 2")
local r8 = assert(baton.exec { bin, "frobnicate", timeout = 10 })
T.is(r8.code, 2, "unknown command: 2")
T.like(r8.stderr, 'unknown command "frobnicate"', "names the command")

local r9 = eval('coroutine.yield(); print("resumed")')
T.is(r9.stdout, "resumed\n", "a bare coroutine.yield() in a baton coroutine lets others run")
T.done()
