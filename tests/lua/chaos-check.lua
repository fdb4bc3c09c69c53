-- tests/chaos/check.lua on made-up run directories: a clean one passes
-- (runs claimed in one request share a fence there, of one job or two),
-- and one with a violation of every kind planted (next to the cases the
-- rules allow: a retry after a lost attempt, lines of a stopped node just
-- after its SIGCONT, a skip record, a run cut short by its stopping node and
-- run again, a completed run whose node died before the record) reports
-- each of them exactly once.
local T = require "tap"
local json = baton.json
local root = os.getenv("BATON_ROOT") or "."
local bin = os.getenv("BATON_BIN") or "bin/baton"

local R0, M0 = 1796000000, 1000 -- real time R0 is monotonic M0; t0 = M0
local function iso(k) return os.date("!%Y-%m-%dT%H:%M:%SZ", R0 + k) end

local function writer()
  local w = { files = {} }
  function w.line(name, t)
    w.files[name] = w.files[name] or {}
    table.insert(w.files[name], json.encode(t))
  end
  return w
end

-- One execution of job/id: lines from `from` to `to` (mono; the end line
-- gets the fields of o.end_extra, e.g. cancelled), its marker made just
-- before and deleted at `gone` (nil: never deleted; false: no marker at
-- all).
local function run(w, o)
  local key = o.job .. "/" .. o.id
  local base = { job = o.job, id = o.id, node = o.node, attempt = o.attempt or 1, fence = o.fence, pid = o.fence }
  local function l(kind, m, extra)
    local t = {}
    for k, v in pairs(base) do t[k] = v end
    for k, v in pairs(extra or {}) do t[k] = v end
    t.kind, t.mono, t.wall = kind, m, R0 + (m - M0) + (o.skew or 0)
    w.line("exec.jsonl", t)
  end
  w.fences = w.fences or {}
  w.fences[key] = o.fence
  l("start", o.from)
  for _, m in ipairs(o.beats or {}) do l("beat", m, { child = true }) end
  if o.to then l("end", o.to, o.end_extra) end
  if o.marker ~= false then
    w.line("observer.jsonl", { w = 1, mono = o.from - 0.005, type = "put", key = "running/" .. key,
      create_revision = o.fence, mod_revision = o.fence, lease = o.lease or ("L" .. o.node),
      value = json.encode { node = o.node, attempt = o.attempt or 1 } })
    if o.gone then
      w.line("observer.jsonl", { w = 2, mono = o.gone, type = "delete", key = "running/" .. key,
        create_revision = o.fence, mod_revision = o.fence + 1000, lease = o.lease or ("L" .. o.node) })
    end
  end
end

local function record(w, key, rec)
  rec.job = key:match("^[^/]+")
  w.line("records.jsonl", { key = "runs/" .. key, create_revision = 1, mod_revision = 2,
                            value = json.encode(rec) })
end

local function meta()
  return {
    seed = 1, duration = 30, quiet = 15, ttl = 3, prefix = "/chaos/", election_timeout = 1.0,
    t0 = M0, clock = { real = R0, mono = M0 }, fault_end = M0 + 15, quiet_start = M0 + 15,
    ["end"] = M0 + 25, window = { from = M0 + 3, to = M0 + 13 },
    nodes = { { name = "n1", labels = { role = "x" } }, { name = "n2", labels = {} },
              { name = "n3", labels = { role = "x" } }, { name = "n4", labels = {} } },
    jobs = {
      { name = "tick", kind = "cron", schedule = "* * * * * *", period = 1 },
      { name = "long", kind = "cron", schedule = "*/5 * * * * *", period = 5, forbid = true },
      { name = "labelled", kind = "cron", schedule = "*/2 * * * * *", period = 2,
        labels = { role = "x" } },
      { name = "orders", kind = "queue", queue = "orders" },
    },
  }
end

