/*
 * baton._sign: Ed25519 on raw byte strings (runtime/core/sign.c), for
 * lua/baton/sign.lua, which owns the text forms of keys and signatures.
 *
 *   _sign.keypair()              --> public (32 bytes), secret (64 bytes)
 *   _sign.public_of(secret)      --> public
 *   _sign.sign(secret, msg)      --> signature (64 bytes)
 *   _sign.verify(public, msg, sig) --> true | false
 *   _sign.keyid(public)          --> 16 hex digits
 *   _sign.pubfiles(dir)          --> sorted names of the *.pub files in dir,
 *                                    or nil, "ENOTDIR: ...", "ENOTDIR" | ...
 *   _sign.create(path, text, mode) --> true, or nil, "EEXIST: ...", code:
 *                                    a new file only (O_EXCL), with mode
 *   _sign.mode(path)             --> the permission bits of path (following
 *                                    links) and whether it is a regular file,
 *                                    or nil, "ENOENT: ...", code
 *
 * A key of the wrong length raises (the Lua side checks what it parsed);
 * a signature of the wrong length just does not verify.
 */
#include "err.h"
#include "lua_mod.h"
#include "sign.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const unsigned char *check_bytes(lua_State *L, int i, size_t n, const char *what) {
  size_t len;
  const char *s = luaL_checklstring(L, i, &len);
  if (len != n) luaL_argerror(L, i, what);
  return (const unsigned char *)s;
}

static int l_keypair(lua_State *L) {
  unsigned char pk[BT_SIGN_PUBLIC_BYTES], sk[BT_SIGN_SECRET_BYTES];
  if (bt_sign_keypair(pk, sk) < 0) return luaL_error(L, "libsodium could not be initialised");
  lua_pushlstring(L, (const char *)pk, sizeof pk);
  lua_pushlstring(L, (const char *)sk, sizeof sk);
  return 2;
}

static int l_public_of(lua_State *L) {
  const unsigned char *sk = check_bytes(L, 1, BT_SIGN_SECRET_BYTES, "64-byte secret key expected");
  unsigned char pk[BT_SIGN_PUBLIC_BYTES];
  bt_sign_public_of(pk, sk);
  lua_pushlstring(L, (const char *)pk, sizeof pk);
  return 1;
}

static int l_sign(lua_State *L) {
  const unsigned char *sk = check_bytes(L, 1, BT_SIGN_SECRET_BYTES, "64-byte secret key expected");
  size_t len;
  const char *msg = luaL_checklstring(L, 2, &len);
  unsigned char sig[BT_SIGN_BYTES];
  if (bt_sign_detached(sig, msg, len, sk) < 0) return luaL_error(L, "libsodium could not be initialised");
  lua_pushlstring(L, (const char *)sig, sizeof sig);
  return 1;
}

static int l_verify(lua_State *L) {
  const unsigned char *pk = check_bytes(L, 1, BT_SIGN_PUBLIC_BYTES, "32-byte public key expected");
  size_t len, slen;
  const char *msg = luaL_checklstring(L, 2, &len);
  const char *sig = luaL_checklstring(L, 3, &slen);
  lua_pushboolean(L, slen == BT_SIGN_BYTES &&
                     bt_sign_verify((const unsigned char *)sig, msg, len, pk) == 0);
  return 1;
}

static int l_keyid(lua_State *L) {
  const unsigned char *pk = check_bytes(L, 1, BT_SIGN_PUBLIC_BYTES, "32-byte public key expected");
  char id[BT_SIGN_KEYID_CHARS + 1];
  bt_sign_keyid(id, pk);
  lua_pushstring(L, id);
  return 1;
}

static int push_errno(lua_State *L, int e, const char *path) {
  const char *code = e == ENOTDIR ? "ENOTDIR" : bt_err_name(-e);
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s: %s", code, path, strerror(e));
  lua_pushstring(L, code);
  return 3;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names are collected as Lua strings in a table, then sorted through an
 * array in a userdata, so nothing is malloc'd (a Lua error cannot strand it). */
static int l_pubfiles(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  DIR *d;
  struct dirent *de;
  int n = 0, i;
  const char **names;
  lua_newtable(L); /* stack: dir list */
  d = opendir(dir);
  if (!d) return push_errno(L, errno, dir);
  while ((de = readdir(d)) != NULL) {
    size_t len = strlen(de->d_name);
    if (len > 4 && de->d_name[0] != '.' && strcmp(de->d_name + len - 4, ".pub") == 0) {
      lua_pushstring(L, de->d_name);
      lua_rawseti(L, -2, ++n);
    }
  }
  closedir(d);
  /* sort: the strings are anchored in the list while the array points at them */
  names = lua_newuserdata(L, (size_t)(n ? n : 1) * sizeof *names); /* stack: dir list ud */
  for (i = 0; i < n; i++) {
    lua_rawgeti(L, -2, i + 1);
    names[i] = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  lua_createtable(L, n, 0); /* stack: dir list ud sorted */
  for (i = 0; i < n; i++) {
    lua_pushstring(L, names[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_create(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  size_t len, off = 0;
  const char *text = luaL_checklstring(L, 2, &len);
  int mode = (int)luaL_checkinteger(L, 3);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
  if (fd < 0) return push_errno(L, errno, path);
  while (off < len) {
    ssize_t w = write(fd, text + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int e = errno;
      close(fd);
      unlink(path);
      return push_errno(L, e, path);
    }
    off += (size_t)w;
  }
  if (close(fd) < 0) {
    int e = errno;
    unlink(path);
    return push_errno(L, e, path);
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* The permission bits of a key or secret file, so that the Lua side can warn
 * about one that others may read. */
static int l_mode(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (stat(path, &st) < 0) return push_errno(L, errno, path);
  lua_pushinteger(L, (lua_Integer)(st.st_mode & 07777));
  lua_pushboolean(L, S_ISREG(st.st_mode));
  return 2;
}

int bt_lua_open_sign(lua_State *L) {
  static const luaL_Reg fns[] = {
    {"keypair", l_keypair}, {"public_of", l_public_of}, {"sign", l_sign},
    {"verify", l_verify}, {"keyid", l_keyid}, {"pubfiles", l_pubfiles},
    {"create", l_create}, {"mode", l_mode}, {NULL, NULL},
  };
  lua_newtable(L);
  luaL_register(L, NULL, fns);
  lua_setfield(L, -2, "_sign");
  return 0;
}
