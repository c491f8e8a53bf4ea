/* multipart.h - multipart/form-data bodies (RFC 7578), as the E2B and
 * OpenSandbox SDKs upload files: one parser for every front. It reads a
 * spooled body in memory (the server spools uploads to a file and maps it)
 * and copies nothing but the part names. Pure: no I/O, safe from any
 * thread; fuzzed by tests/fuzz/fuzz_osb.c. */
#ifndef AB_KIT_MULTIPART_H
#define AB_KIT_MULTIPART_H

#include "base/err.h"

/* The most parts a body may have (a body with more is refused). */
#define KIT_MULTIPART_MAX_PARTS 1024
/* The longest boundary (RFC 2046: 1 to 70 characters). */
#define KIT_MULTIPART_BOUNDARY_MAX 70

typedef struct kit_part {
        char *name;       /* Content-Disposition's name="...", or NULL (owned) */
        char *filename;   /* its filename="...", or NULL (owned) */
        const char *data; /* the part's bytes, inside the body */
        size_t len;
} kit_part;

/* The delimiter ("--" + boundary, a new string) of a multipart/form-data
 * Content-Type (boundary=X or boundary="X"), or NULL when content_type is
 * NULL, names no boundary, or its boundary is empty or longer than
 * KIT_MULTIPART_BOUNDARY_MAX. */
char *kit_multipart_delim(const char *content_type);

/* Splits body[0..len) at delim (from kit_multipart_delim) into *parts (a new
 * array of *n; free with kit_parts_free) up to the closing delimiter; bytes
 * before the first delimiter (the preamble) are skipped. AB_E_INVALID when
 * the body is malformed (no delimiter, a part without its blank line or
 * its end) or has more than max parts (at most KIT_MULTIPART_MAX_PARTS);
 * nothing to free then. (Not AB_E_LIMIT: the fronts answer that as a full
 * disk.) */
int kit_multipart_split(const char *body, size_t len, const char *delim, size_t max,
                        kit_part **parts, size_t *n, ab_err **err) AB_WUR;

/* Frees parts[0..n) and the array (NULL is fine). */
void kit_parts_free(kit_part *parts, size_t n);

#endif
