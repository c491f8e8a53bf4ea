/* Ports of boxes: HTTP and WebSocket to a server listening in a box, at
 * /v1/sandboxes/{id}/ports/{port}/... or by host name PORT-ID.DOMAIN
 * (docs/api.md, "Ports"; docs/architecture.md says how it fits the server).
 *
 * The server connects inside the box's network namespace (so a box without
 * network is reachable, and nothing of the host's own network is). A plain
 * request costs no thread of its own: a worker authenticates, connects and
 * sends the head; MHD's thread writes the body as it arrives and reads the
 * answer, parking the connection whenever the box's server does not take or
 * send anything (http/conn.h), so a slow box server holds no worker.
 * An upgrade (WebSocket) answered 101 by the box gets a thread that moves
 * bytes both ways, counted as a stream. */
#include "http/httpmsg.h"
#include "rest/rest.h"
#include "http/ws.h"
#include "base/id.h"
#include "base/log.h"
#include "net/netns.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define BODY_BUF       (64 * 1024) /* request body bytes held for a slow box server */
#define READ_BUF       (64 * 1024)
#define RELAY_MAX      512   /* upgraded connections relayed at once, server-wide */
#define RELAY_BUF      65536 /* bytes in flight each way */
#define RELAY_IDLE_MS  (-1)  /* relays end with either side, never by silence */
#define PORT_PATH_SEGS 5     /* v1 sandboxes ID ports PORT */

struct ab_proxy {
        char *box;      /* box id */
        char *port_str; /* as in the request */
        int port;
        char *target; /* request target for the box's server */
        bool by_host; /* matched by Host */
        int fd;       /* the connection into the box, or -1 */
        bool chunked; /* the request body is re-framed as chunks */
        bool upgrade; /* the client asked for an upgrade */
        bool failed;  /* writing the body failed: the box's answer decides */
        bool timed_out;
        int64_t write_deadline; /* monotonic ms, 0 = none */
        size_t progress;        /* body bytes the box took since the deadline was set */
        bool end_queued;        /* a chunked body's last chunk is in out */
        int64_t head_deadline;  /* monotonic ms by which the answer's head must be in */
        ab_buf in;              /* the answer's head as it arrives */
        ab_buf out;             /* request body bytes not yet taken by the box */
        ab_park *park;
        ab_stream_slot *slot; /* an upgraded connection's stream slot */
        struct relay *relay;  /* its relay, until on_upgrade hands it to a thread */
        bool relay_started;
};

/* ---- matching (MHD's thread) ---- */

/* Port and id from a host name "PORT-ID.DOMAIN[:N]" (any case). */
static bool host_match(const char *host, const char *domain, char **port, char **box)
{
        if (!host || !domain || !*domain)
                return false;
        size_t hl = strlen(host), dl = strlen(domain);
        const char *colon = memchr(host, ':', hl);
        if (colon)
                hl = (size_t)(colon - host);
        if (hl > 0 && host[hl - 1] == '.') /* a fully qualified name */
                hl--;
        if (hl < dl + 4 || host[hl - dl - 1] != '.' || strncasecmp(host + hl - dl, domain, dl))
                return false;
        size_t pl = 0;
        while (pl < hl && isdigit((unsigned char)host[pl]))
                pl++;
        if (pl == 0 || pl > 5 || host[pl] != '-')
                return false;
        size_t il = hl - dl - 1 - pl - 1;
        if (il == 0 || il > 63)
                return false;
        char *id = xstrndup(host + pl + 1, il);
        for (char *p = id; *p; p++)
                *p = (char)tolower((unsigned char)*p);
        *port = xstrndup(host, pl);
        *box = id;
        return true;
}

/* The request target for the box: for the path form the raw target minus
 * /v1/sandboxes/ID/ports/PORT (which must be spelled as the decoded path
 * says: no escapes there), else all of it. NULL when it does not fit. */
static char *target_of(ab_req *r, bool by_host)
{
        const char *raw = ab_conns_raw_uri(r->conn);
        if (!raw || raw[0] != '/')
                return NULL;
        for (const char *p = raw; *p; p++)
                if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
                        return NULL;
        if (by_host)
                return xstrdup(raw);
        _cleanup_free_ char *pre = xasprintf("/v1/sandboxes/%s/ports/%s", r->seg[2], r->seg[4]);
        size_t n = strlen(pre);
        if (strncmp(raw, pre, n) != 0 || (raw[n] && raw[n] != '/' && raw[n] != '?'))
                return NULL;
        return raw[n] == '/' ? xstrdup(raw + n) : xasprintf("/%s", raw + n);
}

bool ports_by_host(ab_req *r)
{
        _cleanup_free_ char *port = NULL, *box = NULL;
        return host_match(req_header(r, "Host"), r->srv->cfg->ports_domain, &port, &box);
}

