/* mock.c - the mock backend (backend.h, ab_mock_open): boxes that exist only
 * in this process's memory, for platforms that test their agents against
 * agentbox's API with no kernel features, no root and no Docker (as the
 * MockSandbox of agent SDKs does). docs/backends.md describes it for users.
 *
 * A box is a status and a tree of files in memory. connect hands out one end
 * of a socketpair and serves the init protocol (proto.h) on the other from a
 * thread of this process, so the manager, the tools, MCP and every front
 * reach a mock box exactly as they reach a real one. EXEC runs nothing: it
 * answers from the expectations file (first rule whose command or regex
 * matches), after the rule's delay. Terminals and the balloon are
 * unsupported. Every call is appended as one JSON line to the calls log.
 *
 * A clean stop (free) writes every box and its files to state_path, and
 * the next open reads them back; a crash loses them (the records of its
 * boxes then say the backend has no such box). */
#include "backend/backend.h"
#include "base/id.h"
#include "base/log.h"
#include "base/util.h"
#include "proto/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MOCK_PATH_MAX  4096
#define MOCK_FILES_MAX 10000 /* files and folders of one box (lookups are linear) */
#define MOCK_IO_MS     30000 /* longest wait for the client between frames */
#define MOCK_UNMATCHED 127   /* a command no rule matches: as a shell's "not found" */
/* File bytes it holds in the server's memory: per box (under its disk
 * limit) and for all boxes together, so boxes that are only a test's
 * fixtures cannot grow the server without bound. */
#define MOCK_BOX_BYTES   (64ull << 20)
#define MOCK_TOTAL_BYTES (512ull << 20)

/* ---- expectations ---- */

typedef struct rule {
        char *command; /* exact text, or NULL */
        regex_t re;    /* else this (has_re) */
        bool has_re;
        char *out, *err;
        size_t out_len, err_len;
        int exit_code;
        uint32_t delay_ms;
} rule;

typedef struct rules {
        rule *v;
        size_t n;
        struct timespec mtime; /* of the file they were read from */
        off_t size;
} rules;

/* ---- boxes ---- */

typedef struct node {
        char *path; /* absolute, normalised: "/", "/workspace/a.txt" */
        bool dir;
        uint8_t *data;
        size_t len;
        uint32_t mode;
        int64_t mtime;
} node;

typedef struct mbox {
        char *id;
        ab_box_status status;
        ab_limits limits;
        int64_t created_at, started_at;
        node *nodes;
        size_t n_nodes, cap_nodes;
        uint64_t bytes;  /* file data held, against disk_cap() */
        uint64_t *total; /* the backend's count of every box's bytes */
} mbox;

typedef struct conn {
        struct conn *next;
        int fd;
} conn;

typedef struct mock {
        ab_backend base;
        pthread_mutex_t mu; /* boxes, their files, rules, conns */
        pthread_cond_t idle;
        mbox *boxes;
        size_t n_boxes, cap_boxes;
        char *expect_path;
        rules rules;
        int log_fd;
        conn *conns; /* being served */
        size_t n_conns;
        uint64_t bytes; /* file data of every box */
        char *state_path;
        bool closing;
} mock;

static mock *MK(ab_backend *b)
{
        return (mock *)b;
}

static void rules_clear(rules *r)
{
        for (size_t i = 0; i < r->n; i++) {
                free(r->v[i].command);
                if (r->v[i].has_re)
                        regfree(&r->v[i].re);
                free(r->v[i].out);
                free(r->v[i].err);
        }
        free(r->v);
        *r = (rules){0};
}

static char *json_bytes(const json_t *j, size_t *len)
{
        const char *s = json_string_value(j);
        *len = s ? json_string_length(j) : 0;
        char *p = xmalloc(*len + 1);
        if (s)
                memcpy(p, s, *len);
        p[*len] = '\0';
        return p;
}

static int rule_parse(const json_t *o, size_t i, rule *r, ab_err **err)
{
        const json_t *cmd = json_object_get(o, "command"), *re = json_object_get(o, "regex");
        const json_t *code = json_object_get(o, "exit_code"),
                     *delay = json_object_get(o, "delay_ms");
        if (!json_is_object(o))
                return ab_err_set(err, AB_E_INVALID, 0, "commands[%zu]: must be an object", i);
        if (!!cmd == !!re || (cmd && !json_is_string(cmd)) || (re && !json_is_string(re)))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "commands[%zu]: give exactly one of \"command\" (exact text) "
                                  "and \"regex\" (POSIX extended), as a string",
                                  i);
        const char *keys[] = {"stdout", "stderr"};
        for (size_t k = 0; k < 2; k++) {
                const json_t *v = json_object_get(o, keys[k]);
                if (v && !json_is_string(v))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "commands[%zu].%s: must be a string", i, keys[k]);
        }
        if (code && (!json_is_integer(code) || json_integer_value(code) < 0 ||
                     json_integer_value(code) > 255))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "commands[%zu].exit_code: must be an integer 0..255", i);
        if (delay && (!json_is_integer(delay) || json_integer_value(delay) < 0 ||
                      json_integer_value(delay) > 3600000))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "commands[%zu].delay_ms: must be an integer 0..3600000", i);
        if (re) {
                int rc = regcomp(&r->re, json_string_value(re), REG_EXTENDED | REG_NOSUB);
                if (rc != 0) {
                        char msg[160];
                        regerror(rc, &r->re, msg, sizeof(msg));
                        return ab_err_set(err, AB_E_INVALID, 0, "commands[%zu].regex: %s", i, msg);
                }
                r->has_re = true;
        } else {
                r->command = xstrdup(json_string_value(cmd));
        }
        r->out = json_bytes(json_object_get(o, "stdout"), &r->out_len);
        r->err = json_bytes(json_object_get(o, "stderr"), &r->err_len);
        r->exit_code = code ? (int)json_integer_value(code) : 0;
        r->delay_ms = delay ? (uint32_t)json_integer_value(delay) : 0;
        return 0;
}

/* Reads the expectations file: {"commands": [rule, ...]}. */
static int rules_load(const char *path, rules *out, ab_err **err)
{
        *out = (rules){0};
        struct stat st;
        if (stat(path, &st) < 0)
                return ab_err_set(err, AB_E_INVALID, errno, "mock expectations %s", path);
        json_error_t je;
        json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        if (!j)
                return ab_err_set(err, AB_E_INVALID, 0, "mock expectations %s: line %d: %s", path,
                                  je.line, je.text);
        const json_t *cmds = json_object_get(j, "commands");
        if (!json_is_object(j) || (cmds && !json_is_array(cmds))) {
                json_decref(j);
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "mock expectations %s: must be {\"commands\": [...]}", path);
        }
        size_t n = json_array_size(cmds);
        out->v = xcalloc(n ? n : 1, sizeof(*out->v));
        for (size_t i = 0; i < n; i++) {
                if (rule_parse(json_array_get(cmds, i), i, &out->v[i], err) < 0) {
                        out->n = i + 1;
                        rules_clear(out);
                        json_decref(j);
                        return ab_err_wrap(err, "mock expectations %s", path);
                }
        }
        out->n = n;
        out->mtime = st.st_mtim;
        out->size = st.st_size;
        json_decref(j);
        return 0;
}

