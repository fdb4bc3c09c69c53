/*
 * Unit tests of the cgroup v2 helpers for runs' memory limits
 * (runtime/core/cgroup.c), printing TAP: where this process's cgroup is,
 * from /proc/self/cgroup and mountinfo texts (v2 only, hybrid, v1 only, a
 * cgroup namespace, escaped mount points); and, on a directory laid out
 * as a cgroup would be (the test cannot make real ones: that needs a
 * delegated cgroup v2, tests/lua/node-limits.lua says which the machine
 * has), what prepare, create, attach, the OOM count and remove write and
 * refuse.
 */
#include "cgroup.h"
#include "err.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[4096], why[600], cmd[9000];

static int locate(const char *cg, const char *mi) {
  dir[0] = why[0] = '\0';
  return bt_cgroup_locate(cg, mi, dir, sizeof(dir), why, sizeof(why));
}

static void put(const char *base, const char *name, const char *text) {
  char path[4096];
  FILE *f;
  snprintf(path, sizeof(path), "%s/%s", base, name);
  f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(1);
  }
  fputs(text, f);
  fclose(f);
}

static char *get(const char *base, const char *name) {
  static char buf[4096];
  char path[4096];
  size_t n;
  FILE *f;
  snprintf(path, sizeof(path), "%s/%s", base, name);
  buf[0] = '\0';
  f = fopen(path, "r");
  if (!f) return NULL;
  n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static int is_dir(const char *base, const char *name) {
  char path[4096];
  struct stat st;
  snprintf(path, sizeof(path), "%s/%s", base, name);
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A directory that looks like a cgroup to the helpers: its control files
 * exist (cgroupfs makes them in every new cgroup; here the test does). */
static void fake_cgroup(const char *d, const char *controllers, const char *procs) {
  mkdir(d, 0755);
  put(d, "cgroup.controllers", controllers);
  put(d, "cgroup.procs", procs);
  put(d, "cgroup.subtree_control", "");
}

#define V2_MOUNT "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
#define ROOT_MOUNT "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"

int main(void) {
  char tmp[] = "/tmp/baton-cgroup-test.XXXXXX", base[4096], node[8400], w[8400], procs[32];
  long pid = (long) getpid();
  int e;

  /* ---- locate ---- */
  e = locate("0::/system.slice/baton.service\n", ROOT_MOUNT V2_MOUNT);
  is_int(e, 0, "v2 only: found");
  is_str(dir, "/sys/fs/cgroup/system.slice/baton.service", "the service's cgroup below the mount");
  e = locate("0::/\n", V2_MOUNT);
  is_str(dir, "/sys/fs/cgroup", "the root cgroup is the mount point itself");
  e = locate("12:memory:/user.slice\n1:name=systemd:/user.slice/x.scope\n0::/user.slice/x.scope\n",
             "35 25 0:30 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw\n"
             "36 25 0:31 / /sys/fs/cgroup/memory rw shared:11 - cgroup cgroup rw,memory\n");
  is_int(e, 0, "hybrid: found");
  is_str(dir, "/sys/fs/cgroup/unified/user.slice/x.scope", "in the unified mount");
  e = locate("4:memory:/docker/abc\n1:name=systemd:/docker/abc\n",
             "36 25 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  is_int(e, BT_ENOTSUP, "v1 only: not supported");
  is_str(why, "no cgroup v2 hierarchy (cgroup v1 only)", "and says so");
  e = locate("0::/kubepods/pod1/ctr\n",
             "40 30 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  is_int(e, 0, "a mount whose root is a cgroup: found");
  is_str(dir, "/sys/fs/cgroup/ctr", "the path below that root");
  e = locate("0::/other/x\n", "40 30 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  is_int(e, BT_ENOTSUP, "a cgroup outside every cgroup2 mount: not supported");
  is_str(why, "cgroup /other/x is not below a cgroup2 mount", "and says which");
  e = locate("0::/kubepods/pod10\n", "40 30 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  is_int(e, BT_ENOTSUP, "a root that is a prefix of the name but not of the path does not match");
  e = locate("0::/a\n", "40 30 0:26 / /mnt/cg\\040v2 rw opt:1 - cgroup2 none rw\n");
  is_str(dir, "/mnt/cg v2/a", "an escaped space in the mount point is decoded");
  e = locate("0::/a\n", "40 30 0:26 / /mnt/x rw shared:1 master:2 - ext4 /dev/x rw\n");
  is_int(e, BT_ENOTSUP, "no cgroup2 mount: not supported");

  /* ---- prepare, on a directory laid out as a cgroup ---- */
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(procs, sizeof(procs), "%ld\n", pid);
  snprintf(dir, sizeof(dir), "%s/svc", tmp);
  fake_cgroup(dir, "cpu io pids\n", procs);
  why[0] = '\0';
  e = bt_cgroup_prepare(dir, (pid_t) pid, base, sizeof(base), why, sizeof(why));
  is_int(e, BT_ENOTSUP, "prepare: no memory controller, refused");
  ok(strstr(why, "the memory controller is not available in ") != NULL, "saying so: %s", why);
  ok(!is_dir(dir, "node"), "and nothing was made");

  put(dir, "cgroup.controllers", "cpu io memory pids\n");
  put(dir, "cgroup.procs", "1\n");
  why[0] = '\0';
  e = bt_cgroup_prepare(dir, (pid_t) pid, base, sizeof(base), why, sizeof(why));
  is_int(e, BT_EBUSY, "prepare: another process in the cgroup, refused");
  ok(strstr(why, "other processes share the node's cgroup") != NULL, "saying so: %s", why);
  put(dir, "cgroup.procs", "1\n" "2\n");
  e = bt_cgroup_prepare(dir, (pid_t) pid, base, sizeof(base), why, sizeof(why));
  is_int(e, BT_EBUSY, "prepare: several processes, refused");
  ok(!is_dir(dir, "node"), "and nothing was made");

  put(dir, "cgroup.procs", procs);
  mkdir(strcat(strcpy(w, dir), "/worker-123"), 0755); /* an earlier node's, empty */
  e = bt_cgroup_prepare(dir, (pid_t) pid, base, sizeof(base), why, sizeof(why));
  is_int(e, 0, "prepare: alone with the memory controller, done");
  is_str(base, dir, "the workers' cgroups go in the node's cgroup");
  ok(is_dir(dir, "node"), "it made node/");
  snprintf(node, sizeof(node), "%s/node", dir);
  {
    char want[32];
    snprintf(want, sizeof(want), "%ld", pid);
    is_str(get(node, "cgroup.procs"), want, "the node moved into node/");
  }
  is_str(get(dir, "cgroup.subtree_control"), "+memory", "and the memory controller is on for the children");
  ok(!is_dir(dir, "worker-123"), "an earlier node's empty worker cgroup is gone");

  /* Started in node/ already, its parent serving memory to its children
   * (systemd's DelegateSubgroup=node, or a second call). */
  put(dir, "cgroup.subtree_control", "memory\n");
  fake_cgroup(node, "memory\n", procs);
  e = bt_cgroup_prepare(node, (pid_t) pid, base, sizeof(base), why, sizeof(why));
  is_int(e, 0, "prepare in node/: done");
  is_str(base, dir, "the workers' cgroups go in its parent");
  ok(!is_dir(node, "node"), "no node/node");

  /* ---- a worker's cgroup ---- */
  e = bt_cgroup_create(base, 4242, 64ull << 20, w, sizeof(w));
  is_int(e, 0, "create: done");
  {
    char want[4200];
    snprintf(want, sizeof(want), "%s/worker-4242", base);
    is_str(w, want, "base/worker-ID");
  }
  /* (cgroupfs makes these files; a plain directory gets them from the writes) */
  is_str(get(w, "memory.max"), "67108864", "memory.max is the limit in bytes");
  is_str(get(w, "memory.swap.max"), "0", "no swap beyond it");
  is_str(get(w, "memory.oom.group"), "1", "an OOM kill takes the whole run");
  e = bt_cgroup_attach(w, 777);
  is_int(e, 0, "attach: done");
  is_str(get(w, "cgroup.procs"), "777", "the pid is written to its cgroup.procs");
  is_int(bt_cgroup_oom_events(w), 0, "no memory.events: no OOM");
  put(w, "memory.events", "low 0\nhigh 0\nmax 12\noom 0\noom_kill 0\noom_group_kill 0\n");
  is_int(bt_cgroup_oom_events(w), 0, "memory.events without an OOM: 0 (max alone is reclaim)");
  put(w, "memory.events", "low 0\nhigh 0\nmax 40\noom 1\noom_kill 3\n");
  is_int(bt_cgroup_oom_events(w), 3, "oom_kill 3: 3");
  put(w, "memory.events", "low 0\nhigh 0\nmax 40\noom 1\noom_kill 0\noom_group_kill 0\n");
  is_int(bt_cgroup_oom_events(w), 1, "oom alone (an allocation failed, nothing killed): 1");
  /* (cgroupfs removes a cgroup's files with it; here they go first) */
  snprintf(cmd, sizeof(cmd), "rm -f %s/*", w);
  ok(system(cmd) == 0, "(the files of the fake cgroup removed)");
  e = bt_cgroup_remove(w);
  is_int(e, 0, "remove: done");
  ok(!is_dir(base, "worker-4242"), "the cgroup is gone");
  e = bt_cgroup_remove(w);
  is_int(e, 0, "remove of a gone cgroup: done");
  e = bt_cgroup_create("/nonexistent/base", 1, 64ull << 20, w, sizeof(w));
  is_int(e, BT_ENOENT, "create below a missing base: ENOENT");

  snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
  ok(system(cmd) == 0, "(the test's directory removed)");
  return tap_done();
}
