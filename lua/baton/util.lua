-- Helpers every layer of baton's Lua shares (the CLI, baton.ops, the node,
-- the worker): the configured key prefix, instants and run ids as runs
-- name them, ids that sort by time, who is asking, JSON object fields,
-- sizes and etcd's request limit. Nothing here talks to etcd or to a
-- terminal (cli/util.lua formats for the terminal).
local baton = require "baton"

local format, floor, concat = string.format, math.floor, table.concat
local type, tostring, pairs = type, tostring, pairs

local M = {}

-- The configured prefix (--prefix, BATON_PREFIX, default "/baton/"), with
-- a trailing "/" added when missing.
function M.prefix()
  local p = (baton.config and baton.config.prefix) or "/baton/"
  if p:sub(-1) ~= "/" then p = p .. "/" end
  return p
end

-- An instant as a run key names it: 2026-11-29T02:00:00Z (UTC, whole
-- seconds).
function M.instant(t)
  return os.date("!%Y-%m-%dT%H:%M:%SZ", floor(t))
end

-- An instant for a reader, RFC 3339. With a zone, this should carry the
-- zone's offset as `baton cron` prints it; the Lua API has no formatter yet
-- (runtime/lua/lua_cron.c), so a zone is used only if the cron object offers
-- :format(t), and otherwise the instant is shown in UTC ("Z").
function M.rfc3339(t, cron)
  if t == nil then return "-" end
  if cron and cron.format then return cron:format(t) end
  return M.instant(t)
end

-- etcd's default limit on the size of a request (--max-request-bytes).
M.MAX_REQUEST = 1572864

-- Bytes as a reader says them: 812 bytes, 1.5 MiB, 200.0 MiB.
function M.bytes(n)
  if n < 1024 then return format("%d bytes", n) end
  if n < 1024 * 1024 then return format("%.1f KiB", n / 1024) end
  if n < 1024 * 1024 * 1024 then return format("%.1f MiB", n / 1048576) end
  return format("%.1f GiB", n / 1073741824)
end

-- The rule of job.valid_name (jobs, policies, queues), in words for messages.
M.NAME_RULE = "letters, digits, '_', '.', '-', starting with a letter or digit"

-- n random bytes as hex, from /dev/urandom (math.random as a fallback).
local seeded = false
function M.random_hex(n)
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(n)
  if f then f:close() end
  if bytes and #bytes == n then
    return (bytes:gsub(".", function(c) return format("%02x", c:byte()) end))
  end
  if not seeded then
    math.randomseed(floor(baton.now() * 1000) % 2147483647)
    seeded = true
  end
  local t = {}
  for i = 1, n do t[i] = format("%02x", math.random(0, 255)) end
  return concat(t)
end

-- A unique id that sorts by creation time: 13 digits of Unix milliseconds,
-- "-", 16 random hex digits. Ids made on different machines in the same
-- millisecond sort in an arbitrary order; the exact order of puts is the
-- keys' create revision.
function M.time_id()
  return format("%013d-%s", floor(baton.now() * 1000), M.random_hex(8))
end

-- The id of the manual run requested at `at` (epoch seconds, as the
-- trigger's JSON carries it): its instant with milliseconds,
-- 2026-11-29T14:02:11.532Z. The node names the run so, and baton job run
-- prints it.
function M.manual_id(at)
  return M.instant(at):sub(1, -2) .. format(".%03dZ", floor(at * 1000) % 1000)
end

-- Who is asking, for the records: $USER@host. Without $USER (or
-- $LOGNAME): the name of the process's user in the user database, or
-- uid-N for a uid that has none (a service started with `env -i`, a
-- container): never a made-up name.
function M.who()
  local user = os.getenv("USER")
  if not user or user == "" then user = os.getenv("LOGNAME") end
  if not user or user == "" then
    local name, uid = baton._user()
    user = name or ("uid-" .. tostring(uid))
  end
  local f = io.open("/proc/sys/kernel/hostname") or io.open("/etc/hostname")
  local host = f and f:read("*l")
  if f then f:close() end
  return user .. "@" .. ((host and host ~= "") and host or "localhost")
end

-- Decodes a JSON object value; nil when it is not one.
function M.decode_object(s)
  local v = baton.json.decode(s)
  if type(v) ~= "table" then return nil end
  return v
end

-- A JSON-decoded field: nil for JSON null.
function M.field(t, k)
  local v = t and t[k]
  if v == baton.json.null then return nil end
  return v
end

-- Sorted keys of a table.
function M.sorted_keys(t)
  local list = {}
  for k in pairs(t) do list[#list + 1] = k end
  table.sort(list, function(a, b) return tostring(a) < tostring(b) end)
  return list
end

return M