/* Rereads the file when it changed since it was read (tests rewrite it
 * between cases); a broken new version keeps the old rules. Under mu. */
static void rules_refresh(mock *m)
{
        struct stat st;
        if (!m->expect_path || stat(m->expect_path, &st) < 0)
                return;
        if (st.st_mtim.tv_sec == m->rules.mtime.tv_sec &&
            st.st_mtim.tv_nsec == m->rules.mtime.tv_nsec && st.st_size == m->rules.size)
                return;
        rules fresh;
        ab_err *e = NULL;
        if (rules_load(m->expect_path, &fresh, &e) < 0) {
                ab_log(AB_LOG_WARN, "mock: expectations not reloaded", "error", e->msg, NULL);
                ab_err_free(&e);
                m->rules.mtime = st.st_mtim; /* warn once per version */
                m->rules.size = st.st_size;
                return;
        }
        rules_clear(&m->rules);
        m->rules = fresh;
}

/* ---- the calls log ---- */

/* Appends {"time_ms", "box", "op", ...fields} as one line (O_APPEND: lines
 * of concurrent calls never interleave). Steals fields. */
static void log_call(mock *m, const char *box, const char *op, json_t *fields)
{
        if (m->log_fd < 0) {
                json_decref(fields);
                return;
        }
        json_t *j = fields ? fields : json_object();
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        json_object_set_new(j, "time_ms",
                            json_integer((json_int_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000));
        json_object_set_new(j, "box", json_string(box));
        json_object_set_new(j, "op", json_string(op));
        char *line = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(j);
        if (!line)
                return;
        size_t n = strlen(line);
        line = xrealloc(line, n + 2);
        line[n] = '\n';
        if (ab_write_all(m->log_fd, line, n + 1) < 0)
                ab_log(AB_LOG_WARN, "mock: cannot write the calls log", NULL);
        free(line);
}

/* ---- boxes and their files (under mu) ---- */

static mbox *box_get(mock *m, const char *id)
{
        for (size_t i = 0; i < m->n_boxes; i++)
                if (strcmp(m->boxes[i].id, id) == 0)
                        return &m->boxes[i];
        return NULL;
}

static int no_box(const char *id, ab_err **err)
{
        return ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
}

static node *node_get(mbox *x, const char *path)
{
        for (size_t i = 0; i < x->n_nodes; i++)
                if (strcmp(x->nodes[i].path, path) == 0)
                        return &x->nodes[i];
        return NULL;
}

static node *node_add(mbox *x, const char *path, bool dir, uint32_t mode)
{
        if (x->n_nodes == x->cap_nodes) {
                x->cap_nodes = x->cap_nodes ? x->cap_nodes * 2 : 16;
                x->nodes = xrealloc(x->nodes, xmul(x->cap_nodes, sizeof(*x->nodes)));
        }
        node *n = &x->nodes[x->n_nodes++];
        *n = (node){
            .path = xstrdup(path), .dir = dir, .mode = mode & 07777, .mtime = (int64_t)time(NULL)};
        return n;
}

static void node_drop(mbox *x, size_t i)
{
        x->bytes -= x->nodes[i].len;
        *x->total -= x->nodes[i].len;
        free(x->nodes[i].path);
        free(x->nodes[i].data);
        x->nodes[i] = x->nodes[--x->n_nodes];
}

static void box_clear(mbox *x)
{
        while (x->n_nodes)
                node_drop(x, x->n_nodes - 1);
        free(x->nodes);
        free(x->id);
}

/* Normalises a box path as the box's init resolves it: relative to
 * /workspace, "." and ".." resolved, ".." at the root staying there (the
 * box's root is its whole world). 0, or -EINVAL (empty, too long). */
static int path_norm(const char *in, char out[MOCK_PATH_MAX])
{
        if (!in || !*in)
                return -EINVAL;
        char tmp[MOCK_PATH_MAX];
        int w = snprintf(tmp, sizeof(tmp), "%s%s", in[0] == '/' ? "" : "/workspace/", in);
        if (w < 0 || (size_t)w >= sizeof(tmp))
                return -ENAMETOOLONG;
        size_t len = 0;
        char *save = NULL;
        for (char *c = strtok_r(tmp, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
                if (!strcmp(c, "."))
                        continue;
                if (!strcmp(c, "..")) {
                        while (len > 0 && out[len - 1] != '/')
                                len--;
                        if (len > 0)
                                len--;
                        continue;
                }
                size_t cl = strlen(c);
                memcpy(out + len, "/", 1);
                memcpy(out + len + 1, c, cl);
                len += cl + 1;
        }
        if (len == 0)
                out[len++] = '/';
        out[len] = '\0';
        return 0;
}

/* The folder holding path ("/" for "/x"), into buf. */
static void path_parent(const char *path, char buf[MOCK_PATH_MAX])
{
        snprintf(buf, MOCK_PATH_MAX, "%s", path);
        char *s = strrchr(buf, '/');
        if (s == buf)
                buf[1] = '\0';
        else if (s)
                *s = '\0';
}

/* below is `dir` itself or inside it. */
static bool path_under(const char *p, const char *dir)
{
        size_t n = strlen(dir);
        if (n == 1)
                return true;
        return !strncmp(p, dir, n) && (p[n] == '\0' || p[n] == '/');
}

/* 0 when path's folder exists (made with its parents when mkparents),
 * else -ENOENT / -ENOTDIR. */
static int ensure_parent(mbox *x, const char *path, bool mkparents)
{
        char par[MOCK_PATH_MAX];
        path_parent(path, par);
        node *p = node_get(x, par);
        if (p)
                return p->dir ? 0 : -ENOTDIR;
        if (!mkparents)
                return -ENOENT;
        int r = ensure_parent(x, par, true);
        if (r < 0)
                return r;
        if (x->n_nodes >= MOCK_FILES_MAX)
                return -ENOSPC;
        node_add(x, par, true, 0755);
        return 0;
}

static uint64_t disk_cap(const mbox *x)
{
        uint64_t d = (x->limits.disk_mib ? x->limits.disk_mib : AB_DEFAULT_DISK_MIB) << 20;
        return d < MOCK_BOX_BYTES ? d : MOCK_BOX_BYTES;
}

/* ---- answering the protocol ---- */

typedef struct sess {
        mock *m;
        int fd;
        char box[AB_ID_MAX + 1];
        abp_reader rd;
        abp_buf out;
} sess;

static int flush(sess *s)
{
        return abp_send(s->fd, &s->out, MOCK_IO_MS);
}

static void send_error(sess *s, const char *code, const char *fmt, ...) AB_PRINTF(3, 4);
static void send_error(sess *s, const char *code, const char *fmt, ...)
{
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (abp_enc_error(&s->out, code, msg) == 0)
                (void)flush(s);
}

/* As the box's init answers an errno about path. */
static void send_errno(sess *s, int e, const char *path)
{
        switch (e) {
        case ENOENT:
                return send_error(s, "not_found", "no such file or directory: %s", path);
        case ENOSPC:
                return send_error(s, "limit_exceeded", "disk quota exceeded: %s", path);
        case EISDIR:
                return send_error(s, "invalid_argument", "is a directory: %s", path);
        case ENOTDIR:
                return send_error(s, "invalid_argument", "not a directory: %s", path);
        case EEXIST:
                return send_error(s, "conflict", "already exists: %s", path);
        case ENOTEMPTY:
                return send_error(s, "conflict", "directory not empty: %s", path);
        case ENAMETOOLONG:
                return send_error(s, "invalid_argument", "path too long: %s", path);
        default:
                return send_error(s, "invalid_argument", "invalid path or argument: %s", path);
        }
}

static void send_ok(sess *s)
{
        if (abp_enc_empty(&s->out, ABP_OK) == 0)
                (void)flush(s);
}

static void queue_stream(sess *s, uint32_t stream, const char *p, size_t len, uint64_t cap,
                         bool *truncated)
{
        size_t keep = len < cap ? len : (size_t)cap;
        for (size_t off = 0; off < keep; off += ABP_CHUNK) {
                size_t n = keep - off < ABP_CHUNK ? keep - off : ABP_CHUNK;
                if (abp_enc_data(&s->out, stream, p + off, n) < 0)
                        abort(); /* n <= ABP_CHUNK */
                if (flush(s) < 0)
                        return;
        }
        if (keep < len) {
                char mark[96];
                int n = snprintf(mark, sizeof(mark),
                                 "\n[agentbox: output truncated after %llu bytes]\n",
                                 (unsigned long long)cap);
                if (abp_enc_data(&s->out, stream, mark, (size_t)n) < 0)
                        abort();
                *truncated = true;
        }
}

/* Waits ms, or less when the client hangs up (true then). */
static bool wait_or_gone(int fd, uint64_t ms)
{
        uint64_t end = ab_now_ms() + ms;
        for (;;) {
                uint64_t now = ab_now_ms();
                if (now >= end)
                        return false;
                struct pollfd p = {.fd = fd, .events = POLLIN};
                int n = poll(&p, 1, (int)(end - now > 1000 ? 1000 : end - now));
                if (n > 0) {
                        char c;
                        ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
                        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) ||
                            (p.revents & (POLLHUP | POLLERR)))
                                return true;
                        /* stray bytes (stdin after EOF): nothing to do */
                        poll(NULL, 0, 10);
                }
        }
}

