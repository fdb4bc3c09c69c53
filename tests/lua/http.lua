-- baton.http against the etcd the harness starts (BATON_ENDPOINTS: its
-- /version, which etcd serves without its JSON gateway) and an echo server
-- of this process (baton.httpd): success, response headers, methods and
-- bodies, non-2xx statuses, transport failures (refused, timeout against a
-- listener that never answers), large bodies, concurrency, user coroutines,
-- misuse, and a killed coroutine.
local T = require "tap"

local ep = (os.getenv("BATON_ENDPOINTS") or ""):match("^[^,]+")
if not ep then return T.skip_all("BATON_ENDPOINTS is not set") end
ep = ep:gsub("/+$", "")

-- A TCP listener on 127.0.0.1 that never accepts: the kernel completes the
-- handshake, then nothing answers. Made with the FFI; nil when that is not
-- possible here.
local function silent_listener()
  local okf, ffi = pcall(require, "ffi")
  if not okf or ffi.os ~= "Linux" or not ffi.abi("le") then return nil end
  pcall(ffi.cdef, [[
    struct baton_test_sin { uint16_t family; uint16_t port; uint32_t addr;
                            uint8_t zero[8]; };
    int socket(int domain, int type, int protocol);
    int bind(int fd, const void *addr, uint32_t len);
    int listen(int fd, int backlog);
    int getsockname(int fd, void *addr, uint32_t *len);
    int close(int fd);
  ]])
  local C = ffi.C
  local fd = C.socket(2, 1, 0)                       -- AF_INET, SOCK_STREAM
  if fd < 0 then return nil end
  local sin = ffi.new("struct baton_test_sin")
  sin.family = 2
  sin.addr = 0x0100007f                              -- 127.0.0.1, network order
  local len = ffi.new("uint32_t[1]", ffi.sizeof(sin))
  if C.bind(fd, sin, ffi.sizeof(sin)) ~= 0 or C.listen(fd, 16) ~= 0 or
     C.getsockname(fd, sin, len) ~= 0 then
    C.close(fd)
    return nil
  end
  local p = sin.port                                 -- network byte order
  local port = bit.bor(bit.rshift(p, 8), bit.lshift(bit.band(p, 0xff), 8))
  return port, function() C.close(fd) end
end

local function baton_bin()
  local b = os.getenv("BATON_BIN")
  if b and b ~= "" then return b end
  local r = baton.exec{"sh", "-c", "readlink /proc/$PPID/exe"}
  if r and r.code == 0 then return (r.stdout:gsub("%s+$", "")) end
end

