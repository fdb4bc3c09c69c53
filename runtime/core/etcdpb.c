/*
 * etcd's gateway JSON <-> protobuf, driven by protoc-c's descriptors.
 *
 * The JSON is what grpc-gateway 1.9 prints with jsonpb{OrigName: true} in
 * etcd 3.4: the .proto's field names; int64, uint64, fixed64 as decimal
 * strings; bytes as standard base64 with padding; enums by name (a value
 * the .proto does not name by number); zero, empty and false fields left
 * out, except a oneof's member, which is printed whatever its value, and a
 * sub-message, which is printed when present even if empty ("header": {}).
 * On input it takes what jsonpb takes: the .proto name or its lowerCamel
 * JSON name, 64-bit integers as strings or numbers, enums by name or
 * number, null for "not set"; and it refuses what jsonpb refuses: an
 * unknown field, a wrong type, bad base64, an unknown enum name, two
 * members of one oneof. The message names the field by its path in the
 * request ("TxnRequest.success[0].request_put.lease: ...").
 *
 * Encoding builds the protobuf-c struct with malloc (the layout is the
 * descriptor's: offsets, quantifier offsets for n_* counts and oneof
 * cases), packs it and frees it with protobuf_c_message_free_unpacked,
 * which frees exactly what this file allocated: a field is stored only
 * once its memory is owned by the message.
 */
#include "etcdpb.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "b64.h"
#include "err.h"
#include "etcd.pb-c.h"

/* ---- the path table ---------------------------------------------------- */

#define M(path, svc, name, req, res, stream)                                 \
  {path, "/etcdserverpb." svc "/" name, &etcdserverpb__##req##__descriptor,   \
   &etcdserverpb__##res##__descriptor, stream}

static const bt_etcdpb_method_t methods[] = {
  M("/v3/kv/range", "KV", "Range", range_request, range_response, 0),
  M("/v3/kv/put", "KV", "Put", put_request, put_response, 0),
  M("/v3/kv/deleterange", "KV", "DeleteRange", delete_range_request,
    delete_range_response, 0),
  M("/v3/kv/txn", "KV", "Txn", txn_request, txn_response, 0),
  M("/v3/kv/compaction", "KV", "Compact", compaction_request,
    compaction_response, 0),
  M("/v3/watch", "Watch", "Watch", watch_request, watch_response, 1),
  M("/v3/lease/grant", "Lease", "LeaseGrant", lease_grant_request,
    lease_grant_response, 0),
  M("/v3/lease/revoke", "Lease", "LeaseRevoke", lease_revoke_request,
    lease_revoke_response, 0),
  M("/v3/lease/keepalive", "Lease", "LeaseKeepAlive",
    lease_keep_alive_request, lease_keep_alive_response, 1),
  M("/v3/lease/timetolive", "Lease", "LeaseTimeToLive",
    lease_time_to_live_request, lease_time_to_live_response, 0),
  M("/v3/lease/leases", "Lease", "LeaseLeases", lease_leases_request,
    lease_leases_response, 0),
  M("/v3/maintenance/status", "Maintenance", "Status", status_request,
    status_response, 0),
  M("/v3/auth/authenticate", "Auth", "Authenticate", authenticate_request,
    authenticate_response, 0),
};
#undef M

const bt_etcdpb_method_t *bt_etcdpb_method(const char *path) {
  size_t i;
  if (!path) return NULL;
  for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
    if (strcmp(methods[i].path, path) == 0) return &methods[i];
  return NULL;
}

/* ---- field access -------------------------------------------------------- */

#define AT(msg, off) ((void *) ((char *) (msg) + (off)))
#define CAT(msg, off) ((const void *) ((const char *) (msg) + (off)))

static size_t elem_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32: case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_ENUM:
    return 4;
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64: case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE:
    return 8;
  case PROTOBUF_C_TYPE_BOOL:
    return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_STRING:
    return sizeof(char *);
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(ProtobufCMessage *);
  }
  return 0;
}

