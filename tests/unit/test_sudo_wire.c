/* Unit tests: the messages of a box's sudo socket (proto/sudo.h): a REQUEST
 * round trip, each rule a parser enforces, the bounds, short messages. */
#include "proto/sudo.h"
#include "tap.h"

#include <errno.h>

/* Parses len bytes of s; 0 or -1 (why in *why). */
static int parse(const char *s, size_t len, const char **why)
{
        abs_req q;
        int r = abs_req_parse(s, len, &q, why);
        abs_req_free(&q);
        return r;
}

#define REQ(lit) lit, sizeof(lit) - 1

static void test_round_trip(void)
{
        const char *argv[] = {"sh", "-c", "echo \"$HOME\"", ""};
        const char *env[] = {"PATH=/bin", "EMPTY=", "NOEQUALS", "=x"};
        abs_req q = {.flags = ABS_F_PRESERVE_ENV | ABS_F_TTY,
                     .user = "user:user",
                     .cwd = "/home/user",
                     .argv = argv,
                     .argc = 4,
                     .env = env,
                     .envc = 4};
        ab_buf b = {0};
        TAP_IS_INT(abs_req_encode(&q, &b), 0, "encode");
        abs_req p;
        const char *why;
        TAP_IS_INT(abs_req_parse(b.p, b.n, &p, &why), 0, "parse what was encoded");
        tap_ok(p.flags == (ABS_F_PRESERVE_ENV | ABS_F_TTY) && !strcmp(p.user, "user:user") &&
                   !strcmp(p.cwd, "/home/user"),
               "flags, user and cwd come back");
        tap_ok(p.argc == 4 && !strcmp(p.argv[2], "echo \"$HOME\"") && !strcmp(p.argv[3], "") &&
                   p.argv[4] == NULL,
               "arguments in order, an empty one kept, NULL after them");
        tap_ok(p.envc == 2 && !strcmp(p.env[1], "EMPTY=") && p.env[2] == NULL,
               "entries that are not NAME=VALUE are not sent");
        abs_req_free(&p);
        ab_buf_free(&b);

        abs_req login = {.flags = ABS_F_LOGIN, .cwd = "/"};
        TAP_IS_INT(abs_req_encode(&login, &b), 0, "a login shell without a command encodes");
        TAP_IS_INT(abs_req_parse(b.p, b.n, &p, &why), 0, "... and parses");
        tap_ok(p.argc == 0 && p.argv && !p.argv[0] && p.env && !p.env[0] && !p.user,
               "... no arguments, no environment, root");
        abs_req_free(&p);
        ab_buf_free(&b);
}

static void test_encode_bounds(void)
{
        ab_buf b = {0};
        abs_req rel = {.cwd = "tmp", .argv = (const char *[]){"x"}, .argc = 1};
        TAP_IS_INT(abs_req_encode(&rel, &b), -EINVAL, "a relative cwd: -EINVAL");
        abs_req nouser = {.cwd = "/", .user = "", .argv = (const char *[]){"x"}, .argc = 1};
        TAP_IS_INT(abs_req_encode(&nouser, &b), -EINVAL, "an empty user: -EINVAL");
        char *big = malloc(ABS_REQ_MAX);
        memset(big, 'a', ABS_REQ_MAX - 1);
        big[ABS_REQ_MAX - 1] = 0;
        abs_req large = {.cwd = "/", .argv = (const char *[]){big}, .argc = 1};
        TAP_IS_INT(abs_req_encode(&large, &b), -E2BIG, "past ABS_REQ_MAX: -E2BIG");
        TAP_IS_INT((int)b.n, 0, "... and nothing left in the buffer");
        free(big);
        abs_req many = {.cwd = "/", .argv = (const char *[]){"x"}, .argc = ABS_ARGS_MAX + 1};
        TAP_IS_INT(abs_req_encode(&many, &b), -E2BIG, "too many arguments: -E2BIG");
        ab_buf_free(&b);
}

