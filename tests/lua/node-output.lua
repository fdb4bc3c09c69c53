-- A run's kept output (lua/baton/worker/output.lua, lua/baton/output.lua): what it prints, logs and
-- what the programs it starts print is stored in etcd next to its record,
-- read with `baton job logs` from another process, capped with a marker,
-- followed live with -f, opted out of per call, redacted of the node's
-- secrets, written only under the attempt's fence, and deleted with its
-- record by the history retention.
local T = require "tap"
local N = require "nodes"
local output = require "baton.worker.output"
local keys = require "baton.keys"

local bin = os.getenv("BATON_BIN") or "bin/baton"
local eps = os.getenv("BATON_ENDPOINTS")
local json = baton.json

local c = N.new("nodeoutput")
local TOKEN = "tok-" .. tostring(math.floor(baton.now() * 1000)) .. "-zq9"
local tokfile = c.dir .. "/http-token"
do
  local f = assert(io.open(tokfile, "w"))
  f:write(TOKEN, "\n")
  f:close()
end
c:start("a", 3, "--history 2", "BATON_HTTP_TOKEN_FILE=" .. tokfile)

-- `baton job logs ...` (and others) in a process of its own: stdout,
-- stderr, exit status.
local function cli(...)
  local r = c:cli(...)
  return r.stdout, r.stderr, r.code
end

local function ended(job, secs)
  return N.wait(secs or 20, function()
    local rec = c:records(job)[1]
    return rec and rec.state ~= "running" and rec.state ~= "retrying" and rec
  end)
end

local function output_kvs(job)
  return assert(c.e:get(c.P .. "output/" .. job .. "/", { prefix = true })).kvs
end

local function run(job, source)
  local rev = c:put_job(job, source)
  T.ok(c:loaded(job, rev), job .. " loaded")
  local _, err, code = cli("job", "run", job)
  T.is(code, 0, job .. ": job run " .. err)
end

