/* cgroup.c - per-box control groups on cgroup v1 and v2.
 *
 * Layout: the box lives at root/[hierarchy/]parent/box_id. v2 has one
 * hierarchy (root itself); v1 has one per controller, possibly co-mounted
 * ("cpu,cpuacct"), so every per-hierarchy loop goes over a de-duplicated list.
 *
 * Control files are opened without O_CREAT: cgroupfs makes them on mkdir, so
 * a missing file means a missing controller, never something to create. That
 * also lets tests run the code against a plain directory tree. */
#include "native/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#define CG_CPU_PERIOD      100000u /* us; quota = cpus * period */
#define CG_CPU_QUOTA_MIN   1000u   /* us; the kernel refuses less */
#define CG_CPUS_MAX        65536.0
#define CG_KILL_MS         2000u
#define CG_FREEZE_MS       200u
#define CG_RMDIR_MS        1000u
#define CG_POLL_NS         5000000L
#define CG_MAX_DEPTH       16 /* nested cgroups a box may have made below its own */
#define CG_V1_UNLIMITED    (UINT64_C(1) << 62) /* v1 reports "no limit" as ~2^63 */
#define CG_MAX_HIERARCHIES 5

/* ---- small helpers ------------------------------------------------------ */

static void closedirp(DIR **d)
{
        if (*d) {
                int saved = errno;
                closedir(*d);
                errno = saved;
        }
}
#define _cleanup_dir_ __attribute__((cleanup(closedirp)))

static void sleep_poll(void)
{
        struct timespec ts = {.tv_sec = 0, .tv_nsec = CG_POLL_NS};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* One path component that cannot climb out of its directory. */
static bool valid_name(const char *s)
{
        return s && *s && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && !strchr(s, '/') &&
               strlen(s) < 256;
}

/* A relative path of valid components ("agentbox", "agentbox/boxes"). */
static bool valid_parent(const char *p)
{
        if (!p || !*p || strlen(p) >= 1024)
                return false;
        if (p[0] == '/' || p[strlen(p) - 1] == '/' || strstr(p, "//"))
                return false;
        _cleanup_free_ char *copy = xstrdup(p);
        char *save = NULL;
        for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save))
                if (!valid_name(c))
                        return false;
        return true;
}

static bool has_word(const char *list, const char *word)
{
        size_t wl = strlen(word);
        for (const char *p = list; *p;) {
                while (*p == ' ' || *p == '\t' || *p == '\n')
                        p++;
                size_t n = strcspn(p, " \t\n");
                if (n == wl && strncmp(p, word, n) == 0)
                        return true;
                p += n;
        }
        return false;
}

/* "123\n" -> 123, "max" -> UINT64_MAX. 0 or -EINVAL. */
static int parse_u64(const char *s, uint64_t *out)
{
        while (*s == ' ' || *s == '\t')
                s++;
        if (strncmp(s, "max", 3) == 0 && (s[3] == '\0' || s[3] == '\n' || s[3] == ' ')) {
                *out = UINT64_MAX;
                return 0;
        }
        if (*s < '0' || *s > '9')
                return -EINVAL;
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || (*end && *end != '\n' && *end != ' '))
                return -EINVAL;
        *out = v;
        return 0;
}

