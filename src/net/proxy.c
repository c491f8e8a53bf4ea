/* proxy.c - the allowlist boxes' egress proxy (proxy.h).
 *
 * One acceptor thread waits (epoll) on every box's listener; each accepted
 * connection gets a detached thread that reads the request head, decides,
 * resolves, connects and then relays bytes both ways until either side is
 * done. A box's entry lists its open connections so that detaching the box
 * or changing its rules can cut them (shutdown(), which wakes the relay). */
#include "net/proxy.h"
#include "base/log.h"
#include "base/util.h"
#include "base/addrcheck.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#define HEAD_MAX        (16 * 1024)
#define HEAD_TIMEOUT_MS 10000
#define RELAY_BUF       (64 * 1024)
#define MAX_ADDRS       8
#define MAX_THREADS     4096 /* proxied connections of all boxes at once */

typedef struct conn {
        int cfd, ufd; /* client (in the box), upstream; -1 when not open */
        unsigned gen; /* the box's gen when accepted */
        struct conn *next;
} conn;

/* The tunnels of one app's boxes (the admin's boxes, of no app, share one). */
typedef struct app_ent {
        char *app; /* "" for boxes of no app */
        size_t n_conns;
        uint64_t warned_s; /* when "at its cap" was last logged (once a minute at most) */
        int refs;          /* one per box_ent */
        struct app_ent *next;
} app_ent;

typedef struct box_ent {
        char *id, *app;
        app_ent *ae; /* its app's count (a reference) */
        pid_t pid;
        int lfd;
        uint64_t key; /* epoll data: identifies this listener incarnation */
        ab_netpol pol;
        conn *conns;
        size_t n_conns;
        unsigned gen;        /* bumped whenever its connections are cut */
        bool paused;         /* at its connection cap: out of the epoll set until one ends */
        uint64_t ev_window;  /* denial events: the current second, how many in it, */
        unsigned ev_count;   /* and how many were left out (a box hammering the */
        uint64_t ev_dropped; /* proxy must not flush the event ring) */
        int refs;            /* the table's (1 while attached) + one per connection thread */
        struct box_ent *next;
} box_ent;

struct ab_proxy {
        ab_proxy_opts o;
        char *hosts_file;
        pthread_mutex_t lock;
        pthread_cond_t idle; /* signalled when a connection thread ends */
        box_ent *boxes;
        app_ent *apps;
        size_t threads; /* connection threads alive */
        uint64_t next_key;
        int ep, wake[2];
        bool stopping;
        pthread_t acceptor;
};

typedef struct {
        ab_proxy *p;
        box_ent *b;
        conn *c;
} job;

/* ---- box table (callers hold p->lock) --------------------------------- */

static box_ent *find_box(ab_proxy *p, const char *id)
{
        for (box_ent *b = p->boxes; b; b = b->next)
                if (!strcmp(b->id, id))
                        return b;
        return NULL;
}

static void cut_conns(box_ent *b)
{
        b->gen++;
        for (conn *c = b->conns; c; c = c->next) {
                if (c->cfd >= 0)
                        shutdown(c->cfd, SHUT_RDWR);
                if (c->ufd >= 0)
                        shutdown(c->ufd, SHUT_RDWR);
        }
}

/* Locked: the count of app's tunnels, made on first use (a reference). */
static app_ent *app_ref(ab_proxy *p, const char *app)
{
        const char *key = app ? app : "";
        app_ent *a = p->apps;
        while (a && strcmp(a->app, key))
                a = a->next;
        if (!a) {
                a = xzalloc(sizeof(*a));
                a->app = xstrdup(key);
                a->next = p->apps;
                p->apps = a;
        }
        a->refs++;
        return a;
}

static void app_unref(ab_proxy *p, app_ent *a)
{
        if (--a->refs > 0)
                return;
        for (app_ent **pp = &p->apps; *pp; pp = &(*pp)->next)
                if (*pp == a) {
                        *pp = a->next;
                        break;
                }
        free(a->app);
        free(a);
}

/* Locked: whether b may take one more tunnel (its own cap and its app's). */
static bool box_has_room(ab_proxy *p, const box_ent *b)
{
        return b->n_conns < (size_t)p->o.max_conns_per_box &&
               b->ae->n_conns < (size_t)p->o.max_conns_per_app;
}

static void unref_box(ab_proxy *p, box_ent *b)
{
        if (--b->refs > 0)
                return;
        app_unref(p, b->ae);
        ab_netpol_clear(&b->pol);
        free(b->id);
        free(b->app);
        free(b);
}

/* Takes b out of the table: its listener closes, its connections are cut. */
static void remove_box(ab_proxy *p, box_ent *b)
{
        for (box_ent **pp = &p->boxes; *pp; pp = &(*pp)->next)
                if (*pp == b) {
                        *pp = b->next;
                        break;
                }
        if (b->lfd >= 0) {
                epoll_ctl(p->ep, EPOLL_CTL_DEL, b->lfd, NULL);
                close(b->lfd);
                b->lfd = -1;
        }
        cut_conns(b);
        unref_box(p, b);
}

