-- baton node [--name ID] [--ttl S] [--workers N] [--labels k=v,...] [--max-skew S]
--            [--http ADDR [--http-token-file F] [--http-cert F --http-key F]
--             [--http-allow-host NAME ...]]
--            [--run-memory SIZE]
-- Runs a scheduler node until SIGINT/SIGTERM (see lua/baton/node/init.lua).
-- --http: the node's HTTP face (node/http.lua, docs/api.md).
-- --max-skew: seconds this node's clock may be off the cluster's before it
-- warns and is flagged in baton nodes (default 0.5; node/clock.lua).
-- --run-as USER: a node started as root runs its workers (and so every
-- job) as USER (node/pool.lua; docs/security.md, "Secrets").
local baton = require "baton"
local A = require "baton.cli.args"

local USAGE = "baton node [--name ID] [--ttl S] [--workers N] [--labels k=v,...] [--history N] [--max-skew S]\n"
  .. "                  [--http ADDR [--http-token-file F] [--http-cert F --http-key F]\n"
  .. "                   [--http-allow-host NAME ...]]\n"
  .. "                  [--trust PUBKEY|DIR ...] [--secrets-dir DIR] [--run-as USER] [--run-memory SIZE]"
local HELP = [[Runs a scheduler node until SIGINT or SIGTERM (which stop its runs in order).
  --name ID       unique among live nodes (default: the host name)
  --ttl S         the node's lease in seconds (default 10): a dead node's
                  runs are taken over within TTL + 1 s
  --workers N     runs at once on this node (default 16)
  --labels k=v,.. what this machine is; a job with labels runs only on
                  nodes having all of them
  --history N     run records kept per job, the newest (default 100); the
                  cluster leader deletes older ones
  --max-skew S    clock offset against the cluster's, in seconds, beyond
                  which the node warns and is flagged in baton nodes
                  (default 0.5)
  --http ADDR     serve /metrics, /healthz, /readyz, the dashboard (/) and
                  the REST API (/api/v1/, docs/api.md) on ADDR: HOST:PORT,
                  [::1]:PORT or :PORT (all interfaces); off when not given
  --http-token-file F
                  the API's writes (PUT, POST, DELETE) need the header
                  Authorization: Bearer TOKEN, TOKEN being F's first line;
                  without it the API is read-only
  --http-cert F --http-key F
                  serve HTTPS with this certificate and key (PEM files)
  --http-allow-host NAME
                  also answer requests whose Host header names NAME (a DNS
                  name the node is reached by: a proxy's, a Service's);
                  may be given again. Without it the node answers only to
                  localhost, 127.0.0.1, [::1], its listen address, and any
                  IP address when it listens on all interfaces: another
                  name gets 421 (no DNS rebinding; docs/security.md)
  --trust PUBKEY|DIR
                  load only jobs and policies signed (job put --sign) by one
                  of these public keys: a FILE.pub of baton keygen, or a
                  directory of *.pub files; may be given again (several
                  keys at once: rotation). Anything else is refused and the
                  last good version keeps running (docs/security.md).
                  Without it the node runs unsigned code, and baton nodes
                  says so
  --secrets-dir DIR
                  a job's secrets (secrets = {"NAME", ...}) are read from
                  DIR/NAME (its trailing newline removed), else from the
                  node's environment; never stored in etcd, and redacted
                  from the output and logs of its runs. A file DIR/NAME.jobs
                  (one job name a line) restricts NAME to those jobs
  --run-as USER   (a node started as root) run the workers, and so every
                  job and what it starts, as USER (its uid, primary group
                  and home), so that jobs cannot read what only the node's
                  user may: --secrets-dir, --trust, /etc/default/baton
  --run-memory SIZE
                  the memory limit of a run whose job sets none (memory =
                  "512M"): 512M, 2G (K, M, G, T: powers of 1024) or bytes;
                  a run over it is killed with every process it started and
                  recorded failed "out of memory" (default: no limit)]]

-- The user of --run-as USER (a name or a uid): {name, uid, gid, home}, or
-- nil and why not (no such user, root, or a node not started as root).
local function run_as_user(u)
  local me = baton.exec { "id", "-u", timeout = 10 }
  if not me or me.code ~= 0 or me.stdout:match("^(%d+)") ~= "0" then
    return nil, "--run-as " .. u .. ": the node must be started as root to run its workers as another user"
  end
  local r = baton.exec { "getent", "passwd", u, timeout = 10 }
  local name, uid, gid, home = (r and r.code == 0 and r.stdout or ""):match("^([^:\n]*):[^:\n]*:(%d+):(%d+):[^:\n]*:([^:\n]*):")
  if not name then return nil, "--run-as " .. u .. ": no such user" end
  if uid == "0" then return nil, "--run-as " .. u .. ": that is root, as the node is: leave --run-as out" end
  return { name = name, uid = tonumber(uid), gid = tonumber(gid), home = home }
