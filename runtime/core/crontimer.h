/*
 * The timer engine for schedules: many thousands of armed cron entries on
 * one libuv loop, behind a single uv_timer_t.
 *
 * - Cron entries are kept on absolute time: each entry's next instant is a
 *   UTC instant computed by bt_cron_next(), in a min-heap; the uv timer is
 *   armed for the earliest one. Nothing ever "sleeps until 02:00".
 * - After an entry fires it is re-armed at the first instant after both its
 *   fire instant and the current second, so a late wake-up (a blocked loop,
 *   a suspend, a forward clock step) fires each late entry once, reporting
 *   the instant that was due; the caller's misfire policy decides about the
 *   instants in between (bt_cron_next() enumerates them).
 * - Wall-clock steps are detected by comparing the wall clock with the
 *   monotonic clock at every wake-up (at least once a second while wall
 *   entries exist). A backward step of more than 3 hours (a clock
 *   correction, not DST: DST never moves UTC) recomputes every cron entry
 *   from the new time; smaller backward steps keep the computed instants,
 *   so nothing fires twice (Vixie cron's rule).
 * - @every entries run on the monotonic clock from when they were added:
 *   DST and clock steps do not move them.
 * - @manual entries are accepted and never fire.
 *
 * Callbacks run on the loop. An entry is re-armed before its callback runs,
 * so the callback may remove it (or any other entry), add entries, or close
 * the engine.
 */
#ifndef BATON_CRONTIMER_H
#define BATON_CRONTIMER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "cron.h"
#include "tz.h"

typedef struct bt_crontimer_s bt_crontimer_t;
typedef struct bt_cronentry_s bt_cronentry_t;

/*
 * An entry is due. fire_ms: the scheduled instant in epoch milliseconds (a
 * whole second for cron entries; for @every the wall-clock time at which
 * the interval elapsed); now_ms: the wall clock when called.
 */
typedef void (*bt_crontimer_cb)(bt_cronentry_t *e, int64_t fire_ms,
                                int64_t now_ms, void *data);

/* A wall clock in epoch microseconds (tests inject one to step it). */
typedef int64_t (*bt_crontimer_clock_fn)(void *arg);

/* Makes an engine on loop. Returns 0 or BT_ENOMEM / a uv error. */
int bt_crontimer_new(uv_loop_t *loop, bt_crontimer_t **out);

/*
 * Arms a copy of schedule c in zone tz (NULL: UTC). cb(data) runs at each
 * instant. Sets *out (may be NULL). Returns 0, BT_ENOMEM, BT_ECLOSED.
 */
int bt_crontimer_add(bt_crontimer_t *t, const bt_cron_t *c,
                     const bt_tz_t *tz, bt_crontimer_cb cb, void *data,
                     bt_cronentry_t **out);

/* Disarms and frees e; its callback never runs again. */
void bt_crontimer_remove(bt_crontimer_t *t, bt_cronentry_t *e);

/* e's next instant in epoch ms (wall clock; for @every, the estimated wall
 * time), or -1 if it will not fire. */
int64_t bt_crontimer_next(const bt_crontimer_t *t, const bt_cronentry_t *e);

/* The number of entries. */
size_t bt_crontimer_count(const bt_crontimer_t *t);

/* Replaces the wall clock (for tests); NULL restores CLOCK_REALTIME. Cron
 * entries are recomputed from the new clock's time. */
void bt_crontimer_set_clock(bt_crontimer_t *t, bt_crontimer_clock_fn fn,
                            void *arg);

/*
 * Frees every entry (no callback runs again) and closes the uv timer; the
 * engine's memory is freed in the handle's close callback, so the loop
 * must run once more. Safe inside a callback.
 */
void bt_crontimer_close(bt_crontimer_t *t);

#endif
