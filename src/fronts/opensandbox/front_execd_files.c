/* OpenSandbox's execd file calls under /opensandbox/execd/{id}: files
 * (info, upload, download, search, replace, move, permissions, delete) and
 * directories (list, create, delete). Everything happens inside the box:
 * through its init (fd-relative, as every agentbox file operation), or for
 * what init does not offer (owners, modes, stat's details) through the
 * box's own tools run as execs by the manager. */
#include "fronts/opensandbox/front_execd_int.h"
#include "kit/files.h"
#include "kit/multipart.h"
#include "base/log.h"
#include "base/codec.h"

#include <ctype.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/mman.h>

#define STAT_OUTPUT_CAP  (64u << 20) /* stat's answer for a listing */
#define STAT_CHUNK       512         /* paths per stat exec */
#define LIST_MAX_DEPTH   32
#define UPLOAD_PARTS_MAX 256         /* metadata + file parts of one upload */
#define REPLACE_MAX      (64u << 20) /* files larger than this are not edited in memory */

/* ---- helpers ------------------------------------------------------------ */

/* Octal permission bits written as decimal digits (755) -> 0755. */
static int mode_of(json_t *v, uint32_t *out)
{
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_integer(v))
                return -1;
        json_int_t d = json_integer_value(v);
        if (d < 0 || d > 7777)
                return -1;
        uint32_t m = 0, mul = 1;
        for (json_int_t x = d; x; x /= 10, mul *= 8) {
                if (x % 10 > 7)
                        return -1;
                m += (uint32_t)(x % 10) * mul;
        }
        *out = m;
        return 0;
}

typedef struct collect_buf {
        ab_buf out, err;
} collect_buf;

static int collect_out(void *ud, int stream, const void *buf, size_t len)
{
        collect_buf *c = ud;
        ab_buf_add(stream == 2 ? &c->err : &c->out, buf, len);
        return 0;
}

/* Runs argv in the box being used; *exit_code gets its status. Output in c. */
static int run_argv(ab_server *s, ab_use *u, const char *const *argv, uint64_t cap, collect_buf *c,
                    int *exit_code, ab_err **err)
{
        static const char *const c_locale[] = {"LC_ALL=C", NULL}; /* stat's %F, tools' messages */
        abc_exec_req q = {
            .argv = argv, .env = c_locale, .stdin_fd = -1, .output_cap = cap, .timeout_ms = 60000};
        abc_exec_res res;
        if (ab_manager_exec(s->mgr, u, &q, collect_out, c, &res, err) < 0)
                return -1;
        *exit_code = res.exit_code;
        return 0;
}

/* Paths stat did not describe (a box whose stat is not GNU's, or a race)
 * from the init's lstat: no owner or group then. */
static int stat_fallback(ab_server *s, ab_use *u, const char *const *paths, size_t n, json_t *out,
                         ab_err **err)
{
        for (size_t i = 0; i < n; i++) {
                if (json_object_get(out, paths[i]))
                        continue;
                abc_stat st = {0};
                ab_err *e = NULL;
                int fd = ab_manager_use_connect(s->mgr, u, err);
                if (fd < 0)
                        return -1;
                int rc = abc_stat_path(fd, paths[i], &st, &e);
                close(fd);
                free(st.link);
                if (rc < 0) { /* missing: left out */
                        ab_err_free(&e);
                        continue;
                }
                char mt[AB_TIME_LEN], ms[8];
                ab_time_rfc3339(st.mtime * 1000, true, mt);
                snprintf(ms, sizeof(ms), "%o", st.mode & 07777);
                json_object_set_new(out, paths[i],
                                    json_pack("{s:o,s:s,s:I,s:s,s:s,s:s,s:s,s:I}", "path",
                                              json_bytes(paths[i], strlen(paths[i])), "type",
                                              kit_ftype_name(&kit_ftypes_execd, st.type), "size",
                                              (json_int_t)st.size, "modified_at", mt, "created_at",
                                              mt, "owner", "", "group", "", "mode",
                                              (json_int_t)strtol(ms, NULL, 10)));
        }
        return 0;
}

/* FileInfo of each path (as given: relative ones are under /workspace),
 * from one stat in the box per chunk of paths; *out maps path -> FileInfo.
 * Paths that do not exist are absent from it. */
