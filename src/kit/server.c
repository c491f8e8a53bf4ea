/* server.c - the HTTP service as agentbox's fronts use it: checks before
 * routing, routing over the registered route tables, and the request life
 * cycle (auth from the head, body, handler on a worker, answer) on the
 * event-driven server of http/server.h. It names no front. */
#include "kit/server_int.h"
#include "kit/forward.h"
#include "http/reqcheck.h"
#include "base/log.h"
#include "base/util.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sys/socket.h>

/* ---- before routing: an exact target, one framing, and for a server
 * without a token, no other site's page ----------------------------------- */

typedef struct head_count {
        int cl, te;
} head_count;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *k,
                                     const char *v)
{
        head_count *c = cls;
        (void)kind;
        (void)v;
        if (strcasecmp(k, "Content-Length") == 0)
                c->cl++;
        else if (strcasecmp(k, "Transfer-Encoding") == 0)
                c->te++;
        return MHD_YES;
}

/* Requests that are refused whatever their route (answered; false):
 * control characters in the target (escaped ones too: "%00" decoded ends
 * the path early) and a body framed twice (request smuggling). */
static bool request_exact(ab_req *r, const char *url, enum MHD_Result *ret)
{
        const char *raw = ab_conns_raw_uri(r->conn);
        if (!ab_req_target_clean(raw ? raw : url) || !ab_req_target_clean(url)) {
                *ret = resp_error(r, 400, "invalid_argument",
                                  "the request target holds a control character (a NUL, a line "
                                  "break, ...), escaped or not");
                return false;
        }
        head_count c = {0};
        MHD_get_connection_values(r->conn, MHD_HEADER_KIND, count_framing, &c);
        if ((c.cl && c.te) || c.cl > 1 || c.te > 1) {
                *ret = resp_error(r, 400, "invalid_argument",
                                  "conflicting Content-Length / Transfer-Encoding headers");
                return false;
        }
        return true;
}

static bool host_allowed(ab_req *r, const char *host)
{
        if (ab_req_host_loopback(host))
                return true;
        const ab_config *c = r->srv->cfg;
        for (size_t i = 0; i < c->n_allowed_hosts; i++)
                if (ab_req_host_is(host, c->allowed_hosts[i]))
                        return true;
        /* PORT-ID.ports_domain */
        return r->srv->proxy && r->srv->proxy->by_host && r->srv->proxy->by_host(r);
}

/* A server without a token takes every loopback client for the admin; a
 * web page the user opens is one too (its requests come from the user's
 * browser). So such a server answers only its own origin: a Host of
 * another name (DNS rebinding), another site's Origin or Sec-Fetch-Site
 * (CSRF), and on JSON routes the content types a page may send without
 * asking first, are refused (answered; false). */
static bool request_same_origin(ab_req *r, enum MHD_Result *ret)
{
        const ab_config *c = r->srv->cfg;
        if (c->token && *c->token)
                return true;
        const char *host = req_header(r, "Host");
        if (host && !host_allowed(r, host)) {
                *ret = resp_error(r, 403, "permission_denied",
                                  "Host \"%s\" is not this server's: a server without a token "
                                  "answers loopback names and allowed_hosts only",
                                  host);
                return false;
        }
        const char *origin = req_header(r, "Origin");
        if (origin && (!host || !ab_req_origin_same(origin, host))) {
                *ret = resp_error(r, 403, "permission_denied",
                                  "Origin \"%s\" is another site: a server without a token "
                                  "answers its own pages only",
                                  origin);
                return false;
        }
        const char *site = req_header(r, "Sec-Fetch-Site");
        if (site && (!strcasecmp(site, "cross-site") || !strcasecmp(site, "same-site"))) {
                *ret = resp_error(r, 403, "permission_denied",
                                  "a request from another site (Sec-Fetch-Site: %s): a server "
                                  "without a token answers its own pages only",
                                  site);
                return false;
        }
        return true;
}

/* A JSON route of a server without a token refuses the content types a
 * page may send to another site without asking first (answered; false). */
