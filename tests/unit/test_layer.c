/* Unit tests: image layers (image/layer.c) made here with libarchive's
 * writer (plain, gzip, zstd) and unpacked: contents, modes, owners, times,
 * xattrs, symlinks, hard links, whiteouts, opaque markers, later entries
 * replacing earlier ones; then attacks, each in a folder T holding dest and a
 * sentinel folder "outside": absolute names, "..", writing through a symlink
 * of the layer, hard links out, devices, a decompression bomb, too many
 * entries, garbage. An attack passes only when its effect is absent. Root. */
#include "image/layer.h"
#include "tap.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

static char base[] = "/tmp/ab-layer-XXXXXX";
static int n_case;

typedef enum { PLAIN, GZIP, ZSTD } filter;

typedef struct ent {
        const char *name;
        mode_t type; /* AE_IF*; 0 = a regular file */
        mode_t perm; /* 0 = 0644 (0755 for a directory) */
        int64_t uid, gid;
        const char *data;
        uint64_t zeros; /* that many zero bytes as data instead */
        const char *symlink, *hardlink;
        dev_t rdev;
        const char *xname, *xvalue;
        time_t mtime;
} ent;

/* ---- helpers ---------------------------------------------------------- */

/* A layer tar of the entries, in a memfd positioned at 0. */
static int make_layer(filter f, const ent *ents, size_t n)
{
        int fd = memfd_create("layer", MFD_CLOEXEC);
        struct archive *a = archive_write_new();
        archive_write_set_format_pax_restricted(a);
        if (f == GZIP)
                archive_write_add_filter_gzip(a);
        else if (f == ZSTD)
                archive_write_add_filter_zstd(a);
        archive_write_open_fd(a, fd);
        for (size_t i = 0; i < n; i++) {
                const ent *x = &ents[i];
                struct archive_entry *e = archive_entry_new();
                archive_entry_set_pathname(e, x->name);
                mode_t type = x->type ? x->type : AE_IFREG;
                archive_entry_set_filetype(e, type);
                archive_entry_set_perm(e, x->perm ? x->perm : type == AE_IFDIR ? 0755 : 0644);
                archive_entry_set_uid(e, x->uid);
                archive_entry_set_gid(e, x->gid);
                archive_entry_set_mtime(e, x->mtime ? x->mtime : 1000000000, 0);
                if (x->symlink)
                        archive_entry_set_symlink(e, x->symlink);
                if (x->hardlink)
                        archive_entry_set_hardlink(e, x->hardlink);
                if (x->rdev)
                        archive_entry_set_rdev(e, x->rdev);
                if (x->xname)
                        archive_entry_xattr_add_entry(e, x->xname, x->xvalue, strlen(x->xvalue));
                uint64_t size = x->zeros ? x->zeros : x->data ? strlen(x->data) : 0;
                if (type == AE_IFREG && !x->hardlink)
                        archive_entry_set_size(e, (la_int64_t)size);
                if (archive_write_header(a, e) != ARCHIVE_OK)
                        tap_ok(0, "archive header %s: %s", x->name, archive_error_string(a));
                if (x->zeros) {
                        static char zero[1 << 16];
                        for (uint64_t left = size; left;) {
                                size_t k = left < sizeof(zero) ? (size_t)left : sizeof(zero);
                                archive_write_data(a, zero, k);
                                left -= k;
                        }
                } else if (size && type == AE_IFREG) {
                        archive_write_data(a, x->data, size);
                }
                archive_entry_free(e);
        }
        archive_write_close(a);
        archive_write_free(a);
        lseek(fd, 0, SEEK_SET);
        return fd;
}

/* A fresh case folder T (returned) with T/dest and T/outside. */
static char *new_case(void)
{
        char *t = xasprintf("%s/t%d", base, ++n_case);
        _cleanup_free_ char *d = xasprintf("%s/dest", t);
        _cleanup_free_ char *o = xasprintf("%s/outside", t);
        if (mkdir(t, 0755) < 0 || mkdir(d, 0755) < 0 || mkdir(o, 0755) < 0)
                tap_ok(0, "mkdir %s", t);
        return t;
}

/* Unpacks the layer into T/dest. Returns ab_layer_unpack's result. */
static int unpack_into(const char *t, int layer, const ab_layer_opts *o, ab_layer_stats *st,
                       ab_err **e)
{
        _cleanup_free_ char *d = xasprintf("%s/dest", t);
        _cleanup_close_ int dfd = open(d, O_PATH | O_DIRECTORY | O_CLOEXEC);
        return ab_layer_unpack(layer, dfd, o, st, e);
}

static int unpack_ents(const char *t, filter f, const ent *ents, size_t n, const ab_layer_opts *o,
                       ab_layer_stats *st, ab_err **e)
{
        _cleanup_close_ int fd = make_layer(f, ents, n);
        return unpack_into(t, fd, o, st, e);
}

