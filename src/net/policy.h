/* policy.h - a box's network policy (issue 6, seed 001): the mode and the
 * allow/deny host rules the egress proxy decides by. Pure data and matching;
 * no I/O, so it is cheap to test and to fuzz.
 *
 * Modes: "none" (loopback only, the default), "allowlist" (seed 001 calls it
 * "restricted"; egress only through the server's proxy, only to hosts the
 * rules allow), "full" (a veth pair with NAT, never to the host itself or
 * the metadata address).
 *
 * A rule is "*" (every host), "*.example.com" (subdomains of example.com,
 * not example.com itself), "example.com" (exactly that name), or an IPv4
 * address; each may end in ":PORT" to match that port only. Names compare
 * case-insensitively and ignore a trailing dot. Decision: no rules at all ->
 * deny; a deny rule matches -> deny; an allow rule matches -> allow; else deny. */
#ifndef AB_POLICY_H
#define AB_POLICY_H

#include "base/err.h"
#include <jansson.h>
#include <stdbool.h>

typedef enum { AB_NET_NONE = 0, AB_NET_ALLOWLIST, AB_NET_FULL } ab_net_mode;

#define AB_NET_MAX_RULES 256

typedef struct ab_net_rule {
        char *host; /* "*", "*.example.com", "example.com", "203.0.113.5"; lower case, no trailing
                       dot */
        int port;   /* 0 = any */
} ab_net_rule;

typedef struct ab_netpol {
        ab_net_mode mode;
        ab_net_rule *allow, *deny;
        size_t n_allow, n_deny;
} ab_netpol;

/* Parses a "network" object: {"mode": "none"|"allowlist"|"restricted"|"full",
 * "allow": [...], "deny": [...]} (seed 001's "allowed_domains" and
 * "blocked_domains" are read as allow and deny). NULL or JSON null is mode
 * none. AB_E_INVALID naming the field for anything malformed. */
int ab_netpol_parse(json_t *network, ab_netpol *out, ab_err **err);
/* The canonical JSON form: {"mode": ..., "allow": [...], "deny": [...]}. */
json_t *ab_netpol_json(const ab_netpol *p);
void ab_netpol_clear(ab_netpol *p);
const char *ab_net_mode_name(ab_net_mode m);
bool ab_netpol_equal(const ab_netpol *a, const ab_netpol *b);
void ab_netpol_copy(const ab_netpol *src, ab_netpol *dst);

/* Normalises a host as the proxy received it (lower case, no trailing dot,
 * no IPv6 brackets) into out. False when it is not a plausible host name or
 * address. */
bool ab_net_host_normalize(const char *host, char *out, size_t len);

/* The decision for a normalised host and port. When denied, why (if not
 * NULL) gets a short reason: "no rules", "deny rule \"*.x.com\"", "no allow
 * rule matches". */
bool ab_netpol_allows(const ab_netpol *p, const char *host, int port, char *why, size_t why_len);

#endif
