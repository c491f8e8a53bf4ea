/* test_init.c - agentbox-init driven through the client API (initclient.h).
 *
 * Starts $AGENTBOX_INIT --listen TMP/init.sock --workdir TMP/ws as a child
 * (not in a box; when possible in a private mount namespace holding a
 * read-only and a tiny tmpfs, for the EROFS and ENOSPC mappings), then runs
 * execs and file operations against it. Every wait is bounded. */
#include "backend/initclient.h"
#include "common/util.h"
#include "init/proto.h"
#include "tap.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static char tmp[1024], ws[1100], sock[1100];

/* Setup steps that must work for the test to mean anything. */
static void must(int r)
{
        if (r < 0) {
                printf("# setup failed: %s\n", strerror(errno));
                abort();
        }
}
static pid_t init_pid = -1;

static void msleep(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
}

static char *at(const char *rel)
{
        static char buf[4][PATH_MAX];
        static int i;
        i = (i + 1) % 4;
        snprintf(buf[i], sizeof(buf[i]), "%s/%s", tmp, rel);
        return buf[i];
}

static char *in_ws(const char *rel)
{
        static char buf[4][PATH_MAX];
        static int i;
        i = (i + 1) % 4;
        snprintf(buf[i], sizeof(buf[i]), "%s/%s", ws, rel);
        return buf[i];
}

static void put_file(const char *path, const char *s)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || ab_write_all(fd, s, strlen(s)) < 0)
                abort();
        close(fd);
}

static char *get_file(const char *path)
{
        char *s = NULL;
        if (ab_read_file(AT_FDCWD, path, &s, NULL) < 0)
                return NULL;
        return s;
}

static bool exists(const char *path)
{
        struct stat st;
        return lstat(path, &st) == 0;
}

/* Alive and not a zombie. */
static bool alive(pid_t pid)
{
        char path[64], buf[512];
        if (pid <= 0 || kill(pid, 0) < 0)
                return false;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return false;
        buf[n] = 0;
        char *p = strrchr(buf, ')');
        return p && p[1] == ' ' && p[2] != 'Z';
}

static bool gone_within(pid_t pid, int ms)
{
        for (int t = 0; t < ms; t += 10) {
                if (!alive(pid))
                        return true;
                msleep(10);
        }
        return !alive(pid);
}

static pid_t read_pid(const char *path)
{
        _cleanup_free_ char *s = get_file(path);
        return s ? (pid_t)atoi(s) : -1;
}

static int conn(void)
{
        ab_err *e = NULL;
        int fd = abc_connect(AT_FDCWD, sock, &e);
        if (fd < 0) {
                printf("# connect: %s\n", e ? e->msg : "?");
                ab_err_free(&e);
        }
        return fd;
}

/* ---- exec helpers ---- */

typedef struct outbuf {
        char *p;
        size_t n;
} outbuf;

typedef struct capture {
        outbuf o[3];
        const char *abort_on; /* stop (return -1) once stdout contains this */
        int chunks[3];
} capture;

static int collect(void *ud, int stream, const void *buf, size_t len)
{
        capture *c = ud;
        if (stream < 1 || stream > 2)
                return -1;
        outbuf *o = &c->o[stream];
        o->p = xrealloc(o->p, o->n + len + 1);
        memcpy(o->p + o->n, buf, len);
        o->n += len;
        o->p[o->n] = 0;
        c->chunks[stream]++;
        if (c->abort_on && stream == 1 && strstr(o->p, c->abort_on))
                return -1;
        return 0;
}

static void capture_free(capture *c)
{
        for (int i = 0; i < 3; i++)
                free(c->o[i].p);
        *c = (capture){0};
}

static const char *out_of(capture *c, int i)
{
        return c->o[i].p ? c->o[i].p : "";
}

/* Runs req (command filled in) and captures its output. */
static int run(abc_exec_req *req, capture *c, abc_exec_res *res, ab_err **err)
{
        int fd = conn();
        if (fd < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "no connection");
        int r = abc_exec(fd, req, collect, c, res, err);
        close(fd);
        return r;
}

static int run_cmd(const char *cmd, capture *c, abc_exec_res *res, ab_err **err)
{
        abc_exec_req req = {.command = cmd, .stdin_fd = -1, .timeout_ms = 30000};
        return run(&req, c, res, err);
}

static void test_ping(void)
{
        int fd = conn();
        ab_err *e = NULL;
        char *v = NULL;
        tap_ok(fd >= 0 && abc_ping(fd, &v, &e) == 0, "ping");
        TAP_IS_STR(v, AGENTBOX_VERSION, "ping answers the version");
        free(v);
        v = NULL;
        close(fd);

        /* dirfd + name, and a path longer than sun_path (through a symlink to the socket). */
        int dfd = open(tmp, O_PATH | O_DIRECTORY | O_CLOEXEC);
        fd = abc_connect(dfd, "init.sock", &e);
        tap_ok(fd >= 0 && abc_ping(fd, &v, &e) == 0, "connect relative to a directory fd");
        free(v);
        v = NULL;
        close(fd);
        close(dfd);
        char longdir[PATH_MAX];
        snprintf(longdir, sizeof(longdir), "%s/%0120d", tmp, 0);
        must(mkdir(longdir, 0755));
        char longsock[PATH_MAX + 16];
        snprintf(longsock, sizeof(longsock), "%s/s", longdir);
        must(symlink(sock, longsock));
        fd = abc_connect(AT_FDCWD, longsock, &e);
        tap_ok(strlen(longsock) > 108 && fd >= 0 && abc_ping(fd, &v, &e) == 0,
               "connect to a path longer than sun_path");
        free(v);
        close(fd);
        ab_err_free(&e);
        fd = abc_connect(AT_FDCWD, at("no-such.sock"), &e);
        tap_ok(fd < 0 && e && e->code == AB_E_UNAVAILABLE, "connect to nothing -> unavailable");
        ab_err_free(&e);
}

