-- baton sandbox: where code stored in etcd is compiled and described, and
-- where stored policies decide (not for direct use: lua/baton/stored.lua
-- starts it). The process was confined before any Lua ran
-- (runtime/core/confine.h: it dies with its parent, starts nothing, keeps
-- no descriptor but its channel); once the modules below are loaded it
-- confines itself further (baton._sandbox.confine: it reads and writes its
-- channel, and may open only the time zone files), so the code it runs
-- reaches no file, network, process, environment or key of whoever
-- started it. Each request may use sandbox.MEMORY bytes of Lua memory (the
-- counting allocator refuses more), sandbox.TIME_LIMIT seconds of Lua code
-- and a budget of instructions; a C call that does not return is its
-- parent's to stop (it kills the process).
--
-- One JSON request per line on the channel, one reply per request, in
-- order; every reply has id (the request's) and ok, and mem (the bytes of
-- Lua memory the sandbox holds after it):
--
--   {op = "job", id, name, source, chunk}
--       --> {table = tree}: what the file returned (baton.sandbox.tree),
--           which the parent validates (baton.job.from_table)
--   {op = "policy", id, name, source, chunk, handle, selftest, preview}
--       --> {functions, description, has_selftest, builtin,
--            selftest = {ok, lines | error}, preview = {ok, lines}}; the
--           policy stays loaded under handle for "decide"
--   {op = "check", id, name, source, chunk}   a file of either kind:
--       --> {kind = "policy", ...as policy} or {kind = "job", table = tree}
--   {op = "decide", id, handle, fname, args = {n, items}, forget}
--       --> {value = tree}: policy.call's result (ok false: its reason);
--       an item is a value's tree (v), one to keep (def = id, v) or one
--       kept (ref = id); forget: drop what was kept first (stored.lua)
--   {op = "drop", id, handle}
-- and on failure {ok = false, error = "ECODE: ...", code}.
local baton = require "baton"
local job = require "baton.job"
local policy = require "baton.policy"
local sandbox = require "baton.sandbox"
local json = baton.json
local S = baton._sandbox

-- Everything a request may need, loaded before the process is confined:
-- after, the library's snapshot is still in memory, but nothing else is.
for _, n in ipairs(policy.BUILTINS) do policy.builtin(n) end
require "baton.policies.util"
require "baton.policies.examples.near_db"

local policies = {} -- handle -> module

local function reply(t)
  t.mem = S.limit(0)
  -- (an error a file raised may hold a NUL byte: U+FFFD there)
  local ok, line = pcall(json.encode, t, { nul = "replace" })
  if not ok then
    line = json.encode { id = t.id, ok = false, code = "EINVAL", error = "EINVAL: " .. tostring(line) }
  end
  S.send(line)
end

local function fail(id, err, code)
  return { id = id, ok = false, error = err, code = code or tostring(err):match("^(E[%u%d]+):") or "EINVAL" }
end

-- The reply with v as plain data (sandbox.tree), or the failure to make it.
local function encoded(id, key, v, what)
  local e, err = sandbox.tree(v)
  if err then return fail(id, "EINVAL: " .. what .. ": " .. err) end
  return { id = id, ok = true, [key] = e }
end

local function describe_policy(req, mod)
  local r = { id = req.id, ok = true, functions = json.array(policy.functions(mod)),
              description = type(mod.description) == "string" and mod.description or nil,
              has_selftest = mod.selftest ~= nil }
  for _, n in ipairs(policy.BUILTINS) do
    if policy.builtin(n) == mod then r.builtin = n end
  end
  if req.selftest then
    local ok, lines = policy.selftest(mod)
    r.selftest = ok and { ok = true, lines = json.array(lines) } or { ok = false, error = lines }
  end
  if req.preview then
    local ok, lines = policy.preview(mod)
    r.preview = { ok = ok, lines = json.array(lines) }
  end
  if req.handle then policies[req.handle] = mod end
  return r
