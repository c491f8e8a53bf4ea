/* fmt.c - text for the model: UTF-8 cleaning and counting,
 * and DeerFlow's truncations (sandbox/tools.py: _truncate_bash_output,
 * _truncate_read_file_output, _truncate_ls_output), measured in code points as
 * Python's len() does. */
#include "tools/tools_int.h"

#include <stdarg.h>

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
        unsigned c = s[0];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80)
                return c ? 1 : 0;
        if (c >= 0xc2 && c <= 0xdf)
                len = 2, cp = c & 0x1f, min = 0x80;
        else if (c >= 0xe0 && c <= 0xef)
                len = 3, cp = c & 0x0f, min = 0x800;
        else if (c >= 0xf0 && c <= 0xf4)
                len = 4, cp = c & 0x07, min = 0x10000;
        else
                return 0;
        if (n < len)
                return 0;
        for (size_t i = 1; i < len; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (s[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return len;
}

char *utf8_clean(const void *buf, size_t len, size_t *outlen)
{
        const unsigned char *s = buf;
        _cleanup_buf_ ab_buf b = {0};
        size_t i = 0, run = 0;
        while (i < len) {
                size_t k = utf8_seq(s + i, len - i);
                if (k) {
                        i += k;
                        run += k;
                        continue;
                }
                ab_buf_add(&b, s + i - run, run);
                ab_buf_add(&b, "\xef\xbf\xbd", 3);
                run = 0;
                i++;
        }
        ab_buf_add(&b, s + i - run, run);
        if (outlen)
                *outlen = b.n;
        return ab_buf_steal(&b);
}

size_t utf8_count(const char *s, size_t n)
{
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                if (((unsigned char)s[i] & 0xc0) != 0x80)
                        k++;
        return k;
}

size_t utf8_offset(const char *s, size_t n, size_t k)
{
        size_t i = 0;
        for (; i < n; i++) {
                if (((unsigned char)s[i] & 0xc0) != 0x80) {
                        if (k == 0)
                                return i;
                        k--;
                }
        }
        return n;
}

/* Decimal digits of v, as len(str(v)). */
static size_t ndigits(size_t v)
{
        size_t d = 1;
        while (v >= 10) {
                v /= 10;
                d++;
        }
        return d;
}

/* Start of a trailing "\nExit Code: -?\d+\s*" in s, or n (none). */
static size_t exit_marker_start(const char *s, size_t n)
{
        static const char tag[] = "\nExit Code: ";
        size_t e = n;
        while (e > 0 && strchr(" \t\n\r\f\v", s[e - 1]))
                e--;
        size_t d = e;
        while (d > 0 && s[d - 1] >= '0' && s[d - 1] <= '9')
                d--;
        if (d == e)
                return n;
        if (d > 0 && s[d - 1] == '-')
                d--;
        if (d < sizeof(tag) - 1 || memcmp(s + d - (sizeof(tag) - 1), tag, sizeof(tag) - 1) != 0)
                return n;
        return d - (sizeof(tag) - 1);
}

char *trunc_middle(char *s, size_t max_chars)
{
        if (max_chars == 0)
                return s;
        if (max_chars < 32) /* room for the exit marker */
                max_chars = 32;
        size_t n = strlen(s), total = utf8_count(s, n);
        if (total <= max_chars)
                return s;
        size_t body = n, pres_chars = 0;
        size_t m = exit_marker_start(s, n);
        if (m < n && utf8_count(s + m, n - m) < max_chars) {
                pres_chars = utf8_count(s + m, n - m);
                body = m;
                max_chars -= pres_chars;
                total = utf8_count(s, body);
                if (total <= max_chars)
                        return s;
        }
        /* len(f"\n... [middle truncated: {total} chars skipped] ...\n") */
        size_t marker_max =
            strlen("\n... [middle truncated:  chars skipped] ...\n") + ndigits(total);
        size_t kept = max_chars > marker_max ? max_chars - marker_max : 0;
        _cleanup_buf_ ab_buf b = {0};
        if (kept == 0) {
                ab_buf_add(&b, s, utf8_offset(s, body, max_chars));
        } else {
                size_t head = kept / 2, tail = kept - head;
                ab_buf_add(&b, s, utf8_offset(s, body, head));
                ab_buf_printf(&b, "\n... [middle truncated: %zu chars skipped] ...\n",
                              total - kept);
                size_t t = utf8_offset(s, body, total - tail);
                ab_buf_add(&b, s + t, body - t);
        }
        ab_buf_add(&b, s + body, n - body);
        free(s);
        return ab_buf_steal(&b);
}

char *trunc_head(char *s, size_t max_chars, const char *advice)
{
        if (max_chars == 0)
                return s;
        size_t n = strlen(s), total = utf8_count(s, n);
        if (total <= max_chars)
                return s;
        /* len(f"\n... [truncated: showing first {total} of {total} chars. {advice}] ...") */
        size_t marker_max = strlen("\n... [truncated: showing first  of  chars. ] ...") +
                            2 * ndigits(total) + strlen(advice);
        size_t kept = max_chars > marker_max ? max_chars - marker_max : 0;
        _cleanup_buf_ ab_buf b = {0};
        if (kept == 0) {
                ab_buf_add(&b, s, utf8_offset(s, n, max_chars));
        } else {
                ab_buf_add(&b, s, utf8_offset(s, n, kept));
                ab_buf_printf(&b, "\n... [truncated: showing first %zu of %zu chars. %s] ...", kept,
                              total, advice);
        }
        free(s);
        return ab_buf_steal(&b);
}
