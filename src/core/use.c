/* Uses of a box by an exec, a file or a tool call: the box runs and counts
 * busy for the use's length; exec adds the env, the timeout, the metric, the
 * audit row and the event. */
#include "core/manager_int.h"
#include "net/net.h"

int ab_manager_use_begin(ab_manager *m, const char *id, const char *scope, ab_use *u, ab_err **err)
{
        memset(u, 0, sizeof(*u));
        ab_box_rec r = {0};
        slot *s = mgr_slot_get(m, id);
        if (pthread_mutex_trylock(&s->lock) != 0) {
                /* The box is busy (a create, a start, a delete): a caller
                 * who may not see it, or asks for none, is answered now,
                 * not after that work. */
                if (mgr_get_scoped(m, id, scope, &r, err) < 0) {
                        mgr_slot_put(m, s);
                        return -1;
                }
                ab_box_rec_clear(&r);
                pthread_mutex_lock(&s->lock);
        }
        int rc = mgr_get_scoped(m, id, scope, &r, err);
        if (rc == 0 && r.status == AB_BOX_DELETING)
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box %s is being deleted", id);
        else if (rc == 0 && !mgr_owns(m, &r)) /* the server forwards such uses: a safety net */
                rc = ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                "box %s runs on fleet node %s: ask that node (or any node "
                                "through the REST routes, which forward)",
                                id, r.node);
        else if (rc == 0 && r.status == AB_BOX_CREATING)
                rc = ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s is still being created", id);
        bool started = false;
        /* A box recorded running is taken at its word: if its init died,
         * use_connect finds out and starts it. */
        if (rc == 0 && r.status != AB_BOX_RUNNING) {
                rc = mgr_ensure_running(m, &r, err);
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
                mgr_slot_put(m, s);
                return -1;
        }
        u->rec = r;
        u->slot = s;
        if (started)
                mgr_enforce_cap(m, id);
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
        int rc;
        if (u->rec.mode == AB_MODE_SYSTEM) {
                rc = mgr_sys_restart(m, u, err);
        } else {
                pthread_mutex_lock(&s->lock);
                rc = mgr_ensure_running(m, &u->rec, err) < 0 ? -1 : 0;
                pthread_mutex_unlock(&s->lock);
        }
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
        bool sys = u->rec.mode == AB_MODE_SYSTEM;
        _cleanup_err_ ab_err *e = NULL;
        if (!sys && !u->touched && u->audit) { /* a late exec: both in one commit */
                if (ab_store_exec_done(m->o.store, u->audit, mgr_wall_ms(), &e) < 0)
                        ab_log(AB_LOG_WARN, "store: cannot record exec", "box", u->rec.id, "error",
                               e->msg, NULL);
                ab_err_free(&e);
                ab_exec_audits_free(u->audit, 1);
                u->audit = NULL;
                u->touched = true;
        }
        if (!sys && !u->touched &&
            ab_store_box_touch(m->o.store, m->provider, u->rec.id, mgr_wall_ms(), &e) < 0)
                ab_log(AB_LOG_WARN, "store: cannot mark activity", "box", u->rec.id, "error",
                       e->msg, NULL);
        ab_err_free(&e);
        if (u->event) {
                mgr_emit(m, "exec", &u->rec, u->event);
                u->event = NULL;
        }
        if (u->audit) {
                if (ab_store_audit_add(m->o.store, u->audit, &e) < 0)
                        ab_log(AB_LOG_WARN, "store: cannot record exec audit", "box", u->rec.id,
                               "error", e->msg, NULL);
                ab_err_free(&e);
                ab_exec_audits_free(u->audit, 1);
                u->audit = NULL;
        }
        if (u->held)
                atomic_fetch_sub(&s->held, 1);
        atomic_fetch_sub(&s->inflight, 1);
        if (!sys)
                atomic_fetch_sub(&m->inflight_total, 1);
        if (mgr_is_task(&u->rec)) {
                pthread_mutex_lock(&s->lock);
                ab_box_rec r = {0};
                if (ab_store_box_get(m->o.store, m->provider, u->rec.id, &r, NULL) == 0 &&
                    atomic_load(&s->inflight) == 0)
                        mgr_delete_locked(m, &r);
                ab_box_rec_clear(&r);
                pthread_mutex_unlock(&s->lock);
        }
        mgr_slot_put(m, s);
        ab_box_rec_clear(&u->rec);
        u->slot = NULL;
}

