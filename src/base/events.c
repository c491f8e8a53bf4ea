/* events.c - the event bus: a ring of the newest events, each serialized once
 * at emit time, copied out to subscribers under one mutex. Waiters sleep on a
 * condition variable bound to CLOCK_MONOTONIC so a wall-clock jump neither
 * cuts a wait short nor stretches it. */
#include "base/events.h"
#include "base/util.h"

#include <pthread.h>
#include <time.h>

typedef struct ev_slot {
        uint64_t seq; /* 0 = empty */
        char *type, *app_id, *box_id, *json;
} ev_slot;

struct ab_events {
        pthread_mutex_t mu;
        pthread_cond_t cv; /* new event, shutdown, or a waiter left (for free) */
        ev_slot *ring;
        size_t cap;
        uint64_t last_seq;
        size_t waiters;
        bool shutdown;
        pthread_rwlock_t notify_lock; /* held for reading while notify runs */
        void (*notify)(void *arg);
        void *notify_arg;
        char *node; /* ab_events_set_node: every event names it; NULL = none */
        /* ab_events_set_tap (under notify_lock): sees this process's events */
        void (*tap)(void *arg, const char *json);
        void *tap_arg;
};

static void run_notify(ab_events *ev);

static void slot_clear(ev_slot *s)
{
        free(s->type);
        free(s->app_id);
        free(s->box_id);
        free(s->json);
        *s = (ev_slot){0};
}

ab_events *ab_events_new(size_t capacity)
{
        ab_events *ev = xzalloc(sizeof(*ev));
        ev->cap = capacity ? capacity : 1;
        ev->ring = xcalloc(ev->cap, sizeof(*ev->ring));
        pthread_mutex_init(&ev->mu, NULL);
        pthread_rwlock_init(&ev->notify_lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&ev->cv, &ca);
        pthread_condattr_destroy(&ca);
        return ev;
}

void ab_events_free(ab_events *ev)
{
        if (!ev)
                return;
        pthread_mutex_lock(&ev->mu);
        ev->shutdown = true;
        pthread_cond_broadcast(&ev->cv);
        /* Waiters still hold a pointer to us: let them leave first. */
        while (ev->waiters > 0)
                pthread_cond_wait(&ev->cv, &ev->mu);
        pthread_mutex_unlock(&ev->mu);
        for (size_t i = 0; i < ev->cap; i++)
                slot_clear(&ev->ring[i]);
        free(ev->ring);
        free(ev->node);
        pthread_cond_destroy(&ev->cv);
        pthread_mutex_destroy(&ev->mu);
        pthread_rwlock_destroy(&ev->notify_lock);
        free(ev);
}

static int64_t unix_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static json_t *str_or_null(const char *s)
{
        return s ? json_string(s) : json_null();
}

/* Puts an event into the ring: this process's (tap: the tap sees it) or
 * another fleet node's. */
static uint64_t emit(ab_events *ev, const char *type, const char *box_id, const char *app_id,
                     int64_t time_ms, const char *node, json_t *data, bool tap)
{
        if (!data)
                data = json_object();
        /* Everything but seq is built outside the lock; seq goes first
         * (jansson keeps insertion order) and is filled in under it. */
        json_t *j = json_object();
        json_object_set_new(j, "seq", json_integer(0));
        json_object_set_new(j, "type", json_string(type ? type : ""));
        json_object_set_new(j, "time", json_integer(time_ms));
        json_object_set_new(j, "box_id", str_or_null(box_id));
        json_object_set_new(j, "app_id", str_or_null(app_id));
        if (node)
                json_object_set_new(j, "node", json_string(node));
        json_object_set_new(j, "data", data);

        ev_slot s = {
            .type = xstrdup(type ? type : ""),
            .app_id = app_id ? xstrdup(app_id) : NULL,
            .box_id = box_id ? xstrdup(box_id) : NULL,
        };
        ev_slot old;

        pthread_mutex_lock(&ev->mu);
        s.seq = ++ev->last_seq;
        json_object_set_new(j, "seq", json_integer((json_int_t)s.seq));
        s.json = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (!s.json)
                abort(); /* OOM, or data holding something unserializable (a bug) */
        ev_slot *slot = &ev->ring[(s.seq - 1) % ev->cap];
        old = *slot;
        *slot = s;
        pthread_cond_broadcast(&ev->cv);
        pthread_mutex_unlock(&ev->mu);

        slot_clear(&old);
        if (tap) {
                pthread_rwlock_rdlock(&ev->notify_lock);
                if (ev->tap) {
                        char *t = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
                        if (t)
                                ev->tap(ev->tap_arg, t);
                        free(t);
                }
                pthread_rwlock_unlock(&ev->notify_lock);
        }
        json_decref(j);
        run_notify(ev);
        return s.seq;
}

uint64_t ab_events_emit(ab_events *ev, const char *type, const char *box_id, const char *app_id,
                        json_t *data)
{
        return emit(ev, type, box_id, app_id, unix_ms(), ev->node, data, true);
}

