/* Unit tests: the list of what a box must not see of /etc and the other
 * shared layers (native/hide.h) is
 * right, is kept while nothing changes, and is made again after every kind
 * of change that could make a secret visible: a chmod, a new file, a
 * directory opened up, a mount. Runs on a fake /etc in a temp dir; the mount
 * case needs root (a private mount namespace). */
#include "native/hide.h"
#include "tap.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char root[64];

static void mk(const char *rel, mode_t mode, bool dir)
{
        char p[256];
        snprintf(p, sizeof(p), "%s/%s", root, rel);
        int r;
        if (dir) {
                r = mkdir(p, mode);
                if (r == 0)
                        r = chmod(p, mode);
        } else {
                int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
                r = fd < 0 ? -1 : fchmod(fd, mode);
                if (fd >= 0)
                        close(fd);
        }
        if (r < 0)
                tap_diag("cannot make %s: %s", p, strerror(errno));
}

static void chmod_rel(const char *rel, mode_t mode)
{
        char p[256];
        snprintf(p, sizeof(p), "%s/%s", root, rel);
        if (chmod(p, mode) < 0)
                tap_diag("chmod %s: %s", p, strerror(errno));
}

static bool has(const ab_hide_list *l, const char *rel)
{
        for (size_t i = 0; l && i < l->n; i++)
                if (!strcmp(l->rel[i], rel))
                        return true;
        return false;
}

/* The list after the current state of the tree, and whether it was walked. */
static ab_hide_list *get(ab_hide_watch *w, bool *walked)
{
        unsigned before = ab_hide_walks(w);
        ab_err *e = NULL;
        ab_hide_list *l = ab_hide_get(w, &e);
        if (!l)
                tap_diag("ab_hide_get: %s", e ? e->msg : "?");
        ab_err_free(&e);
        *walked = ab_hide_walks(w) != before;
        return l;
}

/* A watch over several directories of a fake host root, as the server
 * makes one over the shared layers: entries relative to the root, the deny
 * list under etc/ only, a link among the dirs not walked, a dir nobody else
 * may enter listed itself, a missing dir noticed when it appears. */
static void several_dirs(void)
{
        mk("etc", 0755, true);
        mk("etc/shadow", 0644, false);
        mk("usr", 0755, true);
        mk("usr/shadow", 0644, false); /* the deny list is /etc's */
        mk("usr/share", 0755, true);
        mk("usr/share/rules.d", 0700, true);
        mk("usr/share/ok", 0644, false);
        mk("var", 0755, true);
        mk("var/cache", 0755, true);
        mk("var/cache/debconf", 0755, true);
        mk("var/cache/debconf/passwords.dat", 0600, false);
        mk("var/lib", 0755, true);
        mk("private", 0700, true);
        mk("private/x", 0600, false);
        char lnk[128];
        snprintf(lnk, sizeof(lnk), "%s/lib", root);
        tap_ok(symlink("usr", lnk) == 0, "symlink lib -> usr");
        static const char *const dirs[] = {"etc",         "usr",     "lib", "var/cache/debconf",
                                           "var/lib/ucf", "private", NULL};
        ab_hide_watch *w = ab_hide_watch_new_dirs(root, dirs, "etc");
        bool walked;
        ab_hide_list *l = get(w, &walked);
        tap_ok(l && has(l, "etc/shadow") && has(l, "usr/share/rules.d") &&
                   has(l, "var/cache/debconf/passwords.dat"),
               "several dirs: unreadable entries and the deny list, relative to the root");
        tap_ok(l && !has(l, "usr/shadow") && !has(l, "usr/share/ok") &&
                   !has(l, "lib/share/rules.d"),
               "several dirs: the deny list only under etc/, links not walked");
        tap_ok(l && has(l, "private") && !has(l, "private/x"),
               "several dirs: a dir nobody else may enter is listed itself");
        ab_hide_list_unref(l);
        mk("var/lib/ucf", 0755, true);
        mk("var/lib/ucf/hashfile", 0600, false);
        l = get(w, &walked);
        tap_ok(walked && l && has(l, "var/lib/ucf/hashfile"),
               "several dirs: a dir that appears later is walked");
        ab_hide_list_unref(l);
        ab_hide_watch_free(w);
}

