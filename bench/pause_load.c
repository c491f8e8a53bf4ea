/* pause_load - the pause/resume benchmark client of bench/pause.sh.
 *
 *   pause_load HOST PORT BOX N FREEZER_FILE OUTDIR [floor]
 *
 * 1. Over one keep-alive HTTP/1.1 connection to agentbox serve, N times:
 *    POST /v1/sandboxes/BOX/pause, then POST /v1/sandboxes/BOX/resume, each
 *    timed from the first byte written to the last byte of the body read;
 *    every answer must be 200 with the expected "status". Then N times: a
 *    pause (untimed) and an exec of `true` (timed: it resumes the box
 *    first), and an exec of `true` on the running box (timed).
 * 2. The floor, on the same box's cgroup, N times: what the backend does at
 *    the least. Freeze: open FREEZER_FILE, write FROZEN (v1 freezer.state) or
 *    1 (v2 cgroup.freeze), then read the state until the kernel says frozen
 *    (v1: freezer.state, writing FROZEN again while it says FREEZING; v2:
 *    "frozen 1" in cgroup.events next to it). Thaw: open and write THAWED or 0.
 * Writes microsecond samples, one a line, to OUTDIR/{pause,resume,floor_pause,
 * floor_resume,exec_paused,exec_running}.us. With "floor" as the last argument only step 2 runs.
 * Exit status 0 when every request and write succeeded. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_us(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int conn(const char *host, int port)
{
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        int one = 1;
        if (s < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1 ||
            connect(s, (struct sockaddr *)&a, sizeof(a)) < 0)
                return -1;
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return s;
}

/* One POST of `in` on socket s; the answer's status code and body. */
static int post(int s, const char *host, const char *path, const char *in, char *body, size_t cap)
{
        char req[1024];
        int n = snprintf(req, sizeof(req),
                         "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n%s",
                         path, host, strlen(in), in);
        for (int off = 0; off < n;) {
                ssize_t w = write(s, req + off, (size_t)(n - off));
                if (w <= 0)
                        return -1;
                off += (int)w;
        }
        static char buf[65536];
        size_t len = 0;
        char *end = NULL;
        while (!(end = memmem(buf, len, "\r\n\r\n", 4))) {
                ssize_t r = read(s, buf + len, sizeof(buf) - 1 - len);
                if (r <= 0)
                        return -1;
                len += (size_t)r;
        }
        buf[len] = 0;
        int status = 0;
        if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
                return -1;
        char *cl = strcasestr(buf, "\r\ncontent-length:");
        if (!cl || cl > end)
                return -1;
        size_t want = strtoul(cl + 17, NULL, 10), head = (size_t)(end + 4 - buf);
        while (len - head < want) {
                ssize_t r = read(s, buf + len, sizeof(buf) - 1 - len);
                if (r <= 0)
                        return -1;
                len += (size_t)r;
        }
        size_t bl = want < cap - 1 ? want : cap - 1;
        memcpy(body, buf + head, bl);
        body[bl] = 0;
        return status;
}

static int write_file(const char *path, const char *val)
{
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        ssize_t w = write(fd, val, strlen(val));
        close(fd);
        return w == (ssize_t)strlen(val) ? 0 : -1;
}

