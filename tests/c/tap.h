/* A few TAP macros for the C unit tests (header-only). */
#ifndef BATON_TEST_TAP_H
#define BATON_TEST_TAP_H

#include <stdio.h>
#include <string.h>

static int tap_n, tap_failed;

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is_int(got, exp, ...) do { \
    long long g_ = (long long) (got), e_ = (long long) (exp); \
    if (!ok(g_ == e_, __VA_ARGS__)) \
      printf("#      got: %lld\n# expected: %lld\n", g_, e_); \
  } while (0)
#define is_str(got, exp, ...) do { \
    const char *g_ = (got), *e_ = (exp); \
    if (!ok(g_ && e_ && strcmp(g_, e_) == 0, __VA_ARGS__)) \
      printf("#      got: \"%s\"\n# expected: \"%s\"\n", g_ ? g_ : "(null)", e_); \
  } while (0)

static int tap_ok(int cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#include <stdarg.h>
static int tap_ok(int cond, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  tap_n++;
  printf("%sok %d - ", cond ? "" : "not ", tap_n);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  if (!cond) {
    tap_failed++;
    printf("# Failed at %s:%d\n", file, line);
  }
  return cond;
}

static int tap_done(void) {
  printf("1..%d\n", tap_n);
  return tap_failed ? 1 : 0;
}

#endif
