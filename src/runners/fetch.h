/* fetch.h - the only way a code-runner snippet reaches the network
 * (SystemHelper.httpRequest / system_helper.http_request, seed 003): the
 * server makes the request itself with libcurl. It resolves the name,
 * refuses loopback, private, link-local, metadata, CGNAT, multicast,
 * unspecified and other internal ranges (IPv4 and IPv6, also v4-mapped),
 * then connects to exactly the address it checked (no DNS-rebinding window).
 * http and https only; redirects are followed by hand, each hop checked
 * again. Thread-safe. */
#ifndef AB_FETCH_H
#define AB_FETCH_H

#include "base/err.h"
#include <jansson.h>
#include <netdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ab_fetch_req {
        const char *url;
        const char *method; /* NULL = GET */
        json_t *headers;    /* object of strings, or NULL (borrowed) */
        const char *body;   /* or NULL */
        size_t body_len;
        long timeout_ms; /* 0 = max_timeout_ms */
        /* limits (0 = defaults): request body 5 MiB, response 10 MiB, timeout 10 s, redirects 5 */
        size_t max_request;
        size_t max_response;
        long max_timeout_ms;
        int max_redirects;
        /* Tests only: replaces getaddrinfo (returns 0 and fills *res like it). */
        int (*resolve)(const char *host, const char *port, struct addrinfo **res);
} ab_fetch_req;

typedef struct ab_fetch_res {
        long status;
        char *status_text; /* e.g. "OK" */
        json_t *headers;   /* object: lower-case name -> value (owned) */
        char *body;        /* NUL-terminated (owned) */
        size_t body_len;
} ab_fetch_res;

void ab_fetch_res_clear(ab_fetch_res *r);

/* Makes the request. AB_E_PERMISSION when the address is internal (the message
 * names the host and why), AB_E_INVALID for a bad URL or scheme, AB_E_LIMIT when
 * a size limit is exceeded, AB_E_TIMEOUT, AB_E_UNAVAILABLE for network errors. */
int ab_fetch(const ab_fetch_req *req, ab_fetch_res *out, ab_err **err);

/* True when the address may be reached (not an internal range). */
bool ab_fetch_addr_allowed(const struct sockaddr *sa);

#endif
