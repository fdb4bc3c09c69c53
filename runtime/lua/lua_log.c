/*
 * baton.log: info, warn, error, debug. Each call writes one structured line
 * to stderr through bt_log_write (logfmt.h), with the fields sorted by key.
 *
 *   baton.log.info("backup done", {job = "db", bytes = 1024})
 *
 * baton._log_filter(fn | nil): fn(text) -> text is applied to the message,
 * to every field's name and to every field's text before a line is
 * written (a number or boolean whose text the filter changes is written as
 * the filter's string); a worker sets it for a run to redact its secrets
 * (lua/baton/worker/main.lua). fn must not wait.
 */
#include "logfmt.h"
#include "lua_mod.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <string.h>

/* Pushes the text logged for the value at idx: strings as they are,
 * numbers (integers without a fraction) and booleans as raw literals,
 * anything else through __tostring or as "<type>: <address>". Sets *raw. */
static const char *push_value(lua_State *L, int idx, size_t *len, int *raw) {
  char tmp[64];
  lua_Number n;

  *raw = 0;
  switch (lua_type(L, idx)) {
  case LUA_TSTRING:
    lua_pushvalue(L, idx);
    break;
  case LUA_TNUMBER:
    n = lua_tonumber(L, idx);
    if (n != n || n - n != 0) {   /* nan, inf: not JSON numbers */
      lua_pushstring(L, n != n ? "nan" : n > 0 ? "inf" : "-inf");
      break;
    }
    if (n > -9007199254740992.0 && n < 9007199254740992.0 &&
        n == (lua_Number) (long long) n)
      snprintf(tmp, sizeof(tmp), "%lld", (long long) n);
    else
      snprintf(tmp, sizeof(tmp), "%.14g", n);
    lua_pushstring(L, tmp);
    *raw = 1;
    break;
  case LUA_TBOOLEAN:
    lua_pushstring(L, lua_toboolean(L, idx) ? "true" : "false");
    *raw = 1;
    break;
  case LUA_TNIL:
    lua_pushliteral(L, "null");
    *raw = 1;
    break;
  default:
    if (luaL_callmeta(L, idx, "__tostring")) {
      if (lua_type(L, -1) == LUA_TSTRING) break;
      lua_pop(L, 1);
    }
    lua_pushfstring(L, "%s: %p", luaL_typename(L, idx),
                    lua_topointer(L, idx));
    break;
  }
  return lua_tolstring(L, -1, len);
}

#define LOG_FILTER "baton.log_filter"

/* Replaces the string on top of the stack by what the log filter makes of
 * it, if a filter is set. Returns 1 when the filter changed it. */
static int filter_top(lua_State *L) {
  int changed;
  lua_getfield(L, LUA_REGISTRYINDEX, LOG_FILTER); /* stack: ... text filter */
  if (!lua_isfunction(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  lua_pushvalue(L, -2);
  lua_call(L, 1, 1); /* stack: ... text filtered */
  if (lua_type(L, -1) != LUA_TSTRING) {
    lua_pop(L, 1);
    lua_pushliteral(L, "(the log filter returned no string)");
  }
  changed = !lua_rawequal(L, -1, -2);
  lua_remove(L, -2);
  return changed;
}

/* baton.log.<level>(msg [, fields]); the level is upvalue 1. */
static int log_call(lua_State *L) {
  bt_log_level_t level = (bt_log_level_t) lua_tointeger(L, lua_upvalueindex(1));
  const char *name = bt_log_level_name(level);
  bt_log_field_t *fields = NULL;
  const char *msg;
  size_t msg_len, n = 0, i;
  int t;

  t = lua_type(L, 1);
  if (t != LUA_TSTRING && t != LUA_TNUMBER)
    return luaL_error(L, "baton.log.%s: msg must be a string (got %s)", name,
                      luaL_typename(L, 1));
  t = lua_type(L, 2);
  if (t != LUA_TNONE && t != LUA_TNIL && t != LUA_TTABLE)
    return luaL_error(L, "baton.log.%s: fields must be a table (got %s)",
                      name, luaL_typename(L, 2));
  if (!bt_log_enabled(level)) return 0;
  lua_settop(L, 2);
  lua_pushvalue(L, 1);
  lua_tostring(L, -1);
  filter_top(L);
  lua_replace(L, 1);
  msg = lua_tolstring(L, 1, &msg_len);

  if (t == LUA_TTABLE) {
    /* anchor holds key, text, raw for each field, so the strings stay
     * reachable whatever a __tostring does to the fields table */
    lua_newtable(L);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      /* stack: msg fields anchor key value */
      int raw;
      size_t len;
      if (lua_type(L, -2) != LUA_TSTRING)
        return luaL_error(L, "baton.log.%s: field names must be strings "
                          "(got %s)", name, luaL_typename(L, -2));
      lua_pushvalue(L, -2);
      filter_top(L);
      lua_rawseti(L, 3, (int) (3 * n + 1));
      push_value(L, lua_gettop(L), &len, &raw);
      if (filter_top(L)) raw = 0;
      lua_rawseti(L, 3, (int) (3 * n + 2));
      lua_pushboolean(L, raw);
      lua_rawseti(L, 3, (int) (3 * n + 3));
      lua_pop(L, 1);
      n++;
    }
  }
  if (n) {
    fields = lua_newuserdata(L, n * sizeof(*fields));
    for (i = 0; i < n; i++) {
      bt_log_field_t *f = &fields[i];
      lua_rawgeti(L, 3, (int) (3 * i + 1));
      lua_rawgeti(L, 3, (int) (3 * i + 2));
      lua_rawgeti(L, 3, (int) (3 * i + 3));
      f->key = lua_tolstring(L, -3, &f->key_len);
      f->val = lua_tolstring(L, -2, &f->val_len);
      f->raw = lua_toboolean(L, -1);
      lua_pop(L, 3);
    }
    bt_log_sort(fields, n);
  }
  bt_log_write(level, msg, msg_len, fields, n);
  return 0;
}

static int l_log_filter(lua_State *L) {
  if (!lua_isnoneornil(L, 1)) luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, LOG_FILTER);
  return 0;
}

int bt_lua_open_log(lua_State *L) {
  static const struct {
    const char *name;
    bt_log_level_t level;
  } fns[] = {{"debug", BT_LOG_DEBUG}, {"info", BT_LOG_INFO},
             {"warn", BT_LOG_WARN}, {"error", BT_LOG_ERROR}};
  size_t i;

  bt_log_init();
  /* stack: baton */
  lua_newtable(L);
  for (i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
    lua_pushinteger(L, fns[i].level);
    lua_pushcclosure(L, log_call, 1);
    lua_setfield(L, -2, fns[i].name);
  }
  lua_setfield(L, -2, "log");
  lua_pushcfunction(L, l_log_filter);
  lua_setfield(L, -2, "_log_filter");
  return 0;
}