static void test_refusals(void)
{
        static const struct {
                const char *s;
                size_t n;
                const char *what;
        } bad[] = {
            {REQ(""), "empty"},
            {REQ("absudo1"), "the magic without its NUL"},
            {REQ("absudo2\0f\0d/\0ax\0"), "another version"},
            {REQ("absudo1\0f\0d/\0ax"), "cut short (no final NUL)"},
            {REQ("absudo1\0f\0ax\0"), "no cwd"},
            {REQ("absudo1\0f\0dtmp\0ax\0"), "a relative cwd"},
            {REQ("absudo1\0f\0d/\0d/\0ax\0"), "cwd twice"},
            {REQ("absudo1\0f\0f\0d/\0ax\0"), "flags twice"},
            {REQ("absudo1\0fEE\0d/\0ax\0"), "a flag twice"},
            {REQ("absudo1\0fq\0d/\0ax\0"), "an unknown flag"},
            {REQ("absudo1\0fis\0d/\0ax\0"), "-i and -s"},
            {REQ("absudo1\0f\0d/\0"), "no command, no shell"},
            {REQ("absudo1\0f\0u\0d/\0ax\0"), "an empty user"},
            {REQ("absudo1\0f\0ua\0ub\0d/\0ax\0"), "user twice"},
            {REQ("absudo1\0f\0d/\0ax\0eNOEQ\0"), "an entry without ="},
            {REQ("absudo1\0f\0d/\0ax\0e=v\0"), "an entry without a name"},
            {REQ("absudo1\0f\0d/\0zx\0ax\0"), "an unknown field"},
            {REQ("absudo1\0f\0d/\0\0ax\0"), "an empty field"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
                const char *why = NULL;
                tap_ok(parse(bad[i].s, bad[i].n, &why) == -1 && why, "refused: %s (%s)",
                       bad[i].what, why ? why : "accepted");
        }
        const char *why;
        TAP_IS_INT(parse(REQ("absudo1\0f\0d/\0ax\0"), &why), 0, "the smallest command parses");
        TAP_IS_INT(parse(REQ("absudo1\0d/\0ax\0"), &why), 0, "flags may be left out");

        size_t n = ABS_REQ_MAX + 1;
        char *big = calloc(1, n);
        memcpy(big, "absudo1\0d/\0a", 12);
        memset(big + 12, 'y', n - 13);
        TAP_IS_INT(parse(big, n, &why), -1, "past ABS_REQ_MAX: refused");
        TAP_IS_STR(why, "request too large", "... as too large");
        free(big);

        ab_buf b = {0};
        ab_buf_add(&b, "absudo1\0d/\0", 11);
        for (int i = 0; i <= ABS_ARGS_MAX; i++)
                ab_buf_add(&b, "ax", 3);
        TAP_IS_INT(parse(b.p, b.n, &why), -1, "ABS_ARGS_MAX + 1 arguments: refused");
        ab_buf_free(&b);
}

static void test_messages(void)
{
        char kind;
        const char *val;
        int v;
        tap_ok(abs_msg_parse("x12", 4, &kind, &val) == 0 && kind == 'x' && !strcmp(val, "12"),
               "x12: exit code 12");
        tap_ok(abs_msg_int(val, 0, 255, &v) == 0 && v == 12, "... read as 12");
        TAP_IS_INT(abs_msg_parse("x12", 3, &kind, &val), -1, "no final NUL: refused");
        TAP_IS_INT(abs_msg_parse("x1\0002", 5, &kind, &val), -1, "a NUL inside: refused");
        TAP_IS_INT(abs_msg_parse("", 1, &kind, &val), -1, "no letter: refused");
        TAP_IS_INT(abs_msg_int("256", 0, 255, &v), -1, "an exit code past 255: refused");
        TAP_IS_INT(abs_msg_int("9x", 0, 255, &v), -1, "not a number: refused");
        TAP_IS_INT(abs_msg_int("", 0, 255, &v), -1, "empty: refused");
}

int main(void)
{
        test_round_trip();
        test_encode_bounds();
        test_refusals();
        test_messages();
        return tap_done();
}
