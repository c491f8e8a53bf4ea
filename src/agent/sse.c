/* sse.c - Server-Sent Events parsing, bounded (sse.h). */
#include "agent/sse.h"

#include <string.h>

void ab_sse_init(ab_sse *p, size_t max_line, size_t max_event, ab_sse_fn fn, void *ud)
{
        *p = (ab_sse){
            .max_line = max_line ? max_line : AB_SSE_LINE_MAX,
            .max_event = max_event ? max_event : AB_SSE_EVENT_MAX,
            .fn = fn,
            .ud = ud,
        };
}

void ab_sse_free(ab_sse *p)
{
        ab_buf_free(&p->line);
        ab_buf_free(&p->data);
}

static int dispatch(ab_sse *p)
{
        int rc = 0;
        if (p->has_data)
                rc = p->fn(p->ud, p->event[0] ? p->event : "message", p->data.p ? p->data.p : "",
                           p->data.n);
        p->data.n = 0;
        if (p->data.p)
                p->data.p[0] = 0;
        p->event[0] = 0;
        p->has_data = false;
        return rc;
}

/* One complete line (without its end). */
static int line(ab_sse *p, const char *s, size_t n, ab_err **err)
{
        if (n == 0)
                return dispatch(p);
        if (s[0] == ':')
                return 0;
        const char *colon = memchr(s, ':', n);
        size_t flen = colon ? (size_t)(colon - s) : n;
        const char *v = colon ? colon + 1 : s + n;
        size_t vlen = (size_t)(s + n - v);
        if (vlen && *v == ' ') {
                v++;
                vlen--;
        }
        if (flen == 4 && !memcmp(s, "data", 4)) {
                size_t more = vlen + (p->has_data ? 1 : 0);
                if (p->data.n + more > p->max_event)
                        return ab_err_set(err, AB_E_LIMIT, 0,
                                          "an event of the stream is over %zu bytes", p->max_event);
                if (p->has_data)
                        ab_buf_putc(&p->data, '\n');
                ab_buf_add(&p->data, v, vlen);
                p->has_data = true;
        } else if (flen == 5 && !memcmp(s, "event", 5)) {
                size_t k = vlen < sizeof(p->event) - 1 ? vlen : sizeof(p->event) - 1;
                memcpy(p->event, v, k);
                p->event[k] = 0;
        }
        return 0;
}

int ab_sse_feed(ab_sse *p, const char *buf, size_t n, ab_err **err)
{
        size_t i = 0;
        while (i < n) {
                if (p->after_cr && buf[i] == '\n') {
                        p->after_cr = false;
                        i++;
                        continue;
                }
                p->after_cr = false;
                const char *end = buf + i;
                size_t k = 0;
                while (i + k < n && end[k] != '\n' && end[k] != '\r')
                        k++;
                if (p->line.n + k > p->max_line)
                        return ab_err_set(err, AB_E_LIMIT, 0,
                                          "a line of the stream is over %zu bytes", p->max_line);
                if (i + k == n) { /* no line end yet: keep the piece */
                        ab_buf_add(&p->line, end, k);
                        return 0;
                }
                int rc;
                if (p->line.n) {
                        ab_buf_add(&p->line, end, k);
                        rc = line(p, p->line.p, p->line.n, err);
                        p->line.n = 0;
                        p->line.p[0] = 0;
                } else {
                        rc = line(p, end, k, err);
                }
                if (rc)
                        return rc;
                p->after_cr = end[k] == '\r';
                i += k + 1;
        }
        return 0;
}
