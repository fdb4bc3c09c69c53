-- Upgrades, with two installs of baton that differ in VERSION (`make install
-- VERSION=...` into two temporary roots), run from outside the source tree:
--
-- 1. Files replaced under a running node change nothing until it restarts:
--    a node runs from a copy of the old install; `make install` of the new
--    version over it (the program and every library file replaced), a
--    library module edited and another added; a run then starts in a fresh
--    worker and must report the old version and the old library. After a
--    restart, the new ones (so the check can see a difference).
-- 2. A rolling upgrade of a 3-node cluster: a job every second, the nodes
--    restarted one by one on the new version. `baton nodes` shows both
--    versions side by side meanwhile, no instant is missed or run twice,
--    and every run's worker has its node's version.
local T = require "tap"
local json = baton.json

local root = assert(os.getenv("BATON_ROOT"), "run me with tests/harness/run-tests")
local eps = assert(os.getenv("BATON_ENDPOINTS"))
local cli_bin = os.getenv("BATON_BIN") or (root .. "/bin/baton")
local stamp = tostring(baton.now()):gsub("%.", "")
local base = (os.getenv("BATON_TEST_TMP") or "/tmp") .. "/upgrade-" .. stamp
local e = baton.etcd

local function read(path)
  local f = io.open(path)
  local s = f and f:read("*a")
  if f then f:close() end
  return s
end

local function write(path, text)
  local f = assert(io.open(path .. ".tmp", "w"))
  f:write(text)
  f:close()
  assert(os.rename(path .. ".tmp", path))
end

local function wait(secs, fn)
  local deadline = baton.monotime() + secs
  while baton.monotime() < deadline do
    local v = fn()
    if v then return v end
    baton.sleep(0.1)
  end
end

local version = assert(read(root .. "/VERSION")):match("^%s*(.-)%s*$")
local OLD, NEW = version .. "+old", version .. "+new"

assert(baton.exec { "mkdir", "-p", base .. "/cwd" })
-- Programs run from here, without the suite's LUA_PATH or any BATON_LUADIR.
local ENV = { BATON_LUADIR = false, LUA_PATH = false }

-- (not with the flags and jobserver of the make that runs the suite)
local function install(dest, v)
  return baton.exec { "make", "-s", "--no-print-directory", "-C", root, "install",
                      "DESTDIR=" .. dest, "PREFIX=/usr/local", "VERSION=" .. v,
                      "INSTALL_BUILD=" .. base .. "/build", timeout = 240,
                      env = { MAKEFLAGS = false, MFLAGS = false, MAKELEVEL = false } }
end

local r = install(base .. "/a", OLD)
T.is(r.code, 0, "make install VERSION=" .. OLD)
r = install(base .. "/b", NEW)
if not T.is(r.code, 0, "make install VERSION=" .. NEW) then T.diag(r.stderr); return T.done() end
local function bin(tree) return base .. "/" .. tree .. "/usr/local/bin/baton" end
local function libdir(tree) return base .. "/" .. tree .. "/usr/local/share/baton/lua" end

local function cli(P, ...)
  local args = { cli_bin, "--endpoints", eps, "--prefix", P, ... }
  args.timeout = 30
  return assert(baton.exec(args))
end

-- A node from the program at path, in base/cwd, logging to base/NAME.log.
local function start(path, P, name)
  return assert(baton.spawn { "sh", "-c",
    ("exec %q --endpoints %q --prefix %q node --name %s --ttl 3 >>%s/%s.log 2>&1")
      :format(path, eps, P, name, base, name), cwd = base .. "/cwd", env = ENV, stdio = "null" })
end

local function stop(p)
  p:kill("SIGTERM")
  local res = p:wait(20)
  if not res then p:kill("SIGKILL"); p:wait() end
  return res
end

-- The published version of each live node under P: {name = version}.
local function node_versions(P)
  local res = e:get(P .. "nodes/", { prefix = true })
  local out = {}
  for _, kv in ipairs(res and res.kvs or {}) do
    local ok, v = pcall(json.decode, kv.value)
    if ok and type(v) == "table" and v.name then out[v.name] = v.version end
  end
  return out
