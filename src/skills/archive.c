/* Safe walking of uploaded zip/tar archives: names checked and normalised,
 * links and special files refused, sizes counted as they are decompressed. */
#include "skills/archive.h"

#include <archive.h>
#include <inttypes.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/stat.h>

#define NAME_MAX_SHOWN 200
#define PATH_MAX_LEN   4096
#define COMP_MAX_LEN   255

struct ab_archive_reader {
        struct archive *a;
        const ab_archive_limits *lim;
        ab_archive_stats st;
        const char *shown; /* the entry's name as the archive gives it, for messages */
        uint64_t declared; /* the entry's declared size, or UINT64_MAX */
};

/* The entry's name for a message: cut, control characters replaced. */
static char *shown_name(const char *raw)
{
        if (!raw)
                return xstrdup("(unnamed)");
        size_t n = strlen(raw);
        char *s = xstrndup(raw, n > NAME_MAX_SHOWN ? NAME_MAX_SHOWN : n);
        for (char *c = s; *c; c++)
                if ((unsigned char)*c < 0x20 || *c == 0x7f)
                        *c = '?';
        if (n > NAME_MAX_SHOWN) {
                char *t = xasprintf("%s...", s);
                free(s);
                s = t;
        }
        return s;
}

/* Normalises raw ("./a//b/" -> "a/b"). Returns 0 with *out NULL for a name
 * that is only the archive's root ("./"), or a reason the name is refused. */
static const char *clean_path(const char *raw, char **out)
{
        *out = NULL;
        if (!raw || !*raw)
                return "has no name";
        if (raw[0] == '/')
                return "is an absolute path";
        if (strlen(raw) > PATH_MAX_LEN)
                return "has a path longer than 4096 bytes";
        char *res = xmalloc(strlen(raw) + 1);
        size_t o = 0;
        for (const char *p = raw; *p;) {
                const char *end = strchrnul(p, '/');
                size_t len = (size_t)(end - p);
                if (len == 2 && p[0] == '.' && p[1] == '.') {
                        free(res);
                        return "has a \"..\" component";
                }
                if (len > COMP_MAX_LEN) {
                        free(res);
                        return "has a path component longer than 255 bytes";
                }
                if (len && !(len == 1 && p[0] == '.')) {
                        if (o)
                                res[o++] = '/';
                        memcpy(res + o, p, len);
                        o += len;
                }
                p = *end ? end + 1 : end;
        }
        res[o] = 0;
        if (!o)
                free(res);
        else
                *out = res;
        return NULL;
}

int ab_archive_data(ab_archive_reader *rd, int out_fd, ab_err **err)
{
        char buf[64 * 1024];
        uint64_t got = 0;
        for (;;) {
                la_ssize_t n = archive_read_data(rd->a, buf, sizeof(buf));
                if (n == 0)
                        break;
                if (n < 0)
                        return ab_err_set(err, AB_E_INVALID, 0, "archive entry \"%s\": %s",
                                          rd->shown, archive_error_string(rd->a));
                got += (uint64_t)n;
                rd->st.bytes += (uint64_t)n;
                if (got > rd->lim->max_entry_bytes)
                        return ab_err_set(err, AB_E_LIMIT, 0,
                                          "archive entry \"%s\" is larger than the limit of "
                                          "%" PRIu64 " bytes",
                                          rd->shown, rd->lim->max_entry_bytes);
                if (rd->st.bytes > rd->lim->max_total_bytes)
                        return ab_err_set(err, AB_E_LIMIT, 0,
                                          "the archive's files add up to more than the limit of "
                                          "%" PRIu64 " bytes",
                                          rd->lim->max_total_bytes);
                if (out_fd >= 0) {
                        int r = ab_write_all(out_fd, buf, (size_t)n);
                        if (r < 0)
                                return ab_err_set(err, r == -ENOSPC ? AB_E_LIMIT : AB_E_INTERNAL,
                                                  -r, "archive entry \"%s\": write", rd->shown);
                }
        }
        return 0;
}

/* Why an entry of this kind is refused, or NULL for a file or a directory. */
static const char *bad_type(struct archive_entry *e, bool *is_dir)
{
        *is_dir = false;
        if (archive_entry_hardlink(e))
                return "is a hard link (links are not allowed)";
        switch (archive_entry_filetype(e)) {
        case AE_IFREG:
                return NULL;
        case AE_IFDIR:
                *is_dir = true;
                return NULL;
        case AE_IFLNK:
                return "is a symbolic link (links are not allowed)";
        case AE_IFCHR:
        case AE_IFBLK:
                return "is a device file";
        case AE_IFIFO:
                return "is a fifo";
        case AE_IFSOCK:
                return "is a socket";
        default:
                return "is not a regular file or a directory";
        }
}

