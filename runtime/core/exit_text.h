/*
 * How a program ended, in words, for an error message: what baton.exec's
 * check says after the program's name (runtime/lua/lua_exec.c), and what a
 * command job's failure says (baton._exit_text, runtime/lua/lua_worker.c;
 * the worker redacts stderr's secrets before it is cut here).
 */
#ifndef BATON_EXIT_TEXT_H
#define BATON_EXIT_TEXT_H

#include <stddef.h>
#include <stdint.h>

#define BT_EXIT_TEXT_TAIL_LINES 5      /* of stderr, at most */
#define BT_EXIT_TEXT_TAIL_BYTES 1024   /* of those lines, at most */
/* A buffer of this size holds any text (and a program's name before it). */
#define BT_EXIT_TEXT_MAX (BT_EXIT_TEXT_TAIL_BYTES + 100)

/** Writes into msg (size bytes, BT_EXIT_TEXT_MAX for the whole text) how a
 * program ended: "exited with status 3: <stderr's tail>" or "was killed by
 * signal 9 (SIGKILL): <stderr's tail>" (signame: the signal's name, or
 * NULL for none), without the tail when err (errlen bytes) holds nothing
 * but blanks.
 *
 * The tail is stderr's last BT_EXIT_TEXT_TAIL_LINES non-empty lines,
 * blanks around them removed, joined by " | ": the newest of them that fit
 * in BT_EXIT_TEXT_TAIL_BYTES, after "... | " when some did not. When the
 * last line alone does not fit, its end is shown after "...", starting
 * after the first blank past the cut (so that no word, a secret perhaps, is
 * shown cut in two). */
void bt_exit_text(char *msg, size_t size, int64_t status, int term_sig,
                  const char *signame, const char *err, size_t errlen);

#endif
