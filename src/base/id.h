/* id.h - box ids. */
#ifndef AB_ID_H
#define AB_ID_H

#include "base/err.h"

/* True when s matches [a-z0-9][a-z0-9_-]{0,62}. */
bool ab_id_valid(const char *s);

/* Validates with a message that says what a valid id looks like. */
int ab_id_check(const char *s, ab_err **err);

/* Fills b[0..n) with random bytes from the kernel (getrandom). Aborts when
 * the kernel has none to give, as the allocators do on OOM: an id or a
 * secret must never be predictable. */
void ab_random_bytes(void *b, size_t n) AB_NONNULL(1);

/* A random id: prefix, then 2n lower-case hex digits (n <= 64 random
 * bytes), then a NUL, written to out (cap bytes; aborts when they do not
 * fit: a caller's sizing bug). */
void ab_random_hex(char *out, size_t cap, const char *prefix, size_t n) AB_NONNULL(1, 3);

/* A fresh random id: 16 lower-case hex characters. out must hold 17 bytes. */
void ab_id_random(char out[17]);

#endif
