-- The conductor<->worker protocol: every message between a node (its pool,
-- node/pool.lua, and its runs, node/execute.lua) and one of its pooled
-- workers (`baton worker`, worker/main.lua). They speak over the worker's
-- channel (baton.spawn{..., channel = true}), one JSON object a line; this
-- module encodes and decodes every message, and nothing else spells one.
--
--   node -> worker  run       {"run": {job, id, fire, fence, attempt, node,
--                              code_revision, code_created, code_version,
--                              source, deadline, marker, task, shard,
--                              record, clock, params, event, events,
--                              secrets | secrets_error}}
--                              one run to execute (M.RUN_FIELDS)
--   worker -> node  reply     {"ok": bool, "error": string|null,
--                              "stopped": bool, "retire": bool,
--                              "handoff": key|null, "busy": seconds}
--                              how the run ended: the one answer to a run
--   node -> worker  recorded  {"recorded": key}
--                              the node has written the success handed
--                              over as key
--   worker -> node  txn       {"txn": {"n": N, "run": key,
--                              "ops": [{"put": {key, value}}, ...]}}
--                              a fenced write of the run (ctx:put_fenced)
--                              for the node to make, request number N
--   node -> worker  txn_done  {"txn_done": N, "succeeded": bool} or
--                             {"txn_done": N, "error": text, "code": code}
--                              the node's answer to request N
--
-- A key names one attempt of a run: job/id/attempt (M.attempt_key).
--
-- JSON text holds no NUL byte: one in a message's text (an error, a name
-- read from etcd) is sent as U+FFFD (baton.json's nul = "replace"), never
-- raised, so that a message is always sent. (What a run is given holds
-- none: node/execute.lua refuses such a run first; a fenced put with one goes
-- straight to etcd, worker/main.lua.)
--
-- A line that is not one of these messages decodes to nil, "EPROTO: ...",
-- "EPROTO", saying what is wrong with it.
local baton = require "baton"
local json = baton.json

local TEXT = { nul = "replace" }

local M = {}

-- The fields of a run message, and whether each may be left out (the
-- others must be there).
M.RUN_FIELDS = {
  job = false, id = true, fire = true, fence = false, attempt = false, node = false,
  code_revision = false, code_created = true, code_version = true, source = true,
  deadline = true, marker = false, task = true, shard = true, record = true, clock = true,
  params = true, event = true, events = true, secrets = true, secrets_error = true,
}

-- Names one attempt of a run between a node and its worker: job/id/attempt.
function M.attempt_key(run)
  return run.job .. "/" .. tostring(run.id) .. "/" .. tostring(run.attempt)
end

local function fail(who, why)
  return nil, "EPROTO: " .. who .. " sent a malformed message: " .. why, "EPROTO"
end

-- v, or nil for JSON null.
local function value(v)
  if v == json.null then return nil end
  return v
end

---------------------------------------------------------------------------
-- node -> worker

-- The text of a run message for run (a table of M.RUN_FIELDS; a field
-- that is not one raises). nil and why when JSON cannot hold what it is
-- given (a function or NaN from the job's file): the worker is then told
-- nothing.
function M.run(run)
  for k in pairs(run) do
    if M.RUN_FIELDS[k] == nil then error("protocol.run: unknown field " .. tostring(k), 2) end
  end
  local ok, text = pcall(json.encode, { run = run }, TEXT)
  if not ok then return nil, (tostring(text):gsub("^baton%.json%.encode: ", "")) end
  return text
end

-- The text that says the node has recorded the success handed over as key.
function M.recorded(key)
  return json.encode({ recorded = key }, TEXT)
end

-- The text of the node's answer to the worker's request n: answer is
-- {succeeded = bool} or {error = text, code = code}.
function M.txn_done(n, answer)
  if type(answer.succeeded) == "boolean" then
    return json.encode({ txn_done = n, succeeded = answer.succeeded }, TEXT)
  end
  return json.encode({ txn_done = n, error = answer.error, code = answer.code }, TEXT)
end

-- A line the worker read as a message: {kind = "run", run = {...}} (its
-- fields that are null left out), {kind = "recorded", key = key}, or
-- {kind = "txn_done", n = N, succeeded = bool} / {kind = "txn_done", n =
-- N, error = text, code = code}; or nil, "EPROTO: ...", "EPROTO".
function M.decode_for_worker(line)
  local m, err = json.decode(line or "")
  if m == nil then return fail("the node", tostring(err)) end
  if type(m) ~= "table" then return fail("the node", "not a JSON object") end
  if m.run ~= nil then
    local run = m.run
    if type(run) ~= "table" then return fail("the node", "run is not an object") end
    for k, v in pairs(run) do
      if v == json.null then run[k] = nil end
    end
    for k, optional in pairs(M.RUN_FIELDS) do
      if not optional and run[k] == nil then return fail("the node", "the run has no " .. k) end
    end
    if type(run.job) ~= "string" then return fail("the node", "the run's job is not a string") end
    return { kind = "run", run = run }
  end
  if m.recorded ~= nil then
    if type(m.recorded) ~= "string" then return fail("the node", "recorded is not a key") end
    return { kind = "recorded", key = m.recorded }
  end
  if m.txn_done ~= nil then
    if type(m.txn_done) ~= "number" then return fail("the node", "txn_done is not a request number") end
    local a = { kind = "txn_done", n = m.txn_done }
    if type(m.succeeded) == "boolean" then
      a.succeeded = m.succeeded
    elseif type(m.error) == "string" then
      a.error, a.code = m.error, type(m.code) == "string" and m.code or nil
    else
      return fail("the node", "txn_done has neither succeeded nor an error")
    end
    return a
  end
  return fail("the node", "neither run, recorded nor txn_done")
end

---------------------------------------------------------------------------
-- worker -> node

-- The text of the worker's reply to its run: {ok = bool, error = text,
-- stopped = bool, retire = bool, handoff = key, busy = seconds}.
function M.reply(reply)
  return json.encode(reply, TEXT)
end

-- The text of the worker's request n for a fenced transaction of the
-- attempt named key (M.attempt_key): ops, a list of {put = {key =,
-- value =}}.
function M.txn(n, key, ops)
  return json.encode({ txn = { n = n, run = key, ops = ops } }, TEXT)
end

-- ops of a fenced transaction, if they are what one may hold: puts of
-- string keys and values.
local function fenced_ops(ops)
  if type(ops) ~= "table" or #ops == 0 then return nil end
  for _, op in ipairs(ops) do
    local put = type(op) == "table" and op.put
    if type(put) ~= "table" or type(put.key) ~= "string" or type(put.value) ~= "string"
       or next(op, next(op)) then
      return nil
    end
  end
  return ops
end

local REPLY_TYPES = { ok = "boolean", error = "string", stopped = "boolean", retire = "boolean",
                      handoff = "string", busy = "number" }

-- A line the node read from its worker as a message: {kind = "reply", ok
-- = bool, error =, stopped =, retire =, handoff =, busy =} (null fields
-- left out), or {kind = "txn", n = N, run = key, ops = ops} where ops is
-- nil and why says so when they are not puts of string keys and values
-- (the request is then refused, with that reason); or nil, "EPROTO: ...",
-- "EPROTO".
function M.decode_for_node(line)
  local m, err = json.decode(line or "")
  if m == nil then return fail("the worker", tostring(err)) end
  if type(m) ~= "table" then return fail("the worker", "not a JSON object") end
  if m.txn ~= nil then
    local t = m.txn
    if type(t) ~= "table" then return fail("the worker", "txn is not an object") end
    if type(t.n) ~= "number" then return fail("the worker", "txn has no request number") end
    local req = { kind = "txn", n = t.n, run = type(t.run) == "string" and t.run or nil, ops = fenced_ops(t.ops) }
    if not req.ops then req.why = "EINVAL: a fenced write holds puts of string keys and values" end
    return req
  end
  local r = { kind = "reply" }
  for k, v in pairs(m) do
    v = value(v)
    if v ~= nil then
      if REPLY_TYPES[k] == nil then return fail("the worker", "unknown field " .. tostring(k)) end
      if type(v) ~= REPLY_TYPES[k] then
        return fail("the worker", ("%s is a %s, not a %s"):format(k, type(v), REPLY_TYPES[k]))
      end
      r[k] = v
    end
  end
  if r.ok == nil then return fail("the worker", "the reply has no ok") end
  return r
end

return M
