/* The image store (store.h): records and names in JSON files, layers
 * unpacked once per digest, pulls and imports staged in DIR/tmp and made
 * visible only by rename. */
#include "image/store.h"
#include "base/codec.h"

#include "image/ref.h"
#include "image/store_int.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#define DEFAULT_MAX_BLOB (8ull << 30)
#define HOLDER_MAX_LEN   128
#define ID_PREFIX_MIN    12
#define HEX_LEN          IMGSTORE_HEX_LEN
#define IO_CHUNK         (64 * 1024)

/* ---- small helpers ------------------------------------------------------ */

void imgstore_strv_free(char **v)
{
        ab_strvfreep(&v);
}

size_t imgstore_strv_len(char *const *v)
{
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

/* Appends a copy of s to the NULL-terminated *v unless it is there already. */
void imgstore_strv_add_unique(char ***v, const char *s)
{
        size_t n = imgstore_strv_len(*v);
        for (size_t i = 0; i < n; i++)
                if (!strcmp((*v)[i], s))
                        return;
        *v = xrealloc(*v, xmul(xadd(n, 2), sizeof(char *)));
        (*v)[n] = xstrdup(s);
        (*v)[n + 1] = NULL;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

bool imgstore_is_hex(const char *s, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
                        return false;
        return true;
}

void imgstore_progress(ab_image_progress_fn fn, void *ud, const char *phase, const char *digest,
                       uint64_t done, uint64_t total)
{
        if (fn)
                fn(ud, phase, digest, done, total);
}

static void to_hex(const unsigned char *md, size_t n, char *out)
{
        ab_hex_encode(md, n, out);
}

/* "sha256:HEX" of buf. */
char *imgstore_digest_of(const void *buf, size_t len)
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        char hex[2 * EVP_MAX_MD_SIZE + 1];
        if (!EVP_Digest(buf, len, md, &n, EVP_sha256(), NULL))
                abort();
        to_hex(md, n, hex);
        return xasprintf("sha256:%s", hex);
}

/* "sha256:HEX" of fd's bytes from its current offset to its end. 0 or -errno. */
int imgstore_digest_fd(int fd, char **out, uint64_t *bytes)
{
        EVP_MD_CTX *c = EVP_MD_CTX_new();
        if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL))
                abort();
        char buf[IO_CHUNK];
        uint64_t total = 0;
        int rc = 0;
        for (;;) {
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        rc = -errno;
                        break;
                }
                if (n == 0)
                        break;
                EVP_DigestUpdate(c, buf, (size_t)n);
                total += (uint64_t)n;
        }
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int mdn = 0;
        EVP_DigestFinal_ex(c, md, &mdn);
        EVP_MD_CTX_free(c);
        if (rc < 0)
                return rc;
        char hex[2 * EVP_MAX_MD_SIZE + 1];
        to_hex(md, mdn, hex);
        *out = xasprintf("sha256:%s", hex);
        if (bytes)
                *bytes = total;
        return 0;
}

/* Opens path inside the tree rootfd; symlinks resolve inside it, never out. */
int imgstore_open_in_root(int rootfd, const char *path, int flags)
{
        struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
                               .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
        long fd = syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
        return fd < 0 ? -errno : (int)fd;
}

/* The names in directory dfd/sub, sorted, NULL-terminated. */
static int list_dir(int dfd, const char *sub, char ***out)
{
        *out = NULL;
        int fd = openat(dfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        DIR *d = fdopendir(fd);
        if (!d) {
                int e = -errno;
                close(fd);
                return e;
        }
        char **v = xcalloc(1, sizeof(char *));
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                v = xrealloc(v, xmul(xadd(n, 2), sizeof(char *)));
                v[n++] = xstrdup(de->d_name);
                v[n] = NULL;
        }
        closedir(d);
        qsort(v, n, sizeof(char *), cmp_str);
        *out = v;
        return 0;
}

/* Makes a fresh directory DIR/tmp/PREFIX.PID.NS.SEQ; returns its name. */
char *imgstore_mkdir_tmp(ab_image_store *s, const char *prefix, ab_err **err)
{
        static atomic_uint seq;
        for (int i = 0; i < 100; i++) {
                char *n = xasprintf("tmp/%s.%d.%" PRIx64 ".%x", prefix, (int)getpid(), ab_now_ns(),
                                    atomic_fetch_add(&seq, 1));
                if (mkdirat(s->dfd, n, 0700) == 0)
                        return n;
                int e = errno;
                free(n);
                if (e != EEXIST) {
                        ab_err_set(err, e == ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, e,
                                   "make a directory in %s/tmp", s->dir);
                        return NULL;
                }
        }
        ab_err_set(err, AB_E_INTERNAL, EEXIST, "make a directory in %s/tmp", s->dir);
        return NULL;
}

