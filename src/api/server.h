/* server.h - the HTTP service and what the route modules share: the request
 * context, JSON and error responses, streamed responses fed by a producer
 * thread, long-lived stream slots, and field parsing.
 *
 * libmicrohttpd runs one epoll thread for every connection, which never
 * blocks; route handlers run on a bounded pool of worker threads while their
 * connection is suspended (api/workers.h), so they may block (the manager,
 * the store, a box). A handler answers with the resp_* helpers as usual.
 * Streamed responses park their connection while they have nothing to send
 * (api/conn.h), so an idle stream costs no thread. A content reader must
 * never block; an upgrade callback (WebSocket: the daemon has
 * MHD_ALLOW_UPGRADE) runs on the polling thread too, so it hands the socket
 * to a thread of its own and returns at once. Long-lived streams count
 * themselves with req_stream_slot. */
#ifndef AB_SERVER_H
#define AB_SERVER_H

#include "api/conn.h"
#include "config/config.h"
#include "core/manager.h"
#include "tools/tools.h"

#include "base/buf.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>

typedef struct ab_server {
        const ab_config *cfg;
        ab_manager *mgr;
        ab_store *store;
        ab_events *events;
        ab_metrics *metrics;
        ab_backend *backend;
        struct MHD_Daemon *mhd;
        char *tmp_dir;             /* DATA/tmp: uploads are spooled here */
        _Atomic uint64_t tmp_used; /* bytes its spooled uploads may hold now (cfg->tmp_max) */
        int64_t started_ms;
        uint64_t started_ns;
        atomic_int sse_subscribers;
        uint16_t port;              /* the port actually bound */
        struct ab_runners *runners; /* the code runner (seed 003), or NULL */
        char *sandbox_token;    /* SANDBOX_TOKEN: bearer token of the /sandbox routes, or NULL */
        struct ab_conns *conns; /* connection table, caps, deadlines, parked streams */
        struct ab_workers *workers; /* threads that run handlers */
        ab_image_store *images;     /* the image store (routes_images.c), or NULL */
} ab_server;

/* Starts listening on cfg->listen. */
int ab_server_start(ab_server *s, ab_err **err);
/* For the HTTP fuzz target (tests/fuzz/fuzz_http.c): the same request
 * handling with no listening socket and no threads of its own; the caller
 * hands it connections with MHD_add_connection(s->mhd, ...) and drives it with
 * MHD_run(s->mhd). Stop it with ab_server_stop. */
int ab_server_start_external(ab_server *s, ab_err **err);
/* Stops accepting, ends event streams, and waits (up to a few seconds) for
 * requests in progress. */
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
        const struct route *route;
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
        int status;           /* the status answered, for logs */
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
        ab_proxy *proxy; /* a request to a box's port, or NULL (routes_ports.c) */
        char *front_box; /* owned, or NULL: the box an E2B access token opened */
} ab_req;

/* Authenticates r as a route open to users (admin token or API key) would:
 * sets r->scope, or answers 401/403 (*ok false). May read the store. */
enum MHD_Result req_authenticate(ab_req *r, bool *ok);

/* True when tok is a credential of this server: the admin token, a
 * configured API key or one in the store (also when the store cannot tell).
 * May read the store: a worker only. */
bool req_is_credential(ab_req *r, const char *tok);

/* Constant-time comparison of two secrets. */
bool req_secret_eq(const char *a, const char *b);
/* True when the client connected from a loopback address. */
bool req_peer_loopback(ab_req *r);
/* True when the client has hung up (its socket was closed or broke): work
 * done only for its answer may stop. Safe from a worker thread. */
bool req_client_gone(ab_req *r);

/* A query-string parameter, or NULL. */
const char *req_query(ab_req *r, const char *key);
/* A request header, or NULL. */
const char *req_header(ab_req *r, const char *key);

