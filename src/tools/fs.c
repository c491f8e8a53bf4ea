/* fs.c - the file tools (ls, glob, read_file, write_file, str_replace) and
 * what they share with grep: paths, DeerFlow's ignore list and glob matching
 * (sandbox/search.py), tree listing and the per-file lock table.
 *
 * Every file access is a request to the box's init: paths resolve inside the
 * box, so ".." and symlinks cannot leave it, and nothing here opens a host
 * path. Path strings are only tidied for display and lock keys. */
#include "tools/tools_int.h"

#include <fnmatch.h>
#include <pthread.h>

/* ---- paths ---- */

const char *path_for_box(const char *p)
{
        size_t n = strlen(TOOL_WORKDIR);
        if (strncmp(p, TOOL_WORKDIR, n) == 0 && (p[n] == 0 || p[n] == '/')) {
                p += n;
                while (*p == '/')
                        p++;
                return *p ? p : ".";
        }
        return p;
}

char *path_display(const char *p)
{
        _cleanup_buf_ ab_buf b = {0};
        if (p[0] != '/')
                ab_buf_puts(&b, TOOL_WORKDIR);
        const char *s = p;
        while (*s) {
                while (*s == '/')
                        s++;
                const char *e = strchrnul(s, '/');
                size_t len = (size_t)(e - s);
                if (len && !(len == 1 && s[0] == '.')) {
                        ab_buf_add(&b, "/", 1);
                        ab_buf_add(&b, s, len);
                }
                s = e;
        }
        if (b.n == 0)
                ab_buf_add(&b, "/", 1);
        return ab_buf_steal(&b);
}

char *path_join(const char *parent, const char *rel)
{
        size_t n = strlen(parent);
        if (n && parent[n - 1] == '/')
                return xasprintf("%s%s", parent, rel);
        return xasprintf("%s/%s", parent, rel);
}

/* ---- DeerFlow's ignore list and glob matching ---- */

static const char *const ignore_names[] = {
    ".git",        ".svn",         ".hg",
    ".bzr",        "node_modules", "__pycache__",
    ".venv",       "venv",         ".env",
    "env",         ".tox",         ".nox",
    ".eggs",       "*.egg-info",   "site-packages",
    "dist",        "build",        ".next",
    ".nuxt",       ".output",      ".turbo",
    "target",      "out",          ".idea",
    ".vscode",     "*.swp",        "*.swo",
    "*~",          ".project",     ".classpath",
    ".settings",   ".DS_Store",    "Thumbs.db",
    "desktop.ini", "*.lnk",        "*.log",
    "*.tmp",       "*.temp",       ".upload-*.part",
    "*.bak",       "*.cache",      ".cache",
    "logs",        ".coverage",    "coverage",
    ".nyc_output", "htmlcov",      ".pytest_cache",
    ".mypy_cache", ".ruff_cache",
};

bool ignored_name(const char *name)
{
        for (size_t i = 0; i < AB_ARRAY_LEN(ignore_names); i++)
                if (fnmatch(ignore_names[i], name, FNM_NOESCAPE) == 0)
                        return true;
        return false;
}

bool ignored_path(const char *rel)
{
        _cleanup_free_ char *p = xstrdup(rel);
        char *save = NULL;
        for (char *seg = strtok_r(p, "/", &save); seg; seg = strtok_r(NULL, "/", &save))
                if (ignored_name(seg))
                        return true;
        return false;
}

/* Splits a path into its parts as PurePosixPath does: "//" and "." vanish, a
 * leading "/" is a part of its own. */
static char **split_parts(const char *p, size_t *n)
{
        char **v = xcalloc(strlen(p) + 2, sizeof(char *));
        size_t k = 0;
        if (p[0] == '/')
                v[k++] = xstrdup("/");
        const char *s = p;
        while (*s) {
                while (*s == '/')
                        s++;
                const char *e = strchrnul(s, '/');
                size_t len = (size_t)(e - s);
                if (len && !(len == 1 && s[0] == '.'))
                        v[k++] = xstrndup(s, len);
                s = e;
        }
        *n = k;
        return v;
}

static bool seg_match(const char *pat, const char *name)
{
        return fnmatch(pat, name, FNM_NOESCAPE) == 0;
}

