/* Terminals: the manager's side of the box init's terminals. Every call is
 * a use of the box (use.c), so a paused box is resumed and activity is
 * recorded; an attached terminal holds its use for as long as it is
 * attached, so a box someone types in never idles out under them. */
#include "core/manager_int.h"

/* Opens req in the box being used: the image's user and workdir where req
 * names none, the box's env (with the network's proxy variables) under the
 * request's. For terminals and users' background commands alike. */
static int term_open_in(ab_manager *m, ab_use *u, const abc_term_req *req, abc_term_info *out,
                        ab_err **err)
{
        abc_term_req q = *req;
        const json_t *img = mgr_rec_image(&u->rec);
        if (img && !q.user)
                q.user = json_string_value(json_object_get(img, "user"));
        if (img && !q.cwd)
                q.cwd = json_string_value(json_object_get(img, "workdir"));
        _cleanup_strv_ char **env = ab_manager_box_env(&u->rec);
        size_t n = 0, k = 0;
        while (env[n])
                n++;
        while (req->env && req->env[k])
                k++;
        _cleanup_free_ const char **all = xcalloc(xadd(xadd(n, k), 1), sizeof(char *));
        for (size_t i = 0; i < n; i++)
                all[i] = env[i];
        for (size_t i = 0; i < k; i++)
                all[n + i] = req->env[i];
        q.env = all;
        _cleanup_close_ int fd = ab_manager_use_connect(m, u, err);
        return fd < 0 ? -1 : abc_term_open(fd, &q, out, err);
}

int ab_manager_term_open(ab_manager *m, ab_use *u, const abc_term_req *req, abc_term_info *out,
                         ab_err **err)
{
        if (term_open_in(m, u, req, out, err) < 0)
                return -1;
        mgr_emit(m, "terminal.opened", &u->rec,
                 json_pack("{s:s,s:i,s:i}", "terminal_id", out->id, "cols", (int)out->cols, "rows",
                           (int)out->rows));
        return 0;
}

void mgr_entrypoint_start(ab_manager *m, const ab_box_rec *r)
{
        json_t *ep = r->spec ? json_object_get(r->spec, "entrypoint") : NULL;
        size_t n = json_array_size(ep);
        if (!n)
                return;
        _cleanup_free_ const char **argv = xcalloc(n + 1, sizeof(char *));
        for (size_t i = 0; i < n; i++)
                argv[i] = json_string_value(json_array_get(ep, i));
        _cleanup_strv_ char **env = ab_manager_box_env(r);
        const json_t *img = mgr_rec_image(r);
        abc_term_req q = {
            .argv = argv,
            .env = (const char *const *)env,
            .cwd = img ? json_string_value(json_object_get(img, "workdir")) : NULL,
            .user = img ? json_string_value(json_object_get(img, "user")) : NULL,
            .cols = 200,
            .rows = 50,
        };
        ab_backend *b = m->o.backend;
        ab_err *e = NULL;
        abc_term_info info = {0};
        _cleanup_close_ int fd = b->ops->connect(b, r->backend_id, &e);
        if (fd < 0 || abc_term_open(fd, &q, &info, &e) < 0) {
                ab_log(AB_LOG_WARN, "box entrypoint cannot start", "box", r->id, "error", e->msg,
                       NULL);
                mgr_emit(m, "box.error", r,
                         json_pack("{s:s,s:s}", "error", e->msg, "what", "entrypoint"));
                ab_err_free(&e);
                return;
        }
        ab_log(AB_LOG_INFO, "box entrypoint started", "box", r->id, "terminal", info.id, NULL);
        mgr_emit(m, "terminal.opened", r,
                 json_pack("{s:s,s:b}", "terminal_id", info.id, "entrypoint", 1));
        abc_term_info_clear(&info);
}

bool mgr_procs_running(ab_manager *m, const ab_box_rec *r)
{
        ab_backend *b = m->o.backend;
        ab_err *e = NULL;
        abc_term_info *v = NULL;
        size_t n = 0;
        _cleanup_close_ int fd = b->ops->connect(b, r->backend_id, &e);
        bool any = false;
        if (fd >= 0 && abc_term_list_kind(fd, true, &v, &n, &e) == 0)
                for (size_t i = 0; i < n && !any; i++)
                        any = v[i].running;
        abc_term_infos_free(v, n);
        ab_err_free(&e);
        return any;
}

