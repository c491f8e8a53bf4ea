/* init.c - agentbox-init: PID 1 of every box.
 *
 *   agentbox-init --fd N       [--workdir DIR]   serve on an inherited listening socket
 *   agentbox-init --listen PATH [--workdir DIR]  bind and listen itself
 *   agentbox-init --listen-tcp IP:PORT --secret-file F  (also, or alone) TCP
 *   agentbox-init --install PATH                 copy itself to PATH (pods' init container)
 *   agentbox-init --version
 *
 * The main loop only starts sessions, reaps zombies and handles SIGTERM:
 * every connection is served by a forked session child (one request per
 * connection), so nothing a request does can crash or block init. A fork
 * costs more than the rest of a small exec (~1.4 ms of a ~5 ms exec on the
 * host of docs/benchmarks.md), so one session is always forked ahead: the
 * spare waits in accept() itself and, once it has a connection, tells init,
 * which forks the next spare while the first serves. Without a spare (a
 * failed fork), init accepts and forks per connection.
 *
 * Over TCP (a pod, reached by its IP), init accepts each connection itself
 * and forks a session that first runs the mutual handshake of
 * proto/handshake.h within ABH_DEADLINE_MS; at most TCP_PENDING_MAX
 * connections may be in their handshake at once (more are closed at once),
 * so connections that never authenticate cannot use up init, and the unix
 * socket is served all along. */
#include "base/err.h"
#include "init/init_int.h"
#include "proto/handshake.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <endian.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <sys/wait.h>

#ifndef AGENTBOX_VERSION
#define AGENTBOX_VERSION "unknown"
#endif

static void logmsg(const char *fmt, ...) AB_PRINTF(1, 2);
static void logmsg(const char *fmt, ...)
{
        char buf[512];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
        va_end(ap);
        if (n < 0)
                return;
        if ((size_t)n > sizeof(buf) - 2)
                n = sizeof(buf) - 2;
        buf[n++] = '\n';
        (void)!write(STDERR_FILENO, "agentbox-init: ", 15);
        (void)!write(STDERR_FILENO, buf, (size_t)n);
}

/* ---- answers shared by exec.c and fileops.c ---- */

int init_send(init_conn *c, abp_buf *b)
{
        return abp_send(c->fd, b, INIT_IO_TIMEOUT_MS);
}

int init_send_error(init_conn *c, const char *code, const char *fmt, ...)
{
        va_list ap;
        _cleanup_free_ char *msg = NULL;
        va_start(ap, fmt);
        int n = vasprintf(&msg, fmt, ap);
        va_end(ap);
        if (n < 0)
                abort();
        abp_buf b = {0};
        if (abp_enc_error(&b, code, msg) < 0) {
                abp_buf_free(&b);
                return -1;
        }
        int r = init_send(c, &b);
        abp_buf_free(&b);
        return r < 0 ? r : -1;
}

int init_send_errno(init_conn *c, int e, const char *path)
{
        /* Paths may be long; keep messages readable. */
        const int w = 1024;
        switch (e) {
        case ENOENT:
                return init_send_error(c, "not_found", "no such file or directory: %.*s", w, path);
        case EACCES:
        case EPERM:
                return init_send_error(c, "permission_denied", "permission denied: %.*s", w, path);
        case EROFS:
                return init_send_error(c, "permission_denied", "read-only path: %.*s", w, path);
        case ENOSPC:
        case EDQUOT:
                return init_send_error(c, "limit_exceeded", "disk quota exceeded: %.*s", w, path);
        case EISDIR:
                return init_send_error(c, "invalid_argument", "is a directory: %.*s", w, path);
        case ENOTDIR:
                return init_send_error(c, "invalid_argument", "not a directory: %.*s", w, path);
        case EINVAL:
                return init_send_error(c, "invalid_argument", "invalid path or argument: %.*s", w,
                                       path);
        case ENAMETOOLONG:
                return init_send_error(c, "invalid_argument", "path too long: %.*s", w, path);
        case ELOOP:
                return init_send_error(c, "invalid_argument",
                                       "symlink not followed here, or a symlink loop: %.*s", w,
                                       path);
        case EXDEV:
                return init_send_error(c, "invalid_argument", "cannot move across mounts: %.*s", w,
                                       path);
        case EEXIST:
                return init_send_error(c, "conflict", "already exists: %.*s", w, path);
        case ENOTEMPTY:
                return init_send_error(c, "conflict", "directory not empty: %.*s", w, path);
        default:
                return init_send_error(c, "internal", "%.*s: %s", w, path, strerror(e));
        }
}

