/* addrcheck.h - the internal ranges no egress path may reach: the code
 * runner's httpRequest (runners/fetch.c), the allowlist proxy (net/proxy.c)
 * and the registry client's connects (image/registry.c) all ask here (so it
 * lives in base, below all three). Internal: loopback, private (RFC 1918, IPv6
 * unique local), link-local, cloud metadata, carrier-grade NAT, multicast,
 * unspecified, broadcast, benchmarking, IETF assignments, reserved, and
 * IPv6 forms that embed one of those (v4-mapped, -compatible, NAT64, 6to4,
 * Teredo). Documentation ranges are ordinary outside addresses.
 *
 * Besides the fixed ranges, every address this host holds is refused: the
 * addresses of all its interfaces (a public one included), read with
 * getifaddrs and read again whenever the kernel reports an address change
 * (rtnetlink) and at least every few seconds, and the server's listen
 * address (ab_addr_note_listen). All functions here are thread-safe. */
#ifndef AB_ADDRCHECK_H
#define AB_ADDRCHECK_H

#include <sys/socket.h>

/* Why sa may not be reached ("loopback", "private", "this host's address",
 * ...), or NULL when it may. The answer is a static string. */
const char *ab_addr_reason(const struct sockaddr *sa);
/* The fixed ranges alone (no look at this host's interfaces): why sa is
 * internal, or NULL. Pure; for callers that classify rather than connect. */
const char *ab_addr_fixed_reason(const struct sockaddr *sa);
/* Records an address the server listens on (the port does not matter), so
 * that ab_addr_reason refuses it even if no interface shows it. Addresses in
 * the fixed ranges and the unspecified address are ignored. Returns 0, or
 * -ENOSPC when too many were noted already. */
int ab_addr_note_listen(const struct sockaddr *sa);
/* Names refused before any lookup (metadata services, localhost names), or NULL. */
const char *ab_name_reason(const char *host);

#endif
