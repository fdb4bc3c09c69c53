/*
 * Replays the etcd answer-mapping fuzz target (fuzz/etcd_fuzz.c) on its
 * seeds (fuzz/corpus/etcd/) and on every input it ever failed on
 * (fuzz/regressions/etcd/). See fuzz-replay.h.
 */
#include "../../fuzz/etcd_fuzz.c"
#include "fuzz-replay.h"

int main(void) {
  return fuzz_replay("etcd");
}
