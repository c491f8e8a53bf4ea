/* sudo_client.c - the box's `sudo`: agentbox-init run under the name sudo
 * (installed so by the E2B front, docs/compat-e2b.md). It asks the box's
 * init over the sudo socket (proto/sudo.h, init/sudo.c) to run a command as
 * root or -u USER, handing over its stdin, stdout and stderr, its cwd and
 * environment, forwards the signals it gets, and exits as the command did.
 * No password is ever asked: init decides by who the caller is. */
#include "init/init_int.h"
#include "proto/sudo.h"

#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <termios.h>

extern char **environ;

static void usage(FILE *f)
{
        fputs("usage: sudo -h | -K | -k | -V\n"
              "usage: sudo -v [-knS] [-g group] [-u user]\n"
              "usage: sudo -l [-knS] [-g group] [-u user] [command [arg ...]]\n"
              "usage: sudo [-EHknS] [-g group] [-u user] [-i | -s] [command [arg ...]]\n",
              f);
}

static int help(void)
{
        printf("sudo - run a command as root or another user of this agentbox box\n\n");
        usage(stdout);
        printf("\nOptions:\n"
               "  -E, --preserve-env     keep the caller's environment\n"
               "  -g, --group=GROUP      run with GROUP as the primary group\n"
               "  -H, --set-home         set HOME to the target's home (always done)\n"
               "  -h, --help             this help\n"
               "  -i, --login            run the target's login shell (a command through it)\n"
               "  -K, --remove-timestamp nothing to remove: no password is cached\n"
               "  -k, --reset-timestamp  the same\n"
               "  -l, --list             what the caller may run\n"
               "  -n, --non-interactive  never asks (it never does)\n"
               "  -S, --stdin            no password is read\n"
               "  -s, --shell            run a shell (a command through it)\n"
               "  -u, --user=USER        run as USER (a name or #uid) instead of root\n"
               "  -V, --version          the version\n"
               "  -v, --validate         nothing to validate: succeeds\n"
               "  --                     end of options\n\n"
               "The box's init runs the command (boxes forbid set-uid programs); root and\n"
               "the account `user` may use it, without a password.\n");
        return 0;
}

static int fail(const char *fmt, ...) AB_PRINTF(1, 2);
static int fail(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        fputs("sudo: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        return 1;
}

static int connect_init(void)
{
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        memcpy(a.sun_path + 1, ABS_SOCKET_NAME, strlen(ABS_SOCKET_NAME));
        socklen_t len =
            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(ABS_SOCKET_NAME));
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&a, len) < 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        return fd;
}

/* Sends the request with fds 0, 1, 2 (a closed one as /dev/null). */
static int send_req(int sock, const ab_buf *b)
{
        int fds[3];
        for (int i = 0; i < 3; i++) {
                fds[i] = i;
                if (fcntl(i, F_GETFD) < 0)
                        fds[i] = open("/dev/null", O_RDWR | O_CLOEXEC);
                if (fds[i] < 0)
                        return -errno;
        }
        return abs_send(sock, b->p, b->n, fds, 3);
}

/* The terminal init made for the command (flag T): its master, relayed
 * to and from ours, which is raw meanwhile. -1 when there is none. */
static int master = -1;
static struct termios saved;
static bool raw;

static void restore_terminal(void)
{
        if (raw)
                tcsetattr(0, TCSADRAIN, &saved);
        raw = false;
}

static void copy_size(void)
{
        struct winsize ws;
        if (master >= 0 && ioctl(0, TIOCGWINSZ, &ws) == 0)
                ioctl(master, TIOCSWINSZ, &ws);
}

static void take_master(int fd)
{
        master = fd;
        copy_size();
        if (tcgetattr(0, &saved) == 0) {
                struct termios t = saved;
                cfmakeraw(&t);
                raw = tcsetattr(0, TCSADRAIN, &t) == 0;
        }
}

/* Copies what is there from `from` to `to`: false at its end (or an error:
 * EIO is a master whose terminal has no one left). */
static bool pump(int from, int to)
{
        char buf[16384];
        ssize_t n = read(from, buf, sizeof(buf));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                return true;
        return n > 0 && ab_write_all(to, buf, (size_t)n) == 0;
}

