-- `baton job|policy versions|diff|rollback` (lua/baton/versions.lua keeps
-- the log; baton.ops reads it): the subcommands, usages, helps and flags
-- that cli/job.lua and cli/policy.lua add to their own.
local baton = require "baton"
local U = require "baton.cli.util"
local job = require "baton.job"
local ops = require "baton.ops"

local format = string.format

-- add(kind, d): adds the three subcommands of kind ("job" | "policy") to
-- d = {sub, usages, helps, flags, order}, with d.usage(msg) and
-- d.die(sub, what, err) of the command.
return function(kind, d)
  local cmd = "baton " .. kind
  d.usages.versions = cmd .. " versions NAME [--json]"
  d.usages.diff = cmd .. " diff NAME REV1 REV2"
  d.usages.rollback = cmd .. " rollback NAME REV [--sign KEY] [--author WHO] [--keep-versions N] [--json]"
  d.helps.versions = format([[The %s's version log, newest first: revision, time, author, op, SHA-256
(its first 12 hex digits; --json gives all 64 and the rest). Each put and rm
through baton records one, with --author (default: the etcd user when etcd
auth is on, else $USER@host); the last 20 are kept (put --keep-versions N).
A source stored without baton (a raw etcdctl put) shows author "unknown".]], kind)
  d.helps.diff = "A unified diff (diff -u) of the sources stored at revisions REV1 and REV2."
  d.helps.rollback = format([[Puts the source stored at revision REV back at <prefix>%s/NAME through
the normal put path (validated as put does), recorded as a new version with
op "rollback of REV". --sign KEY signs it again (nodes started with --trust
run only code signed by a key they trust; docs/security.md).]], kind == "job" and "jobs" or "policies")
  d.flags.versions = { json = "flag" }
  d.flags.diff = {}
  d.flags.rollback = { sign = "string", author = "string", ["keep-versions"] = "count", json = "flag" }
  for _, s in ipairs { "versions", "diff", "rollback" } do d.order[#d.order + 1] = s end

  local function name_of(pos, n)
    local name = pos[2]
    if not name then return d.usage("needs a NAME") end
    if pos[n + 3] then return d.usage("unexpected argument \"" .. pos[n + 3] .. "\"") end
    if not job.valid_name(name) then
      return d.usage(format("invalid %s name \"%s\" (%s)", kind, name, U.NAME_RULE))
    end
    return name
  end
  local function rev_of(s)
    if not s then return d.usage("needs a revision") end
    local r = s:match("^%d+$") and tonumber(s)
    if not r or r < 1 then return d.usage(format("a revision is a whole number >= 1, not \"%s\"", s)) end
    return r
  end

  function d.sub.versions(pos, opts)
    local name = name_of(pos, 0)
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
        tostring(v.op or "-"), v.sha256 and v.sha256:sub(1, 12) or "-",
      }
    end
    U.print_table({ "REVISION", "TIME", "AUTHOR", "OP", "SHA256" }, rows)
    baton.exit(0)
  end

  function d.sub.diff(pos)
    local name = name_of(pos, 2)
    local r1, r2 = rev_of(pos[3]), rev_of(pos[4])
    local text, err = ops.diff_versions(kind, name, r1, r2)
    if not text then return d.die("diff", name, err) end
    io.stdout:write(U.escape(text, true))
    baton.exit(0)
  end

  function d.sub.rollback(pos, opts)
    local name = name_of(pos, 1)
    local rev = rev_of(pos[3])
    local secret, serr = U.signing_key(opts)
    if serr then return d.die("rollback", name, serr) end
    local r, err = ops.rollback(kind, name, rev, { author = opts.author, keep = opts["keep-versions"],
                                                   sign = secret })
    if not r then return d.die("rollback", name, err) end
    if opts.json then
      U.print_json(r)
      return baton.exit(0)
    end
    io.stdout:write(format("rolled %s %s back to revision %d: %s (revision %d)\n", kind, name, rev, r.key,
      r.revision))
    io.stdout:flush()
    for _, w in ipairs(r.warnings or {}) do
      io.stderr:write(format("baton: %s rollback %s: warning: %s\n", kind, name, w))
    end
    baton.exit(0)
  end
end
