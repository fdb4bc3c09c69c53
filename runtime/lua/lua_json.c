/*
 * baton.json: encode/decode with cJSON, and the conversions the other
 * bindings use. A Lua table whose keys are exactly 1..n is an array; an
 * empty table is an object unless it carries baton.json.array's metatable;
 * baton.json.null stands for JSON null.
 *
 * NUL bytes (jsonnul.h): cJSON's strings end at a NUL. decode gives
 * strings exactly, a NUL byte (\u0000) included: a text with \u0000 is
 * parsed with each of them written as a private-use character the text
 * does not hold, which is turned back into a NUL as the strings are
 * pushed; a raw NUL byte in the text is invalid JSON. encode refuses a
 * string or key that holds a NUL byte. With {nul = "replace"} each such
 * NUL becomes U+FFFD instead, both ways: for records of what happened (an
 * error, a name read from etcd), where a marked byte beats a lost record.
 */
#include "lua_json.h"
#include "jsonnul.h"
#include "lua_mod.h"
#include "rt.h"
#include "err.h"

#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NULL_KEY "baton.json.null"
#define ARRAY_MT "baton.json.array"
#define MAX_DEPTH 200

/* How to_json treats a NUL byte in a string or key. */
enum { NUL_ERROR, NUL_REPLACE };

static void push_null(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, NULL_KEY);
}

/* Pushes string s; with mark (bt_json_nul_prepare), each mark in it is a
 * NUL byte (s is changed in place). */
static void push_str(lua_State *L, char *s, const char *mark) {
  if (mark) lua_pushlstring(L, s, bt_json_nul_restore(s, mark));
  else lua_pushstring(L, s);
}

static void push_json(lua_State *L, const cJSON *j, const char *nul) {
  const cJSON *c;
  int i = 1;
  luaL_checkstack(L, 4, "json too deep");
  switch (j->type & 0xff) {
  case cJSON_False: lua_pushboolean(L, 0); break;
  case cJSON_True: lua_pushboolean(L, 1); break;
  case cJSON_NULL: push_null(L); break;
  case cJSON_Number: lua_pushnumber(L, j->valuedouble); break;
  case cJSON_String: push_str(L, j->valuestring, nul); break;
  case cJSON_Array:
    lua_createtable(L, cJSON_GetArraySize(j), 0);
    for (c = j->child; c; c = c->next) {
      push_json(L, c, nul);
      lua_rawseti(L, -2, i++);
    }
    if (i == 1) luaL_setmetatable(L, ARRAY_MT);
    break;
  case cJSON_Object:
    lua_newtable(L);
    for (c = j->child; c; c = c->next) {
      push_str(L, c->string, nul);
      push_json(L, c, nul);
      lua_rawset(L, -3);
    }
    break;
  default: lua_pushnil(L);
  }
}

void bt_lua_push_json(lua_State *L, const cJSON *j) {
  push_json(L, j, NULL);
}

static int is_null(lua_State *L, int idx) {
  int r;
  push_null(L);
  r = lua_rawequal(L, idx < 0 ? idx - 1 : idx, -1);
  lua_pop(L, 1);
  return r;
}

/* Array length if the table at idx is a proper array (keys 1..n), else -1. */
static int array_len(lua_State *L, int idx) {
  int n = 0, max = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TNUMBER) {
      double k = lua_tonumber(L, -1);
      if (k >= 1 && k == floor(k) && k < 1e9) {
        n++;
        if (k > max) max = (int) k;
        continue;
      }
    }
    lua_pop(L, 1);
    return -1;
  }
  return n == max ? n : -1;
}

/* A copy of the n bytes at s with each NUL as U+FFFD, NUL-terminated
 * (malloc'd: the caller frees), or NULL when out of memory. */
static char *nul_replaced(const char *s, size_t n) {
  char *c = malloc(3 * n + 1);
  if (c) bt_json_nul_replace(s, n, c);
  return c;
}

/* A cJSON string of the n bytes at s (which hold a NUL) under nul, or
 * NULL with err written. */