/* What the command wrote last, once it is over. */
static void drain(void)
{
        if (master < 0)
                return;
        int fl = fcntl(master, F_GETFL);
        fcntl(master, F_SETFL, fl | O_NONBLOCK);
        char buf[16384];
        ssize_t n;
        while ((n = read(master, buf, sizeof(buf))) > 0 && ab_write_all(1, buf, (size_t)n) == 0) {
        }
}

/* Exits as the command did: its code, or its signal. */
static int finish(char kind, const char *val)
{
        drain();
        restore_terminal();
        int v;
        if (kind == 'x' && abs_msg_int(val, 0, 255, &v) == 0)
                return v;
        if (kind == 'k' && abs_msg_int(val, 1, SIGRTMAX, &v) == 0) {
                signal(v, SIG_DFL);
                sigset_t s;
                sigemptyset(&s);
                sigaddset(&s, v);
                sigprocmask(SIG_UNBLOCK, &s, NULL);
                raise(v);
                return 128 + v;
        }
        if (kind == 'm')
                return fail("%s", val);
        return fail("unexpected answer from this box's init");
}

/* One message from init, with the fd a "t" carries. The length, or -1. */
static ssize_t recv_msg(int sock, char *msg, size_t cap, int *fd)
{
        union {
                char b[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } cm;
        struct iovec iov = {.iov_base = msg, .iov_len = cap};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof(cm.b)};
        ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
        *fd = -1;
        for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
                    c->cmsg_len == CMSG_LEN(sizeof(int)))
                        memcpy(fd, CMSG_DATA(c), sizeof(int));
        return n;
}

/* Waits for the command's status, forwarding the signals a sudo forwards
 * (and relaying the command's terminal, when init made one). */
