-- Unreachable and failing endpoints: a clear, fast error naming the
-- endpoint; a dead endpoint in a list is skipped; a script asserting on the
-- failure exits 1 with a one-line message.
local T = require "tap"
local live = os.getenv("BATON_ENDPOINTS")
local bin = os.getenv("BATON_BIN") or "bin/baton"

local dead = baton.etcd.new { endpoints = "http://127.0.0.1:1" }
local t0 = baton.monotime()
local r, err, code = dead:get("k")
local took = baton.monotime() - t0
T.is(r, nil, "get on a refused endpoint fails")
T.is(code, "ECONNREFUSED", "with ECONNREFUSED")
T.like(err, "^ECONNREFUSED: etcd http://127%.0%.0%.1:1: connection refused$", "message names the endpoint")
T.ok(took < 3, ("within 3 s (%.3f s)"):format(took))
local _, _, pcode = dead:put("k", "v")
T.is(pcode, "ECONNREFUSED", "put fails the same way")
local w, werr, wcode = dead:watch("k")
T.is(w, nil, "watch on a dead endpoint fails instead of retrying forever")
T.is(wcode, "ECONNREFUSED", "watch: ECONNREFUSED")

-- A dead endpoint first in the list: every call succeeds.
local mixed = baton.etcd.new { endpoints = "http://127.0.0.1:1," .. live }
local P = "/test/ep/" .. baton.now() .. "/"
T.ok(mixed:put(P .. "a", "1"), "put succeeds (a refused connection never reached etcd)")
T.is(assert(mixed:get(P .. "a")).kvs[1].value, "1", "get succeeds")
T.ok(mixed:txn { success = { { put = { key = P .. "b", value = "2" } } } }, "txn succeeds")
T.ok(mixed:delete(P .. "b"), "delete succeeds")
local l = mixed:grant(10)
T.ok(l, "grant succeeds")
T.ok(l and l:keepalive(), "keepalive succeeds")
T.ok(l and l:timetolive(), "timetolive succeeds")
T.ok(l and l:revoke(), "revoke succeeds")
local mw = mixed:watch(P, { prefix = true })
T.ok(mw, "watch succeeds")
assert(mixed:put(P .. "c", "3"))
T.is(mw and assert(mw:next(10))[1].kv.value, "3", "and sees events")
if mw then mw:cancel() end
T.is(mixed:endpoint(), live, "the live endpoint is now preferred")
assert(mixed:delete(P, { prefix = true }))

-- Malformed endpoint lists are misuse-level errors with a clear message.
local bad, berr, bcode = baton.etcd.new { endpoints = "localhost:2379" }:get("k")
T.is(bcode, "EINVAL", "an endpoint without http:// is refused")
T.like(berr, "not an http:// or https:// URL", "and the message says why")
for _, ep in ipairs { "http://127.0.0.1:99999", "http://127.0.0.1:0", "http://[::1", "http://:2379" } do
  local _, perr, pcode = baton.etcd.new { endpoints = ep }:get("k")
  T.is(pcode, "EINVAL", ep .. " is refused")
  T.like(perr, 'endpoint "' .. ep:gsub("%p", "%%%0") .. '" is not a valid URL', "naming it: " .. tostring(perr))
end

-- The CLI: a script that asserts on the failure exits 1, first line names
-- the endpoint.
local f = os.tmpname()
local fh = io.open(f, "w")
fh:write('assert(baton.etcd:get("k"))\n')
fh:close()
local res = assert(baton.exec { bin, "eval", f, timeout = 20,
                                env = { BATON_ENDPOINTS = "http://127.0.0.1:1" } })
T.is(res.code, 1, "eval exits 1")
local first = res.stderr:match("^[^\n]*")
T.like(first, "^baton: .*ECONNREFUSED: etcd http://127%.0%.0%.1:1: connection refused$",
       "first stderr line: one line naming the endpoint")
local res2 = assert(baton.exec { bin, "--endpoints", "http://127.0.0.1:1," .. live,
                                 "eval", f, timeout = 20 })
T.is(res2.code, 0, "--endpoints with a live member: the script succeeds")
os.remove(f)
T.done()
