/* spawn - times a program started from this process, the host's floor for
 * bench/exec.sh.
 *
 *   spawn [-n N] [-W WARM] PROG [ARG...]
 *
 * Starts PROG with posix_spawnp N times (default 200) one after the other,
 * stdin, stdout and stderr on /dev/null, and waits for each; after WARM
 * untimed runs (default 5). Prints
 *   RESULT n=N fails=F min=... p50=... p90=... p99=... max=... (milliseconds)
 * where a run is timed from just before posix_spawnp to the return of
 * waitpid, and "fails" counts runs that exited non-zero (they are timed too).
 * Exit status: 0, 1 when every run failed, 2 on bad usage. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Nearest-rank percentile of sorted v[0..n). */
static double pct(const double *v, size_t n, double p)
{
        size_t k = (size_t)(p / 100.0 * (double)n + 0.999999);
        if (k < 1)
                k = 1;
        return v[k > n ? n - 1 : k - 1];
}

/* One run: 0 when it exited 0, 1 otherwise, -1 when it could not start. */
static int run(char **argv, posix_spawn_file_actions_t *fa)
{
        pid_t pid;
        if (posix_spawnp(&pid, argv[0], fa, NULL, argv, environ) != 0)
                return -1;
        int st;
        while (waitpid(pid, &st, 0) < 0)
                ;
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
        long n = 200, warm = 5;
        int c;
        while ((c = getopt(argc, argv, "+n:W:")) != -1) {
                if (c == 'n')
                        n = atol(optarg);
                else if (c == 'W')
                        warm = atol(optarg);
                else
                        return 2;
        }
        if (optind >= argc || n < 1 || warm < 0) {
                fprintf(stderr, "usage: spawn [-n N] [-W WARM] PROG [ARG...]\n");
                return 2;
        }
        char **cmd = argv + optind;
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        for (int fd = 0; fd < 3; fd++)
                posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", fd ? O_WRONLY : O_RDONLY, 0);
        for (long i = 0; i < warm; i++)
                if (run(cmd, &fa) < 0) {
                        perror(cmd[0]);
                        return 1;
                }
        double *v = calloc((size_t)n, sizeof(*v));
        long fails = 0;
        for (long i = 0; i < n; i++) {
                double t0 = now_ms();
                int r = run(cmd, &fa);
                v[i] = now_ms() - t0;
                if (r < 0) {
                        perror(cmd[0]);
                        return 1;
                }
                fails += r;
        }
        qsort(v, (size_t)n, sizeof(*v), cmp);
        printf("RESULT n=%ld fails=%ld min=%.3f p50=%.3f p90=%.3f p99=%.3f max=%.3f\n", n, fails,
               v[0], pct(v, (size_t)n, 50), pct(v, (size_t)n, 90), pct(v, (size_t)n, 99),
               v[n - 1]);
        free(v);
        return fails == n ? 1 : 0;
}
