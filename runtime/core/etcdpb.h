/*
 * etcd's v3 messages and their JSON form.
 *
 * proto/etcd.proto is the subset of etcd's API baton speaks (the KV,
 * Watch, Lease, Auth, Maintenance and Cluster services; mvcc's KeyValue
 * and Event), written for baton with etcd's field numbers, which are the
 * wire contract. protoc-c compiles it at build time (build/gen/).
 *
 * Above the transport, baton keeps speaking the JSON that etcd's own
 * gateway speaks (proto3's JSON mapping with the .proto's field names:
 * int64 as decimal strings, bytes as base64, enums by name, zero fields
 * omitted), so lua/baton/etcd.lua and everything above it is unchanged.
 * This file converts between that JSON and protobuf, driven by protoc-c's
 * descriptors (one walker for every message, not one function each).
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
 * with *out (malloc'd) and *len, or BT_EINVAL with msg naming the field
 * (an unknown field, a wrong type, bad base64, an unknown enum name),
 * or BT_ENOMEM. */
int bt_etcdpb_encode(const ProtobufCMessageDescriptor *d, const cJSON *json,
                     uint8_t **out, size_t *len, char *msg, size_t msglen);

/** Unpacks len bytes of message d into the gateway's JSON form. Returns
 * the object (the caller cJSON_Deletes it), or NULL with *err BT_EPROTO
 * (not a valid message) or BT_ENOMEM. */
cJSON *bt_etcdpb_decode(const ProtobufCMessageDescriptor *d, const uint8_t *p,
                        size_t len, int *err);

#endif
