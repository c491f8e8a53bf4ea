/* The skills folder: SKILL.md parsing (libyaml), validation (seed 004's rules
 * and messages), listing, and installs/deletes that a running box sees as
 * one step. All filesystem access is relative to the folder's fds and never
 * follows a symlink. */
#include "skills/skills.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <yaml.h>

/* Inside the skills folder, so that it is on the same file system (the
 * folder is one of its own, native/skillsfs.h, which uses the same name).
 * Not a valid skill name: never listed. */
#define STAGING_NAME    ".staging"
#define YAML_MAX_DEPTH  32
#define YAML_MAX_NODES  20000 /* visits, so aliases cannot blow up the JSON */
#define TREE_MAX_DEPTH  32    /* directory levels inside a skill */
#define LIST_MAX        5000  /* files listed by ab_skill_get */
#define SCRIPT_SCAN_MAX (1024 * 1024)

const ab_archive_limits ab_skill_limits = {
    .max_entries = 1000,
    .max_entry_bytes = 16u << 20,
    .max_total_bytes = 64u << 20,
};

/* A JSON string of s; bytes that are not UTF-8 become '?'. */
static json_t *jstr(const char *s)
{
        json_t *j = json_string(s);
        if (j)
                return j;
        _cleanup_free_ char *t = xstrdup(s);
        for (char *c = t; *c; c++)
                if ((unsigned char)*c >= 0x80)
                        *c = '?';
        return json_string(t);
}

/* ---- SKILL.md ----------------------------------------------------------- */

void ab_skill_md_clear(ab_skill_md *md)
{
        json_decref(md->front);
        free(md->name);
        free(md->description);
        free(md->body);
        memset(md, 0, sizeof(*md));
}

/* Length of the line at p (without its '\n'), and whether it is a "---"
 * delimiter (trailing blanks and '\r' allowed). */
static bool is_delim(const char *p, size_t n)
{
        if (n < 3 || memcmp(p, "---", 3))
                return false;
        for (size_t i = 3; i < n; i++)
                if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
                        return false;
        return true;
}

static bool plain_is_null(const char *v)
{
        return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
               !strcmp(v, "NULL");
}

/* A plain scalar as JSON: null, bool, integer, real, else a string. */
static json_t *plain_json(const char *v, size_t len)
{
        if (plain_is_null(v))
                return json_null();
        if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "TRUE"))
                return json_true();
        if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "FALSE"))
                return json_false();
        char *end;
        errno = 0;
        long long i = strtoll(v, &end, 10);
        if (*v && !*end && !errno && (isdigit((unsigned char)v[0]) || v[0] == '-' || v[0] == '+'))
                return json_integer(i);
        double d = strtod(v, &end);
        if (*v && !*end && (isdigit((unsigned char)v[0]) || v[0] == '-' || v[0] == '.') &&
            !strpbrk(v, "xXnNiI"))
                return json_real(d);
        json_t *s = json_stringn(v, len);
        return s ? s : json_string("");
}

typedef struct yconv {
        yaml_document_t *doc;
        size_t visits;
} yconv;

static json_t *node_json(yconv *y, yaml_node_t *n, int depth)
{
        if (!n || depth > YAML_MAX_DEPTH || ++y->visits > YAML_MAX_NODES)
                return NULL;
        switch (n->type) {
        case YAML_SCALAR_NODE: {
                const char *v = (const char *)n->data.scalar.value;
                size_t len = n->data.scalar.length;
                if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
                        return plain_json(v, len);
                json_t *s = json_stringn(v, len);
                return s ? s : json_string("");
        }
        case YAML_SEQUENCE_NODE: {
                json_t *a = json_array();
                for (yaml_node_item_t *it = n->data.sequence.items.start;
                     it < n->data.sequence.items.top; it++) {
                        json_t *v = node_json(y, yaml_document_get_node(y->doc, *it), depth + 1);
                        if (!v) {
                                json_decref(a);
                                return NULL;
                        }
                        json_array_append_new(a, v);
                }
                return a;
        }
        case YAML_MAPPING_NODE: {
                json_t *o = json_object();
                for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
                     p < n->data.mapping.pairs.top; p++) {
                        yaml_node_t *k = yaml_document_get_node(y->doc, p->key);
                        json_t *v =
                            node_json(y, yaml_document_get_node(y->doc, p->value), depth + 1);
                        /* a repeated key is refused: `name` would otherwise be one
                         * value for the checks and another in the frontmatter shown */
                        if (!v || !k || k->type != YAML_SCALAR_NODE ||
                            strlen((const char *)k->data.scalar.value) != k->data.scalar.length ||
                            json_object_get(o, (const char *)k->data.scalar.value)) {
                                json_decref(v);
                                json_decref(o);
                                return NULL;
                        }
                        json_object_set_new(o, (const char *)k->data.scalar.value, v);
                }
                return o;
        }
        default:
                return NULL;
        }
}

