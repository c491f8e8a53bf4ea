/* TEMP stand-in (dropped at merge): a plain libarchive extract (cwd-based,
 * single-threaded callers only) that turns OCI whiteouts into overlayfs ones. */
#include "image/layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

static int whiteout(struct archive_entry *e, ab_layer_stats *st)
{
        const char *p = archive_entry_pathname(e);
        const char *slash = strrchr(p, '/');
        const char *base = slash ? slash + 1 : p;
        if (strncmp(base, ".wh.", 4))
                return 0;
        _cleanup_free_ char *dir = slash ? xstrndup(p, (size_t)(slash - p)) : xstrdup(".");
        st->whiteouts++;
        if (!strcmp(base, ".wh..wh..opq"))
                return setxattr(dir, "trusted.overlay.opaque", "y", 1, 0) < 0 ? -errno : 1;
        _cleanup_free_ char *t = xasprintf("%s/%s", dir, base + 4);
        return mknod(t, S_IFCHR | 0, makedev(0, 0)) < 0 ? -errno : 1;
}

int ab_layer_unpack(int fd, int dest_dirfd, const ab_layer_opts *o, ab_layer_stats *st,
                    ab_err **err)
{
        ab_layer_stats dummy;
        st = st ? st : &dummy;
        memset(st, 0, sizeof(*st));
        _cleanup_close_ int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (cwd < 0 || fchdir(dest_dirfd) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "enter the layer directory");
        struct archive *a = archive_read_new(), *w = archive_write_disk_new();
        archive_read_support_format_tar(a);
        archive_read_support_filter_gzip(a);
        archive_read_support_filter_zstd(a);
        archive_write_disk_set_options(
            w, ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                   ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_PERM |
                   ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_TIME);
        int rc = 0;
        if (archive_read_open_fd(a, fd, 64 * 1024) != ARCHIVE_OK) {
                rc = ab_err_set(err, AB_E_INVALID, 0, "layer: %s", archive_error_string(a));
                goto out;
        }
        struct archive_entry *e;
        int r;
        while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
                st->entries++;
                int wr = whiteout(e, st);
                if (wr < 0) {
                        rc = ab_err_set(err, AB_E_INTERNAL, -wr, "layer whiteout %s",
                                        archive_entry_pathname(e));
                        goto out;
                }
                if (wr)
                        continue;
                if (archive_write_header(w, e) != ARCHIVE_OK) {
                        rc = ab_err_set(err, AB_E_INVALID, 0, "layer entry %s: %s",
                                        archive_entry_pathname(e), archive_error_string(w));
                        goto out;
                }
                const void *buf;
                size_t len;
                la_int64_t off;
                while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
                        st->bytes += len;
                        archive_write_data_block(w, buf, len, off);
                }
                if (r != ARCHIVE_EOF) {
                        rc = ab_err_set(err, AB_E_INVALID, 0, "layer: %s", archive_error_string(a));
                        goto out;
                }
                archive_write_finish_entry(w);
        }
        if (r != ARCHIVE_EOF)
                rc = ab_err_set(err, AB_E_INVALID, 0, "layer: %s", archive_error_string(a));
out:
        archive_write_free(w);
        archive_read_free(a);
        (void)!fchdir(cwd);
        return rc;
}
