/*
 * gRPC over TLS (TAP): runtime/core/grpc.c against an etcd serving https
 * and requiring client certificates, started here as tests/lua/etcd-tls.lua
 * does (a CA, a server certificate for IP 127.0.0.1, a client certificate,
 * made with the openssl command). With the CA and the client certificate a
 * call works, streams work, and a 40 KB request is one socket write;
 * without the client certificate, without the CA, or by a name the
 * certificate does not hold, the failure is ETLS (or a reset) saying why.
 * Skipped when etcd or openssl is missing. About 5 s.
 */
#define _GNU_SOURCE
#include "grpc.h"
#include "err.h"
#include "tap.h"
#include "uvrun.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

static uv_loop_t *loop;
static char dir[256];

typedef struct {
  int closed, err, status, nmsg;
  char message[600];
} call_t;

typedef struct {
  int ready, closed, err;
  char msg[600];
} conn_rec_t;

static void on_event(bt_grpc_conn_t *c, int ev, int err, const char *msg, void *arg) {
  conn_rec_t *r = arg;
  if (ev == BT_GRPC_READY) r->ready++;
  if (ev == BT_GRPC_CLOSED) {
    r->closed++;
    r->err = err;
    snprintf(r->msg, sizeof(r->msg), "%s", msg ? msg : "");
  }
}

static void on_message(bt_grpc_stream_t *s, const uint8_t *m, size_t len, void *arg) {
  ((call_t *) arg)->nmsg++;
}

static void on_close(bt_grpc_stream_t *s, int err, int status, const char *message, void *arg) {
  call_t *c = arg;
  c->closed++;
  c->err = err;
  c->status = status;
  snprintf(c->message, sizeof(c->message), "%s", message);
}

static const bt_grpc_stream_cbs_t cbs = { on_message, on_close };

/* Connects with the given files, runs one Range on key "/tls", closes.
 * The call's outcome is in *call and the connection's in *r. */
static void range(const char *url, const char *ca, const char *cert, const char *key,
                  call_t *call, conn_rec_t *r, int *connect_err, char *msg, size_t msglen) {
  bt_grpc_conn_opts_t o = { 0 };
  bt_grpc_conn_t *c;
  bt_grpc_stream_t *s;
  static const uint8_t req[] = { 0x0a, 0x04, '/', 't', 'l', 's' };
  memset(call, 0, sizeof(*call));
  memset(r, 0, sizeof(*r));
  o.url = url;
  o.cacert = ca;
  o.cert = cert;
  o.key = key;
  o.connect_timeout_ms = 10000;    /* valgrind makes handshakes slow */
  c = bt_grpc_connect(loop, &o, on_event, r, connect_err, msg, msglen);
  if (!c) return;
  if (bt_grpc_open(c, "/etcdserverpb.KV/Range", NULL, 10000, &cbs, call, &s) == 0)
    bt_grpc_send(s, req, sizeof(req), 1);
  run_until(&call->closed, 1, 15000);
  run_until(&r->closed, 1, 100);   /* a failed connection's CLOSED follows */
  if (!r->closed) bt_grpc_close(c); /* (after CLOSED, c is gone) */
  run_until(&r->closed, 1, 5000);
}

static int sh(const char *cmd) {
  char full[4096];
  snprintf(full, sizeof(full), "cd '%s' && ( %s ) >/dev/null 2>&1", dir, cmd);
  return system(full);
}

static char *path(const char *name) {
  static char bufs[4][512];
  static int i;
  char *b = bufs[i++ % 4];
  snprintf(b, 512, "%s/%s", dir, name);
  return b;
}

