/* Unit tests: the Connect protocol's framing (http/connectrpc.h) as the E2B
 * front speaks it: envelopes out (flags, big-endian length, compact JSON),
 * the end-of-stream message, request messages in (bare JSON, the first
 * envelope, a client stream), what is refused (truncated or oversized
 * frames, compressed messages, non-objects), error codes and their HTTP
 * statuses, and base64 both ways (padding, the URL-safe alphabet). */
#include "http/connectrpc.h"
#include "base/util.h"
#include "tap.h"

#include <string.h>

static size_t frame_len(const ab_buf *b, size_t off)
{
        const unsigned char *h = (const unsigned char *)b->p + off;
        return (size_t)h[1] << 24 | (size_t)h[2] << 16 | (size_t)h[3] << 8 | h[4];
}

static void test_envelopes(void)
{
        ab_buf b = {0};
        crpc_envelope(&b, 0, json_pack("{s:{s:i}}", "start", "pid", 42));
        TAP_IS_INT((int)(unsigned char)b.p[0], 0, "a message envelope: flags 0");
        TAP_IS_INT((int)frame_len(&b, 0), (int)(b.n - 5), "its length, big-endian");
        tap_ok(b.n > 5 && !memcmp(b.p + 5, "{\"start\":{\"pid\":42}}", b.n - 5),
               "then compact JSON");
        size_t first = b.n;
        crpc_end(&b, NULL, NULL);
        TAP_IS_INT((int)(unsigned char)b.p[first], CRPC_FLAG_END, "end of stream: flag 0x02");
        tap_ok(b.n - first == 7 && !memcmp(b.p + first + 5, "{}", 2), "with {}");
        size_t second = b.n;
        crpc_end(&b, "not_found", "no such process");
        json_t *j = json_loadb(b.p + second + 5, frame_len(&b, second), 0, NULL);
        TAP_IS_STR(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                   "not_found", "an error end: error.code");
        TAP_IS_STR(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                   "no such process", "and error.message");
        json_decref(j);

        /* a big message: its length in all four bytes */
        ab_buf big = {0};
        char *s = xmalloc(70000);
        memset(s, 'x', 69999);
        s[69999] = 0;
        crpc_envelope(&big, 0, json_pack("{s:s}", "k", s));
        TAP_IS_INT((int)frame_len(&big, 0), (int)(big.n - 5), "a 70 kB message: its length");
        free(s);
        ab_buf_free(&big);

        /* the stream as a client reads it back */
        json_t *msgs = NULL;
        ab_err *e = NULL;
        tap_ok(crpc_parse_stream(b.p, b.n, &msgs, &e) == 0 && json_array_size(msgs) == 1,
               "parse_stream: one message before the end envelope");
        json_decref(msgs);
        ab_buf_free(&b);
}

