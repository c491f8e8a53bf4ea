/* runner.h - the FastGPT-compatible code runner (seed 003): JS and Python
 * snippets run inside one isolated, network-less system box ("sys-runner").
 * A zygote there (a pre-imported Python parent, root in the box, that never
 * runs user code) forks every runner process ahead of time; the server moves
 * it into a cgroup of its own before it drops to a uid of its own.
 *
 * Warm workers (runners/README.md, "Worker mode"): a runner process serves
 * many runs, each in a fresh context (Python: a fork of the worker's clean
 * state per run), for ONE app only: a pool per (app, language), with
 * `warm` unbound workers per language kept ready and bound to an app on its
 * first run. A worker is replaced after max_runs runs, when it says
 * {"recycle":...} (a run hit a limit or left anything behind), on a
 * timeout, an OOM kill, or any protocol error; its cgroup is reused across
 * its runs (memory limit rewritten per run) and, when it ends, everything in
 * it is killed and the zygote sweeps, as its uid, what it left in the box's
 * shared temp places and System V IPC (docs/security.md). A language whose
 * runner has no worker mode runs one process per run, as before.
 * The only way out to the network is httpRequest, made by the server itself
 * (fetch.h). Thread-safe. */
#ifndef AB_RUNNER_H
#define AB_RUNNER_H

#include "core/manager.h"
#include <jansson.h>

typedef struct ab_runners ab_runners;

typedef struct ab_runners_opts {
        ab_manager *manager; /* borrowed: owns the system box "sys-runner" */
        const char
            *runtime_dir; /* host dir with python/runner.py and js/runner.js (+ node_modules) */
        const char *runtime_missing; /* instead of runtime_dir: why there is none; every run is
                                        then AB_E_UNAVAILABLE with this message */
        int warm;                    /* unbound processes kept ready per language; 0 = 4 */
        int max_runs;                /* runs a worker serves before it is replaced; 0 = 100 */
        int idle_s;                  /* an idle worker bound to an app ends after this; 0 = 60 */
        int max_concurrency;         /* runs at once; more are queued; 0 = 50 */
        int64_t timeout_ms, max_timeout_ms; /* 0 = 10000 / 60000 */
        int64_t memory_mb, max_memory_mb;   /* 0 = 64 / 256 */
        int64_t disk_mb, max_disk_mb;       /* 0 = 10 / 100 */
        int max_requests;                   /* httpRequest calls per run; 0 = 30 */
} ab_runners_opts;

/* Prepares the runner (nothing starts until the first run). */
int ab_runners_new(const ab_runners_opts *o, ab_runners **out, ab_err **err);
/* Stops every warm process and frees. The system box stays (it is reused). */
void ab_runners_free(ab_runners *r);

/* One snippet run, as FastGPT's code sandbox takes it (the HTTP shape is
 * read and checked by the route, rest/routes_runner.c). */
typedef struct ab_run_req {
        const char *app;   /* the caller's app: a worker serves one app only (NULL = "") */
        const char *code;  /* NULL = "" */
        json_t *variables; /* object, or NULL (borrowed) */
        int64_t timeout_ms, memory_mb, disk_mb; /* 0 = the server's default; above the
                                                   server's maximum = that maximum */
} ab_run_req;

/* What a run gave: the runner program's answer (FastGPT's {"success": ...,
 * "data" | "message"} object), or, when the run ended without one, message
 * saying why (timed out, memory limit, empty code, crashed). */
typedef struct ab_run_res {
        json_t *answer;
        char *message;
} ab_run_res;
void ab_run_res_clear(ab_run_res *r);

/* Runs one snippet of lang ("js" or "python"); waits for a free slot when
 * max_concurrency runs are under way. AB_E_UNAVAILABLE when the runner box
 * cannot be made or no runner process became ready. */
int ab_runners_run(ab_runners *r, const char *lang, const ab_run_req *req, ab_run_res *out,
                   ab_err **err);

/* {"current", "queued", "max"} and warm process counts, for /health. */
json_t *ab_runners_stats(ab_runners *r);

/* The module policy of each language, for GET /sandbox/modules. */
json_t *ab_runners_modules(void);

#endif