static bool frozen(const char *state_path, bool v2)
{
        char b[256] = "";
        int fd = open(state_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t r = read(fd, b, sizeof(b) - 1);
        close(fd);
        if (r <= 0)
                return false;
        b[r] = 0;
        return v2 ? strstr(b, "frozen 1") != NULL : strncmp(b, "FROZEN", 6) == 0;
}

int main(int argc, char **argv)
{
        if (argc != 7 && !(argc == 8 && !strcmp(argv[7], "floor"))) {
                fprintf(stderr, "usage: pause_load HOST PORT BOX N FREEZER_FILE OUTDIR [floor]\n");
                return 2;
        }
        bool floor_only = argc == 8;
        const char *host = argv[1], *box = argv[3], *ff = argv[5], *out = argv[6];
        int port = atoi(argv[2]), n = atoi(argv[4]);
        char p[4096];
        FILE *fo[6];
        const char *names[] = {"pause",        "resume",      "floor_pause",
                               "floor_resume", "exec_paused", "exec_running"};
        for (int i = 0; i < 6; i++) {
                snprintf(p, sizeof(p), "%s/%s.us", out, names[i]);
                if (!(fo[i] = fopen(p, "w"))) {
                        perror(p);
                        return 2;
                }
        }
        int s = floor_only ? -2 : conn(host, port);
        if (s == -1) {
                perror("connect");
                return 1;
        }
        char path[2][256], body[4096];
        snprintf(path[0], sizeof(path[0]), "/v1/sandboxes/%s/pause", box);
        snprintf(path[1], sizeof(path[1]), "/v1/sandboxes/%s/resume", box);
        const char *want[2] = {"\"status\": \"paused\"", "\"status\": \"running\""};
        const char *want2[2] = {"\"status\":\"paused\"", "\"status\":\"running\""};
        int errors = 0;
        for (int i = 0; i < n && !floor_only; i++) {
                for (int k = 0; k < 2; k++) {
                        uint64_t t0 = now_us();
                        int st = post(s, host, path[k], "{}", body, sizeof(body));
                        uint64_t t1 = now_us();
                        if (st != 200 || (!strstr(body, want[k]) && !strstr(body, want2[k]))) {
                                if (errors++ < 3)
                                        fprintf(stderr, "pause_load: %s answered %d: %.300s\n",
                                                path[k], st, body);
                                if (st < 0 && (s = conn(host, port)) < 0)
                                        return 1;
                                continue;
                        }
                        fprintf(fo[k], "%llu\n", (unsigned long long)(t1 - t0));
                }
        }
        /* An exec of `true` on a paused box (it resumes the box first) and on
         * a running one: the difference is what a transparent resume costs. */
        char xpath[256];
        snprintf(xpath, sizeof(xpath), "/v1/sandboxes/%s/exec", box);
        for (int i = 0; i < n && !floor_only; i++) {
                for (int k = 0; k < 2; k++) {
                        if (k == 0 && post(s, host, path[0], "{}", body, sizeof(body)) != 200) {
                                errors++;
                                continue;
                        }
                        uint64_t t0 = now_us();
                        int st = post(s, host, xpath, "{\"command\":\"true\"}", body, sizeof(body));
                        uint64_t t1 = now_us();
                        if (st != 200 || !strstr(body, "\"exit_code\"")) {
                                if (errors++ < 3)
                                        fprintf(stderr, "pause_load: exec answered %d: %.300s\n",
                                                st, body);
                                continue;
                        }
                        fprintf(fo[4 + k], "%llu\n", (unsigned long long)(t1 - t0));
                }
        }
        if (s >= 0)
                close(s);

        bool v2 = strstr(ff, "cgroup.freeze") != NULL;
        char state[4096];
        snprintf(state, sizeof(state), "%s", ff);
        if (v2)
                snprintf(strrchr(state, '/') + 1,
                         sizeof(state) - (size_t)(strrchr(state, '/') + 1 - state),
                         "cgroup.events");
        for (int i = 0; i < n; i++) {
                uint64_t t0 = now_us();
                if (write_file(ff, v2 ? "1" : "FROZEN") < 0) {
                        errors++;
                        continue;
                }
                /* v1 asks each task once: re-ask while it says FREEZING (what
                 * the backend does too; see freezer_wait in cgroup.c). */
                while (!frozen(state, v2)) {
                        if (now_us() - t0 > 2000000) {
                                errors++;
                                break;
                        }
                        if (!v2)
                                write_file(ff, "FROZEN");
                }
                uint64_t t1 = now_us();
                int wr = write_file(ff, v2 ? "0" : "THAWED");
                uint64_t t2 = now_us();
                if (wr < 0) {
                        errors++;
                        continue;
                }
                fprintf(fo[2], "%llu\n", (unsigned long long)(t1 - t0));
                fprintf(fo[3], "%llu\n", (unsigned long long)(t2 - t1));
        }
        for (int i = 0; i < 6; i++)
                fclose(fo[i]);
        if (errors)
                fprintf(stderr, "pause_load: %d errors (requests or freezes that did not finish)\n",
                        errors);
        return errors ? 1 : 0;
}
