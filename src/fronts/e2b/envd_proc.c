/* process.Process of the E2B front's envd (front_envd.c). A process is a
 * user's command held by the box's init, started through the manager's door
 * for users' commands (ab_manager_cmd_start: quota, audit, "exec" event): a
 * background process (stdin, stdout and stderr pipes) or, for a Start with
 * "pty", a terminal. Its ProcessConfig and tag ride with it in init as a
 * JSON tag, so that List, Connect, SendInput, SendSignal and Update find it
 * by pid (the box's own) or tag also after a server restart; its timeout is
 * init's. Each Start or Connect stream is a thread attached to it: the
 * output it kept (a ring per stream), then live output, then the end; the
 * stream that sees the end forgets it in init, as E2B forgets an exited
 * process. The server keeps nothing else: a shutdown detaches the streams
 * and the processes run on, in the box, until it is deleted. */
#include "fronts/e2b/envd_int.h"
#include "kit/term.h"
#include "base/log.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#define FRONT_TAG "e2b" /* the "front" of the tags this front gives its processes */

/* ---- processes in init ---------------------------------------------------- */

/* The front's part of a process's tag ({"front":"e2b","config":...,"tag":...}),
 * or NULL when it is not an E2B process. New reference. */
static json_t *proc_meta(const abc_term_info *t)
{
        if (!t->tag)
                return NULL;
        json_t *j = json_loads(t->tag, 0, NULL);
        const char *front = json_string_value(json_object_get(j, "front"));
        if (!front || strcmp(front, FRONT_TAG)) {
                json_decref(j);
                return NULL;
        }
        return j;
}

/* Every E2B process and PTY of the box (a stopped box has none). */
static int procs_get(ab_server *s, const char *box, const char *scope, abc_term_info **out,
                     size_t *n, ab_err **err)
{
        abc_term_info *p = NULL, *t = NULL;
        size_t np = 0, nt = 0;
        *out = NULL;
        *n = 0;
        if (ab_manager_proc_list(s->mgr, box, scope, &p, &np, err) < 0)
                return -1;
        if (ab_manager_term_list(s->mgr, box, scope, &t, &nt, err) < 0) {
                abc_term_infos_free(p, np);
                return -1;
        }
        abc_term_info *v = xcalloc(xadd(xadd(np, nt), 1), sizeof(*v));
        size_t k = 0;
        for (size_t i = 0; i < np + nt; i++) {
                abc_term_info *x = i < np ? &p[i] : &t[i - np];
                json_t *meta = proc_meta(x);
                if (meta)
                        v[k++] = *x;
                else
                        abc_term_info_clear(x);
                *x = (abc_term_info){0};
                json_decref(meta);
        }
        abc_term_infos_free(p, np);
        abc_term_infos_free(t, nt);
        *out = v;
        *n = k;
        return 0;
}

/* ProcessSelector {pid | tag} -> the process of box in *out; running only
 * unless any (Connect also finds an exited one not yet forgotten: its
 * output and exit code). AB_E_NOT_FOUND when there is none. */
static int select_proc(ab_server *s, const char *box, const char *scope, json_t *msg, bool any,
                       abc_term_info *out, ab_err **err)
{
        *out = (abc_term_info){0};
        json_t *sel = json_object_get(msg, "process");
        json_t *pj = json_object_get(sel, "pid");
        const char *tag = json_string_value(json_object_get(sel, "tag"));
        uint32_t pid = 0;
        if (json_is_integer(pj))
                pid = (uint32_t)json_integer_value(pj);
        else if (json_is_string(pj))
                pid = (uint32_t)strtoul(json_string_value(pj), NULL, 10);
        else if (!tag)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "process: a selector (pid or tag) is required");
        abc_term_info *v;
        size_t n;
        if (procs_get(s, box, scope, &v, &n, err) < 0)
                return -1;
        int rc = -1;
        for (size_t i = 0; i < n && rc < 0; i++) {
                if (!any && !v[i].running)
                        continue;
                bool hit = false;
                if (tag) {
                        json_t *meta = proc_meta(&v[i]);
                        const char *t = json_string_value(json_object_get(meta, "tag"));
                        hit = t && !strcmp(t, tag);
                        json_decref(meta);
                } else {
                        hit = pid && v[i].pid == pid;
                }
                if (hit) {
                        *out = v[i];
                        v[i] = (abc_term_info){0};
                        rc = 0;
                }
        }
        abc_term_infos_free(v, n);
        if (rc < 0)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "process not found");
        return 0;
}