/* The command as the rules see it: the shell command, or argv joined by
 * spaces. */
static char *exec_text(const abp_exec_req *q)
{
        if (q->command)
                return xstrdup(q->command);
        size_t n = 1;
        for (size_t i = 0; i < q->n_argv; i++)
                n = xadd(n, xadd(strlen(q->argv[i]), 1));
        char *s = xmalloc(n), *p = s;
        for (size_t i = 0; i < q->n_argv; i++) {
                size_t l = strlen(q->argv[i]);
                if (i)
                        *p++ = ' ';
                memcpy(p, q->argv[i], l);
                p += l;
        }
        *p = '\0';
        return s;
}

static void do_exec(sess *s, const abp_frame *f)
{
        mock *m = s->m;
        abp_exec_req q;
        if (abp_dec_exec(f, &q) < 0)
                return send_error(s, "invalid_argument", "malformed EXEC");
        _cleanup_free_ char *text = exec_text(&q);
        _cleanup_free_ char *cwd = q.cwd ? xstrdup(q.cwd) : NULL;
        _cleanup_free_ char *user = q.user && *q.user ? xstrdup(q.user) : NULL;
        bool stream_in = q.stdin_stream;
        uint64_t in_bytes = q.stdin_len;
        uint32_t timeout_ms = q.timeout_ms;
        uint64_t cap = q.output_cap ? q.output_cap : ABP_DEFAULT_CAP;
        abp_exec_req_clear(&q);
        /* stdin is read and counted, never used */
        while (stream_in) {
                abp_frame d;
                abp_data dd;
                if (abp_recv(s->fd, &s->rd, &d, MOCK_IO_MS) < 0)
                        return;
                if (d.type == ABP_EOF)
                        break;
                if (d.type != ABP_DATA || abp_dec_data(&d, &dd) < 0)
                        return send_error(s, "invalid_argument", "malformed stdin");
                in_bytes += dd.len;
        }

        pthread_mutex_lock(&m->mu);
        rules_refresh(m);
        const rule *hit = NULL;
        size_t idx = 0;
        for (size_t i = 0; i < m->rules.n && !hit; i++) {
                const rule *r = &m->rules.v[i];
                if (r->has_re ? regexec(&r->re, text, 0, NULL, 0) == 0 : !strcmp(r->command, text))
                        hit = r, idx = i;
        }
        /* copied: the rules may be reloaded while this exec waits */
        int code = hit ? hit->exit_code : MOCK_UNMATCHED;
        uint32_t delay = hit ? hit->delay_ms : 0;
        size_t out_len = hit ? hit->out_len : 0;
        _cleanup_free_ char *out = xmalloc(out_len + 1);
        if (hit)
                memcpy(out, hit->out, out_len);
        _cleanup_free_ char *errs =
            hit ? xmalloc(hit->err_len + 1)
                : xasprintf("agentbox mock: no expectation matches this command: %s\n", text);
        size_t err_len = hit ? hit->err_len : strlen(errs);
        if (hit)
                memcpy(errs, hit->err, hit->err_len);
        pthread_mutex_unlock(&m->mu);

        uint64_t t0 = ab_now_ms();
        bool timed_out = timeout_ms && delay > timeout_ms;
        bool gone = wait_or_gone(s->fd, timed_out ? timeout_ms : delay);
        json_t *lj = json_pack("{s:s,s:o,s:i,s:I,s:b}", "command", text, "matched",
                               hit ? json_integer((json_int_t)idx) : json_null(), "exit_code",
                               timed_out ? ABP_TIMEOUT_EXIT
                               : gone    ? 137
                                         : code,
                               "stdin_bytes", (json_int_t)in_bytes, "timed_out", timed_out);
        if (cwd)
                json_object_set_new(lj, "cwd", json_string(cwd));
        if (user)
                json_object_set_new(lj, "user", json_string(user));
        log_call(m, s->box, "exec", lj);
        if (gone)
                return;
        bool truncated = false;
        if (!timed_out) {
                queue_stream(s, 1, out, out_len, cap, &truncated);
                queue_stream(s, 2, errs, err_len, cap, &truncated);
        }
        abp_exit x = {.exit_code = timed_out ? ABP_TIMEOUT_EXIT : code,
                      .timed_out = timed_out,
                      .truncated = truncated,
                      .duration_ms = ab_now_ms() - t0,
                      .stdout_bytes = timed_out ? 0 : out_len,
                      .stderr_bytes = timed_out ? 0 : err_len};
        if (abp_enc_exit(&s->out, &x) == 0)
                (void)flush(s);
}

