/* OpenSandbox's execd file calls under /opensandbox/execd/{id}: files
 * (info, upload, download, search, replace, move, permissions, delete) and
 * directories (list, create, delete). Everything happens inside the box
 * through the manager's file doors (init's file operations, fd-relative):
 * never as a user's exec. */
#include "fronts/opensandbox/front_execd_int.h"
#include "kit/files.h"
#include "kit/multipart.h"
#include "base/log.h"
#include "base/codec.h"

#include <ctype.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/mman.h>

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

/* A FileInfo: owner and group are names from the box's databases, or the
 * ids as numbers where it has no entry. Init keeps no birth time, so
 * created_at is the modification time. */
static json_t *file_info(const char *path, const abc_stat *st, const char *owner, const char *group)
{
        char mt[AB_TIME_LEN], ms[8], ou[16], gr[16];
        ab_time_rfc3339(st->mtime * 1000, true, mt);
        snprintf(ms, sizeof(ms), "%o", st->mode & 07777);
        snprintf(ou, sizeof(ou), "%u", st->uid);
        snprintf(gr, sizeof(gr), "%u", st->gid);
        if (!st->has_ids)
                ou[0] = gr[0] = 0;
        return json_pack("{s:o,s:s,s:I,s:s,s:s,s:o,s:o,s:I}", "path",
                         json_bytes(path, strlen(path)), "type",
                         kit_ftype_name(&kit_ftypes_execd, st->type), "size", (json_int_t)st->size,
                         "modified_at", mt, "created_at", mt, "owner",
                         json_bytes(owner ? owner : ou, strlen(owner ? owner : ou)), "group",
                         json_bytes(group ? group : gr, strlen(group ? group : gr)), "mode",
                         (json_int_t)strtol(ms, NULL, 10));
}

/* FileInfo of each path (as given: relative ones are under /workspace),
 * from the manager's stat door (internal work: never an exec); *out maps
 * path -> FileInfo. Paths that do not exist are absent from it. */
static int stat_paths(ab_server *s, ab_use *u, const char *const *paths, size_t n, json_t **out,
                      ab_err **err)
{
        *out = json_object();
        for (size_t i = 0; i < n; i++) {
                abc_stat st = {0};
                ab_err *e = NULL;
                if (ab_manager_file_stat(s->mgr, u, paths[i], true, &st, &e) < 0) {
                        if (e->code == AB_E_NOT_FOUND) { /* missing: left out */
                                ab_err_free(&e);
                                continue;
                        }
                        if (err && !*err)
                                *err = e;
                        else
                                ab_err_free(&e);
                        json_decref(*out);
                        *out = NULL;
                        return -1;
                }
                json_object_set_new(*out, paths[i], file_info(paths[i], &st, st.owner, st.group));
                abc_stat_clear(&st);
        }
        return 0;
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
                rc = ab_manager_file_delete(r->srv->mgr, &u, json_string_value(p), recursive, &e);
                if (rc < 0)
                        break;
        }
        ab_manager_use_end(r->srv->mgr, &u);
        json_decref(paths);
        if (rc < 0)
                return execd_err(r, e);
        return execd_ok(r);
}

/* chmod and chown of one path through the manager's doors (init's CHMOD
 * and CHOWN; never a user's exec). */
static int set_perm(ab_server *s, ab_use *u, const char *path, json_t *perm, bool mode_given,
                    ab_err **err)
{
        uint32_t mode = 0755;
        if (mode_of(json_object_get(perm, "mode"), &mode) < 0)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: mode must be octal digits, e.g. 644",
                                  path);
        if ((mode_given || json_object_get(perm, "mode")) &&
            ab_manager_file_chmod(s->mgr, u, path, mode, err) < 0)
                return -1;
        const char *owner = json_string_value(json_object_get(perm, "owner"));
        const char *group = json_string_value(json_object_get(perm, "group"));
        if (owner && !*owner)
                owner = NULL;
        if (group && !*group)
                group = NULL;
        if ((owner || group) && ab_manager_file_chown(s->mgr, u, path, owner, group, err) < 0)
                return -1;
        return 0;
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
                        rc = ab_manager_file_mkdir(r->srv->mgr, &u, path, true, mode, &e);
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
                rc = ab_manager_file_rename(r->srv->mgr, &u, src, dest, &e);
                if (rc < 0)
                        break;
        }
        ab_manager_use_end(r->srv->mgr, &u);
        json_decref(body);
        if (rc < 0)
                return execd_err(r, e);
        return execd_ok(r);
}

