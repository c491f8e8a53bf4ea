/* sudo.c - init's side of the box's sudo (proto/sudo.h, docs/security.md).
 *
 * Boxes run with no_new_privs, so a set-uid sudo cannot raise anyone. The
 * box's init, root of the box's user namespace, runs the command instead,
 * for a caller it recognises by the kernel's word (SO_PEERCRED): root, and
 * the box's account `user` (E2B's default user, who may sudo without a
 * password as in E2B's sandboxes). The socket is abstract, so it exists only
 * in the box's network namespace: other boxes and the host's users cannot
 * reach it. The caller's stdin, stdout and stderr arrive as fds and become
 * the command's; init itself never reads, writes or resolves through them,
 * and only pipes, sockets, character devices and regular files are taken
 * (a directory or an O_PATH fd could name a place to start paths from).
 *
 * The command is a child of the serving process (a subreaper, as every
 * session): when the client hangs up (it was killed, its exec ended), the
 * command and everything it started are killed with it. */
#include "init/init_int.h"
#include "proto/sudo.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>

#define SUDO_REQ_TIMEOUT_MS 10000 /* for the request after connect */
#define SUDO_PATH           "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define SUDO_ACCOUNT        "user" /* besides root, who may sudo */

extern char **environ;

int init_sudo_listen(void)
{
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        memcpy(a.sun_path + 1, ABS_SOCKET_NAME, strlen(ABS_SOCKET_NAME));
        socklen_t len =
            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(ABS_SOCKET_NAME));
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (bind(fd, (struct sockaddr *)&a, len) < 0 || listen(fd, 64) < 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        return fd;
}

/* Sends one message "<kind><text>\0". */
static void say(int fd, char kind, const char *fmt, ...) AB_PRINTF(3, 4);
static void say(int fd, char kind, const char *fmt, ...)
{
        char msg[ABS_MSG_MAX];
        msg[0] = kind;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(msg + 1, sizeof(msg) - 1, fmt, ap);
        va_end(ap);
        size_t len = n < 0 ? 1 : (size_t)n + 1 >= sizeof(msg) - 1 ? sizeof(msg) - 1 : (size_t)n + 1;
        msg[len] = 0;
        (void)!send(fd, msg, len + 1, MSG_NOSIGNAL);
}

/* An fd a command may take as stdin, stdout or stderr: not a directory, a
 * block device or an O_PATH handle. */
static bool fd_ok(int fd)
{
        struct stat st;
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || (fl & O_PATH) || fstat(fd, &st) < 0)
                return false;
        return S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISCHR(st.st_mode) ||
               S_ISREG(st.st_mode);
}

/* Reads the REQUEST and its three fds. The message, or NULL after telling
 * the client why. */
static char *recv_req(int cfd, int fds[3], size_t *len)
{
        struct pollfd p = {.fd = cfd, .events = POLLIN};
        if (poll(&p, 1, SUDO_REQ_TIMEOUT_MS) <= 0)
                return NULL;
        char *buf = xmalloc(ABS_REQ_MAX + 1);
        union {
                char b[CMSG_SPACE(sizeof(int) * 8)];
                struct cmsghdr align;
        } cm;
        struct iovec iov = {.iov_base = buf, .iov_len = ABS_REQ_MAX + 1};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof(cm.b)};
        ssize_t n;
        do
                n = recvmsg(cfd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        size_t nfd = 0;
        int got[8];
        for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        if (nfd < AB_ARRAY_LEN(got))
                                got[nfd++] = fd;
                        else
                                close(fd);
                }
        }
        const char *why = NULL;
        if (n < 0)
                why = "cannot read the request";
        else if ((size_t)n > ABS_REQ_MAX || (mh.msg_flags & MSG_TRUNC))
                why = "request too large";
        else if (mh.msg_flags & MSG_CTRUNC)
                why = "too many fds with the request";
        else if (nfd != 3)
                why = "a request carries exactly 3 fds (stdin, stdout, stderr)";
        for (size_t i = 0; !why && i < 3; i++)
                if (!fd_ok(got[i]))
                        why = "stdin, stdout and stderr must be pipes, sockets, terminals or "
                              "regular files";
        if (why) {
                for (size_t i = 0; i < nfd; i++)
                        close(got[i]);
                free(buf);
                say(cfd, 'm', "%s", why);
                return NULL;
        }
        memcpy(fds, got, 3 * sizeof(int));
        *len = (size_t)n;
        return buf;
}

