/* /files of the E2B front's envd (front_envd.c): GET streams a file out of
 * the box (abc_read through a pipe), POST writes one file (octet-stream)
 * or several (multipart/form-data, the part's filename is its path) through
 * the box's init. Errors in envd's shape {"code": status, "message"}. */
#include "fronts/e2b/envd_int.h"
#include "base/log.h"

#include <fcntl.h>
#include <sys/mman.h>

/* ---- /files -------------------------------------------------------------- */

static enum MHD_Result files_error(ab_req *r, ab_err *e)
{
        unsigned st = e->code == AB_E_NOT_FOUND    ? 404
                      : e->code == AB_E_INVALID    ? 400
                      : e->code == AB_E_LIMIT      ? 507
                      : e->code == AB_E_PERMISSION ? 403
                                                   : status_of(e->code);
        if (e->code == AB_E_UNAVAILABLE)
                st = 502;
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
        _cleanup_free_ char *abs = envd_abs_path(path, NULL);
        ab_use use;
        ab_err *e = NULL;
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
        int src_fd; /* octet-stream: the upload itself, or -1 */
} up_call;

static int up_write(ab_manager *m, ab_use *u, void *ud, ab_err **err)
{
        up_call *c = ud;
        return ab_manager_file_write(m, u, c->f->path, c->f->data, c->f->len, c->src_fd,
                                     ABC_W_MKPARENTS, 0, err);
}

/* Finds `needle` in hay[0..n). */
static const char *memfind(const char *hay, size_t n, const char *needle, size_t m)
{
        if (m == 0 || n < m)
                return NULL;
        for (const char *p = hay; (p = memchr(p, needle[0], (size_t)(hay + n - p) - m + 1)); p++) {
                if (!memcmp(p, needle, m))
                        return p;
                if ((size_t)(hay + n - p) <= m)
                        break;
        }
        return NULL;
}

/* A header parameter: name="value" in a Content-Disposition line. */
static char *disp_param(const char *line, size_t len, const char *name)
{
        _cleanup_free_ char *pat = xasprintf("%s=\"", name);
        size_t pl = strlen(pat);
        for (const char *p = line; (p = memfind(p, (size_t)(line + len - p), pat, pl)); p += pl) {
                if (p > line && p[-1] != ' ' && p[-1] != ';')
                        continue;
                const char *v = p + pl;
                const char *q = memchr(v, '"', (size_t)(line + len - v));
                if (!q)
                        return NULL;
                return xstrndup(v, (size_t)(q - v));
        }
        return NULL;
}

int envd_parse_multipart(const char *body, size_t len, const char *ctype, up_file **out, size_t *n,
                         ab_err **err)
{
        const char *bp = strstr(ctype, "boundary=");
        if (!bp)
                return ab_err_set(err, AB_E_INVALID, 0, "multipart: no boundary");
        bp += 9;
        _cleanup_free_ char *bnd = NULL;
        if (*bp == '"') {
                const char *q = strchr(bp + 1, '"');
                if (!q)
                        return ab_err_set(err, AB_E_INVALID, 0, "multipart: bad boundary");
                bnd = xstrndup(bp + 1, (size_t)(q - bp - 1));
        } else {
                bnd = xstrndup(bp, strcspn(bp, "; \t"));
        }
        if (!*bnd || strlen(bnd) > 200)
                return ab_err_set(err, AB_E_INVALID, 0, "multipart: bad boundary");
        _cleanup_free_ char *delim = xasprintf("--%s", bnd);
        size_t dl = strlen(delim);
        const char *p = memfind(body, len, delim, dl);
        up_file *v = NULL;
        size_t cnt = 0;
        if (!p) /* not even the first delimiter: not a multipart body */
                goto bad;
        while (p) {
                p += dl;
                size_t left = (size_t)(body + len - p);
                if (left >= 2 && p[0] == '-' && p[1] == '-')
                        break; /* the closing delimiter */
                if (left < 2 || p[0] != '\r' || p[1] != '\n')
                        goto bad;
                p += 2;
                const char *hend = memfind(p, (size_t)(body + len - p), "\r\n\r\n", 4);
                if (!hend)
                        goto bad;
                _cleanup_free_ char *fname = NULL;
                for (const char *l = p; l < hend;) {
                        const char *le = memfind(l, (size_t)(hend + 2 - l), "\r\n", 2);
                        if (!le)
                                le = hend;
                        if ((size_t)(le - l) > 20 && !strncasecmp(l, "Content-Disposition:", 20)) {
                                free(fname);
                                fname = disp_param(l, (size_t)(le - l), "filename");
                        }
                        l = le + 2;
                }
                const char *data = hend + 4;
                _cleanup_free_ char *close_delim = xasprintf("\r\n%s", delim);
                const char *next = memfind(data, (size_t)(body + len - data), close_delim, dl + 2);
                if (!next)
                        goto bad;
                if (fname) {
                        v = xrealloc(v, xmul(cnt + 1, sizeof(*v)));
                        v[cnt++] = (up_file){.path = steal_pointer(&fname),
                                             .data = data,
                                             .len = (size_t)(next - data)};
                }
                p = next + 2;
        }
        *out = v;
        *n = cnt;
        return 0;
bad:
        for (size_t i = 0; i < cnt; i++)
                free(v[i].path);
        free(v);
        return ab_err_set(err, AB_E_INVALID, 0, "multipart: malformed body");
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
        if (cenc && strcasecmp(cenc, "identity"))
                return resp_json(r, 400,
                                 json_pack("{s:i,s:s}", "code", 400, "message",
                                           "Content-Encoding: only identity uploads are supported "
                                           "(no gzip)"));
        ab_err *e = NULL;
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
        json_t *a = json_array();
        int rc = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
                char *full = envd_abs_path(files[i].path, NULL);
                free(files[i].path);
                files[i].path = full;
                up_call c = {.f = &files[i], .src_fd = src_fd};
                rc = envd_with_box(r->srv, box, r->scope, up_write, &c, &e);
                if (rc == 0) {
                        const char *name = strrchr(full, '/');
                        json_array_append_new(a, json_pack("{s:s,s:s,s:s}", "name",
                                                           name ? name + 1 : full, "type", "file",
                                                           "path", full));
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
