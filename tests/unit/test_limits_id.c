/* Unit tests: box ids, limits, sizes and durations. */
#include "proto/initclient.h"
#include "base/id.h"
#include "base/limits.h"
#include "tap.h"

static void test_ids(void)
{
        static const char *good[] = {
            "a",      "0",      "box-1",
            "my_box", "abc123", "a23456789012345678901234567890123456789012345678901234567890123"};
        static const char *bad[] = {
            "",     "-a",    "_a",
            "A",    "box 1", "box/1",
            "../x", "box.1", "bóx",
            "a\n",  "x;rm",  "a234567890123456789012345678901234567890123456789012345678901234"};
        for (size_t i = 0; i < AB_ARRAY_LEN(good); i++)
                tap_ok(ab_id_valid(good[i]), "valid id '%s'", good[i]);
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++)
                tap_ok(!ab_id_valid(bad[i]), "invalid id #%zu rejected", i);
        tap_ok(!ab_id_valid(NULL), "NULL id rejected");
        ab_err *e = NULL;
        tap_ok(ab_id_check("Bad", &e) < 0 && e && e->code == AB_E_INVALID && strstr(e->msg, "a-z"),
               "check explains the rule");
        ab_err_free(&e);
        char a[17], b[17];
        ab_id_random(a);
        ab_id_random(b);
        tap_ok(strlen(a) == 16 && ab_id_valid(a), "random id is 16 valid chars");
        tap_ok(strcmp(a, b) != 0, "random ids differ");
}

static void test_sizes(void)
{
        uint64_t v = 0;
        ab_err *e = NULL;
        TAP_IS_INT(ab_parse_mib("512", &v, &e), 0, "plain MiB");
        TAP_IS_INT(v, 512, "512");
        ab_parse_mib("1G", &v, &e);
        TAP_IS_INT(v, 1024, "1G = 1024 MiB");
        ab_parse_mib("1.5GiB", &v, &e);
        TAP_IS_INT(v, 1536, "1.5GiB");
        ab_parse_mib("64k", &v, &e);
        TAP_IS_INT(v, 1, "64k rounds up to 1 MiB");
        tap_ok(ab_parse_mib("12parsecs", &v, &e) < 0 && e && e->code == AB_E_INVALID,
               "bad unit rejected");
        ab_err_free(&e);
        tap_ok(ab_parse_mib("-5", &v, &e) < 0, "negative rejected");
        ab_err_free(&e);
        tap_ok(ab_parse_mib("", &v, &e) < 0, "empty rejected");
        ab_err_free(&e);
        ab_parse_bytes("2M", &v, &e);
        TAP_IS_INT(v, 2 * 1024 * 1024, "bytes 2M");
        ab_parse_duration_ms("30", &v, &e);
        TAP_IS_INT(v, 30000, "30 = 30 s");
        ab_parse_duration_ms("250ms", &v, &e);
        TAP_IS_INT(v, 250, "250ms");
        ab_parse_duration_ms("5m", &v, &e);
        TAP_IS_INT(v, 300000, "5m");
        tap_ok(ab_parse_duration_ms("soon", &v, &e) < 0, "bad duration rejected");
        ab_err_free(&e);
}

static void test_limits(void)
{
        ab_limits l;
        ab_limits_default(&l);
        ab_err *e = NULL;
        TAP_IS_INT(ab_limits_validate(&l, &e), 0, "defaults valid");
        tap_ok(l.cpus == 1.0 && l.memory_mib == 1024 && l.pids == 512 && l.disk_mib == 4096 &&
                   l.timeout_s == 600,
               "defaults are 1 cpu, 1 GiB, 512 pids, 4 GiB, 600 s");
        l.memory_mib = 1;
        tap_ok(ab_limits_validate(&l, &e) < 0 && e && strstr(e->msg, "memory"),
               "tiny memory rejected, message names it");
        ab_err_free(&e);
        ab_limits_default(&l);
        l.cpus = 0;
        tap_ok(ab_limits_validate(&l, &e) < 0 && e && strstr(e->msg, "cpus"), "0 cpus rejected");
        ab_err_free(&e);
        ab_limits_default(&l);
        l.pids = 2;
        tap_ok(ab_limits_validate(&l, &e) < 0 && strstr(e->msg, "pids"), "2 pids rejected");
        ab_err_free(&e);
        ab_limits_default(&l);
        l.timeout_s = 0;
        tap_ok(ab_limits_validate(&l, &e) < 0 && strstr(e->msg, "timeout"), "0 timeout rejected");
        ab_err_free(&e);
        ab_limits_default(&l);
        l.disk_mib = 1;
        tap_ok(ab_limits_validate(&l, &e) < 0 && strstr(e->msg, "disk"), "1 MiB disk rejected");
        ab_err_free(&e);

        /* the stored form round-trips; what is odd in it keeps the default */
        ab_limits in = {
            .cpus = 2.5, .memory_mib = 512, .pids = 64, .disk_mib = 100, .timeout_s = 30};
        json_t *j = ab_limits_json(&in);
        json_object_set_new(j, "nofile", json_integer(99));
        tap_ok(ab_limits_from_json(j, &l) && l.cpus == 2.5 && l.memory_mib == 512 && l.pids == 64 &&
                   l.disk_mib == 100 && l.timeout_s == 30 && l.nofile == 99 &&
                   l.output_cap == AB_DEFAULT_OUTPUT_CAP,
               "limits from their JSON: every field, the rest defaults");
        json_decref(j);
        j = json_pack("{s:s,s:i,s:f,s:I}", "cpus", "2", "memory_mib", -5, "pids", 1.5, "timeout_s",
                      (json_int_t)1 << 40);
        tap_ok(ab_limits_from_json(j, &l) && l.cpus == AB_DEFAULT_CPUS &&
                   l.memory_mib == AB_DEFAULT_MEMORY_MIB && l.pids == AB_DEFAULT_PIDS &&
                   l.timeout_s == AB_DEFAULT_TIMEOUT_S,
               "a string, a negative, a fraction or an overflow keeps the default");
        json_decref(j);
        j = json_string("x");
        tap_ok(!ab_limits_from_json(j, &l) && l.memory_mib == AB_DEFAULT_MEMORY_MIB,
               "not an object: false, the defaults");
        json_decref(j);
        tap_ok(!ab_limits_from_json(NULL, &l), "no JSON: false");
}

/* Listing entries come from inside a box: only plain relative paths pass. */
static void test_entry_paths(void)
{
        static const char *good[] = {"a", "a/b", "a.b/c..d", ".hidden", "x/.y", "...", "a b/c"};
        static const char *bad[] = {"",    "/etc/passwd", "..",   "../x", "a/../b", "a/..",
                                    "./a", "a/./b",       "a//b", "a/",   "/"};
        for (size_t i = 0; i < AB_ARRAY_LEN(good); i++)
                tap_ok(abc_path_is_safe(good[i]), "entry path '%s' accepted", good[i]);
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++)
                tap_ok(!abc_path_is_safe(bad[i]), "entry path '%s' refused", bad[i]);
        tap_ok(!abc_path_is_safe(NULL), "NULL entry path refused");
}

int main(void)
{
        test_ids();
        test_entry_paths();
        test_sizes();
        test_limits();
        return tap_done();
}
