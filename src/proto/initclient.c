/* initclient.c - the host side of the agentbox-init protocol (src/init/proto.h).
 *
 * init is treated as untrusted: every frame is decoded with bounds checks,
 * every allocation is bounded by the protocol maximums, and anything that is
 * not the expected answer makes the call fail with AB_E_UNAVAILABLE. */
#include "proto/initclient.h"
#include "proto/handshake.h"
#include "proto/proto.h"

#include <endian.h>
#include <ctype.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#define IO_TIMEOUT_MS    (120 * 1000) /* silence from init that ends a file request */
#define EXEC_GRACE_MS    (30 * 1000)  /* how long after its timeout an exec may stay silent */
#define INLINE_STDIN_MAX (256 * 1024) /* larger stdin is streamed in DATA frames */
#define QUEUE_MAX        (256 * 1024) /* bytes queued for init before we stop producing */

static int unavailable(ab_err **err)
{
        return ab_err_set(err, AB_E_UNAVAILABLE, 0, "box init is not responding");
}

int abc_connect(int dirfd, const char *name, ab_err **err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        _cleanup_close_ int dfd = -1;

        if (!name || !name[0])
                return ab_err_set(err, AB_E_INVALID, 0, "no socket name");
        if (name[0] == '/' || dirfd == AT_FDCWD) {
                if (strlen(name) < sizeof(sa.sun_path))
                        strcpy(sa.sun_path, name);
        }
        if (!sa.sun_path[0]) {
                /* Too long for sun_path, or relative to dirfd: go through
                 * /proc/self/fd/N/, where N is the directory holding the socket. */
                const char *slash = strrchr(name, '/');
                const char *base = slash ? slash + 1 : name;
                if (slash) {
                        _cleanup_free_ char *dir = xstrndup(name, (size_t)(slash - name));
                        dfd = openat(dirfd, dir[0] ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
                } else {
                        dfd = openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
                }
                if (dfd < 0)
                        return ab_err_set(err, AB_E_UNAVAILABLE, errno,
                                          "box init is not responding (socket %s)", name);
                int n =
                    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd, base);
                if (n < 0 || (size_t)n >= sizeof(sa.sun_path))
                        return ab_err_set(err, AB_E_INVALID, 0, "socket name too long: %s", name);
        }
        _cleanup_close_ int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "socket");
        while (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                if (errno == EINTR)
                        continue;
                if (errno == EISCONN)
                        break;
                return ab_err_set(err, AB_E_UNAVAILABLE, errno, "box init is not responding");
        }
        return steal_fd(&s);
}

int abc_connect_tcp(const char *addr, const uint8_t secret[32], int timeout_ms, ab_err **err)
{
        struct sockaddr_storage ss;
        unsigned len;
        if (!addr || abh_parse_addr(addr, &ss, &len) < 0)
                return ab_err_set(err, AB_E_INVALID, 0, "bad init address %s (want IP:PORT)",
                                  addr ? addr : "(none)");
        if (timeout_ms <= 0)
                timeout_ms = ABH_DEADLINE_MS;
        uint64_t deadline = ab_now_ms() + (uint64_t)timeout_ms;
        _cleanup_close_ int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (s < 0)
                return ab_err_set(err, AB_E_INTERNAL, errno, "socket");
        if (connect(s, (struct sockaddr *)&ss, len) < 0) {
                if (errno != EINPROGRESS && errno != EINTR)
                        return ab_err_set(err, AB_E_UNAVAILABLE, errno,
                                          "box init at %s is not responding", addr);
                struct pollfd p = {.fd = s, .events = POLLOUT};
                int n;
                do {
                        uint64_t now = ab_now_ms();
                        n = now >= deadline ? 0 : poll(&p, 1, (int)(deadline - now));
                } while (n < 0 && errno == EINTR);
                if (n == 0)
                        return ab_err_set(err, AB_E_UNAVAILABLE, ETIMEDOUT,
                                          "box init at %s is not responding", addr);
                int soerr = 0;
                socklen_t sl = sizeof(soerr);
                if (n < 0 || getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr)
                        return ab_err_set(err, AB_E_UNAVAILABLE, n < 0 ? errno : soerr,
                                          "box init at %s is not responding", addr);
        }
        uint64_t now = ab_now_ms();
        int left = now >= deadline ? 1 : (int)(deadline - now);
        if (abh_client(s, secret, left, err) < 0)
                return ab_err_wrap(err, "init at %s", addr);
        /* the callers expect a blocking socket, as abc_connect's */
        int fl = fcntl(s, F_GETFL);
        if (fl >= 0)
                fcntl(s, F_SETFL, fl & ~O_NONBLOCK);
        int one = 1;
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return steal_fd(&s);
}

/* ---- one-request helpers ---- */

/* Turns an ERROR frame into *err. */
static int from_error(const abp_frame *f, ab_err **err)
{
        abp_error e;
        if (abp_dec_error(f, &e) < 0)
                return unavailable(err);
        return ab_err_set(err, ab_code_from_name(e.code), 0, "%s", e.message);
}

/* Sends the frames in b. A failed send is not reported here: init may have
 * answered (ERROR) and hung up, so the caller reads the answer next. */
static void send_req(int fd, abp_buf *b)
{
        (void)!abp_send(fd, b, IO_TIMEOUT_MS);
}

/* The next frame that is not ERROR; an ERROR or a broken connection sets *err. */
static int next_frame(int fd, abp_reader *rd, abp_frame *f, ab_err **err)
{
        if (abp_recv(fd, rd, f, IO_TIMEOUT_MS) < 0)
                return unavailable(err);
        if (f->type == ABP_ERROR)
                return from_error(f, err);
        return 0;
}

/* Sends b and expects a bare OK. */
static int simple(int fd, abp_buf *b, ab_err **err)
{
        abp_reader rd = {0};
        abp_frame f;
        send_req(fd, b);
        abp_buf_free(b);
        int r = next_frame(fd, &rd, &f, err);
        if (r == 0 && f.type != ABP_OK)
                r = unavailable(err);
        abp_reader_free(&rd);
        return r;
}

