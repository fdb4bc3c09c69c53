-- baton lock and baton elect as processes, against real etcdctl on the same
-- names (both directions), with signals, a lost lock and bad input.
local T = require "tap"
local bin = os.getenv("BATON_BIN") or "bin/baton"
local eps = os.getenv("BATON_ENDPOINTS")
local e = baton.etcd
local N = "/test/lockcli/" .. tostring(baton.now())
local tmp = os.tmpname()
os.remove(tmp)
assert(baton.exec { "mkdir", "-p", tmp })

local function q(s) return ("'%s'"):format(s:gsub("'", "'\\''")) end

-- Starts a shell command line in the background with its output in files.
local function start(name, cmdline)
  local out, err = tmp .. "/" .. name .. ".out", tmp .. "/" .. name .. ".err"
  local p = assert(baton.spawn { "sh", "-c", "exec " .. cmdline .. " >" .. out .. " 2>" .. err,
                                 stdio = "null" })
  return p, out, err
end

local function read(path)
  local f = io.open(path)
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

-- Waits until path exists (and, with a pattern, its text matches).
local function wait_for(path, pattern, secs)
  local deadline = baton.monotime() + secs
  while baton.monotime() < deadline do
    if exists(path) and (not pattern or read(path):find(pattern)) then return true end
    baton.sleep(0.05)
  end
  return false
end
local BATON = q(bin) .. " --endpoints " .. q(eps)
local ETCDCTL = "etcdctl --endpoints " .. q(eps)

-- 1. etcdctl holds NAME: baton lock waits, and runs once etcdctl releases.
do
  local name = N .. "/a"
  local ectl, eout = start("ectl-a", ETCDCTL .. " lock " .. q(name))
  T.ok(wait_for(eout, name, 20), "etcdctl lock holds " .. name)
  local r = assert(baton.exec { bin, "lock", name, "--timeout", "1", "--", "true", timeout = 30 })
  T.is(r.code, 1, "baton lock --timeout 1 fails while etcdctl holds the lock")
  T.like(r.stderr, "^baton: lock " .. name:gsub("%p", "%%%0") .. ": ETIMEDOUT: lock wait timed out\n$",
         "with a one-line timeout message")
  local marker = tmp .. "/ran-a"
  local bl = start("baton-a", BATON .. " lock " .. q(name) .. " -- touch " .. q(marker))
  baton.sleep(0.7)
  T.ok(not exists(marker), "baton lock waits while etcdctl holds it")
  ectl:kill("SIGTERM")
  ectl:wait(10)
  local res = bl:wait(20)
  T.is(res and res.code, 0, "baton lock exits 0 once it ran the command")
  T.ok(exists(marker), "and the command ran after etcdctl released")
end

-- 2. baton holds NAME: etcdctl lock waits until baton's command has ended.
do
  local name = N .. "/b"
  local held, done_at = tmp .. "/held-b", tmp .. "/etcdctl-b"
  local bl = start("baton-b", BATON .. " lock " .. q(name) .. " -- sh -c " ..
                   q("touch " .. held .. "; sleep 1.5; echo done"))
  T.ok(wait_for(held, nil, 20), "baton lock holds " .. name)
  local t0 = baton.monotime()
  local ectl = start("ectl-b", ETCDCTL .. " lock " .. q(name) .. " touch " .. q(done_at))
  baton.sleep(0.5)
  T.ok(not exists(done_at), "etcdctl lock waits while baton holds it")
  local br = bl:wait(20)
  T.is(br and br.code, 0, "baton lock propagated the command's status 0")
  local er = ectl:wait(20)
  T.is(er and er.code, 0, "etcdctl lock ran once baton released")
  T.ok(exists(done_at) and baton.monotime() - t0 >= 0.9, "after baton's command ended")
end

