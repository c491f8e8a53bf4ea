/* spawn - times programs started from this process, for bench/exec.sh.
 *
 *   spawn [-n N] [-W WARM] PROG [ARG...] [::: PROG [ARG...]]...
 *
 * Starts each PROG with posix_spawnp, stdin, stdout and stderr on
 * /dev/null, and waits for it; the programs take turns (one run of each per
 * round, N rounds, default 200, after WARM untimed rounds, default 5), so
 * that all of them meet the same load on a shared host. Prints a line per
 * program, in milliseconds:
 *   RESULT i=K n=N fails=F min=... p50=... p90=... p99=... max=... ratio_p50=...
 * where a run is timed from just before posix_spawnp to the return of
 * waitpid, "fails" counts runs that exited non-zero (timed too) and
 * ratio_p50 is the p50 over the first program's p50. Exit status: 0, 1 when
 * every run of a program failed, 2 on bad usage. */
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
                fprintf(stderr, "usage: spawn [-n N] [-W WARM] PROG [ARG...] [::: PROG...]...\n");
                return 2;
        }
        /* Cut the rest of argv at ":::" into commands. */
        char **cmd[64];
        int ncmd = 0;
        cmd[ncmd++] = argv + optind;
        for (int i = optind; i < argc && ncmd < 64; i++) {
                if (strcmp(argv[i], ":::") == 0) {
                        argv[i] = NULL;
                        if (i + 1 >= argc)
                                return 2;
                        cmd[ncmd++] = argv + i + 1;
                }
        }
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        for (int fd = 0; fd < 3; fd++)
                posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", fd ? O_WRONLY : O_RDONLY, 0);
        double *v = calloc((size_t)(n * ncmd), sizeof(*v));
        long *fails = calloc((size_t)ncmd, sizeof(*fails));
        for (long i = -warm; i < n; i++) {
                for (int k = 0; k < ncmd; k++) {
                        double t0 = now_ms();
                        int r = run(cmd[k], &fa);
                        if (r < 0) {
                                perror(cmd[k][0]);
                                return 1;
                        }
                        if (i < 0)
                                continue;
                        v[k * n + i] = now_ms() - t0;
                        fails[k] += r;
                }
        }
        double base = 0;
        int rc = 0;
        for (int k = 0; k < ncmd; k++) {
                double *w = v + k * n;
                qsort(w, (size_t)n, sizeof(*w), cmp);
                double p50 = pct(w, (size_t)n, 50);
                if (k == 0)
                        base = p50;
                printf("RESULT i=%d n=%ld fails=%ld min=%.3f p50=%.3f p90=%.3f p99=%.3f max=%.3f "
                       "ratio_p50=%.2f\n",
                       k + 1, n, fails[k], w[0], p50, pct(w, (size_t)n, 90), pct(w, (size_t)n, 99),
                       w[n - 1], p50 / base);
                if (fails[k] == n)
                        rc = 1;
        }
        free(v);
        free(fails);
        return rc;
}
