#include "native/loopdisk.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

int ab_disk_create(int dirfd, const char *name, uint64_t size_mib, uid_t owner, ab_err **err)
{
        _cleanup_close_ int fd =
            openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot create disk image %s", name);
        if (ftruncate(fd, (off_t)(size_mib * 1024 * 1024)) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot size disk image to %llu MiB",
                                  (unsigned long long)size_mib);
        char fdpath[64], opts[128];
        snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
        snprintf(opts, sizeof(opts), "lazy_itable_init=1,lazy_journal_init=1,root_owner=%u:%u",
                 (unsigned)owner, (unsigned)owner);
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
                execlp("mkfs.ext4", "mkfs.ext4", "-q", "-F", "-m", "0", "-E", opts, "-L",
                       "agentbox", fdpath, (char *)NULL);
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

/* Attaches fd to a free loop device; returns the loop fd. Retries when another
 * process takes the device between GET_FREE and CONFIGURE. */
static int loop_attach(int backing, char *dev, size_t devlen, ab_err **err)
{
        _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        if (ctl < 0)
                return ab_err_set(err, AB_E_UNSUPPORTED, errno,
                                  "cannot open /dev/loop-control (is the loop module loaded?)");
        for (int attempt = 0; attempt < 64; attempt++) {
                int n = ioctl(ctl, LOOP_CTL_GET_FREE);
                if (n < 0)
                        return ab_err_set(err, AB_E_UNAVAILABLE, errno, "no free loop device");
                snprintf(dev, devlen, "/dev/loop%d", n);
                int lfd = open(dev, O_RDWR | O_CLOEXEC);
                if (lfd < 0 && errno == ENOENT) {
                        /* No devtmpfs node yet (e.g. /dev is a plain tmpfs): make one. */
                        if (mknod(dev, S_IFBLK | 0660, makedev(7, n)) == 0 || errno == EEXIST)
                                lfd = open(dev, O_RDWR | O_CLOEXEC);
                }
                if (lfd < 0)
                        return ab_err_set(err, AB_E_UNAVAILABLE, errno, "cannot open %s", dev);
                struct loop_config cfg = {
                    .fd = (unsigned)backing,
                    .block_size = 0,
                    .info = {.lo_flags = LO_FLAGS_AUTOCLEAR},
                };
                if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0)
                        return lfd;
                int e = errno;
                close(lfd);
                if (e != EBUSY)
                        return ab_err_set(err, AB_E_UNAVAILABLE, e, "cannot attach loop device %s",
                                          dev);
        }
        return ab_err_set(err, AB_E_UNAVAILABLE, EBUSY, "no free loop device after 64 attempts");
}

int ab_disk_mount(int dirfd, const char *name, const char *target, ab_err **err)
{
        _cleanup_close_ int backing = openat(dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (backing < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot open disk image %s", name);
        char dev[32];
        _cleanup_close_ int lfd = loop_attach(backing, dev, sizeof(dev), err);
        if (lfd < 0)
                return -1;
        if (mount(dev, target, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, "errors=remount-ro") < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot mount the box disk (%s)", dev);
        /* Closing lfd now is what makes AUTOCLEAR detach the device after unmount. */
        return 0;
}