/* Value of the "key N" line in a flat-keyed file (cpu.stat, memory.events). */
static int keyed_u64(const char *buf, const char *key, uint64_t *out)
{
        size_t kl = strlen(key);
        for (const char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
                if (strncmp(p, key, kl) == 0 && p[kl] == ' ')
                        return parse_u64(p + kl + 1, out);
        return -ENOENT;
}

static int read_at(const char *dir, const char *file, char **out)
{
        _cleanup_free_ char *p = xasprintf("%s/%s", dir, file);
        return ab_read_file(AT_FDCWD, p, out, NULL);
}

static int read_u64(const char *dir, const char *file, uint64_t *out)
{
        _cleanup_free_ char *buf = NULL;
        int r = read_at(dir, file, &buf);
        return r < 0 ? r : parse_u64(buf, out);
}

static int read_keyed(const char *dir, const char *file, const char *key, uint64_t *out)
{
        _cleanup_free_ char *buf = NULL;
        int r = read_at(dir, file, &buf);
        return r < 0 ? r : keyed_u64(buf, key, out);
}

/* Writes val to dir/file, which must exist. 0 or -errno (cgroupfs reports a
 * rejected value as the write's errno). */
static int write_at(const char *dir, const char *file, const char *val)
{
        _cleanup_free_ char *p = xasprintf("%s/%s", dir, file);
        _cleanup_close_ int fd = open(p, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        if (fd < 0)
                return -errno;
        return ab_write_all(fd, val, strlen(val));
}

static bool file_exists(const char *dir, const char *file)
{
        _cleanup_free_ char *p = xasprintf("%s/%s", dir, file);
        return faccessat(AT_FDCWD, p, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

static bool dir_exists(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static ab_code code_for(int e)
{
        switch (e) {
        case EPERM:
        case EACCES:
        case EROFS:
                return AB_E_PERMISSION;
        case ENOENT:
                return AB_E_UNSUPPORTED;
        case EINVAL:
        case ERANGE:
                return AB_E_INVALID;
        case EBUSY:
                return AB_E_CONFLICT;
        default:
                return AB_E_INTERNAL;
        }
}

static const char *hint_for(int e)
{
        switch (e) {
        case EPERM:
        case EACCES:
        case EROFS:
                return "agentbox needs root and a writable cgroupfs";
        case ENOENT:
                return "the controller is not enabled for this cgroup";
        case EINVAL:
        case ERANGE:
                return "the kernel rejected the value; check the limit";
        case EBUSY:
                return "current usage is above the new limit or the cgroup is in use";
        default:
                return "check the cgroup hierarchy";
        }
}

/* Writes a control file, turning a failure into an error naming the file. */
static int set_file(const char *dir, const char *file, const char *val, ab_err **err)
{
        int r = write_at(dir, file, val);
        if (r < 0)
                return ab_err_set(err, code_for(-r), -r,
                                  "cgroup: cannot write \"%s\" to %s/%s (%s)", val, dir, file,
                                  hint_for(-r));
        return 0;
}

/* mkdir that accepts an existing directory (create is idempotent). */
static int make_dir(const char *path, ab_err **err)
{
        if (mkdir(path, 0755) == 0 || (errno == EEXIST && dir_exists(path)))
                return 0;
        int e = errno;
        return ab_err_set(err, code_for(e), e, "cgroup: cannot create directory %s (%s)", path,
                          hint_for(e));
}

/* ---- layout ------------------------------------------------------------- */

/* Directories (relative to root) of the hierarchies the box lives in; v1
 * co-mounted controllers appear once. v2: one entry, NULL = root itself. */
static size_t hierarchies(const ab_cg *cg, const char *out[CG_MAX_HIERARCHIES])
{
        if (cg->version == AB_CG_V2) {
                out[0] = NULL;
                return 1;
        }
        const char *all[CG_MAX_HIERARCHIES] = {cg->v1_memory, cg->v1_pids, cg->v1_cpu,
                                               cg->v1_cpuacct, cg->v1_freezer};
        size_t n = 0;
        for (size_t i = 0; i < AB_ARRAY_LEN(all); i++) {
                bool dup = !all[i];
                for (size_t j = 0; j < n && !dup; j++)
                        dup = strcmp(out[j], all[i]) == 0;
                if (!dup)
                        out[n++] = all[i];
        }
        return n;
}

static char *hier_dir(const ab_cg *cg, const char *hier)
{
        return hier ? xasprintf("%s/%s", cg->root, hier) : xstrdup(cg->root);
}

static char *box_dir(const ab_cg *cg, const char *hier, const char *box_id)
{
        if (hier)
                return xasprintf("%s/%s/%s/%s", cg->root, hier, cg->parent, box_id);
        return xasprintf("%s/%s/%s", cg->root, cg->parent, box_id);
}

char *ab_cg_path(const ab_cg *cg, const char *controller, const char *box_id)
{
        const char *hier = NULL;
        if (cg->version == AB_CG_V1) {
                if (!controller)
                        return NULL;
                if (strcmp(controller, "memory") == 0)
                        hier = cg->v1_memory;
                else if (strcmp(controller, "pids") == 0)
                        hier = cg->v1_pids;
                else if (strcmp(controller, "cpu") == 0)
                        hier = cg->v1_cpu;
                else if (strcmp(controller, "cpuacct") == 0)
                        hier = cg->v1_cpuacct;
                else if (strcmp(controller, "freezer") == 0)
                        hier = cg->v1_freezer;
                if (!hier)
                        return NULL;
        }
        if (!box_id) {
                _cleanup_free_ char *h = hier_dir(cg, hier);
                return xasprintf("%s/%s", h, cg->parent);
        }
        return box_dir(cg, hier, box_id);
}

/* ---- detection ---------------------------------------------------------- */

/* A v1 hierarchy directory: has "tasks" (v1 only) or the controller's key file. */
static bool v1_usable(int rfd, const char *dir, const char *key)
{
        _cleanup_free_ char *tasks = xasprintf("%s/tasks", dir);
        _cleanup_free_ char *k = xasprintf("%s/%s", dir, key);
        return faccessat(rfd, tasks, F_OK, AT_SYMLINK_NOFOLLOW) == 0 ||
               faccessat(rfd, k, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

static bool is_dir_at(int rfd, const char *name)
{
        struct stat st;
        return fstatat(rfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/* Finds the hierarchy of a v1 controller under root: root/ctrl as a directory
 * or as a symlink to a sibling ("cpu" -> "cpu,cpuacct"), else a co-mounted
 * "a,ctrl,b" directory. Symlinks leaving root are ignored. NULL when none. */
static char *v1_find(int rfd, const char *ctrl, const char *key)
{
        struct stat st;
        if (fstatat(rfd, ctrl, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                if (S_ISDIR(st.st_mode) && v1_usable(rfd, ctrl, key))
                        return xstrdup(ctrl);
                if (S_ISLNK(st.st_mode)) {
                        char t[256];
                        ssize_t n = readlinkat(rfd, ctrl, t, sizeof(t) - 1);
                        if (n > 0) {
                                t[n] = '\0';
                                if (valid_name(t) && is_dir_at(rfd, t) && v1_usable(rfd, t, key))
                                        return xstrdup(t);
                        }
                }
        }
        int dfd = openat(rfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return NULL;
        _cleanup_dir_ DIR *d = fdopendir(dfd);
        if (!d) {
                close(dfd);
                return NULL;
        }
        for (struct dirent *de; (de = readdir(d));) {
                if (!strchr(de->d_name, ',') || !is_dir_at(rfd, de->d_name))
                        continue;
                _cleanup_free_ char *list = xstrdup(de->d_name);
                for (char *c = list; *c; c++)
                        if (*c == ',')
                                *c = ' ';
                if (has_word(list, ctrl) && v1_usable(rfd, de->d_name, key))
                        return xstrdup(de->d_name);
        }
        return NULL;
}

int ab_cg_open(const char *root, const char *parent, ab_cg *cg, ab_err **err)
{
        memset(cg, 0, sizeof(*cg));
        if (!root || !*root)
                return ab_err_set(err, AB_E_INVALID, 0, "cgroup: empty cgroup root");
        if (!valid_parent(parent))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "cgroup: parent \"%s\" must be a relative path without \".\", "
                                  "\"..\" or empty components",
                                  parent ? parent : "(null)");
        _cleanup_close_ int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0)
                return ab_err_set(err, AB_E_UNSUPPORTED, errno,
                                  "cgroup: cannot open the cgroup root %s; mount cgroupfs there or "
                                  "configure the right root",
                                  root);

        size_t rl = strlen(root);
        while (rl > 1 && root[rl - 1] == '/')
                rl--;

        _cleanup_free_ char *ctrls = NULL;
        _cleanup_free_ char *why_v2 = NULL;
        int r = ab_read_file(rfd, "cgroup.controllers", &ctrls, NULL);
        if (r == 0 && has_word(ctrls, "memory") && has_word(ctrls, "pids")) {
                cg->version = AB_CG_V2;
                cg->root = xstrndup(root, rl);
                cg->parent = xstrdup(parent);
                return 0;
        }
        if (r < 0) {
                why_v2 = xasprintf("%s/cgroup.controllers: %s", root, strerror(-r));
        } else {
                ctrls[strcspn(ctrls, "\n")] = '\0';
                why_v2 = xasprintf("%s/cgroup.controllers lists \"%s\", not both memory and pids",
                                   root, ctrls);
        }

        _cleanup_free_ char *mem = v1_find(rfd, "memory", "memory.limit_in_bytes");
        _cleanup_free_ char *pids = v1_find(rfd, "pids", "pids.max");
        if (!mem || !pids)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "cgroup: no usable cgroup layout under %s: not v2 (%s), not v1 "
                                  "(%s%s%s); mount cgroup2 with the memory and pids controllers "
                                  "enabled, or the v1 memory and pids hierarchies",
                                  root, why_v2, mem ? "" : "no memory/ hierarchy",
                                  !mem && !pids ? ", " : "", pids ? "" : "no pids/ hierarchy");
        cg->version = AB_CG_V1;
        cg->root = xstrndup(root, rl);
        cg->parent = xstrdup(parent);
        cg->v1_memory = steal_pointer(&mem);
        cg->v1_pids = steal_pointer(&pids);
        cg->v1_cpu = v1_find(rfd, "cpu", "cpu.cfs_quota_us");
        cg->v1_cpuacct = v1_find(rfd, "cpuacct", "cpuacct.usage");
        cg->v1_freezer = v1_find(rfd, "freezer", "freezer.state");
        return 0;
}

void ab_cg_free(ab_cg *cg)
{
        if (!cg)
                return;
        free(cg->root);
        free(cg->parent);
        free(cg->v1_memory);
        free(cg->v1_pids);
        free(cg->v1_cpu);
        free(cg->v1_cpuacct);
        free(cg->v1_freezer);
        memset(cg, 0, sizeof(*cg));
}

/* ---- create ------------------------------------------------------------- */

static int check_box_id(const char *box_id, ab_err **err)
{
        if (!valid_name(box_id))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "cgroup: box id \"%s\" is not a single path component",
                                  box_id ? box_id : "(null)");
        return 0;
}

/* v2: hands memory, pids and (when listed) cpu to the children of dir.
 * *cpu_on says whether cpu got enabled. */
static int v2_enable(const char *dir, bool need_cpu, bool *cpu_on, ab_err **err)
{
        _cleanup_free_ char *avail = NULL;
        int r = read_at(dir, "cgroup.controllers", &avail);
        if (r < 0)
                return ab_err_set(err, code_for(-r), -r,
                                  "cgroup: cannot read %s/cgroup.controllers", dir);
        avail[strcspn(avail, "\n")] = '\0';
        if (!has_word(avail, "memory") || !has_word(avail, "pids"))
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "cgroup: %s/cgroup.controllers lists \"%s\" without memory and "
                                  "pids; enable them in the cgroup.subtree_control above it",
                                  dir, avail);
        bool cpu = has_word(avail, "cpu");
        if (need_cpu && !cpu)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "cgroup: a CPU limit needs the cpu controller, which "
                                  "%s/cgroup.controllers does not list; enable it above or set "
                                  "cpus to 0",
                                  dir);
        r = write_at(dir, "cgroup.subtree_control", cpu ? "+memory +pids +cpu" : "+memory +pids");
        if (r < 0 && cpu && !need_cpu) {
                /* cpu can be refused (e.g. realtime threads); it is optional here. */
                cpu = false;
                r = write_at(dir, "cgroup.subtree_control", "+memory +pids");
        }
        if (r == -EBUSY)
                return ab_err_set(err, AB_E_CONFLICT, -r,
                                  "cgroup: cannot enable controllers in %s/cgroup.subtree_control: "
                                  "the cgroup has processes of its own; v2 only hands controllers "
                                  "to children of a cgroup without processes, so move them to a "
                                  "leaf cgroup",
                                  dir);
        if (r < 0)
                return ab_err_set(err, code_for(-r), -r,
                                  "cgroup: cannot enable controllers in %s/cgroup.subtree_control "
                                  "(%s)",
                                  dir, hint_for(-r));
        *cpu_on = cpu;
        return 0;
}

/* Creates root/[hier/]parent component by component; v2 enables controllers
 * on every level on the way down (enable != NULL). Returns the parent path. */
static int make_parent(const ab_cg *cg, const char *hier, bool need_cpu, bool *cpu_on, char **out,
                       ab_err **err)
{
        _cleanup_free_ char *dir = hier_dir(cg, hier);
        _cleanup_free_ char *copy = xstrdup(cg->parent);
        bool v2 = cg->version == AB_CG_V2;
        char *save = NULL;
        for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
                if (v2 && v2_enable(dir, need_cpu, cpu_on, err) < 0)
                        return -1;
                char *next = xasprintf("%s/%s", dir, c);
                free(dir);
                dir = next;
                if (make_dir(dir, err) < 0)
                        return -1;
        }
        if (v2 && v2_enable(dir, need_cpu, cpu_on, err) < 0)
                return -1;
        *out = steal_pointer(&dir);
        return 0;
}

static void fmt_u64_or(char *buf, size_t n, uint64_t v, const char *none)
{
        if (v)
                snprintf(buf, n, "%llu", (unsigned long long)v);
        else
                snprintf(buf, n, "%s", none);
}

/* v1 memory limit without swap: memory.memsw.limit_in_bytes (memory+swap)
 * must stay >= memory.limit_in_bytes after every single write, so raise memsw
 * first and lower memory first. */
static int v1_set_memory(const char *dir, uint64_t bytes, ab_err **err)
{
        char val[32];
        fmt_u64_or(val, sizeof(val), bytes, "-1");
        if (!file_exists(dir, "memory.memsw.limit_in_bytes"))
                return set_file(dir, "memory.limit_in_bytes", val, err);
        uint64_t cur = 0, want = bytes ? bytes : UINT64_MAX;
        if (read_u64(dir, "memory.limit_in_bytes", &cur) < 0)
                cur = 0;
        if (want > cur) {
                if (set_file(dir, "memory.memsw.limit_in_bytes", val, err) < 0)
                        return -1;
                return set_file(dir, "memory.limit_in_bytes", val, err);
        }
        if (set_file(dir, "memory.limit_in_bytes", val, err) < 0)
                return -1;
        return set_file(dir, "memory.memsw.limit_in_bytes", val, err);
}

static int create_v1(const ab_cg *cg, const char *box_id, const ab_cg_limits *l, uint64_t quota,
                     ab_err **err)
{
        if (l->cpus > 0 && !cg->v1_cpu)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "cgroup: a CPU limit needs the cpu controller, but %s has no v1 "
                                  "cpu hierarchy; mount it or set cpus to 0",
                                  cg->root);
        const char *h[CG_MAX_HIERARCHIES];
        size_t n = hierarchies(cg, h);
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *pdir = NULL;
                _cleanup_free_ char *bdir = box_dir(cg, h[i], box_id);
                if (make_parent(cg, h[i], false, NULL, &pdir, err) < 0 || make_dir(bdir, err) < 0)
                        return -1;
        }

        _cleanup_free_ char *mem = box_dir(cg, cg->v1_memory, box_id);
        if (v1_set_memory(mem, l->memory_bytes, err) < 0)
                return -1;

        char val[32];
        _cleanup_free_ char *pids = box_dir(cg, cg->v1_pids, box_id);
        fmt_u64_or(val, sizeof(val), l->pids, "max");
        if (set_file(pids, "pids.max", val, err) < 0)
                return -1;

        if (cg->v1_cpu) {
                _cleanup_free_ char *cpu = box_dir(cg, cg->v1_cpu, box_id);
                snprintf(val, sizeof(val), "%u", CG_CPU_PERIOD);
                if (set_file(cpu, "cpu.cfs_period_us", val, err) < 0)
                        return -1;
                fmt_u64_or(val, sizeof(val), quota, "-1");
                if (set_file(cpu, "cpu.cfs_quota_us", val, err) < 0)
                        return -1;
        }
        return 0;
}

static int create_v2(const ab_cg *cg, const char *box_id, const ab_cg_limits *l, uint64_t quota,
                     ab_err **err)
{
        bool cpu_on = false;
        _cleanup_free_ char *pdir = NULL;
        _cleanup_free_ char *dir = box_dir(cg, NULL, box_id);
        if (make_parent(cg, NULL, l->cpus > 0, &cpu_on, &pdir, err) < 0 || make_dir(dir, err) < 0)
                return -1;

        char val[48];
        fmt_u64_or(val, sizeof(val), l->memory_bytes, "max");
        if (set_file(dir, "memory.max", val, err) < 0)
                return -1;
        if (file_exists(dir, "memory.swap.max") && set_file(dir, "memory.swap.max", "0", err) < 0)
                return -1;
        fmt_u64_or(val, sizeof(val), l->pids, "max");
        if (set_file(dir, "pids.max", val, err) < 0)
                return -1;
        if (cpu_on) {
                if (quota)
                        snprintf(val, sizeof(val), "%llu %u", (unsigned long long)quota,
                                 CG_CPU_PERIOD);
                else
                        snprintf(val, sizeof(val), "max %u", CG_CPU_PERIOD);
                if (set_file(dir, "cpu.max", val, err) < 0)
                        return -1;
        }
        return 0;
}

int ab_cg_create(const ab_cg *cg, const char *box_id, const ab_cg_limits *l, ab_err **err)
{
        if (check_box_id(box_id, err) < 0)
                return -1;
        if (!isfinite(l->cpus) || l->cpus < 0 || l->cpus > CG_CPUS_MAX)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "cgroup: cpus must be between 0 (no limit) and %.0f, got %g",
                                  CG_CPUS_MAX, l->cpus);
        uint64_t quota = 0;
        if (l->cpus > 0) {
                quota = (uint64_t)(l->cpus * CG_CPU_PERIOD + 0.5);
                if (quota < CG_CPU_QUOTA_MIN)
                        quota = CG_CPU_QUOTA_MIN;
        }
        int r = cg->version == AB_CG_V2 ? create_v2(cg, box_id, l, quota, err)
                                        : create_v1(cg, box_id, l, quota, err);
        return r < 0 ? ab_err_wrap(err, "creating the cgroup of box %s", box_id) : 0;
}

/* ---- attach and stats --------------------------------------------------- */

int ab_cg_attach(const ab_cg *cg, const char *box_id, pid_t pid, ab_err **err)
{
        if (check_box_id(box_id, err) < 0)
                return -1;
        if (pid <= 0)
                return ab_err_set(err, AB_E_INVALID, 0, "cgroup: cannot attach pid %d", (int)pid);
        char val[24];
        snprintf(val, sizeof(val), "%d", (int)pid);
        const char *h[CG_MAX_HIERARCHIES];
        size_t n = hierarchies(cg, h);
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *dir = box_dir(cg, h[i], box_id);
                int r = write_at(dir, "cgroup.procs", val);
                if (r == -ESRCH)
                        return ab_err_set(err, AB_E_NOT_FOUND, -r,
                                          "cgroup: process %d exited before it could join %s",
                                          (int)pid, dir);
                if (r == -ENOENT)
                        return ab_err_set(err, AB_E_NOT_FOUND, -r,
                                          "cgroup: %s/cgroup.procs is missing; create the box's "
                                          "cgroup first",
                                          dir);
                if (r < 0)
                        return ab_err_set(
                            err, code_for(-r), -r,
                            "cgroup: cannot move process %d into %s/cgroup.procs (%s)", (int)pid,
                            dir, hint_for(-r));
        }
        return 0;
}

