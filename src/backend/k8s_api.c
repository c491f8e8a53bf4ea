/* k8s_api.c - the Kubernetes API over HTTPS (k8s_api.h). */
#include "backend/k8s_api.h"
#include "base/codec.h"
#include "base/sha256.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <strings.h>
#include <sys/socket.h>
#include <yaml.h>

#define SA_DIR          "/var/run/secrets/kubernetes.io/serviceaccount"
#define DEFAULT_TIMEOUT 30000u
#define POOL_MAX        8
#define BODY_MAX        (64u * 1024u * 1024u)
#define LINE_MAX_BYTES  (16u * 1024u * 1024u) /* one watch event */
#define FILE_MAX        (1024 * 1024)

struct ab_kapi {
        char *server, *ns;
        char *token, *token_file; /* a fixed token, or a file read at each call */
        /* CA: a file or PEM data; client certificate and key likewise */
        char *ca_file, *cert_file, *key_file;
        ab_buf ca_pem, cert_pem, key_pem;
        pthread_mutex_t mu;
        CURL *idle[POOL_MAX];
        size_t n_idle;
};

/* Hands e to *err when that is free, else drops it. */
static void pass_err(ab_err **err, ab_err *e)
{
        if (err && !*err)
                *err = e;
        else
                ab_err_free(&e);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
        curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- the kubeconfig: YAML into JSON, then its entries ---- */

static json_t *yaml_to_json(yaml_document_t *doc, yaml_node_t *n, int depth)
{
        if (!n || depth > 64)
                return NULL;
        switch (n->type) {
        case YAML_SCALAR_NODE:
                return json_stringn((const char *)n->data.scalar.value, n->data.scalar.length);
        case YAML_SEQUENCE_NODE: {
                json_t *a = json_array();
                for (yaml_node_item_t *i = n->data.sequence.items.start;
                     i < n->data.sequence.items.top; i++) {
                        json_t *v = yaml_to_json(doc, yaml_document_get_node(doc, *i), depth + 1);
                        json_array_append_new(a, v ? v : json_null());
                }
                return a;
        }
        case YAML_MAPPING_NODE: {
                json_t *o = json_object();
                for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
                     p < n->data.mapping.pairs.top; p++) {
                        yaml_node_t *kn = yaml_document_get_node(doc, p->key);
                        if (!kn || kn->type != YAML_SCALAR_NODE)
                                continue;
                        json_t *v =
                            yaml_to_json(doc, yaml_document_get_node(doc, p->value), depth + 1);
                        json_object_set_new(o, (const char *)kn->data.scalar.value,
                                            v ? v : json_null());
                }
                return o;
        }
        default:
                return NULL;
        }
}

json_t *ab_kapi_yaml_node(yaml_document_t *doc, yaml_node_t *n)
{
        return yaml_to_json(doc, n, 0);
}

static json_t *load_yaml(const char *text, size_t len)
{
        yaml_parser_t p;
        yaml_document_t doc;
        if (!yaml_parser_initialize(&p))
                return NULL;
        yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
        json_t *j = NULL;
        if (yaml_parser_load(&p, &doc)) {
                j = yaml_to_json(&doc, yaml_document_get_root_node(&doc), 0);
                yaml_document_delete(&doc);
        }
        yaml_parser_delete(&p);
        return j;
}

/* The entry named name of list key in the kubeconfig, then its field. */
static json_t *named(json_t *cfg, const char *list, const char *name, const char *field)
{
        json_t *v;
        size_t i;
        json_array_foreach(json_object_get(cfg, list), i, v)
        {
                const char *n = json_string_value(json_object_get(v, "name"));
                if (n && name && !strcmp(n, name))
                        return json_object_get(v, field);
        }
        return NULL;
}

static const char *str_of(json_t *o, const char *key)
{
        const char *s = json_string_value(json_object_get(o, key));
        return s && *s ? s : NULL;
}

/* A path of the kubeconfig: relative ones are relative to its folder. */
static char *cfg_path(const char *cfg_file, const char *p)
{
        if (p[0] == '/')
                return xstrdup(p);
        const char *slash = strrchr(cfg_file, '/');
        if (!slash)
                return xstrdup(p);
        return xasprintf("%.*s/%s", (int)(slash - cfg_file), cfg_file, p);
}

