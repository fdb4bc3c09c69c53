-- A run's kept output, written by the worker that runs it (it has the
-- lines, its own etcd client and the attempt's fence): what each attempt
-- says — ctx.log lines, print / io.write, and the stdout and stderr of the
-- programs it starts with baton.exec / baton.spawn — redacted of its
-- secrets, cut into lines, and stored in etcd while it runs, capped. How
-- it is stored, and read back, is lua/baton/output.lua's.
--
-- Every write is a transaction that compares the attempt's fence (the
-- create revision of its lease-bound running/ marker), like ctx:put_fenced,
-- and none is made once the node's fence board says its lease may be gone:
-- an attempt that lost its claim stores nothing more.
--
-- The cap (CAP bytes per attempt: each line's text and LINE_COST bytes for
-- its fields) holds both in the worker's memory and in etcd: the oldest
-- lines are dropped first, and counted (the gap in n). Lines are written in
-- chunks of at most CAP/8, at most every INTERVAL seconds and at most RATE
-- bytes per second, each flush one transaction (its chunks, and one range
-- delete of the oldest chunks past the cap), so a job printing a megabyte a
-- second costs one write a second of at most CAP bytes, and a job that
-- prints nothing costs no write at all.
local baton = require "baton"
local keys = require "baton.keys"
local native = require "baton.worker.native"
local stored_output = require "baton.output"
local json = baton.json

local format, floor, concat, find = string.format, math.floor, table.concat, string.find

local M = {}

M.CAP = stored_output.CAP -- bytes of text kept per attempt
M.INTERVAL = 0.5 -- seconds between flushes, at least
M.RATE = 64 * 1024 -- bytes per second written, at most (per attempt)
M.FINAL_WAIT = 3 -- seconds the last flush may take, etcd failing
M.LINE_MAX = 4096 -- longer lines are cut into lines of this many bytes
M.LINE_COST = 48 -- bytes a line counts for besides its text (its JSON fields)


---------------------------------------------------------------------------
-- redaction

M.REDACTED = "***"