static int stat_required(int r, const char *dir, const char *file, const char *box_id, ab_err **err)
{
        if (r == -ENOENT && !dir_exists(dir))
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "cgroup: box %s has no cgroup at %s",
                                  box_id, dir);
        if (r == -EINVAL)
                return ab_err_set(err, AB_E_INTERNAL, 0, "cgroup: unexpected content in %s/%s", dir,
                                  file);
        return ab_err_set(err, code_for(-r), -r, "cgroup: cannot read %s/%s", dir, file);
}

int ab_cg_stats_read(const ab_cg *cg, const char *box_id, ab_cg_stats *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (check_box_id(box_id, err) < 0)
                return -1;
        uint64_t v = 0;
        int r;
        if (cg->version == AB_CG_V2) {
                _cleanup_free_ char *dir = box_dir(cg, NULL, box_id);
                if ((r = read_u64(dir, "memory.current", &out->memory_bytes)) < 0)
                        return stat_required(r, dir, "memory.current", box_id, err);
                if ((r = read_u64(dir, "memory.max", &v)) < 0)
                        return stat_required(r, dir, "memory.max", box_id, err);
                out->memory_limit = v == UINT64_MAX ? 0 : v;
                if ((r = read_u64(dir, "pids.current", &out->pids)) < 0)
                        return stat_required(r, dir, "pids.current", box_id, err);
                if (read_keyed(dir, "cpu.stat", "usage_usec", &v) == 0)
                        out->cpu_usage_ns = v * 1000u;
                if (read_keyed(dir, "memory.events", "oom_kill", &v) == 0)
                        out->oom_kills = v;
                return 0;
        }

        _cleanup_free_ char *mem = box_dir(cg, cg->v1_memory, box_id);
        _cleanup_free_ char *pids = box_dir(cg, cg->v1_pids, box_id);
        if ((r = read_u64(mem, "memory.usage_in_bytes", &out->memory_bytes)) < 0)
                return stat_required(r, mem, "memory.usage_in_bytes", box_id, err);
        if ((r = read_u64(mem, "memory.limit_in_bytes", &v)) < 0)
                return stat_required(r, mem, "memory.limit_in_bytes", box_id, err);
        out->memory_limit = v >= CG_V1_UNLIMITED ? 0 : v;
        if ((r = read_u64(pids, "pids.current", &out->pids)) < 0)
                return stat_required(r, pids, "pids.current", box_id, err);
        if (cg->v1_cpuacct) {
                _cleanup_free_ char *acct = box_dir(cg, cg->v1_cpuacct, box_id);
                if (read_u64(acct, "cpuacct.usage", &v) == 0)
                        out->cpu_usage_ns = v;
        }
        if (read_keyed(mem, "memory.oom_control", "oom_kill", &v) == 0)
                out->oom_kills = v;
        return 0;
}