bool ports_match(ab_req *r)
{
        char *port = NULL, *box = NULL;
        bool by_host = host_match(req_header(r, "Host"), r->srv->cfg->ports_domain, &port, &box);
        if (!by_host) {
                if (r->n_seg < 5 || strcmp(r->seg[0], "v1") || strcmp(r->seg[1], "sandboxes") ||
                    strcmp(r->seg[3], "ports"))
                        return false;
                /* PUT and DELETE of .../public are the public switch (routes) */
                if (r->n_seg == 6 && !strcmp(r->seg[5], "public") &&
                    (!strcmp(r->method, "PUT") || !strcmp(r->method, "DELETE")))
                        return false;
                box = xstrdup(r->seg[2]);
                port = xstrdup(r->seg[4]);
        }
        ab_proxy *px = xzalloc(sizeof(*px));
        px->box = box;
        px->port_str = port;
        px->by_host = by_host;
        px->fd = -1;
        px->target = target_of(r, by_host);
        r->proxy = px;
        return true;
}

/* ---- opening (a worker) ---- */

/* 1..65535 from decimal digits, else 0. */
static int port_num(const char *s)
{
        if (!s || !*s || strlen(s) > 5)
                return 0;
        int v = 0;
        for (const char *p = s; *p; p++) {
                if (!isdigit((unsigned char)*p))
                        return 0;
                v = v * 10 + (*p - '0');
        }
        return v <= 65535 ? v : 0;
}

/* A connection to 127.0.0.1:port (then [::1]:port) inside the netns of the
 * box's init. -errno. */
static int connect_in_box(pid_t pid, int port, int timeout_ms)
{
        _cleanup_close_ int ns = ab_netns_open(pid);
        if (ns < 0)
                return ns;
        struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
        a6.sin6_addr = in6addr_loopback;
        const struct sockaddr *addrs[] = {(struct sockaddr *)&a4, (struct sockaddr *)&a6};
        socklen_t lens[] = {sizeof(a4), sizeof(a6)};
        int err = -ECONNREFUSED;
        for (int i = 0; i < 2; i++) {
                int fd = ab_netns_socket(ns, addrs[i]->sa_family, SOCK_STREAM | SOCK_NONBLOCK, 0,
                                         NULL, 0, 0);
                if (fd < 0) {
                        err = fd;
                        continue;
                }
                if (connect(fd, addrs[i], lens[i]) == 0)
                        return fd;
                if (errno == EINPROGRESS) {
                        struct pollfd p = {.fd = fd, .events = POLLOUT};
                        int so = 0;
                        socklen_t sl = sizeof(so);
                        if (poll(&p, 1, timeout_ms) == 1 &&
                            getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) == 0 && so == 0)
                                return fd;
                        err = so ? -so : -ETIMEDOUT;
                } else {
                        err = -errno;
                }
                close(fd);
                if (err != -ECONNREFUSED && err != -EADDRNOTAVAIL && err != -EAFNOSUPPORT)
                        break;
        }
        return err;
}

/* Headers never passed on: the connection's own (RFC 9110 7.6.1), the
 * body's framing (set again by us), what we set ourselves, and Expect
 * (libmicrohttpd answered the client's 100-continue; the body follows
 * anyway). */
static bool hop_header(const char *n)
{
        static const char *const hop[] = {"Connection",
                                          "Keep-Alive",
                                          "Proxy-Connection",
                                          "TE",
                                          "Trailer",
                                          "Transfer-Encoding",
                                          "Upgrade",
                                          "Proxy-Authorization",
                                          "Proxy-Authenticate",
                                          "Content-Length",
                                          "X-Forwarded-For",
                                          "X-Forwarded-Proto",
                                          "X-Forwarded-Host",
                                          "Expect",
                                          NULL};
        for (const char *const *h = hop; *h; h++)
                if (strcasecmp(n, *h) == 0)
                        return true;
        return false;
}

/* CR, LF or NUL would end a line early in the head we send. */
static bool clean(const char *s)
{
        return s && !strpbrk(s, "\r\n");
}

typedef struct head_ctx {
        ab_req *r;
        ab_buf *b;
        const char *connection; /* the Connection header: names more hop headers */
        bool drop_auth;         /* a private port: Authorization was the credential */
        bool bad;
        int n_cl, n_te;
        const char *xff;
} head_ctx;

/* Sec-WebSocket-Protocol minus this server's own offers: a browser's token
 * ("bearer.TOKEN", http/ws.h) and the terminal protocol that carries it
 * never reach a box. */
static void protocols_without_ours(ab_buf *b, const char *v)
{
        _cleanup_buf_ ab_buf keep = {0};
        for (const char *p = v; *p;) {
                while (*p == ' ' || *p == '\t' || *p == ',')
                        p++;
                const char *e = p;
                while (*e && *e != ',')
                        e++;
                const char *t = e;
                while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
                        t--;
                size_t n = (size_t)(t - p);
                bool ours = (n > 7 && strncmp(p, "bearer.", 7) == 0) ||
                            (n == strlen(WS_PROTOCOL) && strncmp(p, WS_PROTOCOL, n) == 0);
                if (n && !ours) {
                        if (keep.n)
                                ab_buf_puts(&keep, ", ");
                        ab_buf_add(&keep, p, n);
                }
                p = e;
        }
        if (keep.n)
                ab_buf_printf(b, "Sec-WebSocket-Protocol: %s\r\n", keep.p);
}

