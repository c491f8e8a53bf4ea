/* Watches of the E2B front's envd (front_envd.c): WatchDir streams and the
 * watcher calls. A watch is inotify in the box, through its init (WATCH,
 * docs/protocol.md): create, write, remove, rename and chmod as they
 * happen, as E2B's envd reports them, recursive watches following new
 * subdirectories. A box whose init predates WATCH is polled instead: the
 * directory listed every WATCH_POLL_MS and the differences reported
 * (create, remove, write: mtime or size, chmod: mode). A watch never wakes a
 * paused box: it waits while the box does not run. */
#include "fronts/e2b/envd_int.h"
#include "base/log.h"
#include "base/id.h"
#include "proto/proto.h"

#include <fcntl.h>
#include <pthread.h>
#include <time.h>

#define WATCH_POLL_MS        200
#define WATCH_MAX_DEPTH      16
#define WATCHER_MAX_EVENTS   10000
#define MAX_WATCHERS_PER_BOX 16 /* CreateWatcher's (WatchDir's count as streams) */

/* ---- watches ------------------------------------------------------------ */

typedef struct watch {
        /* under watch_lock */
        struct watch *next;
        int refs;
        bool stop;
        char id[40];
        json_t *events; /* a watcher's queue (CreateWatcher), or NULL */
        int fd;         /* a WatchDir stream's write end, or -1 */
        /* the thread's */
        ab_server *srv;
        char *box, *path;
        bool recursive, include_entry;
        int init_fd; /* the inotify watch opened before the stream's start, or -1 */
        abc_dirent *prev;
        size_t n_prev;
} watch;

static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static watch *watches;

static void watch_unref(watch *w)
{
        pthread_mutex_lock(&watch_lock);
        bool last = --w->refs == 0;
        pthread_mutex_unlock(&watch_lock);
        if (!last)
                return;
        if (w->fd >= 0)
                close(w->fd);
        if (w->init_fd >= 0)
                close(w->init_fd);
        json_decref(w->events);
        abc_dirents_free(w->prev, w->n_prev);
        free(w->box);
        free(w->path);
        free(w);
}

/* One listing of the watched directory; -1 when the box is not running (a
 * paused box is left alone: a watch never wakes it). */
static int watch_list(watch *w, abc_dirent **out, size_t *n)
{
        ab_box_rec rec;
        if (ab_manager_get(w->srv->mgr, w->box, NULL, &rec, NULL) < 0)
                return -2; /* gone */
        ab_box_rec_clear(&rec);
        int rc = ab_manager_file_peek_list(w->srv->mgr, w->box, NULL, w->path,
                                           w->recursive ? WATCH_MAX_DEPTH : 1, out, n, NULL);
        return rc < 0 ? -1 : 0;
}

static const char *event_type_name(int t)
{
        static const char *const names[] = {"EVENT_TYPE_UNSPECIFIED", "EVENT_TYPE_CREATE",
                                            "EVENT_TYPE_WRITE",       "EVENT_TYPE_REMOVE",
                                            "EVENT_TYPE_RENAME",      "EVENT_TYPE_CHMOD"};
        return names[t];
}

/* Reports one change: to the stream, or into the watcher's queue. 0, or -1
 * when the stream's reader is gone. */
static int watch_emit(watch *w, const abc_dirent *d, int type)
{
        json_t *ev = json_pack("{s:o,s:s}", "name", json_bytes(d->path, strlen(d->path)), "type",
                               event_type_name(type));
        if (w->include_entry && type != 3) {
                _cleanup_free_ char *full = envd_abs_path(w->path, d->path);
                json_object_set_new(ev, "entry", envd_entry_info(full, &d->st));
        }
        pthread_mutex_lock(&watch_lock);
        int rc = 0;
        if (w->events) {
                if (json_array_size(w->events) < WATCHER_MAX_EVENTS)
                        json_array_append(w->events, ev);
        } else {
                _cleanup_buf_ ab_buf b = {0};
                crpc_envelope(&b, 0, json_pack("{s:O}", "filesystem", ev));
                rc = ab_write_all(w->fd, b.p, b.n) < 0 ? -1 : 0;
        }
        pthread_mutex_unlock(&watch_lock);
        json_decref(ev);
        return rc;
}