/* ---- kill --------------------------------------------------------------- */

typedef struct pidv {
        pid_t *v;
        size_t n, cap;
} pidv;

static void pidv_push(pidv *p, pid_t pid)
{
        if (p->n == p->cap) {
                p->cap = p->cap ? xmul(p->cap, 2) : 64;
                p->v = xrealloc(p->v, xmul(p->cap, sizeof(pid_t)));
        }
        p->v[p->n++] = pid;
}

static int pid_cmp(const void *a, const void *b)
{
        pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
        return (x > y) - (x < y);
}

/* Appends the pids in dfd/cgroup.procs and in every cgroup below it (a box
 * may have made sub-cgroups; v1 lists each cgroup's own processes only). */
static int collect_at(int dfd, int depth, pidv *out)
{
        _cleanup_free_ char *buf = NULL;
        int r = ab_read_file(dfd, "cgroup.procs", &buf, NULL);
        if (r < 0)
                return r;
        for (char *p = buf, *end; *p; p = end) {
                long v = strtol(p, &end, 10);
                if (end == p)
                        break;
                if (v > 0 && v <= INT32_MAX)
                        pidv_push(out, (pid_t)v);
        }
        if (depth >= CG_MAX_DEPTH)
                return 0;
        int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        _cleanup_dir_ DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -errno;
        }
        for (struct dirent *de; (de = readdir(d));) {
                if (de->d_type != DT_DIR || !valid_name(de->d_name))
                        continue;
                _cleanup_close_ int sub =
                    openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub >= 0 && (r = collect_at(sub, depth + 1, out)) < 0 && r != -ENOENT)
                        return r;
        }
        return 0;
}

