/* OpenSandbox's execd API (specs/execd-api.yaml, as its JS SDK calls it)
 * under /opensandbox/execd/{id}: commands (streamed as server-sent events,
 * background commands with status, logs and interrupt), bash sessions,
 * metrics, and the routing of every execd call (files and directories are
 * front_execd_files.c's). Foreground commands go through the manager's
 * exec (the one door: env, limits, audit, events); background commands and
 * sessions live in the box's init (ab_manager_cmd_start, terminals), so a
 * restart of the server loses neither. */
#include "fronts/opensandbox/front_execd_int.h"
#include "fronts/opensandbox/osb_lines.h"
#include "kit/exec.h"
#include "kit/shell.h"
#include "kit/status.h"
#include "kit/term.h"
#include "base/log.h"
#include "base/codec.h"
#include "base/id.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>

#define CMDS_KEPT 256   /* finished commands remembered for status/logs */
#define PING_MS   15000 /* a silent foreground stream gets a ping this often */

/* ---- helpers ------------------------------------------------------------ */

/* The threads of this file (foreground commands, session runs, metrics
 * watches) use the manager: execd_shutdown ends them and waits for them
 * before the manager goes. */
static atomic_int n_threads;
static atomic_bool stopping;

static int execd_spawn(void *(*fn)(void *), void *arg)
{
        if (atomic_load(&stopping))
                return -ESHUTDOWN;
        atomic_fetch_add(&n_threads, 1);
        int rc = spawn_detached(fn, arg);
        if (rc < 0)
                atomic_fetch_sub(&n_threads, 1);
        return rc;
}

static void execd_thread_done(void)
{
        atomic_fetch_sub(&n_threads, 1);
}

/* Errors of an operation on a box's files or commands in execd's codes: a
 * missing path is FILE_NOT_FOUND, a bad request INVALID_REQUEST_BODY, a
 * full disk 507 (as agentbox's own file routes answer it). Frees e. */
enum MHD_Result execd_err(ab_req *r, ab_err *e)
{
        enum MHD_Result ret;
        if (e->code == AB_E_NOT_FOUND)
                ret = osb_error(r, 404, "FILE_NOT_FOUND", "%s", e->msg);
        else if (e->code == AB_E_INVALID)
                ret = osb_error(r, 400, "INVALID_REQUEST_BODY", "%s", e->msg);
        else if (kit_file_status(e->code) == 507)
                ret = osb_error(r, 507, "DISK_FULL", "%s", e->msg);
        else
                return osb_err(r, e, "");
        ab_err_free(&e);
        return ret;
}

int execd_begin_use(ab_req *r, const char *id, ab_use *u, enum MHD_Result *ret)
{
        ab_err *e = NULL;
        if (ab_manager_use_begin(r->srv->mgr, id, r->scope, u, &e) < 0) {
                *ret = osb_err(r, e, "");
                return -1;
        }
        return 0;
}

enum MHD_Result execd_ok(ab_req *r)
{
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        return resp_send(r, 200, resp);
}

/* ---- commands ----------------------------------------------------------- */

typedef struct cmd {
        struct cmd *next;
        char id[24];
        char *box;
        char *content;
        bool running, interrupted;
        int exit_code;
        char *error;
        int64_t started_ms, finished_ms;
        int cancel_fd; /* shutdown(SHUT_RD) on it ends the exec; -1 once done */
} cmd;

static pthread_mutex_t cmds_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool stopping; /* execd_shutdown: session runs leave their shells */
static cmd *cmds;            /* newest first */
static size_t n_cmds;

static void cmd_free(cmd *c)
{
        free(c->box);
        free(c->content);
        free(c->error);
        free(c);
}

/* Adds c; forgets the oldest finished command beyond CMDS_KEPT. */
static void cmds_add(cmd *c)
{
        pthread_mutex_lock(&cmds_lock);
        c->next = cmds;
        cmds = c;
        n_cmds++;
        if (n_cmds > CMDS_KEPT) {
                cmd **victim = NULL;
                for (cmd **p = &cmds; *p; p = &(*p)->next)
                        if (!(*p)->running)
                                victim = p;
                if (victim) {
                        cmd *v = *victim;
                        *victim = v->next;
                        n_cmds--;
                        cmd_free(v);
                }
        }
        pthread_mutex_unlock(&cmds_lock);
}

/* Caller holds cmds_lock. */
static cmd *cmd_find(const char *box, const char *id)
{
        for (cmd *c = cmds; c; c = c->next)
                if (!strcmp(c->id, id) && !strcmp(c->box, box))
                        return c;
        return NULL;
}

typedef struct cmd_job {
        ab_server *srv;
        ab_use use;
        cmd *c;
        char *command, *cwd, *user;
        char **argv; /* a session's run: instead of command (which names it for status) */
        char **env;
        uint32_t timeout_ms;
        int fd; /* the event stream's end */
        bool broken;
        kit_caller kc; /* the request's, for the exec on its own thread */
        /* a foreground stream: events are sent under wlock by the exec's
         * output and by the pinger, which wakes on cv */
        pthread_mutex_t wlock;
        pthread_cond_t cv;
        bool done;
        int64_t last_ms;  /* when the last event was sent */
        osb_lines out[2]; /* stdout, stderr */
} cmd_job;

static cmd_job *cmd_job_new(ab_server *srv)
{
        cmd_job *j = xzalloc(sizeof(*j));
        j->srv = srv;
        j->fd = -1;
        pthread_mutex_init(&j->wlock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&j->cv, &ca);
        pthread_condattr_destroy(&ca);
        j->last_ms = (int64_t)ab_now_ms();
        j->out[0] = (osb_lines){.type = "stdout"};
        j->out[1] = (osb_lines){.type = "stderr"};
        return j;
}

static void cmd_job_free(cmd_job *j)
{
        pthread_mutex_destroy(&j->wlock);
        pthread_cond_destroy(&j->cv);
        osb_lines_free(&j->out[0]);
        osb_lines_free(&j->out[1]);
        free(j->command);
        free(j->cwd);
        free(j->user);
        ab_strvfreep(&j->argv);
        ab_strvfreep(&j->env);
        kit_caller_clear(&j->kc);
        free(j);
}

/* Sends the frames of f (emptied). Caller holds j->wlock. */
static int sse_send_frames_locked(cmd_job *j, ab_buf *f)
{
        int rc = j->broken ? -1 : f->n ? ab_send_all(j->fd, f->p, f->n, -1) : 0;
        ab_buf_drop(f, f->n);
        if (rc < 0)
                j->broken = true;
        j->last_ms = (int64_t)ab_now_ms();
        return rc;
}

/* Caller holds j->wlock. */
static int sse_send_locked(cmd_job *j, json_t *ev)
{
        _cleanup_buf_ ab_buf f = {0};
        osb_sse_frame(&f, ev);
        return sse_send_frames_locked(j, &f);
}

/* Sends the frames of a feed's lines (f emptied). */
static int sse_send_frames(cmd_job *j, ab_buf *f)
{
        pthread_mutex_lock(&j->wlock);
        int rc = f->n ? sse_send_frames_locked(j, f) : j->broken ? -1 : 0;
        pthread_mutex_unlock(&j->wlock);
        return rc;
}

