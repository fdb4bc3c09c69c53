-- Helpers shared by the job, queue, nodes and leader subcommands: the key
-- prefix and layout (docs/architecture.md, "Key layout"), time formatting,
-- aligned tables, text from etcd made safe for a terminal, reading files,
-- ids.
local baton = require "baton"
local keys = require "baton.keys"

local format, floor, concat = string.format, math.floor, table.concat
local type, tostring, ipairs, pairs = type, tostring, ipairs, pairs
local byte, find, sub = string.byte, string.find, string.sub

local M = {}

-- Text from etcd (or from what a run printed) as the CLI prints it: every
-- byte that a terminal would act on rather than show is shown instead as
-- an escape, so stored text can neither change the terminal (colours,
-- hidden text, the title, the clipboard: OSC 52), nor overwrite what is
-- on the line (\r, backspaces), nor fake lines of baton's own output:
--
--   \n          a newline, unless multiline (a body of several lines)
--   \r          a carriage return
--   \xNN        any other C0 control character but the tab (ESC is
--               \x1b), DEL (\x7f), each byte of a C1 control character
--               (U+0080..U+009F: \xc2\x9b) and each byte that is not
--               part of valid UTF-8 (a lone \x9b is CSI to an 8-bit
--               terminal)
--   \uXXXX      the Unicode controls of text direction (U+202A..U+202E,
--               U+2066..U+2069), which reorder what a reader sees
--
-- A tab, valid UTF-8 and every other byte are kept; a backslash is not
-- escaped itself (the text "\x1b" shows as it is: --json gives the exact
-- bytes). Text with nothing to escape is returned as it is.
function M.escape(text, multiline)
  text = tostring(text)
  if not find(text, multiline and "[%z\1-\8\11-\31\127-\255]" or "[%z\1-\8\10-\31\127-\255]") then
    return text
  end
  local out, i, n, from = {}, 1, #text, 1
  local function put(upto, esc)
    if upto >= from then out[#out + 1] = sub(text, from, upto) end
    out[#out + 1] = esc
  end
  while i <= n do
    local c = byte(text, i)
    if c < 0x20 or c == 0x7f then
      if c == 9 or (c == 10 and multiline) then
        i = i + 1
      else
        put(i - 1, c == 10 and "\\n" or c == 13 and "\\r" or format("\\x%02x", c))
        i = i + 1
        from = i
      end
    elseif c < 0x80 then
      i = i + 1
    else
      -- The length of the valid UTF-8 sequence at i (0: none), as
      -- runtime/core/logfmt.c reads it.
      local len, lo, hi = 0, 0x80, 0xbf
      if c >= 0xc2 and c <= 0xdf then len = 2
      elseif c >= 0xe0 and c <= 0xef then
        len = 3
        if c == 0xe0 then lo = 0xa0 elseif c == 0xed then hi = 0x9f end
      elseif c >= 0xf0 and c <= 0xf4 then
        len = 4
        if c == 0xf0 then lo = 0x90 elseif c == 0xf4 then hi = 0x8f end
      end
      if len > 0 then
        local c2 = byte(text, i + 1)
        if not c2 or c2 < lo or c2 > hi then len = 0 end
        for k = 2, len - 1 do
          local ck = len > 0 and byte(text, i + k)
          if not ck or ck < 0x80 or ck > 0xbf then len = 0 end
        end
      end
      if len == 0 then
        put(i - 1, format("\\x%02x", c))
        i = i + 1
        from = i
      elseif len == 2 and c == 0xc2 and byte(text, i + 1) <= 0x9f then
        put(i - 1, format("\\xc2\\x%02x", byte(text, i + 1)))
        i = i + 2
        from = i
      elseif len == 3 and c == 0xe2 and ((byte(text, i + 1) == 0x80 and byte(text, i + 2) >= 0xaa
          and byte(text, i + 2) <= 0xae) or (byte(text, i + 1) == 0x81 and byte(text, i + 2) >= 0xa6
          and byte(text, i + 2) <= 0xa9)) then
        local cp = (byte(text, i + 1) - 0x80) * 64 + byte(text, i + 2) - 0x80 + 0x2000
        put(i - 1, format("\\u%04x", cp))
        i = i + 3
        from = i
      else
        i = i + len
      end
    end
  end
  if from <= n then out[#out + 1] = sub(text, from) end
  return concat(out)
end

-- io.stdout:write of text from etcd (M.escape), each argument escaped;
-- multi-line when multiline.
function M.write(multiline, ...)
  for i = 1, select("#", ...) do io.stdout:write(M.escape((select(i, ...)), multiline)) end
end

-- The configured prefix, and an instant as a run key names it (keys.lua).
M.prefix, M.instant = keys.prefix, keys.instant

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

---------------------------------------------------------------------------
-- the terminal: colours and width

-- What stdout is: {tty = bool, color = bool, cols = columns or nil}.
-- Colours only on a terminal, and not with NO_COLOR set (no-color.org) or
-- TERM=dumb; the width (a terminal's: COLUMNS when it is a positive whole
-- number, else what the terminal says) only on a terminal too, so that what
-- is piped or redirected is whole and plain.
local term
function M.terminal()
  if term then return term end
  local tty, cols = baton._terminal(1)
  local nc, tn = os.getenv("NO_COLOR"), os.getenv("TERM")
  local env_cols = tonumber(os.getenv("COLUMNS") or "")
  if env_cols and (env_cols < 1 or env_cols ~= floor(env_cols)) then env_cols = nil end
  term = { tty = tty, color = tty and (nc == nil or nc == "") and tn ~= "dumb",
           cols = tty and (env_cols or cols) or nil }
  return term
end

-- SGR colours of the words of states (run, job, node and check states).
local STATE_COLOR = {
  failed = "31", lost = "31", abandoned = "31", killed = "31", broken = "31", untrusted = "31",
  mismatch = "31", MISMATCH = "31", error = "31",
  retrying = "33", interrupted = "33", skipped = "33", paused = "33", stale = "33", compacted = "33",
  running = "36",
  succeeded = "32", active = "32", ok = "32",
}

-- The SGR colour of a cell that starts with a state word ("failed",
-- "broken,paused", "succeeded 2026-..."), or nil.
function M.state_color(text)
  return STATE_COLOR[tostring(text):match("^[%a]+")]
end

-- text (escaped already: M.escape) in colour sgr when stdout takes
-- colours; as it is otherwise. The codes are baton's own, added around
-- escaped text: stored text never reaches the terminal as codes.
function M.paint(text, sgr)
  if not sgr or not M.terminal().color then return text end
  return "\27[" .. sgr .. "m" .. text .. "\27[0m"
end

-- The width of text on a terminal: its UTF-8 characters (each one
-- column; text is escaped, so no control characters are left).
function M.width(text)
  local _, cont = text:gsub("[\128-\191]", "")
  return #text - cont
end

-- text cut to at most w columns, with "…" as its last when it was cut.
function M.ellipsize(text, w)
  if M.width(text) <= w then return text end
  if w < 1 then return "" end
  local cols, i = 0, 1
  while i <= #text and cols < w - 1 do
    local c = byte(text, i)
    local len = c >= 0xf0 and 4 or c >= 0xe0 and 3 or c >= 0xc0 and 2 or 1
    i = i + len
    cols = cols + 1
  end
  return sub(text, 1, i - 1) .. "…"
end

-- Prints rows (lists of strings) in aligned columns under a header, two
-- spaces apart, the last column unpadded. Nothing at all when rows is empty.
-- Each cell is escaped (M.escape, one line). opts (optional):
--   flex = {i, ...}: on a terminal narrower than the table, these columns
--     (free text: an error, a last run) are cut to fit, with "…", in this
--     order, none below its header's width or 8 columns;
--   color = {[i] = fn(cell) -> sgr | nil}: the colour of a cell of column
--     i (the raw cell), on a terminal that takes colours (M.terminal).
function M.print_table(header, rows, out, opts)
  out = out or io.stdout
  opts = opts or {}
  if #rows == 0 then return end
  local n = #header
  local width = {}
  local all = { header }
  for _, r in ipairs(rows) do
    local c = {}
    for i = 1, n do c[i] = M.escape(r[i] == nil and "-" or r[i]) end
    all[#all + 1] = c
  end
  for _, r in ipairs(all) do
    for i = 1, n do
      local v = M.width(tostring(r[i]))
      if v > (width[i] or 0) then width[i] = v end
    end
  end
  local cols = out == io.stdout and M.terminal().cols
  if cols and opts.flex then
    local total = 2 * (n - 1)
    for i = 1, n do total = total + width[i] end
    for _, i in ipairs(opts.flex) do
      if total <= cols then break end
      local least = math.max(M.width(header[i]), 8)
      local cut = math.min(total - cols, width[i] - least)
      if cut > 0 then
        width[i], total = width[i] - cut, total - cut
        for k = 2, #all do all[k][i] = M.ellipsize(all[k][i], width[i]) end
      end
    end
  end
  for k, r in ipairs(all) do
    local cells = {}
    for i = 1, n do
      local v = tostring(r[i])
      local pad = i < n and (" "):rep(width[i] - M.width(v)) or ""
      local fn = k > 1 and opts.color and opts.color[i]
      if fn then v = M.paint(v, fn(rows[k - 1][i])) end
      cells[i] = v .. pad
    end
    out:write((concat(cells, "  "):gsub("%s+$", "")), "\n")
  end
end

-- The NODE, REVISION, STATUS table of job show and policy show: a stale
-- revision in yellow, a status other than ok in red and cut to fit.
M.STATUS_TABLE = {
  flex = { 3 },
  color = { [2] = function(v) return v:find("(stale)", 1, true) and "33" or nil end,
            [3] = function(v) return v == "ok" and "32" or "31" end },
}

-- "key: value" lines with the values aligned, each value escaped (M.escape,
-- one line).
function M.print_fields(list, out)
  out = out or io.stdout
  local w = 0
  for _, kv in ipairs(list) do if #kv[1] > w then w = #kv[1] end end
  for _, kv in ipairs(list) do
    out:write(kv[1], ":", (" "):rep(w - #kv[1] + 2), M.escape(kv[2]), "\n")
  end
end

-- JSON on one line, to stdout. (What it shows comes from etcd: a NUL byte
-- in a run id from a raw key, say, is printed as U+FFFD, baton.json.)
function M.print_json(v)
  io.stdout:write(baton.json.encode(v, { nul = "replace" }), "\n")
end

-- etcd's default limit on the size of a request (--max-request-bytes).
M.MAX_REQUEST = 1572864

-- Bytes as a reader says them (text.lua).
M.bytes = require("baton.text").bytes

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
  local source, err = M.read_file(file, M.MAX_REQUEST - #keys.key(M.prefix(), kind == "job" and "jobs" or "policies", name) - 512)
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

-- The live nodes (the JSON each keeps at P nodes/<name>), sorted by name:
-- list of {name=, labels=, ...}, or nil, err. A record on no lease is not
-- a node's (a node keeps it on its session's lease, and etcd deletes it
-- with the lease): a forged or stray key, left out (docs/security.md).
function M.live_nodes()
  local pfx = keys.dir(M.prefix(), "nodes")
  local r, err = baton.etcd:get(pfx, { prefix = true, sort = "key", order = "asc" })
  if not r then return nil, err end
  local list = {}
  for _, kv in ipairs(r.kvs) do
    if kv.lease then
      local v = M.decode_object(kv.value) or {}
      v.name = M.field(v, "name") or keys.under(pfx, kv.key)
      if type(M.field(v, "labels")) ~= "table" then v.labels = {} end
      list[#list + 1] = v
    end
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
    return format("no node is live under %s (is a node running, with this --prefix?)", keys.dir(M.prefix(), "nodes"))
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
  local list = {}
  for k in pairs(t) do list[#list + 1] = k end
  table.sort(list, function(a, b) return tostring(a) < tostring(b) end)
  return list
end

return M