/* ---- streams: a thread per Start or Connect -------------------------------- */

typedef struct pstream {
        struct pstream *next; /* under streams_lock */
        ab_server *srv;
        char *box, *scope, *tid;
        bool pty;
        int fd;             /* write end of the response pipe (non-blocking) */
        atomic_bool stop;   /* detach now: the server stops, or the box goes */
        atomic_bool killed; /* the box is being deleted: the stream ends as E2B's */
} pstream;

static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static pstream *streams;
static atomic_bool stopping; /* envd_procs_stop: no new streams */

static void event_envelope(ab_buf *b, json_t *ev)
{
        crpc_envelope(b, 0, json_pack("{s:o}", "event", ev));
}

static void start_envelope(ab_buf *b, uint32_t pid)
{
        event_envelope(b, json_pack("{s:{s:I}}", "start", "pid", (json_int_t)pid));
}

static bool ps_stopped(pstream *ps)
{
        return atomic_load(&ps->stop) || atomic_load(&stopping);
}

/* Writes to the client, waiting while its pipe is full; -1 when it went
 * away or the stream must stop. */
static int ps_write(pstream *ps, const void *buf, size_t len)
{
        const char *p = buf;
        while (len) {
                ssize_t k = write(ps->fd, p, len);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN) {
                        if (ps_stopped(ps))
                                return -1;
                        struct pollfd pf = {.fd = ps->fd, .events = POLLOUT};
                        poll(&pf, 1, 200);
                        continue;
                }
                if (k <= 0)
                        return -1;
                p += k;
                len -= (size_t)k;
        }
        return 0;
}

static void ps_free(pstream *ps)
{
        pthread_mutex_lock(&streams_lock);
        for (pstream **l = &streams; *l; l = &(*l)->next)
                if (*l == ps) {
                        *l = ps->next;
                        break;
                }
        pthread_mutex_unlock(&streams_lock);
        if (ps->fd >= 0)
                close(ps->fd);
        free(ps->box);
        free(ps->scope);
        free(ps->tid);
        free(ps);
}

/* The end event of an exit (code, or the terminal closed: killed). */
static void end_envelope(ab_buf *b, bool exited, int code)
{
        bool sig = code > 128 && code <= 128 + 64;
        _cleanup_free_ char *status = !exited ? xstrdup("signal: killed")
                                      : code == 128 + SIGTERM && sig
                                          ? xstrdup("signal: terminated")
                                          : xasprintf("exit status %d", code);
        event_envelope(b, json_pack("{s:{s:i,s:b,s:s}}", "end", "exitCode", exited ? code : -1,
                                    "exited", exited, "status", status));
        crpc_end(b, NULL, NULL);
}

/* The end of a stream whose sandbox was killed (deleted, its timeout ran
 * out) or stopped under it: E2B's envd goes with its sandbox, so the SDK
 * meets a dropped stream and a dead sandbox and raises its TimeoutError;
 * "unavailable" is the Connect code it maps to that same error. */
static void sandbox_gone(ab_buf *b)
{
        crpc_end(b, "unavailable", "the sandbox was killed or reached its end of life");
}

/* A stream being pumped: the client's side of kit_term_pump. */
typedef struct ps_pumping {
        pstream *ps;
        ab_buf b;
        ab_buf ka;     /* the keepalive event */
        uint64_t last; /* when the client was last written to */
        bool gone;     /* the client went away */
} ps_pumping;

static int ps_out(void *ud, int stream, const void *data, size_t len)
{
        ps_pumping *p = ud;
        _cleanup_free_ char *b64 = crpc_b64_encode(data, len);
        const char *kind = p->ps->pty ? "pty" : stream == 2 ? "stderr" : "stdout";
        p->b.n = 0;
        event_envelope(&p->b, json_pack("{s:{s:s}}", "data", kind, b64));
        p->gone = ps_write(p->ps, p->b.p, p->b.n) < 0;
        p->last = ab_now_ms();
        return p->gone;
}

