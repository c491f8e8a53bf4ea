/* Starting a box (see docs/architecture.md, "Starting a box"):
 *
 *  caller --fork--> P  host root; joins the box cgroup; private mount namespace;
 *     makes the box's user namespace (uid map 0..65535 -> the box's range) with
 *     a child born in it (U, killed at once), and builds the rootfs with it,
 *     idmapped (rootfs.c)
 *  P --vfork--> C  (shared memory, P asleep until the exec) pid 1 of a new pid
 *     namespace, still host root in P's mount namespace: mounts the box's /proc
 *     (so no fully visible host /proc is needed), joins the box's user
 *     namespace, becomes root there, unshares mount (a locked copy of P's), ipc,
 *     uts, net and cgroup namespaces, mounts /dev/pts, pivots into the root,
 *     brings lo up, sets rlimits, Landlock and seccomp, and execs agentbox-init
 *     from a sealed memfd.
 *
 * Nobody waits for anybody on the way: C needs nothing from P, and P reports
 * the init's pid once C has exec'd. Errors travel back to the caller over one
 * CLOEXEC pipe, as NUL-terminated messages: 'I' + init pid, or 'E' + why. */
#include "native/box.h"
#include "native/landlock.h"
#include "native/rootfs.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <net/if.h>
#include <poll.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#define BOX_NS_FLAGS    (CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET | CLONE_NEWCGROUP)
#define UID_RANGE       65536u
#define SPAWN_TIMEOUT_S 15
#define SETUP_STACK     (512 * 1024) /* P: rootfs.c keeps paths on the stack */
#define INIT_STACK      (256 * 1024) /* C */
#define HOLDER_STACK    (16 * 1024)  /* U */

/* Message on the report pipe: 'E' + code byte + text, or 'I' + pid. */
static void report(int fd, char kind, int code, const char *fmt, ...)
{
        char buf[1024];
        int n = snprintf(buf, sizeof(buf), "%c%c", kind, (char)('A' + code));
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
        va_end(ap);
        if (m < 0)
                m = 0;
        size_t len =
            (size_t)n +
            ((size_t)m < sizeof(buf) - (size_t)n ? (size_t)m : sizeof(buf) - (size_t)n - 1);
        /* One write per message, NUL-terminated: two may arrive in one read. */
        (void)!write(fd, buf, len + 1);
}

/* P, U and C run on stacks of their own in memory they share with their
 * parent. AddressSanitizer, asked at each call of a noreturn function to
 * clean the caller thread's stack, would find a stack it does not know and
 * warn (once per process): those calls are made from functions it does not
 * instrument. */
#define NO_ASAN __attribute__((no_sanitize_address))

static void die(int fd, ab_code code, int e, const char *what) __attribute__((noreturn));
NO_ASAN static void die(int fd, ab_code code, int e, const char *what)
{
        if (e)
                report(fd, 'E', code, "%s: %s", what, strerror(e));
        else
                report(fd, 'E', code, "%s", what);
        _exit(1);
}

static int write_str(const char *path, const char *s)
{
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int r = ab_write_all(fd, s, strlen(s));
        close(fd);
        return r;
}

