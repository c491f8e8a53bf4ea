/* process.Process of the E2B front's envd (front_envd.c): each process is
 * one exec through the manager (ab_manager_exec) on a thread of its own,
 * holding a use of the box while it runs (held: a pause freezes it with the
 * box); stdin is a pipe (SendInput writes it, CloseStdin closes it), and
 * closing a second pipe, the exec's cancel fd, kills its process tree
 * (SIGKILL). The command is started by a tiny sh prologue that reports the
 * shell's pid in the box on stderr before exec'ing the command, so pids are
 * the box's own and SIGTERM is a `kill` in the box. Output goes to every
 * stream subscribed (the Start call's, any Connect's) as it arrives. A Start
 * with "pty" runs on an agentbox terminal instead (core/term.c). Processes
 * live in this server: a restart ends them. */
#include "api/envd_int.h"
#include "base/log.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#define PID_MARK "\036abpid "
/* sh prints the pid it will exec the command as, then becomes the command */
#define PROLOGUE          "printf '\\036abpid %s\\n' \"$$\" >&2; exec \"$@\""
#define OUTPUT_CAP        (1ull << 40) /* E2B streams a process's output without a cap */
#define MAX_PROCS_PER_BOX 128          /* running processes (each one a thread here) */

/* ---- the process registry ------------------------------------------------ */

typedef struct sub {
        int fd; /* write end of a response pipe */
        struct sub *next;
} sub;

typedef struct proc {
        /* under reg_lock */
        struct proc *next;
        int refs;
        char *box;
        char *scope;  /* the app the process runs for (its box's), or NULL */
        uint32_t pid; /* in the box; 0 until known */
        char *tag;
        json_t *config; /* ProcessConfig, for List */
        bool ended;
        /* under io_lock (never held while writing to a stream) */
        pthread_mutex_t io_lock;
        int stdin_w;  /* -1: none, or closed */
        int cancel_w; /* closing it kills the process tree */
        atomic_bool killed;
        /* under lock (held while writing to the streams) */
        pthread_mutex_t lock;
        bool marker_done;
        ab_buf marker;  /* stderr bytes until the pid line */
        ab_buf pending; /* envelopes made before the start event */
        sub *subs;
        /* the thread's */
        ab_server *srv;
        ab_use use;
        char **argv, **env;
        char *cwd, *user;
        uint32_t timeout_ms;
        int stdin_r, cancel_r;
        /* a PTY (Start with "pty"): an agentbox terminal of the box */
        char *tid;
        uint32_t cols, rows;
} proc;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static proc *procs;
static atomic_bool stopping;              /* envd_shutdown: PTY threads end */
static uint32_t next_fake_pid = 1u << 22; /* above any real pid_max default */

static void subs_close(sub **l)
{
        while (*l) {
                sub *s = *l;
                *l = s->next;
                close(s->fd);
                free(s);
        }
}

static void proc_unref(proc *p)
{
        pthread_mutex_lock(&reg_lock);
        bool last = --p->refs == 0;
        pthread_mutex_unlock(&reg_lock);
        if (!last)
                return;
        subs_close(&p->subs);
        if (p->stdin_w >= 0)
                close(p->stdin_w);
        if (p->cancel_w >= 0)
                close(p->cancel_w);
        if (p->stdin_r >= 0)
                close(p->stdin_r);
        if (p->cancel_r >= 0)
                close(p->cancel_r);
        ab_buf_free(&p->marker);
        ab_buf_free(&p->pending);
        json_decref(p->config);
        free(p->box);
        free(p->scope);
        free(p->tag);
        ab_strvfreep(&p->argv);
        ab_strvfreep(&p->env);
        free(p->cwd);
        free(p->user);
        free(p->tid);
        pthread_mutex_destroy(&p->lock);
        pthread_mutex_destroy(&p->io_lock);
        free(p);
}

/* Finds a running process of box by pid (tag NULL) or tag; a reference. */
static proc *proc_find(const char *box, uint32_t pid, const char *tag)
{
        pthread_mutex_lock(&reg_lock);
        proc *p = procs;
        for (; p; p = p->next) {
                if (p->ended || strcmp(p->box, box))
                        continue;
                if (tag ? (p->tag && !strcmp(p->tag, tag)) : (p->pid && p->pid == pid))
                        break;
        }
        if (p)
                p->refs++;
        pthread_mutex_unlock(&reg_lock);
        return p;
}

