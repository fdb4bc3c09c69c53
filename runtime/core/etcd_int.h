/*
 * Inside the etcd client: the pure core of the watch stream's line parser,
 * apart from the watch it drives, so that it can be unit-tested and fuzzed
 * (fuzz/etcd_fuzz.c) without a server.
 */
#ifndef BATON_ETCD_INT_H
#define BATON_ETCD_INT_H

#include "etcd.h"

/* One line of a streamed watch response ({"result":{...}}), as read. */
typedef struct {
  cJSON *json;              /* the whole line: the caller cJSON_Deletes it */
  int64_t revision;         /* result.header.revision (0 when absent) */
  int64_t compact_revision; /* result.compact_revision (0 when absent) */
  int created, canceled;
  const char *cancel_reason;  /* "" when absent; points into json */
  cJSON *events;            /* result.events when a non-empty array, else NULL */
  int64_t last_mod;         /* mod_revision of the last event's kv (0 if none) */
} bt__watch_line_t;

/** Parses one line of len bytes (no newline). Returns 0 and fills *l, or
 * BT_EPROTO when the stream must be dropped: not JSON, no "result" object
 * (an {"error":...} line: the server is going away), or a revision out of
 * the range 0..INT64_MAX-1 (so that revision + 1 is always one). A
 * malformed revision string reads as 0, as bt_etcd_int64 leaves it. */
int bt__etcd_watch_line(const char *p, size_t len, bt__watch_line_t *l);

#endif