static int sse_event(cmd_job *j, json_t *ev)
{
        pthread_mutex_lock(&j->wlock);
        int rc = sse_send_locked(j, ev);
        pthread_mutex_unlock(&j->wlock);
        return rc;
}

/* A ping event when a foreground command was silent for PING_MS: clients
 * (undici's body timeout is 5 minutes) and proxies keep the stream. */
static void *ping_main(void *arg)
{
        cmd_job *j = arg;
        pthread_mutex_lock(&j->wlock);
        while (!j->done && !j->broken) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_sec += PING_MS / 1000;
                pthread_cond_timedwait(&j->cv, &j->wlock, &ts);
                if (!j->done && (int64_t)ab_now_ms() - j->last_ms >= PING_MS - 50)
                        sse_send_locked(j, json_pack("{s:s}", "type", "ping"));
        }
        pthread_mutex_unlock(&j->wlock);
        return NULL;
}

static int fg_output(void *ud, int stream, const void *buf, size_t len)
{
        cmd_job *j = ud;
        osb_lines *o = &j->out[stream == 2];
        osb_lines_feed(o, buf, len);
        return sse_send_frames(j, &o->frames);
}

static void *cmd_main(void *arg)
{
        cmd_job *j = arg;
        cmd *c = j->c; /* only under cmds_lock once it is finished: it may be forgotten */
        pthread_t pinger;
        bool pinging = pthread_create(&pinger, NULL, ping_main, j) == 0;
        abc_exec_req q = {
            .command = j->argv ? NULL : j->command,
            .argv = (const char *const *)j->argv,
            .env = (const char *const *)j->env,
            .cwd = j->cwd,
            .user = j->user,
            .stdin_fd = -1,
            .timeout_ms = j->timeout_ms,
            .has_cancel = true,
            .cancel_fd = j->fd,
        };
        abc_exec_res res = {0};
        ab_err *e = NULL;
        int rc = ab_manager_exec(j->srv->mgr, &j->use, &q, fg_output, j, &res, &e);
        for (int i = 0; i < 2; i++) {
                osb_lines_flush(&j->out[i]);
                sse_send_frames(j, &j->out[i].frames);
        }
        pthread_mutex_lock(&cmds_lock);
        bool interrupted = c->interrupted;
        c->running = false;
        c->finished_ms = osb_wall_ms();
        if (rc < 0) {
                c->exit_code = interrupted ? 137 : -1;
                c->error = xstrdup(interrupted ? "interrupted" : e->msg);
        } else {
                c->exit_code = res.exit_code;
                if (res.timed_out)
                        c->error = xasprintf("timed out after %u ms", j->timeout_ms);
        }
        c->cancel_fd = -1;
        int exit_code = c->exit_code;
        _cleanup_free_ char *error = c->error ? xstrdup(c->error) : NULL;
        pthread_mutex_unlock(&cmds_lock);
        if (pinging) {
                pthread_mutex_lock(&j->wlock);
                j->done = true;
                pthread_cond_signal(&j->cv);
                pthread_mutex_unlock(&j->wlock);
                pthread_join(pinger, NULL);
        }
        if (exit_code != 0 || error) {
                const char *ename = rc < 0          ? (interrupted ? "Interrupted" : "RuntimeError")
                                    : res.timed_out ? "TimeoutError"
                                                    : "CommandExecError";
                char ev[16];
                snprintf(ev, sizeof(ev), "%d", exit_code);
                json_t *tb = json_array();
                if (error)
                        json_array_append_new(tb, json_string(error));
                sse_event(j, json_pack("{s:s,s:{s:s,s:s,s:o}}", "type", "error", "error", "ename",
                                       ename, "evalue", ev, "traceback", tb));
        } else { /* as execd: an error ends the stream, no completion follows it */
                sse_event(j, json_pack("{s:s,s:I}", "type", "execution_complete", "execution_time",
                                       (json_int_t)res.duration_ms));
        }
        ab_err_free(&e);
        ab_manager_use_end(j->srv->mgr, &j->use);
        close(j->fd); /* the event stream ends */
        cmd_job_free(j);
        execd_thread_done();
        return NULL;
}

static int parse_command(json_t *body, cmd_job *j, bool *background, ab_err **err)
{
        const char *command = json_string_value(json_object_get(body, "command"));
        if (!command || !*command)
                return ab_err_set(err, AB_E_INVALID, 0, "command: required");
        const char *cwd = json_string_value(json_object_get(body, "cwd"));
        *background = json_is_true(json_object_get(body, "background"));
        json_t *to = json_object_get(body, "timeout");
        if (json_is_integer(to) || json_is_real(to)) {
                double ms = json_number_value(to);
                if (ms < 1 || ms > AB_MAX_TIMEOUT_S * 1000.0)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "timeout: must be 1..%u milliseconds",
                                          AB_MAX_TIMEOUT_S * 1000);
                j->timeout_ms = (uint32_t)ms;
        } else if (*background) { /* a background command may run as long as agentbox allows */
                j->timeout_ms = AB_MAX_TIMEOUT_S * 1000;
        }
        json_t *uid = json_object_get(body, "uid"), *gid = json_object_get(body, "gid");
        if (json_is_integer(gid) && !json_is_integer(uid))
                return ab_err_set(err, AB_E_INVALID, 0, "gid: needs uid");
        if (json_is_integer(uid))
                j->user = json_is_integer(gid)
                              ? xasprintf("%lld:%lld", (long long)json_integer_value(uid),
                                          (long long)json_integer_value(gid))
                              : xasprintf("%lld", (long long)json_integer_value(uid));
        json_t *envs = json_object_get(body, "envs");
        size_t n = 0;
        j->env = xcalloc(json_object_size(envs) + 1, sizeof(char *));
        const char *k;
        json_t *v;
        json_object_foreach(envs, k, v)
        {
                if (!json_is_string(v) || !*k || strchr(k, '='))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "envs.%s: must be a string with a valid name", k);
                j->env[n++] = xasprintf("%s=%s", k, json_string_value(v));
        }
        j->command = xstrdup(command);
        j->cwd = cwd && *cwd ? xstrdup(cwd) : NULL;
        return 0;
}

static const char *const sse_headers[] = {"X-Accel-Buffering", "no", "Cache-Control",
                                          "no-cache",          NULL, NULL};

/* POST /command: a foreground command answers a stream of events (init,
 * stdout, stderr, error, execution_complete) while it runs; a background
 * one answers its init event and runs on, its output kept for /logs. */
static enum MHD_Result start_cmd(ab_req *r, const char *id, cmd_job *j, bool bg);

static enum MHD_Result cmd_run(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return execd_err(r, e);
        cmd_job *j = cmd_job_new(r->srv);
        bool bg = false;
        if (parse_command(body, j, &bg, &e) < 0) {
                json_decref(body);
                cmd_job_free(j);
                return execd_err(r, e);
        }
        json_decref(body);
        return start_cmd(r, id, j, bg);
}

/* ---- background commands: processes held by the box's init ---- */

