/* OpenSandbox's execd API (specs/execd-api.yaml, as its JS SDK calls it)
 * under /opensandbox/execd/{id}: commands (streamed as server-sent events,
 * background commands with status, logs and interrupt), bash sessions,
 * files, directories, metrics. Commands go through the manager's exec (the
 * one door: env, limits, audit, events); files through the box's init, as
 * every agentbox file operation does. */
#include "api/front_osb.h"
#include "base/log.h"

#include <ctype.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <openssl/rand.h>
#include <sys/mman.h>
#include <sys/socket.h>

#define BG_RUNNING_MAX  256         /* background commands running at once, server-wide */
#define CMDS_KEPT       256         /* finished commands remembered for status/logs */
#define CMD_LOG_MAX     (8u << 20)  /* bytes of a background command's output kept */
#define STAT_OUTPUT_CAP (64u << 20) /* stat's answer for a listing */
#define STAT_CHUNK      512         /* paths per stat exec */
#define LIST_MAX_DEPTH  32
#define REPLACE_MAX     (64u << 20) /* files larger than this are not edited in memory */
#define EXEC_PREFIX     ""
#define PING_MS         15000 /* a silent foreground stream gets a ping this often */

/* ---- helpers ------------------------------------------------------------ */

static int send_all(int fd, const void *buf, size_t len)
{
        const char *p = buf;
        while (len) {
                ssize_t k = send(fd, p, len, MSG_NOSIGNAL);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return -1;
                p += k;
                len -= (size_t)k;
        }
        return 0;
}

/* Errors of an operation on a box's files or commands in execd's codes: a
 * missing path is FILE_NOT_FOUND, a bad request INVALID_REQUEST_BODY, a
 * full disk 507 (as agentbox's own file routes answer it). Frees e. */
static enum MHD_Result execd_err(ab_req *r, ab_err *e)
{
        enum MHD_Result ret;
        if (e->code == AB_E_NOT_FOUND)
                ret = osb_error(r, 404, "FILE_NOT_FOUND", "%s", e->msg);
        else if (e->code == AB_E_INVALID)
                ret = osb_error(r, 400, "INVALID_REQUEST_BODY", "%s", e->msg);
        else if (e->code == AB_E_LIMIT)
                ret = osb_error(r, 507, "DISK_FULL", "%s", e->msg);
        else
                return osb_err(r, e, EXEC_PREFIX);
        ab_err_free(&e);
        return ret;
}

static int begin_use(ab_req *r, const char *id, ab_use *u, enum MHD_Result *ret)
{
        ab_err *e = NULL;
        if (ab_manager_use_begin(r->srv->mgr, id, r->scope, u, &e) < 0) {
                *ret = osb_err(r, e, EXEC_PREFIX);
                return -1;
        }
        return 0;
}

/* Octal permission bits written as decimal digits (755) -> 0755. */
static int mode_of(json_t *v, uint32_t *out)
{
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_integer(v))
                return -1;
        json_int_t d = json_integer_value(v);
        if (d < 0 || d > 7777)
                return -1;
        uint32_t m = 0, mul = 1;
        for (json_int_t x = d; x; x /= 10, mul *= 8) {
                if (x % 10 > 7)
                        return -1;
                m += (uint32_t)(x % 10) * mul;
        }
        *out = m;
        return 0;
}

typedef struct collect_buf {
        ab_buf out, err;
} collect_buf;

static int collect_out(void *ud, int stream, const void *buf, size_t len)
{
        collect_buf *c = ud;
        ab_buf_add(stream == 2 ? &c->err : &c->out, buf, len);
        return 0;
}

/* Runs argv in the box being used; *exit_code gets its status. Output in c. */
static int run_argv(ab_server *s, ab_use *u, const char *const *argv, uint64_t cap, collect_buf *c,
                    int *exit_code, ab_err **err)
{
        static const char *const c_locale[] = {"LC_ALL=C", NULL}; /* stat's %F, tools' messages */
        abc_exec_req q = {
            .argv = argv, .env = c_locale, .stdin_fd = -1, .output_cap = cap, .timeout_ms = 60000};
        abc_exec_res res;
        if (ab_manager_exec(s->mgr, u, &q, collect_out, c, &res, err) < 0)
                return -1;
        *exit_code = res.exit_code;
        return 0;
}

static const char *ftype_name(const char *stat_type)
{
        if (!strncmp(stat_type, "regular", 7))
                return "file";
        if (!strcmp(stat_type, "directory"))
                return "directory";
        if (!strcmp(stat_type, "symbolic link"))
                return "symlink";
        return "other";
}

/* Paths stat did not describe (a box whose stat is not GNU's, or a race)
 * from the init's lstat: no owner or group then. */
static int stat_fallback(ab_server *s, ab_use *u, const char *const *paths, size_t n, json_t *out,
                         ab_err **err)
{
        for (size_t i = 0; i < n; i++) {
                if (json_object_get(out, paths[i]))
                        continue;
                abc_stat st = {0};
                ab_err *e = NULL;
                int fd = ab_manager_use_connect(s->mgr, u, err);
                if (fd < 0)
                        return -1;
                int rc = abc_stat_path(fd, paths[i], &st, &e);
                close(fd);
                free(st.link);
                if (rc < 0) { /* missing: left out */
                        ab_err_free(&e);
                        continue;
                }
                static const char *const types[] = {"other", "file", "directory", "symlink",
                                                    "other"};
                char mt[32], ms[8];
                osb_time(st.mtime * 1000, mt);
                snprintf(ms, sizeof(ms), "%o", st.mode & 07777);
                json_object_set_new(out, paths[i],
                                    json_pack("{s:o,s:s,s:I,s:s,s:s,s:s,s:s,s:I}", "path",
                                              json_bytes(paths[i], strlen(paths[i])), "type",
                                              types[st.type <= ABC_OTHER ? st.type : 0], "size",
                                              (json_int_t)st.size, "modified_at", mt, "created_at",
                                              mt, "owner", "", "group", "", "mode",
                                              (json_int_t)strtol(ms, NULL, 10)));
        }
        return 0;
}

/* FileInfo of each path (as given: relative ones are under /workspace),
 * from one stat in the box per chunk of paths; *out maps path -> FileInfo.
 * Paths that do not exist are absent from it. */
