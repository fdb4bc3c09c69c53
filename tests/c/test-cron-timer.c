/*
 * Timer engine tests (TAP), on a real libuv loop, about 12 s in all:
 * firing on absolute time, re-arming, removal and close from callbacks,
 * @every on the monotonic clock, wall-clock steps (injected clock) forward,
 * small back and big back, and heap consistency with many entries.
 */
#include "cron.h"
#include "crontimer.h"
#include "err.h"
#include "tz.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int ntest, nfail;

static void ok(int cond, const char *fmt, ...) {
  va_list ap;
  ntest++;
  if (!cond) nfail++;
  printf("%sok %d - ", cond ? "" : "not ", ntest);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
}

static bt_cron_t parse(const char *expr) {
  bt_cron_t c;
  char err[256];
  if (bt_cron_parse(&c, expr, err, sizeof err) < 0) {
    printf("# %s\n", err);
    exit(2);
  }
  return c;
}

static int64_t real_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* An injectable wall clock: real time plus an offset. */
static int64_t offset_us;
static int64_t fake_clock(void *arg) {
  (void)arg;
  return real_us() + offset_us;
}

typedef struct {
  int fires;
  int64_t fire[64], now[64];
  int remove_after;                     /* remove itself after n fires */
  bt_crontimer_t *t;
} rec_t;

static void on_fire(bt_cronentry_t *e, int64_t fire, int64_t now, void *d) {
  rec_t *r = d;
  if (r->fires < 64) {
    r->fire[r->fires] = fire;
    r->now[r->fires] = now;
  }
  r->fires++;
  if (r->remove_after && r->fires == r->remove_after)
    bt_crontimer_remove(r->t, e);
}

static uv_timer_t stopper;
static void on_stop(uv_timer_t *h) {
  uv_stop(h->loop);
}

/* Runs the loop for ms milliseconds. */
static void run_for(uv_loop_t *loop, uint64_t ms) {
  uv_timer_start(&stopper, on_stop, ms, 0);
  uv_run(loop, UV_RUN_DEFAULT);
}

/* Wall-clock second boundaries are seen, fired on time and re-armed. */
static void test_fire(uv_loop_t *loop) {
  bt_crontimer_t *t;
  enum { N = 50 };
  static rec_t r[N];
  bt_cron_t c = parse("* * * * * *");
  ok(bt_crontimer_new(loop, &t) == 0, "new");
  for (int i = 0; i < N; i++) {
    memset(&r[i], 0, sizeof r[i]);
    r[i].t = t;
    bt_crontimer_add(t, &c, NULL, on_fire, &r[i], NULL);
  }
  ok(bt_crontimer_count(t) == N, "count");
  run_for(loop, 2500);
  int good = 1, fires = 0;
  int64_t worst = 0;
  for (int i = 0; i < N; i++) {
    fires += r[i].fires;
    for (int k = 0; k < r[i].fires && k < 64; k++) {
      int64_t late = r[i].now[k] - r[i].fire[k];
      if (late > worst) worst = late;
      if (r[i].fire[k] % 1000 != 0 || late < 0 ||
          (k > 0 && r[i].fire[k] != r[i].fire[k - 1] + 1000))
        good = 0;
    }
  }
  ok(fires >= 2 * N && fires <= 3 * N, "each entry fired 2-3 times in 2.5 s "
     "(%d fires)", fires);
  ok(good, "whole seconds, consecutive, never early");
  ok(worst < 100, "lateness under 100 ms (worst %lld ms)", (long long)worst);
  bt_crontimer_close(t);
  uv_run(loop, UV_RUN_NOWAIT);
}

/* Removal from inside the callback, and close from inside it. */
static rec_t closer;
static void on_fire_close(bt_cronentry_t *e, int64_t f, int64_t n, void *d) {
  rec_t *r = d;
  (void)e;
  (void)f;
  (void)n;
  r->fires++;
  bt_crontimer_close(r->t);
}

