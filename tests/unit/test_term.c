/* test_term - terminals in agentbox-init, through the host's client
 * (initclient.h), with a real init run outside a box: open, attach with the
 * history replayed, input, exit codes (also of a program that exited before
 * anyone attached), resize and signal on the stream, list and close, close
 * kills background jobs (their own process groups) too, the keeper comes
 * back after a crash, bad requests; background processes (PIPES): stdout
 * and stderr apart, stdin written and closed, tag, listed apart from the
 * terminals, history and exit code after the fact, signals, the bound. */
#include "proto/initclient.h"
#include "proto/proto.h"
#include "tap.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static char tmp[1024], ws[1100], sock[1100];
static pid_t init_pid = -1;

static void msleep(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
}

static int conn(void)
{
        ab_err *e = NULL;
        int fd = abc_connect(AT_FDCWD, sock, &e);
        if (fd < 0) {
                tap_diag("connect: %s", e ? e->msg : "?");
                ab_err_free(&e);
        }
        return fd;
}

static int open_term(const char *const *argv, abc_term_info *t, ab_err **e)
{
        int fd = conn();
        abc_term_req q = {.argv = argv, .cols = 80, .rows = 24};
        int r = fd < 0 ? -1 : abc_term_open(fd, &q, t, e);
        if (fd >= 0)
                close(fd);
        return r;
}

typedef struct stream {
        int fd;
        abc_term_stream *s;
        abc_term_info info;
        char *out;
        size_t n;
        char *err; /* a process's stderr */
        size_t n_err;
        int exit_code; /* -1 until EXIT */
        bool closed, ended;
} stream;

static int attach(const char *tid, stream *st, ab_err **e)
{
        memset(st, 0, sizeof(*st));
        st->exit_code = -1;
        st->fd = conn();
        if (st->fd < 0 || abc_term_attach(st->fd, tid, &st->info, &st->s, e) < 0) {
                if (st->fd >= 0)
                        close(st->fd);
                st->fd = -1;
                return -1;
        }
        return 0;
}

/* Reads events until `want` is in the output (NULL: until the stream ends). */
static bool read_until(stream *st, const char *want, int ms)
{
        for (int t = 0; t < ms;) {
                abc_term_event ev;
                int k;
                while ((k = abc_term_next(st->s, &ev)) > 0) {
                        if (ev.kind == ABC_TERM_OUTPUT && ev.stream == 2) {
                                st->err = xrealloc(st->err, st->n_err + ev.len + 1);
                                memcpy(st->err + st->n_err, ev.data, ev.len);
                                st->n_err += ev.len;
                                st->err[st->n_err] = 0;
                        } else if (ev.kind == ABC_TERM_OUTPUT) {
                                st->out = xrealloc(st->out, st->n + ev.len + 1);
                                memcpy(st->out + st->n, ev.data, ev.len);
                                st->n += ev.len;
                                st->out[st->n] = 0;
                        } else if (ev.kind == ABC_TERM_EXIT) {
                                st->exit_code = ev.exit_code;
                        } else {
                                st->closed = true;
                        }
                }
                if (k < 0)
                        st->ended = true;
                if (want && st->out && strstr(st->out, want))
                        return true;
                if (st->ended)
                        return !want;
                struct pollfd p = {.fd = st->fd, .events = POLLIN};
                poll(&p, 1, 50);
                t += 50;
        }
        return false;
}

static void detach(stream *st)
{
        abc_term_stream_free(st->s);
        if (st->fd >= 0)
                close(st->fd);
        abc_term_info_clear(&st->info);
        free(st->out);
        free(st->err);
        memset(st, 0, sizeof(*st));
}

/* Pids of processes whose cmdline is exactly argv[0] argv[1] (NUL-separated). */
static int count_procs(const char *a0, const char *a1)
{
        int n = 0;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d))) {
                char path[300], buf[256];
                snprintf(path, sizeof(path), "/proc/%.200s/cmdline", e->d_name);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                ssize_t k = read(fd, buf, sizeof(buf) - 1);
                close(fd);
                if (k <= 0)
                        continue;
                buf[k] = 0;
                size_t l0 = strlen(buf);
                if (strcmp(buf, a0) == 0 && (size_t)k > l0 + 1 && strcmp(buf + l0 + 1, a1) == 0)
                        n++;
        }
        if (d)
                closedir(d);
        return n;
}