static int is_oneof(const ProtobufCFieldDescriptor *f) {
  return (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0;
}

/* ---- JSON -> protobuf ---------------------------------------------------- */

typedef struct {
  char *msg;
  size_t msglen;
  char path[256];   /* "TxnRequest.success[0].request_put" */
  size_t plen;
  int depth;        /* messages open */
} enc_t;

static int fail(enc_t *e, const char *fmt, ...) {
  va_list ap;
  size_t n;
  if (!e->msg || !e->msglen) return BT_EINVAL;
  n = (size_t) snprintf(e->msg, e->msglen, "%s: ", e->path);
  if (n < e->msglen) {
    va_start(ap, fmt);
    vsnprintf(e->msg + n, e->msglen - n, fmt, ap);
    va_end(ap);
  }
  return BT_EINVAL;
}

/* Appends ".name" or "[i]" to the error path; returns the length to cut
 * back to. A path longer than the buffer ends in "...". */
static size_t push(enc_t *e, const char *fmt, ...) {
  size_t old = e->plen;
  va_list ap;
  int n;
  if (e->plen + 1 >= sizeof(e->path)) return old;
  va_start(ap, fmt);
  n = vsnprintf(e->path + e->plen, sizeof(e->path) - e->plen, fmt, ap);
  va_end(ap);
  if (n < 0) return old;
  if ((size_t) n >= sizeof(e->path) - e->plen) {
    memcpy(e->path + sizeof(e->path) - 4, "...", 4);
    e->plen = sizeof(e->path) - 1;
  } else {
    e->plen += (size_t) n;
  }
  return old;
}

static void pop(enc_t *e, size_t old) {
  e->plen = old;
  e->path[old] = '\0';
}

static const char *json_type(const cJSON *j) {
  if (cJSON_IsString(j)) return "a string";
  if (cJSON_IsNumber(j)) return "a number";
  if (cJSON_IsBool(j)) return "a boolean";
  if (cJSON_IsArray(j)) return "an array";
  if (cJSON_IsObject(j)) return "an object";
  if (cJSON_IsNull(j)) return "null";
  return "an invalid value";
}

/* name matches the field's .proto name, or its lowerCamel JSON name
 * (jsonpb takes both): "range_end" or "rangeEnd". */
static int name_is(const char *name, const char *field) {
  int up = 0;
  if (strcmp(name, field) == 0) return 1;
  for (; *field; field++) {
    char c = *field;
    if (c == '_') { up = 1; continue; }
    if (up && c >= 'a' && c <= 'z') c = (char) (c - 'a' + 'A');
    up = 0;
    if (*name++ != c) return 0;
  }
  return *name == '\0';
}

static const ProtobufCFieldDescriptor *
field_named(const ProtobufCMessageDescriptor *d, const char *name) {
  const ProtobufCFieldDescriptor *f;
  unsigned i;
  f = protobuf_c_message_descriptor_get_field_by_name(d, name);
  if (f) return f;
  for (i = 0; i < d->n_fields; i++)
    if (name_is(name, d->fields[i].name)) return &d->fields[i];
  return NULL;
}

/* A 64-bit integer from a decimal string or a JSON number with an
 * integral value. */
static int get_int(enc_t *e, const cJSON *j, int is_signed, int64_t *s,
                   uint64_t *u, const char *what) {
  if (cJSON_IsString(j)) {
    const char *p = j->valuestring;
    char *end;
    int neg = p[0] == '-';
    if (!(p[neg] >= '0' && p[neg] <= '9')) goto bad;
    errno = 0;
    if (is_signed) {
      long long v = strtoll(p, &end, 10);
      if (errno || *end) goto bad;
      *s = v;
    } else {
      unsigned long long v;
      if (neg) goto bad;
      v = strtoull(p, &end, 10);
      if (errno || *end) goto bad;
      *u = v;
    }
    return 0;
  }
  if (cJSON_IsNumber(j)) {
    double d = j->valuedouble;
    if (d != floor(d)) goto bad;
    if (is_signed) {
      if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) goto bad;
      *s = (int64_t) d;
    } else {
      if (!(d >= 0 && d < 18446744073709551616.0)) goto bad;
      *u = (uint64_t) d;
    }
    return 0;
  }
bad:
  if (cJSON_IsString(j))
    return fail(e, "%s expected (a decimal string or an integer), got \"%.40s\"",
                what, j->valuestring);
  return fail(e, "%s expected (a decimal string or an integer), got %s", what,
              json_type(j));
}