/* True when the header k: v carries a credential of this server, which
 * the box must never see: the Authorization of a private port (it was the
 * credential) or any holding a token or key of this server (a public
 * port's client may send its token along), X-API-Key and the OpenSandbox
 * SDK's key holding one, and E2B's envd access token (X-Access-Token,
 * a box's own secret) always. */
static bool credential(head_ctx *h, const char *k, const char *v)
{
        if (!v)
                return false;
        if (strcasecmp(k, "Authorization") == 0) {
                if (h->drop_auth)
                        return true;
                if (strncasecmp(v, "Bearer ", 7) != 0)
                        return false;
                const char *tok = v + 7;
                while (*tok == ' ')
                        tok++;
                return req_is_credential(h->r, tok);
        }
        if (strcasecmp(k, "X-Access-Token") == 0)
                return true;
        if (strcasecmp(k, "X-API-Key") == 0 || strcasecmp(k, "OPEN-SANDBOX-API-KEY") == 0)
                return h->drop_auth || req_is_credential(h->r, v);
        return false;
}

static enum MHD_Result head_hdr(void *cls, enum MHD_ValueKind kind, const char *k, const char *v)
{
        head_ctx *h = cls;
        (void)kind;
        if (!clean(k) || !clean(v ? v : "")) {
                h->bad = true;
                return MHD_NO;
        }
        if (strcasecmp(k, "Content-Length") == 0)
                h->n_cl++;
        if (strcasecmp(k, "Transfer-Encoding") == 0)
                h->n_te++;
        if (strcasecmp(k, "X-Forwarded-For") == 0 && !h->xff)
                h->xff = v;
        if (hop_header(k) || (h->connection && ab_http_list_has(h->connection, k)))
                return MHD_YES;
        if (credential(h, k, v))
                return MHD_YES;
        if (strcasecmp(k, "Sec-WebSocket-Protocol") == 0 && v) {
                protocols_without_ours(h->b, v);
                return MHD_YES;
        }
        ab_buf_printf(h->b, "%s: %s\r\n", k, v ? v : "");
        return MHD_YES;
}

static bool method_ok(const char *m)
{
        if (!m || !*m)
                return false;
        for (const char *p = m; *p; p++)
                if (!isalpha((unsigned char)*p) && *p != '-' && *p != '_')
                        return false;
        return true;
}

/* The client's address as text. */
static void peer_text(ab_req *r, char *out, size_t n)
{
        snprintf(out, n, "unknown");
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!ci || !ci->client_addr)
                return;
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)n);
        else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out,
                          (socklen_t)n);
}

/* The head for the box's server into b; an error answered when the request
 * cannot be passed on safely (-1). */
static int build_head(ab_req *r, ab_proxy *px, bool drop_auth, ab_buf *b, enum MHD_Result *ret)
{
        const char *conn_h = req_header(r, "Connection"), *up = req_header(r, "Upgrade");
        px->upgrade = up && conn_h && ab_http_list_has(conn_h, "upgrade");
        ab_buf_printf(b, "%s %s HTTP/1.1\r\n", r->method, px->target);
        head_ctx h = {.r = r, .b = b, .connection = conn_h, .drop_auth = drop_auth};
        MHD_get_connection_values(r->conn, MHD_HEADER_KIND, head_hdr, &h);
        const char *te = req_header(r, "Transfer-Encoding");
        const char *cl = req_header(r, "Content-Length");
        uint64_t len = 0;
        if (h.bad) {
                *ret = resp_error(r, 400, "invalid_argument",
                                  "a header holds a line break: not passed on");
                return -1;
        }
        if (h.n_cl > 1 || h.n_te > 1 || (te && cl)) {
                *ret = resp_error(r, 400, "invalid_argument",
                                  "conflicting Content-Length / Transfer-Encoding headers");
                return -1;
        }
        if (te && strcasecmp(te, "chunked") != 0) {
                *ret = resp_error(r, 501, "unsupported", "Transfer-Encoding \"%s\"", te);
                return -1;
        }
        if (cl && ab_http_content_length(cl, &len) < 0) {
                *ret = resp_error(r, 400, "invalid_argument", "bad Content-Length");
                return -1;
        }
        if (!clean(up ? up : "")) {
                *ret = resp_error(r, 400, "invalid_argument", "bad Upgrade header");
                return -1;
        }
        char peer[INET6_ADDRSTRLEN + 1];
        peer_text(r, peer, sizeof(peer));
        if (h.xff)
                ab_buf_printf(b, "X-Forwarded-For: %s, %s\r\n", h.xff, peer);
        else
                ab_buf_printf(b, "X-Forwarded-For: %s\r\n", peer);
        const char *host = req_header(r, "Host");
        ab_buf_printf(b, "X-Forwarded-Proto: http\r\n");
        if (host)
                ab_buf_printf(b, "X-Forwarded-Host: %s\r\n", host);
        px->chunked = te != NULL;
        if (px->chunked)
                ab_buf_puts(b, "Transfer-Encoding: chunked\r\n");
        else if (cl)
                ab_buf_printf(b, "Content-Length: %" PRIu64 "\r\n", len);
        if (px->upgrade)
                ab_buf_printf(b, "Connection: Upgrade\r\nUpgrade: %s\r\n", up);
        else
                ab_buf_puts(b, "Connection: close\r\n");
        ab_buf_puts(b, "\r\n");
        return 0;
}

