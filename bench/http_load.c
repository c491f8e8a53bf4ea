/* http_load - a small HTTP/1.1 load generator for bench/http.sh.
 *
 *   http_load [OPTIONS] URL [URL...]
 *
 * Sends one request (method, path, body) again and again over N keep-alive
 * connections, one thread per connection, for a count or a duration, then
 * prints requests, errors, requests per second and latency percentiles.
 * Plain sockets and pthreads; nothing else.
 *
 *   URL          http://HOST:PORT/PATH; with several URLs, connection i uses
 *                URL i % count (e.g. 200 connections over 20 boxes)
 *   -m METHOD    default GET, or POST when -d is given
 *   -d BODY      request body, sent with Content-Type: application/json
 *   -H 'K: V'    an extra request header (repeatable)
 *   -c N         connections (= threads), default 1
 *   -n N         total requests over all connections (default 1 unless -t)
 *   -t SECS      run for this long instead (fractions allowed); requests in
 *                flight at the end are finished and counted
 *   -W N         warm-up requests per connection before the clock starts (not counted)
 *   -i MS        pause between two requests of one connection (untimed)
 *   -x STR       a 2xx response whose body lacks STR counts as an error
 *   -s N         first value of %n (default 0): "%n" in the body or path is
 *                replaced by a number unique to each request ("%%" is "%")
 *   -T MS        per-request timeout (default 30000)
 *   -o FILE      append each latency (microseconds, one a line) to FILE
 *   -e N         print up to N failed responses or socket errors to stderr (default 3)
 *   -q           print only the RESULT line
 *
 * Output (latencies in ms, over every request that got a whole response,
 * whatever its status):
 *   requests 300  errors 0 (status 0, socket 0, expect 0)  reconnects 0
 *   ...
 *   RESULT requests=300 errors=0 rps=... min=... p50=... p90=... p99=... max=... mean=... cpu_s=...
 * (cpu_s: the CPU time http_load itself used, user + system, in seconds)
 *
 * Latency runs from the first byte written to the last byte of the body
 * read. A connection is opened before the clock starts; when the server
 * closes it (Connection: close, or an error) it is reopened and the time to
 * reconnect is part of that request. Responses are read by Content-Length,
 * chunked transfer coding (extensions and trailers skipped) or, lacking both,
 * until the server closes. Exit status: 0 when every request succeeded, 1 when
 * some failed, 2 on bad usage. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RBUF_SIZE  65536
#define BODY_KEEP  16384 /* bytes of each body kept for -x and error reports */
#define MAX_HEADER 256

typedef struct target {
        char host[256];
        char port[16];
        char *path;
        struct sockaddr_storage addr;
        socklen_t alen;
} target;

/* ---- options ------------------------------------------------------------ */

static const char *o_method;
static const char *o_body;
static const char *o_headers[MAX_HEADER];
static int o_nheaders;
static long o_conns = 1;
static long o_count = -1;
static double o_secs = -1;
static long o_warmup;
static long o_interval_ms;
static const char *o_expect;
static long o_seq_start;
static long o_timeout_ms = 30000;
static const char *o_dump;
static long o_print_errors = 3;
static bool o_quiet;
static target *targets;
static int ntargets;

/* ---- shared state -------------------------------------------------------- */

static atomic_long issued;     /* count mode: requests handed out */
static atomic_long seq;        /* %n */
static atomic_bool stop;       /* duration mode: time is up */
static atomic_long errs_shown; /* -e */
static pthread_barrier_t start_line;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct worker {
        pthread_t tid;
        int id;
        const target *t;
        int fd;
        char rbuf[RBUF_SIZE];
        size_t rpos, rlen;
        char body[BODY_KEEP + 1];
        size_t body_len;
        /* results */
        uint64_t *lat_ns;
        size_t n_lat, cap_lat;
        long ok, err_status, err_socket, err_expect, reconnects;
        long status_count[6]; /* 1xx..5xx by first digit; [0] = other */
        int setup_failed;
} worker;

