-- baton eval tests/chaos/check.lua DIR: the checker of the nemesis suite
-- (tests/chaos/check is the command). It reads only the artifacts of a run
-- directory, so it can be run again on a kept one:
--   meta.json       seed, nodes and labels, TTL, jobs, the checked window and
--                   one (realtime, monotonic) pair of an unfaked process
--   exec.jsonl      every real execution, as the jobs recorded it
--   observer.jsonl  what etcd said and when: running/ markers (fences),
--                   run records, raft terms
--   records.jsonl   the run records at the end; state.json the other keys
--   faults.jsonl    what the nemesis did, with monotonic times
--   queue.jsonl     the queue tasks pushed
--   nodes/*.log     the nodes' JSON logs
-- and prints one table: faults, instants, executions, skips, failover,
-- earliest starts, violations by kind with examples. Exit status 1 when
-- there is any violation, 0 when there is none, 2 when the artifacts are
-- incomplete. The rules are in tests/chaos/README.md.
local D = assert(arg and arg[1], "usage: check.lua DIR")
local json = baton.json
local floor, huge, fmt = math.floor, math.huge, string.format

local PAUSE_GRACE = 1.0 -- s after SIGCONT that a stopped node may take to fence itself
local LATE = 0.1        -- s: a line this much after its claim was gone is a violation
local EARLY = 0.1       -- s: a start this much before its instant is a violation
local ALLOWED_BEFORE_RETRY = { lost = true, interrupted = true, abandoned = true, failed = true,
                               retrying = true }

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local bad_lines = 0
-- The JSON objects of a file of JSON lines (other lines are counted, skipped).
local function each(path)
  local f = io.open(path)
  if not f then return function() end end
  return function()
    while true do
      local l = f:read("*l")
      if not l then f:close(); return nil end
      if l:sub(1, 1) == "{" then
        local ok, t = pcall(json.decode, l)
        if ok and type(t) == "table" then return t end
        bad_lines = bad_lines + 1
      end
    end
  end
end

local function die(msg)
  io.stderr:write("chaos check: ", msg, "\n")
  baton.exit(2)
end

local meta_s = read(D .. "/meta.json")
if not meta_s then die(D .. "/meta.json is missing: not a run directory, or the run never started") end
local meta = json.decode(meta_s)
if not meta.window then die(D .. ": the run did not finish (meta.json has no window)") end
local TTL, W0, W1 = meta.ttl, meta.window.from, meta.window.to
local C = meta.clock
local function real(mono) return C.real + (mono - C.mono) end
local function rel(mono) return mono - meta.t0 end
local function instant_str(t) return os.date("!%Y-%m-%dT%H:%M:%SZ", t) end

local function days_from_civil(y, m, d)
  y = m <= 2 and y - 1 or y
  local era = floor(y / 400)
  local yoe = y - era * 400
  local doy = floor((153 * ((m + 9) % 12) + 2) / 5) + d - 1
  return era * 146097 + yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy - 719468
end
-- The epoch of an instant id (2026-12-01T10:00:05Z[/shard]), or nil.
local function epoch_of(id)
  local y, mo, d, h, mi, s = id:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)Z")
  if not y then return nil end
  return days_from_civil(tonumber(y), tonumber(mo), tonumber(d)) * 86400 + h * 3600 + mi * 60 + s
end

local jobs, labelled_job = {}, {}
for _, j in ipairs(meta.jobs) do
  jobs[j.name] = j
  if j.labels and next(j.labels) then labelled_job[j.name] = j.labels end
end
local node_labels = {}
for _, n in ipairs(meta.nodes) do node_labels[n.name] = n.labels or {} end

---------------------------------------------------------------------------
-- violations

local KINDS = {
  { "duplicate", "1  duplicate executions (or queue tasks done twice)" },
  { "redone", "1b completed executions run again (the attempt not recorded lost)" },
  { "miss", "2  silent misses (instants / tasks never done nor recorded)" },
  { "unsettled", "2b runs left running/retrying with nobody on them" },
  { "phantom", "2c runs recorded succeeded that never executed" },
  { "forbid", "3  overlapping runs of a forbid job" },
  { "after_lost", "4  runs started after the node declared its session lost" },
  { "stale", "5  executing after the claim was gone (marker deleted / record ended)" },
  { "unclaimed", "5b executions whose fence never was a running/ marker" },
  { "labels", "6  executions on a node without the job's labels" },
  { "early", "7  starts more than 0.1 s before the instant" },
  { "failover", "8  failover slower than TTL + 1 s (+ election allowance) or missing" },
  { "node_exit", "9  nodes that exited by themselves" },
  { "poison", "10 poisoned queue tasks run, or not recorded failed" },
}
local V = {}
local function violation(kind, msg, ...)
  local v = V[kind] or { n = 0, ex = {} }
  V[kind] = v
  v.n = v.n + 1
  if #v.ex < 6 then v.ex[#v.ex + 1] = select("#", ...) > 0 and fmt(msg, ...) or msg end
end
local info = {}
local function note(key, n) info[key] = (info[key] or 0) + (n or 1) end

---------------------------------------------------------------------------
-- the artifacts

-- An attempt's fence is unique within its run (runs claimed in one etcd
-- request share its revision, whatever their jobs): attempts are known by
-- run ("job/id") and fence.
local function fk(run, fence) return tostring(run) .. "#" .. tostring(fence) end

-- Executions, by job and fence: every line of one attempt has its fence.
local ex, ex_by_key, ex_list = {}, {}, {}
local skew = {}
for t in each(D .. "/exec.jsonl") do
  local F = t.fence
  if type(F) == "number" then
    local E = ex[fk(t.job .. "/" .. tostring(t.id), F)]
    if not E then
      E = { fence = F, job = t.job, id = t.id, key = t.job .. "/" .. t.id, node = t.node,
            attempt = t.attempt, lines = {}, first = huge, last = -huge, child_pids = {} }
      ex[fk(E.key, F)] = E
      ex_list[#ex_list + 1] = E
      ex_by_key[E.key] = ex_by_key[E.key] or {}
      table.insert(ex_by_key[E.key], E)
    elseif E.key ~= t.job .. "/" .. t.id or E.node ~= t.node then
      violation("duplicate", "fence %d names two runs: %s on %s and %s/%s on %s", F, E.key, E.node,
                t.job, t.id, t.node)
    end
    E.lines[#E.lines + 1] = t
    if t.kind == "start" then E.start = math.min(E.start or huge, t.mono) end
    if t.kind == "end" then
      E.stop = t.mono
      -- Completed: the job did all its work (a run cut short says
      -- cancelled, a planned failure says failed: tests/chaos/jobs.lua).
      if not t.cancelled and not t.failed then E.done_at = t.mono end
    end
    if t.child then E.child_pids[t.pid] = true end
    if t.mono < E.first then E.first = t.mono end
    if t.mono > E.last then E.last = t.mono end
    if t.wall then
      local s = skew[t.node] or { lo = huge, hi = -huge }
      skew[t.node] = s
      local off = t.wall - real(t.mono)
      if off < s.lo then s.lo = off end
      if off > s.hi then s.hi = off end
    end
  end
end
for _, E in ipairs(ex_list) do E.begin = E.start or E.first end

-- What etcd said: the earliest sighting of each (key, revision, type)
-- among the observer's watchers.
local seen, events, terms, watch_errors = {}, {}, {}, 0
local have_observer = false
for t in each(D .. "/observer.jsonl") do
  have_observer = true
  if t.type == "put" or t.type == "delete" then
    t.rev, t.create = t.mod_revision or t.rev, t.create_revision or t.create
    local k = t.type .. " " .. t.key .. " " .. t.rev
    local ev = seen[k]
    if not ev then
      seen[k] = t
      events[#events + 1] = t
    elseif t.mono < ev.mono then
      ev.mono = t.mono
    end
  elseif t.type == "status" then
    terms[#terms + 1] = t
  elseif t.type == "watch-error" then
    watch_errors = watch_errors + 1
  end
end
table.sort(events, function(a, b) return a.rev < b.rev end)
table.sort(terms, function(a, b) return a.mono < b.mono end)

-- Elections: each time the highest raft term seen grows.
local elections, top = {}, nil
for _, t in ipairs(terms) do
  if top and t.term > top then elections[#elections + 1] = t.mono end
  if not top or t.term > top then top = t.term end
end
-- The elections seen in [a, b] (a little before a too: the status polls
-- are 0.5 s apart): their number and the last one.
local function elections_in(a, b)
  local n, last = 0, nil
  for _, m in ipairs(elections) do
    if m >= a - 0.5 and m <= b then n, last = n + 1, m end
  end
  return n, last
end

local marker_made, marker_gone, marker_lease = {}, {}, {} -- [fk(run, fence)] = mono, mono, lease
local marker_of = {}                                      -- ["job/id#attempt"] = fence
local markers_by_key = {}                                 -- ["job/id"] = fences, in order
local ended_by_fence, ended_by_attempt = {}, {}
local last_record = {}                    -- [key] = value, as last seen
for _, ev in ipairs(events) do
  local key = ev.key
  if key:sub(1, 8) == "running/" and ev.create then
    local tab = ev.type == "put" and marker_made or marker_gone
    local mk = fk(key:sub(9), ev.create)
    if not tab[mk] or ev.mono < tab[mk] then tab[mk] = ev.mono end
    if ev.type == "put" then
      marker_lease[mk] = ev.lease
      local list = markers_by_key[key:sub(9)] or {}
      markers_by_key[key:sub(9)] = list
      if list[#list] ~= ev.create then list[#list + 1] = ev.create end
      local ok, v = pcall(json.decode, ev.value or "")
      if ok and type(v) == "table" and v.attempt then
        marker_of[key:sub(9) .. "#" .. tostring(v.attempt)] = ev.create
      end
    end
  elseif key:sub(1, 5) == "runs/" and ev.type == "put" and ev.value then
    local ok, rec = pcall(json.decode, ev.value)
    if ok and type(rec) == "table" then
      local rk = key:sub(6)
      last_record[rk] = rec
      for _, a in ipairs(rec.attempts or {}) do
        local ek = a.fence and fk(rk, a.fence)
        if ek and not ended_by_fence[ek] then ended_by_fence[ek] = ev.mono end
        local ak = rk .. "#" .. tostring(a.attempt)
        if not ended_by_attempt[ak] then ended_by_attempt[ak] = ev.mono end
      end
    end
  end
end

-- The records at the end (a record the dump lacks is taken as last seen).
local records = {}
for t in each(D .. "/records.jsonl") do
  local ok, rec = pcall(json.decode, t.value)
  if ok and type(rec) == "table" then records[t.key:sub(6)] = rec end
end
for k, rec in pairs(last_record) do if not records[k] then records[k] = rec end end
local state = json.decode(read(D .. "/state.json") or "{}") or {}
local marker_at_end = {}
for _, kv in ipairs(state.running or {}) do marker_at_end[kv.key:sub(9)] = true end

-- The faults.
local fault_count, fault_skipped = {}, {}
local grace_terms = {} -- node-term-grace: SIGTERM ~0.3 s into a graceful run
local node_faults, pauses, etcd_faults = {}, {}, {}
local open = {}
for t in each(D .. "/faults.jsonl") do
  if t.phase == "begin" then
    fault_count[t.kind] = (fault_count[t.kind] or 0) + 1
    open[t.n] = t
    if t.kind == "node-term-grace" and type(t.target) == "table" then grace_terms[#grace_terms + 1] = t end
    if t.node then
      node_faults[#node_faults + 1] = t
    else
      etcd_faults[#etcd_faults + 1] = t
    end
  elseif t.phase == "end" and open[t.n] then
    open[t.n].to = t.mono
    if t.kind == "node-stop" then
      pauses[#pauses + 1] = { node = t.node, from = open[t.n].mono, to = t.mono }
    end
  elseif t.phase == "skipped" then
    fault_skipped[t.kind] = (fault_skipped[t.kind] or 0) + 1
  elseif t.kind == "node-exit" and not t.expected then
    -- (a life that never logged "node started" was a refused start)
    if t.started or (t.started == nil and (t.age or 0) > 3) then
      violation("node_exit", "%s (life %d) exited with code %s at %+.1f s, nobody asked it to%s",
                t.node, t.life, tostring(t.code), rel(t.mono),
                t.last_line and t.last_line ~= "" and (": " .. t.last_line) or "")
    else
      note("refused node starts (retried)")
    end
  end
end

---------------------------------------------------------------------------
-- 5. still executing after the claim was gone (and the pause allowance)

-- The node's fence margin (runtime/core/etcd.c, keep_margin): its runs are
-- fenced that long before etcd can let its lease go.
local FENCE_MARGIN = math.min(2, math.max(0.2, TTL / 6))

-- The pause of node during which a claim of it was gone at m, or less than
-- the fence margin after its SIGCONT: etcd let that claim go at m, so the
-- node's own fence deadline had passed by m - FENCE_MARGIN, while it was
-- still stopped; it fences itself only once it runs again, so the same
-- allowance holds. A claim gone later than that was the running node's to
-- fence, and its lines after it are not forgiven.
local function pause_covering(node, m)
  for _, p in ipairs(pauses) do
    if p.node == node and p.from <= m and m <= p.to + FENCE_MARGIN then return p end
  end
end

local tolerated = 0
for _, E in ipairs(ex_list) do
  local gone = marker_gone[fk(E.key, E.fence)]
  local rend = ended_by_fence[fk(E.key, E.fence)] or ended_by_attempt[E.key .. "#" .. tostring(E.attempt)]
  if rend and (not gone or rend < gone) then gone = rend end
  E.gone = gone
  E.eff_last = E.begin
  local pz = gone and pause_covering(E.node, gone)
  local worst, nlate, tol = nil, 0, 0
  for _, l in ipairs(E.lines) do
    local late = gone and l.mono > gone + LATE
    -- (a stopped node's lines after its claim went, up to PAUSE_GRACE
    -- after SIGCONT, count neither as stale nor as overlapping the next
    -- attempt: LATE's slack is for a running node's reaction time)
    if gone and l.mono > gone and pz and l.mono <= pz.to + PAUSE_GRACE then
      tol = tol + 1
    else
      if l.mono > E.eff_last then E.eff_last = l.mono end
      if late then
        nlate = nlate + 1
        if not worst or l.mono > worst.mono then worst = l end
      end
    end
  end
  if tol > 0 then tolerated = tolerated + 1 end
  if nlate > 0 then
    violation("stale", "%s fence %d (%s, attempt %d): %d line%s after its claim was gone at %+.2f s, "
      .. "the last %.2f s later (%s%s, pid %d)", E.key, E.fence, E.node, E.attempt, nlate,
      nlate > 1 and "s" or "", rel(gone), worst.mono - gone, worst.kind,
      worst.child and " from a child process" or "", worst.pid)
  end
  if have_observer and not marker_made[fk(E.key, E.fence)] then
    violation("unclaimed", "%s fence %d (%s, attempt %d) started at %+.2f s; etcd never had a "
      .. "running/ marker with that create revision", E.key, E.fence, E.node, E.attempt, rel(E.begin))
  end
end
if not have_observer then note("no observer log: checks 5 and 5b skipped") end

---------------------------------------------------------------------------
-- 1. duplicates; 3. forbid overlaps; 6. labels; 7. early starts

local function attempt_entry(rec, E)
  for _, a in ipairs(rec and rec.attempts or {}) do
    if a.fence and a.fence == E.fence then return a end
  end
  for _, a in ipairs(rec and rec.attempts or {}) do
    if not a.fence and a.attempt == E.attempt and (not a.node or a.node == E.node) then
      note("attempts[] entries matched by attempt number (no fence in the entry)")
      return a
    end
  end
end

local function describe(E)
  return fmt("fence %d (%s, attempt %d, %+.2f..%+.2f s)", E.fence, E.node, E.attempt, rel(E.begin),
             rel(E.eff_last))
end

for key, list in pairs(ex_by_key) do
  if #list > 1 then
    table.sort(list, function(a, b) return a.begin < b.begin end)
    local rec = records[key]
    local queue = jobs[list[1].job] and jobs[list[1].job].kind == "queue"
    local what = queue and "task done twice: " or ""
    for i = 2, #list do
      local Ei = list[i]
      for j = 1, i - 1 do
        local Ej = list[j]
        if Ej.eff_last > Ei.begin then
          violation("duplicate", "%s%s: %s still executing %.2f s after %s started", what, key,
                    describe(Ej), Ej.eff_last - Ei.begin, describe(Ei))
          break
        end
        local a = attempt_entry(rec, Ej)
        if not a or not ALLOWED_BEFORE_RETRY[a.state] or Ei.attempt <= Ej.attempt then
          violation("duplicate", "%s%s: executed by %s and by %s; the record says attempt %d %s",
                    what, key, describe(Ej), describe(Ei), Ej.attempt,
                    a and ("was " .. tostring(a.state)) or "is not in attempts[]")
          break
        end
        -- 1b: judged by what the job did, whatever the record says: work
        -- done is done once, except when its node died or lost its lease
        -- after the work and before the record (lost: at-least-once).
        if Ej.done_at and a.state ~= "lost" then
          violation("redone", "%s%s: %s completed its work (end line at %+.2f s), then %s executed "
            .. "it again; the record says attempt %d was %s, not lost", what, key, describe(Ej),
            rel(Ej.done_at), describe(Ei), Ej.attempt, tostring(a.state))
          break
        end
      end
    end
  end
end

local forbid_jobs = {}
for _, E in ipairs(ex_list) do
  local j = jobs[E.job]
  if j and j.forbid then
    forbid_jobs[E.job] = forbid_jobs[E.job] or {}
    table.insert(forbid_jobs[E.job], E)
  end
end
for _, list in pairs(forbid_jobs) do
  table.sort(list, function(a, b) return a.begin < b.begin end)
  for i = 2, #list do
    for j = i - 1, 1, -1 do
      local a, b = list[j], list[i]
      if a.id ~= b.id and a.eff_last > b.begin then
        violation("forbid", "%s: %s/%s %s still executing %.2f s after %s/%s %s started", a.job,
                  a.job, a.id, describe(a), a.eff_last - b.begin, b.job, b.id, describe(b))
        break
      end
    end
  end
end

local earliest = {}
local delays = {}
for _, E in ipairs(ex_list) do
  local need = labelled_job[E.job]
  if need then
    for k, v in pairs(need) do
      if (node_labels[E.node] or {})[k] ~= v then
        local inst = epoch_of(E.id)
        violation("labels", "%s executed %s (needs %s=%s), attempt %d, at %+.2f s%s", E.node, E.key,
                  k, v, E.attempt, rel(E.begin),
                  inst and fmt(", %.1f s after its instant", real(E.begin) - inst) or "")
        break
      end
    end
  end
  local j = jobs[E.job]
  local inst = j and j.kind == "cron" and epoch_of(E.id)
  if inst and E.start then
    local d = real(E.start) - inst
    local m = earliest[E.node]
    if not m or d < m.d then earliest[E.node] = { d = d, key = E.key } end
    if d < -EARLY then
      violation("early", "%s started %s %.3f s before its instant (fence %d, %+.2f s)", E.node,
                E.key, -d, E.fence, rel(E.start))
    end
    if E.attempt == 1 and E.start >= W0 and E.start <= W1 then delays[#delays + 1] = d end
  end
end

---------------------------------------------------------------------------
-- 2. silent misses, unsettled and phantom runs; skips by reason

local due, due_by_job, skips, executed_by_job = 0, {}, {}, {}
for _, E in ipairs(ex_list) do executed_by_job[E.job] = (executed_by_job[E.job] or 0) + 1 end
local rfrom, rto = real(W0), real(W1)
local end_real = real(meta["end"])

local function check_run(key, j, what)
  local rec = records[key]
  local list = ex_by_key[key]
  if not rec and not list then
    local whole = key:match("^(.+)/%d+$")
    local other = whole and records[whole]
    violation("miss", "%s %s: no execution and no record%s", what, key, other
      and fmt(" (there is one for the whole instant, %s: %s)", whole, tostring(other.state)) or "")
    return
  end
  if rec then
    if rec.state == "skipped" then
      local why = tostring(rec.error or "?"):gsub("%d+%.?%d*", "N")
      skips[why] = (skips[why] or 0) + 1
    elseif rec.state == "running" and not marker_at_end[key] then
      violation("unsettled", "%s: recorded running (attempt %s on %s) at the end, with no running/ "
        .. "marker: nobody runs it or will", key, tostring(rec.attempt), tostring(rec.node))
    elseif rec.state == "retrying" and (rec.retry_at or 0) < end_real - 8 then
      violation("unsettled", "%s: still retrying at the end; its retry was due %.1f s before",
                key, end_real - (rec.retry_at or 0))
    elseif rec.state == "succeeded" and not list then
      violation("phantom", "%s: recorded succeeded by %s (attempt %s), but nothing executed it",
                key, tostring(rec.node), tostring(rec.attempt))
    end
  end
end

for name, j in pairs(jobs) do
  if j.kind == "cron" then
    local c = baton.cron(j.schedule)
    local t = c:next(rfrom - 1)
    while t and t <= rto do
      if t >= rfrom then
        for s = 1, (j.shards or 1) do
          local id = instant_str(t) .. ((j.shards or 1) > 1 and ("/" .. s) or "")
          due = due + 1
          due_by_job[name] = (due_by_job[name] or 0) + 1
          check_run(name .. "/" .. id, j, "instant")
        end
      end
      t = c:next(t)
    end
  end
end

-- Queue tasks: pushed (or, when the push's outcome is unknown, seen at etcd)
-- before the window's end.
local pushed, push_failed = 0, 0
local queue_job
for name, j in pairs(jobs) do if j.kind == "queue" then queue_job = name end end
local seen_task = {}
for _, ev in ipairs(events) do
  local id = ev.key:match("^queue/[^/]+/(.+)$")
  if id and ev.type == "put" then seen_task[id] = true end
end
if queue_job then
  for t in each(D .. "/queue.jsonl") do
    if t.mono >= W0 and t.mono <= W1 then
      if t.ok or seen_task[t.id] then
        pushed = pushed + 1
        due_by_job[queue_job] = (due_by_job[queue_job] or 0) + 1
        local key = queue_job .. "/" .. t.id
        local rec = records[key]
        if t.poison then
          if ex_by_key[key] then
            violation("poison", "queue task %s (a NUL byte in its value): executed", t.id)
          elseif not rec or rec.state ~= "failed" or not tostring(rec.error):find("NUL byte", 1, true) then
            violation("poison", "queue task %s (a NUL byte in its value): recorded %s (%s), not failed for it",
                      t.id, rec and tostring(rec.state) or "nothing", rec and tostring(rec.error) or "-")
          else
            note("poisoned queue tasks recorded failed")
          end
        elseif not records[key] and not ex_by_key[key] then
          violation("miss", "queue task %s (pushed at %+.1f s): never done", t.id, rel(t.mono))
        else
          check_run(key, jobs[queue_job], "task")
        end
      else
        push_failed = push_failed + 1
      end
    end
  end
end

---------------------------------------------------------------------------
-- 4. runs started after a session was declared lost (node logs)

-- A node logs "session lost" (the lease is in its reason) and "node
-- rejoined" with the new lease. A "run started" whose claim's marker was
-- bound to a lease the node had declared lost is a violation (the marker's
-- lease comes from the observer, by fence); without the observer's word, a
-- "run started" between "session lost" and the next "node rejoined" or
-- "node started" is.
local session_losses = {}
local log_notes = {}
local function lnote(k) log_notes[k] = (log_notes[k] or 0) + 1 end
local logdir = D .. "/nodes/"
for _, n in ipairs(meta.nodes) do
  local lost, lost_leases = nil, {}
  local losses = 0
  for t in each(logdir .. n.name .. ".log") do
    local msg = t.msg or ""
    if msg == "node started" or msg == "node rejoined" then
      lost = nil
    elseif msg:match("^session lost") then
      losses = losses + 1
      local lease = t.lease or tostring(t.reason or ""):match("lease (%d+)")
      lost = { lease = lease, ts = t.ts }
      if lease then lost_leases[lease] = t.ts end
    elseif msg == "run started" then
      local lease = t.lease or (t.fence and marker_lease[fk(tostring(t.job) .. "/" .. tostring(t.instant), t.fence)])
      local bad
      if lease then
        if lost_leases[lease] then
          bad = fmt("after \"session lost\" of that lease (%s) at %s", lease, lost_leases[lease])
        end
      elseif lost then
        bad = fmt("after \"session lost\" at %s, before the node rejoined", lost.ts)
      end
      if bad then
        violation("after_lost", "%s: run started %s/%s (attempt %s, fence %s) at %s, %s", n.name,
                  tostring(t.job), tostring(t.instant), tostring(t.attempt), tostring(t.fence),
                  tostring(t.ts), bad)
      end
    elseif msg == "run result not recorded" then
      lnote("results not recorded (claim lost)")
    elseif msg == "re-running a run whose node was lost" then
      lnote("re-runs of lost runs")
    elseif msg == "elected cluster leader" then
      lnote("leader elections won")
    end
  end
  session_losses[n.name] = losses
end

---------------------------------------------------------------------------
-- 8. failover of lost attempts

local failovers = {}
local function exec_of(key, attempt)
  for _, E in ipairs(ex_by_key[key] or {}) do if E.attempt == attempt then return E end end
end
-- The fault behind a loss of node's claim between from and to: the latest
-- fault on the node that was on at some time in between, else the latest
-- etcd fault that was, else a skew of the node's clock (a skew moves the
-- job's wall clock, not the node's lease timing, so it is the cause only
-- when nothing else is).
local function cause_of(node, from, to)
  local function on(f) return f.mono <= to and (f.to or f.mono) >= from end
  local best, skewed
  for _, f in ipairs(node_faults) do
    if f.node == node and on(f) then
      if f.kind == "skew" then
        if not skewed or f.mono > skewed.mono then skewed = f end
      elseif not best or f.mono > best.mono then best = f end
    end
  end
  if best then return best end
  for _, f in ipairs(etcd_faults) do
    if on(f) and (not best or f.mono > best.mono) then best = f end
  end
  return best or skewed
end

-- The first moment from t on at which a node that may run job (any node,
-- or one with the job's labels) is under no fault that keeps it from
-- running: until then no failover can start, however fast baton is.
local BLOCKING = { ["node-kill"] = true, ["node-term"] = true, ["node-term-grace"] = true, ["node-stop"] = true,
                   ["node-stall"] = true, ["proxy-freeze"] = true }
local function eligible_from(job, t)
  local need, best = labelled_job[job], nil
  for _, n in ipairs(meta.nodes) do
    local ok = true
    for k, v in pairs(need or {}) do if (n.labels or {})[k] ~= v then ok = false end end
    if ok then
      local T, moved = t, true
      while moved do
        moved = false
        for _, f in ipairs(node_faults) do
          local to = f.to or meta["end"]
          if f.node == n.name and BLOCKING[f.kind] and f.mono <= T and to > T then T, moved = to, true end
        end
      end
      if not best or T < best then best = T end
    end
  end
  return best or t
end

-- The last resume of an etcd member that was stopped while the lost node's
-- lease could still be renewed: a stopped member keeps the keepalives it
-- had received and forwards them when it resumes, so etcd itself may keep
-- the lease until that resume + TTL, long after the node fenced itself.
local function stalled_member_resume(t0)
  local last
  for _, f in ipairs(etcd_faults) do
    if f.kind:match("%-stop$") and f.mono <= t0 + TTL and (f.to or meta["end"]) >= t0 - TTL then
      local to = f.to or meta["end"]
      if not last or to > last then last = to end
    end
  end
  return last
end

-- A lost attempt: its claim (the marker of that attempt, from the observer)
-- was made at `made` and went at `gone` (the lease expired). Its cause is
-- the latest fault on its node that was on from shortly before the claim
-- until `gone`, else the latest etcd fault then. The next attempt must start
-- within TTL + 1 s of that fault (or of the claim, if it came during the
-- fault) or, when etcd elected a leader meanwhile (a new
-- leader gives every lease its full TTL again, plus the election timeout),
-- within TTL + election timeout + 1 s of the last election.
-- The attempt after n of rec when it was a refusal: a poisoned queue task
-- (a NUL byte) is never executed, the node that takes it over refuses it
-- (rule 10), so its claim is when the failover happened.
local function refused_after(rec, n)
  for _, b in ipairs(rec.attempts or {}) do
    if b.attempt == n + 1 and b.state == "failed" and tostring(b.error):find("NUL byte", 1, true) then
      return b
    end
  end
end

local unexplained, slowest = 0, nil
for key, rec in pairs(records) do
  for _, a in ipairs(rec.attempts or {}) do
    if a.state == "lost" then
      local Ea, En = exec_of(key, a.attempt), exec_of(key, a.attempt + 1)
      local refused = not En and refused_after(rec, a.attempt)
      local made_n = refused and refused.fence and marker_made[fk(key, refused.fence)]
      if made_n then En = { begin = made_n, key = key, fence = refused.fence, node = refused.node } end
      -- (each attempt is claimed with a new marker: the n-th is attempt n)
      local F = Ea and Ea.fence or marker_of[key .. "#" .. tostring(a.attempt)]
        or (markers_by_key[key] or {})[a.attempt]
      local made = F and marker_made[fk(key, F)] or (Ea and Ea.begin)
      local gone = F and marker_gone[fk(key, F)] or (Ea and Ea.gone)
      local f = made and cause_of(a.node, made - TTL - 2, gone or (En and En.begin) or meta["end"])
      if not f then
        unexplained = unexplained + 1
        if unexplained == 1 then
          log_notes["a loss without a fault: " .. key .. " attempt " .. a.attempt .. " on " ..
                    tostring(a.node)] = 1
        end
      end
      -- (from the claim, when it was made during the fault)
      local t0 = f and math.max(f.mono, made) or gone
      if En and t0 then
        local d = En.begin - t0
        local nel, last_el = elections_in(t0, En.begin)
        local limit = TTL + 1
        if last_el then limit = math.max(limit, last_el - t0 + TTL + meta.election_timeout + 1) end
        local why = ""
        local resumed = stalled_member_resume(t0)
        if resumed and resumed - t0 + TTL + 1 > limit then
          limit = resumed - t0 + TTL + 1
          why = fmt(", a stopped etcd member resumed %.1f s after the fault", resumed - t0)
        end
        local avail = eligible_from(key:match("^[^/]+"), t0)
        if avail - t0 + TTL + 1 > limit then
          limit = avail - t0 + TTL + 1
          why = fmt(", no eligible node free of faults until %.1f s after the fault", avail - t0)
        end
        failovers[#failovers + 1] = d
        if not slowest or d > slowest.d then
          slowest = { d = d, key = key, attempt = a.attempt, elections = nel,
                      cause = f and (f.kind .. " " .. (f.node or ("member " .. tostring(f.member)))) or "no fault" }
        end
        if d > limit then
          local claimed = marker_made[fk(En.key, En.fence)]
          violation("failover", "%s attempt %d on %s lost (%s at %+.2f s%s); attempt %d claimed %s, "
            .. "started %.2f s later on %s (limit %.1f s%s%s)", key, a.attempt, tostring(a.node),
            f and (f.kind .. (f.node and (" " .. f.node) or (" member " .. tostring(f.member)))) or "no fault",
            rel(t0), Ea and "" or ", it never executed", a.attempt + 1,
            claimed and fmt("%.2f s later", claimed - t0) or "(not seen)", d, En.node, limit,
            nel > 0 and fmt(", %d election%s, the last %.1f s after the fault", nel,
                            nel > 1 and "s" or "", last_el - t0) or "", why)
        end
      elseif not En and rec.state ~= "abandoned" then
        local fire = epoch_of(key:match("/(.+)$") or "")
        if not refused and (not fire or fire <= rto) then
          violation("failover", "%s attempt %d on %s recorded lost, but no attempt %d ever executed "
            .. "(record state %s)", key, a.attempt, tostring(a.node), a.attempt + 1, tostring(rec.state))
        end
      end
    end
  end
end
if unexplained > 0 then note("lost attempts with no fault on their node or etcd to explain them", unexplained) end

---------------------------------------------------------------------------
-- the table

local out = {}
local function p(s, ...) out[#out + 1] = select("#", ...) > 0 and fmt(s, ...) or s end
local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end)
  return ks
end
local function pct(list, q)
  if #list == 0 then return nil end
  table.sort(list)
  return list[math.max(1, math.ceil(q * #list))]
end

p("chaos seed %d: %d s (%d s quiet), %d nodes, TTL %d s, window %+.0f..%+.0f s",
  meta.seed, meta.duration, meta.quiet, #meta.nodes, TTL, rel(W0), rel(W1))
local fks = {}
for _, k in ipairs(sorted_keys(fault_count)) do fks[#fks + 1] = k .. " " .. fault_count[k] end
for _, k in ipairs(sorted_keys(fault_skipped)) do fks[#fks + 1] = k .. " skipped " .. fault_skipped[k] end
p("  faults            %s", #fks > 0 and table.concat(fks, ", ") or "none")
local dj = {}
for _, k in ipairs(sorted_keys(due_by_job)) do dj[#dj + 1] = k .. " " .. due_by_job[k] end
p("  due in window     %d instants + %d queue tasks (%s)%s", due, pushed, table.concat(dj, ", "),
  push_failed > 0 and fmt("; %d pushes failed", push_failed) or "")
local ej = {}
for _, k in ipairs(sorted_keys(executed_by_job)) do ej[#ej + 1] = k .. " " .. executed_by_job[k] end
p("  executions        %d (%s)", #ex_list, table.concat(ej, ", "))
local sk = {}
for _, k in ipairs(sorted_keys(skips)) do sk[#sk + 1] = fmt("%d x \"%s\"", skips[k], k) end
p("  skipped           %s", #sk > 0 and table.concat(sk, "; ") or "none")
-- node-term-grace: the runs SIGTERMed mid-run (the SIGTERM came after
-- their start line and before their end line), how often each executed,
-- and how the SIGTERMed attempt was recorded.
if (fault_count["node-term-grace"] or 0) + (fault_skipped["node-term-grace"] or 0) > 0 then
  local mid, once, more, lo, hi, states = 0, 0, 0, huge, -huge, {}
  for _, f in ipairs(grace_terms) do
    local t = f.target
    local key = tostring(t.job) .. "/" .. tostring(t.id)
    local E = ex[fk(key, t.fence)]
    if E and E.start and E.start <= f.mono and (not E.stop or E.stop > f.mono) then
      mid = mid + 1
      local d = f.mono - E.start
      if d < lo then lo = d end
      if d > hi then hi = d end
      if #ex_by_key[key] == 1 then once = once + 1 else more = more + 1 end
      local a = attempt_entry(records[key], E)
      local st = a and tostring(a.state) or "not recorded"
      states[st] = (states[st] or 0) + 1
    end
  end
  local sts = {}
  for _, k in ipairs(sorted_keys(states)) do sts[#sts + 1] = k .. " " .. states[k] end
  p("  term in grace     %d runs SIGTERMed mid-run%s, of %d node-term-grace faults (%d skipped: "
    .. "no run to stop)", mid, mid > 0 and fmt(" (%.2f-%.2f s in)", lo, hi) or "",
    #grace_terms + (fault_skipped["node-term-grace"] or 0), fault_skipped["node-term-grace"] or 0)
  p("                    executed once %d, more than once %d; their attempt recorded %s", once, more,
    #sts > 0 and table.concat(sts, ", ") or "-")
end
local f50, fmax = pct(failovers, 0.5), pct(failovers, 1)
p("  failover          %s", f50 and fmt("%d lost attempts re-run: p50 %.2f s, max %.2f s (fault -> next start)",
  #failovers, f50, fmax) or "no lost attempt was re-run")
if slowest then
  p("                    slowest: %s attempt %d after %s, %d election%s meanwhile", slowest.key,
    slowest.attempt, slowest.cause, slowest.elections, slowest.elections == 1 and "" or "s")
end
local en = {}
for _, k in ipairs(sorted_keys(earliest)) do en[#en + 1] = fmt("%s %+.3f s", k, earliest[k].d) end
p("  earliest start    %s (start - instant, real time)", table.concat(en, ", "))
local d50, d99, dmax = pct(delays, 0.5), pct(delays, 0.99), pct(delays, 1)
if d50 then p("  start delay       first attempts: p50 %.3f s, p99 %.3f s, max %.3f s", d50, d99, dmax) end
local sw = {}
for _, k in ipairs(sorted_keys(skew)) do sw[#sw + 1] = fmt("%s %+.1f..%+.1f", k, skew[k].lo, skew[k].hi) end
p("  clock skew seen   %s s (job wall clock - real)", table.concat(sw, ", "))
local sl = {}
for _, k in ipairs(sorted_keys(session_losses)) do sl[#sl + 1] = k .. " " .. session_losses[k] end
p("  sessions lost     %s; elections seen %d; observer watch errors %d", table.concat(sl, ", "),
  #elections, watch_errors)
for _, k in ipairs(sorted_keys(log_notes)) do
  if k ~= "_shown" then p("  note              %s: %d", k, log_notes[k]) end
end
for _, k in ipairs(sorted_keys(info)) do p("  note              %s: %d", k, info[k]) end
if tolerated > 0 then
  p("  note              %d executions went on for up to %.1f s after SIGCONT of their stopped node "
    .. "(allowed: a stopped node cannot fence itself)", tolerated, PAUSE_GRACE)
end
if #(state.leftover or {}) > 0 then
  p("  note              %d processes were still running after their nodes stopped (killed)", #state.leftover)
end
if bad_lines > 0 then p("  note              %d unreadable lines in the artifacts", bad_lines) end
p("  violations")
local total = 0
for _, k in ipairs(KINDS) do
  local v = V[k[1]]
  p("    %-72s %d", k[2], v and v.n or 0)
  if v then
    total = total + v.n
    for _, x in ipairs(v.ex) do p("        e.g. %s", x) end
  end
end
p("  result            %s", total == 0 and "PASS" or fmt("FAIL: %d violations (seed %d)", total, meta.seed))
local text = table.concat(out, "\n") .. "\n"
io.stdout:write(text)
local f = io.open(D .. "/report.txt", "w")
if f then f:write(text); f:close() end
baton.exit(total == 0 and 0 or 1)
