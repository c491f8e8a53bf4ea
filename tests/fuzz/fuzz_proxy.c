/* fuzz_proxy - libFuzzer target for the egress proxy's parsers: the request
 * head a box sends the proxy (ab_proxy_parse) and a box's network policy
 * (ab_netpol_parse on the input read as JSON). Besides memory errors it
 * checks the invariants the proxy relies on: a parsed host is normalised and
 * a plain request's rewritten head is one head, carrying its own Host; a
 * policy survives its JSON round trip. Build and run with scripts/fuzz.sh
 * (clang -fsanitize=fuzzer,address,undefined). */
#include "base/util.h"
#include "net/policy.h"
#include "net/proxy.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool cond)
{
        if (!cond)
                abort();
}

/* Content-Length and Transfer-Encoding header lines in head[0..n). */
static int framings(const char *head, size_t n)
{
        int k = 0;
        for (const char *p = head, *end = head + n; p < end;) {
                const char *le = memmem(p, (size_t)(end - p), "\r\n", 2);
                size_t ln = le ? (size_t)(le - p) : (size_t)(end - p);
                if ((ln > 15 && !strncasecmp(p, "content-length:", 15)) ||
                    (ln > 18 && !strncasecmp(p, "transfer-encoding:", 18)))
                        k++;
                if (!le)
                        break;
                p = le + 2;
        }
        return k;
}

static void fuzz_request(const uint8_t *data, size_t size, const ab_netpol *pol)
{
        /* an exact-size copy, so any read past the end is caught */
        char *buf = xmalloc(size ? size : 1);
        memcpy(buf, data, size);
        ab_proxy_req r;
        const char *why = NULL;
        int st = ab_proxy_parse(buf, size, &r, &why);
        free(buf);
        if (st) {
                check(st >= 400 && st < 600 && why && !r.head);
                return;
        }
        char norm[256];
        check(ab_net_host_normalize(r.host, norm, sizeof(norm)) && !strcmp(norm, r.host));
        check(r.port >= 1 && r.port <= 65535);
        if (r.connect) {
                check(!r.head);
        } else {
                check(r.head && r.head_len >= 4 && r.head_len <= size + 512);
                check(!memcmp(r.head + r.head_len - 4, "\r\n\r\n", 4));
                /* exactly one blank line: nothing can be smuggled after the head */
                check(memmem(r.head, r.head_len, "\r\n\r\n", 4) == r.head + r.head_len - 4);
                check(memmem(r.head, r.head_len, "\r\nHost: ", 8) != NULL);
                /* every CR and LF is part of a CRLF: no bare LF a lenient
                 * origin server could split a line at (a second Host, a
                 * request line of its own) */
                for (size_t i = 0; i < r.head_len; i++)
                        if (r.head[i] == '\r')
                                check(i + 1 < r.head_len && r.head[i + 1] == '\n');
                        else if (r.head[i] == '\n')
                                check(i > 0 && r.head[i - 1] == '\r');
                /* one framing of the body at most: Content-Length and
                 * Transfer-Encoding never both, neither twice */
                check(framings(r.head, r.head_len) <= 1);
        }
        if (pol)
                (void)ab_netpol_allows(pol, r.host, r.port, NULL, 0);
        free(r.head);
}

static void fuzz_policy(const uint8_t *data, size_t size, ab_netpol *pol, bool *have)
{
        json_error_t je;
        json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, &je);
        if (!j)
                return;
        ab_err *err = NULL;
        if (ab_netpol_parse(j, pol, &err) == 0) {
                *have = true;
                json_t *c = ab_netpol_json(pol);
                ab_netpol back;
                ab_err *e2 = NULL;
                check(c && ab_netpol_parse(c, &back, &e2) == 0);
                check(ab_netpol_equal(pol, &back));
                ab_netpol_clear(&back);
                json_decref(c);
                char why[64];
                (void)ab_netpol_allows(pol, "example.com", 443, why, sizeof(why));
        } else {
                check(err && err->code == AB_E_INVALID && err->msg);
        }
        ab_err_free(&err);
        json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        ab_netpol pol;
        bool have = false;
        fuzz_policy(data, size, &pol, &have);
        fuzz_request(data, size, have ? &pol : NULL);
        /* the host normaliser on the input as a string */
        if (size < 400) {
                char s[400], out[256];
                memcpy(s, data, size);
                s[size] = '\0';
                if (ab_net_host_normalize(s, out, sizeof(out))) {
                        char again[256];
                        check(ab_net_host_normalize(out, again, sizeof(again)) &&
                              !strcmp(out, again));
                }
        }
        if (have)
                ab_netpol_clear(&pol);
        return 0;
}
