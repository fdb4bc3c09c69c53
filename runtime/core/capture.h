/*
 * A run's captured output: what the programs a worker's run starts print
 * (baton.exec and baton.spawn, runtime/lua/lua_exec.c), cut into lines and
 * queued for the worker (baton._output_capture, runtime/lua/lua_worker.c),
 * which stores them with the rest of the run's output. So a program that
 * prints a megabyte a second costs the loop a memchr and a malloc per
 * line, and memory up to the cap.
 *
 * A capture keeps at most cap bytes of text: the oldest lines are dropped
 * and counted. A tap cuts one stream of one program into lines. A line
 * longer than BT_CAPTURE_LINE_MAX is queued in pieces of that size, each
 * but the last marked cont, all with the number of their tap: the worker
 * joins them again to redact its secrets before it cuts the line for good
 * (a secret is never stored in two halves). A cont piece of a tap is always
 * followed by another piece of the same tap (its end is queued when the
 * stream ends), unless the capture drops it or is closed.
 *
 * One capture at a time is installed in a process (the worker's current
 * run's); a tap started while one is installed feeds it. A capture is
 * counted: one reference for its opener, one while it is installed, one
 * per tap; the last one frees it. Everything runs on the loop's thread.
 */
#ifndef BATON_CAPTURE_H
#define BATON_CAPTURE_H

#include <stddef.h>

#define BT_CAPTURE_LINE_MAX 4096    /* longer lines are cut */

typedef struct bt_capture_s bt_capture_t;

/* A queued line, or a piece of one (cont). */
typedef struct bt_capture_line_s {
  struct bt_capture_line_s *next;
  double t;               /* wall clock, epoch seconds, when it was complete */
  size_t len;             /* of the text */
  double tap;             /* the tap's number */
  int is_err;             /* from stderr */
  int cont;               /* a piece of a longer line: more of it follows */
  char *text;             /* points into data: cmd NUL text NUL */
  char data[];            /* starts with the program's name (cmd) */
} bt_capture_line_t;

/* One stream of one program, embedded in the caller's state. */
typedef struct {
  bt_capture_t *c;        /* NULL: not tapped (or ended) */
  double id;              /* its number, unique in the process */
  int is_err;
  const char *cmd;        /* argv[0]; owned by the caller, outlives the tap */
  size_t len;
  char part[BT_CAPTURE_LINE_MAX];
} bt_capture_tap_t;

/** Makes a capture that keeps at most cap bytes of text and installs it in
 * place of the installed one (which keeps its other references). Sets *out;
 * the caller holds one reference, given back by bt_capture_close. Returns 0
 * or BT_ENOMEM. */
int bt_capture_open(size_t cap, bt_capture_t **out);

/** Whether a capture is installed: taps started now feed it. */
int bt_capture_installed(void);

/** Takes every queued line, oldest first, as a list whose lines the caller
 * frees one by one with free(), and sets *dropped to the number of lines
 * dropped since the last take; both start again from none. NULL when no
 * line is queued. */
bt_capture_line_t *bt_capture_take(bt_capture_t *c, double *dropped);

/** Drops the caller's reference: no more lines are kept (the queued ones
 * go), and the capture is no longer installed. Its taps end on their own. */
void bt_capture_close(bt_capture_t *c);

/** Starts a tap of one stream (is_err: stderr) of program cmd into the
 * installed capture, if there is one and want is true; else the tap does
 * nothing. */
void bt_capture_tap_init(bt_capture_tap_t *t, const char *cmd, int is_err, int want);

/** Cuts n bytes of the stream into lines for the capture. */
void bt_capture_tap_feed(bt_capture_tap_t *t, const char *p, size_t n);

/** The stream ended: an unfinished last line is queued, the capture let go.
 * Safe to call again. */
void bt_capture_tap_end(bt_capture_tap_t *t);

#endif
