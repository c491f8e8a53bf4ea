/* registry_get REF OUTDIR - pulls one image with the registry client
 * (src/image/registry.h) for tests/integration/test_registry_client.py.
 *
 * Fetches REF's manifest (following an index to linux/amd64), then the config
 * blob and every layer blob into OUTDIR/<hex of digest> (written as
 * <hex>.part and renamed only once the client said the digest matched).
 * Prints one JSON object per line on stdout:
 *   {"manifest": D, "media_type": T, "index": true|false, "bytes": N}
 *   {"config": D, "os": .., "arch": .., "env": [..], "workdir": .., "user": ..,
 *    "entrypoint": [..], "cmd": [..], "diff_ids": [..]}
 *   {"blob": D, "bytes": N, "file": PATH, "compression": "tar"|"gzip"|"zstd"}
 *   {"ok": true}
 * On failure: {"error": CODE, "message": MSG} on stdout, "CODE: MSG" on
 * stderr, exit 1 (2 for bad usage).
 *
 * Environment: AB_REGISTRY_INSECURE=dom1,dom2 (plain-HTTP registries),
 * AB_REGISTRY_CREDS=registry=user:password (one),
 * AB_REGISTRY_MAX_BLOB=N (bytes), AB_REGISTRY_STALL=seconds. */
#include "base/buf.h"
#include "base/err.h"
#include "image/manifest.h"
#include "image/ref.h"
#include "image/registry.h"

#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>

static void emit(json_t *j)
{
        char *s = json_dumps(j, JSON_COMPACT);
        printf("%s\n", s);
        fflush(stdout);
        free(s);
        json_decref(j);
}

static json_t *strv_json(char **v)
{
        if (!v)
                return json_null();
        json_t *a = json_array();
        for (; *v; v++)
                json_array_append_new(a, json_string(*v));
        return a;
}

static json_t *str_or_null(const char *s)
{
        return s ? json_string(s) : json_null();
}

static const char *compression_name(ab_layer_compression c)
{
        return c == AB_LAYER_GZIP ? "gzip" : c == AB_LAYER_ZSTD ? "zstd" : "tar";
}

/* Downloads digest into outdir/<hex>; 0 or -1 with *err. */
static int get_blob(ab_registry *reg, int dirfd, const char *outdir, const char *digest,
                    uint64_t max, const char *compression, char **path_out, ab_err **err)
{
        const char *hex = digest + 7;
        _cleanup_free_ char *part = xasprintf("%s.part", hex);
        _cleanup_close_ int fd =
            openat(dirfd, part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "open %s/%s", outdir, part);
        if (ab_registry_get_blob(reg, digest, fd, max, NULL, NULL, err) < 0) {
                unlinkat(dirfd, part, 0);
                return -1;
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || renameat(dirfd, part, dirfd, hex) < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "keeping %s", hex);
        char *path = xasprintf("%s/%s", outdir, hex);
        json_t *j = json_pack("{s:s, s:I, s:s}", "blob", digest, "bytes", (json_int_t)st.st_size,
                              "file", path);
        if (compression)
                json_object_set_new(j, "compression", json_string(compression));
        emit(j);
        if (path_out)
                *path_out = path;
        else
                free(path);
        return 0;
}

static int get_manifest(ab_registry *reg, const char *reference, ab_buf *body, ab_err **err)
{
        _cleanup_free_ char *mt = NULL, *digest = NULL;
        if (ab_registry_get_manifest(reg, reference, body, &mt, &digest, err) < 0)
                return -1;
        bool index = ab_manifest_is_index(body->p, body->n, mt);
        emit(json_pack("{s:s, s:o, s:b, s:I}", "manifest", digest, "media_type", str_or_null(mt),
                       "index", index, "bytes", (json_int_t)body->n));
        if (!index)
                return 0;
        _cleanup_free_ char *pick = NULL;
        if (ab_index_pick(body->p, body->n, "linux", "amd64", &pick, err) < 0)
                return ab_err_wrap(err, "%s", reference);
        ab_buf_free(body);
        free(mt);
        free(digest);
        mt = digest = NULL;
        if (ab_registry_get_manifest(reg, pick, body, &mt, &digest, err) < 0)
                return -1;
        emit(json_pack("{s:s, s:o, s:b, s:I}", "manifest", digest, "media_type", str_or_null(mt),
                       "index", ab_manifest_is_index(body->p, body->n, mt), "bytes",
                       (json_int_t)body->n));
        return 0;
}