static void test_exec_basic(void)
{
        capture c = {0};
        abc_exec_res res;
        ab_err *e = NULL;

        int r = run_cmd("echo out; echo err >&2", &c, &res, &e);
        tap_ok(r == 0, "echo: exec succeeds%s%s", e ? ": " : "", e ? e->msg : "");
        TAP_IS_STR(out_of(&c, 1), "out\n", "echo: stdout");
        TAP_IS_STR(out_of(&c, 2), "err\n", "echo: stderr");
        tap_ok(res.exit_code == 0 && !res.timed_out && !res.truncated && res.stdout_bytes == 4 &&
                   res.stderr_bytes == 4,
               "echo: exit 0, byte counts, no flags");
        capture_free(&c);

        r = run_cmd("exit 3", &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 3, "exit 3 -> exit_code 3 (%d)", res.exit_code);
        capture_free(&c);
        r = run_cmd("kill -9 $$", &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 128 + 9, "killed by SIGKILL -> 137 (%d)", res.exit_code);
        capture_free(&c);
        r = run_cmd("exec 2>&-; kill -TERM $$", &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 128 + 15, "killed by SIGTERM -> 143 (%d)", res.exit_code);
        capture_free(&c);

        /* The command is one argument to bash: quotes and metacharacters reach it intact. */
        r = run_cmd("printf '%s|' \"a b\" 'c;d' $((6*7))", &c, &res, &e);
        TAP_IS_STR(out_of(&c, 1), "a b|c;d|42|", "command passed to bash -lc as one argument");
        capture_free(&c);

        /* Only 0, 1, 2 are open; no signal blocked or ignored. */
        /* ls sees its own 0-2 and the directory it reads (3); a leaked fd would be more. */
        r = run_cmd("ls /proc/self/fd | tr '\\n' ' '", &c, &res, &e);
        TAP_IS_STR(out_of(&c, 1), "0 1 2 3 ", "no fd leaks into the command");
        capture_free(&c);
        /* bash blocks and ignores signals for itself; what it starts shows the reset. */
        r = run_cmd("grep -E '^Sig(Blk|Ign)' /proc/self/status | tr '\\t\\n' ' ;'", &c, &res, &e);
        TAP_IS_STR(out_of(&c, 1), "SigBlk: 0000000000000000;SigIgn: 0000000000000000;",
                   "signal mask and dispositions reset");
        capture_free(&c);
        r = run_cmd("cut -d' ' -f6 /proc/$$/stat; echo $$", &c, &res, &e);
        {
                int sid = 0, pid = -1;
                sscanf(out_of(&c, 1), "%d %d", &sid, &pid);
                tap_ok(r == 0 && sid == pid, "the command leads its own session (%d/%d)", sid, pid);
        }
        capture_free(&c);
        ab_err_free(&e);
}

static void test_stdin(void)
{
        capture c = {0};
        abc_exec_res res;
        ab_err *e = NULL;

        abc_exec_req req = {.command = "cat", .stdin_fd = -1, .timeout_ms = 30000};
        req.stdin_data = "hello\nworld";
        req.stdin_len = 11;
        tap_ok(run(&req, &c, &res, &e) == 0, "stdin inline");
        TAP_IS_STR(out_of(&c, 1), "hello\nworld", "stdin inline reaches the command");
        capture_free(&c);

        tap_ok(run_cmd("cat; echo done", &c, &res, &e) == 0 && strcmp(out_of(&c, 1), "done\n") == 0,
               "no stdin: /dev/null, cat ends at once");
        capture_free(&c);

        /* Streamed from a pipe fed by a child process. */
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                abort();
        pid_t w = fork();
        if (w == 0) {
                char blk[1000];
                memset(blk, 'q', sizeof(blk));
                for (int i = 0; i < 300; i++)
                        if (ab_write_all(p[1], blk, sizeof(blk)) < 0)
                                _exit(1);
                _exit(0);
        }
        close(p[1]);
        req = (abc_exec_req){.command = "wc -c", .stdin_fd = p[0], .timeout_ms = 30000};
        tap_ok(run(&req, &c, &res, &e) == 0, "stdin streamed from a pipe");
        TAP_IS_INT(atoi(out_of(&c, 1)), 300000, "all 300000 streamed bytes arrive");
        close(p[0]);
        waitpid(w, NULL, 0);
        capture_free(&c);

        /* stdin_data and stdin_fd together: data first. */
        put_file(at("stdin.txt"), "def");
        int fd = open(at("stdin.txt"), O_RDONLY | O_CLOEXEC);
        req = (abc_exec_req){.command = "cat",
                             .stdin_data = "abc",
                             .stdin_len = 3,
                             .stdin_fd = fd,
                             .timeout_ms = 30000};
        tap_ok(run(&req, &c, &res, &e) == 0 && strcmp(out_of(&c, 1), "abcdef") == 0,
               "stdin_data then stdin_fd");
        close(fd);
        capture_free(&c);

        /* Larger than the inline limit: streamed from memory. */
        size_t n = 600000;
        char *big = xmalloc(n);
        for (size_t i = 0; i < n; i++)
                big[i] = (char)('a' + i % 26);
        req = (abc_exec_req){.command = "md5sum | cut -c1-32",
                             .stdin_data = big,
                             .stdin_len = n,
                             .stdin_fd = -1,
                             .timeout_ms = 30000};
        int r = run(&req, &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 0 && !res.timed_out, "600 kB stdin from memory");
        if (r < 0 || res.exit_code || res.timed_out)
                printf("# r=%d exit=%d timed_out=%d stdout_bytes=%llu stderr=%s err=%s\n", r,
                       res.exit_code, res.timed_out, (unsigned long long)res.stdout_bytes,
                       out_of(&c, 2), e ? e->msg : "");
        put_file(at("big.in"), "");
        int bfd = open(at("big.in"), O_WRONLY | O_TRUNC | O_CLOEXEC);
        if (bfd < 0 || ab_write_all(bfd, big, n) < 0)
                abort();
        close(bfd);
        capture c2 = {0};
        char cmd[PATH_MAX + 64];
        snprintf(cmd, sizeof(cmd), "md5sum < '%s' | cut -c1-32", at("big.in"));
        tap_ok(run_cmd(cmd, &c2, &res, &e) == 0 && c.o[1].n == 33 &&
                   strcmp(out_of(&c, 1), out_of(&c2, 1)) == 0,
               "... arrives intact (md5 %.32s)", out_of(&c, 1));
        capture_free(&c);
        capture_free(&c2);
        free(big);

        /* A command that does not read its stdin while it is streamed. */
        req = (abc_exec_req){.command = "exit 0", .stdin_fd = -1, .timeout_ms = 30000};
        req.stdin_data = xzalloc(2000000);
        req.stdin_len = 2000000;
        tap_ok(run(&req, &c, &res, &e) == 0 && res.exit_code == 0,
               "unread streamed stdin does not hang the exec");
        free((void *)req.stdin_data);
        capture_free(&c);
        ab_err_free(&e);
}

