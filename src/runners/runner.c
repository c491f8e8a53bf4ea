/* The code runner (see runner.h). One thread per warm process runs its exec
 * through the box's init; the request handler hands it one request line and
 * waits for the result line, the deadline, or the process's end. */
#include "runners/runner.h"
#include "common/log.h"
#include "runners/fetch.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#define BOX_ID       "sys-runner"
#define BOX_DIR      "/workspace/runners"
#define UID_FIRST    20000
#define UID_COUNT    10000
#define READY_WAIT_S 60
#define LINE_MAX_B   (64u << 20) /* a result line (codeReturn + log) */
#define STDERR_KEEP  4096

enum { LANG_JS, LANG_PY, N_LANG };
static const char *const lang_names[N_LANG] = {"js", "python"};

typedef enum { W_STARTING, W_READY, W_BUSY, W_DONE } wstate;

typedef struct wproc {
        struct ab_runners *rs;
        int lang;
        int uid;
        int in_w;               /* the runner's stdin */
        int cancel_r, cancel_w; /* closing cancel_w ends the exec */
        wstate state;           /* under rs->lock */
        int refs;               /* under rs->lock: the thread and a handler */
        json_t *result;         /* the "result" object, once it came */
        char *line;             /* partial stdout line */
        size_t line_len;
        char err_tail[STDERR_KEEP];
        size_t err_len;
        int n_http, max_http;
        bool exited;
        int exit_code;
        struct wproc *next; /* the idle list */
} wproc;