static void test_requests(void)
{
        json_t *m = NULL;
        ab_err *e = NULL;
        tap_ok(crpc_parse_request("{\"path\":\"/a\"}", 13, false, &m, &e) == 0 &&
                   !strcmp(json_string_value(json_object_get(m, "path")), "/a"),
               "unary: a bare JSON object");
        json_decref(m);
        tap_ok(crpc_parse_request("", 0, false, &m, &e) == 0 && json_object_size(m) == 0,
               "unary: an empty body is {}");
        json_decref(m);
        tap_ok(crpc_parse_request("[1]", 3, false, &m, &e) < 0 && e->code == AB_E_INVALID,
               "unary: not an object is invalid");
        ab_err_free(&e);
        tap_ok(crpc_parse_request("{\"a\":", 5, false, &m, &e) < 0 && e->code == AB_E_INVALID,
               "unary: bad JSON is invalid");
        ab_err_free(&e);

        ab_buf b = {0};
        crpc_envelope(&b, 0, json_pack("{s:s}", "cmd", "ls"));
        tap_ok(crpc_parse_request(b.p, b.n, true, &m, &e) == 0 &&
                   !strcmp(json_string_value(json_object_get(m, "cmd")), "ls"),
               "streaming: the first envelope's message");
        json_decref(m);
        for (size_t cut = 1; cut < b.n; cut++)
                if (crpc_parse_request(b.p, cut, true, &m, &e) == 0) {
                        json_decref(m);
                        tap_ok(0, "an envelope cut at %zu is refused", cut);
                        break;
                } else {
                        ab_err_free(&e);
                }
        tap_ok(1, "every cut of an envelope is refused");
        tap_ok(crpc_parse_request("", 0, true, &m, &e) == 0 && json_object_size(m) == 0,
               "streaming: no envelope at all is {}");
        json_decref(m);
        b.p[0] = CRPC_FLAG_COMPRESSED;
        tap_ok(crpc_parse_request(b.p, b.n, true, &m, &e) < 0 && e->code == AB_E_INVALID,
               "a compressed envelope is refused");
        ab_err_free(&e);
        unsigned char huge[5] = {0, 0x7f, 0xff, 0xff, 0xff};
        tap_ok(crpc_parse_request((const char *)huge, 5, true, &m, &e) < 0,
               "a length past the body is refused");
        ab_err_free(&e);
        ab_buf_free(&b);

        /* a client stream: start, data, data, end */
        crpc_envelope(&b, 0, json_pack("{s:{}}", "start"));
        crpc_envelope(&b, 0, json_pack("{s:i}", "data", 1));
        crpc_envelope(&b, 0, json_pack("{s:i}", "data", 2));
        crpc_end(&b, NULL, NULL);
        crpc_envelope(&b, 0, json_pack("{s:i}", "after", 3));
        json_t *a = NULL;
        tap_ok(crpc_parse_stream(b.p, b.n, &a, &e) == 0 && json_array_size(a) == 3,
               "a client stream: its messages up to the end envelope");
        json_decref(a);
        tap_ok(crpc_parse_stream(b.p, b.n - 1, &a, &e) == 0 && json_array_size(a) == 3,
               "what follows the end is not read");
        json_decref(a);
        tap_ok(crpc_parse_stream(b.p, 7, &a, &e) < 0 && e->code == AB_E_INVALID,
               "a stream cut in a message is refused");
        ab_err_free(&e);
        ab_buf_free(&b);
}

static void test_codes(void)
{
        TAP_IS_STR(crpc_code_of(AB_E_NOT_FOUND), "not_found", "not found");
        TAP_IS_STR(crpc_code_of(AB_E_INVALID), "invalid_argument", "invalid");
        TAP_IS_STR(crpc_code_of(AB_E_TIMEOUT), "deadline_exceeded", "timeout");
        TAP_IS_STR(crpc_code_of(AB_E_UNAVAILABLE), "unavailable", "unavailable");
        TAP_IS_STR(crpc_code_of(AB_E_UNSUPPORTED), "unimplemented", "unsupported");
        TAP_IS_INT((int)crpc_http_status("not_found"), 404, "not_found is 404");
        TAP_IS_INT((int)crpc_http_status("unauthenticated"), 401, "unauthenticated is 401");
        TAP_IS_INT((int)crpc_http_status("already_exists"), 409, "already_exists is 409");
        TAP_IS_INT((int)crpc_http_status("resource_exhausted"), 429, "resource_exhausted is 429");
        TAP_IS_INT((int)crpc_http_status("no_such_code"), 500, "an unknown code is 500");
}

static void test_base64(void)
{
        const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
        const char *enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
        for (size_t i = 0; i < 7; i++) {
                char *e = crpc_b64_encode(plain[i], strlen(plain[i]));
                TAP_IS_STR(e, enc[i], "encode (RFC 4648 vectors)");
                free(e);
                char *d = NULL;
                size_t n = 99;
                tap_ok(crpc_b64_decode(enc[i], &d, &n) == 0 && n == strlen(plain[i]) &&
                           !memcmp(d, plain[i], n),
                       "decode %s", enc[i]);
                free(d);
        }
        char *d = NULL;
        size_t n = 0;
        tap_ok(crpc_b64_decode("Zm9vYg", &d, &n) == 0 && n == 4 && !memcmp(d, "foob", 4),
               "decode without padding");
        free(d);
        unsigned char bin[3] = {0xfb, 0xff, 0xfe};
        char *e = crpc_b64_encode(bin, 3);
        TAP_IS_STR(e, "+//+", "binary: the standard alphabet");
        free(e);
        tap_ok(crpc_b64_decode("-__-", &d, &n) == 0 && n == 3 && !memcmp(d, bin, 3),
               "decode the URL-safe alphabet");
        free(d);
        tap_ok(crpc_b64_decode("Zm9v!", &d, &n) < 0, "a bad character is refused");
        tap_ok(crpc_b64_decode("Z", &d, &n) < 0, "a lone character is refused");
}

int main(void)
{
        test_envelopes();
        test_requests();
        test_codes();
        test_base64();
        return tap_done();
}
