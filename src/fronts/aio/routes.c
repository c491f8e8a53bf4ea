/* routes.c - DeerFlow's front (docs/compat-deerflow.md): its route table
 * under a configurable prefix, the sandbox URL's authentication, the
 * routing of AIO calls, and the answers in AIO's envelope. */
#include "fronts/aio/aio_int.h"

#include "base/id.h"
#include "base/log.h"
#include "base/util.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PREFIX_MAX 128

/* ---- answers ----------------------------------------------------------- */

enum MHD_Result aio_ok(ab_req *r, json_t *data)
{
        return resp_json(r, 200,
                         json_pack("{s:b,s:s,s:o}", "success", 1, "message", "Operation successful",
                                   "data", data ? data : json_null()));
}

enum MHD_Result aio_fail(ab_req *r, unsigned status, json_t *data, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *msg = NULL;
        if (vasprintf(&msg, fmt, ap) < 0)
                abort();
        va_end(ap);
        return resp_json(r, status,
                         json_pack("{s:b,s:o,s:o}", "success", 0, "message",
                                   json_bytes(msg, strlen(msg)), "data",
                                   data ? data : json_null()));
}

enum MHD_Result aio_err(ab_req *r, ab_err *e)
{
        unsigned st = status_of(e->code);
        if (st >= 500 && st != 503 && st != 507)
                /* the box, not the path: a sandbox URL's path holds its token */
                ab_log(AB_LOG_ERROR, "deerflow: request failed", "box",
                       aio_box(r) ? aio_box(r) : "-", "error", e->msg, NULL);
        enum MHD_Result ret = aio_fail(r, st, NULL, "%s", e->msg);
        ab_err_free(&e);
        return ret;
}

const char *aio_box(const ab_req *r)
{
        return r->front_box;
}

int aio_use(ab_req *r, ab_use *u, enum MHD_Result *ret)
{
        ab_err *e = NULL;
        if (ab_manager_use_begin(r->srv->mgr, aio_box(r), r->scope, u, &e) < 0) {
                *ret = aio_err(r, e);
                return -1;
        }
        return 0;
}

/* ---- request fields ---------------------------------------------------- */

int aio_body(ab_req *r, json_t **body, enum MHD_Result *ret)
{
        ab_err *e = NULL;
        if (req_json(r, body, &e) < 0) {
                *ret = aio_fail(r, 422, NULL, "%s", e->msg);
                ab_err_free(&e);
                return -1;
        }
        return 0;
}

static json_t *opt_field(json_t *o, const char *name)
{
        json_t *v = json_object_get(o, name);
        return json_is_null(v) ? NULL : v;
}

int aio_opt_str(json_t *o, const char *name, const char **out, ab_err **err)
{
        json_t *v = opt_field(o, name);
        if (!v)
                return 0;
        if (!json_is_string(v))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be a string", name);
        *out = json_string_value(v);
        return 0;
}

int aio_opt_bool(json_t *o, const char *name, bool *out, ab_err **err)
{
        json_t *v = opt_field(o, name);
        if (!v)
                return 0;
        if (!json_is_boolean(v))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be true or false", name);
        *out = json_is_true(v);
        return 0;
}

int aio_opt_secs(json_t *o, const char *name, double max, int64_t *ms, ab_err **err)
{
        json_t *v = opt_field(o, name);
        if (!v)
                return 0;
        double s = json_is_number(v) ? json_number_value(v) : -1;
        if (!(s >= 0 && s <= max))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be a number of seconds in 0..%g",
                                  name, max);
        *ms = (int64_t)(s * 1000.0);
        return 0;
}

int aio_opt_int(json_t *o, const char *name, int64_t lo, int64_t hi, int64_t *out, ab_err **err)
{
        json_t *v = opt_field(o, name);
        if (!v)
                return 0;
        if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be an integer in %lld..%lld",
                                  name, (long long)lo, (long long)hi);
        *out = json_integer_value(v);
        return 0;
}

/* ---- the sandbox URL's authentication ---------------------------------- */

static char prefix[PREFIX_MAX + 1];
static size_t prefix_segs;

/* 1 when tok is the token of box id (not being deleted): *app gets its
 * app (NULL: the admin's box); 0 when not; -1 with *err. */
static int token_box(ab_req *r, const char *id, const char *tok, char **app, ab_err **err)
{
        ab_box_rec rec;
        if (ab_manager_get(r->srv->mgr, id, NULL, &rec, err) < 0) {
                if ((*err)->code != AB_E_NOT_FOUND)
                        return -1;
                ab_err_free(err);
                return 0;
        }
        const char *want = json_string_value(json_object_get(rec.metadata, AIO_META_TOKEN));
        int ok = rec.status != AB_BOX_DELETING && want && req_secret_eq(tok, want);
        if (ok)
                *app = steal_pointer(&rec.app_id);
        ab_box_rec_clear(&rec);
        return ok;
}

