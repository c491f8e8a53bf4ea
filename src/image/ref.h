/* ref.h - image references as Docker spells them.
 *
 *   busybox                      -> docker.io/library/busybox:latest
 *   me/tool:1                    -> docker.io/me/tool:1
 *   localhost:5000/a/b           -> localhost:5000/a/b:latest
 *   ghcr.io/o/r@sha256:<64 hex>  -> digest only (no tag)
 *   r:1@sha256:<64 hex>          -> both: the digest decides what is pulled
 *
 * The first component is a registry domain when it holds a '.' or a ':' or is
 * "localhost"; else the domain is docker.io (as is "index.docker.io"), and a
 * one-component path on docker.io gets "library/" (so "localhost:5000" alone
 * is, as for Docker, docker.io/library/localhost tagged 5000). Path components are [a-z0-9]+ joined
 * by '.', '_', '__' or '-'+; a tag is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}; a digest is "sha256:" + 64
 * lower-case hex. Anything else is AB_E_INVALID with a message naming the
 * part at fault. Host-side; libc only. */
#ifndef AB_IMAGE_REF_H
#define AB_IMAGE_REF_H

#include "base/err.h"

#include <stdbool.h>

#define AB_IMAGE_REF_MAX 512 /* longest reference accepted */

typedef struct ab_image_ref {
        char *domain; /* "docker.io", "localhost:5000", "ghcr.io" */
        char *path;   /* "library/busybox" */
        char *tag;    /* "latest" by default; NULL only when a digest was given alone */
        char *digest; /* "sha256:<hex>" or NULL */
} ab_image_ref;

/* Parses s into *out (cleared first). 0, or -1 with AB_E_INVALID. */
int ab_image_ref_parse(const char *s, ab_image_ref *out, ab_err **err);

/* The canonical name: "domain/path:tag", "domain/path@digest" or
 * "domain/path:tag@digest". Caller frees. */
char *ab_image_ref_str(const ab_image_ref *r);

/* The reference to ask the registry for: the digest when there is one, else the tag. */
const char *ab_image_ref_reference(const ab_image_ref *r);

/* Where the registry API is: "registry-1.docker.io" for docker.io, else the domain. */
const char *ab_image_ref_api_host(const ab_image_ref *r);

/* True for a loopback registry (localhost, 127.0.0.0/8, [::1]), with any port. */
bool ab_image_ref_is_loopback(const char *domain);

/* True for "sha256:" + 64 lower-case hex. */
bool ab_digest_valid(const char *digest);

void ab_image_ref_clear(ab_image_ref *r);

#endif
