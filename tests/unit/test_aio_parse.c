/* Unit tests: the pure parsers of DeerFlow's front (fronts/aio/parse.c):
 * the sandbox URL's credential segment, a shell run's marks in a
 * terminal's output (whole, partial, lost to the ring, not yet started),
 * AIO's output cut, file line ranges and grep's sizes. */
#include "fronts/aio/aio_int.h"
#include "tap.h"

#include <string.h>

#define NONCE "0123456789abcdef"
#define S     "\036S" NONCE "\036"
#define E(c)  "\036E" NONCE ":" c "\036"

static void test_cap(void)
{
        char id[65];
        const char *tok = NULL;
        TAP_IS_INT(aio_cap_parse("abc123.0123456789abcdef0123456789abcdef", id, &tok), 0,
                   "box.token parses");
        TAP_IS_STR(id, "abc123", "the box id");
        TAP_IS_STR(tok, "0123456789abcdef0123456789abcdef", "the token");
        TAP_IS_INT(aio_cap_parse("abc123", id, &tok), 0, "a box id alone parses");
        tap_ok(tok == NULL, "without a token");
        TAP_IS_INT(aio_cap_parse("abc.short", id, &tok), -1, "a short token is refused");
        TAP_IS_INT(aio_cap_parse(".0123456789abcdef0123456789abcdef", id, &tok), -1,
                   "an empty id is refused");
        TAP_IS_INT(aio_cap_parse("A B.0123456789abcdef0123456789abcdef", id, &tok), -1,
                   "an id that is no box id is refused");
}

static int scan(const char *buf, size_t *off, size_t *len, int *code, bool *whole)
{
        return aio_marks_scan(buf, strlen(buf), NONCE, off, len, code, whole);
}

static void test_marks(void)
{
        size_t off, len;
        int code = -9;
        bool whole;
        const char *b = "old" E("0") "junk" S "hello\nworld\n" E("3") "after";
        TAP_IS_INT(scan(b, &off, &len, &code, &whole), 1, "both marks: done");
        tap_ok(whole && len == 12 && !memcmp(b + off, "hello\nworld\n", 12), "its output");
        TAP_IS_INT(code, 3, "its exit code");
        b = "x" S "partial out\036E01234";
        TAP_IS_INT(scan(b, &off, &len, &code, &whole), 0, "no end mark yet: running");
        tap_ok(len == 11 && !memcmp(b + off, "partial out", 11), "a partial end mark held back");
        b = "x" S "out\036E" NONCE ":12";
        TAP_IS_INT(scan(b, &off, &len, &code, &whole), 0, "an end mark without its close");
        b = "\036Enone:0\036";
        TAP_IS_INT(scan(b, &off, &len, &code, &whole), 0, "another run's mark: not started");
        TAP_IS_INT((int)len, 0, "no output yet");
        b = "tail of a long output\n" E("0");
        TAP_IS_INT(scan(b, &off, &len, &code, &whole), 1, "start lost to the ring, end there");
        tap_ok(!whole && off == 0 && len == 22, "the output is what is left of it");
        b = "tail of a long output still running";
        TAP_IS_INT(scan(b, &off, &len, &code, &whole), 0, "start lost, no end: running");
        tap_ok(off == 0 && len == strlen(b), "all of the ring is its output");
        TAP_IS_INT(scan("", &off, &len, &code, &whole), 0, "nothing: not started");
}

static void test_cut(void)
{
        json_t *j = aio_text_cut("short", 5, 10);
        TAP_IS_STR(json_string_value(j), "short", "under the limit: as it is");
        json_decref(j);
        j = aio_text_cut("0123456789abcdefghij", 20, 10);
        const char *s = json_string_value(j);
        tap_ok(!strncmp(s, "01234\n", 6) && strstr(s, "[10 characters truncated]") &&
                   !strcmp(s + strlen(s) - 6, "\nfghij"),
               "head, marker, tail: %s", s);
        json_decref(j);
        j = aio_text_cut("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 8, 2);
        s = json_string_value(j);
        tap_ok(!strncmp(s, "\xc3\xa9\n", 3) && !strcmp(s + strlen(s) - 3, "\n\xc3\xa9"),
               "whole UTF-8 characters");
        json_decref(j);
        j = aio_text_cut("bad\xff", 4, 0);
        TAP_IS_STR(json_string_value(j), "bad\xef\xbf\xbd", "invalid UTF-8 replaced, 0: no cut");
        json_decref(j);
}

static void test_lines(void)
{
        const char *t = "l0\nl1\nl2\nl3";
        const char *p;
        size_t n;
        aio_lines_cut(t, strlen(t), 1, 3, &p, &n);
        tap_ok(n == 6 && !memcmp(p, "l1\nl2\n", 6), "lines 1..3");
        aio_lines_cut(t, strlen(t), 2, -1, &p, &n);
        tap_ok(n == 5 && !memcmp(p, "l2\nl3", 5), "from line 2 to the last");
        aio_lines_cut(t, strlen(t), 9, -1, &p, &n);
        TAP_IS_INT((int)n, 0, "past the end: nothing");
        aio_lines_cut(t, strlen(t), 2, 1, &p, &n);
        TAP_IS_INT((int)n, 0, "end before start: nothing");
        aio_lines_cut(NULL, 0, 0, -1, &p, &n);
        TAP_IS_INT((int)n, 0, "an empty file");
}

static void test_sizes(void)
{
        tap_ok(aio_size_parse("1M") == 1 << 20, "1M");
        tap_ok(aio_size_parse("500K") == 500 << 10, "500K");
        tap_ok(aio_size_parse("2GB") == 2ll << 30, "2GB");
        tap_ok(aio_size_parse("1024") == 1024, "1024");
        tap_ok(aio_size_parse("1.5k") == 1536, "1.5k");
        tap_ok(aio_size_parse("") == -1 && aio_size_parse("M") == -1 &&
                   aio_size_parse("1X") == -1 && aio_size_parse("-1") == -1 &&
                   aio_size_parse("nan") == -1 && aio_size_parse("1e300G") == -1,
               "bad sizes are refused");
}

int main(void)
{
        test_cap();
        test_marks();
        test_cut();
        test_lines();
        test_sizes();
        return tap_done();
}
