/* forward.c - requests about boxes of other fleet nodes, passed on to
 * their owner over the relay of kit/relay.h (docs/fleet.md). */
#include "kit/forward.h"
#include "kit/relay.h"
#include "kit/server_int.h"
#include "fleet/fleet.h"
#include "http/httpmsg.h"
#include "base/log.h"

#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>

/* A forwarded request's owner must answer its head within this: long, as
 * an exec answers when its command ends; a dead owner is found by TCP
 * keepalive. */
#define FORWARD_HEAD_MS (24LL * 3600 * 1000)
#define CONNECT_MS      5000

const char *kit_request_box(ab_req *r)
{
        if (r->table && r->table->box_of)
                return r->table->box_of(r);
        if (r->route && r->route->pattern) {
                _cleanup_free_ char *pat = xstrdup(r->route->pattern);
                char *save = NULL, *prev = NULL;
                size_t i = 0;
                for (char *t = strtok_r(pat, "/", &save); t && i < r->n_seg;
                     prev = t, t = strtok_r(NULL, "/", &save), i++)
                        if (!strcmp(t, "*") && prev && !strcmp(prev, "sandboxes"))
                                return r->seg[i];
        }
        return r->front_box;
}

bool kit_forward_may(ab_req *r)
{
        if (!r->srv->fleet || req_header(r, FLEET_HDR_SECRET))
                return false;
        if (r->route && r->route->body == BODY_PROXY)
                return true; /* a box's port */
        if (r->route && r->route->auth == AUTH_OWN && r->table && r->table->auth_blocks)
                return true; /* the box of an access token */
        return kit_request_box(r) != NULL;
}

/* ---- the connection to the owner ---- */

/* Connects to an http://HOST:PORT url within CONNECT_MS; -errno. */
static int connect_url(const char *url)
{
        if (strncasecmp(url, "http://", 7) != 0)
                return -EPROTONOSUPPORT;
        _cleanup_free_ char *hp = xstrdup(url + 7);
        hp[strcspn(hp, "/")] = 0;
        char *host = hp, *port = strrchr(hp, ':');
        if (!port || port == hp)
                return -EINVAL;
        *port++ = 0;
        if (*host == '[') { /* [v6] */
                host++;
                host[strcspn(host, "]")] = 0;
        }
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
        if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
                return -EHOSTUNREACH;
        int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        int e = fd < 0 ? -errno : 0;
        if (!e && connect(fd, res->ai_addr, res->ai_addrlen) < 0 && errno != EINPROGRESS)
                e = -errno;
        freeaddrinfo(res);
        if (!e) {
                struct pollfd p = {.fd = fd, .events = POLLOUT};
                int n = poll(&p, 1, CONNECT_MS);
                int so = 0;
                socklen_t len = sizeof(so);
                if (n == 0)
                        e = -ETIMEDOUT;
                else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) < 0)
                        e = -errno;
                else if (so)
                        e = -so;
        }
        if (e) {
                if (fd >= 0)
                        close(fd);
                return e;
        }
        /* an owner that vanished without a word is found within minutes */
        int on = 1, idle = 30, intvl = 10, cnt = 3;
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
        return fd;
}

int kit_fleet_connect(const char *url)
{
        return connect_url(url);
}

/* The relay's header rule: a client's fleet headers are never passed on. */
static bool fleet_hdr(ab_req *r, void *arg, ab_buf *b, const char *k, const char *v)
{
        (void)r;
        (void)arg;
        (void)b;
        (void)v;
        return strncasecmp(k, "X-Agentbox-Fleet-", 17) == 0;
}

/* The secret and the caller's identity, as header lines. */
static char *identity_lines(ab_req *r, ab_fleet *f, bool anonymous)
{
        _cleanup_buf_ ab_buf b = {0};
        ab_buf_printf(&b, FLEET_HDR_SECRET ": %s\r\n" FLEET_HDR_FROM ": %s\r\n", ab_fleet_secret(f),
                      ab_fleet_node(f));
        if (anonymous)
                return ab_buf_steal(&b);
        if (r->scope)
                ab_buf_printf(&b, FLEET_HDR_APP ": %s\r\n", r->scope);
        else
                ab_buf_puts(&b, FLEET_HDR_ADMIN ": 1\r\n");
        if (r->key_id)
                ab_buf_printf(&b, FLEET_HDR_KEY ": %s\r\n", r->key_id);
        return ab_buf_steal(&b);
}

