-- A run's kept output as it is stored (docs/architecture.md, "A run's
-- output"): what each attempt says — ctx.log lines, print / io.write, and
-- the stdout and stderr of the programs it starts — kept in etcd next to
-- its record, capped. The worker writes it while the attempt runs
-- (worker/output.lua); this module reads it back (`baton job logs`, the
-- HTTP API, the output tail an event run is given) and shows a line to a
-- reader.
--
-- Keys, under the prefix P, for attempt <n> of run <id> of job <job>:
--
--   output/<job>/<id>/@<n>/<chunk>   JSON {"lines": [line, ...], "cap": bytes}
--
-- (and the cap it was written under). <chunk> is a number of 8 digits, one
-- per flush, in order. A line is
-- {n, t, stream, text [, level, fields] [, cmd]}: n counts the attempt's
-- lines from 1 (a gap in n is lines dropped by the cap), t is epoch seconds,
-- stream is "stdout" or "stderr" (print, io.write, io.stderr:write; with
-- cmd, the program's), or "log" (ctx.log, with level and fields). A run id
-- is an instant, an instant with milliseconds, <instant>/<shard> or a queue
-- task id (no "/"): no component of one starts with "@", so the output of
-- run <id> is exactly the keys under output/<job>/<id>/@, and a shard's
-- (output/<job>/<id>/<shard>/@...) is never among them.
local baton = require "baton"
local keys = require "baton.keys"
local json = baton.json

local format, floor = string.format, math.floor

local M = {}

M.CAP = 64 * 1024 -- bytes of text kept per attempt, unless written under another cap

-- The attempt a key under keys.output(P, job, id) belongs to, and its chunk number.
function M.parse_key(P, job, id, key)
  local rest = keys.under(keys.output(P, job, id), key) or ""
  local a, c = rest:match("^(%d+)/(%d+)$")
  return tonumber(a), tonumber(c)
end

-- The output of one attempt as stored: its lines in order, with
-- {dropped = k, cap = bytes} entries where k lines are missing (dropped by
-- the cap), the number of the last line, and the cap. kvs are the chunk
-- kvs of the attempt (any order).
function M.lines(kvs)
  local chunks, cap = {}, nil
  for _, kv in ipairs(kvs) do
    local ok, v = pcall(json.decode, kv.value)
    if ok and type(v) == "table" and type(v.lines) == "table" then
      chunks[#chunks + 1] = { key = kv.key, lines = v.lines }
      cap = tonumber(v.cap) or cap
    end
  end
  table.sort(chunks, function(a, b) return a.key < b.key end)
  local out, n = {}, 0
  for _, c in ipairs(chunks) do
    for _, l in ipairs(c.lines) do
      if type(l) == "table" and type(l.n) == "number" and l.n > n then
        if l.n > n + 1 then out[#out + 1] = { dropped = l.n - n - 1, cap = cap } end
        out[#out + 1] = l
        n = l.n
      end
    end
  end
  return out, n, cap
end

-- One line for a reader: time, source, text (as stored: a terminal's
-- caller escapes its control characters, cli/util.lua's escape).
--   2026-12-01T10:00:00.123Z stdout  hello
--   2026-12-01T10:00:00.200Z info    report made day=2026-11-29
--   2026-12-01T10:00:00.300Z sh:err  oops
function M.format(l)
  if l.dropped then
    local cap = tonumber(l.cap) or M.CAP
    return format("... %d line%s dropped (the output of an attempt is capped at %s) ...",
                  l.dropped, l.dropped == 1 and "" or "s",
                  cap % 1024 == 0 and format("%d KiB", cap / 1024) or format("%d bytes", cap))
  end
  local t = tonumber(l.t) or 0
  local ts = os.date("!%Y-%m-%dT%H:%M:%S", floor(t)) .. format(".%03dZ", floor((t % 1) * 1000 + 0.5) % 1000)
  local src, text = l.stream, tostring(l.text)
  if l.stream == "log" then
    src = tostring(l.level or "info")
    if type(l.fields) == "table" then
      local names = {}
      for k in pairs(l.fields) do names[#names + 1] = k end
      table.sort(names)
      for _, k in ipairs(names) do
        local v = l.fields[k]
        v = type(v) == "table" and json.encode(v) or tostring(v)
        if v:find("[%s\"=]") or v == "" then v = format("%q", v):gsub("\\\n", "\\n") end
        text = text .. " " .. k .. "=" .. v
      end
    end
  elseif l.cmd and l.cmd ~= json.null then
    src = tostring(l.cmd) .. (l.stream == "stderr" and ":err" or ":out")
  end
  return format("%s %-7s %s", ts, src, text)
end

return M
