/* parse.c - the pure parsers of DeerFlow's front, apart for
 * tests/fuzz/fuzz_aio.c: the sandbox URL's credential (from the network),
 * a shell run's marks in a terminal's output and the cuts of output and
 * files (from the box), the sizes of a grep request. No I/O, no state. */
#include "fronts/aio/aio_int.h"

#include "base/id.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "{box}.{token}" (or "{box}" alone, for a caller with a key): 0, or -1
 * when cap is neither. */
int aio_cap_parse(const char *cap, char id[65], const char **token)
{
        const char *dot = strchr(cap, '.');
        size_t n = dot ? (size_t)(dot - cap) : strlen(cap);
        if (n == 0 || n > 64)
                return -1;
        memcpy(id, cap, n);
        id[n] = 0;
        *token = dot ? dot + 1 : NULL;
        if (*token && strlen(*token) != AIO_TOKEN_HEX)
                return -1;
        return ab_id_valid(id) ? 0 : -1;
}

/* Where the run's output lies in buf (bn bytes): *off and *len; 1 with *code when its
 * end mark is there, else 0. *from_start: its start mark is in buf (else
 * the output's beginning was lost to the ring). */
int aio_marks_scan(const char *buf, size_t bn, const char *nonce, size_t *off, size_t *len,
                   int *code, bool *from_start)
{
        char start[48], end[48];
        snprintf(start, sizeof(start), "\036S%s\036", nonce);
        snprintf(end, sizeof(end), "\036E%s:", nonce);
        const char *p = buf ? buf : "";
        const char *s = bn ? memmem(p, bn, start, strlen(start)) : NULL;
        *from_start = s != NULL;
        size_t o = s ? (size_t)(s - p) + strlen(start) : 0;
        const char *e = memmem(p + o, bn - o, end, strlen(end));
        /* Neither mark: not started yet when other runs' marks are there;
         * else its start left init's ring and all of buf is its output. */
        if (!s && !e && (!bn || memmem(p, bn, "\036E", 2) || memmem(p, bn, "\036S", 2))) {
                *off = *len = 0;
                return 0;
        }
        *off = o;
        if (e) {
                const char *c = e + strlen(end);
                const char *close = memchr(c, '\036', bn - (size_t)(c - p));
                if (close) {
                        *len = (size_t)(e - (p + o));
                        *code = atoi(c);
                        return 1;
                }
        }
        /* hold back a partial end mark at the end */
        size_t n = bn - o, el = strlen(end);
        for (size_t k = el - 1 < n ? el - 1 : n; k > 0; k--)
                if (!memcmp(p + bn - k, end, k)) {
                        n -= k;
                        break;
                }
        *len = e ? (size_t)(e - (p + o)) : n;
        return 0;
}

/* At most max characters of text (UTF-8: whole characters): its head and
 * tail with a marker between. A new JSON string. */
json_t *aio_text_cut(const char *p, size_t n, size_t max)
{
        json_t *full = json_bytes(p, n);
        const char *s = json_string_value(full);
        size_t len = json_string_length(full), chars = 0;
        for (size_t i = 0; i < len; i++)
                chars += ((unsigned char)s[i] & 0xC0) != 0x80;
        if (max == 0 || chars <= max)
                return full;
        size_t head = max / 2, tail = max - head, seen = 0, hb = 0, tb = len;
        for (hb = 0; hb < len; hb++) {
                if (((unsigned char)s[hb] & 0xC0) != 0x80 && seen++ == head)
                        break;
        }
        seen = 0;
        while (tb > hb && seen < tail) {
                tb--;
                if (((unsigned char)s[tb] & 0xC0) != 0x80)
                        seen++;
        }
        _cleanup_free_ char *cut = xasprintf("%.*s\n... [%zu characters truncated] ...\n%s",
                                             (int)hb, s, chars - head - tail, s + tb);
        json_decref(full);
        return json_string(cut);
}

/* Lines [start, end) of text (0-based; end < 0: to the last). */
void aio_lines_cut(const char *buf, size_t bn, int64_t start, int64_t end, const char **p,
                   size_t *n)
{
        const char *s = buf ? buf : "", *lim = s + bn;
        int64_t line = 0;
        const char *from = start <= 0 ? s : NULL, *to = lim;
        for (const char *q = s; q < lim; q++) {
                if (*q != '\n')
                        continue;
                line++;
                if (!from && line == start)
                        from = q + 1;
                if (end >= 0 && line == end) {
                        to = q + 1;
                        break;
                }
        }
        if (!from || (end >= 0 && end <= start))
                from = to = lim;
        *p = from;
        *n = (size_t)(to - from);
}

/* "1M", "500K", "2G", "1024": bytes; -1 when it is none. */
int64_t aio_size_parse(const char *s)
{
        char *end;
        double v = strtod(s, &end);
        if (end == s)
                return -1;
        int64_t mul = 1;
        switch (*end) {
        case 'k':
        case 'K':
                mul = 1 << 10, end++;
                break;
        case 'm':
        case 'M':
                mul = 1 << 20, end++;
                break;
        case 'g':
        case 'G':
                mul = 1 << 30, end++;
                break;
        default:
                break;
        }
        if (*end == 'B' || *end == 'b')
                end++;
        double bytes = v * (double)mul;
        if (*end || !(bytes >= 0 && bytes <= 1e18)) /* NaN, inf and the absurd too */
                return -1;
        return (int64_t)bytes;
}
