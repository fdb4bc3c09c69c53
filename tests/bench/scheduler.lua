-- Helper of tests/bench/scheduler, run with `baton --prefix P eval`:
--
--   reload NODES N       N puts of a new version of job "hot", each timed
--                        until every one of NODES (comma-separated) reports
--                        that revision in P status/hot/<node> (seen through a
--                        watch); then N put -> watch event round trips on a
--                        key of its own. Prints "reload ..." and "watch ...".
--   put-jobs N KIND      N jobs bench-00001.. in txns of 128 puts; KIND tick
--                        (every second, each run does a ctx:put_fenced of
--                        P out/<job>/<instant>), noop (every second, does
--                        nothing) or idle (a yearly schedule: loaded, armed,
--                        never due)
--   wait-status N T0 S   waits (S seconds at most) until P status/ holds N
--                        keys (one node: one per job); prints the seconds since T0
--                        (epoch seconds, the node's start)
--   lateness FROM TO     run records with FROM <= fire < TO: lateness
--                        (started - fire) percentiles, counts by state, and
--                        (inwin) the runs of any instant started in the window,
--                        the tick job's executions (out/ keys) and those of
--                        them written twice (version > 1)
local e = baton.etcd
local json = baton.json
local P = baton.config.prefix
if P:sub(-1) ~= "/" then P = P .. "/" end
local mode = arg[1]

-- Every kv under prefix, to fn, in pages (a 3-node run's records are more
-- than one response may hold).
local function each_kv(prefix, fn)
  local from, to = prefix, prefix:sub(1, -2) .. string.char(prefix:byte(-1) + 1)
  while true do
    local r = assert(e:get(from, { range_end = to, limit = 1000 }))
    for _, kv in ipairs(r.kvs) do fn(kv) end
    if not r.more or #r.kvs == 0 then return end
    from = r.kvs[#r.kvs].key .. "\0"
  end
end

local function pct(t, p)
  if #t == 0 then return 0 / 0 end
  table.sort(t)
  return t[math.max(1, math.ceil(#t * p))]
end

if mode == "reload" then
  local nodes = {}
  for n in arg[2]:gmatch("[^,]+") do nodes[#nodes + 1] = n end
  local n = tonumber(arg[3] or "20")
  local src = function(i)
    return ("-- version %d\nreturn { schedule = '@manual', run = function(ctx) end }\n"):format(i)
  end
  local key = P .. "jobs/hot"
  local r0 = assert(e:put(key, src(0)))
  -- the status of each node, followed through one watch
  local seen = {}
  local w = assert(e:watch(P .. "status/hot/", { prefix = true, start_revision = r0.revision }))
  local function wait_all(rev, timeout)
    local deadline = baton.monotime() + timeout
    while true do
      local all = true
      for _, nd in ipairs(nodes) do if (seen[nd] or 0) < rev then all = false end end
      if all then return true end
      local left = deadline - baton.monotime()
      if left <= 0 then return false end
      local evs = w:next(left)
      for _, ev in ipairs(evs or {}) do
        if ev.type == "put" then
          local st = json.decode(ev.kv.value)
          local nd = ev.kv.key:match("[^/]+$")
          if type(st) == "table" and type(st.revision) == "number" then seen[nd] = st.revision end
        end
      end
    end
  end
  assert(wait_all(r0.revision, 15), "the nodes did not load the first version")
  local lat, missed = {}, 0
  for i = 1, n do
    local t0 = baton.monotime()
    local r = assert(e:put(key, src(i)))
    if wait_all(r.revision, 5) then lat[#lat + 1] = (baton.monotime() - t0) * 1000
    else missed = missed + 1 end
    baton.sleep(0.05)
  end
  w:cancel()
  print(("reload p50_ms=%.2f p99_ms=%.2f max_ms=%.2f n=%d missed=%d"):format(
    pct(lat, 0.5), pct(lat, 0.99), pct(lat, 1), #lat, missed))
  -- put -> event on a watch, same etcd, same run
  local wk = P .. "watch-rtt"
  local ww = assert(e:watch(wk, {}))
  local rt = {}
  for i = 1, math.max(n, 20) do
    local t0 = baton.monotime()
    assert(e:put(wk, tostring(i)))
    local got = false
    while not got do
      local evs = ww:next(5)
      if not evs then break end
      for _, ev in ipairs(evs) do if ev.kv.value == tostring(i) then got = true end end
    end
    if got then rt[#rt + 1] = (baton.monotime() - t0) * 1000 end
  end
  ww:cancel()
  print(("watch p50_ms=%.2f p99_ms=%.2f max_ms=%.2f n=%d"):format(pct(rt, 0.5), pct(rt, 0.99), pct(rt, 1), #rt))

elseif mode == "put-jobs" then
  local n, kind = tonumber(arg[2]), arg[3]
  local src
  if kind == "tick" then
    -- one key per instant: a second execution of an instant would make
    -- its key's version 2 (see lateness)
    src = ([[
return { schedule = "* * * * * *", timeout = 60,
  run = function(ctx) assert(ctx:put_fenced(%q .. ctx.job .. "/" .. string.format("%%d", ctx.fire), "1")) end }
]]):format(P .. "out/")
  elseif kind == "noop" then
    src = [[
return { schedule = "* * * * * *", timeout = 60, run = function(ctx) end }
]]
  else
    src = [[
return { schedule = "0 0 1 1 *", timeout = 60, run = function(ctx) end }
]]
  end
  local t0 = baton.monotime()
  local i = 1
  while i <= n do
    local ops = {}
    for j = i, math.min(n, i + 127) do
      ops[#ops + 1] = { put = { key = P .. ("jobs/bench-%05d"):format(j), value = src } }
    end
    assert(e:txn { success = ops })
    i = i + 128
  end
  print(("put-jobs n=%d seconds=%.2f"):format(n, baton.monotime() - t0))

elseif mode == "wait-status" then
  local n, t0, limit = tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4] or "120")
  local deadline = baton.monotime() + limit
  local count = 0
  while baton.monotime() < deadline do
    local r = assert(e:get(P .. "status/", { prefix = true, keys_only = true, limit = 1 }))
    count = r.count
    if count >= n then
      print(("loaded n=%d seconds=%.2f"):format(count, baton.now() - t0))
      baton.exit(0)
    end
    baton.sleep(0.05)
  end
  print(("loaded n=%d seconds=timeout(%d s)"):format(count, limit))
  baton.exit(1)

elseif mode == "lateness" then
  local from, to = tonumber(arg[2]), tonumber(arg[3])
  local late, states, total, inwin = {}, {}, 0, 0
  each_kv(P .. "runs/", function(kv)
    local rec = json.decode(kv.value)
    -- the node's throughput: runs (of any instant) started in the window
    local s1 = type(rec) == "table" and type(rec.attempts) == "table" and rec.attempts[1]
      and rec.attempts[1].started or type(rec) == "table" and rec.state ~= "skipped" and rec.started
    if type(s1) == "number" and s1 >= from and s1 < to then inwin = inwin + 1 end
    if type(rec) == "table" and rec.fire and rec.fire >= from and rec.fire < to then
      total = total + 1
      states[rec.state or "?"] = (states[rec.state or "?"] or 0) + 1
      if rec.state ~= "skipped" and rec.started then
        -- the first attempt's start: a retry or re-run starts later by design
        local started = rec.started
        if type(rec.attempts) == "table" and rec.attempts[1] and rec.attempts[1].started then
          started = rec.attempts[1].started
        end
        late[#late + 1] = (started - rec.fire) * 1000
      end
    end
  end)
  -- executions: the tick job's keys for instants in the window, and those
  -- written more than once
  local execs, twice = 0, 0
  each_kv(P .. "out/", function(kv)
    local f = tonumber(kv.key:match("/(%d+)$"))
    if f and f >= from and f < to then
      execs = execs + 1
      if kv.version > 1 then twice = twice + 1 end
    end
  end)
  local st = {}
  for k, v in pairs(states) do st[#st + 1] = k .. "=" .. v end
  table.sort(st)
  print(("lateness p50_ms=%.1f p99_ms=%.1f max_ms=%.1f started=%d inwin=%d records=%d execs=%d twice=%d %s"):format(
    pct(late, 0.5), pct(late, 0.99), pct(late, 1), #late, inwin, total, execs, twice, table.concat(st, " ")))
else
  io.stderr:write("scheduler.lua: unknown mode " .. tostring(mode) .. "\n")
  baton.exit(2)
end
