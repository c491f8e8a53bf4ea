/* proxy.h - the egress proxy of allowlist boxes (issue 6). Each box in
 * allowlist mode has a TCP listener on 127.0.0.1:3128 made inside its own
 * network namespace (netns.h) and handed to this proxy; the box has no other
 * way out. The proxy speaks HTTP CONNECT, plain HTTP (absolute-form request
 * lines) and SOCKS5 (CONNECT only, no authentication). It decides by the
 * box's rules (policy.h) on the name the box asked for, before any DNS
 * lookup (so an unlisted name is never resolved: no DNS exfiltration), then
 * resolves the name itself (an extra hosts file first, then the system
 * resolver), refuses any address in an internal range whatever the name
 * (loopback, private, link-local, metadata: addrcheck.h), and connects to
 * exactly the address it checked. Denials answer 403 (SOCKS5: "not allowed
 * by ruleset") and are emitted as "network.denied" events with the box, host
 * and port. Thread-safe. */
#ifndef AB_PROXY_H
#define AB_PROXY_H

#include "base/events.h"
#include "base/metrics.h"
#include "net/policy.h"
#include <stdbool.h>
#include <sys/types.h>

#define AB_PROXY_PORT 3128
/* Tunnels of one app at once, by default: a quarter of the proxy's 4096. */
#define AB_PROXY_MAX_CONNS_PER_APP 1024

typedef struct ab_proxy ab_proxy;

typedef struct ab_proxy_opts {
        ab_events *events;       /* borrowed; may be NULL */
        ab_metrics *metrics;     /* borrowed; may be NULL */
        const char *hosts_file;  /* /etc/hosts-format names looked up before DNS; NULL = none */
        int max_conns_per_box;   /* 0 = 256; more wait in the listener's backlog */
        long connect_timeout_ms; /* 0 = 10000 */
        long idle_timeout_ms;    /* a tunnel quiet this long is closed; 0 = 600000 */
        /* The tunnels of all the boxes of one app (boxes of no app count as
         * one app): 0 = AB_PROXY_MAX_CONNS_PER_APP. More wait in their
         * boxes' backlogs, so that one app cannot take every tunnel (4096 at
         * most in all) from the others. */
        int max_conns_per_app;
} ab_proxy_opts;

int ab_proxy_new(const ab_proxy_opts *o, ab_proxy **out, ab_err **err);
/* Closes every listener and connection and frees. */
void ab_proxy_free(ab_proxy *p);

/* Serves box `box` (of app `app`, may be NULL) on listener lfd (taken over)
 * with policy pol, for the box incarnation whose init is pid. Replaces what
 * the box had (its old listener and connections are closed). */
void ab_proxy_attach(ab_proxy *p, const char *box, const char *app, pid_t pid, int lfd,
                     const ab_netpol *pol);
/* Replaces the box's rules; when they changed, its open connections are cut
 * (new connections are decided by the new rules). False when not attached. */
bool ab_proxy_update(ab_proxy *p, const char *box, const ab_netpol *pol);
/* The pid the box's listener was attached for, 0 when it has none. */
pid_t ab_proxy_pid(ab_proxy *p, const char *box);
/* Closes the box's listener and connections. */
void ab_proxy_detach(ab_proxy *p, const char *box);
/* Number of boxes served and of open connections. */
void ab_proxy_counts(ab_proxy *p, size_t *boxes, size_t *conns);

/* The request head parser (exported for tests and the fuzz target): reads
 * "METHOD TARGET HTTP/1.x\r\n" + headers from buf[0..len). For CONNECT the
 * target is host:port; otherwise it must be an absolute http:// URL. Fills
 * host (normalised), port and, for plain HTTP, *head: the request rewritten
 * for the origin server (origin-form target, Host set to the target,
 * Proxy-* / Connection / Keep-Alive headers dropped, "Connection: close"); a
 * head with Content-Length and Transfer-Encoding, or either twice, is 400.
 * Returns 0, or an HTTP status to answer (400, 405, 501) with *why set. */
typedef struct ab_proxy_req {
        bool connect;
        char method[16];
        char host[256];
        int port;
        char *head; /* plain HTTP only (owned; free) */
        size_t head_len;
} ab_proxy_req;
int ab_proxy_parse(const char *buf, size_t len, ab_proxy_req *r, const char **why);

#endif
