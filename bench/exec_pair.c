/* exec_pair - an HTTP exec and the host's own spawn of /bin/true, measured
 * in alternation, for bench/exec.sh.
 *
 *   exec_pair [-n N] [-W WARM] [-u INIT_SOCK] [-g] [-S 'PROG ARG...' [-E NAME=VALUE]...]
 *             HOST PORT PATH BODY [BODY...]
 *
 * Each round starts /bin/true with posix_spawn and waits for it (the host's
 * floor), then POSTs each BODY to PATH once on one keep-alive connection
 * (application/json), timing each from the first byte written to the last
 * byte of the answer read. Alternating one of each at a time puts the floor
 * and the execs under the same load, which series run one after the other
 * (seconds apart) do not on a shared host. An answer that is not 200 or
 * lacks "exit_code":0 is an error. Prints, in milliseconds:
 *   RESULT what=spawn n=N p50=... p90=...
 *   RESULT what=body1 n=N p50=... p90=... ratio_p50=...  (p50 / spawn's p50)
 *   ...
 * With -S, each round also starts a second host program right after
 * /bin/true (PROG and its arguments, split at spaces; PROG found along PATH
 * of -E's environment, else /usr/bin:/bin) with only the -E entries as its
 * environment (what=spawn2, ratio_p50 over spawn's: e.g. bash's own start,
 * the floor of a shell-string exec). With -u, each round also runs `true` (an argv, no shell)
 * straight on the box's init at INIT_SOCK (its unix socket, the server's way in): once on a
 * connection kept from one round to the next (what=init_kept: init's part of
 * an exec) and once on a new connection (what=init_new: plus a connect and
 * a session); with -g, GET /health on the HTTP connection (what=health: the
 * HTTP floor). bench/breakdown.sh subtracts these to say where an exec's
 * time goes.
 * Exit status 0, 1 on a failed request, 2 on bad usage. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

static double pct(double *v, size_t n, double p)
{
        qsort(v, n, sizeof(*v), cmp);
        size_t k = (size_t)(p / 100.0 * (double)n + 0.999999);
        return v[(k < 1 ? 1 : k > n ? n : k) - 1];
}

static int conn(const char *host, int port)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
                return -1;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

/* One request on fd; 0 when it answered 200 with "exit_code":0. */
static const char *host_hdr = "127.0.0.1"; /* HOST:PORT: the server refuses other Host names */

static int post(int fd, const char *path, const char *body)
{
        char req[8192], buf[65536];
        int n = snprintf(req, sizeof(req),
                         "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n%s",
                         path, host_hdr, strlen(body), body);
        if (n < 0 || (size_t)n >= sizeof(req) || write(fd, req, (size_t)n) != n)
                return -1;
        size_t got = 0;
        char *end = NULL;
        while (!end) {
                ssize_t k = read(fd, buf + got, sizeof(buf) - 1 - got);
                if (k <= 0)
                        return -1;
                got += (size_t)k;
                buf[got] = 0;
                end = strstr(buf, "\r\n\r\n");
        }
        char *cl = strcasestr(buf, "\r\nContent-Length:");
        if (!cl || cl > end)
                return -1;
        size_t want = (size_t)(end + 4 - buf) + strtoul(cl + 17, NULL, 10);
        if (want >= sizeof(buf))
                return -1;
        while (got < want) {
                ssize_t k = read(fd, buf + got, want - got);
                if (k <= 0)
                        return -1;
                got += (size_t)k;
        }
        buf[got] = 0;
        return strncmp(buf, "HTTP/1.1 200", 12) == 0 && strstr(end, "\"exit_code\":0") ? 0 : -1;
}

static int get_ok(int fd, const char *path)
{
        char req[1024], buf[65536];
        int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host_hdr);
        if (n < 0 || (size_t)n >= sizeof(req) || write(fd, req, (size_t)n) != n)
                return -1;
        size_t got = 0;
        char *end = NULL;
        while (!end) {
                ssize_t k = read(fd, buf + got, sizeof(buf) - 1 - got);
                if (k <= 0)
                        return -1;
                got += (size_t)k;
                buf[got] = 0;
                end = strstr(buf, "\r\n\r\n");
        }
        char *cl = strcasestr(buf, "\r\nContent-Length:");
        size_t want = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0);
        while (got < want && got < sizeof(buf)) {
                ssize_t k = read(fd, buf + got, sizeof(buf) - got);
                if (k <= 0)
                        return -1;
                got += (size_t)k;
        }
        return strncmp(buf, "HTTP/1.1 200", 12) == 0 ? 0 : -1;
}

