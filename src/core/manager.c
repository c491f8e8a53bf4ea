/* The sandbox manager's handle: open and free, per-box slots, record
 * helpers, and the counts behind /health and /metrics (see manager_int.h
 * for the other files). */
#include "core/manager_int.h"
#include "net/net.h"

#include <time.h>

int64_t mgr_wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static unsigned hash_id(const char *s)
{
        unsigned h = 5381;
        for (; *s; s++)
                h = h * 33u + (unsigned char)*s;
        return h % N_BUCKETS;
}

slot *mgr_slot_get(ab_manager *m, const char *id)
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

void mgr_slot_put(ab_manager *m, slot *s)
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

int ab_manager_box_locked(ab_manager *m, const char *id, ab_locked_fn fn, void *ud, ab_err **err)
{
        slot *s = mgr_slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        int r = fn(m, ud, err);
        pthread_mutex_unlock(&s->lock);
        mgr_slot_put(m, s);
        return r;
}

void mgr_emit(ab_manager *m, const char *type, const ab_box_rec *r, json_t *data)
{
        if (!data)
                data = json_object();
        if (r && r->mode)
                json_object_set_new(data, "mode", json_string(ab_box_mode_name(r->mode)));
        ab_events_emit(m->o.events, type, r ? r->id : NULL, r ? r->app_id : NULL, data);
}

/* The box's limits: its own, or the server's defaults. Output cap and
 * open-file limit are the server's (not stored per box). */
void mgr_limits_from_rec(const ab_manager *m, const ab_box_rec *r, ab_limits *l)
{
        *l = m->o.limits;
        if (r->has_limits) {
                l->cpus = r->limits.cpus;
                l->memory_mib = r->limits.memory_mib;
                l->pids = r->limits.pids;
                l->disk_mib = r->limits.disk_mib;
                l->timeout_s = r->limits.timeout_s;
        }
}

char *mgr_dump(json_t *j)
{
        char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        if (!s)
                abort();
        return s;
}

bool mgr_is_pool(const ab_box_rec *r)
{
        return r->mode == AB_MODE_POOL;
}

bool mgr_is_task(const ab_box_rec *r)
{
        return r->mode == AB_MODE_TASK;
}

bool mgr_scope_ok(const ab_box_rec *r, const char *scope)
{
        return !scope || (r->app_id && !strcmp(r->app_id, scope));
}

/* Hands e to the caller's err (or frees it); returns -1. */
int mgr_propagate(ab_err **err, ab_err *e)
{
        if (err && !*err)
                *err = e;
        else
                ab_err_free(&e);
        return -1;
}

int mgr_get_scoped(ab_manager *m, const char *id, const char *scope, ab_box_rec *out, ab_err **err)
{
        if (!ab_id_valid(id))
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box \"%s\"", id);
        ab_err *e = NULL;
        if (ab_store_box_get(m->o.store, m->provider, id, out, &e) < 0) {
                if (e->code == AB_E_NOT_FOUND) {
                        ab_err_free(&e);
                        return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box \"%s\"", id);
                }
                return mgr_propagate(err, e);
        }
        if (!mgr_scope_ok(out, scope) || mgr_is_pool(out)) {
                ab_box_rec_clear(out);
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box \"%s\"", id);
        }
        return 0;
}

bool mgr_owns(const ab_manager *m, const ab_box_rec *r)
{
        return !m->o.node_id || (r->node && !strcmp(r->node, m->o.node_id));
}

/* Records a new status (store) and tells subscribers. */
void mgr_set_status(ab_manager *m, ab_box_rec *r, ab_box_status status, const char *error)
{
        _cleanup_err_ ab_err *e = NULL;
        if (ab_store_box_set_status(m->o.store, m->provider, r->id, status, 0, error, &e) < 0)
                ab_log(AB_LOG_WARN, "store: cannot record box status", "box", r->id, "status",
                       ab_box_status_name(status), "error", e->msg, NULL);
        r->status = status;
        free(r->error);
        r->error = error ? xstrdup(error) : NULL;
}

void mgr_sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

int ab_manager_get(ab_manager *m, const char *id, const char *scope, ab_box_rec *out, ab_err **err)
{
        return mgr_get_scoped(m, id, scope, out, err);
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
                if (mgr_is_pool(&(*out)[i]))
                        ab_box_rec_clear(&(*out)[i]);
                else
                        (*out)[k++] = (*out)[i];
        }
        *n = k;
        return 0;
}