static int b64_into(const char *s, ab_buf *out)
{
        size_t n = strlen(s);
        while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
                n--;
        if (n == 0 || n % 4 || n > INT32_MAX / 2)
                return -1;
        unsigned char *d = (unsigned char *)ab_buf_reserve(out, n);
        int len = EVP_DecodeBlock(d, (const unsigned char *)s, (int)n);
        if (len < 0)
                return -1;
        if (s[n - 1] == '=')
                len--; /* EVP_DecodeBlock counts the padding as data */
        if (s[n - 2] == '=')
                len--;
        ab_buf_commit(out, (size_t)len);
        return 0;
}

/* One credential of the kubeconfig: NAME-data (base64) into pem, else NAME
 * (a path) into *file. Neither is fine unless required. */
static int cfg_pem(const char *cfg_file, json_t *o, const char *name, ab_buf *pem, char **file,
                   ab_err **err)
{
        _cleanup_free_ char *dk = xasprintf("%s-data", name);
        const char *data = str_of(o, dk), *path = str_of(o, name);
        if (data) {
                if (b64_into(data, pem) < 0)
                        return ab_err_set(err, AB_E_INVALID, 0, "kubeconfig %s: %s is not base64",
                                          cfg_file, dk);
        } else if (path) {
                *file = cfg_path(cfg_file, path);
        }
        return 0;
}

static int from_kubeconfig(ab_kapi *k, const ab_kapi_opts *o, ab_err **err)
{
        const char *f = o->kubeconfig;
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        int r = ab_read_file(AT_FDCWD, f, &text, &len);
        if (r < 0)
                return ab_err_set(err, AB_E_INVALID, -r, "kubeconfig %s", f);
        json_t *cfg = load_yaml(text, len);
        if (!json_is_object(cfg)) {
                json_decref(cfg);
                return ab_err_set(err, AB_E_INVALID, 0, "kubeconfig %s: not a YAML mapping", f);
        }
        const char *ctx_name =
            o->context && *o->context ? o->context : str_of(cfg, "current-context");
        json_t *ctx = named(cfg, "contexts", ctx_name, "context");
        r = 0;
        if (!ctx) {
                r = ab_err_set(err, AB_E_INVALID, 0, "kubeconfig %s: no context %s", f,
                               ctx_name ? ctx_name : "(no current-context)");
                goto out;
        }
        json_t *cl = named(cfg, "clusters", str_of(ctx, "cluster"), "cluster");
        json_t *user = named(cfg, "users", str_of(ctx, "user"), "user");
        if (!cl || !str_of(cl, "server")) {
                r = ab_err_set(err, AB_E_INVALID, 0,
                               "kubeconfig %s: context %s has no cluster "
                               "with a server",
                               f, ctx_name);
                goto out;
        }
        /* YAML scalars arrive as strings; a JSON kubeconfig has a boolean */
        json_t *insecure = json_object_get(cl, "insecure-skip-tls-verify");
        if (json_is_true(insecure) ||
            (json_is_string(insecure) && !strcasecmp(json_string_value(insecure), "true"))) {
                r = ab_err_set(err, AB_E_INVALID, 0,
                               "kubeconfig %s: insecure-skip-tls-verify "
                               "is refused: give the cluster's certificate-authority",
                               f);
                goto out;
        }
        k->server = xstrdup(str_of(cl, "server"));
        if (str_of(ctx, "namespace"))
                k->ns = xstrdup(str_of(ctx, "namespace"));
        if (cfg_pem(f, cl, "certificate-authority", &k->ca_pem, &k->ca_file, err) < 0 ||
            cfg_pem(f, user, "client-certificate", &k->cert_pem, &k->cert_file, err) < 0 ||
            cfg_pem(f, user, "client-key", &k->key_pem, &k->key_file, err) < 0) {
                r = -1;
                goto out;
        }
        if (str_of(user, "token"))
                k->token = xstrdup(str_of(user, "token"));
        else if (str_of(user, "tokenFile"))
                k->token_file = cfg_path(f, str_of(user, "tokenFile"));
        if (!k->token && !k->token_file && !k->cert_pem.n && !k->cert_file) {
                r = ab_err_set(err, AB_E_INVALID, 0,
                               "kubeconfig %s: user %s has neither a token "
                               "nor a client certificate (exec and auth-provider plugins are "
                               "not supported)",
                               f, str_of(ctx, "user") ? str_of(ctx, "user") : "");
                goto out;
        }
        if ((k->cert_pem.n || k->cert_file) != (k->key_pem.n || k->key_file))
                r = ab_err_set(err, AB_E_INVALID, 0,
                               "kubeconfig %s: a client certificate needs "
                               "its key, and a key its certificate",
                               f);
out:
        json_decref(cfg);
        return r;
}