/* The box of this session, running, under mu; else an answer was sent. */
static mbox *live_box(sess *s)
{
        mbox *x = box_get(s->m, s->box);
        if (!x || x->status != AB_BOX_RUNNING) {
                pthread_mutex_unlock(&s->m->mu);
                send_error(s, "unavailable", "box %s is not running", s->box);
                return NULL;
        }
        return x;
}

static int entry_of(abp_buf *b, const char *path, const node *n)
{
        abp_entry e = {.path = path,
                       .type = n->dir ? ABP_T_DIR : ABP_T_FILE,
                       .mode = n->mode,
                       .size = n->dir ? 4096 : n->len,
                       .mtime = n->mtime};
        return abp_enc_entry(b, &e);
}

static void do_read(sess *s, const abp_file_req *q, const char *path)
{
        pthread_mutex_lock(&s->m->mu);
        mbox *x = live_box(s);
        if (!x)
                return;
        node *n = node_get(x, path);
        int e = !n ? ENOENT : n->dir ? EISDIR : 0;
        uint8_t *copy = NULL;
        size_t len = 0;
        if (!e && q->offset < n->len) {
                len = n->len - (size_t)q->offset;
                if (q->length && q->length < len)
                        len = (size_t)q->length;
                copy = xmalloc(len ? len : 1);
                memcpy(copy, n->data + q->offset, len);
        }
        pthread_mutex_unlock(&s->m->mu);
        log_call(s->m, s->box, "read",
                 json_pack("{s:s,s:I}", "path", path, "bytes", (json_int_t)len));
        if (e)
                return send_errno(s, e, path);
        bool trunc = false;
        queue_stream(s, 1, (const char *)copy, len, UINT64_MAX, &trunc);
        free(copy);
        send_ok(s);
}

static void do_write(sess *s, const abp_file_req *q, const char *path)
{
        /* the data first (bounded by the box's disk), then one change */
        uint8_t *data = NULL;
        size_t len = 0, cap = 0;
        uint64_t limit;
        pthread_mutex_lock(&s->m->mu);
        mbox *x = live_box(s);
        if (!x)
                return;
        limit = disk_cap(x);
        pthread_mutex_unlock(&s->m->mu);
        uint32_t flags = q->flags, mode = q->mode ? q->mode : 0644;
        bool over = false;
        for (;;) {
                abp_frame d;
                abp_data dd;
                if (abp_recv(s->fd, &s->rd, &d, MOCK_IO_MS) < 0) {
                        free(data);
                        return;
                }
                if (d.type == ABP_EOF)
                        break;
                if (d.type != ABP_DATA || abp_dec_data(&d, &dd) < 0) {
                        free(data);
                        return send_error(s, "invalid_argument", "malformed WRITE data");
                }
                if (over || len + dd.len > limit) {
                        over = true;
                        continue;
                }
                if (len + dd.len > cap) {
                        cap = (len + dd.len) * 2;
                        data = xrealloc(data, cap);
                }
                memcpy(data + len, dd.data, dd.len);
                len += dd.len;
        }
        int e = 0;
        pthread_mutex_lock(&s->m->mu);
        x = box_get(s->m, s->box);
        node *n = x ? node_get(x, path) : NULL;
        if (!x)
                e = ENOENT;
        else if (over)
                e = ENOSPC;
        else if (n && n->dir)
                e = EISDIR;
        else if (n && (flags & ABP_W_EXCL))
                e = EEXIST;
        else if (!n && !strcmp(path, "/"))
                e = EISDIR;
        else if (!n)
                e = -ensure_parent(x, path, flags & ABP_W_MKPARENTS);
        if (!e) {
                size_t old = n ? n->len : 0;
                size_t nlen = (flags & ABP_W_APPEND) ? old + len : len;
                if (x->bytes - old + nlen > disk_cap(x) ||
                    s->m->bytes - old + nlen > MOCK_TOTAL_BYTES ||
                    (!n && x->n_nodes >= MOCK_FILES_MAX))
                        e = ENOSPC;
        }
        if (!e) {
                if (!n)
                        n = node_add(x, path, false, mode);
                x->bytes -= n->len;
                s->m->bytes -= n->len;
                if (flags & ABP_W_APPEND) {
                        n->data = xrealloc(n->data, n->len + len + 1);
                        memcpy(n->data + n->len, data, len);
                        n->len += len;
                } else {
                        free(n->data);
                        n->data = data;
                        n->len = len;
                        data = NULL;
                }
                x->bytes += n->len;
                s->m->bytes += n->len;
                n->mtime = (int64_t)time(NULL);
        }
        pthread_mutex_unlock(&s->m->mu);
        free(data);
        log_call(s->m, s->box, "write",
                 json_pack("{s:s,s:I,s:b}", "path", path, "bytes", (json_int_t)len, "append",
                           (flags & ABP_W_APPEND) != 0));
        if (e)
                return send_errno(s, e, path);
        send_ok(s);
}

static int cmp_node(const void *a, const void *b)
{
        return strcmp((*(node *const *)a)->path, (*(node *const *)b)->path);
}

