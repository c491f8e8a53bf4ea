/* mock_serve.c - the init protocol (proto.h) answered in-process for a
 * mock box: EXEC from the expectations, files from the box's tree, GREP
 * with POSIX regexes; background processes (TERM_* with PIPES) from the
 * expectations too, kept per box; terminals with a pty and the balloon
 * unsupported. One request
 * per connection, as init serves it. */
#include "backend/mock_int.h"
#include "base/log.h"
#include "base/utf8.h"
#include "base/util.h"
#include "proto/proto.h"

#include <errno.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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

/* The command as the rules see it: the shell command; or, for argv ending
 * in "-c CMD" (a shell given a command line, as the fronts wrap a user's
 * command in their own helpers), CMD; else argv joined by spaces. */
static char *cmd_text(const char *command, const char *const *argv, size_t n_argv)
{
        if (command)
                return xstrdup(command);
        if (n_argv >= 3 && !strcmp(argv[n_argv - 2], "-c"))
                return xstrdup(argv[n_argv - 1]);
        size_t n = 1;
        for (size_t i = 0; i < n_argv; i++)
                n = xadd(n, xadd(strlen(argv[i]), 1));
        char *s = xmalloc(n), *p = s;
        for (size_t i = 0; i < n_argv; i++) {
                size_t l = strlen(argv[i]);
                if (i)
                        *p++ = ' ';
                memcpy(p, argv[i], l);
                p += l;
        }
        *p = '\0';
        return s;
}

static char *exec_text(const abp_exec_req *q)
{
        return cmd_text(q->command, q->argv, q->n_argv);
}

/* What the expectations answer to a command: copied, as the rules may be
 * reloaded while the command "runs". The caller frees out and err. */
typedef struct answer {
        bool hit;
        size_t idx;
        int code;
        uint32_t delay;
        char *out, *err;
        size_t out_len, err_len;
} answer;

static void match_answer(mock *m, const char *text, answer *a)
{
        pthread_mutex_lock(&m->mu);
        mock_rules_refresh(m);
        const rule *hit = NULL;
        size_t idx = 0;
        for (size_t i = 0; i < m->rules.n && !hit; i++) {
                const rule *r = &m->rules.v[i];
                if (r->has_re ? regexec(&r->re, text, 0, NULL, 0) == 0 : !strcmp(r->command, text))
                        hit = r, idx = i;
        }
        *a = (answer){.hit = hit != NULL,
                      .idx = idx,
                      .code = hit ? hit->exit_code : MOCK_UNMATCHED,
                      .delay = hit ? hit->delay_ms : 0,
                      .out_len = hit ? hit->out_len : 0};
        a->out = xmalloc(a->out_len + 1);
        if (hit) {
                memcpy(a->out, hit->out, a->out_len);
                a->err = xmalloc(hit->err_len + 1);
                memcpy(a->err, hit->err, hit->err_len);
                a->err_len = hit->err_len;
        } else {
                a->err =
                    xasprintf("agentbox mock: no expectation matches this command: %s\n", text);
                a->err_len = strlen(a->err);
        }
        pthread_mutex_unlock(&m->mu);
}

