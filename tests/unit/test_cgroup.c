/* test_cgroup.c - cgroup layout detection, limit files, stats parsing and
 * kill/destroy against fake v1 and v2 trees, then the real thing on the host
 * (as root): limits the kernel enforces, an OOM kill, freezing a process tree,
 * kill-all and cleanup. */
#include "native/cgroup.h"
#include "tap.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define MiB (UINT64_C(1) << 20)

static char tmp[] = "/tmp/ab-cgroup-test-XXXXXX";

/* ---- helpers ------------------------------------------------------------ */

static void put(const char *dir, const char *file, const char *content)
{
        char *p = xasprintf("%s/%s", dir, file);
        FILE *f = fopen(p, "w");
        if (!f || fputs(content, f) < 0 || fclose(f) != 0) {
                printf("Bail out! cannot write %s\n", p);
                exit(1);
        }
        free(p);
}

/* Content of dir/file without a trailing newline; "(missing)" when absent.
 * Returns a static buffer, valid until the next call. */
static const char *get(const char *dir, const char *file)
{
        static char *last;
        free(last);
        last = NULL;
        char *p = xasprintf("%s/%s", dir, file);
        int r = ab_read_file(AT_FDCWD, p, &last, NULL);
        free(p);
        if (r < 0)
                return "(missing)";
        size_t n = strlen(last);
        if (n && last[n - 1] == '\n')
                last[n - 1] = '\0';
        return last;
}

static void mkdir_p(const char *path)
{
        char *p = xstrdup(path);
        for (char *s = p + 1; *s; s++) {
                if (*s != '/')
                        continue;
                *s = '\0';
                mkdir(p, 0755);
                *s = '/';
        }
        if (mkdir(p, 0755) < 0 && errno != EEXIST) {
                printf("Bail out! mkdir %s: %s\n", p, strerror(errno));
                exit(1);
        }
        free(p);
}

static void ln_s(const char *target, const char *path)
{
        if (symlink(target, path) < 0) {
                printf("Bail out! symlink %s: %s\n", path, strerror(errno));
                exit(1);
        }
}

static bool exists(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0;
}

/* Code of an error (0 = none) and release it. */
static int code_of(ab_err **e)
{
        int c = *e ? (int)(*e)->code : 0;
        if (*e)
                tap_diag("  error: %s", (*e)->msg);
        ab_err_free(e);
        return c;
}

static void rm_rf(const char *path)
{
        char *cmd[] = {"rm", "-rf", (char *)path, NULL};
        pid_t p = fork();
        if (p == 0) {
                execvp("rm", cmd);
                _exit(127);
        }
        if (p > 0)
                waitpid(p, NULL, 0);
}

/* ---- fake v2 ------------------------------------------------------------ */

static void fake_v2_box(const char *box)
{
        mkdir_p(box);
        put(box, "memory.max", "max\n");
        put(box, "memory.swap.max", "max\n");
        put(box, "pids.max", "max\n");
        put(box, "cpu.max", "max 100000\n");
        put(box, "cgroup.procs", "");
        put(box, "memory.current", "12345\n");
        put(box, "pids.current", "3\n");
        put(box, "cpu.stat",
            "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n"
            "nr_periods 0\n");
        put(box, "memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\noom_group_kill 0\n");
}

/* Freezer on a fake v2 box: the fake cgroup.events says what the "kernel"
 * reached, so a freeze that never completes can be shown. */
static void fake_v2_freezer(const ab_cg *cg, const char *box)
{
        ab_err *e = NULL;
        ab_cg_freezer fs = AB_CG_FROZEN;
        put(box, "cgroup.freeze", "0\n");
        put(box, "cgroup.events", "populated 1\nfrozen 0\n");
        TAP_IS_INT(ab_cg_freezer_state(cg, "b1", &fs, &e), 0, "v2 freezer: state");
        TAP_IS_INT(fs, AB_CG_THAWED, "v2 freezer: freeze 0, frozen 0 is thawed");

        /* The tasks never stop: the freeze is undone and reported. */
        TAP_IS_INT(ab_cg_freeze(cg, "b1", 50, &e) < 0, 1,
                   "v2 freezer: a freeze that never "
                   "completes fails");
        TAP_IS_INT(code_of(&e), AB_E_TIMEOUT, "v2 freezer: ... with AB_E_TIMEOUT");
        TAP_IS_STR(get(box, "cgroup.freeze"), "0", "v2 freezer: ... and thaws the box again");

        put(box, "cgroup.freeze", "1\n");
        TAP_IS_INT(ab_cg_freezer_state(cg, "b1", &fs, &e), 0, "v2 freezer: state while freezing");
        TAP_IS_INT(fs, AB_CG_FREEZING, "v2 freezer: freeze 1, frozen 0 is freezing");

        put(box, "cgroup.freeze", "0\n");
        put(box, "cgroup.events", "populated 1\nfrozen 1\n");
        TAP_IS_INT(ab_cg_freeze(cg, "b1", 50, &e), 0, "v2 freezer: freeze");
        TAP_IS_INT(code_of(&e), 0, "v2 freezer: freeze sets no error");
        TAP_IS_STR(get(box, "cgroup.freeze"), "1", "v2 freezer: freeze writes cgroup.freeze 1");
        TAP_IS_INT(ab_cg_freezer_state(cg, "b1", &fs, &e), 0, "v2 freezer: state when frozen");
        TAP_IS_INT(fs, AB_CG_FROZEN, "v2 freezer: frozen 1 is frozen");
        TAP_IS_INT(ab_cg_thaw(cg, "b1", &e), 0, "v2 freezer: thaw");
        TAP_IS_INT(code_of(&e), 0, "v2 freezer: thaw sets no error");
        TAP_IS_STR(get(box, "cgroup.freeze"), "0", "v2 freezer: thaw writes cgroup.freeze 0");

        put(box, "cgroup.events", "populated 1\n");
        TAP_IS_INT(ab_cg_freezer_state(cg, "b1", &fs, &e) < 0, 1,
                   "v2 freezer: cgroup.events without frozen (kernel < 5.2) is an error");
        TAP_IS_INT(code_of(&e), AB_E_UNSUPPORTED, "v2 freezer: ... AB_E_UNSUPPORTED");
        TAP_IS_INT(ab_cg_freeze(cg, "nope", 50, &e) < 0, 1, "v2 freezer: freeze a missing box");
        TAP_IS_INT(code_of(&e), AB_E_NOT_FOUND, "v2 freezer: ... AB_E_NOT_FOUND");
        TAP_IS_INT(ab_cg_thaw(cg, "../b1", &e) < 0, 1, "v2 freezer: thaw a bad id");
        TAP_IS_INT(code_of(&e), AB_E_INVALID, "v2 freezer: ... AB_E_INVALID");
        put(box, "cgroup.events", "populated 1\nfrozen 0\n");
}