int imgstore_open_dir_at(int dfd, const char *name)
{
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* Takes DIR/NAME as an flock (op: LOCK_SH/LOCK_EX, maybe | LOCK_NB); returns
 * the fd holding it, -EWOULDBLOCK when LOCK_NB and it is taken. Each call
 * opens its own file description, so threads of one process exclude each
 * other too. */
static int lock_take(ab_image_store *s, const char *name, int op)
{
        int fd = openat(s->dfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        int r;
        while ((r = flock(fd, op)) < 0 && errno == EINTR)
                ;
        if (r < 0) {
                int e = -errno;
                close(fd);
                return e;
        }
        return fd;
}

int imgstore_lock_or_err(ab_image_store *s, const char *name, int op, ab_err **err)
{
        int fd = lock_take(s, name, op);
        if (fd < 0)
                ab_err_set(err, AB_E_INTERNAL, -fd, "lock %s/%s", s->dir, name);
        return fd;
}

/* ---- JSON helpers ------------------------------------------------------- */

static json_t *jstr_or_null(const char *s)
{
        return s ? json_string(s) : json_null();
}

static json_t *jstrv(char *const *v)
{
        if (!v)
                return json_null();
        json_t *a = json_array();
        for (; *v; v++)
                json_array_append_new(a, json_string(*v));
        return a;
}

static char *jdup(json_t *o, const char *k)
{
        const char *v = json_string_value(json_object_get(o, k));
        return v ? xstrdup(v) : NULL;
}

static char **jdupv(json_t *a)
{
        if (!json_is_array(a))
                return NULL;
        char **v = xcalloc(json_array_size(a) + 1, sizeof(char *));
        size_t i, n = 0;
        json_t *e;
        json_array_foreach(a, i, e)
        {
                if (json_is_string(e))
                        v[n++] = xstrdup(json_string_value(e));
        }
        return v;
}

/* Reads dfd/path as JSON. 0, -ENOENT, -EINVAL (not JSON) or -errno. */
static int read_json_at(int dfd, const char *path, json_t **out)
{
        *out = NULL;
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = ab_read_file(dfd, path, &text, &len);
        if (r < 0)
                return r;
        *out = json_loadb(text, len, 0, NULL);
        return *out ? 0 : -EINVAL;
}

static int write_json_at(int dfd, const char *path, json_t *j)
{
        _cleanup_free_ char *text = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
        if (!text)
                abort();
        return ab_write_file_atomic(dfd, path, text, strlen(text), 0644);
}

static json_t *config_json(const ab_image_config *c)
{
        json_t *j = json_object();
        json_object_set_new(j, "os", jstr_or_null(c->os));
        json_object_set_new(j, "architecture", jstr_or_null(c->arch));
        json_object_set_new(j, "env", jstrv(c->env));
        json_object_set_new(j, "workdir", jstr_or_null(c->workdir));
        json_object_set_new(j, "user", jstr_or_null(c->user));
        json_object_set_new(j, "entrypoint", jstrv(c->entrypoint));
        json_object_set_new(j, "cmd", jstrv(c->cmd));
        json_object_set_new(j, "diff_ids", jstrv(c->diff_ids));
        return j;
}

static void config_from_json(json_t *j, ab_image_config *c)
{
        c->os = jdup(j, "os");
        c->arch = jdup(j, "architecture");
        c->env = jdupv(json_object_get(j, "env"));
        c->workdir = jdup(j, "workdir");
        c->user = jdup(j, "user");
        c->entrypoint = jdupv(json_object_get(j, "entrypoint"));
        c->cmd = jdupv(json_object_get(j, "cmd"));
        c->diff_ids = jdupv(json_object_get(j, "diff_ids"));
}

/* ---- images and their names --------------------------------------------- */

void ab_image_clear(ab_image *img)
{
        free(img->id);
        imgstore_strv_free(img->names);
        imgstore_strv_free(img->digests);
        imgstore_strv_free(img->layers);
        ab_image_config_clear(&img->config);
        free(img->source);
        imgstore_strv_free(img->apps);
        imgstore_strv_free(img->pulled_by);
        memset(img, 0, sizeof(*img));
}

bool ab_image_visible(const ab_image *img, const char *app)
{
        if (!app || !img->apps || !img->apps[0])
                return true;
        for (char **a = img->apps; *a; a++)
                if (!strcmp(*a, app))
                        return true;
        return false;
}

const char *ab_image_name_shown(const char *name, const char *app)
{
        if (name[0] != '@' || !app)
                return name;
        size_t n = strlen(app);
        return !strncmp(name + 1, app, n) && name[1 + n] == '/' ? name + 2 + n : NULL;
}

void ab_image_list_free(ab_image *imgs, size_t n)
{
        for (size_t i = 0; i < n; i++)
                ab_image_clear(&imgs[i]);
        free(imgs);
}

/* refs.json: {"name": "sha256:HEX"}; an empty object when missing. */
static int refs_load(ab_image_store *s, json_t **out, ab_err **err)
{
        int r = read_json_at(s->dfd, "refs.json", out);
        if (r == -ENOENT) {
                *out = json_object();
                return 0;
        }
        if (r == 0 && !json_is_object(*out)) {
                json_decref(*out);
                *out = NULL;
                r = -EINVAL;
        }
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, r == -EINVAL ? 0 : -r, "read %s/refs.json%s",
                                  s->dir, r == -EINVAL ? ": not a JSON object" : "");
        return 0;
}

static int refs_save(ab_image_store *s, json_t *refs, ab_err **err)
{
        int r = write_json_at(s->dfd, "refs.json", refs);
        if (r < 0)
                return ab_err_set(err, r == -ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, -r,
                                  "write %s/refs.json", s->dir);
        return 0;
}

/* The names refs gives to id, sorted. */
static char **names_of(json_t *refs, const char *id)
{
        char **v = xcalloc(1, sizeof(char *));
        const char *k;
        json_t *val;
        json_object_foreach(refs, k, val)
        {
                if (json_is_string(val) && !strcmp(json_string_value(val), id))
                        imgstore_strv_add_unique(&v, k);
        }
        qsort(v, imgstore_strv_len(v), sizeof(char *), cmp_str);
        return v;
}

static char *record_path(const char *hex)
{
        return xasprintf("images/%s.json", hex);
}

/* The record of image HEX: 0, -ENOENT or another -errno. */
static int record_load(ab_image_store *s, const char *hex, json_t **out)
{
        _cleanup_free_ char *p = record_path(hex);
        int r = read_json_at(s->dfd, p, out);
        if (r == 0 && !json_is_object(*out)) {
                json_decref(*out);
                *out = NULL;
                return -EINVAL;
        }
        return r;
}

static bool record_exists(ab_image_store *s, const char *hex)
{
        _cleanup_free_ char *p = record_path(hex);
        return faccessat(s->dfd, p, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

static void image_from_record(ab_image_store *s, json_t *rec, json_t *refs, ab_image *out)
{
        memset(out, 0, sizeof(*out));
        out->id = jdup(rec, "id");
        out->names = names_of(refs, out->id ? out->id : "");
        out->digests = jdupv(json_object_get(rec, "digests"));
        if (!out->digests)
                out->digests = xcalloc(1, sizeof(char *));
        json_t *layers = json_object_get(rec, "layers");
        out->layers = xcalloc(json_array_size(layers) + 1, sizeof(char *));
        size_t i;
        json_t *l;
        json_array_foreach(layers, i, l)
        {
                const char *d = json_string_value(json_object_get(l, "digest"));
                if (!d || strncmp(d, "sha256:", 7))
                        continue;
                out->layers[out->n_layers++] = xasprintf("%s/layers/%s/fs", s->dir, d + 7);
                out->size += (uint64_t)json_integer_value(json_object_get(l, "bytes"));
        }
        config_from_json(json_object_get(rec, "config"), &out->config);
        out->created = (int64_t)json_integer_value(json_object_get(rec, "created"));
        out->source = jdup(rec, "source");
        out->apps = jdupv(json_object_get(rec, "apps"));
        if (out->apps && !out->apps[0]) {
                free(out->apps);
                out->apps = NULL;
        }
        out->pulled_by = jdupv(json_object_get(rec, "pulled_by"));
        if (out->pulled_by && !out->pulled_by[0]) {
                free(out->pulled_by);
                out->pulled_by = NULL;
        }
}

/* Loads image HEX with its names from refs into out. */
static int image_load(ab_image_store *s, const char *hex, json_t *refs, ab_image *out, ab_err **err)
{
        json_t *rec = NULL;
        int r = record_load(s, hex, &rec);
        if (r == -ENOENT)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no image sha256:%s", hex);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, r == -EINVAL ? 0 : -r,
                                  "read the record of image sha256:%s", hex);
        image_from_record(s, rec, refs, out);
        json_decref(rec);
        return 0;
}

/* What a lookup string names (caller holds DIR/lock). *hex gets the image;
 * *name the name it matched when it was a reference, else NULL. */
static int resolve(ab_image_store *s, json_t *refs, const char *q, char **hex, char **name,
                   ab_err **err)
{
        *hex = NULL;
        *name = NULL;
        if (!q || !*q)
                return ab_err_set(err, AB_E_INVALID, 0, "no image named");
        size_t qn = strlen(q);
        /* a name as stored: an app's private name */
        if (q[0] == '@') {
                const char *id = json_string_value(json_object_get(refs, q));
                if (!id || !ab_digest_valid(id))
                        return ab_err_set(err, AB_E_NOT_FOUND, 0, "no image %s", q);
                *hex = xstrdup(id + 7);
                *name = xstrdup(q);
                return 0;
        }
        /* an id, or a manifest digest */
        if (ab_digest_valid(q)) {
                if (record_exists(s, q + 7)) {
                        *hex = xstrdup(q + 7);
                        return 0;
                }
                _cleanup_strv_ char **ids = NULL;
                int r = list_dir(s->dfd, "images", &ids);
                if (r < 0)
                        return ab_err_set(err, AB_E_INTERNAL, -r, "list %s/images", s->dir);
                for (char **p = ids; *p; p++) {
                        size_t n = strlen(*p);
                        if (n != HEX_LEN + 5 || strcmp(*p + HEX_LEN, ".json"))
                                continue;
                        _cleanup_free_ char *h = xstrndup(*p, HEX_LEN);
                        json_t *rec = NULL;
                        if (record_load(s, h, &rec) < 0)
                                continue;
                        size_t i;
                        json_t *d;
                        bool hit = false;
                        json_array_foreach(json_object_get(rec, "digests"), i, d)
                        {
                                hit |= json_is_string(d) && !strcmp(json_string_value(d), q);
                        }
                        json_decref(rec);
                        if (hit) {
                                *hex = steal_pointer(&h);
                                return 0;
                        }
                }
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no image with id or digest %s", q);
        }
        /* a reference (tried before an id prefix: "abcdef123456" is a valid name) */
        ab_image_ref ref;
        _cleanup_err_ ab_err *perr = NULL;
        if (ab_image_ref_parse(q, &ref, &perr) == 0) {
                _cleanup_free_ char *canon = ab_image_ref_str(&ref);
                const char *id = json_string_value(json_object_get(refs, canon));
                if (!id && ref.digest) { /* "name@digest": the digest decides */
                        ab_image_ref_clear(&ref);
                        return resolve(s, refs, strrchr(q, '@') + 1, hex, name, err);
                }
                ab_image_ref_clear(&ref);
                if (id && ab_digest_valid(id)) {
                        *hex = xstrdup(id + 7);
                        *name = steal_pointer(&canon);
                        return 0;
                }
        }
        /* a unique id prefix */
        const char *pfx = strncmp(q, "sha256:", 7) ? q : q + 7;
        size_t pn = strlen(pfx);
        if (pn >= ID_PREFIX_MIN && pn <= HEX_LEN && imgstore_is_hex(pfx, pn)) {
                _cleanup_strv_ char **ids = NULL;
                int r = list_dir(s->dfd, "images", &ids);
                if (r < 0)
                        return ab_err_set(err, AB_E_INTERNAL, -r, "list %s/images", s->dir);
                for (char **p = ids; *p; p++) {
                        if (strncmp(*p, pfx, pn) || strlen(*p) != HEX_LEN + 5)
                                continue;
                        if (*hex) {
                                free(*hex);
                                *hex = NULL;
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "the id prefix %s matches several images: "
                                                  "give more of it",
                                                  pfx);
                        }
                        *hex = xstrndup(*p, HEX_LEN);
                }
                if (*hex)
                        return 0;
        }
        if (perr && qn && !(pn >= ID_PREFIX_MIN && imgstore_is_hex(pfx, pn)))
                return ab_err_set(err, AB_E_INVALID, 0, "%s", perr->msg);
        return ab_err_set(err, AB_E_NOT_FOUND, 0, "no image %s", q);
}

/* ---- open --------------------------------------------------------------- */

static int mkdir_p(const char *path)
{
        _cleanup_free_ char *p = xstrdup(path);
        for (char *c = p + 1; *c; c++) {
                if (*c != '/')
                        continue;
                *c = 0;
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *c = '/';
        }
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

static void copy_registry_opts(ab_image_store *s, const ab_registry_opts *o)
{
        s->registry = *o;
        if (o->insecure) {
                size_t n = imgstore_strv_len((char *const *)o->insecure);
                s->insecure = xcalloc(n + 1, sizeof(char *));
                for (size_t i = 0; i < n; i++)
                        s->insecure[i] = xstrdup(o->insecure[i]);
                s->registry.insecure = (const char *const *)s->insecure;
        }
        if (o->n_creds) {
                s->creds = xcalloc(o->n_creds, sizeof(*s->creds));
                for (size_t i = 0; i < o->n_creds; i++) {
                        const ab_registry_cred *c = &o->creds[i];
                        s->creds[i].registry = c->registry ? xstrdup(c->registry) : NULL;
                        s->creds[i].username = c->username ? xstrdup(c->username) : NULL;
                        s->creds[i].password = c->password ? xstrdup(c->password) : NULL;
                }
                s->registry.creds = s->creds;
        }
}

void ab_image_store_free(ab_image_store *s)
{
        if (!s)
                return;
        if (s->dfd >= 0)
                close(s->dfd);
        free(s->dir);
        imgstore_strv_free(s->insecure);
        imgstore_strv_free(s->app_registries);
        for (size_t i = 0; s->creds && i < s->registry.n_creds; i++) {
                free((char *)s->creds[i].registry);
                free((char *)s->creds[i].username);
                free((char *)s->creds[i].password);
        }
        free(s->creds);
        free(s);
}

/* Empties DIR/tmp unless a pull or import (holding gc.lock shared) uses it. */
/* Removes everything in DIR/tmp. Only with gc.lock exclusive: no pull or
 * import is using it. */
static void tmp_empty(ab_image_store *s)
{
        _cleanup_strv_ char **names = NULL;
        _cleanup_close_ int tfd = imgstore_open_dir_at(s->dfd, "tmp");
        if (tfd < 0 || list_dir(s->dfd, "tmp", &names) < 0)
                return;
        for (char **p = names; *p; p++)
                (void)ab_rm_tree_at(tfd, *p);
}

/* At open: what crashed pulls and imports left, unless one is running. */
static void tmp_sweep(ab_image_store *s)
{
        _cleanup_close_ int g = lock_take(s, "gc.lock", LOCK_EX | LOCK_NB);
        if (g >= 0)
                tmp_empty(s);
}

int ab_image_store_open(const ab_image_store_opts *opts, ab_image_store **out, ab_err **err)
{
        *out = NULL;
        if (!opts || !opts->dir || !*opts->dir)
                return ab_err_set(err, AB_E_INVALID, 0, "no image store directory given");
        int r = mkdir_p(opts->dir);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "make %s", opts->dir);
        ab_image_store *s = xzalloc(sizeof(*s));
        s->dfd = -1;
        s->dir = realpath(opts->dir, NULL);
        if (!s->dir) {
                r = ab_err_set(err, AB_E_INTERNAL, errno, "resolve %s", opts->dir);
                ab_image_store_free(s);
                return r;
        }
        s->dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (s->dfd < 0) {
                r = ab_err_set(err, AB_E_INTERNAL, errno, "open %s", s->dir);
                ab_image_store_free(s);
                return r;
        }
        copy_registry_opts(s, &opts->registry);
        s->layer = opts->layer;
        s->max_blob = opts->max_blob_bytes ? opts->max_blob_bytes : DEFAULT_MAX_BLOB;
        static const char *const app_default[] = AB_IMAGE_APP_REGISTRIES_DEFAULT;
        const char *const *apps = opts->app_registries ? opts->app_registries : app_default;
        size_t na = imgstore_strv_len((char *const *)apps);
        s->app_registries = xcalloc(na + 1, sizeof(char *));
        for (size_t i = 0; i < na; i++)
                s->app_registries[i] = xstrdup(apps[i]);
        s->app_loopback = opts->app_loopback;
        /* layers/ may be read by whoever mounts them; the rest is the store's own */
        static const char *const subdirs[] = {"images", "layers", "holds", "tmp"};
        for (size_t i = 0; i < AB_ARRAY_LEN(subdirs); i++) {
                mode_t mode = strcmp(subdirs[i], "layers") ? 0700 : 0755;
                if (mkdirat(s->dfd, subdirs[i], mode) < 0 && errno != EEXIST) {
                        r = ab_err_set(err, AB_E_INTERNAL, errno, "make %s/%s", s->dir, subdirs[i]);
                        ab_image_store_free(s);
                        return r;
                }
        }
        tmp_sweep(s);
        *out = s;
        return 0;
}

/* ---- get, list, remove -------------------------------------------------- */

int ab_image_get_as(ab_image_store *s, const char *app, const char *ref_or_id, ab_image *out,
                    ab_err **err)
{
        memset(out, 0, sizeof(*out));
        _cleanup_close_ int lk = imgstore_lock_or_err(s, "lock", LOCK_SH, err);
        if (lk < 0)
                return -1;
        json_t *refs = NULL;
        if (refs_load(s, &refs, err) < 0)
                return -1;
        _cleanup_free_ char *hex = NULL, *name = NULL;
        /* app's own name first */
        ab_image_ref ref;
        _cleanup_err_ ab_err *perr = NULL;
        if (app && ref_or_id && ref_or_id[0] != '@' &&
            ab_image_ref_parse(ref_or_id, &ref, &perr) == 0) {
                _cleanup_free_ char *canon = ab_image_ref_str(&ref);
                ab_image_ref_clear(&ref);
                _cleanup_free_ char *own = xasprintf("@%s/%s", app, canon);
                const char *id = json_string_value(json_object_get(refs, own));
                if (id && ab_digest_valid(id))
                        hex = xstrdup(id + 7);
        }
        int r = hex ? 0 : resolve(s, refs, ref_or_id, &hex, &name, err);
        if (r == 0)
                r = image_load(s, hex, refs, out, err);
        json_decref(refs);
        if (r == 0 && !ab_image_visible(out, app)) {
                ab_image_clear(out);
                r = ab_err_set(err, AB_E_NOT_FOUND, 0, "no image %s", ref_or_id);
        }
        return r < 0 ? -1 : 0;
}

int ab_image_get(ab_image_store *s, const char *ref_or_id, ab_image *out, ab_err **err)
{
        return ab_image_get_as(s, NULL, ref_or_id, out, err);
}

int ab_image_list(ab_image_store *s, ab_image **out, size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        _cleanup_close_ int lk = imgstore_lock_or_err(s, "lock", LOCK_SH, err);
        if (lk < 0)
                return -1;
        json_t *refs = NULL;
        if (refs_load(s, &refs, err) < 0)
                return -1;
        _cleanup_strv_ char **files = NULL;
        int r = list_dir(s->dfd, "images", &files);
        if (r < 0) {
                json_decref(refs);
                return ab_err_set(err, AB_E_INTERNAL, -r, "list %s/images", s->dir);
        }
        size_t cap = imgstore_strv_len(files);
        ab_image *v = xcalloc(cap ? cap : 1, sizeof(*v));
        size_t k = 0;
        for (char **p = files; *p; p++) {
                if (strlen(*p) != HEX_LEN + 5 || strcmp(*p + HEX_LEN, ".json"))
                        continue;
                _cleanup_free_ char *hex = xstrndup(*p, HEX_LEN);
                _cleanup_err_ ab_err *e = NULL;
                if (image_load(s, hex, refs, &v[k], &e) == 0) /* removed meanwhile: skip */
                        k++;
        }
        json_decref(refs);
        *out = v;
        *n = k;
        return 0;
}

int ab_image_remove(ab_image_store *s, const char *ref_or_id, ab_err **err)
{
        _cleanup_close_ int lk = imgstore_lock_or_err(s, "lock", LOCK_EX, err);
        if (lk < 0)
                return -1;
        json_t *refs = NULL;
        if (refs_load(s, &refs, err) < 0)
                return -1;
        _cleanup_free_ char *hex = NULL, *name = NULL;
        int r = resolve(s, refs, ref_or_id, &hex, &name, err);
        if (r == 0) {
                if (name) {
                        json_object_del(refs, name);
                } else {
                        _cleanup_free_ char *id = xasprintf("sha256:%s", hex);
                        _cleanup_strv_ char **names = names_of(refs, id);
                        for (char **p = names; *p; p++)
                                json_object_del(refs, *p);
                }
                r = refs_save(s, refs, err);
        }
        json_decref(refs);
        return r < 0 ? -1 : 0;
}

/* ---- holds -------------------------------------------------------------- */

static bool holder_ok(const char *h)
{
        size_t n = h ? strlen(h) : 0;
        if (!n || n > HOLDER_MAX_LEN || h[0] == '.')
                return false;
        for (const char *c = h; *c; c++)
                if (!isalnum((unsigned char)*c) && !strchr("._-", *c))
                        return false;
        return true;
}

int ab_image_hold(ab_image_store *s, const char *holder, const char *image_id, ab_err **err)
{
        if (!holder_ok(holder))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "invalid image holder \"%.80s\": letters, digits, '.', '_', "
                                  "'-' (at most 128)",
                                  holder ? holder : "");
        if (!ab_digest_valid(image_id))
                return ab_err_set(err, AB_E_INVALID, 0, "invalid image id \"%.80s\"",
                                  image_id ? image_id : "");
        _cleanup_close_ int lk = imgstore_lock_or_err(s, "lock", LOCK_EX, err);
        if (lk < 0)
                return -1;
        if (!record_exists(s, image_id + 7))
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no image %s", image_id);
        _cleanup_free_ char *p = xasprintf("holds/%s", holder);
        int r = ab_write_file_atomic(s->dfd, p, image_id, strlen(image_id), 0644);
        if (r < 0)
                return ab_err_set(err, r == -ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, -r,
                                  "write %s/%s", s->dir, p);
        return 0;
}

