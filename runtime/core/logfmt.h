/*
 * Structured log lines: one call, one line, in logfmt or JSON.
 *
 *   ts=2026-11-29T13:49:01.123Z level=info msg="backup done" bytes=1024 job=db
 *   {"ts":"2026-11-29T13:49:01.123Z","level":"info","msg":"backup done",...}
 *
 * bt_log_format() is pure (no I/O, no globals) so it can be unit tested;
 * bt_log_write() adds the process-wide configuration read from the
 * environment (BATON_LOG_LEVEL, BATON_LOG_FORMAT) and writes to stderr.
 * The Lua binding (lua_log.c) and the node's own logging both go through it.
 */
#ifndef BATON_LOGFMT_H
#define BATON_LOGFMT_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  BT_LOG_DEBUG = 0,
  BT_LOG_INFO,
  BT_LOG_WARN,
  BT_LOG_ERROR
} bt_log_level_t;

typedef enum {
  BT_LOG_LOGFMT = 0,
  BT_LOG_JSON
} bt_log_format_t;

/* One key=value field. val is written as a string unless raw is set: then
 * it is written unquoted in JSON, so it must be a JSON number, true, false
 * or null (use it for Lua numbers and booleans). Neither needs a NUL. */
typedef struct {
  const char *key;
  size_t key_len;
  const char *val;
  size_t val_len;
  int raw;
} bt_log_field_t;

/** Formats one line, ending in "\n", into buf like snprintf: writes at most
 * cap bytes including a terminating NUL (when cap > 0) and returns the
 * length of the whole line. A return value >= cap means the line was cut;
 * a buffer of (return value + 1) bytes holds it. ts_ms is the wall clock in
 * milliseconds since the epoch. Fields are written in the order given;
 * a field named ts, level or msg is written as fields.ts (and so on).
 * Control characters are escaped, so the line never contains a newline
 * before its end; invalid UTF-8 is escaped (logfmt: \xNN) or replaced
 * (JSON: \ufffd). */
size_t bt_log_format(char *buf, size_t cap, bt_log_format_t fmt,
                     int64_t ts_ms, bt_log_level_t level, const char *msg,
                     size_t msg_len, const bt_log_field_t *fields,
                     size_t nfields);

/** Sorts fields by key, bytewise, for stable output. */
void bt_log_sort(bt_log_field_t *fields, size_t nfields);

/** "debug", "info", "warn", "error". */
const char *bt_log_level_name(bt_log_level_t level);

/** Parses a level name (case-insensitive; "warning" is "warn"). Returns 0,
 * or BT_EINVAL for an unknown name. */
int bt_log_level_parse(const char *s, bt_log_level_t *out);

/** Parses "logfmt" (or "text") and "json". Returns 0 or BT_EINVAL. */
int bt_log_format_parse(const char *s, bt_log_format_t *out);

/** Reads BATON_LOG_LEVEL (default info) and BATON_LOG_FORMAT (default
 * logfmt) once per process; later calls do nothing. An unknown value is
 * reported with one warn line and the default is used. bt_log_write and
 * bt_log_enabled call it themselves. */
void bt_log_init(void);

/** True when lines of this level are written. */
int bt_log_enabled(bt_log_level_t level);

/** Formats one line with the current time and writes it to stderr with a
 * single write(2), so lines from several processes do not interleave.
 * Does nothing when the level is filtered out. */
void bt_log_write(bt_log_level_t level, const char *msg, size_t msg_len,
                  const bt_log_field_t *fields, size_t nfields);

#endif
