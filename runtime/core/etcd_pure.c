/*
 * The etcd client's pure parts (etcd.h, etcd_int.h): int64 fields, the
 * mapping of gRPC statuses to BT_E* codes, the Watch stream's response
 * reader and endpoint lists. Apart from etcd.c so that the fuzz target
 * (fuzz/etcd_fuzz.c) and the unit tests link them without the transport.
 */
#include "etcd_int.h"
#include "err.h"
#include "http.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bt__etcd_set_msg(char *msg, size_t len, const char *fmt, ...) {
  va_list ap;
  if (!msg || !len) return;
  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
}

int bt_etcd_int64(const cJSON *obj, const char *name, int64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  char *end;
  *out = 0;
  if (!v || cJSON_IsNull(v)) return 0;
  if (cJSON_IsString(v)) {
    long long x;
    if (!v->valuestring[0]) return BT_EPROTO;
    errno = 0;
    x = strtoll(v->valuestring, &end, 10);
    if (*end || errno == ERANGE) return BT_EPROTO;
    *out = x;
    return 0;
  }
  if (cJSON_IsNumber(v)) {
    /* in range first: converting a double beyond int64 is undefined */
    if (!(v->valuedouble >= -9223372036854775808.0 &&
          v->valuedouble < 9223372036854775808.0))
      return BT_EPROTO;
    *out = (int64_t) v->valuedouble;
    return 0;
  }
  return BT_EPROTO;
}

int bt__etcd_contains(const char *s, const char *needle) {
  return s && strstr(s, needle) != NULL;
}

int bt__etcd_refusal(const char *text) {
  if (bt__etcd_contains(text, "permission denied")) return BT_EACCES;
  if (bt__etcd_contains(text, "authentication failed") ||
      bt__etcd_contains(text, "invalid auth token") ||
      bt__etcd_contains(text, "user name is empty") ||
      bt__etcd_contains(text, "revision of auth store is old") ||
      bt__etcd_contains(text, "Unauthenticated") || bt__etcd_contains(text, "auth"))
    return BT_EAUTH;
  return 0;
}

int bt_etcd_map_status(int status, const char *message, char *msg,
                       size_t msglen) {
  const char *text = message && message[0] ? message : NULL;
  int err;

  if (!text) text = "etcd error without a message";
  if (bt__etcd_contains(text, "compacted")) err = BT_ECOMPACTED;
  else if (bt__etcd_contains(text, "future revision")) err = BT_EFUTUREREV;
  else if (bt__etcd_contains(text, "lease not found")) err = BT_ENOLEASE;
  else if (bt__etcd_contains(text, "too large") || bt__etcd_contains(text, "too many operations") ||
           bt__etcd_contains(text, "larger than max"))
    err = BT_ETOOLARGE;
  else if (bt__etcd_contains(text, "space exceeded")) err = BT_ENOSPACE;
  else if (bt__etcd_contains(text, "no leader") || bt__etcd_contains(text, "leader changed"))
    err = BT_ENOLEADER;
  else if (status == 7 || bt__etcd_refusal(text) == BT_EACCES) err = BT_EACCES;
  else if (status == 16 || bt__etcd_refusal(text) == BT_EAUTH) err = BT_EAUTH;
  else if (status == 4 || bt__etcd_contains(text, "timed out")) err = BT_ETIMEDOUT;
  else if (status == 14) err = BT_EUNAVAIL;
  else if (status == 3) err = BT_EINVAL;
  else if (status == 0) err = BT_EPROTO;
  else err = BT_EETCD;
  bt__etcd_set_msg(msg, msglen, "%s", text);
  return err;
}

/* A revision as watch responses carry it: 0 when absent or malformed (as
 * bt_etcd_int64 leaves it); -1 when out of 0..INT64_MAX-1. */
static int64_t res_rev(const cJSON *obj, const char *name) {
  int64_t v = 0;
  bt_etcd_int64(obj, name, &v);
  return v < 0 || v == INT64_MAX ? -1 : v;
}

int bt__etcd_watch_res(const cJSON *j, bt__watch_res_t *r) {
  const cJSON *why, *ev;
  memset(r, 0, sizeof(*r));
  r->cancel_reason = "";
  if (!cJSON_IsObject(j)) return BT_EPROTO;
  if (bt_etcd_int64(j, "watch_id", &r->watch_id)) return BT_EPROTO;
  r->revision = res_rev(cJSON_GetObjectItemCaseSensitive(j, "header"), "revision");
  r->compact_revision = res_rev(j, "compact_revision");
  r->canceled = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "canceled"));
  r->created = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "created"));
  r->fragment = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "fragment"));
  why = cJSON_GetObjectItemCaseSensitive(j, "cancel_reason");
  if (cJSON_IsString(why)) r->cancel_reason = why->valuestring;
  ev = cJSON_GetObjectItemCaseSensitive(j, "events");
  if (ev && !cJSON_IsArray(ev)) return BT_EPROTO;
  if (cJSON_IsArray(ev) && cJSON_GetArraySize(ev) > 0) {
    cJSON *last = cJSON_GetArrayItem(ev, cJSON_GetArraySize(ev) - 1);
    r->events = (cJSON *) ev;
    r->last_mod = res_rev(cJSON_GetObjectItemCaseSensitive(last, "kv"),
                          "mod_revision");
  }
  if (r->revision < 0 || r->compact_revision < 0 || r->last_mod < 0) return BT_EPROTO;
  return 0;
}

int bt_etcd_parse_endpoints(const char *list, char ***out, char *msg,
                            size_t msglen) {
  char **eps = NULL;
  int n = 0;
  const char *p = list ? list : "";

  *out = NULL;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t) (e - p) : strlen(p);
    while (len && (*p == ' ' || *p == '\t')) p++, len--;
    while (len && (p[len - 1] == ' ' || p[len - 1] == '/')) len--;
    if (len) {
      char **ne = realloc(eps, sizeof(*eps) * (size_t) (n + 1));
      char *s;
      if (!ne) goto fail;
      eps = ne;
      if ((len < 7 || strncmp(p, "http://", 7)) &&
          (len < 8 || strncmp(p, "https://", 8))) {
        bt__etcd_set_msg(msg, msglen, "endpoint \"%.*s\" is not an http:// or https:// URL",
                (int) len, p);
        goto fail;
      }
      s = malloc(len + 1);
      if (!s) goto fail;
      memcpy(s, p, len);
      s[len] = '\0';
      eps[n++] = s;
      if (!bt_http_url_ok(s)) {
        bt__etcd_set_msg(msg, msglen, "endpoint \"%s\" is not a valid URL (host, or "
                "port 1-65535)", s);
        goto fail;
      }
    }
    p += e ? (size_t) (e - p) + 1 : strlen(p);
  }
  if (!n) {
    bt__etcd_set_msg(msg, msglen, "no etcd endpoint given");
    free(eps);
    return 0;
  }
  *out = eps;
  return n;
fail:
  bt_etcd_free_endpoints(eps, n);
  return 0;
}

void bt_etcd_free_endpoints(char **eps, int n) {
  int i;
  for (i = 0; i < n; i++) free(eps[i]);
  free(eps);
}

