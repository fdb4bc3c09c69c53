-- Stored code never runs unverified, anywhere (issue 22, acceptance 1;
-- docs/security.md "The sandbox"). Someone who can write etcd but holds no
-- signing key plants a marker job, a marker policy and a job whose top
-- level turns signature checks off (package.loaded["baton.sign"].verify),
-- all unsigned, under a node started with --trust. Each writes a file
-- (and tries os.execute) the moment any of its code runs. Then every route
-- of the node's HTTP API (with and without the token), every CLI command
-- that reads jobs or policies, the dashboard in Chromium for 10 s, and
-- `job put --sign` of a job whose `on` names the marker are driven: the
-- marker file never appears, the node still refuses unsigned code, and
-- `baton nodes` still says it runs signed code only.
local T = require "tap"
local N = require "nodes"
local json = baton.json
local c = N.new("untrusted")
local e, P, dir = c.e, c.P, c.dir
local MARK = dir .. "/marker"
local root = os.getenv("BATON_ROOT") or "."

local function sh(cmd) return assert(baton.exec { "sh", "-c", cmd, timeout = 120 }) end
local function write(name, text)
  local f = dir .. "/" .. name
  local fh = assert(io.open(f, "w"))
  fh:write(text)
  fh:close()
  return f
end
local function marked()
  local fh = io.open(MARK)
  if not fh then return nil end
  local s = fh:read("*a")
  fh:close()
  return s
end

-- Code that leaves a trace in MARK when it runs, wherever that is.
local function trace(what)
  return ([[
do
  local f = io and io.open(%q, "a")
  if f then f:write(%q .. "\n") f:close() end
  if os and os.execute then pcall(os.execute, "echo " .. %q .. " >> %s") end
end
]]):format(MARK, what, what .. " (os.execute)", MARK)
end
local MARKER_JOB = trace("the marker job top level ran") .. ([[
return { schedule = "* * * * * *", params = { x = "1" },
  run = function(ctx) %s end }
]]):format(trace("the marker job run ran"))
local MARKER_POLICY = trace("the marker policy top level ran") .. ([[
return {
  description = "marker",
  claim_delay = function() %s return 0 end,
  assign_shards = function() %s end,
  retry_delay = function() %s return 1 end,
  on_orphan = function() %s return "rerun" end,
  selftest = function() %s return { "marker" } end,
}
]]):format(trace("claim_delay ran"), trace("assign_shards ran"), trace("retry_delay ran"),
  trace("on_orphan ran"), trace("selftest ran"))
-- The payload of the review: a top level that turns verification off for
-- the rest of the process's life.
local PAYLOAD = trace("the payload top level ran") .. [[
pcall(function()
  package.loaded["baton.sign"].verify = function() return "0000000000000000" end
end)
return { schedule = "* * * * * *", run = function() end }
]]

-- 1. Keys, a node with --trust and --http (writes with a token), and the
-- planted code, stored the way an etcd writer would.
T.is(c:cli("keygen", dir .. "/k").code, 0, "keygen")
sh(("mkdir %s/trust && cp %s/k.pub %s/trust/"):format(dir, dir, dir))
local free_port = N.free_port
local PORT = free_port()
write("token", "s3cret\n")
c:start("a", 3, ("--trust %s/trust --http 127.0.0.1:%d --http-token-file %s/token"):format(dir, PORT, dir))
local good = write("good.lua", 'return { schedule = "@manual", run = function(ctx) end }\n')
T.is(c:cli("job", "put", good, "--sign", dir .. "/k").code, 0, "a signed job")
assert(e:put(P .. "jobs/marker", MARKER_JOB))
assert(e:put(P .. "jobs/payload", PAYLOAD))
assert(e:put(P .. "policies/markerpol", MARKER_POLICY))
local usespol = write("usespol.lua", 'return { schedule = "* * * * * *", policy = "markerpol", run = function() end }\n')
T.is(c:cli("job", "put", usespol, "--sign", dir .. "/k").code, 0, "a signed job that names the marker policy")
local mrev = assert(e:get(P .. "jobs/marker")).kvs[1].mod_revision

local function status_error(job)
  return N.wait(10, function()
    local kv = assert(e:get(P .. "status/" .. job .. "/a")).kvs[1]
    local st = kv and json.decode(kv.value)
    return st and st.error ~= json.null and st.error
  end)
end
T.like(status_error("marker") or "", "^untrusted: job marker is not signed", "the node refuses the marker job")
T.like(status_error("payload") or "", "^untrusted: job payload is not signed", "and the payload")