/* Queues a JSON response (steals j). Returns an MHD result. */
enum MHD_Result resp_json(ab_req *r, unsigned status, json_t *j);
/* Queues {"error":{"code","message"}} with the status fitting e's code (frees e). */
enum MHD_Result resp_err(ab_req *r, ab_err *e);
/* Same, with an explicit status and code name. */
enum MHD_Result resp_error(ab_req *r, unsigned status, const char *code, const char *fmt, ...)
    AB_PRINTF(4, 5);
/* HTTP status for an error code. */
unsigned status_of(ab_code c);

/* A response whose body is read from fd until EOF (chunked); the fd is
 * closed when the response is done. The producer writes the other end of a
 * pipe from its own thread and sees EPIPE when the client goes away. */
enum MHD_Result resp_stream(ab_req *r, unsigned status, const char *content_type, int fd,
                            const char *const *headers);
/* Same, for a long-lived stream: slot (from req_stream_slot, may be NULL)
 * is released when the response ends. */
enum MHD_Result resp_stream_counted(ab_req *r, unsigned status, const char *content_type, int fd,
                                    const char *const *headers, ab_stream_slot *slot);
/* Streams `length` bytes (0: to the end) of the box's file at `path` (as the
 * box names it), from `offset`, as the body of a `status` answer: a thread
 * reads it through the box's init into a pipe. Takes over *use, ended when
 * the stream ends (or at once when it cannot start). */
enum MHD_Result resp_box_file(ab_req *r, ab_use *use, const char *path, uint64_t offset,
                              uint64_t length, unsigned status, const char *const *headers);
/* Queues a response made by the caller (adds the common headers; steals
 * resp). Use it rather than MHD_queue_response: on a worker the answer is
 * queued by MHD's thread. */
enum MHD_Result resp_send(ab_req *r, unsigned status, struct MHD_Response *resp);
/* Counts a long-lived stream of r (an event stream, an exec stream, a
 * terminal) against max_streams and max_streams_per_address, apart from
 * connections and requests in flight. Returns the slot (release it with
 * ab_stream_slot_release when the stream ends, from any thread), or NULL
 * after answering r 503 (the server's cap) or 429 (the address's cap); *ret
 * is then the handler's result. */
ab_stream_slot *req_stream_slot(ab_req *r, enum MHD_Result *ret);
/* Starts a detached thread running fn(arg). 0 or -errno. ab_server_stop
 * waits for it (it may use the manager): fn must end once the stop has
 * closed the streams and cancelled the fronts' execs. */
int spawn_detached(void *(*fn)(void *), void *arg);
/* Waits up to timeout_ms for every thread of spawn_detached to end; the
 * number still running. */
size_t spawn_wait(uint64_t timeout_ms);

/* Parses the JSON body: NULL body = {}; not an object or bad JSON = AB_E_INVALID. */
int req_json(ab_req *r, json_t **out, ab_err **err);

/* Field readers: absent fields leave *out unchanged and return 0; a wrong
 * type is AB_E_INVALID naming the field. */
int field_str(json_t *o, const char *name, const char **out, ab_err **err);
int field_int(json_t *o, const char *name, int64_t *out, bool *present, ab_err **err);
int field_num(json_t *o, const char *name, double *out, bool *present, ab_err **err);
int field_obj(json_t *o, const char *name, json_t **out, ab_err **err);
/* AB_E_INVALID naming the first key of o not in the NULL-terminated list. */
int fields_known(json_t *o, const char *const *known, const char *where, ab_err **err);

/* A JSON string from bytes that may not be UTF-8: invalid sequences become U+FFFD. */
json_t *json_bytes(const char *buf, size_t len);

/* The fields of POST /v1/sandboxes (NULL-terminated), and their parser:
 * fills *q (pointers into body, and lim when limits are given). */
extern const char *const acquire_fields[];
int parse_acquire(const ab_server *s, json_t *body, ab_acquire_req *q, ab_limits *lim,
                  ab_err **err);

/* The box as the API shows it (docs/api.md). */
json_t *box_json(const ab_server *s, const ab_box_rec *r);

