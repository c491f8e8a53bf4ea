/* The HTTP front: libmicrohttpd daemon, request life cycle, routing, auth,
 * and the response helpers the route modules use. */
#include "api/server.h"
#include "api/conn.h"
#include "api/front_e2b.h"
#include "api/front_osb.h"
#include "api/reqcheck.h"
#include "api/workers.h"
#include "api/ws.h"
#include "base/jsonnum.h"
#include "base/log.h"
#include "base/addrcheck.h"
#include "base/codec.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* Keep-alive connections idle this long are closed (streams send keepalives). */
#define IDLE_CONN_TIMEOUT_S 120
/* Idle handler threads kept for the next requests. */
#define WORKERS_KEEP_IDLE 8

/* Who may call a route, decided from the request's head before any body is
 * read: anyone; a user (admin token or API key); the admin; the holder of
 * a box's E2B access token (envd_authenticate); the code runner's token
 * (runner_authenticate). */
typedef enum { AUTH_ANY, AUTH_USER, AUTH_ADMIN, AUTH_ENVD, AUTH_RUNNER } auth_level;

typedef struct route {
        const char *method;
        const char *pattern; /* segments separated by '/', "*" = the id */
        auth_level auth;
        body_kind body;
        enum MHD_Result (*fn)(ab_req *r, const char *id);
} route;

static const route routes[] = {
    {"GET", "health", AUTH_ANY, BODY_NONE, route_health},
    {"POST", "sandbox/js", AUTH_RUNNER, BODY_JSON, route_sandbox_js},
    {"POST", "sandbox/python", AUTH_RUNNER, BODY_JSON, route_sandbox_python},
    {"GET", "sandbox/modules", AUTH_RUNNER, BODY_NONE, route_sandbox_modules},
    {"GET", "metrics", AUTH_USER, BODY_NONE, route_metrics},
    {"POST", "v1/sandboxes", AUTH_USER, BODY_JSON, route_box_create},
    {"GET", "v1/sandboxes", AUTH_USER, BODY_NONE, route_box_list},
    {"DELETE", "v1/sandboxes", AUTH_USER, BODY_NONE, route_box_delete_where},
    {"GET", "v1/sandboxes/*", AUTH_USER, BODY_NONE, route_box_get},
    {"DELETE", "v1/sandboxes/*", AUTH_USER, BODY_NONE, route_box_delete},
    {"POST", "v1/sandboxes/*/stop", AUTH_USER, BODY_JSON, route_box_stop},
    {"POST", "v1/sandboxes/*/start", AUTH_USER, BODY_JSON, route_box_start},
    {"POST", "v1/sandboxes/*/pause", AUTH_USER, BODY_JSON, route_box_pause},
    {"POST", "v1/sandboxes/*/resume", AUTH_USER, BODY_JSON, route_box_resume},
    {"POST", "v1/sandboxes/*/fork", AUTH_USER, BODY_JSON, route_box_fork},
    {"POST", "v1/sandboxes/*/snapshot", AUTH_USER, BODY_JSON, route_box_snapshot},
    {"GET", "v1/sandboxes/*/network", AUTH_USER, BODY_NONE, route_box_network_get},
    {"PUT", "v1/sandboxes/*/network", AUTH_USER, BODY_JSON, route_box_network_put},
    {"POST", "v1/sandboxes/*/exec", AUTH_USER, BODY_JSON, route_box_exec},
    {"GET", "v1/sandboxes/*/files", AUTH_USER, BODY_NONE, route_files_get},
    {"PUT", "v1/sandboxes/*/files", AUTH_USER, BODY_UPLOAD, route_files_put},
    {"DELETE", "v1/sandboxes/*/files", AUTH_USER, BODY_NONE, route_files_delete},
    {"GET", "v1/skills", AUTH_USER, BODY_NONE, route_skills_list},
    {"GET", "v1/skills/prompt", AUTH_USER, BODY_NONE, route_skills_prompt},
    {"GET", "v1/skills/*", AUTH_USER, BODY_NONE, route_skill_get},
    {"PUT", "v1/skills/*", AUTH_ADMIN, BODY_UPLOAD, route_skill_put},
    {"DELETE", "v1/skills/*", AUTH_ADMIN, BODY_NONE, route_skill_delete},
    {"POST", "v1/skills/*/validate", AUTH_USER, BODY_UPLOAD, route_skill_validate},
    {"POST", "v1/exec", AUTH_USER, BODY_JSON, route_exec},
    {"GET", "v1/tools", AUTH_USER, BODY_NONE, route_tools_list},
    {"GET", "v1/tools/prompt", AUTH_USER, BODY_NONE, route_tools_prompt},
    {"POST", "v1/tools/*", AUTH_USER, BODY_JSON, route_tool},
    {"POST", "v1/sandboxes/*/tools/*", AUTH_USER, BODY_JSON, route_box_tool},
    {"POST", "mcp", AUTH_USER, BODY_JSON, route_mcp_post},
    {"DELETE", "mcp", AUTH_USER, BODY_NONE, route_mcp_delete},
    {"GET", "v1/events", AUTH_USER, BODY_NONE, route_events},
    {"GET", "v1/keys", AUTH_ADMIN, BODY_NONE, route_keys_list},
    {"POST", "v1/keys", AUTH_ADMIN, BODY_JSON, route_keys_create},
    {"DELETE", "v1/keys/*", AUTH_ADMIN, BODY_NONE, route_keys_delete},
    {"POST", "v1/sandboxes/*/terminals", AUTH_USER, BODY_JSON, route_term_create},
    {"GET", "v1/sandboxes/*/terminals", AUTH_USER, BODY_NONE, route_term_list},
    {"GET", "v1/sandboxes/*/terminals/*", AUTH_USER, BODY_NONE, route_term_get},
    {"DELETE", "v1/sandboxes/*/terminals/*", AUTH_USER, BODY_NONE, route_term_delete},
    {"POST", "v1/sandboxes/*/terminals/*/resize", AUTH_USER, BODY_JSON, route_term_resize},
    {"GET", "v1/sandboxes/*/execs", AUTH_USER, BODY_NONE, route_box_execs},
    /* the web console (routes_console.c): static files, no auth (the token
     * is given to the page's scripts, never to these) */
    {"GET", "", AUTH_ANY, BODY_NONE, route_console},
    {"GET", "console/*", AUTH_ANY, BODY_NONE, route_console},
    {"GET", "v1/keys/*", AUTH_ADMIN, BODY_NONE, route_key_get},
    {"GET", "v1/images", AUTH_USER, BODY_NONE, route_images_list},
    {"POST", "v1/images", AUTH_USER, BODY_JSON, route_images_pull},
    {"POST", "v1/images/import", AUTH_ADMIN, BODY_UPLOAD, route_images_import},
    {"GET", "v1/images/**", AUTH_USER, BODY_NONE, route_image_get},
    {"PUT", "v1/sandboxes/*/ports/*/public", AUTH_USER, BODY_JSON, route_port_public_put},
    {"DELETE", "v1/sandboxes/*/ports/*/public", AUTH_USER, BODY_NONE, route_port_public_delete},
    {"DELETE", "v1/images/**", AUTH_ADMIN, BODY_NONE, route_image_delete},
    {"GET", "v1/volumes", AUTH_USER, BODY_NONE, route_volumes_list},
    {"POST", "v1/volumes", AUTH_USER, BODY_JSON, route_volume_create},
    {"GET", "v1/volumes/*", AUTH_USER, BODY_NONE, route_volume_get},
    {"DELETE", "v1/volumes/*", AUTH_USER, BODY_NONE, route_volume_delete},
    /* the E2B front (front_e2b.c, front_envd.c; docs/compat-e2b.md) */
    {"POST", "e2b/v2/sandboxes", AUTH_USER, BODY_JSON, e2b_create},
    {"POST", "e2b/sandboxes", AUTH_USER, BODY_JSON, e2b_create},
    {"GET", "e2b/v2/sandboxes", AUTH_USER, BODY_NONE, e2b_list},
    {"GET", "e2b/sandboxes", AUTH_USER, BODY_NONE, e2b_list},
    {"GET", "e2b/sandboxes/*", AUTH_USER, BODY_NONE, e2b_get},
    {"DELETE", "e2b/sandboxes/*", AUTH_USER, BODY_NONE, e2b_kill},
    {"POST", "e2b/sandboxes/*/timeout", AUTH_USER, BODY_JSON, e2b_timeout},
    {"POST", "e2b/sandboxes/*/pause", AUTH_USER, BODY_JSON, e2b_pause},
    {"POST", "e2b/sandboxes/*/resume", AUTH_USER, BODY_JSON, e2b_connect},
    {"POST", "e2b/v2/sandboxes/*/connect", AUTH_USER, BODY_JSON, e2b_connect},
    {"GET", "e2b/sandboxes/*/metrics", AUTH_USER, BODY_NONE, e2b_metrics},
    {"POST", "e2b/sandboxes/*/fork", AUTH_USER, BODY_JSON, e2b_fork},
    {"POST", "e2b/sandboxes/*/snapshots", AUTH_USER, BODY_JSON, e2b_snapshot},
    {"PUT", "e2b/sandboxes/*/network", AUTH_USER, BODY_JSON, e2b_network},
    {"GET", "e2b/snapshots", AUTH_USER, BODY_NONE, e2b_unsupported},
    {"DELETE", "e2b/templates/*", AUTH_USER, BODY_NONE, e2b_unsupported},
    {"GET", "e2b/envd/health", AUTH_ANY, BODY_NONE, envd_health},
    {"GET", "e2b/envd/files", AUTH_ENVD, BODY_NONE, envd_files_get},
    {"POST", "e2b/envd/files", AUTH_ENVD, BODY_UPLOAD, envd_files_post},
    {"POST", "e2b/envd/process.Process/*", AUTH_ENVD, BODY_JSON, envd_process_rpc},
    {"POST", "e2b/envd/filesystem.Filesystem/*", AUTH_ENVD, BODY_JSON, envd_filesystem_rpc},
    /* the OpenSandbox front (front_osb.c, front_execd.c) */
    {"POST", "opensandbox/execd/*/files/upload", AUTH_USER, BODY_UPLOAD, route_osb_upload},
    {"GET", "opensandbox/**", AUTH_USER, BODY_NONE, route_osb},
    {"POST", "opensandbox/**", AUTH_USER, BODY_JSON, route_osb},
    {"PATCH", "opensandbox/**", AUTH_USER, BODY_JSON, route_osb},
    {"DELETE", "opensandbox/egress/*/policy", AUTH_USER, BODY_JSON, route_osb},
    {"DELETE", "opensandbox/**", AUTH_USER, BODY_NONE, route_osb},
};

