/* envd, the in-sandbox API of E2B's SDK, served by the server under
 * /e2b/envd for every box (docs/compat-e2b.md): Connect RPC with JSON for
 * process.Process and filesystem.Filesystem, /files and /health. A call
 * names its box by E2b-Sandbox-Id and proves it with X-Access-Token.
 *
 * Processes: each is one exec through the manager (ab_manager_exec) on a
 * thread of its own, holding a use of the box while it runs; stdin is a
 * pipe (SendInput writes it, CloseStdin closes it), and closing a second
 * pipe, the exec's cancel fd, kills its process tree (SIGKILL). The command
 * is started by a tiny sh prologue that reports the shell's pid in the box
 * on stderr before exec'ing the command, so pids are the box's own and
 * SIGTERM is a `kill` in the box. Output goes to every stream subscribed
 * (the Start call's, any Connect's) as it arrives. Processes live in this
 * server: a restart ends them.
 *
 * Watches poll the directory's listing through the box's init (it has no
 * inotify) every WATCH_POLL_MS and report the differences. */
#include "api/connectrpc.h"
#include "api/front_e2b.h"
#include "base/log.h"

#include <fcntl.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#define WATCH_POLL_MS      200
#define KEEPALIVE_S        15
#define WATCH_MAX_DEPTH    16
#define WATCHER_MAX_EVENTS 10000
#define PID_MARK           "\036abpid "
/* sh prints the pid it will exec the command as, then becomes the command */
#define PROLOGUE             "printf '\\036abpid %s\\n' \"$$\" >&2; exec \"$@\""
#define OUTPUT_CAP           (1ull << 40) /* E2B streams a process's output without a cap */
#define MAX_PROCS_PER_BOX    128          /* running processes (each one a thread here) */
#define MAX_WATCHERS_PER_BOX 16           /* CreateWatcher's (WatchDir's count as streams) */

/* ---- access tokens ---------------------------------------------------- */

static pthread_mutex_t secret_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char secret[32];
static bool secret_ok;

static int load_secret(const char *data_dir, ab_err **err)
{
        _cleanup_free_ char *path = xasprintf("%s/e2b.secret", data_dir);
        _cleanup_free_ char *txt = NULL;
        size_t len = 0;
        if (ab_read_file(AT_FDCWD, path, &txt, &len) == 0 && len == sizeof(secret)) {
                memcpy(secret, txt, sizeof(secret));
                return 0;
        }
        unsigned char fresh[sizeof(secret)];
        if (getrandom(fresh, sizeof(fresh), 0) != (ssize_t)sizeof(fresh))
                return ab_err_set(err, AB_E_INTERNAL, errno, "getrandom");
        /* Made once: a second process racing here reads the winner's. */
        _cleanup_free_ char *tmp = xasprintf("%s/.e2b.secret.%d", data_dir, (int)getpid());
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "create %s", tmp);
        int rc = ab_write_all(fd, fresh, sizeof(fresh));
        if (rc == 0 && fsync(fd) < 0)
                rc = -errno;
        close(fd);
        if (rc < 0 || (link(tmp, path) < 0 && errno != EEXIST)) {
                unlink(tmp);
                return ab_err_set(err, AB_E_INTERNAL, rc < 0 ? -rc : errno, "write %s", path);
        }
        unlink(tmp);
        free(txt);
        txt = NULL;
        if (ab_read_file(AT_FDCWD, path, &txt, &len) < 0 || len != sizeof(secret))
                return ab_err_set(err, AB_E_INTERNAL, 0, "%s: not a secret of %zu bytes", path,
                                  sizeof(secret));
        memcpy(secret, txt, sizeof(secret));
        return 0;
}

int e2b_access_token(ab_server *s, const char *id, char out[E2B_TOKEN_LEN + 1], ab_err **err)
{
        pthread_mutex_lock(&secret_lock);
        int rc = secret_ok ? 0 : load_secret(s->cfg->data_dir, err);
        if (rc == 0)
                secret_ok = true;
        pthread_mutex_unlock(&secret_lock);
        if (rc < 0)
                return -1;
        unsigned char mac[32];
        unsigned int n = 0;
        HMAC(EVP_sha256(), secret, sizeof(secret), (const unsigned char *)id, strlen(id), mac, &n);
        for (unsigned i = 0; i < 32; i++)
                snprintf(out + 2 * i, 3, "%02x", mac[i]);
        return 0;
}

/* The box a call is for, after checking its access token: NULL after
 * answering 401 (envd's answer to a bad token). */
static const char *envd_box(ab_req *r, enum MHD_Result *ret, bool rpc)
{
        const char *id = req_header(r, "E2b-Sandbox-Id");
        const char *tok = req_header(r, "X-Access-Token");
        char want[E2B_TOKEN_LEN + 1];
        ab_err *e = NULL;
        if (!id || !*id || strlen(id) > 64) {
                *ret = rpc ? resp_json(r, 400,
                                       json_pack("{s:s,s:s}", "code", "invalid_argument", "message",
                                                 "missing E2b-Sandbox-Id header"))
                           : resp_json(r, 400,
                                       json_pack("{s:i,s:s}", "code", 400, "message",
                                                 "missing E2b-Sandbox-Id header"));
                return NULL;
        }
        if (e2b_access_token(r->srv, id, want, &e) < 0) {
                *ret = resp_err(r, e);
                return NULL;
        }
        if (!tok || !req_secret_eq(tok, want)) {
                const char *msg = "invalid or missing X-Access-Token for this sandbox";
                *ret = rpc ? resp_json(
                                 r, 401,
                                 json_pack("{s:s,s:s}", "code", "unauthenticated", "message", msg))
                           : resp_json(r, 401, json_pack("{s:i,s:s}", "code", 401, "message", msg));
                return NULL;
        }
        return id;
}

