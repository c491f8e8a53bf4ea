/* Start, stop, pause, resume and network changes of one box, under its slot lock. */
#include "core/manager_int.h"
#include "net/net.h"

#define PAUSE_WAIT_USES_MS 1000 /* how long a pause waits for uses in flight to end */

/* Thaws a paused box (caller holds the slot lock): the record says running,
 * the resume counts as activity (else the reaper would pause it again at
 * once), and subscribers get "box.resumed". */
static int resume_locked(ab_manager *m, ab_box_rec *r, const char *reason, ab_err **err)
{
        ab_backend *b = m->o.backend;
        uint64_t t0 = ab_now_ns();
        if (b->ops->resume(b, r->backend_id, err) < 0) {
                ab_metrics_op(m->o.metrics, "resume", false);
                return -1;
        }
        ab_metrics_op(m->o.metrics, "resume", true);
        int64_t now = mgr_wall_ms();
        ab_store_box_touch(m->o.store, m->provider, r->id, now, NULL);
        if (r->last_active_at < now)
                r->last_active_at = now;
        mgr_set_status(m, r, AB_BOX_RUNNING, NULL);
        mgr_emit(m, "box.resumed", r,
                 json_pack("{s:s,s:f}", "reason", reason, "duration_ms",
                           (double)(ab_now_ns() - t0) / 1e6));
        return 0;
}

int mgr_pause_locked(ab_manager *m, ab_box_rec *r, const char *reason, ab_err **err)
{
        ab_backend *b = m->o.backend;
        const char *op = !strcmp(reason, "idle")  ? "idle_pause"
                         : !strcmp(reason, "lru") ? "lru_pause"
                                                  : "pause";
        uint64_t t0 = ab_now_ns();
        ab_err *e = NULL;
        if (b->ops->pause(b, r->backend_id, &e) < 0) {
                ab_metrics_op(m->o.metrics, op, false);
                /* No freezer (v1 without its hierarchy): the policy stops idle
                 * boxes instead from now on; say so once. */
                if (e->code == AB_E_UNSUPPORTED && !atomic_exchange(&m->no_pause, true))
                        ab_log(AB_LOG_WARN, "boxes cannot be paused here; idle boxes are stopped",
                               "error", e->msg, NULL);
                if (err && !*err)
                        *err = e;
                else
                        ab_err_free(&e);
                return -1;
        }
        ab_metrics_op(m->o.metrics, op, true);
        mgr_set_status(m, r, AB_BOX_PAUSED, NULL);
        mgr_emit(m, "box.paused", r,
                 json_pack("{s:s,s:f}", "reason", reason, "duration_ms",
                           (double)(ab_now_ns() - t0) / 1e6));
        ab_log(AB_LOG_INFO, "box paused", "box", r->id, "reason", reason, NULL);
        return 0;
}

/* Makes the box's backend run it (a paused box is resumed). Caller holds the
 * slot lock. Returns 1 when it had to start or resume the box, 0 when it ran
 * already, -1 on failure. */
/* The record of a box that just started reads running: mgr_quota_commit's step. */
typedef struct running_set {
        ab_manager *m;
        ab_box_rec *r;
} running_set;

static int set_running(void *arg)
{
        running_set *x = arg;
        mgr_set_status(x->m, x->r, AB_BOX_RUNNING, NULL);
        return 0;
}

