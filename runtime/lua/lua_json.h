/* Conversions between cJSON trees and Lua values, for bindings. */
#ifndef BATON_LUA_JSON_H
#define BATON_LUA_JSON_H

#include <cjson/cJSON.h>
#include <lua.h>

/** Pushes j as a Lua value: objects and arrays become tables, null becomes
 * baton.json.null (or nil inside tables when drop_null). */
void bt_lua_push_json(lua_State *L, const cJSON *j);

/** Converts the value at idx to a new cJSON tree (caller frees). Returns
 * NULL and writes a reason to err on values JSON cannot hold (functions,
 * cycles, mixed keys, NaN). */
cJSON *bt_lua_to_json(lua_State *L, int idx, char *err, size_t errlen);

#endif
