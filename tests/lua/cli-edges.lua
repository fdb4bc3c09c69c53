-- The CLI's rough edges, each seen by an operator, each with its message
-- and exit status: --help and baton help for every command, missing jobs,
-- an empty prefix, job put's refusals and warnings (unknown policy, no
-- node with the labels, a file over etcd's request limit), etcd
-- authentication without credentials, the guide's raw etcdctl put, and
-- job ls of a broken job that the nodes still run a good version of; and
-- issue 23's: the top-level help, version --bogus, a missing token file,
-- completion of node flags, job diff of one revision, the author without $USER.
local T = require "tap"
local _ -- results a check ignores
local N = require "nodes"
local F = require "files"
local H = require "etcdh"
local bin = os.getenv("BATON_BIN") or "bin/baton"
local eps = os.getenv("BATON_ENDPOINTS")

local c = N.new("cliedges")
local e, P = c.e, c.P

local function lit(s) return (s:gsub("%p", "%%%0")) end

-- Runs baton on the test's prefix; returns stdout, stderr, status.
local function cli(...)
  local args = { bin, "--endpoints", eps, "--prefix", P, timeout = 60 }
  for _, a in ipairs { ... } do args[#args + 1] = a end
  local r = assert(baton.exec(args))
  return r.stdout, r.stderr, r.code
end

local function file(name, text)
  local path = c.dir .. "/" .. name
  F.write(path, text)
  return path
end

-- 1. --help and baton help, for every command: usage on stdout, exit 0.
do
  local cmds = {
    { "version" }, { "eval" }, { "cron" }, { "lock" }, { "node" }, { "elect" }, { "check" },
    { "job" }, { "policy" }, { "queue" }, { "nodes" }, { "leader" }, { "worker" },
  }
  for _, sub in ipairs { "put", "ls", "show", "rm", "run", "kill", "pause", "resume", "history" } do
    cmds[#cmds + 1] = { "job", sub }
  end
  for _, sub in ipairs { "put", "ls", "show", "rm" } do cmds[#cmds + 1] = { "policy", sub } end
  cmds[#cmds + 1] = { "queue", "push" }
  for _, cmd in ipairs(cmds) do
    local name = table.concat(cmd, " ")
    local usage = "^usage: baton " .. lit(name)
    for _, form in ipairs {
      { args = { cmd[1], cmd[2], "--help" }, what = name .. " --help" },
      { args = { "help", cmd[1], cmd[2] }, what = "help " .. name },
    } do
      local args = {}
      for i = 1, 3 do if form.args[i] then args[#args + 1] = form.args[i] end end
      local out, err, code = cli(unpack(args))
      T.ok(code == 0 and err == "" and out:find(usage) ~= nil,
        ("baton %s: usage on stdout, exit 0 (%s%s)"):format(form.what, code, err ~= "" and ", " .. err or ""))
    end
  end
  local out, _, code = cli("node", "--help")
  T.is(code, 0, "node --help")
  T.like(out, "%-%-history N +run records kept per job", "node --help explains --history")
  out, _, code = cli("job", "run", "NAME", "-h")
  T.is(code, 0, "-h works too, after arguments")
  T.like(out, "%-%-param k=v", "job run --help tells of --param")
  out, _, code = cli("help")
  T.is(code, 0, "baton help: exit 0")
  T.like(out, "\n  job kill NAME %[ID%] ", "baton help lists job kill")
  local _, err
  _, err, code = cli("help", "frobnicate")
  T.is(code, 2, "help of an unknown command: usage error")
  T.like(err, '^baton: unknown command "frobnicate"\n', "says so")
  _, err, code = cli("job", "help", "frobnicate")
  T.is(code, 2, "job help of an unknown subcommand: usage error")
  -- After FILE, --help is the script's.
  local s = file("args.lua", 'print(arg[1]); baton.exit(0)')
  out, _, code = cli("eval", s, "--help")
  T.is(code .. "|" .. out, "0|--help\n", "eval FILE --help: --help is the script's argument")
  -- After --, --help is CMD's.
  out, _, code = cli("lock", P .. "lk", "--", "printf", "%s\n", "--help")
  T.is(code .. "|" .. out, "0|--help\n", "lock NAME -- CMD --help: --help is CMD's")
end

-- 2. An empty prefix, missing jobs.
do
  local out, err, code = cli("job", "ls")
  T.is(code .. "|" .. out, "0|", "job ls of an empty prefix: exit 0, nothing on stdout")
  T.is(err, "baton: job ls: no jobs under " .. P .. "jobs/ (is --prefix right?)\n", "says so, suggests --prefix")
  out, err, code = cli("nodes")
  T.is(code .. "|" .. out, "0|", "nodes of an empty prefix: exit 0, nothing on stdout")
  T.is(err, "baton: nodes: no live nodes under " .. P .. "nodes/ (is --prefix right?)\n", "says so")
  out, err, code = cli("job", "ls", "--json")
  T.is(code .. "|" .. out .. "|" .. err, "0|[]\n|", "job ls --json: [] and nothing else")
  local hint = " (there are no jobs under " .. P .. "jobs/ at all; is --prefix right?)"
  out, err, code = cli("job", "history", "nosuch")
  T.is(code .. "|" .. out, "1|", "history of a missing job: exit 1")
  T.is(err, "baton: job history nosuch: ENOENT: no job nosuch at " .. P .. "jobs/nosuch" .. hint .. "\n",
    "names it, and hints at --prefix when the prefix is empty")
  _, err, code = cli("job", "show", "nosuch")
  T.is(code, 1, "show of a missing job: exit 1")
  T.is(err, "baton: job show nosuch: ENOENT: no job nosuch at " .. P .. "jobs/nosuch" .. hint .. "\n", "names it")
  c:put_job("there", 'return { schedule = "@manual", run = function() end }')
  _, err, code = cli("job", "history", "nosuch")
  T.is(err, "baton: job history nosuch: ENOENT: no job nosuch at " .. P .. "jobs/nosuch\n",
    "no --prefix hint once the prefix has jobs")
  out, err, code = cli("job", "history", "there")
  T.is(code .. "|" .. out, "0|", "history of a job without runs: exit 0")
  T.is(err, "baton: job history there: no runs of job there yet\n", "says so")
end

-- 3. job put: unknown policy, labels no live node has, too large a file.
do
  local hsah = file("hsah.lua", 'return { schedule = "@manual", policy = "hsah", run = function() end }')
  local out, err, code = cli("job", "put", hsah)
  T.is(code .. "|" .. out, "1|", "put with an unknown policy: exit 1")
  T.is(err, "baton: job put " .. hsah .. ': EINVAL: job hsah: field \'policy\': no policy "hsah": none is stored at '
    .. P .. 'policies/hsah nor built in (did you mean "hash"?)\n', "refused, with the closest name")
  T.is(assert(e:get(P .. "jobs/hsah")).count, 0, "nothing written")
  assert(e:put(P .. "policies/nearby", "return { claim_delay = function() return 0 end }"))
  local near = file("near.lua", 'return { schedule = "@manual", policy = "nearby", run = function() end }')
  out, err, code = cli("job", "put", near)
  T.is(code, 0, "put with a stored policy: exit 0")
  local nerby = file("nerby.lua", 'return { schedule = "@manual", policy = "nerby", run = function() end }')
  _, err = cli("job", "put", nerby)
  T.like(err, '%(did you mean "nearby"%?%)\n$', "a stored policy is suggested too")

  local eu = file("eu.lua", 'return { schedule = "@manual", labels = { region = "eu" }, run = function() end }')
  out, err, code = cli("job", "put", eu)
  T.is(code, 0, "put with no live node: exit 0")
  T.like(out, "^created job eu ", "stored")
  T.is(err, "baton: job put eu: warning: no node is live under " .. P .. "nodes/ (is a node running, with this "
    .. "--prefix?); the job runs only once such a node is up\n", "warns that no node is live")
  local lease = assert(e:grant(30))
  assert(e:put(P .. "nodes/n-x", baton.json.encode { name = "n-x", labels = { role = "db" } }, { lease = lease }))
  _, err, code = cli("job", "put", eu)
  T.is(err, "baton: job put eu: warning: no live node has the labels region=eu (live: n-x (role=db)); "
    .. "the job runs only once such a node is up\n", "warns that no live node has the job's labels")
  assert(e:put(P .. "nodes/n-y", baton.json.encode { name = "n-y", labels = { region = "eu" } }, { lease = lease }))
  _, err, code = cli("job", "put", eu)
  T.is(code .. "|" .. err, "0|", "no warning once a live node has them")
  assert(lease:revoke())

  -- A 200 MB file is refused at once, without being read.
  local big = c.dir .. "/big.lua"
  assert(baton.exec { "truncate", "-s", "200M", big })
  local t0 = baton.monotime()
  local r = assert(baton.exec { "/usr/bin/time", "-f", "%M", bin, "--endpoints", eps, "--prefix", P,
                                "job", "put", big, timeout = 60 })
  local took = baton.monotime() - t0
  T.is(r.code, 1, "put of a 200 MB file: exit 1")
  local first = r.stderr:match("^[^\n]*")
  T.is(first, "baton: job put " .. big .. ": EFBIG: " .. big .. " is 200.0 MiB, larger than etcd's request limit "
    .. "of 1.5 MiB (etcd's default --max-request-bytes); nothing was sent", "with the limit in the message")
  local kb = tonumber(r.stderr:match("\n(%d+)\n$"))
  T.ok(kb and kb < 100 * 1024, ("without reading it: max RSS %s KiB"):format(tostring(kb)))
  T.ok(took < 5, ("at once (%.2f s)"):format(took))
  -- Just under the limit is fine, and etcd takes it: the limit is etcd's.
  local limit = 1572864 - #(P .. "jobs/edge") - 512
  local src = 'return { schedule = "@manual", run = function() end }\n'
  local edge = file("edge.lua", src .. "--" .. ("x"):rep(limit - #src - 3) .. "\n")
  out, err, code = cli("job", "put", edge)
  T.is(code, 0, "a file at the limit is stored")
  if code ~= 0 then T.diag(err) end
  local over = file("over.lua", src .. "--" .. ("x"):rep(limit - #src - 2) .. "\n")
  _, err, code = cli("job", "put", over)
  T.is(code, 1, "one byte more is refused")
  T.like(err, "EFBIG: .-over%.lua is 1%.5 MiB, larger than etcd's request limit of 1%.5 MiB", "saying so")
  _, err, code = cli("policy", "put", big)
  T.is(code, 1, "policy put of a 200 MB file: exit 1")
  T.like(err, "EFBIG: .- is 200%.0 MiB, larger than etcd's request limit", "refused the same way")
  os.remove(big)
end

-- 4. The guide's raw put: etcdctl put KEY < FILE stores the file as it is;
-- "$(cat FILE)" does not (a job file starts with "--").
do
  local src = "-- report.lua: a job\nreturn { schedule = \"@manual\", run = function() end }\n"
  local f = file("report.lua", src)
  local r = assert(baton.exec { "sh", "-c", ("etcdctl --endpoints %q put %q < %q"):format(eps, P .. "jobs/report", f),
                                timeout = 30 })
  T.is(r.code, 0, "etcdctl put KEY < report.lua works")
  local kv = assert(e:get(P .. "jobs/report")).kvs[1]
  T.is(kv and kv.value, src, "and stores the file byte for byte")
  r = assert(baton.exec { "sh", "-c", ('etcdctl --endpoints %q put %q "$(cat %q)"'):format(eps, P .. "jobs/report2", f),
                          timeout = 30 })
  T.isnt(r.code, 0, "etcdctl put KEY \"$(cat report.lua)\" fails, as the guide says")
  T.is(assert(e:get(P .. "jobs/report2")).count, 0, "and stores nothing")
end

-- 5. A broken raw put: job ls shows the schedule, next instant and
-- revision of the version the node still runs.
do
  local good = c:put_job("daily", [[
return { schedule = "30 6 * * *", timezone = "Europe/Paris", run = function() end }]])
  c:start("n1", 3)
  T.ok(c:loaded("daily", good), "the node loaded the good version")
  local bad = assert(e:put(P .. "jobs/daily", 'return { schedule = "every day", run = function() end }')).revision
  T.ok(N.wait(10, function()
    local kv = assert(e:get(P .. "status/daily/n1")).kvs[1]
    local st = kv and baton.json.decode(kv.value)
    return st and st.revision == bad and st.error ~= baton.json.null
  end), "the node reported the broken version")
  local out, _, code = cli("job", "ls")
  T.is(code, 0, "job ls: exit 0")
  T.like(out, "\ndaily +30 6 %* %* %* +Europe/Paris +%d%d%d%d%-%d%d%-%d%dT06:30:00%+0%d:00 +broken %(runs rev "
    .. good .. "%) +%-\n", "a broken job: the running version's schedule, zone, next instant and revision")
  out = cli("job", "show", "daily")
  T.like(out, "\nrunning: +revision " .. good .. ", the last good version", "job show says which version runs")
  T.like(out, "\nschedule: +30 6 %* %* %* %(Europe/Paris%)\n", "and shows its spec")
  T.like(out, "\nerror: +EINVAL: job daily: field 'schedule'", "and the error")
  local j = baton.json.decode((cli("job", "ls", "--json")))
  local d
  for _, x in ipairs(j or {}) do if x.name == "daily" then d = x end end
  T.is(d and d.running_revision, good, "job ls --json: running_revision")
end

-- 7. Issue 23's rough edges: the top-level help, version's arguments, a
-- missing token file, completion of a command's own flags, a diff of one
-- revision, and the author without $USER.
do
  local out, err, code = cli("help")
  T.is(code, 0, "baton help: exit 0")
  T.like(out, "\n  job logs NAME %[ID%] %[%-%-attempt N%] %[%-f%]", "baton help lists job logs")
  T.like(out, "\n  job run NAME .-%[%-%-wait%]", "and job run --wait")
  T.like(out, "\n  %-%-json: ", "and --json")
  T.like(out, "%-%-http ADDR %[%-%-http%-token%-file F%]", "and node --http")
  out, err, code = cli("version", "--bogus")
  T.is(code .. "|" .. out, "2|", "version --bogus: usage error, exit 2 (it printed the version)")
  T.is(err, 'baton: version: unknown flag "--bogus"\nusage: baton version\n', "says so")
  _, err, code = cli("version", "extra")
  T.is(code .. "|" .. err, '2|baton: version: unexpected argument "extra"\nusage: baton version\n',
    "version with an argument: usage error")
  out, _, code = cli("version")
  T.like(code .. "|" .. out, "^0|baton %S+\n$", "version alone: as before")

  -- A token file that is not there is not a permission problem.
  local function node(...)
    local args = { bin, "--endpoints", eps, "--prefix", P, "node", "--name", "tok", "--ttl", "3",
                   "--http", "127.0.0.1:0", timeout = 30 }
    for _, a in ipairs { ... } do args[#args + 1] = a end
    return assert(baton.exec(args))
  end
  local r = node("--http-token-file", c.dir .. "/nonexistent")
  T.is(r.code, 1, "--http-token-file of a missing file: exit 1")
  T.is(r.stderr, "baton: node tok: ENOENT: --http-token-file " .. c.dir .. "/nonexistent: No such file or directory\n",
    "says no such file (it said EACCES)")
  r = node("--http-token-file", c.dir)
  T.is(r.stderr, "baton: node tok: EISDIR: --http-token-file " .. c.dir .. ": is a directory\n",
    "a directory: says so")

  -- Completion offers a command's own flags, not those its help names
  -- (node's help tells of `job put --sign`).
  local root = os.getenv("BATON_ROOT") or "."
  local function completes(...)
    local args = { "bash", "-c", [[
      source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _baton; echo "${COMPREPLY[*]}"]],
      root .. "/tools/dist/baton.bash-completion", bin, timeout = 30 }
    for _, a in ipairs { ... } do args[#args + 1] = a end
    local r = assert(baton.exec(args))
    return " " .. r.stdout:gsub("\n$", "") .. " "
  end
  local words = completes("node", "--")
  T.ok(not words:find(" --sign ", 1, true), "completion: node -- does not offer --sign")
  T.ok(words:find(" --secrets-dir ", 1, true) and words:find(" --http-token-file ", 1, true),
    "completion: node -- offers node's flags")
  T.ok(completes("job", "put", "--"):find(" --sign ", 1, true), "completion: job put -- offers --sign")
  T.ok(completes("job", "run", "--"):find(" --wait ", 1, true), "completion: job run -- offers --wait")
  T.ok(not completes("nodes", "--"):find(" --max-skew ", 1, true), "completion: nodes offers no --max-skew")

  -- job diff NAME REV: from REV to the current source.
  local f = file("dj.lua", 'return { schedule = "@manual", run = function() return 1 end }\n')
  cli("job", "put", f)
  local r1 = assert(e:get(P .. "jobs/dj")).kvs[1].mod_revision
  F.write(f, 'return { schedule = "@manual", run = function() return 2 end }\n')
  cli("job", "put", f)
  local r2 = assert(e:get(P .. "jobs/dj")).kvs[1].mod_revision
  out, err, code = cli("job", "diff", "dj", tostring(r1))
  T.is(code, 0, "job diff NAME REV: exit 0 (it was a usage error) " .. err)
  T.like(out, "^%-%-%- dj@" .. r1 .. "\n%+%+%+ dj@" .. r2 .. "\n.*\n%-return .-return 1 end }\n%+return .-return 2 end }\n$",
    "a diff from REV to the current revision")
  T.is(cli("job", "diff", "dj", tostring(r1), tostring(r2)), out, "the same as naming both")
  out, _, code = cli("job", "diff", "dj", tostring(r2))
  T.is(code .. "|" .. out, "0|", "the current revision: no difference")
  cli("job", "rm", "dj")
  _, err, code = cli("job", "diff", "dj", tostring(r1))
  T.is(code, 1, "a removed job: exit 1")
  T.like(err, "no job dj is stored now to compare revision " .. r1 .. " with; give two revisions", "says so")

  -- Without $USER or $LOGNAME, the author is the uid's name, not "unknown".
  local me = assert(baton.exec { "id", "-un" }).stdout:gsub("\n$", "")
  local host = F.read("/proc/sys/kernel/hostname"):gsub("\n$", "")
  F.write(f, 'return { schedule = "@manual", run = function() return 3 end }\n')
  r = assert(baton.exec { bin, "--endpoints", eps, "--prefix", P, "job", "put", f, "--json",
                          env = { USER = false, LOGNAME = false }, timeout = 30 })
  T.is(r.code, 0, "put without $USER")
  local v = baton.json.decode((cli("job", "versions", "dj", "--json")))
  T.is(v and v[1] and v[1].author, me .. "@" .. host, "the author is the uid's name @ host (it was unknown@host)")
end

c:destroy()

-- 6. etcd with authentication on: no credentials, no password, a wrong one.
do
  local srv = H.start("--auth")
  local function run(...)
    local args = { bin, "--endpoints", srv.url, timeout = 30, env = { BATON_USER = false, BATON_PASSWORD = false } }
    for _, a in ipairs { ... } do args[#args + 1] = a end
    return assert(baton.exec(args))
  end
  local ep = lit(srv.url)
  local r = run("job", "ls")
  T.is(r.code, 1, "auth on, no credentials: exit 1")
  T.is(r.stderr, "baton: job ls: EAUTH: etcd " .. srv.url .. ": etcd requires authentication: give "
    .. "--user/--password or BATON_USER/BATON_PASSWORD\n", "says what to give")
  r = run("--password", "batonpw", "nodes")
  T.like(r.stderr, "^baton: nodes: EAUTH: etcd " .. ep .. ": etcd requires authentication: a password was given "
    .. "without a user: give %-%-user or BATON_USER too\n$", "a password without a user: says so")
  r = run("--user", "baton", "job", "ls")
  T.is(r.code, 1, "a user without a password: exit 1")
  T.is(r.stderr, "baton: job ls: EAUTH: etcd " .. srv.url .. ': authentication failed for user "baton": '
    .. "no password given: give --password or BATON_PASSWORD\n", "says no password was given")
  r = run("--user", "baton", "--password", "nope", "job", "ls")
  T.is(r.code, 1, "a wrong password: exit 1")
  T.is(r.stderr, "baton: job ls: EAUTH: etcd " .. srv.url .. ': authentication failed for user "baton": '
    .. "wrong user name or password\n", "says so")
  r = run("--user", "baton", "--password", "batonpw", "job", "ls")
  T.is(r.code, 0, "the right password: exit 0")
  local wf = os.tmpname()
  F.write(wf, 'local w, err = baton.etcd:watch("/x"); if w then _, err = w:next(5) end; print(err)')
  local w = assert(baton.exec { bin, "--endpoints", srv.url, "eval", wf, timeout = 30,
                                env = { BATON_USER = false, BATON_PASSWORD = false } })
  os.remove(wf)
  T.like(w.stdout, "etcd requires authentication: give %-%-user/%-%-password", "a watch says the same")
  srv:destroy()
end

T.done()
