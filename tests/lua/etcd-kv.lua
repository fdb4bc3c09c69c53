-- The etcd calls of the Lua API against the harness's etcd: documented
-- result shapes, big values, binary keys and values, txn in all its forms,
-- leases, and misuse raising.
local T = require "tap"
local e = baton.etcd
local P = "/test/kv/" .. tostring(baton.now()) .. "/"

local r = assert(e:put(P .. "a", "1"))
T.ok(type(r.revision) == "number" and r.revision > 0, "put returns a numeric revision")
local g = assert(e:get(P .. "a"))
T.is(g.count, 1, "get count")
T.is(g.kvs[1].key, P .. "a", "get key")
T.is(g.kvs[1].value, "1", "get value")
T.is(g.kvs[1].version, 1, "version starts at 1")
T.is(g.kvs[1].create_revision, r.revision, "create_revision is the put's revision")
T.is(g.kvs[1].mod_revision, r.revision, "mod_revision")
T.is(g.kvs[1].lease, nil, "no lease")
T.ok(g.revision >= r.revision, "header revision")

local missing = assert(e:get(P .. "nope"))
T.is(missing.count, 0, "missing key: count 0")
T.is(#missing.kvs, 0, "missing key: no kvs")

local r2 = assert(e:put(P .. "a", "2", { prev_kv = true }))
T.is(r2.prev_kv and r2.prev_kv.value, "1", "put prev_kv")
T.is(assert(e:get(P .. "a")).kvs[1].version, 2, "version grows")

-- empty value, 1 MiB value, NUL and non-UTF-8 bytes in keys and values
assert(e:put(P .. "empty", ""))
T.is(assert(e:get(P .. "empty")).kvs[1].value, "", "empty value round-trips")
local big = {}
for i = 1, 1024 do big[i] = string.char(i % 256):rep(1024) end
big = table.concat(big)
T.is(#big, 1048576, "1 MiB value built")
assert(e:put(P .. "big", big))
T.ok(assert(e:get(P .. "big")).kvs[1].value == big, "1 MiB value round-trips")
local bin = "k\0\1\255\254\128x"
local val = "\0v\255\0\192\193"
assert(e:put(P .. bin, val))
local gb = assert(e:get(P .. bin))
T.ok(gb.kvs[1].key == P .. bin, "key with NUL and non-UTF-8 bytes round-trips")
T.ok(gb.kvs[1].value == val, "value with NUL and non-UTF-8 bytes round-trips")

-- prefix, limit, sort, keys_only, count_only, revision
for i = 1, 5 do assert(e:put(P .. "list/" .. i, "v" .. i)) end
local l = assert(e:get(P .. "list/", { prefix = true }))
T.is(l.count, 5, "prefix count")
T.is(l.kvs[1].key, P .. "list/1", "sorted by key by default")
local lim = assert(e:get(P .. "list/", { prefix = true, limit = 2, sort = "create", order = "desc" }))
T.is(#lim.kvs, 2, "limit")
T.ok(lim.more, "more is set when limited")
T.is(lim.kvs[1].key, P .. "list/5", "sort create desc")
local ko = assert(e:get(P .. "list/", { prefix = true, keys_only = true }))
T.is(ko.kvs[1].value, "", "keys_only has no values")
local co = assert(e:get(P .. "list/", { prefix = true, count_only = true }))
T.is(co.count, 5, "count_only count")
T.is(#co.kvs, 0, "count_only has no kvs")
local old = assert(e:get(P .. "a", { revision = r.revision }))
T.is(old.kvs[1].value, "1", "get at an older revision")

-- delete
local d = assert(e:delete(P .. "list/1", { prev_kv = true }))
T.is(d.deleted, 1, "delete count")
T.is(d.prev_kvs[1].value, "v1", "delete prev_kvs")
local dp = assert(e:delete(P .. "list/", { prefix = true }))
T.is(dp.deleted, 4, "delete prefix")
T.is(assert(e:delete(P .. "list/x")).deleted, 0, "deleting nothing")

-- txn: every compare target and op, nested results
local a = assert(e:get(P .. "a")).kvs[1]
local t = assert(e:txn {
  compare = {
    { key = P .. "a", target = "value", op = "==", value = "2" },
    { key = P .. "a", target = "version", op = ">", value = 1 },
    { key = P .. "a", target = "create", op = "==", value = a.create_revision },
    { key = P .. "a", target = "mod", op = "<", value = a.mod_revision + 1 },
    { key = P .. "a", target = "lease", op = "==", value = "0" },
    { key = P .. "a", target = "value", op = "~=", value = "x" },
  },
  success = {
    { put = { key = P .. "b", value = "B" } },
    { get = { key = P .. "a" } },
    { delete = { key = P .. "empty", prev_kv = true } },
    { txn = { compare = { { key = P .. "a", target = "version", op = "==", value = 2 } },
              success = { { get = { key = P .. "a" } } } } },
  },
  failure = { { put = { key = P .. "failed", value = "x" } } },
})
T.is(t.succeeded, true, "txn succeeded")
T.is(#t.responses, 4, "txn responses")
T.is(t.responses[1].op, "put", "response 1 is a put")
T.is(t.responses[2].kvs[1].value, "2", "response 2 is the get")
T.is(t.responses[3].deleted, 1, "response 3 is the delete")
T.is(t.responses[4].succeeded, true, "nested txn succeeded")
T.is(t.responses[4].responses[1].kvs[1].value, "2", "nested txn results are mapped")
T.is(assert(e:get(P .. "b")).kvs[1].value, "B", "the txn's put applied")
local f = assert(e:txn {
  compare = { { key = P .. "nope", target = "create", op = "~=", value = 0 } },
  success = { { put = { key = P .. "s", value = "x" } } },
  failure = { { get = { key = P .. "a" } } },
})
T.is(f.succeeded, false, "failed compare: succeeded false (etcd omits it)")
T.is(f.responses[1].kvs[1].value, "2", "failure branch ran")
T.is(assert(e:get(P .. "s")).count, 0, "success branch did not run")

-- leases
local lease = assert(e:grant(30))
T.is(type(lease.id), "string", "lease id is a string")
T.like(lease.id, "^%d+$", "lease id is decimal digits")
T.is(lease.ttl, 30, "granted ttl")
assert(e:put(P .. "leased", "x", { lease = lease }))
T.is(assert(e:get(P .. "leased")).kvs[1].lease, lease.id, "kv carries the lease id")
local ttl, info = assert(lease:timetolive())
T.ok(ttl > 0 and ttl <= 30, "timetolive remaining")
T.is(info.granted, 30, "timetolive granted")
T.is(info.keys[1], P .. "leased", "timetolive keys")
T.is(assert(lease:keepalive()), 30, "keepalive returns the ttl")
T.is(lease:state(), "alive", "automatic keepalive runs")
local ids = assert(e:leases())
local found = false
for _, id in ipairs(ids) do found = found or id == lease.id end
T.ok(found, "leases lists it")
T.ok(assert(lease:revoke()), "revoke")
T.is(assert(e:get(P .. "leased")).count, 0, "revoking deletes the lease's keys")
local n, err, code = lease:timetolive()
T.is(n, nil, "timetolive after revoke fails")
T.is(code, "ENOLEASE", "with ENOLEASE")
local short = assert(e:grant(2))
assert(short:keepalive())
baton.sleep(3.5)
T.ok(assert(short:timetolive()) > 0, "a 2 s lease outlives 3.5 s thanks to automatic keepalive")
assert(short:revoke())
local _, kerr, kcode = e:lease("12345"):keepalive()
T.is(kcode, "ENOLEASE", "keepalive of an unknown lease: ENOLEASE")
T.like(kerr, "^ENOLEASE: ", "error string starts with the code")

-- runtime failures return nil, "ECODE: message", "ECODE"
local x, xerr, xcode = e:get(P .. "a", { revision = 1e9 })
T.is(x, nil, "future revision fails")
T.is(xcode, "EFUTUREREV", "EFUTUREREV")
local y, yerr, ycode = e:put(P .. "l", "v", { lease = "999999" })
T.is(ycode, "ENOLEASE", "put with an unknown lease: ENOLEASE")

-- misuse raises
T.error_like(function() e:get(nil) end, "bad argument #1 to 'get' %(string expected, got nil%)", "get(nil) raises")
T.error_like(function() e:get("k", { prefx = true }) end, "unknown option 'prefx'", "a misspelt option raises")
T.error_like(function() e:put("k", 5) end, "bad argument #2 to 'put'", "put of a number raises")
T.error_like(function() e:txn { compare = { { key = "k", target = "bogus" } } } end, "target", "bad compare target raises")
T.error_like(function() e:txn { success = { { frob = {} } } } end, "one of put, get, delete, txn", "bad txn op raises")

assert(e:delete(P, { prefix = true }))
T.done()