int ab_image_release(ab_image_store *s, const char *holder, ab_err **err)
{
        if (!holder_ok(holder))
                return 0; /* never held */
        _cleanup_close_ int lk = imgstore_lock_or_err(s, "lock", LOCK_EX, err);
        if (lk < 0)
                return -1;
        _cleanup_free_ char *p = xasprintf("holds/%s", holder);
        if (unlinkat(s->dfd, p, 0) < 0 && errno != ENOENT)
                return ab_err_set(err, AB_E_INTERNAL, errno, "remove %s/%s", s->dir, p);
        return 0;
}

int ab_image_prune_holds(ab_image_store *s, bool (*live)(void *ud, const char *holder), void *ud,
                         ab_err **err)
{
        _cleanup_strv_ char **holders = NULL;
        int r = list_dir(s->dfd, "holds", &holders);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "list %s/holds", s->dir);
        /* live() runs without our lock: it may call back into the store */
        for (char **p = holders; *p; p++)
                if (!live(ud, *p) && ab_image_release(s, *p, err) < 0)
                        return -1;
        return 0;
}

/* ---- gc ----------------------------------------------------------------- */

/* Ids (HEX) held by some holder, as a JSON set. */
static json_t *held_ids(ab_image_store *s)
{
        json_t *set = json_object();
        _cleanup_strv_ char **holders = NULL;
        if (list_dir(s->dfd, "holds", &holders) < 0)
                return set;
        for (char **p = holders; *p; p++) {
                _cleanup_free_ char *path = xasprintf("holds/%s", *p), *id = NULL;
                size_t len;
                if (ab_read_file(s->dfd, path, &id, &len) == 0 && ab_digest_valid(id))
                        json_object_set_new(set, id + 7, json_true());
        }
        return set;
}