void init_hangup(int fd)
{
        int dom = 0;
        socklen_t l = sizeof(dom);
        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) == 0 && dom != AF_UNIX &&
            shutdown(fd, SHUT_WR) == 0) {
                uint64_t until = ab_now_ms() + 2000;
                char buf[16384];
                for (;;) {
                        uint64_t now = ab_now_ms();
                        struct pollfd p = {.fd = fd, .events = POLLIN};
                        if (now >= until || poll(&p, 1, (int)(until - now)) <= 0)
                                break;
                        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
                                break;
                }
        }
        close(fd);
}

/* ---- the balloon (RESERVE) ---- */

/* An unlinked file on the workdir's filesystem, opened by PID 1 before it
 * forks anything, so that every session resizes the same file and PID 1
 * keeps it for the box's lifetime (a box's processes cannot reach the fds
 * of a non-dumpable init; commands never inherit it: CLOEXEC). -1 where the
 * filesystem has no O_TMPFILE. */
static int balloon_fd = -1;

static void init_reserve(init_conn *c, const abp_frame *f)
{
        uint64_t want = UINT64_MAX;
        size_t off = 0;
        abp_field fl;
        int r;
        while ((r = abp_field_next(f, &off, &fl)) == 1)
                if (fl.tag == ABP_F_SIZE && fl.len == 8)
                        memcpy(&want, fl.val, 8), want = le64toh(want);
        if (r < 0) {
                init_send_error(c, "invalid_argument", "malformed RESERVE");
                return;
        }
        if (balloon_fd < 0) {
                init_send_error(c, "unsupported", "no balloon on this filesystem");
                return;
        }
        struct stat st;
        if (want != UINT64_MAX && fstat(balloon_fd, &st) == 0) {
                if (want > (uint64_t)st.st_size) {
                        /* ENOSPC leaves what was allocated: the answer says how much */
                        if (fallocate(balloon_fd, 0, 0, (off_t)want) < 0 && errno != ENOSPC) {
                                init_send_errno(c, errno, "(balloon)");
                                return;
                        }
                } else if (ftruncate(balloon_fd, (off_t)want) < 0) {
                        init_send_errno(c, errno, "(balloon)");
                        return;
                }
        }
        struct statfs sf;
        if (fstat(balloon_fd, &st) < 0 || fstatfs(balloon_fd, &sf) < 0) {
                init_send_errno(c, errno, "(balloon)");
                return;
        }
        uint64_t held = (uint64_t)st.st_blocks * 512u;
        abp_buf b = {0};
        abp_frame_begin(&b, ABP_OK);
        abp_put_u64(&b, ABP_F_SIZE, held);
        abp_put_u64(&b, ABP_F_FREE, (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize + held);
        if (abp_frame_end(&b) == 0)
                (void)!init_send(c, &b);
        abp_buf_free(&b);
}

/* ---- TCP: the listener and its unauthenticated sessions ---- */

#define TCP_PENDING_MAX 16

static int tcp_lfd = -1;
static uint8_t tcp_secret[ABH_SECRET_LEN];
/* sessions still in their handshake */
static pid_t tcp_pending[TCP_PENDING_MAX];
static int tcp_n_pending;

static void tcp_pending_drop(pid_t pid)
{
        for (int i = 0; i < tcp_n_pending; i++)
                if (tcp_pending[i] == pid) {
                        tcp_pending[i] = tcp_pending[--tcp_n_pending];
                        return;
                }
}

/* A listening TCP socket on addr ("IP:PORT"), non-blocking. fd or -errno. */
static int listen_tcp(const char *addr)
{
        struct sockaddr_storage ss;
        unsigned len;
        if (abh_parse_addr(addr, &ss, &len) < 0)
                return -EINVAL;
        _cleanup_close_ int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (s < 0)
                return -errno;
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(s, (struct sockaddr *)&ss, len) < 0)
                return -errno;
        if (listen(s, 128) < 0)
                return -errno;
        return steal_fd(&s);
}