/* ---- responses -------------------------------------------------------- */

unsigned status_of(ab_code c)
{
        switch (c) {
        case AB_E_INVALID:
                return 400;
        case AB_E_NOT_FOUND:
                return 404;
        case AB_E_CONFLICT:
                return 409;
        case AB_E_UNAVAILABLE:
                return 503;
        case AB_E_LIMIT:
                return 413;
        case AB_E_PERMISSION:
                return 403;
        case AB_E_TIMEOUT:
                return 504;
        case AB_E_UNSUPPORTED:
                return 501;
        case AB_E_QUOTA:
                return 429;
        case AB_E_STORAGE:
                return 507;
        default:
                return 500;
        }
}

/* Headers every answer has, unless its route set them (the console's assets
 * set their own caching). */
static void common_headers(struct MHD_Response *resp)
{
        if (!MHD_get_response_header(resp, "Cache-Control"))
                MHD_add_response_header(resp, "Cache-Control", "no-store");
        if (!MHD_get_response_header(resp, "X-Content-Type-Options"))
                MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
}

/* On a worker thread the response is kept in r and queued by MHD's thread
 * once the connection is resumed (MHD_queue_response belongs to the access
 * handler). */
static enum MHD_Result queue(ab_req *r, unsigned status, struct MHD_Response *resp)
{
        common_headers(resp);
        if (r->on_worker && r->resp) { /* one answer per request */
                MHD_destroy_response(resp);
                return MHD_NO;
        }
        r->status = (int)status;
        ab_metrics_http(r->srv->metrics, (int)status);
        if (r->on_worker) {
                r->resp = resp;
                r->resp_status = status;
                return MHD_YES;
        }
        enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
        MHD_destroy_response(resp);
        return ret;
}

enum MHD_Result resp_send(ab_req *r, unsigned status, struct MHD_Response *resp)
{
        return queue(r, status, resp);
}

enum MHD_Result resp_json(ab_req *r, unsigned status, json_t *j)
{
        char *txt = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(12));
        json_decref(j);
        if (!txt)
                abort();
        size_t len = strlen(txt);
        txt = xrealloc(txt, len + 2);
        txt[len++] = '\n';
        txt[len] = 0;
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(len, txt, MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(resp, "Content-Type", "application/json");
        return queue(r, status, resp);
}

static enum MHD_Result resp_error_v(ab_req *r, unsigned status, const char *code, const char *msg)
{
        if (status >= 400)
                ab_metrics_error(r->srv->metrics, code);
        json_t *m = json_string(msg);
        if (!m)
                m = json_bytes(msg, strlen(msg));
        json_t *j = json_pack("{s:{s:s,s:o}}", "error", "code", code, "message", m);
        return resp_json(r, status, j);
}

enum MHD_Result resp_error(ab_req *r, unsigned status, const char *code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *msg = NULL;
        if (vasprintf(&msg, fmt, ap) < 0)
                abort();
        va_end(ap);
        enum MHD_Result ret = resp_error_v(r, status, code, msg);
        free(msg);
        return ret;
}

enum MHD_Result resp_err(ab_req *r, ab_err *e)
{
        unsigned st = status_of(e->code);
        const char *code = ab_code_name(e->code);
        if (st >= 500 && st != 503 && st != 507)
                ab_log(AB_LOG_ERROR, "request failed", "method", r->method, "path", r->path,
                       "error", e->msg, NULL);
        enum MHD_Result ret = resp_error_v(r, st, code, e->msg);
        ab_err_free(&e);
        return ret;
}

typedef struct stream {
        int fd;
        ab_park *park;
        ab_stream_slot *slot; /* a long-lived stream's slot, or NULL */
} stream;

