/* test_seccomp.c - the box's system-call filter and Landlock restrictions.
 *
 * Every check runs its probe in a forked child, once unconfined (the control:
 * it must not already fail the way we expect, or the check proves nothing) and
 * once confined; the test process itself never installs anything. Probes use
 * arguments that make the unconfined call fail harmlessly (bad flags, bad fds,
 * missing paths) so the control can run as root without touching the host. */
#include "base/err.h"
#include "native/landlock.h"
#include "native/seccomp.h"
#include "tap.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/timex.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef __NR_open_tree_attr
#define __NR_open_tree_attr 467
#endif
#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT 0x40000000
#endif

enum confine { NONE = 0, SECCOMP = 1, LANDLOCK = 2 };

typedef long (*probe_fn)(unsigned long arg);

struct outcome {
        bool reported; /* the probe returned and the child wrote ret */
        bool signaled;
        int code; /* exit status, or the signal */
        long ret; /* >= 0, or -errno */
};

static ab_bpf filter;
static volatile long *shared; /* [0] = reported, [1] = ret; MAP_SHARED */
static pid_t sibling = -1;    /* a process for ptrace to aim at */
static int pty_slave = -1;
static uint64_t parent_secret = 0x5ec2e75ec2e7ULL;
static char tmpdir[64];
static struct sockaddr_un abstract_addr;
static socklen_t abstract_len;

static long ret_of(long r)
{
        return r < 0 ? -errno : r;
}
#define RET(expr) ret_of((long)(expr))

static struct outcome run(probe_fn fn, unsigned long arg, int how)
{
        struct outcome o = {.ret = 0};
        shared[0] = 0;
        shared[1] = 0;
        pid_t pid = fork();
        if (pid < 0) {
                o.ret = -errno;
                return o;
        }
        if (pid == 0) {
                alarm(30);
                if ((how & LANDLOCK) && ab_landlock_apply() < 0)
                        _exit(120);
                if ((how & SECCOMP) && ab_seccomp_install(&filter) < 0)
                        _exit(121);
                long r = fn(arg);
                shared[1] = r;
                shared[0] = 1;
                _exit(0);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR) {
                        o.ret = -errno;
                        return o;
                }
        o.signaled = WIFSIGNALED(st);
        o.code = o.signaled ? WTERMSIG(st) : WEXITSTATUS(st);
        o.reported = shared[0] == 1 && !o.signaled && o.code == 0;
        o.ret = shared[1];
        return o;
}

static const char *describe(const struct outcome *o, char *buf, size_t len)
{
        if (o->signaled)
                snprintf(buf, len, "killed by signal %d", o->code);
        else if (!o->reported)
                snprintf(buf, len, "child exited %d without reporting", o->code);
        else if (o->ret < 0)
                snprintf(buf, len, "%s", strerrorname_np((int)-o->ret) ?: "unknown errno");
        else
                snprintf(buf, len, "returned %ld", o->ret);
        return buf;
}

/* The confined call must fail with want; the unconfined one must not. */
static void expect_errno(const char *name, probe_fn fn, unsigned long arg, int how, int want)
{
        char a[64], b[64];
        struct outcome plain = run(fn, arg, NONE);
        struct outcome conf = run(fn, arg, how);
        bool control_ok = !(plain.reported && plain.ret == -want);
        if (!control_ok) {
                tap_ok(1, "%s # SKIP unconfined it already fails with %s", name,
                       strerrorname_np(want));
                return;
        }
        tap_ok(conf.reported && conf.ret == -want, "%s -> %s (unconfined: %s)", name,
               strerrorname_np(want), describe(&plain, a, sizeof(a)));
        if (!(conf.reported && conf.ret == -want))
                tap_diag("  confined: %s", describe(&conf, b, sizeof(b)));
}

