-- baton policy put|ls|show|rm (design.md sections 4, 8 and 9). Policies are
-- read and written as etcd keys under the prefix; the nodes load them.
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

local format, concat = string.format, table.concat
local e = baton.etcd

local USAGES = {
  put = "baton policy put FILE.lua [--name NAME]",
  ls = "baton policy ls [--json]",
  show = "baton policy show NAME [--json]",
  rm = "baton policy rm NAME",
}
local USAGE = "baton policy put|ls|show|rm ..."
for _, k in ipairs { "put", "ls", "show", "rm" } do USAGE = USAGE .. "\n       " .. USAGES[k] end
local HELPS = {
  put = [[Checks FILE.lua (compile, fields, self-test) and stores it at
<prefix>policies/NAME; every node uses it from its next decision on.]],
  ls = "Every policy, stored and built in, with its functions and each node's load status.",
  show = "A policy's source revision, its functions, and each node's load status.",
  rm = "Deletes a stored policy; jobs naming it use the built-in of that name, or the default.",
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

-- Status records of policies: {[name] = {{node=, revision=, error=}, ...}}
-- (of one policy when name is given).
local function statuses(name, revision)
  local pfx = U.key("policy-status") .. "/" .. (name and (name .. "/") or "")
  local r, err = e:get(pfx, { prefix = true, revision = revision })
  if not r then return nil, err end
  local all = {}
  local base = #U.key("policy-status") + 2
  for _, kv in ipairs(r.kvs) do
    local pname, node = kv.key:sub(base):match("^([^/]+)/(.+)$")
    if pname then
      local v = U.decode_object(kv.value) or { error = "unreadable status: " .. kv.value }
      all[pname] = all[pname] or {}
      table.insert(all[pname], { node = node, revision = U.field(v, "revision"), error = U.field(v, "error") })
    end
  end
  return all
end

-- What is known of one policy: stored kv (or nil), its module or load
-- error, the built-in of the same name, and node statuses.
local function describe(name, kv, st)
  local d = { name = name, builtin = policy.builtin(name) ~= nil, stored = kv ~= nil, broken = false }
  local mod, err
  if kv then
    d.revision, d.key = kv.mod_revision, kv.key
    mod, err = policy.load(kv.value, name)
    if not mod then d.broken, d.error = true, err end
  else
    mod = policy.builtin(name)
  end
  if mod then
    d.description = type(mod.description) == "string" and mod.description or nil
    d.functions = policy.functions(mod)
    d.selftest = mod.selftest ~= nil
  end
  d.status = st or {}
  for _, s in ipairs(d.status) do
    if s.error and (not kv or s.revision == nil or s.revision == kv.mod_revision) then
      d.broken = true
      d.error = d.error or (s.node .. ": " .. tostring(s.error))
    end
  end
  return d, mod
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
  local mod, verr = policy.load(source, name, file)
  if not mod then return die("put", file, verr) end
  local ok, lines = policy.selftest(mod)
  if not ok then return die("put", file, format("EINVAL: policy %s: %s; nothing stored", name, lines)) end
  local key = U.key("policies", name)
  local r, perr = e:put(key, source, { prev_kv = true })
  if not r then return die("put", name, perr) end
  io.stdout:write(format("%s policy %s at %s (revision %d)%s%s\n",
    r.prev_kv and "updated" or "created", name, key, r.revision,
    policy.builtin(name) and format(", overriding the built-in %s", name) or "",
    mod.selftest and format("; selftest passed (%d decisions)", #lines) or ""))
  baton.exit(0)
end

function sub.ls(pos, opts)
  if pos[2] then return usage("unexpected argument \"" .. pos[2] .. "\"") end
  local pfx = U.key("policies") .. "/"
  local r, err = e:get(pfx, { prefix = true, sort = "key", order = "asc" })
  if not r then return die("ls", nil, err) end
  local st, serr = statuses(nil, r.revision)
  if not st then return die("ls", nil, serr) end
  local stored = {}
  local names = {}
  for _, kv in ipairs(r.kvs) do
    local name = kv.key:sub(#pfx + 1)
    stored[name] = kv
    names[#names + 1] = name
  end
  for _, name in ipairs(policy.BUILTINS) do
    if not stored[name] then names[#names + 1] = name end
  end
  table.sort(names)
  local list, rows = {}, {}
  for _, name in ipairs(names) do
    local d = describe(name, stored[name], st[name])
    list[#list + 1] = d
    local source = d.stored and format("etcd rev %d%s", d.revision, d.builtin and " (overrides built-in)" or "")
      or "built-in"
    local state = d.broken and ("error: " .. tostring(d.error):gsub("\n", " ")) or "ok"
    rows[#rows + 1] = { name, source, d.functions and functions_text(d.functions) or "-", state }
  end
  if opts.json then
    for _, d in ipairs(list) do
      d.functions = d.functions and baton.json.array(d.functions) or nil
      d.status = baton.json.array(d.status)
    end
    U.print_json(baton.json.array(list))
  else
    U.print_table({ "NAME", "SOURCE", "FUNCTIONS", "STATUS" }, rows)
  end
  baton.exit(0)
end

function sub.show(pos, opts)
  local name = one_name(pos)
  local key = U.key("policies", name)
  local r, err = e:get(key)
  if not r then return die("show", name, err) end
  local kv = r.kvs[1]
  if not kv and not policy.builtin(name) then
    return die("show", name, "ENOENT: no policy " .. name .. " at " .. key .. " and no built-in of that name")
  end
  local st, serr = statuses(name, r.revision)
  if not st then return die("show", name, serr) end
  local d, mod = describe(name, kv, st[name])
  local sok, slines
  if mod then sok, slines = policy.selftest(mod) end

  if opts.json then
    d.functions = d.functions and baton.json.array(d.functions) or nil
    d.status = baton.json.array(d.status)
    d.source = kv and kv.value or nil
    d.selftest = mod and mod.selftest and { passed = sok, lines = sok and baton.json.array(slines) or nil,
      error = not sok and slines or nil } or nil
    U.print_json(d)
    return baton.exit(0)
  end

  local f = { { "policy", name } }
  if kv then
    f[#f + 1] = { "key", format("%s (revision %d, version %d)", kv.key, kv.mod_revision, kv.version) }
    if d.builtin then f[#f + 1] = { "overrides", "the built-in " .. builtin_path(name) } end
  else
    f[#f + 1] = { "source", "built-in " .. builtin_path(name) .. " (not stored in etcd)" }
  end
  if d.description then f[#f + 1] = { "description", d.description } end
  if d.functions then f[#f + 1] = { "functions", functions_text(d.functions) } end
  if mod then
    f[#f + 1] = { "selftest", not mod.selftest and "none" or sok and format("passed (%d decisions)", #slines)
      or ("FAILED: " .. slines) }
  end
  if d.error then f[#f + 1] = { "error", d.error } end
  U.print_fields(f)
  if sok and #slines > 0 then
    io.stdout:write("\nselftest decisions:\n")
    for _, l in ipairs(slines) do io.stdout:write("  ", l, "\n") end
  end
  io.stdout:write("\nnodes:\n")
  if #d.status == 0 then
    io.stdout:write(kv and "  (no node has reported loading it)\n" or "  (built-in: nodes report only stored policies)\n")
  else
    local rows = {}
    for _, s in ipairs(d.status) do
      local loaded = s.revision and tostring(s.revision) or "-"
      if kv and s.revision and s.revision ~= kv.mod_revision then loaded = loaded .. " (stale)" end
      rows[#rows + 1] = { "  " .. s.node, loaded, s.error and tostring(s.error):gsub("\n", " ") or "ok" }
    end
    U.print_table({ "  NODE", "REVISION", "STATUS" }, rows)
  end
  baton.exit(0)
end

function sub.rm(pos)
  local name = one_name(pos)
  local key = U.key("policies", name)
  local r, err = e:txn {
    compare = { { key = key, target = "create", op = ">", value = 0 } },
    success = {
      { delete = { key = key } },
      { delete = { key = U.key("policy-status", name) .. "/", prefix = true } },
    },
  }
  if not r then return die("rm", name, err) end
  if not r.succeeded then
    return die("rm", name, "ENOENT: no policy " .. name .. " at " .. key
      .. (policy.builtin(name) and " (built-in policies cannot be removed)" or ""))
  end
  io.stdout:write(format("removed policy %s; jobs naming it now use %s\n", name,
    policy.builtin(name) and ("the built-in " .. name) or "the default policy"))
  baton.exit(0)
end

local FLAGS = {
  put = { name = "string" },
  ls = { json = "flag" },
  show = { json = "flag" },
  rm = {},
}

return function(...)
  return A.dispatch("policy", { ... }, { sub = sub, usages = USAGES, helps = HELPS, usage = USAGE,
    help = HELP, flags = FLAGS, fail = usage, select = function(what) current = what end })
end
