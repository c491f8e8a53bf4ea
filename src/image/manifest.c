/* manifest.c - the JSON documents of an image (manifest.h), read with
 * jansson. Every field is type-checked before use and every digest validated:
 * the documents come from a registry or an archive nobody vouched for. */
#include "image/manifest.h"
#include "base/buf.h"
#include "image/ref.h"

#include <jansson.h>
#include <strings.h>

#define INDEX_MAX_ENTRIES 1024
#define ARGV_MAX          4096 /* Env, Entrypoint, Cmd entries */
#define PLATFORMS_SHOWN   8

#define MT_OCI_CONFIG    "application/vnd.oci.image.config.v1+json"
#define MT_DOCKER_CONFIG "application/vnd.docker.container.image.v1+json"

#define _cleanup_json_ __attribute__((cleanup(json_decrefp))) /* jansson's */

/* The document as a JSON object; AB_E_INVALID naming `what` otherwise. */
static json_t *load_object(const char *json, size_t len, const char *what, ab_err **err)
{
        if (!json || len > AB_MANIFEST_MAX_BYTES) {
                ab_err_set(err, AB_E_INVALID, 0, "%s is larger than %u bytes", what,
                           AB_MANIFEST_MAX_BYTES);
                return NULL;
        }
        json_error_t je;
        json_t *j = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
        if (!j) {
                ab_err_set(err, AB_E_INVALID, 0, "%s is not valid JSON: %s (line %d)", what,
                           je.text, je.line);
                return NULL;
        }
        if (!json_is_object(j)) {
                json_decref(j);
                ab_err_set(err, AB_E_INVALID, 0, "%s is not a JSON object", what);
                return NULL;
        }
        return j;
}

/* o[key] as a string: *out NULL when absent (or null) and not required. */
static int get_str(json_t *o, const char *key, bool required, const char **out, const char *what,
                   ab_err **err)
{
        json_t *v = json_object_get(o, key);
        *out = NULL;
        if (!v || json_is_null(v)) {
                if (required)
                        return ab_err_set(err, AB_E_INVALID, 0, "%s has no \"%s\"", what, key);
                return 0;
        }
        if (!json_is_string(v))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: \"%s\" is not a string", what, key);
        *out = json_string_value(v);
        return 0;
}

static int get_digest(json_t *o, const char *key, const char **out, const char *what, ab_err **err)
{
        if (get_str(o, key, true, out, what, err) < 0)
                return -1;
        if (!ab_digest_valid(*out))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "%s: \"%s\" is not a sha256 digest (sha256: and 64 lower-case "
                                  "hex digits)",
                                  what, key);
        return 0;
}

static int get_size(json_t *o, const char *key, uint64_t *out, const char *what, ab_err **err)
{
        json_t *v = json_object_get(o, key);
        if (!v)
                return ab_err_set(err, AB_E_INVALID, 0, "%s has no \"%s\"", what, key);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: \"%s\" is not a byte count", what,
                                  key);
        *out = (uint64_t)json_integer_value(v);
        return 0;
}

/* o[key] as a NULL-terminated array of strings; NULL when absent or null. */
static int get_strv(json_t *o, const char *key, char ***out, const char *what, ab_err **err)
{
        json_t *a = json_object_get(o, key);
        *out = NULL;
        if (!a || json_is_null(a))
                return 0;
        if (!json_is_array(a))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: \"%s\" is not an array", what, key);
        size_t n = json_array_size(a);
        if (n > ARGV_MAX)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: \"%s\" has more than %d entries", what,
                                  key, ARGV_MAX);
        _cleanup_strv_ char **v = xcalloc(n + 1, sizeof(*v));
        for (size_t i = 0; i < n; i++) {
                json_t *s = json_array_get(a, i);
                if (!json_is_string(s))
                        return ab_err_set(err, AB_E_INVALID, 0, "%s: \"%s\"[%zu] is not a string",
                                          what, key, i);
                v[i] = xstrdup(json_string_value(s));
        }
        *out = steal_pointer(&v);
        return 0;
}

