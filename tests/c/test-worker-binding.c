/*
 * The worker's own binding (runtime/lua/lua_worker.c) as `baton worker`
 * opens it: a runtime with it opened into `baton`, running
 * tests/c/test-worker-binding.lua as its main coroutine (TAP from tap.lua).
 * `baton eval` does not open it, so the Lua half cannot run there.
 */
#include "lua_mod.h"
#include "rt.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>

#define ROOT BATON_LUADIR "/.."

static int failed;

static void on_end(bt_co_t *co, const char *err, void *arg) {
  if (!err) return;
  fprintf(stderr, "test-worker-binding: %s\n", err);
  failed = 1;
  bt_rt_stop(arg, 1);
}

int main(void) {
  bt_rt_t *rt = bt_rt_new();
  lua_State *L;
  int status;
  if (!rt) return 1;
  L = bt_rt_L(rt);
  /* tap.lua */
  lua_getglobal(L, "package");
  lua_pushstring(L, ROOT "/tests/lua/?.lua;");
  lua_getfield(L, -2, "path");
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  /* stack: baton */
  lua_getglobal(L, "baton");
  bt_lua_open_worker(L);
  lua_pop(L, 1);
  if (luaL_loadfile(L, ROOT "/tests/c/test-worker-binding.lua")) {
    fprintf(stderr, "test-worker-binding: %s\n", lua_tostring(L, -1));
    bt_rt_free(rt);
    return 1;
  }
  if (!bt_co_spawn(rt, L, 0, on_end, rt)) {
    bt_rt_free(rt);
    return 1;
  }
  bt_rt_run(rt);
  status = bt_rt_status(rt);
  bt_rt_free(rt);
  return failed ? 1 : status;
}
