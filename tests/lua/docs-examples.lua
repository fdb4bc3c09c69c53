-- Every ```lua block in docs/*.md and README.md whose first line is
-- "-- example: ..." is a whole script: run it with baton eval and require
-- exit 0, so the documentation's examples keep working when pasted.
local T = require "tap"
local root = os.getenv("BATON_ROOT") or "."
local bin = os.getenv("BATON_BIN") or "bin/baton"

local files = { root .. "/README.md" }
local ls = assert(baton.exec { "sh", "-c", "ls " .. root .. "/docs/*.md" })
for f in ls.stdout:gmatch("[^\n]+") do files[#files + 1] = f end

local n = 0
for _, path in ipairs(files) do
  local fh = io.open(path)
  if fh then
    local text = fh:read("*a")
    fh:close()
    for block in text:gmatch("```lua\n(.-)```") do
      local title = block:match("^%-%- example: ([^\n]*)")
      if title then
        n = n + 1
        local f = os.tmpname()
        local out = io.open(f, "w")
        out:write(block)
        out:close()
        local r = assert(baton.exec { bin, "eval", f, timeout = 60 })
        os.remove(f)
        local name = path:match("[^/]*$") .. ": " .. title
        if not T.is(r.code, 0, name) then T.diag(r.stderr) end
      end
    end
  end
end
T.ok(n >= 5, "found the examples (" .. n .. ")")

-- docs/api.md: every ```sh block whose first line is "# NNN Reason" is run
-- with sh, in the document's order, in a directory holding the token file,
-- against a live node started as the page's first lines say (on a free
-- port instead of 8080, on a private prefix). Each must exit 0 with its
-- last curl answering NNN (curl writes the status to stderr), and when a
-- ```json block follows, every key it shows must be in the body (of an
-- array: in its first element).
do
  local N = require "nodes"
  local F = require "files"
  local text = F.read(root .. "/docs/api.md") or ""
  local blocks = {}
  local pos = 1
  while true do
    local s, e, lang, body = text:find("```(%w*)\n(.-)```\n?", pos)
    if not s then break end
    blocks[#blocks + 1] = { lang = lang, body = body, s = s, e = e }
    pos = e + 1
  end
  local examples = {}
  for i, b in ipairs(blocks) do
    local want = b.lang == "sh" and b.body:match("^# (%d%d%d) ")
    if want then
      local nxt = blocks[i + 1]
      local doc = nxt and nxt.lang == "json" and text:sub(b.e + 1, nxt.s - 1):match("^%s*$") and nxt.body
      -- (named by the method and path of its last request)
      local last
      for cmd in b.body:gsub("\\\n%s*", " "):gmatch("curl [^\n]*") do last = cmd end
      local title = last and ((last:match("%-X (%u+)") or "GET") .. " " .. (last:match("8080([^%s\"]*)") or "?"))
      examples[#examples + 1] = { status = tonumber(want), script = b.body, doc = doc, title = title or "?" }
    end
  end
  T.ok(#examples >= 20, "docs/api.md: found its curl examples (" .. #examples .. ")")
  T.like(text, "\nbin/baton node %-%-name n1 %-%-http 127%.0%.0%.1:8080 %-%-http%-token%-file token\n",
    "docs/api.md: starts the node it talks to")

  local c = N.new("docsapi")
  F.write(c.dir .. "/token", "docs-" .. tostring(math.floor(baton.now() * 1000)) .. "\n")
  local probe = assert(baton.httpd.listen { addr = "127.0.0.1:0", handler = function(r) r:respond(200, {}, "") end })
  local port = probe.port
  probe:close()
  c:start("n1", 3, ("--http 127.0.0.1:%d --http-token-file %s"):format(port, c.dir .. "/token"))
  local ready = N.wait(20, function()
    local r = baton.exec { "curl", "-s", "http://127.0.0.1:" .. port .. "/readyz", timeout = 10 }
    return r and r.stdout:find('"ready"')
  end)
  if not T.ok(ready, "docs/api.md: the node is ready") then T.diag(c:log("n1")) end
  local json = baton.json
  -- every key of the documented value is in the actual one
  local function keys_in(doc, got)
    if type(doc) ~= "table" or doc == json.null then return true end
    if doc[1] ~= nil then
      return type(got) == "table" and got[1] ~= nil and keys_in(doc[1], got[1])
    end
    if type(got) ~= "table" then return false end
    for k in pairs(doc) do
      if k ~= "..." and got[k] == nil then return false, k end
    end
    return true
  end
  for i, ex in ipairs(examples) do
    local script = "curl() { command curl -w '%{stderr}@@status %{http_code}\\n' \"$@\"; }\n"
      .. ex.script:gsub("127%.0%.0%.1:8080", "127.0.0.1:" .. port)
    local r = assert(baton.exec { "sh", "-c", script, cwd = c.dir, timeout = 60 })
    local got
    for code in r.stderr:gmatch("@@status (%d+)") do got = tonumber(code) end
    local name = ("docs/api.md example %d (%s): %d"):format(i, ex.title, ex.status)
    if not T.ok(r.code == 0 and got == ex.status, name) then
      T.diag(("exit %s, status %s\n%s\n%s"):format(r.code, tostring(got), r.stdout, r.stderr))
    end
    if ex.doc then
      local ok, dv = pcall(json.decode, ex.doc)
      local gok, gv = pcall(json.decode, r.stdout)
      local fine, missing = false, nil
      if ok and dv ~= nil and gok and gv ~= nil then fine, missing = keys_in(dv, gv) end
      if not T.ok(fine, name .. ": the body has the fields shown") then
        T.diag(("documented JSON %s; missing %s; got: %s"):format(ok and dv ~= nil and "parses" or "DOES NOT PARSE",
          tostring(missing), r.stdout))
      end
    end
  end
  c:destroy()
end
T.done()
