/* shell.c - AIO's shell sessions (/v1/shell/...) and /v1/bash/exec.
 *
 * A session is a bash on a terminal of the box, kept by the box's init (it
 * outlives every request and a restart of the server), tagged
 * {"front":"aio","session":ID,"cwd":DIR} so that any server finds it again.
 * A command is written to a file in the box and sourced by one line of ours
 * typed into the shell, between a start mark and an end mark (printed by
 * PROMPT_COMMAND with $?), each carrying the run's nonce: the user's text
 * never becomes part of a line we type. What a session runs now (its nonce,
 * command and terminal) is a small file in the box too, so a view, wait or
 * kill after a restart sees the same run; its output is what init's ring
 * kept of the terminal (the last 64 KiB), between the marks. A synchronous
 * exec attaches to the terminal and reads the whole output as it comes.
 *
 * Each run is a user's command for the exec door (ab_manager_cmd_record:
 * the app's exec quota, an audit row, an event). Bounded: AIO_SESSIONS_MAX
 * sessions per box, one run at a time per session (409 while one runs),
 * the output answered at most AIO_OUTPUT_MAX characters (AIO's truncation),
 * a synchronous exec waits at most WAIT_MAX_MS; hard_timeout ^Cs the run
 * and, when it ignores that, closes its shell (the session gets a new one). */
#include "fronts/aio/aio_int.h"

#include "base/buf.h"
#include "base/codec.h"
#include "base/id.h"
#include "base/limits.h"
#include "base/util.h"
#include "kit/shell.h"
#include "kit/term.h"

#include <ctype.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SESS_DIR         "/tmp/.agentbox-aio"
#define AIO_SESSIONS_MAX 8
#define DEFAULT_SESSION  "default"
#define SID_MAX          64
#define AIO_OUTPUT_MAX   30000  /* characters, as AIO's `truncate` */
#define NO_CHANGE_MS     120000 /* AIO's default no_change_timeout */
#define WAIT_MAX_MS      3600000
#define KILL_GRACE_MS    3000
#define RUN_FILE_MAX     (1u << 20)
#define COMMAND_MAX      (1u << 20)
#define KEEP_MAX         (1u << 20) /* output kept by a synchronous exec */

static atomic_bool stopping;

void aio_shell_quiesce(void)
{
        atomic_store(&stopping, true);
}

/* ---- sessions a call of this server is starting a run in ------------------ */

/* Between the check that a session is idle and the line typed into it, the
 * session is this call's: a second exec at once is 409 (after the line,
 * the run's own state in the box says it runs). */
static kit_claims starting = KIT_CLAIMS_INIT;

/* ---- sessions: terminals tagged with their id --------------------------- */

typedef struct sess {
        char *tid;
        char *cwd; /* the directory it started in, or NULL */
        bool running;
} sess;

static void sess_clear(sess *s)
{
        free(s->tid);
        free(s->cwd);
        *s = (sess){0};
}

static bool sid_ok(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > SID_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
                        return false;
        return strcmp(s, ".") && strcmp(s, "..");
}

/* The session id a tag names, or NULL (j: the parsed tag). */
static const char *tag_session(json_t *j)
{
        const char *front = json_string_value(json_object_get(j, "front"));
        if (!front || strcmp(front, "aio"))
                return NULL;
        return json_string_value(json_object_get(j, "session"));
}

/* Session sid of the call's box: 1 with *s, 0 when there is none, -1 with
 * *err. *count (when not NULL) gets the box's number of sessions. */
static int sess_find(ab_req *r, const char *sid, sess *s, size_t *count, ab_err **err)
{
        abc_term_info *v;
        size_t n;
        *s = (sess){0};
        if (count)
                *count = 0;
        if (ab_manager_term_list(r->srv->mgr, aio_box(r), r->scope, &v, &n, err) < 0)
                return -1;
        int found = 0;
        for (size_t i = 0; i < n; i++) {
                json_t *j = v[i].tag ? json_loads(v[i].tag, 0, NULL) : NULL;
                const char *name = tag_session(j);
                if (name && count)
                        (*count)++;
                if (name && sid && !found && !strcmp(name, sid)) {
                        const char *c = json_string_value(json_object_get(j, "cwd"));
                        s->tid = steal_pointer(&v[i].id);
                        s->cwd = c ? xstrdup(c) : NULL;
                        s->running = v[i].running;
                        found = 1;
                }
                json_decref(j);
        }
        abc_term_infos_free(v, n);
        return found;
}

/* Starts session sid's shell (kit_shell_open) in cwd (NULL: /workspace),
 * tagged with the session. */
static int sess_open(ab_req *r, const char *sid, const char *cwd, char **tid, ab_err **err)
{
        json_t *tj = json_pack("{s:s,s:s}", "front", "aio", "session", sid);
        if (cwd)
                json_object_set_new(tj, "cwd", json_string(cwd));
        _cleanup_free_ char *tag = json_dumps(tj, JSON_COMPACT);
        json_decref(tj);
        return kit_shell_open(r->srv->mgr, aio_box(r), r->scope, tag, cwd, tid, err);
}

/* Session sid with a live shell: found, made (within AIO_SESSIONS_MAX), or
 * given a new shell when its last one exited. *made: it was made now. */