static void test_remove_close(uv_loop_t *loop) {
  bt_crontimer_t *t;
  static rec_t a, b;
  bt_cron_t c = parse("* * * * * *");
  bt_crontimer_new(loop, &t);
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  a.t = b.t = t;
  a.remove_after = 1;
  bt_crontimer_add(t, &c, NULL, on_fire, &a, NULL);
  bt_crontimer_add(t, &c, NULL, on_fire, &b, NULL);
  run_for(loop, 2300);
  ok(a.fires == 1, "an entry removed in its callback fires once");
  ok(b.fires >= 2, "the other keeps firing");
  ok(bt_crontimer_count(t) == 1, "count after removal");
  bt_crontimer_close(t);
  uv_run(loop, UV_RUN_NOWAIT);

  bt_crontimer_new(loop, &t);
  memset(&closer, 0, sizeof closer);
  closer.t = t;
  for (int i = 0; i < 3; i++)
    bt_crontimer_add(t, &c, NULL, on_fire_close, &closer, NULL);
  run_for(loop, 1300);
  ok(closer.fires == 1, "close in a callback: no further callbacks");
  bt_cron_t m = parse("@manual");
  bt_crontimer_t *t2;
  bt_cronentry_t *e;
  bt_crontimer_new(loop, &t2);
  ok(bt_crontimer_add(t2, &m, NULL, on_fire, &closer, &e) == 0 &&
       bt_crontimer_next(t2, e) == -1, "@manual is accepted, never armed");
  bt_crontimer_close(t2);
  uv_run(loop, UV_RUN_NOWAIT);
}

/* @every runs on the monotonic clock: a wall step does not move it. */
static void test_every(uv_loop_t *loop) {
  bt_crontimer_t *t;
  static rec_t r;
  bt_cron_t c = parse("@every 1s");
  bt_crontimer_new(loop, &t);
  offset_us = 0;
  bt_crontimer_set_clock(t, fake_clock, NULL);
  memset(&r, 0, sizeof r);
  bt_crontimer_add(t, &c, NULL, on_fire, &r, NULL);
  run_for(loop, 1500);
  offset_us = INT64_C(7200) * 1000000;  /* wall jumps 2 h forward */
  run_for(loop, 1000);
  offset_us = -INT64_C(7200) * 1000000; /* and 2 h back */
  run_for(loop, 1000);
  ok(r.fires == 3, "@every 1s fired 3 times in 3.5 s across clock steps "
     "(%d)", r.fires);
  bt_crontimer_close(t);
  uv_run(loop, UV_RUN_NOWAIT);
  offset_us = 0;
}

