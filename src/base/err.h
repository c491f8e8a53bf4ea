/* err.h - the error contract (see docs/errors.md).
 *
 * Leaf functions return 0 or -errno. Anything a user may see carries an
 * `ab_err **err` as its last parameter: on failure the function returns a
 * negative value and sets *err (if err is non-NULL and *err is NULL) to an
 * error object with a stable code and a message that says what to do.
 * The caller propagates it, wraps it (ab_err_wrap) or releases it
 * (ab_err_free) - never prints it and forgets it. libc only. */
#ifndef AB_ERR_H
#define AB_ERR_H

#include "util.h"

/* Stable error codes; the HTTP API and the CLI map them to statuses/exit codes. */
typedef enum {
        AB_E_INTERNAL = 1, /* a bug or an unexpected system failure */
        AB_E_INVALID,      /* bad input: fix the request */
        AB_E_NOT_FOUND,    /* no such box, file, ... */
        AB_E_CONFLICT,     /* exists already, or the box is in the wrong state */
        AB_E_UNAVAILABLE,  /* the box could not be made available */
        AB_E_LIMIT,        /* a limit was hit (size, quota, ...) */
        AB_E_PERMISSION,   /* not allowed (read-only path, auth) */
        AB_E_TIMEOUT,      /* deadline passed */
        AB_E_UNSUPPORTED,  /* this host or backend cannot do it */
        AB_E_QUOTA,        /* over a quota of the caller's app (HTTP 429) */
        AB_E_STORAGE,      /* the host has too little disk space (HTTP 507) */
} ab_code;

typedef struct ab_err {
        ab_code code;
        int errnum; /* errno behind it, or 0 */
        char *msg;
} ab_err;

/* Sets *err (when err && !*err) and returns -1 (or -errnum if errnum > 0).
 * The message is formatted; when errnum != 0 ": strerror(errnum)" is appended. */
int ab_err_set(ab_err **err, ab_code code, int errnum, const char *fmt, ...) AB_PRINTF(4, 5);

/* Prefixes the message of *err with "prefix: ". Returns -1 or -errnum like ab_err_set. */
int ab_err_wrap(ab_err **err, const char *fmt, ...) AB_PRINTF(2, 3);

/* Releases *err and sets it to NULL. */
void ab_err_free(ab_err **err);

/* Stable lower-case name of a code, e.g. "not_found". */
const char *ab_code_name(ab_code code);
/* Inverse of ab_code_name; AB_E_INTERNAL when unknown. */
ab_code ab_code_from_name(const char *name);

static inline void ab_err_freep(ab_err **e)
{
        ab_err_free(e);
}
#define _cleanup_err_ __attribute__((cleanup(ab_err_freep)))

#endif
