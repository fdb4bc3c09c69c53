-- baton node: three nodes, one run per instant across the cluster, worker
-- processes, hot reload, a rejected put that keeps the last good version,
-- a job that never returns stopped at its timeout.
local T = require "tap"
local bin = os.getenv("BATON_BIN") or "bin/baton"
local eps = os.getenv("BATON_ENDPOINTS")
local e = baton.etcd
local P = "/test/node/" .. tostring(baton.now()):gsub("%.", "") .. "/"
local OUT = P .. "out/"
local tmp = os.tmpname()
os.remove(tmp)
assert(baton.exec { "mkdir", "-p", tmp })

local function baton_cli(...)
  local args = { bin, "--endpoints", eps, "--prefix", P, ... }
  args.timeout = 30
  return assert(baton.exec(args))
end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function job_source(version, extra)
  return ([[
return {
  schedule = "* * * * * *",
  timeout = 10,
  -- (runs may overlap: a node's first run waits for a fresh worker, which
  -- on a loaded machine can take past the next instant, and forbid would
  -- then record that instant skipped)
  concurrency = "allow",
  run = function(ctx)
    -- one key per execution: two executions of an instant would make two
    local k = %q .. string.format("%%d", ctx.fire) .. "/" .. ctx.node .. "-" .. tostring(math.random(1e9))
    assert(ctx:put_fenced(k, %q))
  end,
}
]]):format(OUT, version) .. (extra or "")
end

-- 1. The job, then three nodes.
write(tmp .. "/tick.lua", job_source("v1"))
local put = baton_cli("job", "put", tmp .. "/tick.lua", "--name", "tick")
T.is(put.code, 0, "job put")
local nodes = {}
for _, n in ipairs { "n1", "n2", "n3" } do
  nodes[n] = assert(baton.spawn { "sh", "-c", ("exec %q --endpoints %q --prefix %q node --name %s --ttl 5 >%s/%s.log 2>&1")
    :format(bin, eps, P, n, tmp, n), stdio = "null" })
end

local function statuses(name)
  local r = assert(e:get(P .. "status/" .. name .. "/", { prefix = true }))
  local out = {}
  for _, kv in ipairs(r.kvs) do out[kv.key:match("[^/]+$")] = baton.json.decode(kv.value) end
  return out
end

local function wait_until(secs, fn)
  local deadline = baton.monotime() + secs
  while baton.monotime() < deadline do
    if fn() then return true end
    baton.sleep(0.1)
  end
  return false
end

T.ok(wait_until(10, function()
  local st = statuses("tick")
  return st.n1 and st.n2 and st.n3
end), "all three nodes loaded the job and wrote their status")
local r = assert(e:get(P .. "nodes/", { prefix = true }))
T.is(r.count, 3, "three nodes registered")

baton.sleep(7)

-- Every instant between the first and the last (exclusive) ran exactly once,
-- and the instants' rank-0 nodes differ, so runs spread over the nodes. On a
-- loaded machine (the suite under valgrind) a rank-0 node can miss its turn
-- for a while; then the spread is waited for, up to 30 s more.
local function runs()
  local rr = assert(e:get(P .. "runs/tick/", { prefix = true }))
  local by = {}
  for _, kv in ipairs(rr.kvs) do
    local rec = baton.json.decode(kv.value)
    by[rec.fire] = rec
  end
  return by, rr.kvs
