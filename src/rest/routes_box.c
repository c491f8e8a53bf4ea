/* Routes of docs/api.md: sandboxes, exec, events, API keys, health, metrics. */
#include "rest/parse.h"
#include "rest/rest.h"
#include "kit/exec.h"
#include "kit/forward.h"
#include "kit/parse.h"
#include "base/buf.h"
#include "runners/runner.h"
#include "base/log.h"
#include "base/codec.h"
#include "base/id.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>

#define SSE_KEEPALIVE_MS 15000
#define SSE_BATCH        64

/* ---- health and metrics ----------------------------------------------- */

enum MHD_Result route_health(ab_req *r, const char *id)
{
        ab_server *s = r->srv;
        ab_manager_counts c;
        ab_err *e = NULL;
        if (ab_manager_counts_get(s->mgr, &c, &e) < 0) {
                json_t *j = json_pack("{s:s,s:s,s:s}", "status", "error", "version",
                                      AGENTBOX_VERSION, "error", e->msg);
                ab_err_free(&e);
                return resp_json(r, 503, j);
        }
        json_t *boxes = json_object();
        for (size_t i = 0; i < c.n_states; i++)
                json_object_set_new(boxes, c.states[i], json_integer(c.counts[i]));
        json_t *j = json_pack(
            "{s:s,s:s,s:f,s:s,s:o,s:{s:I,s:I},s:I}", "status", "ok", "version", AGENTBOX_VERSION,
            "uptime_s", (double)((ab_now_ns() - s->started_ns) / 1000000) / 1e3, "store",
            ab_store_kind(s->store), "boxes", boxes, "pool", "size", (json_int_t)c.pool_size,
            "target", (json_int_t)c.pool_target, "execs_in_flight", (json_int_t)c.execs_in_flight);
        ab_manager_counts_clear(&c);
        if (s->runners) /* seed 003's /health: concurrency of the code runner */
                json_object_set_new(j, "concurrency", ab_runners_stats(s->runners));
        return resp_json(r, 200, j);
}

enum MHD_Result route_metrics(ab_req *r, const char *id)
{
        ab_server *s = r->srv;
        ab_manager_counts c;
        ab_err *e = NULL;
        if (ab_manager_counts_get(s->mgr, &c, &e) < 0)
                return resp_err(r, e);
        ab_metrics_gauges g = {
            .box_states = (const char *const *)c.states,
            .box_counts = c.counts,
            .n_states = c.n_states,
            .pool_size = c.pool_size,
            .pool_target = c.pool_target,
            .execs_in_flight = c.execs_in_flight,
            .sse_subscribers = atomic_load(&s->sse_subscribers),
            .uptime_s = (double)(ab_now_ns() - s->started_ns) / 1e9,
        };
        char *txt = quota_metrics_append(s, ab_metrics_render(s->metrics, &g));
        ab_manager_counts_clear(&c);
        ab_buf b = {0};
        ab_buf_puts(&b, txt);
        free(txt);
        ab_server_counts(s, &b);
        ab_images_metrics(s, &b);
        size_t len = b.n;
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(len, ab_buf_steal(&b), MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
        return resp_send(r, 200, resp);
}

/* ---- sandboxes -------------------------------------------------------- */

const char *const acquire_fields[] = {
    "id",      "app_id",     "user_id", "chat_id",        "thread_id",     "mode",    "limits",
    "network", "env",        "mounts",  "idle_stop_s",    "idle_pause_s",  "ttl_s",   "metadata",
    "image",   "entrypoint", "volumes", "readonly_paths", "blocked_paths", "backend", NULL};
static const char *const exec_fields[] = {"command", "argv",  "timeout_s", "timeout", "env",
                                          "cwd",     "stdin", "user",      NULL};

static int parse_limits(json_t *o, const ab_limits *defaults, ab_limits *out, ab_err **err)
{
        static const char *const known[] = {"cpus", "memory_mib", "disk_mib",
                                            "pids", "timeout_s",  NULL};
        if (fields_known(o, known, "limits", err) < 0)
                return -1;
        *out = *defaults;
        double cpus;
        int64_t v;
        bool p;
        if (field_num(o, "cpus", &cpus, &p, err) < 0)
                return ab_err_wrap(err, "limits");
        if (p)
                out->cpus = cpus;
        struct {
                const char *name;
                uint64_t *dst;
        } ints[] = {
            {"memory_mib", &out->memory_mib}, {"disk_mib", &out->disk_mib}, {"pids", &out->pids}};
        for (size_t i = 0; i < AB_ARRAY_LEN(ints); i++) {
                if (field_int(o, ints[i].name, &v, &p, err) < 0)
                        return ab_err_wrap(err, "limits");
                if (p && v < 0)
                        return ab_err_set(err, AB_E_INVALID, 0, "limits.%s: must be positive",
                                          ints[i].name);
                if (p)
                        *ints[i].dst = (uint64_t)v;
        }
        if (field_int(o, "timeout_s", &v, &p, err) < 0)
                return ab_err_wrap(err, "limits");
        if (p && (v <= 0 || v > AB_MAX_TIMEOUT_S))
                return ab_err_set(err, AB_E_INVALID, 0, "limits.timeout_s: must be 1..%u seconds",
                                  AB_MAX_TIMEOUT_S);
        if (p)
                out->timeout_s = (uint32_t)v;
        return 0;
}

/* Reads the acquire fields of body into q (pointers into body and *lim). */
int parse_acquire(const ab_server *s, json_t *body, ab_acquire_req *q, ab_limits *lim, ab_err **err)
{
        memset(q, 0, sizeof(*q));
        if (field_str(body, "id", &q->id, err) < 0 ||
            field_str(body, "app_id", &q->app_id, err) < 0 ||
            field_str(body, "user_id", &q->user_id, err) < 0 ||
            field_str(body, "chat_id", &q->chat_id, err) < 0 ||
            field_str(body, "thread_id", &q->thread_id, err) < 0 ||
            field_str(body, "mode", &q->mode, err) < 0 ||
            field_str(body, "image", &q->image, err) < 0 ||
            field_str(body, "backend", &q->backend, err) < 0)
                return -1;
        if (q->image && !*q->image)
                q->image = NULL;
        if (q->backend && !*q->backend)
                q->backend = NULL;
        json_t *lo = NULL;
        if (field_obj(body, "limits", &lo, err) < 0)
                return -1;
        if (lo) {
                if (parse_limits(lo, &s->cfg->limits, lim, err) < 0)
                        return -1;
                q->limits = lim;
        }
        json_t *ep = json_object_get(body, "entrypoint");
        if (ep && !json_is_null(ep)) {
                if (!json_is_array(ep))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "entrypoint: must be a list of strings");
                q->entrypoint = ep;
        }
        if (field_obj(body, "network", &q->network, err) < 0 ||
            field_obj(body, "env", &q->env, err) < 0 ||
            field_obj(body, "metadata", &q->metadata, err) < 0)
                return -1;
        /* Checked by the manager (core/volumes.c), which also decides who
         * may mount host directories. */
        q->volumes = json_object_get(body, "volumes");
        q->mounts = json_object_get(body, "mounts");
        q->readonly_paths = json_object_get(body, "readonly_paths");
        q->blocked_paths = json_object_get(body, "blocked_paths");
        bool p;
        int64_t v = 0;
        if (field_int(body, "idle_stop_s", &v, &p, err) < 0)
                return -1;
        q->idle_stop_s = v;
        v = 0;
        if (field_int(body, "idle_pause_s", &v, &p, err) < 0)
                return -1;
        q->idle_pause_s = v;
        v = 0;
        if (field_int(body, "ttl_s", &v, &q->has_ttl, err) < 0)
                return -1;
        q->ttl_s = v;
        return 0;
}

