-- Clock skew (lua/baton/node/clock.lua): nodes whose wall clocks are wrong,
-- made with libfaketime (wall clock shifted, monotonic clock untouched, as
-- on a real machine with a bad clock).
--   1. three nodes, one 2 s fast: its correction is +2 s and the others'
--      0, it warns, and it never starts an instant early by real time;
--   2. a node 2 s slow takes the instants it ranks first for;
--   3. a fast leader: the others stay at 0, the leader is the one flagged;
--   4. a lone node knows its clock at once;
--   5. with no leader answering, a node waits 2 x TTL, warns and goes on.
local T = require "tap"
local nodes = require "lib.nodes"
local putil = require "baton.policies.util"
local json = baton.json

local FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
local probe = io.open(FAKETIME_LIB)
if not probe then return T.skip_all("libfaketime is not installed (tools/deps.sh installs it)") end
probe:close()
-- (Under `make asan` baton is built with AddressSanitizer, which refuses to
-- start when another library is preloaded before its runtime unless told.)
local PRELOAD = ("ASAN_OPTIONS=%sverify_asan_link_order=0 LD_PRELOAD=%s"):format(
  os.getenv("ASAN_OPTIONS") and (os.getenv("ASAN_OPTIONS") .. ":") or "", FAKETIME_LIB)
local function skewed(secs)
  return ("%s FAKETIME=%s FAKETIME_DONT_FAKE_MONOTONIC=1"):format(PRELOAD,
    (secs >= 0 and "+" or "") .. tostring(secs))
end

-- libfaketime leaves /dev/shm/faketime_shm_<pid> and sem.faketime_sem_<pid>
-- behind for each faked process that is killed (the pool kills idle
-- workers), and a later process with that pid fails to start: note the pids
-- of the skewed nodes and of their workers, and remove their files at the
-- end, once those processes are gone.
local faked, tracking = {}, true
local function track(C, name)
  local pid = C:pid(name)
  faked[pid] = true
  baton.go(function()
    while tracking and C.nodes[name] and C.nodes[name].pid == pid do
      local r = baton.exec { "pgrep", "-P", tostring(pid) }
      for child in (r and r.stdout or ""):gmatch("%d+") do faked[tonumber(child)] = true end
      baton.sleep(0.2)
    end
  end)
