/*
 * Baton side of tests/bench/cron's first half (which builds and runs this;
 * the timer half is cron-timetable.lua).
 *
 *   cron-bench next MIX N        N next instants over the mix (zone TAB
 *                                expression per line), each expression
 *                                parsed once, chained next() calls
 *                                restarting from 2026-01-01T00:00:00Z every
 *                                1,000 (as cron-ref.js does). Prints
 *                                "<nexts> <nanoseconds>".
 */
#include "cron.h"
#include "err.h"
#include "tz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int bench_next(const char *mixfile, long n) {
  bt_cron_t c[64];
  const bt_tz_t *tz[64];
  int m = 0;
  char line[512], err[512];
  FILE *f = fopen(mixfile, "r");
  if (!f) {
    perror(mixfile);
    return 1;
  }
  while (m < 64 && fgets(line, sizeof line, f)) {
    char *tab = strchr(line, '\t');
    if (!tab) continue;
    *tab = 0;
    tab[strcspn(tab + 1, "\n") + 1] = 0;
    if (bt_tz_load(line, &tz[m]) < 0 ||
        bt_cron_parse(&c[m], tab + 1, err, sizeof err) < 0) {
      fprintf(stderr, "cron-bench: %s %s: %s\n", line, tab + 1, err);
      return 1;
    }
    m++;
  }
  fclose(f);
  const int64_t start = INT64_C(1767225600);   /* 2026-01-01T00:00:00Z */
  long per = (n + m - 1) / m, done = 0;
  int64_t sink = 0, t0 = ns(CLOCK_MONOTONIC);
  for (int k = 0; k < m; k++) {
    int64_t t = start;
    for (long i = 0; i < per; i++) {
      if (i % 1000 == 0) t = start;
      if (bt_cron_next(&c[k], tz[k], t, &t) < 0) return 1;
      sink += t & 1;
      done++;
    }
  }
  int64_t t1 = ns(CLOCK_MONOTONIC);
  printf("%ld %lld %lld\n", done, (long long)(t1 - t0), (long long)sink);
  return 0;
}

int main(int argc, char **argv) {
  int rc = 2;
  if (argc == 4 && !strcmp(argv[1], "next"))
    rc = bench_next(argv[2], atol(argv[3]));
  else
    fprintf(stderr, "usage: cron-bench next MIX N\n");
  bt_tz_cache_free();
  return rc;
}
