/* term.c - terminals: programs on a pseudo-terminal that outlive the
 * connection that made them.
 *
 * Every other request lives and dies with its session (one forked process
 * per connection). A terminal must survive its clients, so the terminals of
 * a box belong to one long-lived child of init, the keeper ("ab-terms"),
 * forked on the first terminal request. A session that reads a TERM_*
 * request hands its connection to the keeper (SCM_RIGHTS over a
 * SOCK_SEQPACKET socketpair that init made at start, with the bytes it read
 * already) and exits; the keeper serves it from then on. init keeps both
 * ends of the pair, so a connection handed over while no keeper runs (not
 * started yet, or crashed) waits in the socket for the next one; a crash of
 * the keeper loses its terminals (their pty hangs up), never init.
 *
 * The keeper is one poll loop that never blocks: per terminal the pty
 * master, a ring buffer of its recent output (TERM_RING) and the input
 * waiting for the pty; per connection a frame reader and an output queue.
 * Output goes to the ring and to every attached connection; when one of
 * them has TERM_HWM bytes queued, the keeper stops reading the pty (the
 * program blocks, as it would behind a slow ssh link); a connection that
 * stays that full for TERM_STALL_MS is dropped so that one stuck client
 * cannot stop a terminal for the others.
 *
 * The keeper also holds the box's background processes (TERM_OPEN with
 * PIPES): the same life cycle as a terminal, but the program's stdin,
 * stdout and stderr are pipes, each output stream with a ring of its own,
 * so that what API fronts start in the background (E2B processes,
 * OpenSandbox commands) outlives the server that started it. */
#include "init/init_int.h"
#include "base/id.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>

#define TERM_MAX_RUNNING 16 /* running terminals per box */
#define TERM_MAX_KEPT    32 /* running + exited ones kept for their history */
#define PROC_MAX_RUNNING 64 /* running background processes per box */
#define PROC_MAX_KEPT    96 /* running + exited ones kept for their history */
#define TERMS_MAX        (TERM_MAX_KEPT + PROC_MAX_KEPT)
#define TERM_RING        (64u << 10)  /* recent output kept per terminal */
#define PROC_RING        (128u << 10) /* recent output kept per process and stream */
#define TERM_HWM         (256u << 10)
#define TERM_STALL_MS    30000
#define TERM_INPUT_MAX   (64u << 10) /* input waiting for the pty before we stop reading */
#define TERM_MAX_CONNS   128
#define TERM_DRAIN_MS    300 /* output read after the process exited, while others hold the pty */
#define TERM_MSG_MAX     (128u << 10) /* one hand-over message from a session */

int init_term_sock = -1;
int init_term_keeper_end = -1;
int init_notify_fd = -1;

typedef struct ring {
        uint8_t *p; /* allocated on first output */
        size_t cap, head, len;
} ring;

typedef struct term {
        char id[ABP_TERM_ID_MAX + 1];
        char **argv;
        char *tag;
        bool pipes;        /* a background process: fd[] instead of master */
        int fd[3];         /* pipes: stdin (write end), stdout, stderr (read ends); -1 closed */
        bool in_eof;       /* pipes: close stdin once in is written */
        uint64_t deadline; /* pipes: killed at this ab_now_ms() (0: never) */
        uint64_t ended_ms; /* wall time of the end */
        uint64_t lines;    /* pipes: newlines written to stdout */
        bool timed_out;
        uint32_t cols, rows;
        uint64_t created_ms;
        pid_t pid;
        int master;           /* -1 once the terminal ended (pipes: always -1) */
        bool running;         /* the process was not reaped yet */
        bool ended;           /* exit known and the pty drained: EXIT was sent */
        int exit_code;        /* when !running */
        uint64_t drain_until; /* after the process exited: last moment to read the pty */
        ring ring[3];         /* output per stream: [1] (a terminal's all), [2] */
        uint8_t *in;
        size_t in_len;
        uint64_t stalled_since; /* when reading the pty was paused (0: not paused) */
} term;

typedef struct conn {
        int fd;
        abp_reader rd;
        abp_buf out;
        term *t;      /* attached to this terminal, or NULL */
        bool closing; /* hang up once out is sent */
} conn;

static term *terms[TERMS_MAX];
static conn *conns[TERM_MAX_CONNS];
static init_conf kconf;

/* ---- the session side ---- */