static void do_list(sess *s, const abp_file_req *q, const char *path)
{
        uint32_t depth = q->depth ? q->depth : 1;
        pthread_mutex_lock(&s->m->mu);
        mbox *x = live_box(s);
        if (!x)
                return;
        node *d = node_get(x, path);
        int e = !d ? ENOENT : !d->dir ? ENOTDIR : 0;
        size_t base = strcmp(path, "/") ? strlen(path) + 1 : 1;
        node **v = e ? NULL : xcalloc(x->n_nodes + 1, sizeof(*v));
        size_t n = 0;
        for (size_t i = 0; !e && i < x->n_nodes; i++) {
                const char *p = x->nodes[i].path;
                if (!path_under(p, path) || !strcmp(p, path))
                        continue;
                uint32_t levels = 1;
                for (const char *c = p + base; *c; c++)
                        levels += *c == '/';
                if (levels <= depth)
                        v[n++] = &x->nodes[i];
        }
        if (n)
                qsort(v, n, sizeof(*v), cmp_node);
        for (size_t i = 0; i < n && i < ABP_MAX_ENTRIES; i++)
                if (entry_of(&s->out, v[i]->path + base, v[i]) < 0)
                        break;
        pthread_mutex_unlock(&s->m->mu);
        free(v);
        log_call(s->m, s->box, "list", json_pack("{s:s,s:i}", "path", path, "depth", (int)depth));
        if (e)
                return send_errno(s, e, path);
        send_ok(s);
}

static void do_stat(sess *s, const char *path)
{
        pthread_mutex_lock(&s->m->mu);
        mbox *x = live_box(s);
        if (!x)
                return;
        node *n = node_get(x, path);
        int r = n ? entry_of(&s->out, path, n) : 0;
        pthread_mutex_unlock(&s->m->mu);
        log_call(s->m, s->box, "stat", json_pack("{s:s}", "path", path));
        if (!n)
                return send_errno(s, ENOENT, path);
        if (r == 0)
                (void)flush(s);
}

/* DELETE, MKDIR, RENAME: one change under mu; 0 or an errno. */
static int change(mbox *x, uint32_t type, const abp_file_req *q, const char *path, const char *to)
{
        node *n = node_get(x, path);
        if (type == ABP_MKDIR) {
                if (n)
                        return n->dir && (q->flags & ABP_PARENTS) ? 0 : EEXIST;
                int r = ensure_parent(x, path, q->flags & ABP_PARENTS);
                if (r < 0)
                        return -r;
                if (x->n_nodes >= MOCK_FILES_MAX)
                        return ENOSPC;
                node_add(x, path, true, q->mode ? q->mode : 0755);
                return 0;
        }
        if (!n)
                return ENOENT;
        if (!strcmp(path, "/"))
                return EINVAL;
        if (type == ABP_DELETE) {
                bool kids = false;
                for (size_t i = 0; i < x->n_nodes && !kids; i++)
                        kids = path_under(x->nodes[i].path, path) && strcmp(x->nodes[i].path, path);
                if (kids && !(q->flags & ABP_RECURSIVE))
                        return ENOTEMPTY;
                for (size_t i = x->n_nodes; i-- > 0;)
                        if (path_under(x->nodes[i].path, path))
                                node_drop(x, i);
                return 0;
        }
        /* RENAME: as rename(2) - over a file, or an empty folder by a folder */
        if (path_under(to, path))
                return strcmp(to, path) ? EINVAL : 0;
        node *t = node_get(x, to);
        if (t && t->dir != n->dir)
                return t->dir ? EISDIR : ENOTDIR;
        for (size_t i = 0; t && i < x->n_nodes; i++)
                if (path_under(x->nodes[i].path, to) && strcmp(x->nodes[i].path, to))
                        return ENOTEMPTY;
        int r = ensure_parent(x, to, false);
        if (r < 0)
                return -r;
        if (t)
                node_drop(x, (size_t)(t - x->nodes));
        size_t plen = strlen(path);
        for (size_t i = 0; i < x->n_nodes; i++) {
                node *c = &x->nodes[i];
                if (!path_under(c->path, path))
                        continue;
                char *np = xasprintf("%s%s", to, c->path + plen);
                free(c->path);
                c->path = np;
        }
        return 0;
}

static void do_change(sess *s, uint32_t type, const abp_file_req *q, const char *path)
{
        char to[MOCK_PATH_MAX] = "";
        if (type == ABP_RENAME && path_norm(q->to, to) < 0)
                return send_errno(s, EINVAL, q->to ? q->to : "");
        pthread_mutex_lock(&s->m->mu);
        mbox *x = live_box(s);
        if (!x)
                return;
        int e = change(x, type, q, path, to);
        pthread_mutex_unlock(&s->m->mu);
        const char *op = type == ABP_MKDIR ? "mkdir" : type == ABP_DELETE ? "delete" : "rename";
        json_t *lj = json_pack("{s:s}", "path", path);
        if (type == ABP_RENAME)
                json_object_set_new(lj, "to", json_string(to));
        log_call(s->m, s->box, op, lj);
        if (e)
                return send_errno(s, e, path);
        send_ok(s);
}

/* GREP over files of the box, with POSIX extended regexes (not PCRE2 as
 * init's: a mock's patterns are the test's own). */
static void do_grep(sess *s, const abp_frame *f)
{
        abp_grep_req q;
        if (abp_dec_grep(f, &q) < 0)
                return send_error(s, "invalid_argument", "malformed GREP");
        _cleanup_free_ char *pat = xmalloc(q.pattern_len * 2 + 1);
        size_t pl = 0;
        bool nul = memchr(q.pattern, 0, q.pattern_len) != NULL;
        for (size_t i = 0; i < q.pattern_len; i++) {
                char c = q.pattern[i];
                if ((q.flags & ABP_G_LITERAL) && strchr("\\^$.|?*+()[]{}", c))
                        pat[pl++] = '\\';
                pat[pl++] = c;
        }
        pat[pl] = '\0';
        regex_t re;
        int rc = nul ? REG_BADPAT
                     : regcomp(&re, pat,
                               REG_EXTENDED | REG_NOSUB |
                                   ((q.flags & ABP_G_CASE_SENSITIVE) ? 0 : REG_ICASE));
        if (rc != 0) {
                char msg[160] = "a NUL in the pattern";
                if (!nul)
                        regerror(rc, &re, msg, sizeof(msg));
                abp_grep_req_clear(&q);
                return send_error(s, "invalid_argument", "Invalid regex pattern: %s", msg);
        }
        uint32_t count = q.count ? q.count : UINT32_MAX, found = 0;
        bool truncated = false;
        pthread_mutex_lock(&s->m->mu);
        mbox *x = live_box(s);
        if (!x) {
                regfree(&re);
                abp_grep_req_clear(&q);
                return;
        }
        for (size_t i = 0; i < q.n_paths && !truncated; i++) {
                char p[MOCK_PATH_MAX];
                node *n = path_norm(q.paths[i], p) == 0 ? node_get(x, p) : NULL;
                if (!n || n->dir || (q.size_max && n->len > q.size_max) ||
                    memchr(n->data, 0,
                           n->len < ABP_GREP_BINARY_SNIFF ? n->len : ABP_GREP_BINARY_SNIFF))
                        continue;
                uint64_t line = 0;
                for (size_t off = 0; off < n->len && !truncated;) {
                        const uint8_t *nl = memchr(n->data + off, '\n', n->len - off);
                        size_t ll = nl ? (size_t)(nl - (n->data + off)) : n->len - off;
                        line++;
                        char *t = xstrndup((const char *)n->data + off, ll);
                        if (ll <= ABP_GREP_LINE_MAX && regexec(&re, t, 0, NULL, 0) == 0) {
                                if (found == count) {
                                        truncated = true;
                                } else {
                                        found++;
                                        abp_match mt = {.index = (uint32_t)i,
                                                        .line = line,
                                                        .text = t,
                                                        .len = ll < ABP_GREP_LINE_SUMMARY
                                                                   ? ll
                                                                   : ABP_GREP_LINE_SUMMARY};
                                        if (abp_enc_match(&s->out, &mt) < 0)
                                                truncated = true;
                                }
                        }
                        free(t);
                        off += ll + 1;
                }
        }
        pthread_mutex_unlock(&s->m->mu);
        regfree(&re);
        json_t *lj = json_pack("{s:s%,s:i,s:i}", "pattern", q.pattern, q.pattern_len, "files",
                               (int)q.n_paths, "matches", (int)found);
        abp_grep_req_clear(&q);
        log_call(s->m, s->box, "grep", lj);
        abp_frame_begin(&s->out, ABP_OK);
        abp_put_u32(&s->out, ABP_F_TRUNCATED, truncated);
        abp_put_u32(&s->out, ABP_F_TIMED_OUT, 0);
        if (abp_frame_end(&s->out) == 0)
                (void)flush(s);
}

