/* Unit tests of the C core's pure parts: base64, int64 fields, the error
 * table, endpoint lists, the mapping of etcd's error bodies and the watch
 * stream's line parser. */
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

/* Parses s into *l, freeing the line parsed before (cancel_reason and
 * events point into it). */
static int watch_line(const char *s, bt__watch_line_t *l) {
  cJSON_Delete(l->json);
  return bt__etcd_watch_line(s, strlen(s), l);
}

static void test_watch_line(void) {
  bt__watch_line_t l = { 0 };
  is_int(watch_line("{\"result\":{\"header\":{\"cluster_id\":\"14841639068965178418\","
                    "\"member_id\":\"10276657743932975437\",\"revision\":\"12\","
                    "\"raft_term\":\"2\"},\"created\":true}}", &l), 0, "created line");
  ok(l.created && !l.canceled && l.revision == 12 && !l.events, "created at revision 12, no events");
  is_int(watch_line("{\"result\":{\"header\":{\"revision\":\"14\"},\"events\":["
                    "{\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"13\"}},"
                    "{\"type\":\"DELETE\",\"kv\":{\"key\":\"Yg==\",\"mod_revision\":\"14\"}}]}}",
                    &l), 0, "events line");
  ok(l.events && l.last_mod == 14 && l.revision == 14, "events, last mod_revision 14");
  is_int(watch_line("{\"result\":{\"header\":{\"revision\":\"20\"},\"events\":[]}}", &l), 0,
         "empty events");
  ok(!l.events && l.revision == 20, "an empty events array is a progress notification");
  is_int(watch_line("{\"result\":{\"header\":{\"revision\":\"30\"},\"canceled\":true,"
                    "\"compact_revision\":\"25\"}}", &l), 0, "compacted line");
  ok(l.canceled && l.compact_revision == 25 && !strcmp(l.cancel_reason, ""), "canceled, compact 25");
  is_int(watch_line("{\"result\":{\"canceled\":true,\"cancel_reason\":"
                    "\"rpc error: code = Unauthenticated desc = etcdserver: invalid auth token\"}}",
                    &l), 0, "auth cancel line");
  ok(strstr(l.cancel_reason, "Unauthenticated") != NULL, "with its reason");
  is_int(watch_line("{\"error\":{\"grpc_code\":14,\"message\":\"transport is closing\"}}", &l),
         BT_EPROTO, "an error line drops the stream");
  is_int(watch_line("{\"result\":", &l), BT_EPROTO, "truncated JSON drops the stream");
  is_int(watch_line("{\"result\":[]}", &l), BT_EPROTO, "a result that is not an object");
  is_int(watch_line("{\"result\":{\"header\":{\"revision\":\"x\"},\"created\":true}}", &l), 0,
         "a malformed revision string");
  is_int(l.revision, 0, "reads as 0, as before");
  is_int(watch_line("{\"result\":{\"header\":{\"revision\":\"9223372036854775807\"},"
                    "\"created\":true}}", &l), BT_EPROTO,
         "revision INT64_MAX drops the stream (next revision would overflow)");
  is_int(watch_line("{\"result\":{\"events\":[{\"kv\":{\"mod_revision\":"
                    "\"9223372036854775807\"}}]}}", &l), BT_EPROTO,
         "mod_revision INT64_MAX drops the stream");
  is_int(watch_line("{\"result\":{\"header\":{\"revision\":\"-3\"}}}", &l), BT_EPROTO,
         "a negative revision drops the stream");
  cJSON_Delete(l.json);
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

static void test_map_error(void) {
  char msg[200];
  const char *b;
  b = "{\"error\":\"etcdserver: mvcc: required revision has been compacted\","
      "\"message\":\"etcdserver: mvcc: required revision has been compacted\",\"code\":11}";
  is_int(bt_etcd_map_error(400, b, strlen(b), msg, sizeof(msg)), BT_ECOMPACTED, "3.4 compacted");
  is_str(msg, "etcdserver: mvcc: required revision has been compacted", "etcd's text kept");
  b = "{\"code\":5,\"message\":\"etcdserver: requested lease not found\",\"details\":[]}";
  is_int(bt_etcd_map_error(404, b, strlen(b), msg, sizeof(msg)), BT_ENOLEASE, "3.6 shape, lease not found");
  b = "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":\"transport is closing\","
      "\"http_status\":\"Service Unavailable\"}}";
  is_int(bt_etcd_map_error(200, b, strlen(b), msg, sizeof(msg)), BT_EUNAVAIL, "stream error line");
  is_str(msg, "transport is closing", "stream error text");
  b = "{\"error\":\"etcdserver: invalid auth token\",\"message\":\"etcdserver: invalid auth token\",\"code\":16}";
  is_int(bt_etcd_map_error(401, b, strlen(b), msg, sizeof(msg)), BT_EAUTH, "invalid token");
  b = "{\"error\":\"etcdserver: user name is empty\",\"code\":3}";
  is_int(bt_etcd_map_error(400, b, strlen(b), msg, sizeof(msg)), BT_EAUTH, "no token while auth is on");
  b = "{\"error\":\"etcdserver: no leader\",\"code\":14}";
  is_int(bt_etcd_map_error(503, b, strlen(b), msg, sizeof(msg)), BT_ENOLEADER, "no leader");
  b = "{\"error\":\"etcdserver: request is too large\",\"code\":3}";
  is_int(bt_etcd_map_error(400, b, strlen(b), msg, sizeof(msg)), BT_ETOOLARGE, "too large");
  b = "{\"error\":\"etcdserver: mvcc: database space exceeded\",\"code\":8}";
  is_int(bt_etcd_map_error(429, b, strlen(b), msg, sizeof(msg)), BT_ENOSPACE, "space exceeded");
  b = "{\"error\":\"etcdserver: permission denied\",\"code\":7}";
  is_int(bt_etcd_map_error(403, b, strlen(b), msg, sizeof(msg)), BT_EACCES, "permission denied");
  b = "<html>bad gateway</html>";
  is_int(bt_etcd_map_error(502, b, strlen(b), msg, sizeof(msg)), BT_EETCD, "non-JSON body");
  is_str(msg, "http status 502", "status named when the body is not JSON");
  is_int(bt_etcd_map_error(405, NULL, 0, msg, sizeof(msg)), BT_EETCD, "no body");
  /* found by fuzz/etcd_fuzz.c: an empty text gave an empty message */
  b = "{\"error\":\"\",\"code\":5}";
  is_int(bt_etcd_map_error(404, b, strlen(b), msg, sizeof(msg)), BT_EETCD, "empty error text");
  is_str(msg, "unexpected http status", "says something rather than nothing");
  b = "{\"error\":{\"message\":\"\",\"grpc_code\":14}}";
  is_int(bt_etcd_map_error(200, b, strlen(b), msg, sizeof(msg)), BT_EUNAVAIL, "empty stream error text");
  is_str(msg, "unexpected http status", "a stream's empty error line says something too");
}

int main(void) {
  test_b64();
  test_int64();
  test_errors();
  test_endpoints();
  test_map_error();
  test_watch_line();
  return tap_done();
}