/* A background command is a process in the box's init (its stderr merged
 * into its stdout, as execd's logs have them), started through the
 * manager's door for users' commands; init keeps its status, exit code and
 * the last 128 KiB of its output, so status, logs and interrupt work after
 * a restart of the server too. Its id and command ride in the process's
 * tag: {"front":"osb","cmd":ID,"content":COMMAND (cut to fit)}. */
static char *bg_tag(const char *cid, const char *command)
{
        size_t cut = strlen(command);
        for (;;) {
                json_t *j = json_pack("{s:s,s:s,s:s%}", "front", "osb", "cmd", cid, "content",
                                      command, cut);
                char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
                json_decref(j);
                if (t && strlen(t) <= ABC_TERM_TAG_MAX)
                        return t;
                free(t);
                cut = cut > 1024 ? cut - 1024 : 0; /* (also when the cut split a character) */
                while (cut > 0 && ((unsigned char)command[cut] & 0xc0) == 0x80)
                        cut--;
        }
}

/* The background command cid of box (*t, its content in *content); 0, or
 * -1 with AB_E_NOT_FOUND when there is none. */
static int bg_find(ab_server *srv, const char *scope, const char *box, const char *cid,
                   abc_term_info *t, char **content, ab_err **err)
{
        abc_term_info *v;
        size_t n;
        *t = (abc_term_info){0};
        if (ab_manager_proc_list(srv->mgr, box, scope, &v, &n, err) < 0)
                return -1;
        int rc = -1;
        for (size_t i = 0; i < n && rc < 0; i++) {
                json_t *j = v[i].tag ? json_loads(v[i].tag, 0, NULL) : NULL;
                const char *front = json_string_value(json_object_get(j, "front"));
                const char *id = json_string_value(json_object_get(j, "cmd"));
                if (front && !strcmp(front, "osb") && id && !strcmp(id, cid)) {
                        if (content) {
                                const char *c = json_string_value(json_object_get(j, "content"));
                                *content = xstrdup(c ? c : "");
                        }
                        *t = v[i];
                        v[i] = (abc_term_info){0};
                        rc = 0;
                }
                json_decref(j);
        }
        abc_term_infos_free(v, n);
        if (rc < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no command %s in sandbox %s", cid, box);
        return 0;
}

static enum MHD_Result start_bg(ab_req *r, const char *id, cmd_job *j)
{
        char cid[24];
        ab_random_hex(cid, sizeof(cid), "cmd-", 8);
        _cleanup_free_ char *tag = bg_tag(cid, j->command);
        abc_term_req q = {
            .command = j->command,
            .env = (const char *const *)j->env,
            .cwd = j->cwd,
            .user = j->user,
            .pipes = true,
            .close_stdin = true,
            .merge = true,
            .timeout_ms = j->timeout_ms,
            .tag = tag,
        };
        abc_term_info t;
        ab_err *e = NULL;
        int rc = ab_manager_cmd_start_id(r->srv->mgr, id, r->scope, &q, &t, &e);
        cmd_job_free(j);
        if (rc < 0) {
                if (e->code != AB_E_CONFLICT)
                        return osb_err(r, e, "");
                enum MHD_Result ret = osb_error(r, 429, "TOO_MANY_COMMANDS", "%s", e->msg);
                ab_err_free(&e);
                return ret;
        }
        json_t *ev = json_pack("{s:s,s:s,s:I}", "type", "init", "text", cid, "timestamp",
                               (json_int_t)t.created_ms);
        abc_term_info_clear(&t);
        char *txt = json_dumps(ev, JSON_COMPACT);
        json_decref(ev);
        char *init = xasprintf("data: %s\n\n", txt);
        free(txt);
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(strlen(init), init, MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        return resp_send(r, 200, resp);
}

/* Starts job j (its command parsed) in box id and answers r. Takes j. */
static enum MHD_Result start_cmd(ab_req *r, const char *id, cmd_job *j, bool bg)
{
        ab_err *e = NULL;
        enum MHD_Result ret;
        if (bg)
                return start_bg(r, id, j);
        if (execd_begin_use(r, id, &j->use, &ret) < 0) {
                cmd_job_free(j);
                return ret;
        }
        if (ab_manager_quota_exec_check(r->srv->mgr, j->use.rec.app_id, &e) < 0) {
                ab_manager_use_end(r->srv->mgr, &j->use);
                cmd_job_free(j);
                return osb_err(r, e, "");
        }
        ab_stream_slot *slot = NULL;
        if (!(slot = req_stream_slot(r, &ret))) {
                ab_manager_use_end(r->srv->mgr, &j->use);
                cmd_job_free(j);
                return ret;
        }
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
                ab_stream_slot_release(slot);
                ab_manager_use_end(r->srv->mgr, &j->use);
                cmd_job_free(j);
                return osb_error(r, 500, "RUNTIME_ERROR", "cannot make the command's stream");
        }
        cmd *c = xzalloc(sizeof(*c));
        ab_random_hex(c->id, sizeof(c->id), "cmd-", 8);
        c->box = xstrdup(id);
        c->content = xstrdup(j->command);
        c->running = true;
        c->started_ms = osb_wall_ms();
        c->cancel_fd = sv[0];
        j->c = c;
        j->fd = sv[0];
        _cleanup_free_ char *init = NULL;
        {
                json_t *ev = json_pack("{s:s,s:s,s:I}", "type", "init", "text", c->id, "timestamp",
                                       (json_int_t)c->started_ms);
                char *txt = json_dumps(ev, JSON_COMPACT);
                json_decref(ev);
                init = xasprintf("data: %s\n\n", txt);
                free(txt);
        }
        ab_send_all(sv[0], init, strlen(init), -1); /* the socket's buffer takes it */
        cmds_add(c);
        if (kit_exec_spawn_via(execd_spawn, r, &j->kc, cmd_main, j) < 0) {
                pthread_mutex_lock(&cmds_lock);
                c->running = false;
                c->exit_code = -1;
                c->error = xstrdup("cannot start a thread");
                c->cancel_fd = -1;
                pthread_mutex_unlock(&cmds_lock);
                close(sv[0]);
                close(sv[1]);
                ab_stream_slot_release(slot);
                ab_manager_use_end(r->srv->mgr, &j->use);
                cmd_job_free(j);
                return osb_error(r, 503, "RUNTIME_ERROR", "cannot start a thread");
        }
        return resp_stream_counted(r, 200, "text/event-stream", sv[1], sse_headers, slot);
}

/* Looks a command of box id up (the box must be the caller's). */
int execd_box_check(ab_req *r, const char *id, enum MHD_Result *ret)
{
        ab_err *e = NULL;
        ab_box_rec rec;
        if (ab_manager_get(r->srv->mgr, id, r->scope, &rec, &e) < 0) {
                *ret = osb_err(r, e, "");
                return -1;
        }
        ab_box_rec_clear(&rec);
        return 0;
}

static enum MHD_Result bg_err(ab_req *r, const char *id, const char *cid, ab_err *e)
{
        if (e->code != AB_E_NOT_FOUND)
                return osb_err(r, e, "");
        ab_err_free(&e);
        return osb_error(r, 404, "COMMAND_NOT_FOUND", "no command %s in sandbox %s", cid, id);
}

/* The status of a background command, from the box's init. */
static enum MHD_Result bg_status(ab_req *r, const char *id, const char *cid)
{
        abc_term_info t;
        _cleanup_free_ char *content = NULL;
        ab_err *e = NULL;
        if (bg_find(r->srv, r->scope, id, cid, &t, &content, &e) < 0)
                return bg_err(r, id, cid, e);
        char st[AB_TIME_LEN], fin[AB_TIME_LEN];
        ab_time_rfc3339(t.created_ms, true, st);
        ab_time_rfc3339(t.ended_ms, true, fin);
        json_t *j =
            json_pack("{s:s,s:s,s:b,s:o,s:s,s:o}", "id", cid, "content", content, "running",
                      t.running, "exit_code", t.running ? json_null() : json_integer(t.exit_code),
                      "started_at", st, "finished_at", t.running ? json_null() : json_string(fin));
        if (!t.running && t.timed_out)
                json_object_set_new(j, "error", json_string("timed out"));
        else if (!t.running && t.exit_code == 128 + SIGKILL)
                json_object_set_new(j, "error", json_string("killed (interrupted)"));
        abc_term_info_clear(&t);
        return resp_json(r, 200, j);
}

static enum MHD_Result cmd_status(ab_req *r, const char *id, const char *cid)
{
        enum MHD_Result ret;
        if (execd_box_check(r, id, &ret) < 0)
                return ret;
        pthread_mutex_lock(&cmds_lock);
        cmd *c = cmd_find(id, cid);
        json_t *j = NULL;
        if (c) {
                char st[AB_TIME_LEN], fin[AB_TIME_LEN];
                ab_time_rfc3339(c->started_ms, true, st);
                ab_time_rfc3339(c->finished_ms, true, fin);
                j = json_pack("{s:s,s:s,s:b,s:o,s:s,s:o}", "id", c->id, "content", c->content,
                              "running", c->running, "exit_code",
                              c->running ? json_null() : json_integer(c->exit_code), "started_at",
                              st, "finished_at", c->running ? json_null() : json_string(fin));
                if (c->error)
                        json_object_set_new(j, "error", json_string(c->error));
        }
        pthread_mutex_unlock(&cmds_lock);
        if (!j)
                return bg_status(r, id, cid);
        return resp_json(r, 200, j);
}

/* The logs of a background command (see cmd_logs), from the box's init:
 * the lines it dropped from the front of its ring still count for the
 * cursor. */
static enum MHD_Result bg_logs(ab_req *r, const char *id, const char *cid, long long cursor)
{
        abc_term_info t;
        ab_err *e = NULL;
        if (bg_find(r->srv, r->scope, id, cid, &t, NULL, &e) < 0)
                return bg_err(r, id, cid, e);
        _cleanup_buf_ ab_buf log = {0};
        _cleanup_free_ char *tid = steal_pointer(&t.id);
        abc_term_info_clear(&t);
        if (kit_term_kept(r->srv->mgr, id, r->scope, tid, &t, &log, &e) < 0)
                return bg_err(r, id, cid, e);
        long long in_ring = 0;
        for (size_t i = 0; i < log.n; i++)
                in_ring += log.p[i] == '\n';
        long long lines = (long long)t.lines, dropped = lines - in_ring;
        abc_term_info_clear(&t);
        size_t from = 0;
        if (cursor >= lines) {
                from = log.n;
        } else if (cursor > dropped) {
                long long seen = dropped;
                for (size_t i = 0; i < log.n && seen < cursor; i++)
                        if (log.p[i] == '\n' && ++seen == cursor)
                                from = i + 1;
        }
        size_t len = log.n - from;
        char *body = xmalloc(len + 1);
        memcpy(body, log.p + from, len);
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        char cur[24];
        snprintf(cur, sizeof(cur), "%lld", lines);
        MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
        MHD_add_response_header(resp, "EXECD-COMMANDS-TAIL-CURSOR", cur);
        return resp_send(r, 200, resp);
}

/* GET /command/{cid}/logs?cursor=N: the output after its first N lines;
 * EXECD-COMMANDS-TAIL-CURSOR gives the number of complete lines so far. */
static enum MHD_Result cmd_logs(ab_req *r, const char *id, const char *cid)
{
        enum MHD_Result ret;
        if (execd_box_check(r, id, &ret) < 0)
                return ret;
        const char *cs = req_query(r, "cursor");
        long long cursor = cs ? strtoll(cs, NULL, 10) : 0;
        if (cursor < 0)
                cursor = 0;
        pthread_mutex_lock(&cmds_lock);
        bool streamed = cmd_find(id, cid) != NULL;
        pthread_mutex_unlock(&cmds_lock);
        if (!streamed)
                return bg_logs(r, id, cid, cursor);
        /* a foreground command or a session's run: its output went to its stream */
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
        MHD_add_response_header(resp, "EXECD-COMMANDS-TAIL-CURSOR", "0");
        return resp_send(r, 200, resp);
}

/* DELETE /command?id=CID: kills the command's process tree. */
static enum MHD_Result cmd_interrupt(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (execd_box_check(r, id, &ret) < 0)
                return ret;
        const char *cid = req_query(r, "id");
        if (!cid)
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "id: required");
        pthread_mutex_lock(&cmds_lock);
        cmd *c = cmd_find(id, cid);
        if (c && c->running) {
                c->interrupted = true; /* a session's run: its thread types ^C */
                if (c->cancel_fd >= 0)
                        shutdown(c->cancel_fd, SHUT_RD); /* the exec sees a hang-up */
        }
        pthread_mutex_unlock(&cmds_lock);
        if (c)
                return execd_ok(r);
        /* a background command: SIGKILL ends its session in the box */
        abc_term_info t;
        ab_err *e = NULL;
        if (bg_find(r->srv, r->scope, id, cid, &t, NULL, &e) < 0)
                return bg_err(r, id, cid, e);
        int rc =
            t.running ? ab_manager_term_signal(r->srv->mgr, id, r->scope, t.id, SIGKILL, &e) : 0;
        abc_term_info_clear(&t);
        if (rc < 0)
                return bg_err(r, id, cid, e);
        return execd_ok(r);
}

