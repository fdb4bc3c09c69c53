-- Least-privilege etcd roles (tools/etcd-roles.sh, docs/security.md): on a
-- private etcd, the script creates the node, deployer and viewer roles and
-- users and enables auth; nodes run jobs end to end under the node role
-- (claims, records, output, statuses, election, clock, claims board, a
-- queue), and cannot write code (jobs/, policies/, versions/,
-- policy-versions/, calendars/), nor can their HTTP API (a 403 that says
-- so); a deploy works under the deployer role (and is recorded as its etcd
-- user), a viewer lists jobs but cannot put one (one clear line), and the
-- deployer cannot touch the nodes' keys. The script passes no password on
-- etcdctl's command line (a recording etcdctl on PATH), takes them from
-- files, and ends with one line when etcd does not answer.
local T = require "tap"
local _ -- results a check ignores
local H = require "etcdh"
local N = require "nodes"
local F = require "files"

local bin = os.getenv("BATON_BIN") or "bin/baton"
local root = os.getenv("BATON_ROOT") or "."
local json = baton.json

local srv = H.start()
local P = "/roles/" .. tostring(math.floor(baton.now() * 1000)) .. "/"
local dir = os.tmpname()
os.remove(dir)
assert(baton.exec { "mkdir", "-p", dir .. "/bin" })
for _, u in ipairs { "root", "node", "deploy", "view" } do F.write(dir .. "/" .. u .. "-pw", u .. "-secret\n") end

-- etcdctl on PATH that records its command line, then runs the real one
-- (which, with a second argument "hang", it does not: it sleeps instead,
-- for any command but get).
local real = assert(baton.exec { "sh", "-c", "command -v etcdctl" }).stdout:gsub("%s+$", "")
F.write(dir .. "/bin/etcdctl", ([[#!/bin/sh
printf '%%s\n' "$*" >> %s/argv
if [ -f %s/hang ]; then case "$*" in *" get --keys-only"*) ;; *) exec sleep 100 ;; esac; fi
exec %s "$@"
]]):format(dir, dir, real))
assert(baton.exec { "chmod", "755", dir .. "/bin/etcdctl" })
local PATH = dir .. "/bin:" .. os.getenv("PATH")
local function script(env, ...)
  local args = { root .. "/tools/etcd-roles.sh", "--endpoints", srv.url, "--prefix", P, timeout = 60,
                 env = { PATH = PATH }, ... }
  for k, v in pairs(env) do
    if k == "stdin" then args.stdin = v else args.env[k] = v end
  end
  return assert(baton.exec(args))
end

local s = script({}, "--node", "n1:@" .. dir .. "/node-pw", "--deployer", "deploy:@" .. dir .. "/deploy-pw",
  "--viewer", "view:view-secret", "--enable-auth", "--root-password", "@" .. dir .. "/root-pw")
T.is(s.code, 0, "etcd-roles.sh: exit 0 " .. s.stderr)
T.like(s.stdout, "\n%+ etcdctl role grant%-permission baton%-deployer %-%-prefix=true readwrite " .. P:gsub("%p", "%%%0")
  .. "jobs/\n", "prints what it does")
T.like(s.stdout, "\n%+ etcdctl auth enable\n", "and enables auth")
T.unlike(s.stdout .. s.stderr, "secret", "without printing a password")
T.is(s.stderr, "etcd-roles.sh: warning: the password of view is on the command line, where ps shows it: "
  .. "give view:@FILE\n", "a password on the command line is warned about")
local Pq = P:gsub("%p", "%%%0")
T.like(s.stdout, "\n%+ etcdctl role grant%-permission baton%-node %-%-prefix=true read " .. Pq .. "\n",
  "the node role reads the prefix")
