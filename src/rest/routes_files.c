/* Files of a box over HTTP: GET (bytes, a listing, or a zip of a tree), PUT,
 * DELETE. Every operation runs inside the box through its init, so paths are
 * resolved in the box's own mount namespace: no host path is ever touched.
 * Downloads are streamed by a producer thread through a pipe. */
#include "rest/rest.h"
#include "rest/upload.h"
#include "kit/files.h"
#include "kit/status.h"
#include "base/log.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>

#define ZIP_MAX_DEPTH 64

typedef struct file_job {
        ab_server *srv;
        ab_use use;
        char *path;
        abc_dirent *ents; /* zip: the tree */
        size_t n;
        abc_stat st;             /* zip of a single file */
        uint64_t offset, length; /* a plain download's range (length 0: to the end) */
        int fd;                  /* write end of the pipe */
        struct archive *ar;
} file_job;

static void file_job_free(file_job *j)
{
        ab_manager_use_end(j->srv->mgr, &j->use);
        free(j->path);
        abc_dirents_free(j->ents, j->n);
        abc_stat_clear(&j->st);
        if (j->fd >= 0)
                close(j->fd);
        free(j);
}

/* The path as shown to clients: absolute, without trailing slashes. */
static char *display_path(const char *p)
{
        char *s = p[0] == '/' ? xstrdup(p) : xasprintf("/workspace/%s", p);
        size_t n = strlen(s);
        while (n > 1 && s[n - 1] == '/')
                s[--n] = 0;
        return s;
}

static json_t *entry_json(const char *base, const char *rel, const abc_stat *st)
{
        const char *name = kit_base_name(rel);
        _cleanup_free_ char *full =
            !strcmp(base, "/") ? xasprintf("/%s", rel) : xasprintf("%s/%s", base, rel);
        json_t *j =
            json_pack("{s:o,s:o,s:s,s:I,s:I,s:I}", "name", json_bytes(name, strlen(name)), "path",
                      json_bytes(full, strlen(full)), "type",
                      kit_ftype_name(&kit_ftypes_rest, st->type), "size", (json_int_t)st->size,
                      "mtime", (json_int_t)st->mtime, "mode", (json_int_t)st->mode);
        if (st->link)
                json_object_set_new(j, "link", json_bytes(st->link, strlen(st->link)));
        return j;
}

static const char *need_path(ab_req *r, enum MHD_Result *ret)
{
        const char *p = req_query(r, "path");
        if (!p || !*p) {
                *ret = resp_error(r, 400, "invalid_argument",
                                  "path: required (a path inside the box)");
                return NULL;
        }
        if (strlen(p) > 4096) {
                *ret = resp_error(r, 400, "invalid_argument", "path: longer than 4096 bytes");
                return NULL;
        }
        return p;
}

/* ---- download --------------------------------------------------------- */

static la_ssize_t zip_write(struct archive *a, void *ud, const void *buf, size_t len)
{
        file_job *j = ud;
        if (ab_write_all(j->fd, buf, len) < 0) {
                archive_set_error(a, EPIPE, "client went away");
                return -1;
        }
        return (la_ssize_t)len;
}

static int zip_data(void *ud, int stream, const void *buf, size_t len)
{
        file_job *j = ud;
        return archive_write_data(j->ar, buf, len) < 0 ? -1 : 0;
}

/* Adds one entry, the file rel beneath dir in the box, stored under rel
 * escaped (ab_name_escape: no control characters, escape sequences or
 * backslashes reach whoever lists or unpacks the zip); returns -1 when the
 * archive (the client) is broken. */
