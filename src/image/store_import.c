/* Imports into the image store (store.h): the outer archive is extracted
 * into DIR/tmp with checked names, then read as `docker save` output
 * (manifest.json) or an OCI image layout (index.json); every digest is
 * verified before a layer is unpacked. */
#include "image/store.h"

#include "image/ref.h"
#include "image/store_int.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <sys/file.h>
#include <sys/stat.h>

#define OUTER_MAX_ENTRIES 100000u /* entries of an imported archive */
#define OUTER_MAX_DEPTH   64
#define IO_CHUNK          (64 * 1024)
#define HEX_LEN           IMGSTORE_HEX_LEN

/* ---- import: the outer archive ------------------------------------------ */

/* Normalises an entry name ("./a//b/" -> "a/b"); NULL with *why for a name
 * that is absolute or climbs with "..". *out NULL for the root itself. */
static int clean_name(const char *raw, char **out, const char **why)
{
        *out = NULL;
        if (!raw || !*raw)
                return *why = "has no name", -1;
        if (raw[0] == '/')
                return *why = "is an absolute path", -1;
        if (strlen(raw) > 4096)
                return *why = "has a path longer than 4096 bytes", -1;
        char *res = xmalloc(strlen(raw) + 1);
        size_t o = 0;
        int depth = 0;
        for (const char *p = raw; *p;) {
                const char *end = strchrnul(p, '/');
                size_t len = (size_t)(end - p);
                if (len == 2 && p[0] == '.' && p[1] == '.') {
                        free(res);
                        return *why = "has a \"..\" component", -1;
                }
                if (len > 255 || ++depth > OUTER_MAX_DEPTH) {
                        free(res);
                        return *why = "is too long or too deep", -1;
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
        return 0;
}

/* mkdir -p of rel under root, every component a real directory we made
 * (O_NOFOLLOW); returns an fd of it or -errno. */
static int mkdirs_in(int root, const char *rel)
{
        int fd = fcntl(root, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return -errno;
        for (const char *p = rel; *p;) {
                const char *end = strchrnul(p, '/');
                _cleanup_free_ char *comp = xstrndup(p, (size_t)(end - p));
                if (mkdirat(fd, comp, 0700) < 0 && errno != EEXIST) {
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

static int mkdirs_error(int r, const char *path, ab_err **err)
{
        if (r == -ENOTDIR || r == -ELOOP || r == -EEXIST)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "archive entry \"%.200s\": a parent of it is a file or a "
                                  "symbolic link in the archive",
                                  path);
        return ab_err_set(err, r == -ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, -r,
                          "archive entry \"%.200s\": mkdir", path);
}

static int copy_entry(struct archive *a, int out, const char *name, uint64_t max, ab_err **err)
{
        char buf[IO_CHUNK];
        uint64_t got = 0;
        for (;;) {
                la_ssize_t n = archive_read_data(a, buf, sizeof(buf));
                if (n == 0)
                        return 0;
                if (n < 0)
                        return ab_err_set(err, AB_E_INVALID, 0, "archive entry \"%s\": %s", name,
                                          archive_error_string(a));
                got += (uint64_t)n;
                if (got > max)
                        return ab_err_set(err, AB_E_LIMIT, 0,
                                          "archive entry \"%s\" is larger than %" PRIu64 " bytes",
                                          name, max);
                int r = ab_write_all(out, buf, (size_t)n);
                if (r < 0)
                        return ab_err_set(err, r == -ENOSPC ? AB_E_STORAGE : AB_E_INTERNAL, -r,
                                          "archive entry \"%s\": write", name);
        }
}

/* One entry of the outer archive into root: files, directories and
 * symlinks (kept as they are: the blobs are opened with RESOLVE_IN_ROOT, so a
 * link cannot lead out); anything else is refused. */
static int extract_entry(struct archive *a, struct archive_entry *e, int root, uint64_t max,
                         ab_err **err)
{
        const char *raw = archive_entry_pathname(e);
        _cleanup_free_ char *path = NULL;
        const char *why = NULL;
        if (clean_name(raw, &path, &why) < 0)
                return ab_err_set(err, AB_E_INVALID, 0, "archive entry \"%.200s\" %s",
                                  raw ? raw : "", why);
        if (!path)
                return 0;
        mode_t type = archive_entry_filetype(e);
        if (archive_entry_hardlink(e) || (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "archive entry \"%.200s\" is not a file, a directory or a "
                                  "symbolic link",
                                  path);
        if (type == AE_IFDIR) {
                int fd = mkdirs_in(root, path);
                if (fd < 0)
                        return mkdirs_error(fd, path, err);
                close(fd);
                return 0;
        }
        char *slash = strrchr(path, '/');
        const char *base = slash ? slash + 1 : path;
        _cleanup_free_ char *dir = slash ? xstrndup(path, (size_t)(slash - path)) : xstrdup("");
        _cleanup_close_ int dfd = mkdirs_in(root, dir);
        if (dfd < 0)
                return mkdirs_error(dfd, path, err);
        if (type == AE_IFLNK) {
                const char *target = archive_entry_symlink(e);
                if (!target || symlinkat(target, dfd, base) < 0)
                        return ab_err_set(err, AB_E_INVALID, target ? errno : 0,
                                          "archive entry \"%.200s\": symlink", path);
                return 0;
        }
        _cleanup_close_ int fd =
            openat(dfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return ab_err_set(err, errno == EEXIST ? AB_E_INVALID : AB_E_INTERNAL, errno,
                                  "archive entry \"%.200s\"", path);
        return copy_entry(a, fd, path, max, err);
}

/* Reads fd to its end (at most 1 MiB more: then it is not padding). */
static void drain(int fd)
{
        char buf[IO_CHUNK];
        for (size_t total = 0; total < (1u << 20);) {
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return;
                total += (size_t)n;
        }
}

/* Extracts the archive read from fd (a pipe is fine) into root. */
static int extract_outer(int fd, int root, uint64_t max, ab_err **err)
{
        struct archive *a = archive_read_new();
        archive_read_support_format_tar(a);
        archive_read_support_filter_gzip(a);
        archive_read_support_filter_zstd(a);
        int rc = 0;
        if (archive_read_open_fd(a, fd, IO_CHUNK) != ARCHIVE_OK) {
                rc = ab_err_set(err, AB_E_INVALID, 0, "the image archive is not a tar: %s",
                                archive_error_string(a));
                goto out;
        }
        for (uint64_t n = 0;; n++) {
                struct archive_entry *e;
                int r = archive_read_next_header(a, &e);
                if (r == ARCHIVE_EOF)
                        break;
                if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
                        rc = ab_err_set(err, AB_E_INVALID, 0,
                                        n ? "bad image archive after %" PRIu64 " entries: %s"
                                          : "the image archive is not a tar%.0" PRIu64 ": %s",
                                        n, archive_error_string(a));
                        break;
                }
                if (n >= OUTER_MAX_ENTRIES) {
                        rc = ab_err_set(err, AB_E_LIMIT, 0,
                                        "the image archive has more than %u entries",
                                        OUTER_MAX_ENTRIES);
                        break;
                }
                if ((rc = extract_entry(a, e, root, max, err)) < 0)
                        break;
        }
        /* what follows the end of the tar (padding) is read too, so that a
         * writer on a pipe sees its whole stream taken */
        if (rc == 0)
                drain(fd);
out:
        archive_read_free(a);
        return rc < 0 ? -1 : 0;
}

/* Reads a (small) regular file of the extracted archive. */
static int read_member(int root, const char *path, size_t max, char **out, size_t *len,
                       ab_err **err)
{
        *out = NULL;
        _cleanup_close_ int fd = imgstore_open_in_root(root, path, O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return ab_err_set(err, AB_E_INVALID, 0, "the image archive has no file \"%.200s\"",
                                  path);
        if ((uint64_t)st.st_size > max)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "\"%.200s\" in the image archive is larger than %zu bytes", path,
                                  max);
        char *buf = xmalloc((size_t)st.st_size + 1);
        ssize_t n = ab_read_full(fd, buf, (size_t)st.st_size);
        if (n != st.st_size) {
                free(buf);
                return ab_err_set(err, AB_E_INTERNAL, n < 0 ? (int)-n : 0, "read \"%.200s\"", path);
        }
        buf[n] = 0;
        *out = buf;
        *len = (size_t)n;
        return 0;
}

/* The "sha256:HEX" a member's path names (".../sha256/HEX" or "HEX.json"), or NULL. */
static char *digest_in_path(const char *path)
{
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        size_t n = strlen(base);
        if (n != HEX_LEN && !(n == HEX_LEN + 5 && !strcmp(base + HEX_LEN, ".json")))
                return NULL;
        if (!imgstore_is_hex(base, HEX_LEN))
                return NULL;
        return xasprintf("sha256:%.*s", HEX_LEN, base);
}

/* Hashes a layer member: its digest is its key. When the path or the
 * descriptor names a digest, it must match; an uncompressed layer is its
 * own diff id, so it must match that too. */
static int stage_layer_verify(int root, stage_layer *l, const char *want, ab_err **err)
{
        _cleanup_close_ int fd = imgstore_open_in_root(root, l->path, O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "the image archive has no layer file \"%.200s\"", l->path);
        unsigned char magic[4] = {0};
        bool compressed =
            pread(fd, magic, 4, 0) == 4 &&
            ((magic[0] == 0x1f && magic[1] == 0x8b) ||
             (magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd));
        _cleanup_free_ char *got = NULL;
        int r = imgstore_digest_fd(fd, &got, NULL);
        if (r < 0)
                return ab_err_set(err, AB_E_INTERNAL, -r, "read layer \"%.200s\"", l->path);
        _cleanup_free_ char *named = digest_in_path(l->path);
        const char *expect = want ? want : named;
        if (expect && strcmp(expect, got))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "layer \"%.200s\" of the image archive has digest %s, not %s",
                                  l->path, got, expect);
        if (!compressed && l->diff_id && strcmp(l->diff_id, got))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "layer \"%.200s\" of the image archive has digest %s, but the "
                                  "image's config says %s",
                                  l->path, got, l->diff_id);
        l->digest = steal_pointer(&got);
        return 0;
}

/* Fills im's layers from their paths (diff ids from its config). */
static int stage_layers(int root, stage_image *im, char **paths, char **wants, size_t n,
                        ab_err **err)
{
        if (n > AB_MANIFEST_MAX_LAYERS)
                return ab_err_set(err, AB_E_INVALID, 0, "image %s has more than %d layers", im->id,
                                  AB_MANIFEST_MAX_LAYERS);
        size_t nd = imgstore_strv_len(im->cfg.diff_ids);
        if (im->cfg.diff_ids && nd != n)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "image %s has %zu layers but its config lists %zu", im->id, n,
                                  nd);
        im->layers = xcalloc(n ? n : 1, sizeof(stage_layer));
        for (size_t i = 0; i < n; i++) {
                stage_layer *l = &im->layers[im->n_layers++];
                l->path = xstrdup(paths[i]);
                l->diff_id = im->cfg.diff_ids ? xstrdup(im->cfg.diff_ids[i]) : NULL;
                if (stage_layer_verify(root, l, wants ? wants[i] : NULL, err) < 0)
                        return -1;
        }
        return 0;
}

/* The image of id in v, or a new one appended (the same image may be listed twice). */
static stage_image *stage_find_or_add(stage_image **v, size_t *n, const char *id, bool *fresh)
{
        for (size_t i = 0; i < *n; i++)
                if (!strcmp((*v)[i].id, id)) {
                        *fresh = false;
                        return &(*v)[i];
                }
        *v = xrealloc(*v, xmul(*n + 1, sizeof(stage_image)));
        stage_image *im = &(*v)[(*n)++];
        memset(im, 0, sizeof(*im));
        im->names = xcalloc(1, sizeof(char *));
        im->digests = xcalloc(1, sizeof(char *));
        *fresh = true;
        return im;
}

/* ---- import: docker save ------------------------------------------------ */

static int docker_entry(int root, json_t *ent, stage_image **v, size_t *n, ab_err **err)
{
        const char *cfg_path = json_string_value(json_object_get(ent, "Config"));
        json_t *tags = json_object_get(ent, "RepoTags"), *layers = json_object_get(ent, "Layers");
        if (!cfg_path || !json_is_array(layers) ||
            (tags && !json_is_null(tags) && !json_is_array(tags)))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "manifest.json of the image archive is malformed (an entry "
                                  "needs Config and Layers)");
        _cleanup_free_ char *cfg = NULL;
        size_t len;
        if (read_member(root, cfg_path, AB_MANIFEST_MAX_BYTES, &cfg, &len, err) < 0)
                return -1;
        stage_image tmp = {0};
        if (imgstore_stage_config(&tmp, cfg, len, err) < 0) {
                imgstore_stage_clear(&tmp);
                return -1;
        }
        _cleanup_free_ char *named = digest_in_path(cfg_path);
        if (named && strcmp(named, tmp.id)) {
                ab_err_set(err, AB_E_INVALID, 0,
                           "config \"%.200s\" of the image archive has digest %s", cfg_path,
                           tmp.id);
                imgstore_stage_clear(&tmp);
                return -1;
        }
        bool fresh;
        stage_image *im = stage_find_or_add(v, n, tmp.id, &fresh);
        if (fresh) {
                char **names = im->names, **digests = im->digests;
                *im = tmp;
                im->names = names;
                im->digests = digests;
                size_t nl = json_array_size(layers);
                _cleanup_free_ char **paths = xcalloc(nl + 1, sizeof(char *));
                for (size_t i = 0; i < nl; i++) {
                        paths[i] = (char *)json_string_value(json_array_get(layers, i));
                        if (!paths[i])
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "manifest.json of the image archive: a layer "
                                                  "is not a string");
                }
                if (stage_layers(root, im, paths, NULL, nl, err) < 0)
                        return -1;
        } else {
                imgstore_stage_clear(&tmp);
        }
        size_t i;
        json_t *t;
        json_array_foreach(tags, i, t)
        {
                if (!json_is_string(t) || imgstore_stage_name(im, json_string_value(t), err) < 0)
                        return -1;
        }
        return 0;
}

static int docker_parse(int root, stage_image **v, size_t *n, ab_err **err)
{
        _cleanup_free_ char *text = NULL;
        size_t len;
        if (read_member(root, "manifest.json", AB_MANIFEST_MAX_BYTES, &text, &len, err) < 0)
                return -1;
        json_t *j = json_loadb(text, len, 0, NULL);
        int rc = 0;
        if (!json_is_array(j) || !json_array_size(j)) {
                rc = ab_err_set(err, AB_E_INVALID, 0,
                                "manifest.json of the image archive is not a list of images");
        } else {
                size_t i;
                json_t *ent;
                json_array_foreach(j, i, ent)
                {
                        if ((rc = docker_entry(root, ent, v, n, err)) < 0)
                                break;
                }
        }
        json_decref(j);
        return rc;
}

/* ---- import: OCI image layout ------------------------------------------- */

/* blobs/sha256/HEX of the layout, read whole and verified. */
static int oci_blob(int root, const char *digest, char **out, size_t *len, ab_err **err)
{
        if (!ab_digest_valid(digest))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "invalid digest \"%.100s\" in the OCI layout", digest);
        _cleanup_free_ char *p = xasprintf("blobs/sha256/%s", digest + 7);
        if (read_member(root, p, AB_MANIFEST_MAX_BYTES, out, len, err) < 0)
                return -1;
        _cleanup_free_ char *got = imgstore_digest_of(*out, *len);
        if (strcmp(got, digest)) {
                free(*out);
                *out = NULL;
                return ab_err_set(err, AB_E_INVALID, 0, "blob %s of the OCI layout has digest %s",
                                  digest, got);
        }
        return 0;
}