static int enc_message(enc_t *e, const ProtobufCMessageDescriptor *d,
                       const cJSON *j, ProtobufCMessage **out);

/* One value of field f (one element of a repeated one) into slot. */
static int enc_value(enc_t *e, const ProtobufCFieldDescriptor *f,
                     const cJSON *j, void *slot) {
  int64_t s = 0;
  uint64_t u = 0;
  int rc;
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    if ((rc = get_int(e, j, 1, &s, &u, "an int32"))) return rc;
    if (s < INT32_MIN || s > INT32_MAX) return fail(e, "int32 out of range");
    *(int32_t *) slot = (int32_t) s;
    return 0;
  case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32:
    if ((rc = get_int(e, j, 0, &s, &u, "a uint32"))) return rc;
    if (u > UINT32_MAX) return fail(e, "uint32 out of range");
    *(uint32_t *) slot = (uint32_t) u;
    return 0;
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    if ((rc = get_int(e, j, 1, &s, &u, "an int64"))) return rc;
    *(int64_t *) slot = s;
    return 0;
  case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
    if ((rc = get_int(e, j, 0, &s, &u, "a uint64"))) return rc;
    *(uint64_t *) slot = u;
    return 0;
  case PROTOBUF_C_TYPE_FLOAT: case PROTOBUF_C_TYPE_DOUBLE:
    if (!cJSON_IsNumber(j))
      return fail(e, "a number expected, got %s", json_type(j));
    if (f->type == PROTOBUF_C_TYPE_FLOAT) *(float *) slot = (float) j->valuedouble;
    else *(double *) slot = j->valuedouble;
    return 0;
  case PROTOBUF_C_TYPE_BOOL:
    if (!cJSON_IsBool(j))
      return fail(e, "true or false expected, got %s", json_type(j));
    *(protobuf_c_boolean *) slot = cJSON_IsTrue(j) ? 1 : 0;
    return 0;
  case PROTOBUF_C_TYPE_ENUM: {
    const ProtobufCEnumDescriptor *ed = f->descriptor;
    if (cJSON_IsString(j)) {
      const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value_by_name(ed, j->valuestring);
      if (!v) return fail(e, "unknown %s \"%.40s\"", ed->short_name, j->valuestring);
      *(int *) slot = v->value;
      return 0;
    }
    if (cJSON_IsNumber(j)) {
      double d = j->valuedouble;
      if (d != floor(d) || d < INT32_MIN || d > INT32_MAX)
        return fail(e, "unknown %s %g", ed->short_name, d);
      *(int *) slot = (int) d;
      return 0;
    }
    return fail(e, "a %s name or number expected, got %s", ed->short_name,
                json_type(j));
  }
  case PROTOBUF_C_TYPE_STRING: {
    char *str;
    if (!cJSON_IsString(j)) return fail(e, "a string expected, got %s", json_type(j));
    if (!(str = strdup(j->valuestring))) return BT_ENOMEM;
    *(char **) slot = str;
    return 0;
  }
  case PROTOBUF_C_TYPE_BYTES: {
    ProtobufCBinaryData *b = slot;
    size_t n;
    long got;
    uint8_t *buf;
    if (!cJSON_IsString(j))
      return fail(e, "base64 string expected, got %s", json_type(j));
    n = strlen(j->valuestring);
    if (n == 0) return 0;
    if (!(buf = malloc(n / 4 * 3 + 3))) return BT_ENOMEM;
    got = bt_b64_decode(buf, j->valuestring, n);
    if (got < 0) {
      free(buf);
      return fail(e, "bad base64 \"%.40s\"", j->valuestring);
    }
    b->data = buf;
    b->len = (size_t) got;
    return 0;
  }
  case PROTOBUF_C_TYPE_MESSAGE:
    /* enc_message stores the message in slot before filling it, so that
     * a failure halfway leaves it owned by the parent. */
    return enc_message(e, f->descriptor, j, (ProtobufCMessage **) slot);
  }
  return fail(e, "unsupported field type");
}

