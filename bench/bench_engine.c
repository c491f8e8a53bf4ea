/* bench_engine - library-level latency of the native backend.
 *
 *   bench_engine --data DIR [--init PATH] [--disk MIB] [-a N] [-b N] [-c N] [--default-disk-n N]
 *
 * Scenarios (each prints min / median / p90 in milliseconds):
 *   a  create (start included) + first exec of `true`; the destroy is untimed
 *   b  exec of `true` in a running box, split into connect (backend connect:
 *      state lookup + unix connect) and request (EXEC frame .. EXIT frame);
 *      plus a PING round trip (connect + init's session fork + answer), the
 *      protocol's floor without any process being executed
 *   c  stop + start of a box, split into stop and start, and stop+start+exec
 *   s  what `true` costs inside a box, per launch method, measured by one
 *      bash loop running inside the box ($EPOCHREALTIME around each launch):
 *      /bin/true, bash -c true, bash -lc true (what every exec runs); the same
 *      loop on the host for comparison
 *
 * Every timed line is also printed machine-readably as
 *   RESULT <key> <n> <min_ms> <median_ms> <p90_ms>
 * for bench/run.sh. Needs root (the native backend does). Exits non-zero on
 * any engine error, after destroying what it created. */
#include "backend/backend.h"
#include "base/log.h"

#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <time.h>

static double now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array; the median of an even count is
 * the mean of the two middle values. */
static double pct(const double *v, size_t n, double p)
{
        if (n == 0)
                return NAN;
        if (p == 50.0 && n % 2 == 0)
                return (v[n / 2 - 1] + v[n / 2]) / 2;
        size_t k = (size_t)ceil(p / 100.0 * (double)n);
        if (k < 1)
                k = 1;
        if (k > n)
                k = n;
        return v[k - 1];
}

static void report(const char *key, const char *label, double *v, size_t n)
{
        if (n == 0) {
                printf("  %-44s (no samples)\n", label);
                return;
        }
        qsort(v, n, sizeof(*v), cmp_double);
        double mn = v[0], med = pct(v, n, 50), p90 = pct(v, n, 90);
        printf("  %-44s n=%-4zu min %8.3f  median %8.3f  p90 %8.3f ms\n", label, n, mn, med, p90);
        printf("RESULT %s %zu %.3f %.3f %.3f\n", key, n, mn, med, p90);
        fflush(stdout);
}

static int discard_out(void *ud, int stream, const void *buf, size_t len)
{
        (void)ud;
        (void)stream;
        (void)buf;
        (void)len;
        return 0;
}

typedef struct membuf {
        char *p;
        size_t len;
} membuf;

static int collect_out(void *ud, int stream, const void *buf, size_t len)
{
        membuf *m = ud;
        if (stream != 1)
                return 0;
        m->p = xrealloc(m->p, m->len + len + 1);
        memcpy(m->p + m->len, buf, len);
        m->len += len;
        m->p[m->len] = '\0';
        return 0;
}

static ab_backend *B;
static char created[64][AB_ID_MAX + 1]; /* boxes to destroy on the way out */
static size_t ncreated;

static void forget(const char *id)
{
        for (size_t i = 0; i < ncreated; i++)
                if (!strcmp(created[i], id)) {
                        memmove(created[i], created[i + 1],
                                (ncreated - i - 1) * sizeof(created[0]));
                        ncreated--;
                        return;
                }
}

static void cleanup_all(void)
{
        while (ncreated > 0) {
                ab_err *e = NULL;
                if (B->ops->destroy(B, created[ncreated - 1], &e) < 0) {
                        fprintf(stderr, "bench_engine: destroy %s: %s\n", created[ncreated - 1],
                                e->msg);
                        ab_err_free(&e);
                }
                ncreated--;
        }
}

static void die(ab_err **e, const char *fmt, ...) __attribute__((noreturn)) AB_PRINTF(2, 3);
static void die(ab_err **e, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "bench_engine: ");
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, ": %s\n", e && *e ? (*e)->msg : "failed");
        if (e)
                ab_err_free(e);
        cleanup_all();
        exit(1);
}

static void create_box(const char *id, uint64_t disk_mib)
{
        ab_box_spec spec = {.id = id};
        ab_limits_default(&spec.limits);
        if (disk_mib)
                spec.limits.disk_mib = disk_mib;
        ab_err *e = NULL;
        if (B->ops->create(B, &spec, &e) < 0)
                die(&e, "create %s", id);
        snprintf(created[ncreated++], sizeof(created[0]), "%s", id);
}