static uint64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((format(printf, 1, 2), noreturn)) static void die_usage(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "http_load: ");
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr,
                "\nusage: http_load [-m METHOD] [-d BODY] [-H 'K: V'] [-c CONNS] [-n COUNT | "
                "-t SECS] [-W WARMUP] [-i MS] [-x STR] [-s SEQ] [-T MS] [-o FILE] [-e N] "
                "[-q] URL...\n");
        exit(2);
}

static long parse_long(const char *s, const char *what)
{
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < 0)
                die_usage("%s %s: not a whole number >= 0", what, s);
        return v;
}

/* Copies n bytes of src into dst (a NUL-terminated string of size cap). */
static void copy_part(char *dst, size_t cap, const char *src, size_t n, const char *url)
{
        if (n == 0 || n >= cap)
                die_usage("%s: bad host or port", url);
        memcpy(dst, src, n);
        dst[n] = 0;
}

static void parse_url(const char *url, target *t)
{
        if (strncmp(url, "http://", 7) != 0)
                die_usage("%s: only http:// URLs", url);
        const char *h = url + 7;
        const char *slash = strchr(h, '/');
        const char *end = slash ? slash : h + strlen(h);
        const char *hend, *colon;
        if (*h == '[') { /* [v6]:port */
                const char *rb = memchr(h, ']', (size_t)(end - h));
                if (!rb)
                        die_usage("%s: bad host", url);
                h++;
                hend = rb;
                colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
        } else {
                colon = memrchr(h, ':', (size_t)(end - h));
                hend = colon ? colon : end;
        }
        copy_part(t->host, sizeof(t->host), h, (size_t)(hend - h), url);
        if (colon)
                copy_part(t->port, sizeof(t->port), colon + 1, (size_t)(end - colon - 1), url);
        else
                strcpy(t->port, "80");
        t->path = strdup(slash ? slash : "/");
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
        int r = getaddrinfo(t->host, t->port, &hints, &ai);
        if (r != 0) {
                fprintf(stderr, "http_load: %s: %s\n", url, gai_strerror(r));
                exit(2);
        }
        memcpy(&t->addr, ai->ai_addr, ai->ai_addrlen);
        t->alen = ai->ai_addrlen;
        freeaddrinfo(ai);
}

/* Replaces %n by a fresh sequence number and %% by %. */
static size_t expand(char *dst, size_t cap, const char *src, long n)
{
        size_t o = 0;
        for (const char *s = src; *s; s++) {
                if (s[0] == '%' && s[1] == 'n') {
                        o += (size_t)snprintf(dst ? dst + o : NULL, dst ? cap - o : 0, "%ld", n);
                        s++;
                } else {
                        if (s[0] == '%' && s[1] == '%')
                                s++;
                        if (dst)
                                dst[o] = *s;
                        o++;
                }
        }
        if (dst)
                dst[o] = 0;
        return o;
}

