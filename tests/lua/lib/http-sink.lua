-- An HTTP sink for tests (a webhook receiver): `baton eval http-sink.lua
-- OUT [PORT]` listens on 127.0.0.1 (PORT, or a free port; printed on
-- stdout as "port N"), and for every request appends one JSON line to OUT:
-- {method, path, headers (lower-case names), body}; it answers 200 "ok".
-- A sink started again on the port of one that was killed gets it
-- (SO_REUSEADDR).
-- A helper process of its own: it blocks in accept() and read(), which is
-- fine here and nowhere else. Stop it with SIGKILL.
local ffi = require "ffi"
local out = assert(arg[1], "usage: http-sink.lua OUT [PORT]")
local want_port = tonumber(arg[2] or 0)

ffi.cdef [[
  struct sink_sin { uint16_t family; uint16_t port; uint32_t addr; uint8_t zero[8]; };
  int socket(int domain, int type, int protocol);
  int setsockopt(int fd, int level, int name, const void *val, uint32_t len);
  int bind(int fd, const void *addr, uint32_t len);
  int listen(int fd, int backlog);
  int getsockname(int fd, void *addr, uint32_t *len);
  int accept(int fd, void *addr, void *len);
  long read(int fd, void *buf, size_t n);
  long write(int fd, const void *buf, size_t n);
  int close(int fd);
]]
local C = ffi.C

local fd = C.socket(2, 1, 0) -- AF_INET, SOCK_STREAM
assert(fd >= 0, "socket")
local sin = ffi.new("struct sink_sin")
sin.family = 2
sin.addr = 0x0100007f -- 127.0.0.1, network order
sin.port = bit.bor(bit.rshift(want_port, 8), bit.lshift(bit.band(want_port, 0xff), 8))
assert(C.setsockopt(fd, 1, 2, ffi.new("int[1]", 1), 4) == 0, "SO_REUSEADDR") -- SOL_SOCKET, SO_REUSEADDR
local len = ffi.new("uint32_t[1]", ffi.sizeof(sin))
assert(C.bind(fd, sin, ffi.sizeof(sin)) == 0 and C.listen(fd, 16) == 0
       and C.getsockname(fd, sin, len) == 0, "bind/listen")
local p = sin.port
io.stdout:write(("port %d\n"):format(bit.bor(bit.rshift(p, 8), bit.lshift(bit.band(p, 0xff), 8))))
io.stdout:flush()

local buf = ffi.new("char[65536]")

-- One request from connection c: head and Content-Length body.
local function request(c)
  local data = ""
  while true do
    local head_end = data:find("\r\n\r\n", 1, true)
    if head_end then
      local head = data:sub(1, head_end - 1)
      local want = tonumber(head:lower():match("\ncontent%-length:%s*(%d+)")) or 0
      if #data - (head_end + 3) >= want then
        local method, path = head:match("^(%S+) (%S+)")
        local headers = {}
        for name, value in head:gmatch("\r\n([^:\r\n]+):%s*([^\r\n]*)") do headers[name:lower()] = value end
        return { method = method, path = path, headers = headers,
                 body = data:sub(head_end + 4, head_end + 3 + want) }
      end
    end
    local n = tonumber(C.read(c, buf, 65536))
    if n <= 0 then return nil end
    data = data .. ffi.string(buf, n)
  end
end

while true do
  local c = C.accept(fd, nil, nil)
  if c >= 0 then
    local req = request(c)
    if req then
      local f = assert(io.open(out, "a"))
      f:write(baton.json.encode(req), "\n")
      f:close()
      local answer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
      C.write(c, answer, #answer)
    end
    C.close(c)
  end
end
