/*
 * libFuzzer target for the NUL scan of JSON text (runtime/core/jsonnul.c),
 * which baton.json.decode runs on every text before cJSON parses it (HTTP
 * bodies, etcd values written by anyone): the input is any bytes.
 *
 * Checks: bt_json_nul_at points at a raw 0 byte or at the backslash of an
 * escape \u0000 (or at the end); bt_json_nul_fix leaves text in which it
 * finds none, changes nothing when there was none, grows only by the two
 * extra bytes of each raw 0, and what it leaves parses or fails in cJSON
 * without harm (the tree printed again); bt_json_nul_replace leaves no 0
 * byte. Crashes, sanitizer reports and leaks fail.
 *
 *   make fuzz-json               builds build/fuzz/json_fuzz, runs 10 min
 * Inputs it fails on go to fuzz/regressions/json/ and are replayed, with the
 * seeds of fuzz/corpus/json/, by tests/c/test-json-fuzz.c on `make test`.
 */
#include "jsonnul.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *s = (const char *) data;
  size_t at = bt_json_nul_at(s, size), zeros = 0, i, n;
  char *out;
  cJSON *j;
  if (at > size) abort();
  if (at < size && s[at] != '\0' &&
      !(s[at] == '\\' && size - at >= 6 && memcmp(s + at + 1, "u0000", 5) == 0))
    abort();
  for (i = 0; i < size; i++) zeros += s[i] == '\0';
  if (!(out = malloc(3 * size + 1))) return 0;
  n = bt_json_nul_fix(s, size, out);
  if (n != size + 2 * zeros || n > 3 * size) abort();
  if (bt_json_nul_at(out, n) != n) abort();
  if (at == size && memcmp(out, s, size) != 0) abort();
  if ((j = cJSON_ParseWithLengthOpts(out, n, NULL, 0))) {
    char *p = cJSON_PrintUnformatted(j);
    free(p);
    cJSON_Delete(j);
  }
  n = bt_json_nul_replace(s, size, out);
  if (n != size + 2 * zeros || memchr(out, '\0', n) || out[n] != '\0') abort();
  free(out);
  return 0;
}
