-- baton.session, baton.mutex: the etcd lock recipe, fencing, mutual
-- exclusion across processes, a killed or stopped holder, a waiter whose
-- lease expires, bad input.
local T = require "tap"
local H = require "etcdh"
local bin = os.getenv("BATON_BIN") or "bin/baton"
local root = os.getenv("BATON_ROOT") or "."
local e = baton.etcd
local N = "/test/mutex/" .. tostring(baton.now())

-- Starts `baton eval lib/SCRIPT args...` in the background; returns its pid.
local function background(script, ...)
  local cmd = { ("exec %q eval %q"):format(bin, root .. "/tests/lua/lib/" .. script) }
  for _, a in ipairs { ... } do cmd[#cmd + 1] = ("%q"):format(a) end
  local r = assert(baton.exec { "sh", "-c", table.concat(cmd, " ") .. " >/dev/null 2>&1 & echo $!" })
  return tonumber(r.stdout)
end

local function wait_key(key, secs)
  local deadline = baton.monotime() + secs
  while baton.monotime() < deadline do
    local r = assert(e:get(key))
    if r.count > 0 then return r.kvs[1].value end
    baton.sleep(0.05)
  end
end

local function kill(sig, pid) assert(baton.exec { "kill", "-" .. sig, tostring(pid) }) end

-- 1. The API and the recipe's key layout.
do
  local s1 = assert(baton.session { ttl = 10 })
  local s2 = assert(baton.session { ttl = 10 })
  T.like(s1.lease, "^%d+$", "session lease id")
  T.is(s1:done(), false, "a new session is not done")
  local m1, m2 = baton.mutex(s1, N .. "/a"), baton.mutex(s2, N .. "/a")
  T.ok(m1:lock(), "lock")
  T.like(m1.key, "^" .. N:gsub("%p", "%%%0") .. "/a/%x+$", "key is name/<lease hex>")
  local kv = assert(e:get(m1.key)).kvs[1]
  T.is(kv.lease, s1.lease, "the key is attached to the session's lease")
  T.is(m1.fence, kv.create_revision, "fence is the key's create revision")
  T.ok(m1:held(), "held")
  local ok, err, code = m2:try_lock()
  T.is(code, "ELOCKED", "try_lock on a held lock: ELOCKED")
  T.is(assert(e:get(N .. "/a/", { prefix = true })).count, 1, "a failed try_lock leaves no key")
  local r, terr, tcode = m2:lock(0.3)
  T.is(tcode, "ETIMEDOUT", "lock with a timeout: ETIMEDOUT")
  T.is(terr, "ETIMEDOUT: lock wait timed out", "message")
  T.is(assert(e:get(N .. "/a/", { prefix = true })).count, 1, "a timed-out waiter deletes its key")
  local t = assert(e:txn { compare = { m1:guard() }, success = { { put = { key = N .. "/data", value = "1" } } } })
  T.ok(t.succeeded, "a write guarded by the holder succeeds")
  local guard = m1:guard()
  local got
  baton.go(function() got = m2:lock(5) end)
  baton.sleep(0.2)
  T.ok(m1:unlock(), "unlock")
  local deadline = baton.monotime() + 5
  while not got and baton.monotime() < deadline do baton.sleep(0.02) end
  T.ok(got, "the waiter gets the lock after unlock")
  T.ok(m2.fence > guard.value, "the next holder's fence is larger")
  T.is(m1:held(), false, "the old holder no longer holds")
  t = assert(e:txn { compare = { guard }, success = { { put = { key = N .. "/data", value = "2" } } } })
  T.is(t.succeeded, false, "a write guarded by the old holder's fence fails")
  T.ok(m2:unlock(), "unlock 2")
  s1:close()
  T.is(s1:done(), true, "a closed session is done")
  local _, cerr, ccode = m1:lock()
  T.is(ccode, "ELOST", "locking with a closed session: ELOST")
  s2:close()
end

-- 2. Mutual exclusion: 5 processes x 50 guarded increments = 250.
do
  local counter = N .. "/counter"
  local running, results = 5, {}
  for i = 1, 5 do
    baton.go(function()
      results[i] = baton.exec { bin, "eval", root .. "/tests/lua/lib/lock-counter.lua",
                                N .. "/contended", counter, "50", timeout = 240 }
      running = running - 1
    end)
  end
  while running > 0 do baton.sleep(0.1) end
  local allok = true
  for i = 1, 5 do
    if not (results[i] and results[i].code == 0) then
      allok = false
      T.diag(results[i] and results[i].stderr or "no result")
    end
  end
  T.ok(allok, "5 processes x 50 lock/increment/unlock cycles finished")
  T.is(assert(e:get(counter)).kvs[1].value, "250", "the counter is exactly 250")
end

-- 3. A holder killed with SIGKILL: the next waiter acquires within TTL + 1 s.
do
  local name, tag = N .. "/killed", "k" .. baton.now()
  local pid = background("lock-holder.lua", name, "2", tag)
  local fence1 = wait_key("/test/holder/" .. tag .. "/ready", 20)
  T.ok(fence1, "holder process has the lock")
  local s = assert(baton.session { ttl = 10 })
  local m = baton.mutex(s, name)
  local acquired_at
  baton.go(function() if m:lock(20) then acquired_at = baton.monotime() end end)
  baton.sleep(0.3)
  T.ok(not acquired_at, "the waiter waits while the holder lives")
  local killed_at = baton.monotime()
  kill("KILL", pid)
  while not acquired_at and baton.monotime() - killed_at < 10 do baton.sleep(0.02) end
  T.ok(acquired_at, "the waiter acquired after the holder was killed")
  local took = (acquired_at or math.huge) - killed_at
  T.ok(took <= 3, ("within TTL + 1 s (%.2f s)"):format(took))
  T.ok(m.fence and m.fence > tonumber(fence1), "with a larger fence")
  m:unlock()
  s:close()
end

-- 4. A holder stopped (SIGSTOP) past its lease: after SIGCONT it knows it
-- lost the lock and its guarded write fails; the new holder's fence is larger.
do
  local name, tag = N .. "/stopped", "s" .. baton.now()
  local pid = background("lock-holder.lua", name, "2", tag)
  local fence1 = tonumber(wait_key("/test/holder/" .. tag .. "/ready", 20))
  T.ok(fence1, "holder process has the lock")
  kill("STOP", pid)
  local s = assert(baton.session { ttl = 10 })
  local m = baton.mutex(s, name)
  T.ok(m:lock(10), "a new holder gets the lock once the stopped one's lease expired")
  T.ok(m.fence > fence1, "new fence > old fence")
  assert(e:put("/test/holder/" .. tag .. "/check", "1"))
  kill("CONT", pid)
  local res = wait_key("/test/holder/" .. tag .. "/result", 20)
  res = res and baton.json.decode(res) or {}
  T.is(res.held, false, "after SIGCONT, m:held() is false")
  T.is(res.guarded, false, "a write guarded by m:guard() fails")
  T.is(res.lost, true, "the session knows it is lost")
  T.is(assert(e:get("/test/holder/" .. tag .. "/guarded")).count, 0, "nothing was written")
  m:unlock()
  s:close()
end

-- 5. A waiter whose own lease expires while it waits gets an error, never
-- the lock.
do
  local name, tag = N .. "/expiring", "w" .. baton.now()
  local s = assert(baton.session { ttl = 10 })
  local m = baton.mutex(s, name)
  assert(m:lock())
  background("lock-waiter.lua", name, "2", tag)
  local pid = tonumber(wait_key("/test/waiter/" .. tag .. "/pid", 20))
  baton.sleep(0.3) -- let it queue
  kill("STOP", pid)
  baton.sleep(3.5) -- past its 2 s lease
  m:unlock()       -- the lock is free now: a buggy waiter would take it
  kill("CONT", pid)
  local res = wait_key("/test/waiter/" .. tag .. "/result", 20)
  res = res and baton.json.decode(res) or {}
  T.is(res.ok, false, "the waiter did not get the lock")
  T.is(res.code, "ELOST", "it got ELOST")
  T.like(res.err or "", "^ELOST: ", "with a message")
  s:close()
end

-- 6. Bad input.
do
  local s = assert(baton.session { ttl = 5 })
  T.error_like(function() baton.mutex(s, "") end, "name must not be empty", "empty name raises")
  T.error_like(function() baton.mutex(s, nil) end, "string expected", "nil name raises")
  T.error_like(function() baton.mutex({}, "x") end, "session expected", "a non-session raises")
  T.error_like(function() baton.session { ttl = 0 } end, "ttl", "ttl 0 raises")
  T.error_like(function() baton.session { ttl = 1.5 } end, "whole number", "fractional ttl raises")
  T.error_like(function() baton.session { tll = 5 } end, "unknown option 'tll'", "unknown option raises")
  T.error_like(function() baton.mutex(s, "x"):guard() end, "not locked", "guard of an unheld mutex raises")
  s:close()
  -- etcd's minimum TTL is 1.5 x its election timeout (2 s with the defaults)
  local srv = H.start("--heartbeat-interval=100", "--election-timeout=1000")
  local c = baton.etcd.new { endpoints = srv.url }
  local x, err, code = baton.session { ttl = 1, client = c }
  T.is(x, nil, "a TTL below etcd's minimum fails")
  T.is(code, "EINVAL", "with EINVAL")
  T.is(err, "EINVAL: session ttl 1 s is below etcd's minimum lease TTL (2 s)", "saying so")
  T.is(#assert(c:leases()), 0, "and leaves no lease behind")
  c:close()
  srv:destroy()
end

T.done()