/* Never blocks MHD's thread: with nothing in the pipe the connection parks
 * until the producer writes, closes, or the client hangs up. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        stream *s = cls;
        for (;;) {
                ssize_t n = read(s->fd, buf, max);
                if (n > 0)
                        return n;
                if (n == 0)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                switch (ab_park_suspend(s->park, s->fd, false, 0, NULL, NULL)) {
                case AB_PARK_SUSPENDED:
                        return 0;
                case AB_PARK_RETRY:
                        continue;
                default:
                        return MHD_CONTENT_READER_END_WITH_ERROR; /* client gone, or stopping */
                }
        }
}

static void stream_free(void *cls)
{
        stream *s = cls;
        close(s->fd);
        ab_park_free(s->park);
        ab_stream_slot_release(s->slot);
        free(s);
}

enum MHD_Result resp_stream_counted(ab_req *r, unsigned status, const char *content_type, int fd,
                                    const char *const *headers, ab_stream_slot *slot)
{
        stream *s = xzalloc(sizeof(*s));
        s->fd = fd;
        s->slot = slot;
        s->park = ab_park_new(r->srv->conns, r->conn);
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
                fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024,
                                                                      stream_read, s, stream_free);
        MHD_add_response_header(resp, "Content-Type", content_type);
        for (const char *const *h = headers; h && h[0]; h += 2)
                MHD_add_response_header(resp, h[0], h[1]);
        return queue(r, status, resp);
}

enum MHD_Result resp_stream(ab_req *r, unsigned status, const char *content_type, int fd,
                            const char *const *headers)
{
        return resp_stream_counted(r, status, content_type, fd, headers, NULL);
}

ab_stream_slot *req_stream_slot(ab_req *r, enum MHD_Result *ret)
{
        ab_stream_slot *slot = NULL;
        switch (ab_stream_slot_take(r->srv->conns, r->conn, &slot)) {
        case AB_SLOT_OK:
                return slot;
        case AB_SLOT_ADDRESS_FULL:
                *ret = resp_error(r, 429, "too_many_requests",
                                  "this address has %lld streams open (events, exec streams, "
                                  "terminals), the most max_streams_per_address allows: close "
                                  "one first",
                                  (long long)r->srv->cfg->max_streams_per_address);
                return NULL;
        default:
                *ret = resp_error(r, 503, "unavailable",
                                  "the server has %lld streams open (events, exec streams, "
                                  "terminals), the most max_streams allows: try again later",
                                  (long long)r->srv->cfg->max_streams);
                return NULL;
        }
}

int spawn_detached(void *(*fn)(void *), void *arg)
{
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        int rc = pthread_create(&t, &a, fn, arg);
        pthread_attr_destroy(&a);
        return -rc;
}

/* ---- request helpers -------------------------------------------------- */

const char *req_query(ab_req *r, const char *key)
{
        return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *req_header(ab_req *r, const char *key)
{
        return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, key);
}

int req_json(ab_req *r, json_t **out, ab_err **err)
{
        *out = NULL;
        if (!r->body || r->body_len == 0) {
                *out = json_object();
                return 0;
        }
        json_error_t je;
        json_t *j = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &je);
        if (!j)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "invalid JSON body: %s (line %d, column %d)", je.text, je.line,
                                  je.column);
        if (!json_is_object(j)) {
                json_decref(j);
                return ab_err_set(err, AB_E_INVALID, 0, "the body must be a JSON object");
        }
        *out = j;
        return 0;
}

int field_str(json_t *o, const char *name, const char **out, ab_err **err)
{
        json_t *v = json_object_get(o, name);
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_string(v))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be a string", name);
        if (strlen(json_string_value(v)) != json_string_length(v))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must not contain NUL characters",
                                  name);
        *out = json_string_value(v);
        return 0;
}

int field_int(json_t *o, const char *name, int64_t *out, bool *present, ab_err **err)
{
        json_t *v = json_object_get(o, name);
        if (present)
                *present = false;
        if (!v || json_is_null(v))
                return 0;
        if (!ab_json_whole(v, out))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be an integer", name);
        if (present)
                *present = true;
        return 0;
}

int field_num(json_t *o, const char *name, double *out, bool *present, ab_err **err)
{
        json_t *v = json_object_get(o, name);
        if (present)
                *present = false;
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_number(v))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be a number", name);
        *out = json_number_value(v);
        if (present)
                *present = true;
        return 0;
}

int field_obj(json_t *o, const char *name, json_t **out, ab_err **err)
{
        json_t *v = json_object_get(o, name);
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_object(v))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be an object", name);
        *out = v;
        return 0;
}

int fields_known(json_t *o, const char *const *known, const char *where, ab_err **err)
{
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v)
        {
                bool ok = false;
                for (const char *const *p = known; *p && !ok; p++)
                        ok = !strcmp(*p, k);
                if (!ok)
                        return ab_err_set(err, AB_E_INVALID, 0, "%s%sunknown field \"%s\"",
                                          where ? where : "", where ? ": " : "", k);
        }
        return 0;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
        unsigned char c = s[0];
        if (c < 0x80)
                return 1;
        size_t len;
        uint32_t cp;
        if ((c & 0xe0) == 0xc0) {
                len = 2;
                cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
                len = 3;
                cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
                len = 4;
                cp = c & 0x07;
        } else {
                return 0;
        }
        if (len > n)
                return 0;
        for (size_t i = 1; i < len; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (s[i] & 0x3f);
        }
        static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return len;
}

json_t *json_bytes(const char *buf, size_t len)
{
        if (!buf || !len)
                return json_string("");
        const unsigned char *s = (const unsigned char *)buf;
        size_t i = 0;
        while (i < len) {
                size_t l = utf8_len(s + i, len - i);
                if (!l)
                        break;
                i += l;
        }
        if (i == len)
                return json_stringn(buf, len);
        char *out = xmalloc(xadd(xmul(len, 3), 1));
        size_t o = 0;
        for (i = 0; i < len;) {
                size_t l = utf8_len(s + i, len - i);
                if (l) {
                        memcpy(out + o, s + i, l);
                        o += l;
                        i += l;
                } else {
                        memcpy(out + o, "\xef\xbf\xbd", 3);
                        o += 3;
                        i++;
                }
        }
        json_t *j = json_stringn(out, o);
        free(out);
        return j;
}

static json_t *str_or_null(const char *s)
{
        return s ? json_bytes(s, strlen(s)) : json_null();
}

