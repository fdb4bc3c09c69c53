-- The clock's sample keeping (lua/baton/node/clock.lua), without etcd: of
-- the samples kept, the one with the smallest delay counts, unless the
-- leader's clock stepped since (its lead moved): then only the samples
-- taken after the step count.
local T = require "tap"
local clock = require "baton.node.clock"

local function sample(lead, delay)
  return { lead = lead, delay = delay, err = delay / 2 + 0.001, offset = 0 }
end

local st = { samples = {}, burst = 0 }
clock._add(st, sample(100, 0.002))
clock._add(st, sample(100.001, 0.006))
T.is(clock._best(st).delay, 0.002, "the smallest delay counts")
T.is(#st.samples, 2, "samples that agree are all kept")
-- The leader's clock steps back 2 s: a new sample, slower to come back.
clock._add(st, sample(98, 0.009))
T.is(clock._best(st).lead, 98, "after the leader's clock stepped, the new sample counts")
T.is(#st.samples, 1, "and the samples from before the step are dropped")
clock._add(st, sample(98.002, 0.003))
T.is(clock._best(st).delay, 0.003, "samples after the step compete again by delay")
for i = 1, 10 do clock._add(st, sample(98, 0.004 + i / 1000)) end
T.is(#st.samples, clock.SAMPLES, "at most SAMPLES are kept")
T.done()
