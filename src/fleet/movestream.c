/* movestream.c - the decoder of a moving box's disk stream (movestream.h). */
#include "fleet/movestream.h"

#include <errno.h>
#include <string.h>

enum { MS_HEAD, MS_REC, MS_DATA, MS_DIGEST, MS_DONE };

static void put64(uint8_t *p, uint64_t v)
{
        for (int i = 7; i >= 0; i--, v >>= 8)
                p[i] = (uint8_t)v;
}

static uint64_t get64(const uint8_t *p)
{
        uint64_t v = 0;
        for (int i = 0; i < 8; i++)
                v = v << 8 | p[i];
        return v;
}

void ab_movestream_head(uint8_t out[AB_MOVESTREAM_HEAD], uint64_t size)
{
        memcpy(out, AB_MOVESTREAM_MAGIC, 8);
        put64(out + 8, size);
}

void ab_movestream_rec(uint8_t out[AB_MOVESTREAM_HEAD], uint64_t offset, uint64_t length)
{
        put64(out, offset);
        put64(out + 8, length);
}

void ab_movestream_init(ab_movestream *m)
{
        memset(m, 0, sizeof(*m));
        ab_sha256_init(&m->hash);
}

/* A complete 16-byte header in m->buf. */
static int take_header(ab_movestream *m)
{
        ab_sha256_update(&m->hash, m->buf, AB_MOVESTREAM_HEAD);
        m->have = 0;
        if (m->state == MS_HEAD) {
                if (memcmp(m->buf, AB_MOVESTREAM_MAGIC, 8) != 0)
                        return -EPROTO;
                m->size = get64(m->buf + 8);
                m->state = MS_REC;
                return 0;
        }
        uint64_t off = get64(m->buf), len = get64(m->buf + 8);
        if (off == UINT64_MAX && len == 0) {
                m->state = MS_DIGEST;
                return 0;
        }
        if (len == 0 || len > AB_MOVESTREAM_MAX_EXTENT || off < m->end || off > m->size ||
            len > m->size - off)
                return -EPROTO;
        m->offset = off;
        m->left = len;
        m->end = off + len;
        m->state = MS_DATA;
        return 0;
}

int ab_movestream_feed(ab_movestream *m, const void *data, size_t n, ab_movestream_write write,
                       void *ud)
{
        const uint8_t *p = data;
        while (n) {
                if (m->state == MS_DONE)
                        return -EPROTO;
                if (m->state == MS_DATA) {
                        size_t k = n < m->left ? n : (size_t)m->left;
                        int r = write(ud, m->offset, p, k);
                        if (r < 0)
                                return r;
                        ab_sha256_update(&m->hash, p, k);
                        m->offset += k;
                        m->left -= k;
                        m->data += k;
                        p += k;
                        n -= k;
                        if (!m->left)
                                m->state = MS_REC;
                        continue;
                }
                size_t want = m->state == MS_DIGEST ? AB_SHA256_LEN : AB_MOVESTREAM_HEAD;
                size_t k = want - m->have < n ? want - m->have : n;
                memcpy(m->buf + m->have, p, k);
                m->have += k;
                p += k;
                n -= k;
                if (m->have < want)
                        continue;
                if (m->state == MS_DIGEST) {
                        uint8_t d[AB_SHA256_LEN];
                        ab_sha256_final(&m->hash, d);
                        if (memcmp(d, m->buf, AB_SHA256_LEN) != 0)
                                return -EBADMSG;
                        m->state = MS_DONE;
                        continue;
                }
                int r = take_header(m);
                if (r < 0)
                        return r;
        }
        return m->state == MS_DONE ? 1 : 0;
}
