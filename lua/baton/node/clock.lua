-- The node's clock offset against the cluster, and the corrected clock the
-- conductor schedules by (docs/architecture.md, "Clock skew").
--
-- Measurement: NTP's four-timestamp exchange (RFC 5905 section 8) through
-- etcd, which has no clock of its own. A node puts P clock/ping/<name> =
-- {seq, t1} on its session lease; the elected leader, which watches
-- P clock/ping/ while it leads, answers with P clock/pong/<name> = {seq, t1,
-- t2, t3, by} on its own lease; the node, watching its pong key, takes t4.
-- With the leader's clock L and this node's clock C:
--   offset (C - L) = -((t2 - t1) + (t3 - t4)) / 2
--   delay          = (t4 - t1) - (t3 - t2)       (t4 - t1 on the monotonic clock)
-- and the truth lies within offset +/- delay/2 whatever the split of the
-- delay between the two legs. Of the last SAMPLES exchanges the one with the
-- smallest delay counts. A burst of exchanges at start, then one every
-- INTERVAL; a change of the answering leader starts over.
--
-- Reference: the median of the live nodes' clocks, not the leader's alone,
-- so that a wrong leader does not drag the others. Each node publishes its
-- offset against the leader it measured (P nodes/<name> .clock, which the
-- conductor keeps in self.nodes); the leader counts with offset 0. A node's
-- correction is its offset minus the median of the offsets against the same
-- leader, i.e. its clock minus the median clock, and does not depend on
-- which node leads. With three nodes or more one wrong clock, the leader's
-- included, is found out; with two the median is their midpoint and each is
-- half the difference off: which of the two is wrong cannot be told.
--
-- Signs: offset and correction are positive when this node's clock is
-- ahead of the leader's, of the cluster's.
--
-- The corrected clock rides on the monotonic clock: each sample gives the
-- leader's clock as monotonic time + a base (its wall clock at the sample
-- minus its offset), so self.now() = baton.monotime() + base, where base
-- places the median clock. A step of this node's own wall clock (an NTP
-- step, an operator's date) does not move self.now() at all; it only shows
-- in the offset this node publishes. What moves self.now() are the other
-- clocks, and only through new samples: a move back (later) is taken at
-- once; a move forward (earlier) by more than TOLERANCE only once it has
-- held for HOLD_FORWARD seconds, because right after another clock steps,
-- samples taken before and after the step mix for a while, and a node must
-- never start an instant early on such a mix.
--
-- For the conductor (lua/baton/node/init.lua):
--   clock.start(self)      after the first join: sets self.clock, self.now()
--   clock.sample, clock.answer, clock.follow: its tasks (measure, answer
--                          while self.leader, update), until self.stopping
--   clock.known(self)      whether the correction is known yet
--   clock.wait(self, secs) waits for that, at most secs, then warns "clock
--                          offset unknown" and lets the node go on uncorrected
--   (the clock fields of the node's published info: node/session.lua)
--   self.clock = {offset, error, correction, ref, known, skewed, measured_at}
--   (error: delay/2 plus the millisecond resolution of the timestamps;
--   measured_at: the sample's time by this node's own clock)
local baton = require "baton"
local keys = require "baton.keys"
local runs = require "baton.node.runs"
local session = require "baton.node.session"
local json = baton.json

local abs, floor = math.abs, math.floor

local M = {}

M.MAX_SKEW = 0.5      -- default --max-skew, seconds
M.SAMPLES = 8         -- exchanges kept; the one with the smallest delay counts
M.BURST_GAP = 0.03    -- seconds between exchanges of the starting burst
M.INTERVAL = 3        -- seconds between exchanges afterwards
M.PONG_WAIT = 1       -- seconds an exchange waits for its answer
M.SETTLE = 2          -- seconds after its first sample a node waits for the
                      -- other nodes' offsets before it calls its clock known
M.HOLD = 8            -- seconds a known node keeps its correction while some
                      -- nodes measure against another leader (INTERVAL +
                      -- PONG_WAIT is enough for them to catch up)
M.RESOLUTION = 0.001  -- baton.now() has millisecond precision
M.REPUBLISH = 0.01    -- republish node info when a value moves by more
M.TOLERANCE = 0.02    -- seconds the corrected clock may move forward at once
M.HOLD_FORWARD = 2 * M.INTERVAL + M.PONG_WAIT + 1
                      -- seconds a larger forward move must hold first

local function log(level, msg, fields) baton.log[level](msg, fields) end

local function round(x)
  if type(x) ~= "number" then return nil end
  local r = floor(x * 1e4 + 0.5) / 1e4
  if r == 0 then r = 0 end -- no "-0" in the JSON
  return r
end

local function median(xs)
  table.sort(xs)
  local n = #xs
  if n % 2 == 1 then return xs[(n + 1) / 2] end
  return (xs[n / 2] + xs[n / 2 + 1]) / 2
end

-- Sleeps up to secs, in short naps, returning early when stop() is true.
local function nap(secs, stop)
  local until_ = baton.monotime() + secs
  while not stop() do
    local left = until_ - baton.monotime()
    if left <= 0 then return end
    baton.sleep(left < 0.1 and left or 0.1)
  end
end

-- The smallest-delay sample of the ones kept, or nil.
local function best(st)
  local b
  for _, s in ipairs(st.samples) do
    if not b or s.delay < b.delay then b = s end
  end
  return b
end

-- Starts measuring against another reference: leader ref's clock, in its
-- frame (the leader's name and how often its own clock stepped: offsets
-- measured against it before a step are of another frame).
local function reset(st, ref, frame)
  st.samples, st.ref, st.frame, st.burst, st.first_at = {}, ref, frame or ref, M.SAMPLES, nil
end

-- Keeps sample s. One that disagrees with the best kept so far about the
-- leader's clock (its lead, beyond both error bounds) means the leader's
-- clock stepped: the older samples describe a clock that is gone, and the
-- smallest delay among them must not win.
local function add(st, s)
  local b = best(st)
  if b and b.lead and s.lead and abs(s.lead - b.lead) > s.err + b.err + M.RESOLUTION * 10 then
    st.samples = {}
  end
  local list = st.samples
  list[#list + 1] = s
  if #list > M.SAMPLES then table.remove(list, 1) end
  st.burst = st.burst > 0 and st.burst - 1 or 0
  st.first_at = st.first_at or baton.monotime()
end

-- One exchange with whichever node leads, through watcher w on this node's
-- pong key. Returns a sample {offset, delay, err, by, at}, or nil and why:
-- "put" (the ping could not be written), "watch" (the watcher broke),
-- "timeout" (no answer within PONG_WAIT), "leader" (this node leads now).
local function exchange(self, st, w)
  st.seq = st.seq + 1
  local seq = st.seq
  local s = runs.live(self) -- nothing is written on a session declared lost
  if not s then return nil, "put" end
  local t1, m1 = baton.now(), baton.monotime()
  local ok = self.e:put(keys.key(self.P, "clock", "ping", self.name),
                        json.encode { seq = seq, t1 = t1 }, { lease = s.lease })
  if not ok then return nil, "put" end
  while not self.stopping and not self.leader do
    if baton.monotime() - m1 > M.PONG_WAIT then return nil, "timeout" end
    local evs, _, code = w:next(0.1)
    if not evs then
      if code ~= "ETIMEDOUT" then return nil, "watch" end
    else
      local m4 = baton.monotime()
      for _, ev in ipairs(evs) do
        local dok, p = pcall(json.decode, ev.type == "put" and ev.kv.value or "")
        if dok and type(p) == "table" and p.seq == seq and p.t1 == t1
           and type(p.t2) == "number" and type(p.t3) == "number" and type(p.by) == "string" then
          local t4 = t1 + (m4 - m1)
          local delay = (m4 - m1) - (p.t3 - p.t2)
          delay = delay > 0 and delay or 0
          local offset = -((p.t2 - t1) + (p.t3 - t4)) / 2
          -- (t1, t2 and t3 are read to the millisecond: the bound widens by
          -- that.) lead: the leader's clock minus this node's monotonic
          -- clock, which this node's own wall clock does not enter.
          return { offset = offset, delay = delay, err = delay / 2 + M.RESOLUTION, by = p.by,
                   frame = type(p.frame) == "string" and p.frame or p.by,
                   at = baton.now(), lead = (t1 - m1) - offset }
        end
      end
    end
  end
  return nil, "leader"
end

-- Measures this node's offset against the leader until the node stops.
local function sampler(self, st)
  local w
  while not self.stopping do
    if self.leader then
      -- The leader is its own reference: offset 0, exactly. When its own
      -- wall clock steps, that is a new frame: what the others measured
      -- before no longer holds, and nothing moves until they measure again.
      local wm = baton.now() - baton.monotime()
      local stepped = st.ref == self.name and st.samples[1]
        and abs(wm - st.samples[1].lead) > M.RESOLUTION * 10
      if st.ref ~= self.name or #st.samples == 0 or stepped then
        if stepped then
          st.epoch = (st.epoch or 0) + 1
          log("info", "clock: this leader's own clock stepped; the others measure again",
              { node = self.name, by = round(wm - st.samples[1].lead) })
        end
        reset(st, self.name, self.name .. "#" .. (st.epoch or 0))
        add(st, { offset = 0, delay = 0, err = 0, by = self.name, at = baton.now(), lead = wm })
        st.burst = 0
        M.update(self)
      end
      nap(0.1, function() return self.stopping or not self.leader end)
    else
      if not w then
        w = self.e:watch(keys.key(self.P, "clock", "pong", self.name))
        if not w then nap(1, function() return self.stopping end) end
      end
      if w then
        local s, why = exchange(self, st, w)
        if why == "watch" then w:cancel(); w = nil end -- compacted or broken: a new watch
        if s then
          if s.by ~= st.ref or s.frame ~= st.frame then
            if st.ref then
              log("info", "clock: measuring against a new leader", { node = self.name, ref = s.by,
                                                                      previous = st.ref })
            end
            reset(st, s.by, s.frame)
          end
          add(st, s)
          M.update(self)
        end
        -- After an answer: the burst's short gap, then INTERVAL. Without
        -- one: at once again after a timeout (it waited already), else 1 s.
        local gap = s and (st.burst > 0 and M.BURST_GAP or M.INTERVAL)
                    or (why == "timeout" and M.BURST_GAP or (why == "leader" and 0 or 1))
        if s or why == "timeout" then
          -- (Woken early when the leader measured against leaves: the next
          -- one answers the next ping.)
          nap(gap, function()
            return self.stopping or self.leader or (st.ref and self.listed and not self.nodes[st.ref])
          end)
        elseif why ~= "leader" then
          -- A failure that came at once (etcd refused the ping, or this
          -- node's session is lost): wait the whole gap, or this loop
          -- would spin without ever yielding to the node's event loop.
          nap(gap, function() return self.stopping end)
        end
      end
    end
  end
  if w then w:cancel() end
end

-- While this node leads, answers every ping under P clock/ping/.
local function answerer(self)
  local pfx = keys.dir(self.P, "clock", "ping")
  while not self.stopping do
    nap(3600, function() return self.stopping or self.leader end)
    if self.stopping then break end
    local w = self.e:watch(pfx, { prefix = true, no_delete = true })
    if not w then
      nap(1, function() return self.stopping end)
    else
      while self.leader and not self.stopping do
        local evs, _, code = w:next(0.2)
        if evs then
          local t2 = baton.now()
          for _, ev in ipairs(evs) do
            local name = keys.under(pfx, ev.kv.key)
            local ok, p = pcall(json.decode, ev.kv.value or "")
            if ok and type(p) == "table" and type(p.t1) == "number" and name ~= "" then
              self.go(function()
                local s = runs.live(self)
                if not s then return end
                local t3 = baton.now()
                self.e:put(keys.key(self.P, "clock", "pong", name),
                           json.encode { seq = p.seq, t1 = p.t1, t2 = t2, t3 = t3, by = self.name,
                                         frame = self.clock_state.frame },
                           { lease = s.lease })
              end)
            end
          end
        elseif code ~= "ETIMEDOUT" then
          break
        end
      end
      w:cancel()
    end
  end
end

-- Whether two views of the clock differ enough to publish again.
local function differs(a, b)
  if not b then return true end
  if (a.known or false) ~= (b.known or false) or (a.skewed or false) ~= (b.skewed or false)
     or a.ref ~= b.ref or a.frame ~= b.frame then return true end
  for _, k in ipairs { "offset", "correction" } do
    local x, y = a[k], b[k]
    if type(x) ~= "number" then x = nil end
    if type(y) ~= "number" then y = nil end
    if (x == nil) ~= (y == nil) or (x and abs(x - y) > M.REPUBLISH) then return true end
  end
  return false
end

-- The offsets against this node's leader (st.ref) that the other live
-- nodes published ({[name] = offset}, the leader's own 0), and how many
-- nodes measure against another leader (not yet ours).
local function peer_offsets(self, st)
  local ref = st.ref
  local offsets, waiting = {}, 0
  for name, n in pairs(self.nodes) do
    if name ~= self.name and name ~= ref then
      local k = type(n) == "table" and n.clock
      if type(k) == "table" then
        if (k.frame or k.ref) == st.frame and type(k.offset) == "number" then
          offsets[name] = k.offset
        else
          waiting = waiting + 1 -- measuring, not (yet) against our leader
        end
      end -- (a node without a clock field does not measure: left out)
    end
  end
  if ref == self.name or self.nodes[ref] then offsets[ref] = 0 end
  return offsets, waiting
end

-- Takes this node's best sample b: its offset now, and the correction once
-- settled (see M.update).
local function correct(self, st, c, b)
  local ref = st.ref
  local offsets, waiting = peer_offsets(self, st)
  -- This node's offset now: its wall clock may have stepped since the
  -- sample (the leader's own is the leader clock itself).
  local lead = b.lead
  local mine = ref == self.name and 0 or (baton.now() - baton.monotime()) - lead
  offsets[self.name] = mine
  local xs = {}
  for _, o in pairs(offsets) do xs[#xs + 1] = o end
  c.offset, c.error, c.ref, c.frame, c.measured_at = mine, b.err, ref, st.frame, b.at
  local now = baton.monotime()
  if waiting == 0 then st.waiting_since = nil else st.waiting_since = st.waiting_since or now end
  local settled = waiting == 0
  if not settled and #xs > waiting then
    settled = now - (c.known and st.waiting_since or st.first_at) >= (c.known and M.HOLD or M.SETTLE)
  end
  -- (Not before the node's first listing of P nodes/: until then it
  -- would take its own clock for the median.)
  if self.listed and settled then
    local mid = median(xs)
    c.correction = mine - mid
    M.set_base(self, st, lead + mid, not c.known)
    if not c.known then
      c.known = true
      log("info", "clock offset known", { node = self.name, correction = round(c.correction),
        offset = round(c.offset), error = round(c.error), ref = ref, nodes = #xs,
        waited_for = waiting > 0 and waiting or nil })
    end
  end
end

-- Logs a change of the correction across --max-skew.
local function note_skew(self, c)
  local skewed = c.known and abs(c.correction) > self.max_skew or false
  if skewed ~= c.skewed then
    c.skewed = skewed
    local f = { node = self.name, correction = round(c.correction), offset = round(c.offset),
                error = round(c.error), ref = c.ref, max_skew = self.max_skew }
    if skewed then
      log("warn", "clock skew exceeds --max-skew: this node's clock is off the cluster's; "
          .. "it schedules by the corrected clock", f)
    else
      log("info", "clock skew back within --max-skew", f)
    end
  end
end

-- Republishes what moved; also when the node's own entry as etcd has it
-- (self.nodes, from the watch) still differs a second later: a publish
-- failed, or one from elsewhere in the node with older values landed last.
local function republish(self, st, c)
  local now = baton.monotime()
  local mine = { known = c.known, skewed = c.skewed, ref = c.ref, frame = c.frame, offset = c.offset,
                 correction = c.known and c.correction or nil }
  local seen = self.nodes[self.name]
  seen = type(seen) == "table" and type(seen.clock) == "table" and seen.clock or {}
  if differs(mine, st.published)
     or (not st.publishing and now - (st.published_at or 0) > 1 and differs(mine, seen)) then
    st.published, st.published_at = mine, now
    st.dirty = true
    if not st.publishing then
      -- One publisher at a time: two puts in flight could land in either order.
      st.publishing = true
      self.go(function()
        while st.dirty and not self.stopping do
          st.dirty = false
          session.publish(self)
        end
        st.publishing = false
      end)
    end
  end
end

-- Recomputes the correction from this node's best sample and the offsets
-- the other live nodes published against the same leader; settles whether
-- the clock is known; logs a change across --max-skew; republishes the
-- node's info when something moved.
--
-- A new correction is taken once every live node that measures has
-- published an offset against the same leader. Until then the median would
-- be taken over too few clocks: the first correction waits for that up to
-- SETTLE seconds after the first sample, a later one (after a leader change)
-- keeps the previous correction, which does not depend on the leader, up to
-- HOLD seconds; either then goes on with the nodes it has if they are more
-- than half of the live nodes that measure.
function M.update(self)
  local st, c = self.clock_state, self.clock
  if not st then return end
  local b = best(st)
  if b then correct(self, st, c, b) end
  note_skew(self, c)
  republish(self, st, c)
end

-- Moves the corrected clock to base (see the top of this file): at once
-- when it comes first, moves it back, or forward by at most TOLERANCE;
-- else once the same forward move has held for HOLD_FORWARD seconds.
function M.set_base(self, st, base, first)
  local now = baton.monotime()
  if first or not st.base or base <= st.base + M.TOLERANCE then
    st.base, st.ahead = base, nil
    return
  end
  local a = st.ahead
  if not a or abs(base - a.base) > M.TOLERANCE then
    st.ahead = { base = base, since = now }
  elseif now - a.since >= M.HOLD_FORWARD then
    log("info", "clock: the cluster's clock moved ahead; following it",
        { node = self.name, by = round(base - st.base) })
    st.base, st.ahead = base, nil
  end
end

-- True once the node knows its clock.
function M.known(self)
  return self.clock ~= nil and self.clock.known
end

-- Waits until the clock is known, or secs have passed: then warns once and
-- the node goes on with correction 0 (until a measurement comes). Returns
-- whether it is known.
function M.wait(self, secs)
  local deadline = baton.monotime() + secs
  while not M.known(self) and not self.stopping and baton.monotime() < deadline do
    baton.sleep(0.02)
  end
  if not M.known(self) and not self.stopping then
    log("warn", "clock offset unknown: no leader answered; scheduling by the uncorrected clock",
        { node = self.name, waited = secs })
    return false
  end
  return M.known(self)
end

-- Sets self.clock, the clock's state and self.now() (the corrected clock
-- once known); its tasks, below, measure and answer until self.stopping.
function M.start(self)
  self.max_skew = self.max_skew or M.MAX_SKEW
  self.clock = { known = false, skewed = false }
  local st = { samples = {}, seq = 0, burst = M.SAMPLES }
  self.clock_state = st
  self.now = function()
    if st.base then return baton.monotime() + st.base end
    return baton.now()
  end
end

-- The clock's tasks (node/init.lua starts them once clock.start has run):
-- measuring, answering others' pings while this node leads, and updating
-- the correction from the samples and the other nodes' offsets.
function M.sample(self) return sampler(self, self.clock_state) end
M.answer = answerer
function M.follow(self)
  while not self.stopping do
    baton.sleep(0.2)
    M.update(self)
  end
end

-- (for tests: the sample keeping, without etcd)
M._add, M._best = add, best

return M
