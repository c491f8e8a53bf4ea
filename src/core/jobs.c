/* The reaper: idle pause and idle stop, memory pressure, TTL expiry, drift
 * between the store and the backend, and the cap on running boxes (least
 * recently active first).
 *
 * The tiers of an idle box: running -> paused after idle_pause_s (its
 * processes kept, no CPU) -> stopped after idle_stop_s (processes gone, files
 * kept), both counted from its last activity. Paused boxes cost memory only:
 * they do not count against the running-box cap, and they are the first to
 * go (stopped, oldest activity first) when the host runs short of memory. */
#include "core/manager_int.h"

#include <fcntl.h>
#include <time.h>

/* Seconds of idleness after which r is paused; 0 = it never is. */
static int64_t pause_after_s(ab_manager *m, const ab_box_rec *r)
{
        if (r->idle_pause_s < 0 || atomic_load(&m->no_pause))
                return 0;
        return r->idle_pause_s > 0     ? r->idle_pause_s
               : m->o.idle_pause_s > 0 ? m->o.idle_pause_s
                                       : 0;
}

static int cmp_active(const void *a, const void *b)
{
        const ab_box_rec *x = a, *y = b;
        return (x->last_active_at > y->last_active_at) - (x->last_active_at < y->last_active_at);
}

/* Pauses (or, for a box that may not pause, stops) least-recently-active
 * idle boxes while more than max_running run. Paused boxes do not count. */