/* The user of a call (Authorization: Basic base64("name:")), as an exec's
 * user: NULL = the box's default (root). E2B's default user "user" is the
 * box's default too: agentbox boxes have no such account. */
static char *envd_user(ab_req *r)
{
        const char *h = req_header(r, "Authorization");
        if (!h || strncasecmp(h, "Basic ", 6))
                return NULL;
        char *dec = NULL;
        size_t n = 0;
        if (crpc_b64_decode(h + 6, &dec, &n) < 0)
                return NULL;
        char *colon = strchr(dec, ':');
        if (colon)
                *colon = 0;
        if (!*dec || !strcmp(dec, "user") || !strcmp(dec, "root")) {
                free(dec);
                return NULL;
        }
        return dec;
}

/* A unary Connect error (frees e). */
static enum MHD_Result rpc_err(ab_req *r, ab_err *e)
{
        const char *code = crpc_code_of(e->code);
        if (e->code == AB_E_CONFLICT && strstr(e->msg, "exists"))
                code = "already_exists";
        enum MHD_Result ret = resp_json(
            r, crpc_http_status(code),
            json_pack("{s:s,s:o}", "code", code, "message", json_bytes(e->msg, strlen(e->msg))));
        ab_err_free(&e);
        return ret;
}

static enum MHD_Result rpc_error(ab_req *r, const char *code, const char *msg)
{
        return resp_json(r, crpc_http_status(code),
                         json_pack("{s:s,s:s}", "code", code, "message", msg));
}

static bool enveloped(ab_req *r)
{
        const char *ct = req_header(r, "Content-Type");
        return ct && !strncasecmp(ct, "application/connect+json", 24);
}

/* A stream that is over at once: an end envelope with an error. */
static enum MHD_Result stream_error(ab_req *r, const char *code, const char *msg)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return resp_error(r, 500, "internal", "pipe: %s", strerror(errno));
        _cleanup_buf_ ab_buf b = {0};
        crpc_end(&b, code, msg);
        if (ab_write_all(p[1], b.p, b.n) < 0) {
                /* an empty stream: the client reports a missing end */
        }
        close(p[1]);
        return resp_stream(r, 200, "application/connect+json", p[0], NULL);
}

/* ---- entries ------------------------------------------------------------ */

/* "/a/b" + "c" -> "/a/b/c"; a relative path is relative to /workspace, the
 * box's home (and E2B's /home/user, a link to it). */
static char *abs_path(const char *base, const char *rel)
{
        _cleanup_free_ char *b = base[0] == '/' ? xstrdup(base) : xasprintf("/workspace/%s", base);
        size_t n = strlen(b);
        while (n > 1 && b[n - 1] == '/')
                b[--n] = 0;
        if (!rel || !*rel)
                return steal_pointer(&b);
        return !strcmp(b, "/") ? xasprintf("/%s", rel) : xasprintf("%s/%s", b, rel);
}

static void perm_string(char out[11], abc_ftype t, uint32_t mode)
{
        out[0] = t == ABC_DIR ? 'd' : t == ABC_SYMLINK ? 'l' : '-';
        const char *rwx = "rwxrwxrwx";
        for (int i = 0; i < 9; i++)
                out[1 + i] = mode & (1u << (8 - i)) ? rwx[i] : '-';
        out[10] = 0;
}

static const char *ftype_name(abc_ftype t)
{
        switch (t) {
        case ABC_FILE:
                return "FILE_TYPE_FILE";
        case ABC_DIR:
                return "FILE_TYPE_DIRECTORY";
        case ABC_SYMLINK:
                return "FILE_TYPE_SYMLINK";
        default:
                return "FILE_TYPE_UNSPECIFIED";
        }
}

static json_t *rfc3339(int64_t secs)
{
        time_t t = (time_t)secs;
        struct tm tm;
        gmtime_r(&t, &tm);
        char buf[32];
        strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
        return json_string(buf);
}

/* filesystem.EntryInfo of path (absolute) with st. */
static json_t *entry_info(const char *path, const abc_stat *st)
{
        const char *name = strrchr(path, '/');
        name = name && name[1] ? name + 1 : path;
        char perms[11];
        perm_string(perms, st->type, st->mode);
        json_t *j = json_pack("{s:o,s:s,s:o,s:s,s:i,s:s,s:s,s:s,s:o}", "name",
                              json_bytes(name, strlen(name)), "type", ftype_name(st->type), "path",
                              json_bytes(path, strlen(path)), "size", "0", "mode",
                              (int)(st->mode & 07777), "permissions", perms, "owner", "root",
                              "group", "root", "modifiedTime", rfc3339(st->mtime));
        char sz[32];
        snprintf(sz, sizeof(sz), "%" PRIu64, st->size);
        json_object_set_new(j, "size", json_string(sz));
        if (st->link)
                json_object_set_new(j, "symlinkTarget", json_bytes(st->link, strlen(st->link)));
        return j;
}

/* ---- box connections ------------------------------------------------- */

/* Runs fn with a connection to the box's init inside a use of it. */
typedef int (*box_fn)(int fd, void *ud, ab_err **err);