/* ---- events ----------------------------------------------------------- */

#define DENIED_EVENTS_PER_S 20

static void denied(ab_proxy *p, box_ent *b, const char *method, const char *host, int port,
                   const char *why)
{
        if (p->o.metrics)
                ab_metrics_proxy(p->o.metrics, "denied");
        uint64_t now_s = ab_now_ms() / 1000, dropped = 0;
        bool emit = true;
        pthread_mutex_lock(&p->lock);
        if (b->ev_window != now_s) {
                b->ev_window = now_s;
                b->ev_count = 0;
        }
        if (++b->ev_count > DENIED_EVENTS_PER_S) {
                b->ev_dropped++;
                emit = false;
        } else {
                dropped = b->ev_dropped;
                b->ev_dropped = 0;
        }
        pthread_mutex_unlock(&p->lock);
        if (!emit)
                return;
        if (p->o.events) {
                json_t *d = json_pack("{s:s,s:i,s:s,s:s}", "host", host, "port", port, "method",
                                      method, "reason", why);
                if (dropped)
                        json_object_set_new(d, "suppressed_before",
                                            json_integer((json_int_t)dropped));
                ab_events_emit(p->o.events, "network.denied", b->id, b->app, d);
        }
        char ps[16];
        snprintf(ps, sizeof(ps), "%d", port);
        ab_log(AB_LOG_INFO, "egress denied", "box", b->id, "host", host, "port", ps, "reason", why,
               NULL);
}

/* ---- request head ----------------------------------------------------- */

static bool parse_port(const char *s, size_t n, int *port)
{
        if (n == 0 || n > 5)
                return false;
        int v = 0;
        for (size_t i = 0; i < n; i++) {
                if (!isdigit((unsigned char)s[i]))
                        return false;
                v = v * 10 + (s[i] - '0');
        }
        if (v < 1 || v > 65535)
                return false;
        *port = v;
        return true;
}

/* authority = host [":" port] | "[" v6 "]" [":" port] */
static bool parse_authority(const char *s, size_t n, int def_port, char *host, size_t hlen,
                            int *port)
{
        char tmp[300];
        const char *h = s, *colon = NULL;
        size_t hn;
        if (n > 0 && s[0] == '[') {
                const char *close = memchr(s, ']', n);
                if (!close)
                        return false;
                hn = (size_t)(close - s) + 1;
                if (hn < n) {
                        if (s[hn] != ':')
                                return false;
                        colon = s + hn;
                }
        } else {
                colon = memrchr(s, ':', n);
                hn = colon ? (size_t)(colon - s) : n;
        }
        *port = def_port;
        if (colon && !parse_port(colon + 1, n - (size_t)(colon + 1 - s), port))
                return false;
        if (hn == 0 || hn >= sizeof(tmp) || memchr(h, '@', hn))
                return false;
        memcpy(tmp, h, hn);
        tmp[hn] = '\0';
        return ab_net_host_normalize(tmp, host, hlen);
}

static bool hop_header(const char *name, size_t n)
{
        static const char *const drop[] = {
            "proxy-connection", "proxy-authorization", "connection", "keep-alive", "host", "te",
            "upgrade"};
        for (size_t i = 0; i < AB_ARRAY_LEN(drop); i++)
                if (strlen(drop[i]) == n && !strncasecmp(name, drop[i], n))
                        return true;
        return false;
}