json_t *box_json(const ab_server *s, const ab_box_rec *r)
{
        int64_t idle = r->idle_stop_s ? r->idle_stop_s : s->cfg->idle_stop_s;
        int64_t pause = r->idle_pause_s ? r->idle_pause_s : s->cfg->idle_pause_s;
        json_t *env = json_object_get(r->spec, "env");
        json_t *net = json_object_get(r->spec, "network");
        json_t *j = json_pack(
            "{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:I,s:I,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o}", "id",
            str_or_null(r->id), "status", json_string(ab_box_status_name(r->status)), "mode",
            json_string(ab_box_mode_name(r->mode)), "provider",
            str_or_null(json_string_value(json_object_get(r->spec, "backend")) ?: r->provider),
            "backend_id", str_or_null(r->backend_id), "app_id", str_or_null(r->app_id), "user_id",
            str_or_null(r->user_id), "chat_id", str_or_null(r->chat_id), "thread_id",
            str_or_null(r->thread_id), "created_at", (json_int_t)r->created_at, "last_active_at",
            (json_int_t)r->last_active_at, "idle_stop_s", (json_int_t)(idle > 0 ? idle : -1),
            "idle_pause_s", (json_int_t)(pause > 0 ? pause : -1), "ttl_s", (json_int_t)r->ttl_s,
            "limits", r->has_limits ? ab_limits_json(&r->limits) : json_null(), "network",
            net ? json_incref(net) : json_pack("{s:s,s:[],s:[]}", "mode", "none", "allow", "deny"),
            "env", env ? json_incref(env) : json_object(), "metadata",
            r->metadata ? json_incref(r->metadata) : json_object(), "error", str_or_null(r->error));
        json_t *pub = json_object_get(r->spec, "public_ports"); /* docs/api.md, "Ports" */
        json_object_set_new(j, "public_ports",
                            json_is_array(pub) ? json_incref(pub) : json_array());
        /* the image a box was made from: its reference and id (null: the host base) */
        json_t *img = json_object_get(r->spec, "image");
        json_object_set_new(j, "image",
                            json_is_object(img)
                                ? json_pack("{s:O?,s:O?}", "ref", json_object_get(img, "ref"), "id",
                                            json_object_get(img, "id"))
                                : json_null());
        /* what the box mounts at every start (empty lists when nothing) */
        static const char *const lists[] = {"volumes", "mounts", "readonly_paths", "blocked_paths"};
        for (size_t i = 0; i < AB_ARRAY_LEN(lists); i++) {
                json_t *l = json_object_get(r->spec, lists[i]);
                json_object_set_new(j, lists[i], json_is_array(l) ? json_incref(l) : json_array());
        }
        return j;
}

/* ---- auth ------------------------------------------------------------- */

static void sha256_hex(const char *s, char out[65])
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (!EVP_Digest(s, strlen(s), md, &len, EVP_sha256(), NULL))
                abort();
        ab_hex_encode(md, 32, out);
}

static bool same_secret(const char *a, const char *b)
{
        char ha[65], hb[65];
        sha256_hex(a, ha);
        sha256_hex(b, hb);
        return CRYPTO_memcmp(ha, hb, 64) == 0;
}

static bool peer_is_loopback(ab_req *r)
{
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (!ci || !ci->client_addr)
                return false;
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
                return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        }
        if (sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
                if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
                        return true;
                return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
        }
        return sa->sa_family == AF_UNIX;
}

bool req_secret_eq(const char *a, const char *b)
{
        return same_secret(a, b);
}

bool req_peer_loopback(ab_req *r)
{
        return peer_is_loopback(r);
}

bool req_client_gone(ab_req *r)
{
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci)
                return false;
        struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* The request's credential: its Authorization header, or E2B's X-API-Key
 * taken as a bearer token (*buf holds it then). */
static const char *auth_header(ab_req *r, char **buf)
{
        const char *h = req_header(r, "Authorization");
        const char *k = h ? NULL : req_header(r, "X-API-Key");
        if (k && *k)
                return *buf = xasprintf("Bearer %s", k);
        return h;
}

/* True when authenticating r needs the store (an API key made with POST
 * /v1/keys): then it runs on a worker, not on MHD's thread. */
static bool auth_may_block(ab_req *r, auth_level need)
{
        const ab_config *c = r->srv->cfg;
        if (need == AUTH_ANY || need == AUTH_RUNNER)
                return false;
        if (need == AUTH_ENVD) /* the box's record */
                return true;
        _cleanup_free_ char *xkey = NULL;
        const char *h = auth_header(r, &xkey);
        _cleanup_free_ char *osb = h ? NULL : osb_auth_header(r); /* the OpenSandbox SDK's */
        if (osb)
                h = osb;
        if (!h || strncasecmp(h, "Bearer ", 7) != 0 || !h[7])
                return false;
        const char *tok = h + 7;
        while (*tok == ' ')
                tok++;
        if (c->token && *c->token && same_secret(tok, c->token))
                return false;
        for (size_t i = 0; i < c->n_keys; i++)
                if (same_secret(tok, c->keys[i].key))
                        return false;
        return true;
}

/* Sets r->scope from the Authorization header; answers 401/403 itself. */
static enum MHD_Result authenticate(ab_req *r, auth_level need, bool *ok)
{
        *ok = false;
        const ab_config *c = r->srv->cfg;
        bool has_token = c->token && *c->token;
        if (need == AUTH_ANY) {
                *ok = true;
                return MHD_YES;
        }
        if (need == AUTH_ENVD)
                return envd_authenticate(r, ok);
        if (need == AUTH_RUNNER)
                return runner_authenticate(r, ok);
        _cleanup_free_ char *xkey = NULL;
        const char *h = auth_header(r, &xkey);
        /* A browser's WebSocket offers its token as a subprotocol (api/ws.c). */
        _cleanup_free_ char *ws_auth =
            h ? NULL
              : ws_auth_from_protocols(req_header(r, "Upgrade"),
                                       req_header(r, "Sec-WebSocket-Protocol"));
        if (ws_auth)
                h = ws_auth;
        _cleanup_free_ char *osb = h ? NULL : osb_auth_header(r); /* the OpenSandbox SDK's */
        if (osb)
                h = osb;
        if (!h) {
                if (!has_token) {
                        if (!peer_is_loopback(r))
                                return resp_error(r, 403, "permission_denied",
                                                  "this server has no token and answers "
                                                  "loopback clients only");
                        *ok = true;
                        return MHD_YES;
                }
                return resp_error(r, 401, "unauthorized",
                                  "missing \"Authorization: Bearer <token>\" header");
        }
        if (strncasecmp(h, "Bearer ", 7) != 0 || !h[7])
                return resp_error(r, 401, "unauthorized",
                                  "malformed Authorization header: expected \"Bearer <token>\"");
        const char *tok = h + 7;
        while (*tok == ' ')
                tok++;
        if (has_token && same_secret(tok, c->token)) {
                *ok = true;
                return MHD_YES;
        }
        for (size_t i = 0; i < c->n_keys; i++) {
                if (same_secret(tok, c->keys[i].key)) {
                        r->scope_buf = xstrdup(c->keys[i].app_id);
                        break;
                }
        }
        if (!r->scope_buf) {
                char hex[65];
                sha256_hex(tok, hex);
                ab_api_key k = {0};
                ab_err *e = NULL;
                if (ab_store_key_find(r->srv->store, hex, &k, &e) == 0) {
                        r->scope_buf = steal_pointer(&k.app_id);
                        if (k.has_quotas) {
                                r->key_quotas = k.quotas;
                                r->caller.quotas = &r->key_quotas;
                        }
                        r->key_id = steal_pointer(&k.key_id);
                        r->caller.key_id = r->key_id;
                        /* deleting the key ends this request and its stream */
                        ab_conns_bind_key(r->srv->conns, r->conn, r->key_id);
                        ab_api_key_clear(&k);
                } else if (e->code != AB_E_NOT_FOUND) {
                        return resp_err(r, e);
                } else {
                        ab_err_free(&e);
                }
        }
        if (!r->scope_buf) {
                if (!has_token && !peer_is_loopback(r))
                        return resp_error(r, 403, "permission_denied",
                                          "this server answers loopback clients only");
                return resp_error(r, 401, "unauthorized", "invalid token or API key");
        }
        r->scope = r->scope_buf;
        if (need == AUTH_ADMIN)
                return resp_error(r, 403, "permission_denied",
                                  "this route needs the admin token; API keys cannot use it");
        *ok = true;
        return MHD_YES;
}