/* The name an index.json descriptor gives: containerd's full name, else
 * ref.name when it is a whole reference (has a '/', ':' or '@'); a bare tag
 * ("latest") has no repository and names nothing by itself. */
static const char *oci_desc_name(json_t *desc)
{
        json_t *ann = json_object_get(desc, "annotations");
        const char *full = json_string_value(json_object_get(ann, "io.containerd.image.name"));
        if (full)
                return full;
        const char *ref =
            json_string_value(json_object_get(ann, "org.opencontainers.image.ref.name"));
        return ref && strpbrk(ref, "/:@") ? ref : NULL;
}

static int oci_desc(int root, json_t *desc, stage_image **v, size_t *n, ab_err **err)
{
        const char *digest = json_string_value(json_object_get(desc, "digest"));
        const char *mt = json_string_value(json_object_get(desc, "mediaType"));
        if (!digest)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "index.json of the OCI layout: a manifest has no digest");
        _cleanup_free_ char *doc = NULL, *picked = NULL, *cfg = NULL;
        size_t len, clen;
        if (oci_blob(root, digest, &doc, &len, err) < 0)
                return -1;
        _cleanup_strv_ char **digests = xcalloc(1, sizeof(char *));
        imgstore_strv_add_unique(&digests, digest);
        if (ab_manifest_is_index(doc, len, mt)) {
                _cleanup_err_ ab_err *e = NULL;
                if (ab_index_pick(doc, len, "linux", HOST_ARCH, &picked, &e) < 0)
                        return ab_err_set(err,
                                          e->code == AB_E_NOT_FOUND ? AB_E_UNSUPPORTED : e->code, 0,
                                          "%s", e->msg);
                free(doc);
                doc = NULL;
                if (oci_blob(root, picked, &doc, &len, err) < 0)
                        return -1;
                imgstore_strv_add_unique(&digests, picked);
        }
        ab_manifest m;
        if (ab_manifest_parse(doc, len, &m, err) < 0)
                return ab_err_wrap(err, "manifest %s of the OCI layout", digest);
        int rc = oci_blob(root, m.config_digest, &cfg, &clen, err);
        stage_image tmp = {0};
        if (rc == 0)
                rc = imgstore_stage_config(&tmp, cfg, clen, err);
        bool fresh = false;
        stage_image *im = NULL;
        if (rc == 0) {
                im = stage_find_or_add(v, n, tmp.id, &fresh);
                if (fresh) {
                        char **names = im->names, **ds = im->digests;
                        *im = tmp;
                        memset(&tmp, 0, sizeof(tmp));
                        im->names = names;
                        im->digests = ds;
                        char **paths = xcalloc(m.n_layers + 1, sizeof(char *));
                        char **wants = xcalloc(m.n_layers + 1, sizeof(char *));
                        for (size_t i = 0; i < m.n_layers; i++) {
                                paths[i] = xasprintf("blobs/sha256/%s", m.layers[i].digest + 7);
                                wants[i] = m.layers[i].digest;
                        }
                        rc = stage_layers(root, im, paths, wants, m.n_layers, err);
                        free(wants);
                        imgstore_strv_free(paths);
                }
        }
        imgstore_stage_clear(&tmp);
        ab_manifest_clear(&m);
        if (rc < 0)
                return -1;
        for (char **d = digests; *d; d++)
                imgstore_strv_add_unique(&im->digests, *d);
        const char *name = oci_desc_name(desc);
        return name ? imgstore_stage_name(im, name, err) : 0;
}

