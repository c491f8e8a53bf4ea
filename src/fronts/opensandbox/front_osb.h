/* front_osb.h - the OpenSandbox front (docs/compat-opensandbox.md): the
 * lifecycle API of OpenSandbox's server under /opensandbox/v1 (front_osb.c)
 * and the in-box execd API under /opensandbox/execd/{id} (front_execd.c),
 * as the @alibaba-group/opensandbox SDK calls them. Both are thin adapters
 * over the manager: every check, limit and audit is the manager's. */
#ifndef AB_FRONT_OSB_H
#define AB_FRONT_OSB_H

#include "kit/server.h"

/* The execd port the SDK asks an endpoint for; its endpoint is ours. */
#define OSB_EXECD_PORT 44772
/* The egress sidecar's port (the SDK asks for it at every create). */
#define OSB_EGRESS_PORT 18080

/* Every request under /opensandbox/ (rest: the path after it). */
enum MHD_Result route_osb(ab_req *r, const char *rest);
/* POST /opensandbox/execd/{id}/files/upload: the multipart body is spooled
 * (BODY_UPLOAD), not parsed as JSON. */
enum MHD_Result route_osb_upload(ab_req *r, const char *id);

/* Ends the execd threads (foreground commands, session runs, metrics
 * watches; background commands and sessions live on in their boxes) and
 * waits for them (up to 10 s): call before the manager is freed. */
void execd_shutdown(void);

/* ---- shared by front_osb.c and front_execd.c ---- */

/* Answers OpenSandbox's error shape {"code", "message"}. */
enum MHD_Result osb_error(ab_req *r, unsigned status, const char *code, const char *fmt, ...)
    AB_PRINTF(4, 5);
/* The same for e (freed): the status fitting its code; the code is
 * prefix + the agentbox code in capitals (e.g. "SANDBOX::NOT_FOUND"). */
enum MHD_Result osb_err(ab_req *r, ab_err *e, const char *prefix);
/* Every value of a query parameter given once or more (?path=a&path=b): a
 * new array of strings. */
json_t *osb_query_all(ab_req *r, const char *key);

/* Wall clock, unix milliseconds. */
int64_t osb_wall_ms(void);

/* execd of box id (rest: the segments after the id, from r->seg[first]). */
enum MHD_Result execd_route(ab_req *r, const char *id, size_t first);

/* ---- the parsers of request fields, apart for tests/fuzz/fuzz_osb.c ---- */

/* Kubernetes quantities: cpu ("500m", "2") and bytes ("512Mi", "1G", "1048576")
 * as MiB rounded up. 0, or -1 for anything else. */
int osb_parse_cpu(const char *s, double *out);
int osb_parse_mib(const char *s, uint64_t *out);
/* networkPolicy -> agentbox's network object (new reference; NULL when
 * absent); volumes -> agentbox's volumes and mounts (new references or
 * NULL). -1 with AB_E_INVALID or AB_E_UNSUPPORTED. */
int osb_parse_network(json_t *np, json_t **out, ab_err **err);
int osb_parse_volumes(json_t *vols, json_t **volumes, json_t **mounts, ab_err **err);
/* A Range header "bytes=A-B" / "bytes=A-" of a size-byte file. 0 or -1. */
int osb_parse_range(const char *h, uint64_t size, uint64_t *off, uint64_t *len);

#endif
