/* cli.h - shared pieces of the agentbox command line. */
#ifndef AB_CLI_H
#define AB_CLI_H

#include "rest/rest.h"
#include "backend/backend.h"

/* Exit codes (documented in `agentbox --help`). */
#define EXIT_USAGE    2   /* bad command line */
#define EXIT_AGENTBOX 125 /* agentbox itself failed (box missing, not running, ...) */

/* Prints "agentbox: MESSAGE" (and a hint for the error's code) to stderr. */
void cli_error(const ab_err *e);
/* cli_error, frees *e, and returns EXIT_AGENTBOX. */
int cli_fail(ab_err **e);
/* A malformed option value: the parser's message prefixed with opt; EXIT_USAGE. */
int cli_bad_option(ab_err **e, const char *opt);
/* "agentbox: " fmt (one %s: arg) and a hint at --help on stderr; EXIT_USAGE. */
int cli_usage_error(const char *fmt, const char *arg) AB_PRINTF(1, 0);

/* What the CLI's box verbs run on: backend, store and a manager without
 * recovery or background jobs (exec.c). */
typedef struct cli_local {
        ab_backend *backend;
        ab_store *store;
        ab_events *events;
        ab_metrics *metrics;
        ab_manager *mgr;
} cli_local;

/* Opens it for the data folder (NULL = ./data) and the store of
 * AGENTBOX_STORE (default SQLite in the data folder). When that SQLite file
 * does not exist yet, it is made only for box `id` if the backend has it
 * (else its error: not found, invalid id); with id NULL, l->store and
 * l->mgr stay NULL then (nothing to record). */
int cli_local_open(cli_local *l, const char *data, const char *id, ab_err **err);
void cli_local_close(cli_local *l);
/* ab_manager_use_begin of box id, adopting a box of `agentbox create` that
 * the store does not know yet; AB_E_CONFLICT for a stopped box (the CLI
 * starts boxes only with `agentbox start`). limits (may be NULL) gets the
 * box's limits as its backend keeps them (the output cap of `agentbox
 * create --output-cap`), read in the same look at the box. */
int cli_local_use(cli_local *l, const char *id, ab_use *u, ab_limits *limits, ab_err **err);

/* agentbox exec [...] ID -- CMD [ARG...]: one word is a shell command line,
 * several are an argv. Returns the command's exit code or an agentbox one. */
int cli_exec(int argc, char **argv, const char *data);

/* Runs req on a new terminal in the box of u and relays it to this process's
 * terminal (raw mode when input is relayed and stdin is a tty; SIGWINCH
 * resizes); closes the terminal at the end. Returns the program's exit code
 * (124 after timeout_ms, 0 = none), or an agentbox one (term.c). */
int cli_term_exec(cli_local *l, ab_use *u, const abc_term_req *req, bool input,
                  uint64_t timeout_ms);
/* agentbox attach ID TID. Returns an exit code. */
int cli_attach(int argc, char **argv, const char *data);

/* Resumes the box when it is paused, so a command can use it (as any use of
 * a box through the service does). 0 when it is running now, or was not
 * paused (then the command itself reports what is wrong). */
int cli_wake(ab_backend *b, const char *id, ab_err **err);

/* agentbox cp SRC DST: one side is ID:PATH. Returns an exit code. */
int cli_cp(ab_backend *b, int argc, char **argv);

/* agentbox serve [...]: runs the HTTP service until SIGINT/SIGTERM.
 * data_flag is the global --data value (or NULL). Returns an exit code. */
int cli_serve(int argc, char **argv, const char *data_flag);

/* agentbox mcp [...]: the MCP server on stdin/stdout (newline-delimited
 * JSON-RPC) until stdin ends. Returns an exit code. */
int cli_mcp(int argc, char **argv, const char *data_flag);
/* agentbox nodes: the fleet's nodes from the shared store (nodes.c). */
int cli_nodes(int argc, char **argv, const char *data_flag);
/* agentbox move ID --node N: a fleet's server moves a stopped box (move.c). */
int cli_move(int argc, char **argv);

