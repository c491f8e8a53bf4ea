/* The sandbox manager (see manager.h). Threads: the reaper (idle stop, TTL,
 * LRU cap, drift between store and backend), the pool filler, the resource
 * sampler, and two deleters working off the deletion queue. */
#include "core/manager.h"
#include "base/log.h"
#include "base/id.h"
#include "net/net.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define N_BUCKETS        256
#define N_DELETERS       2
#define WAIT_OTHER_MS    60000 /* how long an acquire waits for another process' create/delete */
#define STALE_CREATE_MS  60000 /* a "creating" row this old with no box is a crashed create */
#define POOL_BACKOFF_MS  5000
#define POOL_PREFIX      "pool-"
#define SYSTEM_PREFIX    "sys-" /* the server's own boxes (code runners): not managed here */
#define EVENT_CMD_MAX    1000
#define PROVIDER_DEFAULT "native"

typedef struct slot {
        struct slot *next;
        char *id;
        pthread_mutex_t lock; /* serialises lifecycle operations on the box */
        int refs;             /* under m->slots_lock */
        atomic_int inflight;  /* uses in progress */
} slot;

typedef struct del_job {
        struct del_job *next;
        char *id;
} del_job;

struct ab_manager {
        ab_manager_opts o;
        const char *provider;
        pthread_mutex_t slots_lock;
        slot *buckets[N_BUCKETS];
        atomic_int_fast64_t inflight_total;

        pthread_mutex_t lock; /* guards the queues and `stopping` */
        pthread_cond_t wake;  /* reaper, pool and sampler sleep on it */
        pthread_cond_t del_wake;
        del_job *del_head, *del_tail;
        bool stopping;
        bool pool_wanted;

        pthread_t reaper, pooler, sampler, deleters[N_DELETERS];
        bool have_reaper, have_pooler, have_sampler;
        int n_deleters;

        pthread_mutex_t counts_lock;
        pthread_mutex_t cap_lock; /* one enforcement of the running-box cap at a time */
        uint64_t counts_at_ns;
        ab_manager_counts counts_cache;
};

static int64_t wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- who is creating a box ------------------------------------------- */

static char boot_id[64];

static void read_boot(void)
{
        FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
        if (f) {
                if (!fgets(boot_id, sizeof(boot_id), f))
                        boot_id[0] = 0;
                fclose(f);
        }
        boot_id[strcspn(boot_id, "\n")] = 0;
}

/* "BOOT_ID:PID:STARTTIME" of a process: unique on this machine across pid reuse and reboots. */
static bool process_identity(pid_t pid, char *out, size_t len)
{
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, read_boot);
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return false;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        char *p = strrchr(buf, ')');
        unsigned long long start = 0;
        /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
         * utime stime cutime cstime priority nice threads itrealvalue starttime */
        if (!p || sscanf(p + 2,
                         "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                         "%*d %*d %*d %*d %llu",
                         &start) != 1)
                return false;
        snprintf(out, len, "%s:%d:%llu", boot_id, (int)pid, start);
        return true;
}

/* True when the process named by `creator` (process_identity) surely no
 * longer runs: same machine and boot, and that pid is gone or is another
 * process. A creator on another machine is never declared dead. */
static bool creator_dead(const char *creator)
{
        if (!creator)
                return false;
        char cur[160];
        unsigned long long start;
        int pid;
        const char *c1 = strchr(creator, ':');
        if (!c1 || sscanf(c1 + 1, "%d:%llu", &pid, &start) != 2 || pid <= 0)
                return false;
        if (!process_identity(getpid(), cur, sizeof(cur)) ||
            strncmp(cur, creator, (size_t)(c1 - creator) + 1) != 0)
                return false; /* another boot or machine: cannot tell */
        if (!process_identity(pid, cur, sizeof(cur)))
                return true;
        return strcmp(cur, creator) != 0;
}

static char *rec_creator(const ab_box_rec *r)
{
        json_t *spec = r->spec ? json_loads(r->spec, 0, NULL) : NULL;
        const char *c = json_string_value(json_object_get(spec, "creator"));
        char *out = c ? xstrdup(c) : NULL;
        json_decref(spec);
        return out;
}

/* ---- ids -------------------------------------------------------------- */

static void sha_hex16(const char *s, char out[17])
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (!EVP_Digest(s, strlen(s), md, &len, EVP_sha256(), NULL))
                abort();
        static const char hex[] = "0123456789abcdef";
        for (int i = 0; i < 8; i++) {
                out[2 * i] = hex[md[i] >> 4];
                out[2 * i + 1] = hex[md[i] & 15];
        }
        out[16] = 0;
}

void ab_manager_key_id(const char *app_id, const char *user_id, const char *chat_id, char out[17])
{
        _cleanup_free_ char *s = xasprintf("%s-%s-%s", app_id, user_id, chat_id);
        sha_hex16(s, out);
}

void ab_manager_thread_id(const char *thread_id, char out[17])
{
        sha_hex16(thread_id, out);
}

/* ---- per-box slots ---------------------------------------------------- */

static unsigned hash_id(const char *s)
{
        unsigned h = 5381;
        for (; *s; s++)
                h = h * 33u + (unsigned char)*s;
        return h % N_BUCKETS;
}

static slot *slot_get(ab_manager *m, const char *id)
{
        pthread_mutex_lock(&m->slots_lock);
        slot **b = &m->buckets[hash_id(id)];
        slot *s = *b;
        while (s && strcmp(s->id, id))
                s = s->next;
        if (!s) {
                s = xzalloc(sizeof(*s));
                s->id = xstrdup(id);
                pthread_mutex_init(&s->lock, NULL);
                s->next = *b;
                *b = s;
        }
        s->refs++;
        pthread_mutex_unlock(&m->slots_lock);
        return s;
}

static void slot_put(ab_manager *m, slot *s)
{
        pthread_mutex_lock(&m->slots_lock);
        if (--s->refs == 0) {
                slot **p = &m->buckets[hash_id(s->id)];
                while (*p != s)
                        p = &(*p)->next;
                *p = s->next;
                pthread_mutex_destroy(&s->lock);
                free(s->id);
                free(s);
        }
        pthread_mutex_unlock(&m->slots_lock);
}

/* ---- events ----------------------------------------------------------- */

static void emit(ab_manager *m, const char *type, const ab_box_rec *r, json_t *data)
{
        if (!data)
                data = json_object();
        if (r && r->mode)
                json_object_set_new(data, "mode", json_string(r->mode));
        ab_events_emit(m->o.events, type, r ? r->id : NULL, r ? r->app_id : NULL, data);
}

/* ---- record helpers --------------------------------------------------- */

static json_t *limits_to_json(const ab_limits *l)
{
        return json_pack("{s:f,s:I,s:I,s:I,s:I}", "cpus", l->cpus, "memory_mib",
                         (json_int_t)l->memory_mib, "pids", (json_int_t)l->pids, "disk_mib",
                         (json_int_t)l->disk_mib, "timeout_s", (json_int_t)l->timeout_s);
}

static void limits_from_rec(const ab_manager *m, const ab_box_rec *r, ab_limits *l)
{
        *l = m->o.limits;
        if (!r->limits)
                return;
        json_t *j = json_loads(r->limits, 0, NULL);
        if (!j)
                return;
        json_t *v;
        if ((v = json_object_get(j, "cpus")) && json_is_number(v))
                l->cpus = json_number_value(v);
        if ((v = json_object_get(j, "memory_mib")) && json_is_integer(v))
                l->memory_mib = (uint64_t)json_integer_value(v);
        if ((v = json_object_get(j, "pids")) && json_is_integer(v))
                l->pids = (uint64_t)json_integer_value(v);
        if ((v = json_object_get(j, "disk_mib")) && json_is_integer(v))
                l->disk_mib = (uint64_t)json_integer_value(v);
        if ((v = json_object_get(j, "timeout_s")) && json_is_integer(v))
                l->timeout_s = (uint32_t)json_integer_value(v);
        json_decref(j);
}

static char *dump(json_t *j)
{
        char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        if (!s)
                abort();
        return s;
}

static bool is_pool(const ab_box_rec *r)
{
        return r->mode && !strcmp(r->mode, "pool");
}

static bool is_task(const ab_box_rec *r)
{
        return r->mode && !strcmp(r->mode, "task");
}

static bool status_is(const ab_box_rec *r, const char *s)
{
        return r->status && !strcmp(r->status, s);
}

static bool scope_ok(const ab_box_rec *r, const char *scope)
{
        return !scope || (r->app_id && !strcmp(r->app_id, scope));
}

