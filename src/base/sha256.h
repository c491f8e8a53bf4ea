/* sha256.h - SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104) in plain C, for
 * code that links nothing but libc: agentbox-init's TCP handshake
 * (proto/handshake.h). The host side uses OpenSSL elsewhere; these are for
 * the static init and its peers. No allocation; every call is thread-safe
 * on its own context. */
#ifndef AB_SHA256_H
#define AB_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AB_SHA256_LEN   32
#define AB_SHA256_BLOCK 64

typedef struct ab_sha256_ctx {
        uint32_t h[8];
        uint64_t total; /* bytes hashed so far */
        uint8_t block[AB_SHA256_BLOCK];
        size_t used; /* bytes waiting in block */
} ab_sha256_ctx;

void ab_sha256_init(ab_sha256_ctx *c);
void ab_sha256_update(ab_sha256_ctx *c, const void *data, size_t len);
/* Writes the digest to out and wipes c. */
void ab_sha256_final(ab_sha256_ctx *c, uint8_t out[AB_SHA256_LEN]);
/* The digest of data[0..len) in one call. */
void ab_sha256(const void *data, size_t len, uint8_t out[AB_SHA256_LEN]);

/* HMAC-SHA256 over the concatenation of n parts (parts[i], lens[i]) with key. */
void ab_hmac_sha256(const void *key, size_t key_len, const void *const *parts, const size_t *lens,
                    size_t n, uint8_t out[AB_SHA256_LEN]);

/* True when a[0..n) equals b[0..n); its time depends on n only, never on
 * where the bytes differ (for comparing MACs). */
bool ab_ct_equal(const void *a, const void *b, size_t n);

/* Zeroes n bytes at p in a way the compiler does not remove (secrets). */
void ab_wipe(void *p, size_t n);

#endif
