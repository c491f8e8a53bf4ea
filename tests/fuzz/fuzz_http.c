/* fuzz_http - libFuzzer target for HTTP request handling down to the routes
 * (kit/server.c and the route modules): the request head (method, target,
 * query string, headers, the Authorization header), routing and path ids,
 * body reading and limits, and each route with its body, all on the real
 * code. libmicrohttpd runs without a listening socket or threads
 * (ab_server_start_external); each input is written into one end of a
 * socketpair, that end is closed, and the other end is handed to the daemon
 * with MHD_add_connection, which is then run until the connection is done.
 * Closing the client's end first makes every request end: a stream (exec
 * output, /v1/events) stops at its first write.
 *
 * The first byte picks the client's address (loopback or not) and whether
 * the server has an admin token (without one, the Host, Origin and
 * content-type checks run; allowed_hosts is "devbox.lan" and
 * "[fd00::1]:8080") ("admin-token"; ports_domain is "sbx.fuzz:8443", so
 * 49983-box1.sbx.fuzz is box1's E2B envd; the API key "key-a" of app
 * "app-a" is always configured). The manager runs on an in-memory fake
 * backend (create/start/stop/pause/destroy only flip a state; connecting to
 * a box's init fails), so a request costs no box; the store is SQLite in a
 * scratch folder under /dev/shm, rebuilt every few thousand inputs so that
 * what inputs create does not pile up. The server keeps state across
 * inputs (events, the store, sessions), so libFuzzer's leak check after
 * each input is off for this target (tests/fuzz/fuzz_http.flags);
 * LeakSanitizer still checks the whole process when a run ends. An envd
 * access token is bound to one box's creation and app, so no seed can hold
 * a valid one: each world starts with box "box1" (of app "app-a"), and
 * every "@BOX1-TOKEN@" in an input is replaced by box1's current token
 * (when box1 exists), so that envd seeds reach the Connect and multipart
 * parsers past the token check.
 * Build and run with scripts/fuzz.sh. */
#include "fronts/e2b/front_e2b.h"
#include "kit/server.h"
#include "fronts/e2b/e2b.h"
#include "fronts/opensandbox/opensandbox.h"
#include "rest/rest.h"
#include "http/workers.h"
#include "base/log.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__asan_default_options(void);

/* ASan's default quarantine (256 MiB of freed memory held back) made every
 * request touch fresh pages: 5x the CPU per input. 16 MiB still holds the
 * memory of hundreds of requests. */
const char *__asan_default_options(void)
{
        return "quarantine_size_mb=16";
}

#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

/* ---- fake backend: box states in memory ------------------------------- */

#define MAX_FAKE 256

typedef struct fbox {
        char id[72];
        ab_box_status status;
        bool used;
} fbox;

typedef struct fake {
        ab_backend base;
        pthread_mutex_t lock;
        fbox boxes[MAX_FAKE];
} fake;

static fbox *find(fake *f, const char *id)
{
        for (int i = 0; i < MAX_FAKE; i++)
                if (f->boxes[i].used && !strcmp(f->boxes[i].id, id))
                        return &f->boxes[i];
        return NULL;
}

static int f_create(ab_backend *b, const ab_box_spec *spec, ab_err **err)
{
        fake *f = (fake *)b;
        int rc = ab_err_set(err, AB_E_UNAVAILABLE, 0, "the fake backend is full");
        pthread_mutex_lock(&f->lock);
        if (find(f, spec->id)) {
                ab_err_free(err);
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "exists");
        } else {
                for (int i = 0; i < MAX_FAKE; i++)
                        if (!f->boxes[i].used) {
                                f->boxes[i].used = true;
                                snprintf(f->boxes[i].id, sizeof(f->boxes[i].id), "%s", spec->id);
                                f->boxes[i].status = AB_BOX_RUNNING;
                                ab_err_free(err);
                                rc = 0;
                                break;
                        }
        }
        pthread_mutex_unlock(&f->lock);
        return rc;
}

/* Pause and resume as the native backend does them: AB_E_CONFLICT when the
 * box does not run. */
static int set_status(ab_backend *b, const char *id, ab_box_status want, bool frozen_op,
                      ab_err **err)
{
        fake *f = (fake *)b;
        pthread_mutex_lock(&f->lock);
        fbox *x = find(f, id);
        int rc = 0;
        if (!x)
                rc = ab_err_set(err, AB_E_NOT_FOUND, 0, "no box");
        else if (frozen_op && x->status != AB_BOX_RUNNING && x->status != AB_BOX_PAUSED)
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' is not running", id);
        else
                x->status = want;
        pthread_mutex_unlock(&f->lock);
        return rc;
}

static int f_start(ab_backend *b, const char *id, ab_err **err)
{
        return set_status(b, id, AB_BOX_RUNNING, false, err);
}

static int f_stop(ab_backend *b, const char *id, ab_err **err)
{
        return set_status(b, id, AB_BOX_STOPPED, false, err);
}

