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

T.done()