static void serve(sess *s)
{
        abp_frame f;
        if (abp_recv(s->fd, &s->rd, &f, MOCK_IO_MS) < 0)
                return;
        if (f.type == ABP_PING) {
                abp_ok ok = {.version = "mock", .proto = ABP_PROTO_VERSION};
                if (abp_enc_ok(&s->out, &ok) == 0)
                        (void)flush(s);
                return;
        }
        if (f.type == ABP_EXEC)
                return do_exec(s, &f);
        if (f.type == ABP_GREP)
                return do_grep(s, &f);
        if (f.type == ABP_RESERVE)
                return send_error(s, "unsupported", "no balloon on the mock backend");
        if (abp_is_term_request(f.type)) {
                log_call(s->m, s->box, "terminal", NULL);
                return send_error(s, "unsupported", "the mock backend has no terminals");
        }
        abp_file_req q;
        if (f.type < ABP_READ || f.type > ABP_RENAME || abp_dec_file(&f, &q) < 0)
                return send_error(s, "invalid_argument", "unknown or malformed request");
        char path[MOCK_PATH_MAX];
        int r = path_norm(q.path, path);
        if (r < 0)
                return send_errno(s, -r, q.path ? q.path : "");
        switch (f.type) {
        case ABP_READ:
                return do_read(s, &q, path);
        case ABP_WRITE:
                return do_write(s, &q, path);
        case ABP_LIST:
                return do_list(s, &q, path);
        case ABP_STAT:
                return do_stat(s, path);
        default:
                return do_change(s, f.type, &q, path);
        }
}

typedef struct serve_arg {
        mock *m;
        conn c;
        char box[AB_ID_MAX + 1];
} serve_arg;

static void *serve_main(void *arg)
{
        serve_arg *a = arg;
        mock *m = a->m;
        sess s = {.m = m, .fd = a->c.fd};
        snprintf(s.box, sizeof(s.box), "%s", a->box);
        serve(&s);
        abp_reader_free(&s.rd);
        abp_buf_free(&s.out);
        pthread_mutex_lock(&m->mu);
        for (conn **p = &m->conns; *p; p = &(*p)->next) {
                if (*p == &a->c) {
                        *p = a->c.next;
                        break;
                }
        }
        close(a->c.fd);
        if (--m->n_conns == 0)
                pthread_cond_broadcast(&m->idle);
        pthread_mutex_unlock(&m->mu);
        free(a);
        return NULL;
}

/* ---- the backend ops ---- */

static int mk_create(ab_backend *b, const ab_box_spec *spec, ab_err **err)
{
        mock *m = MK(b);
        if (!spec->id || !ab_id_valid(spec->id))
                return ab_err_set(err, AB_E_INVALID, 0, "invalid box id");
        pthread_mutex_lock(&m->mu);
        if (box_get(m, spec->id)) {
                pthread_mutex_unlock(&m->mu);
                return ab_err_set(err, AB_E_CONFLICT, 0, "box '%s' exists", spec->id);
        }
        if (m->n_boxes == m->cap_boxes) {
                m->cap_boxes = m->cap_boxes ? m->cap_boxes * 2 : 16;
                m->boxes = xrealloc(m->boxes, xmul(m->cap_boxes, sizeof(*m->boxes)));
        }
        mbox *x = &m->boxes[m->n_boxes++];
        int64_t now = (int64_t)time(NULL);
        *x = (mbox){.id = xstrdup(spec->id),
                    .status = AB_BOX_RUNNING,
                    .limits = spec->limits,
                    .created_at = now,
                    .started_at = now,
                    .total = &m->bytes};
        node_add(x, "/", true, 0755);
        node_add(x, "/tmp", true, 01777);
        node_add(x, "/workspace", true, 0755);
        pthread_mutex_unlock(&m->mu);
        log_call(m, spec->id, "create",
                 spec->image ? json_pack("{s:s}", "image", spec->image) : NULL);
        return 0;
}

/* start, stop, pause, resume: a status change. */
static int set_status(ab_backend *b, const char *id, const char *op, ab_err **err)
{
        mock *m = MK(b);
        pthread_mutex_lock(&m->mu);
        mbox *x = box_get(m, id);
        if (!x) {
                pthread_mutex_unlock(&m->mu);
                return no_box(id, err);
        }
        int rc = 0;
        if (!strcmp(op, "start")) {
                if (x->status != AB_BOX_RUNNING)
                        x->started_at = (int64_t)time(NULL);
                x->status = AB_BOX_RUNNING;
        } else if (!strcmp(op, "stop")) {
                x->status = AB_BOX_STOPPED;
                x->started_at = 0;
        } else if (x->status != AB_BOX_RUNNING && x->status != AB_BOX_PAUSED) {
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box %s is not running", id);
        } else {
                x->status = !strcmp(op, "pause") ? AB_BOX_PAUSED : AB_BOX_RUNNING;
        }
        pthread_mutex_unlock(&m->mu);
        if (rc == 0)
                log_call(m, id, op, NULL);
        return rc;
}