/* ---- the session: one connection, one request ---- */

/* What a session is before it has a connection (init's child, after fork). */
/* The box's sudo socket (init/sudo.c) when init is the box's PID 1, else -1. */
static int sudo_lfd = -1;

static void session_prepare(int sfd, const sigset_t *oldmask)
{
        close(sfd);
        if (sudo_lfd >= 0)
                close(sudo_lfd);
        sudo_lfd = -1;
        if (tcp_lfd >= 0)
                close(tcp_lfd);
        if (init_term_keeper_end >= 0)
                close(init_term_keeper_end);
        init_term_keeper_end = -1;
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        sigprocmask(SIG_SETMASK, oldmask, NULL);
        prctl(PR_SET_NAME, "ab-session");
        /* Everything the request spawns stays our descendant, so a timeout or a
         * disconnect can kill all of it. */
        prctl(PR_SET_CHILD_SUBREAPER, 1);
        /* init itself runs at -1000; user processes must be killable by the OOM killer. */
        int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (oom >= 0) {
                (void)!write(oom, "0", 1);
                close(oom);
        }
}

/* Serves one request on c; true when the connection may carry another
 * (an exec that left nothing behind, see init_exec). */
static bool serve_one(init_conn *c, const abp_frame *f, init_conf *conf)
{
        switch (f->type) {
        case ABP_PING: {
                abp_buf b = {0};
                abp_ok ok = {.version = AGENTBOX_VERSION, .proto = ABP_PROTO_VERSION};
                if (abp_enc_ok(&b, &ok) == 0)
                        (void)!init_send(c, &b);
                abp_buf_free(&b);
                break;
        }
        case ABP_EXEC:
                return init_exec(c, f, conf);
        case ABP_TERM_OPEN:
        case ABP_TERM_LIST:
        case ABP_TERM_CLOSE:
        case ABP_TERM_RESIZE:
        case ABP_TERM_SIGNAL:
        case ABP_TERM_ATTACH:
        case ABP_TERM_INPUT:
                init_term_forward(c, f);
                break;
        case ABP_READ:
        case ABP_WRITE:
        case ABP_LIST:
        case ABP_STAT:
        case ABP_DELETE:
        case ABP_MKDIR:
        case ABP_RENAME:
        case ABP_CHMOD:
        case ABP_CHOWN:
        case ABP_SYMLINK:
                init_fileop(c, f, conf);
                break;
        case ABP_RESERVE:
                init_reserve(c, f);
                break;
        case ABP_GREP:
                init_grep(c, f, conf);
                break;
        case ABP_WATCH:
                init_watch(c, f, conf);
                break;
        case ABP_STATS:
                init_stats(c, f);
                break;
        case ABP_PORT:
                init_port(c, f);
                break;
        default:
                init_send_error(c, "invalid_argument", "unknown request type %u", f->type);
                break;
        }
        return false;
}

/* A connection serves one request, or more while each is an exec that left
 * nothing behind (EXIT's AGAIN): the client then keeps it for its next
 * request instead of connecting again, which saves a connect and a session
 * fork. Between requests the session waits SESSION_IDLE_MS at most, in the
 * directory it started in. */
