-- The leader's term: what the elected leader runs while it leads
-- (node/session.lua starts M.run once elected): the first misfire check of
-- the term, then the scans for runs lost with their node (at once after a
-- running/ marker is deleted, and every 0.5 s), the misfire check every
-- 2 s and history pruning every minute. The work itself is done by
-- node/orphans.lua, node/misfires.lua and node/prune.lua; the term's two
-- tasks (leader.rescan, leader.running_watch) are declared in
-- node/init.lua's TASKS.
local baton = require "baton"
local keys = require "baton.keys"
local gc = require "baton.node.gc"
local orphans = require "baton.node.orphans"
local misfires = require "baton.node.misfires"
local prune = require "baton.node.prune"

local M = {}

local function log(level, msg, fields) baton.log[level](msg, fields) end

-- Runs while this node leads (until its term ends or the node stops).
function M.run(self)
  local P, e = self.P, self.e
  -- self.leader is a fresh table for each term: the loops of an earlier
  -- term (its session lost, the node elected again) end.
  local term = self.leader
  local function leading() return self.leader == term and not self.stopping end
  -- A node can win the election before its first listing of the store is
  -- applied; the first misfire check needs the jobs, or it finds nothing
  -- and the next one, a period later, judges a later stretch of time.
  while not self.listed and leading() do baton.sleep(0.05) end
  misfires.start(self)
  local t0, njobs = baton.monotime(), 0
  for _ in pairs(self.jobs) do njobs = njobs + 1 end
  -- (a term's first check reads every job's newest records: 64 jobs a
  -- request, a burst of garbage; from then on a check costs only the jobs
  -- that came due)
  gc.burst(self, misfires.check, self)
  local left = misfires.unseeded(self)
  log("info", "first misfire check of the term done", { node = self.name, jobs = njobs,
    unseeded = left, seconds = math.floor((baton.monotime() - t0) * 1000) / 1000 })
  -- (with thousands of jobs its responses were tens of MB: hand them back,
  -- as after a listing)
  if njobs >= 1000 then baton._release_memory() end
  orphans.scan(self)
  -- Markers disappear when their node's lease expires: scan within 0.2 s
  -- of a deletion (one scan for any number of them; most are runs that
  -- ended). A watch that ends, compacted or failed, is made again; the
  -- periodic scan below covers the gap.
  local ended = false
  self.forever("leader.rescan", function()
    while leading() do
      baton.sleep(0.2)
      if ended then
        ended = false
        orphans.scan(self)
      end
    end
  end)
  self.forever("leader.running_watch", function()
    while leading() do
      local w = e:watch(keys.dir(P, "running"), { prefix = true, no_put = true })
      if not w then
        baton.sleep(1)
      else
        while leading() do
          local evs, _, code = w:next(1)
          if not evs and code ~= "ETIMEDOUT" then break end
          if evs and #evs > 0 then ended = true end
        end
        w:cancel()
      end
    end
  end)
  -- The periodic scan (every 0.5 s) finds what a lagging watch delivers
  -- late: a lost run is handed out within TTL + 1 s of its node's death.
  local n = 0
  while leading() do
    baton.sleep(0.5)
    n = n + 1
    orphans.scan(self)
    if n % 4 == 0 then misfires.check(self) end
    if n % 120 == 0 then prune.round(self) end
  end
end

return M
