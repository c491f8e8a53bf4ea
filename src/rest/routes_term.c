/* Terminals: /v1/sandboxes/{id}/terminals[/{tid}[/resize]] and the
 * WebSocket that streams one (docs/api.md, "Terminals").
 *
 * The WebSocket is libmicrohttpd's own upgrade (a 101 answer, then the raw
 * socket is ours) with the small RFC 6455 layer of ws.c. Each attached
 * WebSocket has a thread of its own that moves terminal output to the
 * client and input, resize and signal messages to the box's init; it holds
 * a use of the box while attached (core/term.c). */
#include "rest/rest.h"
#include "http/ws.h"
#include "kit/parse.h"
#include "kit/term.h"
#include "base/log.h"
#include "base/codec.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define WS_MAX_MSG      (1u << 20) /* largest message a client may send */
#define WS_MAX_SESSIONS 512        /* attached WebSockets at once, server-wide */
#define WS_PING_MS      30000      /* a ping after this much silence; none back: gone */
#define WS_SEND_MS      60000      /* a client that takes nothing this long is dropped */
#define TERM_DIM_MAX    1000       /* as the box init allows (ABP_TERM_DIM_MAX) */

/* ---- JSON ---- */

static json_t *term_json(const char *box, const abc_term_info *t)
{
        char at[AB_TIME_LEN];
        ab_time_rfc3339(t->created_ms, false, at);
        json_t *argv = json_array();
        for (char **a = t->argv; a && *a; a++)
                json_array_append_new(argv, json_bytes(*a, strlen(*a)));
        return json_pack("{s:s,s:s,s:o,s:i,s:i,s:s,s:b,s:o}", "id", t->id, "sandbox_id", box,
                         "argv", argv, "cols", (int)t->cols, "rows", (int)t->rows, "created_at", at,
                         "running", t->running, "exit_code",
                         t->running ? json_null() : json_integer(t->exit_code));
}

static enum MHD_Result resp_empty(ab_req *r, unsigned status)
{
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Cache-Control", "no-store");
        return resp_send(r, status, resp);
}

/* cols and rows of o: absent ones are left as they are; present ones must be 1..1000. */
static int parse_size(json_t *o, uint32_t *cols, uint32_t *rows, bool need, ab_err **err)
{
        int64_t c = 0, r = 0;
        bool hc, hr;
        if (field_int(o, "cols", &c, &hc, err) < 0 || field_int(o, "rows", &r, &hr, err) < 0)
                return -1;
        if (need && (!hc || !hr))
                return ab_err_set(err, AB_E_INVALID, 0, "cols and rows are required");
        if ((hc && (c < 1 || c > TERM_DIM_MAX)) || (hr && (r < 1 || r > TERM_DIM_MAX)))
                return ab_err_set(err, AB_E_INVALID, 0, "cols and rows must be 1..%d",
                                  TERM_DIM_MAX);
        if (hc)
                *cols = (uint32_t)c;
        if (hr)
                *rows = (uint32_t)r;
        return 0;
}

/* The signal named s (INT TERM KILL HUP QUIT, with or without SIG), or 0. */
static int signal_named(const char *s)
{
        static const struct {
                const char *name;
                int sig;
        } sigs[] = {{"INT", SIGINT},
                    {"TERM", SIGTERM},
                    {"KILL", SIGKILL},
                    {"HUP", SIGHUP},
                    {"QUIT", SIGQUIT}};
        if (!s)
                return 0;
        if (strncmp(s, "SIG", 3) == 0)
                s += 3;
        for (size_t i = 0; i < AB_ARRAY_LEN(sigs); i++)
                if (strcmp(s, sigs[i].name) == 0)
                        return sigs[i].sig;
        return 0;
}

/* ---- REST ---- */

