/* Deletion: boxes are marked deleting at once and destroyed by two
 * deleter threads, so a caller never waits for a disk to go. */
#include "core/manager_int.h"
#include "net/net.h"

void mgr_queue_delete(ab_manager *m, const char *id)
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
void mgr_delete_locked(ab_manager *m, ab_box_rec *r)
{
        if (r->status != AB_BOX_DELETING) {
                mgr_set_status(m, r, AB_BOX_DELETING, NULL);
                mgr_emit(m, "box.deleting", r, NULL);
        }
        mgr_queue_delete(m, r->id);
}

static void destroy_now(ab_manager *m, const char *id)
{
        slot *s = mgr_slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        ab_box_rec r = {0};
        _cleanup_err_ ab_err *e = NULL;
        if (ab_store_box_get(m->o.store, m->provider, id, &r, &e) < 0)
                goto out; /* gone already */
        if (r.status != AB_BOX_DELETING)
                goto out; /* re-acquired meanwhile? never: acquire waits. Be safe. */
        ab_backend *b = m->o.backend;
        if (m->o.net)
                ab_net_release(m->o.net, id);
        if (b->ops->destroy(b, r.backend_id, &e) < 0 && e->code != AB_E_NOT_FOUND) {
                ab_metrics_op(m->o.metrics, "destroy", false);
                ab_log(AB_LOG_ERROR, "cannot destroy box", "box", id, "error", e->msg, NULL);
                mgr_set_status(m, &r, AB_BOX_ERROR, e->msg);
                mgr_emit(m, "box.error", &r, json_pack("{s:s}", "error", e->msg));
                goto out;
        }
        ab_err_free(&e);
        ab_metrics_op(m->o.metrics, "destroy", true);
        if (mgr_rec_image(&r))
                mgr_image_release(m, r.backend_id);
        if (ab_store_box_delete(m->o.store, m->provider, id, &e) < 0)
                ab_log(AB_LOG_ERROR, "store: cannot delete box record", "box", id, "error", e->msg,
                       NULL);
        mgr_emit(m, "box.deleted", &r, NULL);
        ab_log(AB_LOG_INFO, "box deleted", "box", id, NULL);
out:
        ab_box_rec_clear(&r);
        pthread_mutex_unlock(&s->lock);
        mgr_slot_put(m, s);
}

void *mgr_deleter_main(void *arg)
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

static int op_delete(ab_manager *m, ab_box_rec *r, ab_err **err)
{
        mgr_delete_locked(m, r);
        return 0;
}

int ab_manager_delete(ab_manager *m, const char *id, const char *scope, ab_err **err)
{
        ab_box_rec r = {0};
        if (mgr_get_scoped(m, id, scope, &r, err) < 0)
                return -1;
        /* Already deleting: answer as if queued now (idempotent). */
        if (r.status == AB_BOX_DELETING) {
                ab_box_rec_clear(&r);
                return 0;
        }
        ab_box_rec_clear(&r);
        return mgr_with_box(m, id, scope, op_delete, NULL, err);
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
