/*
 * Unit tests of runtime/core/etcdpb.c, no etcd needed: the path table;
 * JSON -> protobuf -> JSON round trips of every kind of request and
 * response baton sends and reads; the forms jsonpb also accepts; the
 * bytes of a few messages; one clear error per kind of bad input; and the
 * real answers of etcd 3.4.23 captured by tests/etcdpb/capture.sh
 * (tests/c/etcdpb/: NAME.bin, the raw protobuf, decodes to NAME.json, what
 * etcd's gateway printed for the same answer, and NAME.json encodes back
 * to the same bytes).
 */
#include "tap.h"
#include "err.h"
#include "etcdpb.h"
#include "etcd.pb-c.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>

static const bt_etcdpb_method_t *method(const char *path) {
  const bt_etcdpb_method_t *m = bt_etcdpb_method(path);
  if (!m) {
    printf("# no method for %s\n", path);
    abort();
  }
  return m;
}

static char *print(const cJSON *j) {
  return j ? cJSON_PrintUnformatted(j) : NULL;
}

static void test_paths(void) {
  /* the path table: every path lua/baton/etcd.lua and runtime/core/etcd.c
   * use, and no other */
  static const struct { const char *path, *method; int stream; } v[] = {
    {"/v3/kv/range", "/etcdserverpb.KV/Range", 0},
    {"/v3/kv/put", "/etcdserverpb.KV/Put", 0},
    {"/v3/kv/deleterange", "/etcdserverpb.KV/DeleteRange", 0},
    {"/v3/kv/txn", "/etcdserverpb.KV/Txn", 0},
    {"/v3/kv/compaction", "/etcdserverpb.KV/Compact", 0},
    {"/v3/watch", "/etcdserverpb.Watch/Watch", 1},
    {"/v3/lease/grant", "/etcdserverpb.Lease/LeaseGrant", 0},
    {"/v3/lease/revoke", "/etcdserverpb.Lease/LeaseRevoke", 0},
    {"/v3/lease/keepalive", "/etcdserverpb.Lease/LeaseKeepAlive", 1},
    {"/v3/lease/timetolive", "/etcdserverpb.Lease/LeaseTimeToLive", 0},
    {"/v3/lease/leases", "/etcdserverpb.Lease/LeaseLeases", 0},
    {"/v3/auth/authenticate", "/etcdserverpb.Auth/Authenticate", 0},
    {"/v3/maintenance/status", "/etcdserverpb.Maintenance/Status", 0},
  };
  for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    const bt_etcdpb_method_t *m = bt_etcdpb_method(v[i].path);
    ok(m && strcmp(m->method, v[i].method) == 0 && m->stream == v[i].stream &&
       m->req && m->res, "%s -> %s%s", v[i].path, v[i].method,
       v[i].stream ? " (stream)" : "");
  }
  ok(method("/v3/kv/range")->req == &etcdserverpb__range_request__descriptor &&
     method("/v3/kv/range")->res == &etcdserverpb__range_response__descriptor,
     "range's descriptors");
  ok(method("/v3/watch")->res == &etcdserverpb__watch_response__descriptor,
     "watch answers WatchResponse");
  ok(!bt_etcdpb_method("/v3/kv/nope") && !bt_etcdpb_method("") &&
     !bt_etcdpb_method(NULL) && !bt_etcdpb_method("/v3/kv/range/"),
     "unknown paths give NULL");
  ok(!bt_etcdpb_method("/v3/kv/lease/revoke") && !bt_etcdpb_method("/v3/auth/enable") &&
     !bt_etcdpb_method("/v3/cluster/member/list") && !bt_etcdpb_method("/v3/maintenance/alarm"),
     "nor do the gateway paths baton does not call");
}