static void test_fake_v2(void)
{
        ab_err *e = NULL;
        ab_cg cg;
        char *root = xasprintf("%s/v2", tmp);
        char *parent = xasprintf("%s/agentbox", root);
        char *box = xasprintf("%s/b1", parent);
        mkdir_p(root);
        put(root, "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
        put(root, "cgroup.subtree_control", "");

        TAP_IS_INT(ab_cg_open(root, "agentbox", &cg, &e), 0, "v2: open");
        TAP_IS_INT(code_of(&e), 0, "v2: open sets no error");
        TAP_IS_INT(cg.version, AB_CG_V2, "v2: detected as v2");
        char *p = ab_cg_path(&cg, NULL, "b1");
        TAP_IS_STR(p, box, "v2: box path is root/parent/box");
        free(p);
        p = ab_cg_path(&cg, "memory", "b1");
        TAP_IS_STR(p, box, "v2: controller is ignored in the path");
        free(p);
        p = ab_cg_path(&cg, NULL, NULL);
        TAP_IS_STR(p, parent, "v2: NULL box gives the parent");
        free(p);

        /* What the kernel would have made on mkdir. */
        mkdir_p(parent);
        put(parent, "cgroup.controllers", "cpu memory pids\n");
        put(parent, "cgroup.subtree_control", "");
        fake_v2_box(box);

        ab_cg_limits l = {.memory_bytes = 64 * MiB, .pids = 32, .cpus = 1.5};
        TAP_IS_INT(ab_cg_create(&cg, "b1", &l, &e), 0, "v2: create");
        TAP_IS_INT(code_of(&e), 0, "v2: create sets no error");
        TAP_IS_STR(get(root, "cgroup.subtree_control"), "+memory +pids +cpu",
                   "v2: root subtree_control enables memory, pids, cpu");
        TAP_IS_STR(get(parent, "cgroup.subtree_control"), "+memory +pids +cpu",
                   "v2: parent subtree_control enables memory, pids, cpu");
        TAP_IS_STR(get(box, "memory.max"), "67108864", "v2: memory.max");
        TAP_IS_STR(get(box, "memory.swap.max"), "0", "v2: memory.swap.max = 0");
        TAP_IS_STR(get(box, "pids.max"), "32", "v2: pids.max");
        TAP_IS_STR(get(box, "cpu.max"), "150000 100000", "v2: cpu.max for 1.5 cpus");

        l = (ab_cg_limits){0};
        TAP_IS_INT(ab_cg_create(&cg, "b1", &l, &e), 0, "v2: re-create without limits");
        TAP_IS_INT(code_of(&e), 0, "v2: re-create sets no error");
        TAP_IS_STR(get(box, "memory.max"), "max", "v2: unlimited memory.max");
        TAP_IS_STR(get(box, "pids.max"), "max", "v2: unlimited pids.max");
        TAP_IS_STR(get(box, "cpu.max"), "max 100000", "v2: unlimited cpu.max");
        TAP_IS_STR(get(box, "memory.swap.max"), "0", "v2: swap stays off when unlimited");

        l = (ab_cg_limits){.memory_bytes = 1 * MiB, .pids = 1, .cpus = 0.001};
        char *swap = xasprintf("%s/memory.swap.max", box);
        unlink(swap);
        TAP_IS_INT(ab_cg_create(&cg, "b1", &l, &e), 0, "v2: create without memory.swap.max");
        TAP_IS_INT(code_of(&e), 0, "v2: no error without swap file");
        tap_ok(!exists(swap), "v2: memory.swap.max is not created");
        TAP_IS_STR(get(box, "cpu.max"), "1000 100000", "v2: tiny cpu quota clamped to 1000us");
        free(swap);

        l = (ab_cg_limits){.cpus = -1};
        TAP_IS_INT(ab_cg_create(&cg, "b1", &l, &e) < 0, 1, "v2: negative cpus refused");
        TAP_IS_INT(code_of(&e), AB_E_INVALID, "v2: negative cpus is AB_E_INVALID");
        l = (ab_cg_limits){0};
        TAP_IS_INT(ab_cg_create(&cg, "../x", &l, &e) < 0, 1, "v2: box id with / refused");
        TAP_IS_INT(code_of(&e), AB_E_INVALID, "v2: bad box id is AB_E_INVALID");
        TAP_IS_INT(ab_cg_create(&cg, "..", &l, &e) < 0, 1, "v2: box id .. refused");
        ab_err_free(&e);

        char pidbuf[24];
        snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
        TAP_IS_INT(ab_cg_attach(&cg, "b1", getpid(), &e), 0, "v2: attach");
        TAP_IS_INT(code_of(&e), 0, "v2: attach sets no error");
        TAP_IS_STR(get(box, "cgroup.procs"), pidbuf, "v2: attach writes the pid to cgroup.procs");
        TAP_IS_INT(ab_cg_attach(&cg, "nope", getpid(), &e) < 0, 1, "v2: attach to missing box");
        TAP_IS_INT(code_of(&e), AB_E_NOT_FOUND, "v2: missing box is AB_E_NOT_FOUND");
        put(box, "cgroup.procs", "");

        ab_cg_stats st;
        put(box, "memory.max", "max\n");
        TAP_IS_INT(ab_cg_stats_read(&cg, "b1", &st, &e), 0, "v2: stats");
        TAP_IS_INT(code_of(&e), 0, "v2: stats sets no error");
        TAP_IS_INT(st.memory_bytes, 12345, "v2: stats memory.current");
        TAP_IS_INT(st.memory_limit, 0, "v2: stats memory.max max -> 0");
        TAP_IS_INT(st.pids, 3, "v2: stats pids.current");
        TAP_IS_INT(st.cpu_usage_ns, 1500000, "v2: stats usage_usec in ns");
        TAP_IS_INT(st.oom_kills, 2, "v2: stats oom_kill (not oom, not oom_group_kill)");
        put(box, "memory.max", "67108864\n");
        TAP_IS_INT(ab_cg_stats_read(&cg, "b1", &st, &e), 0, "v2: stats with a limit");
        TAP_IS_INT(st.memory_limit, 64 * MiB, "v2: stats memory.max value");
        put(box, "pids.current", "lots\n");
        TAP_IS_INT(ab_cg_stats_read(&cg, "b1", &st, &e) < 0, 1, "v2: garbage in pids.current");
        TAP_IS_INT(code_of(&e), AB_E_INTERNAL, "v2: garbage is AB_E_INTERNAL");
        TAP_IS_INT(ab_cg_stats_read(&cg, "nope", &st, &e) < 0, 1, "v2: stats of a missing box");
        TAP_IS_INT(code_of(&e), AB_E_NOT_FOUND, "v2: missing box stats is AB_E_NOT_FOUND");

        /* kill_all: cgroup.kill when present, else freeze + kill + thaw. */
        put(box, "cgroup.kill", "");
        TAP_IS_INT(ab_cg_kill_all(&cg, "b1", &e), 0, "v2: kill_all via cgroup.kill");
        TAP_IS_INT(code_of(&e), 0, "v2: kill_all sets no error");
        TAP_IS_STR(get(box, "cgroup.kill"), "1", "v2: cgroup.kill written");
        char *kill = xasprintf("%s/cgroup.kill", box);
        unlink(kill);
        free(kill);
        put(box, "cgroup.freeze", "0\n");
        TAP_IS_INT(ab_cg_kill_all(&cg, "b1", &e), 0, "v2: kill_all via freezer");
        TAP_IS_INT(code_of(&e), 0, "v2: freezer kill_all sets no error");
        TAP_IS_STR(get(box, "cgroup.freeze"), "0", "v2: thawed after kill_all");
        TAP_IS_INT(ab_cg_kill_all(&cg, "nope", &e), 0, "v2: kill_all of a missing box is fine");

        fake_v2_freezer(&cg, box);

        /* destroy: a real kernel's dir holds no files, so empty the fake one. */
        rm_rf(box);
        mkdir_p(box);
        TAP_IS_INT(ab_cg_destroy(&cg, "b1", &e), 0, "v2: destroy");
        TAP_IS_INT(code_of(&e), 0, "v2: destroy sets no error");
        tap_ok(!exists(box), "v2: box dir removed");
        tap_ok(exists(parent), "v2: parent dir kept");
        TAP_IS_INT(ab_cg_destroy(&cg, "b1", &e), 0, "v2: destroy of a missing box is fine");
        ab_cg_free(&cg);

        /* No cpu controller: fine without a CPU limit, an error with one. */
        char *root2 = xasprintf("%s/v2nocpu", tmp);
        char *par2 = xasprintf("%s/agentbox", root2);
        char *box2 = xasprintf("%s/b1", par2);
        mkdir_p(root2);
        put(root2, "cgroup.controllers", "memory pids\n");
        put(root2, "cgroup.subtree_control", "");
        mkdir_p(par2);
        put(par2, "cgroup.controllers", "memory pids\n");
        put(par2, "cgroup.subtree_control", "");
        fake_v2_box(box2);
        char *cpumax = xasprintf("%s/cpu.max", box2);
        unlink(cpumax);
        TAP_IS_INT(ab_cg_open(root2, "agentbox", &cg, &e), 0, "v2 no cpu: open");
        l = (ab_cg_limits){.memory_bytes = MiB, .pids = 4, .cpus = 1};
        TAP_IS_INT(ab_cg_create(&cg, "b1", &l, &e) < 0, 1, "v2 no cpu: CPU limit refused");
        TAP_IS_INT(code_of(&e), AB_E_UNSUPPORTED, "v2 no cpu: AB_E_UNSUPPORTED");
        l.cpus = 0;
        TAP_IS_INT(ab_cg_create(&cg, "b1", &l, &e), 0, "v2 no cpu: no CPU limit is fine");
        TAP_IS_INT(code_of(&e), 0, "v2 no cpu: no error");
        TAP_IS_STR(get(root2, "cgroup.subtree_control"), "+memory +pids",
                   "v2 no cpu: only memory and pids enabled");
        tap_ok(!exists(cpumax), "v2 no cpu: cpu.max not written");
        ab_cg_free(&cg);

        /* Nested parent: controllers enabled on every level. */
        char *root3 = xasprintf("%s/v2nest", tmp);
        char *mid = xasprintf("%s/a", root3);
        char *par3 = xasprintf("%s/a/b", root3);
        char *box3 = xasprintf("%s/a/b/b1", root3);
        mkdir_p(root3);
        put(root3, "cgroup.controllers", "memory pids cpu\n");
        put(root3, "cgroup.subtree_control", "");
        mkdir_p(mid);
        put(mid, "cgroup.controllers", "memory pids cpu\n");
        put(mid, "cgroup.subtree_control", "");
        mkdir_p(par3);
        put(par3, "cgroup.controllers", "memory pids cpu\n");
        put(par3, "cgroup.subtree_control", "");
        fake_v2_box(box3);
        TAP_IS_INT(ab_cg_open(root3, "a/b", &cg, &e), 0, "v2 nested: open");
        l = (ab_cg_limits){.memory_bytes = MiB, .pids = 4, .cpus = 2};
        TAP_IS_INT(ab_cg_create(&cg, "b1", &l, &e), 0, "v2 nested: create");
        TAP_IS_INT(code_of(&e), 0, "v2 nested: no error");
        TAP_IS_STR(get(mid, "cgroup.subtree_control"), "+memory +pids +cpu",
                   "v2 nested: middle level enabled");
        TAP_IS_STR(get(box3, "cpu.max"), "200000 100000", "v2 nested: cpu.max");
        ab_cg_free(&cg);

        /* Bad parents. */
        TAP_IS_INT(ab_cg_open(root, "../etc", &cg, &e) < 0, 1, "open: parent with .. refused");
        TAP_IS_INT(code_of(&e), AB_E_INVALID, "open: bad parent is AB_E_INVALID");
        TAP_IS_INT(ab_cg_open(root, "/abs", &cg, &e) < 0, 1, "open: absolute parent refused");
        ab_err_free(&e);
        TAP_IS_INT(ab_cg_open(root, "a//b", &cg, &e) < 0, 1, "open: empty component refused");
        ab_err_free(&e);

        /* v2 without memory/pids and no v1 either. */
        char *root4 = xasprintf("%s/v2bare", tmp);
        mkdir_p(root4);
        put(root4, "cgroup.controllers", "cpu io\n");
        TAP_IS_INT(ab_cg_open(root4, "agentbox", &cg, &e) < 0, 1, "v2 bare: refused");
        tap_ok(e && e->code == AB_E_UNSUPPORTED && strstr(e->msg, "cgroup.controllers") &&
                   strstr(e->msg, "pids"),
               "v2 bare: AB_E_UNSUPPORTED naming cgroup.controllers and pids");
        code_of(&e);

        free(root);
        free(parent);
        free(box);
        free(root2);
        free(par2);
        free(box2);
        free(cpumax);
        free(root3);
        free(mid);
        free(par3);
        free(box3);
        free(root4);
}

/* ---- fake v1 ------------------------------------------------------------ */

/* A hybrid-style tree: memory, pids, freezer, cpu+cpuacct co-mounted. */
static char *fake_v1_tree(const char *name, bool with_pids, bool with_cpu)
{
        char *root = xasprintf("%s/%s", tmp, name);
        char *d;
        mkdir_p(root);
        d = xasprintf("%s/memory", root);
        mkdir_p(d);
        put(d, "memory.limit_in_bytes", "9223372036854771712\n");
        free(d);
        if (with_pids) {
                d = xasprintf("%s/pids", root);
                mkdir_p(d);
                put(d, "tasks", "");
                free(d);
        }
        if (with_cpu) {
                d = xasprintf("%s/cpu,cpuacct", root);
                mkdir_p(d);
                put(d, "tasks", "");
                free(d);
                d = xasprintf("%s/cpu", root);
                ln_s("cpu,cpuacct", d);
                free(d);
                d = xasprintf("%s/cpuacct", root);
                ln_s("cpu,cpuacct", d);
                free(d);
        }
        d = xasprintf("%s/freezer", root);
        mkdir_p(d);
        put(d, "tasks", "");
        free(d);
        return root;
}

static void fake_v1_box(const ab_cg *cg, const char *id)
{
        char *d = ab_cg_path(cg, "memory", id);
        mkdir_p(d);
        put(d, "memory.limit_in_bytes", "9223372036854771712\n");
        put(d, "memory.memsw.limit_in_bytes", "9223372036854771712\n");
        put(d, "memory.usage_in_bytes", "4096\n");
        put(d, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n");
        put(d, "cgroup.procs", "");
        free(d);
        d = ab_cg_path(cg, "pids", id);
        mkdir_p(d);
        put(d, "pids.max", "max\n");
        put(d, "pids.current", "2\n");
        put(d, "cgroup.procs", "");
        free(d);
        if ((d = ab_cg_path(cg, "cpu", id))) {
                mkdir_p(d);
                put(d, "cpu.cfs_period_us", "100000\n");
                put(d, "cpu.cfs_quota_us", "-1\n");
                put(d, "cpuacct.usage", "777\n");
                put(d, "cgroup.procs", "");
                free(d);
        }
        d = ab_cg_path(cg, "freezer", id);
        mkdir_p(d);
        put(d, "freezer.state", "THAWED\n");
        put(d, "cgroup.procs", "");
        free(d);
}

static void test_fake_v1(void)
{
        ab_err *e = NULL;
        ab_cg cg;
        char *root = fake_v1_tree("v1", true, true);
        TAP_IS_INT(ab_cg_open(root, "agentbox", &cg, &e), 0, "v1: open");
        TAP_IS_INT(code_of(&e), 0, "v1: open sets no error");
        TAP_IS_INT(cg.version, AB_CG_V1, "v1: detected as v1");
        TAP_IS_STR(cg.v1_cpu, "cpu,cpuacct", "v1: cpu symlink resolved to the co-mount");
        TAP_IS_STR(cg.v1_cpuacct, "cpu,cpuacct", "v1: cpuacct symlink resolved to the co-mount");
        TAP_IS_STR(cg.v1_freezer, "freezer", "v1: freezer found");

        char *mem = xasprintf("%s/memory/agentbox/b1", root);
        char *pids = xasprintf("%s/pids/agentbox/b1", root);
        char *cpu = xasprintf("%s/cpu,cpuacct/agentbox/b1", root);
        char *frz = xasprintf("%s/freezer/agentbox/b1", root);
        char *p = ab_cg_path(&cg, "memory", "b1");
        TAP_IS_STR(p, mem, "v1: memory path");
        free(p);
        p = ab_cg_path(&cg, "cpuacct", "b1");
        TAP_IS_STR(p, cpu, "v1: cpuacct path goes through the co-mount");
        free(p);
        p = ab_cg_path(&cg, "blkio", "b1");
        TAP_IS_STR(p, NULL, "v1: unknown controller has no path");
        free(p);

        fake_v1_box(&cg, "b1");
        ab_cg_limits l = {.memory_bytes = 64 * MiB, .pids = 32, .cpus = 1.5};
        TAP_IS_INT(ab_cg_create(&cg, "b1", &l, &e), 0, "v1: create");
        TAP_IS_INT(code_of(&e), 0, "v1: create sets no error");
        TAP_IS_STR(get(mem, "memory.limit_in_bytes"), "67108864", "v1: memory.limit_in_bytes");
        TAP_IS_STR(get(mem, "memory.memsw.limit_in_bytes"), "67108864",
                   "v1: memsw = memory (no swap)");
        TAP_IS_STR(get(pids, "pids.max"), "32", "v1: pids.max");
        TAP_IS_STR(get(cpu, "cpu.cfs_period_us"), "100000", "v1: cfs_period_us");
        TAP_IS_STR(get(cpu, "cpu.cfs_quota_us"), "150000", "v1: cfs_quota_us for 1.5 cpus");

        l = (ab_cg_limits){0};
        TAP_IS_INT(ab_cg_create(&cg, "b1", &l, &e), 0, "v1: re-create without limits");
        TAP_IS_INT(code_of(&e), 0, "v1: re-create sets no error");
        TAP_IS_STR(get(mem, "memory.limit_in_bytes"), "-1", "v1: unlimited memory");
        TAP_IS_STR(get(mem, "memory.memsw.limit_in_bytes"), "-1", "v1: unlimited memsw");
        TAP_IS_STR(get(pids, "pids.max"), "max", "v1: unlimited pids");
        TAP_IS_STR(get(cpu, "cpu.cfs_quota_us"), "-1", "v1: unlimited cfs quota");

        char *memsw = xasprintf("%s/memory.memsw.limit_in_bytes", mem);
        unlink(memsw);
        l = (ab_cg_limits){.memory_bytes = 32 * MiB, .pids = 8};
        TAP_IS_INT(ab_cg_create(&cg, "b1", &l, &e), 0, "v1: create without memsw");
        TAP_IS_INT(code_of(&e), 0, "v1: no error without memsw");
        TAP_IS_STR(get(mem, "memory.limit_in_bytes"), "33554432", "v1: memory without memsw");
        tap_ok(!exists(memsw), "v1: memsw not created");
        free(memsw);

        char pidbuf[24];
        snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
        TAP_IS_INT(ab_cg_attach(&cg, "b1", getpid(), &e), 0, "v1: attach");
        TAP_IS_INT(code_of(&e), 0, "v1: attach sets no error");
        TAP_IS_STR(get(mem, "cgroup.procs"), pidbuf, "v1: attach: memory");
        TAP_IS_STR(get(pids, "cgroup.procs"), pidbuf, "v1: attach: pids");
        TAP_IS_STR(get(cpu, "cgroup.procs"), pidbuf, "v1: attach: cpu,cpuacct");
        TAP_IS_STR(get(frz, "cgroup.procs"), pidbuf, "v1: attach: freezer");
        put(mem, "cgroup.procs", "");
        put(pids, "cgroup.procs", "");
        put(cpu, "cgroup.procs", "");
        put(frz, "cgroup.procs", "");

        ab_cg_stats st;
        put(mem, "memory.limit_in_bytes", "9223372036854771712\n");
        TAP_IS_INT(ab_cg_stats_read(&cg, "b1", &st, &e), 0, "v1: stats");
        TAP_IS_INT(code_of(&e), 0, "v1: stats sets no error");
        TAP_IS_INT(st.memory_bytes, 4096, "v1: stats usage_in_bytes");
        TAP_IS_INT(st.memory_limit, 0, "v1: stats huge limit -> 0");
        TAP_IS_INT(st.pids, 2, "v1: stats pids.current");
        TAP_IS_INT(st.cpu_usage_ns, 777, "v1: stats cpuacct.usage");
        TAP_IS_INT(st.oom_kills, 5, "v1: stats oom_kill from memory.oom_control");
        put(mem, "memory.limit_in_bytes", "67108864\n");
        TAP_IS_INT(ab_cg_stats_read(&cg, "b1", &st, &e), 0, "v1: stats with a limit");
        TAP_IS_INT(st.memory_limit, 64 * MiB, "v1: stats real limit");

        ab_cg_freezer fs = AB_CG_FROZEN;
        TAP_IS_INT(ab_cg_freezer_state(&cg, "b1", &fs, &e), 0, "v1 freezer: state");
        TAP_IS_INT(fs, AB_CG_THAWED, "v1 freezer: THAWED");
        TAP_IS_INT(ab_cg_freeze(&cg, "b1", 50, &e), 0, "v1 freezer: freeze");
        TAP_IS_INT(code_of(&e), 0, "v1 freezer: freeze sets no error");
        TAP_IS_STR(get(frz, "freezer.state"), "FROZEN", "v1 freezer: freezer.state FROZEN");
        TAP_IS_INT(ab_cg_freezer_state(&cg, "b1", &fs, &e), 0, "v1 freezer: state when frozen");
        TAP_IS_INT(fs, AB_CG_FROZEN, "v1 freezer: FROZEN");
        put(frz, "freezer.state", "FREEZING\n");
        TAP_IS_INT(ab_cg_freezer_state(&cg, "b1", &fs, &e), 0, "v1 freezer: state while freezing");
        TAP_IS_INT(fs, AB_CG_FREEZING, "v1 freezer: FREEZING");
        put(frz, "freezer.state", "SLUSHY\n");
        TAP_IS_INT(ab_cg_freezer_state(&cg, "b1", &fs, &e) < 0, 1, "v1 freezer: unknown state");
        TAP_IS_INT(code_of(&e), AB_E_INTERNAL, "v1 freezer: ... AB_E_INTERNAL");
        put(frz, "freezer.state", "FROZEN\n");
        TAP_IS_INT(ab_cg_thaw(&cg, "b1", &e), 0, "v1 freezer: thaw");
        TAP_IS_INT(code_of(&e), 0, "v1 freezer: thaw sets no error");
        TAP_IS_STR(get(frz, "freezer.state"), "THAWED", "v1 freezer: freezer.state THAWED");
        TAP_IS_INT(ab_cg_freeze(&cg, "b2", 50, &e) < 0, 1, "v1 freezer: freeze a missing box");
        TAP_IS_INT(code_of(&e), AB_E_NOT_FOUND, "v1 freezer: ... AB_E_NOT_FOUND");

        put(frz, "freezer.state", "FROZEN\n");
        TAP_IS_INT(ab_cg_kill_all(&cg, "b1", &e), 0, "v1: kill_all of an empty box");
        TAP_IS_INT(code_of(&e), 0, "v1: kill_all sets no error");
        TAP_IS_STR(get(frz, "freezer.state"), "THAWED",
                   "v1: a frozen box is thawed after kill_all");

        rm_rf(mem);
        rm_rf(pids);
        rm_rf(cpu);
        rm_rf(frz);
        mkdir_p(mem);
        mkdir_p(cpu);
        TAP_IS_INT(ab_cg_destroy(&cg, "b1", &e), 0, "v1: destroy (some dirs already gone)");
        TAP_IS_INT(code_of(&e), 0, "v1: destroy sets no error");
        tap_ok(!exists(mem) && !exists(cpu), "v1: box dirs removed");
        char *mp = xasprintf("%s/memory/agentbox", root);
        tap_ok(exists(mp), "v1: parent dir kept");
        free(mp);
        ab_cg_free(&cg);

        /* No cpu hierarchy: fine without a CPU limit, an error with one. */
        char *root2 = fake_v1_tree("v1nocpu", true, false);
        TAP_IS_INT(ab_cg_open(root2, "agentbox", &cg, &e), 0, "v1 no cpu: open");
        TAP_IS_STR(cg.v1_cpu, NULL, "v1 no cpu: no cpu hierarchy");
        fake_v1_box(&cg, "b1");
        l = (ab_cg_limits){.memory_bytes = MiB, .pids = 4, .cpus = 1};
        TAP_IS_INT(ab_cg_create(&cg, "b1", &l, &e) < 0, 1, "v1 no cpu: CPU limit refused");
        tap_ok(e && e->code == AB_E_UNSUPPORTED && strstr(e->msg, "cpu"),
               "v1 no cpu: AB_E_UNSUPPORTED naming cpu");
        code_of(&e);
        l.cpus = 0;
        TAP_IS_INT(ab_cg_create(&cg, "b1", &l, &e), 0, "v1 no cpu: no CPU limit is fine");
        TAP_IS_INT(code_of(&e), 0, "v1 no cpu: no error");
        ab_cg_free(&cg);

        /* Co-mounted without symlinks; a symlink that leaves the root is ignored. */
        char *root3 = xasprintf("%s/v1comount", tmp);
        char *d = xasprintf("%s/memory", root3);
        mkdir_p(d);
        put(d, "tasks", "");
        free(d);
        d = xasprintf("%s/pids", root3);
        mkdir_p(d);
        put(d, "pids.max", "max\n");
        free(d);
        d = xasprintf("%s/cpuacct,cpu", root3);
        mkdir_p(d);
        put(d, "tasks", "");
        free(d);
        d = xasprintf("%s/freezer", root3);
        ln_s(tmp, d);
        free(d);
        TAP_IS_INT(ab_cg_open(root3, "agentbox", &cg, &e), 0, "v1 co-mount: open");
        TAP_IS_STR(cg.v1_cpu, "cpuacct,cpu", "v1 co-mount: cpu found by name list");
        TAP_IS_STR(cg.v1_cpuacct, "cpuacct,cpu", "v1 co-mount: cpuacct found by name list");
        TAP_IS_STR(cg.v1_freezer, NULL, "v1 co-mount: symlink out of the root ignored");
        ab_cg_freezer fs2;
        TAP_IS_INT(ab_cg_freeze(&cg, "b1", 50, &e) < 0, 1, "v1 no freezer: freeze refused");
        tap_ok(e && e->code == AB_E_UNSUPPORTED && strstr(e->msg, "freezer"),
               "v1 no freezer: AB_E_UNSUPPORTED naming the freezer");
        code_of(&e);
        TAP_IS_INT(ab_cg_freezer_state(&cg, "b1", &fs2, &e) < 0, 1,
                   "v1 no freezer: no state either");
        code_of(&e);
        ab_cg_free(&cg);

        /* Missing pids: neither layout. */
        char *root4 = fake_v1_tree("v1nopids", false, true);
        TAP_IS_INT(ab_cg_open(root4, "agentbox", &cg, &e) < 0, 1, "v1 no pids: refused");
        tap_ok(e && e->code == AB_E_UNSUPPORTED && strstr(e->msg, "pids"),
               "v1 no pids: AB_E_UNSUPPORTED naming pids");
        code_of(&e);

        free(root);
        free(mem);
        free(pids);
        free(cpu);
        free(frz);
        free(root2);
        free(root3);
        free(root4);
}

/* ---- the real host ------------------------------------------------------ */

/* A child that waits on a pipe before running fn, so it can be attached
 * first. *go is the write end: write a byte to release it. */
static pid_t spawn(void (*fn)(int), int arg, int *go)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -1;
        pid_t self = getpid();
        pid_t pid = fork();
        if (pid == 0) {
                char c;
                /* Die with the test, whatever happens to it. */
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != self)
                        _exit(3);
                close(p[1]);
                if (read(p[0], &c, 1) != 1)
                        _exit(3);
                fn(arg);
                _exit(0);
        }
        close(p[0]);
        *go = p[1];
        return pid;
}