static int lo_up(void)
{
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return -errno;
        struct ifreq ifr = {0};
        snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
        int r = 0;
        if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
                r = -errno;
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        if (r == 0 && ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
                r = -errno;
        close(s);
        return r;
}

static int write_maps(pid_t pid, uid_t base)
{
        char path[64], map[64];
        snprintf(map, sizeof(map), "0 %u %u", (unsigned)base, UID_RANGE);
        snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
        int r = write_str(path, map);
        if (r < 0)
                return r;
        snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
        return write_str(path, map);
}

/* The helper of idmap_userns: born in the new user namespace, it only has
 * to exist until its namespace is opened. It shares P's memory (no page
 * tables to copy), so it touches nothing but its own stack and makes no
 * call that could fail (a failing libc call would write P's errno). */
NO_ASAN static int userns_holder(void *arg)
{
        /* Dies with P (prctl cannot fail with these arguments). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != *(pid_t *)arg)
                _exit(1);
        for (;;)
                pause(); /* until SIGKILL */
        return 0;
}

/* The box's user namespace (0..65535 -> base..): it serves the idmapped
 * mounts of the rootfs, then the box's init joins it (setns), so no process
 * ever waits for another to write its map. Made by a child born in it (clone
 * with CLONE_NEWUSER: the namespace exists when clone returns), killed once
 * the returned fd holds the namespace; *holder is that child, to be reaped
 * off the critical path. */
static int idmap_userns(uid_t base, char *stack, pid_t *holder)
{
        pid_t self = getpid();
        pid_t u =
            clone(userns_holder, stack + HOLDER_STACK, CLONE_VM | CLONE_NEWUSER | SIGCHLD, &self);
        if (u < 0)
                return -errno;
        *holder = u;
        int r = write_maps(u, base);
        int fd = -1;
        if (r == 0) {
                char path[64];
                snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)u);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        r = -errno;
        }
        kill(u, SIGKILL);
        return r < 0 ? r : fd;
}

/* Capabilities root keeps inside a box (in its user namespace): what package
 * managers and ordinary admin work need, as in Docker's default set. Dropped
 * from the bounding set, so nothing in the box can ever regain the rest: no
 * CAP_SYS_PTRACE (so /proc/1/mem of the non-dumpable init stays out of
 * reach), no CAP_SYS_ADMIN, no CAP_NET_ADMIN. */
static const int kept_caps[] = {
    CAP_CHOWN,      CAP_DAC_OVERRIDE, CAP_FOWNER,      CAP_FSETID,           CAP_KILL,
    CAP_SETGID,     CAP_SETUID,       CAP_SETPCAP,     CAP_NET_BIND_SERVICE, CAP_NET_RAW,
    CAP_SYS_CHROOT, CAP_MKNOD,        CAP_AUDIT_WRITE, CAP_SETFCAP};

static int drop_caps(void)
{
        for (int cap = 0; cap <= 63; cap++) {
                bool keep = false;
                for (size_t i = 0; i < AB_ARRAY_LEN(kept_caps); i++)
                        keep |= kept_caps[i] == cap;
                if (keep)
                        continue;
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
                        if (errno == EINVAL)
                                break; /* past the kernel's last capability */
                        return -errno;
                }
        }
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
                return -errno;
        return 0;
}

/* True once P (a pidfd) has exited: C must not outlive an abandoned start. */
static bool parent_gone(int pidfd)
{
        struct pollfd p = {pidfd, POLLIN, 0};
        return poll(&p, 1, 0) != 0;
}

/* Files of /proc that tell about the host rather than the box (its disks
 * and their traffic, the kernel's build configuration, timers and
 * scheduler state of every host process, its hardware): covered, a file by
 * /dev/null, a directory by an empty read-only tmpfs (docs/security.md,
 * "Root-only host files"). What is missing on this kernel is skipped. */
static const char *const proc_masked[] = {"diskstats",   "config.gz",     "timer_list",
                                          "sched_debug", "latency_stats", "timer_stats",
                                          "acpi",        "scsi",          "asound"};

/* A cover for what `at` is (0 = file, else directory): a detached mount or -errno. */
NO_ASAN static int proc_cover(bool dir)
{
        int fs = -1, tree = -1;
        if (dir) {
                fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
                if (fs >= 0 &&
                    syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", "none", 0) == 0 &&
                    syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", "4k", 0) == 0 &&
                    syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "nr_inodes", "1", 0) == 0 &&
                    syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", "0555", 0) == 0 &&
                    syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
                        tree = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                                            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
                                                MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
        } else {
                tree = (int)syscall(SYS_open_tree, AT_FDCWD, "/dev/null",
                                    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
                struct mount_attr a = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
                                                   MOUNT_ATTR_NOEXEC};
                if (tree >= 0 &&
                    syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0) {
                        close(tree);
                        tree = -1;
                }
        }
        int e = errno;
        if (fs >= 0)
                close(fs);
        errno = e;
        return tree < 0 ? -errno : tree;
}

