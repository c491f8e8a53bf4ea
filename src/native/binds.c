#include "native/binds.h"
#include "base/util.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#define RESOLVE_BOX (RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

/* path (absolute, normalised) below root_fd; no symlink anywhere on the way. */
static int open_in_root(int root_fd, const char *path, int flags)
{
        struct open_how how = {.flags = (uint64_t)(O_PATH | O_CLOEXEC | flags),
                               .resolve = RESOLVE_BOX};
        int fd = (int)syscall(SYS_openat2, root_fd, path + 1, &how, sizeof(how));
        return fd < 0 ? -errno : fd;
}

int ab_mount_point(int root_fd, const char *path, uid_t base)
{
        int fd = open_in_root(root_fd, path, O_DIRECTORY);
        if (fd != -ENOENT && fd != -ELOOP)
                return fd;
        _cleanup_close_ int cur = fcntl(root_fd, F_DUPFD_CLOEXEC, 3);
        if (cur < 0)
                return -errno;
        char comp[256];
        for (const char *p = path + 1; *p;) {
                size_t len = strcspn(p, "/");
                if (len >= sizeof(comp))
                        return -ENAMETOOLONG;
                memcpy(comp, p, len);
                comp[len] = '\0';
                p += len + (p[len] == '/');
                bool last = !*p;
                /* one component below a real directory: never leaves it */
                struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                                       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                                                  RESOLVE_NO_MAGICLINKS};
                int next = (int)syscall(SYS_openat2, cur, comp, &how, sizeof(how));
                struct stat st;
                if (next < 0 && errno == ELOOP && last &&
                    fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
                        if (unlinkat(cur, comp, 0) < 0)
                                return -errno;
                        errno = ENOENT;
                }
                if (next < 0 && errno == ENOENT) {
                        if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        if (fchownat(cur, comp, base, base, AT_SYMLINK_NOFOLLOW) < 0)
                                return -errno;
                        next = (int)syscall(SYS_openat2, cur, comp, &how, sizeof(how));
                }
                if (next < 0)
                        return -errno;
                close(cur);
                cur = next;
        }
        return steal_fd(&cur);
}

static int set_attr(int tree, uint64_t set, int userns_fd, bool recursive)
{
        struct mount_attr a = {.attr_set = set};
        if (userns_fd >= 0)
                a.userns_fd = (uint64_t)userns_fd;
        unsigned flags = AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0);
        return syscall(SYS_mount_setattr, tree, "", flags, &a, sizeof(a)) < 0 ? -errno : 0;
}