static bool same_list(const ab_hide_list *a, const ab_hide_list *b)
{
        if (!a || !b)
                return false;
        for (size_t i = 0; i < a->n; i++)
                if (!has(b, a->rel[i]))
                        return false;
        for (size_t i = 0; i < b->n; i++)
                if (!has(a, b->rel[i]))
                        return false;
        return true;
}

static char cache[96];

/* One start of a process that does not watch (the CLI): a fresh one-shot
 * watch over root persisting at `cache`; the list, and the directories its
 * walk read and trusted unread. */
static ab_hide_list *one_start(const char *over, unsigned max_age, unsigned *rd, unsigned *kept)
{
        ab_hide_watch *w = ab_hide_watch_new(over);
        ab_hide_watch_persist(w, cache, max_age);
        ab_hide_watch_one_shot(w);
        bool walked;
        ab_hide_list *l = get(w, &walked);
        ab_hide_last_walk(w, rd, kept);
        ab_hide_watch_free(w);
        return l;
}

static void write_cache(const char *data, size_t n)
{
        int fd = open(cache, O_WRONLY | O_TRUNC | O_CLOEXEC);
        if (fd < 0 || write(fd, data, n) != (ssize_t)n)
                tap_diag("cannot write %s: %s", cache, strerror(errno));
        if (fd >= 0)
                close(fd);
}

/* The persisted walk (ab_hide_watch_persist): trusted where directories
 * did not change, read again where they did, dropped when corrupt, of
 * another tree or too old; a watching process refreshes it. */