/* "type/subtype" of a Content-Type, less parameters and blanks. */
static bool content_type_is(const char *ct, const char *mt)
{
        if (!ct)
                return false;
        while (*ct == ' ')
                ct++;
        size_t n = strlen(mt);
        return strncasecmp(ct, mt, n) == 0 && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static bool is_index_type(const char *mt)
{
        return content_type_is(mt, AB_MT_OCI_INDEX) || content_type_is(mt, AB_MT_DOCKER_LIST);
}

static bool is_manifest_type(const char *mt)
{
        return content_type_is(mt, AB_MT_OCI_MANIFEST) ||
               content_type_is(mt, AB_MT_DOCKER_MANIFEST);
}

bool ab_manifest_is_index(const char *json, size_t len, const char *content_type)
{
        _cleanup_json_ json_t *j = NULL;
        if (json && len <= AB_MANIFEST_MAX_BYTES)
                j = json_loadb(json, len, 0, NULL);
        json_t *mt = j ? json_object_get(j, "mediaType") : NULL;
        if (json_is_string(mt) &&
            (is_index_type(json_string_value(mt)) || is_manifest_type(json_string_value(mt))))
                return is_index_type(json_string_value(mt));
        if (is_index_type(content_type) || is_manifest_type(content_type))
                return is_index_type(content_type);
        return j && json_is_array(json_object_get(j, "manifests")) && !json_object_get(j, "layers");
}

int ab_index_pick(const char *json, size_t len, const char *os, const char *arch, char **digest,
                  ab_err **err)
{
        *digest = NULL;
        _cleanup_json_ json_t *j = load_object(json, len, "image index", err);
        if (!j)
                return -1;
        json_t *list = json_object_get(j, "manifests");
        if (!json_is_array(list))
                return ab_err_set(err, AB_E_INVALID, 0, "image index has no \"manifests\" array");
        size_t n = json_array_size(list);
        if (n > INDEX_MAX_ENTRIES)
                return ab_err_set(err, AB_E_INVALID, 0, "image index has more than %d entries",
                                  INDEX_MAX_ENTRIES);
        _cleanup_buf_ ab_buf seen = {0};
        size_t shown = 0;
        for (size_t i = 0; i < n; i++) {
                json_t *e = json_array_get(list, i);
                char what[64];
                snprintf(what, sizeof(what), "image index: manifests[%zu]", i);
                if (!json_is_object(e))
                        return ab_err_set(err, AB_E_INVALID, 0, "%s is not an object", what);
                const char *d, *mt, *e_os = NULL, *e_arch = NULL;
                if (get_digest(e, "digest", &d, what, err) < 0 ||
                    get_str(e, "mediaType", false, &mt, what, err) < 0)
                        return -1;
                json_t *p = json_object_get(e, "platform");
                if (p && !json_is_null(p)) {
                        if (!json_is_object(p))
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "%s: \"platform\" is not an object", what);
                        if (get_str(p, "os", false, &e_os, what, err) < 0 ||
                            get_str(p, "architecture", false, &e_arch, what, err) < 0)
                                return -1;
                }
                /* A nested index or an attestation is never a platform's image. */
                if (mt && !is_manifest_type(mt))
                        continue;
                if (e_os && e_arch && strcmp(e_os, os) == 0 && strcmp(e_arch, arch) == 0) {
                        *digest = xstrdup(d);
                        return 0;
                }
                if (shown < PLATFORMS_SHOWN) {
                        ab_buf_printf(&seen, "%s%.32s/%.32s", shown ? ", " : "", e_os ? e_os : "?",
                                      e_arch ? e_arch : "?");
                        shown++;
                }
        }
        return ab_err_set(err, AB_E_NOT_FOUND, 0, "the image has no %s/%s variant (it has: %s%s)",
                          os, arch, shown ? seen.p : "no images",
                          n > shown && shown ? ", ..." : "");
}

void ab_manifest_clear(ab_manifest *m)
{
        free(m->config_digest);
        for (size_t i = 0; i < m->n_layers; i++)
                free(m->layers[i].digest);
        free(m->layers);
        memset(m, 0, sizeof(*m));
}