end

local function put_job(P, name, source)
  local path = base .. "/" .. name .. ".lua"
  write(path, source)
  local res = cli(P, "job", "put", path)
  return res.code == 0, res.stderr
end

---------------------------------------------------------------------------
-- 1. Files replaced under a running node
do
  local P = "/test/upgrade/" .. stamp .. "/safe/"
  assert(baton.exec { "cp", "-a", base .. "/a", base .. "/live" })
  local node = start(bin("live"), P, "up-1")
  T.ok(wait(10, function() return node_versions(P)["up-1"] == OLD end),
       "a node of version " .. OLD .. " runs from the install")
  T.ok(put_job(P, "probe", [[
return { schedule = "@manual", run = function(ctx)
  local ok, added = pcall(require, "baton.upgrade_probe")
  print(("probe version=%s marker=%s added=%s"):format(baton.version,
        tostring(baton.upgrade_marker), tostring(ok and added)))
end }
]]), "job put probe")

  -- The upgrade under it: make install of the new version over its tree
  -- (install(1) replaces each file), a module edited, a module added.
  r = install(base .. "/live", NEW)
  T.is(r.code, 0, "make install VERSION=" .. NEW .. " over the running node's files")
  local core = libdir("live") .. "/baton/core.lua"
  local src = assert(read(core))
  write(core, (src:gsub("\nreturn baton%s*$", '\nbaton.upgrade_marker = "edited"\nreturn baton\n')))
  write(libdir("live") .. "/baton/upgrade_probe.lua", 'return "added"\n')
  T.is(assert(baton.exec { bin("live"), "version", env = ENV }).stdout, "baton " .. NEW .. "\n",
       "the program on disk is the new version")
  T.like(assert(baton.exec { "readlink", "/proc/" .. node.pid .. "/exe" }).stdout, "%(deleted%)",
         "the running node's program file was replaced")

  -- No run has happened yet: this one starts the node's first worker.
  r = cli(P, "job", "run", "probe")
  T.is(r.code, 0, "job run probe")
  local out = wait(20, function()
    local l = cli(P, "job", "logs", "probe").stdout
    return l:match("probe [^\n]*")
  end)
  T.is(out, "probe version=" .. OLD .. " marker=nil added=false",
       "the run's fresh worker has the node's version and library, not the files on disk")
  T.is(node_versions(P)["up-1"], OLD, "baton nodes: the node still says " .. OLD)

  -- After a restart, the new version and library.
  stop(node)
  node = start(bin("live"), P, "up-1")
  T.ok(wait(10, function() return node_versions(P)["up-1"] == NEW end),
       "restarted, the node is of version " .. NEW)
  cli(P, "job", "run", "probe")
  out = wait(20, function()
    local l = cli(P, "job", "logs", "probe").stdout
    return l:find(NEW, 1, true) and l:match("probe [^\n]*")
  end)
  T.is(out, "probe version=" .. NEW .. " marker=edited added=added",
       "and its runs have the new version and library")
  stop(node)
  e:delete(P, { prefix = true })
end