static int stat_paths(ab_server *s, ab_use *u, const char *const *paths, size_t n, json_t **out,
                      ab_err **err)
{
        *out = json_object();
        for (size_t at = 0; at < n; at += STAT_CHUNK) {
                size_t k = n - at < STAT_CHUNK ? n - at : STAT_CHUNK;
                const char **argv = xcalloc(k + 5, sizeof(char *));
                argv[0] = "stat";
                argv[1] = "--printf=%F\\037%s\\037%a\\037%U\\037%G\\037%Y\\037%W\\037%n\\036";
                argv[2] = "--";
                for (size_t i = 0; i < k; i++)
                        argv[3 + i] = paths[at + i];
                collect_buf c = {0};
                int code;
                int rc = run_argv(s, u, argv, STAT_OUTPUT_CAP, &c, &code, err);
                free(argv);
                if (rc < 0) {
                        ab_buf_free(&c.out);
                        ab_buf_free(&c.err);
                        json_decref(*out);
                        *out = NULL;
                        return -1;
                }
                ab_buf_putc(&c.out, 0);
                char *save = NULL;
                for (char *rec = strtok_r(c.out.p, "\036", &save); rec;
                     rec = strtok_r(NULL, "\036", &save)) {
                        char *f[8];
                        size_t nf = 0;
                        for (char *p = rec; nf < 8; nf++) {
                                f[nf] = p;
                                char *sep = nf < 7 ? strchr(p, '\037') : NULL;
                                if (nf < 7 && !sep)
                                        break;
                                if (sep) {
                                        *sep = 0;
                                        p = sep + 1;
                                }
                        }
                        if (nf != 8)
                                continue;
                        int64_t mtime = strtoll(f[5], NULL, 10), btime = strtoll(f[6], NULL, 10);
                        char mt[AB_TIME_LEN], bt[AB_TIME_LEN];
                        ab_time_rfc3339(mtime * 1000, true, mt);
                        ab_time_rfc3339((btime > 0 ? btime : mtime) * 1000, true, bt);
                        json_object_set_new(
                            *out, f[7],
                            json_pack("{s:o,s:s,s:I,s:s,s:s,s:o,s:o,s:I}", "path",
                                      json_bytes(f[7], strlen(f[7])), "type",
                                      kit_ftype_name(&kit_ftypes_execd, kit_ftype_of_stat(f[0])),
                                      "size", (json_int_t)strtoll(f[1], NULL, 10), "modified_at",
                                      mt, "created_at", bt, "owner", json_bytes(f[3], strlen(f[3])),
                                      "group", json_bytes(f[4], strlen(f[4])), "mode",
                                      (json_int_t)strtol(f[2], NULL, 10)));
                }
                ab_buf_free(&c.out);
                ab_buf_free(&c.err);
        }
        return stat_fallback(s, u, paths, n, *out, err);
}

/* The query's paths (?path=a&path=b), at least one; answers 400 itself. */
static json_t *need_paths(ab_req *r, enum MHD_Result *ret)
{
        json_t *a = osb_query_all(r, "path");
        size_t i;
        json_t *p;
        json_array_foreach(a, i, p)
        {
                if (!*json_string_value(p) || json_string_length(p) > 4096) {
                        json_decref(a);
                        *ret = osb_error(r, 400, "INVALID_REQUEST_BODY",
                                         "path: must be 1..4096 bytes");
                        return NULL;
                }
        }
        if (!json_array_size(a)) {
                json_decref(a);
                *ret = osb_error(r, 400, "INVALID_REQUEST_BODY", "path: required");
                return NULL;
        }
        return a;
}

static const char **strs_of(json_t *a)
{
        const char **v = xcalloc(json_array_size(a) + 1, sizeof(char *));
        for (size_t i = 0; i < json_array_size(a); i++)
                v[i] = json_string_value(json_array_get(a, i));
        return v;
}

/* ---- files -------------------------------------------------------------- */