static enum MHD_Result owner_unreachable(ab_req *r, const char *box, const char *node, int e)
{
        ab_log(AB_LOG_WARN, "fleet: cannot reach a box's node", "box", box, "node", node, "error",
               strerror(-e), NULL);
        return resp_error(r, 503, "unavailable",
                          "box %s is unavailable: its node %s cannot be reached (%s)", box, node,
                          strerror(-e));
}

/* Forwards r about box to its owner when another node owns it; as
 * anonymous, with no caller (a box's public port: the owner decides). */
static int forward(ab_req *r, const char *box, bool anonymous, enum MHD_Result *ret)
{
        ab_server *s = r->srv;
        if (!s->fleet || r->forwarded || req_header(r, FLEET_HDR_SECRET) || !box)
                return 0;
        ab_box_rec rec = {0};
        if (ab_manager_get(s->mgr, box, anonymous ? NULL : r->scope, &rec, NULL) < 0)
                return 0; /* unknown, or not the caller's: the route says so */
        bool local = kit_box_local(s, &rec);
        _cleanup_free_ char *node = steal_pointer(&rec.node);
        ab_box_rec_clear(&rec);
        if (local)
                return 0;
        _cleanup_free_ char *url = NULL;
        ab_node_state st = AB_NODE_DOWN;
        if (ab_fleet_owner(s->fleet, node, &url, &st) < 0 || st == AB_NODE_DOWN) {
                *ret = resp_error(r, 503, "unavailable",
                                  "box %s is unavailable: its node %s is down (no heartbeat); "
                                  "it is back when the node is",
                                  box, node);
                return -1;
        }
        const char *target = ab_conns_raw_uri(r->conn);
        if (!target || target[0] != '/' || !relay_method_ok(r->method)) {
                *ret = resp_error(r, 400, "invalid_argument",
                                  "this request cannot be passed on to box %s's node", box);
                return -1;
        }
        _cleanup_free_ char *peer = xasprintf("fleet node %s (box %s)", node, box);
        ab_proxy *px = relay_new(peer, s->cfg->ports_timeout_ms, FORWARD_HEAD_MS);
        if (r->proxy) /* a box's port: the relay to the node replaces the port's */
                r->pxops->free(r->proxy);
        r->proxy = px;
        r->pxops = &kit_forward_ops;
        r->body_kind = BODY_PROXY;
        _cleanup_free_ char *extra = identity_lines(r, s->fleet, anonymous);
        _cleanup_buf_ ab_buf head = {0};
        if (relay_head(r, px, target, fleet_hdr, NULL, extra, &head, ret) < 0)
                return -1;
        explicit_bzero(extra, strlen(extra));
        int fd = connect_url(url);
        if (fd < 0) {
                *ret = owner_unreachable(r, box, node, fd);
                return -1;
        }
        relay_connected(r, px, fd);
        int rc = ab_send_all(fd, head.p, head.n, (int)s->cfg->ports_timeout_ms);
        explicit_bzero(head.p, head.n);
        if (rc < 0) {
                *ret = owner_unreachable(r, box, node, rc);
                return -1;
        }
        return 1;
}

int kit_forward(ab_req *r, const char *box, enum MHD_Result *ret)
{
        return forward(r, box ? box : kit_request_box(r), false, ret);
}

/* Whether r carries a credential (a header form of a token or key). */
static bool has_credential(ab_req *r)
{
        const char *proto = req_header(r, "Sec-WebSocket-Protocol");
        return req_header(r, "Authorization") || req_header(r, "X-API-Key") ||
               (proto && strstr(proto, "bearer."));
}

int kit_forward_port(ab_req *r, const char *box, enum MHD_Result *ret)
{
        if (!r->srv->fleet || req_header(r, FLEET_HDR_SECRET) || !box)
                return 0;
        if (!has_credential(r))
                return forward(r, box, true, ret);
        /* the port's own relay authenticates later when the box is local:
         * this lookup only decides where the request goes */
        ab_box_rec rec = {0};
        if (ab_manager_get(r->srv->mgr, box, NULL, &rec, NULL) < 0)
                return 0;
        bool local = kit_box_local(r->srv, &rec);
        ab_box_rec_clear(&rec);
        if (local)
                return 0;
        bool ok;
        *ret = kit_authenticate(r, AUTH_USER, &ok);
        if (!ok)
                return -1;
        int f = forward(r, box, false, ret);
        if (f == 0) /* another node's box, and not the caller's */
                *ret = resp_error(r, 404, "not_found", "no box \"%s\"", box);
        return f ? f : -1;
}