static enum MHD_Result unreachable(ab_req *r, ab_proxy *px, int e)
{
        if (e == -ECONNREFUSED || e == -EADDRNOTAVAIL)
                return resp_error(r, 502, "unavailable", "nothing listens on port %d in box %s",
                                  px->port, px->box);
        if (e == -ETIMEDOUT)
                return resp_error(r, 504, "timeout", "port %d of box %s does not answer", px->port,
                                  px->box);
        return resp_error(r, 502, "unavailable", "cannot reach port %d in box %s: %s", px->port,
                          px->box, strerror(-e));
}

/* The host pid of the box's init. A box recorded running whose init died
 * is started again, as a connection to its init would (use_connect). */
static int init_pid(ab_server *s, ab_use *u, pid_t *pid, ab_err **err)
{
        ab_backend *b = ab_manager_backend(s->mgr);
        for (int attempt = 0; attempt < 2; attempt++) {
                ab_box_info info = {0};
                if (b->ops->info(b, u->rec.backend_id, &info, err) < 0)
                        return -1;
                *pid = info.init_pid;
                bool running = info.status == AB_BOX_RUNNING;
                ab_box_info_clear(&info);
                if (running && *pid > 0)
                        return 0;
                int fd = ab_manager_use_connect(s->mgr, u, err);
                if (fd < 0)
                        return -1;
                close(fd);
        }
        return ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s is not running", u->rec.id);
}

enum MHD_Result ports_open(ab_req *r, bool *done)
{
        ab_server *s = r->srv;
        ab_proxy *px = r->proxy;
        *done = true;
        px->port = port_num(px->port_str);
        /* Who may: the port is public, or the caller may use the box. An
         * unknown box is answered only to an authenticated caller. */
        ab_box_rec rec = {0};
        ab_err *e = NULL;
        bool known = px->port && ab_manager_get(s->mgr, px->box, NULL, &rec, &e) == 0;
        bool pub = known && ab_box_port_public(&rec, px->port);
        ab_box_rec_clear(&rec);
        ab_err_free(&e);
        bool ok = pub;
        enum MHD_Result ret = MHD_YES;
        if (!pub) {
                ret = req_authenticate(r, &ok);
                if (!ok)
                        return ret;
        }
        if (!px->port)
                return resp_error(r, 400, "invalid_argument", "port \"%s\" is not in 1..65535",
                                  px->port_str);
        if (!px->target)
                return resp_error(r, 400, "invalid_argument",
                                  "the request target cannot be passed on (escaped characters "
                                  "in /v1/sandboxes/ID/ports/PORT, or bytes outside ASCII)");
        if (!method_ok(r->method))
                return resp_error(r, 400, "invalid_argument", "bad method");
        _cleanup_buf_ ab_buf head = {0};
        if (build_head(r, px, !pub || r->scope, &head, &ret) < 0)
                return ret;
        /* A use of the box: a paused box is thawed, a stopped one started,
         * and it counts as activity; ended when the request is done. */
        ab_use *u = xzalloc(sizeof(*u));
        if (ab_manager_use_begin(s->mgr, px->box, pub ? NULL : r->scope, u, &e) < 0) {
                free(u);
                return resp_err(r, e);
        }
        r->deferred_use = u;
        pid_t pid = 0;
        if (init_pid(s, u, &pid, &e) < 0)
                return resp_err(r, e);
        int fd = connect_in_box(pid, px->port, (int)s->cfg->ports_timeout_ms);
        if (fd < 0)
                return unreachable(r, px, fd);
        px->fd = fd;
        int rc = ab_send_all(fd, head.p, head.n, (int)s->cfg->ports_timeout_ms);
        if (rc < 0)
                return unreachable(r, px, rc == -EPIPE ? -ECONNREFUSED : rc);
        px->park = ab_park_new(s->http.conns, r->conn);
        *done = false;
        return MHD_YES;
}

/* ---- the request's body (MHD's thread: never blocks) ---- */

/* Sends what out holds until the box's server takes no more. false when the
 * connection broke. */
