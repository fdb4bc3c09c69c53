-- Code stored in etcd (job files, policies): the one way in. Whatever a
-- process does with a stored source -- a node loading it, the HTTP API or
-- the CLI showing, listing, checking or triggering it, a worker running it
-- -- goes through this module, which
--
--   1. verifies it first, when the process trusts keys (configure{trust}:
--      a node started with --trust, its workers): a source no trusted key
--      signed for this place (baton.sign: name, kind, prefix, the key's
--      create revision and version) goes no further, and its error says
--      why (untrusted: ...);
--   2. compiles and runs it only in the sandbox: a process of its own
--      (`baton sandbox`, lua/baton/cli/sandbox.lua; runtime/core/confine.h)
--      that cannot open a file, reach the network, start a process or see
--      the environment, argv or keys of the process that asked, with a
--      bound on its memory and time. Only plain data comes back (what the
--      file returned, a policy's decisions), and this side validates it.
--
-- Only a worker compiles a job in its own process, to run it (job_for_run),
-- after the same verification. So no stored code runs in a node's
-- conductor or on an operator's machine (docs/security.md).
--
--   stored.configure{trust = t, prefix = P}     once, before any use
--   stored.verify(kind, name, kv)              --> true | nil, "untrusted: ..."
--   stored.job(name, kv [, opts])              --> spec | nil, err, code
--   stored.jobs(list [, opts [, each]])        --> {{spec =} | {error =, code =}, ...}
--   stored.policy(name, kv [, opts])           --> module (decides in the sandbox) | nil, err, code
--   stored.check(name, source, chunkname)      --> {kind = "job", spec} | {kind = "policy", ...}
--   stored.job_for_run(name, kv)               --> spec with its own run (a worker)
--
-- kv is a key as etcd returned it ({value, mod_revision, create_revision,
-- version}); a local file is {value = text} with opts.file (not verified:
-- it is the caller's own).
local baton = require "baton"
local job = require "baton.job"
local policy = require "baton.policy"
local sign = require "baton.sign"
local sandbox = require "baton.sandbox"
local json = baton.json

local format, type, tostring, ipairs, pairs, select = string.format, type, tostring, ipairs, pairs, select

local M = {}

-- Seconds the sandbox may take for one request before it is stopped (a C
-- call that does not return: its Lua code is bounded by sandbox.TIME_LIMIT).
M.REPLY_TIMEOUT = 5
-- Bytes of Lua memory past which a sandbox is replaced after a request.
M.RECYCLE_MEMORY = 128 * 2 ^ 20
-- Requests in a sandbox at once (a page of a listing).
M.WINDOW = 64

local config = { prefix = nil, trust = nil }

-- configure{trust = (sign.load_trust's), prefix = P}: what this process
-- verifies with (no trust: it verifies nothing, as a node without --trust
-- runs anything stored), and its prefix (a signature names it).
function M.configure(opts)
  config.trust = opts.trust
  config.prefix = opts.prefix
end

local function prefix()
  if config.prefix then return config.prefix end
  local p = (baton.config and baton.config.prefix) or "/baton/"
  if p:sub(-1) ~= "/" then p = p .. "/" end
  return p
end

-- verify(kind, name, kv) --> true, or nil, "untrusted: ...": whether this
-- process may use kv's source (always, without trust).
function M.verify(kind, name, kv)
  if not config.trust then return true end
  local ok, err = sign.verify(config.trust, kind, name, kv.value, {
    prefix = prefix(), create_revision = kv.create_revision, version = kv.version })
  if not ok then return nil, err end
  return true
end

function M.trusting() return config.trust ~= nil end

---------------------------------------------------------------------------
-- the sandbox process

local Box = {}
Box.__index = Box
local boxes = {}

-- The process's sandbox for role ("describe": jobs and policies shown or
-- loaded; "decide": a node's stored policies), started on first use.
function M.box(role)
  role = role or "describe"
  local b = boxes[role]
  if not b then
    b = setmetatable({ role = role, gen = 0, busy = false, free = baton._cond(),
                       sent = setmetatable({}, { __mode = "k" }), lastref = 0, nrefs = 0, refgen = 0 }, Box)
    boxes[role] = b
  end
  return b
end

local function box_fail(msg, code)
  return nil, msg, code or msg:match("^(E[%u%d]+):") or "EIO"
end

-- probe() --> true, or nil, "ESANDBOX: ...": whether this machine can run
-- the sandbox (a kernel without seccomp cannot), for a node to say at
-- start rather than refuse every job later.
function M.probe()
  local b = M.box()
  if b.p then return true end
  while b.busy do b.free:wait() end
  return b:start()
end

function Box:start()
  local fd, ferr, fcode = baton._lib_fd()
  if not fd then return box_fail("ESANDBOX: cannot start the sandbox: " .. tostring(ferr), fcode) end
  local p, err = baton.spawn { baton._self_exe, "sandbox", argv0 = baton._exe or "baton", clear_env = true,
    env = { BATON_LIB_FD = tostring(fd), BATON_PREFIX = prefix(), TZDIR = os.getenv("TZDIR") or false },
    channel = true }
  if not p then return box_fail("ESANDBOX: cannot start the sandbox: " .. tostring(err), "ESANDBOX") end
  local line, rerr = p.channel:recv(M.REPLY_TIMEOUT * 2)
  local ok, hello = pcall(json.decode, line or "")
  if not line or not ok or type(hello) ~= "table" or not hello.ready then
    p:kill("SIGKILL")
    p:wait()
    local why = ok and type(hello) == "table" and hello.error or rerr or "it did not start"
    return box_fail("ESANDBOX: the sandbox cannot run here: " .. tostring(why), "ESANDBOX")
  end
  self.p, self.ch, self.gen, self.landlocked = p, p.channel, self.gen + 1, hello.landlocked
  self.n = 0
  return true
end

-- Stops the process (the next request starts another).
function Box:stop()
  if not self.p then return end
  local p = self.p
  self.p, self.ch = nil, nil
  p:kill("SIGKILL")
  p:wait()
end

-- The failure of a request whose answer did not come (rerr, rcode: what
-- recv said; nil for an answer that is not the one awaited).
local function lost(rerr, rcode)
  local why = rcode == "ETIMEDOUT"
    and format("ETIMEDOUT: it ran for more than %g seconds (a call that does not return?) and was stopped",
      M.REPLY_TIMEOUT)
    or rerr and format("ESANDBOX: the sandbox ended while it ran (%s)", tostring(rerr))
    or "ESANDBOX: the sandbox answered out of turn"
  return { ok = false, error = why, code = why:match("^(E%u+)") }
end

-- Sends reqs[k] (numbering it); false when it cannot be encoded (out[k]
-- says why).
function Box:send(reqs, k, out)
  self.n = self.n + 1
  reqs[k].id = self.n
  local ok, line = pcall(json.encode, reqs[k])
  if not ok then
    out[k], reqs[k].id = { ok = false, code = "EINVAL", error = "EINVAL: " .. tostring(line) }, nil
    return false
  end
  self.ch:send(line)
  return true
end

-- calls(reqs [, each]) --> a reply for each request, in order ({ok =
-- false, error, code} for one that failed, timed out or took the sandbox
-- down); each(k, reply), when given, is called as reply k comes (it must
-- not wait). One caller at a time. Up to M.WINDOW requests are in the
-- sandbox at once, so it works on the next ones while this side handles
-- an answer. When the sandbox dies or stops answering, the request at
-- fault fails, the sandbox is replaced and the others are sent again.
-- A request whose unless() says something when its turn comes is not
-- sent (ECANCELED: its caller gave up, a policy found stuck meanwhile).
function Box:calls(reqs, each)
  while self.busy do self.free:wait() end
  self.busy = true
  local out, n = {}, #reqs
  local function done(k, r)
    out[k] = r
    if each then each(k, r) end
  end
  local ok, err = pcall(function()
    local k, sent = 1, 0 -- (the next to answer, the last sent)
    while k <= n do
      if not self.p then
        local sok, serr, scode = self:start()
        if not sok then
          for j = k, n do done(j, { ok = false, error = serr, code = scode }) end
          return
        end
        sent = k - 1
      end
      while sent < n and sent - k + 1 < M.WINDOW do
        sent = sent + 1
        local why = reqs[sent].unless and reqs[sent].unless()
        reqs[sent].unless = nil
        if why then
          out[sent] = { ok = false, code = "ECANCELED", error = "ECANCELED: " .. tostring(why) }
        elseif not self:send(reqs, sent, out) then
          reqs[sent].id = nil
        end
      end
      if not reqs[k].id then
        done(k, out[k])
        k = k + 1
      else
        local line, rerr, rcode = self.ch:recv(M.REPLY_TIMEOUT)
        local dok, r = pcall(json.decode, line or "")
        if not line or not dok or type(r) ~= "table" or r.id ~= reqs[k].id then
          done(k, lost(line == nil and (rerr or "end of channel") or nil, rcode))
          self:stop()
        else
          done(k, r)
          if r.mem and r.mem > M.RECYCLE_MEMORY then self.recycle = true end
          if self.recycle and sent == k then
            self.recycle = false
            self:stop()
          end
        end
        k = k + 1
      end
    end
  end)
  for _, req in ipairs(reqs) do req.id, req.unless = nil, nil end
  self.busy = false
  self.free:signal()
  if not ok then
    for k = 1, n do if not out[k] then done(k, { ok = false, code = "EIO", error = "EIO: " .. tostring(err) }) end end
  end
  return out
end

function Box:call(req)
  return self:calls({ req })[1]
end

-- Stops every sandbox of this process (a node stopping).
function M.close()
  for _, b in pairs(boxes) do b:stop() end
end

---------------------------------------------------------------------------
-- jobs

-- The error of a source that cannot be Lua source text (bytecode, a NUL
-- byte), or nil.
local function not_text(kind, name, source)
  if source:byte(1) == 27 then
    return format("EINVAL: %s %s: precompiled bytecode is refused: store the Lua source text", kind, name)
  elseif source:find("\0", 1, true) then
    return format("EINVAL: %s %s: the source holds a NUL byte (%s files are Lua source text)", kind, name,
      kind)
  end
end

-- The error of a request that failed: a source that stopped or took down
-- the sandbox is invalid (EINVAL, as one that loops in Lua), in words that
-- name it.
local function stopped(kind, name, r)
  if r.code == "ETIMEDOUT" then
    return format("EINVAL: %s %s: the file ran for more than %g seconds while loading, in a call that "
      .. "does not return (a pattern that backtracks without end?), and was stopped", kind, name,
      M.REPLY_TIMEOUT), "EINVAL"
  elseif r.code == "ESANDBOX" and r.error:find("ended while", 1, true) then
    return format("EINVAL: %s %s: the sandbox died while loading the file (%s)", kind, name,
      r.error:gsub("^ESANDBOX: the sandbox ended while it ran ", "")), "EINVAL"
  end
  return r.error, r.code
end

-- The reply of a "job" request as a spec, or nil, err, code.
local function spec_of(name, kv, r)
  if not r.ok then return nil, stopped("job", name, r) end
  local ok, t = pcall(sandbox.untree, r.table)
  if not ok then return nil, "EINVAL: job " .. name .. ": the sandbox's answer cannot be read", "EINVAL" end
  return job.from_table(t, name, kv.mod_revision)
end

-- true when kv's source of kind may go to the sandbox; nil, err, code when
-- it may not (untrusted, a placeholder, not text). Raises on misuse.
local function admissible(kind, name, kv, opts)
  if type(kv.value) ~= "string" then
    error(format("bad argument to '%s' (a source string expected, got %s)", kind, type(kv.value)), 3)
  end
  if not opts.file then
    local ok, err = M.verify(kind, name, kv)
    if not ok then return nil, err, "EUNTRUSTED" end
  end
  if kv.value == sign.PLACEHOLDER then
    return nil, format("ENOENT: %s %s is being stored (a signed put has not finished)", kind, name), "ENOENT"
  end
  local bad = not_text(kind, name, kv.value)
  if bad then return nil, bad, "EINVAL" end
  return true
end

-- A request for kv's source, or nil, err, code when it cannot be one.
local function job_request(name, kv, opts)
  local ok, err, code = admissible("job", name, kv, opts)
  if not ok then return nil, err, code end
  return { op = "job", name = name, source = kv.value, chunk = opts.chunkname }
end

-- job(name, kv [, opts]) --> the job's spec (its run a stand-in: it
-- describes the job) | nil, "ECODE: ...", code. opts.chunkname: what error
-- positions name; opts.file: kv is a local file (not verified).
function M.job(name, kv, opts)
  opts = opts or {}
  local req, err, code = job_request(name, kv, opts)
  if not req then return nil, err, code end
  return spec_of(name, kv, M.box(opts.role):call(req))
end

-- jobs(list [, opts [, each]]) --> for each {name, kv} of list, {spec =}
-- or {error =, code =}, described in as few round trips as the sandbox
-- allows. each(i, result), when given, gets each as it comes (it must not
-- wait), while the sandbox describes the next ones.
function M.jobs(list, opts, each)
  opts = opts or {}
  local out, reqs, at = {}, {}, {}
  for i, item in ipairs(list) do
    local req, err, code = job_request(item.name, item.kv, opts)
    if req then
      reqs[#reqs + 1] = req
      at[#reqs] = i
    else
      out[i] = { error = err, code = code }
      if each then each(i, out[i]) end
    end
  end
  if #reqs > 0 then
    M.box(opts.role):calls(reqs, function(k, r)
      local i = at[k]
      local spec, err, code = spec_of(list[i].name, list[i].kv, r)
      out[i] = spec and { spec = spec } or { error = err, code = code }
      if each then each(i, out[i]) end
    end)
  end
  return out
end

-- job_for_run(name, kv [, chunkname]) --> the spec with the job's own
-- run, compiled in this process (a worker, which runs it), verified first
-- | nil, err, code.
function M.job_for_run(name, kv, chunkname)
  local ok, err = M.verify("job", name, kv)
  if not ok then return nil, err, "EUNTRUSTED" end
  return job.load(kv.value, name, kv.mod_revision, chunkname)
end

---------------------------------------------------------------------------
-- policies

local handles = 0
local states = setmetatable({}, { __mode = "k" }) -- module -> its handle in the sandbox

-- Tables a decision's arguments may hold that never change once made (the
-- node's list of live nodes, a job's view: node/decide.lua): sent to a sandbox
-- once, then named there by a number, so that a decision among 100 nodes
-- does not carry them all each time.
local shareable = setmetatable({}, { __mode = "k" })
function M.shareable(t)
  if type(t) == "table" then shareable[t] = true end
  return t
end
-- Shared tables a sandbox keeps before it is told to forget them all.
M.MAX_REFS = 512

-- The arguments of a decision for box, as its "decide" request takes them:
-- {n, items = {{v = tree} | {def = id, v = tree} | {ref = id}, ...}}, and
-- whether the sandbox must forget what it kept first; nil, why.
local function args_for(box, n, ...)
  local forget
  if box.nrefs >= M.MAX_REFS then box.refgen, box.nrefs, forget = box.refgen + 1, 0, true end
  local key, items = box.gen .. ":" .. box.refgen, {}
  for i = 1, n do
    local a = select(i, ...)
    local sent = shareable[a] and box.sent[a]
    if sent and sent.key == key then
      items[i] = { ref = sent.id }
    else
      local t, err = sandbox.tree(a)
      if err then return nil, err end
      if shareable[a] then
        box.lastref, box.nrefs = box.lastref + 1, box.nrefs + 1
        box.sent[a] = { key = key, id = box.lastref }
        items[i] = { def = box.lastref, v = t }
      else
        items[i] = { v = t }
      end
    end
  end
  return { n = n, items = json.array(items) }, forget
end

-- The stand-in of a policy the sandbox holds: the fields the sandbox
-- described, a stand-in function for each decision it defines, and
-- decisions asked of the sandbox (which loads it again when it was
-- replaced meanwhile). A built-in named as it is
-- (`return require "baton.policies.hash"`) is that built-in.
local function proxy(name, kv, r, box, handle)
  if r.builtin then return policy.builtin(r.builtin) end
  local mod = { description = r.description, stored = true, name = name, revision = kv.mod_revision }
  for _, f in ipairs(r.functions or {}) do mod[f] = sandbox.FN end
  if r.has_selftest then mod.selftest = sandbox.FN end
  local state = { handle = handle, gen = handle and box.gen or -1, box = box }
  states[mod] = state
  return policy.remote(mod, function(_, fname, ...)
    if state.failed then return false, state.failed end
    local res
    for _ = 1, 2 do
      if state.gen ~= box.gen or not box.p then
        -- (a new sandbox: the policy is loaded into it again)
        handles = handles + 1
        state.handle = name .. "@" .. tostring(kv.mod_revision) .. "#" .. handles
        res = box:call { op = "policy", name = name, source = kv.value, handle = state.handle }
        if not res.ok then break end
        state.gen = box.gen
      end
      local args, forget = args_for(box, select("#", ...), ...)
      if not args then return false, fname .. ": its arguments cannot be sent: " .. tostring(forget) end
      res = box:call { op = "decide", handle = state.handle, fname = fname, args = args, forget = forget,
                       unless = function() return state.failed end }
      -- (ENOENT: a sandbox that does not know the policy, replaced
      -- meanwhile: loaded again, and the arguments sent in full; ESTALE: it
      -- lacks an argument it was sent by number (a call cancelled before
      -- the sandbox read it): the arguments sent in full, the policy kept)
      if res.code ~= "ENOENT" and res.code ~= "ESTALE" then break end
      if res.code == "ENOENT" then state.gen = -1 end
      box.refgen, box.nrefs = box.refgen + 1, 0
    end
    if not res.ok then
      if res.code == "ECANCELED" then return false, state.failed end
      if res.code == "ETIMEDOUT" or res.code == "ESANDBOX" then
        -- A decision that took the sandbox down is not asked again: the
        -- default decides for this version from now on.
        state.failed = fname .. ": " .. tostring(res.error):gsub("^E%u+: ", "")
          .. "; the policy is not asked again until it changes"
      end
      return false, (tostring(res.error):gsub("^EPOLICY: ", ""))
    end
    local ok, v = pcall(sandbox.untree, res.value)
    if not ok then return false, fname .. " returned what cannot be read" end
    return true, v
  end)
end

-- policy(name, kv [, opts]) --> a module whose decisions the sandbox makes
-- (or the built-in it names), and the sandbox's description of it
-- ({functions, description, selftest = {ok, lines | error} when
-- opts.selftest}) | nil, err, code. opts.role: the sandbox (default
-- "describe"; a node's loaded policies decide in "decide", where they stay
-- loaded until release); opts.file, opts.chunkname as for job.
function M.policy(name, kv, opts)
  opts = opts or {}
  local ok, err, code = admissible("policy", name, kv, opts)
  if not ok then return nil, err, code end
  local box = M.box(opts.role)
  local handle
  if opts.role == "decide" then
    handles = handles + 1
    handle = name .. "@" .. tostring(kv.mod_revision) .. "#" .. handles
  end
  local r = box:call { op = "policy", name = name, source = kv.value, chunk = opts.chunkname,
                       handle = handle, selftest = opts.selftest or nil, preview = opts.preview or nil }
  if not r.ok then return nil, stopped("policy", name, r) end
  return proxy(name, kv, r, box, handle), r
end

-- release(mod): the sandbox forgets a policy module of M.policy (replaced
-- or removed); its decisions are the default's from then on.
function M.release(mod)
  local state = states[mod]
  if not state then return end
  states[mod] = nil
  state.failed = "the policy was replaced or removed"
  if state.handle and state.gen == state.box.gen and state.box.p then
    state.box:call { op = "drop", handle = state.handle }
  end
end

-- check(name, source, chunkname) --> what `baton check` reports of a local
-- file: {kind = "job", spec = } or {kind = "policy", module, functions,
-- description, selftest = {ok, lines|error}, preview = {ok, lines}}, or
-- nil, err, code.
function M.check(name, source, chunkname)
  local bad = not_text("job", name, source)
  if bad then return nil, bad, "EINVAL" end
  local r = M.box():call { op = "check", name = name, source = source, chunk = chunkname }
  if not r.ok then return nil, stopped("file", name, r) end
  if r.kind == "policy" then return r end
  local spec, err, code = spec_of(name, { value = source }, r)
  if not spec then return nil, err, code end
  return { kind = "job", spec = spec }
end

return M
