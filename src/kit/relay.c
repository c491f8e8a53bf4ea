/* relay.c - a request passed on to another HTTP server over a socket the
 * opener connected (kit/relay.h): the body as it arrives, the answer
 * streamed back, an upgrade relayed byte for byte on a thread of its own.
 *
 * A plain request costs no thread of its own: MHD's thread writes the body
 * as it arrives and reads the answer, parking the connection whenever the
 * other server does not take or send anything (http/conn.h), so a slow
 * server holds no worker. An upgrade (WebSocket) answered 101 gets a thread
 * that moves bytes both ways, counted as a stream. */
#include "kit/relay.h"
#include "http/httpmsg.h"
#include "base/log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define BODY_BUF      (64 * 1024) /* request body bytes held for a slow server */
#define READ_BUF      (64 * 1024)
#define RELAY_MAX     512   /* upgraded connections relayed at once, server-wide */
#define RELAY_BUF     65536 /* bytes in flight each way */
#define RELAY_IDLE_MS (-1)  /* relays end with either side, never by silence */

ab_proxy *relay_new(const char *peer, int64_t timeout_ms, int64_t head_timeout_ms)
{
        ab_proxy *px = xzalloc(sizeof(*px));
        px->peer = xstrdup(peer);
        px->timeout_ms = timeout_ms;
        px->head_timeout_ms = head_timeout_ms;
        px->fd = -1;
        return px;
}

/* Headers never passed on: the connection's own (RFC 9110 7.6.1), the
 * body's framing (set again by us), what we set ourselves, and Expect
 * (libmicrohttpd answered the client's 100-continue; the body follows
 * anyway). */
bool relay_hop_header(const char *n)
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

bool relay_method_ok(const char *m)
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

typedef struct head_ctx {
        ab_req *r;
        ab_buf *b;
        const char *connection; /* the Connection header: names more hop headers */
        relay_hdr_fn hdr;
        void *arg;
        bool bad;
        int n_cl, n_te;
        const char *xff;
} head_ctx;

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
        if (relay_hop_header(k) || (h->connection && ab_http_list_has(h->connection, k)))
                return MHD_YES;
        if (h->hdr && h->hdr(h->r, h->arg, h->b, k, v ? v : ""))
                return MHD_YES;
        ab_buf_printf(h->b, "%s: %s\r\n", k, v ? v : "");
        return MHD_YES;
}

int relay_head(ab_req *r, ab_proxy *px, const char *target, relay_hdr_fn hdr, void *arg,
               const char *extra, ab_buf *b, enum MHD_Result *ret)
{
        const char *conn_h = req_header(r, "Connection"), *up = req_header(r, "Upgrade");
        px->upgrade = up && conn_h && ab_http_list_has(conn_h, "upgrade");
        ab_buf_printf(b, "%s %s HTTP/1.1\r\n", r->method, target);
        head_ctx h = {.r = r, .b = b, .connection = conn_h, .hdr = hdr, .arg = arg};
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
        if (extra)
                ab_buf_puts(b, extra);
        if (px->upgrade)
                ab_buf_printf(b, "Connection: Upgrade\r\nUpgrade: %s\r\n", up);
        else
                ab_buf_puts(b, "Connection: close\r\n");
        ab_buf_puts(b, "\r\n");
        return 0;
}

void relay_connected(ab_req *r, ab_proxy *px, int fd)
{
        px->fd = fd;
        px->park = ab_park_new(r->srv->http.conns, r->conn);
}

