/* registry.h - pulling from an OCI distribution (registry v2) API over
 * libcurl: manifests and blobs of one repository.
 *
 * HTTPS by default; plain HTTP only for loopback registries and those listed
 * in opts.insecure, as Docker does. Auth as the registry asks in its 401
 * answer: "Bearer realm=...,service=...,scope=..." -> a token from the realm
 * (anonymous, or with the credentials configured for this registry as HTTP
 * basic auth), cached for the session and fetched again when it is refused;
 * "Basic" -> the credentials directly. Redirects (blobs are often served from
 * a storage host) are followed, up to 5, never from HTTPS down to HTTP.
 *
 * Errors: an unknown repository, tag or digest is AB_E_NOT_FOUND (404, or the
 * registry's MANIFEST_UNKNOWN / NAME_UNKNOWN / BLOB_UNKNOWN); credentials
 * refused, missing or still answered 401/403 AB_E_PERMISSION, and so is an
 * address refused by opts.check_addrs; a registry that
 * cannot be reached, times out, answers 5xx or answers something that is not
 * what the protocol says (bad JSON, wrong digest, a token realm that is not
 * https for an https registry) AB_E_UNAVAILABLE; a body over its bound
 * AB_E_LIMIT; a malformed reference or digest argument AB_E_INVALID. Every
 * message names the registry and the reference; none holds a credential or
 * a token. Thread-safety: one ab_registry per thread (curl_global_init is
 * done once, on the first open). */
#ifndef AB_IMAGE_REGISTRY_H
#define AB_IMAGE_REGISTRY_H

#include "base/buf.h"
#include "base/err.h"
#include "image/ref.h"

#include <stdint.h>

typedef struct ab_registry_cred {
        const char *registry; /* domain as in a reference: "docker.io", "localhost:5000" */
        const char *username;
        const char *password; /* or a token */
} ab_registry_cred;

typedef struct ab_registry_opts {
        const char *const
            *insecure; /* NULL-terminated domains allowed over plain HTTP; may be NULL */
        const ab_registry_cred *creds;
        size_t n_creds;
        long connect_timeout_s; /* 0 = 10 */
        long stall_timeout_s;   /* a transfer slower than 1 byte/s this long fails; 0 = 60 */
        /* Every address connected to (the registry, each redirect, the token
         * realm) is checked as the egress proxy checks it (base/addrcheck.h)
         * when the socket is opened, so a name cannot resolve one way for the
         * check and another for the connect; a refused one fails the request
         * with AB_E_PERMISSION. For pulls an app asked for. */
        bool check_addrs;
        bool allow_loopback; /* with check_addrs: loopback addresses pass (development) */
} ab_registry_opts;

typedef struct ab_registry ab_registry;

/* A session for ref's repository (nothing is sent yet). opts is copied. */
int ab_registry_open(const ab_registry_opts *opts, const ab_image_ref *ref, ab_registry **out,
                     ab_err **err);
void ab_registry_free(ab_registry *r);

/* GETs the manifest for reference (a tag or a digest), Accepting the four
 * types of manifest.h. On success body (freed first) holds the document, a
 * JSON object of at most AB_MANIFEST_MAX_BYTES, *media_type its Content-Type
 * less parameters (or NULL) and *digest the sha256 of the bytes; when
 * reference is a digest, or the registry sent Docker-Content-Digest, it must
 * match (else AB_E_UNAVAILABLE). Caller frees the strings and body. */
int ab_registry_get_manifest(ab_registry *r, const char *reference, ab_buf *body, char **media_type,
                             char **digest, ab_err **err);

/* Called as a blob arrives: bytes so far, and the total when known (else 0). */
typedef void (*ab_registry_progress_fn)(void *ud, uint64_t done, uint64_t total);

/* GETs the blob `digest` and writes it to fd (from its current offset). It
 * returns 0 only when the bytes' sha256 equals digest; more than max_bytes
 * (0 = no bound) fails with AB_E_LIMIT, a failed write AB_E_STORAGE (ENOSPC,
 * EDQUOT) or AB_E_INTERNAL. On any failure what was written must not be used.
 * fn may be NULL; it runs in the calling thread. */
int ab_registry_get_blob(ab_registry *r, const char *digest, int fd, uint64_t max_bytes,
                         ab_registry_progress_fn fn, void *ud, ab_err **err);

#endif