bool kit_box_local(const ab_server *s, const ab_box_rec *rec)
{
        return !s->fleet || !rec->node || !strcmp(rec->node, ab_fleet_node(s->fleet));
}

/* ---- a buffered call ---- */

#define CALL_MAX     (16u << 20)
#define CALL_WAIT_MS (10 * 60 * 1000)

/* Reads fd to its end into b (at most CALL_MAX bytes); -errno. */
static int read_to_end(int fd, ab_buf *b)
{
        int64_t end = (int64_t)ab_now_ms() + CALL_WAIT_MS;
        for (;;) {
                if (b->n >= CALL_MAX)
                        return -EFBIG;
                char *p = ab_buf_reserve(b, 65536);
                ssize_t n = recv(fd, p, 65536, MSG_DONTWAIT);
                if (n > 0) {
                        ab_buf_commit(b, (size_t)n);
                        continue;
                }
                if (n == 0)
                        return 0;
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN)
                        return -errno;
                int left = (int)(end - (int64_t)ab_now_ms());
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                if (left <= 0 || poll(&pf, 1, left) == 0)
                        return -ETIMEDOUT;
        }
}

/* The body of an answer after its head: as sent, or de-chunked. */
static int answer_body(const ab_http_head *h, const char *p, size_t n, ab_buf *out)
{
        const char *te = ab_http_head_get(h, "Transfer-Encoding");
        if (!te) {
                ab_buf_add(out, p, n);
                return 0;
        }
        ab_chunked ch = {0};
        size_t used = 0;
        while (used < n) {
                size_t u = 0, made = 0;
                char *dst = ab_buf_reserve(out, 65536);
                int rc = ab_chunked_feed(&ch, p + used, n - used, dst, 65536, &u, &made);
                if (rc < 0)
                        return -EPROTO;
                ab_buf_commit(out, made);
                used += u;
                if (rc == 1)
                        return 0;
                if (!u && !made)
                        return -EPROTO;
        }
        return -EPROTO;
}

int kit_fleet_call(ab_req *r, const char *node, const char *method, const char *target,
                   const char *body, size_t len, unsigned *status, ab_buf *answer,
                   char **content_type, ab_err **err)
{
        ab_server *s = r->srv;
        _cleanup_free_ char *url = NULL;
        ab_node_state st = AB_NODE_DOWN;
        if (content_type)
                *content_type = NULL;
        if (!s->fleet || ab_fleet_owner(s->fleet, node, &url, &st) < 0 || st == AB_NODE_DOWN)
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "node %s is down (no heartbeat): its boxes are unavailable "
                                  "until it is back",
                                  node);
        _cleanup_free_ char *extra = identity_lines(r, s->fleet, false);
        _cleanup_buf_ ab_buf req = {0};
        ab_buf_printf(&req,
                      "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
                      method, target, node, len, extra);
        explicit_bzero(extra, strlen(extra));
        ab_buf_add(&req, body ? body : "", len);
        _cleanup_close_ int fd = connect_url(url);
        int rc = fd < 0 ? fd : ab_send_all(fd, req.p, req.n, (int)s->cfg->ports_timeout_ms);
        explicit_bzero(req.p, req.n);
        _cleanup_buf_ ab_buf in = {0};
        if (rc == 0)
                rc = read_to_end(fd, &in);
        if (rc < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, -rc, "node %s cannot be reached", node);
        ab_http_head h = {0};
        if (ab_http_head_parse(in.p ? in.p : "", in.n, &h) != 1 ||
            answer_body(&h, in.p + h.head_len, in.n - h.head_len, answer) < 0) {
                ab_http_head_clear(&h);
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "node %s sent a malformed answer",
                                  node);
        }
        const char *ct = ab_http_head_get(&h, "Content-Type");
        if (content_type && ct)
                *content_type = xstrdup(ct);
        *status = (unsigned)h.status;
        ab_http_head_clear(&h);
        return 0;
}