int main(void) {
  pid_t etcd = -1;
  char url[64], msg[512];
  call_t call;
  conn_rec_t r;
  int err = 0, attempt, up = 0;
  loop = uv_default_loop();

  if (system("command -v etcd >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1") != 0) {
    printf("1..0 # SKIP etcd or openssl not installed\n");
    return 0;
  }
  snprintf(dir, sizeof(dir), "/tmp/baton-grpc-tls.XXXXXX");
  if (!mkdtemp(dir)) return 1;
  ok(sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 -subj /CN=baton-test-ca && "
        "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 && "
        "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > server.ext && "
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 30 -extfile server.ext && "
        "openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=baton && "
        "printf 'extendedKeyUsage=clientAuth\\n' > client.ext && "
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 30 -extfile client.ext") == 0,
     "certificates made");

  srand((unsigned) (time(NULL) ^ getpid()));
  for (attempt = 0; attempt < 5 && !up; attempt++) {
    int port = 40000 + (rand() % 10000) * 2, i;
    char peer[64], cluster[128], log[600];
    snprintf(url, sizeof(url), "https://127.0.0.1:%d", port);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", port + 1);
    snprintf(cluster, sizeof(cluster), "tls=%s", peer);
    snprintf(log, sizeof(log), "%s/etcd.log", dir);
    fflush(stdout);
    if ((etcd = fork()) == 0) {
      FILE *f = freopen(log, "a", stdout);
      (void) f;
      dup2(1, 2);
      if (chdir(dir) != 0) _exit(127);
      execlp("etcd", "etcd", "--name", "tls", "--data-dir", "data", "--listen-client-urls", url,
             "--advertise-client-urls", url, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
             "--cert-file", "server.pem", "--key-file", "server.key", "--trusted-ca-file",
             "ca.pem", "--client-cert-auth", (char *) NULL);
      _exit(127);
    }
    for (i = 0; i < 100 && !up; i++) {
      range(url, path("ca.pem"), path("client.pem"), path("client.key"), &call, &r, &err, msg,
            sizeof(msg));
      if (call.closed && call.err == 0 && call.status == 0) up = 1;
      else if (waitpid(etcd, NULL, WNOHANG) == etcd) { etcd = -1; break; }
      else usleep(100000);
    }
    if (!up && etcd > 0) {
      kill(etcd, SIGKILL);
      waitpid(etcd, NULL, 0);
      etcd = -1;
    }
  }
  if (!ok(up, "etcd serves gRPC over https at %s, with the CA and a client certificate", url))
    goto out;
  ok(r.ready == 1 && r.closed == 1 && r.err == 0, "READY, then CLOSED after bt_grpc_close");

  /* Streams over Go's net/http2 (etcd's https listener): a Watch gets an
   * event; a malformed message gets the server's status at once. */
  {
    bt_grpc_conn_opts_t o = { 0 };
    bt_grpc_conn_t *c;
    bt_grpc_stream_t *s;
    call_t w, put, bad;
    static const uint8_t watch[] = { 0x0a, 0x06, 0x0a, 0x04, '/', 't', 'l', 's' };
    static const uint8_t putrq[] = { 0x0a, 0x04, '/', 't', 'l', 's', 0x12, 0x01, 'v' };
    static const uint8_t junk[] = { 0xff, 0xff, 0xff };
    o.url = url;
    o.cacert = path("ca.pem");
    o.cert = path("client.pem");
    o.key = path("client.key");
    o.connect_timeout_ms = 10000;
    o.ping_interval_ms = 100;      /* net/http2 has no PING policy */
    o.ping_timeout_ms = 5000;
    memset(&r, 0, sizeof(r));
    memset(&w, 0, sizeof(w));
    memset(&put, 0, sizeof(put));
    memset(&bad, 0, sizeof(bad));
    c = bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg));
    bt_grpc_open(c, "/etcdserverpb.Watch/Watch", NULL, 0, &cbs, &w, &s);
    bt_grpc_send(s, watch, sizeof(watch), 0);
    run_until(&w.nmsg, 1, 10000);
    bt_grpc_open(c, "/etcdserverpb.KV/Put", NULL, 10000, &cbs, &put, &s);
    bt_grpc_send(s, putrq, sizeof(putrq), 1);
    run_until(&w.nmsg, 2, 10000);
    run_until(&put.closed, 1, 10000);
    ok(put.closed == 1 && put.status == 0 && w.nmsg == 2 && w.closed == 0,
       "over TLS: a Watch gets its created answer and the event of a Put "
       "(put %d/%d/%d %s, watch %d msgs, closed %d err %d %s)", put.closed, put.err, put.status,
       put.message, w.nmsg, w.closed, w.err, w.message);
    bt_grpc_open(c, "/etcdserverpb.Watch/Watch", NULL, 0, &cbs, &bad, &s);
    bt_grpc_send(s, junk, sizeof(junk), 0);
    run_until(&bad.closed, 1, 10000);
    ok(bad.closed == 1 && bad.err == 0 && bad.status != 0,
       "over TLS: a malformed message ends its stream with the server's status (%d %s)",
       bad.status, bad.message);
    run_for(700);                  /* several PINGs, answered */
    ok(r.closed == 0 && w.closed == 0, "PINGs every 100 ms over TLS: answered, nothing ends");
    bt_grpc_close(c);
    run_until(&r.closed, 1, 5000);
    ok(w.closed == 1 && w.err == BT_ECANCELED && r.err == 0, "closed: the Watch ends ECANCELED");
  }

  /* A flush over 16 KiB of TLS records is still one socket write. */
  {
    enum { VAL = 40000 };
    bt_grpc_conn_opts_t o = { 0 };
    bt_grpc_conn_t *c;
    bt_grpc_stream_t *s;
    bt_grpc_stats_t st0, st;
    static uint8_t putrq[10 + VAL];
    call_t put;
    memcpy(putrq, "\x0a\x04/tls\x12\xc0\xb8\x02", 10);   /* key, then a 40000-byte value */
    memset(putrq + 10, 'v', VAL);
    o.url = url;
    o.cacert = path("ca.pem");
    o.cert = path("client.pem");
    o.key = path("client.key");
    o.connect_timeout_ms = 10000;
    memset(&r, 0, sizeof(r));
    memset(&put, 0, sizeof(put));
    c = bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg));
    run_until(&r.ready, 1, 10000);
    run_for(50);                   /* the SETTINGS exchange done */
    bt_grpc_stats(c, &st0);
    bt_grpc_open(c, "/etcdserverpb.KV/Put", NULL, 10000, &cbs, &put, &s);
    bt_grpc_send(s, putrq, sizeof(putrq), 1);
    run_until(&put.closed, 1, 10000);
    bt_grpc_stats(c, &st);
    ok(put.closed == 1 && put.err == 0 && put.status == 0, "over TLS: a Put of %d bytes (%s)",
       VAL, put.message);
    is_int(st.writes - st0.writes, 1, "its request is one socket write");
    bt_grpc_close(c);
    run_until(&r.closed, 1, 5000);
  }

  range(url, path("ca.pem"), NULL, NULL, &call, &r, &err, msg, sizeof(msg));
  ok(call.closed == 1 && (call.err == BT_ETLS || call.err == BT_ECONNRESET),
     "without a client certificate: ETLS or a reset (%s)", call.message);
  ok(strstr(call.message, url) != NULL, "naming the url");

  range(url, NULL, path("client.pem"), path("client.key"), &call, &r, &err, msg, sizeof(msg));
  is_int(call.err, BT_ETLS, "a server certificate from an unknown CA: ETLS");
  ok(strstr(call.message, "SSL certificate problem") != NULL, "saying why: %s", call.message);
  is_int(r.err, BT_ETLS, "the connection's CLOSED says ETLS too");

  {
    char byname[80];
    snprintf(byname, sizeof(byname), "https://localhost:%s", strrchr(url, ':') + 1);
    range(byname, path("ca.pem"), path("client.pem"), path("client.key"), &call, &r, &err, msg,
          sizeof(msg));
    ok(call.err == BT_ETLS && strstr(call.message, "SSL certificate problem"),
       "a host name the certificate does not hold: ETLS (%s)", call.message);
  }

  {
    bt_grpc_conn_opts_t o = { 0 };
    o.url = url;
    o.cacert = path("ca.pem");
    o.cert = path("client.pem");
    o.key = path("server.key");
    ok(bt_grpc_connect(loop, &o, on_event, &r, &err, msg, sizeof(msg)) == NULL &&
       err == BT_ETLS && strstr(msg, "server.key"),
       "a key that does not match the certificate: ETLS at once (%s)", msg);
  }

out:
  if (etcd > 0) {
    kill(etcd, SIGTERM);
    waitpid(etcd, NULL, 0);
  }
  {
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
  }
  uv_run(loop, UV_RUN_NOWAIT);
  is_int(uv_loop_close(loop), 0, "every handle closed");
  return tap_done();
}
