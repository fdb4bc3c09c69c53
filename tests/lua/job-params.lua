-- Job parameters against real nodes: params = {k = "default"} in the job
-- file; baton job run NAME --param k=v reaches ctx.params and the run
-- record, the defaults apply to what is not given and to scheduled runs,
-- an unknown parameter is refused with the known ones listed. And job run
-- refuses when no live node can run the job.
local T = require "tap"
local _ -- results a check ignores
local N = require "nodes"
local F = require "files"
local bin = os.getenv("BATON_BIN") or "bin/baton"
local eps = os.getenv("BATON_ENDPOINTS")
local json = baton.json

local c = N.new("jobparams")
local e, P = c.e, c.P

local function cli(...)
  local args = { bin, "--endpoints", eps, "--prefix", P, timeout = 60 }
  for _, a in ipairs { ... } do args[#args + 1] = a end
  local r = assert(baton.exec(args))
  return r.stdout, r.stderr, r.code
end

-- The job writes what it got in ctx.params to a file named after its run.
local out = c.dir .. "/params"
assert(baton.exec { "mkdir", "-p", out })
local SRC = ([[
return { schedule = %q, params = { region = "eu", day = "" }, labels = { zone = "a" },
         run = function(ctx)
           local f = io.open(%q .. "/" .. ctx.attempt .. "-" .. ctx.fire, "w")
           f:write(baton.json.encode(ctx.params))
           f:close()
         end }]])

-- What the run that fired at `fire` wrote (its ctx.params), once it is there.
local function got(fire)
  return N.wait(15, function()
    local s = F.read(out .. "/1-" .. tostring(fire))
    return s and json.decode(s)
  end)
end

local function done(job, id)
  return N.wait(15, function()
    local kv = assert(e:get(P .. "runs/" .. job .. "/" .. id)).kvs[1]
    local r = kv and json.decode(kv.value)
    return r and r.state ~= "running" and r
  end)
end

-- 1. No live node: job run refuses, nothing is queued.
do
  c:put_job("report", SRC:format("@manual", out))
  local o, err, code = cli("job", "run", "report")
  T.is(code .. "|" .. o, "1|", "job run with no live node: exit 1, nothing on stdout")
  T.is(err, "baton: job run report: no node is live under " .. P .. "nodes/ (is a node running, with this "
    .. "--prefix?); nothing was queued\n", "says no node is live")
  T.is(assert(e:get(P .. "trigger/", { prefix = true, count_only = true })).count, 0, "no trigger written")

  c:start("b1", 3, "--labels zone=b")
  T.ok(N.wait(10, function() return assert(e:get(P .. "nodes/b1")).count == 1 end), "node b1 (zone=b) is up")
  o, err, code = cli("job", "run", "report")
  T.is(code, 1, "job run with no node having the job's labels: exit 1")
  T.is(err, "baton: job run report: no live node has the labels zone=a (live: b1 (zone=b)); nothing was queued\n",
    "says which labels no node has, and the live nodes")
end

c:start("a1", 3, "--labels zone=a")
T.ok(N.wait(10, function() return assert(e:get(P .. "nodes/a1")).count == 1 end), "node a1 (zone=a) is up")
local rev = assert(e:get(P .. "jobs/report")).kvs[1].mod_revision
T.ok(c:loaded("report", rev), "the nodes loaded the job")

-- 2. Given parameters and the defaults of the others.
do
  local o, err, code = cli("job", "run", "report", "--param", "region=us", "--param=day=2026-11-28")
  T.is(code, 0, "job run --param: exit 0")
  if code ~= 0 then T.diag(err) end
  local id = o:match(": run (%S+),")
  T.like(o, 'params day="2026%-11%-28" region="us"; a live node will start it\n$', "says which params")
  local rec = id and done("report", id)
  T.is(rec and rec.state, "succeeded", "the run succeeded")
  T.is(rec and rec.node, "a1", "on the node with the job's labels")
  local p = rec and got(rec.fire)
  T.is(p and p.region, "us", "ctx.params.region is what --param gave")
  T.is(p and p.day, "2026-11-28", "ctx.params.day too")
  T.is(rec and rec.params and rec.params.region, "us", "the record has the params")
  T.is(rec and rec.params and rec.params.day, "2026-11-28", "all of them")
  local h = cli("job", "history", "report")
  T.like(h, "\n" .. (id or "?"):gsub("%p", "%%%0") .. "  a1 +1 +succeeded ",
    "job history shows the manual run's id, with its milliseconds")

  o = cli("job", "run", "report", "--param", "region=ap")
  id = o:match(": run (%S+),")
  rec = id and done("report", id)
  p = rec and got(rec.fire)
  T.is(p and p.region .. "|" .. p.day, "ap|", "a parameter not given gets its default")
  T.is(rec and rec.params and rec.params.day, "", "in the record too")

  o = cli("job", "run", "report")
  id = o:match(": run (%S+);")
  rec = id and done("report", id)
  p = rec and got(rec.fire)
  T.is(p and p.region, "eu", "no --param: the defaults")
  T.is(rec and rec.params and rec.params.region, "eu", "recorded")
end

-- 3. Refused parameters: unknown (with the known ones), malformed.
do
  local o, err, code = cli("job", "run", "report", "--param", "regoin=us")
  T.is(code .. "|" .. o, "1|", "an unknown parameter: exit 1, nothing queued")
  T.is(err, 'baton: job run report: EINVAL: unknown parameter "regoin" (did you mean "region"?); '
    .. "the job's parameters are day, region\n", "names it, and lists the known ones")
  _, err, code = cli("job", "run", "report", "--param", "colour=red")
  T.is(err, 'baton: job run report: EINVAL: unknown parameter "colour"; the job\'s parameters are day, region\n',
    "without a near name, only the list")
  _, err, code = cli("job", "run", "report", "--param", "region")
  T.is(code, 2, "--param without =: usage error")
  T.like(err, '^baton: job run: %-%-param needs k=v, not "region"\nusage: baton job run NAME ', "says so")
  _, err, code = cli("job", "run", "report", "--param", "region=a", "--param", "region=b")
  T.is(code, 2, "the same parameter twice: usage error")
  T.is(assert(e:get(P .. "trigger/", { prefix = true, count_only = true })).count, 0, "nothing was queued")

  c:put_job("plain", 'return { schedule = "@manual", run = function(ctx) assert(next(ctx.params) == nil) end }')
  _, err, code = cli("job", "run", "plain", "--param", "x=1")
  T.is(code, 1, "a parameter for a job without params: exit 1")
  T.like(err, "; the job declares no params\n$", "says the job has none")
end

-- 4. A scheduled run gets the defaults.
do
  F.write(out .. "/.keep", "")
  local r2 = c:put_job("report", SRC:format("@every 1s", out))
  T.ok(c:loaded("report", r2), "the nodes loaded the scheduled version")
  local rec = N.wait(15, function()
    for _, r in ipairs(c:records("report")) do
      if not r.manual and r.state == "succeeded" then return r end
    end
  end)
  T.ok(rec, "a scheduled run succeeded")
  local p = rec and got(rec.fire)
  T.is(p and p.region .. "|" .. p.day, "eu|", "with the defaults in ctx.params")
  T.is(rec and rec.params and rec.params.region, "eu", "and in its record")
  cli("job", "pause", "report")
end

-- 5. job show and baton check list the parameters; job put refuses bad ones.
do
  local o = cli("check", c.dir .. "/report.lua")
  T.like(o, "^ok: job report, .-, labels zone=a, params day,region\n", "baton check names the params")
  o = cli("job", "show", "report")
  T.like(o, '\nparams: +day="" region="eu" %(defaults; baton job run %-%-param k=v%)\n', "job show lists the params")
  local f = c.dir .. "/badparams.lua"
  F.write(f, 'return { schedule = "@manual", params = { region = 1 }, run = function() end }')
  local _, err, code = cli("job", "put", f)
  T.is(code, 1, "job put of a job with a non-string default: exit 1")
  T.like(err, "EINVAL: job badparams: field 'params': the default of \"region\" must be a string, got number\n$",
    "names the field and the parameter")
end

c:destroy()
T.done()