void init_term_forward(init_conn *c, const abp_frame *f)
{
        size_t rest = c->rd.end - c->rd.start;
        size_t n = ABP_HDR_SIZE + (size_t)f->len + rest;
        if (f->len > ABP_TERM_REQ_MAX || n > TERM_MSG_MAX) {
                init_send_error(c, "invalid_argument", "terminal request too large");
                return;
        }
        _cleanup_free_ uint8_t *msg = xmalloc(n);
        uint32_t hdr[2] = {f->type, f->len};
        for (int i = 0; i < 2; i++)
                for (int k = 0; k < 4; k++)
                        msg[i * 4 + k] = (uint8_t)(hdr[i] >> (8 * k));
        memcpy(msg + ABP_HDR_SIZE, f->payload, f->len);
        memcpy(msg + ABP_HDR_SIZE + f->len, c->rd.p + c->rd.start, rest);

        struct iovec iov = {.iov_base = msg, .iov_len = n};
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } u;
        memset(&u, 0, sizeof(u));
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = u.buf,
                            .msg_controllen = sizeof(u.buf)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &c->fd, sizeof(int));
        ssize_t r;
        do /* never wait: a keeper that takes nothing must not hold sessions */
                r = sendmsg(init_term_sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        while (r < 0 && errno == EINTR);
        if (r < 0) {
                init_send_error(c, "unavailable", "terminal keeper: %s",
                                errno == EAGAIN ? "busy, try again" : strerror(errno));
                return;
        }
        /* Ask init for a keeper (it starts one when none runs). */
        pid_t zero = 0;
        if (init_notify_fd >= 0)
                (void)!write(init_notify_fd, &zero, sizeof(zero));
}

/* ---- helpers ---- */

static uint64_t wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void queue_error(conn *c, const char *code, const char *msg)
{
        if (abp_enc_error(&c->out, code, msg) < 0)
                abort();
        c->closing = true;
}

static void queue_empty(conn *c, uint32_t type)
{
        if (abp_enc_empty(&c->out, type) < 0)
                abort();
}

static void queue_data(conn *c, uint32_t stream, const uint8_t *p, size_t n)
{
        while (n > 0) {
                size_t k = n < ABP_CHUNK ? n : ABP_CHUNK;
                if (abp_enc_data(&c->out, stream, p, k) < 0)
                        abort();
                p += k;
                n -= k;
        }
}

static void queue_info(conn *c, const term *t)
{
        size_t n = 0;
        while (t->argv[n])
                n++;
        abp_term_info m = {
            .id = t->id,
            .argv = (const char **)t->argv,
            .n_argv = n,
            .cols = t->cols,
            .rows = t->rows,
            .pid = (uint32_t)t->pid,
            .created_ms = t->created_ms,
            .running = !t->ended,
            .has_exit = t->ended,
            .exit_code = t->exit_code,
            .pipes = t->pipes,
            .timed_out = t->timed_out,
            .ended_ms = t->ended_ms,
            .lines = t->lines,
            .tag = t->tag,
        };
        if (abp_enc_term(&c->out, &m) < 0)
                abort(); /* argv came in one frame: it fits in one */
}

static term *find_term(const char *id)
{
        for (size_t i = 0; i < TERMS_MAX; i++)
                if (terms[i] && strcmp(terms[i]->id, id) == 0)
                        return terms[i];
        return NULL;
}