/* Sends bytes to every subscriber (p->lock held); drops the gone ones. */
static void proc_broadcast(proc *p, const char *buf, size_t len)
{
        for (sub **l = &p->subs; *l;) {
                if (ab_write_all((*l)->fd, buf, len) < 0) {
                        sub *s = *l;
                        *l = s->next;
                        close(s->fd);
                        free(s);
                } else {
                        l = &(*l)->next;
                }
        }
}

static void event_envelope(ab_buf *b, json_t *ev)
{
        crpc_envelope(b, 0, json_pack("{s:o}", "event", ev));
}

static void start_envelope(ab_buf *b, uint32_t pid)
{
        event_envelope(b, json_pack("{s:{s:I}}", "start", "pid", (json_int_t)pid));
}

/* The pid is known (p->lock held): publish it, then what waited for it. */
static void proc_started(proc *p, uint32_t pid)
{
        pthread_mutex_lock(&reg_lock);
        p->pid = pid ? pid : next_fake_pid++;
        pthread_mutex_unlock(&reg_lock);
        p->marker_done = true;
        _cleanup_buf_ ab_buf b = {0};
        start_envelope(&b, p->pid);
        ab_buf_add(&b, p->pending.p, p->pending.n);
        ab_buf_free(&p->pending);
        proc_broadcast(p, b.p, b.n);
}

static void proc_data(proc *p, int stream, const char *buf, size_t len)
{
        if (!len)
                return;
        _cleanup_free_ char *b64 = crpc_b64_encode(buf, len);
        _cleanup_buf_ ab_buf b = {0};
        event_envelope(&b, json_pack("{s:{s:s}}", "data", stream == 2 ? "stderr" : "stdout", b64));
        if (!p->marker_done)
                ab_buf_add(&p->pending, b.p, b.n);
        else
                proc_broadcast(p, b.p, b.n);
}

/* Output of the exec: the prologue's pid line first (on stderr). */
static int proc_output(void *ud, int stream, const void *buf, size_t len)
{
        proc *p = ud;
        pthread_mutex_lock(&p->lock);
        if (!p->marker_done && stream == 2) {
                ab_buf_add(&p->marker, buf, len);
                char *nl = memchr(p->marker.p, '\n', p->marker.n);
                size_t ml = strlen(PID_MARK);
                bool prefix_ok =
                    !memcmp(p->marker.p, PID_MARK, p->marker.n < ml ? p->marker.n : ml);
                if (nl && prefix_ok && p->marker.n >= ml) {
                        uint32_t pid = (uint32_t)strtoul(p->marker.p + ml, NULL, 10);
                        size_t used = (size_t)(nl - p->marker.p) + 1;
                        proc_started(p, pid);
                        proc_data(p, 2, p->marker.p + used, p->marker.n - used);
                        ab_buf_free(&p->marker);
                } else if (!prefix_ok || p->marker.n > 64) {
                        /* no prologue line: the bytes are the command's */
                        proc_started(p, 0);
                        proc_data(p, 2, p->marker.p, p->marker.n);
                        ab_buf_free(&p->marker);
                }
        } else {
                proc_data(p, stream, buf, len);
        }
        pthread_mutex_unlock(&p->lock);
        return 0;
}

