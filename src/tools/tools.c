/* tools.c - the tool table: dispatch, argument parsing, results, the
 * function-calling schemas and the system-prompt fragment. The tools live in
 * exec.c (bash, sandbox_shell), fs.c (ls, glob, read_file, write_file,
 * str_replace) and grep.c. */
#include "tools/tools_int.h"
#include "base/jsonnum.h"

#include <stdarg.h>
#include <strings.h>

static const struct {
        const char *name;
        tool_fn fn;
} tools[] = {
    {"bash", tool_bash},
    {"ls", tool_ls},
    {"glob", tool_glob},
    {"grep", tool_grep},
    {"read_file", tool_read_file},
    {"write_file", tool_write_file},
    {"str_replace", tool_str_replace},
    {"sandbox_shell", tool_sandbox_shell},
};

static tool_fn find_tool(const char *name)
{
        for (size_t i = 0; name && i < AB_ARRAY_LEN(tools); i++)
                if (strcmp(tools[i].name, name) == 0)
                        return tools[i].fn;
        return NULL;
}

bool ab_tool_exists(const char *name)
{
        return find_tool(name) != NULL;
}

/* ---- arguments ---- */

static json_t *arg_get(json_t *args, const char *name)
{
        json_t *v = json_object_get(args, name);
        return v && !json_is_null(v) ? v : NULL;
}

int arg_str(json_t *args, const char *name, bool required, const char **v, size_t *len,
            ab_err **err)
{
        json_t *j = arg_get(args, name);
        if (!j) {
                if (required)
                        return ab_err_set(err, AB_E_INVALID, 0, "missing required argument '%s'",
                                          name);
                return 1;
        }
        if (!json_is_string(j))
                return ab_err_set(err, AB_E_INVALID, 0, "argument '%s' must be a string", name);
        *v = json_string_value(j);
        if (len)
                *len = json_string_length(j);
        return 0;
}

int arg_path(json_t *args, const char *name, const char **v, ab_err **err)
{
        size_t len = 0;
        if (arg_str(args, name, true, v, &len, err) < 0)
                return -1;
        if (len == 0)
                return ab_err_set(err, AB_E_INVALID, 0, "argument '%s' must not be empty", name);
        if (strlen(*v) != len)
                return ab_err_set(err, AB_E_INVALID, 0, "argument '%s' must not contain NUL", name);
        return 0;
}

/* Lax like pydantic: true/false, "true"/"false", 0/1. */
int arg_bool(json_t *args, const char *name, bool *v, ab_err **err)
{
        json_t *j = arg_get(args, name);
        if (!j)
                return 1;
        if (json_is_boolean(j)) {
                *v = json_is_true(j);
                return 0;
        }
        if (json_is_integer(j) && (json_integer_value(j) == 0 || json_integer_value(j) == 1)) {
                *v = json_integer_value(j) == 1;
                return 0;
        }
        if (json_is_string(j)) {
                const char *s = json_string_value(j);
                if (strcasecmp(s, "true") == 0 || strcasecmp(s, "false") == 0) {
                        *v = strcasecmp(s, "true") == 0;
                        return 0;
                }
        }
        return ab_err_set(err, AB_E_INVALID, 0, "argument '%s' must be a boolean (true or false)",
                          name);
}

/* An integer, an integral number, or a string of one. */
int arg_int(json_t *args, const char *name, bool required, int64_t *v, ab_err **err)
{
        json_t *j = arg_get(args, name);
        if (!j) {
                if (required)
                        return ab_err_set(err, AB_E_INVALID, 0, "missing required argument '%s'",
                                          name);
                return 1;
        }
        if (ab_json_whole(j, v))
                return 0;
        if (json_is_string(j)) {
                const char *s = json_string_value(j);
                char *end;
                errno = 0;
                long long x = strtoll(s, &end, 10);
                if (*s && !*end && errno == 0) {
                        *v = x;
                        return 0;
                }
        }
        return ab_err_set(err, AB_E_INVALID, 0, "argument '%s' must be an integer", name);
}

/* ---- results and errors ---- */

void result_set(ab_tool_result *out, char *text, bool is_error)
{
        free(out->output);
        out->output = text;
        out->is_error = is_error;
}

void result_errorf(ab_tool_result *out, const char *fmt, ...)
{
        va_list ap;
        char *s = NULL;
        va_start(ap, fmt);
        if (vasprintf(&s, fmt, ap) < 0)
                abort();
        va_end(ap);
        result_set(out, s, true);
}

