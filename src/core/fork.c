/* Forks and snapshots: a new box with a copy of another's files, and a new
 * image of what an image box changed. The backend copies the disk (its
 * fork and snapshot ops); here are the checks and records a create has:
 * keys, quotas, disk admission, the image hold, events, metrics, logs. */
#include "core/manager_int.h"
#include "image/ref.h"

/* The source's id of its image (the record's, else the backend's), or NULL. */
static char *source_image(ab_manager *m, const ab_box_rec *r)
{
        const json_t *img = mgr_rec_image(r);
        const char *id = img ? json_string_value(json_object_get(img, "id")) : NULL;
        if (id)
                return xstrdup(id);
        ab_backend *b = m->o.backend;
        ab_box_info i;
        if (b->ops->info(b, r->backend_id, &i, NULL) < 0)
                return NULL;
        char *out = i.image ? xstrdup(i.image) : NULL;
        ab_box_info_clear(&i);
        return out;
}

static int source_usable(const ab_box_rec *r, ab_err **err)
{
        if (r->status == AB_BOX_DELETING || r->status == AB_BOX_CREATING)
                return ab_err_set(err, AB_E_CONFLICT, 0, "box %s is being %s", r->id,
                                  r->status == AB_BOX_DELETING ? "deleted" : "created");
        return 0;
}

/* The request for the new box: what the caller gave, else the source's. */
static void fork_req(const ab_box_rec *src, const ab_acquire_req *q, ab_acquire_req *nq)
{
        *nq = *q;
        if (!nq->env)
                nq->env = json_object_get(src->spec, "env");
        if (!nq->network)
                nq->network = json_object_get(src->spec, "network");
        if (!nq->entrypoint)
                nq->entrypoint = json_object_get(src->spec, "entrypoint");
        if (!nq->metadata)
                nq->metadata = src->metadata;
        if (!nq->idle_stop_s)
                nq->idle_stop_s = src->idle_stop_s;
        if (!nq->idle_pause_s)
                nq->idle_pause_s = src->idle_pause_s;
        if (!nq->has_ttl && src->ttl_s) {
                nq->has_ttl = true;
                nq->ttl_s = src->ttl_s;
        }
}

/* Makes the backend box of the new record r (caller holds r's slot lock). */
static int fork_backend(ab_manager *m, const ab_box_rec *src, ab_box_rec *r, const ab_limits *lim,
                        const char *image, ab_err **err)
{
        ab_backend *b = m->o.backend;
        if (image && m->o.images && ab_image_hold(m->o.images, r->backend_id, image, err) < 0)
                return -1;
        ab_box_spec spec = {.id = r->backend_id, .limits = *lim};
        uint64_t t0 = ab_now_ns();
        ab_err *e = NULL;
        /* No lock on the source here: the backend holds the box's own lock
         * while it copies the disk, so a stop, start or delete of the source
         * waits for the copy (and an exec only for the freeze). */
        if (b->ops->fork(b, src->backend_id, &spec, &e) < 0) {
                if (image)
                        mgr_image_release(m, r->backend_id);
                ab_metrics_op(m->o.metrics, "fork", false);
                ab_log(AB_LOG_WARN, "box cannot be forked", "box", src->id, "new", r->id, "error",
                       e->msg, NULL);
                ab_err_set(err,
                           e->code == AB_E_NOT_FOUND || e->code == AB_E_CONFLICT ? e->code
                           : e->code == AB_E_STORAGE || e->code == AB_E_LIMIT || e->errnum == ENOSPC
                               ? AB_E_STORAGE
                               : AB_E_UNAVAILABLE,
                           0, "box %s cannot be forked: %s", src->id, e->msg);
                ab_err_free(&e);
                return -1;
        }
        ab_metrics_op(m->o.metrics, "fork", true);
        mgr_set_status(m, r, AB_BOX_RUNNING, NULL);
        mgr_entrypoint_start(m, r);
        mgr_emit(m, "box.created", r,
                 json_pack("{s:I,s:b,s:s}", "duration_ms",
                           (json_int_t)((ab_now_ns() - t0) / 1000000), "from_pool", 0,
                           "forked_from", src->id));
        ab_log(AB_LOG_INFO, "box created", "box", r->id, "forked_from", src->id, NULL);
        return 0;
}

