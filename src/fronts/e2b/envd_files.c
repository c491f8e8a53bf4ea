/* /files of the E2B front's envd (front_envd.c): GET streams a file out of
 * the box (abc_read through a pipe), POST writes one file (octet-stream)
 * or several (multipart/form-data, the part's filename is its path) through
 * the box's init, gzip-encoded or not (kit/gunzip.h). Errors in envd's
 * shape {"code": status, "message"}. */
#include "fronts/e2b/envd_int.h"
#include "kit/files.h"
#include "kit/gunzip.h"
#include "kit/multipart.h"
#include "kit/status.h"
#include "base/log.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* ---- /files -------------------------------------------------------------- */

static enum MHD_Result files_error(ab_req *r, ab_err *e)
{
        /* a box that cannot be reached is envd's 502 */
        unsigned st = e->code == AB_E_UNAVAILABLE ? 502 : kit_file_status(e->code);
        enum MHD_Result ret = resp_json(
            r, st,
            json_pack("{s:i,s:o}", "code", (int)st, "message", json_bytes(e->msg, strlen(e->msg))));
        ab_err_free(&e);
        return ret;
}

/* Cleanup for a local json_t * (NULL: nothing). */
static void json_release(json_t **j)
{
        json_decref(*j);
}

/* A gzip upload that could not be inflated: 400 (not gzip), 413 (it
 * inflates past max_upload: a gzip bomb), 503 (the spool is full). */
static enum MHD_Result gunzip_error(ab_req *r, ab_err *e)
{
        unsigned st = e->code == AB_E_INVALID       ? 400
                      : e->code == AB_E_LIMIT       ? 413
                      : e->code == AB_E_UNAVAILABLE ? 503
                                                    : 500;
        enum MHD_Result ret = resp_json(
            r, st,
            json_pack("{s:i,s:o}", "code", (int)st, "message", json_bytes(e->msg, strlen(e->msg))));
        ab_err_free(&e);
        return ret;
}

enum MHD_Result envd_files_get(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        const char *box = envd_box(r, &ret);
        if (!box)
                return ret;
        const char *path = req_query(r, "path");
        if (!path || !*path)
                return resp_json(r, 400,
                                 json_pack("{s:i,s:s}", "code", 400, "message", "path: required"));
        ab_err *e = NULL;
        _cleanup_free_ char *abs = envd_call_path(envd_call_home(r, box), path, &e);
        if (!abs)
                return files_error(r, e);
        ab_use use;
        if (ab_manager_use_begin(r->srv->mgr, box, r->scope, &use, &e) < 0)
                return files_error(r, e);
        abc_stat st = {0};
        int rc = ab_manager_file_stat(r->srv->mgr, &use, abs, false, &st, &e);
        abc_stat_clear(&st);
        if (rc == 0 && st.type == ABC_DIR)
                rc = ab_err_set(&e, AB_E_INVALID, 0, "%s is a directory", abs);
        if (rc < 0) {
                ab_manager_use_end(r->srv->mgr, &use);
                return files_error(r, e);
        }
        /* envd's answer has the file's length: a stream cannot say it, the
         * SDK reads to the end */
        return resp_box_file(r, &use, abs, 0, 0, 200, NULL);
}

typedef struct up_call {
        up_file *f;
        int src_fd;        /* octet-stream: the upload itself, or -1 */
        const char *owner; /* the call's user, who gets the file; NULL = root */
} up_call;

static int up_write(ab_manager *m, ab_use *u, void *ud, ab_err **err)
{
        up_call *c = ud;
        _cleanup_strv_ char **made = NULL;
        if (c->owner && (envd_owner_check(m, u, c->owner, err) < 0 ||
                         envd_missing_parents(m, u, c->f->path, &made, err) < 0))
                return -1;
        if (ab_manager_file_write(m, u, c->f->path, c->f->data, c->f->len, c->src_fd,
                                  ABC_W_MKPARENTS, 0, err) < 0)
                return -1;
        return envd_give(m, u, c->owner, c->f->path, made, err);
}

int envd_parse_multipart(const char *body, size_t len, const char *ctype, up_file **out, size_t *n,
                         ab_err **err)
{
        _cleanup_free_ char *delim = kit_multipart_delim(ctype);
        if (!delim)
                return ab_err_set(err, AB_E_INVALID, 0, "multipart: no or a bad boundary");
        kit_part *parts;
        size_t np;
        if (kit_multipart_split(body, len, delim, KIT_MULTIPART_MAX_PARTS, &parts, &np, err) < 0)
                return -1;
        up_file *v = xcalloc(np ? np : 1, sizeof(*v));
        size_t cnt = 0;
        for (size_t i = 0; i < np; i++)
                if (parts[i].filename)
                        v[cnt++] = (up_file){.path = steal_pointer(&parts[i].filename),
                                             .data = parts[i].data,
                                             .len = parts[i].len};
        kit_parts_free(parts, np);
        if (!cnt) {
                free(v);
                v = NULL;
        }
        *out = v;
        *n = cnt;
        return 0;
}