static int f_pause(ab_backend *b, const char *id, ab_err **err)
{
        return set_status(b, id, AB_BOX_PAUSED, true, err);
}

static int f_resume(ab_backend *b, const char *id, ab_err **err)
{
        return set_status(b, id, AB_BOX_RUNNING, true, err);
}

static int f_destroy(ab_backend *b, const char *id, ab_err **err)
{
        fake *f = (fake *)b;
        pthread_mutex_lock(&f->lock);
        fbox *x = find(f, id);
        if (x)
                x->used = false;
        pthread_mutex_unlock(&f->lock);
        return x ? 0 : ab_err_set(err, AB_E_NOT_FOUND, 0, "no box");
}

static int f_info(ab_backend *b, const char *id, ab_box_info *out, ab_err **err)
{
        fake *f = (fake *)b;
        memset(out, 0, sizeof(*out));
        pthread_mutex_lock(&f->lock);
        fbox *x = find(f, id);
        if (x) {
                out->id = xstrdup(id);
                out->status = x->status;
                ab_limits_default(&out->limits);
        }
        pthread_mutex_unlock(&f->lock);
        return x ? 0 : ab_err_set(err, AB_E_NOT_FOUND, 0, "no box");
}

static int f_list(ab_backend *b, ab_box_info **out, size_t *n, ab_err **err)
{
        fake *f = (fake *)b;
        pthread_mutex_lock(&f->lock);
        *out = xcalloc(MAX_FAKE, sizeof(ab_box_info));
        *n = 0;
        for (int i = 0; i < MAX_FAKE; i++)
                if (f->boxes[i].used) {
                        ab_box_info *o = &(*out)[(*n)++];
                        o->id = xstrdup(f->boxes[i].id);
                        o->status = f->boxes[i].status;
                        ab_limits_default(&o->limits);
                }
        pthread_mutex_unlock(&f->lock);
        return 0;
}

static int f_connect(ab_backend *b, const char *id, ab_err **err)
{
        return ab_err_set(err, AB_E_UNAVAILABLE, 0, "the fake backend has no init");
}

static int f_stats(ab_backend *b, const char *id, ab_box_stats *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        return 0;
}

static void f_free(ab_backend *b)
{
}

static const ab_backend_ops fake_ops = {
    .name = "native",
    .create = f_create,
    .start = f_start,
    .stop = f_stop,
    .pause = f_pause,
    .resume = f_resume,
    .destroy = f_destroy,
    .info = f_info,
    .list = f_list,
    .connect = f_connect,
    .stats = f_stats,
    .free = f_free,
};

/* ---- the server -------------------------------------------------------- */

#define INPUTS_PER_WORLD 5000

typedef struct world {
        fake backend;
        ab_config cfg;
        ab_store *store;
        ab_events *events;
        ab_metrics *metrics;
        ab_manager *mgr;
        ab_server srv;
        char dir[64];
        unsigned inputs;
} world;

static world *W;

static void world_free(world *w)
{
        ab_server_stop(&w->srv);
        ab_manager_free(w->mgr);
        ab_events_free(w->events);
        ab_metrics_free(w->metrics);
        ab_store_close(w->store);
        free(w->srv.tmp_dir);
        _cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", w->dir);
        check(system(cmd) == 0);
        ab_config_release(&w->cfg);
        free(w);
}

static world *world_new(void)
{
        world *w = xzalloc(sizeof(*w));
        w->backend.base.ops = &fake_ops;
        pthread_mutex_init(&w->backend.lock, NULL);
        snprintf(w->dir, sizeof(w->dir), "/dev/shm/ab-fuzz-http.XXXXXX");
        check(mkdtemp(w->dir) != NULL);
        ab_config_default(&w->cfg);
        free(w->cfg.data_dir);
        w->cfg.data_dir = xstrdup(w->dir);
        w->cfg.max_upload = 1 << 20;
        w->cfg.max_body = 64 << 10;
        w->cfg.n_keys = 1;
        w->cfg.keys = xcalloc(1, sizeof(*w->cfg.keys));
        w->cfg.keys[0].key = xstrdup("key-a");
        w->cfg.keys[0].app_id = xstrdup("app-a");
        /* a server without a token answers these Hosts besides loopback ones */
        w->cfg.n_allowed_hosts = 2;
        w->cfg.allowed_hosts = xcalloc(3, sizeof(char *));
        w->cfg.allowed_hosts[0] = xstrdup("devbox.lan");
        w->cfg.allowed_hosts[1] = xstrdup("[fd00::1]:8080");
        /* box host names: PORT-ID.sbx.fuzz (E2B's envd on 49983) */
        free(w->cfg.ports_domain);
        w->cfg.ports_domain = xstrdup("sbx.fuzz:8443");
        ab_err *e = NULL;
        check(ab_store_open(NULL, w->dir, &w->store, &e) == 0);
        w->events = ab_events_new(256);
        w->metrics = ab_metrics_new();
        ab_manager_opts mo = {
            .backend = &w->backend.base,
            .store = w->store,
            .events = w->events,
            .metrics = w->metrics,
            .limits = w->cfg.limits,
            .reaper_interval_ms = 3600 * 1000,
        };
        check(ab_manager_open(&mo, &w->mgr, &e) == 0);
        /* box1, whose envd token replaces @BOX1-TOKEN@ in the inputs */
        ab_acquire_req q = {.id = "box1"};
        ab_box_rec rec;
        bool created;
        check(ab_manager_acquire(w->mgr, &q, "app-a", &rec, &created, &e) == 0);
        ab_box_rec_clear(&rec);
        w->srv = (ab_server){.cfg = &w->cfg,
                             .mgr = w->mgr,
                             .store = w->store,
                             .events = w->events,
                             .metrics = w->metrics,
                             .backend = &w->backend.base,
                             .started_ns = ab_now_ns()};
        w->srv.tmp_dir = xasprintf("%s/tmp", w->dir);
        check(mkdir(w->srv.tmp_dir, 0700) == 0);
        ab_server_add_routes(&w->srv, &ab_rest_routes);
        ab_server_add_routes(&w->srv, &ab_e2b_routes);
        ab_server_add_routes(&w->srv, &ab_osb_routes);
        check(ab_server_start_external(&w->srv, &e) == 0);
        return w;
}

