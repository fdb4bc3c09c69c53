/*
 * libFuzzer target for NUL bytes in JSON text (runtime/core/jsonnul.c),
 * which baton.json.decode handles on every text before cJSON parses it
 * (HTTP bodies, etcd values written by anyone): the input is any bytes.
 *
 * The exact pass: bt_json_nul_prepare must either find a raw NUL (at its
 * true place), or give no copy (no \u0000 escape in the text), or a copy
 * of the same length that differs from the text only where a \u0000
 * escape's digits became those of a mark the text does not hold; every
 * string cJSON parses from the copy, restored, must hold no mark and be as
 * long as the parsed string less 2 bytes a mark.
 *
 * The replacing pass: bt_json_nul_at points at a raw 0 byte or at the
 * backslash of an escape \u0000 (or at the end); bt_json_nul_fix leaves
 * text in which it finds none, changes nothing when there was none, grows
 * only by the two extra bytes of each raw 0, and what it leaves parses or
 * fails in cJSON without harm; bt_json_nul_replace leaves no 0 byte.
 *
 * Crashes, sanitizer reports and leaks fail.
 *
 *   make fuzz-json               builds build/fuzz/json_fuzz, runs 10 min
 *   make fuzz-json FUZZ_TIME=60  shorter
 * Failing inputs go to fuzz/regressions/json/ and are replayed, with the
 * seeds of fuzz/corpus/json/, by tests/c/test-json-fuzz.c on `make test`.
 */
#define _GNU_SOURCE /* memmem */
#include "err.h"
#include "jsonnul.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                       \
  do {                                                                 \
    if (!(c)) {                                                        \
      fprintf(stderr, "json_fuzz: check failed: %s (line %d)\n", #c,   \
              __LINE__);                                               \
      abort();                                                         \
    }                                                                  \
  } while (0)

static size_t count_marks(const char *s, const char *mark) {
  size_t k = 0;
  const char *p;
  while ((p = strstr(s, mark))) {
    k++;
    s = p + 3;
  }
  return k;
}

/* Restores every string (and key) of j, checking each. */
static void walk(cJSON *j, const char *mark) {
  cJSON *c;
  if (cJSON_IsString(j) && j->valuestring) {
    size_t before = strlen(j->valuestring), marks = count_marks(j->valuestring, mark);
    size_t len = bt_json_nul_restore(j->valuestring, mark);
    CHECK(len == before - 2 * marks);
    CHECK(!memmem(j->valuestring, len, mark, 3));
  }
  for (c = j->child; c; c = c->next) {
    if (c->string) {
      size_t before = strlen(c->string), marks = count_marks(c->string, mark);
      CHECK(bt_json_nul_restore(c->string, mark) == before - 2 * marks);
    }
    walk(c, mark);
  }
}

/* The exact pass: prepare, parse, restore. */
static void exact_one(const uint8_t *data, size_t size) {
  const char *s = (const char *) data;
  char *copy = NULL, mark[4];
  size_t at = (size_t) -1, i;
  int rc = bt_json_nul_prepare(s, size, &copy, mark, &at);
  cJSON *j;

  if (rc == BT_EINVAL) {
    CHECK(copy == NULL && at < size && s[at] == '\0' && !memchr(s, '\0', at));
    return;
  }
  if (rc == BT_ENOTSUP) {
    CHECK(copy == NULL);
    return;
  }
  CHECK(rc == 0);
  CHECK(!memchr(s, '\0', size));
  if (!copy) return;
  CHECK(strlen(mark) == 3 && !memmem(s, size, mark, 3));
  for (i = 0; i < size; i++) {
    if (copy[i] == s[i]) continue;
    /* a digit of "\u0000" made a digit of the mark's escape */
    CHECK(s[i] == '0' && ((copy[i] >= '0' && copy[i] <= '9') || (copy[i] >= 'a' && copy[i] <= 'f')));
  }
  j = cJSON_ParseWithLengthOpts(copy, size, NULL, 0);
  if (j) {
    walk(j, mark);
    cJSON_Delete(j);
  }
  free(copy);
}

/* The replacing pass: find, fix, replace. */
static void replaced_one(const uint8_t *data, size_t size) {
  const char *s = (const char *) data;
  size_t at = bt_json_nul_at(s, size), zeros = 0, i, n;
  char *out;
  cJSON *j;
  if (at > size) abort();
  if (at < size && s[at] != '\0' &&
      !(s[at] == '\\' && size - at >= 6 && memcmp(s + at + 1, "u0000", 5) == 0))
    abort();
  for (i = 0; i < size; i++) zeros += s[i] == '\0';
  if (!(out = malloc(3 * size + 1))) return;
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
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  exact_one(data, size);
  replaced_one(data, size);
  return 0;
}
