/* fuzz_movestream - libFuzzer target for the stream of a moving box's disk
 * (fleet/movestream.h), which a node reads from another. Any bytes, fed in
 * pieces the input chooses: besides memory errors it checks the decoder's
 * promises: every extent it hands on lies inside the disk's size, after the
 * previous one, and no longer than the limit; it ends (1) only with the
 * right digest, after which any byte is an error. And a round trip: a
 * small disk made from the input, encoded as the sending node does, decodes
 * to the same bytes. Build and run with scripts/fuzz.sh. */
#include "fleet/movestream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

typedef struct sink {
        const ab_movestream *m;
        uint64_t end;
        uint8_t *disk; /* the round trip's copy, or NULL */
        size_t disk_len;
} sink;

static int take(void *ud, uint64_t off, const void *p, size_t n)
{
        sink *s = ud;
        check(n > 0 && n <= AB_MOVESTREAM_MAX_EXTENT);
        check(off >= s->end && off <= s->m->size && n <= s->m->size - off);
        s->end = off + n;
        if (s->disk) {
                check(off + n <= s->disk_len);
                memcpy(s->disk + off, p, n);
        }
        return 0;
}

static void feed_any(const uint8_t *data, size_t size)
{
        ab_movestream m;
        ab_movestream_init(&m);
        sink s = {.m = &m};
        size_t step = size ? (size_t)data[0] % 17 + 1 : 1;
        int rc = 0;
        for (size_t i = 1; i < size && rc == 0; i += step) {
                size_t n = size - i < step ? size - i : step;
                rc = ab_movestream_feed(&m, data + i, n, take, &s);
        }
        check(rc == 0 || rc == 1 || rc == -EPROTO || rc == -EBADMSG);
        if (rc == 1)
                check(ab_movestream_feed(&m, "x", 1, take, &s) == -EPROTO);
}

/* A disk of 4 KiB blocks, each a hole or data from the input, sent as the
 * owner sends it, decodes to itself. */
static void round_trip(const uint8_t *data, size_t size)
{
        size_t blocks = size % 8 + 1, len = blocks * 4096;
        uint8_t *disk = calloc(1, len), *copy = calloc(1, len);
        uint8_t *stream = malloc(64 + blocks * (16 + 4096) + 32);
        size_t n = 0;
        ab_sha256_ctx h;
        ab_sha256_init(&h);
        ab_movestream_head(stream, len);
        n += 16;
        for (size_t b = 0; b < blocks; b++) {
                if (b < size && data[b] & 1) {
                        memset(disk + b * 4096, data[b] | 1, 4096);
                        ab_movestream_rec(stream + n, b * 4096, 4096);
                        memcpy(stream + n + 16, disk + b * 4096, 4096);
                        n += 16 + 4096;
                }
        }
        ab_movestream_rec(stream + n, UINT64_MAX, 0);
        n += 16;
        ab_sha256_update(&h, stream, n);
        ab_sha256_final(&h, stream + n);
        n += AB_SHA256_LEN;
        ab_movestream m;
        ab_movestream_init(&m);
        sink s = {.m = &m, .disk = copy, .disk_len = len};
        int rc = 0;
        size_t step = size ? (size_t)data[size - 1] * 37 % 5000 + 1 : n;
        for (size_t i = 0; i < n && rc == 0; i += step)
                rc = ab_movestream_feed(&m, stream + i, n - i < step ? n - i : step, take, &s);
        check(rc == 1);
        check(memcmp(disk, copy, len) == 0);
        free(disk);
        free(copy);
        free(stream);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        feed_any(data, size);
        round_trip(data, size);
        return 0;
}