/* Between waits: the client gone (POLLERR on its pipe) or the stream told
 * to stop ends the pump; a quiet stream gets keepalives. */
static int ps_idle(void *ud, int polled, short revents)
{
        ps_pumping *p = ud;
        if (polled > 0 && (revents & (POLLERR | POLLHUP)))
                p->gone = true;
        if (p->gone || ps_stopped(p->ps))
                return 1;
        if (ab_now_ms() - p->last >= ENVD_KEEPALIVE_S * 1000ull) {
                p->gone = ps_write(p->ps, p->ka.p, p->ka.n) < 0;
                p->last = ab_now_ms();
        }
        return p->gone;
}

/* Relays one attached process to the client until its end (then forgets
 * it in init), the client goes away, or the stream must stop (the process
 * runs on). */
static void *ps_main(void *arg)
{
        pstream *ps = arg;
        ab_manager *m = ps->srv->mgr;
        ab_term_attach a;
        ab_err *e = NULL;
        _cleanup_buf_ ab_buf b = {0};
        if (ab_manager_term_attach(m, ps->box, ps->scope, ps->tid, &a, &e) < 0) {
                /* The start event is out (the process was there): gone before
                 * this thread attached means killed (a kill can follow the start
                 * event at once), and the stream ends as a killed one's does. */
                if (e->code == AB_E_NOT_FOUND)
                        end_envelope(&b, false, -1);
                else
                        crpc_end(&b, crpc_code_of(e->code), e->msg);
                ab_err_free(&e);
                (void)ps_write(ps, b.p, b.n);
                ps_free(ps);
                return NULL;
        }
        ab_manager_use_hold(m, &a.use); /* a pause freezes it with the box, as E2B's does */
        ps_pumping p = {.ps = ps, .last = ab_now_ms()};
        event_envelope(&p.ka, json_pack("{s:{}}", "keepalive"));
        const kit_term_pump pump = {
            .output = ps_out, .idle = ps_idle, .extra_fd = ps->fd, .tick_ms = 200};
        int code = -1;
        bool ended = false;
        switch (kit_term_pump_run(&a, &pump, &p, &code)) {
        case KIT_TERM_TIMED_OUT:
                crpc_end(&b, "deadline_exceeded", "the command ran longer than its timeout");
                ended = true;
                break;
        case KIT_TERM_EXITED:
                end_envelope(&b, true, code);
                ended = true;
                break;
        case KIT_TERM_CLOSED: /* killed */
                end_envelope(&b, false, -1);
                ended = true;
                break;
        case KIT_TERM_GONE: /* the box stopped or went away: the process with it */
                sandbox_gone(&b);
                break;
        default: /* the client went away or the stream must stop: the process runs on */
                if (atomic_load(&ps->killed))
                        sandbox_gone(&b);
                break;
        }
        if (b.n)
                (void)ps_write(ps, b.p, b.n);
        ab_buf_free(&p.b);
        ab_buf_free(&p.ka);
        ab_manager_term_detach(m, &a);
        if (ended) /* E2B forgets an ended process */
                ab_manager_term_close(m, ps->box, ps->scope, ps->tid, NULL);
        ps_free(ps);
        return NULL;
}

/* Answers r with a stream of process tid (pid): the start event now, then
 * what its thread relays. Takes slot. */
static enum MHD_Result ps_answer(ab_req *r, const char *box, const abc_term_info *t,
                                 ab_stream_slot *slot)
{
        int fds[2];
        if (atomic_load(&stopping)) {
                ab_stream_slot_release(slot);
                return envd_stream_error(r, "unavailable", "the server is stopping");
        }
        if (pipe2(fds, O_CLOEXEC) < 0) {
                ab_stream_slot_release(slot);
                return resp_error(r, 500, "internal", "pipe: %s", strerror(errno));
        }
        _cleanup_buf_ ab_buf b = {0};
        start_envelope(&b, t->pid);
        if (ab_write_all(fds[1], b.p, b.n) < 0) {
                /* a new pipe takes one small envelope */
        }
        fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
        pstream *ps = xzalloc(sizeof(*ps));
        ps->srv = r->srv;
        ps->box = xstrdup(box);
        ps->scope = r->scope ? xstrdup(r->scope) : NULL;
        ps->tid = xstrdup(t->id);
        ps->pty = !t->pipes;
        ps->fd = fds[1];
        pthread_mutex_lock(&streams_lock);
        ps->next = streams;
        streams = ps;
        pthread_mutex_unlock(&streams_lock);
        if (spawn_detached(ps_main, ps) < 0) {
                b.n = 0;
                crpc_end(&b, "unavailable", "cannot start a thread");
                (void)ps_write(ps, b.p, b.n);
                ps_free(ps);
        }
        return resp_stream_counted(r, 200, "application/connect+json", fds[0], NULL, slot);
}