-- The echo server: answers "METHOD PATH BODY-LENGTH", with the request's
-- content-type echoed as x-got-type; /echo answers the body itself;
-- /post-only answers 405 to anything but POST.
local echo = assert(baton.httpd.listen{addr = "127.0.0.1:0", max_body = 4 * 1024 * 1024,
  handler = function(req)
    if req.path == "/echo" then
      req:respond(200, {["content-type"] = "application/octet-stream"}, req.body)
    elseif req.path == "/post-only" and req.method ~= "POST" then
      req:respond(405, {["content-type"] = "text/plain"}, "method not allowed\n")
    else
      req:respond(200, {["x-got-type"] = req.headers["content-type"] or ""},
                  req.method .. " " .. req.path .. " " .. #req.body)
    end
  end})
local srv = "http://127.0.0.1:" .. echo.port

-- success, headers, status
do
  local r, err = baton.http{url = ep .. "/version"}
  T.ok(r, "GET /version: " .. tostring(err))
  r = r or {headers = {}}
  T.is(r.status, 200, "status 200")
  T.like(r.body, '"etcdserver"', "body")
  T.like(r.headers["content-type"], "^application/json",
    "headers are lower-cased")
  T.is(r.headers["content-length"], tostring(#r.body),
    "content-length matches the body")
  T.is(baton.json.decode(r.body).etcdserver ~= nil, true, "body is etcd's JSON")

  r, err = baton.http{method = "POST", url = srv .. "/post-only",
                      headers = {["Content-Type"] = "application/json"},
                      body = '{"key":"Zm9v"}'}
  T.is(r and r.status, 200, "POST: " .. tostring(err))
  T.is(r and r.body, "POST /post-only 14", "the server got the body")
  T.is(r and r.headers["x-got-type"], "application/json", "and the header")

  r = baton.http{url = srv .. "/post-only", body = '{"key":"Zm9v"}'}
  T.is(r and r.body, "POST /post-only 14", "method defaults to POST with a body")

  r = baton.http{method = "post", url = srv .. "/post-only",
                 body = '{"key":"Zm9v"}',
                 timeout = 5}
  T.is(r and r.body, "POST /post-only 14", "method is case-insensitive")

  r = baton.http{method = "PUT", url = srv .. "/put", body = "abc"}
  T.is(r and r.body, "PUT /put 3", "PUT with a body")
  r = baton.http{method = "DELETE", url = srv .. "/del"}
  T.is(r and r.body, "DELETE /del 0", "DELETE without one")

  r, err = baton.http{method = "GET", url = srv .. "/post-only"}
  T.ok(r, "a non-2xx status is not an error")
  T.is(r and r.status, 405, "GET /post-only: 405")
  T.is(r and r.body, "method not allowed\n", "the error body is returned")

  r = baton.http{url = ep .. "/no/such/path"}
  T.is(r and r.status, 404, "404")

  -- etcd answers HEAD with 405; what matters is that no body is awaited
  r = baton.http{method = "HEAD", url = ep .. "/version", timeout = 5}
  T.is(r and type(r.status), "number", "HEAD returns a status")
  T.is(r and r.body, "", "HEAD has an empty body")
end

-- a large body both ways: 3 MiB sent, echoed back
do
  local val = string.rep("0123456789abcdef", 3 * 65536)
  local r, err = baton.http{url = srv .. "/echo", body = val}
  T.is(r and r.status, 200, "3 MiB request body: " .. tostring(err))
  T.ok(r and r.body == val, "3 MiB response body, the same bytes")
end

-- transport failures
do
  local r, msg, code = baton.http{url = "http://127.0.0.1:1/"}
  T.is(r, nil, "refused: nil")
  T.is(msg, "ECONNREFUSED: http://127.0.0.1:1/: connection refused",
    "refused: message")
  T.is(code, "ECONNREFUSED", "refused: code")
  r, msg = baton.http{url = "http://user:secret@127.0.0.1:1/x?a=b"}
  T.is(msg, "ECONNREFUSED: http://127.0.0.1:1/x?a=b: connection refused",
       "credentials are left out of messages")
  r, msg, code = baton.http{url = "http://127.0.0.1:99999/"}
  T.is(code, "EINVAL", "a port out of range: EINVAL")
  T.is(msg, "EINVAL: http://127.0.0.1:99999/: invalid argument", "naming the URL")

  local port, close = silent_listener()
  if not port then
    T.skip("no FFI listener on this platform", 5)
  else
    local url = "http://127.0.0.1:" .. port .. "/"
    local t0 = baton.now()
    r, msg, code = baton.http{url = url, timeout = 0.5}
    local el = baton.now() - t0
    T.is(code, "ETIMEDOUT", "silent server: ETIMEDOUT")
    T.is(msg, "ETIMEDOUT: " .. url .. ": timed out after 0.5 s",
      "timeout message")
    T.ok(el >= 0.4 and el < 2, string.format("after ~0.5 s (%.2f s)", el))

    -- two requests in two coroutines wait in parallel
    local done = 0
    t0 = baton.now()
    for _ = 1, 2 do
      baton.go(function()
        local _, _, c = baton.http{url = url, timeout = 1}
        if c == "ETIMEDOUT" then done = done + 1 end
      end)
    end
    while done < 2 and baton.now() - t0 < 10 do baton.sleep(0.05) end
    el = baton.now() - t0
    T.is(done, 2, "both concurrent requests timed out")
    T.ok(el < 1.8, string.format("in parallel (%.2f s for 2 x 1 s)", el))
    close()
  end
end

-- concurrency with real responses
do
  local n, ok, done = 10, 0, 0
  for _ = 1, n do
    baton.go(function()
      local r = baton.http{url = ep .. "/version"}
      if r and r.status == 200 then ok = ok + 1 end
      done = done + 1
    end)
  end
  local t0 = baton.now()
  while done < n and baton.now() - t0 < 10 do baton.sleep(0.02) end
  T.is(ok, n, n .. " concurrent requests")
end

-- a user's own coroutine around baton.http
do
  local f = coroutine.wrap(function()
    local r = baton.http{url = ep .. "/version"}
    coroutine.yield(r and r.status)
    return "done"
  end)
  T.is(f(), 200, "baton.http inside coroutine.wrap")
  T.is(f(), "done", "the user coroutine continues")
end

-- misuse raises
do
  T.error_like(function() baton.http(ep) end, "^baton%.http: expects a table",
    "not a table")
  T.error_like(function() baton.http{} end,
    "^baton%.http: url must be a string", "no url")
  T.error_like(function() baton.http{url = "ftp://x/"} end,
    "^baton%.http: url must start with http:// or https://", "other scheme")
  T.error_like(function() baton.http{url = ep, method = "GE T"} end,
    "^baton%.http: invalid method", "bad method")
  T.error_like(function() baton.http{url = ep, headers = {A = {}}} end,
    "^baton%.http: header A must be a string", "header value table")
  T.error_like(function() baton.http{url = ep, headers = {["A B"] = "x"}} end,
    "^baton%.http: invalid header name 'A B'", "header name with a space")
  T.error_like(function() baton.http{url = ep, headers = {A = "x\r\nB: y"}} end,
    "^baton%.http: header A contains a line break", "header injection")
  T.error_like(function() baton.http{url = ep, headers = "A: b"} end,
    "^baton%.http: headers must be a table", "headers string")
  T.error_like(function() baton.http{url = ep, timeout = 0} end,
    "^baton%.http: timeout must be > 0", "timeout 0")
  T.error_like(function() baton.http{url = ep, body = {}} end,
    "^baton%.http: body must be a string", "body table")
  T.error_like(function() baton.http{url = ep, tiemout = 1} end,
    "^baton%.http: unknown option 'tiemout'", "unknown option")
  T.error_like(function()
    table.sort({3, 1, 2}, function(a, b) baton.http{url = ep}; return a < b end)
  end, "^baton%.http: cannot wait here", "waiting inside a C call raises")
end

-- A killed coroutine cancels its request without resuming: a script whose
-- main chunk fails while a baton.go waits on a silent server exits at once.
do
  local bin = baton_bin()
  local port, close = silent_listener()
  if not bin or not port then
    T.skip("no baton binary or FFI listener", 3)
  else
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write(string.format([[
baton.go(function() baton.http{url = "http://127.0.0.1:%d/", timeout = 30} end)
baton.sleep(0.3)
error("boom")
]], port))
    f:close()
    local t0 = baton.now()
    local r = baton.exec{bin, "eval", script, timeout = 20}
    local el = baton.now() - t0
    T.ok(r and r.code == 1, "the script fails with status 1")
    T.ok(el < 5, string.format("and exits promptly (%.2f s)", el))
    T.unlike(r and r.stderr or "", "Sanitizer",
      "no sanitizer report in the child")
    os.remove(script)
    close()
  end
end

echo:close()
T.done()