/* Builds the request; *len gets its length. The caller frees it. */
static char *build_request(const target *t, long n, size_t *len)
{
        size_t pl = expand(NULL, 0, t->path, n), bl = o_body ? expand(NULL, 0, o_body, n) : 0;
        char *path = malloc(pl + 1), *body = malloc(bl + 1);
        expand(path, pl + 1, t->path, n);
        if (o_body)
                expand(body, bl + 1, o_body, n);
        size_t cap = pl + bl + 512 + strlen(t->host);
        for (int i = 0; i < o_nheaders; i++)
                cap += strlen(o_headers[i]) + 2;
        char *req = malloc(cap);
        bool v6 = strchr(t->host, ':') != NULL;
        size_t o = (size_t)snprintf(req, cap,
                                    "%s %s HTTP/1.1\r\nHost: %s%s%s:%s\r\n"
                                    "User-Agent: agentbox-http_load\r\nAccept: */*\r\n",
                                    o_method, path, v6 ? "[" : "", t->host, v6 ? "]" : "", t->port);
        for (int i = 0; i < o_nheaders; i++)
                o += (size_t)snprintf(req + o, cap - o, "%s\r\n", o_headers[i]);
        if (o_body)
                o += (size_t)snprintf(req + o, cap - o,
                                      "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                                      bl);
        o += (size_t)snprintf(req + o, cap - o, "\r\n");
        if (o_body) {
                memcpy(req + o, body, bl);
                o += bl;
        }
        free(path);
        free(body);
        *len = o;
        return req;
}

/* ---- connection ------------------------------------------------------------ */

static void conn_close(worker *w)
{
        if (w->fd >= 0)
                close(w->fd);
        w->fd = -1;
        w->rpos = w->rlen = 0;
}

static int conn_open(worker *w)
{
        conn_close(w);
        int fd = socket(w->t->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct timeval tv = {o_timeout_ms / 1000, (o_timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (connect(fd, (const struct sockaddr *)&w->t->addr, w->t->alen) < 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        w->fd = fd;
        return 0;
}

/* Reads more bytes into rbuf (compacting it first). 0 on EOF, -errno on error. */
static ssize_t fill(worker *w)
{
        if (w->rpos > 0) {
                memmove(w->rbuf, w->rbuf + w->rpos, w->rlen - w->rpos);
                w->rlen -= w->rpos;
                w->rpos = 0;
        }
        if (w->rlen == sizeof(w->rbuf))
                return -E2BIG;
        for (;;) {
                ssize_t r = recv(w->fd, w->rbuf + w->rlen, sizeof(w->rbuf) - w->rlen, 0);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
                w->rlen += (size_t)r;
                return r;
        }
}

/* One line without its CR LF, NUL-terminated inside rbuf (valid until the
 * next read). NULL with *e set on error or EOF (*e = 0 for EOF). */
static char *read_line(worker *w, int *e)
{
        for (;;) {
                char *nl = memchr(w->rbuf + w->rpos, '\n', w->rlen - w->rpos);
                if (nl) {
                        char *line = w->rbuf + w->rpos;
                        w->rpos = (size_t)(nl - w->rbuf) + 1;
                        *nl = 0;
                        if (nl > line && nl[-1] == '\r')
                                nl[-1] = 0;
                        return line;
                }
                ssize_t r = fill(w);
                if (r <= 0) {
                        *e = (int)-r;
                        return NULL;
                }
        }
}

static void keep_body(worker *w, const char *p, size_t n)
{
        size_t room = BODY_KEEP - w->body_len;
        if (n > room)
                n = room;
        memcpy(w->body + w->body_len, p, n);
        w->body_len += n;
        w->body[w->body_len] = 0;
}

/* Consumes n body bytes (n < 0: until EOF). 0 or -errno (-EPIPE: early EOF). */
static int read_body(worker *w, long long n)
{
        while (n != 0) {
                if (w->rpos == w->rlen) {
                        ssize_t r = fill(w);
                        if (r < 0)
                                return (int)r;
                        if (r == 0)
                                return n < 0 ? 0 : -EPIPE;
                }
                size_t have = w->rlen - w->rpos;
                size_t take = n < 0 || (unsigned long long)n > have ? have : (size_t)n;
                keep_body(w, w->rbuf + w->rpos, take);
                w->rpos += take;
                if (n > 0)
                        n -= (long long)take;
        }
        return 0;
}

static bool has_token(const char *v, const char *tok)
{
        size_t tl = strlen(tok);
        for (const char *p = v; *p; p++)
                if (strncasecmp(p, tok, tl) == 0)
                        return true;
        return false;
}

/* Reads one response. *status gets its status; *close_after is set when the
 * connection cannot be reused. 0, or -errno (socket error, EOF, bad framing). */
static int read_response(worker *w, bool head, int *status, bool *close_after)
{
        int e = 0;
        w->body_len = 0;
        w->body[0] = 0;
        for (;;) {
                char *line = read_line(w, &e);
                if (!line)
                        return e ? -e : -EPIPE;
                int minor = 0, st = 0;
                if (sscanf(line, "HTTP/1.%d %3d", &minor, &st) != 2 || st < 100 || st > 999)
                        return -EPROTO;
                bool keep = minor >= 1;
                long long clen = -1;
                bool chunked = false;
                for (;;) {
                        char *h = read_line(w, &e);
                        if (!h)
                                return e ? -e : -EPIPE;
                        if (!*h)
                                break;
                        char *colon = strchr(h, ':');
                        if (!colon)
                                return -EPROTO;
                        *colon = 0;
                        char *v = colon + 1;
                        while (*v == ' ' || *v == '\t')
                                v++;
                        if (!strcasecmp(h, "Content-Length")) {
                                char *end;
                                errno = 0;
                                clen = strtoll(v, &end, 10);
                                if (errno || end == v || clen < 0)
                                        return -EPROTO;
                        } else if (!strcasecmp(h, "Transfer-Encoding")) {
                                chunked = has_token(v, "chunked");
                        } else if (!strcasecmp(h, "Connection")) {
                                if (has_token(v, "close"))
                                        keep = false;
                                else if (has_token(v, "keep-alive"))
                                        keep = true;
                        }
                }
                if (st >= 100 && st < 200 && st != 101)
                        continue; /* interim response: the real one follows */
                *status = st;
                *close_after = !keep;
                if (head || st == 204 || st == 304 || (st >= 100 && st < 200))
                        return 0;
                if (chunked) {
                        for (;;) {
                                char *sz = read_line(w, &e);
                                if (!sz)
                                        return e ? -e : -EPIPE;
                                char *end;
                                errno = 0;
                                long long n = strtoll(sz, &end, 16);
                                if (errno || end == sz || n < 0 ||
                                    (*end && *end != ';' && *end != ' ' && *end != '\t'))
                                        return -EPROTO;
                                if (n == 0)
                                        break;
                                int r = read_body(w, n);
                                if (r < 0)
                                        return r;
                                char *crlf = read_line(w, &e);
                                if (!crlf)
                                        return e ? -e : -EPIPE;
                                if (*crlf)
                                        return -EPROTO;
                        }
                        for (;;) { /* trailers, up to the empty line */
                                char *t = read_line(w, &e);
                                if (!t)
                                        return e ? -e : -EPIPE;
                                if (!*t)
                                        break;
                        }
                        return 0;
                }
                if (clen >= 0)
                        return read_body(w, clen);
                *close_after = true; /* delimited by the end of the connection */
                return read_body(w, -1);
        }
}

static int send_all(int fd, const char *p, size_t n)
{
        while (n > 0) {
                ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
                p += r;
                n -= (size_t)r;
        }
        return 0;
}

static void show_error(worker *w, const char *what, int status, int e)
{
        if (atomic_fetch_add(&errs_shown, 1) >= o_print_errors)
                return;
        pthread_mutex_lock(&print_lock);
        if (status)
                fprintf(stderr, "http_load: conn %d: %s %s -> %s %d: %.*s\n", w->id, o_method,
                        w->t->path, what, status, (int)(w->body_len > 2000 ? 2000 : w->body_len),
                        w->body);
        else
                fprintf(stderr, "http_load: conn %d: %s %s -> %s: %s\n", w->id, o_method,
                        w->t->path, what, strerror(e));
        pthread_mutex_unlock(&print_lock);
}

/* One request and its response. Returns true when it got a whole response
 * (its latency then counts). */
static bool one_request(worker *w, bool counted)
{
        size_t len;
        char *req = build_request(w->t, atomic_fetch_add(&seq, 1), &len);
        bool head = !strcmp(o_method, "HEAD");
        uint64_t t0 = now_ns();
        int status = 0, r;
        bool close_after = false, reused = w->fd >= 0;
        if (w->fd < 0) {
                r = conn_open(w);
                if (r < 0)
                        goto sockerr;
                if (counted)
                        w->reconnects++;
        }
        r = send_all(w->fd, req, len);
        if (r == 0)
                r = read_response(w, head, &status, &close_after);
        if (r < 0)
                goto sockerr;
        uint64_t dt = now_ns() - t0;
        free(req);
        if (close_after)
                conn_close(w);
        if (!counted)
                return true;
        if (w->n_lat == w->cap_lat) {
                w->cap_lat = w->cap_lat ? w->cap_lat * 2 : 1024;
                w->lat_ns = realloc(w->lat_ns, w->cap_lat * sizeof(uint64_t));
        }
        w->lat_ns[w->n_lat++] = dt;
        w->status_count[status >= 100 && status < 600 ? status / 100 : 0]++;
        if (status < 200 || status > 299) {
                w->err_status++;
                show_error(w, "status", status, 0);
        } else if (o_expect && !strstr(w->body, o_expect)) {
                w->err_expect++;
                show_error(w, "body lacks the expected text; status", status, 0);
        } else {
                w->ok++;
        }
        return true;
sockerr:
        free(req);
        conn_close(w);
        if (counted) {
                w->err_socket++;
                show_error(w, reused ? "socket error (reused connection)" : "socket error", 0, -r);
        }
        return false;
}

static void pause_ms(long ms)
{
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static void *worker_main(void *arg)
{
        worker *w = arg;
        w->fd = -1;
        if (conn_open(w) < 0)
                w->setup_failed = 1; /* retried by the first request, counted there */
        for (long i = 0; i < o_warmup; i++) {
                one_request(w, false);
                if (o_interval_ms)
                        pause_ms(o_interval_ms);
        }
        pthread_barrier_wait(&start_line);
        for (bool first = true;; first = false) {
                if (o_count >= 0) {
                        if (atomic_fetch_add(&issued, 1) >= o_count)
                                break;
                } else if (atomic_load(&stop)) {
                        break;
                }
                if (!first && o_interval_ms)
                        pause_ms(o_interval_ms);
                one_request(w, true);
        }
        conn_close(w);
        return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return (x > y) - (x < y);
}

static double pct_ms(const uint64_t *v, size_t n, double p)
{
        if (n == 0)
                return NAN;
        size_t k = (size_t)ceil(p / 100.0 * (double)n);
        if (k < 1)
                k = 1;
        if (k > n)
                k = n;
        return (double)v[k - 1] / 1e6;
}

int main(int argc, char **argv)
{
        int opt;
        while ((opt = getopt(argc, argv, "m:d:H:c:n:t:W:i:x:s:T:o:e:qh")) != -1) {
                switch (opt) {
                case 'm':
                        o_method = optarg;
                        break;
                case 'd':
                        o_body = optarg;
                        break;
                case 'H':
                        if (o_nheaders == MAX_HEADER)
                                die_usage("-H %s: too many headers", optarg);
                        if (!strchr(optarg, ':') || strpbrk(optarg, "\r\n"))
                                die_usage("%s: a header is 'Name: value'", optarg);
                        o_headers[o_nheaders++] = optarg;
                        break;
                case 'c':
                        o_conns = parse_long(optarg, "-c");
                        break;
                case 'n':
                        o_count = parse_long(optarg, "-n");
                        break;
                case 't': {
                        char *end;
                        o_secs = strtod(optarg, &end);
                        if (end == optarg || *end || !(o_secs > 0))
                                die_usage("-t %s: not a positive number of seconds", optarg);
                        break;
                }
                case 'W':
                        o_warmup = parse_long(optarg, "-W");
                        break;
                case 'i':
                        o_interval_ms = parse_long(optarg, "-i");
                        break;
                case 'x':
                        o_expect = optarg;
                        break;
                case 's':
                        o_seq_start = parse_long(optarg, "-s");
                        break;
                case 'T':
                        o_timeout_ms = parse_long(optarg, "-T");
                        break;
                case 'o':
                        o_dump = optarg;
                        break;
                case 'e':
                        o_print_errors = parse_long(optarg, "-e");
                        break;
                case 'q':
                        o_quiet = true;
                        break;
                case 'h':
                default:
                        die_usage("%s", opt == 'h' ? "a load generator" : "bad option");
                }
        }
        if (optind >= argc)
                die_usage("%s", "no URL");
        if (o_conns < 1 || o_conns > 10000)
                die_usage("%s", "-c must be 1..10000");
        if (o_count >= 0 && o_secs > 0)
                die_usage("%s", "give -n or -t, not both");
        if (o_count < 0 && !(o_secs > 0))
                o_count = 1;
        if (o_timeout_ms < 1)
                o_timeout_ms = 1;
        if (!o_method)
                o_method = o_body ? "POST" : "GET";
        ntargets = argc - optind;
        targets = calloc((size_t)ntargets, sizeof(target));
        for (int i = 0; i < ntargets; i++)
                parse_url(argv[optind + i], &targets[i]);
        atomic_store(&seq, o_seq_start);
        signal(SIGPIPE, SIG_IGN);

        worker *ws = calloc((size_t)o_conns, sizeof(worker));
        if (!ws) {
                perror("http_load: calloc");
                return 2;
        }
        pthread_barrier_init(&start_line, NULL, (unsigned)o_conns + 1);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        for (long i = 0; i < o_conns; i++) {
                ws[i].id = (int)i;
                ws[i].t = &targets[i % ntargets];
                int r = pthread_create(&ws[i].tid, &attr, worker_main, &ws[i]);
                if (r) {
                        fprintf(stderr, "http_load: pthread_create: %s\n", strerror(r));
                        return 2;
                }
        }
        pthread_barrier_wait(&start_line);
        uint64_t t0 = now_ns();
        if (o_secs > 0) {
                pause_ms((long)(o_secs * 1000));
                atomic_store(&stop, true);
        }
        for (long i = 0; i < o_conns; i++)
                pthread_join(ws[i].tid, NULL);
        double secs = (double)(now_ns() - t0) / 1e9;

        size_t n = 0;
        long ok = 0, e_st = 0, e_so = 0, e_ex = 0, reconn = 0, setup_failed = 0, sc[6] = {0};
        for (long i = 0; i < o_conns; i++) {
                n += ws[i].n_lat;
                ok += ws[i].ok;
                e_st += ws[i].err_status;
                e_so += ws[i].err_socket;
                e_ex += ws[i].err_expect;
                reconn += ws[i].reconnects;
                setup_failed += ws[i].setup_failed;
                for (int k = 0; k < 6; k++)
                        sc[k] += ws[i].status_count[k];
        }
        uint64_t *all = malloc((n ? n : 1) * sizeof(uint64_t));
        size_t o = 0;
        for (long i = 0; i < o_conns; i++) {
                memcpy(all + o, ws[i].lat_ns, ws[i].n_lat * sizeof(uint64_t));
                o += ws[i].n_lat;
        }
        if (o_dump) {
                FILE *f = fopen(o_dump, "a");
                if (!f) {
                        fprintf(stderr, "http_load: %s: %s\n", o_dump, strerror(errno));
                } else {
                        for (size_t i = 0; i < n; i++)
                                fprintf(f, "%.1f\n", (double)all[i] / 1e3);
                        fclose(f);
                }
        }
        qsort(all, n, sizeof(uint64_t), cmp_u64);
        double sum = 0;
        for (size_t i = 0; i < n; i++)
                sum += (double)all[i];
        long total = ok + e_st + e_so + e_ex, errors = e_st + e_so + e_ex;
        double rps = secs > 0 ? (double)total / secs : 0;
        double mn = n ? (double)all[0] / 1e6 : NAN, p50 = pct_ms(all, n, 50),
               p90 = pct_ms(all, n, 90), p99 = pct_ms(all, n, 99), mx = pct_ms(all, n, 100),
               mean = n ? sum / (double)n / 1e6 : NAN;
        if (!o_quiet) {
                printf("%s %s x%d: %ld connection%s, %s", o_method, targets[0].path, ntargets,
                       o_conns, o_conns == 1 ? "" : "s", o_secs > 0 ? "" : "count ");
                if (o_secs > 0)
                        printf("%.1f s\n", o_secs);
                else
                        printf("%ld\n", o_count);
                printf("requests %ld  errors %ld (status %ld, socket %ld, expect %ld)  reconnects "
                       "%ld%s\n",
                       total, errors, e_st, e_so, e_ex, reconn,
                       setup_failed ? "  (some first connects failed)" : "");
                printf("duration %.3f s  rps %.1f\n", secs, rps);
                printf("latency ms: min %.3f  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f  mean %.3f\n",
                       mn, p50, p90, p99, mx, mean);
                printf("status: 1xx %ld  2xx %ld  3xx %ld  4xx %ld  5xx %ld  other %ld\n", sc[1],
                       sc[2], sc[3], sc[4], sc[5], sc[0]);
        }
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
        printf("RESULT requests=%ld errors=%ld rps=%.1f min=%.3f p50=%.3f p90=%.3f p99=%.3f "
               "max=%.3f mean=%.3f cpu_s=%.3f\n",
               total, errors, rps, mn, p50, p90, p99, mx, mean, cpu);
        return errors ? 1 : 0;
}