static void persisted(void)
{
        mk("a", 0755, true);
        mk("a/b", 0755, true);
        mk("a/b/c", 0755, true);
        mk("a/key", 0600, false);
        mk("a/b/ok", 0644, false);
        mk("c", 0755, true);
        mk("c/d", 0755, true);
        mk("shadow", 0644, false);
        mk("x.conf", 0644, false);
        snprintf(cache, sizeof(cache), "%s.cache", root);
        /* directories changed within 2 s of a walk are never trusted: age them */
        sleep(3);
        unsigned rd, kept;
        ab_hide_list *l1 = one_start(root, 600, &rd, &kept);
        tap_ok(l1 && rd == 6 && kept == 0 && has(l1, "a/key") && has(l1, "shadow"),
               "cache: none yet, a full walk (%u read, %u trusted)", rd, kept);
        struct stat st;
        tap_ok(stat(cache, &st) == 0 && (st.st_mode & 07777) == 0600,
               "cache: persisted, mode 0600");
        ab_hide_list *l = one_start(root, 600, &rd, &kept);
        tap_ok(rd == 0 && kept == 6 && same_list(l1, l),
               "cache: valid, every directory trusted unread, the same list (%u read)", rd);
        ab_hide_list_unref(l);

        mk("a/b/c/new.key", 0600, false);
        l = one_start(root, 600, &rd, &kept);
        tap_ok(rd == 1 && kept == 5 && l && has(l, "a/b/c/new.key") && has(l, "a/key"),
               "cache: a file added, only its directory read again, the file hidden");
        ab_hide_list_unref(l);
        mk("c/d/new", 0755, true);
        mk("c/d/new/s", 0600, false);
        l = one_start(root, 600, &rd, &kept);
        tap_ok(l && has(l, "c/d/new/s") && has(l, "a/b/c/new.key"),
               "cache: a new directory is walked whole");
        ab_hide_list_unref(l);
        chmod_rel("c", 0700);
        l = one_start(root, 600, &rd, &kept);
        tap_ok(l && has(l, "c") && !has(l, "c/d/new/s"),
               "cache: a directory chmod'ed 700 is hidden");
        ab_hide_list_unref(l);
        chmod_rel("c", 0755);
        l = one_start(root, 600, &rd, &kept);
        tap_ok(l && !has(l, "c") && has(l, "c/d/new/s"),
               "cache: ...and opened up again, walked into");
        ab_hide_list_unref(l);

        /* What directory stats cannot show: a file chmod'ed in place. */
        chmod_rel("x.conf", 0600);
        l = one_start(root, 600, &rd, &kept);
        tap_ok(l && !has(l, "x.conf"),
               "cache: a file chmod'ed in place is not seen while the cache is trusted");
        ab_hide_list_unref(l);
        sleep(2);
        l = one_start(root, 1, &rd, &kept);
        tap_ok(kept == 0 && l && has(l, "x.conf"),
               "cache: older than its bound, a full walk sees the chmod");
        ab_hide_list_unref(l);
        l = one_start(root, 600, &rd, &kept);
        tap_ok(kept > 0 && l && has(l, "x.conf"), "cache: ...and persists it");
        ab_hide_list_unref(l);

        /* A watching process (the server) walks fully after an event and
         * persists that: a chmod in place reaches the next one-shot start. */
        ab_hide_watch *w = ab_hide_watch_new(root);
        ab_hide_watch_persist(w, cache, 600);
        bool walked;
        l = get(w, &walked);
        ab_hide_last_walk(w, &rd, &kept);
        tap_ok(kept > 0 && l && has(l, "x.conf"), "cache: a watching process starts from it");
        ab_hide_list_unref(l);
        chmod_rel("shadow", 0600);
        chmod_rel("a/b/ok", 0600);
        l = get(w, &walked);
        ab_hide_last_walk(w, &rd, &kept);
        tap_ok(walked && kept == 0 && l && has(l, "a/b/ok"),
               "cache: the watch sees a chmod in place and walks fully");
        ab_hide_list_unref(l);
        ab_hide_watch_free(w);
        /* ...and one that started from it walks fully once it is too old */
        w = ab_hide_watch_new(root);
        ab_hide_watch_persist(w, cache, 1);
        l = get(w, &walked);
        ab_hide_last_walk(w, &rd, &kept);
        ab_hide_list_unref(l);
        tap_ok(kept > 0, "cache: a watching process trusts a cache within its age");
        l = get(w, &walked);
        tap_ok(!walked, "cache: ...keeps its list while nothing changes");
        ab_hide_list_unref(l);
        sleep(2);
        l = get(w, &walked);
        ab_hide_last_walk(w, &rd, &kept);
        tap_ok(walked && kept == 0, "cache: ...and walks fully once the cache's age is past");
        ab_hide_list_unref(l);
        l = get(w, &walked);
        tap_ok(!walked, "cache: ...then trusts its watch alone");
        ab_hide_list_unref(l);
        ab_hide_watch_free(w);
        l = one_start(root, 600, &rd, &kept);
        tap_ok(kept > 0 && l && has(l, "a/b/ok"),
               "cache: ...and the next one-shot start gets it from the cache");
        ab_hide_list_unref(l);

        /* Broken files: a full walk, the list still right. */
        _cleanup_free_ char *good = NULL;
        size_t len = 0;
        tap_ok(ab_read_file(AT_FDCWD, cache, &good, &len) == 0 && len > 64, "cache: read it");
        write_cache(good, len / 2);
        l = one_start(root, 600, &rd, &kept);
        tap_ok(kept == 0 && l && has(l, "a/b/ok") && has(l, "c/d/new/s"),
               "cache: truncated, a full walk");
        ab_hide_list_unref(l);
        good[len / 2] ^= 0x40;
        write_cache(good, len);
        l = one_start(root, 600, &rd, &kept);
        tap_ok(kept == 0 && l && has(l, "a/b/ok"), "cache: a byte flipped, a full walk");
        ab_hide_list_unref(l);
        write_cache("garbage", 7);
        l = one_start(root, 600, &rd, &kept);
        tap_ok(kept == 0 && l && has(l, "a/b/ok"), "cache: garbage, a full walk");
        ab_hide_list_unref(l);
        l = one_start(root, 600, &rd, &kept);
        tap_ok(kept > 0, "cache: rewritten after the full walk");
        ab_hide_list_unref(l);
        char sub[128];
        snprintf(sub, sizeof(sub), "%s/a", root);
        l = one_start(sub, 600, &rd, &kept);
        tap_ok(kept == 0 && l && has(l, "key"), "cache: of another tree, not used");
        ab_hide_list_unref(l);

        /* Two processes writing it at once each rename a whole file. */
        pid_t kids[2];
        for (int k = 0; k < 2; k++) {
                if ((kids[k] = fork()) == 0) {
                        for (int i = 0; i < 10; i++) {
                                char f[64];
                                snprintf(f, sizeof(f), "a/b/c/p%d-%d", k, i);
                                mk(f, 0644, false);
                                unsigned r2, k2;
                                ab_hide_list_unref(one_start(root, 600, &r2, &k2));
                        }
                        _exit(0);
                }
        }
        int ok = 0;
        for (int k = 0; k < 2; k++) {
                int status;
                ok += waitpid(kids[k], &status, 0) == kids[k] && WIFEXITED(status) &&
                      WEXITSTATUS(status) == 0;
        }
        l = one_start(root, 600, &rd, &kept);
        tap_ok(ok == 2 && kept > 0 && l && has(l, "a/b/ok"),
               "cache: whole after concurrent writers (%u read, %u trusted)", rd, kept);
        ab_hide_list_unref(l);
        if (geteuid() == 0) {
                /* main() runs this in a mount namespace of its own */
                char cd[128];
                snprintf(cd, sizeof(cd), "%s/c/d", root);
                tap_ok(mount("t", cd, "tmpfs", 0, "mode=700") == 0, "cache: mount a tmpfs on c/d");
                l = one_start(root, 600, &rd, &kept);
                tap_ok(kept == 0 && l && has(l, "c/d") && !has(l, "c/d/new/s"),
                       "cache: of another mount table, not used");
                ab_hide_list_unref(l);
                umount2(cd, MNT_DETACH);
                l = one_start(root, 600, &rd, &kept);
                tap_ok(kept == 0 && l && !has(l, "c/d") && has(l, "c/d/new/s"),
                       "cache: ...nor once the mount is gone");
                ab_hide_list_unref(l);
        } else {
                tap_ok(true, "# SKIP cache and mounts: needs root");
        }
        ab_hide_list_unref(l1);
        unlink(cache);
}