static int stat_paths(ab_server *s, ab_use *u, const char *const *paths, size_t n, json_t **out,
                      ab_err **err)
{
        *out = json_object();
        for (size_t at = 0; at < n; at += STAT_CHUNK) {
                size_t k = n - at < STAT_CHUNK ? n - at : STAT_CHUNK;
                const char **argv = xcalloc(k + 5, sizeof(char *));
                argv[0] = "stat";
                argv[1] = "--printf=%F\\037%s\\037%a\\037%U\\037%G\\037%Y\\037%W\\037%n\\036";
                argv[2] = "--";
                for (size_t i = 0; i < k; i++)
                        argv[3 + i] = paths[at + i];
                collect_buf c = {0};
                int code;
                int rc = run_argv(s, u, argv, STAT_OUTPUT_CAP, &c, &code, err);
                free(argv);
                if (rc < 0) {
                        ab_buf_free(&c.out);
                        ab_buf_free(&c.err);
                        json_decref(*out);
                        *out = NULL;
                        return -1;
                }
                ab_buf_putc(&c.out, 0);
                char *save = NULL;
                for (char *rec = strtok_r(c.out.p, "\036", &save); rec;
                     rec = strtok_r(NULL, "\036", &save)) {
                        char *f[8];
                        size_t nf = 0;
                        for (char *p = rec; nf < 8; nf++) {
                                f[nf] = p;
                                char *sep = nf < 7 ? strchr(p, '\037') : NULL;
                                if (nf < 7 && !sep)
                                        break;
                                if (sep) {
                                        *sep = 0;
                                        p = sep + 1;
                                }
                        }
                        if (nf != 8)
                                continue;
                        int64_t mtime = strtoll(f[5], NULL, 10), btime = strtoll(f[6], NULL, 10);
                        char mt[32], bt[32];
                        osb_time(mtime * 1000, mt);
                        osb_time((btime > 0 ? btime : mtime) * 1000, bt);
                        json_object_set_new(
                            *out, f[7],
                            json_pack("{s:o,s:s,s:I,s:s,s:s,s:o,s:o,s:I}", "path",
                                      json_bytes(f[7], strlen(f[7])), "type", ftype_name(f[0]),
                                      "size", (json_int_t)strtoll(f[1], NULL, 10), "modified_at",
                                      mt, "created_at", bt, "owner", json_bytes(f[3], strlen(f[3])),
                                      "group", json_bytes(f[4], strlen(f[4])), "mode",
                                      (json_int_t)strtol(f[2], NULL, 10)));
                }
                ab_buf_free(&c.out);
                ab_buf_free(&c.err);
        }
        return stat_fallback(s, u, paths, n, *out, err);
}

/* The query's paths (?path=a&path=b), at least one; answers 400 itself. */
static json_t *need_paths(ab_req *r, enum MHD_Result *ret)
{
        json_t *a = osb_query_all(r, "path");
        size_t i;
        json_t *p;
        json_array_foreach(a, i, p)
        {
                if (!*json_string_value(p) || json_string_length(p) > 4096) {
                        json_decref(a);
                        *ret = osb_error(r, 400, "INVALID_REQUEST_BODY",
                                         "path: must be 1..4096 bytes");
                        return NULL;
                }
        }
        if (!json_array_size(a)) {
                json_decref(a);
                *ret = osb_error(r, 400, "INVALID_REQUEST_BODY", "path: required");
                return NULL;
        }
        return a;
}

static const char **strs_of(json_t *a)
{
        const char **v = xcalloc(json_array_size(a) + 1, sizeof(char *));
        for (size_t i = 0; i < json_array_size(a); i++)
                v[i] = json_string_value(json_array_get(a, i));
        return v;
}

static enum MHD_Result ok_empty(ab_req *r)
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
        bool background, running, interrupted, truncated;
        int exit_code;
        char *error;
        int64_t started_ms, finished_ms;
        ab_buf log;    /* a background command's stdout and stderr, as they came */
        int cancel_fd; /* shutdown(SHUT_RD) on it ends the exec; -1 once done */
} cmd;

static pthread_mutex_t cmds_lock = PTHREAD_MUTEX_INITIALIZER;
static cmd *cmds; /* newest first */
static size_t n_cmds;
static size_t n_bg_running;

static void cmd_free(cmd *c)
{
        free(c->box);
        free(c->content);
        free(c->error);
        ab_buf_free(&c->log);
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
        int fd;   /* fg: the event stream's end; bg: our end of a pair */
        int peer; /* bg: the pair's other end, kept open while the command runs */
        bool broken;
        char *key_id;
        ab_quota key_quotas;
        ab_caller caller;
        /* a foreground stream: events are sent under wlock by the exec's
         * output and by the pinger, which wakes on cv */
        pthread_mutex_t wlock;
        pthread_cond_t cv;
        bool done;
        int64_t last_ms; /* when the last event was sent */
} cmd_job;

static cmd_job *cmd_job_new(ab_server *srv)
{
        cmd_job *j = xzalloc(sizeof(*j));
        j->srv = srv;
        j->fd = j->peer = -1;
        pthread_mutex_init(&j->wlock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&j->cv, &ca);
        pthread_condattr_destroy(&ca);
        j->last_ms = (int64_t)ab_now_ms();
        return j;
}

static void cmd_job_free(cmd_job *j)
{
        pthread_mutex_destroy(&j->wlock);
        pthread_cond_destroy(&j->cv);
        free(j->command);
        free(j->cwd);
        free(j->user);
        ab_strvfreep(&j->argv);
        ab_strvfreep(&j->env);
        free(j->key_id);
        free(j);
}

/* Caller holds j->wlock. */
static int sse_send_locked(cmd_job *j, json_t *ev)
{
        json_object_set_new(ev, "timestamp", json_integer(osb_wall_ms()));
        char *txt = json_dumps(ev, JSON_COMPACT);
        json_decref(ev);
        if (!txt || j->broken) {
                free(txt);
                return -1;
        }
        char *frame = xasprintf("data: %s\n\n", txt);
        free(txt);
        int rc = send_all(j->fd, frame, strlen(frame));
        free(frame);
        if (rc < 0)
                j->broken = true;
        j->last_ms = (int64_t)ab_now_ms();
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
        return sse_event(j, json_pack("{s:s,s:o}", "type", stream == 2 ? "stderr" : "stdout",
                                      "text", json_bytes(buf, len)));
}

static int bg_output(void *ud, int stream, const void *buf, size_t len)
{
        cmd_job *j = ud;
        pthread_mutex_lock(&cmds_lock);
        if (j->c->log.n + len <= CMD_LOG_MAX)
                ab_buf_add(&j->c->log, buf, len);
        else
                j->c->truncated = true;
        pthread_mutex_unlock(&cmds_lock);
        return 0;
}

