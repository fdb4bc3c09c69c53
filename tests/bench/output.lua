-- Helper of tests/bench/output, run with `baton --prefix P eval`:
--
--   writes SECS          counts, for SECS seconds, the etcd writes (revisions)
--                        under P output/ and the bytes they put; prints
--                        "writes n=.. bytes=.. seconds=.."
--   lateness JOB FROM TO run records of JOB with FROM <= fire < TO: lateness
--                        (started - fire) percentiles; prints
--                        "lateness n=.. p50_ms=.. p99_ms=.. max_ms=.."
--   stored JOB           the output stored for JOB's run: keys, bytes, lines
--                        said (the last line's number) and lines kept
local e = baton.etcd
local json = baton.json
local P = baton.config.prefix
if P:sub(-1) ~= "/" then P = P .. "/" end
local mode = arg[1]

local function pct(t, p)
  if #t == 0 then return 0 / 0 end
  table.sort(t)
  return t[math.max(1, math.ceil(#t * p))]
end

if mode == "writes" then
  local secs = tonumber(arg[2])
  local w = assert(e:watch(P .. "output/", { prefix = true }))
  local revs, bytes, n = {}, 0, 0
  local deadline = baton.monotime() + secs
  while true do
    local left = deadline - baton.monotime()
    if left <= 0 then break end
    local evs = w:next(left)
    for _, ev in ipairs(evs or {}) do
      if not revs[ev.kv.mod_revision] then revs[ev.kv.mod_revision] = true; n = n + 1 end
      if ev.type == "put" then bytes = bytes + #ev.kv.value end
    end
  end
  w:cancel()
  print(("writes n=%d bytes=%d seconds=%g"):format(n, bytes, secs))
elseif mode == "lateness" then
  local job, from, to = arg[2], tonumber(arg[3]), tonumber(arg[4])
  local r = assert(e:get(P .. "runs/" .. job .. "/", { prefix = true }))
  local lat = {}
  for _, kv in ipairs(r.kvs) do
    local rec = json.decode(kv.value)
    if type(rec.fire) == "number" and rec.fire >= from and rec.fire < to and type(rec.started) == "number" then
      lat[#lat + 1] = (rec.started - rec.fire) * 1000
    end
  end
  local n = #lat
  print(("lateness n=%d p50_ms=%.0f p99_ms=%.0f max_ms=%.0f"):format(n, pct(lat, 0.5), pct(lat, 0.99),
        pct(lat, 1)))
elseif mode == "stored" then
  local output = require "baton.output"
  local r = assert(e:get(P .. "output/" .. arg[2] .. "/", { prefix = true }))
  local bytes = 0
  for _, kv in ipairs(r.kvs) do bytes = bytes + #kv.value end
  local lines, said = output.lines(r.kvs)
  local kept = 0
  for _, l in ipairs(lines) do if not l.dropped then kept = kept + 1 end end
  print(("stored keys=%d bytes=%d lines_said=%d lines_kept=%d"):format(#r.kvs, bytes, said, kept))
else
  error("usage: output.lua writes SECS | lateness JOB FROM TO | stored JOB")
end
