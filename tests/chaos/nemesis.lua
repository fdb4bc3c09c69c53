-- baton eval tests/chaos/nemesis.lua: the body of one nemesis run, started by
-- tests/chaos/run (which owns the etcd cluster, the run directory and the
-- cleanup). Not faked, talking to etcd directly (BATON_ENDPOINTS). It:
--   1. starts one proxy per node (build/chaos/proxy, 3 ports, one per
--      member), the observer (observer.lua), puts the jobs (jobs.lua) and
--      starts the nodes, each under libfaketime and through its own proxy;
--   2. draws the fault schedule from the seed (schedule.json) and plays it,
--      logging what it really did and when (faults.jsonl, monotonic times);
--      meanwhile it pushes queue tasks at a steady rate (queue.jsonl),
--      every fifth a poisoned one (a NUL byte in its value: it must be
--      recorded failed and never run);
--   3. heals everything, waits a quiet period, dumps the run records and
--      the coordination keys (records.jsonl, state.json), stops the nodes,
--      lists processes left behind, and writes meta.json for the checker.
-- Configuration comes from the environment (see tests/chaos/run):
-- CHAOS_DIR CHAOS_SEED CHAOS_DURATION CHAOS_QUIET CHAOS_NODES CHAOS_TTL
-- CHAOS_PROXY CHAOS_ETCD CHAOS_ETCD_DIR CHAOS_ROOT BATON_ENDPOINTS BATON_PREFIX.
local ROOT = assert(os.getenv("CHAOS_ROOT"), "CHAOS_ROOT is not set")
package.path = ROOT .. "/tests/chaos/?.lua;" .. ROOT .. "/tests/lua/lib/?.lua;" .. package.path
local files = require "files"
local jobs = require "jobs"
local json = baton.json
local ffi = require "ffi"
ffi.cdef [[ int kill(int pid, int sig); ]]
local SIG = { HUP = 1, KILL = 9, USR1 = 10, USR2 = 12, TERM = 15, CONT = 18, STOP = 19 }

local D = assert(os.getenv("CHAOS_DIR"))
local SEED = assert(tonumber(os.getenv("CHAOS_SEED")))
local DURATION = tonumber(os.getenv("CHAOS_DURATION")) or 300
local QUIET = tonumber(os.getenv("CHAOS_QUIET")) or 15
local NN = tonumber(os.getenv("CHAOS_NODES")) or 4
local TTL = tonumber(os.getenv("CHAOS_TTL")) or 3
local PROXY = assert(os.getenv("CHAOS_PROXY"))
local ETCD = assert(os.getenv("CHAOS_ETCD"))
local EDIR = assert(os.getenv("CHAOS_ETCD_DIR"))
local URLS = assert(os.getenv("BATON_ENDPOINTS"))
local P = assert(os.getenv("BATON_PREFIX"))
local FT_LIB = os.getenv("CHAOS_FAKETIME_LIB") or "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
local BIN = baton._exe
local e = baton.etcd

local FAULTS_FROM = 5   -- s after t0: the first fault
local GRACE_WAIT = 10   -- s node-term-grace waits for a `graceful` run to start on its node
local GRACE_AFTER = 0.3 -- s after that run's start line: the SIGTERM
local START_MARGIN = 3  -- s after t0: the checked window starts
local END_MARGIN = 10   -- s before the dump: the checked window ends (runs settle)

---------------------------------------------------------------------------
-- files and logs

local function append(path, t)
  local f = assert(io.open(path, "a"))
  f:write(json.encode(t, { nul = "replace" }) .. "\n")
  f:close()
end

local function write_file(path, s)
  local f = assert(io.open(path .. ".tmp", "w"))
  f:write(s)
  f:close()
  assert(os.rename(path .. ".tmp", path))
end

local T0 = baton.monotime() -- until the nodes are up; then the real t0

local function say(fmt, ...)
  io.stdout:write(("chaos: %+6.1f s  "):format(baton.monotime() - T0), fmt:format(...), "\n")
  io.stdout:flush()
end

-- One line of faults.jsonl: what the nemesis did, when (monotonic).
local function flog(t)
  t.mono = t.mono or baton.monotime()
  t.t = t.mono - T0
  append(D .. "/faults.jsonl", t)
end

