/*
 * baton's Lua library, read once per process (see lib.h): where it is, the
 * snapshot of its files, and the sealed memfd a node hands its workers.
 */
#define _GNU_SOURCE
#include "lib.h"
#include "err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "baton-lib 1\n"
#define PACK_MAGIC "baton-pack 1\n"
#define MAX_TOTAL (256u << 20) /* bytes: a library is well below 1 MiB */
#define MAX_DEPTH 16
#define LIB_FD_MIN 64          /* out of the way of the stdio a child gets */

typedef struct {
  const char *rel, *data;
  size_t rel_len, len;
} entry_t;

/* This process's library: the blob (malloc'd, or mapped from a node's
 * memfd or from DIR.pack), its index, and its directory. */
static const char *blob;
static size_t blob_len;
static entry_t *entries;
static size_t nentries;
static char lib_dir[PATH_MAX];
static int lib_fd = -1;

static int has_probe(const char *dir) {
  char p[PATH_MAX + 32];
  snprintf(p, sizeof(p), "%s/%s", dir, BT_LIB_PROBE);
  return access(p, R_OK) == 0;
}

int bt_lib_search(const char *env, const char *exe, const char *builtin,
                  char *dir, size_t len) {
  char cand[3][PATH_MAX], msg[3 * PATH_MAX + 200];
  int n = 0, i;
  size_t used;

  if (env && *env) {
    if (has_probe(env)) {
      snprintf(dir, len, "%s", env);
      return 0;
    }
    snprintf(dir, len, "baton's Lua library is not in BATON_LUADIR=%s (no %s there)",
             env, BT_LIB_PROBE);
    return BT_ENOENT;
  }
  if (exe && exe[0] == '/') {
    /* <prefix>/bin/baton: <prefix>/share/baton/lua, then <prefix>/lua */
    char prefix[PATH_MAX], *slash;
    snprintf(prefix, sizeof(prefix), "%s", exe);
    for (i = 0; i < 2; i++) {
      slash = strrchr(prefix, '/');
      if (slash) *slash = '\0';
    }
    snprintf(cand[n++], PATH_MAX, "%.*s/share/baton/lua", PATH_MAX - 20, prefix);
    snprintf(cand[n++], PATH_MAX, "%.*s/lua", PATH_MAX - 20, prefix);
  }
  if (builtin && *builtin) {
    for (i = 0; i < n && strcmp(cand[i], builtin); i++) {}
    if (i == n) snprintf(cand[n++], PATH_MAX, "%s", builtin);
  }
  for (i = 0; i < n; i++) {
    if (has_probe(cand[i])) {
      snprintf(dir, len, "%s", cand[i]);
      return 0;
    }
  }
  used = (size_t) snprintf(msg, sizeof(msg), "baton's Lua library is not installed: no %s in",
                           BT_LIB_PROBE);
  for (i = 0; i < n && used < sizeof(msg); i++)
    used += (size_t) snprintf(msg + used, sizeof(msg) - used, "%s %s",
                              i == 0 ? "" : (i == n - 1 ? " or" : ","), cand[i]);
  if (n == 0 && used < sizeof(msg))
    used += (size_t) snprintf(msg + used, sizeof(msg) - used, " any directory");
  if (used < sizeof(msg))
    snprintf(msg + used, sizeof(msg) - used, "; set BATON_LUADIR to its directory");
  snprintf(dir, len, "%s", msg);
  return BT_ENOENT;
}

/* ---- the blob ------------------------------------------------------------ */

typedef struct {
  char *p;
  size_t n, cap;
} buf_t;

/* Makes room for n more bytes at b->p + b->n. */
static int buf_reserve(buf_t *b, size_t n) {
  size_t cap;
  char *np;
  if (b->n + n > MAX_TOTAL) return BT_ETOOLARGE;
  if (b->n + n <= b->cap) return 0;
  cap = b->cap ? b->cap : 64 * 1024;
  while (cap < b->n + n) cap *= 2;
  np = realloc(b->p, cap);
  if (!np) return BT_ENOMEM;
  b->p = np;
  b->cap = cap;
  return 0;
}