/* Moves layers/HEX out of sight into the directory grave (in tmp/); adds
 * its bytes to *freed. */
static int layer_bury(ab_image_store *s, const char *hex, const char *grave, uint64_t *freed)
{
        _cleanup_free_ char *from = xasprintf("layers/%s", hex);
        _cleanup_free_ char *meta = xasprintf("layers/%s/layer.json", hex);
        _cleanup_free_ char *to = xasprintf("%s/%s", grave, hex);
        json_t *lj = NULL;
        uint64_t bytes = 0;
        if (read_json_at(s->dfd, meta, &lj) == 0)
                bytes = (uint64_t)json_integer_value(json_object_get(lj, "bytes"));
        json_decref(lj);
        if (renameat(s->dfd, from, s->dfd, to) < 0)
                return -errno;
        *freed += bytes;
        return 0;
}

int ab_image_gc(ab_image_store *s, uint64_t *freed, ab_err **err)
{
        uint64_t total = 0;
        if (freed)
                *freed = 0;
        _cleanup_close_ int g = lock_take(s, "gc.lock", LOCK_EX | LOCK_NB);
        if (g == -EWOULDBLOCK)
                return 0; /* a pull or import is running: next round */
        if (g < 0)
                return ab_err_set(err, AB_E_INTERNAL, -g, "lock %s/gc.lock", s->dir);
        _cleanup_close_ int lk = imgstore_lock_or_err(s, "lock", LOCK_EX, err);
        if (lk < 0)
                return -1;
        json_t *refs = NULL;
        if (refs_load(s, &refs, err) < 0)
                return -1;
        json_t *held = held_ids(s), *named = json_object(), *used = json_object();
        _cleanup_strv_ char **files = NULL, **layers = NULL;
        _cleanup_free_ char *grave = NULL;
        const char *k;
        json_t *val;
        json_object_foreach(refs, k, val)
        {
                const char *id = json_string_value(val);
                if (id && ab_digest_valid(id))
                        json_object_set_new(named, id + 7, json_true());
        }
        int rc = 0, r = list_dir(s->dfd, "images", &files);
        if (r < 0) {
                rc = ab_err_set(err, AB_E_INTERNAL, -r, "list %s/images", s->dir);
                goto out;
        }
        for (char **p = files; *p; p++) {
                if (strlen(*p) != HEX_LEN + 5 || strcmp(*p + HEX_LEN, ".json"))
                        continue;
                _cleanup_free_ char *hex = xstrndup(*p, HEX_LEN);
                _cleanup_free_ char *path = xasprintf("images/%s", *p);
                if (!json_object_get(named, hex) && !json_object_get(held, hex)) {
                        if (unlinkat(s->dfd, path, 0) < 0 && errno != ENOENT) {
                                rc = ab_err_set(err, AB_E_INTERNAL, errno, "remove %s/%s", s->dir,
                                                path);
                                goto out;
                        }
                        continue;
                }
                json_t *rec = NULL;
                if (record_load(s, hex, &rec) < 0) {
                        /* an unreadable record keeps every layer: never guess */
                        rc = ab_err_set(err, AB_E_INTERNAL, 0, "read %s/%s", s->dir, path);
                        goto out;
                }
                size_t i;
                json_t *l;
                json_array_foreach(json_object_get(rec, "layers"), i, l)
                {
                        const char *d = json_string_value(json_object_get(l, "digest"));
                        if (d && ab_digest_valid(d))
                                json_object_set_new(used, d + 7, json_true());
                }
                json_decref(rec);
        }
        r = list_dir(s->dfd, "layers", &layers);
        if (r < 0) {
                rc = ab_err_set(err, AB_E_INTERNAL, -r, "list %s/layers", s->dir);
                goto out;
        }
        grave = imgstore_mkdir_tmp(s, "gc", err);
        if (!grave) {
                rc = -1;
                goto out;
        }
        for (char **p = layers; *p; p++) {
                if (json_object_get(used, *p))
                        continue;
                r = layer_bury(s, *p, grave, &total);
                if (r < 0) {
                        rc = ab_err_set(err, AB_E_INTERNAL, -r, "remove layer %s/layers/%s", s->dir,
                                        *p);
                        goto out;
                }
        }
out:
        /* the removal itself needs no metadata lock (no record uses these layers),
         * and no pull or import runs (gc.lock): their crashed leftovers go too */
        close(steal_fd(&lk));
        tmp_empty(s);
        json_decref(refs);
        json_decref(held);
        json_decref(named);
        json_decref(used);
        if (freed)
                *freed = total;
        return rc;
}

