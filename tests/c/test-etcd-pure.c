/* Unit tests of the C core's pure parts: base64, int64 fields, the error
 * table, endpoint lists, the mapping of gRPC statuses to codes and the
 * Watch stream's response reader. */
#include "tap.h"
#include "b64.h"
#include "err.h"
#include "etcd_int.h"

#include <stdint.h>
#include <stdlib.h>

static void test_b64(void) {
  static const struct { const char *in, *out; } v[] = {
    {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"},
    {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
  };
  char enc[64], dec[64];
  unsigned char bin[256], back[256];
  char big[400];
  size_t i;
  long n;

  for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    bt_b64_encode(enc, v[i].in, strlen(v[i].in));
    is_str(enc, v[i].out, "encode \"%s\"", v[i].in);
    n = bt_b64_decode(dec, v[i].out, strlen(v[i].out));
    dec[n < 0 ? 0 : n] = '\0';
    is_str(dec, v[i].in, "decode \"%s\"", v[i].out);
  }
  for (i = 0; i < 256; i++) bin[i] = (unsigned char) i;
  is_int(bt_b64_enclen(256), 345, "encoded length of 256 bytes + NUL");
  bt_b64_encode(big, bin, 256);
  n = bt_b64_decode(back, big, strlen(big));
  ok(n == 256 && memcmp(back, bin, 256) == 0, "all 256 byte values round-trip (NUL too)");
  is_int(bt_b64_decode(dec, "Zm8", 3), -1, "unpadded input is malformed");
  is_int(bt_b64_decode(dec, "Zm-v", 4), -1, "URL-safe alphabet is malformed");
  is_int(bt_b64_decode(dec, "Zg==Zg==", 8), -1, "padding in the middle is malformed");
  is_int(bt_b64_decode(dec, "Z=g=", 4), -1, "data after padding is malformed");
  is_int(bt_b64_decode(dec, "", 0), 0, "empty decodes to empty");
}

static void test_int64(void) {
  cJSON *j = cJSON_Parse("{\"rev\":\"42\",\"id\":\"7587869001012345678\","
                         "\"num\":17,\"neg\":\"-1\",\"bad\":\"12x\","
                         "\"empty\":\"\",\"obj\":{}}");
  int64_t v;
  is_int(bt_etcd_int64(j, "rev", &v), 0, "string int64 parses");
  is_int(v, 42, "value 42");
  bt_etcd_int64(j, "id", &v);
  ok(v == INT64_C(7587869001012345678), "an id above 2^53 keeps every digit");
  bt_etcd_int64(j, "num", &v);
  is_int(v, 17, "a JSON number is accepted too");
  bt_etcd_int64(j, "neg", &v);
  is_int(v, -1, "negative (TTL -1)");
  is_int(bt_etcd_int64(j, "missing", &v), 0, "a missing field is zero (etcd omits zeros)");
  is_int(v, 0, "value 0");
  is_int(bt_etcd_int64(j, "bad", &v), BT_EPROTO, "trailing garbage is EPROTO");
  is_int(bt_etcd_int64(j, "empty", &v), BT_EPROTO, "empty string is EPROTO");
  is_int(bt_etcd_int64(j, "obj", &v), BT_EPROTO, "an object is EPROTO");
  cJSON_Delete(j);
  /* beyond int64: strtoll saturates and a double cast is undefined */
  j = cJSON_Parse("{\"max\":\"9223372036854775807\","
                  "\"over\":\"9223372036854775808\","
                  "\"under\":\"-9223372036854775809\",\"big\":1e300,"
                  "\"inf\":1e999,\"low\":-1e19,\"edge\":9223372036854775807}");
  is_int(bt_etcd_int64(j, "max", &v), 0, "INT64_MAX as a string parses");
  ok(v == INT64_MAX, "value INT64_MAX");
  is_int(bt_etcd_int64(j, "over", &v), BT_EPROTO, "a string above INT64_MAX is EPROTO");
  is_int(v, 0, "and reads as 0");
  is_int(bt_etcd_int64(j, "under", &v), BT_EPROTO, "a string below INT64_MIN is EPROTO");
  is_int(bt_etcd_int64(j, "big", &v), BT_EPROTO, "a number above int64 is EPROTO");
  is_int(bt_etcd_int64(j, "inf", &v), BT_EPROTO, "an infinite number is EPROTO");
  is_int(bt_etcd_int64(j, "low", &v), BT_EPROTO, "a number below int64 is EPROTO");
  is_int(bt_etcd_int64(j, "edge", &v), BT_EPROTO, "2^63 (what 9223372036854775807 reads as) is EPROTO");
  cJSON_Delete(j);
}

/* Reads s (a decoded WatchResponse in the gateway's form) into *r; *j
 * keeps the parsed JSON alive (cancel_reason and events point into it). */
static int watch_res(const char *s, cJSON **j, bt__watch_res_t *r) {
  cJSON_Delete(*j);
  *j = cJSON_Parse(s);
  return bt__etcd_watch_res(*j, r);
}

static void test_watch_res(void) {
  bt__watch_res_t r;
  cJSON *j = NULL;
  is_int(watch_res("{\"header\":{\"cluster_id\":\"14841639068965178418\","
                   "\"member_id\":\"10276657743932975437\",\"revision\":\"12\","
                   "\"raft_term\":\"2\"},\"watch_id\":\"7\",\"created\":true}", &j, &r),
         0, "created response");
  ok(r.created && !r.canceled && r.revision == 12 && !r.events && r.watch_id == 7,
     "created at revision 12, watch 7, no events");
  is_int(watch_res("{\"header\":{\"revision\":\"14\"},\"watch_id\":\"3\",\"events\":["
                   "{\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"13\"}},"
                   "{\"type\":\"DELETE\",\"kv\":{\"key\":\"Yg==\",\"mod_revision\":\"14\"}}]}",
                   &j, &r), 0, "events response");
  ok(r.events && r.last_mod == 14 && r.revision == 14 && r.watch_id == 3,
     "events of watch 3, last mod_revision 14");
  is_int(watch_res("{\"header\":{\"revision\":\"14\"},\"events\":["
                   "{\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"13\"}}],\"fragment\":true}",
                   &j, &r), 0, "a fragment");
  ok(r.fragment && r.events && r.watch_id == 0, "fragment flag read (watch 0 is absent on the wire)");
  is_int(watch_res("{\"header\":{\"revision\":\"20\"},\"watch_id\":\"2\"}", &j, &r), 0,
         "progress notification");
  ok(!r.events && r.revision == 20 && !r.created && !r.canceled, "no events: progress");
  is_int(watch_res("{\"header\":{\"revision\":\"20\"},\"events\":[]}", &j, &r), 0,
         "empty events");
  ok(!r.events, "an empty events array is no events");
  is_int(watch_res("{\"watch_id\":\"4\",\"canceled\":true,\"compact_revision\":\"25\"}",
                   &j, &r), 0, "compacted response");
  ok(r.canceled && r.compact_revision == 25 && !strcmp(r.cancel_reason, ""), "canceled, compact 25");
  is_int(watch_res("{\"watch_id\":\"-1\",\"created\":true,\"canceled\":true,\"cancel_reason\":"
                   "\"rpc error: code = Unauthenticated desc = etcdserver: invalid auth token\"}",
                   &j, &r), 0, "a create refused for its token");
  ok(r.watch_id == -1 && r.created && r.canceled && strstr(r.cancel_reason, "Unauthenticated"),
     "watch -1, created and canceled, with its reason");
  is_int(watch_res("[]", &j, &r), BT_EPROTO, "not an object drops the stream");
  is_int(bt__etcd_watch_res(NULL, &r), BT_EPROTO, "no response drops the stream");
  is_int(watch_res("{\"watch_id\":\"x\"}", &j, &r), BT_EPROTO, "a malformed watch_id");
  is_int(watch_res("{\"events\":{}}", &j, &r), BT_EPROTO, "events not an array");
  is_int(watch_res("{\"header\":{\"revision\":\"x\"},\"created\":true}", &j, &r), 0,
         "a malformed revision string");
  is_int(r.revision, 0, "reads as 0, as before");
  is_int(watch_res("{\"header\":{\"revision\":\"9223372036854775807\"},\"created\":true}",
                   &j, &r), BT_EPROTO,
         "revision INT64_MAX drops the stream (next revision would overflow)");
  is_int(watch_res("{\"events\":[{\"kv\":{\"mod_revision\":\"9223372036854775807\"}}]}",
                   &j, &r), BT_EPROTO, "mod_revision INT64_MAX drops the stream");
  is_int(watch_res("{\"header\":{\"revision\":\"-3\"}}", &j, &r), BT_EPROTO,
         "a negative revision drops the stream");
  cJSON_Delete(j);
}

static void test_errors(void) {
  is_str(bt_err_name(BT_ECONNREFUSED), "ECONNREFUSED", "name of a uv code");
  is_str(bt_err_name(BT_ECOMPACTED), "ECOMPACTED", "name of a baton code");
  is_str(bt_strerror(BT_ECONNREFUSED), "connection refused", "strerror");
  is_str(bt_strerror(BT_ENOLEASE), "lease not found", "strerror of a baton code");
  is_str(bt_err_name(-4250), "EUNKNOWN", "unknown code");
  ok((int) BT_ETIMEDOUT == (int) UV_ETIMEDOUT, "system codes are libuv's");
  {
    /* every name is unique */
    static const int codes[] = {
#define XX(name, value, msg) value,
      BT_ERRNO_MAP(XX)
#undef XX
    };
    size_t i, k, n = sizeof(codes) / sizeof(codes[0]);
    int dup = 0;
    for (i = 0; i < n; i++)
      for (k = i + 1; k < n; k++) dup += codes[i] == codes[k];
    is_int(dup, 0, "no two error codes share a value");
  }
}

static void test_endpoints(void) {
  char **eps, msg[200];
  int n = bt_etcd_parse_endpoints(" http://a:1/, https://b:2 ,,http://c:3", &eps,
                                  msg, sizeof(msg));
  is_int(n, 3, "three endpoints");
  if (n == 3) {
    is_str(eps[0], "http://a:1", "trimmed, trailing slash dropped");
    is_str(eps[1], "https://b:2", "https kept");
    is_str(eps[2], "http://c:3", "empty entries skipped");
    bt_etcd_free_endpoints(eps, n);
  }
  is_int(bt_etcd_parse_endpoints("localhost:2379", &eps, msg, sizeof(msg)), 0,
         "no scheme: refused");
  is_str(msg, "endpoint \"localhost:2379\" is not an http:// or https:// URL",
         "message names the endpoint");
  is_int(bt_etcd_parse_endpoints("", &eps, msg, sizeof(msg)), 0, "empty list");
  is_str(msg, "no etcd endpoint given", "message for an empty list");
}

static void test_map_status(void) {
  char msg[200];
  is_int(bt_etcd_map_status(11, "etcdserver: mvcc: required revision has been compacted",
                            msg, sizeof(msg)), BT_ECOMPACTED, "compacted");
  is_str(msg, "etcdserver: mvcc: required revision has been compacted", "etcd's text kept");
  is_int(bt_etcd_map_status(11, "etcdserver: mvcc: required revision is a future revision",
                            msg, sizeof(msg)), BT_EFUTUREREV, "future revision");
  is_int(bt_etcd_map_status(5, "etcdserver: requested lease not found", msg, sizeof(msg)),
         BT_ENOLEASE, "lease not found");
  is_int(bt_etcd_map_status(14, "transport is closing", msg, sizeof(msg)), BT_EUNAVAIL,
         "UNAVAILABLE");
  is_int(bt_etcd_map_status(16, "etcdserver: invalid auth token", msg, sizeof(msg)), BT_EAUTH,
         "invalid token");
  is_int(bt_etcd_map_status(16, "", msg, sizeof(msg)), BT_EAUTH, "UNAUTHENTICATED without text");
  is_int(bt_etcd_map_status(3, "etcdserver: user name is empty", msg, sizeof(msg)), BT_EAUTH,
         "no token while auth is on");
  is_int(bt_etcd_map_status(3, "etcdserver: authentication failed, invalid user ID or password",
                            msg, sizeof(msg)), BT_EAUTH, "wrong password");
  is_int(bt_etcd_map_status(14, "etcdserver: no leader", msg, sizeof(msg)), BT_ENOLEADER, "no leader");
  is_int(bt_etcd_map_status(14, "etcdserver: leader changed", msg, sizeof(msg)), BT_ENOLEADER,
         "leader changed");
  is_int(bt_etcd_map_status(14, "etcdserver: request timed out", msg, sizeof(msg)), BT_ETIMEDOUT,
         "request timed out");
  is_int(bt_etcd_map_status(3, "etcdserver: request is too large", msg, sizeof(msg)), BT_ETOOLARGE,
         "too large");
  is_int(bt_etcd_map_status(8, "grpc: received message larger than max (600005 vs. 589824)",
                            msg, sizeof(msg)), BT_ETOOLARGE, "over gRPC's own limit");
  is_int(bt_etcd_map_status(3, "etcdserver: too many operations in txn request", msg, sizeof(msg)),
         BT_ETOOLARGE, "too many operations");
  is_int(bt_etcd_map_status(8, "etcdserver: mvcc: database space exceeded", msg, sizeof(msg)),
         BT_ENOSPACE, "space exceeded");
  is_int(bt_etcd_map_status(7, "etcdserver: permission denied", msg, sizeof(msg)), BT_EACCES,
         "permission denied");
  is_int(bt_etcd_map_status(4, "context deadline exceeded", msg, sizeof(msg)), BT_ETIMEDOUT,
         "DEADLINE_EXCEEDED");
  is_int(bt_etcd_map_status(3, "etcdserver: key is not provided", msg, sizeof(msg)), BT_EINVAL,
         "INVALID_ARGUMENT");
  is_int(bt_etcd_map_status(12, "unknown method Nope for service etcdserverpb.KV", msg, sizeof(msg)),
         BT_EETCD, "anything else: EETCD");
  is_str(msg, "unknown method Nope for service etcdserverpb.KV", "with etcd's text");
  is_int(bt_etcd_map_status(9, NULL, msg, sizeof(msg)), BT_EETCD, "no message");
  is_str(msg, "etcd error without a message", "says something rather than nothing");
  is_int(bt_etcd_map_status(9, "x", NULL, 0), BT_EETCD, "no buffer for the message");
}

/* One list of etcd's refusals, for calls (bt_etcd_map_status) and for a
 * watch's cancel_reason alike. */
static void test_refusal(void) {
  char msg[128];
  is_int(bt__etcd_refusal("etcdserver: permission denied"), BT_EACCES, "refusal: permission denied");
  is_int(bt__etcd_refusal("etcdserver: invalid auth token"), BT_EAUTH, "refusal: invalid auth token");
  is_int(bt__etcd_refusal("etcdserver: user name is empty"), BT_EAUTH, "refusal: no user");
  is_int(bt__etcd_refusal("etcdserver: revision of auth store is old"), BT_EAUTH,
         "refusal: auth store moved on");
  is_int(bt__etcd_refusal("rpc error: code = Unauthenticated"), BT_EAUTH, "refusal: Unauthenticated");
  is_int(bt__etcd_refusal("etcdserver: no leader"), 0, "not a refusal: no leader");
  is_int(bt__etcd_refusal(""), 0, "not a refusal: nothing said");
  is_int(bt__etcd_refusal(NULL), 0, "not a refusal: no text");
  is_int(bt_etcd_map_status(2, "etcdserver: permission denied", msg, sizeof(msg)), BT_EACCES,
         "a call refused with the watch's words: the same code");
  is_int(bt_etcd_map_status(2, "etcdserver: authentication is not enabled", msg, sizeof(msg)),
         BT_EAUTH, "auth words in a call: EAUTH, as a watch reads them");
}

int main(void) {
  test_b64();
  test_int64();
  test_errors();
  test_endpoints();
  test_map_status();
  test_watch_res();
  test_refusal();
  return tap_done();
}