/* Hands e to the caller's err (or frees it); returns -1. */
static int propagate(ab_err **err, ab_err *e)
{
        if (err && !*err)
                *err = e;
        else
                ab_err_free(&e);
        return -1;
}

static int get_scoped(ab_manager *m, const char *id, const char *scope, ab_box_rec *out,
                      ab_err **err)
{
        if (!ab_id_valid(id))
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box \"%s\"", id);
        ab_err *e = NULL;
        if (ab_store_box_get(m->o.store, m->provider, id, out, &e) < 0) {
                if (e->code == AB_E_NOT_FOUND) {
                        ab_err_free(&e);
                        return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box \"%s\"", id);
                }
                return propagate(err, e);
        }
        if (!scope_ok(out, scope) || is_pool(out)) {
                ab_box_rec_clear(out);
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box \"%s\"", id);
        }
        return 0;
}

/* ---- backend state ---------------------------------------------------- */

/* Records a new status (store) and tells subscribers. */
static void set_status(ab_manager *m, ab_box_rec *r, const char *status, const char *error)
{
        _cleanup_err_ ab_err *e = NULL;
        if (ab_store_box_set_status(m->o.store, m->provider, r->id, status, NULL, error, &e) < 0)
                ab_log(AB_LOG_WARN, "store: cannot record box status", "box", r->id, "status",
                       status, "error", e->msg, NULL);
        free(r->status);
        r->status = xstrdup(status);
        free(r->error);
        r->error = error ? xstrdup(error) : NULL;
}

/* The policy recorded in the box's spec (mode none when absent). */
static void rec_policy(const ab_box_rec *r, ab_netpol *out)
{
        memset(out, 0, sizeof(*out));
        json_t *spec = r->spec ? json_loads(r->spec, 0, NULL) : NULL;
        if (spec && ab_netpol_parse(json_object_get(spec, "network"), out, NULL) < 0)
                memset(out, 0, sizeof(*out));
        json_decref(spec);
}

/* Makes the running box's network match its recorded policy. init_pid 0 =
 * ask the backend. Caller holds the slot lock. */
static int net_sync(ab_manager *m, const ab_box_rec *r, pid_t init_pid, bool thorough, ab_err **err)
{
        if (!m->o.net)
                return 0;
        ab_netpol pol;
        rec_policy(r, &pol);
        int rc = 0;
        if (pol.mode != AB_NET_NONE || thorough || ab_net_active(m->o.net, r->id)) {
                if (!init_pid) {
                        ab_box_info info;
                        if (m->o.backend->ops->info(m->o.backend, r->backend_id, &info, err) < 0) {
                                ab_netpol_clear(&pol);
                                return -1;
                        }
                        init_pid = info.init_pid;
                        ab_box_info_clear(&info);
                }
                rc = init_pid
                         ? ab_net_apply(m->o.net, r->id, r->app_id, init_pid, &pol, thorough, err)
                         : ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s is not running", r->id);
        }
        ab_netpol_clear(&pol);
        if (rc < 0) {
                ab_log(AB_LOG_WARN, "box network not applied", "box", r->id, "error",
                       err && *err ? (*err)->msg : "?", NULL);
                emit(m, "box.error", r,
                     json_pack("{s:s}", "error", err && *err ? (*err)->msg : "network"));
        }
        return rc;
}

/* Makes the box's backend run it. Caller holds the slot lock. Returns 1 when
 * it had to start the box, 0 when it ran already, -1 on failure. */
static int ensure_running(ab_manager *m, ab_box_rec *r, ab_err **err)
{
        ab_backend *b = m->o.backend;
        ab_box_info info;
        ab_err *e = NULL;
        if (b->ops->info(b, r->backend_id, &info, &e) < 0) {
                if (e->code == AB_E_NOT_FOUND) {
                        ab_err_free(&e);
                        _cleanup_free_ char *msg =
                            xasprintf("the backend has no box \"%s\" any more (its disk is gone)",
                                      r->backend_id);
                        set_status(m, r, "error", msg);
                        emit(m, "box.error", r, json_pack("{s:s}", "error", msg));
                        return ab_err_set(err, AB_E_UNAVAILABLE, 0, "%s", msg);
                }
                ab_err_wrap(&e, "box %s", r->id);
                if (err && !*err)
                        *err = e;
                else
                        ab_err_free(&e);
                return -1;
        }
        bool running = info.status == AB_BOX_RUNNING;
        pid_t pid = info.init_pid;
        ab_box_info_clear(&info);
        if (running) {
                if (!status_is(r, "running"))
                        set_status(m, r, "running", NULL);
                return net_sync(m, r, pid, false, err) < 0 ? -1 : 0;
        }
        uint64_t t0 = ab_now_ns();
        int started = 0;
        if (b->ops->start(b, r->backend_id, &e) < 0) {
                ab_metrics_op(m->o.metrics, "start", false);
                set_status(m, r, "stopped", e->msg);
                emit(m, "box.error", r, json_pack("{s:s}", "error", e->msg));
                ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s cannot start: %s", r->id, e->msg);
                ab_err_free(&e);
                return -1;
        }
        ab_metrics_op(m->o.metrics, "start", true);
        set_status(m, r, "running", NULL);
        started = 1;
        emit(m, "box.started", r,
             json_pack("{s:I}", "duration_ms", (json_int_t)((ab_now_ns() - t0) / 1000000)));
        if (net_sync(m, r, 0, false, err) < 0)
                return -1;
        return started;
}

/* Stops the box (caller holds the slot lock). */
static int stop_locked(ab_manager *m, ab_box_rec *r, const char *reason, ab_err **err)
{
        ab_backend *b = m->o.backend;
        if (b->ops->stop(b, r->backend_id, err) < 0) {
                ab_metrics_op(m->o.metrics, "stop", false);
                return -1;
        }
        if (m->o.net)
                ab_net_release(m->o.net, r->id);
        ab_metrics_op(m->o.metrics,
                      !strcmp(reason, "idle")  ? "idle_stop"
                      : !strcmp(reason, "lru") ? "lru_stop"
                                               : "stop",
                      true);
        set_status(m, r, "stopped", NULL);
        emit(m, "box.stopped", r, json_pack("{s:s}", "reason", reason));
        ab_log(AB_LOG_INFO, "box stopped", "box", r->id, "reason", reason, NULL);
        return 0;
}

/* ---- deletion --------------------------------------------------------- */

static void queue_delete(ab_manager *m, const char *id)
{
        del_job *j = xzalloc(sizeof(*j));
        j->id = xstrdup(id);
        pthread_mutex_lock(&m->lock);
        if (m->del_tail)
                m->del_tail->next = j;
        else
                m->del_head = j;
        m->del_tail = j;
        pthread_cond_signal(&m->del_wake);
        pthread_mutex_unlock(&m->lock);
}

/* Marks r deleting and queues it (caller holds the slot lock). */
static void delete_locked(ab_manager *m, ab_box_rec *r)
{
        if (!status_is(r, "deleting")) {
                set_status(m, r, "deleting", NULL);
                emit(m, "box.deleting", r, NULL);
        }
        queue_delete(m, r->id);
}

static void destroy_now(ab_manager *m, const char *id)
{
        slot *s = slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        ab_box_rec r = {0};
        _cleanup_err_ ab_err *e = NULL;
        if (ab_store_box_get(m->o.store, m->provider, id, &r, &e) < 0)
                goto out; /* gone already */
        if (!status_is(&r, "deleting"))
                goto out; /* re-acquired meanwhile? never: acquire waits. Be safe. */
        ab_backend *b = m->o.backend;
        if (m->o.net)
                ab_net_release(m->o.net, id);
        if (b->ops->destroy(b, r.backend_id, &e) < 0 && e->code != AB_E_NOT_FOUND) {
                ab_metrics_op(m->o.metrics, "destroy", false);
                ab_log(AB_LOG_ERROR, "cannot destroy box", "box", id, "error", e->msg, NULL);
                set_status(m, &r, "error", e->msg);
                emit(m, "box.error", &r, json_pack("{s:s}", "error", e->msg));
                goto out;
        }
        ab_err_free(&e);
        ab_metrics_op(m->o.metrics, "destroy", true);
        if (ab_store_box_delete(m->o.store, m->provider, id, &e) < 0)
                ab_log(AB_LOG_ERROR, "store: cannot delete box record", "box", id, "error", e->msg,
                       NULL);
        emit(m, "box.deleted", &r, NULL);
        ab_log(AB_LOG_INFO, "box deleted", "box", id, NULL);
out:
        ab_box_rec_clear(&r);
        pthread_mutex_unlock(&s->lock);
        slot_put(m, s);
}

