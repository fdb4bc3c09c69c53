-- Helper of tests/bench/cron, run with `baton eval`: the timer half.
--
--   cron-timetable.lua ENTRIES SECONDS
--
-- ENTRIES schedules of `* * * * * *`, each parsed on its own as each job's
-- would be, on a timetable kept the way the node keeps its own (the
-- timetable loop of lua/baton/node.lua): one min-heap of (next instant,
-- entry) in lua/baton/heap.lua, served by one coroutine that sleeps until
-- the earliest instant but at most a second, pops what is due and puts
-- each entry back at its next instant after max(instant, now - 1). The
-- clock is the node's kind: the wall clock at the start carried on the
-- monotonic clock (node/clock.lua, without the cluster's offset). A fire
-- does nothing but note its lateness, so what is measured is the
-- timetable itself. After SECONDS prints
-- "<fires> <p50 us> <p99 us> <max us> <cpu %>": lateness is the clock when
-- the entry is popped minus its instant; CPU is the process's (os.clock)
-- over the wall time, as a share of one core.
local heap = require "baton.heap"

local entries, secs = tonumber(arg[1]), tonumber(arg[2])
assert(entries and secs, "usage: baton eval cron-timetable.lua ENTRIES SECONDS")

local base = baton.now() - baton.monotime()
local function now() return baton.monotime() + base end
local function sooner(a, b) return a.fire < b.fire end

local h, late = {}, {}
local start = now()
for _ = 1, entries do
  local cron = baton.cron("* * * * * *")
  heap.push(h, { fire = cron:next(start), cron = cron }, sooner)
end

local cpu0, wall0 = os.clock(), baton.monotime()
local stop = wall0 + secs
while baton.monotime() < stop do
  local t = now()
  while h[1] and h[1].fire <= t do
    local ev = heap.pop(h, sooner)
    late[#late + 1] = now() - ev.fire
    heap.push(h, { fire = ev.cron:next(math.max(ev.fire, t - 1)), cron = ev.cron }, sooner)
  end
  local d = h[1] and h[1].fire - now() or 1
  local left = stop - baton.monotime()
  if left < d then d = left end
  baton.sleep(d < 0 and 0 or d < 1 and d or 1)
end
local cpu = (os.clock() - cpu0) / (baton.monotime() - wall0) * 100

assert(#late > 0, "no entry fired")
table.sort(late)
local function us(x) return math.floor(x * 1e6 + 0.5) end
print(("%d %d %d %d %.2f"):format(#late, us(late[math.floor(#late / 2) + 1]),
                                  us(late[math.floor(#late * 99 / 100) + 1]), us(late[#late]), cpu))
