/* exec.c - EXEC: run `bash -lc COMMAND` inside the box and stream its output.
 *
 * The session (our caller) is a child subreaper, so every process the
 * command starts stays its descendant until the session exits. One poll loop
 * moves stdin frames into the stdin pipe and pipe output into DATA frames,
 * with back-pressure both ways (the socket is never written with a blocking
 * call, so a timeout fires even when the client stops reading).
 *
 * When the main process exits, what is already in the pipes is drained and
 * EXIT is sent at once; background processes keep the pipes open, so we keep
 * reading and discarding until EOF and then exit, leaving them to init. */
#include "init/init_int.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#define EXEC_HWM  (512 * 1024) /* stop reading pipes while this much waits for the client */
#define DRAIN_MAX (4u << 20)   /* most bytes drained after the main process exited */

static const char *const base_env[] = {
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
    "USER=root",
    "LOGNAME=root",
    "SHELL=/bin/bash",
    "TERM=dumb",
};

typedef struct ostream {
        int fd; /* read end of the pipe, -1 after EOF */
        uint64_t total, kept;
        bool marked; /* the truncation marker was sent */
} ostream;

typedef struct exec_state {
        init_conn *c;
        abp_buf out;  /* frames waiting for the client */
        bool gone;    /* the client went away */
        bool bad;     /* ... or broke the protocol */
        bool discard; /* EXIT is queued: read pipes, send nothing more */
        pid_t pid;    /* the main process (bash) */
        bool exited;
        int status;
        uint64_t start_ms, end_ms;
        ostream o[3]; /* [1] stdout, [2] stderr */
        uint64_t cap;
        bool truncated;
        int in_fd; /* write end of the stdin pipe, or -1 */
        uint8_t *in_buf;
        size_t in_len, in_off;
        bool in_stream, in_eof;
} exec_state;

/* ---- killing a process tree ---- */

typedef struct proc {
        pid_t pid, ppid;
        bool mark;
} proc;

static int proc_cmp(const void *a, const void *b)
{
        pid_t x = ((const proc *)a)->pid, y = ((const proc *)b)->pid;
        return (x > y) - (x < y);
}

static int read_ppid(int procfd, const char *pid, pid_t *ppid)
{
        char path[64], buf[512];
        snprintf(path, sizeof(path), "%s/stat", pid);
        _cleanup_close_ int fd = openat(procfd, path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        ssize_t n = ab_read_full(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return -EIO;
        buf[n] = 0;
        /* "pid (comm) S ppid ...": comm may hold anything, so find the last ')'. */
        char *p = strrchr(buf, ')');
        int v;
        if (!p || sscanf(p + 1, " %*c %d", &v) != 1)
                return -EIO;
        *ppid = v;
        return 0;
}

/* Calls fn on every descendant of `self` listed in /proc; returns how many. */
static size_t walk_descendants(pid_t self, void (*fn)(pid_t pid, void *ud), void *ud)
{
        DIR *d = opendir("/proc");
        if (!d)
                return 0;
        proc *v = NULL;
        size_t n = 0, cap = 0, killed = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
                char *end;
                long pid = strtol(e->d_name, &end, 10);
                pid_t ppid;
                if (*end || pid <= 0 || pid == self)
                        continue;
                if (read_ppid(dirfd(d), e->d_name, &ppid) < 0)
                        continue;
                if (n == cap) {
                        cap = cap ? cap * 2 : 256;
                        v = xrealloc(v, xmul(cap, sizeof(*v)));
                }
                v[n++] = (proc){.pid = (pid_t)pid, .ppid = ppid};
        }
        closedir(d);
        if (n > 0)
                qsort(v, n, sizeof(*v), proc_cmp);
        for (bool changed = true; changed;) {
                changed = false;
                for (size_t i = 0; i < n; i++) {
                        if (v[i].mark)
                                continue;
                        proc key = {.pid = v[i].ppid};
                        proc *parent =
                            v[i].ppid == self ? NULL : bsearch(&key, v, n, sizeof(*v), proc_cmp);
                        if (v[i].ppid == self || (parent && parent->mark)) {
                                v[i].mark = true;
                                changed = true;
                                fn(v[i].pid, ud);
                                killed++;
                        }
                }
        }
        free(v);
        return killed;
}

static void kill_one(pid_t pid, void *ud)
{
        (void)ud;
        kill(pid, SIGKILL);
}

/* SIGKILLs every descendant of `self` listed in /proc; returns how many. */
static size_t kill_descendants(pid_t self)
{
        return walk_descendants(self, kill_one, NULL);
}

static void limit_one(pid_t pid, void *ud)
{
        struct rlimit *rl = ud;
        prlimit(pid, RLIMIT_NPROC, rl, NULL);
}

/* What an exec leaves running gets a lower RLIMIT_NPROC than a running exec,
 * so leftovers (a server, or a runaway loop) can never take the room the
 * next exec needs. Lowering another process's limit needs no privilege. */
static void limit_leftovers(void)
{
        if (init_max_procs <= 1)
                return;
        rlim_t low = init_max_procs > 32 ? init_max_procs - 16 : init_max_procs / 2;
        struct rlimit rl = {low ? low : 1, low ? low : 1};
        walk_descendants(getpid(), limit_one, &rl);
}

void init_kill_tree(pid_t pgrp, void (*reaped)(pid_t pid, int status, void *ud), void *ud)
{
        pid_t self = getpid();
        /* Bounded (~10 s): a tree that keeps forking is killed a little more on every round. */
        for (int round = 0; round < 2000; round++) {
                if (pgrp > 0)
                        kill(-pgrp, SIGKILL);
                size_t n = kill_descendants(self);
                int status;
                pid_t p;
                while ((p = waitpid(-1, &status, WNOHANG)) > 0)
                        if (reaped)
                                reaped(p, status, ud);
                if (n == 0 && p < 0 && errno == ECHILD)
                        return;
                struct timespec ts = {0, round < 10 ? 1000000 : 5000000};
                nanosleep(&ts, NULL);
        }
}

/* ---- the exec ---- */

static void on_reaped(pid_t pid, int status, void *ud)
{
        exec_state *st = ud;
        if (pid == st->pid && !st->exited) {
                st->exited = true;
                st->status = status;
                st->end_ms = ab_now_ms();
        }
}

static void reap(exec_state *st)
{
        int status;
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0)
                on_reaped(p, status, st);
}

