/* k8s_settings.c - the kubernetes: section of the config, checked (apart
 * from the backend itself, so that the config's loader does not pull the
 * API client into binaries that have none: the light CLI). */
#include "backend/backend.h"
#include "backend/k8s_api.h"
#include "base/limits.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static int bad(ab_err **err, const char *key, const char *why)
{
        return ab_err_set(err, AB_E_INVALID, 0, "kubernetes.%s: %s", key, why);
}

static bool str_map(const json_t *v)
{
        const char *key;
        json_t *x;
        if (!json_is_object(v))
                return false;
        json_object_foreach((json_t *)v, key, x) if (!json_is_string(x)) return false;
        return true;
}

int ab_k8s_settings_check(json_t *s, ab_err **err)
{
        static const char *const strs[] = {"kubeconfig",
                                           "context",
                                           "namespace",
                                           "image",
                                           "init_image",
                                           "storage_class",
                                           "runtime_class",
                                           "image_pull_policy",
                                           "workspace_size",
                                           "ready_timeout",
                                           NULL};
        static const char *const maps[] = {"node_selector", "labels", "annotations", NULL};
        const char *key;
        json_t *v;
        json_object_foreach(s, key, v)
        {
                bool known = false;
                for (size_t i = 0; strs[i]; i++)
                        if (!strcmp(key, strs[i])) {
                                known = true;
                                if (!json_is_string(v))
                                        return bad(err, key, "expected a single value");
                        }
                for (size_t i = 0; maps[i]; i++)
                        if (!strcmp(key, maps[i])) {
                                known = true;
                                if (!str_map(v))
                                        return bad(err, key, "expected a mapping of strings");
                        }
                if (!strcmp(key, "tolerations")) {
                        known = true;
                        if (!json_is_array(v))
                                return bad(err, key, "expected a list of tolerations");
                        size_t i;
                        json_t *t;
                        json_array_foreach(v, i, t)
                        {
                                if (!json_is_object(t))
                                        return bad(err, key, "each toleration is a mapping");
                                /* YAML gives strings: tolerationSeconds is a number */
                                json_t *secs = json_object_get(t, "tolerationSeconds");
                                if (json_is_string(secs))
                                        json_object_set_new(
                                            t, "tolerationSeconds",
                                            json_integer(
                                                strtoll(json_string_value(secs), NULL, 10)));
                        }
                }
                if (!strcmp(key, "egress_proxy")) {
                        known = true;
                        if (!json_is_object(v) || !str_map(json_object_get(v, "selector")))
                                return bad(err, key,
                                           "expected {selector: {label: value}, "
                                           "namespace?, port?}");
                        json_t *port = json_object_get(v, "port");
                        if (json_is_string(port))
                                json_object_set_new(
                                    v, "port",
                                    json_integer(strtoll(json_string_value(port), NULL, 10)));
                }
                if (!known)
                        return bad(err, key,
                                   "unknown setting (known: kubeconfig, context, namespace, "
                                   "image, init_image, image_pull_policy, storage_class, "
                                   "workspace_size, node_selector, tolerations, runtime_class, "
                                   "labels, annotations, ready_timeout, egress_proxy)");
        }
        const char *ws = json_string_value(json_object_get(s, "workspace_size"));
        uint64_t mib;
        ab_err *e = NULL;
        if (ws && ab_parse_mib(ws, &mib, &e) < 0) {
                int r = bad(err, "workspace_size", e->msg);
                ab_err_free(&e);
                return r;
        }
        const char *rt = json_string_value(json_object_get(s, "ready_timeout"));
        uint64_t ms;
        if (rt && ab_parse_duration_ms(rt, &ms, &e) < 0) {
                int r = bad(err, "ready_timeout", e->msg);
                ab_err_free(&e);
                return r;
        }
        const char *pp = json_string_value(json_object_get(s, "image_pull_policy"));
        if (pp && strcmp(pp, "Always") && strcmp(pp, "IfNotPresent") && strcmp(pp, "Never"))
                return bad(err, "image_pull_policy", "one of Always, IfNotPresent, Never");
        return 0;
}

int ab_k8s_settings_yaml(yaml_document_t *doc, yaml_node_t *n, char **json, ab_err **err)
{
        *json = NULL;
        json_t *j = ab_kapi_yaml_node(doc, n);
        if (!json_is_object(j)) {
                json_decref(j);
                return ab_err_set(err, AB_E_INVALID, 0, "kubernetes: expected a mapping");
        }
        int r = ab_k8s_settings_check(j, err);
        if (r == 0)
                *json = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        return r;
}
