/* files.c - AIO's file calls (/v1/file/...) through the manager's file
 * doors: every path is the box's, resolved by its init inside the box (no
 * host path is ever opened), each call a use of the box. Errors carry AIO's
 * FileOperationError as data: {path, operation, message, error_type,
 * retryable}. Bounded: a read or replace at most READ_MAX bytes, a listing
 * LIST_MAX entries, a search SEARCH_FILES_MAX files. */
#include "fronts/aio/aio_int.h"

#include "base/buf.h"
#include "base/codec.h"
#include "base/util.h"
#include "http/connectrpc.h"
#include "kit/files.h"
#include "kit/status.h"

#include <ctype.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#define READ_MAX         (16u << 20)
#define LIST_MAX         10000
#define LIST_DEPTH_MAX   32
#define SEARCH_FILES_MAX 20000
#define GREP_BATCH_BYTES (512u << 10)
#define GREP_RESULTS_MAX 10000

/* ---- errors ---------------------------------------------------------------- */

static const char *error_type(ab_code c)
{
        switch (c) {
        case AB_E_NOT_FOUND:
                return "not_found";
        case AB_E_PERMISSION:
                return "permission_denied";
        case AB_E_INVALID:
                return "invalid_argument";
        case AB_E_LIMIT:
                return "no_space";
        case AB_E_UNAVAILABLE:
        case AB_E_TIMEOUT:
                return "unavailable";
        default:
                return "internal_error";
        }
}

/* Answers e (freed) for operation op on path. */
static enum MHD_Result file_err(ab_req *r, ab_err *e, const char *path, const char *op)
{
        bool retry = e->code == AB_E_UNAVAILABLE || e->code == AB_E_TIMEOUT;
        json_t *d =
            json_pack("{s:s,s:s,s:s,s:s,s:b}", "path", path ? path : "", "operation", op, "message",
                      e->msg, "error_type", error_type(e->code), "retryable", retry);
        enum MHD_Result ret = aio_fail(r, kit_file_status(e->code), d, "%s", e->msg);
        ab_err_free(&e);
        return ret;
}

static enum MHD_Result bad_field(ab_req *r, ab_err *e)
{
        enum MHD_Result ret = aio_fail(r, 422, NULL, "%s", e->msg);
        ab_err_free(&e);
        return ret;
}

/* A required absolute path field of b. */
static int path_field(json_t *b, const char *name, const char **out, ab_err **err)
{
        *out = NULL;
        if (aio_opt_str(b, name, out, err) < 0)
                return -1;
        if (!*out || !**out)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: required", name);
        if ((*out)[0] != '/')
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be an absolute path", name);
        return 0;
}

/* A file call: its body, its path field (within the body) and a use of
 * the box, held until end_use. */
typedef struct file_call {
        ab_req *r;
        json_t *b;
        const char *path;
        ab_use u;
        bool held;
} file_call;

/* Ends fc's use of the box (once). */
static void end_use(file_call *fc)
{
        if (fc->held)
                ab_manager_use_end(fc->r->srv->mgr, &fc->u);
        fc->held = false;
}

/* Ends fc's use on a bad field e (freed): 422. */
static enum MHD_Result bad_call(file_call *fc, ab_err *e)
{
        end_use(fc);
        return bad_field(fc->r, e);
}

/* What a file call does once begun: answers it, having ended fc's use
 * (the body, b, holds path, and is released after the answer). */
typedef enum MHD_Result (*file_fn)(ab_req *r, file_call *fc, json_t *b, const char *path);

/* Runs fn as the file call of r: reads the body, its path field name and
 * begins a use of the box (answering a failure of these itself), then
 * releases what fn left. */