static int enc_field(enc_t *e, ProtobufCMessage *m,
                     const ProtobufCFieldDescriptor *f, const cJSON *j) {
  int rc;
  if (f->label == PROTOBUF_C_LABEL_REPEATED) {
    size_t *n = AT(m, f->quantifier_offset), sz = elem_size(f->type);
    void **arr = AT(m, f->offset);
    const cJSON *v;
    int count, i;
    if (!cJSON_IsArray(j)) return fail(e, "an array expected, got %s", json_type(j));
    count = cJSON_GetArraySize(j);
    if (count == 0) return 0;
    if (!(*arr = calloc((size_t) count, sz))) return BT_ENOMEM;
    /* along the list: cJSON_GetArrayItem walks it from the head each time */
    for (i = 0, v = j->child; v && i < count; i++, v = v->next) {
      size_t old = push(e, "[%d]", i);
      /* counted first: zeroed elements are safe to free */
      *n = (size_t) i + 1;
      if (cJSON_IsNull(v))
        rc = fail(e, "null in an array");
      else
        rc = enc_value(e, f, v, (char *) *arr + (size_t) i * sz);
      if (rc) return rc;
      pop(e, old);
    }
    return 0;
  }
  if (is_oneof(f)) {
    uint32_t *c = AT(m, f->quantifier_offset);
    if (*c) {
      unsigned i;
      const ProtobufCMessageDescriptor *d = m->descriptor;
      for (i = 0; i < d->n_fields; i++)
        if (d->fields[i].id == *c)
          return fail(e, "a oneof holds one field, and %s is set already",
                      d->fields[i].name);
      return fail(e, "a oneof holds one field");
    }
    *c = f->id;
  } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL &&
             f->type != PROTOBUF_C_TYPE_MESSAGE &&
             f->type != PROTOBUF_C_TYPE_STRING && f->quantifier_offset) {
    *(protobuf_c_boolean *) AT(m, f->quantifier_offset) = 1;
  }
  return enc_value(e, f, j, AT(m, f->offset));
}

static int enc_message(enc_t *e, const ProtobufCMessageDescriptor *d,
                       const cJSON *j, ProtobufCMessage **out) {
  ProtobufCMessage *m;
  const cJSON *it;
  unsigned char seen[256];
  int rc;
  if (cJSON_IsNull(j)) return 0;
  /* Lua's encoder spells an empty table as [] when marked as an array. */
  if (cJSON_IsArray(j) && cJSON_GetArraySize(j) == 0) j = NULL;
  else if (!cJSON_IsObject(j))
    return fail(e, "an object (%s) expected, got %s", d->short_name, json_type(j));
  if (e->depth >= BT_ETCDPB_MAX_DEPTH)
    return fail(e, "nested deeper than %d messages", BT_ETCDPB_MAX_DEPTH);
  if (!(m = malloc(d->sizeof_message))) return BT_ENOMEM;
  protobuf_c_message_init(d, m);
  *out = m;
  e->depth++;
  memset(seen, 0, sizeof(seen));
  for (it = j ? j->child : NULL; it; it = it->next) {
    const ProtobufCFieldDescriptor *f;
    size_t old, idx;
    if (!it->string) return fail(e, "a member without a name");
    old = push(e, ".%s", it->string);
    if (!(f = field_named(d, it->string))) return fail(e, "unknown field");
    idx = (size_t) (f - d->fields);
    if (idx < sizeof(seen)) {
      if (seen[idx]) return fail(e, "given twice");
      seen[idx] = 1;
    }
    if (cJSON_IsNull(it)) { pop(e, old); continue; }
    if ((rc = enc_field(e, m, f, it))) return rc;
    pop(e, old);
  }
  e->depth--;
  return 0;
}

