-- libcurl is loaded only for https: a process that talks plain HTTP to
-- etcd and elsewhere never maps it (the point of the native client: ~7 ms of
-- start-up and ~6 MiB of RSS), the first https request loads it, and when it
-- cannot be loaded the error says so instead of crashing or hanging.
local T = require "tap"
local files = require "lib.files"

local ep = (os.getenv("BATON_ENDPOINTS") or ""):match("^[^,]+")
if not ep then return T.skip_all("BATON_ENDPOINTS is not set") end

local function mapped(lib)
  local maps = files.read("/proc/self/maps")
  if not maps then return nil end
  return maps:find(lib, 1, true) ~= nil
end

if mapped("libc.so") == nil then
  return T.skip_all("no /proc/self/maps here")
end
T.is(mapped("libcurl"), false, "a fresh process has not mapped libcurl")

-- plain http: etcd and baton.http
local e = baton.etcd
T.ok(e:put("/baton-test/http-libcurl/k", "v"), "etcd put over http")
local r = e:get("/baton-test/http-libcurl/k")
T.is(r and r.kvs[1] and r.kvs[1].value, "v", "etcd get over http")
r = baton.http{url = ep .. "/version"}
T.is(r and r.status, 200, "baton.http over http")
T.is(mapped("libcurl"), false, "http requests do not load libcurl")

-- https: libcurl is loaded and answers (here: nothing listens)
local _, msg, code = baton.http{url = "https://127.0.0.1:1/", timeout = 5}
T.is(code, "ECONNREFUSED", "an https request goes through libcurl: " .. tostring(msg))
T.is(mapped("libcurl"), true, "and libcurl is mapped now")
r = baton.http{url = ep .. "/version"}
T.is(r and r.status, 200, "http still works next to it")

-- A libcurl that cannot be loaded: files that are not shared objects found
-- first through LD_LIBRARY_PATH, under both names baton tries.
local bin = os.getenv("BATON_BIN")
if not bin or bin == "" then
  T.skip("BATON_BIN is not set", 4)
else
  local dir = os.tmpname()
  os.remove(dir)
  assert(baton.exec{"mkdir", "-p", dir})
  files.write(dir .. "/libcurl.so.4", "not a library\n")
  files.write(dir .. "/libcurl.so", "not a library either\n")
  files.write(dir .. "/t.lua", [[
    local _, msg = baton.http{url = "https://127.0.0.1:1/", timeout = 5}
    print(msg)
    local r = baton.http{url = arg[1] .. "/version"}
    print(r and r.status)
    local e = baton.etcd.new{endpoints = "https://127.0.0.1:1", timeout = 5}
    local _, emsg = e:get("/x")
    print(emsg)
  ]])
  local res = baton.exec{bin, "eval", dir .. "/t.lua", ep, timeout = 30,
                         env = {LD_LIBRARY_PATH = dir}}
  T.is(res and res.code, 0, "the process runs to its end: " .. tostring(res and res.stderr))
  local out = res and res.stdout or ""
  local l1, l2, l3 = out:match("([^\n]*)\n([^\n]*)\n([^\n]*)")
  T.like(l1, "^ENOTSUP: https://127%.0%.0%.1:1/: not supported %(https needs libcurl: .*libcurl%.so%.4",
    "baton.http https: says libcurl could not be loaded, and why")
  T.is(l2, "200", "plain http still works")
  T.like(l3, "^ENOTSUP: etcd https://127%.0%.0%.1:1: not supported %(https needs libcurl",
    "an https etcd endpoint: the same reason")
  baton.exec{"rm", "-rf", dir}
end

T.done()