enum MHD_Result execd_files_info(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        json_t *paths = need_paths(r, &ret);
        if (!paths)
                return ret;
        ab_use u;
        if (execd_begin_use(r, id, &u, &ret) < 0) {
                json_decref(paths);
                return ret;
        }
        const char **v = strs_of(paths);
        json_t *infos;
        ab_err *e = NULL;
        int rc = stat_paths(r->srv, &u, v, json_array_size(paths), &infos, &e);
        ab_manager_use_end(r->srv->mgr, &u);
        free(v);
        if (rc < 0) {
                json_decref(paths);
                return execd_err(r, e);
        }
        size_t i;
        json_t *p;
        json_array_foreach(paths, i, p)
        {
                if (!json_object_get(infos, json_string_value(p))) {
                        ret = osb_error(r, 404, "FILE_NOT_FOUND", "file not found: %s",
                                        json_string_value(p));
                        json_decref(paths);
                        json_decref(infos);
                        return ret;
                }
        }
        json_decref(paths);
        return resp_json(r, 200, infos);
}

/* Deletes each path (recursive: directory trees). */
enum MHD_Result execd_remove_paths(ab_req *r, const char *id, bool recursive)
{
        enum MHD_Result ret;
        json_t *paths = need_paths(r, &ret);
        if (!paths)
                return ret;
        size_t i;
        json_t *p;
        json_array_foreach(paths, i, p)
        {
                const char *s = json_string_value(p);
                if (!strcmp(s, "/") || !strcmp(s, "/workspace") || !strcmp(s, "/workspace/")) {
                        json_decref(paths);
                        return osb_error(r, 400, "INVALID_REQUEST_BODY",
                                         "path: refusing to delete %s itself", s);
                }
        }
        ab_use u;
        if (execd_begin_use(r, id, &u, &ret) < 0) {
                json_decref(paths);
                return ret;
        }
        ab_err *e = NULL;
        int rc = 0;
        json_array_foreach(paths, i, p)
        {
                int fd = ab_manager_use_connect(r->srv->mgr, &u, &e);
                rc = fd < 0 ? -1 : abc_delete(fd, json_string_value(p), recursive, &e);
                if (fd >= 0)
                        close(fd);
                if (rc < 0)
                        break;
        }
        ab_manager_use_end(r->srv->mgr, &u);
        json_decref(paths);
        if (rc < 0)
                return execd_err(r, e);
        return execd_ok(r);
}

/* chmod and chown of one path by the box's own tools (init has neither). */
static int set_perm(ab_server *s, ab_use *u, const char *path, json_t *perm, bool mode_given,
                    ab_err **err)
{
        uint32_t mode = 0755;
        if (mode_of(json_object_get(perm, "mode"), &mode) < 0)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: mode must be octal digits, e.g. 644",
                                  path);
        char ms[16];
        snprintf(ms, sizeof(ms), "%o", mode);
        int code = 0;
        collect_buf c = {0};
        int rc = 0;
        if (mode_given || json_object_get(perm, "mode")) {
                const char *argv[] = {"chmod", ms, "--", path, NULL};
                rc = run_argv(s, u, argv, 0, &c, &code, err);
        }
        const char *owner = json_string_value(json_object_get(perm, "owner"));
        const char *group = json_string_value(json_object_get(perm, "group"));
        if (rc == 0 && code == 0 && ((owner && *owner) || (group && *group))) {
                _cleanup_free_ char *og = xasprintf("%s%s%s", owner ? owner : "",
                                                    group && *group ? ":" : "", group ? group : "");
                const char *argv[] = {"chown", og, "--", path, NULL};
                rc = run_argv(s, u, argv, 0, &c, &code, err);
        }
        if (rc == 0 && code != 0) {
                ab_buf_putc(&c.err, 0);
                rc =
                    ab_err_set(err, strstr(c.err.p, "No such file") ? AB_E_NOT_FOUND : AB_E_INVALID,
                               0, "%s", c.err.p);
        }
        ab_buf_free(&c.out);
        ab_buf_free(&c.err);
        return rc;
}

/* POST /files/permissions {path: {mode, owner, group}} and POST /directories
 * (the same body: directories made with those permissions). */
