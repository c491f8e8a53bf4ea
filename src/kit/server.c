/* The HTTP service as agentbox's fronts use it: libmicrohttpd daemon,
 * request life cycle, routing over the registered route tables, auth, and
 * the response helpers the route modules use. It names no front. */
#include "kit/server.h"
#include "http/conn.h"
#include "http/server.h"
#include "http/reqcheck.h"
#include "http/workers.h"
#include "http/ws.h"
#include "base/jsonnum.h"
#include "base/log.h"
#include "base/addrcheck.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/stat.h>

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
        s->park = ab_park_new(r->srv->http.conns, r->conn);
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
        switch (ab_stream_slot_take(r->srv->http.conns, r->conn, &slot)) {
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
/* A credential in a header form of some table's clients (the OpenSandbox
 * SDK's), as "Bearer TOKEN" (malloc'd), or NULL. */
static char *table_credential(ab_req *r)
{
        for (size_t i = 0; i < r->srv->n_tables; i++)
                if (r->srv->tables[i]->credential) {
                        char *h = r->srv->tables[i]->credential(r);
                        if (h)
                                return h;
                }
        return NULL;
}

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
        if (need == AUTH_ANY)
                return false;
        if (need == AUTH_OWN) /* E2B's access token reads the box's record */
                return r->table->auth_blocks;
        _cleanup_free_ char *xkey = NULL;
        const char *h = auth_header(r, &xkey);
        _cleanup_free_ char *own = h ? NULL : table_credential(r); /* the OpenSandbox SDK's */
        if (own)
                h = own;
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
        if (need == AUTH_OWN) {
                if (!r->table->authenticate) /* a table's mistake: refused, not let in */
                        return resp_error(r, 500, "internal", "route has no authenticator");
                return r->table->authenticate(r, ok);
        }
        _cleanup_free_ char *xkey = NULL;
        const char *h = auth_header(r, &xkey);
        /* A browser's WebSocket offers its token as a subprotocol (http/ws.c). */
        _cleanup_free_ char *ws_auth =
            h ? NULL
              : ws_auth_from_protocols(req_header(r, "Upgrade"),
                                       req_header(r, "Sec-WebSocket-Protocol"));
        if (ws_auth)
                h = ws_auth;
        _cleanup_free_ char *own = h ? NULL : table_credential(r); /* the OpenSandbox SDK's */
        if (own)
                h = own;
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
                        ab_conns_bind_key(r->srv->http.conns, r->conn, r->key_id);
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
        /* PORT-ID.ports_domain */
        return r->srv->proxy && r->srv->proxy->by_host && r->srv->proxy->by_host(r);
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

static bool route_matches(const ab_route *rt, ab_req *r, const char **id)
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
static const ab_route *find_route(ab_req *r, const char **id, enum MHD_Result *ret)
{
        char allow[128] = "";
        for (size_t t = 0; t < r->srv->n_tables; t++) {
                const ab_route_table *tb = r->srv->tables[t];
                for (size_t i = 0; i < tb->n_routes; i++) {
                        const ab_route *rt = &tb->routes[i];
                        const char *rid;
                        if (!route_matches(rt, r, &rid))
                                continue;
                        if (!strcmp(rt->method, r->method)) {
                                *id = rid;
                                r->table = tb;
                                return rt;
                        }
                        if (strlen(allow) + strlen(rt->method) + 3 < sizeof(allow)) {
                                if (*allow)
                                        strcat(allow, ", ");
                                strcat(allow, rt->method);
                        }
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
        if (r->proxy)
                r->srv->proxy->free(r->proxy);
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
        /* a box's port: any method, the body passed on */
        if (r->srv->proxy && r->srv->proxy->match(r)) {
                static const ab_route port_route = {"*", "", AUTH_USER, BODY_PROXY, NULL};
                r->route = &port_route;
                return MHD_YES;
        }
        const char *id;
        enum MHD_Result ret = MHD_YES;
        const ab_route *rt = find_route(r, &id, &ret);
        if (!rt)
                *done = true;
        r->route = rt;
        return ret;
}

/* The box an app's upload goes into (a route under its table's
 * box_upload_prefix, e.g. /v1/sandboxes/{id}/), or NULL: that box must be the
 * app's before its body is spooled to disk. */
static const char *upload_box(ab_req *r)
{
        const ab_route *rt = r->route;
        const char *id = NULL;
        const char *pre = r->table ? r->table->box_upload_prefix : NULL;
        if (rt->body != BODY_UPLOAD || !r->scope || !pre)
                return NULL;
        if (strncmp(rt->pattern, pre, strlen(pre)))
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
        const ab_route *rt = r->route;
        if (rt->body == BODY_PROXY) {
                r->body_kind = BODY_PROXY;
                return r->srv->proxy->open(r, done);
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
        if (!ab_workers_reserve(s->http.workers)) {
                ab_conns_count_busy(s->http.conns);
                r->phase = PH_DONE;
                return resp_error(r, 503, "unavailable",
                                  "the server has %lld requests in flight, the most "
                                  "max_requests allows: try again later",
                                  (long long)s->cfg->max_requests);
        }
        r->phase = phase;
        r->on_worker = true;
        MHD_suspend_connection(r->conn);
        ab_workers_run(s->http.workers, fn, r);
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
                ab_conns_head_done(s->http.conns, conn);
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
                return s->proxy->body(r, upload_data, upload_data_size);
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
                return s->proxy->answer(r);
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
        ab_conns_request_done(s->http.conns, conn);
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

/* The HTTP server's options from the service's settings. */
static ab_http_opts http_opts(ab_server *s)
{
        return (ab_http_opts){
            .listen = s->cfg->listen,
            .head_timeout_ms = s->cfg->head_timeout_ms,
            .max_connections = s->cfg->max_connections,
            .max_connections_per_address = s->cfg->max_connections_per_address,
            .max_streams = s->cfg->max_streams,
            .max_streams_per_address = s->cfg->max_streams_per_address,
            .max_requests = s->cfg->max_requests,
            .events = s->events,
            .keys_gone = s->store ? keys_gone : NULL,
            .key_arg = s,
            .on_request = on_request,
            .on_completed = on_completed,
            .cls = s,
        };
}

int ab_server_start(ab_server *s, ab_err **err)
{
        ab_http_opts o = http_opts(s);
        return ab_http_start(&s->http, &o, err);
}

int ab_server_start_external(ab_server *s, ab_err **err)
{
        ab_http_opts o = http_opts(s);
        return ab_http_start_external(&s->http, &o, err);
}

void ab_server_stop(ab_server *s)
{
        if (!s->http.mhd)
                return;
        ab_http_quiesce(&s->http);
        ab_events_shutdown(s->events);
        for (size_t i = 0; i < s->n_tables; i++) /* upgraded relays: terminals, ports */
                if (s->tables[i]->quiesce)
                        s->tables[i]->quiesce();
        ab_http_drain(&s->http);
        /* fronts' threads of their own (E2B processes) use the manager */
        for (size_t i = 0; i < s->n_tables; i++)
                if (s->tables[i]->shutdown)
                        s->tables[i]->shutdown();
        ab_http_stop(&s->http);
}

void ab_server_add_routes(ab_server *s, const ab_route_table *t)
{
        /* a wiring mistake of the program, not input: stop at once */
        if (s->n_tables >= AB_SERVER_MAX_TABLES || (t->proxy && s->proxy)) {
                ab_log(AB_LOG_ERROR, "route table refused: too many tables, or a second proxy",
                       "table", t->name, NULL);
                abort();
        }
        if (t->proxy)
                s->proxy = t->proxy;
        s->tables[s->n_tables++] = t;
}

enum MHD_Result route_call(ab_req *r, route_fn fn, const char *id)
{
        if (!r->key_id)
                return fn(r, id);
        ab_manager_set_caller(&r->caller);
        enum MHD_Result ret = fn(r, id);
        ab_manager_set_caller(NULL);
        return ret;
}

void ab_server_counts(ab_server *s, ab_buf *b)
{
        ab_http_counts(&s->http, b);
}
