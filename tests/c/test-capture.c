/*
 * The capture engine (runtime/core/capture.c) without a Lua state: lines
 * cut by a tap, the cap and the count of dropped lines, long lines in
 * pieces, a capture replaced or closed while its taps still run.
 */
#include "capture.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

/* Takes every line of c: their texts joined by '|' into out, the count. */
static int take(bt_capture_t *c, char *out, size_t size, double *dropped) {
  bt_capture_line_t *l = bt_capture_take(c, dropped), *n;
  int count = 0;
  out[0] = '\0';
  for (; l; l = n) {
    n = l->next;
    if (count++) strncat(out, "|", size - strlen(out) - 1);
    strncat(out, l->text, size - strlen(out) - 1);
    free(l);
  }
  return count;
}

int main(void) {
  bt_capture_t *c, *c2;
  bt_capture_tap_t out, err, none;
  bt_capture_line_t *l;
  char got[20000];
  double dropped;
  static char big[9000];

  /* lines of two streams; an unfinished line waits for the stream's end */
  ok(!bt_capture_installed(), "no capture at first");
  bt_capture_tap_init(&none, "before", 0, 1);
  ok(bt_capture_open(1000, &c) == 0 && bt_capture_installed(), "a capture, installed");
  bt_capture_tap_init(&out, "prog", 0, 1);
  bt_capture_tap_init(&err, "prog", 1, 1);
  bt_capture_tap_feed(&out, "a\nb", 3);
  bt_capture_tap_feed(&err, "e1\n", 3);
  bt_capture_tap_feed(&out, "c\n", 2);
  bt_capture_tap_feed(&none, "nothing\n", 8);
  is_int(take(c, got, sizeof got, &dropped), 3, "three whole lines");
  is_str(got, "a|e1|bc", "in the order they were complete; a tap started before it is not in");
  is_int(dropped, 0, "none dropped");
  is_int(take(c, got, sizeof got, &dropped), 0, "nothing more to take");
  bt_capture_tap_feed(&out, "tail", 4);
  bt_capture_tap_end(&out);
  bt_capture_tap_end(&out);
  l = bt_capture_take(c, &dropped);
  ok(l && !strcmp(l->text, "tail") && !strcmp(l->data, "prog") && !l->is_err && !l->cont,
     "the end of a stream queues its unfinished line, with the program's name");
  free(l);

  /* the cap: the oldest lines go, counted */
  bt_capture_tap_init(&out, "prog", 0, 1);
  memset(big, 'x', 300);
  big[300] = '\n';
  for (int i = 0; i < 5; i++) bt_capture_tap_feed(&out, big, 301);
  is_int(take(c, got, sizeof got, &dropped), 3, "1000 bytes of cap keep three 300-byte lines");
  is_int(dropped, 2, "and count the two dropped");

  /* a long line in pieces */
  memset(big, 'y', sizeof big);
  big[sizeof big - 1] = '\n';
  bt_capture_close(c);
  ok(bt_capture_open(100000, &c) == 0, "a larger capture");
  bt_capture_tap_end(&out);   /* (its taps still held the closed one) */
  bt_capture_tap_end(&err);
  bt_capture_tap_init(&out, "prog", 0, 1);
  bt_capture_tap_feed(&out, big, sizeof big);
  l = bt_capture_take(c, &dropped);
  ok(l && l->len == BT_CAPTURE_LINE_MAX && l->cont && l->next && l->next->cont &&
     l->next->next && l->next->next->len == sizeof big - 1 - 2 * BT_CAPTURE_LINE_MAX &&
     !l->next->next->cont && l->tap == l->next->next->tap,
     "a 8999-byte line: two full pieces marked cont, then its end, one tap");
  while (l) {
    bt_capture_line_t *n = l->next;
    free(l);
    l = n;
  }

  /* replaced: the old one keeps its taps' lines, new taps feed the new one */
  ok(bt_capture_open(1000, &c2) == 0, "a second capture replaces the first");
  bt_capture_tap_init(&err, "other", 1, 1);
  bt_capture_tap_feed(&out, "old\n", 4);
  bt_capture_tap_feed(&err, "new\n", 4);
  take(c, got, sizeof got, &dropped);
  is_str(got, "old", "a tap started before goes on feeding the first");
  take(c2, got, sizeof got, &dropped);
  is_str(got, "new", "a tap started after feeds the second");

  /* closed with taps still running: they feed nothing and free it last */
  bt_capture_close(c2);
  ok(!bt_capture_installed(), "closed: no longer installed");
  bt_capture_tap_feed(&err, "late\n", 5);
  bt_capture_tap_end(&err);
  bt_capture_close(c);
  bt_capture_tap_feed(&out, "late\n", 5);
  bt_capture_tap_end(&out);
  bt_capture_tap_end(&none);
  ok(1, "taps outlive their closed captures (ASan: no use after free, no leak)");

  return tap_done();
}
