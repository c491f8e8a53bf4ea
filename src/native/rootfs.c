#include "native/rootfs.h"
#include "native/boxfs.h"
#include "native/loopdisk.h"
#include "base/buf.h"

#include <fcntl.h>
#include <sched.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>

/* Host paths a box shares: each becomes its own overlay (the host path,
 * idmapped and read-only, under a per-box upper layer on the box's disk).
 * Everything else comes from a skeleton built per start, so a host path
 * that is not listed here - including any created after the box started -
 * never appears in a box. Top-level symlinks among them (merged /usr:
 * /bin -> usr/bin) are recreated as symlinks. */
static const char *const shared[] = {
    "usr",
    "etc",
    "bin",
    "sbin",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "var/lib/dpkg",
    "var/lib/apt",
    "var/lib/ucf",
    "var/cache/apt",
    "var/cache/debconf",
    NULL,
};
#define N_SHARED (AB_ARRAY_LEN(shared) - 1)

const char *const *ab_rootfs_shared(void)
{
        return shared;
}

/* The skeleton: the box's own directories (mode). */
static const struct {
        const char *path;
        mode_t mode;
} skel_dirs[] = {
    {"proc", 0555},
    {"dev", 0755},
    {"tmp", 01777},
    {"run", 0755},
    {"sys", 0555},
    {"mnt", 0755},
    {"mnt/user-data", 0755},
    {"mnt/user-data/workspace", 0755},
    {"mnt/user-data/uploads", 0755},
    {"mnt/user-data/outputs", 0755},
    {"mnt/skills", 0755},
    {"root", 0700},
    {"home", 0755},
    {"workspace", 0755},
    {"skills", 0755},
    {"srv", 0755},
    {"media", 0755},
    {"opt", 0755},
    {"var", 0755},
    {"var/lib", 0755},
    {"var/cache", 0755},
    {"var/log", 0755},
    {"var/tmp", 01777},
    {"var/spool", 0755},
    {"var/mail", 02775},
    {"var/local", 02775},
    {"var/opt", 0755},
    {"var/backups", 0755},
};
static const char *const skel_links[][2] = {{"var/run", "/run"}, {"var/lock", "/run/lock"}};

/* The private directories a custom rootfs gets on top of its own tree. */
static const char *const top_private[] = {"proc", "dev",  "tmp",       "run",   "sys",
                                          "mnt",  "root", "workspace", "skills"};

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

/* Hides host_dir/rel in a layer's mask (mask_dfd stands for host_dir):
 * mirrors the parents, whiteouts the leaf. */
static int hide_rel(int mask_dfd, const char *host_dir, const char *rel_in, uid_t base)
{
        char rel[4096];
        snprintf(rel, sizeof(rel), "%s", rel_in);
        size_t len = strlen(rel);
        while (len > 0 && rel[len - 1] == '/')
                rel[--len] = '\0';
        if (!len)
                return 0;
        for (char *p = rel;; p++) {
                bool last = (*p == '\0');
                if (*p != '/' && !last)
                        continue;
                char saved = *p;
                *p = '\0';
                struct stat st;
                if (fstatat(mask_dfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISCHR(st.st_mode))
                        return 0; /* already whited out */
                if (last)
                        return whiteout(mask_dfd, rel);
                char host[8200];
                snprintf(host, sizeof(host), "%s/%s", host_dir, rel);
                int r = mirror_dir(mask_dfd, rel, host, base);
                if (r < 0)
                        return r == -ENOENT ? 0 : r;
                *p = saved;
        }
}

/* Whether `rel` (relative to /) lies below the shared path `layer`. */
static const char *below(const char *rel, const char *layer)
{
        size_t n = strlen(layer);
        return !strncmp(rel, layer, n) && rel[n] == '/' ? rel + n + 1 : NULL;
}

/* Whether the hide list names the shared path itself: nobody else may
 * enter it on the host, so the box gets an empty directory instead. */
static bool layer_hidden(const ab_hide_list *l, const char *layer)
{
        for (size_t i = 0; l && i < l->n; i++)
                if (!strcmp(l->rel[i], layer))
                        return true;
        return false;
}

/* A shared layer's mask: a whiteout for each path of the hide list inside
 * it (see native/hide.h: what no unprivileged host user may read, and the
 * deny list of /etc). */
static int hide_unreadable(int mask_dfd, const char *layer, const ab_hide_list *l, uid_t base)
{
        char host[300];
        snprintf(host, sizeof(host), "/%s", layer);
        int r = 0;
        for (size_t i = 0; r == 0 && l && i < l->n; i++) {
                const char *rel = below(l->rel[i], layer);
                if (rel)
                        r = hide_rel(mask_dfd, host, rel, base);
        }
        return r;
}

/* The box's own /etc/hostname and /etc/hosts, on top of the host's (which
 * name the host), owned by the box's root. */
static int etc_own_names(int mask_dfd, const char *hostname, uid_t base)
{
        _cleanup_free_ char *hosts =
            xasprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                      "127.0.1.1\t%s\n",
                      hostname);
        _cleanup_free_ char *name = xasprintf("%s\n", hostname);
        const char *const files[][2] = {{"hostname", name}, {"hosts", hosts}};
        for (size_t i = 0; i < AB_ARRAY_LEN(files); i++) {
                unlinkat(mask_dfd, files[i][0], 0); /* a whiteout from the hide list */
                _cleanup_close_ int fd =
                    openat(mask_dfd, files[i][0], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                if (fd < 0)
                        return -errno;
                int r = ab_write_all(fd, files[i][1], strlen(files[i][1]));
                if (r < 0)
                        return r;
                if (fchown(fd, base, base) < 0)
                        return -errno;
        }
        return 0;
}

/* Layer name of a shared path: "var/lib/dpkg" -> "var_lib_dpkg". */
static void layer_name(const char *path, char *out, size_t len)
{
        snprintf(out, len, "%s", path);
        for (char *p = out; *p; p++)
                if (*p == '/')
                        *p = '_';
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

/* A new file system of `type` (fsopen, fsconfig with the string options
 * kv[0..n), fsmount with attrs): a detached mount, not yet anywhere in the
 * tree. Relative paths among the options resolve against the working
 * directory (the box directory) and are shown as given in mountinfo.
 * Returns its fd or -errno. */
static int fs_tree(const char *type, const char *const (*kv)[2], size_t n, unsigned attrs)
{
        _cleanup_close_ int fs = (int)syscall(SYS_fsopen, type, FSOPEN_CLOEXEC);
        if (fs < 0)
                return -errno;
        for (size_t i = 0; i < n; i++)
                if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, kv[i][0], kv[i][1], 0) < 0)
                        return -errno;
        if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                return -errno;
        int t = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, attrs);
        return t < 0 ? -errno : t;
}