static int pull(ab_registry *reg, const ab_image_ref *ref, const char *outdir, uint64_t max,
                ab_err **err)
{
        _cleanup_close_ int dirfd = open(outdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0)
                return ab_err_set(err, AB_E_INVALID, errno, "open %s", outdir);
        _cleanup_buf_ ab_buf body = {0};
        if (get_manifest(reg, ab_image_ref_reference(ref), &body, err) < 0)
                return -1;
        ab_manifest m;
        if (ab_manifest_parse(body.p, body.n, &m, err) < 0)
                return -1;
        int ret = -1;
        _cleanup_free_ char *cfg_path = NULL;
        _cleanup_free_ char *cfg = NULL;
        size_t cfg_len = 0;
        if (get_blob(reg, dirfd, outdir, m.config_digest, AB_MANIFEST_MAX_BYTES, NULL, &cfg_path,
                     err) < 0)
                goto out;
        int r = ab_read_file(AT_FDCWD, cfg_path, &cfg, &cfg_len);
        if (r < 0) {
                ab_err_set(err, AB_E_INTERNAL, -r, "read %s", cfg_path);
                goto out;
        }
        ab_image_config c;
        if (ab_image_config_parse(cfg, cfg_len, &c, err) < 0)
                goto out;
        emit(json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "config", m.config_digest,
                       "os", str_or_null(c.os), "arch", str_or_null(c.arch), "env",
                       strv_json(c.env), "workdir", str_or_null(c.workdir), "user",
                       str_or_null(c.user), "entrypoint", strv_json(c.entrypoint), "cmd",
                       strv_json(c.cmd), "diff_ids", strv_json(c.diff_ids)));
        ab_image_config_clear(&c);
        for (size_t i = 0; i < m.n_layers; i++)
                if (get_blob(reg, dirfd, outdir, m.layers[i].digest, max,
                             compression_name(m.layers[i].compression), NULL, err) < 0)
                        goto out;
        ret = 0;
out:
        ab_manifest_clear(&m);
        return ret;
}

static char **split_commas(const char *s)
{
        if (!s || !*s)
                return NULL;
        size_t n = 1;
        for (const char *p = s; *p; p++)
                n += *p == ',';
        char **v = xcalloc(n + 1, sizeof(*v));
        size_t i = 0;
        for (const char *p = s;; p++) {
                size_t k = strcspn(p, ",");
                v[i++] = xstrndup(p, k);
                p += k;
                if (!*p)
                        break;
        }
        return v;
}

int main(int argc, char **argv)
{
        if (argc != 3) {
                fprintf(stderr, "usage: %s REF OUTDIR\n", argv[0]);
                return 2;
        }
        _cleanup_strv_ char **insecure = split_commas(getenv("AB_REGISTRY_INSECURE"));
        ab_registry_cred cred = {0};
        _cleanup_free_ char *creds = NULL;
        ab_registry_opts opts = {.insecure = (const char *const *)insecure};
        const char *ce = getenv("AB_REGISTRY_CREDS");
        if (ce && *ce) {
                creds = xstrdup(ce);
                char *eq = strchr(creds, '='), *colon = eq ? strchr(eq, ':') : NULL;
                if (!colon) {
                        fprintf(stderr, "AB_REGISTRY_CREDS: want registry=user:password\n");
                        return 2;
                }
                *eq = *colon = '\0';
                cred = (ab_registry_cred){creds, eq + 1, colon + 1};
                opts.creds = &cred;
                opts.n_creds = 1;
        }
        const char *st = getenv("AB_REGISTRY_STALL");
        opts.stall_timeout_s = st ? atol(st) : 0;
        const char *mx = getenv("AB_REGISTRY_MAX_BLOB");
        uint64_t max = mx ? strtoull(mx, NULL, 10) : 0;

        ab_err *err = NULL;
        ab_image_ref ref;
        ab_registry *reg = NULL;
        int rc = ab_image_ref_parse(argv[1], &ref, &err);
        if (rc == 0) {
                rc = ab_registry_open(&opts, &ref, &reg, &err);
                if (rc == 0)
                        rc = pull(reg, &ref, argv[2], max, &err);
                ab_registry_free(reg);
                ab_image_ref_clear(&ref);
        }
        if (rc < 0) {
                const char *code = ab_code_name(err ? err->code : AB_E_INTERNAL);
                const char *msg = err && err->msg ? err->msg : "(no message)";
                emit(json_pack("{s:s, s:s}", "error", code, "message", msg));
                fprintf(stderr, "%s: %s\n", code, msg);
                ab_err_free(&err);
                return 1;
        }
        emit(json_pack("{s:b}", "ok", 1));
        return 0;
}