static struct archive *open_reader(int fd, ab_archive_format fmt, ab_err **err)
{
        if (lseek(fd, 0, SEEK_SET) != 0) {
                ab_err_set(err, AB_E_INTERNAL, errno, "rewind the archive");
                return NULL;
        }
        struct archive *a = archive_read_new();
        if (fmt != AB_ARCHIVE_TAR)
                archive_read_support_format_zip(a);
        if (fmt != AB_ARCHIVE_ZIP) {
                archive_read_support_format_tar(a);
                archive_read_support_filter_gzip(a);
        }
        if (archive_read_open_fd(a, fd, 64 * 1024) != ARCHIVE_OK) {
                const char *what = fmt == AB_ARCHIVE_ZIP   ? "a zip"
                                   : fmt == AB_ARCHIVE_TAR ? "a tar"
                                                           : "a zip or tar";
                ab_err_set(err, AB_E_INVALID, 0, "the body is not %s archive: %s", what,
                           archive_error_string(a));
                archive_read_free(a);
                return NULL;
        }
        return a;
}

int ab_archive_walk(int fd, ab_archive_format fmt, const ab_archive_limits *lim, ab_archive_fn fn,
                    void *ud, ab_archive_stats *st, ab_err **err)
{
        struct archive *a = open_reader(fd, fmt, err);
        if (!a)
                return -1;
        ab_archive_reader rd = {.a = a, .lim = lim};
        uint64_t entries = 0;
        int rc = 0;
        for (;;) {
                struct archive_entry *e;
                int r = archive_read_next_header(a, &e);
                if (r == ARCHIVE_EOF)
                        break;
                if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
                        rc = ab_err_set(err, AB_E_INVALID, 0,
                                        "bad archive after %" PRIu64 " entries: %s", entries,
                                        archive_error_string(a));
                        break;
                }
                if (++entries > lim->max_entries) {
                        rc = ab_err_set(err, AB_E_LIMIT, 0,
                                        "the archive has more than %" PRIu64 " entries",
                                        lim->max_entries);
                        break;
                }
                const char *raw = archive_entry_pathname(e);
                if (!raw)
                        raw = archive_entry_pathname_utf8(e);
                _cleanup_free_ char *shown = shown_name(raw);
                _cleanup_free_ char *path = NULL;
                bool is_dir;
                const char *why = clean_path(raw, &path);
                if (!why)
                        why = bad_type(e, &is_dir);
                if (why) {
                        rc =
                            ab_err_set(err, AB_E_INVALID, 0, "archive entry \"%s\" %s", shown, why);
                        break;
                }
                rd.shown = shown;
                if (!is_dir && archive_entry_size_is_set(e) && archive_entry_size(e) >= 0 &&
                    (uint64_t)archive_entry_size(e) > lim->max_entry_bytes) {
                        rc = ab_err_set(err, AB_E_LIMIT, 0,
                                        "archive entry \"%s\" is larger than the limit of "
                                        "%" PRIu64 " bytes",
                                        shown, lim->max_entry_bytes);
                        break;
                }
                if (!path) /* the archive's root, "./" */
                        continue;
                uint32_t mode = (uint32_t)archive_entry_perm(e) & 0777;
                if (is_dir)
                        rd.st.dirs++;
                else
                        rd.st.files++;
                if (fn)
                        rc = fn(ud, path, is_dir, mode, &rd, err);
                else if (!is_dir)
                        rc = ab_archive_data(&rd, -1, err);
                if (rc < 0)
                        break;
        }
        archive_read_free(a);
        if (st)
                *st = rd.st;
        return rc < 0 ? -1 : 0;
}

int ab_archive_format_parse(const char *s)
{
        if (!s || !strcmp(s, "auto"))
                return AB_ARCHIVE_ANY;
        if (!strcmp(s, "zip"))
                return AB_ARCHIVE_ZIP;
        if (!strcmp(s, "tar"))
                return AB_ARCHIVE_TAR;
        return -1;
}

ab_archive_format ab_archive_format_of_type(const char *ct)
{
        if (!ct)
                return AB_ARCHIVE_ANY;
        size_t n = strcspn(ct, "; ");
        static const char *const zips[] = {"application/zip", "application/x-zip",
                                           "application/x-zip-compressed"};
        static const char *const tars[] = {"application/x-tar",  "application/tar",
                                           "application/gzip",   "application/x-gzip",
                                           "application/x-gtar", "application/x-compressed-tar"};
        for (size_t i = 0; i < AB_ARRAY_LEN(zips); i++)
                if (strlen(zips[i]) == n && !strncasecmp(ct, zips[i], n))
                        return AB_ARCHIVE_ZIP;
        for (size_t i = 0; i < AB_ARRAY_LEN(tars); i++)
                if (strlen(tars[i]) == n && !strncasecmp(ct, tars[i], n))
                        return AB_ARCHIVE_TAR;
        return AB_ARCHIVE_ANY;
}
