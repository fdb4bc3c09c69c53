/*
 * How a program ended, in words (runtime/core/exit_text.c): the status or
 * signal, and the tail of stderr cut to its last lines and bytes without
 * showing a word in two.
 */
#include "exit_text.h"
#include "tap.h"

#include <string.h>

static char msg[BT_EXIT_TEXT_MAX];

static const char *text(int64_t status, int sig, const char *signame, const char *err) {
  bt_exit_text(msg, sizeof msg, status, sig, signame, err, strlen(err));
  return msg;
}

int main(void) {
  char big[3000];
  is_str(text(3, 0, NULL, ""), "exited with status 3", "a status, no stderr");
  is_str(text(1, 0, NULL, " \n\t\n"), "exited with status 1", "blanks are no tail");
  is_str(text(0, 9, "SIGKILL", "boom\n"), "was killed by signal 9 (SIGKILL): boom", "a signal by name");
  is_str(text(0, 64, NULL, ""), "was killed by signal 64", "a signal without a name");
  is_str(text(2, 0, NULL, "  a  \n\nb\n"), "exited with status 2: a | b",
         "non-empty lines, trimmed, joined");
  is_str(text(2, 0, NULL, "1\n2\n3\n4\n5\n6\n7\n"), "exited with status 2: 3 | 4 | 5 | 6 | 7",
         "the last five lines");
  /* five lines of 300 bytes: the newest three fit in 1024 */
  memset(big, 'x', 1505);
  for (int i = 300; i < 1505; i += 301) big[i] = '\n';
  big[1505] = '\0';
  text(2, 0, NULL, big);
  ok(!strncmp(msg, "exited with status 2: ... | xxx", 31) && strlen(msg) == 22 + 6 + 3 * 300 + 2 * 3,
     "lines that do not fit in the bytes: the newest that do, and a mark");
  /* one line too long: its end, from the first word that starts after the cut */
  memset(big, 'a', sizeof big);
  memcpy(big + 2000, " secret-word", 12);
  big[sizeof big - 1] = '\0';
  text(1, 0, NULL, big);
  ok(!strncmp(msg, "exited with status 1: ...", 25) && !strcmp(msg + 25, big + 2001),
     "a long last line: its end, marked, from the first word after the cut");
  ok(strlen(msg + 25) <= BT_EXIT_TEXT_TAIL_BYTES, "within the limit");
  /* a small buffer is not overrun */
  bt_exit_text(msg, 16, 3, 0, NULL, "tail", 4);
  ok(strlen(msg) < 16, "a small buffer is not overrun");
  return tap_done();
}