static int in_cluster(ab_kapi *k, const ab_kapi_opts *o, ab_err **err)
{
        const char *host = getenv("KUBERNETES_SERVICE_HOST");
        const char *port = getenv("KUBERNETES_SERVICE_PORT");
        const char *dir = o->sa_dir && *o->sa_dir ? o->sa_dir : SA_DIR;
        if (!host || !*host)
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "not in a Kubernetes pod (KUBERNETES_SERVICE_HOST is unset) and "
                                  "no kubeconfig given: set kubernetes.kubeconfig");
        k->server = strchr(host, ':') ? xasprintf("https://[%s]:%s", host, port ? port : "443")
                                      : xasprintf("https://%s:%s", host, port ? port : "443");
        k->token_file = xasprintf("%s/token", dir);
        k->ca_file = xasprintf("%s/ca.crt", dir);
        _cleanup_free_ char *nsf = xasprintf("%s/namespace", dir);
        _cleanup_free_ char *ns = NULL;
        if (ab_read_file(AT_FDCWD, nsf, &ns, NULL) == 0) {
                ns[strcspn(ns, "\r\n")] = 0;
                if (*ns)
                        k->ns = xstrdup(ns);
        }
        if (access(k->token_file, R_OK) < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, errno,
                                  "in-cluster: cannot read the service account's token %s",
                                  k->token_file);
        return 0;
}

int ab_kapi_open(const ab_kapi_opts *o, ab_kapi **out, ab_err **err)
{
        *out = NULL;
        pthread_once(&curl_once, curl_init);
        if (curl_init_rc != CURLE_OK)
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl initialisation failed");
        ab_kapi *k = xzalloc(sizeof(*k));
        pthread_mutex_init(&k->mu, NULL);
        int r =
            o->kubeconfig && *o->kubeconfig ? from_kubeconfig(k, o, err) : in_cluster(k, o, err);
        if (r < 0) {
                ab_kapi_free(k);
                return r;
        }
        if (strncmp(k->server, "https://", 8) != 0) {
                r = ab_err_set(err, AB_E_INVALID, 0,
                               "the API server %s is not https://: agentbox talks to it only over "
                               "TLS",
                               k->server);
                ab_kapi_free(k);
                return r;
        }
        size_t sl = strlen(k->server);
        if (sl && k->server[sl - 1] == '/')
                k->server[sl - 1] = 0;
        if (o->namespace_ && *o->namespace_) {
                free(k->ns);
                k->ns = xstrdup(o->namespace_);
        }
        if (!k->ns)
                k->ns = xstrdup("default");
        *out = k;
        return 0;
}

void ab_kapi_free(ab_kapi *k)
{
        if (!k)
                return;
        for (size_t i = 0; i < k->n_idle; i++)
                curl_easy_cleanup(k->idle[i]);
        pthread_mutex_destroy(&k->mu);
        free(k->server);
        free(k->ns);
        if (k->token)
                ab_wipe(k->token, strlen(k->token));
        free(k->token);
        free(k->token_file);
        free(k->ca_file);
        free(k->cert_file);
        free(k->key_file);
        ab_buf_free(&k->ca_pem);
        ab_buf_free(&k->cert_pem);
        if (k->key_pem.p)
                ab_wipe(k->key_pem.p, k->key_pem.n);
        ab_buf_free(&k->key_pem);
        free(k);
}

const char *ab_kapi_server(const ab_kapi *k)
{
        return k->server;
}

const char *ab_kapi_namespace(const ab_kapi *k)
{
        return k->ns;
}

void ab_kapi_res_clear(ab_kapi_res *r)
{
        if (r->json)
                json_decref(r->json);
        ab_buf_free(&r->body);
        memset(r, 0, sizeof(*r));
}

/* ---- requests ---- */

static CURL *take(ab_kapi *k)
{
        pthread_mutex_lock(&k->mu);
        CURL *c = k->n_idle ? k->idle[--k->n_idle] : NULL;
        pthread_mutex_unlock(&k->mu);
        return c ? c : curl_easy_init();
}

