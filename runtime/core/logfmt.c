/*
 * Structured log lines (see logfmt.h). The formatter writes through a small
 * snprintf-like sink that counts what it could not store, so callers can
 * size a buffer with one dry run.
 */
#include "logfmt.h"
#include "err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  char *buf;
  size_t cap, len;
} sink_t;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

static void put(sink_t *o, const char *s, size_t n) {
  if (o->len < o->cap) {
    size_t room = o->cap - o->len;
    memcpy(o->buf + o->len, s, n < room ? n : room);
  }
  o->len += n;
}

static void putc1(sink_t *o, char c) {
  put(o, &c, 1);
}

static void puts0(sink_t *o, const char *s) {
  put(o, s, strlen(s));
}

/* The length of the valid UTF-8 sequence at p (at most n bytes), or 0 when
 * p does not start one (overlong forms and surrogates are invalid). */
static size_t utf8_len(const unsigned char *p, size_t n) {
  unsigned char c = p[0], lo = 0x80, hi = 0xbf;
  size_t len, i;

  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) len = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (n < len || p[1] < lo || p[1] > hi) return 0;
  for (i = 2; i < len; i++)
    if (p[i] < 0x80 || p[i] > 0xbf) return 0;
  return len;
}

/* Writes the escape for byte c (a quote, a backslash or a control
 * character) and returns 1, or returns 0 when c needs no escape. */
static int put_escape(sink_t *o, unsigned char c) {
  char tmp[8];
  switch (c) {
  case '"': puts0(o, "\\\""); return 1;
  case '\\': puts0(o, "\\\\"); return 1;
  case '\n': puts0(o, "\\n"); return 1;
  case '\r': puts0(o, "\\r"); return 1;
  case '\t': puts0(o, "\\t"); return 1;
  default:
    if (c < 0x20 || c == 0x7f) {
      snprintf(tmp, sizeof(tmp), "\\u%04x", c);
      puts0(o, tmp);
      return 1;
    }
    return 0;
  }
}

/* Writes s[0..n) between double quotes. Invalid UTF-8 bytes become \xNN in
 * logfmt and U+FFFD in JSON (which must stay valid UTF-8). */
static void put_quoted(sink_t *o, const char *s, size_t n, int json) {
  const unsigned char *p = (const unsigned char *) s;
  size_t i = 0, run;
  char tmp[8];

  putc1(o, '"');
  while (i < n) {
    if (p[i] < 0x80) {
      if (!put_escape(o, p[i])) putc1(o, (char) p[i]);
      i++;
      continue;
    }
    run = utf8_len(p + i, n - i);
    if (run) {
      put(o, s + i, run);
      i += run;
    } else {
      if (json) puts0(o, "\\ufffd");
      else {
        snprintf(tmp, sizeof(tmp), "\\x%02x", p[i]);
        puts0(o, tmp);
      }
      i++;
    }
  }
  putc1(o, '"');
}

/* True when a logfmt value must be quoted: empty, or holding a space, a
 * quote, '=', a backslash, a control character or invalid UTF-8. */
static int needs_quote(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *) s;
  size_t i = 0, run;
  if (n == 0) return 1;
  while (i < n) {
    if (p[i] >= 0x80) {
      run = utf8_len(p + i, n - i);
      if (!run) return 1;
      i += run;
      continue;
    }
    if (p[i] <= ' ' || p[i] == '"' || p[i] == '=' || p[i] == '\\' ||
        p[i] == 0x7f)
      return 1;
    i++;
  }
  return 0;
}

/* Writes a logfmt key: bytes that would end or confuse it (spaces, '=',
 * quotes, control characters, invalid UTF-8) become '_'. */
static void put_key(sink_t *o, const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *) s;
  size_t i = 0, run;
  if (n == 0) {
    putc1(o, '_');
    return;
  }
  while (i < n) {
    if (p[i] >= 0x80) {
      run = utf8_len(p + i, n - i);
      if (run) put(o, s + i, run);
      else putc1(o, '_');
      i += run ? run : 1;
      continue;
    }
    if (p[i] <= ' ' || p[i] == '"' || p[i] == '=' || p[i] == 0x7f)
      putc1(o, '_');
    else
      putc1(o, (char) p[i]);
    i++;
  }
}

static int is_reserved(const char *k, size_t n) {
  return (n == 2 && memcmp(k, "ts", 2) == 0) ||
         (n == 5 && memcmp(k, "level", 5) == 0) ||
         (n == 3 && memcmp(k, "msg", 3) == 0);
}

/* Writes ts_ms as RFC 3339 UTC with milliseconds. */
static void put_time(sink_t *o, int64_t ts_ms) {
  int64_t secs = ts_ms / 1000, ms = ts_ms % 1000;
  time_t t;
  struct tm tm;
  char tmp[96];

  if (ms < 0) {
    ms += 1000;
    secs--;
  }
  t = (time_t) secs;
  if (!gmtime_r(&t, &tm)) memset(&tm, 0, sizeof(tm));
  snprintf(tmp, sizeof(tmp), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
           tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
           tm.tm_min, tm.tm_sec, (int) ms);
  puts0(o, tmp);
}