enum MHD_Result req_authenticate(ab_req *r, bool *ok)
{
        return authenticate(r, AUTH_USER, ok);
}

bool req_is_credential(ab_req *r, const char *tok)
{
        if (!tok || !*tok)
                return false;
        const ab_config *c = r->srv->cfg;
        if (c->token && *c->token && same_secret(tok, c->token))
                return true;
        for (size_t i = 0; i < c->n_keys; i++)
                if (same_secret(tok, c->keys[i].key))
                        return true;
        char hex[65];
        sha256_hex(tok, hex);
        ab_api_key k = {0};
        ab_err *e = NULL;
        if (ab_store_key_find(r->srv->store, hex, &k, &e) == 0) {
                ab_api_key_clear(&k);
                return true;
        }
        /* the store failed: treat the value as a credential (never pass on
         * what may be one) */
        bool unsure = e && e->code != AB_E_NOT_FOUND;
        ab_err_free(&e);
        return unsure;
}

/* ---- before routing: an exact target, one framing, and for a server
 * without a token, no other site's page ----------------------------------- */

typedef struct head_count {
        int cl, te;
} head_count;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *k,
                                     const char *v)
{
        head_count *c = cls;
        (void)kind;
        (void)v;
        if (strcasecmp(k, "Content-Length") == 0)
                c->cl++;
        else if (strcasecmp(k, "Transfer-Encoding") == 0)
                c->te++;
        return MHD_YES;
}

/* Requests that are refused whatever their route (answered; false):
 * control characters in the target (escaped ones too: "%00" decoded ends
 * the path early) and a body framed twice (request smuggling). */
static bool request_exact(ab_req *r, const char *url, enum MHD_Result *ret)
{
        const char *raw = ab_conns_raw_uri(r->conn);
        if (!ab_req_target_clean(raw ? raw : url) || !ab_req_target_clean(url)) {
                *ret = resp_error(r, 400, "invalid_argument",
                                  "the request target holds a control character (a NUL, a line "
                                  "break, ...), escaped or not");
                return false;
        }
        head_count c = {0};
        MHD_get_connection_values(r->conn, MHD_HEADER_KIND, count_framing, &c);
        if ((c.cl && c.te) || c.cl > 1 || c.te > 1) {
                *ret = resp_error(r, 400, "invalid_argument",
                                  "conflicting Content-Length / Transfer-Encoding headers");
                return false;
        }
        return true;
}

static bool host_allowed(ab_req *r, const char *host)
{
        if (ab_req_host_loopback(host))
                return true;
        const ab_config *c = r->srv->cfg;
        for (size_t i = 0; i < c->n_allowed_hosts; i++)
                if (ab_req_host_is(host, c->allowed_hosts[i]))
                        return true;
        return ports_by_host(r); /* PORT-ID.ports_domain */
}

/* A server without a token takes every loopback client for the admin; a
 * web page the user opens is one too (its requests come from the user's
 * browser). So such a server answers only its own origin: a Host of
 * another name (DNS rebinding), another site's Origin or Sec-Fetch-Site
 * (CSRF), and on JSON routes the content types a page may send without
 * asking first, are refused (answered; false). */
static bool request_same_origin(ab_req *r, enum MHD_Result *ret)
{
        const ab_config *c = r->srv->cfg;
        if (c->token && *c->token)
                return true;
        const char *host = req_header(r, "Host");
        if (host && !host_allowed(r, host)) {
                *ret = resp_error(r, 403, "permission_denied",
                                  "Host \"%s\" is not this server's: a server without a token "
                                  "answers loopback names and allowed_hosts only",
                                  host);
                return false;
        }
        const char *origin = req_header(r, "Origin");
        if (origin && (!host || !ab_req_origin_same(origin, host))) {
                *ret = resp_error(r, 403, "permission_denied",
                                  "Origin \"%s\" is another site: a server without a token "
                                  "answers its own pages only",
                                  origin);
                return false;
        }
        const char *site = req_header(r, "Sec-Fetch-Site");
        if (site && (!strcasecmp(site, "cross-site") || !strcasecmp(site, "same-site"))) {
                *ret = resp_error(r, 403, "permission_denied",
                                  "a request from another site (Sec-Fetch-Site: %s): a server "
                                  "without a token answers its own pages only",
                                  site);
                return false;
        }
        return true;
}

/* A JSON route of a server without a token refuses the content types a
 * page may send to another site without asking first (answered; false). */
static bool request_json_type(ab_req *r, enum MHD_Result *ret)
{
        const ab_config *c = r->srv->cfg;
        if ((c->token && *c->token) || !r->route || r->route->body != BODY_JSON)
                return true;
        const char *ct = req_header(r, "Content-Type");
        if (!ab_req_ctype_simple(ct))
                return true;
        *ret = resp_error(r, 415, "unsupported_media_type",
                          "Content-Type \"%s\" on a JSON route: send application/json", ct);
        return false;
}

/* ---- routing ---------------------------------------------------------- */