static int sess_ensure(ab_req *r, const char *sid, const char *cwd, sess *s, bool *made,
                       ab_err **err)
{
        size_t count;
        *made = false;
        int rc = sess_find(r, sid, s, &count, err);
        if (rc < 0)
                return -1;
        if (rc == 1 && s->running)
                return 0;
        if (rc == 1) { /* an `exit` ended its shell: the session goes on in a new one */
                ab_manager_term_close(r->srv->mgr, aio_box(r), r->scope, s->tid, NULL);
                free(s->tid);
                s->tid = NULL;
                cwd = s->cwd;
        } else if (count >= AIO_SESSIONS_MAX) {
                return ab_err_set(err, AB_E_QUOTA, 0,
                                  "sandbox has %d shell sessions already (the most it keeps): "
                                  "delete one first",
                                  AIO_SESSIONS_MAX);
        } else {
                s->cwd = cwd ? xstrdup(cwd) : NULL;
                *made = true;
        }
        if (sess_open(r, sid, cwd, &s->tid, err) < 0)
                return -1;
        s->running = true;
        return 0;
}

/* ---- a session's run: its file in the box and its marks ------------------ */

typedef struct run {
        char *nonce, *command, *tid;
        char *ended; /* "hard_timeout" or "terminated" when we ended it, or NULL */
} run;

static void run_clear(run *x)
{
        free(x->nonce);
        free(x->command);
        free(x->tid);
        free(x->ended);
        *x = (run){0};
}

static int buf_out(void *ud, int stream, const void *buf, size_t len)
{
        (void)stream;
        ab_buf *b = ud;
        if (b->n + len > RUN_FILE_MAX)
                return -1;
        ab_buf_add(b, buf, len);
        return 0;
}

/* The run of session sid: 1 with *x, 0 when it has none yet, -1 with *err. */
static int run_read(ab_req *r, ab_use *u, const char *sid, run *x, ab_err **err)
{
        *x = (run){0};
        _cleanup_free_ char *path = xasprintf(SESS_DIR "/%s.run", sid);
        _cleanup_buf_ ab_buf b = {0};
        if (ab_manager_file_read(r->srv->mgr, u, path, 0, RUN_FILE_MAX, buf_out, &b, err) < 0) {
                if ((*err)->code != AB_E_NOT_FOUND)
                        return -1;
                ab_err_free(err);
                return 0;
        }
        json_t *j = json_loadb(b.p ? b.p : "", b.n, 0, NULL);
        const char *nonce = json_string_value(json_object_get(j, "nonce"));
        const char *cmd = json_string_value(json_object_get(j, "command"));
        const char *tid = json_string_value(json_object_get(j, "tid"));
        const char *ended = json_string_value(json_object_get(j, "ended"));
        int rc = nonce && cmd && tid;
        if (rc) {
                x->nonce = xstrdup(nonce);
                x->command = xstrdup(cmd);
                x->tid = xstrdup(tid);
                x->ended = ended ? xstrdup(ended) : NULL;
        }
        json_decref(j);
        return rc;
}

static int run_write(ab_req *r, ab_use *u, const char *sid, const run *x, ab_err **err)
{
        json_t *j =
            json_pack("{s:s,s:s,s:s}", "nonce", x->nonce, "command", x->command, "tid", x->tid);
        if (x->ended)
                json_object_set_new(j, "ended", json_string(x->ended));
        _cleanup_free_ char *txt = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        _cleanup_free_ char *path = xasprintf(SESS_DIR "/%s.run", sid);
        return ab_manager_file_write(r->srv->mgr, u, path, txt, strlen(txt), -1, ABC_W_MKPARENTS,
                                     0600, err);
}

/* What a session's run reads as now. */
typedef struct run_state {
        const char *status; /* AIO's BashCommandStatus */
        bool has_code;
        int code;
        json_t *output; /* a string */
} run_state;

/* The state of run x of session s (from the terminal's ring). */
static int state_of(ab_req *r, const sess *s, const run *x, run_state *st, ab_err **err)
{
        *st = (run_state){.status = "completed"};
        if (!s->tid || !s->running || strcmp(s->tid, x->tid)) {
                /* its shell is gone: the run ended with it */
                st->status = x->ended ? x->ended : "terminated";
                st->output = json_string("");
                return 0;
        }
        _cleanup_buf_ ab_buf b = {0};
        abc_term_info t;
        int rc = kit_term_kept(r->srv->mgr, aio_box(r), r->scope, s->tid, &t, &b, err);
        abc_term_info_clear(&t);
        if (rc < 0)
                return -1;
        size_t off, len;
        bool whole;
        int done = aio_marks_scan(b.p, b.n, x->nonce, &off, &len, &st->code, &whole);
        st->output = aio_text_cut(b.p ? b.p + off : "", len, AIO_OUTPUT_MAX);
        if (!done)
                st->status = "running";
        else if (x->ended)
                st->status = x->ended;
        else
                st->has_code = true;
        return 0;
}

static json_t *state_json(const char *sid, const char *command, run_state *st)
{
        json_t *j = json_pack("{s:s,s:s,s:s,s:o,s:[]}", "session_id", sid, "command", command,
                              "status", st->status, "output", st->output, "console");
        st->output = NULL;
        json_object_set_new(j, "exit_code", st->has_code ? json_integer(st->code) : json_null());
        return j;
}