static int mk_start(ab_backend *b, const char *id, ab_err **err)
{
        return set_status(b, id, "start", err);
}

static int mk_stop(ab_backend *b, const char *id, ab_err **err)
{
        return set_status(b, id, "stop", err);
}

static int mk_pause(ab_backend *b, const char *id, ab_err **err)
{
        return set_status(b, id, "pause", err);
}

static int mk_resume(ab_backend *b, const char *id, ab_err **err)
{
        return set_status(b, id, "resume", err);
}

static int mk_destroy(ab_backend *b, const char *id, ab_err **err)
{
        mock *m = MK(b);
        pthread_mutex_lock(&m->mu);
        mbox *x = box_get(m, id);
        if (!x) {
                pthread_mutex_unlock(&m->mu);
                return no_box(id, err);
        }
        box_clear(x);
        *x = m->boxes[--m->n_boxes];
        pthread_mutex_unlock(&m->mu);
        log_call(m, id, "destroy", NULL);
        return 0;
}

static void info_of(const mbox *x, ab_box_info *out)
{
        *out = (ab_box_info){.id = xstrdup(x->id),
                             .status = x->status,
                             .limits = x->limits,
                             .created_at = x->created_at,
                             .started_at = x->started_at,
                             .backend = "mock"};
}

static int mk_info(ab_backend *b, const char *id, ab_box_info *out, ab_err **err)
{
        mock *m = MK(b);
        memset(out, 0, sizeof(*out));
        pthread_mutex_lock(&m->mu);
        mbox *x = box_get(m, id);
        if (x)
                info_of(x, out);
        pthread_mutex_unlock(&m->mu);
        return x ? 0 : no_box(id, err);
}

static int cmp_info(const void *a, const void *b)
{
        return strcmp(((const ab_box_info *)a)->id, ((const ab_box_info *)b)->id);
}

static int mk_list(ab_backend *b, ab_box_info **out, size_t *n, ab_err **err)
{
        (void)err;
        mock *m = MK(b);
        pthread_mutex_lock(&m->mu);
        *out = xcalloc(m->n_boxes + 1, sizeof(**out));
        *n = m->n_boxes;
        for (size_t i = 0; i < m->n_boxes; i++)
                info_of(&m->boxes[i], &(*out)[i]);
        pthread_mutex_unlock(&m->mu);
        if (*n)
                qsort(*out, *n, sizeof(**out), cmp_info);
        return 0;
}

static int mk_connect(ab_backend *b, const char *id, ab_err **err)
{
        mock *m = MK(b);
        int sv[2];
        pthread_mutex_lock(&m->mu);
        mbox *x = box_get(m, id);
        int rc = !x ? no_box(id, err)
                 : x->status != AB_BOX_RUNNING
                     ? ab_err_set(err, AB_E_CONFLICT, 0, "box %s is not running", id)
                 : m->closing ? ab_err_set(err, AB_E_UNAVAILABLE, 0, "the mock backend is closing")
                              : 0;
        if (rc == 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                rc = ab_err_set(err, AB_E_INTERNAL, errno, "socketpair");
        if (rc < 0) {
                pthread_mutex_unlock(&m->mu);
                return -1;
        }
        serve_arg *a = xzalloc(sizeof(*a));
        a->m = m;
        a->c.fd = sv[1];
        snprintf(a->box, sizeof(a->box), "%s", id);
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int pe = pthread_create(&t, &at, serve_main, a);
        pthread_attr_destroy(&at);
        if (pe != 0) {
                pthread_mutex_unlock(&m->mu);
                close(sv[0]);
                close(sv[1]);
                free(a);
                return ab_err_set(err, AB_E_UNAVAILABLE, pe, "cannot start a mock session");
        }
        a->c.next = m->conns;
        m->conns = &a->c;
        m->n_conns++;
        pthread_mutex_unlock(&m->mu);
        return sv[0];
}

static int mk_stats(ab_backend *b, const char *id, ab_box_stats *out, ab_err **err)
{
        mock *m = MK(b);
        memset(out, 0, sizeof(*out));
        pthread_mutex_lock(&m->mu);
        mbox *x = box_get(m, id);
        if (x) {
                out->memory_limit = x->limits.memory_mib << 20;
                out->disk_used_bytes = x->bytes;
                out->disk_limit_bytes = disk_cap(x);
        }
        pthread_mutex_unlock(&m->mu);
        return x ? 0 : no_box(id, err);
}

/* ---- kept across a clean restart ---- */

static json_t *state_box(const mbox *x)
{
        json_t *files = json_array();
        for (size_t i = 0; i < x->n_nodes; i++) {
                const node *n = &x->nodes[i];
                json_t *f = json_pack("{s:s,s:b,s:i,s:I}", "path", n->path, "dir", n->dir, "mode",
                                      (int)n->mode, "mtime", (json_int_t)n->mtime);
                if (!n->dir) {
                        char *b64 = xmalloc(xadd(xmul(n->len / 3 + 1, 4), 1));
                        EVP_EncodeBlock((unsigned char *)b64, n->data, (int)n->len);
                        json_object_set_new(f, "data", json_string(b64));
                        free(b64);
                }
                json_array_append_new(files, f);
        }
        const ab_limits *l = &x->limits;
        return json_pack("{s:s,s:i,s:I,s:I,s:{s:f,s:I,s:I,s:I,s:i,s:I,s:I},s:o}", "id", x->id,
                         "status", (int)x->status, "created_at", (json_int_t)x->created_at,
                         "started_at", (json_int_t)x->started_at, "limits", "cpus", l->cpus,
                         "memory_mib", (json_int_t)l->memory_mib, "pids", (json_int_t)l->pids,
                         "disk_mib", (json_int_t)l->disk_mib, "timeout_s", (int)l->timeout_s,
                         "output_cap", (json_int_t)l->output_cap, "nofile", (json_int_t)l->nofile,
                         "files", files);
}

/* Writes every box to state_path (at free: a clean stop). */
static void state_save(mock *m)
{
        if (!m->state_path || !m->n_boxes)
                return;
        json_t *boxes = json_array();
        for (size_t i = 0; i < m->n_boxes; i++)
                json_array_append_new(boxes, state_box(&m->boxes[i]));
        json_t *j = json_pack("{s:i,s:o}", "version", 1, "boxes", boxes);
        char *text = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        int r = text ? ab_write_file_atomic(AT_FDCWD, m->state_path, text, strlen(text), 0600)
                     : -ENOMEM;
        free(text);
        if (r < 0)
                ab_log(AB_LOG_WARN, "mock: cannot keep the boxes for the next start", "path",
                       m->state_path, "error", strerror(-r), NULL);
}

static int64_t jint(const json_t *o, const char *k)
{
        return (int64_t)json_integer_value(json_object_get(o, k));
}

/* One file of a saved box: 0, or -1 when it is malformed. */
static int state_node(mock *m, mbox *x, const json_t *f)
{
        const char *p = json_string_value(json_object_get(f, "path"));
        char norm[MOCK_PATH_MAX];
        if (!p || path_norm(p, norm) < 0 || strcmp(norm, p) || node_get(x, p) ||
            x->n_nodes >= MOCK_FILES_MAX)
                return -1;
        bool dir = json_is_true(json_object_get(f, "dir"));
        node *n = node_add(x, p, dir, (uint32_t)jint(f, "mode"));
        n->mtime = jint(f, "mtime");
        const char *b64 = json_string_value(json_object_get(f, "data"));
        if (dir || !b64)
                return dir ? 0 : -1;
        size_t bl = strlen(b64);
        if (bl % 4 || bl > (MOCK_BOX_BYTES / 3 + 1) * 4)
                return -1;
        n->data = xmalloc(bl / 4 * 3 + 1);
        int len = EVP_DecodeBlock(n->data, (const unsigned char *)b64, (int)bl);
        if (len < 0)
                return -1;
        /* EVP_DecodeBlock counts the padding as data */
        for (size_t i = bl; i > 0 && b64[i - 1] == '=' && len > 0; i--)
                len--;
        n->len = (size_t)len;
        if (x->bytes + n->len > MOCK_BOX_BYTES || m->bytes + n->len > MOCK_TOTAL_BYTES)
                return -1;
        x->bytes += n->len;
        m->bytes += n->len;
        return 0;
}

/* Reads the boxes a clean stop left, then removes the file: a box deleted
 * after this start must not come back after a crash. */
static int state_load(mock *m, ab_err **err)
{
        if (!m->state_path)
                return 0;
        json_error_t je;
        json_t *j = json_load_file(m->state_path, 0, &je);
        if (!j && access(m->state_path, F_OK) < 0 && errno == ENOENT)
                return 0;
        const json_t *boxes = json_object_get(j, "boxes");
        bool bad = !json_is_array(boxes);
        for (size_t i = 0; !bad && i < json_array_size(boxes); i++) {
                const json_t *b = json_array_get(boxes, i), *l = json_object_get(b, "limits");
                const char *id = json_string_value(json_object_get(b, "id"));
                int64_t st = jint(b, "status");
                if (!id || !ab_id_valid(id) || box_get(m, id) || st < AB_BOX_CREATING ||
                    st > AB_BOX_STATUS_MAX || !json_is_object(l)) {
                        bad = true;
                        break;
                }
                if (m->n_boxes == m->cap_boxes) {
                        m->cap_boxes = m->cap_boxes ? m->cap_boxes * 2 : 16;
                        m->boxes = xrealloc(m->boxes, xmul(m->cap_boxes, sizeof(*m->boxes)));
                }
                mbox *x = &m->boxes[m->n_boxes++];
                *x = (mbox){.id = xstrdup(id),
                            .status = (ab_box_status)st,
                            .created_at = jint(b, "created_at"),
                            .started_at = jint(b, "started_at"),
                            .limits = {.cpus = json_number_value(json_object_get(l, "cpus")),
                                       .memory_mib = (uint64_t)jint(l, "memory_mib"),
                                       .pids = (uint64_t)jint(l, "pids"),
                                       .disk_mib = (uint64_t)jint(l, "disk_mib"),
                                       .timeout_s = (uint32_t)jint(l, "timeout_s"),
                                       .output_cap = (uint64_t)jint(l, "output_cap"),
                                       .nofile = (uint64_t)jint(l, "nofile")},
                            .total = &m->bytes};
                const json_t *files = json_object_get(b, "files");
                for (size_t k = 0; !bad && k < json_array_size(files); k++)
                        bad = state_node(m, x, json_array_get(files, k)) < 0;
                bad = bad || !node_get(x, "/");
        }
        json_decref(j);
        if (bad)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "mock boxes kept at %s are unreadable%s%s (remove the file to "
                                  "start without them)",
                                  m->state_path, j ? "" : ": ", j ? "" : je.text);
        if (unlink(m->state_path) < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, errno, "cannot remove %s", m->state_path);
        return 0;
}