/* True when the box a create names (by id or keys) exists already: it is
 * acquired where it is, never placed. */
static bool box_exists(ab_req *r, const ab_acquire_req *q)
{
        ab_box_rec rec;
        if (q->id) {
                bool found = ab_manager_get(r->srv->mgr, q->id, r->scope, &rec, NULL) == 0;
                if (found)
                        ab_box_rec_clear(&rec);
                return found;
        }
        if (!q->thread_id && !(q->user_id && q->chat_id))
                return false; /* a new box of no keys */
        ab_box_filter f = {.app_id = q->app_id,
                           .user_id = q->thread_id ? NULL : q->user_id,
                           .chat_id = q->thread_id ? NULL : q->chat_id,
                           .thread_id = q->thread_id};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_manager_list(r->srv->mgr, &f, r->scope, &rs, &n, NULL) < 0)
                return true; /* unsure: made (or found) here */
        ab_box_recs_free(rs, n);
        return n > 0;
}

/* In a fleet, a new box may go to another node (kit_place): 1 = answered. */
static int place(ab_req *r, const ab_acquire_req *q, enum MHD_Result *ret)
{
        if (!r->srv->fleet || r->forwarded || box_exists(r, q))
                return 0;
        const ab_limits *l = q->limits ? q->limits : &r->srv->cfg->limits;
        return kit_place(r, l->memory_mib << 20, l->disk_mib << 20, ret);
}

enum MHD_Result route_box_create(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        ab_acquire_req q;
        ab_limits lim;
        ab_box_rec rec;
        bool created;
        if (fields_known(body, acquire_fields, NULL, &e) < 0 ||
            parse_acquire(r->srv, body, &q, &lim, &e) < 0) {
                json_decref(body);
                return resp_err(r, e);
        }
        enum MHD_Result placed;
        if (place(r, &q, &placed)) {
                json_decref(body);
                return placed;
        }
        if (ab_manager_acquire(r->srv->mgr, &q, r->scope, &rec, &created, &e) < 0) {
                json_decref(body);
                return resp_err(r, e);
        }
        json_decref(body);
        if (!kit_box_local(r->srv, &rec) && rec.status != AB_BOX_RUNNING && !r->forwarded) {
                /* another fleet node won the race for these keys: it starts its box */
                _cleanup_free_ char *node = steal_pointer(&rec.node);
                ab_box_rec_clear(&rec);
                return kit_forward_buffered(r, node);
        }
        json_t *j = box_json(r->srv, &rec);
        ab_box_rec_clear(&rec);
        return resp_json(r, created ? 201 : 200, j);
}