int ab_proxy_parse(const char *buf, size_t len, ab_proxy_req *r, const char **why)
{
        memset(r, 0, sizeof(*r));
        const char *end = memmem(buf, len, "\r\n", 2);
        if (!end)
                return *why = "no request line", 400;
        const char *sp1 = memchr(buf, ' ', (size_t)(end - buf));
        const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1)) : NULL;
        if (!sp1 || !sp2 || (size_t)(sp1 - buf) >= sizeof(r->method) || sp1 == buf)
                return *why = "malformed request line", 400;
        size_t vlen = (size_t)(end - sp2 - 1);
        if (vlen != 8 || (strncmp(sp2 + 1, "HTTP/1.1", 8) && strncmp(sp2 + 1, "HTTP/1.0", 8)))
                return *why = "only HTTP/1.0 and HTTP/1.1 requests are proxied", 400;
        /* no control characters anywhere in the head but the CRLFs: a bare
         * CR or LF passed on could split a line at a lenient origin server */
        const char *head_end = memmem(buf, len, "\r\n\r\n", 4);
        if (!head_end)
                return *why = "unterminated headers", 400;
        for (const char *c = buf; c < head_end + 4; c++) {
                unsigned char ch = (unsigned char)*c;
                if (ch == '\r' && c[1] == '\n') {
                        c++;
                        continue;
                }
                if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
                        return *why = "control character in the request head", 400;
        }
        memcpy(r->method, buf, (size_t)(sp1 - buf));
        for (char *m = r->method; *m; m++)
                if (!isupper((unsigned char)*m))
                        return *why = "malformed method", 400;
        const char *t = sp1 + 1;
        size_t tn = (size_t)(sp2 - t);
        if (!strcmp(r->method, "CONNECT")) {
                r->connect = true;
                if (!parse_authority(t, tn, 0, r->host, sizeof(r->host), &r->port) || !r->port)
                        return *why = "CONNECT needs host:port", 400;
                return 0;
        }
        if (tn < 7 || strncasecmp(t, "http://", 7)) {
                if (tn >= 8 && !strncasecmp(t, "https://", 8))
                        return *why = "https URLs go through CONNECT", 400;
                return *why = "the target must be an absolute http:// URL (this is a proxy)", 400;
        }
        const char *auth = t + 7;
        const char *path = memchr(auth, '/', tn - 7);
        const char *q = memchr(auth, '?', tn - 7);
        if (q && (!path || q < path))
                path = q;
        size_t an = path ? (size_t)(path - auth) : tn - 7;
        if (!parse_authority(auth, an, 80, r->host, sizeof(r->host), &r->port))
                return *why = "bad host in the URL", 400;
        /* the head rewritten for the origin server */
        size_t cap = len + 512, n = 0;
        char *h = xmalloc(cap);
        const char *pth = path ? path : "/";
        size_t pn = path ? tn - 7 - an : 1;
        bool qfirst = pth[0] == '?';
        n += (size_t)snprintf(h, cap, "%s %s", r->method, qfirst ? "/" : "");
        memcpy(h + n, pth, pn);
        n += pn;
        bool v6 = strchr(r->host, ':') != NULL;
        char hostport[300];
        if (r->port == 80)
                snprintf(hostport, sizeof(hostport), v6 ? "[%s]" : "%s", r->host);
        else
                snprintf(hostport, sizeof(hostport), v6 ? "[%s]:%d" : "%s:%d", r->host, r->port);
        n += (size_t)snprintf(h + n, cap - n, " HTTP/1.1\r\nHost: %s\r\n", hostport);
        const char *line = end + 2;
        const char *stop = buf + len;
        int n_cl = 0, n_te = 0;
        for (;;) {
                const char *le = memmem(line, (size_t)(stop - line), "\r\n", 2);
                if (!le) {
                        free(h);
                        return *why = "unterminated headers", 400;
                }
                if (le == line)
                        break;
                const char *colon = memchr(line, ':', (size_t)(le - line));
                if (!colon || colon == line || memchr(line, ' ', (size_t)(colon - line)) ||
                    memchr(line, '\t', (size_t)(colon - line))) {
                        free(h);
                        return *why = "malformed header", 400;
                }
                size_t nn = (size_t)(colon - line);
                n_cl += nn == 14 && !strncasecmp(line, "content-length", nn);
                n_te += nn == 17 && !strncasecmp(line, "transfer-encoding", nn);
                if ((n_cl && n_te) || n_cl > 1 || n_te > 1) {
                        /* two framings: the origin server and anything between
                         * may read different bodies (request smuggling) */
                        free(h);
                        return *why = "conflicting Content-Length / Transfer-Encoding headers", 400;
                }
                if (!hop_header(line, nn)) {
                        size_t ln = (size_t)(le - line) + 2;
                        memcpy(h + n, line, ln);
                        n += ln;
                }
                line = le + 2;
        }
        n += (size_t)snprintf(h + n, cap - n, "Connection: close\r\n\r\n");
        r->head = h;
        r->head_len = n;
        return 0;
}

/* ---- resolution ------------------------------------------------------- */

static int lookup_hosts_file(const char *file, const char *host, int port,
                             struct sockaddr_storage *out, size_t max)
{
        if (!file)
                return 0;
        _cleanup_fclose_ FILE *f = fopen(file, "re");
        if (!f)
                return 0;
        char line[1024];
        size_t n = 0;
        while (n < max && fgets(line, sizeof(line), f)) {
                char *hash = strchr(line, '#');
                if (hash)
                        *hash = '\0';
                char *save = NULL, *addr = strtok_r(line, " \t\r\n", &save);
                if (!addr)
                        continue;
                bool hit = false;
                for (char *name; (name = strtok_r(NULL, " \t\r\n", &save));) {
                        char norm[256];
                        if (ab_net_host_normalize(name, norm, sizeof(norm)) && !strcmp(norm, host))
                                hit = true;
                }
                if (!hit)
                        continue;
                struct sockaddr_in *s4 = (struct sockaddr_in *)&out[n];
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&out[n];
                memset(&out[n], 0, sizeof(out[n]));
                if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
                        s4->sin_family = AF_INET;
                        s4->sin_port = htons((uint16_t)port);
                        n++;
                } else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
                        s6->sin6_family = AF_INET6;
                        s6->sin6_port = htons((uint16_t)port);
                        n++;
                }
        }
        return (int)n;
}