static enum MHD_Result file_call_run(ab_req *r, const char *name, file_fn fn)
{
        file_call fc = {.r = r};
        enum MHD_Result ret;
        if (aio_body(r, &fc.b, &ret) < 0)
                return ret;
        ab_err *e = NULL;
        if (path_field(fc.b, name, &fc.path, &e) < 0) {
                ret = bad_field(r, e);
        } else if (aio_use(r, &fc.u, &ret) == 0) {
                fc.held = true;
                ret = fn(r, &fc, fc.b, fc.path);
                end_use(&fc);
        }
        json_decref(fc.b);
        return ret;
}

/* ---- read, write, replace ----------------------------------------------------- */

static int buf_out(void *ud, int stream, const void *buf, size_t len)
{
        (void)stream;
        ab_buf *b = ud;
        if (b->n + len > READ_MAX)
                return -1;
        ab_buf_add(b, buf, len);
        return 0;
}

/* The whole file into *b (at most READ_MAX bytes, else AB_E_LIMIT). */
static int read_all(ab_req *r, ab_use *u, const char *path, ab_buf *b, ab_err **err)
{
        abc_stat st = {0};
        if (ab_manager_file_stat(r->srv->mgr, u, path, false, &st, err) < 0)
                return -1;
        bool dir = st.type == ABC_DIR;
        uint64_t size = st.size;
        abc_stat_clear(&st);
        if (dir)
                return ab_err_set(err, AB_E_INVALID, 0, "%s is a directory", path);
        if (size > READ_MAX)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "%s holds %llu bytes: more than the %u this call reads (use "
                                  "/v1/file/download)",
                                  path, (unsigned long long)size, READ_MAX);
        return ab_manager_file_read(r->srv->mgr, u, path, 0, READ_MAX, buf_out, b, err);
}

/* POST /v1/file/read {file, start_line?, end_line?}: {content, file}. */
static enum MHD_Result read_call(ab_req *r, file_call *fc, json_t *b, const char *path)
{
        ab_err *e = NULL;
        int64_t start = 0, end = -1;
        if (aio_opt_int(b, "start_line", 0, INT32_MAX, &start, &e) < 0 ||
            aio_opt_int(b, "end_line", 0, INT32_MAX, &end, &e) < 0) {
                return bad_call(fc, e);
        }
        _cleanup_buf_ ab_buf data = {0};
        int rc = read_all(r, &fc->u, path, &data, &e);
        end_use(fc);
        if (rc < 0) {
                return file_err(r, e, path, "read");
        }
        const char *p;
        size_t n;
        aio_lines_cut(data.p, data.n, start, end, &p, &n);
        return aio_ok(r, json_pack("{s:o,s:s}", "content", json_bytes(p, n), "file", path));
}

/* POST /v1/file/write {file, content, encoding?, append?, leading_newline?,
 * trailing_newline?}: {file, bytes_written}; parents are made. */
static enum MHD_Result write_call(ab_req *r, file_call *fc, json_t *b, const char *path)
{
        ab_err *e = NULL;
        const char *content = NULL, *enc = "utf-8";
        bool append = false, lead = false, trail = false;
        if (aio_opt_str(b, "content", &content, &e) < 0 ||
            aio_opt_str(b, "encoding", &enc, &e) < 0 ||
            aio_opt_bool(b, "append", &append, &e) < 0 ||
            aio_opt_bool(b, "leading_newline", &lead, &e) < 0 ||
            aio_opt_bool(b, "trailing_newline", &trail, &e) < 0 ||
            (!content && ab_err_set(&e, AB_E_INVALID, 0, "content: required") < 0) ||
            (strcmp(enc, "utf-8") && strcmp(enc, "base64") &&
             ab_err_set(&e, AB_E_INVALID, 0, "encoding: utf-8 or base64") < 0)) {
                return bad_call(fc, e);
        }
        _cleanup_buf_ ab_buf data = {0};
        if (!strcmp(enc, "base64")) {
                _cleanup_free_ char *raw = NULL;
                size_t n = 0;
                if (crpc_b64_decode(content, &raw, &n) < 0) {
                        end_use(fc);
                        return aio_fail(r, 422, NULL, "content: not valid base64");
                }
                ab_buf_add(&data, raw, n);
        } else {
                if (lead)
                        ab_buf_add(&data, "\n", 1);
                ab_buf_add(&data, content, strlen(content));
                if (trail)
                        ab_buf_add(&data, "\n", 1);
        }
        uint32_t flags = ABC_W_MKPARENTS | (append ? ABC_W_APPEND : 0);
        int rc = ab_manager_file_write(r->srv->mgr, &fc->u, path, data.p ? data.p : "", data.n, -1,
                                       flags, 0644, &e);
        end_use(fc);
        return rc < 0 ? file_err(r, e, path, "write")
                      : aio_ok(r, json_pack("{s:s,s:I}", "file", path, "bytes_written",
                                            (json_int_t)data.n));
}

