/* exec.c - EXEC: run a command inside the box and stream its output.
 *
 * Commands see the environment a login shell (`bash -lc`) would give them,
 * without paying for one on every exec: the login environment is captured
 * once and cached (see "the login environment" below), commands run as
 * `bash --noprofile -lc COMMAND` with it, and a command that is one plain
 * simple command is exec'd directly, as bash itself would (see "direct exec").
 * An ARGV request runs its program with no shell and no profiles at all
 * (see exec_argv).
 *
 * Images differ: without /bin/bash, COMMANDs run as `/bin/sh -lc COMMAND`
 * (busybox sh and dash take -l too), without the cache and the direct path,
 * which are bash's; without /bin/sh either, only ARGV requests can run. A
 * request's USER (user.c) runs as `SHELL -lc` too: the cached environment is
 * root's.
 *
 * The session (our caller) is a child subreaper, so every process the
 * command starts stays its descendant until the session exits. One poll loop
 * moves stdin frames into the stdin pipe and pipe output into DATA frames,
 * with back-pressure both ways (the socket is never written with a blocking
 * call, so a timeout fires even when the client stops reading).
 *
 * When the main process exits, what is already in the pipes is drained and
 * EXIT is sent at once; background processes keep the pipes open, so we keep
 * reading and discarding until EOF and then exit, leaving them to init. */
#include "base/buf.h"
#include "init/init_int.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#define EXEC_HWM  (512 * 1024) /* stop reading pipes while this much waits for the client */
#define DRAIN_MAX (4u << 20)   /* most bytes drained after the main process exited */

#define BASE_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

typedef struct ostream {
        int fd; /* read end of the pipe, -1 after EOF */
        uint64_t total, kept;
        bool marked; /* the truncation marker was sent */
} ostream;

typedef struct exec_state {
        init_conn *c;
        abp_buf out;  /* frames waiting for the client */
        bool gone;    /* the client went away */
        bool bad;     /* ... or broke the protocol */
        bool discard; /* EXIT is queued: read pipes, send nothing more */
        pid_t pid;    /* the main process */
        bool exited;
        int status;
        uint64_t start_ms, end_ms;
        ostream o[3]; /* [1] stdout, [2] stderr */
        uint64_t cap;
        bool truncated;
        int in_fd; /* write end of the stdin pipe, or -1 */
        uint8_t *in_buf;
        size_t in_len, in_off;
        bool in_stream, in_eof;
} exec_state;

/* ---- killing a process tree ---- */

typedef struct proc {
        pid_t pid, ppid;
        bool mark;
} proc;

static int proc_cmp(const void *a, const void *b)
{
        pid_t x = ((const proc *)a)->pid, y = ((const proc *)b)->pid;
        return (x > y) - (x < y);
}

static int read_ppid(int procfd, const char *pid, pid_t *ppid)
{
        char path[64], buf[512];
        snprintf(path, sizeof(path), "%s/stat", pid);
        _cleanup_close_ int fd = openat(procfd, path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t n = ab_read_full(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return -EIO;
        buf[n] = 0;
        /* "pid (comm) S ppid ...": comm may hold anything, so find the last ')'. */
        char *p = strrchr(buf, ')');
        int v;
        if (!p || sscanf(p + 1, " %*c %d", &v) != 1)
                return -EIO;
        *ppid = v;
        return 0;
}

/* Calls fn on every descendant of `self` listed in /proc; returns how many. */
static size_t walk_descendants(pid_t self, void (*fn)(pid_t pid, void *ud), void *ud)
{
        DIR *d = opendir("/proc");
        if (!d)
                return 0;
        proc *v = NULL;
        size_t n = 0, cap = 0, killed = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
                char *end;
                long pid = strtol(e->d_name, &end, 10);
                pid_t ppid;
                if (*end || pid <= 0 || pid == self)
                        continue;
                if (read_ppid(dirfd(d), e->d_name, &ppid) < 0)
                        continue;
                if (n == cap) {
                        cap = cap ? cap * 2 : 256;
                        v = xrealloc(v, xmul(cap, sizeof(*v)));
                }
                v[n++] = (proc){.pid = (pid_t)pid, .ppid = ppid};
        }
        closedir(d);
        if (n > 0)
                qsort(v, n, sizeof(*v), proc_cmp);
        for (bool changed = true; changed;) {
                changed = false;
                for (size_t i = 0; i < n; i++) {
                        if (v[i].mark)
                                continue;
                        proc key = {.pid = v[i].ppid};
                        proc *parent =
                            v[i].ppid == self ? NULL : bsearch(&key, v, n, sizeof(*v), proc_cmp);
                        if (v[i].ppid == self || (parent && parent->mark)) {
                                v[i].mark = true;
                                changed = true;
                                fn(v[i].pid, ud);
                                killed++;
                        }
                }
        }
        free(v);
        return killed;
}

static void kill_one(pid_t pid, void *ud)
{
        (void)ud;
        kill(pid, SIGKILL);
}

/* SIGKILLs every descendant of `self` listed in /proc; returns how many. */
static size_t kill_descendants(pid_t self)
{
        return walk_descendants(self, kill_one, NULL);
}

static void limit_one(pid_t pid, void *ud)
{
        struct rlimit *rl = ud;
        prlimit(pid, RLIMIT_NPROC, rl, NULL);
}

/* What an exec leaves running gets a lower RLIMIT_NPROC than a running exec,
 * so leftovers (a server, or a runaway loop) can never take the room the
 * next exec needs. Lowering another process's limit needs no privilege. */
static void limit_leftovers(void)
{
        if (init_max_procs <= 1)
                return;
        rlim_t low = init_max_procs > 32 ? init_max_procs - 16 : init_max_procs / 2;
        struct rlimit rl = {low ? low : 1, low ? low : 1};
        walk_descendants(getpid(), limit_one, &rl);
}

void init_kill_tree(pid_t pgrp, void (*reaped)(pid_t pid, int status, void *ud), void *ud)
{
        pid_t self = getpid();
        /* Bounded (~10 s): a tree that keeps forking is killed a little more on every round. */
        for (int round = 0; round < 2000; round++) {
                if (pgrp > 0)
                        kill(-pgrp, SIGKILL);
                size_t n = kill_descendants(self);
                int status;
                pid_t p;
                while ((p = waitpid(-1, &status, WNOHANG)) > 0)
                        if (reaped)
                                reaped(p, status, ud);
                if (n == 0 && p < 0 && errno == ECHILD)
                        return;
                struct timespec ts = {0, round < 10 ? 1000000 : 5000000};
                nanosleep(&ts, NULL);
        }
}

/* ---- the exec ---- */

static void on_reaped(pid_t pid, int status, void *ud)
{
        exec_state *st = ud;
        if (pid == st->pid && !st->exited) {
                st->exited = true;
                st->status = status;
                st->end_ms = ab_now_ms();
        }
}

static void reap(exec_state *st)
{
        int status;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0)
                on_reaped(p, status, st);
}

/* ---- environments ---- */

/* NAME=VALUE with a non-empty NAME. */
static bool env_entry_ok(const char *e)
{
        const char *eq = strchr(e, '=');
        return eq && eq != e;
}

/* The value of NAME in a NULL-terminated env, or NULL. */
static const char *env_get(char *const *env, const char *name)
{
        size_t n = strlen(name);
        for (; *env; env++)
                if (strncmp(*env, name, n) == 0 && (*env)[n] == '=')
                        return *env + n + 1;
        return NULL;
}

/* Copies of base[0..n) then of the request's entries (checked by
 * env_entry_ok), the request winning, with `room` NULL slots left before the
 * terminating NULL. *count gets the number of entries. */
static char **merge_env(const char *const *base, size_t n, const abp_exec_req *req, size_t room,
                        size_t *count)
{
        char **env = xcalloc(xadd(xadd(n, req->n_env), xadd(room, 1)), sizeof(*env));
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                env[k++] = xstrdup(base[i]);
        for (size_t i = 0; i < req->n_env; i++) {
                const char *e = req->env[i];
                size_t klen = (size_t)(strchr(e, '=') - e) + 1;
                size_t j;
                for (j = 0; j < k; j++)
                        if (strncmp(env[j], e, klen) == 0)
                                break;
                if (j < k)
                        free(env[j]);
                else
                        k++;
                env[j] = xstrdup(e);
        }
        *count = k;
        return env;
}

/* The base environment, as a login shell starts with (init_base_env says
 * what it holds), with req's ENV on top (req may be NULL). */