/* Owner and group names by (uid, gid), learnt from one named stat of an
 * entry that has them: a listing has few distinct pairs. */
typedef struct name_cache {
        struct name_ent {
                uint32_t uid, gid;
                char *owner, *group;
        } * v;
        size_t n;
} name_cache;

static const struct name_ent *names_of(ab_server *s, ab_use *u, name_cache *c, const char *path,
                                       const abc_stat *st)
{
        for (size_t i = 0; i < c->n; i++)
                if (c->v[i].uid == st->uid && c->v[i].gid == st->gid)
                        return &c->v[i];
        abc_stat named = {0};
        ab_err *e = NULL;
        if (ab_manager_file_stat(s->mgr, u, path, true, &named, &e) < 0) {
                ab_err_free(&e); /* gone meanwhile: numbers, asked again next time */
                return NULL;
        }
        c->v = xrealloc(c->v, xmul(c->n + 1, sizeof(*c->v)));
        c->v[c->n] = (struct name_ent){st->uid, st->gid, steal_pointer(&named.owner),
                                       steal_pointer(&named.group)};
        abc_stat_clear(&named);
        return &c->v[c->n++];
}

static void name_cache_clear(name_cache *c)
{
        for (size_t i = 0; i < c->n; i++) {
                free(c->v[i].owner);
                free(c->v[i].group);
        }
        free(c->v);
}

/* The entries under dir (depth levels) as FileInfo objects, those whose
 * name (or, for a pattern with '/', relative path) matches pattern: one
 * listing, and a named stat per distinct owner (never a user's exec). */
static int list_infos(ab_server *s, ab_use *u, const char *dir, int depth, const char *pattern,
                      json_t **out, ab_err **err)
{
        *out = NULL;
        abc_dirent *ents = NULL;
        size_t n = 0;
        abc_stat st = {0};
        if (ab_manager_file_stat(s->mgr, u, dir, false, &st, err) < 0)
                return -1;
        bool is_dir = st.type == ABC_DIR;
        abc_stat_clear(&st);
        if (!is_dir)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "%s is not a directory (a symlink is not followed)", dir);
        if (ab_manager_file_list(s->mgr, u, dir, depth, &ents, &n, err) < 0)
                return -1;
        size_t dl = strlen(dir);
        while (dl > 1 && dir[dl - 1] == '/')
                dl--;
        name_cache names = {0};
        *out = json_array();
        for (size_t i = 0; i < n; i++) {
                const char *rel = ents[i].path;
                const char *base = strrchr(rel, '/');
                base = base ? base + 1 : rel;
                const char *subject = pattern && strchr(pattern, '/') ? rel : base;
                if (pattern && *pattern && strcmp(pattern, "**") &&
                    fnmatch(pattern, subject, 0) != 0)
                        continue;
                _cleanup_free_ char *full = dl == 1 && dir[0] == '/'
                                                ? xasprintf("/%s", rel)
                                                : xasprintf("%.*s/%s", (int)dl, dir, rel);
                const struct name_ent *ne =
                    ents[i].st.has_ids ? names_of(s, u, &names, full, &ents[i].st) : NULL;
                json_array_append_new(*out, file_info(full, &ents[i].st, ne ? ne->owner : NULL,
                                                      ne ? ne->group : NULL));
        }
        name_cache_clear(&names);
        abc_dirents_free(ents, n);
        return 0;
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
        if (ab_manager_file_stat(s->mgr, u, path, false, &st, err) < 0)
                return -1;
        abc_ftype type = st.type;
        uint32_t mode = st.mode;
        abc_stat_clear(&st);
        if (type != ABC_FILE)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: not a regular file", path);
        read_buf rb = {0};
        int rc = ab_manager_file_read(s->mgr, u, path, 0, 0, read_into, &rb, err);
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
        if (*count)
                rc = ab_manager_file_write(s->mgr, u, path, out.p ? out.p : "", out.n, -1, 0,
                                           mode & 07777, err);
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
        int rc = ab_manager_file_stat(r->srv->mgr, &use, path, false, &st, &e);
        free(st.link);
        free(st.owner);
        free(st.group);
        st.link = st.owner = st.group = NULL;
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
                rc = ab_manager_file_write(r->srv->mgr, &u, path, parts[i].data, parts[i].len, -1,
                                           ABC_W_MKPARENTS, mode, &e);
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