local function pidlog(what, name, pid)
  local f = assert(io.open(D .. "/pids", "a"))
  f:write(what, " ", name, " ", tostring(pid), "\n")
  f:close()
end

local function signal(pid, sig) return ffi.C.kill(pid, SIG[sig]) == 0 end

-- A program with its stdout and stderr appended to logfile.
local function spawn_logged(argv, logfile, env)
  local cmd = { "sh", "-c", 'log=$1; shift; exec "$@" >>"$log" 2>&1', "sh", logfile }
  for _, a in ipairs(argv) do cmd[#cmd + 1] = tostring(a) end
  cmd.env, cmd.stdio = env, "null"
  return assert(baton.spawn(cmd))
end

local function harness(...)
  local argv = { ETCD, ... }
  argv.timeout = 90
  local r, err = baton.exec(argv)
  if not r then return nil, err end
  if r.code ~= 0 then return nil, (r.stderr:gsub("%s+$", "")) end
  return r.stdout
end

---------------------------------------------------------------------------
-- the fault schedule

local KINDS = {
  { "node-kill", 3 }, { "node-stop", 2 }, { "node-stall", 2 }, { "node-term", 1.5 },
  { "node-term-grace", 2 }, { "proxy-freeze", 3 },
  { "proxy-reset", 1.5 }, { "skew", 1.5 },
  { "etcd-leader-kill", 1 }, { "etcd-follower-kill", 0.75 },
  { "etcd-leader-stop", 1 }, { "etcd-follower-stop", 0.75 },
}

-- The faults of seed between from and to (s after t0), drawn so that they
-- overlap: a fault every 1-7 s, each lasting up to 20 s. A node has one
-- node or proxy fault at a time and at most max(1, nodes - 2) nodes have
-- one at once; one node at a time is skewed; etcd keeps quorum except when
-- a second member goes down while one is (a quarter of those draws); a
-- third member never does. Nothing depends on the run, so a seed always
-- gives the same schedule (the members "leader" and "follower" name are
-- resolved when the fault happens).
local function plan(seed, from, to, nn)
  math.randomseed(seed)
  local R = math.random
  local function U(a, b) return a + (b - a) * R() end
  local total = 0
  for _, k in ipairs(KINDS) do total = total + k[2] end
  local function pick_kind()
    local x = R() * total
    for _, k in ipairs(KINDS) do
      x = x - k[2]
      if x <= 0 then return k[1] end
    end
    return KINDS[#KINDS][1]
  end
  local node_busy, etcd_busy, skew_busy = {}, {}, 0
  local faults, t = {}, from - 1
  while true do
    t = t + U(1, 7)
    if t >= to - 1 then break end
    local kind = pick_kind()
    local f = { at = t, kind = kind }
    if kind:match("^node") or kind:match("^proxy") then
      local free, busy = {}, 0
      for i = 1, nn do
        if (node_busy[i] or 0) <= t then free[#free + 1] = i else busy = busy + 1 end
      end
      if #free == 0 or busy >= math.max(1, nn - 2) then
        f = nil
      else
        f.node = free[R(#free)]
        if kind == "node-kill" then f.down = U(1, 6)
        elseif kind == "node-stop" or kind == "node-stall" then
          f.down = R() < 0.5 and U(0.5, 2.5) or U(3.5, 8)
        elseif kind == "node-term" or kind == "node-term-grace" then f.down = U(1, 4)
        elseif kind == "proxy-freeze" then f.down = R() < 0.3 and U(0.5, 2.5) or U(3.5, 8)
        else f.down = 0 end
        f.down = math.min(f.down, to - t)
        -- (a stopped node takes up to 10 s to end its runs; a restart may
        -- wait for the old lease to expire; node-term-grace first waits up
        -- to GRACE_WAIT s for a graceful run on the node)
        node_busy[f.node] = t + f.down + (kind == "node-term" and 12 or kind == "node-kill" and 5
          or kind == "node-term-grace" and GRACE_WAIT + 12 or 1)
      end
    elseif kind == "skew" then
      if skew_busy > t then
        f = nil
      else
        f.node, f.offset, f.down = R(nn), R() < 0.5 and 2 or -2, math.min(U(8, 20), to - t)
        skew_busy = t + f.down + 1.5 -- libfaketime re-reads its file within a second
      end
    else
      local ongoing = 0
      for _, u in ipairs(etcd_busy) do if u > t then ongoing = ongoing + 1 end end
      if ongoing >= 2 or (ongoing == 1 and R() > 0.25) then
        f = nil
      else
        f.down = math.min(kind:match("kill") and U(2, 10) or U(1, 6), to - t)
        etcd_busy[#etcd_busy + 1] = t + f.down + (kind:match("kill") and 5 or 1)
      end
    end
    if f then faults[#faults + 1] = f end
  end
  for i, f in ipairs(faults) do f.n = i end
  return faults
end

---------------------------------------------------------------------------
-- nodes, proxies, members

local nodes, members = {}, {}
for i = 1, NN do
  nodes[i] = { i = i, name = "n" .. i, labelled = i % 2 == 1, clock = D .. "/clock/n" .. i,
               life = 0, busy = false }
end
for i = 1, 3 do members[i] = { i = i, down = false } end
local urls = {}
for u in URLS:gmatch("[^,]+") do urls[#urls + 1] = u end

local function start_proxy(n)
  local portfile = D .. "/proxies/" .. n.name .. ".ports"
  local argv = { PROXY, portfile }
  for _, u in ipairs(urls) do argv[#argv + 1] = (u:gsub("^http://", "")) end
  n.proxy = spawn_logged(argv, D .. "/proxies/" .. n.name .. ".log")
  pidlog("proxy", n.name, n.proxy.pid)
  for _ = 1, 100 do
    local s = files.read(portfile)
    if s and s:match("%d") then
      local eps = {}
      for port in s:gmatch("%d+") do eps[#eps + 1] = "http://127.0.0.1:" .. port end
      n.endpoints = table.concat(eps, ",")
      return
    end
    baton.sleep(0.05)
  end
  error("proxy of " .. n.name .. " did not start; see " .. D .. "/proxies/" .. n.name .. ".log")
end

-- (Under `make asan` baton is built with AddressSanitizer, which refuses to
-- run when another library is preloaded before it unless told otherwise.)
local ASAN = (os.getenv("ASAN_OPTIONS") and (os.getenv("ASAN_OPTIONS") .. ":") or "")
  .. "verify_asan_link_order=0"

local function node_env(n)
  return {
    ASAN_OPTIONS = ASAN,
    LD_PRELOAD = FT_LIB, FAKETIME_DONT_FAKE_MONOTONIC = "1", FAKETIME_TIMESTAMP_FILE = n.clock,
    FAKETIME_CACHE_DURATION = "1", BATON_LOG_FORMAT = "json",
    CHAOS_EXEC_LOG = D .. "/exec.jsonl", CHAOS_BEAT = ROOT .. "/tests/chaos/beat.lua",
    BATON_ENDPOINTS = false, BATON_PREFIX = false,
  }
end

local finishing = false
local bring_up

-- The part of file from byte offset on.
local function read_from(path, offset)
  local f = io.open(path)
  if not f then return "" end
  f:seek("set", offset)
  local s = f:read("*a")
  f:close()
  return s or ""
end

local function file_size(path)
  local f = io.open(path)
  if not f then return 0 end
  local n = f:seek("end")
  f:close()
  return n
end

-- Starts a life of node n. A watcher logs its end: whether it had started
-- (logged "node started") and its last log line. A life that ends without
-- anybody asking is started again: after it had started, that is a node
-- exiting by itself (the checker's violation 9); before, a refused start
-- (the name still held by a dead life's lease, etcd unreachable at start).
local function spawn_node(n)
  local argv = { BIN, "--endpoints", n.endpoints, "--prefix", P, "node", "--name", n.name,
                 "--ttl", TTL, "--history", 1000000 }
  if n.labelled then argv[#argv + 1] = "--labels"; argv[#argv + 1] = "role=x" end
  local logfile = D .. "/nodes/" .. n.name .. ".log"
  local offset = file_size(logfile)
  local p = spawn_logged(argv, logfile, node_env(n))
  local life = { p = p }
  n.p, n.pid, n.life, n.alive, n.expect_exit, n.cur = p, p.pid, n.life + 1, true, false, life
  local born = baton.monotime()
  pidlog("node", n.name, p.pid)
  flog { kind = "node-start", node = n.name, pid = p.pid, life = n.life }
  baton.go(function()
    local r = p:wait()
    if n.p ~= p then return end
    n.alive = false
    local seg = read_from(logfile, offset)
    local started = seg:find('"msg":"node started"', 1, true) ~= nil
    local last = ""
    for l in seg:gmatch("[^\n]+") do last = l end
    flog { kind = "node-exit", node = n.name, pid = p.pid, life = n.life, code = r.code,
           signal = r.signal, expected = n.expect_exit or nil, started = started,
           age = baton.monotime() - born, last_line = last:sub(1, 300) }
    if not n.expect_exit and not finishing and not life.starting then
      if started then
        say("%s exited by itself (code %s); starting it again", n.name, tostring(r.code))
      end
      baton.go(bring_up, n)
    end
  end)
  return p
end

-- Starts n until a life stays up for 2 s: a restart within the TTL of a
-- kill finds the name still held by the dead life's lease, and the node
-- refuses it; a start while etcd has no quorum times out.
function bring_up(n)
  for _ = 1, 60 do
    local p = spawn_node(n)
    local life = n.cur
    life.starting = true
    local r = p:wait(2)
    life.starting = false
    if not r then return true end
    flog { kind = "node-start-refused", node = n.name, life = n.life }
    baton.sleep(1)
  end
  say("%s did not come back up", n.name)
  return false
end

-- The pids of the process tree under pid (the node, its workers, their
-- children), pid first.
local function tree(pid)
  local r = baton.exec { "ps", "-e", "-o", "pid=,ppid=" }
  local kids = {}
  for p, pp in (r and r.stdout or ""):gmatch("(%d+)%s+(%d+)") do
    kids[pp] = kids[pp] or {}
    table.insert(kids[pp], p)
  end
  local out, stack = {}, { tostring(pid) }
  while #stack > 0 do
    local x = table.remove(stack)
    out[#out + 1] = tonumber(x)
    for _, k in ipairs(kids[x] or {}) do stack[#stack + 1] = k end
  end
  return out
end

-- The first start line of a `graceful` execution on node n written from
-- now on, within secs seconds (exec.jsonl, read as it grows), or nil.
local function graceful_start(n, secs)
  local path, offset = D .. "/exec.jsonl", file_size(D .. "/exec.jsonl")
  local by = baton.monotime() + secs
  while baton.monotime() < by do
    local s = read_from(path, offset)
    -- (only whole lines: a line being appended is read the next time)
    local whole = s:match("^.*\n") or ""
    offset = offset + #whole
    for l in whole:gmatch("[^\n]+") do
      if l:find('"graceful"', 1, true) then
        local ok, t = pcall(json.decode, l)
        if ok and type(t) == "table" and t.job == "graceful" and t.kind == "start" and t.node == n.name then
          return t
        end
      end
    end
    baton.sleep(0.05)
  end
end

local function leader()
  local out = harness("leader", EDIR)
  return out and tonumber(out:match("%d"))
end

---------------------------------------------------------------------------
-- faults

local active = 0

local function node_fault(f, n)
  local kind = f.kind
  if kind == "node-kill" then
    flog { kind = kind, phase = "begin", n = f.n, node = n.name, pid = n.pid }
    n.expect_exit = true
    signal(n.pid, "KILL")
    n.p:wait(10)
    say("kill -9 %s; back in %.1f s", n.name, f.down)
    baton.sleep(f.down)
    flog { kind = kind, phase = "end", n = f.n, node = n.name }
    bring_up(n)
  elseif kind == "node-stop" then
    local pids = tree(n.pid)
    flog { kind = kind, phase = "begin", n = f.n, node = n.name, pids = pids }
    for _, p in ipairs(pids) do signal(p, "STOP") end
    -- (a process started in between is stopped too)
    for _, p in ipairs(tree(n.pid)) do signal(p, "STOP") end
    say("SIGSTOP %s (%d processes) for %.1f s", n.name, #pids, f.down)
    baton.sleep(f.down)
    pids = tree(n.pid)
    flog { kind = kind, phase = "end", n = f.n, node = n.name, pids = pids }
    for _, p in ipairs(pids) do signal(p, "CONT") end
  elseif kind == "node-stall" then
    -- Only the node process (a stalled process, not a stalled machine):
    -- its runs go on, and must be fenced by their containment processes
    -- with no help from it; no allowance after SIGCONT.
    flog { kind = kind, phase = "begin", n = f.n, node = n.name, pid = n.pid }
    signal(n.pid, "STOP")
    say("SIGSTOP %s's node process only for %.1f s", n.name, f.down)
    baton.sleep(f.down)
    flog { kind = kind, phase = "end", n = f.n, node = n.name }
    signal(n.pid, "CONT")
  elseif kind == "node-term" or kind == "node-term-grace" then
    local target
    if kind == "node-term-grace" then
      -- SIGTERM during a run that finishes within the grace: the run is
      -- done and recorded with its own result, never run again.
      -- (no later than the end of the faults)
      local t = graceful_start(n, math.min(GRACE_WAIT, T0 + DURATION - QUIET - baton.monotime()))
      if not t or not n.alive then
        flog { kind = kind, phase = "skipped", n = f.n, node = n.name,
               why = n.alive and ("no graceful run started on it within %d s"):format(GRACE_WAIT)
                 or "the node is down" }
        say("%s: no graceful run on %s within %d s; skipped", kind, n.name, GRACE_WAIT)
        return
      end
      baton.sleep(math.max(0, t.mono + GRACE_AFTER - baton.monotime()))
      target = { job = t.job, id = t.id, fence = t.fence, attempt = t.attempt, start = t.mono,
                 into = baton.monotime() - t.mono }
    end
    flog { kind = kind, phase = "begin", n = f.n, node = n.name, pid = n.pid, target = target }
    n.expect_exit = true
    signal(n.pid, "TERM")
    local r = n.p:wait(20)
    if not r then
      flog { kind = "node-term-timeout", n = f.n, node = n.name, note = "no exit 20 s after SIGTERM; SIGKILL" }
      signal(n.pid, "KILL")
      n.p:wait(10)
    end
    say("SIGTERM %s%s (exited%s); back in %.1f s", n.name,
        target and (" %.2f s into %s/%s"):format(target.into, target.job, target.id) or "",
        r and "" or " only after SIGKILL", f.down)
    baton.sleep(f.down)
    flog { kind = kind, phase = "end", n = f.n, node = n.name }
    bring_up(n)
  elseif kind == "proxy-freeze" then
    flog { kind = kind, phase = "begin", n = f.n, node = n.name }
    signal(n.proxy.pid, "USR1")
    say("freeze %s's link to etcd for %.1f s", n.name, f.down)
    baton.sleep(f.down)
    flog { kind = kind, phase = "end", n = f.n, node = n.name }
    signal(n.proxy.pid, "HUP")
  elseif kind == "proxy-reset" then
    flog { kind = kind, phase = "begin", n = f.n, node = n.name }
    signal(n.proxy.pid, "USR2")
    say("reset %s's connections to etcd", n.name)
    flog { kind = kind, phase = "end", n = f.n, node = n.name }
  end
end

local function skew_fault(f, n)
  local off = ("%+d"):format(f.offset)
  flog { kind = "skew", phase = "begin", n = f.n, node = n.name, offset = f.offset }
  write_file(n.clock, off .. "\n")
  say("skew %s's clock %s s for %.1f s", n.name, off, f.down)
  baton.sleep(f.down)
  flog { kind = "skew", phase = "end", n = f.n, node = n.name }
  write_file(n.clock, "+0\n")
end

local function etcd_fault(f)
  local want_leader = f.kind:match("leader") ~= nil
  local l = leader()
  local m
  if want_leader then
    m = l and not members[l].down and members[l]
  else
    local cand = {}
    for i = 1, 3 do if not members[i].down and i ~= l then cand[#cand + 1] = members[i] end end
    m = cand[1] and cand[f.n % #cand + 1]
  end
  if not m then
    flog { kind = f.kind, phase = "skipped", n = f.n, why = want_leader and "no leader" or "no follower up" }
    say("%s: skipped (%s)", f.kind, want_leader and "no leader" or "no follower up")
    return
  end
  local kill = f.kind:match("kill") ~= nil
  m.down = kill and "killed" or "stopped"
  flog { kind = f.kind, phase = "begin", n = f.n, member = m.i, leader = l }
  local ok, err = harness(kill and "member-kill" or "pause", EDIR, tostring(m.i))
  flog { kind = f.kind, phase = "done", n = f.n, member = m.i, ok = ok and true or false, error = err }
  say("%s member %d (leader was %s) for %.1f s", kill and "kill -9" or "SIGSTOP", m.i, tostring(l), f.down)
  baton.sleep(f.down)
  flog { kind = f.kind, phase = "end", n = f.n, member = m.i }
  for try = 1, 5 do
    ok, err = harness(kill and "member-start" or "resume", EDIR, tostring(m.i))
    if ok then break end
    flog { kind = "member-restart-failed", member = m.i, try = try, error = err }
    baton.sleep(2)
  end
  m.down = false
end

local function play(f)
  active = active + 1
  baton.sleep(math.max(0, T0 + f.at - baton.monotime()))
  if f.kind == "skew" then
    skew_fault(f, nodes[f.node])
  elseif f.kind:match("^etcd") then
    etcd_fault(f)
  else
    local n = nodes[f.node]
    if n.busy or not n.alive then
      flog { kind = f.kind, phase = "skipped", n = f.n, node = n.name,
             why = n.busy and "the node is still under another fault" or "the node is down" }
    else
      n.busy = true
      node_fault(f, n)
      n.busy = false
    end
  end
  active = active - 1
end

-- Undoes whatever a fault left behind (none should, once they all ended).
local function heal()
  for _, n in ipairs(nodes) do
    if n.alive then for _, p in ipairs(tree(n.pid)) do signal(p, "CONT") end end
    signal(n.proxy.pid, "HUP")
    write_file(n.clock, "+0\n")
    if not n.alive then bring_up(n) end
  end
  for _, m in ipairs(members) do
    if m.down then
      harness(m.down == "killed" and "member-start" or "resume", EDIR, tostring(m.i))
      m.down = false
    end
  end
end

---------------------------------------------------------------------------
-- the run

for _, sub in ipairs { "nodes", "proxies", "clock", "jobs" } do
  assert(baton.exec { "mkdir", "-p", D .. "/" .. sub })
end
local faults = plan(SEED, FAULTS_FROM, DURATION - QUIET, NN)
write_file(D .. "/schedule.json", json.encode(faults) .. "\n")

for _, n in ipairs(nodes) do
  write_file(n.clock, "+0\n")
  start_proxy(n)
end

local observer = spawn_logged({ BIN, "eval", ROOT .. "/tests/chaos/observer.lua",
  D .. "/observer.jsonl", P, URLS }, D .. "/observer.log")
pidlog("observer", "observer", observer.pid)

local jobmeta = {}
for _, j in ipairs(jobs) do
  local file = D .. "/jobs/" .. j.name .. ".lua"
  write_file(file, j.source)
  local r = assert(baton.exec { BIN, "--endpoints", URLS, "--prefix", P, "job", "put", file,
                                "--name", j.name, timeout = 30 })
  assert(r.code == 0, "job put " .. j.name .. ": " .. r.stderr)
  local m = {}
  for k, v in pairs(j) do if k ~= "source" then m[k] = v end end
  jobmeta[#jobmeta + 1] = m
end

for _, n in ipairs(nodes) do spawn_node(n) end

-- Up: every node registered and every job loaded everywhere.
local ready_by = baton.monotime() + 60
while true do
  local nr = e:get(P .. "nodes/", { prefix = true, count_only = true })
  local sr = e:get(P .. "status/", { prefix = true, count_only = true })
  if nr and sr and nr.count == NN and sr.count == NN * #jobs then break end
  if baton.monotime() > ready_by then
    error(("the nodes did not come up within 60 s (nodes %s, job statuses %s); see %s/nodes/")
      :format(nr and nr.count or "?", sr and sr.count or "?", D))
  end
  baton.sleep(0.2)
end

T0 = baton.monotime()
local clock = { real = baton.now(), mono = baton.monotime() }
local meta = {
  seed = SEED, duration = DURATION, quiet = QUIET, ttl = TTL, prefix = P, endpoints = URLS,
  election_timeout = 1.0, t0 = T0, clock = clock, jobs = jobmeta, nodes = {},
  fault_end = T0 + DURATION - QUIET,
}
for _, n in ipairs(nodes) do
  meta.nodes[#meta.nodes + 1] = { name = n.name, labels = n.labelled and { role = "x" } or {},
                                  endpoints = n.endpoints }
end
write_file(D .. "/meta.json", json.encode(meta) .. "\n")
say("%d nodes up, %d jobs loaded; %d faults over %d s, then %d s quiet (seed %d)",
    NN, #jobs, #faults, DURATION - QUIET, QUIET, SEED)

local push_end = T0 + DURATION - END_MARGIN
baton.go(function()
  local seq = 0
  while baton.monotime() < push_end do
    seq = seq + 1
    -- (every fifth poisoned: a run cannot be given a NUL byte, docs/jobs.md)
    local poison = seq % 5 == 0
    local id = (poison and "p%05d" or "t%05d"):format(seq)
    local key = P .. "queue/orders/" .. id
    local m0 = baton.monotime()
    local value = poison and ("poison\0" .. seq) or json.encode { seq = seq }
    local r, err = e:txn { compare = { { key = key, target = "create", op = "==", value = 0 } },
                           success = { { put = { key = key, value = value } } } }
    append(D .. "/queue.jsonl", { id = id, mono = m0, done = baton.monotime(),
                                  ok = (r and r.succeeded) or false, poison = poison or nil,
                                  error = err and tostring(err) or nil })
    baton.sleep(math.max(0, m0 + 0.5 - baton.monotime()))
  end
end)

for _, f in ipairs(faults) do baton.go(play, f) end
baton.sleep(math.max(0, meta.fault_end - baton.monotime()))
while active > 0 do baton.sleep(0.2) end
heal()
local quiet_start = baton.monotime()
say("faults over; quiet for %d s", QUIET)
baton.sleep(QUIET)

-- The end: the records and coordination keys as the nodes left them.
local END = baton.monotime()
local recs = assert(e:get(P .. "runs/", { prefix = true }))
do
  local f = assert(io.open(D .. "/records.jsonl", "w"))
  for _, kv in ipairs(recs.kvs) do
    f:write(json.encode({ key = kv.key:sub(#P + 1), create_revision = kv.create_revision,
                          mod_revision = kv.mod_revision, value = kv.value }, { nul = "replace" }), "\n")
  end
  f:close()
end
local state = { revision = recs.revision }
for _, sub in ipairs { "running/", "inflight/", "active/", "queue/", "nodes/" } do
  local r = e:get(P .. sub, { prefix = true })
  local list = {}
  for _, kv in ipairs(r and r.kvs or {}) do
    list[#list + 1] = { key = kv.key:sub(#P + 1), create_revision = kv.create_revision,
                        lease = kv.lease }
  end
  state[sub:sub(1, -2)] = list
end

finishing = true
say("stopping the nodes")
for _, n in ipairs(nodes) do
  if n.alive then
    n.expect_exit = true
    signal(n.pid, "TERM")
  end
end
for _, n in ipairs(nodes) do
  if n.alive and not n.p:wait(20) then
    flog { kind = "node-stop-timeout", node = n.name, note = "no exit 20 s after SIGTERM; SIGKILL" }
    signal(n.pid, "KILL")
    n.p:wait(5)
  end
end

-- Whatever still runs with a node's faked clock outlived its node.
state.leftover = {}
local ps = baton.exec { "sh", "-c", [[
for d in /proc/[0-9]*; do
  if tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qxF "CHAOS_EXEC_LOG=$1/exec.jsonl"; then
    printf '%s %s\n' "${d#/proc/}" "$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null)"
  fi
done]], "sh", D }
for pid, cmd in (ps and ps.stdout or ""):gmatch("(%d+) ([^\n]*)") do
  state.leftover[#state.leftover + 1] = { pid = tonumber(pid), cmd = cmd }
  signal(tonumber(pid), "KILL")
end
if #state.leftover > 0 then say("%d processes outlived their nodes (killed)", #state.leftover) end
write_file(D .. "/state.json", json.encode(state) .. "\n")

signal(observer.pid, "TERM")
observer:wait(5)
for _, n in ipairs(nodes) do
  signal(n.proxy.pid, "TERM")
  n.proxy:wait(5)
end

meta.quiet_start, meta["end"] = quiet_start, END
meta.window = { from = T0 + START_MARGIN, to = END - END_MARGIN }
meta.clock_end = { real = baton.now(), mono = baton.monotime() }
write_file(D .. "/meta.json", json.encode(meta) .. "\n")
say("done")