static bool request_json_type(ab_req *r, enum MHD_Result *ret)
{
        const ab_config *c = r->srv->cfg;
        if ((c->token && *c->token) || !r->route || r->route->body != BODY_JSON)
                return true;
        const char *ct = req_header(r, "Content-Type");
        if (!ab_req_ctype_simple(ct))
                return true;
        *ret = resp_error(r, 415, "unsupported_media_type",
                          "Content-Type \"%s\" on a JSON route: send application/json", ct);
        return false;
}

/* ---- routing ---------------------------------------------------------- */

static void split_path(ab_req *r)
{
        size_t cap = 8;
        r->seg = xcalloc(cap, sizeof(char *));
        r->segbuf = xstrdup(r->path);
        char *save = NULL;
        for (char *t = strtok_r(r->segbuf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
                if (r->n_seg + 1 >= cap)
                        r->seg = xrealloc(r->seg, (cap *= 2) * sizeof(char *));
                r->seg[r->n_seg++] = t;
        }
}

static bool route_matches(const ab_route *rt, ab_req *r, const char **id)
{
        _cleanup_free_ char *pat = xstrdup(rt->pattern);
        char *save = NULL;
        size_t i = 0;
        *id = NULL;
        for (char *t = strtok_r(pat, "/", &save); t; t = strtok_r(NULL, "/", &save), i++) {
                if (i >= r->n_seg)
                        return false;
                if (!strcmp(t, "**")) {
                        /* the rest of the path, slashes and all (an image
                         * reference: "localhost:5000/team/tool:1") */
                        *id = r->path + (r->seg[i] - r->segbuf);
                        return true;
                }
                if (!strcmp(t, "*"))
                        *id = r->seg[i];
                else if (strcmp(t, r->seg[i]))
                        return false;
        }
        return i == r->n_seg;
}

/* Finds the route; answers 404/405 itself when none fits. */
static const ab_route *find_route(ab_req *r, const char **id, enum MHD_Result *ret)
{
        char allow[128] = "";
        const ab_route_table *path_table = NULL; /* a table that has the path */
        for (size_t t = 0; t < r->srv->n_tables; t++) {
                const ab_route_table *tb = r->srv->tables[t];
                for (size_t i = 0; i < tb->n_routes; i++) {
                        const ab_route *rt = &tb->routes[i];
                        const char *rid;
                        if (!route_matches(rt, r, &rid))
                                continue;
                        if (!strcmp(rt->method, r->method)) {
                                *id = rid;
                                r->table = tb;
                                return rt;
                        }
                        if (!path_table)
                                path_table = tb;
                        if (strlen(allow) + strlen(rt->method) + 3 < sizeof(allow)) {
                                if (*allow)
                                        strcat(allow, ", ");
                                strcat(allow, rt->method);
                        }
                }
        }
        if (*allow) {
                r->table = path_table; /* its headers go on the 405 too */
                json_t *j = json_pack("{s:{s:s,s:s}}", "error", "code", "method_not_allowed",
                                      "message", "method not allowed here");
                char *txt = json_dumps(j, JSON_COMPACT);
                json_decref(j);
                struct MHD_Response *resp =
                    MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
                MHD_add_response_header(resp, "Content-Type", "application/json");
                MHD_add_response_header(resp, "Allow", allow);
                ab_metrics_error(r->srv->metrics, "method_not_allowed");
                *ret = kit_queue(r, 405, resp);
        } else {
                *ret = resp_error(r, 404, "not_found", "no route %s /%s", r->method, r->path);
        }
        return NULL;
}

/* ---- request life cycle ----------------------------------------------- */

/* The global cap of DATA/tmp: takes n more bytes of the spool for r, or
 * false when that would pass tmp_max (nothing taken then). */
static bool tmp_take(ab_req *r, uint64_t n)
{
        _Atomic uint64_t *used = &r->srv->tmp_used;
        uint64_t cur = atomic_load(used), max = r->srv->cfg->tmp_max;
        do {
                if (n > max || cur > max - n)
                        return false;
        } while (!atomic_compare_exchange_weak(used, &cur, cur + n));
        r->tmp_held += n;
        return true;
}

bool kit_tmp_take(ab_req *r, uint64_t n)
{
        return tmp_take(r, n);
}

static void req_free(ab_req *r)
{
        if (r->tmp_held)
                atomic_fetch_sub(&r->srv->tmp_used, r->tmp_held);
        if (r->proxy)
                r->pxops->free(r->proxy);
        if (r->upload_fd >= 0)
                close(r->upload_fd);
        free(r->scope_buf);
        free(r->key_id);
        free(r->front_box);
        free(r->host_box);
        free(r->body);
        free(r->seg);
        free(r->segbuf);
        free(r->path);
        free(r);
}

static int open_upload(ab_req *r)
{
        int fd = open(r->srv->tmp_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        r->upload_fd = fd;
        return 0;
}

/* A table's box host name (ab_route_table.host_port): r's path goes under
 * the table's prefix and r->host_box names the box. False when none. */
static bool route_by_host(ab_req *r)
{
        char port[AB_HOST_PORT_MAX + 1], box[AB_HOST_BOX_MAX + 1];
        if (!ab_req_host_box(req_header(r, "Host"), r->srv->cfg->ports_domain, port, box))
                return false;
        for (size_t t = 0; t < r->srv->n_tables; t++) {
                const ab_route_table *tb = r->srv->tables[t];
                if (!tb->host_port || !tb->host_prefix || atoi(port) != tb->host_port)
                        continue;
                char *path = xasprintf("%s/%s", tb->host_prefix, r->path);
                free(r->path);
                r->path = path;
                r->host_box = xstrdup(box);
                return true;
        }
        return false;
}

/* Routes r (cheap, on MHD's thread): answers 404/405 itself (*done). */
static enum MHD_Result route_request(ab_req *r, bool *done)
{
        *done = false;
        bool by_host = route_by_host(r);
        split_path(r);
        /* a box's port: any method, the body passed on */
        if (!by_host && r->srv->proxy && r->srv->proxy->match(r)) {
                static const ab_route port_route = {"*", "", AUTH_USER, BODY_PROXY, NULL};
                r->route = &port_route;
                r->pxops = r->srv->proxy;
                return MHD_YES;
        }
        const char *id;
        enum MHD_Result ret = MHD_YES;
        const ab_route *rt = find_route(r, &id, &ret);
        if (!rt)
                *done = true;
        r->route = rt;
        return ret;
}

/* The box an app's upload goes into (a route under its table's
 * box_upload_prefix, e.g. /v1/sandboxes/{id}/), or NULL: that box must be the
 * app's before its body is spooled to disk. */
static const char *upload_box(ab_req *r)
{
        const ab_route *rt = r->route;
        const char *id = NULL;
        const char *pre = r->table ? r->table->box_upload_prefix : NULL;
        if (rt->body != BODY_UPLOAD || !r->scope || !pre)
                return NULL;
        if (strncmp(rt->pattern, pre, strlen(pre)))
                return NULL;
        return route_matches(rt, r, &id) ? id : NULL;
}

/* 503 for an upload the spool's global cap (tmp_max) cannot take now. */
static enum MHD_Result tmp_full_answer(ab_req *r)
{
        ab_log(AB_LOG_WARN, "upload refused: the spool is full", NULL);
        return resp_error(r, 503, "unavailable",
                          "the server's upload spool is full (tmp_max, %" PRIu64
                          " bytes over all uploads in progress); try again later",
                          r->srv->cfg->tmp_max);
}

/* The rest of the first call: auth (and for an app's upload into a box,
 * that the box is the app's), the body's size, the upload spool. */
static enum MHD_Result first_call(ab_req *r, bool *done)
{
        *done = false;
        const ab_route *rt = r->route;
        enum MHD_Result ret = MHD_YES;
        if (rt->body == BODY_PROXY) {
                r->body_kind = BODY_PROXY;
                const ab_proxy_ops *po = r->srv->proxy;
                int f = po->box ? kit_forward_port(r, po->box(r), &ret) : 0;
                if (f) { /* passed on to the box's node (the relay replaced the port's) */
                        *done = f < 0;
                        return ret;
                }
                return po->open(r, done);
        }
        bool ok;
        ret = kit_authenticate(r, rt->auth, &ok);
        if (!ok) {
                *done = true;
                return ret;
        }
        int f = kit_forward(r, NULL, &ret);
        if (f) { /* another fleet node's box: its answer is relayed */
                *done = f < 0;
                return ret;
        }
        const char *box = upload_box(r);
        if (box) {
                ab_box_rec rec;
                ab_err *e = NULL;
                if (ab_manager_get(r->srv->mgr, box, r->scope, &rec, &e) < 0) {
                        *done = true;
                        return resp_err(r, e);
                }
                ab_box_rec_clear(&rec);
        }
        r->body_kind = rt->body;
        const char *cl = req_header(r, "Content-Length");
        uint64_t len = cl ? strtoull(cl, NULL, 10) : 0;
        uint64_t max = rt->body == BODY_UPLOAD ? r->srv->cfg->max_upload : r->srv->cfg->max_body;
        if (rt->body == BODY_NONE)
                max = r->srv->cfg->max_body;
        if (len > max) {
                *done = true;
                return resp_error(r, 413, "limit_exceeded",
                                  "request body of %" PRIu64
                                  " bytes is larger than the limit of %" PRIu64 " bytes",
                                  len, max);
        }
        if (rt->body == BODY_UPLOAD && len && !tmp_take(r, len)) {
                *done = true;
                return tmp_full_answer(r);
        }
        if (rt->body == BODY_UPLOAD) {
                int e = open_upload(r);
                if (e < 0) {
                        *done = true;
                        return resp_error(r, 500, "internal", "cannot spool the upload: %s",
                                          strerror(-e));
                }
        }
        return MHD_YES;
}

static void take_body(ab_req *r, const char *data, size_t size)
{
        const ab_config *c = r->srv->cfg;
        if (r->body_kind == BODY_UPLOAD) {
                if (r->upload_len + size > c->max_upload) {
                        r->body_too_large = true;
                        return;
                }
                /* a body longer than its Content-Length (or chunked) takes
                 * more of the spool as it comes */
                if (r->upload_len + size > r->tmp_held &&
                    (r->tmp_full || !tmp_take(r, r->upload_len + size - r->tmp_held))) {
                        r->tmp_full = true;
                        return;
                }
                if (!r->upload_failed && ab_write_all(r->upload_fd, data, size) < 0)
                        r->upload_failed = true;
                r->upload_len += size;
                return;
        }
        if (r->body_len + size > c->max_body) {
                r->body_too_large = true;
                return;
        }
        if (r->body_len + size + 1 > r->body_cap) {
                r->body_cap = xadd(r->body_len, size) * 2 + 1;
                r->body = xrealloc(r->body, r->body_cap);
        }
        memcpy(r->body + r->body_len, data, size);
        r->body_len += size;
        r->body[r->body_len] = 0;
}

/* Where a request is in its life (see on_request). */
enum { PH_NEW, PH_AUTH, PH_BODY, PH_RUN, PH_DONE };

static void worker_first_call(void *arg)
{
        ab_req *r = arg;
        bool done;
        r->worker_ret = first_call(r, &done);
        if (done && !r->resp)
                r->worker_ret = MHD_NO;
        r->on_worker = false;
        MHD_resume_connection(r->conn); /* r belongs to MHD's thread again */
}

/* A use a worker ends after handing its answer back (ab_req.ending_use):
 * on_completed waits for done before the connection reads on. */
typedef struct use_ending {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool done;
} use_ending;

static void ending_wait(use_ending *w)
{
        pthread_mutex_lock(&w->mu);
        while (!w->done)
                pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
}

static void worker_handler(void *arg)
{
        ab_req *r = arg;
        const char *id = NULL;
        route_matches(r->route, r, &id);
        r->worker_ret = route_call(r, r->route->fn, id); /* the caller's quotas */
        ab_manager *mgr = r->srv->mgr;
        ab_use *u = steal_pointer(&r->ending_use);
        use_ending *w = NULL;
        if (u) {
                w = xzalloc(sizeof(*w));
                pthread_mutex_init(&w->mu, NULL);
                pthread_cond_init(&w->cv, NULL);
                r->ending = w;
        }
        r->on_worker = false;
        MHD_resume_connection(r->conn); /* r is MHD's again; w stays until done */
        if (!u)
                return;
        /* The exec's store commit (~0.1 ms) runs while MHD sends the answer
         * and the client reads it, no longer after, on the HTTP thread. */
        ab_manager_use_end(mgr, u);
        free(u);
        pthread_mutex_lock(&w->mu);
        w->done = true;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
}

/* Runs fn(r) on a worker while the connection is suspended; answers 503 when
 * max_requests are in flight already. */
static enum MHD_Result dispatch(ab_req *r, int phase, void (*fn)(void *))
{
        ab_server *s = r->srv;
        if (!ab_workers_reserve(s->http.workers)) {
                ab_conns_count_busy(s->http.conns);
                r->phase = PH_DONE;
                return resp_error(r, 503, "unavailable",
                                  "the server has %lld requests in flight, the most "
                                  "max_requests allows: try again later",
                                  (long long)s->cfg->max_requests);
        }
        r->phase = phase;
        r->on_worker = true;
        MHD_suspend_connection(r->conn);
        ab_workers_run(s->http.workers, fn, r);
        return MHD_YES;
}

/* Back from a worker: queues what it answered. */
static enum MHD_Result take_worker_answer(ab_req *r)
{
        if (!r->resp)
                return r->worker_ret;
        struct MHD_Response *resp = steal_pointer(&r->resp);
        enum MHD_Result ret = MHD_queue_response(r->conn, r->resp_status, resp);
        MHD_destroy_response(resp);
        r->phase = PH_DONE;
        return r->worker_ret == MHD_NO ? MHD_NO : ret;
}

/* The access handler, always on MHD's polling thread, which must never
 * block: first call (head complete) -> route; auth on a worker when it needs
 * the store -> body -> final call: the handler on a worker -> its answer. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
        ab_server *s = cls;
        ab_req *r = *con_cls;
        if (!r) {
                ab_conns_head_done(s->http.conns, conn);
                r = xzalloc(sizeof(*r));
                r->srv = s;
                r->conn = conn;
                r->method = method;
                r->path = xstrdup(url[0] == '/' ? url + 1 : url);
                r->upload_fd = -1;
                r->t0 = ab_now_ns();
                *con_cls = r;
                bool done = true;
                enum MHD_Result ret = MHD_YES;
                if (request_exact(r, url, &ret) && request_same_origin(r, &ret)) {
                        ret = route_request(r, &done);
                        if (!done && !request_json_type(r, &ret))
                                done = true;
                }
                /* the store may be read: an API key, a box's record (uploads) */
                if (!done && (r->proxy || r->route->body == BODY_UPLOAD ||
                              kit_auth_may_block(r, r->route->auth) || kit_forward_may(r)))
                        return dispatch(r, PH_AUTH, worker_first_call);
                if (!done)
                        ret = first_call(r, &done);
                if (done) {
                        r->route = NULL;
                        r->phase = PH_DONE;
                        if (!r->status)
                                r->status = 500;
                        return ret;
                }
                r->phase = PH_BODY;
                return ret;
        }
        switch (r->phase) {
        case PH_AUTH: {
                enum MHD_Result ret = take_worker_answer(r);
                if (r->phase == PH_DONE || ret == MHD_NO) {
                        r->route = NULL;
                        r->phase = PH_DONE;
                        return ret;
                }
                r->phase = PH_BODY;
                return MHD_YES;
        }
        case PH_RUN:
                return take_worker_answer(r);
        case PH_DONE: /* answered already (an error before the body) */
                *upload_data_size = 0;
                return MHD_YES;
        default:
                break;
        }
        if (*upload_data_size && r->body_kind == BODY_PROXY)
                return r->pxops->body(r, upload_data, upload_data_size);
        if (*upload_data_size) {
                if (r->body_kind == BODY_NONE) {
                        /* a body on a route that takes none: ignore it, but bounded */
                        if (r->body_len + *upload_data_size > s->cfg->max_body)
                                r->body_too_large = true;
                        else
                                r->body_len += *upload_data_size;
                } else {
                        take_body(r, upload_data, *upload_data_size);
                }
                *upload_data_size = 0;
                return MHD_YES;
        }
        if (r->body_kind == BODY_PROXY) /* answered on this thread, parking meanwhile */
                return r->pxops->answer(r);
        if (r->body_kind == BODY_NONE)
                r->body_len = 0;
        r->phase = PH_DONE;
        if (r->body_too_large)
                return resp_error(r, 413, "limit_exceeded",
                                  "request body is larger than the limit of %" PRIu64 " bytes",
                                  r->body_kind == BODY_UPLOAD ? s->cfg->max_upload
                                                              : s->cfg->max_body);
        if (r->tmp_full)
                return tmp_full_answer(r);
        if (r->upload_failed)
                return resp_error(r, 500, "internal", "cannot spool the upload");
        return dispatch(r, PH_RUN, worker_handler);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
        ab_server *s = cls;
        ab_conns_request_done(s->http.conns, conn);
        ab_req *r = *con_cls;
        if (!r)
                return;
        double ms = (double)(ab_now_ns() - r->t0) / 1e6;
        char st[16], dur[32];
        snprintf(st, sizeof(st), "%d", r->status);
        snprintf(dur, sizeof(dur), "%.2f", ms);
        ab_log(AB_LOG_DEBUG, "request", "method", r->method, "path", r->path, "status", st, "ms",
               dur, NULL);
        if (r->ending)
                ending_wait(r->ending);
        if (r->ending_use) { /* set by a handler that did not run on a worker */
                ab_manager_use_end(r->srv->mgr, r->ending_use);
                free(r->ending_use);
        }
        if (r->deferred_use) {
                ab_manager_use_end(r->srv->mgr, r->deferred_use);
                free(r->deferred_use);
        }
        if (r->resp)
                MHD_destroy_response(r->resp);
        req_free(r);
        *con_cls = NULL;
}