void mgr_enforce_cap(ab_manager *m, const char *keep)
{
        if (m->o.max_running <= 0)
                return;
        /* Two enforcements at once would each stop a box for the same excess. */
        pthread_mutex_lock(&m->cap_lock);
        ab_box_filter f = {.provider = m->provider, .status = AB_BOX_RUNNING, .node = m->o.node_id};
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
        if (n > 1)
                qsort(rs, n, sizeof(*rs), cmp_active);
        for (size_t i = 0; i < n && running > (size_t)m->o.max_running; i++) {
                if (mgr_is_pool(&rs[i]) || (keep && !strcmp(rs[i].id, keep)))
                        continue;
                slot *s = mgr_slot_get(m, rs[i].id);
                if (atomic_load(&s->inflight) == 0 && pthread_mutex_trylock(&s->lock) == 0) {
                        ab_box_rec r = {0};
                        if (ab_store_box_get(m->o.store, m->provider, rs[i].id, &r, NULL) == 0 &&
                            r.status == AB_BOX_RUNNING && atomic_load(&s->inflight) == 0) {
                                ab_err *se = NULL;
                                bool done = pause_after_s(m, &r) > 0 &&
                                            mgr_pause_locked(m, &r, "lru", &se) == 0;
                                ab_err_free(&se);
                                if (done || mgr_stop_locked(m, &r, "lru", &se) == 0)
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

/* Pauses running boxes idle past their pause deadline, or stops running and
 * paused boxes idle past their stop deadline. A box in use, or used since it
 * was listed, is left alone. */
static void reap_idle(ab_manager *m, ab_idle_kind kind)
{
        bool pause = kind == AB_IDLE_PAUSE;
        if (pause && atomic_load(&m->no_pause))
                return;
        int64_t now = mgr_wall_ms();
        ab_box_rec *rs = NULL;
        size_t n = 0;
        _cleanup_err_ ab_err *e = NULL;
        if (ab_store_box_list_idle(m->o.store, m->provider, kind, now,
                                   pause ? m->o.idle_pause_s : m->o.idle_stop_s, &rs, &n, &e) < 0) {
                ab_log(AB_LOG_WARN,
                       pause ? "idle pause: cannot list boxes" : "idle stop: cannot list boxes",
                       "error", e->msg, NULL);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                if (!mgr_owns(m, &rs[i]))
                        continue; /* another fleet node's: its own jobs see to it */
                slot *s = mgr_slot_get(m, rs[i].id);
                pthread_mutex_lock(&s->lock);
                ab_box_rec r = {0};
                if (atomic_load(&s->inflight) == 0 &&
                    ab_store_box_get(m->o.store, m->provider, rs[i].id, &r, NULL) == 0 &&
                    (r.status == AB_BOX_RUNNING || (!pause && r.status == AB_BOX_PAUSED)) &&
                    r.last_active_at <= rs[i].last_active_at) {
                        if (r.status == AB_BOX_RUNNING && mgr_procs_running(m, &r)) {
                                /* a user's command runs on in it: busy, not idle */
                                ab_store_box_touch(m->o.store, m->provider, r.id, now, NULL);
                                ab_box_rec_clear(&r);
                                pthread_mutex_unlock(&s->lock);
                                mgr_slot_put(m, s);
                                continue;
                        }
                        ab_err *se = NULL;
                        int rc = pause ? mgr_pause_locked(m, &r, "idle", &se)
                                       : mgr_stop_locked(m, &r, "idle", &se);
                        if (rc < 0 && !(pause && se->code == AB_E_UNSUPPORTED)) {
                                ab_log(AB_LOG_WARN,
                                       pause ? "idle pause failed" : "idle stop failed", "box",
                                       r.id, "error", se->msg, NULL);
                        }
                        ab_err_free(&se);
                }
                ab_box_rec_clear(&r);
                pthread_mutex_unlock(&s->lock);
                mgr_slot_put(m, s);
        }
        ab_box_recs_free(rs, n);
}

/* MemAvailable as a percentage of MemTotal (/proc/meminfo, or the file the
 * options name); -1 when unreadable. */
static double mem_available_pct(const ab_manager *m)
{
        _cleanup_free_ char *buf = NULL;
        const char *path = m->o.meminfo_path ? m->o.meminfo_path : "/proc/meminfo";
        if (ab_read_file(AT_FDCWD, path, &buf, NULL) < 0)
                return -1;
        unsigned long long total = 0, avail = 0;
        bool have_avail = false;
        for (char *line = buf; line && *line;
             line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
                if (sscanf(line, "MemTotal: %llu", &total) == 1)
                        continue;
                if (sscanf(line, "MemAvailable: %llu", &avail) == 1)
                        have_avail = true;
        }
        if (!total || !have_avail)
                return -1;
        return 100.0 * (double)avail / (double)total;
}

/* When memory is short, stops paused boxes, least recently active first,
 * until it is not (their files are kept; a use starts them again). Running
 * boxes are left to the cap: stopping them would end work in progress. */
static void relieve_memory(ab_manager *m)
{
        if (m->o.memory_pressure_pct <= 0)
                return;
        double pct = mem_available_pct(m);
        if (pct < 0 || pct >= m->o.memory_pressure_pct)
                return;
        ab_box_filter f = {.provider = m->provider, .status = AB_BOX_PAUSED, .node = m->o.node_id};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, NULL) < 0 || n == 0)
                return; /* nothing paused: nothing this job can free */
        qsort(rs, n, sizeof(*rs), cmp_active);
        char have[32];
        snprintf(have, sizeof(have), "%.1f%%", pct);
        ab_log(AB_LOG_WARN, "memory is short: stopping paused boxes", "mem_available", have, NULL);
        for (size_t i = 0; i < n && pct >= 0 && pct < m->o.memory_pressure_pct; i++) {
                if (mgr_is_pool(&rs[i]))
                        continue;
                slot *s = mgr_slot_get(m, rs[i].id);
                if (pthread_mutex_trylock(&s->lock) == 0) {
                        ab_box_rec r = {0};
                        if (atomic_load(&s->inflight) == 0 &&
                            ab_store_box_get(m->o.store, m->provider, rs[i].id, &r, NULL) == 0 &&
                            r.status == AB_BOX_PAUSED) {
                                ab_err *se = NULL;
                                if (mgr_stop_locked(m, &r, "memory", &se) < 0)
                                        ab_log(AB_LOG_WARN, "stop under memory pressure failed",
                                               "box", r.id, "error", se->msg, NULL);
                                ab_err_free(&se);
                                pct = mem_available_pct(m);
                        }
                        ab_box_rec_clear(&r);
                        pthread_mutex_unlock(&s->lock);
                }
                mgr_slot_put(m, s);
        }
        ab_box_recs_free(rs, n);
}

/* TTL expiry: the store lists only the boxes whose TTL has passed, and
 * tells the earliest end still ahead, which the reaper sleeps towards. */
static void reap_ttl(ab_manager *m)
{
        ab_box_rec *rs = NULL;
        size_t n = 0;
        int64_t now = mgr_wall_ms(), next = 0;
        if (ab_store_box_next_ttl_end(m->o.store, m->provider, m->o.node_id, now, &next, NULL) ==
            0) {
                pthread_mutex_lock(&m->lock);
                /* an end moved earlier meanwhile wakes the reaper for another */
                if (!m->ttl_wanted || !m->ttl_next_ms || (next && next < m->ttl_next_ms))
                        m->ttl_next_ms = next;
                pthread_mutex_unlock(&m->lock);
        }
        if (ab_store_box_list_expired(m->o.store, m->provider, now, &rs, &n, NULL) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                if (!mgr_owns(m, &rs[i]))
                        continue; /* another fleet node's: its own jobs see to it */
                slot *s = mgr_slot_get(m, rs[i].id);
                pthread_mutex_lock(&s->lock);
                ab_box_rec cur = {0};
                const char *act = NULL;
                if (ab_store_box_get(m->o.store, m->provider, rs[i].id, &cur, NULL) == 0 &&
                    cur.status != AB_BOX_DELETING &&
                    (act = json_string_value(json_object_get(cur.spec, "ttl_action"))) &&
                    !strcmp(act, "pause")) {
                        mgr_ttl_pause_locked(m, &cur);
                } else if (cur.id && cur.status != AB_BOX_DELETING) {
                        ab_metrics_op(m->o.metrics, "ttl_delete", true);
                        mgr_delete_locked(m, &cur);
                }
                ab_box_rec_clear(&cur);
                pthread_mutex_unlock(&s->lock);
                mgr_slot_put(m, s);
        }
        ab_box_recs_free(rs, n);
}

/* Drift: boxes the store thinks run (or are paused) whose init died, or that
 * someone else (the CLI) paused or resumed. One page of DRIFT_PAGE boxes a
 * round, walking the table by id, so a round's cost does not grow with the
 * number of boxes; any use of a box checks it at once anyway. */
#define DRIFT_PAGE 64
static void reap_drift(ab_manager *m)
{
        ab_box_filter f = {.provider = m->provider,
                           .node = m->o.node_id,
                           .after_id = m->drift_cursor,
                           .limit = DRIFT_PAGE};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, NULL) < 0)
                return;
        free(m->drift_cursor); /* a short page ends the walk: the next starts over */
        m->drift_cursor = n == DRIFT_PAGE ? xstrdup(rs[n - 1].id) : NULL;
        ab_backend *b = m->o.backend;
        for (size_t i = 0; i < n; i++) {
                ab_box_rec *r = &rs[i];
                if (r->status != AB_BOX_RUNNING && r->status != AB_BOX_PAUSED)
                        continue;
                ab_box_info info;
                if (b->ops->info(b, r->backend_id, &info, NULL) < 0)
                        continue;
                ab_box_status truth = info.status;
                ab_box_info_clear(&info);
                if (truth == r->status ||
                    (truth != AB_BOX_STOPPED && truth != AB_BOX_RUNNING && truth != AB_BOX_PAUSED))
                        continue;
                slot *s = mgr_slot_get(m, r->id);
                if (pthread_mutex_trylock(&s->lock) == 0) {
                        ab_box_rec cur = {0};
                        if (ab_store_box_get(m->o.store, m->provider, r->id, &cur, NULL) == 0 &&
                            cur.status == r->status) {
                                mgr_set_status(m, &cur, truth, NULL);
                                mgr_emit(
                                    m,
                                    truth == AB_BOX_STOPPED  ? "box.stopped"
                                    : truth == AB_BOX_PAUSED ? "box.paused"
                                                             : "box.resumed",
                                    &cur,
                                    json_pack("{s:s}", "reason",
                                              truth == AB_BOX_STOPPED ? "exited" : "external"));
                        }
                        ab_box_rec_clear(&cur);
                        pthread_mutex_unlock(&s->lock);
                }
                mgr_slot_put(m, s);
        }
        ab_box_recs_free(rs, n);
}