/* POST /v1/sandboxes/{id}/terminals {argv?, cols?, rows?, env?, cwd?} */
enum MHD_Result route_term_create(ab_req *r, const char *id)
{
        static const char *const known[] = {"argv", "cols", "rows", "env", "cwd", NULL};
        const char *box = r->seg[2];
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        abc_term_req q = {0};
        json_t *env = NULL;
        _cleanup_strv_ char **av = NULL;
        _cleanup_strv_ char **ev = NULL;
        int rc = fields_known(body, known, NULL, &e);
        if (rc == 0)
                rc = parse_size(body, &q.cols, &q.rows, false, &e);
        if (rc == 0)
                rc = field_str(body, "cwd", &q.cwd, &e);
        if (rc == 0)
                rc = field_obj(body, "env", &env, &e);
        if (rc == 0)
                rc = kit_parse_argv(body, "argv", &av, &e);
        q.argv = (const char *const *)av;
        if (rc == 0 && env) {
                ev = xcalloc(json_object_size(env) + 1, sizeof(char *));
                size_t n = 0;
                const char *k;
                json_t *v;
                json_object_foreach(env, k, v)
                {
                        if (!json_is_string(v) || !*k || strchr(k, '=')) {
                                rc = ab_err_set(&e, AB_E_INVALID, 0,
                                                "env.%s: must be a string with a name "
                                                "without '='",
                                                k);
                                break;
                        }
                        ev[n++] = xasprintf("%s=%s", k, json_string_value(v));
                }
                q.env = (const char *const *)ev;
        }
        abc_term_info t = {0};
        if (rc == 0)
                rc = ab_manager_term_open_id(r->srv->mgr, box, r->scope, &q, &t, &e);
        json_decref(body);
        if (rc < 0)
                return resp_err(r, e);
        json_t *j = term_json(box, &t);
        abc_term_info_clear(&t);
        return resp_json(r, 201, j);
}

/* GET /v1/sandboxes/{id}/terminals */
enum MHD_Result route_term_list(ab_req *r, const char *id)
{
        const char *box = r->seg[2];
        ab_err *e = NULL;
        abc_term_info *v;
        size_t n;
        if (ab_manager_term_list(r->srv->mgr, box, r->scope, &v, &n, &e) < 0)
                return resp_err(r, e);
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(a, term_json(box, &v[i]));
        abc_term_infos_free(v, n);
        return resp_json(r, 200, json_pack("{s:o}", "terminals", a));
}

/* DELETE /v1/sandboxes/{id}/terminals/{tid} */
enum MHD_Result route_term_delete(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        if (ab_manager_term_close(r->srv->mgr, r->seg[2], r->scope, r->seg[4], &e) < 0)
                return resp_err(r, e);
        return resp_empty(r, 204);
}

/* POST /v1/sandboxes/{id}/terminals/{tid}/resize {cols, rows} */
enum MHD_Result route_term_resize(ab_req *r, const char *id)
{
        static const char *const known[] = {"cols", "rows", NULL};
        ab_err *e = NULL;
        json_t *body;
        uint32_t cols = 0, rows = 0;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        int rc = fields_known(body, known, NULL, &e);
        if (rc == 0)
                rc = parse_size(body, &cols, &rows, true, &e);
        json_decref(body);
        if (rc == 0)
                rc = ab_manager_term_resize(r->srv->mgr, r->seg[2], r->scope, r->seg[4], cols, rows,
                                            &e);
        if (rc < 0)
                return resp_err(r, e);
        return resp_empty(r, 204);
}

/* ---- the WebSocket ---- */

typedef struct ws_session {
        struct ws_session *next;
        ab_server *srv;
        char *box, *tid, *scope;
        bool subprotocol; /* the client offered WS_PROTOCOL */
        int sock;
        struct MHD_UpgradeResponseHandle *urh;
        char *extra;
        size_t extra_len;
        ab_stream_slot *slot; /* counted as a long-lived stream */
} ws_session;

static pthread_mutex_t ws_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ws_gone = PTHREAD_COND_INITIALIZER;
static ws_session *ws_list;
static int ws_count; /* threads running */
static bool ws_stopping;

static void session_free(ws_session *s)
{
        if (s->slot)
                ab_stream_slot_release(s->slot);
        free(s->box);
        free(s->tid);
        free(s->scope);
        free(s->extra);
        free(s);
}

static bool stopping(void)
{
        pthread_mutex_lock(&ws_lock);
        bool v = ws_stopping;
        pthread_mutex_unlock(&ws_lock);
        return v;
}

static void session_unlink(ws_session *s)
{
        pthread_mutex_lock(&ws_lock);
        for (ws_session **pp = &ws_list; *pp; pp = &(*pp)->next) {
                if (*pp == s) {
                        *pp = s->next;
                        break;
                }
        }
        ws_count--;
        pthread_cond_broadcast(&ws_gone);
        pthread_mutex_unlock(&ws_lock);
}

/* A control message: {"type":"resize","cols","rows"} or {"type":"signal","signal"}.
 * Anything else is ignored (a newer client may send more). */
