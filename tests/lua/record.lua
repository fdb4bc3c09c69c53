-- baton.record, the one owner of the run record: each constructor's fields
-- (no etcd needed), what a record built from a previous one keeps (the
-- attempts history, the fence, the node, ...), the record given left as it
-- was; and no file of lua/ builds or changes a run record by hand (a table
-- constructor with a state and a record's other fields, an assignment to a
-- record's state, retry_at, killed_by or attempts[]).
local T = require "tap"
local record = require "baton.record"
local json = baton.json

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = type(v) == "table" and copy(v) or v end
  return c
end

-- Whether r has the same value as base for every field in names.
local function keeps(r, base, names, what)
  local got, want = {}, {}
  for _, k in ipairs(names) do got[k], want[k] = r[k], base[k] end
  return T.is_deeply(got, want, what)
end

-- 1. Claimed: attempt 1, and a next attempt.
local run = { job = "backup", id = "2026-11-29T02:00:00Z/2", fire = 1796000000, attempt = 1, manual = true,
              task = { key = "/baton/queue/q/1", value = "v" }, shard = { index = 2, total = 3, param = "b" },
              event = { job = "up", depth = 1 } }
local c1 = record.claimed(run, "n1", 1796000001, { code_revision = 7, token = "n1:6a:1", exclusive = true,
                                                   params = { who = "x" } })
T.is_deeply(c1, {
  job = "backup", fire = 1796000000, node = "n1", attempt = 1, state = "running", started = 1796000001,
  code_revision = 7, manual = true, task = "/baton/queue/q/1", shard = 2, exclusive = true, attempts = {},
  token = "n1:6a:1", event = { job = "up", depth = 1 }, params = { who = "x" },
}, "claimed: every field of a first attempt (task and shard as the key and the index)")
local c0 = record.claimed({ job = "j", fire = 5, attempt = 1, manual = false }, "n2", 6,
                         { code_revision = 3, token = "t", exclusive = false })
T.is_deeply(c0, { job = "j", fire = 5, node = "n2", attempt = 1, state = "running", started = 6, code_revision = 3,
                  attempts = {}, token = "t" }, "claimed: no manual, task, shard, event, params, exclusive when none")

local prev = { job = "backup", fire = 1796000000, node = "n1", attempt = 1, state = "retrying", params = { who = "first" },
               attempts = { { attempt = 1, node = "n1", state = "failed", fence = 40 } }, retry_at = 1796000020,
               error = "boom", fence = 40, finished = 1796000010 }
local before = copy(prev)
local c2 = record.claimed({ job = "backup", fire = 1796000000, attempt = 2 }, "n3", 1796000021,
                          { code_revision = 8, token = "n3:1:1", prev = prev, params = { who = "default" } })
T.is(c2.state, "running", "claimed next attempt: running")
T.is(c2.node .. " " .. c2.attempt .. " " .. c2.started, "n3 2 1796000021", "claimed next attempt: its node, number and start")
T.is_deeply(c2.attempts, prev.attempts, "claimed next attempt: keeps the attempts history")
T.is_deeply(c2.params, { who = "first" }, "claimed next attempt: keeps the run's params")
T.ok(c2.retry_at == nil and c2.error == nil and c2.finished == nil and c2.fence == nil,
     "claimed next attempt: nothing of the previous attempt's end (retry_at, error, finished, fence)")
T.is_deeply(prev, before, "claimed: the previous record is left as it was")
local c3 = record.claimed({ job = "backup", fire = 1, attempt = 2 }, "n3", 2,
                          { prev = { attempts = {} }, params = { who = "default" } })
T.is_deeply(c3.params, { who = "default" }, "claimed next attempt: the given params when the previous had none")

-- 2. Fenced: the claim is in etcd.
local f1 = record.fenced(c1, 42)
T.is(f1.fence, 42, "fenced: the fence")
T.is(f1.mod_revision, 42, "fenced: the record's mod revision")
keeps(f1, c1, { "job", "fire", "node", "attempt", "state", "started", "token", "exclusive", "task", "shard" },
      "fenced: keeps the claim")
T.is(c1.fence, nil, "fenced: the claimed record is left as it was")

-- 3. Skipped.
local sk = record.skipped({ job = "j", id = "2026-11-29T02:00:00Z/1", fire = 10, manual = true, shard = { index = 1 },
                            event = { depth = 2 }, task = { key = "k" } }, "n1", 12, "misfire: ...",
                          { code_revision = 9, params = { p = "1" } })
T.is_deeply(sk, { job = "j", fire = 10, node = "n1", attempt = 0, state = "skipped", started = 12, finished = 12,
                  code_revision = 9, manual = true, shard = 1, params = { p = "1" }, event = { depth = 2 },
                  error = "misfire: ..." }, "skipped: attempt 0, started and finished at once, with the reason")
T.is_deeply(record.skipped({ job = "j", fire = 10 }, "n1", 12, "why", { code_revision = 9 }),
            { job = "j", fire = 10, node = "n1", attempt = 0, state = "skipped", started = 12, finished = 12,
              code_revision = 9, error = "why" }, "skipped: only what applies")

-- 4. The attempts entry.
T.is_deeply(record.attempt({ attempt = 3, node = "n2", started = 5, fence = 77, state = "running", job = "j" },
                           "lost", "node n2 was lost", 9),
            { attempt = 3, node = "n2", state = "lost", started = 5, finished = 9, error = "node n2 was lost", fence = 77 },
            "attempt: the entry of an attempt that ended")

-- 5. Ended, on the node or in the worker.
local claimed = record.fenced(record.claimed({ job = "j", id = "x", fire = 1, attempt = 2 }, "n1", 100,
  { code_revision = 4, token = "tok", exclusive = true, prev = prev, params = {} }), 55)
local before_end = copy(claimed)
local fr = record.ended(claimed, "failed", { final = "failed", finished = 103, error = "exit 1", fence = 55,
                                   retry_at = 113 })
T.is(fr.state, "retrying", "ended with a next attempt due: retrying")
T.is(fr.retry_at, 113, "ended: retry_at")
T.ok(fr.finished == 103 and fr.duration == 3 and fr.error == "exit 1" and fr.fence == 55, "ended: finished, duration, error, fence")
T.is(#fr.attempts, 2, "ended: one entry more in attempts")
T.is_deeply(fr.attempts[1], prev.attempts[1], "ended: the earlier entries kept")
T.is_deeply(fr.attempts[2], { attempt = 2, node = "n1", state = "failed", started = 100, finished = 103,
                              error = "exit 1", fence = 55 }, "ended: the attempt's entry")
T.ok(fr.token == nil and fr.mod_revision == nil, "ended: the claim's token and mod revision go")
keeps(fr, claimed, { "job", "fire", "node", "attempt", "started", "code_revision", "exclusive" }, "ended: keeps the run's fields")
T.is_deeply(claimed, before_end, "ended: the claimed record is left as it was")
T.is_deeply(prev, before, "ended: the record it was claimed from is left as it was")

local ok_ = record.ended(claimed, "succeeded", { finished = 104, fence = 55 })
T.ok(ok_.state == "succeeded" and ok_.retry_at == nil and ok_.error == nil and ok_.killed_by == nil,
     "ended: a success")
T.is(ok_.attempts[#ok_.attempts].state, "succeeded", "ended: a success's entry")
local w = record.ended({ job = "j", node = "n1", attempt = 1, state = "running", token = "t" }, "succeeded",
                       { finished = 10.5, fence = 3, started = 10 })
T.is(w.duration, 0.5, "ended: the duration from o.started when the record has no start (the worker's)")
local kd = record.ended(claimed, "killed", { finished = 104, error = "killed by a@h", fence = 55, killed_by = "a@h" })
T.ok(kd.state == "killed" and kd.killed_by == "a@h", "ended: killed, and by whom")
local fk = record.ended(claimed, "failed", { finished = 104, error = "e", fence = 55, killed_by = "a@h" })
T.is(fk.killed_by, nil, "ended: killed_by only for a killed attempt")
local it = record.ended(claimed, "interrupted", { finished = 104, error = "node stopping", fence = 55, retry_at = 104 })
T.is(it.state .. " " .. it.attempts[#it.attempts].state, "retrying interrupted", "ended: interrupted, run again")
local ab = record.ended(claimed, "interrupted", { final = "abandoned", finished = 104, error = "stop", fence = 55 })
T.is(ab.state .. " " .. ab.attempts[#ab.attempts].state, "abandoned interrupted", "ended: interrupted, abandoned")

-- 6. Lost, and what the leader makes of it.
local running = { job = "j", fire = 1, node = "n2", attempt = 2, state = "running", started = 50, token = "t",
                  attempts = { { attempt = 1, state = "failed", fence = 30 } }, task = "/baton/queue/q/1",
                  code_revision = 4, exclusive = true }
local before_lost = copy(running)
local lost = record.lost(running, 60, "node n2 was lost", 44)
T.is(lost.fence, 44, "lost: the fence given when the record names none")
T.is(record.lost({ fence = 41, attempts = {} }, 60, "x", 44).fence, 41, "lost: the record's own fence kept")
T.is_deeply(lost.attempts[2], { attempt = 2, node = "n2", state = "lost", started = 50, finished = 60,
                                error = "node n2 was lost", fence = 44 }, "lost: the attempt's entry")
T.is_deeply(lost.attempts[1], running.attempts[1], "lost: the earlier entries kept")
T.ok(lost.state == "running" and lost.error == nil and lost.token == nil, "lost: still running, no error yet, no token")
T.is_deeply(running, before_lost, "lost: the record read is left as it was")
local again = record.retrying(lost, 60, "node n2 was lost")
T.ok(again.state == "retrying" and again.retry_at == 60 and again.error == "node n2 was lost", "retrying: state, when, why")
T.is(again.finished, nil, "retrying: not finished")
keeps(again, lost, { "attempts", "fence", "node", "attempt", "task", "exclusive", "code_revision" }, "retrying: keeps the record")
local gone = record.abandoned(lost, 61, "node n2 was lost")
T.ok(gone.state == "abandoned" and gone.finished == 61 and gone.error == "node n2 was lost", "abandoned: state, when, why")
keeps(gone, lost, { "attempts", "fence", "node", "attempt", "task", "exclusive" }, "abandoned: keeps the record")
T.is(record.abandoned(again, 62, "its queue task was deleted").retry_at, nil, "abandoned: no retry_at")
local k = record.killed(lost, 62, "killed by a@h; node n2 was lost", "a@h")
T.ok(k.state == "killed" and k.finished == 62 and k.error == "killed by a@h; node n2 was lost" and k.killed_by == "a@h",
     "killed: state, when, why, by whom")
keeps(k, lost, { "attempts", "fence", "node", "attempt", "task", "exclusive" }, "killed: keeps the record")
local kr = record.killed({ job = "j", state = "retrying", retry_at = 70 }, 63, "replaced by run y")
T.ok(kr.retry_at == nil and kr.killed_by == nil and type(kr.attempts) == "table" and #kr.attempts == 0,
     "killed: no retry_at, no killed_by when nobody is named, an attempts list")

-- 7. The last run, and its register value.
T.is_deeply(record.last("r1", { state = "failed", fire = 1, started = 2, finished = 3, node = "n1", attempt = 2,
                                 error = "x", attempts = {} }),
            { run = "r1", state = "failed", fire = 1, started = 2, finished = 3, node = "n1", attempt = 2 },
            "last: the run and its summary, nothing else")
T.is_deeply(record.last("r1", { state = json.null, node = "n1" }), { run = "r1", node = "n1" }, "last: a JSON null is absent")
local lv = record.last_value("2026-11-29T02:00:00Z", { state = "succeeded", fire = 1, node = "n1", attempt = 1, job = "j" })
T.like(lv, '^{"run":"2026%-11%-29T02:00:00Z",', "last_value: the id first")
T.is_deeply(json.decode(lv), { run = "2026-11-29T02:00:00Z", state = "succeeded", fire = 1, node = "n1", attempt = 1 },
            "last_value: the summary")
T.is(record.last_value("x", {}), '{"run":"x"}', "last_value: an empty record")
T.is(json.decode(record.last_value("a\0b", { error = "e" })).run, "a\239\191\189b", "last_value: a NUL written as U+FFFD")

-- 8. The JSON.
T.is_deeply(json.decode(record.encode(fr)), fr, "encode: decodes to the record")
T.is(json.decode(record.encode({ error = "a\0b" })).error, "a\239\191\189b", "encode: a NUL written as U+FFFD")

-- 9. No run record is built or changed outside record.lua.
--
-- The check reads the code without comments and with every string made ""
-- and finds:
--   A. a table constructor whose own keys are state and one of fire,
--      attempt, started, finished, fence: a record, an attempts entry, a
--      last run;
--   B. an assignment to a field state, retry_at or killed_by, or into
--      attempts[]: a record changed.
-- A comment "not a run record: <why>" on that line or the one above allows
-- one (a log line's fields, a display of a record read, a sample).

-- Lua source src without its comments, every string literal "" (newlines
-- kept, so the lines stay where they were).
local function code_of(src)
  local out, i, n = {}, 1, #src
  local function newlines(s) return (s:gsub("[^\n]", "")) end
  while i <= n do
    local j = src:find("[%-\"'%[]", i)
    if not j then out[#out + 1] = src:sub(i); break end
    out[#out + 1] = src:sub(i, j - 1)
    local c = src:sub(j, j)
    local long = src:match("^%[(=*)%[", c == "-" and j + 2 or j)
    local e
    if c == "-" and src:sub(j + 1, j + 1) ~= "-" then
      out[#out + 1], e = c, j
    elseif c == "[" and not src:match("^%[=*%[", j) then
      out[#out + 1], e = c, j
    elseif long then -- a long comment or string
      e = select(2, src:find("]" .. long .. "]", j, true)) or n
      out[#out + 1] = (c == "-" and "" or '""') .. newlines(src:sub(j, e))
    elseif c == "-" then -- a comment to the end of the line
      e = (src:find("\n", j, true) or n + 1) - 1
    else -- a quoted string
      e = j + 1
      while e <= n do
        local d = src:sub(e, e)
        if d == "\\" then e = e + 1 elseif d == c or d == "\n" then break end
        e = e + 1
      end
      out[#out + 1] = '""' .. newlines(src:sub(j, e))
    end
    i = e + 1
  end
  return table.concat(out)
end

local RECORD_KEY = { fire = true, attempt = true, started = true, finished = true, fence = true }
local KEYWORD = { ["then"] = true, ["do"] = true, ["else"] = true, ["end"] = true, ["repeat"] = true,
                  ["local"] = true }
local CHANGED = { "%.state%f[^%w_]", "%.retry_at%f[^%w_]", "%.killed_by%f[^%w_]", "%.attempts%s*%[" }

-- The places in Lua source src that build or change a run record:
-- {line =, rule = "A" or "B"}, those a comment allows left out.
local function sites(src)
  local lines = {}
  for l in (src .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  local function allowed(n)
    return (lines[n] or ""):find("%-%-.*not a run record:") or (lines[n - 1] or ""):find("%-%-.*not a run record:")
  end
  local code, found = code_of(src), {}
  -- A: table constructors and their own keys (name = ..., after { , or ;)
  local stack, line, prev, i, n = {}, 1, nil, 1, #code
  while i <= n do
    local c = code:sub(i, i)
    if c == "\n" then
      line = line + 1
    elseif c == "{" then
      stack[#stack + 1] = { line = line, keys = {} }
    elseif c == "}" then
      local t = table.remove(stack)
      if t and t.keys.state and (function() for key in pairs(t.keys) do if RECORD_KEY[key] then return true end end end)()
         and not allowed(t.line) then
        found[#found + 1] = { line = t.line, rule = "A" }
      end
    elseif c:match("[%a_]") then
      local name = code:match("^[%w_]+", i)
      if #stack > 0 and (prev == "{" or prev == "," or prev == ";") and code:match("^%s*=[^=]", i + #name) then
        stack[#stack].keys[name] = true
      end
      c, i = "a", i + #name - 1
    end
    if not c:match("%s") then prev = c end
    i = i + 1
  end
  -- B: assignments: a lone "=" whose left-hand side (the names, fields and
  -- indexes just before it) starts a statement: at the start of the line,
  -- after a keyword (then, do, ...) or a ";". (In a constructor, the names
  -- before a key's "=" follow another "=": { state = rec.state, fire = 1 }.)
  line = 0
  for l in (code .. "\n"):gmatch("([^\n]*)\n") do
    line = line + 1
    local p = 1
    while true do
      local at = l:find("=", p, true)
      if not at then break end
      local lone = not l:sub(at - 1, at - 1):match("[=~<>]") and l:sub(at + 1, at + 1) ~= "="
      if lone then
        local before = l:sub(1, at - 1)
        local from = before:find("[%w_%.%[%]#%+%-%s,]*$")
        local lhs, starts = before:sub(from), before:sub(1, from - 1):match("^%s*$") or before:sub(1, from - 1):match(";%s*$")
        for pos, word in before:sub(from):gmatch("()([%a_][%w_]*)") do
          if KEYWORD[word] then lhs, starts = before:sub(from + pos - 1 + #word), true end
        end
        for _, pat in ipairs(starts and CHANGED or {}) do
          if lhs:find(pat) and not allowed(line) then
            found[#found + 1] = { line = line, rule = "B" }
            break
          end
        end
      end
      p = at + (lone and 1 or 2)
    end
  end
  table.sort(found, function(a, b) return a.line < b.line or (a.line == b.line and a.rule < b.rule) end)
  return found
end

-- The check on code as it was before record.lua (excerpts of those files):
-- it finds each of those sites, and nothing in code that only reads.
local old = {
  { [==[
  local skipped = {
    job = run.job, fire = run.fire, node = self.name, attempt = 0, state = "skipped",
    started = now, finished = now, code_revision = spec.revision, manual = run.manual or nil,
    shard = run.shard and run.shard.index or nil, params = run_params(spec, run.params),
    event = run.event, error = why }
]==], "A1", "runs.lua skip_txn: a skipped record" },
  { [==[
  local rec = {
    job = run.job, fire = run.fire, node = self.name, attempt = run.attempt,
    state = "running", started = now, code_revision = spec.revision,
    attempts = prev and prev.rec.attempts or {}, token = token, event = run.event,
  }
]==], "A1", "runs.lua claim: a claimed record" },
  { [==[
  rec.attempts[#rec.attempts + 1] = {
    attempt = rec.attempt, node = rec.node, state = opts.attempt_state or rec.state,
    started = rec.started, finished = rec.finished, error = rec.error, fence = fence }
  rec.mod_revision, rec.token = nil, nil
  if rec.retry_at then
    rec.state = "retrying"
]==], "A1 B1 B6", "runs.lua record_end: the attempts entry, appended, and retrying" },
  { [==[
function M.attempt_entry(rec, state, err, now)
  return { attempt = rec.attempt, node = rec.node, state = state, started = rec.started,
           finished = now, error = err, fence = rec.fence }
end
]==], "A2", "runs.lua attempt_entry" },
  { [==[
  rec.finished, rec.error, rec.fence = self.now(), why, fence
  rec.duration = rec.finished - rec.started
  rec.state = final or state
  rec.retry_at = delay and rec.finished + delay or nil
  if state == "killed" then rec.killed_by = run.cancel and run.cancel.by end
]==], "B3 B4 B5", "runs.lua execute_counted: the end of an attempt" },
  { [==[
          orec.attempts = orec.attempts or {}
          orec.state, orec.finished = "killed", now
          orec.error, orec.retry_at = "replaced by run " .. run.id, nil
]==], "B2 B3", "runs.lua replace_active: killed" },
  { [==[
      rec.state, rec.finished, rec.retry_at = "abandoned", self.now(), nil
]==], "B1", "runs.lua take_pending: abandoned" },
  { [==[
  local rest = json.encode({ state = rec.state, fire = rec.fire, started = rec.started,
                              finished = rec.finished, node = rec.node, attempt = rec.attempt }, TEXT)
]==], "A1", "runs.lua last_value: the last run" },
  { [==[
  rec.attempts[#rec.attempts + 1] = runs.attempt_entry(rec, "lost", why, now)
  rec.token = nil
    rec.state, rec.error, rec.killed_by = "killed", c.reason .. "; " .. why, c.by
    rec.state, rec.retry_at = "retrying", now
    if decision == "abandon" then rec.state = "abandoned" end
]==], "B1 B3 B4 B5", "leader.lua check_inflight: lost, killed, retrying, abandoned" },
  { [==[
      local rec = { job = name, fire = m.fire, shard = m.shard, node = self.name, attempt = 0,
                    state = "skipped", started = now, finished = now, error = why,
                    code_revision = spec.revision }
]==], "A1", "leader.lua settle_misfires: skipped" },
  { [==[
  local rec = { job = name, fire = req.fire, node = self.name, attempt = 0, state = "skipped",
                started = now, finished = now, error = why, code_revision = j.spec.revision,
                event = req.event }
]==], "A1", "events.lua skip: skipped" },
  { [==[
  rec.state, rec.finished, rec.error, rec.fence = "succeeded", baton.now() + (run.clock or 0), nil, run.fence
]==], "B1", "cli/worker.lua record_success: succeeded" },
  { [==[
  return { run = rec.key, state = field(rec, "state"), fire = field(rec, "fire"),
           started = field(rec, "started"), finished = field(rec, "finished"),
           node = field(rec, "node"), attempt = field(rec, "attempt") }
]==], "A1", "ops.lua last_of: the last run" },
  -- code that reads records, or builds other things
  { [==[
  if rec.state == "retrying" then
  local state = field(decode_object(rkv.value) or {}, "state")
  local v = decode_object(kv.value) or { state = "unreadable", error = kv.value }
  m.workers:set({ state = "busy" }, 0)
  local f = { job = run.job, instant = run.id, node = self.name, attempt = run.attempt }
  ops[#ops + 1] = { put = { key = k.pending, value = json.encode({ at = 1, attempt = 2, reason = "x" }) } }
  if x.state ~= "running" and a.attempts == b then y = 1 end
  local s = "rec.state = 'x'" -- rec.state = "y"
  --[[ { state = "x", fire = 1 } ]]
  local t = { [ [[a.state = ]] ] = 1 }
]==], "", "reads and other tables: nothing" },
  { [==[
  -- not a run record: a sample
  local r = { job = "j", attempt = 1, state = "failed" }
  f.state, f.error = state, why -- not a run record: the log line's fields
]==], "", "a comment allows one" },
}
for _, o in ipairs(old) do
  local got = {}
  for _, s in ipairs(sites(o[1])) do got[#got + 1] = s.rule .. s.line end
  T.is(table.concat(got, " "), o[2], "the check finds " .. o[3])
end

local root = os.getenv("BATON_ROOT") or "."
local files = assert(baton.exec { "sh", "-c", "cd \"$0\" && find lua -name '*.lua' | sort", root }).stdout
local bad, nfiles = {}, 0
for f in files:gmatch("[^\n]+") do
  if f ~= "lua/baton/record.lua" then
    nfiles = nfiles + 1
    local fh = assert(io.open(root .. "/" .. f))
    local src = fh:read("*a")
    fh:close()
    local lines = {}
    for l in (src .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
    for _, s in ipairs(sites(src)) do
      bad[#bad + 1] = ("%s:%d: %s: %s"):format(f, s.line, s.rule == "A" and "a record built" or "a record changed",
                                              lines[s.line]:match("^%s*(.-)%s*$"))
    end
  end
end
T.ok(nfiles > 50, "the check read lua/ (" .. nfiles .. " files)")
T.is(#bad, 0, "no run record built or changed outside lua/baton/record.lua")
for i = 1, math.min(#bad, tonumber(os.getenv("RECORD_SHOW")) or 80) do T.diag(bad[i]) end

T.done()