static int oci_parse(int root, stage_image **v, size_t *n, ab_err **err)
{
        _cleanup_free_ char *layout = NULL, *text = NULL;
        size_t len;
        if (read_member(root, "oci-layout", 4096, &layout, &len, err) < 0)
                return -1;
        json_t *lj = json_loadb(layout, len, 0, NULL);
        bool ok = json_is_string(json_object_get(lj, "imageLayoutVersion"));
        json_decref(lj);
        if (!ok)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "oci-layout of the image archive is malformed");
        if (read_member(root, "index.json", AB_MANIFEST_MAX_BYTES, &text, &len, err) < 0)
                return -1;
        json_t *j = json_loadb(text, len, 0, NULL);
        json_t *ms = json_object_get(j, "manifests");
        int rc = 0;
        if (!json_is_array(ms) || !json_array_size(ms)) {
                rc = ab_err_set(err, AB_E_INVALID, 0,
                                "index.json of the OCI layout lists no manifests");
        } else {
                size_t i;
                json_t *d;
                json_array_foreach(ms, i, d)
                {
                        if ((rc = oci_desc(root, d, v, n, err)) < 0)
                                break;
                }
        }
        json_decref(j);
        return rc;
}

/* ---- import ------------------------------------------------------------- */

/* Applies `name`, and refuses an image that would end with no name at all
 * (it would only wait for the next GC). */
