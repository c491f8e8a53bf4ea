/* addrcheck.h - the internal ranges no egress path may reach: the code
 * runner's httpRequest (runners/fetch.c) and the allowlist proxy
 * (net/proxy.c) both ask here. Internal: loopback, private (RFC 1918, IPv6
 * unique local), link-local, cloud metadata, carrier-grade NAT, multicast,
 * unspecified, broadcast, benchmarking, IETF assignments, reserved, and
 * IPv6 forms that embed one of those (v4-mapped, -compatible, NAT64, 6to4,
 * Teredo). Documentation ranges are ordinary outside addresses. */
#ifndef AB_ADDRCHECK_H
#define AB_ADDRCHECK_H

#include <sys/socket.h>

/* Why sa may not be reached ("loopback", "private", ...), or NULL when it may. */
const char *ab_addr_reason(const struct sockaddr *sa);
/* Names refused before any lookup (metadata services, localhost names), or NULL. */
const char *ab_name_reason(const char *host);

#endif
