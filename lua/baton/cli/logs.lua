-- A run's kept output, printed and followed live: `job logs [-f]` and
-- `job run --wait` (docs/jobs.md, "Following a run"). Exits, when it
-- follows, with the status EXIT says.
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"
local output = require "baton.output"
local keys = require "baton.keys"

local format, ipairs, tonumber, tostring, type = string.format, ipairs, tonumber, tostring, type
local concat = table.concat
local e = baton.etcd

local M = {}

local function die(name, err, status)
  return A.die("job logs " .. name .. ": " .. err, status)
end

-- The job's source kv, or false when there is none; nil, err on failure.
local function get_job(name)
  local r, err = e:get(keys.key(U.prefix(), "jobs", name))
  if not r then return nil, err end
  return r.kvs[1] or false, r.revision
end

-- How a run ended, as the exit status of `job run --wait` and `job logs
-- -f` (docs/jobs.md): 0 only for a success. 1 and 2 are every command's
-- (baton could not ask etcd or follow the run; a usage error).
local EXIT = { succeeded = 0, failed = 3, timed_out = 4, killed = 5, skipped = 6, not_started = 7 }

-- The record of run id of job name (the newest run without id), as
-- (kv, rec, revision); or nil, err.
function M.run_record(name, id)
  local pfx = keys.dir(U.prefix(), "runs", name)
  local r, err
  if id then
    r, err = e:get(pfx .. id)
  else
    r, err = e:get(pfx, { prefix = true, sort = "create", order = "desc", limit = 1 })
  end
  if not r then return nil, err end
  local kv = r.kvs[1]
  if not kv then
    local jkv, jerr = get_job(name)
    if jkv == nil then return nil, jerr end
    if not jkv then return nil, "ENOENT: no job " .. name .. " at " .. keys.key(U.prefix(), "jobs", name) end
    if id then return nil, "ENOENT: no run " .. id .. " of job " .. name .. " (see baton job history " .. name .. ")" end
    return nil, "ENOENT: job " .. name .. " has no runs yet"
  end
  return kv, U.decode_object(kv.value) or {}, r.revision
end

-- While a manual run of job name is requested (P trigger/<name>/...) and
-- not claimed: the record of the run claimed next, (kv, rec, revision).
-- false when none is requested; nil, err on failure.
function M.wait_triggered(name)
  local tp, rp = keys.dir(U.prefix(), "trigger", name), keys.dir(U.prefix(), "runs", name)
  local r, err = e:get(tp, { prefix = true, count_only = true })
  if not r then return nil, err end
  if r.count == 0 then return false end
  local w, werr = e:watch(rp, { prefix = true, start_revision = r.revision + 1 })
  if not w then return nil, werr end
  io.stderr:write("baton: job logs " .. name .. ": waiting for a node to start the requested run\n")
  while true do
    local evs, _, code = w:next()
    if not evs and code ~= "ETIMEDOUT" then return nil, "watching the run records: " .. tostring(code) end
    for _, ev in ipairs(evs or {}) do
      if ev.type == "put" and ev.kv.version == 1 then
        w:cancel()
        return ev.kv, U.decode_object(ev.kv.value) or {}, ev.kv.mod_revision
      end
    end
  end
end

-- Final states: the run has ended for good.
local ENDED = { succeeded = true, failed = true, abandoned = true, skipped = true, killed = true,
                lost = true }

