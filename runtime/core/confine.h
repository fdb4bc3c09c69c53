/*
 * Confinement of a sandbox process: `baton sandbox`, where baton compiles
 * and describes code stored in etcd (job files, policies) that nobody has
 * vouched for yet (lua/baton/stored.lua, docs/security.md "The sandbox").
 *
 * Two steps, because the Lua runtime must be set up between them:
 *
 *   1. bt_confine_process(), first thing in main: the process dies with
 *      its parent, cannot be traced or dumped by other processes of the
 *      same user, may not start processes, write files or dump core, and
 *      keeps no descriptor but stdin/stdout/stderr, its channel (3) and
 *      keep_fd (the Lua library's snapshot, read once by the runtime).
 *   2. bt_confine_syscalls(), once the runtime and every module the
 *      sandbox needs are loaded: from then on the process may only read
 *      and write the descriptors it has, manage its own memory, read the
 *      clock and exit (a seccomp filter: any other system call fails with
 *      EPERM), and, where the kernel has Landlock, also open files under
 *      read_dir for reading (time zone data); without Landlock it opens
 *      nothing at all.
 *
 * Neither step can be undone by the process itself (no_new_privs, seccomp
 * and Landlock are inherited and irrevocable).
 */
#ifndef BATON_CONFINE_H
#define BATON_CONFINE_H

/** Step 1. keep_fd: a descriptor above 3 to keep open, or -1. Returns 0
 * or a negative BT_E* code (the caller must then not run the sandbox). */
int bt_confine_process(int keep_fd);

/** Step 2. read_dir: a directory whose tree may be opened read-only, or
 * NULL. *landlocked is set to 1 when the kernel restricts opening to
 * read_dir, to 0 when it cannot (then nothing may be opened). Returns 0 or
 * a negative BT_E* code; on failure nothing was restricted by seccomp. */
int bt_confine_syscalls(const char *read_dir, int *landlocked);

#endif