static int buf_add(buf_t *b, const void *s, size_t n) {
  int e = buf_reserve(b, n);
  if (e) return e;
  memcpy(b->p + b->n, s, n);
  b->n += n;
  return 0;
}

/* Appends "rel\nlen\n" and the content of the file at path (size bytes). */
static int add_file(buf_t *b, const char *path, const char *rel, off_t size,
                    char *err, size_t errlen) {
  char head[PATH_MAX + 32];
  size_t got = 0;
  int fd, e;

  snprintf(head, sizeof(head), "%s\n%lld\n", rel, (long long) size);
  e = size < 0 ? BT_EINVAL : buf_add(b, head, strlen(head));
  if (!e) e = buf_reserve(b, (size_t) size);
  if (e) {
    snprintf(err, errlen, "cannot read baton's Lua library: %s: %s", path, bt_strerror(e));
    return e;
  }
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    e = errno;
    snprintf(err, errlen, "cannot read baton's Lua library: %s: %s", path, strerror(e));
    return uv_translate_sys_error(e);
  }
  while (got < (size_t) size) {
    ssize_t r = read(fd, b->p + b->n + got, (size_t) size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      e = r < 0 ? errno : 0;
      snprintf(err, errlen, "cannot read baton's Lua library: %s: %s", path,
               e ? strerror(e) : "it shrank while read");
      close(fd);
      return e ? uv_translate_sys_error(e) : BT_EIO;
    }
    got += (size_t) r;
  }
  close(fd);
  b->n += got;
  return 0;
}

/* A pack's index, as the reader checks it against the directory. */
typedef struct {
  const char *p, *end;   /* its "SIZE MTIME REL\n" lines */
  size_t count, seen;    /* lines, files of the directory found in them */
  int stale;
} check_t;

/* Is the file rel (size, mtime) a line of the index? */
static int in_index(const check_t *ck, const char *rel, const struct stat *st) {
  char want[64];
  size_t rl = strlen(rel);
  int wl = snprintf(want, sizeof(want), "%lld %lld.%09ld ", (long long) st->st_size,
                    (long long) st->st_mtim.tv_sec, (long) st->st_mtim.tv_nsec);
  const char *p = ck->p;
  while (p < ck->end) {
    const char *nl = memchr(p, '\n', (size_t) (ck->end - p));
    if (!nl) return 0;
    if ((size_t) (nl - p) == (size_t) wl + rl && memcmp(p, want, (size_t) wl) == 0 &&
        memcmp(p + wl, rel, rl) == 0)
      return 1;
    p = nl + 1;
  }
  return 0;
}

/* Walks the directory root/rel: with ck, only checks each file against a
 * pack's index (ck->stale at the first difference); else appends each
 * file to b, and its index line to idx when idx is given. */
static int walk(buf_t *b, buf_t *idx, check_t *ck, const char *root, const char *rel,
                int depth, char *err, size_t errlen) {
  char path[PATH_MAX];
  DIR *d;
  struct dirent *de;
  int e = 0;

  snprintf(path, sizeof(path), "%s%s%s", root, *rel ? "/" : "", rel);
  d = opendir(path);
  if (!d) {
    e = errno;
    snprintf(err, errlen, "cannot read baton's Lua library: %s: %s", path, strerror(e));
    return uv_translate_sys_error(e);
  }
  while (!e && !(ck && ck->stale) && (de = readdir(d)) != NULL) {
    char sub[PATH_MAX], full[PATH_MAX + 1];
    struct stat st;
    if (de->d_name[0] == '.' || strchr(de->d_name, '\n')) continue;
    if ((size_t) snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", de->d_name)
        >= sizeof(sub))
      continue;
    snprintf(full, sizeof(full), "%s/%s", root, sub);
    if (stat(full, &st) < 0) continue; /* a dangling link, or gone since */
    if (S_ISDIR(st.st_mode)) {
      if (depth < MAX_DEPTH) e = walk(b, idx, ck, root, sub, depth + 1, err, errlen);
    } else if (S_ISREG(st.st_mode) && ck) {
      if (in_index(ck, sub, &st)) ck->seen++;
      else ck->stale = 1;
    } else if (S_ISREG(st.st_mode)) {
      e = add_file(b, full, sub, st.st_size, err, errlen);
      if (!e && idx) {
        char line[128];
        snprintf(line, sizeof(line), "%lld %lld.%09ld ", (long long) st.st_size,
                 (long long) st.st_mtim.tv_sec, (long) st.st_mtim.tv_nsec);
        e = buf_add(idx, line, strlen(line));
        if (!e) e = buf_add(idx, sub, strlen(sub));
        if (!e) e = buf_add(idx, "\n", 1);
        if (e) snprintf(err, errlen, "cannot pack baton's Lua library: %s", bt_strerror(e));
      }
    }
  }
  closedir(d);
  return e;
}