/* Clock steps on cron entries. */
static void test_steps(uv_loop_t *loop) {
  bt_crontimer_t *t;
  static rec_t r;
  bt_cron_t minute = parse("0 * * * * *");
  bt_cron_t sec = parse("* * * * * *");
  bt_cronentry_t *e;
  int64_t now = real_us();

  /* forward: the wall clock sits 0.6 s before a minute, then jumps an
   * hour: the minute due fires once (reporting its instant) and the entry
   * is re-armed after the new time, not for every missed minute */
  offset_us = (60 - now / 1000000 % 60) * 1000000 - 600000 -
              now % 1000000;
  bt_crontimer_new(loop, &t);
  bt_crontimer_set_clock(t, fake_clock, NULL);
  memset(&r, 0, sizeof r);
  bt_crontimer_add(t, &minute, NULL, on_fire, &r, &e);
  int64_t first = bt_crontimer_next(t, e);
  run_for(loop, 1000);
  ok(r.fires == 1 && r.fire[0] == first, "fires at the minute");
  offset_us += INT64_C(3600) * 1000000;
  run_for(loop, 1200);
  ok(r.fires == 2 && r.fire[1] == first + 60000,
     "a forward step of an hour: the minute due fires once, late");
  ok(bt_crontimer_next(t, e) > fake_clock(NULL) / 1000,
     "re-armed after the new time");
  bt_crontimer_close(t);
  uv_run(loop, UV_RUN_NOWAIT);

  /* small step back: instants already fired do not fire again */
  offset_us = 0;
  bt_crontimer_new(loop, &t);
  bt_crontimer_set_clock(t, fake_clock, NULL);
  memset(&r, 0, sizeof r);
  bt_crontimer_add(t, &sec, NULL, on_fire, &r, NULL);
  run_for(loop, 1500);
  int before = r.fires;
  offset_us = -2000000;                 /* 2 s back */
  run_for(loop, 3600);
  int dup = 0;
  for (int i = 1; i < r.fires && i < 64; i++)
    if (r.fire[i] <= r.fire[i - 1]) dup = 1;
  ok(before >= 1 && !dup, "2 s back: no instant fires twice");
  ok(r.fires >= before + 1 && r.fires <= before + 3,
     "and it resumes when the clock catches up (%d -> %d)", before, r.fires);
  bt_crontimer_close(t);
  uv_run(loop, UV_RUN_NOWAIT);

  /* big step back (a clock correction): recompute from the new time */
  offset_us = 0;
  bt_crontimer_new(loop, &t);
  bt_crontimer_set_clock(t, fake_clock, NULL);
  memset(&r, 0, sizeof r);
  bt_crontimer_add(t, &sec, NULL, on_fire, &r, NULL);
  run_for(loop, 1200);
  before = r.fires;
  offset_us = -INT64_C(5) * 3600 * 1000000;
  run_for(loop, 3200);
  ok(r.fires >= before + 2, "5 h back: fires again within seconds (%d -> %d)",
     before, r.fires);

  ok(r.fires <= 64 && r.fire[r.fires - 1] < real_us() / 1000 - 3600 * 1000,
     "at the corrected clock's instants");
  bt_crontimer_close(t);
  uv_run(loop, UV_RUN_NOWAIT);
  offset_us = 0;
}

/* Many entries added and removed in a scrambled order: the heap stays
 * consistent (next() of every remaining entry, and the earliest fires
 * first). */
static void nop(bt_cronentry_t *e, int64_t f, int64_t n, void *d) {
  (void)e; (void)f; (void)n; (void)d;
}

static void test_many(uv_loop_t *loop) {
  enum { N = 20000 };
  static bt_cronentry_t *e[N];
  static const char *exprs[] = { "0 0 * * *", "*/5 * * * *", "0 12 1 * *",
                                 "30 2 * * *", "15 * * * * *", "@every 7s" };
  bt_cron_t c[6];
  bt_crontimer_t *t;
  const bt_tz_t *ny;
  bt_tz_load("America/New_York", &ny);
  for (int i = 0; i < 6; i++) c[i] = parse(exprs[i]);
  bt_crontimer_new(loop, &t);
  for (int i = 0; i < N; i++)
    bt_crontimer_add(t, &c[i % 6], i % 2 ? ny : NULL, nop, NULL, &e[i]);
  srand(7);
  for (int i = 0; i < N; i++) {          /* remove half, at random */
    int j = rand() % N;
    if (e[j]) {
      bt_crontimer_remove(t, e[j]);
      e[j] = NULL;
    }
  }
  size_t left = 0;
  int good = 1;
  int64_t now = real_us() / 1000;
  for (int i = 0; i < N; i++) {
    if (!e[i]) continue;
    left++;
    int64_t n = bt_crontimer_next(t, e[i]);
    if (n <= now - 10 || n > now + 32LL * 86400 * 1000) good = 0;
  }
  ok(left == bt_crontimer_count(t) && left > N / 4, "count after removals "
     "(%zu)", left);
  ok(good, "every remaining entry has a sane next instant");
  bt_crontimer_close(t);
  uv_run(loop, UV_RUN_NOWAIT);
}

int main(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  uv_timer_init(&loop, &stopper);
  uv_unref((uv_handle_t *)&stopper);
  test_fire(&loop);
  test_remove_close(&loop);
  test_every(&loop);
  test_steps(&loop);
  test_many(&loop);
  uv_close((uv_handle_t *)&stopper, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  ok(uv_loop_close(&loop) == 0, "every handle closed");
  bt_tz_cache_free();
  printf("1..%d\n", ntest);
  return nfail != 0;
}