/* POST /v1/file/replace {file, old_str, new_str}: every occurrence;
 * {file, replaced_count}. */
static enum MHD_Result replace_call(ab_req *r, file_call *fc, json_t *b, const char *path)
{
        ab_err *e = NULL;
        const char *from = NULL, *to = NULL;
        if (aio_opt_str(b, "old_str", &from, &e) < 0 || aio_opt_str(b, "new_str", &to, &e) < 0 ||
            ((!from || !*from || !to) &&
             ab_err_set(&e, AB_E_INVALID, 0, "old_str (not empty) and new_str: required") < 0)) {
                return bad_call(fc, e);
        }
        _cleanup_buf_ ab_buf data = {0}, out = {0};
        int rc = read_all(r, &fc->u, path, &data, &e);
        size_t count = 0, fl = strlen(from);
        if (rc == 0) {
                const char *p = data.p ? data.p : "", *lim = p + data.n, *m;
                while ((m = memmem(p, (size_t)(lim - p), from, fl))) {
                        ab_buf_add(&out, p, (size_t)(m - p));
                        ab_buf_add(&out, to, strlen(to));
                        p = m + fl;
                        count++;
                }
                ab_buf_add(&out, p, (size_t)(lim - p));
                if (out.n > READ_MAX)
                        rc = ab_err_set(&e, AB_E_INVALID, 0, "the result would exceed %u bytes",
                                        READ_MAX);
        }
        if (rc == 0 && count)
                rc = ab_manager_file_write(r->srv->mgr, &fc->u, path, out.p ? out.p : "", out.n, -1,
                                           0, 0644, &e);
        end_use(fc);
        return rc < 0 ? file_err(r, e, path, "replace")
                      : aio_ok(r, json_pack("{s:s,s:I}", "file", path, "replaced_count",
                                            (json_int_t)count));
}

/* ---- list, find, grep ---------------------------------------------------------- */

static char *join(const char *dir, const char *rel)
{
        size_t n = strlen(dir);
        return xasprintf("%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", rel);
}

static bool hidden(const char *rel)
{
        for (const char *p = rel; p; p = strchr(p, '/')) {
                if (*p == '/')
                        p++;
                if (*p == '.')
                        return true;
        }
        return false;
}

static json_t *info_json(const char *dir, const abc_dirent *d, bool perms)
{
        _cleanup_free_ char *full = join(dir, d->path);
        const char *name = kit_base_name(d->path);
        char when[AB_TIME_LEN];
        ab_time_rfc3339(d->st.mtime * 1000, false, when);
        json_t *j =
            json_pack("{s:s,s:s,s:b,s:I,s:s}", "name", name, "path", full, "is_directory",
                      d->st.type == ABC_DIR, "size", (json_int_t)d->st.size, "modified_time", when);
        const char *dot = strrchr(name, '.');
        json_object_set_new(j, "extension",
                            d->st.type != ABC_DIR && dot && dot != name ? json_string(dot)
                                                                        : json_null());
        if (perms) {
                char m[8];
                snprintf(m, sizeof(m), "%04o", d->st.mode & 07777);
                json_object_set_new(j, "permissions", json_string(m));
        }
        return j;
}

