/*
 * Cron parser and next-instant computation. See cron.h for the dialect and
 * the DST rules, docs/schedules.md for the user's view.
 *
 * Each field is a bitmask; finding the next match walks month, day, hour,
 * minute and second with count-trailing-zeros jumps, so a call costs a few
 * dozen operations whatever the expression. Time zones enter only through
 * spans of constant UTC offset (tz.h): inside a span, wall-clock time is UTC
 * time plus a constant, so the search runs on wall-clock seconds and the
 * result is mapped back; the span's start tells whether it opened a gap or
 * an overlap, which is where the DST rules apply.
 */
#include "cron.h"
#include "err.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SECS_PER_DAY 86400
#define MAX_EXPR 1024
#define MAX_EVERY INT64_C(3153600000)   /* 100 years of seconds */

enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_DOW };

static const struct {
  const char *name;
  int lo, hi;                           /* allowed values */
  int step_hi;                          /* largest step */
} fdef[6] = {
  { "second", 0, 59, 60 },      { "minute", 0, 59, 60 },
  { "hour", 0, 23, 24 },        { "day-of-month", 1, 31, 31 },
  { "month", 1, 12, 12 },       { "day-of-week", 0, 7, 7 },
};

static const char *const month_names[12] = {
  "JAN", "FEB", "MAR", "APR", "MAY", "JUN",
  "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"
};
static const char *const day_names[7] = {
  "SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"
};

/* ---- errors ------------------------------------------------------------ */

typedef struct {
  const char *expr;
  char *err;
  size_t errlen;
  int nfields;                          /* 5 or 6, for field numbers */
} pctx_t;

/* Writes `invalid cron expression "EXPR": ` and returns its length. The
 * expression is quoted with \" \\ and \xNN escapes, cut at 120 bytes. */
static size_t err_head(const pctx_t *p) {
  size_t n = 0, cap = p->errlen;
  const unsigned char *s = (const unsigned char *)p->expr;
  char tmp[8];
#define PUT(str)                                                              \
  do {                                                                        \
    for (const char *q_ = (str); *q_; q_++) {                                 \
      if (n + 1 < cap) p->err[n] = *q_;                                       \
      n++;                                                                    \
    }                                                                         \
  } while (0)
  PUT("invalid cron expression \"");
  for (size_t i = 0; s[i]; i++) {
    if (i == 120) {
      PUT("...");
      break;
    }
    if (s[i] == '"' || s[i] == '\\') {
      tmp[0] = '\\';
      tmp[1] = (char)s[i];
      tmp[2] = 0;
    } else if (s[i] < 0x20 || s[i] >= 0x7f) {
      snprintf(tmp, sizeof tmp, "\\x%02x", s[i]);
    } else {
      tmp[0] = (char)s[i];
      tmp[1] = 0;
    }
    PUT(tmp);
  }
  PUT("\": ");
#undef PUT
  if (cap) p->err[n < cap ? n : cap - 1] = 0;
  return n < cap ? n : (cap ? cap - 1 : 0);
}

/* Fills the error message: field f (if f >= 0) at byte offset `at`, then
 * the printf-style detail. Always returns BT_ECRON. */
static int perr(const pctx_t *p, int f, const char *at, const char *fmt,
                ...) {
  va_list ap;
  size_t n;
  int col = at ? (int)(at - p->expr) + 1 : 0;
  if (!p->errlen) return BT_ECRON;
  n = err_head(p);
  if (f >= 0) {
    int num = p->nfields == 6 ? f + 1 : f;
    n += (size_t)snprintf(p->err + n, p->errlen - n,
                          "field %d (%s) at column %d: ", num, fdef[f].name,
                          col);
  } else if (at) {
    n += (size_t)snprintf(p->err + n, p->errlen - n, "at column %d: ", col);
  }
  if (n >= p->errlen) return BT_ECRON;
  va_start(ap, fmt);
  vsnprintf(p->err + n, p->errlen - n, fmt, ap);
  va_end(ap);
  return BT_ECRON;
}

