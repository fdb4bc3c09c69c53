/*
 * What the CLI asks of the process's surroundings:
 *
 *   baton._terminal(fd) -> false, or true, columns, rows
 *     whether fd (0, 1 or 2) is a terminal (isatty), and then its size
 *     (TIOCGWINSZ; nil, nil when the terminal does not say). The CLI
 *     colours states and fits its tables to the width only on a terminal
 *     (lua/baton/cli/util.lua).
 *
 *   baton._user() -> name | nil, uid
 *     the name of the process's effective user in the user database
 *     (getpwuid_r), nil when it has no entry, and the uid: who changed a
 *     job when $USER is not set (a service, a cron job, `env -i`).
 *
 * Neither waits; both are misuse-raising only for a wrong argument.
 */
#include <errno.h>
#include <lauxlib.h>
#include <pwd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "lua_mod.h"

static int l_terminal(lua_State *L) {
  lua_Integer fd = luaL_checkinteger(L, 1);
  struct winsize ws;
  if (fd < 0 || fd > 2) return luaL_error(L, "baton._terminal: fd must be 0, 1 or 2");
  if (!isatty((int) fd)) {
    lua_pushboolean(L, 0);
    return 1;
  }
  lua_pushboolean(L, 1);
  if (ioctl((int) fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    lua_pushinteger(L, ws.ws_col);
    lua_pushinteger(L, ws.ws_row);
  } else {
    lua_pushnil(L);
    lua_pushnil(L);
  }
  return 3;
}

static int l_user(lua_State *L) {
  uid_t uid = geteuid();
  struct passwd pw, *found = NULL;
  char small[1024], *buf = small;
  size_t len = sizeof(small);
  int rc;
  /* An entry larger than the buffer (ERANGE): a larger one, as a userdata
   * that the collector frees (a Lua error cannot strand it). */
  while ((rc = getpwuid_r(uid, &pw, buf, len, &found)) == ERANGE && len < (1u << 20)) {
    len *= 2;
    buf = lua_newuserdata(L, len);
  }
  if (rc == 0 && found && found->pw_name && found->pw_name[0])
    lua_pushstring(L, found->pw_name);
  else
    lua_pushnil(L);
  lua_pushinteger(L, (lua_Integer) uid);
  return 2;
}

int bt_lua_open_os(lua_State *L) {
  lua_pushcfunction(L, l_terminal);
  lua_setfield(L, -2, "_terminal");
  lua_pushcfunction(L, l_user);
  lua_setfield(L, -2, "_user");
  return 0;
}