/* Covers proc_masked[] in the proc mount whose root is `proc`. 0 or -errno. */
NO_ASAN static int proc_mask(int proc)
{
        for (size_t i = 0; i < AB_ARRAY_LEN(proc_masked); i++) {
                int at = openat(proc, proc_masked[i], O_PATH | O_NOFOLLOW | O_CLOEXEC);
                if (at < 0) {
                        if (errno == ENOENT)
                                continue;
                        return -errno;
                }
                struct stat st;
                int r = fstat(at, &st) < 0 ? -errno : proc_cover(S_ISDIR(st.st_mode));
                if (r >= 0) {
                        int tree = r;
                        r = syscall(SYS_move_mount, tree, "", at, "",
                                    MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0
                                ? -errno
                                : 0;
                        close(tree);
                }
                close(at);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The box's /proc (of C's pid namespace) on root/proc, onto an fd reached
 * without following symlinks (binds.h), with proc_masked[] covered.
 * 0 or -errno. */
NO_ASAN static int mount_proc(const char *root, uid_t base)
{
        int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0)
                return -errno;
        int at = ab_mount_point(rfd, "/proc", base);
        close(rfd);
        if (at < 0)
                return at;
        int r = 0, fs = (int)syscall(SYS_fsopen, "proc", FSOPEN_CLOEXEC), tree = -1;
        if (fs < 0 || syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", "proc", 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 ||
            (tree = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                                 MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)) < 0 ||
            syscall(SYS_move_mount, tree, "", at, "",
                    MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                r = -errno;
        if (r == 0)
                r = proc_mask(tree); /* tree: the mounted proc now */
        if (tree >= 0)
                close(tree);
        if (fs >= 0)
                close(fs);
        close(at);
        return r;
}

typedef struct init_args {
        const ab_spawn_spec *s;
        int out;    /* the caller's report pipe */
        int sock;   /* the listening init.sock, becomes init's fd 3 */
        int exe;    /* sealed memfd of agentbox-init */
        int userns; /* the box's user namespace (idmap_userns) */
        int parent; /* pidfd of P */
} init_args;

/* C: pid 1 of the box. A vfork-like child of P (shared memory, P suspended
 * until the exec), so nothing here may rely on P running. Never returns. */
NO_ASAN static int run_init(void *arg)
{
        const init_args *a = arg;
        const ab_spawn_spec *s = a->s;
        int rep = a->out;
        char root[4200];
        /* Until init runs, die with P (which dies with the caller). */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
                die(rep, AB_E_INTERNAL, errno, "PR_SET_PDEATHSIG");
        if (parent_gone(a->parent))
                _exit(1);
        /* The OOM killer should pick user processes, never init; init's
         * sessions raise their own score back (raising needs no privilege).
         * Best effort: without CAP_SYS_RESOURCE (some container hosts) init
         * keeps score 0 and, with its tiny RSS, is still the last candidate. */
        (void)write_str("/proc/self/oom_score_adj", "-1000");
        snprintf(root, sizeof(root), "%s/root", s->box_dir);

        /* Still host root: mount the box's own /proc before entering the user
         * namespace, onto an fd of the root (never through a box's symlink). */
        int r = mount_proc(root, s->uid_base);
        if (r == -ELOOP || r == -ENOTDIR)
                die(rep, AB_E_INVALID, -r,
                    "mount /proc: a symlink or a file in the box's own layer is in the way of "
                    "the box's /proc (mounts never follow the box's symlinks)");
        if (r < 0)
                die(rep, AB_E_INTERNAL, -r, "mount /proc");
        /* From here on paths are relative to the root: once in the user namespace
         * this process can no longer traverse the host's 0700 box directory. */
        if (chdir(root) < 0)
                die(rep, AB_E_INTERNAL, errno, "chdir root");
        if (setns(a->userns, CLONE_NEWUSER) < 0)
                die(rep, AB_E_UNSUPPORTED, errno, "join the box's user namespace");
        close(a->userns);
        if (setresgid(0, 0, 0) < 0 || setgroups(0, NULL) < 0 || setresuid(0, 0, 0) < 0)
                die(rep, AB_E_INTERNAL, errno, "become root of the box's user namespace");
        /* setresuid cleared the death signal: set it again, look again. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
                die(rep, AB_E_INTERNAL, errno, "PR_SET_PDEATHSIG");
        if (parent_gone(a->parent))
                _exit(1);
        close(a->parent);
        if (unshare(BOX_NS_FLAGS) < 0)
                die(rep, AB_E_UNSUPPORTED, errno, "unshare the box namespaces");

        if (mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                  "newinstance,ptmxmode=0666,mode=620,gid=5") < 0)
                die(rep, AB_E_INTERNAL, errno, "mount /dev/pts");
        if (sethostname(s->id, strlen(s->id)) < 0)
                die(rep, AB_E_INTERNAL, errno, "sethostname");
        r = lo_up();
        if (r < 0)
                die(rep, AB_E_INTERNAL, -r, "bring up loopback");
        /* The copied root mount is locked and pivot_root refuses locked mounts:
         * put an unlocked recursive clone of it on top and step onto it. */
        int tree = (int)syscall(SYS_open_tree, AT_FDCWD, ".",
                                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
        if (tree < 0)
                die(rep, AB_E_INTERNAL, errno, "clone the root mount");
        if (syscall(SYS_move_mount, tree, "", AT_FDCWD, ".", MOVE_MOUNT_F_EMPTY_PATH) < 0)
                die(rep, AB_E_INTERNAL, errno, "attach the root mount");
        if (fchdir(tree) < 0)
                die(rep, AB_E_INTERNAL, errno, "enter the root mount");
        close(tree);
        if (syscall(SYS_pivot_root, ".", ".") < 0)
                die(rep, AB_E_INTERNAL, errno, "pivot_root");
        if (umount2(".", MNT_DETACH) < 0)
                die(rep, AB_E_INTERNAL, errno, "detach the old root");
        if (chdir("/workspace") < 0)
                die(rep, AB_E_INTERNAL, errno, "chdir /workspace");

        struct rlimit nofile = {s->limits->nofile, s->limits->nofile};
        struct rlimit core = {0, 0};
        if (setrlimit(RLIMIT_NOFILE, &nofile) < 0 || setrlimit(RLIMIT_CORE, &core) < 0)
                die(rep, AB_E_INTERNAL, errno, "setrlimit");

        if (dup2(a->sock, 3) < 0)
                die(rep, AB_E_INTERNAL, errno, "dup2 socket");
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
                die(rep, AB_E_INTERNAL, errno, "open /dev/null");

        if ((r = drop_caps()) < 0)
                die(rep, AB_E_INTERNAL, -r, "drop capabilities");
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                die(rep, AB_E_INTERNAL, errno, "no_new_privs");
        if ((r = ab_landlock_apply()) < 0)
                die(rep, AB_E_INTERNAL, -r, "landlock");
        if ((r = ab_seccomp_install(s->bpf)) < 0)
                die(rep, AB_E_INTERNAL, -r, "seccomp");

        /* Commands may hold all but a few pids: init keeps room to serve. */
        char maxprocs[24];
        uint64_t mp = s->limits->pids > 32 ? s->limits->pids - 16 : s->limits->pids / 2;
        snprintf(maxprocs, sizeof(maxprocs), "%llu", (unsigned long long)(mp ? mp : 1));
        char *const argv[] = {"agentbox-init", "--fd",      "3", "--max-procs",
                              maxprocs,        "--prewarm", NULL};
        /* init must outlive P. */
        if (prctl(PR_SET_PDEATHSIG, 0) < 0)
                die(rep, AB_E_INTERNAL, errno, "PR_SET_PDEATHSIG");
        char *const envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                              "container=agentbox", NULL};
        syscall(SYS_execveat, a->exe, "", argv, envp, AT_EMPTY_PATH);
        die(rep, AB_E_INTERNAL, errno, "exec agentbox-init");
}

/* Reads the first message ('I' + init pid, or 'E' + code + text) that P
 * left on the report pipe (P has exited: the pipe holds all it wrote).
 * Returns the init pid, or -1 with *code and msg. */
static pid_t collect(int rep, ab_code *code, char *msg, size_t msglen)
{
        char buf[1100];
        size_t len = 0;
        *code = AB_E_INTERNAL;
        snprintf(msg, msglen, "box setup process died");
        while (!memchr(buf, '\0', len) && len < sizeof(buf)) {
                ssize_t n = read(rep, buf + len, sizeof(buf) - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return -1; /* EOF before any message: P died */
                len += (size_t)n;
        }
        buf[sizeof(buf) - 1] = '\0';
        if (len >= 2 && buf[0] == 'I') {
                pid_t init = (pid_t)atoi(buf + 2);
                if (init > 0)
                        return init;
        } else if (len >= 2 && buf[0] == 'E') {
                *code = (ab_code)(buf[1] - 'A');
                snprintf(msg, msglen, "%.1000s", buf + 2);
        }
        return -1;
}

typedef struct setup_args {
        const ab_spawn_spec *s;
        pid_t parent; /* the caller's process */
        int out;      /* the report pipe */
        int sock;
        int exe;
} setup_args;

/* Reports err (and frees it: P shares the caller's heap) and exits. */
static void die_err(int out, ab_err *err) __attribute__((noreturn));
NO_ASAN static void die_err(int out, ab_err *err)
{
        report(out, 'E', err->code, "%s", err->msg);
        ab_err_free(&err);
        _exit(1);
}

static int make_cgroup(const ab_spawn_spec *s, ab_err **err)
{
        for (int attempt = 0;; attempt++) {
                if (ab_cg_create(s->cg, s->id, s->cg_limits, err) == 0)
                        return 0;
                /* An rm elsewhere may have removed the empty parent between
                 * our mkdir of it and of the box's cgroup: go again. */
                if ((*err)->errnum != ENOENT || attempt >= 3)
                        return -1;
                ab_err_free(err);
        }
}

/* While the disk is being mounted: make the box's cgroup and join it (on
 * cgroup v1 joining waits for an RCU grace period), so that C, the init, is
 * born inside it. */
static int join_cgroup(void *ud, ab_err **err)
{
        const ab_spawn_spec *s = ud;
        if (make_cgroup(s, err) < 0)
                return -1;
        return ab_cg_attach(s->cg, s->id, getpid(), err);
}

/* Handlers of the caller (the server's) must not run here: P shares its
 * memory. Back to the default action for every caught signal. */
static void default_signals(void)
{
        for (int sig = 1; sig < NSIG; sig++) {
                struct sigaction sa;
                if (sigaction(sig, NULL, &sa) < 0 || sa.sa_handler == SIG_DFL ||
                    sa.sa_handler == SIG_IGN)
                        continue;
                sa.sa_handler = SIG_DFL;
                sa.sa_flags = 0;
                sigaction(sig, &sa, NULL);
        }
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
}

/* P: the setup process, a vfork-like child of the caller (clone with
 * CLONE_VM | CLONE_VFORK: no page tables to copy or tear down, however big
 * the server is; the calling thread sleeps until P exits, the server's other
 * threads go on). It shares the caller's memory, so what it allocates it
 * frees, and it ends with _exit. Reports 'I' + init pid, or 'E' + why. */
NO_ASAN static int run_setup(void *arg)
{
        const setup_args *a = arg;
        const ab_spawn_spec *s = a->s;
        int out = a->out;
        ab_err *err = NULL;
        default_signals();
        /* If the process that started us dies, so do we: a start nobody will
         * record must not leave a box behind (init itself never gets this).
         * A start that hangs ends here too (SIGALRM's default action). */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != a->parent)
                _exit(1);
        alarm(SPAWN_TIMEOUT_S);
        if (unshare(CLONE_NEWNS) < 0)
                die(out, AB_E_UNSUPPORTED, errno, "unshare mount namespace");
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                die(out, AB_E_INTERNAL, errno, "make mounts private");

        char *stacks = mmap(NULL, HOLDER_STACK + INIT_STACK, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (stacks == MAP_FAILED)
                die(out, AB_E_INTERNAL, errno, "mmap");
        pid_t holder = -1;
        int userns = idmap_userns(s->uid_base, stacks, &holder);
        if (userns < 0)
                die(out, AB_E_UNSUPPORTED, -userns, "create a user namespace for the box");
        ab_rootfs_spec rs = {
            .box_dir = s->box_dir,
            .base = s->base,
            .layers = s->layers,
            .skills_dir = s->skills_dir,
            .hostname = s->id,
            .hide = s->hide,
            .uid_base = s->uid_base,
            .disk_uid_base = s->disk_uid_base,
            .userns_fd = userns,
            .tmp_mib = s->limits->memory_mib / 2 ? s->limits->memory_mib / 2 : 16,
            .unreadable = s->unreadable,
            .while_mounting = join_cgroup,
            .ud = (void *)s,
            .binds = s->binds,
            .n_binds = s->n_binds,
        };
        if (ab_rootfs_build(&rs, &err) < 0)
                die_err(out, err);

        /* C shares our memory and we sleep until it has exec'd (or died):
         * no page tables to copy, none to tear down, and no hand-off back
         * and forth - C needs nothing from us on the way. */
        int self = (int)syscall(SYS_pidfd_open, getpid(), 0);
        if (self < 0)
                die(out, AB_E_UNSUPPORTED, errno, "pidfd_open");
        init_args ia = {
            .s = s, .out = out, .sock = a->sock, .exe = a->exe, .userns = userns, .parent = self};
        pid_t c = clone(run_init, stacks + HOLDER_STACK + INIT_STACK,
                        CLONE_VM | CLONE_VFORK | CLONE_NEWPID | SIGCHLD, &ia);
        if (c < 0)
                die(out, AB_E_INTERNAL, errno, "start the box init");
        int st;
        if (waitpid(c, &st, WNOHANG) != 0) /* it died before the exec (and said why) */
                die(out, AB_E_INTERNAL, 0, "the box init died while starting");
        report(out, 'I', 0, "%d", (int)c);
        while (waitpid(holder, NULL, 0) < 0 && errno == EINTR)
                ;
        ab_clone_stack_free(stacks, HOLDER_STACK + INIT_STACK);
        _exit(0);
}

uint64_t ab_proc_start_time(pid_t pid)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        _cleanup_free_ char *buf = NULL;
        if (ab_read_file(AT_FDCWD, path, &buf, NULL) < 0)
                return 0;
        /* comm (field 2) may hold spaces and parens: fields restart after the
         * last ')'. Then come " S" (state, field 3) ... starttime (field 22). */
        char *p = strrchr(buf, ')');
        if (!p || p[1] != ' ' || !p[2])
                return 0;
        p += 2;
        if (*p == 'Z' || *p == 'X')
                return 0; /* dead, waiting to be reaped: not alive */
        for (int field = 3; field < 22 && p; field++) {
                p = strchr(p, ' ');
                if (p)
                        p++;
        }
        if (!p)
                return 0;
        return strtoull(p, NULL, 10);
}

bool ab_init_alive(pid_t pid, uint64_t start_time)
{
        if (pid <= 0)
                return false;
        uint64_t st = ab_proc_start_time(pid);
        return st != 0 && st == start_time;
}

int ab_box_seal_init(int exe)
{
        int m = memfd_create("agentbox-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (m < 0)
                return -errno;
        struct stat st;
        if (fstat(exe, &st) < 0)
                goto fail;
        off_t off = 0;
        while (off < st.st_size) {
                ssize_t n = sendfile(m, exe, &off, (size_t)(st.st_size - off));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        goto fail;
        }
        /* A box can never change the binary its pid 1 runs from (cf. CVE-2019-5736). */
        if (fcntl(m, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0)
                goto fail;
        return m;
fail:;
        int e = errno ? errno : EIO;
        close(m);
        return -e;
}

static int listen_socket(const char *box_dir, ab_err **err)
{
        _cleanup_close_ int dfd = open(box_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s", box_dir);
        unlinkat(dfd, "init.sock", 0);
        _cleanup_close_ int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "socket");
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof(a.sun_path), "/proc/self/fd/%d/init.sock", dfd);
        mode_t old = umask(0077);
        int r = bind(s, (struct sockaddr *)&a, sizeof(a));
        umask(old);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "bind %s/init.sock", box_dir);
        if (listen(s, 256) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "listen");
        return steal_fd(&s);
}

int ab_box_spawn(const ab_spawn_spec *s, pid_t *init_pid, uint64_t *init_start, ab_err **err)
{
        _cleanup_close_ int sock = listen_socket(s->box_dir, err);
        if (sock < 0)
                return -1;
        int out[2];
        if (pipe2(out, O_CLOEXEC) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "pipe");
        _cleanup_close_ int rd = out[0];
        char *stack = mmap(NULL, SETUP_STACK, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (stack == MAP_FAILED) {
                int e = errno;
                close(out[1]);
                return ab_err_set(err, AB_E_INTERNAL, e, "mmap");
        }
        setup_args a = {
            .s = s, .parent = getpid(), .out = out[1], .sock = sock, .exe = s->init_memfd};
        /* Back here once P has exited (it never execs). */
        pid_t p = clone(run_setup, stack + SETUP_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
        int e = errno;
        ab_clone_stack_free(stack, SETUP_STACK);
        close(out[1]);
        if (p < 0)
                return ab_err_set(err, AB_E_INTERNAL, e, "start the box setup process");
        ab_code code;
        char msg[1024];
        pid_t init = collect(rd, &code, msg, sizeof(msg));
        int st = 0;
        while (waitpid(p, &st, 0) < 0 && errno == EINTR)
                ;
        if (init < 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
                return ab_err_set(err, AB_E_TIMEOUT, 0, "box %s did not start within %d s", s->id,
                                  SPAWN_TIMEOUT_S);
        if (init < 0)
                return ab_err_set(err, code ? code : AB_E_INTERNAL, 0, "cannot start box %s: %s",
                                  s->id, msg);
        *init_pid = init;
        *init_start = ab_proc_start_time(init);
        if (!*init_start)
                return ab_err_set(err, AB_E_INTERNAL, 0, "box %s: init exited right after start",
                                  s->id);
        return 0;
}

int ab_box_kill(pid_t pid, uint64_t start_time, ab_err **err)
{
        if (!ab_init_alive(pid, start_time))
                return 0;
        int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pfd < 0) {
                if (errno == ESRCH)
                        return 0;
                return ab_err_set(err, AB_E_INTERNAL, errno, "pidfd_open %d", (int)pid);
        }
        /* The pid was verified a moment ago; re-check after pinning it with the pidfd. */
        if (!ab_init_alive(pid, start_time)) {
                close(pfd);
                return 0;
        }
        int r = (int)syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
        if (r < 0 && errno != ESRCH) {
                int e = errno;
                close(pfd);
                return ab_err_set(err, AB_E_INTERNAL, e, "kill box init %d", (int)pid);
        }
        struct pollfd p = {pfd, POLLIN, 0};
        int pr;
        do
                pr = poll(&p, 1, 5000);
        while (pr < 0 && errno == EINTR);
        close(pfd);
        if (pr == 0)
                return ab_err_set(err, AB_E_TIMEOUT, 0, "box init %d did not exit", (int)pid);
        return 0;
}