-- Everything right: each instant run once, on a node with the labels.
local function clean(w, skip)
  skip = skip or {}
  local fence = 100
  for k = 3, 13 do
    if not skip["tick" .. k] then
      -- (4 claimed in the same request as 3: a fence is unique within a
      -- run only; see also labelled below)
      if not (k == 4 and not skip.tick3) then fence = fence + 1 end
      run(w, { job = "tick", id = iso(k), node = "n" .. (k % 4 + 1), fence = fence,
               from = M0 + k + 0.01, to = M0 + k + 0.31, gone = M0 + k + 0.32 })
      record(w, "tick/" .. iso(k), { state = "succeeded", attempt = 1,
                                     attempts = { { attempt = 1, fence = fence, state = "succeeded" } } })
    end
  end
  local shared_fence
  for _, k in ipairs { 5, 10 } do
    if not skip["long" .. k] then
      fence = fence + 1
      if k == 10 then shared_fence = fence end
      run(w, { job = "long", id = iso(k), node = "n2", fence = fence, from = M0 + k + 0.01,
               beats = { M0 + k + 1, M0 + k + 2 }, to = M0 + k + 3, gone = M0 + k + 3.01 })
      record(w, "long/" .. iso(k), { state = "succeeded", attempt = 1,
                                     attempts = { { attempt = 1, fence = fence, state = "succeeded" } } })
    end
  end
  for _, k in ipairs { 4, 6, 8, 10, 12 } do
    if not skip["labelled" .. k] then
      -- (at 10, claimed in the same etcd request as the long run of that
      -- moment)
      local f = k == 10 and shared_fence
      if not f then fence = fence + 1; f = fence end
      run(w, { job = "labelled", id = iso(k), node = "n1", fence = f, from = M0 + k + 0.01,
               to = M0 + k + 0.2, gone = M0 + k + 0.21 })
      record(w, "labelled/" .. iso(k), { state = "succeeded", attempt = 1,
        attempts = { { attempt = 1, fence = f, state = "succeeded" } } })
    end
  end
  fence = fence + 1
  w.line("queue.jsonl", { id = "t1", mono = M0 + 5, ok = true })
  run(w, { job = "orders", id = "t1", node = "n3", fence = fence, from = M0 + 5.1, to = M0 + 5.3,
           gone = M0 + 5.31 })
  record(w, "orders/t1", { state = "succeeded", attempt = 1,
                           attempts = { { attempt = 1, fence = fence, state = "succeeded" } } })
  -- a poisoned task (a NUL byte in its value): recorded failed, never run
  w.line("queue.jsonl", { id = "p1", mono = M0 + 5.5, ok = true, poison = true })
  record(w, "orders/p1", { state = "failed", attempt = 1, error = "cannot be run: its task's value holds a "
    .. "NUL byte (byte 7); a run is given text without NUL bytes", attempts = { { attempt = 1, state = "failed" } } })
  w.line("observer.jsonl", { type = "status", member = 1, term = 2, leader = "9", mono = M0 })
  w.line("faults.jsonl", { kind = "node-start", node = "n1", life = 1, mono = M0 - 1, t = -1 })
  w.line("nodes/n1.log", { msg = "node started", lease = "Ln1", node = "n1", ts = "x" })
end

local function save(w, m, state)
  local dir = os.tmpname()
  os.remove(dir)
  assert(baton.exec { "mkdir", "-p", dir .. "/nodes" })
  local function put(name, s)
    local f = assert(io.open(dir .. "/" .. name, "w"))
    f:write(s)
    f:close()
  end
  put("meta.json", json.encode(m) .. "\n")
  put("state.json", json.encode(state or { running = json.array {} }) .. "\n")
  for name, lines in pairs(w.files) do put(name, table.concat(lines, "\n") .. "\n") end
  return dir
end

local function check(dir)
  local r = assert(baton.exec { bin, "eval", root .. "/tests/chaos/check.lua", dir, timeout = 60 })
  local counts = {}
  for line in r.stdout:gmatch("[^\n]+") do
    local code, n = line:match("^    (%d+%a?) .-%s(%d+)$")
    if code then counts[code] = tonumber(n) end
  end
  return r, counts
end

