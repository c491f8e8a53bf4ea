#include "base/limits.h"

#include <ctype.h>
#include <math.h>
#include <strings.h>

void ab_limits_default(ab_limits *l)
{
        *l = (ab_limits){
            .cpus = AB_DEFAULT_CPUS,
            .memory_mib = AB_DEFAULT_MEMORY_MIB,
            .pids = AB_DEFAULT_PIDS,
            .disk_mib = AB_DEFAULT_DISK_MIB,
            .timeout_s = AB_DEFAULT_TIMEOUT_S,
            .output_cap = AB_DEFAULT_OUTPUT_CAP,
            .nofile = AB_DEFAULT_NOFILE,
        };
}

int ab_limits_validate(const ab_limits *l, ab_err **err)
{
        if (!(l->cpus > 0.0 && l->cpus <= AB_MAX_CPUS) || isnan(l->cpus))
                return ab_err_set(err, AB_E_INVALID, 0, "cpus must be > 0 and <= %g (got %g)",
                                  AB_MAX_CPUS, l->cpus);
        if (l->memory_mib < AB_MIN_MEMORY_MIB || l->memory_mib > AB_MAX_MEMORY_MIB)
                return ab_err_set(
                    err, AB_E_INVALID, 0, "memory must be between %u MiB and %u MiB (got %llu MiB)",
                    AB_MIN_MEMORY_MIB, AB_MAX_MEMORY_MIB, (unsigned long long)l->memory_mib);
        if (l->pids < AB_MIN_PIDS || l->pids > AB_MAX_PIDS)
                return ab_err_set(err, AB_E_INVALID, 0, "pids must be between %u and %u (got %llu)",
                                  AB_MIN_PIDS, AB_MAX_PIDS, (unsigned long long)l->pids);
        if (l->disk_mib < AB_MIN_DISK_MIB || l->disk_mib > AB_MAX_DISK_MIB)
                return ab_err_set(
                    err, AB_E_INVALID, 0, "disk must be between %u MiB and %u MiB (got %llu MiB)",
                    AB_MIN_DISK_MIB, AB_MAX_DISK_MIB, (unsigned long long)l->disk_mib);
        if (l->timeout_s == 0 || l->timeout_s > AB_MAX_TIMEOUT_S)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "timeout must be between 1 s and %u s (got %u s)",
                                  AB_MAX_TIMEOUT_S, l->timeout_s);
        if (l->output_cap < 1024 || l->output_cap > (1ull << 30))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "output cap must be between 1 KiB and 1 GiB (got %llu bytes)",
                                  (unsigned long long)l->output_cap);
        if (l->nofile < 64 || l->nofile > (1u << 20))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "nofile must be between 64 and 1048576 (got %llu)",
                                  (unsigned long long)l->nofile);
        return 0;
}

/* Parses "<number><unit>" where unit scales to bytes; `plain` is the scale of a bare number. */
static int parse_scaled(const char *s, double plain, double *out)
{
        if (!s || !*s)
                return -EINVAL;
        char *end = NULL;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || end == s || !isfinite(v) || v < 0)
                return -EINVAL;
        while (isspace((unsigned char)*end))
                end++;
        static const struct {
                const char *u;
                double scale;
        } units[] = {
            {"", 0},
            {"b", 1},
            {"k", 1024.0},
            {"kb", 1024.0},
            {"kib", 1024.0},
            {"m", 1048576.0},
            {"mb", 1048576.0},
            {"mib", 1048576.0},
            {"g", 1073741824.0},
            {"gb", 1073741824.0},
            {"gib", 1073741824.0},
            {"t", 1099511627776.0},
            {"tb", 1099511627776.0},
            {"tib", 1099511627776.0},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(units); i++) {
                if (strcasecmp(end, units[i].u) == 0) {
                        *out = v * (units[i].scale ? units[i].scale : plain);
                        return 0;
                }
        }
        return -EINVAL;
}

int ab_parse_bytes(const char *s, uint64_t *out, ab_err **err)
{
        double v;
        if (parse_scaled(s, 1.0, &v) < 0 || v > 1.8e19)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "invalid size '%s': use a number with an optional unit K, M, G "
                                  "or T (e.g. 512M)",
                                  s ? s : "");
        *out = (uint64_t)v;
        return 0;
}

int ab_parse_mib(const char *s, uint64_t *out_mib, ab_err **err)
{
        double v;
        if (parse_scaled(s, 1048576.0, &v) < 0 || v > 1.8e19)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "invalid size '%s': use a number of MiB or a number with a "
                                  "unit K, M, G or T (e.g. 512M, 2G)",
                                  s ? s : "");
        *out_mib = (uint64_t)ceil(v / 1048576.0);
        return 0;
}

int ab_parse_duration_ms(const char *s, uint64_t *out_ms, ab_err **err)
{
        char *end = NULL;
        if (!s || !*s)
                goto bad;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || end == s || !isfinite(v) || v < 0)
                goto bad;
        double scale;
        if (*end == '\0' || strcmp(end, "s") == 0)
                scale = 1000;
        else if (strcmp(end, "ms") == 0)
                scale = 1;
        else if (strcmp(end, "m") == 0)
                scale = 60000;
        else if (strcmp(end, "h") == 0)
                scale = 3600000;
        else
                goto bad;
        if (v * scale > 1e15)
                goto bad;
        *out_ms = (uint64_t)(v * scale);
        return 0;
bad:
        return ab_err_set(err, AB_E_INVALID, 0,
                          "invalid duration '%s': use seconds or a number with ms, s, m or h "
                          "(e.g. 30s, 5m)",
                          s ? s : "");
}

bool ab_limits_from_json(const json_t *j, ab_limits *l)
{
        ab_limits_default(l);
        if (!json_is_object(j))
                return false;
        json_t *v = json_object_get(j, "cpus");
        if (json_is_number(v))
                l->cpus = json_number_value(v);
        static const char *const keys[] = {"memory_mib", "pids", "disk_mib", "output_cap",
                                           "nofile"};
        uint64_t *const fields[] = {&l->memory_mib, &l->pids, &l->disk_mib, &l->output_cap,
                                    &l->nofile};
        for (size_t i = 0; i < AB_ARRAY_LEN(keys); i++)
                if ((v = json_object_get(j, keys[i])) && json_is_integer(v) &&
                    json_integer_value(v) >= 0)
                        *fields[i] = (uint64_t)json_integer_value(v);
        if ((v = json_object_get(j, "timeout_s")) && json_is_integer(v) &&
            json_integer_value(v) >= 0 && json_integer_value(v) <= UINT32_MAX)
                l->timeout_s = (uint32_t)json_integer_value(v);
        return true;
}

json_t *ab_limits_json(const ab_limits *l)
{
        json_t *j = json_pack("{s:f,s:I,s:I,s:I,s:I}", "cpus", l->cpus, "memory_mib",
                              (json_int_t)l->memory_mib, "pids", (json_int_t)l->pids, "disk_mib",
                              (json_int_t)l->disk_mib, "timeout_s", (json_int_t)l->timeout_s);
        if (!j)
                abort();
        return j;
}