static int wait_status(int sock)
{
        static const int fwd[] = {SIGINT,  SIGTERM,  SIGHUP,  SIGQUIT, SIGUSR1,
                                  SIGUSR2, SIGWINCH, SIGCONT, SIGALRM};
        sigset_t set;
        sigemptyset(&set);
        for (size_t i = 0; i < AB_ARRAY_LEN(fwd); i++)
                sigaddset(&set, fwd[i]);
        sigprocmask(SIG_BLOCK, &set, NULL);
        int sfd = signalfd(-1, &set, SFD_CLOEXEC);
        bool in_open = true, out_open = true;
        for (;;) {
                struct pollfd p[4] = {{.fd = sock, .events = POLLIN},
                                      {.fd = sfd, .events = POLLIN},
                                      {.fd = master >= 0 && in_open ? 0 : -1, .events = POLLIN},
                                      {.fd = out_open ? master : -1, .events = POLLIN}};
                if (poll(p, 4, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        restore_terminal();
                        return fail("poll: %s", strerror(errno));
                }
                if (sfd >= 0 && p[1].revents) {
                        struct signalfd_siginfo si;
                        if (read(sfd, &si, sizeof(si)) == sizeof(si)) {
                                char m[16];
                                int n = snprintf(m, sizeof(m), "s%u", si.ssi_signo);
                                if (master >= 0 && si.ssi_signo == SIGWINCH)
                                        copy_size(); /* the terminal tells its programs */
                                else
                                        (void)!send(sock, m, (size_t)n + 1, MSG_NOSIGNAL);
                        }
                }
                if (p[2].revents)
                        in_open = pump(0, master);
                if (p[3].revents)
                        out_open = pump(master, 1);
                if (!p[0].revents)
                        continue;
                char msg[ABS_MSG_MAX];
                int fd;
                ssize_t n = recv_msg(sock, msg, sizeof(msg), &fd);
                if (n < 0 && errno == EINTR)
                        continue;
                char kind;
                const char *val;
                if (n <= 0 || abs_msg_parse(msg, (size_t)n, &kind, &val) < 0) {
                        if (fd >= 0)
                                close(fd);
                        restore_terminal();
                        return fail("this box's init ended the command without a status");
                }
                if (kind == 't' && fd >= 0 && master < 0) {
                        take_master(fd);
                        continue;
                }
                if (fd >= 0)
                        close(fd);
                return finish(kind, val);
        }
}

int init_sudo_main(int argc, char **argv)
{
        static const struct option longs[] = {{"preserve-env", no_argument, NULL, 'E'},
                                              {"group", required_argument, NULL, 'g'},
                                              {"set-home", no_argument, NULL, 'H'},
                                              {"help", no_argument, NULL, 'h'},
                                              {"login", no_argument, NULL, 'i'},
                                              {"remove-timestamp", no_argument, NULL, 'K'},
                                              {"reset-timestamp", no_argument, NULL, 'k'},
                                              {"list", no_argument, NULL, 'l'},
                                              {"non-interactive", no_argument, NULL, 'n'},
                                              {"stdin", no_argument, NULL, 'S'},
                                              {"shell", no_argument, NULL, 's'},
                                              {"user", required_argument, NULL, 'u'},
                                              {"version", no_argument, NULL, 'V'},
                                              {"validate", no_argument, NULL, 'v'},
                                              {NULL, 0, NULL, 0}};
        const char *user = NULL, *group = NULL;
        uint32_t flags = 0;
        bool list = false, validate = false, reset = false;
        int c;
        opterr = 1;
        while ((c = getopt_long(argc, argv, "+Eg:HhiKklnSsu:Vv", longs, NULL)) != -1) {
                switch (c) {
                case 'E':
                        flags |= ABS_F_PRESERVE_ENV;
                        break;
                case 'g':
                        group = optarg;
                        break;
                case 'h':
                        return help();
                case 'i':
                        flags |= ABS_F_LOGIN;
                        break;
                case 'K':
                case 'k':
                        reset = true;
                        break;
                case 'l':
                        list = true;
                        break;
                case 's':
                        flags |= ABS_F_SHELL;
                        break;
                case 'u':
                        user = optarg;
                        break;
                case 'V':
                        printf("Sudo version 1.9 (agentbox-init %s)\n", AGENTBOX_VERSION);
                        return 0;
                case 'v':
                        validate = true;
                        break;
                case 'H':
                case 'n':
                case 'S':
                        break;
                default: /* getopt said "sudo: invalid option -- 'x'" */
                        usage(stderr);
                        return 1;
                }
        }
        if ((flags & ABS_F_LOGIN) && (flags & ABS_F_SHELL))
                return fail("you may not specify both the -i and -s options");
        bool has_cmd = optind < argc;
        if (validate || (reset && !has_cmd && !(flags & (ABS_F_LOGIN | ABS_F_SHELL))))
                return 0;
        if (list) {
                printf("User may run the following commands in this box:\n"
                       "    (ALL : ALL) NOPASSWD: ALL\n");
                return 0;
        }
        if (!has_cmd && !(flags & (ABS_F_LOGIN | ABS_F_SHELL))) {
                usage(stderr);
                return 1;
        }
        /* sudo's "#uid" form is init's plain uid */
        _cleanup_free_ char *spec = NULL;
        if (user || group)
                spec =
                    xasprintf("%s%s%s", user ? (user[0] == '#' ? user + 1 : user) : "root",
                              group ? ":" : "", group ? (group[0] == '#' ? group + 1 : group) : "");
        char cwd[ABS_PATH_MAX + 1];
        if (!getcwd(cwd, sizeof(cwd)))
                strcpy(cwd, "/");
        size_t envc = 0;
        while (environ && environ[envc])
                envc++;
        if (isatty(0) && isatty(1) && isatty(2))
                flags |= ABS_F_TTY; /* the command gets a terminal of its own */
        abs_req q = {.flags = flags,
                     .user = spec,
                     .cwd = cwd,
                     .argv = (const char **)argv + optind,
                     .argc = (size_t)(argc - optind),
                     .env = (const char **)environ,
                     .envc = envc > ABS_ENV_MAX ? ABS_ENV_MAX : envc};
        _cleanup_buf_ ab_buf b = {0};
        int r = abs_req_encode(&q, &b);
        if (r == -E2BIG)
                return fail("the command and environment are too large (at most %u KiB)",
                            ABS_REQ_MAX >> 10);
        if (r < 0)
                return fail("invalid user or directory");
        _cleanup_close_ int sock = connect_init();
        if (sock < 0)
                return fail("cannot reach this box's init (this sudo works in agentbox boxes "
                            "only): %s",
                            strerror(-sock));
        if ((r = send_req(sock, &b)) < 0)
                return fail("cannot send the request: %s", strerror(-r));
        return wait_status(sock);
}
