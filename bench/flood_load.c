/* flood_load - the hostile client of bench/flood.sh: holds many slow-header
 * connections and idle event streams open against an HTTP server, from one
 * source address, until it gets SIGTERM or SIGINT.
 *
 *   flood_load -a SRC_ADDR -p PORT [-s N] [-e N] [-l MS] [-P PATH] [-H HOST]
 *
 *   -a ADDR   source address to bind (e.g. 127.0.0.2); the server is HOST
 *   -H HOST   server address (default 127.0.0.1)
 *   -p PORT   server port
 *   -s N      slow-header connections to hold (default 5000): each sends a
 *             request line and one header, then one more header line every
 *             -l MS (default 2000), never the blank line that ends the head;
 *             a connection the server closes is noted (its lifetime) and
 *             opened again, so N stay open
 *   -e N      idle event streams to hold (default 500): GET PATH (default
 *             /v1/events) with a complete head; whatever arrives is read and
 *             dropped; a stream that ends is opened again
 *
 * Every second it prints one status line to stdout:
 *   STATUS t=SECS slow_open=N sse_open=N slow_closed=N sse_closed=N
 *          refused=N life_p50=SECS life_min=SECS life_max=SECS
 * (slow_closed: slow connections the server closed so far; life_*: how long
 * those lived, from the handshake done to the close seen here; refused: connects that
 * failed or were closed before a slow connection got its first line out).
 * One epoll loop, nonblocking sockets; nothing else. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { SLOW, SSE };

typedef struct conn {
        int fd, kind;
        double opened, last_line;
        unsigned lines;
        bool connected;
} conn;

static volatile sig_atomic_t stop;
static struct sockaddr_in src, dst;
static const char *path = "/v1/events";
static int epfd;
static unsigned long slow_closed, sse_closed, refused;
static double *lives;
static size_t n_lives, cap_lives;

static double now_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_signal(int sig)
{
        (void)sig;
        stop = 1;
}

static int open_conn(conn *c)
{
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd < 0)
                return -1;
        /* The port is chosen at connect, by the whole 4-tuple: a bind to port
         * 0 would search the address's ports (slow with thousands in use) and
         * could pick one whose tuple is still in TIME_WAIT from a previous run. */
        int one = 1;
        setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
        if (bind(c->fd, (struct sockaddr *)&src, sizeof(src)) < 0 ||
            (connect(c->fd, (struct sockaddr *)&dst, sizeof(dst)) < 0 && errno != EINPROGRESS)) {
                close(c->fd);
                c->fd = -1;
                return -1;
        }
        c->opened = now_s();
        c->last_line = 0;
        c->lines = 0;
        c->connected = false;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.ptr = c};
        epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
        return 0;
}

static void note_life(double life)
{
        if (n_lives == cap_lives) {
                cap_lives = cap_lives ? cap_lives * 2 : 1024;
                lives = realloc(lives, cap_lives * sizeof(*lives));
                if (!lives)
                        abort();
        }
        lives[n_lives++] = life;
}

static void close_conn(conn *c, bool by_server)
{
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
        if (!by_server)
                return;
        if (c->kind == SLOW && c->lines > 0) {
                slow_closed++;
                note_life(now_s() - c->opened);
        } else if (c->kind == SSE && c->connected) {
                sse_closed++;
        } else {
                refused++;
        }
}

static void send_str(conn *c, const char *s)
{
        ssize_t n = send(c->fd, s, strlen(s), MSG_NOSIGNAL);
        (void)n; /* a full buffer or a closed socket shows as EPOLLRDHUP/EOF */
}

