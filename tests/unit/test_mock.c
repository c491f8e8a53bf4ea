/* The mock backend (backend/mock.c): boxes in memory, execs answered from
 * an expectations file, files in memory behind the init protocol, every
 * call logged. Needs no root. */
#include "backend/backend.h"
#include "base/util.h"
#include "proto/initclient.h"
#include "tap.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct out {
        char b[2][4096];
        size_t n[2];
} out;

static int collect(void *ud, int stream, const void *buf, size_t len)
{
        out *o = ud;
        int i = stream == 2;
        size_t room = sizeof(o->b[i]) - 1 - o->n[i];
        size_t take = len < room ? len : room;
        memcpy(o->b[i] + o->n[i], buf, take);
        o->n[i] += take;
        o->b[i][o->n[i]] = '\0';
        return 0;
}

static int code_of(int rc, ab_err **e)
{
        int c = rc < 0 && *e ? (int)(*e)->code : 0;
        ab_err_free(e);
        return c;
}

static int run(ab_backend *b, const char *id, const abc_exec_req *q, out *o, abc_exec_res *res,
               ab_err **e)
{
        memset(o, 0, sizeof(*o));
        int fd = b->ops->connect(b, id, e);
        if (fd < 0)
                return -1;
        int rc = abc_exec(fd, q, collect, o, res, e);
        close(fd);
        return rc;
}

typedef struct grep_hits {
        int n;
        char text[2][256];
        uint64_t line[2];
} grep_hits;

static int grep_hit(void *ud, size_t index, uint64_t line, const char *text, size_t len)
{
        (void)index;
        grep_hits *h = ud;
        if (h->n < 2) {
                snprintf(h->text[h->n], sizeof(h->text[0]), "%.*s", (int)len, text);
                h->line[h->n] = line;
        }
        h->n++;
        return 0;
}

static void write_text(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        if (!f)
                abort();
        fputs(text, f);
        fclose(f);
}

static size_t count_lines(const char *path, const char *needle)
{
        _cleanup_free_ char *text = NULL;
        size_t len = 0, n = 0;
        if (ab_read_file(AT_FDCWD, path, &text, &len) < 0)
                return 0;
        for (char *l = text; l && *l;) {
                char *nl = strchr(l, '\n');
                if (nl)
                        *nl = '\0';
                if (strstr(l, needle))
                        n++;
                l = nl ? nl + 1 : NULL;
        }
        return n;
}

/* A started process's id ("t_none" when it did not start: the checks fail, not crash). */
#define TID(t) ((t).id ? (t).id : "t_none")

/* Follows an attached (or snapshot) stream to its end: output into *o,
 * the last event's kind returned (EXIT, CLOSED) with *ev, or -1. */
static int follow(abc_term_stream *st, out *o, abc_term_event *ev)
{
        memset(o, 0, sizeof(*o));
        for (;;) {
                int r = abc_term_next(st, ev);
                if (r < 0)
                        return -1;
                if (r == 0) {
                        struct pollfd p = {.fd = abc_term_stream_fd(st), .events = POLLIN};
                        if (poll(&p, 1, 5000) <= 0)
                                return -1;
                        continue;
                }
                if (ev->kind != ABC_TERM_OUTPUT)
                        return (int)ev->kind;
                collect(o, ev->stream, ev->data, ev->len);
        }
}

/* Starts a background process in box id; its info in *t (cleared by the caller). */
static int proc_start(ab_backend *b, const char *id, const abc_term_req *q, abc_term_info *t,
                      ab_err **e)
{
        int fd = b->ops->connect(b, id, e);
        if (fd < 0)
                return -1;
        int r = abc_term_open(fd, q, t, e);
        close(fd);
        return r;
}