int ab_events_inject(ab_events *ev, const char *json)
{
        json_t *j = json_loads(json, 0, NULL);
        const char *type = json_string_value(json_object_get(j, "type"));
        const char *node = json_string_value(json_object_get(j, "node"));
        json_t *t = json_object_get(j, "time"), *data = json_object_get(j, "data");
        if (!type || !node || !json_is_integer(t) || (data && !json_is_object(data))) {
                json_decref(j);
                return -EINVAL;
        }
        emit(ev, type, json_string_value(json_object_get(j, "box_id")),
             json_string_value(json_object_get(j, "app_id")), json_integer_value(t), node,
             data ? json_incref(data) : NULL, false);
        json_decref(j);
        return 0;
}

void ab_events_set_node(ab_events *ev, const char *node)
{
        free(ev->node);
        ev->node = node ? xstrdup(node) : NULL;
}

void ab_events_set_tap(ab_events *ev, void (*fn)(void *arg, const char *json), void *arg)
{
        pthread_rwlock_wrlock(&ev->notify_lock);
        ev->tap = fn;
        ev->tap_arg = arg;
        pthread_rwlock_unlock(&ev->notify_lock);
}

static void run_notify(ab_events *ev)
{
        pthread_rwlock_rdlock(&ev->notify_lock);
        if (ev->notify)
                ev->notify(ev->notify_arg);
        pthread_rwlock_unlock(&ev->notify_lock);
}

void ab_events_set_notify(ab_events *ev, void (*fn)(void *arg), void *arg)
{
        pthread_rwlock_wrlock(&ev->notify_lock);
        ev->notify = fn;
        ev->notify_arg = arg;
        pthread_rwlock_unlock(&ev->notify_lock);
}

static char *dup_or_null(const char *s)
{
        return s ? xstrdup(s) : NULL;
}

int ab_events_wait(ab_events *ev, uint64_t after, size_t max, int timeout_ms, ab_event_view **out,
                   size_t *n, bool *dropped)
{
        *out = NULL;
        *n = 0;
        *dropped = false;

        struct timespec deadline;
        if (timeout_ms > 0) {
                clock_gettime(CLOCK_MONOTONIC, &deadline);
                deadline.tv_sec += timeout_ms / 1000;
                deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
                if (deadline.tv_nsec >= 1000000000L) {
                        deadline.tv_sec++;
                        deadline.tv_nsec -= 1000000000L;
                }
        }

        pthread_mutex_lock(&ev->mu);
        ev->waiters++;
        while (!ev->shutdown && ev->last_seq <= after && timeout_ms != 0 && max > 0) {
                if (timeout_ms < 0) {
                        pthread_cond_wait(&ev->cv, &ev->mu);
                } else if (pthread_cond_timedwait(&ev->cv, &ev->mu, &deadline) == ETIMEDOUT) {
                        break;
                }
        }
        int r = 0;
        if (ev->shutdown) {
                r = -ESHUTDOWN;
        } else if (ev->last_seq > after && max > 0) {
                uint64_t oldest = ev->last_seq > ev->cap ? ev->last_seq - ev->cap + 1 : 1;
                uint64_t first = after + 1;
                if (first < oldest) {
                        *dropped = true;
                        first = oldest;
                }
                uint64_t avail = ev->last_seq - first + 1;
                size_t cnt = avail < max ? (size_t)avail : max;
                ab_event_view *v = xcalloc(cnt, sizeof(*v));
                for (size_t i = 0; i < cnt; i++) {
                        const ev_slot *s = &ev->ring[(first + i - 1) % ev->cap];
                        v[i] = (ab_event_view){
                            .seq = s->seq,
                            .type = xstrdup(s->type),
                            .app_id = dup_or_null(s->app_id),
                            .box_id = dup_or_null(s->box_id),
                            .json = xstrdup(s->json),
                        };
                }
                *out = v;
                *n = cnt;
        }
        ev->waiters--;
        if (ev->shutdown && ev->waiters == 0)
                pthread_cond_broadcast(&ev->cv); /* ab_events_free may be waiting for us */
        pthread_mutex_unlock(&ev->mu);
        return r;
}

void ab_event_views_free(ab_event_view *v, size_t n)
{
        if (!v)
                return;
        for (size_t i = 0; i < n; i++) {
                free(v[i].type);
                free(v[i].app_id);
                free(v[i].box_id);
                free(v[i].json);
        }
        free(v);
}

uint64_t ab_events_last_seq(ab_events *ev)
{
        pthread_mutex_lock(&ev->mu);
        uint64_t s = ev->last_seq;
        pthread_mutex_unlock(&ev->mu);
        return s;
}

void ab_events_shutdown(ab_events *ev)
{
        pthread_mutex_lock(&ev->mu);
        ev->shutdown = true;
        pthread_cond_broadcast(&ev->cv);
        pthread_mutex_unlock(&ev->mu);
        run_notify(ev);
}