static char **login_base_env(const abp_exec_req *req, const char *workdir, const init_user *u,
                             const char *shell)
{
        static const abp_exec_req none = {0};
        bool root = !u || !u->set;
        const char *name = root ? "root" : u->name;
        _cleanup_free_ char *user = name ? xasprintf("USER=%s", name) : NULL;
        _cleanup_free_ char *logname = name ? xasprintf("LOGNAME=%s", name) : NULL;
        _cleanup_free_ char *sh = shell ? xasprintf("SHELL=%s", shell) : NULL;
        _cleanup_free_ char *home = xasprintf("HOME=%s", root ? workdir : u->home ? u->home : "/");
        const char *all[] = {BASE_PATH, "LANG=C.UTF-8", user, logname, sh, "TERM=dumb", home};
        const char *base[AB_ARRAY_LEN(all)];
        size_t n = 0, count;
        for (size_t i = 0; i < AB_ARRAY_LEN(all); i++)
                if (all[i])
                        base[n++] = all[i];
        return merge_env(base, n, req ? req : &none, 0, &count);
}

char **init_base_env(const char *const *env, size_t n, const char *workdir, const init_user *u,
                     const char *shell)
{
        abp_exec_req req = {.env = (const char **)env, .n_env = n};
        return login_base_env(&req, workdir, u, shell);
}

const char *init_shell(void)
{
        if (faccessat(AT_FDCWD, "/bin/bash", X_OK, AT_EACCESS) == 0)
                return "/bin/bash";
        if (faccessat(AT_FDCWD, "/bin/sh", X_OK, AT_EACCESS) == 0)
                return "/bin/sh";
        return NULL;
}

/* Appends s with its NUL: blobs here are runs of NUL-terminated strings. */
static void sb_add(ab_buf *b, const char *s)
{
        ab_buf_add(b, s, strlen(s) + 1);
}

/* For an end of a pipe made here (pipe2 with O_CLOEXEC only): it has no
 * status flag to keep, so one F_SETFL does (F_SETFL ignores the access mode). */
static void set_nonblock(int fd)
{
        fcntl(fd, F_SETFL, O_NONBLOCK);
}

/* /dev/null opened once per session for the stdin of every exec without
 * stdin (never closed: the session keeps it, O_CLOEXEC, for its life), or
 * -1 when the box has none. Opening and closing it per exec was two of the
 * exec's syscalls. */
static int shared_null(void)
{
        static int fd = -2;
        if (fd == -2)
                fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        return fd;
}

/* ---- the login environment ----
 *
 * `bash -lc` per exec costs a login shell: /etc/profile (which forks
 * `id -u` on Debian), /etc/profile.d/<name>.sh, ~/.profile and what they
 * source, ~5 ms. What they leave a command is, nearly always, environment
 * variables and the umask. So the login shell runs once, with the base
 * environment, in the workdir, and reports them; the report is cached in
 * memory that init shares with all its sessions, with the stat signature of
 * the files a login shell reads. Every exec compares the signature (a few
 * stat calls) and captures again when it changed.
 *
 * What an environment cannot carry (functions that are not exported, traps,
 * changed shell options, a changed directory) makes the entry LE_LOGIN:
 * execs then run `bash -lc` as before, until the files change. A capture
 * that fails (non-zero exit, timeout, no bash) is LE_FAILED: this exec runs
 * `bash -lc`, and the capture is tried again when the files change or
 * LE_RETRY_MS later. */

#define LE_BUDGET_MS   5000u        /* longest a capture may take */
#define LE_RETRY_MS    10000u       /* a failed capture of unchanged files waits this long */
#define LE_RACY_NS     2000000000LL /* see le_capture */
#define LE_MAX_OUT     (256u << 10) /* most a capture may report */
#define LE_SLOT_SIZE   (320u << 10) /* largest cache entry */
#define LE_SLOTS       4            /* entries kept, so readers rarely meet a writer */
#define LE_MAX_SCRIPTS 256          /* /etc/profile.d scripts watched at most */
#define LE_BUSY        UINT64_MAX   /* slot generation while it is written */
#define LE_SIG_MAX     128

enum { LE_ENV = 'E', LE_LOGIN = 'L', LE_FAILED = 'F' };

/* Run by the login shell after the profiles. Reports on fd 3 (its stdout is
 * /dev/null: what the profiles print goes nowhere): the umask, functions and
 * traps, NUL, the shell options, NUL, the options of a shell that read no
 * profile (to compare), NUL, then the environment a command would get. */
static const char le_script[] =
    "builtin umask >&3; builtin declare -F >&3; builtin trap -p >&3; builtin printf '\\0' >&3\n"
    "{ builtin shopt -p; builtin set +o; } >&3; builtin printf '\\0' >&3\n"
    "/bin/bash --noprofile -lc 'shopt -p; set +o' >&3; builtin printf '\\0' >&3\n"
    "exec /usr/bin/env -0 >&3 3>&-\n";

static const char *const le_etc[] = {"/etc/profile", "/etc/bash.bashrc", "/etc/environment",
                                     "/etc/profile.d"};
static const char *const le_home[] = {".profile", ".bash_profile", ".bash_login", ".bashrc"};
#define LE_MAX_FILES (AB_ARRAY_LEN(le_etc) + AB_ARRAY_LEN(le_home) + LE_MAX_SCRIPTS)

/* A file's signature (file_sig's text) parsed, so that a check compares
 * numbers instead of formatting one: is_stat with the five stat fields, or
 * the errno stat failed with. ok is false when the text did not parse (the
 * text is compared then). */
typedef struct le_sig {
        bool ok, is_stat;
        int err;
        unsigned long long dev, ino, size;
        long long mtime_s, ctime_s;
        long mtime_ns, ctime_ns;
} le_sig;

/* A cache entry, serialised as NUL-terminated strings:
 *   "abenv1" "STATE UMASK TAKEN_MS" "NFILES" NFILES*(PATH SIGNATURE) ENV*
 * (ENV entries only in state LE_ENV). A login_env is a parsed private copy. */
typedef struct login_env {
        char *blob;
        size_t len;
        int state;
        mode_t umask;
        uint64_t taken_ms; /* monotonic clock */
        const char **tok;  /* every string of blob */
        size_t nfiles;     /* tok[3 + 2i]: path, tok[4 + 2i]: its signature */
        char *const *env;
        size_t nenv;
        uint64_t gen;  /* the cache generation copied (0: a capture's own) */
        le_sig *sigs;  /* nfiles parsed signatures, or NULL */
        bool borrowed; /* the session's kept copy (le_get): le_free leaves it */
} login_env;

static void le_free(login_env *le)
{
        if (!le->borrowed) {
                free(le->blob);
                free(le->tok);
                free(le->sigs);
        }
        *le = (login_env){.state = LE_FAILED};
}

/* Parses le->blob. 0 or -EINVAL. */
static int le_parse(login_env *le)
{
        char *p = le->blob, *end = le->blob + le->len;
        size_t n = 0;
        if (le->len == 0 || end[-1] != 0)
                return -EINVAL;
        for (char *q = p; q < end; q++)
                n += *q == 0;
        le->tok = xcalloc(n, sizeof(*le->tok));
        for (size_t i = 0; i < n; i++, p += strlen(p) + 1)
                le->tok[i] = p;

        char state, *e;
        unsigned um;
        unsigned long long taken;
        if (n < 3 || strcmp(le->tok[0], "abenv1") != 0 ||
            sscanf(le->tok[1], "%c %o %llu", &state, &um, &taken) != 3 || um > 0777 ||
            (state != LE_ENV && state != LE_LOGIN && state != LE_FAILED))
                return -EINVAL;
        errno = 0;
        unsigned long nf = strtoul(le->tok[2], &e, 10);
        if (errno || *e || nf > LE_MAX_FILES || 3 + 2 * nf > n)
                return -EINVAL;
        le->state = state;
        le->umask = (mode_t)um;
        le->taken_ms = taken;
        le->nfiles = nf;
        le->env = (char *const *)le->tok + 3 + 2 * nf;
        le->nenv = n - 3 - 2 * nf;
        if (state != LE_ENV && le->nenv > 0)
                return -EINVAL;
        for (size_t i = 0; i < le->nenv; i++)
                if (!env_entry_ok(le->env[i]))
                        return -EINVAL;
        return 0;
}

/* The signature of a file: "dev:ino:size:mtime:ctime", or "-errno". *ctime_ns
 * gets its ctime (0 when it cannot be stat'ed). */
static void file_sig(const char *path, char sig[LE_SIG_MAX], int64_t *ctime_ns)
{
        struct stat st;
        *ctime_ns = 0;
        if (stat(path, &st) < 0) {
                snprintf(sig, LE_SIG_MAX, "-%d", errno);
                return;
        }
        snprintf(sig, LE_SIG_MAX, "%llx:%llx:%llx:%lld.%09ld:%lld.%09ld",
                 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
                 (unsigned long long)st.st_size, (long long)st.st_mtim.tv_sec,
                 (long)st.st_mtim.tv_nsec, (long long)st.st_ctim.tv_sec, (long)st.st_ctim.tv_nsec);
        *ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
}