enum MHD_Result execd_paths_perm(ab_req *r, const char *id, bool mkdirs)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return execd_err(r, e);
        ab_use u;
        enum MHD_Result ret;
        if (execd_begin_use(r, id, &u, &ret) < 0) {
                json_decref(body);
                return ret;
        }
        int rc = 0;
        const char *path;
        json_t *perm;
        json_object_foreach(body, path, perm)
        {
                if (!json_is_object(perm)) {
                        rc = ab_err_set(&e, AB_E_INVALID, 0, "%s: must be an object", path);
                        break;
                }
                if (mkdirs) {
                        uint32_t mode = 0755;
                        if (mode_of(json_object_get(perm, "mode"), &mode) < 0) {
                                rc = ab_err_set(&e, AB_E_INVALID, 0,
                                                "%s: mode must be octal digits, e.g. 755", path);
                                break;
                        }
                        int fd = ab_manager_use_connect(r->srv->mgr, &u, &e);
                        rc = fd < 0 ? -1 : abc_mkdir(fd, path, true, mode, &e);
                        if (fd >= 0)
                                close(fd);
                }
                if (rc == 0)
                        rc = set_perm(r->srv, &u, path, perm, !mkdirs, &e);
                if (rc < 0)
                        break;
        }
        ab_manager_use_end(r->srv->mgr, &u);
        json_decref(body);
        if (rc < 0)
                return execd_err(r, e);
        return execd_ok(r);
}

/* POST /files/mv [{src, dest}] */
enum MHD_Result execd_files_mv(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body = NULL;
        if (r->body_len && !(body = json_loadb(r->body, r->body_len, 0, NULL)))
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "body: not JSON");
        if (!json_is_array(body)) {
                json_decref(body);
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "body: a list of {src, dest}");
        }
        ab_use u;
        enum MHD_Result ret;
        if (execd_begin_use(r, id, &u, &ret) < 0) {
                json_decref(body);
                return ret;
        }
        int rc = 0;
        size_t i;
        json_t *it;
        json_array_foreach(body, i, it)
        {
                const char *src = json_string_value(json_object_get(it, "src"));
                const char *dest = json_string_value(json_object_get(it, "dest"));
                if (!src || !dest || !*src || !*dest) {
                        rc = ab_err_set(&e, AB_E_INVALID, 0, "[%zu]: needs src and dest", i);
                        break;
                }
                int fd = ab_manager_use_connect(r->srv->mgr, &u, &e);
                rc = fd < 0 ? -1 : abc_rename(fd, src, dest, &e);
                if (fd >= 0)
                        close(fd);
                if (rc < 0)
                        break;
        }
        ab_manager_use_end(r->srv->mgr, &u);
        json_decref(body);
        if (rc < 0)
                return execd_err(r, e);
        return execd_ok(r);
}

/* The entries under dir (depth levels) as FileInfo objects, those whose
 * name (or, for a pattern with '/', relative path) matches pattern. */
static int list_infos(ab_server *s, ab_use *u, const char *dir, int depth, const char *pattern,
                      json_t **out, ab_err **err)
{
        *out = NULL;
        abc_dirent *ents = NULL;
        size_t n = 0;
        abc_stat st = {0};
        int fd = ab_manager_use_connect(s->mgr, u, err);
        if (fd < 0)
                return -1;
        int rc = abc_stat_path(fd, dir, &st, err);
        close(fd);
        bool is_dir = st.type == ABC_DIR;
        free(st.link);
        if (rc < 0)
                return -1;
        if (!is_dir)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "%s is not a directory (a symlink is not followed)", dir);
        fd = ab_manager_use_connect(s->mgr, u, err);
        if (fd < 0)
                return -1;
        rc = abc_list(fd, dir, depth, &ents, &n, err);
        close(fd);
        if (rc < 0)
                return -1;
        size_t dl = strlen(dir);
        while (dl > 1 && dir[dl - 1] == '/')
                dl--;
        char **full = xcalloc(n + 1, sizeof(char *));
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                const char *rel = ents[i].path;
                const char *base = strrchr(rel, '/');
                base = base ? base + 1 : rel;
                const char *subject = pattern && strchr(pattern, '/') ? rel : base;
                if (pattern && *pattern && strcmp(pattern, "**") &&
                    fnmatch(pattern, subject, 0) != 0)
                        continue;
                full[k++] = dl == 1 && dir[0] == '/' ? xasprintf("/%s", rel)
                                                     : xasprintf("%.*s/%s", (int)dl, dir, rel);
        }
        abc_dirents_free(ents, n);
        json_t *infos = NULL;
        rc = stat_paths(s, u, (const char *const *)full, k, &infos, err);
        if (rc == 0) {
                *out = json_array();
                for (size_t i = 0; i < k; i++) {
                        json_t *fi = json_object_get(infos, full[i]);
                        if (fi) /* gone meanwhile: left out */
                                json_array_append(*out, fi);
                }
        }
        json_decref(infos);
        ab_strvfreep(&full);
        return rc;
}

