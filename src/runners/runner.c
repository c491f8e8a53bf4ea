/* The code runner (see runner.h). One thread runs the zygote's exec through
 * the box's init (and starts it again if it dies). One thread per warm
 * process holds its connection (a fork of the zygote): it hands the process
 * its cgroup, relays its lines, and ends what is left of the run; the request
 * handler hands it one request line and waits for the result line, the
 * deadline, or the process's end. */
#include "runners/runner.h"
#include "base/buf.h"
#include "base/log.h"
#include "runners/fetch.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#define BOX_ID       "sys-runner"
#define BOX_DIR      "/workspace/runners"
#define UID_FIRST    20000
#define UID_COUNT    10000
#define READY_WAIT_S 60
#define LINE_MAX_B   (64u << 20) /* a result line (codeReturn + log) */
#define STDERR_KEEP  4096
/* A run's cgroup (run-UID under the system box's): memoryMB plus what the
 * process itself needs before the snippet allocates anything, measured as the
 * peak of a trivial run: a zygote child (copied-on-write pages of the parent)
 * ~8 MB, a Bun runtime ~45 MB. The box's own limit caps all runs together. */
#define PY_HEADROOM_MB  32
#define JS_HEADROOM_MB  96
#define RUN_PIDS        128 /* processes + threads per run (Bun alone has ~15 threads) */
#define ZYGOTE_RETRY_S  1
#define RESULT_GRACE_MS 2000
#define SETTLE_MS       50 /* a run waits this long for its app's worker to be ready again */

enum { LANG_JS, LANG_PY, N_LANG };
static const char *const lang_names[N_LANG] = {"js", "python"};

typedef enum { W_STARTING, W_READY, W_BUSY, W_DONE } wstate;

typedef struct wproc {
        struct ab_runners *rs;
        int lang;
        int uid;
        bool worker;            /* serves many runs (worker mode), else one */
        char *app;              /* under rs->lock: the app it serves; NULL = not bound yet */
        int runs;               /* runs given to it */
        int64_t mem_mb;         /* the memoryMB its cgroup's limit is set for */
        uint64_t idle_since;    /* ab_now_ms() it went back to the idle list */
        bool got_ready;         /* under rs->lock: {"ready"} after its current run's result */
        bool parked;            /* under rs->lock: holds the handler's reference until ready */
        bool recycling;         /* under rs->lock: it said {"recycle"} or must not be reused */
        int in_w;               /* the connection to the run's process (from the zygote) */
        int cancel_r, cancel_w; /* closing cancel_w ends the run's process */
        bool in_cg;             /* in its own cgroup run-UID (else: cleaned up by uid) */
        uint64_t oom_kills;     /* OOM kills in its cgroup, known once exited */
        wstate state;           /* under rs->lock */
        int refs;               /* under rs->lock: the thread and a handler */
        json_t *result;         /* the "result" object, once it came */
        pthread_cond_t done;    /* under rs->lock: signalled when result or exited is set */
        ab_buf line;            /* partial stdout line */
        int n_http, max_http;
        bool exited;
        struct wproc *next;                /* the idle list */
        struct wproc *all_prev, *all_next; /* every live one (rs->all) */
} wproc;

struct ab_runners {
        ab_runners_opts o;
        char *runtime_dir;     /* o.runtime_dir points here */
        char *runtime_missing; /* o.runtime_missing points here */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool ready, preparing, stopping;
        bool have_bun;
        /* the zygote (python/runner.py --zygote): forks every run's process */
        bool zy_running, zy_ready;
        char *zy_socket; /* its socket, as the box sees it */
        int zy_in_w;     /* its stdin: closed to end it */
        int zy_cancel_w; /* closed to end its exec */
        char zy_err[STDERR_KEEP + 1];
        size_t zy_err_len;
        ab_buf zy_line; /* partial line of the zygote's stdout */
        bool no_cg;     /* per-run cgroups failed once: clean up by uid instead */
        wproc *idle[N_LANG];
        wproc *all;
        int n_warm[N_LANG]; /* not bound to an app: starting + ready */
        int n_total;        /* live processes (their threads), bound or not */
        bool worker_mode[N_LANG];
        int running, queued;
        unsigned char uid_used[UID_COUNT];
        int uid_next;
        int threads;       /* warm threads alive */
        uint64_t retry_at; /* ab_now_ms(): no new warm process before (one failed) */
};

/* ---- small helpers ---------------------------------------------------- */

static void deadline_in(struct timespec *ts, int64_t ms)
{
        clock_gettime(CLOCK_MONOTONIC, ts);
        ts->tv_sec += ms / 1000;
        ts->tv_nsec += (ms % 1000) * 1000000L;
        if (ts->tv_nsec >= 1000000000L) {
                ts->tv_sec++;
                ts->tv_nsec -= 1000000000L;
        }
}

static int alloc_uid(ab_runners *rs)
{
        for (int i = 0; i < UID_COUNT; i++) {
                int k = (rs->uid_next + i) % UID_COUNT;
                if (!rs->uid_used[k]) {
                        rs->uid_used[k] = 1;
                        rs->uid_next = k + 1;
                        return UID_FIRST + k;
                }
        }
        return -1;
}

/* The condition its handler waits on for the run's end: one per process, so
 * a result wakes its own handler, not every handler waiting on rs->cond (at
 * 10 connections each result woke all 10). */
static void wproc_cond_init(wproc *p)
{
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&p->done, &ca);
        pthread_condattr_destroy(&ca);
}

static void wproc_put(ab_runners *rs, wproc *p)
{
        /* rs->lock held */
        if (--p->refs > 0)
                return;
        if (p->all_prev)
                p->all_prev->all_next = p->all_next;
        else if (rs->all == p)
                rs->all = p->all_next;
        if (p->all_next)
                p->all_next->all_prev = p->all_prev;
        if (p->uid >= UID_FIRST)
                rs->uid_used[p->uid - UID_FIRST] = 0;
        if (p->in_w >= 0)
                close(p->in_w);
        if (p->cancel_w >= 0)
                close(p->cancel_w);
        if (p->cancel_r >= 0)
                close(p->cancel_r);
        json_decref(p->result);
        ab_buf_free(&p->line);
        free(p->app);
        pthread_cond_destroy(&p->done);
        free(p);
}

static int write_line(int fd, json_t *j)
{
        char *txt = json_dumps(j, JSON_COMPACT);
        if (!txt)
                return -EINVAL;
        size_t n = strlen(txt);
        txt = xrealloc(txt, n + 2);
        txt[n++] = '\n';
        int r = ab_write_all(fd, txt, n);
        free(txt);
        return r;
}

/* ---- one warm process ------------------------------------------------- */