static pid_t keeper_pid(void)
{
        DIR *d = opendir("/proc");
        struct dirent *e;
        pid_t found = -1;
        while (d && (e = readdir(d))) {
                char path[300], buf[512];
                snprintf(path, sizeof(path), "/proc/%.200s/stat", e->d_name);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                ssize_t k = read(fd, buf, sizeof(buf) - 1);
                close(fd);
                if (k <= 0)
                        continue;
                buf[k] = 0;
                int ppid = 0;
                char *p = strrchr(buf, ')');
                if (strstr(buf, "(ab-terms)") && p && sscanf(p + 1, " %*c %d", &ppid) == 1 &&
                    ppid == init_pid)
                        found = atoi(e->d_name);
        }
        if (d)
                closedir(d);
        return found;
}

static void test_basic(void)
{
        ab_err *e = NULL;
        abc_term_info t;
        const char *const sh[] = {"bash", "--norc", "--noprofile", "-i", NULL};
        tap_ok(open_term(sh, &t, &e) == 0, "open a terminal (%s)", e ? e->msg : "");
        ab_err_free(&e);
        tap_ok(t.id && strncmp(t.id, "t_", 2) == 0 && t.running && t.cols == 80 && t.rows == 24,
               "it has an id, runs, 80x24");
        stream a;
        tap_ok(attach(t.id, &a, &e) == 0, "attach (%s)", e ? e->msg : "");
        ab_err_free(&e);
        tap_ok(abc_term_input(a.s, "echo in-$((40+2))\n", strlen("echo in-$((40+2))\n")) == 0,
               "send input");
        tap_ok(read_until(&a, "in-42", 10000), "its output arrives");
        tap_ok(abc_term_send_resize(a.s, 132, 43) == 0 &&
                   abc_term_input(a.s, "stty size\n", strlen("stty size\n")) == 0 &&
                   read_until(&a, "43 132", 10000),
               "resize on the stream: stty size says 43 132");
        tap_ok(abc_term_input(a.s, "sleep 3137; echo not-$((1))\n",
                              strlen("sleep 3137; echo not-$((1))\n")) == 0,
               "start a sleep");
        for (int i = 0; i < 200 && count_procs("sleep", "3137") < 1; i++)
                msleep(50); /* until the job runs */
        tap_ok(abc_term_send_signal(a.s, SIGINT) == 0 &&
                   abc_term_input(a.s, "echo next-$((2))\n", strlen("echo next-$((2))\n")) == 0 &&
                   read_until(&a, "next-2", 10000),
               "SIGINT on the stream reaches the foreground job");
        tap_ok(!strstr(a.out, "not-1"), "... which did not finish");
        int wfd = conn();
        tap_ok(wfd >= 0 && abc_term_write(wfd, t.id, "echo aside-$((9))\n", 18, &e) == 0 &&
                   read_until(&a, "aside-9", 10000),
               "input without attaching (TERM_INPUT) reaches the terminal");
        ab_err_free(&e);
        if (wfd >= 0)
                close(wfd);

        stream b;
        tap_ok(attach(t.id, &b, &e) == 0 && read_until(&b, "next-2", 5000),
               "a second client first gets the history");
        ab_err_free(&e);
        int fd = conn();
        abc_term_info *v = NULL;
        size_t n = 0;
        tap_ok(fd >= 0 && abc_term_list(fd, &v, &n, &e) == 0 && n == 1 && !strcmp(v[0].id, t.id) &&
                   v[0].cols == 132,
               "list shows it with its size");
        abc_term_infos_free(v, n);
        close(fd);
        tap_ok(abc_term_input(b.s, "exit 4\n", strlen("exit 4\n")) == 0 &&
                   read_until(&a, NULL, 10000) && a.exit_code == 4,
               "exit 4: the first client gets EXIT 4 and the end");
        tap_ok(read_until(&b, NULL, 10000) && b.exit_code == 4, "... and the second one too");
        detach(&a);
        detach(&b);
        fd = conn();
        v = NULL;
        tap_ok(fd >= 0 && abc_term_list(fd, &v, &n, &e) == 0 && n == 1 && !v[0].running &&
                   v[0].exit_code == 4,
               "an exited terminal is listed with its exit code");
        abc_term_infos_free(v, n);
        close(fd);
        fd = conn();
        tap_ok(fd >= 0 && abc_term_close(fd, t.id, &e) == 0, "close it");
        close(fd);
        fd = conn();
        tap_ok(fd >= 0 && abc_term_close(fd, t.id, &e) < 0 && e && e->code == AB_E_NOT_FOUND,
               "closing it again: not found");
        ab_err_free(&e);
        close(fd);
        abc_term_info_clear(&t);
}

