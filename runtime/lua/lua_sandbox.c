/*
 * baton._sandbox: the C side of a sandbox process (`baton sandbox`,
 * lua/baton/cli/sandbox.lua; the engine is runtime/core/confine.c).
 *
 *   _sandbox.confine{read_dir = DIR} --> true, landlocked | nil, err, code
 *       the irrevocable second step of confine.h: from now on the process
 *       reads and writes its descriptors, and opens files below DIR only
 *       (nothing when landlocked is false)
 *   _sandbox.recv()        --> the next line of the channel (fd 3), without
 *                              its newline; nil at its end
 *   _sandbox.send(line)    --> writes line and a newline to the channel
 *   _sandbox.limit(bytes)  --> bytes in use: sets the bound of the counting
 *                              allocator (rt.h bt_rt_count_memory; 0: none)
 *   _sandbox.exit(status)     ends the process at once (_exit)
 *
 * A sandbox does nothing but answer the line it was sent, so recv and send
 * block: there is no loop to keep turning, and no other system call is
 * allowed once confined.
 */
#include "confine.h"
#include "err.h"
#include "lua_mod.h"
#include "rt.h"

#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define CHAN_FD 3
#define MAX_LINE (64u << 20) /* as the channel's other end (lua_chan.c) */

/* Received bytes not yet returned (one per process, like the channel). */
static char *buf;
static size_t blen, bcap;

static int l_confine(lua_State *L) {
  const char *dir = NULL;
  int landlocked = 0, e;
  if (!lua_isnoneornil(L, 1)) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "read_dir");
    dir = luaL_optstring(L, -1, NULL);
  }
  e = bt_confine_syscalls(dir, &landlocked);
  if (e) return bt_push_fail(L, e, "cannot confine the sandbox");
  lua_pushboolean(L, 1);
  lua_pushboolean(L, landlocked);
  return 2;
}

static int l_recv(lua_State *L) {
  for (;;) {
    char *nl = blen ? memchr(buf, '\n', blen) : NULL;
    ssize_t n;
    if (nl) {
      size_t len = (size_t) (nl - buf);
      lua_pushlstring(L, buf, len);
      memmove(buf, nl + 1, blen - len - 1);
      blen -= len + 1;
      return 1;
    }
    if (blen >= MAX_LINE) return bt_push_fail(L, BT_ETOOLARGE, "a line longer than 64 MiB");
    if (bcap - blen < 65536) {
      size_t cap = bcap ? bcap * 2 : 131072;
      char *nb = realloc(buf, cap);
      if (!nb) return bt_push_fail(L, BT_ENOMEM, NULL);
      buf = nb;
      bcap = cap;
    }
    n = read(CHAN_FD, buf + blen, bcap - blen);
    if (n > 0) {
      blen += (size_t) n;
    } else if (n == 0) {
      lua_pushnil(L);
      return 1;
    } else if (errno != EINTR) {
      return bt_push_fail(L, -errno, "reading the channel");
    }
  }
}

/* Writes the line and its newline, in one system call when it can. */
static int write_line(const char *s, size_t len) {
  struct iovec iov[2];
  int n_iov = 2;
  iov[0].iov_base = (void *) s;
  iov[0].iov_len = len;
  iov[1].iov_base = (void *) "\n";
  iov[1].iov_len = 1;
  while (n_iov > 0) {
    ssize_t n = writev(CHAN_FD, iov + (2 - n_iov), n_iov);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    while (n_iov > 0 && (size_t) n >= iov[2 - n_iov].iov_len) {
      n -= (ssize_t) iov[2 - n_iov].iov_len;
      n_iov--;
    }
    if (n_iov > 0) {
      iov[2 - n_iov].iov_base = (char *) iov[2 - n_iov].iov_base + n;
      iov[2 - n_iov].iov_len -= (size_t) n;
    }
  }
  return 0;
}

static int l_send(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  int e;
  if (memchr(s, '\n', len)) return luaL_argerror(L, 1, "a line cannot hold a newline");
  if ((e = write_line(s, len))) return bt_push_fail(L, e, "writing the channel");
  lua_pushboolean(L, 1);
  return 1;
}

static int l_limit(lua_State *L) {
  lua_Number n = luaL_checknumber(L, 1);
  bt_rt_memory_limit(n > 0 ? (size_t) n : 0);
  lua_pushnumber(L, (lua_Number) bt_rt_memory_used());
  return 1;
}

static int l_exit(lua_State *L) {
  _exit((int) luaL_optinteger(L, 1, 0));
  return 0;
}

int bt_lua_open_sandbox(lua_State *L) {
  static const luaL_Reg fns[] = {
    {"confine", l_confine}, {"recv", l_recv}, {"send", l_send},
    {"limit", l_limit}, {"exit", l_exit}, {NULL, NULL}
  };
  /* stack: baton */
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  lua_setfield(L, -2, "_sandbox");
  return 0;
}