/* ---- the calls ------------------------------------------------------------ */

/* Answers 422 for e (freed). */
static enum MHD_Result bad_field(ab_req *r, ab_err *e)
{
        enum MHD_Result ret = aio_fail(r, 422, NULL, "%s", e->msg);
        ab_err_free(&e);
        return ret;
}

/* The body's session id (field `name`; absent: dflt, NULL = required). */
static int body_sid(json_t *b, const char *name, const char *dflt, const char **sid, ab_err **err)
{
        *sid = dflt;
        if (aio_opt_str(b, name, sid, err) < 0)
                return -1;
        if (!*sid)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: required", name);
        if (!sid_ok(*sid))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "%s: 1..%d letters, digits, '.', '_' or '-'", name, SID_MAX);
        return 0;
}

/* A working directory the body names: absolute; checked to be a directory
 * of the box. *dir NULL when it is not and !strict (AIO falls back to the
 * session's). */
static int exec_dir(ab_req *r, ab_use *u, const char *path, bool strict, const char **dir,
                    ab_err **err)
{
        *dir = NULL;
        if (!path || !*path)
                return 0;
        if (path[0] != '/')
                return ab_err_set(err, AB_E_INVALID, 0, "exec_dir: must be an absolute path");
        abc_stat st = {0};
        int rc = ab_manager_file_stat(r->srv->mgr, u, path, false, &st, err);
        bool isdir = rc == 0 && st.type == ABC_DIR;
        abc_stat_clear(&st);
        if (rc < 0 && (*err)->code != AB_E_NOT_FOUND)
                return -1;
        ab_err_free(err);
        if (isdir)
                *dir = path;
        else if (strict)
                return ab_err_set(err, AB_E_INVALID, 0, "exec_dir: %s is not a directory", path);
        return 0;
}

/* The run's files: its command (after a cd to dir: the path read from a
 * file of its own, never quoted into shell text), then its record. */
static int run_files(ab_req *r, ab_use *u, const char *sid, const run *x, const char *dir,
                     ab_err **err)
{
        _cleanup_free_ char *cmdf = xasprintf(SESS_DIR "/%s.cmd", sid);
        _cleanup_free_ char *cwdf = xasprintf(SESS_DIR "/%s.cwd", sid);
        _cleanup_free_ char *text =
            dir ? xasprintf("cd -- \"$(cat '%s')\" || return 1\n%s\n", cwdf, x->command)
                : xasprintf("%s\n", x->command);
        ab_manager *m = r->srv->mgr;
        if (dir &&
            ab_manager_file_write(m, u, cwdf, dir, strlen(dir), -1, ABC_W_MKPARENTS, 0600, err) < 0)
                return -1;
        if (ab_manager_file_write(m, u, cmdf, text, strlen(text), -1, ABC_W_MKPARENTS, 0600, err) <
            0)
                return -1;
        return run_write(r, u, sid, x, err);
}

/* A synchronous exec's wait on the attached terminal. */
typedef struct waiter {
        ab_req *r;
        ab_term_attach *a;
        const char *nonce;
        ab_buf b;
        bool done, dropped;
        int code;
        uint64_t last_out, until, hard, no_change, grace;
        const char *status; /* why it stopped before the end mark, or NULL */
        bool closed;        /* its shell was closed (it ignored ^C) */
} waiter;

static int waiter_out(void *ud, int stream, const void *data, size_t len)
{
        (void)stream;
        waiter *w = ud;
        ab_buf_add(&w->b, data, len);
        w->last_out = ab_now_ms();
        size_t off, n;
        bool whole;
        w->done = aio_marks_scan(w->b.p, w->b.n, w->nonce, &off, &n, &w->code, &whole) == 1;
        if (!w->done && whole && w->b.n > KEEP_MAX) {
                /* keep the start mark and the last half: the middle goes */
                size_t keep = KEEP_MAX / 2, cut = w->b.n - keep - off;
                memmove(w->b.p + off, w->b.p + off + cut, w->b.n - off - cut);
                w->b.n -= cut;
                w->dropped = true;
        }
        return w->done;
}

static int waiter_idle(void *ud, int polled, short revents)
{
        (void)polled, (void)revents;
        waiter *w = ud;
        uint64_t now = ab_now_ms();
        if (w->grace) {
                if (now < w->grace)
                        return 0;
                /* the run ignores ^C: its shell goes (a new one next time) */
                ab_manager_term_close(w->r->srv->mgr, aio_box(w->r), w->r->scope, w->a->info.id,
                                      NULL);
                w->closed = true;
                return 1;
        }
        if (w->hard && now >= w->hard) {
                abc_term_input(w->a->stream, "\003", 1);
                w->status = "hard_timeout";
                w->grace = now + KILL_GRACE_MS;
                return 0;
        }
        if (atomic_load(&stopping) || req_client_gone(w->r) || now >= w->until) {
                w->status = "running";
                return 1;
        }
        if (w->no_change && now - w->last_out >= w->no_change) {
                w->status = "no_change_timeout";
                return 1;
        }
        return 0;
}

typedef struct exec_opts {
        const char *command, *sid, *dir_req;
        bool async, strict, truncate;
        int64_t timeout_ms, no_change_ms, hard_ms;
} exec_opts;