/* The text of root's scalar value for key, or NULL (absent, null, not a scalar). */
static char *root_scalar(yaml_document_t *doc, yaml_node_t *root, const char *key)
{
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
             p++) {
                yaml_node_t *k = yaml_document_get_node(doc, p->key);
                yaml_node_t *v = yaml_document_get_node(doc, p->value);
                if (!k || !v || k->type != YAML_SCALAR_NODE ||
                    strcmp((const char *)k->data.scalar.value, key))
                        continue;
                if (v->type != YAML_SCALAR_NODE)
                        return NULL;
                const char *s = (const char *)v->data.scalar.value;
                if (v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && plain_is_null(s))
                        return NULL;
                return xstrndup(s, v->data.scalar.length);
        }
        return NULL;
}

static int parse_front(const char *text, size_t len, ab_skill_md *md, ab_err **err)
{
        yaml_parser_t parser;
        yaml_document_t doc;
        if (!yaml_parser_initialize(&parser))
                abort();
        yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
        if (!yaml_parser_load(&parser, &doc)) {
                int r = ab_err_set(err, AB_E_INVALID, 0,
                                   "Invalid SKILL.md format: the frontmatter is not valid YAML: "
                                   "%s (line %zu of the frontmatter)",
                                   parser.problem ? parser.problem : "syntax error",
                                   parser.problem_mark.line + 1);
                yaml_parser_delete(&parser);
                return r;
        }
        int r = 0;
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (!root || (root->type == YAML_SCALAR_NODE && !root->data.scalar.length)) {
                r = ab_err_set(err, AB_E_INVALID, 0, AB_SKILL_E_NO_FRONT);
        } else if (root->type != YAML_MAPPING_NODE) {
                r = ab_err_set(err, AB_E_INVALID, 0,
                               "Invalid SKILL.md format: the frontmatter must be a YAML mapping "
                               "(name: ..., description: ...)");
        } else {
                yconv y = {.doc = &doc};
                md->front = node_json(&y, root, 0);
                if (!md->front)
                        r = ab_err_set(err, AB_E_INVALID, 0,
                                       "Invalid SKILL.md format: the frontmatter is too large, "
                                       "too deeply nested, or has non-text or repeated keys");
                md->name = root_scalar(&doc, root, "name");
                md->description = root_scalar(&doc, root, "description");
        }
        yaml_document_delete(&doc);
        yaml_parser_delete(&parser);
        return r;
}

int ab_skill_md_parse(const char *text, size_t len, ab_skill_md *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) { /* a UTF-8 BOM */
                text += 3;
                len -= 3;
        }
        const char *end = text + len;
        const char *nl = memchr(text, '\n', len);
        if (!nl || !is_delim(text, (size_t)(nl - text)))
                return ab_err_set(err, AB_E_INVALID, 0, AB_SKILL_E_NO_FRONT);
        const char *fs = nl + 1, *p = fs;
        while (p < end) {
                const char *e = memchr(p, '\n', (size_t)(end - p));
                size_t n = e ? (size_t)(e - p) : (size_t)(end - p);
                if (is_delim(p, n)) {
                        if (memchr(fs, 0, (size_t)(p - fs)))
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "Invalid SKILL.md format: the frontmatter "
                                                  "holds a NUL byte");
                        if (parse_front(fs, (size_t)(p - fs), out, err) < 0) {
                                ab_skill_md_clear(out);
                                return -1;
                        }
                        const char *b = e ? e + 1 : end;
                        out->body = xstrndup(b, (size_t)(end - b));
                        return 0;
                }
                p = e ? e + 1 : end;
        }
        return ab_err_set(err, AB_E_INVALID, 0, AB_SKILL_E_NO_FRONT);
}

