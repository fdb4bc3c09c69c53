-- baton policy put|ls|show|rm and baton check on policy files, as processes
-- against the harness's etcd (docs/policies.md; the keys:
-- docs/architecture.md, "Key layout"). Node statuses (P
-- policy-status/<name>/<node>), which nodes write, are written here directly
-- in the documented format.
local T = require "tap"
local _ -- results a check ignores
local bin = os.getenv("BATON_BIN") or "bin/baton"
local root = os.getenv("BATON_ROOT") or "."
local e = baton.etcd
local P = "/test/policycli/" .. tostring(baton.now()) .. "/"
local tmp = (os.getenv("BATON_TEST_TMP") or "/tmp") .. "/policycli-" .. tostring(baton.now())
assert(baton.exec { "mkdir", "-p", tmp })

local function run(...)
  local cmd = { bin, "--prefix", P, timeout = 60 }
  for _, a in ipairs { ... } do cmd[#cmd + 1] = a end
  local r = assert(baton.exec(cmd))
  return r.stdout, r.stderr, r.code
end

local function write(name, text)
  local path = tmp .. "/" .. name
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

local good = write("near.lua", [[
return {
  description = "eu first",
  claim_delay = function(job, fire, nodes, me)
    return (me.labels or {}).region == "eu" and 0 or 5
  end,
  selftest = function()
    return { "eu 0s", "others 5s" }
  end,
}]])
local failing = write("failing.lua", [[
return {
  claim_delay = function() return 1 end,
  selftest = function() assert(false, "want 0") end,
}]])
local typo = write("typo.lua", "return { claim_dealy = function() return 0 end }")
local wrong = write("wrong.lua", "return { on_orphan = function() return 'retry' end }")

-- 1. baton check on policies
do
  local out, err, code = run("check", good)
  T.is(code, 0, "check: a valid policy exits 0")
  T.is(err, "", "check: nothing on stderr")
  T.like(out, "^ok: policy near %(claim_delay%): eu first\nselftest: passed %(2 decisions%)\n  eu 0s\n  others 5s\n",
    "check: summary and selftest lines")
  T.like(out, "\nsample cluster: n1 %(zone=a,region=eu; 0 running%)", "check: the sample cluster")
  T.like(out, "\n  2026%-01%-01T00:00:00Z  n1 0s, n2 0s, n3 5s\n", "check: claim delays per node")
  T.like(out, "\nassign_shards %(default's%): 1:n%d 2:n%d 3:n%d 4:n%d 5:n%d 6:n%d %(n1 2, n2 2, n3 2%)\n",
    "check: the shard assignment")
  T.like(out, "\nretry_delay %(default's%) after attempt: 1 %-> [%d.]+s, 2 %-> [%d.]+s, 3 %-> [%d.]+s, 4 %-> give up\n",
    "check: retry delays for attempts 1..4")
  T.like(out, "\non_orphan %(default's%): rerun\n$", "check: on_orphan")

  out, err, code = run("check", failing)
  T.is(code, 1, "check: a failing selftest exits 1")
  T.like(err, "^baton: check .-failing%.lua: EINVAL: policy failing: selftest raised an error: .-failing%.lua:3: "
    .. "want 0\n$", "check: says which assertion")
  out, err, code = run("check", typo)
  T.is(code, 1, "check: a misspelt field exits 1")
  T.like(err, "unknown field 'claim_dealy' %(did you mean 'claim_delay'%?%)", "check: did you mean")
  out, err, code = run("check", wrong)
  T.is(code, 1, "check: a wrong decision on the sample cluster exits 1")
  T.like(out, "\non_orphan: FAILED: on_orphan returned \"retry\"; expected \"rerun\" or \"abandon\"\n",
    "check: the failed decision is shown")
  T.like(err, "a decision failed on the sample cluster", "check: and the error says so")
  out, err, code = run("check", root .. "/lua/baton/policies/examples/near_db.lua")
  T.is(code, 0, "check: the documented example passes")
  out, err, code = run("check", root .. "/lua/baton/policies/round_robin.lua")
  T.is(code, 0, "check: a built-in's file passes")
  T.like(out, "selftest: passed", "check: with its selftest")
end

-- 2. put
do
  local out, err, code = run("policy", "put", good)
  T.is(code, 0, "put: exit 0")
  T.like(out, "^created policy near at " .. P:gsub("%p", "%%%0") .. "policies/near %(revision %d+%); "
    .. "selftest passed %(2 decisions%)\n$", "put: says where")
  local r = assert(e:get(P .. "policies/near"))
  T.is(r.kvs[1] and r.kvs[1].value, assert(io.open(good)):read("*a"), "put: the source is stored")
  out, err, code = run("policy", "put", good)
  T.like(out, "^updated policy near", "put again: updated")
  out, err, code = run("policy", "put", good, "--name", "hash")
  T.is(code, 0, "put --name hash: exit 0")
  T.like(out, "^created policy hash at .-, overriding the built%-in hash;", "put: overriding a built-in is said")

  out, err, code = run("policy", "put", failing)
  T.is(code, 1, "put: a failing selftest exits 1")
  T.like(err, "selftest raised an error: .-want 0; nothing stored\n$", "put: says why")
  T.is(assert(e:get(P .. "policies/failing")).count, 0, "put: nothing stored")
  out, err, code = run("policy", "put", typo)
  T.is(code, 1, "put: an invalid policy exits 1")
  T.like(err, "did you mean 'claim_delay'", "put: the error")
  out, err, code = run("policy", "put", write("bc.lua", string.dump(function() return {} end)))
  T.is(code, 1, "put: bytecode is refused")
  T.like(err, "precompiled bytecode is refused", "put: says so")
  _, err, code = run("policy", "put")
  T.is(code, 2, "put without FILE: usage error")
  T.like(err, "^baton: policy put: needs a FILE\nusage: baton policy put FILE%.lua %[%-%-name NAME%] %[%-%-sign KEY%] %[%-%-author WHO%] %[%-%-keep%-versions N%] %[%-%-json%]\n$", "put: usage")
  _, err, code = run("policy", "put", good, "--name", "a b")
  T.is(code, 2, "put: an invalid name is a usage error")
end

-- 3. ls, with a node's status error
do
  assert(e:put(P .. "policy-status/near/node-a", baton.json.encode { revision = 1, error = "boom at load" }))
  local rev = assert(e:get(P .. "policies/near")).kvs[1].mod_revision
  assert(e:put(P .. "policy-status/near/node-a", baton.json.encode { revision = rev, error = "boom at load" }))
  assert(e:put(P .. "policy-status/near/node-b", baton.json.encode { revision = rev }))
  local out, err, code = run("policy", "ls")
  T.is(code, 0, "ls: exit 0")
  local lines = {}
  for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
  T.like(lines[1], "^NAME%s+SOURCE%s+FUNCTIONS%s+STATUS$", "ls: header")
  local by = {}
  for i = 2, #lines do by[lines[i]:match("^(%S+)")] = lines[i] end
  T.like(by.near or "", "^near%s+etcd rev %d+%s+claim_delay; assign_shards, retry_delay, on_orphan from default%s+"
    .. "error: node%-a: boom at load$", "ls: a stored policy with a node's error")
  T.like(by.hash or "", "^hash%s+etcd rev %d+ %(overrides built%-in%)", "ls: an override is marked")
  T.like(by.race or "", "^race%s+built%-in%s+claim_delay; .-%s+ok$", "ls: built-ins are listed")
  T.like(by.default or "", "^default%s+built%-in%s+claim_delay, assign_shards, retry_delay, on_orphan%s+ok$",
    "ls: the default defines everything")
  T.is(#lines - 1, 11, "ls: 10 built-ins + near")
  out, _, code = run("policy", "ls", "--json")
  local list = baton.json.decode(out)
  T.ok(code == 0 and type(list) == "table" and #list == 11, "ls --json: a list")
end

-- 4. show
do
  local out, err, code = run("policy", "show", "near")
  T.is(code, 0, "show: exit 0")
  T.like(out, "^policy:%s+near\nkey:%s+" .. P:gsub("%p", "%%%0") .. "policies/near %(revision %d+, version 2%)\n",
    "show: key and revision")
  T.like(out, "\ndescription:%s+eu first\n", "show: description")
  T.like(out, "\nfunctions:%s+claim_delay; assign_shards, retry_delay, on_orphan from default\n", "show: functions")
  T.like(out, "\nselftest:%s+passed %(2 decisions%)\n", "show: selftest")
  T.like(out, "\nnodes:\n  NODE%s+REVISION%s+STATUS\n  node%-a%s+%d+%s+boom at load\n  node%-b%s+%d+%s+ok\n",
    "show: per-node status")
  out, err, code = run("policy", "show", "pinned")
  T.is(code, 0, "show: a built-in")
  T.like(out, "\nsource:%s+built%-in lua/baton/policies/pinned%.lua", "show: says built-in")
  T.like(out, "\nselftest decisions:\n  pin n1 live", "show: the selftest's decisions")
  out, err, code = run("policy", "show", "hash")
  T.like(out, "\noverrides:%s+the built%-in lua/baton/policies/hash%.lua\n", "show: an override")
  out, err, code = run("policy", "show", "nope")
  T.is(code, 1, "show: unknown policy exits 1")
  T.like(err, "^baton: policy show nope: ENOENT: no policy nope at .- and no built%-in of that name\n$", "show: why")
  out, _, code = run("policy", "show", "near", "--json")
  local d = baton.json.decode(out)
  T.ok(code == 0 and type(d) == "table" and d.name == "near" and d.source and #d.status == 2, "show --json")
end

-- 5. rm
do
  local out, err, code = run("policy", "rm", "near")
  T.is(code, 0, "rm: exit 0")
  T.is(out, "removed policy near; jobs naming it now use the default policy\n", "rm: says what now")
  T.is(assert(e:get(P .. "policy-status/near/", { prefix = true })).count, 0, "rm: statuses removed")
  out, err, code = run("policy", "rm", "hash")
  T.is(out, "removed policy hash; jobs naming it now use the built-in hash\n", "rm: an override, the built-in is back")
  out, err, code = run("policy", "rm", "near")
  T.is(code, 1, "rm again: exit 1")
  T.like(err, "^baton: policy rm near: ENOENT: no policy near at ", "rm again: ENOENT")
  _, err, code = run("policy", "rm", "race")
  T.like(err, "built%-in policies cannot be removed", "rm: a built-in cannot be removed")
  _, err, code = run("policy", "frob")
  T.is(code, 2, "an unknown subcommand: usage error")
  T.like(err, "^baton: policy: unknown subcommand \"frob\"\n", "says so")
end

assert(e:delete(P, { prefix = true }))
assert(baton.exec { "rm", "-rf", tmp })
T.done()
