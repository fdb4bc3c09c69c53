-- baton.log: each call writes one line to stderr, logfmt by default or JSON
-- with BATON_LOG_FORMAT=json, filtered by BATON_LOG_LEVEL. The lines are
-- checked by running small scripts in a child baton and reading its stderr.
local T = require "tap"

local function baton_bin()
  local b = os.getenv("BATON_BIN")
  if b and b ~= "" then return b end
  local r = baton.exec{"sh", "-c", "readlink /proc/$PPID/exe"}
  if r and r.code == 0 then return (r.stdout:gsub("%s+$", "")) end
end

local bin = baton_bin()

-- Runs src in a child `baton eval` with env; returns its stderr lines.
local function run(src, env)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(src)
  f:close()
  local e = {BATON_LOG_LEVEL = false, BATON_LOG_FORMAT = false}
  for k, v in pairs(env or {}) do e[k] = v end
  local r, err = baton.exec{bin, "eval", path, env = e, timeout = 30}
  os.remove(path)
  if not r then return nil, err end
  local lines = {}
  for line in r.stderr:gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  return lines, r
end

-- misuse raises; a filtered or written call returns nothing
T.error_like(function() baton.log.info() end,
  "^baton%.log%.info: msg must be a string %(got no value%)", "no msg")
T.error_like(function() baton.log.warn({}) end,
  "^baton%.log%.warn: msg must be a string %(got table%)", "table msg")
T.error_like(function() baton.log.error("x", "y") end,
  "^baton%.log%.error: fields must be a table %(got string%)", "fields string")
T.error_like(function() baton.log.info("x", {"positional"}) end,
  "^baton%.log%.info: field names must be strings %(got number%)",
    "array fields")
T.error_like(function() baton.log.debug(nil) end,
  "^baton%.log%.debug: msg must be a string",
    "debug checks its arguments even when filtered")
T.is(select("#", baton.log.debug("not shown")), 0, "returns nothing")
for _, name in ipairs{"debug", "info", "warn", "error"} do
  T.is(type(baton.log[name]), "function", "baton.log." .. name)
end

if not bin then
  T.skip("cannot find the baton binary (set BATON_BIN)", 1)
  return T.done()
end

-- logfmt, default level info
do
  local lines = run([[
baton.log.debug("hidden")
baton.log.info("hello world", {b = "x y", a = 1, c = true, d = 1.5, e = "",
                               n = -3, big = 9007199254740991, q = 'say "hi"'})
baton.log.warn("two\nlines", {path = "/tmp/a=b"})
baton.log.error(42)
baton.log.info("reserved", {msg = "m", level = "l", ts = "t"})
local obj = setmetatable({}, {__tostring = function() return "<obj>" end})
baton.log.info("values", {obj = obj, inf = math.huge, frac = 0.1})
]])
  T.is(#lines, 5, "five lines: debug filtered by default")
  lines = lines or {}
  local l1 = lines[1] or ""
  T.like(l1, "^ts=%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ ",
    "ts in RFC 3339 UTC with milliseconds")
  local rest = function(l) return (l or ""):gsub("^ts=%S+ ", "") end
  T.is(rest(l1), 'level=info msg="hello world" a=1 b="x y" ' ..
    'big=9007199254740991 c=true d=1.5 e="" n=-3 q="say \\"hi\\""',
    "fields sorted by key, quoted only when needed")
  T.is(rest(lines[2]), 'level=warn msg="two\\nlines" path="/tmp/a=b"',
    "newline escaped: one call, one line")
  T.is(rest(lines[3]), 'level=error msg="42"', "a number msg")
  T.is(rest(lines[4]),
    'level=info msg="reserved" fields.level=l fields.msg=m fields.ts=t',
    "reserved field names are prefixed")
  T.is(rest(lines[5]), 'level=info msg="values" frac=0.1 inf=inf obj=<obj>',
    "__tostring, inf and fractions")
end

-- BATON_LOG_LEVEL
do
  local src = [[
baton.log.debug("d")
baton.log.info("i")
baton.log.warn("w")
baton.log.error("e")
]]
  local function levels(lines)
    local t = {}
    for _, l in ipairs(lines or {}) do t[#t + 1] = l:match("level=(%a+)") end
    return table.concat(t, ",")
  end
  T.is(levels(run(src, {BATON_LOG_LEVEL = "debug"})), "debug,info,warn,error",
    "level debug")
  T.is(levels(run(src, {BATON_LOG_LEVEL = "warn"})), "warn,error", "level warn")
  T.is(levels(run(src, {BATON_LOG_LEVEL = "ERROR"})), "error", "level ERROR")
  local lines = run(src, {BATON_LOG_LEVEL = "loud"})
  T.like(lines and lines[1],
    'level=warn msg="unknown BATON_LOG_LEVEL.-" value=loud',
    "an unknown level is reported once")
  T.is(levels(lines), "warn,info,warn,error", "and info is used")
end

-- BATON_LOG_FORMAT=json
do
  local lines = run([[
baton.log.info("hello \"json\"\n", {n = 7, f = 2.5, b = false, s = "x",
                                   msg = "dup",
                                   nan = 0/0})
baton.log.error("bare")
]], {BATON_LOG_FORMAT = "json"})
  T.is(lines and #lines, 2, "one JSON object per line")
  lines = lines or {}
  local ok, j = pcall(baton.json.decode, lines[1] or "")
  T.ok(ok and type(j) == "table", "the line is valid JSON")
  if type(j) ~= "table" then j = {} end
  T.is(j.level, "info", "level")
  T.is(j.msg, 'hello "json"\n', "msg round-trips")
  T.like(j.ts, "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$", "ts")
  T.is(j.n, 7, "numbers stay numbers")
  T.is(j.f, 2.5, "fractions too")
  T.is(j.b, false, "booleans stay booleans")
  T.is(j.s, "x", "strings")
  T.is(j["fields.msg"], "dup", "reserved name prefixed")
  T.is(j.nan, "nan", "NaN becomes a string")
  T.like(lines[1],
    '^{"ts":"[^"]+","level":"info","msg":"hello \\"json\\"\\n","b":false,',
    "ts, level, msg first, then the fields sorted")
  local ok2, j2 = pcall(baton.json.decode, lines[2] or "")
  T.ok(ok2 and j2.msg == "bare" and j2.level == "error",
    "a line without fields")
end


-- baton._log_filter: applied to the message and to every field's text
-- (not to numbers and booleans); nil removes it (a worker redacts a run's
-- secrets with it)
do
  T.error_like(function() baton._log_filter("x") end, "function expected", "a filter is a function")
  local lines = run([[
baton._log_filter(function(s) return (s:gsub("hunter2", "***")) end)
baton.log.info("pw hunter2", {pw = "hunter2!", n = 2, ok = true})
baton.log.info(12)
baton._log_filter(nil)
baton.log.info("pw hunter2 again")
]])
  T.like(lines[1] or "", 'msg="pw %*%*%*".* n=2 ok=true pw=%*%*%*!', "the message and fields are filtered")
  T.like(lines[2] or "", "msg=\"?12", "a number message is text for the filter")
  T.like(lines[3] or "", 'msg="pw hunter2 again"', "nil removes the filter")
end

T.done()
