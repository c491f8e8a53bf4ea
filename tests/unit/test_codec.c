/* Unit tests: the shared text codecs (hex, %XX decoding, RFC 3339 times) and
 * random ids (base/codec.h, base/id.h). */
#include "base/codec.h"
#include "base/id.h"
#include "tap.h"

static void test_hex(void)
{
        TAP_IS_INT(ab_hexval('0'), 0, "hex 0");
        TAP_IS_INT(ab_hexval('9'), 9, "hex 9");
        TAP_IS_INT(ab_hexval('a'), 10, "hex a");
        TAP_IS_INT(ab_hexval('F'), 15, "hex F");
        TAP_IS_INT(ab_hexval('g'), -1, "g is no hex digit");
        TAP_IS_INT(ab_hexval('\0'), -1, "NUL is no hex digit");
        TAP_IS_INT(ab_hexval(' '), -1, "space is no hex digit");
        char out[9];
        ab_hex_encode("\x00\x7f\xab\xff", 4, out);
        TAP_IS_STR(out, "007fabff", "hex encoding, lower case");
        ab_hex_encode("", 0, out);
        TAP_IS_STR(out, "", "nothing encodes to nothing");
}

static void test_pct(void)
{
        static const struct {
                const char *in, *want;
        } cases[] = {
            {"plain", "plain"}, {"a%3Db", "a=b"}, {"a%3db", "a=b"},
            {"x+y", "x y"},     {"%2B", "+"},     {"%252F", "%2F"}, /* one level only */
            {"100%", "100%"},                                       /* a lone '%' at the end */
            {"%4", "%4"},                                           /* one digit short */
            {"%zz", "%zz"},     /* not hex: kept (a copy decoded it to NUL) */
            {"%g1%41", "%g1A"}, /* a bad escape, then a good one */
            {"%-1x", "%-1x"},   /* strtol would take a sign */
            {"% 1x", "% 1x"},   /* or a space */
            {"", ""},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++) {
                char *got = ab_pct_decode(cases[i].in, strlen(cases[i].in));
                tap_ok(!strcmp(got, cases[i].want), "%%XX decode '%s' = '%s' (got '%s')",
                       cases[i].in, cases[i].want, got);
                free(got);
        }
        char *got = ab_pct_decode("a%41bc", 5); /* only the first n bytes */
        TAP_IS_STR(got, "aAb", "decodes only n bytes");
        free(got);
        got = ab_pct_decode("ab%4", 3); /* an escape cut by n is not read past n */
        TAP_IS_STR(got, "ab%", "an escape cut at n stays");
        free(got);
}

static void test_time_format(void)
{
        char t[AB_TIME_LEN];
        ab_time_rfc3339(0, false, t);
        TAP_IS_STR(t, "1970-01-01T00:00:00Z", "epoch");
        ab_time_rfc3339(1795755600123, true, t);
        TAP_IS_STR(t, "2026-11-27T05:00:00.123Z", "with milliseconds");
        ab_time_rfc3339(1795755600123, false, t);
        TAP_IS_STR(t, "2026-11-27T05:00:00Z", "whole seconds drop the fraction");
        ab_time_rfc3339(-1, true, t);
        TAP_IS_STR(t, "1969-12-31T23:59:59.999Z", "before 1970: floor, fraction positive");
        ab_time_rfc3339(INT64_MAX, true, t);
        tap_ok(strlen(t) < AB_TIME_LEN, "an absurd time stays in the buffer ('%s')", t);
}

static void test_time_parse(void)
{
        static const struct {
                const char *in;
                int64_t want;
        } good[] = {
            {"1970-01-01T00:00:00Z", 0},
            {"2026-11-27T05:00:00Z", 1795755600000},
            {"2026-11-27T05:00:00z", 1795755600000},
            {"2026-11-27T05:00:00.123Z", 1795755600123},
            {"2026-11-27T05:00:00.5Z", 1795755600500},
            {"2026-11-27T05:00:00.123456789Z", 1795755600123},
            {"2026-11-27T07:00:00+02:00", 1795755600000},
            {"2026-11-27T04:30:00.250-00:30", 1795755600250},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(good); i++) {
                int64_t ms = -1;
                int rc = ab_time_parse_rfc3339(good[i].in, &ms);
                tap_ok(rc == 0 && ms == good[i].want, "parse '%s' = %lld (got %d, %lld)",
                       good[i].in, (long long)good[i].want, rc, (long long)ms);
        }
        static const char *bad[] = {
            "",
            "2026-11-27",
            "2026-11-27T05:00:00",      /* no zone */
            "2026-11-27T05:00:00Zjunk", /* trailing bytes */
            "2026-11-27T05:00:00.Z",    /* empty fraction */
            "2026-11-27T05:00:00+0200", /* offset without ':' */
            "2026-11-27T05:00:00+2:00", /* one-digit hour */
            "2026-11-27T05:00:00+02:0", /* cut */
            "2026-13-27T05:00:00Z",     /* month 13 */
            "yesterday",
            "99999-01-01T00:00:00Z",
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
                int64_t ms = 42;
                tap_ok(ab_time_parse_rfc3339(bad[i], &ms) == -EINVAL && ms == 42,
                       "refused '%s', output untouched", bad[i]);
        }
        char t[AB_TIME_LEN];
        ab_time_rfc3339(1795755600123, true, t);
        int64_t back = 0;
        tap_ok(ab_time_parse_rfc3339(t, &back) == 0 && back == 1795755600123,
               "format then parse is the identity");
}

static bool all_hex(const char *s)
{
        for (; *s; s++)
                if (ab_hexval(*s) < 0 || (*s >= 'A' && *s <= 'F'))
                        return false;
        return true;
}

static void test_random(void)
{
        char a[24], b[24];
        ab_random_hex(a, sizeof(a), "cmd-", 8);
        ab_random_hex(b, sizeof(b), "cmd-", 8);
        tap_ok(strlen(a) == 20 && !strncmp(a, "cmd-", 4) && all_hex(a + 4),
               "prefix then 16 lower-case hex digits ('%s')", a);
        tap_ok(strcmp(a, b) != 0, "two ids differ");
        char exact[5];
        ab_random_hex(exact, sizeof(exact), "", 2);
        tap_ok(strlen(exact) == 4 && all_hex(exact), "an id filling its buffer exactly");
        char id[17];
        ab_id_random(id);
        tap_ok(strlen(id) == 16 && all_hex(id) && ab_id_valid(id), "a box id: 16 hex digits");
        unsigned char zero[32] = {0}, r[32] = {0};
        ab_random_bytes(r, sizeof(r));
        tap_ok(memcmp(r, zero, sizeof(r)) != 0, "random bytes are not all zero");
}

int main(void)
{
        test_hex();
        test_pct();
        test_time_format();
        test_time_parse();
        test_random();
        return tap_done();
}