static cJSON *nul_string(const char *s, size_t n, int nul, char *err, size_t len) {
  char *c;
  cJSON *j;
  if (nul != NUL_REPLACE) {
    snprintf(err, len, "cannot encode a string with a NUL byte");
    return NULL;
  }
  if (!(c = nul_replaced(s, n))) {
    snprintf(err, len, "out of memory");
    return NULL;
  }
  j = cJSON_CreateString(c);
  free(c);
  if (!j) snprintf(err, len, "out of memory");
  return j;
}

static cJSON *to_json(lua_State *L, int idx, int depth, int nul, char *err, size_t len) {
  cJSON *j = NULL;
  if (idx < 0) idx = lua_gettop(L) + idx + 1;
  if (depth > MAX_DEPTH) {
    snprintf(err, len, "table nested too deep (or a cycle)");
    return NULL;
  }
  switch (lua_type(L, idx)) {
  case LUA_TNIL: return cJSON_CreateNull();
  case LUA_TBOOLEAN: return cJSON_CreateBool(lua_toboolean(L, idx));
  case LUA_TNUMBER: {
    double d = lua_tonumber(L, idx);
    if (!isfinite(d)) {
      snprintf(err, len, "cannot encode %s number", isnan(d) ? "NaN" : "infinite");
      return NULL;
    }
    return cJSON_CreateNumber(d);
  }
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    if (memchr(s, '\0', n)) return nul_string(s, n, nul, err, len);
    return cJSON_CreateString(s);
  }
  case LUA_TTABLE: {
    int n;
    if (is_null(L, idx)) return cJSON_CreateNull();
    luaL_checkstack(L, 6, "json too deep");
    n = array_len(L, idx);
    if (n == 0) {
      int arr = 0;
      if (lua_getmetatable(L, idx)) {
        luaL_getmetatable(L, ARRAY_MT);
        arr = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
      }
      return arr ? cJSON_CreateArray() : cJSON_CreateObject();
    }
    if (n > 0) {
      int i;
      j = cJSON_CreateArray();
      for (i = 1; i <= n; i++) {
        cJSON *c;
        lua_rawgeti(L, idx, i);
        c = to_json(L, -1, depth + 1, nul, err, len);
        lua_pop(L, 1);
        if (!c) {
          cJSON_Delete(j);
          return NULL;
        }
        cJSON_AddItemToArray(j, c);
      }
      return j;
    }
    j = cJSON_CreateObject();
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      cJSON *c;
      const char *k;
      char *kc = NULL;
      size_t kn;
      if (lua_type(L, -2) == LUA_TSTRING) {
        k = lua_tolstring(L, -2, &kn);
        if (memchr(k, '\0', kn)) {
          if (nul != NUL_REPLACE || !(kc = nul_replaced(k, kn))) {
            snprintf(err, len, nul != NUL_REPLACE ? "cannot encode a key with a NUL byte"
                                                  : "out of memory");
            lua_pop(L, 2);
            cJSON_Delete(j);
            return NULL;
          }
          k = kc;
        }
      } else if (lua_type(L, -2) == LUA_TNUMBER) {
        snprintf(err, len, "cannot encode a sparse array or a table that "
                 "mixes array and object keys");
        lua_pop(L, 2);
        cJSON_Delete(j);
        return NULL;
      } else {
        snprintf(err, len, "cannot encode a %s key", luaL_typename(L, -2));
        lua_pop(L, 2);
        cJSON_Delete(j);
        return NULL;
      }
      c = to_json(L, -1, depth + 1, nul, err, len);
      if (!c) {
        free(kc);
        lua_pop(L, 2);
        cJSON_Delete(j);
        return NULL;
      }
      cJSON_AddItemToObject(j, k, c);
      free(kc);
      lua_pop(L, 1);
    }
    return j;
  }
  default:
    snprintf(err, len, "cannot encode a %s", luaL_typename(L, idx));
    return NULL;
  }
}

cJSON *bt_lua_to_json(lua_State *L, int idx, char *err, size_t errlen) {
  err[0] = '\0';
  return to_json(L, idx, 0, NUL_ERROR, err, errlen);
}

/* The nul option of the table at idx (json.encode's and json.decode's
 * opts, may be absent): NUL_ERROR or NUL_REPLACE. Raises on anything else. */
