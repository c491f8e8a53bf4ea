/* fuzz_httpmsg - libFuzzer target for what the port proxy reads from a
 * box's server (src/http/httpmsg.c): a response head, then the rest as a
 * chunked body, fed in pieces whose sizes the input's first byte picks, into
 * a small output buffer. Build and run with scripts/fuzz.sh. */
#include "http/httpmsg.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        size_t step = (size_t)(data[0] & 0x1f) + 1, out_max = (size_t)(data[0] >> 5) * 7 + 1;
        const char *p = (const char *)data + 1;
        size_t n = size - 1;
        ab_http_head h;
        size_t off = 0;
        if (ab_http_head_parse(p, n, &h) == 1) {
                off = h.head_len;
                for (size_t i = 0; i < h.n; i++)
                        if (strchr(h.value[i], '\r') || strchr(h.value[i], '\n'))
                                abort(); /* a line break in a value passed on */
                uint64_t cl;
                const char *v = ab_http_head_get(&h, "content-length");
                if (v)
                        (void)ab_http_content_length(v, &cl);
                (void)ab_http_list_has(ab_http_head_get(&h, "connection"), "upgrade");
                ab_http_head_clear(&h);
        }
        ab_chunked c = {0};
        char out[64];
        while (off < n) {
                size_t piece = n - off < step ? n - off : step, used = 0, made = 0;
                int rc = ab_chunked_feed(&c, p + off, piece, out, out_max, &used, &made);
                if (used > piece || made > out_max)
                        abort();
                off += used;
                if (rc != 0 || (!used && !made))
                        break;
        }
        return 0;
}