/* Route handlers. `id` is the {id} path segment or NULL. */
enum MHD_Result route_health(ab_req *r, const char *id);
enum MHD_Result route_metrics(ab_req *r, const char *id);
enum MHD_Result route_box_create(ab_req *r, const char *id);
enum MHD_Result route_box_list(ab_req *r, const char *id);
enum MHD_Result route_box_delete_where(ab_req *r, const char *id);
enum MHD_Result route_box_get(ab_req *r, const char *id);
enum MHD_Result route_box_delete(ab_req *r, const char *id);
enum MHD_Result route_box_stop(ab_req *r, const char *id);
enum MHD_Result route_box_start(ab_req *r, const char *id);
enum MHD_Result route_box_pause(ab_req *r, const char *id);
enum MHD_Result route_box_resume(ab_req *r, const char *id);
enum MHD_Result route_box_network_put(ab_req *r, const char *id);
enum MHD_Result route_box_network_get(ab_req *r, const char *id);
enum MHD_Result route_box_exec(ab_req *r, const char *id);
enum MHD_Result route_box_fork(ab_req *r, const char *id);
enum MHD_Result route_box_snapshot(ab_req *r, const char *id);
enum MHD_Result route_exec(ab_req *r, const char *id);
enum MHD_Result route_events(ab_req *r, const char *id);
enum MHD_Result route_keys_list(ab_req *r, const char *id);
enum MHD_Result route_keys_create(ab_req *r, const char *id);
enum MHD_Result route_keys_delete(ab_req *r, const char *id);
enum MHD_Result route_key_get(ab_req *r, const char *id);
/* Runs the route handler with the manager told who calls (routes_quota.c). */
typedef enum MHD_Result (*route_fn)(ab_req *r, const char *id);
enum MHD_Result route_call(ab_req *r, route_fn fn, const char *id);
/* Appends the per-app and disk series to the /metrics text (routes_quota.c). */
char *quota_metrics_append(ab_server *s, char *txt);
enum MHD_Result route_files_get(ab_req *r, const char *id);
/* The code runner's routes authenticate from the head (SANDBOX_TOKEN, else
 * the admin token, else loopback only): *ok, or an answer queued. */
enum MHD_Result runner_authenticate(ab_req *r, bool *ok);
enum MHD_Result route_sandbox_js(ab_req *r, const char *id);
enum MHD_Result route_sandbox_python(ab_req *r, const char *id);
enum MHD_Result route_sandbox_modules(ab_req *r, const char *id);
enum MHD_Result route_files_put(ab_req *r, const char *id);
enum MHD_Result route_files_delete(ab_req *r, const char *id);
enum MHD_Result route_skills_list(ab_req *r, const char *id);
enum MHD_Result route_skills_prompt(ab_req *r, const char *id);
enum MHD_Result route_skill_get(ab_req *r, const char *name);
enum MHD_Result route_skill_put(ab_req *r, const char *name);
enum MHD_Result route_skill_validate(ab_req *r, const char *name);
enum MHD_Result route_skill_delete(ab_req *r, const char *name);
/* routes_images.c */
enum MHD_Result route_images_list(ab_req *r, const char *id);
enum MHD_Result route_images_pull(ab_req *r, const char *id);
enum MHD_Result route_images_import(ab_req *r, const char *id);
enum MHD_Result route_image_get(ab_req *r, const char *ref);
enum MHD_Result route_image_delete(ab_req *r, const char *ref);
/* The image store's gauges (images, bytes) as Prometheus text. */
void ab_images_metrics(ab_server *s, ab_buf *b);
/* An image as the API and `agentbox image ls --json` show it to app (NULL:
 * the admin) (no host paths; of the names, those app sees, store.h). */
