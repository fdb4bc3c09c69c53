/*
 * The Lua modules baton opens into the `baton` table.
 *
 * Each bt_lua_open_<mod>() is called with the `baton` table on top of the
 * stack; it sets its fields on that table (baton.cron, baton.exec, ...) and
 * leaves the stack as it found it. It returns 0.
 */
#ifndef BATON_LUA_MOD_H
#define BATON_LUA_MOD_H

#include <lua.h>

int bt_lua_open_core(lua_State *L);   /* now, sleep, go, version */
int bt_lua_open_json(lua_State *L);   /* baton.json */
int bt_lua_open_log(lua_State *L);    /* baton.log */
int bt_lua_open_etcd(lua_State *L);   /* baton.etcd (client), baton._etcd */
int bt_lua_open_exec(lua_State *L);   /* baton.exec, baton.spawn */
int bt_lua_open_http(lua_State *L);   /* baton.http */
int bt_lua_open_cron(lua_State *L);   /* baton.cron */
int bt_lua_open_signal(lua_State *L); /* baton.signal */
int bt_lua_open_chan(lua_State *L);   /* baton.channel */
int bt_lua_open_httpd(lua_State *L);  /* baton.httpd (the server) */
int bt_lua_open_sign(lua_State *L);   /* baton._sign (Ed25519) */
int bt_lua_open_hash(lua_State *L);   /* baton._sha256 (libcrypto) */
int bt_lua_open_sandbox(lua_State *L); /* baton._sandbox (confine.h) */
int bt_lua_open_os(lua_State *L);     /* baton._terminal, baton._user */
/* Opened by `baton worker` only (main.c), not by bt_rt_new: baton._sweep,
 * baton._fenced, baton._output_capture, baton._exit_text. */
int bt_lua_open_worker(lua_State *L);

/* The parent's end of a spawn channel (lua_chan.c): bt__chan_new pushes a
 * channel object and returns its pipe, to be given to uv_spawn as a
 * UV_CREATE_PIPE stream; bt__chan_started(L, idx, ok) then starts reading
 * (ok) or closes it (the spawn failed). */
struct uv_stream_s;
struct uv_stream_s *bt__chan_new(lua_State *L);
void bt__chan_started(lua_State *L, int idx, int ok);

/* Signal names, shared by baton.signal and process:kill (lua_signal.c):
 * the number of "SIGTERM" and the like (0 if unknown), and the name of a
 * number (NULL if it has none). */
int bt__signal_number(const char *name);
const char *bt__signal_name(int signum);

/* The headers table at idx checked and flattened to a NULL-terminated
 * array of name, value strings (lua_http.c; used by baton.http and the
 * server's req:respond); raises naming api. Leaves an anchor table and the
 * array's userdata on the stack. */
const char **bt__lua_header_pairs(lua_State *L, int idx, const char *api);

#endif
