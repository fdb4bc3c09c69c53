/*
 * TZif reader (RFC 8536) and offset lookup. See tz.h for why baton reads
 * the system's zoneinfo itself instead of going through ICU.
 *
 * A loaded zone is reduced to what scheduling needs: the list of instants at
 * which the UTC offset changes (transitions that only change the
 * abbreviation or the DST flag are dropped), the offset before the first
 * one, and the POSIX TZ rule of the footer for instants after the last one.
 */
#include "tz.h"
#include "err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECS_PER_DAY 86400
#define MAX_UTOFF (26 * 3600)           /* sanity bound on any offset */
#define MAX_TZIF_SIZE (1 << 20)

/* One rule of a POSIX TZ string: Jn, n or Mm.w.d, at `time` local seconds. */
typedef struct {
  char kind;                            /* 'J', 'N' or 'M' */
  int day;                              /* J: 1-365; N: 0-365; M: weekday */
  int week;                             /* M: 1-5 */
  int month;                            /* M: 1-12 */
  int32_t time;                         /* seconds after local midnight */
} ptz_rule_t;

struct bt_tz_s {
  char *name;
  int64_t *trans;                       /* offset changes, increasing */
  int32_t *offs;                        /* offs[i]: offset from trans[i] */
  size_t n;
  int32_t off0;                         /* offset before trans[0] */
  int has_rule;                         /* footer with a real DST rule */
  int32_t std_off, dst_off;             /* footer offsets, east of UTC */
  ptz_rule_t start, end;                /* footer DST start and end */
  struct bt_tz_s *next;                 /* cache list */
};

static bt_tz_t utc_zone = { (char *)"UTC", NULL, NULL, 0, 0, 0, 0, 0,
                            { 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0 }, NULL };
static bt_tz_t *cache;

/* ---- calendar ---------------------------------------------------------- */

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
 * algorithm, rewritten here). */
int64_t bt_tz_days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = floor_div(y, 400);
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

void bt_tz_civil_from_days(int64_t days, int64_t *y, int *m, int *d) {
  days += 719468;
  int64_t era = floor_div(days, 146097);
  int64_t doe = days - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  *d = (int)(doy - (153 * mp + 2) / 5 + 1);
  *m = (int)(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2);
}

