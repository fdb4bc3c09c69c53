-- Signed code (docs/security.md): baton keygen, job/policy put --sign, and
-- a node started with --trust, which loads only what a trusted key signed.
-- An unsigned, tampered, replayed or foreign-signed source is refused like
-- a broken version: the last good one keeps running, the status says
-- "untrusted: ..." in one line. Key rotation: several trusted keys at once,
-- and a key removed from the --trust directory is no longer trusted after
-- a restart. baton nodes says what each node runs.
local T = require "tap"
local N = require "nodes"
local c = N.new("signed")
local e, P, dir = c.e, c.P, c.dir
local TTL = 3

local function sh(cmd)
  return assert(baton.exec { "sh", "-c", cmd })
end

local function write(name, text)
  local f = dir .. "/" .. name
  local fh = assert(io.open(f, "w"))
  fh:write(text)
  fh:close()
  return f
end

local function job_src(tag)
  return ([[
-- %s
return { schedule = "* * * * * *", run = function(ctx) end }
]]):format(tag)
end

-- 1. keygen
local r = c:cli("keygen", dir .. "/k1")
T.is(r.code, 0, "keygen: exit 0")
T.like(r.stdout, "^key %x+: secret key .-/k1, public key .-/k1%.pub\n$", "keygen: names the key and both files")
T.is(sh("stat -c %a " .. dir .. "/k1").stdout, "600\n", "keygen: the secret key is mode 0600")
T.like(sh("cat " .. dir .. "/k1.pub").stdout, "^baton%-ed25519%-public [%w+/]+=*\n$", "keygen: a one-line public key")
T.like(sh("cat " .. dir .. "/k1").stdout, "^baton%-ed25519%-secret [%w+/]+=*\n$", "keygen: a one-line secret key")
local before = sh("cat " .. dir .. "/k1").stdout
r = c:cli("keygen", dir .. "/k1")
T.is(r.code, 1, "keygen over an existing key: exit 1")
T.like(r.stderr, "^baton: keygen: EEXIST: .-/k1 exists; nothing was written[^\n]*\n$", "keygen: refuses, in one line")
T.is(sh("cat " .. dir .. "/k1").stdout, before, "keygen: the existing key is unchanged")
T.is(c:cli("keygen").code, 2, "keygen without FILE: usage, exit 2")
T.is(c:cli("keygen", dir .. "/k2").code, 0, "keygen: a second key")
T.is(c:cli("keygen", dir .. "/k3").code, 0, "keygen: a third key, which no node trusts")
sh(("mkdir %s/trust && cp %s/k1.pub %s/k2.pub %s/trust/"):format(dir, dir, dir, dir))

-- put --sign
local function put(kind, name, source, key)
  local f = write(name .. "." .. kind .. ".lua", source)
  return c:cli(kind, "put", f, "--name", name, key and "--sign" or nil, key and (dir .. "/" .. key) or nil)
end
local function rev_of(kind, name)
  return assert(e:get(P .. (kind == "job" and "jobs/" or "policies/") .. name)).kvs[1].mod_revision
end

r = put("job", "tick", job_src("v1"), "k1.pub")
T.is(r.code, 1, "put --sign with a public key: exit 1")
T.like(r.stderr, "^baton: job put tick: %-%-sign: EINVAL: .-k1%.pub: a public key[^\n]*\n$",
  "put --sign with a public key: says so in one line")
