-- The conductor<->worker protocol (lua/baton/worker/protocol.lua), with no
-- etcd and no worker: every message encodes to one line that decodes back
-- to what was sent, on the side that reads it; a NUL byte is sent as
-- U+FFFD; and a line that is not a message decodes to nil and an EPROTO
-- error that says what is wrong with it.
local T = require "tap"
local protocol = require "baton.worker.protocol"
local json = baton.json

local function one_line(text, what)
  T.ok(type(text) == "string" and not text:find("\n", 1, true), what .. ": one line of text")
end

-- attempt_key names one attempt.
T.is(protocol.attempt_key { job = "backup", id = "2026-11-29T02:00:00Z/3", attempt = 2 },
     "backup/2026-11-29T02:00:00Z/3/2", "attempt_key: job/id/attempt")

-- 1. run: node -> worker.
local run = {
  job = "backup", id = "2026-11-29T02:00:00Z", fire = 1796090400, fence = 1234, attempt = 1,
  node = "n1", code_revision = 77, code_created = 70, code_version = 3, source = "return {}",
  deadline = 1796090460, marker = "/baton/running/backup/2026-11-29T02:00:00Z",
  task = json.null, shard = { index = 1, total = 4 }, record = { state = "running", attempt = 1 },
  clock = 0.25, params = { day = "monday" }, event = json.null,
  events = { succeeded = { "report" } }, secrets = { DB = "pw" },
}
local text = assert(protocol.run(run))
one_line(text, "run")
local m = assert(protocol.decode_for_worker(text))
T.is(m.kind, "run", "run: decoded as a run")
local want = {}
for k, v in pairs(run) do if v ~= json.null then want[k] = v end end
T.is_deeply(m.run, want, "run: round trip, its null fields left out")
T.is(m.run.task, nil, "run: a null task is nil")

-- A field the protocol does not know is a bug of the caller: it raises.
T.error_like(function() protocol.run { job = "j", bogus = 1 } end, "unknown field bogus",
             "run: an unknown field raises")