void ab_tool_result_clear(ab_tool_result *r)
{
        if (!r)
                return;
        free(r->output);
        r->output = NULL;
        r->is_error = false;
}

int tool_list(tool_ctx *c, const char *path, int depth, abc_dirent **out, size_t *n, ab_err **err)
{
        if (c->box->list)
                return c->box->list(c->box->ud, path, depth, out, n, err);
        _cleanup_close_ int fd = tool_connect(c, err);
        if (fd < 0)
                return -1;
        return abc_list(fd, path, depth, out, n, err);
}

int tool_read(tool_ctx *c, const char *path, uint64_t length, abc_output_fn fn, void *ud,
              ab_err **err)
{
        if (c->box->read)
                return c->box->read(c->box->ud, path, length, fn, ud, err);
        _cleanup_close_ int fd = tool_connect(c, err);
        if (fd < 0)
                return -1;
        return abc_read(fd, path, 0, length, fn, ud, err);
}

int tool_write(tool_ctx *c, const char *path, const void *data, size_t len, uint32_t flags,
               ab_err **err)
{
        if (c->box->write)
                return c->box->write(c->box->ud, path, data, len, flags, err);
        _cleanup_close_ int fd = tool_connect(c, err);
        if (fd < 0)
                return -1;
        return abc_write(fd, path, data, len, -1, flags, 0, err);
}

int tool_search(tool_ctx *c, const abc_grep_req *q, abc_match_fn fn, void *ud, abc_grep_res *res,
                ab_err **err)
{
        if (c->box->grep)
                return c->box->grep(c->box->ud, q, fn, ud, res, err);
        _cleanup_close_ int fd = tool_connect(c, err);
        if (fd < 0)
                return -1;
        return abc_grep(fd, q, fn, ud, res, err);
}

int tool_connect(tool_ctx *c, ab_err **err)
{
        ab_err *e = NULL;
        int fd = c->box->connect(c->box->ud, &e);
        if (fd >= 0)
                return fd;
        if (!e)
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s cannot be reached",
                                  c->box->box_id ? c->box->box_id : "?");
        if (err && !*err)
                *err = e;
        else
                ab_err_free(&e);
        return -1;
}

bool tool_err_is_fatal(const ab_err *e)
{
        return e && e->code == AB_E_UNAVAILABLE;
}

bool tool_err_is(const ab_err *e, ab_code code, const char *prefix)
{
        return e && e->code == code && e->msg && strncmp(e->msg, prefix, strlen(prefix)) == 0;
}

static void fill_limits(ab_tool_limits *l, const ab_tool_limits *in)
{
        if (in)
                *l = *in;
        else
                memset(l, 0, sizeof(*l));
        if (!l->bash_output_max)
                l->bash_output_max = 20000;
        if (!l->read_file_max)
                l->read_file_max = 50000;
        if (!l->ls_output_max)
                l->ls_output_max = 20000;
        if (!l->write_file_max)
                l->write_file_max = 80 * 1024;
        if (!l->bash_timeout_s)
                l->bash_timeout_s = 600;
        if (!l->shell_max_lines)
                l->shell_max_lines = 2000;
        if (!l->shell_max_bytes)
                l->shell_max_bytes = 50 * 1024;
        if (!l->grep_file_max)
                l->grep_file_max = 1024 * 1024;
        if (!l->grep_timeout_s)
                l->grep_timeout_s = 30;
}

int ab_tool_run(const ab_tool_box *box, const ab_tool_limits *lim, const char *name, json_t *args,
                ab_tool_result *out, ab_err **err)
{
        *out = (ab_tool_result){0};
        tool_fn fn = find_tool(name);
        if (!fn)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "unknown tool '%s'", name ? name : "");
        if (!json_is_object(args))
                return ab_err_set(err, AB_E_INVALID, 0, "the arguments of %s must be a JSON object",
                                  name);
        const char *desc;
        if (arg_str(args, "description", false, &desc, NULL, err) < 0)
                return -1;
        tool_ctx c = {.box = box};
        fill_limits(&c.lim, lim);
        if (fn(&c, args, out, err) < 0) {
                ab_tool_result_clear(out);
                return -1;
        }
        if (!out->output)
                out->output = xstrdup("");
        /* Everything the model sees is valid UTF-8 without NULs (JSON-safe). */
        char *clean = ab_utf8_clean(out->output, strlen(out->output), NULL);
        free(out->output);
        out->output = clean;
        return 0;
}

/* ---- schemas ---- */

