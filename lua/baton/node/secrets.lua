-- A job's secrets (docs/security.md, "Secrets"): the names a job declares
-- (secrets = {"DB_PASSWORD", ...}, checked by baton.job) are resolved on the
-- node that runs it, in its worker, and given to run(ctx) as ctx.secrets.
-- Each name is read from the node's --secrets-dir (a file of that name,
-- its trailing newline removed), or else from the node's environment. The
-- values never cross etcd and are not in the node's messages to its
-- workers: only the names are. The worker redacts them (and the node's own
-- secrets, output.node_secrets) from every line it logs or stores.
--
-- The conductor hands its --secrets-dir to its workers as
-- BATON_SECRETS_DIR (node/pool.lua).
local baton = require "baton"
local bit = require "bit"

local format = string.format

local M = {}

-- The node's --secrets-dir, as its workers see it (nil when not given).
function M.dir()
  local d = os.getenv("BATON_SECRETS_DIR")
  return d ~= "" and d or nil
end

-- Checks dir for `baton node --secrets-dir DIR`: true, or nil and why not.
function M.check_dir(dir)
  local mode, regular = baton._sign.mode(dir)
  if not mode then return nil, "--secrets-dir " .. dir .. ": " .. tostring(regular) end
  if regular then return nil, "--secrets-dir " .. dir .. ": not a directory" end
  return true
end

local warned = {}

-- The value of secret name in dir (nil when dir has no such file), warning
-- once per file in the node's log when others than its owner may read it.
-- A file that exists but cannot be read is an error (nil, message).
local function from_file(dir, name)
  local path = dir .. "/" .. name
  local mode, regular = baton._sign.mode(path)
  if not mode then return nil end
  if not regular then return nil, format("%s is not a regular file", path) end
  if bit.band(mode, 4 * 8 + 4) ~= 0 then -- 0044: group or others may read it
    if not warned[path] then
      warned[path] = true
      baton.log.warn("a secret file may be read by others than its owner: chmod 600 it",
                     { file = path, mode = format("%04o", mode) })
    end
  end
  local f, err = io.open(path, "rb")
  if not f then return nil, format("cannot read %s: %s", path, tostring(err)) end
  local v = f:read("*a")
  f:close()
  return (v:gsub("\r?\n$", ""))
end

-- The values of names (a job's spec.secrets) on node `node`: a table name
-- -> value, or nil and an error naming the first one missing (never a
-- value).
function M.resolve(names, node, dir)
  local values = {}
  dir = dir or M.dir()
  for _, name in ipairs(names or {}) do
    local v, ferr
    if dir then v, ferr = from_file(dir, name) end
    if ferr then return nil, format("secret %s on node %s: %s", name, tostring(node), ferr) end
    if v == nil then
      v = os.getenv(name)
      if v == "" then v = nil end
    end
    if v == nil then
      return nil, format("secret %s is not set on node %s (%s, no environment variable)", name,
                         tostring(node), dir and ("no file in --secrets-dir " .. dir) or "no --secrets-dir")
    end
    values[name] = v
  end
  return values
end

-- list (redaction strings, longest first: output.node_secrets) with the
-- values of secrets added, longest first again.
function M.redaction_list(list, secrets)
  local out, seen = {}, {}
  for _, s in ipairs(list) do
    if not seen[s] then seen[s] = true; out[#out + 1] = s end
  end
  for _, v in pairs(secrets or {}) do
    if v ~= "" and not seen[v] then seen[v] = true; out[#out + 1] = v end
  end
  table.sort(out, function(a, b) return #a > #b end)
  return out
end

return M