end

local function hostname()
  local f = io.open("/etc/hostname")
  local h = f and f:read("*l")
  if f then f:close() end
  return (h and h ~= "") and h or "node"
end

return function(...)
  baton.signal({ "SIGINT", "SIGTERM", "SIGHUP" }, 0)
  local opts, pos = A.parse("node", USAGE, { name = "string", ttl = "count",
    workers = "count", labels = "string", history = "count", ["max-skew"] = "number", http = "string",
    ["http-token-file"] = "string", ["http-cert"] = "string", ["http-key"] = "string",
    ["http-allow-host"] = "list", trust = "list",
    ["secrets-dir"] = "string", ["run-as"] = "string", ["run-memory"] = "string" }, { ... }, HELP)
  if pos[1] then return A.usage("node", USAGE, "unexpected argument \"" .. pos[1] .. "\"") end
  local http
  if opts.http then
    if opts.http == "" then return A.usage("node", USAGE, "--http needs an address, HOST:PORT") end
    if (opts["http-cert"] == nil) ~= (opts["http-key"] == nil) then
      return A.usage("node", USAGE, opts["http-cert"] and "--http-cert needs --http-key"
        or "--http-key needs --http-cert")
    end
    http = { addr = opts.http, token_file = opts["http-token-file"], cert_file = opts["http-cert"],
             key_file = opts["http-key"], allow_hosts = opts["http-allow-host"] }
    -- Its workers redact the token from what runs print, log and fail
    -- with (worker/secrets.lua): they read it from the file, whose path they
    -- inherit in BATON_HTTP_TOKEN_FILE. The path, not the token: a job
    -- runs as the node's user and could read the file anyway (the path is
    -- in the node's command line), but the programs it starts, which
    -- inherit the environment too, are not handed the token itself.
    if opts["http-token-file"] then baton._setenv("BATON_HTTP_TOKEN_FILE", opts["http-token-file"]) end
  else
    for _, f in ipairs { "http-token-file", "http-cert", "http-key", "http-allow-host" } do
      if opts[f] then return A.usage("node", USAGE, "--" .. f .. " goes with --http ADDR") end
    end
  end
  local name = opts.name or hostname()
  if not name:match("^[%w][%w_.-]*$") then
    return A.usage("node", USAGE, "--name: letters, digits, '_', '.', '-' expected, not \"" .. name .. "\"")
  end
  local labels = {}
  for pair in (opts.labels or ""):gmatch("[^,]+") do
    local k, v = pair:match("^%s*([%w_.-]+)=([^,]*)$")
    if not k then return A.usage("node", USAGE, "--labels: k=v,... expected, not \"" .. pair .. "\"") end
    labels[k] = v
  end
  local trust
  if opts.trust and #opts.trust > 0 then
    local terr
    trust, terr = require("baton.sign").load_trust(opts.trust)
    if not trust then return A.die("node " .. name .. ": " .. terr) end
  end
  local secrets_dir = opts["secrets-dir"]
  if secrets_dir then
    if secrets_dir == "" then return A.usage("node", USAGE, "--secrets-dir needs a directory") end
    local ok, derr = require("baton.node.secrets").check_dir(secrets_dir)
    if not ok then return A.die("node " .. name .. ": " .. derr) end
  end
  local run_memory
  if opts["run-memory"] then
    local merr
    run_memory, merr = require("baton.limits").parse(opts["run-memory"])
    if not run_memory then return A.usage("node", USAGE, "--run-memory: " .. merr) end
  end
  local run_as
  if opts["run-as"] then
    if opts["run-as"] == "" then return A.usage("node", USAGE, "--run-as needs a user") end
    local rerr
    run_as, rerr = run_as_user(opts["run-as"])
    if not run_as then return A.die("node " .. name .. ": " .. rerr) end
  end
  local ok, err = require("baton.node").run { name = name, ttl = opts.ttl, labels = labels,
                                             workers = opts.workers, history = opts.history,
                                             max_skew = opts["max-skew"], http = http, trust = trust,
                                             secrets_dir = secrets_dir, run_memory = run_memory,
                                             run_as = run_as }
  if not ok then return A.die(err) end
  baton.exit(0)
end