static void *cmd_main(void *arg)
{
        cmd_job *j = arg;
        cmd *c = j->c; /* only under cmds_lock once it is finished: it may be forgotten */
        bool background = c->background;
        if (j->key_id)
                ab_manager_set_caller(&j->caller);
        pthread_t pinger;
        bool pinging = !background && pthread_create(&pinger, NULL, ping_main, j) == 0;
        abc_exec_req q = {
            .command = j->argv ? NULL : j->command,
            .argv = (const char *const *)j->argv,
            .env = (const char *const *)j->env,
            .cwd = j->cwd,
            .user = j->user,
            .stdin_fd = -1,
            .timeout_ms = j->timeout_ms,
            .output_cap = background ? CMD_LOG_MAX : 0,
            .has_cancel = true,
            .cancel_fd = j->fd,
        };
        abc_exec_res res = {0};
        ab_err *e = NULL;
        int rc = ab_manager_exec(j->srv->mgr, &j->use, &q, background ? bg_output : fg_output, j,
                                 &res, &e);
        pthread_mutex_lock(&cmds_lock);
        bool interrupted = c->interrupted;
        c->running = false;
        c->finished_ms = osb_wall_ms();
        if (background)
                n_bg_running--;
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
        if (!background) {
                if (exit_code != 0 || error) {
                        const char *ename = rc < 0 ? (interrupted ? "Interrupted" : "RuntimeError")
                                            : res.timed_out ? "TimeoutError"
                                                            : "CommandExecError";
                        char ev[16];
                        snprintf(ev, sizeof(ev), "%d", exit_code);
                        json_t *tb = json_array();
                        if (error)
                                json_array_append_new(tb, json_string(error));
                        sse_event(j, json_pack("{s:s,s:{s:s,s:s,s:o}}", "type", "error", "error",
                                               "ename", ename, "evalue", ev, "traceback", tb));
                }
                sse_event(j, json_pack("{s:s,s:I}", "type", "execution_complete", "execution_time",
                                       (json_int_t)res.duration_ms));
        }
        ab_err_free(&e);
        ab_manager_use_end(j->srv->mgr, &j->use);
        ab_manager_set_caller(NULL);
        close(j->fd); /* the event stream ends */
        if (j->peer >= 0)
                close(j->peer);
        cmd_job_free(j);
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

/* A background command's slot is free again. */
static void bg_done(bool bg)
{
        if (!bg)
                return;
        pthread_mutex_lock(&cmds_lock);
        n_bg_running--;
        pthread_mutex_unlock(&cmds_lock);
}

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

/* Starts job j (its command parsed) in box id and answers r. Takes j. */
static enum MHD_Result start_cmd(ab_req *r, const char *id, cmd_job *j, bool bg)
{
        ab_err *e = NULL;
        enum MHD_Result ret;
        if (bg) { /* each holds a thread and a use of its box */
                pthread_mutex_lock(&cmds_lock);
                bool full = n_bg_running >= BG_RUNNING_MAX;
                if (!full)
                        n_bg_running++;
                pthread_mutex_unlock(&cmds_lock);
                if (full) {
                        cmd_job_free(j);
                        return osb_error(r, 429, "TOO_MANY_COMMANDS",
                                         "%d background commands run already; interrupt some",
                                         BG_RUNNING_MAX);
                }
        }
        if (begin_use(r, id, &j->use, &ret) < 0) {
                bg_done(bg);
                cmd_job_free(j);
                return ret;
        }
        if (ab_manager_quota_exec_check(r->srv->mgr, j->use.rec.app_id, &e) < 0) {
                bg_done(bg);
                ab_manager_use_end(r->srv->mgr, &j->use);
                cmd_job_free(j);
                return osb_err(r, e, EXEC_PREFIX);
        }
        ab_stream_slot *slot = NULL;
        if (!bg && !(slot = req_stream_slot(r, &ret))) {
                bg_done(bg);
                ab_manager_use_end(r->srv->mgr, &j->use);
                cmd_job_free(j);
                return ret;
        }
        int sv[2];
        unsigned char rnd[8];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
            RAND_bytes(rnd, sizeof(rnd)) != 1) {
                if (slot)
                        ab_stream_slot_release(slot);
                bg_done(bg);
                ab_manager_use_end(r->srv->mgr, &j->use);
                cmd_job_free(j);
                return osb_error(r, 500, "RUNTIME_ERROR", "cannot make the command's stream");
        }
        cmd *c = xzalloc(sizeof(*c));
        strcpy(c->id, "cmd-");
        for (size_t i = 0; i < sizeof(rnd); i++)
                snprintf(c->id + 4 + 2 * i, 3, "%02x", rnd[i]);
        c->box = xstrdup(id);
        c->content = xstrdup(j->command);
        c->background = bg;
        c->running = true;
        c->started_ms = osb_wall_ms();
        c->cancel_fd = sv[0];
        j->c = c;
        j->fd = sv[0];
        if (r->key_id) { /* the thread outlives r: copies */
                j->key_id = xstrdup(r->key_id);
                j->key_quotas = r->key_quotas;
                j->caller = (ab_caller){.key_id = j->key_id,
                                        .quotas = r->caller.quotas ? &j->key_quotas : NULL};
        }
        _cleanup_free_ char *init = NULL;
        {
                char *txt = json_dumps(json_pack("{s:s,s:s,s:I}", "type", "init", "text", c->id,
                                                 "timestamp", (json_int_t)c->started_ms),
                                       JSON_COMPACT);
                init = xasprintf("data: %s\n\n", txt);
                free(txt);
        }
        if (bg)
                j->peer = sv[1];
        else
                send_all(sv[0], init, strlen(init)); /* the socket's buffer takes it */
        cmds_add(c);
        if (spawn_detached(cmd_main, j) < 0) {
                pthread_mutex_lock(&cmds_lock);
                c->running = false;
                c->exit_code = -1;
                c->error = xstrdup("cannot start a thread");
                c->cancel_fd = -1;
                pthread_mutex_unlock(&cmds_lock);
                close(sv[0]);
                close(sv[1]);
                if (slot)
                        ab_stream_slot_release(slot);
                bg_done(bg);
                ab_manager_use_end(r->srv->mgr, &j->use);
                cmd_job_free(j);
                return osb_error(r, 503, "RUNTIME_ERROR", "cannot start a thread");
        }
        if (!bg)
                return resp_stream_counted(r, 200, "text/event-stream", sv[1], sse_headers, slot);
        size_t len = strlen(init);
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(len, steal_pointer(&init), MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        return resp_send(r, 200, resp);
}

/* Looks a command of box id up (the box must be the caller's). */
static int cmd_access(ab_req *r, const char *id, enum MHD_Result *ret)
{
        ab_err *e = NULL;
        ab_box_rec rec;
        if (ab_manager_get(r->srv->mgr, id, r->scope, &rec, &e) < 0) {
                *ret = osb_err(r, e, EXEC_PREFIX);
                return -1;
        }
        ab_box_rec_clear(&rec);
        return 0;
}

static enum MHD_Result cmd_status(ab_req *r, const char *id, const char *cid)
{
        enum MHD_Result ret;
        if (cmd_access(r, id, &ret) < 0)
                return ret;
        pthread_mutex_lock(&cmds_lock);
        cmd *c = cmd_find(id, cid);
        json_t *j = NULL;
        if (c) {
                char st[32], fin[32];
                osb_time(c->started_ms, st);
                osb_time(c->finished_ms, fin);
                j = json_pack("{s:s,s:s,s:b,s:o,s:s,s:o}", "id", c->id, "content", c->content,
                              "running", c->running, "exit_code",
                              c->running ? json_null() : json_integer(c->exit_code), "started_at",
                              st, "finished_at", c->running ? json_null() : json_string(fin));
                if (c->error)
                        json_object_set_new(j, "error", json_string(c->error));
        }
        pthread_mutex_unlock(&cmds_lock);
        if (!j)
                return osb_error(r, 404, "COMMAND_NOT_FOUND", "no command %s in sandbox %s", cid,
                                 id);
        return resp_json(r, 200, j);
}

/* GET /command/{cid}/logs?cursor=N: the output after its first N lines;
 * EXECD-COMMANDS-TAIL-CURSOR gives the number of complete lines so far. */
static enum MHD_Result cmd_logs(ab_req *r, const char *id, const char *cid)
{
        enum MHD_Result ret;
        if (cmd_access(r, id, &ret) < 0)
                return ret;
        const char *cs = req_query(r, "cursor");
        long long cursor = cs ? strtoll(cs, NULL, 10) : 0;
        if (cursor < 0)
                cursor = 0;
        pthread_mutex_lock(&cmds_lock);
        cmd *c = cmd_find(id, cid);
        ab_buf out = {0};
        long long lines = 0;
        if (c) {
                size_t from = 0;
                for (size_t i = 0; i < c->log.n; i++) {
                        if (c->log.p[i] != '\n')
                                continue;
                        if (++lines == cursor)
                                from = i + 1;
                }
                if (cursor > lines)
                        from = c->log.n;
                ab_buf_add(&out, c->log.p + from, c->log.n - from);
        }
        pthread_mutex_unlock(&cmds_lock);
        if (!c)
                return osb_error(r, 404, "COMMAND_NOT_FOUND", "no command %s in sandbox %s", cid,
                                 id);
        size_t len = out.n;
        struct MHD_Response *resp = MHD_create_response_from_buffer(
            len, len ? ab_buf_steal(&out) : xstrdup(""), MHD_RESPMEM_MUST_FREE);
        ab_buf_free(&out);
        char cur[24];
        snprintf(cur, sizeof(cur), "%lld", lines);
        MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
        MHD_add_response_header(resp, "EXECD-COMMANDS-TAIL-CURSOR", cur);
        return resp_send(r, 200, resp);
}

/* DELETE /command?id=CID: kills the command's process tree. */
static enum MHD_Result cmd_interrupt(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (cmd_access(r, id, &ret) < 0)
                return ret;
        const char *cid = req_query(r, "id");
        if (!cid)
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "id: required");
        pthread_mutex_lock(&cmds_lock);
        cmd *c = cmd_find(id, cid);
        if (c && c->running && c->cancel_fd >= 0) {
                c->interrupted = true;
                shutdown(c->cancel_fd, SHUT_RD); /* the exec sees a hang-up */
        }
        pthread_mutex_unlock(&cmds_lock);
        if (!c)
                return osb_error(r, 404, "COMMAND_NOT_FOUND", "no command %s in sandbox %s", cid,
                                 id);
        return ok_empty(r);
}