/* Adds "stats" to j when the box is running or paused. */
static void add_stats(const ab_server *srv, const ab_box_rec *rec, json_t *j)
{
        ab_box_stats st;
        if ((rec->status == AB_BOX_RUNNING || rec->status == AB_BOX_PAUSED) &&
            ab_manager_stats(srv->mgr, rec, &st, NULL) == 0)
                json_object_set_new(
                    j, "stats",
                    json_pack(
                        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "memory_bytes",
                        (json_int_t)st.memory_bytes, "memory_limit", (json_int_t)st.memory_limit,
                        "pids", (json_int_t)st.pids, "cpu_usage_ns", (json_int_t)st.cpu_usage_ns,
                        "disk_used_bytes", (json_int_t)st.disk_used_bytes, "disk_limit_bytes",
                        (json_int_t)st.disk_limit_bytes, "oom_kills", (json_int_t)st.oom_kills));
}

static json_t *box_list_json(const ab_server *srv, ab_box_rec *rs, size_t n, bool stats)
{
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++) {
                json_t *j = box_json(srv, &rs[i]);
                if (stats)
                        add_stats(srv, &rs[i], j);
                json_array_append_new(a, j);
        }
        return a;
}

static int filter_from_query(ab_req *r, ab_box_filter *f, ab_err **err)
{
        memset(f, 0, sizeof(*f));
        f->app_id = req_query(r, "app_id");
        f->user_id = req_query(r, "user_id");
        f->chat_id = req_query(r, "chat_id");
        f->thread_id = req_query(r, "thread_id");
        const char *status = req_query(r, "status");
        const char *mode = req_query(r, "mode");
        if (status && !(f->status = ab_box_status_parse(status)))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "status: \"%s\" is not one of creating, running, paused, "
                                  "stopped, deleting, error",
                                  status);
        if (mode && ((f->mode = ab_box_mode_parse(mode)) == 0 || f->mode == AB_MODE_POOL))
                return ab_err_set(err, AB_E_INVALID, 0, "mode: \"%s\" is not one of session, task",
                                  mode);
        return 0;
}

enum MHD_Result route_box_list(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        ab_box_filter f;
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (filter_from_query(r, &f, &e) < 0 ||
            ab_manager_list(r->srv->mgr, &f, r->scope, &rs, &n, &e) < 0)
                return resp_err(r, e);
        const char *st = req_query(r, "stats");
        bool stats = st && (!strcmp(st, "1") || !strcmp(st, "true"));
        json_t *j = json_pack("{s:o}", "sandboxes", box_list_json(r->srv, rs, n, stats));
        ab_box_recs_free(rs, n);
        return resp_json(r, 200, j);
}

/* In a fleet, the boxes of f on other nodes are deleted by their nodes
 * (the manager deletes this node's); their ids join a. */
static void delete_remote(ab_req *r, const ab_box_filter *f, json_t *a)
{
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (!r->srv->fleet || ab_manager_list(r->srv->mgr, f, r->scope, &rs, &n, NULL) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                if (kit_box_local(r->srv, &rs[i]) || rs[i].status == AB_BOX_DELETING)
                        continue;
                _cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s", rs[i].id);
                _cleanup_buf_ ab_buf out = {0};
                unsigned status = 0;
                ab_err *e = NULL;
                if (kit_fleet_call(r, rs[i].node, "DELETE", target, NULL, 0, &status, &out, NULL,
                                   &e) == 0 &&
                    status == 202)
                        json_array_append_new(a, json_string(rs[i].id));
                ab_err_free(&e);
        }
        ab_box_recs_free(rs, n);
}

enum MHD_Result route_box_delete_where(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        ab_box_filter f;
        if (filter_from_query(r, &f, &e) < 0)
                return resp_err(r, e);
        if (f.status || f.mode)
                return resp_error(r, 400, "invalid_argument",
                                  "delete by filter takes app_id, user_id, chat_id or thread_id");
        if (!f.app_id && !f.thread_id)
                return resp_error(r, 400, "invalid_argument",
                                  "app_id: required to delete by filter (or give thread_id); "
                                  "to delete one box use DELETE /v1/sandboxes/{id}");
        _cleanup_strv_ char **ids = NULL;
        if (ab_manager_delete_where(r->srv->mgr, &f, r->scope, &ids, &e) < 0)
                return resp_err(r, e);
        json_t *a = json_array();
        for (char **p = ids; p && *p; p++)
                json_array_append_new(a, json_string(*p));
        delete_remote(r, &f, a);
        return resp_json(r, 202, json_pack("{s:o}", "deleting", a));
}

enum MHD_Result route_box_get(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        ab_box_rec rec;
        if (ab_manager_get(r->srv->mgr, id, r->scope, &rec, &e) < 0)
                return resp_err(r, e);
        json_t *j = box_json(r->srv, &rec);
        add_stats(r->srv, &rec, j);
        ab_box_rec_clear(&rec);
        return resp_json(r, 200, j);
}

enum MHD_Result route_box_delete(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        if (ab_manager_delete(r->srv->mgr, id, r->scope, &e) < 0)
                return resp_err(r, e);
        return resp_json(r, 202, json_pack("{s:[s]}", "deleting", id));
}

typedef int (*box_op)(ab_manager *, const char *, const char *, ab_box_rec *, ab_err **);