-- 1. clean
do
  local w = writer()
  clean(w)
  -- a node-term-grace fault 0.09 s into labelled/6 (n1, +6.01..+6.2),
  -- which finished within the grace and ran once
  w.line("faults.jsonl", { kind = "node-term-grace", phase = "begin", n = 1, node = "n1", mono = M0 + 6.1,
    t = 6.1, target = { job = "labelled", id = iso(6), fence = w.fences["labelled/" .. iso(6)], attempt = 1, start = M0 + 6.01 } })
  w.line("faults.jsonl", { kind = "node-term-grace", phase = "end", n = 1, node = "n1", mono = M0 + 8, t = 8 })
  w.line("faults.jsonl", { kind = "node-term-grace", phase = "skipped", n = 2, node = "n2", mono = M0 + 9,
                           t = 9, why = "no graceful run started on it within 10 s" })
  local dir = save(w, meta())
  local r = check(dir)
  T.is(r.code, 0, "a clean run passes")
  T.like(r.stdout, "result%s+PASS", "and says PASS")
  T.like(r.stdout, "due in window%s+18 instants %+ 2 queue tasks", "instants and tasks due are counted")
  T.like(r.stdout, "term in grace%s+1 runs SIGTERMed mid%-run %(0%.09%-0%.09 s in%), of 2 node%-term%-grace "
         .. "faults %(1 skipped", "the run SIGTERMed mid-run is counted")
  T.like(r.stdout, "executed once 1, more than once 0; their attempt recorded succeeded 1",
         "it executed once, recorded succeeded")
  if r.code ~= 0 then T.diag(r.stdout .. r.stderr) end
  baton.exec { "rm", "-rf", dir }
end

