/*
 * JSON text whose strings hold NUL bytes (\u0000), for cJSON, which ends
 * every string it parses at a NUL: before the parse, each \u0000 escape is
 * written as the escape of a private-use character the text does not hold
 * (the mark); after it, the mark is read back as a NUL in each string.
 *
 *   char *copy, mark[4];
 *   size_t at;
 *   int rc = bt_json_nul_prepare(s, n, &copy, mark, &at);
 *   cJSON *j = cJSON_ParseWithLengthOpts(copy ? copy : s, n, NULL, 0);
 *   ... len = copy ? bt_json_nul_restore(str, mark) : strlen(str) ...
 *
 * Byte offsets in the copy are those of the text (an escape replaces an
 * escape of the same length), so a parse error names the right byte.
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

#endif