enum MHD_Result execd_dir_list(ab_req *r, const char *id, bool search)
{
        const char *path = req_query(r, "path");
        if (!path || !*path)
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "path: required");
        const char *pattern = search ? req_query(r, "pattern") : NULL;
        long depth = search ? LIST_MAX_DEPTH : 1;
        const char *ds = search ? NULL : req_query(r, "depth");
        if (ds) {
                char *end;
                depth = strtol(ds, &end, 10);
                if (end == ds || *end || depth < 1 || depth > LIST_MAX_DEPTH)
                        return osb_error(r, 400, "INVALID_REQUEST_BODY", "depth: must be 1..%d",
                                         LIST_MAX_DEPTH);
        }
        ab_use u;
        enum MHD_Result ret;
        if (execd_begin_use(r, id, &u, &ret) < 0)
                return ret;
        json_t *out;
        ab_err *e = NULL;
        int rc = list_infos(r->srv, &u, path, (int)depth, pattern, &out, &e);
        ab_manager_use_end(r->srv->mgr, &u);
        if (rc < 0) {
                if (e->code == AB_E_NOT_FOUND) {
                        ret = osb_error(r, 404, "FILE_NOT_FOUND", "%s", e->msg);
                        ab_err_free(&e);
                        return ret;
                }
                return execd_err(r, e);
        }
        return resp_json(r, 200, out);
}

/* POST /files/replace {path: {old, new}}[?verbose=true] */
typedef struct read_buf {
        ab_buf b;
        bool too_big;
} read_buf;

static int read_into(void *ud, int stream, const void *buf, size_t len)
{
        read_buf *rb = ud;
        if (rb->b.n + len > REPLACE_MAX) {
                rb->too_big = true;
                return -1;
        }
        ab_buf_add(&rb->b, buf, len);
        return 0;
}

static int replace_one(ab_server *s, ab_use *u, const char *path, const char *old,
                       const char *new_s, int64_t *count, ab_err **err)
{
        size_t ol = strlen(old), nl = strlen(new_s);
        if (!ol)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: old must not be empty", path);
        abc_stat st = {0};
        int fd = ab_manager_use_connect(s->mgr, u, err);
        if (fd < 0)
                return -1;
        int rc = abc_stat_path(fd, path, &st, err);
        close(fd);
        free(st.link);
        if (rc < 0)
                return -1;
        if (st.type != ABC_FILE)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: not a regular file", path);
        read_buf rb = {0};
        fd = ab_manager_use_connect(s->mgr, u, err);
        if (fd < 0)
                return -1;
        rc = abc_read(fd, path, 0, 0, read_into, &rb, err);
        close(fd);
        if (rc < 0 || rb.too_big) {
                ab_buf_free(&rb.b);
                if (rb.too_big) {
                        ab_err_free(err);
                        return ab_err_set(err, AB_E_LIMIT, 0, "%s: larger than %u MiB", path,
                                          REPLACE_MAX >> 20);
                }
                return -1;
        }
        ab_buf out = {0};
        *count = 0;
        size_t i = 0;
        while (i < rb.b.n) {
                const char *hit = rb.b.n - i >= ol ? memmem(rb.b.p + i, rb.b.n - i, old, ol) : NULL;
                if (!hit) {
                        ab_buf_add(&out, rb.b.p + i, rb.b.n - i);
                        break;
                }
                ab_buf_add(&out, rb.b.p + i, (size_t)(hit - (rb.b.p + i)));
                ab_buf_add(&out, new_s, nl);
                i = (size_t)(hit - rb.b.p) + ol;
                (*count)++;
        }
        ab_buf_free(&rb.b);
        rc = 0;
        if (*count) {
                fd = ab_manager_use_connect(s->mgr, u, err);
                rc = fd < 0 ? -1
                            : abc_write(fd, path, out.p ? out.p : "", out.n, -1, 0, st.mode & 07777,
                                        err);
                if (fd >= 0)
                        close(fd);
        }
        ab_buf_free(&out);
        return rc;
}