typedef struct sort_key {
        const char *by;
        bool desc;
} sort_key;

static _Thread_local sort_key sorting;

static int cmp_info(const void *a, const void *b)
{
        json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
        int c = 0;
        if (!strcmp(sorting.by, "size")) {
                json_int_t p = json_integer_value(json_object_get(x, "size"));
                json_int_t q = json_integer_value(json_object_get(y, "size"));
                c = (p > q) - (p < q);
        } else if (!strcmp(sorting.by, "modified")) {
                c = strcmp(json_string_value(json_object_get(x, "modified_time")),
                           json_string_value(json_object_get(y, "modified_time")));
        } else if (!strcmp(sorting.by, "type")) {
                c = json_is_true(json_object_get(y, "is_directory")) -
                    json_is_true(json_object_get(x, "is_directory"));
        }
        if (c == 0)
                c = strcmp(json_string_value(json_object_get(x, "path")),
                           json_string_value(json_object_get(y, "path")));
        return sorting.desc ? -c : c;
}

/* Whether the entry's extension is one of types (NULL: any). */
static bool type_ok(json_t *types, const char *rel)
{
        if (!types || !json_array_size(types))
                return true;
        const char *dot = strrchr(kit_base_name(rel), '.');
        size_t i;
        json_t *t;
        json_array_foreach(types, i, t)
        {
                const char *s = json_string_value(t);
                if (s && dot && (!strcmp(s, dot) || (s[0] != '.' && !strcmp(s, dot + 1))))
                        return true;
        }
        return false;
}

/* POST /v1/file/list {path, recursive?, show_hidden?, max_depth?,
 * file_types?, sort_by?, sort_desc?, include_permissions?}. */
static enum MHD_Result list_call(ab_req *r, file_call *fc, json_t *b, const char *path)
{
        ab_err *e = NULL;
        bool rec = false, show_hidden = true, desc = false, perms = false;
        int64_t depth = LIST_DEPTH_MAX;
        const char *by = "name";
        json_t *types = json_object_get(b, "file_types");
        if (aio_opt_bool(b, "recursive", &rec, &e) < 0 ||
            aio_opt_bool(b, "show_hidden", &show_hidden, &e) < 0 ||
            aio_opt_bool(b, "sort_desc", &desc, &e) < 0 ||
            aio_opt_bool(b, "include_permissions", &perms, &e) < 0 ||
            aio_opt_int(b, "max_depth", 1, LIST_DEPTH_MAX, &depth, &e) < 0 ||
            aio_opt_str(b, "sort_by", &by, &e) < 0 ||
            (types && !json_is_null(types) && !json_is_array(types) &&
             ab_err_set(&e, AB_E_INVALID, 0, "file_types: a list of extensions") < 0) ||
            (strcmp(by, "name") && strcmp(by, "size") && strcmp(by, "modified") &&
             strcmp(by, "type") &&
             ab_err_set(&e, AB_E_INVALID, 0, "sort_by: name, size, modified or type") < 0)) {
                return bad_call(fc, e);
        }
        abc_dirent *d = NULL;
        size_t n = 0;
        int rc = ab_manager_file_list(r->srv->mgr, &fc->u, path, rec ? (int)depth : 1, &d, &n, &e);
        end_use(fc);
        if (rc < 0) {
                return file_err(r, e, path, "list");
        }
        size_t cnt = 0;
        json_t **v = xcalloc(n ? n : 1, sizeof(json_t *));
        for (size_t i = 0; i < n && cnt < LIST_MAX; i++) {
                if (!show_hidden && hidden(d[i].path))
                        continue;
                if (d[i].st.type != ABC_DIR &&
                    !type_ok(json_is_array(types) ? types : NULL, d[i].path))
                        continue;
                v[cnt++] = info_json(path, &d[i], perms);
        }
        sorting = (sort_key){by, desc};
        qsort(v, cnt, sizeof(*v), cmp_info);
        json_t *files = json_array();
        size_t dirs = 0;
        for (size_t i = 0; i < cnt; i++) {
                dirs += json_is_true(json_object_get(v[i], "is_directory"));
                json_array_append_new(files, v[i]);
        }
        free(v);
        abc_dirents_free(d, n);
        return aio_ok(r, json_pack("{s:s,s:o,s:I,s:I,s:I}", "path", path, "files", files,
                                   "total_count", (json_int_t)cnt, "directory_count",
                                   (json_int_t)dirs, "file_count", (json_int_t)(cnt - dirs)));
}