/* ---- sessions ----------------------------------------------------------- */

/* A session keeps its shell's state between runs: each run is a bash that
 * loads the state the previous one left (variables, functions, aliases,
 * working directory) from a file in the box and saves it when it exits.
 * The user's command reaches bash as an argument, never inside this text. */
#define SESSION_DIR  "/tmp/.agentbox-sessions"
#define SESSIONS_MAX 1024
static const char session_script[] =
    "__abs=$1; [ -n \"$3\" ] && cd -- \"$3\"; [ -f \"$__abs\" ] && . \"$__abs\" 2>/dev/null; "
    "[ -n \"$4\" ] && cd -- \"$4\"; "
    "__abs_save() { { declare -p; declare -f; alias -p; set +o; shopt -p; printf 'cd -- %q\\n' "
    "\"$PWD\"; } "
    ">\"$__abs.tmp\" 2>/dev/null && mv -f -- \"$__abs.tmp\" \"$__abs\"; }; "
    "trap __abs_save EXIT; eval \"$2\"";

typedef struct session {
        struct session *next;
        char id[32];
        char *box;
        char *cwd; /* where its first run starts, or NULL */
} session;

static session *sessions;
static size_t n_sessions;

static enum MHD_Result session_create(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (cmd_access(r, id, &ret) < 0)
                return ret;
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return execd_err(r, e);
        const char *cwd = json_string_value(json_object_get(body, "cwd"));
        unsigned char rnd[8];
        if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
                json_decref(body);
                return osb_error(r, 500, "RUNTIME_ERROR", "no randomness");
        }
        session *ss = xzalloc(sizeof(*ss));
        strcpy(ss->id, "session-");
        for (size_t i = 0; i < sizeof(rnd); i++)
                snprintf(ss->id + 8 + 2 * i, 3, "%02x", rnd[i]);
        ss->box = xstrdup(id);
        ss->cwd = cwd && *cwd ? xstrdup(cwd) : NULL;
        json_decref(body);
        json_t *j = json_pack("{s:s}", "session_id", ss->id);
        pthread_mutex_lock(&cmds_lock);
        ss->next = sessions;
        sessions = ss;
        if (++n_sessions > SESSIONS_MAX) { /* the oldest is forgotten */
                session **p = &sessions;
                while ((*p)->next)
                        p = &(*p)->next;
                session *old = *p;
                *p = NULL;
                n_sessions--;
                free(old->box);
                free(old->cwd);
                free(old);
        }
        pthread_mutex_unlock(&cmds_lock);
        return resp_json(r, 200, j);
}

/* Caller holds cmds_lock. */
static session **session_find(const char *box, const char *sid)
{
        for (session **p = &sessions; *p; p = &(*p)->next)
                if (!strcmp((*p)->id, sid) && !strcmp((*p)->box, box))
                        return p;
        return NULL;
}

/* POST /session/{sid}/run {command, cwd?, timeout?}: streamed like a
 * foreground command. */
static enum MHD_Result session_run(ab_req *r, const char *id, const char *sid)
{
        enum MHD_Result ret;
        if (cmd_access(r, id, &ret) < 0) /* the box is the caller's before its sessions */
                return ret;
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return execd_err(r, e);
        pthread_mutex_lock(&cmds_lock);
        session **sp = session_find(id, sid);
        char *first_cwd = sp && (*sp)->cwd ? xstrdup((*sp)->cwd) : NULL;
        pthread_mutex_unlock(&cmds_lock);
        if (!sp) {
                json_decref(body);
                return osb_error(r, 404, "SESSION_NOT_FOUND", "no session %s in sandbox %s", sid,
                                 id);
        }
        cmd_job *j = cmd_job_new(r->srv);
        bool bg = false;
        json_object_del(body, "background");
        json_object_del(body, "uid");
        json_object_del(body, "gid");
        json_object_del(body, "envs");
        if (parse_command(body, j, &bg, &e) < 0) {
                json_decref(body);
                free(first_cwd);
                cmd_job_free(j);
                return execd_err(r, e);
        }
        json_decref(body);
        _cleanup_free_ char *state = xasprintf(SESSION_DIR "/%s.sh", sid);
        const char *argv[] = {"bash",
                              "-c",
                              session_script,
                              "agentbox-session",
                              state,
                              j->command,
                              first_cwd ? first_cwd : "",
                              j->cwd ? j->cwd : "",
                              NULL};
        j->argv = xcalloc(AB_ARRAY_LEN(argv), sizeof(char *));
        for (size_t i = 0; argv[i]; i++)
                j->argv[i] = xstrdup(argv[i]);
        free(first_cwd);
        free(j->cwd); /* applied by the script, after the session's own */
        j->cwd = NULL;
        ab_use u;
        if (begin_use(r, id, &u, &ret) < 0) {
                cmd_job_free(j);
                return ret;
        }
        int fd = ab_manager_use_connect(r->srv->mgr, &u, &e);
        int rc = fd < 0 ? -1 : abc_mkdir(fd, SESSION_DIR, true, 0700, &e);
        if (fd >= 0)
                close(fd);
        ab_manager_use_end(r->srv->mgr, &u);
        if (rc < 0) {
                cmd_job_free(j);
                return execd_err(r, e);
        }
        return start_cmd(r, id, j, false);
}