/* Compares two sorted listings and reports what changed. */
static int watch_diff(watch *w, abc_dirent *cur, size_t n)
{
        size_t i = 0, j = 0;
        while (i < w->n_prev || j < n) {
                int c = i == w->n_prev ? 1 : j == n ? -1 : strcmp(w->prev[i].path, cur[j].path);
                int rc = 0;
                if (c < 0) {
                        rc = watch_emit(w, &w->prev[i++], 3);
                } else if (c > 0) {
                        rc = watch_emit(w, &cur[j++], 1);
                } else {
                        const abc_stat *a = &w->prev[i].st, *b = &cur[j].st;
                        if (a->type != b->type) {
                                rc = watch_emit(w, &w->prev[i], 3);
                                if (rc == 0)
                                        rc = watch_emit(w, &cur[j], 1);
                        } else if (a->mtime != b->mtime || a->size != b->size) {
                                rc = watch_emit(w, &cur[j], 2);
                        } else if (a->mode != b->mode) {
                                rc = watch_emit(w, &cur[j], 5);
                        }
                        i++;
                        j++;
                }
                if (rc < 0)
                        return -1;
        }
        return 0;
}

static bool watch_stopped(watch *w)
{
        pthread_mutex_lock(&watch_lock);
        bool stop = w->stop;
        pthread_mutex_unlock(&watch_lock);
        return stop;
}

/* A keepalive on a quiet stream, every ENVD_KEEPALIVE_S: -1 when its reader
 * is gone. */
static int watch_keepalive(watch *w, uint64_t *last)
{
        if (w->fd < 0 || ab_now_ms() - *last <= ENVD_KEEPALIVE_S * 1000)
                return 0;
        *last = ab_now_ms();
        _cleanup_buf_ ab_buf b = {0};
        crpc_envelope(&b, 0, json_pack("{s:{}}", "keepalive"));
        pthread_mutex_lock(&watch_lock);
        int rc = ab_write_all(w->fd, b.p, b.n);
        pthread_mutex_unlock(&watch_lock);
        return rc < 0 ? -1 : 0;
}

/* The entry of name (relative to the watched directory) for includeEntry:
 * listed from its folder, as a watch reads without waking the box. */
static void event_stat(watch *w, const char *name, abc_stat *st)
{
        _cleanup_free_ char *full = envd_abs_path(w->path, name);
        char *slash = strrchr(full, '/');
        const char *base = slash + 1;
        _cleanup_free_ char *dir = slash == full ? xstrdup("/") : xstrndup(full, slash - full);
        abc_dirent *ents = NULL;
        size_t n = 0;
        if (ab_manager_file_peek_list(w->srv->mgr, w->box, NULL, dir, 1, &ents, &n, NULL) < 0)
                return;
        for (size_t i = 0; i < n; i++)
                if (!strcmp(ents[i].path, base)) {
                        *st = ents[i].st;
                        ents[i].st = (abc_stat){0};
                        break;
                }
        abc_dirents_free(ents, n);
}

typedef enum { WATCHED_END, WATCHED_RETRY, WATCHED_POLL } watched;

/* One inotify watch through the box's init, relayed until the watch must
 * stop, its reader goes (WATCHED_END), the box stops running (WATCHED_RETRY)
 * or its init has no WATCH (WATCHED_POLL). */
/* Opens the inotify watch of w into *fd: WATCHED_RETRY when it is open (or
 * the box does not run now), WATCHED_POLL for an init without WATCH,
 * WATCHED_END when the box or the directory is gone. */
static watched watch_open(watch *w, int *fd)
{
        ab_err *e = NULL;
        if (ab_manager_file_watch_open(w->srv->mgr, w->box, NULL, w->path, w->recursive, fd, &e) ==
            0)
                return WATCHED_RETRY;
        bool old = e->code == AB_E_INVALID && strstr(e->msg, "unknown request type");
        bool gone = e->code == AB_E_NOT_FOUND;
        ab_err_free(&e);
        return old ? WATCHED_POLL : gone ? WATCHED_END : WATCHED_RETRY;
}

static watched watch_inotify(watch *w, uint64_t *last_keepalive)
{
        int fd = steal_fd(&w->init_fd);
        ab_err *e = NULL;
        if (fd < 0) {
                watched how = watch_open(w, &fd);
                if (fd < 0)
                        return how;
        }
        abp_reader rd = {0};
        watched how = WATCHED_END;
        while (!watch_stopped(w)) {
                uint32_t kind;
                char *name;
                int k = abc_watch_next(fd, &rd, WATCH_POLL_MS, &kind, &name, &e);
                if (k < 0) { /* the box stopped, or the directory went */
                        ab_err_free(&e);
                        how = WATCHED_RETRY;
                        break;
                }
                if (k > 0) {
                        abc_dirent d = {.path = name};
                        if (w->include_entry && kind != ABP_WATCH_REMOVE &&
                            kind != ABP_WATCH_RENAME)
                                event_stat(w, name, &d.st);
                        int rc = watch_emit(w, &d, (int)kind);
                        abc_stat_clear(&d.st);
                        free(name);
                        if (rc < 0)
                                break;
                }
                if (watch_keepalive(w, last_keepalive) < 0)
                        break;
        }
        abp_reader_free(&rd);
        close(fd);
        return how;
}