static int exec_parse(json_t *b, exec_opts *o, ab_err **err)
{
        *o = (exec_opts){.truncate = true, .timeout_ms = -1, .no_change_ms = -1, .hard_ms = -1};
        const double max = AB_MAX_TIMEOUT_S;
        if (aio_opt_str(b, "command", &o->command, err) < 0 ||
            body_sid(b, "id", DEFAULT_SESSION, &o->sid, err) < 0 ||
            aio_opt_str(b, "exec_dir", &o->dir_req, err) < 0 ||
            aio_opt_bool(b, "async_mode", &o->async, err) < 0 ||
            aio_opt_bool(b, "strict", &o->strict, err) < 0 ||
            aio_opt_bool(b, "truncate", &o->truncate, err) < 0 ||
            aio_opt_secs(b, "timeout", max, &o->timeout_ms, err) < 0 ||
            aio_opt_secs(b, "no_change_timeout", max, &o->no_change_ms, err) < 0 ||
            aio_opt_secs(b, "hard_timeout", max, &o->hard_ms, err) < 0)
                return -1;
        if (!o->command || !*o->command)
                return ab_err_set(err, AB_E_INVALID, 0, "command: required, not empty");
        if (strlen(o->command) > COMMAND_MAX)
                return ab_err_set(err, AB_E_INVALID, 0, "command: at most %u bytes", COMMAND_MAX);
        return 0;
}

/* Waits for the run typed into s (attached as a) as o says. */
static void exec_wait(ab_req *r, const exec_opts *o, const run *x, ab_term_attach *a, waiter *w)
{
        uint64_t now = ab_now_ms();
        *w = (waiter){.r = r, .a = a, .nonce = x->nonce, .last_out = now};
        w->until = now + (o->timeout_ms >= 0 ? (uint64_t)o->timeout_ms : WAIT_MAX_MS);
        w->no_change = o->no_change_ms >= 0 ? (uint64_t)o->no_change_ms : NO_CHANGE_MS;
        w->hard = o->hard_ms > 0 ? now + (uint64_t)o->hard_ms : 0;
        const kit_term_pump pump = {
            .output = waiter_out, .idle = waiter_idle, .extra_fd = -1, .tick_ms = 100};
        int exit_code = -1;
        kit_term_end end = kit_term_pump_run(a, &pump, w, &exit_code);
        if (end != KIT_TERM_STOPPED && !w->done) { /* `exit` in the run: its shell is gone */
                w->status = "terminated";
                w->closed = true;
        }
}

/* POST /v1/shell/exec {command, id?, exec_dir?, async_mode, timeout,
 * no_change_timeout, hard_timeout, strict, truncate}. */
enum MHD_Result aio_shell_exec(ab_req *r)
{
        enum MHD_Result ret;
        json_t *b;
        if (aio_body(r, &b, &ret) < 0)
                return ret;
        ab_err *e = NULL;
        exec_opts o;
        if (exec_parse(b, &o, &e) < 0) {
                json_decref(b);
                return bad_field(r, e);
        }
        if (!kit_claim(&starting, aio_box(r), o.sid)) {
                ret = aio_fail(r, 409, NULL, "session %s is starting a command already", o.sid);
                json_decref(b); /* o's strings are b's */
                return ret;
        }
        ab_use u;
        if (aio_use(r, &u, &ret) < 0) {
                kit_release(&starting, aio_box(r), o.sid);
                json_decref(b);
                return ret;
        }
        sess s = {0};
        run prev = {0}, x = {0};
        bool made = false;
        const char *dir = NULL;
        ab_term_attach a = {.fd = -1};
        bool attached = false;
        int rc = exec_dir(r, &u, o.dir_req, o.strict, &dir, &e);
        if (rc == 0)
                rc = sess_ensure(r, o.sid, dir, &s, &made, &e);
        if (rc == 0 && !made && run_read(r, &u, o.sid, &prev, &e) == 1) {
                run_state st;
                rc = state_of(r, &s, &prev, &st, &e);
                json_decref(st.output);
                if (rc == 0 && !strcmp(st.status, "running"))
                        rc = ab_err_set(&e, AB_E_CONFLICT, 0,
                                        "session %s runs a command already: view, wait for or "
                                        "kill it first",
                                        o.sid);
        }
        if (e && rc == 0)
                ab_err_free(&e);
        if (rc == 0) {
                char nonce[17];
                ab_random_hex(nonce, sizeof(nonce), "", 8);
                x = (run){
                    .nonce = xstrdup(nonce), .command = xstrdup(o.command), .tid = xstrdup(s.tid)};
                /* a user's command: the exec door admits and records it */
                rc = ab_manager_cmd_record(r->srv->mgr, &u, o.command, s.tid, &e);
        }
        if (rc == 0)
                rc = run_files(r, &u, o.sid, &x, dir, &e);
        if (rc == 0 && !o.async) {
                rc = ab_manager_term_attach(r->srv->mgr, aio_box(r), r->scope, s.tid, &a, &e);
                attached = rc == 0;
        }
        if (rc == 0) {
                _cleanup_free_ char *line =
                    xasprintf("__ab_nonce=%s; printf '\\036S%%s\\036' \"$__ab_nonce\"; "
                              ". '" SESS_DIR "/%s.cmd'\n",
                              x.nonce, o.sid);
                rc = ab_manager_term_input(r->srv->mgr, aio_box(r), r->scope, s.tid, line,
                                           strlen(line), &e);
        }
        kit_release(&starting, aio_box(r), o.sid);
        json_t *ans = NULL;
        if (rc == 0 && o.async) {
                run_state st = {.status = "running", .output = json_string("")};
                ans = state_json(o.sid, o.command, &st);
        } else if (rc == 0) {
                waiter w;
                exec_wait(r, &o, &x, &a, &w);
                size_t off = 0, n = 0;
                bool whole;
                int code = -1;
                if (w.b.n)
                        aio_marks_scan(w.b.p, w.b.n, x.nonce, &off, &n, &code, &whole);
                _cleanup_buf_ ab_buf out = {0};
                if (w.dropped)
                        ab_buf_printf(&out, "... [earlier output dropped] ...\n");
                ab_buf_add(&out, w.b.p ? w.b.p + off : "", n);
                run_state st = {.status = w.done ? "completed" : w.status};
                st.has_code = w.done;
                st.code = w.code;
                st.output =
                    aio_text_cut(out.p ? out.p : "", out.n, o.truncate ? AIO_OUTPUT_MAX : 0);
                if (!w.done && w.status && !strcmp(w.status, "hard_timeout")) {
                        free(x.ended);
                        x.ended = xstrdup("hard_timeout");
                        ab_err *we = NULL;
                        if (run_write(r, &u, o.sid, &x, &we) < 0)
                                ab_err_free(&we);
                }
                if (w.done && w.status && !strcmp(w.status, "hard_timeout")) {
                        /* it ended on our ^C */
                        st.status = "hard_timeout";
                        st.has_code = false;
                        free(x.ended);
                        x.ended = xstrdup("hard_timeout");
                        ab_err *we = NULL;
                        if (run_write(r, &u, o.sid, &x, &we) < 0)
                                ab_err_free(&we);
                }
                ab_buf_free(&w.b);
                ans = state_json(o.sid, o.command, &st);
        }
        if (attached)
                ab_manager_term_detach(r->srv->mgr, &a);
        ab_manager_use_end(r->srv->mgr, &u);
        json_decref(b);
        sess_clear(&s);
        run_clear(&prev);
        run_clear(&x);
        if (!ans)
                return aio_err(r, e);
        return aio_ok(r, ans);
}

