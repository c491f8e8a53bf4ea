/* Unit tests: volumes and a box's mounts - the checks of names and paths
 * (base/mounts.h), the volume store (native/volume.h: atomic create,
 * conflicts, records, leftovers of killed creates and deletes swept, one
 * host mount however often asked, removal), mounts in config.json
 * (native/state.h), and binds onto a tree that holds symlinks
 * (native/binds.h, in a private mount namespace of this process). Needs
 * root and mkfs.ext4 for the store and the binds. */
#include "base/mounts.h"
#include "native/binds.h"
#include "native/state.h"
#include "native/volume.h"
#include "tap.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

static void names_and_paths(void)
{
        static const char *const good[] = {"a", "vol-1", "x.y_z", "0", NULL};
        static const char *const bad[] = {"", "-a", "A", "a/b", "a b", ".x", "_x", NULL};
        for (const char *const *p = good; *p; p++)
                tap_ok(ab_volume_name_check(*p, NULL) == 0, "volume name '%s' is fine", *p);
        for (const char *const *p = bad; *p; p++)
                tap_ok(ab_volume_name_check(*p, NULL) < 0, "volume name '%s' is refused", *p);
        char long_name[65];
        memset(long_name, 'a', 64);
        long_name[64] = '\0';
        tap_ok(ab_volume_name_check(long_name, NULL) < 0, "a 64-character name is refused");
        long_name[63] = '\0';
        tap_ok(ab_volume_name_check(long_name, NULL) == 0, "a 63-character name is fine");

        static const char *const ok_paths[] = {"/mnt/v", "/workspace/data", "/opt/a.b/c", "/etc",
                                               NULL};
        static const char *const bad_paths[] = {
            "",     "/",          "rel",          "../x",
            "/..",  "/mnt/../..", "/mnt/./x",     "//etc",
            "/a/",  "/proc",      "/proc/1/root", "/dev/shm",
            "/sys", "/sys/fs",    "/workspace",   "/mnt/user-data/outputs",
            "/mnt", NULL};
        for (const char *const *p = ok_paths; *p; p++)
                tap_ok(ab_box_path_check(*p, AB_MOUNT_VOLUME, NULL) == 0,
                       "volume path '%s' is fine", *p);
        for (const char *const *p = bad_paths; *p; p++)
                tap_ok(ab_box_path_check(*p, AB_MOUNT_VOLUME, NULL) < 0,
                       "volume path '%s' is refused", *p);
        tap_ok(ab_box_path_check("/workspace", AB_MOUNT_READONLY, NULL) == 0,
               "/workspace may be read-only");
        tap_ok(ab_box_path_check("/proc", AB_MOUNT_BLOCKED, NULL) == 0 && ab_box_path_noop("/proc"),
               "blocking /proc is accepted as a no-op");
        tap_ok(ab_box_path_check("/proc/1", AB_MOUNT_BLOCKED, NULL) < 0,
               "blocking something in /proc is refused");
        ab_box_mount two[] = {{.kind = AB_MOUNT_VOLUME, .source = "a", .path = "/v"},
                              {.kind = AB_MOUNT_HOST, .source = "/srv", .path = "/v"}};
        tap_ok(ab_box_mounts_check(two, 2, NULL) < 0, "two mounts on one path are refused");
        two[1].kind = AB_MOUNT_READONLY;
        two[1].source = NULL;
        tap_ok(ab_box_mounts_check(two, 2, NULL) == 0, "a read-only path over a volume is fine");
}

static void config_roundtrip(const char *dir)
{
        int bfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ab_box_mount m[] = {
            {.kind = AB_MOUNT_VOLUME, .source = "vol", .path = "/mnt/v", .read_only = true},
            {.kind = AB_MOUNT_HOST, .source = "/srv/x", .path = "/h"},
            {.kind = AB_MOUNT_READONLY, .path = "/etc"},
            {.kind = AB_MOUNT_BLOCKED, .path = "/home"},
        };
        ab_box_config c = {.uid_base = 1048576, .created_at = 1, .mounts = m, .n_mounts = 4};
        snprintf(c.id, sizeof(c.id), "b1");
        ab_limits_default(&c.limits);
        tap_ok(ab_box_config_write(bfd, &c, NULL) == 0, "config.json with mounts is written");
        ab_box_config r;
        tap_ok(ab_box_config_read(bfd, &r, NULL) == 0, "and read back");
        bool same = r.n_mounts == 4;
        for (size_t i = 0; same && i < 4; i++)
                same = r.mounts[i].kind == m[i].kind && !strcmp(r.mounts[i].path, m[i].path) &&
                       r.mounts[i].read_only == m[i].read_only &&
                       (m[i].source ? r.mounts[i].source && !strcmp(r.mounts[i].source, m[i].source)
                                    : !r.mounts[i].source);
        tap_ok(same, "the mounts are the same, in order");
        ab_box_config_clear(&r);
        close(bfd);
}

