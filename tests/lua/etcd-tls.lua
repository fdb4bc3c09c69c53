-- TLS: an etcd serving https and requiring client certificates. With the
-- CA and a client certificate every call works; without the client
-- certificate, or without the CA, the failure says what went wrong.
local T = require "tap"
local dir = os.tmpname()
os.remove(dir)
assert(baton.exec { "mkdir", "-p", dir })

local function sh(cmd)
  local r = assert(baton.exec { "sh", "-c", cmd, cwd = dir, timeout = 60 })
  if r.code ~= 0 then error(cmd .. ": " .. r.stderr) end
end
-- A CA, a server certificate for 127.0.0.1 and a client certificate.
sh([[openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 -subj /CN=baton-test-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 30 -extfile server.ext 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=baton 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' > client.ext
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 30 -extfile client.ext 2>/dev/null]])

-- etcd's JSON gateway as tests/harness/etcd has it (BATON_ETCD_GATEWAY).
local gateway_flag = (os.getenv("BATON_ETCD_GATEWAY") or "0") == "0"
  and " --enable-grpc-gateway=false" or ""

-- etcd on random free-looking ports; retried if a port was taken.
math.randomseed(math.floor(baton.now() * 1000) % 2147483647)
local etcd, url
for _ = 1, 5 do
  local port = 40000 + math.random(0, 9999) * 2
  url = "https://127.0.0.1:" .. port
  local peer = "http://127.0.0.1:" .. (port + 1)
  etcd = assert(baton.spawn { "sh", "-c", "exec etcd --name tls --data-dir data"
    .. " --listen-client-urls " .. url .. " --advertise-client-urls " .. url
    .. " --listen-peer-urls " .. peer .. " --initial-advertise-peer-urls " .. peer
    .. " --initial-cluster tls=" .. peer .. " --cert-file server.pem --key-file server.key"
    .. " --trusted-ca-file ca.pem --client-cert-auth" .. gateway_flag
    .. " >etcd.log 2>&1", cwd = dir, stdio = "null" })
  local probe = baton.etcd.new { endpoints = url, cacert = dir .. "/ca.pem", timeout = 30,
                                 connect_timeout = 20, cert = dir .. "/client.pem",
                                 key = dir .. "/client.key" }
  local up = false
  for _ = 1, 100 do
    if probe:get("/probe") then up = true; break end
    if etcd:done() then break end
    baton.sleep(0.1)
  end
  probe:close()
  if up then break end
  etcd:kill("SIGKILL")
  etcd:wait(5)
  etcd = nil
end
if not T.ok(etcd, "etcd serves https at " .. url) then
  assert(baton.exec { "rm", "-rf", dir })
  return T.done()
end

-- Generous timeouts: under valgrind a TLS handshake that loads the system's
-- CA bundle takes seconds.
local T_OPTS = { timeout = 30, connect_timeout = 20 }
local function client(o)
  for k, v in pairs(T_OPTS) do o[k] = v end
  return baton.etcd.new(o)
end
local good = client { endpoints = url, cacert = dir .. "/ca.pem",
                      cert = dir .. "/client.pem", key = dir .. "/client.key" }
T.ok(good:put("/tls/a", "1"), "put over TLS with a client certificate")
T.is(assert(good:get("/tls/a")).kvs[1].value, "1", "get over TLS")
local w = assert(good:watch("/tls/", { prefix = true }))
assert(good:put("/tls/b", "2"))
T.is(assert(w:next(10))[1].kv.key, "/tls/b", "watch over TLS")
w:cancel()
local lease = assert(good:grant(10))
T.ok(lease:keepalive(), "lease keepalive over TLS")
lease:revoke()

local nocert = client { endpoints = url, cacert = dir .. "/ca.pem" }
local r, err, code = nocert:get("/tls/a")
T.is(r, nil, "without a client certificate the call fails")
-- (TLS 1.3 servers reject a missing certificate after the handshake, so
-- the client sees either the alert or a reset, depending on timing.)
T.ok(code == "ECONNRESET" or code == "ETLS" or code == "EIO",
     "with a TLS or reset error (" .. tostring(code) .. ")")
T.like(err, "^" .. tostring(code) .. ": etcd https://127%.0%.0%.1:%d+: ", "naming the endpoint: " .. tostring(err))

local noca = client { endpoints = url, cert = dir .. "/client.pem", key = dir .. "/client.key" }
r, err, code = noca:get("/tls/a")
T.is(code, "ETLS", "a server certificate from an unknown CA: ETLS")
T.like(err, "^ETLS: etcd https://127%.0%.0%.1:%d+: tls error %(SSL certificate problem", "saying why")

local bin = os.getenv("BATON_BIN") or "bin/baton"
local f = dir .. "/t.lua"
local fh = io.open(f, "w")
fh:write('print(assert(baton.etcd:get("/tls/a")).kvs[1].value)\n')
fh:close()
local viaflags = assert(baton.exec { bin, "--endpoints", url, "--cacert", dir .. "/ca.pem",
  "--cert", dir .. "/client.pem", "--key", dir .. "/client.key", "eval", f, timeout = 20 })
T.is(viaflags.stdout, "1\n", "--cacert/--cert/--key work")
local viaenv = assert(baton.exec { bin, "eval", f, timeout = 20, env = {
  BATON_ENDPOINTS = url, BATON_CACERT = dir .. "/ca.pem", BATON_CERT = dir .. "/client.pem",
  BATON_KEY = dir .. "/client.key" } })
T.is(viaenv.stdout, "1\n", "BATON_CACERT/BATON_CERT/BATON_KEY work")

good:close()
etcd:kill("SIGTERM")
etcd:wait(10)
assert(baton.exec { "rm", "-rf", dir })
T.done()