/* The directory polled (an init without WATCH): until the watch must stop,
 * the box goes or the reader does. */
static void watch_poll(watch *w, uint64_t *last_keepalive)
{
        while (!watch_stopped(w)) {
                struct timespec ts = {0, WATCH_POLL_MS * 1000000L};
                nanosleep(&ts, NULL);
                abc_dirent *cur = NULL;
                size_t n = 0;
                int k = watch_list(w, &cur, &n);
                if (k == -2)
                        break;
                if (k == 0) {
                        int rc = watch_diff(w, cur, n);
                        abc_dirents_free(w->prev, w->n_prev);
                        w->prev = cur;
                        w->n_prev = n;
                        if (rc < 0)
                                break;
                }
                if (watch_keepalive(w, last_keepalive) < 0)
                        break;
        }
}

static void *watch_main(void *arg)
{
        watch *w = arg;
        uint64_t last_keepalive = ab_now_ms();
        for (;;) {
                watched how = watch_stopped(w) ? WATCHED_END : watch_inotify(w, &last_keepalive);
                if (how == WATCHED_POLL) {
                        if (!w->prev && watch_list(w, &w->prev, &w->n_prev) < 0) {
                                w->prev = NULL; /* a baseline at the first listing */
                                w->n_prev = 0;
                        }
                        watch_poll(w, &last_keepalive);
                }
                if (how != WATCHED_RETRY)
                        break;
                /* the box does not run now (paused, stopped): wait, never wake it */
                ab_box_rec rec;
                if (ab_manager_get(w->srv->mgr, w->box, NULL, &rec, NULL) < 0)
                        break; /* gone */
                ab_box_rec_clear(&rec);
                struct timespec ts = {0, WATCH_POLL_MS * 1000000L};
                nanosleep(&ts, NULL);
                if (watch_keepalive(w, &last_keepalive) < 0)
                        break;
        }
        pthread_mutex_lock(&watch_lock);
        for (watch **l = &watches; *l; l = &(*l)->next)
                if (*l == w) {
                        *l = w->next;
                        w->refs--;
                        break;
                }
        pthread_mutex_unlock(&watch_lock);
        if (w->fd >= 0) {
                _cleanup_buf_ ab_buf b = {0};
                crpc_end(&b, NULL, NULL);
                if (ab_write_all(w->fd, b.p, b.n) < 0) {
                        /* the reader is gone */
                }
        }
        watch_unref(w);
        return NULL;
}

/* Makes a watch of msg's path (checked to be a directory) and starts its
 * thread; NULL with *err. */
static watch *watch_new(ab_req *r, const char *box, json_t *msg, int fd, ab_err **err)
{
        const char *path = json_string_value(json_object_get(msg, "path"));
        if (!path || !*path) {
                ab_err_set(err, AB_E_INVALID, 0, "path: required");
                return NULL;
        }
        _cleanup_free_ char *abs = envd_call_path(envd_call_home(r, box), path, err);
        if (!abs)
                return NULL;
        abc_stat st = {0};
        char *real = NULL;
        if (envd_stat_follow(r->srv, box, r->scope, abs, &st, &real, err) < 0)
                return NULL;
        bool dir = st.type == ABC_DIR;
        abc_stat_clear(&st);
        if (!dir) {
                free(real);
                ab_err_set(err, AB_E_INVALID, 0, "%s is not a directory", path);
                return NULL;
        }
        watch *w = xzalloc(sizeof(*w));
        w->srv = r->srv;
        w->box = xstrdup(box);
        w->path = real; /* listed there; events name paths relative to it */
        w->recursive = json_is_true(json_object_get(msg, "recursive"));
        w->include_entry = json_is_true(json_object_get(msg, "includeEntry"));
        w->fd = fd;
        w->init_fd = -1;
        ab_random_hex(w->id, sizeof(w->id), "w", 8);
        /* watching before the stream starts: nothing done after the SDK's
         * watchDir returns is missed (a box not running: its thread waits) */
        watched how = watch_open(w, &w->init_fd);
        if (fd < 0)
                w->events = json_array();
        /* polling (an init without WATCH): the first listing is the
         * baseline, events are changes after it */
        if (how == WATCHED_POLL && watch_list(w, &w->prev, &w->n_prev) < 0) {
                w->prev = NULL;
                w->n_prev = 0;
        }
        w->refs = 2; /* the registry's and the thread's */
        pthread_mutex_lock(&watch_lock);
        w->next = watches;
        watches = w;
        pthread_mutex_unlock(&watch_lock);
        w->refs++; /* the caller's */
        if (spawn_detached(watch_main, w) < 0) {
                pthread_mutex_lock(&watch_lock);
                for (watch **l = &watches; *l; l = &(*l)->next)
                        if (*l == w) {
                                *l = w->next;
                                break;
                        }
                pthread_mutex_unlock(&watch_lock);
                w->fd = -1;
                w->refs = 1;
                watch_unref(w);
                ab_err_set(err, AB_E_UNAVAILABLE, 0, "cannot start a thread");
                return NULL;
        }
        return w;
}

