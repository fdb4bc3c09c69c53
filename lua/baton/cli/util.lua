-- Helpers shared by the job, queue, nodes and leader subcommands: the key
-- prefix and layout (design.md section 9), time formatting, aligned tables,
-- reading files, ids.
local baton = require "baton"

local format, floor, concat = string.format, math.floor, table.concat
local type, tostring, ipairs, pairs = type, tostring, ipairs, pairs

local M = {}

-- The configured prefix (--prefix, BATON_PREFIX, default "/baton/"), with
-- a trailing "/" added when missing.
function M.prefix()
  local p = (baton.config and baton.config.prefix) or "/baton/"
  if p:sub(-1) ~= "/" then p = p .. "/" end
  return p
end

-- Keys of design.md section 9 under the prefix.
function M.key(kind, ...)
  local parts = { M.prefix() .. kind }
  for _, v in ipairs { ... } do parts[#parts + 1] = tostring(v) end
  return concat(parts, "/")
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

-- Seconds as a short duration: 850ms, 12s, 3m04s, 2h05m, 3d04h.
function M.duration(s)
  if type(s) ~= "number" or s ~= s then return "-" end
  if s < 0 then s = 0 end
  if s < 1 then return format("%dms", floor(s * 1000 + 0.5)) end
  if s < 60 then return format("%ds", floor(s + 0.5)) end
  s = floor(s + 0.5)
  if s < 3600 then return format("%dm%02ds", floor(s / 60), s % 60) end
  if s < 86400 then return format("%dh%02dm", floor(s / 3600), floor(s % 3600 / 60)) end
  return format("%dd%02dh", floor(s / 86400), floor(s % 86400 / 3600))
end

-- Prints rows (lists of strings) in aligned columns under a header, two
-- spaces apart, the last column unpadded. Nothing at all when rows is empty.
function M.print_table(header, rows, out)
  out = out or io.stdout
  if #rows == 0 then return end
  local width = {}
  local all = { header }
  for _, r in ipairs(rows) do all[#all + 1] = r end
  for _, r in ipairs(all) do
    for i = 1, #header do
      local v = tostring(r[i] == nil and "-" or r[i])
      if #v > (width[i] or 0) then width[i] = #v end
    end
  end
  for _, r in ipairs(all) do
    local cells = {}
    for i = 1, #header do
      local v = tostring(r[i] == nil and "-" or r[i])
      cells[i] = i < #header and v .. (" "):rep(width[i] - #v) or v
    end
    out:write((concat(cells, "  "):gsub("%s+$", "")), "\n")
  end
end

-- "key: value" lines with the values aligned.
function M.print_fields(list, out)
  out = out or io.stdout
  local w = 0
  for _, kv in ipairs(list) do if #kv[1] > w then w = #kv[1] end end
  for _, kv in ipairs(list) do
    out:write(kv[1], ":", (" "):rep(w - #kv[1] + 2), tostring(kv[2]), "\n")
  end
end

-- JSON on one line, to stdout. (What it shows comes from etcd: a NUL byte
-- in a run id from a raw key, say, is printed as U+FFFD, baton.json.)
function M.print_json(v)
  io.stdout:write(baton.json.encode(v, { nul = "replace" }), "\n")
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

-- The whole content of a file, or nil, "ENOENT: FILE: ...", code. With max,
-- a file larger than max bytes is refused before anything is read:
-- nil, "EFBIG: FILE is N MiB ...", "EFBIG".
function M.read_file(path, max)
  local f, err, errno = io.open(path, "rb")
  if not f then
    local code = errno == 2 and "ENOENT" or errno == 13 and "EACCES" or "EIO"
    return nil, format("%s: %s", code, err), code
  end
  local size = max and f:seek("end")
  if size and size > max then
    f:close()
    return nil, format("EFBIG: %s is %s, larger than etcd's request limit of %s "
      .. "(etcd's default --max-request-bytes); nothing was sent", path, M.bytes(size), M.bytes(max)), "EFBIG"
  end
  if size then f:seek("set", 0) end
  local s = f:read("*a")
  f:close()
  if not s then return nil, "EIO: " .. path .. ": cannot read", "EIO" end
  return s
end

M.NAME_RULE = "letters, digits, '_', '.', '-', starting with a letter or digit"

-- The FILE and --name of `baton job put` / `baton policy put`: returns
-- name, source; or calls usage(msg) / die(sub, what, err) (which exit).
-- kind is "job" or "policy".
function M.put_args(pos, opts, kind, usage, die)
  local file = pos[2]
  if not file then return usage("needs a FILE") end
  if pos[3] then return usage("unexpected argument \"" .. pos[3] .. "\"") end
  local name = opts.name or M.base_name(file)
  if not require("baton.job").valid_name(name) then
    return usage(format("invalid %s name \"%s\" (%s)%s", kind, name, M.NAME_RULE,
      opts.name and "" or "; choose one with --name"))
  end
  -- (the key and the request's framing count against the limit too)
  local source, err = M.read_file(file, M.MAX_REQUEST - #M.key(kind == "job" and "jobs" or "policies", name) - 512)
  if not source then return die("put", file, err) end
  return name, source, file
end

-- The secret key of put's --sign KEY (nil without --sign), or nil and
-- the error ("--sign: ...").
function M.signing_key(opts)
  if not opts.sign then return nil end
  local secret, err = require("baton.sign").load_secret(opts.sign)
  if not secret then return nil, "--sign: " .. err end
  return secret
end

-- The base name of a path without its .lua extension.
function M.base_name(path)
  return (path:match("([^/]*)$"):gsub("%.lua$", ""))
end

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

-- Who is asking, for the records: $USER@host.
function M.who()
  local user = os.getenv("USER") or os.getenv("LOGNAME") or "unknown"
  local f = io.open("/proc/sys/kernel/hostname") or io.open("/etc/hostname")
  local host = f and f:read("*l")
  if f then f:close() end
  return user .. "@" .. ((host and host ~= "") and host or "localhost")
end

-- The live nodes (the JSON each keeps at P nodes/<name>), sorted by name:
-- list of {name=, labels=, ...}, or nil, err.
function M.live_nodes()
  local pfx = M.key("nodes") .. "/"
  local r, err = baton.etcd:get(pfx, { prefix = true, sort = "key", order = "asc" })
  if not r then return nil, err end
  local list = {}
  for _, kv in ipairs(r.kvs) do
    local v = M.decode_object(kv.value) or {}
    v.name = M.field(v, "name") or kv.key:sub(#pfx + 1)
    if type(M.field(v, "labels")) ~= "table" then v.labels = {} end
    list[#list + 1] = v
  end
  return list
end

-- Labels as k=v,... sorted ("-" for none).
function M.labels_text(labels)
  local l = {}
  for _, k in ipairs(M.sorted_keys(labels or {})) do l[#l + 1] = k .. "=" .. tostring(labels[k]) end
  return #l > 0 and concat(l, ",") or "-"
end

-- Why no live node can run a job with these labels, or nil when one can
-- (nodes: M.live_nodes()). The nodes decide by labels the same way
-- (baton.policies.util.eligible).
function M.no_eligible_node(labels, nodes)
  local eligible = require("baton.policies.util").eligible
  for _, n in ipairs(nodes) do
    if eligible({ labels = labels }, n) then return nil end
  end
  if #nodes == 0 then
    return format("no node is live under %s (is a node running, with this --prefix?)", M.key("nodes") .. "/")
  end
  local seen = {}
  for i, n in ipairs(nodes) do
    if i > 5 then seen[#seen + 1] = format("and %d more", #nodes - 5); break end
    seen[#seen + 1] = format("%s (%s)", n.name, M.labels_text(n.labels))
  end
  return format("no live node has the labels %s (live: %s)", M.labels_text(labels), concat(seen, ", "))
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
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

return M
