#include "native/skillsfs.h"
#include "base/id.h"
#include "base/log.h"
#include "native/loopdisk.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>

#define IMAGE          "skills.img"
#define IMAGE_NEW      ".skills.img.new"
#define LOCK           ".skills.lock"
#define OLD            ".skills-old."
#define TREE_MAX_DEPTH 64

static int open_dir_at(int dfd, const char *name)
{
        return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static int copy_file(int sfd, int dfd)
{
        char buf[65536];
        for (;;) {
                ssize_t n = read(sfd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return 0;
                int r = ab_write_all(dfd, buf, (size_t)n);
                if (r < 0)
                        return r;
        }
}

/* Owner, mode and times of st on fd. */
static int copy_attrs(int fd, const struct stat *st)
{
        if (fchown(fd, st->st_uid, st->st_gid) < 0 || fchmod(fd, st->st_mode & 07777) < 0)
                return -errno;
        struct timespec ts[2] = {st->st_atim, st->st_mtim};
        return futimens(fd, ts) < 0 ? -errno : 0;
}

/* Copies sdfd/name to ddfd/dname: directories, regular files and symlinks
 * (other kinds are left out), with owners, modes and times. 0 or -errno. */
static int copy_tree(int sdfd, const char *name, int ddfd, const char *dname, int depth)
{
        struct stat st;
        if (depth > TREE_MAX_DEPTH)
                return -ELOOP;
        if (fstatat(sdfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (S_ISLNK(st.st_mode)) {
                char target[4096];
                ssize_t n = readlinkat(sdfd, name, target, sizeof(target) - 1);
                if (n < 0)
                        return -errno;
                target[n] = '\0';
                if (symlinkat(target, ddfd, dname) < 0)
                        return -errno;
                return fchownat(ddfd, dname, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0 ? -errno
                                                                                            : 0;
        }
        if (S_ISREG(st.st_mode)) {
                _cleanup_close_ int s = openat(sdfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (s < 0)
                        return -errno;
                _cleanup_close_ int d =
                    openat(ddfd, dname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (d < 0)
                        return -errno;
                int r = copy_file(s, d);
                return r < 0 ? r : copy_attrs(d, &st);
        }
        if (!S_ISDIR(st.st_mode))
                return 0;
        if (mkdirat(ddfd, dname, 0700) < 0)
                return -errno;
        _cleanup_close_ int s = open_dir_at(sdfd, name);
        _cleanup_close_ int d = open_dir_at(ddfd, dname);
        if (s < 0 || d < 0)
                return -errno;
        int fd = fcntl(s, F_DUPFD_CLOEXEC, 3);
        DIR *dir = fd < 0 ? NULL : fdopendir(fd);
        if (!dir) {
                int e = errno;
                if (fd >= 0)
                        close(fd);
                return -e;
        }
        int r = 0;
        struct dirent *e;
        while (!r && (e = readdir(dir)))
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                        r = copy_tree(s, e->d_name, d, e->d_name, depth + 1);
        closedir(dir);
        return r < 0 ? r : copy_attrs(d, &st);
}

/* Whether dfd/name is a directory with entries. */
static bool dir_has_entries(int dfd, const char *name)
{
        int fd = open_dir_at(dfd, name);
        DIR *d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return false;
        }
        bool any = false;
        struct dirent *e;
        while (!any && (e = readdir(d)))
                any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
        closedir(d);
        return any;
}

void ab_skillsfs_sweep_staging(int skills_fd)
{
        int fd =
            openat(skills_fd, AB_SKILLSFS_STAGING, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
                const char *dot = strchr(e->d_name, '.');
                if (!dot || dot == e->d_name)
                        continue;
                char *end;
                long pid = strtol(dot + 1, &end, 10);
                if (pid <= 0 || *end != '.' || pid == getpid())
                        continue;
                if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
                        ab_rm_tree_at(dirfd(d), e->d_name);
        }
        closedir(d);
}

/* Copies into the skills folder every entry of the old plain folder
 * dfd/old it lacks (staged, then renamed in), then removes the old folder.
 * The old folder stays when anything failed, for the next open. */
static int merge_old(int dfd, const char *old, int skills_fd, int staging_fd)
{
        _cleanup_close_ int ofd = open_dir_at(dfd, old);
        if (ofd < 0)
                return -errno;
        int fd = fcntl(ofd, F_DUPFD_CLOEXEC, 3);
        DIR *d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
                int e = errno;
                if (fd >= 0)
                        close(fd);
                return -e;
        }
        int r = 0;
        unsigned copied = 0;
        struct dirent *e;
        while (!r && (e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
                    !strcmp(e->d_name, AB_SKILLSFS_STAGING) || !strcmp(e->d_name, "lost+found"))
                        continue;
                if (faccessat(skills_fd, e->d_name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                        continue; /* moved in before a crash, or a newer version */
                char tmp[128];
                snprintf(tmp, sizeof(tmp), "migrate.%d.%u", (int)getpid(), copied);
                ab_rm_tree_at(staging_fd, tmp);
                r = copy_tree(ofd, e->d_name, staging_fd, tmp, 0);
                if (!r && renameat2(staging_fd, tmp, skills_fd, e->d_name, RENAME_NOREPLACE) < 0)
                        r = -errno;
                if (r < 0) {
                        ab_rm_tree_at(staging_fd, tmp);
                        ab_log(AB_LOG_ERROR, "cannot move a skill into the skills disk", "skill",
                               e->d_name, "error", strerror(-r), NULL);
                }
                copied++;
        }
        closedir(d);
        if (r < 0)
                return r;
        /* on disk before the old copies go */
        if (syncfs(skills_fd) < 0)
                return -errno;
        return ab_rm_tree_at(dfd, old);
}

/* Merges every DATA/.skills-old.* and drops the staging area of older
 * versions (DATA/.skills-staging). */
static void finish(int dfd, int skills_fd, int staging_fd)
{
        ab_rm_tree_at(dfd, ".skills-staging");
        int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        struct dirent *e;
        while ((e = readdir(d)))
                if (!strncmp(e->d_name, OLD, strlen(OLD))) {
                        int r = merge_old(dfd, e->d_name, skills_fd, staging_fd);
                        if (r < 0)
                                ab_log(AB_LOG_ERROR,
                                       "skills not moved yet; the next open tries again", "folder",
                                       e->d_name, "error", strerror(-r), NULL);
                        else
                                ab_log(AB_LOG_INFO, "skills moved to their own disk", "from",
                                       e->d_name, NULL);
                }
        closedir(d);
}

/* Publishes a new image of size_mib as DATA/skills.img (synced first). */
static int make_image(int dfd, int cache_fd, uint64_t size_mib, ab_err **err)
{
        unlinkat(dfd, IMAGE_NEW, 0);
        if (ab_disk_create(cache_fd, dfd, IMAGE_NEW, size_mib, err) < 0)
                return -1;
        _cleanup_close_ int ifd = openat(dfd, IMAGE_NEW, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (ifd < 0 || fsync(ifd) < 0 ||
            renameat2(dfd, IMAGE_NEW, dfd, IMAGE, RENAME_NOREPLACE) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "publish %s", IMAGE);
        fsync(dfd);
        return 0;
}

/* Mounts the image at DATA/skills; a plain folder with entries is first
 * renamed to .skills-old.* (merged later), and renamed back when the mount
 * fails. */
static int mount_image(int dfd, const char *data, ab_err **err)
{
        _cleanup_free_ char *image = xasprintf("%s/" IMAGE, data);
        _cleanup_free_ char *target = xasprintf("%s/skills", data);
        char old[64] = "";
        if (dir_has_entries(dfd, "skills")) {
                char rnd[17];
                ab_id_random(rnd);
                snprintf(old, sizeof(old), OLD "%s", rnd);
                if (renameat(dfd, "skills", dfd, old) < 0 ||
                    (mkdirat(dfd, "skills", 0755) < 0 && errno != EEXIST))
                        return ab_err_set(err, AB_E_INTERNAL, errno, "move %s aside", target);
                fsync(dfd);
        }
        if (ab_disk_mount_once(dfd, IMAGE, image, target, err) == 0)
                return 0;
        if (*old && unlinkat(dfd, "skills", AT_REMOVEDIR) == 0)
                renameat(dfd, old, dfd, "skills");
        return -1;
}

/* DATA/.skills.lock, held (flock) until the fd is closed; -1 with err. */
static int lock_data(int data_fd, const char *data, ab_err **err)
{
        int lfd = openat(data_fd, LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (lfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s/%s", data, LOCK);
        while (flock(lfd, LOCK_EX) < 0) {
                if (errno != EINTR) {
                        int e = errno;
                        close(lfd);
                        return ab_err_set(err, AB_E_INTERNAL, e, "lock %s/%s", data, LOCK);
                }
        }
        return lfd;
}

int ab_skillsfs_open(int data_fd, const char *data, int cache_fd, uint64_t size_mib,
                     ab_skillsfs_kind *kind, ab_err **err)
{
        _cleanup_close_ int lfd = lock_data(data_fd, data, err);
        if (lfd < 0)
                return -1;
        if (mkdirat(data_fd, "skills", 0755) < 0 && errno != EEXIST)
                return ab_err_set(err, AB_E_INTERNAL, errno, "create %s/skills", data);
        _cleanup_free_ char *image = xasprintf("%s/" IMAGE, data);
        _cleanup_free_ char *target = xasprintf("%s/skills", data);
        struct statx sx;
        if (ab_disk_mounted_at(image, target)) {
                *kind = AB_SKILLSFS_IMAGE;
        } else if (statx(data_fd, "skills", AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) == 0 &&
                   (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
                   (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT)) {
                *kind = AB_SKILLSFS_OTHER;
        } else {
                ab_err *e = NULL;
                int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
                if (ctl < 0)
                        ab_err_set(&e, AB_E_UNSUPPORTED, errno, "cannot open /dev/loop-control");
                else
                        close(ctl);
                if (!e && faccessat(data_fd, IMAGE, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
                        make_image(data_fd, cache_fd, size_mib, &e);
                if (!e)
                        mount_image(data_fd, data, &e);
                *kind = e ? AB_SKILLSFS_PLAIN : AB_SKILLSFS_IMAGE;
                if (e)
                        ab_log(AB_LOG_WARN,
                               "the skills folder stays a plain directory: boxes see its host "
                               "path in their mount tables",
                               "folder", target, "error", e->msg, NULL);
                ab_err_free(&e);
        }
        _cleanup_close_ int sfd = open_dir_at(data_fd, "skills");
        if (sfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s", target);
        if (*kind == AB_SKILLSFS_IMAGE)
                unlinkat(sfd, "lost+found", AT_REMOVEDIR); /* mkfs's; only when empty */
        if (mkdirat(sfd, AB_SKILLSFS_STAGING, 0700) < 0 && errno != EEXIST)
                return ab_err_set(err, AB_E_INTERNAL, errno, "create %s/" AB_SKILLSFS_STAGING,
                                  target);
        _cleanup_close_ int stfd = open_dir_at(sfd, AB_SKILLSFS_STAGING);
        if (stfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s/" AB_SKILLSFS_STAGING,
                                  target);
        ab_skillsfs_sweep_staging(sfd);
        finish(data_fd, sfd, stfd);
        return 0;
}

int ab_skillsfs_unmount(const char *data, ab_err **err)
{
        _cleanup_close_ int dfd = open(data, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return errno == ENOENT ? 0 : ab_err_set(err, AB_E_INTERNAL, errno, "open %s", data);
        _cleanup_close_ int lfd = lock_data(dfd, data, err);
        if (lfd < 0)
                return -1;
        _cleanup_free_ char *image = xasprintf("%s/" IMAGE, data);
        _cleanup_free_ char *target = xasprintf("%s/skills", data);
        if (!ab_disk_mounted_at(image, target))
                return 0;
        /* Not detached: a file open on it (an install under way) keeps it. */
        if (umount2(target, UMOUNT_NOFOLLOW) < 0)
                return ab_err_set(err, errno == EBUSY ? AB_E_CONFLICT : AB_E_INTERNAL, errno,
                                  "unmount %s", target);
        return 1;
}
