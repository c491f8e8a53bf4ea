#include "native/rootfs.h"
#include "native/loopdisk.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/xattr.h>

/* Top-level host directories a box sees; everything else at / is hidden. */
static const char *const host_top_allow[] = {"bin",    "sbin", "lib", "lib32", "lib64",
                                             "libx32", "usr",  "etc", "var",   "opt"};
/* Directories the box gets as empty mount points or private directories. */
static const char *const top_private[] = {"proc", "dev",  "tmp",       "run",    "sys", "mnt",
                                          "root", "home", "workspace", "skills", "srv", "media"};
/* Host files holding secrets (fnmatch patterns relative to /etc). */
static const char *const etc_hide[] = {"shadow",
                                       "shadow-",
                                       "gshadow",
                                       "gshadow-",
                                       "security/opasswd",
                                       "ssl/private",
                                       "ssh/ssh_host_*_key",
                                       "agentbox",
                                       "sudoers.d"};
/* /var: these are kept (package databases, so apt and dpkg work); */
static const char *const var_allow[] = {"lib", "cache", "local", "opt", "run", "lock", "mail"};
/* ... these become empty, and everything else is hidden. */
static const char *const var_empty[] = {"log", "tmp", "spool"};
static const char *const varlib_allow[] = {"dpkg", "apt", "ucf", "misc", "pam", "python"};

static bool in_list(const char *name, const char *const *list, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(name, list[i]) == 0)
                        return true;
        return false;
}

