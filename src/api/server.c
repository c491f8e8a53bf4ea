/* The HTTP front: libmicrohttpd daemon, request life cycle, routing, auth,
 * and the response helpers the route modules use. */
#include "api/server.h"
#include "base/log.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* Keep-alive connections idle this long are closed (streams send keepalives). */
#define IDLE_CONN_TIMEOUT_S 120

typedef enum { AUTH_ANY, AUTH_USER, AUTH_ADMIN } auth_level;

typedef struct route {
        const char *method;
        const char *pattern; /* segments separated by '/', "*" = the id */
        auth_level auth;
        body_kind body;
        enum MHD_Result (*fn)(ab_req *r, const char *id);
} route;

static const route routes[] = {
    {"GET", "health", AUTH_ANY, BODY_NONE, route_health},
    {"POST", "sandbox/js", AUTH_ANY, BODY_JSON, route_sandbox_js},
    {"POST", "sandbox/python", AUTH_ANY, BODY_JSON, route_sandbox_python},
    {"GET", "sandbox/modules", AUTH_ANY, BODY_NONE, route_sandbox_modules},
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
        default:
                return 500;
        }
}

static void common_headers(struct MHD_Response *resp)
{
        MHD_add_response_header(resp, "Cache-Control", "no-store");
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
}

static enum MHD_Result queue(ab_req *r, unsigned status, struct MHD_Response *resp)
{
        common_headers(resp);
        r->status = (int)status;
        ab_metrics_http(r->srv->metrics, (int)status);
        enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
        MHD_destroy_response(resp);
        return ret;
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
        if (st >= 500 && st != 503)
                ab_log(AB_LOG_ERROR, "request failed", "method", r->method, "path", r->path,
                       "error", e->msg, NULL);
        enum MHD_Result ret = resp_error_v(r, st, code, e->msg);
        ab_err_free(&e);
        return ret;
}

typedef struct stream {
        int fd;
        int client; /* the client's socket, watched for a hang-up while we wait */
} stream;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        stream *s = cls;
        for (;;) {
                struct pollfd p[2] = {{.fd = s->fd, .events = POLLIN},
                                      {.fd = s->client, .events = POLLRDHUP}};
                int pn = poll(p, 2, -1);
                if (pn < 0 && errno == EINTR)
                        continue;
                if (pn > 0 && !p[0].revents &&
                    (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
                        return MHD_CONTENT_READER_END_WITH_ERROR; /* client gone */
                if (pn > 0 && !p[0].revents)
                        continue;
                ssize_t n = read(s->fd, buf, max);
                if (n > 0)
                        return n;
                if (n == 0)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                if (errno != EINTR)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
        }
}

static void stream_free(void *cls)
{
        stream *s = cls;
        close(s->fd);
        free(s);
}

enum MHD_Result resp_stream(ab_req *r, unsigned status, const char *content_type, int fd,
                            const char *const *headers)
{
        stream *s = xzalloc(sizeof(*s));
        s->fd = fd;
        s->client = -1;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci)
                s->client = ci->connect_fd;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024,
                                                                      stream_read, s, stream_free);
        MHD_add_response_header(resp, "Content-Type", content_type);
        for (const char *const *h = headers; h && h[0]; h += 2)
                MHD_add_response_header(resp, h[0], h[1]);
        return queue(r, status, resp);
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
        if (json_is_real(v) && json_real_value(v) == (double)(int64_t)json_real_value(v))
                *out = (int64_t)json_real_value(v);
        else if (json_is_integer(v))
                *out = json_integer_value(v);
        else
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
            json_string(ab_box_mode_name(r->mode)), "provider", str_or_null(r->provider),
            "backend_id", str_or_null(r->backend_id), "app_id", str_or_null(r->app_id), "user_id",
            str_or_null(r->user_id), "chat_id", str_or_null(r->chat_id), "thread_id",
            str_or_null(r->thread_id), "created_at", (json_int_t)r->created_at, "last_active_at",
            (json_int_t)r->last_active_at, "idle_stop_s", (json_int_t)(idle > 0 ? idle : -1),
            "idle_pause_s", (json_int_t)(pause > 0 ? pause : -1), "ttl_s", (json_int_t)r->ttl_s,
            "limits", r->has_limits ? ab_limits_json(&r->limits) : json_null(), "network",
            net ? json_incref(net) : json_pack("{s:s,s:[],s:[]}", "mode", "none", "allow", "deny"),
            "env", env ? json_incref(env) : json_object(), "metadata",
            r->metadata ? json_incref(r->metadata) : json_object(), "error", str_or_null(r->error));
        return j;
}