bool ab_skill_name_ok(const char *name)
{
        bool alnum = false;
        size_t n = 0;
        for (const char *c = name; *c; c++, n++) {
                if (isalnum((unsigned char)*c) && !((unsigned char)*c & 0x80))
                        alnum = true;
                else if (*c != '-' && *c != '_')
                        return false;
        }
        return alnum && n <= AB_SKILL_NAME_MAX;
}

/* ---- validation --------------------------------------------------------- */

void ab_skill_report_clear(ab_skill_report *rep)
{
        for (size_t i = 0; i < rep->n_errors; i++)
                free(rep->errors[i]);
        for (size_t i = 0; i < rep->n_warnings; i++)
                free(rep->warnings[i]);
        free(rep->errors);
        free(rep->warnings);
        memset(rep, 0, sizeof(*rep));
}

static void push(char ***v, size_t *n, char *msg)
{
        *v = xrealloc(*v, xmul(*n + 2, sizeof(char *)));
        (*v)[(*n)++] = msg;
        (*v)[*n] = NULL;
}

json_t *ab_skill_report_json(const ab_skill_report *rep)
{
        json_t *e = json_array(), *w = json_array();
        for (size_t i = 0; i < rep->n_errors; i++)
                json_array_append_new(e, jstr(rep->errors[i]));
        for (size_t i = 0; i < rep->n_warnings; i++)
                json_array_append_new(w, jstr(rep->warnings[i]));
        return json_pack("{s:b,s:o,s:o}", "valid", rep->n_errors == 0, "errors", e, "warnings", w);
}

/* Reads a regular file at dirfd/name (no symlinks) up to max bytes.
 * 0, -ENOENT (also for a link or a non-regular file), -EFBIG, or -errno. */
static int read_regular(int dirfd, const char *name, size_t max, char **out, size_t *len)
{
        *out = NULL;
        _cleanup_close_ int fd =
            openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0)
                return errno == ELOOP || errno == ENXIO ? -ENOENT : -errno;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -ENOENT;
        if ((uint64_t)st.st_size > max)
                return -EFBIG;
        char *buf = xmalloc((size_t)st.st_size + 1);
        ssize_t n = ab_read_full(fd, buf, (size_t)st.st_size);
        if (n < 0) {
                free(buf);
                return (int)n;
        }
        buf[n] = 0;
        *out = buf;
        *len = (size_t)n;
        return 0;
}

static size_t utf8_chars(const char *s)
{
        size_t n = 0;
        for (; *s; s++)
                if (((unsigned char)*s & 0xc0) != 0x80)
                        n++;
        return n;
}

/* A download piped into a shell on one line: "curl ... | sh", "wget ... | bash". */
static const char *pipe_to_shell(const char *buf, size_t len)
{
        static const char *const tools[] = {"curl", "wget"};
        static const char *const labels[] = {"curl | sh", "wget | sh"};
        for (size_t t = 0; t < AB_ARRAY_LEN(tools); t++) {
                const char *p = buf, *end = buf + len;
                while ((p = memmem(p, (size_t)(end - p), tools[t], strlen(tools[t])))) {
                        const char *eol = memchr(p, '\n', (size_t)(end - p));
                        if (!eol)
                                eol = end;
                        for (const char *bar = memchr(p, '|', (size_t)(eol - p)); bar;
                             bar = memchr(bar + 1, '|', (size_t)(eol - bar - 1))) {
                                const char *q = bar + 1;
                                while (q < eol && (*q == ' ' || *q == '\t'))
                                        q++;
                                if (eol - q >= 5 && !memcmp(q, "sudo ", 5))
                                        q += 5;
                                size_t w = 0;
                                if (eol - q >= 4 && !memcmp(q, "bash", 4))
                                        w = 4;
                                else if (eol - q >= 2 && !memcmp(q, "sh", 2))
                                        w = 2;
                                if (w && (q + w == eol || !isalnum((unsigned char)q[w])))
                                        return labels[t];
                        }
                        p += strlen(tools[t]);
                }
        }
        return NULL;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of dfd's entries, without "." and "..". */
static char **dir_names(int dfd, size_t *n)
{
        *n = 0;
        int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return NULL;
        DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return NULL;
        }
        char **v = NULL;
        size_t cap = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if (*n + 1 >= cap)
                        v = xrealloc(v, xmul(cap = cap ? cap * 2 : 16, sizeof(char *)));
                v[(*n)++] = xstrdup(de->d_name);
        }
        closedir(d);
        if (v) {
                v[*n] = NULL;
                qsort(v, *n, sizeof(char *), cmp_str);
        }
        return v;
}