/* in (JSON) encodes as d and decodes to out (in itself if out is NULL). */
static void round_trip(const ProtobufCMessageDescriptor *d, const char *in,
                       const char *out, const char *what) {
  cJSON *j = cJSON_Parse(in), *back = NULL, *want = cJSON_Parse(out ? out : in);
  uint8_t *buf = NULL;
  size_t len = 0;
  char msg[256] = "";
  int rc, err = 0;
  if (!j || !want) {
    ok(0, "%s: test JSON parses", what);
    abort();
  }
  rc = bt_etcdpb_encode(d, j, &buf, &len, msg, sizeof msg);
  if (rc == 0) back = bt_etcdpb_decode(d, buf, len, &err);
  if (!ok(rc == 0 && back && cJSON_Compare(back, want, 1), "%s round-trips",
          what)) {
    char *s = print(back);
    printf("# rc %d (%s) err %d\n#      got: %s\n# expected: %s\n", rc, msg, err,
           s ? s : "(null)", out ? out : in);
    free(s);
  }
  free(buf);
  cJSON_Delete(j);
  cJSON_Delete(back);
  cJSON_Delete(want);
}

#define REQ(path, in, what) round_trip(method(path)->req, in, NULL, what)
#define RES(path, in, what) round_trip(method(path)->res, in, NULL, what)
#define HDR "\"header\":{\"cluster_id\":\"18446744073709551615\",\"member_id\":\"1\"," \
            "\"revision\":\"9223372036854775807\",\"raft_term\":\"2\"}"
#define KV(k, v) "{\"key\":\"" k "\",\"create_revision\":\"2\",\"mod_revision\":\"3\"," \
                 "\"version\":\"2\",\"value\":\"" v "\",\"lease\":\"-9223372036854775808\"}"

