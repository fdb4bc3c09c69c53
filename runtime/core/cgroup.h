/*
 * Memory limits of runs with cgroup v2 (docs/security.md, "Limits").
 *
 * A node whose cgroup it may manage (systemd's Delegate=, see
 * tools/dist/baton.service.in) prepares it once, before it starts any
 * worker: it moves itself into a leaf NODE/node and enables the memory
 * controller for its children, as systemd's docs/CGROUP_DELEGATION.md asks
 * of a delegated service ("no processes in inner nodes"). Each worker whose
 * runs have a memory limit then gets a cgroup of its own, DIR/worker-PID,
 * made by its containment process (contain.h): memory.max is the limit,
 * memory.swap.max 0 (the limit is not stretched with swap) and
 * memory.oom.group 1 (a run over its limit loses all its processes at once,
 * not one that happened to be largest). memory.events then says whether
 * the kernel's OOM killer struck in it.
 *
 * Pure C over the cgroup file system: no Lua, no libuv loop. The paths are
 * parameters, so tests can point the functions at a directory of their own.
 */
#ifndef BATON_CGROUP_H
#define BATON_CGROUP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** The directory of this process's cgroup v2 from the text of
 * /proc/self/cgroup (the "0::PATH" line) and /proc/self/mountinfo (the
 * cgroup2 mount, whose root may be a prefix of PATH in a cgroup namespace)
 * in dir (n bytes). Returns 0, or BT_ENOTSUP (no cgroup v2, or PATH outside
 * the mount) with why (wn bytes) saying so. */
int bt_cgroup_locate(const char *cgroup, const char *mountinfo, char *dir, size_t n,
                     char *why, size_t wn);

/** Readies dir, the cgroup process pid is in and alone in, for workers'
 * cgroups: makes dir/node, moves pid there, enables +memory in
 * dir/cgroup.subtree_control, and removes empty worker-* cgroups an earlier
 * node left. The directory to make workers' cgroups in goes to base (bn
 * bytes): dir, or its parent when dir is a leaf named node whose parent
 * has the memory controller on for its children already (systemd's
 * DelegateSubgroup=node, or an earlier call). Returns 0, or a negative BT_E*
 * code with why saying what is missing (no memory controller, other
 * processes in dir, no permission). */
int bt_cgroup_prepare(const char *dir, pid_t pid, char *base, size_t bn, char *why, size_t wn);

/** bt_cgroup_locate and bt_cgroup_prepare for this process, from its /proc
 * files: the base in dir. */
int bt_cgroup_prepare_self(char *dir, size_t n, char *why, size_t wn);

/** Makes base/worker-ID with a memory limit of limit bytes; its path in dir.
 * Returns 0 or a negative BT_E* code (nothing is left behind then). */
int bt_cgroup_create(const char *base, long id, uint64_t limit, char *dir, size_t n);

/** Moves process pid into the cgroup dir. */
int bt_cgroup_attach(const char *dir, pid_t pid);

/** How often the cgroup dir ran out of memory (memory.events: the largest
 * of oom, oom_kill and oom_group_kill); 0 when it cannot be read. */
long bt_cgroup_oom_events(const char *dir);

/** Removes the cgroup dir, which must hold no process any more; retries
 * for a moment while the kernel still counts exiting ones. */
int bt_cgroup_remove(const char *dir);

#endif
