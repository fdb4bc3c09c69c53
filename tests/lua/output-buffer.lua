-- The parts of a run's kept output that need no etcd (output.lua, reading
-- it; worker/output.lua, writing it):
-- the key scheme, redaction, the cap of the queue, reading chunks back with
-- markers for dropped lines, the format of a line, and the capture of what
-- programs print (baton._output_capture, exec/spawn output = false).
-- Storing and fencing are tested with real nodes in node-output.lua.
local T = require "tap"
local output = require "baton.worker.output"
local stored = require "baton.output"
local keys = require "baton.keys"
local json = baton.json

-- Keys: a run's prefix never covers another run's output.
local P = "/p/"
local plain, shard = "2026-11-29T02:00:00Z", "2026-11-29T02:00:00Z/1"
T.is(keys.output(P, "j", plain, 1), "/p/output/j/2026-11-29T02:00:00Z/@1/", "attempt prefix")
local shard_key = keys.output(P, "j", shard, 1) .. "00000001"
T.is(shard_key:sub(1, #keys.output(P, "j", plain)) == keys.output(P, "j", plain), false,
     "a shard's output is not under the run prefix of its instant")
T.isnt(keys.output(P, "j", plain, 10):sub(1, #keys.output(P, "j", plain, 1)),
       keys.output(P, "j", plain, 1), "attempt 10 is not under attempt 1's prefix")
local a, ch = stored.parse_key(P, "j", shard, shard_key)
T.ok(a == 1 and ch == 1, "parse_key: attempt and chunk")

-- Redaction.
T.is(output.redact("x hunter2 y hunter2", { "hunter2" }), "x *** y ***", "every occurrence")
T.is(output.redact("a.b%c", { "." , "%c" }), "a***b***", "secrets are plain text, not patterns")
T.is(output.redact("nothing here", { "zzz" }), "nothing here", "a line without a secret is unchanged")

-- The queue keeps the newest lines within the cap, and counts every line.
local b = output.new { P = P, job = "j", id = plain, attempt = 1, marker = "m", fence = 1, cap = 1000,
                       secrets = { "s3cret" } }
for i = 1, 100 do b:add { stream = "stdout", text = ("line %03d s3cret"):format(i) } end
T.is(b.n, 100, "100 lines counted")
T.ok(b.qbytes <= 1000 and b.qbytes > 1000 - 70, "the queue holds at most the cap, and nearly it")
T.is(b.q[b.qt].text, "line 100 ***", "the newest line is queued, redacted")
b:add { stream = "log", level = "warn", text = "msg", fields = { k = "s3cret!", n = 1, t = { 1 } } }
local lf = b.q[b.qt].fields
T.ok(lf.k == "***!" and lf.n == 1 and lf.t == "[1]", "log fields: redacted, plain values, tables as JSON")
b:add { stream = "stdout", text = ("z"):rep(output.LINE_MAX * 2 + 5) }
T.is(b.n, 104, "a line over LINE_MAX is cut into lines")
T.is(#b.q[b.qt].text, 5, "(the last piece)")

-- Reading chunks back: gaps are markers with the count.
local function chunk(key, lines) return { key = key, value = json.encode { cap = 2048, lines = lines } } end
local kvs = {
  chunk("k/00000002", { { n = 7, t = 1, stream = "stdout", text = "seven" }, { n = 8, t = 1, stream = "stdout", text = "eight" } }),
  chunk("k/00000001", { { n = 3, t = 1, stream = "stdout", text = "three" } }),
}
local lines, last, cap = stored.lines(kvs)
T.is(last, 8, "the last line's number")
T.is(cap, 2048, "the cap it was written under")
T.is_deeply({ lines[1].dropped, lines[2].text, lines[3].dropped, lines[4].text, lines[5].text },
            { 2, "three", 3, "seven", "eight" }, "chunks in key order, a marker for each gap")
T.is(stored.format(lines[1]), "... 2 lines dropped (the output of an attempt is capped at 2 KiB) ...",
     "the marker says how many, and the cap")
T.is(stored.format { t = 1796169011.94, stream = "stdout", text = "hi" }, "2026-12-01T23:50:11.940Z stdout  hi",
     "a printed line: time, stream, text")
T.is(stored.format { t = 0, stream = "log", level = "warn", text = "disk", fields = { b = "x y", a = 1 } },
     '1970-01-01T00:00:00.000Z warn    disk a=1 b="x y"', "a log line: level, fields sorted and quoted")
T.is(stored.format { t = 0, stream = "stderr", cmd = "pg_dump", text = "oops" },
     "1970-01-01T00:00:00.000Z pg_dump:err oops", "a program's line: PROGRAM:err")

-- The capture: exec and spawn tee into it; output = false opts out.
local sink = baton._output_capture(200)
local r = assert(baton.exec { "sh", "-c", "i=1; while [ $i -le 30 ]; do echo l$i; i=$((i+1)); done; echo e >&2" })
T.ok(r.stdout:find("l30\n", 1, true), "exec still returns all its output")
local got, dropped = sink:take()
T.ok(got and got[#got].text == "e" and got[#got].stream == "stderr" and got[#got].cmd == "sh",
     "the capture has the program's lines with stream and command")
local kept_bytes = 0
for _, l in ipairs(got or {}) do kept_bytes = kept_bytes + #l.text end
T.ok(kept_bytes <= 200, "the capture keeps at most its cap")
T.is(#got + dropped, 31, "and counts what it dropped")
T.is(select("#", sink:take()), 0, "nothing more to take")
assert(baton.exec { "echo", "hidden", output = false })
T.is(select("#", sink:take()), 0, "exec with output = false is not captured")
local p = assert(baton.spawn { "sh", "-c", "echo from-spawn" })
p:wait()
baton.sleep(0.1)
got = sink:take()
T.ok(got and got[1].text == "from-spawn", "a spawned program's stdout is captured")
T.error_like(function() baton.exec { "true", output = "no" } end, "output must be a boolean",
             "output must be a boolean")
sink:close()
T.error_like(function() sink:take() end, "closed", "a closed sink cannot be taken from")

T.done()
