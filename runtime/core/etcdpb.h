/*
 * etcd's v3 messages and their JSON form.
 *
 * proto/etcd.proto is the subset of etcd's API baton speaks (the KV,
 * Watch and Lease services, Maintenance's Status, Auth's Authenticate;
 * mvcc's KeyValue and Event), written for baton with etcd's field numbers, which are the
 * wire contract. protoc-c compiles it at build time (build/gen/).
 *
 * Above the transport, baton keeps speaking the JSON that etcd's own
 * gateway speaks (proto3's JSON mapping with the .proto's field names:
 * int64 as decimal strings, bytes as base64, enums by name, zero fields
 * omitted), so lua/baton/etcd.lua and everything above it is unchanged.
 * This file converts between that JSON and protobuf, driven by protoc-c's
 * descriptors (one walker for every message, not one function each).
 *
 * The descriptors and C structs are protoc-c's, in the generated
 * "etcd.pb-c.h" (build/gen, on the include path): every message is in
 * package etcdserverpb, KeyValue and Event too, so a WatchResponse is
 * Etcdserverpb__WatchResponse and its descriptor
 * etcdserverpb__watch_response__descriptor.
 *
 * JSON in: a field by its .proto name ("range_end", "TTL") or its
 * lowerCamel JSON name ("rangeEnd"); 64-bit integers as decimal strings or
 * JSON integers; bytes as padded standard base64; enums by name or number;
 * null for "not set"; an empty array for an empty message (Lua's {}).
 * JSON out: the .proto names; 64-bit integers as strings; enums by name
 * (by number when the .proto names no such value); fields that are zero,
 * empty or false left out, except a oneof's member; a sub-message that is
 * present printed even when empty ("header": {}). Fields of a newer etcd
 * that the .proto does not have are skipped.
 */
#ifndef BATON_ETCDPB_H
#define BATON_ETCDPB_H

#include <cjson/cJSON.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

/* One gateway path and the gRPC method it names. */
typedef struct {
  const char *path;    /* the gateway's path, "/v3/kv/range" */
  const char *method;  /* gRPC's, "/etcdserverpb.KV/Range" */
  const ProtobufCMessageDescriptor *req, *res;
  int stream;          /* 1 for the bidirectional streams (Watch,
                          LeaseKeepAlive) */
} bt_etcdpb_method_t;

/** The method for a gateway path, or NULL. */
const bt_etcdpb_method_t *bt_etcdpb_method(const char *path);

/** Packs json (an object in the gateway's form) as message d. Returns 0
 * with *out (malloc'd, also when *len is 0) and *len, or BT_EINVAL with msg
 * naming the field by its path, e.g. "TxnRequest.success[0].request_put.
 * lease: an int64 expected (...)" (an unknown field, a wrong type, bad
 * base64, an unknown enum name, a number out of range, two members of one
 * oneof, a field given twice, nesting deeper than BT_ETCDPB_MAX_DEPTH), or
 * BT_ENOMEM; *out is NULL then. msg may be
 * NULL; a short one is cut, always NUL-terminated. */
int bt_etcdpb_encode(const ProtobufCMessageDescriptor *d, const cJSON *json,
                     uint8_t **out, size_t *len, char *msg, size_t msglen);

/* Messages nested deeper than this are refused, by bt_etcdpb_decode
 * (protobuf-c's unpack would recurse past the stack) and by
 * bt_etcdpb_encode; a transaction in a transaction takes two levels. */
#define BT_ETCDPB_MAX_DEPTH 100

/** Unpacks len bytes of message d into the gateway's JSON form (p may be
 * NULL when len is 0: the empty message). Returns the object (the caller
 * cJSON_Deletes it), or NULL with *err BT_EPROTO (not a valid message, or
 * nested deeper than BT_ETCDPB_MAX_DEPTH) or BT_ENOMEM. */
cJSON *bt_etcdpb_decode(const ProtobufCMessageDescriptor *d, const uint8_t *p,
                        size_t len, int *err);

#endif