-- 2. one violation of each kind, and the allowed cases beside them
do
  local w = writer()
  local skip = {}
  for _, k in ipairs { 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13 } do skip["tick" .. k] = true end
  skip.long5, skip.long10, skip.labelled8, skip.labelled10, skip.labelled12 = true, true, true, true, true
  clean(w, skip)
  local function ok1(key, fence)
    record(w, key, { state = "succeeded", attempt = 1,
                     attempts = { { attempt = 1, fence = fence, state = "succeeded" } } })
  end
  -- 1: two executions of tick/3 overlapping
  run(w, { job = "tick", id = iso(3), node = "n1", fence = 501, from = M0 + 3.01, to = M0 + 3.31, gone = M0 + 3.32 })
  run(w, { job = "tick", id = iso(3), node = "n2", fence = 502, from = M0 + 3.2, to = M0 + 3.3, gone = M0 + 3.31 })
  ok1("tick/" .. iso(3), 501)
  -- 1: tick/4 run twice one after the other, attempt 1 recorded succeeded
  run(w, { job = "tick", id = iso(4), node = "n1", fence = 503, from = M0 + 4.01, to = M0 + 4.31, gone = M0 + 4.32 })
  run(w, { job = "tick", id = iso(4), node = "n2", attempt = 2, fence = 504, from = M0 + 5.0, to = M0 + 5.3, gone = M0 + 5.31 })
  record(w, "tick/" .. iso(4), { state = "succeeded", attempt = 2, attempts = {
    { attempt = 1, fence = 503, state = "succeeded" }, { attempt = 2, fence = 504, state = "succeeded" } } })
  -- allowed: tick/5 lost with its node (kill at +5.05), re-run 3.5 s later
  run(w, { job = "tick", id = iso(5), node = "n1", fence = 505, from = M0 + 5.01, gone = M0 + 8.2 })
  run(w, { job = "tick", id = iso(5), node = "n2", attempt = 2, fence = 506, from = M0 + 8.55, to = M0 + 8.8, gone = M0 + 8.81 })
  record(w, "tick/" .. iso(5), { state = "succeeded", attempt = 2, attempts = {
    { attempt = 1, node = "n1", state = "lost" }, { attempt = 2, fence = 506, state = "succeeded" } } })
  w.line("faults.jsonl", { kind = "node-kill", phase = "begin", n = 1, node = "n1", mono = M0 + 5.05, t = 5.05 })
  w.line("faults.jsonl", { kind = "node-kill", phase = "end", n = 1, node = "n1", mono = M0 + 7, t = 7 })
  -- 2: tick/6: nothing at all; allowed: tick/7 recorded skipped
  record(w, "tick/" .. iso(7), { state = "skipped", attempt = 0, error = "concurrency forbid: busy" })
  -- 7: tick/8 started half a second early
  run(w, { job = "tick", id = iso(8), node = "n3", fence = 508, from = M0 + 7.5, to = M0 + 7.8, gone = M0 + 7.81 })
  ok1("tick/" .. iso(8), 508)
  -- 5: tick/9 beats after its marker went
  run(w, { job = "tick", id = iso(9), node = "n1", fence = 509, from = M0 + 9.01, beats = { M0 + 9.8 },
           to = M0 + 9.31, gone = M0 + 9.32 })
  ok1("tick/" .. iso(9), 509)
  -- 5b: tick/10 ran without a marker
  run(w, { job = "tick", id = iso(10), node = "n1", fence = 510, from = M0 + 10.01, to = M0 + 10.3, marker = false })
  ok1("tick/" .. iso(10), 510)
  -- allowed: tick/11 on n3, stopped from +11.3 to +12.5; its marker went at
  -- +12.2; one line 0.3 s after SIGCONT
  run(w, { job = "tick", id = iso(11), node = "n3", fence = 511, from = M0 + 11.01, beats = { M0 + 11.2, M0 + 12.8 },
           gone = M0 + 12.2 })
  ok1("tick/" .. iso(11), 511)
  w.line("faults.jsonl", { kind = "node-stop", phase = "begin", n = 2, node = "n3", mono = M0 + 11.3, t = 11.3 })
  w.line("faults.jsonl", { kind = "node-stop", phase = "end", n = 2, node = "n3", mono = M0 + 12.5, t = 12.5 })
  -- 4: tick/12 started by n4 on the lease it had declared lost
  run(w, { job = "tick", id = iso(12), node = "n4", fence = 512, lease = "777", from = M0 + 12.01, to = M0 + 12.3, gone = M0 + 12.31 })
  ok1("tick/" .. iso(12), 512)
  w.line("nodes/n4.log", { msg = "node started", lease = "777", node = "n4", ts = "a" })
  w.line("nodes/n4.log", { msg = "session lost; runs stopped", node = "n4", ts = "b",
                           reason = "lease 777: no successful keepalive for 2.5 s (ttl 3 s)" })
  w.line("nodes/n4.log", { msg = "run started", job = "tick", instant = iso(12), attempt = 1, fence = 512, ts = "c" })
  -- 8: tick/13 lost (freeze at +13.05), attempt 2 only 6 s later
  run(w, { job = "tick", id = iso(13), node = "n2", fence = 513, from = M0 + 13.01, gone = M0 + 16.1 })
  run(w, { job = "tick", id = iso(13), node = "n1", attempt = 2, fence = 514, from = M0 + 19.05, to = M0 + 19.3, gone = M0 + 19.31 })
  record(w, "tick/" .. iso(13), { state = "succeeded", attempt = 2, attempts = {
    { attempt = 1, node = "n2", state = "lost" }, { attempt = 2, fence = 514, state = "succeeded" } } })
  w.line("faults.jsonl", { kind = "proxy-freeze", phase = "begin", n = 3, node = "n2", mono = M0 + 13.05, t = 13.05 })
  -- (tick/14..16 come after the window, where only the duplicate rules
  -- look at executions)
  -- 1b: tick/14 on n1, SIGTERMed 0.3 s in (node-term-grace), completed its
  -- work in the grace; its node recorded attempt 1 interrupted and n2 ran
  -- it again: rule 1 allows that (the record says interrupted), 1b does not
  run(w, { job = "tick", id = iso(14), node = "n1", fence = 520, from = M0 + 14.01, to = M0 + 14.9, gone = M0 + 14.95 })
  run(w, { job = "tick", id = iso(14), node = "n2", attempt = 2, fence = 521, from = M0 + 15.0, to = M0 + 15.3, gone = M0 + 15.31 })
  record(w, "tick/" .. iso(14), { state = "succeeded", attempt = 2, attempts = {
    { attempt = 1, node = "n1", fence = 520, state = "interrupted" }, { attempt = 2, fence = 521, state = "succeeded" } } })
  w.line("faults.jsonl", { kind = "node-term-grace", phase = "begin", n = 4, node = "n1", mono = M0 + 14.31, t = 14.31,
    target = { job = "tick", id = iso(14), fence = 520, attempt = 1, start = M0 + 14.01 } })
  w.line("faults.jsonl", { kind = "node-term-grace", phase = "end", n = 4, node = "n1", mono = M0 + 17, t = 17 })
  -- allowed: tick/15 completed its work on n3, which was killed before it
  -- recorded it; recorded lost, run again (at least once: docs/guide.md)
  run(w, { job = "tick", id = iso(15), node = "n3", fence = 522, from = M0 + 15.01, to = M0 + 15.31, gone = M0 + 18.3 })
  run(w, { job = "tick", id = iso(15), node = "n4", attempt = 2, fence = 523, from = M0 + 18.6, to = M0 + 18.9, gone = M0 + 18.91 })
  record(w, "tick/" .. iso(15), { state = "succeeded", attempt = 2, attempts = {
    { attempt = 1, node = "n3", fence = 522, state = "lost" }, { attempt = 2, fence = 523, state = "succeeded" } } })
  w.line("faults.jsonl", { kind = "node-kill", phase = "begin", n = 5, node = "n3", mono = M0 + 15.35, t = 15.35 })
  w.line("faults.jsonl", { kind = "node-kill", phase = "end", n = 5, node = "n3", mono = M0 + 17, t = 17 })
  -- allowed: tick/16 on n4 cut short by its node's SIGTERM (end line
  -- cancelled, the run failed), recorded interrupted, run again on n2
  run(w, { job = "tick", id = iso(16), node = "n4", fence = 524, from = M0 + 16.01, to = M0 + 16.15,
           end_extra = { cancelled = true }, gone = M0 + 16.2 })
  run(w, { job = "tick", id = iso(16), node = "n2", attempt = 2, fence = 525, from = M0 + 16.5, to = M0 + 16.8, gone = M0 + 16.81 })
  record(w, "tick/" .. iso(16), { state = "succeeded", attempt = 2, attempts = {
    { attempt = 1, node = "n4", fence = 524, state = "interrupted" }, { attempt = 2, fence = 525, state = "succeeded" } } })
  w.line("faults.jsonl", { kind = "node-term", phase = "begin", n = 6, node = "n4", mono = M0 + 16.1, t = 16.1 })
  w.line("faults.jsonl", { kind = "node-term", phase = "end", n = 6, node = "n4", mono = M0 + 18, t = 18 })
  -- 3: long/10 starts while long/5 still beats
  run(w, { job = "long", id = iso(5), node = "n2", fence = 515, from = M0 + 5.01,
           beats = { M0 + 6, M0 + 8, M0 + 10.5 }, to = M0 + 10.6, gone = M0 + 10.61 })
  ok1("long/" .. iso(5), 515)
  run(w, { job = "long", id = iso(10), node = "n3", fence = 517, from = M0 + 10.01, to = M0 + 11, gone = M0 + 11.01 })
  ok1("long/" .. iso(10), 517)
  -- 6: labelled/8 on n2; 2b: labelled/10 left running; 2c: labelled/12
  -- recorded succeeded, never executed
  run(w, { job = "labelled", id = iso(8), node = "n2", fence = 516, from = M0 + 8.01, to = M0 + 8.2, gone = M0 + 8.21 })
  ok1("labelled/" .. iso(8), 516)
  record(w, "labelled/" .. iso(10), { state = "running", attempt = 1, node = "n1", attempts = {} })
  record(w, "labelled/" .. iso(12), { state = "succeeded", attempt = 1, node = "n1", attempts = {} })
  -- 2: queue task t2 pushed, never done
  w.line("queue.jsonl", { id = "t2", mono = M0 + 6, ok = true })
  -- 10: poisoned task p2 executed
  w.line("queue.jsonl", { id = "p2", mono = M0 + 6.5, ok = true, poison = true })
  run(w, { job = "orders", id = "p2", node = "n3", fence = 520, from = M0 + 6.6, to = M0 + 6.8, gone = M0 + 6.81 })
  ok1("orders/p2", 520)
  -- 9: n4 exited by itself
  w.line("faults.jsonl", { kind = "node-exit", node = "n4", life = 1, code = 1, age = 10, started = true,
                           mono = M0 + 11, t = 11 })
  -- allowed: a start refused (it never logged "node started")
  w.line("faults.jsonl", { kind = "node-exit", node = "n2", life = 1, code = 1, age = 5, started = false,
                           mono = M0 + 12, t = 12 })

  local dir = save(w, meta())
  local r, counts = check(dir)
  T.is(r.code, 1, "a run with violations fails (exit 1)")
  local want = { ["1"] = 2, ["1b"] = 1, ["2"] = 2, ["2b"] = 1, ["2c"] = 1, ["3"] = 1, ["4"] = 1, ["5"] = 1,
                 ["5b"] = 1, ["6"] = 1, ["7"] = 1, ["8"] = 1, ["9"] = 1, ["10"] = 1 }
  for _, code in ipairs { "1", "1b", "2", "2b", "2c", "3", "4", "5", "5b", "6", "7", "8", "9", "10" } do
    T.is(counts[code], want[code], "violations of kind " .. code .. ": " .. want[code])
  end
  local function has(str, name) return T.ok(r.stdout:find(str, 1, true), name) end
  has("tick/" .. iso(3) .. ": fence 501 (n1, attempt 1, +3.01..+3.31 s) still executing 0.11 s after "
      .. "fence 502", "the overlap is named")
  T.like(r.stdout, "the record says attempt 1 was succeeded", "the unexplained re-run says why")
  has("tick/" .. iso(14) .. ": fence 520 (n1, attempt 1, +14.01..+14.90 s) completed its work (end line at "
      .. "+14.90 s), then fence 521 (n2, attempt 2, +15.00..+15.30 s) executed it again; the record says "
      .. "attempt 1 was interrupted, not lost", "the completed run done again is named (1b)")
  T.ok(not r.stdout:find("tick/" .. iso(15) .. ":", 1, true), "a completed run recorded lost may run again")
  T.ok(not r.stdout:find("tick/" .. iso(16) .. ":", 1, true), "a run cut short (cancelled) may run again")
  T.like(r.stdout, "term in grace%s+1 runs SIGTERMed mid%-run %(0%.30%-0%.30 s in%)", "the SIGTERMed run is counted")
  T.like(r.stdout, "executed once 0, more than once 1; their attempt recorded interrupted 1",
         "and it executed twice, its attempt recorded interrupted")
  has("instant tick/" .. iso(6) .. ": no execution and no record", "the miss is named")
  T.like(r.stdout, "queue task t2 .-never done", "the task never done is named")
  T.like(r.stdout, "1 x \"concurrency forbid: busy\"", "the skip is tallied by reason")
  T.like(r.stdout, "1 executions went on .- after SIGCONT", "lines just after SIGCONT are only noted")
  T.like(r.stdout, "n3 %-0%.500 s", "the earliest start of n3")
  T.like(r.stdout, "after \"session lost\" of that lease %(777%)", "the lost lease is named")
  T.like(r.stdout, "attempt 2 claimed [%d.]+ s later, started 6%.00 s later on n1 %(limit 4%.0 s%)",
         "the slow failover, against TTL + 1 s")
  T.like(r.stdout, "3 lost attempts re%-run: p50 3%.50 s, max 6%.00 s", "failover p50 and max")
  T.like(r.stdout, "queue task p2 %(a NUL byte in its value%): executed", "the poisoned task run is named")
  T.like(r.stdout, "FAIL: 16 violations %(seed 1%)", "the total and the seed")
  if r.code ~= 1 or counts["1"] ~= 2 then T.diag(r.stdout .. r.stderr) end
  baton.exec { "rm", "-rf", dir }
end

-- 3. an unfinished run directory is not a pass
do
  local m = meta()
  m.window = nil
  local dir = save(writer(), m)
  local r = check(dir)
  T.is(r.code, 2, "a run that did not finish: exit 2")
  T.like(r.stderr, "did not finish", "and says so")
  baton.exec { "rm", "-rf", dir }
end

T.done()
