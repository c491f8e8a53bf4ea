/* e2b.h - the E2B front (docs/compat-e2b.md) as the server sees it: its
 * route table, registered by `agentbox serve`. */
#ifndef AB_E2B_H
#define AB_E2B_H

#include "kit/server.h"

/* The E2B control plane (/e2b/sandboxes...) and envd (/e2b/envd/...), with
 * the per-box access token as its AUTH_OWN and the end of its processes,
 * PTYs and watches at the server's stop. */
extern const ab_route_table ab_e2b_routes;

#endif