/* Builds base env + request env (the request wins). NULL on a bad entry. */
static char **build_env(const abp_exec_req *req, const char *workdir, const char **bad)
{
        size_t n = AB_ARRAY_LEN(base_env) + 1 + req->n_env;
        char **env = xcalloc(xadd(n, 1), sizeof(*env));
        size_t k = 0;
        for (size_t i = 0; i < AB_ARRAY_LEN(base_env); i++)
                env[k++] = xstrdup(base_env[i]);
        env[k++] = xasprintf("HOME=%s", workdir);
        for (size_t i = 0; i < req->n_env; i++) {
                const char *e = req->env[i], *eq = strchr(e, '=');
                if (!eq || eq == e) {
                        *bad = e;
                        for (size_t j = 0; j < k; j++)
                                free(env[j]);
                        free(env);
                        return NULL;
                }
                size_t klen = (size_t)(eq - e) + 1;
                size_t j;
                for (j = 0; j < k; j++)
                        if (strncmp(env[j], e, klen) == 0)
                                break;
                if (j < k) {
                        free(env[j]);
                        env[j] = xstrdup(e);
                } else {
                        env[k++] = xstrdup(e);
                }
        }
        return env;
}

static void queue_data(exec_state *st, int stream, const void *p, size_t n)
{
        if (abp_enc_data(&st->out, (uint32_t)stream, p, n) < 0)
                abort(); /* n <= ABP_CHUNK: cannot overflow */
}

static void on_output(exec_state *st, int i, const uint8_t *p, size_t n)
{
        ostream *o = &st->o[i];
        o->total += n;
        if (st->discard)
                return;
        uint64_t room = st->cap - o->kept;
        size_t take = n < room ? n : (size_t)room;
        if (take > 0) {
                queue_data(st, i, p, take);
                o->kept += take;
        }
        if (take < n && !o->marked) {
                char m[96];
                int len =
                    snprintf(m, sizeof(m), "\n[agentbox: output truncated after %llu bytes]\n",
                             (unsigned long long)st->cap);
                queue_data(st, i, m, (size_t)len);
                o->marked = true;
                st->truncated = true;
        }
}

