/* exec.c - the command tools: DeerFlow's bash (output as LocalSandbox's
 * execute_command formats it, middle-truncated) and seed 000's sandbox_shell
 * ({stdout, stderr, exitCode}, tail-truncated, the full output kept in a log
 * file inside the box). Both run bash -lc COMMAND in /workspace through the
 * box's exec callback (the manager's exec: the box's environment, metric,
 * audit row and event). */
#include "tools/tools_int.h"

#include <stdatomic.h>
#include <time.h>

typedef struct capture {
        ab_buf o[3];
} capture;

static int capture_cb(void *ud, int stream, const void *buf, size_t len)
{
        capture *cap = ud;
        if (stream == 1 || stream == 2)
                ab_buf_add(&cap->o[stream], buf, len);
        return 0;
}

static void capture_free(capture *cap)
{
        for (int i = 0; i < 3; i++)
                free(cap->o[i].p);
}

/* Runs command; 0 with res and the output, 1 when init refused to run it
 * (result set), -1 with *err when the box is unreachable. */
static int run(tool_ctx *c, const char *command, uint32_t timeout_s, capture *cap,
               abc_exec_res *res, ab_tool_result *out, ab_err **err)
{
        abc_exec_req req = {
            .command = command,
            .stdin_fd = -1,
            .timeout_ms = timeout_s * 1000u,
            .output_cap = TOOL_EXEC_CAP,
        };
        _cleanup_err_ ab_err *e = NULL;
        if (c->box->exec(c->box->ud, &req, capture_cb, cap, res, &e) == 0)
                return 0;
        if (!e)
                ab_err_set(&e, AB_E_UNAVAILABLE, 0, "the box cannot run commands");
        if (tool_err_is_fatal(e)) {
                if (err && !*err)
                        *err = steal_pointer(&e);
                return -1;
        }
        if (e->code == AB_E_NOT_FOUND || e->code == AB_E_INVALID)
                result_errorf(out, "Error: %s", e->msg);
        else
                result_errorf(out, "Error: Unexpected error executing command: %s", e->msg);
        return 1;
}

static int command_arg(json_t *args, const char **cmd, ab_err **err)
{
        size_t len;
        if (arg_str(args, "command", true, cmd, &len, err) < 0)
                return -1;
        if (strlen(*cmd) != len)
                return ab_err_set(err, AB_E_INVALID, 0, "argument 'command' must not contain NUL");
        return 0;
}

static char *timeout_notice(uint32_t s)
{
        return xasprintf("Command timed out after %u %s and was terminated. To run a long-lived "
                         "process such as a web server, start it in the background and redirect "
                         "its output, e.g. `nohup your-command > /workspace/server.log 2>&1 &`, "
                         "then check the log file or poll the port.",
                         s, s == 1 ? "second" : "seconds");
}

int tool_bash(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err)
{
        const char *cmd;
        if (command_arg(args, &cmd, err) < 0)
                return -1;
        __attribute__((cleanup(capture_free))) capture cap = {0};
        abc_exec_res res = {0};
        int r = run(c, cmd, c->lim.bash_timeout_s, &cap, &res, out, err);
        if (r != 0)
                return r < 0 ? -1 : 0;
        size_t n1, n2;
        _cleanup_free_ char *so = ab_utf8_clean(cap.o[1].p ? cap.o[1].p : "", cap.o[1].n, &n1);
        _cleanup_free_ char *se = ab_utf8_clean(cap.o[2].p ? cap.o[2].p : "", cap.o[2].n, &n2);
        _cleanup_buf_ ab_buf b = {0};
        ab_buf_add(&b, so, n1);
        if (n2) {
                if (b.n)
                        ab_buf_puts(&b, "\nStd Error:\n");
                ab_buf_add(&b, se, n2);
        }
        if (res.timed_out) {
                _cleanup_free_ char *notice = timeout_notice(c->lim.bash_timeout_s);
                if (b.n)
                        ab_buf_add(&b, "\n", 1);
                ab_buf_puts(&b, notice);
                ab_buf_puts(&b, "\nExit Code: 124");
        } else if (res.exit_code != 0) {
                ab_buf_printf(&b, "\nExit Code: %d", res.exit_code);
        }
        if (b.n == 0)
                ab_buf_puts(&b, "(no output)");
        result_set(out, trunc_middle(ab_buf_steal(&b), c->lim.bash_output_max), false);
        return 0;
}

/* ---- sandbox_shell ---- */