static void on_http(wproc *p, json_t *h)
{
        json_t *ans;
        if (++p->n_http > p->max_http) {
                ans =
                    json_pack("{s:o}", "http_error",
                              json_sprintf("Too many HTTP requests (max %d per run)", p->max_http));
        } else {
                ab_fetch_req q = {
                    .url = json_string_value(json_object_get(h, "url")),
                    .method = json_string_value(json_object_get(h, "method")),
                    .headers = json_is_object(json_object_get(h, "headers"))
                                   ? json_object_get(h, "headers")
                                   : NULL,
                    .body = json_string_value(json_object_get(h, "body")),
                    .body_len = json_string_length(json_object_get(h, "body")),
                    .timeout_ms = (long)json_integer_value(json_object_get(h, "timeout")),
                };
                ab_fetch_res res = {0};
                ab_err *e = NULL;
                if (!q.url)
                        ab_err_set(&e, AB_E_INVALID, 0, "httpRequest: url must be a string");
                if (!e && ab_fetch(&q, &res, &e) == 0) {
                        json_t *data = json_stringn(res.body ? res.body : "", res.body_len);
                        if (!data) /* not UTF-8 */
                                data = json_string("");
                        ans = json_pack("{s:{s:I,s:s,s:O,s:o}}", "http_result", "status",
                                        (json_int_t)res.status, "statusText",
                                        res.status_text ? res.status_text : "", "headers",
                                        res.headers ? res.headers : json_object(), "data", data);
                        ab_fetch_res_clear(&res);
                } else {
                        ans = json_pack("{s:s}", "http_error", e ? e->msg : "request failed");
                        ab_err_free(&e);
                }
        }
        if (write_line(p->in_w, ans) < 0)
                ab_log(AB_LOG_WARN, "runner: cannot answer httpRequest", NULL);
        json_decref(ans);
}

/* rs->lock held: p goes (back) to its language's idle list, which takes
 * the caller's reference. */
static void idle_push(ab_runners *rs, wproc *p)
{
        p->state = W_READY;
        p->idle_since = ab_now_ms();
        p->next = rs->idle[p->lang];
        rs->idle[p->lang] = p;
        pthread_cond_broadcast(&rs->cond);
}

/* rs->lock held: takes p off its idle list (the list's reference is the
 * caller's now). False when it was not on it. */
static bool idle_unlink(ab_runners *rs, wproc *p)
{
        for (wproc **pp = &rs->idle[p->lang]; *pp; pp = &(*pp)->next)
                if (*pp == p) {
                        *pp = p->next;
                        p->next = NULL;
                        return true;
                }
        return false;
}

/* rs->lock held: ends p's process (its thread then ends the rest). */
static void wproc_cancel(wproc *p)
{
        p->recycling = true;
        if (p->cancel_w >= 0) {
                close(p->cancel_w);
                p->cancel_w = -1;
        }
}

/* One protocol line from p. -1: a line it had no business writing (the
 * process is ended: a worker that breaks the protocol is never reused). */
static int on_line(wproc *p, const char *line, size_t len)
{
        ab_runners *rs = p->rs;
        json_t *j = json_loadb(line, len, 0, NULL);
        if (!j)
                return p->worker ? -1 : 0; /* one-shot: not ours (stdout is for protocol lines) */
        int rc = 0;
        pthread_mutex_lock(&rs->lock);
        bool busy = p->state == W_BUSY && !p->result;
        pthread_mutex_unlock(&rs->lock);
        if (json_is_true(json_object_get(j, "ready"))) {
                pthread_mutex_lock(&rs->lock);
                if (p->state == W_STARTING && !rs->stopping) {
                        /* not once stopping: ab_runners_free has emptied the idle
                         * lists, and a reference taken now would never be dropped */
                        p->refs++; /* the idle list's */
                        idle_push(rs, p);
                } else if (p->worker && p->state == W_BUSY && p->result && !p->got_ready) {
                        p->got_ready = true;
                        if (p->parked && !p->recycling && !rs->stopping) {
                                p->parked = false; /* the handler's reference: the list's now */
                                idle_push(rs, p);
                        }
                } else if (p->worker && !rs->stopping) {
                        rc = -1;
                }
                pthread_mutex_unlock(&rs->lock);
        } else if (json_is_string(json_object_get(j, "recycle")) && p->worker) {
                pthread_mutex_lock(&rs->lock);
                p->recycling = true; /* it exits by itself; its thread ends the rest */
                pthread_mutex_unlock(&rs->lock);
                ab_log(AB_LOG_DEBUG, "runner: a worker recycles", "reason",
                       json_string_value(json_object_get(j, "recycle")), NULL);
        } else if (json_object_get(j, "http") && busy) {
                on_http(p, json_object_get(j, "http"));
        } else if (json_object_get(j, "result") && busy) {
                pthread_mutex_lock(&rs->lock);
                p->result = json_incref(json_object_get(j, "result"));
                pthread_cond_signal(&p->done);
                pthread_mutex_unlock(&rs->lock);
        } else if (p->worker) {
                rc = -1;
        }
        json_decref(j);
        return rc;
}

static int on_output(void *ud, int stream, const void *buf, size_t len)
{
        wproc *p = ud;
        (void)stream; /* the connection: stdout only (stderr is the zygote's) */
        const char *s = buf;
        for (size_t i = 0; i < len;) {
                const char *nl = memchr(s + i, '\n', len - i);
                size_t n = nl ? (size_t)(nl - (s + i)) : len - i;
                if (p->line.n + n > LINE_MAX_B)
                        return -1; /* a runner gone mad: end it */
                ab_buf_add(&p->line, s + i, n);
                i += n;
                if (nl) {
                        if (on_line(p, p->line.p, p->line.n) < 0)
                                return -1;
                        p->line.n = 0;
                        i++;
                }
        }
        return 0;
}

static void top_up(ab_runners *rs, int lang);
static int box_exec(ab_runners *rs, const char *cmd, ab_err **err);
static int sys_use(ab_runners *rs, ab_use *u, ab_err **err);

/* The first line from a run's process, {"pid":N}, with the sender's
 * credentials: the kernel gives its pid in the server's pid namespace (the
 * box has its own). 0, or -1 when the process did not answer as it should. */
static int read_pid_line(int fd, pid_t *host_pid)
{
        char buf[256];
        size_t len = 0;
        *host_pid = 0;
        while (len < sizeof(buf) - 1) {
                union {
                        struct cmsghdr h;
                        char b[CMSG_SPACE(sizeof(struct ucred))];
                } cm;
                struct iovec iov = {.iov_base = buf + len, .iov_len = sizeof(buf) - 1 - len};
                struct msghdr m = {.msg_iov = &iov,
                                   .msg_iovlen = 1,
                                   .msg_control = &cm,
                                   .msg_controllen = sizeof(cm)};
                ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return -1;
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
                        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
                            c->cmsg_len == CMSG_LEN(sizeof(struct ucred)) && !*host_pid) {
                                struct ucred u;
                                memcpy(&u, CMSG_DATA(c), sizeof(u));
                                *host_pid = u.pid;
                        }
                len += (size_t)n;
                if (memchr(buf, '\n', len))
                        break;
        }
        char *nl = memchr(buf, '\n', len);
        if (!nl || *host_pid <= 0 || (size_t)(nl - buf) + 1 != len)
                return -1; /* nothing may follow before the host answers */
        json_t *j = json_loadb(buf, (size_t)(nl - buf), 0, NULL);
        bool ok = json_is_integer(json_object_get(j, "pid"));
        json_decref(j);
        return ok ? 0 : -1;
}