static void test_round_trips(void) {
  /* requests, as lua/baton/etcd.lua and etcd.c build them */
  REQ("/v3/kv/range", "{\"key\":\"YQ==\",\"range_end\":\"Yg==\",\"limit\":\"10\","
      "\"revision\":\"5\",\"sort_order\":\"DESCEND\",\"sort_target\":\"MOD\","
      "\"serializable\":true,\"keys_only\":true,\"count_only\":true,"
      "\"min_mod_revision\":\"1\",\"max_mod_revision\":\"2\","
      "\"min_create_revision\":\"3\",\"max_create_revision\":\"4\"}",
      "RangeRequest, every field");
  REQ("/v3/kv/range", "{\"key\":\"AGEAYgA=\",\"range_end\":\"AA==\"}",
      "RangeRequest, NUL bytes in keys");
  REQ("/v3/kv/put", "{\"key\":\"AA==\",\"value\":\"AAAAAA==\",\"lease\":\"9223372036854775807\","
      "\"prev_kv\":true,\"ignore_lease\":true}", "PutRequest, NUL bytes, INT64_MAX lease");
  REQ("/v3/kv/put", "{\"key\":\"YQ==\",\"ignore_value\":true}", "PutRequest, ignore_value");
  REQ("/v3/kv/deleterange", "{\"key\":\"YQ==\",\"range_end\":\"Yg==\",\"prev_kv\":true}",
      "DeleteRangeRequest");
  REQ("/v3/kv/txn",
      "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"YQ==\",\"create_revision\":\"0\"},"
      "{\"result\":\"NOT_EQUAL\",\"target\":\"VALUE\",\"key\":\"YQ==\",\"value\":\"AA==\",\"range_end\":\"Yg==\"},"
      "{\"result\":\"LESS\",\"target\":\"LEASE\",\"key\":\"YQ==\",\"lease\":\"-1\"},"
      "{\"result\":\"GREATER\",\"key\":\"YQ==\",\"version\":\"0\"},"
      "{\"target\":\"MOD\",\"key\":\"YQ==\",\"mod_revision\":\"7\"}],"
      "\"success\":[{\"request_put\":{\"key\":\"YQ==\",\"value\":\"Yg==\"}},"
      "{\"request_range\":{\"key\":\"YQ==\"}},{\"request_delete_range\":{\"key\":\"YQ==\"}},"
      "{\"request_txn\":{\"success\":[{\"request_txn\":{\"failure\":[{\"request_range\":{}}]}}]}}],"
      "\"failure\":[{\"request_range\":{\"key\":\"Yw==\",\"count_only\":true}}]}",
      "TxnRequest: every compare target (zero oneof values kept), nested txns");
  REQ("/v3/kv/compaction", "{\"revision\":\"12\",\"physical\":true}", "CompactionRequest");
  REQ("/v3/watch", "{\"create_request\":{\"key\":\"YQ==\",\"range_end\":\"Yg==\","
      "\"start_revision\":\"4\",\"progress_notify\":true,\"filters\":[\"NOPUT\",\"NODELETE\"],"
      "\"prev_kv\":true,\"watch_id\":\"77\",\"fragment\":true}}", "WatchRequest create");
  REQ("/v3/watch", "{\"cancel_request\":{\"watch_id\":\"77\"}}", "WatchRequest cancel");
  REQ("/v3/watch", "{\"cancel_request\":{}}", "WatchRequest cancel of watch 0");
  REQ("/v3/watch", "{\"progress_request\":{}}", "WatchRequest progress");
  REQ("/v3/lease/grant", "{\"TTL\":\"10\",\"ID\":\"7587\"}", "LeaseGrantRequest");
  REQ("/v3/lease/revoke", "{\"ID\":\"7587\"}", "LeaseRevokeRequest");
  REQ("/v3/lease/keepalive", "{\"ID\":\"-2\"}", "LeaseKeepAliveRequest");
  REQ("/v3/lease/timetolive", "{\"ID\":\"7587\",\"keys\":true}", "LeaseTimeToLiveRequest");
  REQ("/v3/lease/leases", "{}", "LeaseLeasesRequest");
  REQ("/v3/auth/authenticate", "{\"name\":\"root\",\"password\":\"p\\u00e9w\"}",
      "AuthenticateRequest");
  REQ("/v3/maintenance/status", "{}", "StatusRequest");

  /* responses */
  RES("/v3/kv/range", "{" HDR ",\"kvs\":[" KV("AA==", "AAEA") "," KV("YQ==", "Yg==") "],"
      "\"more\":true,\"count\":\"3\"}", "RangeResponse");
  RES("/v3/kv/range", "{\"header\":{}}", "RangeResponse, empty header kept");
  RES("/v3/kv/put", "{" HDR ",\"prev_kv\":" KV("YQ==", "Yg==") "}", "PutResponse");
  RES("/v3/kv/deleterange", "{" HDR ",\"deleted\":\"2\",\"prev_kvs\":[" KV("YQ==", "Yg==")
      "," KV("Yg==", "Yw==") "]}", "DeleteRangeResponse");
  RES("/v3/kv/txn", "{" HDR ",\"succeeded\":true,\"responses\":["
      "{\"response_range\":{\"header\":{\"revision\":\"3\"},\"kvs\":[" KV("YQ==", "Yg==") "]}},"
      "{\"response_put\":{\"header\":{}}},{\"response_delete_range\":{\"header\":{}}},"
      "{\"response_txn\":{\"header\":{},\"responses\":[{\"response_put\":{\"header\":{}}}]}}]}",
      "TxnResponse, nested");
  RES("/v3/watch", "{" HDR ",\"watch_id\":\"3\",\"events\":[{\"kv\":" KV("YQ==", "Yg==") "},"
      "{\"type\":\"DELETE\",\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"4\"},"
      "\"prev_kv\":" KV("YQ==", "Yg==") "}]}", "WatchResponse events (PUT's type omitted)");
  RES("/v3/watch", "{" HDR ",\"watch_id\":\"-1\",\"created\":true,\"canceled\":true,"
      "\"compact_revision\":\"12\",\"cancel_reason\":\"mvcc: required revision has been compacted\","
      "\"fragment\":true}", "WatchResponse cancel");
  RES("/v3/lease/grant", "{" HDR ",\"ID\":\"7587\",\"TTL\":\"10\",\"error\":\"x\"}",
      "LeaseGrantResponse");
  RES("/v3/lease/keepalive", "{" HDR ",\"ID\":\"7587\",\"TTL\":\"10\"}", "LeaseKeepAliveResponse");
  RES("/v3/lease/timetolive", "{" HDR ",\"ID\":\"7587\",\"TTL\":\"-1\",\"grantedTTL\":\"10\","
      "\"keys\":[\"YQ==\",\"AA==\"]}", "LeaseTimeToLiveResponse");
  RES("/v3/lease/leases", "{" HDR ",\"leases\":[{\"ID\":\"1\"},{}]}", "LeaseLeasesResponse");
  RES("/v3/maintenance/status", "{" HDR ",\"version\":\"3.4.23\",\"dbSize\":\"20480\","
      "\"leader\":\"1\",\"raftIndex\":\"4\",\"raftTerm\":\"2\",\"raftAppliedIndex\":\"4\","
      "\"errors\":[\"etcdserver: no leader\"],\"dbSizeInUse\":\"16384\",\"isLearner\":true}",
      "StatusResponse");
  RES("/v3/maintenance/status", "{" HDR ",\"leader\":\"18446744073709551615\","
      "\"errors\":[\"http://x:2380\",\"http://y:2379\"]}",
      "StatusResponse, uint64 max, two strings");
  RES("/v3/auth/authenticate", "{" HDR ",\"token\":\"abc.12\"}", "AuthenticateResponse");
}