int ab_manager_stats(ab_manager *m, const ab_box_rec *r, ab_box_stats *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        return m->o.backend->ops->stats(m->o.backend, r->backend_id, out, err);
}

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
        pthread_mutex_lock(&m->counts_lock);
        uint64_t now = ab_now_ns();
        if (m->counts_at_ns && now - m->counts_at_ns < 500000000u) {
                counts_copy(&m->counts_cache, out);
                out->execs_in_flight = atomic_load(&m->inflight_total);
                pthread_mutex_unlock(&m->counts_lock);
                return 0;
        }
        ab_box_filter f = {.provider = m->provider, .node = m->o.node_id};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, err) < 0) {
                pthread_mutex_unlock(&m->counts_lock);
                return -1;
        }
        ab_manager_counts c = {0};
        c.n_states = AB_BOX_STATUS_MAX;
        c.states = xcalloc(c.n_states, sizeof(char *));
        c.counts = xcalloc(c.n_states, sizeof(int64_t));
        for (size_t i = 0; i < c.n_states; i++)
                c.states[i] = xstrdup(ab_box_status_name((ab_box_status)(i + 1)));
        for (size_t i = 0; i < n; i++) {
                if (mgr_is_pool(&rs[i])) {
                        c.pool_size += (rs[i].status == AB_BOX_RUNNING);
                        continue;
                }
                if (rs[i].status > 0 && rs[i].status <= AB_BOX_STATUS_MAX)
                        c.counts[rs[i].status - 1]++;
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
        pthread_mutex_init(&m->reap_lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&m->wake, &ca);
        pthread_condattr_destroy(&ca);
        pthread_cond_init(&m->del_wake, NULL);
        mgr_quota_init(m);
        mgr_disk_init(m);
        if (m->o.no_jobs) {
                *out = m;
                return 0;
        }
        if (mgr_reconcile(m, err) < 0) {
                ab_manager_free(m);
                return -1;
        }
        for (int i = 0; i < N_DELETERS; i++)
                if (pthread_create(&m->deleters[i], NULL, mgr_deleter_main, m) == 0)
                        m->n_deleters++;
        m->have_reaper = pthread_create(&m->reaper, NULL, mgr_reaper_main, m) == 0;
        if (m->o.pool_size > 0)
                m->have_pooler = pthread_create(&m->pooler, NULL, mgr_pooler_main, m) == 0;
        if (m->o.sample_interval_ms > 0)
                m->have_sampler = pthread_create(&m->sampler, NULL, mgr_sampler_main, m) == 0;
        mgr_disk_start(m);
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
        mgr_disk_free(m); /* joins the guard thread */
        mgr_quota_free(m);
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
        pthread_mutex_destroy(&m->reap_lock);
        free(m->drift_cursor);
        pthread_cond_destroy(&m->wake);
        pthread_cond_destroy(&m->del_wake);
        free(m);
}

void mgr_fill_new_rec(ab_manager *m, const ab_acquire_req *q, const char *app, const char *id,
                      const ab_limits *lim, ab_box_rec *r)
{
        int64_t now = mgr_wall_ms();
        r->provider = xstrdup(m->provider);
        r->id = xstrdup(id);
        r->node = m->o.node_id ? xstrdup(m->o.node_id) : NULL;
        r->backend_id = xstrdup(id);
        r->app_id = app ? xstrdup(app) : NULL;
        r->user_id = q->user_id ? xstrdup(q->user_id) : NULL;
        r->chat_id = q->chat_id ? xstrdup(q->chat_id) : NULL;
        r->thread_id = q->thread_id ? xstrdup(q->thread_id) : NULL;
        r->status = AB_BOX_CREATING;
        r->mode = q->mode ? ab_box_mode_parse(q->mode) : AB_MODE_SESSION;
        r->created_at = now;
        r->last_active_at = now;
        r->idle_stop_s = q->idle_stop_s;
        r->idle_pause_s = q->idle_pause_s;
        r->ttl_s = q->has_ttl ? q->ttl_s : m->o.ttl_s;
        r->has_limits = true;
        r->limits = *lim;
        json_t *spec = json_object();
        json_object_set_new(spec, "env", q->env ? json_deep_copy(q->env) : json_object());
        ab_netpol pol = {0};
        if (q->network && ab_netpol_parse(q->network, &pol, NULL) < 0)
                memset(&pol, 0, sizeof(pol)); /* validated before: cannot happen */
        json_object_set_new(spec, "network", ab_netpol_json(&pol));
        if (q->entrypoint)
                json_object_set_new(spec, "entrypoint", json_deep_copy(q->entrypoint));
        ab_netpol_clear(&pol);
        char me[160];
        if (mgr_process_identity(getpid(), me, sizeof(me)))
                json_object_set_new(spec, "creator", json_string(me));
        /* This creation of the box: a random value no later box with the same
         * id has (credentials bound to one box's life, as E2B's access token,
         * include it). */
        char c1[17], c2[17];
        ab_id_random(c1);
        ab_id_random(c2);
        json_object_set_new(spec, "creation", json_pack("s+", c1, c2));
        /* the backend that runs it (the default when the request names none) */
        json_object_set_new(
            spec, "backend",
            json_string(q->backend ? q->backend : ab_backend_default(m->o.backend)));
        r->spec = spec;
        r->metadata = q->metadata ? json_deep_copy(q->metadata) : NULL;
}
