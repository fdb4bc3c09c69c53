-- The Lua half of tests/c/test-worker-binding.c: the worker's own binding
-- (runtime/lua/lua_worker.c), in a runtime that opened it as `baton
-- worker` does. The capture (baton._output_capture): exec and spawn tee
-- into it, output = false opts out, its cap, its long lines; the end of a
-- run outside containment and without a fence board; a command job's
-- failure text.
local T = require "tap"
local baton = require "baton"

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
sink:close()
T.error_like(function() sink:take() end, "closed", "a closed sink cannot be taken from")

-- A line longer than 4 KiB comes in pieces of one tap, each but the last
-- marked cont.
sink = baton._output_capture(100000)
assert(baton.exec { "sh", "-c", "head -c 9000 /dev/zero | tr '\\0' x; echo" })
got = sink:take()
T.is_deeply(got and { #got[1].text, got[1].cont, #got[2].text, got[2].cont, #got[3].text, got[3].cont },
            { 4096, true, 4096, true, 808, nil }, "a 9000-byte line: two full pieces marked cont, then its end")
T.ok(got and got[1].tap == got[3].tap, "the pieces carry their tap's number")
-- A new capture replaces the installed one, which gets nothing more.
local second = baton._output_capture(1000)
assert(baton.exec { "echo", "to-the-second" })
T.is(select("#", sink:take()), 0, "the replaced capture gets no more lines")
got = second:take()
T.ok(got and got[1].text == "to-the-second", "the new capture gets them")
sink:close()
second:close()
r = assert(baton.exec { "echo", "after" })
T.is(r.stdout, "after\n", "with no capture installed, exec goes on as before")

-- The end of a run: no containment process, no fence board here.
T.is(baton._sweep(1), false, "_sweep: false without containment")
T.is(baton._fenced(), false, "_fenced: false without a fence board")

-- A command job's failure text.
T.is(baton._exit_text(0), nil, "_exit_text: nothing for a success")
T.is(baton._exit_text(3, nil, "one\n\n  two  \n"), "exited with status 3: one | two",
     "_exit_text: the status and stderr's non-empty lines")
T.is(baton._exit_text(137, 9, " \n"), "was killed by signal 9 (SIGKILL)",
     "_exit_text: the signal by name, no tail for blanks")

T.done()
