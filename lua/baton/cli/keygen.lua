-- baton keygen FILE: a new Ed25519 key pair for signed jobs and policies
-- (lua/baton/sign.lua, docs/security.md): the secret key at FILE (mode
-- 0600, for `job put --sign FILE`), the public key at FILE.pub (for `node
-- --trust FILE.pub`). Never replaces a file.
local baton = require "baton"
local A = require "baton.cli.args"

local USAGE = "baton keygen FILE"
local HELP = [[Makes an Ed25519 key pair: the secret key at FILE (mode 0600; sign with
baton job put --sign FILE, baton policy put --sign FILE) and the public key
at FILE.pub (nodes trust it with baton node --trust FILE.pub, or --trust DIR
of *.pub files). Refuses to overwrite either file. Prints the key id that
signatures and node errors name.]]

return function(...)
  local _, pos = A.parse("keygen", USAGE, {}, { ... }, HELP)
  if not pos[1] then return A.usage("keygen", USAGE, "needs a FILE") end
  if pos[2] then return A.usage("keygen", USAGE, "unexpected argument \"" .. pos[2] .. "\"") end
  local id, err = require("baton.sign").keygen(pos[1])
  if not id then return A.die("keygen: " .. err) end
  io.stdout:write(("key %s: secret key %s, public key %s.pub\n"):format(id, pos[1], pos[1]))
  baton.exit(0)
end