/* ---- auth ------------------------------------------------------------- */

static void sha256_hex(const char *s, char out[65])
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (!EVP_Digest(s, strlen(s), md, &len, EVP_sha256(), NULL))
                abort();
        for (unsigned i = 0; i < 32; i++)
                snprintf(out + 2 * i, 3, "%02x", md[i]);
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
        const char *h = req_header(r, "Authorization");
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

static void req_free(ab_req *r)
{
        if (r->upload_fd >= 0)
                close(r->upload_fd);
        free(r->scope_buf);
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

static enum MHD_Result first_call(ab_req *r, bool *done)
{
        *done = false;
        split_path(r);
        const char *id;
        enum MHD_Result ret = MHD_YES;
        const route *rt = find_route(r, &id, &ret);
        if (!rt) {
                *done = true;
                return ret;
        }
        r->route = rt;
        bool ok;
        ret = authenticate(r, rt->auth, &ok);
        if (!ok) {
                *done = true;
                return ret;
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

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
        ab_server *s = cls;
        ab_req *r = *con_cls;
        if (!r) {
                r = xzalloc(sizeof(*r));
                r->srv = s;
                r->conn = conn;
                r->method = method;
                r->path = xstrdup(url[0] == '/' ? url + 1 : url);
                r->upload_fd = -1;
                r->t0 = ab_now_ns();
                *con_cls = r;
                bool done;
                enum MHD_Result ret = first_call(r, &done);
                if (done)
                        r->route = NULL;
                if (done || ret != MHD_YES)
                        r->status = r->status ? r->status : 500;
                return ret;
        }
        if (r->status) /* answered already (error in the first call) */
        {
                *upload_data_size = 0;
                return MHD_YES;
        }
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
        if (r->body_kind == BODY_NONE)
                r->body_len = 0;
        if (r->body_too_large)
                return resp_error(r, 413, "limit_exceeded",
                                  "request body is larger than the limit of %" PRIu64 " bytes",
                                  r->body_kind == BODY_UPLOAD ? s->cfg->max_upload
                                                              : s->cfg->max_body);
        if (r->upload_failed)
                return resp_error(r, 500, "internal", "cannot spool the upload");
        const char *id = NULL;
        route_matches(r->route, r, &id);
        return r->route->fn(r, id);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
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
        req_free(r);
        *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
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
        if (listen(fd, 1024) < 0) {
                int e = errno;
                close(fd);
                return ab_err_set(err, AB_E_UNAVAILABLE, e, "listen on %s", s->cfg->listen);
        }
        struct sockaddr_storage bound;
        socklen_t bl = sizeof(bound);
        if (getsockname(fd, (struct sockaddr *)&bound, &bl) == 0)
                s->port =
                    ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                      : ((struct sockaddr_in *)&bound)->sin_port);
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                         MHD_USE_POLL | MHD_USE_ERROR_LOG;
        if (ss.ss_family == AF_INET6)
                flags |= MHD_USE_IPv6;
        s->mhd = MHD_start_daemon(
            flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
            MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg->max_connections,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_CONN_TIMEOUT_S, MHD_OPTION_END);
        if (!s->mhd) {
                close(fd);
                return ab_err_set(err, AB_E_INTERNAL, 0, "cannot start the HTTP server on %s",
                                  s->cfg->listen);
        }
        return 0;
}

int ab_server_start_external(ab_server *s, ab_err **err)
{
        s->mhd = MHD_start_daemon(
            MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, s,
            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg->max_connections,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_CONN_TIMEOUT_S, MHD_OPTION_END);
        if (!s->mhd)
                return ab_err_set(err, AB_E_INTERNAL, 0, "cannot start the HTTP daemon");
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
        MHD_stop_daemon(s->mhd);
        s->mhd = NULL;
}