static void put_back(ab_kapi *k, CURL *c)
{
        pthread_mutex_lock(&k->mu);
        if (k->n_idle < POOL_MAX) {
                k->idle[k->n_idle++] = c;
                c = NULL;
        }
        pthread_mutex_unlock(&k->mu);
        if (c)
                curl_easy_cleanup(c);
}

/* The API credentials must never leak into a child the server starts. */
static curl_socket_t socket_cloexec(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
        (void)ud;
        (void)purpose;
        int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
        return fd < 0 ? CURL_SOCKET_BAD : fd;
}

static bool set_blob(CURL *c, CURLoption opt, const ab_buf *b)
{
        struct curl_blob blob = {.data = b->p, .len = b->n, .flags = CURL_BLOB_COPY};
        return curl_easy_setopt(c, opt, &blob) == CURLE_OK;
}

/* The options every request shares: URL, TLS, credentials. *hdr gets the
 * headers to free after the request. */
static bool setup(ab_kapi *k, CURL *c, const char *method, const char *path,
                  const char *content_type, struct curl_slist **hdr, char *errbuf)
{
        _cleanup_free_ char *url = xasprintf("%s%s", k->server, path);
        curl_easy_reset(c);
        bool ok = curl_easy_setopt(c, CURLOPT_URL, url) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, socket_cloexec) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https") == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L) == CURLE_OK;
        if (k->ca_pem.n)
                ok = ok && set_blob(c, CURLOPT_CAINFO_BLOB, &k->ca_pem);
        else if (k->ca_file)
                ok = ok && curl_easy_setopt(c, CURLOPT_CAINFO, k->ca_file) == CURLE_OK;
        if (k->cert_pem.n)
                ok = ok && set_blob(c, CURLOPT_SSLCERT_BLOB, &k->cert_pem);
        else if (k->cert_file)
                ok = ok && curl_easy_setopt(c, CURLOPT_SSLCERT, k->cert_file) == CURLE_OK;
        if (k->key_pem.n)
                ok = ok && set_blob(c, CURLOPT_SSLKEY_BLOB, &k->key_pem);
        else if (k->key_file)
                ok = ok && curl_easy_setopt(c, CURLOPT_SSLKEY, k->key_file) == CURLE_OK;
        *hdr = curl_slist_append(NULL, "Accept: application/json");
        if (content_type) {
                _cleanup_free_ char *h = xasprintf("Content-Type: %s", content_type);
                *hdr = curl_slist_append(*hdr, h);
        }
        /* a projected service account token rotates: read it at each call */
        _cleanup_free_ char *tok = NULL;
        if (k->token_file && ab_read_file(AT_FDCWD, k->token_file, &tok, NULL) == 0)
                tok[strcspn(tok, "\r\n")] = 0;
        const char *t = k->token ? k->token : tok;
        if (t && *t) {
                _cleanup_free_ char *h = xasprintf("Authorization: Bearer %s", t);
                *hdr = curl_slist_append(*hdr, h);
                ab_wipe(h, strlen(h));
        }
        if (tok)
                ab_wipe(tok, strlen(tok));
        ok = ok && curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdr) == CURLE_OK;
        return ok;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
        ab_buf *b = ud;
        size_t len = size * n;
        if (b->n + len > BODY_MAX)
                return 0;
        ab_buf_add(b, p, len);
        return len;
}

static int curl_fail(ab_kapi *k, CURLcode rc, const char *method, const char *path,
                     const char *errbuf, ab_err **err)
{
        return ab_err_set(err, rc == CURLE_OPERATION_TIMEDOUT ? AB_E_TIMEOUT : AB_E_UNAVAILABLE, 0,
                          "kubernetes API %s: %s %s: %s", k->server, method, path,
                          *errbuf ? errbuf : curl_easy_strerror(rc));
}