static void split_path(ab_req *r)
{
        size_t cap = 8;
        r->seg = xcalloc(cap, sizeof(char *));
        r->segbuf = xstrdup(r->path);
        char *save = NULL;
        for (char *t = strtok_r(r->segbuf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
                if (r->n_seg + 1 >= cap)
                        r->seg = xrealloc(r->seg, (cap *= 2) * sizeof(char *));
                r->seg[r->n_seg++] = t;
        }
}

static bool route_matches(const route *rt, ab_req *r, const char **id)
{
        _cleanup_free_ char *pat = xstrdup(rt->pattern);
        char *save = NULL;
        size_t i = 0;
        *id = NULL;
        for (char *t = strtok_r(pat, "/", &save); t; t = strtok_r(NULL, "/", &save), i++) {
                if (i >= r->n_seg)
                        return false;
                if (!strcmp(t, "**")) {
                        /* the rest of the path, slashes and all (an image
                         * reference: "localhost:5000/team/tool:1") */
                        *id = r->path + (r->seg[i] - r->segbuf);
                        return true;
                }
                if (!strcmp(t, "*"))
                        *id = r->seg[i];
                else if (strcmp(t, r->seg[i]))
                        return false;
        }
        return i == r->n_seg;
}

/* Finds the route; answers 404/405 itself when none fits. */
static const route *find_route(ab_req *r, const char **id, enum MHD_Result *ret)
{
        char allow[128] = "";
        for (size_t i = 0; i < AB_ARRAY_LEN(routes); i++) {
                const char *rid;
                if (!route_matches(&routes[i], r, &rid))
                        continue;
                if (!strcmp(routes[i].method, r->method)) {
                        *id = rid;
                        return &routes[i];
                }
                if (strlen(allow) + strlen(routes[i].method) + 3 < sizeof(allow)) {
                        if (*allow)
                                strcat(allow, ", ");
                        strcat(allow, routes[i].method);
                }
        }
        if (*allow) {
                json_t *j = json_pack("{s:{s:s,s:s}}", "error", "code", "method_not_allowed",
                                      "message", "method not allowed here");
                char *txt = json_dumps(j, JSON_COMPACT);
                json_decref(j);
                struct MHD_Response *resp =
                    MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
                MHD_add_response_header(resp, "Content-Type", "application/json");
                MHD_add_response_header(resp, "Allow", allow);
                ab_metrics_error(r->srv->metrics, "method_not_allowed");
                *ret = queue(r, 405, resp);
        } else {
                *ret = resp_error(r, 404, "not_found", "no route %s /%s", r->method, r->path);
        }
        return NULL;
}

/* ---- request life cycle ----------------------------------------------- */

/* The global cap of DATA/tmp: takes n more bytes of the spool for r, or
 * false when that would pass tmp_max (nothing taken then). */
static bool tmp_take(ab_req *r, uint64_t n)
{
        _Atomic uint64_t *used = &r->srv->tmp_used;
        uint64_t cur = atomic_load(used), max = r->srv->cfg->tmp_max;
        do {
                if (n > max || cur > max - n)
                        return false;
        } while (!atomic_compare_exchange_weak(used, &cur, cur + n));
        r->tmp_held += n;
        return true;
}

static void req_free(ab_req *r)
{
        if (r->tmp_held)
                atomic_fetch_sub(&r->srv->tmp_used, r->tmp_held);
        ports_free(r->proxy);
        if (r->upload_fd >= 0)
                close(r->upload_fd);
        free(r->scope_buf);
        free(r->key_id);
        free(r->front_box);
        free(r->body);
        free(r->seg);
        free(r->segbuf);
        free(r->path);
        free(r);
}

static int open_upload(ab_req *r)
{
        int fd = open(r->srv->tmp_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        r->upload_fd = fd;
        return 0;
}

/* Routes r (cheap, on MHD's thread): answers 404/405 itself (*done). */
static enum MHD_Result route_request(ab_req *r, bool *done)
{
        *done = false;
        split_path(r);
        if (ports_match(r)) { /* a box's port: any method, the body passed on */
                static const route port_route = {"*", "", AUTH_USER, BODY_PROXY, NULL};
                r->route = &port_route;
                return MHD_YES;
        }
        const char *id;
        enum MHD_Result ret = MHD_YES;
        const route *rt = find_route(r, &id, &ret);
        if (!rt)
                *done = true;
        r->route = rt;
        return ret;
}

/* The box an app's upload goes into (a route on /v1/sandboxes/{id}/ or
 * /opensandbox/execd/{id}/), or NULL: that box must be the app's before its
 * body is spooled to disk. */
static const char *upload_box(ab_req *r)
{
        const route *rt = r->route;
        const char *id = NULL;
        if (rt->body != BODY_UPLOAD || !r->scope)
                return NULL;
        if (strncmp(rt->pattern, "v1/sandboxes/*/", 15) &&
            strncmp(rt->pattern, "opensandbox/execd/*/", 20))
                return NULL;
        return route_matches(rt, r, &id) ? id : NULL;
}

/* 503 for an upload the spool's global cap (tmp_max) cannot take now. */
static enum MHD_Result tmp_full_answer(ab_req *r)
{
        ab_log(AB_LOG_WARN, "upload refused: the spool is full", NULL);
        return resp_error(r, 503, "unavailable",
                          "the server's upload spool is full (tmp_max, %" PRIu64
                          " bytes over all uploads in progress); try again later",
                          r->srv->cfg->tmp_max);
}

/* The rest of the first call: auth (and for an app's upload into a box,
 * that the box is the app's), the body's size, the upload spool. */
static enum MHD_Result first_call(ab_req *r, bool *done)
{
        *done = false;
        const route *rt = r->route;
        if (rt->body == BODY_PROXY) {
                r->body_kind = BODY_PROXY;
                return ports_open(r, done);
        }
        bool ok;
        enum MHD_Result ret = authenticate(r, rt->auth, &ok);
        if (!ok) {
                *done = true;
                return ret;
        }
        const char *box = upload_box(r);
        if (box) {
                ab_box_rec rec;
                ab_err *e = NULL;
                if (ab_manager_get(r->srv->mgr, box, r->scope, &rec, &e) < 0) {
                        *done = true;
                        return resp_err(r, e);
                }
                ab_box_rec_clear(&rec);
        }
        r->body_kind = rt->body;
        const char *cl = req_header(r, "Content-Length");
        uint64_t len = cl ? strtoull(cl, NULL, 10) : 0;
        uint64_t max = rt->body == BODY_UPLOAD ? r->srv->cfg->max_upload : r->srv->cfg->max_body;
        if (rt->body == BODY_NONE)
                max = r->srv->cfg->max_body;
        if (len > max) {
                *done = true;
                return resp_error(r, 413, "limit_exceeded",
                                  "request body of %" PRIu64
                                  " bytes is larger than the limit of %" PRIu64 " bytes",
                                  len, max);
        }
        if (rt->body == BODY_UPLOAD && len && !tmp_take(r, len)) {
                *done = true;
                return tmp_full_answer(r);
        }
        if (rt->body == BODY_UPLOAD) {
                int e = open_upload(r);
                if (e < 0) {
                        *done = true;
                        return resp_error(r, 500, "internal", "cannot spool the upload: %s",
                                          strerror(-e));
                }
        }
        return MHD_YES;
}

static void take_body(ab_req *r, const char *data, size_t size)
{
        const ab_config *c = r->srv->cfg;
        if (r->body_kind == BODY_UPLOAD) {
                if (r->upload_len + size > c->max_upload) {
                        r->body_too_large = true;
                        return;
                }
                /* a body longer than its Content-Length (or chunked) takes
                 * more of the spool as it comes */
                if (r->upload_len + size > r->tmp_held &&
                    (r->tmp_full || !tmp_take(r, r->upload_len + size - r->tmp_held))) {
                        r->tmp_full = true;
                        return;
                }
                if (!r->upload_failed && ab_write_all(r->upload_fd, data, size) < 0)
                        r->upload_failed = true;
                r->upload_len += size;
                return;
        }
        if (r->body_len + size > c->max_body) {
                r->body_too_large = true;
                return;
        }
        if (r->body_len + size + 1 > r->body_cap) {
                r->body_cap = xadd(r->body_len, size) * 2 + 1;
                r->body = xrealloc(r->body, r->body_cap);
        }
        memcpy(r->body + r->body_len, data, size);
        r->body_len += size;
        r->body[r->body_len] = 0;
}

/* Where a request is in its life (see on_request). */
enum { PH_NEW, PH_AUTH, PH_BODY, PH_RUN, PH_DONE };

static void worker_first_call(void *arg)
{
        ab_req *r = arg;
        bool done;
        r->worker_ret = first_call(r, &done);
        if (done && !r->resp)
                r->worker_ret = MHD_NO;
        r->on_worker = false;
        MHD_resume_connection(r->conn); /* r belongs to MHD's thread again */
}

static void worker_handler(void *arg)
{
        ab_req *r = arg;
        const char *id = NULL;
        route_matches(r->route, r, &id);
        r->worker_ret = route_call(r, r->route->fn, id); /* the caller's quotas */
        r->on_worker = false;
        MHD_resume_connection(r->conn);
}

/* Runs fn(r) on a worker while the connection is suspended; answers 503 when
 * max_requests are in flight already. */
static enum MHD_Result dispatch(ab_req *r, int phase, void (*fn)(void *))
{
        ab_server *s = r->srv;
        if (!ab_workers_reserve(s->workers)) {
                ab_conns_count_busy(s->conns);
                r->phase = PH_DONE;
                return resp_error(r, 503, "unavailable",
                                  "the server has %lld requests in flight, the most "
                                  "max_requests allows: try again later",
                                  (long long)s->cfg->max_requests);
        }
        r->phase = phase;
        r->on_worker = true;
        MHD_suspend_connection(r->conn);
        ab_workers_run(s->workers, fn, r);
        return MHD_YES;
}

/* Back from a worker: queues what it answered. */
static enum MHD_Result take_worker_answer(ab_req *r)
{
        if (!r->resp)
                return r->worker_ret;
        struct MHD_Response *resp = steal_pointer(&r->resp);
        enum MHD_Result ret = MHD_queue_response(r->conn, r->resp_status, resp);
        MHD_destroy_response(resp);
        r->phase = PH_DONE;
        return r->worker_ret == MHD_NO ? MHD_NO : ret;
}

/* The access handler, always on MHD's polling thread, which must never
 * block: first call (head complete) -> route; auth on a worker when it needs
 * the store -> body -> final call: the handler on a worker -> its answer. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
        ab_server *s = cls;
        ab_req *r = *con_cls;
        if (!r) {
                ab_conns_head_done(s->conns, conn);
                r = xzalloc(sizeof(*r));
                r->srv = s;
                r->conn = conn;
                r->method = method;
                r->path = xstrdup(url[0] == '/' ? url + 1 : url);
                r->upload_fd = -1;
                r->t0 = ab_now_ns();
                *con_cls = r;
                bool done = true;
                enum MHD_Result ret = MHD_YES;
                if (request_exact(r, url, &ret) && request_same_origin(r, &ret)) {
                        ret = route_request(r, &done);
                        if (!done && !request_json_type(r, &ret))
                                done = true;
                }
                /* the store may be read: an API key, a box's record (uploads) */
                if (!done && (r->proxy || r->route->body == BODY_UPLOAD ||
                              auth_may_block(r, r->route->auth)))
                        return dispatch(r, PH_AUTH, worker_first_call);
                if (!done)
                        ret = first_call(r, &done);
                if (done) {
                        r->route = NULL;
                        r->phase = PH_DONE;
                        if (!r->status)
                                r->status = 500;
                        return ret;
                }
                r->phase = PH_BODY;
                return ret;
        }
        switch (r->phase) {
        case PH_AUTH: {
                enum MHD_Result ret = take_worker_answer(r);
                if (r->phase == PH_DONE || ret == MHD_NO) {
                        r->route = NULL;
                        r->phase = PH_DONE;
                        return ret;
                }
                r->phase = PH_BODY;
                return MHD_YES;
        }
        case PH_RUN:
                return take_worker_answer(r);
        case PH_DONE: /* answered already (an error before the body) */
                *upload_data_size = 0;
                return MHD_YES;
        default:
                break;
        }
        if (*upload_data_size && r->body_kind == BODY_PROXY)
                return ports_body(r, upload_data, upload_data_size);
        if (*upload_data_size) {
                if (r->body_kind == BODY_NONE) {
                        /* a body on a route that takes none: ignore it, but bounded */
                        if (r->body_len + *upload_data_size > s->cfg->max_body)
                                r->body_too_large = true;
                        else
                                r->body_len += *upload_data_size;
                } else {
                        take_body(r, upload_data, *upload_data_size);
                }
                *upload_data_size = 0;
                return MHD_YES;
        }
        if (r->body_kind == BODY_PROXY) /* answered on this thread, parking meanwhile */
                return ports_answer(r);
        if (r->body_kind == BODY_NONE)
                r->body_len = 0;
        r->phase = PH_DONE;
        if (r->body_too_large)
                return resp_error(r, 413, "limit_exceeded",
                                  "request body is larger than the limit of %" PRIu64 " bytes",
                                  r->body_kind == BODY_UPLOAD ? s->cfg->max_upload
                                                              : s->cfg->max_body);
        if (r->tmp_full)
                return tmp_full_answer(r);
        if (r->upload_failed)
                return resp_error(r, 500, "internal", "cannot spool the upload");
        return dispatch(r, PH_RUN, worker_handler);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
        ab_server *s = cls;
        ab_conns_request_done(s->conns, conn);
        ab_req *r = *con_cls;
        if (!r)
                return;
        double ms = (double)(ab_now_ns() - r->t0) / 1e6;
        char st[16], dur[32];
        snprintf(st, sizeof(st), "%d", r->status);
        snprintf(dur, sizeof(dur), "%.2f", ms);
        ab_log(AB_LOG_DEBUG, "request", "method", r->method, "path", r->path, "status", st, "ms",
               dur, NULL);
        if (r->deferred_use) {
                ab_manager_use_end(r->srv->mgr, r->deferred_use);
                free(r->deferred_use);
        }
        if (r->resp)
                MHD_destroy_response(r->resp);
        req_free(r);
        *con_cls = NULL;
}

