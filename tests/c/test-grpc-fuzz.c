/*
 * Replays the gRPC framing fuzz target (fuzz/grpc_fuzz.c) on its seeds
 * (fuzz/corpus/grpc/) and on every input it ever failed on
 * (fuzz/regressions/grpc/). See fuzz-replay.h.
 */
#include "../../fuzz/grpc_fuzz.c"
#include "fuzz-replay.h"

int main(void) {
  return fuzz_replay("grpc");
}