struct ab_runners {
        ab_runners_opts o;
        char *runtime_dir; /* o.runtime_dir points here */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool ready, preparing, stopping;
        bool have_bun;
        wproc *idle[N_LANG];
        int n_warm[N_LANG]; /* starting + ready */
        int running, queued;
        unsigned char uid_used[UID_COUNT];
        int uid_next;
        int threads; /* warm threads alive */
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

static void wproc_put(ab_runners *rs, wproc *p)
{
        /* rs->lock held */
        if (--p->refs > 0)
                return;
        if (p->uid >= UID_FIRST)
                rs->uid_used[p->uid - UID_FIRST] = 0;
        if (p->in_w >= 0)
                close(p->in_w);
        if (p->cancel_w >= 0)
                close(p->cancel_w);
        if (p->cancel_r >= 0)
                close(p->cancel_r);
        json_decref(p->result);
        free(p->line);
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

static void on_line(wproc *p, const char *line, size_t len)
{
        ab_runners *rs = p->rs;
        json_t *j = json_loadb(line, len, 0, NULL);
        if (!j)
                return; /* not ours: the runner keeps stdout for protocol lines */
        if (json_is_true(json_object_get(j, "ready"))) {
                pthread_mutex_lock(&rs->lock);
                if (p->state == W_STARTING) {
                        p->state = W_READY;
                        p->refs++; /* the idle list's */
                        p->next = rs->idle[p->lang];
                        rs->idle[p->lang] = p;
                        pthread_cond_broadcast(&rs->cond);
                }
                pthread_mutex_unlock(&rs->lock);
        } else if (json_object_get(j, "http")) {
                on_http(p, json_object_get(j, "http"));
        } else if (json_object_get(j, "result")) {
                pthread_mutex_lock(&rs->lock);
                if (!p->result)
                        p->result = json_incref(json_object_get(j, "result"));
                pthread_cond_broadcast(&rs->cond);
                pthread_mutex_unlock(&rs->lock);
        }
        json_decref(j);
}

static int on_output(void *ud, int stream, const void *buf, size_t len)
{
        wproc *p = ud;
        if (stream == 2) {
                /* keep the tail for diagnostics */
                if (len >= STDERR_KEEP) {
                        memcpy(p->err_tail, (const char *)buf + len - STDERR_KEEP, STDERR_KEEP);
                        p->err_len = STDERR_KEEP;
                } else {
                        size_t keep =
                            p->err_len + len > STDERR_KEEP ? STDERR_KEEP - len : p->err_len;
                        memmove(p->err_tail, p->err_tail + p->err_len - keep, keep);
                        memcpy(p->err_tail + keep, buf, len);
                        p->err_len = keep + len;
                }
                return 0;
        }
        const char *s = buf;
        for (size_t i = 0; i < len;) {
                const char *nl = memchr(s + i, '\n', len - i);
                size_t n = nl ? (size_t)(nl - (s + i)) : len - i;
                if (p->line_len + n > LINE_MAX_B)
                        return -1; /* a runner gone mad: end it */
                p->line = xrealloc(p->line, p->line_len + n + 1);
                memcpy(p->line + p->line_len, s + i, n);
                p->line_len += n;
                i += n;
                if (nl) {
                        on_line(p, p->line, p->line_len);
                        p->line_len = 0;
                        i++;
                }
        }
        return 0;
}

static void top_up(ab_runners *rs, int lang);
static int box_exec(ab_runners *rs, const char *cmd, ab_err **err);

static void *warm_main(void *arg)
{
        wproc *p = arg;
        ab_runners *rs = p->rs;
        int in[2] = {-1, -1};
        char cmd[512];
        if (p->lang == LANG_PY)
                snprintf(cmd, sizeof(cmd),
                         "exec python3 -S -u " BOX_DIR "/python/runner.py --uid %d", p->uid);
        else if (rs->have_bun)
                snprintf(cmd, sizeof(cmd),
                         "exec " BOX_DIR "/js/node_modules/@oven/bun-linux-x64/bin/bun " BOX_DIR
                         "/js/runner.js --uid %d",
                         p->uid);
        else
                snprintf(cmd, sizeof(cmd), "exec node " BOX_DIR "/js/runner.js --uid %d", p->uid);
        ab_err *e = NULL;
        int fd = -1;
        if (pipe2(in, O_CLOEXEC) == 0) {
                p->in_w = in[1];
                fd = rs->o.backend->ops->connect(rs->o.backend, BOX_ID, &e);
        }
        if (fd >= 0) {
                static const char *const env[] = {"TMPDIR=/tmp", NULL};
                abc_exec_req q = {
                    .command = cmd,
                    .env = env,
                    .cwd = "/tmp",
                    .stdin_fd = in[0],
                    .output_cap = LINE_MAX_B,
                    .has_cancel = true,
                    .cancel_fd = p->cancel_r,
                };
                abc_exec_res res;
                if (abc_exec(fd, &q, on_output, p, &res, &e) == 0)
                        p->exit_code = res.exit_code;
                else
                        p->exit_code = -1;
                close(fd);
        }
        if (in[0] >= 0)
                close(in[0]);
        /* Whatever the snippet left behind (a daemon forked past the policy) runs
         * as this run's own uid: end all of it before the uid is used again. */
        char kill_cmd[160];
        snprintf(kill_cmd, sizeof(kill_cmd),
                 "for i in 1 2 3 4 5 6 7 8; do pkill -KILL -U %d || exit 0; sleep 0.05; done",
                 p->uid);
        ab_err *ke = NULL;
        if (fd >= 0 && box_exec(rs, kill_cmd, &ke) < 0)
                ab_log(AB_LOG_WARN, "runner: cannot clean up after a run", "error", ke->msg, NULL);
        ab_err_free(&ke);
        pthread_mutex_lock(&rs->lock);
        bool never_ready = p->state == W_STARTING;
        if (never_ready) {
                rs->n_warm[p->lang]--;
                if (!rs->stopping)
                        ab_log(AB_LOG_WARN, "runner: a warm process ended before it was ready",
                               "lang", lang_names[p->lang], "error", e ? e->msg : "", "stderr",
                               p->err_len ? p->err_tail : "", NULL);
        }
        p->exited = true;
        p->state = W_DONE;
        pthread_cond_broadcast(&rs->cond);
        int lang = p->lang;
        wproc_put(rs, p);
        rs->threads--;
        bool again = !rs->stopping && !never_ready;
        pthread_cond_broadcast(&rs->cond);
        pthread_mutex_unlock(&rs->lock);
        ab_err_free(&e);
        if (again)
                top_up(rs, lang);
        return NULL;
}

/* Starts warm processes until `warm` of lang are starting or ready. */
static void top_up(ab_runners *rs, int lang)
{
        pthread_mutex_lock(&rs->lock);
        while (!rs->stopping && rs->ready && rs->n_warm[lang] < rs->o.warm) {
                wproc *p = xzalloc(sizeof(*p));
                p->rs = rs;
                p->lang = lang;
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

static int box_exec(ab_runners *rs, const char *cmd, ab_err **err)
{
        ab_backend *b = rs->o.backend;
        _cleanup_close_ int fd = b->ops->connect(b, BOX_ID, err);
        if (fd < 0)
                return -1;
        abc_exec_req q = {.command = cmd, .stdin_fd = -1, .timeout_ms = 120000};
        abc_exec_res res;
        if (abc_exec(fd, &q, NULL, NULL, &res, err) < 0)
                return -1;
        return res.exit_code;
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
        ab_backend *b = rs->o.backend;
        ab_box_info info;
        ab_err *e = NULL;
        if (b->ops->info(b, BOX_ID, &info, &e) < 0) {
                if (e->code != AB_E_NOT_FOUND) {
                        *err = e;
                        return -1;
                }
                ab_err_free(&e);
                long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
                ab_box_spec spec = {.id = BOX_ID};
                ab_limits_default(&spec.limits);
                spec.limits.cpus = ncpu > 0 ? (double)ncpu : 1;
                spec.limits.memory_mib = 4096;
                spec.limits.pids = 4096;
                spec.limits.disk_mib = 2048;
                if (b->ops->create(b, &spec, err) < 0)
                        return -1;
        } else {
                bool running = info.status == AB_BOX_RUNNING;
                ab_box_info_clear(&info);
                if (!running && b->ops->start(b, BOX_ID, err) < 0)
                        return -1;
        }
        _cleanup_free_ char *want = runtime_version(rs->o.runtime_dir);
        vbuf have = {0};
        {
                _cleanup_close_ int fd = b->ops->connect(b, BOX_ID, err);
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
                _cleanup_close_ int fd = b->ops->connect(b, BOX_ID, err);
                if (fd < 0 ||
                    abc_write(fd, "/workspace/.runners.tar", NULL, 0, tfd, 0, 0600, err) < 0)
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
                _cleanup_close_ int wfd = b->ops->connect(b, BOX_ID, err);
                if (wfd < 0 ||
                    abc_write(wfd, BOX_DIR "/.version", want, strlen(want), -1, 0, 0644, err) < 0)
                        return -1;
                ab_log(AB_LOG_INFO, "runner: runtime installed in the system box", "version", want,
                       NULL);
        }
        rs->have_bun =
            box_exec(rs, "test -x " BOX_DIR "/js/node_modules/@oven/bun-linux-x64/bin/bun", NULL) ==
            0;
        return 0;
}

/* Makes the system box ready once; later callers wait for the first. */
static int ensure_ready(ab_runners *rs, ab_err **err)
{
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
        pthread_cond_broadcast(&rs->cond);
        pthread_mutex_unlock(&rs->lock);
        if (r < 0) {
                ab_err_set(err, AB_E_UNAVAILABLE, 0, "the code runner is not available: %s",
                           e ? e->msg : "unknown error");
                ab_err_free(&e);
                return -1;
        }
        for (int l = 0; l < N_LANG; l++)
                top_up(rs, l);
        return 0;
}

/* ---- a run ------------------------------------------------------------ */

static int64_t clamp_limit(json_t *limits, const char *name, int64_t def, int64_t max, ab_err **err)
{
        json_t *v = json_object_get(limits, name);
        if (!v || json_is_null(v))
                return def;
        if (!json_is_number(v) || json_number_value(v) <= 0)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "Invalid request: limits.%s must be a "
                                  "positive number",
                                  name),
                       -1;
        double d = json_number_value(v);
        return d > (double)max ? max : (int64_t)d;
}

static json_t *failure(const char *fmt, ...) AB_PRINTF(1, 2);
static json_t *failure(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *m = NULL;
        if (vasprintf(&m, fmt, ap) < 0)
                abort();
        va_end(ap);
        json_t *j = json_pack("{s:b,s:s}", "success", 0, "message", m);
        free(m);
        return j;
}

int ab_runners_run(ab_runners *rs, const char *lang_name, json_t *body, json_t **out, ab_err **err)
{
        *out = NULL;
        int lang = !strcmp(lang_name, "js") ? LANG_JS : LANG_PY;
        if (!json_is_object(body))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "Invalid request: the body must be a "
                                  "JSON object");
        json_t *code = json_object_get(body, "code");
        json_t *vars = json_object_get(body, "variables");
        json_t *limits = json_object_get(body, "limits");
        if (code && !json_is_string(code))
                return ab_err_set(err, AB_E_INVALID, 0, "Invalid request: code must be a string");
        if (vars && !json_is_null(vars) && !json_is_object(vars))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "Invalid request: variables must be an object");
        if (limits && !json_is_null(limits) && !json_is_object(limits))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "Invalid request: limits must be an object");
        int64_t tmo = clamp_limit(limits, "timeoutMs", rs->o.timeout_ms, rs->o.max_timeout_ms, err);
        int64_t mem =
            tmo < 0 ? -1
                    : clamp_limit(limits, "memoryMB", rs->o.memory_mb, rs->o.max_memory_mb, err);
        int64_t disk =
            mem < 0 ? -1 : clamp_limit(limits, "diskMB", rs->o.disk_mb, rs->o.max_disk_mb, err);
        if (tmo < 0 || mem < 0 || disk < 0)
                return -1;
        const char *src = code ? json_string_value(code) : "";
        bool blank = true;
        for (const char *c = src; *c && blank; c++)
                blank = *c == ' ' || *c == '\t' || *c == '\n' || *c == '\r';
        if (blank) {
                *out = failure("Code cannot be empty");
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
        /* An idle warm process (more are started if none). */
        struct timespec until;
        deadline_in(&until, READY_WAIT_S * 1000);
        wproc *p = NULL;
        while (!rs->stopping) {
                if ((p = rs->idle[lang])) {
                        rs->idle[lang] = p->next;
                        rs->n_warm[lang]--;
                        p->state = W_BUSY;
                        break;
                }
                pthread_mutex_unlock(&rs->lock);
                top_up(rs, lang);
                pthread_mutex_lock(&rs->lock);
                if (rs->idle[lang])
                        continue;
                if (pthread_cond_timedwait(&rs->cond, &rs->lock, &until) == ETIMEDOUT)
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
        json_t *req = json_pack("{s:O,s:o,s:{s:I,s:I,s:I},s:i}", "code", code, "variables",
                                json_is_object(vars) ? json_incref(vars) : json_object(), "limits",
                                "timeoutMs", (json_int_t)tmo, "memoryMB", (json_int_t)mem, "diskMB",
                                (json_int_t)disk, "maxRequests", rs->o.max_requests);
        int wr = write_line(p->in_w, req);
        json_decref(req);
        pthread_mutex_lock(&rs->lock);
        deadline_in(&until, tmo);
        bool timed_out = false;
        while (wr == 0 && !p->result && !p->exited) {
                if (pthread_cond_timedwait(&rs->cond, &rs->lock, &until) == ETIMEDOUT) {
                        timed_out = !p->result;
                        break;
                }
        }
        if (p->result) {
                *out = json_incref(p->result);
        } else if (timed_out) {
                *out = failure("Script execution timed out after %" PRId64 "ms", tmo);
        } else {
                /* ended without a result: killed (memory), crashed */
                const char *tail = p->err_len ? p->err_tail : "";
                size_t tl = p->err_len;
                while (tl && (tail[tl - 1] == '\n' || tail[tl - 1] == ' '))
                        tl--;
                const char *last = tl ? (const char *)memrchr(tail, '\n', tl) : NULL;
                last = last ? last + 1 : tail;
                if (p->exit_code == 137 || p->exit_code == 128 + 9)
                        *out = failure(
                            "Script was killed (memory limit of %" PRId64 " MB exceeded?)", mem);
                else
                        *out = failure("Script ended without a result (exit code %d)%s%.*s",
                                       p->exit_code, tl ? ": " : "",
                                       (int)(tl - (size_t)(last - tail)), last);
        }
        /* Whatever happened, this process is done: end it (a no-op if it exited). */
        if (p->cancel_w >= 0) {
                close(p->cancel_w);
                p->cancel_w = -1;
        }
        wproc_put(rs, p); /* the idle list's reference, now ours */
        pthread_mutex_unlock(&rs->lock);
done:
        pthread_mutex_lock(&rs->lock);
        rs->running--;
        pthread_cond_broadcast(&rs->cond);
        pthread_mutex_unlock(&rs->lock);
        return rc;
}

json_t *ab_runners_stats(ab_runners *rs)
{
        pthread_mutex_lock(&rs->lock);
        json_t *j =
            json_pack("{s:i,s:i,s:i,s:{s:i,s:i},s:b}", "current", rs->running, "queued", rs->queued,
                      "max", rs->o.max_concurrency, "warm", "js", rs->n_warm[LANG_JS], "python",
                      rs->n_warm[LANG_PY], "ready", rs->ready);
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
        if (!o->runtime_dir || !o->backend)
                return ab_err_set(err, AB_E_INVALID, 0, "runner: no backend or runtime dir");
        ab_runners *rs = xzalloc(sizeof(*rs));
        rs->o = *o;
        rs->runtime_dir = xstrdup(o->runtime_dir);
        rs->o.runtime_dir = rs->runtime_dir;
        if (rs->o.warm <= 0)
                rs->o.warm = 4;
        if (rs->o.max_concurrency <= 0)
                rs->o.max_concurrency = 50;
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
        free(rs->runtime_dir);
        free(rs);
}