/* The session a body's `id` names and its run: 0, or -1 having answered
 * (404 for no session). *has_run: it ran something. */
static int lookup(ab_req *r, ab_use *u, const char *sid, sess *s, run *x, bool *has_run,
                  enum MHD_Result *ret)
{
        ab_err *e = NULL;
        int rc = sess_find(r, sid, s, NULL, &e);
        if (rc == 0) {
                *ret = aio_fail(r, 404, NULL, "no shell session %s in this sandbox", sid);
                return -1;
        }
        if (rc == 1)
                rc = run_read(r, u, sid, x, &e);
        if (rc < 0) {
                sess_clear(s);
                *ret = aio_err(r, e);
                return -1;
        }
        *has_run = rc == 1;
        return 0;
}

/* A session call: its body, the session its `id` names (sid, within the
 * body), that session's last run (has_run: it ran something) and a use of
 * the box. */
typedef struct session_call {
        ab_req *r;
        json_t *b;
        const char *sid;
        ab_use u;
        sess s;
        run x;
        bool has_run;
        bool bad; /* the call's error is a bad field */
} session_call;

/* A session call's bad field: its answer is 422 (with the error). */
static json_t *bad_call(session_call *sc)
{
        sc->bad = true;
        return NULL;
}

/* What a session call does once begun: its answer's data, or NULL with
 * *err (a bad field: bad_call). */
typedef json_t *(*session_fn)(ab_req *r, session_call *sc, ab_err **err);

/* Runs fn as the session call of r: reads the body, finds the session its
 * `id` names and begins a use of the box (answering a failure of these
 * itself), then ends the call and answers what fn gave. */
static enum MHD_Result session_call_run(ab_req *r, session_fn fn)
{
        session_call sc = {.r = r};
        enum MHD_Result ret;
        if (aio_body(r, &sc.b, &ret) < 0)
                return ret;
        ab_err *e = NULL;
        json_t *ans;
        if (body_sid(sc.b, "id", NULL, &sc.sid, &e) < 0) {
                ret = bad_field(r, e);
                goto out_body;
        }
        if (aio_use(r, &sc.u, &ret) < 0)
                goto out_body;
        if (lookup(r, &sc.u, sc.sid, &sc.s, &sc.x, &sc.has_run, &ret) < 0)
                goto out_use;
        ans = fn(r, &sc, &e);
        ab_manager_use_end(r->srv->mgr, &sc.u);
        json_decref(sc.b);
        sess_clear(&sc.s);
        run_clear(&sc.x);
        if (ans)
                return aio_ok(r, ans);
        return sc.bad ? bad_field(r, e) : aio_err(r, e);
out_use:
        ab_manager_use_end(r->srv->mgr, &sc.u);
out_body:
        json_decref(sc.b);
        return ret;
}

/* The state of the session's last run ("completed" with no output when it
 * ran nothing). */
