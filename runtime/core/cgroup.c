/*
 * Memory limits of runs with cgroup v2 (see cgroup.h).
 */
#define _GNU_SOURCE
#include "cgroup.h"
#include "err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SAY(...) (why ? (void) snprintf(why, wn, __VA_ARGS__) : (void) 0)

/* Reads the file path (at most n - 1 bytes) into buf, NUL-terminated.
 * Returns its length, or a negative BT_E* code. */
static ssize_t read_small(const char *path, char *buf, size_t n) {
  size_t len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return uv_translate_sys_error(errno);
  while (len + 1 < n) {
    ssize_t r = read(fd, buf + len, n - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      return uv_translate_sys_error(e);
    }
    if (r == 0) break;
    len += (size_t) r;
  }
  close(fd);
  buf[len] = '\0';
  return (ssize_t) len;
}

/* The whole file path in a malloc'd string (*out), or a negative code. */
static int read_all(const char *path, char **out) {
  size_t cap = 16384, len = 0;
  char *buf = malloc(cap);
  int fd;
  if (!buf) return BT_ENOMEM;
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    free(buf);
    return uv_translate_sys_error(errno);
  }
  for (;;) {
    ssize_t r;
    if (len + 1 == cap) {
      char *nb = cap < (8u << 20) ? realloc(buf, cap * 2) : NULL;
      if (!nb) {
        free(buf);
        close(fd);
        return BT_ENOMEM;
      }
      buf = nb;
      cap *= 2;
    }
    r = read(fd, buf + len, cap - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t) r;
  }
  close(fd);
  buf[len] = '\0';
  *out = buf;
  return 0;
}

/* Writes text into the cgroup file dir/name. (O_CREAT changes nothing on
 * the cgroup file system, which refuses to create files; it lets the unit
 * tests use a plain directory.) */
static int write_file(const char *dir, const char *name, const char *text) {
  char path[4096];
  size_t len = strlen(text);
  ssize_t r;
  int fd;
  if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path)) return BT_EINVAL;
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return uv_translate_sys_error(errno);
  do r = write(fd, text, len); while (r < 0 && errno == EINTR);
  if (r < 0) {
    int e = errno;
    close(fd);
    return uv_translate_sys_error(e);
  }
  close(fd);
  return (size_t) r == len ? 0 : BT_EIO;
}

/* Whether the space-separated list text holds word. */
static int has_word(const char *text, const char *word) {
  size_t wl = strlen(word);
  const char *p = text;
  while ((p = strstr(p, word)) != NULL) {
    if ((p == text || p[-1] == ' ' || p[-1] == '\n') &&
        (p[wl] == '\0' || p[wl] == ' ' || p[wl] == '\n'))
      return 1;
    p += wl;
  }
  return 0;
}

/* Copies the mountinfo field at *p (up to a space) into out, decoding the
 * octal escapes the kernel writes for space, tab, newline and backslash;
 * moves *p past it. Returns 0, or -1 if it does not fit. */
static int field(const char **p, char *out, size_t n) {
  const char *s = *p;
  size_t len = 0;
  while (*s && *s != ' ' && *s != '\n') {
    char c = *s++;
    if (c == '\\' && s[0] >= '0' && s[0] <= '3' && s[1] >= '0' && s[1] <= '7' &&
        s[2] >= '0' && s[2] <= '7') {
      c = (char) ((s[0] - '0') * 64 + (s[1] - '0') * 8 + (s[2] - '0'));
      s += 3;
    }
    if (len + 1 >= n) return -1;
    out[len++] = c;
  }
  out[len] = '\0';
  while (*s == ' ') s++;
  *p = s;
  return 0;
}

