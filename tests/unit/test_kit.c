/* Unit tests: the request fields every front parses the same way
 * (kit/parse.h): argv and the list's metadata filter. */
#include "kit/files.h"
#include "kit/multipart.h"
#include "kit/parse.h"
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

static void test_delim(void)
{
        static const struct {
                const char *ct, *want;
        } cases[] = {
            {"multipart/form-data; boundary=abc", "--abc"},
            {"multipart/form-data; BOUNDARY=abc; charset=x", "--abc"},
            {"multipart/form-data; boundary=\"a b;c\"", "--a b;c"},
            {"multipart/form-data; boundary=\"abc", NULL}, /* unclosed quote */
            {"multipart/form-data; boundary=", NULL},
            {"multipart/form-data; boundary=\"\"", NULL},
            {"multipart/form-data", NULL},
            {"multipart/form-data; boundary=0123456789012345678901234567890123456789012345678901"
             "234567890123456789",
             "--0123456789012345678901234567890123456789012345678901234567890123456789"},
            {"multipart/form-data; boundary=0123456789012345678901234567890123456789012345678901"
             "2345678901234567890",
             NULL}, /* 71 characters */
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++) {
                char *d = kit_multipart_delim(cases[i].ct);
                tap_ok(cases[i].want ? d && !strcmp(d, cases[i].want) : !d, "boundary of '%s': %s",
                       cases[i].ct, d ? d : "none");
                free(d);
        }
        tap_ok(!kit_multipart_delim(NULL), "no Content-Type: no boundary");
}

static int split(const char *body, size_t max, kit_part **p, size_t *n, ab_code *code)
{
        ab_err *e = NULL;
        int rc = kit_multipart_split(body, strlen(body), "--XB", max, p, n, &e);
        *code = e ? e->code : (ab_code)0;
        ab_err_free(&e);
        return rc;
}

static void test_multipart(void)
{
        kit_part *p;
        size_t n;
        ab_code c;
        const char *two =
            "preamble\r\n--XB\r\n"
            "Content-Disposition: form-data; name=\"metadata\"\r\n"
            "Content-Type: application/json\r\n\r\n"
            "{}\r\n--XB\r\n"
            "content-disposition: form-data; name=\"file\"; filename=\"a/b.txt\"\r\n\r\n"
            "x\r\n--XBnot-a-delimiter\r\n\r\n--XB--\r\nepilogue";
        tap_ok(split(two, 8, &p, &n, &c) == 0 && n == 2, "two parts");
        if (n == 2) {
                tap_ok(p[0].name && !strcmp(p[0].name, "metadata") && !p[0].filename &&
                           p[0].len == 2 && !memcmp(p[0].data, "{}", 2),
                       "the first: its name and bytes");
                tap_ok(p[1].name && !strcmp(p[1].name, "file") && p[1].filename &&
                           !strcmp(p[1].filename, "a/b.txt"),
                       "the second: name (not the end of filename) and filename");
                tap_ok(p[1].len == strlen("x\r\n--XBnot-a-delimiter\r\n"),
                       "a delimiter-like line inside a part is data");
        }
        kit_parts_free(p, n);
        tap_ok(split("--XB\r\n\r\nbare\r\n--XB--", 8, &p, &n, &c) == 0 && n == 1 && !p[0].name &&
                   p[0].len == 4,
               "a part with no head lines");
        kit_parts_free(p, n);
        tap_ok(split("--XB--", 8, &p, &n, &c) == 0 && n == 0 && !p, "no parts");
        static const char *bad[] = {
            "",
            "no delimiter at all",
            "--XB\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\ndata", /* no end */
            "--XB\r\nContent-Disposition: form-data; name=\"a\"",             /* no blank line */
            "--XBjunk\r\n\r\n\r\n--XB--",
            "--XB",
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++)
                tap_ok(split(bad[i], 8, &p, &n, &c) < 0 && c == AB_E_INVALID && !p && !n,
                       "malformed body #%zu refused", i);
        const char *three = "--XB\r\n\r\na\r\n--XB\r\n\r\nb\r\n--XB\r\n\r\nc\r\n--XB--";
        tap_ok(split(three, 2, &p, &n, &c) < 0 && c == AB_E_INVALID, "more parts than max refused");
        tap_ok(split(three, 3, &p, &n, &c) == 0 && n == 3, "as many parts as max pass");
        kit_parts_free(p, n);
        kit_parts_free(NULL, 0);
}

static void test_files(void)
{
        TAP_IS_STR(kit_ftype_name(&kit_ftypes_rest, ABC_DIR), "dir", "REST: dir");
        TAP_IS_STR(kit_ftype_name(&kit_ftypes_envd, ABC_DIR), "FILE_TYPE_DIRECTORY", "envd: dir");
        TAP_IS_STR(kit_ftype_name(&kit_ftypes_execd, ABC_DIR), "directory", "execd: dir");
        TAP_IS_STR(kit_ftype_name(&kit_ftypes_execd, ABC_SYMLINK), "symlink", "execd: symlink");
        TAP_IS_STR(kit_ftype_name(&kit_ftypes_envd, ABC_OTHER), "FILE_TYPE_UNSPECIFIED",
                   "envd: other");
        TAP_IS_STR(kit_ftype_name(&kit_ftypes_rest, (abc_ftype)99), "other", "unknown: other");
        TAP_IS_INT(kit_ftype_of_stat("regular empty file"), ABC_FILE, "stat: empty file");
        TAP_IS_INT(kit_ftype_of_stat("regular file"), ABC_FILE, "stat: file");
        TAP_IS_INT(kit_ftype_of_stat("directory"), ABC_DIR, "stat: directory");
        TAP_IS_INT(kit_ftype_of_stat("symbolic link"), ABC_SYMLINK, "stat: link");
        TAP_IS_INT(kit_ftype_of_stat("fifo"), ABC_OTHER, "stat: fifo");
        TAP_IS_STR(kit_base_name("/a/b.txt"), "b.txt", "base name");
        TAP_IS_STR(kit_base_name("b.txt"), "b.txt", "a bare name");
        TAP_IS_STR(kit_base_name("/"), "/", "the root is its own name");
        TAP_IS_STR(kit_base_name("a/"), "a/", "a trailing slash: the whole path");
}

int main(void)
{
        test_files();
        test_delim();
        test_multipart();
        test_argv();
        test_meta();
        return tap_done();
}