static int with_box(ab_server *s, const char *id, box_fn fn, void *ud, ab_err **err)
{
        ab_use u;
        if (ab_manager_use_begin(s->mgr, id, NULL, &u, err) < 0)
                return -1;
        int rc = -1;
        int fd = ab_manager_use_connect(s->mgr, &u, err);
        if (fd >= 0) {
                rc = fn(fd, ud, err);
                close(fd);
        }
        ab_manager_use_end(s->mgr, &u);
        return rc;
}

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
        int rc = ab_manager_term_attach(m, p->box, NULL, p->tid, &a, &e);
        if (rc == 0)
                ab_manager_use_hold(m, &a.use);
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
                ab_manager_term_detach(m, &a);
                ab_manager_term_close(m, p->box, NULL, p->tid, NULL);
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
                struct timespec ts = {KEEPALIVE_S, 0};
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
                           ? ab_manager_term_close(s->mgr, p->box, NULL, p->tid, err)
                           : ab_manager_term_signal(s->mgr, p->box, NULL, p->tid, sig, err);
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
        if (ab_manager_use_begin(s->mgr, p->box, NULL, &u, err) < 0)
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
        if (ab_manager_term_open_id(r->srv->mgr, box, NULL, &q, &info, &e) < 0) {
                ab_stream_slot_release(slot);
                p->refs = 1;
                proc_unref(p);
                enum MHD_Result ret = stream_error(r, crpc_code_of(e->code), e->msg);
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
                ab_manager_term_close(r->srv->mgr, box, NULL, p->tid, NULL);
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
                return stream_error(r, "invalid_argument", "process.cmd: required");
        json_t *pty = json_object_get(msg, "pty");
        ab_err *e = NULL;
        _cleanup_strv_ char **args = NULL;
        if (parse_strv(json_object_get(pc, "args"), &args, &e) < 0) {
                enum MHD_Result ret = stream_error(r, "invalid_argument", e->msg);
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
                return stream_error(r, "resource_exhausted",
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
        p->cwd = cwd && *cwd ? abs_path(cwd, NULL) : NULL;
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
        if (ab_manager_use_begin(r->srv->mgr, box, NULL, &p->use, &e) < 0) {
                ab_stream_slot_release(slot);
                p->refs = 1;
                proc_unref(p);
                const char *code = e->code == AB_E_NOT_FOUND ? "not_found" : "unavailable";
                ret = stream_error(r, code, e->msg);
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
                enum MHD_Result ret = stream_error(r, crpc_code_of(e->code), e->msg);
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
                        if (ab_manager_term_input(p->srv->mgr, p->box, NULL, p->tid, data + off, n,
                                                  err) < 0)
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
                return rpc_err(r, e);
        int rc = 0;
        if (!strcmp(method, "Update")) {
                json_t *size = json_object_get(json_object_get(msg, "pty"), "size");
                json_t *cj = json_object_get(size, "cols"), *rj = json_object_get(size, "rows");
                if (!p->tid)
                        rc = ab_err_set(&e, AB_E_INVALID, 0, "the process has no PTY");
                else if (json_is_integer(cj) && json_is_integer(rj))
                        rc = ab_manager_term_resize(r->srv->mgr, box, NULL, p->tid,
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
                return rpc_err(r, e);
        return resp_json(r, 200, json_object());
}

/* StreamInput: a client stream, buffered whole by the server: a start event
 * naming the process, then data events. */
static enum MHD_Result process_stream_input(ab_req *r, const char *box)
{
        ab_err *e = NULL;
        json_t *msgs;
        if (crpc_parse_stream(r->body, r->body_len, &msgs, &e) < 0)
                return rpc_err(r, e);
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
                return rpc_err(r, e);
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
        const char *box = envd_box(r, &ret, true);
        if (!box)
                return ret;
        if (!strcmp(method, "StreamInput"))
                return process_stream_input(r, box);
        bool streaming = !strcmp(method, "Start") || !strcmp(method, "Connect");
        json_t *msg;
        ab_err *e = NULL;
        if (crpc_parse_request(r->body, r->body_len, enveloped(r), &msg, &e) < 0) {
                if (streaming) {
                        ret = stream_error(r, "invalid_argument", e->msg);
                        ab_err_free(&e);
                        return ret;
                }
                return rpc_err(r, e);
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
                ret = rpc_error(r, "unimplemented", "no such method of process.Process");
        json_decref(msg);
        return ret;
}

/* ---- filesystem.Filesystem ------------------------------------------- */

typedef struct fs_call {
        const char *path, *path2;
        int depth;
        abc_stat st;
        abc_dirent *ents;
        size_t n;
} fs_call;

static int fs_stat(int fd, void *ud, ab_err **err)
{
        fs_call *c = ud;
        return abc_stat_path(fd, c->path, &c->st, err);
}

static int fs_list(int fd, void *ud, ab_err **err)
{
        fs_call *c = ud;
        return abc_list(fd, c->path, c->depth, &c->ents, &c->n, err);
}

/* Stats path following symlinks (E2B's /home/user is one): *st is the
 * target's, with the first link's target in st->link; *real (when given)
 * the path it resolved to. */
static int stat_follow(ab_server *s, const char *box, const char *path, abc_stat *st, char **real,
                       ab_err **err)
{
        char *cur = abs_path(path, NULL);
        char *first_link = NULL;
        for (int hop = 0;; hop++) {
                fs_call c = {.path = cur};
                if (with_box(s, box, fs_stat, &c, err) < 0) {
                        free(cur);
                        free(first_link);
                        return -1;
                }
                if (c.st.type != ABC_SYMLINK || !c.st.link || hop == 8) {
                        *st = c.st;
                        if (first_link) {
                                free(st->link);
                                st->link = first_link;
                        }
                        if (real)
                                *real = cur;
                        else
                                free(cur);
                        return 0;
                }
                char *next;
                if (c.st.link[0] == '/') {
                        next = xstrdup(c.st.link);
                } else {
                        char *slash = strrchr(cur, '/');
                        *slash = 0;
                        next = xasprintf("%s/%s", *cur ? cur : "", c.st.link);
                }
                if (!first_link)
                        first_link = steal_pointer(&c.st.link);
                free(c.st.link);
                free(cur);
                cur = next;
        }
}

static int fs_mkdir(int fd, void *ud, ab_err **err)
{
        fs_call *c = ud;
        return abc_mkdir(fd, c->path, true, 0755, err);
}

static int fs_move(int fd, void *ud, ab_err **err)
{
        fs_call *c = ud;
        return abc_rename(fd, c->path, c->path2, err);
}

static int fs_remove(int fd, void *ud, ab_err **err)
{
        fs_call *c = ud;
        return abc_delete(fd, c->path, true, err);
}

/* Stats c->path on a fresh connection (after an operation). */
static int fs_stat_after(ab_server *s, const char *box, fs_call *c, ab_err **err)
{
        return with_box(s, box, fs_stat, c, err);
}

static enum MHD_Result fs_entry_answer(ab_req *r, const char *path, fs_call *c)
{
        _cleanup_free_ char *shown = abs_path(path, NULL);
        json_t *j = json_pack("{s:o}", "entry", entry_info(shown, &c->st));
        free(c->st.link);
        return resp_json(r, 200, j);
}

static enum MHD_Result watch_dir(ab_req *r, const char *box, json_t *msg);
static enum MHD_Result watcher_rpc(ab_req *r, const char *box, const char *method, json_t *msg);

static enum MHD_Result fs_unary(ab_req *r, const char *box, const char *method, json_t *msg)
{
        ab_err *e = NULL;
        fs_call c = {0};
        c.path = json_string_value(json_object_get(msg, "path"));
        if (!strcmp(method, "Move")) {
                c.path = json_string_value(json_object_get(msg, "source"));
                c.path2 = json_string_value(json_object_get(msg, "destination"));
                if (!c.path || !c.path2 || !*c.path || !*c.path2)
                        return rpc_error(r, "invalid_argument", "source and destination: required");
                if (with_box(r->srv, box, fs_move, &c, &e) < 0)
                        return rpc_err(r, e);
                c.path = c.path2;
                if (fs_stat_after(r->srv, box, &c, &e) < 0)
                        return rpc_err(r, e);
                return fs_entry_answer(r, c.path2, &c);
        }
        if (!c.path || !*c.path)
                return rpc_error(r, "invalid_argument", "path: required");
        if (!strcmp(method, "Stat")) {
                if (stat_follow(r->srv, box, c.path, &c.st, NULL, &e) < 0)
                        return rpc_err(r, e);
                return fs_entry_answer(r, c.path, &c);
        }
        if (!strcmp(method, "MakeDir")) {
                /* envd answers already_exists for an existing path (the SDK's false) */
                if (with_box(r->srv, box, fs_stat, &c, &e) == 0) {
                        free(c.st.link);
                        return rpc_error(r, "already_exists", "the path exists already");
                }
                ab_err_free(&e);
                if (with_box(r->srv, box, fs_mkdir, &c, &e) < 0)
                        return rpc_err(r, e);
                if (fs_stat_after(r->srv, box, &c, &e) < 0)
                        return rpc_err(r, e);
                return fs_entry_answer(r, c.path, &c);
        }
        if (!strcmp(method, "Remove")) {
                _cleanup_free_ char *shown = abs_path(c.path, NULL);
                if (!strcmp(shown, "/") || !strcmp(shown, "/workspace"))
                        return rpc_error(r, "invalid_argument", "refusing to remove it");
                if (with_box(r->srv, box, fs_remove, &c, &e) < 0)
                        return rpc_err(r, e);
                return resp_json(r, 200, json_object());
        }
        if (!strcmp(method, "ListDir")) {
                json_t *dj = json_object_get(msg, "depth");
                c.depth = json_is_integer(dj) ? (int)json_integer_value(dj) : 1;
                if (c.depth < 1)
                        c.depth = 1;
                if (c.depth > 32)
                        c.depth = 32;
                _cleanup_free_ char *real = NULL;
                if (stat_follow(r->srv, box, c.path, &c.st, &real, &e) < 0)
                        return rpc_err(r, e);
                free(c.st.link);
                if (c.st.type != ABC_DIR)
                        return rpc_error(r, "invalid_argument", "not a directory");
                const char *shown_path = c.path;
                c.path = real;
                if (with_box(r->srv, box, fs_list, &c, &e) < 0)
                        return rpc_err(r, e);
                _cleanup_free_ char *base = abs_path(shown_path, NULL);
                json_t *a = json_array();
                for (size_t i = 0; i < c.n; i++) {
                        _cleanup_free_ char *full = abs_path(base, c.ents[i].path);
                        json_array_append_new(a, entry_info(full, &c.ents[i].st));
                }
                abc_dirents_free(c.ents, c.n);
                return resp_json(r, 200, json_pack("{s:o}", "entries", a));
        }
        return rpc_error(r, "unimplemented", "no such method of filesystem.Filesystem");
}

enum MHD_Result envd_filesystem_rpc(ab_req *r, const char *method)
{
        enum MHD_Result ret;
        const char *box = envd_box(r, &ret, true);
        if (!box)
                return ret;
        bool streaming = !strcmp(method, "WatchDir");
        json_t *msg;
        ab_err *e = NULL;
        if (crpc_parse_request(r->body, r->body_len, enveloped(r), &msg, &e) < 0) {
                if (streaming) {
                        ret = stream_error(r, "invalid_argument", e->msg);
                        ab_err_free(&e);
                        return ret;
                }
                return rpc_err(r, e);
        }
        if (streaming)
                ret = watch_dir(r, box, msg);
        else if (!strcmp(method, "CreateWatcher") || !strcmp(method, "GetWatcherEvents") ||
                 !strcmp(method, "RemoveWatcher"))
                ret = watcher_rpc(r, box, method, msg);
        else
                ret = fs_unary(r, box, method, msg);
        json_decref(msg);
        return ret;
}

/* ---- watches ------------------------------------------------------------ */

typedef struct watch {
        /* under watch_lock */
        struct watch *next;
        int refs;
        bool stop;
        char id[40];
        json_t *events; /* a watcher's queue (CreateWatcher), or NULL */
        int fd;         /* a WatchDir stream's write end, or -1 */
        /* the thread's */
        ab_server *srv;
        char *box, *path;
        bool recursive, include_entry;
        abc_dirent *prev;
        size_t n_prev;
} watch;

static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static watch *watches;

static void watch_unref(watch *w)
{
        pthread_mutex_lock(&watch_lock);
        bool last = --w->refs == 0;
        pthread_mutex_unlock(&watch_lock);
        if (!last)
                return;
        if (w->fd >= 0)
                close(w->fd);
        json_decref(w->events);
        abc_dirents_free(w->prev, w->n_prev);
        free(w->box);
        free(w->path);
        free(w);
}

/* One listing of the watched directory; -1 when the box is not running (a
 * paused box is left alone: a watch never wakes it). */
static int watch_list(watch *w, abc_dirent **out, size_t *n)
{
        ab_box_rec rec;
        if (ab_manager_get(w->srv->mgr, w->box, NULL, &rec, NULL) < 0)
                return -2; /* gone */
        bool running = rec.status == AB_BOX_RUNNING;
        ab_backend *b = ab_manager_backend(w->srv->mgr);
        int fd = running ? b->ops->connect(b, rec.backend_id, NULL) : -1;
        ab_box_rec_clear(&rec);
        if (fd < 0)
                return -1;
        int rc = abc_list(fd, w->path, w->recursive ? WATCH_MAX_DEPTH : 1, out, n, NULL);
        close(fd);
        return rc < 0 ? -1 : 0;
}

static const char *event_type_name(int t)
{
        static const char *const names[] = {"EVENT_TYPE_UNSPECIFIED", "EVENT_TYPE_CREATE",
                                            "EVENT_TYPE_WRITE",       "EVENT_TYPE_REMOVE",
                                            "EVENT_TYPE_RENAME",      "EVENT_TYPE_CHMOD"};
        return names[t];
}

/* Reports one change: to the stream, or into the watcher's queue. 0, or -1
 * when the stream's reader is gone. */
static int watch_emit(watch *w, const abc_dirent *d, int type)
{
        json_t *ev = json_pack("{s:o,s:s}", "name", json_bytes(d->path, strlen(d->path)), "type",
                               event_type_name(type));
        if (w->include_entry && type != 3) {
                _cleanup_free_ char *full = abs_path(w->path, d->path);
                json_object_set_new(ev, "entry", entry_info(full, &d->st));
        }
        pthread_mutex_lock(&watch_lock);
        int rc = 0;
        if (w->events) {
                if (json_array_size(w->events) < WATCHER_MAX_EVENTS)
                        json_array_append(w->events, ev);
        } else {
                _cleanup_buf_ ab_buf b = {0};
                crpc_envelope(&b, 0, json_pack("{s:O}", "filesystem", ev));
                rc = ab_write_all(w->fd, b.p, b.n) < 0 ? -1 : 0;
        }
        pthread_mutex_unlock(&watch_lock);
        json_decref(ev);
        return rc;
}

/* Compares two sorted listings and reports what changed. */
static int watch_diff(watch *w, abc_dirent *cur, size_t n)
{
        size_t i = 0, j = 0;
        while (i < w->n_prev || j < n) {
                int c = i == w->n_prev ? 1 : j == n ? -1 : strcmp(w->prev[i].path, cur[j].path);
                int rc = 0;
                if (c < 0) {
                        rc = watch_emit(w, &w->prev[i++], 3);
                } else if (c > 0) {
                        rc = watch_emit(w, &cur[j++], 1);
                } else {
                        const abc_stat *a = &w->prev[i].st, *b = &cur[j].st;
                        if (a->type != b->type) {
                                rc = watch_emit(w, &w->prev[i], 3);
                                if (rc == 0)
                                        rc = watch_emit(w, &cur[j], 1);
                        } else if (a->mtime != b->mtime || a->size != b->size) {
                                rc = watch_emit(w, &cur[j], 2);
                        } else if (a->mode != b->mode) {
                                rc = watch_emit(w, &cur[j], 5);
                        }
                        i++;
                        j++;
                }
                if (rc < 0)
                        return -1;
        }
        return 0;
}

static void *watch_main(void *arg)
{
        watch *w = arg;
        uint64_t last_keepalive = ab_now_ms();
        for (;;) {
                pthread_mutex_lock(&watch_lock);
                bool stop = w->stop;
                pthread_mutex_unlock(&watch_lock);
                if (stop)
                        break;
                struct timespec ts = {0, WATCH_POLL_MS * 1000000L};
                nanosleep(&ts, NULL);
                abc_dirent *cur = NULL;
                size_t n = 0;
                int k = watch_list(w, &cur, &n);
                if (k == -2)
                        break;
                if (k == 0) {
                        int rc = watch_diff(w, cur, n);
                        abc_dirents_free(w->prev, w->n_prev);
                        w->prev = cur;
                        w->n_prev = n;
                        if (rc < 0)
                                break;
                }
                if (w->fd >= 0 && ab_now_ms() - last_keepalive > KEEPALIVE_S * 1000) {
                        last_keepalive = ab_now_ms();
                        _cleanup_buf_ ab_buf b = {0};
                        crpc_envelope(&b, 0, json_pack("{s:{}}", "keepalive"));
                        if (ab_write_all(w->fd, b.p, b.n) < 0)
                                break;
                }
        }
        pthread_mutex_lock(&watch_lock);
        for (watch **l = &watches; *l; l = &(*l)->next)
                if (*l == w) {
                        *l = w->next;
                        w->refs--;
                        break;
                }
        pthread_mutex_unlock(&watch_lock);
        if (w->fd >= 0) {
                _cleanup_buf_ ab_buf b = {0};
                crpc_end(&b, NULL, NULL);
                if (ab_write_all(w->fd, b.p, b.n) < 0) {
                        /* the reader is gone */
                }
        }
        watch_unref(w);
        return NULL;
}

/* Makes a watch of msg's path (checked to be a directory) and starts its
 * thread; NULL with *err. */
static watch *watch_new(ab_req *r, const char *box, json_t *msg, int fd, ab_err **err)
{
        const char *path = json_string_value(json_object_get(msg, "path"));
        if (!path || !*path) {
                ab_err_set(err, AB_E_INVALID, 0, "path: required");
                return NULL;
        }
        abc_stat st = {0};
        char *real = NULL;
        if (stat_follow(r->srv, box, path, &st, &real, err) < 0)
                return NULL;
        free(st.link);
        if (st.type != ABC_DIR) {
                free(real);
                ab_err_set(err, AB_E_INVALID, 0, "%s is not a directory", path);
                return NULL;
        }
        watch *w = xzalloc(sizeof(*w));
        w->srv = r->srv;
        w->box = xstrdup(box);
        w->path = real; /* listed there; events name paths relative to it */
        w->recursive = json_is_true(json_object_get(msg, "recursive"));
        w->include_entry = json_is_true(json_object_get(msg, "includeEntry"));
        w->fd = fd;
        unsigned char rnd[8] = {0};
        if (getrandom(rnd, sizeof(rnd), 0) < 0) {
                /* an id made of zeros is still unique enough with the counter */
        }
        static unsigned counter;
        snprintf(w->id, sizeof(w->id), "w%02x%02x%02x%02x%02x%02x%u", rnd[0], rnd[1], rnd[2],
                 rnd[3], rnd[4], rnd[5], __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
        if (fd < 0)
                w->events = json_array();
        /* the first listing is the baseline: events are changes after it */
        if (watch_list(w, &w->prev, &w->n_prev) < 0) {
                w->prev = NULL;
                w->n_prev = 0;
        }
        w->refs = 2; /* the registry's and the thread's */
        pthread_mutex_lock(&watch_lock);
        w->next = watches;
        watches = w;
        pthread_mutex_unlock(&watch_lock);
        w->refs++; /* the caller's */
        if (spawn_detached(watch_main, w) < 0) {
                pthread_mutex_lock(&watch_lock);
                for (watch **l = &watches; *l; l = &(*l)->next)
                        if (*l == w) {
                                *l = w->next;
                                break;
                        }
                pthread_mutex_unlock(&watch_lock);
                w->fd = -1;
                w->refs = 1;
                watch_unref(w);
                ab_err_set(err, AB_E_UNAVAILABLE, 0, "cannot start a thread");
                return NULL;
        }
        return w;
}

static enum MHD_Result watch_dir(ab_req *r, const char *box, json_t *msg)
{
        enum MHD_Result ret;
        ab_stream_slot *slot = req_stream_slot(r, &ret);
        if (!slot)
                return ret;
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0) {
                ab_stream_slot_release(slot);
                return resp_error(r, 500, "internal", "pipe: %s", strerror(errno));
        }
        /* the start event goes first, before the thread can write */
        _cleanup_buf_ ab_buf b = {0};
        crpc_envelope(&b, 0, json_pack("{s:{}}", "start"));
        ab_err *e = NULL;
        watch *w = watch_new(r, box, msg, fds[1], &e);
        if (!w) {
                close(fds[1]);
                close(fds[0]);
                ab_stream_slot_release(slot);
                ret = stream_error(r, crpc_code_of(e->code), e->msg);
                ab_err_free(&e);
                return ret;
        }
        pthread_mutex_lock(&watch_lock);
        int rc = ab_write_all(fds[1], b.p, b.n);
        pthread_mutex_unlock(&watch_lock);
        (void)rc;
        watch_unref(w);
        return resp_stream_counted(r, 200, "application/connect+json", fds[0], NULL, slot);
}

static watch *watch_find(const char *box, const char *id)
{
        pthread_mutex_lock(&watch_lock);
        watch *w = watches;
        while (w && (!w->events || w->stop || strcmp(w->id, id) || strcmp(w->box, box)))
                w = w->next;
        if (w)
                w->refs++;
        pthread_mutex_unlock(&watch_lock);
        return w;
}

static enum MHD_Result watcher_rpc(ab_req *r, const char *box, const char *method, json_t *msg)
{
        ab_err *e = NULL;
        if (!strcmp(method, "CreateWatcher")) {
                int n = 0;
                pthread_mutex_lock(&watch_lock);
                for (watch *q = watches; q; q = q->next)
                        n += q->events && !q->stop && !strcmp(q->box, box);
                pthread_mutex_unlock(&watch_lock);
                if (n >= MAX_WATCHERS_PER_BOX)
                        return rpc_error(r, "resource_exhausted",
                                         "the sandbox has as many watchers as it may");
                watch *w = watch_new(r, box, msg, -1, &e);
                if (!w)
                        return rpc_err(r, e);
                json_t *j = json_pack("{s:s}", "watcherId", w->id);
                watch_unref(w);
                return resp_json(r, 200, j);
        }
        const char *id = json_string_value(json_object_get(msg, "watcherId"));
        watch *w = id ? watch_find(box, id) : NULL;
        if (!w)
                return rpc_error(r, "not_found", "watcher not found");
        json_t *j;
        pthread_mutex_lock(&watch_lock);
        if (!strcmp(method, "GetWatcherEvents")) {
                j = json_pack("{s:o}", "events", w->events);
                w->events = json_array();
        } else {
                w->stop = true;
                j = json_object();
        }
        pthread_mutex_unlock(&watch_lock);
        watch_unref(w);
        return resp_json(r, 200, j);
}

/* ---- /health and /files ------------------------------------------------- */

enum MHD_Result envd_health(ab_req *r, const char *id)
{
        const char *box = req_header(r, "E2b-Sandbox-Id");
        if (box) {
                ab_box_rec rec;
                if (ab_manager_get(r->srv->mgr, box, NULL, &rec, NULL) < 0)
                        return resp_json(r, 502,
                                         json_pack("{s:i,s:s}", "code", 502, "message",
                                                   "the sandbox is not running"));
                bool up = rec.status == AB_BOX_RUNNING || rec.status == AB_BOX_PAUSED;
                ab_box_rec_clear(&rec);
                if (!up)
                        return resp_json(r, 502,
                                         json_pack("{s:i,s:s}", "code", 502, "message",
                                                   "the sandbox is not running"));
        }
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        return resp_send(r, 204, resp);
}

static enum MHD_Result files_error(ab_req *r, ab_err *e)
{
        unsigned st = e->code == AB_E_NOT_FOUND    ? 404
                      : e->code == AB_E_INVALID    ? 400
                      : e->code == AB_E_LIMIT      ? 507
                      : e->code == AB_E_PERMISSION ? 403
                                                   : status_of(e->code);
        if (e->code == AB_E_UNAVAILABLE)
                st = 502;
        enum MHD_Result ret = resp_json(
            r, st,
            json_pack("{s:i,s:o}", "code", (int)st, "message", json_bytes(e->msg, strlen(e->msg))));
        ab_err_free(&e);
        return ret;
}

typedef struct dl_job {
        ab_server *srv;
        ab_use use;
        char *path;
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
                if (abc_read(fd, j->path, 0, 0, dl_out, j, &e) < 0)
                        ab_log(AB_LOG_WARN, "e2b download cut short", "box", j->use.rec.id, "path",
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

enum MHD_Result envd_files_get(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        const char *box = envd_box(r, &ret, false);
        if (!box)
                return ret;
        const char *path = req_query(r, "path");
        if (!path || !*path)
                return resp_json(r, 400,
                                 json_pack("{s:i,s:s}", "code", 400, "message", "path: required"));
        dl_job *j = xzalloc(sizeof(*j));
        j->srv = r->srv;
        j->path = abs_path(path, NULL);
        ab_err *e = NULL;
        if (ab_manager_use_begin(r->srv->mgr, box, NULL, &j->use, &e) < 0) {
                free(j->path);
                free(j);
                return files_error(r, e);
        }
        abc_stat st = {0};
        int fd = ab_manager_use_connect(r->srv->mgr, &j->use, &e);
        int rc = fd >= 0 ? abc_stat_path(fd, j->path, &st, &e) : -1;
        if (fd >= 0)
                close(fd);
        free(st.link);
        if (rc == 0 && st.type == ABC_DIR)
                rc = ab_err_set(&e, AB_E_INVALID, 0, "%s is a directory", j->path);
        int p[2] = {-1, -1};
        if (rc == 0 && pipe2(p, O_CLOEXEC) < 0)
                rc = ab_err_set(&e, AB_E_INTERNAL, errno, "pipe");
        if (rc < 0) {
                ab_manager_use_end(r->srv->mgr, &j->use);
                free(j->path);
                free(j);
                return files_error(r, e);
        }
        j->fd = p[1];
        if (spawn_detached(dl_main, j) < 0) {
                close(p[0]);
                close(p[1]);
                ab_manager_use_end(r->srv->mgr, &j->use);
                free(j->path);
                free(j);
                return resp_error(r, 503, "unavailable", "cannot start a thread");
        }
        /* envd's answer has the file's length: a stream cannot say it, the
         * SDK reads to the end */
        return resp_stream(r, 200, "application/octet-stream", p[0], NULL);
}

/* One file to write: its path and its bytes (in the spooled upload). */
typedef struct up_file {
        char *path;
        const char *data;
        size_t len;
} up_file;

typedef struct up_call {
        up_file *f;
        int src_fd; /* octet-stream: the upload itself, or -1 */
} up_call;

static int up_write(int fd, void *ud, ab_err **err)
{
        up_call *c = ud;
        return abc_write(fd, c->f->path, c->f->data, c->f->len, c->src_fd, ABC_W_MKPARENTS, 0, err);
}

/* Finds `needle` in hay[0..n). */
static const char *memfind(const char *hay, size_t n, const char *needle, size_t m)
{
        if (m == 0 || n < m)
                return NULL;
        for (const char *p = hay; (p = memchr(p, needle[0], (size_t)(hay + n - p) - m + 1)); p++) {
                if (!memcmp(p, needle, m))
                        return p;
                if ((size_t)(hay + n - p) <= m)
                        break;
        }
        return NULL;
}

/* A header parameter: name="value" in a Content-Disposition line. */
static char *disp_param(const char *line, size_t len, const char *name)
{
        _cleanup_free_ char *pat = xasprintf("%s=\"", name);
        size_t pl = strlen(pat);
        for (const char *p = line; (p = memfind(p, (size_t)(line + len - p), pat, pl)); p += pl) {
                if (p > line && p[-1] != ' ' && p[-1] != ';')
                        continue;
                const char *v = p + pl;
                const char *q = memchr(v, '"', (size_t)(line + len - v));
                if (!q)
                        return NULL;
                return xstrndup(v, (size_t)(q - v));
        }
        return NULL;
}

/* Splits a multipart/form-data body into its file parts. */
static int parse_multipart(const char *body, size_t len, const char *ctype, up_file **out,
                           size_t *n, ab_err **err)
{
        const char *bp = strstr(ctype, "boundary=");
        if (!bp)
                return ab_err_set(err, AB_E_INVALID, 0, "multipart: no boundary");
        bp += 9;
        _cleanup_free_ char *bnd = NULL;
        if (*bp == '"') {
                const char *q = strchr(bp + 1, '"');
                if (!q)
                        return ab_err_set(err, AB_E_INVALID, 0, "multipart: bad boundary");
                bnd = xstrndup(bp + 1, (size_t)(q - bp - 1));
        } else {
                bnd = xstrndup(bp, strcspn(bp, "; \t"));
        }
        if (!*bnd || strlen(bnd) > 200)
                return ab_err_set(err, AB_E_INVALID, 0, "multipart: bad boundary");
        _cleanup_free_ char *delim = xasprintf("--%s", bnd);
        size_t dl = strlen(delim);
        const char *p = memfind(body, len, delim, dl);
        up_file *v = NULL;
        size_t cnt = 0;
        while (p) {
                p += dl;
                size_t left = (size_t)(body + len - p);
                if (left >= 2 && p[0] == '-' && p[1] == '-')
                        break; /* the closing delimiter */
                if (left < 2 || p[0] != '\r' || p[1] != '\n')
                        goto bad;
                p += 2;
                const char *hend = memfind(p, (size_t)(body + len - p), "\r\n\r\n", 4);
                if (!hend)
                        goto bad;
                _cleanup_free_ char *fname = NULL;
                for (const char *l = p; l < hend;) {
                        const char *le = memfind(l, (size_t)(hend + 2 - l), "\r\n", 2);
                        if (!le)
                                le = hend;
                        if ((size_t)(le - l) > 20 && !strncasecmp(l, "Content-Disposition:", 20)) {
                                free(fname);
                                fname = disp_param(l, (size_t)(le - l), "filename");
                        }
                        l = le + 2;
                }
                const char *data = hend + 4;
                _cleanup_free_ char *close_delim = xasprintf("\r\n%s", delim);
                const char *next = memfind(data, (size_t)(body + len - data), close_delim, dl + 2);
                if (!next)
                        goto bad;
                if (fname) {
                        v = xrealloc(v, xmul(cnt + 1, sizeof(*v)));
                        v[cnt++] = (up_file){.path = steal_pointer(&fname),
                                             .data = data,
                                             .len = (size_t)(next - data)};
                }
                p = next + 2;
        }
        *out = v;
        *n = cnt;
        return 0;
bad:
        for (size_t i = 0; i < cnt; i++)
                free(v[i].path);
        free(v);
        return ab_err_set(err, AB_E_INVALID, 0, "multipart: malformed body");
}

enum MHD_Result envd_files_post(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        const char *box = envd_box(r, &ret, false);
        if (!box)
                return ret;
        if (r->upload_failed)
                return resp_json(r, 500,
                                 json_pack("{s:i,s:s}", "code", 500, "message",
                                           "the upload could not be spooled"));
        const char *ctype = req_header(r, "Content-Type");
        const char *qpath = req_query(r, "path");
        const char *cenc = req_header(r, "Content-Encoding");
        if (cenc && strcasecmp(cenc, "identity"))
                return resp_json(r, 400,
                                 json_pack("{s:i,s:s}", "code", 400, "message",
                                           "Content-Encoding: only identity uploads are supported "
                                           "(no gzip)"));
        ab_err *e = NULL;
        up_file *files = NULL;
        size_t n = 0;
        void *map = NULL;
        size_t maplen = r->upload_len;
        int src_fd = -1;
        if (ctype && !strncasecmp(ctype, "multipart/form-data", 19)) {
                if (maplen) {
                        map = mmap(NULL, maplen, PROT_READ, MAP_PRIVATE, r->upload_fd, 0);
                        if (map == MAP_FAILED)
                                return resp_error(r, 500, "internal", "mmap: %s", strerror(errno));
                }
                if (parse_multipart(map, maplen, ctype, &files, &n, &e) < 0) {
                        if (map)
                                munmap(map, maplen);
                        return files_error(r, e);
                }
                if (qpath && *qpath && n == 1) {
                        free(files[0].path);
                        files[0].path = xstrdup(qpath);
                }
        } else {
                /* application/octet-stream: the body is the file, path names it */
                if (!qpath || !*qpath)
                        return resp_json(
                            r, 400,
                            json_pack("{s:i,s:s}", "code", 400, "message", "path: required"));
                if (lseek(r->upload_fd, 0, SEEK_SET) != 0)
                        return resp_error(r, 500, "internal", "rewind the upload");
                files = xzalloc(sizeof(*files));
                files[0].path = xstrdup(qpath);
                n = 1;
                src_fd = r->upload_fd;
        }
        json_t *a = json_array();
        int rc = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
                char *full = abs_path(files[i].path, NULL);
                free(files[i].path);
                files[i].path = full;
                up_call c = {.f = &files[i], .src_fd = src_fd};
                rc = with_box(r->srv, box, up_write, &c, &e);
                if (rc == 0) {
                        const char *name = strrchr(full, '/');
                        json_array_append_new(a, json_pack("{s:s,s:s,s:s}", "name",
                                                           name ? name + 1 : full, "type", "file",
                                                           "path", full));
                }
        }
        for (size_t i = 0; i < n; i++)
                free(files[i].path);
        free(files);
        if (map)
                munmap(map, maplen);
        if (rc < 0) {
                json_decref(a);
                return files_error(r, e);
        }
        return resp_json(r, 200, a);
}

/* ---- shutdown ------------------------------------------------------------ */

void envd_shutdown(void)
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
                pthread_mutex_lock(&watch_lock);
                busy |= watches != NULL;
                for (watch *w = watches; w; w = w->next)
                        w->stop = true;
                pthread_mutex_unlock(&watch_lock);
                if (!busy)
                        break;
                struct timespec ts = {0, 10000000};
                nanosleep(&ts, NULL);
        }
        atomic_store(&stopping, false);
}
