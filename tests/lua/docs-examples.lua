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
T.done()
