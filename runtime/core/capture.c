/*
 * A run's captured output: see capture.h.
 */
#include "capture.h"

#include "err.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct bt_capture_s {
  int refs;
  int closed;             /* no more lines are kept */
  size_t cap, bytes;      /* bytes: text of the queued lines */
  bt_capture_line_t *head, *tail;
  double dropped;         /* lines dropped since the last take */
};

static bt_capture_t *installed;   /* one per process, or NULL */
static double tap_seq;            /* the last tap's number */

static void clear(bt_capture_t *c) {
  bt_capture_line_t *l = c->head, *n;
  for (; l; l = n) {
    n = l->next;
    free(l);
  }
  c->head = c->tail = NULL;
  c->bytes = 0;
}

static void unref(bt_capture_t *c) {
  if (--c->refs > 0) return;
  clear(c);
  free(c);
}

int bt_capture_open(size_t cap, bt_capture_t **out) {
  bt_capture_t *c = calloc(1, sizeof(*c));
  if (!c) return BT_ENOMEM;
  c->cap = cap;
  c->refs = 2;            /* the opener, the installation */
  if (installed) unref(installed);
  installed = c;
  *out = c;
  return 0;
}

int bt_capture_installed(void) {
  return installed != NULL;
}

bt_capture_line_t *bt_capture_take(bt_capture_t *c, double *dropped) {
  bt_capture_line_t *l = c->head;
  c->head = c->tail = NULL;
  c->bytes = 0;
  *dropped = c->dropped;
  c->dropped = 0;
  return l;
}

void bt_capture_close(bt_capture_t *c) {
  c->closed = 1;
  clear(c);
  if (installed == c) {
    installed = NULL;
    c->refs--;            /* the installation's; the opener's goes below */
  }
  unref(c);
}

/* Queues one line of tap t (without its newline), or a piece of one (cont),
 * dropping the oldest lines while the text kept would pass the cap. */
static void push(const bt_capture_tap_t *t, const char *text, size_t len, int cont) {
  bt_capture_t *c = t->c;
  size_t clen = strlen(t->cmd);
  struct timespec ts;
  bt_capture_line_t *l;
  if (c->closed) return;
  while (c->head && c->bytes + len > c->cap) {
    bt_capture_line_t *h = c->head;
    c->head = h->next;
    if (!c->head) c->tail = NULL;
    c->bytes -= h->len;
    c->dropped++;
    free(h);
  }
  l = malloc(sizeof(*l) + clen + len + 2);
  if (!l) {
    c->dropped++;
    return;
  }
  clock_gettime(CLOCK_REALTIME, &ts);
  l->t = (double) ts.tv_sec + ts.tv_nsec / 1e9;
  l->next = NULL;
  l->len = len;
  l->tap = t->id;
  l->is_err = t->is_err;
  l->cont = cont;
  memcpy(l->data, t->cmd, clen + 1);
  l->text = l->data + clen + 1;
  memcpy(l->text, text, len);
  l->text[len] = '\0';
  if (c->tail) c->tail->next = l;
  else c->head = l;
  c->tail = l;
  c->bytes += len;
}

void bt_capture_tap_init(bt_capture_tap_t *t, const char *cmd, int is_err, int want) {
  t->c = want ? installed : NULL;
  t->id = ++tap_seq;
  t->is_err = is_err;
  t->cmd = cmd;
  t->len = 0;
  if (t->c) t->c->refs++;
}

void bt_capture_tap_feed(bt_capture_tap_t *t, const char *p, size_t n) {
  if (!t->c) return;
  while (n > 0) {
    const char *nl = memchr(p, '\n', n);
    size_t take = nl ? (size_t) (nl - p) : n;
    if (t->len + take > BT_CAPTURE_LINE_MAX) {
      size_t room = BT_CAPTURE_LINE_MAX - t->len;
      memcpy(t->part + t->len, p, room);
      push(t, t->part, BT_CAPTURE_LINE_MAX, 1);
      t->len = 0;
      p += room;
      n -= room;
      continue;
    }
    memcpy(t->part + t->len, p, take);
    t->len += take;
    if (!nl) return;
    push(t, t->part, t->len, 0);
    t->len = 0;
    p = nl + 1;
    n -= take + 1;
  }
}

void bt_capture_tap_end(bt_capture_tap_t *t) {
  if (!t->c) return;
  if (t->len > 0) push(t, t->part, t->len, 0);
  t->len = 0;
  unref(t->c);
  t->c = NULL;
}