int main(void)
{
        snprintf(root, sizeof(root), "/tmp/ab-hide-XXXXXX");
        tap_ok(mkdtemp(root) != NULL, "mkdtemp");
        chmod(root, 0755);
        mk("hosts", 0644, false);
        mk("secret.conf", 0600, false);
        mk("shadow", 0644, false); /* deny-listed even when readable */
        mk("ssl", 0755, true);
        mk("ssl/private", 0755, true);
        mk("ssl/certs", 0755, true);
        mk("ssl/certs/ca.pem", 0644, false);
        mk("app", 0755, true);
        mk("app/key", 0640, false);
        mk("locked", 0750, true);
        mk("locked/inner", 0644, false);
        char lnk[128];
        snprintf(lnk, sizeof(lnk), "%s/link", root);
        tap_ok(symlink("secret.conf", lnk) == 0, "symlink");

        ab_hide_watch *w = ab_hide_watch_new(root);
        bool walked;
        ab_hide_list *l = get(w, &walked);
        tap_ok(walked, "the first get walks");
        tap_ok(has(l, "secret.conf") && has(l, "app/key") && has(l, "locked"),
               "entries other users cannot read are hidden");
        tap_ok(has(l, "shadow") && has(l, "ssl/private"), "the deny list is hidden");
        tap_ok(!has(l, "hosts") && !has(l, "ssl/certs/ca.pem") && !has(l, "ssl") &&
                   !has(l, "locked/inner"),
               "readable entries are not hidden, nor is what lies in a hidden directory");
        tap_ok(!has(l, "link"), "links are not hidden (they resolve inside the box)");
        ab_hide_list_unref(l);

        l = get(w, &walked);
        tap_ok(!walked && has(l, "secret.conf"), "nothing changed: the list is kept, no walk");

        chmod_rel("hosts", 0600);
        ab_hide_list *l2 = get(w, &walked);
        tap_ok(walked && has(l2, "hosts"), "a chmod 600 is noticed: the file is hidden");
        tap_ok(!has(l, "hosts") && has(l, "secret.conf"), "an older list stays intact");
        ab_hide_list_unref(l);
        ab_hide_list_unref(l2);

        mk("ssl/certs/new.key", 0600, false);
        l = get(w, &walked);
        tap_ok(walked && has(l, "ssl/certs/new.key"),
               "a new private file two levels down is hidden");
        ab_hide_list_unref(l);

        chmod_rel("locked", 0755);
        l = get(w, &walked);
        tap_ok(walked && !has(l, "locked") && !has(l, "locked/inner"),
               "a directory opened up is walked into");
        ab_hide_list_unref(l);
        chmod_rel("locked/inner", 0600);
        l = get(w, &walked);
        tap_ok(walked && has(l, "locked/inner"), "...and watched from then on");
        ab_hide_list_unref(l);

        char from[256], to[256];
        snprintf(from, sizeof(from), "%s/app/key", root);
        snprintf(to, sizeof(to), "%s/app/key2", root);
        tap_ok(rename(from, to) == 0, "rename");
        l = get(w, &walked);
        tap_ok(walked && has(l, "app/key2") && !has(l, "app/key"), "a rename is noticed");
        ab_hide_list_unref(l);

        if (geteuid() == 0 && unshare(CLONE_NEWNS) == 0 &&
            mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0) {
                /* The watch reads the mount table of its own namespace: make a new one. */
                ab_hide_watch_free(w);
                w = ab_hide_watch_new(root);
                l = get(w, &walked);
                ab_hide_list_unref(l);
                char app[256];
                snprintf(app, sizeof(app), "%s/app", root);
                tap_ok(mount("t", app, "tmpfs", 0, "mode=700") == 0, "mount a tmpfs over app/");
                l = get(w, &walked);
                tap_ok(walked && has(l, "app") && !has(l, "app/key2"),
                       "a mount is noticed: what it covers is judged afresh");
                ab_hide_list_unref(l);
                umount2(app, MNT_DETACH);
                l = get(w, &walked);
                ab_hide_list_unref(l);
                char other[] = "/tmp/ab-hide-other-XXXXXX";
                tap_ok(mkdtemp(other) && mount("t", other, "tmpfs", 0, "mode=700") == 0,
                       "mount a tmpfs elsewhere");
                l = get(w, &walked);
                tap_ok(!walked && l && has(l, "app/key2"),
                       "a mount outside the walked tree asks for no new walk");
                ab_hide_list_unref(l);
                umount2(other, MNT_DETACH);
                rmdir(other);
        } else {
                tap_ok(true, "# SKIP mount case: needs root and a private mount namespace");
        }
        ab_hide_watch_free(w);

        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
        tap_ok(system(cmd) == 0, "cleanup");
        snprintf(root, sizeof(root), "/tmp/ab-hide-XXXXXX");
        tap_ok(mkdtemp(root) != NULL, "mkdtemp");
        chmod(root, 0755);
        several_dirs();
        snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
        tap_ok(system(cmd) == 0, "cleanup");
        snprintf(root, sizeof(root), "/tmp/ab-hide-XXXXXX");
        tap_ok(mkdtemp(root) != NULL, "mkdtemp");
        chmod(root, 0755);
        persisted();
        snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
        tap_ok(system(cmd) == 0, "cleanup");
        return tap_done();
}
