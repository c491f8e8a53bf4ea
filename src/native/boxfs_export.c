/* A box's writes as an OCI layer (boxfs.h): its own file so that a binary
 * that never exports a layer (the light `agentbox`) links no libarchive. */
#include "native/boxfs.h"
#include "native/boxfs_int.h"
#include "base/buf.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

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
                const char *first = boxfs_links_find(&x->links, st);
                if (first) {
                        archive_entry_set_hardlink(x->e, first);
                        archive_entry_set_size(x->e, 0);
                        return archive_write_header(x->a, x->e) != ARCHIVE_OK ? ar_fail(x, path)
                                                                              : 0;
                }
                boxfs_links_add(&x->links, st, path);
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
        _cleanup_close_ int fd = boxfs_open_dir_at(dfd, name);
        char v[4];
        ssize_t n = fd < 0 ? -1 : fgetxattr(fd, "trusted.overlay.opaque", v, sizeof(v));
        return n == 1 && v[0] == 'y';
}

static int export_dir(export_ctx *x, int fd, const char *rel, bool upper, int depth)
{
        if (depth > MAX_DEPTH)
                return ab_err_set(x->err, AB_E_LIMIT, ELOOP, "%s: nested too deep", rel);
        DIR *d = boxfs_dir_of(fd);
        if (!d)
                return ab_err_set(x->err, AB_E_INTERNAL, errno, "read %s", *rel ? rel : "/");
        int r = 0;
        struct dirent *e;
        while (r == 0 && (e = readdir(d))) {
                const char *n = e->d_name;
                if (boxfs_dots(n))
                        continue;
                struct stat st;
                if (fstatat(fd, n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno != ENOENT)
                                r = ab_err_set(x->err, AB_E_INTERNAL, errno, "stat %s/%s", rel, n);
                        continue;
                }
                if (st.st_dev != x->dev)
                        continue;
                _cleanup_free_ char *path = boxfs_join(rel, n);
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
                        int c = r == 0 ? boxfs_open_dir_at(fd, n) : -1;
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
        boxfs_links_free(&x.links);
        return r < 0 ? -1 : 0;
}