end
local function clean_faked()
  tracking = false
  local pids = {}
  for pid in pairs(faked) do pids[#pids + 1] = pid end
  table.sort(pids)
  T.note("skewed processes (their libfaketime files removed): " .. table.concat(pids, " "))
  for _, pid in ipairs(pids) do
    local alive = baton.exec { "kill", "-0", tostring(pid) }
    if not alive or alive.code ~= 0 then
      os.remove("/dev/shm/faketime_shm_" .. pid)
      os.remove("/dev/shm/sem.faketime_sem_" .. pid)
    end
  end
end

-- The real time of a monotonic reading of this (unfaked) process or any
-- other on the machine: CLOCK_MONOTONIC is the same for all of them.
local mono_base = baton.now() - baton.monotime()
local function real_of(mono) return mono_base + mono end

local TOL = 0.05 -- the bound on loopback

-- A job that records, per instant, the node and the monotonic time at which
-- the run started (its own baton.now() is faked on a skewed node).
local function job_source(out)
  return ([[
return {
  schedule = "* * * * * *",
  timeout = 10,
  run = function(ctx)
    local m = baton.monotime()
    assert(ctx:put_fenced(%q .. string.format("%%d", ctx.fire),
                          baton.json.encode { node = ctx.node, mono = m }))
  end,
}
]]):format(out)
end

local function node_infos(C)
  local r = C:cli("nodes", "--json")
  local by = {}
  if r.code ~= 0 then return by end
  for _, n in ipairs(json.decode(r.stdout) or {}) do by[n.name] = n end
  return by
end

local function clock_of(C, name)
  return (node_infos(C)[name] or {}).clock or {}
end

local function known(C, names, secs)
  return nodes.wait(secs or 15, function()
    local by = node_infos(C)
    for _, n in ipairs(names) do
      if not (by[n] and by[n].clock and by[n].clock.known) then return false end
    end
    return by
  end)
end

-- Waits (up to secs) until each named node's correction is within TOL of
-- its expected value; returns the last infos either way.
local function settled(C, want, secs)
  local last
  nodes.wait(secs or 10, function()
    last = node_infos(C)
    for n, c in pairs(want) do
      local k = last[n] and last[n].clock
      if not (k and k.known and type(k.correction) == "number"
              and math.abs(k.correction - c) <= TOL) then return false end
    end
    return true
  end)
  return last
end

local function show(infos, name)
  local k = (infos[name] or {}).clock or {}
  return ("%s: correction %s offset %s error %s ref %s skewed %s"):format(name,
    tostring(k.correction), tostring(k.offset), tostring(k.error), tostring(k.ref), tostring(k.skewed))
end

local function near(infos, name, want, what)
  local k = (infos[name] or {}).clock or {}
  local ok = type(k.correction) == "number" and math.abs(k.correction - want) <= TOL
  T.ok(ok, ("%s (%s)"):format(what, show(infos, name)))
  T.note("measured " .. show(infos, name))
  return ok
end

local function leader_is(C, name, secs)
  return nodes.wait(secs or 10, function()
    local r = C:cli("leader")
    return r.code == 0 and r.stdout == name .. "\n"
  end)
end

-- {fire = {node=, real=}} from the job's records under out.
local function starts(C, out)
  local r = assert(C.e:get(out, { prefix = true }))
  local by = {}
  for _, kv in ipairs(r.kvs) do
    local fire = tonumber(kv.key:sub(#out + 1))
    local v = json.decode(kv.value)
    if fire and v then by[fire] = { node = v.node, real = real_of(v.mono) } end
  end
  return by
end

-- The node of names that the default policy ranks first for job at fire.
local function rank0(job, fire, names)
  local list = {}
  for _, n in ipairs(names) do list[#list + 1] = { name = n } end
  local key = putil.instant_key({ name = job }, fire)
  for _, n in ipairs(list) do
    if putil.rank_of(key, list, n) == 0 then return n.name end
  end
end

---------------------------------------------------------------------------
-- 1. Three nodes, n3 two seconds fast.
local C = nodes.new("clock")
local OUT = C.P .. "out/"
local rev = C:put_job("tick", job_source(OUT))
C:start("n1", 5)
T.ok(leader_is(C, "n1"), "n1 leads")
C:start("n2", 5)
T.ok(known(C, { "n1", "n2" }), "n1 and n2 know their clocks")
C:start("n3", 5, nil, skewed(2))
track(C, "n3")
T.ok(known(C, { "n1", "n2", "n3" }), "n3 knows its clock")
local t_known = baton.now()
local infos = settled(C, { n1 = 0, n2 = 0, n3 = 2 })
near(infos, "n3", 2, "the fast node's correction is +2 s")
near(infos, "n1", 0, "the leader's correction is 0")
near(infos, "n2", 0, "the other node's correction is 0")
local k3 = infos.n3 and infos.n3.clock or {}
T.is(k3.skewed, true, "the fast node is flagged as skewed")
T.is(k3.ref, "n1", "measured against the leader")
T.ok(type(k3.error) == "number" and k3.error >= 0 and k3.error <= TOL,
     "with an error bound within 50 ms (" .. tostring(k3.error) .. ")")
T.is((infos.n2 and infos.n2.clock or {}).skewed, false, "the others are not")
T.is(infos.n3 and infos.n3.max_skew, 0.5, "max_skew defaults to 0.5 s")
T.ok(nodes.wait(5, function() return C:log("n3"):find("clock skew exceeds --max-skew", 1, true) end),
     "the fast node's log warns")
T.like(C:log("n3"):match("[^\n]*clock skew exceeds[^\n]*") or "", "offset", "with the offset")
T.unlike(C:log("n2"), "clock skew exceeds", "the other node's log does not")
local tbl = C:cli("nodes").stdout
T.note("baton nodes:\n" .. tbl)
T.like(tbl, "OFFSET", "baton nodes has an OFFSET column")
local function cell(row)
  local c, err, mark = (row or ""):match("([+-]%d+%.%d%d%d)s±(%d+%.%d%d%d)(!?)$")
  return tonumber(c), tonumber(err), mark
end
local c3, e3, m3 = cell(tbl:match("\nn3 [^\n]*"))
T.ok(c3 and math.abs(c3 - 2) <= TOL and e3 <= TOL and m3 == "!", "showing n3 at +2 s, marked")
local c2, e2, m2 = cell(tbl:match("\nn2 [^\n]*"))
T.ok(c2 and math.abs(c2) <= TOL and e2 <= TOL and m2 == "", "and n2 near 0, unmarked")

-- No run starts early by real time, on any node; the fast node ran some.
assert(C:loaded("tick", rev))
nodes.wait(30, function()
  local n = 0
  for fire, s in pairs(starts(C, OUT)) do
    if s.node == "n3" and fire > t_known + 1 then n = n + 1 end
  end
  return n >= 3
end)
local early, on3, worst = {}, 0, -math.huge
for fire, s in pairs(starts(C, OUT)) do
  if fire > t_known + 1 then
    if s.node == "n3" then on3 = on3 + 1 end
    local by = fire - s.real
    if s.node == "n3" and by > worst then worst = by end
    if by > 0.1 then early[#early + 1] = ("%d on %s %.3f s early"):format(fire, s.node, by) end
  end
end
if not T.ok(on3 >= 3, "the fast node ran instants (" .. on3 .. ")") then
  local all, recs = starts(C, OUT), {}
  for _, rec in ipairs(C:records("tick")) do
    if type(rec.fire) == "number" and rec.fire > t_known + 1 then recs[#recs + 1] = rec end
  end
  table.sort(recs, function(a, b) return a.fire < b.fire end)
  for _, rec in ipairs(recs) do
    local st = all[rec.fire]
    T.diag(("%d: ranked first %s, claimed by %s (%s%s), started %s"):format(rec.fire,
      rank0("tick", rec.fire, { "n1", "n2", "n3" }), tostring(rec.node), tostring(rec.state),
      rec.error and rec.error ~= json.null and (": " .. tostring(rec.error)) or "",
      st and ("%+.3f s"):format(st.real - rec.fire) or "(no record from the job)"))
  end
  T.diag("n3.log:\n" .. C:log("n3"):sub(-4000))
end
T.is(#early, 0, "no run started more than 0.1 s before its instant " .. table.concat(early, "; "))
T.note(("the fast node's runs started at least %.3f s after their instants"):format(-worst))

---------------------------------------------------------------------------
-- 2. n3 goes, n4 comes two seconds slow (with --max-skew 3: not flagged).
C:stop("n3")
C:start("n4", 5, "--max-skew 3", skewed(-2))
track(C, "n4")
T.ok(known(C, { "n1", "n2", "n4" }), "the slow node knows its clock")
infos = settled(C, { n1 = 0, n2 = 0, n4 = -2 })
near(infos, "n4", -2, "the slow node's correction is -2 s")
near(infos, "n2", 0, "the other node's correction stays 0")
T.is(infos.n4 and infos.n4.max_skew, 3, "--max-skew 3 is published")
T.is((infos.n4 and infos.n4.clock or {}).skewed, false, "within --max-skew 3: not flagged")
local from = baton.now() + 1
local won, ranked = 0, 0
nodes.wait(40, function()
  won, ranked = 0, 0
  for fire, s in pairs(starts(C, OUT)) do
    if fire > from and rank0("tick", fire, { "n1", "n2", "n4" }) == "n4" then
      ranked = ranked + 1
      if s.node == "n4" then won = won + 1 end
    end
  end
  return ranked >= 4
end)
T.ok(ranked >= 3 and won >= math.ceil(ranked / 2),
     ("the slow node took the instants it ranks first for (%d of %d)"):format(won, ranked))
T.unlike(C:log("n4"), "clock skew exceeds", "and did not warn")
C:destroy()

---------------------------------------------------------------------------
-- 3. The leader is the fast one: the others stay at 0, the leader is flagged.
local L = nodes.new("clockL")
L:start("s1", 5, nil, skewed(2))
track(L, "s1")
T.ok(leader_is(L, "s1"), "the fast node s1 leads")
L:start("s2", 5)
T.ok(known(L, { "s1", "s2" }), "s1 and s2 know their clocks")
L:start("s3", 5)
T.ok(known(L, { "s1", "s2", "s3" }), "s3 knows its clock")
infos = settled(L, { s1 = 2, s2 = 0, s3 = 0 })
near(infos, "s1", 2, "the fast leader's correction is +2 s")
near(infos, "s2", 0, "s2's correction is 0")
near(infos, "s3", 0, "s3's correction is 0")
local o2 = (infos.s2 and infos.s2.clock or {}).offset
T.ok(type(o2) == "number" and math.abs(o2 + 2) <= TOL,
     "s2's offset against the leader is -2 s (" .. tostring(o2) .. ")")
T.is((infos.s1 and infos.s1.clock or {}).skewed, true, "the leader is flagged")
T.is((infos.s3 and infos.s3.clock or {}).skewed, false, "s3 is not")
T.ok(nodes.wait(5, function() return L:log("s1"):find("clock skew exceeds --max-skew", 1, true) end),
     "the leader's log warns")
T.unlike(L:log("s3"), "clock skew exceeds", "s3's log does not")
L:destroy()

---------------------------------------------------------------------------
-- 4. A lone node knows its clock at once: its first instant is not held
-- back (the wait for an unknown clock is 2 x TTL = 10 s here).
local Z = nodes.new("clock1")
local ZOUT = Z.P .. "out/"
Z:put_job("tick", job_source(ZOUT))
local z0 = baton.monotime()
Z:start("z1", 5)
local first = nodes.wait(10, function()
  local best
  for _, s in pairs(starts(Z, ZOUT)) do if not best or s.real < best then best = s.real end end
  return best
end)
T.ok(first and first - real_of(z0) < 3,
     ("the lone node ran its first instant %.2f s after it started"):format(first and first - real_of(z0) or -1))
local kz = clock_of(Z, "z1")
T.ok(kz.known == true and kz.correction == 0 and kz.ref == "z1",
     "it knows its clock: correction 0, its own reference")
T.unlike(Z:log("z1"), "clock offset unknown", "no warning")
Z:destroy()

---------------------------------------------------------------------------
-- 5. Nobody answers (the election is held by something that is not a
-- node): the node waits 2 x TTL for its clock, warns, then runs its jobs.
local U = nodes.new("clockU")
local UOUT = U.P .. "out/"
U:put_job("tick", job_source(UOUT))
local s = assert(baton.session { ttl = 5 })
assert(baton.election(s, U.P .. "election"):campaign("ghost"))
local u0 = baton.monotime()
U:start("u1", 2)
local warned = nodes.wait(12, function()
  return U:log("u1"):find("clock offset unknown", 1, true) and baton.monotime()
end)
T.ok(warned and warned - u0 >= 3.5,
     ("the node warns that its clock offset is unknown after 2 x TTL (%.2f s)"):format(warned and warned - u0 or -1))
first = nodes.wait(5, function()
  local best
  for _, st in pairs(starts(U, UOUT)) do if not best or st.real < best then best = st.real end end
  return best
end)
T.ok(first and first - real_of(u0) >= 3.5,
     ("and runs its first instant after that (%.2f s)"):format(first and first - real_of(u0) or -1))
T.is(clock_of(U, "u1").known, false, "its published clock stays unknown")
U:destroy()
s:close()

---------------------------------------------------------------------------
-- 6. Clocks that step while the nodes run (an NTP step, a date by hand):
-- r2's own clock jumps 2 s ahead, later the leader r1's jumps 2 s back. No
-- node may start an instant early meanwhile: a node's own step does not
-- move its corrected clock, and the mix of samples taken before and after
-- another clock's step may delay a node, never hurry it.
local R = nodes.new("clockR")
local ROUT = R.P .. "out/"
local files = {}
local function stepping(name)
  files[name] = R.dir .. "/" .. name .. ".faketime"
  local f = assert(io.open(files[name], "w")); f:write("+0\n"); f:close()
  return ("%s FAKETIME_TIMESTAMP_FILE=%s FAKETIME_CACHE_DURATION=1 "
          .. "FAKETIME_DONT_FAKE_MONOTONIC=1"):format(PRELOAD, files[name])
end
local function step(name, to)
  local f = assert(io.open(files[name], "w")); f:write(to .. "\n"); f:close()
end
local rrev = R:put_job("tick", job_source(ROUT))
R:start("r1", 5, nil, stepping("r1"))
track(R, "r1")
T.ok(leader_is(R, "r1"), "r1 leads")
R:start("r2", 5, nil, stepping("r2"))
track(R, "r2")
R:start("r3", 5)
R:start("r4", 5)
T.ok(known(R, { "r1", "r2", "r3", "r4" }) and R:loaded("tick", rrev), "four nodes know their clocks")
local r0 = baton.now()
step("r2", "+2")
baton.sleep(8)
step("r1", "-2")
baton.sleep(10)
step("r1", "+0")
step("r2", "+0")
-- (longer than the 8 samples a node keeps, taken 3 s apart: a sample from
-- before the leader's clock stepped back must not come to count)
baton.sleep(28)
local rearly, rn = {}, 0
for fire, st in pairs(starts(R, ROUT)) do
  if fire > r0 then
    rn = rn + 1
    if fire - st.real > 0.1 then
      rearly[#rearly + 1] = ("%d on %s %.3f s early"):format(fire, st.node, fire - st.real)
    end
  end
end
T.ok(rn >= 20, "instants ran while clocks stepped (" .. rn .. ")")
T.is(#rearly, 0, "none started more than 0.1 s early: " .. table.concat(rearly, "; "))
R:destroy()

---------------------------------------------------------------------------
-- Bad input.
local B = nodes.new("clockB")
local bad = B:cli("node", "--name", "b1", "--max-skew", "soon")
T.is(bad.code, 2, "--max-skew that is not a number: usage error")
T.like(bad.stderr, "%-%-max%-skew needs a positive number", "saying what it needs")
T.like(bad.stderr, "usage: baton node [^\n]*%-%-max%-skew S", "the usage names --max-skew")
B:destroy()

clean_faked()
T.done()
