/*
 * Replays the HTTP response parser's fuzz target (fuzz/http_fuzz.c) on its
 * seeds (fuzz/corpus/http/) and on every input it ever failed on
 * (fuzz/regressions/http/). See fuzz-replay.h.
 */
#include "../../fuzz/http_fuzz.c"
#include "fuzz-replay.h"

int main(void) {
  return fuzz_replay("http");
}