static enum MHD_Result session_delete(ab_req *r, const char *id, const char *sid)
{
        enum MHD_Result ret;
        if (cmd_access(r, id, &ret) < 0)
                return ret;
        pthread_mutex_lock(&cmds_lock);
        session **sp = session_find(id, sid);
        session *ss = sp ? *sp : NULL;
        if (ss) {
                *sp = ss->next;
                n_sessions--;
        }
        pthread_mutex_unlock(&cmds_lock);
        if (!ss)
                return osb_error(r, 404, "SESSION_NOT_FOUND", "no session %s in sandbox %s", sid,
                                 id);
        free(ss->box);
        free(ss->cwd);
        free(ss);
        ab_use u;
        ab_err *e = NULL;
        if (ab_manager_use_begin(r->srv->mgr, id, r->scope, &u, &e) == 0) {
                _cleanup_free_ char *state = xasprintf(SESSION_DIR "/%s.sh", sid);
                int fd = ab_manager_use_connect(r->srv->mgr, &u, &e);
                if (fd >= 0) {
                        abc_delete(fd, state, false, &e); /* none when it never ran */
                        close(fd);
                }
                ab_manager_use_end(r->srv->mgr, &u);
        }
        ab_err_free(&e);
        return ok_empty(r);
}

/* ---- files -------------------------------------------------------------- */

static enum MHD_Result files_info(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        json_t *paths = need_paths(r, &ret);
        if (!paths)
                return ret;
        ab_use u;
        if (begin_use(r, id, &u, &ret) < 0) {
                json_decref(paths);
                return ret;
        }
        const char **v = strs_of(paths);
        json_t *infos;
        ab_err *e = NULL;
        int rc = stat_paths(r->srv, &u, v, json_array_size(paths), &infos, &e);
        ab_manager_use_end(r->srv->mgr, &u);
        free(v);
        if (rc < 0) {
                json_decref(paths);
                return execd_err(r, e);
        }
        size_t i;
        json_t *p;
        json_array_foreach(paths, i, p)
        {
                if (!json_object_get(infos, json_string_value(p))) {
                        ret = osb_error(r, 404, "FILE_NOT_FOUND", "file not found: %s",
                                        json_string_value(p));
                        json_decref(paths);
                        json_decref(infos);
                        return ret;
                }
        }
        json_decref(paths);
        return resp_json(r, 200, infos);
}

/* Deletes each path (recursive: directory trees). */
static enum MHD_Result remove_paths(ab_req *r, const char *id, bool recursive)
{
        enum MHD_Result ret;
        json_t *paths = need_paths(r, &ret);
        if (!paths)
                return ret;
        size_t i;
        json_t *p;
        json_array_foreach(paths, i, p)
        {
                const char *s = json_string_value(p);
                if (!strcmp(s, "/") || !strcmp(s, "/workspace") || !strcmp(s, "/workspace/")) {
                        json_decref(paths);
                        return osb_error(r, 400, "INVALID_REQUEST_BODY",
                                         "path: refusing to delete %s itself", s);
                }
        }
        ab_use u;
        if (begin_use(r, id, &u, &ret) < 0) {
                json_decref(paths);
                return ret;
        }
        ab_err *e = NULL;
        int rc = 0;
        json_array_foreach(paths, i, p)
        {
                int fd = ab_manager_use_connect(r->srv->mgr, &u, &e);
                rc = fd < 0 ? -1 : abc_delete(fd, json_string_value(p), recursive, &e);
                if (fd >= 0)
                        close(fd);
                if (rc < 0)
                        break;
        }
        ab_manager_use_end(r->srv->mgr, &u);
        json_decref(paths);
        if (rc < 0)
                return execd_err(r, e);
        return ok_empty(r);
}

/* chmod and chown of one path by the box's own tools (init has neither). */
static int set_perm(ab_server *s, ab_use *u, const char *path, json_t *perm, bool mode_given,
                    ab_err **err)
{
        uint32_t mode = 0755;
        if (mode_of(json_object_get(perm, "mode"), &mode) < 0)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: mode must be octal digits, e.g. 644",
                                  path);
        char ms[16];
        snprintf(ms, sizeof(ms), "%o", mode);
        int code = 0;
        collect_buf c = {0};
        int rc = 0;
        if (mode_given || json_object_get(perm, "mode")) {
                const char *argv[] = {"chmod", ms, "--", path, NULL};
                rc = run_argv(s, u, argv, 0, &c, &code, err);
        }
        const char *owner = json_string_value(json_object_get(perm, "owner"));
        const char *group = json_string_value(json_object_get(perm, "group"));
        if (rc == 0 && code == 0 && ((owner && *owner) || (group && *group))) {
                _cleanup_free_ char *og = xasprintf("%s%s%s", owner ? owner : "",
                                                    group && *group ? ":" : "", group ? group : "");
                const char *argv[] = {"chown", og, "--", path, NULL};
                rc = run_argv(s, u, argv, 0, &c, &code, err);
        }
        if (rc == 0 && code != 0) {
                ab_buf_putc(&c.err, 0);
                rc =
                    ab_err_set(err, strstr(c.err.p, "No such file") ? AB_E_NOT_FOUND : AB_E_INVALID,
                               0, "%s", c.err.p);
        }
        ab_buf_free(&c.out);
        ab_buf_free(&c.err);
        return rc;
}

/* POST /files/permissions {path: {mode, owner, group}} and POST /directories
 * (the same body: directories made with those permissions). */
static enum MHD_Result paths_perm(ab_req *r, const char *id, bool mkdirs)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return execd_err(r, e);
        ab_use u;
        enum MHD_Result ret;
        if (begin_use(r, id, &u, &ret) < 0) {
                json_decref(body);
                return ret;
        }
        int rc = 0;
        const char *path;
        json_t *perm;
        json_object_foreach(body, path, perm)
        {
                if (!json_is_object(perm)) {
                        rc = ab_err_set(&e, AB_E_INVALID, 0, "%s: must be an object", path);
                        break;
                }
                if (mkdirs) {
                        uint32_t mode = 0755;
                        if (mode_of(json_object_get(perm, "mode"), &mode) < 0) {
                                rc = ab_err_set(&e, AB_E_INVALID, 0,
                                                "%s: mode must be octal digits, e.g. 755", path);
                                break;
                        }
                        int fd = ab_manager_use_connect(r->srv->mgr, &u, &e);
                        rc = fd < 0 ? -1 : abc_mkdir(fd, path, true, mode, &e);
                        if (fd >= 0)
                                close(fd);
                }
                if (rc == 0)
                        rc = set_perm(r->srv, &u, path, perm, !mkdirs, &e);
                if (rc < 0)
                        break;
        }
        ab_manager_use_end(r->srv->mgr, &u);
        json_decref(body);
        if (rc < 0)
                return execd_err(r, e);
        return ok_empty(r);
}