static void names_free(char **v, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

static const char *const dangerous[] = {"rm -rf", "sudo", "eval(", "exec("};

static void scan_scripts(int dfd, const char *rel, int depth, size_t *budget, ab_skill_report *rep)
{
        size_t n;
        char **names = dir_names(dfd, &n);
        for (size_t i = 0; i < n && *budget; i++, (*budget)--) {
                _cleanup_free_ char *path =
                    rel ? xasprintf("%s/%s", rel, names[i]) : xstrdup(names[i]);
                struct stat st;
                if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (S_ISDIR(st.st_mode) && depth < TREE_MAX_DEPTH) {
                        _cleanup_close_ int sub =
                            openat(dfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub >= 0)
                                scan_scripts(sub, path, depth + 1, budget, rep);
                        continue;
                }
                if (!S_ISREG(st.st_mode))
                        continue;
                _cleanup_free_ char *buf = NULL;
                size_t len = 0;
                int r = read_regular(dfd, names[i], SCRIPT_SCAN_MAX, &buf, &len);
                if (r == -EFBIG) {
                        push(&rep->warnings, &rep->n_warnings,
                             xasprintf("%s is larger than 1 MiB and was not checked", path));
                        continue;
                }
                if (r < 0)
                        continue;
                for (size_t p = 0; p < AB_ARRAY_LEN(dangerous); p++)
                        if (memmem(buf, len, dangerous[p], strlen(dangerous[p])))
                                push(&rep->warnings, &rep->n_warnings,
                                     xasprintf("Potentially dangerous pattern '%s' in %s",
                                               dangerous[p], path));
                const char *pipe = pipe_to_shell(buf, len);
                if (pipe)
                        push(&rep->warnings, &rep->n_warnings,
                             xasprintf("Potentially dangerous pattern '%s' in %s", pipe, path));
        }
        names_free(names, n);
}

int ab_skill_validate_at(int dirfd, const char *name, ab_skill_report *rep, ab_err **err)
{
        memset(rep, 0, sizeof(*rep));
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        int r = read_regular(dirfd, "SKILL.md", AB_SKILL_MD_MAX, &text, &len);
        if (r == -ENOENT) {
                push(&rep->errors, &rep->n_errors, xstrdup(AB_SKILL_E_NO_MD));
                return 0;
        }
        if (r == -EFBIG) {
                push(&rep->errors, &rep->n_errors, xstrdup("SKILL.md is larger than 1 MiB"));
                return 0;
        }
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "read SKILL.md of skill \"%s\"", name);
        ab_skill_md md;
        ab_err *pe = NULL;
        if (ab_skill_md_parse(text, len, &md, &pe) < 0) {
                push(&rep->errors, &rep->n_errors, xstrdup(pe->msg));
                ab_err_free(&pe);
        } else {
                if (!md.name && json_is_object(json_object_get(md.front, "name")))
                        push(&rep->errors, &rep->n_errors, xstrdup("Skill name must be a string"));
                else if (!md.name || !*md.name)
                        push(&rep->errors, &rep->n_errors, xstrdup(AB_SKILL_E_NAME_REQ));
                else if (!ab_skill_name_ok(md.name) && strlen(md.name) <= AB_SKILL_NAME_MAX)
                        push(&rep->errors, &rep->n_errors, xstrdup(AB_SKILL_E_NAME_CHARS));
                else if (!ab_skill_name_ok(md.name))
                        push(&rep->errors, &rep->n_errors,
                             xasprintf("Skill name must be at most %d characters",
                                       AB_SKILL_NAME_MAX));
                else if (name && strcmp(md.name, name))
                        push(&rep->errors, &rep->n_errors,
                             xasprintf("Skill name '%s' does not match its directory name '%s'",
                                       md.name, name));
                json_t *d = json_object_get(md.front, "description");
                if (!md.description && (json_is_array(d) || json_is_object(d)))
                        push(&rep->errors, &rep->n_errors,
                             xstrdup("Skill description must be a string"));
                else if (!md.description || !*md.description)
                        push(&rep->warnings, &rep->n_warnings, xstrdup(AB_SKILL_W_DESC));
                else if (utf8_chars(md.description) > AB_SKILL_DESC_MAX)
                        push(&rep->errors, &rep->n_errors, xstrdup(AB_SKILL_E_DESC_LONG));
                ab_skill_md_clear(&md);
        }
        _cleanup_close_ int sfd =
            openat(dirfd, "scripts", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd >= 0) {
                size_t budget = LIST_MAX;
                scan_scripts(sfd, NULL, 0, &budget, rep);
        }
        return 0;
}

