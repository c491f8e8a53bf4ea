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
                ab_rm_tree_at(dfd, e->d_name);
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
        ab_rm_tree_at(dfd, tmp);
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

/* Mounts the volume's image at NAME/mnt unless it is there (the caller holds
 * the volume's lock); ab_disk_mount_once never gives one image a second
 * device. Returns the mount point (caller frees). */
char *ab_vol_mount_locked(ab_vols *v, const char *name, ab_err **err)
{
        char *mnt = xasprintf("%s/%s/mnt", v->dir, name);
        _cleanup_free_ char *image = xasprintf("%s/%s/disk.img", v->dir, name);
        if (ab_disk_mounted_at(image, mnt))
                return mnt;
        dev_t dev;
        if (mnt_mounted(v, name, &dev)) {
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
        if (ab_disk_mount_once(bfd, "disk.img", image, mnt, err) < 0) {
                ab_err_wrap(err, "volume %s", name);
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
        int r = ab_rm_tree_at(dfd, tmp);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "remove volume %s", name);
        return 0;
}
