/* net.h - a box's network, as its policy (policy.h) says (issue 6):
 *
 *   none       loopback only: the box's own network namespace, nothing else.
 *   allowlist  still no route out; a TCP listener on 127.0.0.1:3128 inside
 *              the box's namespace belongs to the server's egress proxy
 *              (proxy.h), and the box's commands get HTTP_PROXY, HTTPS_PROXY,
 *              ALL_PROXY (and lower-case forms) pointing at it, NO_PROXY for
 *              loopback. Traffic that ignores the proxy has nowhere to go.
 *   full       a veth pair ("abnetN" on the host, "eth0" in the box, a /30 out
 *              of the configured subnet) with NAT out of the host; iptables
 *              rules drop anything from the boxes to the host itself (INPUT),
 *              to loopback, link-local and metadata addresses, and to other
 *              boxes; the host side has no IPv6 and strict reverse-path
 *              filtering (no spoofing).
 *
 * Everything is applied to a running box from the host, through its init's
 * network namespace, so a policy can change while the box runs. The kernel
 * holds full mode's state; the proxy listener lives in this process and is
 * made again for running allowlist boxes when the server restarts (the
 * manager re-applies policies when it opens). Thread-safe. */
#ifndef AB_NET_H
#define AB_NET_H

#include "base/err.h"
#include "base/events.h"
#include "base/metrics.h"
#include "net/policy.h"
#include <stdbool.h>
#include <sys/types.h>

typedef struct ab_net ab_net;

typedef struct ab_net_opts {
        ab_events *events;      /* borrowed; "network.denied" events; may be NULL */
        ab_metrics *metrics;    /* borrowed; may be NULL */
        const char *hosts_file; /* names the proxy resolves before DNS; NULL = none */
        const char *subnet;     /* full mode's IPv4 range; NULL = "10.88.0.0/16" */
        bool full_disabled;     /* refuse full mode (config network.full: false) */
        /* egress proxy tunnels of one app at once; 0 = the proxy's default */
        int64_t proxy_max_per_app;
} ab_net_opts;

int ab_net_new(const ab_net_opts *o, ab_net **out, ab_err **err);
/* Closes the proxy's listeners and connections and frees. Full-mode boxes
 * keep their veth (it is the kernel's) and iptables rules stay. */
void ab_net_free(ab_net *n);

/* AB_E_UNSUPPORTED when this server cannot give a box policy p (full mode
 * disabled, or no iptables on the host). */
int ab_net_check(ab_net *n, const ab_netpol *p, ab_err **err);

/* Makes the network of the running box `box` (app `app`, may be NULL) whose
 * init has host pid init_pid match p. Cheap when nothing changes: it trusts
 * what this process did to the box, unless `thorough` (after a restart,
 * when nothing is known) makes it look (a veth a crash left behind). */
int ab_net_apply(ab_net *n, const char *box, const char *app, pid_t init_pid, const ab_netpol *p,
                 bool thorough, ab_err **err);
/* True when this process gave the box anything (a proxy listener, a veth),
 * so a policy of none must be applied rather than skipped. */
bool ab_net_active(ab_net *n, const char *box);
/* The box stopped or is gone: its proxy listener and connections close. */
void ab_net_release(ab_net *n, const char *box);

/* Environment the box's commands get under policy p: proxy variables for
 * allowlist, nothing otherwise. NULL-terminated strv (free it). */
char **ab_net_env(const ab_netpol *p);

#endif