/* A printable rendering of the byte at s, for "unexpected character". */
static const char *show_char(const char *s, char buf[8]) {
  unsigned char c = (unsigned char)*s;
  if (c > 0x20 && c < 0x7f) snprintf(buf, 8, "'%c'", c);
  else snprintf(buf, 8, "\\x%02x", c);
  return buf;
}

/* ---- fields ------------------------------------------------------------ */

/* Reads a number or (for month and day-of-week) a three-letter name at *sp,
 * before end. Sets *v; on error fills the message and returns BT_ECRON. */
static int read_value(const pctx_t *p, int f, const char **sp,
                      const char *end, int *v) {
  const char *s = *sp;
  char cb[8];
  if (s < end && isdigit((unsigned char)*s)) {
    const char *b = s;
    long n = 0;
    while (s < end && isdigit((unsigned char)*s)) {
      if (n < 100000) n = n * 10 + (*s - '0');
      s++;
    }
    if (n < fdef[f].lo || n > fdef[f].hi)
      return perr(p, f, b, "%.*s is out of range %d-%d", (int)(s - b), b,
                  fdef[f].lo, fdef[f].hi);
    *v = (int)n;
    *sp = s;
    return 0;
  }
  if (s < end && isalpha((unsigned char)*s)) {
    const char *b = s;
    int r = 0;
    while (s + r < end && isalpha((unsigned char)s[r])) r++;
    if (f == F_MON || f == F_DOW) {
      int len = r;
      /* "FRIL" is FRI followed by L */
      if (f == F_DOW && r == 4 && toupper((unsigned char)s[3]) == 'L')
        len = 3;
      if (len == 3) {
        const char *const *names = f == F_MON ? month_names : day_names;
        int count = f == F_MON ? 12 : 7;
        for (int i = 0; i < count; i++)
          if (toupper((unsigned char)s[0]) == names[i][0] &&
              toupper((unsigned char)s[1]) == names[i][1] &&
              toupper((unsigned char)s[2]) == names[i][2]) {
            *v = f == F_MON ? i + 1 : i;
            *sp = s + 3;
            return 0;
          }
      }
      if (f == F_DOW && r == 1 && toupper((unsigned char)*s) == 'L')
        return perr(p, f, b, "L in day-of-week needs a weekday before it "
                             "(5L is the last Friday)");
      return perr(p, f, b, "unknown %s name \"%.*s\" (use %s)",
                  f == F_MON ? "month" : "day", r, b,
                  f == F_MON ? "JAN-DEC or 1-12" : "SUN-SAT or 0-7");
    }
    if (toupper((unsigned char)*s) == 'L')
      return perr(p, f, b, "L is only allowed in day-of-month and "
                           "day-of-week");
    if (toupper((unsigned char)*s) == 'W')
      return perr(p, f, b, "W is only allowed in day-of-month");
    return perr(p, f, b, "unexpected character %s", show_char(b, cb));
  }
  if (s >= end) return perr(p, f, s, "a value is missing");
  if (*s == '?')
    return perr(p, f, s, "? is only allowed alone, in day-of-month and "
                         "day-of-week");
  if (*s == '#' && f != F_DOW)
    return perr(p, f, s, "# is only allowed in day-of-week");
  return perr(p, f, s, "unexpected character %s", show_char(s, cb));
}

static int read_step(const pctx_t *p, int f, const char **sp, const char *end,
                     int *step) {
  const char *s = *sp, *b = s;
  long n = 0;
  char cb[8];
  if (s >= end || !isdigit((unsigned char)*s))
    return s >= end ? perr(p, f, s, "a step is missing after /")
                    : perr(p, f, s, "unexpected character %s after /",
                           show_char(s, cb));
  while (s < end && isdigit((unsigned char)*s)) {
    if (n < 100000) n = n * 10 + (*s - '0');
    s++;
  }
  if (n < 1 || n > fdef[f].step_hi)
    return perr(p, f, b, "step %.*s is out of range 1-%d", (int)(s - b), b,
                fdef[f].step_hi);
  *step = (int)n;
  *sp = s;
  return 0;
}

