/*
 * Inside the etcd client: the pure core of the Watch stream's
 * demultiplexer and of reading etcd's errors, apart from the client, so
 * that they can be unit-tested and fuzzed (fuzz/etcdpb_fuzz.c reads the
 * WatchResponses it decodes, fuzz/etcd_fuzz.c maps statuses) without a
 * server (etcd_pure.c).
 */
#ifndef BATON_ETCD_INT_H
#define BATON_ETCD_INT_H

#include "etcd.h"

/* One WatchResponse, as etcdpb.h decodes it (the gateway's JSON form). */
typedef struct {
  int64_t watch_id;         /* -1 for a refused create or a progress for all */
  int64_t revision;         /* header.revision (0 when absent) */
  int64_t compact_revision; /* compact_revision (0 when absent) */
  int created, canceled, fragment;
  const char *cancel_reason;  /* "" when absent; points into the response */
  cJSON *events;            /* events when a non-empty array, else NULL */
  int64_t last_mod;         /* mod_revision of the last event's kv (0 if none) */
} bt__watch_res_t;

/** Reads a decoded WatchResponse. Returns 0 and fills *r, or BT_EPROTO
 * when the stream must be dropped: not an object, a malformed watch_id,
 * events that are not an array, or a revision out of the range
 * 0..INT64_MAX-1 (so that revision + 1 is always one). A malformed
 * revision string reads as 0, as bt_etcd_int64 leaves it. */
int bt__etcd_watch_res(const cJSON *j, bt__watch_res_t *r);

/** What etcd's words say of a refusal: BT_EACCES (permission denied),
 * BT_EAUTH (who the client is: a missing, wrong or expired token or
 * password), or 0 for neither. One list for a call's grpc-message and a
 * watch's cancel_reason. */
int bt__etcd_refusal(const char *text);

/** snprintf into msg (msglen bytes; nothing when msg is NULL). */
void bt__etcd_set_msg(char *msg, size_t msglen, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;

/** 1 when s (may be NULL) contains needle. */
int bt__etcd_contains(const char *s, const char *needle);

#endif