/* Parses every signature of le into le->sigs. */
static void le_parse_sigs(login_env *le)
{
        le->sigs = xcalloc(le->nfiles ? le->nfiles : 1, sizeof(*le->sigs));
        for (size_t i = 0; i < le->nfiles; i++) {
                const char *t = le->tok[4 + 2 * i];
                le_sig *g = &le->sigs[i];
                int end = -1;
                if (t[0] == '-') {
                        g->ok = sscanf(t, "-%d%n", &g->err, &end) == 1 && t[end] == 0;
                        continue;
                }
                g->is_stat = true;
                g->ok = sscanf(t, "%llx:%llx:%llx:%lld.%ld:%lld.%ld%n", &g->dev, &g->ino, &g->size,
                               &g->mtime_s, &g->mtime_ns, &g->ctime_s, &g->ctime_ns, &end) == 7 &&
                        t[end] == 0;
        }
}

/* The file at path has signature g: what comparing file_sig's text with
 * g's would say. */
static bool sig_same(const char *path, const le_sig *g)
{
        struct stat st;
        if (stat(path, &st) < 0)
                return !g->is_stat && g->err == errno;
        return g->is_stat && g->dev == (unsigned long long)st.st_dev &&
               g->ino == (unsigned long long)st.st_ino &&
               g->size == (unsigned long long)st.st_size && g->mtime_s == st.st_mtim.tv_sec &&
               g->mtime_ns == st.st_mtim.tv_nsec && g->ctime_s == st.st_ctim.tv_sec &&
               g->ctime_ns == st.st_ctim.tv_nsec;
}