/* True when uid may sudo: root, or the box's account `user`. */
static bool may_sudo(const init_conf *conf, uid_t uid)
{
        if (uid == 0)
                return true;
        init_user u;
        char *why = NULL;
        bool ok = init_user_resolve(conf, SUDO_ACCOUNT, &u, &why) == 0 && u.uid == uid;
        free(why);
        init_user_free(&u);
        return ok;
}

/* ---- the command's environment ---- */

typedef struct envv {
        char **v;
        size_t n;
} envv;

static void env_set(envv *e, const char *name, const char *val)
{
        size_t nl = strlen(name);
        char *entry = xasprintf("%s=%s", name, val);
        for (size_t i = 0; i < e->n; i++)
                if (!strncmp(e->v[i], name, nl) && e->v[i][nl] == '=') {
                        free(e->v[i]);
                        e->v[i] = entry;
                        return;
                }
        e->v = xrealloc(e->v, xmul(e->n + 2, sizeof(*e->v)));
        e->v[e->n++] = entry;
        e->v[e->n] = NULL;
}

/* Kept from the caller's environment when sudo resets it (sudo's own
 * env_keep list, as Debian's sudo has it). */
static bool kept(const char *entry)
{
        static const char *const keep[] = {"TERM",       "LANG",      "LANGUAGE",
                                           "TZ",         "COLORS",    "DISPLAY",
                                           "XAUTHORITY", "LS_COLORS", "COLORTERM"};
        size_t nl = strcspn(entry, "=");
        if (!strncmp(entry, "LC_", 3))
                return true;
        for (size_t i = 0; i < AB_ARRAY_LEN(keep); i++)
                if (strlen(keep[i]) == nl && !strncmp(entry, keep[i], nl))
                        return true;
        return false;
}

/* The caller's value of name in q, or NULL. */
static const char *req_env(const abs_req *q, const char *name)
{
        size_t nl = strlen(name);
        for (size_t i = 0; i < q->envc; i++)
                if (!strncmp(q->env[i], name, nl) && q->env[i][nl] == '=')
                        return q->env[i] + nl + 1;
        return NULL;
}

static void build_env(envv *e, const abs_req *q, const init_user *t, uid_t cuid, gid_t cgid,
                      const char *caller, const char *shell, const char *command)
{
        bool keep_all = (q->flags & ABS_F_PRESERVE_ENV) && !(q->flags & ABS_F_LOGIN);
        for (size_t i = 0; i < q->envc; i++)
                if (keep_all || kept(q->env[i])) {
                        size_t nl = strcspn(q->env[i], "=");
                        _cleanup_free_ char *name = xstrndup(q->env[i], nl);
                        env_set(e, name, q->env[i] + nl + 1);
                }
        char num[16];
        if (!keep_all || !req_env(q, "PATH"))
                env_set(e, "PATH", SUDO_PATH);
        if (!keep_all || !req_env(q, "HOME"))
                env_set(e, "HOME", t->home ? t->home : "/");
        snprintf(num, sizeof(num), "%u", (unsigned)t->uid);
        const char *tname = t->name ? t->name : num;
        env_set(e, "USER", tname);
        env_set(e, "LOGNAME", tname);
        env_set(e, "SHELL", shell);
        if (!keep_all) {
                _cleanup_free_ char *mail = xasprintf("/var/mail/%s", tname);
                env_set(e, "MAIL", mail);
        }
        snprintf(num, sizeof(num), "%u", (unsigned)cuid);
        env_set(e, "SUDO_UID", num);
        snprintf(num, sizeof(num), "%u", (unsigned)cgid);
        env_set(e, "SUDO_GID", num);
        env_set(e, "SUDO_USER", caller);
        env_set(e, "SUDO_COMMAND", command);
}

/* ---- the command ---- */

/* args joined for `shell -c`, each character but letters, digits, '_',
 * '-' and '$' escaped with a backslash, as sudo does for -i and -s. */
