/* tap.h - a tiny TAP producer for C unit tests. One process per test file;
 * meson runs it with protocol 'tap' and a timeout. A skipped file prints "1..0 # SKIP why", exit 0.
 */
#ifndef AB_TAP_H
#define AB_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

static inline void tap_ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void tap_ok(int cond, const char *fmt, ...)
{
        va_list ap;
        tap_n++;
        printf("%sok %d - ", cond ? "" : "not ", tap_n);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        fflush(stdout);
        if (!cond)
                tap_failed++;
}

#define TAP_IS_INT(got, want, name)                                                                \
        do {                                                                                       \
                long long _g = (long long)(got), _w = (long long)(want);                           \
                tap_ok(_g == _w, "%s", name);                                                      \
                if (_g != _w)                                                                      \
                        printf("#   got %lld, want %lld\n", _g, _w);                               \
        } while (0)

#define TAP_IS_STR(got, want, name)                                                                \
        do {                                                                                       \
                const char *_g = (got), *_w = (want);                                              \
                int _eq = (_g && _w) ? strcmp(_g, _w) == 0 : _g == _w;                             \
                tap_ok(_eq, "%s", name);                                                           \
                if (!_eq)                                                                          \
                        printf("#   got \"%s\", want \"%s\"\n", _g ? _g : "(null)",                \
                               _w ? _w : "(null)");                                                \
        } while (0)

static inline void tap_skip_all(const char *why)
{
        printf("1..0 # SKIP %s\n", why);
        exit(0); /* meson's TAP protocol reads the plan; exit 77 would be an ERROR */
}

static inline int tap_done(void)
{
        printf("1..%d\n", tap_n);
        return tap_failed ? 1 : 0;
}

#endif
