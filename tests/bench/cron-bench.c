/*
 * Baton side of tests/bench/cron (which builds and runs this).
 *
 *   cron-bench next MIX N        N next instants over the mix (zone TAB
 *                                expression per line), each expression
 *                                parsed once, chained next() calls
 *                                restarting from 2026-01-01T00:00:00Z every
 *                                1,000 (as cron-ref.js does). Prints
 *                                "<nexts> <nanoseconds>".
 *   cron-bench timer ENTRIES S   ENTRIES schedules of `* * * * * *` armed
 *                                on one loop for S seconds. Prints
 *                                "<fires> <p50 us> <p99 us> <max us>
 *                                 <cpu %>": lateness is the wall clock at
 *                                the callback minus the scheduled instant.
 */
#include "cron.h"
#include "crontimer.h"
#include "err.h"
#include "tz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

typedef struct {
  int64_t *late;                        /* microseconds */
  size_t n, cap;
} samples_t;

static void on_fire(bt_cronentry_t *e, int64_t fire_ms, int64_t now_ms,
                    void *data) {
  samples_t *s = data;
  (void)e;
  (void)now_ms;
  if (s->n < s->cap)
    s->late[s->n++] = ns(CLOCK_REALTIME) / 1000 - fire_ms * 1000;
}

static void on_stop(uv_timer_t *h) {
  uv_stop(h->loop);
}

static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static int bench_timer(int entries, int secs) {
  uv_loop_t loop;
  uv_timer_t stop;
  bt_crontimer_t *t;
  bt_cron_t c;
  char err[256];
  samples_t s = { NULL, 0, (size_t)entries * (secs + 2) };
  struct rusage r0, r1;
  if (!(s.late = malloc(s.cap * sizeof *s.late))) return 1;
  uv_loop_init(&loop);
  uv_timer_init(&loop, &stop);
  bt_crontimer_new(&loop, &t);
  for (int i = 0; i < entries; i++) {
    /* each schedule parsed on its own, as each job's would be */
    if (bt_cron_parse(&c, "* * * * * *", err, sizeof err) < 0 ||
        bt_crontimer_add(t, &c, NULL, on_fire, &s, NULL) < 0)
      return 1;
  }
  getrusage(RUSAGE_SELF, &r0);
  int64_t w0 = ns(CLOCK_MONOTONIC);
  uv_timer_start(&stop, on_stop, (uint64_t)secs * 1000, 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  int64_t w1 = ns(CLOCK_MONOTONIC);
  getrusage(RUSAGE_SELF, &r1);
  double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) * 1e6 +
               (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) +
               (double)(r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1e6 +
               (double)(r1.ru_stime.tv_usec - r0.ru_stime.tv_usec);
  cpu = cpu * 1000 / (double)(w1 - w0) * 100;
  bt_crontimer_close(t);
  uv_close((uv_handle_t *)&stop, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  if (!s.n) return 1;
  qsort(s.late, s.n, sizeof *s.late, cmp64);
  printf("%zu %lld %lld %lld %.2f\n", s.n, (long long)s.late[s.n / 2],
         (long long)s.late[s.n * 99 / 100], (long long)s.late[s.n - 1], cpu);
  free(s.late);
  return 0;
}

int main(int argc, char **argv) {
  int rc = 2;
  if (argc == 4 && !strcmp(argv[1], "next"))
    rc = bench_next(argv[2], atol(argv[3]));
  else if (argc == 4 && !strcmp(argv[1], "timer"))
    rc = bench_timer(atoi(argv[2]), atoi(argv[3]));
  else
    fprintf(stderr, "usage: cron-bench next MIX N | timer ENTRIES SECONDS\n");
  bt_tz_cache_free();
  return rc;
}