/* POST /files/mv [{src, dest}] */
static enum MHD_Result files_mv(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body = NULL;
        if (r->body_len && !(body = json_loadb(r->body, r->body_len, 0, NULL)))
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "body: not JSON");
        if (!json_is_array(body)) {
                json_decref(body);
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "body: a list of {src, dest}");
        }
        ab_use u;
        enum MHD_Result ret;
        if (begin_use(r, id, &u, &ret) < 0) {
                json_decref(body);
                return ret;
        }
        int rc = 0;
        size_t i;
        json_t *it;
        json_array_foreach(body, i, it)
        {
                const char *src = json_string_value(json_object_get(it, "src"));
                const char *dest = json_string_value(json_object_get(it, "dest"));
                if (!src || !dest || !*src || !*dest) {
                        rc = ab_err_set(&e, AB_E_INVALID, 0, "[%zu]: needs src and dest", i);
                        break;
                }
                int fd = ab_manager_use_connect(r->srv->mgr, &u, &e);
                rc = fd < 0 ? -1 : abc_rename(fd, src, dest, &e);
                if (fd >= 0)
                        close(fd);
                if (rc < 0)
                        break;
        }
        ab_manager_use_end(r->srv->mgr, &u);
        json_decref(body);
        if (rc < 0)
                return execd_err(r, e);
        return ok_empty(r);
}

/* The entries under dir (depth levels) as FileInfo objects, those whose
 * name (or, for a pattern with '/', relative path) matches pattern. */
static int list_infos(ab_server *s, ab_use *u, const char *dir, int depth, const char *pattern,
                      json_t **out, ab_err **err)
{
        *out = NULL;
        abc_dirent *ents = NULL;
        size_t n = 0;
        abc_stat st = {0};
        int fd = ab_manager_use_connect(s->mgr, u, err);
        if (fd < 0)
                return -1;
        int rc = abc_stat_path(fd, dir, &st, err);
        close(fd);
        bool is_dir = st.type == ABC_DIR;
        free(st.link);
        if (rc < 0)
                return -1;
        if (!is_dir)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "%s is not a directory (a symlink is not followed)", dir);
        fd = ab_manager_use_connect(s->mgr, u, err);
        if (fd < 0)
                return -1;
        rc = abc_list(fd, dir, depth, &ents, &n, err);
        close(fd);
        if (rc < 0)
                return -1;
        size_t dl = strlen(dir);
        while (dl > 1 && dir[dl - 1] == '/')
                dl--;
        char **full = xcalloc(n + 1, sizeof(char *));
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                const char *rel = ents[i].path;
                const char *base = strrchr(rel, '/');
                base = base ? base + 1 : rel;
                const char *subject = pattern && strchr(pattern, '/') ? rel : base;
                if (pattern && *pattern && strcmp(pattern, "**") &&
                    fnmatch(pattern, subject, 0) != 0)
                        continue;
                full[k++] = dl == 1 && dir[0] == '/' ? xasprintf("/%s", rel)
                                                     : xasprintf("%.*s/%s", (int)dl, dir, rel);
        }
        abc_dirents_free(ents, n);
        json_t *infos = NULL;
        rc = stat_paths(s, u, (const char *const *)full, k, &infos, err);
        if (rc == 0) {
                *out = json_array();
                for (size_t i = 0; i < k; i++) {
                        json_t *fi = json_object_get(infos, full[i]);
                        if (fi) /* gone meanwhile: left out */
                                json_array_append(*out, fi);
                }
        }
        json_decref(infos);
        ab_strvfreep(&full);
        return rc;
}

static enum MHD_Result dir_list(ab_req *r, const char *id, bool search)
{
        const char *path = req_query(r, "path");
        if (!path || !*path)
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "path: required");
        const char *pattern = search ? req_query(r, "pattern") : NULL;
        long depth = search ? LIST_MAX_DEPTH : 1;
        const char *ds = search ? NULL : req_query(r, "depth");
        if (ds) {
                char *end;
                depth = strtol(ds, &end, 10);
                if (end == ds || *end || depth < 1 || depth > LIST_MAX_DEPTH)
                        return osb_error(r, 400, "INVALID_REQUEST_BODY", "depth: must be 1..%d",
                                         LIST_MAX_DEPTH);
        }
        ab_use u;
        enum MHD_Result ret;
        if (begin_use(r, id, &u, &ret) < 0)
                return ret;
        json_t *out;
        ab_err *e = NULL;
        int rc = list_infos(r->srv, &u, path, (int)depth, pattern, &out, &e);
        ab_manager_use_end(r->srv->mgr, &u);
        if (rc < 0) {
                if (e->code == AB_E_NOT_FOUND) {
                        ret = osb_error(r, 404, "FILE_NOT_FOUND", "%s", e->msg);
                        ab_err_free(&e);
                        return ret;
                }
                return execd_err(r, e);
        }
        return resp_json(r, 200, out);
}

/* POST /files/replace {path: {old, new}}[?verbose=true] */
typedef struct read_buf {
        ab_buf b;
        bool too_big;
} read_buf;

static int read_into(void *ud, int stream, const void *buf, size_t len)
{
        read_buf *rb = ud;
        if (rb->b.n + len > REPLACE_MAX) {
                rb->too_big = true;
                return -1;
        }
        ab_buf_add(&rb->b, buf, len);
        return 0;
}

static int replace_one(ab_server *s, ab_use *u, const char *path, const char *old,
                       const char *new_s, int64_t *count, ab_err **err)
{
        size_t ol = strlen(old), nl = strlen(new_s);
        if (!ol)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: old must not be empty", path);
        abc_stat st = {0};
        int fd = ab_manager_use_connect(s->mgr, u, err);
        if (fd < 0)
                return -1;
        int rc = abc_stat_path(fd, path, &st, err);
        close(fd);
        free(st.link);
        if (rc < 0)
                return -1;
        if (st.type != ABC_FILE)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: not a regular file", path);
        read_buf rb = {0};
        fd = ab_manager_use_connect(s->mgr, u, err);
        if (fd < 0)
                return -1;
        rc = abc_read(fd, path, 0, 0, read_into, &rb, err);
        close(fd);
        if (rc < 0 || rb.too_big) {
                ab_buf_free(&rb.b);
                if (rb.too_big) {
                        ab_err_free(err);
                        return ab_err_set(err, AB_E_LIMIT, 0, "%s: larger than %u MiB", path,
                                          REPLACE_MAX >> 20);
                }
                return -1;
        }
        ab_buf out = {0};
        *count = 0;
        size_t i = 0;
        while (i < rb.b.n) {
                const char *hit = rb.b.n - i >= ol ? memmem(rb.b.p + i, rb.b.n - i, old, ol) : NULL;
                if (!hit) {
                        ab_buf_add(&out, rb.b.p + i, rb.b.n - i);
                        break;
                }
                ab_buf_add(&out, rb.b.p + i, (size_t)(hit - (rb.b.p + i)));
                ab_buf_add(&out, new_s, nl);
                i = (size_t)(hit - rb.b.p) + ol;
                (*count)++;
        }
        ab_buf_free(&rb.b);
        rc = 0;
        if (*count) {
                fd = ab_manager_use_connect(s->mgr, u, err);
                rc = fd < 0 ? -1
                            : abc_write(fd, path, out.p ? out.p : "", out.n, -1, 0, st.mode & 07777,
                                        err);
                if (fd >= 0)
                        close(fd);
        }
        ab_buf_free(&out);
        return rc;
}

