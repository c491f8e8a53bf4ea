/* reqcheck.h - checks of a request's head made before it is routed (bytes
 * from any client: hostile). Pure functions: no allocation, no I/O; every
 * argument may be NULL. */
#ifndef AB_REQCHECK_H
#define AB_REQCHECK_H

#include <stdbool.h>

/* True when the request target raw (as the client sent it, escapes kept)
 * holds no control character (0x00-0x1f, 0x7f), neither as a byte nor
 * percent-escaped ("%00", "%0a", "%7F"), in its path or its query. A
 * decoder would turn "%00" into a NUL that ends the path early. */
bool ab_req_target_clean(const char *raw);

/* True when the Host header value host ("name[:port]", an IPv6 address in
 * brackets) names this machine's loopback: "localhost" or a name under
 * ".localhost" (RFC 6761: never resolved by DNS), 127.0.0.0/8, [::1] or
 * [::ffff:127.x.y.z]; any case, a trailing dot allowed. */
bool ab_req_host_loopback(const char *host);

/* True when the Host header value host is allowed by entry (a name or an
 * address as allowed_hosts spells it): the names are equal (any case,
 * trailing dot ignored) and, when entry has ":PORT", so are the ports. */
bool ab_req_host_is(const char *host, const char *entry);

/* True when origin (an Origin header: "http[s]://name[:port]") is the
 * origin of a request whose Host header is host: same name (any case) and
 * same port (a missing one is the scheme's default). "null", another
 * scheme or anything malformed is not. */
bool ab_req_origin_same(const char *origin, const char *host);

/* Most characters of the port and of the box id a box's host name holds. */
#define AB_HOST_PORT_MAX 5
#define AB_HOST_BOX_MAX  63

/* True when the Host header value host names a box's port:
 * "PORT-ID.DOMAIN[:N]" (any case, a trailing dot allowed) with domain as
 * ports_domain spells it; a ":N" of host or of domain is not compared (a
 * domain "example.com:8080" matches "3000-ID.example.com:8080"). Fills port
 * (1 to AB_HOST_PORT_MAX digits) and box (1 to AB_HOST_BOX_MAX characters,
 * lowercased), NUL-terminated. */
bool ab_req_host_box(const char *host, const char *domain, char port[AB_HOST_PORT_MAX + 1],
                     char box[AB_HOST_BOX_MAX + 1]);

/* True when the Content-Type ctype is one a browser sends to another site
 * without asking first (a CORS "simple" type: text/plain,
 * application/x-www-form-urlencoded, multipart/form-data; parameters and
 * case ignored). */
bool ab_req_ctype_simple(const char *ctype);

#endif
