-- The version log (lua/baton/versions.lua): every job and policy put, rm
-- and rollback through baton records author, time, SHA-256 and source;
-- `versions` lists them newest first, `diff` compares two, `rollback` puts
-- one back through the normal put path and a node runs it; a raw etcdctl
-- put shows as author unknown; the log keeps the last N; the HTTP API
-- lists it read-only.
local T = require "tap"
local N = require "nodes"
local F = require "files"

local json = baton.json
local c = N.new("versions")

local function cli(...)
  local r = c:cli(...)
  return r.stdout, r.stderr, r.code
end
local function file(name, text)
  local p = c.dir .. "/" .. name
  F.write(p, text)
  return p
end
local function sha256sum(path)
  return assert(baton.exec { "sha256sum", path }).stdout:match("^(%x+)")
end
local function versions(kind, name)
  local out, err, code = cli(kind, "versions", name, "--json")
  T.is(code, 0, kind .. " versions " .. name .. " --json: exit 0 " .. err)
  local ok, v = pcall(json.decode, out)
  return ok and v or {}
end

-- baton._sha256 (libsodium): the empty string, and bytes with a NUL
T.is(baton._sha256(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "sha256 of \"\"")
F.write(c.dir .. "/nul.bin", "a\0b\n")
T.is(baton._sha256("a\0b\n"), sha256sum(c.dir .. "/nul.bin"), "sha256 of bytes with a NUL, as sha256sum")
T.error_like(function() baton._sha256({}) end, "string expected", "a table: raises")

local port
do
  local s = assert(baton.httpd.listen { addr = "127.0.0.1:0", handler = function(req) req:respond(200, {}, "") end })
  port = s.port
  s:close()
end
c:start("v1", 3, ("--http 127.0.0.1:%d"):format(port))

local SRC1 = 'return { schedule = "@manual", run = function(ctx) print("I am version one") end }\n'
local SRC2 = 'return { schedule = "@manual", run = function(ctx) print("I am version two") end }\n'
local f1, f2 = file("one.lua", SRC1), file("two.lua", SRC2)

-- 1. Two puts by two authors.
local _, err, code = cli("job", "put", f1, "--name", "vjob", "--author", "alice@example")
T.is(code, 0, "put by alice " .. err)
_, err, code = cli("job", "put", f2, "--name", "vjob", "--author", "bob@example")
T.is(code, 0, "put by bob " .. err)
local v = versions("job", "vjob")
T.is(#v, 2, "two versions")
local new, old = v[1] or {}, v[2] or {}
T.ok((new.revision or 0) > (old.revision or 0), "newest first")
T.is(new.author, "bob@example", "newest by bob")
T.is(old.author, "alice@example", "then alice")
T.is(new.sha256, sha256sum(f2), "bob's SHA-256 is sha256sum's")
T.is(old.sha256, sha256sum(f1), "alice's too")
T.is(new.op, "put", "op put")
T.ok(type(new.time) == "number" and math.abs(new.time - baton.now()) < 60, "with the time")
T.is(new.current, true, "the newest is current")
local table_out = cli("job", "versions", "vjob")
T.like(table_out, "^REVISION%s+TIME%s+AUTHOR%s+OP%s+SHA256%s+CHECKED\n", "the table's header")
T.like(table_out, "\n" .. new.revision .. " %*%s+%d%d%d%d%-%d%d%-%d%dT[%d:]+Z%s+bob@example%s+put%s+"
  .. new.sha256:sub(1, 12) .. "%s+ok\n", "bob's row: revision (current), time, author, op, SHA-256 prefix, "
  .. "checked against etcd's history")
T.is(new.checked, "ok", "--json: checked ok")

-- default author: $USER@host
local _, _, dcode = cli("job", "put", f2, "--name", "vdefault")
T.is(dcode, 0, "put without --author")
local dv = versions("job", "vdefault")
T.like(dv[1] and dv[1].author or "", "^[^@]+@.+$", "default author is USER@host")

-- 2. diff
local d, derr, dc = cli("job", "diff", "vjob", tostring(old.revision), tostring(new.revision))
T.is(dc, 0, "diff: exit 0 " .. derr)
T.like(d, "^%-%-%- vjob@" .. old.revision .. "\n%+%+%+ vjob@" .. new.revision .. "\n", "unified diff headers")
T.like(d, "\n%-return { schedule = \"@manual\", run = function%(ctx%) print%(\"I am version one\"%) end }\n",
  "the old line removed")
T.like(d, "\n%+return { schedule = \"@manual\", run = function%(ctx%) print%(\"I am version two\"%) end }\n",
  "the new line added")
local same = cli("job", "diff", "vjob", tostring(new.revision), tostring(new.revision))
T.is(same, "", "a revision against itself: no diff")
local _, nerr, ncode = cli("job", "diff", "vjob", "1", tostring(new.revision))
T.is(ncode, 1, "diff of a revision that is no version: exit 1")
T.like(nerr, "^baton: job diff vjob: ENOENT: no version of job vjob at revision 1 ", "says so")
local _, uerr, ucode = cli("job", "diff", "vjob", "x", "2")
T.is(ucode, 2, "a revision that is not a number: usage error")
T.like(uerr, "a revision is a whole number >= 1, not \"x\"", "says so")

-- 3. rollback: the old source back, recorded, and a node runs it.
local rout, rerr, rcode = cli("job", "rollback", "vjob", tostring(old.revision), "--author", "carol@example")
T.is(rcode, 0, "rollback: exit 0 " .. rerr)
T.like(rout, "^%-%-%- vjob@current\n%+%+%+ vjob@" .. old.revision .. "\n", "prints the diff first")
T.like(rout, "\n%+return { schedule = \"@manual\", run = function%(ctx%) print%(\"I am version one\"%) end }\n",
  "the diff adds the old source's line")
T.like(rout, "\nrolled job vjob back to revision " .. old.revision .. ": [^\n]*\n$", "says so")
local kv = assert(c.e:get(c.P .. "jobs/vjob")).kvs[1]
T.is(kv and kv.value, SRC1, "the old source is stored again")
v = versions("job", "vjob")
T.is(#v, 3, "three versions")
T.is(v[1] and v[1].op, "rollback of " .. old.revision, "recorded as a rollback")
T.is(v[1] and v[1].author, "carol@example", "by carol")
T.is(v[1] and v[1].sha256, sha256sum(f1), "with the old source's SHA-256")
T.ok(c:loaded("vjob", kv.mod_revision), "the node loaded the rolled-back revision")
_, err, code = cli("job", "run", "vjob")
T.is(code, 0, "job run " .. err)
local rec = N.wait(20, function()
  local r = c:records("vjob")[1]
  return r and r.state ~= "running" and r
end)
T.is(rec and rec.state, "succeeded", "the run succeeded")
local logs = cli("job", "logs", "vjob")
T.like(logs, "I am version one", "and ran the rolled-back source")
local bad = file("bad.lua", "return { schedule = 'not a schedule', run = function() end }\n")
local _, _, bcode = cli("job", "put", bad, "--name", "vbroken", "--author", "x")
T.is(bcode, 1, "(a broken source is refused by put, so never logged)")

-- 4. A raw etcdctl put: author unknown, its SHA-256, and it stays in the
-- log when baton writes over it.
local RAW = 'return { schedule = "@manual", run = function(ctx) print("raw") end }'
assert(c.e:put(c.P .. "jobs/vjob", RAW))
local rawf = file("raw.lua", RAW)
v = versions("job", "vjob")
T.is(v[1] and v[1].author, "unknown", "a raw put: author unknown")
T.is(v[1] and v[1].sha256, sha256sum(rawf), "with its SHA-256")
T.is(v[1] and v[1].current, true, "and current")
local raw_rev = v[1] and v[1].revision
T.like(cli("job", "versions", "vjob"), "\n" .. tostring(raw_rev) .. " %*%s+%-%s+unknown%s", "shown as unknown")
_, err, code = cli("job", "put", f2, "--name", "vjob", "--author", "dave")
T.is(code, 0, "put over it " .. err)
v = versions("job", "vjob")
T.is(v[2] and v[2].revision, raw_rev, "the raw put keeps its entry")
T.is(v[2] and v[2].author, "unknown", "as unknown")
d = cli("job", "diff", "vjob", tostring(raw_rev), tostring(v[1].revision))
T.like(d, "\n%-" .. RAW:gsub("%p", "%%%0") .. "\n", "and its source can be diffed")

-- 5. Pruning keeps the last N.
for i = 1, 4 do
  local p = file("p" .. i .. ".lua", ('return { schedule = "@manual", run = function() print(%d) end }\n'):format(i))
  _, err, code = cli("job", "put", p, "--name", "vjob", "--author", "p" .. i, "--keep-versions", "3")
  T.is(code, 0, "put " .. i .. " with --keep-versions 3 " .. err)
end
v = versions("job", "vjob")
T.is(#v, 3, "3 versions kept")
T.is(v[1] and v[1].author, "p4", "the newest")
T.is(v[3] and v[3].author, "p2", "down to the third newest")
T.is(assert(c.e:get(c.P .. "versions/vjob/", { prefix = true, count_only = true })).count, 3,
  "3 entries under P versions/vjob/")

-- 6. rm is recorded; a removed job can be rolled back.
local before = v[1].revision
_, err, code = cli("job", "rm", "vjob", "--author", "erin")
T.is(code, 0, "rm " .. err)
v = versions("job", "vjob")
T.is(v[1] and v[1].op, "rm", "the rm is recorded")
T.is(v[1] and v[1].author, "erin", "by erin")
T.is(v[1] and v[1].sha256, nil, "with no SHA-256")
local _, rmerr, rmcode = cli("job", "diff", "vjob", tostring(v[1].revision), tostring(before))
T.is(rmcode, 1, "diff against the removal: exit 1")
T.like(rmerr, "is its removal, which has no source", "says so")
_, err, code = cli("job", "rollback", "vjob", tostring(before))
T.is(code, 0, "rollback of a removed job " .. err)
T.ok(assert(c.e:get(c.P .. "jobs/vjob")).kvs[1], "brings it back")
-- a raw put then an rm: the raw source stays in the log
assert(c.e:put(c.P .. "jobs/vraw", RAW))
_, err, code = cli("job", "rm", "vraw", "--author", "frank")
T.is(code, 0, "rm of a raw put " .. err)
v = versions("job", "vraw")
T.is(#v, 2, "two entries: the raw put and the rm")
T.is(v[2] and v[2].author, "unknown", "the raw put, author unknown")
_, err, code = cli("job", "rollback", "vraw", tostring(v[2] and v[2].revision))
T.is(code, 0, "and can be rolled back to " .. err)
T.is(assert(c.e:get(c.P .. "jobs/vraw")).kvs[1].value, RAW, "its source")
-- --keep-versions 1 over a raw put: only the new entry
assert(c.e:put(c.P .. "jobs/vraw", RAW .. " "))
_, err, code = cli("job", "put", f1, "--name", "vraw", "--keep-versions", "1")
T.is(code, 0, "put --keep-versions 1 over a raw put " .. err)
T.is(#versions("job", "vraw"), 1, "keeps one entry")
local _, neerr, necode = cli("job", "versions", "nosuch")
T.is(necode, 1, "versions of an unknown job: exit 1")
T.like(neerr, "^baton: job versions nosuch: ENOENT: no job nosuch at ", "says so")

-- 7. The HTTP API, read-only.
local h = assert(baton.exec { "curl", "-sS", "-w", "\n%{http_code}", "--max-time", "20", timeout = 30,
  ("http://127.0.0.1:%d/api/v1/jobs/vjob/versions"):format(port) })
local body, status = h.stdout:match("^(.*)\n(%d+)$")
T.is(status, "200", "GET /api/v1/jobs/vjob/versions: 200")
local ok, hv = pcall(json.decode, body or "")
T.ok(ok and type(hv) == "table" and hv[1] and hv[1].op == "rollback of " .. before, "lists the versions, newest first")
h = assert(baton.exec { "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT", "--max-time", "20",
  timeout = 30, ("http://127.0.0.1:%d/api/v1/jobs/vjob/versions"):format(port) })
T.is(h.stdout, "405", "PUT on it: 405")

-- 8. Policies.
local POL1 = 'return { description = "one", claim_delay = function() return 0 end }\n'
local POL2 = 'return { description = "two", claim_delay = function() return 0.1 end }\n'
local pf1, pf2 = file("pol1.lua", POL1), file("pol2.lua", POL2)
_, err, code = cli("policy", "put", pf1, "--name", "vpol", "--author", "alice")
T.is(code, 0, "policy put by alice " .. err)
_, err, code = cli("policy", "put", pf2, "--name", "vpol", "--author", "bob")
T.is(code, 0, "policy put by bob " .. err)
local pv = versions("policy", "vpol")
T.is(#pv, 2, "policy: two versions")
T.is(pv[1] and pv[1].author, "bob", "newest first")
T.is(pv[1] and pv[1].sha256, sha256sum(pf2), "policy SHA-256")
d = cli("policy", "diff", "vpol", tostring(pv[2].revision), tostring(pv[1].revision))
T.like(d, "\n%-return { description = \"one\"", "policy diff")
_, err, code = cli("policy", "rollback", "vpol", tostring(pv[2].revision))
T.is(code, 0, "policy rollback " .. err)
T.is(assert(c.e:get(c.P .. "policies/vpol")).kvs[1].value, POL1, "the old policy is back")
T.is(versions("policy", "vpol")[1].op, "rollback of " .. pv[2].revision, "recorded")
h = assert(baton.exec { "curl", "-sS", "--max-time", "20", timeout = 30,
  ("http://127.0.0.1:%d/api/v1/policies/vpol/versions"):format(port) })
ok, hv = pcall(json.decode, h.stdout)
T.is(ok and #hv or 0, 3, "GET /api/v1/policies/vpol/versions lists 3")

c:destroy()
T.done()
