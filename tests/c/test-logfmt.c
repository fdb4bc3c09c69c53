/*
 * Unit tests of the log line formatter (runtime/core/logfmt.c), printing TAP:
 * logfmt and JSON output, quoting and escaping, UTF-8 handling, reserved
 * keys, truncation, sorting, level/format parsing, and bt_log_write's
 * filtering and single-line output (stderr redirected to a file).
 */
#include "err.h"
#include "logfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int ntests, nfailed;

static void ok(int cond, const char *name) {
  ntests++;
  if (!cond) nfailed++;
  printf("%sok %d - %s\n", cond ? "" : "not ", ntests, name);
}

static void is_str(const char *got, const char *want, const char *name) {
  ok(strcmp(got, want) == 0, name);
  if (strcmp(got, want) != 0)
    fprintf(stderr, "#      got: [%s]\n# expected: [%s]\n", got, want);
}

static void is_int(long long got, long long want, const char *name) {
  ok(got == want, name);
  if (got != want)
    fprintf(stderr, "#      got: %lld\n# expected: %lld\n", got, want);
}

#define TS 1796046541123LL   /* 2026-11-30T13:49:01.123Z */
#define F(k, v) {k, sizeof(k) - 1, v, sizeof(v) - 1, 0}
#define RAW(k, v) {k, sizeof(k) - 1, v, sizeof(v) - 1, 1}

static char out[4096];

static const char *fmt(bt_log_format_t f, bt_log_level_t lv, const char *msg,
                       const bt_log_field_t *fields, size_t n) {
  size_t len = bt_log_format(out, sizeof(out), f, TS, lv, msg, strlen(msg),
                             fields, n);
  if (len >= sizeof(out)) return "(truncated)";
  return out;
}

static void test_logfmt(void) {
  bt_log_field_t f1[] = {F("job", "backup"), RAW("bytes", "1024"),
                         F("path", "/var/db dump"), RAW("ok", "true")};
  bt_log_field_t quoting[] = {
    F("empty", ""), F("eq", "a=b"), F("quote", "say \"hi\""),
    F("bs", "c:\\dir"), F("nl", "two\nlines"), F("tab", "a\tb"),
    F("ctl", "\x01\x7f"), F("utf8", "h\xc3\xa9llo"), F("bad", "x\xffy"),
    F("plain", "simple-value_1.2")};
  bt_log_field_t keys[] = {F("a b", "1"), F("", "2"), F("k=v", "3"),
                           F("q\"", "4")};
  bt_log_field_t reserved[] = {F("msg", "m"), F("level", "l"), F("ts", "t"),
                               F("msgs", "ok")};

  is_str(fmt(BT_LOG_LOGFMT, BT_LOG_INFO, "backup done", f1, 4),
         "ts=2026-11-30T13:49:01.123Z level=info msg=\"backup done\" "
         "job=backup bytes=1024 path=\"/var/db dump\" ok=true\n",
         "logfmt: a line with fields");
  is_str(fmt(BT_LOG_LOGFMT, BT_LOG_WARN, "x", NULL, 0),
         "ts=2026-11-30T13:49:01.123Z level=warn msg=\"x\"\n",
         "logfmt: msg is always quoted, no fields");
  is_str(fmt(BT_LOG_LOGFMT, BT_LOG_ERROR, "a \"b\"\nc\\", NULL, 0),
         "ts=2026-11-30T13:49:01.123Z level=error "
         "msg=\"a \\\"b\\\"\\nc\\\\\"\n",
         "logfmt: msg escapes quote, newline, backslash");
  is_str(fmt(BT_LOG_LOGFMT, BT_LOG_DEBUG, "q", quoting, 10),
         "ts=2026-11-30T13:49:01.123Z level=debug msg=\"q\" empty=\"\" "
         "eq=\"a=b\" quote=\"say \\\"hi\\\"\" bs=\"c:\\\\dir\" "
         "nl=\"two\\nlines\" tab=\"a\\tb\" ctl=\"\\u0001\\u007f\" "
         "utf8=h\xc3\xa9llo bad=\"x\\xffy\" plain=simple-value_1.2\n",
         "logfmt: quoting and escaping of values");
  is_str(fmt(BT_LOG_LOGFMT, BT_LOG_INFO, "k", keys, 4),
         "ts=2026-11-30T13:49:01.123Z level=info msg=\"k\" a_b=1 _=2 k_v=3 "
         "q_=4\n",
         "logfmt: keys are sanitised");
  is_str(fmt(BT_LOG_LOGFMT, BT_LOG_INFO, "r", reserved, 4),
         "ts=2026-11-30T13:49:01.123Z level=info msg=\"r\" fields.msg=m "
         "fields.level=l fields.ts=t msgs=ok\n",
         "logfmt: reserved keys become fields.<key>");
  ok(strchr(out, '\n') == out + strlen(out) - 1, "logfmt: one newline, last");
}