/* Whether glob matches rel (a path under the searched directory): a glob
 * without '/' is matched against the entry's name, as `find -name`; one
 * with '/' against the relative path ("**" / any depth). */
static bool glob_ok(const char *glob, const char *rel)
{
        if (!strchr(glob, '/'))
                return fnmatch(glob, kit_base_name(rel), 0) == 0;
        if (fnmatch(glob, rel, 0) == 0)
                return true;
        return !strncmp(glob, "**/", 3) && fnmatch(glob + 3, rel, 0) == 0;
}

/* The regular files under dir (depth levels; a file: itself). */
static int files_under(ab_req *r, ab_use *u, const char *dir, int depth, abc_dirent **d, size_t *n,
                       bool *is_file, ab_err **err)
{
        abc_stat st = {0};
        *d = NULL;
        *n = 0;
        if (ab_manager_file_stat(r->srv->mgr, u, dir, false, &st, err) < 0)
                return -1;
        *is_file = st.type == ABC_FILE;
        abc_stat_clear(&st);
        if (*is_file)
                return 0;
        return ab_manager_file_list(r->srv->mgr, u, dir, depth, d, n, err);
}

/* POST /v1/file/find {path, glob}: {path, files} (the files' paths). */
static enum MHD_Result find_call(ab_req *r, file_call *fc, json_t *b, const char *path)
{
        ab_err *e = NULL;
        const char *glob = NULL;
        if (aio_opt_str(b, "glob", &glob, &e) < 0 ||
            ((!glob || !*glob) && ab_err_set(&e, AB_E_INVALID, 0, "glob: required") < 0)) {
                return bad_call(fc, e);
        }
        abc_dirent *d = NULL;
        size_t n = 0;
        int rc = ab_manager_file_list(r->srv->mgr, &fc->u, path, LIST_DEPTH_MAX, &d, &n, &e);
        end_use(fc);
        if (rc < 0) {
                return file_err(r, e, path, "find");
        }
        json_t *files = json_array();
        for (size_t i = 0; i < n && json_array_size(files) < SEARCH_FILES_MAX; i++) {
                if (d[i].st.type != ABC_FILE || !glob_ok(glob, d[i].path))
                        continue;
                _cleanup_free_ char *full = join(path, d[i].path);
                json_array_append_new(files, json_bytes(full, strlen(full)));
        }
        abc_dirents_free(d, n);
        return aio_ok(r, json_pack("{s:s,s:o}", "path", path, "files", files));
}

/* A list of globs; each string. */
static bool any_glob(json_t *globs, const char *rel)
{
        size_t i;
        json_t *g;
        json_array_foreach(globs, i, g)
        {
                const char *s = json_string_value(g);
                if (s && (glob_ok(s, rel) || fnmatch(s, rel, FNM_LEADING_DIR) == 0))
                        return true;
        }
        return false;
}

typedef struct grep_acc {
        const char *const *shown;
        json_t *matches;
        int64_t skip, left;
        bool *seen;
        size_t base;
} grep_acc;

static int on_match(void *ud, size_t index, uint64_t line, const char *text, size_t len)
{
        grep_acc *g = ud;
        g->seen[g->base + index] = true;
        if (g->skip > 0) {
                g->skip--;
                return 0;
        }
        if (g->left <= 0)
                return 0;
        g->left--;
        json_array_append_new(g->matches,
                              json_pack("{s:s,s:I,s:o}", "file", g->shown[index], "line_number",
                                        (json_int_t)line, "line_content", json_bytes(text, len)));
        return 0;
}