bool glob_path_matches(const char *pattern, const char *rel)
{
        size_t np, nr;
        _cleanup_strv_ char **pp = split_parts(pattern, &np);
        _cleanup_strv_ char **rp = split_parts(rel, &nr);
        if (np == 0 || nr == 0)
                return false;
        if (!strchr(pattern, '/')) /* the basename, at any depth */
                return seg_match(pp[0], rp[nr - 1]);
        /* Anchored at the root; "**" spans zero or more whole segments. */
        _cleanup_free_ bool *reach = xcalloc(nr + 1, sizeof(bool));
        _cleanup_free_ bool *next = xcalloc(nr + 1, sizeof(bool));
        reach[0] = true;
        for (size_t i = 0; i < np; i++) {
                bool any = false;
                memset(next, 0, (nr + 1) * sizeof(bool));
                if (strcmp(pp[i], "**") == 0) {
                        size_t first = nr + 1;
                        for (size_t j = 0; j <= nr; j++)
                                if (reach[j] && j < first)
                                        first = j;
                        for (size_t j = first; j <= nr; j++)
                                next[j] = any = true;
                } else {
                        for (size_t j = 0; j < nr; j++)
                                if (reach[j] && seg_match(pp[i], rp[j]))
                                        next[j + 1] = any = true;
                }
                if (!any)
                        return false;
                memcpy(reach, next, (nr + 1) * sizeof(bool));
        }
        return reach[nr];
}

/* ---- listing and reading through init ---- */

static void dirents_append(abc_dirent **v, size_t *n, size_t *cap, abc_dirent *add, size_t nadd,
                           const char *prefix)
{
        for (size_t i = 0; i < nadd; i++) {
                if (*n == *cap) {
                        *cap = *cap ? xmul(*cap, 2) : 64;
                        *v = xrealloc(*v, xmul(*cap, sizeof(**v)));
                }
                abc_dirent d = add[i];
                if (prefix) {
                        char *p = path_join(prefix, d.path);
                        free(d.path);
                        d.path = p;
                }
                (*v)[(*n)++] = d;
                add[i] = (abc_dirent){0};
        }
}

static int list_one(tool_ctx *c, const char *dir, int depth, abc_dirent **out, size_t *n,
                    ab_err **err)
{
        return tool_list(c, dir, depth, out, n, err);
}

static int dirent_cmp(const void *a, const void *b)
{
        return strcmp(((const abc_dirent *)a)->path, ((const abc_dirent *)b)->path);
}

int list_tree(tool_ctx *c, const char *dir, abc_dirent **out, size_t *n, ab_err **err)
{
        ab_err *e = NULL;
        if (list_one(c, dir, 64, out, n, &e) == 0)
                return 0;
        if (e->code != AB_E_LIMIT) {
                if (err && !*err)
                        *err = e;
                else
                        ab_err_free(&e);
                return -1;
        }
        ab_err_free(&e);
        /* Too large for one answer: a directory per request, pruning what the
         * ignore list hides anyway. */
        abc_dirent *v = NULL;
        size_t nv = 0, cap = 0;
        char **queue = xcalloc(1, sizeof(char *));
        size_t qn = 1, qcap = 1, qi = 0;
        queue[0] = NULL; /* the root itself */
        int r = 0;
        while (qi < qn) {
                char *rel = queue[qi++];
                _cleanup_free_ char *full = rel ? path_join(dir, rel) : xstrdup(dir);
                abc_dirent *d = NULL;
                size_t nd = 0;
                if (list_one(c, full, 1, &d, &nd, err) < 0) {
                        free(rel);
                        r = -1;
                        break;
                }
                for (size_t i = 0; i < nd; i++) {
                        if (d[i].st.type != ABC_DIR || ignored_name(d[i].path))
                                continue;
                        if (qn == qcap) {
                                qcap = xmul(qcap, 2);
                                queue = xrealloc(queue, xmul(qcap, sizeof(char *)));
                        }
                        queue[qn++] = rel ? path_join(rel, d[i].path) : xstrdup(d[i].path);
                }
                dirents_append(&v, &nv, &cap, d, nd, rel);
                abc_dirents_free(d, nd);
                free(rel);
        }
        for (; qi < qn; qi++)
                free(queue[qi]);
        free(queue);
        if (r < 0) {
                abc_dirents_free(v, nv);
                return -1;
        }
        if (nv > 1)
                qsort(v, nv, sizeof(*v), dirent_cmp);
        *out = v;
        *n = nv;
        return 0;
}