static void *proc_main(void *arg)
{
        proc *p = arg;
        abc_exec_req q = {
            .argv = (const char *const *)p->argv,
            .env = (const char *const *)p->env,
            .cwd = p->cwd,
            .user = p->user,
            .stdin_fd = p->stdin_r,
            .timeout_ms = p->timeout_ms,
            .output_cap = OUTPUT_CAP,
            .has_cancel = true,
            .cancel_fd = p->cancel_r,
        };
        abc_exec_res res;
        ab_err *e = NULL;
        int rc = ab_manager_exec(p->srv->mgr, &p->use, &q, proc_output, p, &res, &e);
        ab_manager_use_end(p->srv->mgr, &p->use);
        pthread_mutex_lock(&reg_lock);
        p->ended = true; /* List and Connect see it no more */
        pthread_mutex_unlock(&reg_lock);
        pthread_mutex_lock(&p->lock);
        if (!p->marker_done) {
                ab_buf m = p->marker;
                p->marker = (ab_buf){0};
                proc_started(p, 0);
                proc_data(p, 2, m.p, m.n);
                ab_buf_free(&m);
        }
        _cleanup_buf_ ab_buf b = {0};
        if (rc == 0 && res.timed_out) {
                crpc_end(&b, "deadline_exceeded", "the command ran longer than its timeout");
        } else if (rc == 0 || p->killed) {
                int code = rc == 0 ? res.exit_code : 137;
                bool sig = p->killed || (code > 128 && code <= 128 + 64);
                _cleanup_free_ char *status = p->killed ? xstrdup("signal: killed")
                                              : code == 128 + SIGTERM && sig
                                                  ? xstrdup("signal: terminated")
                                                  : xasprintf("exit status %d", code);
                event_envelope(&b, json_pack("{s:{s:i,s:b,s:s}}", "end", "exitCode",
                                             p->killed ? -1 : code, "exited", !p->killed, "status",
                                             status));
                crpc_end(&b, NULL, NULL);
        } else {
                crpc_end(&b, crpc_code_of(e->code), e->msg);
        }
        ab_err_free(&e);
        proc_broadcast(p, b.p, b.n);
        subs_close(&p->subs);
        pthread_mutex_unlock(&p->lock);
        /* out of the registry */
        pthread_mutex_lock(&reg_lock);
        for (proc **l = &procs; *l; l = &(*l)->next)
                if (*l == p) {
                        *l = p->next;
                        p->refs--; /* the registry's */
                        break;
                }
        pthread_mutex_unlock(&reg_lock);
        proc_unref(p); /* the thread's */
        return NULL;
}

/* Takes p out of the registry (its thread ends). */
static void proc_unlist(proc *p)
{
        pthread_mutex_lock(&reg_lock);
        p->ended = true;
        for (proc **l = &procs; *l; l = &(*l)->next)
                if (*l == p) {
                        *l = p->next;
                        p->refs--; /* the registry's */
                        break;
                }
        pthread_mutex_unlock(&reg_lock);
}

/* A PTY's thread: attached to its terminal, it relays the output as
 * data.pty events until the program exits or the terminal is closed, then
 * closes the terminal (the box keeps at most 16). */
static void *pty_main(void *arg)
{
        proc *p = arg;
        ab_manager *m = p->srv->mgr;
        ab_term_attach a;
        ab_err *e = NULL;
        _cleanup_buf_ ab_buf b = {0};
        int exit_code = 0;
        bool exited = false, closed = false;
        int rc = ab_manager_term_attach(m, p->box, p->scope, p->tid, &a, &e);
        if (rc == 0)
                ab_manager_use_hold(m, &a.use);
        /* The PTY's program is a user's command: the exec door counts it
         * (quota, audit, event) for as long as it runs. */
        ab_exec_mark mark = {0};
        abc_exec_req xq = {.argv = (const char *const *)p->argv + 4};
        if (rc == 0 && ab_manager_exec_begin(m, &a.use, &xq, &mark, &e) < 0) {
                ab_manager_term_detach(m, &a);
                ab_manager_term_close(m, p->box, p->scope, p->tid, NULL);
                rc = -1;
        }
        if (rc < 0) {
                crpc_end(&b, crpc_code_of(e->code), e->msg);
                ab_err_free(&e);
        } else {
                bool done = false;
                while (!done) {
                        abc_term_event ev;
                        int k;
                        while (!done && (k = abc_term_next(a.stream, &ev)) > 0) {
                                if (ev.kind == ABC_TERM_OUTPUT) {
                                        _cleanup_free_ char *b64 = crpc_b64_encode(ev.data, ev.len);
                                        _cleanup_buf_ ab_buf d = {0};
                                        event_envelope(&d,
                                                       json_pack("{s:{s:s}}", "data", "pty", b64));
                                        pthread_mutex_lock(&p->lock);
                                        proc_broadcast(p, d.p, d.n);
                                        pthread_mutex_unlock(&p->lock);
                                        continue;
                                }
                                exited = ev.kind == ABC_TERM_EXIT;
                                closed = !exited;
                                exit_code = ev.exit_code;
                                done = true;
                        }
                        if (done)
                                break;
                        if (k < 0) {
                                closed = true;
                                break;
                        }
                        struct pollfd pf = {.fd = a.fd, .events = POLLIN};
                        if ((poll(&pf, 1, 200) < 0 && errno != EINTR) || atomic_load(&stopping))
                                break;
                }
                abc_exec_res xr = {.exit_code = exited ? exit_code : 128 + SIGKILL};
                ab_manager_exec_end(m, &a.use, &mark, 0, &xr);
                ab_manager_term_detach(m, &a);
                ab_manager_term_close(m, p->box, p->scope, p->tid, NULL);
                _cleanup_free_ char *status =
                    exited ? xasprintf("exit status %d", exit_code) : xstrdup("signal: killed");
                event_envelope(&b, json_pack("{s:{s:i,s:b,s:s}}", "end", "exitCode",
                                             exited ? exit_code : -1, "exited", exited, "status",
                                             status));
                crpc_end(&b, NULL, NULL);
                (void)closed;
        }
        proc_unlist(p);
        pthread_mutex_lock(&p->lock);
        proc_broadcast(p, b.p, b.n);
        subs_close(&p->subs);
        pthread_mutex_unlock(&p->lock);
        proc_unref(p); /* the thread's */
        return NULL;
}