static void session(int fd, const char *workdir)
{
        init_conn c = {.fd = fd};
        init_conf conf = {.workdir = workdir, .workdir_fd = -1};
        abp_frame f;
        bool again = false;

        ab_wipe(tcp_secret, sizeof(tcp_secret)); /* nothing a request runs needs it */

        conf.workdir_fd = open(workdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        _cleanup_close_ int home = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);

        int r;
        do {
                r = abp_recv(fd, &c.rd, &f, again ? SESSION_IDLE_MS : INIT_IO_TIMEOUT_MS);
                if (r == -EBADMSG)
                        init_send_error(&c, "invalid_argument", "malformed frame");
                if (r < 0)
                        break;
                again = serve_one(&c, &f, &conf);
                if (again && home >= 0 && fchdir(home) < 0)
                        again = false;
        } while (again);
        abp_reader_free(&c.rd);
        /* an exec may have hung up already; a terminal request handed the
         * connection to the keeper, which must keep it whole: only close
         * this copy */
        bool handed = r == 0 && f.type >= ABP_TERM_OPEN && f.type <= ABP_TERM_INPUT;
        if (c.fd >= 0 && handed)
                close(c.fd);
        else if (c.fd >= 0)
                init_hangup(c.fd);
        if (conf.workdir_fd >= 0)
                close(conf.workdir_fd);
}

/* ---- PID 1 ---- */

/* Captures the login environment in a child while init waits for its first
 * request, so a box's first exec does not pay for it (exec.c). */
static void start_prewarm(int lfd, int sfd, const sigset_t *oldmask, const char *workdir)
{
        pid_t pid = fork();
        if (pid != 0) {
                if (pid < 0)
                        logmsg("fork (prewarm): %s", strerror(errno));
                return;
        }
        close(lfd);
        close(sfd);
        if (tcp_lfd >= 0)
                close(tcp_lfd);
        ab_wipe(tcp_secret, sizeof(tcp_secret));
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        sigprocmask(SIG_SETMASK, oldmask, NULL);
        prctl(PR_SET_NAME, "ab-prewarm");
        prctl(PR_SET_CHILD_SUBREAPER, 1);
        int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (oom >= 0) {
                (void)!write(oom, "0", 1);
                close(oom);
        }
        init_conf conf = {.workdir = workdir,
                          .workdir_fd = open(workdir, O_PATH | O_DIRECTORY | O_CLOEXEC)};
        init_exec_prewarm(&conf);
        _exit(0);
}

/* The spare session: forked ahead, it takes the next connection itself and
 * reports its pid on `taken` so that init forks the next spare. */
static pid_t spare_pid = -1;

static void start_spare(int lfd, int sfd, const int taken[2], const sigset_t *oldmask,
                        const char *workdir)
{
        pid_t pid = fork();
        if (pid != 0) {
                if (pid < 0)
                        logmsg("fork (spare session): %s", strerror(errno));
                spare_pid = pid < 0 ? -1 : pid;
                return;
        }
        close(taken[0]);
        session_prepare(sfd, oldmask);
        int cfd;
        for (;;) {
                struct pollfd p = {.fd = lfd, .events = POLLIN};
                if (poll(&p, 1, -1) < 0 && errno != EINTR)
                        _exit(1);
                cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                if (cfd >= 0)
                        break;
                if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                        usleep(50000); /* out of fds or memory: do not spin */
        }
        pid_t me = getpid();
        (void)!write(taken[1], &me, sizeof(me));
        close(lfd);
        session(cfd, workdir);
        _exit(0);
}

static void usage(FILE *f)
{
        fprintf(
            f,
            "usage: agentbox-init [--fd N | --listen PATH] [--listen-tcp IP:PORT --secret-file F]\n"
            "                     [--workdir DIR] [--max-procs N] [--prewarm]\n"
            "       agentbox-init --install PATH   (copies itself to PATH, 0755)\n"
            "       agentbox-init --image-probe PATH   (writes the user and working directory\n"
            "                     it was started with, as JSON: an image's, on Kubernetes)\n"
            "       agentbox-init --version\n"
            "--listen-tcp and --secret-file default to $AGENTBOX_INIT_LISTEN and\n"
            "$AGENTBOX_INIT_SECRET_FILE; TCP connections must pass the handshake of\n"
            "docs/protocol.md with the secret in F (32 bytes, or 64 hex digits).\n"
            "As a box's PID 1 it also serves the box's sudo on the abstract socket\n"
            "@agentbox-sudo; run under the name `sudo` (a copy named so) it is that\n"
            "sudo (`sudo --help`).\n");
}

