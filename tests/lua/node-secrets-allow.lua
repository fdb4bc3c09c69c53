-- Secrets restricted per job (issue 22, finding 12; node/secrets.lua,
-- docs/security.md "Secrets"): DIR/NAME.jobs lists the jobs that may have
-- DIR/NAME. A listed job that declares it gets it; a job that declares it
-- and is not listed fails with one line naming the list, never the value;
-- an unrestricted secret still goes to any job that declares it. A run's
-- worker learns nothing of where the secrets are kept (no
-- BATON_SECRETS_DIR in its environment: the conductor reads them and sends
-- the run's values with the run), and a worker that was given a restricted
-- secret serves no other run.
local T = require "tap"
local N = require "nodes"
local F = require "files"

local c = N.new("secretsallow")
local stamp = tostring(math.floor(baton.now() * 1000))
local API_KEY = "api-k3y-" .. stamp .. "-qq"
local OPEN = "open-v4lue-" .. stamp .. "-rr"

local sdir = c.dir .. "/secrets"
assert(baton.exec { "mkdir", "-p", sdir })
local function write(path, text)
  F.write(path, text)
  assert(baton.exec { "chmod", "600", path })
end
write(sdir .. "/API_KEY", API_KEY .. "\n")
write(sdir .. "/API_KEY.jobs", "# who may have API_KEY\nallowed\n\n  also_allowed  # a comment\n")
write(sdir .. "/OPEN", OPEN .. "\n")

c:start("a", 3, "--workers 1 --secrets-dir " .. sdir)

local function ended(job, n, secs)
  return N.wait(secs or 20, function()
    local list = c:records(job)
    local done = 0
    for _, rec in ipairs(list) do
      if rec.state ~= "running" and rec.state ~= "retrying" then done = done + 1 end
    end
    table.sort(list, function(x, y) return x.started > y.started end)
    return done >= (n or 1) and list[1]
  end)
end

local function put(job, source)
  local rev = c:put_job(job, source)
  T.ok(c:loaded(job, rev), job .. " loaded")
end

local function run(job, n)
  local r = c:cli("job", "run", job)
  T.is(r.code, 0, job .. ": job run " .. r.stderr)
  return ended(job, n)
end

-- What a run saw, put (fenced) at P seen/<job>/<n>: its worker's pid, the
-- length of each secret it got, whether its checksum is right, and what it
-- could learn of the secrets directory from its environment.
local function sum(s)
  local h = 7
  for i = 1, #s do h = (h * 31 + s:byte(i)) % 2147483647 end
  return h
end
local function job_source(names, want)
  return ([[
local n = 0
return {
  schedule = "@manual", secrets = %s,
  run = function(ctx)
    n = n + 1
    local f = io.open("/proc/self/stat")
    local pid = f and f:read("*l"):match("^(%%d+)")
    if f then f:close() end
    local e = io.open("/proc/self/environ")
    local environ = e and e:read("*a") or ""
    if e then e:close() end
    local got = {}
    for name, v in pairs(ctx.secrets) do
      local h = 7
      for i = 1, #v do h = (h * 31 + v:byte(i)) %% 2147483647 end
      got[name] = { len = #v, sum = h }
    end
    ctx:put_fenced(%q .. ctx.job .. "/" .. ctx.fire, baton.json.encode {
      pid = pid, got = got, want = %d,
      env_dir = os.getenv("BATON_SECRETS_DIR") or false,
      environ_dir = environ:find("BATON_SECRETS_DIR", 1, true) ~= nil,
    })
  end,
}]]):format(names, c.P .. "seen/", want or 0)
end

local function seen(job)
  local r = assert(c.e:get(c.P .. "seen/" .. job .. "/", { prefix = true, sort = "create", order = "desc" }))
  local kv = r.kvs[1]
  return kv and baton.json.decode(kv.value) or {}
end

-- 1. A listed job gets the restricted secret.
put("allowed", job_source('{ "API_KEY", "OPEN" }', sum(API_KEY)))
local rec = run("allowed")
T.is(rec and rec.state, "succeeded", "a job the list names gets the restricted secret: "
  .. tostring(rec and rec.error))
local s = seen("allowed")
T.ok(s.got and s.got.API_KEY and s.got.API_KEY.sum == sum(API_KEY), "with its value")
T.ok(s.got and s.got.OPEN and s.got.OPEN.sum == sum(OPEN), "and the unrestricted one")

-- 2. A job that declares it and is not listed does not.
put("other", job_source('{ "API_KEY" }'))
rec = run("other")
T.is(rec and rec.state, "failed", "a job the list does not name fails")
T.is(rec and rec.error, "secret API_KEY on node a is restricted to the jobs listed in " .. sdir
  .. "/API_KEY.jobs, and job other is not one of them", "one line naming the list")
T.is(seen("other").pid, nil, "its run(ctx) never ran")

-- 3. An unrestricted secret still goes to any job that declares it.
put("open", job_source('{ "OPEN" }'))
rec = run("open")
T.is(rec and rec.state, "succeeded", "an unrestricted secret: any job that declares it " .. tostring(rec and rec.error))
s = seen("open")
T.ok(s.got and s.got.OPEN and s.got.OPEN.sum == sum(OPEN), "gets it")
T.is(s.got and s.got.API_KEY, nil, "and nothing it did not declare")

-- 4. The worker's environment says nothing of the directory.
T.is(s.env_dir, false, "no BATON_SECRETS_DIR in a run's environment (os.getenv)")
T.is(s.environ_dir, false, "nor in its process's environment (/proc/self/environ)")

-- 5. A worker given a restricted secret serves no other run; one that was
-- not is reused (--workers 1: one worker at a time).
put("plain", job_source("{}"))
rec = run("plain", 1)
local p1 = seen("plain").pid
rec = run("plain", 2)
local p2 = seen("plain").pid
T.ok(p1 and p1 == p2, "a worker is reused between runs without restricted secrets (" .. tostring(p1) .. ", "
  .. tostring(p2) .. ")")
rec = run("allowed", 2)
T.is(rec and rec.state, "succeeded", "allowed again")
rec = run("plain", 3)
local p3 = seen("plain").pid
T.ok(p3 and p3 ~= p2, "the worker that ran it does not run the next job (" .. tostring(p2) .. " then "
  .. tostring(p3) .. ")")

-- 6. A restricted secret is not taken from the environment: with a list and
-- no file, the run fails (node b has the value in its environment).
write(sdir .. "/ENV_ONLY.jobs", "envjob\n")
c:start("b", 3, "--labels site=b --secrets-dir " .. sdir, "ENV_ONLY=from-env-" .. stamp)
put("envjob", (job_source('{ "ENV_ONLY" }'):gsub('schedule = "@manual"', 'schedule = "@manual", labels = { site = "b" }')))
rec = run("envjob")
T.is(rec and rec.state, "failed", "a restricted secret with no file fails the run")
T.is(rec and rec.error, "secret ENV_ONLY is not set on node b (" .. sdir .. "/ENV_ONLY.jobs restricts it, and there is no file "
  .. sdir .. "/ENV_ONLY)", "and says why, never taking the environment's value")

-- 7. --run-as USER (a node started as root): its workers, and so its
-- jobs, run as USER, who cannot open the secret files; the restricted
-- secret still reaches the listed job, through the conductor.
local bin = os.getenv("BATON_BIN") or "bin/baton"
local id = assert(baton.exec { "id", "-u" })
local can = id.stdout:match("^0") and assert(baton.exec { "sh", "-c",
  "getent passwd nobody >/dev/null && runuser -u nobody -- " .. bin .. " version >/dev/null 2>&1" }).code == 0
if not can then
  T.skip("--run-as: the test runs as root, with a user nobody who can run " .. bin, 7)
else
  c:start("r", 3, "--labels site=r --run-as nobody --secrets-dir " .. sdir)
  put("also_allowed", ([[
return {
  schedule = "@manual", labels = { site = "r" }, secrets = { "API_KEY" },
  run = function(ctx)
    local st = io.open("/proc/self/status"):read("*a")
    local sf, serr = io.open(%q)
    local v, h = ctx.secrets.API_KEY, 7
    for i = 1, #v do h = (h * 31 + v:byte(i)) %% 2147483647 end
    ctx:put_fenced(%q, baton.json.encode { uid = st:match("Uid:%%s+(%%d+)"), open = sf ~= nil, err = serr,
                                           home = os.getenv("HOME"), ok = h == %d })
  end,
}]]):format(sdir .. "/API_KEY", c.P .. "seen/also_allowed/uid", sum(API_KEY)))
  rec = run("also_allowed")
  T.is(rec and rec.state, "succeeded", "--run-as: the listed job runs " .. tostring(rec and rec.error))
  local kv = assert(c.e:get(c.P .. "seen/also_allowed/uid")).kvs[1]
  local u = kv and baton.json.decode(kv.value) or {}
  T.is(u.uid, "65534", "as the user nobody")
  T.is(u.open, false, "which cannot open the secret's file: " .. tostring(u.err))
  T.is(u.ok, true, "and gets the secret from the conductor")
  T.is(u.home, "/nonexistent", "with nobody's HOME")
end
local r = baton.exec { bin, "--endpoints", os.getenv("BATON_ENDPOINTS"), "--prefix", c.P, "node", "--name", "z",
                       "--run-as", "no-such-user-" .. stamp, timeout = 20 }
T.is(r.code, 1, "--run-as a user that does not exist: the node ends")
T.like(r.stderr, "^baton: node z: %-%-run%-as no%-such%-user%-%d+: ", "one line: " .. r.stderr)

-- Nothing under the prefix holds a value, nor the nodes' logs.
local all = assert(c.e:get(c.P, { prefix = true }))
local leaks = {}
for _, kv in ipairs(all.kvs) do
  for _, v in ipairs { API_KEY, OPEN } do
    if kv.key:find(v, 1, true) or kv.value:find(v, 1, true) then leaks[#leaks + 1] = kv.key end
  end
end
T.is(#leaks, 0, "no key under the prefix holds a value: " .. table.concat(leaks, ", "))
for _, n in ipairs { "a", "b" } do
  local log = c:log(n)
  T.ok(#log > 0 and not log:find(API_KEY, 1, true) and not log:find(OPEN, 1, true),
       "node " .. n .. "'s log holds no value")
end

c:destroy()
T.done()