/* Sends what out holds until the other server takes no more. false when the
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

enum MHD_Result relay_body(ab_req *r, const char *data, size_t *size)
{
        ab_proxy *px = r->proxy;
        size_t off = 0;
        for (;;) {
                if (px->failed) {
                        *size = 0; /* the server went away: its answer (or 502) decides */
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
                /* A server that takes a little now and then (a closed window
                 * reopening as the kernel compacts its queue) is still
                 * stalled: the deadline restarts after BODY_BUF bytes. */
                px->progress += before - px->out.n;
                if (px->progress >= BODY_BUF) {
                        px->write_deadline = 0;
                        px->progress = 0;
                }
                if (!*size)
                        return MHD_YES;
                /* full, and the server takes nothing now: wait for it */
                int64_t now = (int64_t)ab_now_ms();
                if (!px->write_deadline) {
                        px->write_deadline = now + px->timeout_ms;
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

typedef struct upgraded {
        struct upgraded *next;
        ab_proxy *px;       /* the request, until on_upgrade runs */
        int server, client; /* the other server's socket, the client's */
        struct MHD_UpgradeResponseHandle *urh;
        ab_buf to_client, to_server; /* bytes read and not yet written */
} upgraded;

static pthread_mutex_t relay_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t relay_gone = PTHREAD_COND_INITIALIZER;
static upgraded *relays;
static int relay_count;
static bool relay_stopping;

static void upgraded_free(upgraded *x)
{
        ab_buf_free(&x->to_client);
        ab_buf_free(&x->to_server);
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

/* Takes x off the list of relays (relay_lock held). */
static void relays_remove(upgraded *x)
{
        for (upgraded **pp = &relays; *pp; pp = &(*pp)->next)
                if (*pp == x) {
                        *pp = x->next;
                        break;
                }
        relay_count--;
}

static void *relay_main(void *arg)
{
        upgraded *x = arg;
        bool eof_c = false, eof_s = false, shut_s = false, shut_c = false, server_gone = false;
        for (;;) {
                struct pollfd p[2] = {
                    {.fd = x->client,
                     .events = (short)((!eof_c && x->to_server.n < RELAY_BUF ? POLLIN : 0) |
                                       (x->to_client.n ? POLLOUT : 0))},
                    {.fd = server_gone ? -1 : x->server,
                     .events = (short)((!eof_s && x->to_client.n < RELAY_BUF ? POLLIN : 0) |
                                       (x->to_server.n ? POLLOUT : 0))}};
                if (poll(p, 2, RELAY_IDLE_MS) < 0 && errno != EINTR)
                        break;
                if ((p[0].revents | p[1].revents) & POLLNVAL)
                        break;
                int up = relay_step(x->client, p[0].revents, x->server, &x->to_server, &eof_c);
                int down = relay_step(x->server, p[1].revents, x->client, &x->to_client, &eof_s);
                if (up < 0 || down < 0)
                        break;
                /* a side that ended: pass the half-close on */
                if (up == 1 && !shut_s) {
                        shutdown(x->server, SHUT_WR);
                        shut_s = true;
                }
                if (down == 1 && !shut_c) {
                        shutdown(x->client, SHUT_WR);
                        shut_c = true;
                }
                if (shut_s && shut_c)
                        break;
                /* a side closed both ways is polled no more (it would wake
                 * poll at once, again and again) */
                if (eof_c && p[0].revents & (POLLHUP | POLLERR))
                        break; /* nothing can reach the client any more */
                if (eof_s && p[1].revents & (POLLHUP | POLLERR)) {
                        server_gone = shut_s = true;
                        ab_buf_free(&x->to_server);
                }
        }
        pthread_mutex_lock(&relay_lock);
        relays_remove(x);
        pthread_cond_broadcast(&relay_gone);
        pthread_mutex_unlock(&relay_lock);
        /* the server's socket is closed by the request's end (relay_free),
         * which MHD calls once the upgraded connection is closed */
        struct MHD_UpgradeResponseHandle *urh = x->urh;
        upgraded_free(x);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        return NULL;
}

static void on_upgrade(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
                       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
        upgraded *x = cls;
        (void)conn;
        (void)con_cls;
        x->px->relay_started = true; /* x is the thread's now (MHD's thread: no race
                                      * with the request's end) */
        x->px = NULL;
        x->client = sock;
        x->urh = urh;
        /* A client gone without a word would hold the relay (and a box in
         * use) forever: TCP keepalive finds it out within a few minutes. */
        int on = 1, idle = 60, intvl = 15, cnt = 4;
        setsockopt(sock, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
        setsockopt(sock, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        setsockopt(sock, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
        setsockopt(sock, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
        ab_buf_add(&x->to_server, extra_in, extra_in_size);
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
                relays_remove(x);
                pthread_mutex_unlock(&relay_lock);
        }
        upgraded_free(x);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

void relay_shutdown(void)
{
        pthread_mutex_lock(&relay_lock);
        relay_stopping = true;
        for (upgraded *x = relays; x; x = x->next) {
                shutdown(x->client, SHUT_RDWR);
                shutdown(x->server, SHUT_RDWR);
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
 * after it stay in px->in. 1 = complete; 0 = parked until the server sends
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
                                          "%s sent a malformed "
                                          "answer",
                                          px->peer);
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
                                                  "%s did not "
                                                  "answer in %lld ms",
                                                  px->peer, (long long)px->timeout_ms);
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
                                  "%s closed the connection "
                                  "without an answer",
                                  px->peer);
                return -1;
        }
}

/* The rest of the request's body (and a chunked body's end) to the server.
 * 1 = done (or failed: the server's answer decides); 0 = parked; -1 = the
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
                        px->write_deadline = now + px->timeout_ms;
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
                if (relay_hop_header(k) || (conn_h && ab_http_list_has(conn_h, k)))
                        continue;
                MHD_add_response_header(resp, k, h->value[i]);
        }
}

static enum MHD_Result answer_upgrade(ab_req *r, ab_proxy *px, ab_http_head *h, ab_buf *in)
{
        if (!px->upgrade || !ab_http_head_get(h, "Upgrade"))
                return resp_error(r, 502, "unavailable", "%s switched protocols unasked", px->peer);
        pthread_mutex_lock(&relay_lock);
        bool full = relay_stopping || relay_count >= RELAY_MAX;
        pthread_mutex_unlock(&relay_lock);
        if (full)
                return resp_error(r, 503, "unavailable",
                                  "too many upgraded connections relayed (%d); try again later",
                                  RELAY_MAX);
        enum MHD_Result ret;
        ab_stream_slot *slot = req_stream_slot(r, &ret);
        if (!slot)
                return ret;
        px->slot = slot; /* the request's: released when it ends */
        upgraded *x = xzalloc(sizeof(*x));
        x->server = px->fd; /* still owned by px: closed when the request ends */
        x->client = -1;
        x->px = px;
        ab_buf_add(&x->to_client, in->p + h->head_len, in->n - h->head_len);
        /* When the client goes away before the 101 is sent, on_upgrade never
         * runs: x, the server's socket, the slot and (a port's) use of the
         * box end with the request (relay_free). */
        struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgrade, x);
        if (!resp) {
                upgraded_free(x);
                return resp_error(r, 502, "unavailable", "this server cannot relay upgrades");
        }
        px->relay = x;
        copy_headers(resp, h, true);
        return resp_send(r, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}

enum MHD_Result relay_answer(ab_req *r)
{
        ab_proxy *px = r->proxy;
        int k = finish_body(r, px);
        if (k <= 0)
                return k == 0 ? MHD_YES : MHD_NO;
        if (px->timed_out)
                return resp_error(r, 504, "timeout",
                                  "%s did not take the request's "
                                  "body in %lld ms",
                                  px->peer, (long long)px->timeout_ms);
        ab_buf_free(&px->out);
        if (!px->head_deadline)
                px->head_deadline = (int64_t)ab_now_ms() + px->timeout_ms;
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
                                  "%s sent a body framed in a way "
                                  "this proxy does not pass on",
                                  px->peer);
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

void relay_free(ab_proxy *px)
{
        if (!px)
                return;
        if (px->fd >= 0)
                close(px->fd);
        if (px->park)
                ab_park_free(px->park);
        if (px->relay && !px->relay_started)
                upgraded_free(px->relay);
        ab_stream_slot_release(px->slot);
        ab_buf_free(&px->out);
        ab_buf_free(&px->in);
        free(px->peer);
        if (px->user_free)
                px->user_free(px->user);
        free(px);
}