/* Binds a unix socket at path, even when path is longer than sun_path. */
static int listen_at(const char *path)
{
        _cleanup_close_ int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        _cleanup_close_ int dfd = -1;
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct stat st;

        if (s < 0)
                return -errno;
        /* A stale socket from an earlier run; never remove anything else. */
        if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
                unlink(path);
        if (strlen(path) < sizeof(sa.sun_path)) {
                strcpy(sa.sun_path, path);
        } else {
                const char *slash = strrchr(path, '/');
                _cleanup_free_ char *dir = slash ? xstrndup(path, (size_t)(slash - path)) : NULL;
                const char *base = slash ? slash + 1 : path;
                dfd = open(dir ? (dir[0] ? dir : "/") : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (dfd < 0)
                        return -errno;
                int n =
                    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd, base);
                if (n < 0 || (size_t)n >= sizeof(sa.sun_path))
                        return -ENAMETOOLONG;
        }
        if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return -errno;
        if (listen(s, 128) < 0)
                return -errno;
        return steal_fd(&s);
}

/* The terminal keeper (term.c), started when a session first hands it a
 * connection; started again on the next one if it died. */
static pid_t keeper_pid = -1;

static void start_keeper(int lfd, int sfd, const int taken[2], const char *workdir)
{
        pid_t pid = fork();
        if (pid != 0) {
                if (pid < 0)
                        logmsg("fork (terminal keeper): %s", strerror(errno));
                keeper_pid = pid < 0 ? -1 : pid;
                return;
        }
        close(lfd);
        close(sfd);
        if (tcp_lfd >= 0)
                close(tcp_lfd);
        ab_wipe(tcp_secret, sizeof(tcp_secret));
        close(taken[0]);
        close(taken[1]);
        close(init_term_sock);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        init_term_keeper(init_term_keeper_end, workdir);
}

static void reap_all(void)
{
        pid_t p;
        while ((p = waitpid(-1, NULL, WNOHANG)) > 0) {
                if (p == spare_pid)
                        spare_pid = -1; /* died before it took a connection */
                if (p == keeper_pid)
                        keeper_pid = -1;
                tcp_pending_drop(p);
        }
}

static void on_signal(int sig)
{
        (void)sig;
}

static void shutdown_all(void)
{
        /* As PID 1 of a pid namespace, kill(-1) reaches every process of the box,
         * including ones that entered it from outside (not our descendants). */
        if (getpid() == 1)
                kill(-1, SIGKILL);
        init_kill_tree(0, NULL, NULL);
}

/* accept4 on a listening socket of init's: the connection, or -1 (a busy
 * loop is slowed down when init is out of fds or memory). */