static int import_names(stage_image *v, size_t n, const char *name, ab_err **err)
{
        if (name) {
                if (n != 1)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "the archive holds %zu images: a name can be given "
                                          "only to an archive of one",
                                          n);
                imgstore_strv_free(v[0].names);
                v[0].names = xcalloc(1, sizeof(char *));
                return imgstore_stage_name(&v[0], name, err);
        }
        for (size_t i = 0; i < n; i++)
                if (!imgstore_strv_len(v[i].names))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "image %s in the archive has no name (no RepoTags, or "
                                          "an OCI ref.name that is only a tag): give it a name",
                                          v[i].id);
        return 0;
}

/* Puts every layer of the staged images in the store. */
static int install_layers(ab_image_store *s, int root, stage_image *v, size_t n,
                          ab_image_progress_fn fn, void *ud, ab_err **err)
{
        for (size_t i = 0; i < n; i++) {
                if (imgstore_stage_reuse(s, &v[i], fn, ud))
                        continue;
                for (size_t k = 0; k < v[i].n_layers; k++) {
                        stage_layer *l = &v[i].layers[k];
                        if (imgstore_layer_present(s, l->digest + 7, &l->bytes)) {
                                if (imgstore_layer_diff_check(s, l->digest, l->diff_id, err) < 0)
                                        return -1;
                                imgstore_progress(fn, ud, "exists", l->digest, 0, 0);
                                continue;
                        }
                        _cleanup_close_ int fd = imgstore_open_in_root(root, l->path, O_RDONLY);
                        struct stat st;
                        if (fd < 0 || fstat(fd, &st) < 0)
                                return ab_err_set(err, AB_E_INTERNAL, errno, "open layer %s",
                                                  l->path);
                        if (imgstore_layer_install(s, l->digest, l->diff_id, fd,
                                                   (uint64_t)st.st_size, 0, fn, ud, &l->bytes,
                                                   err) < 0)
                                return -1;
                }
        }
        return 0;
}