/* Forms jsonpb accepts that print otherwise. */
static void test_accepted(void) {
  const ProtobufCMessageDescriptor *range = method("/v3/kv/range")->req;
  round_trip(range, "{\"key\":\"YQ==\",\"limit\":10,\"revision\":-3}",
             "{\"key\":\"YQ==\",\"limit\":\"10\",\"revision\":\"-3\"}", "int64 as JSON numbers");
  round_trip(range, "{\"sort_order\":2,\"sort_target\":\"KEY\",\"keys_only\":false}",
             "{\"sort_order\":\"DESCEND\"}", "enum by number; zero and false dropped");
  round_trip(range, "{\"rangeEnd\":\"YQ==\",\"keysOnly\":true,\"minModRevision\":\"1\"}",
             "{\"range_end\":\"YQ==\",\"keys_only\":true,\"min_mod_revision\":\"1\"}",
             "lowerCamel names");
  round_trip(range, "{\"key\":null,\"limit\":null,\"range_end\":\"\"}", "{}",
             "null and empty mean unset");
  round_trip(range, "[]", "{}", "an empty array is an empty message");
  round_trip(method("/v3/kv/range")->res, "{\"header\":[],\"kvs\":null}", "{\"header\":{}}",
             "[] for a sub-message");
  round_trip(method("/v3/kv/range")->req, "{\"sort_order\":7}", "{\"sort_order\":7}",
             "an enum value without a name prints as a number");
  round_trip(method("/v3/kv/put")->req, "{\"lease\":\"-0\",\"value\":\"\"}", "{}", "-0");
  round_trip(method("/v3/maintenance/status")->res,
             "{\"header\":{\"cluster_id\":1.8446744073709550e19}}",
             "{\"header\":{\"cluster_id\":\"18446744073709549568\"}}",
             "a uint64 as a large JSON number");
}

