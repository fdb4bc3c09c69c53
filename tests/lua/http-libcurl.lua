-- libcurl is loaded on a process's first HTTP request: a process that makes
-- none never maps it (~7 ms of start-up and ~6 MiB of RSS: `baton lock`,
-- `baton job ls`, most `baton eval` scripts), the first baton.http
-- request loads it, http:// and https:// alike, and when it cannot be
-- loaded the error says so instead of crashing or hanging.
local T = require "tap"
local files = require "lib.files"

local ep = (os.getenv("BATON_ENDPOINTS") or ""):match("^[^,]+")
if not ep then return T.skip_all("BATON_ENDPOINTS is not set") end

local mapped = files.mapped

if mapped("libc.so") == nil then
  return T.skip_all("no /proc/self/maps here")
end
T.is(mapped("libcurl"), false, "a fresh process has not mapped libcurl")

-- plain http: libcurl is loaded and answers
local r = baton.http{url = ep .. "/version"}
T.is(r and r.status, 200, "baton.http over http")
T.is(mapped("libcurl"), true, "the first request loaded libcurl")

-- https through the same library (here: nothing listens)
local _, msg, code = baton.http{url = "https://127.0.0.1:1/", timeout = 5}
T.is(code, "ECONNREFUSED", "an https request: " .. tostring(msg))
r = baton.http{url = ep .. "/version"}
T.is(r and r.status, 200, "http still works next to it")

-- A libcurl that cannot be loaded, under both names baton tries.
local l1, l2, res = files.eval_without({"libcurl.so.4", "libcurl.so"}, [[
  local _, msg = baton.http{url = "https://127.0.0.1:1/", timeout = 5}
  print(msg)
  _, msg = baton.http{url = arg[1] .. "/version", timeout = 5}
  print(msg)
]], ep)
if not res then
  T.skip("BATON_BIN is not set", 3)
else
  T.is(res.code, 0, "the process runs to its end: " .. tostring(res.stderr))
  T.like(l1, "^ENOTSUP: https://127%.0%.0%.1:1/: not supported %(libcurl could not be loaded: .*libcurl%.so%.4",
    "baton.http https: says libcurl could not be loaded, and why")
  T.like(l2, "^ENOTSUP: http://.*/version: not supported %(libcurl could not be loaded: .*libcurl%.so%.4",
    "baton.http http: the same")
end

-- A libcurl older than 7.85 is refused, with the reason: it would ignore
-- the options it does not know (CURLOPT_PROTOCOLS_STR and
-- CURLOPT_REDIR_PROTOCOLS_STR) and follow a redirect to ftp://. A stand-in
-- library that says it is 7.80.0 (built with cc, when there is one).
local bin = os.getenv("BATON_BIN")
local cc = baton.exec { "sh", "-c", "command -v cc" }
if not bin or bin == "" or not cc or cc.code ~= 0 then
  T.skip("BATON_BIN is not set or no cc", 2)
else
  local dir = os.tmpname()
  os.remove(dir)
  assert(baton.exec { "mkdir", "-p", dir })
  local fns = {}
  for f in ("global_init multi_init multi_setopt multi_cleanup multi_add_handle multi_remove_handle " ..
      "multi_socket_action multi_info_read multi_assign easy_init easy_setopt easy_getinfo " ..
      "easy_reset easy_cleanup slist_append slist_free_all"):gmatch("%S+") do
    fns[#fns + 1] = "void *curl_" .. f .. "(void) { return 0; }"
  end
  files.write(dir .. "/old.c", table.concat(fns, "\n") .. [[

struct vi { int age; const char *version; unsigned int version_num; };
static struct vi v = { 10, "7.80.0", 0x075000 };
struct vi *curl_version_info(int age) { return &v; }
]])
  local built = baton.exec { "cc", "-shared", "-fPIC", "-o", dir .. "/libcurl.so.4", dir .. "/old.c" }
  files.write(dir .. "/t.lua", [[print((select(2, baton.http{url = "http://127.0.0.1:1/", timeout = 5})))]])
  local res = built and built.code == 0 and baton.exec { bin, "eval", dir .. "/t.lua", timeout = 30,
    env = { LD_LIBRARY_PATH = dir } }
  baton.exec { "rm", "-rf", dir }
  T.ok(res and res.code == 0, "the process runs to its end: " .. tostring(res and res.stderr or built.stderr))
  T.like(res and res.stdout or "", "^ENOTSUP: http://127%.0%.0%.1:1/: not supported %(libcurl could not be " ..
    "loaded: libcurl 7%.85 or later is needed, found 7%.80%.0%)\n$", "an old libcurl is refused, saying why")
end

T.done()