static int move_onto(int tree, int target)
{
        if (syscall(SYS_move_mount, tree, "", target, "",
                    MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                return -errno;
        return 0;
}

static int fail(ab_err **err, const ab_bind *b, int r, const char *what)
{
        ab_code code = (r == -ELOOP || r == -ENOTDIR || r == -EXDEV) ? AB_E_INVALID : AB_E_INTERNAL;
        return ab_err_set(err, code, -r, "%s %s: %s%s", ab_mount_kind_name(b->kind), b->path, what,
                          r == -ELOOP ? " (a symlink is in the way: mount targets never follow "
                                        "symlinks)"
                                      : "");
}

/* The folder sub of the volume at vol (opened O_PATH), made where missing:
 * each prefix of it is resolved beneath vol, so neither ".." nor a symlink
 * (the box may plant them in its volume, and other boxes share it) leads
 * out; a missing folder is made in its parent as just resolved. An fd or
 * -errno (-EXDEV: a symlink leads out). */
static int open_sub(int vol, const char *sub)
{
        struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                               .resolve =
                                   RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
        _cleanup_free_ char *walk = xstrdup(sub);
        _cleanup_close_ int parent = -1;
        const char *name = walk;
        for (char *e = walk;; e++) { /* the folders on the way, then sub itself */
                if (*e && *e != '/')
                        continue;
                char c = *e;
                *e = 0;
                int fd = (int)syscall(SYS_openat2, vol, walk, &how, sizeof(how));
                if (fd < 0 && errno == ENOENT) {
                        if (mkdirat(parent >= 0 ? parent : vol, name, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        fd = (int)syscall(SYS_openat2, vol, walk, &how, sizeof(how));
                }
                if (fd < 0)
                        return -errno;
                if (!c)
                        return fd;
                if (parent >= 0)
                        close(parent);
                parent = fd;
                *e = c;
                name = e + 1;
        }
}

/* A volume (idmapped) or a host directory (not) onto its path. */
static int bind_dir(int root_fd, const ab_bind *b, int userns_fd, uid_t base, ab_err **err)
{
        struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                               .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
        _cleanup_close_ int src = (int)syscall(SYS_openat2, AT_FDCWD, b->host, &how, sizeof(how));
        if (src < 0)
                return fail(err, b, -errno, "cannot open its source");
        if (b->sub) {
                int fd = open_sub(src, b->sub);
                if (fd < 0)
                        return ab_err_set(err,
                                          fd == -EXDEV || fd == -ENOTDIR || fd == -ELOOP
                                              ? AB_E_INVALID
                                              : AB_E_INTERNAL,
                                          -fd, "volume %s: its sub_path '%s'%s", b->path, b->sub,
                                          fd == -EXDEV     ? " leads out of the volume (a symlink)"
                                          : fd == -ENOTDIR ? " is not a folder"
                                                           : ": cannot open or make it");
                close(src);
                src = fd;
        }
        _cleanup_close_ int tree = (int)syscall(
            SYS_open_tree, src, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
        if (tree < 0)
                return fail(err, b, -errno, "open_tree");
        uint64_t attr =
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (b->read_only ? MOUNT_ATTR_RDONLY : 0);
        bool idmap = b->kind == AB_MOUNT_VOLUME;
        int r =
            set_attr(tree, attr | (idmap ? MOUNT_ATTR_IDMAP : 0), idmap ? userns_fd : -1, false);
        if (r < 0)
                return fail(err, b, r, "cannot set the mount's attributes");
        _cleanup_close_ int target = ab_mount_point(root_fd, b->path, base);
        if (target < 0)
                return fail(err, b, target, "cannot make its mount point");
        if ((r = move_onto(tree, target)) < 0)
                return fail(err, b, r, "move_mount");
        return 0;
}

static int readonly_path(int root_fd, const ab_bind *b, ab_err **err)
{
        _cleanup_close_ int target = open_in_root(root_fd, b->path, 0);
        if (target == -ENOENT)
                return 0;
        if (target < 0)
                return fail(err, b, target, "cannot open it");
        _cleanup_close_ int tree =
            (int)syscall(SYS_open_tree, target, "",
                         OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
        if (tree < 0)
                return fail(err, b, -errno, "open_tree");
        int r = set_attr(tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, -1, true);
        if (r == 0)
                r = move_onto(tree, target);
        return r < 0 ? fail(err, b, r, "cannot bind it read-only") : 0;
}

/* An empty read-only tmpfs over a directory, /dev/null over anything else. */
static int blocked_path(int root_fd, const ab_bind *b, ab_err **err)
{
        _cleanup_close_ int target = open_in_root(root_fd, b->path, 0);
        if (target == -ENOENT)
                return 0;
        if (target < 0)
                return fail(err, b, target, "cannot open it");
        struct stat st;
        if (fstat(target, &st) < 0)
                return fail(err, b, -errno, "stat");
        _cleanup_close_ int tree = -1;
        if (S_ISDIR(st.st_mode)) {
                _cleanup_close_ int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
                if (fs < 0 || syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", "4k", 0) < 0 ||
                    syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "nr_inodes", "1", 0) < 0 ||
                    syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", "0555", 0) < 0 ||
                    syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                        return fail(err, b, -errno, "cannot make its empty tmpfs");
                tree = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                        MOUNT_ATTR_NOEXEC);
        } else {
                tree = (int)syscall(SYS_open_tree, AT_FDCWD, "/dev/null",
                                    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
                if (tree >= 0 &&
                    set_attr(tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, -1,
                             false) < 0)
                        return fail(err, b, -errno, "cannot set the mount's attributes");
        }
        if (tree < 0)
                return fail(err, b, -errno, "cannot make its cover");
        int r = move_onto(tree, target);
        return r < 0 ? fail(err, b, r, "cannot hide it") : 0;
}

static int rank(ab_mount_kind k)
{
        return k == AB_MOUNT_BLOCKED ? 2 : k == AB_MOUNT_READONLY ? 1 : 0;
}

static int cmp_bind(const void *a, const void *b)
{
        const ab_bind *x = *(const ab_bind *const *)a, *y = *(const ab_bind *const *)b;
        if (rank(x->kind) != rank(y->kind))
                return rank(x->kind) - rank(y->kind);
        return strcmp(x->path, y->path);
}

int ab_binds_apply(int root_fd, const ab_bind *binds, size_t n, int userns_fd, uid_t uid_base,
                   ab_err **err)
{
        if (!n)
                return 0;
        _cleanup_free_ const ab_bind **order = xcalloc(n, sizeof(*order));
        for (size_t i = 0; i < n; i++)
                order[i] = &binds[i];
        qsort(order, n, sizeof(*order), cmp_bind);
        for (size_t i = 0; i < n; i++) {
                const ab_bind *b = order[i];
                if (ab_box_path_check(b->path, b->kind, err) < 0)
                        return -1;
                int r;
                switch (b->kind) {
                case AB_MOUNT_VOLUME:
                case AB_MOUNT_HOST:
                        r = bind_dir(root_fd, b, userns_fd, uid_base, err);
                        break;
                case AB_MOUNT_READONLY:
                        r = ab_box_path_noop(b->path) ? 0 : readonly_path(root_fd, b, err);
                        break;
                default:
                        r = ab_box_path_noop(b->path) ? 0 : blocked_path(root_fd, b, err);
                        break;
                }
                if (r < 0)
                        return -1;
        }
        return 0;
}
