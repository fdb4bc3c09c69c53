/*
 * NUL bytes in JSON text. cJSON keeps strings NUL-terminated: a string that
 * holds a NUL byte cannot be printed, and one that JSON text spells with a
 * NUL (the escape \u0000, or a raw 0 byte) is cut there when parsed. These
 * find such NULs and write them as U+FFFD (the Unicode replacement
 * character), which baton stores where a NUL cannot go (docs/lua-api.md,
 * baton.json).
 */
#ifndef BATON_JSONNUL_H
#define BATON_JSONNUL_H

#include <stddef.h>

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
