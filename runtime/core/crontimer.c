/*
 * Timer engine: two min-heaps (cron entries keyed by wall-clock instant,
 * @every entries keyed by monotonic time) behind one uv_timer_t. See
 * crontimer.h for the rules.
 */
#include "crontimer.h"
#include "err.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define US 1000000
#define MAX_SLEEP_US US                 /* wake at least once a second */
#define BIG_STEP_US (INT64_C(3) * 3600 * US)
#define NOT_ARMED ((size_t)-1)

typedef struct {
  int64_t key;                          /* microseconds */
  bt_cronentry_t *e;
} hnode_t;

typedef struct {
  hnode_t *v;
  size_t n, cap;
} heap_t;

struct bt_cronentry_s {
  bt_cron_t cron;
  const bt_tz_t *tz;
  bt_crontimer_cb cb;
  void *data;
  heap_t *heap;                         /* &t->wall, &t->mono or NULL */
  size_t idx;
  bt_cronentry_t *prev, *next;          /* all entries */
};

struct bt_crontimer_s {
  uv_loop_t *loop;
  uv_timer_t timer;
  heap_t wall, mono;
  bt_cronentry_t *all;
  size_t count;
  bt_crontimer_clock_fn clock;
  void *clock_arg;
  int64_t skew;                         /* wall - monotonic at last wake */
  int have_skew;
  int in_timer;
  int closing;
};

/* ---- heap -------------------------------------------------------------- */

static void hset(heap_t *h, size_t i, hnode_t x) {
  h->v[i] = x;
  x.e->idx = i;
}

static void sift_up(heap_t *h, size_t i) {
  hnode_t x = h->v[i];
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h->v[p].key <= x.key) break;
    hset(h, i, h->v[p]);
    i = p;
  }
  hset(h, i, x);
}

static void sift_down(heap_t *h, size_t i) {
  hnode_t x = h->v[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && h->v[c + 1].key < h->v[c].key) c++;
    if (x.key <= h->v[c].key) break;
    hset(h, i, h->v[c]);
    i = c;
  }
  hset(h, i, x);
}

static int heap_push(heap_t *h, bt_cronentry_t *e, int64_t key) {
  if (h->n == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 64;
    hnode_t *v = realloc(h->v, cap * sizeof *v);
    if (!v) return BT_ENOMEM;
    h->v = v;
    h->cap = cap;
  }
  e->heap = h;
  hset(h, h->n++, (hnode_t){ key, e });
  sift_up(h, h->n - 1);
  return 0;
}

static void heap_remove(bt_cronentry_t *e) {
  heap_t *h = e->heap;
  size_t i = e->idx;
  if (!h) return;
  e->heap = NULL;
  e->idx = NOT_ARMED;
  if (i == --h->n) return;
  hset(h, i, h->v[h->n]);
  if (i > 0 && h->v[i].key < h->v[(i - 1) / 2].key) sift_up(h, i);
  else sift_down(h, i);
}

/* Changes the key of an armed entry. */
static void heap_update(bt_cronentry_t *e, int64_t key) {
  heap_t *h = e->heap;
  size_t i = e->idx;
  int64_t old = h->v[i].key;
  h->v[i].key = key;
  if (key > old) sift_down(h, i);
  else sift_up(h, i);
}

/* ---- clocks ------------------------------------------------------------ */

static int64_t real_clock(void *arg) {
  struct timespec ts;
  (void)arg;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * US + ts.tv_nsec / 1000;
}

static int64_t wall_us(const bt_crontimer_t *t) {
  return t->clock(t->clock_arg);
}

static int64_t mono_us(void) {
  return (int64_t)(uv_hrtime() / 1000);
}

static int64_t floor_sec(int64_t us) {
  return us >= 0 ? us / US : -((-us + US - 1) / US);
}

/* The key (wall µs) of c's first instant after both `after` seconds and
 * the second of now_us; -1 when there is none. */
