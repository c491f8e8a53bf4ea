#include "base/log.h"

#include <stdarg.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

static ab_log_level min_level = AB_LOG_WARN;

void ab_log_set_level(ab_log_level min)
{
        min_level = min;
}

void ab_log_init_from_env(void)
{
        const char *v = getenv("AGENTBOX_LOG");
        if (!v)
                return;
        static const char *const names[] = {"debug", "info", "warn", "error"};
        for (size_t i = 0; i < AB_ARRAY_LEN(names); i++)
                if (strcasecmp(v, names[i]) == 0)
                        min_level = (ab_log_level)i;
}

/* Appends s to the buffer as the inside of a JSON string. */
static void put_json_str(char **p, char *end, const char *s)
{
        for (; *s && *p < end - 7; s++) {
                unsigned char c = (unsigned char)*s;
                if (c == '"' || c == '\\') {
                        *(*p)++ = '\\';
                        *(*p)++ = (char)c;
                } else if (c < 0x20) {
                        *p += snprintf(*p, (size_t)(end - *p), "\\u%04x", c);
                } else {
                        *(*p)++ = (char)c;
                }
        }
}

void ab_log(ab_log_level lvl, const char *msg, ...)
{
        if (lvl < min_level)
                return;
        static const char *const names[] = {"debug", "info", "warn", "error"};
        char buf[4096];
        char *p = buf, *end = buf + sizeof(buf) - 4;
        struct timeval tv;
        gettimeofday(&tv, NULL);
        struct tm tm;
        gmtime_r(&tv.tv_sec, &tm);
        p += strftime(p, (size_t)(end - p), "{\"ts\":\"%Y-%m-%dT%H:%M:%S", &tm);
        p += snprintf(p, (size_t)(end - p), ".%03dZ\",\"level\":\"%s\",\"msg\":\"",
                      (int)(tv.tv_usec / 1000), names[lvl]);
        put_json_str(&p, end, msg);
        *p++ = '"';
        va_list ap;
        va_start(ap, msg);
        for (;;) {
                const char *k = va_arg(ap, const char *);
                if (!k)
                        break;
                const char *v = va_arg(ap, const char *);
                if (p >= end - 8)
                        continue;
                *p++ = ',';
                *p++ = '"';
                put_json_str(&p, end, k);
                *p++ = '"';
                *p++ = ':';
                *p++ = '"';
                put_json_str(&p, end, v ? v : "");
                *p++ = '"';
        }
        va_end(ap);
        *p++ = '}';
        *p++ = '\n';
        (void)!write(STDERR_FILENO, buf, (size_t)(p - buf));
}