/* Every pid in the box's cgroups (all v1 hierarchies), sorted and unique. */
static int collect(const ab_cg *cg, const char *box_id, pidv *out)
{
        const char *h[CG_MAX_HIERARCHIES];
        size_t n = hierarchies(cg, h);
        out->n = 0;
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *dir = box_dir(cg, h[i], box_id);
                _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0 && errno == ENOENT)
                        continue;
                if (fd < 0)
                        return -errno;
                int r = collect_at(fd, 0, out);
                if (r < 0 && r != -ENOENT)
                        return r;
        }
        if (out->n < 2)
                return 0;
        /* v1 lists each process once per hierarchy. */
        qsort(out->v, out->n, sizeof(pid_t), pid_cmp);
        size_t u = 1;
        for (size_t i = 1; i < out->n; i++)
                if (out->v[i] != out->v[u - 1])
                        out->v[u++] = out->v[i];
        out->n = u;
        return 0;
}

/* SIGKILLs the processes in the box. A pid read from cgroup.procs may exit
 * and be reused before kill(), so each is pinned with a pidfd first and only
 * signalled if a second read still lists it: whoever held the number at the
 * pidfd_open was then in the box. Without pidfds (old kernel), plain kill(). */
static int kill_round(const ab_cg *cg, const char *box_id, size_t *left)
{
        pidv a = {0}, b = {0};
        int r = collect(cg, box_id, &a);
        *left = a.n;
        if (r < 0 || a.n == 0)
                goto out;
        int *fds = xcalloc(a.n, sizeof(int));
        bool nopidfd = false;
        for (size_t i = 0; i < a.n; i++) {
                fds[i] = nopidfd ? -1 : (int)syscall(SYS_pidfd_open, a.v[i], 0);
                if (fds[i] < 0 && errno == ENOSYS)
                        nopidfd = true;
        }
        r = collect(cg, box_id, &b);
        for (size_t i = 0; r == 0 && i < a.n; i++) {
                if (b.n == 0 || !bsearch(&a.v[i], b.v, b.n, sizeof(pid_t), pid_cmp))
                        continue;
                if (fds[i] >= 0)
                        syscall(SYS_pidfd_send_signal, fds[i], SIGKILL, NULL, 0);
                else if (nopidfd)
                        kill(a.v[i], SIGKILL);
        }
        for (size_t i = 0; i < a.n; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
        free(fds);
out:
        free(a.v);
        free(b.v);
        return r;
}

/* ---- freezer ------------------------------------------------------------ */

/* The directory holding the box's freezer files; NULL on v1 without a
 * freezer hierarchy. */
static char *freezer_dir(const ab_cg *cg, const char *box_id)
{
        if (cg->version == AB_CG_V2)
                return box_dir(cg, NULL, box_id);
        return cg->v1_freezer ? box_dir(cg, cg->v1_freezer, box_id) : NULL;
}

/* Asks the kernel to freeze (on) or thaw the cgroup at dir. 0 or -errno. */
static int freezer_write(const ab_cg *cg, const char *dir, bool on)
{
        if (cg->version == AB_CG_V2)
                return write_at(dir, "cgroup.freeze", on ? "1" : "0");
        return write_at(dir, "freezer.state", on ? "FROZEN" : "THAWED");
}

/* v1: freezer.state is THAWED, FREEZING or FROZEN (reading it is what moves
 * FREEZING on to FROZEN once every task has stopped). v2: cgroup.freeze is
 * what was asked, "frozen" in cgroup.events what the kernel reached (also
 * when an ancestor is frozen). 0, -EINVAL on unknown content, or -errno. */
static int freezer_read(const ab_cg *cg, const char *dir, ab_cg_freezer *out)
{
        _cleanup_free_ char *buf = NULL;
        int r;
        if (cg->version == AB_CG_V2) {
                uint64_t frozen = 0, asked = 0;
                if ((r = read_keyed(dir, "cgroup.events", "frozen", &frozen)) < 0 ||
                    (r = read_u64(dir, "cgroup.freeze", &asked)) < 0)
                        return r;
                *out = frozen ? AB_CG_FROZEN : asked ? AB_CG_FREEZING : AB_CG_THAWED;
                return 0;
        }
        if ((r = read_at(dir, "freezer.state", &buf)) < 0)
                return r;
        buf[strcspn(buf, "\n")] = '\0';
        if (strcmp(buf, "THAWED") == 0)
                *out = AB_CG_THAWED;
        else if (strcmp(buf, "FREEZING") == 0)
                *out = AB_CG_FREEZING;
        else if (strcmp(buf, "FROZEN") == 0)
                *out = AB_CG_FROZEN;
        else
                return -EINVAL;
        return 0;
}

/* Polls until the cgroup at dir is frozen or ms have passed. Tasks usually
 * stop within microseconds, so the first waits are short and grow.
 *
 * v1 asks each task to freeze once, when FROZEN is written. A task that was
 * running then and went on into a freezable sleep that a signal does not
 * end - a shell's vfork() waiting for its child, which froze first - is never
 * asked again, and the cgroup stays FREEZING until thawed. Writing FROZEN
 * again asks again (and freezes it at once), so every round does. v2 counts
 * such a sleep as frozen. */
static int freezer_wait(const ab_cg *cg, const char *dir, unsigned ms, ab_cg_freezer *st)
{
        uint64_t deadline = ab_now_ns() + (uint64_t)ms * 1000000u;
        long wait_ns = 20000;
        for (;;) {
                int r = freezer_read(cg, dir, st);
                if (r < 0 || *st == AB_CG_FROZEN || ab_now_ns() >= deadline)
                        return r;
                if (cg->version == AB_CG_V1 && *st == AB_CG_FREEZING &&
                    (r = freezer_write(cg, dir, true)) < 0)
                        return r;
                struct timespec ts = {.tv_sec = 0, .tv_nsec = wait_ns};
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
                if (wait_ns < CG_POLL_NS)
                        wait_ns *= 2;
        }
}

/* Freezes the box (best effort, bounded) so its processes cannot fork or
 * exit while we read and signal them. Returns whether a freezer was used. */
static bool freeze(const ab_cg *cg, const char *box_id, bool on)
{
        _cleanup_free_ char *dir = freezer_dir(cg, box_id);
        if (!dir || freezer_write(cg, dir, on) < 0)
                return false;
        ab_cg_freezer st;
        if (on)
                freezer_wait(cg, dir, CG_FREEZE_MS, &st);
        return true;
}

/* The box's freezer directory, or an error saying why there is none. */
static char *freezer_need(const ab_cg *cg, const char *box_id, ab_err **err)
{
        if (check_box_id(box_id, err) < 0)
                return NULL;
        _cleanup_free_ char *dir = freezer_dir(cg, box_id);
        if (!dir) {
                ab_err_set(err, AB_E_UNSUPPORTED, 0,
                           "cgroup: pausing needs the freezer controller, but %s has no v1 "
                           "freezer hierarchy; mount it (mount -t cgroup -o freezer freezer "
                           "%s/freezer)",
                           cg->root, cg->root);
                return NULL;
        }
        if (!dir_exists(dir)) {
                ab_err_set(err, AB_E_NOT_FOUND, 0, "cgroup: box %s has no cgroup at %s", box_id,
                           dir);
                return NULL;
        }
        return steal_pointer(&dir);
}

static int freezer_error(int r, const char *dir, const ab_cg *cg, const char *box_id, ab_err **err)
{
        const char *file = cg->version == AB_CG_V2 ? "cgroup.freeze" : "freezer.state";
        if (r == -ENOENT && !dir_exists(dir))
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "cgroup: box %s has no cgroup at %s",
                                  box_id, dir);
        if (r == -ENOENT)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "cgroup: %s has no freezer files (cgroup v2 has cgroup.freeze "
                                  "since Linux 5.2)",
                                  dir);
        if (r == -EINVAL)
                return ab_err_set(err, AB_E_INTERNAL, 0,
                                  "cgroup: unexpected content in the freezer files of %s", dir);
        return ab_err_set(err, code_for(-r), -r, "cgroup: cannot use %s/%s (%s)", dir, file,
                          hint_for(-r));
}