/* Ends whatever the run left behind: its processes (its cgroup, every
 * process in it even one that left its session; without one, every process
 * of its uid), then its files and IPC objects (the zygote's sweep). */
static void end_run(ab_runners *rs, wproc *p)
{
        char sub[32];
        snprintf(sub, sizeof(sub), "run-%d", p->uid);
        ab_err *ke = NULL;
        if (p->in_cg) {
                ab_backend *b = ab_manager_backend(rs->o.manager);
                if (b->subcg->end(b, BOX_ID, sub, &p->oom_kills, &ke) < 0)
                        ab_log(AB_LOG_WARN, "runner: cannot end a run's cgroup", "error", ke->msg,
                               NULL);
        } else {
                char kill_cmd[160];
                snprintf(kill_cmd, sizeof(kill_cmd),
                         "for i in 1 2 3 4 5 6 7 8; do pkill -KILL -U %d || exit 0; sleep 0.05; "
                         "done",
                         p->uid);
                if (box_exec(rs, kill_cmd, &ke) < 0)
                        ab_log(AB_LOG_WARN, "runner: cannot end a run's processes", "error",
                               ke->msg, NULL);
        }
        ab_err_free(&ke);
        /* No process of the run is left: the zygote removes its temp dir and
         * sweeps what its uid left in the box's shared temp places and IPC
         * (one short line: atomic on the pipe). The uid is free again only
         * after this (wproc_put), so no later run gets it before the line. */
        char line[48];
        snprintf(line, sizeof(line), "{\"ended\":%d}\n", p->uid);
        pthread_mutex_lock(&rs->lock);
        if (rs->zy_in_w >= 0 && ab_write_all(rs->zy_in_w, line, strlen(line)) < 0)
                ab_log(AB_LOG_WARN, "runner: cannot reach the zygote", NULL);
        pthread_mutex_unlock(&rs->lock);
}

/* How long the thread of p may wait for its next event: a one-shot process
 * has RESULT_GRACE_MS after its result to exit; an idle bound worker until
 * its idle time is up. */
static int wait_ms(wproc *p)
{
        ab_runners *rs = p->rs;
        pthread_mutex_lock(&rs->lock);
        int ms = -1;
        if (!p->worker && p->result) {
                ms = RESULT_GRACE_MS;
        } else if (p->worker && p->app && p->state == W_READY) {
                uint64_t until = p->idle_since + (uint64_t)rs->o.idle_s * 1000;
                uint64_t now = ab_now_ms();
                ms = until > now ? (int)(until - now) : 0;
        } else if (p->worker && p->app) {
                ms = rs->o.idle_s * 1000; /* look again later: it may go idle meanwhile */
        }
        pthread_mutex_unlock(&rs->lock);
        return ms;
}

/* True when p, a worker, has been idle and bound for too long: it leaves the
 * idle list here, under the lock, so no run takes it while its thread ends
 * it. */
static bool idle_expired(wproc *p)
{
        ab_runners *rs = p->rs;
        pthread_mutex_lock(&rs->lock);
        bool gone = p->app && p->state == W_READY &&
                    ab_now_ms() >= p->idle_since + (uint64_t)rs->o.idle_s * 1000 &&
                    idle_unlink(rs, p);
        if (gone) {
                p->recycling = true;
                p->refs--; /* the list's; the thread's own is still held */
        }
        pthread_mutex_unlock(&rs->lock);
        return gone;
}

/* One run's process, from the zygote's fork to its end: connect, let the
 * zygote fork it for this uid and language, move it into its own cgroup
 * before it does anything, then relay its protocol lines (on_output) until
 * it exits or the handler cancels. */
static void *warm_main(void *arg)
{
        wproc *p = arg;
        ab_runners *rs = p->rs;
        ab_backend *b = ab_manager_backend(rs->o.manager);
        ab_err *e = NULL;
        int pidfd = -1;
        pthread_mutex_lock(&rs->lock);
        _cleanup_free_ char *path = rs->zy_socket ? xstrdup(rs->zy_socket) : NULL;
        bool no_cg = rs->no_cg;
        pthread_mutex_unlock(&rs->lock);
        int fd = -1;
        if (path && !b->ops->connect_unix)
                ab_err_set(&e, AB_E_UNSUPPORTED, 0,
                           "the %s backend cannot reach the code runner's socket in a box",
                           b->ops->name);
        else if (path)
                fd = b->ops->connect_unix(b, BOX_ID, path, &e);
        pid_t host_pid = 0;
        bool started = false;
        p->in_w = fd; /* closed with p */
        if (fd >= 0) {
                int one = 1;
                char hello[128];
                snprintf(hello, sizeof(hello),
                         "{\"uid\":%d,\"lang\":\"%s\",\"worker\":%s,\"maxRuns\":%d}\n", p->uid,
                         lang_names[p->lang], p->worker ? "true" : "false", rs->o.max_runs);
                started = setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) == 0 &&
                          ab_write_all(fd, hello, strlen(hello)) == 0 &&
                          read_pid_line(fd, &host_pid) == 0;
        }
        if (started && !no_cg) {
                char sub[32];
                snprintf(sub, sizeof(sub), "run-%d", p->uid);
                p->mem_mb = rs->o.memory_mb;
                uint64_t mb = (uint64_t)rs->o.memory_mb +
                              (p->lang == LANG_JS ? JS_HEADROOM_MB : PY_HEADROOM_MB);
                ab_err *ce = NULL;
                if (b->subcg &&
                    b->subcg->create(b, BOX_ID, sub, mb << 20, RUN_PIDS, host_pid, &ce) == 0) {
                        p->in_cg = true;
                } else {
                        pthread_mutex_lock(&rs->lock);
                        bool first = !rs->no_cg;
                        rs->no_cg = true;
                        pthread_mutex_unlock(&rs->lock);
                        if (first)
                                ab_log(AB_LOG_WARN,
                                       "runner: no cgroup per run (memory limits are the box's "
                                       "only; cleanup by uid)",
                                       "error", ce ? ce->msg : "unsupported", NULL);
                }
                ab_err_free(&ce);
        }
        if (started) {
                const char *ans = p->in_cg ? "{\"attached\":true}\n" : "{\"attached\":false}\n";
                started = ab_write_all(fd, ans, strlen(ans)) == 0;
                pidfd = (int)syscall(SYS_pidfd_open, host_pid, 0);
        }
        /* Relay until the process ends (its pidfd), the connection closes, or
         * the handler cancels (cancel_w closed). */
        char buf[65536];
        while (started) {
                struct pollfd pf[3] = {{.fd = fd, .events = POLLIN},
                                       {.fd = p->cancel_r, .events = POLLIN},
                                       {.fd = pidfd, .events = POLLIN}};
                int n = poll(pf, pidfd >= 0 ? 3 : 2, wait_ms(p));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n == 0 && p->worker && !idle_expired(p))
                        continue;
                if (n <= 0 || pf[1].revents)
                        break;
                if (pf[0].revents) {
                        ssize_t r = read(fd, buf, sizeof(buf));
                        if (r < 0 && errno == EINTR)
                                continue;
                        if (r <= 0 || on_output(p, 1, buf, (size_t)r) < 0)
                                break;
                        continue;
                }
                if (pidfd >= 0 && pf[2].revents) {
                        /* Gone (a daemon it left may hold the connection open):
                         * take what it wrote, then end. */
                        ssize_t r;
                        while ((r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
                                if (on_output(p, 1, buf, (size_t)r) < 0)
                                        break;
                        break;
                }
        }
        if (pidfd >= 0)
                close(pidfd);
        if (host_pid > 0 || p->in_cg)
                end_run(rs, p);
        pthread_mutex_lock(&rs->lock);
        bool never_ready = p->state == W_STARTING;
        if (p->state == W_READY && idle_unlink(rs, p)) {
                /* ended while idle: the list's reference goes */
                if (!p->app)
                        rs->n_warm[p->lang]--;
                p->refs--; /* the thread's own is still held: never 0 here */
        }
        if (p->parked) {
                p->parked = false;
                p->refs--;
        }
        rs->n_total--;
        if (never_ready) {
                rs->n_warm[p->lang]--;
                rs->retry_at = ab_now_ms() + 250; /* no busy loop of failing starts */
                if (!rs->stopping)
                        ab_log(AB_LOG_WARN, "runner: a warm process ended before it was ready",
                               "lang", lang_names[p->lang], "error", e ? e->msg : "", NULL);
        }
        p->exited = true;
        p->state = W_DONE;
        pthread_cond_signal(&p->done);
        wproc_put(rs, p);
        rs->threads--;
        bool again = !rs->stopping && !never_ready;
        pthread_cond_broadcast(&rs->cond);
        pthread_mutex_unlock(&rs->lock);
        ab_err_free(&e);
        if (again)
                for (int l = 0; l < N_LANG; l++) /* a slot of the pool is free */
                        top_up(rs, l);
        return NULL;
}