json_t *ab_image_json(const ab_image *img, const char *app);
/* routes_volumes.c */
enum MHD_Result route_volume_create(ab_req *r, const char *id);
enum MHD_Result route_volumes_list(ab_req *r, const char *id);
enum MHD_Result route_volume_get(ab_req *r, const char *name);
enum MHD_Result route_volume_delete(ab_req *r, const char *name);
/* A volume as the API and `agentbox volume ls --json` show it (no host paths). */
json_t *ab_volume_json(const ab_volume_info *v);
enum MHD_Result route_tools_list(ab_req *r, const char *id);
enum MHD_Result route_tools_prompt(ab_req *r, const char *id);
enum MHD_Result route_box_tool(ab_req *r, const char *id);
enum MHD_Result route_tool(ab_req *r, const char *id);
enum MHD_Result route_mcp_post(ab_req *r, const char *id);
enum MHD_Result route_mcp_delete(ab_req *r, const char *id);
enum MHD_Result route_term_create(ab_req *r, const char *id);
enum MHD_Result route_term_list(ab_req *r, const char *id);
enum MHD_Result route_term_get(ab_req *r, const char *id);
enum MHD_Result route_term_delete(ab_req *r, const char *id);
enum MHD_Result route_term_resize(ab_req *r, const char *id);
/* Ends every attached terminal WebSocket (routes_term.c) and waits for their
 * threads; new upgrades are refused from then on. Before MHD_stop_daemon. */
void term_ws_shutdown(void);
/* Ports of boxes (routes_ports.c). ports_match (MHD's thread, first call)
 * claims a request for a box's port: /v1/sandboxes/{id}/ports/{port}[/...]
 * with any method (but PUT and DELETE of .../public), or any request whose
 * Host is PORT-ID.ports_domain; it sets r->proxy. ports_open (a worker,
 * before the body) authenticates (a public port needs nothing), begins a
 * use of the box, connects inside it and sends the head; it answers errors
 * itself (*done). ports_body (MHD's thread) passes body bytes on without
 * blocking: it leaves what the box cannot take yet in *size and parks the
 * connection. ports_answer (MHD's thread, after the body: every call that
 * follows until it queued a response) finishes the body, waits for the
 * answer's head without blocking (parked on the box's socket, at most
 * ports_timeout) and relays the answer: streamed, or for a 101 the upgraded
 * connection. ports_free
 * releases r->proxy with the request. ports_shutdown ends the relays of
 * upgraded connections and waits for their threads (before MHD stops). */
bool ports_match(ab_req *r);
/* True when r's Host names a box's port (PORT-ID.ports_domain). */
bool ports_by_host(ab_req *r);
enum MHD_Result ports_open(ab_req *r, bool *done);
enum MHD_Result ports_body(ab_req *r, const char *data, size_t *size);
enum MHD_Result ports_answer(ab_req *r);
void ports_free(ab_proxy *px);
void ports_shutdown(void);
enum MHD_Result route_port_public_put(ab_req *r, const char *id);
enum MHD_Result route_port_public_delete(ab_req *r, const char *id);
/* GET /v1/sandboxes/{id}/execs (routes_execs.c). */
enum MHD_Result route_box_execs(ab_req *r, const char *id);
/* The web console's files: / and /console/{name} (routes_console.c). */
enum MHD_Result route_console(ab_req *r, const char *name);

/* Tool calls (routes_tools.c), shared by the REST routes and the MCP server. */

/* Finds or creates, and starts, the box named by the acquire fields of o
 * (acquire_fields) like POST /v1/sandboxes. Other keys of o are ignored. */
int tools_acquire(ab_server *s, const char *scope, json_t *o, ab_box_rec *out, bool *created,
                  ab_err **err);
/* Runs agent tool `name` with args (borrowed) in box id, resuming it as
 * needed; bash sees the box env. *out is filled on success (clear it with
 * ab_tool_result_clear). -1 with *err: AB_E_NOT_FOUND unknown tool or box,
 * AB_E_INVALID bad arguments (the message names the argument),
 * AB_E_UNAVAILABLE the box cannot be reached. r (or NULL) is the HTTP
 * request that waits for the answer: a long tool stops when its client
 * hangs up. */
int tools_call(ab_server *s, ab_req *r, const char *scope, const char *id, const char *name,
               json_t *args, ab_tool_result *out, ab_err **err);

#endif
