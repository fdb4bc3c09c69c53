/*
 * `require` over the library snapshot (runtime/core/lib.h): baton's modules
 * come from the files read when the process started, never from the disk
 * again. Also baton._libdir, baton._libfile(rel) and baton._lib_fd(), which
 * a node uses to hand its workers the same snapshot, and baton._self_exe,
 * the program it starts them from.
 */
#include "err.h"
#include "lib.h"
#include "rt.h"

#include <lauxlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* package.loaders[2]: loader(name) --> the chunk of NAME (a.b.c from
 * a/b/c.lua or a/b/c/init.lua in the snapshot, named "@<dir>/a/b/c.lua" as
 * if loaded from the file), or a string saying where it was not found. */
static int loader(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  static const char *const forms[] = {"%s.lua", "%s/init.lua"};
  char base[512], rel[600];
  size_t i, len;

  if (strlen(name) >= sizeof(base)) return 0;
  for (i = 0; name[i]; i++) base[i] = name[i] == '.' ? '/' : name[i];
  base[i] = '\0';
  for (i = 0; i < 2; i++) {
    const char *src;
    snprintf(rel, sizeof(rel), forms[i], base);
    src = bt_lib_file(rel, &len);
    if (!src) continue;
    lua_pushfstring(L, "@%s/%s", bt_lib_dir(), rel);
    if (luaL_loadbuffer(L, src, len, lua_tostring(L, -1)))
      return luaL_error(L, "error loading module '%s' from file '%s/%s':\n\t%s", name,
                        bt_lib_dir(), rel, lua_tostring(L, -1));
    return 1;
  }
  lua_pushfstring(L, "\n\tno file '%s/%s.lua' in baton's library", bt_lib_dir(), base);
  return 1;
}

/* baton._libfile(rel) --> the content of rel in the snapshot, or nil. */
static int l_libfile(lua_State *L) {
  size_t len;
  const char *src = bt_lib_file(luaL_checkstring(L, 1), &len);
  if (!src) return 0;
  lua_pushlstring(L, src, len);
  return 1;
}

/* baton._lib_fd() --> the descriptor of the snapshot for a worker
 * (BATON_LIB_FD), or nil, "ECODE: message", "ECODE". */
static int l_lib_fd(lua_State *L) {
  int fd = bt_lib_fd();
  if (fd < 0) return bt_push_fail(L, fd, "cannot share baton's Lua library");
  lua_pushinteger(L, fd);
  return 1;
}

/* baton._self_exe: the file to exec to run this very program again, as a
 * node starts its workers: /proc/self/exe, which stays this program after
 * its file is replaced or deleted; but the program's path when that link is
 * another program (under valgrind, its tool) or cannot be read. */
static void push_self_exe(lua_State *L) {
  char exe[4096];
  size_t n = sizeof(exe);
  struct stat self, file;
  if (uv_exepath(exe, &n) != 0) {
    lua_pushliteral(L, "/proc/self/exe");
  } else if (stat("/proc/self/exe", &self) == 0 && stat(exe, &file) == 0 &&
             self.st_dev == file.st_dev && self.st_ino == file.st_ino) {
    lua_pushliteral(L, "/proc/self/exe");
  } else {
    lua_pushlstring(L, exe, n);
  }
}

/* With package, package.loaded and baton at -3, -2 and -1 (open_baton in
 * lua_rt.c): puts the loader first after package.preload's and sets
 * baton._libdir, _libfile, _lib_fd and _self_exe. The library's directory
 * is not on package.path: a module added there later must not load
 * either. */
void bt__lib_open(lua_State *L) {
  int i, n;
  push_self_exe(L);
  lua_setfield(L, -2, "_self_exe");
  lua_pushstring(L, bt_lib_dir());
  lua_setfield(L, -2, "_libdir");
  lua_pushcfunction(L, l_libfile);
  lua_setfield(L, -2, "_libfile");
  lua_pushcfunction(L, l_lib_fd);
  lua_setfield(L, -2, "_lib_fd");
  lua_getfield(L, -3, "loaders");
  /* stack: package loaded baton loaders */
  n = (int) lua_objlen(L, -1);
  for (i = n; i >= 2; i--) {
    lua_rawgeti(L, -1, i);
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushcfunction(L, loader);
  lua_rawseti(L, -2, 2);
  lua_pop(L, 1);
}