int mgr_ensure_running(ab_manager *m, ab_box_rec *r, ab_err **err)
{
        ab_backend *b = m->o.backend;
        ab_box_info info;
        ab_err *e = NULL;
        if (r->status == AB_BOX_PAUSED) {
                /* The common case of a paused box: a thaw is all it takes. If
                 * the backend says otherwise (it stopped meanwhile), ask it. */
                if (resume_locked(m, r, "use", &e) == 0)
                        return 1;
                ab_err_free(&e);
        }
        if (b->ops->info(b, r->backend_id, &info, &e) < 0) {
                if (e->code == AB_E_NOT_FOUND) {
                        ab_err_free(&e);
                        _cleanup_free_ char *msg =
                            xasprintf("the backend has no box \"%s\" any more (its disk is gone)",
                                      r->backend_id);
                        mgr_set_status(m, r, AB_BOX_ERROR, msg);
                        mgr_emit(m, "box.error", r, json_pack("{s:s}", "error", msg));
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
        bool paused = info.status == AB_BOX_PAUSED;
        pid_t pid = info.init_pid;
        ab_box_info_clear(&info);
        if (paused) /* paused under another name (the CLI) or by a crashed server */
                return resume_locked(m, r, "use", err) < 0 ? -1 : 1;
        if (running) {
                if (r->status != AB_BOX_RUNNING)
                        mgr_set_status(m, r, AB_BOX_RUNNING, NULL);
                return mgr_net_sync(m, r, pid, false, err) < 0 ? -1 : 0;
        }
        uint64_t t0 = ab_now_ns();
        int started = 0;
        mgr_ticket qt;
        if (mgr_quota_start_begin(m, r, &qt, err) < 0)
                return -1;
        if (b->ops->start(b, r->backend_id, &e) < 0) {
                mgr_quota_end(m, &qt);
                ab_metrics_op(m->o.metrics, "start", false);
                mgr_set_status(m, r, AB_BOX_STOPPED, e->msg);
                mgr_emit(m, "box.error", r, json_pack("{s:s}", "error", e->msg));
                ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s cannot start: %s", r->id, e->msg);
                ab_err_free(&e);
                return -1;
        }
        ab_metrics_op(m->o.metrics, "start", true);
        running_set rs = {.m = m, .r = r};
        mgr_quota_commit(m, &qt, set_running, &rs); /* the record counts it now */
        started = 1;
        mgr_emit(m, "box.started", r,
                 json_pack("{s:I}", "duration_ms", (json_int_t)((ab_now_ns() - t0) / 1000000)));
        mgr_entrypoint_start(m, r);
        if (mgr_net_sync(m, r, 0, false, err) < 0)
                return -1;
        return started;
}

/* Stops the box (caller holds the slot lock). */
int mgr_stop_locked(ab_manager *m, ab_box_rec *r, const char *reason, ab_err **err)
{
        ab_backend *b = m->o.backend;
        if (b->ops->stop(b, r->backend_id, err) < 0) {
                ab_metrics_op(m->o.metrics, "stop", false);
                return -1;
        }
        if (m->o.net)
                ab_net_release(m->o.net, r->id);
        ab_metrics_op(m->o.metrics,
                      !strcmp(reason, "idle")     ? "idle_stop"
                      : !strcmp(reason, "lru")    ? "lru_stop"
                      : !strcmp(reason, "memory") ? "pressure_stop"
                                                  : "stop",
                      true);
        mgr_set_status(m, r, AB_BOX_STOPPED, NULL);
        mgr_emit(m, "box.stopped", r, json_pack("{s:s}", "reason", reason));
        ab_log(AB_LOG_INFO, "box stopped", "box", r->id, "reason", reason, NULL);
        return 0;
}

int mgr_with_box(ab_manager *m, const char *id, const char *scope, locked_op op, ab_box_rec *out,
                 ab_err **err)
{
        ab_box_rec r = {0};
        if (mgr_get_scoped(m, id, scope, &r, err) < 0)
                return -1;
        ab_box_rec_clear(&r);
        slot *s = mgr_slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        int rc = mgr_get_scoped(m, id, scope, &r, err);
        if (rc == 0 && r.status == AB_BOX_DELETING)
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box %s is being deleted", id);
        if (rc == 0 && !mgr_owns(m, &r)) /* the server forwards such requests: a safety net */
                rc = ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s runs on fleet node %s", id,
                                r.node);
        if (rc == 0)
                rc = op(m, &r, err);
        pthread_mutex_unlock(&s->lock);
        mgr_slot_put(m, s);
        if (rc >= 0 && out)
                *out = r;
        else
                ab_box_rec_clear(&r);
        return rc;
}

static int op_stop(ab_manager *m, ab_box_rec *r, ab_err **err)
{
        if (r->status == AB_BOX_STOPPED)
                return 0;
        return mgr_stop_locked(m, r, "api", err);
}

static int op_start(ab_manager *m, ab_box_rec *r, ab_err **err)
{
        if (mgr_ensure_running(m, r, err) < 0)
                return -1;
        int64_t now = mgr_wall_ms();
        ab_store_box_touch(m->o.store, m->provider, r->id, now, NULL);
        r->last_active_at = now;
        return 0;
}

static int op_pause(ab_manager *m, ab_box_rec *r, ab_err **err)
{
        if (r->status != AB_BOX_RUNNING && r->status != AB_BOX_PAUSED)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "box %s is %s: only a running box can be paused", r->id,
                                  ab_box_status_name(r->status));
        /* Paused already: a no-op, or re-pauses a box resumed behind the
         * record's back (the CLI). */
        if (r->status == AB_BOX_PAUSED)
                return m->o.backend->ops->pause(m->o.backend, r->backend_id, err);
        /* A command running now would hang, its timeout frozen with it. A
         * use that just answered its caller ends a moment later (it writes
         * its audit row after the answer): wait that moment out. */
        slot *s = mgr_slot_get(m, r->id);
        /* (uses held by long-lived processes are frozen with the box) */
        int busy = atomic_load(&s->inflight) - atomic_load(&s->held);
        for (uint64_t end = ab_now_ns() + PAUSE_WAIT_USES_MS * 1000000ull;
             busy > 0 && ab_now_ns() < end;
             busy = atomic_load(&s->inflight) - atomic_load(&s->held))
                mgr_sleep_ms(2);
        mgr_slot_put(m, s);
        if (busy > 0)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "box %s is in use (%d exec, file or tool call%s running); pause "
                                  "it when they are done",
                                  r->id, busy, busy == 1 ? "" : "s");
        return mgr_pause_locked(m, r, "api", err);
}

