/* multipart.c - multipart/form-data bodies (kit/multipart.h). */
#include "kit/multipart.h"

#include <strings.h>

char *kit_multipart_delim(const char *ct)
{
        const char *b = ct ? strcasestr(ct, "boundary=") : NULL;
        if (!b)
                return NULL;
        b += 9;
        bool quoted = *b == '"';
        b += quoted;
        size_t n = strcspn(b, quoted ? "\"" : "; \t");
        if (quoted && b[n] != '"')
                return NULL;
        return n && n <= KIT_MULTIPART_BOUNDARY_MAX ? xasprintf("--%.*s", (int)n, b) : NULL;
}

/* A parameter's value (name="value") in one Content-Disposition line, or
 * NULL. "name" does not match the end of "filename". */
static char *disp_param(const char *line, size_t len, const char *name)
{
        _cleanup_free_ char *pat = xasprintf("%s=\"", name);
        size_t pl = strlen(pat);
        for (const char *p = line; (p = memmem(p, (size_t)(line + len - p), pat, pl)); p += pl) {
                if (p > line && p[-1] != ' ' && p[-1] != ';' && p[-1] != '\t')
                        continue;
                const char *v = p + pl;
                const char *q = memchr(v, '"', (size_t)(line + len - v));
                return q ? xstrndup(v, (size_t)(q - v)) : NULL;
        }
        return NULL;
}

/* The name and filename of the part whose head is head[0..n). */
static void part_head(const char *head, size_t n, kit_part *p)
{
        static const char cd[] = "Content-Disposition:";
        for (const char *l = head, *end = head + n; l < end;) {
                const char *le = memmem(l, (size_t)(end - l), "\r\n", 2);
                if (!le)
                        le = end;
                size_t ll = (size_t)(le - l);
                if (ll > sizeof(cd) - 1 && !strncasecmp(l, cd, sizeof(cd) - 1)) {
                        free(p->name);
                        free(p->filename);
                        p->name = disp_param(l, ll, "name");
                        p->filename = disp_param(l, ll, "filename");
                }
                l = le + 2;
        }
}

/* The next "\r\n" + delim in p[0..n) that is a delimiter line (followed by
 * CRLF or by "--"): a longer line that starts the same is data. */
static const char *next_delim(const char *p, size_t n, const char *nd, size_t ndl)
{
        for (const char *q; n >= ndl && (q = memmem(p, n, nd, ndl));
             n -= (size_t)(q + 1 - p), p = q + 1) {
                size_t after = n - (size_t)(q - p) - ndl;
                if (after >= 2 && ((q[ndl] == '\r' && q[ndl + 1] == '\n') ||
                                   (q[ndl] == '-' && q[ndl + 1] == '-')))
                        return q;
        }
        return NULL;
}

int kit_multipart_split(const char *body, size_t len, const char *delim, size_t max,
                        kit_part **parts, size_t *n, ab_err **err)
{
        size_t dl = strlen(delim), cnt = 0;
        kit_part *v = NULL;
        int rc = 0;
        *parts = NULL;
        *n = 0;
        if (!body || !len) /* memmem wants a buffer */
                return ab_err_set(err, AB_E_INVALID, 0, "multipart: an empty body");
        if (max > KIT_MULTIPART_MAX_PARTS)
                max = KIT_MULTIPART_MAX_PARTS;
        _cleanup_free_ char *nd = xasprintf("\r\n%s", delim);
        const char *p = dl ? memmem(body, len, delim, dl) : NULL;
        if (!p)
                return ab_err_set(err, AB_E_INVALID, 0, "multipart: no boundary in the body");
        for (;;) {
                p += dl;
                size_t left = len - (size_t)(p - body);
                if (left >= 2 && p[0] == '-' && p[1] == '-')
                        break; /* the closing delimiter */
                if (left < 2 || p[0] != '\r' || p[1] != '\n') {
                        rc = ab_err_set(err, AB_E_INVALID, 0, "multipart: malformed delimiter");
                        break;
                }
                p += 2;
                left -= 2;
                /* a part with no header lines starts with its blank line */
                const char *hend = left >= 2 && p[0] == '\r' && p[1] == '\n'
                                       ? p - 2
                                       : memmem(p, left, "\r\n\r\n", 4);
                if (!hend) {
                        rc = ab_err_set(err, AB_E_INVALID, 0,
                                        "multipart: a part has no end of head");
                        break;
                }
                const char *data = hend + 4;
                const char *end = next_delim(data, len - (size_t)(data - body), nd, dl + 2);
                if (!end) {
                        rc = ab_err_set(err, AB_E_INVALID, 0, "multipart: a part has no end");
                        break;
                }
                if (cnt == max) {
                        rc =
                            ab_err_set(err, AB_E_INVALID, 0, "multipart: more than %zu parts", max);
                        break;
                }
                v = xrealloc(v, xmul(cnt + 1, sizeof(*v)));
                v[cnt] = (kit_part){.data = data, .len = (size_t)(end - data)};
                if (hend > p)
                        part_head(p, (size_t)(hend - p), &v[cnt]);
                cnt++;
                p = end + 2;
        }
        if (rc < 0) {
                kit_parts_free(v, cnt);
                return rc;
        }
        *parts = v;
        *n = cnt;
        return 0;
}

void kit_parts_free(kit_part *parts, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(parts[i].name);
                free(parts[i].filename);
        }
        free(parts);
}
