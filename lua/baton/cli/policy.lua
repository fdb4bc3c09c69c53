-- baton policy put|ls|show|rm (docs/policies.md). Policies are
-- read and written as etcd keys under the prefix (by baton.ops, which the
-- node's HTTP API shares); the nodes load them.
--
--   P policies/<name>                 the policy's Lua source
--   P policy-status/<name>/<node>     JSON {revision=, error=} a node writes
--
-- A stored policy named like a built-in (lua/baton/policies/<name>.lua)
-- overrides it; removing it brings the built-in back.
local baton = require "baton"
local A = require "baton.cli.args"
local U = require "baton.cli.util"
local job = require "baton.job"
local policy = require "baton.policy"
local ops = require "baton.ops"

local format, concat = string.format, table.concat

local USAGES = {
  put = "baton policy put FILE.lua [--name NAME] [--sign KEY] [--author WHO] [--keep-versions N] [--json]",
  ls = "baton policy ls [--json]",
  show = "baton policy show NAME [--json]",
  rm = "baton policy rm NAME [--author WHO] [--json]",
}
local ORDER = { "put", "ls", "show", "rm" }
local USAGE -- set below, once versions|diff|rollback are added
local HELPS = {
  put = [[Checks FILE.lua (compile, fields, self-test) and stores it at
<prefix>policies/NAME; every node uses it from its next decision on.
--sign KEY stores a signature by the secret key KEY (baton keygen) with it
(nodes started with --trust load only signed policies; docs/security.md).
Records a version (baton policy versions) by --author WHO (default: the
etcd user when etcd auth is on, else $USER@host), the last --keep-versions N
kept (default 20).
--json prints the body of PUT /api/v1/policies/NAME (docs/api.md).]],
  ls = "Every policy, stored and built in, with its functions and each node's load status.",
  show = "A policy's source revision, its functions, and each node's load status.",
  rm = [[Deletes a stored policy; jobs naming it use the built-in of that name, or the
default. --json prints {name, removed, now}.]],
}
local HELP = "Scheduling policies (docs/policies.md). baton policy SUBCOMMAND --help says more."
local current
local NAME_RULE = U.NAME_RULE

local function die(sub, what, err) return A.die("policy " .. sub .. (what and (" " .. what) or "") .. ": " .. err) end
local function usage(msg)
  return A.usage(current and ("policy " .. current) or "policy", current and USAGES[current] or USAGE, msg)
end

local function one_name(pos)
  local name = pos[2]
  if not name then return usage("needs a NAME") end
  if pos[3] then return usage("unexpected argument \"" .. pos[3] .. "\"") end
  if not job.valid_name(name) then return usage(format("invalid policy name \"%s\" (%s)", name, NAME_RULE)) end
  return name
end

local function builtin_path(name)
  return "lua/baton/policies/" .. name .. ".lua"
end

-- "claim_delay, assign_shards; retry_delay, on_orphan from default".
local function functions_text(fns)
  local own, from_default = {}, {}
  for _, f in ipairs(policy.DECISIONS) do
    local found = false
    for _, g in ipairs(fns or {}) do if g == f then found = true end end
    if found then own[#own + 1] = f else from_default[#from_default + 1] = f end
  end
  local s = concat(own, ", ")
  if #from_default > 0 then s = s .. (s ~= "" and "; " or "") .. concat(from_default, ", ") .. " from default" end
  return s
end

---------------------------------------------------------------------------
-- subcommands

local sub = {}

function sub.put(pos, opts)
  local name, source, file = U.put_args(pos, opts, "policy", usage, die)
  local secret, serr = U.signing_key(opts)
  if serr then return die("put", name, serr) end
  local r, err, code, extra = ops.put_policy(name, source, { chunkname = file, sign = secret,
                                                             author = opts.author, keep = opts["keep-versions"] })
  if not r then return die("put", ((extra and extra.invalid) or code == "EFBIG") and file or name, err) end
  if opts.json then
    U.print_json(r)
    return baton.exit(0)
  end
  io.stdout:write(format("%s policy %s at %s (revision %d)%s%s%s\n",
    r.created and "created" or "updated", name, r.key, r.revision,
    r.signed_by and (", signed by key " .. r.signed_by) or "",
    r.overrides_builtin and format(", overriding the built-in %s", name) or "",
    r.selftest and format("; selftest passed (%d decisions)", r.selftest.decisions) or ""))
  io.stdout:flush()
  for _, w in ipairs(r.warnings or {}) do io.stderr:write(format("baton: policy put %s: warning: %s\n", name, w)) end
  baton.exit(0)
end

function sub.ls(pos, opts)
  if pos[2] then return usage("unexpected argument \"" .. pos[2] .. "\"") end
  local list, err = ops.list_policies()
  if not list then return die("ls", nil, err) end
  if opts.json then
    U.print_json(list)
    return baton.exit(0)
  end
  local rows = {}
  for _, d in ipairs(list) do
    local source = d.stored and format("etcd rev %d%s", d.revision, d.builtin and " (overrides built-in)" or "")
      or "built-in"
    local state = d.broken and ("error: " .. tostring(d.error):gsub("\n", " ")) or "ok"
    rows[#rows + 1] = { d.name, source, d.functions and functions_text(d.functions) or "-", state }
  end
  U.print_table({ "NAME", "SOURCE", "FUNCTIONS", "STATUS" }, rows, nil,
    { flex = { 4, 3 }, color = { [4] = U.state_color } })
  baton.exit(0)
end

function sub.show(pos, opts)
  local name = one_name(pos)
  local d, err = ops.show_policy(name)
  if not d then return die("show", name, err) end
  if opts.json then
    U.print_json(d)
    return baton.exit(0)
  end

  local f = { { "policy", name } }
  if d.stored then
    f[#f + 1] = { "key", format("%s (revision %d, version %d)", d.key, d.revision, d.version) }
    if d.builtin then f[#f + 1] = { "overrides", "the built-in " .. builtin_path(name) } end
    f[#f + 1] = { "signed", d.signed_by and ("by key " .. d.signed_by) or "no" }
  else
    f[#f + 1] = { "source", "built-in " .. builtin_path(name) .. " (not stored in etcd)" }
  end
  if d.description then f[#f + 1] = { "description", d.description } end
  if d.functions then f[#f + 1] = { "functions", functions_text(d.functions) } end
  local st = d.selftest
  if d.functions then
    f[#f + 1] = { "selftest", not st and "none" or st.passed and format("passed (%d decisions)", #st.lines)
      or ("FAILED: " .. st.error) }
  end
  if d.error then f[#f + 1] = { "error", d.error } end
  U.print_fields(f)
  if st and st.passed and #st.lines > 0 then
    io.stdout:write("\nselftest decisions:\n")
    for _, l in ipairs(st.lines) do io.stdout:write("  ", U.escape(l), "\n") end
  end
  io.stdout:write("\nnodes:\n")
  if #d.status == 0 then
    io.stdout:write(d.stored and "  (no node has reported loading it)\n" or "  (built-in: nodes report only stored policies)\n")
  else
    local rows = {}
    for _, s in ipairs(d.status) do
      local loaded = s.revision and tostring(s.revision) or "-"
      if d.stored and s.revision and s.revision ~= d.revision then loaded = loaded .. " (stale)" end
      rows[#rows + 1] = { "  " .. s.node, loaded, s.error and tostring(s.error):gsub("\n", " ") or "ok" }
    end
    U.print_table({ "  NODE", "REVISION", "STATUS" }, rows, nil, U.STATUS_TABLE)
  end
  baton.exit(0)
end

function sub.rm(pos, opts)
  local name = one_name(pos)
  local r, err = ops.rm_policy(name, { author = opts.author })
  if not r then return die("rm", name, err) end
  if opts.json then
    U.print_json(r)
    return baton.exit(0)
  end
  io.stdout:write(format("removed policy %s; jobs naming it now use %s\n", name, r.now))
  io.stdout:flush()
  for _, w in ipairs(r.warnings or {}) do io.stderr:write(format("baton: policy rm %s: warning: %s\n", name, w)) end
  baton.exit(0)
end

local FLAGS = {
  put = { name = "string", sign = "string", author = "string", ["keep-versions"] = "count", json = "flag" },
  ls = { json = "flag" },
  show = { json = "flag" },
  rm = { author = "string", json = "flag" },
}

require "baton.cli.versions" ("policy", { sub = sub, usages = USAGES, helps = HELPS, flags = FLAGS,
  order = ORDER, usage = usage, die = die })
USAGE = "baton policy " .. table.concat(ORDER, "|") .. " ..."
for _, k in ipairs(ORDER) do USAGE = USAGE .. "\n       " .. USAGES[k] end

return function(...)
  return A.dispatch("policy", { ... }, { sub = sub, usages = USAGES, helps = HELPS, usage = USAGE,
    help = HELP, flags = FLAGS, fail = usage, select = function(what) current = what end })
end