/* ---- the zygote ------------------------------------------------------- */

static void zy_line(ab_runners *rs, const char *line, size_t len)
{
        json_t *j = json_loadb(line, len, 0, NULL);
        const char *sock =
            json_string_value(json_object_get(json_object_get(j, "zygote"), "socket"));
        if (sock && sock[0] == '/') {
                pthread_mutex_lock(&rs->lock);
                free(rs->zy_socket);
                rs->zy_socket = xstrdup(sock);
                rs->zy_ready = true;
                pthread_cond_broadcast(&rs->cond);
                pthread_mutex_unlock(&rs->lock);
                for (int l = 0; l < N_LANG; l++)
                        top_up(rs, l);
        }
        json_decref(j);
}

static int zy_output(void *ud, int stream, const void *buf, size_t len)
{
        ab_runners *rs = ud;
        if (stream == 2) {
                /* the zygote's and its children's stderr: the tail, for the log */
                size_t n = len > STDERR_KEEP ? STDERR_KEEP : len;
                const char *src = (const char *)buf + len - n;
                if (rs->zy_err_len + n > STDERR_KEEP) {
                        size_t drop = rs->zy_err_len + n - STDERR_KEEP;
                        memmove(rs->zy_err, rs->zy_err + drop, rs->zy_err_len - drop);
                        rs->zy_err_len -= drop;
                }
                memcpy(rs->zy_err + rs->zy_err_len, src, n);
                rs->zy_err_len += n;
                return 0;
        }
        const char *s = buf;
        for (size_t i = 0; i < len;) {
                const char *nl = memchr(s + i, '\n', len - i);
                size_t n = nl ? (size_t)(nl - (s + i)) : len - i;
                if (rs->zy_line.n + n > 65536)
                        return -1;
                ab_buf_add(&rs->zy_line, s + i, n);
                i += n;
                if (nl) {
                        zy_line(rs, rs->zy_line.p, rs->zy_line.n);
                        rs->zy_line.n = 0;
                        i++;
                }
        }
        return 0;
}

/* Runs the zygote's exec for as long as it lives, and again after a pause
 * when it dies, until the runner stops. */
static void *zygote_main(void *arg)
{
        ab_runners *rs = arg;
        char cmd[768];
        const char *js =
            rs->have_bun ? BOX_DIR "/js/node_modules/@oven/bun-linux-x64/bin/bun" : "/usr/bin/node";
        snprintf(cmd, sizeof(cmd),
                 "python3 -S -u " BOX_DIR "/python/runner.py --zygote --js-runtime %s "
                 "--js-runner " BOX_DIR "/js/runner.js",
                 js);
        for (;;) {
                int in[2] = {-1, -1}, c[2] = {-1, -1};
                ab_err *e = NULL;
                pthread_mutex_lock(&rs->lock);
                bool stop = rs->stopping;
                if (!stop && pipe2(in, O_CLOEXEC) == 0) {
                        /* never blocks a writer holding rs->lock */
                        fcntl(in[1], F_SETFL, O_NONBLOCK);
                        rs->zy_in_w = in[1];
                        if (pipe2(c, O_CLOEXEC) == 0)
                                rs->zy_cancel_w = c[1];
                        rs->zy_err_len = 0;
                        rs->zy_line.n = 0;
                }
                pthread_mutex_unlock(&rs->lock);
                ab_use u;
                if (!stop && c[0] >= 0 && sys_use(rs, &u, &e) == 0) {
                        static const char *const env[] = {"TMPDIR=/tmp", NULL};
                        abc_exec_req q = {
                            .command = cmd,
                            .env = env,
                            .cwd = "/tmp",
                            .stdin_fd = in[0],
                            .output_cap = UINT64_MAX >> 1,
                            .has_cancel = true,
                            .cancel_fd = c[0],
                        };
                        abc_exec_res res;
                        ab_manager_exec(rs->o.manager, &u, &q, zy_output, rs, &res, &e);
                        ab_manager_use_end(rs->o.manager, &u);
                }
                if (in[0] >= 0)
                        close(in[0]);
                if (c[0] >= 0)
                        close(c[0]);
                pthread_mutex_lock(&rs->lock);
                rs->zy_ready = false;
                free(rs->zy_socket);
                rs->zy_socket = NULL;
                /* the write ends, unless ab_runners_free closed them */
                if (rs->zy_in_w >= 0)
                        close(rs->zy_in_w);
                if (rs->zy_cancel_w >= 0)
                        close(rs->zy_cancel_w);
                rs->zy_in_w = rs->zy_cancel_w = -1;
                stop = rs->stopping;
                pthread_cond_broadcast(&rs->cond);
                pthread_mutex_unlock(&rs->lock);
                if (stop) {
                        ab_err_free(&e);
                        break;
                }
                rs->zy_err[rs->zy_err_len] = 0;
                ab_log(AB_LOG_WARN, "runner: the zygote ended; starting it again", "error",
                       e ? e->msg : "", "stderr", rs->zy_err, NULL);
                ab_err_free(&e);
                sleep(ZYGOTE_RETRY_S);
        }
        pthread_mutex_lock(&rs->lock);
        rs->zy_running = false;
        rs->threads--;
        pthread_cond_broadcast(&rs->cond);
        pthread_mutex_unlock(&rs->lock);
        return NULL;
}

