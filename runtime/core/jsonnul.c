/* NUL bytes in JSON text: see jsonnul.h. */
#include "jsonnul.h"

#include <string.h>

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