static int64_t cron_key(const bt_cronentry_t *e, int64_t after, int64_t now) {
  int64_t base = floor_sec(now), next;
  if (after > base) base = after;
  if (bt_cron_next(&e->cron, e->tz, base, &next) < 0) return -1;
  return next * US;
}

/* ---- arming ------------------------------------------------------------ */

/* The uv timer holds the loop open only while something is armed. */
static void update_ref(bt_crontimer_t *t) {
  if (t->wall.n || t->mono.n) uv_ref((uv_handle_t *)&t->timer);
  else uv_unref((uv_handle_t *)&t->timer);
}


static void on_timer(uv_timer_t *h);

/* Arms the uv timer for the earliest entry (at most a second away while
 * wall entries exist, to notice clock steps). */
static void arm(bt_crontimer_t *t) {
  int64_t d = INT64_MAX;
  if (t->closing || t->in_timer) return;
  if (t->wall.n) {
    d = t->wall.v[0].key - wall_us(t);
    if (d > MAX_SLEEP_US) d = MAX_SLEEP_US;
  }
  if (t->mono.n && t->mono.v[0].key - mono_us() < d)
    d = t->mono.v[0].key - mono_us();
  if (d == INT64_MAX) {
    uv_timer_stop(&t->timer);
    return;
  }
  /* Rounded down: libuv's millisecond clock would otherwise add up to a
   * millisecond of lateness; a wake-up a fraction early polls again. */
  uv_update_time(t->loop);
  uv_timer_start(&t->timer, on_timer, d <= 0 ? 0 : (uint64_t)d / 1000, 0);
}

/* Recomputes every cron entry from the wall clock's current time. */
static void recompute(bt_crontimer_t *t) {
  int64_t now = wall_us(t);
  heap_t *h = &t->wall;
  for (size_t i = 0; i < h->n;) {
    bt_cronentry_t *e = h->v[i].e;
    int64_t k = cron_key(e, INT64_MIN, now);
    if (k < 0) {                        /* no instant left: disarm */
      e->heap = NULL;
      e->idx = NOT_ARMED;
      if (i != --h->n) hset(h, i, h->v[h->n]);
      continue;
    }
    h->v[i].key = k;
    i++;
  }
  for (size_t i = h->n / 2; i-- > 0;) sift_down(h, i);
  update_ref(t);
}

/* The uv timer fired: notice clock steps, then run every due entry. Each
 * entry is re-armed before its callback, which may remove entries or
 * close the engine. */
static void on_timer(uv_timer_t *handle) {
  bt_crontimer_t *t = handle->data;
  int64_t now_w = wall_us(t), now_m = mono_us();
  int64_t skew = now_w - now_m;
  if (t->have_skew && skew - t->skew < -BIG_STEP_US) recompute(t);
  t->skew = skew;
  t->have_skew = 1;
  t->in_timer = 1;
  /* Entries with the same schedule due at the same instant (thousands of
   * jobs on "* * * * *") share one bt_cron_next() call. */
  bt_cron_t prev;                       /* a copy: callbacks free entries */
  const bt_tz_t *prev_tz = NULL;
  int64_t prev_fire = 0, prev_k = 0;
  while (!t->closing && t->wall.n && t->wall.v[0].key <= now_w) {
    bt_cronentry_t *e = t->wall.v[0].e;
    int64_t fire = t->wall.v[0].key, k;
    if (prev_tz && prev_fire == fire && prev_tz == e->tz &&
        !memcmp(&prev, &e->cron, sizeof prev)) {
      k = prev_k;
    } else {
      k = cron_key(e, floor_sec(fire), now_w);
      memcpy(&prev, &e->cron, sizeof prev);
      prev_tz = e->tz;
      prev_fire = fire;
      prev_k = k;
    }
    if (k < 0) heap_remove(e);
    else heap_update(e, k);
    e->cb(e, fire / 1000, now_w / 1000, e->data);
  }
  while (!t->closing && t->mono.n && t->mono.v[0].key <= now_m) {
    bt_cronentry_t *e = t->mono.v[0].e;
    int64_t due = t->mono.v[0].key, every = e->cron.every * US;
    int64_t k = due + every;
    if (k <= now_m) k += ((now_m - k) / every + 1) * every;
    heap_update(e, k);
    e->cb(e, (now_w - (now_m - due)) / 1000, now_w / 1000, e->data);
  }
  t->in_timer = 0;
  if (!t->closing) update_ref(t);
  arm(t);
}