typedef struct readbuf {
        ab_buf b;
        size_t max;
        bool over;
} readbuf;

static int read_cb(void *ud, int stream, const void *buf, size_t len)
{
        readbuf *r = ud;
        if (r->b.n + len > r->max) {
                ab_buf_add(&r->b, buf, r->max - r->b.n);
                r->over = true;
                return 0;
        }
        ab_buf_add(&r->b, buf, len);
        return 0;
}

int read_whole(tool_ctx *c, const char *path, size_t max, char **buf, size_t *len, bool *over,
               ab_err **err)
{
        readbuf r = {.max = max};
        if (tool_read(c, path, (uint64_t)max + 1, read_cb, &r, err) < 0) {
                free(r.b.p);
                return -1;
        }
        *len = r.b.n;
        *over = r.over;
        *buf = ab_buf_steal(&r.b);
        return 0;
}

/* ---- the per-file lock table ---- */

struct file_lock {
        struct file_lock *next;
        char *key;
        unsigned refs;
        pthread_mutex_t mu;
};

static pthread_mutex_t locks_mu = PTHREAD_MUTEX_INITIALIZER;
static file_lock *locks;

file_lock *file_lock_take(const char *box_id, const char *display_path)
{
        _cleanup_free_ char *key = xasprintf("%s\n%s", box_id ? box_id : "", display_path);
        pthread_mutex_lock(&locks_mu);
        file_lock *l = locks;
        while (l && strcmp(l->key, key) != 0)
                l = l->next;
        if (!l) {
                l = xzalloc(sizeof(*l));
                l->key = steal_pointer(&key);
                pthread_mutex_init(&l->mu, NULL);
                l->next = locks;
                locks = l;
        }
        l->refs++;
        pthread_mutex_unlock(&locks_mu);
        pthread_mutex_lock(&l->mu);
        return l;
}

void file_lock_drop(file_lock *l)
{
        pthread_mutex_unlock(&l->mu);
        pthread_mutex_lock(&locks_mu);
        if (--l->refs == 0) {
                file_lock **pp = &locks;
                while (*pp != l)
                        pp = &(*pp)->next;
                *pp = l->next;
                pthread_mutex_destroy(&l->mu);
                free(l->key);
                free(l);
        }
        pthread_mutex_unlock(&locks_mu);
}

static void file_lock_dropp(file_lock **l)
{
        if (*l)
                file_lock_drop(*l);
}
#define _cleanup_lock_ __attribute__((cleanup(file_lock_dropp)))

/* Hands an init error to the caller when the box is unreachable (-1), else
 * leaves it for a message (0). */
static int fatal_or_keep(ab_err **e, ab_err **err)
{
        if (!tool_err_is_fatal(*e))
                return 0;
        if (err && !*err)
                *err = steal_pointer(e);
        return -1;
}

static const char *msg_of(const ab_err *e)
{
        return e && e->msg ? e->msg : "unknown error";
}

/* ---- ls ---- */

static int str_cmp(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int tool_ls(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err)
{
        const char *path;
        if (arg_path(args, "path", &path, err) < 0)
                return -1;
        _cleanup_free_ char *root = path_display(path);
        _cleanup_err_ ab_err *e = NULL;
        abc_dirent *d = NULL;
        size_t n = 0;
        if (tool_list(c, path_for_box(path), 2, &d, &n, &e) < 0) {
                if (fatal_or_keep(&e, err) < 0)
                        return -1;
                if (e->code == AB_E_NOT_FOUND || tool_err_is(e, AB_E_INVALID, "not a directory"))
                        result_errorf(out, "Error: Directory not found: %s", path);
                else if (e->code == AB_E_PERMISSION)
                        result_errorf(out, "Error: Permission denied: %s", path);
                else
                        result_errorf(out, "Error: Unexpected error listing directory: %s",
                                      msg_of(e));
                return 0;
        }
        char **lines = xcalloc(n + 1, sizeof(char *));
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                if (ignored_path(d[i].path))
                        continue;
                _cleanup_free_ char *full = path_join(root, d[i].path);
                lines[k++] = xasprintf("%s%s", full, d[i].st.type == ABC_DIR ? "/" : "");
        }
        abc_dirents_free(d, n);
        if (k == 0) {
                free(lines);
                result_set(out, xstrdup("(empty)"), false);
                return 0;
        }
        qsort(lines, k, sizeof(char *), str_cmp);
        _cleanup_buf_ ab_buf b = {0};
        for (size_t i = 0; i < k; i++) {
                if (i)
                        ab_buf_add(&b, "\n", 1);
                ab_buf_puts(&b, lines[i]);
                free(lines[i]);
        }
        free(lines);
        result_set(out,
                   trunc_head(ab_buf_steal(&b), c->lim.ls_output_max,
                              "Use a more specific path to see fewer results"),
                   false);
        return 0;
}