void envd_forget_box(const char *id)
{
        /* The box's processes die with it; its streams detach now. */
        for (int i = 0; i < 300; i++) { /* 3 s: each detaches within 200 ms */
                bool any = false;
                pthread_mutex_lock(&streams_lock);
                for (pstream *ps = streams; ps; ps = ps->next)
                        if (!strcmp(ps->box, id)) {
                                atomic_store(&ps->killed, true);
                                atomic_store(&ps->stop, true);
                                any = true;
                        }
                pthread_mutex_unlock(&streams_lock);
                if (!any)
                        break;
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
        }
}

/* ---- process.Process -------------------------------------------------------- */

/* Connect-Timeout-Ms of the call; 0 = none. */
static uint32_t call_timeout_ms(ab_req *r)
{
        const char *h = req_header(r, "Connect-Timeout-Ms");
        if (!h)
                return 0;
        unsigned long long v = strtoull(h, NULL, 10);
        return v > AB_MAX_TIMEOUT_S * 1000ull ? AB_MAX_TIMEOUT_S * 1000u : (uint32_t)v;
}

static int parse_strv(json_t *a, char ***out, ab_err **err)
{
        size_t n = json_is_array(a) ? json_array_size(a) : 0;
        char **v = xcalloc(n + 1, sizeof(char *));
        for (size_t i = 0; i < n; i++) {
                json_t *w = json_array_get(a, i);
                if (!json_is_string(w)) {
                        ab_strvfreep(&v);
                        return ab_err_set(err, AB_E_INVALID, 0, "args[%zu]: not a string", i);
                }
                v[i] = xstrdup(json_string_value(w));
        }
        *out = v;
        return 0;
}

/* The tag init keeps with the process: the front, its ProcessConfig (without
 * its envs when the whole would not fit) and the caller's tag. */
static char *proc_tag(json_t *pc, const char *tag, ab_err **err)
{
        json_t *config = json_deep_copy(json_is_object(pc) ? pc : NULL);
        if (!config)
                config = json_object();
        for (int pass = 0; pass < 2; pass++) {
                json_t *j = json_pack("{s:s,s:O}", "front", FRONT_TAG, "config", config);
                if (tag)
                        json_object_set_new(j, "tag", json_string(tag));
                char *s = json_dumps(j, JSON_COMPACT);
                json_decref(j);
                if (s && strlen(s) <= ABC_TERM_TAG_MAX) {
                        json_decref(config);
                        return s;
                }
                free(s);
                json_object_del(config, "envs");
        }
        json_decref(config);
        ab_err_set(err, AB_E_INVALID, 0, "process: its command, args and tag must fit in %u bytes",
                   ABC_TERM_TAG_MAX);
        return NULL;
}