static int count_entries(const char *dir)
{
        DIR *d = opendir(dir);
        if (!d)
                return -1;
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        n++;
        closedir(d);
        return n;
}

/* Nothing appeared next to dest, and outside holds exactly `want` entries. */
static void check_contained(const char *t, int want, const char *name)
{
        _cleanup_free_ char *o = xasprintf("%s/outside", t);
        int got_t = count_entries(t), got_o = count_entries(o);
        tap_ok(got_t == 2 && got_o == want, "%s: nothing written outside dest", name);
        if (got_t != 2 || got_o != want)
                tap_diag("  %d entries beside dest, %d in outside (want %d)", got_t, got_o, want);
}

static bool lstat_at(const char *t, const char *rel, struct stat *st)
{
        _cleanup_free_ char *p = xasprintf("%s/%s", t, rel);
        return lstat(p, st) == 0;
}

static char *read_rel(const char *t, const char *rel)
{
        _cleanup_free_ char *p = xasprintf("%s/%s", t, rel);
        char *s = NULL;
        size_t n;
        if (ab_read_file(AT_FDCWD, p, &s, &n) < 0)
                return NULL;
        return s;
}

static void write_rel(const char *t, const char *rel, const char *text)
{
        _cleanup_free_ char *p = xasprintf("%s/%s", t, rel);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || ab_write_all(fd, text, strlen(text)) < 0)
                tap_ok(0, "write %s", p);
        if (fd >= 0)
                close(fd);
}

/* The attack failed with `code` and its message names `entry`. */
static void check_refused(int rc, ab_err *e, ab_code code, const char *entry, const char *name)
{
        bool ok = rc < 0 && e && e->code == code && (!entry || strstr(e->msg, entry));
        tap_ok(ok, "%s: refused (%s)", name, ab_code_name(code));
        tap_diag("  rc %d, %s: %s", rc, e ? ab_code_name(e->code) : "-", e ? e->msg : "no error");
}

/* ---- a good layer ------------------------------------------------------- */

static void test_good(filter f, const char *fname)
{
        _cleanup_free_ char *t = new_case();
        ent ents[] = {
            {.name = "./", .type = AE_IFDIR, .perm = 0751},
            {.name = "./etc/",
             .type = AE_IFDIR,
             .perm = 02750,
             .uid = 1000,
             .gid = 1001,
             .mtime = 1500000000},
            {.name = "./etc/hello",
             .perm = 0640,
             .uid = 1000,
             .gid = 1001,
             .data = "hello, layer\n",
             .mtime = 1600000000,
             .xname = "user.note",
             .xvalue = "kept"},
            {.name = "etc/secret", .data = "x", .xname = "trusted.evil", .xvalue = "dropped"},
            {.name = "etc/over", .data = "x", .xname = "user.overlay.redirect", .xvalue = "/x"},
            {.name = "etc/link",
             .type = AE_IFLNK,
             .symlink = "/etc/hello",
             .uid = 1000,
             .gid = 1000},
            {.name = "etc/up", .type = AE_IFLNK, .symlink = "../../../../.."},
            {.name = "./etc//hello2", .hardlink = "./etc/hello"},
            {.name = "bin/su", .perm = 04755, .data = "#!/bin/true\n"},
            {.name = "auto/made/file", .data = "deep"},
        };
        ab_layer_stats st = {0};
        _cleanup_err_ ab_err *e = NULL;
        int rc = unpack_ents(t, f, ents, AB_ARRAY_LEN(ents), NULL, &st, &e);
        tap_ok(rc == 0, "%s layer unpacks", fname);
        if (rc < 0)
                tap_diag("  %s", e->msg);
        _cleanup_free_ char *hello = read_rel(t, "dest/etc/hello");
        TAP_IS_STR(hello, "hello, layer\n", "file content");
        struct stat s = {0}, s2 = {0};
        lstat_at(t, "dest/etc/hello", &s);
        tap_ok((s.st_mode & 07777) == 0640 && s.st_uid == 1000 && s.st_gid == 1001 &&
                   s.st_mtim.tv_sec == 1600000000,
               "%s: file mode 0640, owner 1000:1001, mtime", fname);
        lstat_at(t, "dest/etc", &s2);
        tap_ok(S_ISDIR(s2.st_mode) && (s2.st_mode & 07777) == 02750 && s2.st_uid == 1000 &&
                   s2.st_mtim.tv_sec == 1500000000,
               "%s: directory mode 02750, owner, mtime set after its children", fname);
        lstat_at(t, "dest/etc/hello2", &s2);
        tap_ok(s2.st_ino == s.st_ino && s.st_nlink == 2, "%s: hard link is the same inode", fname);
        char buf[64] = "";
        _cleanup_free_ char *lp = xasprintf("%s/dest/etc/link", t);
        ssize_t n = readlink(lp, buf, sizeof(buf) - 1);
        buf[n > 0 ? n : 0] = 0;
        lstat_at(t, "dest/etc/link", &s2);
        tap_ok(!strcmp(buf, "/etc/hello") && S_ISLNK(s2.st_mode) && s2.st_uid == 1000,
               "%s: symlink stored as is, with its owner", fname);
        lstat_at(t, "dest/bin/su", &s2);
        tap_ok(S_ISREG(s2.st_mode) && (s2.st_mode & 07777) == 04755, "%s: setuid bit kept", fname);
        lstat_at(t, "dest/auto/made", &s2);
        tap_ok(S_ISDIR(s2.st_mode) && (s2.st_mode & 0777) == 0755, "%s: missing parents made 0755",
               fname);
        lstat_at(t, "dest", &s2);
        TAP_IS_INT(s2.st_mode & 07777, 0751, "root entry sets dest's mode");
        _cleanup_free_ char *hp = xasprintf("%s/dest/etc/hello", t);
        _cleanup_free_ char *sp = xasprintf("%s/dest/etc/secret", t);
        _cleanup_free_ char *op = xasprintf("%s/dest/etc/over", t);
        char xv[16] = "";
        ssize_t xn = getxattr(hp, "user.note", xv, sizeof(xv) - 1);
        xv[xn > 0 ? xn : 0] = 0;
        TAP_IS_STR(xv, "kept", "user.* xattr kept");
        tap_ok(getxattr(sp, "trusted.evil", xv, sizeof(xv)) < 0 &&
                   getxattr(op, "user.overlay.redirect", xv, sizeof(xv)) < 0,
               "%s: trusted.* and user.overlay.* xattrs dropped", fname);
        tap_ok(st.entries == AB_ARRAY_LEN(ents) && st.bytes == 13 + 1 + 1 + 12 + 4 &&
                   st.skipped == 0 && st.whiteouts == 0,
               "%s: stats (%llu entries, %llu bytes)", fname, (unsigned long long)st.entries,
               (unsigned long long)st.bytes);
        check_contained(t, 0, fname);
}

