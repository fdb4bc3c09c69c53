/*
 * NUL bytes in JSON text, for cJSON (see jsonnul.h): exactly, then
 * replaced.
 */
#define _GNU_SOURCE /* memmem */
#include "jsonnul.h"
#include "err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* True when JSON text s holds the escape \uXXXX of hex (4 lowercase digits),
 * in either case. A backslash escaped by another is not an escape. */
static int has_escape(const char *s, size_t n, const char *hex) {
  size_t i;
  for (i = 0; i + 1 < n; i++) {
    if (s[i] != '\\') continue;
    if (s[i + 1] == 'u' && n - i >= 6 && strncasecmp(s + i + 2, hex, 4) == 0) return 1;
    i++; /* (the escaped byte) */
  }
  return 0;
}

int bt_json_nul_prepare(const char *s, size_t n, char **out, char mark[4], size_t *at) {
  const char *raw = memchr(s, '\0', n);
  char hex[5];
  unsigned cp;
  size_t i;
  char *copy;

  *out = NULL;
  if (raw) {
    *at = (size_t) (raw - s);
    return BT_EINVAL;
  }
  if (!has_escape(s, n, "0000")) return 0;
  for (cp = 0xe000; cp <= 0xf8ff; cp++) {
    mark[0] = (char) (0xe0 | (cp >> 12));
    mark[1] = (char) (0x80 | ((cp >> 6) & 0x3f));
    mark[2] = (char) (0x80 | (cp & 0x3f));
    mark[3] = '\0';
    snprintf(hex, sizeof(hex), "%04x", cp);
    if (!memmem(s, n, mark, 3) && !has_escape(s, n, hex)) break;
  }
  if (cp > 0xf8ff) return BT_ENOTSUP;
  copy = malloc(n);
  if (!copy) return BT_ENOMEM;
  memcpy(copy, s, n);
  for (i = 0; i + 1 < n; i++) {
    if (copy[i] != '\\') continue;
    if (copy[i + 1] == 'u' && n - i >= 6 && memcmp(copy + i + 2, "0000", 4) == 0)
      memcpy(copy + i + 2, hex, 4);
    i++;
  }
  *out = copy;
  return 0;
}

size_t bt_json_nul_restore(char *s, const char mark[4]) {
  char *r = s, *w = s, *p;
  while ((p = strstr(r, mark))) {
    size_t k = (size_t) (p - r);
    memmove(w, r, k);
    w += k;
    *w++ = '\0';
    r = p + 3;
  }
  {
    size_t k = strlen(r);
    memmove(w, r, k + 1);
    w += k;
  }
  return (size_t) (w - s);
}

/* ---- replaced ---------------------------------------------------------- */

/* Whether s[i..n) starts with the escape \u0000 (s[i] is a backslash). */
static int nul_escape(const char *s, size_t n, size_t i) {
  return n - i >= 6 && memcmp(s + i + 1, "u0000", 5) == 0;
}

size_t bt_json_nul_at(const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (s[i] == '\0') return i;
    if (s[i] == '\\') {
      if (nul_escape(s, n, i)) return i;
      /* an escape pair: "\\" is one backslash, never the start of another */
      i += i + 1 < n && s[i + 1] != '\0' ? 2 : 1;
      continue;
    }
    i++;
  }
  return n;
}

size_t bt_json_nul_fix(const char *s, size_t n, char *out) {
  size_t i = 0, o = 0;
  while (i < n) {
    if (s[i] == '\0') {
      memcpy(out + o, BT_JSON_NUL_UTF8, 3);
      o += 3;
      i++;
    } else if (s[i] == '\\' && nul_escape(s, n, i)) {
      memcpy(out + o, "\\uFFFD", 6);
      o += 6;
      i += 6;
    } else if (s[i] == '\\' && i + 1 < n && s[i + 1] != '\0') {
      out[o++] = s[i++];
      out[o++] = s[i++];
    } else {
      out[o++] = s[i++];
    }
  }
  return o;
}

size_t bt_json_nul_replace(const char *s, size_t n, char *out) {
  size_t i, o = 0;
  for (i = 0; i < n; i++) {
    if (s[i] == '\0') {
      memcpy(out + o, BT_JSON_NUL_UTF8, 3);
      o += 3;
    } else {
      out[o++] = s[i];
    }
  }
  out[o] = '\0';
  return o;
}