int bt_cgroup_locate(const char *cgroup, const char *mountinfo, char *dir, size_t n,
                     char *why, size_t wn) {
  char path[4096], root[4096], mnt[4096];
  const char *line, *p;
  size_t len;

  /* "0::PATH": the v2 hierarchy (the only line on a v2-only system) */
  for (line = cgroup; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
    if (strncmp(line, "0::", 3) == 0) break;
  if (!line || !*line) {
    SAY("no cgroup v2 hierarchy (cgroup v1 only)");
    return BT_ENOTSUP;
  }
  p = line + 3;
  len = strcspn(p, "\n");
  if (len == 0 || len >= sizeof(path) || p[0] != '/') {
    SAY("no cgroup v2 path in /proc/self/cgroup");
    return BT_ENOTSUP;
  }
  memcpy(path, p, len);
  path[len] = '\0';

  /* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER" */
  for (line = mountinfo; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    const char *sep = strstr(line, " - "), *eol = strchr(line, '\n');
    size_t rl;
    int i;
    if (!sep || (eol && sep > eol) || strncmp(sep + 3, "cgroup2 ", 8) != 0) continue;
    p = line;
    for (i = 0; i < 3; i++) {
      p = strchr(p, ' ');
      if (!p) break;
      p++;
    }
    if (!p || field(&p, root, sizeof(root)) < 0 || field(&p, mnt, sizeof(mnt)) < 0) continue;
    rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
    if (strncmp(path, root, rl) != 0 || (path[rl] != '/' && path[rl] != '\0')) continue;
    if ((size_t) snprintf(dir, n, "%s%s", mnt, strcmp(path + rl, "/") == 0 ? "" : path + rl) >= n)
      continue;
    return 0;
  }
  SAY("cgroup %s is not below a cgroup2 mount", path);
  return BT_ENOTSUP;
}

/* Removes the empty worker-* cgroups in dir (an earlier node's). */
static void remove_stale(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  if (!d) return;
  while ((de = readdir(d)) != NULL) {
    char path[4096];
    if (strncmp(de->d_name, "worker-", 7) != 0) continue;
    if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) < sizeof(path))
      rmdir(path); /* fails, harmlessly, on one still in use */
  }
  closedir(d);
}

/* Whether pid is the only process listed in dir/cgroup.procs. */
static int alone_in(const char *dir, pid_t pid) {
  char path[4096], buf[256], *end;
  long first;
  if ((size_t) snprintf(path, sizeof(path), "%s/cgroup.procs", dir) >= sizeof(path)) return 0;
  if (read_small(path, buf, sizeof(buf)) < 0) return 0;
  first = strtol(buf, &end, 10);
  while (*end == '\n' || *end == ' ') end++;
  return end != buf && first == (long) pid && *end == '\0';
}

int bt_cgroup_prepare(const char *dir, pid_t pid, char *base, size_t bn, char *why, size_t wn) {
  char path[4096], buf[1024], pidtext[24];
  size_t dl = strlen(dir);
  int e;

  /* Already in a leaf named node (systemd's DelegateSubgroup=node, or an
   * earlier call): the parent is the base, if it has memory for children. */
  if (dl > 5 && strcmp(dir + dl - 5, "/node") == 0 && dl - 5 < bn) {
    memcpy(base, dir, dl - 5);
    base[dl - 5] = '\0';
    snprintf(path, sizeof(path), "%s/cgroup.subtree_control", base);
    if (read_small(path, buf, sizeof(buf)) >= 0 && has_word(buf, "memory") && alone_in(dir, pid)) {
      remove_stale(base);
      return 0;
    }
  }
  if ((size_t) snprintf(base, bn, "%s", dir) >= bn) return BT_EINVAL;
  if ((size_t) snprintf(path, sizeof(path), "%s/cgroup.controllers", dir) >= sizeof(path))
    return BT_EINVAL;
  e = (int) read_small(path, buf, sizeof(buf));
  if (e < 0) {
    SAY("cannot read %s: %s", path, bt_strerror(e));
    return e;
  }
  if (!has_word(buf, "memory")) {
    SAY("the memory controller is not available in %s (systemd: Delegate=memory)", dir);
    return BT_ENOTSUP;
  }
  if (!alone_in(dir, pid)) {
    SAY("other processes share the node's cgroup %s", dir);
    return BT_EBUSY;
  }
  snprintf(path, sizeof(path), "%s/node", dir);
  if (mkdir(path, 0755) < 0 && errno != EEXIST) {
    e = uv_translate_sys_error(errno);
    SAY("cannot create %s: %s", path, bt_strerror(e));
    return e;
  }
  snprintf(pidtext, sizeof(pidtext), "%ld", (long) pid);
  e = write_file(path, "cgroup.procs", pidtext);
  if (e) {
    rmdir(path);
    SAY("cannot move the node into %s: %s", path, bt_strerror(e));
    return e;
  }
  e = write_file(dir, "cgroup.subtree_control", "+memory");
  if (e) {
    SAY("cannot enable the memory controller below %s: %s", dir, bt_strerror(e));
    return e;
  }
  remove_stale(dir);
  return 0;
}

