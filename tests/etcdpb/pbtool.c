/*
 * pbtool: runtime/core/etcdpb.c from the command line, for
 * tests/etcdpb/capture.sh (not part of the build).
 *
 *   pbtool enc PATH req|res   JSON on stdin -> protobuf on stdout
 *   pbtool dec PATH req|res   protobuf on stdin -> JSON on stdout
 *
 * PATH is a gateway path ("/v3/kv/range"); req or res picks its request
 * or response message. Exit 1 with the converter's message on failure.
 */
#include "err.h"
#include "etcdpb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(size_t *len) {
  size_t cap = 1 << 16, n = 0, got;
  char *buf = malloc(cap + 1);
  while (buf && (got = fread(buf + n, 1, cap - n, stdin)) > 0) {
    n += got;
    if (n == cap && !(buf = realloc(buf, (cap *= 2) + 1))) break;
  }
  if (!buf) exit(2);
  buf[n] = '\0';
  *len = n;
  return buf;
}

int main(int argc, char **argv) {
  const bt_etcdpb_method_t *m;
  const ProtobufCMessageDescriptor *d;
  size_t len;
  char *in;
  if (argc != 4 || !(m = bt_etcdpb_method(argv[2]))) {
    fprintf(stderr, "usage: pbtool enc|dec PATH req|res\n");
    return 2;
  }
  d = strcmp(argv[3], "res") == 0 ? m->res : m->req;
  in = slurp(&len);
  if (strcmp(argv[1], "enc") == 0) {
    char msg[256];
    uint8_t *out;
    size_t n;
    cJSON *j = cJSON_ParseWithLength(in, len);
    int rc = bt_etcdpb_encode(d, j, &out, &n, msg, sizeof msg);
    if (rc) {
      fprintf(stderr, "pbtool: %s: %s\n", bt_err_name(rc), msg);
      return 1;
    }
    fwrite(out, 1, n, stdout);
    free(out);
    cJSON_Delete(j);
  } else {
    int err = 0;
    cJSON *j = bt_etcdpb_decode(d, (const uint8_t *) in, len, &err);
    char *s;
    if (!j) {
      fprintf(stderr, "pbtool: %s\n", bt_err_name(err));
      return 1;
    }
    s = cJSON_PrintUnformatted(j);
    printf("%s\n", s);
    free(s);
    cJSON_Delete(j);
  }
  free(in);
  return 0;
}
