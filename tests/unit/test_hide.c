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
        return tap_done();
}