static void set_nonblock(int fd)
{
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
                fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void ring_add(ring *g, size_t cap, const uint8_t *p, size_t n)
{
        if (!g->p) {
                g->p = xmalloc(cap);
                g->cap = cap;
        }
        if (n >= g->cap) {
                memcpy(g->p, p + n - g->cap, g->cap);
                g->head = 0;
                g->len = g->cap;
                return;
        }
        size_t first = g->cap - g->head;
        if (first > n)
                first = n;
        memcpy(g->p + g->head, p, first);
        memcpy(g->p, p + first, n - first);
        g->head = (g->head + n) % g->cap;
        g->len = g->len + n > g->cap ? g->cap : g->len + n;
}

/* The rings to a client that attaches: stdout's, then stderr's. */
static void ring_replay(conn *c, const term *t)
{
        for (uint32_t s = 1; s <= 2; s++) {
                const ring *g = &t->ring[s];
                if (!g->len)
                        continue;
                size_t start = (g->head + g->cap - g->len) % g->cap;
                size_t first = g->cap - start;
                if (first > g->len)
                        first = g->len;
                queue_data(c, s, g->p + start, first);
                queue_data(c, s, g->p, g->len - first);
        }
}

/* The session id of a process, from /proc/PID/stat, or -1. */
static pid_t proc_session(int procfd, const char *pid)
{
        char path[300], buf[512];
        snprintf(path, sizeof(path), "%.256s/stat", pid);
        _cleanup_close_ int fd = openat(procfd, path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        ssize_t n = ab_read_full(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return -1;
        buf[n] = 0;
        char *p = strrchr(buf, ')');
        int sid;
        if (!p || sscanf(p + 1, " %*c %*d %*d %d", &sid) != 1)
                return -1;
        return sid;
}

/* SIGKILLs every process of the terminal's session (background jobs have
 * process groups of their own, but stay in the session). */
static void kill_session(pid_t sid)
{
        kill(-sid, SIGKILL);
        DIR *d = opendir("/proc");
        if (!d)
                return;
        struct dirent *e;
        while ((e = readdir(d))) {
                char *end;
                long pid = strtol(e->d_name, &end, 10);
                if (*end || pid <= 1 || pid == getpid())
                        continue;
                if (proc_session(dirfd(d), e->d_name) == sid)
                        kill((pid_t)pid, SIGKILL);
        }
        closedir(d);
}

static void term_free(term *t)
{
        for (size_t i = 0; i < TERMS_MAX; i++)
                if (terms[i] == t)
                        terms[i] = NULL;
        if (t->master >= 0)
                close(t->master);
        for (int i = 0; i < 3; i++)
                if (t->fd[i] >= 0)
                        close(t->fd[i]);
        ab_strvfreep(&t->argv);
        free(t->tag);
        for (int i = 0; i < 3; i++)
                free(t->ring[i].p);
        free(t->in);
        free(t);
}

static void fd_close(int *fd)
{
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

static void conn_free(conn *c)
{
        for (size_t i = 0; i < TERM_MAX_CONNS; i++)
                if (conns[i] == c)
                        conns[i] = NULL;
        close(c->fd);
        abp_reader_free(&c->rd);
        abp_buf_free(&c->out);
        free(c);
}

/* The process exited and the pty is drained (or the grace ran out): EXIT
 * to every client, which then hang up. The pty closes, so what the program
 * left behind on it gets SIGHUP. */
static void term_end(term *t)
{
        if (t->ended)
                return;
        t->ended = true;
        t->ended_ms = wall_ms();
        fd_close(&t->master);
        for (int i = 0; i < 3; i++)
                fd_close(&t->fd[i]);
        free(t->in);
        t->in = NULL;
        t->in_len = 0;
        abp_exit ex = {.exit_code = t->exit_code, .timed_out = t->timed_out};
        for (size_t i = 0; i < TERM_MAX_CONNS; i++) {
                conn *c = conns[i];
                if (!c || c->t != t)
                        continue;
                if (abp_enc_exit(&c->out, &ex) < 0)
                        abort();
                c->t = NULL;
                c->closing = true;
        }
}

/* Output to the ring of its stream and to attached clients. */
static void term_output(term *t, uint32_t stream, const uint8_t *buf, size_t n)
{
        ring_add(&t->ring[stream], t->pipes ? PROC_RING : TERM_RING, buf, n);
        if (t->pipes && stream == 1)
                for (const uint8_t *p = buf; (p = memchr(p, '\n', n - (size_t)(p - buf))); p++)
                        t->lines++;
        for (size_t i = 0; i < TERM_MAX_CONNS; i++)
                if (conns[i] && conns[i]->t == t)
                        queue_data(conns[i], stream, buf, n);
}

/* One read of a process's stdout (1) or stderr (2); at the end of both
 * after the process was reaped, the process ended. */
static void proc_read(term *t, int stream)
{
        static uint8_t buf[ABP_CHUNK];
        ssize_t n;
        do
                n = read(t->fd[stream], buf, sizeof(buf));
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == EAGAIN)
                return;
        if (n > 0) {
                term_output(t, (uint32_t)stream, buf, (size_t)n);
                return;
        }
        fd_close(&t->fd[stream]);
        if (!t->running && t->fd[1] < 0 && t->fd[2] < 0)
                term_end(t);
}

/* One read of the pty: output to the ring and to attached clients. */
static void term_read(term *t)
{
        static uint8_t buf[ABP_CHUNK];
        ssize_t n;
        do
                n = read(t->master, buf, sizeof(buf));
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == EAGAIN)
                return;
        if (n <= 0) {
                /* EIO: no process holds the pty any more. */
                if (!t->running)
                        term_end(t);
                else if (!t->drain_until)
                        t->drain_until = UINT64_MAX; /* wait for the exit status */
                return;
        }
        term_output(t, 1, buf, (size_t)n);
}

/* The fd input goes to: the pty, or a process's stdin pipe (-1: none). */
static int in_fd(const term *t)
{
        return t->pipes ? t->fd[0] : t->master;
}

static void term_write(term *t)
{
        int fd = in_fd(t);
        while (fd >= 0 && t->in_len > 0) {
                ssize_t n = write(fd, t->in, t->in_len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        t->in_len = 0; /* the pty is gone: input has nowhere to go */
                        return;
                }
                memmove(t->in, t->in + n, t->in_len - (size_t)n);
                t->in_len -= (size_t)n;
        }
        if (t->pipes && t->in_eof && !t->in_len)
                fd_close(&t->fd[0]); /* the program reads EOF */
}

/* ---- starting a terminal ---- */

/* The child, as `user`, on the pty's slave side (io[0..2] all the slave)
 * or on a process's pipes (pty false): never returns. */
__attribute__((noreturn)) static void term_child(const int io[3], bool pty, int cwdfd, char **argv,
                                                 char **env, const init_user *user)
{
        init_child_common(); /* setsid first: the pty becomes its controlling terminal */
        if (pty && ioctl(io[0], TIOCSCTTY, 0) < 0)
                _exit(127);
        /* every source above 2 first, so that no dup2 overwrites another's */
        int hi[3];
        for (int i = 0; i < 3; i++)
                if ((hi[i] = fcntl(io[i], F_DUPFD_CLOEXEC, 3)) < 0)
                        _exit(127);
        if (dup2(hi[0], 0) < 0 || dup2(hi[1], 1) < 0 || dup2(hi[2], 2) < 0)
                _exit(127);
        if (fchdir(cwdfd) < 0) {
                dprintf(2, "agentbox-init: cannot enter the working directory: %s\r\n",
                        strerror(errno));
                _exit(127);
        }
        if (user->set) {
                /* Its terminal is its own, as login(1) makes it (best effort). */
                if (pty)
                        (void)!fchown(0, user->uid, (gid_t)-1);
                int r = init_user_apply(user);
                if (r < 0) {
                        dprintf(2, "agentbox-init: cannot become uid %u gid %u: %s\r\n",
                                (unsigned)user->uid, (unsigned)user->gid, strerror(-r));
                        _exit(126);
                }
        }
        if (close_range(3, ~0U, 0) < 0)
                for (int fd = 3; fd < 65536; fd++)
                        close(fd);
        /* execvp looks argv[0] up along the PATH of the environment it runs in. */
        extern char **environ;
        environ = env;
        execvp(argv[0], argv);
        int e = errno;
        dprintf(2, "agentbox-init: %s: %s\r\n", argv[0],
                e == ENOENT ? "command not found" : strerror(e));
        _exit(e == ENOENT ? 127 : 126);
}

static void new_id(char *out)
{
        ab_random_hex(out, ABP_TERM_ID_MAX + 1, "t_", 8);
}

/* A free slot for a new terminal (or process, pipes): -1 with *why when
 * there is none (an exited one of its kind with no client is dropped to
 * make room). */
static int term_slot(bool pipes, const char **why)
{
        size_t running = 0, kept = 0;
        int free_slot = -1, oldest = -1;
        for (int i = 0; i < TERMS_MAX; i++) {
                term *t = terms[i];
                if (!t) {
                        if (free_slot < 0)
                                free_slot = i;
                        continue;
                }
                if (t->pipes != pipes)
                        continue;
                kept++;
                if (!t->ended) {
                        running++;
                        continue;
                }
                bool watched = false;
                for (size_t k = 0; k < TERM_MAX_CONNS; k++)
                        watched |= conns[k] && conns[k]->t == t;
                if (!watched && (oldest < 0 || t->created_ms < terms[oldest]->created_ms))
                        oldest = i;
        }
        if (running >= (pipes ? PROC_MAX_RUNNING : TERM_MAX_RUNNING)) {
                *why = pipes ? "too many background processes in this box (64 run at most)"
                             : "too many terminals in this box (16 run at most): close one first";
                return -1;
        }
        if (free_slot >= 0 && kept < (pipes ? PROC_MAX_KEPT : TERM_MAX_KEPT))
                return free_slot;
        if (oldest >= 0) {
                term_free(terms[oldest]);
                return oldest;
        }
        *why = pipes ? "too many background processes in this box: close one first"
                     : "too many terminals in this box: close one first";
        return -1;
}

static bool env_ok(const char *e)
{
        const char *eq = strchr(e, '=');
        return eq && eq != e;
}

static term *term_new(char **argv, const char *tag)
{
        term *t = xzalloc(sizeof(*t));
        new_id(t->id);
        t->argv = argv;
        t->tag = tag ? xstrdup(tag) : NULL;
        t->master = t->fd[0] = t->fd[1] = t->fd[2] = -1;
        t->created_ms = wall_ms();
        return t;
}

/* do_open's end for a background process: its three pipes, then the fork. */
static void proc_open(conn *c, const abp_term_req *q, int slot, int cwdfd, char ***argv, char **env,
                      const init_user *user)
{
        int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
                char m[256];
                snprintf(m, sizeof(m), "cannot make pipes: %s", strerror(errno));
                queue_error(c, "internal", m);
                goto out;
        }
        pid_t pid = fork();
        if (pid < 0) {
                int e = errno;
                char m[256];
                snprintf(m, sizeof(m), "cannot fork: %s", strerror(e));
                queue_error(c, e == EAGAIN ? "limit_exceeded" : "internal", m);
                goto out;
        }
        if (pid == 0)
                term_child((int[3]){in[0], out[1], q->merge ? out[1] : err[1]}, false, cwdfd, *argv,
                           env, user);
        term *t = term_new(steal_pointer(argv), q->tag);
        t->pipes = true;
        t->pid = pid;
        t->deadline = q->timeout_ms ? ab_now_ms() + q->timeout_ms : 0;
        t->running = true;
        t->fd[0] = steal_fd(&in[1]);
        t->fd[1] = steal_fd(&out[0]);
        t->fd[2] = steal_fd(&err[0]);
        for (int i = 0; i < 3; i++)
                set_nonblock(t->fd[i]);
        if (q->close_stdin)
                fd_close(&t->fd[0]);
        terms[slot] = t;
        queue_info(c, t);
        c->closing = true;
out:
        for (int i = 0; i < 2; i++) {
                fd_close(&in[i]);
                fd_close(&out[i]);
                fd_close(&err[i]);
        }
}

static void do_open(conn *c, const abp_term_req *q)
{
        const char *why = NULL;
        for (size_t i = 0; i < q->n_env; i++) {
                if (!env_ok(q->env[i])) {
                        queue_error(c, "invalid_argument", "environment entry is not NAME=VALUE");
                        return;
                }
        }
        const char *cwd = q->cwd ? q->cwd : kconf.workdir;
        _cleanup_close_ int cwdfd = init_open(&kconf, cwd, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
        if (cwdfd < 0) {
                char m[1200];
                snprintf(m, sizeof(m), "working directory %s: %.1024s",
                         cwdfd == -ENOENT ? "does not exist" : strerror(-cwdfd), cwd);
                queue_error(c, cwdfd == -ENOENT ? "not_found" : "invalid_argument", m);
                return;
        }
        /* Looked for at every open: a box may install bash, or have no shell. */
        const char *shell = init_shell();
        if (!q->n_argv && !shell) {
                queue_error(c, "unsupported", INIT_NO_SHELL);
                return;
        }
        __attribute__((cleanup(init_user_free))) init_user user = {0};
        if (q->user && q->user[0]) {
                _cleanup_free_ char *why_user = NULL;
                if (init_user_resolve(&kconf, q->user, &user, &why_user) < 0) {
                        queue_error(c, "invalid_argument", why_user);
                        return;
                }
        }
        int slot = term_slot(q->pipes, &why);
        if (slot < 0) {
                queue_error(c, "conflict", why);
                return;
        }

        _cleanup_strv_ char **argv = NULL;
        if (q->n_argv) {
                argv = xcalloc(q->n_argv + 1, sizeof(*argv));
                for (size_t i = 0; i < q->n_argv; i++)
                        argv[i] = xstrdup(q->argv[i]);
        } else {
                argv = xcalloc(3, sizeof(*argv));
                argv[0] = xstrdup(strcmp(shell, "/bin/bash") == 0 ? "bash" : shell);
                argv[1] = xstrdup("-l");
        }
        /* The base environment of an exec, a terminal's TERM, then the request's. */
        _cleanup_free_ const char **extra = xcalloc(q->n_env + 2, sizeof(*extra));
        size_t n_extra = 0;
        if (!q->pipes)
                extra[n_extra++] = "TERM=xterm-256color";
        for (size_t i = 0; i < q->n_env; i++)
                extra[n_extra++] = q->env[i];
        _cleanup_strv_ char **env = init_base_env(extra, n_extra, kconf.workdir, &user, shell);
        if (q->pipes && q->command) { /* as an exec's COMMAND: the box's shell runs it */
                if (!shell) {
                        queue_error(c, "unsupported", INIT_NO_SHELL);
                        return;
                }
                ab_strvfreep(&argv);
                argv = xcalloc(4, sizeof(*argv));
                argv[0] = xstrdup(shell);
                argv[1] = xstrdup("-c");
                argv[2] = xstrdup(q->command);
        }
        if (q->pipes) {
                proc_open(c, q, slot, cwdfd, &argv, env, &user);
                return;
        }

        struct winsize ws = {.ws_col = (unsigned short)(q->cols ? q->cols : 80),
                             .ws_row = (unsigned short)(q->rows ? q->rows : 24)};
        _cleanup_close_ int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        _cleanup_close_ int slave = -1;
        if (master >= 0 && unlockpt(master) == 0)
                slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (slave < 0) {
                char m[256];
                snprintf(m, sizeof(m), "cannot open a pseudo-terminal: %s", strerror(errno));
                queue_error(c, "internal", m);
                return;
        }
        ioctl(master, TIOCSWINSZ, &ws);
        pid_t pid = fork();
        if (pid < 0) {
                int e = errno;
                char m[256];
                snprintf(m, sizeof(m), "cannot fork: %s", strerror(e));
                queue_error(c, e == EAGAIN ? "limit_exceeded" : "internal", m);
                return;
        }
        if (pid == 0)
                term_child((int[3]){slave, slave, slave}, true, cwdfd, argv, env, &user);
        set_nonblock(master);
        term *t = term_new(steal_pointer(&argv), q->tag);
        t->cols = ws.ws_col;
        t->rows = ws.ws_row;
        t->pid = pid;
        t->master = steal_fd(&master);
        t->running = true;
        terms[slot] = t;
        queue_info(c, t);
        c->closing = true;
}

static void do_list(conn *c, bool pipes)
{
        for (size_t i = 0; i < TERMS_MAX; i++)
                if (terms[i] && terms[i]->pipes == pipes)
                        queue_info(c, terms[i]);
        queue_empty(c, ABP_OK);
        c->closing = true;
}

static void do_resize(term *t, uint32_t cols, uint32_t rows)
{
        t->cols = cols;
        t->rows = rows;
        struct winsize ws = {.ws_col = (unsigned short)cols, .ws_row = (unsigned short)rows};
        if (t->master >= 0)
                ioctl(t->master, TIOCSWINSZ, &ws);
}

/* A signal goes to the terminal's foreground process group (what ^C
 * reaches), or to the terminal's process when that is unknown; to a
 * background process's group (its own: it leads a session). */
static void do_signal(term *t, int sig)
{
        pid_t pg = -1;
        if (t->pipes && sig == SIGKILL) {
                if (t->running) /* everything it started too, as a close does */
                        kill_session(t->pid);
        } else if (t->pipes) {
                if (t->running && kill(-t->pid, sig) < 0)
                        kill(t->pid, sig);
        } else if (t->master >= 0 && ioctl(t->master, TIOCGPGRP, &pg) == 0 && pg > 1)
                kill(-pg, sig);
        else if (!t->ended)
                kill(t->pid, sig);
}

static void do_close(term *t)
{
        if (!t->ended)
                kill_session(t->pid);
        for (size_t i = 0; i < TERM_MAX_CONNS; i++) {
                conn *c = conns[i];
                if (!c || c->t != t)
                        continue;
                queue_empty(c, ABP_EOF); /* closed: no exit status to report */
                c->t = NULL;
                c->closing = true;
        }
        term_free(t);
}

static void do_attach(conn *c, term *t, bool snapshot)
{
        if (snapshot) { /* what it kept, as it is now */
                queue_info(c, t);
                ring_replay(c, t);
                queue_empty(c, ABP_EOF);
                c->closing = true;
                return;
        }
        size_t watchers = 0;
        for (size_t i = 0; i < TERM_MAX_CONNS; i++)
                watchers += conns[i] && conns[i]->t == t;
        if (watchers >= 16) {
                queue_error(c, "conflict", "too many clients attached to this terminal (16)");
                return;
        }
        queue_info(c, t);
        ring_replay(c, t);
        if (t->ended) {
                abp_exit ex = {.exit_code = t->exit_code, .timed_out = t->timed_out};
                if (abp_enc_exit(&c->out, &ex) < 0)
                        abort();
                c->closing = true;
                return;
        }
        c->t = t;
}

/* Input without attaching (what an API that sends keystrokes apart from
 * the output stream needs). */
static void do_input(conn *c, term *t, const abp_term_req *q)
{
        if (in_fd(t) < 0) {
                queue_error(c, "conflict",
                            t->pipes && !t->ended ? "the process's stdin is closed"
                                                  : "the terminal's program has exited");
                return;
        }
        if (t->in_len + q->data_len > 4 * TERM_INPUT_MAX) {
                queue_error(c, "conflict", "the terminal does not read its input: try again");
                return;
        }
        if (q->data_len) {
                t->in = xrealloc(t->in, t->in_len + q->data_len);
                memcpy(t->in + t->in_len, q->data, q->data_len);
                t->in_len += q->data_len;
        }
        t->in_eof |= t->pipes && q->close_stdin;
        term_write(t);
        queue_empty(c, ABP_OK);
        c->closing = true;
}

/* A request on a connection that is not attached. */
static void conn_request(conn *c, const abp_frame *f)
{
        abp_term_req q;
        if (abp_dec_term_req(f, &q) < 0) {
                queue_error(c, "invalid_argument", "malformed terminal request");
                return;
        }
        term *t = q.id ? find_term(q.id) : NULL;
        if (f->type != ABP_TERM_OPEN && f->type != ABP_TERM_LIST && !t) {
                queue_error(c, "not_found", "no such terminal");
        } else {
                switch (f->type) {
                case ABP_TERM_OPEN:
                        do_open(c, &q);
                        break;
                case ABP_TERM_LIST:
                        do_list(c, q.pipes);
                        break;
                case ABP_TERM_CLOSE:
                        do_close(t);
                        queue_empty(c, ABP_OK);
                        c->closing = true;
                        break;
                case ABP_TERM_RESIZE:
                        do_resize(t, q.cols, q.rows);
                        queue_empty(c, ABP_OK);
                        c->closing = true;
                        break;
                case ABP_TERM_SIGNAL:
                        do_signal(t, (int)q.signal);
                        queue_empty(c, ABP_OK);
                        c->closing = true;
                        break;
                case ABP_TERM_ATTACH:
                        do_attach(c, t, q.snapshot);
                        break;
                case ABP_TERM_INPUT:
                        do_input(c, t, &q);
                        break;
                }
        }
        abp_term_req_clear(&q);
}

/* Frames of an attached client: input, resize, signal. */
static void conn_stream(conn *c, const abp_frame *f)
{
        term *t = c->t;
        abp_data d;
        abp_term_req q;
        if (f->type == ABP_EOF && t->pipes) { /* the end of a process's stdin */
                t->in_eof = true;
                term_write(t);
                return;
        }
        if (f->type == ABP_DATA && abp_dec_data(f, &d) == 0 && d.stream == 0) {
                if (in_fd(t) >= 0 && !t->in_eof && d.len > 0) {
                        t->in = xrealloc(t->in, xadd(t->in_len, d.len));
                        memcpy(t->in + t->in_len, d.data, d.len);
                        t->in_len += d.len;
                        term_write(t);
                }
                return;
        }
        if ((f->type == ABP_TERM_RESIZE || f->type == ABP_TERM_SIGNAL) &&
            abp_dec_term_req(f, &q) == 0) {
                if (f->type == ABP_TERM_RESIZE)
                        do_resize(t, q.cols, q.rows);
                else
                        do_signal(t, (int)q.signal);
                abp_term_req_clear(&q);
                return;
        }
        c->t = NULL;
        queue_error(c, "invalid_argument", "unexpected frame on a terminal stream");
}

/* Handles the frames buffered on c for as long as it can take them. */
static void conn_frames(conn *c)
{
        while (!c->closing) {
                if (c->t && c->t->in_len >= TERM_INPUT_MAX)
                        return; /* the pty does not take input now: wait */
                abp_frame f;
                int k = abp_reader_next(&c->rd, &f);
                if (k == 0)
                        return;
                if (k < 0) {
                        c->t = NULL;
                        queue_error(c, "invalid_argument", "malformed frame");
                        return;
                }
                if (c->t)
                        conn_stream(c, &f);
                else
                        conn_request(c, &f);
        }
}

/* Sends what c has queued; false when c is done (sent all before a hang-up,
 * or the peer is gone). */
static bool conn_flush(conn *c)
{
        while (c->out.len > 0) {
                ssize_t n = send(c->fd, c->out.p, c->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return true;
                if (n <= 0) {
                        c->t = NULL;
                        return false;
                }
                abp_buf_consume(&c->out, (size_t)n);
        }
        return !c->closing;
}

static void conn_read(conn *c)
{
        ssize_t n = abp_reader_fill(&c->rd, c->fd);
        if (n == 0 || (n < 0 && n != -EAGAIN && n != -ENOBUFS)) {
                /* The client hung up: detach (the terminal lives on). */
                c->t = NULL;
                c->closing = true;
                c->out.len = 0;
                return;
        }
        conn_frames(c);
}

/* A connection handed over by a session. */
static void take_conn(int ks)
{
        static uint8_t buf[TERM_MSG_MAX];
        union {
                char b[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } u;
        struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b)};
        ssize_t n = recvmsg(ks, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0)
                return;
        int fd = -1;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
            cm->cmsg_len == CMSG_LEN(sizeof(int)))
                memcpy(&fd, CMSG_DATA(cm), sizeof(int));
        if (fd < 0)
                return;
        int slot = -1;
        for (int i = 0; i < TERM_MAX_CONNS && slot < 0; i++)
                if (!conns[i])
                        slot = i;
        if (slot < 0 || (mh.msg_flags & MSG_TRUNC)) {
                close(fd); /* the client sees the hang-up: init not responding */
                return;
        }
        set_nonblock(fd);
        conn *c = xzalloc(sizeof(*c));
        c->fd = fd;
        conns[slot] = c;
        if (abp_reader_feed(&c->rd, buf, (size_t)n) < 0) {
                queue_error(c, "invalid_argument", "terminal request too large");
                return;
        }
        conn_frames(c);
}

static void reap(void)
{
        int status;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
                for (size_t i = 0; i < TERMS_MAX; i++) {
                        term *t = terms[i];
                        if (!t || t->pid != p || !t->running)
                                continue;
                        t->running = false;
                        t->exit_code = t->timed_out          ? ABP_TIMEOUT_EXIT
                                       : WIFEXITED(status)   ? WEXITSTATUS(status)
                                       : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                                             : 0;
                        /* Read what the pty (pipes) still holds; whatever else keeps
                         * it open gets TERM_DRAIN_MS to let it go. */
                        if (t->pipes)
                                fd_close(&t->fd[0]);
                        if (t->pipes ? t->fd[1] < 0 && t->fd[2] < 0 : t->drain_until == UINT64_MAX)
                                term_end(t);
                        else
                                t->drain_until = ab_now_ms() + TERM_DRAIN_MS;
                }
        }
}

