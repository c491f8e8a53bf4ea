/* httpmsg.h - the HTTP/1.1 pieces the port proxy reads from a box's server
 * (bytes from inside a box: hostile): a response head and a chunked body.
 * Bounded, no allocation beyond the parsed head, no I/O. */
#ifndef AB_HTTPMSG_H
#define AB_HTTPMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AB_HTTP_HEAD_MAX (64 * 1024) /* largest response head accepted */
#define AB_HTTP_HDRS_MAX 100         /* most header lines */

typedef struct ab_http_head {
        int status;           /* 100..999 */
        size_t head_len;      /* bytes the head took, blank line included */
        size_t n;             /* header lines */
        char **name, **value; /* n each, NUL-terminated, value trimmed */
} ab_http_head;

/* Parses the response head at buf[0..len): 1 = complete (*h filled; clear it
 * with ab_http_head_clear), 0 = incomplete (read more; -1 once len reaches
 * AB_HTTP_HEAD_MAX), -1 = malformed (no "HTTP/1.x NNN" status line, a header
 * line without a name and ':', control characters other than tab, too many
 * lines). */
int ab_http_head_parse(const char *buf, size_t len, ab_http_head *h);
void ab_http_head_clear(ab_http_head *h);
/* The value of the first header called name (any case), or NULL. */
const char *ab_http_head_get(const ab_http_head *h, const char *name);

/* True when the comma-separated header value list holds token tok (any case). */
bool ab_http_list_has(const char *list, const char *tok);

/* Content-Length value: 0 and *out, or -1 when it is not a plain decimal
 * number (a list, a sign, an overflow). */
int ab_http_content_length(const char *v, uint64_t *out);

/* An incremental decoder of a chunked body. Zero it to start. */
typedef struct ab_chunked {
        int state;
        uint64_t left; /* data bytes left in the current chunk */
        unsigned digits;
        size_t line; /* bytes of an extension or trailer line so far */
} ab_chunked;

/* Decodes in[0..n): copies data bytes to out (at most out_max), sets
 * *used (input consumed) and *made (bytes written). Returns 1 when the body
 * ended (the last chunk and the trailers are consumed), 0 when more input
 * is needed or out is full, -1 for a malformed body. */
int ab_chunked_feed(ab_chunked *c, const char *in, size_t n, char *out, size_t out_max,
                    size_t *used, size_t *made);

#endif