enum MHD_Result envd_watch_dir(ab_req *r, const char *box, json_t *msg)
{
        enum MHD_Result ret;
        ab_stream_slot *slot = req_stream_slot(r, &ret);
        if (!slot)
                return ret;
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0) {
                ab_stream_slot_release(slot);
                return resp_error(r, 500, "internal", "pipe: %s", strerror(errno));
        }
        /* the start event goes first, before the thread can write */
        _cleanup_buf_ ab_buf b = {0};
        crpc_envelope(&b, 0, json_pack("{s:{}}", "start"));
        ab_err *e = NULL;
        watch *w = watch_new(r, box, msg, fds[1], &e);
        if (!w) {
                close(fds[1]);
                close(fds[0]);
                ab_stream_slot_release(slot);
                ret = envd_stream_error(r, crpc_code_of(e->code), e->msg);
                ab_err_free(&e);
                return ret;
        }
        pthread_mutex_lock(&watch_lock);
        int rc = ab_write_all(fds[1], b.p, b.n);
        pthread_mutex_unlock(&watch_lock);
        (void)rc;
        watch_unref(w);
        return resp_stream_counted(r, 200, "application/connect+json", fds[0], NULL, slot);
}

static watch *watch_find(const char *box, const char *id)
{
        pthread_mutex_lock(&watch_lock);
        watch *w = watches;
        while (w && (!w->events || w->stop || strcmp(w->id, id) || strcmp(w->box, box)))
                w = w->next;
        if (w)
                w->refs++;
        pthread_mutex_unlock(&watch_lock);
        return w;
}

enum MHD_Result envd_watcher_rpc(ab_req *r, const char *box, const char *method, json_t *msg)
{
        ab_err *e = NULL;
        if (!strcmp(method, "CreateWatcher")) {
                int n = 0;
                pthread_mutex_lock(&watch_lock);
                for (watch *q = watches; q; q = q->next)
                        n += q->events && !q->stop && !strcmp(q->box, box);
                pthread_mutex_unlock(&watch_lock);
                if (n >= MAX_WATCHERS_PER_BOX)
                        return envd_rpc_error(r, "resource_exhausted",
                                              "the sandbox has as many watchers as it may");
                watch *w = watch_new(r, box, msg, -1, &e);
                if (!w)
                        return envd_rpc_err(r, e);
                json_t *j = json_pack("{s:s}", "watcherId", w->id);
                watch_unref(w);
                return resp_json(r, 200, j);
        }
        const char *id = json_string_value(json_object_get(msg, "watcherId"));
        watch *w = id ? watch_find(box, id) : NULL;
        if (!w)
                return envd_rpc_error(r, "not_found", "watcher not found");
        json_t *j;
        pthread_mutex_lock(&watch_lock);
        if (!strcmp(method, "GetWatcherEvents")) {
                j = json_pack("{s:o}", "events", w->events);
                w->events = json_array();
        } else {
                w->stop = true;
                j = json_object();
        }
        pthread_mutex_unlock(&watch_lock);
        watch_unref(w);
        return resp_json(r, 200, j);
}

/* ---- shutdown ------------------------------------------------------------ */

void envd_watches_stop(void)
{
        for (int i = 0; i < 500; i++) { /* 5 s */
                pthread_mutex_lock(&watch_lock);
                bool busy = watches != NULL;
                for (watch *w = watches; w; w = w->next)
                        w->stop = true;
                pthread_mutex_unlock(&watch_lock);
                if (!busy)
                        break;
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
        }
}
