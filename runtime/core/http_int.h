/*
 * Inside the HTTP client, apart from sockets: the byte buffer every part of
 * it uses and the HTTP/1.1 response parser of the native backend (both in
 * http_parse.c, which fuzz/http_fuzz.c and tests/c/test-http-parse.c also
 * use on their own). How the front end and its backends fit together is
 * http_backend.h.
 */
#ifndef BATON_HTTP_INT_H
#define BATON_HTTP_INT_H

#include "http.h"

#include <stddef.h>
#include <stdint.h>

#define BT_HTTP_MAX_BODY (512u << 20)   /* a buffered response body */
#define BT_HTTP_MAX_HEAD (256u << 10)   /* a response's header block, or one line */

/* A growing byte buffer, always NUL-terminated once non-empty. */
typedef struct {
  char *p;
  size_t len, cap;
} bt__buf_t;

/** Appends n bytes to b unless that makes it longer than max. Returns 0,
 * or -1 (too long, or out of memory). */
int bt__buf_add(bt__buf_t *b, const char *p, size_t n, size_t max);

/* ---- the response parser (http_parse.c) ----
 *
 * A state machine that reads one response, with no sockets: the caller
 * feeds it bytes as they come, split anywhere, and acts on each event.
 * bt__http_parse consumes a prefix of what it is given and returns
 *   BT__HTTP_MORE   everything was taken; feed more
 *   BT__HTTP_HEAD   the final header block ended: status, keep, framing and
 *                   clen are set (1xx interim answers are skipped silently)
 *   BT__HTTP_BODY   *body, *blen: body bytes (inside the fed buffer; chunk
 *                   framing removed)
 *   BT__HTTP_DONE   the response is complete; what follows is not its own
 *   BT__HTTP_ERROR  a protocol error, described by error (static text)
 * DONE and ERROR repeat on every later call, taking nothing. A response
 * framed by the connection's close is complete when the peer closes while
 * bt__http_parser_eof_ends() is true. */
enum { BT__HTTP_MORE, BT__HTTP_HEAD, BT__HTTP_BODY, BT__HTTP_DONE,
       BT__HTTP_ERROR };
enum { BT__HTTP_NO_BODY, BT__HTTP_LENGTH, BT__HTTP_CHUNKED,
       BT__HTTP_TO_CLOSE };
enum { BT__HP_STATUS, BT__HP_HEADER, BT__HP_BODY_LEN, BT__HP_BODY_EOF,
       BT__HP_CHUNK_SIZE, BT__HP_CHUNK_DATA, BT__HP_CHUNK_END, BT__HP_TRAILER,
       BT__HP_DONE, BT__HP_FAILED };

typedef struct {
  int st;                  /* BT__HP_* */
  int keep;                /* the connection can carry another exchange */
  int chunked;             /* Transfer-Encoding: chunked was seen */
  int head_only;           /* the answer to a HEAD: no body, whatever it says */
  int framing;             /* BT__HTTP_NO_BODY ...: set with BT__HTTP_HEAD */
  long status;             /* of the latest status line, 1xx included */
  int64_t clen;            /* Content-Length, -1 when none */
  uint64_t left;           /* bytes left of the body or of the chunk */
  bt__buf_t line;          /* a line split across feeds (owned) */
  bt__buf_t *head;         /* the header block's lines, CRLF-ended (not owned) */
  const char *error;       /* after BT__HTTP_ERROR */
} bt__http_parser_t;

/** Readies p (zeroed, or used before) for a new response whose header
 * block goes to head (emptied here; it must outlive p's use of it).
 * head_only: the request was a HEAD. */
void bt__http_parser_reset(bt__http_parser_t *p, bt__buf_t *head,
                           int head_only);

/** Frees what p owns (its line buffer); p can be reset and used again. */
void bt__http_parser_free(bt__http_parser_t *p);

/** Feeds n bytes at data: sets *used to the bytes taken and returns the
 * event (above). Never reads outside [data, data + n). */
int bt__http_parse(bt__http_parser_t *p, const char *data, size_t n,
                   size_t *used, const char **body, size_t *blen);

/** True when the peer closing the connection now completes the response
 * (its body is framed by the close). */
int bt__http_parser_eof_ends(const bt__http_parser_t *p);

#endif
