/* FastGPT code-sandbox routes (seed 003): POST /sandbox/js, POST
 * /sandbox/python, GET /sandbox/modules. Answers use the seed's shapes:
 * HTTP 200 {"success": true, "data": {...}} or {"success": false, "message"},
 * and 400 "Invalid request: ..." for a malformed request.
 *
 * Auth as the seed: `Authorization: Bearer TOKEN` (missing 401, malformed
 * 400, wrong 401), where TOKEN is SANDBOX_TOKEN, the admin token or an API
 * key; with no token configured, loopback clients only, like the rest of the
 * API. The caller's app (the key's; the SANDBOX_TOKEN and the admin token are
 * one app each) chooses the runner's warm workers: never another app's. */
#include "base/codec.h"
#include "base/sha256.h"
#include "rest/parse.h"
#include "rest/rest.h"
#include "runners/runner.h"

static enum MHD_Result sandbox_answer(ab_req *r, unsigned status, const char *message)
{
        return resp_json(r, status, json_pack("{s:b,s:s}", "success", 0, "message", message));
}

/* The caller's app for the runner's pool (a warm worker serves one app):
 * an API key's app_id, or one of these, which no app id can be (app ids
 * have no ':'). */
#define APP_SANDBOX_TOKEN ":sandbox-token"
#define APP_ADMIN         ":admin"

/* The app of a bearer token that is an API key (configured, or made with
 * POST /v1/keys: the store is read, so the table's auth blocks), malloc'd,
 * or NULL. */
static char *key_app(ab_req *r, const char *tok)
{
        const ab_config *c = r->srv->cfg;
        for (size_t i = 0; i < c->n_keys; i++)
                if (req_secret_eq(tok, c->keys[i].key))
                        return xstrdup(c->keys[i].app_id);
        uint8_t md[AB_SHA256_LEN];
        char hex[2 * AB_SHA256_LEN + 1];
        ab_sha256(tok, strlen(tok), md);
        ab_hex_encode(md, sizeof(md), hex);
        ab_api_key k = {0};
        ab_err *e = NULL;
        char *app = NULL;
        if (ab_store_key_find(r->srv->store, hex, &k, &e) == 0)
                app = steal_pointer(&k.app_id);
        ab_api_key_clear(&k);
        ab_err_free(&e);
        return app;
}

/* Returns true when the request may go on, with r->scope set to the
 * caller's app (above); else an answer is queued in *ret. Callers: the
 * SANDBOX_TOKEN, the admin token, an API key; without any token configured,
 * loopback clients (as the rest of the API). */
static bool sandbox_auth(ab_req *r, enum MHD_Result *ret)
{
        const char *sb =
            r->srv->sandbox_token && *r->srv->sandbox_token ? r->srv->sandbox_token : NULL;
        const char *admin = r->srv->cfg->token && *r->srv->cfg->token ? r->srv->cfg->token : NULL;
        const char *h = req_header(r, "Authorization");
        if (!sb && !admin && !h) {
                if (req_peer_loopback(r)) {
                        free(r->scope_buf);
                        r->scope = r->scope_buf = xstrdup(APP_ADMIN);
                        return true;
                }
                *ret = sandbox_answer(r, 403,
                                      "This server has no token and answers loopback "
                                      "clients only");
                return false;
        }
        if (!h) {
                *ret = sandbox_answer(r, 401, "Unauthorized: missing Authorization header");
                return false;
        }
        if (strncasecmp(h, "Bearer ", 7) != 0 || !h[7]) {
                *ret = sandbox_answer(r, 400,
                                      "Invalid Authorization header: expected "
                                      "\"Bearer <token>\"");
                return false;
        }
        const char *tok = h + 7;
        char *app = sb && req_secret_eq(tok, sb)         ? xstrdup(APP_SANDBOX_TOKEN)
                    : admin && req_secret_eq(tok, admin) ? xstrdup(APP_ADMIN)
                                                         : key_app(r, tok);
        if (!app && !sb && !admin && req_peer_loopback(r))
                app = xstrdup(APP_ADMIN); /* no token at all: a loopback client, as above */
        if (!app) {
                *ret = sandbox_answer(r, 401, "Unauthorized: invalid token");
                return false;
        }
        free(r->scope_buf);
        r->scope = r->scope_buf = app;
        return true;
}