static void mk_free(ab_backend *b)
{
        mock *m = MK(b);
        pthread_mutex_lock(&m->mu);
        m->closing = true;
        /* sessions end at once: their clients see the hang-up */
        for (conn *c = m->conns; c; c = c->next)
                shutdown(c->fd, SHUT_RDWR);
        while (m->n_conns)
                pthread_cond_wait(&m->idle, &m->mu);
        pthread_mutex_unlock(&m->mu);
        state_save(m);
        for (size_t i = 0; i < m->n_boxes; i++)
                box_clear(&m->boxes[i]);
        free(m->boxes);
        rules_clear(&m->rules);
        free(m->expect_path);
        free(m->state_path);
        if (m->log_fd >= 0)
                close(m->log_fd);
        pthread_cond_destroy(&m->idle);
        pthread_mutex_destroy(&m->mu);
        free(m);
}

static const ab_backend_ops mock_ops = {
    .name = "mock",
    .create = mk_create,
    .start = mk_start,
    .stop = mk_stop,
    .pause = mk_pause,
    .resume = mk_resume,
    .destroy = mk_destroy,
    .info = mk_info,
    .list = mk_list,
    .connect = mk_connect,
    .stats = mk_stats,
    .free = mk_free,
    /* connect_unix, disk_alloc, fork, snapshot, image_config: none */
};

int ab_mock_open(const ab_mock_opts *o, ab_backend **out, ab_err **err)
{
        mock *m = xzalloc(sizeof(*m));
        m->base.ops = &mock_ops;
        m->log_fd = -1;
        pthread_mutex_init(&m->mu, NULL);
        pthread_cond_init(&m->idle, NULL);
        if (o->expect_path && *o->expect_path) {
                m->expect_path = xstrdup(o->expect_path);
                if (rules_load(m->expect_path, &m->rules, err) < 0) {
                        mk_free(&m->base);
                        return -1;
                }
        }
        m->state_path = o->state_path && *o->state_path ? xstrdup(o->state_path) : NULL;
        if (state_load(m, err) < 0) {
                free(m->state_path);
                m->state_path = NULL; /* kept as it is for the admin to look at */
                mk_free(&m->base);
                return -1;
        }
        if (o->log_path && *o->log_path) {
                m->log_fd =
                    open(o->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (m->log_fd < 0) {
                        int e = errno;
                        mk_free(&m->base);
                        return ab_err_set(err, AB_E_INVALID, e, "mock calls log %s", o->log_path);
                }
        }
        *out = &m->base;
        return 0;
}