static void do_exec(sess *s, const abp_frame *f)
{
        mock *m = s->m;
        abp_exec_req q;
        if (abp_dec_exec(f, &q) < 0) {
                abp_exec_req_clear(&q); /* the decoder may have allocated before it failed */
                return send_error(s, "invalid_argument", "malformed EXEC");
        }
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

        answer a;
        match_answer(m, text, &a);
        const bool hit = a.hit;
        const size_t idx = a.idx;
        const int code = a.code;
        const uint32_t delay = a.delay;
        const size_t out_len = a.out_len, err_len = a.err_len;
        _cleanup_free_ char *out = a.out;
        _cleanup_free_ char *errs = a.err;

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
        mock_log_call(m, s->box, "exec", lj);
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
        mbox *x = mock_box_get(s->m, s->box);
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
        node *n = mock_node_get(x, path);
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
        mock_log_call(s->m, s->box, "read",
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
        limit = mock_disk_cap(x);
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
                if (dd.len == 0)
                        continue;
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
        x = mock_box_get(s->m, s->box);
        node *n = x ? mock_node_get(x, path) : NULL;
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
                e = -mock_ensure_parent(x, path, flags & ABP_W_MKPARENTS);
        if (!e) {
                size_t old = n ? n->len : 0;
                size_t nlen = (flags & ABP_W_APPEND) ? old + len : len;
                if (x->bytes - old + nlen > mock_disk_cap(x) ||
                    s->m->bytes - old + nlen > MOCK_TOTAL_BYTES ||
                    (!n && x->n_nodes >= MOCK_FILES_MAX))
                        e = ENOSPC;
        }
        if (!e) {
                if (!n)
                        n = mock_node_add(x, path, false, mode);
                x->bytes -= n->len;
                s->m->bytes -= n->len;
                if (flags & ABP_W_APPEND) {
                        n->data = xrealloc(n->data, n->len + len + 1);
                        if (len)
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
        mock_log_call(s->m, s->box, "write",
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
        node *d = mock_node_get(x, path);
        int e = !d ? ENOENT : !d->dir ? ENOTDIR : 0;
        size_t base = strcmp(path, "/") ? strlen(path) + 1 : 1;
        node **v = e ? NULL : xcalloc(x->n_nodes + 1, sizeof(*v));
        size_t n = 0;
        for (size_t i = 0; !e && i < x->n_nodes; i++) {
                const char *p = x->nodes[i].path;
                if (!mock_path_under(p, path) || !strcmp(p, path))
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
        mock_log_call(s->m, s->box, "list",
                      json_pack("{s:s,s:i}", "path", path, "depth", (int)depth));
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
        node *n = mock_node_get(x, path);
        int r = n ? entry_of(&s->out, path, n) : 0;
        pthread_mutex_unlock(&s->m->mu);
        mock_log_call(s->m, s->box, "stat", json_pack("{s:s}", "path", path));
        if (!n)
                return send_errno(s, ENOENT, path);
        if (r == 0)
                (void)flush(s);
}

/* DELETE, MKDIR, RENAME: one change under mu; 0 or an errno. */
static int change(mbox *x, uint32_t type, const abp_file_req *q, const char *path, const char *to)
{
        node *n = mock_node_get(x, path);
        if (type == ABP_MKDIR) {
                if (n)
                        return n->dir && (q->flags & ABP_PARENTS) ? 0 : EEXIST;
                int r = mock_ensure_parent(x, path, q->flags & ABP_PARENTS);
                if (r < 0)
                        return -r;
                if (x->n_nodes >= MOCK_FILES_MAX)
                        return ENOSPC;
                mock_node_add(x, path, true, q->mode ? q->mode : 0755);
                return 0;
        }
        if (!n)
                return ENOENT;
        if (!strcmp(path, "/"))
                return EINVAL;
        if (type == ABP_DELETE) {
                bool kids = false;
                for (size_t i = 0; i < x->n_nodes && !kids; i++)
                        kids = mock_path_under(x->nodes[i].path, path) &&
                               strcmp(x->nodes[i].path, path);
                if (kids && !(q->flags & ABP_RECURSIVE))
                        return ENOTEMPTY;
                for (size_t i = x->n_nodes; i-- > 0;)
                        if (mock_path_under(x->nodes[i].path, path))
                                mock_node_drop(x, i);
                return 0;
        }
        /* RENAME: as rename(2) - over a file, or an empty folder by a folder */
        if (mock_path_under(to, path))
                return strcmp(to, path) ? EINVAL : 0;
        node *t = mock_node_get(x, to);
        if (t && t->dir != n->dir)
                return t->dir ? EISDIR : ENOTDIR;
        for (size_t i = 0; t && i < x->n_nodes; i++)
                if (mock_path_under(x->nodes[i].path, to) && strcmp(x->nodes[i].path, to))
                        return ENOTEMPTY;
        int r = mock_ensure_parent(x, to, false);
        if (r < 0)
                return -r;
        if (t)
                mock_node_drop(x, (size_t)(t - x->nodes));
        size_t plen = strlen(path);
        for (size_t i = 0; i < x->n_nodes; i++) {
                node *c = &x->nodes[i];
                if (!mock_path_under(c->path, path))
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
        if (type == ABP_RENAME && mock_path_norm(q->to, to) < 0)
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
        mock_log_call(s->m, s->box, op, lj);
        if (e)
                return send_errno(s, e, path);
        send_ok(s);
}

/* A MATCH as init shapes it: valid UTF-8, the line break dropped, at most
 * ABP_GREP_LINE_SUMMARY code points ("..." ending a cut one). */
static int queue_match(sess *s, uint32_t index, uint64_t line, const char *p, size_t n)
{
        while (n && (p[n - 1] == '\n' || p[n - 1] == '\r'))
                n--;
        size_t cl = 0;
        _cleanup_free_ char *c = ab_utf8_clean(p, n, &cl);
        _cleanup_free_ char *cut = NULL;
        if (ab_utf8_count(c, cl) > ABP_GREP_LINE_SUMMARY) {
                size_t keep = ab_utf8_offset(c, cl, ABP_GREP_LINE_SUMMARY - 3);
                cut = xasprintf("%.*s...", (int)keep, c);
        }
        abp_match mt = {
            .index = index, .line = line, .text = cut ? cut : c, .len = cut ? strlen(cut) : cl};
        return abp_enc_match(&s->out, &mt);
}

/* The pattern as a POSIX extended regex (escaped when literal), or NULL
 * with *why: the search runs in the server's own process (a real box's runs
 * in the box), so what could make glibc's regex blow up in size or time -
 * counted repetition, back-references, a long pattern - is refused. */
static char *grep_pattern(const abp_grep_req *q, const char **why)
{
        *why = NULL;
        if (memchr(q->pattern, 0, q->pattern_len))
                *why = "a NUL in the pattern";
        else if (q->pattern_len > MOCK_GREP_PATTERN_MAX)
                *why = "longer than the mock backend's grep takes (1000 bytes)";
        if (*why)
                return NULL;
        bool literal = q->flags & ABP_G_LITERAL;
        char *pat = xmalloc(q->pattern_len * 2 + 1);
        size_t pl = 0;
        for (size_t i = 0; i < q->pattern_len; i++) {
                char c = q->pattern[i];
                if (literal && strchr("\\^$.|?*+()[]{}", c))
                        pat[pl++] = '\\';
                else if (!literal &&
                         (c == '{' || (c == '\\' && i + 1 < q->pattern_len &&
                                       q->pattern[i + 1] >= '0' && q->pattern[i + 1] <= '9')))
                        *why = "the mock backend's grep takes no {m,n} repetition or "
                               "back-references";
                pat[pl++] = c;
        }
        pat[pl] = '\0';
        if (*why) {
                free(pat);
                return NULL;
        }
        return pat;
}

typedef struct gfile {
        uint32_t index;
        uint8_t *data;
        size_t len;
} gfile;

/* GREP over files of the box, with POSIX extended regexes (not PCRE2 as
 * init's: a mock's files are a test's fixtures). The files are copied out
 * under mu and searched without it, against the request's deadline. */
static void do_grep(sess *s, const abp_frame *f)
{
        abp_grep_req q;
        if (abp_dec_grep(f, &q) < 0) {
                abp_grep_req_clear(&q); /* the decoder may have allocated before it failed */
                return send_error(s, "invalid_argument", "malformed GREP");
        }
        const char *why = NULL;
        _cleanup_free_ char *pat = grep_pattern(&q, &why);
        regex_t re;
        int rc = pat ? regcomp(&re, pat,
                               REG_EXTENDED | REG_NOSUB |
                                   ((q.flags & ABP_G_CASE_SENSITIVE) ? 0 : REG_ICASE))
                     : REG_BADPAT;
        if (rc != 0) {
                char msg[160];
                if (why)
                        snprintf(msg, sizeof(msg), "%s", why);
                else
                        regerror(rc, &re, msg, sizeof(msg));
                abp_grep_req_clear(&q);
                return send_error(s, "invalid_argument", "Invalid regex pattern: %s", msg);
        }
        gfile *files = xcalloc(q.n_paths + 1, sizeof(*files));
        size_t nf = 0;
        pthread_mutex_lock(&s->m->mu);
        mbox *x = live_box(s);
        for (size_t i = 0; x && i < q.n_paths; i++) {
                char p[MOCK_PATH_MAX];
                node *n = mock_path_norm(q.paths[i], p) == 0 ? mock_node_get(x, p) : NULL;
                /* (an empty file has no line to match) */
                if (!n || n->dir || !n->len || (q.size_max && n->len > q.size_max) ||
                    memchr(n->data, 0,
                           n->len < ABP_GREP_BINARY_SNIFF ? n->len : ABP_GREP_BINARY_SNIFF))
                        continue;
                files[nf].index = (uint32_t)i;
                files[nf].len = n->len;
                files[nf].data = xmalloc(n->len + 1);
                memcpy(files[nf].data, n->data, n->len);
                nf++;
        }
        if (x)
                pthread_mutex_unlock(&s->m->mu);
        uint32_t count = q.count ? q.count : UINT32_MAX, found = 0;
        uint64_t deadline = ab_now_ms() + (q.timeout_ms ? q.timeout_ms : 30000);
        bool truncated = false, timed_out = false;
        for (size_t k = 0; x && k < nf && !truncated && !timed_out; k++) {
                const gfile *g = &files[k];
                uint64_t line = 0;
                for (size_t off = 0; off < g->len && !truncated;) {
                        const uint8_t *nl = memchr(g->data + off, '\n', g->len - off);
                        size_t ll = nl ? (size_t)(nl - (g->data + off)) : g->len - off;
                        line++;
                        if (ab_now_ms() > deadline) {
                                timed_out = true;
                                break;
                        }
                        _cleanup_free_ char *t = xstrndup((const char *)g->data + off, ll);
                        if (ll <= ABP_GREP_LINE_MAX && regexec(&re, t, 0, NULL, 0) == 0) {
                                if (found == count)
                                        truncated = true;
                                else if (queue_match(s, g->index, line, t, ll) < 0)
                                        truncated = true;
                                else
                                        found++;
                        }
                        off += ll + 1;
                }
        }
        for (size_t k = 0; k < nf; k++)
                free(files[k].data);
        free(files);
        regfree(&re);
        if (!x) {
                abp_grep_req_clear(&q);
                return;
        }
        json_t *lj = json_pack("{s:s%,s:i,s:i}", "pattern", q.pattern, q.pattern_len, "files",
                               (int)q.n_paths, "matches", (int)found);
        abp_grep_req_clear(&q);
        mock_log_call(s->m, s->box, "grep", lj);
        abp_frame_begin(&s->out, ABP_OK);
        abp_put_u32(&s->out, ABP_F_TRUNCATED, truncated);
        abp_put_u32(&s->out, ABP_F_TIMED_OUT, timed_out);
        if (abp_frame_end(&s->out) == 0)
                (void)flush(s);
}

/* ---- background processes: init's keeper's TERM_* ops with PIPES=1
 * (docs/protocol.md "Background processes"), answered from the
 * expectations. Terminals with a pty are not served. ---- */

static uint64_t wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static char **strv_dup(const char *const *v)
{
        size_t n = 0;
        while (v[n])
                n++;
        char **c = xcalloc(n + 1, sizeof(*c));
        for (size_t i = 0; i < n; i++)
                c[i] = xstrdup(v[i]);
        return c;
}

static void ring_add(mring *r, const char *p, size_t n)
{
        r->total += n;
        if (n >= MOCK_PROC_RING) {
                p += n - MOCK_PROC_RING;
                n = MOCK_PROC_RING;
        }
        if (!r->p)
                r->p = xmalloc(MOCK_PROC_RING);
        if (r->len + n > MOCK_PROC_RING) {
                size_t drop = r->len + n - MOCK_PROC_RING;
                memmove(r->p, r->p + drop, r->len - drop);
                r->len -= drop;
        }
        memcpy(r->p + r->len, p, n);
        r->len += n;
}

static void proc_free(mproc *p)
{
        if (!p)
                return;
        ab_strvfreep(&p->argv);
        free(p->tag);
        free(p->out);
        free(p->err);
        free(p->ring[0].p);
        free(p->ring[1].p);
        free(p);
}

void mock_procs_clear(mbox *x)
{
        for (size_t i = 0; i < x->n_procs; i++)
                proc_free(x->procs[i]);
        free(x->procs);
        x->procs = NULL;
        x->n_procs = 0;
}

/* Ends p at its time: its output enters the rings, the rule's exit code
 * (or 124 at its timeout). Under mu. */
static void proc_tick(mproc *p, uint64_t now)
{
        if (p->ended || now < p->end_ms)
                return;
        p->ended = true;
        p->ended_ms = p->end_ms;
        p->timed_out = p->will_time_out;
        p->exit_code = p->timed_out ? ABP_TIMEOUT_EXIT : p->code;
        if (!p->timed_out) {
                ring_add(&p->ring[0], p->out, p->out_len);
                ring_add(&p->ring[p->merge ? 0 : 1], p->err, p->err_len);
                p->lines += p->out_lines;
        }
        free(p->out);
        free(p->err);
        p->out = p->err = NULL;
        p->out_len = p->err_len = 0;
}

/* A signal, as a program with default dispositions takes it: one that
 * ends a process ends it with 128+N; the ones ignored or stopping by
 * default change nothing. Under mu. */
static void proc_signal(mproc *p, int sig, uint64_t now)
{
        proc_tick(p, now);
        if (p->ended || sig <= 0 || sig == SIGCHLD || sig == SIGCONT || sig == SIGURG ||
            sig == SIGWINCH || sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU)
                return;
        p->ended = true;
        p->ended_ms = now;
        p->exit_code = 128 + sig;
        free(p->out);
        free(p->err);
        p->out = p->err = NULL;
        p->out_len = p->err_len = 0;
}

static mproc *proc_find(mbox *x, const char *id)
{
        for (size_t i = 0; id && i < x->n_procs; i++)
                if (!strcmp(x->procs[i]->id, id))
                        return x->procs[i];
        return NULL;
}

static void proc_drop(mbox *x, size_t i)
{
        proc_free(x->procs[i]);
        memmove(&x->procs[i], &x->procs[i + 1], (x->n_procs - i - 1) * sizeof(*x->procs));
        x->n_procs--;
}

static int queue_proc_info(abp_buf *b, const mproc *p)
{
        size_t n = 0;
        while (p->argv[n])
                n++;
        abp_term_info t = {.id = p->id,
                           .argv = (const char **)p->argv,
                           .n_argv = n,
                           .pid = p->pid,
                           .created_ms = p->created_ms,
                           .running = !p->ended,
                           .has_exit = p->ended,
                           .exit_code = p->exit_code,
                           .pipes = true,
                           .timed_out = p->timed_out,
                           .ended_ms = p->ended ? p->ended_ms : 0,
                           .lines = p->lines,
                           .tag = p->tag};
        return abp_enc_term(b, &t);
}

static uint64_t count_nl(const char *p, size_t n)
{
        uint64_t k = 0;
        for (const char *e = p + n; (p = memchr(p, '\n', (size_t)(e - p))); p++)
                k++;
        return k;
}

/* Keeps the last MOCK_PROC_RING bytes of *p (what a ring would). */
static void keep_tail(char **p, size_t *n)
{
        if (*n <= MOCK_PROC_RING)
                return;
        char *t = xmalloc(MOCK_PROC_RING);
        memcpy(t, *p + *n - MOCK_PROC_RING, MOCK_PROC_RING);
        free(*p);
        *p = t;
        *n = MOCK_PROC_RING;
}

static void proc_open(sess *s, const abp_term_req *q)
{
        static const char *const login[] = {"/bin/bash", "-l", NULL};
        if (!q->pipes) {
                mock_log_call(s->m, s->box, "terminal", NULL);
                return send_error(s, "unsupported",
                                  "the mock backend has no terminals (a pty); background "
                                  "processes are served");
        }
        const char *const *argv = q->n_argv ? (const char *const *)q->argv : login;
        size_t n_argv = q->n_argv ? q->n_argv : 2;
        _cleanup_free_ char *text = cmd_text(q->command, argv, n_argv);
        answer a;
        match_answer(s->m, text, &a);
        mproc *p = xzalloc(sizeof(*p));
        if (q->command) {
                const char *v[] = {"/bin/bash", "-c", q->command, NULL};
                p->argv = strv_dup(v);
        } else {
                p->argv = strv_dup(argv);
        }
        p->tag = q->tag ? xstrdup(q->tag) : NULL;
        p->merge = q->merge;
        p->stdin_closed = q->close_stdin;
        p->created_ms = wall_ms();
        p->will_time_out = q->timeout_ms && a.delay > q->timeout_ms;
        p->end_ms = p->created_ms + (p->will_time_out ? q->timeout_ms : a.delay);
        p->code = a.code;
        p->out_lines = count_nl(a.out, a.out_len) + (q->merge ? count_nl(a.err, a.err_len) : 0);
        p->out = a.out;
        p->out_len = a.out_len;
        p->err = a.err;
        p->err_len = a.err_len;
        keep_tail(&p->out, &p->out_len);
        keep_tail(&p->err, &p->err_len);
        const char *why = NULL;
        pthread_mutex_lock(&s->m->mu);
        mbox *x = live_box(s);
        if (!x) {
                proc_free(p);
                return;
        }
        size_t running = 0;
        for (size_t i = 0; i < x->n_procs; i++) {
                proc_tick(x->procs[i], p->created_ms);
                running += !x->procs[i]->ended;
        }
        if (running >= MOCK_PROCS_RUNNING)
                why = "too many background processes running in this box (64)";
        if (!why && x->n_procs >= MOCK_PROCS_KEPT) {
                size_t i = 0;
                while (i < x->n_procs && (!x->procs[i]->ended || x->procs[i]->clients))
                        i++;
                if (i < x->n_procs)
                        proc_drop(x, i);
                else
                        why = "too many background processes kept in this box (96)";
        }
        json_t *lj =
            json_pack("{s:s,s:o,s:i,s:b}", "command", text, "matched",
                      a.hit ? json_integer((json_int_t)a.idx) : json_null(), "exit_code",
                      p->will_time_out ? ABP_TIMEOUT_EXIT : p->code, "timed_out", p->will_time_out);
        if (why) {
                pthread_mutex_unlock(&s->m->mu);
                proc_free(p);
                json_object_set_new(lj, "error", json_string(why));
                mock_log_call(s->m, s->box, "process_start", lj);
                return send_error(s, "conflict", "%s", why);
        }
        static uint32_t seq; /* under mu */
        snprintf(p->id, sizeof(p->id), "t_%012llx%08x", (unsigned long long)p->created_ms, ++seq);
        p->pid = x->next_pid < 100 ? (x->next_pid = 100) : ++x->next_pid;
        x->procs = xrealloc(x->procs, (x->n_procs + 1) * sizeof(*x->procs));
        x->procs[x->n_procs++] = p;
        proc_tick(p, p->created_ms); /* no delay: ended at once */
        int r = queue_proc_info(&s->out, p);
        json_object_set_new(lj, "id", json_string(p->id));
        json_object_set_new(lj, "pid", json_integer(p->pid));
        if (p->tag)
                json_object_set_new(lj, "tag", json_string(p->tag));
        if (q->cwd)
                json_object_set_new(lj, "cwd", json_string(q->cwd));
        if (q->user && *q->user)
                json_object_set_new(lj, "user", json_string(q->user));
        pthread_mutex_unlock(&s->m->mu);
        mock_log_call(s->m, s->box, "process_start", lj);
        if (r == 0)
                (void)flush(s);
}

static void proc_list(sess *s, bool pipes)
{
        pthread_mutex_lock(&s->m->mu);
        mbox *x = live_box(s);
        if (!x)
                return;
        uint64_t now = wall_ms();
        size_t n = 0;
        for (size_t i = 0; pipes && i < x->n_procs; i++, n++) {
                proc_tick(x->procs[i], now);
                if (queue_proc_info(&s->out, x->procs[i]) < 0)
                        abort(); /* a tag and argv fit in a frame */
        }
        pthread_mutex_unlock(&s->m->mu);
        mock_log_call(s->m, s->box, pipes ? "process_list" : "terminal_list",
                      json_pack("{s:i}", "count", (int)n));
        send_ok(s);
}

/* Queues what ring r got since *sent (at most what it holds). */
static void queue_ring(abp_buf *b, uint32_t stream, const mring *r, uint64_t *sent)
{
        uint64_t fresh = r->total - *sent;
        size_t n = fresh < r->len ? (size_t)fresh : r->len;
        const char *p = r->p + r->len - n;
        for (size_t off = 0; off < n; off += ABP_CHUNK) {
                size_t k = n - off < ABP_CHUNK ? n - off : ABP_CHUNK;
                if (abp_enc_data(b, stream, p + off, k) < 0)
                        abort(); /* k <= ABP_CHUNK */
        }
        *sent = r->total;
}

/* An attached session: DATA(0) and EOF feed stdin (counted), SIGNAL
 * applies; until p ends (EXIT), is closed (EOF), the box goes (hang-up)
 * or the client detaches. */
static void proc_follow(sess *s, const char *id, uint64_t sent[2])
{
        uint64_t in = 0;
        for (;;) {
                pthread_mutex_lock(&s->m->mu);
                mbox *x = mock_box_get(s->m, s->box);
                bool paused = x && x->status == AB_BOX_PAUSED; /* frozen: it waits */
                mproc *p = x && (x->status == AB_BOX_RUNNING || paused) ? proc_find(x, id) : NULL;
                uint64_t now = wall_ms(), wait = 0;
                if (p && paused) {
                        p->stdin_bytes += in;
                        wait = 200;
                } else if (p) {
                        p->stdin_bytes += in;
                        proc_tick(p, now);
                        if (p->ended) {
                                queue_ring(&s->out, 1, &p->ring[0], &sent[0]);
                                queue_ring(&s->out, 2, &p->ring[1], &sent[1]);
                                abp_exit ex = {.exit_code = p->exit_code,
                                               .timed_out = p->timed_out};
                                if (abp_enc_exit(&s->out, &ex) < 0)
                                        abort();
                        }
                        wait = p->end_ms > now ? p->end_ms - now : 0;
                        wait = wait > 200 ? 200 : wait;
                } else if (x && x->status == AB_BOX_RUNNING) {
                        if (abp_enc_empty(&s->out, ABP_EOF) < 0) /* closed */
                                abort();
                }
                bool done = !p || (p->ended && !paused);
                pthread_mutex_unlock(&s->m->mu);
                in = 0;
                if (done) {
                        (void)flush(s);
                        return;
                }
                abp_frame f;
                abp_data d;
                abp_term_req q;
                int r = abp_recv(s->fd, &s->rd, &f, (int)wait);
                if (r == -ETIMEDOUT)
                        continue;
                if (r < 0)
                        return; /* detached */
                if (f.type == ABP_DATA && abp_dec_data(&f, &d) == 0 && d.stream == 0) {
                        in += d.len;
                        continue;
                }
                bool eof = f.type == ABP_EOF;
                bool sig = f.type == ABP_TERM_SIGNAL && abp_dec_term_req(&f, &q) == 0;
                bool resize = !sig && f.type == ABP_TERM_RESIZE && abp_dec_term_req(&f, &q) == 0;
                if (!eof && !sig && !resize)
                        return send_error(s, "invalid_argument",
                                          "unexpected frame on a terminal stream");
                pthread_mutex_lock(&s->m->mu);
                x = mock_box_get(s->m, s->box);
                p = x ? proc_find(x, id) : NULL;
                if (p && eof)
                        p->stdin_closed = true;
                if (p && sig)
                        proc_signal(p, (int)q.signal, wall_ms());
                pthread_mutex_unlock(&s->m->mu);
                if (sig)
                        mock_log_call(s->m, s->box, "process_signal",
                                      json_pack("{s:s,s:i}", "id", id, "signal", (int)q.signal));
                if (sig || resize)
                        abp_term_req_clear(&q);
        }
}

static void proc_attach(sess *s, const char *id, bool snapshot)
{
        pthread_mutex_lock(&s->m->mu);
        mbox *x = live_box(s);
        if (!x)
                return;
        mproc *p = proc_find(x, id);
        if (!p) {
                pthread_mutex_unlock(&s->m->mu);
                return send_error(s, "not_found", "no such terminal");
        }
        proc_tick(p, wall_ms());
        uint64_t sent[2] = {0, 0};
        if (queue_proc_info(&s->out, p) < 0)
                abort();
        queue_ring(&s->out, 1, &p->ring[0], &sent[0]);
        queue_ring(&s->out, 2, &p->ring[1], &sent[1]);
        bool follow = !snapshot && !p->ended;
        if (snapshot) {
                if (abp_enc_empty(&s->out, ABP_EOF) < 0)
                        abort();
        } else if (p->ended) {
                abp_exit ex = {.exit_code = p->exit_code, .timed_out = p->timed_out};
                if (abp_enc_exit(&s->out, &ex) < 0)
                        abort();
        }
        p->clients += follow;
        pthread_mutex_unlock(&s->m->mu);
        mock_log_call(s->m, s->box, snapshot ? "process_snapshot" : "process_attach",
                      json_pack("{s:s}", "id", id));
        if (flush(s) < 0 || !follow)
                goto out;
        proc_follow(s, id, sent);
out:
        if (!follow)
                return;
        pthread_mutex_lock(&s->m->mu);
        x = mock_box_get(s->m, s->box);
        p = x ? proc_find(x, id) : NULL;
        if (p)
                p->clients--;
        pthread_mutex_unlock(&s->m->mu);
}

/* CLOSE, RESIZE (no pty: nothing to resize, OK as init's), SIGNAL, INPUT. */
static void proc_simple(sess *s, uint32_t type, const abp_term_req *q)
{
        static const char *const ops[] = {[ABP_TERM_CLOSE] = "process_close",
                                          [ABP_TERM_RESIZE] = "process_resize",
                                          [ABP_TERM_SIGNAL] = "process_signal",
                                          [ABP_TERM_INPUT] = "process_input"};
        pthread_mutex_lock(&s->m->mu);
        mbox *x = live_box(s);
        if (!x)
                return;
        size_t i = 0;
        while (i < x->n_procs && (!q->id || strcmp(x->procs[i]->id, q->id)))
                i++;
        mproc *p = i < x->n_procs ? x->procs[i] : NULL;
        const char *code = NULL, *why = NULL;
        uint64_t now = wall_ms();
        if (!p) {
                code = "not_found", why = "no such terminal";
        } else if (type == ABP_TERM_CLOSE) { /* killed and forgotten */
                proc_drop(x, i);
        } else if (type == ABP_TERM_SIGNAL) {
                proc_signal(p, (int)q->signal, now);
        } else if (type == ABP_TERM_INPUT) {
                proc_tick(p, now);
                if (p->ended)
                        code = "conflict", why = "the terminal's program has exited";
                else if (p->stdin_closed)
                        code = "conflict", why = "the process's stdin is closed";
                else {
                        p->stdin_bytes += q->data_len;
                        p->stdin_closed = q->close_stdin;
                }
        }
        pthread_mutex_unlock(&s->m->mu);
        json_t *lj = json_pack("{s:s?}", "id", q->id);
        if (type == ABP_TERM_SIGNAL)
                json_object_set_new(lj, "signal", json_integer(q->signal));
        if (type == ABP_TERM_INPUT) {
                json_object_set_new(lj, "bytes", json_integer((json_int_t)q->data_len));
                json_object_set_new(lj, "close_stdin", json_boolean(q->close_stdin));
        }
        if (why)
                json_object_set_new(lj, "error", json_string(why));
        mock_log_call(s->m, s->box, ops[type], lj);
        if (why)
                return send_error(s, code, "%s", why);
        send_ok(s);
}

static void do_term(sess *s, const abp_frame *f)
{
        abp_term_req q;
        if (abp_dec_term_req(f, &q) < 0) {
                abp_term_req_clear(&q);
                return send_error(s, "invalid_argument", "malformed terminal request");
        }
        if (f->type == ABP_TERM_OPEN)
                proc_open(s, &q);
        else if (f->type == ABP_TERM_LIST)
                proc_list(s, q.pipes);
        else if (f->type == ABP_TERM_ATTACH)
                proc_attach(s, q.id, q.snapshot);
        else
                proc_simple(s, f->type, &q);
        abp_term_req_clear(&q);
}

/* ---- kept across a clean restart (mock.c's state file) ---- */

static json_t *b64_json(const char *p, size_t n)
{
        char *b = xmalloc(xadd(xmul(n / 3 + 1, 4), 1));
        EVP_EncodeBlock((unsigned char *)b, (const unsigned char *)(p ? p : ""), (int)n);
        json_t *j = json_string(b);
        free(b);
        return j;
}

/* Decodes base64 of at most max bytes into *out (*n). 0 or -1. */
static int b64_take(const json_t *j, size_t max, char **out, size_t *n)
{
        const char *s = json_string_value(j);
        size_t bl = s ? strlen(s) : 0;
        if (!s || bl % 4 || bl > (max / 3 + 1) * 4)
                return -1;
        char *d = xmalloc(bl / 4 * 3 + 1);
        int len = EVP_DecodeBlock((unsigned char *)d, (const unsigned char *)s, (int)bl);
        for (size_t i = bl; len > 0 && i > 0 && s[i - 1] == '='; i--)
                len--; /* EVP_DecodeBlock counts the padding as data */
        if (len < 0 || (size_t)len > max) {
                free(d);
                return -1;
        }
        *out = d;
        *n = (size_t)len;
        return 0;
}

json_t *mock_procs_save(const mbox *x)
{
        json_t *a = json_array();
        for (size_t i = 0; i < x->n_procs; i++) {
                const mproc *p = x->procs[i];
                json_t *argv = json_array();
                for (char **v = p->argv; *v; v++)
                        json_array_append_new(argv, json_string(*v));
                json_t *o = json_pack(
                    "{s:s,s:o,s:I,s:I,s:I,s:I,s:b,s:b,s:b,s:b,s:b,s:i,s:i,s:I,s:I,s:I,s:I,s:I}",
                    "id", p->id, "argv", argv, "pid", (json_int_t)p->pid, "created_ms",
                    (json_int_t)p->created_ms, "end_ms", (json_int_t)p->end_ms, "ended_ms",
                    (json_int_t)p->ended_ms, "ended", p->ended, "timed_out", p->timed_out,
                    "will_time_out", p->will_time_out, "stdin_closed", p->stdin_closed, "merge",
                    p->merge, "code", p->code, "exit_code", p->exit_code, "out_lines",
                    (json_int_t)p->out_lines, "lines", (json_int_t)p->lines, "stdin_bytes",
                    (json_int_t)p->stdin_bytes, "total0", (json_int_t)p->ring[0].total, "total1",
                    (json_int_t)p->ring[1].total);
                if (p->tag)
                        json_object_set_new(o, "tag", json_string(p->tag));
                json_object_set_new(o, "out", b64_json(p->out, p->out_len));
                json_object_set_new(o, "err", b64_json(p->err, p->err_len));
                json_object_set_new(o, "ring0", b64_json(p->ring[0].p, p->ring[0].len));
                json_object_set_new(o, "ring1", b64_json(p->ring[1].p, p->ring[1].len));
                json_array_append_new(a, o);
        }
        return json_pack("{s:I,s:o}", "next_pid", (json_int_t)x->next_pid, "list", a);
}

static uint64_t ju(const json_t *o, const char *k)
{
        json_int_t v = json_integer_value(json_object_get(o, k));
        return v < 0 ? 0 : (uint64_t)v;
}

static int proc_load(mbox *x, const json_t *o)
{
        const char *id = json_string_value(json_object_get(o, "id"));
        const json_t *argv = json_object_get(o, "argv"), *tag = json_object_get(o, "tag");
        size_t na = json_array_size(argv);
        if (!id || strncmp(id, "t_", 2) || strlen(id) > ABP_TERM_ID_MAX || proc_find(x, id) ||
            !na || na > 4096 ||
            (tag && (!json_is_string(tag) || json_string_length(tag) > ABP_TERM_TAG_MAX)))
                return -1;
        mproc *p = xzalloc(sizeof(*p));
        snprintf(p->id, sizeof(p->id), "%s", id);
        p->argv = xcalloc(na + 1, sizeof(*p->argv));
        int bad = 0;
        for (size_t i = 0; i < na; i++) {
                const char *a = json_string_value(json_array_get(argv, i));
                p->argv[i] = xstrdup(a ? a : "");
                bad |= !a;
        }
        p->tag = tag ? xstrdup(json_string_value(tag)) : NULL;
        p->pid = (uint32_t)ju(o, "pid");
        p->created_ms = ju(o, "created_ms");
        p->end_ms = ju(o, "end_ms");
        p->ended_ms = ju(o, "ended_ms");
        p->ended = json_is_true(json_object_get(o, "ended"));
        p->timed_out = json_is_true(json_object_get(o, "timed_out"));
        p->will_time_out = json_is_true(json_object_get(o, "will_time_out"));
        p->stdin_closed = json_is_true(json_object_get(o, "stdin_closed"));
        p->merge = json_is_true(json_object_get(o, "merge"));
        p->code = (int)ju(o, "code");
        p->exit_code = (int)ju(o, "exit_code");
        p->out_lines = ju(o, "out_lines");
        p->lines = ju(o, "lines");
        p->stdin_bytes = ju(o, "stdin_bytes");
        char *r0 = NULL, *r1 = NULL;
        size_t n0 = 0, n1 = 0;
        bad |= b64_take(json_object_get(o, "out"), MOCK_PROC_RING, &p->out, &p->out_len);
        bad |= b64_take(json_object_get(o, "err"), MOCK_PROC_RING, &p->err, &p->err_len);
        bad |= b64_take(json_object_get(o, "ring0"), MOCK_PROC_RING, &r0, &n0);
        bad |= b64_take(json_object_get(o, "ring1"), MOCK_PROC_RING, &r1, &n1);
        if (!bad) {
                ring_add(&p->ring[0], r0, n0);
                ring_add(&p->ring[1], r1, n1);
                p->ring[0].total = ju(o, "total0") < n0 ? n0 : ju(o, "total0");
                p->ring[1].total = ju(o, "total1") < n1 ? n1 : ju(o, "total1");
        }
        free(r0);
        free(r1);
        if (bad) {
                proc_free(p);
                return -1;
        }
        x->procs = xrealloc(x->procs, (x->n_procs + 1) * sizeof(*x->procs));
        x->procs[x->n_procs++] = p;
        return 0;
}

int mock_procs_load(mbox *x, const json_t *j)
{
        if (!j)
                return 0; /* a state file from before processes were kept */
        const json_t *list = json_object_get(j, "list");
        if (!json_is_array(list) || json_array_size(list) > MOCK_PROCS_KEPT)
                return -1;
        x->next_pid = (uint32_t)ju(j, "next_pid");
        for (size_t i = 0; i < json_array_size(list); i++)
                if (proc_load(x, json_array_get(list, i)) < 0)
                        return -1;
        return 0;
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
        if (f.type == ABP_PORT)
                return send_error(s, "unsupported", "no ports on the mock backend");
        if (abp_is_term_request(f.type))
                return do_term(s, &f);
        abp_file_req q;
        if (f.type < ABP_READ || f.type > ABP_RENAME || abp_dec_file(&f, &q) < 0)
                return send_error(s, "invalid_argument", "unknown or malformed request");
        char path[MOCK_PATH_MAX];
        int r = mock_path_norm(q.path, path);
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

void *mock_serve_main(void *arg)
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
