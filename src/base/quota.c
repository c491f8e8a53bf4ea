/* quota.c - quotas' arithmetic and JSON form (see quota.h). */
#include "base/quota.h"

#include <math.h>

static const char *const names[AB_Q_N] = {
    [AB_Q_BOXES] = "max_boxes", [AB_Q_RUNNING] = "max_running", [AB_Q_DISK] = "max_disk_mib",
    [AB_Q_EXECS] = "max_execs", [AB_Q_RATE] = "exec_rate",
};

const char *ab_quota_name(ab_quota_kind k)
{
        return k < AB_Q_N ? names[k] : "unknown";
}

void ab_quota_unset(ab_quota *q)
{
        *q = (ab_quota){
            .max_boxes = AB_QUOTA_INHERIT,
            .max_running = AB_QUOTA_INHERIT,
            .max_disk_mib = AB_QUOTA_INHERIT,
            .max_execs = AB_QUOTA_INHERIT,
            .exec_rate = AB_QUOTA_INHERIT,
            .exec_burst = AB_QUOTA_INHERIT,
            .max_limits = {AB_QUOTA_INHERIT, AB_QUOTA_INHERIT, AB_QUOTA_INHERIT, AB_QUOTA_INHERIT},
            .allowed_network = AB_QUOTA_INHERIT,
        };
}

void ab_quota_none(ab_quota *q)
{
        *q = (ab_quota){.allowed_network = AB_QUOTA_NET_ALL};
}

static bool set_i(int64_t v)
{
        return v != AB_QUOTA_INHERIT;
}

static bool set_d(double v)
{
        return v != (double)AB_QUOTA_INHERIT;
}

void ab_quota_apply(ab_quota *q, const ab_quota *o)
{
        if (set_i(o->max_boxes))
                q->max_boxes = o->max_boxes;
        if (set_i(o->max_running))
                q->max_running = o->max_running;
        if (set_i(o->max_disk_mib))
                q->max_disk_mib = o->max_disk_mib;
        if (set_i(o->max_execs))
                q->max_execs = o->max_execs;
        if (set_d(o->exec_rate))
                q->exec_rate = o->exec_rate;
        if (set_d(o->exec_burst))
                q->exec_burst = o->exec_burst;
        if (set_d(o->max_limits.cpus))
                q->max_limits.cpus = o->max_limits.cpus;
        if (set_i(o->max_limits.memory_mib))
                q->max_limits.memory_mib = o->max_limits.memory_mib;
        if (set_i(o->max_limits.pids))
                q->max_limits.pids = o->max_limits.pids;
        if (set_i(o->max_limits.disk_mib))
                q->max_limits.disk_mib = o->max_limits.disk_mib;
        if (set_i(o->allowed_network))
                q->allowed_network = o->allowed_network | AB_QUOTA_NET_NONE;
}

bool ab_quota_is_unset(const ab_quota *q)
{
        return !set_i(q->max_boxes) && !set_i(q->max_running) && !set_i(q->max_disk_mib) &&
               !set_i(q->max_execs) && !set_d(q->exec_rate) && !set_d(q->exec_burst) &&
               !set_d(q->max_limits.cpus) && !set_i(q->max_limits.memory_mib) &&
               !set_i(q->max_limits.pids) && !set_i(q->max_limits.disk_mib) &&
               !set_i(q->allowed_network);
}

static const char *const net_names[] = {"none", "allowlist", "full"};

int ab_quota_net_bit(const char *mode)
{
        if (!mode)
                return 0;
        if (!strcmp(mode, "restricted"))
                return AB_QUOTA_NET_ALLOWLIST;
        for (size_t i = 0; i < AB_ARRAY_LEN(net_names); i++)
                if (!strcmp(mode, net_names[i]))
                        return 1 << i;
        return 0;
}

json_t *ab_quota_net_json(int64_t bits)
{
        json_t *a = json_array();
        for (size_t i = 0; i < AB_ARRAY_LEN(net_names); i++)
                if (bits & (1 << i))
                        json_array_append_new(a, json_string(net_names[i]));
        return a;
}

static const char *const cap_names[] = {"cpus", "memory_mib", "pids", "disk_mib"};

