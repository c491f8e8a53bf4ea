#include "native/loopdisk.h"
#include "base/id.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>

/* Formats dirfd/name (a new sparse file of size_mib) with mkfs.ext4. */
static int mkfs_at(int dirfd, const char *name, uint64_t size_mib, ab_err **err)
{
        _cleanup_close_ int fd =
            openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot create disk image %s", name);
        if (ftruncate(fd, (off_t)(size_mib * 1024 * 1024)) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot size disk image to %llu MiB",
                                  (unsigned long long)size_mib);
        char fdpath[64];
        snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
        pid_t pid = fork();
        if (pid < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "fork");
        if (pid == 0) {
                fcntl(fd, F_SETFD, 0); /* mkfs opens it by /proc/self/fd path */
                int null = open("/dev/null", O_RDWR);
                if (null >= 0) {
                        dup2(null, 0);
                        dup2(null, 1);
                }
                /* -m 0: no reserved blocks, the user gets the whole quota. */
                execlp("mkfs.ext4", "mkfs.ext4", "-q", "-F", "-m", "0", "-E",
                       "lazy_itable_init=1,lazy_journal_init=1", "-L", "agentbox", fdpath,
                       (char *)NULL);
                _exit(127);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "waitpid mkfs");
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                unlinkat(dirfd, name, 0);
                if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
                        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                          "mkfs.ext4 not found: install e2fsprogs");
                return ab_err_set(err, AB_E_INTERNAL, 0, "mkfs.ext4 failed (status %d)", st);
        }
        if (fsync(fd) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "fsync disk image");
        return 0;
}

/* Copies the data extents of src into dst (same size, holes stay holes). */
static int copy_sparse(int src, int dst, off_t size)
{
        if (ftruncate(dst, size) < 0)
                return -errno;
        off_t data = 0;
        for (;;) {
                data = lseek(src, data, SEEK_DATA);
                if (data < 0)
                        return errno == ENXIO ? 0 : -errno;
                off_t hole = lseek(src, data, SEEK_HOLE);
                if (hole < 0)
                        return -errno;
                off_t in = data, out = data;
                while (in < hole) {
                        ssize_t n = copy_file_range(src, &in, dst, &out, (size_t)(hole - in), 0);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0)
                                return n < 0 ? -errno : -EIO;
                }
                data = hole;
        }
}