/* ---- the folder ------------------------------------------------------- */

static int open_dir(int at, const char *name, mode_t mode)
{
        if (mkdirat(at, name, mode) < 0 && errno != EEXIST)
                return -errno;
        int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

int ab_skills_open(const char *data_dir, ab_skills *s, ab_err **err)
{
        memset(s, 0, sizeof(*s));
        s->dir_fd = s->staging_fd = -1;
        _cleanup_close_ int data = open(data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (data < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open data folder %s", data_dir);
        s->dir = xasprintf("%s/skills", data_dir);
        s->dir_fd = open_dir(data, "skills", 0755);
        if (s->dir_fd < 0) {
                int e = -s->dir_fd;
                ab_skills_close(s);
                return ab_err_set(err, AB_E_INTERNAL, e, "open the skills folder %s/skills",
                                  data_dir);
        }
        s->staging_fd = open_dir(s->dir_fd, STAGING_NAME, 0700);
        if (s->staging_fd < 0) {
                int e = -s->staging_fd;
                ab_skills_close(s);
                return ab_err_set(err, AB_E_INTERNAL, e, "open %s/skills/%s", data_dir,
                                  STAGING_NAME);
        }
        return 0;
}

void ab_skills_close(ab_skills *s)
{
        if (s->dir_fd >= 0)
                close(s->dir_fd);
        if (s->staging_fd >= 0)
                close(s->staging_fd);
        free(s->dir);
        s->dir_fd = s->staging_fd = -1;
        s->dir = NULL;
}

static bool is_subdir(int dfd, const char *name)
{
        struct stat st;
        return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/* Opens skill `name` in the folder: AB_E_NOT_FOUND when it is not a directory. */
static int open_skill(ab_skills *s, const char *name, ab_err **err)
{
        if (!ab_skill_name_ok(name))
                return ab_err_set(
                    err, AB_E_INVALID, 0,
                    "invalid skill name \"%.80s\": " AB_SKILL_E_NAME_CHARS " (at most 64)", name);
        int fd = openat(s->dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && (errno == ENOENT || errno == ENOTDIR || errno == ELOOP))
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no skill named \"%s\"", name);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open skill \"%s\"", name);
        return fd;
}

void ab_skill_infos_free(ab_skill_info *v, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(v[i].name);
                free(v[i].description);
        }
        free(v);
}

int ab_skills_list(ab_skills *s, ab_skill_info **out, size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        size_t k;
        char **names = dir_names(s->dir_fd, &k);
        ab_skill_info *v = xcalloc(k + 1, sizeof(*v));
        size_t m = 0;
        for (size_t i = 0; i < k; i++) {
                if (!ab_skill_name_ok(names[i])) /* hidden, or not addressable by name */
                        continue;
                _cleanup_close_ int fd =
                    openat(s->dir_fd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        continue;
                _cleanup_free_ char *text = NULL;
                size_t len;
                if (read_regular(fd, "SKILL.md", AB_SKILL_MD_MAX, &text, &len) < 0)
                        continue;
                ab_skill_md md;
                ab_err *pe = NULL;
                if (ab_skill_md_parse(text, len, &md, &pe) < 0) {
                        ab_err_free(&pe);
                        continue;
                }
                v[m].name = xstrdup(names[i]);
                v[m].description = steal_pointer(&md.description);
                v[m].has_scripts = is_subdir(fd, "scripts");
                v[m].has_templates = is_subdir(fd, "templates");
                v[m].has_references = is_subdir(fd, "references");
                m++;
                ab_skill_md_clear(&md);
        }
        names_free(names, k);
        *out = v;
        *n = m;
        return 0;
}

static void list_files(int dfd, const char *rel, int depth, json_t *files)
{
        size_t n;
        char **names = dir_names(dfd, &n);
        for (size_t i = 0; i < n && json_array_size(files) < LIST_MAX; i++) {
                _cleanup_free_ char *path =
                    rel ? xasprintf("%s/%s", rel, names[i]) : xstrdup(names[i]);
                struct stat st;
                if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                const char *type = S_ISDIR(st.st_mode)   ? "dir"
                                   : S_ISREG(st.st_mode) ? "file"
                                   : S_ISLNK(st.st_mode) ? "symlink"
                                                         : "other";
                json_array_append_new(files, json_pack("{s:o,s:s,s:I}", "path", jstr(path), "type",
                                                       type, "size", (json_int_t)st.st_size));
                if (S_ISDIR(st.st_mode) && depth < TREE_MAX_DEPTH) {
                        _cleanup_close_ int sub =
                            openat(dfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub >= 0)
                                list_files(sub, path, depth + 1, files);
                }
        }
        names_free(names, n);
}

int ab_skill_get(ab_skills *s, const char *name, json_t **out, ab_err **err)
{
        _cleanup_close_ int fd = open_skill(s, name, err);
        if (fd < 0)
                return -1;
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        int r = read_regular(fd, "SKILL.md", AB_SKILL_MD_MAX, &text, &len);
        if (r == -ENOENT)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "skill \"%s\" has no SKILL.md", name);
        if (r == -EFBIG)
                return ab_err_set(err, AB_E_INVALID, 0, "SKILL.md of \"%s\" is larger than 1 MiB",
                                  name);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "read SKILL.md of \"%s\"", name);
        ab_skill_md md;
        ab_err *pe = NULL;
        json_t *j;
        if (ab_skill_md_parse(text, len, &md, &pe) == 0) {
                j = json_pack("{s:s,s:o,s:O,s:o}", "name", name, "description",
                              md.description ? jstr(md.description) : json_null(), "frontmatter",
                              md.front, "body", jstr(md.body));
                ab_skill_md_clear(&md);
        } else {
                j = json_pack("{s:s,s:n,s:n,s:o,s:s}", "name", name, "description", "frontmatter",
                              "body", jstr(text), "error", pe->msg);
                ab_err_free(&pe);
        }
        json_object_set_new(j, "path", json_sprintf("/mnt/skills/%s/SKILL.md", name));
        json_object_set_new(j, "has_scripts", json_boolean(is_subdir(fd, "scripts")));
        json_object_set_new(j, "has_templates", json_boolean(is_subdir(fd, "templates")));
        json_object_set_new(j, "has_references", json_boolean(is_subdir(fd, "references")));
        json_t *files = json_array();
        list_files(fd, NULL, 0, files);
        json_object_set_new(j, "files", files);
        *out = j;
        return 0;
}