/* AIO routes: the token in the sandbox URL is the credential (DeerFlow's
 * AIO client sends no header); without one, a caller's key (Authorization
 * or X-API-Key) reaches the boxes of its app. Read from the head only. */
static enum MHD_Result aio_authenticate(ab_req *r, bool *ok)
{
        *ok = false;
        size_t i = prefix_segs + 1; /* PREFIX/aio/CAP/... */
        char id[65];
        const char *tok = NULL;
        if (i >= r->n_seg || aio_cap_parse(r->seg[i], id, &tok) < 0)
                return aio_fail(r, 404, NULL, "no such sandbox URL");
        ab_err *e = NULL;
        if (tok) {
                char *app = NULL;
                int rc = token_box(r, id, tok, &app, &e);
                if (rc < 0)
                        return aio_err(r, e);
                if (rc == 1) { /* the call acts as the box's owner */
                        r->scope_buf = app;
                        r->scope = r->scope_buf;
                        r->front_box = xstrdup(id);
                        *ok = true;
                        return MHD_YES;
                }
                if (!req_header(r, "Authorization") && !req_header(r, "X-API-Key"))
                        return aio_fail(r, 401, NULL, "invalid token for sandbox %s", id);
        }
        enum MHD_Result ret = req_authenticate(r, ok);
        if (!*ok)
                return ret;
        ab_box_rec rec;
        if (ab_manager_get(r->srv->mgr, id, r->scope, &rec, &e) < 0) {
                *ok = false;
                return aio_err(r, e);
        }
        ab_box_rec_clear(&rec);
        r->front_box = xstrdup(id);
        return MHD_YES;
}

/* ---- routing ----------------------------------------------------------- */

typedef struct aio_call {
        const char *method, *path;
        enum MHD_Result (*fn)(ab_req *r);
} aio_call;

static const aio_call calls[] = {
    {"GET", "v1/sandbox", aio_context},
    {"POST", "v1/shell/exec", aio_shell_exec},
    {"POST", "v1/shell/view", aio_shell_view},
    {"POST", "v1/shell/wait", aio_shell_wait},
    {"POST", "v1/shell/kill", aio_shell_kill},
    {"POST", "v1/shell/write", aio_shell_write},
    {"POST", "v1/shell/sessions/create", aio_session_create},
    {"GET", "v1/shell/sessions", aio_session_list},
    {"DELETE", "v1/shell/sessions", aio_session_delete_all},
    {"POST", "v1/bash/exec", aio_bash_exec},
    {"POST", "v1/file/read", aio_file_read},
    {"POST", "v1/file/write", aio_file_write},
    {"POST", "v1/file/list", aio_file_list},
    {"POST", "v1/file/find", aio_file_find},
    {"POST", "v1/file/grep", aio_file_grep},
    {"POST", "v1/file/replace", aio_file_replace},
    {"GET", "v1/file/download", aio_file_download},
};

/* PREFIX/aio/CAP/REST: the AIO call REST of the box CAP names. */
static enum MHD_Result route_aio(ab_req *r, const char *rest)
{
        (void)rest;
        size_t first = prefix_segs + 2;
        if (!aio_box(r)) /* not behind aio_authenticate: a bug, refused */
                return aio_fail(r, 401, NULL, "no sandbox for this call");
        _cleanup_buf_ ab_buf p = {0};
        for (size_t i = first; i < r->n_seg; i++)
                ab_buf_printf(&p, "%s%s", i > first ? "/" : "", r->seg[i]);
        ab_buf_add(&p, "", 1);
        const char *path = p.p;
        if (!strcmp(r->method, "DELETE") && !strncmp(path, "v1/shell/sessions/", 18) &&
            !strchr(path + 18, '/') && path[18])
                return aio_session_delete(r, path + 18);
        bool other_method = false;
        for (size_t i = 0; i < AB_ARRAY_LEN(calls); i++) {
                if (strcmp(calls[i].path, path))
                        continue;
                if (!strcmp(calls[i].method, r->method))
                        return calls[i].fn(r);
                other_method = true;
        }
        if (other_method)
                return aio_fail(r, 405, NULL, "method %s not allowed on /%s", r->method, path);
        return aio_fail(r, 404, NULL, "agentbox's AIO front has no /%s (docs/compat-deerflow.md)",
                        path);
}

/* ---- the table --------------------------------------------------------- */