static void release(int *go)
{
        (void)!write(*go, "x", 1);
        close(*go);
        *go = -1;
}

/* waitpid with a deadline: a late child is SIGKILLed and reported, so a
 * broken kill_all fails the test instead of hanging it. Returns the status,
 * or -1 when the child was late. */
static int wait_child(pid_t pid, unsigned ms)
{
        int status = 0;
        for (uint64_t end = ab_now_ms() + ms; ab_now_ms() < end;) {
                if (waitpid(pid, &status, WNOHANG) == pid)
                        return status;
                usleep(5000);
        }
        tap_diag("  child %d still running after %u ms", (int)pid, ms);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return -1;
}

static void block_forever(int unused)
{
        for (;;)
                pause();
}

/* Forks until it fails; reports {forks that worked, errno of the failure}. */
static void fork_many(int report)
{
        int res[2] = {0, 0};
        pid_t kids[100];
        for (int i = 0; i < 100; i++) {
                pid_t k = fork();
                if (k == 0) {
                        pause();
                        _exit(0);
                }
                if (k < 0) {
                        res[1] = errno;
                        break;
                }
                kids[res[0]++] = k;
        }
        (void)!write(report, res, sizeof(res));
        for (int i = 0; i < res[0]; i++) {
                kill(kids[i], SIGKILL);
                waitpid(kids[i], NULL, 0);
        }
}