static void test_bytes(void) {
  static const struct {
    const char *path, *json;
    const char *bytes;
    size_t len;
    const char *what;
  } v[] = {
    {"/v3/kv/range", "{\"key\":\"YQ==\"}", "\x0a\x01\x61", 3, "key"},
    {"/v3/kv/range", "{}", "", 0, "empty message, zero bytes"},
    {"/v3/watch", "{\"progress_request\":{}}", "\x1a\x00", 2,
     "an empty oneof message is still sent"},
    {"/v3/kv/txn", "{\"compare\":[{\"key\":\"YQ==\",\"target\":\"CREATE\",\"create_revision\":0}]}",
     "\x0a\x07\x10\x01\x1a\x01\x61\x28\x00", 9, "a zero oneof member is sent"},
    {"/v3/kv/txn", "{\"compare\":[{\"range_end\":\"AA==\"}]}", "\x0a\x04\x82\x04\x01\x00", 6,
     "Compare.range_end is field 64"},
    {"/v3/lease/keepalive", "{\"ID\":\"-1\"}",
     "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11, "-1 as a ten-byte varint"},
    {"/v3/watch", "{\"create_request\":{\"filters\":[\"NODELETE\",0]}}",
     "\x0a\x04\x2a\x02\x01\x00", 6, "filters packed"},
  };
  for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    cJSON *j = cJSON_Parse(v[i].json);
    uint8_t *buf = NULL;
    size_t len = 0;
    char msg[200];
    int rc = bt_etcdpb_encode(method(v[i].path)->req, j, &buf, &len, msg, sizeof msg);
    if (!ok(rc == 0 && len == v[i].len && memcmp(buf, v[i].bytes, len) == 0,
            "bytes: %s", v[i].what)) {
      printf("# rc %d, %zu bytes:", rc, len);
      for (size_t k = 0; k < len; k++) printf(" %02x", buf[k]);
      printf("\n");
    }
    free(buf);
    cJSON_Delete(j);
  }
}

static void bad(const char *path, const char *json, const char *want) {
  cJSON *j = cJSON_Parse(json);
  uint8_t *buf = (uint8_t *) "x";
  size_t len = 99;
  char msg[200];
  int rc;
  if (!j) abort();
  rc = bt_etcdpb_encode(method(path)->req, j, &buf, &len, msg, sizeof msg);
  if (!ok(rc == BT_EINVAL && buf == NULL && len == 0 && strcmp(msg, want) == 0,
          "error: %s", want)) {
    printf("# rc %d\n#      got: %s\n# expected: %s\n", rc, rc ? msg : "(success)", want);
    if (rc == 0) free(buf);
  }
  cJSON_Delete(j);
}