-- 3. Exit status, environment, fence.
do
  local name = N .. "/c"
  local r = assert(baton.exec { bin, "lock", name, "--", "sh", "-c",
    'echo "$BATON_LOCK_KEY $BATON_LOCK_FENCE"; exit 7', timeout = 30 })
  T.is(r.code, 7, "CMD's exit status is baton's")
  local key, fence = r.stdout:match("^(%S+) (%d+)\n$")
  T.like(key or "", "^" .. name:gsub("%p", "%%%0") .. "/%x+$", "BATON_LOCK_KEY is name/<lease hex>")
  T.ok(tonumber(fence or "0") > 0, "BATON_LOCK_FENCE is a revision")
  T.is(assert(e:get(name .. "/", { prefix = true })).count, 0, "the lock is released after CMD")
  local r2 = assert(baton.exec { bin, "lock", name, "--", "sh", "-c", 'echo "$BATON_LOCK_FENCE"', timeout = 30 })
  T.ok(tonumber(r2.stdout) > tonumber(fence or "0"), "the next holder's fence is larger")
end

-- 4. SIGTERM or SIGINT to baton lock: passed on to CMD, lock released, and
-- baton exits with CMD's status, as documented: 0 when CMD handles the
-- signal and exits 0, 128 + N when the signal ends CMD.
for _, case in ipairs {
  { sig = "SIGTERM", trap = "TERM", tag = "d", code = 0, what = "CMD handled it and exited 0" },
  { sig = "SIGINT", trap = "INT", tag = "d2", code = 3, what = "CMD handled it and exited 3" },
  { sig = "SIGINT", tag = "d3", code = 130, what = "CMD died of it: 128 + 2, as a shell says" },
} do
  local name = N .. "/" .. case.tag
  local got = tmp .. "/sig-" .. case.tag
  local script = case.trap
    and ("trap 'echo got > " .. got .. "; exit " .. case.code .. "' " .. case.trap .. "; ")
    or "" -- (sh dies of SIGINT: it is not interactive and set no trap)
  local bl = start("baton-" .. case.tag, BATON .. " lock " .. q(name) .. " -- sh -c " ..
                   q(script .. "touch " .. got .. ".up; while :; do sleep 0.1; done"))
  T.ok(wait_for(got .. ".up", nil, 20), case.sig .. ": CMD is running under the lock")
  bl:kill(case.sig)
  local r = bl:wait(20)
  T.is(r and r.code, case.code, case.sig .. ": baton exits with CMD's status (" .. case.what .. ")")
  if case.trap then T.ok(wait_for(got, "got", 5), case.sig .. ": CMD got it") end
  T.is(assert(e:get(name .. "/", { prefix = true })).count, 0, case.sig .. ": the lock was released")
end

-- 4b. A signal while baton still waits for the lock: exit 128 + N.
do
  local name = N .. "/d4"
  local s = assert(baton.session { ttl = 10 })
  local m = baton.mutex(s, name)
  assert(m:lock())
  local bl, _, berr = start("baton-d4", BATON .. " lock " .. q(name) .. " -- true")
  baton.sleep(1)
  bl:kill("SIGINT")
  local r = bl:wait(20)
  T.is(r and r.code, 130, "SIGINT while waiting for the lock: exit 130")
  T.is(read(berr), "", "quietly")
  m:unlock()
  s:close()
end

-- 5. The lock is lost while CMD runs: CMD gets SIGTERM, baton exits 1.
do
  local name = N .. "/e"
  local got = tmp .. "/term-e"
  local bl, _, berr = start("baton-e", BATON .. " lock " .. q(name) .. " --ttl 5 -- sh -c " ..
                   q("trap 'echo term > " .. got .. "; exit 0' TERM; touch " .. got .. ".up; while :; do sleep 0.1; done"))
  T.ok(wait_for(got .. ".up", nil, 20), "CMD is running under the lock")
  local kv = assert(e:get(name .. "/", { prefix = true })).kvs[1]
  assert(e:lease(kv.lease):revoke()) -- the lease is gone as if it expired
  local r = bl:wait(20)
  T.is(r and r.code, 1, "baton exits 1 when the lock is lost")
  T.like(read(berr), "^baton: lock " .. name:gsub("%p", "%%%0") .. " lost: ", "and says so in one line")
  T.ok(wait_for(got, "term", 5), "CMD got SIGTERM")