static void eat_memory(int mib)
{
        size_t len = (size_t)mib * MiB;
        char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
                _exit(4);
        for (size_t i = 0; i < len; i += 4096)
                m[i] = 1;
        _exit(0);
}

static const char *const v1_ctrls[] = {"memory", "pids", "cpu", "cpuacct", "freezer"};

/* Best effort: leaves no cgroup behind whatever failed above. */
static void real_cleanup(ab_cg *cg, const char *id)
{
        ab_err *e = NULL;
        ab_cg_kill_all(cg, id, &e);
        ab_err_free(&e);
        while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
        ab_cg_destroy(cg, id, &e);
        ab_err_free(&e);
        for (size_t i = 0; i < AB_ARRAY_LEN(v1_ctrls); i++) {
                char *p = ab_cg_path(cg, v1_ctrls[i], NULL);
                if (p)
                        rmdir(p);
                free(p);
        }
}

/* Opens the host's real cgroups under a parent named for this test and
 * process; false (after a SKIP line naming `what`) when not root or the
 * layout is unusable. *parent is set when true (free it). */
static bool open_real(const char *what, const char *prefix, ab_cg *cg, char **parent)
{
        if (geteuid() != 0) {
                tap_ok(1, "%s # SKIP not root", what);
                return false;
        }
        ab_err *e = NULL;
        *parent = xasprintf("%s-%d", prefix, (int)getpid());
        if (ab_cg_open("/sys/fs/cgroup", *parent, cg, &e) < 0) {
                tap_ok(1, "%s # SKIP no usable cgroup layout: %s", what, e->msg);
                ab_err_free(&e);
                free(*parent);
                *parent = NULL;
                return false;
        }
        return true;
}