static char *shell_words(const abs_req *q)
{
        _cleanup_buf_ ab_buf b = {0};
        for (size_t i = 0; i < q->argc; i++) {
                if (i)
                        ab_buf_putc(&b, ' ');
                for (const char *c = q->argv[i]; *c; c++) {
                        bool plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                                     (*c >= '0' && *c <= '9') || *c == '_' || *c == '-' ||
                                     *c == '$';
                        if (!plain)
                                ab_buf_putc(&b, '\\');
                        ab_buf_putc(&b, *c);
                }
        }
        ab_buf_putc(&b, 0);
        return ab_buf_steal(&b);
}

/* The command's argv (a strv) and what SUDO_COMMAND says. */
static char **build_argv(const abs_req *q, const char *shell, char **command)
{
        bool login = q->flags & ABS_F_LOGIN;
        if (!(q->flags & (ABS_F_LOGIN | ABS_F_SHELL))) {
                char **v = xcalloc(q->argc + 1, sizeof(char *));
                _cleanup_buf_ ab_buf b = {0};
                for (size_t i = 0; i < q->argc; i++) {
                        v[i] = xstrdup(q->argv[i]);
                        ab_buf_printf(&b, "%s%s", i ? " " : "", q->argv[i]);
                }
                ab_buf_putc(&b, 0);
                *command = ab_buf_steal(&b);
                return v;
        }
        char **v = xcalloc(4, sizeof(char *));
        const char *base = strrchr(shell, '/') ? strrchr(shell, '/') + 1 : shell;
        v[0] = login ? xasprintf("-%s", base) : xstrdup(shell);
        if (q->argc) {
                v[1] = xstrdup("-c");
                v[2] = shell_words(q);
                *command = xasprintf("%s -c %s", shell, v[2]);
        } else {
                *command = xstrdup(shell);
        }
        return v;
}

/* In the child: becomes the command, or says why not on its stderr. */
__attribute__((noreturn)) static void run_child(const int fds[3], const init_user *t,
                                                const char *cwd, const char *path, char **argv,
                                                char **env)
{
        for (int i = 0; i < 3; i++)
                if (dup2(fds[i], i) < 0)
                        _exit(1);
        init_child_common();
        if (isatty(0))
                (void)!ioctl(0, TIOCSCTTY, 0); /* a terminal that is no one's yet */
        int r = init_user_apply(t);
        if (r < 0) {
                dprintf(2, "sudo: cannot become %s: %s\n", t->name ? t->name : "the user",
                        strerror(-r));
                _exit(1);
        }
        if (chdir(cwd) < 0 && (!t->home || chdir(t->home) < 0))
                (void)!chdir("/");
        if (close_range(3, ~0U, 0) < 0)
                for (int fd = 3; fd < 1024; fd++)
                        close(fd);
        environ = env;
        execvp(path, argv);
        if (errno == ENOENT)
                dprintf(2, "sudo: %s: command not found\n", path);
        else
                dprintf(2, "sudo: unable to execute %s: %s\n", path, strerror(errno));
        _exit(1);
}

/* A terminal for the command (flag T, when the caller's stdin is one):
 * its master and slave, the slave set as the caller's terminal is (modes,
 * size). Both stay -1 when none can be made: the command then gets the
 * caller's terminal as its stdin, stdout and stderr, not as its
 * controlling one. */
static void open_terminal(int caller, int *master, int *slave)
{
        *master = *slave = -1;
        if (!isatty(caller))
                return;
        int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        int s =
            m >= 0 && unlockpt(m) == 0 ? ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC) : -1;
        if (s < 0) {
                if (m >= 0)
                        close(m);
                return;
        }
        struct termios tio;
        struct winsize ws;
        if (tcgetattr(caller, &tio) == 0)
                tcsetattr(s, TCSANOW, &tio);
        if (ioctl(caller, TIOCGWINSZ, &ws) == 0)
                ioctl(s, TIOCSWINSZ, &ws);
        *master = m;
        *slave = s;
}

/* Forwards the client's signals until the command ends or the client goes;
 * then answers its status (or kills it all). */