static int enc_file(abp_buf *b, uint32_t type, const abp_file_req *m, ab_err **err)
{
        if (!m->path || !m->path[0])
                return ab_err_set(err, AB_E_INVALID, 0, "empty path");
        if (abp_enc_file(b, type, m) < 0)
                return ab_err_set(err, AB_E_INVALID, 0, "path too long");
        return 0;
}

/* Sends a file request of this type and expects a bare OK. */
static int file_simple(int fd, uint32_t type, const abp_file_req *m, ab_err **err)
{
        abp_buf b = {0};
        if (enc_file(&b, type, m, err) < 0)
                return -1;
        return simple(fd, &b, err);
}

/* ---- exec ---- */

typedef struct xclient {
        int fd;
        abp_reader rd;
        abp_buf q;           /* frames not yet sent */
        bool stream;         /* stdin goes in DATA frames */
        const uint8_t *data; /* stdin_data not yet queued */
        size_t left;
        int in_fd;
        uint8_t *buf;   /* for reads from in_fd */
        bool in_done;   /* EOF queued */
        bool send_dead; /* init stopped reading (it answers or died) */
} xclient;

/* Queues stdin frames from stdin_data, or EOF when only stdin_fd could add more
 * and it is absent. */
static void produce(xclient *x)
{
        while (x->stream && !x->in_done && !x->send_dead && x->q.len < QUEUE_MAX) {
                if (x->left > 0) {
                        size_t n = x->left < ABP_CHUNK ? x->left : ABP_CHUNK;
                        if (abp_enc_data(&x->q, 0, x->data, n) < 0)
                                abort();
                        x->data += n;
                        x->left -= n;
                } else if (x->in_fd >= 0) {
                        return; /* read when poll says so */
                } else {
                        if (abp_enc_empty(&x->q, ABP_EOF) < 0)
                                abort();
                        x->in_done = true;
                }
        }
}

/* One read from stdin_fd into a DATA (or EOF) frame. 0 or -errno. */
static int read_stdin(xclient *x)
{
        if (!x->buf)
                x->buf = xmalloc(ABP_CHUNK);
        ssize_t n = read(x->in_fd, x->buf, ABP_CHUNK);
        if (n < 0)
                return errno == EINTR || errno == EAGAIN ? 0 : -errno;
        if (n == 0) {
                x->in_fd = -1;
                produce(x);
                return 0;
        }
        if (abp_enc_data(&x->q, 0, x->buf, (size_t)n) < 0)
                abort();
        return 0;
}

static void send_some(xclient *x)
{
        while (x->q.len > 0) {
                ssize_t n = send(x->fd, x->q.p, x->q.len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        x->send_dead = true;
                        x->q.len = 0;
                        return;
                }
                abp_buf_consume(&x->q, (size_t)n);
        }
}

/* Handles the frames buffered from init: 1 = EXIT received, 0 = go on, <0 = failed. */
static int exec_frames(xclient *x, abc_output_fn out, void *ud, abc_exec_res *res, ab_err **err)
{
        abp_frame f;
        int k;
        while ((k = abp_reader_next(&x->rd, &f)) > 0) {
                if (f.type == ABP_DATA) {
                        abp_data d;
                        if (abp_dec_data(&f, &d) < 0 || (d.stream != 1 && d.stream != 2))
                                return unavailable(err);
                        if (out && d.len > 0 && out(ud, (int)d.stream, d.data, d.len) < 0) {
                                /* init sees the hang-up and kills the exec's process tree. */
                                shutdown(x->fd, SHUT_RDWR);
                                ab_err_set(err, AB_E_INTERNAL, 0,
                                           "exec aborted by its output consumer");
                                return -ECANCELED;
                        }
                } else if (f.type == ABP_EXIT) {
                        abp_exit e;
                        if (abp_dec_exit(&f, &e) < 0)
                                return unavailable(err);
                        *res = (abc_exec_res){
                            .exit_code = e.exit_code,
                            .timed_out = e.timed_out,
                            .truncated = e.truncated,
                            .duration_ms = e.duration_ms,
                            .stdout_bytes = e.stdout_bytes,
                            .stderr_bytes = e.stderr_bytes,
                            /* nothing may follow EXIT on a connection kept */
                            .again = e.again && !x->stream && x->rd.start == x->rd.end,
                        };
                        return 1;
                } else if (f.type == ABP_ERROR) {
                        return from_error(&f, err);
                } else {
                        return unavailable(err);
                }
        }
        return k < 0 ? unavailable(err) : 0;
}

int abc_exec_req_check(const abc_exec_req *req, ab_err **err)
{
        if (req->command && req->argv)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "give either a command or an argv, not both");
        if (req->argv && !req->argv[0])
                return ab_err_set(err, AB_E_INVALID, 0, "argv: must not be empty");
        if (req->argv && !req->argv[0][0])
                return ab_err_set(err, AB_E_INVALID, 0, "argv[0]: must not be empty");
        if (!req->command && !req->argv)
                return ab_err_set(err, AB_E_INVALID, 0, "no command");
        return 0;
}

/* A word a POSIX shell reads back as itself, unquoted. */
static bool plain_word(const char *w)
{
        if (!*w)
                return false;
        for (; *w; w++)
                if (!isalnum((unsigned char)*w) && !strchr("_./:=+,@%-", *w))
                        return false;
        return true;
}

char *abc_exec_req_text(const abc_exec_req *req)
{
        if (!req->argv)
                return xstrdup(req->command ? req->command : "");
        size_t len = 1;
        for (const char *const *a = req->argv; *a; a++)
                len = xadd(len, xadd(xmul(strlen(*a), 4), 3)); /* ' -> '\'' */
        char *s = xmalloc(len), *p = s;
        for (const char *const *a = req->argv; *a; a++) {
                if (a != req->argv)
                        *p++ = ' ';
                if (plain_word(*a) && !(a == req->argv && strchr(*a, '='))) {
                        p = stpcpy(p, *a);
                        continue;
                }
                *p++ = '\'';
                for (const char *c = *a; *c; c++) {
                        if (*c == '\'')
                                p = stpcpy(p, "'\\''"); /* end quote, \', quote again */
                        else
                                *p++ = *c;
                }
                *p++ = '\'';
        }
        *p = 0;
        return s;
}