static void test_errors(void) {
  bad("/v3/kv/range", "{\"ky\":\"YQ==\"}", "RangeRequest.ky: unknown field");
  bad("/v3/kv/txn", "{\"success\":[{\"request_put\":{\"key\":\"YQ==\",\"lese\":\"1\"}}]}",
      "TxnRequest.success[0].request_put.lese: unknown field");
  bad("/v3/kv/range", "{\"limit\":true}",
      "RangeRequest.limit: an int64 expected (a decimal string or an integer), got a boolean");
  bad("/v3/kv/range", "{\"limit\":\"ten\"}",
      "RangeRequest.limit: an int64 expected (a decimal string or an integer), got \"ten\"");
  bad("/v3/kv/range", "{\"limit\":1.5}",
      "RangeRequest.limit: an int64 expected (a decimal string or an integer), got a number");
  bad("/v3/kv/range", "{\"limit\":\"9223372036854775808\"}",
      "RangeRequest.limit: an int64 expected (a decimal string or an integer), got \"9223372036854775808\"");
  bad("/v3/kv/range", "{\"limit\":\"-9223372036854775809\"}",
      "RangeRequest.limit: an int64 expected (a decimal string or an integer), got \"-9223372036854775809\"");
  bad("/v3/kv/range", "{\"limit\":\" 1\"}",
      "RangeRequest.limit: an int64 expected (a decimal string or an integer), got \" 1\"");
  bad("/v3/kv/range", "{\"limit\":\"1 \"}",
      "RangeRequest.limit: an int64 expected (a decimal string or an integer), got \"1 \"");
  bad("/v3/kv/range", "{\"limit\":\"\"}",
      "RangeRequest.limit: an int64 expected (a decimal string or an integer), got \"\"");
  bad("/v3/kv/range", "{\"key\":\"YQ\"}", "RangeRequest.key: bad base64 \"YQ\"");
  bad("/v3/kv/range", "{\"key\":\"Y-==\"}", "RangeRequest.key: bad base64 \"Y-==\"");
  bad("/v3/kv/range", "{\"key\":3}", "RangeRequest.key: base64 string expected, got a number");
  bad("/v3/kv/range", "{\"sort_order\":\"UP\"}", "RangeRequest.sort_order: unknown SortOrder \"UP\"");
  bad("/v3/kv/range", "{\"sort_order\":1.5}", "RangeRequest.sort_order: unknown SortOrder 1.5");
  bad("/v3/kv/range", "{\"sort_order\":true}",
      "RangeRequest.sort_order: a SortOrder name or number expected, got a boolean");
  bad("/v3/kv/range", "{\"keys_only\":\"true\"}",
      "RangeRequest.keys_only: true or false expected, got a string");
  bad("/v3/kv/range", "{\"keys_only\":1}",
      "RangeRequest.keys_only: true or false expected, got a number");
  bad("/v3/kv/range", "{\"key\":\"YQ==\",\"key\":\"Yg==\"}", "RangeRequest.key: given twice");
  bad("/v3/kv/range", "[1]", "RangeRequest: an object (RangeRequest) expected, got an array");
  bad("/v3/kv/range", "\"x\"", "RangeRequest: an object (RangeRequest) expected, got a string");
  bad("/v3/kv/range", "null", "RangeRequest: an object expected, got null");
  bad("/v3/kv/txn", "{\"compare\":{}}", "TxnRequest.compare: an array expected, got an object");
  bad("/v3/kv/txn", "{\"compare\":[null]}", "TxnRequest.compare[0]: null in an array");
  bad("/v3/kv/txn", "{\"compare\":[{}, 3]}",
      "TxnRequest.compare[1]: an object (Compare) expected, got a number");
  bad("/v3/kv/txn", "{\"compare\":[{\"version\":\"1\",\"mod_revision\":\"2\"}]}",
      "TxnRequest.compare[0].mod_revision: a oneof holds one field, and version is set already");
  bad("/v3/kv/txn", "{\"compare\":[{\"target\":\"CREATED\"}]}",
      "TxnRequest.compare[0].target: unknown CompareTarget \"CREATED\"");
  bad("/v3/watch", "{\"create_request\":{\"key\":\"YQ==\"},\"cancel_request\":{}}",
      "WatchRequest.cancel_request: a oneof holds one field, and create_request is set already");
  bad("/v3/watch", "{\"create_request\":{\"filters\":[\"NOPUT\",\"NOGET\"]}}",
      "WatchRequest.create_request.filters[1]: unknown FilterType \"NOGET\"");
  bad("/v3/watch", "{\"create_request\":{\"filters\":\"NOPUT\"}}",
      "WatchRequest.create_request.filters: an array expected, got a string");
  bad("/v3/auth/authenticate", "{\"name\":1}",
      "AuthenticateRequest.name: a string expected, got a number");
  bad("/v3/maintenance/status", "{\"x\":1}", "StatusRequest.x: unknown field");
  bad("/v3/lease/grant", "{\"ttl\":\"5\"}", "LeaseGrantRequest.ttl: unknown field");

  /* message buffers: small, or none */
  {
    cJSON *j = cJSON_Parse("{\"nope\":1}");
    uint8_t *buf;
    size_t len;
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    is_int(bt_etcdpb_encode(method("/v3/kv/range")->req, j, &buf, &len, tiny, sizeof tiny),
           BT_EINVAL, "a small message buffer: still BT_EINVAL");
    is_str(tiny, "RangeRe", "... and the message is cut, NUL-terminated");
    is_int(bt_etcdpb_encode(method("/v3/kv/range")->req, j, &buf, &len, NULL, 0),
           BT_EINVAL, "no message buffer: still BT_EINVAL");
    cJSON_Delete(j);
  }
  /* a path too long for the error's buffer; nesting too deep */
  for (int depth = 40; depth <= 60; depth += 20) {
    char json[4096] = "";
    for (int i = 0; i < depth; i++) strcat(json, "{\"request_txn\":{\"success\":[");
    strcat(json, "{\"x\":1}");
    for (int i = 0; i < depth; i++) strcat(json, "]}}");
    cJSON *j = cJSON_Parse(json), *top = cJSON_CreateObject();
    uint8_t *buf;
    size_t len;
    char msg[400];
    const char *want = depth == 40 ? "...: unknown field" : "...: nested deeper than 100 messages";
    cJSON *arr = cJSON_CreateArray();
    cJSON_AddItemToArray(arr, j);
    cJSON_AddItemToObject(top, "success", arr);
    is_int(bt_etcdpb_encode(method("/v3/kv/txn")->req, top, &buf, &len, msg, sizeof msg),
           BT_EINVAL, "an error %d transactions deep", depth);
    ok(strlen(msg) < 300 && strstr(msg, want) && strncmp(msg, "TxnRequest.success[0]", 21) == 0,
       "... its path is cut with \"...\": %.40s...%s", msg, strstr(msg, "...:") ? strstr(msg, "...:") : "");
    cJSON_Delete(top);
  }
}

