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

/* fmt and its arguments as a new string (fmt itself if that fails). */
static inline char *tap_vfmt(const char *fmt, va_list ap)
{
        char *s = NULL;
        return vasprintf(&s, fmt, ap) < 0 ? strdup(fmt) : s;
}

/* A message with newlines in it (an engine's error, a command's output)
 * never makes lines the TAP reader cannot parse: a test's name stays on its
 * "ok" line (newlines become spaces), every line of a diagnostic starts
 * with "# ". */
static inline void tap_ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void tap_ok(int cond, const char *fmt, ...)
{
        va_list ap;
        tap_n++;
        va_start(ap, fmt);
        char *s = tap_vfmt(fmt, ap);
        va_end(ap);
        for (char *p = s; p && *p; p++)
                if (*p == '\n' || *p == '\r')
                        *p = ' ';
        printf("%sok %d - %s\n", cond ? "" : "not ", tap_n, s ? s : fmt);
        free(s);
        fflush(stdout);
        if (!cond)
                tap_failed++;
}

static inline void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tap_diag(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *s = tap_vfmt(fmt, ap);
        va_end(ap);
        for (char *line = s, *nl; line && *line; line = nl ? nl + 1 : NULL) {
                if ((nl = strchr(line, '\n')))
                        *nl = 0;
                printf("# %s\n", line);
        }
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