-- 2. Every route of the API, with the token and without.
local function curl(method, path, body, token)
  local args = { "curl", "-sS", "-o", dir .. "/out", "-w", "%{http_code}", "-X", method, "--max-time", "20",
                 timeout = 30 }
  if token then args[#args + 1] = "-H"; args[#args + 1] = "Authorization: Bearer s3cret" end
  if body then args[#args + 1] = "--data-binary"; args[#args + 1] = "@" .. body end
  args[#args + 1] = ("http://127.0.0.1:%d/%s"):format(PORT, path)
  local r = assert(baton.exec(args))
  return tonumber(r.stdout)
end
local marker_body = write("marker-body.lua", MARKER_JOB)
local policy_body = write("policy-body.lua", MARKER_POLICY)
local routes = {
  { "GET", "" }, { "GET", "healthz" }, { "GET", "readyz" }, { "GET", "metrics" },
  { "GET", "api/v1/info" }, { "GET", "api/v1/jobs" }, { "GET", "api/v1/jobs/marker" },
  { "GET", "api/v1/jobs/payload" }, { "GET", "api/v1/jobs/marker/runs" }, { "GET", "api/v1/jobs/marker/versions" },
  { "GET", "api/v1/jobs/marker/diff" },
  { "GET", "api/v1/runs" }, { "GET", "api/v1/runs/marker/latest" }, { "GET", "api/v1/nodes" },
  { "GET", "api/v1/leader" }, { "GET", "api/v1/policies" }, { "GET", "api/v1/policies/markerpol" },
  { "GET", "api/v1/policies/markerpol/versions" },
  { "PUT", "api/v1/jobs/marker2", marker_body }, { "PUT", "api/v1/jobs/marker", marker_body },
  { "PUT", "api/v1/policies/markerpol2", policy_body }, { "PUT", "api/v1/policies/markerpol", policy_body },
  { "POST", "api/v1/jobs/marker/run" }, { "POST", "api/v1/jobs/payload/run" },
  { "POST", "api/v1/jobs/marker/pause" }, { "POST", "api/v1/jobs/marker/resume" },
  { "POST", "api/v1/jobs/marker/kill" }, { "POST", "api/v1/queues/q/tasks", marker_body },
}
local answered = 0
for _, token in ipairs { false, true } do
  for _, r in ipairs(routes) do
    local code = curl(r[1], r[2], r[3], token)
    if code and code >= 200 and code < 600 then answered = answered + 1 end
  end
end
T.is(answered, 2 * #routes, "every route answered, with and without the token (" .. answered .. " requests)")
T.is(marked(), nil, "API: no marker code ran")

-- 3. Every CLI command that reads jobs or policies.
local cmds = {
  { "job", "ls" }, { "job", "ls", "--json" }, { "job", "show", "marker" }, { "job", "show", "marker", "--json" },
  { "job", "show", "payload" }, { "job", "run", "marker" }, { "job", "run", "marker", "--param", "x=2" },
  { "job", "history", "marker" }, { "job", "logs", "marker" }, { "job", "versions", "marker" },
  { "job", "diff", "marker", tostring(mrev), tostring(mrev) },
  { "job", "rollback", "marker", tostring(mrev) },
  { "job", "rollback", "marker", tostring(mrev), "--sign", dir .. "/k" },
  { "policy", "ls" }, { "policy", "ls", "--json" }, { "policy", "show", "markerpol" },
  { "policy", "show", "markerpol", "--json" }, { "policy", "versions", "markerpol" },
  { "nodes" }, { "leader" },
}
for _, cmd in ipairs(cmds) do c:cli(unpack(cmd)) end
T.is(marked(), nil, "CLI: no marker code ran (" .. #cmds .. " commands)")
local rb = c:cli("job", "rollback", "marker", tostring(mrev), "--sign", dir .. "/k")
T.like(rb.stderr, "EACCES: revision " .. mrev .. " of job marker was not signed by key", "rollback --sign of the "
  .. "planted version: refused")

-- 4. job put --sign of a job whose `on` names the marker (the cycle check
-- reads every stored job), then a file that names it, checked.
local chained = write("chained.lua", 'return { on = { succeeded = { "marker", "payload" } }, run = function() end }\n')
local r = c:cli("job", "put", chained, "--sign", dir .. "/k")
T.is(r.code, 0, "job put --sign of a job with on: exit 0 " .. r.stderr)
T.is(c:cli("check", chained).code, 0, "baton check of it")
r = c:cli("job", "sign", chained, "--sign", dir .. "/k", "--name", "chained2", "-o", dir .. "/chained2.signed")
T.is(r.code, 0, "job sign of it")
T.is(marked(), nil, "job put --sign, check, sign: no marker code ran")

-- 5. The dashboard, in Chromium, for 10 s: the overview and the pages of
-- the marker and the payload (which poll GET /api/v1/jobs/NAME).
local chromium = os.getenv("BATON_CHROMIUM") or "/usr/bin/chromium"
local have_browser = baton.exec { "sh", "-c", ("command -v node >/dev/null && test -x %s && test -f %s/tests/browser/"
  .. "node_modules/puppeteer-core/package.json"):format(chromium, root) }.code == 0
if have_browser then
  local base = ("http://127.0.0.1:%d/"):format(PORT)
  local v = assert(baton.exec { "node", root .. "/tests/browser/visit.js", "10", dir, base .. "#token=s3cret",
    base .. "#jobs/marker", base .. "#jobs/payload", base .. "#runs/marker/latest", timeout = 90 })
  local ok, res = pcall(json.decode, v.stdout)
  T.ok(ok and type(res) == "table" and res.requests > 10, "the dashboard polled the API for 10 s ("
    .. tostring(ok and type(res) == "table" and res.requests) .. " requests) " .. v.stderr)
  T.is(marked(), nil, "dashboard: no marker code ran")
else
  T.skip("no node, chromium or puppeteer-core (make deps installs them)", 2)
end

-- 6. Verification still holds: a new unsigned job is refused, the signed
-- ones load, and baton nodes says what the node runs.
assert(e:put(P .. "jobs/after", 'return { schedule = "* * * * * *", run = function() end }'))
T.like(status_error("after") or "", "^untrusted: job after is not signed", "an unsigned job put afterwards: refused")
T.ok(c:loaded("chained", assert(e:get(P .. "jobs/chained")).kvs[1].mod_revision), "signed code still loads")
T.like(c:cli("nodes").stdout, "\na [^\n]* signed %(1 key%)", "baton nodes: signed (1 key)")
baton.sleep(1.5)
T.is(marked(), nil, "in the end, no marker code ran anywhere")
T.unlike(c:log("a"), "marker job top level ran", "and the node's log shows none")

c:destroy()
T.done()