static void test_decode_errors(void) {
  static const struct { const char *bytes; size_t len; const char *what; } v[] = {
    {"\x08", 1, "a truncated varint"},
    {"\x0a\x05\x61", 3, "a length past the end"},
    {"\x0f\x00", 2, "wire type 7"},
    {"\x0a\x02\x1a\xff", 4, "a sub-message that is malformed"},
    {"\x12\x05\x0a\x03\x61\x62", 6, "a truncated repeated kv"},
  };
  const ProtobufCMessageDescriptor *d = method("/v3/kv/range")->res;
  for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    int err = 0;
    cJSON *j = bt_etcdpb_decode(d, (const uint8_t *) v[i].bytes, v[i].len, &err);
    ok(!j && err == BT_EPROTO, "decode error: %s -> BT_EPROTO", v[i].what);
    cJSON_Delete(j);
  }
  {
    int err = 1;
    cJSON *j = bt_etcdpb_decode(d, NULL, 0, &err);
    char *s = print(j);
    is_str(s, "{}", "zero bytes are an empty message");
    free(s);
    cJSON_Delete(j);
    /* unknown fields (a newer etcd's) are skipped */
    j = bt_etcdpb_decode(d, (const uint8_t *) "\x18\x01\xa0\x06\x05\x4a\x00", 7, &err);
    s = print(j);
    is_str(s, "{\"more\":true}", "unknown fields are skipped");
    free(s);
    cJSON_Delete(j);
  }
}

/* levels nested ResponseOps and TxnResponses (a txn in a txn in ...),
 * built inside out, each level's header written in front of the bytes so
 * far (from the end of one buffer: linear, where copying the inner bytes
 * at every level took 90 s for a million levels); returns the bytes of the
 * outer one, in a buffer of their own. */
static uint8_t *nested(int levels, size_t *len) {
  size_t cap = (size_t) levels * 12 + 16, n = 0;
  uint8_t *buf = malloc(cap), *out;
  for (int i = 0; i + 1 < levels; i++) {
    uint8_t hdr[12];
    size_t h = 0, v = n;
    hdr[h++] = i % 2 == 0 ? 0x22 : 0x1a;  /* response_txn = 4, responses = 3 */
    while (v >= 0x80) { hdr[h++] = (uint8_t) (v | 0x80); v >>= 7; }
    hdr[h++] = (uint8_t) v;
    memcpy(buf + cap - n - h, hdr, h);
    n += h;
  }
  out = malloc(n ? n : 1);
  memcpy(out, buf + cap - n, n);
  free(buf);
  *len = n;
  return out;
}

