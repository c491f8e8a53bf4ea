/* Unit tests: the skills folder's own file system (native/skillsfs.h). In a
 * private mount namespace of this process (the mounts go with it): a plain
 * folder with skills (modes, owners, a symlink, nested files) is moved into
 * a new image; opening again reuses the one mount; after an unmount the
 * image is mounted again; a crash state (a folder set aside, a half copy in
 * the staging area, a skill put by hand into the unmounted mount point) is
 * finished with no skill lost. Needs root, loop devices and mkfs.ext4. */
#include "native/skillsfs.h"
#include "tap.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

static char data[256];
static int data_fd = -1, cache_fd = -1;

static void put(const char *rel, const char *text, mode_t mode)
{
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", data, rel);
        for (char *s = p + strlen(data) + 1; (s = strchr(s, '/')); s++) {
                *s = '\0';
                mkdir(p, 0755);
                *s = '/';
        }
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        if (fd < 0 || ab_write_all(fd, text, strlen(text)) < 0)
                abort();
        fchmod(fd, mode);
        close(fd);
}

static char *get(const char *rel)
{
        char *buf = NULL;
        if (ab_read_file(data_fd, rel, &buf, NULL) < 0)
                return NULL;
        return buf;
}

/* Mounts at DATA/skills in this process's mount table. */
static int mounts_at_skills(void)
{
        char want[300];
        snprintf(want, sizeof(want), " %s/skills ", data);
        FILE *f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return -1;
        char line[4096];
        int n = 0;
        while (fgets(line, sizeof(line), f)) {
                /* the 5th field is the mount point */
                char *p = line;
                for (int i = 0; i < 4 && p; i++)
                        p = strchr(p + 1, ' ');
                if (p && !strncmp(p, want, strlen(want)))
                        n++;
        }
        fclose(f);
        return n;
}

static int open_fs(ab_skillsfs_kind *kind)
{
        ab_err *e = NULL;
        int r = ab_skillsfs_open(data_fd, data, cache_fd, 16, kind, &e);
        if (r < 0) {
                tap_ok(0, "ab_skillsfs_open: %s", e->msg);
                ab_err_free(&e);
        }
        return r;
}

static bool old_folders_left(void)
{
        DIR *d = opendir(data);
        bool any = false;
        struct dirent *e;
        while (d && (e = readdir(d)))
                any |= !strncmp(e->d_name, ".skills-old.", 12);
        if (d)
                closedir(d);
        return any;
}