static enum MHD_Result box_action(ab_req *r, const char *id, box_op op)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        json_decref(body);
        ab_box_rec rec;
        if (op(r->srv->mgr, id, r->scope, &rec, &e) < 0)
                return resp_err(r, e);
        json_t *j = box_json(r->srv, &rec);
        ab_box_rec_clear(&rec);
        return resp_json(r, 200, j);
}

enum MHD_Result route_box_stop(ab_req *r, const char *id)
{
        return box_action(r, id, ab_manager_stop);
}

enum MHD_Result route_box_start(ab_req *r, const char *id)
{
        return box_action(r, id, ab_manager_start);
}

enum MHD_Result route_box_pause(ab_req *r, const char *id)
{
        return box_action(r, id, ab_manager_pause);
}

enum MHD_Result route_box_resume(ab_req *r, const char *id)
{
        return box_action(r, id, ab_manager_resume);
}

/* POST /v1/sandboxes/{id}/fork {id? | keys?, ...}: a new box with a copy of
 * this one's files; 201 with the new box. */
enum MHD_Result route_box_fork(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        ab_acquire_req q;
        ab_limits lim;
        ab_box_rec rec;
        if (fields_known(body, acquire_fields, NULL, &e) < 0 ||
            parse_acquire(r->srv, body, &q, &lim, &e) < 0 ||
            ab_manager_fork(r->srv->mgr, id, &q, r->scope, &rec, &e) < 0) {
                json_decref(body);
                return resp_err(r, e);
        }
        json_decref(body);
        json_t *j = box_json(r->srv, &rec);
        ab_box_rec_clear(&rec);
        return resp_json(r, 201, j);
}

/* POST /v1/sandboxes/{id}/snapshot {"name"}: a new image of the box's
 * image plus what the box changed; 201 with the image. */
enum MHD_Result route_box_snapshot(ab_req *r, const char *id)
{
        static const char *const known[] = {"name", NULL};
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        const char *name = NULL;
        ab_image img;
        if (fields_known(body, known, NULL, &e) < 0 || field_str(body, "name", &name, &e) < 0 ||
            ab_manager_snapshot(r->srv->mgr, id, r->scope, name, &img, &e) < 0) {
                json_decref(body);
                return resp_err(r, e);
        }
        json_decref(body);
        json_t *j = ab_image_json(&img, r->scope);
        ab_image_clear(&img);
        return resp_json(r, 201, j);
}

/* PUT /v1/sandboxes/{id}/network {"mode", "allow", "deny"}: the box's new
 * network policy, applied at once to a running box. */
enum MHD_Result route_box_network_put(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        ab_box_rec rec;
        int rc = ab_manager_set_network(r->srv->mgr, id, r->scope, body, &rec, &e);
        json_decref(body);
        if (rc < 0)
                return resp_err(r, e);
        json_t *j = box_json(r->srv, &rec);
        ab_box_rec_clear(&rec);
        return resp_json(r, 200, j);
}

enum MHD_Result route_box_network_get(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        ab_box_rec rec;
        if (ab_manager_get(r->srv->mgr, id, r->scope, &rec, &e) < 0)
                return resp_err(r, e);
        json_t *j = box_json(r->srv, &rec);
        ab_box_rec_clear(&rec);
        json_t *net = json_incref(json_object_get(j, "network"));
        json_decref(j);
        return resp_json(r, 200, net);
}

/* ---- exec ------------------------------------------------------------- */

typedef struct exec_job {
        ab_server *srv;
        ab_use use;
        char *command, *cwd, *stdin_data, *user;
        char **argv; /* instead of command */
        size_t stdin_len;
        char **env;
        uint32_t timeout_ms;
        /* JSON mode: collected output */
        ab_buf out[2]; /* stdout, stderr */
        /* SSE mode */
        int fd;
        bool broken;
        kit_caller kc; /* the request's, for an exec on its own thread */
} exec_job;

void exec_job_free(exec_job *j)
{
        kit_caller_clear(&j->kc);
        free(j->command);
        ab_strvfreep(&j->argv);
        free(j->cwd);
        free(j->user);
        free(j->stdin_data);
        ab_strvfreep(&j->env);
        ab_buf_free(&j->out[0]);
        ab_buf_free(&j->out[1]);
        if (j->fd >= 0)
                close(j->fd);
        free(j);
}