int ab_kapi_call(ab_kapi *k, const char *method, const char *path, const json_t *body,
                 const char *content_type, uint32_t timeout_ms, ab_kapi_res *res, ab_err **err)
{
        memset(res, 0, sizeof(*res));
        CURL *c = take(k);
        if (!c)
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl handle creation failed");
        _cleanup_free_ char *json = body ? json_dumps(body, JSON_COMPACT) : NULL;
        struct curl_slist *hdr = NULL;
        char errbuf[CURL_ERROR_SIZE] = "";
        bool ok =
            setup(k, c, method, path,
                  json ? (content_type ? content_type : "application/json") : NULL, &hdr, errbuf);
        ok = ok && curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                                    (long)(timeout_ms ? timeout_ms : DEFAULT_TIMEOUT)) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEDATA, &res->body) == CURLE_OK;
        if (json) {
                ok = ok && curl_easy_setopt(c, CURLOPT_POSTFIELDS, json) == CURLE_OK;
                ok = ok &&
                     curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(json)) == CURLE_OK;
        } else if (!strcmp(method, "GET")) {
                ok = ok && curl_easy_setopt(c, CURLOPT_HTTPGET, 1L) == CURLE_OK;
        }
        CURLcode rc = ok ? curl_easy_perform(c) : CURLE_FAILED_INIT;
        curl_slist_free_all(hdr);
        if (rc != CURLE_OK) {
                curl_easy_cleanup(c);
                ab_buf_free(&res->body);
                return curl_fail(k, rc, method, path, errbuf, err);
        }
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &res->status);
        put_back(k, c);
        if (res->body.n)
                res->json = json_loadb(res->body.p, res->body.n, 0, NULL);
        return 0;
}

/* ---- Status objects ---- */

int ab_kapi_status_parse(const json_t *json, long *code, const char **reason, const char **message)
{
        const char *kind = json_string_value(json_object_get(json, "kind"));
        if (!kind || strcmp(kind, "Status") != 0)
                return -EINVAL;
        json_t *c = json_object_get(json, "code");
        *code = json_is_integer(c) ? (long)json_integer_value(c) : 0;
        *reason = json_string_value(json_object_get(json, "reason"));
        *message = json_string_value(json_object_get(json, "message"));
        return 0;
}

static ab_code code_of(long status)
{
        switch (status) {
        case 400:
        case 415:
        case 422:
                return AB_E_INVALID;
        case 401:
        case 403:
                return AB_E_PERMISSION;
        case 404:
                return AB_E_NOT_FOUND;
        case 409:
        case 410:
                return AB_E_CONFLICT;
        case 504:
                return AB_E_TIMEOUT;
        default:
                return AB_E_UNAVAILABLE;
        }
}

int ab_kapi_status_err(const ab_kapi_res *res, const char *what, ab_err **err)
{
        long code = 0;
        const char *reason = NULL, *msg = NULL;
        if (ab_kapi_status_parse(res->json, &code, &reason, &msg) < 0 || !msg)
                msg = res->body.n ? res->body.p : "";
        if (!code)
                code = res->status;
        return ab_err_set(err, code_of(res->status), 0, "%s: %s%s%.*s (HTTP %ld)", what,
                          reason ? reason : "", reason ? ": " : "", 2000, msg, res->status);
}

static int call_ok(ab_kapi *k, const char *method, const char *path, const json_t *body,
                   const char *ctype, json_t **out, ab_err **err)
{
        if (out)
                *out = NULL;
        ab_kapi_res res;
        if (ab_kapi_call(k, method, path, body, ctype, 0, &res, err) < 0)
                return -1;
        int r = 0;
        if (res.status >= 300) {
                _cleanup_free_ char *what = xasprintf("%s %s", method, path);
                r = ab_kapi_status_err(&res, what, err);
        } else if (out) {
                *out = res.json;
                res.json = NULL;
        }
        ab_kapi_res_clear(&res);
        return r;
}

int ab_kapi_create(ab_kapi *k, const char *path, const json_t *obj, json_t **out, ab_err **err)
{
        return call_ok(k, "POST", path, obj, NULL, out, err);
}

int ab_kapi_get(ab_kapi *k, const char *path, json_t **out, ab_err **err)
{
        return call_ok(k, "GET", path, NULL, NULL, out, err);
}

int ab_kapi_patch(ab_kapi *k, const char *path, const json_t *patch, json_t **out, ab_err **err)
{
        return call_ok(k, "PATCH", path, patch, "application/merge-patch+json", out, err);
}

int ab_kapi_delete(ab_kapi *k, const char *path, ab_err **err)
{
        json_t *opts = json_pack("{s:s, s:s, s:s}", "kind", "DeleteOptions", "apiVersion", "v1",
                                 "propagationPolicy", "Background");
        ab_err *e = NULL;
        int r = call_ok(k, "DELETE", path, opts, NULL, NULL, &e);
        json_decref(opts);
        if (r < 0 && e->code == AB_E_NOT_FOUND) {
                ab_err_free(&e);
                return 0;
        }
        if (r < 0)
                pass_err(err, e);
        return r;
}