static void test_exited_before_attach(void)
{
        ab_err *e = NULL;
        abc_term_info t;
        const char *const argv[] = {"sh", "-c", "echo last-words; exit 3", NULL};
        tap_ok(open_term(argv, &t, &e) == 0, "open a terminal that exits at once");
        msleep(500);
        stream a;
        tap_ok(attach(t.id, &a, &e) == 0 && read_until(&a, NULL, 5000), "attach after it exited");
        tap_ok(a.out && strstr(a.out, "last-words") && a.exit_code == 3,
               "its last output and exit code 3 are there");
        detach(&a);
        int wfd = conn();
        tap_ok(wfd >= 0 && abc_term_write(wfd, t.id, "x", 1, &e) < 0 && e &&
                   e->code == AB_E_CONFLICT,
               "input to an exited terminal: conflict");
        ab_err_free(&e);
        if (wfd >= 0)
                close(wfd);
        int fd = conn();
        (void)!abc_term_close(fd, t.id, NULL);
        close(fd);
        abc_term_info_clear(&t);
        ab_err_free(&e);
}

static void test_close_kills_jobs(void)
{
        ab_err *e = NULL;
        abc_term_info t;
        const char *const sh[] = {"bash", "--norc", "--noprofile", "-i", NULL};
        tap_ok(open_term(sh, &t, &e) == 0, "open an interactive shell");
        stream a;
        tap_ok(attach(t.id, &a, &e) == 0, "attach");
        (void)!abc_term_input(a.s, "sleep 7771 & sleep 7772 & echo jobs-$((3))\n",
                              strlen("sleep 7771 & sleep 7772 & echo jobs-$((3))\n"));
        tap_ok(read_until(&a, "jobs-3", 10000),
               "two background jobs (process groups of their own)");
        for (int i = 0; i < 100 && count_procs("sleep", "7771") + count_procs("sleep", "7772") < 2;
             i++)
                msleep(50); /* (the jobs exec sleep a moment after bash goes on) */
        tap_ok(count_procs("sleep", "7771") == 1 && count_procs("sleep", "7772") == 1,
               "... are running");
        int fd = conn();
        tap_ok(fd >= 0 && abc_term_close(fd, t.id, &e) == 0, "close the terminal");
        close(fd);
        tap_ok(read_until(&a, NULL, 5000) && a.closed, "the attached client sees it closed");
        detach(&a);
        int left = 0;
        for (int i = 0; i < 100; i++) {
                left = count_procs("sleep", "7771") + count_procs("sleep", "7772");
                if (!left)
                        break;
                msleep(50);
        }
        tap_ok(left == 0, "close killed the background jobs too");
        abc_term_info_clear(&t);
        ab_err_free(&e);
}

