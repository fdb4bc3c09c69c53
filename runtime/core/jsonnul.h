/*
 * NUL bytes in JSON text, for cJSON, which keeps its strings NUL-terminated:
 * a string that holds a NUL cannot be printed, and one that JSON text spells
 * with \u0000 would be cut there when parsed. Two ways around it, both used
 * by baton.json (runtime/lua/lua_json.c):
 *
 *   exact: before a parse, each \u0000 escape is written as the escape of a
 *   private-use character the text does not hold (the mark); after it, the
 *   mark is read back as a NUL in each string (bt_json_nul_prepare, _restore).
 *
 *     char *copy, mark[4];
 *     size_t at;
 *     int rc = bt_json_nul_prepare(s, n, &copy, mark, &at);
 *     cJSON *j = cJSON_ParseWithLengthOpts(copy ? copy : s, n, NULL, 0);
 *     ... len = copy ? bt_json_nul_restore(str, mark) : strlen(str) ...
 *
 *   Byte offsets in the copy are those of the text (an escape replaces an
 *   escape of the same length), so a parse error names the right byte.
 *
 *   replaced: each NUL, spelled or raw, becomes U+FFFD, the Unicode
 *   replacement character (bt_json_nul_at, _fix, _replace), for records of
 *   what happened, where a marked byte beats a lost record.
 */
#ifndef BATON_JSONNUL_H
#define BATON_JSONNUL_H

#include <stddef.h>

/** Looks at JSON text s (n bytes) before a parse. Returns 0 with *out =
 * NULL when s holds no \u0000 escape (parse s itself); 0 with *out = a
 * copy of n bytes (the caller frees it) in which each \u0000 escape is
 * \uXXXX of a private-use character (U+E000..U+F8FF) that s holds neither
 * as UTF-8 nor as an escape, whose 3 UTF-8 bytes and a NUL are written to
 * mark. BT_EINVAL with *at = the offset of a raw NUL byte in s (JSON
 * escapes a NUL: such a text is invalid); BT_ENOTSUP when s holds every
 * private-use character (a text of 6400 of them or more); BT_ENOMEM. */
int bt_json_nul_prepare(const char *s, size_t n, char **out, char mark[4], size_t *at);

/** Makes each mark (of bt_json_nul_prepare) in the NUL-terminated string s
 * a NUL byte, in place (the string gets shorter), and returns its length
 * in bytes, NUL bytes included. */
size_t bt_json_nul_restore(char *s, const char mark[4]);


/** U+FFFD in UTF-8. */
#define BT_JSON_NUL_UTF8 "\xef\xbf\xbd"

/** The offset in JSON text s (n bytes) of the first NUL a string parsed
 * from it would hold: a raw 0 byte, or the backslash of an escape \u0000
 * (an escaped backslash followed by u0000 is no such escape). n if none. */
size_t bt_json_nul_at(const char *s, size_t n);

/** Writes JSON text s (n bytes) to out with each NUL that bt_json_nul_at
 * finds written as U+FFFD: \u0000 as \uFFFD, a raw 0 byte as its UTF-8.
 * out holds 3 * n bytes at least. Returns the bytes written. */
size_t bt_json_nul_fix(const char *s, size_t n, char *out);

/** Writes the bytes s (n) to out with each 0 byte as the UTF-8 of U+FFFD;
 * out holds 3 * n + 1 bytes at least, and is NUL-terminated. Returns the
 * bytes written, without the terminator. */
size_t bt_json_nul_replace(const char *s, size_t n, char *out);

#endif