/* The files of an entry are as they were when it was captured. */
static bool le_fresh(const login_env *le)
{
        for (size_t i = 0; i < le->nfiles; i++) {
                if (le->sigs && le->sigs[i].ok) {
                        if (!sig_same(le->tok[3 + 2 * i], &le->sigs[i]))
                                return false;
                        continue;
                }
                char sig[LE_SIG_MAX];
                int64_t ct;
                file_sig(le->tok[3 + 2 * i], sig, &ct);
                if (strcmp(sig, le->tok[4 + 2 * i]) != 0)
                        return false;
        }
        return true;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The files a login shell reads, as a strv; NULL when /etc/profile.d holds
 * more scripts than we watch. */
static char **le_files(const char *home)
{
        size_t n = 0, cap = AB_ARRAY_LEN(le_etc) + AB_ARRAY_LEN(le_home) + 8;
        char **v = xcalloc(cap, sizeof(*v));
        for (size_t i = 0; i < AB_ARRAY_LEN(le_etc); i++)
                v[n++] = xstrdup(le_etc[i]);
        for (size_t i = 0; i < AB_ARRAY_LEN(le_home); i++)
                v[n++] = xasprintf("%s/%s", home, le_home[i]);
        size_t first = n;
        DIR *d = opendir("/etc/profile.d");
        struct dirent *e;
        while (d && (e = readdir(d))) {
                size_t len = strlen(e->d_name);
                /* What /etc/profile's `for i in /etc/profile.d/<glob>.sh` matches. */
                if (e->d_name[0] == '.' || len < 4 || strcmp(e->d_name + len - 3, ".sh") != 0)
                        continue;
                if (n - first == LE_MAX_SCRIPTS) {
                        closedir(d);
                        ab_strvfreep(&v);
                        return NULL;
                }
                if (n + 1 == cap) {
                        cap = xmul(cap, 2);
                        v = xrealloc(v, xmul(cap, sizeof(*v)));
                }
                v[n++] = xasprintf("/etc/profile.d/%s", e->d_name);
                v[n] = NULL;
        }
        if (d)
                closedir(d);
        qsort(v + first, n - first, sizeof(*v), cmp_str);
        return v;
}

/* The cache, shared by PID 1 and every session it forks (MAP_SHARED). Each
 * slot is a seqlock of one: a reader copies an entry and keeps the copy only
 * if the slot's generation did not change meanwhile; a writer takes a slot
 * that is neither the current entry nor being written, so it never blocks
 * and a writer that dies midway costs one slot, not the cache. */
typedef struct le_slot {
        _Atomic uint64_t gen; /* generation held, 0 empty, LE_BUSY being written */
        _Atomic uint64_t len;
        char data[LE_SLOT_SIZE];
} le_slot;

typedef struct le_shared {
        _Atomic uint64_t next; /* last generation handed out */
        _Atomic uint64_t cur;  /* newest complete generation, 0 = none */
        le_slot slot[LE_SLOTS];
} le_shared;

static le_shared *le_shm;

/* Runs in PID 1 before it forks any session. Pages are only allocated when
 * written. Without the mapping, every exec runs a login shell, as before. */
__attribute__((constructor)) static void le_shm_init(void)
{
        void *p =
            mmap(NULL, sizeof(*le_shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        le_shm = p == MAP_FAILED ? NULL : p;
}

/* A private copy of the newest entry. 0 or -errno (nothing usable). */
static int le_load(login_env *le)
{
        if (!le_shm)
                return -ENOENT;
        uint64_t c = atomic_load_explicit(&le_shm->cur, memory_order_acquire);
        for (size_t i = 0; c && i < LE_SLOTS; i++) {
                le_slot *s = &le_shm->slot[i];
                if (atomic_load_explicit(&s->gen, memory_order_acquire) != c)
                        continue;
                uint64_t n = atomic_load_explicit(&s->len, memory_order_relaxed);
                if (n == 0 || n > LE_SLOT_SIZE)
                        return -EINVAL;
                le->blob = xmalloc(n);
                le->len = n;
                memcpy(le->blob, s->data, n);
                atomic_thread_fence(memory_order_acquire);
                if (atomic_load_explicit(&s->gen, memory_order_relaxed) != c)
                        return -EAGAIN; /* rewritten while we copied */
                le->gen = c;
                return le_parse(le);
        }
        return -ENOENT;
}

/* Publishes a serialised entry; best effort (no free slot: not cached). */
static void le_store(const char *p, size_t n)
{
        if (!le_shm || n > LE_SLOT_SIZE)
                return;
        uint64_t g = atomic_fetch_add(&le_shm->next, 1) + 1;
        uint64_t cur = atomic_load(&le_shm->cur);
        for (size_t k = 0; k < LE_SLOTS; k++) {
                le_slot *s = &le_shm->slot[(g + k) % LE_SLOTS];
                uint64_t old = atomic_load(&s->gen);
                if (old == LE_BUSY || (old != 0 && old == cur) ||
                    !atomic_compare_exchange_strong(&s->gen, &old, LE_BUSY))
                        continue;
                memcpy(s->data, p, n);
                atomic_store_explicit(&s->len, n, memory_order_relaxed);
                atomic_store_explicit(&s->gen, g, memory_order_release);
                while (cur < g && !atomic_compare_exchange_weak(&le_shm->cur, &cur, g))
                        ;
                return;
        }
}

/* What every child of the session starts with (after fork, before exec):
 * a session of its own, default signals, nothing blocked, the box's process
 * limit. Terminals' programs too (term.c). */
void init_child_common(void)
{
        setsid();
        for (int s = 1; s < NSIG; s++)
                if (s != SIGKILL && s != SIGSTOP)
                        signal(s, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (init_max_procs) {
                struct rlimit nproc = {init_max_procs, init_max_procs};
                setrlimit(RLIMIT_NPROC, &nproc);
        }
}

static void close_from(int first)
{
        if (close_range((unsigned)first, ~0U, 0) < 0)
                for (int fd = first; fd < 65536; fd++)
                        close(fd);
}

/* The capturing login shell: never returns. */
__attribute__((noreturn)) static void le_child(int null, int report, const init_conf *conf,
                                               char **env)
{
        init_child_common();
        /* (before the dups: workdir_fd may be 3) */
        if ((conf->workdir_fd >= 0 ? fchdir(conf->workdir_fd) : chdir(conf->workdir)) < 0)
                _exit(127);
        if (dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
                _exit(127);
        if (report == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(report, 3) < 0)
                _exit(127);
        close_from(4);
        char *argv[] = {"bash", "-lc", (char *)le_script, NULL};
        execve("/bin/bash", argv, env);
        _exit(127);
}

/* Runs the login shell with le_script and the base environment; its report
 * in *out (malloc'd). 0, or -errno when it could not run, exited non-zero or
 * by a signal (-ECHILD), took longer than LE_BUDGET_MS or the exec's
 * deadline (-ETIMEDOUT: it is killed with all it started), or reported more
 * than LE_MAX_OUT (-E2BIG). */
static int le_run(const init_conf *conf, int sfd, uint64_t deadline, char **out, size_t *outlen)
{
        _cleanup_strv_ char **env = login_base_env(NULL, conf->workdir, NULL, "/bin/bash");
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        pid_t pid = null < 0 ? -1 : fork();
        if (pid == 0)
                le_child(null, p[1], conf, env);
        int r = pid < 0 ? -errno : 0;
        close(p[1]);
        if (null >= 0)
                close(null);
        if (pid < 0) {
                close(p[0]);
                return r;
        }
        set_nonblock(p[0]);

        uint64_t end = ab_now_ms() + LE_BUDGET_MS;
        if (deadline && deadline < end)
                end = deadline;
        _cleanup_buf_ ab_buf buf = {0};
        bool exited = false, eof = false;
        int status = 0;
        while (r == 0 && !(exited && eof)) {
                if (!eof) {
                        char *at = ab_buf_reserve(&buf, ABP_CHUNK);
                        ssize_t n = read(p[0], at, buf.cap - buf.n - 1);
                        if (n > 0) {
                                ab_buf_commit(&buf, (size_t)n);
                                if (buf.n > LE_MAX_OUT)
                                        r = -E2BIG;
                                continue;
                        }
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0 && errno != EAGAIN)
                                r = -errno;
                        /* At EOF, or drained after the exit: whatever else still
                         * holds the pipe (a daemon the profile started) is not ours. */
                        else if (n == 0 || exited)
                                eof = true;
                        if (r < 0 || eof)
                                continue;
                }
                if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
                        exited = true;
                        continue;
                }
                uint64_t now = ab_now_ms();
                if (now >= end) {
                        r = -ETIMEDOUT;
                        break;
                }
                struct pollfd pf[2] = {{.fd = sfd, .events = POLLIN},
                                       {.fd = eof ? -1 : p[0], .events = POLLIN}};
                if (poll(pf, 2, (int)(end - now)) > 0 && pf[0].revents) {
                        struct signalfd_siginfo si;
                        while (read(sfd, &si, sizeof(si)) == sizeof(si))
                                ;
                }
        }
        close(p[0]);
        if (!exited) {
                /* Nothing else runs in this session yet: this kills only the capture. */
                init_kill_tree(pid, NULL, NULL);
        } else if (r == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
                r = -ECHILD;
        }
        if (r < 0)
                return r;
        *outlen = buf.n;
        *out = ab_buf_steal(&buf);
        return 0;
}

/* Reads a capture's report. LE_ENV with *envp (a strv, less the per-process
 * PWD OLDPWD SHLVL _) and *um; LE_LOGIN when the login shell kept what an
 * environment cannot carry; LE_FAILED for a report we do not understand. */
static int le_verdict(char *out, size_t len, const char *workdir, mode_t *um, char ***envp)
{
        char *end = out + len;
        if (len == 0 || end[-1] != 0)
                return LE_FAILED;
        char *head = out, *mine = head + strlen(head) + 1;
        if (mine >= end)
                return LE_FAILED;
        char *fresh = mine + strlen(mine) + 1;
        if (fresh >= end)
                return LE_FAILED;
        char *first = fresh + strlen(fresh) + 1, *nl;

        errno = 0;
        unsigned long v = strtoul(head, &nl, 8);
        if (errno || nl == head || *nl != '\n' || v > 0777)
                return LE_FAILED;
        *um = (mode_t)v;
        int state = LE_ENV;
        for (char *line = nl + 1; *line;) {
                char *next = strchrnul(line, '\n');
                /* "declare -fx NAME" is exported, so in the environment;
                 * anything else (a function that is not, a trap) is not. */
                bool exported = strncmp(line, "declare -f", 10) == 0 &&
                                memchr(line + 9, 'x', strcspn(line + 9, " \n"));
                if (next > line && !exported)
                        state = LE_LOGIN;
                line = *next ? next + 1 : next;
        }
        if (strcmp(mine, fresh) != 0)
                state = LE_LOGIN; /* the profiles changed shell options */

        size_t n = 0;
        for (char *q = first; q < end; q += strlen(q) + 1)
                n++;
        _cleanup_strv_ char **env = xcalloc(n + 1, sizeof(*env));
        size_t k = 0;
        for (char *q = first; q < end; q += strlen(q) + 1) {
                struct stat a, b;
                if (!env_entry_ok(q))
                        return LE_FAILED;
                if (strncmp(q, "OLDPWD=", 7) == 0)
                        state = LE_LOGIN; /* the profiles changed directory */
                else if (strncmp(q, "PWD=", 4) == 0 &&
                         (stat(q + 4, &a) < 0 || stat(workdir, &b) < 0 || a.st_dev != b.st_dev ||
                          a.st_ino != b.st_ino))
                        state = LE_LOGIN;
                if (strncmp(q, "PWD=", 4) != 0 && strncmp(q, "OLDPWD=", 7) != 0 &&
                    strncmp(q, "SHLVL=", 6) != 0 && strncmp(q, "_=", 2) != 0)
                        env[k++] = xstrdup(q);
        }
        if (state == LE_ENV)
                *envp = steal_pointer(&env);
        return state;
}

static void le_serialise(ab_buf *b, int state, mode_t um, size_t nfiles, const ab_buf *files,
                         char **env)
{
        char s[64];
        sb_add(b, "abenv1");
        snprintf(s, sizeof(s), "%c %o %llu", state, (unsigned)um, (unsigned long long)ab_now_ms());
        sb_add(b, s);
        snprintf(s, sizeof(s), "%zu", nfiles);
        sb_add(b, s);
        ab_buf_add(b, files->p, files->n);
        for (size_t i = 0; state == LE_ENV && env[i]; i++)
                sb_add(b, env[i]);
}

/* Captures the login environment now and caches it; *le gets it. */
static void le_capture(login_env *le, const init_conf *conf, int sfd, uint64_t deadline)
{
        _cleanup_strv_ char **files = le_files(conf->workdir);
        if (!files)
                return; /* LE_FAILED, not cached: bash -lc */

        /* Signatures first, so that a change during the capture shows next
         * time. Timestamps come from a coarse clock and some filesystems
         * keep whole seconds: a file whose ctime is within LE_RACY_NS of now
         * could change again without a new signature, so such a capture
         * serves this exec but is not cached. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME_COARSE, &ts);
        int64_t now_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        bool racy = false;
        ab_buf fb = {0};
        size_t nfiles = 0;
        for (; files[nfiles]; nfiles++) {
                char sig[LE_SIG_MAX];
                int64_t ct;
                file_sig(files[nfiles], sig, &ct);
                racy |= ct > now_ns - LE_RACY_NS && ct < now_ns + LE_RACY_NS;
                sb_add(&fb, files[nfiles]);
                sb_add(&fb, sig);
        }

        _cleanup_free_ char *out = NULL;
        _cleanup_strv_ char **env = NULL;
        size_t outlen = 0;
        mode_t um = 022;
        int state = LE_FAILED;
        int r = le_run(conf, sfd, deadline, &out, &outlen);
        if (r == 0)
                state = le_verdict(out, outlen, conf->workdir, &um, &env);
        else if (r == -E2BIG)
                state = LE_LOGIN; /* too large to cache: keep running login shells */

        ab_buf b = {0};
        le_serialise(&b, state, um, nfiles, &fb, env);
        if (b.n > LE_SLOT_SIZE && state == LE_ENV) {
                b.n = 0;
                le_serialise(&b, LE_LOGIN, um, nfiles, &fb, env);
        }
        ab_buf_free(&fb);
        le->len = b.n;
        le->blob = b.p;
        if (le_parse(le) < 0)
                le_free(le);
        else if (!racy)
                le_store(le->blob, le->len);
}

/* The session's copy of the newest cache entry, parsed once per generation
 * (generations are never reused, so the same one is the same entry): an exec
 * then copies, splits and parses nothing, and checks the files' signatures
 * as numbers. */
static login_env le_kept = {.state = LE_FAILED};

/* le_kept, refreshed when the cache holds a newer entry; NULL when none. */
static const login_env *le_newest(void)
{
        uint64_t c = atomic_load_explicit(&le_shm->cur, memory_order_acquire);
        if (c && le_kept.blob && le_kept.gen == c)
                return &le_kept;
        login_env copy = {.state = LE_FAILED};
        if (le_load(&copy) < 0) {
                le_free(&copy);
                return NULL;
        }
        le_parse_sigs(&copy);
        le_free(&le_kept);
        le_kept = copy;
        return &le_kept;
}

/* The login environment for this exec: the cached one when its files are
 * unchanged (lent: le_free leaves it), else a new capture. */
static void le_get(login_env *le, const init_conf *conf, int sfd, uint64_t deadline)
{
        *le = (login_env){.state = LE_FAILED};
        if (!le_shm)
                return;
        const login_env *k = le_newest();
        if (k && le_fresh(k) &&
            (k->state != LE_FAILED || ab_now_ms() - k->taken_ms < LE_RETRY_MS)) {
                *le = *k;
                le->borrowed = true;
                return;
        }
        le_capture(le, conf, sfd, deadline);
}

void init_exec_prewarm(const init_conf *conf)
{
        login_env le;
        const char *shell = init_shell();
        if (!shell || strcmp(shell, "/bin/bash") != 0)
                return; /* the login environment is bash's */
        le_get(&le, conf, -1, 0);
        le_free(&le);
}

/* ---- direct exec ----
 *
 * Given one simple command of plain words, `bash -c` looks the first word up
 * in PATH and execs it in place of itself. We do the same without bash, and
 * give the program the environment bash would: the same entries, plus PWD
 * (the physical cwd), SHLVL=0 (bash's level, given back as it execs) and _
 * (the program's path). Whatever does not fit goes to bash. */

static bool direct_char(char ch)
{
        return ch && (isalnum((unsigned char)ch) || strchr("_./:=+,@%-", ch));
}

/* bash's builtins and reserved words ([ [[ ]] { } ! hold characters that
 * never get this far). */
static const char *const shell_words[] = {
    ".",       ":",      "alias",   "bg",       "bind",     "break",     "builtin",  "caller",
    "case",    "cd",     "command", "compgen",  "complete", "compopt",   "continue", "coproc",
    "declare", "dirs",   "disown",  "do",       "done",     "echo",      "elif",     "else",
    "enable",  "esac",   "eval",    "exec",     "exit",     "export",    "false",    "fc",
    "fg",      "fi",     "for",     "function", "getopts",  "hash",      "help",     "history",
    "if",      "in",     "jobs",    "kill",     "let",      "local",     "logout",   "mapfile",
    "popd",    "printf", "pushd",   "pwd",      "read",     "readarray", "readonly", "return",
    "select",  "set",    "shift",   "shopt",    "source",   "suspend",   "test",     "then",
    "time",    "times",  "trap",    "true",     "type",     "typeset",   "ulimit",   "umask",
    "unalias", "unset",  "until",   "wait",     "while",
};

/* Variables bash acts on or rewrites before it passes the environment on
 * (besides every BASH*: BASH_ENV is run, BASH_FUNC_* are functions). */
static const char *const bash_vars[] = {
    "COMP_WORDBREAKS", "EPOCHREALTIME", "EPOCHSECONDS", "HISTCMD", "IFS", "LINENO", "OLDPWD",
    "OPTERR",          "OPTIND",        "PPID",         "PS1",     "PS2", "PS4",    "PWD",
    "RANDOM",          "SHELLOPTS",     "SHLVL",        "SRANDOM", "_",
};

/* The words of cmd when it is one simple command bash would run unchanged:
 * words of [A-Za-z0-9_./:=+,@%-] separated by single spaces, the first no
 * assignment, job spec, builtin or reserved word. NULL otherwise. */
static char **direct_words(const char *cmd)
{
        size_t n = 1;
        if (!cmd[0] || cmd[0] == ' ')
                return NULL;
        for (const char *p = cmd; *p; p++) {
                if (*p == ' ' && (p[1] == ' ' || !p[1]))
                        return NULL;
                if (*p == ' ')
                        n++;
                else if (!direct_char(*p))
                        return NULL;
        }
        size_t len = strcspn(cmd, " ");
        if (memchr(cmd, '=', len) || cmd[0] == '%')
                return NULL;
        for (size_t i = 0; i < AB_ARRAY_LEN(shell_words); i++)
                if (strlen(shell_words[i]) == len && memcmp(shell_words[i], cmd, len) == 0)
                        return NULL;
        char **w = xcalloc(xadd(n, 1), sizeof(*w));
        const char *p = cmd;
        for (size_t i = 0; i < n; i++) {
                len = strcspn(p, " ");
                w[i] = xstrndup(p, len);
                p += len + 1;
        }
        return w;
}

/* No variable in env makes bash do more than exec the program. */
static bool direct_env_ok(char *const *env)
{
        for (; *env; env++) {
                size_t len = strcspn(*env, "=");
                if (strncmp(*env, "BASH", 4) == 0)
                        return false;
                for (size_t i = 0; i < AB_ARRAY_LEN(bash_vars); i++)
                        if (strlen(bash_vars[i]) == len && memcmp(bash_vars[i], *env, len) == 0)
                                return false;
        }
        return true;
}

/* Where bash would find `word`: as is when it holds a '/', else the first
 * executable regular file in PATH. NULL when not found, or when PATH holds a
 * relative or empty entry (bash then decides). */
static char *find_program(const char *word, char *const *env)
{
        if (strchr(word, '/'))
                return xstrdup(word);
        const char *path = env_get(env, "PATH");
        while (path) {
                const char *colon = strchr(path, ':');
                size_t dlen = colon ? (size_t)(colon - path) : strlen(path);
                if (dlen == 0 || path[0] != '/')
                        return NULL;
                char *f =
                    xasprintf("%.*s%s%s", (int)dlen, path, path[dlen - 1] == '/' ? "" : "/", word);
                struct stat st;
                if (stat(f, &st) == 0 && S_ISREG(st.st_mode) && access(f, X_OK) == 0)
                        return f;
                free(f);
                path = colon ? colon + 1 : NULL;
        }
        return NULL;
}

static void queue_data(exec_state *st, int stream, const void *p, size_t n)
{
        if (abp_enc_data(&st->out, (uint32_t)stream, p, n) < 0)
                abort(); /* n <= ABP_CHUNK: cannot overflow */
}

static void on_output(exec_state *st, int i, const uint8_t *p, size_t n)
{
        ostream *o = &st->o[i];
        o->total += n;
        if (st->discard)
                return;
        uint64_t room = st->cap - o->kept;
        size_t take = n < room ? n : (size_t)room;
        if (take > 0) {
                queue_data(st, i, p, take);
                o->kept += take;
        }
        if (take < n && !o->marked) {
                char m[96];
                int len =
                    snprintf(m, sizeof(m), "\n[agentbox: output truncated after %llu bytes]\n",
                             (unsigned long long)st->cap);
                queue_data(st, i, m, (size_t)len);
                o->marked = true;
                st->truncated = true;
        }
}

/* One read from a pipe: >0 bytes, 0 at EOF (the pipe is closed), -EAGAIN. */
static ssize_t read_stream(exec_state *st, int i)
{
        static uint8_t buf[ABP_CHUNK];
        ostream *o = &st->o[i];
        for (;;) {
                ssize_t n = read(o->fd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return -EAGAIN;
                if (n <= 0) {
                        close(o->fd);
                        o->fd = -1;
                        return 0;
                }
                on_output(st, i, buf, (size_t)n);
                return n;
        }
}

static void flush(exec_state *st)
{
        while (st->out.len > 0 && !st->gone) {
                ssize_t n = send(st->c->fd, st->out.p, st->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        st->gone = true;
                        st->out.len = 0;
                        return;
                }
                abp_buf_consume(&st->out, (size_t)n);
        }
}

static void close_stdin(exec_state *st)
{
        if (st->in_fd >= 0)
                close(st->in_fd);
        st->in_fd = -1;
        st->in_len = st->in_off = 0;
}

static void write_stdin(exec_state *st)
{
        while (st->in_fd >= 0 && st->in_off < st->in_len) {
                ssize_t n = write(st->in_fd, st->in_buf + st->in_off, st->in_len - st->in_off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n < 0) {
                        close_stdin(st); /* EPIPE: the command does not read stdin */
                        return;
                }
                st->in_off += (size_t)n;
        }
        if (st->in_off == st->in_len && st->in_eof)
                close_stdin(st);
}

/* Moves buffered client frames into the stdin pipe for as long as it takes them. */
static void client_frames(exec_state *st)
{
        for (;;) {
                abp_frame f;
                abp_data d;
                write_stdin(st);
                if (st->gone || st->in_off < st->in_len)
                        return;
                int k = abp_reader_next(&st->c->rd, &f);
                if (k == 0)
                        return;
                if (k < 0 || !st->in_stream || st->in_eof) {
                        st->gone = st->bad = true;
                        return;
                }
                if (f.type == ABP_EOF) {
                        st->in_eof = true;
                } else if (f.type == ABP_DATA && abp_dec_data(&f, &d) == 0 && d.stream == 0) {
                        if (st->in_fd >= 0 && d.len > 0) {
                                st->in_buf = xrealloc(st->in_buf, d.len);
                                memcpy(st->in_buf, d.data, d.len);
                                st->in_len = d.len;
                                st->in_off = 0;
                        }
                } else {
                        st->gone = st->bad = true;
                        return;
                }
        }
}

static void read_client(exec_state *st)
{
        ssize_t n = abp_reader_fill(&st->c->rd, st->c->fd);
        if (n == 0 || (n < 0 && n != -EAGAIN))
                st->gone = true;
}

/* ---- how the command runs ---- */

typedef enum {
        RUN_LOGIN,  /* SHELL -lc COMMAND, base environment: as before the cache */
        RUN_SHELL,  /* bash --noprofile -lc COMMAND, login environment */
        RUN_DIRECT, /* the program itself, login environment */
        RUN_ARGV,   /* ARGV as given, base environment: no shell at all */
} run_kind;

typedef struct exec_plan {
        run_kind kind;
        const char *command;
        const char *shell;     /* what runs command: init_shell() */
        const init_user *user; /* who runs it: the session's, for the forked child */
        char **env;    /* strv; RUN_DIRECT: env[n_bash] is "PWD=" + room, filled by the child */
        size_t n_bash; /* RUN_DIRECT: the entries bash would get (cut here to fall back on it) */
        size_t pwd_size;
        char *path;  /* RUN_DIRECT: the program */
        char **argv; /* RUN_DIRECT: its words; RUN_ARGV: ARGV */
        bool set_umask;
        mode_t umask;
} exec_plan;

static void plan_free(exec_plan *p)
{
        ab_strvfreep(&p->env);
        ab_strvfreep(&p->argv);
        free(p->path);
        *p = (exec_plan){0};
}

/* Decides how to run req (see the top of the file) with `shell` (NULL only
 * for an ARGV) as `user`; may capture the login environment, within
 * `deadline`. Request env entries were checked. */
static void plan_exec(exec_plan *p, const abp_exec_req *req, const init_conf *conf,
                      const char *shell, const init_user *user, int sfd, uint64_t deadline)
{
        login_env le;
        size_t n;
        *p = (exec_plan){.shell = shell, .user = user};
        if (req->argv) {
                /* No shell, so no profiles either: the base environment and ENV. */
                p->kind = RUN_ARGV;
                p->env = login_base_env(req, conf->workdir, user, shell);
                p->argv = xcalloc(xadd(req->n_argv, 1), sizeof(*p->argv));
                for (size_t i = 0; i < req->n_argv; i++)
                        p->argv[i] = xstrdup(req->argv[i]);
                return;
        }
        p->kind = RUN_LOGIN;
        p->command = req->command;
        /* The login environment is bash's, captured for root in the workdir:
         * anyone else, or sh, gets a login shell every time. */
        if (user->set || strcmp(shell, "/bin/bash") != 0) {
                p->env = login_base_env(req, conf->workdir, user, shell);
                return;
        }
        le_get(&le, conf, sfd, deadline);
        if (le.state != LE_ENV) {
                le_free(&le);
                p->env = login_base_env(req, conf->workdir, user, shell);
                return;
        }
        p->kind = RUN_SHELL;
        p->set_umask = true;
        p->umask = le.umask;
        p->env = merge_env((const char *const *)le.env, le.nenv, req, 3, &n);
        le_free(&le);

        _cleanup_strv_ char **words = direct_words(req->command);
        if (!words || !direct_env_ok(p->env))
                return;
        char *path = find_program(words[0], p->env);
        if (!path)
                return;
        p->kind = RUN_DIRECT;
        p->n_bash = n;
        p->pwd_size = PATH_MAX + 5;
        p->env[n] = xzalloc(p->pwd_size);
        memcpy(p->env[n], "PWD=", 4);
        p->env[n + 1] = xstrdup("SHLVL=0");
        p->env[n + 2] = xasprintf("_=%s", path);
        p->path = path;
        p->argv = steal_pointer(&words);
}

/* execve of `file` as execvp(3) finds it, but along the PATH of env (not of
 * init), with no fallback to /bin/sh for a file without #!: a name holding a
 * '/' as is, else each PATH entry in turn (an empty one is the cwd; no PATH:
 * /usr/bin:/bin). Returns only on failure, with errno of the most telling try. */
static void exec_argv(char **argv, char **env)
{
        const char *file = argv[0];
        if (!*file) {
                errno = ENOENT;
                return;
        }
        if (strchr(file, '/')) {
                execve(file, argv, env);
                return;
        }
        const char *path = env_get(env, "PATH");
        if (!path)
                path = "/usr/bin:/bin";
        size_t flen = strlen(file);
        bool denied = false;
        char buf[PATH_MAX];
        for (const char *d = path;; d++) {
                const char *end = strchrnul(d, ':');
                size_t dlen = (size_t)(end - d);
                if (dlen + 1 + flen < sizeof(buf)) {
                        memcpy(buf, d, dlen);
                        buf[dlen] = '/';
                        memcpy(buf + dlen + 1, file, flen + 1);
                        execve(dlen ? buf : file, argv, env);
                        switch (errno) {
                        case EACCES:
                                denied = true;
                                break;
                        case ENOENT:
                        case ENOTDIR:
                        case ESTALE:
                        case ENODEV:
                        case ETIMEDOUT:
                        case ELOOP:
                        case ENAMETOOLONG:
                                break;
                        default:
                                return; /* found, but the kernel refused it: stop here */
                        }
                }
                if (!*end)
                        break;
                d = end;
        }
        errno = denied ? EACCES : ENOENT;
}

/* After a failed exec_argv: report as a shell would, 127 when there is no
 * such program, 126 when there is one that cannot run. */
__attribute__((noreturn)) static void argv_failed(const char *file)
{
        int e = errno;
        if (e == ENOENT && !strchr(file, '/'))
                dprintf(2, "agentbox-init: %s: command not found\n", file);
        else
                dprintf(2, "agentbox-init: %s: %s\n", file, strerror(e));
        _exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
}

/* argv[0] of a shell: its file name ("sh" is what busybox needs to run its sh). */
static const char *shell_name(const char *path)
{
        if (!path)
                return NULL;
        const char *slash = strrchr(path, '/');
        return slash ? slash + 1 : path;
}

/* Child side of the fork: never returns. */
__attribute__((noreturn)) static void run_child(int in, int out, int err, int cwdfd, exec_plan *p)
{
        init_child_common();
        if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
                _exit(127);
        if (fchdir(cwdfd) < 0) {
                dprintf(2, "agentbox-init: cannot enter the working directory: %s\n",
                        strerror(errno));
                _exit(127);
        }
        if (p->set_umask)
                umask(p->umask);
        /* After the workdir is entered: one only root may enter still works. */
        int r = init_user_apply(p->user);
        if (r < 0) {
                dprintf(2, "agentbox-init: cannot become uid %u gid %u: %s\n",
                        (unsigned)p->user->uid, (unsigned)p->user->gid, strerror(-r));
                _exit(126);
        }
        close_from(3);
        if (p->kind == RUN_ARGV) {
                exec_argv(p->argv, p->env);
                argv_failed(p->argv[0]);
        }
        if (p->kind == RUN_DIRECT) {
                if (getcwd(p->env[p->n_bash] + 4, p->pwd_size - 4))
                        execve(p->path, p->argv, p->env);
                /* Not runnable as such (a script without #!, say): bash
                 * decides, and reports errors as it would have. */
                p->env[p->n_bash] = NULL;
        }
        char *login[] = {(char *)shell_name(p->shell), "-lc", (char *)p->command, NULL};
        char *shell[] = {"bash", "--noprofile", "-lc", (char *)p->command, NULL};
        execve(p->shell, p->kind == RUN_LOGIN ? login : shell, p->env);
        dprintf(2, "agentbox-init: cannot run %s: %s\n", p->shell, strerror(errno));
        _exit(127);
}

/* ---- starting the command: vfork first ----
 *
 * fork() copies the session's page tables, which on a paravirtualised host
 * costs more than the whole exec of a small program; vspawn starts the child
 * in the session's memory (vfork) until it execs. What the child does not do
 * (cwd, umask, RLIMIT_NPROC) the session does to itself first, and puts cwd
 * and umask back before its next request. Any failure (a program the kernel
 * refuses, a missing one, EAGAIN at the process limit) falls back to
 * run_child in a fork, which does the same steps one by one and reports
 * errors as it always has. */

/* Where an argv's program is: as is with a '/', else the first executable
 * file along the PATH of env (an empty entry is the cwd, which the session
 * has entered). NULL when none is (run_child then says why). One access
 * check per entry: an executable directory found first makes vspawn's
 * execve fail, and run_child's PATH walk (which skips it, as execvp does)
 * then runs the right program or reports as it always has. */
static char *argv_program(const char *file, char *const *env)
{
        if (strchr(file, '/'))
                return xstrdup(file);
        const char *path = env_get(env, "PATH");
        if (!path)
                path = "/usr/bin:/bin";
        for (const char *d = path;; d++) {
                const char *end = strchrnul(d, ':');
                int dlen = (int)(end - d);
                char *f = dlen ? xasprintf("%.*s/%s", dlen, d, file) : xstrdup(file);
                if (faccessat(AT_FDCWD, f, X_OK, AT_EACCESS) == 0)
                        return f;
                free(f);
                if (!*end)
                        return NULL;
                d = end;
        }
}

/* The kernel's sigaction, for every signal (glibc's refuses its own two). */
struct ksigaction {
        void (*handler)(int);
        unsigned long flags;
        void (*restorer)(void);
        uint64_t mask;
};

static int ksigaction(int sig, const struct ksigaction *sa, struct ksigaction *old)
{
        return (int)syscall(SYS_rt_sigaction, sig, sa, old, sizeof(uint64_t));
}

static int ksigmask(int how, const uint64_t *set, uint64_t *old)
{
        return (int)syscall(SYS_rt_sigprocmask, how, set, old, sizeof(uint64_t));
}

/* The signals this session does not leave at SIG_DFL (SIGPIPE, which init
 * ignores, and whatever the C library handles): read once, as a session's
 * dispositions are set before its first request and no exec changes them. */
static uint64_t changed_signals(void)
{
        static uint64_t set;
        static bool read;
        if (read)
                return set;
        for (int sig = 1; sig <= 64; sig++) {
                struct ksigaction sa;
                if (sig != SIGKILL && sig != SIGSTOP && ksigaction(sig, NULL, &sa) == 0 &&
                    sa.handler != SIG_DFL)
                        set |= 1ULL << (sig - 1);
        }
        read = true;
        return set;
}

/* posix_spawn as the session needs it, with fewer steps: vfork (the child
 * runs in the session's memory until it execs, the session waits), then in
 * the child a session of its own, in/out/err as 0/1/2, nothing else open,
 * every signal the session changed back to SIG_DFL (the others are), none
 * blocked, and execve. Every signal is blocked around the vfork, so no
 * handler ever runs in the child. glibc's posix_spawn resets all 64 signals
 * one by one and maps a stack: ~40 us more per exec on this host. Returns
 * the pid, or -1 when nothing runs (the child's failure is reaped here; the
 * caller's fork path then reports it as it always has). */
static pid_t vspawn(const char *prog, char *const *argv, char *const *env, int in, int out, int err)
{
        uint64_t all = ~0ULL, none = 0, old;
        volatile int failed = 0;
        (void)changed_signals(); /* read in the session, where it may make syscalls */
        if (ksigmask(SIG_SETMASK, &all, &old) < 0)
                return -1;
        pid_t pid = vfork();
        if (pid == 0) {
                const int from[3] = {in, out, err};
                uint64_t changed = changed_signals();
                setsid();
                for (int fd = 0; fd < 3; fd++) {
                        int r = from[fd] == fd ? fcntl(fd, F_SETFD, 0) : dup2(from[fd], fd);
                        if (r < 0)
                                failed = 1;
                }
                if (close_range(3, ~0U, 0) < 0)
                        failed = 1;
                struct ksigaction dfl = {.handler = SIG_DFL};
                for (int sig = 1; sig <= 64; sig++)
                        if (changed & (1ULL << (sig - 1)))
                                ksigaction(sig, &dfl, NULL);
                ksigmask(SIG_SETMASK, &none, NULL);
                if (!failed)
                        execve(prog, argv, env);
                failed = 1;
                _exit(127);
        }
        ksigmask(SIG_SETMASK, &old, NULL);
        if (pid > 0 && failed) {
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                return -1;
        }
        return pid;
}

/* Spawns the command of p with stdin in, stdout out, stderr err, in cwdfd
 * (the caller has set the session's umask to p's). Returns its pid, or -1
 * (nothing started: fork run_child instead). */
static pid_t spawn_child(int in, int out, int err, int cwdfd, exec_plan *p)
{
        if (p->user->set)
                return -1; /* posix_spawn cannot change users: run_child does */
        if (fchdir(cwdfd) < 0)
                return -1;
        if (init_max_procs) {
                struct rlimit nproc = {init_max_procs, init_max_procs};
                setrlimit(RLIMIT_NPROC, &nproc);
        }
        _cleanup_free_ char *prog = NULL;
        char *const *argv;
        char *login[] = {(char *)shell_name(p->shell), "-lc", (char *)p->command, NULL};
        char *shell[] = {"bash", "--noprofile", "-lc", (char *)p->command, NULL};
        switch (p->kind) {
        case RUN_ARGV:
                prog = argv_program(p->argv[0], p->env);
                if (!prog)
                        return -1;
                argv = p->argv;
                break;
        case RUN_DIRECT:
                if (!getcwd(p->env[p->n_bash] + 4, p->pwd_size - 4))
                        return -1;
                prog = xstrdup(p->path);
                argv = p->argv;
                break;
        default:
                prog = xstrdup(p->shell);
                argv = p->kind == RUN_LOGIN ? login : shell;
                break;
        }
        return vspawn(prog, argv, p->env, in, out, err);
}

static int pipe_pair(int p[2])
{
        return pipe2(p, O_CLOEXEC) < 0 ? -errno : 0;
}

static void close_pair(int p[2])
{
        for (int i = 0; i < 2; i++)
                if (p[i] >= 0)
                        close(p[i]);
        p[0] = p[1] = -1;
}

/* Runs the poll loop until the main process exits, the deadline (0: none)
 * passes or the client goes away. Returns true on timeout. */
static bool run_loop(exec_state *st, int sfd, uint64_t deadline)
{
        for (;;) {
                client_frames(st);
                flush(st);
                if (st->gone || st->exited)
                        return false;
                uint64_t now = ab_now_ms();
                if (deadline && now >= deadline)
                        return true;

                struct pollfd p[5];
                int np = 0, ic = -1, io[3] = {-1, -1, -1}, ii = -1;
                short ev = 0;
                if (st->in_off == st->in_len)
                        ev |= POLLIN;
                if (st->out.len > 0)
                        ev |= POLLOUT;
                ic = np;
                p[np++] = (struct pollfd){.fd = st->c->fd, .events = ev};
                for (int i = 1; i <= 2; i++) {
                        if (st->o[i].fd >= 0 && st->out.len < EXEC_HWM) {
                                io[i] = np;
                                p[np++] = (struct pollfd){.fd = st->o[i].fd, .events = POLLIN};
                        }
                }
                if (st->in_fd >= 0 && st->in_off < st->in_len) {
                        ii = np;
                        p[np++] = (struct pollfd){.fd = st->in_fd, .events = POLLOUT};
                }
                int is = np;
                p[np++] = (struct pollfd){.fd = sfd, .events = POLLIN};

                int wait = deadline ? (int)(deadline - now) : -1;
                if (poll(p, (nfds_t)np, wait) < 0) {
                        if (errno == EINTR)
                                continue;
                        st->gone = true;
                        return false;
                }
                if (p[is].revents) {
                        struct signalfd_siginfo si;
                        while (read(sfd, &si, sizeof(si)) == sizeof(si))
                                ;
                        reap(st);
                }
                if (p[ic].revents & POLLOUT)
                        flush(st);
                if (p[ic].revents & (POLLIN | POLLHUP | POLLERR)) {
                        if (p[ic].revents & POLLIN)
                                read_client(st);
                        else
                                st->gone = true;
                }
                for (int i = 1; i <= 2; i++)
                        if (io[i] >= 0 && p[io[i]].revents)
                                read_stream(st, i);
                if (ii >= 0 && p[ii].revents)
                        write_stdin(st);
        }
}

/* Reads what the pipes already hold, without waiting for writers. */
static void drain(exec_state *st)
{
        uint64_t before = st->o[1].total + st->o[2].total;
        for (bool more = true; more;) {
                more = false;
                for (int i = 1; i <= 2; i++)
                        if (st->o[i].fd >= 0 && read_stream(st, i) > 0)
                                more = true;
                if (st->o[1].total + st->o[2].total - before > DRAIN_MAX)
                        break;
        }
}

/* After EXIT is queued: deliver it, hang up, then read and discard the pipes
 * until every background writer is gone, so none of them gets SIGPIPE. With
 * `again` (nothing is left to read), deliver it and keep the connection. */
static void finish(exec_state *st, int sfd, bool again)
{
        uint64_t last = ab_now_ms();
        st->discard = true;
        for (;;) {
                flush(st);
                if (again && !st->gone && st->out.len == 0)
                        return;
                if (st->c->fd >= 0 && (st->gone || st->out.len == 0)) {
                        init_hangup(st->c->fd);
                        st->c->fd = -1;
                        /* The client has its answer: now tame what is left. */
                        limit_leftovers();
                }
                if (st->c->fd < 0 && st->o[1].fd < 0 && st->o[2].fd < 0)
                        break;
                struct pollfd p[4];
                int np = 0;
                int ic = -1;
                if (st->c->fd >= 0) {
                        ic = np;
                        p[np++] = (struct pollfd){.fd = st->c->fd, .events = POLLOUT};
                }
                for (int i = 1; i <= 2; i++)
                        if (st->o[i].fd >= 0)
                                p[np++] = (struct pollfd){.fd = st->o[i].fd, .events = POLLIN};
                p[np++] = (struct pollfd){.fd = sfd, .events = POLLIN};
                int n = poll(p, (nfds_t)np, ic >= 0 ? 1000 : -1);
                if (n < 0 && errno != EINTR)
                        break;
                if (ic >= 0 && n > 0 && p[ic].revents)
                        last = ab_now_ms();
                else if (ic >= 0 && ab_now_ms() - last > INIT_IO_TIMEOUT_MS)
                        st->gone = true; /* the client stopped reading */
                for (int i = 1; i <= 2; i++)
                        while (st->o[i].fd >= 0 && read_stream(st, i) > 0)
                                ;
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof(si)) == sizeof(si))
                        ;
                reap(st);
        }
        reap(st);
}

/* The session's signalfd for SIGCHLD, made at its first exec and kept (two
 * system calls less per exec than one per exec): it reports SIGCHLD only while
 * an exec blocks it, which is all a new one would report; between execs the
 * signal is unblocked and ignored, as before. */
static int session_sigchld(const sigset_t *chld)
{
        static int fd = -1;
        if (fd < 0)
                fd = signalfd(-1, chld, SFD_CLOEXEC | SFD_NONBLOCK);
        return fd;
}

/* Nothing the command started is left: no child of the session (a
 * subreaper, so orphans of the command would be), none waiting to be reaped. */
static bool nothing_left(void)
{
        siginfo_t si;
        return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD;
}

bool init_exec(init_conn *c, const abp_frame *f, const init_conf *conf)
{
        abp_exec_req req;
        const char *bad = NULL;
        int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
        _cleanup_close_ int cwdfd = -1;
        int sfd = -1;
        exec_plan plan = {0};
        init_user user = {0};
        sigset_t chld, old;
        int r = 0, null_in = -1;
        bool again = false;
        mode_t um = 0;

        if (abp_dec_exec(f, &req) < 0) {
                init_send_error(c, "invalid_argument",
                                "malformed exec request (a bad field, or not exactly one of "
                                "COMMAND and ARGV)");
                return false;
        }
        exec_state st = {
            .c = c,
            .cap = req.output_cap ? req.output_cap : ABP_DEFAULT_CAP,
            .in_fd = -1,
            .in_stream = req.stdin_stream,
            .in_eof = !req.stdin_stream,
            .o = {{.fd = -1}, {.fd = -1}, {.fd = -1}},
        };
        uint32_t timeout_ms = req.timeout_ms;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, &old);

        for (size_t i = 0; i < req.n_env && !bad; i++)
                if (!env_entry_ok(req.env[i]))
                        bad = req.env[i];
        if (bad) {
                init_send_error(c, "invalid_argument",
                                "environment entry is not NAME=VALUE: %.200s", bad);
                goto out;
        }
        const char *cwd = req.cwd ? req.cwd : conf->workdir;
        cwdfd = init_open(conf, cwd, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
        if (cwdfd < 0) {
                if (cwdfd == -ENOENT)
                        init_send_error(c, "not_found", "working directory does not exist: %.1024s",
                                        cwd);
                else
                        init_send_errno(c, -cwdfd, cwd);
                goto out;
        }

        /* Looked for at every exec: a box may install bash, or have no shell. */
        const char *shell = init_shell();
        if (req.command && !shell) {
                init_send_error(c, "unsupported", INIT_NO_SHELL);
                goto out;
        }
        if (req.user && req.user[0]) {
                _cleanup_free_ char *why = NULL;
                if (init_user_resolve(conf, req.user, &user, &why) < 0) {
                        init_send_error(c, "invalid_argument", "%s", why);
                        goto out;
                }
        }

        sfd = session_sigchld(&chld);
        if (sfd < 0) {
                init_send_error(c, "internal", "signalfd: %s", strerror(errno));
                goto out;
        }
        /* The timeout covers a capture of the login environment too. */
        st.start_ms = ab_now_ms();
        uint64_t deadline = timeout_ms ? st.start_ms + timeout_ms : 0;
        plan_exec(&plan, &req, conf, shell, &user, sfd, deadline);

        if (req.stdin_len > 0 || req.stdin_stream)
                r = pipe_pair(in);
        else if ((null_in = shared_null()) < 0)
                r = pipe_pair(in); /* no /dev/null: an empty pipe, closed at once */
        if (r == 0)
                r = pipe_pair(out);
        if (r == 0)
                r = pipe_pair(err);
        if (r < 0) {
                init_send_error(c, "internal", "cannot create pipes: %s", strerror(-r));
                goto out;
        }
        if (req.stdin_len > 0) {
                st.in_buf = xmalloc(req.stdin_len);
                memcpy(st.in_buf, req.stdin_data, req.stdin_len);
                st.in_len = req.stdin_len;
        }

        /* The command's umask on the session, for vspawn's child; put back
         * for the session's next request. */
        if (plan.set_umask)
                um = umask(plan.umask);
        int child_in = in[0] >= 0 ? in[0] : null_in;
        st.pid = spawn_child(child_in, out[1], err[1], cwdfd, &plan);
        if (st.pid < 0)
                st.pid = fork();
        if (st.pid == 0)
                run_child(child_in, out[1], err[1], cwdfd, &plan);
        if (plan.set_umask)
                umask(um);
        if (st.pid < 0) {
                init_send_error(c, "internal", "cannot fork: %s", strerror(errno));
                goto out;
        }

        /* req points into the reader's buffer, which the loop reuses. */
        abp_exec_req_clear(&req);
        plan_free(&plan);
        if (in[0] >= 0)
                close(in[0]);
        close(out[1]);
        close(err[1]);
        in[0] = out[1] = err[1] = -1;
        st.in_fd = steal_fd(&in[1]);
        if (st.in_fd >= 0)
                set_nonblock(st.in_fd);
        st.o[1].fd = steal_fd(&out[0]);
        st.o[2].fd = steal_fd(&err[0]);
        set_nonblock(st.o[1].fd);
        set_nonblock(st.o[2].fd);

        bool timed_out = run_loop(&st, sfd, deadline);
        if (st.gone) {
                /* The client hung up (or spoke garbage) mid-exec: kill the tree. */
                init_kill_tree(st.pid, on_reaped, &st);
                if (st.bad) {
                        st.out.len = 0;
                        init_send_error(c, "invalid_argument", "unexpected frame during exec");
                }
                goto out;
        }
        if (timed_out) {
                init_kill_tree(st.pid, on_reaped, &st);
                st.end_ms = ab_now_ms();
        }
        close_stdin(&st);
        drain(&st);

        abp_exit ex = {
            .timed_out = timed_out,
            .truncated = st.truncated,
            .duration_ms = st.end_ms - st.start_ms,
            .stdout_bytes = st.o[1].total,
            .stderr_bytes = st.o[2].total,
        };
        if (timed_out)
                ex.exit_code = ABP_TIMEOUT_EXIT;
        else if (WIFEXITED(st.status))
                ex.exit_code = WEXITSTATUS(st.status);
        else if (WIFSIGNALED(st.status))
                ex.exit_code = 128 + WTERMSIG(st.status);
        /* The connection may carry another request when the command is
         * all gone and no stdin frame can follow. */
        again = !timed_out && !st.in_stream && st.o[1].fd < 0 && st.o[2].fd < 0 && nothing_left();
        ex.again = again;
        if (abp_enc_exit(&st.out, &ex) < 0)
                abort();
        finish(&st, sfd, again);
        again = again && !st.gone && c->fd >= 0;

out:
        sigprocmask(SIG_SETMASK, &old, NULL);
        close_stdin(&st);
        for (int i = 1; i <= 2; i++)
                if (st.o[i].fd >= 0)
                        close(st.o[i].fd);
        close_pair(in);
        close_pair(out);
        close_pair(err);
        free(st.in_buf);
        abp_buf_free(&st.out);
        abp_exec_req_clear(&req);
        plan_free(&plan);
        init_user_free(&user);
        return again;
}