enum MHD_Result execd_files_replace(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return execd_err(r, e);
        const char *vs = req_query(r, "verbose");
        bool verbose = vs && (!strcmp(vs, "true") || !strcmp(vs, "1"));
        ab_use u;
        enum MHD_Result ret;
        if (execd_begin_use(r, id, &u, &ret) < 0) {
                json_decref(body);
                return ret;
        }
        json_t *counts = json_object();
        int rc = 0;
        const char *path;
        json_t *it;
        json_object_foreach(body, path, it)
        {
                const char *old = json_string_value(json_object_get(it, "old"));
                const char *nw = json_string_value(json_object_get(it, "new"));
                int64_t n = 0;
                if (!old || !nw)
                        rc = ab_err_set(&e, AB_E_INVALID, 0, "%s: needs old and new", path);
                else
                        rc = replace_one(r->srv, &u, path, old, nw, &n, &e);
                if (rc < 0)
                        break;
                json_object_set_new(counts, path,
                                    json_pack("{s:I}", "replacedCount", (json_int_t)n));
        }
        ab_manager_use_end(r->srv->mgr, &u);
        json_decref(body);
        if (rc < 0) {
                json_decref(counts);
                if (e->code == AB_E_NOT_FOUND) {
                        ret = osb_error(r, 404, "FILE_NOT_FOUND", "%s", e->msg);
                        ab_err_free(&e);
                        return ret;
                }
                return execd_err(r, e);
        }
        if (!verbose) {
                json_decref(counts);
                return execd_ok(r);
        }
        return resp_json(r, 200, counts);
}

/* ---- download ----------------------------------------------------------- */

/* "bytes=A-B" or "bytes=A-" (no suffix ranges, one range). */
int osb_parse_range(const char *h, uint64_t size, uint64_t *off, uint64_t *len)
{
        unsigned long long a, b;
        char dash;
        if (sscanf(h, "bytes=%llu%c", &a, &dash) != 2 || dash != '-')
                return -1;
        const char *rest = strchr(h, '-') + 1;
        if (!*rest)
                b = size ? size - 1 : 0;
        else if (sscanf(rest, "%llu", &b) != 1 || b < a)
                return -1;
        if (a >= size)
                return -1;
        if (b >= size)
                b = size - 1;
        *off = a;
        *len = b - a + 1;
        return 0;
}

enum MHD_Result execd_files_download(ab_req *r, const char *id)
{
        const char *path = req_query(r, "path");
        if (!path || !*path)
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "path: required");
        ab_use use;
        uint64_t offset = 0, length = 0;
        enum MHD_Result ret;
        if (execd_begin_use(r, id, &use, &ret) < 0)
                return ret;
        ab_err *e = NULL;
        abc_stat st = {0};
        int fd = ab_manager_use_connect(r->srv->mgr, &use, &e);
        int rc = fd < 0 ? -1 : abc_stat_path(fd, path, &st, &e);
        if (fd >= 0)
                close(fd);
        free(st.link);
        if (rc < 0 || st.type != ABC_FILE) {
                ab_manager_use_end(r->srv->mgr, &use);
                if (rc == 0)
                        return osb_error(r, 400, "INVALID_REQUEST_BODY", "%s is not a regular file",
                                         path);
                if (e->code == AB_E_NOT_FOUND) {
                        ret = osb_error(r, 404, "FILE_NOT_FOUND", "file not found: %s", path);
                        ab_err_free(&e);
                        return ret;
                }
                return execd_err(r, e);
        }
        unsigned status = 200;
        const char *range = req_header(r, "Range");
        const char *os = req_query(r, "offset"), *ls = req_query(r, "limit");
        char cr[96] = "";
        if (range) {
                if (osb_parse_range(range, st.size, &offset, &length) < 0) {
                        ab_manager_use_end(r->srv->mgr, &use);
                        return osb_error(r, 416, "INVALID_RANGE", "range %s of a %llu-byte file",
                                         range, (unsigned long long)st.size);
                }
                status = 206;
                snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", (unsigned long long)offset,
                         (unsigned long long)(offset + length - 1), (unsigned long long)st.size);
        } else {
                offset = os ? strtoull(os, NULL, 10) : 0;
                length = ls ? strtoull(ls, NULL, 10) : 0;
                if (offset >= st.size)
                        length = 0, offset = st.size;
                if (ls && !length) /* limit=0: nothing */
                        offset = st.size;
        }
        if (offset >= st.size) {
                ab_manager_use_end(r->srv->mgr, &use);
                struct MHD_Response *resp =
                    MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
                MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
                return resp_send(r, status, resp);
        }
        const char *const hdr[] = {"Content-Range", cr, NULL, NULL};
        return resp_box_file(r, &use, path, offset, length, status, *cr ? hdr : NULL);
}

