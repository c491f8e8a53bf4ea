/* limits.h - a box's resource limits: defaults, parsing of human sizes, validation. */
#ifndef AB_LIMITS_H
#define AB_LIMITS_H

#include "base/err.h"
#include <jansson.h>

typedef struct ab_limits {
        double cpus;         /* CPU cores (cgroup quota); default 1 */
        uint64_t memory_mib; /* RAM, no swap; default 1024 */
        uint64_t pids;       /* processes+threads; default 512 */
        uint64_t disk_mib;   /* upper layer + workspace, a real quota; default 4096 */
        uint32_t timeout_s;  /* per-exec default timeout; default 600 */
        uint64_t output_cap; /* bytes kept per output stream of an exec; default 1 MiB */
        uint64_t nofile;     /* RLIMIT_NOFILE inside the box; default 4096 */
} ab_limits;

#define AB_DEFAULT_CPUS       1.0
#define AB_DEFAULT_MEMORY_MIB 1024u
#define AB_DEFAULT_PIDS       512u
#define AB_DEFAULT_DISK_MIB   4096u
#define AB_DEFAULT_TIMEOUT_S  600u
#define AB_DEFAULT_OUTPUT_CAP (1024u * 1024u)
#define AB_DEFAULT_NOFILE     4096u

/* Bounds a user may choose within. */
#define AB_MIN_MEMORY_MIB 16u
#define AB_MAX_MEMORY_MIB (1024u * 1024u)
#define AB_MIN_PIDS       16u
#define AB_MAX_PIDS       (1u << 22)
#define AB_MIN_DISK_MIB   16u
#define AB_MAX_DISK_MIB   (16u * 1024u * 1024u)
#define AB_MAX_TIMEOUT_S  86400u
#define AB_MAX_CPUS       1024.0

/* Fills *l with the defaults. */
void ab_limits_default(ab_limits *l);

/* The per-box fields (cpus, memory_mib, pids, disk_mib, timeout_s) as a new
 * JSON object: what a box record stores and the API shows. */
json_t *ab_limits_json(const ab_limits *l);

/* The inverse of ab_limits_json (and of a Docker label that adds output_cap
 * and nofile): *l gets the defaults, then each field j has with the right
 * type (cpus a number; the others integers, a negative one ignored). False
 * when j is not an object (then *l is the defaults). Does not validate. */
bool ab_limits_from_json(const json_t *j, ab_limits *l);

/* Checks every field against the bounds; AB_E_INVALID naming the field otherwise. */
int ab_limits_validate(const ab_limits *l, ab_err **err);

/* Parses a size such as "512", "512M", "1G", "1.5GiB" into MiB (plain numbers are MiB). */
int ab_parse_mib(const char *s, uint64_t *out_mib, ab_err **err);
/* Parses a size in bytes: "4096", "64K", "1M", "2GiB". */
int ab_parse_bytes(const char *s, uint64_t *out, ab_err **err);
/* Parses a duration "30", "30s", "5m", "1h", "250ms" into milliseconds (plain numbers are seconds).
 */
int ab_parse_duration_ms(const char *s, uint64_t *out_ms, ab_err **err);

#endif
