/* opensandbox.h - the OpenSandbox front (docs/compat-opensandbox.md) as the
 * server sees it: its route table, registered by `agentbox serve`. */
#ifndef AB_OPENSANDBOX_H
#define AB_OPENSANDBOX_H

#include "kit/server.h"

/* The OpenSandbox lifecycle, egress and execd routes (/opensandbox/...),
 * with the SDK's OPEN-SANDBOX-API-KEY header taken as a credential. */
extern const ab_route_table ab_osb_routes;

#endif