/* Parses one list item [s, end) of field f into c. */
static int parse_item(const pctx_t *p, bt_cron_t *c, int f, uint64_t *bits,
                      const char *s, const char *end) {
  int a, b, step = 1, rc;
  char cb[8];
  const char *item = s;
  if (s == end) return perr(p, f, s, "empty list item");
  if (*s == '*') {
    a = fdef[f].lo;
    b = f == F_DOW ? 6 : fdef[f].hi;
    s++;
    if (s < end && *s == '/') {
      s++;
      if ((rc = read_step(p, f, &s, end, &step))) return rc;
    }
    goto range;
  }
  if (*s == '?') {
    if (f != F_DOM && f != F_DOW)
      return perr(p, f, s, "? is only allowed in day-of-month and "
                           "day-of-week");
    if (s + 1 != end)
      return perr(p, f, s + 1, "unexpected character %s after ?",
                  show_char(s + 1, cb));
    a = fdef[f].lo;
    b = f == F_DOW ? 6 : fdef[f].hi;
    s++;
    goto range;
  }
  if (f == F_DOM && toupper((unsigned char)*s) == 'L') {
    if (end - s == 1) {
      c->flags |= BT_CRON_DOM_L;
      return 0;
    }
    if (end - s == 2 && toupper((unsigned char)s[1]) == 'W') {
      c->flags |= BT_CRON_DOM_LW;
      return 0;
    }
    if (s[1] == '-')
      return perr(p, f, s, "L-n (days before the last) is not supported; "
                           "use L, LW or a list of days");
    return perr(p, f, s + 1, "unexpected character %s after L",
                show_char(s + 1, cb));
  }
  if (f == F_DOM && toupper((unsigned char)*s) == 'W')
    return perr(p, f, s, "W needs a day before it (15W is the weekday "
                         "nearest the 15th)");
  if (f == F_DOW && *s == '#')
    return perr(p, f, s, "# needs a weekday before it (1#2 is the second "
                         "Monday)");
  if ((rc = read_value(p, f, &s, end, &a))) return rc;
  if (s < end && f == F_DOM && toupper((unsigned char)*s) == 'W') {
    if (s + 1 != end)
      return perr(p, f, s + 1, "unexpected character %s after W",
                  show_char(s + 1, cb));
    c->dom_w |= 1u << a;
    return 0;
  }
  if (s < end && f == F_DOW && toupper((unsigned char)*s) == 'L') {
    if (s + 1 != end)
      return perr(p, f, s + 1, "unexpected character %s after L",
                  show_char(s + 1, cb));
    c->dow_last |= (uint8_t)(1u << (a % 7));
    return 0;
  }
  if (s < end && f == F_DOW && *s == '#') {
    const char *k = ++s;
    if (s >= end || !isdigit((unsigned char)*s))
      return perr(p, f, s, "# needs a week 1-5 after it");
    while (s < end && isdigit((unsigned char)*s)) s++;
    if (s - k != 1 || *k < '1' || *k > '5')
      return perr(p, f, k, "week %.*s is out of range 1-5", (int)(s - k), k);
    if (s != end)
      return perr(p, f, s, "unexpected character %s", show_char(s, cb));
    c->dow_nth[a % 7] |= (uint8_t)(1u << (*k - '0'));
    return 0;
  }
  if (s < end && *s == '#')
    return perr(p, f, s, "# is only allowed in day-of-week");
  b = a;
  if (s < end && *s == '-') {
    const char *bs = ++s;
    if ((rc = read_value(p, f, &s, end, &b))) return rc;
    /* MON-SUN, FRI-SUN: the name SUN ending a range that starts later in
     * the week is 7. A written 0 stays 0, so 5-0 runs backwards; SUN-SUN
     * and 0-SUN are Sunday alone, as 3-3 is Wednesday alone. */
    if (f == F_DOW && b == 0 && a > 0 && isalpha((unsigned char)*bs)) b = 7;
    if (b < a && f == F_DOW && b == 0)
      return perr(p, f, item, "range %.*s runs backwards (Sunday at the end "
                              "of a range is 7: write %.*s7)",
                  (int)(s - item), item, (int)(bs - item), item);
    if (b < a)
      return perr(p, f, item, "range %.*s runs backwards (write it as two "
                              "ranges)", (int)(s - item), item);
    if (s < end && *s == '/') {
      s++;
      if ((rc = read_step(p, f, &s, end, &step))) return rc;
    }
  } else if (s < end && *s == '/') {
    b = fdef[f].hi;                     /* a/n is a-max/n (7 in dow) */
    s++;
    if ((rc = read_step(p, f, &s, end, &step))) return rc;
  }
range:
  if (s != end)
    return perr(p, f, s, "unexpected character %s", show_char(s, cb));
  for (int v = a; v <= b; v += step)
    *bits |= UINT64_C(1) << (f == F_DOW ? v % 7 : v);
  return 0;
}