void ab_manager_use_hold(ab_manager *m, ab_use *u)
{
        slot *s = u->slot;
        if (!s || u->held)
                return;
        u->held = true;
        atomic_fetch_add(&s->held, 1);
}

/* Box env (its image's env, the network's proxy variables, then the
 * record's env) under the request's env, as K=V strings: a later entry of a
 * name wins. */
static char **merged_env(const ab_box_rec *r, const char *const *req_env)
{
        size_t n = 0, cap = 16;
        char **v = xcalloc(cap, sizeof(char *));
        const json_t *spec = r->spec;
        const json_t *img = mgr_rec_image(r);
        size_t i;
        json_t *ie;
        json_array_foreach(img ? json_object_get(img, "env") : NULL, i, ie)
        {
                if (!json_is_string(ie) || !strchr(json_string_value(ie), '='))
                        continue;
                if (n + 2 > cap)
                        v = xrealloc(v, (cap *= 2) * sizeof(char *));
                v[n++] = xstrdup(json_string_value(ie));
        }
        ab_netpol pol;
        if (!spec || ab_netpol_parse(json_object_get(spec, "network"), &pol, NULL) < 0)
                memset(&pol, 0, sizeof(pol));
        _cleanup_strv_ char **nenv = ab_net_env(&pol);
        ab_netpol_clear(&pol);
        for (char **p = nenv; *p; p++) {
                if (n + 2 > cap)
                        v = xrealloc(v, (cap *= 2) * sizeof(char *));
                v[n++] = xstrdup(*p);
        }
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
        for (const char *const *p = req_env; p && *p; p++) {
                if (n + 2 > cap)
                        v = xrealloc(v, (cap *= 2) * sizeof(char *));
                v[n++] = xstrdup(*p);
        }
        v[n] = NULL;
        return v;
}

char **ab_manager_box_env(const ab_box_rec *r)
{
        return merged_env(r, NULL);
}

static const char *exec_outcome(int rc, const abc_exec_res *res)
{
        if (rc < 0)
                return "unavailable";
        if (res->timed_out)
                return "timeout";
        return res->exit_code == 0 ? "ok" : "error";
}

/* The "exec" event: the command as text (cut at EVENT_CMD_MAX), and for an
 * argv exec the words as a list too. */
static json_t *exec_event(const abc_exec_req *req, const char *text, const abc_exec_res *res)
{
        size_t cl = strlen(text);
        json_t *d =
            json_pack("{s:s%,s:i,s:I,s:b,s:I,s:I}", "command", text,
                      cl > EVENT_CMD_MAX ? (size_t)EVENT_CMD_MAX : cl, "exit_code", res->exit_code,
                      "duration_ms", (json_int_t)res->duration_ms, "timed_out", res->timed_out,
                      "stdout_bytes", (json_int_t)res->stdout_bytes, "stderr_bytes",
                      (json_int_t)res->stderr_bytes);
        if (!d) /* command is not valid UTF-8 */
                return json_pack("{s:s,s:i,s:I,s:b}", "command", "(not UTF-8)", "exit_code",
                                 res->exit_code, "duration_ms", (json_int_t)res->duration_ms,
                                 "timed_out", res->timed_out);
        if (req->argv && cl <= EVENT_CMD_MAX) {
                json_t *a = json_array();
                for (const char *const *w = req->argv; *w; w++)
                        json_array_append_new(a, json_string(*w));
                json_object_set_new(d, "argv", a);
        }
        return d;
}

static char **strv_copy(const char *const *v)
{
        size_t n = 0;
        while (v[n])
                n++;
        char **c = xcalloc(n + 1, sizeof(char *));
        for (size_t i = 0; i < n; i++)
                c[i] = xstrdup(v[i]);
        return c;
}

/* An exec that ab_manager_exec runs: begin takes one of the app's execs
 * and of its exec rate (AB_E_QUOTA when over); end gives it back and,
 * unless rc < 0 (it never ran: nothing but the metric), records it: the
 * exec metric, the audit row (written by use_end), the box's activity and
 * the "exec" event. end is a no-op on a mark that is not open. */
typedef struct exec_mark {
        char *text;
        char **argv;
        int64_t started_ms;
        uint64_t t0;
        bool open;
} exec_mark;