static void test_env_cwd(void)
{
        capture c = {0};
        abc_exec_res res;
        ab_err *e = NULL;
        const char *env[] = {"FOO=bar baz", "HOME=/home-override", "LANG=C", NULL};

        abc_exec_req req = {.command = "printf '%s|%s|%s|%s|%s|%s' \"$FOO\" \"$HOME\" \"$LANG\" "
                                       "\"$TERM\" \"$USER\" \"$SHELL\"",
                            .env = env,
                            .stdin_fd = -1,
                            .timeout_ms = 30000};
        tap_ok(run(&req, &c, &res, &e) == 0, "exec with env");
        TAP_IS_STR(out_of(&c, 1), "bar baz|/home-override|C|dumb|root|/bin/bash",
                   "request env wins over the base env");
        capture_free(&c);

        char want[PATH_MAX];
        snprintf(want, sizeof(want), "%s\n", ws);
        tap_ok(run_cmd("echo $HOME", &c, &res, &e) == 0, "exec");
        TAP_IS_STR(out_of(&c, 1), want, "HOME defaults to the workdir");
        capture_free(&c);
        tap_ok(run_cmd("pwd -P", &c, &res, &e) == 0, "exec");
        TAP_IS_STR(out_of(&c, 1), want, "cwd defaults to the workdir");
        capture_free(&c);

        mkdir(in_ws("sub"), 0755);
        req = (abc_exec_req){.command = "pwd -P", .cwd = "sub", .stdin_fd = -1};
        snprintf(want, sizeof(want), "%s/sub\n", ws);
        tap_ok(run(&req, &c, &res, &e) == 0, "exec with relative cwd");
        TAP_IS_STR(out_of(&c, 1), want, "relative cwd is under the workdir");
        capture_free(&c);
        req.cwd = tmp;
        snprintf(want, sizeof(want), "%s\n", tmp);
        tap_ok(run(&req, &c, &res, &e) == 0, "exec with absolute cwd");
        TAP_IS_STR(out_of(&c, 1), want, "absolute cwd");
        capture_free(&c);

        char cmd[PATH_MAX + 16];
        snprintf(cmd, sizeof(cmd), "touch '%s'", at("ran"));
        req = (abc_exec_req){.command = cmd, .cwd = "no-such-dir", .stdin_fd = -1};
        int r = run(&req, &c, &res, &e);
        tap_ok(r < 0 && e && e->code == AB_E_NOT_FOUND, "missing cwd -> not_found");
        tap_ok(e && strstr(e->msg, "no-such-dir") != NULL, "... naming the path (%s)",
               e ? e->msg : "");
        tap_ok(!exists(at("ran")), "... and nothing ran");
        ab_err_free(&e);
        capture_free(&c);

        const char *badenv[] = {"NOEQUALS", NULL};
        req = (abc_exec_req){.command = "true", .env = badenv, .stdin_fd = -1};
        r = run(&req, &c, &res, &e);
        tap_ok(r < 0 && e && e->code == AB_E_INVALID, "env entry without '=' -> invalid_argument");
        ab_err_free(&e);
        capture_free(&c);
}

static void test_timeout(void)
{
        capture c = {0};
        abc_exec_res res;
        ab_err *e = NULL;
        char cmd[3 * PATH_MAX];

        unlink(at("gc.pid"));
        unlink(at("gc2.pid"));
        snprintf(cmd, sizeof(cmd),
                 "sh -c 'sleep 300 & echo $! > %s'; "
                 "setsid sh -c 'sleep 301 & echo $! > %s'; "
                 "echo $$ > %s; sleep 300",
                 at("gc.pid"), at("gc2.pid"), at("main.pid"));
        abc_exec_req req = {.command = cmd, .stdin_fd = -1, .timeout_ms = 700};
        int r = run(&req, &c, &res, &e);
        tap_ok(r == 0 && res.timed_out, "timeout fires (timed_out)");
        TAP_IS_INT(res.exit_code, ABP_TIMEOUT_EXIT, "timed-out exec reports 124");
        pid_t gc = read_pid(at("gc.pid")), gc2 = read_pid(at("gc2.pid")),
              main_pid = read_pid(at("main.pid"));
        tap_ok(gc > 0 && gone_within(gc, 5000), "double-forked grandchild %d is gone", (int)gc);
        tap_ok(gc2 > 0 && gone_within(gc2, 5000), "grandchild in another session %d is gone",
               (int)gc2);
        tap_ok(main_pid > 0 && gone_within(main_pid, 5000), "main process is gone");
        ab_err_free(&e);
        capture_free(&c);

        /* A timeout while output streams and stdin is still open. */
        req = (abc_exec_req){.command = "yes", .stdin_fd = -1, .timeout_ms = 300};
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                abort();
        req.stdin_fd = p[0];
        r = run(&req, &c, &res, &e);
        tap_ok(r == 0 && res.timed_out && res.truncated && res.stdout_bytes > 0,
               "timeout of a busy writer with stdin still open");
        close(p[0]);
        close(p[1]);
        ab_err_free(&e);
        capture_free(&c);
}