int ab_cg_freezer_state(const ab_cg *cg, const char *box_id, ab_cg_freezer *out, ab_err **err)
{
        _cleanup_free_ char *dir = freezer_need(cg, box_id, err);
        if (!dir)
                return -1;
        int r = freezer_read(cg, dir, out);
        return r < 0 ? freezer_error(r, dir, cg, box_id, err) : 0;
}

int ab_cg_freeze(const ab_cg *cg, const char *box_id, unsigned timeout_ms, ab_err **err)
{
        _cleanup_free_ char *dir = freezer_need(cg, box_id, err);
        if (!dir)
                return -1;
        ab_cg_freezer st = AB_CG_THAWED;
        int r = freezer_write(cg, dir, true);
        if (r == 0)
                r = freezer_wait(cg, dir, timeout_ms, &st);
        if (r == 0 && st == AB_CG_FROZEN)
                return 0;
        /* All or nothing: a box half frozen would hang whoever uses it. */
        freezer_write(cg, dir, false);
        if (r < 0)
                return freezer_error(r, dir, cg, box_id, err);
        return ab_err_set(err, AB_E_TIMEOUT, 0,
                          "cgroup: the processes of box %s did not all stop within %u ms (one "
                          "may be in uninterruptible sleep, e.g. on a slow disk); the box was "
                          "left running, retry later",
                          box_id, timeout_ms);
}

