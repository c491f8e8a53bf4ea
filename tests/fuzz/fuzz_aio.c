/* fuzz_aio - libFuzzer target for the pure parsers of DeerFlow's front
 * (fronts/aio/aio_int.h, parse.c): the first byte picks the parser, the
 * rest is its input. The sandbox URL's credential segment (from the
 * network), a shell run's marks in a terminal's output and the output cut
 * (from a box, which may print anything), a file's line range and grep's
 * max_file_size. Besides memory errors it checks their promises (an id is
 * a valid box id, the run's output lies inside the buffer, a cut string
 * holds at most its characters plus the marker). Build and run with
 * scripts/fuzz.sh. */
#include "fronts/aio/aio_int.h"
#include "base/id.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

static size_t chars_of(const char *s)
{
        size_t c = 0;
        for (; *s; s++)
                c += ((unsigned char)*s & 0xC0) != 0x80;
        return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 2)
                return 0;
        unsigned pick = data[0] % 5, arg = data[1];
        size_t n = size - 2;
        char *s = xmalloc(n + 1); /* exactly the input and a NUL: overreads are caught */
        memcpy(s, data + 2, n);
        s[n] = 0;
        switch (pick) {
        case 0: {
                char id[65];
                const char *tok = NULL;
                if (aio_cap_parse(s, id, &tok) == 0) {
                        check(ab_id_valid(id));
                        check(!tok || strlen(tok) == AIO_TOKEN_HEX);
                }
                break;
        }
        case 1: {
                size_t off = 7, len = 7;
                int code = 0;
                bool whole = false;
                int rc = aio_marks_scan(s, n, "0123456789abcdef", &off, &len, &code, &whole);
                check(rc == 0 || rc == 1);
                check(off <= n && len <= n - off);
                break;
        }
        case 2: {
                json_t *j = aio_text_cut(s, n, arg);
                check(json_is_string(j));
                if (arg)
                        check(chars_of(json_string_value(j)) <= arg + 64);
                json_decref(j);
                break;
        }
        case 3: {
                const char *p = NULL;
                size_t k = 0;
                aio_lines_cut(s, n, arg & 15, (int64_t)(arg >> 4) - 1, &p, &k);
                check(p >= s && p + k <= s + n);
                break;
        }
        default: {
                int64_t b = aio_size_parse(s);
                check(b >= -1);
                break;
        }
        }
        free(s);
        return 0;
}