/* ---- staging: layers and records ---------------------------------------- */

void imgstore_stage_clear(stage_image *im)
{
        free(im->id);
        ab_image_config_clear(&im->cfg);
        for (size_t i = 0; i < im->n_layers; i++) {
                free(im->layers[i].digest);
                free(im->layers[i].diff_id);
                free(im->layers[i].path);
        }
        free(im->layers);
        imgstore_strv_free(im->names);
        imgstore_strv_free(im->digests);
        memset(im, 0, sizeof(*im));
}

void imgstore_stages_free(stage_image *v, size_t n)
{
        for (size_t i = 0; i < n; i++)
                imgstore_stage_clear(&v[i]);
        free(v);
}

/* True when layers/HEX is in the store; *bytes gets its file data size. */
bool imgstore_layer_present(ab_image_store *s, const char *hex, uint64_t *bytes)
{
        _cleanup_free_ char *p = xasprintf("layers/%s/layer.json", hex);
        json_t *j = NULL;
        if (read_json_at(s->dfd, p, &j) < 0)
                return false;
        *bytes = (uint64_t)json_integer_value(json_object_get(j, "bytes"));
        json_decref(j);
        return true;
}

static int diff_id_mismatch(const char *digest, const char *got, const char *want, ab_err **err)
{
        return ab_err_set(err, AB_E_INVALID, 0,
                          "layer %s decompresses to %s, but the image's config lists diff id %s "
                          "(rootfs.diff_ids)",
                          digest, got, want);
}

int imgstore_layer_diff_check(ab_image_store *s, const char *digest, const char *diff_id,
                              ab_err **err)
{
        if (!diff_id)
                return 0;
        _cleanup_free_ char *p = xasprintf("layers/%s/layer.json", digest + 7);
        json_t *j = NULL;
        if (read_json_at(s->dfd, p, &j) < 0)
                return 0; /* gone meanwhile: the caller's commit finds that */
        const char *got = json_string_value(json_object_get(j, "diff_id"));
        int r = got && strcmp(got, diff_id) ? diff_id_mismatch(digest, got, diff_id, err) : 0;
        json_decref(j);
        return r;
}

/* The diff id of the layer in fd, checked against want; fd is left where it was. */
static int layer_diff_id(ab_image_store *s, const char *digest, int fd, const char *want,
                         char **got, ab_err **err)
{
        off_t at = lseek(fd, 0, SEEK_CUR);
        if (at < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "layer %s: not seekable", digest);
        if (ab_layer_diff_id(fd, &s->layer, got, err) < 0)
                return ab_err_wrap(err, "layer %s", digest);
        if (lseek(fd, at, SEEK_SET) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "rewind layer %s", digest);
        if (strcmp(*got, want))
                return diff_id_mismatch(digest, *got, want, err);
        return 0;
}

/* Unpacks the layer read from fd into DIR/tmp, then renames it into
 * DIR/layers/HEX: the layer appears whole or not at all. */
int imgstore_layer_install(ab_image_store *s, const char *digest, const char *diff_id, int fd,
                           uint64_t total, uint64_t max_bytes, ab_image_progress_fn fn, void *ud,
                           uint64_t *bytes, ab_err **err)
{
        const char *hex = digest + 7;
        _cleanup_free_ char *got_diff = NULL;
        if (diff_id && layer_diff_id(s, digest, fd, diff_id, &got_diff, err) < 0)
                return -1;
        _cleanup_free_ char *tmp = imgstore_mkdir_tmp(s, "layer", err);
        if (!tmp)
                return -1;
        int rc = -1;
        _cleanup_close_ int tfd = imgstore_open_dir_at(s->dfd, tmp), fsfd = -1;
        _cleanup_free_ char *dst = xasprintf("layers/%s", hex);
        if (tfd < 0 || mkdirat(tfd, "fs", 0755) < 0 ||
            (fsfd = imgstore_open_dir_at(tfd, "fs")) < 0) {
                ab_err_set(err, AB_E_INTERNAL, errno, "make a layer directory in %s/tmp", s->dir);
                goto out;
        }
        imgstore_progress(fn, ud, "unpack", digest, 0, total);
        ab_layer_stats st = {0};
        ab_layer_opts lo = s->layer;
        if (max_bytes)
                lo.max_bytes = max_bytes;
        if (ab_layer_unpack(fd, fsfd, &lo, &st, err) < 0) {
                ab_err_wrap(err, "layer %s", digest);
                goto out;
        }
        json_t *meta = json_object();
        json_object_set_new(meta, "digest", json_string(digest));
        json_object_set_new(meta, "bytes", json_integer((json_int_t)st.bytes));
        json_object_set_new(meta, "entries", json_integer((json_int_t)st.entries));
        if (got_diff)
                json_object_set_new(meta, "diff_id", json_string(got_diff));
        int r = write_json_at(tfd, "layer.json", meta);
        json_decref(meta);
        if (r == 0 && syncfs(tfd) < 0)
                r = -errno;
        if (r == 0 && fchmod(tfd, 0755) < 0)
                r = -errno;
        if (r < 0) {
                ab_err_set(err, r == -ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, -r, "write layer %s",
                           digest);
                goto out;
        }
        if (renameat2(s->dfd, tmp, s->dfd, dst, RENAME_NOREPLACE) == 0) {
                *bytes = st.bytes;
        } else if (errno == EEXIST || errno == ENOTEMPTY) {
                /* another pull or import got there first: theirs is as good */
                if (!imgstore_layer_present(s, hex, bytes))
                        *bytes = st.bytes;
        } else {
                ab_err_set(err, AB_E_INTERNAL, errno, "move layer %s into %s/layers", digest,
                           s->dir);
                goto out;
        }
        imgstore_progress(fn, ud, "unpack", digest, total, total);
        rc = 0;
out:
        (void)ab_rm_tree_at(s->dfd, tmp);
        return rc;
}

/* True when image im is in the store with every layer of its record (then
 * those are kept: the same image pulled compressed and imported plain has
 * other layer digests, and a box may be using the layers it has). */