static const struct {
        const char *type;
        int compression; /* ab_layer_compression, or -1: foreign */
} layer_types[] = {
    {"application/vnd.oci.image.layer.v1.tar", AB_LAYER_TAR},
    {"application/vnd.oci.image.layer.v1.tar+gzip", AB_LAYER_GZIP},
    {"application/vnd.oci.image.layer.v1.tar+zstd", AB_LAYER_ZSTD},
    {"application/vnd.docker.image.rootfs.diff.tar.gzip", AB_LAYER_GZIP},
    {"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", -1},
    {"application/vnd.oci.image.layer.nondistributable.v1.tar", -1},
    {"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", -1},
    {"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", -1},
};

static int parse_layer(json_t *l, size_t i, ab_manifest_layer *out, ab_err **err)
{
        char what[64];
        snprintf(what, sizeof(what), "image manifest: layers[%zu]", i);
        if (!json_is_object(l))
                return ab_err_set(err, AB_E_INVALID, 0, "%s is not an object", what);
        const char *mt, *d;
        if (get_str(l, "mediaType", true, &mt, what, err) < 0 ||
            get_digest(l, "digest", &d, what, err) < 0 ||
            get_size(l, "size", &out->size, what, err) < 0)
                return -1;
        for (size_t k = 0; k < AB_ARRAY_LEN(layer_types); k++) {
                if (strcmp(mt, layer_types[k].type) != 0)
                        continue;
                if (layer_types[k].compression < 0)
                        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                          "%s is a foreign (non-distributable) layer (%s), which "
                                          "is not supported",
                                          what, mt);
                out->compression = (ab_layer_compression)layer_types[k].compression;
                out->digest = xstrdup(d);
                return 0;
        }
        return ab_err_set(err, AB_E_UNSUPPORTED, 0, "%s has an unsupported media type '%.128s'",
                          what, mt);
}

static int manifest_parse(json_t *j, ab_manifest *out, ab_err **err)
{
        const char *what = "image manifest";
        json_t *sv = json_object_get(j, "schemaVersion");
        if (!json_is_integer(sv) || json_integer_value(sv) != 2)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: \"schemaVersion\" is not 2", what);
        const char *mt;
        if (get_str(j, "mediaType", false, &mt, what, err) < 0)
                return -1;
        if (mt && !is_manifest_type(mt))
                return ab_err_set(err, AB_E_INVALID, 0, "%s has media type '%.128s'", what, mt);
        json_t *cfg = json_object_get(j, "config");
        if (!json_is_object(cfg))
                return ab_err_set(err, AB_E_INVALID, 0, "%s has no \"config\" object", what);
        const char *cmt, *cd;
        if (get_str(cfg, "mediaType", false, &cmt, "image manifest: config", err) < 0 ||
            get_digest(cfg, "digest", &cd, "image manifest: config", err) < 0 ||
            get_size(cfg, "size", &out->config_size, "image manifest: config", err) < 0)
                return -1;
        if (cmt && strcmp(cmt, MT_OCI_CONFIG) != 0 && strcmp(cmt, MT_DOCKER_CONFIG) != 0)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "%s is not a container image (config type '%.128s')", what, cmt);
        out->config_digest = xstrdup(cd);
        json_t *layers = json_object_get(j, "layers");
        if (!json_is_array(layers))
                return ab_err_set(err, AB_E_INVALID, 0, "%s has no \"layers\" array", what);
        size_t n = json_array_size(layers);
        if (n > AB_MANIFEST_MAX_LAYERS)
                return ab_err_set(err, AB_E_INVALID, 0, "%s has %zu layers (at most %d)", what, n,
                                  AB_MANIFEST_MAX_LAYERS);
        out->layers = xcalloc(n ? n : 1, sizeof(*out->layers));
        for (size_t i = 0; i < n; i++) {
                if (parse_layer(json_array_get(layers, i), i, &out->layers[i], err) < 0)
                        return -1;
                out->n_layers++;
        }
        return 0;
}

