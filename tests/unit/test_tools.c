/* test_tools.c - the agent tools (src/tools) against a real agentbox-init.
 *
 * Starts $AGENTBOX_INIT --listen TMP/init.sock --workdir TMP/ws as a child,
 * as test_init.c does: not in a box, but when possible in a private mount
 * namespace holding a read-only tmpfs at ws/ro and, over /mnt, a tmpfs with a
 * read-only /mnt/skills (all gone with the init). The tools reach it through
 * ab_tool_box.connect. Expected strings are DeerFlow's exact formats
 * (seed 002, sandbox/tools.py) and seed 000's sandbox_shell. */
#include "proto/initclient.h"
#include "base/util.h"
#include "tap.h"
#include "tools/tools.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static char tmp[1024], ws[1100], sock[1100];
static pid_t init_pid = -1;
static bool have_skills_mount, have_ro_mount;

static void msleep(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
}

static char *in_ws(const char *rel)
{
        static char buf[4][PATH_MAX];
        static int i;
        i = (i + 1) % 4;
        snprintf(buf[i], sizeof(buf[i]), "%s/%s", ws, rel);
        return buf[i];
}

static void put(const char *rel, const void *s, size_t n)
{
        int fd = open(in_ws(rel), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || ab_write_all(fd, s, n) < 0)
                abort();
        close(fd);
}

static void puts_ws(const char *rel, const char *s)
{
        put(rel, s, strlen(s));
}

static void mkd(const char *rel)
{
        mkdir(in_ws(rel), 0755);
}

static char *get(const char *rel)
{
        char *s = NULL;
        if (ab_read_file(AT_FDCWD, in_ws(rel), &s, NULL) < 0)
                return NULL;
        return s;
}

/* ---- the box ---- */

static const char *sock_path = sock;

static int box_connect(void *ud, ab_err **err)
{
        return abc_connect(AT_FDCWD, sock_path, err);
}

/* What the last exec asked for (pointers cleared: they do not outlive the
 * call; the command is copied), and how many there were. */
static abc_exec_req last_exec;
static char last_cmd[256];
static int n_execs;

/* The exec a tool's command goes through (the manager's in the server): here
 * straight to init, adding an environment as the manager adds the box's. */
static int box_exec(void *ud, const abc_exec_req *req, abc_output_fn out, void *out_ud,
                    abc_exec_res *res, ab_err **err)
{
        static const char *const box_env[] = {"TOOLS_TEST_VAR=from-env", NULL};
        last_exec = *req;
        snprintf(last_cmd, sizeof(last_cmd), "%s", req->command ? req->command : "(none)");
        last_exec.command = NULL;
        n_execs++;
        abc_exec_req q = *req;
        if (!q.env)
                q.env = box_env;
        _cleanup_close_ int fd = box_connect(ud, err);
        if (fd < 0)
                return -1;
        return abc_exec(fd, &q, out, out_ud, res, err);
}

static const ab_tool_box box = {
    .box_id = "test-box", .connect = box_connect, .exec = box_exec, .ud = NULL};
static ab_tool_limits lim; /* zero: defaults */

/* Runs a tool with args given as JSON text; 0 or -1 (error message in *emsg). */
static int run_lim(const ab_tool_limits *l, const char *name, const char *json, ab_tool_result *r,
                   ab_err **e)
{
        json_error_t je;
        json_t *args = json_loads(json, 0, &je);
        if (!args) {
                tap_diag("bad test JSON %s: %s", json, je.text);
                abort();
        }
        int rc = ab_tool_run(&box, l, name, args, r, e);
        json_decref(args);
        return rc;
}

/* The tool succeeds with exactly `want` and the given is_error. */
static void is_out_lim(const ab_tool_limits *l, const char *name, const char *json,
                       const char *want, bool want_err, const char *label)
{
        ab_tool_result r = {0};
        ab_err *e = NULL;
        int rc = run_lim(l, name, json, &r, &e);
        bool ok = rc == 0 && r.output && strcmp(r.output, want) == 0 && r.is_error == want_err;
        tap_ok(ok, "%s", label);
        if (!ok) {
                if (rc < 0)
                        tap_diag("  failed: %s", e ? e->msg : "?");
                else
                        tap_diag("  got (is_error=%d) \"%s\"\n#  want (is_error=%d) \"%s\"",
                                 r.is_error, r.output, want_err, want);
        }
        ab_tool_result_clear(&r);
        ab_err_free(&e);
}

static void is_out(const char *name, const char *json, const char *want, bool want_err,
                   const char *label)
{
        is_out_lim(&lim, name, json, want, want_err, label);
}

/* The tool fails for the caller with `code` and a message containing `sub`. */
static void is_fail(const char *name, const char *json, ab_code code, const char *sub,
                    const char *label)
{
        ab_tool_result r = {0};
        ab_err *e = NULL;
        int rc = run_lim(&lim, name, json, &r, &e);
        bool ok = rc < 0 && e && e->code == code && strstr(e->msg, sub) && !r.output;
        tap_ok(ok, "%s", label);
        if (!ok)
                tap_diag("  rc=%d code=%d msg=%s out=%s", rc, e ? (int)e->code : 0,
                         e ? e->msg : "-", r.output ? r.output : "-");
        ab_tool_result_clear(&r);
        ab_err_free(&e);
}