/* The confined call must succeed (return >= 0). */
static void expect_ok(const char *name, probe_fn fn, unsigned long arg, int how)
{
        char b[64];
        struct outcome conf = run(fn, arg, how);
        tap_ok(conf.reported && conf.ret >= 0, "%s works when confined", name);
        if (!(conf.reported && conf.ret >= 0))
                tap_diag("  confined: %s", describe(&conf, b, sizeof(b)));
}

/* ---- probes: denied ---------------------------------------------------- */

static long p_io_uring_setup(unsigned long a)
{
        return RET(syscall(SYS_io_uring_setup, 0, NULL));
}
static long p_io_uring_enter(unsigned long a)
{
        return RET(syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
}
static long p_io_uring_register(unsigned long a)
{
        return RET(syscall(SYS_io_uring_register, -1, 0, NULL, 0));
}
static long p_keyctl(unsigned long a)
{
        return RET(syscall(SYS_keyctl, 0x7fff, 0, 0, 0, 0));
}
static long p_add_key(unsigned long a)
{
        return RET(syscall(SYS_add_key, NULL, NULL, NULL, 0, 0));
}
static long p_request_key(unsigned long a)
{
        return RET(syscall(SYS_request_key, NULL, NULL, NULL, 0));
}
static long p_bpf(unsigned long a)
{
        return RET(syscall(SYS_bpf, 0x7fff, NULL, 0));
}
static long p_perf_event_open(unsigned long a)
{
        return RET(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
}
static long p_ptrace_attach(unsigned long a)
{
        return RET(ptrace(PTRACE_ATTACH, sibling, 0, 0));
}
/* Reads the parent's secret: a real cross-process read when unconfined. */
static long p_process_vm_readv(unsigned long a)
{
        uint64_t v = 0;
        struct iovec local = {&v, sizeof(v)}, remote = {&parent_secret, sizeof(v)};
        long r = RET(process_vm_readv(getppid(), &local, 1, &remote, 1, 0));
        return r == (long)sizeof(v) && v != parent_secret ? -EPROTO : r;
}
static long p_process_vm_writev(unsigned long a)
{
        return RET(process_vm_writev(getppid(), NULL, 0, NULL, 0, 1));
}
static long p_pidfd_getfd(unsigned long a)
{
        return RET(syscall(SYS_pidfd_getfd, -1, 0, 0));
}
static long p_kcmp(unsigned long a)
{
        pid_t me = getpid();
        return RET(syscall(SYS_kcmp, me, me, 0 /* KCMP_FILE */, 1, 1));
}
static long p_kexec_load(unsigned long a)
{
        return RET(syscall(SYS_kexec_load, 0, 0, NULL, 0xdead0000UL));
}
static long p_kexec_file_load(unsigned long a)
{
        return RET(syscall(SYS_kexec_file_load, -1, -1, 0, NULL, 0xdead0000UL));
}
static long p_init_module(unsigned long a)
{
        return RET(syscall(SYS_init_module, NULL, 0, ""));
}
static long p_finit_module(unsigned long a)
{
        return RET(syscall(SYS_finit_module, -1, "", 0));
}
static long p_delete_module(unsigned long a)
{
        return RET(syscall(SYS_delete_module, "agentbox_no_such_module", O_NONBLOCK));
}
static long p_userfaultfd(unsigned long a)
{
        return RET(syscall(SYS_userfaultfd, ~0));
}
static long p_mount(unsigned long a)
{
        return RET(mount("none", "/agentbox-no-such-dir", "tmpfs", 0, NULL));
}
static long p_umount2(unsigned long a)
{
        return RET(umount2("/", 0x7fff0000));
}
static long p_pivot_root(unsigned long a)
{
        return RET(syscall(SYS_pivot_root, "/agentbox-no-such-a", "/agentbox-no-such-b"));
}
static long p_open_tree(unsigned long a)
{
        return RET(syscall(__NR_open_tree, AT_FDCWD, "/", 0xffffffffU));
}
static long p_open_tree_attr(unsigned long a)
{
        return RET(syscall(__NR_open_tree_attr, AT_FDCWD, "/", 0xffffffffU, NULL, 0));
}
static long p_fsopen(unsigned long a)
{
        return RET(syscall(__NR_fsopen, "agentbox-no-such-fs", 0));
}
static long p_fsconfig(unsigned long a)
{
        return RET(syscall(__NR_fsconfig, -1, 0, NULL, NULL, 0));
}
static long p_fsmount(unsigned long a)
{
        return RET(syscall(__NR_fsmount, -1, 0, 0));
}
static long p_fspick(unsigned long a)
{
        return RET(syscall(__NR_fspick, AT_FDCWD, "/", 0xffffffffU));
}
static long p_move_mount(unsigned long a)
{
        return RET(syscall(__NR_move_mount, -1, "", -1, "", 0xffffffffU));
}
static long p_mount_setattr(unsigned long a)
{
        return RET(syscall(__NR_mount_setattr, -1, "", 0xffffffffU, NULL, 0));
}
static long p_setns(unsigned long a)
{
        return RET(setns(-1, 0));
}
static long p_unshare(unsigned long flags)
{
        return RET(syscall(SYS_unshare, flags));
}
/* Raw clone(2): flags first on x86_64. */
static long p_clone(unsigned long flags)
{
        long pid = syscall(SYS_clone, flags | SIGCHLD, 0, NULL, NULL, 0);
        if (pid == 0)
                _exit(0);
        if (pid < 0)
                return -errno;
        waitpid((pid_t)pid, NULL, 0);
        return 0;
}
static long p_clone3(unsigned long a)
{
        return RET(syscall(SYS_clone3, NULL, 0));
}
/* Raw ioctl so the request keeps whatever high bits the test gives it. */
static long p_ioctl(unsigned long request)
{
        char buf[64] = "x";
        return RET(syscall(SYS_ioctl, pty_slave, request, buf));
}
static long p_personality(unsigned long persona)
{
        return RET(syscall(SYS_personality, persona));
}
static long p_reboot(unsigned long a)
{
        return RET(syscall(SYS_reboot, 0, 0, 0, NULL));
}
static long p_swapon(unsigned long a)
{
        return RET(syscall(SYS_swapon, NULL, 0));
}
static long p_swapoff(unsigned long a)
{
        return RET(syscall(SYS_swapoff, NULL));
}
static long p_syslog(unsigned long a)
{
        return RET(syscall(SYS_syslog, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0));
}
static long p_acct(unsigned long a)
{
        return RET(acct("/agentbox-no-such-dir/acct"));
}
static long p_settimeofday(unsigned long a)
{
        return RET(syscall(SYS_settimeofday, NULL, NULL)); /* a no-op when allowed */
}
static long p_clock_settime(unsigned long a)
{
        struct timespec ts = {0};
        return RET(syscall(SYS_clock_settime, CLOCK_MONOTONIC, &ts));
}
static long p_quotactl(unsigned long a)
{
        return RET(syscall(SYS_quotactl, 0xdead, NULL, 0, NULL));
}
static long p_quotactl_fd(unsigned long a)
{
        return RET(syscall(__NR_quotactl_fd, -1, 0, 0, NULL));
}
static long p_iopl(unsigned long a)
{
        return RET(syscall(SYS_iopl, 4));
}
static long p_ioperm(unsigned long a)
{
        return RET(syscall(SYS_ioperm, 0, 0, 0));
}
/* Without a controlling terminal (setsid) vhangup has nothing to hang up. */
static long p_vhangup(unsigned long a)
{
        setsid();
        return RET(syscall(SYS_vhangup));
}
static long p_lookup_dcookie(unsigned long a)
{
        return RET(syscall(SYS_lookup_dcookie, 0, NULL, 0));
}
static long p_nfsservctl(unsigned long a)
{
        return RET(syscall(SYS_nfsservctl, 0, NULL, NULL));
}
static long p_uselib(unsigned long a)
{
        return RET(syscall(SYS_uselib, NULL));
}
static long p_open_by_handle_at(unsigned long a)
{
        return RET(syscall(SYS_open_by_handle_at, -1, NULL, 0));
}
static long p_name_to_handle_at(unsigned long a)
{
        return RET(syscall(SYS_name_to_handle_at, AT_FDCWD, "/", NULL, NULL, 0xffff));
}

/* ---- probes: allowed --------------------------------------------------- */

static long wait_status(pid_t pid)
{
        int st;
        if (waitpid(pid, &st, 0) < 0)
                return -errno;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
static long p_fork(unsigned long a)
{
        pid_t pid = fork();
        if (pid == 0)
                _exit(7);
        if (pid < 0)
                return -errno;
        return wait_status(pid) == 7 ? 0 : -EPROTO;
}
static long p_vfork(unsigned long a)
{
        pid_t pid = vfork();
        if (pid == 0)
                _exit(7);
        if (pid < 0)
                return -errno;
        return wait_status(pid) == 7 ? 0 : -EPROTO;
}
static void *thread_main(void *p)
{
        return p;
}
static long p_thread(unsigned long a)
{
        pthread_t t;
        void *res = NULL;
        int r = pthread_create(&t, NULL, thread_main, &parent_secret);
        if (r != 0)
                return -r;
        r = pthread_join(t, &res);
        if (r != 0)
                return -r;
        return res == &parent_secret ? 0 : -EPROTO;
}
static long p_exec_true(unsigned long a)
{
        pid_t pid = fork();
        if (pid == 0) {
                char *argv[] = {"true", NULL};
                execve("/bin/true", argv, environ);
                _exit(127);
        }
        if (pid < 0)
                return -errno;
        return wait_status(pid) == 0 ? 0 : -EPROTO;
}
/* bash -c 'echo ok | cat': fork, pipes, exec, wait, all under the filter. */
static long p_bash_pipeline(unsigned long a)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        pid_t pid = fork();
        if (pid == 0) {
                if (dup2(p[1], STDOUT_FILENO) < 0)
                        _exit(126);
                execl("/bin/bash", "bash", "-c", "echo ok | cat", (char *)NULL);
                _exit(127);
        }
        close(p[1]);
        char out[16] = {0};
        ssize_t n = ab_read_full(p[0], out, sizeof(out) - 1);
        close(p[0]);
        if (pid < 0)
                return -EPROTO;
        long st = wait_status(pid);
        return st == 0 && n == 3 && strcmp(out, "ok\n") == 0 ? 0 : -EPROTO;
}
/* Read-only: modes = 0. glibc routes adjtimex through clock_adjtime. */
static long p_adjtimex_read(unsigned long a)
{
        struct timex tx = {.modes = 0};
        return RET(adjtimex(&tx));
}
static long p_clock_adjtime_read(unsigned long a)
{
        struct timex tx = {.modes = 0};
        return RET(syscall(SYS_clock_adjtime, CLOCK_REALTIME, &tx));
}
static long p_tiocgwinsz(unsigned long a)
{
        struct winsize ws;
        return RET(ioctl(pty_slave, TIOCGWINSZ, &ws));
}
static long p_kill_self(unsigned long a)
{
        return RET(kill(getpid(), 0));
}

/* ---- probes: other architectures --------------------------------------- */

/* getpid through the i386 entry point (i386 number 20). */
static long p_int80(unsigned long a)
{
        long ret;
        __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
        return ret;
}
/* getpid with the x32 bit (x86_64 number 39 | __X32_SYSCALL_BIT). */
static long p_x32(unsigned long a)
{
        return RET(syscall(__X32_SYSCALL_BIT | SYS_getpid));
}

/* ---- probes: Landlock -------------------------------------------------- */

static long p_landlock_apply(unsigned long a)
{
        return ab_landlock_apply();
}
static long p_kill_parent(unsigned long a)
{
        return RET(kill(getppid(), 0));
}
/* A signal inside the domain (to our own child) must still work. */
static long p_kill_own_child(unsigned long a)
{
        pid_t pid = fork();
        if (pid == 0) {
                pause();
                _exit(0);
        }
        if (pid < 0)
                return -errno;
        long r = RET(kill(pid, SIGKILL));
        waitpid(pid, NULL, 0);
        return r;
}
static long p_abstract_connect(unsigned long a)
{
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        long r = RET(connect(fd, (struct sockaddr *)&abstract_addr, abstract_len));
        close(fd);
        return r;
}
/* mknod in tmpdir; arg is the file type. Removes what it made. */
static long p_mknod(unsigned long type)
{
        char path[128];
        snprintf(path, sizeof(path), "%s/node-%d", tmpdir, (int)getpid());
        dev_t dev = type == S_IFCHR ? makedev(1, 3) : type == S_IFBLK ? makedev(7, 0) : 0;
        long r = RET(mknod(path, (mode_t)type | 0600, dev));
        if (r == 0)
                unlink(path);
        return r;
}
static long p_create_file(unsigned long a)
{
        char path[128];
        snprintf(path, sizeof(path), "%s/file-%d", tmpdir, (int)getpid());
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        close(fd);
        return RET(unlink(path));
}

/* ---- the checks -------------------------------------------------------- */

struct deny_case {
        const char *name;
        probe_fn fn;
        unsigned long arg;
        int want;
};
static const struct deny_case denied[] = {
    {"io_uring_setup", p_io_uring_setup, 0, EPERM},
    {"io_uring_enter", p_io_uring_enter, 0, EPERM},
    {"io_uring_register", p_io_uring_register, 0, EPERM},
    {"keyctl", p_keyctl, 0, EPERM},
    {"add_key", p_add_key, 0, EPERM},
    {"request_key", p_request_key, 0, EPERM},
    {"bpf", p_bpf, 0, EPERM},
    {"perf_event_open", p_perf_event_open, 0, EPERM},
    {"ptrace(PTRACE_ATTACH) on a sibling", p_ptrace_attach, 0, EPERM},
    {"process_vm_readv of the parent", p_process_vm_readv, 0, EPERM},
    {"process_vm_writev", p_process_vm_writev, 0, EPERM},
    {"pidfd_getfd", p_pidfd_getfd, 0, EPERM},
    {"kcmp", p_kcmp, 0, EPERM},
    {"kexec_load", p_kexec_load, 0, EPERM},
    {"kexec_file_load", p_kexec_file_load, 0, EPERM},
    {"init_module", p_init_module, 0, EPERM},
    {"finit_module", p_finit_module, 0, EPERM},
    {"delete_module", p_delete_module, 0, EPERM},
    {"userfaultfd", p_userfaultfd, 0, EPERM},
    {"mount", p_mount, 0, EPERM},
    {"umount2", p_umount2, 0, EPERM},
    {"pivot_root", p_pivot_root, 0, EPERM},
    {"open_tree", p_open_tree, 0, EPERM},
    {"open_tree_attr", p_open_tree_attr, 0, EPERM},
    {"fsopen", p_fsopen, 0, EPERM},
    {"fsconfig", p_fsconfig, 0, EPERM},
    {"fsmount", p_fsmount, 0, EPERM},
    {"fspick", p_fspick, 0, EPERM},
    {"move_mount", p_move_mount, 0, EPERM},
    {"mount_setattr", p_mount_setattr, 0, EPERM},
    {"setns", p_setns, 0, EPERM},
    {"unshare(CLONE_NEWUSER)", p_unshare, CLONE_NEWUSER, EPERM},
    {"unshare(CLONE_NEWNS)", p_unshare, CLONE_NEWNS, EPERM},
    {"unshare(CLONE_NEWNET)", p_unshare, CLONE_NEWNET, EPERM},
    {"unshare(CLONE_NEWPID)", p_unshare, CLONE_NEWPID, EPERM},
    {"unshare(CLONE_NEWIPC)", p_unshare, CLONE_NEWIPC, EPERM},
    {"unshare(CLONE_NEWUTS)", p_unshare, CLONE_NEWUTS, EPERM},
    {"unshare(CLONE_NEWCGROUP)", p_unshare, CLONE_NEWCGROUP, EPERM},
    {"unshare(CLONE_NEWTIME)", p_unshare, CLONE_NEWTIME, EPERM},
    {"unshare(CLONE_FILES|CLONE_NEWUSER)", p_unshare, CLONE_FILES | CLONE_NEWUSER, EPERM},
    {"raw clone(CLONE_NEWUSER)", p_clone, CLONE_NEWUSER, EPERM},
    {"raw clone(CLONE_NEWNS)", p_clone, CLONE_NEWNS, EPERM},
    {"raw clone(CLONE_NEWPID)", p_clone, CLONE_NEWPID, EPERM},
    {"raw clone(CLONE_NEWUSER) with junk in the high 32 bits", p_clone, (1UL << 32) | CLONE_NEWUSER,
     EPERM},
    {"clone3", p_clone3, 0, ENOSYS},
    {"ioctl(TIOCSTI) on a pty", p_ioctl, TIOCSTI, EPERM},
    {"ioctl(TIOCSTI | 1 << 32) on a pty", p_ioctl, (1UL << 32) | TIOCSTI, EPERM},
    {"ioctl(TIOCLINUX)", p_ioctl, TIOCLINUX, EPERM},
    {"personality(ADDR_NO_RANDOMIZE)", p_personality, ADDR_NO_RANDOMIZE, EPERM},
    {"personality(READ_IMPLIES_EXEC)", p_personality, READ_IMPLIES_EXEC, EPERM},
    {"personality(MMAP_PAGE_ZERO)", p_personality, MMAP_PAGE_ZERO, EPERM},
    {"personality(ADDR_NO_RANDOMIZE | 1 << 31)", p_personality, 0x80000000UL | ADDR_NO_RANDOMIZE,
     EPERM},
    {"personality(0x7fffffff)", p_personality, 0x7fffffffUL, EPERM},
    {"personality(0xfffffffe)", p_personality, 0xfffffffeUL, EPERM},
    {"reboot", p_reboot, 0, EPERM},
    {"swapon", p_swapon, 0, EPERM},
    {"swapoff", p_swapoff, 0, EPERM},
    {"syslog", p_syslog, 0, EPERM},
    {"acct", p_acct, 0, EPERM},
    {"settimeofday", p_settimeofday, 0, EPERM},
    {"clock_settime", p_clock_settime, 0, EPERM},
    {"quotactl", p_quotactl, 0, EPERM},
    {"quotactl_fd", p_quotactl_fd, 0, EPERM},
    {"iopl", p_iopl, 0, EPERM},
    {"ioperm", p_ioperm, 0, EPERM},
    {"vhangup", p_vhangup, 0, EPERM},
    {"lookup_dcookie", p_lookup_dcookie, 0, EPERM},
    {"nfsservctl", p_nfsservctl, 0, EPERM},
    {"uselib", p_uselib, 0, EPERM},
    {"open_by_handle_at", p_open_by_handle_at, 0, EPERM},
    {"name_to_handle_at", p_name_to_handle_at, 0, EPERM},
};

struct allow_case {
        const char *name;
        probe_fn fn;
        unsigned long arg;
};
static const struct allow_case allowed[] = {
    {"fork + waitpid", p_fork, 0},
    {"vfork", p_vfork, 0},
    {"pthread_create + join", p_thread, 0},
    {"execve(/bin/true)", p_exec_true, 0},
    {"bash -c 'echo ok | cat'", p_bash_pipeline, 0},
    {"raw clone(SIGCHLD)", p_clone, 0},
    {"unshare(CLONE_FILES)", p_unshare, CLONE_FILES},
    {"unshare(CLONE_FS | CLONE_SYSVSEM)", p_unshare, CLONE_FS | CLONE_SYSVSEM},
    {"ioctl(TIOCGWINSZ) on a pty", p_tiocgwinsz, 0},
    {"ioctl(TIOCGWINSZ | 0x5412 << 32) on a pty", p_ioctl, (0x5412UL << 32) | TIOCGWINSZ},
    {"personality(0xffffffff) query", p_personality, 0xffffffffUL},
    {"personality(PER_LINUX)", p_personality, PER_LINUX},
    {"personality(PER_LINUX32)", p_personality, PER_LINUX32},
    {"adjtimex read-only", p_adjtimex_read, 0},
    {"clock_adjtime(CLOCK_REALTIME) read-only", p_clock_adjtime_read, 0},
    {"kill(getpid(), 0)", p_kill_self, 0},
};

static void test_build(void)
{
        _cleanup_err_ ab_err *err = NULL;
        int r = ab_seccomp_build(&filter, &err);
        tap_ok(r == 0 && filter.insns && filter.len > 0,
               "ab_seccomp_build yields a program (%u insns)", filter.len);
        if (r < 0) {
                tap_diag("  %s", err ? err->msg : "no error object");
                printf("Bail out! no filter to test\n");
                exit(1);
        }
        /* libseccomp's programs start by loading seccomp_data.arch. */
        tap_ok(filter.insns[0].code == (BPF_LD | BPF_W | BPF_ABS) && filter.insns[0].k == 4,
               "the program starts with the architecture check");

        ab_bpf empty = {0};
        TAP_IS_INT(ab_seccomp_install(&empty), -EINVAL, "installing an empty program is refused");
}

static void test_other_arches(void)
{
        char a[64], b[64];
        struct outcome plain = run(p_int80, 0, NONE);
        struct outcome conf = run(p_int80, 0, SECCOMP);
        if (!plain.reported || plain.ret <= 0) {
                tap_ok(1, "int $0x80 kills # SKIP no i386 emulation here (unconfined: %s)",
                       describe(&plain, a, sizeof(a)));
        } else {
                tap_ok(conf.signaled && conf.code == SIGSYS,
                       "i386 getpid via int $0x80 -> SIGSYS (unconfined: %s)",
                       describe(&plain, a, sizeof(a)));
                if (!(conf.signaled && conf.code == SIGSYS))
                        tap_diag("  confined: %s", describe(&conf, b, sizeof(b)));
        }

        plain = run(p_x32, 0, NONE);
        conf = run(p_x32, 0, SECCOMP);
        tap_ok(plain.reported && conf.signaled && conf.code == SIGSYS,
               "x32 getpid -> SIGSYS (unconfined: %s)", describe(&plain, a, sizeof(a)));
        if (!(conf.signaled && conf.code == SIGSYS))
                tap_diag("  confined: %s", describe(&conf, b, sizeof(b)));
}

static long landlock_abi(void)
{
        long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1U /* _VERSION */);
        return abi < 0 ? 0 : abi;
}

static void test_landlock(void)
{
        char a[64];
        long abi = landlock_abi();
        struct outcome o = run(p_landlock_apply, 0, NONE);
        TAP_IS_INT(o.reported ? o.ret : -9999, abi, "ab_landlock_apply returns the kernel's ABI");
        if (abi == 0) {
                tap_ok(1, "landlock restrictions # SKIP Landlock is not available");
                return;
        }

        if (abi >= 6) {
                expect_errno("landlock: kill(getppid(), 0)", p_kill_parent, 0, LANDLOCK, EPERM);
                expect_errno("landlock: connect to an abstract socket outside", p_abstract_connect,
                             0, LANDLOCK, EPERM);
        } else {
                tap_ok(1, "landlock: signal and abstract-socket scoping # SKIP ABI %ld < 6", abi);
        }
        expect_ok("landlock: kill of its own child", p_kill_own_child, 0, LANDLOCK);
        expect_ok("landlock: mknod of a fifo", p_mknod, S_IFIFO, LANDLOCK);
        expect_ok("landlock: creating a regular file", p_create_file, 0, LANDLOCK);

        /* The control must show that without Landlock we could make the node. */
        static const struct {
                const char *name;
                unsigned long type;
        } nodes[] = {{"char", S_IFCHR}, {"block", S_IFBLK}};
        for (size_t i = 0; i < AB_ARRAY_LEN(nodes); i++) {
                struct outcome plain = run(p_mknod, nodes[i].type, NONE);
                if (!plain.reported || plain.ret != 0) {
                        tap_ok(1, "landlock: mknod of a %s device # SKIP unconfined: %s",
                               nodes[i].name, describe(&plain, a, sizeof(a)));
                        continue;
                }
                struct outcome conf = run(p_mknod, nodes[i].type, LANDLOCK);
                bool denied_ok = conf.reported && (conf.ret == -EACCES || conf.ret == -EPERM);
                tap_ok(denied_ok, "landlock: mknod of a %s device is denied (unconfined: works)",
                       nodes[i].name);
                if (!denied_ok)
                        tap_diag("  confined: %s", describe(&conf, a, sizeof(a)));
        }

        /* Both, the way a box gets them: normal work still goes through. */
        expect_ok("landlock + seccomp: bash -c 'echo ok | cat'", p_bash_pipeline, 0,
                  LANDLOCK | SECCOMP);
        expect_ok("landlock + seccomp: pthread_create + join", p_thread, 0, LANDLOCK | SECCOMP);
}

static int setup(void)
{
        void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
                return -errno;
        shared = m;

        sibling = fork();
        if (sibling < 0)
                return -errno;
        if (sibling == 0) {
                for (;;)
                        pause();
        }

        int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0)
                return -errno;
        char *name = ptsname(master);
        if (!name)
                return -errno;
        pty_slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (pty_slave < 0)
                return -errno;

        snprintf(tmpdir, sizeof(tmpdir), "/tmp/agentbox-test-seccomp-XXXXXX");
        if (!mkdtemp(tmpdir))
                return -errno;

        int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (lfd < 0)
                return -errno;
        abstract_addr.sun_family = AF_UNIX;
        int n = snprintf(abstract_addr.sun_path + 1, sizeof(abstract_addr.sun_path) - 1,
                         "agentbox-test-seccomp-%d", (int)getpid());
        abstract_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
        if (bind(lfd, (struct sockaddr *)&abstract_addr, abstract_len) < 0 || listen(lfd, 64) < 0)
                return -errno;
        return 0;
}

static void teardown(void)
{
        if (sibling > 0) {
                kill(sibling, SIGKILL);
                waitpid(sibling, NULL, 0);
        }
        if (tmpdir[0])
                rmdir(tmpdir);
        ab_bpf_free(&filter);
}

int main(void)
{
        int r = setup();
        if (r < 0) {
                printf("Bail out! setup: %s\n", strerror(-r));
                teardown();
                return 1;
        }
        test_build();
        for (size_t i = 0; i < AB_ARRAY_LEN(denied); i++)
                expect_errno(denied[i].name, denied[i].fn, denied[i].arg, SECCOMP, denied[i].want);
        for (size_t i = 0; i < AB_ARRAY_LEN(allowed); i++)
                expect_ok(allowed[i].name, allowed[i].fn, allowed[i].arg, SECCOMP);
        test_other_arches();
        test_landlock();
        teardown();
        return tap_done();
}
