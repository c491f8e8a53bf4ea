#include "base/codec.h"

#include "base/buf.h"

#include <ctype.h>
#include <time.h>

int ab_hexval(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

void ab_hex_encode(const void *b, size_t n, char *out)
{
        static const char hex[] = "0123456789abcdef";
        const unsigned char *p = b;
        for (size_t i = 0; i < n; i++) {
                out[2 * i] = hex[p[i] >> 4];
                out[2 * i + 1] = hex[p[i] & 15];
        }
        out[2 * n] = '\0';
}

char *ab_pct_decode(const char *s, size_t n)
{
        char *out = xmalloc(xadd(n, 1)), *o = out;
        for (size_t i = 0; i < n; i++) {
                int hi = n - i > 2 && s[i] == '%' ? ab_hexval(s[i + 1]) : -1;
                int lo = hi >= 0 ? ab_hexval(s[i + 2]) : -1;
                if (lo >= 0) {
                        *o++ = (char)(hi * 16 + lo);
                        i += 2;
                } else {
                        *o++ = s[i] == '+' ? ' ' : s[i];
                }
        }
        *o = '\0';
        return out;
}

void ab_time_rfc3339(int64_t ms, bool frac, char out[AB_TIME_LEN])
{
        /* floor division: a time before 1970 keeps a fraction in 0..999 */
        int64_t secs = ms / 1000, rem = ms % 1000;
        if (rem < 0) {
                secs--;
                rem += 1000;
        }
        time_t t = (time_t)secs;
        struct tm tm;
        char day[24];
        out[0] = '\0';
        if (!gmtime_r(&t, &tm) || !strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm))
                return;
        if (frac)
                snprintf(out, AB_TIME_LEN, "%s.%03dZ", day, (int)rem);
        else
                snprintf(out, AB_TIME_LEN, "%sZ", day);
}

static bool two_digits(const char *d, int *v)
{
        if (!isdigit((unsigned char)d[0]) || !isdigit((unsigned char)d[1]))
                return false;
        *v = (d[0] - '0') * 10 + d[1] - '0';
        return true;
}

int ab_time_parse_rfc3339(const char *s, int64_t *ms)
{
        struct tm tm = {0};
        const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
        if (!p)
                return -EINVAL;
        int64_t frac_ms = 0, scale = 100;
        if (*p == '.') {
                if (!isdigit((unsigned char)*++p))
                        return -EINVAL;
                for (; isdigit((unsigned char)*p); p++, scale /= 10)
                        frac_ms += (*p - '0') * scale;
        }
        int64_t off = 0;
        int hh, mm;
        if (*p == 'Z' || *p == 'z') {
                p++;
        } else if ((*p == '+' || *p == '-') && two_digits(p + 1, &hh) && p[3] == ':' &&
                   two_digits(p + 4, &mm)) {
                off = (int64_t)(hh * 60 + mm) * 60 * (*p == '+' ? 1 : -1);
                p += 6;
        } else {
                return -EINVAL;
        }
        if (*p || tm.tm_year > 8000)
                return -EINVAL;
        time_t t = timegm(&tm);
        if (t == (time_t)-1)
                return -EINVAL;
        *ms = ((int64_t)t - off) * 1000 + frac_ms;
        return 0;
}

char *ab_pct_encode(const char *s)
{
        static const char hex[] = "0123456789ABCDEF";
        ab_buf b = {0};
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || strchr("-._~", *p)) {
                        ab_buf_putc(&b, (char)*p);
                } else {
                        ab_buf_putc(&b, '%');
                        ab_buf_putc(&b, hex[*p >> 4]);
                        ab_buf_putc(&b, hex[*p & 15]);
                }
        }
        return b.p ? ab_buf_steal(&b) : xstrdup("");
}