r = put("job", "tick", job_src("v1"), "k1")
T.is(r.code, 0, "job put --sign: exit 0")
T.like(r.stdout, "^created job tick at .- %(revision %d+%), signed by key %x+\n$", "job put --sign: says which key")
local k1id = r.stdout:match("signed by key (%x+)")
local stored = assert(e:get(P .. "jobs/tick")).kvs[1].value
T.is(stored:sub(1, #job_src("v1")), job_src("v1"), "the stored value starts with the source as it was")
local created1 = assert(e:get(P .. "jobs/tick")).kvs[1].create_revision
T.like(stored:sub(#job_src("v1") + 1), "^%-%- baton%-signature: ed25519 " .. k1id .. " c" .. created1
  .. " v2 [%w+/]+=*\n$", "followed by one signature line, a Lua comment, naming the key's create revision "
  .. "and the version it was signed for (2: a new key first holds a placeholder)")
local rev1 = rev_of("job", "tick")

-- 2. a node with --trust DIR runs it (and serves the API, with a token)
local free_port = N.free_port
local PORT = free_port()
write("token", "s3cret\n")
local HTTP = ("--http 127.0.0.1:%d --http-token-file %s/token"):format(PORT, dir)
-- curl METHOD PATH [BODY FILE] --> status, decoded body
local function api(method, path, file)
  local res = sh(("curl -sS -o %s/api.out -w '%%{http_code}' -X %s -H 'Authorization: Bearer s3cret' %s "
    .. "'http://127.0.0.1:%d/api/v1/%s'"):format(dir, method, file and ("--data-binary @" .. file) or "", PORT, path))
  local fh = io.open(dir .. "/api.out")
  local body = fh and fh:read("*a") or ""
  if fh then fh:close() end
  local ok, v = pcall(baton.json.decode, body)
  return tonumber(res.stdout), ok and v or body
end
c:start("a", TTL, "--trust " .. dir .. "/trust " .. HTTP)
T.ok(c:loaded("tick", rev1), "the trusting node loaded the signed job")

local function runs_since(t)
  local list = {}
  for _, rec in ipairs(c:records("tick")) do
    if rec.fire > t and rec.state == "succeeded" then list[#list + 1] = rec end
  end
  return list
end
local function all_rev(list, rev)
  for _, rec in ipairs(list) do if rec.code_revision ~= rev then return false end end
  return #list > 0
end
local t0 = baton.now()
T.ok(N.wait(10, function() return #runs_since(t0) >= 2 end), "the signed job runs")
T.ok(all_rev(runs_since(t0), rev1), "its runs are of the signed revision")

local function status(job, node)
  local kv = assert(e:get(P .. "status/" .. job .. "/" .. node)).kvs[1]
  return kv and baton.json.decode(kv.value)
end
local function refused(job, rev, pattern, what)
  local st = N.wait(10, function()
    local s = status(job, "a")
    return s and s.revision == rev and s.error ~= baton.json.null and s
  end)
  T.ok(st, what .. ": refused")
  T.like(st and st.error or "", pattern, what .. ": the status says why")
  T.unlike(st and st.error or "", "\n", what .. ": in one line")
  return st
end
local function still_runs(rev, what)
  local t = baton.now()
  baton.sleep(2.5)
  local list = runs_since(t)
  T.ok(all_rev(list, rev), what .. ": the last good version still runs (" .. #list .. " runs of revision "
    .. tostring(rev) .. ")")
end

-- 3. a raw put (as etcdctl would) of a changed source, its signature kept
assert(e:put(P .. "jobs/tick", (stored:gsub("%-%- v1", "-- v1, os.execute('evil')"))))
local bad = rev_of("job", "tick")
local st = refused("tick", bad, "^untrusted: job tick: the signature by key " .. k1id .. " does not verify",
  "a tampered source")
T.is(st and st.running, rev1, "a tampered source: the status says which revision still runs")
still_runs(rev1, "a tampered source")
T.like(c:log("a"), "job rejected; keeping the last good version[^\n]*untrusted: job tick", "the node logs it")

local out = c:cli("job", "ls").stdout
T.like(out, "\ntick +%* %* %* %* %* %* +UTC +%S+ +untrusted %(runs rev " .. rev1 .. "%)",
  "job ls: untrusted, and the revision that runs")
out = c:cli("job", "show", "tick").stdout
T.like(out, "\nerror: +a: untrusted: job tick: the signature by key " .. k1id .. " does not verify[^\n]*\n",
  "job show: the error")
T.like(out, "\nsigned: +by key " .. k1id .. "\n", "job show: the key the signature line names")

local status_code, body = api("GET", "jobs/tick")
T.is(status_code, 200, "API: GET the job")
T.is(type(body) == "table" and body.untrusted, true, "API: the job is untrusted")
T.like(type(body) == "table" and body.error or "", "^untrusted: job tick: the signature by key", "API: with the error")

-- an unsigned put (job put without --sign, or etcdctl put of a plain source)
T.is(put("job", "tick", job_src("v2")).code, 0, "an unsigned job put is stored")
refused("tick", rev_of("job", "tick"), "^untrusted: job tick is not signed %(this node runs only code signed by a "
  .. "%-%-trust key%)$", "an unsigned source")
still_runs(rev1, "an unsigned source")

-- a key the node does not trust
T.is(put("job", "tick", job_src("v3"), "k3").code, 0, "a put signed by another key is stored")
refused("tick", rev_of("job", "tick"), "^untrusted: job tick is signed by key %x+, which this node does not trust "
  .. "%(it trusts %x+, %x+%)$", "a key not trusted")
still_runs(rev1, "a key not trusted")

-- 4. rotation: a job signed by the second trusted key loads too
T.is(put("job", "tick", job_src("v4"), "k2").code, 0, "put signed by the second key")
local rev4 = rev_of("job", "tick")
T.ok(c:loaded("tick", rev4), "signed by the second trusted key: loaded")
local t4 = baton.now()
baton.sleep(2.5)
T.ok(all_rev(runs_since(t4 + 0.5), rev4), "and runs")
T.is(status("tick", "a").error, baton.json.null, "its status has no error")

-- the API's PUT stores a source signed elsewhere (baton job sign, where
-- the key is) as it is, where its signature says
local S = require "baton.sign"
local plain = write("viahttp.lua", job_src("http"))
r = c:cli("job", "sign", plain, "--name", "viahttp", "--sign", dir .. "/k2", "-o", dir .. "/viahttp.signed")
T.is(r.code, 0, "job sign: exit 0 " .. r.stderr)
T.like(r.stderr, "signed by key %x+ for version 2 of .-/jobs/viahttp; wrote", "job sign: says for which version")
T.is(assert(e:get(P .. "jobs/viahttp")).kvs[1].value, S.PLACEHOLDER, "job sign of a new job: a placeholder")
T.ok(not c:loaded("viahttp", rev_of("job", "viahttp"), 1), "which the node does not load")
T.is(status("viahttp", "a"), nil, "nor report as broken")
status_code = api("PUT", "jobs/viahttp", dir .. "/viahttp.signed")
T.is(status_code, 201, "API: PUT of a signed source: created")
T.ok(c:loaded("viahttp", rev_of("job", "viahttp")), "API: the signed source loads")
local before_plain = rev_of("job", "viahttp")
status_code, body = api("PUT", "jobs/viahttp", write("viahttp.plain", job_src("http, unsigned")))
T.is(status_code, 403, "API of a --trust node: PUT of an unsigned source is refused")
T.like(type(body) == "table" and body.error or "", "^EACCES: untrusted: job viahttp is not signed[^\n]*nothing "
  .. "was stored$", "API: in one line")
T.is(rev_of("job", "viahttp"), before_plain, "API: nothing was stored")
status_code, body = api("PUT", "jobs/viahttp", dir .. "/viahttp.signed")
T.is(status_code, 409, "API: the same signed source again (a replay) is refused")
T.like(type(body) == "table" and body.error or "", "^ECONFLICT: the source is signed for version 2 of .- and that "
  .. "key is at version 2 already %(a source stored before, put again%?%)", "API: says why")

-- a replay: tick's signed source stored under another name is refused
local v4 = assert(e:get(P .. "jobs/tick")).kvs[1].value
assert(e:put(P .. "jobs/tock", v4))
refused("tock", rev_of("job", "tock"), "^untrusted: job tock: the signature by key %x+ does not verify",
  "a signed job replayed under another name")

-- 5. policies likewise
local POL = [[
return {
  description = "run anywhere, at once",
  claim_delay = function(job, fire, nodes, me) return 0 end,
}
]]
local function pstatus(name)
  local kv = assert(e:get(P .. "policy-status/" .. name .. "/a")).kvs[1]
  return kv and baton.json.decode(kv.value)
end
r = put("policy", "anywhere", POL, "k1")
T.is(r.code, 0, "policy put --sign: exit 0")
T.like(r.stdout, ", signed by key " .. k1id, "policy put --sign: says which key")
local prev = rev_of("policy", "anywhere")
T.ok(N.wait(10, function() local s = pstatus("anywhere"); return s and s.revision == prev and s.error == baton.json.null end),
  "a signed policy loads")
T.like(c:cli("policy", "show", "anywhere").stdout, "\nsigned: +by key " .. k1id .. "\n", "policy show: the key")
T.is(put("policy", "anywhere", (POL:gsub("at once", "at once!"))).code, 0, "an unsigned policy put is stored")
local prev2 = rev_of("policy", "anywhere")
local ps = N.wait(10, function() local s = pstatus("anywhere"); return s and s.revision == prev2 and s end)
T.like(ps and ps.error or "", "^untrusted: policy anywhere is not signed", "an unsigned policy: refused")
T.like(c:cli("policy", "ls").stdout, "untrusted: policy anywhere is not signed", "policy ls shows it")
-- a job's signature does not make a policy
assert(e:put(P .. "policies/tick", v4))
local prev3 = rev_of("policy", "tick")
ps = N.wait(10, function() local s = pstatus("tick"); return s and s.revision == prev3 and s end)
T.like(ps and ps.error or "", "^untrusted: policy tick: the signature by key %x+ does not verify",
  "a signed job stored as a policy: refused")
e:delete(P .. "policies/tick")

-- 6. baton nodes: what each node runs
c:start("b", TTL)
T.ok(N.wait(10, function() return c:cli("nodes").stdout:match("\nb ") end), "node b is up")
out = c:cli("nodes").stdout
T.like(out, "TRUST", "nodes: a TRUST column")
T.like(out, "\na [^\n]* signed %(2 keys%)", "nodes: a runs signed code, of 2 keys")
T.like(out, "\nb [^\n]* unsigned ok", "nodes: b runs unsigned code")
local list = baton.json.decode(c:cli("nodes", "--json").stdout)
local byname = {}
for _, n in ipairs(list or {}) do byname[n.name] = n end
T.is(byname.a and byname.a.trust.signed, true, "nodes --json: a's trust")
T.is(byname.a and #byname.a.trust.keys, 2, "nodes --json: a's key ids")
T.is(byname.b and byname.b.trust.signed, false, "nodes --json: b runs unsigned code")
c:stop("b")

-- 7. rotation: k1 leaves the trusted directory; after a restart, code
-- signed by k1 only is refused, code signed by k2 runs.
T.is(put("job", "old", job_src("old"), "k1").code, 0, "a job signed by k1")
T.ok(c:loaded("old", rev_of("job", "old")), "loaded while k1 is trusted")
c:stop("a")
sh("rm " .. dir .. "/trust/k1.pub")
c:start("a", TTL, "--trust " .. dir .. "/trust " .. HTTP)
refused("old", rev_of("job", "old"), "^untrusted: job old is signed by key " .. k1id
  .. ", which this node does not trust %(it trusts %x+%)$", "after the rotation, k1's job")
T.ok(c:loaded("tick", rev4), "after the rotation, k2's job loads")
T.like(c:cli("nodes").stdout, "\na [^\n]* signed %(1 key%)", "nodes: one key now")

-- 8. --trust mistakes: one line, exit 1, before the node starts
local function node_fails(arg)
  local res = assert(baton.exec { os.getenv("BATON_BIN") or "bin/baton", "--endpoints",
    os.getenv("BATON_ENDPOINTS"), "--prefix", P, "node", "--name", "z", "--trust", arg, timeout = 10 })
  return res
end
r = node_fails(dir .. "/nope")
T.is(r.code, 1, "--trust of a missing path: exit 1")
T.like(r.stderr, "^baton: node z: %-%-trust .-/nope: no such file or directory\n$", "--trust of a missing path: says so")
r = node_fails(dir .. "/k1")
T.like(r.stderr, "^baton: node z: %-%-trust .-/k1: is a secret key; trust its %.pub file\n$", "--trust of a secret key: says so")
r = node_fails(dir .. "/tick.job.lua")
T.like(r.stderr, "^baton: node z: %-%-trust .-: not a baton public key[^\n]*\n$", "--trust of another file: says so")

-- 9. docs/security.md's examples work when pasted: each ```sh block whose
-- first line is "# example: ..." runs with sh -e, in the page's order, in
-- one directory, with baton on PATH and a private prefix.
do
  local root = os.getenv("BATON_ROOT") or "."
  local fh = assert(io.open(root .. "/docs/security.md"))
  local text = fh:read("*a")
  fh:close()
  local bin = os.getenv("BATON_BIN") or "bin/baton"
  local bindir = bin:match("^(.*)/[^/]*$") or "."
  local wd, P2 = dir .. "/docs", P .. "docs/"
  sh("mkdir " .. wd)
  local n = 0
  for block in text:gmatch("```sh\n(.-)```") do
    local title = block:match("^# example: ([^\n]*)")
    if title then
      n = n + 1
      local f = write("example" .. n .. ".sh", block)
      local res = sh(("cd %q && PATH=%q:$PATH BATON_PREFIX=%q BATON_ENDPOINTS=%q sh -e %q")
        :format(wd, bindir, P2, os.getenv("BATON_ENDPOINTS"), f))
      if not T.is(res.code, 0, "docs/security.md: " .. title) then T.diag(res.stderr) end
    end
  end
  T.is(n, 2, "docs/security.md: found its examples")
  local S = require "baton.sign"
  local trust = assert(S.load_trust { wd .. "/deploy-2027.pub" })
  local function where(kv) return { prefix = P2, create_revision = kv.create_revision, version = kv.version } end
  local kv = assert(e:get(P2 .. "jobs/nightly")).kvs[1]
  T.ok(kv and S.verify(trust, "job", "nightly", kv.value, where(kv)), "docs: the job is signed by the new key")
  kv = assert(e:get(P2 .. "policies/anywhere")).kvs[1]
  T.ok(kv and S.verify(trust, "policy", "anywhere", kv.value, where(kv)), "docs: the policy is signed by the new key")
end

-- 10. the signature line must be a line of its own, the last one
do
  local S = require "baton.sign"
  local trust = assert(S.load_trust { dir .. "/k2.pub" })
  local W = { prefix = P, create_revision = 100, version = 3 }
  local good = S.sign("job", "x", job_src("x"), assert(S.load_secret(dir .. "/k2")), W)
  T.ok(S.verify(trust, "job", "x", good, W), "a signed source verifies")
  local line = good:match("\n(%-%- baton%-signature[^\n]*)\n$")
  local _, err = S.verify(trust, "job", "x", "return {} " .. line .. "\n", W)
  T.like(err or "", "^untrusted: job x is not signed", "a signature comment at the end of a code line is none")
  _, err = S.verify(trust, "job", "x", good .. "os.exit(1)\n", W)
  T.like(err or "", "^untrusted: job x is not signed", "code after the signature line: not signed")
  _, err = S.verify(trust, "job", "x", good, { prefix = "/other/", create_revision = 100, version = 3 })
  T.like(err or "", "^untrusted: job x: the signature by key %x+ does not verify", "under another prefix: no")
  _, err = S.verify(trust, "job", "x", good, { prefix = P, create_revision = 100, version = 5 })
  T.like(err or "", "^untrusted: job x was signed as version 3 of its key, and this is version 5 %(an older "
    .. "signed version put back: a replay%)$", "at another version of the key: a replay")
  _, err = S.verify(trust, "job", "x", good, { prefix = P, create_revision = 180, version = 3 })
  T.like(err or "", "^untrusted: job x was signed for the key created at revision 100, and this one was created "
    .. "at revision 180", "in a key created again: a resurrection")
  local old_form = good:gsub(" c100 v3 ", " ")
  _, err = S.verify(trust, "job", "x", old_form, W)
  T.like(err or "", "^untrusted: job x is signed in an older form", "the old form, which binds no version: refused")
end

-- 11. rollback --sign: an old version goes back signed by today's key
do
  local S = require "baton.sign"
  local trust3 = assert(S.load_trust { dir .. "/k3.pub" })
  local trust1 = assert(S.load_trust { dir .. "/k1.pub" })
  T.is(put("job", "rb", job_src("rb-1"), "k1").code, 0, "rollback: version 1, signed by k1")
  local r1 = rev_of("job", "rb")
  T.is(put("job", "rb", job_src("rb-2"), "k1").code, 0, "rollback: version 2, signed by k1")
  local r = c:cli("job", "rollback", "rb", tostring(r1), "--sign", dir .. "/k3")
  T.is(r.code, 1, "job rollback --sign of a version another key signed: exit 1")
  T.like(r.stderr, "^baton: job rollback rb: EACCES: revision " .. r1 .. " of job rb was not signed by key %x+ "
    .. "%(add older keys with %-%-trust%)[^\n]*nothing was done\n$", "says why, in one line")
  r = c:cli("job", "rollback", "rb", tostring(r1), "--sign", dir .. "/k3", "--trust", dir .. "/k1.pub")
  T.is(r.code, 0, "job rollback --sign --trust OLDKEY: exit 0 " .. r.stderr)
  local kv = assert(e:get(c.P .. "jobs/rb")).kvs[1]
  T.ok(kv and kv.value:find("rb-1", 1, true), "rollback: version 1's source is back")
  local W = kv and { prefix = c.P, create_revision = kv.create_revision, version = kv.version }
  T.ok(kv and S.verify(trust3, "job", "rb", kv.value, W), "rollback --sign: signed by the key given (k3)")
  T.ok(kv and not S.verify(trust1, "job", "rb", kv.value, W), "rollback --sign: the old signature (k1) is gone")
  r = c:cli("job", "rollback", "rb", tostring(r1), "--sign", dir .. "/k3.pub")
  T.is(r.code, 1, "rollback --sign with a public key: exit 1")
  T.like(r.stderr, "^baton: job rollback rb: %-%-sign: [^\n]*\n$", "rollback --sign with a public key: one line")
  -- a version someone stored with etcdctl is not signed by rollback --sign
  assert(e:put(c.P .. "jobs/rb", job_src("planted")))
  local planted = rev_of("job", "rb")
  T.is(put("job", "rb", job_src("rb-3"), "k3").code, 0, "rollback: a signed version over the planted one")
  r = c:cli("job", "rollback", "rb", tostring(planted), "--sign", dir .. "/k3", "--trust", dir .. "/k1.pub")
  T.is(r.code, 1, "rollback --sign of a version planted with a raw put: exit 1")
  T.like(r.stderr, "EACCES: revision " .. planted .. " of job rb was not signed by key %x+ nor a %-%-trust key",
    "refused: it may not be ours to sign")
  T.unlike(assert(e:get(c.P .. "jobs/rb")).kvs[1].value, "planted", "the planted source is not back")
end

-- 12. What an etcd writer without a key can do with signed sources it has
-- seen: each is refused with one clear line, and the last good version
-- keeps running.
do
  -- a replay: an older signed version put back over a newer one
  T.is(put("job", "tick", job_src("r1"), "k2").code, 0, "replay: version r1, signed")
  local r1v = assert(e:get(P .. "jobs/tick")).kvs[1].value
  T.is(put("job", "tick", job_src("r2"), "k2").code, 0, "replay: version r2, signed")
  local good = rev_of("job", "tick")
  T.ok(c:loaded("tick", good), "replay: r2 loaded")
  assert(e:put(P .. "jobs/tick", r1v))
  local st2 = refused("tick", rev_of("job", "tick"), "^untrusted: job tick was signed as version %d+ of its key, "
    .. "and this is version %d+ %(an older signed version put back: a replay%)$", "an old signed version replayed")
  T.is(st2 and st2.running, good, "replay: the status says r2 still runs")
  still_runs(good, "a replayed version")
  T.like(c:cli("job", "show", "tick").stdout, "a replay", "replay: job show says so")

  -- a resurrection: a deleted job's last signed source put back
  T.is(put("job", "lazarus", job_src("lazarus"), "k2").code, 0, "resurrection: a signed job")
  local lrev = rev_of("job", "lazarus")
  T.ok(c:loaded("lazarus", lrev), "resurrection: loaded")
  local lv = assert(e:get(P .. "jobs/lazarus")).kvs[1].value
  T.is(c:cli("job", "rm", "lazarus").code, 0, "resurrection: job rm")
  baton.sleep(0.5)
  local t_rm = baton.now()
  assert(e:put(P .. "jobs/lazarus", lv))
  assert(e:put(P .. "jobs/lazarus", lv)) -- (version 2 of the new key, as it was signed for)
  refused("lazarus", rev_of("job", "lazarus"), "^untrusted: job lazarus was signed for the key created at revision "
    .. "%d+, and this one was created at revision %d+ %(a deleted job put back", "a deleted job put back")
  baton.sleep(2)
  local after = 0
  for _, rec in ipairs(c:records("lazarus")) do if rec.fire > t_rm then after = after + 1 end end
  T.is(after, 0, "resurrection: it does not run")

  -- a forged version log entry: rollback takes etcd's history, refuses a
  -- log entry that does not match it, and one etcd has no history for
  T.is(put("job", "fv", job_src("fv-1"), "k2").code, 0, "forged log: version 1")
  local fv1 = rev_of("job", "fv")
  T.is(put("job", "fv", job_src("fv-2"), "k2").code, 0, "forged log: version 2")
  local fv2 = rev_of("job", "fv")
  local evil = job_src("fv-1") .. "-- and something evil\n"
  local meta = baton.json.encode { op = "put", author = "alice", time = baton.now(), revision = fv1,
                                   sha256 = baton._sha256(evil), size = #evil }
  assert(e:put(P .. "versions/fv/" .. fv1, meta .. "\n" .. evil))
  local vl = baton.json.decode(c:cli("job", "versions", "fv", "--json").stdout)
  local entry
  for _, v in ipairs(vl or {}) do if v.revision == fv1 then entry = v end end
  T.is(entry and entry.checked, "mismatch", "versions: the forged entry does not match etcd's history")
  T.like(c:cli("job", "versions", "fv").stdout, "\n" .. fv1 .. " .-MISMATCH\n", "versions: MISMATCH in the table")
  r = c:cli("job", "rollback", "fv", tostring(fv1), "--sign", dir .. "/k2")
  T.is(r.code, 1, "rollback to a forged entry: exit 1")
  T.like(r.stderr, "^baton: job rollback fv: ECONFLICT: the version log's entry for revision " .. fv1
    .. " of job fv %(SHA%-256 %x+%) does not match what etcd stored at that revision[^\n]*nothing was done\n$",
    "rollback to a forged entry: refused in one line")
  T.is(rev_of("job", "fv"), fv2, "rollback to a forged entry: nothing was stored")
  -- an entry for a revision at which etcd never stored the job
  local fake = fv2 - 1 == fv1 and fv2 + 1000 or fv2 - 1
  assert(e:put(P .. "versions/fv/" .. fake, baton.json.encode { op = "put", author = "alice", time = baton.now(),
    revision = fake, sha256 = baton._sha256(evil), size = #evil } .. "\n" .. evil))
  r = c:cli("job", "rollback", "fv", tostring(fake), "--sign", dir .. "/k2")
  T.is(r.code, 1, "rollback to an entry etcd has no history of: exit 1")
  T.like(r.stderr, "^baton: job rollback fv: EINVAL: revision " .. fake .. " of job fv is no longer in etcd's "
    .. "history[^\n]*%-%-from%-log[^\n]*\n$", "refused unless --from-log, in one line")
  T.is(rev_of("job", "fv"), fv2, "nothing was stored")
  T.ok(c:loaded("fv", fv2), "the last good version is what the node runs")
end

c:destroy()
T.done()