/* The snapshot of the directory src, naming itself as the library of dir;
 * with idx, the pack's index lines too. */
static int read_dir(const char *src, const char *dir, const char *version, buf_t *b,
                    buf_t *idx, char *err, size_t errlen) {
  int e = buf_add(b, MAGIC, strlen(MAGIC));
  if (!e) e = buf_add(b, version, strlen(version));
  if (!e) e = buf_add(b, "\n", 1);
  if (!e) e = buf_add(b, dir, strlen(dir));
  if (!e) e = buf_add(b, "\n", 1);
  if (e) snprintf(err, errlen, "cannot read baton's Lua library: %s", bt_strerror(e));
  if (!e) e = walk(b, idx, NULL, src, "", 0, err, errlen);
  return e;
}

int bt_lib_read_dir(const char *dir, const char *version, char **out, size_t *outlen,
                    char *err, size_t errlen) {
  buf_t b = {NULL, 0, 0};
  int e = read_dir(dir, dir, version, &b, NULL, err, errlen);
  if (e) {
    free(b.p);
    return e;
  }
  *out = b.p;
  *outlen = b.n;
  return 0;
}

int bt_lib_write_pack(const char *src, const char *dir, const char *version,
                      const char *out, char *err, size_t errlen) {
  buf_t b = {NULL, 0, 0}, idx = {NULL, 0, 0};
  char head[64], tmp[PATH_MAX];
  size_t count = 0, i;
  FILE *f;
  int e = read_dir(src, dir, version, &b, &idx, err, errlen), ok;
  if (e) goto done;
  for (i = 0; i < idx.n; i++) count += idx.p[i] == '\n';
  snprintf(head, sizeof(head), "%s%zu\n", PACK_MAGIC, count);
  snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", out, (long) getpid());
  /* Written aside and renamed over the old pack: a process that maps the
   * old one keeps it whole. */
  if (!(f = fopen(tmp, "we"))) {
    e = uv_translate_sys_error(errno);
    snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    goto done;
  }
  /* Readable by every user as the library's files are, whatever the
   * umask (a root install under umask 077 would otherwise ship a pack the
   * service's user cannot open, and lose the speed-up unnoticed). */
  (void) fchmod(fileno(f), 0644);
  ok = fputs(head, f) >= 0 && fwrite(idx.p, 1, idx.n, f) == idx.n &&
       fwrite(b.p, 1, b.n, f) == b.n;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, out) != 0) {
    e = uv_translate_sys_error(errno ? errno : EIO);
    snprintf(err, errlen, "cannot write %s: %s", out, strerror(errno ? errno : EIO));
    unlink(tmp);
  }
done:
  free(b.p);
  free(idx.p);
  return e;
}

/* A line of p (up to end) ending in '\n': its start and length; advances
 * *p past it. Returns 0, or -1 if there is no newline. */
static int line(const char **p, const char *end, const char **s, size_t *n) {
  const char *nl = memchr(*p, '\n', (size_t) (end - *p));
  if (!nl) return -1;
  *s = *p;
  *n = (size_t) (nl - *p);
  *p = nl + 1;
  return 0;
}

/* Indexes blob b (n bytes): fills entries, the version (*ver, *verlen) and
 * lib_dir. Returns 0, or BT_EPROTO for a malformed blob. */