/* rs->lock held: ends the idle bound worker that has waited longest (of any
 * language), to make room in the pool. False when there is none. */
static bool evict_one(ab_runners *rs)
{
        wproc *oldest = NULL;
        for (int l = 0; l < N_LANG; l++)
                for (wproc *q = rs->idle[l]; q; q = q->next)
                        if (q->app && (!oldest || q->idle_since < oldest->idle_since))
                                oldest = q;
        if (!oldest || !idle_unlink(rs, oldest))
                return false;
        wproc_cancel(oldest);
        wproc_put(rs, oldest); /* the list's reference */
        return true;
}

/* The most processes the pool holds: a busy one per run at once, and the
 * unbound ones kept ready. */
static int pool_cap(ab_runners *rs)
{
        return rs->o.max_concurrency + N_LANG * rs->o.warm;
}

/* Starts warm processes until `warm` of lang are starting or ready (not
 * bound to an app), within the pool's cap (idle bound workers make room). */
static void top_up(ab_runners *rs, int lang)
{
        pthread_mutex_lock(&rs->lock);
        while (!rs->stopping && rs->ready && rs->zy_ready && rs->n_warm[lang] < rs->o.warm &&
               ab_now_ms() >= rs->retry_at) {
                if (rs->n_total >= pool_cap(rs)) {
                        evict_one(rs); /* its thread's end frees the slot and tops up */
                        break;
                }
                wproc *p = xzalloc(sizeof(*p));
                p->rs = rs;
                wproc_cond_init(p);
                p->lang = lang;
                p->worker = rs->worker_mode[lang];
                p->in_w = p->cancel_w = p->cancel_r = -1;
                p->uid = alloc_uid(rs);
                p->max_http = rs->o.max_requests;
                p->refs = 1; /* the thread's */
                int c[2];
                if (p->uid < 0 || pipe2(c, O_CLOEXEC) < 0) {
                        wproc_put(rs, p);
                        break;
                }
                p->cancel_r = c[0];
                p->cancel_w = c[1];
                pthread_attr_t a;
                pthread_attr_init(&a);
                pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
                pthread_t t;
                int r = pthread_create(&t, &a, warm_main, p);
                pthread_attr_destroy(&a);
                if (r != 0) {
                        wproc_put(rs, p);
                        break;
                }
                rs->threads++;
                rs->n_warm[lang]++;
                rs->n_total++;
                p->all_next = rs->all;
                if (rs->all)
                        rs->all->all_prev = p;
                rs->all = p;
        }
        pthread_mutex_unlock(&rs->lock);
}

/* ---- the system box ---------------------------------------------------- */

/* Writes a tar of dir into fd (symlinks kept as links). */
static int tar_dir(const char *dir, int fd, ab_err **err)
{
        struct archive *w = archive_write_new();
        struct archive *d = archive_read_disk_new();
        archive_write_set_format_pax_restricted(w);
        archive_read_disk_set_standard_lookup(d);
        archive_read_disk_set_symlink_physical(d);
        int rc = 0;
        if (archive_write_open_fd(w, fd) != ARCHIVE_OK ||
            archive_read_disk_open(d, dir) != ARCHIVE_OK) {
                rc = ab_err_set(err, AB_E_INTERNAL, 0, "tar %s: %s", dir,
                                archive_error_string(w) ? archive_error_string(w)
                                                        : archive_error_string(d));
                goto out;
        }
        size_t prefix = strlen(dir);
        for (;;) {
                struct archive_entry *en = archive_entry_new();
                int r = archive_read_next_header2(d, en);
                if (r == ARCHIVE_EOF) {
                        archive_entry_free(en);
                        break;
                }
                if (r != ARCHIVE_OK) {
                        rc = ab_err_set(err, AB_E_INTERNAL, 0, "tar %s: %s", dir,
                                        archive_error_string(d));
                        archive_entry_free(en);
                        break;
                }
                archive_read_disk_descend(d);
                const char *src = archive_entry_sourcepath(en);
                const char *rel = src + (strlen(src) > prefix ? prefix : strlen(src));
                while (*rel == '/')
                        rel++;
                if (!*rel) {
                        archive_entry_free(en);
                        continue;
                }
                archive_entry_set_pathname(en, rel);
                archive_entry_set_uid(en, 0);
                archive_entry_set_gid(en, 0);
                archive_entry_set_uname(en, "root");
                archive_entry_set_gname(en, "root");
                if (archive_write_header(w, en) != ARCHIVE_OK) {
                        rc = ab_err_set(err, AB_E_INTERNAL, 0, "tar %s: %s", rel,
                                        archive_error_string(w));
                        archive_entry_free(en);
                        break;
                }
                if (archive_entry_filetype(en) == AE_IFREG && archive_entry_size(en) > 0) {
                        _cleanup_close_ int f = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                        char buf[65536];
                        ssize_t n;
                        while (f >= 0 && (n = read(f, buf, sizeof(buf))) > 0)
                                archive_write_data(w, buf, (size_t)n);
                }
                archive_entry_free(en);
        }
out:
        archive_read_free(d);
        archive_write_close(w);
        archive_write_free(w);
        return rc;
}

/* A version of the runtime: sizes and times of its runner files and its lock file. */
static char *runtime_version(const char *dir)
{
        static const char *const files[] = {"python/runner.py", "js/runner.js",
                                            "js/package-lock.json", "js/package.json"};
        char *v = xstrdup(AGENTBOX_VERSION);
        for (size_t i = 0; i < AB_ARRAY_LEN(files); i++) {
                _cleanup_free_ char *p = xasprintf("%s/%s", dir, files[i]);
                struct stat st;
                char *n = stat(p, &st) == 0
                              ? xasprintf("%s:%lld.%ld.%lld", v, (long long)st.st_mtim.tv_sec,
                                          st.st_mtim.tv_nsec, (long long)st.st_size)
                              : xasprintf("%s:-", v);
                free(v);
                v = n;
        }
        return v;
}

