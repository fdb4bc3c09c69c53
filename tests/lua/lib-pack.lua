-- The Lua library's pack (runtime/core/lib.h): a process maps DIR.pack
-- instead of reading DIR's files when the pack is this version's snapshot
-- of DIR as DIR is now, and reads DIR when it is not (a file edited, added
-- or removed since, another version's pack, a broken one): both ways give
-- the same library, the pack only faster.
local T = require "tap"
local files = require "lib.files"

local bin = os.getenv("BATON_BIN")
local root = os.getenv("BATON_ROOT")
if not bin or bin == "" or not root then
  return T.skip_all("BATON_BIN and BATON_ROOT are not set")
end

local mapped = files.mapped
-- This process: the tree's library, packed by make.
T.ok(mapped(root .. "/lua.pack"), "a baton of the tree maps " .. root .. "/lua.pack")

local dir = os.tmpname()
os.remove(dir)
local lua = dir .. "/lua"
assert(baton.exec{"mkdir", "-p", dir})
assert(baton.exec{"cp", "-r", root .. "/lua", lua})
files.write(lua .. "/baton/probe.lua", 'return "one"\n')
files.write(dir .. "/t.lua", [[
  local maps = io.open("/proc/self/maps"):read("*a")
  local ok, extra = pcall(require, "baton.extra")
  print(require("baton.probe"), maps:find(arg[1], 1, true) ~= nil, ok and extra or "-")
]])

local function pack()
  local r = assert(baton.exec{bin, "_pack-lib", lua, lua, lua .. ".pack", timeout = 30})
  return r.code == 0, r.stderr
end
-- What a process of BATON_LUADIR=dir/lua loads: probe, the pack mapped?, extra
local function run()
  local r = assert(baton.exec{bin, "eval", dir .. "/t.lua", lua .. ".pack", timeout = 30,
                              env = {BATON_LUADIR = lua}})
  if r.code ~= 0 then return "exit " .. r.code .. ": " .. r.stderr end
  return (r.stdout:gsub("\n$", ""))
end

T.is(run(), "one\tfalse\t-", "without a pack the directory is read")
T.ok(pack(), "_pack-lib writes the pack")
T.is(run(), "one\ttrue\t-", "a current pack is mapped, and gives the same library")

-- Same size, new content: the modification time tells.
baton.sleep(0.01)
files.write(lua .. "/baton/probe.lua", 'return "two"\n')
T.is(run(), "two\tfalse\t-", "a file edited since: the pack is stale, the file is read")
T.ok(pack(), "packed again")
T.is(run(), "two\ttrue\t-", "and mapped again")

files.write(lua .. "/baton/extra.lua", 'return "x"\n')
T.is(run(), "two\tfalse\tx", "a file added since: stale, and the new module is there")
T.ok(pack(), "packed again")
T.is(run(), "two\ttrue\tx", "the pack has it")
os.remove(lua .. "/baton/extra.lua")
T.is(run(), "two\tfalse\t-", "a file removed since: stale, and the module is gone")

-- Another version's pack (the version is in its snapshot), and a broken one.
T.ok(pack(), "packed again")
local p = files.read(lua .. ".pack")
local other = p:gsub("\nbaton%-lib 1\n[^\n]*\n", function(s) return (s:gsub("%d", "9")) end, 1)
T.isnt(other, p, "(the pack's version changed)")
files.write(lua .. ".pack", other)
T.is(run(), "two\tfalse\t-", "another version's pack is not used")
files.write(lua .. ".pack", p:sub(1, math.floor(#p / 2)))
T.is(run(), "two\tfalse\t-", "nor a truncated one")
files.write(lua .. ".pack", "baton-pack 1\nnonsense\n")
T.is(run(), "two\tfalse\t-", "nor one that is not a pack")

-- Whose pack: one that other users may write is not used (anyone who can
-- create files beside the library must not plant code in it), and the
-- pack is readable by all whatever the umask it was made under.
T.ok(pack(), "packed again")
T.is(run(), "two\ttrue\t-", "(and mapped)")
assert(baton.exec{"chmod", "666", lua .. ".pack"})
T.is(run(), "two\tfalse\t-", "a pack that others may write is not used")
local um = assert(baton.exec{"sh", "-c", 'umask 077 && exec "$0" _pack-lib "$1" "$1" "$1.pack"', bin, lua})
T.is(um.code, 0, "packed under umask 077 " .. um.stderr)
T.is(assert(baton.exec{"stat", "-c", "%a", lua .. ".pack"}).stdout, "644\n",
     "the pack is readable by all whatever the umask")
T.is(run(), "two\ttrue\t-", "and mapped")
-- A pack made for another directory (the directory is in its snapshot).
assert(baton.exec{bin, "_pack-lib", lua, dir .. "/elsewhere", lua .. ".pack"})
T.is(run(), "two\tfalse\t-", "a pack made for another directory is not used")

local r = assert(baton.exec{bin, "_pack-lib", dir .. "/nowhere", lua, dir .. "/x.pack"})
T.is(r.code, 1, "_pack-lib of a missing directory fails")
T.like(r.stderr, "^baton: cannot read baton's Lua library: .*nowhere: No such file or directory\n$",
       "saying why: " .. r.stderr)
T.is(files.read(dir .. "/x.pack"), nil, "and writes nothing")
r = assert(baton.exec{bin, "_pack-lib", lua})
T.is(r.code, 2, "_pack-lib without its arguments: usage")

baton.exec{"rm", "-rf", dir}
T.done()