int bt_etcdpb_encode(const ProtobufCMessageDescriptor *d, const cJSON *json,
                     uint8_t **out, size_t *len, char *msg, size_t msglen) {
  enc_t e;
  ProtobufCMessage *m = NULL;
  uint8_t *buf;
  size_t n;
  int rc;
  *out = NULL;
  *len = 0;
  memset(&e, 0, sizeof(e));
  e.msg = msg;
  e.msglen = msglen;
  if (msg && msglen) msg[0] = '\0';
  push(&e, "%s", d->short_name);
  if (!json || cJSON_IsNull(json))
    rc = fail(&e, "an object expected, got %s", json ? "null" : "nothing");
  else
    rc = enc_message(&e, d, json, &m);
  if (rc) {
    if (m) protobuf_c_message_free_unpacked(m, NULL);
    return rc;
  }
  n = protobuf_c_message_get_packed_size(m);
  /* malloc(0) may be NULL: an empty message is one byte of buffer */
  if (!(buf = malloc(n ? n : 1))) {
    protobuf_c_message_free_unpacked(m, NULL);
    return BT_ENOMEM;
  }
  protobuf_c_message_pack(m, buf);
  protobuf_c_message_free_unpacked(m, NULL);
  *out = buf;
  *len = n;
  return 0;
}

/* ---- protobuf -> JSON ---------------------------------------------------- */

static cJSON *dec_value(const ProtobufCFieldDescriptor *f, const void *slot);

static cJSON *dec_message(const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  cJSON *o = cJSON_CreateObject();
  unsigned i;
  if (!o) return NULL;
  for (i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    const void *slot = CAT(m, f->offset);
    cJSON *v = NULL;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *) CAT(m, f->quantifier_offset), k;
      const char *arr = *(char *const *) slot;
      size_t sz = elem_size(f->type);
      if (n == 0) continue;
      if (!(v = cJSON_CreateArray())) goto nomem;
      for (k = 0; k < n; k++) {
        cJSON *x = dec_value(f, arr + k * sz);
        if (!x) { cJSON_Delete(v); goto nomem; }
        cJSON_AddItemToArray(v, x);
      }
    } else {
      if (is_oneof(f)) {
        if (*(const uint32_t *) CAT(m, f->quantifier_offset) != f->id) continue;
      } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL &&
                 f->type != PROTOBUF_C_TYPE_MESSAGE &&
                 f->type != PROTOBUF_C_TYPE_STRING && f->quantifier_offset) {
        if (!*(const protobuf_c_boolean *) CAT(m, f->quantifier_offset)) continue;
      } else if (f->label == PROTOBUF_C_LABEL_NONE) {
        /* proto3: zero is absent */
        switch (f->type) {
        case PROTOBUF_C_TYPE_STRING: {
          const char *s = *(char *const *) slot;
          if (!s || !*s) continue;
          break;
        }
        case PROTOBUF_C_TYPE_BYTES:
          if (((const ProtobufCBinaryData *) slot)->len == 0) continue;
          break;
        case PROTOBUF_C_TYPE_MESSAGE:
          if (!*(void *const *) slot) continue;
          break;
        default: {
          static const char zero[8];
          if (memcmp(slot, zero, elem_size(f->type)) == 0) continue;
        }
        }
      }
      if (f->type == PROTOBUF_C_TYPE_MESSAGE && !*(void *const *) slot) continue;
      if (!(v = dec_value(f, slot))) goto nomem;
    }
    cJSON_AddItemToObject(o, f->name, v);
  }
  return o;
nomem:
  cJSON_Delete(o);
  return NULL;
}

static cJSON *str_num(const char *fmt, ...) {
  char buf[32];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return cJSON_CreateString(buf);
}