-- How the run (rec) ended, or (a given and not the run's last attempt, or
-- the run not ended) how attempt a ended: {what, state, node, started,
-- finished, error, attempt (nil for an attempt's end)}.
local function ending(rec, a)
  -- not a run record: what is shown of one read
  local x = { what = "run ended", state = U.field(rec, "state"), node = U.field(rec, "node"),
              started = U.field(rec, "started"), finished = U.field(rec, "finished"),
              error = U.field(rec, "error"), attempt = U.field(rec, "attempt") }
  if not ENDED[x.state] or (a and a ~= x.attempt) then
    x.what, x.attempt = "attempt " .. tostring(a) .. " ended", nil
    for _, at in ipairs(type(rec.attempts) == "table" and rec.attempts or {}) do
      if type(at) == "table" and at.attempt == a then
        -- not a run record: what is shown of one read
        x.state, x.node, x.started = U.field(at, "state"), U.field(at, "node"), U.field(at, "started")
        x.finished, x.error = U.field(at, "finished"), U.field(at, "error")
      end
    end
  end
  return x
end

-- The exit status of an ending (EXIT): a failure that is a timeout
-- ("timed out after 60 s") has its own; abandoned and lost runs are
-- failures.
local function exit_status(x)
  if x.state == "succeeded" then return EXIT.succeeded end
  if x.state == "killed" then return EXIT.killed end
  if x.state == "skipped" then return EXIT.skipped end
  if type(x.error) == "string" and x.error:find("^timed out") then return EXIT.timed_out end
  return EXIT.failed
end

-- The line that ends `logs -f`: how the run (or attempt a) ended, its
-- state in colour on a terminal.
local function end_line(rec, a)
  local x = ending(rec, a)
  local bits = {}
  if x.attempt then bits[#bits + 1] = "attempt " .. tostring(x.attempt) end
  if x.node then bits[#bits + 1] = "on " .. tostring(x.node) end
  if type(x.started) == "number" and type(x.finished) == "number" then
    bits[#bits + 1] = U.duration(x.finished - x.started)
  end
  local tail = #bits > 0 and (" (" .. concat(bits, " ") .. ")") or ""
  if x.error then tail = tail .. ": " .. tostring(x.error):gsub("\n", " ") end
  local st = U.escape(tostring(x.state or "?"))
  return "--- " .. U.escape(x.what) .. ": " .. U.paint(st, U.state_color(st)) .. U.escape(tail) .. " ---"
end

-- What prints one run's output (run id of job name): its lines once each,
-- per attempt, as text or (opts.json) JSON lines, and its last line.
-- want: the attempt asked for (--attempt), or nil. label: a shard's
-- header, or nil.
local function printer(name, id, opts, want, label)
  local P = U.prefix()
  local pr = { shown = {} } -- shown: attempt -> the last line number printed
  local function emit(a, l)
    if opts.json then
      l.attempt = a
      if label then l.id = id end
      U.print_json(l)
    else
      io.stdout:write(U.escape(output.format(l)), "\n")
    end
  end
  -- Prints the lines of attempt a's chunk kvs not printed yet, with a
  -- marker where lines are missing (dropped by the cap).
  function pr.show(a, kvs)
    local n = pr.shown[a] or 0
    local lines, _, cap = output.lines(kvs)
    for _, l in ipairs(lines) do
      if not l.dropped and l.n > n then
        if l.n > n + 1 then emit(a, { dropped = l.n - n - 1, cap = cap }) end
        emit(a, l)
        n = l.n
      end
    end
    pr.shown[a] = n
    io.stdout:flush()
  end
  -- The chunks of attempt a (at revision at, or now).
  function pr.read(a, at)
    local r, err = e:get(keys.output(P, name, id, a), { prefix = true, revision = at })
    if not r then return die(name, err) end
    return r.kvs, r.revision
  end
  -- The end of the run (or of the attempt followed): its line, then exit
  -- with its status.
  function pr.the_end(final)
    if opts.json then U.print_json { ["end"] = final } else io.stdout:write(end_line(final, want), "\n") end
    io.stdout:flush()
    baton.exit(exit_status(ending(final, want)))
  end
  -- Attempt a ended and the run goes on (nrec: {rec, revision}, a record
  -- written after that end, which has it in attempts[]): its last lines,
  -- then how it ended; once.
  local closed = {}
  function pr.close(a, nrec)
    if closed[a] then return end
    closed[a] = true
    pr.show(a, (pr.read(a, nrec and nrec.revision)))
    if not opts.json then
      local x = ending(nrec and nrec.rec or {}, a)
      io.stdout:write(U.escape(format("--- attempt %d ended: %s; it runs again ---", a,
        (tostring(x.error or x.state or "failed"):gsub("\n", " ")))), "\n")
    end
  end
  function pr.header(a, node)
    if opts.json then return end
    io.stdout:write(U.escape(format("--- attempt %d%s ---", a, node and (" on " .. tostring(node)) or "")), "\n")
  end
  return pr
end

-- Follows run kv (read at revision rev; attempt being printed) until its
-- record says it has ended (for good; a retry is followed into its next
-- attempt unless want), then exits with its status. A record is written
-- after its attempt's last chunk, so reading at the record's revision gets
-- them all. Two watches feed it, each in its own coroutine, and what each
-- saw may come before or after the other's; so each event is handled
-- serially, one at a time and in the order they came, even while one
-- handler waits on etcd.
local function follow(pr, name, id, kv, rev, attempt, want)
  local P = U.prefix()
  local ow, oerr = e:watch(keys.output(P, name, id), { prefix = true, start_revision = rev + 1 })
  if not ow then return die(name, oerr) end
  local rw, rerr = e:watch(kv.key, { start_revision = rev + 1 })
  if not rw then return die(name, rerr) end
  local queue, draining = {}, false
  local function serially(fn)
    queue[#queue + 1] = fn
    if draining then return end
    draining = true
    while queue[1] do table.remove(queue, 1)() end
    draining = false
  end
  -- A next attempt began (seen in its record or in its first chunk, which
  -- may come first): the end of the one before, its header and what it
  -- said so far.
  local function switch(a, nrec)
    if want or a <= attempt then return end
    pr.close(attempt, nrec)
    attempt = a
    pr.header(a, nrec and tonumber(U.field(nrec.rec, "attempt")) == a and U.field(nrec.rec, "node"))
    pr.show(a, (pr.read(a)))
  end
  local function on_record(ev)
    if ev.type == "delete" then
      io.stdout:write("--- the run's record was deleted ---\n")
      io.stdout:flush()
      return die(name, "the record of run " .. id .. " was deleted before it ended")
    end
    local nrec = { rec = U.decode_object(ev.kv.value) or {}, revision = ev.kv.mod_revision }
    local st = U.field(nrec.rec, "state")
    local a = tonumber(U.field(nrec.rec, "attempt")) or attempt
    if ENDED[st] or (want and (a > want or st == "retrying")) then
      switch(a, nrec)
      pr.show(attempt, (pr.read(attempt, nrec.revision)))
      return pr.the_end(nrec.rec)
    end
    if st == "retrying" and a == attempt then pr.close(a, nrec) end
    switch(a, nrec)
  end
  local function on_output(ev)
    local a = ev.type == "put" and output.parse_key(P, name, id, ev.kv.key)
    if a and a > attempt then
      -- (its first chunk came before its record, on the other watch: the
      -- record, written with its claim, says which node runs it)
      local g = e:get(kv.key)
      local gkv = g and g.kvs[1]
      switch(a, gkv and { rec = U.decode_object(gkv.value) or {}, revision = gkv.mod_revision })
    end
    if a == attempt then pr.show(a, { ev.kv }) end
  end
  local function follow_watch(w, what, handle)
    while true do
      local evs, _, code = w:next()
      if not evs then
        if code ~= "ETIMEDOUT" then return die(name, what .. ": " .. tostring(code)) end
      else
        for _, ev in ipairs(evs) do serially(function() handle(ev) end) end
      end
    end
  end
  baton.go(follow_watch, rw, "watching the run record", on_record)
  follow_watch(ow, "watching the output", on_output)
end

-- Prints the kept output of run (kv, rec at revision rev) of job name, its
-- last attempt unless opts.attempt; with follow, follows it live until it
-- ends and exits with its status (EXIT). label, when given, comes first
-- (a shard's header). Without follow, returns.
function M.show_run(name, kv, rec, rev, opts, follow_it, label)
  local _, id = keys.split(U.prefix(), "runs", kv.key)
  local want = opts.attempt
  local last = tonumber(U.field(rec, "attempt")) or 0
  if want and want > last then
    return die(name, format("ENOENT: run %s has no attempt %d (it has %d)", id, want, last))
  end
  local attempt = want or (last > 0 and last or 1)
  if label and not opts.json then io.stdout:write(label, "\n") end
  local pr = printer(name, id, opts, want, label)
  pr.show(attempt, (pr.read(attempt, rev)))
  if not follow_it then return end
  local state = U.field(rec, "state")
  if (want and (want < last or state == "retrying")) or ENDED[state] then return pr.the_end(rec) end
  return follow(pr, name, id, kv, rev, attempt, want)
end

-- The shards of a sharded instant (its runs INSTANT/1, INSTANT/2, ...),
-- in order: a list of {kv, rec}, and the revision read at; or nil, err.
function M.shard_records(name, instant)
  local pfx = keys.dir(U.prefix(), "runs", name, instant)
  local r, err = e:get(pfx, { prefix = true })
  if not r then return nil, err end
  local list = {}
  for _, kv in ipairs(r.kvs) do
    local i = tonumber(keys.under(pfx, kv.key):match("^(%d+)$"))
    if i then list[#list + 1] = { i = i, kv = kv, rec = U.decode_object(kv.value) or {} } end
  end
  table.sort(list, function(a, b) return a.i < b.i end)
  return list, r.revision
end

-- How long `job run --wait` waits for a node to start the run, unless
-- --start-timeout says.
M.START_TIMEOUT = 60

-- The record of the manual run r (what ops.run_job returned) of job
-- name, once a node has claimed it (or recorded it skipped): (kv, rec,
-- revision). If none has within secs seconds, the request is withdrawn
-- (unless a node takes it at that moment): nil, why.
function M.wait_claimed(name, r, secs)
  local rkey = keys.key(U.prefix(), "runs", name, r.id)
  local g, err = e:get(rkey)
  if not g then return nil, err end
  if g.kvs[1] then return g.kvs[1], U.decode_object(g.kvs[1].value) or {}, g.revision end
  local w, werr = e:watch(rkey, { start_revision = g.revision + 1 })
  if not w then return nil, werr end
  local deadline, withdrawn = baton.monotime() + secs, false
  while true do
    local left = deadline - baton.monotime()
    if left <= 0 then
      if withdrawn then
        w:cancel()
        return nil, format("ETIMEDOUT: the request was taken but no record of run %s came", r.id)
      end
      -- Withdraw the request, unless a node took it meanwhile (the claim
      -- deletes it in the transaction that writes the record).
      local t, terr = e:txn { compare = { { key = r.key, target = "create", op = ">", value = 0 } },
                              success = { { delete = { key = r.key } } },
                              failure = { { get = { key = rkey } } } }
      if not t then return nil, terr end
      if t.succeeded then
        w:cancel()
        return nil, format("ETIMEDOUT: no node started run %s within %g s; the request was withdrawn "
          .. "(baton job show %s says which nodes loaded the job; --start-timeout S waits longer)", r.id, secs, name)
      end
      local rk = t.responses[1].kvs[1]
      if rk then
        w:cancel()
        return rk, U.decode_object(rk.value) or {}, t.revision
      end
      -- (gone, and no record: removed with the job, or a record on its way)
      withdrawn, deadline = true, baton.monotime() + 5
    else
      local evs, _, code = w:next(math.min(left, 1))
      if not evs and code ~= "ETIMEDOUT" then return nil, "watching the run record: " .. tostring(code) end
      for _, ev in ipairs(evs or {}) do
        if ev.type == "put" then
          w:cancel()
          return ev.kv, U.decode_object(ev.kv.value) or {}, ev.kv.mod_revision
        end
      end
    end
  end
end

M.EXIT, M.ENDED, M.ending = EXIT, ENDED, ending
return M