/* ---- sessions ----------------------------------------------------------- */

/* A session is a bash that lives on a terminal of the box (init's keeper
 * holds it: it outlives every request, a pause and a restart of the
 * server), so everything a shell keeps lasts from one run to the next:
 * variables, functions, options, the working directory, background jobs.
 * The terminal's tag names it ({"front":"osb","session":ID,"cwd":...}), so
 * a server finds it again after a restart; only whether a run is in
 * progress is this server's. A run writes the user's command to a file in
 * the box and types one line of ours into the shell: print a start mark,
 * source the file, print an end mark with $?. The user's command never
 * becomes part of that line. The output between the marks is the run's
 * (stdout and stderr together: one terminal). Each run is a user's command
 * for the exec door (ab_manager_cmd_record: quota, audit, event). */
#define SESSION_DIR       "/tmp/.agentbox-sessions"
#define SESSION_TIMEOUT_S 600  /* a run given no timeout */
#define SESSION_GRACE_MS  5000 /* after ^C, before the shell is given up */

/* Sessions with a run in progress. */
static kit_claims busy_runs = KIT_CLAIMS_INIT;

static bool session_claim(const char *box, const char *sid)
{
        return kit_claim(&busy_runs, box, sid);
}

static void session_release(const char *box, const char *sid)
{
        kit_release(&busy_runs, box, sid);
}

