#include "native/volume.h"
#include "base/id.h"
#include "base/mounts.h"
#include "native/loopdisk.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <time.h>

struct ab_vols {
        char *dir;      /* DATA/volumes, absolute */
        atomic_int dfd; /* -1 until the folder exists (see vdir) */
        int cache_fd;   /* borrowed */
        pthread_mutex_t mu;
};

/* DATA/volumes' fd, opened (and with create, made) on first need: a data
 * folder that never had a volume has no volumes/ folder. -1 when absent. */
static int vdir(ab_vols *v, bool create)
{
        int fd = atomic_load(&v->dfd);
        if (fd >= 0)
                return fd;
        pthread_mutex_lock(&v->mu);
        if (atomic_load(&v->dfd) < 0 && (!create || mkdir(v->dir, 0700) == 0 || errno == EEXIST)) {
                int f = open(v->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                if (f >= 0) {
                        fchmod(f, 0700);
                        atomic_store(&v->dfd, f);
                }
        }
        fd = atomic_load(&v->dfd);
        pthread_mutex_unlock(&v->mu);
        return fd;
}

#define LOOP_MAJOR 7

static int rm_tree_at(int dfd, const char *name, dev_t dev)
{
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
        if (st.st_dev != dev)
                return -EBUSY; /* a mount: never delete through it */
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        DIR *d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
                int e = errno;
                if (fd >= 0)
                        close(fd);
                return -e;
        }
        int r = 0;
        struct dirent *e;
        while ((e = readdir(d)))
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                        int q = rm_tree_at(dirfd(d), e->d_name, dev);
                        if (q < 0 && !r)
                                r = q;
                }
        closedir(d);
        if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && !r)
                r = -errno;
        return r;
}

/* Removes .new.* (older than a minute) and .del.* entries whose maker is
 * gone (their lock is free). */
static void sweep(ab_vols *v)
{
        int dfd = vdir(v, false);
        int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        struct stat top;
        fstat(dfd, &top);
        struct dirent *e;
        while ((e = readdir(d))) {
                if (strncmp(e->d_name, ".new.", 5) && strncmp(e->d_name, ".del.", 5))
                        continue;
                /* a young .new.* may be a create between its mkdir and its flock */
                struct stat es;
                if (fstatat(dfd, e->d_name, &es, AT_SYMLINK_NOFOLLOW) < 0 ||
                    (!strncmp(e->d_name, ".new.", 5) && es.st_mtime > time(NULL) - 60))
                        continue;
                _cleanup_close_ int bfd =
                    openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
                _cleanup_close_ int lfd =
                    bfd < 0 ? -1 : openat(bfd, "lock", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
                if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) < 0)
                        continue; /* still at work */
                /* a .del.* may still be mounted: detach it first */
                char mnt[512];
                snprintf(mnt, sizeof(mnt), "%s/%s/mnt", v->dir, e->d_name);
                umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW);
                rm_tree_at(dfd, e->d_name, top.st_dev);
        }
        closedir(d);
}

int ab_vols_open(const char *data, int cache_fd, ab_vols **out, ab_err **err)
{
        ab_vols *v = xzalloc(sizeof(*v));
        v->dir = xasprintf("%s/volumes", data);
        atomic_init(&v->dfd, -1);
        v->cache_fd = cache_fd;
        pthread_mutex_init(&v->mu, NULL);
        if (vdir(v, false) >= 0)
                sweep(v);
        *out = v;
        return 0;
}

void ab_vols_free(ab_vols *v)
{
        if (!v)
                return;
        int fd = atomic_load(&v->dfd);
        if (fd >= 0)
                close(fd);
        pthread_mutex_destroy(&v->mu);
        free(v->dir);
        free(v);
}