T.unlike(s.stdout, "baton%-node %-%-prefix=true readwrite " .. Pq .. "\n", "and may not write all of it")
T.like(s.stdout, "baton%-node %-%-prefix=true readwrite " .. Pq .. "runs/\n", "but its own keys")
for _, k in ipairs { "jobs/", "policies/", "versions/", "policy%-versions/", "calendars/", "config/" } do
  T.unlike(s.stdout, "baton%-node %-%-prefix=true readwrite " .. Pq .. k, "nor " .. k)
end

local rootc = baton.etcd.new { endpoints = srv.url, user = "root", password = "root-secret" }
local anon = baton.etcd.new { endpoints = srv.url }
T.is(select(3, anon:get(P)), "EAUTH", "auth is on: no credentials, no access")

-- Runs baton as user:password; returns stdout, stderr, status.
local function as(who, pw, ...)
  local args = { bin, "--endpoints", srv.url, "--prefix", P, "--user", who, "--password", pw, timeout = 30, ... }
  local r = assert(baton.exec(args))
  return r.stdout, r.stderr, r.code
end

-- two nodes under the node role (user n1), n1 with the HTTP API
local free_port = N.free_port
local port = free_port()
F.write(dir .. "/token", "tok-" .. P:gsub("%W", "") .. "\n")
local nodes = {}
for _, name in ipairs { "n1", "n2" } do
  nodes[name] = assert(baton.spawn { "sh", "-c",
    ("exec %q --endpoints %q --prefix %q --user n1 --password node-secret node --name %s --ttl 3 %s >>%s/%s.log 2>&1")
      :format(bin, srv.url, P, name, name == "n1" and ("--http 127.0.0.1:%d --http-token-file %s/token")
        :format(port, dir) or "", dir, name), stdio = "null" })
end
T.ok(N.wait(15, function()
  local r = rootc:get(P .. "nodes/", { prefix = true, count_only = true })
  return r and r.count == 2
end), "the nodes run under the node role")

-- a deploy under the deployer role
F.write(dir .. "/hello.lua", 'return { schedule = "@manual", run = function(ctx) print("hello from roles") end }\n')
local out, err, code = as("deploy", "deploy-secret", "job", "put", dir .. "/hello.lua")
T.is(code, 0, "deployer: job put works " .. err)
T.like(out, "^created job hello at ", "says so")
local v
out, err, code = as("deploy", "deploy-secret", "job", "versions", "hello", "--json")
T.is(code, 0, "deployer: job versions " .. err)
v = select(2, pcall(json.decode, out))
T.is(type(v) == "table" and v[1] and v[1].author, "etcd-user:deploy", "the version's author is the etcd user")
T.ok(N.wait(15, function()
  local r = rootc:get(P .. "status/hello/n1")
  local st = r and r.kvs[1] and json.decode(r.kvs[1].value)
  return st and st.revision
end), "the node loaded it")
out, err, code = as("deploy", "deploy-secret", "job", "run", "hello")
T.is(code, 0, "deployer: job run " .. err)
local rec = N.wait(20, function()
  local r = rootc:get(P .. "runs/hello/", { prefix = true })
  local kv = r and r.kvs[1]
  local x = kv and json.decode(kv.value)
  return x and x.state ~= "running" and x
end)
T.is(rec and rec.state, "succeeded", "the node ran the job under its role")
out = as("deploy", "deploy-secret", "job", "logs", "hello")
T.like(out, "hello from roles", "its output is readable by the deployer")

