-- Queues: pushing one task, or a batch (a JSON array or lines of text,
-- split here) in transactions that keep the input's order. A node running
-- the queue's job claims the tasks (node/queue.lua).
local baton = require "baton"
local util = require "baton.util"
local job = require "baton.job"
local keys = require "baton.keys"
local common = require "baton.ops.common"

local json = baton.json
local format = string.format
local type, ipairs, tostring = type, ipairs, tostring

local M = {}

local function etcd() return baton.etcd end

local fail = common.fail

-- The largest task value one push stores: etcd's request limit, less the
-- key and the request's framing.
local function max_task(key) return util.MAX_REQUEST - #key - 512 end

local function too_big_task(n, what)
  return format("EFBIG: %sthe task is %s, larger than etcd's request limit of %s "
    .. "(etcd's default --max-request-bytes); nothing was stored", what or "", util.bytes(n), util.bytes(util.MAX_REQUEST))
end

-- queue_push(queue, value) --> {queue, key, revision}: a task under
-- P queue/<queue>/<id>, id = <unix ms, 13 digits>-<16 random hex digits>
-- (docs/guide.md, "5. Queues"), created only if absent.
function M.queue_push(queue, value)
  if not job.valid_name(queue) then
    return fail(format("EINVAL: invalid queue name \"%s\" (%s)", tostring(queue), util.NAME_RULE), "EINVAL")
  end
  if type(value) ~= "string" then return fail("EINVAL: the task value must be a string", "EINVAL") end
  if value:find("\0", 1, true) then
    -- (a run is given text: node/execute.lua would record it failed, runs.unfit)
    return fail("EINVAL: a task cannot hold a NUL byte; nothing was stored", "EINVAL")
  end
  local key = keys.key(util.prefix(), "queue", queue, util.time_id())
  if #value > max_task(key) then return fail(too_big_task(#value), "EFBIG") end
  -- created only if absent: an id collision must not overwrite a task
  local r, err, code = etcd():txn {
    compare = { { key = key, target = "create", op = "==", value = 0 } },
    success = { { put = { key = key, value = value } } },
  }
  if not r then return nil, err, code end
  if not r.succeeded then return fail("EEXIST: " .. key .. " exists; try again", "EEXIST") end
  return { queue = queue, key = key, revision = r.revision }
end

-- The ends of the JSON value that starts at byte i of s (a well-formed
-- array: json.decode has read it): the byte after it. Strings are skipped
-- whole, so brackets and commas inside them do not count.
local function skip_value(s, i)
  local depth = 0
  while true do
    local j = s:find('[%[%]{}",]', i)
    if not j then return #s + 1 end
    local c = s:sub(j, j)
    if c == '"' then
      local k = j + 1
      while true do
        local q = s:find('["\\]', k)
        if not q then return #s + 1 end
        if s:sub(q, q) == "\\" then k = q + 2 else k = q + 1; break end
      end
      i = k
    elseif c == "[" or c == "{" then
      depth, i = depth + 1, j + 1
    elseif depth > 0 then
      if c ~= "," then depth = depth - 1 end
      i = j + 1
    else
      return j -- a ',' or the array's ']' at the element's own level
    end
  end
end

