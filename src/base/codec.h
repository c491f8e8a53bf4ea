/* codec.h - small text codecs of the wire formats the API speaks: hex digits,
 * %XX (URL) decoding and RFC 3339 times. Pure functions, libc only, safe from
 * any thread. */
#ifndef AB_CODEC_H
#define AB_CODEC_H

#include "base/util.h"

/* The value of one hex digit (0-9, a-f, A-F), or -1 for any other char. */
int ab_hexval(char c);

/* Writes the 2n lower-case hex digits of b[0..n) and a NUL to out (which
 * holds 2n + 1 bytes). */
void ab_hex_encode(const void *b, size_t n, char *out) AB_NONNULL(3);

/* URL-decodes s[0..n) into a new NUL-terminated string (the caller frees
 * it): "%XX" with two hex digits becomes that byte, '+' a space; a '%' not
 * followed by two hex digits stays as it is. A decoded NUL byte ends the
 * string as C sees it (the bytes after it are kept but not seen by strcmp). */
char *ab_pct_decode(const char *s, size_t n) AB_NONNULL(1);

/* s with every byte but unreserved ones (RFC 3986: A-Z a-z 0-9 - . _ ~)
 * as "%XX", for a URL's path segment or query value (the caller frees). */
char *ab_pct_encode(const char *s) AB_NONNULL(1);

/* Room for any time ab_time_rfc3339 writes, with its NUL. */
#define AB_TIME_LEN 32

/* Formats ms (unix milliseconds, UTC) as RFC 3339: "2026-11-27T09:00:00Z",
 * or with frac "2026-11-27T09:00:00.123Z". A time gmtime cannot represent
 * gives "". */
void ab_time_rfc3339(int64_t ms, bool frac, char out[AB_TIME_LEN]) AB_NONNULL(3);

/* Parses an RFC 3339 time ("2026-11-27T09:00:00Z", "...00.5+02:00", a
 * fraction of any length, 'z' or an offset required) into unix
 * milliseconds. 0, or -EINVAL for anything else (trailing bytes included). */
int ab_time_parse_rfc3339(const char *s, int64_t *ms) AB_NONNULL(1, 2) AB_WUR;

#endif