-- a queue job: the node claims the task, runs it and deletes it
F.write(dir .. "/qjob.lua", 'return { queue = "jobs-q", run = function(ctx) print("task " .. ctx.task.value) end }\n')
_, err, code = as("deploy", "deploy-secret", "job", "put", dir .. "/qjob.lua")
T.is(code, 0, "deployer: a queue job " .. err)
T.ok(N.wait(15, function()
  local n = 0
  for _, kv in ipairs(rootc:get(P .. "status/qjob/", { prefix = true }).kvs) do
    if json.decode(kv.value).revision then n = n + 1 end
  end
  return n == 2
end), "both nodes loaded it")
_, err, code = as("deploy", "deploy-secret", "queue", "push", "jobs-q", "t1")
T.is(code, 0, "deployer: queue push " .. err)
rec = N.wait(20, function()
  local r = rootc:get(P .. "runs/qjob/", { prefix = true })
  local x = r.kvs[1] and json.decode(r.kvs[1].value)
  return x and x.state ~= "running" and x
end)
T.is(rec and rec.state, "succeeded", "a node ran the queue task under its role")
T.ok(N.wait(10, function() return rootc:get(P .. "queue/jobs-q/", { prefix = true, count_only = true }).count == 0 end),
  "and deleted it")

-- what the nodes keep under the node role: the election, the claims
-- board, the clock exchange with the leader, statuses
local function keys(sub)
  local r = rootc:get(P .. sub, { prefix = true, keys_only = true })
  local list = {}
  for _, kv in ipairs(r.kvs) do list[#list + 1] = kv.key:sub(#P + 1) end
  return table.concat(list, " ")
end
T.ok(N.wait(10, function() return keys("election/") ~= "" end), "a leader is elected: " .. keys("election/"))
F.write(dir .. "/tick.lua", 'return { schedule = "@every 1s", run = function(ctx) end }\n')
_, err, code = as("deploy", "deploy-secret", "job", "put", dir .. "/tick.lua")
T.is(code, 0, "deployer: a scheduled job " .. err)
T.ok(N.wait(15, function() return keys("claims/"):find("claims/n%d") end),
  "a node posted its claims of its instants: " .. keys("claims/"))
T.ok(N.wait(10, function()
  for _, kv in ipairs(rootc:get(P .. "runs/tick/", { prefix = true }).kvs) do
    if json.decode(kv.value).state == "succeeded" then return true end
  end
end), "and ran them")
_, err, code = as("deploy", "deploy-secret", "job", "rm", "tick")
T.is(code, 0, "deployer: job rm " .. err)
T.ok(N.wait(15, function() return keys("clock/pong/"):find("clock/pong/n%d") end),
  "the leader answers the other's clock pings: " .. keys("clock/"))
T.like(keys("status/hello/"), "status/hello/n1 status/hello/n2", "both nodes keep their statuses")

-- the node's user may not write code
local nodec = baton.etcd.new { endpoints = srv.url, user = "n1", password = "node-secret" }
for _, k in ipairs { "jobs/x", "policies/x", "versions/hello/1", "policy-versions/x/1", "calendars/x" } do
  local ok, perr, pcode = nodec:put(P .. k, "return {}")
  T.is(ok, nil, "node user: put " .. k .. " fails")
  T.is(pcode, "EACCES", "EACCES: " .. tostring(perr))
end
T.is(select(3, nodec:delete(P .. "jobs/hello")), "EACCES", "node user: nor delete a job")
T.ok(rootc:get(P .. "jobs/hello").kvs[1], "jobs/hello is still there")
T.is(rootc:get(P .. "jobs/x").kvs[1], nil, "jobs/x was not written")

-- nor can the node's HTTP API: a 403 that says why
local function api(method, path, body)
  F.write(dir .. "/body", body or "")
  local r = assert(baton.exec { "curl", "-sS", "-X", method, "-o", dir .. "/resp", "-w", "%{http_code}",
    "--max-time", "20", "-H", "Authorization: Bearer " .. F.read(dir .. "/token"):gsub("%s+$", ""),
    "--data-binary", "@" .. dir .. "/body", "http://127.0.0.1:" .. port .. path, timeout = 30 })
  local ok, v = pcall(json.decode, F.read(dir .. "/resp") or "")
  return tonumber(r.stdout), ok and v or {}
end
local st, b = api("PUT", "/api/v1/jobs/viaapi", 'return { schedule = "@manual", run = function() end }\n')
T.is(st, 403, "API: PUT a job under the node role: 403")
T.is(b.code, "EACCES", "code EACCES")
T.like(b.error or "", "^EACCES: this node's etcd user may not write jobs %(.*permission denied%): put and remove them "
  .. "with the baton CLI under a deployer's etcd user", "the error says so: " .. tostring(b.error))
st, b = api("DELETE", "/api/v1/jobs/hello")
T.is(st, 403, "API: DELETE a job: 403 " .. tostring(b.error))
T.ok(rootc:get(P .. "jobs/hello").kvs[1], "and the job is still there")
st, b = api("PUT", "/api/v1/policies/viaapi", "return { claim_delay = function() return 0 end }\n")
T.is(st, 403, "API: PUT a policy: 403")
T.like(b.error or "", "may not write policies", "saying so")
st, b = api("POST", "/api/v1/jobs/hello/run")
T.is(st, 202, "API: a run by hand still works under the node role " .. tostring(b.error))
T.ok(N.wait(20, function()
  local n = 0
  for _, kv in ipairs(rootc:get(P .. "runs/hello/", { prefix = true }).kvs) do
    if json.decode(kv.value).state == "succeeded" then n = n + 1 end
  end
  return n == 2
end), "the run asked through the API ran")
st, b = api("POST", "/api/v1/jobs/hello/pause")
T.is(st, 200, "API: pause too " .. tostring(b.error))
st, b = api("POST", "/api/v1/jobs/hello/resume")
T.is(st, 200, "API: and resume " .. tostring(b.error))
_, err, code = as("deploy", "deploy-secret", "job", "pause", "hello")
T.is(code, 0, "deployer: pause " .. err)
_, err, code = as("deploy", "deploy-secret", "job", "resume", "hello")
T.is(code, 0, "deployer: resume " .. err)

-- the deployer cannot write or delete the nodes' keys
local dep = baton.etcd.new { endpoints = srv.url, user = "deploy", password = "deploy-secret" }
local r, derr, dcode = dep:delete(P .. "nodes/n1")
T.is(r, nil, "deployer: deleting nodes/n1 fails")
T.is(dcode, "EACCES", "EACCES")
T.like(derr, "permission denied", "permission denied")
T.ok(rootc:get(P .. "nodes/n1").kvs[1], "nodes/n1 is still there")
T.is(select(3, dep:put(P .. "nodes/fake", "{}")), "EACCES", "deployer: putting a node key fails")
T.is(select(3, dep:put(P .. "election/x", "n1")), "EACCES", "deployer: nor an election key")
T.is(select(3, dep:put("/elsewhere", "x")), "EACCES", "deployer: nor outside the prefix")

-- a viewer lists, and cannot put
out, err, code = as("view", "view-secret", "job", "ls")
T.is(code, 0, "viewer: job ls works " .. err)
T.like(out, "\nhello%s", "and lists the job")
_, err, code = as("view", "view-secret", "job", "show", "hello")
T.is(code, 0, "viewer: job show works " .. err)
out, err, code = as("view", "view-secret", "job", "put", dir .. "/hello.lua")
T.is(code, 1, "viewer: job put fails, exit 1")
T.like(err, "^baton: job put hello: EACCES: etcd http://127%.0%.0%.1:%d+: etcdserver: permission denied\n$",
  "one clear line: permission denied")
_, err, code = as("view", "view-secret", "job", "rm", "hello")
T.is(code, 1, "viewer: job rm fails")
T.like(err, "permission denied", "permission denied")
T.is(select(3, baton.etcd.new { endpoints = srv.url, user = "view", password = "view-secret" }
  :put(P .. "versions/hello/1", "x")), "EACCES", "viewer: cannot forge a version entry")

-- a user that may write jobs/ but not versions/: the put happens, and
-- says that its version was not recorded
local function ctl(...)
  local r = assert(baton.exec { "etcdctl", "--endpoints", srv.url, "--user", "root:root-secret", timeout = 30, ... })
  assert(r.code == 0, r.stderr)
end
ctl("role", "add", "narrow")
ctl("role", "grant-permission", "narrow", "--prefix=true", "read", P)
ctl("role", "grant-permission", "narrow", "--prefix=true", "readwrite", P .. "jobs/")
ctl("user", "add", "narrow:narrow-secret")
ctl("user", "grant-role", "narrow", "narrow")
out, err, code = as("narrow", "narrow-secret", "job", "put", dir .. "/hello.lua", "--name", "narrowjob")
T.is(code, 0, "a user without versions/: the put works")
T.like(err, "warning: the job narrowjob was stored, but its version entry was not recorded: EACCES: [^\n]*"
  .. "permission denied\n", "and warns that no version was recorded")
out = as("deploy", "deploy-secret", "job", "versions", "narrowjob")
T.like(out, "\n%d+ %*%s+%-%s+unknown%s", "which then shows as unknown")

-- the deployer's other writes: a policy, a queue task, rm --purge
F.write(dir .. "/pol.lua", 'return { claim_delay = function() return 0 end }\n')
_, err, code = as("deploy", "deploy-secret", "policy", "put", dir .. "/pol.lua")
T.is(code, 0, "deployer: policy put " .. err)
_, err, code = as("deploy", "deploy-secret", "policy", "rm", "pol")
T.is(code, 0, "deployer: policy rm " .. err)
_, err, code = as("deploy", "deploy-secret", "queue", "push", "q1", "task")
T.is(code, 0, "deployer: queue push " .. err)
out, err, code = as("deploy", "deploy-secret", "job", "rm", "hello", "--purge")
T.is(code, 0, "deployer: job rm --purge " .. err)
T.is(rootc:get(P .. "runs/hello/", { prefix = true, count_only = true }).count, 0, "its records are gone")

-- the script again, as root: idempotent, and no password on etcdctl's
-- command line (the recording etcdctl saw every one of its calls)
-- (root's password on the script's command line: warned about, and not
-- passed on to etcdctl's)
F.write(dir .. "/argv", "")
s = script({}, "--user", "root:root-secret", "--deployer", "deploy:@" .. dir .. "/deploy-pw")
T.is(s.code, 0, "a second run (roles and users exist): exit 0 " .. s.stderr)
T.like(s.stdout, "user deploy exists; keeping its password", "says what exists")
local argv = F.read(dir .. "/argv") or ""
T.like(argv, "%-%-user=root ", "etcdctl ran as root")
T.unlike(argv, "secret", "with no password on its command line")
T.is(s.stderr, "etcd-roles.sh: warning: the password of root is on the command line, where ps shows it: "
  .. "give root:@FILE\n", "the script warns of its own")
-- root's password from a file
F.write(dir .. "/argv", "")
s = script({}, "--user", "root:@" .. dir .. "/root-pw", "--viewer", "view:@" .. dir .. "/view-pw")
T.is(s.code, 0, "--user root:@FILE: exit 0 " .. s.stderr)
T.unlike(F.read(dir .. "/argv") or "", "secret", "no password on etcdctl's command line")
T.is(s.stderr, "", "no warning: every password came from a file")
-- with ETCDCTL_PASSWORD instead
F.write(dir .. "/argv", "")
s = script({ ETCDCTL_PASSWORD = "root-secret" }, "--user", "root", "--viewer", "view:@" .. dir .. "/view-pw")
T.is(s.code, 0, "--user root with ETCDCTL_PASSWORD: exit 0 " .. s.stderr)
T.unlike(F.read(dir .. "/argv") or "", "secret", "no password on etcdctl's command line")
-- no password and no terminal to ask on: one line, exit 2
s = script({ stdin = "" }, "--user", "root")
T.is(s.code, 2, "--user root, no password, no terminal: exit 2")
T.is(s.stderr, "etcd-roles.sh: root: no password given, and stdin is not a terminal to ask on: give root:@FILE\n",
  "one line")
s = script({}, "--user", "root:@" .. dir .. "/nope")
T.is(s.code, 2, "a password file that is not there: exit 2")
T.is(s.stderr, "etcd-roles.sh: root: cannot read the password file " .. dir .. "/nope\n", "one line")
s = script({}, "--user", "root:@" .. dir .. "/view-pw")
T.is(s.code, 1, "a wrong password: exit 1")
T.like(s.stderr, "^etcd%-roles%.sh: [^\n]*authentication failed[^\n]*\n$", "one line: " .. s.stderr)

-- an etcd that does not answer: one line, within the time limit
local t0 = baton.monotime()
s = assert(baton.exec { root .. "/tools/etcd-roles.sh", "--endpoints", "http://127.0.0.1:1", "--prefix", P,
  "--timeout", "2", timeout = 30 })
T.is(s.code, 1, "etcd not there: exit 1")
T.is(s.stderr, "etcd-roles.sh: no answer from etcd at http://127.0.0.1:1 within 2 s (is it running? --endpoints, "
  .. "--timeout)\n", "one line")
T.ok(baton.monotime() - t0 < 10, ("within the limit (%.1f s)"):format(baton.monotime() - t0))
-- one that stops answering after the first call (etcdctl's role and user
-- commands take no --command-timeout: the script's own limit ends them)
F.write(dir .. "/hang", "")
t0 = baton.monotime()
s = script({}, "--user", "root:@" .. dir .. "/root-pw", "--timeout", "2")
os.remove(dir .. "/hang")
T.is(s.code, 1, "etcd hangs midway: exit 1")
T.like(s.stderr, "^etcd%-roles%.sh: etcdctl role get baton%-node: no answer from etcd at [^\n]* within 2 s [^\n]*\n$",
  "one line naming the call: " .. s.stderr)
T.ok(baton.monotime() - t0 < 15, ("within the limit (%.1f s)"):format(baton.monotime() - t0))

-- a node role of the old script (readwrite on all of P, and on jobs/) is
-- narrowed by a run of this one
local function ctl2(...)
  local r = assert(baton.exec { "etcdctl", "--endpoints", srv.url, "--user", "root", "--password", "root-secret",
                                timeout = 30, ... })
  assert(r.code == 0, r.stderr)
  return r.stdout
end
ctl2("role", "grant-permission", "baton-node", "--prefix=true", "readwrite", P)
ctl2("role", "grant-permission", "baton-node", "--prefix=true", "readwrite", P .. "jobs/")
T.ok(nodec:put(P .. "jobs/old", "x"), "(an old node role writes jobs/)")
rootc:delete(P .. "jobs/old")
s = script({}, "--user", "root:@" .. dir .. "/root-pw")
T.is(s.code, 0, "the script narrows an old node role " .. s.stderr)
T.like(s.stdout, "role revoke%-permission baton%-node %-%-prefix=true " .. Pq .. "jobs/\n", "revoking its jobs/")
T.is(select(3, nodec:put(P .. "jobs/old", "x")), "EACCES", "then the node user may not write jobs/")
T.is(select(3, nodec:put(P .. "policies/old", "x")), "EACCES", "nor policies/")
T.ok(nodec:put(P .. "runs/old/x", "x"), "and still its own keys")

-- no node logged a refused write
for _, name in ipairs { "n1", "n2" } do
  local log = F.read(dir .. "/" .. name .. ".log") or ""
  T.ok(#log > 0 and not log:find("permission denied", 1, true), name .. ": no permission denied in its log")
end

for _, p in pairs(nodes) do
  p:kill("SIGTERM")
  if not p:wait(20) then p:kill("SIGKILL"); p:wait() end
end
baton.exec { "rm", "-rf", dir }
rootc:close()
srv:destroy()
T.done()
