#include "err.h"

#include <stdarg.h>

static const char *const code_names[] = {
    [AB_E_INTERNAL] = "internal",
    [AB_E_INVALID] = "invalid_argument",
    [AB_E_NOT_FOUND] = "not_found",
    [AB_E_CONFLICT] = "conflict",
    [AB_E_UNAVAILABLE] = "unavailable",
    [AB_E_LIMIT] = "limit_exceeded",
    [AB_E_PERMISSION] = "permission_denied",
    [AB_E_TIMEOUT] = "timeout",
    [AB_E_UNSUPPORTED] = "unsupported",
    [AB_E_QUOTA] = "quota_exceeded",
    [AB_E_STORAGE] = "insufficient_storage",
};

const char *ab_code_name(ab_code code)
{
        if ((size_t)code < AB_ARRAY_LEN(code_names) && code_names[code])
                return code_names[code];
        return "internal";
}

ab_code ab_code_from_name(const char *name)
{
        for (size_t i = 0; i < AB_ARRAY_LEN(code_names); i++)
                if (code_names[i] && strcmp(code_names[i], name) == 0)
                        return (ab_code)i;
        return AB_E_INTERNAL;
}

static int ret_for(int errnum)
{
        return errnum > 0 ? -errnum : -1;
}

int ab_err_set(ab_err **err, ab_code code, int errnum, const char *fmt, ...)
{
        if (!err || *err)
                return ret_for(errnum);
        va_list ap;
        char *m = NULL;
        va_start(ap, fmt);
        if (vasprintf(&m, fmt, ap) < 0)
                abort();
        va_end(ap);
        ab_err *e = xzalloc(sizeof(*e));
        e->code = code;
        e->errnum = errnum;
        if (errnum > 0) {
                e->msg = xasprintf("%s: %s", m, strerror(errnum));
                free(m);
        } else {
                e->msg = m;
        }
        *err = e;
        return ret_for(errnum);
}

int ab_err_wrap(ab_err **err, const char *fmt, ...)
{
        if (!err || !*err)
                return -1;
        va_list ap;
        char *p = NULL;
        va_start(ap, fmt);
        if (vasprintf(&p, fmt, ap) < 0)
                abort();
        va_end(ap);
        char *m = xasprintf("%s: %s", p, (*err)->msg);
        free(p);
        free((*err)->msg);
        (*err)->msg = m;
        return ret_for((*err)->errnum);
}

void ab_err_free(ab_err **err)
{
        if (err && *err) {
                free((*err)->msg);
                free(*err);
                *err = NULL;
        }
}
