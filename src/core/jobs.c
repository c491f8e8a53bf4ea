/* The reaper: idle stop, TTL expiry, drift between the store and the
 * backend, and the cap on running boxes (least recently active first). */
#include "core/manager_int.h"

#include <time.h>

static int cmp_active(const void *a, const void *b)
{
        const ab_box_rec *x = a, *y = b;
        return (x->last_active_at > y->last_active_at) - (x->last_active_at < y->last_active_at);
}

/* Stops least-recently-active idle boxes while more than max_running run. */
void mgr_enforce_cap(ab_manager *m, const char *keep)
{
        if (m->o.max_running <= 0)
                return;
        /* Two enforcements at once would each stop a box for the same excess. */
        pthread_mutex_lock(&m->cap_lock);
        ab_box_filter f = {.provider = m->provider, .status = AB_BOX_RUNNING};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        _cleanup_err_ ab_err *e = NULL;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, &e) < 0) {
                pthread_mutex_unlock(&m->cap_lock);
                return;
        }
        size_t running = 0;
        for (size_t i = 0; i < n; i++)
                running += !mgr_is_pool(&rs[i]);
        qsort(rs, n, sizeof(*rs), cmp_active);
        for (size_t i = 0; i < n && running > (size_t)m->o.max_running; i++) {
                if (mgr_is_pool(&rs[i]) || (keep && !strcmp(rs[i].id, keep)))
                        continue;
                slot *s = mgr_slot_get(m, rs[i].id);
                if (atomic_load(&s->inflight) == 0 && pthread_mutex_trylock(&s->lock) == 0) {
                        ab_box_rec r = {0};
                        if (ab_store_box_get(m->o.store, m->provider, rs[i].id, &r, NULL) == 0 &&
                            (r.status == AB_BOX_RUNNING) && atomic_load(&s->inflight) == 0) {
                                ab_err *se = NULL;
                                if (mgr_stop_locked(m, &r, "lru", &se) == 0)
                                        running--;
                                ab_err_free(&se);
                        }
                        ab_box_rec_clear(&r);
                        pthread_mutex_unlock(&s->lock);
                }
                mgr_slot_put(m, s);
        }
        ab_box_recs_free(rs, n);
        pthread_mutex_unlock(&m->cap_lock);
}

/* Sleeps up to ms or until woken; returns false when stopping. */
bool mgr_nap(ab_manager *m, int64_t ms, bool *flag)
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
        int64_t now = mgr_wall_ms();
        ab_box_rec *rs = NULL;
        size_t n = 0;
        _cleanup_err_ ab_err *e = NULL;
        if (ab_store_box_list_idle(m->o.store, m->provider, now, m->o.idle_stop_s, &rs, &n, &e) <
            0) {
                ab_log(AB_LOG_WARN, "idle stop: cannot list boxes", "error", e->msg, NULL);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                slot *s = mgr_slot_get(m, rs[i].id);
                pthread_mutex_lock(&s->lock);
                ab_box_rec r = {0};
                if (atomic_load(&s->inflight) == 0 &&
                    ab_store_box_get(m->o.store, m->provider, rs[i].id, &r, NULL) == 0 &&
                    (r.status == AB_BOX_RUNNING) && r.last_active_at <= rs[i].last_active_at) {
                        ab_err *se = NULL;
                        if (mgr_stop_locked(m, &r, "idle", &se) < 0)
                                ab_log(AB_LOG_WARN, "idle stop failed", "box", r.id, "error",
                                       se->msg, NULL);
                        ab_err_free(&se);
                }
                ab_box_rec_clear(&r);
                pthread_mutex_unlock(&s->lock);
                mgr_slot_put(m, s);
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
        int64_t now = mgr_wall_ms();
        ab_backend *b = m->o.backend;
        for (size_t i = 0; i < n; i++) {
                ab_box_rec *r = &rs[i];
                if ((r->status == AB_BOX_DELETING)) {
                        continue;
                }
                if (r->ttl_s > 0 && !mgr_is_pool(r) && r->created_at + r->ttl_s * 1000 < now) {
                        slot *s = mgr_slot_get(m, r->id);
                        pthread_mutex_lock(&s->lock);
                        ab_box_rec cur = {0};
                        if (ab_store_box_get(m->o.store, m->provider, r->id, &cur, NULL) == 0 &&
                            !(cur.status == AB_BOX_DELETING)) {
                                ab_metrics_op(m->o.metrics, "ttl_delete", true);
                                mgr_delete_locked(m, &cur);
                        }
                        ab_box_rec_clear(&cur);
                        pthread_mutex_unlock(&s->lock);
                        mgr_slot_put(m, s);
                        continue;
                }
                if (!(r->status == AB_BOX_RUNNING))
                        continue;
                ab_box_info info;
                if (b->ops->info(b, r->backend_id, &info, NULL) < 0)
                        continue;
                bool dead = info.status == AB_BOX_STOPPED;
                ab_box_info_clear(&info);
                if (!dead)
                        continue;
                slot *s = mgr_slot_get(m, r->id);
                if (pthread_mutex_trylock(&s->lock) == 0) {
                        ab_box_rec cur = {0};
                        if (ab_store_box_get(m->o.store, m->provider, r->id, &cur, NULL) == 0 &&
                            (cur.status == AB_BOX_RUNNING)) {
                                mgr_set_status(m, &cur, AB_BOX_STOPPED, NULL);
                                mgr_emit(m, "box.stopped", &cur,
                                         json_pack("{s:s}", "reason", "exited"));
                        }
                        ab_box_rec_clear(&cur);
                        pthread_mutex_unlock(&s->lock);
                }
                mgr_slot_put(m, s);
        }
        ab_box_recs_free(rs, n);
}

void ab_manager_reap(ab_manager *m)
{
        reap_idle(m);
        reap_ttl_and_drift(m);
        mgr_enforce_cap(m, NULL);
}

void *mgr_reaper_main(void *arg)
{
        ab_manager *m = arg;
        while (mgr_nap(m, m->o.reaper_interval_ms, NULL))
                ab_manager_reap(m);
        return NULL;
}
