/* server.c - the event-driven HTTP server (http/server.h): the listening
 * socket, libmicrohttpd's daemon, the connection table and the workers. */
#include "http/server.h"
#include "base/addrcheck.h"
#include "base/log.h"
#include "base/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* Keep-alive connections idle this long are closed (streams send keepalives). */
#define IDLE_CONN_TIMEOUT_S 120
/* Idle handler threads kept for the next requests. */
#define WORKERS_KEEP_IDLE 8

/* libmicrohttpd's own messages, at most LOG_BURST per LOG_WINDOW_S: a flood
 * of refused connections must not flood the log too. */
#define LOG_BURST    20
#define LOG_WINDOW_S 10
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
        static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        static uint64_t window_start;
        static unsigned in_window, dropped;
        uint64_t now = ab_now_ms() / 1000;
        pthread_mutex_lock(&mu);
        if (now >= window_start + LOG_WINDOW_S) {
                if (dropped) {
                        char n[24];
                        snprintf(n, sizeof(n), "%u", dropped);
                        ab_log(AB_LOG_WARN, "http: messages dropped (too many)", "count", n, NULL);
                }
                window_start = now;
                in_window = dropped = 0;
        }
        bool say = in_window < LOG_BURST;
        if (say)
                in_window++;
        else
                dropped++;
        pthread_mutex_unlock(&mu);
        if (!say)
                return;
        char buf[512];
        vsnprintf(buf, sizeof(buf), fmt, ap);
        size_t n = strlen(buf);
        while (n && buf[n - 1] == '\n')
                buf[--n] = 0;
        ab_log(AB_LOG_WARN, "http", "detail", buf, NULL);
}

/* Parses HOST:PORT / [V6]:PORT into a socket address. */
static int parse_listen(const char *listen, struct sockaddr_storage *ss, socklen_t *sl,
                        ab_err **err)
{
        _cleanup_free_ char *host = NULL;
        const char *port;
        if (listen[0] == '[') {
                const char *end = strchr(listen, ']');
                if (!end || end[1] != ':')
                        return ab_err_set(err, AB_E_INVALID, 0, "listen: bad address \"%s\"",
                                          listen);
                host = xstrndup(listen + 1, (size_t)(end - listen - 1));
                port = end + 2;
        } else {
                const char *colon = strrchr(listen, ':');
                if (!colon)
                        return ab_err_set(err, AB_E_INVALID, 0, "listen: \"%s\" is not HOST:PORT",
                                          listen);
                host = xstrndup(listen, (size_t)(colon - listen));
                port = colon + 1;
        }
        struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV,
                                 .ai_socktype = SOCK_STREAM};
        struct addrinfo *ai = NULL;
        int rc = getaddrinfo(*host ? host : NULL, port, &hints, &ai);
        if (rc != 0)
                return ab_err_set(err, AB_E_INVALID, 0, "listen: cannot resolve \"%s\": %s", listen,
                                  gai_strerror(rc));
        memcpy(ss, ai->ai_addr, ai->ai_addrlen);
        *sl = ai->ai_addrlen;
        freeaddrinfo(ai);
        return 0;
}

/* Every connection is a descriptor: lift the soft limit to the hard one. */
static void raise_nofile(int64_t max_connections)
{
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return;
        if (rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur != RLIM_INFINITY && (int64_t)rl.rlim_cur < max_connections + 1024) {
                char have[24], want[24];
                snprintf(have, sizeof(have), "%llu", (unsigned long long)rl.rlim_cur);
                snprintf(want, sizeof(want), "%lld", (long long)max_connections + 1024);
                ab_log(AB_LOG_WARN,
                       "the open-files limit is below max_connections plus room for boxes; "
                       "raise it (ulimit -n, LimitNOFILE=) or lower max_connections",
                       "nofile", have, "wanted", want, NULL);
        }
}

/* The connection table (deadlines, caps, parked streams) and the worker
 * pool both daemons use. */
static int start_tables(ab_http *h, const ab_http_opts *o, ab_err **err)
{
        ab_conns_opts co = {
            .head_timeout_ms = o->head_timeout_ms,
            .keepalive_ms = (int64_t)IDLE_CONN_TIMEOUT_S * 1000,
            .max_connections = o->max_connections,
            .max_per_address = o->max_connections_per_address,
            .max_streams = o->max_streams,
            .max_streams_addr = o->max_streams_per_address,
            .events = o->events,
            .keys_gone = o->keys_gone,
            .key_arg = o->key_arg,
        };
        h->conns = ab_conns_new(&co);
        if (!h->conns)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot start the connection timer");
        h->workers = ab_workers_new((size_t)o->max_requests, WORKERS_KEEP_IDLE);
        return 0;
}