bool imgstore_stage_reuse(ab_image_store *s, stage_image *im, ab_image_progress_fn fn, void *ud)
{
        json_t *rec = NULL;
        if (record_load(s, im->id + 7, &rec) < 0)
                return false;
        json_t *layers = json_object_get(rec, "layers"), *l;
        bool all = json_is_array(layers);
        size_t i;
        uint64_t b;
        json_array_foreach(layers, i, l)
        {
                const char *d = json_string_value(json_object_get(l, "digest"));
                all = all && d && ab_digest_valid(d) && imgstore_layer_present(s, d + 7, &b);
        }
        if (all)
                json_array_foreach(layers, i, l)
                {
                        imgstore_progress(fn, ud, "exists",
                                          json_string_value(json_object_get(l, "digest")), 0, 0);
                }
        json_decref(rec);
        im->reused = all;
        return all;
}

static json_t *record_json(const stage_image *im, json_t *old, const char *source)
{
        json_t *rec = json_object();
        json_object_set_new(rec, "id", json_string(im->id));
        json_t *old_layers = json_object_get(old, "layers");
        json_t *layers = im->reused && old_layers ? json_deep_copy(old_layers) : json_array();
        for (size_t i = 0; !im->reused && i < im->n_layers; i++) {
                const stage_layer *l = &im->layers[i];
                json_t *o = json_object();
                json_object_set_new(o, "digest", json_string(l->digest));
                json_object_set_new(o, "diff_id", jstr_or_null(l->diff_id));
                json_object_set_new(o, "bytes", json_integer((json_int_t)l->bytes));
                json_array_append_new(layers, o);
        }
        json_object_set_new(rec, "layers", layers);
        json_object_set_new(rec, "config", config_json(&im->cfg));
        _cleanup_strv_ char **digests = jdupv(json_object_get(old, "digests"));
        for (char **d = im->digests; d && *d; d++)
                imgstore_strv_add_unique(&digests, *d);
        json_object_set_new(rec, "digests", digests ? jstrv(digests) : json_array());
        json_t *created = json_object_get(old, "created");
        json_object_set_new(rec, "created",
                            json_is_integer(created) ? json_incref(created)
                                                     : json_integer((json_int_t)time(NULL)));
        json_t *src = json_object_get(old, "source");
        json_object_set_new(rec, "source",
                            json_is_string(src) ? json_incref(src) : json_string(source));
        /* private to its apps while only apps made it: the same image made
         * by another app (the same box files on the same base) adds it, one
         * made shared (a pull, an admin's snapshot) stays shared */
        json_t *apps = json_object_get(old, "apps");
        if (old ? json_array_size(apps) && im->app : im->app != NULL) {
                _cleanup_strv_ char **v = jdupv(apps);
                imgstore_strv_add_unique(&v, im->app);
                json_object_set_new(rec, "apps", jstrv(v));
        } else if (old && json_array_size(apps)) {
                json_object_set_new(rec, "apps", json_incref(apps));
        }
        /* the apps whose disk quota it counts against */
        _cleanup_strv_ char **pulled = jdupv(json_object_get(old, "pulled_by"));
        if (im->pulled_by)
                imgstore_strv_add_unique(&pulled, im->pulled_by);
        if (pulled && pulled[0])
                json_object_set_new(rec, "pulled_by", jstrv(pulled));
        return rec;
}

/* Writes the records (merged with any earlier one of the same id), then
 * names them in refs.json; *out gets the images as stored. */
int imgstore_commit(ab_image_store *s, stage_image *v, size_t n, const char *source, ab_image **out,
                    ab_err **err)
{
        _cleanup_close_ int lk = imgstore_lock_or_err(s, "lock", LOCK_EX, err);
        if (lk < 0)
                return -1;
        json_t *refs = NULL;
        if (refs_load(s, &refs, err) < 0)
                return -1;
        int rc = 0;
        for (size_t i = 0; i < n && !rc; i++) {
                json_t *old = NULL;
                (void)record_load(s, v[i].id + 7, &old);
                json_t *rec = record_json(&v[i], old, source);
                json_decref(old);
                _cleanup_free_ char *p = record_path(v[i].id + 7);
                int r = write_json_at(s->dfd, p, rec);
                json_decref(rec);
                if (r < 0)
                        rc = ab_err_set(err, r == -ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, -r,
                                        "write %s/%s", s->dir, p);
                for (char **nm = v[i].names; nm && *nm; nm++)
                        json_object_set_new(refs, *nm, json_string(v[i].id));
        }
        if (!rc)
                rc = refs_save(s, refs, err);
        if (!rc && out) {
                *out = xcalloc(n ? n : 1, sizeof(ab_image));
                for (size_t i = 0; i < n && !rc; i++)
                        rc = image_load(s, v[i].id + 7, refs, &(*out)[i], err);
                if (rc) {
                        ab_image_list_free(*out, n);
                        *out = NULL;
                }
        }
        json_decref(refs);
        return rc < 0 ? -1 : 0;
}

static int check_platform(const ab_image_config *c, const char *id, ab_err **err)
{
        if (!c->os || !c->arch || strcmp(c->os, "linux") || strcmp(c->arch, HOST_ARCH))
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "image is for %s/%s, this host runs linux/" HOST_ARCH,
                                  c->os ? c->os : "?", c->arch ? c->arch : "?");
        return 0;
}

/* Parses the config blob of im (im->id set from its bytes). */
int imgstore_stage_config(stage_image *im, const char *json, size_t len, ab_err **err)
{
        im->id = imgstore_digest_of(json, len);
        if (ab_image_config_parse(json, len, &im->cfg, err) < 0)
                return ab_err_wrap(err, "config of image %s", im->id);
        return check_platform(&im->cfg, im->id, err);
}

/* Adds the canonical form of name to im->names. */
int imgstore_stage_name(stage_image *im, const char *name, ab_err **err)
{
        ab_image_ref r;
        if (ab_image_ref_parse(name, &r, err) < 0)
                return ab_err_wrap(err, "image name \"%.200s\"", name);
        _cleanup_free_ char *canon = ab_image_ref_str(&r);
        ab_image_ref_clear(&r);
        imgstore_strv_add_unique(&im->names, canon);
        return 0;
}

/* ---- pull --------------------------------------------------------------- */

typedef struct dl_progress {
        ab_image_progress_fn fn;
        void *ud;
        const char *digest;
} dl_progress;

static void on_download(void *ud, uint64_t done, uint64_t total)
{
        dl_progress *p = ud;
        imgstore_progress(p->fn, p->ud, "download", p->digest, done, total);
}

/* Downloads blob digest (verified by the registry module) into an unnamed
 * file in DIR/tmp; returns its fd, at offset 0. */
