# tools/demo-narrate.awk: turns the logfmt lines of several `baton node`
# processes into one readable line per event. Used by tools/demo.sh and the
# examples' run.sh. Input: `tail -F node-1.log node-2.log ...` (its
# "==> FILE <==" headers say which node the following lines come from; the
# node's name is the file's base name without .log).
#
#   awk -v quiet=REGEX -f tools/demo-narrate.awk
#
# quiet: jobs whose "run claimed" lines are not printed (a job that runs
# every second would double the output); their end is still one line, with
# the last message the job itself logged.
#
# Plain POSIX awk (mawk, the default on Debian, included): no gawk features.

function unquote(s,    out, c) {
  out = ""
  while (s != "") {
    c = substr(s, 1, 1)
    if (c == "\\") {
      c = substr(s, 2, 1)
      if (c == "n") c = " "
      else if (c == "t") c = " "
      out = out c
      s = substr(s, 3)
    } else {
      out = out c
      s = substr(s, 2)
    }
  }
  return out
}

# Fills F[key] = value and K[1..NK] (keys in order) from a logfmt line.
function parse(line,    s, i, k, v) {
  split("", F)
  NK = 0
  s = line
  while (1) {
    sub(/^ +/, "", s)
    if (s == "") break
    i = index(s, "=")
    if (i == 0) break
    k = substr(s, 1, i - 1)
    s = substr(s, i + 1)
    if (substr(s, 1, 1) == "\"") {
      if (match(s, /^"([^"\\]|\\.)*"/)) {
        v = unquote(substr(s, 2, RLENGTH - 2))
        s = substr(s, RLENGTH + 1)
      } else {
        v = substr(s, 2)
        s = ""
      }
    } else {
      i = index(s, " ")
      if (i == 0) { v = s; s = "" } else { v = substr(s, 1, i - 1); s = substr(s, i + 1) }
    }
    F[k] = v
    K[++NK] = k
  }
}

# 2026-11-29T14:51:02.003Z -> 14:51:02.003; an instant -> 14:51:02
function clock(ts) { return substr(ts, 12, length(ts) - 12) }
# what a run is of: an instant (2026-11-29T14:51:02Z -> 14:51:02) or a queue
# task id (1795963098411-9afd91b54062cfc9 -> task 9afd91)
function what(t) {
  if (t == "") return "?"
  if (t ~ /^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T/) return "@ " substr(t, 12, 8)
  if (t ~ /^[0-9]+-[0-9a-f]+$/) return "task " substr(t, index(t, "-") + 1, 6)
  return "@ " t
}

function dur(s,    ms) {
  if (s == "") return "?"
  ms = int(s * 1000 + 0.5)
  if (ms < 1000) return ms "ms"
  return sprintf("%.1fs", s)
}

function out(text) {
  printf "%s  %-8s %s\n", clock(F["ts"]), who, text
  fflush()
}

# The fields a job logged besides the run's own ones, as k=v.
function extras(    i, k, s) {
  s = ""
  for (i = 1; i <= NK; i++) {
    k = K[i]
    if (k == "ts" || k == "level" || k == "msg" || k == "job" || k == "instant" ||
        k == "node" || k == "attempt") continue
    s = s " " k "=" F[k]
  }
  return s
}

BEGIN { who = "?" }

/^==> .* <==$/ {
  who = $0
  sub(/^==> /, "", who); sub(/ <==$/, "", who)
  sub(/.*\//, "", who); sub(/\.log$/, "", who)
  next
}

/^ts=/ {
  parse($0)
  msg = F["msg"]; job = F["job"]; inst = F["instant"]
  runkey = who SUBSEP job SUBSEP inst
  if (msg == "node started") {
    out("joined the cluster (lease TTL " F["ttl"] " s)")
  } else if (msg == "elected cluster leader") {
    out("is now the cluster leader")
  } else if (msg == "job loaded") {
    out("loaded job " job " (revision " F["revision"] ", " F["schedule"] ")")
  } else if (msg == "job reloaded") {
    out("reloaded job " job ": now revision " F["revision"])
  } else if (msg ~ /^job rejected/) {
    out("REJECTED job " job " revision " F["revision"] ", keeps revision " F["running"] ": " F["error"])
  } else if (msg == "job removed" || msg == "job paused" || msg == "job resumed") {
    out(msg " " job)
  } else if (msg == "run claimed" || msg == "run started") {
    rev[runkey] = F["revision"]
    att = (F["attempt"] != "") ? F["attempt"] : 1
    if (quiet == "" || job !~ quiet)
      out(">> runs " job " " what(inst) " (attempt " att ", code revision " F["revision"] ")")
  } else if (msg == "run ended") {
    t = "<< " job " " what(inst) " " F["state"] " in " dur(F["duration"])
    if (F["attempt"] != "" && F["attempt"] != 1) t = t " (attempt " F["attempt"] ")"
    if (quiet != "" && job ~ quiet && rev[runkey] != "") t = t ", code revision " rev[runkey]
    if (F["error"] != "") t = t ": " F["error"]
    if (said[runkey] != "") t = t "  -- \"" said[runkey] "\""
    delete rev[runkey]; delete said[runkey]
    out(t)
  } else if (msg ~ /^instant skipped/ || msg ~ /^run skipped/) {
    t = msg; sub(/^[a-z]+ skipped: */, "", t)
    out("-- " job " " what(inst) " skipped: " t)
  } else if (msg == "run failed; retrying") {
    out("<< " job " " what(inst) " failed (attempt " F["attempt"] "): " F["error"] "; retry in " F["retry_in"] " s")
  } else if (msg ~ /^re-running a run whose node was lost/) {
    out("!! " job " " what(inst) ": its node " F["lost_node"] " was lost; running it again (attempt " F["attempt"] " was lost)")
  } else if (msg ~ /^run abandoned/) {
    out("!! " job " " what(inst) ": its node " F["lost_node"] " was lost; run abandoned (on_node_loss)")
  } else if (msg ~ /^retrying a run whose node is gone/) {
    out("!! " job " " what(inst) ": its node " F["lost_node"] " is gone; retrying it here")
  } else if (msg == "misfired instants") {
    out("-- " job ": " F["missed"] " instants missed while no node was up" extras())
  } else if (msg == "node rejoined") {
    out("rejoined the cluster with a new lease")
  } else if (msg == "run result not recorded") {
    out("!! " job " " what(inst) " result NOT recorded: " F["reason"])
  } else if (msg ~ /^session lost/) {
    out("!! lost its session (" F["reason"] "): runs stopped, exiting")
  } else if (msg ~ /^stopping/) {
    out("stopping (" F["signal"] ")")
  } else if (msg == "node stopped") {
    out("stopped")
  } else if (F["attempt"] != "" && job != "" && inst != "") {
    # a line the job itself logged through ctx.log
    if (quiet != "" && job ~ quiet) said[runkey] = msg extras()
    else out("   " job " " what(inst) ": " msg extras())
  } else {
    # anything else the node says (failover, retries, warnings, ...)
    t = msg
    if (job != "") t = t ": " job
    if (inst != "") t = t " " what(inst)
    for (i = 1; i <= NK; i++) {
      k = K[i]
      if (k == "ts" || k == "msg" || k == "job" || k == "instant" || k == "node" ||
          (k == "level" && F[k] == "info")) continue
      t = t " " k "=" F[k]
    }
    out(t)
  }
  next
}

# not a log line (a panic, a message from the C core): show it as it is
NF { out($0) }