static void test_keeper_crash(void)
{
        ab_err *e = NULL;
        pid_t k = keeper_pid();
        tap_ok(k > 0, "the keeper runs as a child of init (ab-terms)");
        kill(k, SIGKILL);
        msleep(200);
        abc_term_info t;
        const char *const argv[] = {"sh", "-c", "echo back-again; sleep 100", NULL};
        tap_ok(open_term(argv, &t, &e) == 0, "after the keeper was killed, open works again (%s)",
               e ? e->msg : "");
        ab_err_free(&e);
        tap_ok(keeper_pid() > 0 && keeper_pid() != k, "... with a new keeper");
        stream a;
        tap_ok(t.id && attach(t.id, &a, &e) == 0 && read_until(&a, "back-again", 5000),
               "... whose terminals work");
        detach(&a);
        abc_term_info_clear(&t);
        ab_err_free(&e);
}

static void test_bad(void)
{
        ab_err *e = NULL;
        abc_term_info t;
        stream a;
        tap_ok(attach("t_nope", &a, &e) < 0 && e && e->code == AB_E_NOT_FOUND,
               "attach to an unknown id: not found");
        ab_err_free(&e);
        const char *const nope[] = {"/no/such/program", NULL};
        tap_ok(open_term(nope, &t, &e) == 0,
               "a missing program still opens (it says so on the pty)");
        ab_err_free(&e);
        tap_ok(attach(t.id, &a, &e) == 0 && read_until(&a, NULL, 5000) && a.exit_code == 127,
               "... and exits 127");
        detach(&a);
        abc_term_info_clear(&t);
        int fd = conn();
        abc_term_req q = {.cwd = "/no/such/dir"};
        tap_ok(fd >= 0 && abc_term_open(fd, &q, &t, &e) < 0 && e && e->code == AB_E_NOT_FOUND,
               "a missing cwd: not found");
        ab_err_free(&e);
        close(fd);
        /* The cap: 16 running terminals. */
        const char *const sl[] = {"sleep", "600", NULL};
        int opened = 0;
        char *ids[20] = {0};
        for (int i = 0; i < 20; i++) {
                if (open_term(sl, &t, &e) < 0)
                        break;
                ids[opened++] = xstrdup(t.id);
                abc_term_info_clear(&t);
        }
        tap_ok(e && e->code == AB_E_CONFLICT,
               "a box runs a bounded number of terminals (%d more "
               "opened)",
               opened);
        ab_err_free(&e);
        for (int i = 0; i < opened; i++) {
                fd = conn();
                (void)!abc_term_close(fd, ids[i], NULL);
                close(fd);
                free(ids[i]);
        }
        /* A malformed frame on an attached stream ends that stream only. */
        const char *const sh[] = {"cat", NULL};
        tap_ok(open_term(sh, &t, &e) == 0 && attach(t.id, &a, &e) == 0, "open and attach cat");
        uint8_t junk[16] = {0x77, 0x77, 0, 0, 0, 0, 0, 0};
        (void)!write(a.fd, junk, 8);
        tap_ok(read_until(&a, NULL, 5000) && a.exit_code < 0,
               "an unexpected frame ends the stream");
        detach(&a);
        tap_ok(attach(t.id, &a, &e) == 0 &&
                   abc_term_input(a.s, "still-here\n", strlen("still-here\n")) == 0 &&
                   read_until(&a, "still-here", 5000),
               "... the terminal goes on");
        detach(&a);
        abc_term_info_clear(&t);
        ab_err_free(&e);
}

static int open_proc(const char *const *argv, const char *tag, bool close_stdin, abc_term_info *t,
                     ab_err **e)
{
        int fd = conn();
        abc_term_req q = {.argv = argv, .pipes = true, .tag = tag, .close_stdin = close_stdin};
        int r = fd < 0 ? -1 : abc_term_open(fd, &q, t, e);
        if (fd >= 0)
                close(fd);
        return r;
}

static int list_kind(bool pipes, abc_term_info **v, size_t *n)
{
        ab_err *e = NULL;
        int fd = conn();
        int r = fd < 0 ? -1 : abc_term_list_kind(fd, pipes, v, n, &e);
        if (fd >= 0)
                close(fd);
        ab_err_free(&e);
        return r;
}