static int cmp_key_id(const void *a, const void *b)
{
        return strcmp(((const ab_api_key *)a)->key_id, ((const ab_api_key *)b)->key_id);
}

/* The connection table's key check (conn.h): one read of the store's keys
 * per round, however many keys have streams. */
static int keys_gone(void *arg, const char *const *keys, size_t n, bool *gone)
{
        ab_server *s = arg;
        ab_api_key *ks = NULL;
        size_t nk = 0;
        ab_err *e = NULL;
        if (ab_store_key_list(s->store, &ks, &nk, &e) < 0) {
                ab_log(AB_LOG_WARN, "API key check: cannot list keys", "error", e->msg, NULL);
                ab_err_free(&e);
                return -1;
        }
        qsort(ks, nk, sizeof(*ks), cmp_key_id);
        for (size_t i = 0; i < n; i++) {
                ab_api_key want = {.key_id = (char *)keys[i]};
                gone[i] = !bsearch(&want, ks, nk, sizeof(*ks), cmp_key_id);
        }
        ab_api_keys_free(ks, nk);
        return 0;
}

/* The HTTP server's options from the service's settings. */
static ab_http_opts http_opts(ab_server *s)
{
        return (ab_http_opts){
            .listen = s->cfg->listen,
            .head_timeout_ms = s->cfg->head_timeout_ms,
            .max_connections = s->cfg->max_connections,
            .max_connections_per_address = s->cfg->max_connections_per_address,
            .max_streams = s->cfg->max_streams,
            .max_streams_per_address = s->cfg->max_streams_per_address,
            .max_requests = s->cfg->max_requests,
            .events = s->events,
            .keys_gone = s->store ? keys_gone : NULL,
            .key_arg = s,
            .on_request = on_request,
            .on_completed = on_completed,
            .cls = s,
        };
}

