/* TEMP stand-in (dropped at merge): minimal manifest/config parsing. */
#include "image/manifest.h"
#include "image/ref.h"

#include <jansson.h>

static json_t *load(const char *json, size_t len, ab_err **err)
{
        json_t *j = json_loadb(json, len, 0, NULL);
        if (!j || !json_is_object(j)) {
                json_decref(j);
                ab_err_set(err, AB_E_INVALID, 0, "malformed JSON document");
                return NULL;
        }
        return j;
}

bool ab_manifest_is_index(const char *json, size_t len, const char *content_type)
{
        json_t *j = json_loadb(json, len, 0, NULL);
        bool r = j && json_is_array(json_object_get(j, "manifests"));
        json_decref(j);
        return r;
}

int ab_index_pick(const char *json, size_t len, const char *os, const char *arch, char **digest,
                  ab_err **err)
{
        json_t *j = load(json, len, err);
        if (!j)
                return -1;
        size_t i;
        json_t *m;
        json_array_foreach(json_object_get(j, "manifests"), i, m)
        {
                json_t *p = json_object_get(m, "platform");
                const char *d = json_string_value(json_object_get(m, "digest"));
                if (d && ab_digest_valid(d) &&
                    !strcmp(os, json_string_value(json_object_get(p, "os")) ?: "") &&
                    !strcmp(arch, json_string_value(json_object_get(p, "architecture")) ?: "")) {
                        *digest = xstrdup(d);
                        json_decref(j);
                        return 0;
                }
        }
        json_decref(j);
        return ab_err_set(err, AB_E_NOT_FOUND, 0, "no %s/%s image in the index", os, arch);
}

int ab_manifest_parse(const char *json, size_t len, ab_manifest *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        json_t *j = load(json, len, err);
        if (!j)
                return -1;
        json_t *c = json_object_get(j, "config"), *ls = json_object_get(j, "layers");
        const char *cd = json_string_value(json_object_get(c, "digest"));
        if (!cd || !ab_digest_valid(cd) || !json_is_array(ls) ||
            json_array_size(ls) > AB_MANIFEST_MAX_LAYERS) {
                json_decref(j);
                return ab_err_set(err, AB_E_INVALID, 0, "malformed image manifest");
        }
        out->config_digest = xstrdup(cd);
        out->config_size = (uint64_t)json_integer_value(json_object_get(c, "size"));
        out->layers = xcalloc(json_array_size(ls) + 1, sizeof(*out->layers));
        size_t i;
        json_t *l;
        json_array_foreach(ls, i, l)
        {
                const char *d = json_string_value(json_object_get(l, "digest"));
                const char *mt = json_string_value(json_object_get(l, "mediaType")) ?: "";
                if (!d || !ab_digest_valid(d)) {
                        json_decref(j);
                        ab_manifest_clear(out);
                        return ab_err_set(err, AB_E_INVALID, 0, "malformed layer in manifest");
                }
                ab_manifest_layer *ml = &out->layers[out->n_layers++];
                ml->digest = xstrdup(d);
                ml->size = (uint64_t)json_integer_value(json_object_get(l, "size"));
                ml->compression = strstr(mt, "zstd")   ? AB_LAYER_ZSTD
                                  : strstr(mt, "gzip") ? AB_LAYER_GZIP
                                                       : AB_LAYER_TAR;
        }
        json_decref(j);
        return 0;
}

void ab_manifest_clear(ab_manifest *m)
{
        free(m->config_digest);
        for (size_t i = 0; i < m->n_layers; i++)
                free(m->layers[i].digest);
        free(m->layers);
        memset(m, 0, sizeof(*m));
}

static char *str(json_t *o, const char *k)
{
        const char *s = json_string_value(json_object_get(o, k));
        return s && *s ? xstrdup(s) : NULL;
}

static char **strv(json_t *a)
{
        if (!json_is_array(a))
                return NULL;
        char **v = xcalloc(json_array_size(a) + 1, sizeof(char *));
        size_t i, n = 0;
        json_t *e;
        json_array_foreach(a, i, e) if (json_is_string(e)) v[n++] = xstrdup(json_string_value(e));
        return v;
}

int ab_image_config_parse(const char *json, size_t len, ab_image_config *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        json_t *j = load(json, len, err);
        if (!j)
                return -1;
        json_t *c = json_object_get(j, "config");
        out->os = str(j, "os");
        out->arch = str(j, "architecture");
        out->env = strv(json_object_get(c, "Env"));
        out->workdir = str(c, "WorkingDir");
        out->user = str(c, "User");
        out->entrypoint = strv(json_object_get(c, "Entrypoint"));
        out->cmd = strv(json_object_get(c, "Cmd"));
        out->diff_ids = strv(json_object_get(json_object_get(j, "rootfs"), "diff_ids"));
        json_decref(j);
        return 0;
}

static void strv_free(char **v)
{
        ab_strvfreep(&v);
}

void ab_image_config_clear(ab_image_config *c)
{
        free(c->os);
        free(c->arch);
        strv_free(c->env);
        free(c->workdir);
        free(c->user);
        strv_free(c->entrypoint);
        strv_free(c->cmd);
        strv_free(c->diff_ids);
        memset(c, 0, sizeof(*c));
}
