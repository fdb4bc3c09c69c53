/*
 * Cron expressions: parsing and the next matching instant in a time zone.
 *
 * The dialect (docs/schedules.md has the whole of it): 5 fields (minute hour
 * day-of-month month day-of-week) or 6 with seconds first; numbers, names,
 * `*`, `?`, lists, ranges, steps, `L`, `LW`, `nW`, `nL`, `n#k`; descriptors
 * @yearly @annually @monthly @weekly @daily @midnight @hourly, @every
 * <duration> and @manual. Day-of-month and day-of-week combine the Vixie way:
 * AND when either field starts with `*` (or `?`), OR otherwise.
 *
 * Time zones and DST: a matching wall-clock time that falls in a
 * spring-forward gap fires once, shifted forward by the gap's length; in a
 * fall-back overlap a schedule whose hour field does not start with `*`
 * fires once, at the first occurrence, and one whose hour field starts with
 * `*` fires at every real instant whose wall-clock time matches.
 *
 * A parsed expression is a small value (no heap memory); copy it freely.
 */
#ifndef BATON_CRON_H
#define BATON_CRON_H

#include <stddef.h>
#include <stdint.h>

#include "tz.h"

typedef enum {
  BT_CRON_FIELDS = 0,                   /* a field expression */
  BT_CRON_EVERY,                        /* @every <duration> */
  BT_CRON_MANUAL                        /* @manual: never fires by itself */
} bt_cron_kind_t;

/* flags */
#define BT_CRON_DOM_STAR 0x01           /* day-of-month starts with * or ? */
#define BT_CRON_DOW_STAR 0x02           /* day-of-week starts with * or ? */
#define BT_CRON_HOUR_STAR 0x04          /* hour starts with * */
#define BT_CRON_DOM_L 0x08              /* L: last day of the month */
#define BT_CRON_DOM_LW 0x10             /* LW: last weekday of the month */

typedef struct {
  uint64_t sec;                         /* bits 0-59 */
  uint64_t min;                         /* bits 0-59 */
  uint32_t hour;                        /* bits 0-23 */
  uint32_t dom;                         /* bits 1-31: plain days */
  uint32_t dom_w;                       /* bits 1-31: nW, nearest weekday */
  uint16_t month;                       /* bits 1-12 */
  uint8_t dow;                          /* bits 0-6, 0 = Sunday */
  uint8_t dow_last;                     /* bits 0-6: nL, last such weekday */
  uint8_t dow_nth[7];                   /* per weekday, bits 1-5: n#k */
  uint8_t flags;
  uint8_t kind;                         /* bt_cron_kind_t */
  int64_t every;                        /* seconds, for BT_CRON_EVERY */
  uint32_t dow_days[7];                 /* plain dow as days 1-31 of a month
                                           whose 1st has weekday i */
} bt_cron_t;

/*
 * Parses expr into *c. Returns 0, or BT_ECRON with a one-line message in err
 * (if errlen > 0), without any "baton: " prefix:
 *   invalid cron expression "0 25 * * *": field 2 (hour) at column 3: 25 is
 *   out of range 0-23
 * Columns count bytes from 1. An expression that can never match a date
 * (`0 0 30 2 *`) is rejected too.
 */
int bt_cron_parse(bt_cron_t *c, const char *expr, char *err, size_t errlen);

/*
 * Sets *next to the first instant (epoch seconds) strictly after `after` at
 * which c fires in zone tz (NULL means UTC). For @every it is after + the
 * interval (the node's timetable counts it that way, on the node's clock).
 * Returns 0; BT_ENOENT for @manual or when no instant exists before year
 * 10000; BT_EINVAL when after is outside BT_TZ_MIN_TIME..BT_TZ_MAX_TIME.
 */
int bt_cron_next(const bt_cron_t *c, const bt_tz_t *tz, int64_t after,
                 int64_t *next);

#endif