static int exec_begin(ab_manager *m, ab_use *u, const abc_exec_req *req, exec_mark *k, ab_err **err)
{
        memset(k, 0, sizeof(*k));
        if (abc_exec_req_check(req, err) < 0)
                return -1;
        if (mgr_quota_exec_begin(m, &u->rec, err) < 0)
                return -1;
        k->text = abc_exec_req_text(req);
        k->argv = req->argv ? strv_copy(req->argv) : NULL;
        k->started_ms = mgr_wall_ms();
        k->t0 = ab_now_ns();
        k->open = true;
        return 0;
}

static void exec_end(ab_manager *m, ab_use *u, exec_mark *k, int rc, const abc_exec_res *res)
{
        if (!k->open)
                return;
        k->open = false;
        mgr_quota_exec_end(m, &u->rec);
        double secs = (double)(ab_now_ns() - k->t0) / 1e9;
        ab_metrics_exec(m->o.metrics, secs, exec_outcome(rc, res));
        _cleanup_free_ char *text = steal_pointer(&k->text);
        _cleanup_strv_ char **argv = steal_pointer(&k->argv);
        if (rc < 0)
                return;
        /* The audit row is written by use_end, after the caller answered. */
        ab_exec_audit *a = xzalloc(sizeof(*a));
        *a = (ab_exec_audit){
            .provider = xstrdup(m->provider),
            .box_id = xstrdup(u->rec.id),
            .command = xstrdup(text),
            .exit_code = res->exit_code,
            .timed_out = res->timed_out,
            .started_at = k->started_ms,
            .duration_ms =
                res->duration_ms ? (int64_t)res->duration_ms : mgr_wall_ms() - k->started_ms,
            .stdout_bytes = (int64_t)res->stdout_bytes,
            .stderr_bytes = (int64_t)res->stderr_bytes,
        };
        if (u->audit)
                ab_exec_audits_free(u->audit, 1);
        u->audit = a;
        /* Activity is recorded before the caller answers, so whoever reads
         * the box after the answer sees this exec (the audit row may follow);
         * a late use records it in use_end, before its caller reads on. */
        if (u->rec.mode != AB_MODE_SYSTEM && !u->late) {
                _cleanup_err_ ab_err *te = NULL;
                if (ab_store_box_touch(m->o.store, m->provider, u->rec.id, mgr_wall_ms(), &te) < 0)
                        ab_log(AB_LOG_WARN, "store: cannot mark activity", "box", u->rec.id,
                               "error", te->msg, NULL);
                else
                        u->touched = true;
        }
        abc_exec_req q = {.command = argv ? NULL : text, .argv = (const char *const *)argv};
        abc_exec_res shown = *res;
        if (!shown.duration_ms)
                shown.duration_ms = (uint64_t)(mgr_wall_ms() - k->started_ms);
        json_t *ev = exec_event(&q, text, &shown);
        if (u->late) {
                json_decref(u->event);
                u->event = ev;
        } else {
                mgr_emit(m, "exec", &u->rec, ev);
        }
}

int ab_manager_exec(ab_manager *m, ab_use *u, const abc_exec_req *req, abc_output_fn out, void *ud,
                    abc_exec_res *res, ab_err **err)
{
        memset(res, 0, sizeof(*res));
        if (abc_exec_req_check(req, err) < 0)
                return -1;
        abc_exec_req q = *req;
        _cleanup_strv_ char **env = merged_env(&u->rec, req->env);
        q.env = (const char *const *)env;
        const json_t *img = mgr_rec_image(&u->rec);
        if (img && !q.cwd)
                q.cwd = json_string_value(json_object_get(img, "workdir"));
        if (img && !q.user)
                q.user = json_string_value(json_object_get(img, "user"));
        if (!q.timeout_ms && u->rec.mode != AB_MODE_SYSTEM) {
                ab_limits l;
                mgr_limits_from_rec(m, &u->rec, &l);
                q.timeout_ms = l.timeout_s * 1000u;
        }
        if (!q.output_cap)
                q.output_cap = m->o.limits.output_cap;
        exec_mark k;
        if (exec_begin(m, u, req, &k, err) < 0)
                return -1;
        int rc = -1;
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        if (fd >= 0)
                rc = abc_exec(fd, &q, out, ud, res, err);
        ab_backend *b = m->o.backend;
        if (rc == 0 && res->again && b->ops->release) /* for the box's next request */
                b->ops->release(b, u->rec.backend_id, steal_fd(&fd));
        exec_end(m, u, &k, rc, res);
        return rc < 0 ? -1 : 0;
}