static json_t *prop(const char *type, const char *desc)
{
        return json_pack("{s:s, s:s}", "type", type, "description", desc);
}

static json_t *bool_prop(const char *desc, bool def)
{
        return json_pack("{s:s, s:s, s:b}", "type", "boolean", "description", desc, "default", def);
}

static json_t *int_prop(const char *desc, int def)
{
        return json_pack("{s:s, s:s, s:i}", "type", "integer", "description", desc, "default", def);
}

/* A parameter that may be null (its default). */
static json_t *nullable_prop(const char *type, const char *desc)
{
        return json_pack("{s:[s,s], s:s, s:n}", "type", type, "null", "description", desc,
                         "default");
}

static void add_description_param(json_t *props, const char *what)
{
        char buf[128];
        snprintf(buf, sizeof(buf), "Optional short explanation of this %s shown in the UI.", what);
        json_object_set_new(props, "description", prop("string", buf));
}

static json_t *function(const char *name, const char *desc, json_t *props, const char *required[])
{
        json_t *req = json_array();
        for (size_t i = 0; required[i]; i++)
                json_array_append_new(req, json_string(required[i]));
        return json_pack("{s:s, s:{s:s, s:s, s:{s:s, s:o, s:o}}}", "type", "function", "function",
                         "name", name, "description", desc, "parameters", "type", "object",
                         "properties", props, "required", req);
}

#define PATH_NOTE " Relative paths are relative to /workspace."