/* ---- watches ---- */

int ab_kapi_watch_line(const char *line, size_t len, json_t **event, const char **type,
                       json_t **object)
{
        *event = NULL;
        json_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
        const char *t = json_string_value(json_object_get(j, "type"));
        json_t *o = json_object_get(j, "object");
        if (!t || !json_is_object(o)) {
                json_decref(j);
                return -EINVAL;
        }
        *event = j;
        *type = t;
        *object = o;
        return 0;
}

typedef struct watch_ctx {
        CURL *c;
        long status; /* of the current watch answer, 0 until known */
        ab_buf line;
        ab_kapi_event_fn fn;
        void *ud;
        char *rv;    /* the last resourceVersion seen */
        int outcome; /* 1 = fn said done, -1 = fn failed (err), -2 = 410 Gone */
        ab_err *err;
} watch_ctx;

static void set_rv(watch_ctx *w, json_t *obj)
{
        const char *rv =
            json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
        if (rv && *rv) {
                free(w->rv);
                w->rv = xstrdup(rv);
        }
}

/* One complete line of the stream: 0 = go on, 1 = stop. */
static int watch_event(watch_ctx *w, const char *line, size_t len)
{
        json_t *ev, *obj;
        const char *type;
        if (len == 0)
                return 0;
        if (ab_kapi_watch_line(line, len, &ev, &type, &obj) < 0) {
                ab_err_set(&w->err, AB_E_UNAVAILABLE, 0,
                           "the API server's watch sent something that is not an event");
                w->outcome = -1;
                return 1;
        }
        int stop = 0;
        if (!strcmp(type, "ERROR")) {
                long code = 0;
                const char *reason = NULL, *msg = NULL;
                if (ab_kapi_status_parse(obj, &code, &reason, &msg) == 0 && code == 410) {
                        w->outcome = -2;
                } else {
                        ab_err_set(&w->err, AB_E_UNAVAILABLE, 0, "watch error: %s",
                                   msg ? msg : "(no message)");
                        w->outcome = -1;
                }
                stop = 1;
        } else if (!strcmp(type, "BOOKMARK")) {
                set_rv(w, obj);
        } else {
                set_rv(w, obj);
                int r = w->fn(w->ud, type, obj, false, &w->err);
                if (r != 0) {
                        w->outcome = r > 0 ? 1 : -1;
                        stop = 1;
                }
        }
        json_decref(ev);
        return stop;
}

static size_t on_watch(char *p, size_t size, size_t n, void *ud)
{
        watch_ctx *w = ud;
        size_t len = size * n;
        if (w->line.n + len > LINE_MAX_BYTES)
                return 0;
        ab_buf_add(&w->line, p, len);
        if (!w->status)
                curl_easy_getinfo(w->c, CURLINFO_RESPONSE_CODE, &w->status);
        if (w->status != 200)
                return len; /* an error answer: its Status is read whole */
        size_t start = 0;
        for (size_t i = 0; i < w->line.n; i++) {
                if (w->line.p[i] != '\n')
                        continue;
                if (watch_event(w, w->line.p + start, i - start))
                        return 0; /* done: ends the transfer */
                start = i + 1;
        }
        ab_buf_drop(&w->line, start);
        return len;
}

/* Lists list_path: fn for every item; w->rv = the list's resourceVersion.
 * 0, 1 (fn said done), -1 (*err). */
static int list_once(ab_kapi *k, const char *list_path, const char *query, watch_ctx *w,
                     uint64_t deadline_ms, ab_err **err)
{
        _cleanup_free_ char *path =
            xasprintf("%s%s%s", list_path, query && *query ? "?" : "", query ? query : "");
        uint64_t now = ab_now_ms();
        ab_kapi_res res;
        if (ab_kapi_call(k, "GET", path, NULL, NULL,
                         (uint32_t)(deadline_ms > now ? deadline_ms - now : 1), &res, err) < 0)
                return -1;
        if (res.status >= 300) {
                _cleanup_free_ char *what = xasprintf("list %s", list_path);
                int r = ab_kapi_status_err(&res, what, err);
                ab_kapi_res_clear(&res);
                return r;
        }
        free(w->rv);
        w->rv = NULL;
        set_rv(w, res.json);
        json_t *it;
        size_t i;
        int r = 0;
        json_array_foreach(json_object_get(res.json, "items"), i, it)
        {
                r = w->fn(w->ud, "ADDED", it, true, err);
                if (r != 0)
                        break;
        }
        if (r == 0)
                r = w->fn(w->ud, "SYNCED", NULL, true, err);
        ab_kapi_res_clear(&res);
        return r < 0 ? -1 : r;
}