static int parse(const char *b, size_t n, const char **ver, size_t *verlen) {
  const char *p = b, *end = b + n, *s;
  size_t len, cap = 0;
  if (n < strlen(MAGIC) || memcmp(b, MAGIC, strlen(MAGIC))) return BT_EPROTO;
  p += strlen(MAGIC);
  if (line(&p, end, ver, verlen) || line(&p, end, &s, &len) || len >= sizeof(lib_dir))
    return BT_EPROTO;
  memcpy(lib_dir, s, len);
  lib_dir[len] = '\0';
  nentries = 0;
  while (p < end) {
    entry_t en;
    const char *num;
    size_t numlen;
    char tmp[32];
    unsigned long long size;
    char *stop;
    if (line(&p, end, &en.rel, &en.rel_len) || line(&p, end, &num, &numlen) ||
        numlen == 0 || numlen >= sizeof(tmp))
      return BT_EPROTO;
    memcpy(tmp, num, numlen);
    tmp[numlen] = '\0';
    size = strtoull(tmp, &stop, 10);
    if (*stop || size > (unsigned long long) (end - p)) return BT_EPROTO;
    en.data = p;
    en.len = (size_t) size;
    p += size;
    if (nentries == cap) {
      entry_t *ne;
      cap = cap ? cap * 2 : 64;
      ne = realloc(entries, cap * sizeof(*ne));
      if (!ne) return BT_ENOMEM;
      entries = ne;
    }
    entries[nentries++] = en;
  }
  return 0;
}

/* Maps the snapshot a node handed over in fd (BATON_LIB_FD), then closes
 * fd. Returns 0 or a negative BT_E* code with a message in err. */
static int attach(const char *fdtext, const char *version, char *err, size_t errlen) {
  char *stop;
  long fd = strtol(fdtext, &stop, 10);
  struct stat st;
  void *p;
  const char *ver;
  size_t verlen;
  int e, seals;

  if (*stop || fd < 0 || fd > INT_MAX || fstat((int) fd, &st) < 0 || st.st_size <= 0) {
    snprintf(err, errlen, "BATON_LIB_FD=%s is not the node's Lua library", fdtext);
    return BT_EBADF;
  }
  seals = fcntl((int) fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_WRITE)) {
    snprintf(err, errlen, "BATON_LIB_FD=%s is not a sealed Lua library", fdtext);
    return BT_EBADF;
  }
  p = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_PRIVATE, (int) fd, 0);
  e = errno;
  close((int) fd);
  unsetenv("BATON_LIB_FD");
  if (p == MAP_FAILED) {
    snprintf(err, errlen, "cannot map the node's Lua library: %s", strerror(e));
    return uv_translate_sys_error(e);
  }
  blob = p;
  blob_len = (size_t) st.st_size;
  e = parse(blob, blob_len, &ver, &verlen);
  if (e) {
    snprintf(err, errlen, "the node's Lua library (BATON_LIB_FD=%s) is malformed", fdtext);
    return e;
  }
  if (verlen != strlen(version) || memcmp(ver, version, verlen)) {
    snprintf(err, errlen, "the node's Lua library is of baton %.*s, this is baton %s",
             (int) verlen, ver, version);
    return BT_EINVAL;
  }
  return 0;
}

/* Maps dir's pack (DIR.pack) as the snapshot if it is this version's
 * snapshot of dir as dir is now: every file under dir, and no other, has
 * the size and modification time the pack's index gives it. Returns 0, or
 * -1 when there is no such pack (the directory is then read instead). */