static void *deleter_main(void *arg)
{
        ab_manager *m = arg;
        pthread_mutex_lock(&m->lock);
        for (;;) {
                while (!m->del_head && !m->stopping)
                        pthread_cond_wait(&m->del_wake, &m->lock);
                if (!m->del_head)
                        break; /* stopping, queue drained */
                del_job *j = m->del_head;
                m->del_head = j->next;
                if (!m->del_head)
                        m->del_tail = NULL;
                pthread_mutex_unlock(&m->lock);
                destroy_now(m, j->id);
                free(j->id);
                free(j);
                pthread_mutex_lock(&m->lock);
        }
        pthread_mutex_unlock(&m->lock);
        return NULL;
}

/* ---- LRU cap ---------------------------------------------------------- */

static int cmp_active(const void *a, const void *b)
{
        const ab_box_rec *x = a, *y = b;
        return (x->last_active_at > y->last_active_at) - (x->last_active_at < y->last_active_at);
}

/* Stops least-recently-active idle boxes while more than max_running run. */
static void enforce_cap(ab_manager *m, const char *keep)
{
        if (m->o.max_running <= 0)
                return;
        /* Two enforcements at once would each stop a box for the same excess. */
        pthread_mutex_lock(&m->cap_lock);
        ab_box_filter f = {.provider = m->provider, .status = "running"};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        _cleanup_err_ ab_err *e = NULL;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, &e) < 0) {
                pthread_mutex_unlock(&m->cap_lock);
                return;
        }
        size_t running = 0;
        for (size_t i = 0; i < n; i++)
                running += !is_pool(&rs[i]);
        qsort(rs, n, sizeof(*rs), cmp_active);
        for (size_t i = 0; i < n && running > (size_t)m->o.max_running; i++) {
                if (is_pool(&rs[i]) || (keep && !strcmp(rs[i].id, keep)))
                        continue;
                slot *s = slot_get(m, rs[i].id);
                if (atomic_load(&s->inflight) == 0 && pthread_mutex_trylock(&s->lock) == 0) {
                        ab_box_rec r = {0};
                        if (ab_store_box_get(m->o.store, m->provider, rs[i].id, &r, NULL) == 0 &&
                            status_is(&r, "running") && atomic_load(&s->inflight) == 0) {
                                ab_err *se = NULL;
                                if (stop_locked(m, &r, "lru", &se) == 0)
                                        running--;
                                ab_err_free(&se);
                        }
                        ab_box_rec_clear(&r);
                        pthread_mutex_unlock(&s->lock);
                }
                slot_put(m, s);
        }
        ab_box_recs_free(rs, n);
        pthread_mutex_unlock(&m->cap_lock);
}

/* A "creating" row whose creator died: keeps the box if the backend finished
 * making it, else drops the row. Returns true when something changed. */
static bool recover_creating(ab_manager *m, ab_box_rec *r)
{
        ab_backend *b = m->o.backend;
        ab_box_info info;
        ab_err *e = NULL;
        int ir = b->ops->info(b, r->backend_id, &info, &e);
        bool missing = ir < 0 && e->code == AB_E_NOT_FOUND;
        ab_err_free(&e);
        if (ir < 0 && !missing)
                return false;
        if (missing || info.status == AB_BOX_CREATING) {
                if (!missing)
                        b->ops->destroy(b, r->backend_id, NULL);
                ab_store_box_delete(m->o.store, m->provider, r->id, NULL);
                ab_log(AB_LOG_INFO, "dropped a create that never finished", "box", r->id, NULL);
        } else {
                set_status(m, r, info.status == AB_BOX_RUNNING ? "running" : "stopped", NULL);
                ab_log(AB_LOG_INFO, "kept a box whose creator died after making it", "box", r->id,
                       NULL);
        }
        if (!missing)
                ab_box_info_clear(&info);
        return true;
}

/* ---- acquire ---------------------------------------------------------- */

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static bool limits_equal(const ab_limits *a, const ab_limits *b)
{
        return a->cpus == b->cpus && a->memory_mib == b->memory_mib && a->pids == b->pids &&
               a->disk_mib == b->disk_mib && a->timeout_s == b->timeout_s;
}

static void wake_pool(ab_manager *m)
{
        pthread_mutex_lock(&m->lock);
        m->pool_wanted = true;
        pthread_cond_broadcast(&m->wake);
        pthread_mutex_unlock(&m->lock);
}

static int check_keys(ab_manager *m, const ab_acquire_req *q, const char *scope, const char **app,
                      char idbuf[64], ab_err **err)
{
        bool has_keys = q->app_id || q->user_id || q->chat_id;
        int kinds = !!q->id + !!has_keys + !!q->thread_id;
        if (kinds > 1)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "give one of: id, thread_id, or app_id+user_id+chat_id");
        *app = q->app_id;
        if (scope) {
                if (q->app_id && strcmp(q->app_id, scope))
                        return ab_err_set(err, AB_E_PERMISSION, 0,
                                          "this API key may only use app_id \"%s\"", scope);
                *app = scope;
        }
        if (has_keys) {
                const char *missing = !*app         ? "app_id"
                                      : !q->user_id ? "user_id"
                                      : !q->chat_id ? "chat_id"
                                                    : NULL;
                if (missing)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "%s: missing (app_id, user_id and chat_id go together)",
                                          missing);
                if (!**app || !*q->user_id || !*q->chat_id)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "app_id, user_id and chat_id must not be empty");
                ab_manager_key_id(*app, q->user_id, q->chat_id, idbuf);
        } else if (q->thread_id) {
                if (!*q->thread_id)
                        return ab_err_set(err, AB_E_INVALID, 0, "thread_id: must not be empty");
                ab_manager_thread_id(q->thread_id, idbuf);
        } else if (q->id) {
                if (ab_id_check(q->id, err) < 0)
                        return ab_err_wrap(err, "id");
                if (!strncmp(q->id, POOL_PREFIX, strlen(POOL_PREFIX)))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "id: ids starting with \"" POOL_PREFIX
                                          "\" are reserved for the warm pool");
                if (!strncmp(q->id, SYSTEM_PREFIX, strlen(SYSTEM_PREFIX)))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "id: ids starting with \"" SYSTEM_PREFIX
                                          "\" are reserved for the server's own boxes");
                snprintf(idbuf, 64, "%s", q->id);
        } else {
                ab_id_random(idbuf);
        }
        if (q->mode && strcmp(q->mode, "session") && strcmp(q->mode, "task"))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "mode: must be \"session\" or \"task\", not \"%s\"", q->mode);
        if (q->idle_stop_s < -1)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "idle_stop_s: must be -1 (never), 0 (default) or positive");
        if (q->has_ttl && q->ttl_s < 0)
                return ab_err_set(err, AB_E_INVALID, 0, "ttl_s: must be 0 (none) or positive");
        if (q->limits && ab_limits_validate(q->limits, err) < 0)
                return ab_err_wrap(err, "limits");
        if (q->network) {
                ab_netpol pol;
                if (ab_netpol_parse(q->network, &pol, err) < 0)
                        return -1;
                int r = 0;
                if (pol.mode != AB_NET_NONE && !m->o.net)
                        r = ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                       "network.mode \"%s\" is not available in this server",
                                       ab_net_mode_name(pol.mode));
                else if (m->o.net)
                        r = ab_net_check(m->o.net, &pol, err);
                ab_netpol_clear(&pol);
                if (r < 0)
                        return -1;
        }
        if (q->env) {
                const char *k;
                json_t *v;
                if (!json_is_object(q->env))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "env: must be an object of strings");
                json_object_foreach(q->env, k, v)
                {
                        if (!json_is_string(v))
                                return ab_err_set(err, AB_E_INVALID, 0, "env.%s: must be a string",
                                                  k);
                        if (!*k || strchr(k, '='))
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "env: bad variable name \"%s\"", k);
                }
        }
        if (q->metadata && !json_is_object(q->metadata))
                return ab_err_set(err, AB_E_INVALID, 0, "metadata: must be an object");
        return 0;
}