static int session_state(session_call *sc, run_state *st, ab_err **err)
{
        if (!sc->has_run) {
                *st = (run_state){.status = "completed", .output = json_string("")};
                return 0;
        }
        return state_of(sc->r, &sc->s, &sc->x, st, err);
}

/* POST /v1/shell/view {id}: the last run's output and status. */
static json_t *view_call(ab_req *r, session_call *sc, ab_err **err)
{
        run_state st;
        if (session_state(sc, &st, err) != 0)
                return NULL;
        return state_json(sc->sid, sc->has_run ? sc->x.command : "", &st);
}

/* POST /v1/shell/wait {id, seconds?, max_wait_seconds?}: until the run
 * ends or the time is up: {status}. */
static json_t *wait_call(ab_req *r, session_call *sc, ab_err **err)
{
        int64_t secs = 30, max = -1;
        if (aio_opt_int(sc->b, "seconds", 0, AB_MAX_TIMEOUT_S, &secs, err) < 0 ||
            aio_opt_int(sc->b, "max_wait_seconds", 0, AB_MAX_TIMEOUT_S, &max, err) < 0) {
                return bad_call(sc);
        }
        if (max >= 0 && max < secs)
                secs = max;
        uint64_t until = ab_now_ms() + (uint64_t)secs * 1000;
        run_state st = {0};
        int rc;
        for (;;) {
                rc = session_state(sc, &st, err);
                if (rc < 0 || strcmp(st.status, "running") || ab_now_ms() >= until ||
                    atomic_load(&stopping) || req_client_gone(r))
                        break;
                json_decref(st.output);
                usleep(200 * 1000);
        }
        json_t *ans = rc == 0 ? json_pack("{s:s}", "status", st.status) : NULL;
        json_decref(st.output);
        return ans;
}

/* POST /v1/shell/kill {id}: ^C to the run; a run that ignores it loses its
 * shell (the session gets a new one). {status, exit_code}. */
static json_t *kill_call(ab_req *r, session_call *sc, ab_err **err)
{
        run_state st = {0};
        int rc = session_state(sc, &st, err);
        bool was_running = rc == 0 && !strcmp(st.status, "running");
        if (was_running) {
                ab_manager_term_input(r->srv->mgr, aio_box(r), r->scope, sc->s.tid, "\003", 1,
                                      NULL);
                uint64_t until = ab_now_ms() + KILL_GRACE_MS;
                while (rc == 0 && !strcmp(st.status, "running") && ab_now_ms() < until) {
                        usleep(100 * 1000);
                        json_decref(st.output);
                        rc = state_of(r, &sc->s, &sc->x, &st, err);
                }
                if (rc == 0 && !strcmp(st.status, "running"))
                        ab_manager_term_close(r->srv->mgr, aio_box(r), r->scope, sc->s.tid, NULL);
                free(sc->x.ended);
                sc->x.ended = xstrdup("terminated");
                if (rc == 0)
                        rc = run_write(r, &sc->u, sc->sid, &sc->x, err);
        }
        json_t *ans = NULL;
        if (rc == 0) {
                ans = json_pack("{s:s}", "status", was_running ? "terminated" : st.status);
                json_object_set_new(ans, "exit_code",
                                    st.has_code ? json_integer(st.code) : json_null());
                json_object_set_new(ans, "returncode",
                                    st.has_code ? json_integer(st.code) : json_null());
        }
        json_decref(st.output);
        return ans;
}

/* POST /v1/shell/write {id, input, press_enter}: keystrokes to the run. */
static json_t *write_call(ab_req *r, session_call *sc, ab_err **err)
{
        const char *input = NULL;
        bool enter = false;
        if (aio_opt_str(sc->b, "input", &input, err) < 0 ||
            aio_opt_bool(sc->b, "press_enter", &enter, err) < 0 ||
            (!input && ab_err_set(err, AB_E_INVALID, 0, "input: required") < 0) ||
            (strlen(input) > 60000 &&
             ab_err_set(err, AB_E_INVALID, 0, "input: at most 60000 bytes") < 0)) {
                return bad_call(sc);
        }
        _cleanup_free_ char *data = xasprintf("%s%s", input, enter ? "\n" : "");
        run_state st = {0};
        int rc = sc->s.running
                     ? 0
                     : ab_err_set(err, AB_E_CONFLICT, 0, "session %s has no shell", sc->sid);
        if (rc == 0)
                rc = ab_manager_term_input(r->srv->mgr, aio_box(r), r->scope, sc->s.tid, data,
                                           strlen(data), err);
        if (rc == 0)
                rc = session_state(sc, &st, err);
        json_t *ans = rc == 0 ? json_pack("{s:s}", "status", st.status) : NULL;
        json_decref(st.output);
        return ans;
}

/* ---- the session calls' routes ------------------------------------------ */

enum MHD_Result aio_shell_view(ab_req *r)
{
        return session_call_run(r, view_call);
}

enum MHD_Result aio_shell_wait(ab_req *r)
{
        return session_call_run(r, wait_call);
}

enum MHD_Result aio_shell_kill(ab_req *r)
{
        return session_call_run(r, kill_call);
}

enum MHD_Result aio_shell_write(ab_req *r)
{
        return session_call_run(r, write_call);
}

/* POST /v1/shell/sessions/create {id?, exec_dir?}: {session_id,
 * working_dir}. An existing session is answered as it is. */