/* Where the last max_lines lines / max_bytes bytes of s begin (0 = all of it). */
static size_t tail_start(const char *s, size_t n, size_t max_lines, size_t max_bytes, size_t *lines)
{
        size_t nl = 0;
        for (size_t i = 0; i < n; i++)
                nl += s[i] == '\n';
        *lines = nl + (n && s[n - 1] != '\n');
        size_t start = 0;
        if (*lines > max_lines) {
                size_t skip = *lines - max_lines;
                for (size_t i = 0; i < n; i++)
                        if (s[i] == '\n' && --skip == 0) {
                                start = i + 1;
                                break;
                        }
        }
        if (n - start > max_bytes) {
                start = n - max_bytes;
                if (s[start - 1] != '\n') {
                        const char *p = memchr(s + start, '\n', n - start);
                        if (p && (size_t)(p - s) + 1 < n)
                                start = (size_t)(p - s) + 1;
                        else
                                while (start < n && ((unsigned char)s[start] & 0xc0) == 0x80)
                                        start++;
                }
        }
        return start;
}

static char *log_path(void)
{
        static atomic_uint seq;
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        return xasprintf("/tmp/agentbox-shell/%04d%02d%02d-%02d%02d%02d-%06ld-%u-%u.log",
                         tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                         tm.tm_sec, ts.tv_nsec / 1000, (unsigned)getpid(),
                         atomic_fetch_add(&seq, 1));
}

static char *shell_stream(const char *s, size_t n, const tool_ctx *c, const char *where)
{
        size_t lines,
            start = tail_start(s, n, c->lim.shell_max_lines, c->lim.shell_max_bytes, &lines);
        if (start == 0)
                return xstrndup(s, n);
        size_t shown_lines;
        tail_start(s + start, n - start, SIZE_MAX, SIZE_MAX, &shown_lines);
        return xasprintf("[agentbox: output truncated, showing the last %zu of %zu lines (%zu of "
                         "%zu bytes). %s]\n%s",
                         shown_lines, lines, n - start, n, where, s + start);
}

int tool_sandbox_shell(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err)
{
        const char *cmd;
        if (command_arg(args, &cmd, err) < 0)
                return -1;
        uint32_t timeout = c->lim.bash_timeout_s < 600 ? c->lim.bash_timeout_s : 600;
        json_t *t = json_object_get(args, "timeout");
        if (t && !json_is_null(t)) {
                double v = json_is_number(t) ? json_number_value(t) : 0;
                if (json_is_string(t)) {
                        char *end;
                        v = strtod(json_string_value(t), &end);
                        if (*end || !json_string_value(t)[0])
                                v = 0;
                }
                if (!(v >= 1 && v <= 600))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "argument 'timeout' must be a number of seconds "
                                          "between 1 and 600");
                timeout = (uint32_t)v + ((double)(uint32_t)v < v);
        }
        __attribute__((cleanup(capture_free))) capture cap = {0};
        abc_exec_res res = {0};
        int r = run(c, cmd, timeout, &cap, &res, out, err);
        if (r != 0)
                return r < 0 ? -1 : 0;
        size_t n1, n2;
        _cleanup_free_ char *so = ab_utf8_clean(cap.o[1].p ? cap.o[1].p : "", cap.o[1].n, &n1);
        _cleanup_free_ char *se = ab_utf8_clean(cap.o[2].p ? cap.o[2].p : "", cap.o[2].n, &n2);
        if (res.timed_out) {
                _cleanup_free_ char *notice = timeout_notice(timeout);
                _cleanup_free_ char *old = se;
                se = xasprintf("%s%s%s", old, n2 ? "\n" : "", notice);
                n2 = strlen(se);
        }
        size_t lines;
        bool cut = tail_start(so, n1, c->lim.shell_max_lines, c->lim.shell_max_bytes, &lines) ||
                   tail_start(se, n2, c->lim.shell_max_lines, c->lim.shell_max_bytes, &lines);
        _cleanup_free_ char *where = NULL;
        if (cut) {
                /* The full output goes to a log in the box, so nothing is lost. */
                _cleanup_free_ char *lp = log_path();
                _cleanup_buf_ ab_buf log = {0};
                ab_buf_add(&log, so, n1);
                if (n2) {
                        ab_buf_puts(&log, "\nStd Error:\n");
                        ab_buf_add(&log, se, n2);
                }
                _cleanup_err_ ab_err *e = NULL;
                if (tool_write(c, lp, log.p, log.n, ABC_W_MKPARENTS, &e) == 0)
                        where = xasprintf("The full output is in %s", lp);
                else if (tool_err_is_fatal(e))
                        return ab_err_set(err, e->code, 0, "%s", e->msg);
                else
                        where =
                            xasprintf("The full output could not be saved: %s", e ? e->msg : "?");
        }
        _cleanup_free_ char *to = shell_stream(so, n1, c, where ? where : "");
        _cleanup_free_ char *te = shell_stream(se, n2, c, where ? where : "");
        json_t *o = json_pack("{s:s, s:s, s:i}", "stdout", to, "stderr", te, "exitCode",
                              res.timed_out ? 124 : res.exit_code);
        char *text = o ? json_dumps(o, JSON_PRESERVE_ORDER) : NULL;
        json_decref(o);
        if (!text)
                return ab_err_set(err, AB_E_INTERNAL, 0, "cannot encode the sandbox_shell result");
        result_set(out, text, false);
        return 0;
}