static int download(ab_image_store *s, ab_registry *reg, const char *digest, uint64_t max,
                    ab_image_progress_fn fn, void *ud, ab_err **err)
{
        _cleanup_close_ int fd = openat(s->dfd, "tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "make a file in %s/tmp", s->dir);
        dl_progress p = {fn, ud, digest};
        if (ab_registry_get_blob(reg, digest, fd, max, fn ? on_download : NULL, &p, err) < 0)
                return -1;
        if (lseek(fd, 0, SEEK_SET) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "rewind blob %s", digest);
        return steal_fd(&fd);
}

/* The manifest for one image: an index is narrowed to this host's platform.
 * Every manifest digest met goes to im->digests. */
static int pull_manifest(ab_registry *reg, const char *reference, stage_image *im, ab_manifest *m,
                         ab_err **err)
{
        _cleanup_buf_ ab_buf body = {0};
        _cleanup_free_ char *mt = NULL, *digest = NULL, *picked = NULL;
        if (ab_registry_get_manifest(reg, reference, &body, &mt, &digest, err) < 0)
                return -1;
        imgstore_strv_add_unique(&im->digests, digest);
        if (ab_manifest_is_index(body.p, body.n, mt)) {
                _cleanup_err_ ab_err *e = NULL;
                if (ab_index_pick(body.p, body.n, "linux", HOST_ARCH, &picked, &e) < 0)
                        return ab_err_set(err,
                                          e->code == AB_E_NOT_FOUND ? AB_E_UNSUPPORTED : e->code, 0,
                                          "%s", e->msg);
                ab_buf_free(&body);
                free(mt);
                free(digest);
                mt = digest = NULL;
                if (ab_registry_get_manifest(reg, picked, &body, &mt, &digest, err) < 0)
                        return -1;
                imgstore_strv_add_unique(&im->digests, digest);
        }
        return ab_manifest_parse(body.p, body.n, m, err);
}

static int pull_config(ab_image_store *s, ab_registry *reg, const ab_manifest *m, stage_image *im,
                       ab_err **err)
{
        _cleanup_close_ int fd =
            download(s, reg, m->config_digest, AB_MANIFEST_MAX_BYTES, NULL, NULL, err);
        if (fd < 0)
                return -1;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "config %s", m->config_digest);
        _cleanup_free_ char *json = xmalloc((size_t)st.st_size + 1);
        ssize_t n = ab_read_full(fd, json, (size_t)st.st_size);
        if (n != st.st_size)
                return ab_err_set(err, AB_E_INTERNAL, n < 0 ? (int)-n : 0, "read config %s",
                                  m->config_digest);
        json[n] = 0;
        if (imgstore_stage_config(im, json, (size_t)n, err) < 0)
                return -1;
        if (strcmp(im->id, m->config_digest)) /* the registry module checked; so do we */
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "config blob %s has digest %s",
                                  m->config_digest, im->id);
        size_t nd = imgstore_strv_len(im->cfg.diff_ids);
        /* every layer is checked against its diff id: a config without them
         * would let any layer through */
        if (!im->cfg.diff_ids)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "image %s: its config lists no rootfs.diff_ids", im->id);
        if (nd != m->n_layers)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "image %s has %zu layers but its config lists %zu", im->id,
                                  m->n_layers, nd);
        return 0;
}

/* What an app's pull may still add (ab_image_pull_as's budget). */
typedef struct pull_budget {
        const char *app;
        uint64_t budget, left; /* budget 0: no bound */
} pull_budget;

static int over_budget(const pull_budget *b, const char *what, ab_err **err)
{
        return ab_err_set(err, AB_E_QUOTA, 0,
                          "quota max_disk_mib of app \"%s\" exceeded: %s needs more than the "
                          "%" PRIu64 " MiB of disk the app has left",
                          b->app, what, b->budget >> 20);
}

/* Takes bytes of b; AB_E_QUOTA when they are more than is left. */
static int budget_take(pull_budget *b, uint64_t bytes, const char *what, ab_err **err)
{
        if (!b->budget)
                return 0;
        if (bytes > b->left)
                return over_budget(b, what, err);
        b->left -= bytes;
        return 0;
}

/* When app pulled or made image id before, its size counts already. */
static bool counted_for(ab_image_store *s, const char *id, const char *app, uint64_t *size)
{
        json_t *rec = NULL;
        *size = 0;
        if (record_load(s, id + 7, &rec) < 0)
                return false;
        _cleanup_strv_ char **pulled = jdupv(json_object_get(rec, "pulled_by"));
        _cleanup_strv_ char **apps = jdupv(json_object_get(rec, "apps"));
        bool yes = false;
        for (char **p = pulled; p && *p && !yes; p++)
                yes = !strcmp(*p, app);
        for (char **p = apps; p && *p && !yes; p++)
                yes = !strcmp(*p, app);
        json_t *layers = json_object_get(rec, "layers"), *l;
        size_t i;
        json_array_foreach(layers, i, l)
        {
                *size += (uint64_t)json_integer_value(json_object_get(l, "bytes"));
        }
        json_decref(rec);
        return yes;
}

static int pull_layers(ab_image_store *s, ab_registry *reg, const ab_manifest *m, stage_image *im,
                       pull_budget *b, ab_image_progress_fn fn, void *ud, ab_err **err)
{
        uint64_t have = 0;
        if (b->budget && counted_for(s, im->id, b->app, &have))
                b->budget = 0; /* counted when the app first pulled it */
        if (imgstore_stage_reuse(s, im, fn, ud))
                return budget_take(b, have, im->id, err);
        im->layers = xcalloc(m->n_layers ? m->n_layers : 1, sizeof(stage_layer));
        for (size_t i = 0; i < m->n_layers; i++) {
                stage_layer *l = &im->layers[im->n_layers++];
                l->digest = xstrdup(m->layers[i].digest);
                l->diff_id = im->cfg.diff_ids ? xstrdup(im->cfg.diff_ids[i]) : NULL;
                if (imgstore_layer_present(s, l->digest + 7, &l->bytes)) {
                        if (imgstore_layer_diff_check(s, l->digest, l->diff_id, err) < 0 ||
                            budget_take(b, l->bytes, im->id, err) < 0)
                                return -1;
                        imgstore_progress(fn, ud, "exists", l->digest, 0, 0);
                        continue;
                }
                if (b->budget && !b->left)
                        return over_budget(b, im->id, err);
                uint64_t cap = s->layer.max_bytes ? s->layer.max_bytes : AB_LAYER_DEFAULT_MAX_BYTES;
                bool capped = b->budget && b->left < cap;
                _cleanup_close_ int fd = download(s, reg, l->digest, s->max_blob, fn, ud, err);
                if (fd < 0)
                        return -1;
                if (imgstore_layer_install(s, l->digest, l->diff_id, fd, m->layers[i].size,
                                           capped ? b->left : 0, fn, ud, &l->bytes, err) < 0) {
                        if (capped && *err && (*err)->code == AB_E_LIMIT) {
                                ab_err_free(err);
                                return over_budget(b, im->id, err);
                        }
                        return -1;
                }
                if (budget_take(b, l->bytes, im->id, err) < 0)
                        return -1;
        }
        return 0;
}

bool ab_image_app_registry_allowed(const ab_image_store *s, const char *domain)
{
        if (s->app_loopback && ab_image_ref_is_loopback(domain))
                return true;
        size_t dl = strlen(domain);
        for (char **p = s->app_registries; p && *p; p++) {
                if (strcasecmp(*p, domain) == 0)
                        return true;
                if (!strncmp(*p, "*.", 2)) { /* subdomains only */
                        size_t sl = strlen(*p + 1);
                        if (dl > sl && strcasecmp(domain + dl - sl, *p + 1) == 0)
                                return true;
                }
        }
        return false;
}

int ab_image_pull(ab_image_store *s, const char *ref, ab_image_progress_fn fn, void *ud,
                  ab_image *out, ab_err **err)
{
        return ab_image_pull_as(s, NULL, 0, ref, fn, ud, out, err);
}

int ab_image_app_bytes(ab_image_store *s, const char *app, uint64_t *out, ab_err **err)
{
        *out = 0;
        ab_image *imgs = NULL;
        size_t n = 0;
        if (ab_image_list(s, &imgs, &n, err) < 0)
                return -1;
        for (size_t i = 0; i < n; i++) {
                bool mine = false;
                for (char **p = imgs[i].pulled_by; p && *p && !mine; p++)
                        mine = !strcmp(*p, app);
                for (char **p = imgs[i].apps; p && *p && !mine; p++)
                        mine = !strcmp(*p, app);
                if (mine)
                        *out += imgs[i].size;
        }
        ab_image_list_free(imgs, n);
        return 0;
}