/* Fills out with the host's addresses. Returns how many, or -1 with *why. */
static int resolve(ab_proxy *p, const char *host, int port, struct sockaddr_storage *out,
                   const char **why)
{
        memset(out, 0, sizeof(*out));
        struct sockaddr_in *s4 = (struct sockaddr_in *)out;
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
        if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
                s4->sin_family = AF_INET;
                s4->sin_port = htons((uint16_t)port);
                return 1;
        }
        if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
                s6->sin6_family = AF_INET6;
                s6->sin6_port = htons((uint16_t)port);
                return 1;
        }
        int n = lookup_hosts_file(p->hosts_file, host, port, out, MAX_ADDRS);
        if (n > 0)
                return n;
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        char ps[8];
        snprintf(ps, sizeof(ps), "%d", port);
        int r = getaddrinfo(host, ps, &hints, &res);
        if (r) {
                *why = "the name does not resolve";
                return -1;
        }
        for (struct addrinfo *ai = res; ai && n < MAX_ADDRS; ai = ai->ai_next)
                if (ai->ai_addrlen <= sizeof(out[0])) {
                        memcpy(&out[n], ai->ai_addr, ai->ai_addrlen);
                        n++;
                }
        freeaddrinfo(res);
        if (n == 0)
                *why = "the name has no address";
        return n ? n : -1;
}

/* A peer that stops reading cannot hold a relay thread forever. */
static void set_send_timeout(int fd, long ms)
{
        struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int connect_to(const struct sockaddr_storage *sa, long timeout_ms)
{
        socklen_t alen =
            sa->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (const struct sockaddr *)sa, alen) < 0 && errno != EINPROGRESS) {
                int e = errno;
                close(fd);
                return -e;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int r;
        do
                r = poll(&pf, 1, (int)timeout_ms);
        while (r < 0 && errno == EINTR);
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (r == 0)
                soerr = ETIMEDOUT;
        else if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
                soerr = errno ? errno : EIO;
        if (soerr) {
                close(fd);
                return -soerr;
        }
        int flags = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
}

/* ---- a connection ----------------------------------------------------- */

