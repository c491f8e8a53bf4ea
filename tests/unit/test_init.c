/* test_init.c - agentbox-init driven through the client API (initclient.h).
 *
 * Starts $AGENTBOX_INIT --listen TMP/init.sock --workdir TMP/ws as a child
 * (not in a box; when possible in a private mount namespace holding a
 * read-only and a tiny tmpfs, for the EROFS and ENOSPC mappings), then runs
 * execs and file operations against it. Every wait is bounded. */
#include "proto/initclient.h"
#include "base/buf.h"
#include "base/util.h"
#include "proto/proto.h"
#include "tap.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <grp.h>
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
static const char *conn_sock = sock; /* the init conn() talks to */

/* Setup steps that must work for the test to mean anything. */
static void must(int r)
{
        if (r < 0) {
                tap_diag("setup failed: %s", strerror(errno));
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
        int fd = abc_connect(AT_FDCWD, conn_sock, &e);
        if (fd < 0) {
                tap_diag("connect: %s", e ? e->msg : "?");
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
        TAP_IS_STR(out_of(&c, 1), "a b|c;d|42|", "command passed to bash as one argument");
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
                tap_diag("r=%d exit=%d timed_out=%d stdout_bytes=%llu stderr=%s err=%s", r,
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

/* ---- argv exec: no shell ---- */

static int run_argv(const char *const *argv, const char *const *env, const char *cwd, capture *c,
                    abc_exec_res *res, ab_err **err)
{
        abc_exec_req req = {
            .argv = argv, .env = env, .cwd = cwd, .stdin_fd = -1, .timeout_ms = 30000};
        return run(&req, c, res, err);
}

static void put_exec(const char *path, const char *s, mode_t mode)
{
        put_file(path, s);
        must(chmod(path, mode));
}

static void test_argv(void)
{
        capture c = {0};
        abc_exec_res res;
        ab_err *e = NULL;
        char want[3 * PATH_MAX];

        /* Words reach the program as they are: no splitting, quoting, expansion, globbing. */
        const char *lit[] = {"printf", "%s|",   "a b", "it's",  "\"q\"", "$HOME", "*",
                             "`id`",   "$(id)", "",    "a\\nb", "~",     NULL};
        int r = run_argv(lit, NULL, NULL, &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 0, "argv exec runs%s%s", e ? ": " : "", e ? e->msg : "");
        TAP_IS_STR(out_of(&c, 1), "a b|it's|\"q\"|$HOME|*|`id`|$(id)||a\\nb|~|",
                   "argv words are passed literally (spaces, quotes, $, globs, empty)");
        capture_free(&c);

        /* No shell: env shows none of what bash adds (SHLVL, _, PWD), only the
         * base environment and the request's. */
        const char *envp[] = {"FOO=bar baz", "LANG=C", NULL};
        const char *envcmd[] = {"env", NULL};
        r = run_argv(envcmd, envp, NULL, &c, &res, &e);
        const char *o = out_of(&c, 1);
        snprintf(want, sizeof(want), "\nHOME=%s\n", ws);
        tap_ok(r == 0 && res.exit_code == 0 && strstr(o, "FOO=bar baz\n") &&
                   strstr(o, "LANG=C\n") && !strstr(o, "LANG=C.UTF-8") &&
                   strstr(o, "\nUSER=root\n") && strstr(o, "PATH=/usr/local/sbin:") &&
                   strstr(o, want),
               "argv exec gets the base environment under the request's");
        tap_ok(!strstr(o, "SHLVL=") && !strstr(o, "\n_=") && !strstr(o, "PWD="),
               "... and nothing a shell adds (no SHLVL, _ or PWD)");
        capture_free(&c);

        /* The parent of the program is the session, not a shell. */
        const char *ppid[] = {"sh", "-c", "cat /proc/$PPID/comm", NULL};
        r = run_argv(ppid, NULL, NULL, &c, &res, &e);
        tap_ok(r == 0 && strncmp(out_of(&c, 1), "bash", 4) != 0 && c.o[1].n > 0,
               "the program's parent is init's session, not bash (%s)", out_of(&c, 1));
        capture_free(&c);

        /* cwd, relative to the workdir. */
        mkdir(in_ws("sub"), 0755);
        const char *pwd[] = {"/bin/pwd", "-P", NULL};
        r = run_argv(pwd, NULL, "sub", &c, &res, &e);
        snprintf(want, sizeof(want), "%s/sub\n", ws);
        tap_ok(r == 0 && strcmp(out_of(&c, 1), want) == 0, "argv exec in a cwd (%s)",
               out_of(&c, 1));
        capture_free(&c);

        /* PATH lookup along the exec's PATH: a directory where a non-executable
         * file comes first, then one with the program. */
        char d1[PATH_MAX], d2[PATH_MAX], path_env[3 * PATH_MAX], f[PATH_MAX + 16];
        snprintf(d1, sizeof(d1), "%s/bin1", tmp);
        snprintf(d2, sizeof(d2), "%s/bin2", tmp);
        mkdir(d1, 0755);
        mkdir(d2, 0755);
        snprintf(f, sizeof(f), "%s/abprog", d1);
        put_exec(f, "#!/bin/sh\necho wrong\n", 0644);
        snprintf(f, sizeof(f), "%s/abprog", d2);
        put_exec(f, "#!/bin/sh\necho \"abprog:$#:$1\"\n", 0755);
        snprintf(path_env, sizeof(path_env), "PATH=/nonexistent:%s:%s:/usr/bin:/bin", d1, d2);
        const char *penv[] = {path_env, NULL};
        const char *prog[] = {"abprog", "x y", NULL};
        r = run_argv(prog, penv, NULL, &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 0 && strcmp(out_of(&c, 1), "abprog:1:x y\n") == 0,
               "the program is found along the exec's PATH, past a non-executable one (%s)",
               out_of(&c, 1));
        capture_free(&c);
        r = run_argv(prog, NULL, NULL, &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 127 && strstr(out_of(&c, 2), "abprog: command not found"),
               "... and not without that PATH: 127, command not found (%s)", out_of(&c, 2));
        capture_free(&c);

        /* Missing and unrunnable programs, as a shell reports them. */
        const char *missing[] = {"ab-no-such-program", "arg", NULL};
        r = run_argv(missing, NULL, NULL, &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 127 && c.o[1].n == 0 &&
                   strcmp(out_of(&c, 2),
                          "agentbox-init: ab-no-such-program: command not found\n") == 0,
               "a missing program: exit 127 and a message on stderr (%s)", out_of(&c, 2));
        capture_free(&c);
        const char *missing_path[] = {"/nonexistent/prog", NULL};
        r = run_argv(missing_path, NULL, NULL, &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 127 &&
                   strstr(out_of(&c, 2), "/nonexistent/prog: No such file or directory"),
               "a missing path: 127 (%s)", out_of(&c, 2));
        capture_free(&c);
        snprintf(f, sizeof(f), "%s/abprog", d1);
        const char *noexec[] = {f, NULL};
        r = run_argv(noexec, NULL, NULL, &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 126 && strstr(out_of(&c, 2), "Permission denied"),
               "a file that is not executable: 126 (%s)", out_of(&c, 2));
        capture_free(&c);
        snprintf(f, sizeof(f), "%s/noshebang", d2);
        put_exec(f, "echo ran by a shell\n", 0755);
        const char *noshebang[] = {f, NULL};
        r = run_argv(noshebang, NULL, NULL, &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 126 && c.o[1].n == 0 &&
                   strstr(out_of(&c, 2), "Exec format error"),
               "a script without #!: 126, no shell runs it (%s)", out_of(&c, 2));
        capture_free(&c);
        const char *dollar[] = {"true$IFS", NULL};
        r = run_argv(dollar, NULL, NULL, &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 127, "a program name with $ is not expanded (%d)",
               res.exit_code);
        capture_free(&c);

        /* stdin, exit codes, signals. */
        const char *cat[] = {"cat", NULL};
        abc_exec_req req = {.argv = cat, .stdin_data = "in\n", .stdin_len = 3, .stdin_fd = -1};
        r = run(&req, &c, &res, &e);
        tap_ok(r == 0 && strcmp(out_of(&c, 1), "in\n") == 0, "argv exec reads stdin");
        capture_free(&c);
        const char *term[] = {"sh", "-c", "kill -TERM $$", NULL};
        r = run_argv(term, NULL, NULL, &c, &res, &e);
        tap_ok(r == 0 && res.exit_code == 128 + 15, "killed by SIGTERM -> 143 (%d)", res.exit_code);
        capture_free(&c);
        const char *yes[] = {"yes", NULL};
        req = (abc_exec_req){.argv = yes, .stdin_fd = -1, .output_cap = 1000, .timeout_ms = 30000};
        r = run(&req, &c, &res, &e);
        tap_ok(r == 0 && res.truncated &&
                   c.o[1].n == 1000 + strlen("\n[agentbox: output truncated "
                                             "after 1000 bytes]\n"),
               "the output cap applies (%zu bytes)", c.o[1].n);
        capture_free(&c);

        /* A timeout kills the whole tree. */
        char script[3 * PATH_MAX];
        unlink(at("argv-gc.pid"));
        unlink(at("argv-main.pid"));
        snprintf(script, sizeof(script), "sleep 300 & echo $! > %s; echo $$ > %s; sleep 300",
                 at("argv-gc.pid"), at("argv-main.pid"));
        const char *tree[] = {"sh", "-c", script, NULL};
        req = (abc_exec_req){.argv = tree, .stdin_fd = -1, .timeout_ms = 700};
        r = run(&req, &c, &res, &e);
        tap_ok(r == 0 && res.timed_out && res.exit_code == ABP_TIMEOUT_EXIT,
               "argv exec: the timeout fires (124)");
        pid_t gc = read_pid(at("argv-gc.pid")), mp = read_pid(at("argv-main.pid"));
        tap_ok(gc > 0 && gone_within(gc, 5000), "... its background child %d is gone", (int)gc);
        tap_ok(mp > 0 && gone_within(mp, 5000), "... and the program %d", (int)mp);
        capture_free(&c);

        /* Requests that are refused. */
        req = (abc_exec_req){.command = "true", .argv = cat, .stdin_fd = -1};
        r = run(&req, &c, &res, &e);
        tap_ok(r < 0 && e && e->code == AB_E_INVALID && strstr(e->msg, "not both"),
               "command and argv together -> invalid_argument (%s)", e ? e->msg : "");
        ab_err_free(&e);
        const char *none[] = {NULL};
        req = (abc_exec_req){.argv = none, .stdin_fd = -1};
        r = run(&req, &c, &res, &e);
        tap_ok(r < 0 && e && e->code == AB_E_INVALID, "an empty argv -> invalid_argument");
        ab_err_free(&e);
        const char *empty0[] = {"", "x", NULL};
        req = (abc_exec_req){.argv = empty0, .stdin_fd = -1};
        r = run(&req, &c, &res, &e);
        tap_ok(r < 0 && e && e->code == AB_E_INVALID, "an empty argv[0] -> invalid_argument");
        ab_err_free(&e);
        /* init itself refuses both (a client that skips the checks). */
        abp_buf b = {0};
        abp_reader rd = {0};
        abp_frame fr;
        abp_error er;
        abp_frame_begin(&b, ABP_EXEC);
        abp_put_str(&b, ABP_F_COMMAND, "true");
        abp_put_str(&b, ABP_F_ARGV, "true");
        int fd = conn();
        tap_ok(abp_frame_end(&b) == 0 && fd >= 0 && abp_send(fd, &b, 1000) == 0 &&
                   abp_recv(fd, &rd, &fr, 10000) == 0 && abp_dec_error(&fr, &er) == 0 &&
                   strcmp(er.code, "invalid_argument") == 0 && strstr(er.message, "ARGV"),
               "init answers COMMAND with ARGV with invalid_argument");
        if (fd >= 0)
                close(fd);
        abp_reader_free(&rd);
        abp_buf_free(&b);
        capture_free(&c);

        /* How an argv reads in audit rows and events: a shell line meaning the same. */
        const char *show[] = {"A=1", "printf", "%s", "it's", "", "a b", "x=$y", NULL};
        req = (abc_exec_req){.argv = show};
        char *t = abc_exec_req_text(&req);
        TAP_IS_STR(t, "'A=1' printf %s 'it'\\''s' '' 'a b' 'x=$y'",
                   "argv as text: plain words bare, the rest single-quoted");
        free(t);
        req = (abc_exec_req){.command = "echo $HOME"};
        t = abc_exec_req_text(&req);
        TAP_IS_STR(t, "echo $HOME", "a command as text is itself");
        free(t);
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

        int fd;
        /* Writing over a symlink replaces the link, not its target. */
        put_file(at("target.txt"), "target");
        must(symlink(at("target.txt"), in_ws("wlink")));
        tap_ok(write_to("wlink", "via link", 0, 0, &e) == 0, "write over a symlink");
        free(s);
        s = get_file(at("target.txt"));
        TAP_IS_STR(s, "target", "the symlink's target is not written");
        expect_err(write_to("loop", "x", ABC_W_APPEND, 0, &e), &e, AB_E_INVALID, "loop",
                   "append through a symlink is refused");

        /* A read beneath a directory follows no link below it. */
        must(symlink(at("target.txt"), in_ws("rlink")));
        must(symlink("d1", in_ws("dlink")));
        capture_free(&c);
        fd = conn();
        r = abc_read_beneath(fd, ws, "d1/d2/f.txt", 0, collect, &c, &e);
        close(fd);
        tap_ok(r == 0 && strcmp(out_of(&c, 1), "deep") == 0,
               "read beneath: a file two levels down");
        capture_free(&c);
        fd = conn();
        r = abc_read_beneath(fd, "d1/", "d2/f.txt", 3, collect, &c, &e);
        close(fd);
        tap_ok(r == 0 && strcmp(out_of(&c, 1), "dee") == 0,
               "read beneath a relative directory with a trailing slash, 3 bytes");
        capture_free(&c);
        fd = conn();
        r = abc_read_beneath(fd, ws, "rlink", 0, collect, &c, &e);
        close(fd);
        expect_err(r, &e, AB_E_INVALID, "rlink",
                   "read beneath: a symlink to a file is not followed");
        tap_ok(c.o[1].n == 0, "... and nothing of its target came");
        fd = conn();
        r = abc_read_beneath(fd, ws, "dlink/d2/f.txt", 0, collect, &c, &e);
        close(fd);
        expect_err(r, &e, AB_E_INVALID, "dlink",
                   "read beneath: a symlinked directory is not followed");
        tap_ok(read_to("dlink/d2/f.txt", 0, 0, &c, &e) == 0 && strcmp(out_of(&c, 1), "deep") == 0,
               "(a plain read follows it)");
        capture_free(&c);
        fd = conn();
        r = abc_read_beneath(fd, in_ws("dlink"), "d2/f.txt", 0, collect, &c, &e);
        close(fd);
        tap_ok(r == 0 && strcmp(out_of(&c, 1), "deep") == 0,
               "read beneath: the directory itself may be reached through a link");
        capture_free(&c);
        fd = conn();
        r = abc_read_beneath(fd, ws, "../etc/passwd", 0, collect, &c, &e);
        close(fd);
        expect_err(r, &e, AB_E_INVALID, NULL, "read beneath: a path with .. is refused");
        unlink(in_ws("rlink"));
        unlink(in_ws("dlink"));

        /* Multi-chunk write from an fd, read back. */
        size_t n = 200000;
        char *big = xmalloc(n);
        for (size_t i = 0; i < n; i++)
                big[i] = (char)(i * 7);
        int bfd = open(at("big.src"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (bfd < 0 || ab_write_all(bfd, big, n) < 0 || lseek(bfd, 0, SEEK_SET) < 0)
                abort();
        fd = conn();
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

/* CHMOD, CHOWN, SYMLINK and STAT's ids and names (proto 3). */
static void test_chmod_chown_symlink(void)
{
        ab_err *e = NULL;
        struct stat hs;
        abc_stat st = {0};
        int fd;
        put_file(in_ws("perm"), "x");

        fd = conn();
        tap_ok(abc_chmod(fd, "perm", 0640, &e) == 0 && stat(in_ws("perm"), &hs) == 0 &&
                   (hs.st_mode & 07777) == 0640,
               "CHMOD sets the mode bits");
        close(fd);
        fd = conn();
        tap_ok(abc_chown(fd, "perm", "1234", "5678", &e) == 0 && stat(in_ws("perm"), &hs) == 0 &&
                   hs.st_uid == 1234 && hs.st_gid == 5678,
               "CHOWN to numbers without entries");
        close(fd);
        fd = conn();
        tap_ok(abc_stat_path(fd, "perm", &st, &e) == 0 && st.has_ids && st.uid == 1234 &&
                   st.gid == 5678 && !st.owner && !st.group,
               "STAT carries uid and gid, no names unless asked");
        abc_stat_clear(&st);
        close(fd);
        fd = conn();
        tap_ok(abc_chown(fd, "perm", "root", NULL, &e) == 0 && stat(in_ws("perm"), &hs) == 0 &&
                   hs.st_uid == 0 && hs.st_gid == 5678,
               "CHOWN of the owner by name keeps the group");
        close(fd);
        fd = conn();
        tap_ok(abc_chown(fd, "perm", NULL, "0", &e) == 0 && stat(in_ws("perm"), &hs) == 0 &&
                   hs.st_uid == 0 && hs.st_gid == 0,
               "CHOWN of the group only");
        close(fd);
        fd = conn();
        tap_ok(abc_stat_names(fd, "perm", &st, &e) == 0 && st.owner && !strcmp(st.owner, "root") &&
                   st.group && !strcmp(st.group, "root"),
               "STAT with names: owner and group from /etc/passwd and /etc/group");
        abc_stat_clear(&st);
        close(fd);
        fd = conn();
        expect_err(abc_chown(fd, "perm", "no-such-user-ab", NULL, &e), &e, AB_E_INVALID, NULL,
                   "CHOWN to an unknown user name");
        close(fd);
        fd = conn();
        expect_err(abc_chmod(fd, "no-such-file", 0600, &e), &e, AB_E_NOT_FOUND, "no-such-file",
                   "CHMOD of a missing file");
        close(fd);

        fd = conn();
        tap_ok(abc_symlink(fd, "plink", "perm", &e) == 0, "SYMLINK makes a link");
        close(fd);
        char tgt[64] = "";
        ssize_t tl = readlink(in_ws("plink"), tgt, sizeof(tgt) - 1);
        tap_ok(tl == 4 && !memcmp(tgt, "perm", 4), "... to the target as given");
        fd = conn();
        expect_err(abc_symlink(fd, "plink", "other", &e), &e, AB_E_CONFLICT, "plink",
                   "SYMLINK over an existing path");
        close(fd);
        fd = conn();
        tap_ok(abc_chmod(fd, "plink", 0604, &e) == 0 && stat(in_ws("perm"), &hs) == 0 &&
                   (hs.st_mode & 07777) == 0604,
               "CHMOD follows a final symlink, as chmod(1)");
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

/* ---- the login environment and direct exec ----
 *
 * A second init with its own workdir, whose .profile these tests write. When
 * a private mount namespace is possible, this very program is bound over
 * /bin/bash there: started as "bash", it logs its arguments to LE/bash.log
 * and runs the real bash (bound at LE/realbash). Only the log can tell
 * whether bash ran for a command: bash execs a simple command in place of
 * itself, exactly as the direct path does. */

static char le_dir[1100], ws2[1200], sock2[1200];
static pid_t init2_pid = -1;
static bool bash_wrapped;

/* main() when started as bash. HOME is the second init's workdir. */
static void bash_stand_in(char **argv)
{
        const char *home = getenv("HOME");
        char log[PATH_MAX], real[PATH_MAX], line[8192];
        if (!home)
                _exit(127);
        snprintf(log, sizeof(log), "%s/../bash.log", home);
        snprintf(real, sizeof(real), "%s/../realbash", home);
        size_t n = 0;
        for (int i = 1; argv[i]; i++) {
                int k = snprintf(line + n, sizeof(line) - 1 - n, "%s%s", i > 1 ? " " : "", argv[i]);
                if (k < 0 || n + (size_t)k >= sizeof(line) - 1) {
                        n = sizeof(line) - 2; /* truncated */
                        break;
                }
                n += (size_t)k;
        }
        for (size_t i = 0; i < n; i++)
                if (line[i] == '\n')
                        line[i] = ' ';
        line[n++] = '\n';
        int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) {
                (void)!write(fd, line, n);
                close(fd);
        }
        execv(real, argv);
        _exit(127);
}

/* How many times bash was started with `how` (e.g. "-lc ") then cmd. */
static int bash_ran(const char *how, const char *cmd)
{
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/bash.log", le_dir);
        _cleanup_free_ char *s = get_file(path);
        int n = 0;
        size_t hl = strlen(how);
        for (char *line = s, *nl; line && (nl = strchr(line, '\n')); line = nl + 1) {
                *nl = 0;
                n += strncmp(line, how, hl) == 0 && strcmp(line + hl, cmd) == 0;
        }
        return n;
}

/* Starts of bash so far, for anything. */
static int bash_starts(void)
{
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/bash.log", le_dir);
        _cleanup_free_ char *s = get_file(path);
        int n = 0;
        for (char *p = s; p && *p; p++)
                n += *p == '\n';
        return n;
}

/* Starts of bash for cmd in any way. */
static int bash_any(const char *cmd)
{
        return bash_ran("-lc ", cmd) + bash_ran("--noprofile -lc ", cmd);
}

static void start_init2(const char *bin)
{
        char self[PATH_MAX], real[PATH_MAX + 16], mark[PATH_MAX + 16];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        self[n > 0 ? n : 0] = 0;
        snprintf(real, sizeof(real), "%s/realbash", le_dir);
        snprintf(mark, sizeof(mark), "%s/wrapped", le_dir);
        put_file(real, "");
        init2_pid = fork();
        if (init2_pid < 0)
                abort();
        if (init2_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                if (n > 0 && unshare(CLONE_NEWNS) == 0 &&
                    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
                    mount("/bin/bash", real, NULL, MS_BIND, NULL) == 0 &&
                    mount(self, "/bin/bash", NULL, MS_BIND, NULL) == 0)
                        put_file(mark, "");
                execl(bin, bin, "--listen", sock2, "--workdir", ws2, (char *)NULL);
                _exit(127);
        }
        for (int t = 0; t < 10000; t += 20) {
                ab_err *e = NULL;
                int fd = abc_connect(AT_FDCWD, sock2, &e);
                ab_err_free(&e);
                if (fd >= 0) {
                        close(fd);
                        bash_wrapped = exists(mark);
                        return;
                }
                if (waitpid(init2_pid, NULL, WNOHANG) == init2_pid)
                        break;
                msleep(20);
        }
        init2_pid = -1;
}

static void stop_init2(void)
{
        int status = -1;
        kill(init2_pid, SIGTERM);
        for (int t = 0; t < 10000; t += 10) {
                if (waitpid(init2_pid, &status, WNOHANG) == init2_pid)
                        break;
                msleep(10);
        }
        tap_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "second init exits 0 on SIGTERM");
}

/* Processes below pid (through ppid chains), but for init's idle spare
 * session (an "ab-session" without children). */
static int descendants(pid_t pid)
{
        enum { MAXP = 8192 };
        static pid_t pids[MAXP], ppids[MAXP];
        static bool mark[MAXP], sess[MAXP];
        size_t n = 0;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d)) && n < MAXP) {
                char path[300], buf[512];
                int p = atoi(e->d_name);
                if (p <= 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/stat", p);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                ssize_t k = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
                if (fd >= 0)
                        close(fd);
                if (k <= 0)
                        continue;
                buf[k] = 0;
                char *q = strrchr(buf, ')');
                int pp;
                if (!q || sscanf(q + 1, " %*c %d", &pp) != 1)
                        continue;
                char *open_paren = strchr(buf, '(');
                sess[n] = open_paren && !strncmp(open_paren, "(ab-session)", 12);
                pids[n] = p;
                ppids[n] = pp;
                mark[n++] = false;
        }
        if (d)
                closedir(d);
        int count = 0;
        for (bool more = true; more;) {
                more = false;
                for (size_t i = 0; i < n; i++) {
                        if (mark[i])
                                continue;
                        bool below = ppids[i] == pid;
                        for (size_t j = 0; !below && j < n; j++)
                                below = mark[j] && pids[j] == ppids[i];
                        if (below)
                                mark[i] = more = true;
                }
        }
        for (size_t i = 0; i < n; i++) {
                bool parent = false;
                for (size_t j = 0; sess[i] && !parent && j < n; j++)
                        parent = ppids[j] == pids[i];
                count += mark[i] && !(sess[i] && !parent);
        }
        return count;
}

static void put_profile(const char *s)
{
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/.profile", ws2);
        put_file(path, s);
}

static void put_script(const char *name, const char *s)
{
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/pbin/%s", ws2, name);
        put_file(path, s);
        must(chmod(path, 0755));
}

/* Runs cmd on the second init: stdout (malloc'd; "" when the exec failed),
 * stderr in *err when err is not NULL. */
static char *run2(const char *cmd, const char *const *env, uint32_t timeout_ms, abc_exec_res *res,
                  char **err)
{
        capture c = {0};
        ab_err *e = NULL;
        abc_exec_req req = {.command = cmd, .env = env, .stdin_fd = -1, .timeout_ms = timeout_ms};
        *res = (abc_exec_res){.exit_code = -1};
        if (run(&req, &c, res, &e) < 0) {
                tap_diag("exec '%s': %s", cmd, e ? e->msg : "?");
                res->exit_code = -1;
        }
        ab_err_free(&e);
        char *out = xstrdup(out_of(&c, 1));
        if (err)
                *err = xstrdup(out_of(&c, 2));
        capture_free(&c);
        return out;
}

typedef struct env_worker {
        pthread_t t;
        char *out;
} env_worker;

static void *env_work(void *arg)
{
        env_worker *w = arg;
        abc_exec_res res;
        w->out = run2("echo $FOO_FROM_PROFILE", NULL, 30000, &res, NULL);
        return NULL;
}

#define PROFILE "export FOO_FROM_PROFILE=1\nexport PATH=\"$HOME/pbin:$PATH\"\n"

static void test_login_env(void)
{
        abc_exec_res res;
        char want[3 * PATH_MAX], *s, *s2, *err;

        if (init2_pid < 0) {
                tap_ok(0, "second agentbox-init is listening");
                return;
        }
        conn_sock = sock2;
        if (!bash_wrapped)
                tap_diag("no private mount namespace: whether bash ran is not checked");
        snprintf(want, sizeof(want), "%s/pbin", ws2);
        must(mkdir(want, 0755));
        /* Its arguments and the environment it was started with. */
        put_script("abtool", "#!/bin/sh\nprintf '%s|' \"$0\" \"$@\"; echo\n"
                             "tr '\\0' '\\n' < /proc/$$/environ | LC_ALL=C sort\n");
        put_script("abexit", "#!/bin/sh\nexit \"$1\"\n");
        put_script("AB=1", "#!/bin/sh\necho not an assignment\n"); /* bash never runs it */
        put_script("abnoshebang", "echo ran-by-bash $#\n");
        put_script("abtree", "#!/bin/sh\nsleep 300 &\necho $! > \"$HOME/../tree.pid\"\n"
                             "echo $$ > \"$HOME/../treemain.pid\"\nwait\n");
        snprintf(want, sizeof(want), "%s/plain.txt", ws2);
        put_file(want, "echo not executable\n");

        s = run2("echo \"[$FOO_FROM_PROFILE]\"", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "[]\n", "no .profile: nothing from it");
        free(s);

        put_profile(PROFILE);
        s = run2("echo $FOO_FROM_PROFILE", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "1\n", "a variable exported by ~/.profile reaches the command");
        free(s);
        s = run2("shopt -q login_shell && echo login; echo $0", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "login\nbash\n", "the shell is still a login bash named bash");
        free(s);

        /* The direct path: a plain command, its program in a PATH entry of .profile. */
        s = run2("abtool a b", NULL, 30000, &res, NULL);
        snprintf(want, sizeof(want), "%s/pbin/abtool|a|b|\n", ws2);
        tap_ok(res.exit_code == 0 && strncmp(s, want, strlen(want)) == 0,
               "a program in a directory .profile adds to PATH runs by bare name");
        tap_ok(strstr(s, "\nFOO_FROM_PROFILE=1\n") != NULL, "... with the login environment");
        if (bash_wrapped)
                TAP_IS_INT(bash_any("abtool a b"), 0, "... and without bash");
        s2 = run2("abtool 'a' b", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, s2, "... seeing what it sees when bash runs it (argv, PWD, SHLVL, _, ...)");
        if (bash_wrapped)
                TAP_IS_INT(bash_ran("--noprofile -lc ", "abtool 'a' b"), 1,
                           "a quoted word: bash --noprofile -lc runs the command");
        free(s);
        free(s2);
        const char *cwd_env[] = {"FOO_FROM_PROFILE=req", NULL};
        abc_exec_req creq = {.command = "abtool", .env = cwd_env, .cwd = "pbin", .stdin_fd = -1};
        capture c = {0};
        ab_err *e = NULL;
        tap_ok(run(&creq, &c, &res, &e) == 0, "direct exec with a cwd and request env");
        snprintf(want, sizeof(want), "\nPWD=%s/pbin\n", ws2);
        tap_ok(strstr(out_of(&c, 1), want) && strstr(out_of(&c, 1), "\nFOO_FROM_PROFILE=req\n"),
               "... runs there, the request env winning over the profile's");
        capture_free(&c);
        ab_err_free(&e);

        s = run2("ls /proc/self/fd", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "0\n1\n2\n3\n", "direct exec: no fd leaks into the program");
        free(s);
        if (bash_wrapped)
                TAP_IS_INT(bash_any("ls /proc/self/fd"), 0, "... (which ran without bash)");

        /* Builtins and shell syntax: bash, exactly as before. */
        s = run2("echo builtin-check", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "builtin-check\n", "a builtin runs");
        if (bash_wrapped)
                TAP_IS_INT(bash_any("echo builtin-check"), 1, "... through bash");
        free(s);
        s = run2("abtool x | head -1", NULL, 30000, &res, NULL);
        snprintf(want, sizeof(want), "%s/pbin/abtool|x|\n", ws2);
        TAP_IS_STR(s, want, "a pipeline runs");
        if (bash_wrapped)
                TAP_IS_INT(bash_any("abtool x | head -1"), 1, "... through bash");
        free(s);
        static const struct {
                const char *cmd, *want;
        } sh[] = {
            {"echo a | tr a b", "b\n"},
            {"X=1; echo \"$X\" 'q'", "1 q\n"},
            {"false && echo no; true && echo yes", "yes\n"},
            {"cd pbin && ls abe* abn*", "abexit\nabnoshebang\n"},
            {"echo hi > red.txt; cat < red.txt", "hi\n"},
            {"echo $((6 * 7)) ${FOO_FROM_PROFILE}", "42 1\n"},
            {"FOO_FROM_PROFILE=pre printenv FOO_FROM_PROFILE", "pre\n"},
            {"AB=1 printenv AB", "1\n"},
            {"printenv FOO_FROM_PROFILE", "1\n"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(sh); i++) {
                s = run2(sh[i].cmd, NULL, 30000, &res, NULL);
                TAP_IS_STR(s, sh[i].want, sh[i].cmd);
                free(s);
        }
        if (bash_wrapped) {
                TAP_IS_INT(bash_any("FOO_FROM_PROFILE=pre printenv FOO_FROM_PROFILE"), 1,
                           "an assignment before the command goes through bash");
                TAP_IS_INT(bash_any("printenv FOO_FROM_PROFILE"), 0, "printenv runs directly");
        }

        /* Exit codes as bash gives them. */
        s = run2("abexit 3", NULL, 30000, &res, NULL);
        TAP_IS_INT(res.exit_code, 3, "direct exec: exit code 3");
        free(s);
        s = run2("no-such-cmd-xyz", NULL, 30000, &res, &err);
        tap_ok(res.exit_code == 127 && strstr(err, "no-such-cmd-xyz: command not found"),
               "missing command: 127 and bash's message");
        if (res.exit_code != 127 || !strstr(err, "no-such-cmd-xyz: command not found"))
                tap_diag("exit %d, stderr: %s", res.exit_code, err);
        free(s);
        free(err);
        s = run2("./plain.txt", NULL, 30000, &res, &err);
        tap_ok(res.exit_code == 126 && strstr(err, "Permission denied"),
               "a file that is not executable: 126 and bash's message");
        if (res.exit_code != 126 || !strstr(err, "Permission denied"))
                tap_diag("exit %d, stderr: %s", res.exit_code, err);
        free(s);
        free(err);
        s = run2("abnoshebang x", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "ran-by-bash 1\n", "a script without #! is run by bash, as bash does");
        free(s);
        const char *badpath[] = {"PATH=/usr/bin:/bin", NULL};
        s = run2("abtool", badpath, 30000, &res, NULL);
        TAP_IS_INT(res.exit_code, 127, "a request PATH wins over the profile's");
        free(s);

        /* Timeout and the process tree, on the direct path. */
        snprintf(want, sizeof(want), "%s/tree.pid", le_dir);
        unlink(want);
        s = run2("abtree", NULL, 600, &res, NULL);
        tap_ok(res.timed_out && res.exit_code == ABP_TIMEOUT_EXIT, "direct exec: timeout, 124");
        pid_t bg = read_pid(want);
        snprintf(want, sizeof(want), "%s/treemain.pid", le_dir);
        pid_t main_pid = read_pid(want);
        tap_ok(bg > 0 && main_pid > 0 && gone_within(bg, 5000) && gone_within(main_pid, 5000),
               "... the command and its background child are gone");
        free(s);
        if (bash_wrapped)
                TAP_IS_INT(bash_any("abtree"), 0, "... (no bash involved)");

        /* The umask a profile sets. */
        put_profile(PROFILE "umask 077\n");
        s = run2("touch um.txt", NULL, 30000, &res, NULL);
        struct stat st;
        snprintf(want, sizeof(want), "%s/um.txt", ws2);
        tap_ok(stat(want, &st) == 0 && (st.st_mode & 0777) == 0600,
               "the profile's umask applies (direct exec creates 0600)");
        free(s);
        s = run2("umask", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "0077\n", "... and in bash");
        free(s);

        /* Changing the profile changes the next exec, even at the same size. */
        put_profile(PROFILE "export BAR_FROM_PROFILE=22\n");
        s = run2("printenv BAR_FROM_PROFILE", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "22\n", "a changed .profile is seen by the next exec");
        free(s);
        put_profile(PROFILE "export BAR_FROM_PROFILE=33\n");
        s = run2("printenv BAR_FROM_PROFILE", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "33\n", "... also when rewritten in place at the same size at once");
        free(s);
        s = run2("printenv BAR_FROM_PROFILE", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "33\n", "... and by the one after");
        free(s);
        const char *req_env[] = {"BAR_FROM_PROFILE=req", NULL};
        s = run2("echo $BAR_FROM_PROFILE", req_env, 30000, &res, NULL);
        TAP_IS_STR(s, "req\n", "request env overrides a profile variable");
        free(s);
        snprintf(want, sizeof(want), "%s/.profile", ws2);
        must(unlink(want));
        s = run2("echo \"[$BAR_FROM_PROFILE]\"", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "[]\n", "a removed .profile is seen too");
        free(s);

        /* What a profile prints is not part of an exec's output any more. */
        put_profile(PROFILE "echo profile-says-hi; echo profile-err >&2\n");
        s = run2("abexit 0", NULL, 30000, &res, &err);
        tap_ok(res.exit_code == 0 && !s[0] && !err[0],
               "profile output is not in the exec's output");
        free(s);
        free(err);

        /* What an environment cannot carry: bash -lc, as before. */
        put_profile(PROFILE "abfn() { echo fn-ran; }\n");
        s = run2("abfn", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "fn-ran\n", "a function the profile defines works");
        if (bash_wrapped)
                TAP_IS_INT(bash_ran("-lc ", "abfn"), 1, "... through bash -lc");
        free(s);
        put_profile(PROFILE "shopt -s expand_aliases\nalias abal='echo aliased'\n");
        s = run2("abal", NULL, 30000, &res, NULL);
        TAP_IS_STR(s, "aliased\n", "an alias the profile defines (and enables) works");
        free(s);
        put_profile(PROFILE "cd pbin\n");
        s = run2("pwd", NULL, 30000, &res, NULL);
        snprintf(want, sizeof(want), "%s/pbin\n", ws2);
        TAP_IS_STR(s, want, "a profile that changes directory still does");
        free(s);

        /* Broken profiles: execs fall back to bash -lc and end as it does. */
        put_profile("exit 1\n");
        for (int i = 0; i < 2; i++) {
                s = run2("echo ok", NULL, 30000, &res, NULL);
                tap_ok(res.exit_code == 1 && !res.timed_out && !s[0],
                       "a profile that exits 1: the exec ends as bash -lc does (exit 1) #%d", i);
                free(s);
        }
        put_profile("while :; do :; done\n");
        uint64_t t0 = ab_now_ms();
        s = run2("echo ok", NULL, 1500, &res, NULL);
        uint64_t took = ab_now_ms() - t0;
        tap_ok(res.timed_out && res.exit_code == ABP_TIMEOUT_EXIT && took < 6000,
               "a looping profile: the exec ends at its own timeout (%llu ms)",
               (unsigned long long)took);
        free(s);
        int left = -1;
        for (int t = 0; t < 5000 && (left = descendants(init2_pid)) > 0; t += 50)
                msleep(50);
        TAP_IS_INT(left, 0, "... and nothing of it is left running");

        /* A profile that hangs only where the capture runs it (stdout on
         * /dev/null): the capture gives up after 5 s, the exec falls back to
         * bash -lc and works, and the next one does not wait for a capture. */
        put_profile(PROFILE "case $(readlink /proc/$$/fd/1) in /dev/null) sleep 1000;; esac\n");
        msleep(2100); /* a capture right after a change would not be kept */
        t0 = ab_now_ms();
        s = run2("echo ok-hang1", NULL, 30000, &res, NULL);
        took = ab_now_ms() - t0;
        tap_ok(res.exit_code == 0 && strcmp(s, "ok-hang1\n") == 0 && took >= 4900 && took < 20000,
               "a profile that hangs the capture: the exec runs after 5 s (%llu ms)",
               (unsigned long long)took);
        free(s);
        t0 = ab_now_ms();
        s = run2("echo ok-hang2", NULL, 30000, &res, NULL);
        took = ab_now_ms() - t0;
        tap_ok(res.exit_code == 0 && strcmp(s, "ok-hang2\n") == 0 && took < 4000,
               "... the next one at once, without a new capture (%llu ms)",
               (unsigned long long)took);
        free(s);
        if (bash_wrapped)
                TAP_IS_INT(bash_ran("-lc ", "echo ok-hang1") + bash_ran("-lc ", "echo ok-hang2"), 2,
                           "... both through bash -lc");

        put_profile(PROFILE);
        s = run2("abtool ok", NULL, 30000, &res, NULL);
        snprintf(want, sizeof(want), "%s/pbin/abtool|ok|\n", ws2);
        tap_ok(strncmp(s, want, strlen(want)) == 0, "a repaired profile works again");
        free(s);
        if (bash_wrapped)
                TAP_IS_INT(bash_any("abtool ok"), 0, "... on the direct path");

        /* Many execs at once after a change all see it. */
        put_profile("export FOO_FROM_PROFILE=conc\n");
        env_worker w[8];
        for (int i = 0; i < 8; i++)
                if (pthread_create(&w[i].t, NULL, env_work, &w[i]) != 0)
                        abort();
        int good = 0;
        for (int i = 0; i < 8; i++) {
                pthread_join(w[i].t, NULL);
                good += strcmp(w[i].out, "conc\n") == 0;
                free(w[i].out);
        }
        TAP_IS_INT(good, 8, "8 concurrent execs after a change all see it");

        /* argv exec reads no profile and starts no bash. */
        put_profile(PROFILE);
        capture_free(&c);
        const char *argv_env[] = {"/usr/bin/env", NULL};
        abc_exec_req areq = {.argv = argv_env, .stdin_fd = -1, .timeout_ms = 30000};
        int ar = run(&areq, &c, &res, &e);
        tap_ok(ar == 0 && res.exit_code == 0 && !strstr(out_of(&c, 1), "FOO_FROM_PROFILE") &&
                   !strstr(out_of(&c, 1), "/pbin"),
               "argv exec: nothing from ~/.profile (no variable, no PATH entry)");
        capture_free(&c);
        const char *argv_tool[] = {"abtool", "a", NULL};
        int bash_before = bash_starts();
        areq.argv = argv_tool;
        ar = run(&areq, &c, &res, &e);
        tap_ok(ar == 0 && res.exit_code == 127, "... so a program in a PATH entry of .profile "
                                                "is not found (127)");
        capture_free(&c);
        if (bash_wrapped)
                TAP_IS_INT(bash_starts() - bash_before, 0, "... and no bash ran for it");

        int fd = conn();
        char *v = NULL;
        tap_ok(fd >= 0 && abc_ping(fd, &v, &e) == 0, "the second init still serves");
        free(v);
        if (fd >= 0)
                close(fd);
        ab_err_free(&e);
        conn_sock = sock;
}

/* ---- images: which shell, which user ----
 *
 * A third init sees, in a private mount namespace, files of its own bound
 * over /bin/bash (a copy of bash), /bin/sh (a copy of busybox; /bin/sh may
 * be a symlink: the bind lands on its target), /etc/passwd and /etc/group.
 * Bound files keep their inode, so chmod from here "installs" or "removes"
 * a shell and rewriting a file in place changes the box's user database,
 * while that init runs. */

static char img[1100], ws3[1200], sock3[1200];
static pid_t init3_pid = -1;

static char *in_ws3(const char *rel)
{
        static char buf[4][PATH_MAX];
        static int i;
        i = (i + 1) % 4;
        snprintf(buf[i], sizeof(buf[i]), "%s/%s", ws3, rel);
        return buf[i];
}

static int conn3(void)
{
        conn_sock = sock3;
        int fd = conn();
        conn_sock = sock;
        return fd;
}

static char *in_img(const char *rel)
{
        static char buf[4][PATH_MAX];
        static int i;
        i = (i + 1) % 4;
        snprintf(buf[i], sizeof(buf[i]), "%s/%s", img, rel);
        return buf[i];
}

static int copy_file(const char *from, const char *to, mode_t mode)
{
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        if (ab_read_file(AT_FDCWD, from, &data, &len) < 0)
                return -1;
        int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        if (fd < 0)
                return -1;
        int r = ab_write_all(fd, data, len);
        close(fd);
        return r < 0 || chmod(to, mode) < 0 ? -1 : 0;
}

/* Rewrites a file in place (same inode: what the bind mount shows). */
static void rewrite(const char *path, const char *s)
{
        put_file(path, s);
}

#define PASSWD                                                                                     \
        "root:x:0:0:root:/root:/bin/sh\n"                                                          \
        "# a comment\n"                                                                            \
        "\n"                                                                                       \
        "garbage without fields\n"                                                                 \
        "+::::::\n"                                                                                \
        "mallory:x:99999999999:1::/m:/bin/sh\n"                                                    \
        "trudy:x:1400:1400::/t:/bin/sh:extra\n"                                                    \
        "alice:x:1234:1235:Alice A:/home/alice:/bin/sh\n"                                          \
        "alice:x:1999:1999:a second alice, never used:/nope:/bin/sh\n"                             \
        "bob:x:1300:1300::/home/bob:/bin/sh\n"                                                     \
        "nohome:x:1500:1500:::/bin/sh"
#define GROUP                                                                                      \
        "root:x:0:\n"                                                                              \
        "staff:x:50:bob,alice\n"                                                                   \
        "alicia:x:60:alicia,alicex\n"                                                              \
        "dev:x:2000:alice\n"                                                                       \
        "badgid:x:abc:alice\n"                                                                     \
        "alice:x:1235:\n"                                                                          \
        "ops:x:3100:"

static void start_init3(const char *bin)
{
        char mark[PATH_MAX];
        snprintf(mark, sizeof(mark), "%s/bound", img);
        if (copy_file("/bin/bash", in_img("bash"), 0755) < 0 ||
            copy_file("/bin/busybox", in_img("sh"), 0755) < 0) {
                tap_diag("cannot copy /bin/bash and /bin/busybox (busybox-static)");
                return;
        }
        put_file(in_img("passwd"), PASSWD);
        put_file(in_img("group"), GROUP);
        init3_pid = fork();
        if (init3_pid < 0)
                abort();
        if (init3_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                if (unshare(CLONE_NEWNS) == 0 &&
                    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
                    mount(in_img("bash"), "/bin/bash", NULL, MS_BIND, NULL) == 0 &&
                    mount(in_img("sh"), "/bin/sh", NULL, MS_BIND, NULL) == 0 &&
                    mount(in_img("passwd"), "/etc/passwd", NULL, MS_BIND, NULL) == 0 &&
                    mount(in_img("group"), "/etc/group", NULL, MS_BIND, NULL) == 0)
                        put_file(mark, "");
                else
                        _exit(77);
                execl(bin, bin, "--listen", sock3, "--workdir", ws3, (char *)NULL);
                _exit(127);
        }
        for (int t = 0; t < 10000; t += 20) {
                ab_err *e = NULL;
                int fd = abc_connect(AT_FDCWD, sock3, &e);
                ab_err_free(&e);
                if (fd >= 0) {
                        close(fd);
                        return;
                }
                if (waitpid(init3_pid, NULL, WNOHANG) == init3_pid)
                        break;
                msleep(20);
        }
        if (!exists(mark))
                tap_diag("no private mount namespace for the image tests");
        init3_pid = -1;
}

static void stop_init3(void)
{
        int status = -1;
        kill(init3_pid, SIGTERM);
        for (int t = 0; t < 10000; t += 10) {
                if (waitpid(init3_pid, &status, WNOHANG) == init3_pid)
                        break;
                msleep(10);
        }
        tap_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "third init exits 0 on SIGTERM");
}

/* Runs a command (or argv) on the third init as user (NULL: none). stdout
 * (malloc'd), *e set when the exec failed. */
static char *run3(const char *cmd, const char *const *argv, const char *user,
                  const char *const *env, abc_exec_res *res, ab_err **e)
{
        capture c = {0};
        abc_exec_req req = {.command = cmd,
                            .argv = argv,
                            .env = env,
                            .user = user,
                            .stdin_fd = -1,
                            .timeout_ms = 30000};
        *res = (abc_exec_res){.exit_code = -1};
        conn_sock = sock3;
        if (run(&req, &c, res, e) < 0)
                res->exit_code = -1;
        conn_sock = sock;
        if (c.o[2].n)
                tap_diag("  stderr: %s", out_of(&c, 2));
        char *out = xstrdup(out_of(&c, 1));
        capture_free(&c);
        return out;
}

/* The exe of the shell that ran a command: the path it was bound at. */
#define WHICH_SHELL "echo $0; readlink /proc/$$/exe; true" /* (not last: bash would exec it) */

static char *shell_path(const char *name)
{
        static char buf[2][PATH_MAX];
        static int i;
        i = (i + 1) % 2;
        char *r = realpath(name, buf[i]);
        return r ? r : (char *)name;
}

static void test_shells(void)
{
        abc_exec_res res;
        ab_err *e = NULL;
        char want[3 * PATH_MAX];
        const char *bash_at = shell_path("/bin/bash"), *sh_at = shell_path("/bin/sh");

        put_file(in_ws3(".profile"), "export FROM_PROFILE=yes\n");
        char *s = run3(WHICH_SHELL, NULL, NULL, NULL, &res, &e);
        snprintf(want, sizeof(want), "bash\n%s\n", bash_at);
        TAP_IS_STR(s, want, "with /bin/bash, a command runs in bash");
        free(s);

        must(chmod(in_img("bash"), 0644));
        s = run3(WHICH_SHELL, NULL, NULL, NULL, &res, &e);
        snprintf(want, sizeof(want), "sh\n%s\n", sh_at);
        TAP_IS_STR(s, want, "without an executable /bin/bash, it runs in /bin/sh (busybox)");
        free(s);
        s = run3("echo $FROM_PROFILE $SHELL $HOME; shopt -q login_shell 2>/dev/null || echo nobash",
                 NULL, NULL, NULL, &res, &e);
        snprintf(want, sizeof(want), "yes /bin/sh %s\nnobash\n", ws3);
        TAP_IS_STR(s, want, "... as a login shell (~/.profile read), SHELL=/bin/sh");
        free(s);
        /* One plain word: with bash the direct path would exec it without a shell. */
        s = run3("true", NULL, NULL, NULL, &res, &e);
        tap_ok(!e && res.exit_code == 0, "... a plain command works too");
        free(s);
        ab_err_free(&e);

        int fd = conn3();
        abc_term_info ti = {0};
        abc_term_req tq = {0};
        tap_ok(fd >= 0 && abc_term_open(fd, &tq, &ti, &e) == 0 && ti.argv && ti.argv[0] &&
                   !strcmp(ti.argv[0], "/bin/sh") && ti.argv[1] && !strcmp(ti.argv[1], "-l"),
               "a terminal without argv runs /bin/sh -l (%s)",
               ti.argv && ti.argv[0] ? ti.argv[0]
               : e                   ? e->msg
                                     : "?");
        if (fd >= 0)
                close(fd);
        ab_err_free(&e);
        if (ti.id) {
                fd = conn3();
                tap_ok(fd >= 0 && abc_term_close(fd, ti.id, &e) == 0, "... and closes");
                if (fd >= 0)
                        close(fd);
                ab_err_free(&e);
        }
        abc_term_info_clear(&ti);

        /* No shell at all: commands are refused, argv still runs. */
        must(chmod(in_img("sh"), 0644));
        s = run3("echo hi", NULL, NULL, NULL, &res, &e);
        tap_ok(e && e->code == AB_E_UNSUPPORTED && strstr(e->msg, "no shell") &&
                   strstr(e->msg, "argv") && !*s,
               "no shell: a command is ERROR unsupported (%s)", e ? e->msg : "no error");
        free(s);
        ab_err_free(&e);
        const char *echo[] = {"echo", "argv", "runs", NULL};
        s = run3(NULL, echo, NULL, NULL, &res, &e);
        tap_ok(!e && res.exit_code == 0 && !strcmp(s, "argv runs\n"),
               "no shell: an argv exec runs (%s)", s);
        free(s);
        ab_err_free(&e);
        const char *sh_argv[] = {"sh", "-c", "true", NULL};
        s = run3(NULL, sh_argv, NULL, NULL, &res, &e);
        tap_ok(!e && res.exit_code == 126, "no shell: argv 'sh' is not executable: 126 (%d)",
               res.exit_code);
        free(s);
        ab_err_free(&e);
        fd = conn3();
        tap_ok(fd >= 0 && abc_term_open(fd, &tq, &ti, &e) < 0 && e && e->code == AB_E_UNSUPPORTED &&
                   strstr(e->msg, "no shell"),
               "no shell: a login terminal is ERROR unsupported (%s)", e ? e->msg : "no error");
        if (fd >= 0)
                close(fd);
        ab_err_free(&e);
        abc_term_info_clear(&ti);
        const char *targv[] = {"sleep", "30", NULL};
        tq.argv = targv;
        fd = conn3();
        tap_ok(fd >= 0 && abc_term_open(fd, &tq, &ti, &e) == 0 && ti.running,
               "no shell: a terminal with argv runs");
        if (fd >= 0)
                close(fd);
        ab_err_free(&e);
        if (ti.id) {
                fd = conn3();
                if (fd >= 0 && abc_term_close(fd, ti.id, &e) < 0)
                        ab_err_free(&e);
                if (fd >= 0)
                        close(fd);
        }
        abc_term_info_clear(&ti);

        /* Installed again: looked for at every exec, not once at start. */
        must(chmod(in_img("bash"), 0755));
        must(chmod(in_img("sh"), 0755));
        s = run3(WHICH_SHELL, NULL, NULL, NULL, &res, &e);
        snprintf(want, sizeof(want), "bash\n%s\n", bash_at);
        TAP_IS_STR(s, want, "bash installed again: commands run in bash again");
        free(s);
        ab_err_free(&e);
}

#define IDS "awk '/^(Uid|Gid|Groups):/{$1=$1; print}' /proc/self/status"

/* The uid, gid and groups line of a command run as user, in one string. */
static char *ids_of(const char *user, ab_err **e)
{
        abc_exec_res res;
        return run3(IDS, NULL, user, NULL, &res, e);
}

static void test_users(void)
{
        abc_exec_res res;
        ab_err *e = NULL;
        char *s;

        s = ids_of("1234", &e);
        TAP_IS_STR(s, "Uid: 1234 1234 1234 1234\nGid: 1235 1235 1235 1235\nGroups: 50 1235 2000\n",
                   "USER 1234: its passwd gid, and the groups that list it");
        free(s);
        ab_err_free(&e);
        s = ids_of("alice", &e);
        TAP_IS_STR(s, "Uid: 1234 1234 1234 1234\nGid: 1235 1235 1235 1235\nGroups: 50 1235 2000\n",
                   "USER alice: the same, by name (the first alice wins)");
        free(s);
        ab_err_free(&e);
        s = ids_of("1234:3000", &e);
        TAP_IS_STR(s, "Uid: 1234 1234 1234 1234\nGid: 3000 3000 3000 3000\nGroups: 3000\n",
                   "USER 1234:3000: that gid, no other group");
        free(s);
        ab_err_free(&e);
        s = ids_of("alice:staff", &e);
        TAP_IS_STR(s, "Uid: 1234 1234 1234 1234\nGid: 50 50 50 50\nGroups: 50\n",
                   "USER alice:staff: the group by name");
        free(s);
        ab_err_free(&e);
        s = ids_of("4321", &e);
        TAP_IS_STR(s, "Uid: 4321 4321 4321 4321\nGid: 0 0 0 0\nGroups: 0\n",
                   "USER 4321 (no passwd entry): gid 0, as Docker");
        free(s);
        ab_err_free(&e);
        s = ids_of("bob", &e);
        TAP_IS_STR(s, "Uid: 1300 1300 1300 1300\nGid: 1300 1300 1300 1300\nGroups: 50 1300\n",
                   "USER bob: an entry after malformed lines");
        free(s);
        ab_err_free(&e);

        /* HOME, USER, LOGNAME. */
        const char *show = "echo \"$HOME|${USER-unset}|${LOGNAME-unset}\"";
        s = run3(show, NULL, "alice", NULL, &res, &e);
        TAP_IS_STR(s, "/home/alice|alice|alice\n", "HOME, USER, LOGNAME from the passwd entry");
        free(s);
        ab_err_free(&e);
        const char *env[] = {"HOME=/custom", "USER=someone", NULL};
        s = run3(show, NULL, "alice", env, &res, &e);
        TAP_IS_STR(s, "/custom|someone|alice\n", "... the request's ENV wins");
        free(s);
        ab_err_free(&e);
        s = run3(show, NULL, "4321", NULL, &res, &e);
        TAP_IS_STR(s, "/|unset|unset\n", "a uid without an entry: HOME=/, no USER");
        free(s);
        ab_err_free(&e);
        s = run3(show, NULL, "nohome", NULL, &res, &e);
        TAP_IS_STR(s, "/|nohome|nohome\n", "an entry with an empty home: HOME=/");
        free(s);
        ab_err_free(&e);
        s = run3(show, NULL, NULL, NULL, &res, &e);
        char want[PATH_MAX + 32];
        snprintf(want, sizeof(want), "%s|root|root\n", ws3);
        TAP_IS_STR(s, want, "no user: root, HOME the workdir, as before");
        free(s);
        ab_err_free(&e);

        /* argv, and what the user leaves behind. */
        const char *id_argv[] = {"id", "-u", NULL};
        s = run3(NULL, id_argv, "alice", NULL, &res, &e);
        TAP_IS_STR(s, "1234\n", "an argv exec runs as the user too");
        free(s);
        ab_err_free(&e);
        must(mkdir(in_ws3("shared"), 0777));
        must(chmod(in_ws3("shared"), 0777));
        s = run3("touch shared/by_alice", NULL, "alice", NULL, &res, &e);
        struct stat st;
        tap_ok(!e && stat(in_ws3("shared/by_alice"), &st) == 0 && st.st_uid == 1234 &&
                   st.st_gid == 1235,
               "a file the user creates is the user's");
        free(s);
        ab_err_free(&e);
        s = run3("touch not_yours", NULL, "alice", NULL, &res, &e);
        tap_ok(!e && res.exit_code != 0 && !exists(in_ws3("not_yours")),
               "the user cannot write the root-owned workdir");
        free(s);
        ab_err_free(&e);

        /* Refusals: ERROR invalid_argument, nothing runs. */
        struct {
                const char *user, *msg;
        } bad[] = {
            {"nosuch", "no user 'nosuch' in this box's /etc/passwd"},
            {"mallory", "no user 'mallory'"}, /* uid out of range: a skipped line */
            {"trudy", "no user 'trudy'"},     /* eight fields */
            {"+", "no user '+'"},
            {"alice:nogroup", "no group 'nogroup' in this box's /etc/group"},
            {"alice:", "user must be"},
            {":50", "user must be"},
            {"a:b:c", "user must be"},
            {"4294967295", "no user '4294967295'"}, /* (uid_t)-1 is not a uid */
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
                s = run3("touch shared/ran", NULL, bad[i].user, NULL, &res, &e);
                tap_ok(e && e->code == AB_E_INVALID && strstr(e->msg, bad[i].msg) &&
                           !exists(in_ws3("shared/ran")),
                       "USER '%s': invalid (%s)", bad[i].user, e ? e->msg : "no error");
                free(s);
                ab_err_free(&e);
        }

        /* The user database is read at every exec, and bounded. */
        rewrite(in_img("passwd"), PASSWD "\nzoe:x:1600:1600::/z:/bin/sh\n");
        s = ids_of("zoe", &e);
        tap_ok(!e && !strncmp(s, "Uid: 1600 ", 10), "a user added to /etc/passwd is found at once");
        free(s);
        ab_err_free(&e);
        size_t big = (4u << 20) + 100;
        char *huge = xmalloc(big + 1);
        memset(huge, '#', big);
        huge[big] = 0;
        for (size_t i = 80; i < big; i += 80)
                huge[i] = '\n';
        rewrite(in_img("passwd"), huge);
        free(huge);
        s = ids_of("1234", &e);
        tap_ok(e && e->code == AB_E_INVALID && strstr(e->msg, "larger than 4 MiB"),
               "an /etc/passwd over 4 MiB is refused (%s)", e ? e->msg : "no error");
        free(s);
        ab_err_free(&e);
        rewrite(in_img("passwd"), PASSWD);

        /* Terminals. */
        const char *targv[] = {"sh", "-c", "id -u > shared/term_uid; echo $HOME >> shared/term_uid",
                               NULL};
        abc_term_req tq = {.argv = targv, .user = "alice"};
        abc_term_info ti = {0};
        int fd = conn3();
        tap_ok(fd >= 0 && abc_term_open(fd, &tq, &ti, &e) == 0, "a terminal as alice opens");
        if (fd >= 0)
                close(fd);
        ab_err_free(&e);
        abc_term_info_clear(&ti);
        char *got = NULL;
        for (int t = 0; t < 5000 && !(got && strchr(got, '/')); t += 20) {
                free(got);
                msleep(20);
                got = get_file(in_ws3("shared/term_uid"));
        }
        TAP_IS_STR(got, "1234\n/home/alice\n", "... runs as alice, HOME hers");
        free(got);
        tq.user = "nosuch";
        fd = conn3();
        tap_ok(fd >= 0 && abc_term_open(fd, &tq, &ti, &e) < 0 && e && e->code == AB_E_INVALID &&
                   strstr(e->msg, "no user 'nosuch'"),
               "a terminal for an unknown user is invalid (%s)", e ? e->msg : "no error");
        if (fd >= 0)
                close(fd);
        ab_err_free(&e);
        abc_term_info_clear(&ti);
}

static void test_images(const char *bin)
{
        start_init3(bin);
        if (init3_pid < 0) {
                tap_ok(1, "# SKIP no private mount namespace (shells and users not tested)");
                return;
        }
        test_shells();
        test_users();
        stop_init3();
}

/* A fourth init in a user namespace that maps only uids and gids 0-65535,
 * as a box's: ids outside are refused before anything runs. */
static void test_userns(const char *bin)
{
        char dir[PATH_MAX], ws4[PATH_MAX + 8], sock4[PATH_MAX + 16], path[64];
        int sync[2];
        snprintf(dir, sizeof(dir), "%s/uns", tmp);
        snprintf(ws4, sizeof(ws4), "%s/ws", dir);
        snprintf(sock4, sizeof(sock4), "%s/init.sock", dir);
        must(mkdir(dir, 0755));
        must(mkdir(ws4, 0755));
        must(pipe2(sync, O_CLOEXEC));
        pid_t pid = fork();
        if (pid < 0)
                abort();
        if (pid == 0) {
                char ch;
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                if (unshare(CLONE_NEWUSER) < 0 || read(sync[0], &ch, 1) != 1 || ch != 'y')
                        _exit(77);
                execl(bin, bin, "--listen", sock4, "--workdir", ws4, (char *)NULL);
                _exit(127);
        }
        close(sync[0]);
        bool mapped = true;
        for (int t = 0; t < 2000; t += 10) {
                /* unshare done when the namespace differs from ours */
                char a[64], b[64];
                snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
                ssize_t n1 = readlink(path, a, sizeof(a) - 1),
                        n2 = readlink("/proc/self/ns/user", b, sizeof(b) - 1);
                if (n1 > 0 && n2 > 0 && (n1 != n2 || memcmp(a, b, (size_t)n1) != 0))
                        break;
                msleep(10);
        }
        const char *files[] = {"uid_map", "gid_map"};
        for (size_t i = 0; i < 2; i++) {
                snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, files[i]);
                int fd = open(path, O_WRONLY | O_CLOEXEC);
                mapped &= fd >= 0 && write(fd, "0 0 65536", 9) == 9;
                if (fd >= 0)
                        close(fd);
        }
        (void)!write(sync[1], mapped ? "y" : "n", 1);
        close(sync[1]);
        bool up = false;
        for (int t = 0; mapped && !up && t < 10000; t += 20) {
                ab_err *e = NULL;
                int fd = abc_connect(AT_FDCWD, sock4, &e);
                ab_err_free(&e);
                up = fd >= 0;
                if (fd >= 0)
                        close(fd);
                else if (waitpid(pid, NULL, WNOHANG) == pid)
                        break;
                else
                        msleep(20);
        }
        if (!up) {
                tap_ok(1, "# SKIP no user namespace (unmapped ids not tested)");
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                return;
        }
        conn_sock = sock4;
        struct {
                const char *user, *out, *err;
        } cases[] = {
            {"1234", "Uid: 1234 1234 1234 1234\nGid: 0 0 0 0\nGroups: 0\n", NULL},
            {"65535:65535",
             "Uid: 65535 65535 65535 65535\nGid: 65535 65535 65535 65535\n"
             "Groups: 65535\n",
             NULL},
            {"65536", NULL, "uid 65536 is not mapped in this box's user namespace"},
            {"1234:70000", NULL, "gid 70000 is not mapped in this box's user namespace"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++) {
                capture c = {0};
                abc_exec_res res;
                ab_err *e = NULL;
                abc_exec_req req = {
                    .command = IDS, .user = cases[i].user, .stdin_fd = -1, .timeout_ms = 30000};
                int r = run(&req, &c, &res, &e);
                if (cases[i].out)
                        tap_ok(r == 0 && !strcmp(out_of(&c, 1), cases[i].out),
                               "user namespace 0-65535: USER %s runs (%s%s)", cases[i].user,
                               out_of(&c, 1), e ? e->msg : "");
                else
                        tap_ok(r < 0 && e && e->code == AB_E_INVALID &&
                                   strstr(e->msg, cases[i].err),
                               "user namespace 0-65535: USER %s is invalid (%s)", cases[i].user,
                               e ? e->msg : "no error");
                ab_err_free(&e);
                capture_free(&c);
        }
        conn_sock = sock;
        int status = -1;
        kill(pid, SIGTERM);
        for (int t = 0; t < 10000; t += 10) {
                if (waitpid(pid, &status, WNOHANG) == pid)
                        break;
                msleep(10);
        }
        tap_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fourth init exits 0 on SIGTERM");
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
        tap_diag("agentbox-init did not come up");
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

/* RESERVE: the balloon is held by PID 1 (it outlives the session that
 * sized it), takes space from the workdir's filesystem, and no command sees
 * its fd. */
/* ---- WATCH ---- */

/* The events of a watch until it is quiet for quiet_ms: "KIND:name" lines. */
static char *watch_events(int fd, abp_reader *rd, int quiet_ms)
{
        ab_buf b = {0};
        for (;;) {
                uint32_t kind;
                char *name;
                ab_err *e = NULL;
                int k = abc_watch_next(fd, rd, quiet_ms, &kind, &name, &e);
                if (k <= 0) {
                        ab_err_free(&e);
                        break;
                }
                ab_buf_printf(&b, "%u:%s\n", kind, name);
                free(name);
        }
        ab_buf_add(&b, "", 1);
        return b.p;
}

static bool has_event(const char *evs, unsigned kind, const char *name)
{
        char want[PATH_MAX + 16];
        snprintf(want, sizeof(want), "%u:%s\n", kind, name);
        return strstr(evs, want) && (strstr(evs, want) == evs || strstr(evs, want)[-1] == '\n');
}

static void test_watch(void)
{
        must(mkdir(in_ws("w"), 0755));
        must(mkdir(in_ws("w/old"), 0755));
        int fd = conn();
        ab_err *e = NULL;
        int rc = abc_watch_open(fd, in_ws("w"), true, &e);
        tap_ok(rc == 0, "WATCH of a directory: OK (%s)", e ? e->msg : "");
        ab_err_free(&e);
        abp_reader rd = {0};
        ab_err *we = NULL;
        tap_ok(write_to(in_ws("w/a.txt"), "data", 0, 0644, &we) == 0, "a WRITE into it");
        ab_err_free(&we);
        must(mkdir(in_ws("w/new"), 0755));
        must(mkdir(in_ws("w/new/deeper"), 0755));
        put_file(in_ws("w/new/deeper/f.txt"), "f");
        put_file(in_ws("w/old/g.txt"), "g");
        must(rename(in_ws("w/a.txt"), in_ws("w/b.txt")));
        must(chmod(in_ws("w/b.txt"), 0600));
        must(unlink(in_ws("w/b.txt")));
        char *evs = watch_events(fd, &rd, 400);
        tap_ok(has_event(evs, ABP_WATCH_CREATE, "a.txt") &&
                   has_event(evs, ABP_WATCH_WRITE, "a.txt") && !strstr(evs, ".abtmp"),
               "a WRITE arrives as create + write under its own name, no temp file");
        tap_ok(has_event(evs, ABP_WATCH_CREATE, "new") &&
                   has_event(evs, ABP_WATCH_CREATE, "new/deeper/f.txt"),
               "recursive: a new folder and what was made in it before its watch");
        tap_ok(has_event(evs, ABP_WATCH_CREATE, "old/g.txt"), "recursive: an existing subfolder");
        tap_ok(has_event(evs, ABP_WATCH_RENAME, "a.txt") &&
                   has_event(evs, ABP_WATCH_CREATE, "b.txt"),
               "a rename: rename of the old name, create of the new");
        tap_ok(has_event(evs, ABP_WATCH_CHMOD, "b.txt") &&
                   has_event(evs, ABP_WATCH_REMOVE, "b.txt"),
               "chmod and remove");
        tap_diag("events: %s", evs);
        free(evs);
        abp_reader_free(&rd);
        close(fd);

        /* bounds: nothing below ABP_WATCH_DEPTH_MAX levels is watched */
        char deep[PATH_MAX] = "d";
        must(mkdir(in_ws("d"), 0755));
        for (int i = 1; i <= ABP_WATCH_DEPTH_MAX + 2; i++) {
                strncat(deep, "/x", sizeof(deep) - strlen(deep) - 1);
                must(mkdir(in_ws(deep), 0755));
        }
        fd = conn();
        tap_ok(abc_watch_open(fd, in_ws("d"), true, &e) == 0, "WATCH of a deep tree: OK");
        ab_err_free(&e);
        abp_reader rd2 = {0};
        char at_max[PATH_MAX] = "d", below[PATH_MAX];
        for (int i = 1; i <= ABP_WATCH_DEPTH_MAX; i++)
                strncat(at_max, "/x", sizeof(at_max) - strlen(at_max) - 1);
        snprintf(below, sizeof(below), "%s/x", at_max);
        char f1[PATH_MAX + 8], f2[PATH_MAX + 8];
        snprintf(f1, sizeof(f1), "%s/in.txt", at_max);
        snprintf(f2, sizeof(f2), "%s/out.txt", below);
        put_file(in_ws(f1), "1");
        put_file(in_ws(f2), "2");
        evs = watch_events(fd, &rd2, 400);
        tap_ok(strstr(evs, "in.txt") && !strstr(evs, "out.txt"),
               "a file %d levels down is seen, one level further is not", ABP_WATCH_DEPTH_MAX);
        free(evs);
        abp_reader_free(&rd2);
        close(fd);

        fd = conn();
        rc = abc_watch_open(fd, in_ws("no-such-dir"), false, &e);
        tap_ok(rc < 0 && e && e->code == AB_E_NOT_FOUND,
               "WATCH of a missing directory: not_found (%s)", e ? e->msg : "no error");
        ab_err_free(&e);
        close(fd);
        put_file(in_ws("plain"), "p");
        fd = conn();
        rc = abc_watch_open(fd, in_ws("plain"), false, &e);
        tap_ok(rc < 0 && e, "WATCH of a file: an error (%s)", e ? e->msg : "none");
        ab_err_free(&e);
        close(fd);
}

static void test_reserve(void)
{
        const uint64_t mib = 1024 * 1024;
        abc_reserve_res r = {0};
        ab_err *e = NULL;
        int fd = conn();
        tap_ok(fd >= 0 && abc_reserve(fd, UINT64_MAX, &r, &e) == 0, "RESERVE without a size");
        if (e) {
                tap_diag("  %s", e->msg);
                ab_err_free(&e);
                if (fd >= 0)
                        close(fd);
                return;
        }
        close(fd);
        tap_ok(r.held == 0 && r.free > 8 * mib, "no balloon at first, the free space is known");
        fd = conn();
        tap_ok(fd >= 0 && abc_reserve(fd, 8 * mib, &r, &e) == 0, "RESERVE 8 MiB");
        ab_err_free(&e);
        close(fd);
        tap_ok(r.held >= 8 * mib && r.held < 9 * mib, "the balloon holds 8 MiB (%llu)",
               (unsigned long long)r.held);
        fd = conn();
        tap_ok(fd >= 0 && abc_reserve(fd, UINT64_MAX, &r, &e) == 0 && r.held >= 8 * mib,
               "a later session sees the same balloon (PID 1 holds it)");
        ab_err_free(&e);
        close(fd);
        capture c = {0};
        abc_exec_res res;
        tap_ok(run_cmd("ls -l /proc/$$/fd/ | grep -c deleted || true", &c, &res, &e) == 0 &&
                   !strcmp(out_of(&c, 1), "0\n"),
               "a command does not inherit the balloon's fd");
        ab_err_free(&e);
        capture_free(&c);
        fd = conn();
        tap_ok(fd >= 0 && abc_reserve(fd, 0, &r, &e) == 0 && r.held == 0, "RESERVE 0 lets go");
        ab_err_free(&e);
        close(fd);
}

/* STATS: init's own cgroup (here the test's, as init sees it). */
static void test_stats(void)
{
        abp_stats st;
        ab_err *e = NULL;
        int fd = conn();
        int rc = fd >= 0 ? abc_stats(fd, &st, &e) : -1;
        tap_ok(rc == 0, "STATS answers (%s)", e ? e->msg : "ok");
        ab_err_free(&e);
        if (fd >= 0)
                close(fd);
        if (rc < 0)
                return;
        tap_ok(st.has_memory && st.memory > 0, "STATS: the memory in use (%llu bytes)",
               (unsigned long long)st.memory);
        /* (a root cgroup, as a test machine's may be, has no pids.current) */
        tap_ok(!st.has_pids || st.pids >= 1, "STATS: the cgroup's tasks, init among them (%llu)",
               (unsigned long long)st.pids);
        tap_ok(st.has_cpu_ns && st.cpu_ns > 0, "STATS: CPU time used (%llu ns)",
               (unsigned long long)st.cpu_ns);
        tap_ok(!st.has_memory_max || st.memory_max > 0,
               "STATS: a limit, when there is one, is set");
}

/* A server on the test's loopback for PORT: it speaks first (a banner,
 * which must not be lost to a client reading ahead), echoes what it gets
 * and, when the client half-closes, says "bye" and closes. */
typedef struct port_srv {
        int lfd;
        int port;
} port_srv;

static void *port_srv_main(void *arg)
{
        port_srv *ps = arg;
        int c = accept(ps->lfd, NULL, NULL);
        if (c < 0)
                return NULL;
        (void)!write(c, "hello\n", 6);
        char buf[65536];
        ssize_t n;
        while ((n = read(c, buf, sizeof(buf))) > 0)
                if (ab_write_all(c, buf, (size_t)n) < 0)
                        break;
        (void)!write(c, "bye", 3);
        close(c);
        return NULL;
}

static int port_listen(int family, int *port)
{
        int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_storage ss = {0};
        socklen_t len;
        if (family == AF_INET) {
                struct sockaddr_in *a = (struct sockaddr_in *)&ss;
                a->sin_family = AF_INET;
                a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                len = sizeof(*a);
        } else {
                struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
                a->sin6_family = AF_INET6;
                a->sin6_addr = in6addr_loopback;
                len = sizeof(*a);
        }
        if (s < 0 || bind(s, (struct sockaddr *)&ss, len) < 0 || listen(s, 4) < 0 ||
            getsockname(s, (struct sockaddr *)&ss, &len) < 0) {
                if (s >= 0)
                        close(s);
                return -1;
        }
        *port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                        : ((struct sockaddr_in6 *)&ss)->sin6_port);
        return s;
}

/* One relayed connection to a server on `family`'s loopback: banner, a
 * payload of `len` bytes echoed whole, the client's half-close passed on. */
static void port_roundtrip(int family, size_t len, const char *what)
{
        port_srv ps = {0};
        ps.lfd = port_listen(family, &ps.port);
        if (ps.lfd < 0) {
                tap_ok(true, "PORT %s # SKIP no loopback for this family here", what);
                return;
        }
        /* An [::1]-only server: 127.0.0.1 at the same port is held bound (not
         * listening), so init's first try is refused there, never answered
         * by another process that happens to listen on that port */
        _cleanup_close_ int v4 = -1;
        for (int i = 0; family == AF_INET6 && v4 < 0 && i < 20; i++) {
                struct sockaddr_in a = {.sin_family = AF_INET,
                                        .sin_port = htons((uint16_t)ps.port),
                                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
                v4 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (v4 >= 0 && bind(v4, (struct sockaddr *)&a, sizeof(a)) == 0)
                        break;
                if (v4 >= 0)
                        close(v4);
                v4 = -1;
                close(ps.lfd); /* taken on IPv4: another port */
                ps.lfd = port_listen(family, &ps.port);
                if (ps.lfd < 0)
                        break;
        }
        if (ps.lfd < 0) {
                tap_ok(false, "PORT %s: a loopback port of its own", what);
                return;
        }
        pthread_t t;
        pthread_create(&t, NULL, port_srv_main, &ps);
        ab_err *e = NULL;
        int fd = conn();
        int rc = fd >= 0 ? abc_port(fd, (uint16_t)ps.port, 2000, &e) : -1;
        _cleanup_free_ char *data = xmalloc(len + 1);
        for (size_t i = 0; i < len; i++)
                data[i] = (char)('a' + i % 26);
        size_t cap = len + 64;
        _cleanup_free_ char *got = xzalloc(cap + 1);
        size_t n = 0;
        if (rc == 0) {
                /* the banner first, before anything is sent */
                n = (size_t)recv(fd, got, 6, MSG_WAITALL);
                /* write and read at once, so a large payload cannot fill
                 * both directions' buffers */
                size_t off = 0;
                int fl = fcntl(fd, F_GETFL);
                fcntl(fd, F_SETFL, fl | O_NONBLOCK);
                while (off < len || n < cap) {
                        struct pollfd p = {.fd = fd, .events = POLLIN | (off < len ? POLLOUT : 0)};
                        if (poll(&p, 1, 5000) != 1)
                                break;
                        if ((p.revents & POLLOUT) && off < len) {
                                ssize_t k = send(fd, data + off, len - off, MSG_NOSIGNAL);
                                if (k > 0)
                                        off += (size_t)k;
                                if (off == len)
                                        shutdown(fd, SHUT_WR);
                        }
                        if (p.revents & (POLLIN | POLLHUP)) {
                                ssize_t k = read(fd, got + n, cap - n);
                                if (k <= 0)
                                        break;
                                n += (size_t)k;
                        }
                }
        }
        tap_ok(rc == 0 && n == 6 + len + 3 && !memcmp(got, "hello\n", 6) &&
                   !memcmp(got + 6, data, len) && !memcmp(got + 6 + len, "bye", 3),
               "PORT %s: the server's banner, %zu bytes echoed, the half-close passed on (%s, "
               "%zu bytes back)",
               what, len, e ? e->msg : "ok", n);
        ab_err_free(&e);
        if (fd >= 0)
                close(fd);
        shutdown(ps.lfd, SHUT_RDWR);
        pthread_join(t, NULL);
        close(ps.lfd);
}

/* Runs `init --image-probe DIR/NAME` in DIR as uid:gid; what it wrote. */
static char *run_probe(const char *bin, const char *dir, uid_t uid, gid_t gid, const char *name)
{
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        pid_t pid = fork();
        if (pid == 0) {
                if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0 || chdir(dir) < 0)
                        _exit(127);
                execl(bin, bin, "--image-probe", path, (char *)NULL);
                _exit(127);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                return NULL;
        char buf[1024];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        if (fd >= 0)
                close(fd);
        if (n < 0)
                return NULL;
        buf[n] = 0;
        return xstrdup(buf);
}

/* --image-probe: the user and directory it was started with, as an image's
 * User and WorkingDir (the kubernetes backend's pods run it so). */
static void test_image_probe(const char *bin)
{
        /* beside the test's own folder (0700: another uid cannot enter it) */
        _cleanup_free_ char *dir = xasprintf("%s.probe", tmp);
        mkdir(dir, 0777);
        chmod(dir, 0777);
        _cleanup_free_ char *r0 = run_probe(bin, dir, 0, 0, "root.json");
        _cleanup_free_ char *want0 = xasprintf("{\"workdir\":\"%s\"}\n", dir);
        TAP_IS_STR(r0, want0, "--image-probe as root: the working directory, no user");
        struct passwd *pw = getpwnam("www-data");
        if (pw) {
                uid_t u = pw->pw_uid;
                gid_t g = pw->pw_gid;
                _cleanup_free_ char *r1 = run_probe(bin, dir, u, g, "named.json");
                _cleanup_free_ char *want1 =
                    xasprintf("{\"workdir\":\"%s\",\"user\":\"www-data\"}\n", dir);
                TAP_IS_STR(r1, want1, "--image-probe as www-data: its name (its passwd group)");
                _cleanup_free_ char *r2 = run_probe(bin, dir, u, 4242, "group.json");
                _cleanup_free_ char *want2 =
                    xasprintf("{\"workdir\":\"%s\",\"user\":\"www-data:4242\"}\n", dir);
                TAP_IS_STR(r2, want2, "... with another group: name:gid");
        } else {
                tap_ok(true, "--image-probe as a named user # SKIP no www-data on this host");
        }
        _cleanup_free_ char *r3 = run_probe(bin, dir, 4343, 4242, "ids.json");
        _cleanup_free_ char *want3 =
            xasprintf("{\"workdir\":\"%s\",\"user\":\"4343:4242\"}\n", dir);
        TAP_IS_STR(r3, want3, "a uid without a passwd entry: uid:gid");
        const char *names[] = {"root.json", "named.json", "group.json", "ids.json"};
        for (size_t i = 0; i < 4; i++) {
                _cleanup_free_ char *p = xasprintf("%s/%s", dir, names[i]);
                unlink(p);
        }
        rmdir(dir);
}

/* PORT: init connects to a port on its loopback (here the test's) and
 * relays the connection. */
static void test_port(void)
{
        port_roundtrip(AF_INET, 5, "127.0.0.1");
        port_roundtrip(AF_INET, 3 * 1024 * 1024, "127.0.0.1, 3 MiB");
        port_roundtrip(AF_INET6, 100, "[::1] only");

        /* nothing listens: a port just closed */
        int free_port = 0;
        int s = port_listen(AF_INET, &free_port);
        close(s);
        ab_err *e = NULL;
        int fd = conn();
        int rc = fd >= 0 ? abc_port(fd, (uint16_t)free_port, 2000, &e) : -1;
        tap_ok(rc < 0 && e && e->code == AB_E_UNAVAILABLE && e->errnum == ECONNREFUSED,
               "PORT to a port nothing listens on: unavailable, refused (%s)", e ? e->msg : "ok");
        ab_err_free(&e);
        if (fd >= 0)
                close(fd);

        /* a request without a port */
        fd = conn();
        abp_buf b = {0};
        abp_reader rd = {0};
        abp_frame f;
        abp_error er;
        bool refused = false;
        if (fd >= 0 && abp_enc_empty(&b, ABP_PORT) == 0 && abp_send(fd, &b, 2000) == 0 &&
            abp_recv(fd, &rd, &f, 2000) == 0 && f.type == ABP_ERROR && abp_dec_error(&f, &er) == 0)
                refused = !strcmp(er.code, "invalid_argument");
        tap_ok(refused, "PORT without a port: invalid_argument");
        abp_buf_free(&b);
        abp_reader_free(&rd);
        if (fd >= 0)
                close(fd);
}

int main(int argc, char **argv)
{
        const char *name = argc > 0 ? strrchr(argv[0], '/') : NULL;
        if (argc > 0 && strcmp(name ? name + 1 : argv[0], "bash") == 0)
                bash_stand_in(argv);
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
        snprintf(le_dir, sizeof(le_dir), "%s/le", tmp);
        snprintf(ws2, sizeof(ws2), "%s/ws", le_dir);
        snprintf(sock2, sizeof(sock2), "%s/init.sock", le_dir);
        mkdir(le_dir, 0755);
        mkdir(ws2, 0755);
        snprintf(img, sizeof(img), "%s/img", tmp);
        snprintf(ws3, sizeof(ws3), "%s/ws", img);
        snprintf(sock3, sizeof(sock3), "%s/init.sock", img);
        mkdir(img, 0755);
        mkdir(ws3, 0755);
        signal(SIGPIPE, SIG_IGN);

        start_init(bin);
        tap_ok(init_pid > 0, "agentbox-init is listening");
        if (init_pid > 0) {
                test_ping();
                test_exec_basic();
                test_stdin();
                test_env_cwd();
                test_timeout();
                test_argv();
                test_background();
                test_output_cap();
                test_disconnect();
                test_concurrent();
                test_bad_peers();
                test_read_write();
                test_list_stat();
                test_delete_mkdir_rename();
                test_chmod_chown_symlink();
                test_mount_errors();
                test_reserve();
                test_stats();
                test_port();
                test_image_probe(bin);
                test_watch();
                stop_init();
        }
        start_init2(bin);
        test_login_env();
        if (init2_pid > 0)
                stop_init2();
        test_images(bin);
        test_userns(bin);
        rm_rf(tmp);
        return tap_done();
}