static void fill_new_rec(ab_manager *m, const ab_acquire_req *q, const char *app, const char *id,
                         const ab_limits *lim, ab_box_rec *r)
{
        int64_t now = wall_ms();
        r->provider = xstrdup(m->provider);
        r->id = xstrdup(id);
        r->backend_id = xstrdup(id);
        r->app_id = app ? xstrdup(app) : NULL;
        r->user_id = q->user_id ? xstrdup(q->user_id) : NULL;
        r->chat_id = q->chat_id ? xstrdup(q->chat_id) : NULL;
        r->thread_id = q->thread_id ? xstrdup(q->thread_id) : NULL;
        r->status = xstrdup("creating");
        r->mode = xstrdup(q->mode ? q->mode : "session");
        r->created_at = now;
        r->last_active_at = now;
        r->idle_stop_s = q->idle_stop_s;
        r->ttl_s = q->has_ttl ? q->ttl_s : m->o.ttl_s;
        json_t *lj = limits_to_json(lim);
        r->limits = dump(lj);
        json_decref(lj);
        json_t *spec = json_object();
        json_object_set_new(spec, "env", q->env ? json_deep_copy(q->env) : json_object());
        ab_netpol pol = {0};
        if (q->network && ab_netpol_parse(q->network, &pol, NULL) < 0)
                memset(&pol, 0, sizeof(pol)); /* validated before: cannot happen */
        json_object_set_new(spec, "network", ab_netpol_json(&pol));
        ab_netpol_clear(&pol);
        char me[160];
        if (process_identity(getpid(), me, sizeof(me)))
                json_object_set_new(spec, "creator", json_string(me));
        r->spec = dump(spec);
        json_decref(spec);
        r->metadata = q->metadata ? dump(q->metadata) : NULL;
}

/* Creates the backend box for a freshly inserted "creating" row. */
static int create_backend(ab_manager *m, ab_box_rec *r, const ab_limits *lim, ab_err **err)
{
        ab_backend *b = m->o.backend;
        ab_box_spec spec = {.id = r->backend_id, .limits = *lim};
        ab_err *e = NULL;
        uint64_t t0 = ab_now_ns();
        if (b->ops->create(b, &spec, &e) < 0) {
                if (e->code == AB_E_CONFLICT) {
                        /* A box by this name exists (made by the CLI, or a
                         * record lost): adopt it. */
                        ab_err_free(&e);
                        return ensure_running(m, r, err) < 0 ? -1 : 0;
                }
                ab_metrics_op(m->o.metrics, "create", false);
                ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s cannot be created: %s", r->id, e->msg);
                ab_err_free(&e);
                return -1;
        }
        ab_metrics_op(m->o.metrics, "create", true);
        set_status(m, r, "running", NULL);
        emit(m, "box.created", r,
             json_pack("{s:I,s:b}", "duration_ms", (json_int_t)((ab_now_ns() - t0) / 1000000),
                       "from_pool", 0));
        ab_log(AB_LOG_INFO, "box created", "box", r->id, NULL);
        return 0;
}

int ab_manager_acquire(ab_manager *m, const ab_acquire_req *q, const char *scope, ab_box_rec *out,
                       bool *created, ab_err **err)
{
        char id[64];
        const char *app = NULL;
        memset(out, 0, sizeof(*out));
        *created = false;
        if (check_keys(m, q, scope, &app, id, err) < 0)
                return -1;
        ab_limits lim = m->o.limits;
        if (q->limits)
                lim = *q->limits;
        bool pool_ok = m->o.pool_size > 0 && limits_equal(&lim, &m->o.limits);

        slot *s = slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        int rc = -1;
        int64_t deadline = wall_ms() + WAIT_OTHER_MS;
        for (;;) {
                ab_err *e = NULL;
                ab_box_rec r = {0};
                if (ab_store_box_get(m->o.store, m->provider, id, &r, &e) == 0) {
                        if (!scope_ok(&r, scope)) {
                                ab_box_rec_clear(&r);
                                ab_err_set(err, AB_E_CONFLICT, 0,
                                           "id \"%s\" belongs to another app", id);
                                break;
                        }
                        if (status_is(&r, "creating")) {
                                _cleanup_free_ char *who = rec_creator(&r);
                                if (creator_dead(who) && recover_creating(m, &r)) {
                                        ab_box_rec_clear(&r);
                                        continue;
                                }
                        }
                        if (status_is(&r, "creating") || status_is(&r, "deleting")) {
                                /* Another process (or our deleter) is at work on it. */
                                bool creating = status_is(&r, "creating");
                                ab_box_rec_clear(&r);
                                if (wall_ms() > deadline) {
                                        ab_err_set(err, creating ? AB_E_UNAVAILABLE : AB_E_CONFLICT,
                                                   0, "box %s is still being %s; try again", id,
                                                   creating ? "created" : "deleted");
                                        break;
                                }
                                pthread_mutex_unlock(&s->lock);
                                sleep_ms(50);
                                pthread_mutex_lock(&s->lock);
                                continue;
                        }
                        if (ensure_running(m, &r, err) < 0) {
                                ab_box_rec_clear(&r);
                                break;
                        }
                        int64_t now = wall_ms();
                        ab_store_box_touch(m->o.store, m->provider, id, now, NULL);
                        if (r.last_active_at < now)
                                r.last_active_at = now;
                        *out = r;
                        rc = 0;
                        break;
                }
                if (e->code != AB_E_NOT_FOUND) {
                        if (err && !*err)
                                *err = e;
                        else
                                ab_err_free(&e);
                        break;
                }
                ab_err_free(&e);
                fill_new_rec(m, q, app, id, &lim, &r);
                if (pool_ok) {
                        free(r.status);
                        r.status = xstrdup("running");
                        int c = ab_store_pool_claim(m->o.store, &r, &e);
                        if (c == 1) {
                                wake_pool(m);
                                ab_metrics_op(m->o.metrics, "pool_claim", true);
                                emit(m, "box.created", &r,
                                     json_pack("{s:I,s:b}", "duration_ms", (json_int_t)0,
                                               "from_pool", 1));
                                ab_log(AB_LOG_INFO, "box acquired from the pool", "box", id,
                                       "backend_id", r.backend_id, NULL);
                                if (net_sync(m, &r, 0, false, err) < 0) {
                                        ab_box_rec_clear(&r);
                                        break;
                                }
                                *out = r;
                                *created = true;
                                rc = 0;
                                break;
                        }
                        if (c < 0) {
                                ab_box_rec_clear(&r);
                                if (e->code == AB_E_CONFLICT) {
                                        ab_err_free(&e);
                                        continue; /* made meanwhile: take that one */
                                }
                                if (err && !*err)
                                        *err = e;
                                else
                                        ab_err_free(&e);
                                break;
                        }
                        free(r.status);
                        r.status = xstrdup("creating");
                }
                if (ab_store_box_insert(m->o.store, &r, &e) < 0) {
                        ab_box_rec_clear(&r);
                        if (e->code == AB_E_CONFLICT) {
                                ab_err_free(&e);
                                continue; /* another process won: take its box */
                        }
                        if (err && !*err)
                                *err = e;
                        else
                                ab_err_free(&e);
                        break;
                }
                if (create_backend(m, &r, &lim, err) < 0) {
                        ab_store_box_delete(m->o.store, m->provider, id, NULL);
                        ab_box_rec_clear(&r);
                        break;
                }
                /* idle time counts from when the box is ready, not from the request */
                r.last_active_at = wall_ms();
                ab_store_box_touch(m->o.store, m->provider, id, r.last_active_at, NULL);
                if (net_sync(m, &r, 0, false, err) < 0) {
                        ab_box_rec_clear(&r); /* the box stays; a retry applies the policy */
                        break;
                }
                *out = r;
                *created = true;
                rc = 0;
                break;
        }
        pthread_mutex_unlock(&s->lock);
        slot_put(m, s);
        if (rc == 0)
                enforce_cap(m, id);
        return rc;
}

/* ---- simple operations ------------------------------------------------ */

int ab_manager_get(ab_manager *m, const char *id, const char *scope, ab_box_rec *out, ab_err **err)
{
        return get_scoped(m, id, scope, out, err);
}

int ab_manager_list(ab_manager *m, const ab_box_filter *f, const char *scope, ab_box_rec **out,
                    size_t *n, ab_err **err)
{
        ab_box_filter g = *f;
        g.provider = m->provider;
        if (scope) {
                if (g.app_id && strcmp(g.app_id, scope)) {
                        *out = NULL;
                        *n = 0;
                        return 0;
                }
                g.app_id = scope;
        }
        if (ab_store_box_list(m->o.store, &g, out, n, err) < 0)
                return -1;
        size_t k = 0;
        for (size_t i = 0; i < *n; i++) {
                if (is_pool(&(*out)[i]))
                        ab_box_rec_clear(&(*out)[i]);
                else
                        (*out)[k++] = (*out)[i];
        }
        *n = k;
        return 0;
}

typedef int (*locked_op)(ab_manager *m, ab_box_rec *r, ab_err **err);