static int write_record(int dfd, const char *name, uint64_t size_mib, int64_t created,
                        const char *owner, ab_err **err)
{
        json_t *j = json_pack("{s:s,s:I,s:I,s:i}", "name", name, "size_mib", (json_int_t)size_mib,
                              "created_at", (json_int_t)created, "version", 1);
        if (owner)
                json_object_set_new(j, "owner", json_string(owner));
        _cleanup_free_ char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
        json_decref(j);
        if (!s)
                abort();
        _cleanup_close_ int fd =
            openat(dfd, "volume.json", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        int r = fd < 0 ? -errno : ab_write_all(fd, s, strlen(s));
        if (r == 0 && fsync(fd) < 0)
                r = -errno;
        if (r < 0)
                return ab_err_set(err, r == -ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, -r,
                                  "cannot write volume.json");
        return 0;
}

/* The volume is assembled under .new.NAME.RAND (locked, so a sweep leaves it
 * alone) and renamed to NAME only once its record and its image exist. */
int ab_vol_create(ab_vols *v, const char *name, uint64_t size_mib, const char *owner, ab_err **err)
{
        if (ab_volume_name_check(name, err) < 0)
                return -1;
        if (size_mib < 16 || size_mib > 16u * 1024 * 1024)
                return ab_err_set(err, AB_E_INVALID, 0, "size_mib: must be 16..16777216");
        int dfd = vdir(v, true);
        if (dfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot create %s", v->dir);
        if (faccessat(dfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                return ab_err_set(err, AB_E_CONFLICT, 0, "volume '%s' already exists", name);
        char rnd[17], tmp[128];
        ab_id_random(rnd);
        snprintf(tmp, sizeof(tmp), ".new.%s.%s", name, rnd);
        if (mkdirat(dfd, tmp, 0700) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "create volume directory");
        _cleanup_close_ int bfd = openat(dfd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_close_ int lfd =
            bfd < 0 ? -1 : openat(bfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        int r = 0;
        if (lfd < 0 || flock(lfd, LOCK_EX) < 0)
                r = ab_err_set(err, AB_E_INTERNAL, errno, "lock new volume");
        if (r == 0 && mkdirat(bfd, "mnt", 0700) < 0)
                r = ab_err_set(err, AB_E_INTERNAL, errno, "create volume mount point");
        if (r == 0)
                r = ab_disk_create(v->cache_fd, bfd, "disk.img", size_mib, err);
        if (r == 0) {
                /* a copied image must be on disk before the volume has a name */
                _cleanup_close_ int ifd = openat(bfd, "disk.img", O_RDONLY | O_CLOEXEC);
                if (ifd < 0 || fsync(ifd) < 0)
                        r = ab_err_set(err, AB_E_INTERNAL, errno, "sync volume image");
        }
        if (r == 0)
                r = write_record(bfd, name, size_mib, time(NULL), owner, err);
        if (r == 0 && renameat2(dfd, tmp, dfd, name, RENAME_NOREPLACE) < 0) {
                if (errno == EEXIST)
                        r = ab_err_set(err, AB_E_CONFLICT, 0, "volume '%s' already exists", name);
                else
                        r = ab_err_set(err, AB_E_INTERNAL, errno, "publish volume %s", name);
        }
        if (r == 0) {
                fsync(dfd);
                return 0;
        }
        struct stat st;
        if (fstat(dfd, &st) == 0)
                rm_tree_at(dfd, tmp, st.st_dev);
        return -1;
}

/* Whether NAME/mnt is a mount root; its device in *dev. */
static bool mnt_mounted(ab_vols *v, const char *name, dev_t *dev)
{
        int dfd = vdir(v, false);
        char p[128];
        snprintf(p, sizeof(p), "%s/mnt", name);
        struct statx sx;
        if (statx(dfd, p, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) < 0)
                return false;
        *dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
        return (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
               (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

/* The host path of the image the loop device N is attached to, or "". */
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

/* A loop device already attached to image (a mount of it somewhere, in any
 * mount namespace): -1 when none. */
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

int ab_vol_get(ab_vols *v, const char *name, ab_vol_rec *out, ab_err **err)
{
        int dfd = vdir(v, false);
        memset(out, 0, sizeof(*out));
        if (ab_volume_name_check(name, err) < 0)
                return -1;
        _cleanup_close_ int bfd =
            openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (bfd < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no volume named '%s'", name);
        _cleanup_free_ char *buf = NULL;
        int r = ab_read_file(bfd, "volume.json", &buf, NULL);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "volume %s: cannot read volume.json",
                                  name);
        json_t *j = json_loads(buf, 0, NULL);
        if (!json_is_object(j)) {
                json_decref(j);
                return ab_err_set(err, AB_E_INTERNAL, 0, "volume %s: volume.json is corrupt", name);
        }
        snprintf(out->name, sizeof(out->name), "%s", name);
        out->size_mib = (uint64_t)json_integer_value(json_object_get(j, "size_mib"));
        out->created_at = (int64_t)json_integer_value(json_object_get(j, "created_at"));
        const char *o = json_string_value(json_object_get(j, "owner"));
        out->owner = o ? xstrdup(o) : NULL;
        json_decref(j);
        dev_t dev;
        char p[128];
        snprintf(p, sizeof(p), "%s/mnt", name);
        struct statvfs sv;
        if (mnt_mounted(v, name, &dev) && major(dev) == LOOP_MAJOR) {
                _cleanup_close_ int mfd = openat(dfd, p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (mfd >= 0 && fstatvfs(mfd, &sv) == 0) {
                        out->mounted = true;
                        out->used_bytes = (uint64_t)(sv.f_blocks - sv.f_bfree) * sv.f_frsize;
                        return 0;
                }
        }
        struct stat st;
        if (fstatat(bfd, "disk.img", &st, AT_SYMLINK_NOFOLLOW) == 0)
                out->used_bytes = (uint64_t)st.st_blocks * 512;
        return 0;
}

void ab_vol_rec_clear(ab_vol_rec *r)
{
        free(r->owner);
        r->owner = NULL;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int ab_vol_names(ab_vols *v, char ***out, ab_err **err)
{
        int dfd = vdir(v, false);
        if (dfd < 0) {
                *out = xcalloc(1, sizeof(char *));
                return 0;
        }
        int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd < 0 ? NULL : fdopendir(fd);
        if (!d) {
                int e = errno;
                if (fd >= 0)
                        close(fd);
                return ab_err_set(err, AB_E_INTERNAL, e, "list %s", v->dir);
        }
        size_t n = 0, cap = 8;
        char **names = xcalloc(cap + 1, sizeof(char *));
        struct dirent *e;
        while ((e = readdir(d))) {
                if (ab_volume_name_check(e->d_name, NULL) < 0)
                        continue;
                if (n == cap) {
                        cap *= 2;
                        names = xrealloc(names, (cap + 1) * sizeof(char *));
                }
                names[n++] = xstrdup(e->d_name);
                names[n] = NULL;
        }
        closedir(d);
        qsort(names, n, sizeof(char *), cmp_str);
        *out = names;
        return 0;
}

int ab_vol_lock(ab_vols *v, const char *name, ab_err **err)
{
        int dfd = vdir(v, false);
        if (ab_volume_name_check(name, err) < 0)
                return -1;
        _cleanup_close_ int bfd =
            openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (bfd < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no volume named '%s'", name);
        _cleanup_close_ int lfd = openat(bfd, "lock", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (lfd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open lock of volume %s", name);
        while (flock(lfd, LOCK_EX) < 0)
                if (errno != EINTR)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "lock volume %s", name);
        /* a delete renames the directory away while holding the lock */
        struct stat a, b;
        if (fstat(bfd, &a) < 0 || fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) < 0 ||
            a.st_ino != b.st_ino)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no volume named '%s'", name);
        return steal_fd(&lfd);
}

/* Whether NAME/mnt is mounted from a loop device backed by image. */
static bool mounted_ours(ab_vols *v, const char *name, const char *image, bool *other)
{
        dev_t dev;
        *other = false;
        if (!mnt_mounted(v, name, &dev))
                return false;
        char b[4200] = "";
        if (major(dev) == LOOP_MAJOR)
                loop_backing(minor(dev), b, sizeof(b));
        *other = strcmp(b, image) != 0;
        return !*other;
}

/* Mounts the loop device N, already attached to the image, at mnt; -errno. */
static int mount_attached(int n, const char *mnt)
{
        char dev_path[32];
        snprintf(dev_path, sizeof(dev_path), "/dev/loop%d", n);
        if (mount(dev_path, mnt, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME,
                  "discard,errors=remount-ro") < 0)
                return -errno;
        return 0;
}

char *ab_vol_mount_locked(ab_vols *v, const char *name, ab_err **err)
{
        char *mnt = xasprintf("%s/%s/mnt", v->dir, name);
        _cleanup_free_ char *image = xasprintf("%s/%s/disk.img", v->dir, name);
        bool other;
        if (mounted_ours(v, name, image, &other))
                return mnt;
        if (other) {
                ab_err_set(err, AB_E_INTERNAL, 0,
                           "volume %s: something else is mounted on %s; unmount it", name, mnt);
                free(mnt);
                return NULL;
        }
        _cleanup_close_ int bfd =
            openat(vdir(v, false), name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (bfd < 0) {
                ab_err_set(err, AB_E_NOT_FOUND, 0, "no volume named '%s'", name);
                free(mnt);
                return NULL;
        }
        /* Attached already (mounted in another mount namespace, or still
         * held by a box after the host's mount went): mount that device, so
         * the kernel shares its one file system instead of making a second.
         * Only when the image is attached nowhere does it get a new device.
         * (The device found may detach meanwhile - its last user went - and
         * then the image is attached nowhere: look again.) */
        int r = -ENXIO;
        for (int attempt = 0; attempt < 3 && r < 0; attempt++) {
                int n = attached_loop(image);
                if (n >= 0) {
                        r = mount_attached(n, mnt);
                        if (r < 0 && attached_loop(image) == n)
                                break; /* a real failure: never attach a second device */
                        continue;
                }
                ab_err *e = NULL;
                r = ab_disk_mount(bfd, "disk.img", mnt, &e);
                if (r < 0) {
                        ab_err_wrap(&e, "volume %s", name);
                        if (err && !*err)
                                *err = e;
                        else
                                ab_err_free(&e);
                        free(mnt);
                        return NULL;
                }
        }
        /* and check what got mounted is this image (a device reused meanwhile) */
        if (r == 0 && !mounted_ours(v, name, image, &other)) {
                umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW);
                r = -EAGAIN;
        }
        if (r < 0) {
                ab_err_set(err, AB_E_INTERNAL, -r, "volume %s: cannot mount its image", name);
                free(mnt);
                return NULL;
        }
        return mnt;
}

int ab_vol_remove_locked(ab_vols *v, const char *name, ab_err **err)
{
        int dfd = vdir(v, false);
        char rnd[17], tmp[128];
        ab_id_random(rnd);
        snprintf(tmp, sizeof(tmp), ".del.%s.%s", name, rnd);
        /* The name goes first: from here on the volume does not exist. */
        if (renameat(dfd, name, dfd, tmp) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "remove volume %s", name);
        _cleanup_free_ char *mnt = xasprintf("%s/%s/mnt", v->dir, tmp);
        /* Lazily: a start that is binding it right now keeps its copy. */
        while (umount2(mnt, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
                ;
        struct stat st;
        int r = fstat(dfd, &st) < 0 ? -errno : rm_tree_at(dfd, tmp, st.st_dev);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "remove volume %s", name);
        return 0;
}
