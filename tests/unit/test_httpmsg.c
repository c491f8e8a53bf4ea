/* Unit tests: the port proxy's reading of a box server's answers
 * (http/httpmsg.h): response heads (complete, incomplete, malformed, 1xx,
 * bounded), header lists, Content-Length, and the chunked decoder fed
 * byte by byte and with a small output buffer. */
#include "http/httpmsg.h"
#include "base/buf.h"
#include "base/util.h"
#include "tap.h"

static void test_head(void)
{
        const char *ok = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Empty:\r\n"
                         "X-Pad:  a b \r\n\r\nbody";
        ab_http_head h;
        TAP_IS_INT(ab_http_head_parse(ok, strlen(ok), &h), 1, "a complete head");
        TAP_IS_INT(h.status, 200, "its status");
        TAP_IS_INT((int)h.n, 3, "three headers");
        TAP_IS_STR(ab_http_head_get(&h, "content-type"), "text/plain", "lookup in any case");
        TAP_IS_STR(ab_http_head_get(&h, "X-Empty"), "", "an empty value");
        TAP_IS_STR(ab_http_head_get(&h, "X-Pad"), "a b", "values are trimmed");
        TAP_IS_INT((int)h.head_len, (int)(strlen(ok) - 4), "the head ends at the blank line");
        ab_http_head_clear(&h);
        for (size_t n = 0; n < strlen(ok) - 4; n++)
                if (ab_http_head_parse(ok, n, &h) != 0) {
                        tap_ok(0, "a head cut at %zu is incomplete", n);
                        return;
                }
        tap_ok(1, "every cut of the head is incomplete");
        const char *lf = "HTTP/1.0 404 Not Found\nA: b\n\n";
        TAP_IS_INT(ab_http_head_parse(lf, strlen(lf), &h), 1, "bare LF line ends");
        TAP_IS_INT(h.status, 404, "HTTP/1.0 status");
        ab_http_head_clear(&h);
        const char *bad[] = {
            "HTTP/2 200 OK\r\n\r\n",
            "HTTP/1.1 20 OK\r\n\r\n",
            "HTTP/1.1 200OK\r\n\r\n",
            "SSH-2.0-OpenSSH\r\n\r\n",
            "HTTP/1.1 200 OK\r\nNoColon\r\n\r\n",
            "HTTP/1.1 200 OK\r\n: v\r\n\r\n",
            "HTTP/1.1 200 OK\r\nA b: v\r\n\r\n",
            "HTTP/1.1 200 OK\r\nA: x\ry\r\n\r\n",
            "HTTP/1.1 200 OK\r\nA: x\r\n folded\r\n\r\n",
            "HTTP/1.1 200 O\x01K\r\n\r\n",
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++)
                tap_ok(ab_http_head_parse(bad[i], strlen(bad[i]), &h) == -1,
                       "malformed head %zu refused", i);
        char *big = xmalloc(AB_HTTP_HEAD_MAX + 16);
        memcpy(big, "HTTP/1.1 200 OK\r\nA: ", 20);
        memset(big + 20, 'x', AB_HTTP_HEAD_MAX - 4);
        TAP_IS_INT(ab_http_head_parse(big, AB_HTTP_HEAD_MAX + 16, &h), -1,
                   "a head past the limit is refused, not waited for");
        free(big);
        ab_buf b = {0};
        ab_buf_puts(&b, "HTTP/1.1 200 OK\r\n");
        for (int i = 0; i <= AB_HTTP_HDRS_MAX; i++)
                ab_buf_printf(&b, "H%d: v\r\n", i);
        ab_buf_puts(&b, "\r\n");
        TAP_IS_INT(ab_http_head_parse(b.p, b.n, &h), -1, "too many header lines are refused");
        ab_buf_free(&b);
}

static void test_values(void)
{
        tap_ok(ab_http_list_has("keep-alive, Upgrade", "upgrade"), "a token in a list");
        tap_ok(!ab_http_list_has("upgrades", "upgrade"), "not a prefix");
        tap_ok(ab_http_list_has("gzip,  chunked ", "chunked"), "trimmed tokens");
        uint64_t n = 0;
        TAP_IS_INT(ab_http_content_length("12345", &n), 0, "Content-Length 12345");
        tap_ok(n == 12345, "its value");
        const char *bad[] = {"", "-1", "+1", "1,1", "1 ", "0x10", "99999999999999999999"};
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++)
                tap_ok(ab_http_content_length(bad[i], &n) == -1, "Content-Length \"%s\" refused",
                       bad[i]);
}

/* Decodes s in pieces of `step` bytes into an output of `out_max`. */
static int decode(const char *s, size_t step, size_t out_max, ab_buf *out)
{
        ab_chunked c = {0};
        size_t pos = 0, n = strlen(s);
        char *o = xmalloc(out_max);
        int rc = 0;
        while (pos < n && rc == 0) {
                size_t piece = n - pos < step ? n - pos : step, used = 0, made = 0;
                rc = ab_chunked_feed(&c, s + pos, piece, o, out_max, &used, &made);
                ab_buf_add(out, o, made);
                pos += used;
                if (!used && !made && rc == 0)
                        break;
        }
        free(o);
        return rc;
}

static void test_chunked(void)
{
        const char *body =
            "5\r\nhello\r\n1A;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nT: x\r\n\r\n";
        size_t steps[] = {1, 2, 3, 7, 1000};
        size_t outs[] = {1, 3, 4096};
        for (size_t i = 0; i < AB_ARRAY_LEN(steps); i++)
                for (size_t j = 0; j < AB_ARRAY_LEN(outs); j++) {
                        ab_buf b = {0};
                        int rc = decode(body, steps[i], outs[j], &b);
                        tap_ok(rc == 1 && b.n == 31 &&
                                   !strcmp(b.p, "helloabcdefghijklmnopqrstuvwxyz"),
                               "chunked, input by %zu, output by %zu", steps[i], outs[j]);
                        ab_buf_free(&b);
                }
        const char *bad[] = {"x\r\n", "5\r\nhelloX\r\n", "5zz\r\n", "FFFFFFFFFFFFFFFF\r\n", "\r\n"};
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
                ab_buf b = {0};
                tap_ok(decode(bad[i], 1000, 64, &b) == -1, "bad chunked body %zu", i);
                ab_buf_free(&b);
        }
        ab_buf b = {0};
        TAP_IS_INT(decode("5\r\nhel", 1000, 64, &b), 0, "a cut body wants more");
        ab_buf_free(&b);
}

int main(void)
{
        test_head();
        test_values();
        test_chunked();
        return tap_done();
}
