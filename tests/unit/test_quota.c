/* Unit tests: quota arithmetic (layering, checks, the token bucket) and the
 * quotas' JSON form. */
#include "base/quota.h"
#include "tap.h"

#define NS 1000000000ull

static void test_over(void)
{
        tap_ok(!ab_quota_over(0, 1000, 1), "limit 0: never over");
        tap_ok(!ab_quota_over(3, 2, 1), "2 + 1 <= 3: within");
        tap_ok(ab_quota_over(3, 3, 1), "3 + 1 > 3: over");
        tap_ok(ab_quota_over(100, 64, 64), "disk: 64 + 64 MiB > 100");
        tap_ok(!ab_quota_over(100, 64, 32), "disk: 64 + 32 MiB <= 100");
        tap_ok(ab_quota_over(5, INT64_MAX - 1, 10), "no overflow near INT64_MAX");
        tap_ok(ab_quota_over(5, 0, INT64_MAX), "a huge request is over");
        tap_ok(!ab_quota_over(5, -3, 5), "a negative use counts as 0");
}

static void test_layers(void)
{
        ab_quota base, app, key;
        ab_quota_none(&base);
        base.max_boxes = 50;
        base.exec_rate = 10;
        ab_quota_unset(&app);
        tap_ok(ab_quota_is_unset(&app), "an empty override is unset");
        app.max_boxes = 2;
        ab_quota_unset(&key);
        key.max_execs = 1;
        key.max_boxes = 0; /* explicitly no limit */
        ab_quota q = base;
        ab_quota_apply(&q, &app);
        TAP_IS_INT(q.max_boxes, 2, "the app's entry overrides the default");
        tap_ok(q.exec_rate == 10, "fields the app does not set keep the default");
        ab_quota_apply(&q, &key);
        TAP_IS_INT(q.max_boxes, 0, "a key's 0 means no limit, over the app's 2");
        TAP_IS_INT(q.max_execs, 1, "the key's own max_execs");
}

static void test_json(void)
{
        ab_err *e = NULL;
        ab_quota q;
        json_t *j = json_loads("{\"max_boxes\":3,\"exec_rate\":0.5,\"max_running\":null}", 0, NULL);
        TAP_IS_INT(ab_quota_from_json(j, &q, &e), 0, "parses");
        TAP_IS_INT(q.max_boxes, 3, "max_boxes");
        tap_ok(q.exec_rate == 0.5, "exec_rate");
        TAP_IS_INT(q.max_running, AB_QUOTA_INHERIT, "null = inherit");
        TAP_IS_INT(q.max_disk_mib, AB_QUOTA_INHERIT, "absent = inherit");
        json_t *back = ab_quota_json(&q, true);
        tap_ok(json_object_size(back) == 2 &&
                   json_integer_value(json_object_get(back, "max_boxes")) == 3,
               "only the set fields go back out");
        json_decref(back);
        json_decref(j);
        const char *bad[] = {"{\"max_boxes\":-1}",
                             "{\"max_boxes\":1.5}",
                             "{\"exec_rate\":\"x\"}",
                             "{\"nope\":1}",
                             "[]",
                             "{\"exec_burst\":-2}"};
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
                j = json_loads(bad[i], 0, NULL);
                tap_ok(ab_quota_from_json(j, &q, &e) < 0 && e && e->code == AB_E_INVALID,
                       "refused: %s", bad[i]);
                ab_err_free(&e);
                json_decref(j);
        }
        ab_quota_unset(&q);
        tap_ok(ab_quota_validate(&q, true, &e) == 0, "an override may inherit");
        tap_ok(ab_quota_validate(&q, false, &e) < 0, "the default may not");
        ab_err_free(&e);
}