/* The terminal of session sid in box (*t), and the directory it started
 * in (*cwd, NULL for none; free it). AB_E_NOT_FOUND when there is none. */
static int session_lookup(ab_server *srv, const char *scope, const char *box, const char *sid,
                          abc_term_info *t, char **cwd, ab_err **err)
{
        abc_term_info *v;
        size_t n;
        *t = (abc_term_info){0};
        if (cwd)
                *cwd = NULL;
        if (ab_manager_term_list(srv->mgr, box, scope, &v, &n, err) < 0)
                return -1;
        int rc = -1;
        for (size_t i = 0; i < n && rc < 0; i++) {
                json_t *j = v[i].tag ? json_loads(v[i].tag, 0, NULL) : NULL;
                const char *front = json_string_value(json_object_get(j, "front"));
                const char *s = json_string_value(json_object_get(j, "session"));
                if (front && !strcmp(front, "osb") && s && !strcmp(s, sid)) {
                        const char *c = json_string_value(json_object_get(j, "cwd"));
                        if (cwd && c)
                                *cwd = xstrdup(c);
                        *t = v[i];
                        v[i] = (abc_term_info){0};
                        rc = 0;
                }
                json_decref(j);
        }
        abc_term_infos_free(v, n);
        if (rc < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no session %s in sandbox %s", sid, box);
        return 0;
}

static int session_shell(ab_server *s, const char *scope, const char *box, const char *sid,
                         const char *cwd, char **tid, ab_err **err);

static enum MHD_Result session_create(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (execd_box_check(r, id, &ret) < 0)
                return ret;
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return execd_err(r, e);
        const char *cwd = json_string_value(json_object_get(body, "cwd"));
        _cleanup_free_ char *dir = cwd && *cwd ? xstrdup(cwd) : NULL;
        json_decref(body);
        if (dir && strlen(dir) > 4096)
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "cwd: at most 4096 bytes");
        char sid[32];
        ab_random_hex(sid, sizeof(sid), "session-", 8);
        _cleanup_free_ char *tid = NULL;
        if (session_shell(r->srv, r->scope, id, sid, dir, &tid, &e) < 0) {
                if (e->code == AB_E_CONFLICT) {
                        ret = osb_error(r, 429, "TOO_MANY_SESSIONS", "%s", e->msg);
                        ab_err_free(&e);
                        return ret;
                }
                return execd_err(r, e);
        }
        return resp_json(r, 200, json_pack("{s:s}", "session_id", sid));
}

/* Starts the session's shell (kit_shell_open), tagged with the session. */
static int session_shell(ab_server *s, const char *scope, const char *box, const char *sid,
                         const char *cwd, char **tid, ab_err **err)
{
        json_t *tj = json_pack("{s:s,s:s}", "front", "osb", "session", sid);
        if (cwd)
                json_object_set_new(tj, "cwd", json_string(cwd));
        _cleanup_free_ char *tag = json_dumps(tj, JSON_COMPACT);
        json_decref(tj);
        return kit_shell_open(s->mgr, box, scope, tag, cwd, tid, err);
}

typedef struct srun {
        ab_server *srv;
        cmd *c;
        char *scope, *box, *sid, *tid;
        char *cwd0; /* the directory the session's shell starts in, or NULL */
        int fd;     /* the event stream */
        uint32_t timeout_ms;
        char nonce[17];
        bool broken;
        int64_t last_ms;
        osb_lines out; /* stdout and stderr together: one terminal */
} srun;

/* Sends the frames of f (emptied). */
static int srun_send_frames(srun *s, ab_buf *f)
{
        if (f->n && !s->broken && ab_send_all(s->fd, f->p, f->n, -1) < 0)
                s->broken = true;
        ab_buf_drop(f, f->n);
        s->last_ms = (int64_t)ab_now_ms();
        return s->broken ? -1 : 0;
}

static int srun_event(srun *s, json_t *ev)
{
        _cleanup_buf_ ab_buf f = {0};
        osb_sse_frame(&f, ev);
        return srun_send_frames(s, &f);
}

static void srun_output(srun *s, const char *p, size_t n)
{
        osb_lines_feed(&s->out, p, n);
        srun_send_frames(s, &s->out.frames);
}

/* How many of the last bytes of buf (len n) begin mark: held back, they may
 * be the start of a mark the next chunk ends. */
static size_t mark_prefix(const char *buf, size_t n, const char *mark)
{
        size_t ml = strlen(mark);
        for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
                if (!memcmp(buf + n - k, mark, k))
                        return k;
        return 0;
}

/* Scans the terminal's output for the run's marks: *started once the start
 * mark went by; emits what lies between; 1 with *code at the end mark. */
static int srun_scan(srun *s, ab_buf *b, bool *started, int *code)
{
        char start[24], end[24];
        snprintf(start, sizeof(start), "\036S%s\036", s->nonce);
        snprintf(end, sizeof(end), "\036E%s:", s->nonce);
        if (!*started) {
                const char *m = b->n ? memmem(b->p, b->n, start, strlen(start)) : NULL;
                if (!m) {
                        size_t keep = mark_prefix(b->p, b->n, start);
                        ab_buf_drop(b, b->n - keep);
                        return 0;
                }
                ab_buf_drop(b, (size_t)(m - b->p) + strlen(start));
                *started = true;
        }
        const char *m = b->n ? memmem(b->p, b->n, end, strlen(end)) : NULL;
        if (!m) {
                size_t keep = mark_prefix(b->p, b->n, end);
                srun_output(s, b->p, b->n - keep);
                ab_buf_drop(b, b->n - keep);
                return 0;
        }
        size_t before = (size_t)(m - b->p);
        const char *tail = m + strlen(end);
        const char *close = memchr(tail, '\036', b->n - (size_t)(tail - b->p));
        srun_output(s, b->p, before);
        ab_buf_drop(b, before);
        if (!close)
                return 0; /* the code is still to come */
        *code = atoi(b->p + strlen(end));
        return 1;
}

/* Marks the session's run over; when its shell was given up, the session
 * gets a new one (its state is lost, the session goes on). */
static void session_done(srun *s, bool dead, bool closed)
{
        if (closed) {
                _cleanup_free_ char *tid = NULL;
                ab_err *e = NULL;
                if (session_shell(s->srv, s->scope, s->box, s->sid, s->cwd0, &tid, &e) < 0)
                        ab_log(AB_LOG_WARN, "opensandbox: a session's new shell", "box", s->box,
                               "error", e->msg, NULL);
                ab_err_free(&e);
        }
        (void)dead;
        session_release(s->box, s->sid);
}

/* A session run being pumped: the run's side of kit_term_pump. */
typedef struct srun_pumping {
        srun *s;
        ab_term_attach *a;
        ab_buf b; /* the output since the start mark */
        bool started, sent_int, timed_out, dead, closed;
        int code;
        const char *error;
        uint64_t deadline, give_up;
} srun_pumping;