json_t *ab_tools_schemas(void)
{
        json_t *all = json_array();
        json_t *p;

        p = json_object();
        add_description_param(p, "command");
        json_object_set_new(p, "command",
                            prop("string", "The bash command to execute. Always use absolute paths "
                                           "for files and directories."));
        json_array_append_new(
            all,
            function("bash",
                     "Execute a bash command in the sandbox (a Linux box; the working directory is "
                     "/workspace).\n\n"
                     "- Use `python3` to run Python code.\n"
                     "- Use `python3 -m pip` (ideally inside a virtual environment in "
                     "/workspace/.venv) to install Python packages.\n"
                     "- To start a long-lived process such as a web server, ALWAYS run it in the "
                     "background with its output redirected, e.g. `nohup your-command > "
                     "/workspace/server.log 2>&1 &`, then check the log file or poll the port. A "
                     "long-lived process run in the foreground blocks the turn until it is killed "
                     "at the command timeout.",
                     p, (const char *[]){"command", NULL}));

        p = json_object();
        add_description_param(p, "listing");
        json_object_set_new(
            p, "path", prop("string", "The **absolute** path to the directory to list." PATH_NOTE));
        json_array_append_new(
            all,
            function("ls", "List the contents of a directory up to 2 levels deep in tree format.",
                     p, (const char *[]){"path", NULL}));

        p = json_object();
        add_description_param(p, "search");
        json_object_set_new(p, "pattern",
                            prop("string", "The glob pattern to match relative to the root path, "
                                           "for example `**/*.py`."));
        json_object_set_new(
            p, "path",
            prop("string", "The **absolute** root directory to search under." PATH_NOTE));
        json_object_set_new(p, "include_dirs",
                            bool_prop("Whether matching directories should also be returned. "
                                      "Default is False.",
                                      0));
        json_object_set_new(p, "max_results",
                            int_prop("Maximum number of paths to return. Default is 200.", 200));
        json_array_append_new(all, function("glob",
                                            "Find files or directories that match a glob pattern "
                                            "under a root directory.",
                                            p, (const char *[]){"pattern", "path", NULL}));

        p = json_object();
        add_description_param(p, "search");
        json_object_set_new(p, "pattern",
                            prop("string", "The string or regex pattern to search for."));
        json_object_set_new(
            p, "path",
            prop("string", "The **absolute** file or root directory to search." PATH_NOTE));
        json_object_set_new(p, "glob",
                            nullable_prop("string",
                                          "Optional glob filter for candidate files, for example "
                                          "`**/*.py`."));
        json_object_set_new(p, "literal",
                            bool_prop("Whether to treat `pattern` as a plain string. Default is "
                                      "False.",
                                      0));
        json_object_set_new(p, "case_sensitive",
                            bool_prop("Whether matching is case-sensitive. Default is False.", 0));
        json_object_set_new(
            p, "max_results",
            int_prop("Maximum number of matching lines to return. Default is 100.", 100));
        json_array_append_new(all, function("grep",
                                            "Search for matching lines inside a text file or files "
                                            "under a root directory.",
                                            p, (const char *[]){"pattern", "path", NULL}));

        p = json_object();
        add_description_param(p, "read");
        json_object_set_new(p, "path",
                            prop("string", "The **absolute** path to the file to read." PATH_NOTE));
        json_object_set_new(
            p, "start_line",
            nullable_prop("integer", "Optional starting line number (1-indexed, inclusive). Omit "
                                     "to start at the first line."));
        json_object_set_new(
            p, "end_line",
            nullable_prop("integer", "Optional ending line number (1-indexed, inclusive). Omit to "
                                     "read through the last line."));
        json_array_append_new(all, function("read_file",
                                            "Read the contents of a text file. Use this to examine "
                                            "source code, configuration files, logs, or any "
                                            "text-based file.",
                                            p, (const char *[]){"path", NULL}));

        p = json_object();
        add_description_param(p, "write");
        json_object_set_new(
            p, "path", prop("string", "The **absolute** path to the file to write to." PATH_NOTE));
        json_object_set_new(p, "content", prop("string", "The content to write to the file."));
        json_object_set_new(p, "append",
                            bool_prop("Whether to append content to the end of the file instead "
                                      "of overwriting it. Defaults to False.",
                                      0));
        json_array_append_new(
            all,
            function("write_file",
                     "Write text content to a file. By default this overwrites the target file; "
                     "set append=True to add content to the end without replacing existing "
                     "content. Missing parent directories are created.\n\n"
                     "SIZE POLICY: a single non-append write_file call must not exceed 80 KB of "
                     "UTF-8 content. For larger documents, use ONE of these strategies:\n"
                     "  1. INCREMENTAL EDIT (preferred for revisions): after the initial write, "
                     "use `str_replace` to surgically update sections.\n"
                     "  2. APPEND-IN-CHUNKS (for new long-form content): split the document into "
                     "sections, each well under 80 KB. First call uses append=False to create the "
                     "file; subsequent calls use append=True. The 80 KB cap does NOT apply to "
                     "append=True calls.\n\n"
                     "/mnt/skills is read-only.",
                     p, (const char *[]){"path", "content", NULL}));

        p = json_object();
        add_description_param(p, "replacement");
        json_object_set_new(
            p, "path",
            prop("string",
                 "The **absolute** path to the file to replace the substring in." PATH_NOTE));
        json_object_set_new(p, "old_str", prop("string", "The substring to replace."));
        json_object_set_new(p, "new_str", prop("string", "The new substring."));
        json_object_set_new(p, "replace_all",
                            bool_prop("Whether to replace all occurrences of the substring. If "
                                      "False, the substring must occur exactly once. Default is "
                                      "False.",
                                      0));
        json_array_append_new(
            all, function("str_replace",
                          "Replace a substring in a file with another substring.\n"
                          "If `replace_all` is False (default), the substring to replace must "
                          "appear **exactly once** in the file.",
                          p, (const char *[]){"path", "old_str", "new_str", NULL}));

        /* seed 000 §5.2, with the timeout range of agentbox (1..600 s). */
        p = json_object();
        json_object_set_new(p, "command", prop("string", "要执行的 shell 命令"));
        json_object_set_new(p, "timeout",
                            json_pack("{s:s, s:s, s:i, s:i}", "type", "number", "description",
                                      "超时秒数", "minimum", 1, "maximum", 600));
        json_array_append_new(
            all, function("sandbox_shell",
                          "在独立 Linux 环境中执行 shell 命令,支持文件操作、代码运行、包安装等", p,
                          (const char *[]){"command", NULL}));
        return all;
}

char *ab_tools_prompt(void)
{
        return xstrdup(
            "You have an isolated Linux sandbox. Run commands in it with the sandbox_shell (or "
            "bash) tool, and work with its files through ls, glob, grep, read_file, write_file "
            "and str_replace:\n"
            "- Preinstalled: bash / python3 / node / git / curl\n"
            "- Working directory: /workspace (files persist for this session, also across "
            "restarts of the sandbox); relative paths are relative to it\n"
            "- Files from the user are in /mnt/user-data/uploads; put files meant for the user in "
            "/mnt/user-data/outputs\n"
            "- Skills are read-only under /mnt/skills (also /skills): read a skill's SKILL.md "
            "before using it\n"
            "- There is no network access unless this sandbox was created with it, so installing "
            "packages (apt / pip / npm) may fail\n"
            "- Start long-running processes in the background (nohup your-command > "
            "/workspace/app.log 2>&1 &) and check their log; a command in the foreground is "
            "killed at its timeout\n");
}