/* Runs and returns the output (malloc'd), or NULL. */
static char *output_of(const ab_tool_limits *l, const char *name, const char *json)
{
        ab_tool_result r = {0};
        ab_err *e = NULL;
        if (run_lim(l, name, json, &r, &e) < 0) {
                tap_diag("  %s failed: %s", name, e ? e->msg : "?");
                ab_err_free(&e);
                return NULL;
        }
        return r.output;
}

static char *repeat(const char *s, size_t n)
{
        size_t k = strlen(s);
        char *p = xmalloc(k * n + 1);
        for (size_t i = 0; i < n; i++)
                memcpy(p + i * k, s, k);
        p[k * n] = 0;
        return p;
}

/* ---- schemas, prompt, dispatch ---- */

static void test_schemas(void)
{
        json_t *s = ab_tools_schemas();
        _cleanup_free_ char *text = json_dumps(s, 0);
        json_decref(s);
        json_error_t je;
        json_t *back = text ? json_loads(text, 0, &je) : NULL;
        tap_ok(json_is_array(back) && json_array_size(back) == 8,
               "schemas: a JSON array of 8 tools that survives a round trip");
        static const char *names[] = {"bash",      "ls",         "glob",        "grep",
                                      "read_file", "write_file", "str_replace", "sandbox_shell"};
        bool all = true, shape = true;
        for (size_t i = 0; i < AB_ARRAY_LEN(names); i++) {
                json_t *t = json_array_get(back, i), *f = json_object_get(t, "function");
                const char *n = json_string_value(json_object_get(f, "name"));
                all = all && n && strcmp(n, names[i]) == 0 && ab_tool_exists(n);
                json_t *p = json_object_get(f, "parameters");
                shape = shape && json_is_string(json_object_get(t, "type")) &&
                        json_is_string(json_object_get(f, "description")) &&
                        json_is_object(json_object_get(p, "properties")) &&
                        json_is_array(json_object_get(p, "required"));
                if (i < 7) { /* DeerFlow's tools take an optional leading description */
                        const char *first = json_object_iter_key(
                            json_object_iter(json_object_get(p, "properties")));
                        shape = shape && first && strcmp(first, "description") == 0;
                }
        }
        tap_ok(all, "schemas: bash ls glob grep read_file write_file str_replace sandbox_shell");
        tap_ok(shape, "schemas: OpenAI function shape, description first");
        json_t *glob = json_object_get(
            json_object_get(json_object_get(json_array_get(back, 2), "function"), "parameters"),
            "properties");
        TAP_IS_INT(
            json_integer_value(json_object_get(json_object_get(glob, "max_results"), "default")),
            200, "schemas: glob max_results defaults to 200");
        json_t *grep = json_object_get(
            json_object_get(json_object_get(json_array_get(back, 3), "function"), "parameters"),
            "required");
        TAP_IS_INT(json_array_size(grep), 2, "schemas: grep requires pattern and path");
        json_t *sh = json_object_get(
            json_object_get(json_object_get(json_array_get(back, 7), "function"), "parameters"),
            "properties");
        TAP_IS_INT(json_integer_value(json_object_get(json_object_get(sh, "timeout"), "maximum")),
                   600, "schemas: sandbox_shell timeout at most 600 s");
        json_decref(back);
        tap_ok(!ab_tool_exists("rm") && !ab_tool_exists(NULL), "unknown names are no tools");

        _cleanup_free_ char *p = ab_tools_prompt();
        tap_ok(strstr(p, "/workspace") && strstr(p, "/mnt/user-data/uploads") &&
                   strstr(p, "/mnt/user-data/outputs") && strstr(p, "/mnt/skills") &&
                   strstr(p, "python3") && strstr(p, "network"),
               "prompt: workspace, user data, skills, tools, network");
}

static void test_dispatch(void)
{
        is_fail("nope", "{}", AB_E_NOT_FOUND, "unknown tool 'nope'", "unknown tool: not_found");
        is_fail("bash", "{}", AB_E_INVALID, "missing required argument 'command'",
                "missing argument named");
        is_fail("bash", "{\"command\": 5}", AB_E_INVALID, "argument 'command' must be a string",
                "wrong type named");
        is_fail("ls", "{\"path\": \"\"}", AB_E_INVALID, "argument 'path' must not be empty",
                "empty path refused");
        is_fail("glob", "{\"pattern\": \"*\", \"path\": \".\", \"include_dirs\": \"maybe\"}",
                AB_E_INVALID, "argument 'include_dirs' must be a boolean", "bad boolean named");
        is_fail("grep", "{\"pattern\": \"x\", \"path\": \".\", \"max_results\": \"many\"}",
                AB_E_INVALID, "argument 'max_results' must be an integer", "bad integer named");
        /* a real far outside int64_t: refused before any cast (the cast was UB) */
        is_fail("grep", "{\"pattern\": \"x\", \"path\": \".\", \"max_results\": 1e300}",
                AB_E_INVALID, "argument 'max_results' must be an integer", "1e300 is no integer");
        is_fail("bash", "{\"description\": 1, \"command\": \"true\"}", AB_E_INVALID,
                "argument 'description' must be a string", "description must be a string");
        is_out("bash", "{\"description\": \"say hi\", \"command\": \"echo hi\"}", "hi\n", false,
               "the optional description is accepted");
        is_fail("sandbox_shell", "{\"command\": \"true\", \"timeout\": 0}", AB_E_INVALID,
                "argument 'timeout'", "sandbox_shell timeout 0 refused");
        is_fail("sandbox_shell", "{\"command\": \"true\", \"timeout\": 601}", AB_E_INVALID,
                "between 1 and 600", "sandbox_shell timeout 601 refused");

        sock_path = "/nonexistent/agentbox-tools.sock";
        is_fail("bash", "{\"command\": \"true\"}", AB_E_UNAVAILABLE, "", "bash: box unreachable");
        is_fail("read_file", "{\"path\": \"x\"}", AB_E_UNAVAILABLE, "",
                "read_file: box unreachable");
        is_fail("write_file", "{\"path\": \"x\", \"content\": \"\"}", AB_E_UNAVAILABLE, "",
                "write_file: box unreachable");
        sock_path = sock;
}