/* ---- straight to the box's init (proto/proto.h's frames) ---- */

static int init_connect(const char *sock)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(sock) >= sizeof(sa.sun_path))
                return -1;
        strcpy(sa.sun_path, sock);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

static void put32(unsigned char *p, uint32_t v)
{
        for (int i = 0; i < 4; i++)
                p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* EXEC{ARGV "true"}, read to EXIT. 0 with *again = EXIT's AGAIN, -1 on error. */
static int init_true(int fd, bool *again)
{
        unsigned char req[8 + 8 + 5];
        put32(req, 2);         /* EXEC */
        put32(req + 4, 8 + 5); /* payload */
        put32(req + 8, 8);     /* ARGV */
        put32(req + 12, 5);    /* "true\0" */
        memcpy(req + 16, "true", 5);
        if (write(fd, req, sizeof(req)) != (ssize_t)sizeof(req))
                return -1;
        static unsigned char buf[1 << 17];
        size_t got = 0;
        for (;;) {
                while (got >= 8 && got >= 8 + (size_t)get32(buf + 4)) {
                        uint32_t type = get32(buf), len = get32(buf + 4);
                        if (type == 0x202) { /* EXIT */
                                *again = false;
                                for (size_t o = 8; o + 8 <= 8 + (size_t)len;) {
                                        uint32_t tag = get32(buf + o), fl = get32(buf + o + 4);
                                        if (tag == 70 && fl == 4)
                                                *again = get32(buf + o + 8) == 1;
                                        o += 8 + fl;
                                }
                                return 0;
                        }
                        if (type != 0x201) /* DATA */
                                return -1;
                        memmove(buf, buf + 8 + len, got - 8 - len);
                        got -= 8 + len;
                }
                if (got == sizeof(buf))
                        return -1;
                ssize_t k = read(fd, buf + got, sizeof(buf) - got);
                if (k <= 0)
                        return -1;
                got += (size_t)k;
        }
}

/* Starts prog (a path) with argv and env, waits; 0 when it exited 0. */
static int spawn_wait(const char *prog, char *const *argv, char *const *env)
{
        pid_t pid;
        if (posix_spawn(&pid, prog, NULL, NULL, argv, env) != 0)
                return -1;
        int st;
        while (waitpid(pid, &st, 0) < 0)
                ;
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int spawn_true(void)
{
        static char *argv[] = {"true", NULL};
        return spawn_wait("/bin/true", argv, environ);
}

/* -S's program: its words, the path of its first along env's PATH, env. */
typedef struct second {
        char *argv[32];
        char prog[4096];
        char *env[33];
} second;

static int second_init(second *p, char *words, char **env, int nenv)
{
        int n = 0;
        for (char *w = strtok(words, " "); w; w = strtok(NULL, " "))
                if (n < 31)
                        p->argv[n++] = w;
        p->argv[n] = NULL;
        memcpy(p->env, env, sizeof(*env) * (size_t)nenv);
        p->env[nenv] = NULL;
        if (n == 0)
                return -1;
        if (strchr(p->argv[0], '/')) {
                snprintf(p->prog, sizeof(p->prog), "%s", p->argv[0]);
                return 0;
        }
        const char *path = "/usr/bin:/bin";
        for (int i = 0; i < nenv; i++)
                if (strncmp(env[i], "PATH=", 5) == 0)
                        path = env[i] + 5;
        for (const char *d = path; *d;) {
                size_t len = strcspn(d, ":");
                snprintf(p->prog, sizeof(p->prog), "%.*s/%s", (int)len, d, p->argv[0]);
                if (len && access(p->prog, X_OK) == 0)
                        return 0;
                d += len + (d[len] == ':');
        }
        return -1;
}

int main(int argc, char **argv)
{
        long n = 300, warm = 20;
        const char *isock = NULL;
        char *words = NULL, *env2[32];
        int nenv2 = 0;
        bool health = false;
        int c;
        while ((c = getopt(argc, argv, "n:W:u:gS:E:")) != -1) {
                if (c == 'n')
                        n = atol(optarg);
                else if (c == 'W')
                        warm = atol(optarg);
                else if (c == 'u')
                        isock = optarg;
                else if (c == 'g')
                        health = true;
                else if (c == 'S')
                        words = optarg;
                else if (c == 'E' && nenv2 < 32)
                        env2[nenv2++] = optarg;
                else
                        return 2;
        }
        if (argc - optind < 4 || n < 1) {
                fprintf(stderr, "usage: exec_pair [-n N] [-W WARM] [-u INIT_SOCK] [-g] [-S 'PROG "
                                "ARG...' [-E NAME=VALUE]...] HOST PORT PATH BODY...\n");
                return 2;
        }
        static second sec;
        if (words && second_init(&sec, words, env2, nenv2) < 0) {
                fprintf(stderr, "exec_pair: -S %s: no such program\n", words);
                return 2;
        }
        const char *host = argv[optind], *path = argv[optind + 2];
        int port = atoi(argv[optind + 1]);
        char hh[300];
        snprintf(hh, sizeof(hh), "%s:%d", host, port);
        host_hdr = hh;
        char **bodies = argv + optind + 3;
        int nb = argc - optind - 3;
        int fd = conn(host, port);
        if (fd < 0) {
                perror("connect");
                return 1;
        }
        /* series: spawn, the bodies, then init_kept, init_new, health, spawn2 */
        int xk = nb + 1, xn = nb + 2, xh = nb + 3, x2 = nb + 4;
        double *v = calloc((size_t)(n * (nb + 5)), sizeof(*v));
        int kept = -1;
        for (long i = -warm; i < n; i++) {
                double t0 = now_ms();
                if (spawn_true() < 0)
                        return 1;
                if (i >= 0)
                        v[i] = now_ms() - t0;
                if (words) {
                        t0 = now_ms();
                        if (spawn_wait(sec.prog, sec.argv, sec.env) < 0) {
                                fprintf(stderr, "exec_pair: %s failed\n", sec.prog);
                                return 1;
                        }
                        if (i >= 0)
                                v[x2 * n + i] = now_ms() - t0;
                }
                for (int b = 0; b < nb; b++) {
                        t0 = now_ms();
                        if (post(fd, path, bodies[b]) < 0) {
                                fprintf(stderr, "exec_pair: %s: failed request\n", bodies[b]);
                                return 1;
                        }
                        if (i >= 0)
                                v[(b + 1) * n + i] = now_ms() - t0;
                }
                bool again = false;
                if (isock) {
                        if (kept < 0)
                                kept = init_connect(isock);
                        t0 = now_ms();
                        if (kept < 0 || init_true(kept, &again) < 0) {
                                fprintf(stderr, "exec_pair: exec on %s failed\n", isock);
                                return 1;
                        }
                        if (i >= 0)
                                v[xk * n + i] = now_ms() - t0;
                        if (!again) { /* an init before proto 4: a new connection each time */
                                close(kept);
                                kept = -1;
                        }
                        t0 = now_ms();
                        int nfd = init_connect(isock);
                        if (nfd < 0 || init_true(nfd, &again) < 0) {
                                fprintf(stderr, "exec_pair: exec on %s failed\n", isock);
                                return 1;
                        }
                        if (i >= 0)
                                v[xn * n + i] = now_ms() - t0;
                        close(nfd);
                }
                if (health) {
                        t0 = now_ms();
                        if (get_ok(fd, "/health") < 0) {
                                fprintf(stderr, "exec_pair: GET /health failed\n");
                                return 1;
                        }
                        if (i >= 0)
                                v[xh * n + i] = now_ms() - t0;
                }
        }
        double base = pct(v, (size_t)n, 50);
        printf("RESULT what=spawn n=%ld p50=%.3f p90=%.3f\n", n, base, pct(v, (size_t)n, 90));
        for (int b = 0; b < nb; b++) {
                double *w = v + (b + 1) * n, p50 = pct(w, (size_t)n, 50);
                printf("RESULT what=body%d n=%ld p50=%.3f p90=%.3f ratio_p50=%.2f\n", b + 1, n, p50,
                       pct(w, (size_t)n, 90), p50 / base);
        }
        static const char *const extra[] = {"init_kept", "init_new", "health", "spawn2"};
        for (int x = xk; x <= x2; x++) {
                if ((x == xh && !health) || (x < xh && !isock) || (x == x2 && !words))
                        continue;
                double *w = v + x * n, p50 = pct(w, (size_t)n, 50);
                printf("RESULT what=%s n=%ld p50=%.3f p90=%.3f ratio_p50=%.2f\n", extra[x - xk], n,
                       p50, pct(w, (size_t)n, 90), p50 / base);
        }
        if (kept >= 0)
                close(kept);
        close(fd);
        free(v);
        return 0;
}
