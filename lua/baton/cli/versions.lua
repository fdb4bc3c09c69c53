-- `baton job|policy versions|diff|rollback` (lua/baton/versions.lua keeps
-- the log; baton.ops reads it): the subcommands, usages, helps and flags
-- that cli/job.lua and cli/policy.lua add to their own.
local baton = require "baton"
local U = require "baton.cli.util"
local job = require "baton.job"
local ops = require "baton.ops"

local format = string.format

-- The usages, helps and flags of kind's subcommands, into d.
local function describe(kind, d)
  local cmd = "baton " .. kind
  d.usages.versions = cmd .. " versions NAME [--json]"
  d.usages.diff = cmd .. " diff NAME REV1 [REV2]"
  d.usages.rollback = cmd .. " rollback NAME REV [--sign KEY [--trust PUBKEY|DIR ...]] [--author WHO] "
    .. "[--keep-versions N] [--from-log] [--json]"
  d.helps.versions = format([[The %s's version log, newest first: revision, time, author, op, SHA-256
(its first 12 hex digits; --json gives all 64 and the rest), and CHECKED:
whether the entry matches what etcd itself stored at that revision ("ok";
"MISMATCH": the log was rewritten, trust etcd's history; "compacted": etcd
no longer has it, so the entry cannot be checked). Each put and rm through
baton records one, with --author (default: the etcd user when etcd auth is
on, else $USER@host); the last 20 are kept (put --keep-versions N). A
source stored without baton (a raw etcdctl put) shows author "unknown".]], kind)
  d.helps.diff = format([[A unified diff (diff -u) of the sources stored at revisions REV1 and REV2;
without REV2, from REV1 to the source stored now (baton %s versions NAME
lists the revisions).]], kind)
  d.helps.rollback = format([[Puts the source stored at revision REV back at <prefix>%s/NAME through
the normal put path (validated as put does), recorded as a new version with
op "rollback of REV", and prints the diff from the current source to it.
The source is etcd's own history of the key at REV, and the version log's
entry must match it (a rewritten log is refused). Once etcd has compacted
REV away only the log has it, which nothing can check: --from-log uses it
all the same (review the diff first; it is never signed). --sign KEY signs
it for where it goes now (nodes started with --trust run only code signed
by a key they trust; docs/security.md), but only a version that KEY, or a
public key of --trust (older keys), signed: anyone who can write etcd can
store a version, and --sign must not make it yours. Without --sign, the
old version's signature is dropped, as it held only where it was.]], kind == "job" and "jobs" or "policies")
  d.usages.sign = cmd .. " sign FILE.lua --sign KEY [--name NAME] [-o OUT]"
  d.helps.sign = format([[Checks FILE.lua as put does and prints it signed by KEY for the next version
of <prefix>%s/NAME (creating the key with a placeholder, which nodes
ignore, if there is none): whoever stores it next without a key (baton %s
put OUT, or PUT /api/v1/%s/NAME) stores a source that nodes started with
--trust load. A signature holds only there: once another put comes first,
sign again. -o OUT writes it to OUT instead of standard output.]],
    kind == "job" and "jobs" or "policies", kind, kind == "job" and "jobs" or "policies")
  d.flags.sign = { sign = "string", name = "string", o = "string" }
  d.flags.versions = { json = "flag" }
  d.flags.diff = {}
  d.flags.rollback = { sign = "string", author = "string", ["keep-versions"] = "count", json = "flag",
                       ["from-log"] = "flag", trust = "list" }
  for _, s in ipairs { "sign", "versions", "diff", "rollback" } do d.order[#d.order + 1] = s end
end

local SUB = {} -- the subcommands: fn(kind, d, pos, opts)

local function name_of(kind, d, pos, n)
  local name = pos[2]
  if not name then return d.usage("needs a NAME") end
  if pos[n + 3] then return d.usage("unexpected argument \"" .. pos[n + 3] .. "\"") end
  if not job.valid_name(name) then
    return d.usage(format("invalid %s name \"%s\" (%s)", kind, name, U.NAME_RULE))
  end
  return name
end
local function rev_of(d, s)
  if not s then return d.usage("needs a revision") end
  local r = s:match("^%d+$") and tonumber(s)
  if not r or r < 1 then return d.usage(format("a revision is a whole number >= 1, not \"%s\"", s)) end
  return r
end

function SUB.sign(kind, d, pos, opts)
  if not opts.sign then return d.usage("needs --sign KEY (the secret key, baton keygen)") end
  local name, source, file = U.put_args(pos, opts, kind, d.usage, d.die)
  local secret, serr = U.signing_key(opts)
  if serr then return d.die("sign", name, serr) end
  local r, err, code, extra = ops.sign_source(kind, name, source, secret, file)
  if not r then return d.die("sign", ((extra and extra.invalid) or code == "EFBIG") and file or name, err) end
  if opts.o then
    local f, ferr = io.open(opts.o, "wb")
    if not f then return d.die("sign", name, "-o: " .. tostring(ferr)) end
    f:write(r.source)
    f:close()
    io.stderr:write(format("baton: %s sign %s: signed by key %s for version %d of %s; wrote %s\n", kind,
      name, r.signed_by, r.version, r.key, opts.o))
  else
    io.stdout:write(r.source)
  end
  baton.exit(0)
end

function SUB.versions(kind, d, pos, opts)
  local name = name_of(kind, d, pos, 0)
  local list, err = ops.versions(kind, name)
  if not list then return d.die("versions", name, err) end
  if opts.json then
    U.print_json(list)
    return baton.exit(0)
  end
  local rows = {}
  for _, v in ipairs(list) do
    rows[#rows + 1] = {
      tostring(v.revision) .. (v.current and " *" or ""),
      type(v.time) == "number" and U.rfc3339(v.time) or "-", tostring(v.author or "unknown"),
      tostring(v.op or "-"), type(v.sha256) == "string" and v.sha256:sub(1, 12) or "-",
      v.checked == "mismatch" and "MISMATCH" or tostring(v.checked or "-"),
    }
  end
  U.print_table({ "REVISION", "TIME", "AUTHOR", "OP", "SHA256", "CHECKED" }, rows, nil,
    { flex = { 3, 4 }, color = { [6] = U.state_color } })
  baton.exit(0)
end

function SUB.diff(kind, d, pos)
  local name = name_of(kind, d, pos, 2)
  local r1, r2 = rev_of(d, pos[3]), pos[4] and rev_of(d, pos[4])
  if not r2 then
    -- One revision: against the current source, at its revision.
    local cur, cerr = ops.current_revision(kind, name)
    if cur == nil then return d.die("diff", name, cerr) end
    if not cur then
      return d.die("diff", name, format("ENOENT: no %s %s is stored now to compare revision %d with; "
        .. "give two revisions (baton %s versions %s lists them)", kind, name, r1, kind, name))
    end
    r2 = cur
  end
  local text, err = ops.diff_versions(kind, name, r1, r2)
  if not text then return d.die("diff", name, err) end
  io.stdout:write(U.escape(text, true))
  baton.exit(0)
end

function SUB.rollback(kind, d, pos, opts)
  local name = name_of(kind, d, pos, 1)
  local rev = rev_of(d, pos[3])
  local secret, serr = U.signing_key(opts)
  if serr then return d.die("rollback", name, serr) end
  local trust
  if opts.trust and #opts.trust > 0 then
    local terr
    trust, terr = require("baton.sign").load_trust(opts.trust)
    if not trust then return d.die("rollback", name, terr) end
  end
  local r, err = ops.rollback(kind, name, rev, { author = opts.author, keep = opts["keep-versions"],
                                                 sign = secret, trust = trust, from_log = opts["from-log"] })
  if not r then return d.die("rollback", name, err) end
  if opts.json then
    U.print_json(r)
    return baton.exit(0)
  end
  io.stdout:write(r.diff ~= "" and r.diff or "(the same source as now)\n")
  io.stdout:write(format("rolled %s %s back to revision %d: %s (revision %d)%s%s\n", kind, name, rev, r.key,
    r.revision, r.from == "log" and ", from the version log's unchecked copy" or "",
    r.signed_by and (", signed by key " .. r.signed_by) or ""))
  io.stdout:flush()
  for _, w in ipairs(r.warnings or {}) do
    io.stderr:write(format("baton: %s rollback %s: warning: %s\n", kind, name, w))
  end
  baton.exit(0)
end

-- add(kind, d): adds the subcommands versions, diff, rollback and sign of
-- kind ("job" | "policy") to d = {sub, usages, helps, flags, order}, with
-- d.usage(msg) and d.die(sub, what, err) of the command.
return function(kind, d)
  describe(kind, d)
  for name, fn in pairs(SUB) do
    d.sub[name] = function(pos, opts) return fn(kind, d, pos, opts) end
  end
end