end
local function executions()
  local rr = assert(e:get(OUT, { prefix = true }))
  local by = {}
  for _, kv in ipairs(rr.kvs) do
    local fire = tonumber(kv.key:sub(#OUT + 1):match("^(%d+)/"))
    by[fire] = by[fire] or {}
    table.insert(by[fire], kv.value)
  end
  return by
end
local function nodes_that_ran()
  local seen, n = {}, 0
  for _, rec in pairs((runs())) do
    if rec.node and not seen[rec.node] then seen[rec.node], n = true, n + 1 end
  end
  return n
end
wait_until(30, function() return nodes_that_ran() >= 2 end)
local by, kvs = runs()
local fires = {}
for f in pairs(by) do fires[#fires + 1] = f end
table.sort(fires)
T.ok(#fires >= 5, "at least 5 instants recorded (" .. #fires .. ")")
local ex = executions()
local gaps, bad, ran_on = 0, {}, {}
for i = 2, #fires - 1 do
  local f = fires[i]
  if fires[i] - fires[i - 1] ~= 1 then gaps = gaps + 1 end
  local rec = by[f]
  if rec.state ~= "succeeded" or #(ex[f] or {}) ~= 1 then
    bad[#bad + 1] = ("%d: %s on %s (%s), %d executions"):format(f, rec.state, tostring(rec.node),
                                                               tostring(rec.error), #(ex[f] or {}))
  end
  ran_on[rec.node] = true
end
T.is(gaps, 0, "no instant missing")
if not T.is(#bad, 0, "every instant: one run record, succeeded, one execution " .. table.concat(bad, "; ")) then
  local files = require "lib.files"
  for _, n in ipairs { "n1", "n2", "n3" } do
    T.diag(n .. ".log:\n" .. (files.read(tmp .. "/" .. n .. ".log") or ""):sub(-4000))
  end
end
local nn = 0
for _ in pairs(ran_on) do nn = nn + 1 end
if not T.ok(nn >= 2, "runs spread over the nodes (" .. nn .. " of 3 ran some)") then
  local files = require "lib.files"
  for i = 2, #fires - 1 do T.diag(("instant %d ran on %s"):format(fires[i], by[fires[i]].node)) end
  for _, n in ipairs { "n1", "n2", "n3" } do
    local log = files.read(tmp .. "/" .. n .. ".log") or ""
    T.diag(n .. ".log:\n" .. log:sub(-3000))
  end
end
local rec = by[fires[2]]
T.ok(rec.fence and rec.code_revision and rec.started and rec.finished and rec.attempt == 1,
     "a run record has fence, code revision, times and attempt")

-- 2. Hot reload: version 2 is running on all nodes within a second or two.
write(tmp .. "/tick.lua", job_source("v2"))
local t0 = baton.monotime()
T.is(baton_cli("job", "put", tmp .. "/tick.lua", "--name", "tick").code, 0, "put version 2")
local rev2 = assert(e:get(P .. "jobs/tick")).kvs[1].mod_revision
T.ok(wait_until(5, function()
  local st = statuses("tick")
  for _, n in ipairs { "n1", "n2", "n3" } do
    if not st[n] or st[n].revision ~= rev2 then return false end
  end
  return true
end), ("all nodes loaded version 2 (%.2f s)"):format(baton.monotime() - t0))
baton.sleep(2.5)
local after2 = baton.now() - 1.5
local ex2 = executions()
local v2, other = 0, 0
for f, vals in pairs(ex2) do
  if f > after2 then
    for _, v in ipairs(vals) do if v == "v2" then v2 = v2 + 1 else other = other + 1 end end
  end
end
T.ok(v2 >= 1 and other == 0, ("runs after the reload run version 2 (%d v2, %d other)"):format(v2, other))

-- 3. A broken put (raw, as etcdctl would) keeps version 2 running and shows
-- the error.
assert(e:put(P .. "jobs/tick", "return { schedule = '* * * * * *', run = function(ctx) end"))
local badrev = assert(e:get(P .. "jobs/tick")).kvs[1].mod_revision
T.ok(wait_until(5, function()
  local st = statuses("tick")
  for _, n in ipairs { "n1", "n2", "n3" } do
    if not st[n] or st[n].revision ~= badrev or st[n].error == baton.json.null then return false end
  end
  return true
end), "every node reports the broken revision's error in its status")
T.like(statuses("tick").n1.error or "", "syntax error", "the status says what is wrong")
local ls = baton_cli("job", "ls")
T.like(ls.stdout, "\ntick .-broken", "job ls shows the job as broken")
baton.sleep(2.5)
local ex3 = executions()
local late = 0
for f, vals in pairs(ex3) do
  if f > baton.now() - 1.5 then for _, v in ipairs(vals) do if v == "v2" then late = late + 1 end end end
end
T.ok(late >= 1, "version 2 keeps running after the broken put")

-- 4. A job that never returns is stopped at its timeout; the nodes live on.
write(tmp .. "/spin.lua", [[
return { schedule = "*/2 * * * * *", timeout = 1, concurrency = "allow",
         run = function(ctx) while true do end end }
]])
T.is(baton_cli("job", "put", tmp .. "/spin.lua", "--name", "spin").code, 0, "put a job that spins")
local failed
T.ok(wait_until(15, function()
  local rr = assert(e:get(P .. "runs/spin/", { prefix = true }))
  for _, kv in ipairs(rr.kvs) do
    local rec = baton.json.decode(kv.value)
    if rec.state == "failed" then failed = rec; return true end
  end
end), "a spinning run is recorded as failed")
T.like(failed and failed.error or "", "timed out after 1 s", "with the reason")
T.is(assert(e:get(P .. "nodes/", { prefix = true })).count, 3, "all nodes still registered (leases alive)")
local before = 0
for _ in pairs(executions()) do before = before + 1 end
baton.sleep(2)
local now_count = 0
for _ in pairs(executions()) do now_count = now_count + 1 end
T.ok(now_count > before, "the other job keeps its instants")

-- Bad input to baton node: a clear error, and the live node is not touched.
local dup = baton_cli("node", "--name", "n1", "--ttl", "5")
T.is(dup.code, 1, "a second node with a live node's name: exit 1")
T.like(dup.stderr, "^baton: node n1: EEXIST: the name is in use by a live node\n", "saying the name is in use")
local badname = baton_cli("node", "--name", "no spaces")
T.is(badname.code, 2, "an invalid --name: usage error")
T.like(badname.stderr, "%-%-name: letters, digits", "saying what is allowed")
local badlabels = baton_cli("node", "--name", "n9", "--labels", "zone")
T.is(badlabels.code, 2, "malformed --labels: usage error")
T.like(badlabels.stderr, "%-%-labels: k=v", "saying the form")
T.is(assert(e:get(P .. "nodes/", { prefix = true })).count, 3, "the three nodes are untouched")

-- 5. Nodes stop on SIGTERM and deregister.
for _, p in pairs(nodes) do p:kill("SIGTERM") end
local codes = {}
for n, p in pairs(nodes) do codes[#codes + 1] = (p:wait(20) or {}).code end
T.is_deeply(codes, { 0, 0, 0 }, "nodes exit 0 on SIGTERM")
T.is(assert(e:get(P .. "nodes/", { prefix = true })).count, 0, "and deregister")

assert(baton.exec { "rm", "-rf", tmp })
e:delete(P, { prefix = true })
T.done()