static void test_procs(void)
{
        ab_err *e = NULL;
        abc_term_info t;
        const char *const argv[] = {
            "sh", "-c", "echo out-1; echo err-1 >&2; read x; echo got-$x; echo $0 >&2; exit 7",
            NULL};
        tap_ok(open_proc(argv, "{\"kind\":\"test\"}", false, &t, &e) == 0,
               "start a background process (%s)", e ? e->msg : "");
        ab_err_free(&e);
        tap_ok(t.id && t.pipes && t.running && t.pid > 1 && t.tag &&
                   !strcmp(t.tag, "{\"kind\":\"test\"}"),
               "it runs, has a pid, its tag, and says it is a process");
        abc_term_info *v = NULL;
        size_t n = 0;
        tap_ok(list_kind(true, &v, &n) == 0 && n == 1 && !strcmp(v[0].id, t.id) && v[0].tag &&
                   v[0].pid == t.pid,
               "listed among the processes, with its tag and pid");
        abc_term_infos_free(v, n);
        bool among = false;
        int lr = list_kind(false, &v, &n);
        for (size_t i = 0; lr == 0 && i < n; i++)
                among |= !strcmp(v[i].id, t.id);
        tap_ok(lr == 0 && !among, "not among the terminals");
        abc_term_infos_free(v, n);
        stream a;
        tap_ok(attach(t.id, &a, &e) == 0 && read_until(&a, "out-1", 10000), "attach: stdout");
        ab_err_free(&e);
        for (int i = 0; i < 100 && !(a.err && strstr(a.err, "err-1")); i++)
                read_until(&a, "never", 50);
        tap_ok(a.err && strstr(a.err, "err-1") && !strstr(a.out, "err-1"),
               "stderr arrives apart, as stream 2");
        int fd = conn();
        tap_ok(fd >= 0 && abc_proc_write(fd, t.id, "abc\n", 4, false, &e) == 0,
               "write its stdin without attaching");
        ab_err_free(&e);
        close(fd);
        tap_ok(read_until(&a, NULL, 10000) && strstr(a.out, "got-abc") && a.exit_code == 7,
               "it read the input, exited 7: EXIT 7");
        detach(&a);
        tap_ok(attach(t.id, &a, &e) == 0 && read_until(&a, NULL, 10000) && a.exit_code == 7 &&
                   a.out && strstr(a.out, "out-1") && strstr(a.out, "got-abc") && a.err &&
                   strstr(a.err, "err-1") && !a.info.running,
               "attaching after the exit: both streams' history, then EXIT 7");
        ab_err_free(&e);
        detach(&a);
        tap_ok(list_kind(true, &v, &n) == 0 && n == 1 && !v[0].running && v[0].exit_code == 7,
               "listed with its exit code");
        abc_term_infos_free(v, n);
        fd = conn();
        tap_ok(fd >= 0 && abc_term_close(fd, t.id, &e) == 0, "close (forget) it");
        ab_err_free(&e);
        close(fd);
        abc_term_info_clear(&t);

        /* stdin closed: cat ends; closed from the start: EOF at once */
        const char *const cat[] = {"cat", NULL};
        tap_ok(open_proc(cat, NULL, false, &t, &e) == 0 && attach(t.id, &a, &e) == 0,
               "start and attach to cat");
        ab_err_free(&e);
        fd = conn();
        tap_ok(fd >= 0 && abc_proc_write(fd, t.id, "meow\n", 5, true, &e) == 0 &&
                   read_until(&a, NULL, 10000) && strstr(a.out, "meow") && a.exit_code == 0,
               "its input, then its stdin closed: it echoes and exits 0");
        ab_err_free(&e);
        close(fd);
        fd = conn();
        tap_ok(fd >= 0 && abc_proc_write(fd, t.id, "x", 1, false, &e) < 0 && e &&
                   e->code == AB_E_CONFLICT,
               "input after the end: conflict");
        ab_err_free(&e);
        close(fd);
        detach(&a);
        abc_term_info_clear(&t);
        tap_ok(open_proc(cat, NULL, true, &t, &e) == 0 && attach(t.id, &a, &e) == 0 &&
                   read_until(&a, NULL, 10000) && a.exit_code == 0,
               "stdin closed from the start: cat exits 0 at once");
        ab_err_free(&e);
        detach(&a);
        abc_term_info_clear(&t);
        /* EOF on an attached stream */
        tap_ok(open_proc(cat, NULL, false, &t, &e) == 0 && attach(t.id, &a, &e) == 0 &&
                   abc_term_input(a.s, "purr\n", 5) == 0 && abc_term_send_eof(a.s) == 0 &&
                   read_until(&a, NULL, 10000) && strstr(a.out, "purr") && a.exit_code == 0,
               "input and EOF on the attached stream");
        ab_err_free(&e);
        detach(&a);
        abc_term_info_clear(&t);

        /* a signal goes to its process group */
        const char *const sl[] = {"sh", "-c", "sleep 3141 & wait", NULL};
        tap_ok(open_proc(sl, NULL, true, &t, &e) == 0, "start sh with a sleep");
        ab_err_free(&e);
        for (int i = 0; i < 200 && count_procs("sleep", "3141") < 1; i++)
                msleep(50);
        fd = conn();
        tap_ok(fd >= 0 && abc_term_signal(fd, t.id, SIGTERM, &e) == 0 &&
                   attach(t.id, &a, &e) == 0 && read_until(&a, NULL, 10000) &&
                   a.exit_code == 128 + SIGTERM,
               "SIGTERM: it ends with 143");
        ab_err_free(&e);
        close(fd);
        for (int i = 0; i < 100 && count_procs("sleep", "3141") > 0; i++)
                msleep(50);
        tap_ok(count_procs("sleep", "3141") == 0, "... and its child in the group too");
        detach(&a);
        abc_term_info_clear(&t);

        /* COMMAND by the box's shell, stderr merged, a snapshot of the output */
        fd = conn();
        abc_term_req cq = {.pipes = true,
                           .close_stdin = true,
                           .merge = true,
                           .command = "echo one; echo two >&2; echo three; exit 5"};
        tap_ok(fd >= 0 && abc_term_open(fd, &cq, &t, &e) == 0 && t.pipes,
               "a process from a shell command (%s)", e ? e->msg : "");
        ab_err_free(&e);
        if (fd >= 0)
                close(fd);
        tap_ok(attach(t.id, &a, &e) == 0 && read_until(&a, NULL, 10000) && a.exit_code == 5 &&
                   a.out && strstr(a.out, "one\ntwo\nthree\n") && !a.err,
               "stderr merged into stdout in order; exit 5");
        ab_err_free(&e);
        detach(&a);
        memset(&a, 0, sizeof(a));
        a.exit_code = -1;
        a.fd = conn();
        tap_ok(a.fd >= 0 && abc_term_snapshot(a.fd, t.id, &a.info, &a.s, &e) == 0 &&
                   read_until(&a, NULL, 5000) && a.closed && a.out &&
                   !strcmp(a.out, "one\ntwo\nthree\n") && a.info.lines == 3 &&
                   a.info.ended_ms > 0 && !a.info.running,
               "a snapshot: the kept output, lines 3, its end time, then EOF");
        ab_err_free(&e);
        detach(&a);
        abc_term_info_clear(&t);

        /* SIGKILL of a process ends its whole session, kept with exit 137 */
        const char *const kj[] = {"sh", "-c", "set -m; sleep 3144 & sleep 3145", NULL};
        tap_ok(open_proc(kj, NULL, true, &t, &e) == 0,
               "start sh with a job in a process group of its own");
        ab_err_free(&e);
        for (int i = 0; i < 200 && count_procs("sleep", "3145") < 1; i++)
                msleep(50);
        fd = conn();
        tap_ok(fd >= 0 && abc_term_signal(fd, t.id, SIGKILL, &e) == 0 &&
                   attach(t.id, &a, &e) == 0 && read_until(&a, NULL, 10000) && a.exit_code == 137,
               "SIGKILL: exit 137, and it is still listed");
        ab_err_free(&e);
        if (fd >= 0)
                close(fd);
        for (int i = 0; i < 100 && count_procs("sleep", "3144") > 0; i++)
                msleep(50);
        tap_ok(count_procs("sleep", "3144") == 0, "... and the job of its own group too");
        detach(&a);
        abc_term_info_clear(&t);

        /* a timeout kills its session: exit code 124, timed out */
        const char *const tsl[] = {"sh", "-c", "sleep 3142 & sleep 3143", NULL};
        fd = conn();
        abc_term_req tq = {.argv = tsl, .pipes = true, .close_stdin = true, .timeout_ms = 500};
        tap_ok(fd >= 0 && abc_term_open(fd, &tq, &t, &e) == 0 && attach(t.id, &a, &e) == 0,
               "start a process with a 500 ms timeout");
        ab_err_free(&e);
        if (fd >= 0)
                close(fd);
        tap_ok(read_until(&a, NULL, 10000) && a.exit_code == ABP_TIMEOUT_EXIT,
               "it is killed at its timeout: EXIT 124");
        bool listed = false;
        lr = list_kind(true, &v, &n);
        for (size_t i = 0; lr == 0 && i < n; i++)
                listed |= !strcmp(v[i].id, t.id) && v[i].timed_out && v[i].exit_code == 124;
        tap_ok(listed, "listed as timed out");
        abc_term_infos_free(v, n);
        for (int i = 0; i < 100 && count_procs("sleep", "3142") > 0; i++)
                msleep(50);
        tap_ok(count_procs("sleep", "3142") == 0, "... its background child too");
        detach(&a);
        fd = conn();
        if (fd >= 0) {
                (void)abc_term_close(fd, t.id, &e);
                ab_err_free(&e);
                close(fd);
        }
        abc_term_info_clear(&t);

        /* the bound: 64 running */
        const char *const sl2[] = {"sleep", "2718", NULL};
        int started = 0;
        for (int i = 0; i < 70; i++) {
                if (open_proc(sl2, NULL, true, &t, &e) == 0)
                        started++;
                else if (e && e->code != AB_E_CONFLICT)
                        tap_diag("open: %s", e->msg);
                ab_err_free(&e);
                abc_term_info_clear(&t);
        }
        tap_ok(started == 64, "64 processes run at most (%d started)", started);
        tap_ok(list_kind(true, &v, &n) == 0, "list them");
        for (size_t i = 0; i < n; i++) {
                fd = conn();
                if (fd >= 0 && abc_term_close(fd, v[i].id, &e) < 0)
                        tap_diag("close: %s", e ? e->msg : "?");
                ab_err_free(&e);
                if (fd >= 0)
                        close(fd);
        }
        abc_term_infos_free(v, n);
        tap_ok(list_kind(true, &v, &n) == 0 && n == 0, "closed: none is left");
        abc_term_infos_free(v, n);
}