typedef struct grep_opts {
        const char *pattern;
        bool icase, fixed, rec;
        int64_t max, offset, size_max;
        json_t *include, *exclude;
} grep_opts;

static int grep_parse(json_t *b, grep_opts *o, ab_err **err)
{
        *o = (grep_opts){.max = 500, .rec = true, .size_max = 1 << 20};
        const char *size = NULL;
        o->include = json_object_get(b, "include");
        o->exclude = json_object_get(b, "exclude");
        if (aio_opt_str(b, "pattern", &o->pattern, err) < 0 ||
            aio_opt_bool(b, "case_insensitive", &o->icase, err) < 0 ||
            aio_opt_bool(b, "fixed_strings", &o->fixed, err) < 0 ||
            aio_opt_bool(b, "recursive", &o->rec, err) < 0 ||
            aio_opt_int(b, "max_results", 1, GREP_RESULTS_MAX, &o->max, err) < 0 ||
            aio_opt_int(b, "offset", 0, GREP_RESULTS_MAX, &o->offset, err) < 0 ||
            aio_opt_str(b, "max_file_size", &size, err) < 0)
                return -1;
        if (!o->pattern || !*o->pattern)
                return ab_err_set(err, AB_E_INVALID, 0, "pattern: required");
        if (size && (o->size_max = aio_size_parse(size)) < 0)
                return ab_err_set(err, AB_E_INVALID, 0, "max_file_size: e.g. 1M, 500K or 1024");
        if ((o->include && !json_is_null(o->include) && !json_is_array(o->include)) ||
            (o->exclude && !json_is_null(o->exclude) && !json_is_array(o->exclude)))
                return ab_err_set(err, AB_E_INVALID, 0, "include, exclude: lists of globs");
        return 0;
}

/* Searches files (paths in the box) in batches as init takes them. */
static int grep_files(ab_req *r, ab_use *u, const grep_opts *o, const char *const *files, size_t nf,
                      grep_acc *g, bool *truncated, ab_err **err)
{
        size_t i = 0;
        while (i < nf && g->left > 0) {
                size_t j = i, bytes = 0;
                while (j < nf &&
                       (j == i || bytes + abc_grep_path_cost(files[j]) <= GREP_BATCH_BYTES))
                        bytes += abc_grep_path_cost(files[j++]);
                abc_grep_req q = {.pattern = o->pattern,
                                  .pattern_len = strlen(o->pattern),
                                  .literal = o->fixed,
                                  .case_sensitive = !o->icase,
                                  .paths = files + i,
                                  .n_paths = j - i,
                                  .size_max = (uint64_t)o->size_max,
                                  .count = (uint32_t)(g->skip + g->left)};
                abc_grep_res res = {0};
                g->shown = files + i;
                g->base = i;
                if (ab_manager_file_grep(r->srv->mgr, u, &q, on_match, g, &res, err) < 0)
                        return -1;
                if (res.truncated || res.timed_out)
                        *truncated = true;
                i = j;
        }
        if (i < nf)
                *truncated = true;
        return 0;
}

/* POST /v1/file/grep {path, pattern, include?, exclude?, case_insensitive?,
 * fixed_strings?, max_results?, offset?, max_file_size?, recursive?}. */
