/* quota.h - per-app quotas: the limits, their JSON form, how overrides layer
 * (server default, then the app's entry in the config, then the API key's
 * own), the checks' arithmetic and the token bucket of the exec rate.
 * Pure functions and plain structs: the manager (core/quota.c) keeps the
 * counts and the locks. */
#ifndef AB_QUOTA_H
#define AB_QUOTA_H

#include "base/err.h"
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* In an override: this field is not set here (the layer below decides). */
#define AB_QUOTA_INHERIT (-1)

/* The network modes of allowed_network, one bit per mode (the bit of
 * net/policy.h's mode m is 1 << m). Mode none is always allowed. */
#define AB_QUOTA_NET_NONE      (1 << 0)
#define AB_QUOTA_NET_ALLOWLIST (1 << 1)
#define AB_QUOTA_NET_FULL      (1 << 2)
#define AB_QUOTA_NET_ALL       (AB_QUOTA_NET_NONE | AB_QUOTA_NET_ALLOWLIST | AB_QUOTA_NET_FULL)

/* Ceilings of one box's limits (an app's max_limits): a create or fork
 * asking more is refused (400 naming the ceiling). 0 = no ceiling. */
typedef struct ab_limit_caps {
        double cpus;
        int64_t memory_mib;
        int64_t pids;
        int64_t disk_mib;
} ab_limit_caps;

/* One set of quotas. 0 = no limit; AB_QUOTA_INHERIT only in overrides. */
typedef struct ab_quota {
        int64_t max_boxes;        /* the app's boxes in any state but deleting */
        int64_t max_running;      /* ... that are creating, running or paused */
        int64_t max_disk_mib;     /* sum of the disk limits (disk_mib) of the app's boxes */
        int64_t max_execs;        /* execs of the app running at once */
        double exec_rate;         /* execs started per second (token bucket); 0 = no limit */
        double exec_burst;        /* the bucket's size; 0 = max(1, exec_rate) */
        ab_limit_caps max_limits; /* each field on its own may be AB_QUOTA_INHERIT */
        int64_t allowed_network;  /* AB_QUOTA_NET_* bits (none always among them) */
} ab_quota;

/* The quotas one check is about, for messages and metrics. */
typedef enum {
        AB_Q_BOXES,
        AB_Q_RUNNING,
        AB_Q_DISK,
        AB_Q_EXECS,
        AB_Q_RATE,
        AB_Q_N,
} ab_quota_kind;

/* "max_boxes", "max_running", "max_disk_mib", "max_execs", "exec_rate". */
const char *ab_quota_name(ab_quota_kind k);

/* An app's entry in the config (quotas.apps). */
typedef struct ab_app_quota {
        char *app_id;
        ab_quota q; /* fields not given are AB_QUOTA_INHERIT */
} ab_app_quota;

/* Every field AB_QUOTA_INHERIT (an empty override). */
void ab_quota_unset(ab_quota *q);
/* Every field 0 (no limit). */
void ab_quota_none(ab_quota *q);
/* Copies every field of over that is set (not AB_QUOTA_INHERIT) into *q. */
void ab_quota_apply(ab_quota *q, const ab_quota *over);
/* True when no field of q is set. */
bool ab_quota_is_unset(const ab_quota *q);

/* Parses {"max_boxes", "max_running", "max_disk_mib", "max_execs",
 * "exec_rate", "exec_burst", "max_limits": {"cpus", "memory_mib", "pids",
 * "disk_mib"}, "allowed_network": ["none", "allowlist", "full"]} (every
 * field optional; null = inherit) into *out, whose absent fields are
 * AB_QUOTA_INHERIT. AB_E_INVALID naming the field for unknown keys, wrong
 * types and negative values. */
int ab_quota_from_json(const json_t *o, ab_quota *out, ab_err **err);
/* The fields of q as a new JSON object; with only_set, inherited fields are
 * left out, else they are null. */
json_t *ab_quota_json(const ab_quota *q, bool only_set);
/* Checks every field: >= 0 or AB_QUOTA_INHERIT (allow_inherit), finite rates. */
int ab_quota_validate(const ab_quota *q, bool allow_inherit, ab_err **err);

/* Parses one network mode name of allowed_network ("none", "allowlist" or
 * its alias "restricted", "full") into its AB_QUOTA_NET_* bit; 0 when it is
 * none of them. */
int ab_quota_net_bit(const char *mode);
/* The modes of bits as a new JSON array of names. */
json_t *ab_quota_net_json(int64_t bits);

/* True when use + add would pass limit (a limit of 0 or less passes never). */
bool ab_quota_over(int64_t limit, int64_t use, int64_t add);

/* A token bucket: `tokens` refill at rate per second up to burst. */
typedef struct ab_bucket {
        double tokens;
        uint64_t at_ns; /* last refill; 0 = never used (starts full) */
} ab_bucket;

/* The bucket's size for a rate and a configured burst (0 = max(1, rate)). */
double ab_bucket_size(double rate, double burst);
/* Refills b up to now_ns, then takes one token if there is one. true when
 * taken (always true when rate is 0: no limit). */
bool ab_bucket_take(ab_bucket *b, double rate, double burst, uint64_t now_ns);
/* Same without taking: would a take succeed now? */
bool ab_bucket_peek(ab_bucket *b, double rate, double burst, uint64_t now_ns);

#endif