/* ---- bash ---- */

static void test_bash(void)
{
        is_out("bash", "{\"command\": \"echo hello\"}", "hello\n", false, "bash: stdout");
        is_out("bash", "{\"command\": \"true\"}", "(no output)", false, "bash: (no output)");
        is_out("bash", "{\"command\": \"exit 3\"}", "\nExit Code: 3", false,
               "bash: Exit Code: N when non-zero");
        is_out("bash", "{\"command\": \"echo out; echo err >&2; exit 2\"}",
               "out\n\nStd Error:\nerr\n\nExit Code: 2", false, "bash: Std Error section");
        is_out("bash", "{\"command\": \"echo only-err >&2\"}", "only-err\n", false,
               "bash: stderr alone has no header");
        _cleanup_free_ char *pwd = xasprintf("%s\n", ws);
        is_out("bash", "{\"command\": \"pwd\"}", pwd, false, "bash: runs in the workdir");
        int before = n_execs;
        is_out("bash", "{\"command\": \"echo $TOOLS_TEST_VAR\"}", "from-env\n", false,
               "bash: the command runs through the box's exec (which adds the box environment)");
        tap_ok(n_execs == before + 1 && !strcmp(last_cmd, "echo $TOOLS_TEST_VAR") &&
                   !last_exec.argv && last_exec.timeout_ms == 600000 && last_exec.output_cap > 0 &&
                   !last_exec.env,
               "... one exec: the command, the default 600 s timeout, an output cap, no env of "
               "its own");
        is_out("bash", "{\"command\": \"printf 'a\\\\377b'\"}",
               "a\xef\xbf\xbd"
               "b",
               false, "bash: invalid UTF-8 becomes U+FFFD");

        ab_tool_limits l = {.bash_output_max = 100};
        is_out_lim(&l, "bash", "{\"command\": \"head -c 300 /dev/zero | tr '\\\\0' a\"}",
                   "aaaaaaaaaaaaaaaaaaaaaaaaaa\n... [middle truncated: 247 chars skipped] "
                   "...\naaaaaaaaaaaaaaaaaaaaaaaaaaa",
                   false, "bash: middle truncation");
        is_out_lim(&l, "bash", "{\"command\": \"head -c 300 /dev/zero | tr '\\\\0' a; exit 5\"}",
                   "aaaaaaaaaaaaaaaaaaaa\n... [middle truncated: 260 chars skipped] "
                   "...\naaaaaaaaaaaaaaaaaaaa\nExit Code: 5",
                   false, "bash: middle truncation keeps the exit code");

        ab_tool_limits t = {.bash_timeout_s = 1};
        is_out_lim(&t, "bash", "{\"command\": \"echo started; sleep 5\"}",
                   "started\n\nCommand timed out after 1 second and was terminated. To run a "
                   "long-lived process such as a web server, start it in the background and "
                   "redirect its output, e.g. `nohup your-command > /workspace/server.log 2>&1 "
                   "&`, then check the log file or poll the port.\nExit Code: 124",
                   false, "bash: a timeout explains how to background a process");
}

/* ---- ls ---- */

static void test_ls(void)
{
        mkd("lsdir");
        puts_ws("lsdir/a.txt", "a");
        mkd("lsdir/empty");
        mkd("lsdir/sub");
        puts_ws("lsdir/sub/b.txt", "b");
        mkd("lsdir/sub/deeper");
        puts_ws("lsdir/sub/deeper/c.txt", "c");
        mkd("lsdir/node_modules");
        puts_ws("lsdir/node_modules/x.js", "x");
        puts_ws("lsdir/debug.log", "x");
        const char *want = "/workspace/lsdir/a.txt\n/workspace/lsdir/empty/\n/workspace/lsdir/sub/"
                           "\n/workspace/lsdir/sub/b.txt\n/workspace/lsdir/sub/deeper/";
        is_out("ls", "{\"path\": \"lsdir\"}", want, false,
               "ls: two levels, dirs end in /, ignore list");
        is_out("ls", "{\"path\": \"/workspace/lsdir/\"}", want, false,
               "ls: /workspace/... is the same directory");
        is_out("ls", "{\"path\": \"./lsdir//sub\"}",
               "/workspace/lsdir/sub/b.txt\n/workspace/lsdir/sub/deeper/\n/workspace/lsdir/sub/"
               "deeper/c.txt",
               false, "ls: path tidied for display");
        is_out("ls", "{\"path\": \"lsdir/empty\"}", "(empty)", false, "ls: (empty)");
        is_out("ls", "{\"path\": \"nope\"}", "Error: Directory not found: nope", true,
               "ls: missing directory");
        is_out("ls", "{\"path\": \"lsdir/a.txt\"}", "Error: Directory not found: lsdir/a.txt", true,
               "ls: a file is no directory");
        ab_tool_limits l = {.ls_output_max = 120};
        is_out_lim(&l, "ls", "{\"path\": \"lsdir\"}",
                   "/workspace/lsdir/a.tx\n... [truncated: showing first 21 of 124 chars. Use a "
                   "more specific path to see fewer results] ...",
                   false, "ls: head truncation");
}