static int accept_one(int fd)
{
        int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
        if (cfd < 0 && errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                usleep(50000);
        return cfd;
}

/* fork for a session of init's: in the child (0), what only init keeps is
 * closed and the session prepared. */
static pid_t fork_session(int lfd, int sfd, const int taken[2], const sigset_t *oldmask)
{
        pid_t pid = fork();
        if (pid == 0) {
                if (lfd >= 0)
                        close(lfd);
                close(taken[0]);
                session_prepare(sfd, oldmask);
        }
        return pid;
}

/* Takes one TCP connection: a session that authenticates it first, or, with
 * TCP_PENDING_MAX sessions in their handshake already, a close. */
static void accept_tcp(int lfd, int sfd, const int taken[2], const sigset_t *oldmask,
                       const char *workdir)
{
        int cfd = accept_one(tcp_lfd);
        if (cfd < 0)
                return;
        if (tcp_n_pending >= TCP_PENDING_MAX) {
                close(cfd);
                return;
        }
        uint64_t deadline = ab_now_ms() + ABH_DEADLINE_MS;
        pid_t pid = fork_session(lfd, sfd, taken, oldmask);
        if (pid == 0) {
                if (abh_serve(cfd, tcp_secret, deadline) < 0)
                        _exit(0);
                pid_t me = -getpid();
                (void)!write(taken[1], &me, sizeof(me));
                session(cfd, workdir);
                _exit(0);
        }
        if (pid < 0)
                logmsg("fork: %s", strerror(errno));
        else
                tcp_pending[tcp_n_pending++] = pid;
        close(cfd);
}

/* Serves a connection to the sudo socket in a child of its own. */
static void accept_sudo(int lfd, int sfd, const int taken[2], const sigset_t *oldmask,
                        const char *workdir)
{
        int cfd = accept_one(sudo_lfd);
        if (cfd < 0)
                return;
        pid_t pid = fork_session(lfd, sfd, taken, oldmask);
        if (pid == 0) {
                init_sudo_serve(cfd, workdir);
                _exit(0);
        }
        if (pid < 0)
                logmsg("fork: %s", strerror(errno));
        close(cfd);
}

/* --install PATH: copies this binary to PATH (0755, through a temporary
 * name and a rename), for an init container that carries init into a pod's
 * shared emptyDir: the carrier image needs no shell or cp. */
static int install_self(const char *path)
{
        _cleanup_close_ int in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        _cleanup_free_ char *tmp = xasprintf("%s.tmp", path);
        _cleanup_close_ int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
        if (in < 0 || out < 0) {
                logmsg("--install %s: %s", path, strerror(errno));
                return 1;
        }
        char buf[65536];
        for (;;) {
                ssize_t n = read(in, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 || (n > 0 && ab_write_all(out, buf, (size_t)n) < 0)) {
                        logmsg("--install %s: %s", path, strerror(errno));
                        unlink(tmp);
                        return 1;
                }
                if (n == 0)
                        break;
        }
        if (fchmod(out, 0755) < 0 || fsync(out) < 0 || rename(tmp, path) < 0) {
                logmsg("--install %s: %s", path, strerror(errno));
                unlink(tmp);
                return 1;
        }
        return 0;
}

unsigned long init_max_procs;

int main(int argc, char **argv)
{
        const char *workdir = "/workspace", *listen_path = NULL;
        const char *tcp_addr = NULL, *secret_file = NULL;
        int lfd = -1;
        bool prewarm = false;

        const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
        if (!strcmp(name, "sudo")) {
                /* A short-lived client: it ends with _exit, so nothing runs
                 * at exit (a sanitized build's leak check, which cannot stop
                 * the world in a box, would fail the command's status). */
                int rc = init_sudo_main(argc, argv);
                fflush(NULL);
                _exit(rc);
        }

        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                if (strcmp(a, "--version") == 0) {
                        printf("agentbox-init %s (protocol %d)\n", AGENTBOX_VERSION,
                               ABP_PROTO_VERSION);
                        return 0;
                } else if (strcmp(a, "--help") == 0) {
                        usage(stdout);
                        return 0;
                } else if (i + 1 < argc && strcmp(a, "--fd") == 0) {
                        char *end;
                        errno = 0;
                        long v = strtol(argv[++i], &end, 10);
                        if (errno || *end || v < 0 || v > 1 << 20) {
                                logmsg("bad --fd: %s", argv[i]);
                                return 2;
                        }
                        lfd = (int)v;
                } else if (i + 1 < argc && strcmp(a, "--listen") == 0) {
                        listen_path = argv[++i];
                } else if (i + 1 < argc && strcmp(a, "--install") == 0) {
                        return install_self(argv[i + 1]);
                } else if (i + 1 < argc && strcmp(a, "--image-probe") == 0) {
                        return init_image_probe(argv[i + 1]);
                } else if (i + 1 < argc && strcmp(a, "--listen-tcp") == 0) {
                        tcp_addr = argv[++i];
                } else if (i + 1 < argc && strcmp(a, "--secret-file") == 0) {
                        secret_file = argv[++i];
                } else if (i + 1 < argc && strcmp(a, "--workdir") == 0) {
                        workdir = argv[++i];
                } else if (strcmp(a, "--prewarm") == 0) {
                        prewarm = true;
                } else if (i + 1 < argc && strcmp(a, "--max-procs") == 0) {
                        char *end;
                        errno = 0;
                        unsigned long v = strtoul(argv[++i], &end, 10);
                        if (errno || *end || v == 0) {
                                logmsg("bad --max-procs: %s", argv[i]);
                                return 2;
                        }
                        init_max_procs = v;
                } else {
                        usage(stderr);
                        return 2;
                }
        }
        if (!tcp_addr && getenv("AGENTBOX_INIT_LISTEN") && getenv("AGENTBOX_INIT_LISTEN")[0])
                tcp_addr = xstrdup(getenv("AGENTBOX_INIT_LISTEN"));
        if (!secret_file && getenv("AGENTBOX_INIT_SECRET_FILE") &&
            getenv("AGENTBOX_INIT_SECRET_FILE")[0])
                secret_file = xstrdup(getenv("AGENTBOX_INIT_SECRET_FILE"));
        /* the box's commands inherit init's environment: these are init's own */
        unsetenv("AGENTBOX_INIT_LISTEN");
        unsetenv("AGENTBOX_INIT_SECRET_FILE");
        if ((lfd >= 0 && listen_path) || (lfd < 0 && !listen_path && !tcp_addr)) {
                usage(stderr);
                return 2;
        }
        if (tcp_addr) {
                if (!secret_file) {
                        logmsg("--listen-tcp needs --secret-file: TCP is never served without "
                               "the handshake");
                        return 2;
                }
                int r = abh_secret_load(secret_file, tcp_secret);
                if (r < 0) {
                        logmsg("secret file %s: %s", secret_file,
                               r == -EINVAL ? "not 32 bytes or 64 hex digits" : strerror(-r));
                        return 1;
                }
        }

        /* Keep the socket off 0-2 and make sure 0-2 are open, so that pipes and
         * connections never land on a standard fd. */
        if (lfd >= 0 && lfd < 3) {
                int nfd = fcntl(lfd, F_DUPFD_CLOEXEC, 3);
                if (nfd < 0) {
                        logmsg("--fd %d: %s", lfd, strerror(errno));
                        return 1;
                }
                close(lfd);
                lfd = nfd;
        }
        for (;;) {
                int fd = open("/dev/null", O_RDWR);
                if (fd < 0 || fd >= 3) {
                        if (fd >= 0)
                                close(fd);
                        break;
                }
        }

        /* The workdir is also HOME and the base of relative paths: make it absolute. */
        _cleanup_free_ char *abs_workdir = NULL;
        if (workdir[0] != '/') {
                char cwd[4096];
                if (!getcwd(cwd, sizeof(cwd))) {
                        logmsg("getcwd: %s", strerror(errno));
                        return 1;
                }
                abs_workdir = xasprintf("%s/%s", cwd, workdir);
                workdir = abs_workdir;
        }

        umask(022);
        prctl(PR_SET_DUMPABLE, 0);
        if (getpid() != 1)
                prctl(PR_SET_CHILD_SUBREAPER, 1);

        if (tcp_addr) {
                tcp_lfd = listen_tcp(tcp_addr);
                if (tcp_lfd == -EINVAL) {
                        logmsg("bad --listen-tcp %s: want IP:PORT or [IPv6]:PORT", tcp_addr);
                        return 2;
                }
                if (tcp_lfd < 0) {
                        logmsg("cannot listen on %s: %s", tcp_addr, strerror(-tcp_lfd));
                        return 1;
                }
        }
        if (listen_path) {
                lfd = listen_at(listen_path);
                if (lfd < 0) {
                        logmsg("cannot listen on %s: %s", listen_path, strerror(-lfd));
                        return 1;
                }
        } else if (lfd >= 0) {
                int acc = 0;
                socklen_t sl = sizeof(acc);
                if (getsockopt(lfd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &sl) < 0 || !acc) {
                        logmsg("--fd %d is not a listening socket", lfd);
                        return 1;
                }
                fcntl(lfd, F_SETFD, FD_CLOEXEC);
        }
        int fl = lfd >= 0 ? fcntl(lfd, F_GETFL) : -1;
        if (fl >= 0)
                fcntl(lfd, F_SETFL, fl | O_NONBLOCK);

        /* Signals arrive through a signalfd; the handlers only make sure that
         * PID 1 does not ignore them. */
        struct sigaction sa = {.sa_handler = on_signal};
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        sigset_t mask, oldmask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigprocmask(SIG_BLOCK, &mask, &oldmask);
        int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0) {
                logmsg("signalfd: %s", strerror(errno));
                return 1;
        }

        balloon_fd = open(workdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (prewarm)
                start_prewarm(lfd, sfd, &oldmask, workdir);
        int taken[2];
        if (pipe2(taken, O_CLOEXEC | O_NONBLOCK) < 0) {
                logmsg("pipe: %s", strerror(errno));
                return 1;
        }
        init_notify_fd = taken[1];
        /* Connections for the terminal keeper wait here until it reads them. */
        int ks[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ks) == 0) {
                init_term_keeper_end = ks[0];
                init_term_sock = ks[1];
        } else {
                logmsg("socketpair (terminals): %s", strerror(errno));
        }

        /* sudo is served by the box's PID 1 only: an init run by hand (tests,
         * a pod's sidecar) never offers root to the host's processes. */
        if (getpid() == 1) {
                sudo_lfd = init_sudo_listen();
                if (sudo_lfd < 0)
                        logmsg("sudo socket: %s (sudo will not work in this box)",
                               strerror(-sudo_lfd));
        }

        for (;;) {
                if (spare_pid < 0 && lfd >= 0)
                        start_spare(lfd, sfd, taken, &oldmask, workdir);
                /* With a spare, connections are its to take. */
                struct pollfd p[5] = {{.fd = spare_pid > 0 ? -1 : lfd, .events = POLLIN},
                                      {.fd = sfd, .events = POLLIN},
                                      {.fd = taken[0], .events = POLLIN},
                                      {.fd = tcp_lfd, .events = POLLIN},
                                      {.fd = sudo_lfd, .events = POLLIN}};
                if (poll(p, 5, -1) < 0) {
                        if (errno != EINTR)
                                usleep(10000);
                        continue;
                }
                if (p[1].revents) {
                        struct signalfd_siginfo si;
                        bool stop = false;
                        while (read(sfd, &si, sizeof(si)) == sizeof(si))
                                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
                                        stop = true;
                        reap_all();
                        if (stop)
                                break;
                }
                if (p[2].revents) {
                        pid_t who;
                        bool want_keeper = false;
                        while (read(taken[0], &who, sizeof(who)) == sizeof(who)) {
                                if (who == 0)
                                        want_keeper = true; /* a terminal request waits */
                                else if (who < 0)
                                        tcp_pending_drop(-who); /* authenticated */
                                else if (who == spare_pid)
                                        spare_pid = -1; /* it serves a connection now */
                        }
                        if (want_keeper && keeper_pid < 0 && init_term_keeper_end >= 0)
                                start_keeper(lfd, sfd, taken, workdir);
                }
                if (p[3].revents)
                        accept_tcp(lfd, sfd, taken, &oldmask, workdir);
                if (p[4].revents)
                        accept_sudo(lfd, sfd, taken, &oldmask, workdir);
                if (!p[0].revents)
                        continue;
                int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                if (cfd < 0) {
                        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                                usleep(50000); /* out of fds or memory: do not spin */
                        continue;
                }
                pid_t pid = fork();
                if (pid == 0) {
                        close(lfd);
                        close(taken[0]);
                        session_prepare(sfd, &oldmask);
                        session(cfd, workdir);
                        _exit(0);
                }
                if (pid < 0)
                        logmsg("fork: %s", strerror(errno));
                close(cfd);
        }

        if (lfd >= 0)
                close(lfd);
        shutdown_all();
        if (listen_path)
                unlink(listen_path);
        return 0;
}