int ab_image_pull_as(ab_image_store *s, const char *app, uint64_t budget, const char *ref,
                     ab_image_progress_fn fn, void *ud, ab_image *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        ab_image_ref r;
        if (ab_image_ref_parse(ref, &r, err) < 0)
                return -1;
        if (app && !ab_image_app_registry_allowed(s, r.domain)) {
                ab_err_set(err, AB_E_PERMISSION, 0,
                           "image %s: pulls with an API key may use only the registries the "
                           "server allows (app_registries); %s is not one",
                           ref, r.domain);
                ab_image_ref_clear(&r);
                return -1;
        }
        ab_registry_opts ro = s->registry;
        ro.check_addrs = app != NULL;
        ro.allow_loopback = s->app_loopback;
        _cleanup_free_ char *canon = ab_image_ref_str(&r);
        _cleanup_close_ int g = imgstore_lock_or_err(s, "gc.lock", LOCK_SH, err);
        ab_registry *reg = NULL;
        ab_manifest m = {0};
        stage_image im = {.names = xcalloc(1, sizeof(char *)),
                          .digests = xcalloc(1, sizeof(char *)),
                          .pulled_by = app};
        pull_budget b = {.app = app, .budget = app ? budget : 0, .left = budget};
        ab_image *got = NULL;
        int rc = g < 0 ? -1 : 0;
        if (rc == 0)
                rc = ab_registry_open(&ro, &r, &reg, err);
        if (rc == 0) {
                imgstore_progress(fn, ud, "resolve", NULL, 0, 0);
                rc = pull_manifest(reg, ab_image_ref_reference(&r), &im, &m, err);
        }
        if (rc == 0)
                rc = pull_config(s, reg, &m, &im, err);
        if (rc == 0)
                rc = pull_layers(s, reg, &m, &im, &b, fn, ud, err);
        if (rc == 0) {
                imgstore_strv_add_unique(&im.names, canon);
                rc = imgstore_commit(s, &im, 1, "pull", &got, err);
        }
        if (rc == 0) {
                *out = got[0];
                free(got);
                imgstore_progress(fn, ud, "done", NULL, 0, 0);
        }
        bool left_layers = rc < 0 && im.n_layers > 0;
        imgstore_stage_clear(&im);
        ab_manifest_clear(&m);
        if (reg)
                ab_registry_free(reg);
        ab_image_ref_clear(&r);
        if (left_layers && g >= 0) {
                /* layers this failed pull unpacked belong to no image: collect
                 * them now (skipped while another pull runs; the next GC then) */
                close(g);
                g = -1;
                _cleanup_err_ ab_err *ge = NULL;
                (void)ab_image_gc(s, NULL, &ge);
        }
        return rc < 0 ? -1 : 0;
}

/* ---- commit: a new image of a base image plus one layer ------------------ */

/* The config blob of the new image: the base's config with the new layer's
 * diff id added to rootfs.diff_ids. */
static char *commit_config(const ab_image *base, const char *diff_id)
{
        const ab_image_config *c = &base->config;
        json_t *cfg = json_object();
        json_object_set_new(cfg, "Env", jstrv(c->env));
        if (c->workdir)
                json_object_set_new(cfg, "WorkingDir", json_string(c->workdir));
        if (c->user)
                json_object_set_new(cfg, "User", json_string(c->user));
        if (c->entrypoint)
                json_object_set_new(cfg, "Entrypoint", jstrv(c->entrypoint));
        if (c->cmd)
                json_object_set_new(cfg, "Cmd", jstrv(c->cmd));
        json_t *ids = json_array();
        for (char **d = c->diff_ids; d && *d; d++)
                json_array_append_new(ids, json_string(*d));
        json_array_append_new(ids, json_string(diff_id));
        char when[AB_TIME_LEN];
        ab_time_rfc3339((int64_t)time(NULL) * 1000, false, when);
        json_t *j = json_pack("{s:s,s:s,s:o,s:{s:s,s:o},s:s,s:[{s:s,s:s}]}", "architecture",
                              c->arch ? c->arch : HOST_ARCH, "os", c->os ? c->os : "linux",
                              "config", cfg, "rootfs", "type", "layers", "diff_ids", ids, "created",
                              when, "history", "created", when, "created_by", "agentbox snapshot");
        char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(j);
        if (!text)
                abort();
        return text;
}

/* im's layers: the base's (digests from their store paths) and the new one. */
static int commit_layers(ab_image_store *s, const ab_image *base, const char *digest,
                         uint64_t bytes, stage_image *im, ab_err **err)
{
        size_t nd = imgstore_strv_len(base->config.diff_ids);
        im->layers = xcalloc(base->n_layers + 1, sizeof(stage_layer));
        for (size_t i = 0; i < base->n_layers; i++) {
                const char *p = base->layers[i];
                size_t pl = strlen(p);
                /* DIR/layers/HEX/fs */
                if (pl < HEX_LEN + 3 || strcmp(p + pl - 3, "/fs"))
                        return ab_err_set(err, AB_E_INTERNAL, 0, "layer path %s", p);
                stage_layer *l = &im->layers[im->n_layers++];
                l->digest = xasprintf("sha256:%.*s", HEX_LEN, p + pl - 3 - HEX_LEN);
                l->diff_id = nd == base->n_layers ? xstrdup(base->config.diff_ids[i]) : NULL;
                if (!imgstore_layer_present(s, l->digest + 7, &l->bytes))
                        return ab_err_set(err, AB_E_NOT_FOUND, 0,
                                          "layer %s of image %s is not in the store", l->digest,
                                          base->id);
        }
        stage_layer *l = &im->layers[im->n_layers++];
        l->digest = xstrdup(digest);
        l->diff_id = xstrdup(digest); /* uncompressed: the blob is the diff */
        l->bytes = bytes;
        return 0;
}

int ab_image_commit(ab_image_store *s, const char *base_id, const char *name, const char *app,
                    int (*write_layer)(void *ud, int fd, ab_err **err), void *ud, ab_image *out,
                    ab_err **err)
{
        memset(out, 0, sizeof(*out));
        stage_image im = {
            .names = xcalloc(1, sizeof(char *)), .digests = xcalloc(1, sizeof(char *)), .app = app};
        ab_image base = {0};
        ab_image *got = NULL;
        _cleanup_free_ char *digest = NULL, *blob = NULL;
        _cleanup_close_ int fd = -1;
        uint64_t size = 0, bytes = 0;
        int rc = imgstore_stage_name(&im, name, err);
        if (rc == 0 && app) { /* in app's own names */
                char *own = xasprintf("@%s/%s", app, im.names[0]);
                free(im.names[0]);
                im.names[0] = own;
        }
        if (rc == 0)
                rc = ab_image_get(s, base_id, &base, err);
        /* GC waits for commits as for pulls: a layer installed here has no
         * record naming it until the end */
        _cleanup_close_ int g = rc < 0 ? -1 : imgstore_lock_or_err(s, "gc.lock", LOCK_SH, err);
        if (rc == 0 && g < 0)
                rc = -1;
        if (rc == 0 && (fd = openat(s->dfd, "tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)) < 0)
                rc = ab_err_set(err, AB_E_INTERNAL, errno, "make a file in %s/tmp", s->dir);
        if (rc == 0)
                rc = write_layer(ud, fd, err);
        if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
                rc = ab_err_set(err, AB_E_INTERNAL, errno, "rewind the new layer");
        if (rc == 0) {
                int r = imgstore_digest_fd(fd, &digest, &size);
                if (r < 0)
                        rc = ab_err_set(err, AB_E_INTERNAL, -r, "read the new layer");
        }
        if (rc == 0 && !imgstore_layer_present(s, digest + 7, &bytes)) {
                if (lseek(fd, 0, SEEK_SET) < 0)
                        rc = ab_err_set(err, AB_E_INTERNAL, errno, "rewind the new layer");
                else
                        rc = imgstore_layer_install(s, digest, digest, fd, size, 0, NULL, NULL,
                                                    &bytes, err);
        }
        if (rc == 0) {
                blob = commit_config(&base, digest);
                rc = imgstore_stage_config(&im, blob, strlen(blob), err);
        }
        if (rc == 0)
                rc = commit_layers(s, &base, digest, bytes, &im, err);
        if (rc == 0)
                rc = imgstore_commit(s, &im, 1, "snapshot", &got, err);
        if (rc == 0) {
                *out = got[0];
                free(got);
        }
        imgstore_stage_clear(&im);
        ab_image_clear(&base);
        return rc < 0 ? -1 : 0;
}