static int with_box(ab_manager *m, const char *id, const char *scope, locked_op op, ab_box_rec *out,
                    ab_err **err)
{
        ab_box_rec r = {0};
        if (get_scoped(m, id, scope, &r, err) < 0)
                return -1;
        ab_box_rec_clear(&r);
        slot *s = slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        int rc = get_scoped(m, id, scope, &r, err);
        if (rc == 0 && status_is(&r, "deleting"))
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box %s is being deleted", id);
        if (rc == 0)
                rc = op(m, &r, err);
        pthread_mutex_unlock(&s->lock);
        slot_put(m, s);
        if (rc == 0 && out)
                *out = r;
        else
                ab_box_rec_clear(&r);
        return rc;
}

static int op_stop(ab_manager *m, ab_box_rec *r, ab_err **err)
{
        if (status_is(r, "stopped"))
                return 0;
        return stop_locked(m, r, "api", err);
}

static int op_start(ab_manager *m, ab_box_rec *r, ab_err **err)
{
        if (ensure_running(m, r, err) < 0)
                return -1;
        int64_t now = wall_ms();
        ab_store_box_touch(m->o.store, m->provider, r->id, now, NULL);
        r->last_active_at = now;
        return 0;
}

static int op_delete(ab_manager *m, ab_box_rec *r, ab_err **err)
{
        delete_locked(m, r);
        return 0;
}

int ab_manager_stop(ab_manager *m, const char *id, const char *scope, ab_box_rec *out, ab_err **err)
{
        return with_box(m, id, scope, op_stop, out, err);
}

int ab_manager_start(ab_manager *m, const char *id, const char *scope, ab_box_rec *out,
                     ab_err **err)
{
        if (with_box(m, id, scope, op_start, out, err) < 0)
                return -1;
        enforce_cap(m, id);
        return 0;
}

int ab_manager_delete(ab_manager *m, const char *id, const char *scope, ab_err **err)
{
        ab_box_rec r = {0};
        if (get_scoped(m, id, scope, &r, err) < 0)
                return -1;
        /* Already deleting: answer as if queued now (idempotent). */
        if (status_is(&r, "deleting")) {
                ab_box_rec_clear(&r);
                return 0;
        }
        ab_box_rec_clear(&r);
        return with_box(m, id, scope, op_delete, NULL, err);
}

int ab_manager_delete_where(ab_manager *m, const ab_box_filter *f, const char *scope, char ***ids,
                            ab_err **err)
{
        ab_box_rec *rs = NULL;
        size_t n = 0;
        *ids = NULL;
        if (ab_manager_list(m, f, scope, &rs, &n, err) < 0)
                return -1;
        char **v = xcalloc(n + 1, sizeof(char *));
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                ab_err *e = NULL;
                if (ab_manager_delete(m, rs[i].id, scope, &e) == 0)
                        v[k++] = xstrdup(rs[i].id);
                ab_err_free(&e);
        }
        ab_box_recs_free(rs, n);
        *ids = v;
        return 0;
}

int ab_manager_set_network(ab_manager *m, const char *id, const char *scope, json_t *network,
                           ab_box_rec *out, ab_err **err)
{
        ab_netpol pol;
        if (ab_netpol_parse(network, &pol, err) < 0)
                return -1;
        int rc = 0;
        if (pol.mode != AB_NET_NONE && !m->o.net)
                rc = ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                "network.mode \"%s\" is not available in this server",
                                ab_net_mode_name(pol.mode));
        else if (m->o.net)
                rc = ab_net_check(m->o.net, &pol, err);
        json_t *pj = ab_netpol_json(&pol);
        ab_netpol_clear(&pol);
        if (rc < 0) {
                json_decref(pj);
                return -1;
        }
        memset(out, 0, sizeof(*out));
        slot *s = slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        ab_box_rec r = {0};
        rc = get_scoped(m, id, scope, &r, err);
        if (rc == 0 && (status_is(&r, "deleting") || status_is(&r, "creating")))
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box %s is being %s", id,
                                status_is(&r, "deleting") ? "deleted" : "created");
        if (rc == 0) {
                json_t *spec = r.spec ? json_loads(r.spec, 0, NULL) : NULL;
                if (!json_is_object(spec)) {
                        json_decref(spec);
                        spec = json_object();
                }
                json_object_set(spec, "network", pj);
                free(r.spec);
                r.spec = dump(spec);
                json_decref(spec);
                rc = ab_store_box_update(m->o.store, &r, err);
        }
        if (rc == 0 && status_is(&r, "running"))
                rc = net_sync(m, &r, 0, false, err);
        if (rc == 0) {
                emit(m, "box.network", &r, json_incref(pj));
                *out = r;
        } else {
                ab_box_rec_clear(&r);
        }
        pthread_mutex_unlock(&s->lock);
        slot_put(m, s);
        json_decref(pj);
        return rc;
}

int ab_manager_stats(ab_manager *m, const ab_box_rec *r, ab_box_stats *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        return m->o.backend->ops->stats(m->o.backend, r->backend_id, out, err);
}

/* ---- uses: exec, files, tools ----------------------------------------- */

int ab_manager_use_begin(ab_manager *m, const char *id, const char *scope, ab_use *u, ab_err **err)
{
        memset(u, 0, sizeof(*u));
        ab_box_rec r = {0};
        if (get_scoped(m, id, scope, &r, err) < 0)
                return -1;
        ab_box_rec_clear(&r);
        slot *s = slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        int rc = get_scoped(m, id, scope, &r, err);
        if (rc == 0 && status_is(&r, "deleting"))
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box %s is being deleted", id);
        else if (rc == 0 && status_is(&r, "creating"))
                rc = ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s is still being created", id);
        bool started = false;
        /* A box recorded running is taken at its word: if its init died,
         * use_connect finds out and starts it. */
        if (rc == 0 && !status_is(&r, "running")) {
                rc = ensure_running(m, &r, err);
                started = rc > 0;
                rc = rc < 0 ? -1 : 0;
        }
        if (rc == 0) {
                atomic_fetch_add(&s->inflight, 1);
                atomic_fetch_add(&m->inflight_total, 1);
        }
        pthread_mutex_unlock(&s->lock);
        if (rc < 0) {
                ab_box_rec_clear(&r);
                slot_put(m, s);
                return -1;
        }
        u->rec = r;
        u->slot = s;
        if (started)
                enforce_cap(m, id);
        return 0;
}

int ab_manager_use_connect(ab_manager *m, ab_use *u, ab_err **err)
{
        ab_backend *b = m->o.backend;
        ab_err *e = NULL;
        int fd = b->ops->connect(b, u->rec.backend_id, &e);
        if (fd >= 0)
                return fd;
        if (e->code != AB_E_CONFLICT) {
                ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s: %s", u->rec.id, e->msg);
                ab_err_free(&e);
                return -1;
        }
        ab_err_free(&e);
        /* Stopped under us (idle stop by another process, init died): start again. */
        slot *s = u->slot;
        pthread_mutex_lock(&s->lock);
        int rc = ensure_running(m, &u->rec, err) < 0 ? -1 : 0;
        pthread_mutex_unlock(&s->lock);
        if (rc < 0)
                return -1;
        fd = b->ops->connect(b, u->rec.backend_id, &e);
        if (fd < 0) {
                ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s: %s", u->rec.id, e->msg);
                ab_err_free(&e);
        }
        return fd;
}

void ab_manager_use_end(ab_manager *m, ab_use *u)
{
        slot *s = u->slot;
        if (!s)
                return;
        int64_t now = wall_ms();
        _cleanup_err_ ab_err *e = NULL;
        if (ab_store_box_touch(m->o.store, m->provider, u->rec.id, now, &e) < 0)
                ab_log(AB_LOG_WARN, "store: cannot mark activity", "box", u->rec.id, "error",
                       e->msg, NULL);
        ab_err_free(&e);
        if (u->audit) {
                if (ab_store_audit_add(m->o.store, u->audit, &e) < 0)
                        ab_log(AB_LOG_WARN, "store: cannot record exec audit", "box", u->rec.id,
                               "error", e->msg, NULL);
                ab_err_free(&e);
                ab_exec_audits_free(u->audit, 1);
                u->audit = NULL;
        }
        atomic_fetch_sub(&s->inflight, 1);
        atomic_fetch_sub(&m->inflight_total, 1);
        if (is_task(&u->rec)) {
                pthread_mutex_lock(&s->lock);
                ab_box_rec r = {0};
                if (ab_store_box_get(m->o.store, m->provider, u->rec.id, &r, NULL) == 0 &&
                    atomic_load(&s->inflight) == 0)
                        delete_locked(m, &r);
                ab_box_rec_clear(&r);
                pthread_mutex_unlock(&s->lock);
        }
        slot_put(m, s);
        ab_box_rec_clear(&u->rec);
        u->slot = NULL;
}

/* Box env (from the record's spec) under the request's env, as K=V strings. */
static char **merged_env(const ab_box_rec *r, const char *const *req_env);