end

local ops = {}

function ops.job(req)
  local ok, t, code = job.run_file(req.source, req.name, req.chunk, true)
  if not ok then return fail(req.id, t, code) end
  return encoded(req.id, "table", t, "job " .. req.name .. ": what the file returned")
end

function ops.policy(req)
  local mod, err, code = policy.load(req.source, req.name, req.chunk)
  if not mod then return fail(req.id, err, code) end
  return describe_policy(req, mod)
end

function ops.check(req)
  local ok, t, code = job.run_file(req.source, req.name, req.chunk, true)
  if not ok then return fail(req.id, t, code) end
  if job.looks_like_policy(t) or policy.looks_like(t) then
    local mod, perr, pcode = policy.from_table(t, req.name)
    if not mod then
      -- (a policy's own words: "policy NAME: ...", as policy put says it)
      return fail(req.id, perr, pcode)
    end
    req.selftest, req.preview = true, true
    local r = describe_policy(req, mod)
    r.kind = "policy"
    return r
  end
  local r = encoded(req.id, "table", t, "job " .. req.name .. ": what the file returned")
  r.kind = "job"
  return r
end

-- Arguments sent once and named by number since (stored.lua, args_for).
local refs = {}

-- The arguments of a decide request: {n, items}, each item a value (v), a
-- value to keep (def = id, v) or one kept (ref = id); nil, why.
local function decide_args(req)
  if req.forget then refs = {} end
  local a = req.args
  if type(a) ~= "table" or type(a.items) ~= "table" or type(a.n) ~= "number" then return nil, "bad arguments" end
  local args = { n = a.n }
  for i = 1, a.n do
    local it = a.items[i]
    if type(it) ~= "table" then return nil, "bad arguments" end
    if it.ref then
      if refs[it.ref] == nil then return nil, "no argument kept as " .. tostring(it.ref), "ESTALE" end
      args[i] = refs[it.ref]
    else
      local ok, v = pcall(sandbox.untree, it.v)
      if not ok then return nil, "bad arguments" end
      if it.def then refs[it.def] = v end
      args[i] = v
    end
  end
  return args
end

function ops.decide(req)
  local mod = policies[req.handle]
  if not mod then return fail(req.id, "ENOENT: no policy loaded as " .. tostring(req.handle), "ENOENT") end
  local args, why, code = decide_args(req)
  if not args then return fail(req.id, (code or "EINVAL") .. ": " .. why, code) end
  local cok, res = policy.call(mod, req.fname, unpack(args, 1, args.n))
  if not cok then return { id = req.id, ok = false, code = "EPOLICY", error = res } end
  return encoded(req.id, "value", res, req.fname .. " returned")
end

function ops.drop(req)
  policies[req.handle] = nil
  return { id = req.id, ok = true }
end

return function()
  local ok, landlocked = S.confine { read_dir = os.getenv("TZDIR") or "/usr/share/zoneinfo" }
  if not ok then
    S.send(json.encode { id = 0, ok = false, code = "EPERM", error = landlocked })
    S.exit(1)
  end
  S.send(json.encode { id = 0, ok = true, ready = true, landlocked = landlocked })
  while true do
    local line = S.recv()
    if not line then S.exit(0) end
    local dok, req = pcall(json.decode, line)
    local r
    if not dok or type(req) ~= "table" or not ops[req.op] then
      r = fail(dok and type(req) == "table" and req.id or nil, "EINVAL: not a sandbox request")
    else
      S.limit(S.limit(0) + sandbox.MEMORY)
      local cok, res = pcall(ops[req.op], req)
      S.limit(0)
      r = cok and res or fail(req.id, "EINVAL: " .. tostring(res))
    end
    reply(r)
    -- (the garbage of one request is not the next one's budget)
    if collectgarbage("count") * 1024 > sandbox.MEMORY / 4 then collectgarbage() end
  end
end