/* ---- glob ---- */

static void test_glob(void)
{
        mkd("globdir");
        puts_ws("globdir/a.py", "");
        puts_ws("globdir/b.txt", "");
        mkd("globdir/src");
        puts_ws("globdir/src/c.py", "");
        mkd("globdir/src/d");
        puts_ws("globdir/src/d/e.py", "");
        mkd("globdir/node_modules");
        puts_ws("globdir/node_modules/f.py", "");
        mkd("globdir/.git");
        puts_ws("globdir/.git/g.py", "");
        mkd("globdir/build");
        puts_ws("globdir/build/h.py", "");
        is_out("glob", "{\"pattern\": \"*.py\", \"path\": \"globdir\"}",
               "Found 3 paths under globdir\n1. /workspace/globdir/a.py\n2. "
               "/workspace/globdir/src/c.py\n3. /workspace/globdir/src/d/e.py",
               false, "glob: Found N paths under ROOT, ignore list skipped");
        is_out("glob", "{\"pattern\": \"src/**/*.py\", \"path\": \"/workspace/globdir\"}",
               "Found 2 paths under /workspace/globdir\n1. /workspace/globdir/src/c.py\n2. "
               "/workspace/globdir/src/d/e.py",
               false, "glob: ** spans zero or more directories");
        is_out("glob", "{\"pattern\": \"*.py\", \"path\": \"globdir\", \"max_results\": 2}",
               "Found 2 paths under globdir (showing first 2)\n1. /workspace/globdir/a.py\n2. "
               "/workspace/globdir/src/c.py\nResults truncated. Narrow the path or pattern to "
               "see fewer matches.",
               false, "glob: truncation line");
        is_out("glob", "{\"pattern\": \"*.py\", \"path\": \"globdir\", \"max_results\": 3}",
               "Found 3 paths under globdir\n1. /workspace/globdir/a.py\n2. "
               "/workspace/globdir/src/c.py\n3. /workspace/globdir/src/d/e.py",
               false, "glob: exactly max_results is not truncated");
        is_out("glob", "{\"pattern\": \"s*\", \"path\": \"globdir\", \"include_dirs\": true}",
               "Found 1 paths under globdir\n1. /workspace/globdir/src", false,
               "glob: include_dirs");
        is_out("glob", "{\"pattern\": \"s*\", \"path\": \"globdir\"}",
               "No files matched under globdir", false, "glob: no match");
        is_out("glob", "{\"pattern\": \"*\", \"path\": \"nope\"}",
               "Error: Directory not found: nope", true, "glob: missing root");
        is_out("glob", "{\"pattern\": \"*\", \"path\": \"globdir/a.py\"}",
               "Error: Path is not a directory: globdir/a.py", true, "glob: root is a file");
}

/* ---- grep ---- */

static void test_grep(void)
{
        mkd("grepdir");
        puts_ws("grepdir/one.txt", "Hello world\nfoo bar\nHELLO again\n");
        puts_ws("grepdir/two.py", "hello = 1\n");
        put("grepdir/bin.dat", "hello\0binary\n", 13);
        mkd("grepdir/node_modules");
        puts_ws("grepdir/node_modules/x.txt", "hello\n");
        mkd("grepdir/sub");
        puts_ws("grepdir/sub/three.txt", "say hello\n1+1=2\n");
        _cleanup_free_ char *big = repeat("hello\n", 400); /* 2400 bytes */
        puts_ws("grepdir/big.txt", big);
        /* A link to a file outside the workspace: grep must not follow it. */
        _cleanup_free_ char *secret = xasprintf("%s/secret.txt", tmp);
        int fd = open(secret, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || ab_write_all(fd, "hello TOPSECRET\n", 16) < 0)
                abort();
        close(fd);
        if (symlink(secret, in_ws("grepdir/link.txt")) < 0)
                abort();

        ab_tool_limits l = {.grep_file_max = 1000};
        is_out_lim(&l, "grep", "{\"pattern\": \"hello\", \"path\": \"grepdir\"}",
                   "Found 4 matches under grepdir\n/workspace/grepdir/one.txt:1: Hello "
                   "world\n/workspace/grepdir/one.txt:3: HELLO again\n"
                   "/workspace/grepdir/sub/three.txt:1: say hello\n/workspace/grepdir/two.py:1: "
                   "hello = 1",
                   false,
                   "grep: path:line: text, case-insensitive, skips binary/huge/ignored/links");
        is_out_lim(&l, "grep",
                   "{\"pattern\": \"hello\", \"path\": \"grepdir\", \"case_sensitive\": true}",
                   "Found 2 matches under grepdir\n/workspace/grepdir/sub/three.txt:1: say "
                   "hello\n/workspace/grepdir/two.py:1: hello = 1",
                   false, "grep: case_sensitive");
        is_out_lim(&l, "grep",
                   "{\"pattern\": \"hello\", \"path\": \"grepdir\", \"glob\": \"*.py\"}",
                   "Found 1 matches under grepdir\n/workspace/grepdir/two.py:1: hello = 1", false,
                   "grep: glob filter");
        is_out("grep", "{\"pattern\": \"1+1\", \"path\": \"grepdir\", \"literal\": true}",
               "Found 1 matches under grepdir\n/workspace/grepdir/sub/three.txt:2: 1+1=2", false,
               "grep: literal");
        is_out("grep", "{\"pattern\": \"1+1\", \"path\": \"grepdir/sub\"}",
               "No matches found under grepdir/sub", false, "grep: regex, no matches");
        is_out("grep", "{\"pattern\": \"foo\", \"path\": \"/workspace/grepdir/one.txt\"}",
               "Found 1 matches under /workspace/grepdir/one.txt\n/workspace/grepdir/one.txt:2: "
               "foo bar",
               false, "grep: a single file");
        is_out_lim(&l, "grep",
                   "{\"pattern\": \"hello\", \"path\": \"grepdir\", \"max_results\": 1}",
                   "Found 1 matches under grepdir (showing first 1)\n/workspace/grepdir/one.txt:1: "
                   "Hello world\nResults truncated. Narrow the path or add a glob filter.",
                   false, "grep: truncation line");
        is_out("grep", "{\"pattern\": \"(unclosed\", \"path\": \"grepdir\"}",
               "Error: Invalid regex pattern: missing closing parenthesis at position 9", true,
               "grep: invalid regex names problem and offset");
        is_out("grep", "{\"pattern\": \"x\", \"path\": \"nope\"}",
               "Error: Directory not found: nope", true, "grep: missing root");
        is_out("grep", "{\"pattern\": \"TOPSECRET\", \"path\": \"grepdir\"}",
               "No matches found under grepdir", false,
               "grep: a symlink to a file outside is not followed");

        mkd("grepdir2");
        _cleanup_free_ char *xs = repeat("x", 300);
        _cleanup_free_ char *longline = xasprintf("needle %s\n", xs);
        puts_ws("grepdir2/long.txt", longline);
        _cleanup_free_ char *shown = repeat("x", 197 - 7);
        _cleanup_free_ char *want = xasprintf(
            "Found 1 matches under grepdir2\n/workspace/grepdir2/long.txt:1: needle %s...", shown);
        is_out("grep", "{\"pattern\": \"needle\", \"path\": \"grepdir2\"}", want, false,
               "grep: long lines cut at 200 chars with ...");
}