static int import_staged(ab_image_store *s, int root, const char *name, ab_image_progress_fn fn,
                         void *ud, ab_image **out, size_t *n, ab_err **err)
{
        stage_image *v = NULL;
        size_t nv = 0;
        int rc;
        struct stat st;
        if (fstatat(root, "manifest.json", &st, AT_SYMLINK_NOFOLLOW) == 0)
                rc = docker_parse(root, &v, &nv, err);
        else if (fstatat(root, "index.json", &st, AT_SYMLINK_NOFOLLOW) == 0)
                rc = oci_parse(root, &v, &nv, err);
        else
                rc = ab_err_set(err, AB_E_INVALID, 0,
                                "the image archive has neither manifest.json (docker save) nor "
                                "index.json (OCI image layout)");
        if (rc == 0)
                rc = import_names(v, nv, name, err);
        if (rc == 0)
                rc = install_layers(s, root, v, nv, fn, ud, err);
        if (rc == 0)
                rc = imgstore_commit(s, v, nv, "import", out, err);
        if (rc == 0)
                *n = nv;
        imgstore_stages_free(v, nv);
        return rc;
}

int ab_image_import(ab_image_store *s, int fd, const char *name, ab_image_progress_fn fn, void *ud,
                    ab_image **out, size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        _cleanup_close_ int g = imgstore_lock_or_err(s, "gc.lock", LOCK_SH, err);
        if (g < 0)
                return -1;
        imgstore_progress(fn, ud, "resolve", NULL, 0, 0);
        _cleanup_free_ char *work = imgstore_mkdir_tmp(s, "import", err);
        if (!work)
                return -1;
        _cleanup_close_ int root = imgstore_open_dir_at(s->dfd, work);
        int rc;
        if (root < 0)
                rc = ab_err_set(err, AB_E_INTERNAL, -root, "open %s/%s", s->dir, work);
        else
                rc = extract_outer(fd, root, s->max_blob, err);
        if (rc == 0)
                rc = import_staged(s, root, name, fn, ud, out, n, err);
        if (rc == 0)
                imgstore_progress(fn, ud, "done", NULL, 0, 0);
        (void)ab_rm_tree_at(s->dfd, work);
        return rc < 0 ? -1 : 0;
}