/* A use of the system box (made and started by the manager as needed). */
static int sys_use(ab_runners *rs, ab_use *u, ab_err **err)
{
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        ab_sysbox_spec spec = {.id = BOX_ID};
        ab_limits_default(&spec.limits);
        spec.limits.cpus = ncpu > 0 ? (double)ncpu : 1;
        spec.limits.memory_mib = 4096;
        spec.limits.pids = 4096;
        spec.limits.disk_mib = 2048;
        return ab_manager_sys_use_begin(rs->o.manager, &spec, u, err);
}

/* Writes a file in the system box (data, or everything read from src_fd). */
static int sys_write(ab_runners *rs, const char *path, const void *data, size_t len, int src_fd,
                     uint32_t mode, ab_err **err)
{
        ab_use u;
        if (sys_use(rs, &u, err) < 0)
                return -1;
        int r = -1;
        _cleanup_close_ int fd = ab_manager_use_connect(rs->o.manager, &u, err);
        if (fd >= 0)
                r = abc_write(fd, path, data, len, src_fd, 0, mode, err);
        ab_manager_use_end(rs->o.manager, &u);
        return r;
}

static int box_exec(ab_runners *rs, const char *cmd, ab_err **err)
{
        ab_use u;
        if (sys_use(rs, &u, err) < 0)
                return -1;
        abc_exec_req q = {.command = cmd, .stdin_fd = -1, .timeout_ms = 120000};
        abc_exec_res res;
        int r = ab_manager_exec(rs->o.manager, &u, &q, NULL, NULL, &res, err);
        ab_manager_use_end(rs->o.manager, &u);
        return r < 0 ? -1 : res.exit_code;
}

typedef struct vbuf {
        char buf[4096];
        size_t len;
} vbuf;

static int grab(void *ud, int stream, const void *buf, size_t len)
{
        vbuf *v = ud;
        size_t n = len < sizeof(v->buf) - 1 - v->len ? len : sizeof(v->buf) - 1 - v->len;
        memcpy(v->buf + v->len, buf, n);
        v->len += n;
        return 0;
}

/* Makes (or finds) the system box and installs the runtime into it. */
static int prepare_box(ab_runners *rs, ab_err **err)
{
        ab_manager *m = rs->o.manager;
        _cleanup_free_ char *want = runtime_version(rs->o.runtime_dir);
        vbuf have = {0};
        {
                ab_use u;
                if (sys_use(rs, &u, err) < 0)
                        return -1;
                _cleanup_close_ int fd = ab_manager_use_connect(m, &u, err);
                ab_manager_use_end(m, &u);
                if (fd < 0)
                        return -1;
                ab_err *re = NULL;
                if (abc_read(fd, BOX_DIR "/.version", 0, sizeof(have.buf) - 1, grab, &have, &re) <
                    0)
                        have.len = 0;
                ab_err_free(&re);
                have.buf[have.len] = 0;
        }
        if (strcmp(have.buf, want) != 0) {
                /* Install: a tar of the runtime dir, unpacked in the box by its own tar. */
                _cleanup_close_ int tfd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
                if (tfd < 0)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "runner: temp file");
                if (tar_dir(rs->o.runtime_dir, tfd, err) < 0)
                        return -1;
                if (lseek(tfd, 0, SEEK_SET) != 0)
                        return ab_err_set(err, AB_E_INTERNAL, errno, "runner: rewind");
                if (sys_write(rs, "/workspace/.runners.tar", NULL, 0, tfd, 0600, err) < 0)
                        return ab_err_wrap(err, "runner: copy the runtime into the box");
                int rc = box_exec(rs,
                                  "set -e; rm -rf " BOX_DIR ".new; mkdir -p " BOX_DIR ".new; "
                                  "tar -xf /workspace/.runners.tar -C " BOX_DIR ".new "
                                  "--no-same-owner; rm -f /workspace/.runners.tar; "
                                  "chmod -R a+rX " BOX_DIR ".new; rm -rf " BOX_DIR "; mv " BOX_DIR
                                  ".new " BOX_DIR "; chmod 755 /workspace",
                                  err);
                if (rc != 0)
                        return rc < 0 ? -1
                                      : ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                                   "runner: unpacking the runtime failed (%d)", rc);
                if (sys_write(rs, BOX_DIR "/.version", want, strlen(want), -1, 0644, err) < 0)
                        return -1;
                ab_log(AB_LOG_INFO, "runner: runtime installed in the system box", "version", want,
                       NULL);
        }
        rs->have_bun =
            box_exec(rs, "test -x " BOX_DIR "/js/node_modules/@oven/bun-linux-x64/bin/bun", NULL) ==
            0;
        /* Worker mode (runners/README.md): Python's always; JS's once its
         * runner takes --worker (else one Bun per run, as before). */
        rs->worker_mode[LANG_PY] = true;
        rs->worker_mode[LANG_JS] =
            box_exec(rs, "grep -q -e '--tmpdir-root' " BOX_DIR "/js/runner.js", NULL) == 0;
        return 0;
}

/* Makes the system box ready once; later callers wait for the first. */
static int ensure_ready(ab_runners *rs, ab_err **err)
{
        if (rs->runtime_missing)
                return ab_err_set(err, AB_E_UNAVAILABLE, ENOENT, "runner: %s", rs->runtime_missing);
        ab_backend *b = ab_manager_backend(rs->o.manager);
        if (!b->ops->connect_unix)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "runner: the %s backend has no connect_unix (the runner reaches "
                                  "its zygote in the system box through it)",
                                  b->ops->name);
        pthread_mutex_lock(&rs->lock);
        if (rs->ready) {
                pthread_mutex_unlock(&rs->lock);
                return 0;
        }
        while (rs->preparing && !rs->ready)
                pthread_cond_wait(&rs->cond, &rs->lock);
        if (rs->ready) {
                pthread_mutex_unlock(&rs->lock);
                return 0;
        }
        rs->preparing = true;
        pthread_mutex_unlock(&rs->lock);
        ab_err *e = NULL;
        int r = prepare_box(rs, &e);
        pthread_mutex_lock(&rs->lock);
        rs->preparing = false;
        if (r == 0)
                rs->ready = true;
        if (r == 0 && !rs->zy_running && !rs->stopping) {
                /* The zygote; warm processes follow once it is ready (zy_line). */
                pthread_attr_t a;
                pthread_attr_init(&a);
                pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
                pthread_t t;
                if (pthread_create(&t, &a, zygote_main, rs) == 0) {
                        rs->zy_running = true;
                        rs->threads++;
                }
                pthread_attr_destroy(&a);
        }
        pthread_cond_broadcast(&rs->cond);
        pthread_mutex_unlock(&rs->lock);
        if (r < 0) {
                ab_err_set(err, AB_E_UNAVAILABLE, 0, "the code runner is not available: %s",
                           e ? e->msg : "unknown error");
                ab_err_free(&e);
                return -1;
        }
        return 0;
}