/* Keepalive events on every process stream, so that a quiet command's
 * stream is not taken for an idle connection. */
static void *keepalive_main(void *arg)
{
        (void)arg;
        _cleanup_buf_ ab_buf b = {0};
        event_envelope(&b, json_pack("{s:{}}", "keepalive"));
        for (;;) {
                struct timespec ts = {ENVD_KEEPALIVE_S, 0};
                nanosleep(&ts, NULL);
                pthread_mutex_lock(&reg_lock);
                size_t n = 0;
                for (proc *p = procs; p; p = p->next)
                        n++;
                proc **v = xcalloc(n + 1, sizeof(*v));
                n = 0;
                for (proc *p = procs; p; p = p->next) {
                        p->refs++;
                        v[n++] = p;
                }
                pthread_mutex_unlock(&reg_lock);
                for (size_t i = 0; i < n; i++) {
                        pthread_mutex_lock(&v[i]->lock);
                        if (v[i]->marker_done)
                                proc_broadcast(v[i], b.p, b.n);
                        pthread_mutex_unlock(&v[i]->lock);
                        proc_unref(v[i]);
                }
                free(v);
        }
        return NULL;
}

static void keepalive_start(void)
{
        if (spawn_detached(keepalive_main, NULL) < 0)
                ab_log(AB_LOG_WARN, "no keepalive thread for E2B process streams", NULL);
}

/* Kills process p: SIGKILL ends its tree through the exec's cancel fd;
 * SIGTERM is sent to its pid in the box. */
static int proc_signal(ab_server *s, proc *p, int sig, ab_err **err)
{
        if (p->tid) /* a PTY: its session ends (SIGKILL), or its foreground group gets sig */
                return sig == SIGKILL
                           ? ab_manager_term_close(s->mgr, p->box, p->scope, p->tid, err)
                           : ab_manager_term_signal(s->mgr, p->box, p->scope, p->tid, sig, err);
        if (sig == SIGKILL) {
                pthread_mutex_lock(&p->io_lock);
                if (p->cancel_w >= 0) {
                        p->killed = true;
                        close(p->cancel_w);
                        p->cancel_w = -1;
                }
                pthread_mutex_unlock(&p->io_lock);
                return 0;
        }
        if (!p->pid || p->pid >= (1u << 22))
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "the process's pid in the box is unknown: only SIGKILL works");
        char pid[16], signame[16];
        snprintf(pid, sizeof(pid), "%u", p->pid);
        snprintf(signame, sizeof(signame), "-%d", sig);
        const char *argv[] = {"kill", signame, pid, NULL};
        ab_use u;
        if (ab_manager_use_begin(s->mgr, p->box, p->scope, &u, err) < 0)
                return -1;
        abc_exec_req q = {.argv = argv, .stdin_fd = -1, .timeout_ms = 10000};
        abc_exec_res res;
        int rc = ab_manager_exec(s->mgr, &u, &q, NULL, NULL, &res, err);
        ab_manager_use_end(s->mgr, &u);
        if (rc == 0 && res.exit_code != 0)
                rc = ab_err_set(err, AB_E_NOT_FOUND, 0, "process %u is gone", p->pid);
        return rc;
}