static void test_real(void)
{
        ab_err *e = NULL;
        ab_cg cg;
        char *parent;
        if (!open_real("real host", "agentbox-test", &cg, &parent))
                return;
        tap_diag("real host: cgroup v%d", (int)cg.version);
        bool v1 = cg.version == AB_CG_V1;
        const char *id = "box1";
        ab_cg_limits l = {.memory_bytes = 64 * MiB, .pids = 32, .cpus = 0.5};
        if (ab_cg_create(&cg, id, &l, &e) < 0 && e->code == AB_E_PERMISSION) {
                tap_ok(1, "real host # SKIP cgroupfs not writable: %s", e->msg);
                ab_err_free(&e);
                real_cleanup(&cg, id);
                ab_cg_free(&cg);
                free(parent);
                return;
        }
        TAP_IS_INT(code_of(&e), 0, "real: create 64 MiB / 32 pids / 0.5 cpus");

        char *mem = ab_cg_path(&cg, "memory", id);
        char *pids = ab_cg_path(&cg, "pids", id);
        char *cpu = ab_cg_path(&cg, "cpu", id);
        if (v1) {
                TAP_IS_STR(get(mem, "memory.limit_in_bytes"), "67108864",
                           "real: kernel memory.limit_in_bytes");
                char *memsw = xasprintf("%s/memory.memsw.limit_in_bytes", mem);
                if (exists(memsw))
                        TAP_IS_STR(get(mem, "memory.memsw.limit_in_bytes"), "67108864",
                                   "real: kernel memory.memsw.limit_in_bytes");
                free(memsw);
                if (cpu) {
                        TAP_IS_STR(get(cpu, "cpu.cfs_quota_us"), "50000",
                                   "real: kernel cpu.cfs_quota_us");
                        TAP_IS_STR(get(cpu, "cpu.cfs_period_us"), "100000",
                                   "real: kernel cpu.cfs_period_us");
                }
        } else {
                TAP_IS_STR(get(mem, "memory.max"), "67108864", "real: kernel memory.max");
                TAP_IS_STR(get(mem, "cpu.max"), "50000 100000", "real: kernel cpu.max");
        }
        TAP_IS_STR(get(pids, "pids.max"), "32", "real: kernel pids.max");

        /* v1 refuses memsw < memory at every step: raise, lower, lift, restore. */
        static const uint64_t steps[] = {128 * MiB, 32 * MiB, 0, 64 * MiB};
        bool all = true;
        for (size_t i = 0; i < AB_ARRAY_LEN(steps); i++) {
                l.memory_bytes = steps[i];
                all &= ab_cg_create(&cg, id, &l, &e) == 0;
                code_of(&e);
        }
        tap_ok(all, "real: memory limit raised, lowered, lifted and set again");
        TAP_IS_STR(get(mem, v1 ? "memory.limit_in_bytes" : "memory.max"), "67108864",
                   "real: limit back at 64 MiB");

        int go = -1;
        pid_t blocker = spawn(block_forever, 0, &go);
        TAP_IS_INT(ab_cg_attach(&cg, id, blocker, &e), 0, "real: attach a blocked child");
        code_of(&e);
        release(&go);
        char *procfile = xasprintf("%d/cgroup", (int)blocker);
        char *want = xasprintf("/%s/%s\n", parent, id);
        tap_ok(strstr(get("/proc", procfile), want) != NULL,
               "real: /proc/pid/cgroup shows the box");
        free(procfile);
        free(want);

        ab_cg_stats st;
        TAP_IS_INT(ab_cg_stats_read(&cg, id, &st, &e), 0, "real: stats");
        code_of(&e);
        tap_ok(st.pids >= 1, "real: stats pids >= 1 (%llu)", (unsigned long long)st.pids);
        TAP_IS_INT(st.memory_limit, 64 * MiB, "real: stats memory limit 64 MiB");

        /* pids.max = 32: the blocker and the forker count, so ~30 forks work. */
        int rep[2];
        if (pipe2(rep, O_CLOEXEC) < 0)
                rep[0] = rep[1] = -1;
        pid_t forker = spawn(fork_many, rep[1], &go);
        close(rep[1]);
        TAP_IS_INT(ab_cg_attach(&cg, id, forker, &e), 0, "real: attach the forker");
        code_of(&e);
        release(&go);
        int res[2] = {-1, -1};
        TAP_IS_INT(ab_read_full(rep[0], res, sizeof(res)), sizeof(res), "real: forker reported");
        close(rep[0]);
        int status = wait_child(forker, 10000);
        TAP_IS_INT(status, 0, "real: forker exited cleanly");
        tap_diag("  %d forks worked, then errno %d", res[0], res[1]);
        tap_ok(res[0] >= 20 && res[0] <= 31, "real: fork stopped near pids.max (%d)", res[0]);
        TAP_IS_INT(res[1], EAGAIN, "real: fork failed with EAGAIN");

        /* 200 MiB against 64 MiB with no swap: the kernel kills the child, not us. */
        pid_t eater = spawn(eat_memory, 200, &go);
        TAP_IS_INT(ab_cg_attach(&cg, id, eater, &e), 0, "real: attach the memory eater");
        code_of(&e);
        release(&go);
        status = wait_child(eater, 30000);
        tap_ok(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
               "real: memory eater OOM-killed (status 0x%x)", status);
        TAP_IS_INT(ab_cg_stats_read(&cg, id, &st, &e), 0, "real: stats after OOM");
        code_of(&e);
        tap_ok(st.oom_kills >= 1, "real: stats count the OOM kill (%llu)",
               (unsigned long long)st.oom_kills);
        tap_ok(kill(blocker, 0) == 0, "real: blocker survived the OOM");

        uint64_t t0 = ab_now_ms();
        TAP_IS_INT(ab_cg_kill_all(&cg, id, &e), 0, "real: kill_all");
        code_of(&e);
        tap_diag("  kill_all took %llu ms", (unsigned long long)(ab_now_ms() - t0));
        status = wait_child(blocker, 3000);
        tap_ok(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
               "real: kill_all SIGKILLed the blocker");
        TAP_IS_STR(get(pids, "cgroup.procs"), "", "real: cgroup.procs empty");
        TAP_IS_INT(ab_cg_stats_read(&cg, id, &st, &e), 0, "real: stats after kill_all");
        code_of(&e);
        TAP_IS_INT(st.pids, 0, "real: no pids left");

        /* destroy kills what is still inside (EBUSY) before removing. */
        blocker = spawn(block_forever, 0, &go);
        ab_cg_attach(&cg, id, blocker, &e);
        code_of(&e);
        release(&go);
        TAP_IS_INT(ab_cg_destroy(&cg, id, &e), 0, "real: destroy a busy box");
        code_of(&e);
        status = wait_child(blocker, 3000);
        tap_ok(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
               "real: destroy killed the process inside");
        bool gone = true, kept = true;
        for (size_t i = 0; i < AB_ARRAY_LEN(v1_ctrls); i++) {
                char *b = ab_cg_path(&cg, v1_ctrls[i], id);
                char *par = ab_cg_path(&cg, v1_ctrls[i], NULL);
                if (b && exists(b)) {
                        tap_diag("  still there: %s", b);
                        gone = false;
                }
                if (par && !exists(par)) {
                        tap_diag("  parent gone: %s", par);
                        kept = false;
                }
                free(b);
                free(par);
        }
        tap_ok(gone, "real: box dirs removed in every hierarchy");
        tap_ok(kept, "real: parent dirs kept");
        TAP_IS_INT(ab_cg_destroy(&cg, id, &e), 0, "real: destroy again is fine");
        code_of(&e);

        real_cleanup(&cg, id);
        bool clean = true;
        for (size_t i = 0; i < AB_ARRAY_LEN(v1_ctrls); i++) {
                char *par = ab_cg_path(&cg, v1_ctrls[i], NULL);
                if (par && exists(par))
                        clean = false;
                free(par);
        }
        tap_ok(clean, "real: test parent dirs removed");
        free(mem);
        free(pids);
        free(cpu);
        ab_cg_free(&cg);
        free(parent);
}