/* What `agentbox serve` and `agentbox mcp` run on (serve.c). */
typedef struct cli_service {
        ab_config cfg;
        ab_backend *backend;
        ab_store *store;
        ab_events *events;
        ab_metrics *metrics;
        ab_webhook *webhook;
        struct ab_net *net;
        ab_image_store *images;
        ab_manager *mgr;
        ab_server srv;   /* wired to the pieces above; only serve starts its HTTP daemon */
        int server_lock; /* DATA/.server.lock (cleanup.c), shared-locked; 0 = none */
} cli_service;

typedef struct cli_service_args {
        const char *listen, *data, *config, *store, *backend; /* NULL = not given */
} cli_service_args;

/* Parses --data DIR, --config FILE, --store URL, --backend NAME (and --listen HOST:PORT when
 * with_listen) into *a. Returns -1 to go on, else the exit code to return
 * (0 after printing usage for --help, EXIT_USAGE for a bad option). */
int cli_service_parse(int argc, char **argv, const char *cmd, const char *usage, bool with_listen,
                      cli_service_args *a);
/* Opens the native backend with *no and, when cfg makes the Docker backend
 * available (backend: docker, or docker_host set), the Docker one beside it
 * under a multiplexing backend (backend.h, ab_multi_open). serve.c. */
int cli_backend_open(const ab_config *cfg, const ab_native_opts *no, ab_backend **out,
                     ab_err **err);
/* cli_backend_open for the CLI's own commands: the settings of the
 * environment (AGENTBOX_BACKEND, AGENTBOX_DOCKER_HOST, ...) over the
 * defaults, boxes in data (NULL or "" = ./data). quick: no sweeps of what
 * crashes left (ab_native_opts.no_sweeps), for commands that only use a box. */
int cli_backend_open_env(const char *data, bool quick, ab_backend **out, ab_err **err);
/* Loads the configuration (file, then environment, then *a), creates the
 * data folder and opens backend, store, events, metrics, webhook and manager.
 * On failure nothing stays open. */
int cli_service_open(cli_service *s, const cli_service_args *a, ab_err **err);
/* Closes what cli_service_open opened (boxes keep running); s may be zeroed. */
void cli_service_close(cli_service *s);

/* cleanup.c: what a server leaves on the host for its data folder. */
typedef struct cli_released {
        size_t sysboxes;       /* system boxes stopped */
        size_t boxes_live;     /* other boxes running, paused or being made */
        bool skills_unmounted; /* DATA/skills was unmounted */
} cli_released;
/* Opens DATA/.server.lock and holds a shared flock on it (an fd the caller
 * closes when the server ends), so `agentbox cleanup` knows a server runs
 * on the folder; waits while a cleanup runs. -1 with err. */
int cli_server_lock(const char *data, ab_err **err);
/* Stops the system boxes of b and, when no other box runs, is paused or is
 * being made, unmounts DATA/skills; *out says what it did. For a server's
 * stop and `agentbox cleanup`, when no server uses data any more. */
int cli_data_release(ab_backend *b, const char *data, cli_released *out, ab_err **err);
/* cli_data_release at a server's stop (from cli_service_close), when s holds
 * the server lock and no other server shares it; problems are logged. */
void cli_service_release(cli_service *s);
/* agentbox cleanup: cli_data_release for a data folder no server runs on
 * (refused, AB_E_CONFLICT, while one does). Returns an exit code. */
int cli_cleanup(int argc, char **argv, const char *data);

/* Opens the image store of data folder `data` (DATA/images) with the
 * registry settings of cfg (may be NULL: defaults). image.c. */
int cli_images_open(const ab_config *cfg, const char *data, ab_image_store **out, ab_err **err);
/* agentbox image pull|ls|rm|import|gc. Returns an exit code. */
int cli_image(int argc, char **argv, const char *data);

#endif