/* ---- whiteouts and replacement ------------------------------------------ */

static void test_whiteouts(void)
{
        _cleanup_free_ char *t = new_case();
        ent ents[] = {
            {.name = "etc/gone", .data = "old"},
            {.name = "etc/.wh.gone"},
            {.name = "etc/.wh.never"},
            {.name = "opq/", .type = AE_IFDIR},
            {.name = "opq/keep", .data = "k"},
            {.name = "opq/.wh..wh..opq"},
            {.name = "fresh/sub/.wh..wh..opq"},
            {.name = ".wh..wh.plnk"},
            {.name = ".wh..wh..opq"},
        };
        ab_layer_stats st = {0};
        _cleanup_err_ ab_err *e = NULL;
        int rc = unpack_ents(t, GZIP, ents, AB_ARRAY_LEN(ents), NULL, &st, &e);
        tap_ok(rc == 0, "layer with whiteouts unpacks");
        if (rc < 0)
                tap_diag("  %s", e->msg);
        struct stat s = {0}, s2 = {0};
        lstat_at(t, "dest/etc/gone", &s);
        lstat_at(t, "dest/etc/never", &s2);
        tap_ok(S_ISCHR(s.st_mode) && s.st_rdev == makedev(0, 0) && s.st_uid == 0 &&
                   S_ISCHR(s2.st_mode) && s2.st_rdev == makedev(0, 0),
               "whiteout .wh.NAME -> 0/0 character device NAME (replacing the file)");
        tap_ok(!lstat_at(t, "dest/etc/.wh.gone", &s), "no .wh. file left");
        _cleanup_free_ char *opq = xasprintf("%s/dest/opq", t);
        _cleanup_free_ char *fresh = xasprintf("%s/dest/fresh/sub", t);
        _cleanup_free_ char *root = xasprintf("%s/dest", t);
        char v[4] = "";
        ssize_t n = getxattr(opq, "trusted.overlay.opaque", v, sizeof(v) - 1);
        v[n > 0 ? n : 0] = 0;
        TAP_IS_STR(v, "y", "opaque marker -> trusted.overlay.opaque=y");
        char v2[4] = "", v3[4] = "";
        n = getxattr(fresh, "trusted.overlay.opaque", v2, sizeof(v2) - 1);
        v2[n > 0 ? n : 0] = 0;
        n = getxattr(root, "trusted.overlay.opaque", v3, sizeof(v3) - 1);
        v3[n > 0 ? n : 0] = 0;
        tap_ok(!strcmp(v2, "y") && !strcmp(v3, "y"),
               "opaque marker in a missing directory makes it; at the top marks dest");
        tap_ok(lstat_at(t, "dest/opq/keep", &s) && !lstat_at(t, "dest/opq/.wh..wh..opq", &s) &&
                   !lstat_at(t, "dest/.wh..wh.plnk", &s),
               "the opaque directory's own entries stay; other .wh..wh. names skipped");
        TAP_IS_INT(st.whiteouts, 5, "whiteouts counted");
}