/* ---- upload (multipart: a "metadata" part, then its "file" part) -------- */

enum MHD_Result route_osb_upload(ab_req *r, const char *id)
{
        if (r->upload_failed)
                return osb_error(r, 500, "RUNTIME_ERROR", "cannot spool the upload");
        _cleanup_free_ char *delim = kit_multipart_delim(req_header(r, "Content-Type"));
        if (!delim)
                return osb_error(r, 400, "INVALID_REQUEST_BODY",
                                 "expected multipart/form-data with a boundary");
        if (!r->upload_len)
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "empty body");
        void *map = mmap(NULL, r->upload_len, PROT_READ, MAP_PRIVATE, r->upload_fd, 0);
        if (map == MAP_FAILED)
                return osb_error(r, 500, "RUNTIME_ERROR", "mmap: %s", strerror(errno));
        kit_part *parts;
        size_t n;
        ab_err *e = NULL;
        if (kit_multipart_split(map, r->upload_len, delim, UPLOAD_PARTS_MAX, &parts, &n, &e) < 0) {
                munmap(map, r->upload_len);
                return execd_err(r, e);
        }
        ab_use u;
        enum MHD_Result ret;
        if (execd_begin_use(r, id, &u, &ret) < 0) {
                kit_parts_free(parts, n);
                munmap(map, r->upload_len);
                return ret;
        }
        int rc = 0;
        size_t files = 0;
        json_t *meta = NULL;
        for (size_t i = 0; i < n && rc == 0; i++) {
                const char *name = parts[i].name ? parts[i].name : "";
                if (!strcmp(name, "metadata")) {
                        json_decref(meta);
                        meta = json_loadb(parts[i].data, parts[i].len, 0, NULL);
                        if (!json_is_object(meta))
                                rc = ab_err_set(&e, AB_E_INVALID, 0, "metadata: not a JSON object");
                        continue;
                }
                if (strcmp(name, "file"))
                        continue;
                const char *path = json_string_value(json_object_get(meta, "path"));
                uint32_t mode = 0;
                if (!path || !*path) {
                        rc = ab_err_set(&e, AB_E_INVALID, 0,
                                        "metadata.path: required before each file part");
                        break;
                }
                if (mode_of(json_object_get(meta, "mode"), &mode) < 0) {
                        rc = ab_err_set(&e, AB_E_INVALID, 0,
                                        "metadata.mode: octal digits, e.g. 644");
                        break;
                }
                int fd = ab_manager_use_connect(r->srv->mgr, &u, &e);
                rc = fd < 0 ? -1
                            : abc_write(fd, path, parts[i].data, parts[i].len, -1, ABC_W_MKPARENTS,
                                        mode, &e);
                if (fd >= 0)
                        close(fd);
                if (rc == 0 && (json_string_value(json_object_get(meta, "owner")) ||
                                json_string_value(json_object_get(meta, "group")))) {
                        json_t *perm = json_deep_copy(meta);
                        json_object_del(perm, "mode"); /* set by the write already */
                        rc = set_perm(r->srv, &u, path, perm, false, &e);
                        json_decref(perm);
                }
                files++;
                json_decref(meta);
                meta = NULL;
        }
        json_decref(meta);
        ab_manager_use_end(r->srv->mgr, &u);
        kit_parts_free(parts, n);
        munmap(map, r->upload_len);
        if (rc == 0 && !files)
                rc = ab_err_set(&e, AB_E_INVALID, 0, "no file part (expected metadata + file)");
        if (rc < 0)
                return execd_err(r, e); /* a full disk is 507 there */
        return execd_ok(r);
}