static enum MHD_Result process_start(ab_req *r, const char *box, json_t *msg)
{
        json_t *pc = json_object_get(msg, "process");
        const char *cmd = json_string_value(json_object_get(pc, "cmd"));
        if (!cmd || !*cmd)
                return envd_stream_error(r, "invalid_argument", "process.cmd: required");
        json_t *pty = json_object_get(msg, "pty");
        ab_err *e = NULL;
        _cleanup_strv_ char **args = NULL;
        _cleanup_free_ char *tag = NULL;
        if (parse_strv(json_object_get(pc, "args"), &args, &e) < 0 ||
            !(tag = proc_tag(pc, json_string_value(json_object_get(msg, "tag")), &e))) {
                enum MHD_Result ret = envd_stream_error(r, "invalid_argument", e->msg);
                ab_err_free(&e);
                return ret;
        }
        size_t n_args = 0;
        while (args[n_args])
                n_args++;
        _cleanup_strv_ char **argv = xcalloc(n_args + 2, sizeof(char *));
        argv[0] = xstrdup(cmd);
        for (size_t i = 0; i < n_args; i++)
                argv[1 + i] = steal_pointer(&args[i]);
        json_t *envs = json_object_get(pc, "envs");
        size_t ne = json_is_object(envs) ? json_object_size(envs) : 0, k = 0;
        _cleanup_strv_ char **env = xcalloc(ne + 4, sizeof(char *));
        const char *cwd = json_string_value(json_object_get(pc, "cwd"));
        /* Commands run as the call's user (envd_who_of) and start in its
         * home unless told otherwise, with HOME, USER and PWD as E2B sets
         * them (PWD the cwd as given: in an older box pwd shows /home/user,
         * not the /workspace its link leads to). The call's envs come
         * after: they win. */
        __attribute__((cleanup(envd_who_clear))) envd_who who;
        envd_who_of(r, box, &who);
        const char *home = who.home ? who.home : E2B_HOME;
        _cleanup_free_ char *abs_cwd = envd_call_path(home, cwd && *cwd ? cwd : home, &e);
        if (!abs_cwd) {
                enum MHD_Result ret = envd_stream_error(r, "invalid_argument", e->msg);
                ab_err_free(&e);
                return ret;
        }
        env[k++] = xasprintf("HOME=%s", home);
        env[k++] = xasprintf("PWD=%s", abs_cwd);
        if (who.name)
                env[k++] = xasprintf("USER=%s", who.name);
        const char *key;
        json_t *val;
        json_object_foreach(envs, key, val)
        {
                if (json_is_string(val) && *key && !strchr(key, '='))
                        env[k++] = xasprintf("%s=%s", key, json_string_value(val));
        }
        uint32_t timeout_ms = call_timeout_ms(r);
        json_t *size = json_object_get(pty, "size");
        json_t *cj = json_object_get(size, "cols"), *rj = json_object_get(size, "rows");
        abc_term_req q = {
            .argv = (const char *const *)argv,
            .env = (const char *const *)env,
            .cwd = abs_cwd,
            .user = who.user,
            .pipes = !json_is_object(pty),
            .close_stdin = !json_is_true(json_object_get(msg, "stdin")),
            .tag = tag,
            .timeout_ms = timeout_ms ? timeout_ms : AB_MAX_TIMEOUT_S * 1000u,
            .cols = json_is_integer(cj) ? (uint32_t)json_integer_value(cj) : 80,
            .rows = json_is_integer(rj) ? (uint32_t)json_integer_value(rj) : 24,
        };
        if (q.pipes)
                q.cols = q.rows = 0;
        enum MHD_Result ret;
        ab_stream_slot *slot = req_stream_slot(r, &ret);
        if (!slot)
                return ret;
        abc_term_info t;
        if (ab_manager_cmd_start_id(r->srv->mgr, box, r->scope, &q, &t, &e) < 0) {
                ab_stream_slot_release(slot);
                const char *code = e->code == AB_E_CONFLICT ? "resource_exhausted"
                                   : e->code == AB_E_NOT_FOUND && !strstr(e->msg, "directory")
                                       ? "not_found"
                                       : crpc_code_of(e->code);
                ret = envd_stream_error(r, code, e->msg);
                ab_err_free(&e);
                return ret;
        }
        ret = ps_answer(r, box, &t, slot);
        abc_term_info_clear(&t);
        return ret;
}

static enum MHD_Result process_connect(ab_req *r, const char *box, json_t *msg)
{
        ab_err *e = NULL;
        abc_term_info t;
        if (select_proc(r->srv, box, r->scope, msg, true, &t, &e) < 0) {
                enum MHD_Result ret = envd_stream_error(r, crpc_code_of(e->code), e->msg);
                ab_err_free(&e);
                return ret;
        }
        enum MHD_Result ret;
        ab_stream_slot *slot = req_stream_slot(r, &ret);
        if (slot)
                ret = ps_answer(r, box, &t, slot);
        abc_term_info_clear(&t);
        return ret;
}