static int zip_add(file_job *j, const char *dir, const char *rel, const abc_stat *st)
{
        struct archive_entry *en = archive_entry_new();
        _cleanup_free_ char *name = ab_name_escape(rel, NULL);
        archive_entry_set_pathname(en, name);
        archive_entry_set_mtime(en, st->mtime, 0);
        archive_entry_set_perm(en, st->mode & 07777);
        int rc = 0;
        switch (st->type) {
        case ABC_DIR:
                archive_entry_set_filetype(en, AE_IFDIR);
                rc = archive_write_header(j->ar, en) == ARCHIVE_OK ? 0 : -1;
                break;
        case ABC_SYMLINK:
                /* stored as a link, never followed */
                archive_entry_set_filetype(en, AE_IFLNK);
                archive_entry_set_symlink(en, st->link ? st->link : "");
                rc = archive_write_header(j->ar, en) == ARCHIVE_OK ? 0 : -1;
                break;
        case ABC_FILE: {
                archive_entry_set_filetype(en, AE_IFREG);
                archive_entry_set_size(en, (la_int64_t)st->size);
                if (archive_write_header(j->ar, en) != ARCHIVE_OK) {
                        rc = -1;
                        break;
                }
                ab_err *e = NULL;
                /* at most the listed size: a file that grows meanwhile (a log)
                 * cannot keep the zip from ending */
                /* One swapped for a symlink since it was listed is not
                 * read through it (its entry is empty). */
                if (st->size > 0 && ab_manager_file_read_beneath(j->srv->mgr, &j->use, dir, rel,
                                                                 st->size, zip_data, j, &e) < 0)
                        ab_log(AB_LOG_WARN, "zip: cannot read a file", "box", j->use.rec.id, "dir",
                               dir, "path", name, "error", e->msg, NULL);
                ab_err_free(&e);
                rc = archive_write_finish_entry(j->ar) == ARCHIVE_FATAL ? -1 : 0;
                break;
        }
        default:
                break; /* sockets, fifos, devices: skipped */
        }
        archive_entry_free(en);
        return rc;
}

static void *zip_main(void *arg)
{
        file_job *j = arg;
        j->ar = archive_write_new();
        archive_write_set_format_zip(j->ar);
        archive_write_set_bytes_in_last_block(j->ar, 1);
        if (archive_write_open2(j->ar, j, NULL, zip_write, NULL, NULL) != ARCHIVE_OK) {
                ab_log(AB_LOG_WARN, "zip: cannot start", "error", archive_error_string(j->ar),
                       NULL);
                goto out;
        }
        if (j->ents) {
                for (size_t i = 0; i < j->n; i++)
                        if (zip_add(j, j->path, j->ents[i].path, &j->ents[i].st) < 0)
                                break;
        } else {
                const char *slash = strrchr(j->path, '/');
                const char *base = slash && slash[1] ? slash + 1 : j->path;
                _cleanup_free_ char *dir = base == j->path ? xstrdup(".")
                                           : slash == j->path
                                               ? xstrdup("/")
                                               : xstrndup(j->path, (size_t)(slash - j->path));
                zip_add(j, dir, base, &j->st);
        }
        archive_write_close(j->ar);
out:
        archive_write_free(j->ar);
        file_job_free(j);
        return NULL;
}

static enum MHD_Result start_download(ab_req *r, file_job *j, void *(*fn)(void *), unsigned status,
                                      const char *ctype, const char *const *headers)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
                file_job_free(j);
                return resp_error(r, 500, "internal", "pipe: %s", strerror(errno));
        }
        j->fd = p[1];
        if (spawn_detached(fn, j) < 0) {
                close(p[0]);
                file_job_free(j);
                return resp_error(r, 503, "unavailable", "cannot start a thread");
        }
        return resp_stream(r, status, ctype, p[0], headers);
}

