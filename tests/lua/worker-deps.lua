-- The worker stands below the conductor and the CLI (docs/architecture.md,
-- "Where things are"): what `baton worker` loads (lua/baton/worker/main.lua
-- and everything it requires) holds no module of node/, cli/ or ops, so
-- that a change there cannot reach into a run, and the worker can be read
-- on its own.
local T = require "tap"

local before = {}
for name in pairs(package.loaded) do before[name] = true end
local main = require "baton.worker.main"
T.is(type(main), "function", "baton.worker.main is the worker's main function")
local loaded, above = {}, {}
for name in pairs(package.loaded) do
  if not before[name] then loaded[#loaded + 1] = name end
  if name:match("^baton%.node") or name:match("^baton%.cli") or name:match("^baton%.ops") then
    above[#above + 1] = name
  end
end
table.sort(above)
T.ok(#loaded > 3, "the worker's modules were loaded here: " .. #loaded)
T.is(table.concat(above, " "), "", "no node/, cli/ or ops module among them")
for _, m in ipairs { "baton.worker.protocol", "baton.worker.io", "baton.worker.output", "baton.worker.secrets" } do
  T.ok(package.loaded[m] ~= nil, "the worker uses " .. m)
end
T.done()