static int map_pack(const char *dir, const char *version) {
  char path[PATH_MAX + 300], tmp[32], *stop, e0[8];
  struct stat st;
  const char *p, *end, *nl, *ver;
  size_t verlen;
  void *m;
  check_t ck;
  int fd;

  snprintf(path, sizeof(path), "%s.pack", dir);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) return -1;
  /* Only a pack its own user or root wrote, that nobody else may change:
   * anyone who can create files beside the library must not be able to
   * plant code in it (the checks below look at the files' sizes and times
   * only). */
  if (fstat(fd, &st) < 0 || (st.st_uid != geteuid() && st.st_uid != 0) ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) || st.st_size <= (off_t) strlen(PACK_MAGIC) ||
      (m = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
    close(fd);
    return -1;
  }
  close(fd);
  p = m;
  end = p + st.st_size;
  memset(&ck, 0, sizeof(ck));
  if (memcmp(p, PACK_MAGIC, strlen(PACK_MAGIC))) goto no;
  p += strlen(PACK_MAGIC);
  if (!(nl = memchr(p, '\n', (size_t) (end - p))) || nl - p >= (ptrdiff_t) sizeof(tmp)) goto no;
  memcpy(tmp, p, (size_t) (nl - p));
  tmp[nl - p] = '\0';
  ck.count = strtoul(tmp, &stop, 10);
  if (*stop || stop == tmp) goto no;
  ck.p = p = nl + 1;
  for (size_t i = 0; i < ck.count; i++) {
    if (!(nl = memchr(p, '\n', (size_t) (end - p)))) goto no;
    p = nl + 1;
  }
  ck.end = p;
  /* The cheap checks first (another version's pack, another directory's),
   * then a stat of every file of the directory against the index. */
  if (parse(p, (size_t) (end - p), &ver, &verlen) || verlen != strlen(version) ||
      memcmp(ver, version, verlen) || strcmp(lib_dir, dir))
    goto no;
  if (walk(NULL, NULL, &ck, dir, "", 0, e0, sizeof(e0)) || ck.stale || ck.seen != ck.count)
    goto no;
  blob = p;
  blob_len = (size_t) (end - p);
  return 0;
no:
  nentries = 0;
  lib_dir[0] = '\0';
  munmap(m, (size_t) st.st_size);
  return -1;
}

int bt_lib_init(const char *version, const char *builtin, char *err, size_t errlen) {
  const char *fdtext = getenv("BATON_LIB_FD");
  char exe[PATH_MAX], dir[PATH_MAX + 256], *b;
  size_t n = sizeof(exe), len;
  const char *ver;
  size_t verlen;
  int e;

  if (blob) return 0;
  if (fdtext && *fdtext) return attach(fdtext, version, err, errlen);
  e = bt_lib_search(getenv("BATON_LUADIR"), uv_exepath(exe, &n) == 0 ? exe : NULL,
                    builtin, dir, sizeof(dir));
  if (e) {
    snprintf(err, errlen, "%s", dir);
    return e;
  }
  if (map_pack(dir, version) == 0) return 0;
  e = bt_lib_read_dir(dir, version, &b, &len, err, errlen);
  if (e) return e;
  e = parse(b, len, &ver, &verlen);
  if (e) {
    free(b);
    snprintf(err, errlen, "cannot index baton's Lua library: %s", bt_strerror(e));
    return e;
  }
  blob = b;
  blob_len = len;
  return 0;
}

const char *bt_lib_dir(void) {
  return blob ? lib_dir : NULL;
}

const char *bt_lib_file(const char *rel, size_t *len) {
  size_t i, n = strlen(rel);
  for (i = 0; i < nentries; i++) {
    if (entries[i].rel_len == n && memcmp(entries[i].rel, rel, n) == 0) {
      *len = entries[i].len;
      return entries[i].data;
    }
  }
  return NULL;
}

int bt_lib_fd(void) {
  int fd, hi, e;
  size_t off = 0;
  if (lib_fd >= 0) return lib_fd;
  if (!blob) return BT_EINVAL;
  fd = memfd_create("baton-lib", MFD_ALLOW_SEALING);
  if (fd < 0) return uv_translate_sys_error(errno);
  while (off < blob_len) {
    ssize_t w = write(fd, blob + off, blob_len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      e = w < 0 ? uv_translate_sys_error(errno) : BT_EIO;
      close(fd);
      return e;
    }
    off += (size_t) w;
  }
  /* Nobody (a job that finds the descriptor in /proc) can change it now. */
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    e = uv_translate_sys_error(errno);
    close(fd);
    return e;
  }
  hi = fcntl(fd, F_DUPFD, LIB_FD_MIN);
  e = errno;
  close(fd);
  if (hi < 0) return uv_translate_sys_error(e);
  lib_fd = hi;
  return hi;
}