static void answer(int fd, int status, const char *reason, const char *msg)
{
        char buf[1024];
        int n = snprintf(buf, sizeof(buf),
                         "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                         "X-Agentbox-Proxy: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n"
                         "%s\n",
                         status, reason, status == 403 ? "denied" : "error", strlen(msg) + 1, msg);
        if (n > 0)
                (void)!ab_write_all(fd, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* Waits (up to the head timeout) for bytes and appends them to buf[*n..cap).
 * Returns the count read, 0 on EOF, timeout or error. */
static ssize_t recv_some(int fd, char *buf, size_t *n, size_t cap, uint64_t deadline)
{
        for (;;) {
                int left = (int)(deadline - ab_now_ms());
                if (left <= 0)
                        return 0;
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                int r = poll(&pf, 1, left);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return 0;
                ssize_t k = recv(fd, buf + *n, cap - *n, 0);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return 0;
                *n += (size_t)k;
                return k;
        }
}

/* Reads until the end of the head (buf already holds n bytes); returns the
 * byte count (the head and whatever followed it), 0 on EOF/timeout, -1 when
 * too long. */
static ssize_t read_head(int fd, char *buf, size_t n, size_t cap, size_t *head_len,
                         uint64_t deadline)
{
        size_t from = 0;
        for (;;) {
                char *e = memmem(buf + from, n - from, "\r\n\r\n", 4);
                if (e) {
                        *head_len = (size_t)(e - buf) + 4;
                        return (ssize_t)n;
                }
                from = n > 3 ? n - 3 : 0;
                if (n == cap)
                        return -1;
                if (recv_some(fd, buf, &n, cap, deadline) <= 0)
                        return 0;
        }
}

/* Copies both ways until both directions are done, the tunnel is idle too
 * long, or the connection is cut. */
static void relay(int a, int b, long idle_ms)
{
        char *buf = xmalloc(RELAY_BUF);
        bool a_open = true, b_open = true; /* reading from a / from b */
        while (a_open || b_open) {
                struct pollfd pf[2] = {{.fd = a_open ? a : -1, .events = POLLIN},
                                       {.fd = b_open ? b : -1, .events = POLLIN}};
                int r = poll(pf, 2, (int)idle_ms);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        break;
                for (int i = 0; i < 2; i++) {
                        if (!pf[i].revents)
                                continue;
                        int from = i ? b : a, to = i ? a : b;
                        ssize_t k = recv(from, buf, RELAY_BUF, 0);
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k == 0) { /* this side is done sending: pass the EOF on */
                                shutdown(to, SHUT_WR);
                                if (i)
                                        b_open = false;
                                else
                                        a_open = false;
                        } else if (k < 0 || ab_write_all(to, buf, (size_t)k) < 0) {
                                a_open = b_open = false; /* reset, cut, or write timeout */
                                break;
                        }
                }
        }
        free(buf);
}

/* Decides, resolves and connects for a box's request to host:port. Returns
 * the upstream fd, or -1 with *status (403 denied, 502 unreachable, 504
 * timeout) and msg set; a denial is also an event. */
static int open_upstream(ab_proxy *p, box_ent *b, const char *method, const char *host, int port,
                         int *status, char *msg, size_t msglen)
{
        char reason[300] = "";
        pthread_mutex_lock(&p->lock);
        bool ok = ab_netpol_allows(&b->pol, host, port, reason, sizeof(reason));
        pthread_mutex_unlock(&p->lock);
        const char *nwhy = ok ? ab_name_reason(host) : NULL;
        if (nwhy) {
                ok = false;
                snprintf(reason, sizeof(reason), "%s", nwhy);
        }
        struct sockaddr_storage addrs[MAX_ADDRS];
        int na = 0;
        if (ok) {
                const char *why = NULL;
                na = resolve(p, host, port, addrs, &why);
                if (na < 0) {
                        snprintf(msg, msglen, "agentbox proxy: %s: %s", host, why);
                        *status = 502;
                        if (p->o.metrics)
                                ab_metrics_proxy(p->o.metrics, "error");
                        return -1;
                }
                /* any internal answer refuses the name: a resolver that mixes
                 * them in is rebinding */
                for (int i = 0; i < na && ok; i++) {
                        const char *aw = ab_addr_reason((struct sockaddr *)&addrs[i]);
                        if (aw) {
                                char as[INET6_ADDRSTRLEN] = "?";
                                const void *ap =
                                    addrs[i].ss_family == AF_INET6
                                        ? (const void *)&((struct sockaddr_in6 *)&addrs[i])
                                              ->sin6_addr
                                        : (const void *)&((struct sockaddr_in *)&addrs[i])
                                              ->sin_addr;
                                inet_ntop(addrs[i].ss_family, ap, as, sizeof(as));
                                snprintf(reason, sizeof(reason), "resolves to %s (%s)", as, aw);
                                ok = false;
                        }
                }
        }
        if (!ok) {
                denied(p, b, method, host, port, reason);
                snprintf(msg, msglen,
                         "agentbox proxy: %s:%d is not allowed by this box's network policy (%s)",
                         host, port, reason);
                *status = 403;
                return -1;
        }
        int ufd = -ECONNREFUSED;
        for (int i = 0; i < na && ufd < 0; i++)
                ufd = connect_to(&addrs[i], p->o.connect_timeout_ms);
        if (ufd < 0) {
                snprintf(msg, msglen, "agentbox proxy: cannot connect to %s:%d: %s", host, port,
                         strerror(-ufd));
                *status = ufd == -ETIMEDOUT ? 504 : 502;
                if (p->o.metrics)
                        ab_metrics_proxy(p->o.metrics, "error");
                return -1;
        }
        set_send_timeout(ufd, p->o.idle_timeout_ms);
        if (p->o.metrics)
                ab_metrics_proxy(p->o.metrics, "allowed");
        return ufd;
}

/* Registers ufd as the connection's upstream (so a cut reaches it); false
 * when the box was detached or its rules changed since the accept. */
static bool adopt_upstream(ab_proxy *p, box_ent *b, conn *c, int ufd)
{
        pthread_mutex_lock(&p->lock);
        bool cut = b->lfd < 0 || b->gen != c->gen;
        if (!cut)
                c->ufd = ufd;
        pthread_mutex_unlock(&p->lock);
        return !cut;
}

static void drop_upstream(ab_proxy *p, conn *c, int ufd)
{
        pthread_mutex_lock(&p->lock);
        c->ufd = -1;
        pthread_mutex_unlock(&p->lock);
        close(ufd);
}

/* HTTP: CONNECT host:port, or a plain request with an absolute URL. buf
 * holds the n bytes read so far. */
static void serve_http(ab_proxy *p, box_ent *b, conn *c, char *buf, size_t n, uint64_t deadline)
{
        size_t head_len = 0;
        ssize_t got = read_head(c->cfd, buf, n, HEAD_MAX, &head_len, deadline);
        if (got <= 0) {
                if (got < 0)
                        answer(c->cfd, 431, "Request Header Fields Too Large",
                               "agentbox proxy: the request head is over 16 KiB");
                return;
        }
        ab_proxy_req r;
        const char *why = NULL;
        int st = ab_proxy_parse(buf, head_len, &r, &why);
        if (st) {
                char msg[256];
                snprintf(msg, sizeof(msg), "agentbox proxy: %s", why);
                answer(c->cfd, st, "Bad Request", msg);
                if (p->o.metrics)
                        ab_metrics_proxy(p->o.metrics, "error");
                return;
        }
        char msg[700];
        int ufd = open_upstream(p, b, r.method, r.host, r.port, &st, msg, sizeof(msg));
        if (ufd < 0) {
                answer(c->cfd, st,
                       st == 403   ? "Forbidden"
                       : st == 504 ? "Gateway Timeout"
                                   : "Bad Gateway",
                       msg);
                free(r.head);
                return;
        }
        if (adopt_upstream(p, b, c, ufd)) {
                int wr;
                if (r.connect) {
                        static const char ok200[] = "HTTP/1.1 200 Connection established\r\n\r\n";
                        wr = ab_write_all(c->cfd, ok200, sizeof(ok200) - 1);
                } else {
                        wr = ab_write_all(ufd, r.head, r.head_len);
                }
                /* bytes the client sent after the head (a body, an early TLS hello) */
                if (wr == 0 && (size_t)got > head_len)
                        wr = ab_write_all(ufd, buf + head_len, (size_t)got - head_len);
                if (wr == 0)
                        relay(c->cfd, ufd, p->o.idle_timeout_ms);
        }
        free(r.head);
        drop_upstream(p, c, ufd);
}

/* Reads until buf holds at least want bytes. */
static bool need(int fd, char *buf, size_t *n, size_t want, uint64_t deadline)
{
        while (*n < want)
                if (recv_some(fd, buf, n, HEAD_MAX, deadline) <= 0)
                        return false;
        return true;
}

static void socks_reply(int fd, unsigned char rep)
{
        unsigned char r[10] = {5, rep, 0, 1, 0, 0, 0, 0, 0, 0}; /* BND 0.0.0.0:0 */
        (void)!ab_write_all(fd, r, sizeof(r));
}

/* SOCKS5 (RFC 1928), no authentication, CONNECT only: names are sent to the
 * proxy (socks5h) and decided like HTTP's; BIND and UDP ASSOCIATE are
 * refused (no UDP leaves a box). */
static void serve_socks(ab_proxy *p, box_ent *b, conn *c, char *buf, size_t n, uint64_t deadline)
{
        const unsigned char *u = (const unsigned char *)buf;
        if (!need(c->cfd, buf, &n, 2, deadline) || !need(c->cfd, buf, &n, 2u + u[1], deadline))
                return;
        bool noauth = memchr(buf + 2, 0, u[1]) != NULL;
        unsigned char hello[2] = {5, noauth ? 0 : 0xff};
        size_t used = 2u + u[1];
        if (ab_write_all(c->cfd, hello, 2) < 0 || !noauth)
                return;
        /* the request: VER CMD RSV ATYP ADDR PORT */
        if (!need(c->cfd, buf, &n, used + 5, deadline))
                return;
        u = (const unsigned char *)buf + used;
        if (u[0] != 5) {
                socks_reply(c->cfd, 1);
                return;
        }
        size_t alen = u[3] == 1 ? 4 : u[3] == 4 ? 16 : u[3] == 3 ? 1u + u[4] : 0;
        if (!alen) {
                socks_reply(c->cfd, 8); /* address type not supported */
                return;
        }
        if (!need(c->cfd, buf, &n, used + 4 + alen + 2, deadline))
                return;
        u = (const unsigned char *)buf + used;
        if (u[1] != 1) {
                socks_reply(c->cfd, 7); /* command not supported */
                return;
        }
        char raw[300], host[256];
        if (u[3] == 1)
                inet_ntop(AF_INET, u + 4, raw, sizeof(raw));
        else if (u[3] == 4)
                inet_ntop(AF_INET6, u + 4, raw, sizeof(raw));
        else {
                memcpy(raw, u + 5, u[4]);
                raw[u[4]] = '\0';
        }
        int port = u[4 + alen] << 8 | u[4 + alen + 1];
        used += 4 + alen + 2;
        if (strlen(raw) != (u[3] == 3 ? u[4] : strlen(raw)) ||
            !ab_net_host_normalize(raw, host, sizeof(host)) || port == 0) {
                socks_reply(c->cfd, 1);
                if (p->o.metrics)
                        ab_metrics_proxy(p->o.metrics, "error");
                return;
        }
        int st;
        char msg[700];
        int ufd = open_upstream(p, b, "SOCKS5", host, port, &st, msg, sizeof(msg));
        if (ufd < 0) {
                socks_reply(c->cfd, st == 403 ? 2 : st == 504 ? 6 : 4);
                return;
        }
        if (adopt_upstream(p, b, c, ufd)) {
                socks_reply(c->cfd, 0);
                int wr = 0;
                if (n > used) /* early data after the request */
                        wr = ab_write_all(ufd, buf + used, n - used);
                if (wr == 0)
                        relay(c->cfd, ufd, p->o.idle_timeout_ms);
        }
        drop_upstream(p, c, ufd);
}

static void serve(ab_proxy *p, box_ent *b, conn *c)
{
        char *buf = xmalloc(HEAD_MAX);
        size_t n = 0;
        uint64_t deadline = ab_now_ms() + HEAD_TIMEOUT_MS;
        if (recv_some(c->cfd, buf, &n, HEAD_MAX, deadline) > 0) {
                if (buf[0] == 5)
                        serve_socks(p, b, c, buf, n, deadline);
                else
                        serve_http(p, b, c, buf, n, deadline);
        }
        free(buf);
}

static void *conn_main(void *arg)
{
        job *j = arg;
        ab_proxy *p = j->p;
        serve(p, j->b, j->c);
        pthread_mutex_lock(&p->lock);
        for (conn **pp = &j->b->conns; *pp; pp = &(*pp)->next)
                if (*pp == j->c) {
                        *pp = j->c->next;
                        break;
                }
        j->b->n_conns--;
        j->b->ae->n_conns--;
        p->threads--;
        /* room again: listeners paused at a cap (this box's, its app's, or
         * everyone's when the global one was hit) are watched again */
        for (box_ent *b = p->boxes; b; b = b->next)
                if (b->paused && b->lfd >= 0 && box_has_room(p, b)) {
                        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = b->key};
                        epoll_ctl(p->ep, EPOLL_CTL_MOD, b->lfd, &ev);
                        b->paused = false;
                }
        close(j->c->cfd);
        free(j->c);
        unref_box(p, j->b);
        pthread_cond_broadcast(&p->idle);
        pthread_mutex_unlock(&p->lock);
        free(j);
        return NULL;
}