static enum MHD_Result process_list(ab_req *r, const char *box)
{
        abc_term_info *v;
        size_t n;
        ab_err *e = NULL;
        if (procs_get(r->srv, box, r->scope, &v, &n, &e) < 0)
                return envd_rpc_err(r, e);
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++) {
                if (!v[i].running)
                        continue;
                json_t *meta = proc_meta(&v[i]);
                json_t *pi = json_pack("{s:O,s:I}", "config", json_object_get(meta, "config"),
                                       "pid", (json_int_t)v[i].pid);
                json_t *tag = json_object_get(meta, "tag");
                if (json_is_string(tag))
                        json_object_set(pi, "tag", tag);
                json_array_append_new(a, pi);
                json_decref(meta);
        }
        abc_term_infos_free(v, n);
        return resp_json(r, 200, json_pack("{s:o}", "processes", a));
}

/* Writes input (base64 in input.stdin, or input.pty) to process t. */
static int proc_input(ab_req *r, const char *box, const abc_term_info *t, json_t *input,
                      ab_err **err)
{
        json_t *in = json_object_get(input, "stdin");
        json_t *pin = json_object_get(input, "pty");
        if (!in && !pin)
                return ab_err_set(err, AB_E_INVALID, 0, "input.stdin or input.pty: required");
        if (!in && t->pipes)
                return ab_err_set(err, AB_E_INVALID, 0, "input.pty: the process has no PTY");
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        json_t *v = in ? in : pin;
        if (!json_is_string(v) || crpc_b64_decode(json_string_value(v), &data, &len) < 0)
                return ab_err_set(err, AB_E_INVALID, 0, "input: not base64");
        for (size_t off = 0; off < len;) { /* init takes 60 KiB a call */
                size_t n = len - off > 60000 ? 60000 : len - off;
                int rc = t->pipes ? ab_manager_proc_input(r->srv->mgr, box, r->scope, t->id,
                                                          data + off, n, false, err)
                                  : ab_manager_term_input(r->srv->mgr, box, r->scope, t->id,
                                                          data + off, n, err);
                if (rc < 0)
                        return -1;
                off += n;
        }
        return 0;
}

static int proc_signal(ab_req *r, const char *box, const abc_term_info *t, json_t *msg,
                       ab_err **err)
{
        json_t *sj = json_object_get(msg, "signal");
        const char *sn = json_string_value(sj);
        int sig = json_is_integer(sj)                   ? (int)json_integer_value(sj)
                  : sn && !strcmp(sn, "SIGNAL_SIGKILL") ? SIGKILL
                  : sn && !strcmp(sn, "SIGNAL_SIGTERM") ? SIGTERM
                                                        : 0;
        if (sig != SIGKILL && sig != SIGTERM)
                return ab_err_set(err, AB_E_INVALID, 0, "signal: SIGKILL or SIGTERM");
        /* SIGKILL ends its whole session (what it started too) and forgets it */
        return sig == SIGKILL ? ab_manager_term_close(r->srv->mgr, box, r->scope, t->id, err)
                              : ab_manager_term_signal(r->srv->mgr, box, r->scope, t->id, sig, err);
}

static enum MHD_Result process_unary(ab_req *r, const char *box, const char *method, json_t *msg)
{
        ab_err *e = NULL;
        abc_term_info t;
        if (select_proc(r->srv, box, r->scope, msg, false, &t, &e) < 0)
                return envd_rpc_err(r, e);
        int rc = 0;
        if (!strcmp(method, "Update")) {
                json_t *size = json_object_get(json_object_get(msg, "pty"), "size");
                json_t *cj = json_object_get(size, "cols"), *rj = json_object_get(size, "rows");
                if (t.pipes)
                        rc = ab_err_set(&e, AB_E_INVALID, 0, "the process has no PTY");
                else if (json_is_integer(cj) && json_is_integer(rj))
                        rc = ab_manager_term_resize(r->srv->mgr, box, r->scope, t.id,
                                                    (uint32_t)json_integer_value(cj),
                                                    (uint32_t)json_integer_value(rj), &e);
        } else if (!strcmp(method, "SendInput")) {
                rc = proc_input(r, box, &t, json_object_get(msg, "input"), &e);
        } else if (!strcmp(method, "CloseStdin")) {
                if (t.pipes)
                        rc = ab_manager_proc_input(r->srv->mgr, box, r->scope, t.id, NULL, 0, true,
                                                   &e);
                if (rc < 0 && e->code == AB_E_CONFLICT) /* closed already: done */
                        rc = 0;
                ab_err_free(&e);
        } else { /* SendSignal */
                rc = proc_signal(r, box, &t, msg, &e);
        }
        abc_term_info_clear(&t);
        if (rc < 0)
                return envd_rpc_err(r, e);
        return resp_json(r, 200, json_object());
}