static void destroy_box(const char *id)
{
        ab_err *e = NULL;
        if (B->ops->destroy(B, id, &e) < 0)
                die(&e, "destroy %s", id);
        forget(id);
}

/* Runs `command` in the box; returns its exit code. */
static int run(const char *id, const char *command, abc_output_fn out, void *ud)
{
        abc_exec_req req = {.command = command, .stdin_fd = -1, .timeout_ms = 60000};
        abc_exec_res res;
        ab_err *e = NULL;
        if (ab_box_exec(B, id, &req, out ? out : discard_out, ud, &res, &e) < 0)
                die(&e, "exec '%s' in %s", command, id);
        return res.exit_code;
}

static void run_true(const char *id)
{
        int rc = run(id, "true", NULL, NULL);
        if (rc != 0) {
                fprintf(stderr, "bench_engine: `true` exited %d in box %s\n", rc, id);
                cleanup_all();
                exit(1);
        }
}

/* a: create + first exec of true. */
static void bench_create(const char *key, const char *label, int n, uint64_t disk_mib)
{
        double *tot = xcalloc((size_t)n, sizeof(double));
        double *cr = xcalloc((size_t)n, sizeof(double));
        double *ex = xcalloc((size_t)n, sizeof(double));
        for (int i = 0; i < n; i++) {
                char id[64];
                snprintf(id, sizeof(id), "bench-%s-%d-%d", key, (int)getpid(), i);
                double t0 = now_ms();
                create_box(id, disk_mib);
                double t1 = now_ms();
                run_true(id);
                double t2 = now_ms();
                destroy_box(id); /* untimed */
                tot[i] = t2 - t0;
                cr[i] = t1 - t0;
                ex[i] = t2 - t1;
        }
        char k[64], l[128];
        snprintf(l, sizeof(l), "%s: create + first exec", label);
        report(key, l, tot, (size_t)n);
        snprintf(k, sizeof(k), "%s_create", key);
        snprintf(l, sizeof(l), "%s:   of which create (start incl.)", label);
        report(k, l, cr, (size_t)n);
        snprintf(k, sizeof(k), "%s_firstexec", key);
        snprintf(l, sizeof(l), "%s:   of which first exec", label);
        report(k, l, ex, (size_t)n);
        free(tot);
        free(cr);
        free(ex);
}

/* b: exec in a running box, split connect / request; plus PING. */
static void bench_exec(const char *id, int n)
{
        double *tot = xcalloc((size_t)n, sizeof(double));
        double *con = xcalloc((size_t)n, sizeof(double));
        double *req = xcalloc((size_t)n, sizeof(double));
        double *wrap = xcalloc((size_t)n, sizeof(double));
        double *ping = xcalloc((size_t)n, sizeof(double));
        abc_exec_req r = {.command = "true", .stdin_fd = -1, .timeout_ms = 60000};
        for (int i = 0; i < 5; i++) /* warm caches: bash, profile, page cache */
                run_true(id);
        for (int i = 0; i < n; i++) {
                ab_err *e = NULL;
                abc_exec_res res;
                double t0 = now_ms();
                int fd = B->ops->connect(B, id, &e);
                if (fd < 0)
                        die(&e, "connect %s", id);
                double t1 = now_ms();
                if (abc_exec(fd, &r, discard_out, NULL, &res, &e) < 0) {
                        close(fd);
                        die(&e, "exec in %s", id);
                }
                double t2 = now_ms();
                close(fd);
                if (res.exit_code != 0) {
                        fprintf(stderr, "bench_engine: true exited %d\n", res.exit_code);
                        cleanup_all();
                        exit(1);
                }
                con[i] = t1 - t0;
                req[i] = t2 - t1;
                tot[i] = t2 - t0;
        }
        /* The one-call wrapper, as the server and the CLI use it. */
        for (int i = 0; i < n; i++) {
                double t0 = now_ms();
                run_true(id);
                wrap[i] = now_ms() - t0;
        }
        for (int i = 0; i < n; i++) {
                ab_err *e = NULL;
                char *ver = NULL;
                double t0 = now_ms();
                int fd = B->ops->connect(B, id, &e);
                if (fd < 0)
                        die(&e, "connect %s", id);
                if (abc_ping(fd, &ver, &e) < 0) {
                        close(fd);
                        die(&e, "ping %s", id);
                }
                ping[i] = now_ms() - t0;
                close(fd);
                free(ver);
        }
        report("exec", "b: exec true (connect + request)", tot, (size_t)n);
        report("exec_connect", "b:   of which connect", con, (size_t)n);
        report("exec_request", "b:   of which request (EXEC..EXIT)", req, (size_t)n);
        report("exec_wrapper", "b: exec true via ab_box_exec()", wrap, (size_t)n);
        report("ping", "b: ping (connect + PING..OK, no exec)", ping, (size_t)n);
        free(tot);
        free(con);
        free(req);
        free(wrap);
        free(ping);
}