static bool flush_out(ab_proxy *px)
{
        size_t sent = 0;
        while (sent < px->out.n) {
                ssize_t k =
                    send(px->fd, px->out.p + sent, px->out.n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (k > 0) {
                        sent += (size_t)k;
                        continue;
                }
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        break;
                ab_buf_drop(&px->out, sent);
                return false;
        }
        ab_buf_drop(&px->out, sent);
        return true;
}

enum MHD_Result ports_body(ab_req *r, const char *data, size_t *size)
{
        ab_proxy *px = r->proxy;
        size_t off = 0;
        for (;;) {
                if (px->failed) {
                        *size = 0; /* the box went away: its answer (or 502) decides */
                        return MHD_YES;
                }
                size_t room = px->out.n < BODY_BUF ? BODY_BUF - px->out.n : 0;
                size_t k = *size < room ? *size : room;
                if (k) {
                        /* MHD counts the first bytes as taken: the rest
                         * comes again from data + what was taken */
                        if (px->chunked)
                                ab_buf_printf(&px->out, "%zx\r\n", k);
                        ab_buf_add(&px->out, data + off, k);
                        if (px->chunked)
                                ab_buf_puts(&px->out, "\r\n");
                        off += k;
                        *size -= k;
                }
                size_t before = px->out.n;
                if (!flush_out(px)) {
                        px->failed = true;
                        continue;
                }
                /* A box that takes a little now and then (a closed window
                 * reopening as the kernel compacts its queue) is still
                 * stalled: the deadline restarts after BODY_BUF bytes. */
                px->progress += before - px->out.n;
                if (px->progress >= BODY_BUF) {
                        px->write_deadline = 0;
                        px->progress = 0;
                }
                if (!*size)
                        return MHD_YES;
                /* full, and the box takes nothing now: wait for it */
                int64_t now = (int64_t)ab_now_ms();
                if (!px->write_deadline) {
                        px->write_deadline = now + r->srv->cfg->ports_timeout_ms;
                        px->progress = 0;
                } else if (now >= px->write_deadline) {
                        px->failed = px->timed_out = true;
                        continue;
                }
                switch (ab_park_suspend_write(px->park, px->fd, px->write_deadline)) {
                case AB_PARK_SUSPENDED:
                        return MHD_YES;
                case AB_PARK_RETRY:
                        continue;
                default:
                        px->failed = true;
                        continue;
                }
        }
}

/* ---- the answer's body (MHD's thread: a content reader that parks) ---- */

enum { B_LENGTH, B_CHUNKED, B_EOF };

typedef struct pbody {
        int fd;
        int mode;
        uint64_t left; /* B_LENGTH */
        ab_chunked ch; /* B_CHUNKED */
        bool done;
        char *in;
        size_t start, end;
        ab_park *park;
} pbody;

static ssize_t pbody_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        pbody *b = cls;
        (void)pos;
        for (;;) {
                if (b->done || (b->mode == B_LENGTH && b->left == 0))
                        return MHD_CONTENT_READER_END_OF_STREAM;
                if (b->start < b->end) {
                        size_t avail = b->end - b->start, k = avail < max ? avail : max;
                        if (b->mode == B_CHUNKED) {
                                size_t used = 0, made = 0;
                                int rc = ab_chunked_feed(&b->ch, b->in + b->start, avail, buf, max,
                                                         &used, &made);
                                b->start += used;
                                if (rc < 0)
                                        return MHD_CONTENT_READER_END_WITH_ERROR;
                                if (rc == 1)
                                        b->done = true;
                                if (made)
                                        return (ssize_t)made;
                                continue;
                        }
                        if (b->mode == B_LENGTH && k > b->left)
                                k = (size_t)b->left;
                        memcpy(buf, b->in + b->start, k);
                        b->start += k;
                        if (b->mode == B_LENGTH)
                                b->left -= k;
                        return (ssize_t)k;
                }
                b->start = b->end = 0;
                ssize_t n = read(b->fd, b->in, READ_BUF);
                if (n > 0) {
                        b->end = (size_t)n;
                        continue;
                }
                if (n == 0)
                        return b->mode == B_EOF ? MHD_CONTENT_READER_END_OF_STREAM
                                                : MHD_CONTENT_READER_END_WITH_ERROR;
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                switch (ab_park_suspend(b->park, b->fd, false, 0, NULL, NULL)) {
                case AB_PARK_SUSPENDED:
                        return 0;
                case AB_PARK_RETRY:
                        continue;
                default:
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                }
        }
}

static void pbody_free(void *cls)
{
        pbody *b = cls;
        if (b->fd >= 0)
                close(b->fd);
        ab_park_free(b->park);
        free(b->in);
        free(b);
}

/* ---- upgraded connections: a thread each, bytes both ways ---- */

typedef struct relay {
        struct relay *next;
        ab_proxy *px; /* the request, until on_upgrade runs */
        int box, client;
        struct MHD_UpgradeResponseHandle *urh;
        ab_buf to_client, to_box; /* bytes read and not yet written */
} relay;

static pthread_mutex_t relay_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t relay_gone = PTHREAD_COND_INITIALIZER;
static relay *relays;
static int relay_count;
static bool relay_stopping;

static void relay_free(relay *x)
{
        ab_buf_free(&x->to_client);
        ab_buf_free(&x->to_box);
        free(x);
}

/* One direction: reads from `from` into q while there is room, writes q
 * to `to`. 1 when `from` ended and q is drained, -1 when a side broke. */
