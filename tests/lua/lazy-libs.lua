-- What a baton process maps at start and what it loads on first use: the
-- libraries that only some processes need are loaded with dlopen when
-- first used, so that `baton lock`, `baton job ls` and `baton eval` of most
-- scripts do not pay for them (~1 ms of start-up each: libmicrohttpd for
-- a server, OpenSSL for an https etcd; libcurl's are tested in
-- http-libcurl.lua). And when one cannot be loaded, the call
-- that needs it says so, with the reason, instead of the process failing
-- to start.
local T = require "tap"
local files = require "lib.files"

local mapped = files.mapped

if mapped("libc.so") == nil then
  return T.skip_all("no /proc/self/maps here")
end
T.is(mapped("libmicrohttpd"), false, "a fresh process has not mapped libmicrohttpd")
T.is(mapped("libgnutls"), false, "nor GnuTLS, which it pulls in")
T.is(mapped("libcrypto"), false, "nor OpenSSL's libcrypto (SHA-256 is libsodium's)")
T.is(mapped("libssl"), false, "nor OpenSSL's libssl (only https endpoints need it)")
T.is(baton._sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  "SHA-256 of \"abc\" (FIPS 180-2's example)")

-- the server loads libmicrohttpd on its first listen, and serves
local srv, err = baton.httpd.listen{addr = "127.0.0.1:0", handler = function(req)
  req:respond(200, nil, "hi")
end}
T.ok(srv, "listen: " .. tostring(err))
T.is(mapped("libmicrohttpd"), true, "listen loaded libmicrohttpd")
if srv then
  local r = baton.http{url = "http://127.0.0.1:" .. srv.port .. "/", timeout = 5}
  T.is(r and r.body, "hi", "and the server answers")
  srv:close()
end

-- the first https connection to etcd loads OpenSSL, even one refused
local function https_get()
  local c = baton.etcd.new{endpoints = "https://127.0.0.1:1", timeout = 5, connect_timeout = 2}
  local r, err, code = c:get("/lazy-libs")
  c:close()
  return r, err, code
end
local _, _, code = https_get()
T.is(code, "ECONNREFUSED", "an https endpoint that refuses: " .. tostring(code))
T.is(mapped("libssl"), true, "the https connection loaded libssl")
T.is(mapped("libcrypto"), true, "and libcrypto")

-- A libmicrohttpd that cannot be loaded, under both names baton tries.
local l1, l2, res = files.eval_without({"libmicrohttpd.so.12", "libmicrohttpd.so"}, [[
  print(baton.httpd.listen{addr = "127.0.0.1:0", handler = function() end})
  print(baton.httpd.listen{addr = "127.0.0.1:0", handler = function() end})
]])
if not res then
  T.skip("BATON_BIN is not set", 3)
else
  T.is(res.code, 0, "the process runs to its end: " .. tostring(res.stderr))
  T.like(l1, "^nil\tENOTSUP: 127%.0%.0%.1:0: libmicrohttpd could not be loaded: .*libmicrohttpd%.so%.12.*\tENOTSUP$",
    "listen says libmicrohttpd could not be loaded, and why")
  T.is(l2, l1, "and says it again on the next try")
end

-- Nor OpenSSL: an https connection says so, with the reason, every time.
l1, l2, res = files.eval_without({"libssl.so.3", "libcrypto.so.3"}, [[
  for _ = 1, 2 do
    local c = baton.etcd.new{endpoints = "https://127.0.0.1:1", timeout = 5, connect_timeout = 2}
    print(c:get("/lazy-libs"))
    c:close()
  end
]])
if not res then
  T.skip("BATON_BIN is not set", 3)
else
  T.is(res.code, 0, "the process runs to its end: " .. tostring(res.stderr))
  T.like(l1, "^nil\tENOTSUP: .*https://127%.0%.0%.1:1: OpenSSL could not be loaded: .*lib[a-z]+%.so%.3.*\tENOTSUP$",
    "an https call says OpenSSL could not be loaded, and why")
  T.is(l2, l1, "and says it again on the next try")
end

T.done()