/* ---- the keeper's loop ---- */

static bool paused(term *t, uint64_t now)
{
        bool full = false;
        for (size_t i = 0; i < TERM_MAX_CONNS; i++) {
                conn *c = conns[i];
                if (!c || c->t != t || c->out.len < TERM_HWM)
                        continue;
                if (t->stalled_since && now - t->stalled_since > TERM_STALL_MS) {
                        /* Stuck for too long: let the others go on. */
                        c->t = NULL;
                        c->closing = true;
                        c->out.len = 0;
                        continue;
                }
                full = true;
        }
        if (!full)
                t->stalled_since = 0;
        else if (!t->stalled_since)
                t->stalled_since = now ? now : 1;
        return full;
}

__attribute__((noreturn)) void init_term_keeper(int ks, const char *workdir)
{
        prctl(PR_SET_NAME, "ab-terms");
        prctl(PR_SET_CHILD_SUBREAPER, 1);
        int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (oom >= 0) {
                (void)!write(oom, "0", 1);
                close(oom);
        }
        kconf.workdir = workdir;
        kconf.workdir_fd = open(workdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, NULL);
        int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0)
                _exit(1);

        enum { MAXP = 2 + 3 * TERMS_MAX + TERM_MAX_CONNS };
        for (;;) {
                struct pollfd p[MAXP];
                term *pt[MAXP];
                int pw[MAXP]; /* which fd of pt: -1 the pty, 0..2 a process's pipe */
                conn *pc[MAXP];
                int np = 0, timeout = -1;
                uint64_t now = ab_now_ms();
                size_t nconns = 0;
                for (size_t i = 0; i < TERM_MAX_CONNS; i++)
                        nconns += conns[i] != NULL;
                p[np++] =
                    (struct pollfd){.fd = nconns < TERM_MAX_CONNS ? ks : -1, .events = POLLIN};
                p[np++] = (struct pollfd){.fd = sfd, .events = POLLIN};
                for (size_t i = 0; i < TERMS_MAX; i++) {
                        term *t = terms[i];
                        if (!t || t->ended || (!t->pipes && t->master < 0))
                                continue;
                        if (t->deadline && t->running) {
                                if (now >= t->deadline) { /* its timeout: the session goes */
                                        t->timed_out = true;
                                        t->deadline = 0;
                                        kill_session(t->pid);
                                } else {
                                        int left = (int)(t->deadline - now);
                                        timeout = timeout < 0 || left < timeout ? left : timeout;
                                }
                        }
                        if (t->drain_until && t->drain_until != UINT64_MAX) {
                                if (now >= t->drain_until) {
                                        term_end(t);
                                        continue;
                                }
                                int left = (int)(t->drain_until - now);
                                timeout = timeout < 0 || left < timeout ? left : timeout;
                        }
                        short ev = 0;
                        if (!paused(t, now))
                                ev |= POLLIN;
                        else
                                timeout = timeout < 0 || timeout > 1000 ? 1000 : timeout;
                        if (t->in_len)
                                ev |= POLLOUT;
                        if (t->pipes) {
                                for (int k = 0; k < 3; k++) {
                                        short e = k ? ev & POLLIN : ev & POLLOUT;
                                        if (t->fd[k] < 0 || !e)
                                                continue;
                                        pt[np] = t;
                                        pw[np] = k;
                                        pc[np] = NULL;
                                        p[np++] = (struct pollfd){.fd = t->fd[k], .events = e};
                                }
                                continue;
                        }
                        if (t->drain_until == UINT64_MAX)
                                ev &= (short)~POLLIN; /* EIO already: wait for the exit */
                        pt[np] = t;
                        pw[np] = -1;
                        pc[np] = NULL;
                        /* (a hung-up pty reports POLLHUP whatever we ask: leave it out) */
                        p[np++] = (struct pollfd){.fd = ev ? t->master : -1, .events = ev};
                }
                for (size_t i = 0; i < TERM_MAX_CONNS; i++) {
                        conn *c = conns[i];
                        if (!c)
                                continue;
                        if (!conn_flush(c)) {
                                conn_free(c);
                                continue;
                        }
                        short ev = 0;
                        if (!c->closing && !(c->t && c->t->in_len >= TERM_INPUT_MAX))
                                ev |= POLLIN;
                        if (c->out.len)
                                ev |= POLLOUT;
                        pt[np] = NULL;
                        pw[np] = -1;
                        pc[np] = c;
                        p[np++] = (struct pollfd){.fd = c->fd, .events = ev};
                }
                if (poll(p, (nfds_t)np, timeout) < 0) {
                        if (errno != EINTR)
                                usleep(10000);
                        continue;
                }
                if (p[1].revents) {
                        struct signalfd_siginfo si;
                        while (read(sfd, &si, sizeof(si)) == sizeof(si))
                                ;
                        reap();
                }
                for (int i = 2; i < np; i++) {
                        if (!p[i].revents)
                                continue;
                        if (pt[i]) {
                                term *t = pt[i];
                                if (t->ended)
                                        continue; /* ended by reap() or a read above */
                                if (pw[i] == 0) {
                                        term_write(t);
                                        continue;
                                }
                                if (pw[i] > 0) {
                                        if (t->fd[pw[i]] >= 0)
                                                proc_read(t, pw[i]);
                                        continue;
                                }
                                if (t->master < 0)
                                        continue;
                                if (p[i].revents & POLLOUT)
                                        term_write(t);
                                if (p[i].revents & (POLLIN | POLLHUP | POLLERR))
                                        term_read(t);
                        } else if (pc[i] && p[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                                conn_read(pc[i]);
                        }
                }
                /* Input that waited for room in a pty may go on now. */
                for (size_t i = 0; i < TERM_MAX_CONNS; i++)
                        if (conns[i] && conns[i]->t)
                                conn_frames(conns[i]);
                if (p[0].revents)
                        for (int k = 0; k < 16; k++)
                                take_conn(ks);
        }
}