int parse_exec(json_t *body, exec_job **out, ab_err **err)
{
        const char *cmd = NULL, *cwd = NULL, *in = NULL, *user = NULL;
        json_t *env = NULL;
        if (field_str(body, "command", &cmd, err) < 0 || field_str(body, "cwd", &cwd, err) < 0 ||
            field_str(body, "user", &user, err) < 0 || field_obj(body, "env", &env, err) < 0)
                return -1;
        _cleanup_strv_ char **argv = NULL;
        if (kit_parse_argv(body, "argv", &argv, err) < 0)
                return -1;
        json_t *sv = json_object_get(body, "stdin");
        if (sv && !json_is_null(sv)) {
                if (!json_is_string(sv))
                        return ab_err_set(err, AB_E_INVALID, 0, "stdin: must be a string");
                in = json_string_value(sv);
        }
        if (cmd && argv)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "give either command (a shell string) or argv (a program and "
                                  "its arguments), not both");
        if (!cmd && !argv)
                return ab_err_set(err, AB_E_INVALID, 0, "command or argv: one of them is required");
        if (cmd && !*cmd)
                return ab_err_set(err, AB_E_INVALID, 0, "command: must not be empty");
        double t = 0;
        bool p = false;
        if (field_num(body, "timeout_s", &t, &p, err) < 0)
                return -1;
        if (!p && field_num(body, "timeout", &t, &p, err) < 0)
                return -1;
        if (p && (t <= 0 || t > AB_MAX_TIMEOUT_S))
                return ab_err_set(err, AB_E_INVALID, 0, "timeout_s: must be > 0 and <= %u",
                                  AB_MAX_TIMEOUT_S);
        size_t n = 0;
        char **v = xcalloc(json_object_size(env) + 1, sizeof(char *));
        const char *k;
        json_t *val;
        json_object_foreach(env, k, val)
        {
                if (!json_is_string(val) || !*k || strchr(k, '=')) {
                        ab_strvfreep(&v);
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "env.%s: must be a string with a valid name", k);
                }
                v[n++] = xasprintf("%s=%s", k, json_string_value(val));
        }
        exec_job *j = xzalloc(sizeof(*j));
        j->fd = -1;
        j->command = cmd ? xstrdup(cmd) : NULL;
        j->argv = steal_pointer(&argv);
        j->cwd = cwd ? xstrdup(cwd) : NULL;
        j->user = user && *user ? xstrdup(user) : NULL;
        if (in) {
                j->stdin_len = json_string_length(sv);
                j->stdin_data = xmalloc(j->stdin_len + 1);
                memcpy(j->stdin_data, in, j->stdin_len + 1);
        }
        j->env = v;
        j->timeout_ms = p ? (uint32_t)(t * 1000 + 0.5) : 0;
        if (p && j->timeout_ms == 0)
                j->timeout_ms = 1;
        *out = j;
        return 0;
}

static int collect(void *ud, int stream, const void *buf, size_t len)
{
        exec_job *j = ud;
        ab_buf_add(&j->out[stream == 2], buf, len);
        return 0;
}

static void fill_req(exec_job *j, abc_exec_req *q)
{
        *q = (abc_exec_req){
            .command = j->command,
            .argv = (const char *const *)j->argv,
            .env = (const char *const *)j->env,
            .cwd = j->cwd,
            .user = j->user,
            .stdin_data = j->stdin_data,
            .stdin_len = j->stdin_len,
            .stdin_fd = -1,
            .timeout_ms = j->timeout_ms,
        };
}

static json_t *exec_result_json(exec_job *j, const abc_exec_res *res)
{
        return json_pack(
            "{s:o,s:o,s:i,s:I,s:b,s:b}", "stdout", json_bytes(j->out[0].p, j->out[0].n), "stderr",
            json_bytes(j->out[1].p, j->out[1].n), "exit_code", res->exit_code, "duration_ms",
            (json_int_t)res->duration_ms, "timed_out", res->timed_out, "truncated", res->truncated);
}

/* The seed-000 shape for "the box could not be made available". */
static enum MHD_Result exec_unavailable(ab_req *r, ab_err *e, const char *sandbox_id)
{
        unsigned st = status_of(e->code);
        if (e->code != AB_E_UNAVAILABLE && e->code != AB_E_INTERNAL && e->code != AB_E_TIMEOUT)
                return resp_err(r, e);
        if (st < 500)
                st = 503;
        ab_metrics_error(r->srv->metrics, ab_code_name(e->code));
        json_t *j = json_pack("{s:s,s:o,s:i,s:i,s:b,s:b,s:{s:s,s:o}}", "stdout", "", "stderr",
                              json_bytes(e->msg, strlen(e->msg)), "exit_code", -1, "duration_ms", 0,
                              "timed_out", 0, "truncated", 0, "error", "code",
                              ab_code_name(e->code), "message", json_bytes(e->msg, strlen(e->msg)));
        if (sandbox_id)
                json_object_set_new(j, "sandbox_id", json_string(sandbox_id));
        ab_err_free(&e);
        return resp_json(r, st, j);
}

/* SSE: one event with a JSON data line. Returns 0, or -1 when the client is gone. */
static int sse_send(exec_job *j, const char *event, json_t *data)
{
        char *txt = json_dumps(data, JSON_COMPACT);
        json_decref(data);
        if (!txt)
                return -1;
        char *frame = xasprintf("event: %s\ndata: %s\n\n", event, txt);
        free(txt);
        int rc = ab_write_all(j->fd, frame, strlen(frame));
        free(frame);
        if (rc < 0)
                j->broken = true;
        return rc < 0 ? -1 : 0;
}

static int sse_output(void *ud, int stream, const void *buf, size_t len)
{
        exec_job *j = ud;
        return sse_send(j, stream == 2 ? "stderr" : "stdout",
                        json_pack("{s:o}", "data", json_bytes(buf, len)));
}

static void *exec_stream_main(void *arg)
{
        exec_job *j = arg;
        abc_exec_req q;
        fill_req(j, &q);
        q.has_cancel = true; /* the response's reader going away kills the command */
        q.cancel_fd = j->fd;
        abc_exec_res res;
        ab_err *e = NULL;
        if (ab_manager_exec(j->srv->mgr, &j->use, &q, sse_output, j, &res, &e) < 0) {
                if (!j->broken)
                        sse_send(j, "error",
                                 json_pack("{s:s,s:o,s:i}", "code", ab_code_name(e->code),
                                           "message", json_bytes(e->msg, strlen(e->msg)),
                                           "exit_code", -1));
                ab_err_free(&e);
        } else if (!j->broken) {
                sse_send(j, "exit",
                         json_pack("{s:i,s:I,s:b,s:b}", "exit_code", res.exit_code, "duration_ms",
                                   (json_int_t)res.duration_ms, "timed_out", res.timed_out,
                                   "truncated", res.truncated));
        }
        ab_manager_use_end(j->srv->mgr, &j->use);
        exec_job_free(j);
        return NULL;
}