/* max_limits: {"cpus", "memory_mib", "pids", "disk_mib"}, each optional. */
static int caps_from_json(const json_t *o, ab_limit_caps *c, ab_err **err)
{
        if (!json_is_object(o))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "quotas.max_limits: must be an object of cpus, memory_mib, "
                                  "pids and disk_mib");
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)o, k, v)
        {
                size_t i;
                for (i = 0; i < AB_ARRAY_LEN(cap_names); i++)
                        if (!strcmp(k, cap_names[i]))
                                break;
                if (i == AB_ARRAY_LEN(cap_names))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "quotas.max_limits: unknown field \"%s\" (known: cpus, "
                                          "memory_mib, pids, disk_mib)",
                                          k);
                if (json_is_null(v))
                        continue;
                if (i == 0) {
                        double d = json_is_number(v) ? json_number_value(v) : -1;
                        if (!isfinite(d) || d < 0 || d > 1e6)
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "quotas.max_limits.cpus: must be a number "
                                                  ">= 0 (0 = no ceiling)");
                        c->cpus = d;
                        continue;
                }
                if (!json_is_integer(v) || json_integer_value(v) < 0)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "quotas.max_limits.%s: must be a whole number >= 0 "
                                          "(0 = no ceiling)",
                                          k);
                *(i == 1   ? &c->memory_mib
                  : i == 2 ? &c->pids
                           : &c->disk_mib) = json_integer_value(v);
        }
        return 0;
}

static int net_from_json(const json_t *a, int64_t *out, ab_err **err)
{
        if (!json_is_array(a))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "quotas.allowed_network: must be a list of network modes "
                                  "(none, allowlist, full)");
        int64_t bits = AB_QUOTA_NET_NONE;
        size_t i;
        json_t *v;
        json_array_foreach(a, i, v)
        {
                int b = ab_quota_net_bit(json_string_value(v));
                if (!b)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "quotas.allowed_network[%zu]: not a network mode "
                                          "(none, allowlist, full)",
                                          i);
                bits |= b;
        }
        *out = bits;
        return 0;
}

static const char *const json_names[] = {"max_boxes",  "max_running",    "max_disk_mib",
                                         "max_execs",  "exec_rate",      "exec_burst",
                                         "max_limits", "allowed_network"};

int ab_quota_from_json(const json_t *o, ab_quota *out, ab_err **err)
{
        ab_quota_unset(out);
        if (!json_is_object(o))
                return ab_err_set(err, AB_E_INVALID, 0, "quotas: must be an object");
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)o, k, v)
        {
                size_t i;
                for (i = 0; i < AB_ARRAY_LEN(json_names); i++)
                        if (!strcmp(k, json_names[i]))
                                break;
                if (i == AB_ARRAY_LEN(json_names))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "quotas: unknown field \"%s\" (known: max_boxes, "
                                          "max_running, max_disk_mib, max_execs, exec_rate, "
                                          "exec_burst, max_limits, allowed_network)",
                                          k);
                if (json_is_null(v))
                        continue;
                if (i == 6) {
                        if (caps_from_json(v, &out->max_limits, err) < 0)
                                return -1;
                        continue;
                }
                if (i == 7) {
                        if (net_from_json(v, &out->allowed_network, err) < 0)
                                return -1;
                        continue;
                }
                if (i < 4) {
                        if (!json_is_integer(v) || json_integer_value(v) < 0)
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "quotas.%s: must be a whole number >= 0 "
                                                  "(0 = no limit)",
                                                  k);
                        int64_t n = json_integer_value(v);
                        *(i == 0   ? &out->max_boxes
                          : i == 1 ? &out->max_running
                          : i == 2 ? &out->max_disk_mib
                                   : &out->max_execs) = n;
                        continue;
                }
                double d = json_is_number(v) ? json_number_value(v) : -1;
                if (!isfinite(d) || d < 0 || d > 1e9)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "quotas.%s: must be a number from 0 to 1e9 (0 = %s)", k,
                                          i == 4 ? "no limit" : "max(1, exec_rate)");
                *(i == 4 ? &out->exec_rate : &out->exec_burst) = d;
        }
        return 0;
}