static void test_background(void)
{
        capture c = {0};
        abc_exec_res res;
        ab_err *e = NULL;
        char cmd[2 * PATH_MAX];

        snprintf(cmd, sizeof(cmd), "sleep 30 & echo $! > %s; echo started", at("bg.pid"));
        int r = run_cmd(cmd, &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 0 && !res.timed_out,
               "exec with a background child returns");
        TAP_IS_STR(out_of(&c, 1), "started\n", "its output before the exit is delivered");
        pid_t bg = read_pid(at("bg.pid"));
        tap_ok(alive(bg), "the background sleep %d still runs (the exec did not wait for it)",
               (int)bg);
        tap_ok(res.duration_ms < 20000, "duration %llu ms is well under the 30 s sleep",
               (unsigned long long)res.duration_ms);
        capture_free(&c);

        /* A background process that keeps writing to the pipes must not die of SIGPIPE. */
        snprintf(cmd, sizeof(cmd),
                 "(trap '' TERM; while :; do echo tick; echo tock >&2; sleep 0.05; done) & "
                 "echo $! > %s",
                 at("writer.pid"));
        r = run_cmd(cmd, &c, &res, &e);
        pid_t w = read_pid(at("writer.pid"));
        tap_ok(r == 0 && res.exit_code == 0, "exec with a background writer returns");
        msleep(400);
        tap_ok(alive(w), "the background writer %d survives its exec's end", (int)w);
        if (w > 0)
                kill(w, SIGKILL);
        tap_ok(gone_within(w, 5000), "... and is reaped once killed");

        /* nohup server & with its output redirected. */
        snprintf(cmd, sizeof(cmd), "nohup sleep 30 >/dev/null 2>&1 & echo $! > %s",
                 at("nohup.pid"));
        r = run_cmd(cmd, &c, &res, &e);
        pid_t nh = read_pid(at("nohup.pid"));
        tap_ok(r == 0 && alive(nh), "nohup'ed server survives");
        capture_free(&c);
        ab_err_free(&e);
}

static void test_output_cap(void)
{
        capture c = {0};
        abc_exec_res res;
        ab_err *e = NULL;

        int r;
        abc_exec_req req = {.command = "head -c 5000 /dev/zero | tr '\\0' a; printf err >&2",
                            .stdin_fd = -1,
                            .timeout_ms = 30000,
                            .output_cap = 1000};
        tap_ok(run(&req, &c, &res, &e) == 0, "exec over the output cap");
        char want[1200];
        memset(want, 'a', 1000);
        strcpy(want + 1000, "\n[agentbox: output truncated after 1000 bytes]\n");
        TAP_IS_STR(out_of(&c, 1), want, "1000 bytes kept, then the exact marker");
        TAP_IS_STR(out_of(&c, 2), "err", "stderr under the cap is untouched");
        tap_ok(res.truncated && res.stdout_bytes == 5000 && res.stderr_bytes == 3,
               "truncated flag and produced byte counts");
        capture_free(&c);

        req.command = "head -c 300000 /dev/zero";
        req.output_cap = 10;
        tap_ok(run(&req, &c, &res, &e) == 0, "exec far over the cap");
        const char *m = "[agentbox: output truncated after 10 bytes]";
        const char *first = strstr(c.o[1].p ? c.o[1].p + 10 : "", m);
        tap_ok(c.o[1].n == 10 + strlen(m) + 2 && first && !strstr(first + 1, m),
               "the marker comes exactly once, as the last chunk");
        capture_free(&c);

        /* Large output under the cap: every byte, in many chunks. */
        req.command = "head -c 3000000 /dev/zero";
        req.output_cap = 4000000;
        /* (arguments are evaluated in any order: run first, then report) */
        r = run(&req, &c, &res, &e);
        tap_ok(r == 0 && c.o[1].n == 3000000 && !res.truncated && c.chunks[1] > 1,
               "3 MB of output streams through (%zu bytes in %d chunks)", c.o[1].n, c.chunks[1]);
        capture_free(&c);

        /* Default cap: 1 MiB. */
        req.command = "head -c 1100000 /dev/zero";
        req.output_cap = 0;
        tap_ok(run(&req, &c, &res, &e) == 0 && res.truncated &&
                   c.o[1].n == (1 << 20) + strlen("\n[agentbox: output truncated after 1048576 "
                                                  "bytes]\n"),
               "default cap is 1 MiB");
        capture_free(&c);
        ab_err_free(&e);
}

static void test_disconnect(void)
{
        capture c = {.abort_on = "ready"};
        abc_exec_res res;
        ab_err *e = NULL;
        char cmd[2 * PATH_MAX];

        snprintf(cmd, sizeof(cmd),
                 "sleep 300 & echo $! > %s; sh -c 'sleep 301 & echo $! > %s'; echo ready; wait",
                 at("dc.pid"), at("dc2.pid"));
        int fd = conn();
        abc_exec_req req = {.command = cmd, .stdin_fd = -1};
        int r = abc_exec(fd, &req, collect, &c, &res, &e);
        tap_ok(r < 0 && e, "a callback returning <0 aborts the exec");
        close(fd);
        pid_t a = read_pid(at("dc.pid")), b = read_pid(at("dc2.pid"));
        tap_ok(a > 0 && gone_within(a, 5000), "disconnect kills the exec's child %d", (int)a);
        tap_ok(b > 0 && gone_within(b, 5000), "... and its orphaned grandchild %d", (int)b);
        ab_err_free(&e);
        capture_free(&c);
}

typedef struct worker {
        int idx;
        int rc;
        abc_exec_res res;
        capture c;
} worker;

static void *work(void *arg)
{
        worker *w = arg;
        char cmd[3 * PATH_MAX];
        ab_err *e = NULL;
        /* Each exec waits until all ten have started: they must run at the same time. */
        snprintf(cmd, sizeof(cmd),
                 "touch %s/bar.%d; while [ $(ls %s | grep -c '^bar') -lt 10 ]; do sleep 0.02; "
                 "done; echo %d",
                 at("conc"), w->idx, at("conc"), w->idx);
        abc_exec_req req = {.command = cmd, .stdin_fd = -1, .timeout_ms = 30000};
        w->rc = run(&req, &w->c, &w->res, &e);
        ab_err_free(&e);
        return NULL;
}