static void ws_control(abc_term_stream *st, const uint8_t *p, size_t n)
{
        json_t *j = json_loadb((const char *)p, n, 0, NULL);
        const char *type = json_string_value(json_object_get(j, "type"));
        if (type && strcmp(type, "resize") == 0) {
                uint32_t cols = 0, rows = 0;
                if (parse_size(j, &cols, &rows, true, NULL) == 0)
                        (void)!abc_term_send_resize(st, cols, rows);
        } else if (type && strcmp(type, "signal") == 0) {
                int sig = signal_named(json_string_value(json_object_get(j, "signal")));
                if (sig)
                        (void)!abc_term_send_signal(st, sig);
        }
        json_decref(j);
}

/* Sends a close frame and waits (briefly) for the client's, as RFC 6455 asks. */
static void ws_close(ws_conn *w, uint16_t code, const char *reason)
{
        if (ws_send_close(w, code, reason, 5000) < 0)
                return;
        shutdown(w->fd, SHUT_WR);
        for (int i = 0; i < 20; i++) {
                struct pollfd p = {.fd = w->fd, .events = POLLIN};
                if (poll(&p, 1, 100) < 0 && errno != EINTR)
                        return;
                long n = ws_read(w);
                if (n == 0 || (n < 0 && n != -EAGAIN))
                        return;
                ws_msg m;
                uint16_t c;
                int k;
                while ((k = ws_next(w, &m, &c)) > 0)
                        if (m.op == WS_CLOSE)
                                return;
                if (k < 0)
                        return;
        }
}

/* A terminal WebSocket being pumped: the client's side of kit_term_pump. */
typedef struct ws_pumping {
        ws_session *s;
        ws_conn *w;
        ab_term_attach *a;
        bool ping_out; /* a ping is unanswered */
} ws_pumping;

static int ws_out(void *ud, int stream, const void *data, size_t len)
{
        ws_pumping *p = ud;
        return ws_send(p->w, WS_BINARY, data, len, WS_SEND_MS) < 0; /* the client takes nothing */
}

/* The client's side: what the last wait saw on its socket, then its
 * messages (keystrokes, resizes, pings, its close). Nonzero ends the pump. */
static int ws_in(void *ud, int polled, short revents)
{
        ws_pumping *p = ud;
        ws_conn *w = p->w;
        if (polled == 0) {
                if (p->ping_out)
                        return 1; /* no answer to the last ping: the client is gone */
                if (ws_send(w, WS_PING, "", 0, WS_SEND_MS) < 0)
                        return 1;
                p->ping_out = true;
        } else if (polled > 0 && revents) {
                long got = ws_read(w);
                if (got == 0 && stopping())
                        (void)!ws_send_close(w, WS_CLOSE_GOING_AWAY, "the server is shutting down",
                                             1000);
                if (got == 0 || (got < 0 && got != -EAGAIN))
                        return 1; /* the client went away: detach */
                p->ping_out = false;
        }
        ws_msg m;
        uint16_t code;
        int k;
        while ((k = ws_next(w, &m, &code)) > 0) {
                int r = 0;
                if (m.op == WS_BINARY && m.len)
                        r = abc_term_input(p->a->stream, m.data, m.len);
                else if (m.op == WS_TEXT)
                        ws_control(p->a->stream, m.data, m.len);
                else if (m.op == WS_PING)
                        r = ws_send(w, WS_PONG, m.data, m.len, WS_SEND_MS);
                else if (m.op == WS_CLOSE) {
                        uint16_t echo = m.close_code == 1005 ? WS_CLOSE_NORMAL : m.close_code;
                        (void)!ws_send_close(w, echo, "", 5000);
                        return 1; /* detach: the terminal lives on */
                }
                if (r < 0) {
                        ws_close(w, WS_CLOSE_GOING_AWAY, "terminal ended");
                        return 1;
                }
        }
        if (k < 0) {
                ws_close(w, code, "protocol error");
                return 1;
        }
        return 0;
}