#define BOX1_TOKEN "@BOX1-TOKEN@"

/* data with each BOX1_TOKEN replaced by box1's envd access token (data
 * itself when there is none, or box1 does not exist now). */
static uint8_t *with_box1_token(const uint8_t *data, size_t size, size_t *out_size)
{
        const size_t pl = strlen(BOX1_TOKEN);
        *out_size = size;
        if (!memmem(data, size, BOX1_TOKEN, pl))
                return NULL;
        ab_box_rec rec;
        char tok[E2B_TOKEN_MAX + 1];
        if (ab_manager_get(W->mgr, "box1", NULL, &rec, NULL) < 0)
                return NULL;
        int rc = e2b_access_token(&W->srv, &rec, NULL, tok, NULL);
        ab_box_rec_clear(&rec);
        if (rc < 0)
                return NULL;
        ab_buf b = {0};
        const uint8_t *p = data, *end = data + size, *hit;
        while ((hit = memmem(p, (size_t)(end - p), BOX1_TOKEN, pl))) {
                ab_buf_add(&b, p, (size_t)(hit - p));
                ab_buf_add(&b, tok, E2B_TOKEN_LEN);
                p = hit + pl;
        }
        ab_buf_add(&b, p, (size_t)(end - p));
        *out_size = b.n;
        return (uint8_t *)b.p;
}

static unsigned connections(struct MHD_Daemon *d)
{
        const union MHD_DaemonInfo *i = MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        check(i != NULL);
        return i->num_connections;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1 || size > 128 * 1024)
                return 0;
        if (!W) {
                signal(SIGPIPE, SIG_IGN);
                ab_log_set_level(AB_LOG_ERROR + 1);
        }
        if (!W || W->inputs++ >= INPUTS_PER_WORLD) {
                if (W)
                        world_free(W);
                W = world_new();
        }
        uint8_t flags = data[0];
        free(W->cfg.token);
        W->cfg.token = (flags & 2) ? xstrdup("admin-token") : NULL;

        int sv[2];
        check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        int buf = 512 * 1024;
        setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
        setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
        size_t n;
        _cleanup_free_ uint8_t *sub = with_box1_token(data + 1, size - 1, &n);
        check(ab_write_all(sv[0], sub ? sub : data + 1, n) == 0);

        struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons(40000)};
        peer.sin_addr.s_addr = htonl((flags & 1) ? 0x7f000001 : 0xc0000201); /* 192.0.2.1 */
        check(MHD_add_connection(W->srv.http.mhd, sv[1], (struct sockaddr *)&peer, sizeof(peer)) ==
              MHD_YES);
        uint64_t t0 = ab_now_ns();
        /* The client's end closes (the request ends there; answers are not
         * read) once no handler has run for a few rounds, or after 200 ms:
         * closed at once, a request whose auth runs on a worker (an envd
         * token, an API key from the store) would find the connection
         * closed when it resumes, before its body is read. */
        int client = sv[0];
        unsigned idle = 0;
        for (unsigned spins = 0; client >= 0 || connections(W->srv.http.mhd) > 0; spins++) {
                MHD_run(W->srv.http.mhd);
                idle = ab_workers_in_flight(W->srv.http.workers) ? 0 : idle + 1;
                if (client >= 0 && (idle >= 8 || ab_now_ns() - t0 > 200ull * 1000 * 1000)) {
                        close(client);
                        client = -1;
                }
                if (spins > 16) {
                        struct timespec ts = {0, 100 * 1000};
                        nanosleep(&ts, NULL);
                }
                /* a request whose client is gone must end */
                check(ab_now_ns() - t0 < 20ull * 1000 * 1000 * 1000);
        }
        return 0;
}
