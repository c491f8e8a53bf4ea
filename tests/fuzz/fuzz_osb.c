/* fuzz_osb - libFuzzer target for the OpenSandbox front's parsers of
 * request fields (fronts/opensandbox/front_osb.h): the first byte picks the parser, the
 * rest is its input. Multipart bodies (the shared kit parser every upload uses), Range headers,
 * Kubernetes quantities, RFC 3339 times, the list's metadata filter, and the
 * networkPolicy and volumes objects of a create. Besides memory errors it
 * checks their promises (parts lie inside the body, a range inside the
 * file, a failure carries a message). Build and run with scripts/fuzz.sh. */
#include "fronts/opensandbox/front_osb.h"
#include "kit/multipart.h"
#include "kit/parse.h"
#include "base/codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

static void multipart(const char *in, size_t n)
{
        /* "boundary\n" then the body */
        const char *nl = memchr(in, '\n', n);
        if (!nl)
                return;
        char *ct = xasprintf("multipart/form-data; boundary=%.*s", (int)(nl - in), in);
        char *delim = kit_multipart_delim(ct);
        free(ct);
        if (!delim)
                return;
        check(strlen(delim) >= 3 && strlen(delim) <= 2 + KIT_MULTIPART_BOUNDARY_MAX);
        size_t len = n - (size_t)(nl + 1 - in);
        char *body = xmalloc(len ? len : 1); /* exactly len bytes: overreads are caught */
        memcpy(body, nl + 1, len);
        kit_part *parts = NULL;
        size_t k = 0;
        ab_err *e = NULL;
        int rc = kit_multipart_split(body, len, delim, 8, &parts, &k, &e);
        check(rc == 0 || (e && e->code == AB_E_INVALID && !parts && !k));
        check(k <= 8);
        for (size_t i = 0; i < k; i++) {
                check(parts[i].data >= body && parts[i].data + parts[i].len <= body + len);
                check(!parts[i].name || !memchr(parts[i].name, '"', strlen(parts[i].name)));
        }
        kit_parts_free(parts, k);
        ab_err_free(&e);
        free(body);
        free(delim);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        const char *in = (const char *)data + 1;
        size_t n = size - 1;
        char *s = xmalloc(n + 1);
        memcpy(s, in, n);
        s[n] = 0;
        switch (data[0] % 7) {
        case 0:
                multipart(in, n);
                break;
        case 1: {
                uint64_t off = 0, len = 0, fsize = n ? (uint64_t)(unsigned char)s[0] * 977 : 0;
                if (osb_parse_range(s, fsize, &off, &len) == 0)
                        check(len > 0 && off + len <= fsize);
                break;
        }
        case 2: {
                double c = 0;
                uint64_t mib = 0;
                if (osb_parse_cpu(s, &c) == 0)
                        check(c > 0);
                if (osb_parse_mib(s, &mib) == 0)
                        check(mib >= 1);
                break;
        }
        case 3: {
                int64_t ms;
                if (ab_time_parse_rfc3339(s, &ms) == 0 && ms % 1000 < 0 && ms >= 0)
                        abort(); /* a parsed time's fraction is 0..999 */
                break;
        }
        case 4: {
                json_t *md = json_pack("{s:s,s:s}", "sessionId", "a b", "k", "v=1");
                (void)kit_meta_match(md, s, "opensandbox.io/");
                (void)kit_meta_match(NULL, s, NULL);
                json_decref(md);
                break;
        }
        default: {
                json_t *j = json_loadb(in, n, 0, NULL);
                ab_err *e = NULL;
                json_t *a = NULL, *b = NULL;
                int rc = data[0] % 7 == 5 ? osb_parse_network(j, &a, &e)
                                          : osb_parse_volumes(j, &a, &b, &e);
                if (rc < 0) {
                        check(e && e->msg && *e->msg &&
                              (e->code == AB_E_INVALID || e->code == AB_E_UNSUPPORTED));
                        check(!a && !b);
                        ab_err_free(&e);
                }
                size_t i;
                json_t *v;
                json_array_foreach(data[0] % 7 == 5 ? NULL : a, i, v)
                { /* a volume's sub_path never climbs out of it */
                        const char *sub = json_string_value(json_object_get(v, "sub_path"));
                        if (!sub)
                                continue;
                        size_t l = strlen(sub);
                        check(*sub && *sub != '/' && strcmp(sub, "..") && strncmp(sub, "../", 3) &&
                              !strstr(sub, "/../") && (l < 3 || strcmp(sub + l - 3, "/..")));
                }
                json_decref(a);
                json_decref(b);
                json_decref(j);
                break;
        }
        }
        free(s);
        return 0;
}