static void migrate(void)
{
        put("skills/one/SKILL.md", "---\nname: one\n---\n", 0644);
        put("skills/one/scripts/run.sh", "#!/bin/sh\necho one\n", 0705);
        put("skills/two/SKILL.md", "---\nname: two\n---\n", 0600);
        char p[512];
        snprintf(p, sizeof(p), "%s/skills/one/scripts/link", data);
        if (symlink("run.sh", p) < 0)
                abort();
        snprintf(p, sizeof(p), "%s/skills/two/SKILL.md", data);
        if (chown(p, 1234, 5678) < 0)
                abort();
        put(".skills-staging/junk.1.2/x", "old staging", 0644);

        ab_skillsfs_kind kind = 0;
        if (open_fs(&kind) < 0)
                return;
        if (kind == AB_SKILLSFS_PLAIN)
                tap_skip_all("this host cannot loop-mount: the folder stays plain");
        TAP_IS_INT(kind, AB_SKILLSFS_IMAGE, "a plain folder gets an image");
        TAP_IS_INT(mounts_at_skills(), 1, "... mounted once at DATA/skills");
        _cleanup_free_ char *one = get("skills/one/SKILL.md");
        TAP_IS_STR(one, "---\nname: one\n---\n", "the skill's SKILL.md moved in");
        struct stat st;
        tap_ok(fstatat(data_fd, "skills/one/scripts/run.sh", &st, 0) == 0 &&
                   (st.st_mode & 07777) == 0705,
               "... a script keeps its mode");
        tap_ok(fstatat(data_fd, "skills/two/SKILL.md", &st, 0) == 0 && st.st_uid == 1234 &&
                   st.st_gid == 5678 && (st.st_mode & 07777) == 0600,
               "... a file keeps its owner and mode");
        char target[64] = "";
        ssize_t n = readlinkat(data_fd, "skills/one/scripts/link", target, sizeof(target) - 1);
        tap_ok(n == 6 && !memcmp(target, "run.sh", 6), "... a symlink stays a symlink");
        tap_ok(!old_folders_left(), "the old folder is gone");
        tap_ok(faccessat(data_fd, ".skills-staging", F_OK, AT_SYMLINK_NOFOLLOW) < 0,
               "the old staging area is gone");
        tap_ok(faccessat(data_fd, "skills/lost+found", F_OK, AT_SYMLINK_NOFOLLOW) < 0,
               "mkfs's lost+found is not shown");
        tap_ok(faccessat(data_fd, "skills/.staging", F_OK, AT_SYMLINK_NOFOLLOW) == 0,
               "the staging area is inside the skills file system");

        TAP_IS_INT(open_fs(&kind), 0, "a second open works");
        TAP_IS_INT(mounts_at_skills(), 1, "... and reuses the mount");

        char sk[300];
        snprintf(sk, sizeof(sk), "%s/skills", data);
        tap_ok(umount2(sk, MNT_DETACH) == 0, "unmount (a reboot)");
        /* a crash state: a folder set aside with a skill the image has and one it
         * lacks, a half copy by a dead process, a skill put by hand */
        put(".skills-old.abc/one/SKILL.md", "---\nname: one\ndescription: older\n---\n", 0644);
        put(".skills-old.abc/three/SKILL.md", "---\nname: three\n---\n", 0644);
        put("skills/byhand/SKILL.md", "---\nname: byhand\n---\n", 0644);
        TAP_IS_INT(open_fs(&kind), 0, "open after the unmount");
        TAP_IS_INT(mounts_at_skills(), 1, "... mounts the image once again");
        _cleanup_free_ char *one2 = get("skills/one/SKILL.md");
        TAP_IS_STR(one2, "---\nname: one\n---\n", "a skill in the image keeps the image's version");
        _cleanup_free_ char *three = get("skills/three/SKILL.md");
        TAP_IS_STR(three, "---\nname: three\n---\n",
                   "a skill only in the folder set aside moved in");
        _cleanup_free_ char *hand = get("skills/byhand/SKILL.md");
        TAP_IS_STR(hand, "---\nname: byhand\n---\n", "a skill put by hand moved in");
        tap_ok(!old_folders_left(), "nothing is left aside");

        /* a dead process's staging entry goes, a live one's stays */
        char dead[64], live[64];
        snprintf(dead, sizeof(dead), "skills/.staging/x.%d.1/f", 999999999);
        snprintf(live, sizeof(live), "skills/.staging/y.%d.1/f", (int)getpid());
        put(dead, "d", 0644);
        put(live, "l", 0644);
        _cleanup_close_ int sfd = openat(data_fd, "skills", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ab_skillsfs_sweep_staging(sfd);
        tap_ok(faccessat(data_fd, dead, F_OK, 0) < 0,
               "the sweep removes a dead install's leftovers");
        tap_ok(faccessat(data_fd, live, F_OK, 0) == 0, "... and keeps a live one's");
        umount2(sk, MNT_DETACH);
}

int main(void)
{
        if (geteuid() != 0)
                tap_skip_all("needs root");
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                tap_skip_all("no private mount namespace");
        snprintf(data, sizeof(data), "/var/tmp/ab-skillsfs-XXXXXX");
        if (!mkdtemp(data))
                tap_skip_all("mkdtemp failed");
        data_fd = open(data, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (mkdirat(data_fd, "cache", 0700) < 0)
                tap_skip_all("mkdir cache failed");
        cache_fd = openat(data_fd, "cache", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        migrate();
        close(cache_fd);
        close(data_fd);
        _cleanup_free_ char *cmd = xasprintf("rm -rf --one-file-system '%s'", data);
        if (system(cmd) != 0)
                tap_ok(0, "rm -rf %s", data);
        return tap_done();
}
