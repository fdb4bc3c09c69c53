/* bt_http_url_ok (http.h), apart from the HTTP client so that what only
 * checks URLs (etcd's endpoint list, etcd's fuzz target) does not bring in
 * the client and its libcurl. */
#include "http.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

/* Judged here rather than by curl: etcd's endpoint list is checked before
 * any request is made, and without loading libcurl. */
int bt_http_url_ok(const char *url) {
  const char *p, *auth_end, *at = NULL, *he, *hp, *q;
  long port;

  if (strncasecmp(url, "http://", 7) == 0) p = url + 7;
  else if (strncasecmp(url, "https://", 8) == 0) p = url + 8;
  else return 0;
  for (q = url; *q; q++)
    if ((unsigned char) *q <= ' ' || *q == 0x7f) return 0;
  auth_end = p + strcspn(p, "/?#");
  for (q = p; q < auth_end; q++)
    if (*q == '@') at = q;
  if (at) p = at + 1;
  if (*p == '[') {
    he = memchr(p, ']', (size_t) (auth_end - p));
    if (!he || he == p + 1) return 0;
    if (he - p - 1 > 255) return 0;
    hp = he + 1;
  } else {
    he = memchr(p, ':', (size_t) (auth_end - p));
    if (!he) he = auth_end;
    if (he == p || he - p > 255) return 0;
    hp = he;
  }
  if (hp < auth_end) {
    if (*hp != ':') return 0;
    if (hp + 1 < auth_end) {
      port = 0;
      for (q = hp + 1; q < auth_end; q++) {
        if (!isdigit((unsigned char) *q) || port > 65535) return 0;
        port = port * 10 + (*q - '0');
      }
      if (port < 1 || port > 65535) return 0;
    }
  }
  return 1;
}