static int host_mounts_at(const char *path)
{
        FILE *f = fopen("/proc/self/mountinfo", "r");
        char line[4096];
        int n = 0;
        while (f && fgets(line, sizeof(line), f)) {
                char mp[4096];
                if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && !strcmp(mp, path))
                        n++;
        }
        if (f)
                fclose(f);
        return n;
}

/* Loop devices attached to image. */
static int loops_of(const char *image)
{
        int n = 0;
        for (int i = 0; i < 512; i++) {
                char p[96], b[4200] = "";
                snprintf(p, sizeof(p), "/sys/block/loop%d/loop/backing_file", i);
                FILE *f = fopen(p, "r");
                if (!f)
                        continue;
                if (fgets(b, sizeof(b), f))
                        b[strcspn(b, "\n")] = '\0';
                fclose(f);
                n += !strcmp(b, image);
        }
        return n;
}

static void store(const char *dir)
{
        char data[4200], p[4400];
        snprintf(data, sizeof(data), "%s/data", dir);
        mkdir(data, 0700);
        snprintf(p, sizeof(p), "%s/cache", data);
        mkdir(p, 0700);
        int cache = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ab_vols *v = NULL;
        ab_err *e = NULL;
        tap_ok(ab_vols_open(data, cache, &v, &e) == 0, "the volume store opens");
        tap_ok(ab_vol_create(v, "one", 16, "app1", &e) == 0, "a volume is made");
        ab_err_free(&e);
        tap_ok(ab_vol_create(v, "one", 16, NULL, &e) < 0 && e->code == AB_E_CONFLICT,
               "a second one of that name is a conflict");
        ab_err_free(&e);
        tap_ok(ab_vol_create(v, "Bad", 16, NULL, &e) < 0 && e->code == AB_E_INVALID,
               "a bad name is refused");
        ab_err_free(&e);
        tap_ok(ab_vol_create(v, "two", 1, NULL, &e) < 0 && e->code == AB_E_INVALID,
               "a size below 16 MiB is refused");
        ab_err_free(&e);
        ab_vol_rec r;
        tap_ok(ab_vol_get(v, "one", &r, NULL) == 0 && r.size_mib == 16 && r.owner &&
                   !strcmp(r.owner, "app1") && !r.mounted && r.created_at > 0,
               "its record: size, owner, created_at, not mounted");
        ab_vol_rec_clear(&r);
        tap_ok(ab_vol_get(v, "nope", &r, &e) < 0 && e->code == AB_E_NOT_FOUND,
               "an unknown volume is not found");
        ab_err_free(&e);

        /* leftovers of a killed create and a killed delete; one still at work */
        snprintf(p, sizeof(p), "%s/volumes/.new.dead.0123", data);
        mkdir(p, 0700);
        struct timespec old[2] = {{.tv_sec = 1000}, {.tv_sec = 1000}};
        utimensat(AT_FDCWD, p, old, 0);
        snprintf(p, sizeof(p), "%s/volumes/.new.young.0123", data);
        mkdir(p, 0700);
        snprintf(p, sizeof(p), "%s/volumes/.del.gone.0123", data);
        mkdir(p, 0700);
        snprintf(p, sizeof(p), "%s/volumes/.new.busy.0123", data);
        mkdir(p, 0700);
        snprintf(p, sizeof(p), "%s/volumes/.new.busy.0123/lock", data);
        int busy = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        flock(busy, LOCK_EX);
        snprintf(p, sizeof(p), "%s/volumes/.new.busy.0123", data);
        utimensat(AT_FDCWD, p, old, 0); /* old, but locked */
        char **names = NULL;
        tap_ok(ab_vol_names(v, &names, NULL) == 0 && names[0] && !strcmp(names[0], "one") &&
                   !names[1],
               "half-made volumes are never listed");
        ab_strvfreep(&names);
        ab_vols_free(v);
        tap_ok(ab_vols_open(data, cache, &v, NULL) == 0, "the store opens again");
        snprintf(p, sizeof(p), "%s/volumes/.new.dead.0123", data);
        tap_ok(access(p, F_OK) < 0, "a dead create's leftover is swept");
        snprintf(p, sizeof(p), "%s/volumes/.del.gone.0123", data);
        tap_ok(access(p, F_OK) < 0, "a dead delete's leftover is swept");
        snprintf(p, sizeof(p), "%s/volumes/.new.busy.0123", data);
        tap_ok(access(p, F_OK) == 0, "a create at work is left alone");
        snprintf(p, sizeof(p), "%s/volumes/.new.young.0123", data);
        tap_ok(access(p, F_OK) == 0, "a create younger than a minute is left alone");
        close(busy);

        int lfd = ab_vol_lock(v, "one", &e);
        tap_ok(lfd >= 0, "the volume locks");
        char *m1 = ab_vol_mount_locked(v, "one", &e);
        char *m2 = m1 ? ab_vol_mount_locked(v, "one", &e) : NULL;
        tap_ok(m1 && m2 && !strcmp(m1, m2), "it mounts, and a second ask gives the same mount");
        tap_ok(m1 && host_mounts_at(m1) == 1, "it is mounted once");
        tap_ok(ab_vol_get(v, "one", &r, NULL) == 0 && r.mounted, "the record says mounted");
        ab_vol_rec_clear(&r);

        /* Another mount namespace keeps the file system (a running box) while
         * the host's mount goes (a crash of whoever cleaned up, an admin's
         * umount): the next mount must share that file system, not attach
         * the image to a second loop device. */
        char image[4400];
        snprintf(image, sizeof(image), "%s/volumes/one/disk.img", data);
        int pp[2];
        tap_ok(pipe(pp) == 0, "pipe");
        pid_t holder = fork();
        if (holder == 0) {
                char c = 'x';
                if (unshare(CLONE_NEWNS) < 0 ||
                    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                        c = 'e';
                (void)!write(pp[1], &c, 1);
                pause();
                _exit(0);
        }
        char c = 0;
        (void)!read(pp[0], &c, 1);
        tap_ok(c == 'x' && m1 && umount2(m1, 0) == 0 && host_mounts_at(m1) == 0,
               "the host's mount goes while another namespace holds it");
        tap_ok(loops_of(image) == 1, "the image stays attached to its loop device");
        char *m3 = ab_vol_mount_locked(v, "one", &e);
        tap_ok(m3 && host_mounts_at(m3) == 1, "it is mounted again");
        tap_ok(loops_of(image) == 1, "through the same loop device (one file system)");
        free(m3);
        kill(holder, SIGKILL);
        waitpid(holder, NULL, 0);
        close(pp[0]);
        close(pp[1]);
        tap_ok(ab_vol_remove_locked(v, "one", &e) == 0, "it is removed");
        tap_ok(m1 && host_mounts_at(m1) == 0, "its mount is gone");
        snprintf(p, sizeof(p), "%s/volumes/one", data);
        tap_ok(access(p, F_OK) < 0, "its directory is gone");
        if (e)
                tap_diag("%s", e->msg);
        ab_err_free(&e);
        close(lfd);
        free(m1);
        free(m2);
        ab_vols_free(v);
        close(cache);
}

static bool is_dir_empty_ro(int root, const char *rel)
{
        int fd = openat(root, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return false;
        struct stat st;
        bool empty = fstatat(fd, "x", &st, 0) < 0 && mkdirat(fd, "y", 0755) < 0 && errno == EROFS;
        close(fd);
        return empty;
}

static void binds(const char *dir)
{
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
                tap_ok(0, "a private mount namespace for the binds");
                return;
        }
        char root[4200], src[4200], outside[4200], p[4400];
        snprintf(root, sizeof(root), "%s/root", dir);
        snprintf(src, sizeof(src), "%s/src", dir);
        snprintf(outside, sizeof(outside), "%s/outside", dir);
        mkdir(root, 0755);
        mkdir(src, 0755);
        mkdir(outside, 0755);
        snprintf(p, sizeof(p), "%s/file", src);
        close(open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
        snprintf(p, sizeof(p), "%s/keep", outside);
        mkdir(p, 0755);
        /* the box's tree: a symlink where a mount goes, one above another's */
        snprintf(p, sizeof(p), "%s/last", root);
        (void)!symlink(outside, p);
        snprintf(p, sizeof(p), "%s/up", root);
        (void)!symlink(outside, p);
        snprintf(p, sizeof(p), "%s/ro", root);
        (void)!symlink("/etc", p);
        snprintf(p, sizeof(p), "%s/hide", root);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/hide/x", root);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/f", root);
        close(open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
        int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ab_err *e = NULL;

        ab_bind b1 = {.kind = AB_MOUNT_HOST, .host = src, .path = "/last"};
        tap_ok(ab_binds_apply(rfd, &b1, 1, -1, 0, &e) == 0,
               "a mount onto a symlink the box left: applied");
        struct stat st;
        snprintf(p, sizeof(p), "%s/last", root);
        tap_ok(lstat(p, &st) == 0 && S_ISDIR(st.st_mode), "the symlink became a directory");
        snprintf(p, sizeof(p), "%s/last/file", root);
        tap_ok(access(p, F_OK) == 0, "the mount is on it");
        snprintf(p, sizeof(p), "%s/file", outside);
        tap_ok(access(p, F_OK) < 0 && host_mounts_at(outside) == 0,
               "nothing is mounted on the symlink's target");
        ab_err_free(&e);

        ab_bind b2 = {.kind = AB_MOUNT_HOST, .host = src, .path = "/up/keep/m"};
        tap_ok(ab_binds_apply(rfd, &b2, 1, -1, 0, &e) < 0 && e->code == AB_E_INVALID,
               "a symlink above a mount point fails the mount");
        if (e)
                tap_diag("%s", e->msg);
        snprintf(p, sizeof(p), "%s/keep/m", outside);
        tap_ok(access(p, F_OK) < 0, "and nothing was made through it");
        ab_err_free(&e);

        ab_bind b3 = {.kind = AB_MOUNT_READONLY, .path = "/ro"};
        tap_ok(ab_binds_apply(rfd, &b3, 1, -1, 0, &e) < 0 && host_mounts_at("/etc") == 0,
               "a read-only path that is a symlink fails, /etc untouched");
        ab_err_free(&e);

        ab_bind b4[] = {{.kind = AB_MOUNT_BLOCKED, .path = "/hide"},
                        {.kind = AB_MOUNT_BLOCKED, .path = "/f"},
                        {.kind = AB_MOUNT_READONLY, .path = "/missing"},
                        {.kind = AB_MOUNT_BLOCKED, .path = "/proc"}};
        tap_ok(ab_binds_apply(rfd, b4, 4, -1, 0, &e) == 0, "hidden paths (missing ones skipped)");
        tap_ok(is_dir_empty_ro(rfd, "hide"), "a hidden directory is empty and read-only");
        snprintf(p, sizeof(p), "%s/f", root);
        tap_ok(stat(p, &st) == 0 && S_ISCHR(st.st_mode), "a hidden file is /dev/null");
        ab_err_free(&e);
        close(rfd);
        static const char *const mounted[] = {"last", "hide", "f"};
        for (size_t i = 0; i < AB_ARRAY_LEN(mounted); i++) {
                snprintf(p, sizeof(p), "%s/%s", root, mounted[i]);
                umount2(p, MNT_DETACH);
        }
}

int main(void)
{
        names_and_paths();
        char dir[] = "/tmp/ab-volume-XXXXXX";
        if (!mkdtemp(dir)) {
                tap_ok(0, "mkdtemp");
                return tap_done();
        }
        config_roundtrip(dir);
        if (geteuid() != 0 || system("command -v mkfs.ext4 >/dev/null 2>&1") != 0) {
                tap_diag("not root or no mkfs.ext4: the store and the binds are not tested");
                return tap_done();
        }
        store(dir);
        binds(dir);
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        (void)!system(cmd);
        return tap_done();
}
