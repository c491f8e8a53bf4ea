/* exec_pair - an HTTP exec and the host's own spawn of /bin/true, measured
 * in alternation, for bench/exec.sh.
 *
 *   exec_pair [-n N] [-W WARM] HOST PORT PATH BODY [BODY...]
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
 * Exit status 0, 1 on a failed request, 2 on bad usage. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

static int spawn_true(void)
{
        static char *argv[] = {"true", NULL};
        pid_t pid;
        if (posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ) != 0)
                return -1;
        int st;
        while (waitpid(pid, &st, 0) < 0)
                ;
        return 0;
}

int main(int argc, char **argv)
{
        long n = 300, warm = 20;
        int c;
        while ((c = getopt(argc, argv, "n:W:")) != -1) {
                if (c == 'n')
                        n = atol(optarg);
                else if (c == 'W')
                        warm = atol(optarg);
                else
                        return 2;
        }
        if (argc - optind < 4 || n < 1) {
                fprintf(stderr, "usage: exec_pair [-n N] [-W WARM] HOST PORT PATH BODY...\n");
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
        double *v = calloc((size_t)(n * (nb + 1)), sizeof(*v));
        for (long i = -warm; i < n; i++) {
                double t0 = now_ms();
                if (spawn_true() < 0)
                        return 1;
                if (i >= 0)
                        v[i] = now_ms() - t0;
                for (int b = 0; b < nb; b++) {
                        t0 = now_ms();
                        if (post(fd, path, bodies[b]) < 0) {
                                fprintf(stderr, "exec_pair: %s: failed request\n", bodies[b]);
                                return 1;
                        }
                        if (i >= 0)
                                v[(b + 1) * n + i] = now_ms() - t0;
                }
        }
        double base = pct(v, (size_t)n, 50);
        printf("RESULT what=spawn n=%ld p50=%.3f p90=%.3f\n", n, base, pct(v, (size_t)n, 90));
        for (int b = 0; b < nb; b++) {
                double *w = v + (b + 1) * n, p50 = pct(w, (size_t)n, 50);
                printf("RESULT what=body%d n=%ld p50=%.3f p90=%.3f ratio_p50=%.2f\n", b + 1, n, p50,
                       pct(w, (size_t)n, 90), p50 / base);
        }
        close(fd);
        free(v);
        return 0;
}