static void test_concurrent(void)
{
        worker w[10];
        pthread_t t[10];
        mkdir(at("conc"), 0755);
        for (int i = 0; i < 10; i++) {
                w[i] = (worker){.idx = i};
                if (pthread_create(&t[i], NULL, work, &w[i]) != 0)
                        abort();
        }
        int good = 0;
        for (int i = 0; i < 10; i++) {
                char want[16];
                pthread_join(t[i], NULL);
                snprintf(want, sizeof(want), "%d\n", i);
                if (w[i].rc == 0 && !w[i].res.timed_out && w[i].res.exit_code == 0 &&
                    strcmp(out_of(&w[i].c, 1), want) == 0)
                        good++;
                capture_free(&w[i].c);
        }
        TAP_IS_INT(good, 10, "10 concurrent execs all ran together and finished");
}

/* A peer that is not a healthy init. */
static void test_bad_peers(void)
{
        ab_err *e = NULL;
        abc_exec_res res;
        abc_exec_req req = {.command = "true", .stdin_fd = -1};

        /* Garbage from "init". */
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                abort();
        static const uint8_t junk[] = {0x02, 0x02, 0, 0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3};
        tap_ok(write(sv[1], junk, sizeof(junk)) == (ssize_t)sizeof(junk), "junk written");
        int r = abc_exec(sv[0], &req, NULL, NULL, &res, &e);
        tap_ok(r < 0 && e && e->code == AB_E_UNAVAILABLE &&
                   strcmp(e->msg, "box init is not responding") == 0,
               "garbage from init -> unavailable");
        ab_err_free(&e);
        close(sv[0]);
        close(sv[1]);

        /* A connection that drops. */
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                abort();
        close(sv[1]);
        char *v = NULL;
        r = abc_ping(sv[0], &v, &e);
        tap_ok(r < 0 && e && e->code == AB_E_UNAVAILABLE, "dropped connection -> unavailable");
        ab_err_free(&e);
        close(sv[0]);

        /* An unexpected but well-formed frame (a DATA for a stat). */
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                abort();
        abp_buf b = {0};
        if (abp_enc_data(&b, 1, "x", 1) < 0 || abp_send(sv[1], &b, 1000) < 0)
                abort();
        abc_stat st;
        r = abc_stat_path(sv[0], "x", &st, &e);
        tap_ok(r < 0 && e && e->code == AB_E_UNAVAILABLE, "unexpected frame -> unavailable");
        ab_err_free(&e);
        close(sv[0]);
        close(sv[1]);
        abp_buf_free(&b);

        /* Init survives garbage and unknown requests. */
        int fd = conn();
        static const uint8_t big[] = {0x01, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f};
        abp_reader rd = {0};
        abp_frame f;
        abp_error er;
        tap_ok(fd >= 0 && write(fd, big, sizeof(big)) == (ssize_t)sizeof(big) &&
                   abp_recv(fd, &rd, &f, 10000) == 0 && abp_dec_error(&f, &er) == 0 &&
                   strcmp(er.code, "invalid_argument") == 0,
               "init answers an oversize frame with invalid_argument");
        close(fd);
        abp_reader_free(&rd);
        fd = conn();
        if (fd < 0 || abp_enc_empty(&b, 0x77) < 0 || abp_send(fd, &b, 1000) < 0)
                abort();
        tap_ok(abp_recv(fd, &rd, &f, 10000) == 0 && abp_dec_error(&f, &er) == 0 &&
                   strstr(er.message, "unknown request type"),
               "init answers an unknown request type with an error");
        close(fd);
        abp_reader_free(&rd);
        abp_buf_free(&b);
        fd = conn();
        tap_ok(fd >= 0 && close(fd) == 0, "a client that connects and leaves");
        fd = conn();
        r = fd >= 0 ? abc_ping(fd, &v, &e) : -1;
        tap_ok(r == 0, "init still serves after all that");
        free(v);
        close(fd);
        ab_err_free(&e);
}

/* ---- files ---- */

static int read_to(const char *path, uint64_t off, uint64_t len, capture *c, ab_err **e)
{
        int fd = conn();
        int r = abc_read(fd, path, off, len, collect, c, e);
        close(fd);
        return r;
}

static int write_to(const char *path, const char *data, uint32_t flags, uint32_t mode, ab_err **e)
{
        int fd = conn();
        int r = abc_write(fd, path, data, strlen(data), -1, flags, mode, e);
        close(fd);
        return r;
}

static int stat_of(const char *path, abc_stat *st, ab_err **e)
{
        int fd = conn();
        int r = abc_stat_path(fd, path, st, e);
        close(fd);
        return r;
}

static int list_of(const char *path, int depth, abc_dirent **d, size_t *n, ab_err **e)
{
        int fd = conn();
        int r = abc_list(fd, path, depth, d, n, e);
        close(fd);
        return r;
}

/* Expects the call to have failed with `code` and a message naming `name`. */
static void expect_err(int r, ab_err **e, ab_code code, const char *name, const char *what)
{
        tap_ok(r < 0 && *e && (*e)->code == code && (!name || strstr((*e)->msg, name)),
               "%s -> %s (%s)", what, ab_code_name(code), *e ? (*e)->msg : "no error");
        ab_err_free(e);
}

