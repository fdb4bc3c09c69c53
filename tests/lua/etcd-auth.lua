-- Authentication: user and password from options, flags or the
-- environment; a wrong password is one clear line; an expired token is
-- renewed by re-authenticating.
local T = require "tap"
local H = require "etcdh"
local bin = os.getenv("BATON_BIN") or "bin/baton"

-- Tokens live 2 s here so that the test sees one expire.
local srv = H.start("--auth", "--auth-token-ttl=2")

local anon = baton.etcd.new { endpoints = srv.url }
local _, aerr, acode = anon:get("k")
T.is(acode, "EAUTH", "no credentials: EAUTH")

local good = baton.etcd.new { endpoints = srv.url, user = "baton", password = "batonpw" }
T.ok(good:put("/auth/a", "1"), "put with user and password")
T.is(assert(good:get("/auth/a")).kvs[1].value, "1", "get with user and password")
local w = assert(good:watch("/auth/", { prefix = true }))
baton.sleep(3.5) -- the token has expired by now
T.ok(good:put("/auth/b", "2"), "after the token expired: re-authenticated")
local evs = assert(w:next(10))
T.is(evs[1].kv.key, "/auth/b", "watch with a token sees events")
w:cancel()

local bad = baton.etcd.new { endpoints = srv.url, user = "baton", password = "nope" }
local r, err, code = bad:get("/auth/a")
T.is(r, nil, "wrong password fails")
T.is(code, "EAUTH", "with EAUTH")
T.like(err, "^EAUTH: etcd http://127%.0%.0%.1:%d+: authentication failed for user \"baton\": wrong user name or password$",
       "one clear line")
T.unlike(err, "\n", "no newline in the message")

-- flags and environment
local f = os.tmpname()
local fh = io.open(f, "w")
fh:write('local r = assert(baton.etcd:get("/auth/a")); print(r.kvs[1].value)\n')
fh:close()
local viaflags = assert(baton.exec { bin, "--endpoints", srv.url, "--user", "baton",
                                     "--password", "batonpw", "eval", f, timeout = 20 })
T.is(viaflags.code, 0, "--user/--password work")
T.is(viaflags.stdout, "1\n", "and read the value")
local viaenv = assert(baton.exec { bin, "eval", f, timeout = 20,
  env = { BATON_ENDPOINTS = srv.url, BATON_USER = "baton", BATON_PASSWORD = "batonpw" } })
T.is(viaenv.code, 0, "BATON_USER/BATON_PASSWORD work")
local wrong = assert(baton.exec { bin, "eval", f, timeout = 20,
  env = { BATON_ENDPOINTS = srv.url, BATON_USER = "baton", BATON_PASSWORD = "bad" } })
T.is(wrong.code, 1, "a wrong password: exit 1")
T.like(wrong.stderr:match("^[^\n]*"), "authentication failed for user \"baton\": wrong user name or password",
       "first stderr line says so")
os.remove(f)
good:close()
srv:destroy()
T.done()
