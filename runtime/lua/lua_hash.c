/*
 * baton._sha256(s) -> the SHA-256 of string s as 64 lowercase hex digits,
 * over libsodium (crypto_hash_sha256), which baton links for Ed25519
 * anyway: linking OpenSSL's libcrypto for this one function cost every
 * baton process ~1 ms of start-up (relocating a large library). The
 * version log (lua/baton/versions.lua) records it for every job and policy
 * source stored, so an operator can compare what is stored with a file
 * (`sha256sum FILE`).
 */
#include <lauxlib.h>
#include <sodium.h>

#include "lua_mod.h"

static int l_sha256(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  unsigned char md[crypto_hash_sha256_BYTES];
  char hex[2 * crypto_hash_sha256_BYTES + 1];
  /* Cannot fail: no allocation, no state (sodium_init is not needed). */
  crypto_hash_sha256(md, (const unsigned char *) s, n);
  sodium_bin2hex(hex, sizeof(hex), md, sizeof(md));
  lua_pushlstring(L, hex, sizeof(hex) - 1);
  return 1;
}

int bt_lua_open_hash(lua_State *L) {
  lua_pushcfunction(L, l_sha256);
  lua_setfield(L, -2, "_sha256");
  return 0;
}
