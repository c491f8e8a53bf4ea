/* Work on the files of a box's disk (boxfs.h): uid shifts, tree copies,
 * a box's writes as an OCI layer. */
#include "native/boxfs.h"
#include "base/buf.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

/* Deepest directory nesting walked: the frames are small, and the setup
 * process that shifts and seeds runs on a 512 KiB stack. */
#define MAX_DEPTH 512
#define IO_CHUNK  (64 * 1024)

static int open_dir_at(int dfd, const char *name)
{
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* A directory stream on a dup of fd (the caller keeps fd). */
static DIR *dir_of(int fd)
{
        int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (d < 0)
                return NULL;
        DIR *dp = fdopendir(d);
        if (!dp)
                close(d);
        return dp;
}

static bool dots(const char *n)
{
        return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]));
}

/* ---- uid shift ---------------------------------------------------------- */

static uint32_t shift_one(uint32_t id, uid_t from, uid_t to, bool *changed)
{
        if (id >= from && id - from < AB_BOXFS_RANGE) {
                *changed = true;
                return to + (id - from);
        }
        return id;
}

/* Shifts the owner of dfd/name (name "" = dfd itself). */
static int shift_entry(int dfd, const char *name, const struct stat *st, uid_t from, uid_t to)
{
        bool changed = false;
        uid_t u = shift_one(st->st_uid, from, to, &changed);
        gid_t g = shift_one(st->st_gid, from, to, &changed);
        if (!changed)
                return 0;
        int fl = *name ? AT_SYMLINK_NOFOLLOW : AT_EMPTY_PATH;
        if (fchownat(dfd, name, u, g, fl) < 0)
                return -errno;
        /* a chown clears setuid and setgid of a file, even root's */
        if (S_ISREG(st->st_mode) && (st->st_mode & (S_ISUID | S_ISGID))) {
                if (*name ? fchmodat(dfd, name, st->st_mode & 07777, 0) < 0
                          : fchmod(dfd, st->st_mode & 07777) < 0)
                        return -errno;
        }
        return 0;
}

static int shift_dir(int fd, dev_t dev, uid_t from, uid_t to, int depth)
{
        if (depth > MAX_DEPTH)
                return -ELOOP;
        DIR *d = dir_of(fd);
        if (!d)
                return -errno;
        int r = 0;
        struct dirent *e;
        while (r == 0 && (e = readdir(d))) {
                if (dots(e->d_name))
                        continue;
                struct stat st;
                if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        r = errno == ENOENT ? 0 : -errno;
                        continue;
                }
                if (st.st_dev != dev)
                        continue; /* a mount point: not this disk */
                r = shift_entry(fd, e->d_name, &st, from, to);
                if (r == 0 && S_ISDIR(st.st_mode)) {
                        int c = open_dir_at(fd, e->d_name);
                        if (c < 0) {
                                r = c;
                                break;
                        }
                        r = shift_dir(c, dev, from, to, depth + 1);
                        close(c);
                }
        }
        closedir(d);
        return r;
}

int ab_boxfs_shift(int dirfd, uid_t from, uid_t to)
{
        if (from == to)
                return 0;
        struct stat st;
        if (fstat(dirfd, &st) < 0)
                return -errno;
        int r = shift_entry(dirfd, "", &st, from, to);
        return r < 0 ? r : shift_dir(dirfd, st.st_dev, from, to, 0);
}

/* ---- hard links met in a walk ------------------------------------------- */

typedef struct links {
        dev_t *dev;
        ino_t *ino;
        char **path;
        size_t n, cap;
} links;

static const char *links_find(const links *l, const struct stat *st)
{
        for (size_t i = 0; i < l->n; i++)
                if (l->ino[i] == st->st_ino && l->dev[i] == st->st_dev)
                        return l->path[i];
        return NULL;
}

static void links_add(links *l, const struct stat *st, const char *path)
{
        if (l->n == l->cap) {
                l->cap = l->cap ? xmul(l->cap, 2) : 16;
                l->dev = xrealloc(l->dev, xmul(l->cap, sizeof(*l->dev)));
                l->ino = xrealloc(l->ino, xmul(l->cap, sizeof(*l->ino)));
                l->path = xrealloc(l->path, xmul(l->cap, sizeof(*l->path)));
        }
        l->dev[l->n] = st->st_dev;
        l->ino[l->n] = st->st_ino;
        l->path[l->n++] = xstrdup(path);
}

