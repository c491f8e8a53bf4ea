/* The warm pool: pre-made boxes an acquire with default limits claims. */
#include "core/manager_int.h"

void mgr_wake_pool(ab_manager *m)
{
        pthread_mutex_lock(&m->lock);
        m->pool_wanted = true;
        pthread_cond_broadcast(&m->wake);
        pthread_mutex_unlock(&m->lock);
}

/* Makes one pool box. */
static int pool_make_one(ab_manager *m)
{
        char rnd[17], id[64];
        ab_id_random(rnd);
        snprintf(id, sizeof(id), POOL_PREFIX "%.12s", rnd);
        ab_acquire_req q = {.mode = "pool"};
        ab_box_rec r = {0};
        mgr_fill_new_rec(m, &q, NULL, id, &m->o.limits, &r);
        _cleanup_err_ ab_err *e = NULL;
        int rc = -1;
        /* the pool's disks are promised like any box's: no refill when short */
        mgr_disk_ticket dt = {0};
        if (mgr_disk_admit(m, m->o.limits.disk_mib, &dt, &e) < 0 ||
            ab_store_box_insert(m->o.store, &r, &e) < 0)
                goto out;
        ab_backend *b = m->o.backend;
        ab_box_spec spec = {.id = id, .limits = m->o.limits};
        int made = b->ops->create(b, &spec, &e);
        mgr_disk_end(m, &dt);
        if (made < 0) {
                ab_store_box_delete(m->o.store, m->provider, id, NULL);
                goto out;
        }
        ab_err *se = NULL;
        if (ab_store_box_set_status(m->o.store, m->provider, id, AB_BOX_RUNNING, AB_BOX_CREATING,
                                    NULL, &se) < 0) {
                ab_err_free(&se);
                b->ops->destroy(b, id, NULL);
                ab_store_box_delete(m->o.store, m->provider, id, NULL);
                goto out;
        }
        rc = 0;
out:
        mgr_disk_end(m, &dt);
        if (rc < 0 && e)
                ab_log(AB_LOG_WARN, "warm pool: cannot make a box", "error", e->msg, NULL);
        ab_metrics_op(m->o.metrics, "pool_create", rc == 0);
        ab_box_rec_clear(&r);
        return rc;
}

static int64_t pool_count(ab_manager *m)
{
        ab_box_filter f = {.provider = m->provider, .mode = AB_MODE_POOL, .node = m->o.node_id};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, NULL) < 0)
                return -1;
        ab_box_recs_free(rs, n);
        return (int64_t)n;
}

void *mgr_pooler_main(void *arg)
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
        } while (mgr_nap(m, failed ? POOL_BACKOFF_MS : m->o.reaper_interval_ms, &m->pool_wanted));
        return NULL;
}
