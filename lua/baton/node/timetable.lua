-- The timetable: the node's one heap of next instants (self.timetable, a
-- min-heap of {fire, name, j}: the next instant of job version j), and the
-- loop that serves it and the turns heap of node/triggers.lua.
--
-- One heap for the whole node, served by one coroutine that sleeps until
-- the earliest instant but at most a second, so a wall-clock step is
-- noticed within a second. Idle, a node wakes once a second whatever the
-- number of jobs. An entry whose job was replaced or removed is dropped
-- when it comes up.
--
-- Time and clock steps (what this loop does; cron.h has the DST rules):
-- - Instants are absolute: each entry holds the next instant of its job
--   after a time (spec.cron:next), in epoch seconds by self.now(), and the
--   loop waits for the earliest one. Nothing "sleeps until 02:00".
-- - self.now() is the cluster's median clock riding on the monotonic clock
--   (node/clock.lua): a step of this machine's own wall clock does not move
--   it. It moves when the other clocks do, through new samples: back at
--   once, forward by more than clock.TOLERANCE only once the move has held.
--   Until the offset is known the loop does not start (clock.wait, at most
--   2 x TTL); if it stays unknown, self.now() is the uncorrected wall clock
--   (baton.now) and this machine's clock steps do move it.
-- - Forward (a stall of the loop, a suspend, self.now() moving forward): an
--   entry that is late fires once, with the instant that was due, and is
--   put back at its next instant after max(that instant, now - 1): the
--   instant of the current second, when there is one, fires next, at once.
--   The instants in between are not run here; they are the leader's misfire
--   accounting (node/misfires.lua).
-- - Backward: computed instants are kept, so nothing fires twice; an entry
--   waits until self.now() reaches its instant again. There is no threshold
--   beyond which the entries are computed afresh: after a backward move of
--   hours, cron jobs wait those hours.
-- - @every: the next instant is the previous one plus the interval (the
--   first: when the job was loaded plus the interval; after a forward move,
--   now - 1 plus the interval), on self.now(): it moves when self.now() does.
-- - @manual and queue jobs have no entry.
local baton = require "baton"
local util = require "baton.util"
local heap = require "baton.heap"
local clock = require "baton.node.clock"
local triggers = require "baton.node.triggers"

local M = {}

local function log(level, msg, fields)
  baton.log[level](msg, fields)
end

local function sooner(a, b) return a.fire < b.fire end

-- Puts the next instant of job version j after `after` on the timetable.
function M.schedule(self, name, j, after)
  local spec = j.spec
  if spec.manual or spec.queue then return end
  local fire = spec.cron:next(after or self.now())
  if fire then heap.push(self.timetable, { fire = fire, name = name, j = j }, sooner) end
end

-- The timetable's task (node/init.lua): fires what is due, sleeping until
-- the next instant or turn, at most a second.
function M.run(self)
  local h = self.timetable
  -- No instant before the node knows its clock (node/clock.lua), or 2 x TTL.
  clock.wait(self, 2 * self.ttl)
  while not self.stopping do
    local now = self.now()
    while h[1] and h[1].fire <= now do
      local ev = heap.pop(h, sooner)
      if self.jobs[ev.name] == ev.j then
        -- After a stall or a forward clock step, go on from now: the
        -- instants in between are the leader's misfire accounting.
        M.schedule(self, ev.name, ev.j, math.max(ev.fire, now - 1))
        if not ev.j.paused then
          local ok, err = xpcall(triggers.instant_due, debug.traceback, self, ev.name, ev.j, ev.fire)
          if not ok then
            log("error", "instant not taken here: deciding this node's turn failed",
                { node = self.name, job = ev.name, instant = util.instant(ev.fire), error = err })
          end
        end
      end
    end
    local d = h[1] and h[1].fire - self.now() or 1
    local t = triggers.turns_due(self)
    if t and t < d then d = t end
    baton.sleep(d < 0 and 0 or d < 1 and d or 1)
  end
end

return M