void envd_forget_box(const char *id)
{
        for (;;) {
                pthread_mutex_lock(&reg_lock);
                proc *p = procs;
                while (p && (p->ended || p->killed || p->tid || strcmp(p->box, id)))
                        p = p->next;
                if (p)
                        p->refs++;
                pthread_mutex_unlock(&reg_lock);
                if (!p)
                        break;
                proc_signal(NULL, p, SIGKILL, NULL);
                proc_unref(p);
        }
}

/* ---- process.Process -------------------------------------------------------- */

/* ProcessSelector {pid | tag} -> a running process of box (a reference), or
 * NULL with *err (not_found). */
static proc *select_proc(const char *box, json_t *msg, ab_err **err)
{
        json_t *sel = json_object_get(msg, "process");
        json_t *pid = json_object_get(sel, "pid");
        json_t *tag = json_object_get(sel, "tag");
        proc *p = NULL;
        if (json_is_string(tag))
                p = proc_find(box, 0, json_string_value(tag));
        else if (json_is_integer(pid))
                p = proc_find(box, (uint32_t)json_integer_value(pid), NULL);
        else if (json_is_string(pid))
                p = proc_find(box, (uint32_t)strtoul(json_string_value(pid), NULL, 10), NULL);
        else {
                ab_err_set(err, AB_E_INVALID, 0, "process: a selector (pid or tag) is required");
                return NULL;
        }
        if (!p)
                ab_err_set(err, AB_E_NOT_FOUND, 0, "process not found");
        return p;
}

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

/* A subscriber pipe for a stream response: the write end joins p's
 * subscribers, the read end is answered. */
static enum MHD_Result subscribe(ab_req *r, proc *p, bool send_start, ab_stream_slot *slot)
{
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0) {
                if (slot)
                        ab_stream_slot_release(slot);
                return resp_error(r, 500, "internal", "pipe: %s", strerror(errno));
        }
        pthread_mutex_lock(&p->lock);
        if (send_start && p->marker_done) {
                _cleanup_buf_ ab_buf b = {0};
                start_envelope(&b, p->pid);
                if (ab_write_all(fds[1], b.p, b.n) < 0) {
                        /* the pipe is new and empty: cannot fail */
                }
        }
        sub *s = xzalloc(sizeof(*s));
        s->fd = fds[1];
        s->next = p->subs;
        p->subs = s;
        pthread_mutex_unlock(&p->lock);
        return resp_stream_counted(r, 200, "application/connect+json", fds[0], NULL, slot);
}

/* Start with "pty": the command on a terminal of the box (core/term.c),
 * its output relayed by pty_main. Takes p and slot. */