static int nul_option(lua_State *L, int idx, const char *api) {
  int nul = NUL_ERROR;
  if (lua_isnoneornil(L, idx)) return nul;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    if (!k || strcmp(k, "nul") != 0)
      return luaL_error(L, "%s: unknown option '%s' (expected nul)", api,
                        k ? k : luaL_typename(L, -2));
    if (v && strcmp(v, "replace") == 0) nul = NUL_REPLACE;
    else if (!v || strcmp(v, "error") != 0)
      return luaL_error(L, "%s: nul must be \"error\" or \"replace\"", api);
    lua_pop(L, 1);
  }
  return nul;
}

static int l_encode(lua_State *L) {
  char err[256];
  cJSON *j;
  char *s;
  int nul;
  luaL_checkany(L, 1);
  nul = nul_option(L, 2, "baton.json.encode");
  err[0] = '\0';
  j = to_json(L, 1, 0, nul, err, sizeof(err));
  if (!j) return luaL_error(L, "baton.json.encode: %s", err);
  s = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (!s) return luaL_error(L, "baton.json.encode: out of memory");
  lua_pushstring(L, s);
  free(s);
  return 1;
}

/* baton.json.decode(s [, {nul = "replace"}]) -> value, or nil, "EINVAL:
 * invalid JSON at byte N", "EINVAL". A raw NUL byte is invalid (JSON
 * escapes it: \u0000), unless replaced. */
static int l_decode(lua_State *L) {
  size_t n, at = 0;
  const char *s = luaL_checklstring(L, 1, &n);
  const char *end = NULL;
  char *copy = NULL, mark[4], msg[96];
  cJSON *j;
  int rc, nul = nul_option(L, 2, "baton.json.decode");
  if (nul == NUL_REPLACE) {
    /* every NUL, spelled or raw, as U+FFFD */
    if (bt_json_nul_at(s, n) < n) {
      if (!(copy = malloc(3 * n))) return bt_push_fail(L, BT_ENOMEM, NULL);
      n = bt_json_nul_fix(s, n, copy);
    }
  } else {
    rc = bt_json_nul_prepare(s, n, &copy, mark, &at);
    if (rc == BT_EINVAL) {
      snprintf(msg, sizeof(msg), "invalid JSON at byte %zu: a NUL byte (write it \\u0000)", at + 1);
      return bt_push_fail(L, BT_EINVAL, msg);
    }
    if (rc == BT_ENOTSUP)
      return bt_push_fail(L, BT_EINVAL, "cannot decode \\u0000 in a text that holds every "
                          "private-use character");
    if (rc < 0) return bt_push_fail(L, rc, NULL);
  }
  j = cJSON_ParseWithLengthOpts(copy ? copy : s, n, &end, 0);
  if (!j) {
    const char *base = copy ? copy : s;
    at = end && end >= base ? (size_t) (end - base) : 0;
    free(copy);
    snprintf(msg, sizeof(msg), "invalid JSON at byte %zu", at + 1);
    return bt_push_fail(L, BT_EINVAL, msg);
  }
  push_json(L, j, copy && nul != NUL_REPLACE ? mark : NULL);
  free(copy);
  cJSON_Delete(j);
  return 1;
}

static int l_array(lua_State *L) {
  if (lua_isnoneornil(L, 1)) lua_newtable(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  luaL_setmetatable(L, ARRAY_MT);
  return 1;
}

static int null_tostring(lua_State *L) {
  lua_pushliteral(L, "null");
  return 1;
}

int bt_lua_open_json(lua_State *L) {
  lua_newtable(L);
  /* stack: baton json */
  lua_newtable(L);
  lua_newtable(L);
  lua_pushcfunction(L, null_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, NULL_KEY);
  lua_setfield(L, -2, "null");
  luaL_newmetatable(L, ARRAY_MT);
  lua_pop(L, 1);
  lua_pushcfunction(L, l_encode);
  lua_setfield(L, -2, "encode");
  lua_pushcfunction(L, l_decode);
  lua_setfield(L, -2, "decode");
  lua_pushcfunction(L, l_array);
  lua_setfield(L, -2, "array");
  lua_setfield(L, -2, "json");
  return 0;
}