static bool wants_sse(ab_req *r)
{
        const char *a = req_header(r, "Accept");
        return a && strstr(a, "text/event-stream");
}

static const char *const sse_headers[] = {"X-Accel-Buffering", "no", NULL, NULL};

/* Runs job j in the box it is using; answers the request. Takes j. */
static enum MHD_Result run_exec(ab_req *r, exec_job *j, const char *sandbox_id)
{
        if (wants_sse(r)) {
                /* over a quota: a 429 now rather than an error event after a 200 */
                ab_err *qe = NULL;
                if (ab_manager_quota_exec_check(r->srv->mgr, j->use.rec.app_id, &qe) < 0) {
                        ab_manager_use_end(r->srv->mgr, &j->use);
                        exec_job_free(j);
                        return resp_err(r, qe);
                }
                enum MHD_Result ret;
                ab_stream_slot *slot = req_stream_slot(r, &ret);
                if (!slot) {
                        ab_manager_use_end(r->srv->mgr, &j->use);
                        exec_job_free(j);
                        return ret;
                }
                int p[2];
                if (pipe2(p, O_CLOEXEC) < 0) {
                        ab_stream_slot_release(slot);
                        ab_manager_use_end(r->srv->mgr, &j->use);
                        exec_job_free(j);
                        return resp_error(r, 500, "internal", "pipe: %s", strerror(errno));
                }
                j->fd = p[1];
                if (kit_exec_spawn(r, &j->kc, exec_stream_main, j) < 0) {
                        close(p[0]);
                        ab_stream_slot_release(slot);
                        ab_manager_use_end(r->srv->mgr, &j->use);
                        exec_job_free(j);
                        return resp_error(r, 503, "unavailable", "cannot start a thread");
                }
                return resp_stream_counted(r, 200, "text/event-stream", p[0], sse_headers, slot);
        }
        abc_exec_req q;
        fill_req(j, &q);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) { /* a client that hangs up kills its command */
                q.has_cancel = true;
                q.cancel_fd = ci->connect_fd;
        }
        abc_exec_res res;
        ab_err *e = NULL;
        j->use.late = true; /* ended as the answer goes out (ab_req.ending_use) */
        int rc = ab_manager_exec(r->srv->mgr, &j->use, &q, collect, j, &res, &e);
        r->ending_use = xmalloc(sizeof(ab_use));
        *r->ending_use = j->use;
        if (rc < 0) {
                exec_job_free(j);
                return exec_unavailable(r, e, sandbox_id);
        }
        json_t *out = exec_result_json(j, &res);
        if (sandbox_id)
                json_object_set_new(out, "sandbox_id", json_string(sandbox_id));
        exec_job_free(j);
        return resp_json(r, 200, out);
}

enum MHD_Result route_box_exec(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        exec_job *j = NULL;
        if (fields_known(body, exec_fields, NULL, &e) < 0 || parse_exec(body, &j, &e) < 0) {
                json_decref(body);
                return resp_err(r, e);
        }
        json_decref(body);
        j->srv = r->srv;
        if (ab_manager_use_begin(r->srv->mgr, id, r->scope, &j->use, &e) < 0) {
                exec_job_free(j);
                return exec_unavailable(r, e, NULL);
        }
        return run_exec(r, j, NULL);
}

int parse_exec_any(const ab_server *s, json_t *body, json_t **acq, ab_acquire_req *q,
                   ab_limits *lim, exec_job **j, ab_err **err)
{
        /* Split the body: acquire fields and exec fields. */
        json_t *a = json_object(), *ex = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(body, k, v)
        {
                bool is_exec = false;
                for (const char *const *p = exec_fields; *p; p++)
                        is_exec |= !strcmp(*p, k);
                /* env belongs to the exec (per call), not to a new box */
                json_object_set(is_exec ? ex : a, k, v);
        }
        *j = NULL;
        int rc = fields_known(a, acquire_fields, NULL, err);
        if (rc == 0)
                rc = parse_exec(ex, j, err);
        if (rc == 0)
                rc = parse_acquire(s, a, q, lim, err);
        json_decref(ex);
        if (rc < 0) {
                json_decref(a);
                if (*j)
                        exec_job_free(*j);
                *j = NULL;
                return -1;
        }
        *acq = a;
        return 0;
}