/* ---- read_file ---- */

static void test_read_file(void)
{
        puts_ws("r.txt", "line1\nline2\r\nline3\n");
        is_out("read_file", "{\"path\": \"r.txt\"}", "line1\nline2\r\nline3\n", false,
               "read_file: whole file");
        is_out("read_file", "{\"path\": \"/workspace/r.txt\", \"start_line\": 2, \"end_line\": 3}",
               "line2\nline3", false, "read_file: 1-based inclusive range");
        is_out("read_file", "{\"path\": \"r.txt\", \"start_line\": 2}", "line2\nline3", false,
               "read_file: from start_line");
        is_out("read_file", "{\"path\": \"r.txt\", \"end_line\": 1}", "line1", false,
               "read_file: to end_line");
        is_out("read_file", "{\"path\": \"r.txt\", \"start_line\": 0}", "(start_line must be >= 1)",
               false, "read_file: start_line 0");
        is_out("read_file", "{\"path\": \"r.txt\", \"end_line\": 0}", "(end_line must be >= 1)",
               false, "read_file: end_line 0");
        is_out("read_file", "{\"path\": \"r.txt\", \"start_line\": 3, \"end_line\": 2}",
               "(start_line > end_line \u2014 no lines in range)", false, "read_file: empty range");
        is_out("read_file", "{\"path\": \"r.txt\", \"start_line\": 10}",
               "(start_line exceeds file length)", false, "read_file: past the end");
        puts_ws("empty.txt", "");
        is_out("read_file", "{\"path\": \"empty.txt\"}", "(empty)", false, "read_file: (empty)");
        put("bin.dat", "PK\0\3\4", 5);
#define BINMSG                                                                                     \
        "Error: cannot read '%s' as text \u2014 it appears to be a binary file (e.g. .xlsx, "      \
        ".pdf, or an image). read_file only supports UTF-8 text. Use bash with a suitable "        \
        "library instead (pandas/openpyxl for spreadsheets, Pillow for images)."
        _cleanup_free_ char *w1 = xasprintf(BINMSG, "bin.dat");
        is_out("read_file", "{\"path\": \"bin.dat\"}", w1, true, "read_file: binary file (NUL)");
        puts_ws("latin1.txt", "caf\xe9\n");
        _cleanup_free_ char *w2 = xasprintf(BINMSG, "latin1.txt");
        is_out("read_file", "{\"path\": \"latin1.txt\"}", w2, true,
               "read_file: binary file (not UTF-8)");
        is_out("read_file", "{\"path\": \"lsdir\"}",
               "Error: Path is a directory, not a file: lsdir", true, "read_file: a directory");
        is_out("read_file", "{\"path\": \"nope.txt\"}", "Error: File not found: nope.txt", true,
               "read_file: not found");

        _cleanup_free_ char *xs = repeat("x", 300);
        puts_ws("long.txt", xs);
        ab_tool_limits l = {.read_file_max = 150};
        _cleanup_free_ char *x48 = repeat("x", 48);
        _cleanup_free_ char *want = xasprintf("%s\n... [truncated: showing first 48 of 300 chars. "
                                              "Use start_line/end_line to read a specific range] "
                                              "...",
                                              x48);
        is_out_lim(&l, "read_file", "{\"path\": \"long.txt\"}", want, false,
                   "read_file: head truncation with a notice");
        _cleanup_free_ char *es = repeat("\xc3\xa9", 300);
        puts_ws("utf8.txt", es);
        _cleanup_free_ char *e48 = repeat("\xc3\xa9", 48);
        _cleanup_free_ char *want2 = xasprintf(
            "%s\n... [truncated: showing first 48 of 300 chars. Use start_line/end_line to read "
            "a specific range] ...",
            e48);
        is_out_lim(&l, "read_file", "{\"path\": \"utf8.txt\"}", want2, false,
                   "read_file: truncation counts characters, not bytes");
}