/* Opens the formatted template of this size, formatting it first if needed. */
static int open_template(int cache_dfd, uint64_t size_mib, ab_err **err)
{
        char tmpl[64];
        snprintf(tmpl, sizeof(tmpl), "disk-%llu.img", (unsigned long long)size_mib);
        _cleanup_close_ int src = openat(cache_dfd, tmpl, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (src < 0 && errno == ENOENT) {
                /* First disk of this size: format a template, publish it
                 * atomically. Creates racing here (threads or processes) each
                 * format their own under a unique name; the first to publish
                 * wins and the others use the winner's. */
                char tmp[96], rnd[17];
                ab_id_random(rnd);
                snprintf(tmp, sizeof(tmp), ".%s.%s", tmpl, rnd);
                if (mkfs_at(cache_dfd, tmp, size_mib, err) < 0)
                        return -1;
                if (renameat2(cache_dfd, tmp, cache_dfd, tmpl, RENAME_NOREPLACE) < 0) {
                        int e = errno;
                        unlinkat(cache_dfd, tmp, 0);
                        if (e != EEXIST)
                                return ab_err_set(err, AB_E_INTERNAL, e, "publish disk template");
                }
                src = openat(cache_dfd, tmpl, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        }
        if (src < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open disk template %s", tmpl);
        struct stat st;
        if (fstat(src, &st) < 0 || (uint64_t)st.st_size != size_mib * 1024 * 1024)
                return ab_err_set(err, AB_E_INTERNAL, errno, "disk template %s has the wrong size",
                                  tmpl);
        return steal_fd(&src);
}

/* Copies the template into dirfd/name (a new file) and syncs it. */
static int copy_template(int cache_dfd, int dirfd, const char *name, uint64_t size_mib,
                         ab_err **err)
{
        _cleanup_close_ int src = open_template(cache_dfd, size_mib, err);
        if (src < 0)
                return -1;
        _cleanup_close_ int dst =
            openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (dst < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot create disk image %s", name);
        int r = copy_sparse(src, dst, (off_t)(size_mib * 1024 * 1024));
        if (r == 0 && fsync(dst) < 0)
                r = -errno;
        if (r < 0) {
                unlinkat(dirfd, name, 0);
                return ab_err_set(err, r == -ENOSPC ? AB_E_LIMIT : AB_E_INTERNAL, -r,
                                  "cannot copy the disk template");
        }
        return 0;
}

static void spare_name(char *buf, size_t len, uint64_t size_mib, int i)
{
        snprintf(buf, len, "spare-%llu.%d.img", (unsigned long long)size_mib, i);
}

/* Moves a spare of this size to dirfd/name: 0, or -ENOENT when none is left. */
static int take_spare(int cache_dfd, int dirfd, const char *name, uint64_t size_mib)
{
        for (int i = 0; i < AB_DISK_SPARES; i++) {
                char sp[64];
                spare_name(sp, sizeof(sp), size_mib, i);
                /* Atomic: of two creates, one gets it, the other ENOENT. */
                if (renameat2(cache_dfd, sp, dirfd, name, RENAME_NOREPLACE) < 0)
                        continue;
                struct stat st;
                if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
                    (uint64_t)st.st_size == size_mib * 1024 * 1024)
                        return 0;
                unlinkat(dirfd, name, 0); /* not what we made: never use it */
        }
        return -ENOENT;
}

int ab_disk_create(int cache_dfd, int dirfd, const char *name, uint64_t size_mib, ab_err **err)
{
        if (take_spare(cache_dfd, dirfd, name, size_mib) == 0)
                return 0;
        return copy_template(cache_dfd, dirfd, name, size_mib, err);
}

int ab_disk_make_spares(int cache_dfd, uint64_t size_mib, ab_err **err)
{
        for (int i = 0; i < AB_DISK_SPARES; i++) {
                char sp[64], tmp[96];
                spare_name(sp, sizeof(sp), size_mib, i);
                if (faccessat(cache_dfd, sp, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                        continue;
                char rnd[17];
                ab_id_random(rnd);
                snprintf(tmp, sizeof(tmp), ".%s.%s", sp, rnd);
                /* Synced before it gets its name: a spare is always whole. */
                if (copy_template(cache_dfd, cache_dfd, tmp, size_mib, err) < 0)
                        return -1;
                if (renameat2(cache_dfd, tmp, cache_dfd, sp, RENAME_NOREPLACE) < 0)
                        unlinkat(cache_dfd, tmp, 0); /* made meanwhile by another process */
        }
        return 0;
}

void ab_disk_sweep_cache(int cache_dfd)
{
        int dfd = openat(cache_dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                return;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
                struct stat st;
                /* Spares and templates being made by a process that died. */
                if (e->d_name[0] != '.' || !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
                    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    !S_ISREG(st.st_mode) || st.st_mtime > time(NULL) - 60)
                        continue;
                unlinkat(dirfd(d), e->d_name, 0);
        }
        closedir(d);
}

int ab_disk_clone(int src, int dst, bool durable, bool *cloned, ab_err **err)
{
        *cloned = false;
        struct stat st;
        if (fstat(src, &st) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "stat the disk image to copy");
        int r = 0;
        if (ioctl(dst, FICLONE, src) == 0)
                *cloned = true;
        else if (errno == EOPNOTSUPP || errno == EXDEV || errno == EINVAL || errno == ENOTTY ||
                 errno == ENOSYS || errno == EPERM)
                r = copy_sparse(src, dst, st.st_size); /* no reflinks here: copy the extents */
        else
                r = -errno;
        if (r == 0 && durable && fsync(dst) < 0)
                r = -errno;
        if (r < 0)
                return ab_err_set(err, r == -ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, -r,
                                  "cannot copy the disk image");
        return 0;
}

int ab_disk_resize(int dirfd, const char *name, uint64_t size_mib, ab_err **err)
{
        _cleanup_close_ int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot open disk image %s", name);
        if ((uint64_t)st.st_size >= size_mib * 1024 * 1024)
                return 0;
        if (ftruncate(fd, (off_t)(size_mib * 1024 * 1024)) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot grow disk image");
        return 0;
}

static const char no_loop_control[] = "cannot open /dev/loop-control (is the loop module loaded?)";
static const char mount_failed[] = "cannot mount the box disk";

/* Attaches fd to a free loop device; returns the loop fd or -errno, with
 * the failed step in *what. Retries when another process takes the device
 * between GET_FREE and CONFIGURE. Plain system calls only (see
 * ab_disk_mount_raw). */
/* Errors of a device another process took, or is tearing down, between
 * LOOP_CTL_GET_FREE and LOOP_CONFIGURE: worth another device. */
static bool loop_race(int r)
{
        return r == -EBUSY || r == -ENXIO || r == -ENOENT || r == -EAGAIN;
}

/* After a few lost races in a row, give the others a millisecond. */
static void loop_backoff(int attempt)
{
        if (attempt >= 8) {
                struct timespec ts = {0, 1000 * 1000};
                nanosleep(&ts, NULL);
        }
}

static int loop_attach(int backing, char *dev, size_t devlen, const char **what)
{
        int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        if (ctl < 0) {
                *what = no_loop_control;
                return -errno;
        }
        int r = -EBUSY;
        *what = "no free loop device after 64 attempts";
        for (int attempt = 0; attempt < 64; attempt++) {
                int n = ioctl(ctl, LOOP_CTL_GET_FREE);
                if (n < 0) {
                        r = -errno;
                        *what = "no free loop device";
                        break;
                }
                snprintf(dev, devlen, "/dev/loop%d", n);
                int lfd = open(dev, O_RDWR | O_CLOEXEC);
                if (lfd < 0 && errno == ENOENT) {
                        /* No devtmpfs node yet (e.g. /dev is a plain tmpfs): make one. */
                        if (mknod(dev, S_IFBLK | 0660, makedev(7, n)) == 0 || errno == EEXIST)
                                lfd = open(dev, O_RDWR | O_CLOEXEC);
                }
                if (lfd < 0) {
                        r = -errno;
                        *what = "cannot open the loop device";
                        if (!loop_race(r))
                                break;
                        loop_backoff(attempt);
                        continue;
                }
                struct loop_config cfg = {
                    .fd = (unsigned)backing,
                    .block_size = 0,
                    .info = {.lo_flags = LO_FLAGS_AUTOCLEAR},
                };
                if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0) {
                        close(ctl);
                        return lfd;
                }
                r = -errno;
                close(lfd);
                if (!loop_race(r)) {
                        *what = "cannot attach the loop device";
                        break;
                }
                loop_backoff(attempt);
        }
        close(ctl);
        return r;
}

int ab_disk_mount_raw(int dirfd, const char *name, const char *target, const char **what)
{
        int backing = name ? openat(dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
                           : fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
        if (backing < 0) {
                *what = "cannot open the disk image";
                return -errno;
        }
        char dev[32];
        int lfd = loop_attach(backing, dev, sizeof(dev), what);
        close(backing);
        if (lfd < 0)
                return lfd;
        int r = 0;
        if (mount(dev, target, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME,
                  "discard,errors=remount-ro") < 0) {
                r = -errno;
                *what = mount_failed;
        }
        /* Closing lfd now is what makes AUTOCLEAR detach the device after unmount. */
        close(lfd);
        return r;
}

int ab_disk_mount(int dirfd, const char *name, const char *target, ab_err **err)
{
        const char *what = NULL;
        int r = ab_disk_mount_raw(dirfd, name, target, &what);
        if (r < 0)
                return ab_err_set(err,
                                  what == no_loop_control ? AB_E_UNSUPPORTED
                                  : what == mount_failed  ? AB_E_INTERNAL
                                                          : AB_E_UNAVAILABLE,
                                  -r, "%s", what);
        return 0;
}

/* The host path of the image loop device N is attached to, or "". */
static void loop_backing(unsigned n, char *out, size_t len)
{
        char p[96];
        snprintf(p, sizeof(p), "/sys/block/loop%u/loop/backing_file", n);
        _cleanup_free_ char *buf = NULL;
        out[0] = '\0';
        if (ab_read_file(AT_FDCWD, p, &buf, NULL) < 0)
                return;
        buf[strcspn(buf, "\n")] = '\0';
        snprintf(out, len, "%s", buf);
}

/* A loop device attached to image, or -1. */
static int attached_loop(const char *image)
{
        DIR *d = opendir("/sys/block");
        if (!d)
                return -1;
        int found = -1;
        struct dirent *e;
        while (found < 0 && (e = readdir(d))) {
                char *end;
                if (strncmp(e->d_name, "loop", 4) || !e->d_name[4])
                        continue;
                unsigned long n = strtoul(e->d_name + 4, &end, 10);
                if (*end)
                        continue;
                char b[4200];
                loop_backing((unsigned)n, b, sizeof(b));
                if (!strcmp(b, image))
                        found = (int)n;
        }
        closedir(d);
        return found;
}

bool ab_disk_mounted_at(const char *image, const char *target)
{
        struct statx sx;
        if (statx(AT_FDCWD, target, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) < 0 ||
            !(sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) ||
            !(sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) || sx.stx_dev_major != 7)
                return false;
        char b[4200];
        loop_backing(sx.stx_dev_minor, b, sizeof(b));
        return !strcmp(b, image);
}

int ab_disk_mount_once(int dirfd, const char *name, const char *image, const char *target,
                       ab_err **err)
{
        if (ab_disk_mounted_at(image, target))
                return 0;
        /* The device found may detach meanwhile (its last user went): look again. */
        for (int attempt = 0; attempt < 3; attempt++) {
                int n = attached_loop(image);
                if (n < 0)
                        break;
                char dev[32];
                snprintf(dev, sizeof(dev), "/dev/loop%d", n);
                if (mount(dev, target, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME,
                          "discard,errors=remount-ro") == 0) {
                        if (ab_disk_mounted_at(image, target))
                                return 0;
                        umount2(target, MNT_DETACH | UMOUNT_NOFOLLOW); /* reused meanwhile */
                        continue;
                }
                int e = errno;
                if (attached_loop(image) == n) /* a real failure: never attach a second device */
                        return ab_err_set(err, AB_E_INTERNAL, e, "mount %s (already on %s)", image,
                                          dev);
        }
        if (attached_loop(image) >= 0)
                return ab_err_set(err, AB_E_INTERNAL, EBUSY, "mount %s", image);
        if (ab_disk_mount(dirfd, name, target, err) < 0)
                return -1;
        if (!ab_disk_mounted_at(image, target)) {
                umount2(target, MNT_DETACH | UMOUNT_NOFOLLOW);
                return ab_err_set(err, AB_E_INTERNAL, 0, "mount %s: not what was mounted", image);
        }
        return 0;
}
