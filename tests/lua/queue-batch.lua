-- baton queue push QUEUE - / --file FILE (issue 13): many tasks from lines
-- or a JSON array, in push order, bad input refused with one line and
-- nothing stored; and two nodes draining them, each task exactly once, in
-- create order on a node, a task deleted before its claim not run.
local T = require "tap"
local N = require "nodes"
local F = require "files"
local json = baton.json
local c = N.new("queuebatch")
local e, P = c.e, c.P

local function lit(s) return (s:gsub("%p", "%%%0")) end
local ID = "%d%d%d%d%d%d%d%d%d%d%d%d%d%-" .. ("%x"):rep(16)

local function push(args, stdin)
  local argv = { os.getenv("BATON_BIN") or "bin/baton", "--endpoints", os.getenv("BATON_ENDPOINTS"),
                 "--prefix", P, "queue", "push" }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  argv.stdin, argv.timeout = stdin or "", 30
  return assert(baton.exec(argv))
end

-- The tasks of a queue as etcd holds them, in create order (then key).
local function tasks(q)
  local r = assert(e:get(P .. "queue/" .. q .. "/", { prefix = true }))
  table.sort(r.kvs, function(a, b)
    if a.create_revision ~= b.create_revision then return a.create_revision < b.create_revision end
    return a.key < b.key
  end)
  return r.kvs
end

local function count(q)
  return assert(e:get(P .. "queue/" .. q .. "/", { prefix = true, count_only = true })).count
end

-- Whether the kvs hold exactly values, in order, and their keys sort so.
local function in_order(kvs, values)
  if #kvs ~= #values then return false, ("%d tasks, not %d"):format(#kvs, #values) end
  for i, kv in ipairs(kvs) do
    if kv.value ~= values[i] then return false, ("task %d is %q, not %q"):format(i, kv.value, values[i]) end
    if i > 1 and kv.key <= kvs[i - 1].key then return false, "key " .. i .. " does not sort after the one before" end
    if not kv.key:match("/" .. ID .. "$") then return false, "key " .. kv.key .. " has no <ms>-<16 hex> id" end
  end
  return true
end