-- 1. Retention first (it waits for the leader's pruning, every 60 s), three
-- runs of a job that says which one it is.
local pruned_src = [[
return { schedule = "@manual", run = function(ctx) print("run of " .. ctx.fire) end }]]
run("pruned", pruned_src)
for i = 2, 3 do
  ended("pruned")
  N.wait(10, function() return #c:records("pruned") == i - 1 end)
  baton.sleep(0.05) -- manual ids have milliseconds: distinct ones
  cli("job", "run", "pruned")
  N.wait(10, function() return #c:records("pruned") == i end)
end
N.wait(20, function()
  local rs = c:records("pruned")
  if #rs < 3 then return false end
  for _, r in ipairs(rs) do if r.state ~= "succeeded" then return false end end
  return true
end)
local pruned_ids = {}
for _, kv in ipairs(assert(c.e:get(c.P .. "runs/pruned/", { prefix = true, sort = "key" })).kvs) do
  pruned_ids[#pruned_ids + 1] = kv.key:sub(#(c.P .. "runs/pruned/") + 1)
end
T.is(#pruned_ids, 3, "retention: three runs of pruned")
local function has_output(job, id)
  local r = assert(c.e:get(keys.output(c.P, job, id), { prefix = true, count_only = true }))
  return r.count > 0
end
local all_kept = true
for _, id in ipairs(pruned_ids) do all_kept = all_kept and has_output("pruned", id) end
T.ok(all_kept, "retention: each run has its output stored")

-- 2. A run that prints, logs, and runs chatty programs (one of them opted
-- out), readable after the run from another process.
run("chatty", ([[
return { schedule = "@manual", timeout = 30, run = function(ctx)
  print("hello from print", 42)
  io.write("partial ")
  io.write("line\n")
  io.stderr:write("to stderr\n")
  ctx.log.warn("logged", { k = "v" })
  local r = assert(baton.exec { "sh", "-c", "i=1; while [ $i -le 50 ]; do echo exec-line-$i; i=$((i+1)); done; echo exec-err >&2" })
  assert(r.stdout:find("exec-line-50", 1, true), "exec still returns its output")
  assert(baton.exec { "echo", "hidden-exec", output = false })
  local p = assert(baton.spawn { "sh", "-c", "echo spawned-line; echo spawned-err >&2" })
  p:wait()
  local f = assert(io.open(os.getenv("BATON_HTTP_TOKEN_FILE")))
  print("the token is " .. f:read("*l"))
  f:close()
  assert(baton.exec { "cat", os.getenv("BATON_HTTP_TOKEN_FILE") })
  io.write("no newline at the end")
end }]]))
local rec = ended("chatty")
T.is(rec and rec.state, "succeeded", "chatty: succeeded")
local out, err, code = cli("job", "logs", "chatty")
T.is(code, 0, "logs chatty: exit 0 " .. err)
local lines = {}
for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
local function find(pat, from)
  for i = from or 1, #lines do if lines[i]:find(pat) then return i end end
end
local iprint = find("stdout%s+hello from print\t42$")
T.ok(iprint, "print's line, as stream stdout")
T.ok(find("stdout%s+partial line$"), "io.write pieces make one line")
T.ok(find("stderr%s+to stderr$"), "io.stderr:write as stderr")
local ilog = find("warn%s+logged k=v$")
T.ok(ilog and iprint and ilog > iprint, "ctx.log.warn with its fields, after the print")
local ifirst, ilast = find("sh:out%s+exec%-line%-1$"), find("sh:out%s+exec%-line%-50$")
T.ok(ifirst and ilast and ilast - ifirst == 49 and ifirst > ilog,
     "the exec's 50 stdout lines, in order, after the log line")
T.ok(find("sh:err%s+exec%-err$"), "the exec's stderr")
T.ok(not out:find("hidden-exec", 1, true), "output = false: that exec's output is not kept")
T.ok(find("sh:out%s+spawned%-line$") and find("sh:err%s+spawned%-err$"), "a spawned program's stdout and stderr")
T.ok(find("stdout%s+no newline at the end$"), "an unfinished last line is kept")
T.like(lines[1] or "", "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ ", "each line starts with its time")
T.ok(not out:find(TOKEN, 1, true), "the node's HTTP token does not appear")
T.ok(find("stdout%s+the token is %*%*%*$"), "printed, it is ***")
T.ok(find("cat:out%s+%*%*%*$"), "printed by a program, too")
local raw = ""
for _, kv in ipairs(output_kvs("chatty")) do raw = raw .. kv.value end
T.ok(#raw > 0 and not raw:find(TOKEN, 1, true), "nor is it anywhere in the stored output")
T.ok(not c:log("a"):find(TOKEN, 1, true), "nor in the node's log")

local jout = cli("job", "logs", "chatty", "--json")
local jl, okjson = {}, true
for l in jout:gmatch("[^\n]+") do
  local ok, v = pcall(json.decode, l)
  if ok and type(v) == "table" then jl[#jl + 1] = v else okjson = false end
end
T.ok(okjson and #jl == #lines, "--json: one JSON object per line")
local jfirst = jl[1] or {}
T.is(jfirst.stream, "stdout", "--json: stream")
T.is(jfirst.text, "hello from print\t42", "--json: text")
T.ok(type(jfirst.t) == "number" and type(jfirst.n) == "number" and jfirst.attempt == 1,
     "--json: time, line number and attempt")
local jlog
for _, v in ipairs(jl) do if v.stream == "log" then jlog = v end end
T.ok(jlog and jlog.level == "warn" and type(jlog.fields) == "table" and jlog.fields.k == "v",
     "--json: a log line has its level and fields")

local id = c:records("chatty")[1].id
local out2 = cli("job", "logs", "chatty", id, "--attempt", "1")
T.is(out2, out, "logs NAME ID --attempt 1: the same output")

-- 3. The cap: oldest lines dropped, with a marker saying how many; from
-- print and from a program that prints far more than the cap.
run("capped", [[
return { schedule = "@manual", timeout = 60, run = function(ctx)
  local pad = string.rep("x", 90)
  for i = 1, 3000 do print(("print %04d %s"):format(i, pad)) end
  assert(baton.exec { "seq", "1", "200000" })
  print("the end")
end }]])
rec = ended("capped", 40)
T.is(rec and rec.state, "succeeded", "capped: succeeded")
out = cli("job", "logs", "capped")
lines = {}
for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
local dropped, shown = 0, 0
for _, l in ipairs(lines) do
  local n = l:match("^%.%.%. (%d+) lines? dropped %(the output of an attempt is capped at 64 KiB%) %.%.%.$")
  if n then dropped = dropped + tonumber(n) else shown = shown + 1 end
end
T.like(lines[1] or "", "^%.%.%. %d+ lines dropped %(the output of an attempt is capped at 64 KiB%)",
       "the first line is the marker")
T.is(dropped + shown, 3000 + 200000 + 1, "the marker counts exactly the lines not kept")
T.like(lines[#lines] or "", "stdout%s+the end$", "the last line is kept")
T.like(lines[#lines - 1] or "", "seq:out%s+200000$", "and the program's last line before it")
local stored = 0
for _, kv in ipairs(output_kvs("capped")) do
  for _, l in ipairs(json.decode(kv.value).lines) do stored = stored + #l.text + output.LINE_COST end
end
T.ok(stored <= output.CAP and stored > output.CAP / 2,
     ("what is stored is within the cap and near it (%d bytes counted, cap %d)"):format(stored, output.CAP))

-- 4. A silent job costs no write.
run("silent", [[return { schedule = "@manual", run = function(ctx) baton.sleep(0.8) end }]])
rec = ended("silent")
T.is(rec and rec.state, "succeeded", "silent: succeeded")
T.is(#output_kvs("silent"), 0, "silent: no output key was written")
out, err, code = cli("job", "logs", "silent")
T.ok(code == 0 and out == "", "logs of a silent run: nothing, exit 0")

-- 5. -f follows a 5-second run as it goes, from another process, and ends
-- with its final state.
local slow = [[
return { schedule = "@manual", timeout = 30, run = function(ctx)
  for i = 1, 5 do print("tick " .. i); baton.sleep(1) end
  return nil, "five ticks and out"
end }]]
run("slow", slow)
N.wait(10, function() local r = c:records("slow")[1]; return r and r.state == "running" end)
local ffile = c.dir .. "/follow.out"
local fp = assert(baton.spawn { "sh", "-c", ("exec %q --endpoints %q --prefix %q job logs slow -f >%q 2>&1")
                                 :format(bin, eps, c.P, ffile), stdio = "null" })
local function followed()
  local f = io.open(ffile)
  local s = f and f:read("*a") or ""
  if f then f:close() end
  return s
end
local saw2 = N.wait(6, function() return followed():find("tick 2", 1, true) end)
local state_then = (c:records("slow")[1] or {}).state
T.ok(saw2, "-f: a line shows while the run runs")
T.is(state_then, "running", "(the run was still running then)")
local fr = fp:wait(20)
T.is(fr and fr.code, 3, "-f ends when the run ends, with its status (3: failed)")
local fo = followed()
local ticks = {}
for n in fo:gmatch("tick (%d)") do ticks[#ticks + 1] = tonumber(n) end
T.is_deeply(ticks, { 1, 2, 3, 4, 5 }, "-f: every line, once, in order")
T.like(fo, "%-%-%- run ended: failed %(attempt 1 on a %d+s%): five ticks and out %-%-%-\n$",
       "-f: the last line is the run's final state")

-- -f --json of a run that has ended: its lines, then {"end": record}.
out, err, code = cli("job", "logs", "slow", "-f", "--json")
local last
for l in out:gmatch("[^\n]+") do last = l end
local lv = last and json.decode(last) or {}
T.ok(code == 3 and type(lv["end"]) == "table" and lv["end"].state == "failed",
     "-f --json: the last line is {\"end\": the record}")

-- A failed attempt that is retried: -f follows into the next attempt;
-- --attempt N shows one attempt's output.
run("retried", [[
return { schedule = "@manual", timeout = 30, retry = { attempts = 1, backoff = 1, jitter = 0 },
         run = function(ctx)
  print("try " .. ctx.attempt)
  if ctx.attempt == 1 then baton.sleep(2); error("first try fails") end
end }]])
N.wait(10, function() local r = c:records("retried")[1]; return r and r.state == "running" end)
out, err, code = cli("job", "logs", "retried", "-f")
T.is(code, 0, "-f of a retried run: exit 0 " .. err)
T.like(out, "stdout%s+try 1\n%-%-%- attempt 1 ended: [^\n]*first try fails; it runs again %-%-%-\n"
          .. "%-%-%- attempt 2 on a %-%-%-\n[^\n]+stdout%s+try 2\n"
          .. "%-%-%- run ended: succeeded %(attempt 2 on a %d+ms%) %-%-%-\n$",
       "-f follows a retried run into its next attempt, to its end")
out = cli("job", "logs", "retried", "--attempt", "1")
T.like(out, "^[^\n]+stdout%s+try 1\n$", "--attempt 1: that attempt's output only")
out = cli("job", "logs", "retried")
T.like(out, "^[^\n]+stdout%s+try 2\n$", "without --attempt: the last attempt's")

-- `job run X && job logs X -f` follows the run just asked for, not the
-- previous one.
run("again", [[
return { schedule = "@manual", timeout = 30, run = function(ctx)
  print(("run at %.3f"):format(ctx.fire)); baton.sleep(1)
end }]])
local first = ended("again")
local both = assert(baton.exec { "sh", "-c", ("%q --endpoints %q --prefix %q job run again >/dev/null && "
  .. "exec %q --endpoints %q --prefix %q job logs again -f"):format(bin, eps, c.P, bin, eps, c.P), timeout = 30 })
local fires = {}
for f in both.stdout:gmatch("run at ([%d.]+)") do fires[#fires + 1] = tonumber(f) end
T.ok(#fires == 1 and first and fires[1] > first.fire,
     "job run && job logs -f: the new run's output " .. both.stderr)
T.like(both.stdout, "%-%-%- run ended: succeeded %(attempt 1 on a %d+s%) %-%-%-\n$", "to its end")

-- 6. Missing job, run or attempt: one line naming it, exit 1.
out, err, code = cli("job", "logs", "nosuch")
T.is(code, 1, "logs of a missing job: exit 1")
T.is(err, "baton: job logs nosuch: ENOENT: no job nosuch at " .. c.P .. "jobs/nosuch\n",
     "logs of a missing job: names it")
out, err, code = cli("job", "logs", "chatty", "2020-01-01T00:00:00Z")
T.is(code, 1, "logs of a missing run: exit 1")
T.is(err, "baton: job logs chatty: ENOENT: no run 2020-01-01T00:00:00Z of job chatty "
          .. "(see baton job history chatty)\n", "logs of a missing run: names it")
out, err, code = cli("job", "logs", "chatty", "--attempt", "2")
T.is(code, 1, "logs of a missing attempt: exit 1")
T.like(err, "^baton: job logs chatty: ENOENT: run [%dT:.Z-]+ has no attempt 2 %(it has 1%)\n$",
       "logs of a missing attempt: names it")
out, err, code = cli("job", "logs")
T.is(code, 2, "logs without NAME: usage, exit 2")
c:put_job("norun", [[return { schedule = "@manual", run = function() end }]])
out, err, code = cli("job", "logs", "norun")
T.ok(code == 1 and err == "baton: job logs norun: ENOENT: job norun has no runs yet\n",
     "logs of a job that never ran: says so, exit 1")

-- 7. Fencing: an attempt's output is written only under its fence.
do
  local P = c.P .. "fencing/"
  local mk = P .. "running/j/x"
  local m = assert(c.e:put(mk, "marker"))
  local fence = assert(c.e:get(mk)).kvs[1].create_revision
  local wrong = output.new { P = P, job = "j", id = "x", attempt = 1, marker = mk, fence = fence + 1000 }
  wrong:add { stream = "stdout", text = "from a run that lost its claim" }
  T.is(wrong:flush(), false, "a flush under a fence that is not the marker's fails")
  T.is(assert(c.e:get(keys.output(P, "j", "x"), { prefix = true, count_only = true })).count, 0,
       "and writes nothing")
  local right = output.new { P = P, job = "j", id = "x", attempt = 1, marker = mk, fence = fence }
  right:add { stream = "stdout", text = "from the claim's holder" }
  T.is(right:flush(), true, "under the marker's fence it is written")
  c.e:delete(mk)
  right:add { stream = "stdout", text = "after the marker went" }
  T.is(right:flush(), false, "once the marker is gone, nothing more")
  local kvs = assert(c.e:get(keys.output(P, "j", "x"), { prefix = true })).kvs
  T.is(#kvs, 1, "one chunk stored")
  T.ok(m and kvs[1] and kvs[1].value:find("claim's holder", 1, true)
       and not kvs[1].value:find("marker went", 1, true), "with only what the holder said")
end

-- The node's secrets: the etcd password too.
do
  local script = c.dir .. "/secrets.lua"
  local f = assert(io.open(script, "w"))
  f:write([[local o = require "baton.worker.output"
    io.write(o.redact("a pw-]] .. TOKEN .. [[ b", require("baton.worker.secrets").node_secrets()))]])
  f:close()
  local r = assert(baton.exec { "env", "BATON_PASSWORD=pw-" .. TOKEN, bin, "eval", script })
  T.is(r.stdout, "a *** b", "BATON_PASSWORD is one of the secrets redacted " .. r.stderr)
end

-- 1, again: the leader prunes to the newest 2 records, and the output of
-- the pruned one goes with it. A stray key runs/pruned/ (no id: nothing
-- baton writes, but anyone with etcdctl can) sorts first and goes too; it
-- once stopped the leader's pruning for good (the id came out nil).
assert(c.e:put(c.P .. "runs/pruned/", "{}"))
local gone = N.wait(80, function() return #c:records("pruned") == 2 end)
T.ok(gone, "retention: the oldest record of pruned was deleted")
T.ok(not has_output("pruned", pruned_ids[1]), "retention: and its output")
T.ok(has_output("pruned", pruned_ids[2]) and has_output("pruned", pruned_ids[3]),
     "retention: the kept records keep theirs")

-- job rm --purge deletes the output with the records.
cli("job", "rm", "pruned", "--purge")
T.is(#output_kvs("pruned"), 0, "job rm --purge: the output goes with the records")

c:destroy()
T.done()