/* ---- glob ---- */

/* DeerFlow's _clamp_max_results. */
static int max_results_arg(json_t *args, int64_t def, int64_t cap, int64_t *v, ab_err **err)
{
        *v = def;
        if (arg_int(args, "max_results", false, v, err) < 0)
                return -1;
        if (*v <= 0)
                *v = def;
        if (*v > cap)
                *v = cap;
        return 0;
}

int tool_glob(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err)
{
        const char *pattern, *path;
        size_t plen;
        bool include_dirs = false;
        int64_t max;
        if (arg_str(args, "pattern", true, &pattern, &plen, err) < 0 ||
            arg_path(args, "path", &path, err) < 0 ||
            arg_bool(args, "include_dirs", &include_dirs, err) < 0 ||
            max_results_arg(args, 200, 1000, &max, err) < 0)
                return -1;
        if (plen == 0 || strlen(pattern) != plen)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "argument 'pattern' must be a non-empty glob pattern");
        _cleanup_free_ char *root = path_display(path);
        _cleanup_err_ ab_err *e = NULL;
        abc_dirent *d = NULL;
        size_t n = 0;
        if (list_tree(c, path_for_box(path), &d, &n, &e) < 0) {
                if (fatal_or_keep(&e, err) < 0)
                        return -1;
                if (e->code == AB_E_NOT_FOUND)
                        result_errorf(out, "Error: Directory not found: %s", path);
                else if (tool_err_is(e, AB_E_INVALID, "not a directory"))
                        result_errorf(out, "Error: Path is not a directory: %s", path);
                else if (e->code == AB_E_PERMISSION)
                        result_errorf(out, "Error: Permission denied: %s", path);
                else
                        result_errorf(out, "Error: Unexpected error searching paths: %s",
                                      msg_of(e));
                return 0;
        }
        _cleanup_buf_ ab_buf lines = {0};
        size_t found = 0;
        bool truncated = false;
        for (size_t i = 0; i < n && !truncated; i++) {
                if (ignored_path(d[i].path))
                        continue;
                if (d[i].st.type == ABC_DIR && !include_dirs)
                        continue;
                if (!glob_path_matches(pattern, d[i].path))
                        continue;
                if (found == (size_t)max) { /* one past the cap: there is more */
                        truncated = true;
                        break;
                }
                _cleanup_free_ char *full = path_join(root, d[i].path);
                ab_buf_printf(&lines, "\n%zu. %s", ++found, full);
        }
        abc_dirents_free(d, n);
        if (found == 0 && !truncated) {
                result_set(out, xasprintf("No files matched under %s", path), false);
                return 0;
        }
        _cleanup_buf_ ab_buf b = {0};
        ab_buf_printf(&b, "Found %zu paths under %s", found, path);
        if (truncated)
                ab_buf_printf(&b, " (showing first %zu)", found);
        ab_buf_add(&b, lines.p, lines.n);
        if (truncated)
                ab_buf_puts(
                    &b, "\nResults truncated. Narrow the path or pattern to see fewer matches.");
        result_set(out, ab_buf_steal(&b), false);
        return 0;
}

/* ---- read_file ---- */

static void read_error(ab_tool_result *out, const ab_err *e, const char *path, const char *denied,
                       const char *unexpected)
{
        if (e->code == AB_E_NOT_FOUND)
                result_errorf(out, "Error: File not found: %s", path);
        else if (tool_err_is(e, AB_E_INVALID, "is a directory"))
                result_errorf(out, "Error: Path is a directory, not a file: %s", path);
        else if (tool_err_is(e, AB_E_INVALID, "not a regular file"))
                result_errorf(out, "Error: Not a regular file: %s", path);
        else if (e->code == AB_E_PERMISSION)
                result_errorf(out, "%s: %s", denied, path);
        else
                result_errorf(out, "%s: %s", unexpected, msg_of(e));
}

