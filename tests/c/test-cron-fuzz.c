/*
 * Replays the cron parser's fuzz target (fuzz/cron_fuzz.c) on its seeds
 * (fuzz/corpus/cron/) and on every input it ever failed on
 * (fuzz/regressions/cron/). See fuzz-replay.h.
 */
#include "../../fuzz/cron_fuzz.c"
#include "fuzz-replay.h"

int main(void) {
  int rc = fuzz_replay("cron");
  bt_tz_cache_free();
  return rc;
}