static int is_leap(int64_t y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int days_in_month(int64_t y, int m) {
  static const int dim[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
  return m == 2 && is_leap(y) ? 29 : dim[m - 1];
}

/* 0 = Sunday. */
static int weekday(int64_t days) {
  int64_t w = (days + 4) % 7;
  return (int)(w < 0 ? w + 7 : w);
}

static int64_t year_of(int64_t t) {
  int64_t y;
  int m, d;
  bt_tz_civil_from_days(floor_div(t, SECS_PER_DAY), &y, &m, &d);
  return y;
}

/* ---- POSIX TZ footer ---------------------------------------------------- */

static const char *ptz_name(const char *s) {
  const char *b = s;
  if (*s == '<') {
    for (s++; *s && *s != '>'; s++)
      if (!(*s == '+' || *s == '-' || (*s >= '0' && *s <= '9') ||
            (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')))
        return NULL;
    return *s == '>' && s - b >= 4 ? s + 1 : NULL;
  }
  while ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')) s++;
  return s - b >= 3 ? s : NULL;
}

/* [+-]h[h[h]][:mm[:ss]] with hours up to max_h; *v in seconds. */
static const char *ptz_hms(const char *s, int max_h, int32_t *v) {
  int sign = 1, h = 0, m = 0, sec = 0, nd = 0;
  if (*s == '+' || *s == '-') sign = *s++ == '-' ? -1 : 1;
  while (*s >= '0' && *s <= '9' && nd < 3) h = h * 10 + (*s++ - '0'), nd++;
  if (nd == 0 || h > max_h) return NULL;
  if (*s == ':') {
    s++;
    if (!(s[0] >= '0' && s[0] <= '5' && s[1] >= '0' && s[1] <= '9'))
      return NULL;
    m = (s[0] - '0') * 10 + (s[1] - '0');
    s += 2;
    if (*s == ':') {
      s++;
      if (!(s[0] >= '0' && s[0] <= '5' && s[1] >= '0' && s[1] <= '9'))
        return NULL;
      sec = (s[0] - '0') * 10 + (s[1] - '0');
      s += 2;
    }
  }
  *v = sign * (h * 3600 + m * 60 + sec);
  return s;
}

static const char *ptz_num(const char *s, int lo, int hi, int *v) {
  int n = 0, nd = 0;
  while (*s >= '0' && *s <= '9' && nd < 4) n = n * 10 + (*s++ - '0'), nd++;
  if (nd == 0 || n < lo || n > hi) return NULL;
  *v = n;
  return s;
}

static const char *ptz_rule(const char *s, ptz_rule_t *r) {
  r->time = 7200;
  if (*s == 'J') {
    r->kind = 'J';
    s = ptz_num(s + 1, 1, 365, &r->day);
  } else if (*s == 'M') {
    r->kind = 'M';
    s = ptz_num(s + 1, 1, 12, &r->month);
    if (!s || *s++ != '.') return NULL;
    s = ptz_num(s, 1, 5, &r->week);
    if (!s || *s++ != '.') return NULL;
    s = ptz_num(s, 0, 6, &r->day);
  } else {
    r->kind = 'N';
    s = ptz_num(s, 0, 365, &r->day);
  }
  if (s && *s == '/') s = ptz_hms(s + 1, 167, &r->time);
  return s;
}

/* UTC instant of rule r in year y, the local clock being UTC+off before. */
static int64_t ptz_when(const ptz_rule_t *r, int64_t y, int32_t off) {
  int64_t days;
  if (r->kind == 'J') {
    days = bt_tz_days_from_civil(y, 1, 1) + r->day - 1 +
           (is_leap(y) && r->day >= 60);
  } else if (r->kind == 'N') {
    days = bt_tz_days_from_civil(y, 1, 1) + r->day;
  } else {
    int64_t first = bt_tz_days_from_civil(y, r->month, 1);
    int dim = days_in_month(y, r->month);
    int d = 1 + (r->day - weekday(first) + 7) % 7 + 7 * (r->week - 1);
    while (d > dim) d -= 7;
    days = first + d - 1;
  }
  return days * SECS_PER_DAY + r->time - off;
}

/* Parses the footer into z; an empty footer or one without DST leaves
 * has_rule 0 and returns the fixed offset in *fixed (1 if there is one). */
static int ptz_parse(bt_tz_t *z, const char *s, int32_t *fixed, int *has) {
  int32_t std_w, dst_w;
  *has = 0;
  if (!*s) return 0;
  if (!(s = ptz_name(s)) || !(s = ptz_hms(s, 24, &std_w))) return BT_ETZ;
  *fixed = -std_w;
  *has = 1;
  if (!*s) return 0;
  if (!(s = ptz_name(s))) return BT_ETZ;
  dst_w = std_w - 3600;
  if (*s && *s != ',' && !(s = ptz_hms(s, 24, &dst_w))) return BT_ETZ;
  if (!*s) {                            /* DST without a rule: US default */
    z->start = (ptz_rule_t){ 'M', 0, 2, 3, 7200 };
    z->end = (ptz_rule_t){ 'M', 0, 1, 11, 7200 };
  } else {
    if (*s++ != ',' || !(s = ptz_rule(s, &z->start))) return BT_ETZ;
    if (*s++ != ',' || !(s = ptz_rule(s, &z->end)) || *s) return BT_ETZ;
  }
  z->std_off = -std_w;
  z->dst_off = -dst_w;
  if (z->std_off == z->dst_off) return 0;
  /* "DST all year" (0/0,J365/25): DST ends when next year's begins. */
  int64_t e = ptz_when(&z->end, 2001, z->dst_off);
  int64_t s2 = ptz_when(&z->start, 2002, z->std_off);
  if (e >= s2) {
    *fixed = z->dst_off;
    return 0;
  }
  z->has_rule = 1;
  return 0;
}

/* ---- TZif -------------------------------------------------------------- */

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         p[3];
}

static int64_t be64(const uint8_t *p) {
  return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* Parses a whole TZif file into z (which owns the arrays it gets). Every
 * count is checked against the bytes present before anything is read. */
static int tzif_parse(bt_tz_t *z, const uint8_t *p, size_t len) {
  size_t off = 0;
  int v2;
  uint32_t isut, isstd, leap, timecnt, typecnt, charcnt;
  size_t tsize = 4, need;
  if (len < 44 || memcmp(p, "TZif", 4) != 0) return BT_ETZ;
  v2 = p[4] >= '2';
  for (;;) {
    if (len - off < 44 || memcmp(p + off, "TZif", 4) != 0) return BT_ETZ;
    isut = be32(p + off + 20);
    isstd = be32(p + off + 24);
    leap = be32(p + off + 28);
    timecnt = be32(p + off + 32);
    typecnt = be32(p + off + 36);
    charcnt = be32(p + off + 40);
    if (typecnt == 0 || typecnt > 256 || timecnt > 100000 || leap > 10000 ||
        charcnt > 100000 || (isstd && isstd != typecnt) ||
        (isut && isut != typecnt))
      return BT_ETZ;
    need = timecnt * tsize + timecnt + typecnt * 6 + charcnt +
           leap * (tsize + 4) + isstd + isut;
    off += 44;
    if (len - off < need) return BT_ETZ;
    if (!v2 || tsize == 8) break;
    off += need;                        /* skip the 32-bit block */
    tsize = 8;
  }
  if (leap) return BT_ETZ;              /* "right/" zones: TAI-based */

  const uint8_t *tp = p + off, *ip = tp + timecnt * tsize;
  const uint8_t *ty = ip + timecnt;
  int32_t utoff[256];
  for (uint32_t i = 0; i < typecnt; i++) {
    int32_t u = (int32_t)be32(ty + 6 * i);
    if (u < -MAX_UTOFF || u > MAX_UTOFF || ty[6 * i + 4] > 1 ||
        ty[6 * i + 5] >= charcnt)
      return BT_ETZ;
    utoff[i] = u;
  }
  z->trans = malloc((timecnt + 1) * sizeof *z->trans);
  z->offs = malloc((timecnt + 1) * sizeof *z->offs);
  if (!z->trans || !z->offs) return BT_ENOMEM;
  z->off0 = utoff[0];
  int32_t cur = z->off0;
  int64_t last = INT64_MIN;
  for (uint32_t i = 0; i < timecnt; i++) {
    int64_t t = tsize == 8 ? be64(tp + 8 * i) : (int32_t)be32(tp + 4 * i);
    if (ip[i] >= typecnt || (i > 0 && t <= last)) return BT_ETZ;
    last = t;
    if (utoff[ip[i]] == cur) continue;
    cur = utoff[ip[i]];
    z->trans[z->n] = t;
    z->offs[z->n++] = cur;
  }

  int32_t fixed = cur;
  int has = 0;
  if (v2) {
    const uint8_t *f = p + off + need, *e = p + len;
    char buf[128];
    if (f < e && *f == '\n') {
      const uint8_t *nl = memchr(f + 1, '\n', (size_t)(e - f - 1));
      size_t fl = nl ? (size_t)(nl - f - 1) : 0;
      if (!nl || fl >= sizeof buf) return BT_ETZ;
      memcpy(buf, f + 1, fl);
      buf[fl] = 0;
      int rc = ptz_parse(z, buf, &fixed, &has);
      if (rc < 0) return rc;
    }
  }
  /* A fixed footer offset that differs from the last type starts after the
   * last transition (a slim file may end that way). */
  if (has && !z->has_rule && fixed != cur) {
    if (z->n == 0) {
      z->off0 = fixed;
    } else {
      z->trans[z->n] = z->trans[z->n - 1] + 1;
      z->offs[z->n++] = fixed;
    }
  }
  return 0;
}

/* A zone name is a relative path of [A-Za-z0-9._+-] components, none of
 * which starts with a dot. */
static int valid_name(const char *name) {
  size_t len = strlen(name);
  if (len == 0 || len > 255 || name[0] == '/') return 0;
  for (size_t i = 0; i < len; i++) {
    char c = name[i];
    if ((i == 0 || name[i - 1] == '/') && (c == '.' || c == '/')) return 0;
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
          (c >= '0' && c <= '9') || c == '/' || c == '_' || c == '-' ||
          c == '+' || c == '.'))
      return 0;
  }
  return name[len - 1] != '/';
}

static void tz_free(bt_tz_t *z) {
  if (!z || z == &utc_zone) return;
  free(z->name);
  free(z->trans);
  free(z->offs);
  free(z);
}

static int tz_read(const char *name, bt_tz_t *z) {
  const char *dir = getenv("TZDIR");
  char path[1024];
  struct stat st;
  uint8_t *buf;
  int fd, rc;
  ssize_t got = 0;
  if (!dir || !*dir) dir = "/usr/share/zoneinfo";
  if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
    return BT_ETZ;
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return BT_ETZ;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size > MAX_TZIF_SIZE || st.st_size < 44) {
    close(fd);
    return BT_ETZ;
  }
  buf = malloc((size_t)st.st_size);
  if (!buf) {
    close(fd);
    return BT_ENOMEM;
  }
  while (got < st.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)(st.st_size - got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += r;
  }
  close(fd);
  rc = got == st.st_size ? tzif_parse(z, buf, (size_t)got) : BT_ETZ;
  free(buf);
  return rc;
}

int bt_tz_load(const char *name, const bt_tz_t **out) {
  bt_tz_t *z;
  int rc;
  if (!name) return BT_ETZ;
  if (!strcmp(name, "UTC") || !strcmp(name, "Etc/UTC") || !strcmp(name, "Z")) {
    *out = &utc_zone;
    return 0;
  }
  if (!valid_name(name)) return BT_ETZ;
  for (z = cache; z; z = z->next)
    if (!strcmp(z->name, name)) {
      *out = z;
      return 0;
    }
  z = calloc(1, sizeof *z);
  if (!z || !(z->name = strdup(name))) {
    free(z);
    return BT_ENOMEM;
  }
  rc = tz_read(name, z);
  if (rc < 0) {
    tz_free(z);
    return rc;
  }
  z->next = cache;
  cache = z;
  *out = z;
  return 0;
}

const bt_tz_t *bt_tz_utc(void) {
  return &utc_zone;
}

const char *bt_tz_name(const bt_tz_t *tz) {
  return tz->name;
}

void bt_tz_cache_free(void) {
  while (cache) {
    bt_tz_t *z = cache;
    cache = z->next;
    tz_free(z);
  }
}

/* ---- lookup ------------------------------------------------------------ */

typedef struct {
  int64_t t;
  int32_t off;
} ev_t;

/* The span containing t when t is past the last explicit transition and the
 * footer has a DST rule: generate the rule's transitions around t. */
static void rule_span(const bt_tz_t *z, int64_t t, bt_tz_span_t *s) {
  ev_t ev[8];
  int n = 0;
  int64_t y = year_of(t + z->std_off);
  /* State before the window: the later of year y-2's two transitions. */
  int64_t a = ptz_when(&z->start, y - 2, z->std_off);
  int64_t b = ptz_when(&z->end, y - 2, z->dst_off);
  ev_t pre = a > b ? (ev_t){ a, z->dst_off } : (ev_t){ b, z->std_off };
  int32_t pre_prev = pre.off == z->dst_off ? z->std_off : z->dst_off;
  int64_t floor_t = INT64_MIN;
  if (z->n > 0 && z->trans[z->n - 1] >= pre.t) {
    pre.t = z->trans[z->n - 1];
    pre.off = z->offs[z->n - 1];
    pre_prev = z->n > 1 ? z->offs[z->n - 2] : z->off0;
    floor_t = pre.t;
  }
  ev[n++] = pre;
  for (int64_t yy = y - 1; yy <= y + 1; yy++) {
    ev_t e1 = { ptz_when(&z->start, yy, z->std_off), z->dst_off };
    ev_t e2 = { ptz_when(&z->end, yy, z->dst_off), z->std_off };
    if (e1.t > e2.t) {
      ev_t tmp = e1;
      e1 = e2;
      e2 = tmp;
    }
    if (e1.t > floor_t && e1.t > ev[n - 1].t && e1.off != ev[n - 1].off)
      ev[n++] = e1;
    if (e2.t > floor_t && e2.t > ev[n - 1].t && e2.off != ev[n - 1].off)
      ev[n++] = e2;
  }
  int i = 0;
  while (i + 1 < n && ev[i + 1].t <= t) i++;
  s->start = ev[i].t;
  s->utoff = ev[i].off;
  s->prev_utoff = i > 0 ? ev[i - 1].off : pre_prev;
  s->end = i + 1 < n ? ev[i + 1].t : INT64_MAX;
}

void bt_tz_span(const bt_tz_t *z, int64_t t, bt_tz_span_t *s) {
  if (z->has_rule && (z->n == 0 || t >= z->trans[z->n - 1])) {
    rule_span(z, t, s);
    return;
  }
  /* Binary search for the last transition <= t. */
  size_t lo = 0, hi = z->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (z->trans[mid] <= t) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) {
    s->start = INT64_MIN;
    s->utoff = s->prev_utoff = z->off0;
  } else {
    s->start = z->trans[lo - 1];
    s->utoff = z->offs[lo - 1];
    s->prev_utoff = lo >= 2 ? z->offs[lo - 2] : z->off0;
  }
  /* lo == n only without a rule: with one, t >= trans[n-1] went above. */
  s->end = lo < z->n ? z->trans[lo] : INT64_MAX;
}

int32_t bt_tz_offset(const bt_tz_t *z, int64_t t) {
  bt_tz_span_t s;
  if (z->n == 0 && !z->has_rule) return z->off0;
  bt_tz_span(z, t, &s);
  return s.utoff;
}

int64_t bt_tz_local_to_utc(const bt_tz_t *z, int64_t local) {
  bt_tz_span_t s;
  int64_t t = local - MAX_UTOFF;
  /* Walk the spans that can contain local's instants, earliest first. */
  for (int guard = 0; guard < 16; guard++) {
    bt_tz_span(z, t, &s);
    int64_t u = local - s.utoff;
    if (u >= s.start && u < s.end) return u;
    if (s.start != INT64_MIN && s.prev_utoff < s.utoff &&
        local - s.prev_utoff >= s.start && u < s.start)
      return local - s.prev_utoff;      /* in the gap: shift forward */
    if (s.end == INT64_MAX || s.end > local + MAX_UTOFF) break;
    t = s.end;
  }
  return local - bt_tz_offset(z, local);
}

int bt_tz_format(const bt_tz_t *z, int64_t t, char *buf, size_t len) {
  int32_t off;
  int64_t local, days, y;
  int m, d, sod, n;
  char zone[16];
  if (t < BT_TZ_MIN_TIME || t > BT_TZ_MAX_TIME) return BT_EINVAL;
  off = bt_tz_offset(z, t);
  local = t + off;
  days = floor_div(local, SECS_PER_DAY);
  sod = (int)(local - days * SECS_PER_DAY);
  bt_tz_civil_from_days(days, &y, &m, &d);
  if (z == &utc_zone) {
    strcpy(zone, "Z");
  } else {
    int a = off < 0 ? -off : off;
    if (a % 60)
      snprintf(zone, sizeof zone, "%c%02d:%02d:%02d", off < 0 ? '-' : '+',
               a / 3600, a / 60 % 60, a % 60);
    else
      snprintf(zone, sizeof zone, "%c%02d:%02d", off < 0 ? '-' : '+',
               a / 3600, a / 60 % 60);
  }
  n = snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d%s", (int)y, m, d,
               sod / 3600, sod / 60 % 60, sod % 60, zone);
  if (n < 0 || (size_t)n >= len) return BT_EINVAL;
  return n;
}