static enum MHD_Result pty_start(ab_req *r, const char *box, proc *p, json_t *pty,
                                 ab_stream_slot *slot)
{
        json_t *size = json_object_get(pty, "size");
        json_t *cj = json_object_get(size, "cols"), *rj = json_object_get(size, "rows");
        abc_term_req q = {
            .argv = (const char *const *)p->argv + 4, /* without the sh prologue */
            .env = (const char *const *)p->env,
            .cwd = p->cwd,
            .user = p->user,
            .cols = json_is_integer(cj) ? (uint32_t)json_integer_value(cj) : 80,
            .rows = json_is_integer(rj) ? (uint32_t)json_integer_value(rj) : 24,
        };
        abc_term_info info = {0};
        ab_err *e = NULL;
        ab_box_rec rec = {0};
        /* Refused before it starts when the app has no exec left (pty_main
         * takes the exec). */
        int qrc = ab_manager_get(r->srv->mgr, box, r->scope, &rec, &e);
        if (qrc == 0)
                qrc = ab_manager_quota_exec_check(r->srv->mgr, rec.app_id, &e);
        ab_box_rec_clear(&rec);
        if (qrc < 0 || ab_manager_term_open_id(r->srv->mgr, box, r->scope, &q, &info, &e) < 0) {
                ab_stream_slot_release(slot);
                p->refs = 1;
                proc_unref(p);
                enum MHD_Result ret = envd_stream_error(r, crpc_code_of(e->code), e->msg);
                ab_err_free(&e);
                return ret;
        }
        p->tid = steal_pointer(&info.id);
        abc_term_info_clear(&info);
        pthread_mutex_lock(&reg_lock);
        p->pid = next_fake_pid++;
        p->next = procs;
        procs = p;
        pthread_mutex_unlock(&reg_lock);
        p->marker_done = true;
        p->refs++; /* subscribe's, dropped below */
        enum MHD_Result ret = subscribe(r, p, true, slot);
        if (spawn_detached(pty_main, p) < 0) {
                ab_manager_term_close(r->srv->mgr, box, r->scope, p->tid, NULL);
                proc_unlist(p);
                pthread_mutex_lock(&p->lock);
                subs_close(&p->subs);
                pthread_mutex_unlock(&p->lock);
                proc_unref(p); /* the thread's, which never ran */
        }
        proc_unref(p);
        return ret;
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
        if (parse_strv(json_object_get(pc, "args"), &args, &e) < 0) {
                enum MHD_Result ret = envd_stream_error(r, "invalid_argument", e->msg);
                ab_err_free(&e);
                return ret;
        }
        json_t *envs = json_object_get(pc, "envs");
        size_t n_args = 0;
        while (args[n_args])
                n_args++;
        pthread_mutex_lock(&reg_lock);
        int running = 0;
        for (proc *q = procs; q; q = q->next)
                running += !q->ended && !strcmp(q->box, box);
        pthread_mutex_unlock(&reg_lock);
        if (running >= MAX_PROCS_PER_BOX)
                return envd_stream_error(r, "resource_exhausted",
                                         "the sandbox runs as many processes as this front allows");
        static pthread_once_t keepalive_once = PTHREAD_ONCE_INIT;
        pthread_once(&keepalive_once, keepalive_start);
        enum MHD_Result ret;
        ab_stream_slot *slot = req_stream_slot(r, &ret);
        if (!slot)
                return ret;
        proc *p = xzalloc(sizeof(*p));
        pthread_mutex_init(&p->lock, NULL);
        pthread_mutex_init(&p->io_lock, NULL);
        p->srv = r->srv;
        p->box = xstrdup(box);
        p->scope = r->scope ? xstrdup(r->scope) : NULL;
        p->stdin_w = p->cancel_w = p->stdin_r = p->cancel_r = -1;
        p->refs = 2; /* the registry's and the thread's */
        const char *tag = json_string_value(json_object_get(msg, "tag"));
        p->tag = tag ? xstrdup(tag) : NULL;
        p->config = json_deep_copy(pc);
        p->argv = xcalloc(n_args + 6, sizeof(char *));
        p->argv[0] = xstrdup("/bin/sh");
        p->argv[1] = xstrdup("-c");
        p->argv[2] = xstrdup(PROLOGUE);
        p->argv[3] = xstrdup("sh");
        p->argv[4] = xstrdup(cmd);
        for (size_t i = 0; i < n_args; i++)
                p->argv[5 + i] = steal_pointer(&args[i]);
        size_t ne = json_is_object(envs) ? json_object_size(envs) : 0, k = 0;
        p->env = xcalloc(ne + 1, sizeof(char *));
        const char *key;
        json_t *val;
        json_object_foreach(envs, key, val)
        {
                if (json_is_string(val) && *key && !strchr(key, '='))
                        p->env[k++] = xasprintf("%s=%s", key, json_string_value(val));
        }
        const char *cwd = json_string_value(json_object_get(pc, "cwd"));
        p->cwd = cwd && *cwd ? envd_abs_path(cwd, NULL) : NULL;
        p->user = envd_user(r);
        p->timeout_ms = call_timeout_ms(r);
        if (!p->timeout_ms)
                p->timeout_ms = AB_MAX_TIMEOUT_S * 1000u;
        if (json_is_object(pty))
                return pty_start(r, box, p, pty, slot);
        int in[2] = {-1, -1}, cancel[2];
        json_t *sj = json_object_get(msg, "stdin");
        bool want_stdin = json_is_true(sj);
        if ((want_stdin && pipe2(in, O_CLOEXEC) < 0) || pipe2(cancel, O_CLOEXEC) < 0) {
                ab_stream_slot_release(slot);
                p->refs = 1;
                proc_unref(p);
                return resp_error(r, 500, "internal", "pipe: %s", strerror(errno));
        }
        p->stdin_r = in[0];
        p->stdin_w = in[1];
        p->cancel_r = cancel[0];
        p->cancel_w = cancel[1];
        if (ab_manager_use_begin(r->srv->mgr, box, r->scope, &p->use, &e) < 0) {
                ab_stream_slot_release(slot);
                p->refs = 1;
                proc_unref(p);
                const char *code = e->code == AB_E_NOT_FOUND ? "not_found" : "unavailable";
                ret = envd_stream_error(r, code, e->msg);
                ab_err_free(&e);
                return ret;
        }
        /* a pause freezes the command with the box, as E2B's does */
        ab_manager_use_hold(r->srv->mgr, &p->use);
        p->refs++; /* subscribe's, dropped below */
        ret = subscribe(r, p, false, slot);
        pthread_mutex_lock(&reg_lock);
        p->next = procs;
        procs = p;
        pthread_mutex_unlock(&reg_lock);
        if (spawn_detached(proc_main, p) < 0) {
                ab_manager_use_end(r->srv->mgr, &p->use);
                pthread_mutex_lock(&reg_lock);
                for (proc **l = &procs; *l; l = &(*l)->next)
                        if (*l == p) {
                                *l = p->next;
                                break;
                        }
                pthread_mutex_unlock(&reg_lock);
                pthread_mutex_lock(&p->lock);
                _cleanup_buf_ ab_buf b = {0};
                crpc_end(&b, "unavailable", "cannot start a thread");
                proc_broadcast(p, b.p, b.n);
                subs_close(&p->subs);
                pthread_mutex_unlock(&p->lock);
                p->refs = 1;
        }
        proc_unref(p);
        return ret;
}

