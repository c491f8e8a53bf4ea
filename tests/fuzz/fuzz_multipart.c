/* fuzz_multipart - libFuzzer target for the multipart/form-data parsers of
 * the fronts' uploads: E2B envd's POST /files (envd_parse_multipart,
 * fronts/e2b/envd_int.h) and the kit's parser under it, which OpenSandbox
 * execd's files/upload uses directly (kit_multipart_delim +
 * kit_multipart_split, kit/multipart.h). The input is a Content-Type line, then
 * the body; the first byte picks the parser. Besides memory errors it checks
 * their promises: every part lies inside the body, a file part has a path, a
 * failure carries a message and hands out nothing. Build and run with
 * scripts/fuzz.sh. */
#include "fronts/e2b/envd_int.h"
#include "kit/multipart.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

static void envd(const char *ctype, const char *body, size_t len)
{
        up_file *files = (up_file *)1; /* must stay untouched on failure */
        size_t n = 7;
        ab_err *e = NULL;
        if (envd_parse_multipart(body, len, ctype, &files, &n, &e) < 0) {
                check(e && e->msg[0]);
                check(files == (up_file *)1 && n == 7);
                ab_err_free(&e);
                return;
        }
        check(!e);
        check(n == 0 || files);
        for (size_t i = 0; i < n; i++) {
                check(files[i].path);
                check(files[i].data >= body && files[i].data + files[i].len <= body + len);
                free(files[i].path);
        }
        free(files);
}

static void kit(const char *ctype, const char *body, size_t len)
{
        char *delim = kit_multipart_delim(ctype);
        if (!delim)
                return;
        check(!strncmp(delim, "--", 2) && delim[2]);
        check(strlen(delim) <= 2 + KIT_MULTIPART_BOUNDARY_MAX);
        kit_part *parts = (kit_part *)1; /* NULL on failure */
        size_t k = 7;
        ab_err *e = NULL;
        if (kit_multipart_split(body, len, delim, 8, &parts, &k, &e) < 0) {
                check(e && e->msg[0]);
                check(!parts && k == 0);
                ab_err_free(&e);
        } else {
                check(!e);
                check(k <= 8);
                for (size_t i = 0; i < k; i++)
                        check(parts[i].data >= body && parts[i].data + parts[i].len <= body + len);
                kit_parts_free(parts, k);
        }
        free(delim);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 2)
                return 0;
        const char *in = (const char *)data + 1;
        size_t n = size - 1;
        const char *nl = memchr(in, '\n', n);
        if (!nl)
                return 0;
        char *ctype = xstrndup(in, (size_t)(nl - in)); /* ends at a NUL, as a header does */
        size_t len = n - (size_t)(nl + 1 - in);
        /* exactly len bytes, not NUL-terminated (an mmap'd spool): overreads
         * are caught. Never NULL: the servers never pass an empty body (both
         * answer 400 first) */
        char *body = xmalloc(len ? len : 1);
        memcpy(body, nl + 1, len);
        if (data[0] & 1)
                kit(ctype, body, len);
        else
                envd(ctype, body, len);
        free(body);
        free(ctype);
        return 0;
}