/* Attaches (or takes a snapshot) and follows to the end. */
static int proc_follow(ab_backend *b, const char *id, const char *tid, bool snapshot, out *o,
                       abc_term_event *ev, abc_term_info *t)
{
        ab_err *e = NULL;
        int fd = b->ops->connect(b, id, &e);
        abc_term_stream *st = NULL;
        int r = fd < 0     ? -1
                : snapshot ? abc_term_snapshot(fd, tid, t, &st, &e)
                           : abc_term_attach(fd, tid, t, &st, &e);
        if (r == 0)
                r = follow(st, o, ev);
        else
                r = e ? -(int)e->code : -1;
        abc_term_stream_free(st);
        ab_err_free(&e);
        if (fd >= 0)
                close(fd);
        return r;
}

int main(void)
{
        char dir[] = "/tmp/ab-mock-XXXXXX";
        if (!mkdtemp(dir))
                return 1;
        _cleanup_free_ char *exp = xasprintf("%s/expect.json", dir);
        _cleanup_free_ char *log = xasprintf("%s/calls.jsonl", dir);
        write_text(exp,
                   "{\"commands\": ["
                   "{\"command\": \"ls\", \"stdout\": \"a\\nb\\n\"},"
                   "{\"regex\": \"^go test( .*)?$\", \"stdout\": \"PASS\\n\", \"delay_ms\": 200},"
                   "{\"command\": \"false\", \"stderr\": \"boom\\n\", \"exit_code\": 3},"
                   "{\"command\": \"echo hi\", \"stdout\": \"hi\\n\"},"
                   "{\"command\": \"serve\", \"stdout\": \"up\\n\", \"delay_ms\": 600000}]}");
        ab_err *e = NULL;
        ab_backend *b = NULL;

        /* ---- bad expectation files are refused at open, naming the problem ---- */
        _cleanup_free_ char *bad = xasprintf("%s/bad.json", dir);
        write_text(bad, "{\"commands\": [{\"command\": \"x\", \"regex\": \"y\"}]}");
        ab_mock_opts bo = {.expect_path = bad};
        tap_ok(ab_mock_open(&bo, &b, &e) < 0 && e && e->code == AB_E_INVALID &&
                   strstr(e->msg, "commands[0]"),
               "a rule with both command and regex: refused (%s)", e ? e->msg : "no error");
        ab_err_free(&e);
        write_text(bad, "{\"commands\": [{\"regex\": \"(\"}]}");
        tap_ok(ab_mock_open(&bo, &b, &e) < 0 && e && strstr(e->msg, "regex"),
               "a bad regex: refused (%s)", e ? e->msg : "no error");
        ab_err_free(&e);
        write_text(bad, "{\"commands\": [{\"command\": \"x\", \"exit_code\": 300}]}");
        tap_ok(ab_mock_open(&bo, &b, &e) < 0 && e && strstr(e->msg, "exit_code"),
               "an exit code over 255: refused (%s)", e ? e->msg : "no error");
        ab_err_free(&e);
        bo.expect_path = "/nonexistent/expect.json";
        tap_ok(ab_mock_open(&bo, &b, &e) < 0 && e && strstr(e->msg, "/nonexistent/expect.json"),
               "a missing file: refused, naming it");
        ab_err_free(&e);

        ab_mock_opts mo = {.expect_path = exp, .log_path = log};
        tap_ok(ab_mock_open(&mo, &b, &e) == 0, "open the mock backend as uid %d", (int)getuid());
        TAP_IS_STR(b->ops->name, "mock", "its name is mock");
        tap_ok(!b->ops->connect_unix && !b->ops->image_config && !b->ops->fork && !b->subcg &&
                   !b->vol,
               "it has none of the optional ops");

        ab_box_spec s = {.id = "m1", .limits = {.disk_mib = 1, .memory_mib = 64}};
        tap_ok(b->ops->create(b, &s, &e) == 0, "create m1");
        TAP_IS_INT(code_of(b->ops->create(b, &s, &e), &e), AB_E_CONFLICT,
                   "create it again: conflict");
        ab_box_info bi;
        tap_ok(b->ops->info(b, "m1", &bi, &e) == 0 && bi.status == AB_BOX_RUNNING &&
                   !strcmp(bi.backend, "mock"),
               "info: running, on mock");
        ab_box_info_clear(&bi);

        /* ---- execs ---- */
        out o;
        abc_exec_res res;
        abc_exec_req q = {.command = "ls", .stdin_fd = -1};
        tap_ok(run(b, "m1", &q, &o, &res, &e) == 0 && res.exit_code == 0 &&
                   !strcmp(o.b[0], "a\nb\n"),
               "an exact match: its stdout, exit 0");
        q.command = "go test ./...";
        uint64_t t0 = ab_now_ms();
        tap_ok(run(b, "m1", &q, &o, &res, &e) == 0 && !strcmp(o.b[0], "PASS\n") &&
                   ab_now_ms() - t0 >= 200,
               "a regex match, after its delay");
        q.timeout_ms = 50;
        tap_ok(run(b, "m1", &q, &o, &res, &e) == 0 && res.timed_out && res.exit_code == 124 &&
                   ab_now_ms() - t0 < 2000,
               "a delay over the exec's timeout: timed out, 124");
        q = (abc_exec_req){.command = "false", .stdin_fd = -1};
        tap_ok(run(b, "m1", &q, &o, &res, &e) == 0 && res.exit_code == 3 &&
                   !strcmp(o.b[1], "boom\n"),
               "an exit code and stderr");
        q.command = "rm -rf /";
        tap_ok(run(b, "m1", &q, &o, &res, &e) == 0 && res.exit_code == 127 &&
                   strstr(o.b[1], "no expectation matches this command: rm -rf /"),
               "no rule matches: 127 and a message (%s)", o.b[1]);
        const char *argv[] = {"echo", "hi", NULL};
        q = (abc_exec_req){.argv = argv, .stdin_fd = -1};
        tap_ok(run(b, "m1", &q, &o, &res, &e) == 0 && !strcmp(o.b[0], "hi\n"),
               "argv is matched as its words joined by spaces");
        const char *wrapped[] = {"/bin/sh", "-c", "exec \"$@\"", "sh", "/bin/bash",
                                 "-l",      "-c", "echo hi",     NULL};
        q = (abc_exec_req){.argv = wrapped, .stdin_fd = -1};
        tap_ok(run(b, "m1", &q, &o, &res, &e) == 0 && !strcmp(o.b[0], "hi\n"),
               "argv ending in -c CMD (a front's wrapper) is matched by CMD");
        q = (abc_exec_req){.command = "ls", .stdin_fd = -1, .output_cap = 1};
        tap_ok(run(b, "m1", &q, &o, &res, &e) == 0 && res.truncated && !strncmp(o.b[0], "a\n[", 3),
               "the output cap holds");

        /* ---- background processes (TERM_* with PIPES), from the same rules ---- */
        {
                abc_term_info t = {0}, u = {0};
                abc_term_event ev;
                abc_term_req pq = {.pipes = true, .command = "ls", .tag = "tag-ls"};
                tap_ok(proc_start(b, "m1", &pq, &t, &e) == 0 && t.pipes && t.pid >= 100 && t.tag &&
                           !strcmp(t.tag, "tag-ls") && t.argv && t.argv[0] && t.argv[1] &&
                           t.argv[2] && !strcmp(t.argv[2], "ls"),
                       "a process: started, its tag and argv kept");
                char *ls_id = xstrdup(t.id ? t.id : "none");
                abc_term_info_clear(&t);
                tap_ok(proc_follow(b, "m1", ls_id, false, &o, &ev, &u) == ABC_TERM_EXIT &&
                           ev.exit_code == 0 && !strcmp(o.b[0], "a\nb\n") && !u.running &&
                           u.lines == 2,
                       "... attach: the rule's stdout replayed, EXIT 0, 2 lines");
                abc_term_info_clear(&u);
                tap_ok(proc_follow(b, "m1", ls_id, true, &o, &ev, &u) == ABC_TERM_CLOSED &&
                           !strcmp(o.b[0], "a\nb\n"),
                       "... a snapshot: the ring, then the end");
                abc_term_info_clear(&u);

                const char *falsev[] = {"/bin/sh", "-c", "false", NULL};
                pq = (abc_term_req){.pipes = true, .argv = falsev, .merge = true};
                tap_ok(proc_start(b, "m1", &pq, &t, &e) == 0, "argv ending in -c CMD, merged");
                tap_ok(proc_follow(b, "m1", TID(t), false, &o, &ev, &u) == ABC_TERM_EXIT &&
                           ev.exit_code == 3 && !strcmp(o.b[0], "boom\n") && !o.n[1],
                       "... its stderr on stdout, exit 3");
                abc_term_info_clear(&t);
                abc_term_info_clear(&u);

                pq = (abc_term_req){.pipes = true, .command = "go test ./a"};
                uint64_t t1 = ab_now_ms();
                tap_ok(proc_start(b, "m1", &pq, &t, &e) == 0 && t.running,
                       "a process with a delay runs");
                tap_ok(proc_follow(b, "m1", TID(t), false, &o, &ev, &u) == ABC_TERM_EXIT &&
                           ev.exit_code == 0 && !strcmp(o.b[0], "PASS\n") && u.running &&
                           ab_now_ms() - t1 >= 200,
                       "... attached: live output and EXIT after its delay");
                abc_term_info_clear(&t);
                abc_term_info_clear(&u);

                pq.timeout_ms = 50;
                tap_ok(proc_start(b, "m1", &pq, &t, &e) == 0 &&
                           proc_follow(b, "m1", TID(t), false, &o, &ev, &u) == ABC_TERM_EXIT &&
                           ev.exit_code == 124 && ev.timed_out && !o.n[0],
                       "a delay over its timeout: 124, timed out, no output");
                abc_term_info_clear(&t);
                abc_term_info_clear(&u);

                pq = (abc_term_req){.pipes = true, .command = "serve", .tag = "k"};
                tap_ok(proc_start(b, "m1", &pq, &t, &e) == 0 && t.running, "start another");
                int fd = b->ops->connect(b, "m1", &e);
                tap_ok(abc_proc_write(fd, TID(t), "in", 2, true, &e) == 0,
                       "... input, closing stdin");
                close(fd);
                fd = b->ops->connect(b, "m1", &e);
                TAP_IS_INT(code_of(abc_proc_write(fd, TID(t), "x", 1, false, &e), &e),
                           AB_E_CONFLICT, "... input to its closed stdin: conflict");
                close(fd);
                fd = b->ops->connect(b, "m1", &e);
                tap_ok(abc_term_signal(fd, TID(t), SIGKILL, &e) == 0, "... SIGKILL");
                close(fd);
                tap_ok(proc_follow(b, "m1", TID(t), false, &o, &ev, &u) == ABC_TERM_EXIT &&
                           ev.exit_code == 137 && !o.n[0] && !u.running && u.ended_ms,
                       "... it ended with 137, no output");
                abc_term_info_clear(&u);
                fd = b->ops->connect(b, "m1", &e);
                abc_term_info *l = NULL;
                size_t nl = 0;
                tap_ok(abc_term_list_kind(fd, true, &l, &nl, &e) == 0 && nl == 5 &&
                           !strcmp(l[0].id, ls_id) && l[4].tag && !strcmp(l[4].tag, "k") &&
                           l[4].exit_code == 137,
                       "list: the 5 processes, oldest first, with tags and exit codes");
                abc_term_infos_free(l, nl);
                close(fd);
                fd = b->ops->connect(b, "m1", &e);
                tap_ok(abc_term_list(fd, &l, &nl, &e) == 0 && nl == 0,
                       "... the terminals' list is empty");
                abc_term_infos_free(l, nl);
                close(fd);
                fd = b->ops->connect(b, "m1", &e);
                tap_ok(abc_term_close(fd, ls_id, &e) == 0, "close one");
                close(fd);
                tap_ok(proc_follow(b, "m1", ls_id, false, &o, &ev, &u) == -AB_E_NOT_FOUND,
                       "... then it is not found");
                abc_term_req tq = {0};
                fd = b->ops->connect(b, "m1", &e);
                TAP_IS_INT(code_of(abc_term_open(fd, &tq, &u, &e), &e), AB_E_UNSUPPORTED,
                           "a terminal with a pty: unsupported");
                close(fd);
                tap_ok(b->ops->stop(b, "m1", &e) == 0 && b->ops->start(b, "m1", &e) == 0,
                       "stop and start the box");
                fd = b->ops->connect(b, "m1", &e);
                tap_ok(abc_term_list_kind(fd, true, &l, &nl, &e) == 0 && nl == 0,
                       "... its processes died with it");
                abc_term_infos_free(l, nl);
                close(fd);
                free(ls_id);
                abc_term_info_clear(&t);
        }
        sleep(1); /* a new mtime */
        write_text(exp, "{\"commands\": [{\"command\": \"ls\", \"stdout\": \"new\\n\"}]}");
        q = (abc_exec_req){.command = "ls", .stdin_fd = -1};
        tap_ok(run(b, "m1", &q, &o, &res, &e) == 0 && !strcmp(o.b[0], "new\n"),
               "a rewritten expectations file is read again");

        /* ---- files ---- */
        int fd = b->ops->connect(b, "m1", &e);
        tap_ok(abc_write(fd, "src/a.txt", "hello\nworld\n", 12, -1, 0, 0, &e) < 0 && e &&
                   e->code == AB_E_NOT_FOUND,
               "write without its folder: not found");
        ab_err_free(&e);
        close(fd);
        fd = b->ops->connect(b, "m1", &e);
        tap_ok(abc_write(fd, "src/a.txt", "hello\nworld\n", 12, -1, ABC_W_MKPARENTS, 0, &e) == 0,
               "write with parents");
        close(fd);
        fd = b->ops->connect(b, "m1", &e);
        memset(&o, 0, sizeof(o));
        tap_ok(abc_read(fd, "/workspace/src/a.txt", 0, 0, collect, &o, &e) == 0 &&
                   !strcmp(o.b[0], "hello\nworld\n"),
               "read it back by its absolute path");
        close(fd);
        fd = b->ops->connect(b, "m1", &e);
        abc_stat st;
        tap_ok(abc_stat_path(fd, "../../workspace/src/./a.txt", &st, &e) == 0 &&
                   st.type == ABC_FILE && st.size == 12,
               "stat through .. and . (the box's root is the top)");
        free(st.link);
        close(fd);
        fd = b->ops->connect(b, "m1", &e);
        abc_dirent *d = NULL;
        size_t n = 0;
        tap_ok(abc_list(fd, "/workspace", 2, &d, &n, &e) == 0 && n == 2 &&
                   !strcmp(d[0].path, "src") && !strcmp(d[1].path, "src/a.txt") &&
                   d[0].st.type == ABC_DIR,
               "list two levels: src, src/a.txt");
        abc_dirents_free(d, n);
        close(fd);
        fd = b->ops->connect(b, "m1", &e);
        tap_ok(abc_rename(fd, "src", "lib", &e) == 0, "rename a folder");
        close(fd);
        fd = b->ops->connect(b, "m1", &e);
        tap_ok(abc_stat_path(fd, "lib/a.txt", &st, &e) == 0, "... its file moved with it");
        free(st.link);
        close(fd);
        fd = b->ops->connect(b, "m1", &e);
        TAP_IS_INT(code_of(abc_delete(fd, "lib", false, &e), &e), AB_E_CONFLICT,
                   "delete a full folder without recursive: conflict");
        close(fd);
        fd = b->ops->connect(b, "m1", &e);
        tap_ok(abc_delete(fd, "lib", true, &e) == 0, "... recursive: gone");
        close(fd);
        fd = b->ops->connect(b, "m1", &e);
        TAP_IS_INT(code_of(abc_stat_path(fd, "lib/a.txt", &st, &e), &e), AB_E_NOT_FOUND,
                   "... with its file");
        close(fd);
        fd = b->ops->connect(b, "m1", &e);
        tap_ok(abc_mkdir(fd, "x/y", true, 0700, &e) == 0, "mkdir with parents");
        close(fd);
        fd = b->ops->connect(b, "m1", &e);
        TAP_IS_INT(code_of(abc_mkdir(fd, "x/y", false, 0700, &e), &e), AB_E_CONFLICT,
                   "... again without parents: conflict");
        close(fd);
        /* ---- grep: POSIX regexes in the server, bounded ---- */
        fd = b->ops->connect(b, "m1", &e);
        tap_ok(abc_write(fd, "g.txt", "x{1}y\nabc\n\xff\xfe caf\xc3\xa9 abc\n", 22, -1, 0, 0, &e) ==
                   0,
               "write a file to search");
        close(fd);
        const char *gp[] = {"g.txt", "nope.txt"};
        abc_grep_req gq = {.pattern = "a.c", .pattern_len = 3, .paths = gp, .n_paths = 2};
        abc_grep_res gr;
        grep_hits hs = {0};
        fd = b->ops->connect(b, "m1", &e);
        tap_ok(abc_grep(fd, &gq, grep_hit, &hs, &gr, &e) == 0 && hs.n == 2 && hs.line[0] == 2 &&
                   hs.line[1] == 3 &&
                   !strcmp(hs.text[1], "\xef\xbf\xbd\xef\xbf\xbd caf\xc3\xa9 abc"),
               "grep: both lines, the invalid bytes as U+FFFD (%d: %s)", hs.n, hs.text[1]);
        close(fd);
        gq = (abc_grep_req){
            .pattern = "x{1}", .pattern_len = 4, .literal = true, .paths = gp, .n_paths = 1};
        memset(&hs, 0, sizeof(hs));
        fd = b->ops->connect(b, "m1", &e);
        tap_ok(abc_grep(fd, &gq, grep_hit, &hs, &gr, &e) == 0 && hs.n == 1 && hs.line[0] == 1,
               "grep a literal with braces");
        close(fd);
        static const char *const blowups[] = {"((a{1,255}){1,255}){1,255}", "(a)\\1"};
        for (size_t i = 0; i < 2; i++) {
                gq = (abc_grep_req){.pattern = blowups[i],
                                    .pattern_len = strlen(blowups[i]),
                                    .paths = gp,
                                    .n_paths = 1};
                fd = b->ops->connect(b, "m1", &e);
                tap_ok(abc_grep(fd, &gq, grep_hit, &hs, &gr, &e) < 0 && e &&
                           e->code == AB_E_INVALID && strstr(e->msg, "Invalid regex pattern"),
                       "grep %s: refused before it compiles (%s)", blowups[i],
                       e ? e->msg : "no error");
                ab_err_free(&e);
                close(fd);
        }
        fd = b->ops->connect(b, "m1", &e);
        tap_ok(abc_delete(fd, "g.txt", false, &e) == 0, "remove it");
        close(fd);

        /* the box's disk limit (1 MiB) bounds what it holds */
        _cleanup_free_ char *big = xzalloc(700 * 1024);
        fd = b->ops->connect(b, "m1", &e);
        tap_ok(abc_write(fd, "big1", big, 700 * 1024, -1, 0, 0, &e) == 0, "700 KiB fits 1 MiB");
        close(fd);
        fd = b->ops->connect(b, "m1", &e);
        TAP_IS_INT(code_of(abc_write(fd, "big2", big, 700 * 1024, -1, 0, 0, &e), &e), AB_E_LIMIT,
                   "... 700 more do not: limit");
        close(fd);
        ab_box_stats bs;
        tap_ok(b->ops->stats(b, "m1", &bs, &e) == 0 && bs.disk_used_bytes == 700 * 1024 &&
                   bs.disk_limit_bytes == 1 << 20,
               "stats: the bytes held and the limit");
        fd = b->ops->connect(b, "m1", &e);
        abc_term_req tq = {.pipes = false};
        abc_term_info ti = {0};
        TAP_IS_INT(code_of(abc_term_open(fd, &tq, &ti, &e), &e), AB_E_UNSUPPORTED,
                   "terminals with a pty: unsupported");
        close(fd);

        /* ---- life cycle ---- */
        tap_ok(b->ops->pause(b, "m1", &e) == 0, "pause");
        TAP_IS_INT(code_of(b->ops->connect(b, "m1", &e), &e), AB_E_CONFLICT,
                   "connect to a paused box: conflict");
        tap_ok(b->ops->resume(b, "m1", &e) == 0 && b->ops->stop(b, "m1", &e) == 0, "resume, stop");
        TAP_IS_INT(code_of(b->ops->pause(b, "m1", &e), &e), AB_E_CONFLICT,
                   "pause a stopped box: conflict");
        tap_ok(b->ops->start(b, "m1", &e) == 0, "start");
        fd = b->ops->connect(b, "m1", &e);
        tap_ok(abc_stat_path(fd, "big1", &st, &e) == 0, "its files outlived the stop");
        free(st.link);
        close(fd);
        ab_box_info *l = NULL;
        s.id = "m0";
        tap_ok(b->ops->create(b, &s, &e) == 0 && b->ops->list(b, &l, &n, &e) == 0 && n == 2 &&
                   !strcmp(l[0].id, "m0") && !strcmp(l[1].id, "m1"),
               "list: sorted by id");
        for (size_t i = 0; i < n; i++)
                ab_box_info_clear(&l[i]);
        free(l);
        tap_ok(b->ops->destroy(b, "m1", &e) == 0, "destroy");
        TAP_IS_INT(code_of(b->ops->info(b, "m1", &bi, &e), &e), AB_E_NOT_FOUND, "... gone");
        TAP_IS_INT(code_of(b->ops->connect(b, "m1", &e), &e), AB_E_NOT_FOUND,
                   "... connect: not found");

        /* a session left open does not hold up free */
        int held = b->ops->connect(b, "m0", &e);
        b->ops->free(b);
        char c;
        tap_ok(held >= 0 && read(held, &c, 1) == 0,
               "free ends open sessions (the client sees EOF)");
        close(held);

        /* ---- kept across a clean restart ---- */
        _cleanup_free_ char *state = xasprintf("%s/state.json", dir);
        write_text(exp, "{\"commands\": [{\"command\": \"serve\", \"stdout\": \"up\\n\", "
                        "\"delay_ms\": 600000}, {\"command\": \"ls\", \"stdout\": \"a\\n\"}]}");
        ab_mock_opts so = {.state_path = state, .expect_path = exp};
        tap_ok(ab_mock_open(&so, &b, &e) == 0, "open with a state file that does not exist yet");
        s = (ab_box_spec){.id = "k1", .limits = {.disk_mib = 8}};
        tap_ok(b->ops->create(b, &s, &e) == 0 && b->ops->pause(b, "k1", &e) == 0,
               "create k1, pause it");
        b->ops->resume(b, "k1", &e);
        fd = b->ops->connect(b, "k1", &e);
        static const char bin[] = {'a', 0, 'b', '\n', (char)0xff};
        tap_ok(abc_write(fd, "d/bin", bin, sizeof(bin), -1, ABC_W_MKPARENTS, 0600, &e) == 0,
               "write a binary file");
        close(fd);
        abc_term_info kt = {0}, ku = {0};
        abc_term_event kev;
        abc_term_req kq = {.pipes = true, .command = "serve", .tag = "srv"};
        tap_ok(proc_start(b, "k1", &kq, &kt, &e) == 0 && kt.running, "start a long process");
        char *srv_id = xstrdup(kt.id ? kt.id : "none");
        abc_term_info_clear(&kt);
        kq = (abc_term_req){.pipes = true, .command = "ls"};
        tap_ok(proc_start(b, "k1", &kq, &kt, &e) == 0 && !kt.running, "... and one that ended");
        char *ls_id = xstrdup(kt.id ? kt.id : "none");
        abc_term_info_clear(&kt);
        b->ops->pause(b, "k1", &e);
        b->ops->free(b);
        struct stat sst;
        tap_ok(stat(state, &sst) == 0 && (sst.st_mode & 0777) == 0600,
               "free writes the state (0600)");
        tap_ok(ab_mock_open(&so, &b, &e) == 0, "open again");
        tap_ok(b->ops->info(b, "k1", &bi, &e) == 0 && bi.status == AB_BOX_PAUSED &&
                   bi.limits.disk_mib == 8,
               "the box is back, paused, with its limits");
        ab_box_info_clear(&bi);
        tap_ok(access(state, F_OK) < 0,
               "... and the state file is gone (no resurrection after a crash)");
        b->ops->resume(b, "k1", &e);
        fd = b->ops->connect(b, "k1", &e);
        memset(&o, 0, sizeof(o));
        tap_ok(abc_read(fd, "d/bin", 0, 0, collect, &o, &e) == 0 && o.n[0] == sizeof(bin) &&
                   !memcmp(o.b[0], bin, sizeof(bin)),
               "its binary file is back byte for byte");
        close(fd);
        fd = b->ops->connect(b, "k1", &e);
        abc_term_info *kl = NULL;
        size_t knl = 0;
        tap_ok(abc_term_list_kind(fd, true, &kl, &knl, &e) == 0 && knl == 2 &&
                   !strcmp(kl[0].id, srv_id) && kl[0].running && kl[0].tag &&
                   !strcmp(kl[0].tag, "srv") && !kl[1].running && kl[1].exit_code == 0,
               "its background processes are back: the long one running, with its tag");
        abc_term_infos_free(kl, knl);
        close(fd);
        tap_ok(proc_follow(b, "k1", ls_id, true, &o, &kev, &ku) == ABC_TERM_CLOSED &&
                   !strcmp(o.b[0], "a\n"),
               "... the ended one with its output");
        abc_term_info_clear(&ku);
        free(srv_id);
        free(ls_id);
        b->ops->destroy(b, "k1", &e);
        b->ops->free(b);
        tap_ok(access(state, F_OK) < 0, "no boxes: no state file");
        write_text(state, "{\"version\": 1, \"boxes\": [{\"id\": \"../x\"}]}");
        tap_ok(ab_mock_open(&so, &b, &e) < 0 && e && e->code == AB_E_INVALID &&
                   strstr(e->msg, "state.json"),
               "a malformed state file: refused, naming it (%s)", e ? e->msg : "no error");
        ab_err_free(&e);
        tap_ok(access(state, F_OK) == 0, "... and kept for the admin");
        unlink(state);

        /* ---- the calls log ---- */
        TAP_IS_INT(count_lines(log, "\"op\":\"exec\""), 9, "the log has every exec");
        TAP_IS_INT(count_lines(log, "\"command\":\"rm -rf /\",\"exit_code\":127,\"matched\":null"),
                   1, "... an unmatched one with matched null");
        TAP_IS_INT(count_lines(log, "\"op\":\"write\""), 5, "... every write");
        TAP_IS_INT(count_lines(log, "\"op\":\"process_start\""), 5, "... every process started");
        TAP_IS_INT(count_lines(log, "\"op\":\"process_signal\""), 1, "... the signal");
        TAP_IS_INT(count_lines(log, "\"op\":\"process_input\""), 2, "... the inputs");
        TAP_IS_INT(count_lines(log, "\"op\":\"process_close\""), 1, "... the close");
        TAP_IS_INT(count_lines(log, "\"op\":\"create\""), 2, "... every create");
        TAP_IS_INT(count_lines(log, "\"box\":\"m1\",\"op\":\"destroy\""), 1, "... the destroy");
        unlink(exp);
        unlink(bad);
        unlink(log);
        rmdir(dir);
        return tap_done();
}