---------------------------------------------------------------------------
-- 2. A rolling upgrade of three nodes, a job every second
do
  local P = "/test/upgrade/" .. stamp .. "/rolling/"
  local LOG = base .. "/ticks.log"
  local names = { "r1", "r2", "r3" }
  local nodes = {}
  for _, n in ipairs(names) do nodes[n] = start(bin("a"), P, n) end
  T.ok(wait(15, function()
    local v = node_versions(P)
    return v.r1 == OLD and v.r2 == OLD and v.r3 == OLD
  end), "three nodes of version " .. OLD)
  T.ok(put_job(P, "tick", ([[
local P, LOG = %q, %q
return { schedule = "* * * * * *", timeout = 10, run = function(ctx)
  local r = baton.etcd:get(P .. "nodes/" .. ctx.node)
  local node_version = r and r.kvs[1] and baton.json.decode(r.kvs[1].value).version or "?"
  local f = assert(io.open(LOG, "a"))
  f:write(("%%d %%s %%d %%s %%s\n"):format(ctx.fire, ctx.node, ctx.attempt, baton.version, node_version))
  f:close()
end }
]]):format(P, LOG)), "job put tick: every second")

  -- baton nodes, as an operator watching: both versions side by side?
  local sampling, side_by_side, samples = true, false, 0
  baton.go(function()
    while sampling do
      local res = cli(P, "nodes", "--json")
      local ok, list = pcall(json.decode, res.stdout)
      if ok and type(list) == "table" then
        local seen = {}
        for _, n in ipairs(list) do seen[n.version or "?"] = true end
        if seen[OLD] and seen[NEW] then side_by_side = true end
        samples = samples + 1
      end
      baton.sleep(0.3)
    end
  end)

  -- Stops land mid-second, between two runs of the job (each takes a few
  -- ms), so that none is interrupted and run again as a second attempt.
  local function mid_second()
    local now = baton.now()
    local frac = now - math.floor(now)
    baton.sleep((frac < 0.5 and 0.5 or 1.5) - frac)
  end

  baton.sleep(3)
  local first = math.floor(baton.now()) + 1
  for _, n in ipairs(names) do
    mid_second()
    stop(nodes[n])
    nodes[n] = start(bin("b"), P, n)
    T.ok(wait(15, function() return node_versions(P)[n] == NEW end),
         n .. " restarted on version " .. NEW)
    baton.sleep(3)
  end
  local last = math.floor(baton.now()) - 1
  baton.sleep(2)
  mid_second()
  for _, n in ipairs(names) do stop(nodes[n]) end
  sampling = false

  T.ok(side_by_side, ("baton nodes showed %s and %s side by side (%d samples)"):format(OLD, NEW, samples))

  -- Every instant of the window: one record, succeeded; one execution.
  local records = {}
  local res = assert(e:get(P .. "runs/tick/", { prefix = true }))
  for _, kv in ipairs(res.kvs) do
    local rec = json.decode(kv.value)
    records[rec.fire] = records[rec.fire] or {}
    table.insert(records[rec.fire], rec)
  end
  local runs, versions, mismatched = {}, {}, {}
  for line in (read(LOG) or ""):gmatch("[^\n]+") do
    local fire, node, attempt, wv, nv = line:match("^(%d+) (%S+) (%d+) (%S+) (%S+)$")
    fire = tonumber(fire)
    runs[fire] = (runs[fire] or 0) + 1
    versions[wv] = (versions[wv] or 0) + 1
    if wv ~= nv then mismatched[#mismatched + 1] = line end
  end
  local missed, twice, failed = {}, {}, {}
  for s = first, last do
    local recs = records[s]
    if not recs or not runs[s] then missed[#missed + 1] = s end
    if (recs and #recs > 1) or (runs[s] or 0) > 1 then twice[#twice + 1] = s end
    if recs and recs[1].state ~= "succeeded" then
      failed[#failed + 1] = s .. " " .. tostring(recs[1].state) .. " " .. tostring(recs[1].error)
    end
  end
  T.ok(last - first >= 9, ("a window of %d instants across the upgrade"):format(last - first + 1))
  T.is(table.concat(missed, " "), "", "no instant was missed")
  T.is(table.concat(twice, " "), "", "no instant ran twice")
  T.is(table.concat(failed, "; "), "", "every run succeeded")
  T.ok((versions[OLD] or 0) > 0 and (versions[NEW] or 0) > 0,
       ("runs of both versions: %d of %s, %d of %s"):format(versions[OLD] or 0, OLD,
                                                          versions[NEW] or 0, NEW))
  T.is(table.concat(mismatched, "; "), "", "every run's worker had its node's version")
  e:delete(P, { prefix = true })
end

baton.exec { "rm", "-rf", base }
T.done()
