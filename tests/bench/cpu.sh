# tests/bench/cpu.sh: sourced by the benches that print where a run's CPU
# goes. It reads the caller's pids (the nodes it started) and the harness's
# etcd (BATON_ROOT, BATON_TEST_ETCD_DIR).
#
#   c0=$(cpu); ...; c1=$(cpu)
#   cpu_per "$c0" "$c1" N task   # CPU per task: nodes ... ms (conductors ...,
#                                #   workers and their containment ...), etcd ... ms
hz=$(getconf CLK_TCK)
etcd_pid=$("$BATON_ROOT/tests/harness/etcd" pid "$BATON_TEST_ETCD_DIR" 2>/dev/null || echo "")
cpu() { # CPU ticks of the nodes with their workers, of the nodes alone, and of etcd (with children)
  # (one pass over /proc: a bench samples this inside its measured window)
  cat /proc/[0-9]*/stat 2>/dev/null | awk -v nodes="${pids[*]}" -v etcd="$etcd_pid" '
    { pid = $1; rest = $0; sub(/^[^ ]* \(.*\) /, "", rest); split(rest, f, " ")
      parent[pid] = f[2]; ticks[pid] = f[12] + f[13] }
    END {
      n = split(nodes, np, " ")
      for (i = 1; i <= n; i++) isnode[np[i]] = 1
      for (p in ticks) {
        q = p # the nearest of p and its ancestors that is a node or etcd
        h = 0
        while ((q in parent) && !(q in isnode) && q != etcd && h++ < 64) q = parent[q]
        if (q in isnode) { tree += ticks[p]; if (q == p) self += ticks[p] }
        else if (etcd != "" && q == etcd) et += ticks[p]
      }
      printf "%d %d %d\n", tree, self, et
    }'
}
cpu_per() { # "BEFORE" "AFTER" N UNIT
  awk -v a="$1" -v b="$2" -v n="$3" -v u="$4" -v hz="$hz" 'BEGIN {
    split(a, x, " "); split(b, y, " ")
    if (n == 0) n = 1
    printf "CPU per %s: nodes %.2f ms (conductors %.2f, workers and their containment %.2f), etcd %.2f ms\n", u,
      1000 * (y[1] - x[1]) / hz / n, 1000 * (y[2] - x[2]) / hz / n,
      1000 * (y[1] - x[1] - y[2] + x[2]) / hz / n, 1000 * (y[3] - x[3]) / hz / n }'
}
