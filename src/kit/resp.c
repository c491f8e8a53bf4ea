/* resp.c - answers: JSON and errors, streamed bodies, stream slots (kit/resp.h). */
#include "kit/server_int.h"
#include "base/id.h"
#include "base/jsonnum.h"
#include "base/log.h"
#include "base/util.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/socket.h>

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

/* X-Request-ID for a table that has it (ab_route_table.request_id). */
static void request_id(ab_req *r, struct MHD_Response *resp)
{
        if (!r->table || !r->table->request_id || MHD_get_response_header(resp, "X-Request-ID"))
                return;
        const char *h = req_header(r, "X-Request-ID");
        while (h && (*h == ' ' || *h == '\t'))
                h++;
        size_t n = h ? strlen(h) : 0;
        while (n && (h[n - 1] == ' ' || h[n - 1] == '\t'))
                n--;
        bool sane = n > 0 && n <= 256;
        for (size_t i = 0; sane && i < n; i++)
                sane = h[i] >= 0x20 && h[i] < 0x7f;
        char id[257];
        if (sane) {
                memcpy(id, h, n);
                id[n] = 0;
        } else {
                ab_random_hex(id, sizeof(id), "", 16);
        }
        MHD_add_response_header(resp, "X-Request-ID", id);
}

/* On a worker thread the response is kept in r and queued by MHD's thread
 * once the connection is resumed (MHD_queue_response belongs to the access
 * handler). */
enum MHD_Result kit_queue(ab_req *r, unsigned status, struct MHD_Response *resp)
{
        common_headers(resp);
        request_id(r, resp);
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
        return kit_queue(r, status, resp);
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
        return kit_queue(r, status, resp);
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
        return kit_queue(r, status, resp);
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

/* The threads of spawn_detached still running. They use the manager (an
 * exec, a file stream, a pull), which serve frees after ab_server_stop: the
 * stop waits for this to reach 0. */
static pthread_mutex_t spawn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t spawn_cv = PTHREAD_COND_INITIALIZER;
static size_t spawn_live;

typedef struct spawn_call {
        void *(*fn)(void *);
        void *arg;
} spawn_call;

static void spawn_done(void)
{
        pthread_mutex_lock(&spawn_lock);
        spawn_live--;
        pthread_cond_broadcast(&spawn_cv);
        pthread_mutex_unlock(&spawn_lock);
}

static void *spawn_main(void *p)
{
        spawn_call c = *(spawn_call *)p;
        free(p);
        c.fn(c.arg);
        spawn_done();
        return NULL;
}

int spawn_detached(void *(*fn)(void *), void *arg)
{
        spawn_call *c = xzalloc(sizeof(*c));
        c->fn = fn;
        c->arg = arg;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_mutex_lock(&spawn_lock);
        spawn_live++;
        pthread_mutex_unlock(&spawn_lock);
        pthread_t t;
        int rc = pthread_create(&t, &a, spawn_main, c);
        pthread_attr_destroy(&a);
        if (rc != 0) {
                free(c);
                spawn_done();
        }
        return -rc;
}

size_t spawn_wait(uint64_t timeout_ms)
{
        struct timespec end;
        clock_gettime(CLOCK_REALTIME, &end);
        end.tv_sec += (time_t)(timeout_ms / 1000);
        end.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (end.tv_nsec >= 1000000000L) {
                end.tv_sec++;
                end.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&spawn_lock);
        while (spawn_live && pthread_cond_timedwait(&spawn_cv, &spawn_lock, &end) != ETIMEDOUT)
                ;
        size_t left = spawn_live;
        pthread_mutex_unlock(&spawn_lock);
        return left;
}