int ab_skill_validate(ab_skills *s, const char *name, ab_skill_report *rep, ab_err **err)
{
        memset(rep, 0, sizeof(*rep));
        _cleanup_close_ int fd = open_skill(s, name, err);
        if (fd < 0)
                return -1;
        return ab_skill_validate_at(fd, name, rep, err);
}

/* ---- install and delete ------------------------------------------------ */

/* Removes dfd/name, a file or a whole tree, never following a link. 0 or -errno. */
static int rm_tree_at(int dfd, const char *name)
{
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t n;
        char **names = dir_names(fd, &n);
        int r = 0;
        for (size_t i = 0; i < n; i++) {
                int q = rm_tree_at(fd, names[i]);
                if (q < 0 && !r)
                        r = q;
        }
        names_free(names, n);
        close(fd);
        if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && !r)
                r = -errno;
        return r;
}

/* Makes a fresh, unique directory dfd/PREFIX.XXXX; returns its name. */
static char *mkdir_unique(int dfd, const char *prefix, int *errp)
{
        static atomic_uint seq;
        for (int i = 0; i < 100; i++) {
                char *n = xasprintf("%s.%d.%" PRIx64 ".%x", prefix, (int)getpid(), ab_now_ns(),
                                    atomic_fetch_add(&seq, 1));
                if (mkdirat(dfd, n, 0700) == 0)
                        return n;
                *errp = errno;
                free(n);
                if (*errp != EEXIST)
                        return NULL;
        }
        return NULL;
}

typedef struct extract_ctx {
        int root; /* the staging directory */
} extract_ctx;

/* mkdir -p of rel (a checked, normalised path) under root; returns an fd of
 * it. Each component is opened with O_NOFOLLOW: only directories we made. */