static void links_free(links *l)
{
        for (size_t i = 0; i < l->n; i++)
                free(l->path[i]);
        free(l->dev);
        free(l->ino);
        free(l->path);
}

static char *join(const char *dir, const char *name)
{
        return *dir ? xasprintf("%s/%s", dir, name) : xstrdup(name);
}

/* ---- tree copy ---------------------------------------------------------- */

static int copy_bytes(int in, int out)
{
        for (;;) {
                ssize_t n = copy_file_range(in, NULL, out, NULL, 1u << 30, 0);
                if (n == 0)
                        return 0;
                if (n > 0)
                        continue;
                if (errno == EINTR)
                        continue;
                if (errno != EXDEV && errno != EINVAL && errno != EOPNOTSUPP && errno != ENOSYS)
                        return -errno;
                break; /* not between these filesystems: copy by hand */
        }
        char buf[IO_CHUNK];
        for (;;) {
                ssize_t n = read(in, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? -errno : 0;
                int r = ab_write_all(out, buf, (size_t)n);
                if (r < 0)
                        return r;
        }
}

static int copy_attrs(int dfd, const char *name, const struct stat *st)
{
        if (fchownat(dfd, name, st->st_uid, st->st_gid, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (!S_ISLNK(st->st_mode) && fchmodat(dfd, name, st->st_mode & 07777, 0) < 0)
                return -errno;
        struct timespec ts[2] = {st->st_atim, st->st_mtim};
        if (utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        return 0;
}

typedef struct copy_ctx {
        int dst_root;
        dev_t dev;
        links links;
} copy_ctx;

static int copy_file(copy_ctx *c, int src, int dst, const char *name, const struct stat *st,
                     const char *rel)
{
        if (st->st_nlink > 1) {
                const char *first = links_find(&c->links, st);
                if (first)
                        return linkat(c->dst_root, first, dst, name, 0) < 0 ? -errno : 0;
                links_add(&c->links, st, rel);
        }
        _cleanup_close_ int in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0)
                return -errno;
        _cleanup_close_ int out =
            openat(dst, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0)
                return -errno;
        return copy_bytes(in, out);
}

static int copy_dir(copy_ctx *c, int src, int dst, const char *rel, int depth)
{
        if (depth > MAX_DEPTH)
                return -ELOOP;
        DIR *d = dir_of(src);
        if (!d)
                return -errno;
        int r = 0;
        struct dirent *e;
        while (r == 0 && (e = readdir(d))) {
                if (dots(e->d_name))
                        continue;
                const char *n = e->d_name;
                struct stat st;
                if (fstatat(src, n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        r = errno == ENOENT ? 0 : -errno;
                        continue;
                }
                if (st.st_dev != c->dev)
                        continue;
                _cleanup_free_ char *sub = join(rel, n);
                if (S_ISDIR(st.st_mode)) {
                        if (mkdirat(dst, n, 0700) < 0) {
                                r = -errno;
                                break;
                        }
                        int s = open_dir_at(src, n), t = s < 0 ? -1 : open_dir_at(dst, n);
                        if (s < 0 || t < 0)
                                r = s < 0 ? s : t;
                        else
                                r = copy_dir(c, s, t, sub, depth + 1);
                        if (s >= 0)
                                close(s);
                        if (t >= 0)
                                close(t);
                } else if (S_ISREG(st.st_mode)) {
                        r = copy_file(c, src, dst, n, &st, sub);
                        if (r == 0 && st.st_nlink > 1 && strcmp(links_find(&c->links, &st), sub))
                                continue; /* a link to a file copied before: attributes set */
                } else if (S_ISLNK(st.st_mode)) {
                        char target[PATH_MAX];
                        ssize_t len = readlinkat(src, n, target, sizeof(target) - 1);
                        if (len < 0) {
                                r = -errno;
                                break;
                        }
                        target[len] = 0;
                        if (symlinkat(target, dst, n) < 0)
                                r = -errno;
                } else {
                        continue; /* devices, fifos, sockets */
                }
                if (r == 0)
                        r = copy_attrs(dst, n, &st);
        }
        closedir(d);
        return r;
}

int ab_boxfs_copy_tree(int src, int dst)
{
        struct stat st;
        if (fstat(src, &st) < 0)
                return -errno;
        copy_ctx c = {.dst_root = dst, .dev = st.st_dev};
        int r = copy_dir(&c, src, dst, "", 0);
        links_free(&c.links);
        return r;
}

int ab_boxfs_rm_tree(int dfd, const char *name)
{
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
        int fd = open_dir_at(dfd, name);
        if (fd < 0)
                return fd;
        DIR *d = dir_of(fd);
        int r = d ? 0 : -errno;
        struct dirent *e;
        while (d && (e = readdir(d))) {
                if (dots(e->d_name))
                        continue;
                int q = ab_boxfs_rm_tree(fd, e->d_name);
                if (q < 0 && !r)
                        r = q;
        }
        if (d)
                closedir(d);
        close(fd);
        if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && !r)
                r = -errno;
        return r;
}

/* ---- a box's writes as an OCI layer ------------------------------------- */

typedef struct export_ctx {
        struct archive *a;
        struct archive_entry *e;
        uid_t base;
        dev_t dev;
        links links;
        ab_err **err;
} export_ctx;

static int64_t box_side(uint32_t id, uid_t base)
{
        return id >= base && id - base < AB_BOXFS_RANGE ? (int64_t)(id - base) : 65534;
}

static int ar_fail(export_ctx *x, const char *path)
{
        return ab_err_set(x->err, AB_E_INTERNAL, archive_errno(x->a), "layer entry %s: %s", path,
                          archive_error_string(x->a) ? archive_error_string(x->a) : "write failed");
}

/* A header for path with st's owner, mode and time (no data yet). */
static void head(export_ctx *x, const char *path, const struct stat *st, mode_t type)
{
        archive_entry_clear(x->e);
        archive_entry_set_pathname(x->e, path);
        archive_entry_set_filetype(x->e, type);
        archive_entry_set_perm(x->e, st->st_mode & 07777);
        archive_entry_set_uid(x->e, box_side(st->st_uid, x->base));
        archive_entry_set_gid(x->e, box_side(st->st_gid, x->base));
        archive_entry_set_mtime(x->e, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
}

/* An empty regular file: a whiteout or an opaque marker. */
static int marker(export_ctx *x, const char *path)
{
        struct stat st = {.st_mode = 0644};
        head(x, path, &st, AE_IFREG);
        archive_entry_set_size(x->e, 0);
        return archive_write_header(x->a, x->e) != ARCHIVE_OK ? ar_fail(x, path) : 0;
}

static int put_file(export_ctx *x, int dfd, const char *name, const char *path,
                    const struct stat *st)
{
        head(x, path, st, AE_IFREG);
        if (st->st_nlink > 1) {
                const char *first = links_find(&x->links, st);
                if (first) {
                        archive_entry_set_hardlink(x->e, first);
                        archive_entry_set_size(x->e, 0);
                        return archive_write_header(x->a, x->e) != ARCHIVE_OK ? ar_fail(x, path)
                                                                              : 0;
                }
                links_add(&x->links, st, path);
        }
        _cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return ab_err_set(x->err, AB_E_INTERNAL, errno, "open %s", path);
        archive_entry_set_size(x->e, st->st_size);
        if (archive_write_header(x->a, x->e) != ARCHIVE_OK)
                return ar_fail(x, path);
        char buf[IO_CHUNK];
        int64_t left = st->st_size;
        while (left > 0) {
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return ab_err_set(x->err, AB_E_INTERNAL, n < 0 ? errno : EIO, "read %s",
                                          path);
                if (n > left)
                        n = (ssize_t)left; /* grew meanwhile: the header's size rules */
                if (archive_write_data(x->a, buf, (size_t)n) != n)
                        return ar_fail(x, path);
                left -= n;
        }
        return 0;
}

static bool is_opaque(int dfd, const char *name)
{
        _cleanup_close_ int fd = open_dir_at(dfd, name);
        char v[4];
        ssize_t n = fd < 0 ? -1 : fgetxattr(fd, "trusted.overlay.opaque", v, sizeof(v));
        return n == 1 && v[0] == 'y';
}

static int export_dir(export_ctx *x, int fd, const char *rel, bool upper, int depth)
{
        if (depth > MAX_DEPTH)
                return ab_err_set(x->err, AB_E_LIMIT, ELOOP, "%s: nested too deep", rel);
        DIR *d = dir_of(fd);
        if (!d)
                return ab_err_set(x->err, AB_E_INTERNAL, errno, "read %s", *rel ? rel : "/");
        int r = 0;
        struct dirent *e;
        while (r == 0 && (e = readdir(d))) {
                const char *n = e->d_name;
                if (dots(n))
                        continue;
                struct stat st;
                if (fstatat(fd, n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno != ENOENT)
                                r = ab_err_set(x->err, AB_E_INTERNAL, errno, "stat %s/%s", rel, n);
                        continue;
                }
                if (st.st_dev != x->dev)
                        continue;
                _cleanup_free_ char *path = join(rel, n);
                if (upper && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
                        _cleanup_free_ char *wh =
                            *rel ? xasprintf("%s/.wh.%s", rel, n) : xasprintf(".wh.%s", n);
                        r = marker(x, wh);
                } else if (S_ISDIR(st.st_mode)) {
                        head(x, path, &st, AE_IFDIR);
                        if (archive_write_header(x->a, x->e) != ARCHIVE_OK) {
                                r = ar_fail(x, path);
                                break;
                        }
                        if (upper && is_opaque(fd, n)) {
                                _cleanup_free_ char *opq = xasprintf("%s/.wh..wh..opq", path);
                                r = marker(x, opq);
                        }
                        int c = r == 0 ? open_dir_at(fd, n) : -1;
                        if (r == 0 && c < 0)
                                r = ab_err_set(x->err, AB_E_INTERNAL, -c, "open %s", path);
                        if (c >= 0) {
                                r = export_dir(x, c, path, upper, depth + 1);
                                close(c);
                        }
                } else if (S_ISREG(st.st_mode)) {
                        r = put_file(x, fd, n, path, &st);
                } else if (S_ISLNK(st.st_mode)) {
                        char target[PATH_MAX];
                        ssize_t len = readlinkat(fd, n, target, sizeof(target) - 1);
                        if (len < 0) {
                                r = ab_err_set(x->err, AB_E_INTERNAL, errno, "readlink %s", path);
                                break;
                        }
                        target[len] = 0;
                        head(x, path, &st, AE_IFLNK);
                        archive_entry_set_symlink(x->e, target);
                        if (archive_write_header(x->a, x->e) != ARCHIVE_OK)
                                r = ar_fail(x, path);
                }
                /* device nodes, fifos, sockets: a layer has none (layer.h) */
        }
        closedir(d);
        return r;
}

int ab_boxfs_export_layer(int upper, int workspace, uid_t base, int out_fd, ab_err **err)
{
        struct stat st;
        if (fstat(upper, &st) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "stat the box's upper layer");
        export_ctx x = {.a = archive_write_new(),
                        .e = archive_entry_new(),
                        .base = base,
                        .dev = st.st_dev,
                        .err = err};
        if (!x.a || !x.e)
                abort();
        int r = 0;
        if (archive_write_set_format_pax_restricted(x.a) != ARCHIVE_OK ||
            archive_write_set_bytes_in_last_block(x.a, 1) != ARCHIVE_OK ||
            archive_write_open_fd(x.a, out_fd) != ARCHIVE_OK)
                r = ar_fail(&x, "(start)");
        if (r == 0)
                r = export_dir(&x, upper, "", true, 0);
        if (r == 0 && workspace >= 0) {
                struct stat ws;
                if (fstat(workspace, &ws) < 0) {
                        r = ab_err_set(err, AB_E_INTERNAL, errno, "stat the box's workspace");
                } else {
                        x.dev = ws.st_dev;
                        head(&x, "workspace", &ws, AE_IFDIR);
                        r = archive_write_header(x.a, x.e) != ARCHIVE_OK
                                ? ar_fail(&x, "workspace")
                                : export_dir(&x, workspace, "workspace", false, 1);
                }
        }
        if (archive_write_close(x.a) != ARCHIVE_OK && r == 0)
                r = ar_fail(&x, "(end)");
        archive_write_free(x.a);
        archive_entry_free(x.e);
        links_free(&x.links);
        return r < 0 ? -1 : 0;
}