int abc_exec(int fd, const abc_exec_req *req, abc_output_fn out, void *ud, abc_exec_res *res,
             ab_err **err)
{
        abc_exec_res dummy;
        if (!res)
                res = &dummy;
        *res = (abc_exec_res){0};
        if (abc_exec_req_check(req, err) < 0)
                return -1;
        if (req->stdin_len > 0 && !req->stdin_data)
                return ab_err_set(err, AB_E_INVALID, 0, "stdin_len without stdin_data");

        size_t n_env = 0, n_argv = 0;
        while (req->env && req->env[n_env])
                n_env++;
        while (req->argv && req->argv[n_argv])
                n_argv++;
        xclient x = {
            .fd = fd,
            .stream = req->stdin_fd >= 0 || req->stdin_len > INLINE_STDIN_MAX,
            .in_fd = req->stdin_fd,
        };
        abp_exec_req m = {
            .command = req->command,
            .argv = (const char **)req->argv,
            .n_argv = n_argv,
            .env = (const char **)req->env,
            .n_env = n_env,
            .cwd = req->cwd,
            .user = req->user,
            .stdin_stream = x.stream,
            .timeout_ms = req->timeout_ms,
            .output_cap = req->output_cap,
        };
        if (x.stream) {
                x.data = req->stdin_data;
                x.left = req->stdin_len;
        } else if (req->stdin_len > 0) {
                m.stdin_data = req->stdin_data;
                m.stdin_len = req->stdin_len;
        }
        if (abp_enc_exec(&x.q, &m) < 0) {
                abp_buf_free(&x.q);
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "exec request too large: command (or argv), environment and "
                                  "cwd must fit in %u bytes",
                                  ABP_MAX_PAYLOAD);
        }

        uint64_t deadline = req->timeout_ms ? ab_now_ms() + req->timeout_ms : 0;
        int r = 0;
        while (r == 0) {
                /* Until the socket is full or stdin has nothing ready in memory. */
                do {
                        produce(&x);
                        send_some(&x);
                } while (x.q.len == 0 && x.stream && !x.in_done && !x.send_dead &&
                         (x.left > 0 || x.in_fd < 0));
                struct pollfd p[3] = {
                    {.fd = fd, .events = POLLIN},
                    {.fd = -1},
                    {.fd = req->has_cancel ? req->cancel_fd : -1, .events = POLLRDHUP}};
                if (x.q.len > 0)
                        p[0].events |= POLLOUT;
                if (x.stream && !x.in_done && !x.send_dead && x.left == 0 && x.in_fd >= 0 &&
                    x.q.len < QUEUE_MAX)
                        p[1] = (struct pollfd){.fd = x.in_fd, .events = POLLIN};
                int wait = -1;
                if (deadline) {
                        uint64_t now = ab_now_ms();
                        wait = (int)((deadline > now ? deadline - now : 0) + EXEC_GRACE_MS);
                }
                int n = poll(p, 3, wait);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        r = unavailable(err);
                        break;
                }
                if (p[2].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
                        /* init sees the connection end and kills the exec's tree */
                        shutdown(fd, SHUT_RDWR);
                        r = ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                       "exec cancelled: its client went away");
                        break;
                }
                if (p[1].revents) {
                        int k = read_stdin(&x);
                        if (k < 0) {
                                shutdown(fd, SHUT_RDWR);
                                r = ab_err_set(err, AB_E_INTERNAL, -k, "reading the exec's stdin");
                                break;
                        }
                }
                if (p[0].revents & POLLOUT)
                        send_some(&x);
                if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
                        ssize_t got = abp_reader_fill(&x.rd, fd);
                        r = exec_frames(&x, out, ud, res, err);
                        if (r == 0 && got <= 0 && got != -EAGAIN)
                                r = unavailable(err); /* EOF or error before EXIT */
                }
        }
        abp_buf_free(&x.q);
        abp_reader_free(&x.rd);
        free(x.buf);
        return r > 0 ? 0 : r;
}

/* ---- files ---- */

static int read_req(int fd, const abp_file_req *m, abc_output_fn out, void *ud, ab_err **err)
{
        abp_buf b = {0};
        if (enc_file(&b, ABP_READ, m, err) < 0)
                return -1;
        send_req(fd, &b);
        abp_buf_free(&b);

        abp_reader rd = {0};
        int r;
        for (;;) {
                abp_frame f;
                abp_data d;
                r = next_frame(fd, &rd, &f, err);
                if (r < 0)
                        break;
                if (f.type == ABP_OK)
                        break;
                if (f.type != ABP_DATA || abp_dec_data(&f, &d) < 0 || d.stream != 1) {
                        r = unavailable(err);
                        break;
                }
                if (out && d.len > 0 && out(ud, 1, d.data, d.len) < 0) {
                        shutdown(fd, SHUT_RDWR);
                        r = ab_err_set(err, AB_E_INTERNAL, 0, "read aborted by its consumer");
                        break;
                }
        }
        abp_reader_free(&rd);
        return r;
}

size_t abc_grep_path_cost(const char *path)
{
        return 8 + strlen(path) + 1; /* a field's header, the string, its NUL */
}

static bool dec_flag(const abp_frame *f, uint32_t tag)
{
        size_t off = 0;
        abp_field fl;
        uint32_t v = 0;
        while (abp_field_next(f, &off, &fl) == 1)
                if (fl.tag == tag && fl.len == 4)
                        memcpy(&v, fl.val, 4);
        return le32toh(v) != 0;
}

