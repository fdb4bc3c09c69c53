-- baton.spawn{..., uid =, gid =} (what `baton node --run-as USER` starts its
-- workers with): misuse raises a clear error before anything starts; as
-- root, the child runs as that user and group with no supplementary group.
local T = require "tap"
local F = require "files"

for _, bad in ipairs {
  { { "true", uid = "x" }, "baton.spawn: uid must be a number %(got string%)" },
  { { "true", gid = -1 }, "baton.spawn: gid must be a whole number from 0 to 4294967294" },
  { { "true", uid = 1.5 }, "baton.spawn: uid must be a whole number from 0 to 4294967294" },
  { { "true", uid = 2 ^ 32 }, "baton.spawn: uid must be a whole number from 0 to 4294967294" },
  { { "true", user = "nobody" }, "unknown option .user. %(expected env, cwd, stdio, channel, stop_signal, output, argv0, clear_env, uid or gid%)" },
} do
  T.error_like(function() baton.spawn(bad[1]) end, bad[2], "misuse: " .. bad[2]:gsub("%%", ""))
end

local me = assert(baton.exec { "id", "-u" }).stdout
if not me:match("^0\n") then
  T.skip("spawn as another user: the test does not run as root", 3)
  return T.done()
end
local dir = os.tmpname()
os.remove(dir)
assert(baton.exec { "mkdir", "-m", "777", dir })
local p = assert(baton.spawn { "sh", "-c", "id -u > " .. dir .. "/u; id -g >> " .. dir .. "/u; id -G >> " .. dir .. "/u",
                               uid = 65534, gid = 65534 })
local r = p:wait(20)
T.is(r and r.code, 0, "spawn with uid and gid: the child ran")
T.is(F.read(dir .. "/u"), "65534\n65534\n65534\n", "as uid 65534, gid 65534, no other group")
-- (without them: as the parent)
p = assert(baton.spawn { "sh", "-c", "id -u > " .. dir .. "/v" })
p:wait(20)
T.is(F.read(dir .. "/v"), "0\n", "without: as the parent")
baton.exec { "rm", "-rf", dir }
T.done()
