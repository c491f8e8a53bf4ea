/* test_osb_lines.c - the OpenSandbox front's output lines (osb_lines.h):
 * the events execd sends for a command's output, one per line without its
 * end, whatever the chunks the output comes in. */
#include "fronts/opensandbox/osb_lines.h"
#include "base/util.h"
#include "tap.h"

#include <jansson.h>

/* The texts of the events in l's frames, joined by '|' (the frames are
 * emptied); checks each frame's form and type on the way. */
static char *texts(osb_lines *l)
{
        ab_buf out = {0};
        char *p = l->frames.p, *end = p + l->frames.n;
        bool first = true;
        while (p < end) {
                char *stop = memmem(p, (size_t)(end - p), "\n\n", 2);
                if (strncmp(p, "data: ", 6) || !stop) {
                        ab_buf_puts(&out, "<bad frame>");
                        break;
                }
                json_t *j = json_loadb(p + 6, (size_t)(stop - p - 6), 0, NULL);
                const char *type = json_string_value(json_object_get(j, "type"));
                if (!first)
                        ab_buf_putc(&out, '|');
                first = false;
                if (!type || strcmp(type, l->type) ||
                    !json_is_integer(json_object_get(j, "timestamp")))
                        ab_buf_puts(&out, "<bad event>");
                else
                        ab_buf_puts(&out, json_string_value(json_object_get(j, "text")));
                json_decref(j);
                p = stop + 2;
        }
        ab_buf_drop(&l->frames, l->frames.n);
        return ab_buf_steal(&out);
}

/* Feeds in one chunk, then byte by byte: both must give want. */
static void check(bool session, const char *in, size_t n, const char *want, const char *what)
{
        for (int bytewise = 0; bytewise < 2; bytewise++) {
                osb_lines l = {.session = session, .type = "stdout"};
                if (bytewise)
                        for (size_t i = 0; i < n; i++)
                                osb_lines_feed(&l, in + i, 1);
                else
                        osb_lines_feed(&l, in, n);
                osb_lines_flush(&l);
                char *got = texts(&l);
                tap_ok(!strcmp(got, want), "%s%s", what, bytewise ? " (a byte at a time)" : "");
                if (strcmp(got, want))
                        tap_diag("got '%s', want '%s'", got, want);
                free(got);
                osb_lines_free(&l);
        }
}

#define CHECK(session, lit, want, what) check(session, lit, sizeof(lit) - 1, want, what)

int main(void)
{
        CHECK(false, "one\ntwo\n", "one|two", "lines without their ends");
        CHECK(false, "a\n\nb\n", "a|\n|b", "an empty line is an event \"\\n\"");
        CHECK(false, "c\r\nd\re\n", "c|d|e", "\\r\\n is one end, \\r ends a line");
        CHECK(false, "\r\r\n", "\n|\n", "an empty \\r line, then \\r\\n: one event each");
        CHECK(false, "first\nno-end", "first|no-end", "a last line without its end at the flush");
        CHECK(false, "x\xe4\xb8\xady\n", "x\xe4\xb8\xady", "a character is never split");
        CHECK(false,
              "a\xff"
              "b\n",
              "a\xef\xbf\xbd"
              "b",
              "a byte that is not UTF-8 becomes U+FFFD");
        CHECK(false, "", "", "no output, no event");
        CHECK(true, "s1\n\ns2\r\n", "s1|s2",
              "a session: \\n ends, empty lines dropped, \\r dropped");
        CHECK(true, "a\rb\n", "a\rb", "a session: a \\r inside a line is kept");
        CHECK(true, "partial", "partial", "a session: a last line at the flush");

        /* a long line: pieces of OSB_LINE_MAX, cut between characters */
        size_t n = 150000;
        char *big = xmalloc(n + 1);
        memset(big, 'z', n);
        big[n] = '\n';
        osb_lines l = {.type = "stderr"};
        osb_lines_feed(&l, big, n + 1);
        osb_lines_flush(&l);
        char *got = texts(&l);
        size_t parts = 1, first = strcspn(got, "|");
        for (char *c = got; *c; c++)
                parts += *c == '|';
        tap_ok(parts == 3 && first == OSB_LINE_MAX && strlen(got) == n + 2,
               "a 150000-byte line: 3 pieces, the first of %d bytes (%zu, %zu)", OSB_LINE_MAX,
               parts, first);
        free(got);
        memset(big, 'a', n);
        memcpy(big + OSB_LINE_MAX - 1, "\xe4\xb8\xad", 3); /* straddles the cut */
        osb_lines_feed(&l, big, n + 1);
        got = texts(&l);
        first = strcspn(got, "|");
        tap_ok(first == OSB_LINE_MAX - 1 && !memcmp(got + first + 1, "\xe4\xb8\xad", 3),
               "a character across the cut goes whole into the next piece (%zu)", first);
        tap_ok(l.b.n == 0 && l.b.cap <= 2 * OSB_LINE_MAX + n,
               "nothing is held once the line ended");
        free(got);
        for (size_t i = 0; i < 10 * OSB_LINE_MAX; i += 4096)
                osb_lines_feed(&l, big, 4096);
        tap_ok(l.b.n <= OSB_LINE_MAX, "output without newlines: at most %d bytes held (%zu)",
               OSB_LINE_MAX, l.b.n);
        osb_lines_free(&l);
        free(big);
        return tap_done();
}