/* ---- freezing a real process tree ---------------------------------------- */

/* Shared with the counting children: [0] and [1] are their counters, [2] the
 * grandchild's pid. */
static volatile uint64_t *shared;

/* A child that forks a grandchild; both spin, each bumping its counter. */
static void count_forever(int unused)
{
        (void)unused;
        pid_t parent = getpid();
        pid_t g = fork();
        if (g == 0) {
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
                        _exit(3);
                for (;;)
                        shared[1]++;
        }
        shared[2] = (uint64_t)g;
        for (;;)
                shared[0]++;
}

/* Waits (at most ms) until both counters move; false when one stays. */
static bool counters_move(unsigned ms)
{
        uint64_t a = shared[0], b = shared[1];
        for (uint64_t end = ab_now_ms() + ms; ab_now_ms() < end; usleep(1000))
                if (shared[0] != a && shared[1] != b)
                        return true;
        return false;
}

/* The state letter of /proc/PID/stat (R running, S sleeping, D ...). */
static char proc_state(pid_t pid)
{
        char f[32];
        snprintf(f, sizeof(f), "%d/stat", (int)pid);
        const char *st = get("/proc", f);
        const char *p = strrchr(st, ')');
        return p && p[1] == ' ' ? p[2] : '?';
}

/* "what: s" in a static buffer, for one TAP line. */
static const char *nm(const char *what, const char *s)
{
        static char buf[256];
        snprintf(buf, sizeof(buf), "%s: %s", what, s);
        return buf;
}

/* Freezes, checks, thaws, then kills a frozen tree, on the cgroup `id` of cg
 * (which must exist). cpu says whether ab_cg_stats_read reports CPU time. */
static void freeze_tree(const char *what, const ab_cg *cg, const char *id, bool cpu)
{
        ab_err *e = NULL;
        memset((void *)shared, 0, 3 * sizeof(uint64_t));
        int go = -1;
        pid_t child = spawn(count_forever, 0, &go);
        TAP_IS_INT(ab_cg_attach(cg, id, child, &e), 0, nm(what, "attach a counting child"));
        code_of(&e);
        release(&go);
        tap_ok(counters_move(5000), "%s: child and grandchild count", what);
        pid_t grand = (pid_t)shared[2];

        ab_cg_freezer fs = AB_CG_THAWED;
        TAP_IS_INT(ab_cg_freeze(cg, id, 2000, &e), 0, nm(what, "freeze"));
        code_of(&e);
        TAP_IS_INT(ab_cg_freezer_state(cg, id, &fs, &e), 0, nm(what, "state"));
        code_of(&e);
        TAP_IS_INT(fs, AB_CG_FROZEN, nm(what, "frozen"));
        char sc = proc_state(child), sg = proc_state(grand);
        tap_diag("  frozen tasks show as %c and %c in /proc/PID/stat", sc, sg);
        tap_ok(sc != 'R' && sg != 'R' && sc != '?' && sg != '?',
               "%s: the spinning processes are alive and not runnable", what);
        ab_cg_stats st0 = {0}, st1 = {0};
        if (cpu)
                ab_cg_stats_read(cg, id, &st0, NULL);
        uint64_t a = shared[0], b = shared[1];
        usleep(200 * 1000);
        tap_ok(shared[0] == a && shared[1] == b, "%s: no counter moves while frozen", what);
        if (cpu) {
                ab_cg_stats_read(cg, id, &st1, NULL);
                tap_ok(st0.cpu_usage_ns > 0 && st1.cpu_usage_ns == st0.cpu_usage_ns,
                       "%s: the cgroup's CPU time stands still (%llu ns)", what,
                       (unsigned long long)st1.cpu_usage_ns);
        }
        TAP_IS_INT(ab_cg_freeze(cg, id, 2000, &e), 0, nm(what, "freezing again is a no-op"));
        code_of(&e);

        TAP_IS_INT(ab_cg_thaw(cg, id, &e), 0, nm(what, "thaw"));
        code_of(&e);
        TAP_IS_INT(ab_cg_freezer_state(cg, id, &fs, &e), 0, nm(what, "state after thaw"));
        TAP_IS_INT(fs, AB_CG_THAWED, nm(what, "thawed"));
        tap_ok(counters_move(5000), "%s: both count again after the thaw (same processes)", what);
        TAP_IS_INT(ab_cg_thaw(cg, id, &e), 0, nm(what, "thawing again is a no-op"));
        code_of(&e);

        /* A frozen tree is killed: on v1 the kill is pending until the thaw. */
        TAP_IS_INT(ab_cg_freeze(cg, id, 2000, &e), 0, nm(what, "freeze before kill_all"));
        code_of(&e);
        TAP_IS_INT(ab_cg_kill_all(cg, id, &e), 0, nm(what, "kill_all of a frozen tree"));
        code_of(&e);
        int status = wait_child(child, 3000);
        tap_ok(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
               "%s: the frozen child was SIGKILLed", what);
        bool grand_gone = false;
        for (uint64_t end = ab_now_ms() + 3000; !grand_gone && ab_now_ms() < end; usleep(2000))
                grand_gone = kill(grand, 0) < 0 || proc_state(grand) == 'Z';
        tap_ok(grand_gone, "%s: the frozen grandchild is gone too", what);
        TAP_IS_INT(ab_cg_freezer_state(cg, id, &fs, &e), 0, nm(what, "state after kill_all"));
        code_of(&e);
        TAP_IS_INT(fs, AB_CG_THAWED, nm(what, "kill_all leaves the box thawed"));
}

/* A shell running /bin/true again and again: dash runs commands with vfork,
 * so the shell keeps sleeping in vfork() while its child is being frozen. */
static void spawn_forever(int unused)
{
        (void)unused;
        execl("/bin/sh", "sh", "-c", "while :; do /bin/true; done", (char *)NULL);
        _exit(127);
}

/* Freezing a tree that vforks all the time: v1 used to leave such a cgroup
 * FREEZING for good (a vfork parent asked to freeze while running, then
 * sleeping for its frozen child, is never asked again). Every freeze must
 * complete well within its time, round after round. */
static void freeze_vforking(const char *what, const ab_cg *cg, const char *id)
{
        ab_err *e = NULL;
        int go = -1;
        pid_t child = spawn(spawn_forever, 0, &go);
        TAP_IS_INT(ab_cg_attach(cg, id, child, &e), 0, nm(what, "attach a vforking child"));
        code_of(&e);
        release(&go);
        int good = 0, rounds = 100;
        uint64_t worst = 0;
        for (int i = 0; i < rounds; i++) {
                uint64_t t0 = ab_now_ns();
                int r = ab_cg_freeze(cg, id, 2000, &e);
                uint64_t t = ab_now_ns() - t0;
                worst = t > worst ? t : worst;
                if (r == 0)
                        good++;
                else
                        code_of(&e);
                ab_cg_thaw(cg, id, NULL);
        }
        tap_diag("  %d/%d freezes of a vforking tree, the slowest %.2f ms", good, rounds,
                 (double)worst / 1e6);
        tap_ok(good == rounds, "%s: a tree that vforks all the time freezes every time", what);
        ab_cg_kill_all(cg, id, NULL);
        wait_child(child, 3000);
}

/* The host's hierarchies (v1 here: the box is in the freezer hierarchy, as
 * boxes are), including a process in a sub-cgroup, which on v1 exists in
 * memory and pids only: freezing the box stops it too. */