static void supervise(int cfd, pid_t pid)
{
        int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
        for (;;) {
                struct pollfd p[2] = {{.fd = cfd, .events = POLLIN}, {.fd = pfd, .events = POLLIN}};
                int st;
                pid_t w = pfd < 0 ? waitpid(pid, &st, WNOHANG) : 0;
                if (w == 0 && poll(p, 2, pfd < 0 ? 100 : -1) < 0 && errno != EINTR)
                        break;
                if (w == 0 && (pfd < 0 || p[1].revents))
                        w = waitpid(pid, &st, WNOHANG);
                if (w == pid) {
                        if (WIFSIGNALED(st))
                                say(cfd, 'k', "%d", WTERMSIG(st));
                        else
                                say(cfd, 'x', "%d", WEXITSTATUS(st));
                        break;
                }
                if (!p[0].revents)
                        continue;
                char msg[ABS_MSG_MAX];
                ssize_t n = recv(cfd, msg, sizeof(msg), MSG_DONTWAIT);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                char kind;
                const char *val;
                int sig;
                if (n > 0 && abs_msg_parse(msg, (size_t)n, &kind, &val) == 0 && kind == 's' &&
                    abs_msg_int(val, 1, SIGRTMAX, &sig) == 0) {
                        if (sig != SIGKILL && sig != SIGSTOP && kill(-pid, sig) < 0)
                                kill(pid, sig);
                        continue;
                }
                if (n > 0)
                        continue; /* not a signal: ignored */
                /* the client is gone: so is its command */
                init_kill_tree(pid, NULL, NULL);
                break;
        }
        if (pfd >= 0)
                close(pfd);
}

void init_sudo_serve(int cfd, const char *workdir)
{
        prctl(PR_SET_NAME, "ab-sudo");
        init_conf conf = {.workdir = workdir, .workdir_fd = -1};
        struct ucred cr;
        socklen_t cl = sizeof(cr);
        if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0) {
                close(cfd);
                return;
        }
        int fds[3];
        size_t len;
        _cleanup_free_ char *buf = recv_req(cfd, fds, &len);
        if (!buf) {
                close(cfd);
                return;
        }
        _cleanup_free_ char *caller = NULL, *cgroup_name = NULL;
        init_id_names(&conf, cr.uid, cr.gid, &caller, &cgroup_name);
        if (!caller)
                caller = xasprintf("%u", (unsigned)cr.uid);
        abs_req q;
        const char *bad = NULL;
        init_user t = {0};
        char *why = NULL;
        if (!may_sudo(&conf, cr.uid)) {
                say(cfd, 'm', "%s is not in the sudoers file.", caller);
        } else if (abs_req_parse(buf, len, &q, &bad) < 0) {
                say(cfd, 'm', "bad request: %s", bad);
        } else if (init_user_resolve(&conf, q.user ? q.user : "0", &t, &why) < 0) {
                say(cfd, 'm', "unknown user %s (%s)", q.user ? q.user : "root", why);
                abs_req_free(&q);
        } else {
                const char *shell = (q.flags & ABS_F_SHELL) && req_env(&q, "SHELL")
                                        ? req_env(&q, "SHELL")
                                    : t.shell && *t.shell ? t.shell
                                                          : "/bin/sh";
                _cleanup_free_ char *command = NULL;
                _cleanup_strv_ char **argv = build_argv(&q, shell, &command);
                envv env = {.v = xcalloc(1, sizeof(char *))};
                build_env(&env, &q, &t, cr.uid, cr.gid, caller, shell, command);
                const char *cwd = (q.flags & ABS_F_LOGIN) && t.home ? t.home : q.cwd;
                int master = -1, slave = -1;
                if (q.flags & ABS_F_TTY)
                        open_terminal(fds[0], &master, &slave);
                pid_t pid = fork();
                if (pid == 0)
                        run_child(slave >= 0 ? (int[3]){slave, slave, slave} : fds, &t, cwd,
                                  argv[0][0] == '-' ? shell : argv[0], argv, env.v);
                ab_strvfreep(&env.v);
                for (int i = 0; i < 3; i++)
                        close(fds[i]);
                if (slave >= 0)
                        close(slave);
                if (master >= 0 && pid > 0) /* "t" with the terminal's master */
                        (void)!abs_send(cfd, "t", 2, &master, 1);
                if (master >= 0)
                        close(master);
                if (pid < 0)
                        say(cfd, 'm', "cannot start the command: %s", strerror(errno));
                else
                        supervise(cfd, pid);
                init_user_free(&t);
                abs_req_free(&q);
                close(cfd);
                return;
        }
        free(why);
        for (int i = 0; i < 3; i++)
                close(fds[i]);
        close(cfd);
}