static int srun_out(void *ud, int stream, const void *data, size_t len)
{
        srun_pumping *p = ud;
        ab_buf_add(&p->b, data, len);
        return srun_scan(p->s, &p->b, &p->started, &p->code) == 1; /* its end mark: done */
}

/* Between waits: the server stopping leaves the run to its shell; a client
 * gone, an interrupt or the timeout sends ^C; a run that ignores it loses
 * its shell; a quiet run gets pings. */
static int srun_idle(void *ud, int polled, short revents)
{
        srun_pumping *p = ud;
        srun *s = p->s;
        if (polled > 0 && (revents & (POLLRDHUP | POLLHUP | POLLERR)))
                s->broken = true;
        if (atomic_load(&stopping)) {
                /* ^C, as when the client goes away, but no wait for the
                 * run's end: the shell stays, as a terminal does */
                if (!p->sent_int)
                        abc_term_input(p->a->stream, "\003", 1);
                p->error = "the server stopped";
                return 1;
        }
        pthread_mutex_lock(&cmds_lock);
        bool interrupted = s->c->interrupted;
        pthread_mutex_unlock(&cmds_lock);
        uint64_t now = ab_now_ms();
        if (!p->sent_int && (interrupted || s->broken || now >= p->deadline)) {
                p->timed_out = !interrupted && !s->broken;
                /* ^C, as a user would type it: the line discipline
                 * signals the foreground group (the shell lives on) */
                abc_term_input(p->a->stream, "\003", 1);
                p->sent_int = true;
                p->give_up = now + SESSION_GRACE_MS;
        }
        if (p->sent_int && now >= p->give_up) { /* the run ignores ^C: the shell goes */
                ab_manager_term_close(s->srv->mgr, s->box, s->scope, s->tid, NULL);
                p->closed = true;
                p->error = "the run did not stop on ^C: the session's shell was closed";
                p->dead = true;
                return 1;
        }
        if ((int64_t)now - s->last_ms >= PING_MS)
                srun_event(s, json_pack("{s:s}", "type", "ping"));
        return 0;
}

static void *srun_main(void *arg)
{
        srun *s = arg;
        ab_manager *m = s->srv->mgr;
        ab_term_attach a;
        ab_err *e = NULL;
        int code = -1;
        bool done = false, dead = false, timed_out = false, closed = false;
        const char *error = NULL;
        uint64_t t0 = ab_now_ms(), deadline = t0 + s->timeout_ms;
        if (ab_manager_term_attach(m, s->box, s->scope, s->tid, &a, &e) < 0) {
                error = e->msg;
                dead = true;
        } else {
                _cleanup_free_ char *line =
                    xasprintf("__ab_nonce=%s; printf '\\036S%%s\\036' \"$__ab_nonce\"; "
                              ". '" SESSION_DIR "/%s.cmd'\n",
                              s->nonce, s->sid);
                if (abc_term_input(a.stream, line, strlen(line)) < 0) {
                        error = "the session's shell takes no input";
                        done = dead = true;
                }
        }
        srun_pumping sp = {.s = s, .a = &a, .code = -1, .deadline = deadline};
        if (!error && !done) {
                const kit_term_pump pump = {.output = srun_out,
                                            .idle = srun_idle,
                                            .extra_fd = s->fd,
                                            .extra_events = POLLRDHUP,
                                            .tick_ms = 200};
                int exit_code = -1;
                switch (kit_term_pump_run(&a, &pump, &sp, &exit_code)) {
                case KIT_TERM_EXITED: /* exit in the command: the shell is gone */
                case KIT_TERM_TIMED_OUT:
                case KIT_TERM_CLOSED:
                        if (sp.started)
                                srun_output(s, sp.b.p, sp.b.n);
                        sp.code = exit_code;
                        dead = true;
                        break;
                case KIT_TERM_STOPPED: /* its end mark, given up or the server stops (sp.error) */
                        dead = sp.dead;
                        break;
                default:
                        sp.error = "the session's shell went away";
                        dead = true;
                        break;
                }
                error = sp.error;
                code = sp.code;
                timed_out = sp.timed_out;
                closed = sp.closed;
        }
        ab_buf_free(&sp.b);
        osb_lines_flush(&s->out);
        srun_send_frames(s, &s->out.frames);
        osb_lines_free(&s->out);
        if (a.stream || a.fd >= 0)
                ab_manager_term_detach(m, &a);
        pthread_mutex_lock(&cmds_lock);
        bool interrupted = s->c->interrupted;
        s->c->running = false;
        s->c->finished_ms = osb_wall_ms();
        s->c->exit_code = error ? -1 : code;
        if (error || timed_out || interrupted)
                s->c->error = xstrdup(error ? error : interrupted ? "interrupted" : "timed out");
        s->c->cancel_fd = -1;
        pthread_mutex_unlock(&cmds_lock);
        session_done(s, dead, closed);
        if (error || code != 0) {
                const char *ename = error         ? "RuntimeError"
                                    : timed_out   ? "TimeoutError"
                                    : interrupted ? "Interrupted"
                                                  : "CommandExecError";
                char ev[16];
                snprintf(ev, sizeof(ev), "%d", error ? -1 : code);
                json_t *tb = json_array();
                if (error)
                        json_array_append_new(tb, json_string(error));
                srun_event(s, json_pack("{s:s,s:{s:s,s:s,s:o}}", "type", "error", "error", "ename",
                                        ename, "evalue", ev, "traceback", tb));
        } else { /* no completion after an error, as execd */
                srun_event(s, json_pack("{s:s,s:I}", "type", "execution_complete", "execution_time",
                                        (json_int_t)(ab_now_ms() - t0)));
        }
        ab_err_free(&e);
        close(s->fd);
        free(s->scope);
        free(s->box);
        free(s->sid);
        free(s->tid);
        free(s->cwd0);
        free(s);
        execd_thread_done();
        return NULL;
}

/* Writes the run's command file in the box: the command, after a cd to
 * its working directory when it has one (read by the shell from a file of
 * its own: no user text is quoted into shell text). */
static int session_files(ab_server *srv, const char *scope, const char *box, const char *sid,
                         const char *tid, const char *command, const char *cwd, ab_err **err)
{
        ab_use u;
        if (ab_manager_use_begin(srv->mgr, box, scope, &u, err) < 0)
                return -1;
        /* a user's command: the exec door admits and records it */
        if (ab_manager_cmd_record(srv->mgr, &u, command, tid, err) < 0) {
                ab_manager_use_end(srv->mgr, &u);
                return -1;
        }
        _cleanup_free_ char *cmdf = xasprintf(SESSION_DIR "/%s.cmd", sid);
        _cleanup_free_ char *cwdf = xasprintf(SESSION_DIR "/%s.cwd", sid);
        _cleanup_free_ char *text =
            cwd ? xasprintf("cd -- \"$(cat '%s')\" || return 1\n%s\n", cwdf, command)
                : xasprintf("%s\n", command);
        int rc = 0;
        for (int i = 0; rc == 0 && i < (cwd ? 2 : 1); i++) {
                rc = ab_manager_file_write(srv->mgr, &u, i ? cwdf : cmdf, i ? cwd : text,
                                           strlen(i ? cwd : text), -1, ABC_W_MKPARENTS, 0600, err);
        }
        ab_manager_use_end(srv->mgr, &u);
        return rc;
}