/* Moves bytes both ways until one side ends. */
static void ws_pump(ws_session *s, ws_conn *w, ab_term_attach *a)
{
        ws_pumping p = {.s = s, .w = w, .a = a};
        const kit_term_pump pump = {.output = ws_out,
                                    .idle = ws_in,
                                    .extra_fd = s->sock,
                                    .extra_events = POLLIN,
                                    .tick_ms = WS_PING_MS};
        int code = 0;
        switch (kit_term_pump_run(a, &pump, &p, &code)) {
        case KIT_TERM_TIMED_OUT: /* as an exit: the client sees the code */
        case KIT_TERM_EXITED: {
                char msg[64];
                int n = snprintf(msg, sizeof(msg), "{\"type\":\"exit\",\"exit_code\":%d}", code);
                if (ws_send(w, WS_TEXT, msg, (size_t)n, WS_SEND_MS) == 0)
                        ws_close(w, WS_CLOSE_NORMAL, "exited");
                break;
        }
        case KIT_TERM_CLOSED:
                ws_close(w, WS_CLOSE_GOING_AWAY, "terminal closed");
                break;
        case KIT_TERM_GONE:
                ws_close(w, WS_CLOSE_GOING_AWAY, "terminal ended: the box stopped");
                break;
        default: /* stopped by a side (it said why) or a failed wait */
                break;
        }
}

static void *ws_main(void *arg)
{
        ws_session *s = arg;
        int one = 1; /* keystrokes are small writes: no Nagle delay */
        setsockopt(s->sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        ws_conn w;
        ws_init(&w, s->sock, WS_MAX_MSG);
        ws_feed(&w, s->extra, s->extra_len);
        ab_term_attach a;
        ab_err *e = NULL;
        if (ab_manager_term_attach(s->srv->mgr, s->box, s->scope, s->tid, &a, &e) == 0) {
                ws_pump(s, &w, &a);
                ab_manager_term_detach(s->srv->mgr, &a);
        } else {
                ws_close(&w, e->code == AB_E_NOT_FOUND ? WS_CLOSE_GOING_AWAY : WS_CLOSE_ERROR,
                         e->code == AB_E_NOT_FOUND ? "no such terminal" : "box unavailable");
                ab_err_free(&e);
        }
        ws_free(&w);
        MHD_upgrade_action(s->urh, MHD_UPGRADE_ACTION_CLOSE);
        session_unlink(s);
        session_free(s);
        return NULL;
}

static void on_upgrade(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
                       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
        ws_session *s = cls;
        s->sock = sock;
        s->urh = urh;
        if (extra_in_size) {
                s->extra = xmalloc(extra_in_size);
                memcpy(s->extra, extra_in, extra_in_size);
                s->extra_len = extra_in_size;
        }
        pthread_mutex_lock(&ws_lock);
        bool go = !ws_stopping && ws_count < WS_MAX_SESSIONS;
        if (go) {
                s->next = ws_list;
                ws_list = s;
                ws_count++;
        }
        pthread_mutex_unlock(&ws_lock);
        if (go && spawn_detached(ws_main, s) == 0)
                return;
        if (go)
                session_unlink(s);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        session_free(s);
}

void term_ws_shutdown(void)
{
        pthread_mutex_lock(&ws_lock);
        ws_stopping = true;
        /* Their reads end; each sends a close frame (1001) and detaches. */
        for (ws_session *s = ws_list; s; s = s->next)
                shutdown(s->sock, SHUT_RD);
        /* A session still here after 2 s is blocked writing to a client
         * that reads nothing: its socket is shut both ways, so the write
         * fails at once. The whole wait stays well inside serve's 10 s. */
        for (int round = 0; round < 2 && ws_count > 0; round++) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += 2;
                while (ws_count > 0 &&
                       pthread_cond_timedwait(&ws_gone, &ws_lock, &until) != ETIMEDOUT)
                        ;
                if (ws_count > 0 && round == 0)
                        for (ws_session *s = ws_list; s; s = s->next)
                                shutdown(s->sock, SHUT_RDWR);
        }
        if (ws_count > 0) {
                char n[24];
                snprintf(n, sizeof(n), "%zu", (size_t)ws_count);
                ab_log(AB_LOG_WARN, "terminal sessions still open 4 s into the stop", "sessions", n,
                       NULL);
        }
        pthread_mutex_unlock(&ws_lock);
}

/* True when the comma-separated header value h holds token t (any case). */
static bool header_has(const char *h, const char *t)
{
        size_t n = strlen(t);
        for (const char *p = h; p && *p;) {
                while (*p == ' ' || *p == ',' || *p == '\t')
                        p++;
                const char *e = p;
                while (*e && *e != ',' && *e != ' ' && *e != '\t')
                        e++;
                if ((size_t)(e - p) == n && strncasecmp(p, t, n) == 0)
                        return true;
                p = e;
        }
        return false;
}