-- queue_tasks(text[, name]) --> {values...}, where: the tasks of a batch push
-- (`baton queue push QUEUE -`, --file). When the first non-blank character
-- is '[', text is a JSON array and each element a task: a string as it
-- is, any other value as its JSON text (as written, not re-encoded);
-- otherwise each line is a task (a trailing "\r" removed; blank lines
-- skipped). name says what text is in messages ("standard input", a
-- file; default "the input"); where(i) names task i ("FILE, line 7",
-- "FILE, element 3").
-- Errors: EINVAL (not a JSON array, no task at all, a string with \u0000).
function M.queue_tasks(text, name)
  name = name or "the input"
  if type(text) ~= "string" then return fail("EINVAL: the tasks must be a string", "EINVAL") end
  local first = text:find("%S")
  local values, where = {}
  if first and text:sub(first, first) == "[" then
    -- (\u0000 read as U+FFFD, not cut short: refused below, naming the element)
    local arr, jerr = json.decode(text, { nul = "replace" })
    -- The elements' own text, between the commas of the array's level.
    local spans, i, stop = {}, first + 1
    if arr ~= nil and type(arr) == "table" then
      if text:find("^%s*%]", i) then
        stop = text:find("]", i, true)
      else
        while true do
          local j = skip_value(text, i)
          spans[#spans + 1] = text:sub(i, j - 1):match("^%s*(.-)%s*$")
          if text:sub(j, j) ~= "," then stop = j; break end
          i = j + 1
        end
      end
      -- (the decoder stops at the end of the array: text after it is ours to refuse)
      local rest = text:find("%S", stop + 1)
      if text:sub(stop, stop) ~= "]" or #spans ~= #arr then arr, jerr = nil, "not one JSON array"
      elseif rest then arr, jerr = nil, format("unexpected text after the array at byte %d", rest) end
    end
    if arr == nil or type(arr) ~= "table" then
      return fail("EINVAL: " .. name .. " starts with '[' but is not a JSON array of tasks: "
        .. tostring(jerr or "not one JSON array"):gsub("^EINVAL: ", "") .. "; nothing was stored", "EINVAL")
    end
    for n, raw in ipairs(spans) do
      local v = arr[n]
      if type(v) == "string" then
        -- (a task holds no NUL byte: one spelled \u0000, decoded as U+FFFD,
        -- or a raw one is refused rather than stored changed)
        if raw:find("\0", 1, true) then
          return fail(format("EINVAL: %s, element %d: a task cannot hold a NUL byte; nothing was stored", name, n), "EINVAL")
        end
        for bs in raw:gmatch("(\\+)u0000") do
          if #bs % 2 == 1 then
            return fail(format("EINVAL: %s, element %d: a task cannot hold \\u0000; nothing was stored", name, n), "EINVAL")
          end
        end
        values[n] = v
      else
        values[n] = raw
      end
    end
    where = function(k) return name .. ", element " .. k end
  else
    local lines = {}
    local ln = 0
    for line in (text:sub(-1) == "\n" and text or text .. "\n"):gmatch("([^\n]*)\n") do
      ln = ln + 1
      line = line:gsub("\r$", "")
      if line:find("%S") then
        values[#values + 1] = line
        lines[#values] = ln
      end
    end
    where = function(k) return name .. ", line " .. lines[k] end
  end
  if #values == 0 then
    return fail("EINVAL: no tasks in " .. name .. " (it is empty, blank, or an empty JSON array); "
      .. "nothing was stored", "EINVAL")
  end
  return values, where
end

-- How many puts one transaction of a batch push holds (etcd's default
-- --max-txn-ops is 128), and how many bytes of keys and values at most
-- (well under etcd's 1.5 MiB request limit; a bigger single task goes
-- alone).
M.PUSH_TXN_OPS = 128
M.PUSH_TXN_BYTES = 1024 * 1024

-- queue_push_many(queue, values[, where]) --> {queue, count, keys,
-- revision}: every value a task under P queue/<queue>/<id>, in txns of
-- PUSH_TXN_OPS puts (each created only if absent), one after the other,
-- so that both the ids and the create revisions follow the order of values
-- (and of the txns, a node claims tasks by create revision, then key). The
-- ids have the single push's format, <unix ms>-<16 hex digits>, where the
-- hex digits are 8 random ones for this push and a counter: ids of one
-- millisecond sort in push order too. Everything is checked before the
-- first txn: a bad queue name or a task over etcd's limit stores nothing.
-- When etcd fails midway, the txns already applied stay: the error says
-- how many tasks were stored, and the fourth value is {stored = n, keys =
-- the keys stored}. where(i) names task i in messages (M.queue_tasks).
function M.queue_push_many(queue, values, where)
  if not job.valid_name(queue) then
    return fail(format("EINVAL: invalid queue name \"%s\" (%s)", tostring(queue), util.NAME_RULE), "EINVAL")
  end
  if type(values) ~= "table" or #values == 0 then
    return fail("EINVAL: no tasks to push; nothing was stored", "EINVAL")
  end
  where = where or function(i) return "task " .. i end
  local pfx = keys.dir(util.prefix(), "queue", queue)
  local keylen = #pfx + 13 + 1 + 16
  local max = util.MAX_REQUEST - keylen - 512
  for i, v in ipairs(values) do
    if type(v) ~= "string" then
      return fail(format("EINVAL: %s: a task value must be a string; nothing was stored", where(i)), "EINVAL")
    end
    if #v > max then return fail(too_big_task(#v, where(i) .. ": "), "EFBIG") end
    if v:find("\0", 1, true) then
      return fail(format("EINVAL: %s: a task cannot hold a NUL byte; nothing was stored", where(i)), "EINVAL")
    end
  end
  local e = etcd()
  local salt, counter, last_ms = util.random_hex(4), 0, 0
  local made, n, rev = {}, #values, nil
  local i = 1
  while i <= n do
    local ms = math.max(math.floor(baton.now() * 1000), last_ms)
    last_ms = ms
    local compare, success, bytes = {}, {}, 0
    local first = i
    while i <= n and #success < M.PUSH_TXN_OPS do
      local size = 2 * keylen + #values[i] + 64
      if #success > 0 and bytes + size > M.PUSH_TXN_BYTES then break end
      local key = keys.key(util.prefix(), "queue", queue, format("%013d-%s%08x", ms, salt, counter))
      counter = counter + 1
      compare[#compare + 1] = { key = key, target = "create", op = "==", value = 0 }
      success[#success + 1] = { put = { key = key, value = values[i] } }
      made[i] = key
      bytes, i = bytes + size, i + 1
    end
    local r, err, code
    for try = 1, 3 do
      r, err, code = e:txn { compare = compare, success = success }
      if r then break end
      -- (the answer may have been lost after the txn was applied: then a
      -- try again fails its compares, and the first key is there)
      if try < 3 then baton.sleep(0.2 * try) end
    end
    local applied = r and r.succeeded
    if not applied then
      -- A try whose answer was lost may have stored them (then the next
      -- try fails its compares): the first key says so.
      local g = e:get(made[first])
      if g and g.kvs[1] and g.kvs[1].value == values[first] then
        applied = true
      elseif r then
        err, code = "EEXIST: a task id of this push exists already; try again", "EEXIST"
      elseif g then
        code = code or "EIO"
      else
        err = tostring(err) .. " (whether the last txn was applied is unknown)"
      end
    end
    if not applied then
      local nstored = first - 1
      local kept = {}
      for k = 1, nstored do kept[k] = made[k] end
      return nil, format("%s; %d of %d tasks were stored (the first %d of the input), the rest were not",
        tostring(err), nstored, n, nstored), code or "EIO", { stored = nstored, keys = json.array(kept) }
    end
    rev = (r and r.succeeded) and r.revision or rev
  end
  return { queue = queue, count = n, keys = json.array(made), revision = rev }
end

return M