static void too_large(ab_tool_result *out, const char *path)
{
        result_errorf(out,
                      "Error: File too large: %s is larger than %u MiB. Use bash to read part of "
                      "it, e.g. `sed -n '1,200p' FILE` or `head -c 100000 FILE`.",
                      path, TOOL_FILE_HARD_MAX >> 20);
}

/* As Python's strict UTF-8 decoding would fail, or a NUL in the first 8 KiB. */
static bool looks_binary(const char *s, size_t n)
{
        if (memchr(s, 0, n < 8192 ? n : 8192))
                return true;
        size_t clean_len;
        _cleanup_free_ char *clean = ab_utf8_clean(s, n, &clean_len);
        return clean_len != n || memcmp(clean, s, n) != 0;
}

int tool_read_file(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err)
{
        const char *path;
        int64_t start = 0, end = 0;
        int rs, re;
        if (arg_path(args, "path", &path, err) < 0 ||
            (rs = arg_int(args, "start_line", false, &start, err)) < 0 ||
            (re = arg_int(args, "end_line", false, &end, err)) < 0)
                return -1;
        bool has_start = rs == 0, has_end = re == 0;
        if (has_start && start < 1) {
                result_set(out, xstrdup("(start_line must be >= 1)"), false);
                return 0;
        }
        int64_t first = has_start ? start : 1;
        if (has_end && end < 1) {
                result_set(out, xstrdup("(end_line must be >= 1)"), false);
                return 0;
        }
        if (has_end && first > end) {
                result_set(out, xstrdup("(start_line > end_line \u2014 no lines in range)"), false);
                return 0;
        }
        _cleanup_err_ ab_err *e = NULL;
        _cleanup_free_ char *buf = NULL;
        size_t len;
        bool over;
        if (read_whole(c, path_for_box(path), TOOL_FILE_HARD_MAX, &buf, &len, &over, &e) < 0) {
                if (fatal_or_keep(&e, err) < 0)
                        return -1;
                read_error(out, e, path, "Error: Permission denied reading file",
                           "Error: Unexpected error reading file");
                return 0;
        }
        if (over) {
                too_large(out, path);
                return 0;
        }
        if (looks_binary(buf, len)) {
                result_errorf(out,
                              "Error: cannot read '%s' as text \u2014 it appears to be a binary "
                              "file (e.g. .xlsx, .pdf, or an image). read_file only supports "
                              "UTF-8 text. Use bash with a suitable library instead "
                              "(pandas/openpyxl for spreadsheets, Pillow for images).",
                              path);
                return 0;
        }
        char *text;
        if (!has_start && !has_end) {
                text = steal_pointer(&buf);
        } else {
                /* Lines first..end, each without its line break, joined by "\n". */
                _cleanup_buf_ ab_buf b = {0};
                int64_t ln = 1;
                size_t i = 0, taken = 0;
                while (i < len && (!has_end || ln <= end)) {
                        const char *nl = memchr(buf + i, '\n', len - i);
                        size_t e_ = nl ? (size_t)(nl - buf) : len;
                        if (ln >= first) {
                                size_t stop = e_;
                                while (stop > i && (buf[stop - 1] == '\r'))
                                        stop--;
                                if (taken++)
                                        ab_buf_add(&b, "\n", 1);
                                ab_buf_add(&b, buf + i, stop - i);
                        }
                        i = nl ? e_ + 1 : len;
                        ln++;
                }
                text = ab_buf_steal(&b);
        }
        if (!text[0]) {
                free(text);
                result_set(out,
                           xstrdup(has_start && start > 1 ? "(start_line exceeds file length)"
                                                          : "(empty)"),
                           false);
                return 0;
        }
        result_set(out,
                   trunc_head(text, c->lim.read_file_max,
                              "Use start_line/end_line to read a specific range"),
                   false);
        return 0;
}

/* ---- write_file, str_replace ---- */

static void write_error(ab_tool_result *out, const ab_err *e, const char *path)
{
        if (tool_err_is(e, AB_E_PERMISSION, "read-only path"))
                result_errorf(out,
                              "Error: Failed to write file '%s': read-only path. /mnt/skills (and "
                              "/skills) are read-only; write under /workspace or "
                              "/mnt/user-data/outputs instead.",
                              path);
        else if (e->code == AB_E_PERMISSION)
                result_errorf(out, "Error: Permission denied writing to file: %s", path);
        else if (tool_err_is(e, AB_E_INVALID, "is a directory"))
                result_errorf(out, "Error: Path is a directory, not a file: %s", path);
        else
                result_errorf(out, "Error: Failed to write file '%s': %s", path, msg_of(e));
}

