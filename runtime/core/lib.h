/*
 * baton's Lua library (lua/ in the source tree, PREFIX/share/baton/lua once
 * installed), read once per process.
 *
 * A process finds the library's directory when it starts and reads every
 * file under it into memory, one snapshot; `require` then loads baton's
 * modules from that snapshot, never from the disk again. So a node keeps
 * the code it started with while the files are replaced under it (a
 * `make install`, a package upgrade, an edit of lua/): nothing changes
 * until it restarts.
 *
 * Its workers must run the same code as the node. The node hands them its
 * snapshot, not the directory: a memfd made from it (bt_lib_fd), sealed
 * against writes, inherited at a high descriptor number, named to them in
 * BATON_LIB_FD. A worker attaches it instead of reading any directory
 * (bt_lib_init), then closes the descriptor and drops the variable, so the
 * processes of its runs inherit neither. The binary is handled by the
 * node, which starts its workers from /proc/self/exe: its own executable,
 * even after the file was replaced or deleted.
 *
 * Where the directory is looked for, in order (each must hold
 * baton/core.lua):
 *   1. $BATON_LUADIR, alone when it is set;
 *   2. <prefix>/share/baton/lua, where <prefix>/bin holds the executable
 *      (an installed baton, whatever its DESTDIR or prefix);
 *   3. <prefix>/lua (the source tree: bin/baton next to lua/);
 *   4. the directory compiled in (BATON_LUADIR at build time).
 *
 * The pack. Reading the directory's ~60 files costs a process ~1.2 ms of
 * CPU at start-up (opening and copying ~800 KB, most of which a short
 * command never runs), so `make` and `make install` also write DIR.pack
 * beside it (bt_lib_write_pack, `baton _pack-lib`): the snapshot, ready
 * made, after an index of each file's size and modification time. A
 * process maps the pack instead of reading the files when it is this
 * version's snapshot of DIR as DIR is now (checked with a stat of each
 * file: an edited, added or removed file makes it stale), so the two ways
 * give the same snapshot; otherwise it reads the directory. A pack is
 * only ever replaced by rename, never rewritten in place, so the mapping
 * of a running process stays whole.
 *
 * One library per process, like the fence board.
 */
#ifndef BATON_LIB_H
#define BATON_LIB_H

#include <stddef.h>

/* The file every library directory has: how a candidate is recognised. */
#define BT_LIB_PROBE "baton/core.lua"

/** Finds the library directory: env ($BATON_LUADIR or NULL), exe (this
 * program's absolute path, or NULL), builtin (compiled-in, or NULL). Writes
 * the directory to dir (len bytes) and returns 0, or returns BT_ENOENT and
 * writes a one-line message naming BATON_LUADIR and every place searched
 * to dir. */
int bt_lib_search(const char *env, const char *exe, const char *builtin,
                  char *dir, size_t len);

/** Loads this process's library once (later calls return 0 at once): the
 * snapshot in the descriptor named by $BATON_LIB_FD if set (a worker),
 * else every file of the directory bt_lib_search finds. version is this
 * binary's version: a snapshot made by another version is refused.
 * Returns 0, or a negative BT_E* code with a one-line message in err. */
int bt_lib_init(const char *version, const char *builtin, char *err, size_t errlen);

/** The library's directory (as found by the process that read it), or NULL
 * before bt_lib_init. */
const char *bt_lib_dir(void);

/** The content of the file at rel ("baton/node/pool.lua") in the
 * snapshot, and its length in *len; NULL if there is no such file. */
const char *bt_lib_file(const char *rel, size_t *len);

/** The snapshot as a sealed memfd without close-on-exec at a descriptor
 * >= 64, made on the first call; later calls return the same descriptor.
 * Returns it, or a negative BT_E* code. */
int bt_lib_fd(void);

/** Writes out (atomically: a file beside it, then rename) the pack of the
 * library in the directory src, as the library of dir (src is dir under
 * a DESTDIR). Returns 0, or a negative BT_E* code with a message in err. */
int bt_lib_write_pack(const char *src, const char *dir, const char *version,
                      const char *out, char *err, size_t errlen);

/* What the snapshot is made of, for tests: a blob of
 *   "baton-lib 1\n" VERSION "\n" DIR "\n" then, for each file,
 *   REL "\n" LENGTH "\n" BYTES
 * Builds one from dir into *out (malloc'd, *outlen bytes); returns 0 or a
 * negative BT_E* code with a message in err. */
int bt_lib_read_dir(const char *dir, const char *version, char **out, size_t *outlen,
                    char *err, size_t errlen);

#endif
