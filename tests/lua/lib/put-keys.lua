-- baton eval put-keys.lua PREFIX N: creates PREFIX0001..PREFIXn, one txn
-- each that only creates an absent key, so that retrying after a failure
-- (etcd restarting, say) never writes a key twice. Gives up after 90 s.
local prefix, n = arg[1], tonumber(arg[2])
local e = baton.etcd
local deadline = baton.now() + 90
for i = 1, n do
  local k = ("%s%04d"):format(prefix, i)
  while true do
    local r, err = e:txn {
      compare = { { key = k, target = "create", op = "==", value = 0 } },
      success = { { put = { key = k, value = tostring(i) } } },
    }
    if r then break end
    if baton.now() > deadline then error("gave up at " .. k .. ": " .. err) end
    baton.sleep(0.05)
  end
end
print("wrote " .. n)
