/* Work on the files of a box's disk (boxfs.h): uid shifts and tree copies
 * (a box's writes as an OCI layer are in boxfs_export.c). */
#include "native/boxfs.h"
#include "native/boxfs_int.h"
#include "base/buf.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

int boxfs_open_dir_at(int dfd, const char *name)
{
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

DIR *boxfs_dir_of(int fd)
{
        int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (d < 0)
                return NULL;
        DIR *dp = fdopendir(d);
        if (!dp)
                close(d);
        return dp;
}

bool boxfs_dots(const char *n)
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
        DIR *d = boxfs_dir_of(fd);
        if (!d)
                return -errno;
        int r = 0;
        struct dirent *e;
        while (r == 0 && (e = readdir(d))) {
                if (boxfs_dots(e->d_name))
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
                        int c = boxfs_open_dir_at(fd, e->d_name);
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

const char *boxfs_links_find(const links *l, const struct stat *st)
{
        for (size_t i = 0; i < l->n; i++)
                if (l->ino[i] == st->st_ino && l->dev[i] == st->st_dev)
                        return l->path[i];
        return NULL;
}

void boxfs_links_add(links *l, const struct stat *st, const char *path)
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

void boxfs_links_free(links *l)
{
        for (size_t i = 0; i < l->n; i++)
                free(l->path[i]);
        free(l->dev);
        free(l->ino);
        free(l->path);
}

char *boxfs_join(const char *dir, const char *name)
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
                const char *first = boxfs_links_find(&c->links, st);
                if (first)
                        return linkat(c->dst_root, first, dst, name, 0) < 0 ? -errno : 0;
                boxfs_links_add(&c->links, st, rel);
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
        DIR *d = boxfs_dir_of(src);
        if (!d)
                return -errno;
        int r = 0;
        struct dirent *e;
        while (r == 0 && (e = readdir(d))) {
                if (boxfs_dots(e->d_name))
                        continue;
                const char *n = e->d_name;
                struct stat st;
                if (fstatat(src, n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        r = errno == ENOENT ? 0 : -errno;
                        continue;
                }
                if (st.st_dev != c->dev)
                        continue;
                _cleanup_free_ char *sub = boxfs_join(rel, n);
                if (S_ISDIR(st.st_mode)) {
                        if (mkdirat(dst, n, 0700) < 0) {
                                r = -errno;
                                break;
                        }
                        int s = boxfs_open_dir_at(src, n),
                            t = s < 0 ? -1 : boxfs_open_dir_at(dst, n);
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
                        if (r == 0 && st.st_nlink > 1 &&
                            strcmp(boxfs_links_find(&c->links, &st), sub))
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
        boxfs_links_free(&c.links);
        return r;
}

int ab_boxfs_rm_tree(int dfd, const char *name)
{
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
        int fd = boxfs_open_dir_at(dfd, name);
        if (fd < 0)
                return fd;
        DIR *d = boxfs_dir_of(fd);
        int r = d ? 0 : -errno;
        struct dirent *e;
        while (d && (e = readdir(d))) {
                if (boxfs_dots(e->d_name))
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