-- What JSON cannot hold (a function from a job's file): nil and why, nothing sent.
local ntext, why = protocol.run { job = "j", fence = 1, attempt = 1, node = "n", code_revision = 1,
                                  marker = "m", params = { f = function() end } }
T.is(ntext, nil, "run: a function cannot be sent")
T.ok(type(why) == "string" and why ~= "" and not why:find("^baton%.json%.encode"),
     "run: and why, without the encoder's name: " .. tostring(why))

-- 2. recorded: node -> worker.
text = protocol.recorded("backup/2026-11-29T02:00:00Z/1")
one_line(text, "recorded")
T.is_deeply(protocol.decode_for_worker(text), { kind = "recorded", key = "backup/2026-11-29T02:00:00Z/1" },
            "recorded: round trip")

-- 3. txn_done: node -> worker, both kinds of answer.
text = protocol.txn_done(7, { succeeded = false })
one_line(text, "txn_done")
T.is_deeply(protocol.decode_for_worker(text), { kind = "txn_done", n = 7, succeeded = false },
            "txn_done: a compare that failed, round trip")
T.is_deeply(protocol.decode_for_worker(protocol.txn_done(8, { succeeded = true })),
            { kind = "txn_done", n = 8, succeeded = true }, "txn_done: a success, round trip")
T.is_deeply(protocol.decode_for_worker(protocol.txn_done(9, { error = "ELOST: gone", code = "ELOST" })),
            { kind = "txn_done", n = 9, error = "ELOST: gone", code = "ELOST" }, "txn_done: an error, round trip")

-- 4. reply: worker -> node.
local reply = { ok = false, error = "boom", stopped = true, retire = true, busy = 1.5 }
text = protocol.reply(reply)
one_line(text, "reply")
local r = assert(protocol.decode_for_node(text))
T.is(r.kind, "reply", "reply: decoded as a reply")
r.kind = nil
T.is_deeply(r, reply, "reply: round trip")
r = assert(protocol.decode_for_node(protocol.reply { ok = true, handoff = "j/1/1", busy = 0 }))
T.ok(r.ok == true and r.handoff == "j/1/1", "reply: a success handed over, round trip")
-- A NUL byte in an error is sent as U+FFFD, never raised: the node always gets its reply.
r = assert(protocol.decode_for_node(protocol.reply { ok = false, error = "a\0b" }))
T.is(r.error, "a\239\191\189b", "reply: a NUL byte in the error arrives as U+FFFD")

-- 5. txn: worker -> node.
local ops = { { put = { key = "/k", value = "v" } }, { put = { key = "/k2", value = "" } } }
text = protocol.txn(3, "j/1/1", ops)
one_line(text, "txn")
T.is_deeply(protocol.decode_for_node(text), { kind = "txn", n = 3, run = "j/1/1", ops = ops },
            "txn: round trip")
-- ops that are not puts of string keys and values: the request is refused, with why.
for _, bad in ipairs {
  { name = "no ops", ops = {} },
  { name = "a delete", ops = { { delete = { key = "/k" } } } },
  { name = "a number value", ops = { { put = { key = "/k", value = 1 } } } },
  { name = "two operations in one", ops = { { put = { key = "/k", value = "v" }, delete = { key = "/x" } } } },
} do
  local q = assert(protocol.decode_for_node(protocol.txn(4, "j/1/1", bad.ops)))
  T.ok(q.kind == "txn" and q.n == 4 and q.ops == nil, "txn with " .. bad.name .. ": no ops to make")
  T.like(q.why or "", "^EINVAL: a fenced write holds puts of string keys and values", "txn with " .. bad.name .. ": why")
end

-- 6. Malformed lines: nil, an EPROTO message that says what is wrong, "EPROTO".
local function refused(decode, line, pattern, what)
  local v, err, code = decode(line)
  T.ok(v == nil and code == "EPROTO", what .. ": refused with EPROTO")
  T.like(err or "", "^EPROTO: " .. pattern, what .. ": " .. tostring(err))
end
local W, N = protocol.decode_for_worker, protocol.decode_for_node
refused(W, "not json", "the node sent a malformed message: .*invalid JSON", "to the worker, not JSON")
refused(W, "[1,2]", "the node sent a malformed message: neither run, recorded nor txn_done",
        "to the worker, an array")
refused(W, '"run"', "the node sent a malformed message: not a JSON object", "to the worker, a string")
refused(W, '{"run": 5}', "the node sent a malformed message: run is not an object", "a run that is a number")
refused(W, '{"run": {"job": "j"}}', "the node sent a malformed message: the run has no %w+",
        "a run without its fence, attempt, ...")
refused(W, '{"recorded": 1}', "the node sent a malformed message: recorded is not a key", "recorded without a key")
refused(W, '{"txn_done": "x", "succeeded": true}',
        "the node sent a malformed message: txn_done is not a request number", "txn_done without a number")
refused(W, '{"txn_done": 1}', "the node sent a malformed message: txn_done has neither succeeded nor an error",
        "txn_done without an answer")
refused(W, '{"hello": 1}', "the node sent a malformed message: neither run, recorded nor txn_done",
        "an unknown message to the worker")
refused(W, "", "the node sent a malformed message", "an empty line to the worker")
refused(N, "{", "the worker sent a malformed message: .*invalid JSON", "to the node, not JSON")
refused(N, "true", "the worker sent a malformed message: not a JSON object", "to the node, a boolean")
refused(N, '{"txn": []}', "the worker sent a malformed message: txn has no request number",
        "a txn without its number")
refused(N, '{"txn": "x"}', "the worker sent a malformed message: txn is not an object", "a txn that is a string")
refused(N, '{"error": "x"}', "the worker sent a malformed message: the reply has no ok", "a reply without ok")
refused(N, '{"ok": "yes"}', "the worker sent a malformed message: ok is a string, not a boolean",
        "a reply whose ok is not a boolean")
refused(N, '{"ok": true, "busy": "1"}', "the worker sent a malformed message: busy is a string, not a number",
        "a reply whose busy is not a number")
refused(N, '{"ok": true, "surprise": 1}', "the worker sent a malformed message: unknown field surprise",
        "a reply with a field the protocol does not know")
-- (null fields of a reply are as if left out)
r = assert(N('{"ok": false, "error": null, "handoff": null}'))
T.ok(r.ok == false and r.error == nil and r.handoff == nil, "reply: null fields are left out")

T.done()
