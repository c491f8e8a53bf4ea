/* forward.h - in a fleet (docs/fleet.md), a request about a box that
 * another node owns is passed on to that node (kit/forward.c) and its answer
 * streamed back: JSON, event streams, uploads and downloads, upgraded
 * connections (terminals, ports). The node that received it authenticates
 * the caller from the head first, as for every request, then forwards with
 * the fleet's secret and the caller's identity (app, key id, admin) in
 * headers the owner trusts only with that secret (kit_fleet_identity); a
 * forwarded request is never forwarded again. */
#ifndef AB_KIT_FORWARD_H
#define AB_KIT_FORWARD_H

#include "kit/server.h"

/* The headers of a node-to-node request. Clients' own copies are never
 * passed on, and never trusted without the secret. */
#define FLEET_HDR_SECRET "X-Agentbox-Fleet-Secret"
#define FLEET_HDR_FROM   "X-Agentbox-Fleet-From"  /* the forwarding node, for logs */
#define FLEET_HDR_APP    "X-Agentbox-Fleet-App"   /* the caller's app (an API key's) */
#define FLEET_HDR_KEY    "X-Agentbox-Fleet-Key"   /* the caller's stored API key's id */
#define FLEET_HDR_ADMIN  "X-Agentbox-Fleet-Admin" /* "1": the caller is the admin */

/* The relay's ops for a forwarded request (body, answer, free). */
extern const ab_proxy_ops kit_forward_ops;

/* The box r is about from its head: the table's box_of hook, else the
 * "*" after a "sandboxes" segment of its route's pattern, else the box an
 * E2B access token opened (r->front_box). NULL when none. */
const char *kit_request_box(ab_req *r);

/* True when r may be forwarded (this server is a fleet node, r was not
 * forwarded to it, and its route names a box): its first call then runs on
 * a worker. */
bool kit_forward_may(ab_req *r);

/* After r's caller is authenticated: when box (NULL: kit_request_box) is
 * owned by another node, either answers 503 (the owner is down: *ret, -1)
 * or connects to the owner and sends it r's head with the caller's
 * identity (1: r->proxy is the relay, its body and answer follow). 0 when
 * r stays here (no fleet, a local box, an unknown one: the route answers).
 * A worker only (reads the store, connects). */
int kit_forward(ab_req *r, const char *box, enum MHD_Result *ret);
/* The same for a request to a box's port (box: its id): with a credential
 * the caller is authenticated here first and forwarded as themselves;
 * without one it goes as no one (the owner lets it in when the port is
 * public). *done as kit_forward's -1. */
int kit_forward_port(ab_req *r, const char *box, enum MHD_Result *ret);

/* True when rec's box runs on this server: no fleet, a box of no node, or
 * this node's. */
bool kit_box_local(const ab_server *s, const ab_box_rec *rec);

/* Answers r with what fleet node `node` answers to r's method, target and
 * buffered body (r->body), sent as r's caller: for a request whose box
 * turned out to be another node's only after its body was read (an acquire
 * that lost the race for its keys to another node). The answer is read
 * whole (JSON: at most 16 MiB). A worker only. */
enum MHD_Result kit_forward_buffered(ab_req *r, const char *node);

/* A call to fleet node `node` as r's caller (the fleet's identity
 * headers): method and target (path and query) with a JSON body of len
 * bytes; its answer's status, body (read whole, de-chunked, at most 16 MiB)
 * into answer and Content-Type (*content_type, or NULL; the caller frees;
 * content_type may be NULL). AB_E_UNAVAILABLE when the node is down or
 * cannot be reached. A worker only. */
int kit_fleet_call(ab_req *r, const char *node, const char *method, const char *target,
                   const char *body, size_t len, unsigned *status, ab_buf *answer,
                   char **content_type, ab_err **err);

/* Placement of a new box (docs/fleet.md): in a fleet whose placement is
 * spread, or on a node that drains, the node a box that does not exist yet
 * goes to (ab_fleet_place, for mem_bytes and disk_bytes); r, a create with
 * its body read, is forwarded there whole. 1 when answered (forwarded, or
 * 503 when no node has room: *ret); 0 when the box is made here. A
 * forwarded request is always made here. A worker only. */
int kit_place(ab_req *r, uint64_t mem_bytes, uint64_t disk_bytes, enum MHD_Result *ret);

/* Connects to a node's url (http://HOST:PORT) within a few seconds, with
 * TCP keepalive: the socket (non-blocking, close-on-exec), or -errno. */
int kit_fleet_connect(const char *url);

/* On a fleet node, takes the caller of a node-to-node request from its
 * fleet headers (r->forwarded, r->scope, the key's id and quotas). 0 when r
 * is not one (no secret header); 1 when it is and *ok says whether the
 * caller may call a route of level need (else answered: 401 for a wrong
 * secret or no caller, 403 for an app on an admin route). */
int kit_fleet_identity(ab_req *r, auth_level need, bool *ok, enum MHD_Result *ret);

#endif
