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

/* Prints s as TAP: every line of a diagnostic (prefix "# ") starts with
 * "# ", and a test's name stays on its "ok" line (newlines become spaces),
 * so a message with newlines in it (an engine's error, a command's output)
 * never makes lines the TAP reader cannot parse. */
static inline void tap_print(const char *prefix, const char *s)
{
        if (*prefix) {
                for (const char *p = s;;) {
                        const char *nl = strchr(p, '\n');
                        printf("%s%.*s\n", prefix, (int)(nl ? nl - p : (long)strlen(p)), p);
                        if (!nl || !nl[1])
                                break;
                        p = nl + 1;
                }
                return;
        }
        for (const char *p = s; *p; p++)
                putchar(*p == '\n' || *p == '\r' ? ' ' : *p);
        putchar('\n');
}

static inline void tap_ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void tap_ok(int cond, const char *fmt, ...)
{
        va_list ap;
        char *s = NULL;
        tap_n++;
        va_start(ap, fmt);
        if (vasprintf(&s, fmt, ap) < 0)
                s = NULL;
        va_end(ap);
        printf("%sok %d - ", cond ? "" : "not ", tap_n);
        tap_print("", s ? s : fmt);
        free(s);
        fflush(stdout);
        if (!cond)
                tap_failed++;
}

/* A diagnostic line (or lines): "# " and the formatted text. */
static inline void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tap_diag(const char *fmt, ...)
{
        va_list ap;
        char *s = NULL;
        va_start(ap, fmt);
        if (vasprintf(&s, fmt, ap) < 0)
                s = NULL;
        va_end(ap);
        tap_print("# ", s ? s : fmt);
        free(s);
        fflush(stdout);
}

#define TAP_IS_INT(got, want, name)                                                                \
        do {                                                                                       \
                long long _g = (long long)(got), _w = (long long)(want);                           \
                tap_ok(_g == _w, "%s", name);                                                      \
                if (_g != _w)                                                                      \
                        tap_diag("  got %lld, want %lld", _g, _w);                                 \
        } while (0)

#define TAP_IS_STR(got, want, name)                                                                \
        do {                                                                                       \
                const char *_g = (got), *_w = (want);                                              \
                int _eq = (_g && _w) ? strcmp(_g, _w) == 0 : _g == _w;                             \
                tap_ok(_eq, "%s", name);                                                           \
                if (!_eq)                                                                          \
                        tap_diag("  got \"%s\", want \"%s\"", _g ? _g : "(null)",                  \
                                 _w ? _w : "(null)");                                              \
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