/* ---- write_file, str_replace ---- */

static void write_args(const char *path, const char *content, bool append, char **json)
{
        json_t *o =
            json_pack("{s:s, s:s, s:b}", "path", path, "content", content, "append", append);
        *json = json_dumps(o, 0);
        json_decref(o);
}

static void test_write_file(void)
{
        is_out("write_file", "{\"path\": \"w/a/b/c.txt\", \"content\": \"hi\"}", "OK", false,
               "write_file: OK, parents created");
        _cleanup_free_ char *c1 = get("w/a/b/c.txt");
        TAP_IS_STR(c1, "hi", "write_file: content written");
        is_out("write_file",
               "{\"path\": \"/workspace/w/a/b/c.txt\", \"content\": \" there\", \"append\": true}",
               "OK", false, "write_file: append");
        _cleanup_free_ char *c2 = get("w/a/b/c.txt");
        TAP_IS_STR(c2, "hi there", "write_file: appended");
        is_out("write_file", "{\"path\": \"w/a/b/c.txt\", \"content\": \"new\"}", "OK", false,
               "write_file: overwrite");
        _cleanup_free_ char *c3 = get("w/a/b/c.txt");
        TAP_IS_STR(c3, "new", "write_file: overwritten");

        _cleanup_free_ char *big = repeat("x", 80 * 1024 + 1), *json = NULL;
        write_args("w/big.txt", big, false, &json);
        is_out("write_file", json,
               "Error: write_file content (81921 bytes) exceeds the 81920-byte single-call limit. "
               "Split the content into smaller pieces: either (a) write the first section now, "
               "then use `str_replace` for further edits, or (b) call write_file again with "
               "append=True carrying the next section. See SIZE POLICY in the tool description "
               "for the rationale.",
               true, "write_file: a single write over 80 KiB is refused with guidance");
        tap_ok(access(in_ws("w/big.txt"), F_OK) < 0, "write_file: ... and nothing is written");
        free(json);
        big[80 * 1024] = 0;
        write_args("w/big.txt", big, false, &json);
        is_out("write_file", json, "OK", false, "write_file: exactly 80 KiB is fine");
        free(json);
        _cleanup_free_ char *big2 = repeat("y", 100 * 1024);
        write_args("w/big.txt", big2, true, &json);
        is_out("write_file", json, "OK", false, "write_file: appends have no such limit");
        free(json);
        json = NULL;
        struct stat st;
        TAP_IS_INT(stat(in_ws("w/big.txt"), &st) == 0 ? st.st_size : -1, 180 * 1024,
                   "write_file: both parts are there");

        is_out("write_file", "{\"path\": \"w\", \"content\": \"x\"}",
               "Error: Path is a directory, not a file: w", true, "write_file: onto a directory");
        if (have_ro_mount)
                is_out("write_file", "{\"path\": \"ro/f.txt\", \"content\": \"x\"}",
                       "Error: Failed to write file 'ro/f.txt': read-only path. /mnt/skills (and "
                       "/skills) are read-only; write under /workspace or /mnt/user-data/outputs "
                       "instead.",
                       true, "write_file: a read-only path gives a clear error");
        else
                tap_ok(1, "# SKIP no private mount namespace (read-only path)");
        if (have_skills_mount)
                is_out("write_file", "{\"path\": \"/mnt/skills/demo/x.sh\", \"content\": \"x\"}",
                       "Error: Failed to write file '/mnt/skills/demo/x.sh': read-only path. "
                       "/mnt/skills (and /skills) are read-only; write under /workspace or "
                       "/mnt/user-data/outputs instead.",
                       true, "write_file: /mnt/skills is read-only");
        else
                tap_ok(1, "# SKIP no private mount namespace (/mnt/skills)");
}

static void test_str_replace(void)
{
        puts_ws("sr.txt", "abc abc xyz\n");
        is_out("str_replace", "{\"path\": \"sr.txt\", \"old_str\": \"xyz\", \"new_str\": \"123\"}",
               "OK", false, "str_replace: OK");
        _cleanup_free_ char *c1 = get("sr.txt");
        TAP_IS_STR(c1, "abc abc 123\n", "str_replace: replaced");
        is_out("str_replace", "{\"path\": \"sr.txt\", \"old_str\": \"abc\", \"new_str\": \"d\"}",
               "Error: String to replace appears 2 times in file: sr.txt. Include more "
               "surrounding context in old_str to make it unique, or set replace_all=true to "
               "replace every occurrence.",
               true, "str_replace: more than one occurrence is refused with the count");
        _cleanup_free_ char *c2 = get("sr.txt");
        TAP_IS_STR(c2, "abc abc 123\n", "str_replace: ... and the file is unchanged");
        is_out("str_replace",
               "{\"path\": \"sr.txt\", \"old_str\": \"abc\", \"new_str\": \"d\", \"replace_all\": "
               "true}",
               "OK", false, "str_replace: replace_all");
        _cleanup_free_ char *c3 = get("sr.txt");
        TAP_IS_STR(c3, "d d 123\n", "str_replace: all replaced");
        is_out("str_replace", "{\"path\": \"sr.txt\", \"old_str\": \"zzz\", \"new_str\": \"d\"}",
               "Error: String to replace not found in file: sr.txt", true,
               "str_replace: not found");
        is_out("str_replace", "{\"path\": \"nope.txt\", \"old_str\": \"a\", \"new_str\": \"b\"}",
               "Error: File not found: nope.txt", true, "str_replace: missing file");
}

