-- Least-privilege etcd roles (tools/etcd-roles.sh, docs/security.md): on a
-- private etcd, the script creates the node, deployer and viewer roles and
-- users and enables auth; a node runs a job under the node role, a deploy
-- works under the deployer role (and is recorded as its etcd user), a
-- viewer lists jobs but cannot put one (one clear line), and the deployer
-- cannot touch the nodes' keys.
local T = require "tap"
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
assert(baton.exec { "mkdir", "-p", dir })
F.write(dir .. "/viewer-pw", "view-secret\n")

local s = assert(baton.exec { root .. "/tools/etcd-roles.sh", "--endpoints", srv.url, "--prefix", P,
  "--node", "n1:node-secret", "--deployer", "deploy:deploy-secret", "--viewer", "view:@" .. dir .. "/viewer-pw",
  "--enable-auth", "--root-password", "root-secret", timeout = 60 })
T.is(s.code, 0, "etcd-roles.sh: exit 0 " .. s.stderr)
T.like(s.stdout, "\n%+ etcdctl role grant%-permission baton%-deployer %-%-prefix=true readwrite " .. P:gsub("%p", "%%%0")
  .. "jobs/\n", "prints what it does")
T.like(s.stdout, "\n%+ etcdctl auth enable\n", "and enables auth")
T.unlike(s.stdout .. s.stderr, "secret", "without printing a password")

local rootc = baton.etcd.new { endpoints = srv.url, user = "root", password = "root-secret" }
local anon = baton.etcd.new { endpoints = srv.url }
T.is(select(3, anon:get(P)), "EAUTH", "auth is on: no credentials, no access")

-- Runs baton as user:password; returns stdout, stderr, status.
local function as(who, pw, ...)
  local args = { bin, "--endpoints", srv.url, "--prefix", P, "--user", who, "--password", pw, timeout = 30, ... }
  local r = assert(baton.exec(args))
  return r.stdout, r.stderr, r.code
end

-- a node under the node role
local node = assert(baton.spawn { "sh", "-c",
  ("exec %q --endpoints %q --prefix %q --user n1 --password node-secret node --name n1 --ttl 3 >>%s/n1.log 2>&1")
    :format(bin, srv.url, P, dir), stdio = "null" })
T.ok(N.wait(15, function()
  local r = rootc:get(P .. "nodes/n1")
  return r and r.kvs[1]
end), "the node runs under the node role")

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

-- the script again: idempotent
s = assert(baton.exec { root .. "/tools/etcd-roles.sh", "--endpoints", srv.url, "--prefix", P, "--user",
  "root:root-secret", "--deployer", "deploy:deploy-secret", timeout = 60 })
T.is(s.code, 0, "a second run (roles and users exist): exit 0 " .. s.stderr)
T.like(s.stdout, "user deploy exists; keeping its password", "says what exists")

node:kill("SIGTERM")
if not node:wait(20) then node:kill("SIGKILL"); node:wait() end
baton.exec { "rm", "-rf", dir }
rootc:close()
srv:destroy()
T.done()