size_t bt_log_format(char *buf, size_t cap, bt_log_format_t fmt,
                     int64_t ts_ms, bt_log_level_t level, const char *msg,
                     size_t msg_len, const bt_log_field_t *fields,
                     size_t nfields) {
  sink_t o = {buf, cap, 0};
  const char *lname = bt_log_level_name(level);
  size_t i;

  if (!msg) msg_len = 0;
  if (fmt == BT_LOG_JSON) {
    puts0(&o, "{\"ts\":\"");
    put_time(&o, ts_ms);
    puts0(&o, "\",\"level\":\"");
    puts0(&o, lname);
    puts0(&o, "\",\"msg\":");
    put_quoted(&o, msg ? msg : "", msg_len, 1);
    for (i = 0; i < nfields; i++) {
      const bt_log_field_t *f = &fields[i];
      putc1(&o, ',');
      if (is_reserved(f->key, f->key_len)) {
        puts0(&o, "\"fields.");
        put(&o, f->key, f->key_len);
        putc1(&o, '"');
      } else {
        put_quoted(&o, f->key, f->key_len, 1);
      }
      putc1(&o, ':');
      if (f->raw) put(&o, f->val, f->val_len);
      else put_quoted(&o, f->val, f->val_len, 1);
    }
    puts0(&o, "}\n");
  } else {
    puts0(&o, "ts=");
    put_time(&o, ts_ms);
    puts0(&o, " level=");
    puts0(&o, lname);
    puts0(&o, " msg=");
    put_quoted(&o, msg ? msg : "", msg_len, 0);
    for (i = 0; i < nfields; i++) {
      const bt_log_field_t *f = &fields[i];
      putc1(&o, ' ');
      if (is_reserved(f->key, f->key_len)) puts0(&o, "fields.");
      put_key(&o, f->key, f->key_len);
      putc1(&o, '=');
      if (needs_quote(f->val, f->val_len))
        put_quoted(&o, f->val, f->val_len, 0);
      else
        put(&o, f->val, f->val_len);
    }
    putc1(&o, '\n');
  }
  if (cap > 0) buf[o.len < cap ? o.len : cap - 1] = '\0';
  return o.len;
}

static int field_cmp(const void *a, const void *b) {
  const bt_log_field_t *x = a, *y = b;
  size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
  int c = memcmp(x->key, y->key, n);
  if (c) return c;
  return (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

void bt_log_sort(bt_log_field_t *fields, size_t nfields) {
  if (nfields > 1) qsort(fields, nfields, sizeof(*fields), field_cmp);
}

const char *bt_log_level_name(bt_log_level_t level) {
  if ((int) level < BT_LOG_DEBUG || level > BT_LOG_ERROR) return "info";
  return level_names[level];
}

int bt_log_level_parse(const char *s, bt_log_level_t *out) {
  int i;
  if (!s) return BT_EINVAL;
  for (i = BT_LOG_DEBUG; i <= BT_LOG_ERROR; i++) {
    if (strcasecmp(s, level_names[i]) == 0) {
      *out = (bt_log_level_t) i;
      return 0;
    }
  }
  if (strcasecmp(s, "warning") == 0) {
    *out = BT_LOG_WARN;
    return 0;
  }
  return BT_EINVAL;
}

int bt_log_format_parse(const char *s, bt_log_format_t *out) {
  if (!s) return BT_EINVAL;
  if (strcasecmp(s, "logfmt") == 0 || strcasecmp(s, "text") == 0) {
    *out = BT_LOG_LOGFMT;
    return 0;
  }
  if (strcasecmp(s, "json") == 0) {
    *out = BT_LOG_JSON;
    return 0;
  }
  return BT_EINVAL;
}

/* The process-wide configuration. baton runs one thread per process. */
static int log_inited;
static bt_log_level_t log_level = BT_LOG_INFO;
static bt_log_format_t log_format = BT_LOG_LOGFMT;

void bt_log_init(void) {
  const char *lv, *fm;
  int bad_level = 0, bad_format = 0;
  bt_log_field_t f;

  if (log_inited) return;
  log_inited = 1;
  lv = getenv("BATON_LOG_LEVEL");
  fm = getenv("BATON_LOG_FORMAT");
  if (lv && *lv && bt_log_level_parse(lv, &log_level)) bad_level = 1;
  if (fm && *fm && bt_log_format_parse(fm, &log_format)) bad_format = 1;
  if (bad_level) {
    f.key = "value";
    f.key_len = 5;
    f.val = lv;
    f.val_len = strlen(lv);
    f.raw = 0;
    bt_log_write(BT_LOG_WARN,
                 "unknown BATON_LOG_LEVEL (debug|info|warn|error), using info",
                 59, &f, 1);
  }
  if (bad_format) {
    f.key = "value";
    f.key_len = 5;
    f.val = fm;
    f.val_len = strlen(fm);
    f.raw = 0;
    bt_log_write(BT_LOG_WARN,
                 "unknown BATON_LOG_FORMAT (logfmt|json), using logfmt",
                 52, &f, 1);
  }
}

int bt_log_enabled(bt_log_level_t level) {
  bt_log_init();
  return level >= log_level;
}

/* Writes all of p to fd, retrying on EINTR and short writes. */
static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    n -= (size_t) w;
  }
}

void bt_log_write(bt_log_level_t level, const char *msg, size_t msg_len,
                  const bt_log_field_t *fields, size_t nfields) {
  char small[2048], *line = small;
  size_t n;
  struct timespec ts;
  int64_t ms;

  if (!bt_log_enabled(level)) return;
  clock_gettime(CLOCK_REALTIME, &ts);
  ms = (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  n = bt_log_format(small, sizeof(small), log_format, ms, level, msg, msg_len,
                    fields, nfields);
  if (n >= sizeof(small)) {
    char *big = malloc(n + 1);
    if (big) {
      bt_log_format(big, n + 1, log_format, ms, level, msg, msg_len, fields,
                    nfields);
      line = big;
    } else {
      /* Out of memory: write what fits, still as one line. */
      n = sizeof(small) - 1;
      small[n - 1] = '\n';
    }
  }
  write_all(2, line, n);
  if (line != small) free(line);
}