/* ---- concurrency ---- */

#define NTHREADS 16
#define NAPPENDS 10

static void *appender(void *arg)
{
        int t = (int)(intptr_t)arg;
        for (int i = 0; i < NAPPENDS; i++) {
                char line[64], json[160];
                snprintf(line, sizeof(line), "t%02d-i%02d\\n", t, i);
                snprintf(json, sizeof(json),
                         "{\"path\": \"conc/log.txt\", \"content\": \"%s\", \"append\": true}",
                         line);
                _cleanup_free_ char *o = output_of(&lim, "write_file", json);
                if (!o || strcmp(o, "OK") != 0)
                        return (void *)1;
        }
        return NULL;
}

static void *replacer(void *arg)
{
        int t = (int)(intptr_t)arg;
        char json[200];
        snprintf(json, sizeof(json),
                 "{\"path\": \"conc/sr.txt\", \"old_str\": \"[%02d]\", \"new_str\": \"<%02d>\"}", t,
                 t);
        _cleanup_free_ char *o = output_of(&lim, "str_replace", json);
        return o && strcmp(o, "OK") == 0 ? NULL : (void *)1;
}

static bool run_threads(void *(*fn)(void *))
{
        pthread_t th[NTHREADS];
        bool ok = true;
        for (int i = 0; i < NTHREADS; i++)
                if (pthread_create(&th[i], NULL, fn, (void *)(intptr_t)i) != 0)
                        abort();
        for (int i = 0; i < NTHREADS; i++) {
                void *r;
                pthread_join(th[i], &r);
                ok = ok && r == NULL;
        }
        return ok;
}

static void test_concurrency(void)
{
        mkd("conc");
        tap_ok(run_threads(appender), "concurrency: 16 threads append through write_file");
        _cleanup_free_ char *s = get("conc/log.txt");
        bool all = s != NULL;
        for (int t = 0; all && t < NTHREADS; t++)
                for (int i = 0; all && i < NAPPENDS; i++) {
                        char line[32];
                        snprintf(line, sizeof(line), "t%02d-i%02d\n", t, i);
                        all = strstr(s, line) != NULL;
                }
        tap_ok(all && strlen(s) == (size_t)NTHREADS * NAPPENDS * 8,
               "concurrency: no append is lost");

        char body[NTHREADS * 4 + 1] = "";
        for (int t = 0; t < NTHREADS; t++)
                snprintf(body + strlen(body), sizeof(body) - strlen(body), "[%02d]", t);
        puts_ws("conc/sr.txt", body);
        tap_ok(run_threads(replacer), "concurrency: 16 threads str_replace one file");
        _cleanup_free_ char *r = get("conc/sr.txt");
        char want[NTHREADS * 4 + 1] = "";
        for (int t = 0; t < NTHREADS; t++)
                snprintf(want + strlen(want), sizeof(want) - strlen(want), "<%02d>", t);
        TAP_IS_STR(r, want, "concurrency: read-modify-write is serialised (no lost edit)");
}

/* ---- sandbox_shell ---- */

static void delete_in_box(const char *path)
{
        ab_err *e = NULL;
        int fd = abc_connect(AT_FDCWD, sock, &e);
        if (fd >= 0) {
                abc_delete(fd, path, false, &e);
                close(fd);
        }
        ab_err_free(&e);
        fd = abc_connect(AT_FDCWD, sock, &e);
        if (fd >= 0) {
                abc_delete(fd, "/tmp/agentbox-shell", false, NULL); /* only when empty */
                close(fd);
        }
        ab_err_free(&e);
}

