/* k8s_api.h - a small client of the Kubernetes API (libcurl over HTTPS, JSON
 * with jansson), for the kubernetes backend (docs/kubernetes.md).
 *
 * Credentials come from a kubeconfig file (server, certificate-authority or
 * -data, token or tokenFile, client-certificate/-key or their -data, the
 * current context or a named one) or, without one, from the pod's service
 * account (KUBERNETES_SERVICE_HOST/PORT and
 * /var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}).
 * The server's certificate is always verified against the cluster's CA
 * (insecure-skip-tls-verify is refused).
 *
 * Thread-safety: one ab_kapi serves every thread (a few idle curl handles
 * are kept, one is lent to each call). Paths are absolute API paths with
 * their query ("/api/v1/namespaces/NS/pods?labelSelector=..."). */
#ifndef AB_K8S_API_H
#define AB_K8S_API_H

#include "base/buf.h"
#include "base/err.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct ab_kapi ab_kapi;

typedef struct ab_kapi_opts {
        const char *kubeconfig; /* a kubeconfig file, or NULL/"" for in-cluster */
        const char *context;    /* its context to use; NULL = current-context */
        const char *namespace_; /* NULL = the context's, the service account's, or "default" */
        /* in-cluster only, for tests: the folder of token, ca.crt, namespace
         * (NULL = /var/run/secrets/kubernetes.io/serviceaccount) */
        const char *sa_dir;
} ab_kapi_opts;

/* Reads the credentials and makes a client. Does not connect. AB_E_INVALID
 * for a kubeconfig that lacks what it needs (the message names it),
 * AB_E_UNAVAILABLE when not in a cluster and no kubeconfig is given. */
int ab_kapi_open(const ab_kapi_opts *o, ab_kapi **out, ab_err **err);
void ab_kapi_free(ab_kapi *k);

/* The API server's URL ("https://host:port") and the namespace in use. */
const char *ab_kapi_server(const ab_kapi *k);
const char *ab_kapi_namespace(const ab_kapi *k);

typedef struct ab_kapi_res {
        long status;  /* HTTP status */
        json_t *json; /* the body as JSON, or NULL */
        ab_buf body;  /* the raw body */
} ab_kapi_res;

void ab_kapi_res_clear(ab_kapi_res *r);

/* One request. body may be NULL (not consumed); content_type NULL =
 * application/json (PATCH callers pass "application/merge-patch+json").
 * timeout_ms 0 = 30 s. 0 when the server answered, whatever the status (res
 * holds the answer; clear it); -1 with AB_E_UNAVAILABLE (unreachable, TLS
 * failure) or AB_E_TIMEOUT. */
int ab_kapi_call(ab_kapi *k, const char *method, const char *path, const json_t *body,
                 const char *content_type, uint32_t timeout_ms, ab_kapi_res *res, ab_err **err);

/* The error for a failed answer (status >= 300), from its Status object
 * when it has one ("what: reason: message"): 400/422 AB_E_INVALID, 401/403
 * AB_E_PERMISSION, 404 AB_E_NOT_FOUND, 409/410 AB_E_CONFLICT, 429 and 5xx
 * AB_E_UNAVAILABLE, 504 AB_E_TIMEOUT. Returns -1. */
int ab_kapi_status_err(const ab_kapi_res *res, const char *what, ab_err **err);

/* Parses a Status object (json): its code, reason and message (borrowed
 * from json). 0, or -EINVAL when json is not a Status. */
int ab_kapi_status_parse(const json_t *json, long *code, const char **reason, const char **message);

/* The conveniences: method + status check. *out (may be NULL) gets the
 * answer's JSON (caller decrefs). AB_E_* per ab_kapi_status_err. */
int ab_kapi_create(ab_kapi *k, const char *path, const json_t *obj, json_t **out, ab_err **err);
int ab_kapi_get(ab_kapi *k, const char *path, json_t **out, ab_err **err);
/* DELETE with propagationPolicy=Background; a missing object is success. */
int ab_kapi_delete(ab_kapi *k, const char *path, ab_err **err);
/* JSON merge patch (RFC 7386). */
int ab_kapi_patch(ab_kapi *k, const char *path, const json_t *patch, json_t **out, ab_err **err);

/* One line of a watch stream: {"type": T, "object": O}. *type (borrowed
 * from *obj's parent, valid while *event lives) and *object (borrowed from
 * *event); *event is the parsed line (caller decrefs). An ERROR event
 * carries a Status as its object. 0, or -EINVAL for a line that is not a
 * watch event. */
int ab_kapi_watch_line(const char *line, size_t len, json_t **event, const char **type,
                       json_t **object);

/* Called for each object: first every item of the list (type "ADDED",
 * sync true), then once "SYNCED" with obj NULL (the list is complete: an
 * object not seen is not there), then each watch event (ADDED, MODIFIED,
 * DELETED). Return 0 to
 * go on, 1 to stop with success, -1 (with *err set) to stop with that
 * error. obj is borrowed. */
typedef int (*ab_kapi_event_fn)(void *ud, const char *type, json_t *obj, bool sync, ab_err **err);

/* List, then watch, of list_path (a collection, e.g.
 * "/api/v1/namespaces/NS/pods") filtered by query ("labelSelector=..."
 * and/or "fieldSelector=...", already escaped; may be NULL) until fn
 * returns nonzero or the monotonic deadline_ms (ab_now_ms) passes
 * (AB_E_TIMEOUT "what: ..."). A watch that ends or breaks (an API server
 * restart) is resumed from the last resourceVersion seen; a 410 Gone
 * (that version is too old) relists, so nothing is missed. 0 when fn
 * returned 1, -1 with *err otherwise. */
int ab_kapi_list_watch(ab_kapi *k, const char *list_path, const char *query, uint64_t deadline_ms,
                       const char *what, ab_kapi_event_fn fn, void *ud, ab_err **err);

/* The YAML node n of doc as JSON: mappings as objects (scalar keys),
 * sequences as arrays, every scalar as a string. NULL for an empty node or
 * one nested deeper than 64. Caller decrefs. */
typedef struct yaml_document_s yaml_document_t;
typedef struct yaml_node_s yaml_node_t;
json_t *ab_kapi_yaml_node(yaml_document_t *doc, yaml_node_t *n);

/* s escaped for a URL's query (caller frees). */
char *ab_kapi_escape(const char *s);

/* Base64 of data[0..n) (caller frees), as a Secret's data wants it. */
char *ab_kapi_base64(const void *data, size_t n);

#endif
