/* tools.h - the agent tools: DeerFlow's seven (bash, ls, glob, grep,
 * read_file, write_file, str_replace) and seed 000's sandbox_shell. One
 * implementation used by REST (POST /v1/sandboxes/{id}/tools/{name}), MCP
 * and the CLI. Every tool works inside the box through its agentbox-init
 * (exec and file operations of initclient.h): no host path is ever touched,
 * and no string policy stands in for isolation.
 *
 * Output formats, defaults and truncation follow seed 002 (DeerFlow) and seed
 * 000 (sandbox_shell) so that agents written for them work unchanged; see
 * docs/tools.md. Thread-safe. */
#ifndef AB_TOOLS_H
#define AB_TOOLS_H

#include "base/err.h"
#include "proto/initclient.h"
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Limits; zero fields take the defaults in brackets. */
typedef struct ab_tool_limits {
        size_t bash_output_max;  /* [20000] chars; middle-truncated beyond */
        size_t read_file_max;    /* [50000] chars; head-truncated beyond */
        size_t ls_output_max;    /* [20000] chars */
        size_t write_file_max;   /* [80 KiB] largest single non-append write */
        uint32_t bash_timeout_s; /* [600] default timeout of bash */
        size_t shell_max_lines;  /* [2000] sandbox_shell tail truncation */
        size_t shell_max_bytes;  /* [50 KiB] */
        uint64_t grep_file_max;  /* [1 MiB] files larger than this are skipped by grep */
        uint32_t grep_timeout_s; /* [30] a grep stops after this long with what it found */
} ab_tool_limits;

/* How a tool reaches the box. connect() returns a new connection to the
 * box's init for file operations (the caller of connect closes it), or -1
 * with *err set. exec() runs one command of bash or sandbox_shell: in the
 * server and the CLI it is the manager's exec (ab_manager_exec), which adds
 * the box's environment and records the exec (metric, audit row, event)
 * like any other; unit tests put a fake box behind both. */
typedef struct ab_tool_box {
        const char *box_id; /* for per-file write serialisation and messages */
        int (*connect)(void *ud, ab_err **err);
        int (*exec)(void *ud, const abc_exec_req *req, abc_output_fn out, void *out_ud,
                    abc_exec_res *res, ab_err **err);
        /* Optional (NULL: never): true when nobody waits for the answer any
         * more (the caller's client hung up); a long tool (grep) then stops. */
        bool (*gone)(void *ud);
        /* Optional file operations (each NULL: the tool does it itself on a
         * connection of connect()): a listing, a read of up to length bytes
         * (0 = all), a write (ABC_W_* flags), a search (abc_grep). In the server and the CLI they
         * are the manager's file doors (counted as file operations, never
         * as execs: docs/architecture.md); errors as initclient.h's. */
        int (*list)(void *ud, const char *path, int depth, abc_dirent **out, size_t *n,
                    ab_err **err);
        int (*read)(void *ud, const char *path, uint64_t length, abc_output_fn out, void *out_ud,
                    ab_err **err);
        int (*write)(void *ud, const char *path, const void *data, size_t len, uint32_t flags,
                     ab_err **err);
        int (*grep)(void *ud, const abc_grep_req *q, abc_match_fn fn, void *fn_ud,
                    abc_grep_res *res, ab_err **err);
        void *ud;
} ab_tool_box;

typedef struct ab_tool_result {
        char *output;  /* UTF-8 text for the model (malloc'd) */
        bool is_error; /* the tool failed in a way the model should see (bad path, no match, ...) */
} ab_tool_result;

/* True when name is a known tool. */
bool ab_tool_exists(const char *name);

/* Runs tool `name` with `args` (a JSON object, borrowed). Errors the model
 * should see (file not found, invalid regex, string not found, ...) are a
 * result with is_error set and return 0. -1 with *err is for the caller:
 * AB_E_NOT_FOUND unknown tool, AB_E_INVALID bad arguments (the message names
 * the argument), AB_E_UNAVAILABLE the box cannot be reached. */
int ab_tool_run(const ab_tool_box *box, const ab_tool_limits *lim, const char *name, json_t *args,
                ab_tool_result *out, ab_err **err);
void ab_tool_result_clear(ab_tool_result *r);

/* Every tool as an OpenAI function-calling schema:
 * [{"type":"function","function":{"name","description","parameters"}}, ...]. */
json_t *ab_tools_schemas(void);

/* The system-prompt fragment of seed 000 §5.3 adapted to agentbox boxes
 * (paths, preinstalled tools, persistence). malloc'd. */
char *ab_tools_prompt(void);

#endif
