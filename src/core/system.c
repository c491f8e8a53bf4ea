/* System boxes: the server's own boxes (ids "sys-..."; the code runner's is
 * one). The manager makes and starts them on first use and owns their
 * recovery, but they have no store record: no API lists, stops, deletes or
 * scopes them, and the reaper, the running-box cap and the pool never touch
 * them. A use of one goes through the same exec path as any box (metric,
 * audit row, event). */
#include "core/manager_int.h"

/* Makes the system box exist and run (caller holds its slot lock). A box
 * left half-made by a crash is made again; its disk holds nothing a user
 * put there. */
static int sys_ensure(ab_manager *m, const ab_sysbox_spec *spec, ab_err **err)
{
        ab_backend *b = m->o.backend;
        ab_box_info info;
        ab_err *e = NULL;
        if (b->ops->info(b, spec->id, &info, &e) == 0) {
                ab_box_status st = info.status;
                ab_box_info_clear(&info);
                if (st == AB_BOX_RUNNING)
                        return 0;
                if (st != AB_BOX_CREATING && st != AB_BOX_ERROR) {
                        int r = b->ops->start(b, spec->id, err);
                        ab_metrics_op(m->o.metrics, "start", r == 0);
                        return r;
                }
                ab_log(AB_LOG_WARN, "system box half-made or broken: making it again", "box",
                       spec->id, "state", ab_box_status_name(st), NULL);
                if (b->ops->destroy(b, spec->id, err) < 0)
                        return -1;
        } else if (e->code != AB_E_NOT_FOUND) {
                return mgr_propagate(err, e);
        }
        ab_err_free(&e);
        /* the host's own software: system boxes are native, whatever the default */
        ab_box_spec bs = {.id = spec->id, .limits = spec->limits, .backend = "native"};
        int r = b->ops->create(b, &bs, err);
        ab_metrics_op(m->o.metrics, "create", r == 0);
        if (r == 0)
                ab_log(AB_LOG_INFO, "system box created", "box", spec->id, NULL);
        return r;
}

int ab_manager_sys_use_begin(ab_manager *m, const ab_sysbox_spec *spec, ab_use *u, ab_err **err)
{
        memset(u, 0, sizeof(*u));
        if (strncmp(spec->id, SYSTEM_PREFIX, strlen(SYSTEM_PREFIX)) || !ab_id_valid(spec->id))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "system box ids start with \"" SYSTEM_PREFIX "\", not \"%s\"",
                                  spec->id);
        slot *s = mgr_slot_get(m, spec->id);
        pthread_mutex_lock(&s->lock);
        int rc = sys_ensure(m, spec, err);
        if (rc == 0)
                atomic_fetch_add(&s->inflight, 1);
        pthread_mutex_unlock(&s->lock);
        if (rc < 0) {
                mgr_slot_put(m, s);
                return ab_err_wrap(err, "system box %s", spec->id);
        }
        u->rec.provider = xstrdup(m->provider);
        u->rec.id = xstrdup(spec->id);
        u->rec.backend_id = xstrdup(spec->id);
        u->rec.status = AB_BOX_RUNNING;
        u->rec.mode = AB_MODE_SYSTEM;
        u->rec.has_limits = true;
        u->rec.limits = spec->limits;
        u->slot = s;
        return 0;
}

int mgr_sys_restart(ab_manager *m, ab_use *u, ab_err **err)
{
        slot *s = u->slot;
        ab_sysbox_spec spec = {.id = u->rec.id, .limits = u->rec.limits};
        pthread_mutex_lock(&s->lock);
        int rc = sys_ensure(m, &spec, err);
        pthread_mutex_unlock(&s->lock);
        return rc;
}

ab_backend *ab_manager_backend(ab_manager *m)
{
        return m->o.backend;
}

int ab_sysboxes_stop(ab_backend *b, size_t *stopped, size_t *others_live, ab_err **err)
{
        *stopped = *others_live = 0;
        ab_box_info *bi = NULL;
        size_t n = 0;
        if (b->ops->list(b, &bi, &n, err) < 0)
                return ab_err_wrap(err, "list boxes");
        int rc = 0;
        for (size_t i = 0; i < n; i++) {
                bool live = bi[i].status == AB_BOX_RUNNING || bi[i].status == AB_BOX_PAUSED;
                if (strncmp(bi[i].id, SYSTEM_PREFIX, strlen(SYSTEM_PREFIX))) {
                        *others_live += live || bi[i].status == AB_BOX_CREATING;
                        continue;
                }
                if (!live)
                        continue;
                ab_err *e = NULL;
                if (b->ops->stop(b, bi[i].id, &e) == 0) {
                        (*stopped)++;
                        ab_log(AB_LOG_INFO, "system box stopped", "box", bi[i].id, NULL);
                } else if (rc == 0) {
                        rc = mgr_propagate(err, e);
                        ab_err_wrap(err, "stop system box %s", bi[i].id);
                } else {
                        ab_err_free(&e);
                }
        }
        for (size_t i = 0; i < n; i++)
                ab_box_info_clear(&bi[i]);
        free(bi);
        return rc;
}