/* First writable moment: the request line (and, for SSE, the whole head). */
static void on_connected(conn *c)
{
        c->connected = true;
        c->opened = now_s(); /* lifetimes count from here: a SYN the server's backlog
                              * dropped and TCP resent is not the server's deadline */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
        if (c->kind == SSE) {
                char req[512];
                snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: flood\r\n\r\n", path);
                send_str(c, req);
                return;
        }
        send_str(c, "GET /health HTTP/1.1\r\nHost: flood\r\n");
        c->lines = 1;
        c->last_line = now_s();
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

static void usage(void)
{
        fprintf(stderr, "usage: flood_load -a SRC_ADDR -p PORT [-s N] [-e N] [-l MS] [-P PATH] "
                        "[-H HOST]\n");
        exit(2);
}

int main(int argc, char **argv)
{
        const char *src_addr = NULL, *host = "127.0.0.1";
        int port = 0, n_slow = 5000, n_sse = 500, line_ms = 2000, opt;
        while ((opt = getopt(argc, argv, "a:H:p:s:e:l:P:")) != -1) {
                switch (opt) {
                case 'a':
                        src_addr = optarg;
                        break;
                case 'H':
                        host = optarg;
                        break;
                case 'p':
                        port = atoi(optarg);
                        break;
                case 's':
                        n_slow = atoi(optarg);
                        break;
                case 'e':
                        n_sse = atoi(optarg);
                        break;
                case 'l':
                        line_ms = atoi(optarg);
                        break;
                case 'P':
                        path = optarg;
                        break;
                default:
                        usage();
                }
        }
        if (!src_addr || port <= 0 || n_slow < 0 || n_sse < 0 || line_ms <= 0)
                usage();
        src.sin_family = dst.sin_family = AF_INET;
        dst.sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, src_addr, &src.sin_addr) != 1 ||
            inet_pton(AF_INET, host, &dst.sin_addr) != 1)
                usage();
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
        epfd = epoll_create1(EPOLL_CLOEXEC);
        size_t n = (size_t)n_slow + (size_t)n_sse;
        conn *cs = calloc(n ? n : 1, sizeof(*cs));
        if (!cs || epfd < 0)
                return 1;
        for (size_t i = 0; i < n; i++) {
                cs[i].kind = i < (size_t)n_sse ? SSE : SLOW;
                cs[i].fd = -1;
        }
        double t0 = now_s(), next_status = t0 + 1, next_tick = t0;
        unsigned long trickle_n = 0;
        char buf[65536];
        while (!stop) {
                double t = now_s();
                if (t >= next_tick) { /* (re)open, and trickle a line where due */
                        next_tick = t + 0.05;
                        size_t opened = 0;
                        for (size_t i = 0; i < n; i++) {
                                conn *c = &cs[i];
                                if (c->fd < 0) {
                                        if (opened < 500 && open_conn(c) < 0)
                                                refused++;
                                        opened++;
                                        continue;
                                }
                                if (c->kind == SLOW && c->connected &&
                                    t - c->last_line >= line_ms / 1000.0) {
                                        char line[64];
                                        snprintf(line, sizeof(line), "X-Trickle-%lu: 1\r\n",
                                                 ++trickle_n);
                                        send_str(c, line);
                                        c->lines++;
                                        c->last_line = t;
                                }
                        }
                }
                struct epoll_event evs[256];
                int k = epoll_wait(epfd, evs, 256, 50);
                for (int i = 0; i < k; i++) {
                        conn *c = evs[i].data.ptr;
                        if (c->fd < 0)
                                continue;
                        if (!c->connected) {
                                int err = 0;
                                socklen_t el = sizeof(err);
                                getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                                if (err || (evs[i].events & (EPOLLERR | EPOLLHUP))) {
                                        close_conn(c, true);
                                        continue;
                                }
                                if (evs[i].events & EPOLLOUT)
                                        on_connected(c);
                        }
                        if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                                ssize_t r;
                                while ((r = recv(c->fd, buf, sizeof(buf), 0)) > 0)
                                        ;
                                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
                                        close_conn(c, true);
                        }
                }
                if (now_s() >= next_status) {
                        next_status += 1;
                        size_t so = 0, eo = 0;
                        for (size_t i = 0; i < n; i++)
                                if (cs[i].fd >= 0 && cs[i].connected)
                                        *(cs[i].kind == SLOW ? &so : &eo) += 1;
                        double p50 = 0, mn = 0, mx = 0;
                        if (n_lives) {
                                double *v = malloc(n_lives * sizeof(*v));
                                if (!v)
                                        abort();
                                memcpy(v, lives, n_lives * sizeof(*v));
                                qsort(v, n_lives, sizeof(*v), cmp_double);
                                p50 = v[(n_lives - 1) / 2];
                                mn = v[0];
                                mx = v[n_lives - 1];
                                free(v);
                        }
                        printf("STATUS t=%.0f slow_open=%zu sse_open=%zu slow_closed=%lu "
                               "sse_closed=%lu refused=%lu life_p50=%.2f life_min=%.2f "
                               "life_max=%.2f\n",
                               now_s() - t0, so, eo, slow_closed, sse_closed, refused, p50, mn, mx);
                        fflush(stdout);
                }
        }
        for (size_t i = 0; i < n; i++)
                if (cs[i].fd >= 0)
                        close(cs[i].fd);
        free(cs);
        free(lives);
        return 0;
}
