/*
 * How a program ended, in words: see exit_text.h.
 */
#include "exit_text.h"

#include <stdio.h>
#include <string.h>

static int is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* The tail of a program's stderr (exit_text.h) into out (size at least
 * BT_EXIT_TEXT_TAIL_BYTES + 8). Returns the length (0: the program wrote
 * nothing but blanks). */
static size_t stderr_tail(const char *p, size_t len, char *out) {
  size_t starts[BT_EXIT_TEXT_TAIL_LINES], ends[BT_EXIT_TEXT_TAIL_LINES];
  size_t nl = 0, keep = 0, total = 0, i = len, o = 0, k;
  /* the last lines, newest first: [starts[k], ends[k]) */
  while (nl < BT_EXIT_TEXT_TAIL_LINES) {
    while (i > 0 && is_space(p[i - 1])) i--;
    if (i == 0) break;
    ends[nl] = i;
    while (i > 0 && p[i - 1] != '\n') i--;
    starts[nl] = i;
    while (is_space(p[starts[nl]])) starts[nl]++;
    nl++;
  }
  if (nl == 0) return 0;
  /* the newest of them that fit, with a " | " between two */
  while (keep < nl) {
    size_t add = ends[keep] - starts[keep] + (keep ? 3 : 0);
    if (total + add > BT_EXIT_TEXT_TAIL_BYTES) break;
    total += add;
    keep++;
  }
  if (keep == 0) {
    /* the last line alone is too long: its end, from a word's start */
    size_t s = ends[0] - (BT_EXIT_TEXT_TAIL_BYTES - 3);
    for (k = s; k < ends[0] && !is_space(p[k]); k++) {}
    if (k < ends[0]) s = k + 1;
    else while (s < ends[0] && ((unsigned char) p[s] & 0xc0) == 0x80) s++;
    memcpy(out, "...", 3);
    memcpy(out + 3, p + s, ends[0] - s);
    return 3 + ends[0] - s;
  }
  if (keep < nl) {
    memcpy(out, "... | ", 6);
    o = 6;
  }
  for (k = keep; k-- > 0;) {
    memcpy(out + o, p + starts[k], ends[k] - starts[k]);
    o += ends[k] - starts[k];
    if (k > 0) {
      memcpy(out + o, " | ", 3);
      o += 3;
    }
  }
  return o;
}

void bt_exit_text(char *msg, size_t size, int64_t status, int term_sig,
                  const char *signame, const char *err, size_t errlen) {
  char tail[BT_EXIT_TEXT_TAIL_BYTES + 8];
  size_t tlen = stderr_tail(err, errlen, tail);
  int n;
  if (term_sig)
    n = snprintf(msg, size, "was killed by signal %d%s%s%s", term_sig, signame ? " (" : "",
                 signame ? signame : "", signame ? ")" : "");
  else
    n = snprintf(msg, size, "exited with status %d", (int) status);
  if (n < 0 || (size_t) n + 2 + tlen >= size) return;
  memcpy(msg + n, ": ", 2);
  memcpy(msg + n + 2, tail, tlen);
  msg[n + 2 + tlen] = '\0';
  if (tlen == 0) msg[n] = '\0';
}
