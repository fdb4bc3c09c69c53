-- Bytes a job or an etcd writer chooses, on their way to storage and to an
-- operator's terminal (issue 22, findings 9 and 10):
--
--   redaction   a secret (a job's, the node's etcd password, its HTTP
--               token) is redacted wherever its bytes are cut: lines cut
--               at output.LINE_MAX (what the job prints, what its programs
--               print), write() boundaries, print calls without newline,
--               ctx.log's message, field names and values, the run's error
--   NUL         a NUL byte in what a run prints, logs or fails with is kept
--               visibly (\x00) and loses no other line; json.decode gives
--               "a\u0000b" exactly, and a run parameter holding one is
--               refused with one line (the API's run body)
--   terminal    the CLI prints stored text with its control characters
--               escaped (baton.cli.util.escape): job logs (-f), history,
--               show, ls, versions, diff, policy show, nodes; --json stays
--               exact
local T = require "tap"
local N = require "nodes"
local F = require "files"
local output = require "baton.worker.output"
local stored_output = require "baton.output"
local keys = require "baton.keys"
local U = require "baton.cli.util"
local json = baton.json

local ESC, BEL = "\27", "\7"

---------------------------------------------------------------------------
-- 1. Without a node: the pieces.

-- json.decode: \u0000 is a NUL byte in the string, not its end.
do
  local v = assert(json.decode('{"k":"a\\u0000b","n\\u0000":["\\u0000","\\\\u0000"]}'))
  T.is(v.k, "a\0b", "json.decode: \\u0000 in a string is a NUL byte, the rest kept")
  T.is(v["n\0"] and v["n\0"][1], "\0", "in a key and alone, too")
  T.is(v["n\0"] and v["n\0"][2], "\\u0000", "an escaped backslash before u0000 is text")
  local nv, err = json.decode('{"k":"a\0b"}')
  T.ok(nv == nil and err == "EINVAL: invalid JSON at byte 8: a NUL byte (write it \\u0000)",
       "a raw NUL byte is invalid JSON, with its place: " .. tostring(err))
end

-- A run parameter with a NUL byte: refused before anything is read.
do
  local ops = require "baton.ops"
  local r, err = ops.run_job("nojob", { params = { k = "a\0b" } })
  T.is(err, 'EINVAL: parameter "k": a NUL byte (\\u0000) in its value', "run_job refuses a NUL in a param's value")
  T.is(r, nil, "(nothing is queued)")
  r, err = ops.run_job("nojob", { params = { ["k\0"] = "v" } })
  T.is(err, 'EINVAL: parameter "k\\u0000": a NUL byte (\\u0000) in its name', "and in its name, shown as \\u0000")
end

-- The CLI's escape.
do
  local e = U.escape
  T.is(e("osc " .. ESC .. "]52;c;aGk=" .. BEL), "osc \\x1b]52;c;aGk=\\x07", "OSC 52 (clipboard): ESC and BEL escaped")
  T.is(e(ESC .. "[8mhidden" .. ESC .. "[0m"), "\\x1b[8mhidden\\x1b[0m", "SGR 8 (hidden text)")
  T.is(e("over\rwrite\b"), "over\\rwrite\\x08", "\\r and backspace")
  T.is(e("a\nb"), "a\\nb", "a newline in one line")
  T.is(e("a\nb", true), "a\nb", "kept in a multi-line body")
  T.is(e("a\tb\0c\127"), "a\tb\\x00c\\x7f", "tab kept; NUL, DEL escaped")
  T.is(e("C1 \194\155 lone \155 fine é →"), "C1 \\xc2\\x9b lone \\x9b fine é →",
       "C1 controls (as UTF-8 and as lone bytes) escaped, other UTF-8 kept")
  T.is(e("rtl \226\128\174x"), "rtl \\u202ex", "a direction override shown as \\u202e")
  local plain = "nothing to see: a-z, 0-9, ü"
  T.ok(rawequal(e(plain), plain), "text without controls comes back as it is")
end

-- Redaction across cuts, in a worker's buffer (no etcd needed to queue).
do
  local S = "hunter2-s3cret-value"
  local list = { S }
  -- What a job prints in pieces, the secret across the LINE_MAX cut.
  local cut = output.cutter(list)
  local got = {}
  local function take(t) for _, x in ipairs(t) do got[#got + 1] = x end end
  take(cut:feed(("p"):rep(output.LINE_MAX - 6)))
  take(cut:feed(S:sub(1, 9)))
  take(cut:feed(S:sub(10) .. " tail"))
  take(cut:feed(("q"):rep(output.LINE_MAX) .. "\nnext\n"))
  take(cut:finish())
  local joined = table.concat(got)
  T.ok(not joined:find(S, 1, true) and not joined:find("hunter2-s", 1, true) and joined:find("***", 1, true),
       "a secret printed across the line cut is redacted whole, not stored in two halves")
  T.ok(#got[1] <= output.LINE_MAX and got[1] == ("p"):rep(#got[1]),
       "the piece cut off ends before the secret (" .. #got[1] .. " bytes)")
  local qb = output.new { P = "/p/", job = "j", id = "i", attempt = 1, marker = "m", fence = 1, secrets = list }
  for _, x in ipairs(got) do qb:add { stream = "stdout", text = x } end
  local longest = 0
  for i = qb.qh, qb.qt do longest = math.max(longest, #qb.q[i].text) end
  T.ok(longest <= output.LINE_MAX, "no line stored is longer than LINE_MAX (" .. longest .. ")")
  T.is(got[#got], "next", "the lines after it come as they were")
  T.is(#joined, #(("p"):rep(output.LINE_MAX - 6) .. "*** tail" .. ("q"):rep(output.LINE_MAX) .. "next"),
       "nothing else is lost or added")

  -- A program's line, as the capture cuts it (cont pieces of one tap).
  local b = output.new { P = "/p/", job = "j", id = "i", attempt = 1, marker = "m", fence = 1, secrets = list }
  b.sink = { take = function(self)
    local l = self.lines
    self.lines = nil
    return l, 0
  end, close = function() end }
  local long = ("x"):rep(4096 - 7) .. S .. ("y"):rep(10)
  b.sink.lines = {
    { t = 1, stream = "stdout", cmd = "/bin/sh", tap = 7, cont = true, text = long:sub(1, 4096) },
    { t = 1, stream = "stderr", cmd = "/bin/sh", tap = 8, text = "other stream" },
    { t = 1, stream = "stdout", cmd = "/bin/sh", tap = 7, text = long:sub(4097) },
  }
  b:drain()
  local texts = {}
  for i = b.qh, b.qt do texts[#texts + 1] = b.q[i].text end
  local all = table.concat(texts, "|")
  T.ok(not all:find(S:sub(1, 7), 1, true) and not all:find(S:sub(-7), 1, true) and all:find("***", 1, true),
       "a program's secret across the capture's cut is redacted whole")
  T.ok(all:find("other stream", 1, true) ~= nil, "another stream's line in between is kept")

  -- Log lines: field names and values, numbers; NUL bytes; NaN.
  b:add { stream = "log", level = "info", text = "m " .. S .. " \0x",
          fields = { [S] = "v", k = "pre" .. S, pin = 20, nan = 0 / 0, t = { "a\0b", S } } }
  local l = b.q[b.qt]
  T.is(l.text, "m *** \\x00x", "a log message: redacted, its NUL shown as \\x00")
  T.is(l.fields["***"], "v", "a field named by a secret: the name redacted")
  T.is(l.fields.k, "pre***", "a field's value redacted")
  T.is(l.fields.nan, "nan", "a NaN field is kept as text (it would fail the chunk's JSON)")
  T.is(l.fields.t, '["a\\\\x00b","***"]', "a table field: its JSON, redacted and cleaned")
  local nb = output.new { P = "/p/", job = "j", id = "i", attempt = 1, marker = "m", fence = 1, secrets = { "20" } }
  nb:add { stream = "log", text = "x", fields = { pin = 20, n = 7 } }
  T.ok(nb.q[nb.qt].fields.pin == "***" and nb.q[nb.qt].fields.n == 7, "a number that shows a secret is redacted")
  local ok = pcall(json.encode, { lines = { l } })
  T.ok(ok, "the line can be stored (JSON)")
end

---------------------------------------------------------------------------
-- 2. A node: what a job prints, logs and fails with, stored and shown.

local c = N.new("untrusted")
local P, dir = c.P, c.dir
local stamp = tostring(math.floor(baton.now() * 1000))
local SECRET = "pw-" .. stamp .. "-abcdefghij"
local TOKEN = "tok-" .. stamp .. "-klmnopqrst"
F.write(dir .. "/token", TOKEN .. "\n")
assert(baton.exec { "mkdir", "-p", dir .. "/secrets" })
F.write(dir .. "/secrets/PW", SECRET .. "\n")
assert(baton.exec { "chmod", "600", dir .. "/secrets/PW" })

local free_port = N.free_port
local port = free_port()
-- (a label value with an escape: baton nodes prints it)
c:start("n1", 3, ("--http 127.0.0.1:%d --http-token-file %s --secrets-dir %s --labels 'site=a,evil=%s[8mX'")
  :format(port, dir .. "/token", dir .. "/secrets", ESC))

-- The job, run three times: the secret and the token across every cut
-- (what=cuts), NUL bytes everywhere (nul), terminal escapes (esc); the
-- last two fail with such an error.
local JOB = ([[
-- version 1 %s[8m hidden in the source
return {
  schedule = "@manual", secrets = { "PW" }, params = { what = "cuts", k = "x" },
  description = "desc %s]52;c;aGk=%s",
  run = function(ctx)
    local pw = ctx.secrets.PW
    local what = ctx.params.what
    if what == "cuts" then
      local f = assert(io.open(%q))
      local tok = f:read("*l")
      f:close()
      -- print / io.write: the secret across the line cut, in writes without newline
      io.write(("p"):rep(4090)); io.write(pw:sub(1, 5)); io.write(pw:sub(6)); print(" end1")
      print("token " .. tok)
      -- a program: the secret across the capture's cut, and across write() calls
      baton.exec { "sh", "-c", 'printf "%%4093s" "" | tr " " q; printf "%%s end2\n" "$PW"; '
        .. 'printf "%%s" "${PW%%??????????}"; sleep 0.3; printf "%%s end3\n" "${PW#${PW%%??????????}}"',
        env = { PW = pw } }
      -- ctx.log: the secrets as field names and values
      ctx.log.info("keys", { [pw] = "v", k = pw, [tok] = 1, tk = tok })
    elseif what == "nul" then
      print("nul a\0b")
      io.write("nul2 c\0d\n")
      baton.exec { "printf", "prog a\\000b\\n" }
      ctx.log.warn("log\0msg", { ["f\0k"] = "v\0v" })
      print("after")
      error("bad \0 end", 0)
    else
      print("osc \27]52;c;aGVsbG8=\7 hidden \27[8mX\27[0m cr \r over")
      error("bad \27[8m end", 0)
    end
  end,
}
]]):format(ESC, ESC, BEL, dir .. "/token")

local function cli(...)
  local r = c:cli(...)
  return r.stdout, r.stderr, r.code
end

local jf = dir .. "/leaky.lua"
F.write(jf, JOB)
local _, perr, pcode = cli("job", "put", jf, "--name", "leaky", "--author", "ev" .. ESC .. "[8mil")
T.is(pcode, 0, "job put: " .. perr)
local rev1 = assert(c.e:get(P .. "jobs/leaky")).kvs[1].mod_revision
F.write(jf, (JOB:gsub("version 1", "version 2")))
_, perr, pcode = cli("job", "put", jf, "--name", "leaky")
T.is(pcode, 0, "job put (version 2): " .. perr)
local rev2 = assert(c.e:get(P .. "jobs/leaky")).kvs[1].mod_revision
T.ok(c:loaded("leaky", rev2, 20), "the node loaded it")

-- Runs it with what=what; its record and its stored lines.
local function run(what)
  local out, rerr, rcode = cli("job", "run", "leaky", "--param", "what=" .. what, "--json")
  T.is(rcode, 0, what .. ": job run " .. rerr)
  local id = rcode == 0 and json.decode(out).id
  local rec = id and N.wait(30, function()
    for _, r in ipairs(c:records("leaky")) do
      if r.id == id and r.state ~= "running" and r.state ~= "retrying" then return r end
    end
  end)
  local kvs = assert(c.e:get(keys.output(P, "leaky", id or "none"), { prefix = true })).kvs
  return rec or {}, stored_output.lines(kvs), id
end

-- 2a. Secrets across cuts.
local rec, lines = run("cuts")
T.is(rec.state, "succeeded", "cuts: the run succeeded")
local texts, raw = {}, {}
for _, l in ipairs(lines) do
  if l.text then texts[#texts + 1] = l.text end
  raw[#raw + 1] = json.encode(l)
end
local stored = table.concat(texts, "\n")
local joined = table.concat(texts)
for what, s in pairs { secret = SECRET, token = TOKEN } do
  T.ok(#joined > 8192 and not joined:find(s, 1, true) and not table.concat(raw):find(s, 1, true),
       "no stored line holds the " .. what .. ", whole or cut in two")
  T.ok(#joined > 8192 and not joined:find(s:sub(1, 12), 1, true) and not joined:find(s:sub(-10), 1, true),
       "nor a half of the " .. what)
end
local function has(pat, name)
  if not T.ok(stored:find(pat) ~= nil, name) then T.diag("stored: " .. U.escape(stored:gsub("[pq]+", "..."))) end
end
has("p\n?%*%*%*\n? end1", "the printed secret across the cut is ***")
has("token %*%*%*", "the node's HTTP token is redacted (--http-token-file)")
has("q\n?%*%*%*\n? end2", "a program's secret across the capture's cut is ***")
has("\n%*%*%* end3", "a program's secret across two write() calls is ***")
local logline
for _, l in ipairs(lines) do if l.text == "keys" then logline = l end end
local lf = logline and logline.fields or {}
T.ok(lf.k == "***" and lf.tk == "***" and ((lf["***"] == "v" and lf["***_"] == 1) or (lf["***"] == 1 and lf["***_"] == "v")),
     "ctx.log: secrets as field names and values are *** (two names alike: one gets a _)")
local nlog = c:log("n1")
T.ok(nlog:find('msg="keys"', 1, true) and not nlog:find(SECRET, 1, true) and not nlog:find(TOKEN, 1, true),
     "the node's log holds neither the secret nor the token, not even as a field name")

-- 2b. NUL bytes: kept as \x00, nothing else lost.
local nrec, nlines = run("nul")
T.is(nrec.error, "bad \\x00 end", "nul: the run's error is recorded, its NUL byte as \\x00")
texts = {}
for _, l in ipairs(nlines) do if l.text then texts[#texts + 1] = l.text end end
stored = table.concat(texts, "\n")
has("nul a\\x00b\n", "print with a NUL byte: kept, as \\x00")
has("nul2 c\\x00d\n", "io.write with a NUL byte")
has("prog a\\x00b\n", "a program's NUL byte")
has("log\\x00msg", "a log message's NUL byte")
has("\nafter$", "and the lines after them are kept")
local nulfield
for _, l in ipairs(nlines) do if l.text == "log\\x00msg" then nulfield = l.fields end end
T.ok(nulfield and nulfield["f\\x00k"] == "v\\x00v", "a field's NUL bytes, name and value")

-- 2c. What the CLI prints: escaped; --json exact.
local erec, elines, eid = run("esc")
T.is(erec.error, "bad " .. ESC .. "[8m end", "esc: the error is stored as it is")
T.ok(elines[1] and elines[1].text:find(ESC .. "]52", 1, true), "and so is the output")
local function clean(what, out)
  T.ok(#out > 0 and not out:find("[%z\1-\8\11-\31\127]") and not out:find("\194[\128-\159]"),
       what .. ": no control character reaches the terminal")
end
local out = cli("job", "logs", "leaky", eid)
clean("job logs", out)
T.like(out, "osc \\x1b%]52;c;aGVsbG8=\\x07 hidden \\x1b%[8mX\\x1b%[0m cr \\r over", "job logs: escapes shown")
local jout = cli("job", "logs", "leaky", eid, "--json")
T.like(jout, '"osc \\u001b%]52;c;aGVsbG8=\\u0007 hidden', "job logs --json: exact (JSON's escapes)")
out = cli("job", "logs", "leaky", eid, "-f")
clean("job logs -f", out)
T.like(out, "%-%-%- run ended: failed %([^\n]*%): bad \\x1b%[8m end %-%-%-\n", "job logs -f: its end line")
out = cli("job", "history", "leaky")
clean("job history", out)
T.like(out, "bad \\x1b%[8m end", "job history: the error escaped")
out = cli("job", "show", "leaky")
clean("job show", out)
T.like(out, "desc \\x1b%]52;c;aGk=\\x07", "job show: the description escaped")
-- (names as a raw etcd writer may make them)
assert(c.e:put(P .. "jobs/ev" .. ESC .. "[8mil", "return { schedule = '@manual', run = function() end }"))
assert(c.e:put(P .. "policies/ev" .. ESC .. "[8mil", "return { claim_delay = function() return 0 end }"))
out = cli("job", "ls")
clean("job ls", out)
T.like(out, "\nev\\x1b%[8mil ", "job ls: a job's name escaped")
out = cli("job", "versions", "leaky")
clean("job versions", out)
T.like(out, "ev\\x1b%[8mil", "job versions: the author escaped")
out = cli("job", "diff", "leaky", tostring(rev1), tostring(rev2))
T.ok(not out:find(ESC, 1, true) and out:find("\n", 1, true), "job diff: no ESC, lines kept")
T.like(out, "%-%- version 1 \\x1b%[8m hidden", "job diff: the source's escape shown")
out = cli("nodes")
clean("nodes", out)
T.like(out, "evil=\\x1b%[8mX", "nodes: a label escaped")
F.write(dir .. "/pol.lua", "return { description = 'pol " .. ESC .. "[8mX', claim_delay = function() return 0 end }\n")
_, perr, pcode = cli("policy", "put", dir .. "/pol.lua", "--name", "pol")
T.is(pcode, 0, "policy put: " .. perr)
out = cli("policy", "show", "pol")
clean("policy show", out)
T.like(out, "pol \\x1b%[8mX", "policy show: the description escaped")
out = cli("policy", "ls")
clean("policy ls", out)
T.like(out, "\nev\\x1b%[8mil ", "policy ls: a policy's name escaped")

-- The API's run body: a NUL in a parameter is refused, not cut.
local function post(path, body)
  F.write(dir .. "/body", body)
  local r = assert(baton.exec { "curl", "-sS", "-X", "POST", "-H", "Authorization: Bearer " .. TOKEN,
    "--data-binary", "@" .. dir .. "/body", "-w", "\n%{http_code}", "--max-time", "20",
    ("http://127.0.0.1:%d%s"):format(port, path), timeout = 30 })
  local answer, status = r.stdout:match("^(.*)\n(%d+)$")
  return tonumber(status), answer
end
N.wait(10, function() return (post("/api/v1/jobs/nojob/run", "{}")) == 404 end)
local status, body = post("/api/v1/jobs/leaky/run", '{"params": {"k": "a\\u0000b"}}')
T.is(status, 400, "POST run with \"a\\u0000b\" as a param: 400")
-- (the HTTP layer refuses a body with \u0000 before the parameters are
-- looked at: node/http.lua; the CLI's own refusal is checked above)
T.like(body or "", 'EINVAL: the body holds \\\\u0000 %(a NUL character%)', "saying why, in one line")
T.unlike(body or "", "\n.", "in one line")
T.is(#c:records("leaky"), 3, "no run was queued")

c:destroy()
T.done()