enum MHD_Result route_exec(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        exec_job *j = NULL;
        ab_acquire_req q;
        ab_limits lim;
        ab_box_rec rec;
        bool created;
        json_t *acq = NULL;
        int rc = parse_exec_any(r->srv, body, &acq, &q, &lim, &j, &e);
        json_decref(body);
        if (rc < 0)
                return resp_err(r, e);
        /* a refused exec must not leave a new box behind: its quotas first */
        rc = ab_manager_quota_exec_check(r->srv->mgr, r->scope ? r->scope : q.app_id, &e);
        if (rc == 0)
                rc = ab_manager_acquire(r->srv->mgr, &q, r->scope, &rec, &created, &e);
        json_decref(acq);
        if (rc < 0) {
                exec_job_free(j);
                return exec_unavailable(r, e, NULL);
        }
        if (!kit_box_local(r->srv, &rec) && !r->forwarded) {
                /* the keys' box is another fleet node's: the whole call runs there */
                exec_job_free(j);
                _cleanup_free_ char *node = steal_pointer(&rec.node);
                ab_box_rec_clear(&rec);
                return kit_forward_buffered(r, node);
        }
        j->srv = r->srv;
        _cleanup_free_ char *sid = xstrdup(rec.id);
        ab_box_rec_clear(&rec);
        if (ab_manager_use_begin(r->srv->mgr, sid, r->scope, &j->use, &e) < 0) {
                exec_job_free(j);
                return exec_unavailable(r, e, sid);
        }
        return run_exec(r, j, sid);
}

/* ---- events ----------------------------------------------------------- */

typedef struct sse_sub {
        ab_server *srv;
        char *scope;
        char **types; /* NULL = all */
        char *box_id;
        uint64_t after;
        ab_buf buf; /* what sse_read hands out next, from off */
        size_t off;
        bool started, ended;
        int64_t sent_ms; /* when something was last sent (keepalives follow silence) */
        ab_park *park;
        ab_stream_slot *slot;
} sse_sub;

static bool sub_wants(sse_sub *s, const ab_event_view *v)
{
        if (s->scope && (!v->app_id || strcmp(v->app_id, s->scope)))
                return false;
        if (s->box_id && (!v->box_id || strcmp(v->box_id, s->box_id)))
                return false;
        if (!s->types)
                return true;
        for (char **t = s->types; *t; t++)
                if (!strcmp(*t, v->type))
                        return true;
        return false;
}

static bool sse_has_news(void *arg)
{
        sse_sub *s = arg;
        return ab_events_last_seq(s->srv->events) > s->after;
}

/* Never blocks MHD's thread: with nothing to send the connection parks until
 * the bus has news or a keepalive is due. */
static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max)
{
        sse_sub *s = cls;
        while (s->off >= s->buf.n) {
                s->buf.n = s->off = 0;
                if (s->ended)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                int64_t now = (int64_t)ab_now_ms();
                if (!s->started) {
                        s->started = true;
                        s->sent_ms = now;
                        ab_buf_puts(&s->buf, ": agentbox events\nretry: 2000\n\n");
                        break;
                }
                ab_event_view *v = NULL;
                size_t n = 0;
                bool dropped = false;
                int rc = ab_events_wait(s->srv->events, s->after, SSE_BATCH, 0, &v, &n, &dropped);
                if (rc < 0) {
                        s->ended = true;
                        continue;
                }
                if (dropped)
                        ab_buf_puts(&s->buf,
                                    ": some events were dropped (the client fell behind)\n\n");
                for (size_t i = 0; i < n; i++) {
                        s->after = v[i].seq;
                        if (!sub_wants(s, &v[i]))
                                continue;
                        ab_buf_printf(&s->buf, "id: %" PRIu64 "\nevent: %s\ndata: %s\n\n", v[i].seq,
                                      v[i].type, v[i].json);
                }
                ab_event_views_free(v, n);
                if (n == 0 && !dropped) {
                        if (now - s->sent_ms >= SSE_KEEPALIVE_MS) {
                                ab_buf_puts(&s->buf, ": keepalive\n\n");
                        } else {
                                ab_park_result pr =
                                    ab_park_suspend(s->park, -1, true,
                                                    s->sent_ms + SSE_KEEPALIVE_MS, sse_has_news, s);
                                if (pr == AB_PARK_SUSPENDED)
                                        return 0;
                                if (pr == AB_PARK_GONE)
                                        s->ended = true;
                                continue;
                        }
                }
                if (s->buf.n)
                        s->sent_ms = now;
        }
        size_t n = s->buf.n - s->off;
        if (n > max)
                n = max;
        memcpy(out, s->buf.p + s->off, n);
        s->off += n;
        return (ssize_t)n;
}

static void sse_free(void *cls)
{
        sse_sub *s = cls;
        atomic_fetch_sub(&s->srv->sse_subscribers, 1);
        ab_park_free(s->park);
        ab_stream_slot_release(s->slot);
        free(s->scope);
        ab_strvfreep(&s->types);
        free(s->box_id);
        ab_buf_free(&s->buf);
        free(s);
}