int ab_cg_freeze_anchor(const ab_cg *cg)
{
        if (cg->version != AB_CG_V1 || !cg->v1_freezer)
                return 0;
        _cleanup_free_ char *dir =
            xasprintf("%s/%s/%s", cg->root, cg->v1_freezer, AB_CG_FREEZE_ANCHOR);
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        ab_cg_freezer st;
        if (freezer_read(cg, dir, &st) == 0 && st == AB_CG_FROZEN)
                return 0;
        return freezer_write(cg, dir, true);
}

int ab_cg_thaw(const ab_cg *cg, const char *box_id, ab_err **err)
{
        _cleanup_free_ char *dir = freezer_need(cg, box_id, err);
        if (!dir)
                return -1;
        int r = freezer_write(cg, dir, false);
        return r < 0 ? freezer_error(r, dir, cg, box_id, err) : 0;
}

/* v2: cgroup.events "populated" covers the whole sub-tree. */
static int populated(const ab_cg *cg, const char *box_id, bool *out)
{
        if (cg->version == AB_CG_V2) {
                _cleanup_free_ char *dir = box_dir(cg, NULL, box_id);
                uint64_t v = 0;
                if (read_keyed(dir, "cgroup.events", "populated", &v) == 0) {
                        *out = v != 0;
                        return 0;
                }
        }
        pidv p = {0};
        int r = collect(cg, box_id, &p);
        free(p.v);
        *out = p.n > 0;
        return r;
}

static bool box_exists(const ab_cg *cg, const char *box_id)
{
        const char *h[CG_MAX_HIERARCHIES];
        size_t n = hierarchies(cg, h);
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *dir = box_dir(cg, h[i], box_id);
                if (dir_exists(dir))
                        return true;
        }
        return false;
}

int ab_cg_kill_all(const ab_cg *cg, const char *box_id, ab_err **err)
{
        if (check_box_id(box_id, err) < 0)
                return -1;
        if (!box_exists(cg, box_id))
                return 0;
        uint64_t deadline = ab_now_ms() + CG_KILL_MS;
        _cleanup_free_ char *dir =
            box_dir(cg, cg->version == AB_CG_V2 ? NULL : cg->v1_pids, box_id);
        bool busy = true;
        int r;

        if (cg->version == AB_CG_V2 && (r = write_at(dir, "cgroup.kill", "1")) != -ENOENT) {
                if (r < 0)
                        return ab_err_set(err, code_for(-r), -r, "cgroup: cannot write 1 to %s/%s",
                                          dir, "cgroup.kill");
                while ((r = populated(cg, box_id, &busy)) == 0 && busy && ab_now_ms() < deadline)
                        sleep_poll();
                /* A paused box's processes die frozen; the box ends thawed. */
                freeze(cg, box_id, false);
        } else {
                for (;;) {
                        size_t left = 0;
                        bool frozen = freeze(cg, box_id, true);
                        r = kill_round(cg, box_id, &left);
                        if (frozen)
                                freeze(cg, box_id, false);
                        busy = left > 0;
                        if (r < 0 || !busy || ab_now_ms() >= deadline)
                                break;
                        sleep_poll();
                }
        }
        if (r < 0)
                return ab_err_set(err, code_for(-r), -r,
                                  "cgroup: cannot list the processes of box %s under %s", box_id,
                                  dir);
        if (busy)
                return ab_err_set(err, AB_E_TIMEOUT, 0,
                                  "cgroup: processes of box %s are still in %s after %u ms "
                                  "(stuck in uninterruptible sleep?); retry later",
                                  box_id, dir, CG_KILL_MS);
        return 0;
}

/* ---- destroy ------------------------------------------------------------ */