int abc_grep(int fd, const abc_grep_req *req, abc_match_fn match, void *ud, abc_grep_res *res,
             ab_err **err)
{
        *res = (abc_grep_res){0};
        abp_buf b = {0};
        abp_grep_req m = {
            .pattern = req->pattern,
            .pattern_len = req->pattern_len,
            .flags = (req->literal ? ABP_G_LITERAL : 0) |
                     (req->case_sensitive ? ABP_G_CASE_SENSITIVE : 0),
            .count = req->count,
            .timeout_ms = req->timeout_ms,
            .size_max = req->size_max,
            .paths = (const char **)req->paths,
            .n_paths = req->n_paths,
        };
        if (abp_enc_grep(&b, &m) < 0) {
                abp_buf_free(&b);
                return ab_err_set(err, AB_E_LIMIT, 0, "grep request too large");
        }
        send_req(fd, &b);
        abp_buf_free(&b);

        /* The search's own deadline plus a margin: init answers by then. */
        uint64_t ms = req->timeout_ms ? req->timeout_ms : 30000;
        uint64_t until = ab_now_ms() + ms + IO_TIMEOUT_MS;
        abp_reader rd = {0};
        int r;
        for (;;) {
                abp_frame f;
                r = abp_recv(fd, &rd, &f, req->gone ? 100 : IO_TIMEOUT_MS);
                if (r == -ETIMEDOUT && req->gone && ab_now_ms() < until) {
                        if (!req->gone(req->gone_ud))
                                continue;
                        shutdown(fd, SHUT_RDWR); /* init sees the hang-up and stops */
                        r = ab_err_set(err, AB_E_TIMEOUT, 0, "cancelled: the caller went away");
                        break;
                }
                if (r < 0) {
                        r = unavailable(err);
                        break;
                }
                if (f.type == ABP_ERROR) {
                        r = from_error(&f, err);
                        break;
                }
                if (f.type == ABP_OK) {
                        res->truncated = dec_flag(&f, ABP_F_TRUNCATED);
                        res->timed_out = dec_flag(&f, ABP_F_TIMED_OUT);
                        break;
                }
                abp_match hit;
                if (abp_dec_match(&f, &hit) < 0 || hit.index >= req->n_paths) {
                        r = unavailable(err);
                        break;
                }
                if (match && match(ud, hit.index, hit.line, hit.text, hit.len) < 0) {
                        shutdown(fd, SHUT_RDWR);
                        r = ab_err_set(err, AB_E_INTERNAL, 0, "grep aborted by its consumer");
                        break;
                }
        }
        abp_reader_free(&rd);
        return r;
}

int abc_read(int fd, const char *path, uint64_t offset, uint64_t length, abc_output_fn out,
             void *ud, ab_err **err)
{
        abp_file_req m = {.path = path, .offset = offset, .length = length};
        return read_req(fd, &m, out, ud, err);
}

int abc_read_beneath(int fd, const char *dir, const char *rel, uint64_t length, abc_output_fn out,
                     void *ud, ab_err **err)
{
        if (!abc_path_is_safe(rel))
                return ab_err_set(err, AB_E_INVALID, 0, "not a relative path beneath %s", dir);
        uint32_t comps = 1;
        for (const char *c = rel; *c; c++)
                comps += *c == '/';
        size_t dl = strlen(dir);
        while (dl > 1 && dir[dl - 1] == '/')
                dl--;
        _cleanup_free_ char *path = xasprintf("%.*s/%s", (int)dl, dir, rel);
        abp_file_req m = {.path = path, .length = length, .flags = ABP_R_NOFOLLOW, .depth = comps};
        return read_req(fd, &m, out, ud, err);
}

/* True when init has something to say (an early ERROR) before the upload is done. */
static bool answered(int fd)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        return poll(&p, 1, 0) > 0;
}

int abc_write(int fd, const char *path, const void *data, size_t len, int src_fd, uint32_t flags,
              uint32_t mode, ab_err **err)
{
        abp_buf b = {0};
        abp_file_req m = {.path = path, .flags = flags, .mode = mode};
        if (len > 0 && !data)
                return ab_err_set(err, AB_E_INVALID, 0, "no data");
        if (enc_file(&b, ABP_WRITE, &m, err) < 0)
                return -1;

        const uint8_t *p = data;
        _cleanup_free_ uint8_t *buf = src_fd >= 0 ? xmalloc(ABP_CHUNK) : NULL;
        bool dead = false;
        while (!dead && !answered(fd)) {
                if (len > 0) {
                        size_t n = len < ABP_CHUNK ? len : ABP_CHUNK;
                        if (abp_enc_data(&b, 0, p, n) < 0)
                                abort();
                        p += n;
                        len -= n;
                } else if (src_fd >= 0) {
                        ssize_t n = read(src_fd, buf, ABP_CHUNK);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0) {
                                int e = errno;
                                /* init sees the hang-up and throws the partial file away. */
                                shutdown(fd, SHUT_RDWR);
                                abp_buf_free(&b);
                                return ab_err_set(err, AB_E_INTERNAL, e, "reading the source");
                        }
                        if (n == 0)
                                src_fd = -1;
                        else if (abp_enc_data(&b, 0, buf, (size_t)n) < 0)
                                abort();
                } else {
                        if (abp_enc_empty(&b, ABP_EOF) < 0)
                                abort();
                        dead = abp_send(fd, &b, IO_TIMEOUT_MS) < 0;
                        break;
                }
                if (b.len >= QUEUE_MAX)
                        dead = abp_send(fd, &b, IO_TIMEOUT_MS) < 0;
        }
        abp_buf_free(&b);

        abp_reader rd = {0};
        abp_frame f;
        int r = next_frame(fd, &rd, &f, err);
        if (r == 0 && f.type != ABP_OK)
                r = unavailable(err);
        abp_reader_free(&rd);
        return r;
}

static void dirent_clear(abc_dirent *d)
{
        free(d->path);
        abc_stat_clear(&d->st);
}

void abc_dirents_free(abc_dirent *d, size_t n)
{
        for (size_t i = 0; d && i < n; i++)
                dirent_clear(&d[i]);
        free(d);
}

static void to_stat(const abp_entry *e, abc_stat *st)
{
        *st = (abc_stat){
            .type = (abc_ftype)e->type,
            .size = e->size,
            .mode = e->mode & 07777,
            .mtime = e->mtime,
            .link = e->link ? xstrdup(e->link) : NULL,
            .has_ids = e->has_ids,
            .uid = e->uid,
            .gid = e->gid,
            .owner = e->owner ? xstrdup(e->owner) : NULL,
            .group = e->group ? xstrdup(e->group) : NULL,
        };
}