/* max_limits and allowed_network: JSON form, layering and validation. */
static void test_ceilings(void)
{
        ab_err *e = NULL;
        ab_quota q;
        json_t *j = json_loads("{\"max_limits\":{\"cpus\":2,\"memory_mib\":512},"
                               "\"allowed_network\":[\"allowlist\"]}",
                               0, NULL);
        TAP_IS_INT(ab_quota_from_json(j, &q, &e), 0, "max_limits and allowed_network parse");
        tap_ok(q.max_limits.cpus == 2 && q.max_limits.memory_mib == 512, "the ceilings given");
        TAP_IS_INT(q.max_limits.pids, AB_QUOTA_INHERIT, "a ceiling not given inherits");
        TAP_IS_INT(q.allowed_network, AB_QUOTA_NET_NONE | AB_QUOTA_NET_ALLOWLIST,
                   "allowed_network: none is always in it");
        tap_ok(!ab_quota_is_unset(&q), "an override of ceilings only is set");
        json_t *back = ab_quota_json(&q, true);
        json_t *caps = json_object_get(back, "max_limits");
        tap_ok(json_object_size(caps) == 2 &&
                   json_integer_value(json_object_get(caps, "memory_mib")) == 512 &&
                   json_array_size(json_object_get(back, "allowed_network")) == 2,
               "the ceilings go back out");
        json_decref(back);
        json_decref(j);

        ab_quota base, eff;
        ab_quota_none(&base);
        TAP_IS_INT(base.allowed_network, AB_QUOTA_NET_ALL, "no quotas: every network mode");
        base.max_limits = (ab_limit_caps){8, 4096, 1024, 10000};
        eff = base;
        ab_quota_apply(&eff, &q);
        tap_ok(eff.max_limits.cpus == 2 && eff.max_limits.memory_mib == 512 &&
                   eff.max_limits.pids == 1024 && eff.max_limits.disk_mib == 10000,
               "an app's ceilings override the server's field by field");
        TAP_IS_INT(eff.allowed_network, AB_QUOTA_NET_NONE | AB_QUOTA_NET_ALLOWLIST,
                   "the app's allowed_network replaces the server's");

        const char *bad[] = {
            "{\"max_limits\":{\"memory_mib\":-1}}", "{\"max_limits\":{\"cpus\":\"many\"}}",
            "{\"max_limits\":{\"gpus\":1}}",        "{\"max_limits\":[]}",
            "{\"allowed_network\":\"full\"}",       "{\"allowed_network\":[\"internet\"]}"};
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
                j = json_loads(bad[i], 0, NULL);
                tap_ok(ab_quota_from_json(j, &q, &e) < 0 && e && e->code == AB_E_INVALID,
                       "refused: %s", bad[i]);
                ab_err_free(&e);
                json_decref(j);
        }
        TAP_IS_INT(ab_quota_net_bit("restricted"), AB_QUOTA_NET_ALLOWLIST,
                   "restricted is allowlist");
        TAP_IS_INT(ab_quota_net_bit("open"), 0, "not a mode");
}

static void test_bucket(void)
{
        ab_bucket b = {0};
        uint64_t t = 1000 * NS;
        tap_ok(ab_bucket_take(&b, 0, 0, t), "rate 0: no limit");
        b = (ab_bucket){0};
        int taken = 0;
        for (int i = 0; i < 10; i++)
                taken += ab_bucket_take(&b, 2, 3, t);
        TAP_IS_INT(taken, 3, "a full bucket gives its burst at once");
        tap_ok(!ab_bucket_peek(&b, 2, 3, t + NS / 4), "a quarter second later: half a token");
        tap_ok(ab_bucket_take(&b, 2, 3, t + NS / 2), "half a second at 2/s: one token");
        tap_ok(!ab_bucket_take(&b, 2, 3, t + NS / 2), "... and only one");
        taken = 0;
        for (int i = 0; i < 10; i++)
                taken += ab_bucket_take(&b, 2, 3, t + 100 * NS);
        TAP_IS_INT(taken, 3, "a long pause refills only up to the burst");
        tap_ok(ab_bucket_size(0.5, 0) == 1 && ab_bucket_size(20, 0) == 20 &&
                   ab_bucket_size(20, 4) == 4,
               "default burst = max(1, rate)");
        b = (ab_bucket){0};
        tap_ok(ab_bucket_take(&b, 1, 1, t) && !ab_bucket_take(&b, 1, 1, t - NS),
               "a clock going back refills nothing");
}

int main(void)
{
        test_over();
        test_layers();
        test_json();
        test_ceilings();
        test_bucket();
        return tap_done();
}