static void test_replace(void)
{
        _cleanup_free_ char *t = new_case();
        _cleanup_free_ char *out = xasprintf("%s/outside", t);
        write_rel(t, "outside/keep", "keep");
        /* 300 levels: removing them must not hold an fd per level */
        char deep[1024] = "deep";
        for (int i = 0; i < 300; i++)
                strcat(deep, "/d");
        strcat(deep, "/f");
        ent ents[] = {
            {.name = "x/", .type = AE_IFDIR},
            {.name = "x/child/deep", .data = "c"},
            {.name = "x/child2/a/b", .data = "b"},
            {.name = "x/child2/c/", .type = AE_IFDIR, .perm = 0500},
            {.name = "x/child2/c/d", .data = "d", .perm = 0400},
            {.name = "x/child2/e", .data = "e"},
            {.name = "x/out", .type = AE_IFLNK, .symlink = out},
            {.name = "x/f", .data = "f"},
            {.name = deep, .data = "deep"},
            {.name = "deep", .data = "flat"},
            {.name = "x", .data = "file over dir"},
            {.name = "y", .data = "f"},
            {.name = "y/", .type = AE_IFDIR, .perm = 0700},
            {.name = "y/z", .data = "z"},
            {.name = "m/", .type = AE_IFDIR},
            {.name = "m/kept", .data = "k"},
            {.name = "m/", .type = AE_IFDIR, .perm = 0711},
            {.name = "f", .data = "one"},
            {.name = "f", .data = "two"},
            {.name = "s", .type = AE_IFLNK, .symlink = "f"},
            {.name = "s", .data = "file over symlink"},
        };
        _cleanup_err_ ab_err *e = NULL;
        struct rlimit was, few;
        getrlimit(RLIMIT_NOFILE, &was);
        few = was;
        few.rlim_cur = 64;
        setrlimit(RLIMIT_NOFILE, &few);
        int rc = unpack_ents(t, PLAIN, ents, AB_ARRAY_LEN(ents), NULL, NULL, &e);
        setrlimit(RLIMIT_NOFILE, &was);
        tap_ok(rc == 0, "layer with replaced entries unpacks (with 64 fds)");
        if (rc < 0)
                tap_diag("  %s", e->msg);
        _cleanup_free_ char *x = read_rel(t, "dest/x");
        TAP_IS_STR(x, "file over dir", "a file replaces a directory (and all it held)");
        _cleanup_free_ char *flat = read_rel(t, "dest/deep");
        TAP_IS_STR(flat, "flat", "a file replaces a directory 300 levels deep");
        _cleanup_free_ char *keep = read_rel(t, "outside/keep");
        TAP_IS_STR(keep, "keep", "removing a directory leaves what its symlink points at");
        check_contained(t, 1, "replaced entries");
        struct stat s = {0};
        lstat_at(t, "dest/y", &s);
        _cleanup_free_ char *z = read_rel(t, "dest/y/z");
        tap_ok(S_ISDIR(s.st_mode) && (s.st_mode & 0777) == 0700 && z && !strcmp(z, "z"),
               "a directory replaces a file");
        lstat_at(t, "dest/m", &s);
        tap_ok(lstat_at(t, "dest/m/kept", &s) && lstat_at(t, "dest/m", &s) &&
                   (s.st_mode & 0777) == 0711,
               "a directory over a directory merges (children kept, mode of the later)");
        _cleanup_free_ char *f = read_rel(t, "dest/f");
        TAP_IS_STR(f, "two", "a file replaces a file");
        _cleanup_free_ char *sf = read_rel(t, "dest/s");
        lstat_at(t, "dest/s", &s);
        tap_ok(S_ISREG(s.st_mode) && sf && !strcmp(sf, "file over symlink") && f &&
                   !strcmp(f, "two"),
               "a file replaces a symlink (not written through it)");
}

/* ---- attacks --------------------------------------------------------------- */

