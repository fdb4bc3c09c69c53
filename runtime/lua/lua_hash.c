/*
 * baton._sha256(s) -> the SHA-256 of string s as 64 lowercase hex digits,
 * over OpenSSL's libcrypto (EVP). The version log (lua/baton/versions.lua)
 * records it for every job and policy source stored, so an operator can
 * compare what is stored with a file (`sha256sum FILE`).
 */
#include <lauxlib.h>
#include <openssl/evp.h>

#include "lua_mod.h"

static int l_sha256(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  char hex[2 * EVP_MAX_MD_SIZE];
  static const char digits[] = "0123456789abcdef";
  unsigned int i;
  if (!EVP_Digest(s, n, md, &len, EVP_sha256(), NULL))
    return luaL_error(L, "baton._sha256: libcrypto's EVP_Digest failed");
  for (i = 0; i < len; i++) {
    hex[2 * i] = digits[md[i] >> 4];
    hex[2 * i + 1] = digits[md[i] & 15];
  }
  lua_pushlstring(L, hex, 2 * len);
  return 1;
}

int bt_lua_open_hash(lua_State *L) {
  lua_pushcfunction(L, l_sha256);
  lua_setfield(L, -2, "_sha256");
  return 0;
}