/* c: stop + start; and stop + start + first exec. */
static void bench_restart(const char *id, int n)
{
        double *tot = xcalloc((size_t)n, sizeof(double));
        double *sp = xcalloc((size_t)n, sizeof(double));
        double *st = xcalloc((size_t)n, sizeof(double));
        double *fx = xcalloc((size_t)n, sizeof(double));
        for (int i = 0; i < n; i++) {
                ab_err *e = NULL;
                double t0 = now_ms();
                if (B->ops->stop(B, id, &e) < 0)
                        die(&e, "stop %s", id);
                double t1 = now_ms();
                if (B->ops->start(B, id, &e) < 0)
                        die(&e, "start %s", id);
                double t2 = now_ms();
                run_true(id);
                double t3 = now_ms();
                sp[i] = t1 - t0;
                st[i] = t2 - t1;
                tot[i] = t2 - t0;
                fx[i] = t3 - t0;
        }
        report("restart", "c: stop + start", tot, (size_t)n);
        report("restart_stop", "c:   of which stop", sp, (size_t)n);
        report("restart_start", "c:   of which start", st, (size_t)n);
        report("restart_exec", "c: stop + start + first exec", fx, (size_t)n);
        free(tot);
        free(sp);
        free(st);
        free(fx);
}

/* The loop run inside the box (and on the host): one line "label usec" per launch. */
#define SPAWN_SCRIPT                                                                               \
        "set +e\n"                                                                                 \
        "t() { local l=$1 n=$2; shift 2; local i a b;\n"                                           \
        "  for ((i=0;i<n;i++)); do a=${EPOCHREALTIME/./}; \"$@\" >/dev/null 2>&1; "                \
        "b=${EPOCHREALTIME/./};\n"                                                                 \
        "    echo \"$l $((b-a))\"; done; }\n"                                                      \
        "t true 3 /bin/true; t bash_c 3 /bin/bash -c true; t bash_lc 3 /bin/bash -lc true; t "     \
        "bash_lc_noprofile 3 /bin/bash --noprofile -lc true\n"                                     \
        "t true %d /bin/true\n"                                                                    \
        "t bash_c %d /bin/bash -c true\n"                                                          \
        "t bash_lc %d /bin/bash -lc true\n"                                                        \
        "t bash_lc_noprofile %d /bin/bash --noprofile -lc true\n"

static void spawn_stats(const char *where, const char *out)
{
        static const char *labels[] = {"true", "bash_c", "bash_lc", "bash_lc_noprofile"};
        static const char *names[] = {"/bin/true", "bash -c true", "bash -lc true",
                                      "bash --noprofile -lc true"};
        for (size_t k = 0; k < AB_ARRAY_LEN(labels); k++) {
                double v[512];
                size_t n = 0;
                int skip = 3; /* the warm-up runs come first */
                for (const char *p = out; p && *p && n < AB_ARRAY_LEN(v);) {
                        char lab[32];
                        long us;
                        if (sscanf(p, "%31s %ld", lab, &us) == 2 && !strcmp(lab, labels[k])) {
                                if (skip > 0)
                                        skip--;
                                else
                                        v[n++] = (double)us / 1000.0;
                        }
                        p = strchr(p, '\n');
                        if (p)
                                p++;
                }
                char key[64], label[128];
                snprintf(key, sizeof(key), "spawn_%s_%s", where, labels[k]);
                snprintf(label, sizeof(label), "s: %s: %s", where, names[k]);
                report(key, label, v, n);
        }
}

static void bench_spawn(const char *id, int n)
{
        _cleanup_free_ char *script = xasprintf(SPAWN_SCRIPT, n, n, n, n);
        membuf m = {0};
        int rc = run(id, script, collect_out, &m);
        if (rc != 0)
                fprintf(stderr, "bench_engine: in-box spawn loop exited %d\n", rc);
        spawn_stats("box", m.p);
        free(m.p);
        /* Same loop on the host, same environment shape (env -i, HOME elsewhere). */
        char path[64];
        snprintf(path, sizeof(path), "/tmp/.bench_engine_spawn.%d.sh", (int)getpid());
        FILE *f = fopen(path, "w");
        if (!f)
                return;
        fputs(script, f);
        fclose(f);
        _cleanup_free_ char *cmd = xasprintf(
            "cd / && env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "
            "HOME=/nonexistent LANG=C.UTF-8 /bin/bash %s",
            path);
        FILE *p = popen(cmd, "r");
        membuf h = {0};
        char buf[4096];
        size_t k;
        while (p && (k = fread(buf, 1, sizeof(buf), p)) > 0)
                collect_out(&h, 1, buf, k);
        if (p)
                pclose(p);
        unlink(path);
        spawn_stats("host", h.p);
        free(h.p);
}

