-- Event-triggered jobs (docs/jobs.md, "Events: jobs that run on other jobs'
-- outcomes"; `on`). A job that declares
--
--   on = { failed = { "backup", "report" }, succeeded = { "extract" }, skipped = { "*" } }
--
-- runs once for each final outcome of a run of a job it names ("*": every
-- job but itself and the other event jobs), with ctx.event describing the
-- run that ended. One mechanism gives alerting (a job that posts the event
-- somewhere) and chaining (extract -> transform -> load).
--
-- How an event travels, and why it is handled exactly once:
--   1. The etcd transaction that writes a run's final record (a success, a
--      final failure, a kill, an abandon, a skip) also puts, for each event
--      job that matches the record's job and state on the writing node,
--        P pending/<event job>/<event id> = {at, attempt = 1, reason = "event",
--                                             fire, event = {...}}
--      with no lease (M.add). The record and its events are one write: both
--      are in etcd or neither is, whatever fails after (kill -9, a lost
--      lease, an etcd leader change: a write whose answer was lost is read
--      back, never made twice). A retried attempt (state retrying) writes no
--      final record, so it makes no event.
--   2. Every node follows pending/ (node/triggers.lua); each eligible node takes its
--      turn from the event job's policy and claims the entry with claim.claim,
--      the claim path of every run: the event run's record must not exist,
--      the entry must be at the revision read, and it is deleted in the same
--      transaction. One node wins.
--   3. From then on the event run is a run like any other: retried per its
--      retry, re-run or abandoned per on_node_loss if its node dies, and its
--      own end makes events in turn (the record keeps `event`, so a re-run
--      gets the same ctx.event).
--   4. An entry no node claims (no eligible node is up) follows the event
--      job's misfire and starting_deadline (node/missed.lua, on the leader): the
--      events are run late, or recorded skipped with the reason. A paused
--      event job records its events skipped. None is dropped silently.
--
-- Event ids: <time>~<job>~<id>~<state>, e.g.
--   2026-11-29T02:00:04.120Z~extract~2026-11-29T02:00:00Z~succeeded
-- <time> is when the triggering run ended (UTC, milliseconds), so an event
-- job's records sort by time like any job's; <id> is the triggering run's
-- id with "%", "/", "~" and NUL written %25, %2F, %7E and %00 (a shard's
-- "/" would otherwise read as a shard of the event job; a NUL, which a run
-- cannot be given, comes from a raw etcd key). Instant, manual and queue
-- ids have no "~" (job names cannot either), so an event id never collides
-- with them, and one run reaches one final state once: one id per event.
--
-- This module is plain data and small etcd transactions: the loader, the
-- CLI (cycles), the conductor and the worker share it.
local baton = require "baton"
local keys = require "baton.keys"
local json = baton.json
local output = require "baton.output"

local format, floor, concat, sort = string.format, math.floor, table.concat, table.sort

-- An event holds the triggering run's id and error, which may hold a NUL
-- byte (a raw etcd key, what a job raised): written as U+FFFD (baton.json),
-- so that the final record the event goes with is written.
local TEXT = { nul = "replace" }

local M = {}

-- Whether a run of the job due at fire may still start at now (its
-- starting_deadline), and the reason one that may not is recorded skipped
-- for: the leader's misfire checks and a node whose workers were all busy
-- (node/claim.lua) say the same.
function M.in_time(spec, fire, now)
  return not spec.starting_deadline or now - fire <= spec.starting_deadline
end

function M.late_reason(spec)
  return format("misfire: not started within starting_deadline (%g s)", spec.starting_deadline)
end

-- The final states a run record can reach, which `on` may name. A timeout
-- is a failure ("timed out after N s"); "lost" names abandoned runs (their
-- node was lost or stopped and on_node_loss said not to run them again).
M.STATES = { "succeeded", "failed", "skipped", "abandoned", "killed" }
M.ALIASES = { lost = "abandoned" }