/* protobuf-c's unpack recursed past the stack on deep nesting (a crash at
 * 100,000 levels, 400 KB): decode refuses it first. */
static void test_depth(void) {
  static const int levels[] = {BT_ETCDPB_MAX_DEPTH, BT_ETCDPB_MAX_DEPTH + 1, 1000000};
  for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
    size_t len;
    uint8_t *p = nested(levels[i], &len);
    const ProtobufCMessageDescriptor *d = levels[i] % 2 ? &etcdserverpb__txn_response__descriptor
                                                        : &etcdserverpb__response_op__descriptor;
    int err = 0;
    cJSON *j = bt_etcdpb_decode(d, p, len, &err);
    if (levels[i] <= BT_ETCDPB_MAX_DEPTH)
      ok(j != NULL, "%d levels of nested messages decode", levels[i]);
    else
      ok(!j && err == BT_EPROTO, "%d levels (%zu bytes) are refused, BT_EPROTO", levels[i], len);
    cJSON_Delete(j);
    free(p);
  }
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf;
  long n;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  rewind(f);
  buf = malloc((size_t) n + 1);
  if (buf && fread(buf, 1, (size_t) n, f) != (size_t) n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) buf[n] = '\0';
  *len = (size_t) n;
  return buf;
}

/* The answers etcd 3.4.23 gave (tests/etcdpb/capture.sh). */
static void test_captured(void) {
  char dir[4096], path[4400], line[512];
  const char *root = getenv("BATON_ROOT"), *src = __FILE__, *slash = strrchr(src, '/');
  FILE *index;
  int n = 0;
  if (root) snprintf(dir, sizeof dir, "%s/tests/c/etcdpb", root);
  else snprintf(dir, sizeof dir, "%.*s/etcdpb", slash ? (int) (slash - src) : 1,
                slash ? src : ".");
  snprintf(path, sizeof path, "%s/index.txt", dir);
  if (!(index = fopen(path, "r"))) {
    ok(0, "captured answers in %s", dir);
    return;
  }
  while (fgets(line, sizeof line, index)) {
    char name[200], p[200];
    size_t blen, jlen, len = 0;
    char *bin, *json;
    const bt_etcdpb_method_t *m;
    cJSON *got, *want;
    uint8_t *again = NULL;
    int err = 0;
    if (sscanf(line, "%199s %199s", name, p) != 2) continue;
    m = method(p);
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    bin = slurp(path, &blen);
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    json = slurp(path, &jlen);
    if (!bin || !json) {
      ok(0, "%s: fixture files readable", name);
      free(bin);
      free(json);
      continue;
    }
    got = bt_etcdpb_decode(m->res, (const uint8_t *) bin, blen, &err);
    want = cJSON_Parse(json);
    if (!ok(got && want && cJSON_Compare(got, want, 1), "captured %s (%s) decodes as the gateway printed it",
            name, p)) {
      char *s = print(got);
      printf("#      got: %s\n# expected: %s", s ? s : "(null)", json);
      free(s);
    }
    ok(want && bt_etcdpb_encode(m->res, want, &again, &len, line, sizeof line) == 0 &&
       len == blen && memcmp(again, bin, len) == 0,
       "captured %s: its JSON encodes to etcd's bytes", name);
    free(again);
    cJSON_Delete(got);
    cJSON_Delete(want);
    free(bin);
    free(json);
    n++;
  }
  fclose(index);
  ok(n >= 28, "%d captured answers", n);
}

int main(void) {
  test_paths();
  test_round_trips();
  test_accepted();
  test_bytes();
  test_errors();
  test_decode_errors();
  test_depth();
  test_captured();
  return tap_done();
}