int ab_manifest_parse(const char *json, size_t len, ab_manifest *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        _cleanup_json_ json_t *j = load_object(json, len, "image manifest", err);
        if (!j)
                return -1;
        if (manifest_parse(j, out, err) < 0) {
                ab_manifest_clear(out);
                return -1;
        }
        return 0;
}

void ab_image_config_clear(ab_image_config *c)
{
        free(c->os);
        free(c->arch);
        ab_strvfreep(&c->env);
        free(c->workdir);
        free(c->user);
        ab_strvfreep(&c->entrypoint);
        ab_strvfreep(&c->cmd);
        ab_strvfreep(&c->diff_ids);
        memset(c, 0, sizeof(*c));
}

/* A string field copied, or NULL when absent or "". */
static int dup_str(json_t *o, const char *key, bool required, char **out, const char *what,
                   ab_err **err)
{
        const char *s;
        if (get_str(o, key, required, &s, what, err) < 0)
                return -1;
        *out = s && *s ? xstrdup(s) : NULL;
        if (required && !*out)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: \"%s\" is empty", what, key);
        return 0;
}

static int config_parse(json_t *j, ab_image_config *out, ab_err **err)
{
        const char *what = "image config";
        if (dup_str(j, "os", true, &out->os, what, err) < 0 ||
            dup_str(j, "architecture", true, &out->arch, what, err) < 0)
                return -1;
        json_t *c = json_object_get(j, "config");
        if (c && !json_is_null(c)) {
                const char *cw = "image config: config";
                if (!json_is_object(c))
                        return ab_err_set(err, AB_E_INVALID, 0, "%s: \"config\" is not an object",
                                          what);
                if (get_strv(c, "Env", &out->env, cw, err) < 0 ||
                    dup_str(c, "WorkingDir", false, &out->workdir, cw, err) < 0 ||
                    dup_str(c, "User", false, &out->user, cw, err) < 0 ||
                    get_strv(c, "Entrypoint", &out->entrypoint, cw, err) < 0 ||
                    get_strv(c, "Cmd", &out->cmd, cw, err) < 0)
                        return -1;
                for (size_t i = 0; out->env && out->env[i]; i++)
                        if (!strchr(out->env[i], '=') || out->env[i][0] == '=')
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "%s: Env[%zu] is not NAME=VALUE", cw, i);
        }
        json_t *rootfs = json_object_get(j, "rootfs");
        if (!json_is_object(rootfs))
                return ab_err_set(err, AB_E_INVALID, 0, "%s has no \"rootfs\" object", what);
        const char *type;
        if (get_str(rootfs, "type", false, &type, "image config: rootfs", err) < 0)
                return -1;
        if (type && strcmp(type, "layers") != 0)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: rootfs type is '%.64s', not 'layers'",
                                  what, type);
        json_t *ids = json_object_get(rootfs, "diff_ids");
        if (!json_is_array(ids))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: rootfs has no \"diff_ids\" array",
                                  what);
        size_t n = json_array_size(ids);
        if (n > AB_MANIFEST_MAX_LAYERS)
                return ab_err_set(err, AB_E_INVALID, 0, "%s has %zu diff_ids (at most %d)", what, n,
                                  AB_MANIFEST_MAX_LAYERS);
        out->diff_ids = xcalloc(n + 1, sizeof(*out->diff_ids));
        for (size_t i = 0; i < n; i++) {
                json_t *d = json_array_get(ids, i);
                if (!json_is_string(d) || !ab_digest_valid(json_string_value(d)))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "%s: rootfs.diff_ids[%zu] is not a sha256 digest", what,
                                          i);
                out->diff_ids[i] = xstrdup(json_string_value(d));
        }
        return 0;
}

int ab_image_config_parse(const char *json, size_t len, ab_image_config *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        _cleanup_json_ json_t *j = load_object(json, len, "image config", err);
        if (!j)
                return -1;
        if (config_parse(j, out, err) < 0) {
                ab_image_config_clear(out);
                return -1;
        }
        return 0;
}