static int whiteout(int dfd, const char *name)
{
        if (mknodat(dfd, name, S_IFCHR | 0, makedev(0, 0)) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

/* An empty directory that hides whatever the lower layer has at that path. */
static int opaque_dir(int dfd, const char *name, mode_t mode, uid_t owner)
{
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
                unlinkat(dfd, name, 0);
        if (mkdirat(dfd, name, mode) < 0 && errno != EEXIST)
                return -errno;
        _cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        if (fsetxattr(fd, "trusted.overlay.opaque", "y", 1, 0) < 0)
                return -errno;
        if (fchown(fd, owner, owner) < 0 || fchmod(fd, mode) < 0)
                return -errno;
        return 0;
}

/* A directory in the mask that merges with the host directory of the same
 * path; it carries the host directory's (shifted) owner and mode because the
 * topmost layer decides them. */
static int mirror_dir(int mask_dfd, const char *rel, const char *host_path, uid_t base)
{
        struct stat st;
        if (stat(host_path, &st) < 0)
                return -errno;
        if (mkdirat(mask_dfd, rel, st.st_mode & 07777) < 0 && errno != EEXIST)
                return -errno;
        if (fchownat(mask_dfd, rel, st.st_uid + base, st.st_gid + base, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (fchmodat(mask_dfd, rel, st.st_mode & 07777, 0) < 0)
                return -errno;
        return 0;
}

/* Hides every entry of host directory `host_dir` that `keep` rejects, in mask dir `mdfd`. */
static int hide_entries(int mdfd, const char *host_dir, bool (*keep)(const char *name))
{
        DIR *d = opendir(host_dir);
        if (!d)
                return errno == ENOENT ? 0 : -errno;
        int r = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                        continue;
                if (!keep(e->d_name) && (r = whiteout(mdfd, e->d_name)) < 0)
                        break;
        }
        closedir(d);
        return r;
}

static bool keep_top(const char *n)
{
        return in_list(n, host_top_allow, AB_ARRAY_LEN(host_top_allow));
}
static bool keep_var(const char *n)
{
        return in_list(n, var_allow, AB_ARRAY_LEN(var_allow));
}
static bool keep_varlib(const char *n)
{
        return in_list(n, varlib_allow, AB_ARRAY_LEN(varlib_allow));
}

/* Hides host secrets in /etc (patterns may name sub-directories). */
static int hide_etc(int mask_dfd, uid_t base)
{
        int r;
        if ((r = mirror_dir(mask_dfd, "etc", "/etc", base)) < 0)
                return r;
        for (size_t i = 0; i < AB_ARRAY_LEN(etc_hide); i++) {
                const char *pat = etc_hide[i];
                const char *slash = strrchr(pat, '/');
                char dir_rel[256], host_dir[300];
                snprintf(dir_rel, sizeof(dir_rel), "etc%s%.*s", slash ? "/" : "",
                         slash ? (int)(slash - pat) : 0, pat);
                snprintf(host_dir, sizeof(host_dir), "/%s", dir_rel);
                const char *leaf = slash ? slash + 1 : pat;
                DIR *d = opendir(host_dir);
                if (!d)
                        continue;
                struct dirent *e;
                while ((e = readdir(d))) {
                        if (e->d_name[0] == '.' || fnmatch(leaf, e->d_name, 0) != 0)
                                continue;
                        if (slash && (r = mirror_dir(mask_dfd, dir_rel, host_dir, base)) < 0)
                                break;
                        char rel[512];
                        snprintf(rel, sizeof(rel), "%s/%s", dir_rel, e->d_name);
                        if ((r = whiteout(mask_dfd, rel)) < 0)
                                break;
                }
                closedir(d);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Hides one absolute host path (e.g. the data directory) if the box could see it. */
static int hide_path(int mask_dfd, const char *path, uid_t base)
{
        if (path[0] != '/' || !path[1])
                return 0;
        char rel[4096];
        snprintf(rel, sizeof(rel), "%s", path + 1);
        size_t len = strlen(rel);
        while (len > 0 && rel[len - 1] == '/')
                rel[--len] = '\0';
        /* Walk down: stop as soon as a component is already hidden or opaque. */
        for (char *p = rel;; p++) {
                bool last = (*p == '\0');
                if (*p != '/' && !last)
                        continue;
                char saved = *p;
                *p = '\0';
                struct stat st;
                if (fstatat(mask_dfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                        if (S_ISCHR(st.st_mode))
                                return 0; /* already whited out */
                        char val[2];
                        if (S_ISDIR(st.st_mode)) {
                                _cleanup_close_ int fd = openat(
                                    mask_dfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                                if (fd >= 0 &&
                                    fgetxattr(fd, "trusted.overlay.opaque", val, sizeof(val)) == 1)
                                        return 0; /* an opaque dir hides the rest */
                        }
                }
                if (last)
                        return whiteout(mask_dfd, rel);
                char host[4096];
                snprintf(host, sizeof(host), "/%s", rel);
                int r = mirror_dir(mask_dfd, rel, host, base);
                if (r < 0)
                        return r == -ENOENT ? 0 : r;
                *p = saved;
        }
}

static int build_mask(int mask_dfd, const ab_rootfs_spec *s)
{
        int r;
        bool host = strcmp(s->base, "/") == 0;
        if (host) {
                if ((r = hide_entries(mask_dfd, "/", keep_top)) < 0)
                        return r;
                if ((r = hide_etc(mask_dfd, s->uid_base)) < 0)
                        return r;
                if ((r = mirror_dir(mask_dfd, "var", "/var", s->uid_base)) < 0 && r != -ENOENT)
                        return r;
                if (r == 0) {
                        _cleanup_close_ int vfd =
                            openat(mask_dfd, "var", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        if (vfd < 0)
                                return -errno;
                        if ((r = hide_entries(vfd, "/var", keep_var)) < 0)
                                return r;
                        for (size_t i = 0; i < AB_ARRAY_LEN(var_empty); i++)
                                if ((r = opaque_dir(vfd, var_empty[i], 01777, s->uid_base)) < 0)
                                        return r;
                        if ((r = mirror_dir(mask_dfd, "var/lib", "/var/lib", s->uid_base)) == 0) {
                                _cleanup_close_ int lfd =
                                    openat(mask_dfd, "var/lib", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                                if (lfd < 0)
                                        return -errno;
                                if ((r = hide_entries(lfd, "/var/lib", keep_varlib)) < 0)
                                        return r;
                        }
                }
        }
        for (size_t i = 0; i < AB_ARRAY_LEN(top_private); i++) {
                mode_t mode = strcmp(top_private[i], "tmp") == 0 ? 01777 : 0755;
                if (!strcmp(top_private[i], "root"))
                        mode = 0700;
                if ((r = opaque_dir(mask_dfd, top_private[i], mode, s->uid_base)) < 0)
                        return r;
        }
        static const char *const mnt_dirs[] = {"mnt/user-data", "mnt/user-data/workspace",
                                               "mnt/user-data/uploads", "mnt/user-data/outputs",
                                               "mnt/skills"};
        for (size_t i = 0; i < AB_ARRAY_LEN(mnt_dirs); i++)
                if ((r = opaque_dir(mask_dfd, mnt_dirs[i], 0755, s->uid_base)) < 0)
                        return r;
        for (const char *const *h = s->hide; h && *h; h++)
                if ((r = hide_path(mask_dfd, *h, s->uid_base)) < 0)
                        return r;
        return 0;
}

static int idmapped_lower(const char *base, const char *target, int userns_fd, ab_err **err)
{
        _cleanup_close_ int t =
            (int)syscall(SYS_open_tree, AT_FDCWD, base, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (t < 0)
                return ab_err_set(err, AB_E_UNSUPPORTED, errno, "open_tree(%s)", base);
        struct mount_attr a = {
            .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            .userns_fd = (uint64_t)userns_fd,
        };
        if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0)
                return ab_err_set(err, AB_E_UNSUPPORTED, errno,
                                  "cannot make an idmapped mount of %s (the filesystem must "
                                  "support idmapped mounts, e.g. ext4, xfs, btrfs, tmpfs)",
                                  base);
        if (syscall(SYS_move_mount, t, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "move_mount to %s", target);
        return 0;
}

static int bind(const char *src, const char *dst, bool ro, ab_err **err)
{
        if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "bind %s on %s", src, dst);
        unsigned long fl = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (ro ? MS_RDONLY : 0);
        if (mount(NULL, dst, NULL, fl, NULL) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "remount %s", dst);
        return 0;
}

static int mount_dev(const char *root, uid_t base, ab_err **err)
{
        char dev[4200], p[4300];
        snprintf(dev, sizeof(dev), "%s/dev", root);
        char opts[128];
        snprintf(opts, sizeof(opts), "mode=755,size=1m,nr_inodes=256,uid=%u,gid=%u", (unsigned)base,
                 (unsigned)base);
        if (mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, opts) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mount /dev tmpfs");
        static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
        for (size_t i = 0; i < AB_ARRAY_LEN(nodes); i++) {
                snprintf(p, sizeof(p), "%s/%s", dev, nodes[i]);
                int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
                if (fd < 0)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "create %s", p);
                close(fd);
                char src[64];
                snprintf(src, sizeof(src), "/dev/%s", nodes[i]);
                if (mount(src, p, NULL, MS_BIND, NULL) < 0)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "bind %s", src);
                mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC, NULL);
        }
        static const char *const links[][2] = {
            {"fd", "/proc/self/fd"},       {"stdin", "/proc/self/fd/0"},
            {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
            {"ptmx", "pts/ptmx"},          {"core", "/proc/kcore"}};
        for (size_t i = 0; i < AB_ARRAY_LEN(links); i++) {
                if (!strcmp(links[i][0], "core"))
                        continue;
                snprintf(p, sizeof(p), "%s/%s", dev, links[i][0]);
                if (symlink(links[i][1], p) < 0 && errno != EEXIST)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "symlink %s", p);
                (void)!lchown(p, base, base);
        }
        snprintf(p, sizeof(p), "%s/pts", dev);
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir %s", p);
        snprintf(p, sizeof(p), "%s/shm", dev);
        if (mkdir(p, 01777) < 0 && errno != EEXIST)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir %s", p);
        snprintf(opts, sizeof(opts), "mode=1777,size=64m,uid=%u,gid=%u", (unsigned)base,
                 (unsigned)base);
        if (mount("shm", p, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mount /dev/shm");
        /* Lock the layout: no new nodes can appear in /dev. */
        if (mount(NULL, dev, NULL, MS_REMOUNT | MS_NOSUID | MS_NOEXEC | MS_RDONLY, opts) < 0 &&
            mount(NULL, dev, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NOEXEC | MS_RDONLY, NULL) <
                0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "remount /dev read-only");
        return 0;
}

int ab_rootfs_prepare_disk(const char *disk_dir, uid_t uid_base, ab_err **err)
{
        static const char *const dirs[] = {"upper", "work", "workspace", "uploads", "outputs"};
        _cleanup_close_ int dfd = open(disk_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s", disk_dir);
        for (size_t i = 0; i < AB_ARRAY_LEN(dirs); i++) {
                if (mkdirat(dfd, dirs[i], 0755) < 0) {
                        if (errno == EEXIST)
                                continue;
                        return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir %s/%s", disk_dir,
                                          dirs[i]);
                }
                if (fchownat(dfd, dirs[i], uid_base, uid_base, AT_SYMLINK_NOFOLLOW) < 0)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "chown %s/%s", disk_dir,
                                          dirs[i]);
        }
        /* lost+found belongs to the filesystem, not to the user. */
        return 0;
}

int ab_rootfs_build(const ab_rootfs_spec *s, ab_err **err)
{
        char disk[4096], mask[4096], lower[4096], root[4096], p[4200], q[4200];
        snprintf(disk, sizeof(disk), "%s/disk", s->box_dir);
        snprintf(mask, sizeof(mask), "%s/mask", s->box_dir);
        snprintf(lower, sizeof(lower), "%s/lower", s->box_dir);
        snprintf(root, sizeof(root), "%s/root", s->box_dir);
        const char *dirs[] = {disk, mask, lower, root};
        for (size_t i = 0; i < AB_ARRAY_LEN(dirs); i++)
                if (mkdir(dirs[i], 0700) < 0 && errno != EEXIST)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir %s", dirs[i]);

        _cleanup_close_ int bfd = open(s->box_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (bfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s", s->box_dir);
        if (ab_disk_mount(bfd, "disk.img", disk, err) < 0)
                return -1;
        if (ab_rootfs_prepare_disk(disk, s->uid_base, err) < 0)
                return -1;

        if (mount("mask", mask, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=4m") < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mount mask tmpfs");
        {
                _cleanup_close_ int mfd = open(mask, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (mfd < 0)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "open %s", mask);
                if (fchown(mfd, s->uid_base, s->uid_base) < 0)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "chown mask");
                int r = build_mask(mfd, s);
                if (r < 0)
                        return ab_err_set(err, AB_E_INTERNAL, -r, "cannot build the rootfs mask");
        }
        if (mount(NULL, mask, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  NULL) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "remount mask read-only");

        if (idmapped_lower(s->base, lower, s->userns_fd, err) < 0)
                return -1;

        _cleanup_free_ char *opts =
            xasprintf("lowerdir=%s:%s,upperdir=%s/upper,workdir=%s/work", mask, lower, disk, disk);
        if (mount("agentbox", root, "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot mount the box's overlay root");

        static const char *const binds[][2] = {{"workspace", "workspace"},
                                               {"workspace", "mnt/user-data/workspace"},
                                               {"uploads", "mnt/user-data/uploads"},
                                               {"outputs", "mnt/user-data/outputs"}};
        for (size_t i = 0; i < AB_ARRAY_LEN(binds); i++) {
                snprintf(p, sizeof(p), "%s/%s", disk, binds[i][0]);
                snprintf(q, sizeof(q), "%s/%s", root, binds[i][1]);
                if (bind(p, q, false, err) < 0)
                        return -1;
        }
        if (s->skills_dir) {
                snprintf(q, sizeof(q), "%s/mnt/skills", root);
                if (bind(s->skills_dir, q, true, err) < 0)
                        return -1;
                snprintf(q, sizeof(q), "%s/skills", root);
                if (bind(s->skills_dir, q, true, err) < 0)
                        return -1;
        }
        char o[128];
        snprintf(q, sizeof(q), "%s/tmp", root);
        snprintf(o, sizeof(o), "mode=1777,size=%llum,uid=%u,gid=%u", (unsigned long long)s->tmp_mib,
                 (unsigned)s->uid_base, (unsigned)s->uid_base);
        if (mount("tmpfs", q, "tmpfs", MS_NOSUID | MS_NODEV, o) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mount /tmp");
        snprintf(q, sizeof(q), "%s/run", root);
        snprintf(o, sizeof(o), "mode=755,size=16m,uid=%u,gid=%u", (unsigned)s->uid_base,
                 (unsigned)s->uid_base);
        if (mount("tmpfs", q, "tmpfs", MS_NOSUID | MS_NODEV, o) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mount /run");
        return mount_dev(root, s->uid_base, err);
}