static cJSON *dec_value(const ProtobufCFieldDescriptor *f, const void *slot) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    return cJSON_CreateNumber(*(const int32_t *) slot);
  case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32:
    return cJSON_CreateNumber(*(const uint32_t *) slot);
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    return str_num("%" PRId64, *(const int64_t *) slot);
  case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
    return str_num("%" PRIu64, *(const uint64_t *) slot);
  case PROTOBUF_C_TYPE_FLOAT:
    return cJSON_CreateNumber(*(const float *) slot);
  case PROTOBUF_C_TYPE_DOUBLE:
    return cJSON_CreateNumber(*(const double *) slot);
  case PROTOBUF_C_TYPE_BOOL:
    return cJSON_CreateBool(*(const protobuf_c_boolean *) slot);
  case PROTOBUF_C_TYPE_ENUM: {
    int v = *(const int *) slot;
    const ProtobufCEnumValue *ev =
      protobuf_c_enum_descriptor_get_value(f->descriptor, v);
    return ev ? cJSON_CreateString(ev->name) : cJSON_CreateNumber(v);
  }
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(char *const *) slot;
    return cJSON_CreateString(s ? s : "");
  }
  case PROTOBUF_C_TYPE_BYTES: {
    const ProtobufCBinaryData *b = slot;
    char *buf = malloc(bt_b64_enclen(b->len));
    cJSON *s;
    if (!buf) return NULL;
    bt_b64_encode(buf, b->data, b->len);
    s = cJSON_CreateString(buf);
    free(buf);
    return s;
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessage *sub = *(ProtobufCMessage *const *) slot;
    /* an element of a repeated message field is never NULL after unpack;
     * a NULL one prints as {} */
    return sub ? dec_message(sub) : cJSON_CreateObject();
  }
  }
  return cJSON_CreateNull();
}

/* protobuf-c's unpack recurses once per nested message, without a limit:
 * a few hundred kilobytes of nested ResponseOps and TxnResponses would
 * overflow the stack. Returns 1 when the message nests deeper than
 * BT_ETCDPB_MAX_DEPTH, reading only tags and lengths (each byte once);
 * other malformations are left for unpack to find. */
static size_t varint(const uint8_t *p, size_t len, uint64_t *v) {
  size_t i;
  *v = 0;
  for (i = 0; i < len && i < 10; i++) {
    *v |= (uint64_t) (p[i] & 0x7f) << (7 * i);
    if (!(p[i] & 0x80)) return i + 1;
  }
  return 0;
}

static int too_deep(const ProtobufCMessageDescriptor *d, const uint8_t *p,
                    size_t len, int depth) {
  if (depth > BT_ETCDPB_MAX_DEPTH) return 1;
  while (len) {
    uint64_t tag, v;
    size_t n = varint(p, len, &tag), k;
    if (!n) return 0;
    p += n;
    len -= n;
    switch (tag & 7) {
    case 0:
      if (!(n = varint(p, len, &v))) return 0;
      break;
    case 1: n = 8; break;
    case 5: n = 4; break;
    case 2: {
      const ProtobufCFieldDescriptor *f = NULL;
      if (!(k = varint(p, len, &v)) || v > len - k) return 0;
      if (tag >> 3 <= 0x1fffffff)
        f = protobuf_c_message_descriptor_get_field(d, (unsigned) (tag >> 3));
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
          too_deep(f->descriptor, p + k, (size_t) v, depth + 1))
        return 1;
      n = k + (size_t) v;
      break;
    }
    default:
      return 0;
    }
    if (n > len) return 0;
    p += n;
    len -= n;
  }
  return 0;
}

/* protobuf-c's unpack returns NULL both for malformed input and for a
 * failed allocation: this allocator tells them apart. */
static void *dec_alloc(void *data, size_t n) {
  void *p = malloc(n);
  if (!p) *(int *) data = 1;
  return p;
}

static void dec_free(void *data, void *p) {
  (void) data;
  free(p);
}

cJSON *bt_etcdpb_decode(const ProtobufCMessageDescriptor *d, const uint8_t *p,
                        size_t len, int *err) {
  int oom = 0;
  ProtobufCAllocator a = {dec_alloc, dec_free, &oom};
  ProtobufCMessage *m;
  cJSON *j;
  static const uint8_t empty[1];
  if (p && too_deep(d, p, len, 1)) {
    if (err) *err = BT_EPROTO;
    return NULL;
  }
  m = protobuf_c_message_unpack(d, &a, len, p ? p : empty);
  if (!m) {
    if (err) *err = oom ? BT_ENOMEM : BT_EPROTO;
    return NULL;
  }
  j = dec_message(m);
  protobuf_c_message_free_unpacked(m, &a);
  if (!j && err) *err = BT_ENOMEM;
  return j;
}
