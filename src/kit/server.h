/* server.h - the HTTP service as agentbox's fronts use it (src/kit): the
 * server (ab_server), the request context (ab_req), and the route tables
 * REST and each front register (ab_route_table). What route modules use on
 * a request is in the headers included at the end: the caller and auth
 * (kit/auth.h), reading it (kit/request.h), answering it (kit/resp.h).
 *
 * The transport below is http/server.h: one epoll thread for every
 * connection, which never blocks; route handlers run on a bounded pool of
 * worker threads while their connection is suspended (http/workers.h), so
 * they may block (the manager, the store, a box). A handler answers with the
 * resp_* helpers as usual. Streamed responses park their connection while
 * they have nothing to send (http/conn.h), so an idle stream costs no
 * thread. A content reader must never block; an upgrade callback
 * (WebSocket: the daemon has MHD_ALLOW_UPGRADE) runs on the polling thread
 * too, so it hands the socket to a thread of its own and returns at once.
 * Long-lived streams count themselves with req_stream_slot. */
#ifndef AB_SERVER_H
#define AB_SERVER_H

#include "http/conn.h"
#include "http/server.h"
#include "config/config.h"
#include "core/manager.h"
#include "tools/tools.h"

#include "base/buf.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>

/* Route tables a server takes (ab_server_add_routes). */
#define AB_SERVER_MAX_TABLES 8

struct ab_route_table;
struct ab_proxy_ops;

typedef struct ab_server {
        const ab_config *cfg;
        ab_manager *mgr;
        ab_store *store;
        ab_events *events;
        ab_metrics *metrics;
        ab_backend *backend;
        char *tmp_dir;             /* DATA/tmp: uploads are spooled here */
        _Atomic uint64_t tmp_used; /* bytes its spooled uploads may hold now (cfg->tmp_max) */
        int64_t started_ms;
        uint64_t started_ns;
        atomic_int sse_subscribers;
        struct ab_runners *runners; /* the code runner (seed 003), or NULL */
        char *sandbox_token;    /* SANDBOX_TOKEN: bearer token of the /sandbox routes, or NULL */
        ab_image_store *images; /* the image store (routes_images.c), or NULL */
        const struct ab_route_table *tables[AB_SERVER_MAX_TABLES]; /* ab_server_add_routes */
        size_t n_tables;
        const struct ab_proxy_ops *proxy; /* the tables' proxy, or NULL */
        struct ab_fleet *fleet;           /* this node of a fleet (docs/fleet.md), or NULL */
        ab_http http; /* the HTTP server: daemon, connections, workers, bound port */
} ab_server;

/* Starts listening on cfg->listen, with the tables added so far. Errors:
 * http/server.h's ab_http_start. */
int ab_server_start(ab_server *s, ab_err **err);
/* For the HTTP fuzz target (tests/fuzz/fuzz_http.c): the same request
 * handling with no listening socket and no threads of its own; the caller
 * hands it connections with MHD_add_connection(s->http.mhd, ...) and drives
 * it with MHD_run(s->http.mhd). Stop it with ab_server_stop. */
int ab_server_start_external(ab_server *s, ab_err **err);
/* Stops accepting, ends event streams and the tables' relays (quiesce),
 * waits (up to a few seconds) for requests in progress, then ends the
 * tables' own threads (shutdown) and the daemon. After it the manager may be
 * freed. */
void ab_server_stop(ab_server *s);
/* Appends the HTTP gauges and counters (connections, streams, requests in
 * flight, closed at the head deadline, refused by a cap) as Prometheus text. */
void ab_server_counts(ab_server *s, ab_buf *b);

/* BODY_PROXY: passed on to a box's port as it arrives (routes_ports.c). */
typedef enum { BODY_NONE, BODY_JSON, BODY_UPLOAD, BODY_PROXY } body_kind;

typedef struct ab_proxy ab_proxy;

typedef struct ab_req {
        ab_server *srv;
        struct MHD_Connection *conn;
        const char *method;
        char *path;   /* URL path without the leading '/', decoded by MHD */
        char *segbuf; /* a copy of path cut into segments */
        char **seg;   /* path segments (into segbuf) */
        size_t n_seg;
        const struct ab_route *route;
        const struct ab_route_table *table; /* route's table (NULL for the proxy) */
        const char *scope; /* NULL = admin; else the API key's app_id (owned by scope_buf) */
        char *scope_buf;
        body_kind body_kind;
        char *body;
        size_t body_len, body_cap;
        bool body_too_large;
        int upload_fd;
        uint64_t upload_len;
        bool upload_failed;
        uint64_t tmp_held;    /* bytes of srv->tmp_used this request holds */
        bool tmp_full;        /* the spool's global cap refused the upload */
        ab_use *deferred_use; /* ended once the response is sent (its store writes then
                               * cost the client nothing) */
        /* An exec's use whose ending (the activity, audit row and event it
         * records) the worker does while the answer goes out; the
         * connection's next request is read only after it (on_completed
         * waits), so whoever asks next still sees the records. Set by a
         * handler that runs on a worker; taken by the worker. */
        ab_use *ending_use;
        struct use_ending *ending; /* server.c's: the worker's ending in progress */
        int status;                /* the status answered, for logs */
        uint64_t t0;
        int phase;                 /* server.c's life cycle */
        bool on_worker;            /* a worker runs the handler: answers wait in resp */
        struct MHD_Response *resp; /* the answer made on a worker */
        unsigned resp_status;
        enum MHD_Result worker_ret;
        /* The API key from the store that authenticated the request (quotas):
         * its id and own quotas; the manager sees them through caller. */
        char *key_id;
        ab_quota key_quotas;
        ab_caller caller;
        ab_proxy *proxy;                  /* a relayed request (kit/relay.h): to a box's port
                                           * (routes_ports.c) or to a box's fleet node (kit/forward.c) */
        const struct ab_proxy_ops *pxops; /* how proxy's body and answer go */
        bool forwarded;                   /* from another fleet node: never forwarded again */
        char *front_box;                  /* owned, or NULL: the box an E2B access token opened */
        char *host_box; /* owned, or NULL: the box a table's host name named (host_port) */
} ab_req;