/* One watch request from w->rv; ends when the server ends it, the
 * connection breaks, the deadline passes or an event stops it. */
static void watch_once(ab_kapi *k, const char *list_path, const char *query, watch_ctx *w,
                       uint64_t deadline_ms)
{
        uint64_t now = ab_now_ms();
        uint64_t left = deadline_ms > now ? deadline_ms - now : 1;
        _cleanup_free_ char *rv = ab_kapi_escape(w->rv ? w->rv : "");
        _cleanup_free_ char *path =
            xasprintf("%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%llu"
                      "%s%s",
                      list_path, rv, (unsigned long long)(left / 1000 + 1),
                      query && *query ? "&" : "", query ? query : "");
        CURL *c = take(k);
        if (!c)
                return;
        struct curl_slist *hdr = NULL;
        char errbuf[CURL_ERROR_SIZE] = "";
        bool ok = setup(k, c, "GET", path, NULL, &hdr, errbuf);
        ok = ok && curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)left) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_watch) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEDATA, w) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_HTTPGET, 1L) == CURLE_OK;
        ab_buf_free(&w->line);
        w->c = c;
        w->status = 0;
        CURLcode rc = ok ? curl_easy_perform(c) : CURLE_FAILED_INIT;
        curl_slist_free_all(hdr);
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (rc == CURLE_OK && status == 410 && !w->outcome) {
                w->outcome = -2; /* the answer itself can be 410 rather than an event */
        } else if (rc == CURLE_OK && status >= 300 && !w->outcome) {
                ab_kapi_res res = {.status = status,
                                   .json =
                                       json_loadb(w->line.p ? w->line.p : "", w->line.n, 0, NULL),
                                   .body = w->line};
                _cleanup_free_ char *what = xasprintf("watch %s", list_path);
                ab_kapi_status_err(&res, what, &w->err);
                json_decref(res.json);
                w->outcome = -1;
        }
        if (rc == CURLE_OK)
                put_back(k, c);
        else
                curl_easy_cleanup(c);
}

int ab_kapi_list_watch(ab_kapi *k, const char *list_path, const char *query, uint64_t deadline_ms,
                       const char *what, ab_kapi_event_fn fn, void *ud, ab_err **err)
{
        watch_ctx w = {.fn = fn, .ud = ud};
        int r = list_once(k, list_path, query, &w, deadline_ms, err);
        unsigned backoff = 50;
        while (r == 0) {
                if (ab_now_ms() >= deadline_ms) {
                        r = ab_err_set(err, AB_E_TIMEOUT, 0, "%s: timed out", what);
                        break;
                }
                w.outcome = 0;
                watch_once(k, list_path, query, &w, deadline_ms);
                if (w.outcome == 1) {
                        r = 1;
                } else if (w.outcome == -1) {
                        pass_err(err, w.err);
                        w.err = NULL;
                        r = -1;
                } else if (w.outcome == -2) {
                        /* too old: relist, then watch from the list's version */
                        r = list_once(k, list_path, query, &w, deadline_ms, err);
                } else {
                        /* the server ended the watch, or the connection broke (a
                         * restart): resume from the last version after a pause */
                        uint64_t now = ab_now_ms();
                        if (now < deadline_ms) {
                                uint64_t nap =
                                    deadline_ms - now < backoff ? deadline_ms - now : backoff;
                                struct timespec ts = {(time_t)(nap / 1000),
                                                      (long)(nap % 1000) * 1000000};
                                nanosleep(&ts, NULL);
                        }
                        backoff = backoff < 1000 ? backoff * 2 : 1000;
                }
        }
        ab_buf_free(&w.line);
        free(w.rv);
        ab_err_free(&w.err);
        return r == 1 ? 0 : -1;
}

char *ab_kapi_escape(const char *s)
{
        return ab_pct_encode(s);
}

char *ab_kapi_base64(const void *data, size_t n)
{
        size_t cap = xadd(xmul((n + 2) / 3, 4), 1);
        char *out = xmalloc(cap);
        EVP_EncodeBlock((unsigned char *)out, data, (int)n);
        return out;
}