/* ---- a run ------------------------------------------------------------ */

static int64_t clamp(int64_t v, int64_t def, int64_t max)
{
        return v <= 0 ? def : v > max ? max : v;
}

/* rs->lock held: true when a worker of app in lang has answered its run
 * and will be idle again on its {"ready"}. */
static bool settling(ab_runners *rs, int lang, const char *app)
{
        for (wproc *q = rs->all; q; q = q->all_next)
                if (q->lang == lang && q->parked && !q->recycling && q->app && !strcmp(q->app, app))
                        return true;
        return false;
}

/* rs->lock held: an idle process for a run of app in lang, taken off its
 * idle list (the list's reference is the caller's), or NULL. A worker of app
 * first; else (unless own_only and one of app's is settling) an unbound
 * one, bound to app from now on (a one-shot process is never bound: it runs
 * once). */
static wproc *take_idle(ab_runners *rs, int lang, const char *app, bool own_only)
{
        wproc *p = NULL;
        for (wproc *q = rs->idle[lang]; q && !p; q = q->next)
                if (q->app && !strcmp(q->app, app) && !q->recycling)
                        p = q;
        for (wproc *q = rs->idle[lang]; q && !p && !(own_only && settling(rs, lang, app));
             q = q->next)
                if (!q->app && !q->recycling)
                        p = q;
        if (!p || !idle_unlink(rs, p))
                return NULL;
        if (!p->app) {
                rs->n_warm[lang]--;
                if (p->worker)
                        p->app = xstrdup(app);
        }
        p->state = W_BUSY;
        p->runs++;
        json_decref(p->result);
        p->result = NULL;
        p->got_ready = false;
        return p;
}

/* The run's memory limit on its process's cgroup, rewritten only when it
 * differs from the one set. A worker whose limit cannot be set is not
 * reused (its run still goes on under the old limit and the box's). */
static void set_run_memory(ab_runners *rs, wproc *p, int64_t mem)
{
        if (!p->in_cg || mem == p->mem_mb)
                return;
        char sub[32];
        snprintf(sub, sizeof(sub), "run-%d", p->uid);
        int64_t head = p->lang == LANG_JS ? JS_HEADROOM_MB : PY_HEADROOM_MB;
        ab_err *me = NULL;
        ab_backend *b = ab_manager_backend(rs->o.manager);
        if (b->subcg->set_memory(b, BOX_ID, sub, (uint64_t)(mem + head) << 20, &me) == 0) {
                p->mem_mb = mem;
        } else {
                ab_log(AB_LOG_WARN, "runner: cannot set a run's memory limit", "error", me->msg,
                       NULL);
                pthread_mutex_lock(&rs->lock);
                p->recycling = true;
                pthread_mutex_unlock(&rs->lock);
        }
        ab_err_free(&me);
}

/* rs->lock held: the handler is done with p (it holds the reference the
 * idle list gave it). A worker that answered and may be reused goes back to
 * the idle list (now, or on its {"ready"}: parked); anything else ends. */
static void run_done(ab_runners *rs, wproc *p)
{
        bool reuse = p->worker && p->result && !p->exited && !p->recycling && !rs->stopping &&
                     p->runs < rs->o.max_runs;
        if (reuse && p->got_ready) {
                idle_push(rs, p);
                return;
        }
        if (reuse) {
                p->parked = true;
                return;
        }
        /* One-shot with a result: it removes its temp dir and exits; its
         * thread ends what remains. Anything else is done: end it now. */
        if (p->worker || !p->result)
                wproc_cancel(p);
        wproc_put(rs, p);
}

int ab_runners_run(ab_runners *rs, const char *lang_name, const ab_run_req *req, ab_run_res *out,
                   ab_err **err)
{
        memset(out, 0, sizeof(*out));
        int lang = !strcmp(lang_name, "js") ? LANG_JS : LANG_PY;
        const char *app = req->app ? req->app : "";
        int64_t tmo = clamp(req->timeout_ms, rs->o.timeout_ms, rs->o.max_timeout_ms);
        int64_t mem = clamp(req->memory_mb, rs->o.memory_mb, rs->o.max_memory_mb);
        int64_t disk = clamp(req->disk_mb, rs->o.disk_mb, rs->o.max_disk_mb);
        const char *src = req->code ? req->code : "";
        bool blank = true;
        for (const char *c = src; *c && blank; c++)
                blank = *c == ' ' || *c == '\t' || *c == '\n' || *c == '\r';
        if (blank) {
                out->message = xstrdup("Code cannot be empty");
                return 0;
        }
        if (ensure_ready(rs, err) < 0)
                return -1;

        /* The semaphore: queue rather than refuse. */
        pthread_mutex_lock(&rs->lock);
        rs->queued++;
        while (rs->running >= rs->o.max_concurrency && !rs->stopping)
                pthread_cond_wait(&rs->cond, &rs->lock);
        rs->queued--;
        rs->running++;
        /* An idle worker of this app, else an unbound one (more are started
         * if none). */
        struct timespec until;
        deadline_in(&until, READY_WAIT_S * 1000);
        wproc *p = NULL;
        uint64_t settle_until = ab_now_ms() + SETTLE_MS;
        while (!rs->stopping) {
                if ((p = take_idle(rs, lang, app, ab_now_ms() < settle_until)))
                        break;
                if (ab_now_ms() < settle_until && settling(rs, lang, app)) {
                        /* its worker is between a result and its {"ready"}: it
                         * comes back in a moment (not a second worker for app) */
                        struct timespec t;
                        deadline_in(&t, 2);
                        pthread_cond_timedwait(&rs->cond, &rs->lock, &t);
                        continue;
                }
                pthread_mutex_unlock(&rs->lock);
                top_up(rs, lang);
                pthread_mutex_lock(&rs->lock);
                if ((p = take_idle(rs, lang, app, false)))
                        break;
                /* wake at least every 300 ms: a failed start is retried */
                struct timespec soon;
                deadline_in(&soon, 300);
                bool last = soon.tv_sec > until.tv_sec ||
                            (soon.tv_sec == until.tv_sec && soon.tv_nsec >= until.tv_nsec);
                if (pthread_cond_timedwait(&rs->cond, &rs->lock, last ? &until : &soon) ==
                        ETIMEDOUT &&
                    last)
                        break;
        }
        pthread_mutex_unlock(&rs->lock);
        if (p)
                top_up(rs, lang); /* replace it in the background */
        int rc = 0;
        if (!p) {
                rc = ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                "no %s runner process became ready (see the server log)",
                                lang_names[lang]);
                goto done;
        }
        json_t *line =
            json_pack("{s:s,s:o,s:{s:I,s:I,s:I},s:i}", "code", src, "variables",
                      json_is_object(req->variables) ? json_incref(req->variables) : json_object(),
                      "limits", "timeoutMs", (json_int_t)tmo, "memoryMB", (json_int_t)mem, "diskMB",
                      (json_int_t)disk, "maxRequests", rs->o.max_requests);
        set_run_memory(rs, p, mem);
        int wr = line ? write_line(p->in_w, line) : -1;
        json_decref(line);
        pthread_mutex_lock(&rs->lock);
        deadline_in(&until, tmo);
        bool timed_out = false;
        while (wr == 0 && !p->result && !p->exited) {
                if (pthread_cond_timedwait(&p->done, &rs->lock, &until) == ETIMEDOUT) {
                        timed_out = !p->result;
                        break;
                }
        }
        if (p->result) {
                out->answer = json_incref(p->result);
        } else if (timed_out) {
                out->message = xasprintf("Script execution timed out after %" PRId64 "ms", tmo);
        } else if (p->oom_kills > 0) {
                /* killed by its cgroup's OOM killer (exited: the count is in) */
                out->message = xstrdup("Memory limit exceeded");
        } else {
                out->message = xstrdup("Script ended without a result (killed or crashed; see "
                                       "the server log)");
        }
        run_done(rs, p);
        pthread_mutex_unlock(&rs->lock);