enum MHD_Result route_files_get(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        const char *path = need_path(r, &ret);
        if (!path)
                return ret;
        const char *format = req_query(r, "format");
        if (format && strcmp(format, "zip"))
                return resp_error(r, 400, "invalid_argument", "format: only \"zip\" is supported");
        int depth = 1;
        const char *ds = req_query(r, "depth");
        if (ds) {
                char *end;
                long d = strtol(ds, &end, 10);
                if (end == ds || *end || d < 1 || d > 32)
                        return resp_error(r, 400, "invalid_argument", "depth: must be 1..32");
                depth = (int)d;
        }
        file_job *j = xzalloc(sizeof(*j));
        j->srv = r->srv;
        j->fd = -1;
        j->path = xstrdup(path);
        ab_err *e = NULL;
        if (ab_manager_use_begin(r->srv->mgr, id, r->scope, &j->use, &e) < 0) {
                free(j->path);
                free(j);
                return resp_err(r, e);
        }
        abc_stat st = {0};
        if (ab_manager_file_stat(r->srv->mgr, &j->use, path, false, &st, &e) < 0) {
                file_job_free(j);
                return kit_file_err(r, e);
        }
        _cleanup_free_ char *shown = display_path(path);
        if (format) {
                if (st.type == ABC_DIR) {
                        abc_stat_clear(&st);
                        if (ab_manager_file_list(r->srv->mgr, &j->use, path, ZIP_MAX_DEPTH,
                                                 &j->ents, &j->n, &e) < 0) {
                                file_job_free(j);
                                return kit_file_err(r, e);
                        }
                } else {
                        j->st = st;
                }
                const char *base = strrchr(shown, '/');
                base = base && base[1] ? base + 1 : "root";
                _cleanup_free_ char *cd =
                    xasprintf("attachment; filename=\"%s.zip\"", *base ? base : "files");
                for (char *c = cd + 22; *c; c++)
                        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20 ||
                            (unsigned char)*c >= 0x7f)
                                *c = '_';
                cd[strlen(cd) - 1] = '"';
                const char *const hdr[] = {"Content-Disposition", cd, NULL, NULL};
                return start_download(r, j, zip_main, 200, "application/zip", hdr);
        }
        if (st.type == ABC_DIR) {
                abc_stat_clear(&st);
                abc_dirent *ents = NULL;
                size_t n = 0;
                if (ab_manager_file_list(r->srv->mgr, &j->use, path, depth, &ents, &n, &e) < 0) {
                        file_job_free(j);
                        return kit_file_err(r, e);
                }
                file_job_free(j);
                json_t *a = json_array();
                for (size_t i = 0; i < n; i++)
                        json_array_append_new(a, entry_json(shown, ents[i].path, &ents[i].st));
                abc_dirents_free(ents, n);
                return resp_json(r, 200,
                                 json_pack("{s:o,s:s,s:o}", "path",
                                           json_bytes(shown, strlen(shown)), "type", "dir",
                                           "entries", a));
        }
        bool regular = st.type == ABC_FILE;
        abc_stat_clear(&st);
        if (!regular) {
                file_job_free(j);
                return resp_error(r, 400, "invalid_argument",
                                  "%s is not a regular file or a directory (a symlink is not "
                                  "followed)",
                                  shown);
        }
        /* streamed by the kit, which takes the use over */
        ab_use use = j->use;
        ret = resp_box_file(r, &use, j->path, 0, 0, 200, NULL);
        free(j->path);
        free(j);
        return ret;
}

/* ---- upload and delete ------------------------------------------------ */

enum MHD_Result route_files_put(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        const char *path = need_path(r, &ret);
        if (!path)
                return ret;
        if (upload_wants_extract(r)) /* an archive to unpack into path */
                return upload_extract(r, id, path);
        ab_err *e = NULL;
        ab_use u;
        if (ab_manager_use_begin(r->srv->mgr, id, r->scope, &u, &e) < 0)
                return resp_err(r, e);
        int rc = -1;
        if (lseek(r->upload_fd, 0, SEEK_SET) == 0) {
                rc = ab_manager_file_write(r->srv->mgr, &u, path, NULL, 0, r->upload_fd,
                                           ABC_W_MKPARENTS, 0, &e);
        } else {
                ab_err_set(&e, AB_E_INTERNAL, errno, "rewind the spooled upload");
        }
        ab_manager_use_end(r->srv->mgr, &u);
        if (rc < 0)
                return kit_file_err(r, e);
        _cleanup_free_ char *shown = display_path(path);
        return resp_json(r, 201,
                         json_pack("{s:o,s:I}", "path", json_bytes(shown, strlen(shown)), "size",
                                   (json_int_t)r->upload_len));
}

enum MHD_Result route_files_delete(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        const char *path = need_path(r, &ret);
        if (!path)
                return ret;
        const char *rs = req_query(r, "recursive");
        bool recursive = rs && (!strcmp(rs, "1") || !strcmp(rs, "true"));
        if (rs && !recursive && strcmp(rs, "0") && strcmp(rs, "false"))
                return resp_error(r, 400, "invalid_argument",
                                  "recursive: must be 1/true or 0/false");
        _cleanup_free_ char *shown = display_path(path);
        if (!strcmp(shown, "/") || !strcmp(shown, "/workspace"))
                return resp_error(r, 400, "invalid_argument",
                                  "path: refusing to delete %s itself; delete what is in it",
                                  shown);
        ab_err *e = NULL;
        ab_use u;
        if (ab_manager_use_begin(r->srv->mgr, id, r->scope, &u, &e) < 0)
                return resp_err(r, e);
        int rc = ab_manager_file_delete(r->srv->mgr, &u, path, recursive, &e);
        ab_manager_use_end(r->srv->mgr, &u);
        if (rc < 0)
                return kit_file_err(r, e);
        return resp_json(r, 200, json_pack("{s:o}", "deleted", json_bytes(shown, strlen(shown))));
}