static int op_resume(ab_manager *m, ab_box_rec *r, ab_err **err)
{
        if (r->status == AB_BOX_PAUSED)
                return resume_locked(m, r, "api", err);
        if (r->status != AB_BOX_RUNNING)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "box %s is %s: there are no processes to resume; start it "
                                  "instead",
                                  r->id, ab_box_status_name(r->status));
        /* Running per the record: make sure (a pause by the CLI). */
        if (m->o.backend->ops->resume(m->o.backend, r->backend_id, err) < 0)
                return -1;
        int64_t now = mgr_wall_ms();
        ab_store_box_touch(m->o.store, m->provider, r->id, now, NULL);
        if (r->last_active_at < now)
                r->last_active_at = now;
        return 0;
}

int ab_manager_pause(ab_manager *m, const char *id, const char *scope, ab_box_rec *out,
                     ab_err **err)
{
        return mgr_with_box(m, id, scope, op_pause, out, err);
}

int ab_manager_resume(ab_manager *m, const char *id, const char *scope, ab_box_rec *out,
                      ab_err **err)
{
        if (mgr_with_box(m, id, scope, op_resume, out, err) < 0)
                return -1;
        mgr_enforce_cap(m, id);
        return 0;
}

int ab_manager_stop(ab_manager *m, const char *id, const char *scope, ab_box_rec *out, ab_err **err)
{
        return mgr_with_box(m, id, scope, op_stop, out, err);
}

int ab_manager_start(ab_manager *m, const char *id, const char *scope, ab_box_rec *out,
                     ab_err **err)
{
        if (mgr_with_box(m, id, scope, op_start, out, err) < 0)
                return -1;
        mgr_enforce_cap(m, id);
        return 0;
}

/* 1 when the box had to be thawed or started, 0 when it ran already. */
static int op_ensure_running(ab_manager *m, ab_box_rec *r, ab_err **err)
{
        if (r->status == AB_BOX_RUNNING)
                return 0;
        if (r->status == AB_BOX_PAUSED)
                return resume_locked(m, r, "api", err) < 0 ? -1 : 1;
        return op_start(m, r, err) < 0 ? -1 : 1;
}