/* Binds and listens on o->listen: the socket, or -1 with *err. */
static int listen_on(ab_http *h, const ab_http_opts *o, int *family, ab_err **err)
{
        struct sockaddr_storage ss;
        socklen_t sl = 0;
        if (parse_listen(o->listen, &ss, &sl, err) < 0)
                return -1;
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "socket");
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
                int e = errno;
                close(fd);
                return ab_err_set(err, e == EADDRINUSE ? AB_E_CONFLICT : AB_E_UNAVAILABLE, e,
                                  "cannot listen on %s", o->listen);
        }
        if (listen(fd, 4096) < 0) {
                int e = errno;
                close(fd);
                return ab_err_set(err, AB_E_UNAVAILABLE, e, "listen on %s", o->listen);
        }
        struct sockaddr_storage bound;
        socklen_t bl = sizeof(bound);
        /* egress (proxy, httpRequest, image pulls) never reaches the server itself */
        if (ab_addr_note_listen((struct sockaddr *)&ss) < 0)
                ab_log(AB_LOG_WARN, "too many listen addresses to keep from egress", NULL);
        if (getsockname(fd, (struct sockaddr *)&bound, &bl) == 0)
                h->port =
                    ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                      : ((struct sockaddr_in *)&bound)->sin_port);
        *family = ss.ss_family;
        return fd;
}

int ab_http_start(ab_http *h, const ab_http_opts *o, ab_err **err)
{
        int family = AF_INET;
        int fd = listen_on(h, o, &family, err);
        if (fd < 0)
                return -1;
        raise_nofile(o->max_connections);
        if (start_tables(h, o, err) < 0) {
                close(fd);
                return -1;
        }
        /* One polling thread (epoll) for every connection; handlers run on
         * the workers; suspended connections cost no thread. */
        unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                         MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG;
        if (family == AF_INET6)
                flags |= MHD_USE_IPv6;
        /* MHD's own limit sits above ours, so ab_conns_accept refuses (and
         * counts) first. */
        unsigned mhd_limit = (unsigned)o->max_connections + 64;
        h->mhd = MHD_start_daemon(
            flags, 0, ab_conns_accept, h->conns, o->on_request, o->cls, MHD_OPTION_EXTERNAL_LOGGER,
            mhd_log, NULL, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED,
            o->on_completed, o->cls, MHD_OPTION_NOTIFY_CONNECTION, ab_conns_notify, h->conns,
            MHD_OPTION_URI_LOG_CALLBACK, ab_conns_uri_seen, h->conns, MHD_OPTION_CONNECTION_LIMIT,
            mhd_limit, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_CONN_TIMEOUT_S,
            MHD_OPTION_END);
        if (!h->mhd) {
                close(fd);
                ab_workers_free(steal_pointer(&h->workers));
                ab_conns_free(steal_pointer(&h->conns));
                return ab_err_set(err, AB_E_INTERNAL, 0, "cannot start the HTTP server on %s",
                                  o->listen);
        }
        return 0;
}

int ab_http_start_external(ab_http *h, const ab_http_opts *o, ab_err **err)
{
        if (start_tables(h, o, err) < 0)
                return -1;
        /* The same request path as ab_http_start (handlers on the workers,
         * connections suspended meanwhile), driven by the caller's MHD_run. */
        h->mhd = MHD_start_daemon(
            MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC | MHD_USE_ERROR_LOG,
            0, ab_conns_accept, h->conns, o->on_request, o->cls, MHD_OPTION_EXTERNAL_LOGGER,
            mhd_log, NULL, MHD_OPTION_NOTIFY_COMPLETED, o->on_completed, o->cls,
            MHD_OPTION_NOTIFY_CONNECTION, ab_conns_notify, h->conns, MHD_OPTION_URI_LOG_CALLBACK,
            ab_conns_uri_seen, h->conns, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned)o->max_connections + 64, MHD_OPTION_CONNECTION_TIMEOUT,
            (unsigned)IDLE_CONN_TIMEOUT_S, MHD_OPTION_END);
        if (!h->mhd) {
                ab_workers_free(steal_pointer(&h->workers));
                ab_conns_free(steal_pointer(&h->conns));
                return ab_err_set(err, AB_E_INTERNAL, 0, "cannot start the HTTP daemon");
        }
        return 0;
}

void ab_http_quiesce(ab_http *h)
{
        if (!h->mhd)
                return;
        int fd = MHD_quiesce_daemon(h->mhd);
        if (fd >= 0)
                close(fd);
}

void ab_http_drain(ab_http *h)
{
        if (!h->mhd)
                return;
        /* MHD must not stop with a connection suspended: streams end, and
         * handlers in flight finish (each resumes its connection). */
        ab_conns_stop_streams(h->conns);
        ab_workers_drain(h->workers);
}

void ab_http_stop(ab_http *h)
{
        if (!h->mhd)
                return;
        MHD_stop_daemon(h->mhd);
        h->mhd = NULL;
        ab_workers_free(steal_pointer(&h->workers));
        ab_conns_free(steal_pointer(&h->conns));
}

void ab_http_counts(ab_http *h, ab_buf *b)
{
        ab_conns_metrics(h->conns, b);
        ab_buf_printf(b,
                      "# HELP agentbox_http_requests_in_flight Requests being handled.\n"
                      "# TYPE agentbox_http_requests_in_flight gauge\n"
                      "agentbox_http_requests_in_flight %zu\n",
                      ab_workers_in_flight(h->workers));
}