static void test_real_freeze(void)
{
        ab_err *e = NULL;
        ab_cg cg;
        char *parent;
        if (!open_real("real freeze", "agentbox-test-frz", &cg, &parent))
                return;
        const char *id = "box1";
        ab_cg_limits l = {.memory_bytes = 64 * MiB, .pids = 32};
        if (ab_cg_create(&cg, id, &l, &e) < 0) {
                tap_ok(1, "real freeze # SKIP cannot create a box cgroup: %s", e->msg);
                ab_err_free(&e);
                real_cleanup(&cg, id);
                ab_cg_free(&cg);
                free(parent);
                return;
        }
        if (cg.version == AB_CG_V1) {
                tap_ok(cg.v1_freezer != NULL, "real freeze: the v1 freezer hierarchy is used");
                /* The anchor keeps the kernel's freezer switched on (see cgroup.h). */
                TAP_IS_INT(ab_cg_freeze_anchor(&cg), 0, "real freeze: the freeze anchor is set");
                char *anchor = xasprintf("%s/%s/%s", cg.root, cg.v1_freezer, AB_CG_FREEZE_ANCHOR);
                TAP_IS_STR(get(anchor, "freezer.state"), "FROZEN", "real freeze: ... frozen");
                TAP_IS_STR(get(anchor, "cgroup.procs"), "", "real freeze: ... and empty");
                TAP_IS_INT(ab_cg_freeze_anchor(&cg), 0, "real freeze: setting it again is fine");
                free(anchor);
        }
        freeze_tree("real freeze", &cg, id, true);
        freeze_vforking("real freeze", &cg, id);

        ab_cg_limits sl = {.memory_bytes = 32 * MiB, .pids = 8};
        TAP_IS_INT(ab_cg_sub_create(&cg, id, "run-1", &sl, &e), 0, "real freeze sub: create");
        code_of(&e);
        memset((void *)shared, 0, 3 * sizeof(uint64_t));
        int go = -1;
        pid_t child = spawn(count_forever, 0, &go);
        ab_cg_attach(&cg, id, child, &e);
        code_of(&e);
        TAP_IS_INT(ab_cg_sub_attach(&cg, id, "run-1", child, &e), 0,
                   "real freeze sub: attach a counting child to the sub-cgroup");
        code_of(&e);
        release(&go);
        tap_ok(counters_move(5000), "real freeze sub: it counts");
        TAP_IS_INT(ab_cg_freeze(&cg, id, 2000, &e), 0, "real freeze sub: freeze the box");
        code_of(&e);
        uint64_t a = shared[0], b = shared[1];
        usleep(200 * 1000);
        tap_ok(shared[0] == a && shared[1] == b,
               "real freeze sub: the sub-cgroup's processes stand still too");
        TAP_IS_INT(ab_cg_thaw(&cg, id, &e), 0, "real freeze sub: thaw");
        code_of(&e);
        tap_ok(counters_move(5000), "real freeze sub: they count again");
        TAP_IS_INT(ab_cg_destroy(&cg, id, &e), 0, "real freeze sub: destroy");
        code_of(&e);
        int status = wait_child(child, 3000);
        tap_ok(status != -1 && WIFSIGNALED(status), "real freeze sub: child killed by destroy");
        real_cleanup(&cg, id);
        ab_cg_free(&cg);
        free(parent);
}

/* A hybrid host's /sys/fs/cgroup/unified is a v2 mount without controllers:
 * enough to run the v2 kill and destroy paths against a real kernel. */
static void test_real_v2_kill(void)
{
        const char *root = "/sys/fs/cgroup/unified";
        char *ctl = xasprintf("%s/cgroup.controllers", root);
        bool have = geteuid() == 0 && exists(ctl);
        free(ctl);
        if (!have) {
                tap_ok(1, "real v2 kill # SKIP not root or no v2 mount at %s", root);
                return;
        }
        ab_err *e = NULL;
        ab_cg cg = {.version = AB_CG_V2,
                    .root = xstrdup(root),
                    .parent = xasprintf("agentbox-test-%d", (int)getpid())};
        char *par = ab_cg_path(&cg, NULL, NULL);
        char *box = ab_cg_path(&cg, NULL, "k");
        mkdir_p(box);
        pid_t kids[3];
        bool attached = true;
        for (size_t i = 0; i < AB_ARRAY_LEN(kids); i++) {
                int go = -1;
                kids[i] = spawn(block_forever, 0, &go);
                attached &= ab_cg_attach(&cg, "k", kids[i], &e) == 0;
                code_of(&e);
                release(&go);
        }
        tap_ok(attached, "real v2: three children attached");
        TAP_IS_INT(ab_cg_kill_all(&cg, "k", &e), 0, "real v2: kill_all");
        code_of(&e);
        bool killed = true;
        for (size_t i = 0; i < AB_ARRAY_LEN(kids); i++) {
                int st = wait_child(kids[i], 3000);
                killed &= st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
        }
        tap_ok(killed, "real v2: every child SIGKILLed");

        /* cgroup.freeze is a core file of every non-root v2 cgroup. */
        freeze_tree("real v2 freeze", &cg, "k", false);
        freeze_vforking("real v2 freeze", &cg, "k");

        int go = -1;
        kids[0] = spawn(block_forever, 0, &go);
        ab_cg_attach(&cg, "k", kids[0], &e);
        code_of(&e);
        release(&go);
        TAP_IS_INT(ab_cg_destroy(&cg, "k", &e), 0, "real v2: destroy a busy box");
        code_of(&e);
        int st = wait_child(kids[0], 3000);
        tap_ok(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
               "real v2: destroy killed the process inside");
        tap_ok(!exists(box) && exists(par), "real v2: box removed, parent kept");
        if (exists(box))
                rmdir(box);
        TAP_IS_INT(rmdir(par), 0, "real v2: test parent removed");
        free(par);
        free(box);
        ab_cg_free(&cg);
}

/* ---- sub-cgroups (fake trees) ------------------------------------------- */

static void test_fake_v2_sub(void)
{
        ab_err *e = NULL;
        ab_cg cg;
        char *root = xasprintf("%s/v2sub", tmp);
        char *parent = xasprintf("%s/agentbox", root);
        char *box = xasprintf("%s/b1", parent);
        char *leaf = xasprintf("%s/%s", box, AB_CG_BOX_LEAF);
        char *run = xasprintf("%s/run-1", box);
        mkdir_p(root);
        put(root, "cgroup.controllers", "cpu memory pids\n");
        put(root, "cgroup.subtree_control", "");
        mkdir_p(parent);
        put(parent, "cgroup.controllers", "cpu memory pids\n");
        put(parent, "cgroup.subtree_control", "");
        fake_v2_box(box);
        put(box, "cgroup.controllers", "cpu memory pids\n");
        put(box, "cgroup.subtree_control", "");
        TAP_IS_INT(ab_cg_open(root, "agentbox", &cg, &e), 0, "v2 sub: open");
        code_of(&e);

        /* The box's own processes must go to its leaf first; the fake
         * cgroup.procs does not empty itself, so the move never finishes. */
        put(box, "cgroup.procs", "4242\n");
        mkdir_p(leaf);
        put(leaf, "cgroup.procs", "");
        ab_cg_limits l = {.memory_bytes = 96 * MiB, .pids = 128, .cpus = 2};
        TAP_IS_INT(ab_cg_sub_create(&cg, "b1", "run-1", &l, &e) < 0, 1,
                   "v2 sub: a box whose processes never leave is refused");
        TAP_IS_INT(code_of(&e), AB_E_CONFLICT, "v2 sub: ... as AB_E_CONFLICT");
        TAP_IS_STR(get(leaf, "cgroup.procs"), "4242", "v2 sub: its process was moved to the leaf");
        TAP_IS_STR(get(box, "cgroup.subtree_control"), "",
                   "v2 sub: controllers not enabled while processes stay");

        /* Moved (the kernel empties the box's list): controllers go on. */
        put(box, "cgroup.procs", "");
        mkdir_p(run);
        put(run, "memory.max", "max\n");
        put(run, "memory.swap.max", "max\n");
        put(run, "pids.max", "max\n");
        put(run, "cpu.max", "max 100000\n"); /* the box hands cpu on too */
        put(run, "cgroup.procs", "");
        TAP_IS_INT(ab_cg_sub_create(&cg, "b1", "run-1", &l, &e), 0, "v2 sub: create");
        TAP_IS_INT(code_of(&e), 0, "v2 sub: create sets no error");
        TAP_IS_STR(get(box, "cgroup.subtree_control"), "+memory +pids +cpu",
                   "v2 sub: the box hands memory and pids to its children");
        TAP_IS_STR(get(run, "memory.max"), "100663296", "v2 sub: memory.max");
        TAP_IS_STR(get(run, "memory.swap.max"), "0", "v2 sub: no swap");
        TAP_IS_STR(get(run, "pids.max"), "128", "v2 sub: pids.max");
        TAP_IS_STR(get(run, "cpu.max"), "max 100000",
                   "v2 sub: no CPU limit of its own (the box's covers it)");

        /* Enabled once: a second run does not move anything again. */
        put(box, "cgroup.subtree_control", "memory pids cpu\n");
        put(box, "cgroup.procs", "999\n");
        TAP_IS_INT(ab_cg_sub_create(&cg, "b1", "run-1", &l, &e), 0,
                   "v2 sub: create with controllers already on");
        code_of(&e);
        TAP_IS_STR(get(leaf, "cgroup.procs"), "4242", "v2 sub: ... moves nothing");
        put(box, "cgroup.procs", "");

        TAP_IS_INT(ab_cg_sub_attach(&cg, "b1", "run-1", 777, &e), 0, "v2 sub: attach");
        code_of(&e);
        TAP_IS_STR(get(run, "cgroup.procs"), "777", "v2 sub: attach writes the run's cgroup.procs");
        put(run, "cgroup.procs", "");
        TAP_IS_INT(ab_cg_sub_set_memory(&cg, "b1", "run-1", 160 * MiB, &e), 0,
                   "v2 sub: set memory");
        code_of(&e);
        TAP_IS_STR(get(run, "memory.max"), "167772160", "v2 sub: memory.max rewritten");

        put(run, "memory.current", "1000\n");
        put(run, "pids.current", "1\n");
        put(run, "memory.events", "low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n");
        ab_cg_stats st;
        TAP_IS_INT(ab_cg_sub_stats(&cg, "b1", "run-1", &st, &e), 0, "v2 sub: stats");
        code_of(&e);
        TAP_IS_INT(st.oom_kills, 1, "v2 sub: its OOM kills");
        TAP_IS_INT(st.memory_limit, 160 * MiB, "v2 sub: its limit");
        TAP_IS_INT(ab_cg_sub_create(&cg, "b1", "../run", &l, &e) < 0, 1,
                   "v2 sub: a sub name with .. refused");
        TAP_IS_INT(code_of(&e), AB_E_INVALID, "v2 sub: ... as AB_E_INVALID");

        put(run, "cgroup.kill", "");
        TAP_IS_INT(ab_cg_sub_kill(&cg, "b1", "run-1", &e), 0, "v2 sub: kill");
        code_of(&e);
        TAP_IS_STR(get(run, "cgroup.kill"), "1", "v2 sub: kill writes the run's cgroup.kill");
        rm_rf(run);
        mkdir_p(run);
        TAP_IS_INT(ab_cg_sub_destroy(&cg, "b1", "run-1", &e), 0, "v2 sub: destroy");
        code_of(&e);
        tap_ok(!exists(run) && exists(box), "v2 sub: run removed, box kept");
        TAP_IS_INT(ab_cg_sub_destroy(&cg, "b1", "run-1", &e), 0,
                   "v2 sub: destroy of a missing one is fine");
        code_of(&e);
        ab_cg_free(&cg);
        free(root);
        free(parent);
        free(box);
        free(leaf);
        free(run);
}