int ab_manager_ensure_running(ab_manager *m, const char *id, const char *scope, bool *woke,
                              ab_box_rec *out, ab_err **err)
{
        int rc = mgr_with_box(m, id, scope, op_ensure_running, out, err);
        if (rc < 0)
                return -1;
        if (woke)
                *woke = rc > 0;
        if (rc > 0)
                mgr_enforce_cap(m, id);
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
        slot *s = mgr_slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        ab_box_rec r = {0};
        rc = mgr_get_scoped(m, id, scope, &r, err);
        if (rc == 0 && (r.status == AB_BOX_DELETING || r.status == AB_BOX_CREATING))
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box %s is being %s", id,
                                r.status == AB_BOX_DELETING ? "deleted" : "created");
        if (rc == 0)
                rc = mgr_caps_check(m, r.app_id, NULL, pj, err);
        if (rc == 0) {
                if (!r.spec)
                        r.spec = json_object();
                json_object_set(r.spec, "network", pj);
                rc = ab_store_box_update(m->o.store, &r, err);
        }
        if (rc == 0 && (r.status == AB_BOX_RUNNING || r.status == AB_BOX_PAUSED))
                rc = mgr_net_sync(m, &r, 0, false, err);
        if (rc == 0) {
                /* A copy: mgr_emit adds "mode" to what it is given, and pj is
                 * also the record's network now. */
                mgr_emit(m, "box.network", &r, json_deep_copy(pj));
                *out = r;
        } else {
                ab_box_rec_clear(&r);
        }
        pthread_mutex_unlock(&s->lock);
        mgr_slot_put(m, s);
        json_decref(pj);
        return rc;
}

void mgr_ttl_pause_locked(ab_manager *m, ab_box_rec *r)
{
        ab_err *e = NULL;
        if (r->status == AB_BOX_RUNNING && mgr_pause_locked(m, r, "ttl", &e) < 0) {
                ab_log(AB_LOG_WARN, "box cannot be paused at its TTL; stopping it", "box", r->id,
                       "error", e->msg, NULL);
                ab_err_free(&e);
                mgr_stop_locked(m, r, "ttl", NULL);
        }
        r->ttl_s = 0;
        ab_store_box_update(m->o.store, r, NULL);
}

int ab_manager_set_ttl(ab_manager *m, const char *id, const char *scope, int64_t secs,
                       const char *on_expiry, ab_box_rec *out, ab_err **err)
{
        if (on_expiry && strcmp(on_expiry, "delete") && strcmp(on_expiry, "pause"))
                return ab_err_set(err, AB_E_INVALID, 0, "on_expiry: \"delete\" or \"pause\"");
        slot *s = mgr_slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        ab_box_rec r = {0};
        int rc = mgr_get_scoped(m, id, scope, &r, err);
        if (rc == 0 && r.status == AB_BOX_DELETING)
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box %s is being deleted", id);
        if (rc == 0) {
                int64_t age_s = (mgr_wall_ms() - r.created_at + 999) / 1000;
                r.ttl_s = secs > 0 ? (age_s > 0 ? age_s : 0) + secs : 0;
                if (on_expiry) {
                        if (!r.spec)
                                r.spec = json_object();
                        if (!strcmp(on_expiry, "pause"))
                                json_object_set_new(r.spec, "ttl_action", json_string("pause"));
                        else
                                json_object_del(r.spec, "ttl_action");
                }
                rc = ab_store_box_update(m->o.store, &r, err);
        }
        pthread_mutex_unlock(&s->lock);
        mgr_slot_put(m, s);
        if (rc == 0 && r.ttl_s > 0)
                mgr_ttl_wake(m, r.created_at + r.ttl_s * 1000);
        if (rc == 0 && out)
                *out = r;
        else
                ab_box_rec_clear(&r);
        return rc;
}

int ab_manager_set_metadata(ab_manager *m, const char *id, const char *scope, json_t *metadata,
                            ab_box_rec *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (!json_is_object(metadata))
                return ab_err_set(err, AB_E_INVALID, 0, "metadata: must be an object");
        slot *s = mgr_slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        ab_box_rec r = {0};
        int rc = mgr_get_scoped(m, id, scope, &r, err);
        if (rc == 0 && r.status == AB_BOX_DELETING)
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box %s is being deleted", id);
        if (rc == 0) {
                json_decref(r.metadata);
                r.metadata = json_deep_copy(metadata);
                rc = ab_store_box_update(m->o.store, &r, err);
        }
        if (rc == 0)
                *out = r;
        else
                ab_box_rec_clear(&r);
        pthread_mutex_unlock(&s->lock);
        mgr_slot_put(m, s);
        return rc;
}