done:
        pthread_mutex_lock(&rs->lock);
        rs->running--;
        if (rs->queued > 0 || rs->stopping) /* a queued request may go, or the end waits */
                pthread_cond_broadcast(&rs->cond);
        pthread_mutex_unlock(&rs->lock);
        return rc;
}

json_t *ab_runners_stats(ab_runners *rs)
{
        pthread_mutex_lock(&rs->lock);
        json_t *j =
            json_pack("{s:i,s:i,s:i,s:{s:i,s:i},s:i,s:b}", "current", rs->running, "queued",
                      rs->queued, "max", rs->o.max_concurrency, "warm", "js", rs->n_warm[LANG_JS],
                      "python", rs->n_warm[LANG_PY], "processes", rs->n_total, "ready", rs->ready);
        pthread_mutex_unlock(&rs->lock);
        return j;
}

json_t *ab_runners_modules(void)
{
        return json_pack(
            "{s:[s,s,s,s,s,s,s,s],s:{s:s,s:[s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,"
            "s,s,s,s,s,s]}}",
            "js", "lodash", "dayjs", "moment", "uuid", "crypto-js", "qs", "url", "querystring",
            "python", "policy", "the standard library except the blocked modules", "blocked", "os",
            "sys", "subprocess", "socket", "ctypes", "shutil", "multiprocessing", "threading",
            "signal", "pty", "fcntl", "resource", "importlib", "builtins", "pickle", "marshal",
            "shelve", "tempfile", "pathlib", "glob", "io", "asyncio", "selectors", "mmap", "gc");
}

int ab_runners_new(const ab_runners_opts *o, ab_runners **out, ab_err **err)
{
        if ((!o->runtime_dir && !o->runtime_missing) || !o->manager)
                return ab_err_set(err, AB_E_INVALID, 0, "runner: no manager or runtime dir");
        ab_runners *rs = xzalloc(sizeof(*rs));
        rs->o = *o;
        rs->runtime_dir = o->runtime_dir ? xstrdup(o->runtime_dir) : NULL;
        rs->o.runtime_dir = rs->runtime_dir;
        rs->runtime_missing = o->runtime_dir ? NULL : xstrdup(o->runtime_missing);
        rs->o.runtime_missing = rs->runtime_missing;
        if (rs->o.warm <= 0)
                rs->o.warm = 4;
        if (rs->o.max_concurrency <= 0)
                rs->o.max_concurrency = 50;
        if (rs->o.max_runs <= 0)
                rs->o.max_runs = 100;
        if (rs->o.idle_s <= 0)
                rs->o.idle_s = 60;
        if (rs->o.idle_s > 86400)
                rs->o.idle_s = 86400;
        if (rs->o.timeout_ms <= 0)
                rs->o.timeout_ms = 10000;
        if (rs->o.max_timeout_ms <= 0)
                rs->o.max_timeout_ms = 60000;
        if (rs->o.memory_mb <= 0)
                rs->o.memory_mb = 64;
        if (rs->o.max_memory_mb <= 0)
                rs->o.max_memory_mb = 256;
        if (rs->o.disk_mb <= 0)
                rs->o.disk_mb = 10;
        if (rs->o.max_disk_mb <= 0)
                rs->o.max_disk_mb = 100;
        if (rs->o.max_requests <= 0)
                rs->o.max_requests = 30;
        rs->zy_in_w = rs->zy_cancel_w = -1;
        pthread_mutex_init(&rs->lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&rs->cond, &ca);
        pthread_condattr_destroy(&ca);
        *out = rs;
        return 0;
}

void ab_runners_free(ab_runners *rs)
{
        if (!rs)
                return;
        pthread_mutex_lock(&rs->lock);
        rs->stopping = true;
        /* end every warm process; their threads drop their references */
        for (int l = 0; l < N_LANG; l++) {
                while (rs->idle[l]) {
                        wproc *p = rs->idle[l];
                        rs->idle[l] = p->next;
                        if (p->cancel_w >= 0) {
                                close(p->cancel_w);
                                p->cancel_w = -1;
                        }
                        wproc_put(rs, p);
                }
        }
        for (wproc *p = rs->all; p; p = p->all_next)
                if (p->cancel_w >= 0) {
                        close(p->cancel_w);
                        p->cancel_w = -1;
                }
        /* the zygote: its exec is cancelled, its stdin closed */
        if (rs->zy_cancel_w >= 0)
                close(rs->zy_cancel_w);
        if (rs->zy_in_w >= 0)
                close(rs->zy_in_w);
        rs->zy_cancel_w = rs->zy_in_w = -1;
        pthread_cond_broadcast(&rs->cond);
        struct timespec until;
        deadline_in(&until, 5000);
        while (rs->threads > 0 || rs->running > 0)
                if (pthread_cond_timedwait(&rs->cond, &rs->lock, &until) == ETIMEDOUT)
                        break;
        bool clean = rs->threads == 0 && rs->running == 0;
        pthread_mutex_unlock(&rs->lock);
        if (!clean)
                return; /* threads still reference it: leave it (process exit follows) */
        pthread_mutex_destroy(&rs->lock);
        pthread_cond_destroy(&rs->cond);
        free(rs->zy_socket);
        ab_buf_free(&rs->zy_line);
        free(rs->runtime_dir);
        free(rs->runtime_missing);
        free(rs);
}

void ab_run_res_clear(ab_run_res *r)
{
        json_decref(r->answer);
        free(r->message);
        memset(r, 0, sizeof(*r));
}