enum MHD_Result aio_session_create(ab_req *r)
{
        enum MHD_Result ret;
        json_t *b;
        if (aio_body(r, &b, &ret) < 0)
                return ret;
        ab_err *e = NULL;
        char gen[40];
        ab_random_hex(gen, sizeof(gen), "", 16);
        const char *sid, *dir_req = NULL, *dir = NULL;
        if (body_sid(b, "id", gen, &sid, &e) < 0 || aio_opt_str(b, "exec_dir", &dir_req, &e) < 0) {
                json_decref(b);
                return bad_field(r, e);
        }
        ab_use u;
        if (aio_use(r, &u, &ret) < 0) {
                json_decref(b);
                return ret;
        }
        sess s = {0};
        bool made;
        json_t *ans = NULL;
        int rc = exec_dir(r, &u, dir_req, true, &dir, &e);
        if (rc == 0)
                rc = sess_ensure(r, sid, dir, &s, &made, &e);
        if (rc == 0)
                ans = json_pack("{s:s,s:s}", "session_id", sid, "working_dir",
                                s.cwd ? s.cwd : "/workspace");
        ab_manager_use_end(r->srv->mgr, &u);
        sess_clear(&s);
        json_decref(b);
        return ans ? aio_ok(r, ans) : aio_err(r, e);
}

/* A session as AIO lists it (ShellSessionInfo). */
static json_t *session_info(const abc_term_info *t, const char *cwd)
{
        char when[AB_TIME_LEN];
        ab_time_rfc3339(t->created_ms, false, when);
        int64_t age = (int64_t)time(NULL) - t->created_ms / 1000;
        return json_pack("{s:s,s:s,s:s,s:I,s:s,s:n}", "working_dir", cwd ? cwd : "/workspace",
                         "created_at", when, "last_used_at", when, "age_seconds",
                         (json_int_t)(age > 0 ? age : 0), "status", t->running ? "ready" : "closed",
                         "current_command");
}

/* Each session of the call's box: fn(r, sid, terminal, cwd, ud). */
static int sessions_each(ab_req *r,
                         void (*fn)(ab_req *, const char *, const abc_term_info *, const char *,
                                    void *),
                         void *ud, ab_err **err)
{
        abc_term_info *v;
        size_t n;
        if (ab_manager_term_list(r->srv->mgr, aio_box(r), r->scope, &v, &n, err) < 0)
                return -1;
        for (size_t i = 0; i < n; i++) {
                json_t *j = v[i].tag ? json_loads(v[i].tag, 0, NULL) : NULL;
                const char *sid = tag_session(j);
                if (sid)
                        fn(r, sid, &v[i], json_string_value(json_object_get(j, "cwd")), ud);
                json_decref(j);
        }
        abc_term_infos_free(v, n);
        return 0;
}

static void list_one(ab_req *r, const char *sid, const abc_term_info *t, const char *cwd, void *ud)
{
        (void)r;
        json_object_set_new(ud, sid, session_info(t, cwd));
}

/* GET /v1/shell/sessions: {sessions: {ID: ShellSessionInfo}}. */
enum MHD_Result aio_session_list(ab_req *r)
{
        json_t *m = json_object();
        ab_err *e = NULL;
        if (sessions_each(r, list_one, m, &e) < 0) {
                json_decref(m);
                return aio_err(r, e);
        }
        return aio_ok(r, json_pack("{s:o}", "sessions", m));
}

static void close_one(ab_req *r, const char *sid, const abc_term_info *t, const char *cwd, void *ud)
{
        (void)sid, (void)cwd;
        if (ab_manager_term_close(r->srv->mgr, aio_box(r), r->scope, t->id, NULL) == 0)
                (*(size_t *)ud)++;
}

/* DELETE /v1/shell/sessions: every session of the box. */
enum MHD_Result aio_session_delete_all(ab_req *r)
{
        size_t closed = 0;
        ab_err *e = NULL;
        if (sessions_each(r, close_one, &closed, &e) < 0)
                return aio_err(r, e);
        return aio_ok(r, json_pack("{s:I}", "closed", (json_int_t)closed));
}

/* DELETE /v1/shell/sessions/{id}: its shell and whatever runs on it. */
enum MHD_Result aio_session_delete(ab_req *r, const char *sid)
{
        if (!sid_ok(sid))
                return aio_fail(r, 422, NULL, "session id: 1..%d letters, digits, '.', '_' or '-'",
                                SID_MAX);
        sess s;
        ab_err *e = NULL;
        int rc = sess_find(r, sid, &s, NULL, &e);
        if (rc == 0)
                return aio_fail(r, 404, NULL, "no shell session %s in this sandbox", sid);
        if (rc == 1)
                rc = ab_manager_term_close(r->srv->mgr, aio_box(r), r->scope, s.tid, &e);
        sess_clear(&s);
        if (rc < 0 && e->code != AB_E_NOT_FOUND)
                return aio_err(r, e);
        ab_err_free(&e);
        return aio_ok(r, NULL);
}

/* ---- /v1/bash/exec: one command, its own environment ---------------------- */

typedef struct two_bufs {
        ab_buf out, err;
} two_bufs;

static int two_out(void *ud, int stream, const void *buf, size_t len)
{
        two_bufs *t = ud;
        ab_buf_add(stream == 2 ? &t->err : &t->out, buf, len);
        return 0;
}

