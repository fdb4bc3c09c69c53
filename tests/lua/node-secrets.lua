-- A job's secrets (issue 14; lua/baton/node/secrets.lua): declared by name
-- in the job file, read by the node that runs it from its --secrets-dir or
-- its environment, given to run(ctx) as ctx.secrets, and never in etcd (any
-- key under the prefix: records, output, statuses), in the node's log or
-- in the run's kept output, where a printed value shows as ***. A missing
-- one fails the run with its name and no value; a bad secrets field is
-- refused by check and job put.
local T = require "tap"
local N = require "nodes"

local c = N.new("nodesecrets")
local stamp = tostring(math.floor(baton.now() * 1000))
local FILE_SECRET = "f1le-s3cret-" .. stamp .. "-qx"
local ENV_SECRET = "env-s3cret-" .. stamp .. "-zy"
local OTHER = "other-" .. stamp .. "-never"

-- Node a reads DB_PASSWORD from a file (mode 600), node b from its
-- environment; a world-readable file on a gets a warning.
local sdir = c.dir .. "/secrets"
assert(baton.exec { "mkdir", "-p", sdir })
local function write(path, text, mode)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  assert(baton.exec { "chmod", mode, path })
end
write(sdir .. "/DB_PASSWORD", FILE_SECRET .. "\n", "600")
write(sdir .. "/LOOSE", OTHER .. "\n", "644")

c:start("a", 3, "--labels site=a --secrets-dir " .. sdir)
c:start("b", 3, "--labels site=b", "DB_PASSWORD=" .. ENV_SECRET)

local function ended(job, secs)
  return N.wait(secs or 20, function()
    local rec = c:records(job)[1]
    return rec and rec.state ~= "running" and rec.state ~= "retrying" and rec
  end)
end

local function run(job, source)
  local rev = c:put_job(job, source)
  T.ok(c:loaded(job, rev), job .. " loaded")
  local r = c:cli("job", "run", job)
  T.is(r.code, 0, job .. ": job run " .. r.stderr)
  return ended(job)
end

-- A checksum of a value, so that the job's source need not hold it.
local function sum(s)
  local h = 7
  for i = 1, #s do h = (h * 31 + s:byte(i)) % 2147483647 end
  return h
end

