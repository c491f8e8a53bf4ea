/* seccomp.c - the box's system-call filter. The policy and the reason for
 * each rule are in docs/security.md ("System-call filter"); keep both in step. */
#include "seccomp.h"

#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
/* Numbers since 424 are shared by all architectures but alpha. */
#ifndef __NR_open_tree_attr
#define __NR_open_tree_attr 467
#endif

/* Denied whatever the arguments. fallback_nr is used only when the linked
 * libseccomp is older than the syscall (0: it must know the name). */
struct deny_rule {
        const char *name;
        int fallback_nr;
};
static const struct deny_rule denied[] = {
    /* kernel attack surface with a history of escapes */
    {"io_uring_setup", 0},
    {"io_uring_enter", 0},
    {"io_uring_register", 0},
    {"bpf", 0},
    {"perf_event_open", 0},
    {"userfaultfd", 0},
    {"keyctl", 0},
    {"add_key", 0},
    {"request_key", 0},
    /* looking into or stealing from other processes */
    {"ptrace", 0},
    {"process_vm_readv", 0},
    {"process_vm_writev", 0},
    {"pidfd_getfd", 0},
    {"kcmp", 0},
    /* the kernel, modules and the machine */
    {"kexec_load", 0},
    {"kexec_file_load", 0},
    {"init_module", 0},
    {"finit_module", 0},
    {"delete_module", 0},
    {"reboot", 0},
    {"swapon", 0},
    {"swapoff", 0},
    {"syslog", 0},
    {"acct", 0},
    {"quotactl", 0},
    {"quotactl_fd", 0},
    {"iopl", 0},
    {"ioperm", 0},
    {"vhangup", 0},
    {"lookup_dcookie", 0},
    {"nfsservctl", 0},
    {"uselib", 0},
    /* the clock is the host's; adjtimex and clock_adjtime stay (glibc reads
     * the clock state through them, and changing it needs CAP_SYS_TIME in
     * the initial user namespace, which box root never has) */
    {"settimeofday", 0},
    {"clock_settime", 0},
    /* the mount table and namespaces are fixed by the runtime */
    {"mount", 0},
    {"umount2", 0},
    {"pivot_root", 0},
    {"move_mount", 0},
    {"open_tree", 0},
    {"open_tree_attr", __NR_open_tree_attr},
    {"fsopen", 0},
    {"fsconfig", 0},
    {"fsmount", 0},
    {"fspick", 0},
    {"mount_setattr", 0},
    {"setns", 0},
    /* file handles bypass the mount namespace ("shocker") */
    {"open_by_handle_at", 0},
    {"name_to_handle_at", 0},
};

static const uint64_t unshare_ns_flags[] = {
    CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
    CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET, CLONE_NEWTIME,
};
/* clone() can't carry CLONE_NEWTIME: its low byte is the exit signal. */
static const uint64_t clone_ns_flags[] = {
    CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
    CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET,
};

/* personality flags that switch off exploit mitigations. */
static const uint64_t personality_flags[] = {ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO, READ_IMPLIES_EXEC};

/* The argument of clone() that holds the flags. */
#if defined(__s390__) || defined(__s390x__) || defined(__CRIS__)
#define CLONE_FLAGS_ARG 1
#else
#define CLONE_FLAGS_ARG 0
#endif

#define DENY SCMP_ACT_ERRNO(EPERM)

static int add_rule(scmp_filter_ctx ctx, uint32_t action, int nr, const char *name, unsigned int n,
                    const struct scmp_arg_cmp *cmp, ab_err **err)
{
        int r = seccomp_rule_add_exact_array(ctx, action, nr, n, cmp);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "seccomp: cannot add the rule for %s",
                                  name);
        return 0;
}

/* Sets *nr to the native number, or to a negative pseudo-number when the
 * call doesn't exist on this architecture (nothing to deny then). */
static int resolve(const char *name, int fallback_nr, int *nr, ab_err **err)
{
        *nr = seccomp_syscall_resolve_name(name);
        if (*nr == __NR_SCMP_ERROR && fallback_nr > 0)
                *nr = fallback_nr;
        if (*nr == __NR_SCMP_ERROR)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "seccomp: libseccomp %u.%u does not know the system call %s; "
                                  "upgrade libseccomp",
                                  SCMP_VER_MAJOR, SCMP_VER_MINOR, name);
        return 0;
}

/* Denies nr when any one of the bits is set in argument arg (one rule per
 * bit: the comparisons of one rule are AND-ed). */