end

-- 6. Elections, both directions.
do
  local name = N .. "/el"
  local obs, oout = start("ectl-l", ETCDCTL .. " elect -l " .. q(name))
  local s = assert(baton.session { ttl = 10 })
  local el = baton.election(s, name)
  assert(el:campaign("from-baton"))
  T.ok(wait_for(oout, "from%-baton", 20), "etcdctl elect -l prints a baton campaign's value")
  T.ok(read(oout):find(el.key, 1, true), "and its key")
  assert(el:proclaim("proclaimed"))
  T.ok(wait_for(oout, "proclaimed", 20), "etcdctl elect -l prints a baton proclaim")
  obs:kill("SIGTERM")
  obs:wait(10)
  el:resign()
  s:close()

  local name2 = N .. "/el2"
  local ectl = start("ectl-e", ETCDCTL .. " elect " .. q(name2) .. " from-etcdctl")
  local bobs, bout = start("baton-l", BATON .. " elect -l " .. q(name2))
  T.ok(wait_for(bout, "from%-etcdctl", 20), "baton elect -l prints what etcdctl elect set")
  ectl:kill("SIGTERM")
  ectl:wait(10)
  bobs:kill("SIGTERM")
  local lr = bobs:wait(10)
  T.is(lr and lr.code, 0, "baton elect -l exits 0 on SIGTERM")

  local name3 = N .. "/el3"
  local be, beout = start("baton-e3", BATON .. " elect " .. q(name3) .. " from-cli --ttl 10")
  T.ok(wait_for(beout, "from%-cli", 20), "baton elect prints the leader once elected")
  local lines = {}
  for l in read(beout):gmatch("[^\n]+") do lines[#lines + 1] = l end
  T.like(lines[1] or "", "^" .. name3:gsub("%p", "%%%0") .. "/%x+$", "first line: the leader key")
  T.is(lines[2], "from-cli", "second line: the proposal")
  local eo, eout = start("ectl-l3", ETCDCTL .. " elect -l " .. q(name3))
  T.ok(wait_for(eout, "from%-cli", 20), "etcdctl elect -l sees baton elect's leader")
  eo:kill("SIGTERM")
  eo:wait(10)
  be:kill("SIGTERM")
  local er = be:wait(10)
  T.is(er and er.code, 0, "baton elect resigns and exits 0 on SIGTERM")
  T.is(assert(e:get(name3 .. "/", { prefix = true })).count, 0, "its key is gone")
end

-- 7. Bad input.
do
  local function run(...)
    local args = { bin, ... }
    args.timeout = 20
    return assert(baton.exec(args))
  end
  local r = run("lock")
  T.is(r.code, 2, "lock without NAME: usage error")
  T.like(r.stderr, "^baton: lock: needs a NAME\n", "says so")
  r = run("lock", N .. "/x")
  T.is(r.code, 2, "lock without a command: usage error")
  T.like(r.stderr, "^baton: lock: no command given\n", "says so")
  r = run("lock", "", "--", "true")
  T.is(r.code, 2, "empty NAME: usage error")
  T.like(r.stderr, "NAME must not be empty", "says so")
  r = run("lock", N .. "/x", "--ttl", "zero", "--", "true")
  T.is(r.code, 2, "a bad --ttl: usage error")
  r = run("lock", N .. "/x", "--", "/nonexistent/cmd")
  T.is(r.code, 1, "a command that cannot run: exit 1")
  T.like(r.stderr, "cannot run /nonexistent/cmd: ENOENT", "says why")
  r = run("--endpoints", "http://127.0.0.1:1", "lock", N .. "/x", "--", "true")
  T.is(r.code, 1, "unreachable etcd: exit 1")
  T.like(r.stderr, "^baton: lock [^\n]*ECONNREFUSED: etcd http://127%.0%.0%.1:1: connection refused\n$",
         "one line naming the endpoint")
  r = run("elect", N .. "/y")
  T.is(r.code, 2, "elect without PROPOSAL: usage error")
end

assert(baton.exec { "rm", "-rf", tmp })
T.done()