static enum MHD_Result process_connect(ab_req *r, const char *box, json_t *msg)
{
        ab_err *e = NULL;
        proc *p = select_proc(box, msg, &e);
        if (!p) {
                enum MHD_Result ret = envd_stream_error(r, crpc_code_of(e->code), e->msg);
                ab_err_free(&e);
                return ret;
        }
        enum MHD_Result ret;
        ab_stream_slot *slot = req_stream_slot(r, &ret);
        if (slot)
                ret = subscribe(r, p, true, slot);
        proc_unref(p);
        return ret;
}

static enum MHD_Result process_list(ab_req *r, const char *box)
{
        json_t *a = json_array();
        pthread_mutex_lock(&reg_lock);
        for (proc *p = procs; p; p = p->next) {
                if (p->ended || !p->pid || strcmp(p->box, box))
                        continue;
                json_t *pi = json_pack("{s:O,s:I}", "config", p->config, "pid", (json_int_t)p->pid);
                if (p->tag)
                        json_object_set_new(pi, "tag", json_string(p->tag));
                json_array_append_new(a, pi);
        }
        pthread_mutex_unlock(&reg_lock);
        return resp_json(r, 200, json_pack("{s:o}", "processes", a));
}

/* Writes input (base64 in msg's input.stdin) to p's stdin. */
static int proc_input(proc *p, json_t *input, ab_err **err)
{
        json_t *in = json_object_get(input, "stdin");
        json_t *pin = json_object_get(input, "pty");
        if (!in && !pin)
                return ab_err_set(err, AB_E_INVALID, 0, "input.stdin or input.pty: required");
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        json_t *v = in ? in : pin;
        if (!json_is_string(v) || crpc_b64_decode(json_string_value(v), &data, &len) < 0)
                return ab_err_set(err, AB_E_INVALID, 0, "input: not base64");
        if (p->tid) {
                for (size_t off = 0; off < len;) { /* the keeper takes 60 KiB a call */
                        size_t n = len - off > 60000 ? 60000 : len - off;
                        if (ab_manager_term_input(p->srv->mgr, p->box, p->scope, p->tid, data + off,
                                                  n, err) < 0)
                                return -1;
                        off += n;
                }
                return 0;
        }
        if (!in)
                return ab_err_set(err, AB_E_INVALID, 0, "input.pty: the process has no PTY");
        pthread_mutex_lock(&p->io_lock);
        int fd = p->stdin_w >= 0 ? dup(p->stdin_w) : -1;
        pthread_mutex_unlock(&p->io_lock);
        if (fd < 0)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "the process has no stdin (start it with stdin: true) or it "
                                  "was closed");
        int rc = ab_write_all(fd, data, len);
        close(fd);
        if (rc < 0)
                return ab_err_set(err, AB_E_CONFLICT, -rc, "the process no longer reads stdin");
        return 0;
}