void mgr_ttl_wake(ab_manager *m, int64_t end_ms)
{
        pthread_mutex_lock(&m->lock);
        if (!m->ttl_next_ms || end_ms < m->ttl_next_ms) {
                m->ttl_next_ms = end_ms;
                m->ttl_wanted = true;
                pthread_cond_broadcast(&m->wake);
        }
        pthread_mutex_unlock(&m->lock);
}

/* How long the reaper sleeps: its interval, or less when a box's TTL ends
 * sooner (just after that end: the expiry test is "ended before now"). */
static int64_t reaper_nap_ms(ab_manager *m)
{
        int64_t ms = m->o.reaper_interval_ms;
        pthread_mutex_lock(&m->lock);
        int64_t next = m->ttl_next_ms;
        pthread_mutex_unlock(&m->lock);
        if (next) {
                int64_t left = next - mgr_wall_ms() + 5;
                if (left < ms)
                        ms = left > 5 ? left : 5;
        }
        return ms;
}

void ab_manager_reap(ab_manager *m)
{
        pthread_mutex_lock(&m->reap_lock);
        /* Stop before pause: a box past both deadlines is not paused first. */
        reap_idle(m, AB_IDLE_STOP);
        reap_idle(m, AB_IDLE_PAUSE);
        relieve_memory(m);
        reap_ttl(m);
        reap_drift(m);
        mgr_enforce_cap(m, NULL);
        pthread_mutex_unlock(&m->reap_lock);
}

void *mgr_reaper_main(void *arg)
{
        ab_manager *m = arg;
        while (mgr_nap(m, reaper_nap_ms(m), &m->ttl_wanted))
                ab_manager_reap(m);
        return NULL;
}