static void attack_names(void)
{
        {
                _cleanup_free_ char *t = new_case();
                _cleanup_free_ char *abs = xasprintf("%s/outside/abs", t);
                ent ents[] = {{.name = abs, .data = "pwned"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, 1, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "/outside/abs", "absolute path entry");
                check_contained(t, 0, "absolute path entry");
        }
        {
                _cleanup_free_ char *t = new_case();
                ent ents[] = {{.name = "../x", .data = "pwned"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, 1, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "../x", "\"../x\" entry");
                check_contained(t, 0, "\"../x\" entry");
        }
        {
                _cleanup_free_ char *t = new_case();
                ent ents[] = {{.name = "a/", .type = AE_IFDIR},
                              {.name = "a/../../x", .data = "pwned"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, GZIP, ents, 2, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "a/../../x", "\"a/../../x\" entry");
                check_contained(t, 0, "\"a/../../x\" entry");
        }
}

static void attack_symlinks(void)
{
        {
                _cleanup_free_ char *t = new_case();
                _cleanup_free_ char *out = xasprintf("%s/outside", t);
                ent ents[] = {{.name = "a", .type = AE_IFLNK, .symlink = out},
                              {.name = "a/pwned", .data = "pwned"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, 2, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "a/pwned", "file under a symlink to outside");
                check_contained(t, 0, "file under a symlink to outside");
        }
        {
                _cleanup_free_ char *t = new_case();
                ent ents[] = {{.name = "up", .type = AE_IFLNK, .symlink = ".."},
                              {.name = "up/x", .data = "pwned"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, 2, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "up/x", "file under a symlink to \"..\"");
                check_contained(t, 0, "file under a symlink to \"..\"");
        }
        {
                _cleanup_free_ char *t = new_case();
                _cleanup_free_ char *out = xasprintf("%s/outside", t);
                ent ents[] = {{.name = "d", .type = AE_IFDIR},
                              {.name = "d/up", .type = AE_IFLNK, .symlink = "../.."},
                              {.name = "d/up/outside/deep/x", .data = "pwned"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, 3, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "d/up/outside/deep/x",
                              "directories made under a symlink");
                check_contained(t, 0, "directories made under a symlink");
        }
        {
                /* What a symlink points at is never touched when the layer replaces it. */
                _cleanup_free_ char *t = new_case();
                _cleanup_free_ char *out = xasprintf("%s/outside", t);
                _cleanup_free_ char *sec = xasprintf("%s/outside/secret", t);
                write_rel(t, "outside/secret", "secret");
                chmod(out, 0700);
                ent ents[] = {{.name = "f", .type = AE_IFLNK, .symlink = sec},
                              {.name = "f", .data = "pwned", .perm = 0666, .uid = 1000},
                              {.name = "d", .type = AE_IFLNK, .symlink = out},
                              {.name = "d/", .type = AE_IFDIR, .perm = 0777, .uid = 1000},
                              {.name = "d/x", .data = "in dest"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, AB_ARRAY_LEN(ents), NULL, NULL, &e);
                tap_ok(rc == 0, "entries over symlinks unpack");
                _cleanup_free_ char *s = read_rel(t, "outside/secret");
                struct stat so = {0}, sf = {0};
                lstat(out, &so);
                lstat(sec, &sf);
                tap_ok(s && !strcmp(s, "secret") && (sf.st_mode & 0777) == 0644 && sf.st_uid == 0 &&
                           (so.st_mode & 0777) == 0700 && so.st_uid == 0,
                       "a file or directory over a symlink leaves its target alone");
                check_contained(t, 1, "entries over symlinks");
        }
        {
                /* Whiteouts and opaque markers are not made through a symlink either. */
                _cleanup_free_ char *t = new_case();
                _cleanup_free_ char *out = xasprintf("%s/outside", t);
                write_rel(t, "outside/secret", "secret");
                ent ents[] = {{.name = "w", .type = AE_IFLNK, .symlink = out},
                              {.name = "w/.wh.secret"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, 2, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "w/.wh.secret", "whiteout through a symlink");
                ent ents2[] = {{.name = "w", .type = AE_IFLNK, .symlink = out},
                               {.name = "w/.wh..wh..opq"}};
                _cleanup_err_ ab_err *e2 = NULL;
                rc = unpack_ents(t, PLAIN, ents2, 2, NULL, NULL, &e2);
                check_refused(rc, e2, AB_E_INVALID, "w/.wh..wh..opq",
                              "opaque marker through a symlink");
                struct stat s = {0};
                char v[4];
                tap_ok(lstat_at(t, "outside/secret", &s) && S_ISREG(s.st_mode) &&
                           getxattr(out, "trusted.overlay.opaque", v, sizeof(v)) < 0,
                       "the symlink's target is neither whited out nor made opaque");
                check_contained(t, 1, "whiteouts through a symlink");
        }
}

static void attack_hardlinks(void)
{
        {
                _cleanup_free_ char *t = new_case();
                struct stat before = {0}, after = {0};
                stat("/etc/passwd", &before);
                ent ents[] = {{.name = "passwd", .hardlink = "/etc/passwd"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, 1, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "passwd", "hard link to /etc/passwd");
                stat("/etc/passwd", &after);
                struct stat s;
                tap_ok(!lstat_at(t, "dest/passwd", &s) && after.st_nlink == before.st_nlink,
                       "hard link to /etc/passwd: no link made");
                check_contained(t, 0, "hard link to /etc/passwd");
        }
        {
                _cleanup_free_ char *t = new_case();
                write_rel(t, "outside/x", "x");
                ent ents[] = {{.name = "h", .hardlink = "../outside/x"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, 1, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "\"h\"", "hard link to \"../outside/x\"");
                struct stat s = {0};
                lstat_at(t, "outside/x", &s);
                tap_ok(s.st_nlink == 1 && !lstat_at(t, "dest/h", &s),
                       "hard link to \"..\": no link made");
                check_contained(t, 1, "hard link to \"..\"");
        }
        {
                _cleanup_free_ char *t = new_case();
                _cleanup_free_ char *sec = xasprintf("%s/outside/secret", t);
                write_rel(t, "outside/secret", "secret");
                ent ents[] = {{.name = "s", .type = AE_IFLNK, .symlink = sec},
                              {.name = "h", .hardlink = "s"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, 2, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "\"h\"", "hard link to a symlink pointing out");
                struct stat s = {0};
                lstat_at(t, "outside/secret", &s);
                tap_ok(s.st_nlink == 1 && !lstat_at(t, "dest/h", &s),
                       "hard link to a symlink: no link made");
                check_contained(t, 1, "hard link to a symlink");
        }
        {
                /* A file later replaced by a symlink out is no target any more. */
                _cleanup_free_ char *t = new_case();
                _cleanup_free_ char *sec = xasprintf("%s/outside/secret", t);
                write_rel(t, "outside/secret", "secret");
                ent ents[] = {{.name = "f", .data = "f"},
                              {.name = "f", .type = AE_IFLNK, .symlink = sec},
                              {.name = "h", .hardlink = "f"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, 3, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "\"h\"",
                              "hard link to a file replaced by a symlink");
                struct stat s = {0};
                lstat_at(t, "outside/secret", &s);
                tap_ok(s.st_nlink == 1, "hard link to a replaced file: no link made");
        }
        {
                /* ... nor is a file whose directory was replaced by a symlink out. */
                _cleanup_free_ char *t = new_case();
                _cleanup_free_ char *out = xasprintf("%s/outside", t);
                write_rel(t, "outside/f", "secret");
                ent ents[] = {{.name = "a/f", .data = "f"},
                              {.name = "a", .type = AE_IFLNK, .symlink = out},
                              {.name = "h", .hardlink = "a/f"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, 3, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "\"h\"",
                              "hard link through a directory replaced by a symlink");
                struct stat s = {0};
                lstat_at(t, "outside/f", &s);
                tap_ok(s.st_nlink == 1 && !lstat_at(t, "dest/h", &s),
                       "hard link through a replaced directory: no link made");
        }
        {
                /* A file dest held before the layer is not "of this layer". */
                _cleanup_free_ char *t = new_case();
                write_rel(t, "dest/pre", "pre");
                ent ents[] = {{.name = "h", .hardlink = "pre"},
                              {.name = "d", .type = AE_IFDIR},
                              {.name = "h2", .hardlink = "d"}};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, PLAIN, ents, 1, NULL, NULL, &e);
                check_refused(rc, e, AB_E_INVALID, "\"h\"", "hard link to a file not in the layer");
                _cleanup_err_ ab_err *e2 = NULL;
                rc = unpack_ents(t, PLAIN, ents + 1, 2, NULL, NULL, &e2);
                check_refused(rc, e2, AB_E_INVALID, "\"h2\"", "hard link to a directory");
        }
}

static void attack_devices(void)
{
        _cleanup_free_ char *t = new_case();
        ent ents[] = {
            {.name = "null", .type = AE_IFCHR, .rdev = makedev(1, 3), .perm = 0666},
            {.name = "sda", .type = AE_IFBLK, .rdev = makedev(8, 0), .perm = 0666},
            {.name = "pipe", .type = AE_IFIFO},
            {.name = "ok", .data = "ok"},
        };
        ab_layer_stats st = {0};
        _cleanup_err_ ab_err *e = NULL;
        int rc = unpack_ents(t, PLAIN, ents, AB_ARRAY_LEN(ents), NULL, &st, &e);
        struct stat s;
        tap_ok(rc == 0 && !lstat_at(t, "dest/null", &s) && !lstat_at(t, "dest/sda", &s) &&
                   !lstat_at(t, "dest/pipe", &s) && lstat_at(t, "dest/ok", &s),
               "char/block devices and fifos skipped, not created");
        TAP_IS_INT(st.skipped, 3, "skipped entries counted");
        check_contained(t, 0, "devices");
}

static void attack_limits(void)
{
        {
                _cleanup_free_ char *t = new_case();
                ent ents[] = {{.name = "bomb", .zeros = 64ull << 20},
                              {.name = "after", .data = "after"}};
                _cleanup_close_ int fd = make_layer(GZIP, ents, 2);
                struct stat ls = {0};
                fstat(fd, &ls);
                ab_layer_opts o = {.max_bytes = 8 << 20};
                ab_layer_stats st = {0};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_into(t, fd, &o, &st, &e);
                check_refused(rc, e, AB_E_LIMIT, "more than 8388608 bytes",
                              "decompression bomb (64 MiB of zeros)");
                struct stat s = {0};
                lstat_at(t, "dest/bomb", &s);
                tap_ok(ls.st_size < (1 << 20) && st.bytes <= (8u << 20) && s.st_size <= (8 << 20) &&
                           !lstat_at(t, "dest/after", &s),
                       "bomb: stopped at the limit (%llu bytes written from %lld compressed)",
                       (unsigned long long)st.bytes, (long long)ls.st_size);
        }
        {
                _cleanup_free_ char *t = new_case();
                ent ents[] = {{.name = "dev", .type = AE_IFCHR, .rdev = makedev(1, 3)},
                              {.name = "big", .zeros = 3 << 20}};
                ab_layer_opts o = {.max_bytes = 1 << 20};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, GZIP, ents, 2, &o, NULL, &e);
                check_refused(rc, e, AB_E_LIMIT, NULL,
                              "bytes limit: a device's data and a 3 MiB file");
        }
        {
                _cleanup_free_ char *t = new_case();
                ent ents[20];
                char names[20][8];
                for (int i = 0; i < 20; i++) {
                        snprintf(names[i], sizeof(names[i]), "f%02d", i);
                        ents[i] = (ent){.name = names[i], .data = "x"};
                }
                ab_layer_opts o = {.max_entries = 10};
                ab_layer_stats st = {0};
                _cleanup_err_ ab_err *e = NULL;
                int rc = unpack_ents(t, ZSTD, ents, 20, &o, &st, &e);
                check_refused(rc, e, AB_E_LIMIT, "more than 10 entries", "too many entries");
                struct stat s;
                tap_ok(lstat_at(t, "dest/f09", &s) && !lstat_at(t, "dest/f10", &s) &&
                           st.entries == 11,
                       "too many entries: stopped at the 11th");
        }
}

static void attack_garbage(void)
{
        _cleanup_free_ char *t = new_case();
        int fd = memfd_create("garbage", MFD_CLOEXEC);
        uint32_t x = 12345;
        char buf[4096];
        for (size_t i = 0; i < sizeof(buf); i++) {
                x = x * 1103515245u + 12345u;
                buf[i] = (char)(x >> 16);
        }
        if (ab_write_all(fd, buf, sizeof(buf)) < 0)
                tap_ok(0, "write garbage");
        lseek(fd, 0, SEEK_SET);
        _cleanup_err_ ab_err *e = NULL;
        int rc = unpack_into(t, fd, NULL, NULL, &e);
        check_refused(rc, e, AB_E_INVALID, "not a tar", "garbage bytes");
        close(fd);

        /* A gzip layer cut in the middle of a file's data. */
        ent ents[] = {{.name = "a", .zeros = 1 << 20}, {.name = "b", .data = "b"}};
        _cleanup_close_ int full = make_layer(GZIP, ents, 2);
        struct stat s = {0};
        fstat(full, &s);
        _cleanup_free_ char *data = xmalloc((size_t)s.st_size);
        if (ab_read_full(full, data, (size_t)s.st_size) != s.st_size)
                tap_ok(0, "read layer");
        int cut = memfd_create("cut", MFD_CLOEXEC);
        if (ab_write_all(cut, data, (size_t)s.st_size / 2) < 0)
                tap_ok(0, "write cut layer");
        lseek(cut, 0, SEEK_SET);
        _cleanup_err_ ab_err *e2 = NULL;
        rc = unpack_into(t, cut, NULL, NULL, &e2);
        check_refused(rc, e2, AB_E_INVALID, NULL, "truncated gzip layer");
        close(cut);

        int empty = memfd_create("empty", MFD_CLOEXEC);
        _cleanup_err_ ab_err *e3 = NULL;
        rc = unpack_into(t, empty, NULL, NULL, &e3);
        check_refused(rc, e3, AB_E_INVALID, NULL, "empty input");
        close(empty);
}

/* A full disk is the host's problem, not the layer's: dest on a 1 MiB tmpfs
 * (in a mount namespace of this test's own). */
static void test_full_disk(void)
{
        _cleanup_free_ char *t = new_case();
        _cleanup_free_ char *d = xasprintf("%s/dest", t);
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
            mount("tmpfs", d, "tmpfs", 0, "size=1m") < 0) {
                printf("ok %d - # SKIP no tmpfs of our own: %s\n", ++tap_n, strerror(errno));
                return;
        }
        ent ents[] = {{.name = "big", .zeros = 4 << 20}};
        _cleanup_err_ ab_err *e = NULL;
        int rc = unpack_ents(t, GZIP, ents, 1, NULL, NULL, &e);
        check_refused(rc, e, AB_E_STORAGE, "\"big\"", "a full disk");
        umount2(d, MNT_DETACH);
}

static void attack_file_parent(void)
{
        _cleanup_free_ char *t = new_case();
        ent ents[] = {{.name = "a", .data = "a file"}, {.name = "a/b", .data = "b"}};
        _cleanup_err_ ab_err *e = NULL;
        int rc = unpack_ents(t, PLAIN, ents, 2, NULL, NULL, &e);
        check_refused(rc, e, AB_E_INVALID, "a/b", "an entry under a file");
        _cleanup_free_ char *a = read_rel(t, "dest/a");
        TAP_IS_STR(a, "a file", "the file stays");
}

/* sha256 of fd's bytes from 0, as "sha256:HEX". */
static char *plain_digest(int fd)
{
        char buf[1 << 14];
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        EVP_DigestInit_ex(md, EVP_sha256(), NULL);
        ssize_t n;
        lseek(fd, 0, SEEK_SET);
        while ((n = read(fd, buf, sizeof(buf))) > 0)
                EVP_DigestUpdate(md, buf, (size_t)n);
        unsigned char d[32];
        unsigned int dn = 0;
        EVP_DigestFinal_ex(md, d, &dn);
        EVP_MD_CTX_free(md);
        char hex[65];
        for (unsigned int i = 0; i < 32; i++)
                snprintf(hex + 2 * i, 3, "%02x", d[i]);
        lseek(fd, 0, SEEK_SET);
        return xasprintf("sha256:%s", hex);
}

/* ab_layer_diff_id: the digest of the decompressed tar, whatever the
 * compression; garbage and bombs refused. */
static void test_diff_id(void)
{
        static const ent ents[] = {{.name = "etc/a", .data = "one"},
                                   {.name = "etc/b", .data = "two"}};
        int plain = make_layer(PLAIN, ents, 2);
        _cleanup_free_ char *want = plain_digest(plain);
        static const filter fs[] = {PLAIN, GZIP, ZSTD};
        static const char *const names[] = {"plain", "gzip", "zstd"};
        for (size_t i = 0; i < 3; i++) {
                int fd = make_layer(fs[i], ents, 2);
                char *got = NULL;
                ab_err *e = NULL;
                int rc = ab_layer_diff_id(fd, NULL, &got, &e);
                tap_ok(rc == 0 && got && !strcmp(got, want),
                       "diff id of a %s layer is the sha256 "
                       "of its tar",
                       names[i]);
                if (rc < 0)
                        tap_diag("  %s", e->msg);
                free(got);
                ab_err_free(&e);
                close(fd);
        }
        close(plain);
        int fd = memfd_create("garbage", MFD_CLOEXEC);
        static const char gz_head_only[] = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage";
        if (ab_write_all(fd, gz_head_only, sizeof(gz_head_only) - 1) < 0)
                abort();
        lseek(fd, 0, SEEK_SET);
        char *got = NULL;
        ab_err *e = NULL;
        int rc = ab_layer_diff_id(fd, NULL, &got, &e);
        tap_ok(rc < 0 && e && e->code == AB_E_INVALID && !got,
               "a broken gzip stream has no diff id");
        ab_err_free(&e);
        close(fd);
        static const ent big[] = {{.name = "zeros", .zeros = 4u << 20}};
        fd = make_layer(GZIP, big, 1);
        ab_layer_opts o = {.max_bytes = 1 << 20, .max_entries = 4};
        rc = ab_layer_diff_id(fd, &o, &got, &e);
        tap_ok(rc < 0 && e && e->code == AB_E_LIMIT && !got,
               "a layer decompressing past its bound has no diff id (AB_E_LIMIT)");
        ab_err_free(&e);
        close(fd);
}

int main(void)
{
        if (geteuid() != 0)
                tap_skip_all("needs root (owners, whiteout devices, trusted.* xattrs)");
        if (!mkdtemp(base))
                tap_skip_all("no temp dir");
        test_good(PLAIN, "plain");
        test_good(GZIP, "gzip");
        test_good(ZSTD, "zstd");
        test_whiteouts();
        test_replace();
        attack_names();
        attack_symlinks();
        attack_hardlinks();
        attack_devices();
        attack_limits();
        attack_garbage();
        attack_file_parent();
        test_full_disk();
        test_diff_id();
        _cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", base);
        if (system(cmd) != 0)
                tap_ok(0, "rm -rf %s", base);
        return tap_done();
}