static int write_through(tool_ctx *c, const char *path, const char *data, size_t len,
                         uint32_t flags, ab_err **e)
{
        return tool_write(c, path_for_box(path), data, len, flags, e);
}

int tool_write_file(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err)
{
        const char *path, *content;
        size_t len;
        bool append = false;
        if (arg_path(args, "path", &path, err) < 0 ||
            arg_str(args, "content", true, &content, &len, err) < 0 ||
            arg_bool(args, "append", &append, err) < 0)
                return -1;
        if (!append && len > c->lim.write_file_max) {
                result_errorf(out,
                              "Error: write_file content (%zu bytes) exceeds the %zu-byte "
                              "single-call limit. Split the content into smaller pieces: either "
                              "(a) write the first section now, then use `str_replace` for further "
                              "edits, or (b) call write_file again with append=True carrying the "
                              "next section. See SIZE POLICY in the tool description for the "
                              "rationale.",
                              len, c->lim.write_file_max);
                return 0;
        }
        _cleanup_free_ char *key = path_display(path);
        _cleanup_lock_ file_lock *lk = file_lock_take(c->box->box_id, key);
        _cleanup_err_ ab_err *e = NULL;
        uint32_t flags = ABC_W_MKPARENTS | (append ? ABC_W_APPEND : 0);
        if (write_through(c, path, content, len, flags, &e) < 0) {
                if (fatal_or_keep(&e, err) < 0)
                        return -1;
                write_error(out, e, path);
                return 0;
        }
        result_set(out, xstrdup("OK"), false);
        return 0;
}

int tool_str_replace(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err)
{
        const char *path, *old_s, *new_s;
        size_t old_n, new_n;
        bool all = false;
        if (arg_path(args, "path", &path, err) < 0 ||
            arg_str(args, "old_str", true, &old_s, &old_n, err) < 0 ||
            arg_str(args, "new_str", true, &new_s, &new_n, err) < 0 ||
            arg_bool(args, "replace_all", &all, err) < 0)
                return -1;
        _cleanup_free_ char *key = path_display(path);
        _cleanup_lock_ file_lock *lk = file_lock_take(c->box->box_id, key);
        _cleanup_err_ ab_err *e = NULL;
        _cleanup_free_ char *buf = NULL;
        size_t len;
        bool over;
        if (read_whole(c, path_for_box(path), TOOL_FILE_HARD_MAX, &buf, &len, &over, &e) < 0) {
                if (fatal_or_keep(&e, err) < 0)
                        return -1;
                read_error(out, e, path, "Error: Permission denied accessing file",
                           "Error: Unexpected error replacing string");
                return 0;
        }
        if (over) {
                too_large(out, path);
                return 0;
        }
        if (old_n == 0) { /* a no-op edit, as DeerFlow */
                result_set(out, xstrdup("OK"), false);
                return 0;
        }
        size_t count = 0;
        for (const char *p = buf; (p = memmem(p, len - (size_t)(p - buf), old_s, old_n));
             p += old_n)
                count++;
        if (count == 0) {
                result_errorf(out, "Error: String to replace not found in file: %s", path);
                return 0;
        }
        if (count > 1 && !all) {
                result_errorf(out,
                              "Error: String to replace appears %zu times in file: %s. Include "
                              "more surrounding context in old_str to make it unique, or set "
                              "replace_all=true to replace every occurrence.",
                              count, path);
                return 0;
        }
        _cleanup_buf_ ab_buf b = {0};
        const char *p = buf, *end = buf + len;
        for (const char *m; (m = memmem(p, (size_t)(end - p), old_s, old_n)); p = m + old_n) {
                ab_buf_add(&b, p, (size_t)(m - p));
                ab_buf_add(&b, new_s, new_n);
        }
        ab_buf_add(&b, p, (size_t)(end - p));
        if (write_through(c, path, b.p, b.n, 0, &e) < 0) {
                if (fatal_or_keep(&e, err) < 0)
                        return -1;
                write_error(out, e, path);
                return 0;
        }
        result_set(out, xstrdup("OK"), false);
        return 0;
}