enum MHD_Result route_events(ab_req *r, const char *id)
{
        sse_sub *s = xzalloc(sizeof(*s));
        s->srv = r->srv;
        s->scope = r->scope ? xstrdup(r->scope) : NULL;
        const char *types = req_query(r, "types");
        if (types && *types) {
                _cleanup_free_ char *copy = xstrdup(types);
                size_t n = 0;
                s->types = xcalloc(strlen(types) / 2 + 2, sizeof(char *));
                char *save = NULL;
                for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
                        s->types[n++] = xstrdup(t);
        }
        const char *box = req_query(r, "box_id");
        s->box_id = box ? xstrdup(box) : NULL;
        const char *after = req_query(r, "after");
        if (!after)
                after = req_header(r, "Last-Event-ID");
        if (after) {
                char *end;
                errno = 0;
                unsigned long long a = strtoull(after, &end, 10);
                if (errno || end == after || *end) {
                        s->srv = NULL;
                        free(s->scope);
                        ab_strvfreep(&s->types);
                        free(s->box_id);
                        free(s);
                        return resp_error(r, 400, "invalid_argument",
                                          "after: must be an event id (a number), not \"%s\"",
                                          after);
                }
                /* An id from before a restart (sequence numbers start again
                 * at 1): send everything still buffered. */
                s->after = a > ab_events_last_seq(r->srv->events) ? 0 : a;
        } else {
                s->after = ab_events_last_seq(r->srv->events);
        }
        enum MHD_Result ret;
        s->slot = req_stream_slot(r, &ret);
        if (!s->slot) {
                free(s->scope);
                ab_strvfreep(&s->types);
                free(s->box_id);
                free(s);
                return ret;
        }
        s->park = ab_park_new(r->srv->http.conns, r->conn);
        atomic_fetch_add(&r->srv->sse_subscribers, 1);
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, s, sse_free);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        return resp_send(r, 200, resp);
}

/* ---- API keys --------------------------------------------------------- */

int parse_key_create(json_t *body, const char **app, const char **name, ab_quota *quotas,
                     bool *e2b_form, ab_err **err)
{
        static const char *const known[] = {"app_id", "name", "quotas", "format", NULL};
        json_t *qo = NULL;
        const char *format = NULL;
        *app = *name = NULL;
        *e2b_form = false;
        ab_quota_unset(quotas);
        if (fields_known(body, known, NULL, err) < 0 || field_str(body, "app_id", app, err) < 0 ||
            field_str(body, "name", name, err) < 0 || field_obj(body, "quotas", &qo, err) < 0 ||
            field_str(body, "format", &format, err) < 0 ||
            (qo && ab_quota_from_json(qo, quotas, err) < 0))
                return -1;
        if (!*app || !**app)
                return ab_err_set(err, AB_E_INVALID, 0, "app_id: required");
        if (format && strcmp(format, "agentbox") && strcmp(format, "e2b"))
                return ab_err_set(err, AB_E_INVALID, 0, "format: \"agentbox\" or \"e2b\"");
        *e2b_form = format && !strcmp(format, "e2b");
        return 0;
}

enum MHD_Result route_keys_create(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        const char *app = NULL, *name = NULL;
        ab_quota quotas;
        bool e2b_form;
        if (parse_key_create(body, &app, &name, &quotas, &e2b_form, &e) < 0) {
                json_decref(body);
                return resp_err(r, e);
        }
        char secret[64], key_id[32], hash[65];
        /* E2B's form ("e2b_" and 40 hex digits) passes the check E2B's SDKs
         * make before sending a key (JS SDK 2.45 unless E2B_VALIDATE_API_KEY=false) */
        if (e2b_form)
                ab_random_hex(secret, sizeof(secret), "e2b_", 20);
        else
                ab_random_hex(secret, sizeof(secret), "abk_", 24);
        ab_random_hex(key_id, sizeof(key_id), "k_", 6);
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int mdlen = 0;
        EVP_Digest(secret, strlen(secret), md, &mdlen, EVP_sha256(), NULL);
        ab_hex_encode(md, 32, hash);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ab_api_key k = {
            .key_id = key_id,
            .key_hash = hash,
            .app_id = (char *)app,
            .name = (char *)name,
            .created_at = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
            .has_quotas = !ab_quota_is_unset(&quotas),
            .quotas = quotas,
        };
        if (ab_store_key_insert(r->srv->store, &k, &e) < 0) {
                json_decref(body);
                return resp_err(r, e);
        }
        json_t *j = json_pack("{s:s,s:s,s:s,s:s?,s:o}", "key_id", key_id, "key", secret, "app_id",
                              app, "name", name, "quotas", ab_quota_json(&quotas, true));
        json_decref(body);
        ab_log(AB_LOG_INFO, "API key created", "key_id", key_id, NULL);
        return resp_json(r, 201, j);
}

enum MHD_Result route_keys_list(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        ab_api_key *ks = NULL;
        size_t n = 0;
        if (ab_store_key_list(r->srv->store, &ks, &n, &e) < 0)
                return resp_err(r, e);
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(
                    a, json_pack(
                           "{s:s,s:s,s:s?,s:I,s:o}", "key_id", ks[i].key_id, "app_id", ks[i].app_id,
                           "name", ks[i].name, "created_at", (json_int_t)ks[i].created_at, "quotas",
                           ks[i].has_quotas ? ab_quota_json(&ks[i].quotas, true) : json_object()));
        ab_api_keys_free(ks, n);
        return resp_json(r, 200, json_pack("{s:o}", "keys", a));
}

enum MHD_Result route_keys_delete(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        if (ab_store_key_delete(r->srv->store, id, &e) < 0)
                return resp_err(r, e);
        /* its streams end now, not when their clients leave (conn.h) */
        size_t ended = ab_conns_revoke_key(r->srv->http.conns, id);
        return resp_json(
            r, 200, json_pack("{s:s,s:I}", "deleted", id, "connections_closed", (json_int_t)ended));
}