json_t *ab_quota_json(const ab_quota *q, bool only_set)
{
        json_t *j = json_object();
        const int64_t ints[] = {q->max_boxes, q->max_running, q->max_disk_mib, q->max_execs};
        for (size_t i = 0; i < AB_ARRAY_LEN(ints); i++) {
                if (set_i(ints[i]))
                        json_object_set_new(j, json_names[i], json_integer(ints[i]));
                else if (!only_set)
                        json_object_set_new(j, json_names[i], json_null());
        }
        const double dbl[] = {q->exec_rate, q->exec_burst};
        for (size_t i = 0; i < AB_ARRAY_LEN(dbl); i++) {
                const char *n = json_names[4 + i];
                if (set_d(dbl[i]))
                        json_object_set_new(j, n, json_real(dbl[i]));
                else if (!only_set)
                        json_object_set_new(j, n, json_null());
        }
        const ab_limit_caps *c = &q->max_limits;
        json_t *caps = json_object();
        const int64_t cints[] = {c->memory_mib, c->pids, c->disk_mib};
        if (set_d(c->cpus))
                json_object_set_new(caps, "cpus", json_real(c->cpus));
        else if (!only_set)
                json_object_set_new(caps, "cpus", json_null());
        for (size_t i = 0; i < AB_ARRAY_LEN(cints); i++) {
                if (set_i(cints[i]))
                        json_object_set_new(caps, cap_names[1 + i], json_integer(cints[i]));
                else if (!only_set)
                        json_object_set_new(caps, cap_names[1 + i], json_null());
        }
        if (json_object_size(caps) || !only_set)
                json_object_set_new(j, "max_limits", caps);
        else
                json_decref(caps);
        if (set_i(q->allowed_network))
                json_object_set_new(j, "allowed_network", ab_quota_net_json(q->allowed_network));
        else if (!only_set)
                json_object_set_new(j, "allowed_network", json_null());
        return j;
}

int ab_quota_validate(const ab_quota *q, bool allow_inherit, ab_err **err)
{
        const int64_t ints[] = {q->max_boxes, q->max_running, q->max_disk_mib, q->max_execs};
        for (size_t i = 0; i < AB_ARRAY_LEN(ints); i++)
                if (ints[i] < 0 && !(allow_inherit && ints[i] == AB_QUOTA_INHERIT))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "quotas.%s: must be a whole number >= 0", json_names[i]);
        const double dbl[] = {q->exec_rate, q->exec_burst};
        for (size_t i = 0; i < AB_ARRAY_LEN(dbl); i++)
                if (!isfinite(dbl[i]) || dbl[i] > 1e9 ||
                    (dbl[i] < 0 && !(allow_inherit && dbl[i] == (double)AB_QUOTA_INHERIT)))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "quotas.%s: must be a number from 0 to 1e9",
                                          json_names[4 + i]);
        const ab_limit_caps *c = &q->max_limits;
        /* AB_QUOTA_INHERIT in the server's own ceilings: fit the host */
        if (!isfinite(c->cpus) || c->cpus > 1e6 ||
            (c->cpus < 0 && c->cpus != (double)AB_QUOTA_INHERIT))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "quotas.max_limits.cpus: must be a number >= 0");
        const int64_t cints[] = {c->memory_mib, c->pids, c->disk_mib};
        for (size_t i = 0; i < AB_ARRAY_LEN(cints); i++)
                if (cints[i] < 0 && cints[i] != AB_QUOTA_INHERIT)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "quotas.max_limits.%s: must be a whole number >= 0",
                                          cap_names[1 + i]);
        if ((q->allowed_network < 0 &&
             !(allow_inherit && q->allowed_network == AB_QUOTA_INHERIT)) ||
            q->allowed_network > AB_QUOTA_NET_ALL)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "quotas.allowed_network: must be a list of network modes");
        return 0;
}

bool ab_quota_over(int64_t limit, int64_t use, int64_t add)
{
        if (limit <= 0)
                return false;
        if (use < 0)
                use = 0;
        /* use + add > limit, without overflow */
        return add > limit || use > limit - add;
}

double ab_bucket_size(double rate, double burst)
{
        if (burst > 0)
                return burst;
        return rate > 1 ? rate : 1;
}

static void refill(ab_bucket *b, double rate, double size, uint64_t now_ns)
{
        if (!b->at_ns) {
                b->tokens = size;
                b->at_ns = now_ns;
                return;
        }
        if (now_ns > b->at_ns) {
                b->tokens += (double)(now_ns - b->at_ns) / 1e9 * rate;
                b->at_ns = now_ns;
        }
        if (b->tokens > size)
                b->tokens = size;
}

bool ab_bucket_peek(ab_bucket *b, double rate, double burst, uint64_t now_ns)
{
        if (rate <= 0)
                return true;
        refill(b, rate, ab_bucket_size(rate, burst), now_ns);
        return b->tokens >= 1.0;
}

bool ab_bucket_take(ab_bucket *b, double rate, double burst, uint64_t now_ns)
{
        if (!ab_bucket_peek(b, rate, burst, now_ns))
                return false;
        if (rate > 0)
                b->tokens -= 1.0;
        return true;
}