/* ---- routes: each user of the server (REST, a front) registers its table ---- */

/* Who may call a route, decided from the request's head before any body is
 * read: anyone; a user (admin token or API key); the admin; or as the
 * route's table says (its `authenticate` hook: E2B's per-box access token,
 * the code runner's token); or only another node of the fleet (the fleet's
 * secret: no token or key, the admin's included, opens these). */
typedef enum { AUTH_ANY, AUTH_USER, AUTH_ADMIN, AUTH_OWN, AUTH_FLEET } auth_level;

/* A route handler. `id` is the {id} path segment (the "*" of the pattern;
 * for "**" the rest of the path) or NULL. Runs on a worker. */
typedef enum MHD_Result (*route_fn)(ab_req *r, const char *id);

typedef struct ab_route {
        const char *method;
        const char *pattern; /* segments separated by '/': "*" = the id, "**" = the rest */
        auth_level auth;
        body_kind body; /* BODY_NONE, BODY_JSON or BODY_UPLOAD */
        route_fn fn;
} ab_route;

/* The relay of requests to a box's port (REST's routes_ports.c): claimed
 * before routing, with any method; the body passed on as it comes. Each hook
 * runs where ports_* in rest/rest.h says. */
typedef struct ab_proxy_ops {
        bool (*match)(ab_req *r);      /* MHD's thread: claims r (sets r->proxy) */
        bool (*by_host)(ab_req *r);    /* r's Host names a box's port */
        const char *(*box)(ab_req *r); /* the box of a claimed r (fleet forwarding) */
        enum MHD_Result (*open)(ab_req *r, bool *done);
        enum MHD_Result (*body)(ab_req *r, const char *data, size_t *size);
        enum MHD_Result (*answer)(ab_req *r);
        void (*free)(ab_proxy *px);
} ab_proxy_ops;

/* A table of routes and the hooks that go with them. Every hook may be NULL.
 * The table and what it points to must outlive the server (static data). */
typedef struct ab_route_table {
        const char *name; /* "rest", "e2b", "opensandbox": for messages */
        const ab_route *routes;
        size_t n_routes;
        /* AUTH_OWN routes: authenticates r from its head (sets r->scope, or
         * answers itself with *ok false). auth_blocks: it may read the
         * store, so it runs on a worker. */
        enum MHD_Result (*authenticate)(ab_req *r, bool *ok);
        bool auth_blocks;
        /* A header in which this table's clients may send their token or
         * API key instead of Authorization (the OpenSandbox SDK's
         * OPEN-SANDBOX-API-KEY), checked like a bearer token on this
         * table's routes when there is no Authorization header. NULL: none. */
        const char *key_header;
        /* Upload routes under this prefix (REST's "v1/sandboxes/{id}/") put their
         * body into box {id}: the box must be the app's before the body is
         * spooled. NULL: none. */
        const char *box_upload_prefix;
        /* Every answer on this table's paths (errors, 401 and 405 too) carries
         * X-Request-ID: the client's own when it sent a sane one (printable,
         * at most 256 bytes), else a new one (32 hex digits), as
         * OpenSandbox's server does. */
        bool request_id;
        /* Server stop: quiesce ends the table's long-lived relays (WebSocket
         * terminals, port relays) while workers still run; shutdown ends the
         * threads of its own that use the manager, after every handler has
         * returned and before the manager is freed. */
        void (*quiesce)(void);
        void (*shutdown)(void);
        const ab_proxy_ops *proxy; /* or NULL */
        /* The box a request of this table is about, from its head (after
         * auth), for forwarding it to the box's fleet node (kit/forward.h);
         * NULL: the "*" after "sandboxes" in the route's pattern. */
        const char *(*box_of)(ab_req *r);
        /* Requests whose Host names port host_port of a box ("PORT-ID." +
         * ports_domain, the port proxy's host names) are this table's, under
         * host_prefix: such a host's "/files" is routed as host_prefix +
         * "/files", with r->host_box the ID (E2B's envd, which E2B serves on
         * each sandbox's own host name). The port proxy does not see them.
         * 0: none. */
        int host_port;
        const char *host_prefix;
} ab_route_table;

/* Adds t to the server's routes (before ab_server_start*). Tables are
 * searched in the order added; a path that some table has with another
 * method is answered 405 with the methods of every table. At most
 * AB_SERVER_MAX_TABLES; one proxy. */
void ab_server_add_routes(ab_server *s, const ab_route_table *t);

/* Runs the route handler with the manager told who calls (the caller's API
 * key and its quotas), as every route is run. */
enum MHD_Result route_call(ab_req *r, route_fn fn, const char *id);

/* What route modules use on a request: its caller and auth, answers, and
 * reading it (each header says what it holds). */
#include "kit/auth.h"
#include "kit/request.h"
#include "kit/resp.h"

/* Takes n more bytes of the upload spool's global cap (tmp_max) for r,
 * released when r ends; false (nothing taken) when that would pass the cap.
 * For a route that writes more of its own into the spool (gunzip.h). */
bool kit_tmp_take(ab_req *r, uint64_t n);

#endif