static void test_sandbox_shell(void)
{
        is_out("sandbox_shell", "{\"command\": \"echo hi\"}",
               "{\"stdout\": \"hi\\n\", \"stderr\": \"\", \"exitCode\": 0}", false,
               "sandbox_shell: {stdout, stderr, exitCode}");
        is_out("sandbox_shell", "{\"command\": \"echo e >&2; exit 4\", \"timeout\": 30}",
               "{\"stdout\": \"\", \"stderr\": \"e\\n\", \"exitCode\": 4}", false,
               "sandbox_shell: a failing command is not a tool error");
        is_out("sandbox_shell", "{\"command\": \"sleep 5\", \"timeout\": 1}",
               "{\"stdout\": \"\", \"stderr\": \"Command timed out after 1 second and was "
               "terminated. To run a long-lived process such as a web server, start it in the "
               "background and redirect its output, e.g. `nohup your-command > "
               "/workspace/server.log 2>&1 &`, then check the log file or poll the port.\", "
               "\"exitCode\": 124}",
               false, "sandbox_shell: timeout");

        ab_tool_limits l = {.shell_max_lines = 5};
        _cleanup_free_ char *o = output_of(&l, "sandbox_shell", "{\"command\": \"seq 1 10\"}");
        json_t *j = o ? json_loads(o, 0, NULL) : NULL;
        const char *so = json_string_value(json_object_get(j, "stdout"));
        const char *pre = "[agentbox: output truncated, showing the last 5 of 10 lines (11 of 21 "
                          "bytes). The full output is in /tmp/agentbox-shell/";
        bool ok = so && strncmp(so, pre, strlen(pre)) == 0;
        const char *end = ok ? strstr(so, ".log]\n6\n7\n8\n9\n10\n") : NULL;
        tap_ok(end && end[strlen(".log]\n6\n7\n8\n9\n10\n")] == 0,
               "sandbox_shell: tail truncation by lines, notice names the log");
        if (!end)
                tap_diag("  got %s", o ? o : "(null)");
        if (end) {
                _cleanup_free_ char *logp = xstrndup(
                    so + strlen(pre) - strlen("/tmp/agentbox-shell/"),
                    (size_t)(end - so) + 4 - (strlen(pre) - strlen("/tmp/agentbox-shell/")));
                _cleanup_free_ char *args = xasprintf("{\"path\": \"%s\"}", logp);
                is_out("read_file", args, "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", false,
                       "sandbox_shell: the log in the box holds the full output");
                delete_in_box(logp);
        }
        json_decref(j);

        ab_tool_limits b = {.shell_max_bytes = 10};
        _cleanup_free_ char *o2 = output_of(&b, "sandbox_shell", "{\"command\": \"seq 1 10\"}");
        json_t *j2 = o2 ? json_loads(o2, 0, NULL) : NULL;
        const char *so2 = json_string_value(json_object_get(j2, "stdout"));
        const char *pre2 = "[agentbox: output truncated, showing the last 4 of 10 lines (9 of 21 "
                           "bytes). The full output is in /tmp/agentbox-shell/";
        const char *end2 = so2 && strncmp(so2, pre2, strlen(pre2)) == 0
                               ? strstr(so2, ".log]\n7\n8\n9\n10\n")
                               : NULL;
        tap_ok(end2 != NULL, "sandbox_shell: tail truncation by bytes, at a line start");
        if (end2) {
                _cleanup_free_ char *logp = xstrndup(
                    so2 + strlen(pre2) - strlen("/tmp/agentbox-shell/"),
                    (size_t)(end2 - so2) + 4 - (strlen(pre2) - strlen("/tmp/agentbox-shell/")));
                delete_in_box(logp);
        } else {
                tap_diag("  got %s", o2 ? o2 : "(null)");
        }
        json_decref(j2);
}

/* ---- setup ---- */

static bool init_has_mount(const char *path)
{
        char mi[64];
        snprintf(mi, sizeof(mi), "/proc/%d/mountinfo", (int)init_pid);
        char *s = NULL;
        if (ab_read_file(AT_FDCWD, mi, &s, NULL) < 0)
                return false;
        char needle[PATH_MAX + 2];
        snprintf(needle, sizeof(needle), " %s ", path);
        bool r = strstr(s, needle) != NULL;
        free(s);
        return r;
}

static void start_init(const char *bin)
{
        mkd("ro");
        init_pid = fork();
        if (init_pid < 0)
                abort();
        if (init_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGTERM);
                /* Best effort: mounts only init sees, gone with it. */
                if (unshare(CLONE_NEWNS) == 0 &&
                    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0) {
                        mount("tmpfs", in_ws("ro"), "tmpfs", MS_RDONLY, "size=64k");
                        if (mount("tmpfs", "/mnt", "tmpfs", 0, "size=64k") == 0 &&
                            mkdir("/mnt/skills", 0755) == 0 &&
                            mkdir("/mnt/skills/demo", 0755) == 0 &&
                            mount("/mnt/skills", "/mnt/skills", NULL, MS_BIND, NULL) == 0)
                                mount(NULL, "/mnt/skills", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY,
                                      NULL);
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
                        have_ro_mount = init_has_mount(in_ws("ro"));
                        have_skills_mount = init_has_mount("/mnt/skills");
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
        kill(init_pid, SIGTERM);
        for (int t = 0; t < 10000; t += 10) {
                if (waitpid(init_pid, NULL, WNOHANG) == init_pid)
                        return;
                msleep(10);
        }
        kill(init_pid, SIGKILL);
        waitpid(init_pid, NULL, 0);
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
        test_schemas();
        if (!bin || access(bin, X_OK) < 0) {
                tap_diag("SKIP box tests: AGENTBOX_INIT is not set to the agentbox-init binary");
                return tap_done();
        }
        const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(tmp, sizeof(tmp), "%s/abtools.XXXXXX", base);
        if (!mkdtemp(tmp))
                abort();
        snprintf(ws, sizeof(ws), "%s/ws", tmp);
        snprintf(sock, sizeof(sock), "%s/init.sock", tmp);
        mkdir(ws, 0755);
        signal(SIGPIPE, SIG_IGN);

        start_init(bin);
        tap_ok(init_pid > 0, "agentbox-init is listening");
        if (init_pid > 0) {
                test_dispatch();
                test_bash();
                test_ls();
                test_glob();
                test_grep();
                test_read_file();
                test_write_file();
                test_str_replace();
                test_concurrency();
                test_sandbox_shell();
                stop_init();
        }
        rm_rf(tmp);
        return tap_done();
}