static void accept_on(ab_proxy *p, uint64_t key)
{
        pthread_mutex_lock(&p->lock);
        box_ent *b = p->boxes;
        while (b && b->key != key)
                b = b->next;
        while (b && b->lfd >= 0 && box_has_room(p, b) && p->threads < MAX_THREADS) {
                int fd = accept4(b->lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        break;
                set_send_timeout(fd, p->o.idle_timeout_ms);
                conn *c = xzalloc(sizeof(*c));
                c->cfd = fd;
                c->ufd = -1;
                c->gen = b->gen;
                c->next = b->conns;
                b->conns = c;
                b->n_conns++;
                b->ae->n_conns++;
                b->refs++;
                p->threads++;
                job *j = xmalloc(sizeof(*j));
                *j = (job){.p = p, .b = b, .c = c};
                pthread_t t;
                pthread_attr_t at;
                pthread_attr_init(&at);
                pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
                pthread_attr_setstacksize(&at, 256 * 1024);
                if (pthread_create(&t, &at, conn_main, j)) {
                        b->conns = c->next;
                        b->n_conns--;
                        b->ae->n_conns--;
                        b->refs--;
                        p->threads--;
                        close(fd);
                        free(c);
                        free(j);
                }
                pthread_attr_destroy(&at);
        }
        if (b && b->lfd >= 0 && !b->paused && (!box_has_room(p, b) || p->threads >= MAX_THREADS)) {
                /* level-triggered: leaving it armed would spin; the next
                 * connection to end re-arms it */
                struct epoll_event ev = {.events = 0, .data.u64 = b->key};
                epoll_ctl(p->ep, EPOLL_CTL_MOD, b->lfd, &ev);
                b->paused = true;
                uint64_t now_s = ab_now_ms() / 1000;
                if (b->ae->n_conns >= (size_t)p->o.max_conns_per_app &&
                    now_s >= b->ae->warned_s + 60) {
                        b->ae->warned_s = now_s;
                        ab_log(AB_LOG_WARN,
                               "egress proxy: an app is at its tunnel cap, its boxes wait "
                               "(network_proxy_max_per_app)",
                               "app", b->app ? b->app : "", "box", b->id, NULL);
                }
        }
        pthread_mutex_unlock(&p->lock);
}

static void *acceptor_main(void *arg)
{
        ab_proxy *p = arg;
        struct epoll_event ev[32];
        for (;;) {
                /* a box at its connection cap is polled again after a while */
                int n = epoll_wait(p->ep, ev, (int)AB_ARRAY_LEN(ev), 200);
                pthread_mutex_lock(&p->lock);
                bool stop = p->stopping;
                pthread_mutex_unlock(&p->lock);
                if (stop)
                        return NULL;
                for (int i = 0; i < n; i++) {
                        if (ev[i].data.u64 == 0) {
                                char c[64];
                                (void)!read(p->wake[0], c, sizeof(c));
                                continue;
                        }
                        accept_on(p, ev[i].data.u64);
                }
        }
}

/* ---- public ----------------------------------------------------------- */

int ab_proxy_new(const ab_proxy_opts *o, ab_proxy **out, ab_err **err)
{
        ab_proxy *p = xzalloc(sizeof(*p));
        p->o = *o;
        if (p->o.max_conns_per_box <= 0)
                p->o.max_conns_per_box = 256;
        if (p->o.max_conns_per_app <= 0)
                p->o.max_conns_per_app = AB_PROXY_MAX_CONNS_PER_APP;
        if (!p->o.connect_timeout_ms)
                p->o.connect_timeout_ms = 10000;
        if (!p->o.idle_timeout_ms)
                p->o.idle_timeout_ms = 600000;
        p->hosts_file = o->hosts_file ? xstrdup(o->hosts_file) : NULL;
        p->o.hosts_file = p->hosts_file;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->idle, NULL);
        p->next_key = 1;
        p->ep = epoll_create1(EPOLL_CLOEXEC);
        if (p->ep < 0 || pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
                int e = errno;
                if (p->ep >= 0)
                        close(p->ep);
                free(p->hosts_file);
                free(p);
                return ab_err_set(err, AB_E_INTERNAL, e, "egress proxy");
        }
        struct epoll_event wev = {.events = EPOLLIN, .data.u64 = 0};
        epoll_ctl(p->ep, EPOLL_CTL_ADD, p->wake[0], &wev);
        if (pthread_create(&p->acceptor, NULL, acceptor_main, p)) {
                close(p->ep);
                close(p->wake[0]);
                close(p->wake[1]);
                free(p->hosts_file);
                free(p);
                return ab_err_set(err, AB_E_INTERNAL, EAGAIN, "egress proxy thread");
        }
        *out = p;
        return 0;
}