/* The box a request is about, for forwarding it to the box's fleet node
 * (kit/forward.h): an AIO call's (the sandbox URL's, aio_authenticate), or
 * for DELETE PREFIX/api/sandboxes/{sid} the box of the caller's sandbox
 * sid (kept in r->front_box). Creates, lists and gets are answered here
 * from the store. */
static const char *aio_box_of(ab_req *r)
{
        if (r->n_seg <= prefix_segs)
                return NULL;
        if (!strcmp(r->seg[prefix_segs], "aio"))
                return r->front_box;
        if (r->n_seg != prefix_segs + 3 || strcmp(r->method, "DELETE") != 0 ||
            strcmp(r->seg[prefix_segs], "api") != 0 ||
            strcmp(r->seg[prefix_segs + 1], "sandboxes") != 0)
                return NULL;
        char id[17];
        if (!aio_sandbox_box_id(r, r->seg[prefix_segs + 2], id))
                return NULL;
        free(r->front_box);
        r->front_box = xstrdup(id);
        return r->front_box;
}

enum { R_HEALTH, R_CREATE, R_LIST, R_GET, R_DELETE, R_AIO_GET, R_AIO_POST, R_AIO_DELETE, R_N };

static char patterns[R_N][PREFIX_MAX + 32];
static ab_route routes[R_N];
static ab_route_table table;

static bool prefix_ok(const char *p, size_t *segs)
{
        size_t n = strlen(p);
        *segs = 1;
        if (n == 0 || n > PREFIX_MAX || p[0] == '/' || p[n - 1] == '/')
                return false;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)p[i];
                if (c == '/') {
                        if (p[i + 1] == '/' || (i > 0 && p[i - 1] == '/'))
                                return false;
                        (*segs)++;
                } else if (!isalnum(c) && c != '.' && c != '_' && c != '-') {
                        return false;
                }
        }
        /* a segment "." or ".." would never reach us (paths are normalised) */
        return strcmp(p, ".") && strcmp(p, "..") && !strstr(p, "/./") && !strstr(p, "/../");
}

static void route_set(int k, const char *method, const char *suffix, auth_level auth,
                      body_kind body, route_fn fn)
{
        snprintf(patterns[k], sizeof(patterns[k]), "%s/%s", prefix, suffix);
        routes[k] = (ab_route){method, patterns[k], auth, body, fn};
}

const ab_route_table *ab_aio_routes(const char *pfx, ab_err **err)
{
        if (!pfx)
                pfx = AIO_DEFAULT_PREFIX;
        size_t segs;
        if (!prefix_ok(pfx, &segs)) {
                ab_err_set(err, AB_E_INVALID, 0,
                           "deerflow_prefix: '%s' must be path segments of letters, digits, '.', "
                           "'_' and '-' joined by '/' (at most %d bytes, no leading or trailing "
                           "'/')",
                           pfx, PREFIX_MAX);
                return NULL;
        }
        snprintf(prefix, sizeof(prefix), "%s", pfx);
        prefix_segs = segs;
        route_set(R_HEALTH, "GET", "health", AUTH_ANY, BODY_NONE, aio_health);
        route_set(R_CREATE, "POST", "api/sandboxes", AUTH_USER, BODY_JSON, aio_sandbox_create);
        route_set(R_LIST, "GET", "api/sandboxes", AUTH_USER, BODY_NONE, aio_sandbox_list);
        route_set(R_GET, "GET", "api/sandboxes/*", AUTH_USER, BODY_NONE, aio_sandbox_get);
        route_set(R_DELETE, "DELETE", "api/sandboxes/*", AUTH_USER, BODY_NONE, aio_sandbox_delete);
        route_set(R_AIO_GET, "GET", "aio/**", AUTH_OWN, BODY_NONE, route_aio);
        route_set(R_AIO_POST, "POST", "aio/**", AUTH_OWN, BODY_JSON, route_aio);
        route_set(R_AIO_DELETE, "DELETE", "aio/**", AUTH_OWN, BODY_NONE, route_aio);
        table = (ab_route_table){
            .name = "deerflow",
            .routes = routes,
            .n_routes = R_N,
            .authenticate = aio_authenticate, /* the sandbox URL's token: the box's record */
            .auth_blocks = true,
            .key_header = "X-API-Key", /* where DeerFlow sends provisioner_api_key */
            /* sessions' commands wait on workers: they give up at a stop */
            .quiesce = aio_shell_quiesce,
            .box_of = aio_box_of,
        };
        return &table;
}

char *aio_url_base(ab_req *r)
{
        const char *host = req_header(r, "Host");
        const char *proto = req_header(r, "X-Forwarded-Proto");
        bool https = proto && !strcasecmp(proto, "https");
        if (!host || !*host)
                host = r->srv->cfg->listen;
        return xasprintf("%s://%s/%s/aio", https ? "https" : "http", host, prefix);
}