/* One read from a pipe: >0 bytes, 0 at EOF (the pipe is closed), -EAGAIN. */
static ssize_t read_stream(exec_state *st, int i)
{
        static uint8_t buf[ABP_CHUNK];
        ostream *o = &st->o[i];
        for (;;) {
                ssize_t n = read(o->fd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return -EAGAIN;
                if (n <= 0) {
                        close(o->fd);
                        o->fd = -1;
                        return 0;
                }
                on_output(st, i, buf, (size_t)n);
                return n;
        }
}

static void flush(exec_state *st)
{
        while (st->out.len > 0 && !st->gone) {
                ssize_t n = send(st->c->fd, st->out.p, st->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        st->gone = true;
                        st->out.len = 0;
                        return;
                }
                abp_buf_consume(&st->out, (size_t)n);
        }
}

static void close_stdin(exec_state *st)
{
        if (st->in_fd >= 0)
                close(st->in_fd);
        st->in_fd = -1;
        st->in_len = st->in_off = 0;
}

static void write_stdin(exec_state *st)
{
        while (st->in_fd >= 0 && st->in_off < st->in_len) {
                ssize_t n = write(st->in_fd, st->in_buf + st->in_off, st->in_len - st->in_off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n < 0) {
                        close_stdin(st); /* EPIPE: the command does not read stdin */
                        return;
                }
                st->in_off += (size_t)n;
        }
        if (st->in_off == st->in_len && st->in_eof)
                close_stdin(st);
}

/* Moves buffered client frames into the stdin pipe for as long as it takes them. */
static void client_frames(exec_state *st)
{
        for (;;) {
                abp_frame f;
                abp_data d;
                write_stdin(st);
                if (st->gone || st->in_off < st->in_len)
                        return;
                int k = abp_reader_next(&st->c->rd, &f);
                if (k == 0)
                        return;
                if (k < 0 || !st->in_stream || st->in_eof) {
                        st->gone = st->bad = true;
                        return;
                }
                if (f.type == ABP_EOF) {
                        st->in_eof = true;
                } else if (f.type == ABP_DATA && abp_dec_data(&f, &d) == 0 && d.stream == 0) {
                        if (st->in_fd >= 0 && d.len > 0) {
                                st->in_buf = xrealloc(st->in_buf, d.len);
                                memcpy(st->in_buf, d.data, d.len);
                                st->in_len = d.len;
                                st->in_off = 0;
                        }
                } else {
                        st->gone = st->bad = true;
                        return;
                }
        }
}

static void set_nonblock(int fd)
{
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
                fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void read_client(exec_state *st)
{
        ssize_t n = abp_reader_fill(&st->c->rd, st->c->fd);
        if (n == 0 || (n < 0 && n != -EAGAIN))
                st->gone = true;
}

/* Child side of the fork: never returns. */
__attribute__((noreturn)) static void run_child(int in, int out, int err, int cwdfd,
                                                const char *command, char **env)
{
        setsid();
        for (int s = 1; s < NSIG; s++)
                if (s != SIGKILL && s != SIGSTOP)
                        signal(s, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
                _exit(127);
        if (fchdir(cwdfd) < 0) {
                dprintf(2, "agentbox-init: cannot enter the working directory: %s\n",
                        strerror(errno));
                _exit(127);
        }
        if (init_max_procs) {
                struct rlimit nproc = {init_max_procs, init_max_procs};
                setrlimit(RLIMIT_NPROC, &nproc);
        }
        if (close_range(3, ~0U, 0) < 0)
                for (int fd = 3; fd < 65536; fd++)
                        close(fd);
        char *argv[] = {"bash", "-lc", (char *)command, NULL};
        execve("/bin/bash", argv, env);
        dprintf(2, "agentbox-init: cannot run /bin/bash: %s\n", strerror(errno));
        _exit(127);
}

static int pipe_pair(int p[2])
{
        return pipe2(p, O_CLOEXEC) < 0 ? -errno : 0;
}

static void close_pair(int p[2])
{
        for (int i = 0; i < 2; i++)
                if (p[i] >= 0)
                        close(p[i]);
        p[0] = p[1] = -1;
}

/* Runs the poll loop until the main process exits, the timeout fires or the
 * client goes away. Returns true on timeout. */
static bool run_loop(exec_state *st, int sfd, uint32_t timeout_ms)
{
        uint64_t deadline = timeout_ms ? st->start_ms + timeout_ms : 0;
        for (;;) {
                client_frames(st);
                flush(st);
                if (st->gone || st->exited)
                        return false;
                uint64_t now = ab_now_ms();
                if (deadline && now >= deadline)
                        return true;

                struct pollfd p[5];
                int np = 0, ic = -1, io[3] = {-1, -1, -1}, ii = -1;
                short ev = 0;
                if (st->in_off == st->in_len)
                        ev |= POLLIN;
                if (st->out.len > 0)
                        ev |= POLLOUT;
                ic = np;
                p[np++] = (struct pollfd){.fd = st->c->fd, .events = ev};
                for (int i = 1; i <= 2; i++) {
                        if (st->o[i].fd >= 0 && st->out.len < EXEC_HWM) {
                                io[i] = np;
                                p[np++] = (struct pollfd){.fd = st->o[i].fd, .events = POLLIN};
                        }
                }
                if (st->in_fd >= 0 && st->in_off < st->in_len) {
                        ii = np;
                        p[np++] = (struct pollfd){.fd = st->in_fd, .events = POLLOUT};
                }
                int is = np;
                p[np++] = (struct pollfd){.fd = sfd, .events = POLLIN};

                int wait = deadline ? (int)(deadline - now) : -1;
                if (poll(p, (nfds_t)np, wait) < 0) {
                        if (errno == EINTR)
                                continue;
                        st->gone = true;
                        return false;
                }
                if (p[is].revents) {
                        struct signalfd_siginfo si;
                        while (read(sfd, &si, sizeof(si)) == sizeof(si))
                                ;
                        reap(st);
                }
                if (p[ic].revents & POLLOUT)
                        flush(st);
                if (p[ic].revents & (POLLIN | POLLHUP | POLLERR)) {
                        if (p[ic].revents & POLLIN)
                                read_client(st);
                        else
                                st->gone = true;
                }
                for (int i = 1; i <= 2; i++)
                        if (io[i] >= 0 && p[io[i]].revents)
                                read_stream(st, i);
                if (ii >= 0 && p[ii].revents)
                        write_stdin(st);
        }
}

/* Reads what the pipes already hold, without waiting for writers. */
static void drain(exec_state *st)
{
        uint64_t before = st->o[1].total + st->o[2].total;
        for (bool more = true; more;) {
                more = false;
                for (int i = 1; i <= 2; i++)
                        if (st->o[i].fd >= 0 && read_stream(st, i) > 0)
                                more = true;
                if (st->o[1].total + st->o[2].total - before > DRAIN_MAX)
                        break;
        }
}

/* After EXIT is queued: deliver it, hang up, then read and discard the pipes
 * until every background writer is gone, so none of them gets SIGPIPE. */
static void finish(exec_state *st, int sfd)
{
        uint64_t last = ab_now_ms();
        st->discard = true;
        for (;;) {
                flush(st);
                if (st->c->fd >= 0 && (st->gone || st->out.len == 0)) {
                        close(st->c->fd);
                        st->c->fd = -1;
                        /* The client has its answer: now tame what is left. */
                        limit_leftovers();
                }
                if (st->c->fd < 0 && st->o[1].fd < 0 && st->o[2].fd < 0)
                        break;
                struct pollfd p[4];
                int np = 0;
                int ic = -1;
                if (st->c->fd >= 0) {
                        ic = np;
                        p[np++] = (struct pollfd){.fd = st->c->fd, .events = POLLOUT};
                }
                for (int i = 1; i <= 2; i++)
                        if (st->o[i].fd >= 0)
                                p[np++] = (struct pollfd){.fd = st->o[i].fd, .events = POLLIN};
                p[np++] = (struct pollfd){.fd = sfd, .events = POLLIN};
                int n = poll(p, (nfds_t)np, ic >= 0 ? 1000 : -1);
                if (n < 0 && errno != EINTR)
                        break;
                if (ic >= 0 && n > 0 && p[ic].revents)
                        last = ab_now_ms();
                else if (ic >= 0 && ab_now_ms() - last > INIT_IO_TIMEOUT_MS)
                        st->gone = true; /* the client stopped reading */
                for (int i = 1; i <= 2; i++)
                        while (st->o[i].fd >= 0 && read_stream(st, i) > 0)
                                ;
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof(si)) == sizeof(si))
                        ;
                reap(st);
        }
        reap(st);
}

void init_exec(init_conn *c, const abp_frame *f, const init_conf *conf)
{
        abp_exec_req req;
        const char *bad = NULL;
        int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
        _cleanup_close_ int cwdfd = -1, sfd = -1;
        _cleanup_strv_ char **env = NULL;
        sigset_t chld, old;
        int r = 0;

        if (abp_dec_exec(f, &req) < 0) {
                init_send_error(c, "invalid_argument", "malformed exec request");
                return;
        }
        exec_state st = {
            .c = c,
            .cap = req.output_cap ? req.output_cap : ABP_DEFAULT_CAP,
            .in_fd = -1,
            .in_stream = req.stdin_stream,
            .in_eof = !req.stdin_stream,
            .o = {{.fd = -1}, {.fd = -1}, {.fd = -1}},
        };
        uint32_t timeout_ms = req.timeout_ms;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, &old);

        env = build_env(&req, conf->workdir, &bad);
        if (!env) {
                init_send_error(c, "invalid_argument",
                                "environment entry is not NAME=VALUE: %.200s", bad);
                goto out;
        }
        const char *cwd = req.cwd ? req.cwd : conf->workdir;
        cwdfd = init_open(conf, cwd, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
        if (cwdfd < 0) {
                if (cwdfd == -ENOENT)
                        init_send_error(c, "not_found", "working directory does not exist: %.1024s",
                                        cwd);
                else
                        init_send_errno(c, -cwdfd, cwd);
                goto out;
        }

        if (req.stdin_len > 0 || req.stdin_stream)
                r = pipe_pair(in);
        else if ((in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
                r = pipe_pair(in); /* no /dev/null: an empty pipe, closed at once */
        if (r == 0)
                r = pipe_pair(out);
        if (r == 0)
                r = pipe_pair(err);
        if (r < 0) {
                init_send_error(c, "internal", "cannot create pipes: %s", strerror(-r));
                goto out;
        }
        sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0) {
                init_send_error(c, "internal", "signalfd: %s", strerror(errno));
                goto out;
        }
        if (req.stdin_len > 0) {
                st.in_buf = xmalloc(req.stdin_len);
                memcpy(st.in_buf, req.stdin_data, req.stdin_len);
                st.in_len = req.stdin_len;
        }

        st.start_ms = ab_now_ms();
        st.pid = fork();
        if (st.pid < 0) {
                init_send_error(c, "internal", "cannot fork: %s", strerror(errno));
                goto out;
        }
        if (st.pid == 0)
                run_child(in[0], out[1], err[1], cwdfd, req.command, env);

        /* req points into the reader's buffer, which the loop reuses. */
        abp_exec_req_clear(&req);
        close(in[0]);
        close(out[1]);
        close(err[1]);
        in[0] = out[1] = err[1] = -1;
        st.in_fd = steal_fd(&in[1]);
        if (st.in_fd >= 0)
                set_nonblock(st.in_fd);
        st.o[1].fd = steal_fd(&out[0]);
        st.o[2].fd = steal_fd(&err[0]);
        set_nonblock(st.o[1].fd);
        set_nonblock(st.o[2].fd);

        bool timed_out = run_loop(&st, sfd, timeout_ms);
        if (st.gone) {
                /* The client hung up (or spoke garbage) mid-exec: kill the tree. */
                init_kill_tree(st.pid, on_reaped, &st);
                if (st.bad) {
                        st.out.len = 0;
                        init_send_error(c, "invalid_argument", "unexpected frame during exec");
                }
                goto out;
        }
        if (timed_out) {
                init_kill_tree(st.pid, on_reaped, &st);
                st.end_ms = ab_now_ms();
        }
        close_stdin(&st);
        drain(&st);

        abp_exit ex = {
            .timed_out = timed_out,
            .truncated = st.truncated,
            .duration_ms = st.end_ms - st.start_ms,
            .stdout_bytes = st.o[1].total,
            .stderr_bytes = st.o[2].total,
        };
        if (timed_out)
                ex.exit_code = ABP_TIMEOUT_EXIT;
        else if (WIFEXITED(st.status))
                ex.exit_code = WEXITSTATUS(st.status);
        else if (WIFSIGNALED(st.status))
                ex.exit_code = 128 + WTERMSIG(st.status);
        if (abp_enc_exit(&st.out, &ex) < 0)
                abort();
        finish(&st, sfd);

out:
        sigprocmask(SIG_SETMASK, &old, NULL);
        close_stdin(&st);
        for (int i = 1; i <= 2; i++)
                if (st.o[i].fd >= 0)
                        close(st.o[i].fd);
        close_pair(in);
        close_pair(out);
        close_pair(err);
        free(st.in_buf);
        abp_buf_free(&st.out);
        abp_exec_req_clear(&req);
}
