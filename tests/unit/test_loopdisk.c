/* Unit tests: box disks (native/loopdisk.h) - the template is formatted once,
 * spares made ahead are whole ext4 images of the right size, a create takes
 * one instead of copying, one of the wrong size is never used, and the
 * leftovers of a dead process are swept. Needs mkfs.ext4 (e2fsprogs). */
#include "native/loopdisk.h"
#include "tap.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>

static bool exists(int dfd, const char *name)
{
        return faccessat(dfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* An ext4 superblock at 1024 has its magic 0xEF53 at offset 56. */
static bool is_ext4(int dfd, const char *name, off_t want_size)
{
        int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
        unsigned char m[2] = {0};
        struct stat st;
        bool ok = fd >= 0 && pread(fd, m, 2, 1024 + 56) == 2 && fstat(fd, &st) == 0 &&
                  st.st_size == want_size && (st.st_mode & 0777) == 0600;
        if (fd >= 0)
                close(fd);
        return ok && m[0] == 0x53 && m[1] == 0xEF;
}

typedef struct racer {
        int cache, box, rc;
        char name[32];
} racer;

static void *race(void *arg)
{
        racer *r = arg;
        ab_err *e = NULL;
        r->rc = ab_disk_create(r->cache, r->box, r->name, 24, &e);
        if (r->rc < 0)
                tap_diag("%s: %s", r->name, e->msg);
        ab_err_free(&e);
        return NULL;
}

int main(void)
{
        if (system("command -v mkfs.ext4 >/dev/null 2>&1") != 0)
                tap_skip_all("mkfs.ext4 not installed");
        char dir[] = "/tmp/ab-disk-XXXXXX";
        tap_ok(mkdtemp(dir) != NULL, "mkdtemp");
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        mkdirat(dfd, "cache", 0700);
        mkdirat(dfd, "box", 0700);
        int cache = openat(dfd, "cache", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int box = openat(dfd, "box", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        const off_t size = 16 * 1024 * 1024;
        ab_err *e = NULL;

        TAP_IS_INT(ab_disk_create(cache, box, "a.img", 16, &e), 0,
                   "first disk: template made and copied");
        tap_ok(is_ext4(box, "a.img", size), "the disk is ext4 of the asked size, private");
        tap_ok(exists(cache, "disk-16.img"), "the template is kept");
        tap_ok(!exists(cache, "spare-16.0.img"), "no spare unless asked for");

        TAP_IS_INT(ab_disk_make_spares(cache, 16, &e), 0, "make spares");
        tap_ok(is_ext4(cache, "spare-16.0.img", size) && is_ext4(cache, "spare-16.1.img", size),
               "two spares, whole ext4 images");
        struct stat before;
        fstatat(cache, "spare-16.0.img", &before, 0);
        TAP_IS_INT(ab_disk_create(cache, box, "b.img", 16, &e), 0, "a create with spares");
        struct stat after;
        tap_ok(fstatat(box, "b.img", &after, 0) == 0 && after.st_ino == before.st_ino,
               "it took a spare (same file, no copy)");
        tap_ok(!exists(cache, "spare-16.0.img") && exists(cache, "spare-16.1.img"),
               "one spare left");
        TAP_IS_INT(ab_disk_make_spares(cache, 16, &e), 0, "make spares again");
        tap_ok(exists(cache, "spare-16.0.img"), "the missing spare is made again");

        /* A spare of the wrong size (not ours, or a truncated one) is discarded. */
        unlinkat(cache, "spare-16.0.img", 0);
        unlinkat(cache, "spare-16.1.img", 0);
        int fd = openat(cache, "spare-16.0.img", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        tap_ok(fd >= 0 && ftruncate(fd, 4096) == 0, "plant a spare of the wrong size");
        close(fd);
        TAP_IS_INT(ab_disk_create(cache, box, "c.img", 16, &e), 0, "a create past a bad spare");
        tap_ok(is_ext4(box, "c.img", size) && !exists(cache, "spare-16.0.img"),
               "the bad spare is not used and is gone");

        /* The first creates of a new size at once: each formats a template,
         * one publishes it, all succeed (they used to collide on one
         * temporary name). */
        racer rs[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
                rs[i] = (racer){.cache = cache, .box = box, .rc = -1};
                snprintf(rs[i].name, sizeof(rs[i].name), "race%d.img", i);
                pthread_create(&th[i], NULL, race, &rs[i]);
        }
        bool all = true;
        for (int i = 0; i < 4; i++) {
                pthread_join(th[i], NULL);
                all &= rs[i].rc == 0 && is_ext4(box, rs[i].name, 24 * 1024 * 1024);
        }
        tap_ok(all, "four first creates of one size at once all get a disk");
        tap_ok(is_ext4(cache, "disk-24.img", 24 * 1024 * 1024), "one template published");

        /* Leftovers of a process that died while making a spare. */
        fd = openat(cache, ".spare-16.0.img.dead", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        close(fd);
        fd = openat(cache, ".spare-16.1.img.young", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        close(fd);
        struct timeval old[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
        char p[128];
        snprintf(p, sizeof(p), "%s/cache/.spare-16.0.img.dead", dir);
        tap_ok(utimes(p, old) == 0, "age a leftover");
        ab_disk_sweep_cache(cache);
        tap_ok(!exists(cache, ".spare-16.0.img.dead"), "an old leftover is swept");
        tap_ok(exists(cache, ".spare-16.1.img.young"), "a young one may be in the making: kept");
        tap_ok(exists(cache, "disk-16.img"), "the template stays");
        ab_err_free(&e);

        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        tap_ok(system(cmd) == 0, "cleanup");
        return tap_done();
}