/* libmicrohttpd's own messages, at most LOG_BURST per LOG_WINDOW_S: a flood
 * of refused connections must not flood the log too. */
#define LOG_BURST    20
#define LOG_WINDOW_S 10
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
        static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        static uint64_t window_start;
        static unsigned in_window, dropped;
        uint64_t now = ab_now_ms() / 1000;
        pthread_mutex_lock(&mu);
        if (now >= window_start + LOG_WINDOW_S) {
                if (dropped) {
                        char n[24];
                        snprintf(n, sizeof(n), "%u", dropped);
                        ab_log(AB_LOG_WARN, "http: messages dropped (too many)", "count", n, NULL);
                }
                window_start = now;
                in_window = dropped = 0;
        }
        bool say = in_window < LOG_BURST;
        if (say)
                in_window++;
        else
                dropped++;
        pthread_mutex_unlock(&mu);
        if (!say)
                return;
        char buf[512];
        vsnprintf(buf, sizeof(buf), fmt, ap);
        size_t n = strlen(buf);
        while (n && buf[n - 1] == '\n')
                buf[--n] = 0;
        ab_log(AB_LOG_WARN, "http", "detail", buf, NULL);
}

/* Parses HOST:PORT / [V6]:PORT into a socket address. */
static int parse_listen(const char *listen, struct sockaddr_storage *ss, socklen_t *sl,
                        ab_err **err)
{
        _cleanup_free_ char *host = NULL;
        const char *port;
        if (listen[0] == '[') {
                const char *end = strchr(listen, ']');
                if (!end || end[1] != ':')
                        return ab_err_set(err, AB_E_INVALID, 0, "listen: bad address \"%s\"",
                                          listen);
                host = xstrndup(listen + 1, (size_t)(end - listen - 1));
                port = end + 2;
        } else {
                const char *colon = strrchr(listen, ':');
                if (!colon)
                        return ab_err_set(err, AB_E_INVALID, 0, "listen: \"%s\" is not HOST:PORT",
                                          listen);
                host = xstrndup(listen, (size_t)(colon - listen));
                port = colon + 1;
        }
        struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV,
                                 .ai_socktype = SOCK_STREAM};
        struct addrinfo *ai = NULL;
        int rc = getaddrinfo(*host ? host : NULL, port, &hints, &ai);
        if (rc != 0)
                return ab_err_set(err, AB_E_INVALID, 0, "listen: cannot resolve \"%s\": %s", listen,
                                  gai_strerror(rc));
        memcpy(ss, ai->ai_addr, ai->ai_addrlen);
        *sl = ai->ai_addrlen;
        freeaddrinfo(ai);
        return 0;
}