/* A tmpfs owned by `owner` (mode and size as tmpfs spells them; nr_inodes
 * may be NULL for tmpfs's default). */
static int tmpfs_tree(const char *mode, const char *size, const char *nr_inodes, uid_t owner,
                      unsigned attrs)
{
        char id[16];
        snprintf(id, sizeof(id), "%u", (unsigned)owner);
        const char *const kv[][2] = {{"source", "tmpfs"}, {"mode", mode}, {"size", size},
                                     {"uid", id},         {"gid", id},    {"nr_inodes", nr_inodes}};
        return fs_tree("tmpfs", kv, AB_ARRAY_LEN(kv) - !nr_inodes, attrs);
}

/* A clone of the directory at dirfd/name (no symlink on the way), not recursive. */
static int clone_dir(int dirfd, const char *name)
{
        struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                               .resolve =
                                   RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
        _cleanup_close_ int src = (int)syscall(SYS_openat2, dirfd, name, &how, sizeof(how));
        if (src < 0)
                return -errno;
        int t = (int)syscall(SYS_open_tree, src, "",
                             OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
        return t < 0 ? -errno : t;
}

static int mount_attr(int tree, uint64_t set)
{
        struct mount_attr a = {.attr_set = set};
        return syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0 ? -errno : 0;
}

/* Moves the detached mount `tree` onto path (absolute, inside the box) of
 * the root at rfd. The mount point is reached with ab_mount_point (binds.h):
 * never through a symlink of the box's; a planted symlink as the last
 * component is replaced, one before it fails the start naming the path. */
static int move_to(int rfd, const char *path, int tree, uid_t base, ab_err **err)
{
        _cleanup_close_ int t = ab_mount_point(rfd, path, base);
        if (t == -ELOOP || t == -ENOTDIR)
                return ab_err_set(err, AB_E_INVALID, -t,
                                  "cannot mount the box's %s: a symlink or a file in the box's "
                                  "own layer is in the way (mounts never follow the box's "
                                  "symlinks); remove it from the box's %s",
                                  path, path);
        if (t < 0)
                return ab_err_set(err, AB_E_INTERNAL, -t, "cannot open the box's %s", path);
        if (syscall(SYS_move_mount, tree, "", t, "",
                    MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot mount the box's %s", path);
        return 0;
}

/* The skills folder, read-only, at path, with its staging area (installs in
 * progress, native/skillsfs.h) covered by an empty read-only tmpfs. */
static int bind_skills(int rfd, const char *src, const char *path, uid_t base, ab_err **err)
{
        /* src is the host's skills folder (the server's): a path is safe there. */
        _cleanup_close_ int tree =
            (int)syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        int r = tree < 0
                    ? -errno
                    : mount_attr(tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "cannot bind the skills on %s", path);
        if (move_to(rfd, path, tree, base, err) < 0)
                return -1;
        /* tree is the mounted bind now: .staging is looked up inside it. */
        struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                               .resolve =
                                   RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
        _cleanup_close_ int st = (int)syscall(SYS_openat2, tree, ".staging", &how, sizeof(how));
        if (st < 0)
                return 0;
        const char *const kv[][2] = {
            {"source", "tmpfs"}, {"size", "4k"}, {"nr_inodes", "2"}, {"mode", "0555"}};
        _cleanup_close_ int cover =
            fs_tree("tmpfs", kv, AB_ARRAY_LEN(kv),
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
        if (cover < 0 || syscall(SYS_move_mount, cover, "", st, "",
                                 MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                return ab_err_set(err, AB_E_INTERNAL, cover < 0 ? -cover : errno,
                                  "hide %s/.staging", path);
        return 0;
}

static int mount_dev(int rfd, uid_t base, ab_err **err)
{
        _cleanup_close_ int dev =
            tmpfs_tree("755", "1m", "256", base, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
        if (dev < 0)
                return ab_err_set(err, AB_E_INTERNAL, -dev, "mount /dev tmpfs");
        if (move_to(rfd, "/dev", dev, base, err) < 0)
                return -1;
        /* Filled through the fd of its own root (a fresh tmpfs: nothing of
         * the box's in it). The host's nodes, made again here (we are host
         * root, and this tmpfs is not nodev): the same devices, mode and
         * owner as binds of them would show, for one system call each
         * instead of two mounts. */
        static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
        for (size_t i = 0; i < AB_ARRAY_LEN(nodes); i++) {
                char src[64];
                snprintf(src, sizeof(src), "/dev/%s", nodes[i]);
                struct stat st;
                if (stat(src, &st) < 0 || !S_ISCHR(st.st_mode))
                        return ab_err_set(err, AB_E_INTERNAL, errno ? errno : ENODEV,
                                          "host device %s", src);
                if (mknodat(dev, nodes[i], S_IFCHR | (st.st_mode & 0777), st.st_rdev) < 0 ||
                    fchmodat(dev, nodes[i], st.st_mode & 0777, 0) < 0 ||
                    fchownat(dev, nodes[i], st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "make /dev/%s", nodes[i]);
        }
        static const char *const links[][2] = {{"fd", "/proc/self/fd"},
                                               {"stdin", "/proc/self/fd/0"},
                                               {"stdout", "/proc/self/fd/1"},
                                               {"stderr", "/proc/self/fd/2"},
                                               {"ptmx", "pts/ptmx"}};
        for (size_t i = 0; i < AB_ARRAY_LEN(links); i++) {
                if (symlinkat(links[i][1], dev, links[i][0]) < 0 && errno != EEXIST)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "symlink /dev/%s",
                                          links[i][0]);
                (void)!fchownat(dev, links[i][0], base, base, AT_SYMLINK_NOFOLLOW);
        }
        if (mkdirat(dev, "pts", 0755) < 0 && errno != EEXIST)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir /dev/pts");
        if (mkdirat(dev, "shm", 01777) < 0 && errno != EEXIST)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir /dev/shm");
        _cleanup_close_ int shm =
            tmpfs_tree("1777", "64m", NULL, base, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        _cleanup_close_ int at = openat(dev, "shm", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (shm < 0 || at < 0 ||
            syscall(SYS_move_mount, shm, "", at, "",
                    MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                return ab_err_set(err, AB_E_INTERNAL, shm < 0 ? -shm : errno, "mount /dev/shm");
        /* Lock the layout: no new nodes can appear in /dev (the mount is
         * read-only; a box cannot lift that on a mount it was handed). */
        int r = mount_attr(dev, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "remount /dev read-only");
        return 0;
}

int ab_rootfs_prepare_disk(const char *disk_dir, uid_t uid_base, ab_err **err)
{
        static const char *const dirs[] = {"layers", "workspace", "uploads", "outputs"};
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
        return 0;
}

/* Makes disk/layers/NAME/{upper,work}; a new upper takes the owner (shifted)
 * and mode of `like`, because the upper decides a merged directory's. */
static int layer_dirs(const char *disk, const char *name, const struct stat *like, uid_t base,
                      char *upper, char *work, size_t len, ab_err **err)
{
        char dir[4400];
        snprintf(dir, sizeof(dir), "%s/layers/%s", disk, name);
        snprintf(upper, len, "%s/upper", dir);
        snprintf(work, len, "%s/work", dir);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir %s", dir);
        if (mkdir(work, 0700) < 0 && errno != EEXIST)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir %s", work);
        if (mkdir(upper, like->st_mode & 07777) < 0) {
                if (errno == EEXIST)
                        return 0;
                return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir %s", upper);
        }
        if (chown(upper, like->st_uid + base, like->st_gid + base) < 0 ||
            chmod(upper, like->st_mode & 07777) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "set owner of %s", upper);
        return 0;
}

/* The overlay's layers are named relative to the box directory (the setup
 * process's working directory, see ab_rootfs_build): overlayfs shows its
 * options as given in the box's /proc/self/mountinfo, and so a box sees
 * "lowerdir=mask/skel,upperdir=disk/layers/root/upper", never a host path.
 * (Layers given as file descriptors would show their host paths.) */
static const char *box_rel(const char *box_dir, const char *path)
{
        size_t n = strlen(box_dir);
        if (!strncmp(path, box_dir, n) && path[n] == '/')
                return path + n + 1;
        return path;
}

/* An overlay of a shared host path, mounted at /rel of the root at rfd. */
static int shared_overlay(const char *box_dir, int rfd, const char *rel, const char *lowers,
                          const char *upper, const char *work, uid_t base, ab_err **err)
{
        const char *const kv[][2] = {{"source", "agentbox"},
                                     {"lowerdir", lowers},
                                     {"upperdir", box_rel(box_dir, upper)},
                                     {"workdir", box_rel(box_dir, work)}};
        char path[300];
        snprintf(path, sizeof(path), "/%s", rel);
        _cleanup_close_ int tree =
            fs_tree("overlay", kv, AB_ARRAY_LEN(kv), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        if (tree < 0)
                return ab_err_set(err, AB_E_INTERNAL, -tree, "cannot make the overlay of %s", path);
        return move_to(rfd, path, tree, base, err);
}

static int mount_overlay(const char *box_dir, const char *target, const char *lowers,
                         const char *upper, const char *work, ab_err **err)
{
        _cleanup_free_ char *opts = xasprintf("lowerdir=%s,upperdir=%s,workdir=%s", lowers,
                                              box_rel(box_dir, upper), box_rel(box_dir, work));
        if (mount("agentbox", target, "overlay", MS_NOSUID | MS_NODEV, opts) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot mount the overlay on %s",
                                  target);
        return 0;
}

/* The skeleton (mask/skel) of a box on the host base, and the masks of the
 * shared layers that need whiteouts (mask/m_NAME). */
static bool layer_needs_mask(const ab_rootfs_spec *s, size_t i);

/* Makes mask/skel, the root of a box's skeleton, owned by box root; returns its fd. */
static int make_skel(int mfd, uid_t base)
{
        if (mkdirat(mfd, "skel", 0755) < 0 || fchownat(mfd, "skel", base, base, 0) < 0)
                return -errno;
        int fd = openat(mfd, "skel", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static int build_masks(int mfd, const ab_rootfs_spec *s, bool *has_mask)
{
        _cleanup_close_ int sk = make_skel(mfd, s->uid_base);
        if (sk < 0)
                return sk;
        for (size_t i = 0; i < AB_ARRAY_LEN(skel_dirs); i++) {
                if (mkdirat(sk, skel_dirs[i].path, skel_dirs[i].mode) < 0 && errno != EEXIST)
                        return -errno;
                if (fchownat(sk, skel_dirs[i].path, s->uid_base, s->uid_base, 0) < 0 ||
                    fchmodat(sk, skel_dirs[i].path, skel_dirs[i].mode, 0) < 0)
                        return -errno;
        }
        for (size_t i = 0; i < AB_ARRAY_LEN(skel_links); i++) {
                if (symlinkat(skel_links[i][1], sk, skel_links[i][0]) < 0 && errno != EEXIST)
                        return -errno;
                (void)!fchownat(sk, skel_links[i][0], s->uid_base, s->uid_base,
                                AT_SYMLINK_NOFOLLOW);
        }
        for (size_t i = 0; i < N_SHARED; i++) {
                char host[300];
                snprintf(host, sizeof(host), "/%s", shared[i]);
                struct stat st;
                if (lstat(host, &st) < 0)
                        continue;
                if (S_ISLNK(st.st_mode) && !strchr(shared[i], '/')) {
                        char target[4096];
                        ssize_t n = readlink(host, target, sizeof(target) - 1);
                        if (n <= 0)
                                continue;
                        target[n] = '\0';
                        if (symlinkat(target, sk, shared[i]) < 0 && errno != EEXIST)
                                return -errno;
                        (void)!fchownat(sk, shared[i], s->uid_base, s->uid_base,
                                        AT_SYMLINK_NOFOLLOW);
                        continue;
                }
                if (!S_ISDIR(st.st_mode))
                        continue;
                /* The mount point; its parents are skeleton directories. */
                if (mkdirat(sk, shared[i], st.st_mode & 07777) < 0 && errno != EEXIST)
                        return -errno;
                (void)!fchownat(sk, shared[i], st.st_uid + s->uid_base, st.st_gid + s->uid_base, 0);
        }
        for (size_t i = 0; i < N_SHARED; i++)
                has_mask[i] = layer_needs_mask(s, i);
        return 0;
}

/* Whether shared[i] gets a mask layer: /etc (its secrets) always, and any
 * layer a hidden path (the data folder...) lies in. */
static bool layer_needs_mask(const ab_rootfs_spec *s, size_t i)
{
        char host[300];
        snprintf(host, sizeof(host), "/%s", shared[i]);
        size_t hl = strlen(host);
        bool hides = !strcmp(shared[i], "etc");
        for (const char *const *h = s->hide; h && *h; h++)
                hides |= !strncmp(*h, host, hl) && (*h)[hl] == '/';
        for (size_t k = 0; s->unreadable && k < s->unreadable->n; k++)
                hides |= below(s->unreadable->rel[k], shared[i]) != NULL;
        return hides;
}

/* Builds the per-layer masks (mask/m_NAME) of the layers that need one. */
static int build_layer_masks(int mfd, const ab_rootfs_spec *s)
{
        int r;
        for (size_t i = 0; i < N_SHARED; i++) {
                if (!layer_needs_mask(s, i))
                        continue;
                char name[64], mname[80], host[300];
                layer_name(shared[i], name, sizeof(name));
                snprintf(mname, sizeof(mname), "m_%s", name);
                snprintf(host, sizeof(host), "/%s", shared[i]);
                size_t hl = strlen(host);
                if (mkdirat(mfd, mname, 0755) < 0)
                        return -errno;
                r = mirror_dir(mfd, mname, host, s->uid_base);
                if (r < 0)
                        return r;
                _cleanup_close_ int lfd = openat(mfd, mname, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (lfd < 0)
                        return -errno;
                if ((r = hide_unreadable(lfd, shared[i], s->unreadable, s->uid_base)) < 0)
                        return r;
                if (!strcmp(shared[i], "etc") && s->hostname &&
                    (r = etc_own_names(lfd, s->hostname, s->uid_base)) < 0)
                        return r;
                for (const char *const *h = s->hide; h && *h; h++)
                        if (!strncmp(*h, host, hl) && (*h)[hl] == '/' &&
                            (r = hide_rel(lfd, host, *h + hl + 1, s->uid_base)) < 0)
                                return r;
        }
        return 0;
}

/* An image's /etc gets the box's own hostname and hosts, and the host's
 * resolv.conf (a container's engine provides them the same way): files in
 * the skeleton's etc/, which merges with the image's. */
static int image_etc(int sk, const ab_rootfs_spec *s)
{
        if (mkdirat(sk, "etc", 0755) < 0 && errno != EEXIST)
                return -errno;
        if (fchownat(sk, "etc", s->uid_base, s->uid_base, 0) < 0)
                return -errno;
        _cleanup_close_ int efd =
            openat(sk, "etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (efd < 0)
                return -errno;
        int r = etc_own_names(efd, s->hostname ? s->hostname : "agentbox", s->uid_base);
        if (r < 0)
                return r;
        _cleanup_free_ char *resolv = NULL;
        size_t len = 0;
        if (ab_read_file(AT_FDCWD, "/etc/resolv.conf", &resolv, &len) < 0)
                return 0;
        _cleanup_close_ int fd =
            openat(efd, "resolv.conf", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if ((r = ab_write_all(fd, resolv, len)) < 0)
                return r;
        return fchown(fd, s->uid_base, s->uid_base) < 0 ? -errno : 0;
}

/* A custom rootfs: one overlay over the whole tree, with the box's private
 * directories made empty (opaque) on top of it. */
static int build_custom_mask(int mfd, const ab_rootfs_spec *s)
{
        int r;
        _cleanup_close_ int sk = make_skel(mfd, s->uid_base);
        if (sk < 0)
                return sk;
        for (size_t i = 0; i < AB_ARRAY_LEN(top_private); i++) {
                mode_t mode = !strcmp(top_private[i], "tmp") ? 01777 : 0755;
                if ((r = opaque_dir(sk, top_private[i], mode, s->uid_base)) < 0)
                        return r;
        }
        static const char *const mnt_dirs[] = {"mnt/user-data", "mnt/user-data/workspace",
                                               "mnt/user-data/uploads", "mnt/user-data/outputs",
                                               "mnt/skills"};
        for (size_t i = 0; i < AB_ARRAY_LEN(mnt_dirs); i++)
                if ((r = opaque_dir(sk, mnt_dirs[i], 0755, s->uid_base)) < 0)
                        return r;
        if (s->layers)
                return image_etc(sk, s);
        return 0;
}

/* The overlay's lowers of a custom root: the skeleton on top, then an
 * image's layers top first (lower/l0 is the bottom one), or the rootfs. */
static char *image_lowers(const char *const *layers)
{
        if (!layers)
                return xstrdup("mask/skel:lower/root");
        ab_buf b = {0};
        ab_buf_puts(&b, "mask/skel");
        size_t n = 0;
        while (layers[n])
                n++;
        while (n-- > 0)
                ab_buf_printf(&b, ":lower/l%zu", n);
        return ab_buf_steal(&b);
}

/* The root of a custom rootfs or an image box: one overlay over it all. */
static int mount_overlay_image(const ab_rootfs_spec *s, const char *root, const char *upper,
                               const char *work, ab_err **err)
{
        _cleanup_free_ char *lowers = image_lowers(s->layers);
        return mount_overlay(s->box_dir, root, lowers, upper, work, err);
}

/* The box's disk is mounted by a helper while the setup process builds what
 * needs no disk (the skeleton, the masks, the idmapped lowers): an ext4
 * mount mostly waits (for its journal thread, for reads through the loop
 * device). The helper shares our memory (clone with CLONE_VM: nothing to
 * copy), so it makes plain system calls only and leaves its result here. */
typedef struct disk_job {
        int dirfd;          /* the box directory */
        const char *target; /* BOX/disk */
        int rc;             /* 0 or -errno */
        const char *what;   /* the step that failed */
} disk_job;

static int disk_helper(void *arg)
{
        disk_job *j = arg;
        j->rc = ab_disk_mount_raw(j->dirfd, "disk.img", j->target, &j->what);
        return 0;
}

#define DISK_HELPER_STACK (64 * 1024)

/* What a layer of a shared host path needs after the disk is there. */
typedef struct layer {
        bool present; /* the host path is a directory */
        struct stat st;
        char name[64];
} layer;

/* The part of the rootfs that needs no disk: the lower and mask tmpfs, the
 * skeleton and masks, and every idmapped lower. */
static int build_without_disk(const ab_rootfs_spec *s, bool host, const char *mask,
                              const char *lower, bool *has_mask, layer *layers, ab_err **err)
{
        char p[4200];
        /* lower/ holds one mount point per layer; it lives only in this namespace. */
        if (mount("lower", lower, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=700,size=64k") <
            0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mount lower tmpfs");
        if (mount("mask", mask, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=4m") < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "mount mask tmpfs");
        {
                _cleanup_close_ int mfd = open(mask, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (mfd < 0)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "open %s", mask);
                int r = host ? build_masks(mfd, s, has_mask) : build_custom_mask(mfd, s);
                if (r == 0 && host)
                        r = build_layer_masks(mfd, s);
                if (r < 0)
                        return ab_err_set(err, AB_E_INTERNAL, -r,
                                          "cannot build the rootfs skeleton");
        }
        if (!host && s->layers) {
                for (size_t i = 0; s->layers[i]; i++) {
                        snprintf(p, sizeof(p), "%s/l%zu", lower, i);
                        if (mkdir(p, 0700) < 0 && errno != EEXIST)
                                return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir %s", p);
                        if (idmapped_lower(s->layers[i], p, s->userns_fd, err) < 0)
                                return -1;
                }
                return 0;
        }
        if (!host) {
                snprintf(p, sizeof(p), "%s/root", lower);
                if (mkdir(p, 0700) < 0 && errno != EEXIST)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir %s", p);
                return idmapped_lower(s->base, p, s->userns_fd, err);
        }
        for (size_t i = 0; i < N_SHARED; i++) {
                char hostp[300];
                snprintf(hostp, sizeof(hostp), "/%s", shared[i]);
                layer *l = &layers[i];
                if (lstat(hostp, &l->st) < 0 || !S_ISDIR(l->st.st_mode) ||
                    layer_hidden(s->unreadable, shared[i]))
                        continue;
                l->present = true;
                layer_name(shared[i], l->name, sizeof(l->name));
                snprintf(p, sizeof(p), "%s/%s", lower, l->name);
                if (mkdir(p, 0700) < 0 && errno != EEXIST)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir %s", p);
                if (idmapped_lower(hostp, p, s->userns_fd, err) < 0)
                        return -1;
        }
        return 0;
}

/* Starts the disk helper, runs build_without_disk, and always waits for the
 * helper before returning (it writes into `job`, in this frame). */
static int build_while_mounting(const ab_rootfs_spec *s, int bfd, const char *disk, bool host,
                                const char *mask, const char *lower, bool *has_mask, layer *layers,
                                ab_err **err)
{
        disk_job job = {.dirfd = bfd, .target = disk, .rc = 0};
        char *stack = mmap(NULL, DISK_HELPER_STACK, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        pid_t h = -1;
        if (stack != MAP_FAILED)
                h = clone(disk_helper, stack + DISK_HELPER_STACK, CLONE_VM | SIGCHLD, &job);
        if (h < 0) /* no helper: mount it ourselves */
                job.rc = ab_disk_mount_raw(bfd, "disk.img", disk, &job.what);
        int r = s->while_mounting ? s->while_mounting(s->ud, err) : 0;
        if (r == 0)
                r = build_without_disk(s, host, mask, lower, has_mask, layers, err);
        if (h > 0)
                while (waitpid(h, NULL, 0) < 0 && errno == EINTR)
                        ;
        if (stack != MAP_FAILED)
                ab_clone_stack_free(stack, DISK_HELPER_STACK);
        if (r < 0)
                return -1;
        if (job.rc < 0)
                return ab_err_set(err, AB_E_INTERNAL, -job.rc, "%s", job.what);
        return 0;
}

/* The disk records whose files it holds (disk/.uid_base, the box's
 * uid_base). A disk that comes with another box's (a fork's copy) has its
 * owners shifted to this box's range first. A shift cut short by a crash
 * is finished by the next start: owners already shifted are outside the
 * old range, and the record is written last. */
static int disk_owners(int dfd, const ab_rootfs_spec *s, ab_err **err)
{
        _cleanup_free_ char *txt = NULL;
        uid_t from = s->disk_uid_base ? s->disk_uid_base : s->uid_base;
        bool known = ab_read_file(dfd, ".uid_base", &txt, NULL) == 0;
        if (known)
                from = (uid_t)strtoul(txt, NULL, 10);
        if (known && from == s->uid_base)
                return 0;
        int r = from != s->uid_base ? ab_boxfs_shift(dfd, from, s->uid_base) : 0;
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r,
                                  "cannot give the disk's files to the box's uid range");
        char buf[32];
        snprintf(buf, sizeof(buf), "%u\n", (unsigned)s->uid_base);
        r = ab_write_file_atomic(dfd, ".uid_base", buf, strlen(buf), 0600);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "cannot write the disk's uid record");
        return 0;
}

/* A fresh disk of an image box (no workspace yet) gets the image's
 * /workspace: the box's /workspace is a bind of the disk's, which would
 * hide the image's. The merged lowers (a read-only overlay of the idmapped
 * layers, or the one layer) show owners as host uids of this box, so a
 * copy that keeps owners is right. Copied under a temporary name, renamed
 * into place whole. Runs in the setup process, cwd = the box directory. */
static int seed_workspace(int dfd, const ab_rootfs_spec *s, ab_err **err)
{
        if (faccessat(dfd, "workspace", F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                return 0;
        size_t n = 0;
        while (s->layers[n])
                n++;
        if (!n)
                return 0;
        const char *src = "lower/l0";
        if (n > 1) {
                ab_buf b = {0};
                ab_buf_puts(&b, "lowerdir=");
                for (size_t i = n; i-- > 0;)
                        ab_buf_printf(&b, "%slower/l%zu", i == n - 1 ? "" : ":", i);
                _cleanup_free_ char *opts = ab_buf_steal(&b);
                if (mkdir("seed", 0700) < 0 && errno != EEXIST)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir seed");
                if (mount("agentbox", "seed", "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, opts) <
                    0)
                        return ab_err_set(err, AB_E_INTERNAL, errno,
                                          "cannot mount the image's layers to copy /workspace");
                src = "seed";
        }
        int r = 0;
        _cleanup_close_ int root = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_close_ int ws =
            root < 0 ? -1
                     : openat(root, "workspace", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (ws >= 0 && fstat(ws, &st) == 0) {
                (void)ab_boxfs_rm_tree(dfd, ".workspace.seed");
                _cleanup_close_ int t = -1;
                if (mkdirat(dfd, ".workspace.seed", 0700) < 0 ||
                    (t = openat(dfd, ".workspace.seed", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
                        r = -errno;
                if (r == 0)
                        r = ab_boxfs_copy_tree(ws, t);
                if (r == 0 &&
                    (fchown(t, st.st_uid, st.st_gid) < 0 || fchmod(t, st.st_mode & 07777) < 0))
                        r = -errno;
                if (r == 0 && renameat(dfd, ".workspace.seed", dfd, "workspace") < 0)
                        r = -errno;
        }
        if (src[0] == 's')
                umount2("seed", MNT_DETACH);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "cannot copy the image's /workspace");
        return 0;
}

int ab_rootfs_build(const ab_rootfs_spec *s, ab_err **err)
{
        char disk[4096], mask[4096], lower[4096], root[4096];
        snprintf(disk, sizeof(disk), "%s/disk", s->box_dir);
        snprintf(mask, sizeof(mask), "%s/mask", s->box_dir);
        snprintf(lower, sizeof(lower), "%s/lower", s->box_dir);
        snprintf(root, sizeof(root), "%s/root", s->box_dir);
        const char *dirs[] = {disk, mask, lower, root};
        for (size_t i = 0; i < AB_ARRAY_LEN(dirs); i++)
                if (mkdir(dirs[i], 0700) < 0 && errno != EEXIST)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "mkdir %s", dirs[i]);

        _cleanup_close_ int bfd = open(s->box_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (bfd < 0 || fchdir(bfd) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s", s->box_dir);
        bool host = !s->layers && strcmp(s->base, "/") == 0;
        bool has_mask[N_SHARED] = {false};
        layer layers[N_SHARED];
        memset(layers, 0, sizeof(layers));
        if (build_while_mounting(s, bfd, disk, host, mask, lower, has_mask, layers, err) < 0)
                return -1;
        {
                _cleanup_close_ int dfd = open(disk, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dfd < 0)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "open %s", disk);
                if (disk_owners(dfd, s, err) < 0 || (s->layers && seed_workspace(dfd, s, err) < 0))
                        return -1;
        }
        if (ab_rootfs_prepare_disk(disk, s->uid_base, err) < 0)
                return -1;

        char upper[4500], work[4500];
        struct stat rst = {.st_mode = S_IFDIR | 0755};
        if (!host && !s->layers && stat(s->base, &rst) < 0)
                return ab_err_set(err, AB_E_INVALID, errno, "rootfs %s", s->base);
        if (layer_dirs(disk, "root", &rst, s->uid_base, upper, work, sizeof(upper), err) < 0)
                return -1;
        /* The root itself is the box directory's (the host's): a path is
         * safe there. Everything below it is the box's own layer, reached
         * only through rfd (move_to). */
        if (host ? mount_overlay(s->box_dir, root, "mask/skel", upper, work, err) < 0
                 : mount_overlay_image(s, root, upper, work, err) < 0)
                return -1;
        _cleanup_close_ int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s", root);
        for (size_t i = 0; host && i < N_SHARED; i++) {
                const layer *l = &layers[i];
                if (!l->present)
                        continue;
                /* The upper's owner is the host dir's, shifted: st_uid + base. */
                if (layer_dirs(disk, l->name, &l->st, s->uid_base, upper, work, sizeof(upper),
                               err) < 0)
                        return -1;
                _cleanup_free_ char *lowers =
                    has_mask[i] ? xasprintf("mask/m_%s:lower/%s", l->name, l->name)
                                : xasprintf("lower/%s", l->name);
                if (shared_overlay(s->box_dir, rfd, shared[i], lowers, upper, work, s->uid_base,
                                   err) < 0)
                        return -1;
        }

        if (mount(NULL, mask, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  NULL) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "remount mask read-only");

        /* Binds of the disk keep its nosuid and nodev (a clone keeps them). */
        static const char *const binds[][2] = {{"workspace", "/workspace"},
                                               {"workspace", "/mnt/user-data/workspace"},
                                               {"uploads", "/mnt/user-data/uploads"},
                                               {"outputs", "/mnt/user-data/outputs"}};
        {
                _cleanup_close_ int dfd = open(disk, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dfd < 0)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "open %s", disk);
                for (size_t i = 0; i < AB_ARRAY_LEN(binds); i++) {
                        _cleanup_close_ int tree = clone_dir(dfd, binds[i][0]);
                        if (tree < 0)
                                return ab_err_set(err, AB_E_INTERNAL, -tree,
                                                  "cannot bind the disk's %s", binds[i][0]);
                        if (move_to(rfd, binds[i][1], tree, s->uid_base, err) < 0)
                                return -1;
                }
        }
        if (s->skills_dir &&
            (bind_skills(rfd, s->skills_dir, "/mnt/skills", s->uid_base, err) < 0 ||
             bind_skills(rfd, s->skills_dir, "/skills", s->uid_base, err) < 0))
                return -1;
        char o[32];
        snprintf(o, sizeof(o), "%llum", (unsigned long long)s->tmp_mib);
        static const char *const tmpfs[][3] = {{"/tmp", "1777", NULL}, {"/run", "755", "16m"}};
        for (size_t i = 0; i < AB_ARRAY_LEN(tmpfs); i++) {
                _cleanup_close_ int tree =
                    tmpfs_tree(tmpfs[i][1], tmpfs[i][2] ? tmpfs[i][2] : o, NULL, s->uid_base,
                               MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
                if (tree < 0)
                        return ab_err_set(err, AB_E_INTERNAL, -tree, "mount %s", tmpfs[i][0]);
                if (move_to(rfd, tmpfs[i][0], tree, s->uid_base, err) < 0)
                        return -1;
        }
        if (mount_dev(rfd, s->uid_base, err) < 0)
                return -1;
        if (!s->n_binds)
                return 0;
        return ab_binds_apply(rfd, s->binds, s->n_binds, s->userns_fd, s->uid_base, err);
}