/* Parses field f, the bytes [s, end), into c. */
static int parse_field(const pctx_t *p, bt_cron_t *c, int f, const char *s,
                       const char *end) {
  uint64_t bits = 0;
  int rc;
  for (const char *b = s;;) {
    const char *e = memchr(b, ',', (size_t)(end - b));
    if (!e) e = end;
    if ((rc = parse_item(p, c, f, &bits, b, e))) return rc;
    if (e == end) break;
    b = e + 1;
  }
  switch (f) {
  case F_SEC: c->sec = bits; break;
  case F_MIN: c->min = bits; break;
  case F_HOUR:
    c->hour = (uint32_t)bits;
    if (*s == '*') c->flags |= BT_CRON_HOUR_STAR;
    break;
  case F_DOM:
    c->dom = (uint32_t)bits;
    if (*s == '*' || *s == '?') c->flags |= BT_CRON_DOM_STAR;
    break;
  case F_MON: c->month = (uint16_t)bits; break;
  case F_DOW:
    c->dow = (uint8_t)bits;
    if (*s == '*' || *s == '?') c->flags |= BT_CRON_DOW_STAR;
    break;
  }
  return 0;
}

/* ---- day matching ------------------------------------------------------ */

static int is_leap(int64_t y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int dim_of(int64_t y, int m) {
  static const int dim[13] = { 0, 31, 28, 31, 30, 31, 30,
                               31, 31, 30, 31, 30, 31 };
  return m == 2 && is_leap(y) ? 29 : dim[m];
}

/* Days (bits 1-31) of a month with `dim` days whose 1st is weekday w1 that
 * match the day-of-month and day-of-week fields. */
static uint32_t day_mask(const bt_cron_t *c, int dim, int w1) {
  uint32_t valid = (uint32_t)(((UINT64_C(1) << dim) - 1) << 1);
  uint32_t dom = c->dom, dow = c->dow_days[w1];
  int wl = (w1 + dim - 1) % 7;          /* weekday of the last day */
  if (c->flags & BT_CRON_DOM_L) dom |= 1u << dim;
  if (c->flags & BT_CRON_DOM_LW)
    dom |= 1u << (wl == 6 ? dim - 1 : wl == 0 ? dim - 2 : dim);
  for (uint32_t w = c->dom_w; w; w &= w - 1) {
    int n = __builtin_ctz(w), wn, d = n;
    if (n > dim) break;
    wn = (w1 + n - 1) % 7;
    if (wn == 6) d = n == 1 ? 3 : n - 1;        /* Saturday */
    else if (wn == 0) d = n == dim ? n - 2 : n + 1; /* Sunday */
    dom |= 1u << d;
  }
  for (uint32_t x = c->dow_last; x; x &= x - 1) {
    int wd = __builtin_ctz(x);
    dow |= 1u << (dim - (wl - wd + 7) % 7);
  }
  for (int wd = 0; wd < 7; wd++)
    for (uint32_t k = c->dow_nth[wd]; k; k &= k - 1) {
      int d = 1 + (wd - w1 + 7) % 7 + 7 * (__builtin_ctz(k) - 1);
      if (d <= dim) dow |= 1u << d;
    }
  if (c->flags & (BT_CRON_DOM_STAR | BT_CRON_DOW_STAR))
    return dom & dow & valid;
  return (dom | dow) & valid;
}

static int weekday_of(int64_t days) {
  int64_t w = (days + 4) % 7;
  return (int)(w < 0 ? w + 7 : w);
}

/* Whether some date matches: the day mask depends only on the month's
 * length and the weekday of its 1st, and every combination occurs. */
static int can_match(const bt_cron_t *c) {
  for (int m = 1; m <= 12; m++) {
    if (!(c->month >> m & 1)) continue;
    for (int w1 = 0; w1 < 7; w1++) {
      if (day_mask(c, m == 2 ? 28 : dim_of(2001, m), w1)) return 1;
      if (m == 2 && day_mask(c, 29, w1)) return 1;
    }
  }
  return 0;
}

/* ---- descriptors ------------------------------------------------------- */

/* Parses the duration of @every at s: groups of digits and a unit h, m or
 * s ("90s", "5m", "1h30m"). */
static int parse_every(const pctx_t *p, bt_cron_t *c, const char *at,
                       const char *s) {
  int64_t total = 0;
  char cb[8];
  while (*s == ' ' || *s == '\t') s++;
  if (!*s)
    return perr(p, -1, at, "@every needs a duration, like @every 90s, "
                           "@every 5m or @every 1h30m");
  const char *d = s;
  while (*s && *s != ' ' && *s != '\t') {
    int64_t n = 0;
    const char *b = s;
    if (!isdigit((unsigned char)*s))
      return perr(p, -1, s, "unexpected character %s in duration (write "
                            "it like 90s, 5m or 1h30m)", show_char(s, cb));
    while (isdigit((unsigned char)*s)) {
      if (n < MAX_EVERY) n = n * 10 + (*s - '0');
      s++;
    }
    switch (*s) {
    case 'h': n *= 3600; break;
    case 'm':
      if (s[1] == 's')
        return perr(p, -1, b, "@every counts whole seconds; %.*sms is less "
                              "precise than that", (int)(s - b), b);
      n *= 60;
      break;
    case 's': break;
    default:
      if (!*s || *s == ' ' || *s == '\t')
        return perr(p, -1, s, "a unit (h, m or s) is missing after %.*s",
                    (int)(s - b), b);
      return perr(p, -1, s, "unknown unit %s in duration (use h, m or s)",
                  show_char(s, cb));
    }
    s++;
    total += n;
    if (total > MAX_EVERY)
      return perr(p, -1, d, "duration %.*s is longer than 100 years",
                  (int)(strcspn(d, " \t")), d);
  }
  while (*s == ' ' || *s == '\t') s++;
  if (*s)
    return perr(p, -1, s, "unexpected text after the duration");
  if (total < 1)
    return perr(p, -1, d, "duration %.*s is shorter than 1s",
                (int)(strcspn(d, " \t")), d);
  c->kind = BT_CRON_EVERY;
  c->every = total;
  return 0;
}

static int parse_fields(const pctx_t *p0, bt_cron_t *c, const char *expr);

static int parse_descriptor(pctx_t *p, bt_cron_t *c, const char *s) {
  static const struct {
    const char *name, *fields;
  } desc[] = {
    { "@yearly", "0 0 1 1 *" },  { "@annually", "0 0 1 1 *" },
    { "@monthly", "0 0 1 * *" }, { "@weekly", "0 0 * * 0" },
    { "@daily", "0 0 * * *" },   { "@midnight", "0 0 * * *" },
    { "@hourly", "0 * * * *" },
  };
  size_t n = strcspn(s, " \t");
  const char *rest = s + n;
  char word[16];
  if (n >= sizeof word) n = sizeof word - 1;
  for (size_t i = 0; i < n; i++) word[i] = (char)tolower((unsigned char)s[i]);
  word[n] = 0;
  if (!strcmp(word, "@every")) return parse_every(p, c, s, rest);
  while (*rest == ' ' || *rest == '\t') rest++;
  for (size_t i = 0; i < sizeof desc / sizeof desc[0]; i++)
    if (!strcmp(word, desc[i].name)) {
      if (*rest)
        return perr(p, -1, rest, "unexpected text after %s", desc[i].name);
      return parse_fields(p, c, desc[i].fields);
    }
  if (!strcmp(word, "@manual")) {
    if (*rest) return perr(p, -1, rest, "unexpected text after @manual");
    c->kind = BT_CRON_MANUAL;
    return 0;
  }
  return perr(p, -1, s, "unknown descriptor \"%.*s\" (use @yearly, "
                        "@annually, @monthly, @weekly, @daily, @midnight, "
                        "@hourly, @every <duration> or @manual)",
              (int)strcspn(s, " \t"), s);
}

/* Splits expr into fields and parses each; errors point into p->expr, so
 * descriptors expand with their own pctx pointing at the expansion. */
static int parse_fields(const pctx_t *p0, bt_cron_t *c, const char *expr) {
  const char *b[6], *e[6];
  int n = 0, rc, first;
  pctx_t p = *p0;
  const char *s = expr;
  for (;;) {
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) break;
    if (n < 6) b[n] = s;
    while (*s && *s != ' ' && *s != '\t') s++;
    if (n < 6) e[n] = s;
    n++;
  }
  if (n == 0) return perr(&p, -1, NULL, "the expression is empty");
  if (n < 5 || n > 6)
    return perr(&p, -1, NULL, "expected 5 fields (minute hour day-of-month "
                              "month day-of-week), 6 with seconds first, or "
                              "a descriptor such as @daily; got %d", n);
  p.nfields = n;
  first = n == 6 ? F_SEC : F_MIN;
  if (n == 5) c->sec = 1;               /* second 0 */
  for (int i = 0; i < n; i++)
    if ((rc = parse_field(&p, c, first + i, b[i], e[i]))) return rc;
  /* Plain day-of-week as days of the month, for each weekday of the 1st. */
  for (int w1 = 0; w1 < 7; w1++) {
    uint32_t m = 0;
    for (int d = 1; d <= 31; d++)
      if (c->dow >> ((w1 + d - 1) % 7) & 1) m |= 1u << d;
    c->dow_days[w1] = m;
  }
  if (!can_match(c)) {
    int f = (c->flags & BT_CRON_DOM_STAR) ? F_DOW : F_DOM;
    return perr(&p, f, b[f - first], "no date in the selected months "
                                     "matches (the schedule would never "
                                     "fire)");
  }
  return 0;
}