int ab_manager_term_attach_use(ab_manager *m, ab_use *u, const char *tid, ab_term_attach *a,
                               ab_err **err)
{
        memset(a, 0, sizeof(*a));
        a->fd = -1;
        int fd = ab_manager_use_connect(m, u, err);
        if (fd < 0)
                return -1;
        if (abc_term_attach(fd, tid, &a->info, &a->stream, err) < 0) {
                close(fd);
                return -1;
        }
        a->fd = fd;
        a->use = *u;
        return 0;
}

/* A use of a box for a terminal operation, unless the box is stopped (or
 * being made or deleted): then 0 with *none set, and nothing to end. */
static int term_use(ab_manager *m, const char *id, const char *scope, ab_use *u, bool *none,
                    ab_err **err)
{
        ab_box_rec r = {0};
        *none = false;
        if (mgr_get_scoped(m, id, scope, &r, err) < 0)
                return -1;
        *none = r.status != AB_BOX_RUNNING && r.status != AB_BOX_PAUSED;
        ab_box_rec_clear(&r);
        if (*none)
                return 0;
        return ab_manager_use_begin(m, id, scope, u, err);
}

static int no_terminal(const char *id, const char *tid, ab_err **err)
{
        return ab_err_set(err, AB_E_NOT_FOUND, 0, "box %s has no terminal %s", id, tid);
}

int ab_manager_term_attach(ab_manager *m, const char *id, const char *scope, const char *tid,
                           ab_term_attach *a, ab_err **err)
{
        ab_use u;
        bool none;
        memset(a, 0, sizeof(*a));
        a->fd = -1;
        if (term_use(m, id, scope, &u, &none, err) < 0)
                return -1;
        if (none)
                return no_terminal(id, tid, err);
        if (ab_manager_term_attach_use(m, &u, tid, a, err) < 0) {
                ab_manager_use_end(m, &u);
                return -1;
        }
        a->own_use = true;
        /* Held for as long as someone is attached: busy for the reaper, but
         * not an exec in flight (the agentbox_execs_in_flight gauge). */
        atomic_fetch_sub(&m->inflight_total, 1);
        return 0;
}

void ab_manager_term_detach(ab_manager *m, ab_term_attach *a)
{
        abc_term_stream_free(a->stream);
        a->stream = NULL;
        if (a->fd >= 0)
                close(a->fd);
        a->fd = -1;
        abc_term_info_clear(&a->info);
        if (a->own_use) {
                atomic_fetch_add(&m->inflight_total, 1); /* use_end takes it off again */
                ab_manager_use_end(m, &a->use);
        }
        a->own_use = false;
}

int ab_manager_term_open_id(ab_manager *m, const char *id, const char *scope,
                            const abc_term_req *req, abc_term_info *out, ab_err **err)
{
        ab_use u;
        if (ab_manager_use_begin(m, id, scope, &u, err) < 0)
                return -1;
        int rc = ab_manager_term_open(m, &u, req, out, err);
        ab_manager_use_end(m, &u);
        return rc;
}

int ab_manager_term_list(ab_manager *m, const char *id, const char *scope, abc_term_info **out,
                         size_t *n, ab_err **err)
{
        ab_use u;
        bool none;
        *out = NULL;
        *n = 0;
        if (term_use(m, id, scope, &u, &none, err) < 0)
                return -1;
        if (none)
                return 0;
        _cleanup_close_ int fd = ab_manager_use_connect(m, &u, err);
        int rc = fd < 0 ? -1 : abc_term_list(fd, out, n, err);
        ab_manager_use_end(m, &u);
        return rc;
}

int ab_manager_term_get(ab_manager *m, const char *id, const char *scope, const char *tid,
                        abc_term_info *out, ab_err **err)
{
        abc_term_info *v;
        size_t n;
        *out = (abc_term_info){0};
        if (ab_manager_term_list(m, id, scope, &v, &n, err) < 0)
                return -1;
        int rc = -1;
        for (size_t i = 0; i < n && rc < 0; i++) {
                if (strcmp(v[i].id, tid) == 0) {
                        *out = v[i];
                        v[i] = (abc_term_info){0};
                        rc = 0;
                }
        }
        abc_term_infos_free(v, n);
        return rc == 0 ? 0 : no_terminal(id, tid, err);
}

