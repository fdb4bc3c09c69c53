#!/usr/bin/env bash
# The nemesis suite (tests/chaos/README.md) for 60 s in `make test`: one
# seed, printed first; on a violation the test fails with the checker's
# table and the run directory (kept under $CHAOS_DIR or $TMPDIR) names what
# to look at. Replay it with the printed command. CHAOS_SEED picks the seed,
# CHAOS_TEST_DURATION the length; BATON_SKIP_CHAOS=1 skips the test.
set -uo pipefail

root=${BATON_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
export BATON_BIN=${BATON_BIN:-$root/bin/baton}
duration=${CHAOS_TEST_DURATION:-60}
seed=${CHAOS_SEED:-$(( ($(od -An -N4 -tu4 /dev/urandom) % 999999) + 1 ))}

echo "1..1"
if [ "${BATON_SKIP_CHAOS:-0}" = 1 ]; then
  echo "ok 1 # skip BATON_SKIP_CHAOS=1"
  exit 0
fi
echo "# chaos seed $seed; replay: tests/chaos/run --seed $seed --duration $duration"
t0=$SECONDS
# (The suite's own etcd is not used: the run starts a 3-member cluster.)
env -u BATON_ENDPOINTS -u BATON_PREFIX "$root/tests/chaos/run" --seed "$seed" \
  --duration "$duration" 2>&1 | sed -u 's/^/# /'
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ]; then
  echo "ok 1 - nemesis suite, $duration s, seed $seed: no violation ($((SECONDS - t0)) s)"
else
  echo "not ok 1 - nemesis suite, $duration s, seed $seed: $([ "$rc" -eq 1 ] && echo "violations found" || echo "the run failed (exit $rc)") ($((SECONDS - t0)) s)"
  exit 1
fi
