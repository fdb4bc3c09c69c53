/*
 * Replays the JSON NUL fuzz target (fuzz/json_fuzz.c) on its seeds
 * (fuzz/corpus/json/) and on every input it ever failed on
 * (fuzz/regressions/json/). See fuzz-replay.h.
 */
#include "../../fuzz/json_fuzz.c"
#include "fuzz-replay.h"

int main(void) {
  return fuzz_replay("json");
}