static void test_read_write(void)
{
        int r;
        ab_err *e = NULL;
        capture c = {0};
        abc_stat st = {0};

        tap_ok(write_to("a.txt", "hello", 0, 0, &e) == 0, "write a.txt");
        _cleanup_free_ char *s = get_file(in_ws("a.txt"));
        TAP_IS_STR(s, "hello", "relative paths land in the workdir");
        tap_ok(read_to("a.txt", 0, 0, &c, &e) == 0 && strcmp(out_of(&c, 1), "hello") == 0,
               "read it back");
        capture_free(&c);
        tap_ok(read_to(in_ws("a.txt"), 1, 3, &c, &e) == 0 && strcmp(out_of(&c, 1), "ell") == 0,
               "read with offset and length (absolute path)");
        capture_free(&c);
        tap_ok(read_to("a.txt", 100, 0, &c, &e) == 0 && c.o[1].n == 0, "read past the end");
        capture_free(&c);
        tap_ok(stat_of("a.txt", &st, &e) == 0 && st.type == ABC_FILE && st.size == 5 &&
                   st.mode == 0644 && !st.link,
               "new file: type file, size 5, mode 0644");
        struct stat hs;
        tap_ok(lstat(in_ws("a.txt"), &hs) == 0 && hs.st_mtim.tv_sec == st.mtime, "mtime");
        free(st.link);

        expect_err(read_to("missing.txt", 0, 0, &c, &e), &e, AB_E_NOT_FOUND, "missing.txt",
                   "read of a missing file");
        capture_free(&c);
        expect_err(read_to("sub", 0, 0, &c, &e), &e, AB_E_INVALID, "sub", "read of a directory");
        expect_err(read_to("a.txt/x", 0, 0, &c, &e), &e, AB_E_INVALID, "a.txt/x",
                   "read through a file (ENOTDIR)");
        char longname[400];
        memset(longname, 'n', 300);
        longname[300] = 0;
        expect_err(read_to(longname, 0, 0, &c, &e), &e, AB_E_INVALID, NULL,
                   "name too long (ENAMETOOLONG)");
        must(symlink("loop", in_ws("loop")));
        expect_err(read_to("loop", 0, 0, &c, &e), &e, AB_E_INVALID, "loop", "symlink loop (ELOOP)");
        char magic[64];
        snprintf(magic, sizeof(magic), "/proc/%d/cwd/a.txt", (int)init_pid);
        expect_err(read_to(magic, 0, 0, &c, &e), &e, AB_E_INVALID, NULL,
                   "magic link /proc/PID/cwd refused");
        capture_free(&c);

        tap_ok(write_to("d1/d2/f.txt", "deep", ABC_W_MKPARENTS, 0, &e) == 0,
               "write with mkparents");
        free(s);
        s = get_file(in_ws("d1/d2/f.txt"));
        TAP_IS_STR(s, "deep", "... created the parents");
        expect_err(write_to("x1/y/f.txt", "no", 0, 0, &e), &e, AB_E_NOT_FOUND, "x1/y/f.txt",
                   "write without mkparents into a missing dir");
        expect_err(write_to("d1", "no", 0, 0, &e), &e, AB_E_INVALID, "d1",
                   "write onto a directory (EISDIR)");
        expect_err(write_to("d1", "no", ABC_W_APPEND, 0, &e), &e, AB_E_INVALID, "d1",
                   "append onto a directory");

        tap_ok(write_to("log", "a", 0, 0, &e) == 0 &&
                   write_to("log", "b", ABC_W_APPEND, 0, &e) == 0 &&
                   write_to("log", "c", ABC_W_APPEND, 0, &e) == 0,
               "write then append twice");
        free(s);
        s = get_file(in_ws("log"));
        TAP_IS_STR(s, "abc", "append appends");
        tap_ok(write_to("newlog", "x", ABC_W_APPEND, 0640, &e) == 0 &&
                   stat_of("newlog", &st, &e) == 0 && st.mode == 0640,
               "append creates a new file with the mode");
        free(st.link);

        expect_err(write_to("a.txt", "x", ABC_W_EXCL, 0, &e), &e, AB_E_CONFLICT, "a.txt",
                   "excl write of an existing file");
        expect_err(write_to("log", "x", ABC_W_EXCL | ABC_W_APPEND, 0, &e), &e, AB_E_CONFLICT, "log",
                   "excl append of an existing file");
        tap_ok(write_to("fresh", "x", ABC_W_EXCL, 0, &e) == 0, "excl write of a new file");

        /* Atomic overwrite: a new inode replaces the old one; the mode is kept. */
        tap_ok(write_to("m.sh", "old", 0, 0750, &e) == 0 && stat_of("m.sh", &st, &e) == 0 &&
                   st.mode == 0750,
               "write with mode 0750");
        free(st.link);
        must(link(in_ws("m.sh"), in_ws("m.old")));
        tap_ok(write_to("m.sh", "new content", 0, 0, &e) == 0, "overwrite it");
        r = stat_of("m.sh", &st, &e);
        tap_ok(r == 0 && st.mode == 0750 && st.size == 11, "overwrite keeps the mode 0750 (%o)",
               st.mode);
        free(st.link);
        free(s);
        s = get_file(in_ws("m.old"));
        TAP_IS_STR(s, "old", "the old inode is untouched (temp file + rename)");
        free(s);
        s = get_file(in_ws("m.sh"));
        TAP_IS_STR(s, "new content", "the new content is in place");

        /* Writing over a symlink replaces the link, not its target. */
        put_file(at("target.txt"), "target");
        must(symlink(at("target.txt"), in_ws("wlink")));
        tap_ok(write_to("wlink", "via link", 0, 0, &e) == 0, "write over a symlink");
        free(s);
        s = get_file(at("target.txt"));
        TAP_IS_STR(s, "target", "the symlink's target is not written");
        expect_err(write_to("loop", "x", ABC_W_APPEND, 0, &e), &e, AB_E_INVALID, "loop",
                   "append through a symlink is refused");

        /* Multi-chunk write from an fd, read back. */
        size_t n = 200000;
        char *big = xmalloc(n);
        for (size_t i = 0; i < n; i++)
                big[i] = (char)(i * 7);
        int bfd = open(at("big.src"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (bfd < 0 || ab_write_all(bfd, big, n) < 0 || lseek(bfd, 0, SEEK_SET) < 0)
                abort();
        int fd = conn();
        r = abc_write(fd, "big.bin", NULL, 0, bfd, 0, 0, &e);
        close(fd);
        close(bfd);
        tap_ok(r == 0, "write 200 kB from an fd");
        r = read_to("big.bin", 0, 0, &c, &e);
        tap_ok(r == 0 && c.o[1].n == n && memcmp(c.o[1].p, big, n) == 0 && c.chunks[1] > 1,
               "read 200 kB back in %d chunks", c.chunks[1]);
        capture_free(&c);
        free(big);

        /* No temp file is left behind by all this. */
        abc_dirent *d = NULL;
        size_t nd = 0;
        int tmps = 0;
        tap_ok(list_of(".", 1, &d, &nd, &e) == 0, "list the workdir");
        for (size_t i = 0; i < nd; i++)
                if (strstr(d[i].path, "abtmp"))
                        tmps++;
        TAP_IS_INT(tmps, 0, "no temp files left behind");
        abc_dirents_free(d, nd);
        ab_err_free(&e);
}

static void test_list_stat(void)
{
        ab_err *e = NULL;
        abc_dirent *d = NULL;
        size_t n = 0;
        abc_stat st;

        mkdir(in_ws("L"), 0755);
        mkdir(in_ws("L/a"), 0755);
        mkdir(in_ws("L/c"), 0700);
        put_file(in_ws("L/b"), "bb");
        put_file(in_ws("L/a/y"), "");
        put_file(in_ws("L/a/x"), "");
        put_file(in_ws("L/c/z"), "");
        must(symlink("a", in_ws("L/s")));

        tap_ok(list_of("L", 1, &d, &n, &e) == 0, "list depth 1");
        const char *want1[] = {"a", "b", "c", "s"};
        const abc_ftype types1[] = {ABC_DIR, ABC_FILE, ABC_DIR, ABC_SYMLINK};
        bool ok = n == 4;
        for (size_t i = 0; ok && i < 4; i++)
                ok = strcmp(d[i].path, want1[i]) == 0 && d[i].st.type == types1[i];
        tap_ok(ok, "depth 1: a b c s, sorted, with types");
        tap_ok(n == 4 && d[1].st.size == 2 && d[2].st.mode == 0700 && d[3].st.link &&
                   strcmp(d[3].st.link, "a") == 0,
               "sizes, modes and symlink targets");
        abc_dirents_free(d, n);

        tap_ok(list_of("L", 2, &d, &n, &e) == 0, "list depth 2");
        const char *want2[] = {"a", "a/x", "a/y", "b", "c", "c/z", "s"};
        ok = n == 7;
        for (size_t i = 0; ok && i < 7; i++)
                ok = strcmp(d[i].path, want2[i]) == 0;
        tap_ok(ok, "depth 2: sorted by path, symlinked dir not descended");
        abc_dirents_free(d, n);

        expect_err(list_of("L/b", 1, &d, &n, &e), &e, AB_E_INVALID, "L/b", "list of a file");
        expect_err(list_of("nope", 1, &d, &n, &e), &e, AB_E_NOT_FOUND, "nope",
                   "list of a missing dir");

        tap_ok(stat_of("L/s", &st, &e) == 0 && st.type == ABC_SYMLINK && st.link &&
                   strcmp(st.link, "a") == 0,
               "stat of a symlink is lstat, with its target");
        free(st.link);
        tap_ok(stat_of("L/a", &st, &e) == 0 && st.type == ABC_DIR && !st.link, "stat of a dir");
        expect_err(stat_of("L/none", &st, &e), &e, AB_E_NOT_FOUND, "L/none", "stat of nothing");
        ab_err_free(&e);
}

static void test_delete_mkdir_rename(void)
{
        ab_err *e = NULL;
        abc_stat st;
        int fd;

        /* Recursive delete must not follow a symlink to a directory outside. */
        mkdir(at("outside"), 0755);
        put_file(at("outside/keep"), "keep");
        mkdir(in_ws("del"), 0755);
        mkdir(in_ws("del/sub"), 0755);
        put_file(in_ws("del/sub/f"), "f");
        put_file(in_ws("del/g"), "g");
        must(symlink(at("outside"), in_ws("del/out")));
        must(symlink(at("outside"), in_ws("del/sub/out2")));

        fd = conn();
        expect_err(abc_delete(fd, "del", false, &e), &e, AB_E_CONFLICT, "del",
                   "non-recursive delete of a non-empty dir");
        close(fd);
        fd = conn();
        tap_ok(abc_delete(fd, "del", true, &e) == 0, "recursive delete");
        close(fd);
        tap_ok(!exists(in_ws("del")), "the tree is gone");
        tap_ok(exists(at("outside/keep")), "the symlinked outside dir's contents survive");

        must(symlink(at("outside"), in_ws("dlink")));
        fd = conn();
        tap_ok(abc_delete(fd, "dlink", false, &e) == 0 && !exists(in_ws("dlink")) &&
                   exists(at("outside/keep")),
               "delete of a symlink to a dir removes the link only");
        close(fd);
        fd = conn();
        tap_ok(abc_delete(fd, "a.txt", false, &e) == 0 && !exists(in_ws("a.txt")),
               "delete of a file");
        close(fd);
        fd = conn();
        expect_err(abc_delete(fd, "a.txt", false, &e), &e, AB_E_NOT_FOUND, "a.txt",
                   "delete of a missing file");
        close(fd);
        fd = conn();
        expect_err(abc_delete(fd, "/", true, &e), &e, AB_E_INVALID, NULL, "delete of /");
        close(fd);

        fd = conn();
        tap_ok(abc_mkdir(fd, "m1/m2/m3", true, 0700, &e) == 0, "mkdir with parents");
        close(fd);
        int r = stat_of("m1/m2/m3", &st, &e);
        tap_ok(r == 0 && st.type == ABC_DIR && st.mode == 0700, "... final dir has mode 0700 (%o)",
               st.mode);
        fd = conn();
        tap_ok(abc_mkdir(fd, "m1/m2", true, 0, &e) == 0, "mkdir -p of an existing dir is fine");
        close(fd);
        fd = conn();
        expect_err(abc_mkdir(fd, "m1", false, 0, &e), &e, AB_E_CONFLICT, "m1",
                   "mkdir of an existing dir");
        close(fd);
        fd = conn();
        expect_err(abc_mkdir(fd, "q1/q2", false, 0, &e), &e, AB_E_NOT_FOUND, "q1/q2",
                   "mkdir without parents");
        close(fd);
        fd = conn();
        tap_ok(abc_mkdir(fd, "solo", false, 0, &e) == 0 && stat_of("solo", &st, &e) == 0 &&
                   st.mode == 0755,
               "mkdir default mode 0755");
        close(fd);

        fd = conn();
        tap_ok(abc_rename(fd, "log", "m1/log2", &e) == 0, "rename");
        close(fd);
        _cleanup_free_ char *s = get_file(in_ws("m1/log2"));
        tap_ok(s && strcmp(s, "abc") == 0 && !exists(in_ws("log")), "rename moved the file");
        fd = conn();
        expect_err(abc_rename(fd, "log", "x", &e), &e, AB_E_NOT_FOUND, "log",
                   "rename of a missing file");
        close(fd);
        fd = conn();
        expect_err(abc_rename(fd, "m1/log2", "zz/none/x", &e), &e, AB_E_NOT_FOUND, "zz/none",
                   "rename into a missing dir");
        close(fd);

        /* EPERM: /proc's root has no mkdir. */
        /* EPERM: /proc's root directory has no unlink operation. */
        fd = conn();
        expect_err(abc_delete(fd, "/proc/version", false, &e), &e, AB_E_PERMISSION, "/proc/version",
                   "delete where the filesystem refuses (EPERM)");
        close(fd);
        ab_err_free(&e);
}

static bool init_has_mount(const char *path)
{
        char mi[64];
        snprintf(mi, sizeof(mi), "/proc/%d/mountinfo", (int)init_pid);
        _cleanup_free_ char *s = get_file(mi);
        char needle[PATH_MAX + 2];
        snprintf(needle, sizeof(needle), " %s ", path);
        return s && strstr(s, needle);
}

static void test_mount_errors(void)
{
        ab_err *e = NULL;
        if (!init_has_mount(in_ws("ro")) || !init_has_mount(in_ws("small"))) {
                tap_ok(1, "# SKIP no private mounts (EROFS / ENOSPC mappings not tested)");
                return;
        }
        expect_err(write_to("ro/f", "x", 0, 0, &e), &e, AB_E_PERMISSION, "ro/f",
                   "write on a read-only mount");
        int fd = conn();
        int r = abc_mkdir(fd, "ro/d", false, 0, &e);
        close(fd);
        tap_ok(r < 0 && e && e->code == AB_E_PERMISSION && strstr(e->msg, "read-only path: ro/d"),
               "EROFS message is 'read-only path: P' (%s)", e ? e->msg : "");
        ab_err_free(&e);

        size_t n = 1 << 20;
        char *big = xmalloc(n + 1);
        memset(big, 'z', n);
        big[n] = 0;
        r = write_to("small/big", big, 0, 0, &e);
        tap_ok(r < 0 && e && e->code == AB_E_LIMIT && strstr(e->msg, "disk quota exceeded"),
               "full disk -> limit_exceeded 'disk quota exceeded' (%s)", e ? e->msg : "");
        ab_err_free(&e);
        r = write_to("small/big", big, ABC_W_APPEND, 0, &e);
        tap_ok(r < 0 && e && e->code == AB_E_LIMIT, "... also when appending");
        ab_err_free(&e);
        free(big);
        abc_dirent *d = NULL;
        size_t nd = 0;
        tap_ok(list_of("small", 1, &d, &nd, &e) == 0, "list the full disk");
        int tmps = 0;
        for (size_t i = 0; i < nd; i++)
                if (strstr(d[i].path, "abtmp"))
                        tmps++;
        TAP_IS_INT(tmps, 0, "a failed write leaves no temp file");
        abc_dirents_free(d, nd);
        ab_err_free(&e);
}

/* ---- setup ---- */

static void start_init(const char *bin)
{
        mkdir(in_ws("ro"), 0755);
        mkdir(in_ws("small"), 0755);
        init_pid = fork();
        if (init_pid < 0)
                abort();
        if (init_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                /* Best effort: mounts only init sees, gone with it. */
                if (unshare(CLONE_NEWNS) == 0 &&
                    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0) {
                        mount("tmpfs", in_ws("ro"), "tmpfs", MS_RDONLY, "size=64k");
                        mount("tmpfs", in_ws("small"), "tmpfs", 0, "size=64k");
                }
                execl(bin, bin, "--listen", sock, "--workdir", ws, (char *)NULL);
                _exit(127);
        }
        for (int t = 0; t < 10000; t += 20) {
                ab_err *e = NULL;
                int fd = abc_connect(AT_FDCWD, sock, &e);
                ab_err_free(&e);
                if (fd >= 0) {
                        close(fd);
                        return;
                }
                if (waitpid(init_pid, NULL, WNOHANG) == init_pid)
                        break;
                msleep(20);
        }
        printf("# agentbox-init did not come up\n");
        init_pid = -1;
}

static void stop_init(void)
{
        pid_t bg = read_pid(at("bg.pid")), nh = read_pid(at("nohup.pid"));
        int status = -1;
        kill(init_pid, SIGTERM);
        for (int t = 0; t < 10000; t += 10) {
                if (waitpid(init_pid, &status, WNOHANG) == init_pid)
                        break;
                msleep(10);
        }
        tap_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "init exits 0 on SIGTERM");
        tap_ok(!alive(bg) && !alive(nh), "... after killing what it adopted");
        tap_ok(!exists(sock), "... and removing its socket");
}

static void rm_rf(const char *path)
{
        pid_t p = fork();
        if (p == 0) {
                execlp("rm", "rm", "-rf", path, (char *)NULL);
                _exit(127);
        }
        if (p > 0)
                waitpid(p, NULL, 0);
}

int main(void)
{
        const char *bin = getenv("AGENTBOX_INIT");
        if (!bin || access(bin, X_OK) < 0)
                tap_skip_all("AGENTBOX_INIT is not set to the agentbox-init binary");
        const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(tmp, sizeof(tmp), "%s/abinit.XXXXXX", base);
        if (!mkdtemp(tmp))
                abort();
        snprintf(ws, sizeof(ws), "%s/ws", tmp);
        snprintf(sock, sizeof(sock), "%s/init.sock", tmp);
        mkdir(ws, 0755);
        signal(SIGPIPE, SIG_IGN);

        start_init(bin);
        tap_ok(init_pid > 0, "agentbox-init is listening");
        if (init_pid > 0) {
                test_ping();
                test_exec_basic();
                test_stdin();
                test_env_cwd();
                test_timeout();
                test_background();
                test_output_cap();
                test_disconnect();
                test_concurrent();
                test_bad_peers();
                test_read_write();
                test_list_stat();
                test_delete_mkdir_rename();
                test_mount_errors();
                stop_init();
        }
        rm_rf(tmp);
        return tap_done();
}
