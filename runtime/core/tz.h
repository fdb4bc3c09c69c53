/*
 * IANA time zones, read from the system's compiled zoneinfo (TZif files).
 *
 * Why a TZif reader and not ICU: the TZif files under /usr/share/zoneinfo
 * (Debian package tzdata) are the zone data every other program on the
 * machine uses and they are updated by the distribution's tzdata package,
 * independently of any library release; ICU carries its own copy of the data
 * (often older than tzdata), is a large C++ dependency, and its C calendar
 * API is much slower for the one question the scheduler asks millions of
 * times: "which UTC offset is in force at instant t, and when does that
 * change". The format is small and fully specified (RFC 8536); tz.c reads
 * version 1-4 files defensively (every count and index is checked, the
 * 64-bit block is used, the POSIX TZ footer extends the table past its last
 * transition, files with leap seconds are refused).
 *
 * A zone is loaded once and cached for the life of the process; the pointers
 * bt_tz_load() returns stay valid until bt_tz_cache_free(). The cache is not
 * thread-safe: baton has one loop per process.
 */
#ifndef BATON_TZ_H
#define BATON_TZ_H

#include <stddef.h>
#include <stdint.h>

typedef struct bt_tz_s bt_tz_t;

/*
 * A span of UTC time during which a zone's offset is constant: it starts at
 * `start` (INT64_MIN if it reaches back forever) and ends before `end`
 * (INT64_MAX if it lasts forever). `prev_utoff` is the offset in force just
 * before `start` (equal to `utoff` for the first span). Offsets are seconds
 * east of UTC. Adjacent spans always have different offsets.
 */
typedef struct {
  int64_t start;
  int64_t end;
  int32_t utoff;
  int32_t prev_utoff;
} bt_tz_span_t;

/* The first and last second baton handles: 0001-01-01 .. 9999-12-31 UTC. */
#define BT_TZ_MIN_TIME INT64_C(-62135596800)
#define BT_TZ_MAX_TIME INT64_C(253402300799)

/*
 * Loads the zone `name` ("Europe/Berlin", "UTC"), or finds it in the cache.
 * "UTC" (and "Etc/UTC", "Z") work even without zoneinfo. The directory is
 * $TZDIR, else /usr/share/zoneinfo. Returns 0 and sets *out, or BT_ETZ for an
 * unknown or unreadable zone or a malformed name, BT_ENOMEM.
 */
int bt_tz_load(const char *name, const bt_tz_t **out);

/* The built-in UTC zone; never fails. */
const bt_tz_t *bt_tz_utc(void);

/* The zone's name as given to bt_tz_load(). */
const char *bt_tz_name(const bt_tz_t *tz);

/* Fills *span with the span that contains the UTC instant t. */
void bt_tz_span(const bt_tz_t *tz, int64_t t, bt_tz_span_t *span);

/* The offset (seconds east of UTC) in force at the UTC instant t. */
int32_t bt_tz_offset(const bt_tz_t *tz, int64_t t);

/*
 * Converts a local wall-clock time (seconds since 1970-01-01T00:00 on the
 * zone's clock) to a UTC instant, the way schedules do: a time in a
 * fall-back overlap resolves to its first occurrence; a time in a
 * spring-forward gap is shifted forward by the gap's length.
 */
int64_t bt_tz_local_to_utc(const bt_tz_t *tz, int64_t local);

/*
 * Writes t as RFC 3339 with the zone's offset (2026-03-08T03:30:00-04:00, or
 * ...Z in UTC) to buf, NUL-terminated. Offsets that are not whole minutes
 * (local mean time before 1900) print their seconds too (-04:56:02), which
 * RFC 3339 cannot express. Returns the length, or BT_EINVAL if buf is too
 * small (32 bytes always suffice) or t is outside BT_TZ_MIN/MAX_TIME.
 */
int bt_tz_format(const bt_tz_t *tz, int64_t t, char *buf, size_t len);

/* Frees every cached zone; only for leak checkers at exit. */
void bt_tz_cache_free(void);

/* Calendar helpers shared with cron.c: proleptic Gregorian, 1970-based. */
int64_t bt_tz_days_from_civil(int64_t y, int m, int d);
void bt_tz_civil_from_days(int64_t days, int64_t *y, int *m, int *d);

#endif