/* One limit of the body's "limits": absent or null = 0 (the default). */
static int limit_of(json_t *limits, const char *name, int64_t *out, ab_err **err)
{
        json_t *v = json_object_get(limits, name);
        *out = 0;
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_number(v) || json_number_value(v) <= 0)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "Invalid request: limits.%s must be a positive number", name);
        double d = json_number_value(v);
        *out = d >= 9.2e18 ? INT64_MAX : d < 1 ? 1 : (int64_t)d;
        return 0;
}

/* The body of POST /sandbox/js|python: {code, variables?, limits?{timeoutMs,
 * memoryMB, diskMB}}; strings and objects stay borrowed from body. */
int run_req_parse(json_t *body, ab_run_req *q, ab_err **err)
{
        if (!json_is_object(body))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "Invalid request: the body must be a JSON object");
        json_t *code = json_object_get(body, "code");
        json_t *vars = json_object_get(body, "variables");
        json_t *limits = json_object_get(body, "limits");
        if (code && !json_is_string(code))
                return ab_err_set(err, AB_E_INVALID, 0, "Invalid request: code must be a string");
        if (vars && !json_is_null(vars) && !json_is_object(vars))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "Invalid request: variables must be an object");
        if (limits && !json_is_null(limits) && !json_is_object(limits))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "Invalid request: limits must be an object");
        q->code = json_string_value(code);
        q->variables = json_is_object(vars) ? vars : NULL;
        if (limit_of(limits, "timeoutMs", &q->timeout_ms, err) < 0 ||
            limit_of(limits, "memoryMB", &q->memory_mb, err) < 0 ||
            limit_of(limits, "diskMB", &q->disk_mb, err) < 0)
                return -1;
        return 0;
}

enum MHD_Result runner_authenticate(ab_req *r, bool *ok)
{
        enum MHD_Result ret = MHD_YES;
        *ok = sandbox_auth(r, &ret);
        return ret;
}

/* The route's auth (runner_authenticate) ran from the head already. */
static enum MHD_Result run(ab_req *r, const char *lang)
{
        if (!r->srv->runners)
                return sandbox_answer(r, 503, "The code runner is not enabled on this server");
        json_error_t je;
        json_t *body = r->body_len ? json_loadb(r->body, r->body_len, 0, &je) : json_object();
        if (!body) {
                char msg[256];
                snprintf(msg, sizeof(msg), "Invalid request: malformed JSON: %s", je.text);
                return sandbox_answer(r, 400, msg);
        }
        ab_run_req q = {.app = r->scope};
        ab_run_res res = {0};
        ab_err *e = NULL;
        int rc = run_req_parse(body, &q, &e);
        if (rc == 0)
                rc = ab_runners_run(r->srv->runners, lang, &q, &res, &e);
        json_decref(body);
        if (rc < 0) {
                unsigned st = e->code == AB_E_INVALID ? 400 : status_of(e->code);
                enum MHD_Result ret = sandbox_answer(r, st, e->msg);
                ab_err_free(&e);
                return ret;
        }
        json_t *out = res.answer ? json_incref(res.answer)
                                 : json_pack("{s:b,s:s}", "success", 0, "message", res.message);
        ab_run_res_clear(&res);
        return resp_json(r, 200, out);
}

enum MHD_Result route_sandbox_js(ab_req *r, const char *id)
{
        return run(r, "js");
}

enum MHD_Result route_sandbox_python(ab_req *r, const char *id)
{
        return run(r, "python");
}

enum MHD_Result route_sandbox_modules(ab_req *r, const char *id)
{
        return resp_json(r, 200,
                         json_pack("{s:b,s:o}", "success", 1, "data", ab_runners_modules()));
}