-- Events in a row (an event job's end triggering another) before the chain
-- is cut and logged: a backstop for a cycle stored with a raw etcd put
-- (baton check and baton job put refuse cycles).
M.MAX_DEPTH = 32

-- Bytes of the triggering run's error and of its output kept in an event.
M.ERROR_CAP = 4096
M.TAIL_CAP = 4096

local function keep_tail(s, cap)
  if type(s) ~= "string" or #s <= cap then return s end
  return "..." .. s:sub(-cap)
end

-- The event id of run <job>/<id> ending in state at time at.
function M.id(at, job, id, state)
  local ms = floor(at * 1000)
  local t = os.date("!%Y-%m-%dT%H:%M:%S", floor(ms / 1000)) .. format(".%03dZ", ms % 1000)
  local esc = id:gsub("[%%/~%z]", function(c) return format("%%%02X", c:byte()) end)
  return concat({ t, job, esc, state }, "~")
end

-- The node's index of its event jobs (node.event_jobs, a set of names),
-- kept by the job store as it loads (spec) and removes (nil) job name, so
-- that the end of a run looks at the event jobs only, not at every job.
function M.note(node, name, spec)
  node.event_jobs = node.event_jobs or {}
  node.event_jobs[name] = spec and spec.on and true or nil
end

-- The event jobs that a final record of job makes events for, from a job
-- store (node.jobs = {[name] = {spec = spec}}, and node.event_jobs, the
-- index above; without it every job is looked at): {[state] = {name,
-- ...}} (sorted), or nil when none. "*" matches every job but the event
-- job itself and the other event jobs; no job triggers itself.
function M.targets(node, job)
  local jobs = node.jobs
  local src = jobs[job]
  local src_is_event = src and src.spec and src.spec.on ~= nil
  local out
  for name in pairs(node.event_jobs or jobs) do
    local j = jobs[name]
    local on = j and j.spec and j.spec.on
    if on and name ~= job then
      for state, list in pairs(on) do
        for _, n in ipairs(list) do
          if n == job or (n == "*" and not src_is_event) then
            out = out or {}
            out[state] = out[state] or {}
            local l = out[state]
            l[#l + 1] = name
            break
          end
        end
      end
    end
  end
  for _, l in pairs(out or {}) do sort(l) end
  return out
end

-- What an event says about the run that ended (ctx.event, the event run's
-- record `event`): job, id, fire, state, error, node, attempt; depth (1 for
-- an event of a run that no event started, +1 per event job in a chain)
-- and origin = {job, id, fire}, the run that started the chain (a
-- pipeline's batch: load after transform after extract sees extract's
-- instant there). output_tail is added by the worker (M.output_tail).
function M.payload(job, id, rec)
  local err = rec.error
  if err == json.null then err = nil end
  local up = type(rec.event) == "table" and rec.event or {}
  local origin = type(up.origin) == "table" and up.origin or { job = job, id = id, fire = rec.fire }
  -- not a run record: what an event says about one
  return { job = job, id = id, fire = rec.fire, state = rec.state, node = rec.node,
           attempt = rec.attempt, error = keep_tail(err, M.ERROR_CAP),
           depth = (tonumber(up.depth) or 0) + 1, origin = origin }
end

-- Appends to ops (the operations of the transaction that writes rec, the
-- final record of run {job =, id =, events = M.targets(...)}) one pending
-- entry per event job that rec's state triggers. Returns ops and the number
-- of events added.
function M.add(P, run, rec, ops)
  local targets = type(run.events) == "table" and run.events[rec.state]
  if type(targets) ~= "table" or #targets == 0 then return ops, 0 end
  local ev = M.payload(run.job, run.id, rec)
  if ev.depth > M.MAX_DEPTH then
    baton.log.error("event chain too long: no events made (a cycle of on triggers?)", {
      job = run.job, instant = run.id, state = rec.state, depth = ev.depth,
      targets = concat(targets, ",") })
    return ops, 0
  end
  local at = type(rec.finished) == "number" and rec.finished or baton.now()
  local id = M.id(at, run.job, run.id, rec.state)
  local value = json.encode({ at = at, attempt = 1, reason = "event", fire = at, event = ev }, TEXT)
  for _, name in ipairs(targets) do
    ops[#ops + 1] = { put = { key = keys.key(P, "pending", name, id), value = value } }
  end
  return ops, #targets
end

---------------------------------------------------------------------------
-- output of the triggering run

-- The tail of what the triggering attempt said (its kept output, read from
-- P output/<job>/<id>/@<attempt>/, output.lua): its lines' text, one
-- a line, with the cap's "... N lines dropped ..." marker where lines are
-- missing, the last TAIL_CAP bytes of it. When nothing is kept (or it
-- cannot be read), the triggering run's error, or "". Called by the worker
-- before an event run's run(ctx), never by the conductor.
function M.output_tail(e, P, ev)
  local r = e:get(keys.output(P, ev.job, ev.id, ev.attempt), { prefix = true })
  return M.tail_of(ev, r and r.kvs or {})
end

-- The tail from the chunk kvs of the triggering attempt.
function M.tail_of(ev, kvs)
  local parts = {}
  for _, l in ipairs((output.lines(kvs))) do
    parts[#parts + 1] = (l.dropped and output.format(l) or tostring(l.text)) .. "\n"
  end
  if #parts == 0 then return ev.error or "" end
  return keep_tail(concat(parts), M.TAIL_CAP)
end

---------------------------------------------------------------------------
-- cycles

-- A cycle through job start in specs ({[name] = spec}): the shortest chain
-- of triggers from start back to itself, as text ("extract -> transform ->
-- extract"; an arrow is labelled when the trigger is not a success:
-- "a -[failed]-> b"), or nil. "*" makes no cycle: it matches only jobs that
-- are not event jobs, and those are triggered by nothing.
function M.find_cycle(specs, start)
  local succ = {} -- succ[x][e] = {states}: a final state of x triggers e
  for name, spec in pairs(specs) do
    for state, list in pairs(spec.on or {}) do
      for _, n in ipairs(list) do
        if n ~= "*" then
          succ[n] = succ[n] or {}
          succ[n][name] = succ[n][name] or {}
          table.insert(succ[n][name], state)
        end
      end
    end
  end
  local function next_of(x)
    local l = {}
    for e in pairs(succ[x] or {}) do l[#l + 1] = e end
    sort(l)
    return l
  end
  local parent, queue, head, last = {}, { start }, 1, nil
  while queue[head] and not last do
    local x = queue[head]
    head = head + 1
    for _, e in ipairs(next_of(x)) do
      if e == start then last = x; break end
      if not parent[e] then parent[e] = x; queue[#queue + 1] = e end
    end
  end
  if not last then return nil end
  local chain = { start }
  local x = last
  while x ~= start do table.insert(chain, 2, x); x = parent[x] end
  chain[#chain + 1] = start
  local out = { chain[1] }
  for i = 2, #chain do
    local states = succ[chain[i - 1]][chain[i]]
    sort(states)
    local arrow = (#states == 1 and states[1] == "succeeded") and " -> "
      or (" -[" .. concat(states, ",") .. "]-> ")
    out[#out + 1] = arrow .. chain[i]
  end
  return concat(out)
end

-- One line for people: "failed: backup, report; succeeded: *", or with
-- short, one word for a table column: "failed(backup,report),succeeded(*)".
function M.describe(on, short)
  local parts = {}
  for _, state in ipairs(M.STATES) do
    if on[state] then
      parts[#parts + 1] = short and (state .. "(" .. concat(on[state], ",") .. ")")
        or (state .. ": " .. concat(on[state], ", "))
    end
  end
  return concat(parts, short and "," or "; ")
end

return M