/* Prints "CGPARENT name": the engine's per-data-folder cgroup parent, which
 * outlives the boxes; bench/run.sh removes it afterwards. */
static void print_cgroup_parent(const char *id)
{
        ab_box_info i;
        ab_err *e = NULL;
        if (B->ops->info(B, id, &i, &e) < 0) {
                ab_err_free(&e);
                return;
        }
        char path[64], line[512];
        snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)i.init_pid);
        ab_box_info_clear(&i);
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof(line), f)) {
                /* "4:memory:/agentbox-1234abcd/ID" or "0::/agentbox-1234abcd/ID" */
                char *p = strstr(line, ":/agentbox");
                if (!p)
                        continue;
                p += 2;
                char *slash = strchr(p, '/');
                if (slash) {
                        *slash = '\0';
                        printf("CGPARENT %s\n", p);
                        break;
                }
        }
        if (f)
                fclose(f);
}

static void on_signal(int sig)
{
        (void)sig;
        /* Let the main flow notice nothing; cleanup runs from atexit on exit(). */
        exit(130);
}

int main(int argc, char **argv)
{
        static const struct option opts[] = {
            {"data", required_argument, NULL, 'D'},
            {"init", required_argument, NULL, 'I'},
            {"disk", required_argument, NULL, 'd'},
            {"default-disk-n", required_argument, NULL, 'x'},
            {"spawn-n", required_argument, NULL, 's'},
            {"help", no_argument, NULL, 'h'},
            {0},
        };
        const char *data = NULL, *init = NULL;
        int na = 20, nb = 200, nc = 20, nx = 5, ns = 100;
        uint64_t disk = 64;
        int c;
        while ((c = getopt_long(argc, argv, "a:b:c:h", opts, NULL)) != -1) {
                switch (c) {
                case 'D':
                        data = optarg;
                        break;
                case 'I':
                        init = optarg;
                        break;
                case 'd':
                        disk = strtoull(optarg, NULL, 10);
                        break;
                case 'x':
                        nx = atoi(optarg);
                        break;
                case 's':
                        ns = atoi(optarg);
                        break;
                case 'a':
                        na = atoi(optarg);
                        break;
                case 'b':
                        nb = atoi(optarg);
                        break;
                case 'c':
                        nc = atoi(optarg);
                        break;
                default:
                        fprintf(stderr,
                                "usage: bench_engine --data DIR [--init PATH] [--disk MIB] [-a N] "
                                "[-b N] [-c N] [--default-disk-n N] [--spawn-n N]\n");
                        return c == 'h' ? 0 : 2;
                }
        }
        if (!data) {
                fprintf(stderr, "bench_engine: --data DIR is required\n");
                return 2;
        }
        if (ns > 120)
                ns = 120;
        ab_log_init_from_env();
        ab_native_opts o = {.data_dir = data, .init_path = init};
        ab_err *e = NULL;
        if (ab_native_open(&o, &B, &e) < 0)
                die(&e, "open the native backend at %s", data);
        atexit(cleanup_all);
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);

        char l[128];
        printf("bench_engine: library level, pid %d, disk %llu MiB\n", (int)getpid(),
               (unsigned long long)disk);
        /* One untimed create first: page cache for mkfs, init binary, bash. */
        char warm[64], runid[64];
        snprintf(warm, sizeof(warm), "bench-%d-warm", (int)getpid());
        snprintf(runid, sizeof(runid), "bench-%d-run", (int)getpid());
        create_box(warm, disk);
        run_true(warm);
        destroy_box(warm);

        snprintf(l, sizeof(l), "a (disk %llu MiB)", (unsigned long long)disk);
        bench_create("create", l, na, disk);
        if (nx > 0)
                bench_create("create_default_disk", "a (default 4 GiB disk)", nx, 0);

        create_box(runid, disk);
        print_cgroup_parent(runid);
        bench_exec(runid, nb);
        bench_restart(runid, nc);
        if (ns > 0)
                bench_spawn(runid, ns);
        destroy_box(runid);
        B->ops->free(B);
        B = NULL;
        return 0;
}