void ab_proxy_free(ab_proxy *p)
{
        if (!p)
                return;
        pthread_mutex_lock(&p->lock);
        p->stopping = true;
        pthread_mutex_unlock(&p->lock);
        (void)!write(p->wake[1], "x", 1);
        pthread_join(p->acceptor, NULL);
        pthread_mutex_lock(&p->lock);
        while (p->boxes)
                remove_box(p, p->boxes);
        while (p->threads)
                pthread_cond_wait(&p->idle, &p->lock);
        pthread_mutex_unlock(&p->lock);
        close(p->ep);
        close(p->wake[0]);
        close(p->wake[1]);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->idle);
        free(p->hosts_file);
        free(p);
}

void ab_proxy_attach(ab_proxy *p, const char *box, const char *app, pid_t pid, int lfd,
                     const ab_netpol *pol)
{
        fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
        box_ent *b = xzalloc(sizeof(*b));
        b->id = xstrdup(box);
        b->app = app ? xstrdup(app) : NULL;
        b->pid = pid;
        b->lfd = lfd;
        b->refs = 1;
        ab_netpol_copy(pol, &b->pol);
        pthread_mutex_lock(&p->lock);
        b->ae = app_ref(p, app);
        box_ent *old = find_box(p, box);
        if (old)
                remove_box(p, old);
        b->key = ++p->next_key;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = b->key};
        epoll_ctl(p->ep, EPOLL_CTL_ADD, lfd, &ev);
        b->next = p->boxes;
        p->boxes = b;
        pthread_mutex_unlock(&p->lock);
}