int bt_cron_parse(bt_cron_t *c, const char *expr, char *err, size_t errlen) {
  pctx_t p = { expr ? expr : "", err, errlen, 5 };
  const char *s;
  int rc;
  memset(c, 0, sizeof *c);
  if (errlen) err[0] = 0;
  if (!expr) return perr(&p, -1, NULL, "the expression is empty");
  if (strlen(expr) > MAX_EXPR)
    return perr(&p, -1, NULL, "longer than %d bytes", MAX_EXPR);
  for (s = expr; *s; s++)
    if ((unsigned char)*s < 0x20 && *s != '\t')
      return perr(&p, -1, s, "unexpected control character \\x%02x",
                  (unsigned char)*s);
  s = expr;
  while (*s == ' ' || *s == '\t') s++;
  rc = *s == '@' ? parse_descriptor(&p, c, s) : parse_fields(&p, c, expr);
  if (rc) memset(c, 0, sizeof *c);
  return rc;
}

/* ---- next instant ------------------------------------------------------ */

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* The first wall-clock second in [lo, hi) that c matches, in *out; 0 if
 * there is none (or none before year 10000). */
static int civil_next(const bt_cron_t *c, int64_t lo, int64_t hi,
                      int64_t *out) {
  int64_t days, y, mday0;
  int mo, d, h, mi, s, sod, cy = 0, cm = 0;
  uint32_t dmask = 0;
  if (lo >= hi) return 0;
  days = floor_div(lo, SECS_PER_DAY);
  sod = (int)(lo - days * SECS_PER_DAY);
  bt_tz_civil_from_days(days, &y, &mo, &d);
  h = sod / 3600;
  mi = sod / 60 % 60;
  s = sod % 60;
  mday0 = days - d + 1;                 /* days of the month's 1st */
  for (;;) {
    if (!(c->month >> mo & 1) || d > 31) {
      /* next month in the mask */
      uint32_t mm = d > 31 ? (uint32_t)c->month >> (mo + 1) << (mo + 1)
                           : (uint32_t)c->month >> mo << mo;
      if (mm) {
        mo = __builtin_ctz(mm);
      } else {
        y++;
        mo = __builtin_ctz(c->month);
      }
      if (y > 9999) return 0;
      d = 1;
      h = mi = s = 0;
      mday0 = bt_tz_days_from_civil(y, mo, 1);
      if (mday0 * SECS_PER_DAY >= hi) return 0;
    }
    if (y != cy || mo != cm) {
      dmask = day_mask(c, dim_of(y, mo), weekday_of(mday0));
      cy = (int)y;
      cm = mo;
    }
    uint64_t dm = (uint64_t)dmask >> d << d;
    if (!dm) {
      d = 32;                           /* next month */
      continue;
    }
    int nd = __builtin_ctzll(dm);
    if (nd != d) {
      d = nd;
      h = mi = s = 0;
    }
    uint32_t hm = h < 24 ? c->hour >> h << h : 0;
    if (!hm) {
      d++;
      h = mi = s = 0;
      continue;
    }
    int nh = __builtin_ctz(hm);
    if (nh != h) {
      h = nh;
      mi = s = 0;
    }
    uint64_t mm = mi < 60 ? c->min >> mi << mi : 0;
    if (!mm) {
      h++;
      mi = s = 0;
      continue;
    }
    int nm = __builtin_ctzll(mm);
    if (nm != mi) {
      mi = nm;
      s = 0;
    }
    uint64_t sm = s < 60 ? c->sec >> s << s : 0;
    if (!sm) {
      mi++;
      s = 0;
      continue;
    }
    s = __builtin_ctzll(sm);
    int64_t t = (mday0 + d - 1) * SECS_PER_DAY + h * 3600 + mi * 60 + s;
    if (t >= hi) return 0;
    *out = t;
    return 1;
  }
}

