-- The conductor's garbage collector settings: the pause, tuned every
-- second from what is live (tune, a task of the node), and the step
-- multiplier raised while the node makes a burst of garbage (burst).
local baton = require "baton"

local M = {}

-- The conductor's GC pause: how far its Lua heap grows past what was live
-- before a new cycle starts (Lua's default, 200, lets it double). A node's
-- live heap is mostly its jobs (10,000 jobs: about 34 MB): at 200 a burst
-- of garbage (a listing, a scrape) could grow it, and the pages it keeps,
-- by as much again. But every cycle marks the whole live heap, so the
-- smaller the room, the more CPU each run's garbage costs (at 120 five
-- times as much as at 200; a busy node spent a third of its time in the
-- collector). So the room is GC_ROOM bytes of garbage, between 20% and
-- 100% of what is live, tuned every second from the smallest heap seen in
-- the last GC_WINDOW seconds (about what is live).
M.GC_ROOM = 16 * 1024 * 1024
M.GC_WINDOW = 10
M.GC_PAUSE = 120 -- (until the first tuning)

function M.gc_pause(live_bytes)
  local room = 100 * M.GC_ROOM / math.max(live_bytes, 1)
  return math.floor(100 + math.max(20, math.min(100, room)))
end

-- The tuning task (node/init.lua).
function M.tune(self)
  local seen, i = {}, 0
  while not self.stopping do
    baton.sleep(1)
    i = i % M.GC_WINDOW + 1
    seen[i] = collectgarbage("count") * 1024
    local live = math.huge
    for _, b in pairs(seen) do if b < live then live = b end end
    collectgarbage("setpause", M.gc_pause(live))
  end
end

-- How much the collector does per step, for each byte allocated, while the
-- node makes a burst of garbage: listing the job store, or the leader's
-- first misfire check reading every job's newest records (burst). At
-- Lua's default, 200, such a burst outruns it: the heap peaks at more than
-- twice what is live, and LuaJIT's allocator keeps what it once took from
-- the OS, so the node stays that large. A larger multiplier keeps the peak
-- near what is live for about the same CPU: each cycle does the same work,
-- sooner. (Outside bursts the default stays: a busy node's garbage is
-- steady.)
M.GC_BURST_STEPMUL = 800
M.GC_STEPMUL = 200

-- Runs fn(...) as a burst (above); bursts may overlap (a listing again
-- after a compaction while the leader's first check runs).
function M.burst(self, fn, ...)
  self.gc.bursts = self.gc.bursts + 1
  if self.gc.bursts == 1 then collectgarbage("setstepmul", M.GC_BURST_STEPMUL) end
  -- (the traceback is taken where the error was raised, not here)
  local r = { xpcall(fn, debug.traceback, ...) }
  self.gc.bursts = self.gc.bursts - 1
  if self.gc.bursts == 0 then collectgarbage("setstepmul", M.GC_STEPMUL) end
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, table.maxn(r))
end

return M