static int relay_step(int from, short rev, int to, ab_buf *q, bool *eof)
{
        if (!*eof && (rev & (POLLIN | POLLHUP | POLLERR)) && q->n < RELAY_BUF) {
                char *p = ab_buf_reserve(q, RELAY_BUF);
                ssize_t n = recv(from, p, RELAY_BUF, MSG_DONTWAIT);
                if (n > 0)
                        ab_buf_commit(q, (size_t)n);
                else if (n == 0 || (errno != EAGAIN && errno != EINTR))
                        *eof = true;
        }
        if (q->n) {
                ssize_t n = send(to, q->p, q->n, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n > 0)
                        ab_buf_drop(q, (size_t)n);
                else if (n < 0 && errno != EAGAIN && errno != EINTR)
                        return -1;
        }
        return *eof && q->n == 0;
}

static void *relay_main(void *arg)
{
        relay *x = arg;
        bool eof_c = false, eof_b = false, shut_b = false, shut_c = false, box_gone = false;
        for (;;) {
                struct pollfd p[2] = {
                    {.fd = x->client,
                     .events = (short)((!eof_c && x->to_box.n < RELAY_BUF ? POLLIN : 0) |
                                       (x->to_client.n ? POLLOUT : 0))},
                    {.fd = box_gone ? -1 : x->box,
                     .events = (short)((!eof_b && x->to_client.n < RELAY_BUF ? POLLIN : 0) |
                                       (x->to_box.n ? POLLOUT : 0))}};
                if (poll(p, 2, RELAY_IDLE_MS) < 0 && errno != EINTR)
                        break;
                if ((p[0].revents | p[1].revents) & POLLNVAL)
                        break;
                int up = relay_step(x->client, p[0].revents, x->box, &x->to_box, &eof_c);
                int down = relay_step(x->box, p[1].revents, x->client, &x->to_client, &eof_b);
                if (up < 0 || down < 0)
                        break;
                /* a side that ended: pass the half-close on */
                if (up == 1 && !shut_b) {
                        shutdown(x->box, SHUT_WR);
                        shut_b = true;
                }
                if (down == 1 && !shut_c) {
                        shutdown(x->client, SHUT_WR);
                        shut_c = true;
                }
                if (shut_b && shut_c)
                        break;
                /* a side closed both ways is polled no more (it would wake
                 * poll at once, again and again) */
                if (eof_c && p[0].revents & (POLLHUP | POLLERR))
                        break; /* nothing can reach the client any more */
                if (eof_b && p[1].revents & (POLLHUP | POLLERR)) {
                        box_gone = shut_b = true;
                        ab_buf_free(&x->to_box);
                }
        }
        pthread_mutex_lock(&relay_lock);
        for (relay **pp = &relays; *pp; pp = &(*pp)->next)
                if (*pp == x) {
                        *pp = x->next;
                        break;
                }
        relay_count--;
        pthread_cond_broadcast(&relay_gone);
        pthread_mutex_unlock(&relay_lock);
        /* the box's socket is closed by the request's end (ports_free),
         * which MHD calls once the upgraded connection is closed */
        struct MHD_UpgradeResponseHandle *urh = x->urh;
        relay_free(x);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        return NULL;
}

