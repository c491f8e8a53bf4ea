/* fmt.c - text for the model: DeerFlow's truncations (sandbox/tools.py: _truncate_bash_output,
 * _truncate_read_file_output, _truncate_ls_output), measured in code points as
 * Python's len() does. */
#include "tools/tools_int.h"

#include <stdarg.h>

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
        size_t n = strlen(s), total = ab_utf8_count(s, n);
        if (total <= max_chars)
                return s;
        size_t body = n, pres_chars = 0;
        size_t m = exit_marker_start(s, n);
        if (m < n && ab_utf8_count(s + m, n - m) < max_chars) {
                pres_chars = ab_utf8_count(s + m, n - m);
                body = m;
                max_chars -= pres_chars;
                total = ab_utf8_count(s, body);
                if (total <= max_chars)
                        return s;
        }
        /* len(f"\n... [middle truncated: {total} chars skipped] ...\n") */
        size_t marker_max =
            strlen("\n... [middle truncated:  chars skipped] ...\n") + ndigits(total);
        size_t kept = max_chars > marker_max ? max_chars - marker_max : 0;
        _cleanup_buf_ ab_buf b = {0};
        if (kept == 0) {
                ab_buf_add(&b, s, ab_utf8_offset(s, body, max_chars));
        } else {
                size_t head = kept / 2, tail = kept - head;
                ab_buf_add(&b, s, ab_utf8_offset(s, body, head));
                ab_buf_printf(&b, "\n... [middle truncated: %zu chars skipped] ...\n",
                              total - kept);
                size_t t = ab_utf8_offset(s, body, total - tail);
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
        size_t n = strlen(s), total = ab_utf8_count(s, n);
        if (total <= max_chars)
                return s;
        /* len(f"\n... [truncated: showing first {total} of {total} chars. {advice}] ...") */
        size_t marker_max = strlen("\n... [truncated: showing first  of  chars. ] ...") +
                            2 * ndigits(total) + strlen(advice);
        size_t kept = max_chars > marker_max ? max_chars - marker_max : 0;
        _cleanup_buf_ ab_buf b = {0};
        if (kept == 0) {
                ab_buf_add(&b, s, ab_utf8_offset(s, n, max_chars));
        } else {
                ab_buf_add(&b, s, ab_utf8_offset(s, n, kept));
                ab_buf_printf(&b, "\n... [truncated: showing first %zu of %zu chars. %s] ...", kept,
                              total, advice);
        }
        free(s);
        return ab_buf_steal(&b);
}