-- The places of the secrets in text: a sorted list of {a, b} (byte
-- ranges), occurrences that overlap merged into one, or nil when there is
-- none. Every occurrence counts, overlapping ones too ("aa" in "aaa").
local function spans(text, secrets)
  local list
  for i = 1, #secrets do
    local s = secrets[i]
    if s ~= "" then
      local a, b = find(text, s, 1, true)
      while a do
        list = list or {}
        list[#list + 1] = { a, b }
        a, b = find(text, s, a + 1, true)
      end
    end
  end
  if not list then return nil end
  table.sort(list, function(x, y) return x[1] < y[1] or (x[1] == y[1] and x[2] > y[2]) end)
  local merged, cur = {}, list[1]
  for i = 2, #list do
    local n = list[i]
    if n[1] <= cur[2] then
      if n[2] > cur[2] then cur = { cur[1], n[2] } end
    else
      merged[#merged + 1] = cur
      cur = n
    end
  end
  merged[#merged + 1] = cur
  return merged
end

-- text with every occurrence of each secret replaced by *** (M.REDACTED);
-- occurrences that overlap are one ***.
function M.redact(text, secrets)
  local sp = spans(text, secrets)
  if not sp then return text end
  local parts, from = {}, 1
  for _, r in ipairs(sp) do
    parts[#parts + 1] = text:sub(from, r[1] - 1)
    parts[#parts + 1] = M.REDACTED
    from = r[2] + 1
  end
  parts[#parts + 1] = text:sub(from)
  return concat(parts)
end

-- text as it can be stored: a NUL byte (which the JSON of a chunk cannot
-- hold) becomes the four characters \x00, as `baton job logs` shows other
-- control characters. Everything else is kept.
function M.clean(text)
  if not find(text, "\0", 1, true) then return text end
  return (text:gsub("%z", "\\x00"))
end

-- The length of the longest end of text that is the beginning (not the
-- whole) of a secret: those bytes may be a secret that is not all there
-- yet.
local function pending(text, secrets)
  local n, best = #text, 0
  for i = 1, #secrets do
    local s = secrets[i]
    local first = s:sub(1, 1)
    if #s > best + 1 and first ~= "" then
      -- the earliest start in the last #s - 1 bytes that matches
      local p = find(text, first, math.max(1, n - #s + 2), true)
      while p and n - p + 1 > best do
        if text:sub(p) == s:sub(1, n - p + 1) then best = n - p + 1; break end
        p = find(text, first, p + 1, true)
      end
    end
  end
  return best
end

-- A line cutter for one stream of text (what a run writes to its stdout,
-- the stderr of one program): lines longer than LINE_MAX are cut into
-- pieces, and the secrets are redacted before any cut, so that no secret
-- is ever stored in two halves. A piece ends before a secret that crosses
-- its end (a piece may be shorter than LINE_MAX for it), and the last
-- bytes that may begin a secret (at most as many as the longest secret)
-- wait for what comes next. So it holds at most LINE_MAX bytes and the
-- longest secret.
local Cut = {}
Cut.__index = Cut

function M.cutter(secrets)
  local longest = 0
  for _, s in ipairs(secrets) do if #s > longest then longest = #s end end
  return setmetatable({ secrets = secrets, longest = longest, carry = "" }, Cut)
end

-- Cuts the pieces off the line being written while it is longer than
-- LINE_MAX; adds them (redacted) to out.
function Cut:cut(out)
  local secrets, max = self.secrets, M.LINE_MAX
  while #self.carry > max do
    local raw, k = self.carry, max
    if #raw < k + self.longest then
      -- A secret that starts at or before k may not be all there yet.
      k = math.min(k, #raw - pending(raw, secrets))
    end
    if k >= 1 then
      -- Every secret that starts at or before k is within the window: the
      -- piece ends before one that crosses k, or after it when it begins
      -- the piece (a run of secrets longer than a line).
      for _, r in ipairs(spans(raw:sub(1, k + self.longest), secrets) or {}) do
        if r[1] <= k and r[2] > k then k = r[1] > 1 and r[1] - 1 or r[2] end
      end
    end
    if k < 1 then break end -- (wait for the rest of a long secret)
    out[#out + 1] = M.redact(raw:sub(1, k), secrets)
    self.carry = raw:sub(k + 1)
    self.was_cut = true
  end
  return out
end

-- Bytes of the line being written (no newline in them): the pieces cut
-- off so far, redacted.
function Cut:more(text)
  self.carry = self.carry .. text
  return self:cut({})
end

-- The line ends with text: what is left of it, redacted (a list of one,
-- or none for a line that was all cut off already and had nothing left).
function Cut:last(text, out)
  out = out or {}
  local line = self.carry .. text
  self.carry = ""
  if line ~= "" or not self.was_cut then out[#out + 1] = M.redact(line, self.secrets) end
  self.was_cut = nil
  return out
end

-- Text as written (newlines in it end lines): the complete lines and the
-- pieces cut off, redacted, in order.
function Cut:feed(data)
  local out, from = {}, 1
  while true do
    local nl = find(data, "\n", from, true)
    if not nl then break end
    self:last(data:sub(from, nl - 1), out)
    from = nl + 1
  end
  self.carry = self.carry .. data:sub(from)
  return self:cut(out)
end

-- The stream ended: an unfinished last line, redacted (or nothing).
function Cut:finish()
  if self.carry == "" then return {} end
  return self:last("")
end

---------------------------------------------------------------------------
-- an attempt's buffer (in the worker)

local B = {}
B.__index = B

-- A buffer for one attempt. o: {etcd, P, job, id, attempt, marker, fence,
-- cap, secrets, capture (true: also take what programs print)}.
function M.new(o)
  local self = setmetatable({
    e = o.etcd or baton.etcd, P = o.P, job = o.job, id = o.id, attempt = o.attempt,
    marker = o.marker, fence = o.fence, cap = o.cap or M.CAP, secrets = o.secrets or {},
    q = {}, qh = 1, qt = 0, qbytes = 0, -- lines not written yet
    n = 0,                             -- lines said so far
    chunks = {}, ch = 1, ct = 0,       -- chunks in etcd, chunks[ch..ct]: {key, bytes}
    sbytes = 0, nchunk = 0, writes = 0,
  }, B)
  self.prefix = keys.output(o.P, o.job, o.id, o.attempt)
  if o.capture then self.sink = native.output_capture(self.cap) end
  return self
end

-- Lines dropped before they were queued (programs' lines dropped by the
-- capture's own cap): they count in n, as a gap.
function B:skip(n)
  self.n = self.n + n
end

-- Queues one line: {stream=, text=, t=, level=, fields=, cmd=}. The oldest
-- queued lines go while the queued lines pass the cap. The text is
-- redacted whole, then a text longer than LINE_MAX is cut into lines of
-- LINE_MAX bytes (what the run prints comes already cut, by a cutter:
-- this is for ctx.log and the like).
function B:add(line)
  if self.sink and not line.from_sink then self:drain() end
  line.from_sink = nil
  local text = line.text
  if type(text) ~= "string" then text = tostring(text) end
  text = M.clean(M.redact(text, self.secrets))
  while #text > M.LINE_MAX do
    local piece = {}
    for k, v in pairs(line) do piece[k] = v end
    piece.text = text:sub(1, M.LINE_MAX)
    self:queue(piece)
    text = text:sub(M.LINE_MAX + 1)
  end
  line.text = text
  self:queue(line)
end

local ARRAY_MT = getmetatable(json.array())

-- A copy of table v with its strings (keys too) redacted and cleaned, for
-- its JSON; nil for a cycle.
local function scrubbed(v, secrets, seen)
  if seen[v] then return nil end
  seen[v] = true
  local c = {}
  for k, x in pairs(v) do
    if type(k) == "string" then k = M.clean(M.redact(k, secrets)) end
    if type(x) == "string" then x = M.clean(M.redact(x, secrets))
    elseif type(x) == "table" and x ~= json.null then x = scrubbed(x, secrets, seen) end
    c[k] = x
  end
  seen[v] = nil
  return setmetatable(c, getmetatable(v) == ARRAY_MT and ARRAY_MT or nil)
end

-- A field's value as stored: strings, finite numbers, booleans and null as
-- they are (a number or boolean that shows a secret as text becomes that
-- text, redacted), tables as their JSON, anything else as text; redacted
-- and cleaned.
local function plain(v, secrets)
  local t = type(v)
  if t == "number" and (v ~= v or v == math.huge or v == -math.huge) then
    v, t = tostring(v), "string"
  end
  if t == "number" or t == "boolean" then
    local s = tostring(v)
    local r = M.redact(s, secrets)
    if r == s then return v end
    return r
  end
  if v == json.null then return v end
  if t == "table" then
    local ok, text = pcall(json.encode, scrubbed(v, secrets, {}))
    if ok then return text end
  end
  return M.clean(M.redact(tostring(v), secrets))
end

function B:queue(line)
  self.n = self.n + 1
  line.n = self.n
  line.t = line.t or baton.now()
  if line.fields then
    local f = {}
    for k, v in pairs(line.fields) do
      k = M.clean(M.redact(tostring(k), self.secrets))
      while f[k] ~= nil do k = k .. "_" end -- (two keys redacted alike)
      f[k] = plain(v, self.secrets)
    end
    line.fields = next(f) and f or nil
  end
  line.cost = #line.text + M.LINE_COST
  self.qt = self.qt + 1
  self.q[self.qt] = line
  self.qbytes = self.qbytes + line.cost
  while self.qbytes > self.cap and self.qh < self.qt do
    self.qbytes = self.qbytes - self.q[self.qh].cost
    self.q[self.qh] = nil
    self.qh = self.qh + 1
  end
end

-- Moves what the programs printed from the capture into the queue. The
-- capture cuts a program's long lines at LINE_MAX (cont: more of the line
-- follows); the pieces of each stream (tap) of each program are joined
-- here by a cutter, so that secrets are redacted before they are cut.
-- Lines dropped by the capture's cap may be pieces of a long line: the
-- unfinished lines are dropped with them.
function B:drain()
  local sink = self.sink
  if not sink then return end
  local lines, dropped = sink:take()
  if not lines then return end
  self:skip(dropped)
  local taps = self.taps or {}
  self.taps = taps
  if dropped > 0 then
    for k in pairs(taps) do taps[k] = nil end
  end
  for i = 1, #lines do
    local l = lines[i]
    local cut = taps[l.tap]
    local texts
    if l.cont then
      if not cut then
        cut = M.cutter(self.secrets)
        cut.stream, cut.cmd = l.stream, l.cmd
        taps[l.tap] = cut
      end
      texts = cut:more(l.text)
    elseif cut then
      taps[l.tap] = nil
      texts = cut:last(l.text)
    else
      texts = { l.text }
    end
    local cmd = l.cmd:match("[^/]*$")
    for _, text in ipairs(texts) do
      self:add { stream = l.stream, text = text, t = l.t, cmd = cmd, from_sink = true }
    end
  end
end

local function encode_line(l)
  return { n = l.n, t = floor(l.t * 1000 + 0.5) / 1000, stream = l.stream, text = l.text,
           level = l.level, fields = l.fields, cmd = l.cmd }
end

-- Writes the queued lines as the next chunks (each at most cap/8 bytes),
-- and deletes the oldest chunks (one range) while what is stored would
-- pass the cap: since no chunk is larger than an eighth of the cap, what
-- is left is always at least 7/8 of it, the newest lines. Fenced. Returns
-- true when nothing is left to write, nil when etcd could not be asked
-- (the lines stay queued), false once this attempt may write no more.
function B:flush()
  self:drain()
  if self.dead then return false end
  if self.qt < self.qh then return true end
  -- (the fence board is the worker's binding; a process without it, such
  -- as a test of this module, has none to read.)
  if native.fenced and native.fenced() then
    self.dead = "the node's lease may be gone"
    return false
  end
  local last, piece_max = self.qt, math.max(1, floor(self.cap / 8))
  local pieces, piece, pbytes, bytes = {}, {}, 0, 0
  for i = self.qh, last do
    local l = self.q[i]
    if pbytes + l.cost > piece_max and #piece > 0 then
      pieces[#pieces + 1] = { lines = piece, bytes = pbytes }
      piece, pbytes = {}, 0
    end
    piece[#piece + 1] = encode_line(l)
    pbytes = pbytes + l.cost
    bytes = bytes + l.cost
  end
  pieces[#pieces + 1] = { lines = piece, bytes = pbytes }
  local ops = {}
  for k, pc in ipairs(pieces) do
    pc.key = self.prefix .. format("%08d", self.nchunk + k)
    ops[k] = { put = { key = pc.key, value = json.encode { cap = self.cap, lines = pc.lines } } }
  end
  local stored, drop = self.sbytes + bytes, self.ch
  while stored > self.cap and drop <= self.ct do
    stored = stored - self.chunks[drop][2]
    drop = drop + 1
  end
  if drop > self.ch then
    -- The oldest chunks, ch .. drop-1: one range.
    local upto = drop <= self.ct and self.chunks[drop][1] or pieces[1].key
    ops[#ops + 1] = { delete = { key = self.chunks[self.ch][1], range_end = upto } }
  end
  self.flushing = true
  local r = self.e:txn {
    compare = { { key = self.marker, target = "create", op = "==", value = self.fence } },
    success = ops,
  }
  self.flushing = false
  if not r then return nil end
  if not r.succeeded then
    self.dead = "the run's claim was lost"
    return false
  end
  self.writes = self.writes + 1
  self.nchunk = self.nchunk + #pieces
  for i = self.ch, drop - 1 do self.chunks[i] = nil end
  self.ch = drop
  for _, pc in ipairs(pieces) do
    self.ct = self.ct + 1
    self.chunks[self.ct] = { pc.key, pc.bytes }
  end
  self.sbytes = stored
  -- What was written leaves the queue (lines that came meanwhile stay; the
  -- cap may have dropped some of those written already).
  for i = self.qh, last do
    self.qbytes = self.qbytes - self.q[i].cost
    self.q[i] = nil
  end
  if self.qh <= last then self.qh = last + 1 end
  self.next_in = math.max(M.INTERVAL, bytes / M.RATE)
  return self.qt < self.qh
end

-- flush, but a failure of baton's own (a bug) ends this attempt's output
-- with a log line instead of failing the worker and its run.
function B:safe_flush()
  local ok, res = pcall(self.flush, self)
  if ok then return res end
  self.flushing = false
  self.dead = "flush failed: " .. tostring(res)
  baton.log.error("a run's output could not be stored", { job = self.job, instant = self.id,
                                                           attempt = self.attempt, error = res })
  return false
end

-- The worker's flusher: one coroutine for the whole life of the worker
-- process (so that a run leaves no coroutine of its own behind), which
-- flushes the current attempt's buffer every INTERVAL seconds (or less
-- often, after large writes: RATE).
local current, wake

function M.start_flusher()
  wake = baton._cond()
  baton.go(function()
    while true do
      local b = current
      if not b then
        wake:wait()
      else
        baton.sleep(b.next_in or M.INTERVAL)
        if current == b then b:safe_flush() end
      end
    end
  end)
end

-- Makes b the buffer the flusher writes.
function B:start()
  current = self
  if wake then wake:signal() end
  return self
end

-- The attempt ended: the last lines are written (trying for up to
-- FINAL_WAIT seconds while etcd fails), and the capture closed. Returns
-- true when everything said is stored (or was dropped by the cap).
function B:finish()
  if current == self then current = nil end
  local deadline = baton.monotime() + M.FINAL_WAIT
  while self.flushing and baton.monotime() < deadline do baton.sleep(0.01) end
  -- (a program's line whose end never came: what was cut off of it)
  self:drain()
  for k, cut in pairs(self.taps or {}) do
    self.taps[k] = nil
    for _, text in ipairs(cut:finish()) do
      self:add { stream = cut.stream, text = text, cmd = cut.cmd:match("[^/]*$"), from_sink = true }
    end
  end
  local ok = self:safe_flush()
  while ok == nil and baton.monotime() < deadline do
    baton.sleep(0.2)
    ok = self:safe_flush()
  end
  if self.sink then self.sink:close(); self.sink = nil end
  return ok == true
end

return M