static void on_upgrade(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
                       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
        relay *x = cls;
        (void)conn;
        (void)con_cls;
        x->px->relay_started = true; /* x is the thread's now (MHD's thread: no race
                                      * with the request's end) */
        x->px = NULL;
        x->client = sock;
        x->urh = urh;
        /* A client gone without a word would hold the box in use forever:
         * TCP keepalive finds it out within a few minutes. */
        int on = 1, idle = 60, intvl = 15, cnt = 4;
        setsockopt(sock, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
        setsockopt(sock, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        setsockopt(sock, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
        setsockopt(sock, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
        ab_buf_add(&x->to_box, extra_in, extra_in_size);
        pthread_mutex_lock(&relay_lock);
        bool go = !relay_stopping;
        if (go) {
                x->next = relays;
                relays = x;
                relay_count++;
        }
        pthread_mutex_unlock(&relay_lock);
        if (go && spawn_detached(relay_main, x) == 0)
                return;
        if (go) {
                pthread_mutex_lock(&relay_lock);
                for (relay **pp = &relays; *pp; pp = &(*pp)->next)
                        if (*pp == x) {
                                *pp = x->next;
                                break;
                        }
                relay_count--;
                pthread_mutex_unlock(&relay_lock);
        }
        relay_free(x);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

void ports_shutdown(void)
{
        pthread_mutex_lock(&relay_lock);
        relay_stopping = true;
        for (relay *x = relays; x; x = x->next) {
                shutdown(x->client, SHUT_RDWR);
                shutdown(x->box, SHUT_RDWR);
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 10;
        while (relay_count > 0 &&
               pthread_cond_timedwait(&relay_gone, &relay_lock, &until) != ETIMEDOUT)
                ;
        pthread_mutex_unlock(&relay_lock);
}

/* ---- the answer (a worker) ---- */

/* Reads the answer's head (1xx other than 101 skipped) into h; the bytes
 * after it stay in px->in. 1 = complete; 0 = parked until the box sends
 * more or the deadline passes; -1 = answered (or the client is gone). */
static int read_head(ab_req *r, ab_proxy *px, ab_http_head *h, enum MHD_Result *ret)
{
        for (;;) {
                int k = ab_http_head_parse(px->in.p ? px->in.p : "", px->in.n, h);
                if (k > 0 && h->status < 200 && h->status != 101) {
                        ab_buf_drop(&px->in, h->head_len);
                        ab_http_head_clear(h);
                        continue;
                }
                if (k > 0)
                        return 1;
                if (k < 0) {
                        *ret = resp_error(r, 502, "unavailable",
                                          "the server on port %d in box %s sent a malformed "
                                          "answer",
                                          px->port, px->box);
                        return -1;
                }
                char *dst = ab_buf_reserve(&px->in, READ_BUF);
                ssize_t got = recv(px->fd, dst, READ_BUF, MSG_DONTWAIT);
                if (got > 0) {
                        ab_buf_commit(&px->in, (size_t)got);
                        continue;
                }
                if (got < 0 && errno == EINTR)
                        continue;
                if (got < 0 && errno == EAGAIN) {
                        if ((int64_t)ab_now_ms() >= px->head_deadline) {
                                *ret = resp_error(r, 504, "timeout",
                                                  "the server on port %d in box %s did not "
                                                  "answer in %lld ms",
                                                  px->port, px->box,
                                                  (long long)r->srv->cfg->ports_timeout_ms);
                                return -1;
                        }
                        switch (ab_park_suspend(px->park, px->fd, false, px->head_deadline, NULL,
                                                NULL)) {
                        case AB_PARK_SUSPENDED:
                                *ret = MHD_YES;
                                return 0;
                        case AB_PARK_RETRY:
                                continue;
                        default:
                                *ret = MHD_NO; /* the client left, or the server stops */
                                return -1;
                        }
                }
                *ret = resp_error(r, 502, "unavailable",
                                  "the server on port %d in box %s closed the connection "
                                  "without an answer",
                                  px->port, px->box);
                return -1;
        }
}

/* The rest of the request's body (and a chunked body's end) to the box.
 * 1 = done (or failed: the box's answer decides); 0 = parked; -1 = the
 * client left. */
static int finish_body(ab_req *r, ab_proxy *px)
{
        if (px->chunked && !px->end_queued) {
                ab_buf_puts(&px->out, "0\r\n\r\n");
                px->end_queued = true;
        }
        for (;;) {
                if (px->failed)
                        return 1;
                size_t before = px->out.n;
                if (!flush_out(px)) {
                        px->failed = true;
                        return 1;
                }
                if (!px->out.n)
                        return 1;
                int64_t now = (int64_t)ab_now_ms();
                px->progress += before - px->out.n;
                if (!px->write_deadline || px->progress >= BODY_BUF) {
                        px->write_deadline = now + r->srv->cfg->ports_timeout_ms;
                        px->progress = 0;
                } else if (now >= px->write_deadline) {
                        px->failed = px->timed_out = true;
                        return 1;
                }
                switch (ab_park_suspend_write(px->park, px->fd, px->write_deadline)) {
                case AB_PARK_SUSPENDED:
                        return 0;
                case AB_PARK_RETRY:
                        continue;
                default:
                        return -1;
                }
        }
}

/* The answer's headers onto resp, minus the connection's own and framing. */
static void copy_headers(struct MHD_Response *resp, const ab_http_head *h, bool upgrade)
{
        const char *conn_h = ab_http_head_get(h, "Connection");
        for (size_t i = 0; i < h->n; i++) {
                const char *k = h->name[i];
                if (upgrade && strcasecmp(k, "Upgrade") == 0) {
                        MHD_add_response_header(resp, k, h->value[i]);
                        continue;
                }
                if (hop_header(k) || (conn_h && ab_http_list_has(conn_h, k)))
                        continue;
                MHD_add_response_header(resp, k, h->value[i]);
        }
}

static enum MHD_Result answer_upgrade(ab_req *r, ab_proxy *px, ab_http_head *h, ab_buf *in)
{
        if (!px->upgrade || !ab_http_head_get(h, "Upgrade"))
                return resp_error(r, 502, "unavailable",
                                  "the server on port %d in box %s switched protocols unasked",
                                  px->port, px->box);
        pthread_mutex_lock(&relay_lock);
        bool full = relay_stopping || relay_count >= RELAY_MAX;
        pthread_mutex_unlock(&relay_lock);
        if (full)
                return resp_error(r, 503, "unavailable",
                                  "too many upgraded port connections (%d); try again later",
                                  RELAY_MAX);
        enum MHD_Result ret;
        ab_stream_slot *slot = req_stream_slot(r, &ret);
        if (!slot)
                return ret;
        px->slot = slot; /* the request's: released when it ends */
        relay *x = xzalloc(sizeof(*x));
        x->box = px->fd; /* still owned by px: closed when the request ends */
        x->client = -1;
        x->px = px;
        ab_buf_add(&x->to_client, in->p + h->head_len, in->n - h->head_len);
        /* When the client goes away before the 101 is sent, on_upgrade never
         * runs: x, the box's socket, the slot and the use of the box end with
         * the request (ports_free). */
        struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgrade, x);
        if (!resp) {
                relay_free(x);
                return resp_error(r, 502, "unavailable", "this server cannot relay upgrades");
        }
        px->relay = x;
        copy_headers(resp, h, true);
        return resp_send(r, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}

enum MHD_Result ports_answer(ab_req *r)
{
        ab_proxy *px = r->proxy;
        int k = finish_body(r, px);
        if (k <= 0)
                return k == 0 ? MHD_YES : MHD_NO;
        if (px->timed_out)
                return resp_error(r, 504, "timeout",
                                  "the server on port %d in box %s did not take the request's "
                                  "body in %lld ms",
                                  px->port, px->box, (long long)r->srv->cfg->ports_timeout_ms);
        ab_buf_free(&px->out);
        if (!px->head_deadline)
                px->head_deadline = (int64_t)ab_now_ms() + r->srv->cfg->ports_timeout_ms;
        ab_http_head h = {0};
        enum MHD_Result ret;
        if ((k = read_head(r, px, &h, &ret)) <= 0)
                return ret;
        ab_buf *in = &px->in;
        if (h.status == 101) {
                ret = answer_upgrade(r, px, &h, in);
                ab_http_head_clear(&h);
                return ret;
        }
        /* the body's framing, as RFC 9112 6.3 orders it */
        const char *te = ab_http_head_get(&h, "Transfer-Encoding");
        const char *cl = ab_http_head_get(&h, "Content-Length");
        bool no_body = !strcmp(r->method, "HEAD") || h.status == 204 || h.status == 304;
        pbody *b = xzalloc(sizeof(*b));
        b->fd = -1;
        b->mode = B_EOF;
        uint64_t size = MHD_SIZE_UNKNOWN;
        int bad = 0;
        if (te) {
                if (!ab_http_list_has(te, "chunked"))
                        bad = 1;
                b->mode = B_CHUNKED;
        } else if (cl) {
                for (size_t i = 0; i < h.n; i++) /* every Content-Length must agree */
                        if (!strcasecmp(h.name[i], "Content-Length") && strcmp(h.value[i], cl) != 0)
                                bad = 1;
                if (ab_http_content_length(cl, &b->left) < 0)
                        bad = 1;
                b->mode = B_LENGTH;
                size = b->left;
        }
        if (bad) {
                free(b);
                ab_http_head_clear(&h);
                return resp_error(r, 502, "unavailable",
                                  "the server on port %d in box %s sent a body framed in a way "
                                  "this proxy does not pass on",
                                  px->port, px->box);
        }
        struct MHD_Response *resp;
        if (no_body && (size == MHD_SIZE_UNKNOWN || h.status == 204 || h.status == 304)) {
                free(b);
                resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        } else {
                b->in = xmalloc(READ_BUF > in->n - h.head_len ? READ_BUF : in->n - h.head_len);
                memcpy(b->in, in->p + h.head_len, in->n - h.head_len);
                b->end = in->n - h.head_len;
                b->fd = px->fd; /* the response owns the connection now */
                px->fd = -1;
                b->park = ab_park_new(r->srv->http.conns, r->conn);
                resp = MHD_create_response_from_callback(size, READ_BUF, pbody_read, b, pbody_free);
        }
        copy_headers(resp, &h, false);
        unsigned st = (unsigned)h.status;
        ab_http_head_clear(&h);
        return resp_send(r, st, resp);
}

void ports_free(ab_proxy *px)
{
        if (!px)
                return;
        if (px->fd >= 0)
                close(px->fd);
        if (px->park)
                ab_park_free(px->park);
        if (px->relay && !px->relay_started)
                relay_free(px->relay);
        ab_stream_slot_release(px->slot);
        ab_buf_free(&px->out);
        ab_buf_free(&px->in);
        free(px->box);
        free(px->port_str);
        free(px->target);
        free(px);
}

/* ---- public ports ---- */

static enum MHD_Result set_public(ab_req *r, bool pub)
{
        int port = port_num(r->seg[4]);
        if (!port)
                return resp_error(r, 400, "invalid_argument", "port \"%s\" is not in 1..65535",
                                  r->seg[4]);
        ab_box_rec rec;
        ab_err *e = NULL;
        if (ab_manager_set_port_public(r->srv->mgr, r->seg[2], r->scope, port, pub, &rec, &e) < 0)
                return resp_err(r, e);
        json_t *list = json_object_get(rec.spec, "public_ports");
        json_t *j =
            json_pack("{s:s,s:i,s:b,s:o}", "sandbox_id", rec.id, "port", port, "public", pub,
                      "public_ports", json_is_array(list) ? json_incref(list) : json_array());
        ab_box_rec_clear(&rec);
        return resp_json(r, 200, j);
}

/* PUT /v1/sandboxes/{id}/ports/{port}/public */
enum MHD_Result route_port_public_put(ab_req *r, const char *id)
{
        (void)id;
        return set_public(r, true);
}

/* DELETE /v1/sandboxes/{id}/ports/{port}/public */
enum MHD_Result route_port_public_delete(ab_req *r, const char *id)
{
        (void)id;
        return set_public(r, false);
}