typedef enum { OP_CLOSE, OP_RESIZE, OP_SIGNAL, OP_INPUT, OP_PROC_INPUT, OP_PROC_EOF } term_op;

static int term_do(ab_manager *m, const char *id, const char *scope, const char *tid, term_op op,
                   uint32_t a, uint32_t b, const void *data, ab_err **err)
{
        ab_use u;
        bool none;
        if (term_use(m, id, scope, &u, &none, err) < 0)
                return -1;
        if (none)
                return no_terminal(id, tid, err);
        _cleanup_close_ int fd = ab_manager_use_connect(m, &u, err);
        _cleanup_err_ ab_err *e = NULL;
        int rc = -1;
        if (fd >= 0 && op == OP_CLOSE)
                rc = abc_term_close(fd, tid, &e);
        else if (fd >= 0 && op == OP_RESIZE)
                rc = abc_term_resize(fd, tid, a, b, &e);
        else if (fd >= 0 && op == OP_INPUT)
                rc = abc_term_write(fd, tid, data, a, &e);
        else if (fd >= 0 && (op == OP_PROC_INPUT || op == OP_PROC_EOF))
                rc = abc_proc_write(fd, tid, data, a, op == OP_PROC_EOF, &e);
        else if (fd >= 0)
                rc = abc_term_signal(fd, tid, (int)a, &e);
        if (rc == 0 && op == OP_CLOSE)
                mgr_emit(m, "terminal.closed", &u.rec, json_pack("{s:s}", "terminal_id", tid));
        ab_manager_use_end(m, &u);
        if (rc < 0 && e && e->code == AB_E_NOT_FOUND)
                return no_terminal(id, tid, err);
        if (rc < 0 && e)
                return mgr_propagate(err, steal_pointer(&e));
        return rc;
}

int ab_manager_term_close(ab_manager *m, const char *id, const char *scope, const char *tid,
                          ab_err **err)
{
        return term_do(m, id, scope, tid, OP_CLOSE, 0, 0, NULL, err);
}

int ab_manager_term_resize(ab_manager *m, const char *id, const char *scope, const char *tid,
                           uint32_t cols, uint32_t rows, ab_err **err)
{
        return term_do(m, id, scope, tid, OP_RESIZE, cols, rows, NULL, err);
}

int ab_manager_term_signal(ab_manager *m, const char *id, const char *scope, const char *tid,
                           int sig, ab_err **err)
{
        return term_do(m, id, scope, tid, OP_SIGNAL, (uint32_t)sig, 0, NULL, err);
}

int ab_manager_term_input(ab_manager *m, const char *id, const char *scope, const char *tid,
                          const void *data, size_t len, ab_err **err)
{
        if (len > UINT32_MAX)
                return ab_err_set(err, AB_E_INVALID, 0, "terminal input too large");
        return term_do(m, id, scope, tid, OP_INPUT, (uint32_t)len, 0, data, err);
}

int ab_manager_proc_input(ab_manager *m, const char *id, const char *scope, const char *tid,
                          const void *data, size_t len, bool close_stdin, ab_err **err)
{
        if (len > UINT32_MAX)
                return ab_err_set(err, AB_E_INVALID, 0, "process input too large");
        return term_do(m, id, scope, tid, close_stdin ? OP_PROC_EOF : OP_PROC_INPUT, (uint32_t)len,
                       0, data, err);
}

int ab_manager_proc_list(ab_manager *m, const char *id, const char *scope, abc_term_info **out,
                         size_t *n, ab_err **err)
{
        ab_use u;
        bool none;
        *out = NULL;
        *n = 0;
        if (term_use(m, id, scope, &u, &none, err) < 0)
                return -1;
        if (none)
                return 0;
        _cleanup_close_ int fd = ab_manager_use_connect(m, &u, err);
        int rc = fd < 0 ? -1 : abc_term_list_kind(fd, true, out, n, err);
        ab_manager_use_end(m, &u);
        return rc;
}

