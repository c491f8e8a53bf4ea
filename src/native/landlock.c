/* landlock.c - Landlock restrictions for a box (see docs/security.md,
 * "Landlock"). Raw syscalls only: this runs between fork and exec. */
#include "landlock.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <linux/types.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Debian 12's UAPI header predates the scopes (ABI 6, Linux 6.12). */
#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#endif
#ifndef LANDLOCK_ACCESS_FS_MAKE_CHAR
#define LANDLOCK_ACCESS_FS_MAKE_CHAR (1ULL << 6)
#endif
#ifndef LANDLOCK_ACCESS_FS_MAKE_BLOCK
#define LANDLOCK_ACCESS_FS_MAKE_BLOCK (1ULL << 11)
#endif
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#endif
#ifndef LANDLOCK_SCOPE_SIGNAL
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#endif
#ifndef __NR_landlock_add_rule
#define __NR_landlock_add_rule 445
#endif
#ifndef __NR_landlock_restrict_self
#define __NR_landlock_restrict_self 446
#endif

/* struct landlock_ruleset_attr as of ABI 6, under our own name since the
 * system header's may lack the later fields. We pass only the prefix the
 * running kernel knows. */
struct ab_landlock_ruleset_attr {
        __u64 handled_access_fs;
        __u64 handled_access_net; /* ABI 4 */
        __u64 scoped;             /* ABI 6 */
};

int ab_landlock_apply(void)
{
        long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
        if (abi < 0)
                return (errno == ENOSYS || errno == EOPNOTSUPP) ? 0 : -errno;

        /* Handled but granted by no rule: creating device nodes is denied
         * everywhere, whatever the mounts and capabilities say. */
        struct ab_landlock_ruleset_attr attr = {
            .handled_access_fs = LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK,
        };
        size_t size = offsetof(struct ab_landlock_ruleset_attr, handled_access_net);
        if (abi >= 6) {
                attr.scoped = LANDLOCK_SCOPE_SIGNAL | LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET;
                size = sizeof(attr);
        }

        /* From ABI 2 every ruleset denies moving or linking a file into
         * another directory (EXDEV) unless a rule grants "refer": rename
         * between directories is everyday work (apt's lists, pip's and git's
         * temp files), so it is granted under the whole root. */
        if (abi >= 2)
                attr.handled_access_fs |= LANDLOCK_ACCESS_FS_REFER;

        int fd = (int)syscall(__NR_landlock_create_ruleset, &attr, size, 0);
        if (fd < 0)
                return -errno;
        int r = 0;
        if (abi >= 2) {
                struct landlock_path_beneath_attr pb = {.allowed_access = LANDLOCK_ACCESS_FS_REFER};
                pb.parent_fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (pb.parent_fd < 0 ||
                    syscall(__NR_landlock_add_rule, fd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0)
                        r = -errno;
                if (pb.parent_fd >= 0)
                        close(pb.parent_fd);
                if (r < 0) {
                        close(fd);
                        return r;
                }
        }
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
            syscall(__NR_landlock_restrict_self, fd, 0) < 0)
                r = -errno;
        close(fd);
        return r < 0 ? r : (int)abi;
}
