/* tools_int.h - what the files of src/tools share: the call context, argument
 * parsing, results, text helpers (fmt.c), paths and the per-file lock table
 * (fs.c). Not a public API. */
#ifndef AB_TOOLS_INT_H
#define AB_TOOLS_INT_H

#include "tools/tools.h"

#include "proto/initclient.h"
#include "base/buf.h"
#include "base/utf8.h"
#include "base/util.h"

/* The box's working directory: relative paths are relative to it. */
#define TOOL_WORKDIR "/workspace"
/* Output kept per stream of an exec (bytes); beyond, init drops the rest and
 * says so in the stream (docs/tools.md). */
#define TOOL_EXEC_CAP (8u << 20)
/* read_file and str_replace refuse files larger than this. */
#define TOOL_FILE_HARD_MAX (64u << 20)

typedef struct tool_ctx {
        const ab_tool_box *box;
        ab_tool_limits lim; /* defaults filled in */
} tool_ctx;

typedef int (*tool_fn)(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err);

/* ---- tools (one file per family) ---- */
int tool_bash(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err);
int tool_sandbox_shell(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err);
int tool_ls(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err);
int tool_glob(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err);
int tool_read_file(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err);
int tool_write_file(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err);
int tool_str_replace(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err);
int tool_grep(tool_ctx *c, json_t *args, ab_tool_result *out, ab_err **err);

/* ---- arguments (tools.c): 0 when present, 1 when absent or null (the
 * default stays), -1 with AB_E_INVALID naming the argument otherwise ---- */
int arg_str(json_t *args, const char *name, bool required, const char **v, size_t *len,
            ab_err **err);
int arg_bool(json_t *args, const char *name, bool *v, ab_err **err);
int arg_int(json_t *args, const char *name, bool required, int64_t *v, ab_err **err);
/* A non-empty path argument. */
int arg_path(json_t *args, const char *name, const char **v, ab_err **err);

/* ---- results (tools.c) ---- */
void result_set(ab_tool_result *out, char *text, bool is_error); /* takes text */
void result_errorf(ab_tool_result *out, const char *fmt, ...) AB_PRINTF(2, 3);

/* Opens a connection to the box's init; -1 with *err (AB_E_UNAVAILABLE) when not. */
int tool_connect(tool_ctx *c, ab_err **err);
/* A listing, a read, a write in the box: through the box's file callbacks
 * when it has them, else on a connection of tool_connect. */
int tool_list(tool_ctx *c, const char *path, int depth, abc_dirent **out, size_t *n, ab_err **err);
int tool_read(tool_ctx *c, const char *path, uint64_t length, abc_output_fn fn, void *ud,
              ab_err **err);
int tool_write(tool_ctx *c, const char *path, const void *data, size_t len, uint32_t flags,
               ab_err **err);
int tool_search(tool_ctx *c, const abc_grep_req *q, abc_match_fn fn, void *ud, abc_grep_res *res,
                ab_err **err);
/* True when e is the caller's problem (the box is unreachable): the tool then
 * returns -1 with it, instead of showing it to the model. */
bool tool_err_is_fatal(const ab_err *e);
/* True when an init error message starts with prefix ("is a directory", ...). */
bool tool_err_is(const ab_err *e, ab_code code, const char *prefix);

/* ---- text (fmt.c; UTF-8 is base/utf8.h, buffers base/buf.h) ---- */

/* DeerFlow's truncations, in code points (0 = off); take and return malloc'd text. */
char *trunc_middle(char *s, size_t max_chars);                   /* bash */
char *trunc_head(char *s, size_t max_chars, const char *advice); /* read_file, ls */

/* ---- paths and locks (fs.c) ---- */
/* The path sent to init: /workspace/x becomes x (the same file: init's workdir
 * is /workspace); everything else unchanged. Resolution happens in the box. */
const char *path_for_box(const char *p);
/* Absolute, lexically tidied form for display and lock keys ("x/./y//" ->
 * "/workspace/x/y"); ".." is kept. malloc'd. */
char *path_display(const char *p);
/* parent + "/" + rel, without doubling the slash of "/". malloc'd. */
char *path_join(const char *parent, const char *rel);

/* DeerFlow's ignore list for ls, glob and grep: true when name matches it. */
bool ignored_name(const char *name);
/* True when any segment of the relative path rel is ignored. */
bool ignored_path(const char *rel);

/* Lists dir (sent as is) fully (up to 64 levels), falling back to one level
 * per request when the tree is too large for one answer; ignored directories
 * are not descended then. */
int list_tree(tool_ctx *c, const char *dir, abc_dirent **out, size_t *n, ab_err **err);

/* Reads a whole file (at most max bytes; *over set when it is larger).
 * *buf is malloc'd and NUL-terminated. */
int read_whole(tool_ctx *c, const char *path, size_t max, char **buf, size_t *len, bool *over,
               ab_err **err);

/* The process-wide per-file lock (box id + path). */
typedef struct file_lock file_lock;
file_lock *file_lock_take(const char *box_id, const char *display_path);
void file_lock_drop(file_lock *l);

/* glob matching as DeerFlow's path_matches (fs.c). */
bool glob_path_matches(const char *pattern, const char *rel);

#endif