int ab_manager_fork(ab_manager *m, const char *src_id, const ab_acquire_req *q, const char *scope,
                    ab_box_rec *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        ab_backend *b = m->o.backend;
        if (!b->ops->fork)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0, "the %s backend cannot fork boxes",
                                  b->ops->name);
        if (q->image)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "image: a fork runs on the image of the box it copies");
        ab_box_rec src = {0};
        if (mgr_get_scoped(m, src_id, scope, &src, err) < 0)
                return -1;
        ab_acquire_req nq;
        fork_req(&src, q, &nq);
        char id[64];
        const char *app = NULL;
        _cleanup_free_ char *image = NULL;
        int rc = source_usable(&src, err);
        if (rc == 0)
                rc = mgr_check_keys(m, &nq, scope, &app, id, err);
        if (rc == 0)
                rc = mgr_new_id_check(&nq, scope, err);
        if (rc < 0) {
                ab_box_rec_clear(&src);
                return -1;
        }
        if (!app && !q->id && !q->thread_id)
                app = src.app_id; /* a fork with no keys of its own is its source app's */
        ab_limits lim;
        mgr_limits_from_rec(m, &src, &lim);
        if (q->limits)
                lim = *q->limits;
        if (mgr_caps_check(m, app, &lim, nq.network, err) < 0) {
                ab_box_rec_clear(&src);
                return -1;
        }
        image = source_image(m, &src);

        slot *s = mgr_slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        ab_box_rec r = {0};
        ab_err *e = NULL;
        rc = -1;
        if (ab_store_box_get(m->o.store, m->provider, id, &r, &e) == 0) {
                ab_err_set(err, AB_E_CONFLICT, 0, "box %s already exists", id);
                goto unlock;
        }
        if (e->code != AB_E_NOT_FOUND) {
                mgr_propagate(err, steal_pointer(&e));
                goto unlock;
        }
        ab_err_free(&e);
        mgr_ticket qt;
        mgr_disk_ticket dt;
        if (mgr_quota_create_begin(m, app, lim.disk_mib, &qt, err) < 0)
                goto unlock;
        if (mgr_disk_admit(m, lim.disk_mib, &dt, err) < 0) {
                mgr_quota_end(m, &qt);
                goto unlock;
        }
        nq.backend = mgr_rec_backend(&src); /* a fork runs where its source does */
        mgr_fill_new_rec(m, &nq, app, id, &lim, &r);
        const json_t *simg = mgr_rec_image(&src);
        if (simg)
                json_object_set_new(r.spec, "image", json_deep_copy(simg));
        else if (image) /* an adopted box: its record never named its image */
                json_object_set_new(r.spec, "image",
                                    json_pack("{s:s,s:s}", "ref", image, "id", image));
        json_object_set_new(r.spec, "forked_from", json_string(src.id));
        int ins = mgr_quota_insert(m, &qt, &r, &e);
        if (ins < 0) {
                mgr_disk_end(m, &dt);
                if (e->code == AB_E_CONFLICT) {
                        ab_err_free(&e);
                        ab_err_set(err, AB_E_CONFLICT, 0, "box %s already exists", id);
                } else {
                        mgr_propagate(err, steal_pointer(&e));
                }
                goto unlock;
        }
        rc = fork_backend(m, &src, &r, &lim, image, err);
        mgr_disk_end(m, &dt);
        if (rc < 0) {
                ab_store_box_delete(m->o.store, m->provider, id, NULL);
                goto unlock;
        }
        r.last_active_at = mgr_wall_ms();
        ab_store_box_touch(m->o.store, m->provider, id, r.last_active_at, NULL);
        if (mgr_net_sync(m, &r, 0, false, err) < 0) {
                rc = -1; /* the box stays; a start applies the policy */
                goto unlock;
        }
        *out = r;
        memset(&r, 0, sizeof(r));
unlock:
        ab_box_rec_clear(&r);
        pthread_mutex_unlock(&s->lock);
        mgr_slot_put(m, s);
        ab_box_rec_clear(&src);
        if (rc == 0)
                mgr_enforce_cap(m, id);
        return rc;
}

typedef struct snap_ctx {
        ab_backend *b;
        const char *bid;
} snap_ctx;

static int snap_write(void *ud, int fd, ab_err **err)
{
        snap_ctx *c = ud;
        return c->b->ops->snapshot(c->b, c->bid, fd, err);
}

/* Checks a snapshot's name; *canon gets it as Docker spells it in full. */
static int snapshot_name_check(const char *name, char **canon, ab_err **err)
{
        if (!name || !*name)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "name: required (the new image's name, e.g. \"myenv:1\")");
        ab_image_ref ref;
        if (ab_image_ref_parse(name, &ref, err) < 0)
                return ab_err_wrap(err, "name");
        bool digest = ref.digest != NULL;
        *canon = ab_image_ref_str(&ref);
        ab_image_ref_clear(&ref);
        if (digest)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "name: a snapshot is named by a tag, not a digest");
        return 0;
}

int ab_manager_snapshot(ab_manager *m, const char *id, const char *scope, const char *name,
                        ab_image *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        ab_backend *b = m->o.backend;
        if (!m->o.images)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0, "this server has no image store");
        if (!b->ops->snapshot)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0, "the %s backend cannot snapshot boxes",
                                  b->ops->name);
        ab_box_rec r = {0};
        if (mgr_get_scoped(m, id, scope, &r, err) < 0)
                return -1;
        _cleanup_free_ char *image = NULL, *canon = NULL;
        int rc = source_usable(&r, err);
        if (rc == 0)
                rc = snapshot_name_check(name, &canon, err);
        if (rc == 0 && !(image = source_image(m, &r)))
                rc = ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                "snapshot needs a box made from an image (box %s runs on the "
                                "host base); fork works for every box",
                                id);
        uint64_t t0 = ab_now_ns();
        snap_ctx c = {.b = b, .bid = r.backend_id};
        if (rc == 0) {
                rc = ab_image_commit(m->o.images, image, name, scope, snap_write, &c, out, err);
                ab_metrics_op(m->o.metrics, "snapshot", rc == 0);
                if (rc < 0 && err && *err)
                        ab_log(AB_LOG_WARN, "box snapshot failed", "box", id, "error", (*err)->msg,
                               NULL);
        }
        if (rc == 0) {
                mgr_emit(m, "box.snapshot", &r,
                         json_pack("{s:s,s:s,s:I}", "image", out->id, "name", canon, "duration_ms",
                                   (json_int_t)((ab_now_ns() - t0) / 1000000)));
                ab_log(AB_LOG_INFO, "box snapshot", "box", id, "image", out->id, NULL);
        }
        ab_box_rec_clear(&r);
        return rc;
}