enum MHD_Result envd_files_post(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        const char *box = envd_box(r, &ret);
        if (!box)
                return ret;
        if (r->upload_failed)
                return resp_json(r, 500,
                                 json_pack("{s:i,s:s}", "code", 500, "message",
                                           "the upload could not be spooled"));
        const char *ctype = req_header(r, "Content-Type");
        const char *qpath = req_query(r, "path");
        const char *cenc = req_header(r, "Content-Encoding");
        bool gz = cenc && !strcasecmp(cenc, "gzip");
        if (cenc && !gz && strcasecmp(cenc, "identity"))
                return resp_json(r, 415,
                                 json_pack("{s:i,s:s}", "code", 415, "message",
                                           "Content-Encoding: gzip or identity"));
        ab_err *e = NULL;
        json_t *meta = NULL; /* X-Metadata-*: kept for each file written */
        if (envd_meta_headers(r, &meta, &e) < 0)
                return files_error(r, e);
        __attribute__((cleanup(json_release))) json_t *meta_ref = meta;
        _cleanup_close_ int inflated = -1;
        if (gz) { /* the upload, inflated, replaces it */
                if (kit_gunzip_upload(r, r->srv->cfg->max_upload, &inflated, &e) < 0)
                        return gunzip_error(r, e);
                struct stat ist;
                if (fstat(inflated, &ist) < 0)
                        return resp_error(r, 500, "internal", "fstat: %s", strerror(errno));
                close(r->upload_fd);
                r->upload_fd = steal_fd(&inflated);
                r->upload_len = (uint64_t)ist.st_size;
        }
        up_file *files = NULL;
        size_t n = 0;
        void *map = NULL;
        size_t maplen = r->upload_len;
        int src_fd = -1;
        if (ctype && !strncasecmp(ctype, "multipart/form-data", 19)) {
                if (maplen) {
                        map = mmap(NULL, maplen, PROT_READ, MAP_PRIVATE, r->upload_fd, 0);
                        if (map == MAP_FAILED)
                                return resp_error(r, 500, "internal", "mmap: %s", strerror(errno));
                }
                if (envd_parse_multipart(map, maplen, ctype, &files, &n, &e) < 0) {
                        if (map)
                                munmap(map, maplen);
                        return files_error(r, e);
                }
                if (qpath && *qpath && n == 1) {
                        free(files[0].path);
                        files[0].path = xstrdup(qpath);
                }
        } else {
                /* application/octet-stream: the body is the file, path names it */
                if (!qpath || !*qpath)
                        return resp_json(
                            r, 400,
                            json_pack("{s:i,s:s}", "code", 400, "message", "path: required"));
                if (lseek(r->upload_fd, 0, SEEK_SET) != 0)
                        return resp_error(r, 500, "internal", "rewind the upload");
                files = xzalloc(sizeof(*files));
                files[0].path = xstrdup(qpath);
                n = 1;
                src_fd = r->upload_fd;
        }
        __attribute__((cleanup(envd_who_clear))) envd_who who;
        envd_who_of(r, box, &who);
        json_t *a = json_array();
        int rc = 0;
        const char *home = who.home ? who.home : E2B_HOME;
        for (size_t i = 0; i < n && rc == 0; i++) {
                char *full = envd_call_path(home, files[i].path, &e);
                if (!full) {
                        rc = -1;
                        break;
                }
                free(files[i].path);
                files[i].path = full;
                up_call c = {.f = &files[i], .src_fd = src_fd, .owner = who.user};
                rc = envd_with_box(r->srv, box, r->scope, up_write, &c, &e);
                if (rc == 0) /* a new file: what was kept for the path goes */
                        rc = envd_meta_set(r, box, full, meta, &e);
                if (rc == 0) {
                        json_array_append_new(
                            a,
                            json_pack("{s:s,s:s,s:s,s:o}", "name", kit_base_name(full), "type",
                                      "file" /* envd's HTTP EntryInfo: file or dir */, "path", full,
                                      "metadata", meta ? json_incref(meta) : json_object()));
                }
        }
        for (size_t i = 0; i < n; i++)
                free(files[i].path);
        free(files);
        if (map)
                munmap(map, maplen);
        if (rc < 0) {
                json_decref(a);
                return files_error(r, e);
        }
        return resp_json(r, 200, a);
}
