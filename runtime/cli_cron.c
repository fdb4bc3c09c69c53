/*
 * `baton cron EXPR [--tz ZONE] [-n N] [--from TIME]`: prints the next N
 * instants of a schedule, one per line, RFC 3339 with the zone's offset.
 *
 * Exit status: 0 success (also for @manual, which prints nothing); 1 for an
 * invalid expression or an unknown zone; 2 for a usage error (missing
 * expression, unknown flag, bad -n or --from value).
 */
#include "cli.h"
#include "cron.h"
#include "err.h"
#include "tz.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_N 100000

static const char short_usage[] =
  "baton cron EXPR [--tz ZONE] [-n N] [--from TIME]";
static const char usage[] =
  "usage: baton cron EXPR [--tz ZONE] [-n N] [--from TIME]\n"
  "  prints the next N (default 5) instants of the schedule EXPR in ZONE\n"
  "  (default UTC), after TIME (RFC 3339 or epoch seconds; default now)\n";

/* One line on stderr, exit status 2. */
static int fail_usage(const char *msg, const char *arg) {
  if (arg) fprintf(stderr, "baton: cron: %s \"%s\" (usage: %s)\n", msg, arg,
                   short_usage);
  else fprintf(stderr, "baton: cron: %s (usage: %s)\n", msg, short_usage);
  return 2;
}

/* Reads exactly n digits at *s into *v. */
static int digits(const char **s, int n, int *v) {
  int x = 0;
  for (int i = 0; i < n; i++) {
    if (!isdigit((unsigned char)(*s)[i])) return -1;
    x = x * 10 + ((*s)[i] - '0');
  }
  *s += n;
  *v = x;
  return 0;
}

/* Parses --from: epoch seconds (fraction dropped) or RFC 3339
 * (YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm)); without an offset the time is
 * read on tz's clock. Returns 0 and sets *t, or -1. */
static int parse_time(const char *s, const bt_tz_t *tz, int64_t *t) {
  int y, mo, d, h, mi, sec, oh, om, sign = 0;
  const char *p = s;
  /* -?digits[.digits] is epoch seconds */
  const char *q = s + (*s == '-');
  size_t nd = strspn(q, "0123456789");
  if (nd > 0 && nd <= 12 && (!q[nd] || (q[nd] == '.' &&
      strspn(q + nd + 1, "0123456789") == strlen(q + nd + 1)))) {
    double v = strtod(s, NULL);
    int64_t i = (int64_t)v;
    if (v < (double)BT_TZ_MIN_TIME || v > (double)BT_TZ_MAX_TIME) return -1;
    *t = (double)i > v ? i - 1 : i;
    return 0;
  }
  if (digits(&p, 4, &y) || *p++ != '-' || digits(&p, 2, &mo) ||
      *p++ != '-' || digits(&p, 2, &d) ||
      (*p != 'T' && *p != 't' && *p != ' ') || !*p++ ||
      digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &mi) ||
      *p++ != ':' || digits(&p, 2, &sec))
    return -1;
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p)) return -1;
    while (isdigit((unsigned char)*p)) p++;
  }
  if (*p == 'Z' || *p == 'z') {
    p++;
    oh = om = 0;
    sign = 1;
  } else if (*p == '+' || *p == '-') {
    sign = *p++ == '-' ? -1 : 1;
    if (digits(&p, 2, &oh) || *p++ != ':' || digits(&p, 2, &om) ||
        oh > 23 || om > 59)
      return -1;
  }
  if (*p || y < 1 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 ||
      sec > 60)
    return -1;
  int64_t first = bt_tz_days_from_civil(y, mo, 1);
  int64_t next = mo == 12 ? bt_tz_days_from_civil(y + 1, 1, 1)
                          : bt_tz_days_from_civil(y, mo + 1, 1);
  if (d > next - first) return -1;
  if (sec == 60) sec = 59;              /* a leap second: its minute's end */
  int64_t local = (first + d - 1) * 86400 + h * 3600 + mi * 60 + sec;
  *t = sign ? local - sign * (oh * 3600 + om * 60)
            : bt_tz_local_to_utc(tz, local);
  return 0;
}

int bt_cli_cron(int argc, char **argv) {
  const char *zone = "UTC", *from = NULL, *count = NULL;
  char expr[1100], err[512], line[64];
  size_t elen = 0;
  int nexpr = 0, dashdash = 0;
  long n = 5;
  const bt_tz_t *tz;
  bt_cron_t c;
  int64_t t;
  expr[0] = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char **dst = NULL;
    if (!dashdash && !strcmp(a, "--")) {
      dashdash = 1;
      continue;
    }
    if (!dashdash && (!strcmp(a, "-h") || !strcmp(a, "--help"))) {
      fputs(usage, stdout);
      return 0;
    }
    if (!dashdash && a[0] == '-' && a[1]) {
      size_t k;
      if (!strncmp(a, "--tz", 4)) dst = &zone, k = 4;
      else if (!strncmp(a, "--from", 6)) dst = &from, k = 6;
      else if (!strncmp(a, "-n", 2)) dst = &count, k = 2;
      else return fail_usage("unknown option", a);
      if (a[k] == '=') {
        *dst = a + k + 1;
      } else if (a[k] == 0) {
        if (i + 1 >= argc) return fail_usage("missing value for", a);
        *dst = argv[++i];
      } else if (k == 2) {
        *dst = a + 2;                   /* -n5 */
      } else {
        return fail_usage("unknown option", a);
      }
      continue;
    }
    /* Several words are joined: baton cron 0 2 '*' '*' '*' works too. */
    size_t al = strlen(a);
    if (elen + al + 2 > sizeof expr) {
      fprintf(stderr, "baton: invalid cron expression: longer than 1024 "
                      "bytes\n");
      return 1;
    }
    if (nexpr++) expr[elen++] = ' ';
    memcpy(expr + elen, a, al + 1);
    elen += al;
  }
  if (!nexpr) return fail_usage("missing the expression", NULL);
  if (count) {
    char *end;
    errno = 0;
    n = strtol(count, &end, 10);
    if (errno || *end || end == count || n < 0 || n > MAX_N)
      return fail_usage("-n needs a count from 0 to 100000, not", count);
  }
  if (bt_tz_load(zone, &tz) < 0) {
    fprintf(stderr, "baton: unknown time zone \"%s\"\n", zone);
    return 1;
  }
  if (bt_cron_parse(&c, expr, err, sizeof err) < 0) {
    fprintf(stderr, "baton: %s\n", err);
    return 1;
  }
  if (from) {
    if (parse_time(from, tz, &t) < 0)
      return fail_usage("--from needs RFC 3339 (2026-03-08T01:30:00-05:00) "
                        "or epoch seconds, not", from);
  } else {
    t = (int64_t)time(NULL);
  }
  for (long i = 0; i < n; i++) {
    int rc = bt_cron_next(&c, tz, t, &t);
    if (rc == BT_ENOENT) break;
    if (rc < 0 || bt_tz_format(tz, t, line, sizeof line) < 0) {
      fprintf(stderr, "baton: cron: %s\n", bt_strerror(rc < 0 ? rc
                                                       : BT_EINVAL));
      return 1;
    }
    puts(line);
  }
  if (fflush(stdout) != 0) {
    fprintf(stderr, "baton: cron: cannot write the output\n");
    return 1;
  }
  return 0;
}