-- 1. 500 tasks from a file, one per line (blank lines skipped, \r\n too).
local lines, values = {}, {}
for i = 1, 500 do
  values[i] = json.encode { n = i, text = "line " .. i }
  lines[#lines + 1] = values[i] .. (i % 7 == 0 and "\r" or "")
  if i % 100 == 0 then lines[#lines + 1] = "  " end
end
F.write(c.dir .. "/tasks.txt", table.concat(lines, "\n") .. "\n")
local t0 = baton.monotime()
local r = push { "held", "--file", c.dir .. "/tasks.txt" }
local took = baton.monotime() - t0
T.is(r.code, 0, "--file: exit 0")
T.is(r.stderr, "", "--file: nothing on stderr")
T.like(r.stdout, "^500 tasks pushed to queue held: " .. lit(P) .. "queue/held/" .. ID .. " %.%. "
  .. lit(P) .. "queue/held/" .. ID .. "\n$", "--file: one line with the count, the queue, the first and last key")
local kvs = tasks("held")
local ok, why = in_order(kvs, values)
T.ok(ok, "--file: 500 tasks stored as given, in line order, ids sorting the same way " .. (why or ""))
T.is(r.stdout:match(": (%S+) %.%."), kvs[1] and kvs[1].key, "the first key printed is the first task's")
T.is(r.stdout:match("%.%. (%S+)\n"), kvs[500] and kvs[500].key, "the last key printed is the last task's")
local txns = {}
for _, kv in ipairs(kvs) do txns[kv.create_revision] = true end
local ntx = 0
for _ in pairs(txns) do ntx = ntx + 1 end
T.is(ntx, 4, "in 4 transactions of at most 128 tasks")
T.ok(took < 10, ("pushed in %.2f s (bound 10 s)"):format(took))

-- 2. A JSON array on stdin: strings as they are, other values as written.
local arr, want = {}, {}
for i = 1, 500 do
  if i % 2 == 0 then
    arr[i], want[i] = json.encode("s" .. i .. " \"q\" [x],"), "s" .. i .. " \"q\" [x],"
  else
    arr[i] = ('{ "n": %d,  "tags": ["a", {"b": "]"}], "f": 1.50 }'):format(i)
    want[i] = arr[i]
  end
end
r = push({ "arr", "-", "--json" }, "\n  [" .. table.concat(arr, ",\n ") .. "]\n")
T.is(r.code, 0, "JSON array on stdin: exit 0")
local out = r.code == 0 and json.decode(r.stdout) or {}
T.is(out.queue, "arr", "--json: queue")
T.is(out.count, 500, "--json: count")
T.is(type(out.keys) == "table" and #out.keys, 500, "--json: the 500 keys")
T.ok(type(out.revision) == "number", "--json: revision")
kvs = tasks("arr")
ok, why = in_order(kvs, want)
T.ok(ok, "JSON array: 500 tasks in order, strings decoded, objects kept as written " .. (why or ""))
local same = #kvs == 500
for i, kv in ipairs(kvs) do if out.keys and out.keys[i] ~= kv.key then same = false end end
T.ok(same, "--json: keys in input order")

-- 3. Bad input: one line, exit 1, nothing stored.
local big = ("x"):rep(1600 * 1024)
local bad = {
  { "not an array", { "bad", "-" }, "[1, 2, {\"a\": 3]\n",
    "^baton: queue push bad: EINVAL: standard input starts with '%[' but is not a JSON array of tasks: invalid JSON at byte %d+; nothing was stored\n$" },
  { "text after the array", { "bad", "-" }, "[1, 2]\n[3]\n",
    "^baton: queue push bad: EINVAL: standard input starts with '%[' but is not a JSON array of tasks: unexpected text after the array at byte 8; nothing was stored\n$" },
  { "empty input", { "bad", "-" }, "",
    "^baton: queue push bad: EINVAL: no tasks in standard input %(it is empty, blank, or an empty JSON array%); nothing was stored\n$" },
  { "blank lines", { "bad", "-" }, "\n  \n\t\n", "EINVAL: no tasks in standard input" },
  { "an empty array", { "bad", "-" }, " [ ] ", "EINVAL: no tasks in standard input" },
  { "a task over etcd's limit", { "bad", "-" }, ("small\n"):rep(249) .. big .. "\nsmall\n",
    "^baton: queue push bad: EFBIG: standard input, line 250: the task is 1%.6 MiB, larger than etcd's request limit of 1%.5 MiB %(etcd's default %-%-max%-request%-bytes%); nothing was stored\n$" },
  { "an element over etcd's limit", { "bad", "-" }, '["a", "' .. big .. '"]',
    "^baton: queue push bad: EFBIG: standard input, element 2: the task is 1%.6 MiB" },
  { "a missing file", { "bad", "--file", c.dir .. "/nope" }, "",
    "^baton: queue push bad: ENOENT: " .. lit(c.dir) .. "/nope: No such file or directory\n$" },
  { "NUL in a string", { "bad", "-" }, '["a\\u0000b"]',
    "^baton: queue push bad: EINVAL: standard input, element 1: a task cannot hold \\u0000; nothing was stored\n$" },
  { "a raw NUL in an element", { "bad", "-" }, '["ok", "a\0b"]',
    "^baton: queue push bad: EINVAL: standard input, element 2: a task cannot hold a NUL byte; nothing was stored\n$" },
  { "a NUL byte in a line", { "bad", "-" }, "first\nse\0cond\n",
    "^baton: queue push bad: EINVAL: standard input, line 2: a task cannot hold a NUL byte; nothing was stored\n$" },
}
for _, b in ipairs(bad) do
  r = push(b[2], b[3])
  T.is(r.code, 1, b[1] .. ": exit 1")
  T.like(r.stderr, b[4], b[1] .. ": says why")
  T.is(select(2, r.stderr:gsub("\n", "")), 1, b[1] .. ": in one line")
end
T.is(count("bad"), 0, "bad input stored nothing")
r = push { "bad", "v", "--file", c.dir .. "/tasks.txt" }
T.is(r.code, 2, "VALUE and --file: a usage error")
T.like(r.stderr, "^baton: queue: give either a VALUE or %-%-file, not both\n", "VALUE and --file: says so")

-- 3b. etcd failing midway (a private etcd that refuses requests over 256
-- KiB, which baton does not know): the transactions applied stay, and the
-- error says how many tasks were stored, the first of the input.
do
  local H = require "etcdh"
  local srv = H.start("--max-request-bytes=262144")
  local mid = {}
  for i = 1, 200 do mid[i] = "s" .. i end
  mid[201] = ("y"):rep(300 * 1024)
  mid[202] = "last"
  local argv = { os.getenv("BATON_BIN") or "bin/baton", "--endpoints", srv.url, "--prefix", P,
                 "queue", "push", "part", "-", stdin = table.concat(mid, "\n"), timeout = 60 }
  r = assert(baton.exec(argv))
  T.is(r.code, 1, "etcd fails midway: exit 1")
  T.like(r.stderr, "^baton: queue push part: E%u+: [^\n]*; 128 of 202 tasks were stored %(the first 128 of the "
    .. "input%), the rest were not\n$", "says how many were stored, in one line")
  local pe = baton.etcd.new { endpoints = srv.url }
  local got = assert(pe:get(P .. "queue/part/", { prefix = true, sort = "key", order = "asc" }))
  local firsts = {}
  for i = 1, 128 do firsts[i] = "s" .. i end
  ok, why = in_order(got.kvs, firsts)
  T.ok(ok, "and those are in etcd: the first 128 tasks, in order " .. (why or ""))
  pe:close()
  srv:destroy()
end

-- 4. One task as before: its key alone, --json {queue, key, revision}.
r = push { "one", "[not json, one task]" }
T.like(r.stdout, "^" .. lit(P) .. "queue/one/" .. ID .. "\n$", "VALUE: prints the key alone, as before")
r = push { "one", "v2", "--json" }
out = r.code == 0 and json.decode(r.stdout) or {}
T.ok(out.queue == "one" and type(out.key) == "string" and type(out.revision) == "number" and out.count == nil,
  "VALUE --json: {queue, key, revision}, as before")
kvs = tasks("one")
T.is(kvs[1] and kvs[1].value, "[not json, one task]", "VALUE: stored as given, even if it starts with '['")

-- 4b. docs/guide.md's batch push example works when pasted.
do
  local guide = F.read((os.getenv("BATON_ROOT") or ".") .. "/docs/guide.md") or ""
  local block
  for b in guide:gmatch("```sh\n(.-)```") do
    if b:find("queue push orders -", 1, true) then block = b end
  end
  T.ok(block, "docs/guide.md has the batch push example")
  local script = ("baton() { %q --endpoints %q --prefix %q \"$@\"; }\n"):format(
    os.getenv("BATON_BIN") or "bin/baton", os.getenv("BATON_ENDPOINTS"), P) .. (block or "false\n")
  r = assert(baton.exec { "sh", "-ec", script, cwd = c.dir, timeout = 30 })
  T.is(r.code, 0, "the guide's example exits 0 " .. r.stderr)
  T.like(r.stdout, "^3 tasks pushed to queue orders: " .. lit(P) .. "queue/orders/" .. ID .. " %.%. [^\n]+\n"
    .. "2 tasks pushed to queue orders: [^\n]+\n$", "and prints what the guide shows")
  ok, why = in_order(tasks("orders"), { '{"id": 1}', '{"id": 2}', '{"id": 3}', '{"id": 4, "amount": 500}',
                                        "plain text, one task" })
  T.ok(ok, "the guide's example stores the five tasks it says, in order " .. (why or ""))
end

-- 5. Two nodes drain 500 tasks pushed in one go: each exactly once.
local log = c.dir .. "/exec.log"
local probe = assert(baton.httpd.listen { addr = "127.0.0.1:0", handler = function(q) q:respond(200, {}, "") end })
local port = probe.port
probe:close()
F.write(c.dir .. "/token", "qb-token\n")
c:start("a", 3, ("--workers 8 --history 2000 --http 127.0.0.1:%d --http-token-file %s"):format(port, c.dir .. "/token"))
c:start("b", 3, "--workers 8 --history 2000")
local rev = c:put_job("work", ([[
return { queue = "work", timeout = 20,
  run = function(ctx)
    local f = assert(io.open(%q, "a"))
    f:write(ctx.task.value, " ", ctx.node, "\n")
    f:close()
  end }]]):format(log))
T.ok(c:loaded("work", rev), "queue job loaded on both nodes")
local lv = {}
for i = 1, 500 do lv[i] = "w" .. i end
t0 = baton.monotime()
r = push({ "work", "-" }, table.concat(lv, "\n"))
T.is(r.code, 0, "push 500 tasks for the nodes")
local drained = N.wait(60, function() return count("work") == 0 end)
local secs = baton.monotime() - t0
T.ok(drained, ("the queue drained (%.1f s, bound 60 s)"):format(secs))
local runs, by_node = {}, {}
for line in (F.read(log) or ""):gmatch("[^\n]+") do
  local v, n = line:match("^(%S+) (%S+)$")
  if v then
    runs[v] = (runs[v] or 0) + 1
    by_node[n] = (by_node[n] or 0) + 1
  end
end
local once, dup, missing = 0, 0, 0
for i = 1, 500 do
  local k = runs["w" .. i]
  if k == 1 then once = once + 1 elseif k then dup = dup + 1 else missing = missing + 1 end
end
T.is(once, 500, ("each of 500 tasks ran exactly once (%d duplicated, %d missing)"):format(dup, missing))
T.ok((by_node.a or 0) > 0 and (by_node.b or 0) > 0,
  ("both nodes ran tasks (a %d, b %d)"):format(by_node.a or 0, by_node.b or 0))
local recs, succeeded = c:records("work"), 0
for _, rec in ipairs(recs) do if rec.state == "succeeded" then succeeded = succeeded + 1 end end
T.is(succeeded, 500, "500 run records, succeeded")

-- 5b. The HTTP API: ?batch=true pushes many; without it, one as before.
local function post(query, body)
  local res = assert(baton.exec { "curl", "-s", "-w", "\n%{http_code}", "-X", "POST", "--data-binary", "@-",
    "-H", "Authorization: Bearer qb-token", "http://127.0.0.1:" .. port .. "/api/v1/queues/httpq/tasks" .. query,
    stdin = body, timeout = 20 })
  local b, status = res.stdout:match("^(.*)\n(%d+)$")
  local jok, v = pcall(json.decode, b or "")
  return tonumber(status), jok and type(v) == "table" and v or {}
end
local up = N.wait(20, function()
  local res = baton.exec { "curl", "-s", "http://127.0.0.1:" .. port .. "/readyz", timeout = 10 }
  return res and res.stdout:find('"ready"')
end)
T.ok(up, "node a serves its HTTP API")
local st, body = post("?batch=true", '[1, "two", {"x": [3]}]')
T.is(st, 201, "POST ?batch=true: 201")
T.ok(body.count == 3 and type(body.keys) == "table" and #body.keys == 3 and body.queue == "httpq",
  "POST ?batch=true: {queue, count, keys}")
ok, why = in_order(tasks("httpq"), { "1", "two", '{"x": [3]}' })
T.ok(ok, "POST ?batch=true: the elements stored in order " .. (why or ""))
for _, b in ipairs {
  { "", 400, "^EINVAL: no tasks in the body" },
  { "[1,", 400, "^EINVAL: the body starts with '%[' but is not a JSON array of tasks" },
  { "a\n" .. big .. "\n", 413, "^EFBIG: the body, line 2: the task is" },
} do
  st, body = post("?batch=true", b[1])
  T.is(st, b[2], "POST ?batch=true, bad body: " .. b[2])
  T.like(body.error or "", b[3], "POST ?batch=true, bad body: says why")
end
st, body = post("?batch=maybe", "x")
T.is(st, 400, "POST ?batch=maybe: 400")
T.is(count("httpq"), 3, "bad bodies stored nothing")
st, body = post("", "[1, 2]")
T.is(st, 201, "POST without ?batch: one task, as before")
T.ok(type(body.key) == "string" and body.count == nil, "POST without ?batch: {queue, key, revision}")
T.is(body.key and assert(e:get(body.key)).kvs[1].value, "[1, 2]", "POST without ?batch: the body is the task")

-- 6. Paused: tasks wait; one deleted meanwhile is never run; on resume the
-- rest run, and a node with one worker runs them in push order.
c:stop("b")
T.is(c:cli("job", "pause", "work").code, 0, "pause")
baton.sleep(0.5)
F.write(log, "")
lv = {}
for i = 1, 30 do lv[i] = "p" .. i end
r = push({ "work", "-", "--json" }, table.concat(lv, "\n"))
out = r.code == 0 and json.decode(r.stdout) or { keys = {} }
for i = 2, 30, 3 do assert(e:delete(out.keys[i])) end
baton.sleep(1)
T.is(F.read(log), "", "nothing runs while the job is paused")
c:stop("a")
c:start("a", 3, "--workers 1 --history 2000")
T.ok(c:loaded("work", rev), "node a back with one worker")
T.is(c:cli("job", "resume", "work").code, 0, "resume")
drained = N.wait(30, function() return count("work") == 0 end)
T.ok(drained, "the paused tasks drained after resume")
local order = {}
for line in (F.read(log) or ""):gmatch("[^\n]+") do order[#order + 1] = line:match("^(%S+)") end
local expect = {}
for i = 1, 30 do if i % 3 ~= 2 then expect[#expect + 1] = "p" .. i end end
T.is(table.concat(order, " "), table.concat(expect, " "),
  "the 20 tasks left ran once each, in push order; the 10 deleted before their claim did not run")

c:destroy()
T.done()