/* True when the Origin header (absent: not a browser) names the host the
 * request was sent to. A WebSocket is not bound by CORS: without this, any
 * web page a local user opens could attach to terminals of a server that
 * answers loopback clients without a token. */
static bool same_origin(ab_req *r)
{
        const char *origin = req_header(r, "Origin"), *host = req_header(r, "Host");
        if (!origin)
                return true;
        const char *p = strstr(origin, "://");
        if (!p || !host)
                return false;
        p += 3;
        return strcasecmp(p, host) == 0;
}

static enum MHD_Result ws_upgrade(ab_req *r, const char *box, const char *tid)
{
        const char *ver = req_header(r, "Sec-WebSocket-Version");
        const char *key = req_header(r, "Sec-WebSocket-Key");
        const char *offer = req_header(r, "Sec-WebSocket-Protocol");
        if (!header_has(req_header(r, "Connection"), "upgrade"))
                return resp_error(r, 400, "invalid_argument",
                                  "a WebSocket upgrade needs \"Connection: Upgrade\"");
        if (!ver || strcmp(ver, "13") != 0) {
                struct MHD_Response *resp =
                    MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
                MHD_add_response_header(resp, "Sec-WebSocket-Version", "13");
                return resp_send(r, 426, resp);
        }
        if (!ws_key_valid(key))
                return resp_error(r, 400, "invalid_argument", "bad Sec-WebSocket-Key");
        if (!same_origin(r))
                return resp_error(r, 403, "permission_denied",
                                  "a terminal WebSocket must come from the server's own origin");
        bool ours = ws_offers(offer, WS_PROTOCOL);
        if (offer && !ours)
                return resp_error(r, 400, "invalid_argument",
                                  "unsupported WebSocket subprotocol: offer " WS_PROTOCOL);
        /* Unknown terminals are an HTTP 404, not a WebSocket that closes at once. */
        abc_term_info t;
        ab_err *e = NULL;
        if (ab_manager_term_get(r->srv->mgr, box, r->scope, tid, &t, &e) < 0)
                return resp_err(r, e);
        abc_term_info_clear(&t);
        /* (checked again when the upgrade is done: a race past it is closed then) */
        pthread_mutex_lock(&ws_lock);
        bool full = ws_stopping || ws_count >= WS_MAX_SESSIONS;
        pthread_mutex_unlock(&ws_lock);
        if (full)
                return resp_error(r, 503, "unavailable",
                                  "too many terminal connections (%d); try again later",
                                  WS_MAX_SESSIONS);

        /* A terminal's WebSocket is a long-lived stream: counted apart from
         * connections and requests, under the same caps as event streams. */
        enum MHD_Result slot_ret;
        ab_stream_slot *slot = req_stream_slot(r, &slot_ret);
        if (!slot)
                return slot_ret;
        ws_session *s = xzalloc(sizeof(*s));
        s->slot = slot;
        s->srv = r->srv;
        s->box = xstrdup(box);
        s->tid = xstrdup(tid);
        s->scope = r->scope ? xstrdup(r->scope) : NULL;
        s->subprotocol = ours;
        s->sock = -1;
        char accept[WS_ACCEPT_LEN + 1];
        ws_accept(key, accept);
        /* When the client goes away before the 101 is sent, on_upgrade never
         * runs: s is then lost (a few bytes; libmicrohttpd tells us nothing). */
        struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgrade, s);
        MHD_add_response_header(resp, "Upgrade", "websocket");
        MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
        if (ours)
                MHD_add_response_header(resp, "Sec-WebSocket-Protocol", WS_PROTOCOL);
        /* through resp_send: the route runs on a worker, MHD's thread queues it */
        return resp_send(r, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}

/* GET /v1/sandboxes/{id}/terminals/{tid}: the terminal, or with
 * "Upgrade: websocket" its stream. */
enum MHD_Result route_term_get(ab_req *r, const char *id)
{
        const char *box = r->seg[2], *tid = r->seg[4];
        const char *up = req_header(r, "Upgrade");
        if (up && strcasecmp(up, "websocket") == 0)
                return ws_upgrade(r, box, tid);
        ab_err *e = NULL;
        abc_term_info t;
        if (ab_manager_term_get(r->srv->mgr, box, r->scope, tid, &t, &e) < 0)
                return resp_err(r, e);
        json_t *j = term_json(box, &t);
        abc_term_info_clear(&t);
        return resp_json(r, 200, j);
}