/* The exec door's record of a user's command that runs on in the box: the
 * audit row (written by use_end), the activity, the "exec" event. */
static void cmd_recorded(ab_manager *m, ab_use *u, const char *text, const char *const *argv,
                         const char *tid, int64_t started)
{
        ab_exec_audit *a = xzalloc(sizeof(*a));
        *a = (ab_exec_audit){
            .provider = xstrdup(m->provider),
            .box_id = xstrdup(u->rec.id),
            .command = xstrdup(text),
            .exit_code = -1,
            .started_at = started,
        };
        if (u->audit)
                ab_exec_audits_free(u->audit, 1);
        u->audit = a;
        if (u->rec.mode != AB_MODE_SYSTEM) {
                _cleanup_err_ ab_err *te = NULL;
                if (ab_store_box_touch(m->o.store, m->provider, u->rec.id, mgr_wall_ms(), &te) == 0)
                        u->touched = true;
        }
        size_t cl = strlen(text);
        json_t *d = json_pack("{s:s%,s:b,s:s}", "command", text,
                              cl > EVENT_CMD_MAX ? (size_t)EVENT_CMD_MAX : cl, "background", 1,
                              "process_id", tid);
        if (!d) /* not UTF-8 */
                d = json_pack("{s:s,s:b,s:s}", "command", "(not UTF-8)", "background", 1,
                              "process_id", tid);
        if (argv && cl <= EVENT_CMD_MAX) {
                json_t *w = json_array();
                for (size_t i = 0; argv[i]; i++)
                        json_array_append_new(w, json_string(argv[i]));
                json_object_set_new(d, "argv", w);
        }
        mgr_emit(m, "exec", &u->rec, d);
}

int ab_manager_cmd_record(ab_manager *m, ab_use *u, const char *command, const char *tid,
                          ab_err **err)
{
        if (mgr_quota_exec_begin(m, &u->rec, err) < 0)
                return -1;
        mgr_quota_exec_end(m, &u->rec);
        cmd_recorded(m, u, command, NULL, tid, mgr_wall_ms());
        return 0;
}

int ab_manager_cmd_start(ab_manager *m, ab_use *u, const abc_term_req *req, abc_term_info *out,
                         ab_err **err)
{
        *out = (abc_term_info){0};
        bool shell = req->pipes && req->command;
        if (shell ? !req->command[0] : !req->argv || !req->argv[0] || !req->argv[0][0])
                return ab_err_set(err, AB_E_INVALID, 0, "a command needs a program");
        if (mgr_quota_exec_begin(m, &u->rec, err) < 0)
                return -1;
        int64_t started = mgr_wall_ms();
        int rc = term_open_in(m, u, req, out, err);
        mgr_quota_exec_end(m, &u->rec);
        if (rc < 0)
                return -1;
        abc_exec_req x = {.argv = shell ? NULL : req->argv, .command = req->command};
        _cleanup_free_ char *text = abc_exec_req_text(&x);
        cmd_recorded(m, u, text, shell ? NULL : req->argv, out->id, started);
        return 0;
}

int ab_manager_cmd_start_id(ab_manager *m, const char *id, const char *scope,
                            const abc_term_req *req, abc_term_info *out, ab_err **err)
{
        ab_use u;
        *out = (abc_term_info){0};
        if (ab_manager_use_begin(m, id, scope, &u, err) < 0)
                return -1;
        int rc = ab_manager_cmd_start(m, &u, req, out, err);
        ab_manager_use_end(m, &u);
        return rc;
}

void ab_manager_term_audit(ab_manager *m, ab_use *u, const char *const *argv, int exit_code,
                           int64_t started_ms)
{
        abc_exec_req q = {.argv = argv};
        ab_exec_audit *a = xzalloc(sizeof(*a));
        *a = (ab_exec_audit){
            .provider = xstrdup(m->provider),
            .box_id = xstrdup(u->rec.id),
            .command = argv && argv[0] ? abc_exec_req_text(&q) : xstrdup("(login shell)"),
            .exit_code = exit_code,
            .started_at = started_ms,
            .duration_ms = mgr_wall_ms() - started_ms,
        };
        if (u->audit)
                ab_exec_audits_free(u->audit, 1);
        u->audit = a; /* written by ab_manager_use_end */
}