bool ab_proxy_update(ab_proxy *p, const char *box, const ab_netpol *pol)
{
        pthread_mutex_lock(&p->lock);
        box_ent *b = find_box(p, box);
        if (b && !ab_netpol_equal(&b->pol, pol)) {
                ab_netpol_clear(&b->pol);
                ab_netpol_copy(pol, &b->pol);
                cut_conns(b);
        }
        pthread_mutex_unlock(&p->lock);
        return b != NULL;
}

pid_t ab_proxy_pid(ab_proxy *p, const char *box)
{
        pthread_mutex_lock(&p->lock);
        box_ent *b = find_box(p, box);
        pid_t pid = b ? b->pid : 0;
        pthread_mutex_unlock(&p->lock);
        return pid;
}

void ab_proxy_detach(ab_proxy *p, const char *box)
{
        pthread_mutex_lock(&p->lock);
        box_ent *b = find_box(p, box);
        if (b)
                remove_box(p, b);
        pthread_mutex_unlock(&p->lock);
}

void ab_proxy_counts(ab_proxy *p, size_t *boxes, size_t *conns)
{
        size_t nb = 0, nc = 0;
        pthread_mutex_lock(&p->lock);
        for (box_ent *b = p->boxes; b; b = b->next) {
                nb++;
                nc += b->n_conns;
        }
        pthread_mutex_unlock(&p->lock);
        *boxes = nb;
        *conns = nc;
}