enum MHD_Result kit_forward_buffered(ab_req *r, const char *node)
{
        const char *target = ab_conns_raw_uri(r->conn);
        _cleanup_buf_ ab_buf body = {0};
        _cleanup_free_ char *ct = NULL;
        unsigned status = 0;
        ab_err *e = NULL;
        if (kit_fleet_call(r, node, r->method, target ? target : "/", r->body, r->body_len, &status,
                           &body, &ct, &e) < 0)
                return resp_err(r, e);
        struct MHD_Response *resp = MHD_create_response_from_buffer(
            body.n, body.n ? body.p : (void *)"", MHD_RESPMEM_MUST_COPY);
        MHD_add_response_header(resp, "Content-Type", ct ? ct : "application/json");
        return resp_send(r, status, resp);
}

int kit_place(ab_req *r, uint64_t mem_bytes, uint64_t disk_bytes, enum MHD_Result *ret)
{
        ab_fleet *f = r->srv->fleet;
        if (!f || r->forwarded)
                return 0;
        const char *how = r->srv->cfg->fleet.placement;
        _cleanup_free_ char *url = NULL;
        ab_node_state self = AB_NODE_UP;
        ab_fleet_owner(f, ab_fleet_node(f), &url, &self);
        if (how && !strcmp(how, "local") && self != AB_NODE_DRAINING)
                return 0;
        _cleanup_free_ char *node = NULL;
        ab_err *e = NULL;
        if (ab_fleet_place(f, mem_bytes, disk_bytes, &node, &e) < 0) {
                *ret = resp_err(r, e);
                return 1;
        }
        if (!strcmp(node, ab_fleet_node(f)))
                return 0;
        *ret = kit_forward_buffered(r, node);
        return 1;
}

const ab_proxy_ops kit_forward_ops = {
    .body = relay_body,
    .answer = relay_answer,
    .free = relay_free,
};

/* ---- the owner's side ---- */

int kit_fleet_identity(ab_req *r, auth_level need, bool *ok, enum MHD_Result *ret)
{
        *ok = false;
        const char *secret = req_header(r, FLEET_HDR_SECRET);
        if (!secret)
                return 0;
        ab_fleet *f = r->srv->fleet;
        if (!f || !req_secret_eq(secret, ab_fleet_secret(f))) {
                ab_log(AB_LOG_WARN, "fleet: a node-to-node request with a wrong secret refused",
                       "from", req_header(r, FLEET_HDR_FROM), NULL);
                *ret = resp_error(r, 401, "unauthorized",
                                  f ? "wrong fleet secret" : "this server is not in a fleet");
                return 1;
        }
        r->forwarded = true;
        if (need == AUTH_ANY || need == AUTH_OWN || need == AUTH_FLEET) {
                /* the route's own auth follows; a node's own call names no caller */
                *ok = true;
                return 1;
        }
        const char *app = req_header(r, FLEET_HDR_APP), *key = req_header(r, FLEET_HDR_KEY);
        const char *admin = req_header(r, FLEET_HDR_ADMIN);
        if ((!app || !*app) && !(admin && !strcmp(admin, "1"))) {
                *ret = resp_error(r, 401, "unauthorized", "a node-to-node request names no caller");
                return 1;
        }
        if (app && *app) {
                r->scope_buf = xstrdup(app);
                r->scope = r->scope_buf;
        }
        if (app && *app && key && *key) {
                ab_api_key k = {0};
                ab_err *e = NULL;
                if (ab_store_key_get(r->srv->store, key, &k, &e) < 0) {
                        ab_err_free(&e);
                        *ret = resp_error(r, 401, "unauthorized", "the caller's API key is gone");
                        return 1;
                }
                if (strcmp(k.app_id, app) != 0) {
                        ab_api_key_clear(&k);
                        *ret = resp_error(r, 401, "unauthorized",
                                          "the caller's API key is another app's");
                        return 1;
                }
                kit_take_key(r, &k);
        }
        if (need == AUTH_ADMIN && r->scope) {
                *ret = resp_error(r, 403, "permission_denied",
                                  "this route needs the admin token; API keys cannot use it");
                return 1;
        }
        *ok = true;
        return 1;
}