int bt_cron_next(const bt_cron_t *c, const bt_tz_t *tz, int64_t after,
                 int64_t *next) {
  bt_tz_span_t sp;
  int64_t t, limit, L;
  if (c->kind == BT_CRON_MANUAL) return BT_ENOENT;
  if (after < BT_TZ_MIN_TIME || after > BT_TZ_MAX_TIME) return BT_EINVAL;
  if (c->kind == BT_CRON_EVERY) {
    if (after + c->every > BT_TZ_MAX_TIME) return BT_ENOENT;
    *next = after + c->every;
    return 0;
  }
  if (!tz) tz = bt_tz_utc();
  t = after + 1;
  limit = after + INT64_C(401) * 366 * SECS_PER_DAY;
  for (;;) {
    int64_t best = INT64_MAX, lo, hi;
    bt_tz_span(tz, t, &sp);
    lo = t + sp.utoff;
    /* Overlap: a fixed-hour schedule fired at the first occurrence. */
    if (!(c->flags & BT_CRON_HOUR_STAR) && sp.start != INT64_MIN &&
        sp.prev_utoff > sp.utoff && sp.start + sp.prev_utoff > lo)
      lo = sp.start + sp.prev_utoff;
    hi = sp.end == INT64_MAX ? INT64_MAX : sp.end + sp.utoff;
    if (civil_next(c, lo, hi, &L)) best = L - sp.utoff;
    /* Gap: wall times that do not exist fire shifted by the gap. */
    if (sp.start != INT64_MIN && sp.prev_utoff < sp.utoff) {
      int64_t glo = sp.start + sp.prev_utoff, ghi = sp.start + sp.utoff;
      if (t + sp.prev_utoff > glo) glo = t + sp.prev_utoff;
      if (civil_next(c, glo, ghi, &L) && L - sp.prev_utoff < best)
        best = L - sp.prev_utoff;
    }
    if (best != INT64_MAX) {
      if (best > BT_TZ_MAX_TIME) return BT_ENOENT;
      *next = best;
      return 0;
    }
    if (sp.end == INT64_MAX || sp.end > limit) return BT_ENOENT;
    t = sp.end;
  }
}