/* POST /session/{sid}/run {command, cwd?, timeout?}: streamed like a
 * foreground command. */
static enum MHD_Result session_run(ab_req *r, const char *id, const char *sid)
{
        enum MHD_Result ret;
        if (execd_box_check(r, id, &ret) < 0) /* the box is the caller's before its sessions */
                return ret;
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return execd_err(r, e);
        const char *command = json_string_value(json_object_get(body, "command"));
        const char *cwd = json_string_value(json_object_get(body, "cwd"));
        json_t *to = json_object_get(body, "timeout");
        double ms = json_is_number(to) ? json_number_value(to) : SESSION_TIMEOUT_S * 1000.0;
        if (!command || !*command || ms < 1 || ms > AB_MAX_TIMEOUT_S * 1000.0) {
                json_decref(body);
                return osb_error(r, 400, "INVALID_REQUEST_BODY",
                                 "command: required; timeout: 1..%u milliseconds",
                                 AB_MAX_TIMEOUT_S * 1000);
        }
        if (!session_claim(id, sid)) {
                json_decref(body);
                return osb_error(r, 409, "SESSION_BUSY", "session %s runs a command already", sid);
        }
        abc_term_info ti;
        char *first_cwd = NULL;
        if (session_lookup(r->srv, r->scope, id, sid, &ti, &first_cwd, &e) < 0) {
                session_release(id, sid);
                json_decref(body);
                if (e->code != AB_E_NOT_FOUND)
                        return execd_err(r, e);
                ab_err_free(&e);
                return osb_error(r, 404, "SESSION_NOT_FOUND", "no session %s in sandbox %s", sid,
                                 id);
        }
        char *tid = steal_pointer(&ti.id);
        if (!ti.running) { /* its shell exited (an `exit` in a run): forget it */
                ab_manager_term_close(r->srv->mgr, id, r->scope, tid, NULL);
                free(tid);
                tid = NULL;
        }
        abc_term_info_clear(&ti);
        srun *s = xzalloc(sizeof(*s));
        s->srv = r->srv;
        s->scope = r->scope ? xstrdup(r->scope) : NULL;
        s->box = xstrdup(id);
        s->sid = xstrdup(sid);
        s->timeout_ms = (uint32_t)ms;
        s->fd = -1;
        s->last_ms = (int64_t)ab_now_ms();
        s->out = (osb_lines){.session = true, .type = "stdout"};
        ab_random_hex(s->nonce, sizeof(s->nonce), "", 8);
        int rc = 0;
        if (!tid) /* a new shell: the last one is gone */
                rc = session_shell(r->srv, r->scope, id, sid, first_cwd, &tid, &e);
        s->cwd0 = steal_pointer(&first_cwd);
        if (rc == 0)
                rc = session_files(r->srv, r->scope, id, sid, tid, command,
                                   cwd && *cwd ? cwd : NULL, &e);
        _cleanup_free_ char *content = xstrdup(command); /* for status; body goes now */
        json_decref(body);
        s->tid = tid;
        ab_stream_slot *slot = NULL;
        int sv[2] = {-1, -1};
        if (rc == 0 && !(slot = req_stream_slot(r, &ret))) {
                session_release(id, sid);
                free(s->scope), free(s->box), free(s->sid), free(s->tid), free(s->cwd0), free(s);
                return ret;
        }
        if (rc == 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                rc = ab_err_set(&e, AB_E_INTERNAL, errno, "socketpair");
        cmd *c = NULL;
        if (rc == 0) {
                c = xzalloc(sizeof(*c));
                strcpy(c->id, "cmd-");
                memcpy(c->id + 4, s->nonce, 16);
                c->box = xstrdup(id);
                c->content = steal_pointer(&content);
                c->running = true;
                c->started_ms = osb_wall_ms();
                c->cancel_fd = -1;
                s->c = c;
                s->fd = sv[0];
                char *init =
                    xasprintf("data: {\"type\":\"init\",\"text\":\"%s\",\"timestamp\":%lld}\n\n",
                              c->id, (long long)c->started_ms);
                ab_send_all(sv[0], init, strlen(init), -1);
                free(init);
                cmds_add(c);
                if (execd_spawn(srun_main, s) < 0) {
                        pthread_mutex_lock(&cmds_lock);
                        c->running = false;
                        c->exit_code = -1;
                        c->error = xstrdup("cannot start a thread");
                        pthread_mutex_unlock(&cmds_lock);
                        close(sv[0]);
                        close(sv[1]);
                        rc = ab_err_set(&e, AB_E_UNAVAILABLE, 0, "cannot start a thread");
                } else {
                        return resp_stream_counted(r, 200, "text/event-stream", sv[1], sse_headers,
                                                   slot);
                }
        }
        if (slot)
                ab_stream_slot_release(slot);
        session_release(id, sid);
        free(s->scope), free(s->box), free(s->sid), free(s->tid), free(s->cwd0), free(s);
        return execd_err(r, e);
}

static enum MHD_Result session_delete(ab_req *r, const char *id, const char *sid)
{
        enum MHD_Result ret;
        if (execd_box_check(r, id, &ret) < 0)
                return ret;
        abc_term_info ti;
        ab_err *e = NULL;
        if (session_lookup(r->srv, r->scope, id, sid, &ti, NULL, &e) < 0) {
                if (e->code != AB_E_NOT_FOUND)
                        return execd_err(r, e);
                ab_err_free(&e);
                return osb_error(r, 404, "SESSION_NOT_FOUND", "no session %s in sandbox %s", sid,
                                 id);
        }
        /* its shell and whatever runs on it; a run in progress ends with it */
        int rc = ab_manager_term_close(r->srv->mgr, id, r->scope, ti.id, &e);
        abc_term_info_clear(&ti);
        if (rc < 0 && e->code != AB_E_NOT_FOUND)
                return execd_err(r, e);
        ab_err_free(&e);
        return execd_ok(r);
}

/* ---- metrics ------------------------------------------------------------ */

/* The box's use over `window_ms` (CPU) and now (memory); NULL with *err
 * when the box is not the caller's. A box not running uses nothing. */
static json_t *metrics_json(ab_server *s, const char *scope, const char *id, int window_ms,
                            ab_err **err)
{
        ab_box_rec rec;
        if (ab_manager_get(s->mgr, id, scope, &rec, err) < 0)
                return NULL;
        double cpus = rec.has_limits ? rec.limits.cpus : s->cfg->limits.cpus;
        ab_box_stats a = {0}, b = {0};
        bool live = ab_manager_stats(s->mgr, &rec, &a, NULL) == 0;
        uint64_t t0 = ab_now_ns();
        if (live) {
                struct timespec ts = {window_ms / 1000, (window_ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
                live = ab_manager_stats(s->mgr, &rec, &b, NULL) == 0;
        }
        double dt = (double)(ab_now_ns() - t0);
        ab_box_rec_clear(&rec);
        double pct = live && dt > 0 && cpus > 0 && b.cpu_usage_ns >= a.cpu_usage_ns
                         ? (double)(b.cpu_usage_ns - a.cpu_usage_ns) / dt / cpus * 100.0
                         : 0;
        return json_pack("{s:f,s:f,s:f,s:f,s:I}", "cpu_count", cpus, "cpu_used_pct", pct,
                         "mem_total_mib", (double)b.memory_limit / 1048576.0, "mem_used_mib",
                         (double)b.memory_bytes / 1048576.0, "timestamp",
                         (json_int_t)osb_wall_ms());
}

static enum MHD_Result metrics(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *j = metrics_json(r->srv, r->scope, id, 100, &e);
        return j ? resp_json(r, 200, j) : osb_err(r, e, "");
}

typedef struct watch_job {
        ab_server *srv;
        char *scope, *box;
        int fd;
} watch_job;

static void *watch_main(void *arg)
{
        watch_job *w = arg;
        while (!atomic_load(&stopping)) { /* a sample a second until the client or box goes */
                ab_err *e = NULL;
                json_t *j = metrics_json(w->srv, w->scope, w->box, 1000, &e);
                if (!j) {
                        ab_err_free(&e);
                        break;
                }
                char *txt = json_dumps(j, JSON_COMPACT);
                json_decref(j);
                char *frame = xasprintf("data: %s\n\n", txt ? txt : "{}");
                free(txt);
                int rc = ab_send_all(w->fd, frame, strlen(frame), -1);
                free(frame);
                if (rc < 0)
                        break;
        }
        close(w->fd);
        free(w->scope);
        free(w->box);
        free(w);
        execd_thread_done();
        return NULL;
}

/* GET /metrics/watch: a sample every second as server-sent events. */
static enum MHD_Result metrics_watch(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (execd_box_check(r, id, &ret) < 0)
                return ret;
        ab_stream_slot *slot = req_stream_slot(r, &ret);
        if (!slot)
                return ret;
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
                ab_stream_slot_release(slot);
                return osb_error(r, 500, "RUNTIME_ERROR", "socketpair: %s", strerror(errno));
        }
        watch_job *w = xzalloc(sizeof(*w));
        w->srv = r->srv;
        w->scope = r->scope ? xstrdup(r->scope) : NULL;
        w->box = xstrdup(id);
        w->fd = sv[0];
        if (execd_spawn(watch_main, w) < 0) {
                close(sv[0]);
                close(sv[1]);
                free(w->scope);
                free(w->box);
                free(w);
                ab_stream_slot_release(slot);
                return osb_error(r, 503, "RUNTIME_ERROR", "cannot start a thread");
        }
        return resp_stream_counted(r, 200, "text/event-stream", sv[1], sse_headers, slot);
}

/* The isolated sessions of newer execd builds (/v1/isolated/...): not
 * offered; the capabilities call says so in its own shape. */
static enum MHD_Result isolated(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (execd_box_check(r, id, &ret) < 0)
                return ret;
        if (!strcmp(r->method, "GET") && !strcmp(r->seg[r->n_seg - 1], "capabilities"))
                return resp_json(
                    r, 200,
                    json_pack("{s:b,s:s,s:b,s:b,s:b,s:b}", "available", 0, "message",
                              "agentbox: every box is isolated already; use commands and sessions",
                              "setpriv_available", 0, "userns_available", 0, "commit_supported", 0,
                              "diff_supported", 0));
        return osb_error(r, 503, "NOT_SUPPORTED", "isolated sessions are not offered by agentbox");
}

/* ---- routing ------------------------------------------------------------ */

enum MHD_Result execd_route(ab_req *r, const char *id, size_t first)
{
        const char *m = r->method;
        size_t n = r->n_seg - first;
        const char *a = r->seg[first], *b = n > 1 ? r->seg[first + 1] : "";
        bool get = !strcmp(m, "GET"), post = !strcmp(m, "POST"), del = !strcmp(m, "DELETE");
        if (n == 1 && get && !strcmp(a, "ping")) {
                enum MHD_Result ret;
                if (execd_box_check(r, id, &ret) < 0)
                        return ret;
                return execd_ok(r);
        }
        if (!strcmp(a, "command")) {
                if (n == 1 && post)
                        return cmd_run(r, id);
                if (n == 1 && del)
                        return cmd_interrupt(r, id);
                if (n == 3 && get && !strcmp(b, "status"))
                        return cmd_status(r, id, r->seg[first + 2]);
                if (n == 3 && get && !strcmp(r->seg[first + 2], "logs"))
                        return cmd_logs(r, id, b);
        }
        if (!strcmp(a, "session")) {
                if (n == 1 && post)
                        return session_create(r, id);
                if (n == 3 && post && !strcmp(r->seg[first + 2], "run"))
                        return session_run(r, id, b);
                if (n == 2 && del)
                        return session_delete(r, id, b);
        }
        if (!strcmp(a, "files")) {
                if (n == 1 && del)
                        return execd_remove_paths(r, id, false);
                if (n == 2 && get && !strcmp(b, "info"))
                        return execd_files_info(r, id);
                if (n == 2 && get && !strcmp(b, "search"))
                        return execd_dir_list(r, id, true);
                if (n == 2 && get && !strcmp(b, "download"))
                        return execd_files_download(r, id);
                if (n == 2 && post && !strcmp(b, "permissions"))
                        return execd_paths_perm(r, id, false);
                if (n == 2 && post && !strcmp(b, "mv"))
                        return execd_files_mv(r, id);
                if (n == 2 && post && !strcmp(b, "replace"))
                        return execd_files_replace(r, id);
        }
        if (!strcmp(a, "directories")) {
                if (n == 1 && post)
                        return execd_paths_perm(r, id, true);
                if (n == 1 && del)
                        return execd_remove_paths(r, id, true);
                if (n == 2 && get && !strcmp(b, "list"))
                        return execd_dir_list(r, id, false);
        }
        if (n == 1 && get && !strcmp(a, "metrics"))
                return metrics(r, id);
        if (n == 2 && get && !strcmp(a, "metrics") && !strcmp(b, "watch"))
                return metrics_watch(r, id);
        if (n >= 2 && !strcmp(a, "v1") && !strcmp(b, "isolated"))
                return isolated(r, id);
        return osb_error(r, 404, "NOT_FOUND", "no execd route %s /%s", m, r->path);
}

void execd_shutdown(void)
{
        atomic_store(&stopping, true);
        for (int i = 0; i < 1000 && atomic_load(&n_threads) > 0; i++) { /* 10 s */
                /* foreground commands end as when their client goes away */
                pthread_mutex_lock(&cmds_lock);
                for (cmd *c = cmds; c; c = c->next)
                        if (c->running && c->cancel_fd >= 0)
                                shutdown(c->cancel_fd, SHUT_RD);
                pthread_mutex_unlock(&cmds_lock);
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
        }
        if (atomic_load(&n_threads) > 0)
                ab_log(AB_LOG_WARN, "opensandbox: threads still running at shutdown", NULL);
}