/* ---- API --------------------------------------------------------------- */

int bt_crontimer_new(uv_loop_t *loop, bt_crontimer_t **out) {
  bt_crontimer_t *t = calloc(1, sizeof *t);
  int rc;
  if (!t) return BT_ENOMEM;
  t->loop = loop;
  t->clock = real_clock;
  if ((rc = uv_timer_init(loop, &t->timer)) < 0) {
    free(t);
    return rc;
  }
  t->timer.data = t;
  uv_unref((uv_handle_t *)&t->timer);   /* armed entries keep it ref'd */
  *out = t;
  return 0;
}

int bt_crontimer_add(bt_crontimer_t *t, const bt_cron_t *c,
                     const bt_tz_t *tz, bt_crontimer_cb cb, void *data,
                     bt_cronentry_t **out) {
  bt_cronentry_t *e;
  int rc = 0;
  if (t->closing) return BT_ECLOSED;
  if (!(e = calloc(1, sizeof *e))) return BT_ENOMEM;
  e->cron = *c;
  e->tz = tz ? tz : bt_tz_utc();
  e->cb = cb;
  e->data = data;
  e->idx = NOT_ARMED;
  if (c->kind == BT_CRON_EVERY) {
    rc = heap_push(&t->mono, e, mono_us() + c->every * US);
  } else if (c->kind == BT_CRON_FIELDS) {
    int64_t k = cron_key(e, INT64_MIN, wall_us(t));
    if (k >= 0) rc = heap_push(&t->wall, e, k);
  }
  if (rc < 0) {
    free(e);
    return rc;
  }
  e->next = t->all;
  if (t->all) t->all->prev = e;
  t->all = e;
  t->count++;
  update_ref(t);
  arm(t);
  if (out) *out = e;
  return 0;
}

void bt_crontimer_remove(bt_crontimer_t *t, bt_cronentry_t *e) {
  heap_remove(e);
  if (e->prev) e->prev->next = e->next;
  else t->all = e->next;
  if (e->next) e->next->prev = e->prev;
  t->count--;
  free(e);
  update_ref(t);
}

int64_t bt_crontimer_next(const bt_crontimer_t *t, const bt_cronentry_t *e) {
  if (!e->heap) return -1;
  if (e->heap == &t->wall) return e->heap->v[e->idx].key / 1000;
  return (wall_us(t) + e->heap->v[e->idx].key - mono_us()) / 1000;
}

size_t bt_crontimer_count(const bt_crontimer_t *t) {
  return t->count;
}

void bt_crontimer_set_clock(bt_crontimer_t *t, bt_crontimer_clock_fn fn,
                            void *arg) {
  t->clock = fn ? fn : real_clock;
  t->clock_arg = fn ? arg : NULL;
  t->have_skew = 0;
  recompute(t);
  arm(t);
}

static void on_close(uv_handle_t *h) {
  free(h->data);
}

void bt_crontimer_close(bt_crontimer_t *t) {
  if (t->closing) return;
  t->closing = 1;
  while (t->all) bt_crontimer_remove(t, t->all);
  free(t->wall.v);
  free(t->mono.v);
  memset(&t->wall, 0, sizeof t->wall);
  memset(&t->mono, 0, sizeof t->mono);
  uv_close((uv_handle_t *)&t->timer, on_close);
}