static int deny_any_bit(scmp_filter_ctx ctx, int nr, const char *name, unsigned int arg,
                        const uint64_t *bits, size_t n, ab_err **err)
{
        for (size_t i = 0; i < n; i++) {
                struct scmp_arg_cmp c = SCMP_CMP64(arg, SCMP_CMP_MASKED_EQ, bits[i], bits[i]);
                int r = add_rule(ctx, DENY, nr, name, 1, &c, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int add_arg_rules(scmp_filter_ctx ctx, ab_err **err)
{
        int r;

        r = deny_any_bit(ctx, SCMP_SYS(unshare), "unshare", 0, unshare_ns_flags,
                         AB_ARRAY_LEN(unshare_ns_flags), err);
        if (r < 0)
                return r;
        /* The kernel reads only the low 32 bits of clone's flags; a masked
         * test of one bit ignores the high half, so junk there can't hide it. */
        r = deny_any_bit(ctx, SCMP_SYS(clone), "clone", CLONE_FLAGS_ARG, clone_ns_flags,
                         AB_ARRAY_LEN(clone_ns_flags), err);
        if (r < 0)
                return r;

        /* Its flags live in a struct we can't inspect: make libc fall back to clone. */
        r = add_rule(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), "clone3", 0, NULL, err);
        if (r < 0)
                return r;

        /* ioctl's request is an unsigned int: compare the low 32 bits only,
         * or 0x100005412 would slip past a 64-bit test and still be TIOCSTI. */
        static const uint64_t tty_requests[] = {TIOCSTI, TIOCLINUX};
        for (size_t i = 0; i < AB_ARRAY_LEN(tty_requests); i++) {
                struct scmp_arg_cmp c =
                    SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, tty_requests[i]);
                r = add_rule(ctx, DENY, SCMP_SYS(ioctl), "ioctl", 1, &c, err);
                if (r < 0)
                        return r;
        }

        /* personality(unsigned int): deny setting a mitigation-disabling flag
         * but keep the 0xffffffff query working. No valid persona uses bit 31,
         * so "flag set, bit 31 clear" is the set request, and any value with
         * bit 31 set but not all ones (a zero among bits 0-30) is denied too.
         * One comparison per argument and rule is all libseccomp allows. */
        for (size_t i = 0; i < AB_ARRAY_LEN(personality_flags); i++) {
                uint64_t f = personality_flags[i];
                struct scmp_arg_cmp c = SCMP_A0_64(SCMP_CMP_MASKED_EQ, f | 0x80000000ULL, f);
                r = add_rule(ctx, DENY, SCMP_SYS(personality), "personality", 1, &c, err);
                if (r < 0)
                        return r;
        }
        for (unsigned int bit = 0; bit < 31; bit++) {
                struct scmp_arg_cmp c =
                    SCMP_A0_64(SCMP_CMP_MASKED_EQ, 0x80000000ULL | (1ULL << bit), 0x80000000ULL);
                r = add_rule(ctx, DENY, SCMP_SYS(personality), "personality", 1, &c, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int export_bpf(scmp_filter_ctx ctx, ab_bpf *out, ab_err **err)
{
        _cleanup_close_ int fd = memfd_create("agentbox-seccomp", MFD_CLOEXEC);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "seccomp: memfd_create");
        int r = seccomp_export_bpf(ctx, fd);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "seccomp: exporting the filter");
        off_t size = lseek(fd, 0, SEEK_END);
        if (size < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "seccomp: sizing the filter");
        size_t n = (size_t)size / sizeof(struct sock_filter);
        if (n == 0 || n > BPF_MAXINSNS || (size_t)size % sizeof(struct sock_filter) != 0)
                return ab_err_set(err, AB_E_INTERNAL, 0,
                                  "seccomp: the exported filter has a bad size (%lld bytes)",
                                  (long long)size);
        _cleanup_free_ struct sock_filter *insns = xcalloc(n, sizeof(*insns));
        if (lseek(fd, 0, SEEK_SET) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "seccomp: rewinding the filter");
        ssize_t got = ab_read_full(fd, insns, (size_t)size);
        if (got < 0)
                return ab_err_set(err, AB_E_INTERNAL, (int)-got, "seccomp: reading the filter");
        if ((size_t)got != (size_t)size)
                return ab_err_set(err, AB_E_INTERNAL, 0, "seccomp: short read of the filter");
        out->insns = steal_pointer(&insns);
        out->len = (unsigned short)n;
        return 0;
}

int ab_seccomp_build(ab_bpf *out, ab_err **err)
{
        out->insns = NULL;
        out->len = 0;

        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx)
                return ab_err_set(err, AB_E_INTERNAL, ENOMEM, "seccomp: seccomp_init");

        /* Only the native ABI: i386 (int 0x80) and x32 calls kill the process
         * (libseccomp also sends x32 numbers on x86_64 to this action). */
        int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
        if (r < 0) {
                r = ab_err_set(err, AB_E_INTERNAL, -r, "seccomp: setting the bad-arch action");
                goto out;
        }
        for (size_t i = 0; i < AB_ARRAY_LEN(denied); i++) {
                int nr;
                r = resolve(denied[i].name, denied[i].fallback_nr, &nr, err);
                if (r < 0)
                        goto out;
                if (nr < 0)
                        continue;
                r = add_rule(ctx, DENY, nr, denied[i].name, 0, NULL, err);
                if (r < 0)
                        goto out;
        }
        r = add_arg_rules(ctx, err);
        if (r < 0)
                goto out;
        r = export_bpf(ctx, out, err);
out:
        seccomp_release(ctx);
        return r;
}

void ab_bpf_free(ab_bpf *b)
{
        if (!b)
                return;
        free(b->insns);
        b->insns = NULL;
        b->len = 0;
}

int ab_seccomp_install(const ab_bpf *b)
{
        if (!b || !b->insns || b->len == 0)
                return -EINVAL;
        struct sock_fprog prog = {.len = b->len, .filter = b->insns};

        /* Required to install a filter without CAP_SYS_ADMIN, and keeps
         * setuid binaries in the box from gaining anything. */
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -errno;
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0)
                return 0;
        if (errno != ENOSYS)
                return -errno;
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
                return -errno;
        return 0;
}