static void test_json(void) {
  bt_log_field_t f1[] = {F("job", "backup"), RAW("bytes", "1024"),
                         RAW("ok", "false"), F("n", "12")};
  bt_log_field_t esc[] = {F("nl", "a\nb"), F("ctl", "\x01\x1f"),
                          F("bad", "x\xff\xc3"), F("utf8", "\xe2\x82\xac"),
                          F("msg", "dup"), F("k\"", "q")};

  is_str(fmt(BT_LOG_JSON, BT_LOG_INFO, "backup done", f1, 4),
         "{\"ts\":\"2026-11-30T13:49:01.123Z\",\"level\":\"info\","
         "\"msg\":\"backup done\",\"job\":\"backup\",\"bytes\":1024,"
         "\"ok\":false,\"n\":\"12\"}\n",
         "json: raw values unquoted, strings quoted");
  is_str(fmt(BT_LOG_JSON, BT_LOG_ERROR, "m\"\\", esc, 6),
         "{\"ts\":\"2026-11-30T13:49:01.123Z\",\"level\":\"error\","
         "\"msg\":\"m\\\"\\\\\",\"nl\":\"a\\nb\",\"ctl\":\"\\u0001\\u001f\","
         "\"bad\":\"x\\ufffd\\ufffd\",\"utf8\":\"\xe2\x82\xac\","
         "\"fields.msg\":\"dup\",\"k\\\"\":\"q\"}\n",
         "json: escapes, invalid UTF-8 replaced, reserved keys renamed");
}

static void test_utf8_edges(void) {
  /* overlong "/" (c0 af), a surrogate (ed a0 80), too high (f4 90 80 80),
   * a valid 4-byte one (f0 9f 98 80) and a cut one at the end (e2 82) */
  bt_log_field_t f[] = {F("o", "\xc0\xaf"), F("s", "\xed\xa0\x80"),
                        F("h", "\xf4\x90\x80\x80"), F("e", "\xf0\x9f\x98\x80"),
                        F("c", "\xe2\x82")};
  is_str(fmt(BT_LOG_LOGFMT, BT_LOG_INFO, "u", f, 5),
         "ts=2026-11-30T13:49:01.123Z level=info msg=\"u\" o=\"\\xc0\\xaf\" "
         "s=\"\\xed\\xa0\\x80\" h=\"\\xf4\\x90\\x80\\x80\" "
         "e=\xf0\x9f\x98\x80 c=\"\\xe2\\x82\"\n",
         "utf8: overlong, surrogate, out of range and cut sequences escaped");
}

static void test_time(void) {
  char buf[256];
  bt_log_format(buf, sizeof(buf), BT_LOG_LOGFMT, 0, BT_LOG_INFO, "e", 1,
                NULL, 0);
  is_str(buf, "ts=1970-01-01T00:00:00.000Z level=info msg=\"e\"\n", "epoch");
  bt_log_format(buf, sizeof(buf), BT_LOG_LOGFMT, -1, BT_LOG_INFO, "e", 1,
                NULL, 0);
  is_str(buf, "ts=1969-12-31T23:59:59.999Z level=info msg=\"e\"\n",
         "before the epoch");
  bt_log_format(buf, sizeof(buf), BT_LOG_LOGFMT, 951782400007LL, BT_LOG_INFO,
                "e", 1, NULL, 0);
  is_str(buf, "ts=2000-02-29T00:00:00.007Z level=info msg=\"e\"\n",
         "leap day, milliseconds zero-padded");
}

static void test_truncation(void) {
  bt_log_field_t f[] = {F("k", "value")};
  char full[256], small[20];
  size_t n = bt_log_format(full, sizeof(full), BT_LOG_LOGFMT, TS, BT_LOG_INFO,
                           "hello", 5, f, 1);
  size_t m = bt_log_format(small, sizeof(small), BT_LOG_LOGFMT, TS,
                           BT_LOG_INFO, "hello", 5, f, 1);
  size_t d = bt_log_format(NULL, 0, BT_LOG_LOGFMT, TS, BT_LOG_INFO, "hello",
                           5, f, 1);
  is_int((long long) n, (long long) strlen(full), "returns the line length");
  is_int((long long) m, (long long) n,
         "a short buffer returns the full length");
  is_int((long long) d, (long long) n, "dry run with a NULL buffer");
  is_int((long long) strlen(small), (long long) sizeof(small) - 1,
         "truncated output is NUL-terminated");
  ok(strncmp(small, full, sizeof(small) - 1) == 0,
     "truncated output is a prefix");
}