/* StreamInput: a client stream, buffered whole by the server: a start event
 * naming the process, then data events. */
static enum MHD_Result process_stream_input(ab_req *r, const char *box)
{
        ab_err *e = NULL;
        json_t *msgs;
        if (crpc_parse_stream(r->body, r->body_len, &msgs, &e) < 0)
                return envd_rpc_err(r, e);
        abc_term_info t = {0};
        size_t i;
        json_t *m;
        int rc = 0;
        json_array_foreach(msgs, i, m)
        {
                json_t *st = json_object_get(m, "start");
                json_t *data = json_object_get(m, "data");
                if (st && !t.id) {
                        if ((rc = select_proc(r->srv, box, r->scope, st, false, &t, &e)) < 0)
                                break;
                } else if (data) {
                        if (!t.id) {
                                rc = ab_err_set(&e, AB_E_INVALID, 0, "data before start");
                                break;
                        }
                        if ((rc = proc_input(r, box, &t, json_object_get(data, "input"), &e)) < 0)
                                break;
                }
        }
        json_decref(msgs);
        abc_term_info_clear(&t);
        if (rc < 0)
                return envd_rpc_err(r, e);
        /* a client-streaming answer is one enveloped message and the end */
        _cleanup_buf_ ab_buf b = {0};
        crpc_envelope(&b, 0, json_object());
        crpc_end(&b, NULL, NULL);
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0)
                return resp_error(r, 500, "internal", "pipe: %s", strerror(errno));
        if (ab_write_all(fds[1], b.p, b.n) < 0) {
                /* fits in a new pipe */
        }
        close(fds[1]);
        return resp_stream(r, 200, "application/connect+json", fds[0], NULL);
}

enum MHD_Result envd_process_rpc(ab_req *r, const char *method)
{
        enum MHD_Result ret;
        const char *box = envd_box(r, &ret);
        if (!box)
                return ret;
        if (!strcmp(method, "StreamInput"))
                return process_stream_input(r, box);
        bool streaming = !strcmp(method, "Start") || !strcmp(method, "Connect");
        json_t *msg;
        ab_err *e = NULL;
        if (crpc_parse_request(r->body, r->body_len, envd_enveloped(r), &msg, &e) < 0) {
                if (streaming) {
                        ret = envd_stream_error(r, "invalid_argument", e->msg);
                        ab_err_free(&e);
                        return ret;
                }
                return envd_rpc_err(r, e);
        }
        if (!strcmp(method, "Start"))
                ret = process_start(r, box, msg);
        else if (!strcmp(method, "Connect"))
                ret = process_connect(r, box, msg);
        else if (!strcmp(method, "List"))
                ret = process_list(r, box);
        else if (!strcmp(method, "SendInput") || !strcmp(method, "SendSignal") ||
                 !strcmp(method, "CloseStdin") || !strcmp(method, "Update"))
                ret = process_unary(r, box, method, msg);
        else
                ret = envd_rpc_error(r, "unimplemented", "no such method of process.Process");
        json_decref(msg);
        return ret;
}

/* ---- shutdown ------------------------------------------------------------ */

void envd_procs_stop(void)
{
        /* The processes live in their boxes: only the streams end (detached
         * within 200 ms); wait for them before the manager goes. */
        atomic_store(&stopping, true);
        for (int i = 0; i < 1000; i++) { /* 10 s */
                pthread_mutex_lock(&streams_lock);
                bool busy = streams != NULL;
                pthread_mutex_unlock(&streams_lock);
                if (!busy)
                        break;
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
        }
        atomic_store(&stopping, false);
}