static enum MHD_Result grep_call(ab_req *r, file_call *fc, json_t *b, const char *path)
{
        ab_err *e = NULL;
        grep_opts o;
        if (grep_parse(b, &o, &e) < 0) {
                return bad_call(fc, e);
        }
        abc_dirent *d = NULL;
        size_t n = 0, nf = 0;
        bool is_file = false, truncated = false;
        int rc = files_under(r, &fc->u, path, o.rec ? LIST_DEPTH_MAX : 1, &d, &n, &is_file, &e);
        char **files = xcalloc(n + 2, sizeof(char *));
        if (rc == 0 && is_file)
                files[nf++] = xstrdup(path);
        for (size_t i = 0; rc == 0 && i < n; i++) {
                if (d[i].st.type != ABC_FILE || d[i].st.size > (uint64_t)o.size_max)
                        continue;
                if (json_is_array(o.include) && json_array_size(o.include) &&
                    !any_glob(o.include, d[i].path))
                        continue;
                if (json_is_array(o.exclude) && any_glob(o.exclude, d[i].path))
                        continue;
                if (nf == SEARCH_FILES_MAX) {
                        truncated = true;
                        break;
                }
                files[nf++] = join(path, d[i].path);
        }
        abc_dirents_free(d, n);
        bool *seen = xcalloc(nf + 1, sizeof(bool));
        json_t *matches = json_array();
        grep_acc g = {.matches = matches, .skip = o.offset, .left = o.max, .seen = seen};
        if (rc == 0)
                rc = grep_files(r, &fc->u, &o, (const char *const *)files, nf, &g, &truncated, &e);
        end_use(fc);
        size_t matched = 0;
        for (size_t i = 0; i < nf; i++)
                matched += seen[i];
        free(seen);
        ab_strvfreep(&files);
        if (rc < 0) {
                json_decref(matches);
                return file_err(r, e, path, "grep");
        }
        if (g.left <= 0)
                truncated = true;
        return aio_ok(r, json_pack("{s:s,s:s,s:o,s:I,s:I,s:I,s:b}", "path", path, "pattern",
                                   o.pattern, "matches", matches, "match_count",
                                   (json_int_t)json_array_size(matches), "files_searched",
                                   (json_int_t)nf, "files_matched", (json_int_t)matched,
                                   "truncated", truncated));
}

/* ---- the file calls' routes -------------------------------------------------- */

enum MHD_Result aio_file_read(ab_req *r)
{
        return file_call_run(r, "file", read_call);
}

enum MHD_Result aio_file_write(ab_req *r)
{
        return file_call_run(r, "file", write_call);
}

enum MHD_Result aio_file_replace(ab_req *r)
{
        return file_call_run(r, "file", replace_call);
}

enum MHD_Result aio_file_list(ab_req *r)
{
        return file_call_run(r, "path", list_call);
}

enum MHD_Result aio_file_find(ab_req *r)
{
        return file_call_run(r, "path", find_call);
}

enum MHD_Result aio_file_grep(ab_req *r)
{
        return file_call_run(r, "path", grep_call);
}

/* ---- download ---------------------------------------------------------------- */

/* GET /v1/file/download?path=: the file's bytes, as an attachment. */
enum MHD_Result aio_file_download(ab_req *r)
{
        const char *path = req_query(r, "path");
        if (!path || path[0] != '/')
                return aio_fail(r, 422, NULL, "path: required, an absolute path");
        ab_use u;
        enum MHD_Result ret;
        if (aio_use(r, &u, &ret) < 0)
                return ret;
        abc_stat st = {0};
        ab_err *e = NULL;
        int rc = ab_manager_file_stat(r->srv->mgr, &u, path, false, &st, &e);
        if (rc == 0 && st.type == ABC_DIR)
                rc = ab_err_set(&e, AB_E_INVALID, 0, "%s is a directory", path);
        abc_stat_clear(&st);
        if (rc < 0) {
                ab_manager_use_end(r->srv->mgr, &u);
                return file_err(r, e, path, "download");
        }
        /* the name as a token of safe characters: no quoting games */
        _cleanup_free_ char *name = xstrdup(kit_base_name(path));
        for (char *p = name; *p; p++)
                if (!isalnum((unsigned char)*p) && !strchr("._-", *p))
                        *p = '_';
        _cleanup_free_ char *cd = xasprintf("attachment; filename=\"%s\"", name);
        const char *const hdr[] = {"Content-Disposition", cd, NULL, NULL};
        return resp_box_file(r, &u, path, 0, 0, 200, hdr);
}
