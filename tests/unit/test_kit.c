/* Unit tests: the request fields every front parses the same way
 * (api/kit_parse.h): argv and the list's metadata filter. */
#include "api/kit_parse.h"
#include "tap.h"

static void test_argv(void)
{
        ab_err *e = NULL;
        char **v = (char **)1;
        json_t *o = json_pack("{s:[s,s]}", "argv", "ls", "-l");
        tap_ok(kit_parse_argv(o, "argv", &v, &e) == 0 && v && !strcmp(v[0], "ls") &&
                   !strcmp(v[1], "-l") && !v[2],
               "an argv is copied, NULL-terminated");
        ab_strvfreep(&v);
        json_decref(o);
        o = json_pack("{s:n}", "argv");
        v = (char **)1;
        tap_ok(kit_parse_argv(o, "argv", &v, &e) == 0 && !v, "null: no argv");
        json_decref(o);
        o = json_object();
        v = (char **)1;
        tap_ok(kit_parse_argv(o, "argv", &v, &e) == 0 && !v, "absent: no argv");
        json_decref(o);
        static const struct {
                const char *json, *msg;
        } bad[] = {
            {"{\"argv\": []}", "argv: must be a non-empty array"},
            {"{\"argv\": \"ls\"}", "argv: must be a non-empty array"},
            {"{\"argv\": [\"ls\", 1]}", "argv[1]: must be a string"},
            {"{\"argv\": [\"\"]}", "argv[0]: must not be empty"},
            {"{\"argv\": [null]}", "argv[0]: must be a string"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
                o = json_loads(bad[i].json, 0, NULL);
                v = NULL;
                int rc = kit_parse_argv(o, "argv", &v, &e);
                tap_ok(rc < 0 && !v && e && e->code == AB_E_INVALID && strstr(e->msg, bad[i].msg),
                       "%s refused: %s", bad[i].json, e ? e->msg : "(no error)");
                ab_err_free(&e);
                json_decref(o);
        }
}

static void test_meta(void)
{
        json_t *md = json_pack("{s:s,s:s,s:s,s:s}", "env", "prod", "a b", "x=y&z", "empty", "",
                               "opensandbox.io/image", "img");
        static const struct {
                const char *filter;
                bool want;
        } cases[] = {
            {"", true},
            {"env=prod", true},
            {"env=dev", false},
            {"env=prod&missing=1", false},
            {"a+b=x%3Dy%26z", true}, /* the second encoding the SDKs add */
            {"a%20b=x%3dy%26z", true},
            {"env=pro%64", true},
            {"env=pro%6", false},   /* a cut escape stays literal */
            {"env=prod%zz", false}, /* a bad escape is not decoded to NUL */
            {"empty", true},        /* no '=': an empty value */
            {"env", false},
            {"env=prod&&empty=", true},
            {"opensandbox.io/image=img", false}, /* reserved */
            {"%6fpensandbox.io/image=img", false},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++)
                tap_ok(kit_meta_match(md, cases[i].filter, "opensandbox.io/") == cases[i].want,
                       "filter '%s' %s", cases[i].filter, cases[i].want ? "matches" : "does not");
        tap_ok(kit_meta_match(md, "opensandbox.io/image=img", NULL), "no reserved prefix: matches");
        tap_ok(kit_meta_match(md, NULL, NULL), "no filter matches");
        tap_ok(!kit_meta_match(NULL, "env=prod", NULL), "no metadata matches no pair");
        tap_ok(kit_meta_match(NULL, "", NULL), "no metadata, empty filter");
        json_decref(md);
}

int main(void)
{
        test_argv();
        test_meta();
        return tap_done();
}
