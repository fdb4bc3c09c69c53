/*
 * baton.cron(expr [, tz]) -> a schedule with :next([after]) and
 * :next_n(n [, after]); times are epoch seconds.
 *
 *   local c = baton.cron("30 2 * * *", "America/New_York")
 *   c:next()              --> first instant after now
 *   c:next(1772953200)    --> first instant after that
 *   c:next_n(5)           --> {t1, ..., t5}
 *
 * An invalid expression or an unknown zone raises with the same text as
 * `baton cron` prints (without "baton: "). :next returns nil for @manual
 * (and when no instant exists before year 10000); :next_n returns a
 * shorter list then. For @every the interval is added to `after` as given
 * (fractions kept), as the node's timetable does on the node's clock.
 *
 * The userdata holds the parsed schedule by value (no heap memory, no
 * handles: zones are cached for the process's life), so there is nothing
 * to close and no __gc.
 */
#include "cron.h"
#include "err.h"
#include "lua_mod.h"
#include "tz.h"

#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <string.h>
#include <time.h>

#define MT "baton.cron"
#define MAX_N 1000000

typedef struct {
  bt_cron_t cron;
  const bt_tz_t *tz;
  char expr[];                          /* for __tostring */
} lcron_t;

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* baton.cron(expr [, tz]) */
static int l_cron(lua_State *L) {
  size_t len;
  const char *expr = luaL_checklstring(L, 1, &len);
  const char *zone = luaL_optstring(L, 2, "UTC");
  const bt_tz_t *tz;
  bt_cron_t c;
  char err[512];
  if (strlen(expr) != len)
    return luaL_error(L, "invalid cron expression: it contains a NUL byte");
  if (bt_tz_load(zone, &tz) < 0)
    return luaL_error(L, "unknown time zone \"%s\"", zone);
  if (bt_cron_parse(&c, expr, err, sizeof err) < 0)
    return luaL_error(L, "%s", err);
  lcron_t *u = lua_newuserdata(L, sizeof *u + len + 1);
  u->cron = c;
  u->tz = tz;
  memcpy(u->expr, expr, len + 1);
  luaL_getmetatable(L, MT);
  lua_setmetatable(L, -2);
  return 1;
}

/* The `after` argument at index i: a finite number, default now. */
static double opt_after(lua_State *L, int i) {
  double a = lua_isnoneornil(L, i) ? now_seconds() : luaL_checknumber(L, i);
  if (!isfinite(a) || a < (double)BT_TZ_MIN_TIME ||
      a > (double)BT_TZ_MAX_TIME)
    luaL_argerror(L, i, "epoch seconds between years 1 and 9999 expected");
  return a;
}

/* Pushes the instant after `after`, or returns 0 if there is none. */
static int push_next(lua_State *L, const lcron_t *u, double *after) {
  int64_t t;
  if (u->cron.kind == BT_CRON_EVERY) {
    double n = *after + (double)u->cron.every;
    if (n > (double)BT_TZ_MAX_TIME) return 0;
    lua_pushnumber(L, n);
    *after = n;
    return 1;
  }
  if (bt_cron_next(&u->cron, u->tz, (int64_t)floor(*after), &t) < 0)
    return 0;
  lua_pushnumber(L, (lua_Number)t);
  *after = (double)t;
  return 1;
}

/* c:next([after]) */
static int l_next(lua_State *L) {
  lcron_t *u = luaL_checkudata(L, 1, MT);
  double after = opt_after(L, 2);
  if (!push_next(L, u, &after)) lua_pushnil(L);
  return 1;
}

/* c:next_n(n [, after]) */
static int l_next_n(lua_State *L) {
  lcron_t *u = luaL_checkudata(L, 1, MT);
  lua_Number nn = luaL_checknumber(L, 2);
  double after = opt_after(L, 3);
  if (!(nn >= 0 && nn <= MAX_N) || nn != floor(nn))
    return luaL_argerror(L, 2, "count from 0 to 1000000 expected");
  int n = (int)nn;
  lua_createtable(L, n < 1024 ? n : 1024, 0);
  for (int i = 1; i <= n && push_next(L, u, &after); i++)
    lua_rawseti(L, -2, i);
  return 1;
}

/* c:format(t): the instant t (epoch seconds) as RFC 3339 with the offset
 * of the schedule's zone, as `baton cron` prints it. */
static int l_format(lua_State *L) {
  lcron_t *u = luaL_checkudata(L, 1, MT);
  lua_Number t = luaL_checknumber(L, 2);
  char buf[48];
  if (t != t || t < (lua_Number)BT_TZ_MIN_TIME || t > (lua_Number)BT_TZ_MAX_TIME)
    return luaL_argerror(L, 2, "instant out of range");
  if (bt_tz_format(u->tz, (int64_t)floor(t), buf, sizeof(buf)) < 0)
    return luaL_argerror(L, 2, "instant out of range");
  lua_pushstring(L, buf);
  return 1;
}

static int l_tostring(lua_State *L) {
  lcron_t *u = luaL_checkudata(L, 1, MT);
  lua_pushfstring(L, "baton.cron(\"%s\", \"%s\")", u->expr,
                  bt_tz_name(u->tz));
  return 1;
}

/* c.expr, c.tz, and the methods */
static int l_index(lua_State *L) {
  lcron_t *u = luaL_checkudata(L, 1, MT);
  const char *k = luaL_checkstring(L, 2);
  if (!strcmp(k, "expr")) {
    lua_pushstring(L, u->expr);
  } else if (!strcmp(k, "tz")) {
    lua_pushstring(L, bt_tz_name(u->tz));
  } else {
    lua_getmetatable(L, 1);             /* stack: u k mt */
    lua_getfield(L, -1, "methods");     /* stack: u k mt methods */
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);                  /* stack: u k mt methods v */
  }
  return 1;
}

int bt_lua_open_cron(lua_State *L) {
  static const luaL_Reg methods[] = {
    { "next", l_next },
    { "next_n", l_next_n },
    { "format", l_format },
    { NULL, NULL },
  };
  /* stack: baton */
  if (luaL_newmetatable(L, MT)) {       /* stack: baton mt */
    lua_newtable(L);
    luaL_register(L, NULL, methods);
    lua_setfield(L, -2, "methods");
    lua_pushcfunction(L, l_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, MT);
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);                        /* stack: baton */
  lua_pushcfunction(L, l_cron);
  lua_setfield(L, -2, "cron");
  return 0;
}