/* Every connection is a descriptor: lift the soft limit to the hard one. */
static void raise_nofile(int64_t max_connections)
{
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return;
        if (rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur != RLIM_INFINITY && (int64_t)rl.rlim_cur < max_connections + 1024) {
                char have[24], want[24];
                snprintf(have, sizeof(have), "%llu", (unsigned long long)rl.rlim_cur);
                snprintf(want, sizeof(want), "%lld", (long long)max_connections + 1024);
                ab_log(AB_LOG_WARN,
                       "the open-files limit is below max_connections plus room for boxes; "
                       "raise it (ulimit -n, LimitNOFILE=) or lower max_connections",
                       "nofile", have, "wanted", want, NULL);
        }
}

static int cmp_key_id(const void *a, const void *b)
{
        return strcmp(((const ab_api_key *)a)->key_id, ((const ab_api_key *)b)->key_id);
}

/* The connection table's key check (conn.h): one read of the store's keys
 * per round, however many keys have streams. */
static int keys_gone(void *arg, const char *const *keys, size_t n, bool *gone)
{
        ab_server *s = arg;
        ab_api_key *ks = NULL;
        size_t nk = 0;
        ab_err *e = NULL;
        if (ab_store_key_list(s->store, &ks, &nk, &e) < 0) {
                ab_log(AB_LOG_WARN, "API key check: cannot list keys", "error", e->msg, NULL);
                ab_err_free(&e);
                return -1;
        }
        qsort(ks, nk, sizeof(*ks), cmp_key_id);
        for (size_t i = 0; i < n; i++) {
                ab_api_key want = {.key_id = (char *)keys[i]};
                gone[i] = !bsearch(&want, ks, nk, sizeof(*ks), cmp_key_id);
        }
        ab_api_keys_free(ks, nk);
        return 0;
}

/* The connection table (deadlines, caps, parked streams) and the worker
 * pool both daemons use. */
static int start_tables(ab_server *s, ab_err **err)
{
        ab_conns_opts co = {
            .head_timeout_ms = s->cfg->head_timeout_ms,
            .keepalive_ms = (int64_t)IDLE_CONN_TIMEOUT_S * 1000,
            .max_connections = s->cfg->max_connections,
            .max_per_address = s->cfg->max_connections_per_address,
            .max_streams = s->cfg->max_streams,
            .max_streams_addr = s->cfg->max_streams_per_address,
            .events = s->events,
            .keys_gone = s->store ? keys_gone : NULL,
            .key_arg = s,
        };
        s->conns = ab_conns_new(&co);
        if (!s->conns) {
                return ab_err_set(err, AB_E_INTERNAL, errno, "cannot start the connection timer");
        }
        s->workers = ab_workers_new((size_t)s->cfg->max_requests, WORKERS_KEEP_IDLE);
        return 0;
}

int ab_server_start(ab_server *s, ab_err **err)
{
        struct sockaddr_storage ss;
        socklen_t sl = 0;
        if (parse_listen(s->cfg->listen, &ss, &sl, err) < 0)
                return -1;
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "socket");
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
                int e = errno;
                close(fd);
                return ab_err_set(err, e == EADDRINUSE ? AB_E_CONFLICT : AB_E_UNAVAILABLE, e,
                                  "cannot listen on %s", s->cfg->listen);
        }
        if (listen(fd, 4096) < 0) {
                int e = errno;
                close(fd);
                return ab_err_set(err, AB_E_UNAVAILABLE, e, "listen on %s", s->cfg->listen);
        }
        struct sockaddr_storage bound;
        socklen_t bl = sizeof(bound);
        /* egress (proxy, httpRequest, image pulls) never reaches the server itself */
        if (ab_addr_note_listen((struct sockaddr *)&ss) < 0)
                ab_log(AB_LOG_WARN, "too many listen addresses to keep from egress", NULL);
        if (getsockname(fd, (struct sockaddr *)&bound, &bl) == 0)
                s->port =
                    ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                      : ((struct sockaddr_in *)&bound)->sin_port);
        raise_nofile(s->cfg->max_connections);
        if (start_tables(s, err) < 0) {
                close(fd);
                return -1;
        }
        /* One polling thread (epoll) for every connection; handlers run on
         * the workers; suspended connections cost no thread. */
        unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                         MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG;
        if (ss.ss_family == AF_INET6)
                flags |= MHD_USE_IPv6;
        /* MHD's own limit sits above ours, so ab_conns_accept refuses (and
         * counts) first. */
        unsigned mhd_limit = (unsigned)s->cfg->max_connections + 64;
        s->mhd = MHD_start_daemon(
            flags, 0, ab_conns_accept, s->conns, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
            s, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
            MHD_OPTION_NOTIFY_CONNECTION, ab_conns_notify, s->conns, MHD_OPTION_URI_LOG_CALLBACK,
            ab_conns_uri_seen, s->conns, MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_CONN_TIMEOUT_S, MHD_OPTION_END);
        if (!s->mhd) {
                close(fd);
                ab_workers_free(steal_pointer(&s->workers));
                ab_conns_free(steal_pointer(&s->conns));
                return ab_err_set(err, AB_E_INTERNAL, 0, "cannot start the HTTP server on %s",
                                  s->cfg->listen);
        }
        return 0;
}

int ab_server_start_external(ab_server *s, ab_err **err)
{
        if (start_tables(s, err) < 0)
                return -1;
        /* The same request path as ab_server_start (handlers on the workers,
         * connections suspended meanwhile), driven by the caller's MHD_run. */
        s->mhd = MHD_start_daemon(
            MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC | MHD_USE_ERROR_LOG,
            0, ab_conns_accept, s->conns, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
            ab_conns_notify, s->conns, MHD_OPTION_URI_LOG_CALLBACK, ab_conns_uri_seen, s->conns,
            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg->max_connections + 64,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_CONN_TIMEOUT_S, MHD_OPTION_END);
        if (!s->mhd) {
                ab_workers_free(steal_pointer(&s->workers));
                ab_conns_free(steal_pointer(&s->conns));
                return ab_err_set(err, AB_E_INTERNAL, 0, "cannot start the HTTP daemon");
        }
        return 0;
}

void ab_server_stop(ab_server *s)
{
        if (!s->mhd)
                return;
        int fd = MHD_quiesce_daemon(s->mhd);
        if (fd >= 0)
                close(fd);
        ab_events_shutdown(s->events);
        term_ws_shutdown();
        ports_shutdown();
        /* MHD must not stop with a connection suspended: streams end, and
         * handlers in flight finish (each resumes its connection). */
        ab_conns_stop_streams(s->conns);
        ab_workers_drain(s->workers);
        envd_shutdown(); /* E2B processes use the manager from threads of their own */
        MHD_stop_daemon(s->mhd);
        s->mhd = NULL;
        ab_workers_free(steal_pointer(&s->workers));
        ab_conns_free(steal_pointer(&s->conns));
}

void ab_server_counts(ab_server *s, ab_buf *b)
{
        ab_conns_metrics(s->conns, b);
        ab_buf_printf(b,
                      "# HELP agentbox_http_requests_in_flight Requests being handled.\n"
                      "# TYPE agentbox_http_requests_in_flight gauge\n"
                      "agentbox_http_requests_in_flight %zu\n",
                      ab_workers_in_flight(s->workers));
}