/* The body's env: {NAME: value} of strings, as "K=V" (a new strv). */
static int env_parse(json_t *b, char ***out, ab_err **err)
{
        *out = NULL;
        json_t *env = json_object_get(b, "env");
        if (!env || json_is_null(env))
                return 0;
        if (!json_is_object(env) || json_object_size(env) > 1024)
                return ab_err_set(err, AB_E_INVALID, 0, "env: an object of at most 1024 strings");
        char **v = xcalloc(json_object_size(env) + 1, sizeof(char *));
        size_t i = 0;
        const char *k;
        json_t *val;
        json_object_foreach(env, k, val)
        {
                bool name_ok = *k && !isdigit((unsigned char)*k);
                for (const char *p = k; *p && name_ok; p++)
                        name_ok = isalnum((unsigned char)*p) || *p == '_';
                if (!name_ok || !json_is_string(val)) {
                        ab_strvfreep(&v);
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "env.%s: names are letters, digits and '_'; values "
                                          "strings",
                                          k);
                }
                v[i++] = xasprintf("%s=%s", k, json_string_value(val));
        }
        *out = v;
        return 0;
}

/* POST /v1/bash/exec {command, session_id?, exec_dir?, env?, hard_timeout?,
 * max_output_length?}: runs to its end through the exec door (the box's
 * env under the call's; nothing of it lasts to the next call, as AIO says
 * of its bash sessions). async_mode is refused: use /v1/shell/exec. */
enum MHD_Result aio_bash_exec(ab_req *r)
{
        enum MHD_Result ret;
        json_t *b;
        if (aio_body(r, &b, &ret) < 0)
                return ret;
        ab_err *e = NULL;
        char gen[40];
        ab_random_hex(gen, sizeof(gen), "", 16);
        const char *command = NULL, *sid = gen, *dir = NULL;
        bool async = false;
        int64_t hard_ms = 0, max_len = 50000, wait_ms = -1;
        _cleanup_strv_ char **env = NULL;
        if (aio_opt_str(b, "command", &command, &e) < 0 ||
            aio_opt_str(b, "session_id", &sid, &e) < 0 ||
            aio_opt_str(b, "exec_dir", &dir, &e) < 0 ||
            aio_opt_bool(b, "async_mode", &async, &e) < 0 ||
            aio_opt_secs(b, "hard_timeout", AB_MAX_TIMEOUT_S, &hard_ms, &e) < 0 ||
            aio_opt_secs(b, "timeout", AB_MAX_TIMEOUT_S, &wait_ms, &e) < 0 ||
            aio_opt_int(b, "max_output_length", 0, 1 << 24, &max_len, &e) < 0 ||
            env_parse(b, &env, &e) < 0 ||
            ((!command || !*command) &&
             ab_err_set(&e, AB_E_INVALID, 0, "command: required, not empty") < 0) ||
            (!*sid && (sid = gen, false)) ||
            (dir && dir[0] != '/' &&
             ab_err_set(&e, AB_E_INVALID, 0, "exec_dir: must be an absolute path") < 0)) {
                json_decref(b);
                return bad_field(r, e);
        }
        if (async) {
                json_decref(b);
                return aio_fail(r, 501, NULL,
                                "async_mode is not offered on /v1/bash/exec by agentbox: use "
                                "/v1/shell/exec with async_mode and /v1/shell/view");
        }
        ab_use u;
        if (aio_use(r, &u, &ret) < 0) {
                json_decref(b);
                return ret;
        }
        /* timeout (the HTTP wait) ends the command too: nothing would keep it */
        int64_t limit = hard_ms;
        if (wait_ms > 0 && (limit == 0 || wait_ms < limit))
                limit = wait_ms;
        abc_exec_req q = {.command = command,
                          .env = (const char *const *)env,
                          .cwd = dir,
                          .stdin_fd = -1,
                          .timeout_ms = (uint32_t)limit,
                          .output_cap = 4u << 20};
        two_bufs t = {0};
        abc_exec_res res = {0};
        int rc = ab_manager_exec(r->srv->mgr, &u, &q, two_out, &t, &res, &e);
        ab_manager_use_end(r->srv->mgr, &u);
        json_t *ans = NULL;
        if (rc == 0) {
                char cid[40];
                ab_random_hex(cid, sizeof(cid), "", 16);
                ans = json_pack(
                    "{s:s,s:s,s:s,s:s,s:o,s:o,s:I,s:I}", "session_id", sid, "command_id", cid,
                    "command", command, "status", res.timed_out ? "timed_out" : "completed",
                    "stdout", aio_text_cut(t.out.p ? t.out.p : "", t.out.n, (size_t)max_len),
                    "stderr", aio_text_cut(t.err.p ? t.err.p : "", t.err.n, (size_t)max_len),
                    "offset", (json_int_t)res.stdout_bytes, "stderr_offset",
                    (json_int_t)res.stderr_bytes);
                json_object_set_new(ans, "exit_code",
                                    res.timed_out ? json_null() : json_integer(res.exit_code));
        }
        ab_buf_free(&t.out);
        ab_buf_free(&t.err);
        json_decref(b);
        return ans ? aio_ok(r, ans) : aio_err(r, e);
}