static enum MHD_Result files_replace(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return execd_err(r, e);
        const char *vs = req_query(r, "verbose");
        bool verbose = vs && (!strcmp(vs, "true") || !strcmp(vs, "1"));
        ab_use u;
        enum MHD_Result ret;
        if (begin_use(r, id, &u, &ret) < 0) {
                json_decref(body);
                return ret;
        }
        json_t *counts = json_object();
        int rc = 0;
        const char *path;
        json_t *it;
        json_object_foreach(body, path, it)
        {
                const char *old = json_string_value(json_object_get(it, "old"));
                const char *nw = json_string_value(json_object_get(it, "new"));
                int64_t n = 0;
                if (!old || !nw)
                        rc = ab_err_set(&e, AB_E_INVALID, 0, "%s: needs old and new", path);
                else
                        rc = replace_one(r->srv, &u, path, old, nw, &n, &e);
                if (rc < 0)
                        break;
                json_object_set_new(counts, path,
                                    json_pack("{s:I}", "replacedCount", (json_int_t)n));
        }
        ab_manager_use_end(r->srv->mgr, &u);
        json_decref(body);
        if (rc < 0) {
                json_decref(counts);
                if (e->code == AB_E_NOT_FOUND) {
                        ret = osb_error(r, 404, "FILE_NOT_FOUND", "%s", e->msg);
                        ab_err_free(&e);
                        return ret;
                }
                return execd_err(r, e);
        }
        if (!verbose) {
                json_decref(counts);
                return ok_empty(r);
        }
        return resp_json(r, 200, counts);
}

/* ---- download ----------------------------------------------------------- */

typedef struct dl_job {
        ab_server *srv;
        ab_use use;
        char *path;
        uint64_t offset, length;
        int fd;
} dl_job;

static int dl_out(void *ud, int stream, const void *buf, size_t len)
{
        dl_job *j = ud;
        return ab_write_all(j->fd, buf, len) < 0 ? -1 : 0;
}

static void *dl_main(void *arg)
{
        dl_job *j = arg;
        ab_err *e = NULL;
        int fd = ab_manager_use_connect(j->srv->mgr, &j->use, &e);
        if (fd >= 0) {
                if (abc_read(fd, j->path, j->offset, j->length, dl_out, j, &e) < 0)
                        ab_log(AB_LOG_WARN, "download cut short", "box", j->use.rec.id, "path",
                               j->path, "error", e->msg, NULL);
                close(fd);
        }
        ab_err_free(&e);
        ab_manager_use_end(j->srv->mgr, &j->use);
        close(j->fd);
        free(j->path);
        free(j);
        return NULL;
}

/* "bytes=A-B" or "bytes=A-" (no suffix ranges, one range). */
int osb_parse_range(const char *h, uint64_t size, uint64_t *off, uint64_t *len)
{
        unsigned long long a, b;
        char dash;
        if (sscanf(h, "bytes=%llu%c", &a, &dash) != 2 || dash != '-')
                return -1;
        const char *rest = strchr(h, '-') + 1;
        if (!*rest)
                b = size ? size - 1 : 0;
        else if (sscanf(rest, "%llu", &b) != 1 || b < a)
                return -1;
        if (a >= size)
                return -1;
        if (b >= size)
                b = size - 1;
        *off = a;
        *len = b - a + 1;
        return 0;
}

static enum MHD_Result files_download(ab_req *r, const char *id)
{
        const char *path = req_query(r, "path");
        if (!path || !*path)
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "path: required");
        dl_job *j = xzalloc(sizeof(*j));
        j->srv = r->srv;
        enum MHD_Result ret;
        if (begin_use(r, id, &j->use, &ret) < 0) {
                free(j);
                return ret;
        }
        ab_err *e = NULL;
        abc_stat st = {0};
        int fd = ab_manager_use_connect(r->srv->mgr, &j->use, &e);
        int rc = fd < 0 ? -1 : abc_stat_path(fd, path, &st, &e);
        if (fd >= 0)
                close(fd);
        free(st.link);
        if (rc < 0 || st.type != ABC_FILE) {
                ab_manager_use_end(r->srv->mgr, &j->use);
                free(j);
                if (rc == 0)
                        return osb_error(r, 400, "INVALID_REQUEST_BODY", "%s is not a regular file",
                                         path);
                if (e->code == AB_E_NOT_FOUND) {
                        ret = osb_error(r, 404, "FILE_NOT_FOUND", "file not found: %s", path);
                        ab_err_free(&e);
                        return ret;
                }
                return execd_err(r, e);
        }
        unsigned status = 200;
        const char *range = req_header(r, "Range");
        const char *os = req_query(r, "offset"), *ls = req_query(r, "limit");
        char cr[96] = "";
        if (range) {
                if (osb_parse_range(range, st.size, &j->offset, &j->length) < 0) {
                        ab_manager_use_end(r->srv->mgr, &j->use);
                        free(j);
                        return osb_error(r, 416, "INVALID_RANGE", "range %s of a %llu-byte file",
                                         range, (unsigned long long)st.size);
                }
                status = 206;
                snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", (unsigned long long)j->offset,
                         (unsigned long long)(j->offset + j->length - 1),
                         (unsigned long long)st.size);
        } else {
                j->offset = os ? strtoull(os, NULL, 10) : 0;
                j->length = ls ? strtoull(ls, NULL, 10) : 0;
                if (j->offset >= st.size)
                        j->length = 0, j->offset = st.size;
                if (ls && !j->length) /* limit=0: nothing */
                        j->offset = st.size;
        }
        j->path = xstrdup(path);
        int p[2];
        if (j->offset >= st.size || pipe2(p, O_CLOEXEC) < 0) {
                ab_manager_use_end(r->srv->mgr, &j->use);
                free(j->path);
                free(j);
                struct MHD_Response *resp =
                    MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
                MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
                return resp_send(r, status, resp);
        }
        j->fd = p[1];
        if (spawn_detached(dl_main, j) < 0) {
                close(p[0]);
                close(p[1]);
                ab_manager_use_end(r->srv->mgr, &j->use);
                free(j->path);
                free(j);
                return osb_error(r, 503, "RUNTIME_ERROR", "cannot start a thread");
        }
        const char *const hdr[] = {"Content-Range", cr, NULL, NULL};
        return resp_stream(r, status, "application/octet-stream", p[0], *cr ? hdr : NULL);
}

/* ---- upload (multipart: a "metadata" part, then its "file" part) -------- */

/* The boundary of a multipart/form-data Content-Type, or NULL. */
char *osb_boundary_of(const char *ct)
{
        const char *b = ct ? strstr(ct, "boundary=") : NULL;
        if (!b)
                return NULL;
        b += 9;
        bool quoted = *b == '"';
        b += quoted;
        size_t n = strcspn(b, quoted ? "\"" : "; \t");
        return n && n <= 70 ? xasprintf("--%.*s", (int)n, b) : NULL;
}

