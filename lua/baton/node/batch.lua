-- The node's write batcher: the transactions its runs make at about the
-- same moment (claims, ends of runs) go to etcd together, as the nested
-- transactions of one request, instead of one request each.
--
--   local b = batch.new(e)        -- e: the node's etcd client
--   local r, err, code = b:txn(t) -- as e:txn(t), same answer
--   b:txn(t, 0.01)                -- the same, but t may wait 10 ms for company
--   b:txn(t, nil, reg)            -- t holds a register write: see below
--
-- Why this keeps every guarantee of the transactions it carries: etcd
-- evaluates each nested transaction's compares by itself, so one member's
-- failed compare changes nothing for the others (a claim of one job never
-- depends on another's); a batch only ever holds members that touch
-- disjoint keys (no member writes a key another one writes, reads or
-- compares), so the batch has the effect of running its members one after
-- another in any order; and two transactions on one key are never
-- reordered (the later one waits for the batch that carries the earlier).
-- A member's answer is the nested transaction's own (succeeded,
-- responses) with the revision of the request that carried it: members
-- that wrote share that revision.
--
-- When a batch goes: at once while fewer than INFLIGHT batches are on
-- their way, else when one comes back; so a lone transaction waits for
-- nothing, and under load the members that came during a round trip go
-- together in the next one. A member that may linger (the end of a run:
-- nobody waits for it) waits up to that long for others, unless a member
-- that may not comes first and takes it along. A batch holds at most MAX
-- members and as many operations as etcd takes in one transaction
-- (--max-txn-ops, 128 by default, counted as etcd counts them: see
-- footprint), and about MAX_BYTES.
--
-- A register write (reg = {op =, key =, order =}) is an operation of t
-- (op, one of its success operations) that writes key only to raise it:
-- its own compare makes it do nothing when key holds an order as great
-- (P last/<job>: the newest run). Members whose only common key is the
-- same register may share a request, and of their register writes only
-- the one with the greatest order goes (the others' become empty
-- transactions): etcd refuses two writes of one key in one request, and
-- the one that goes leaves the key as all of them would have. (Should
-- that member's own compares fail, the register keeps its older value
-- until the next write: such a key says what is newest, it guards
-- nothing.) So many runs of one job, a queue's tasks, share requests.
--
-- Errors: when the request fails, every member gets its error, exactly as
-- if it had made the request itself (its caller's recovery for a lost
-- answer applies: the request may have been applied). Only when etcd
-- refused the request as a whole before applying anything (EINVAL: too
-- many operations, or a limit of its own; ETOOLARGE) is each member sent
-- again by itself.
local baton = require "baton"

local M = {}

-- members per batch; BATON_BATCH_MAX=1 in the node's environment turns
-- batching off (the benches compare so)
M.MAX = math.max(1, math.min(64, tonumber(os.getenv("BATON_BATCH_MAX") or "") or 64))
M.MAX_TXN_OPS = 128    -- etcd's --max-txn-ops default
M.MAX_BYTES = 512 * 1024
M.INFLIGHT = M.MAX > 1 and 2 or math.huge -- batches on their way at once

local B = {}
B.__index = B

-- What transaction t writes and reads (compares and gets), as sets of
-- keys; solo when it touches a range (it then goes alone). Also the
-- operations etcd counts for it (need) and its rough size in bytes.
local function footprint(t)
  local w, rd, solo, bytes = {}, {}, false, 0
  local function walk(tx)
    local opc = math.max(#(tx.compare or {}), #(tx.success or {}), #(tx.failure or {}))
    for _, c in ipairs(tx.compare or {}) do
      rd[c.key] = true
      if c.range_end then solo = true end
      bytes = bytes + #c.key + 32
    end
    local deepest = 0
    for _, list in ipairs { tx.success or {}, tx.failure or {} } do
      for _, op in ipairs(list) do
        if op.put then
          w[op.put.key] = true
          bytes = bytes + #op.put.key + #(op.put.value or "") + 32
        elseif op.delete then
          w[op.delete.key] = true
          if op.delete.range_end or op.delete.prefix then solo = true end
          bytes = bytes + #op.delete.key + 32
        elseif op.get then
          rd[op.get.key] = true
          if op.get.range_end or op.get.prefix then solo = true end
          bytes = bytes + #op.get.key + 32
        elseif op.txn then
          local n = walk(op.txn)
          if n > deepest then deepest = n end
        end
      end
    end
    -- etcd checks a nested transaction against what its parent leaves of
    -- the limit: a transaction needs its own count plus its deepest child's.
    return opc + deepest
  end
  local need = walk(t)
  -- (a third more than the bytes: what the JSON gateway's base64 cost,
  -- kept as headroom under etcd's request limit, which gRPC's framing and
  -- the keys' overhead also count against)
  return { w = w, r = rd, solo = solo, need = need, bytes = bytes * 4 / 3 }
end

-- sent (optional): called with the number of transactions of each request.
-- (fw, fr, freg: the keys the batches on their way write, read and write
-- as registers, counted)
function M.new(e, sent)
  return setmetatable({ e = e, sent = sent or function() end, queue = {}, inflight = 0,
                        fw = {}, fr = {}, freg = {} }, B)
end

-- Whether member m clashes with what writes the keys of w, reads those of
-- r and writes those of reg as registers: it writes one of w or r, reads
-- one of w, touches one of reg other than as a register, or writes its
-- register where the others touch that key otherwise.
local function clash(m, w, r, reg)
  for k in pairs(m.fp.w) do
    if w[k] or r[k] or reg[k] then return true end
  end
  for k in pairs(m.fp.r) do
    if w[k] or reg[k] then return true end
  end
  local g = m.fp.reg
  return g ~= nil and (w[g] ~= nil or r[g] ~= nil)
end

-- Counts m's keys in w, r and reg n more times (n = -1: once less).
local function add_keys(m, w, r, reg, n)
  local function count(set, k)
    local c = (set[k] or 0) + n
    set[k] = c > 0 and c or nil
  end
  for k in pairs(m.fp.w) do count(w, k) end
  for k in pairs(m.fp.r) do count(r, k) end
  if m.fp.reg then count(reg, m.fp.reg) end
end

-- Takes the next batch off the queue, in order. A member stays for a
-- later batch when it does not fit in this one, or clashes with a batch
-- on its way or with a member that stays: so two transactions on one key
-- reach etcd in the order they came, as they would one request each.
local function take(self)
  local q, batch, rest = self.queue, {}, {}
  local bw, br, breg, need, bytes = {}, {}, {}, 0, 0
  local sw, sr, sreg, blocked = {}, {}, {}, self.solo_flying -- (what stays; nothing goes after a range)
  for i = 1, #q do
    local m = q[i]
    if #batch == M.MAX or i > 4 * M.MAX then
      -- (the batch is full, or enough was looked at: the rest stays, in
      -- order, and a long queue costs no more to look at than a short one)
      for j = i, #q do rest[#rest + 1] = q[j] end
      break
    end
    local ok = not blocked and not clash(m, self.fw, self.fr, self.freg) and not clash(m, sw, sr, sreg)
      and (#batch == 0 and (not m.fp.solo or self.inflight == 0)
           or (#batch < M.MAX and not m.fp.solo and not batch[1].fp.solo
               and math.max(need, m.fp.need) + #batch + 1 <= M.MAX_TXN_OPS
               and bytes + m.fp.bytes <= M.MAX_BYTES and not clash(m, bw, br, breg)))
    if ok then
      batch[#batch + 1] = m
      add_keys(m, bw, br, breg, 1)
      if m.fp.need > need then need = m.fp.need end
      bytes = bytes + m.fp.bytes
    else
      rest[#rest + 1] = m
      add_keys(m, sw, sr, sreg, 1)
      if m.fp.solo then blocked = true end
    end
  end
  self.queue = rest
  return batch
end

local function answer(m, r, err, code)
  m.r, m.err, m.code, m.done = r, err, code, true
  m.cond:signal()
end

-- Sends one batch and hands each member its answer.
local function send(self, batch)
  self.sent(#batch)
  if #batch == 1 then
    local m = batch[1]
    return answer(m, self.e:txn(m.t))
  end
  -- Of the register writes of one key, the one of the greatest order goes.
  local top = {}
  for _, m in ipairs(batch) do
    local g = m.reg
    if g and (not top[g.key] or top[g.key].order < g.order) then top[g.key] = g end
  end
  local ops = {}
  for i, m in ipairs(batch) do
    local t = m.t
    if m.reg and top[m.reg.key] ~= m.reg then
      local success = {}
      for k, op in ipairs(t.success) do success[k] = op == m.reg.op and { txn = {} } or op end
      t = { compare = t.compare, success = success, failure = t.failure }
    end
    ops[i] = { txn = t }
  end
  local r, err, code = self.e:txn { success = ops }
  if not r and (code == "EINVAL" or code == "ETOOLARGE") then
    -- Refused as a whole, nothing applied: each by itself.
    for _, m in ipairs(batch) do
      self.sent(1)
      answer(m, self.e:txn(m.t))
    end
    return
  end
  for i, m in ipairs(batch) do
    if not r then
      answer(m, nil, err, code)
    else
      local sub = r.responses[i] or {}
      answer(m, { succeeded = sub.succeeded == true, responses = sub.responses or {},
                  revision = r.revision })
    end
  end
end

local monotime = baton.monotime
local pump

-- Wakes pump at monotonic time at (one sleeper for the earliest).
local function wake_at(self, at)
  if self.wake and self.wake <= at then return end
  self.wake = at
  baton.go(function()
    baton.sleep(math.max(0, at - monotime()))
    if self.wake == at then self.wake = nil end
    pump(self)
  end)
end

-- Sends batches while there are members waiting, due (or enough of them
-- to fill a batch), and room on the way.
function pump(self)
  while #self.queue > 0 and self.inflight < M.INFLIGHT do
    if #self.queue < M.MAX then
      local due = math.huge
      for _, m in ipairs(self.queue) do
        if m.due < due then due = m.due end
      end
      if due > monotime() then return wake_at(self, due) end
    end
    local batch = take(self)
    if #batch == 0 then return end -- (all wait for batches on their way)
    self.inflight = self.inflight + 1
    local solo = batch[1].fp.solo
    if solo then self.solo_flying = true end
    for _, m in ipairs(batch) do add_keys(m, self.fw, self.fr, self.freg, 1) end
    baton.go(function()
      local ok, perr = pcall(send, self, batch)
      self.inflight = self.inflight - 1
      if solo then self.solo_flying = false end
      for _, m in ipairs(batch) do add_keys(m, self.fw, self.fr, self.freg, -1) end
      if not ok then
        for _, m in ipairs(batch) do
          if not m.done then answer(m, nil, "EUNKNOWN: " .. tostring(perr), "EUNKNOWN") end
        end
      end
      pump(self)
    end)
  end
end

-- As e:txn(t), in the next batch; linger: seconds t may wait for others
-- (default 0); reg: its register write, if any (see the top).
function B:txn(t, linger, reg)
  local m = { t = t, fp = footprint(t), cond = baton._cond(), due = monotime() + (linger or 0),
              reg = reg }
  if reg then
    -- (its key is the register's alone: see clash)
    m.fp.w[reg.key], m.fp.r[reg.key], m.fp.reg = nil, nil, reg.key
  end
  self.queue[#self.queue + 1] = m
  -- (from a coroutine of its own: the members that come in this same turn
  -- of the loop are queued before it takes the batch)
  if not self.pumping then
    self.pumping = true
    baton.go(function()
      self.pumping = false
      pump(self)
    end)
  end
  if not m.done then m.cond:wait() end
  return m.r, m.err, m.code
end

return M
