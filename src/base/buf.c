#include "base/buf.h"

#include <stdio.h>
#include <string.h>

char *ab_buf_reserve(ab_buf *b, size_t more)
{
        size_t need = xadd(xadd(b->n, more), 1);
        if (need > b->cap) {
                size_t cap = b->cap ? b->cap : 256;
                while (cap < need)
                        cap = xmul(cap, 2);
                b->p = xrealloc(b->p, cap);
                b->cap = cap;
                b->p[b->n] = 0; /* a fresh buffer reads as "" even before a commit */
        }
        return b->p + b->n;
}

void ab_buf_commit(ab_buf *b, size_t k)
{
        b->n += k;
        b->p[b->n] = 0;
}

void ab_buf_add(ab_buf *b, const void *s, size_t n)
{
        char *p = ab_buf_reserve(b, n);
        if (n)
                memcpy(p, s, n);
        ab_buf_commit(b, n);
}

void ab_buf_puts(ab_buf *b, const char *s)
{
        ab_buf_add(b, s, strlen(s));
}

void ab_buf_putc(ab_buf *b, char c)
{
        ab_buf_add(b, &c, 1);
}

void ab_buf_vprintf(ab_buf *b, const char *fmt, va_list ap)
{
        /* Straight into the free space; a second pass when it was short. */
        va_list aq;
        va_copy(aq, ap);
        char *p = ab_buf_reserve(b, 64);
        size_t room = b->cap - b->n;
        int r = vsnprintf(p, room, fmt, aq);
        va_end(aq);
        if (r < 0)
                abort();
        if ((size_t)r >= room) {
                p = ab_buf_reserve(b, (size_t)r);
                vsnprintf(p, (size_t)r + 1, fmt, ap);
        }
        ab_buf_commit(b, (size_t)r);
}

void ab_buf_printf(ab_buf *b, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        ab_buf_vprintf(b, fmt, ap);
        va_end(ap);
}

void ab_buf_drop(ab_buf *b, size_t k)
{
        if (k >= b->n) {
                b->n = 0;
        } else {
                memmove(b->p, b->p + k, b->n - k);
                b->n -= k;
        }
        if (b->p)
                b->p[b->n] = 0;
}

char *ab_buf_steal(ab_buf *b)
{
        if (!b->p)
                return xstrdup("");
        char *p = b->p;
        *b = (ab_buf){0};
        return p;
}

void ab_buf_free(ab_buf *b)
{
        free(b->p);
        *b = (ab_buf){0};
}