char **ab_manager_box_env(const ab_box_rec *r)
{
        return merged_env(r, NULL);
}

static char **merged_env(const ab_box_rec *r, const char *const *req_env)
{
        size_t n = 0, cap = 16;
        char **v = xcalloc(cap, sizeof(char *));
        json_t *spec = r->spec ? json_loads(r->spec, 0, NULL) : NULL;
        ab_netpol pol;
        if (!spec || ab_netpol_parse(json_object_get(spec, "network"), &pol, NULL) < 0)
                memset(&pol, 0, sizeof(pol));
        _cleanup_strv_ char **nenv = ab_net_env(&pol);
        ab_netpol_clear(&pol);
        for (char **p = nenv; *p; p++)
                v[n++] = xstrdup(*p);
        json_t *env = spec ? json_object_get(spec, "env") : NULL;
        const char *k;
        json_t *val;
        json_object_foreach(env, k, val)
        {
                if (!json_is_string(val))
                        continue;
                if (n + 2 > cap)
                        v = xrealloc(v, (cap *= 2) * sizeof(char *));
                v[n++] = xasprintf("%s=%s", k, json_string_value(val));
        }
        json_decref(spec);
        for (const char *const *p = req_env; p && *p; p++) {
                if (n + 2 > cap)
                        v = xrealloc(v, (cap *= 2) * sizeof(char *));
                v[n++] = xstrdup(*p);
        }
        v[n] = NULL;
        return v;
}

static const char *exec_outcome(int rc, const abc_exec_res *res)
{
        if (rc < 0)
                return "unavailable";
        if (res->timed_out)
                return "timeout";
        return res->exit_code == 0 ? "ok" : "error";
}

int ab_manager_exec(ab_manager *m, ab_use *u, const abc_exec_req *req, abc_output_fn out, void *ud,
                    abc_exec_res *res, ab_err **err)
{
        memset(res, 0, sizeof(*res));
        abc_exec_req q = *req;
        _cleanup_strv_ char **env = merged_env(&u->rec, req->env);
        q.env = (const char *const *)env;
        if (!q.timeout_ms) {
                ab_limits l;
                limits_from_rec(m, &u->rec, &l);
                q.timeout_ms = l.timeout_s * 1000u;
        }
        if (!q.output_cap)
                q.output_cap = m->o.limits.output_cap;
        int64_t started = wall_ms();
        uint64_t t0 = ab_now_ns();
        int rc = -1;
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        if (fd >= 0)
                rc = abc_exec(fd, &q, out, ud, res, err);
        double secs = (double)(ab_now_ns() - t0) / 1e9;
        ab_metrics_exec(m->o.metrics, secs, exec_outcome(rc, res));
        if (rc < 0)
                return -1;
        /* The audit row is written by use_end, after the caller answered. */
        ab_exec_audit *a = xzalloc(sizeof(*a));
        *a = (ab_exec_audit){
            .provider = xstrdup(m->provider),
            .box_id = xstrdup(u->rec.id),
            .command = xstrdup(req->command),
            .exit_code = res->exit_code,
            .timed_out = res->timed_out,
            .started_at = started,
            .duration_ms = (int64_t)res->duration_ms,
            .stdout_bytes = (int64_t)res->stdout_bytes,
            .stderr_bytes = (int64_t)res->stderr_bytes,
        };
        if (u->audit)
                ab_exec_audits_free(u->audit, 1);
        u->audit = a;
        size_t cl = strlen(req->command);
        json_t *d =
            json_pack("{s:s%,s:i,s:I,s:b,s:I,s:I}", "command", req->command,
                      cl > EVENT_CMD_MAX ? (size_t)EVENT_CMD_MAX : cl, "exit_code", res->exit_code,
                      "duration_ms", (json_int_t)res->duration_ms, "timed_out", res->timed_out,
                      "stdout_bytes", (json_int_t)res->stdout_bytes, "stderr_bytes",
                      (json_int_t)res->stderr_bytes);
        if (!d) /* command is not valid UTF-8 */
                d = json_pack("{s:s,s:i,s:I,s:b}", "command", "(not UTF-8)", "exit_code",
                              res->exit_code, "duration_ms", (json_int_t)res->duration_ms,
                              "timed_out", res->timed_out);
        emit(m, "exec", &u->rec, d);
        return 0;
}

/* ---- counts ----------------------------------------------------------- */

void ab_manager_counts_clear(ab_manager_counts *c)
{
        for (size_t i = 0; i < c->n_states; i++)
                free(c->states[i]);
        free(c->states);
        free(c->counts);
        memset(c, 0, sizeof(*c));
}

static void counts_copy(const ab_manager_counts *src, ab_manager_counts *dst)
{
        *dst = *src;
        dst->states = xcalloc(src->n_states + 1, sizeof(char *));
        dst->counts = xcalloc(src->n_states + 1, sizeof(int64_t));
        for (size_t i = 0; i < src->n_states; i++) {
                dst->states[i] = xstrdup(src->states[i]);
                dst->counts[i] = src->counts[i];
        }
}

int ab_manager_counts_get(ab_manager *m, ab_manager_counts *out, ab_err **err)
{
        static const char *const names[] = {"creating", "running", "stopped", "deleting", "error"};
        pthread_mutex_lock(&m->counts_lock);
        uint64_t now = ab_now_ns();
        if (m->counts_at_ns && now - m->counts_at_ns < 500000000u) {
                counts_copy(&m->counts_cache, out);
                out->execs_in_flight = atomic_load(&m->inflight_total);
                pthread_mutex_unlock(&m->counts_lock);
                return 0;
        }
        ab_box_filter f = {.provider = m->provider};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, err) < 0) {
                pthread_mutex_unlock(&m->counts_lock);
                return -1;
        }
        ab_manager_counts c = {0};
        c.n_states = AB_ARRAY_LEN(names);
        c.states = xcalloc(c.n_states, sizeof(char *));
        c.counts = xcalloc(c.n_states, sizeof(int64_t));
        for (size_t i = 0; i < c.n_states; i++)
                c.states[i] = xstrdup(names[i]);
        for (size_t i = 0; i < n; i++) {
                if (is_pool(&rs[i])) {
                        c.pool_size += status_is(&rs[i], "running");
                        continue;
                }
                for (size_t k = 0; k < c.n_states; k++)
                        if (status_is(&rs[i], names[k]))
                                c.counts[k]++;
        }
        ab_box_recs_free(rs, n);
        c.pool_target = m->o.pool_size;
        ab_manager_counts_clear(&m->counts_cache);
        m->counts_cache = c;
        m->counts_at_ns = now;
        counts_copy(&c, out);
        out->execs_in_flight = atomic_load(&m->inflight_total);
        pthread_mutex_unlock(&m->counts_lock);
        return 0;
}

/* ---- background jobs -------------------------------------------------- */

/* Sleeps up to ms or until woken; returns false when stopping. */
static bool nap(ab_manager *m, int64_t ms, bool *flag)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&m->lock);
        while (!m->stopping && !(flag && *flag))
                if (pthread_cond_timedwait(&m->wake, &m->lock, &ts) == ETIMEDOUT)
                        break;
        if (flag)
                *flag = false;
        bool go = !m->stopping;
        pthread_mutex_unlock(&m->lock);
        return go;
}

static void reap_idle(ab_manager *m)
{
        if (m->o.idle_stop_s <= 0)
                return;
        int64_t now = wall_ms();
        ab_box_rec *rs = NULL;
        size_t n = 0;
        _cleanup_err_ ab_err *e = NULL;
        if (ab_store_box_list_idle(m->o.store, m->provider, now, m->o.idle_stop_s, &rs, &n, &e) <
            0) {
                ab_log(AB_LOG_WARN, "idle stop: cannot list boxes", "error", e->msg, NULL);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                slot *s = slot_get(m, rs[i].id);
                pthread_mutex_lock(&s->lock);
                ab_box_rec r = {0};
                if (atomic_load(&s->inflight) == 0 &&
                    ab_store_box_get(m->o.store, m->provider, rs[i].id, &r, NULL) == 0 &&
                    status_is(&r, "running") && r.last_active_at <= rs[i].last_active_at) {
                        ab_err *se = NULL;
                        if (stop_locked(m, &r, "idle", &se) < 0)
                                ab_log(AB_LOG_WARN, "idle stop failed", "box", r.id, "error",
                                       se->msg, NULL);
                        ab_err_free(&se);
                }
                ab_box_rec_clear(&r);
                pthread_mutex_unlock(&s->lock);
                slot_put(m, s);
        }
        ab_box_recs_free(rs, n);
}