static int mkdirs_at(int root, const char *rel, int *depth)
{
        int fd = fcntl(root, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        *depth = 0;
        for (const char *p = rel; *p;) {
                const char *end = strchrnul(p, '/');
                _cleanup_free_ char *comp = xstrndup(p, (size_t)(end - p));
                if (++*depth > TREE_MAX_DEPTH) {
                        close(fd);
                        return -ELOOP;
                }
                if (mkdirat(fd, comp, 0755) == 0)
                        (void)!fchmodat(fd, comp, 0755, 0);
                else if (errno != EEXIST) {
                        int e = -errno;
                        close(fd);
                        return e;
                }
                int nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                int e = -errno;
                close(fd);
                if (nfd < 0)
                        return e;
                fd = nfd;
                p = *end ? end + 1 : end;
        }
        return fd;
}

static int extract_entry(void *ud, const char *path, bool is_dir, uint32_t mode,
                         ab_archive_reader *rd, ab_err **err)
{
        extract_ctx *x = ud;
        if (!strcmp(path, "__MACOSX") || !strncmp(path, "__MACOSX/", 9))
                return 0; /* macOS resource forks: not part of the skill */
        _cleanup_free_ char *dir = NULL;
        const char *base = strrchr(path, '/');
        if (is_dir)
                dir = xstrdup(path);
        else if (base)
                dir = xstrndup(path, (size_t)(base - path));
        else
                dir = xstrdup("");
        base = base ? base + 1 : path;
        int depth;
        _cleanup_close_ int dfd = mkdirs_at(x->root, dir, &depth);
        if (dfd == -ELOOP && depth > TREE_MAX_DEPTH)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "archive entry \"%s\" is nested more than %d directories deep",
                                  path, TREE_MAX_DEPTH);
        if (dfd == -ENOTDIR || dfd == -ELOOP)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "archive entry \"%s\": a parent of it is a file in the archive",
                                  path);
        if (dfd < 0)
                return ab_err_set(err, dfd == -ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, -dfd,
                                  "archive entry \"%s\": mkdir (the skills disk is full?)", path);
        if (is_dir)
                return 0;
        _cleanup_close_ int fd =
            openat(dfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "archive entry \"%s\" appears twice (or also as a directory)",
                                  path);
        if (fd < 0)
                return ab_err_set(err, errno == ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, errno,
                                  "archive entry \"%s\": create", path);
        if (ab_archive_data(rd, fd, err) < 0) {
                /* a write that found the skills disk full: not the archive's fault */
                if (err && *err && (*err)->errnum == ENOSPC)
                        (*err)->code = AB_E_STORAGE;
                return -1;
        }
        if (fchmod(fd, (mode & 0111) ? 0755 : 0644) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "archive entry \"%s\": chmod", path);
        return 0;
}

static char *join_errors(const ab_skill_report *rep)
{
        char *s = xstrdup("");
        for (size_t i = 0; i < rep->n_errors; i++) {
                char *t = xasprintf("%s%s%s", s, i ? "; " : "", rep->errors[i]);
                free(s);
                s = t;
        }
        return s;
}

