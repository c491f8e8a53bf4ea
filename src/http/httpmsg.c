/* httpmsg.c - response heads and chunked bodies from a box's server; see
 * httpmsg.h. */
#include "http/httpmsg.h"
#include "base/util.h"
#include "base/codec.h"

#include <ctype.h>
#include <strings.h>

#define CHUNK_LINE_MAX 4096 /* longest chunk-size line (extensions) or trailer line */

void ab_http_head_clear(ab_http_head *h)
{
        for (size_t i = 0; i < h->n; i++) {
                free(h->name[i]);
                free(h->value[i]);
        }
        free(h->name);
        free(h->value);
        *h = (ab_http_head){0};
}

const char *ab_http_head_get(const ab_http_head *h, const char *name)
{
        for (size_t i = 0; i < h->n; i++)
                if (strcasecmp(h->name[i], name) == 0)
                        return h->value[i];
        return NULL;
}

/* A token character of RFC 9110 (header names). */
static bool tchar(unsigned char c)
{
        return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* One header line p[0..n) (no line end) into h; false when malformed. */
static bool add_header(ab_http_head *h, const char *p, size_t n)
{
        size_t k = 0;
        while (k < n && tchar((unsigned char)p[k]))
                k++;
        if (k == 0 || k >= n || p[k] != ':')
                return false;
        size_t v = k + 1, e = n;
        while (v < e && (p[v] == ' ' || p[v] == '\t'))
                v++;
        while (e > v && (p[e - 1] == ' ' || p[e - 1] == '\t'))
                e--;
        for (size_t i = v; i < e; i++)
                if (((unsigned char)p[i] < 0x20 && p[i] != '\t') || p[i] == 0x7f)
                        return false;
        if (h->n >= AB_HTTP_HDRS_MAX)
                return false;
        h->name = xrealloc(h->name, (h->n + 1) * sizeof(char *));
        h->value = xrealloc(h->value, (h->n + 1) * sizeof(char *));
        h->name[h->n] = xstrndup(p, k);
        h->value[h->n] = xstrndup(p + v, e - v);
        h->n++;
        return true;
}

/* "HTTP/1.x NNN reason" */
static bool status_line(ab_http_head *h, const char *p, size_t n)
{
        if (n < 12 || memcmp(p, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)p[7]) || p[8] != ' ')
                return false;
        for (int i = 9; i < 12; i++)
                if (!isdigit((unsigned char)p[i]))
                        return false;
        if (n > 12 && p[12] != ' ')
                return false;
        for (size_t i = 12; i < n; i++)
                if (((unsigned char)p[i] < 0x20 && p[i] != '\t') || p[i] == 0x7f)
                        return false;
        h->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
        return h->status >= 100;
}

int ab_http_head_parse(const char *buf, size_t len, ab_http_head *h)
{
        *h = (ab_http_head){0};
        size_t pos = 0;
        bool first = true;
        for (;;) {
                const char *nl = memchr(buf + pos, '\n', len - pos);
                if (!nl) {
                        ab_http_head_clear(h);
                        return len >= AB_HTTP_HEAD_MAX ? -1 : 0;
                }
                size_t end = (size_t)(nl - buf), n = end - pos;
                if (n && buf[end - 1] == '\r')
                        n--;
                if (end + 1 > AB_HTTP_HEAD_MAX)
                        break;
                const char *line = buf + pos;
                pos = end + 1;
                if (first) {
                        if (!status_line(h, line, n))
                                break;
                        first = false;
                        continue;
                }
                if (n == 0) {
                        h->head_len = pos;
                        return 1;
                }
                if (line[0] == ' ' || line[0] == '\t') /* obsolete line folding */
                        break;
                if (!add_header(h, line, n))
                        break;
        }
        ab_http_head_clear(h);
        return -1;
}

bool ab_http_list_has(const char *list, const char *tok)
{
        size_t tn = strlen(tok);
        for (const char *p = list; p && *p;) {
                while (*p == ' ' || *p == '\t' || *p == ',')
                        p++;
                const char *e = p;
                while (*e && *e != ',')
                        e++;
                const char *t = e;
                while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
                        t--;
                if ((size_t)(t - p) == tn && strncasecmp(p, tok, tn) == 0)
                        return true;
                p = e;
        }
        return false;
}

int ab_http_content_length(const char *v, uint64_t *out)
{
        if (!v || !*v)
                return -1;
        uint64_t n = 0;
        for (const char *p = v; *p; p++) {
                if (!isdigit((unsigned char)*p))
                        return -1;
                if (n > (UINT64_MAX - 9) / 10)
                        return -1;
                n = n * 10 + (uint64_t)(*p - '0');
        }
        *out = n;
        return 0;
}

enum { C_SIZE, C_EXT, C_DATA, C_DATA_CR, C_DATA_LF, C_TRAILER, C_TRAILER_LINE, C_DONE };

int ab_chunked_feed(ab_chunked *c, const char *in, size_t n, char *out, size_t out_max,
                    size_t *used, size_t *made)
{
        size_t i = 0, o = 0;
        int rc = 0;
        while (i < n && c->state != C_DONE) {
                char ch = in[i];
                switch (c->state) {
                case C_SIZE: {
                        int v = ab_hexval(ch);
                        if (v >= 0) {
                                if (c->digits >= 15) /* more than 2^60: not a real body */
                                        goto bad;
                                c->left = c->left * 16 + (uint64_t)v;
                                c->digits++;
                                i++;
                                break;
                        }
                        if (!c->digits)
                                goto bad;
                        c->state = C_EXT;
                        c->line = 0;
                        break;
                }
                case C_EXT: /* ";ext=val" up to the line end */
                        i++;
                        if (ch == '\n') {
                                c->digits = 0;
                                c->state = c->left ? C_DATA : C_TRAILER;
                        } else if (++c->line > CHUNK_LINE_MAX ||
                                   (c->line == 1 && ch != ';' && ch != '\r' && ch != ' ' &&
                                    ch != '\t')) {
                                goto bad;
                        }
                        break;
                case C_DATA: {
                        if (o == out_max)
                                goto out;
                        size_t k = n - i;
                        if (k > c->left)
                                k = (size_t)c->left;
                        if (k > out_max - o)
                                k = out_max - o;
                        memcpy(out + o, in + i, k);
                        o += k;
                        i += k;
                        c->left -= k;
                        if (!c->left)
                                c->state = C_DATA_CR;
                        break;
                }
                case C_DATA_CR:
                        i++;
                        if (ch == '\n')
                                c->state = C_SIZE;
                        else if (ch == '\r')
                                c->state = C_DATA_LF;
                        else
                                goto bad;
                        break;
                case C_DATA_LF:
                        i++;
                        if (ch != '\n')
                                goto bad;
                        c->state = C_SIZE;
                        break;
                case C_TRAILER: /* a line start: a blank line ends the body */
                        i++;
                        if (ch == '\n')
                                c->state = C_DONE;
                        else if (ch != '\r') {
                                c->state = C_TRAILER_LINE;
                                c->line = 1;
                        }
                        break;
                case C_TRAILER_LINE:
                        i++;
                        if (ch == '\n')
                                c->state = C_TRAILER;
                        else if (++c->line > CHUNK_LINE_MAX)
                                goto bad;
                        break;
                }
        }
out:
        if (c->state == C_DONE)
                rc = 1;
        *used = i;
        *made = o;
        return rc;
bad:
        *used = i;
        *made = o;
        return -1;
}