void abc_stat_clear(abc_stat *st)
{
        free(st->link);
        free(st->owner);
        free(st->group);
        *st = (abc_stat){0};
}

bool abc_path_is_safe(const char *p)
{
        if (!p || !*p || *p == '/')
                return false;
        for (const char *c = p;;) {
                const char *slash = strchr(c, '/');
                size_t len = slash ? (size_t)(slash - c) : strlen(c);
                if (len == 0 || (len == 1 && c[0] == '.') ||
                    (len == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                if (!slash)
                        return true;
                c = slash + 1;
        }
}

int abc_list(int fd, const char *path, int depth, abc_dirent **out, size_t *n, ab_err **err)
{
        abp_buf b = {0};
        abp_file_req m = {.path = path, .depth = depth > 0 ? (uint32_t)depth : 1};
        *out = NULL;
        *n = 0;
        if (enc_file(&b, ABP_LIST, &m, err) < 0)
                return -1;
        send_req(fd, &b);
        abp_buf_free(&b);

        abp_reader rd = {0};
        abc_dirent *v = NULL;
        size_t cnt = 0, cap = 0;
        int r;
        for (;;) {
                abp_frame f;
                abp_entry e;
                r = next_frame(fd, &rd, &f, err);
                if (r < 0 || f.type == ABP_OK)
                        break;
                if (f.type != ABP_ENTRY || abp_dec_entry(&f, &e) < 0 || cnt >= ABP_MAX_ENTRIES ||
                    !abc_path_is_safe(e.path)) {
                        r = unavailable(err);
                        break;
                }
                if (cnt == cap) {
                        cap = cap ? cap * 2 : 64;
                        v = xrealloc(v, xmul(cap, sizeof(*v)));
                }
                v[cnt].path = xstrdup(e.path);
                to_stat(&e, &v[cnt].st);
                cnt++;
        }
        abp_reader_free(&rd);
        if (r < 0) {
                abc_dirents_free(v, cnt);
                return r;
        }
        *out = v;
        *n = cnt;
        return 0;
}

static int stat_req(int fd, const char *path, uint32_t flags, abc_stat *st, ab_err **err)
{
        abp_buf b = {0};
        abp_file_req m = {.path = path, .flags = flags};
        *st = (abc_stat){0};
        if (enc_file(&b, ABP_STAT, &m, err) < 0)
                return -1;
        send_req(fd, &b);
        abp_buf_free(&b);

        abp_reader rd = {0};
        abp_frame f;
        abp_entry e;
        int r = next_frame(fd, &rd, &f, err);
        if (r == 0) {
                if (f.type == ABP_ENTRY && abp_dec_entry(&f, &e) == 0)
                        to_stat(&e, st);
                else
                        r = unavailable(err);
        }
        abp_reader_free(&rd);
        return r;
}

int abc_stat_path(int fd, const char *path, abc_stat *st, ab_err **err)
{
        return stat_req(fd, path, 0, st, err);
}

int abc_stat_names(int fd, const char *path, abc_stat *st, ab_err **err)
{
        return stat_req(fd, path, ABP_S_NAMES, st, err);
}

int abc_chmod(int fd, const char *path, uint32_t mode, ab_err **err)
{
        abp_file_req m = {.path = path, .mode = mode & 07777};
        return file_simple(fd, ABP_CHMOD, &m, err);
}

int abc_chown(int fd, const char *path, const char *owner, const char *group, ab_err **err)
{
        abp_file_req m = {.path = path, .owner = owner, .group = group};
        if (!owner && !group)
                return ab_err_set(err, AB_E_INVALID, 0, "chown: an owner or a group is needed");
        return file_simple(fd, ABP_CHOWN, &m, err);
}

int abc_symlink(int fd, const char *path, const char *target, ab_err **err)
{
        abp_file_req m = {.path = path, .to = target};
        if (!target || !target[0])
                return ab_err_set(err, AB_E_INVALID, 0, "empty symlink target");
        return file_simple(fd, ABP_SYMLINK, &m, err);
}

int abc_delete(int fd, const char *path, bool recursive, ab_err **err)
{
        abp_file_req m = {.path = path, .flags = recursive ? ABP_RECURSIVE : 0};
        return file_simple(fd, ABP_DELETE, &m, err);
}

int abc_mkdir(int fd, const char *path, bool parents, uint32_t mode, ab_err **err)
{
        abp_file_req m = {.path = path, .flags = parents ? ABP_PARENTS : 0, .mode = mode};
        return file_simple(fd, ABP_MKDIR, &m, err);
}

int abc_rename(int fd, const char *from, const char *to, ab_err **err)
{
        abp_file_req m = {.path = from, .to = to};
        if (!to || !to[0])
                return ab_err_set(err, AB_E_INVALID, 0, "empty target path");
        return file_simple(fd, ABP_RENAME, &m, err);
}

int abc_reserve(int fd, uint64_t want, abc_reserve_res *res, ab_err **err)
{
        abp_buf b = {0};
        *res = (abc_reserve_res){0};
        abp_frame_begin(&b, ABP_RESERVE);
        if (want != UINT64_MAX)
                abp_put_u64(&b, ABP_F_SIZE, want);
        if (abp_frame_end(&b) < 0)
                abort();
        send_req(fd, &b);
        abp_buf_free(&b);
        abp_reader rd = {0};
        abp_frame f;
        int r = next_frame(fd, &rd, &f, err);
        if (r == 0 && f.type != ABP_OK)
                r = unavailable(err);
        size_t off = 0;
        abp_field fl;
        int k;
        while (r == 0 && (k = abp_field_next(&f, &off, &fl)) != 0) {
                if (k < 0) {
                        r = unavailable(err);
                        break;
                }
                uint64_t v;
                if (fl.len != 8)
                        continue;
                memcpy(&v, fl.val, 8);
                v = le64toh(v);
                if (fl.tag == ABP_F_SIZE)
                        res->held = v;
                else if (fl.tag == ABP_F_FREE)
                        res->free = v;
        }
        abp_reader_free(&rd);
        return r;
}

int abc_stats(int fd, abp_stats *out, ab_err **err)
{
        abp_buf b = {0};
        *out = (abp_stats){0};
        if (abp_enc_empty(&b, ABP_STATS) < 0)
                abort();
        send_req(fd, &b);
        abp_buf_free(&b);
        abp_reader rd = {0};
        abp_frame f;
        int r = next_frame(fd, &rd, &f, err);
        if (r == 0 && abp_dec_stats(&f, out) < 0)
                r = unavailable(err);
        abp_reader_free(&rd);
        return r;
}

/* Reads exactly n bytes (no more: what follows is not ours). 0 or -errno. */
static int recv_exact(int fd, void *buf, size_t n, uint64_t deadline)
{
        uint8_t *p = buf;
        while (n > 0) {
                ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
                if (r > 0) {
                        p += r;
                        n -= (size_t)r;
                        continue;
                }
                if (r == 0)
                        return -ECONNRESET;
                if (errno != EAGAIN && errno != EINTR)
                        return -errno;
                uint64_t now = ab_now_ms();
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                if (now >= deadline || poll(&pf, 1, (int)(deadline - now)) == 0)
                        return -ETIMEDOUT;
        }
        return 0;
}

/* The next frame, read byte-exactly (at most 64 KiB of payload), into rd. */
static int recv_frame_exact(int fd, abp_reader *rd, abp_frame *f, uint64_t deadline)
{
        uint8_t hdr[ABP_HDR_SIZE];
        int r = recv_exact(fd, hdr, sizeof(hdr), deadline);
        if (r < 0)
                return r;
        uint32_t len;
        memcpy(&len, hdr + 4, 4);
        len = le32toh(len);
        if (len > 64 * 1024)
                return -EBADMSG;
        _cleanup_free_ uint8_t *pl = xmalloc(len ? len : 1);
        if ((r = recv_exact(fd, pl, len, deadline)) < 0)
                return r;
        if (abp_reader_feed(rd, hdr, sizeof(hdr)) < 0 || abp_reader_feed(rd, pl, len) < 0 ||
            abp_reader_next(rd, f) != 1)
                return -EBADMSG;
        return 0;
}

int abc_port(int fd, uint16_t port, int timeout_ms, ab_err **err)
{
        abp_buf b = {0};
        abp_frame_begin(&b, ABP_PORT);
        abp_put_u32(&b, ABP_F_PORT, port);
        abp_put_u32(&b, ABP_F_TIMEOUT_MS, timeout_ms > 0 ? (uint32_t)timeout_ms : 0);
        if (abp_frame_end(&b) < 0)
                abort();
        send_req(fd, &b);
        abp_buf_free(&b);
        /* init's own connect is bounded by timeout_ms: give its answer a moment more */
        uint64_t deadline = ab_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 10000) + 5000;
        abp_reader rd = {0};
        abp_frame f;
        int r = recv_frame_exact(fd, &rd, &f, deadline);
        if (r < 0) {
                abp_reader_free(&rd);
                return unavailable(err);
        }
        abp_error e = {0};
        if (f.type == ABP_OK) {
                r = 0;
        } else if (f.type != ABP_ERROR || abp_dec_error(&f, &e) < 0 || !e.message) {
                r = unavailable(err);
        } else if (!strcmp(e.code, "timeout")) {
                r = ab_err_set(err, AB_E_TIMEOUT, 0, "%s", e.message);
                if (err && *err)
                        (*err)->errnum = ETIMEDOUT;
        } else if (!strcmp(e.code, "unavailable")) {
                r = ab_err_set(err, AB_E_UNAVAILABLE, 0, "%s", e.message);
                if (err && *err && strstr(e.message, "nothing listens"))
                        (*err)->errnum = ECONNREFUSED;
        } else if (!strcmp(e.code, "invalid_argument") && strstr(e.message, "unknown request")) {
                r = ab_err_set(err, AB_E_UNSUPPORTED, 0,
                               "the box's agentbox-init is too old to relay ports (%s)", e.message);
        } else {
                r = from_error(&f, err);
        }
        abp_reader_free(&rd);
        return r;
}

int abc_ping(int fd, char **version, ab_err **err)
{
        abp_buf b = {0};
        if (version)
                *version = NULL;
        if (abp_enc_empty(&b, ABP_PING) < 0)
                abort();
        send_req(fd, &b);
        abp_buf_free(&b);

        abp_reader rd = {0};
        abp_frame f;
        abp_ok ok;
        int r = next_frame(fd, &rd, &f, err);
        if (r == 0) {
                if (f.type == ABP_OK && abp_dec_ok(&f, &ok) == 0) {
                        if (version)
                                *version = xstrdup(ok.version ? ok.version : "");
                } else {
                        r = unavailable(err);
                }
        }
        abp_reader_free(&rd);
        return r;
}

/* ---- terminals ---- */

_Static_assert(ABC_TERM_TAG_MAX == ABP_TERM_TAG_MAX, "one tag bound");

void abc_term_info_clear(abc_term_info *t)
{
        free(t->id);
        free(t->tag);
        ab_strvfreep(&t->argv);
        *t = (abc_term_info){0};
}

void abc_term_infos_free(abc_term_info *v, size_t n)
{
        for (size_t i = 0; i < n; i++)
                abc_term_info_clear(&v[i]);
        free(v);
}

static int to_term_info(const abp_frame *f, abc_term_info *out, ab_err **err)
{
        abp_term_info m;
        if (f->type != ABP_TERM || abp_dec_term(f, &m) < 0)
                return unavailable(err);
        *out = (abc_term_info){
            .id = xstrdup(m.id),
            .argv = xcalloc(m.n_argv + 1, sizeof(char *)),
            .cols = m.cols,
            .rows = m.rows,
            .created_ms = (int64_t)m.created_ms,
            .running = m.running,
            .exit_code = m.exit_code,
            .pid = m.pid,
            .pipes = m.pipes,
            .timed_out = m.timed_out,
            .ended_ms = (int64_t)m.ended_ms,
            .lines = m.lines,
            .tag = m.tag ? xstrdup(m.tag) : NULL,
        };
        for (size_t i = 0; i < m.n_argv; i++)
                out->argv[i] = xstrdup(m.argv[i]);
        abp_term_info_clear(&m);
        return 0;
}

static int term_send(int fd, uint32_t type, const abp_term_req *m, ab_err **err)
{
        abp_buf b = {0};
        if (abp_enc_term_req(&b, type, m) < 0 || b.len > ABP_HDR_SIZE + ABP_TERM_REQ_MAX) {
                abp_buf_free(&b);
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "terminal request too large: argv, environment and cwd must "
                                  "fit in %u bytes",
                                  ABP_TERM_REQ_MAX);
        }
        send_req(fd, &b);
        abp_buf_free(&b);
        return 0;
}

