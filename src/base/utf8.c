/* utf8.c - UTF-8 cleaning and counting, in code points as Python's len()
 * counts. libc only: shared by the host and the box's init. */
#include "base/utf8.h"

#include "base/buf.h"
#include "base/util.h"

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

char *ab_utf8_clean(const void *buf, size_t len, size_t *outlen)
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

size_t ab_utf8_count(const char *s, size_t n)
{
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                if (((unsigned char)s[i] & 0xc0) != 0x80)
                        k++;
        return k;
}

size_t ab_utf8_offset(const char *s, size_t n, size_t k)
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
