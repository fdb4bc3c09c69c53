-- What a worker keeps out of everything it logs and stores (its run's
-- kept output, its log lines, the error it reports): the node's own
-- secrets and the values of the run's secrets (node/secrets.lua resolves
-- those, in the conductor, and sends them with the run), as a redaction
-- list for worker/output.lua's redact.
local baton = require "baton"

local M = {}

-- What the node knows that must never be stored: the etcd password
-- (--password, BATON_PASSWORD) and the HTTP token (the first line of the
-- file BATON_HTTP_TOKEN_FILE names, trimmed, as node/http.lua reads it:
-- `baton node --http-token-file F` sets that variable for its workers).
function M.node_secrets()
  local list, seen = {}, {}
  local function add(s)
    if type(s) ~= "string" then return end
    s = s:gsub("^%s+", ""):gsub("%s+$", "")
    if s ~= "" and not seen[s] then seen[s] = true; list[#list + 1] = s end
  end
  add(baton.config and baton.config.password)
  add(os.getenv("BATON_PASSWORD"))
  local tf = os.getenv("BATON_HTTP_TOKEN_FILE")
  if tf and tf ~= "" then
    local f = io.open(tf, "rb")
    if f then add((f:read("*a") or ""):match("^[^\r\n]*")); f:close() end
  end
  -- The longest first: a secret that contains another is redacted whole.
  table.sort(list, function(a, b) return #a > #b end)
  return list
end

-- list (redaction strings, longest first: M.node_secrets) with the
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