static size_t strv_len(const char *const *v)
{
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

int abc_term_open(int fd, const abc_term_req *req, abc_term_info *out, ab_err **err)
{
        *out = (abc_term_info){0};
        if (req->cols > ABP_TERM_DIM_MAX || req->rows > ABP_TERM_DIM_MAX)
                return ab_err_set(err, AB_E_INVALID, 0, "cols and rows must be 1..%d",
                                  ABP_TERM_DIM_MAX);
        if (req->argv && (!req->argv[0] || !req->argv[0][0]))
                return ab_err_set(err, AB_E_INVALID, 0, "argv: the program must not be empty");
        abp_term_req m = {
            .argv = (const char **)req->argv,
            .n_argv = strv_len(req->argv),
            .env = (const char **)req->env,
            .n_env = strv_len(req->env),
            .cwd = req->cwd,
            .user = req->user,
            .cols = req->cols,
            .rows = req->rows,
            .pipes = req->pipes,
            .close_stdin = req->pipes && req->close_stdin,
            .timeout_ms = req->pipes ? req->timeout_ms : 0,
            .command = req->pipes ? req->command : NULL,
            .merge = req->pipes && req->merge,
            .tag = req->tag,
        };
        if (req->tag && strlen(req->tag) > ABP_TERM_TAG_MAX)
                return ab_err_set(err, AB_E_INVALID, 0, "terminal tag: at most %u bytes",
                                  ABP_TERM_TAG_MAX);
        if (term_send(fd, ABP_TERM_OPEN, &m, err) < 0)
                return -1;
        abp_reader rd = {0};
        abp_frame f;
        int r = next_frame(fd, &rd, &f, err);
        if (r == 0)
                r = to_term_info(&f, out, err);
        abp_reader_free(&rd);
        return r;
}

int abc_term_list(int fd, abc_term_info **out, size_t *n, ab_err **err)
{
        return abc_term_list_kind(fd, false, out, n, err);
}

int abc_term_list_kind(int fd, bool pipes, abc_term_info **out, size_t *n, ab_err **err)
{
        abp_term_req m = {.pipes = pipes};
        *out = NULL;
        *n = 0;
        if (term_send(fd, ABP_TERM_LIST, &m, err) < 0)
                return -1;
        abp_reader rd = {0};
        abc_term_info *v = NULL;
        size_t cnt = 0;
        int r;
        for (;;) {
                abp_frame f;
                r = next_frame(fd, &rd, &f, err);
                if (r < 0 || f.type == ABP_OK)
                        break;
                if (cnt >= 1024) { /* far more than init keeps */
                        r = unavailable(err);
                        break;
                }
                v = xrealloc(v, xmul(cnt + 1, sizeof(*v)));
                r = to_term_info(&f, &v[cnt], err);
                if (r < 0)
                        break;
                cnt++;
        }
        abp_reader_free(&rd);
        if (r < 0) {
                abc_term_infos_free(v, cnt);
                return -1;
        }
        *out = v;
        *n = cnt;
        return 0;
}

static int term_simple(int fd, uint32_t type, const abp_term_req *m, ab_err **err)
{
        abp_buf b = {0};
        if (!m->id || strlen(m->id) > ABP_TERM_ID_MAX)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no such terminal");
        if (abp_enc_term_req(&b, type, m) < 0)
                abort(); /* a few small fields */
        return simple(fd, &b, err);
}

int abc_term_close(int fd, const char *tid, ab_err **err)
{
        abp_term_req m = {.id = tid};
        return term_simple(fd, ABP_TERM_CLOSE, &m, err);
}

int abc_term_resize(int fd, const char *tid, uint32_t cols, uint32_t rows, ab_err **err)
{
        if (!cols || !rows || cols > ABP_TERM_DIM_MAX || rows > ABP_TERM_DIM_MAX)
                return ab_err_set(err, AB_E_INVALID, 0, "cols and rows must be 1..%d",
                                  ABP_TERM_DIM_MAX);
        abp_term_req m = {.id = tid, .cols = cols, .rows = rows};
        return term_simple(fd, ABP_TERM_RESIZE, &m, err);
}

int abc_term_signal(int fd, const char *tid, int sig, ab_err **err)
{
        if (sig <= 0 || sig >= 65)
                return ab_err_set(err, AB_E_INVALID, 0, "bad signal %d", sig);
        abp_term_req m = {.id = tid, .signal = (uint32_t)sig};
        return term_simple(fd, ABP_TERM_SIGNAL, &m, err);
}

int abc_term_write(int fd, const char *tid, const void *data, size_t len, ab_err **err)
{
        if (len > ABP_TERM_REQ_MAX - 1024)
                return ab_err_set(err, AB_E_INVALID, 0, "terminal input: at most %u bytes a call",
                                  ABP_TERM_REQ_MAX - 1024);
        abp_term_req m = {.id = tid, .data = data ? data : "", .data_len = len};
        return term_simple(fd, ABP_TERM_INPUT, &m, err);
}

int abc_proc_write(int fd, const char *tid, const void *data, size_t len, bool close_stdin,
                   ab_err **err)
{
        if (len > ABP_TERM_REQ_MAX - 1024)
                return ab_err_set(err, AB_E_INVALID, 0, "process input: at most %u bytes a call",
                                  ABP_TERM_REQ_MAX - 1024);
        abp_term_req m = {
            .id = tid, .data = data ? data : "", .data_len = len, .close_stdin = close_stdin};
        return term_simple(fd, ABP_TERM_INPUT, &m, err);
}

struct abc_term_stream {
        int fd;
        abp_reader rd;
        bool ended;
};

static int attach(int fd, const char *tid, bool snapshot, abc_term_info *info,
                  abc_term_stream **out, ab_err **err)
{
        *info = (abc_term_info){0};
        *out = NULL;
        abp_term_req m = {.id = tid, .snapshot = snapshot};
        if (!tid || strlen(tid) > ABP_TERM_ID_MAX)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no such terminal");
        if (term_send(fd, ABP_TERM_ATTACH, &m, err) < 0)
                return -1;
        abc_term_stream *s = xzalloc(sizeof(*s));
        s->fd = fd;
        abp_frame f;
        if (next_frame(fd, &s->rd, &f, err) < 0 || to_term_info(&f, info, err) < 0) {
                abc_term_stream_free(s);
                return -1;
        }
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
                fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        *out = s;
        return 0;
}

int abc_term_attach(int fd, const char *tid, abc_term_info *info, abc_term_stream **out,
                    ab_err **err)
{
        return attach(fd, tid, false, info, out, err);
}

int abc_term_snapshot(int fd, const char *tid, abc_term_info *info, abc_term_stream **out,
                      ab_err **err)
{
        return attach(fd, tid, true, info, out, err);
}

int abc_term_next(abc_term_stream *s, abc_term_event *ev)
{
        *ev = (abc_term_event){0};
        for (;;) {
                if (s->ended)
                        return -1;
                abp_frame f;
                int k = abp_reader_next(&s->rd, &f);
                if (k < 0) {
                        s->ended = true;
                        return -1;
                }
                if (k == 0) {
                        ssize_t n = abp_reader_fill(&s->rd, s->fd);
                        if (n == -EAGAIN || n == -EINTR)
                                return 0;
                        if (n <= 0) {
                                s->ended = true;
                                return -1;
                        }
                        continue;
                }
                abp_data d;
                abp_exit e;
                if (f.type == ABP_DATA && abp_dec_data(&f, &d) == 0 &&
                    (d.stream == 1 || d.stream == 2)) {
                        if (!d.len)
                                continue;
                        *ev = (abc_term_event){.kind = ABC_TERM_OUTPUT,
                                               .data = d.data,
                                               .len = d.len,
                                               .stream = (int)d.stream};
                        return 1;
                }
                s->ended = true;
                if (f.type == ABP_EXIT && abp_dec_exit(&f, &e) == 0) {
                        *ev = (abc_term_event){.kind = ABC_TERM_EXIT,
                                               .exit_code = e.exit_code,
                                               .timed_out = e.timed_out};
                        return 1;
                }
                if (f.type == ABP_EOF) {
                        ev->kind = ABC_TERM_CLOSED;
                        return 1;
                }
                return -1;
        }
}

static int stream_send(abc_term_stream *s, abp_buf *b)
{
        int r = abp_send(s->fd, b, IO_TIMEOUT_MS);
        abp_buf_free(b);
        return r;
}

int abc_term_input(abc_term_stream *s, const void *data, size_t len)
{
        const uint8_t *p = data;
        while (len > 0) {
                abp_buf b = {0};
                size_t k = len < ABP_CHUNK ? len : ABP_CHUNK;
                if (abp_enc_data(&b, 0, p, k) < 0)
                        abort();
                int r = stream_send(s, &b);
                if (r < 0)
                        return r;
                p += k;
                len -= k;
        }
        return 0;
}

int abc_term_send_resize(abc_term_stream *s, uint32_t cols, uint32_t rows)
{
        if (!cols || !rows || cols > ABP_TERM_DIM_MAX || rows > ABP_TERM_DIM_MAX)
                return -EINVAL;
        abp_buf b = {0};
        abp_term_req m = {.id = "", .cols = cols, .rows = rows};
        if (abp_enc_term_req(&b, ABP_TERM_RESIZE, &m) < 0)
                abort();
        return stream_send(s, &b);
}

int abc_term_send_signal(abc_term_stream *s, int sig)
{
        if (sig <= 0 || sig >= 65)
                return -EINVAL;
        abp_buf b = {0};
        abp_term_req m = {.id = "", .signal = (uint32_t)sig};
        if (abp_enc_term_req(&b, ABP_TERM_SIGNAL, &m) < 0)
                abort();
        return stream_send(s, &b);
}

int abc_term_send_eof(abc_term_stream *s)
{
        abp_buf b = {0};
        if (abp_enc_empty(&b, ABP_EOF) < 0)
                abort();
        return stream_send(s, &b);
}

int abc_term_stream_fd(const abc_term_stream *s)
{
        return s->fd;
}

void abc_term_stream_free(abc_term_stream *s)
{
        if (!s)
                return;
        abp_reader_free(&s->rd);
        free(s);
}

/* ---- watch ---- */

int abc_watch_open(int fd, const char *path, bool recursive, ab_err **err)
{
        abp_file_req m = {.path = path, .flags = recursive ? ABP_RECURSIVE : 0};
        return file_simple(fd, ABP_WATCH, &m, err);
}

int abc_watch_next(int fd, abp_reader *rd, int timeout_ms, uint32_t *kind, char **name,
                   ab_err **err)
{
        *name = NULL;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (rd->end == rd->start) { /* nothing buffered: wait for it */
                int k = poll(&p, 1, timeout_ms);
                if (k < 0 && errno == EINTR)
                        return 0;
                if (k == 0)
                        return 0;
        }
        abp_frame f;
        if (next_frame(fd, rd, &f, err) < 0)
                return -1;
        abp_file_req m;
        if (f.type != ABP_WATCH_EVENT || abp_dec_file(&f, &m) < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "box init sent a malformed watch event");
        *kind = m.flags;
        *name = xstrdup(m.path);
        return 1;
}
