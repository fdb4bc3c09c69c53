/*
 * Replays the etcd protobuf fuzz target (fuzz/etcdpb_fuzz.c: gRPC streams
 * through the deframer, each message through etcdpb's decoder and back) on
 * its seeds (fuzz/corpus/etcdpb/) and on every input it ever failed on
 * (fuzz/regressions/etcdpb/). See fuzz-replay.h.
 */
#include "../../fuzz/etcdpb_fuzz.c"
#include "fuzz-replay.h"

int main(void) {
  return fuzz_replay("etcdpb");
}
