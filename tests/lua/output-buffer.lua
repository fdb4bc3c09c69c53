-- The parts of a run's kept output that need no etcd (output.lua, reading
-- it; worker/output.lua, writing it):
-- the key scheme, redaction, the cap of the queue, reading chunks back with
-- markers for dropped lines, the format of a line; that the capture of
-- what programs print is not in eval (tests/c/test-worker-binding.lua has
-- it).
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

-- The capture (baton._output_capture) is the worker's: `baton eval` has
-- none of the worker's binding. tests/c/test-worker-binding.lua tests it
-- where `baton worker` opens it.
for _, name in ipairs { "_output_capture", "_sweep", "_fenced", "_exit_text" } do
  T.is(baton[name], nil, "baton." .. name .. " is the worker's only")
end
T.error_like(function() baton.exec { "true", output = "no" } end, "output must be a boolean",
             "output must be a boolean")

T.done()