/* TTL expiry, and drift: boxes the store thinks run whose init died. */
static void reap_ttl_and_drift(ab_manager *m)
{
        ab_box_filter f = {.provider = m->provider};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, NULL) < 0)
                return;
        int64_t now = wall_ms();
        ab_backend *b = m->o.backend;
        for (size_t i = 0; i < n; i++) {
                ab_box_rec *r = &rs[i];
                if (status_is(r, "deleting")) {
                        continue;
                }
                if (r->ttl_s > 0 && !is_pool(r) && r->created_at + r->ttl_s * 1000 < now) {
                        slot *s = slot_get(m, r->id);
                        pthread_mutex_lock(&s->lock);
                        ab_box_rec cur = {0};
                        if (ab_store_box_get(m->o.store, m->provider, r->id, &cur, NULL) == 0 &&
                            !status_is(&cur, "deleting")) {
                                ab_metrics_op(m->o.metrics, "ttl_delete", true);
                                delete_locked(m, &cur);
                        }
                        ab_box_rec_clear(&cur);
                        pthread_mutex_unlock(&s->lock);
                        slot_put(m, s);
                        continue;
                }
                if (!status_is(r, "running"))
                        continue;
                ab_box_info info;
                if (b->ops->info(b, r->backend_id, &info, NULL) < 0)
                        continue;
                bool dead = info.status == AB_BOX_STOPPED;
                ab_box_info_clear(&info);
                if (!dead)
                        continue;
                slot *s = slot_get(m, r->id);
                if (pthread_mutex_trylock(&s->lock) == 0) {
                        ab_box_rec cur = {0};
                        if (ab_store_box_get(m->o.store, m->provider, r->id, &cur, NULL) == 0 &&
                            status_is(&cur, "running")) {
                                set_status(m, &cur, "stopped", NULL);
                                emit(m, "box.stopped", &cur,
                                     json_pack("{s:s}", "reason", "exited"));
                        }
                        ab_box_rec_clear(&cur);
                        pthread_mutex_unlock(&s->lock);
                }
                slot_put(m, s);
        }
        ab_box_recs_free(rs, n);
}

void ab_manager_reap(ab_manager *m)
{
        reap_idle(m);
        reap_ttl_and_drift(m);
        enforce_cap(m, NULL);
}

static void *reaper_main(void *arg)
{
        ab_manager *m = arg;
        while (nap(m, m->o.reaper_interval_ms, NULL))
                ab_manager_reap(m);
        return NULL;
}

/* Makes one pool box. */
static int pool_make_one(ab_manager *m)
{
        char rnd[17], id[64];
        ab_id_random(rnd);
        snprintf(id, sizeof(id), POOL_PREFIX "%.12s", rnd);
        ab_acquire_req q = {.mode = "pool"};
        ab_box_rec r = {0};
        fill_new_rec(m, &q, NULL, id, &m->o.limits, &r);
        _cleanup_err_ ab_err *e = NULL;
        int rc = -1;
        if (ab_store_box_insert(m->o.store, &r, &e) < 0)
                goto out;
        ab_backend *b = m->o.backend;
        ab_box_spec spec = {.id = id, .limits = m->o.limits};
        if (b->ops->create(b, &spec, &e) < 0) {
                ab_store_box_delete(m->o.store, m->provider, id, NULL);
                goto out;
        }
        ab_err *se = NULL;
        if (ab_store_box_set_status(m->o.store, m->provider, id, "running", "creating", NULL, &se) <
            0) {
                ab_err_free(&se);
                b->ops->destroy(b, id, NULL);
                ab_store_box_delete(m->o.store, m->provider, id, NULL);
                goto out;
        }
        rc = 0;
out:
        if (rc < 0 && e)
                ab_log(AB_LOG_WARN, "warm pool: cannot make a box", "error", e->msg, NULL);
        ab_metrics_op(m->o.metrics, "pool_create", rc == 0);
        ab_box_rec_clear(&r);
        return rc;
}

static int64_t pool_count(ab_manager *m)
{
        ab_box_filter f = {.provider = m->provider, .mode = "pool"};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, NULL) < 0)
                return -1;
        ab_box_recs_free(rs, n);
        return (int64_t)n;
}

static void *pooler_main(void *arg)
{
        ab_manager *m = arg;
        bool failed = false;
        do {
                int64_t have;
                while ((have = pool_count(m)) >= 0 && have < m->o.pool_size) {
                        pthread_mutex_lock(&m->lock);
                        bool stop = m->stopping;
                        pthread_mutex_unlock(&m->lock);
                        if (stop)
                                return NULL;
                        if ((failed = pool_make_one(m) < 0))
                                break;
                }
        } while (nap(m, failed ? POOL_BACKOFF_MS : m->o.reaper_interval_ms, &m->pool_wanted));
        return NULL;
}

/* What the sampler remembers of a box between two samples. */
typedef struct sample_prev {
        char *id;
        uint64_t cpu_ns, at_ns;
        bool alerted[3];
} sample_prev;

typedef struct sampler {
        sample_prev *v;
        size_t n;
} sampler;

static void check_alert(ab_manager *m, sample_prev *p, const ab_box_rec *r, int which,
                        const char *metric, double value, double threshold)
{
        if (threshold <= 0)
                return;
        if (value >= threshold && !p->alerted[which]) {
                p->alerted[which] = true;
                json_t *d = json_pack("{s:s,s:f,s:f}", "metric", metric, "value_pct", value,
                                      "threshold_pct", threshold);
                emit(m, "alert", r, json_deep_copy(d));
                if (m->o.webhook) {
                        json_t *body = json_pack("{s:s,s:s,s:s?,s:I,s:o}", "type", "alert",
                                                 "box_id", r->id, "app_id", r->app_id, "time",
                                                 (json_int_t)wall_ms(), "data", d);
                        _cleanup_free_ char *txt = dump(body);
                        json_decref(body);
                        ab_webhook_post(m->o.webhook, txt);
                } else {
                        json_decref(d);
                }
                ab_log(AB_LOG_WARN, "alert", "box", r->id, "metric", metric, NULL);
        } else if (value < threshold * 0.9) {
                p->alerted[which] = false;
        }
}

static void sampler_clear(sampler *sp)
{
        for (size_t i = 0; i < sp->n; i++)
                free(sp->v[i].id);
        free(sp->v);
        sp->v = NULL;
        sp->n = 0;
}

static void sample_once(ab_manager *m, sampler *sp)
{
        ab_box_filter f = {.provider = m->provider, .status = "running"};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, NULL) < 0)
                return;
        sampler next = {.v = xcalloc(n + 1, sizeof(sample_prev))};
        for (size_t i = 0; i < n; i++) {
                ab_box_rec *r = &rs[i];
                if (is_pool(r))
                        continue;
                ab_box_stats st;
                if (ab_manager_stats(m, r, &st, NULL) < 0)
                        continue;
                sample_prev *p = &next.v[next.n++];
                p->id = xstrdup(r->id);
                for (size_t k = 0; k < sp->n; k++)
                        if (!strcmp(sp->v[k].id, r->id)) {
                                p->cpu_ns = sp->v[k].cpu_ns;
                                p->at_ns = sp->v[k].at_ns;
                                memcpy(p->alerted, sp->v[k].alerted, sizeof(p->alerted));
                        }
                uint64_t now = ab_now_ns();
                ab_limits l;
                limits_from_rec(m, r, &l);
                double cpu = -1;
                if (p->at_ns && now > p->at_ns && st.cpu_usage_ns >= p->cpu_ns)
                        cpu = 100.0 * (double)(st.cpu_usage_ns - p->cpu_ns) /
                              ((double)(now - p->at_ns) * (l.cpus > 0 ? l.cpus : 1));
                p->at_ns = now;
                p->cpu_ns = st.cpu_usage_ns;
                double mem =
                    st.memory_limit ? 100.0 * (double)st.memory_bytes / (double)st.memory_limit : 0;
                double disk = st.disk_limit_bytes
                                  ? 100.0 * (double)st.disk_used_bytes / (double)st.disk_limit_bytes
                                  : 0;
                json_t *d = json_pack(
                    "{s:f,s:I,s:I,s:f,s:I,s:I,s:I,s:f,s:I}", "cpu_pct", cpu < 0 ? 0.0 : cpu,
                    "memory_bytes", (json_int_t)st.memory_bytes, "memory_limit",
                    (json_int_t)st.memory_limit, "memory_pct", mem, "pids", (json_int_t)st.pids,
                    "disk_used_bytes", (json_int_t)st.disk_used_bytes, "disk_limit_bytes",
                    (json_int_t)st.disk_limit_bytes, "disk_pct", disk, "oom_kills",
                    (json_int_t)st.oom_kills);
                emit(m, "resource", r, d);
                check_alert(m, p, r, 0, "memory", mem, m->o.alert_memory_pct);
                if (cpu >= 0)
                        check_alert(m, p, r, 1, "cpu", cpu, m->o.alert_cpu_pct);
                check_alert(m, p, r, 2, "disk", disk, m->o.alert_disk_pct);
        }
        ab_box_recs_free(rs, n);
        sampler_clear(sp);
        *sp = next;
}