int ab_skill_install(ab_skills *s, const char *name, int archive_fd, ab_archive_format fmt,
                     const ab_archive_limits *lim, bool dry_run, ab_skill_report *rep,
                     bool *replaced, ab_err **err)
{
        memset(rep, 0, sizeof(*rep));
        if (replaced)
                *replaced = false;
        if (!ab_skill_name_ok(name))
                return ab_err_set(
                    err, AB_E_INVALID, 0,
                    "invalid skill name \"%.80s\": " AB_SKILL_E_NAME_CHARS " (at most 64)", name);
        int e = 0;
        _cleanup_free_ char *stage = mkdir_unique(s->staging_fd, name, &e);
        if (!stage)
                return ab_err_set(err, e == ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, e,
                                  "make a staging directory for \"%s\"", name);
        int rc = -1;
        _cleanup_close_ int sfd =
            openat(s->staging_fd, stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        _cleanup_close_ int rootfd = -1;
        _cleanup_free_ char *sub = NULL;
        if (sfd < 0) {
                ab_err_set(err, AB_E_INTERNAL, errno, "open the staging directory");
                goto out;
        }
        extract_ctx x = {.root = sfd};
        if (ab_archive_walk(archive_fd, fmt, lim, extract_entry, &x, NULL, err) < 0)
                goto out;

        /* The skill is the archive's top level, or its one top-level directory. */
        struct stat st;
        if (fstatat(sfd, "SKILL.md", &st, AT_SYMLINK_NOFOLLOW) < 0) {
                size_t n;
                char **names = dir_names(sfd, &n);
                if (n == 1 && is_subdir(sfd, names[0]))
                        sub = xstrdup(names[0]);
                names_free(names, n);
        }
        rootfd = sub ? openat(sfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                     : fcntl(sfd, F_DUPFD_CLOEXEC, 3);
        if (rootfd < 0) {
                ab_err_set(err, AB_E_INTERNAL, errno, "open the staged skill");
                goto out;
        }
        if (ab_skill_validate_at(rootfd, name, rep, err) < 0)
                goto out;
        if (rep->n_errors) {
                _cleanup_free_ char *msg = join_errors(rep);
                ab_err_set(err, AB_E_INVALID, 0, "skill \"%s\" is not valid: %s", name, msg);
                goto out;
        }
        if (dry_run) {
                rc = 0;
                goto out;
        }
        if (fchmod(rootfd, 0755) < 0) {
                ab_err_set(err, AB_E_INTERNAL, errno, "chmod the staged skill");
                goto out;
        }
        int from_dir = sub ? sfd : s->staging_fd;
        const char *from = sub ? sub : stage;
        if (renameat2(from_dir, from, s->dir_fd, name, RENAME_NOREPLACE) == 0) {
                rc = 0;
        } else if (errno == EEXIST || errno == ENOTEMPTY) {
                /* One step for boxes: the old version lands where the new one was. */
                if (renameat2(from_dir, from, s->dir_fd, name, RENAME_EXCHANGE) == 0) {
                        rc = 0;
                        if (replaced)
                                *replaced = true;
                } else {
                        ab_err_set(err, errno == ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, errno,
                                   "replace skill \"%s\" in %s", name, s->dir);
                }
        } else {
                ab_err_set(err, errno == ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, errno,
                           "move skill \"%s\" into %s", name, s->dir);
        }
out:
        (void)rm_tree_at(s->staging_fd, stage);
        return rc;
}

int ab_skill_delete(ab_skills *s, const char *name, ab_err **err)
{
        _cleanup_close_ int fd = open_skill(s, name, err);
        if (fd < 0)
                return -1;
        int e = 0;
        _cleanup_free_ char *grave = mkdir_unique(s->staging_fd, name, &e);
        if (!grave)
                return ab_err_set(err, AB_E_INTERNAL, e, "make a staging directory");
        int rc = 0;
        /* Out of the boxes' sight in one step (over the empty grave), then removed. */
        if (renameat(s->dir_fd, name, s->staging_fd, grave) < 0)
                rc = ab_err_set(err, errno == ENOENT ? AB_E_NOT_FOUND : AB_E_INTERNAL, errno,
                                "remove skill \"%s\"", name);
        (void)rm_tree_at(s->staging_fd, grave);
        return rc;
}

/* ---- the prompt -------------------------------------------------------- */

char *ab_skills_prompt(const ab_skill_info *v, size_t n)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
                abort();
        fputs("<skills>\n"
              "Skills are folders of instructions, scripts and resources, mounted read-only at\n"
              "/mnt/skills/<name>/ (also /skills/<name>/). Each skill below has a name, a\n"
              "description of when to use it, and the path of its SKILL.md. When a task matches a\n"
              "skill's description, read its SKILL.md first (for example `cat "
              "/mnt/skills/<name>/SKILL.md`)\n"
              "and follow it; open the skill's other files (scripts/, templates/, references/)\n"
              "only when SKILL.md points to them. Run a skill's scripts from where they are, but\n"
              "write outputs to /workspace: /mnt/skills cannot be written.\n",
              f);
        if (!n)
                fputs("\n(no skills are installed)\n", f);
        for (size_t i = 0; i < n; i++) {
                fprintf(f, "\n<skill>\n<name>%s</name>\n<description>", v[i].name);
                for (const char *c = v[i].description ? v[i].description : ""; *c; c++) {
                        if (*c == '\n' || *c == '\r' || *c == '\t')
                                fputc(' ', f);
                        else if (*c == '<')
                                fputs("&lt;", f);
                        else if (*c == '>')
                                fputs("&gt;", f);
                        else if (*c == '&')
                                fputs("&amp;", f);
                        else
                                fputc(*c, f);
                }
                fprintf(f,
                        "</description>\n<location>/mnt/skills/%s/SKILL.md</location>\n</skill>\n",
                        v[i].name);
        }
        fputs("</skills>\n", f);
        fclose(f);
        return buf;
}