static enum MHD_Result process_unary(ab_req *r, const char *box, const char *method, json_t *msg)
{
        ab_err *e = NULL;
        proc *p = select_proc(box, msg, &e);
        if (!p)
                return envd_rpc_err(r, e);
        int rc = 0;
        if (!strcmp(method, "Update")) {
                json_t *size = json_object_get(json_object_get(msg, "pty"), "size");
                json_t *cj = json_object_get(size, "cols"), *rj = json_object_get(size, "rows");
                if (!p->tid)
                        rc = ab_err_set(&e, AB_E_INVALID, 0, "the process has no PTY");
                else if (json_is_integer(cj) && json_is_integer(rj))
                        rc = ab_manager_term_resize(r->srv->mgr, box, r->scope, p->tid,
                                                    (uint32_t)json_integer_value(cj),
                                                    (uint32_t)json_integer_value(rj), &e);
        } else if (!strcmp(method, "SendInput")) {
                rc = proc_input(p, json_object_get(msg, "input"), &e);
        } else if (!strcmp(method, "CloseStdin")) {
                pthread_mutex_lock(&p->io_lock);
                if (p->stdin_w >= 0) {
                        close(p->stdin_w);
                        p->stdin_w = -1;
                }
                pthread_mutex_unlock(&p->io_lock);
        } else { /* SendSignal */
                json_t *sj = json_object_get(msg, "signal");
                const char *sn = json_string_value(sj);
                int sig = json_is_integer(sj)                   ? (int)json_integer_value(sj)
                          : sn && !strcmp(sn, "SIGNAL_SIGKILL") ? SIGKILL
                          : sn && !strcmp(sn, "SIGNAL_SIGTERM") ? SIGTERM
                                                                : 0;
                if (sig != SIGKILL && sig != SIGTERM)
                        rc = ab_err_set(&e, AB_E_INVALID, 0, "signal: SIGKILL or SIGTERM");
                else
                        rc = proc_signal(r->srv, p, sig, &e);
        }
        proc_unref(p);
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
        proc *p = NULL;
        size_t i;
        json_t *m;
        int rc = 0;
        json_array_foreach(msgs, i, m)
        {
                json_t *st = json_object_get(m, "start");
                json_t *data = json_object_get(m, "data");
                if (st && !p) {
                        p = select_proc(box, st, &e);
                        if (!p) {
                                rc = -1;
                                break;
                        }
                } else if (data) {
                        if (!p) {
                                rc = ab_err_set(&e, AB_E_INVALID, 0, "data before start");
                                break;
                        }
                        if ((rc = proc_input(p, json_object_get(data, "input"), &e)) < 0)
                                break;
                }
        }
        json_decref(msgs);
        if (p)
                proc_unref(p);
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
        atomic_store(&stopping, true);
        for (int i = 0; i < 500; i++) { /* 5 s */
                pthread_mutex_lock(&reg_lock);
                bool busy = procs != NULL;
                for (proc *p = procs; p; p = p->next) {
                        pthread_mutex_lock(&p->io_lock);
                        if (p->cancel_w >= 0) {
                                p->killed = true;
                                close(p->cancel_w);
                                p->cancel_w = -1;
                        }
                        pthread_mutex_unlock(&p->io_lock);
                }
                pthread_mutex_unlock(&reg_lock);
                if (!busy)
                        break;
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
        }
        atomic_store(&stopping, false);
}