int ab_server_start(ab_server *s, ab_err **err)
{
        ab_http_opts o = http_opts(s);
        return ab_http_start(&s->http, &o, err);
}

int ab_server_start_external(ab_server *s, ab_err **err)
{
        ab_http_opts o = http_opts(s);
        return ab_http_start_external(&s->http, &o, err);
}

/* The stop waits this long for the threads of spawn_detached; serve's
 * watchdog (10 s) ends the process first when one is stuck. */
#define STOP_WAIT_MS 30000

/* Logs a step of the stop that took over a second: when serve's watchdog
 * ends a stop, the log says where the time went. */
static void stop_step_done(const char *step, uint64_t since_ns)
{
        uint64_t ms = (ab_now_ns() - since_ns) / 1000000;
        if (ms < 1000)
                return;
        char t[24];
        snprintf(t, sizeof(t), "%" PRIu64, ms);
        ab_log(AB_LOG_WARN, "a step of the stop was slow", "step", step, "ms", t, NULL);
}

void ab_server_stop(ab_server *s)
{
        if (!s->http.mhd)
                return;
        uint64_t t = ab_now_ns();
        ab_http_quiesce(&s->http);
        ab_events_shutdown(s->events);
        stop_step_done("quiesce", t);
        for (size_t i = 0; i < s->n_tables; i++) { /* upgraded relays: terminals, ports */
                t = ab_now_ns();
                if (s->tables[i]->quiesce)
                        s->tables[i]->quiesce();
                stop_step_done(s->tables[i]->name, t);
        }
        t = ab_now_ns();
        ab_http_drain(&s->http);
        stop_step_done("drain", t);
        /* fronts' threads of their own (E2B processes) use the manager */
        for (size_t i = 0; i < s->n_tables; i++) {
                t = ab_now_ns();
                if (s->tables[i]->shutdown)
                        s->tables[i]->shutdown();
                stop_step_done(s->tables[i]->name, t);
        }
        t = ab_now_ns();
        ab_http_stop(&s->http);
        stop_step_done("http", t);
        /* Every stream's socket or pipe is closed now: the threads that fed
         * them (execs, file downloads, pulls) end, and serve frees the
         * manager they use only after them. Its watchdog ends a stop that
         * takes longer (a thread stuck in the manager) before the free. */
        size_t left = spawn_wait(STOP_WAIT_MS);
        if (left) {
                char n[24];
                snprintf(n, sizeof(n), "%zu", left);
                ab_log(AB_LOG_WARN, "threads still running at the stop", "threads", n, NULL);
        }
}

void ab_server_add_routes(ab_server *s, const ab_route_table *t)
{
        /* a wiring mistake of the program, not input: stop at once */
        if (s->n_tables >= AB_SERVER_MAX_TABLES || (t->proxy && s->proxy)) {
                ab_log(AB_LOG_ERROR, "route table refused: too many tables, or a second proxy",
                       "table", t->name, NULL);
                abort();
        }
        if (t->proxy)
                s->proxy = t->proxy;
        s->tables[s->n_tables++] = t;
}

enum MHD_Result route_call(ab_req *r, route_fn fn, const char *id)
{
        if (!r->key_id)
                return fn(r, id);
        ab_manager_set_caller(&r->caller);
        enum MHD_Result ret = fn(r, id);
        ab_manager_set_caller(NULL);
        return ret;
}

void ab_server_counts(ab_server *s, ab_buf *b)
{
        ab_http_counts(&s->http, b);
}