static void test_fake_v1_sub(void)
{
        ab_err *e = NULL;
        ab_cg cg;
        char *root = fake_v1_tree("v1sub", true, true);
        TAP_IS_INT(ab_cg_open(root, "agentbox", &cg, &e), 0, "v1 sub: open");
        code_of(&e);
        fake_v1_box(&cg, "b1");
        char *mem = xasprintf("%s/memory/agentbox/b1/run-1", root);
        char *pids = xasprintf("%s/pids/agentbox/b1/run-1", root);
        char *cpu = xasprintf("%s/cpu,cpuacct/agentbox/b1/run-1", root);
        char *frz = xasprintf("%s/freezer/agentbox/b1/run-1", root);
        mkdir_p(mem);
        put(mem, "memory.limit_in_bytes", "9223372036854771712\n");
        put(mem, "memory.memsw.limit_in_bytes", "9223372036854771712\n");
        put(mem, "cgroup.procs", "");
        mkdir_p(pids);
        put(pids, "pids.max", "max\n");
        put(pids, "cgroup.procs", "");
        ab_cg_limits l = {.memory_bytes = 96 * MiB, .pids = 128, .cpus = 1};
        TAP_IS_INT(ab_cg_sub_create(&cg, "b1", "run-1", &l, &e), 0, "v1 sub: create");
        TAP_IS_INT(code_of(&e), 0, "v1 sub: create sets no error");
        TAP_IS_STR(get(mem, "memory.limit_in_bytes"), "100663296", "v1 sub: memory limit");
        TAP_IS_STR(get(mem, "memory.memsw.limit_in_bytes"), "100663296",
                   "v1 sub: memory+swap limit");
        TAP_IS_STR(get(pids, "pids.max"), "128", "v1 sub: pids.max");
        tap_ok(!exists(cpu) && !exists(frz), "v1 sub: no cpu, cpuacct or freezer cgroup");
        TAP_IS_INT(ab_cg_sub_attach(&cg, "b1", "run-1", 777, &e), 0, "v1 sub: attach");
        code_of(&e);
        TAP_IS_STR(get(mem, "cgroup.procs"), "777", "v1 sub: attached in memory");
        TAP_IS_STR(get(pids, "cgroup.procs"), "777", "v1 sub: attached in pids");
        put(mem, "cgroup.procs", "");
        put(pids, "cgroup.procs", "");
        TAP_IS_INT(ab_cg_sub_set_memory(&cg, "b1", "run-1", 32 * MiB, &e), 0,
                   "v1 sub: lower memory");
        code_of(&e);
        TAP_IS_STR(get(mem, "memory.limit_in_bytes"), "33554432", "v1 sub: memory lowered");
        TAP_IS_STR(get(mem, "memory.memsw.limit_in_bytes"), "33554432",
                   "v1 sub: memory+swap lowered");
        put(mem, "memory.usage_in_bytes", "4096\n");
        put(mem, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
        put(pids, "pids.current", "1\n");
        ab_cg_stats st;
        TAP_IS_INT(ab_cg_sub_stats(&cg, "b1", "run-1", &st, &e), 0, "v1 sub: stats");
        code_of(&e);
        TAP_IS_INT(st.oom_kills, 3, "v1 sub: its OOM kills");
        rm_rf(mem);
        rm_rf(pids);
        mkdir_p(mem);
        mkdir_p(pids);
        TAP_IS_INT(ab_cg_sub_destroy(&cg, "b1", "run-1", &e), 0, "v1 sub: destroy");
        code_of(&e);
        tap_ok(!exists(mem) && !exists(pids), "v1 sub: removed from memory and pids");
        char *boxmem = ab_cg_path(&cg, "memory", "b1");
        tap_ok(exists(boxmem), "v1 sub: the box's cgroup is kept");
        free(boxmem);
        ab_cg_free(&cg);
        free(root);
        free(mem);
        free(pids);
        free(cpu);
        free(frz);
}

/* The real kernel: a process in a box's sub-cgroup is OOM-killed at the
 * sub-cgroup's limit, far below the box's, and destroy ends what is left. */
static void test_real_sub(void)
{
        ab_err *e = NULL;
        ab_cg cg;
        char *parent;
        if (!open_real("real sub", "agentbox-test-sub", &cg, &parent))
                return;
        const char *id = "box1";
        ab_cg_limits bl = {.memory_bytes = 512 * MiB, .pids = 256};
        if (ab_cg_create(&cg, id, &bl, &e) < 0) {
                tap_ok(1, "real sub # SKIP cannot create a box cgroup: %s", e->msg);
                ab_err_free(&e);
                real_cleanup(&cg, id);
                ab_cg_free(&cg);
                free(parent);
                return;
        }
        ab_cg_limits l = {.memory_bytes = 16 * MiB, .pids = 16};
        TAP_IS_INT(ab_cg_sub_create(&cg, id, "run-1", &l, &e), 0, "real sub: create 16 MiB");
        code_of(&e);
        int go = -1;
        pid_t eater = spawn(eat_memory, 64, &go);
        TAP_IS_INT(ab_cg_sub_attach(&cg, id, "run-1", eater, &e), 0, "real sub: attach");
        code_of(&e);
        release(&go);
        int status = wait_child(eater, 10000);
        tap_ok(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
               "real sub: 64 MiB in a 16 MiB sub-cgroup of a 512 MiB box is OOM-killed");
        ab_cg_stats st;
        TAP_IS_INT(ab_cg_sub_stats(&cg, id, "run-1", &st, &e), 0, "real sub: stats");
        code_of(&e);
        tap_ok(st.oom_kills >= 1, "real sub: the sub-cgroup counts the OOM kill (%llu)",
               (unsigned long long)st.oom_kills);

        pid_t blocker = spawn(block_forever, 0, &go);
        TAP_IS_INT(ab_cg_sub_attach(&cg, id, "run-1", blocker, &e), 0,
                   "real sub: attach a second process");
        code_of(&e);
        release(&go);
        TAP_IS_INT(ab_cg_sub_destroy(&cg, id, "run-1", &e), 0, "real sub: destroy");
        code_of(&e);
        status = wait_child(blocker, 5000);
        tap_ok(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
               "real sub: destroy killed the process inside");
        char *boxmem = ab_cg_path(&cg, "memory", id);
        char *run = xasprintf("%s/run-1", boxmem);
        tap_ok(!exists(run), "real sub: the sub-cgroup is gone");
        free(run);
        free(boxmem);
        real_cleanup(&cg, id);
        ab_cg_free(&cg);
        free(parent);
}

int main(void)
{
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (!mkdtemp(tmp)) {
                printf("Bail out! mkdtemp: %s\n", strerror(errno));
                return 1;
        }
        test_fake_v2();
        test_fake_v1();
        test_fake_v2_sub();
        test_fake_v1_sub();
        rm_rf(tmp);
        test_real();
        test_real_sub();
        shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shared == MAP_FAILED) {
                printf("Bail out! mmap: %s\n", strerror(errno));
                return 1;
        }
        test_real_freeze();
        test_real_v2_kill();
        return tap_done();
}