/* Splits body into parts; the i-th part's name is written into names[i]. */
size_t osb_split_parts(const char *body, size_t len, const char *delim, osb_part *parts, size_t max,
                       char names[][32])
{
        size_t dl = strlen(delim), n = 0;
        const char *p = memmem(body, len, delim, dl);
        while (p && n < max) {
                p += dl;
                size_t left = len - (size_t)(p - body);
                if (left >= 2 && p[0] == '-' && p[1] == '-')
                        break; /* the closing delimiter */
                if (left < 2 || p[0] != '\r' || p[1] != '\n')
                        break;
                p += 2;
                left -= 2;
                const char *hend = memmem(p, left, "\r\n\r\n", 4);
                if (!hend)
                        break;
                names[n][0] = 0;
                /* name="...", not the end of filename="..." */
                const char *nm = memmem(p, (size_t)(hend - p), "name=\"", 6);
                while (nm && nm > p && isalnum((unsigned char)nm[-1]))
                        nm = memmem(nm + 6, (size_t)(hend - nm - 6), "name=\"", 6);
                if (nm) {
                        nm += 6;
                        const char *q =
                            memchr(nm, '"', (size_t)(hend - nm)); /* not past the head */
                        if (q && q - nm < 32)
                                snprintf(names[n], 32, "%.*s", (int)(q - nm), nm);
                }
                const char *data = hend + 4;
                _cleanup_free_ char *next_delim = xasprintf("\r\n%s", delim);
                const char *end =
                    memmem(data, len - (size_t)(data - body), next_delim, strlen(next_delim));
                if (!end)
                        break;
                parts[n] = (osb_part){.name = names[n], .data = data, .len = (size_t)(end - data)};
                n++;
                p = end + 2;
        }
        return n;
}

enum MHD_Result route_osb_upload(ab_req *r, const char *id)
{
        if (r->upload_failed)
                return osb_error(r, 500, "RUNTIME_ERROR", "cannot spool the upload");
        _cleanup_free_ char *delim = osb_boundary_of(req_header(r, "Content-Type"));
        if (!delim)
                return osb_error(r, 400, "INVALID_REQUEST_BODY",
                                 "expected multipart/form-data with a boundary");
        if (!r->upload_len)
                return osb_error(r, 400, "INVALID_REQUEST_BODY", "empty body");
        void *map = mmap(NULL, r->upload_len, PROT_READ, MAP_PRIVATE, r->upload_fd, 0);
        if (map == MAP_FAILED)
                return osb_error(r, 500, "RUNTIME_ERROR", "mmap: %s", strerror(errno));
        osb_part parts[64];
        char names[64][32];
        size_t n = osb_split_parts(map, r->upload_len, delim, parts, 64, names);
        ab_use u;
        enum MHD_Result ret;
        if (begin_use(r, id, &u, &ret) < 0) {
                munmap(map, r->upload_len);
                return ret;
        }
        ab_err *e = NULL;
        int rc = 0;
        size_t files = 0;
        json_t *meta = NULL;
        for (size_t i = 0; i < n && rc == 0; i++) {
                if (!strcmp(parts[i].name, "metadata")) {
                        json_decref(meta);
                        meta = json_loadb(parts[i].data, parts[i].len, 0, NULL);
                        if (!json_is_object(meta))
                                rc = ab_err_set(&e, AB_E_INVALID, 0, "metadata: not a JSON object");
                        continue;
                }
                if (strcmp(parts[i].name, "file"))
                        continue;
                const char *path = json_string_value(json_object_get(meta, "path"));
                uint32_t mode = 0;
                if (!path || !*path) {
                        rc = ab_err_set(&e, AB_E_INVALID, 0,
                                        "metadata.path: required before each file part");
                        break;
                }
                if (mode_of(json_object_get(meta, "mode"), &mode) < 0) {
                        rc = ab_err_set(&e, AB_E_INVALID, 0,
                                        "metadata.mode: octal digits, e.g. 644");
                        break;
                }
                int fd = ab_manager_use_connect(r->srv->mgr, &u, &e);
                rc = fd < 0 ? -1
                            : abc_write(fd, path, parts[i].data, parts[i].len, -1, ABC_W_MKPARENTS,
                                        mode, &e);
                if (fd >= 0)
                        close(fd);
                if (rc == 0 && (json_string_value(json_object_get(meta, "owner")) ||
                                json_string_value(json_object_get(meta, "group")))) {
                        json_t *perm = json_deep_copy(meta);
                        json_object_del(perm, "mode"); /* set by the write already */
                        rc = set_perm(r->srv, &u, path, perm, false, &e);
                        json_decref(perm);
                }
                files++;
                json_decref(meta);
                meta = NULL;
        }
        json_decref(meta);
        ab_manager_use_end(r->srv->mgr, &u);
        munmap(map, r->upload_len);
        if (rc == 0 && !files)
                rc = ab_err_set(&e, AB_E_INVALID, 0, "no file part (expected metadata + file)");
        if (rc < 0) {
                if (e->code == AB_E_LIMIT) {
                        ret = osb_error(r, 507, "DISK_FULL", "%s", e->msg);
                        ab_err_free(&e);
                        return ret;
                }
                return execd_err(r, e);
        }
        return ok_empty(r);
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
        return j ? resp_json(r, 200, j) : osb_err(r, e, EXEC_PREFIX);
}

typedef struct watch_job {
        ab_server *srv;
        char *scope, *box;
        int fd;
} watch_job;

static void *watch_main(void *arg)
{
        watch_job *w = arg;
        for (;;) { /* one sample a second until the client or the box goes away */
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
                int rc = send_all(w->fd, frame, strlen(frame));
                free(frame);
                if (rc < 0)
                        break;
        }
        close(w->fd);
        free(w->scope);
        free(w->box);
        free(w);
        return NULL;
}

/* GET /metrics/watch: a sample every second as server-sent events. */
static enum MHD_Result metrics_watch(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (cmd_access(r, id, &ret) < 0)
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
        if (spawn_detached(watch_main, w) < 0) {
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
        if (cmd_access(r, id, &ret) < 0)
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
                if (cmd_access(r, id, &ret) < 0)
                        return ret;
                return ok_empty(r);
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
                        return remove_paths(r, id, false);
                if (n == 2 && get && !strcmp(b, "info"))
                        return files_info(r, id);
                if (n == 2 && get && !strcmp(b, "search"))
                        return dir_list(r, id, true);
                if (n == 2 && get && !strcmp(b, "download"))
                        return files_download(r, id);
                if (n == 2 && post && !strcmp(b, "permissions"))
                        return paths_perm(r, id, false);
                if (n == 2 && post && !strcmp(b, "mv"))
                        return files_mv(r, id);
                if (n == 2 && post && !strcmp(b, "replace"))
                        return files_replace(r, id);
        }
        if (!strcmp(a, "directories")) {
                if (n == 1 && post)
                        return paths_perm(r, id, true);
                if (n == 1 && del)
                        return remove_paths(r, id, true);
                if (n == 2 && get && !strcmp(b, "list"))
                        return dir_list(r, id, false);
        }
        if (n == 1 && get && !strcmp(a, "metrics"))
                return metrics(r, id);
        if (n == 2 && get && !strcmp(a, "metrics") && !strcmp(b, "watch"))
                return metrics_watch(r, id);
        if (n >= 2 && !strcmp(a, "v1") && !strcmp(b, "isolated"))
                return isolated(r, id);
        return osb_error(r, 404, "NOT_FOUND", "no execd route %s /%s", m, r->path);
}