static void *sampler_main(void *arg)
{
        ab_manager *m = arg;
        sampler sp = {0};
        while (nap(m, m->o.sample_interval_ms, NULL))
                sample_once(m, &sp);
        sampler_clear(&sp);
        return NULL;
}

/* ---- recovery --------------------------------------------------------- */

static bool referenced(const ab_box_rec *rs, size_t n, const char *backend_id)
{
        for (size_t i = 0; i < n; i++)
                if (rs[i].backend_id && !strcmp(rs[i].backend_id, backend_id))
                        return true;
        return false;
}

/* Brings the store in line with the backend after a restart or a crash. */
static int reconcile(ab_manager *m, ab_err **err)
{
        ab_box_filter f = {.provider = m->provider};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, err) < 0)
                return -1;
        ab_backend *b = m->o.backend;
        int64_t now = wall_ms();
        size_t found = 0, fixed = 0;
        for (size_t i = 0; i < n; i++) {
                ab_box_rec *r = &rs[i];
                if (status_is(r, "deleting")) {
                        queue_delete(m, r->id);
                        continue;
                }
                ab_box_info info;
                ab_err *e = NULL;
                int ir = b->ops->info(b, r->backend_id, &info, &e);
                bool missing = ir < 0 && e->code == AB_E_NOT_FOUND;
                ab_err_free(&e);
                if (status_is(r, "creating")) {
                        _cleanup_free_ char *who = rec_creator(r);
                        if (!creator_dead(who) && now - r->created_at < STALE_CREATE_MS)
                                goto next; /* another process may be creating it now */
                        if (missing || (ir == 0 && info.status == AB_BOX_CREATING)) {
                                /* The create never finished: nothing to keep. */
                                if (ir == 0)
                                        b->ops->destroy(b, r->backend_id, NULL);
                                ab_store_box_delete(m->o.store, m->provider, r->id, NULL);
                                fixed++;
                                goto next;
                        }
                }
                if (missing) {
                        if (!status_is(r, "error")) {
                                set_status(m, r, "error",
                                           "the backend has no such box any more (its disk is "
                                           "gone)");
                                fixed++;
                        }
                        continue;
                }
                if (ir < 0)
                        continue;
                found++;
                const char *truth = info.status == AB_BOX_RUNNING   ? "running"
                                    : info.status == AB_BOX_STOPPED ? "stopped"
                                                                    : NULL;
                if (truth && !status_is(r, truth) && !status_is(r, "error")) {
                        set_status(m, r, truth, NULL);
                        fixed++;
                } else if (truth && status_is(r, "error") && !strcmp(truth, "running")) {
                        set_status(m, r, truth, NULL);
                        fixed++;
                }
                if (info.status == AB_BOX_RUNNING && !status_is(r, "creating")) {
                        ab_err *ne = NULL;
                        /* after a restart: the proxy listener is gone, a veth may be left */
                        net_sync(m, r, info.init_pid, true, &ne);
                        ab_err_free(&ne);
                }
        next:
                if (ir == 0)
                        ab_box_info_clear(&info);
        }
        /* Backend boxes no record knows: half-made pool boxes go, others are adopted. */
        ab_box_info *bi = NULL;
        size_t bn = 0;
        if (b->ops->list(b, &bi, &bn, NULL) == 0) {
                for (size_t i = 0; i < bn; i++) {
                        if (referenced(rs, n, bi[i].id) || bi[i].status == AB_BOX_CREATING ||
                            bi[i].status == AB_BOX_DELETING ||
                            !strncmp(bi[i].id, SYSTEM_PREFIX, strlen(SYSTEM_PREFIX)))
                                continue;
                        if (!strncmp(bi[i].id, POOL_PREFIX, strlen(POOL_PREFIX))) {
                                b->ops->destroy(b, bi[i].id, NULL);
                                fixed++;
                                continue;
                        }
                        ab_acquire_req q = {.mode = "session"};
                        ab_box_rec r = {0};
                        fill_new_rec(m, &q, NULL, bi[i].id, &bi[i].limits, &r);
                        free(r.status);
                        r.status = xstrdup(bi[i].status == AB_BOX_RUNNING ? "running" : "stopped");
                        if (bi[i].created_at > 0)
                                r.created_at = bi[i].created_at * 1000;
                        if (ab_store_box_insert(m->o.store, &r, NULL) == 0) {
                                ab_log(AB_LOG_INFO, "adopted a box the store did not know", "box",
                                       r.id, NULL);
                                fixed++;
                        }
                        ab_box_rec_clear(&r);
                }
                for (size_t i = 0; i < bn; i++)
                        ab_box_info_clear(&bi[i]);
                free(bi);
        }
        ab_box_recs_free(rs, n);
        char a[32], c[32];
        snprintf(a, sizeof(a), "%zu", found);
        snprintf(c, sizeof(c), "%zu", fixed);
        ab_log(AB_LOG_INFO, "recovered boxes", "found", a, "fixed", c, NULL);
        return 0;
}

/* ---- open / free ------------------------------------------------------ */

int ab_manager_open(const ab_manager_opts *o, ab_manager **out, ab_err **err)
{
        ab_manager *m = xzalloc(sizeof(*m));
        m->o = *o;
        if (m->o.reaper_interval_ms <= 0)
                m->o.reaper_interval_ms = 5000;
        if (!m->o.limits.output_cap)
                m->o.limits.output_cap = AB_DEFAULT_OUTPUT_CAP;
        m->provider = o->backend->ops->name ? o->backend->ops->name : PROVIDER_DEFAULT;
        pthread_mutex_init(&m->slots_lock, NULL);
        pthread_mutex_init(&m->lock, NULL);
        pthread_mutex_init(&m->counts_lock, NULL);
        pthread_mutex_init(&m->cap_lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&m->wake, &ca);
        pthread_condattr_destroy(&ca);
        pthread_cond_init(&m->del_wake, NULL);
        if (reconcile(m, err) < 0) {
                ab_manager_free(m);
                return -1;
        }
        for (int i = 0; i < N_DELETERS; i++)
                if (pthread_create(&m->deleters[i], NULL, deleter_main, m) == 0)
                        m->n_deleters++;
        m->have_reaper = pthread_create(&m->reaper, NULL, reaper_main, m) == 0;
        if (m->o.pool_size > 0)
                m->have_pooler = pthread_create(&m->pooler, NULL, pooler_main, m) == 0;
        if (m->o.sample_interval_ms > 0)
                m->have_sampler = pthread_create(&m->sampler, NULL, sampler_main, m) == 0;
        if (!m->have_reaper || m->n_deleters == 0) {
                ab_manager_free(m);
                return ab_err_set(err, AB_E_INTERNAL, 0, "cannot start the manager's threads");
        }
        *out = m;
        return 0;
}

void ab_manager_free(ab_manager *m)
{
        if (!m)
                return;
        pthread_mutex_lock(&m->lock);
        m->stopping = true;
        pthread_cond_broadcast(&m->wake);
        pthread_cond_broadcast(&m->del_wake);
        pthread_mutex_unlock(&m->lock);
        if (m->have_reaper)
                pthread_join(m->reaper, NULL);
        if (m->have_pooler)
                pthread_join(m->pooler, NULL);
        if (m->have_sampler)
                pthread_join(m->sampler, NULL);
        for (int i = 0; i < m->n_deleters; i++)
                pthread_join(m->deleters[i], NULL);
        while (m->del_head) {
                del_job *j = m->del_head;
                m->del_head = j->next;
                free(j->id);
                free(j);
        }
        for (int i = 0; i < N_BUCKETS; i++) {
                slot *s = m->buckets[i];
                while (s) {
                        slot *next = s->next;
                        pthread_mutex_destroy(&s->lock);
                        free(s->id);
                        free(s);
                        s = next;
                }
        }
        ab_manager_counts_clear(&m->counts_cache);
        pthread_mutex_destroy(&m->slots_lock);
        pthread_mutex_destroy(&m->lock);
        pthread_mutex_destroy(&m->counts_lock);
        pthread_mutex_destroy(&m->cap_lock);
        pthread_cond_destroy(&m->wake);
        pthread_cond_destroy(&m->del_wake);
        free(m);
}