/* rmdir of pfd/name after the sub-cgroups below it, deepest first. */
static int rmdir_tree(int pfd, const char *name, int depth)
{
        _cleanup_close_ int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (depth < CG_MAX_DEPTH) {
                int dfd = dup(fd);
                if (dfd < 0)
                        return -errno;
                _cleanup_dir_ DIR *d = fdopendir(dfd);
                if (!d) {
                        close(dfd);
                        return -errno;
                }
                for (struct dirent *de; (de = readdir(d));) {
                        if (de->d_type != DT_DIR || !valid_name(de->d_name))
                                continue;
                        int r = rmdir_tree(fd, de->d_name, depth + 1);
                        if (r < 0 && r != -ENOENT)
                                return r;
                }
        }
        return unlinkat(pfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

int ab_cg_destroy(const ab_cg *cg, const char *box_id, ab_err **err)
{
        if (check_box_id(box_id, err) < 0)
                return -1;
        const char *h[CG_MAX_HIERARCHIES];
        size_t n = hierarchies(cg, h);
        bool killed = false;
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *hd = hier_dir(cg, h[i]);
                _cleanup_free_ char *pdir = xasprintf("%s/%s", hd, cg->parent);
                _cleanup_close_ int pfd = open(pdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (pfd < 0 && errno == ENOENT)
                        continue;
                if (pfd < 0)
                        return ab_err_set(err, code_for(errno), errno, "cgroup: cannot open %s",
                                          pdir);
                uint64_t deadline = ab_now_ms() + CG_RMDIR_MS;
                int r;
                /* EBUSY: processes still inside, or killed and not yet gone. */
                while ((r = rmdir_tree(pfd, box_id, 0)) == -EBUSY && ab_now_ms() < deadline) {
                        if (!killed) {
                                killed = true;
                                if (ab_cg_kill_all(cg, box_id, err) < 0)
                                        return ab_err_wrap(err, "destroying the cgroup of box %s",
                                                           box_id);
                                deadline = ab_now_ms() + CG_RMDIR_MS;
                                continue;
                        }
                        sleep_poll();
                }
                if (r < 0 && r != -ENOENT)
                        return ab_err_set(err, code_for(-r), -r, "cgroup: cannot remove %s/%s (%s)",
                                          pdir, box_id,
                                          r == -EBUSY ? "processes are still inside; kill them "
                                                        "and retry"
                                                      : hint_for(-r));
        }
        return 0;
}

/* ---- sub-cgroups -------------------------------------------------------- */

/* The layout seen from the box's cgroup: parent = parent/box_id, so the box
 * functions above work on a sub-cgroup as on a box. Shares cg's strings but
 * parent: release with sub_cg_clear, never ab_cg_free. Kill-all then works
 * without a freezer: pinned pids are killed round after round until none is
 * left (the pids limit bounds a fork race). */
static int sub_cg(const ab_cg *cg, const char *box_id, const char *sub, ab_cg *out, ab_err **err)
{
        if (check_box_id(box_id, err) < 0 || check_box_id(sub, err) < 0)
                return -1;
        *out = *cg;
        out->parent = xasprintf("%s/%s", cg->parent, box_id);
        /* v1: memory and pids only; the box's cpu, cpuacct and freezer
         * cgroups cover the sub-cgroup's processes (fewer mkdirs per run). */
        out->v1_cpu = out->v1_cpuacct = out->v1_freezer = NULL;
        return 0;
}

static void sub_cg_clear(ab_cg *s)
{
        free(s->parent);
        s->parent = NULL;
}

/* v2: a cgroup that hands memory and pids to its children can hold no
 * processes itself, so the box's own processes move into its leaf
 * AB_CG_BOX_LEAF first (repeated while a fork adds one to the box dir). */
static int v2_box_leaf(const ab_cg *cg, const char *box_id, ab_err **err)
{
        _cleanup_free_ char *dir = box_dir(cg, NULL, box_id);
        _cleanup_free_ char *ctl = NULL;
        if (read_at(dir, "cgroup.subtree_control", &ctl) == 0 && has_word(ctl, "memory") &&
            has_word(ctl, "pids"))
                return 0;
        _cleanup_free_ char *leaf = xasprintf("%s/%s", dir, AB_CG_BOX_LEAF);
        if (make_dir(leaf, err) < 0)
                return -1;
        for (int round = 0;; round++) {
                _cleanup_free_ char *procs = NULL;
                int r = read_at(dir, "cgroup.procs", &procs);
                if (r < 0)
                        return ab_err_set(err, code_for(-r), -r, "cgroup: cannot read %s/%s", dir,
                                          "cgroup.procs");
                bool any = false;
                for (char *p = procs, *end; *p; p = end) {
                        long v = strtol(p, &end, 10);
                        if (end == p)
                                break;
                        char val[24];
                        snprintf(val, sizeof(val), "%ld", v);
                        any = true;
                        r = write_at(leaf, "cgroup.procs", val);
                        if (r < 0 && r != -ESRCH)
                                return ab_err_set(err, code_for(-r), -r,
                                                  "cgroup: cannot move process %ld of box %s into "
                                                  "%s (%s)",
                                                  v, box_id, leaf, hint_for(-r));
                }
                if (!any)
                        break;
                if (round >= 20)
                        return ab_err_set(err, AB_E_CONFLICT, 0,
                                          "cgroup: %s keeps getting processes; cannot move them "
                                          "into its leaf %s",
                                          dir, AB_CG_BOX_LEAF);
        }
        bool cpu_on = false;
        return v2_enable(dir, false, &cpu_on, err);
}

int ab_cg_sub_create(const ab_cg *cg, const char *box_id, const char *sub, const ab_cg_limits *l,
                     ab_err **err)
{
        ab_cg s;
        if (sub_cg(cg, box_id, sub, &s, err) < 0)
                return -1;
        ab_cg_limits sl = {.memory_bytes = l->memory_bytes, .pids = l->pids};
        int r = cg->version == AB_CG_V2 ? v2_box_leaf(cg, box_id, err) : 0;
        if (r == 0)
                r = ab_cg_create(&s, sub, &sl, err);
        sub_cg_clear(&s);
        return r < 0 ? ab_err_wrap(err, "box %s", box_id) : 0;
}

int ab_cg_sub_attach(const ab_cg *cg, const char *box_id, const char *sub, pid_t pid, ab_err **err)
{
        ab_cg s;
        if (sub_cg(cg, box_id, sub, &s, err) < 0)
                return -1;
        int r = ab_cg_attach(&s, sub, pid, err);
        sub_cg_clear(&s);
        return r;
}

int ab_cg_sub_set_memory(const ab_cg *cg, const char *box_id, const char *sub, uint64_t bytes,
                         ab_err **err)
{
        ab_cg s;
        if (sub_cg(cg, box_id, sub, &s, err) < 0)
                return -1;
        _cleanup_free_ char *dir = box_dir(&s, cg->version == AB_CG_V2 ? NULL : cg->v1_memory, sub);
        sub_cg_clear(&s);
        if (cg->version == AB_CG_V1)
                return v1_set_memory(dir, bytes, err);
        char val[32];
        fmt_u64_or(val, sizeof(val), bytes, "max");
        return set_file(dir, "memory.max", val, err);
}

int ab_cg_sub_stats(const ab_cg *cg, const char *box_id, const char *sub, ab_cg_stats *out,
                    ab_err **err)
{
        ab_cg s;
        if (sub_cg(cg, box_id, sub, &s, err) < 0)
                return -1;
        int r = ab_cg_stats_read(&s, sub, out, err);
        sub_cg_clear(&s);
        return r;
}

int ab_cg_sub_kill(const ab_cg *cg, const char *box_id, const char *sub, ab_err **err)
{
        ab_cg s;
        if (sub_cg(cg, box_id, sub, &s, err) < 0)
                return -1;
        int r = ab_cg_kill_all(&s, sub, err);
        sub_cg_clear(&s);
        return r;
}

int ab_cg_sub_destroy(const ab_cg *cg, const char *box_id, const char *sub, ab_err **err)
{
        ab_cg s;
        if (sub_cg(cg, box_id, sub, &s, err) < 0)
                return -1;
        int r = ab_cg_kill_all(&s, sub, err);
        if (r == 0)
                r = ab_cg_destroy(&s, sub, err);
        sub_cg_clear(&s);
        return r;
}
