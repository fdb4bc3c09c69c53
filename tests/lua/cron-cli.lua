-- `baton cron EXPR [--tz ZONE] [-n N] [--from TIME]` (docs/baton.1,
-- docs/schedules.md): output format, flags, exit statuses and one-line
-- errors.
local T = require "tap"

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- BATON_EVAL is the harness's command prefix for baton (valgrind included)
local prefix = os.getenv("BATON_EVAL") or sh_quote(os.getenv("BATON_BIN") or "bin/baton")

-- Runs baton with args; returns stdout, stderr, exit status.
local function run(...)
  local args = { prefix }
  for _, a in ipairs({ ... }) do args[#args + 1] = sh_quote(a) end
  local tmp = os.tmpname()
  local p = io.popen(table.concat(args, " ") .. " 2>" .. tmp .. "; echo \"exit=$?\"")
  local out = p:read("*a")
  p:close()
  local f = io.open(tmp)
  local err = f:read("*a")
  f:close()
  os.remove(tmp)
  local code = tonumber(out:match("exit=(%d+)\n$"))
  return out:gsub("exit=%d+\n$", ""), err, code
end

local out, err, code = run("cron", "30 2 * * *", "--tz", "America/New_York",
                           "--from", "2026-03-07T12:00:00-05:00", "-n", "3")
T.is(out, "2026-03-08T03:30:00-04:00\n2026-03-09T02:30:00-04:00\n2026-03-10T02:30:00-04:00\n",
     "spring-forward gap, RFC 3339 with the zone's offset")
T.is(err, "", "nothing on stderr")
T.is(code, 0, "exit 0")

out = run("cron", "0 * * * *", "--tz", "America/New_York", "--from", "2026-11-01T00:30:00-04:00", "-n", "3")
T.is(out, "2026-11-01T01:00:00-04:00\n2026-11-01T01:00:00-05:00\n2026-11-01T02:00:00-05:00\n",
     "fall-back overlap: hourly fires at both 01:00s")

out = run("cron", "@daily", "--from", "1772928000", "-n", "2")
T.is(out, "2026-03-09T00:00:00Z\n2026-03-10T00:00:00Z\n", "--from epoch seconds, UTC prints Z")
out = run("cron", "@daily", "--from=1772928000.9", "-n2")
T.is(out, "2026-03-09T00:00:00Z\n2026-03-10T00:00:00Z\n", "--from=, -nN, fractional epoch")
out = run("cron", "0 0 * * *", "--tz", "Pacific/Chatham", "--from", "2026-01-01T00:00:00Z", "-n", "1")
T.is(out, "2026-01-02T00:00:00+13:45\n", "+13:45 offset")
out = run("cron", "0 12 * * *", "--tz", "Asia/Kolkata", "--from", "2026-01-01T00:00:00+05:30", "-n", "1")
T.is(out, "2026-01-01T12:00:00+05:30\n", "+05:30 offset")
out = run("cron", "0 0 * * *", "--tz", "America/New_York", "--from", "2026-03-08T01:30:00", "-n", "1")
T.is(out, "2026-03-09T00:00:00-04:00\n", "--from without offset is read in --tz")
out = run("cron", "0", "2", "*", "*", "*", "--from", "0", "-n", "1")
T.is(out, "1970-01-01T02:00:00Z\n", "several words are joined into one expression")
out = run("cron", "* * * * * *", "--from", "2026-01-01T00:00:00.750Z", "-n", "2")
T.is(out, "2026-01-01T00:00:01Z\n2026-01-01T00:00:02Z\n", "fractional RFC 3339 seconds")
out = run("cron", "*/5 * * * *")
local lines = {}
for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
T.is(#lines, 5, "-n defaults to 5")
T.like(lines[1] or "", "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d[05]:00Z$", "default --from is now")
out, err, code = run("cron", "@manual")
T.ok(out == "" and err == "" and code == 0, "@manual prints nothing, exit 0")
out, err, code = run("cron", "@every 90s", "--from", "0", "-n", "2")
T.is(out, "1970-01-01T00:01:30Z\n1970-01-01T00:03:00Z\n", "@every")

-- errors: one line on stderr starting "baton: "
out, err, code = run("cron", "0 25 * * *")
T.is(err, 'baton: invalid cron expression "0 25 * * *": field 2 (hour) at column 3: 25 is out of range 0-23\n',
     "invalid expression: the documented message")
T.is(code, 1, "invalid expression: exit 1")
T.is(out, "", "nothing on stdout")
out, err, code = run("cron", "0 0 * * 5-0")
T.is(err, 'baton: invalid cron expression "0 0 * * 5-0": field 5 (day-of-week) at column 9: range 5-0 runs '
       .. "backwards (Sunday at the end of a range is 7: write 5-7)\n",
     "day-of-week range ending at 0: one line pointing at the range")
T.ok(code == 1 and out == "", "day-of-week range ending at 0: exit 1, nothing on stdout")
out, err, code = run("cron", "0 0 * * FRI-SUN", "--from", "2026-01-01T00:00:00Z", "-n", "4")
T.is(out, "2026-01-02T00:00:00Z\n2026-01-03T00:00:00Z\n2026-01-04T00:00:00Z\n2026-01-09T00:00:00Z\n",
     "FRI-SUN is Fri, Sat, Sun")
out = run("cron", "0 0 * * SUN-SUN", "--from", "2026-01-01T00:00:00Z", "-n", "2")
T.is(out, "2026-01-04T00:00:00Z\n2026-01-11T00:00:00Z\n", "SUN-SUN is Sunday alone")
out, err, code = run("cron", "* * * * *", "--tz", "Mars/Olympus")
T.is(err, 'baton: unknown time zone "Mars/Olympus"\n', "unknown zone message")
T.is(code, 1, "unknown zone: exit 1")

local usage = {
  { {}, "missing the expression" },
  { { "* * * * *", "--bogus" }, "unknown option" },
  { { "* * * * *", "-n" }, "missing value" },
  { { "* * * * *", "-n", "-3" }, "%-n needs a count" },
  { { "* * * * *", "-n", "x" }, "%-n needs a count" },
  { { "* * * * *", "--from", "yesterday" }, "%-%-from needs RFC 3339" },
  { { "* * * * *", "--from", "2026-02-30T00:00:00Z" }, "%-%-from needs RFC 3339" },
  { { "* * * * *", "--from", "2026-01-01T25:00:00Z" }, "%-%-from needs RFC 3339" },
}
for _, u in ipairs(usage) do
  local argv = { "cron" }
  for _, a in ipairs(u[1]) do argv[#argv + 1] = a end
  out, err, code = run(unpack(argv))
  T.ok(code == 2 and err:match("^baton: cron: " .. u[2]) and select(2, err:gsub("\n", "")) == 1,
       "usage error, one line, exit 2: " .. table.concat(u[1], " "))
end
out, err, code = run("cron", "--help")
T.ok(code == 0 and out:match("^usage: baton cron"), "--help prints usage, exit 0")

T.done()