int main(void)
{
        const char *bin = getenv("AGENTBOX_INIT");
        if (!bin || access(bin, X_OK) < 0)
                tap_skip_all("AGENTBOX_INIT is not set to the agentbox-init binary");
        if (access("/bin/bash", X_OK) < 0)
                tap_skip_all("no /bin/bash");
        const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(tmp, sizeof(tmp), "%s/abterm.XXXXXX", base);
        if (!mkdtemp(tmp))
                abort();
        snprintf(ws, sizeof(ws), "%s/ws", tmp);
        snprintf(sock, sizeof(sock), "%s/init.sock", tmp);
        mkdir(ws, 0755);
        signal(SIGPIPE, SIG_IGN);
        init_pid = fork();
        if (init_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                execl(bin, bin, "--listen", sock, "--workdir", ws, (char *)NULL);
                _exit(127);
        }
        for (int t = 0; t < 10000; t += 20) {
                if (access(sock, F_OK) == 0)
                        break;
                msleep(20);
        }
        tap_ok(access(sock, F_OK) == 0, "agentbox-init is listening");
        test_basic();
        test_exited_before_attach();
        test_close_kills_jobs();
        test_keeper_crash();
        test_bad();
        test_procs();
        kill(init_pid, SIGTERM);
        waitpid(init_pid, NULL, 0);
        char cmd[1200];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
        (void)!system(cmd);
        return tap_done();
}