-- The job: checks the value against its checksum, stores the result
-- (fenced), prints it, logs it, and hands it to a program that prints it.
local function job_source(site, want)
  return ([[
return {
  schedule = "@manual", labels = { site = %q }, secrets = { "DB_PASSWORD", "LOOSE" },
  run = function(ctx)
    local v = ctx.secrets.DB_PASSWORD
    local h = 7
    for i = 1, #v do h = (h * 31 + v:byte(i)) %% 2147483647 end
    ctx:put_fenced(%q .. ctx.job, baton.json.encode { len = #v, ok = h == %d })
    print("the password is " .. v)
    io.write("again: ", v, "\n")
    ctx.log.info("logged " .. v, { pw = v })
    baton.log.warn("straight to the log " .. v, { pw = v, n = 1 })
    baton.exec { "sh", "-c", "echo program says $PW", env = { PW = v } }
    return h == %d
  end,
}]]):format(site, c.P .. "seen/", sum(want), sum(want))
end

-- (node b has no LOOSE: the job for b asks only for DB_PASSWORD)
local rec_a = run("sa", job_source("a", FILE_SECRET))
T.is(rec_a and rec_a.state, "succeeded", "a job gets the secret from --secrets-dir: "
  .. tostring(rec_a and rec_a.error))
local rec_b = run("sb", (job_source("b", ENV_SECRET):gsub(', "LOOSE"', "")))
T.is(rec_b and rec_b.state, "succeeded", "a job gets the secret from the node's environment: "
  .. tostring(rec_b and rec_b.error))

for _, j in ipairs { "sa", "sb" } do
  local kv = assert(c.e:get(c.P .. "seen/" .. j)).kvs[1]
  local seen = kv and baton.json.decode(kv.value) or {}
  T.ok(seen.ok == true and seen.len > 0, j .. ": the job saw the right value (put_fenced)")
end

-- A job asking for a secret node b lacks.
local rec_m = run("smissing", [[
return { schedule = "@manual", labels = { site = "b" }, secrets = { "DB_PASSWORD", "NOPE_]] .. stamp .. [[" },
         run = function(ctx) print("should not run") end }]])
T.is(rec_m and rec_m.state, "failed", "a missing secret fails the run")
T.is(rec_m and rec_m.error, "secret NOPE_" .. stamp .. " is not set on node b (no --secrets-dir, no environment variable)",
     "the error names it and the node")
-- On node a, the message names the directory.
local rec_m2 = run("smissing2", [[
return { schedule = "@manual", labels = { site = "a" }, secrets = { "NOPE_]] .. stamp .. [[" },
         run = function(ctx) end }]])
T.is(rec_m2 and rec_m2.error, "secret NOPE_" .. stamp .. " is not set on node a (no file in --secrets-dir "
  .. sdir .. ", no environment variable)", "with --secrets-dir, the error names the directory")

-- A run that fails with the value in its error: redacted there too.
local rec_e = run("serr", [[
return { schedule = "@manual", labels = { site = "a" }, secrets = { "DB_PASSWORD" },
         run = function(ctx) error("cannot log in with " .. ctx.secrets.DB_PASSWORD, 0) end }]])
T.is(rec_e and rec_e.error, "cannot log in with ***", "a run's error is redacted")

-- The kept output shows *** where the values were printed.
local function logs(job)
  local r = c:cli("job", "logs", job)
  return r.stdout .. r.stderr
end
local out_a = logs("sa")
T.like(out_a, "stdout%s+the password is %*%*%*\n", "a printed secret is *** in the output")
T.like(out_a, "stdout%s+again: %*%*%*\n", "written with io.write, too")
T.like(out_a, "info%s+logged %*%*%* pw=%*%*%*", "ctx.log's text and fields, too")
T.like(out_a, "sh:out%s+program says %*%*%*", "a program's output, too")
T.like(logs("sb"), "stdout%s+the password is %*%*%*\n", "the environment's value as well")

-- Nothing under the prefix holds a value: every key, every value.
local all = assert(c.e:get(c.P, { prefix = true }))
T.ok(#all.kvs > 10, "the prefix holds the runs' keys (" .. #all.kvs .. ")")
local leaks = {}
for _, kv in ipairs(all.kvs) do
  for _, s in ipairs { FILE_SECRET, ENV_SECRET, OTHER } do
    if kv.key:find(s, 1, true) or kv.value:find(s, 1, true) then leaks[#leaks + 1] = kv.key end
  end
end
T.is(#leaks, 0, "no key under the prefix holds a secret's value: " .. table.concat(leaks, ", "))

-- Nor the nodes' logs; a's warns about the world-readable file.
for _, n in ipairs { "a", "b" } do
  local log = c:log(n)
  T.ok(#log > 0 and not log:find(FILE_SECRET, 1, true) and not log:find(ENV_SECRET, 1, true)
       and not log:find(OTHER, 1, true), "node " .. n .. "'s log holds no secret value")
end
T.like(c:log("a"), "straight to the log %*%*%*[^\n]*pw=%*%*%*", "baton.log.* called by the job is redacted")
T.like(c:log("a"), "secret file may be read by others[^\n]*LOOSE", "a group/world-readable secret file is warned about")
T.ok(not c:log("a"):find("read by others[^\n]*DB_PASSWORD"), "a file of mode 600 is not")

-- job show lists the names.
local show = c:cli("job", "show", "sa")
T.like(show.stdout .. show.stderr, "secrets:?%s+DB_PASSWORD, LOOSE", "job show lists the secrets' names")

-- Bad fields: one line each, from check and from job put.
local bad = {
  { 'secrets = "DB_PASSWORD"', "field 'secrets': expected a table, got string" },
  { 'secrets = { "1ABC" }', [[field 'secrets': "1ABC" is not a secret name]] },
  { 'secrets = { "A-B" }', [[field 'secrets': "A%-B" is not a secret name]] },
  { 'secrets = { 42 }', "field 'secrets': entry 1 is a number, not a name" },
  { 'secrets = { x = "A" }', "field 'secrets': must be a list of names" },
  { 'secrets = { "A", "A" }', [[field 'secrets': "A" is named twice]] },
}
for i, b in ipairs(bad) do
  local f = c.dir .. "/bad" .. i .. ".lua"
  local fh = assert(io.open(f, "w"))
  fh:write("return { schedule = '@manual', " .. b[1] .. ", run = function() end }\n")
  fh:close()
  local r = c:cli("check", f)
  T.is(r.code, 1, b[1] .. ": check fails")
  T.like(r.stderr, b[2], b[1] .. ": " .. r.stderr:gsub("\n$", ""))
  T.is(select(2, r.stderr:gsub("\n", "")), 1, b[1] .. ": one line")
  local p = c:cli("job", "put", f, "--name", "bad" .. i)
  T.ok(p.code ~= 0 and p.stderr:find(b[2]), b[1] .. ": job put refuses it")
end
T.ok(not assert(c.e:get(c.P .. "jobs/bad1")).kvs[1], "nothing was stored")

-- A --secrets-dir that is not there stops the node at once.
local r = baton.exec { os.getenv("BATON_BIN") or "bin/baton", "--endpoints", os.getenv("BATON_ENDPOINTS"),
                       "--prefix", c.P, "node", "--name", "z", "--secrets-dir", c.dir .. "/nope", timeout = 20 }
T.is(r.code, 1, "a missing --secrets-dir ends the node")
T.like(r.stderr, "%-%-secrets%-dir [^\n]*/nope: ENOENT", "saying why")

c:destroy()
T.done()
