-- baton.cron: the Lua API of schedules (docs/schedules.md). Instants are
-- hand-checked: 2026-03-08 is New York's spring-forward Sunday, 2026-11-01
-- its fall-back Sunday.
local T = require "tap"

local function utc(y, m, d, h, mi, s)
  -- epoch seconds of a UTC date, without os.time's local zone
  local days = 0
  local function leap(yy) return (yy % 4 == 0 and yy % 100 ~= 0) or yy % 400 == 0 end
  for yy = 1970, y - 1 do days = days + (leap(yy) and 366 or 365) end
  local dim = { 31, leap(y) and 29 or 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }
  for mm = 1, m - 1 do days = days + dim[mm] end
  return ((days + d - 1) * 24 + (h or 0)) * 3600 + (mi or 0) * 60 + (s or 0)
end

T.is(type(baton.cron), "function", "baton.cron is a function")

local c = baton.cron("30 2 * * *", "America/New_York")
T.is(type(c), "userdata", "baton.cron returns a userdata")
T.is(tostring(c), 'baton.cron("30 2 * * *", "America/New_York")', "tostring")
T.is(c.expr, "30 2 * * *", "c.expr")
T.is(c.tz, "America/New_York", "c.tz")

-- 02:30 does not exist on 2026-03-08: it fires at 03:30 EDT (07:30Z)
local from = utc(2026, 3, 7, 17)                       -- 12:00 EST
T.is(c:next(from), utc(2026, 3, 8, 7, 30), "gap: 02:30 shifts to 03:30 EDT")
T.is_deeply(c:next_n(3, from), {
  utc(2026, 3, 8, 7, 30),                              -- 03:30 EDT
  utc(2026, 3, 9, 6, 30),                              -- 02:30 EDT
  utc(2026, 3, 10, 6, 30),
}, "next_n across the gap")
T.is(c:next(from + 0.5), utc(2026, 3, 8, 7, 30), "fractional after")
T.is(c:next(utc(2026, 3, 8, 7, 30)), utc(2026, 3, 9, 6, 30),
     "strictly after: an instant is not its own next")

-- fall back: a fixed time fires once, an hourly one at every real instant
local f = baton.cron("30 1 * * *", "America/New_York")
T.is_deeply(f:next_n(2, utc(2026, 11, 1, 4)), {
  utc(2026, 11, 1, 5, 30),                             -- 01:30 EDT
  utc(2026, 11, 2, 6, 30),                             -- next day, EST
}, "overlap: fixed time once, at the first 01:30")
local h = baton.cron("0 * * * *", "America/New_York")
T.is_deeply(h:next_n(3, utc(2026, 11, 1, 4, 30)), {
  utc(2026, 11, 1, 5), utc(2026, 11, 1, 6), utc(2026, 11, 1, 7),
}, "overlap: hourly fires at both 01:00s")

-- default zone UTC, default after = now
local d = baton.cron("@daily")
T.is(d.tz, "UTC", "UTC by default")
local now = os.time()
local n = d:next()
T.ok(n > now - 1 and n <= now + 86400 and n % 86400 == 0, "next() is after now")
T.is(#d:next_n(3), 3, "next_n(n) without after")
T.is_deeply(d:next_n(0, 0), {}, "next_n(0)")
T.is(baton.cron("0 0 1 1 *"):next(utc(2026, 5, 1)), utc(2027, 1, 1), "yearly")
T.is(baton.cron("*/10 * * * * *"):next(100), 110, "six fields, seconds first")

-- @every keeps fractions, @manual never fires
local e = baton.cron("@every 1h30m")
T.is(e:next(1000.25), 1000.25 + 5400, "@every adds the interval")
T.is_deeply(e:next_n(2, 0), { 5400, 10800 }, "@every next_n")
local m = baton.cron("@manual")
T.is(m:next(), nil, "@manual: next is nil")
T.is_deeply(m:next_n(5), {}, "@manual: next_n is empty")
T.is(baton.cron("0 0 1 1 *"):next(utc(9999, 6, 1)), nil, "nothing after 9999")

-- other zones
T.is(baton.cron("0 0 * * *", "America/Sao_Paulo"):next(utc(2018, 11, 3, 15)),
     utc(2018, 11, 4, 3), "Sao Paulo midnight DST: 00:00 -> 01:00 -02")
T.is(baton.cron("0 3 * * *", "Pacific/Chatham"):next(utc(2025, 9, 27)),
     utc(2025, 9, 27, 14, 15), "Chatham gap: 03:00 -> 04:00 +13:45")
T.is(baton.cron("0 9 * * MON-FRI", "Asia/Kolkata"):next(utc(2026, 1, 2, 4, 30)),
     utc(2026, 1, 5, 3, 30), "Kolkata weekdays")

-- misuse raises, with the CLI's text
local function err(fn, ...)
  local ok, msg = pcall(fn, ...)
  return not ok and msg or nil
end
T.is(err(baton.cron, "0 25 * * *"),
     'invalid cron expression "0 25 * * *": field 2 (hour) at column 3: 25 is out of range 0-23',
     "invalid expression raises with the column")
T.is(err(baton.cron, "0 0 * * 1#6"),
     'invalid cron expression "0 0 * * 1#6": field 5 (day-of-week) at column 11: week 6 is out of range 1-5',
     "invalid n#k")
T.is(err(baton.cron, "@every 0s"),
     'invalid cron expression "@every 0s": at column 8: duration 0s is shorter than 1s',
     "@every under 1s")
T.is(err(baton.cron, "* * * * *", "Mars/Olympus"), 'unknown time zone "Mars/Olympus"',
     "unknown zone raises")
T.like(err(baton.cron) or "", "bad argument #1", "missing expression raises")
T.like(err(baton.cron, {}) or "", "bad argument #1", "non-string expression raises")
T.like(err(baton.cron, "* * * * *", 5) or "", "unknown time zone", "non-string zone")
T.like(err(function() local r = c:next("soon") return r end) or "", "bad argument #1 to 'next'",
       "non-number after raises")
T.like(err(function() local r = c:next(0/0) return r end) or "", "bad argument #1", "NaN after raises")
T.like(err(function() local r = c:next(1e300) return r end) or "", "bad argument #1", "huge after raises")
T.like(err(function() local r = c:next_n(-1) return r end) or "", "bad argument #1 to 'next_n'",
       "negative count raises")
T.like(err(function() local r = c:next_n(1.5) return r end) or "", "bad argument #1", "fractional count raises")
T.like(err(c.next, {}) or "", "bad argument #1", "wrong self raises")
T.like(err(function() local r = c:next_n() return r end) or "", "bad argument #1", "next_n needs a count")

-- c:format(t): RFC 3339 with the zone's offset, as `baton cron` prints
local ny = baton.cron("30 2 * * *", "America/New_York")
T.is(ny:format(ny:next(1772841600)), "2026-03-07T02:30:00-05:00", "format before the DST change")
T.is(ny:format(ny:next(ny:next(1772841600))), "2026-03-08T03:30:00-04:00", "format in the gap day: shifted, EDT")
T.is(baton.cron("@daily"):format(0), "1970-01-01T00:00:00Z", "UTC prints Z")
T.like(err(function() return ny:format(1e300) end) or "", "out of range", "an instant out of range raises")

T.done()