int bt_cgroup_prepare_self(char *dir, size_t n, char *why, size_t wn) {
  char cg[4096], *mi = NULL, found[4096];
  ssize_t r = read_small("/proc/self/cgroup", cg, sizeof(cg));
  int e;
  if (r < 0) {
    SAY("cannot read /proc/self/cgroup: %s", bt_strerror((int) r));
    return (int) r;
  }
  e = read_all("/proc/self/mountinfo", &mi);
  if (e) {
    SAY("cannot read /proc/self/mountinfo: %s", bt_strerror(e));
    return e;
  }
  e = bt_cgroup_locate(cg, mi, found, sizeof(found), why, wn);
  free(mi);
  if (e) return e;
  return bt_cgroup_prepare(found, getpid(), dir, n, why, wn);
}

int bt_cgroup_create(const char *base, long id, uint64_t limit, char *dir, size_t n) {
  char num[32];
  int e;
  if ((size_t) snprintf(dir, n, "%s/worker-%ld", base, id) >= n) return BT_EINVAL;
  if (mkdir(dir, 0755) < 0) {
    /* (a cgroup left by an earlier process of the same pid) */
    if (errno != EEXIST || rmdir(dir) < 0 || mkdir(dir, 0755) < 0)
      return uv_translate_sys_error(errno);
  }
  snprintf(num, sizeof(num), "%llu", (unsigned long long) limit);
  e = write_file(dir, "memory.max", num);
  if (e) {
    rmdir(dir);
    return e;
  }
  /* Both optional: no swap accounting (swapaccount=0), or a kernel before
   * 4.19 (no memory.oom.group). */
  write_file(dir, "memory.swap.max", "0");
  write_file(dir, "memory.oom.group", "1");
  return 0;
}

int bt_cgroup_attach(const char *dir, pid_t pid) {
  char text[24];
  snprintf(text, sizeof(text), "%ld", (long) pid);
  return write_file(dir, "cgroup.procs", text);
}

long bt_cgroup_oom_events(const char *dir) {
  char path[4096], buf[1024];
  const char *keys[] = {"oom ", "oom_kill ", "oom_group_kill "};
  long most = 0;
  size_t i;
  if ((size_t) snprintf(path, sizeof(path), "%s/memory.events", dir) >= sizeof(path)) return 0;
  if (read_small(path, buf, sizeof(buf)) < 0) return 0;
  for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
    const char *p = buf;
    size_t kl = strlen(keys[i]);
    while (p && *p) {
      if (strncmp(p, keys[i], kl) == 0) {
        long v = strtol(p + kl, NULL, 10);
        if (v > most) most = v;
        break;
      }
      p = strchr(p, '\n');
      if (p) p++;
    }
  }
  return most;
}

int bt_cgroup_remove(const char *dir) {
  int i;
  for (i = 0; i < 200; i++) {
    struct timespec ts = {0, 1000000L};
    if (rmdir(dir) == 0 || errno == ENOENT) return 0;
    if (errno != EBUSY) return uv_translate_sys_error(errno);
    nanosleep(&ts, NULL);
  }
  return BT_EBUSY;
}