static void test_sort(void) {
  bt_log_field_t f[] = {F("b", "1"), F("ab", "2"), F("a", "3"), F("B", "4"),
                        F("aa", "5")};
  char buf[512];
  bt_log_sort(f, 5);
  bt_log_format(buf, sizeof(buf), BT_LOG_LOGFMT, TS, BT_LOG_INFO, "s", 1, f, 5);
  is_str(buf, "ts=2026-11-30T13:49:01.123Z level=info msg=\"s\" B=4 a=3 aa=5 "
         "ab=2 b=1\n", "fields sorted by key, bytewise");
  bt_log_sort(f, 0);
  bt_log_sort(NULL, 0);
  ok(1, "sorting nothing is fine");
}

static void test_parse(void) {
  bt_log_level_t lv = BT_LOG_ERROR;
  bt_log_format_t fm = BT_LOG_JSON;
  ok(bt_log_level_parse("debug", &lv) == 0 && lv == BT_LOG_DEBUG,
     "level debug");
  ok(bt_log_level_parse("WARN", &lv) == 0 && lv == BT_LOG_WARN, "level WARN");
  ok(bt_log_level_parse("warning", &lv) == 0 && lv == BT_LOG_WARN,
     "level warning");
  ok(bt_log_level_parse("Error", &lv) == 0 && lv == BT_LOG_ERROR,
     "level Error");
  is_int(bt_log_level_parse("verbose", &lv), BT_EINVAL,
         "unknown level: EINVAL");
  is_int(bt_log_level_parse(NULL, &lv), BT_EINVAL, "NULL level: EINVAL");
  ok(bt_log_format_parse("logfmt", &fm) == 0 && fm == BT_LOG_LOGFMT, "logfmt");
  ok(bt_log_format_parse("JSON", &fm) == 0 && fm == BT_LOG_JSON, "JSON");
  is_int(bt_log_format_parse("xml", &fm), BT_EINVAL, "unknown format: EINVAL");
  is_str(bt_log_level_name(BT_LOG_WARN), "warn", "level name");
}

/* bt_log_write with BATON_LOG_LEVEL=warn and BATON_LOG_FORMAT=json, stderr
 * sent to a temporary file. */
static void test_write(void) {
  char path[] = "/tmp/baton-test-logfmt-XXXXXX", buf[8192], big[5000];
  bt_log_field_t f[] = {F("k", "v"), {"big", 3, big, sizeof(big), 0}};
  int fd = mkstemp(path), saved = dup(2), lines = 0;
  ssize_t n;
  char *p;

  memset(big, 'x', sizeof(big));
  setenv("BATON_LOG_LEVEL", "warn", 1);
  setenv("BATON_LOG_FORMAT", "json", 1);
  bt_log_init();
  ok(!bt_log_enabled(BT_LOG_INFO) && bt_log_enabled(BT_LOG_WARN) &&
     bt_log_enabled(BT_LOG_ERROR), "BATON_LOG_LEVEL=warn filters info");
  dup2(fd, 2);
  bt_log_write(BT_LOG_INFO, "hidden", 6, NULL, 0);
  bt_log_write(BT_LOG_WARN, "shown\nstill one line", 20, f, 1);
  bt_log_write(BT_LOG_ERROR, "long", 4, f, 2);
  dup2(saved, 2);
  close(saved);
  n = pread(fd, buf, sizeof(buf) - 1, 0);
  close(fd);
  unlink(path);
  buf[n > 0 ? n : 0] = '\0';
  for (p = buf; (p = strchr(p, '\n')); p++) lines++;
  is_int(lines, 2, "two lines written, the info one filtered");
  ok(strstr(buf, "\"level\":\"warn\",\"msg\":\"shown\\nstill one line\","
             "\"k\":\"v\"}\n") != NULL, "json line written");
  ok(strstr(buf, "hidden") == NULL, "filtered line not written");
  ok(n > 5000 && strstr(buf, "\"msg\":\"long\"") && buf[n - 1] == '\n',
     "a line longer than the stack buffer is written whole");
}

int main(void) {
  test_logfmt();
  test_json();
  test_utf8_edges();
  test_time();
  test_truncation();
  test_sort();
  test_parse();
  test_write();
  printf("1..%d\n", ntests);
  return nfailed ? 1 : 0;
}
