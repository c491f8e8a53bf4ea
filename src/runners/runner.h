/* runner.h - the FastGPT-compatible code runner (seed 003): JS and Python
 * snippets run inside one isolated, network-less system box ("sys-runner").
 * A zygote there (a pre-imported Python parent, root in the box, that never
 * runs user code) forks every run's process ahead of time; the server moves
 * it into a cgroup of its own (the run's memory and pids limits) before it
 * makes its temp dir and drops to a uid of its own (a JS run's child then
 * execs Bun). It runs exactly one snippet and exits, so no process that ran
 * user code is ever reused and no run can see another's data; whatever it
 * leaves behind dies with its cgroup. The protocols are in runners/README.md.
 * The only way out to the network is httpRequest, made by the server itself
 * (fetch.h). Thread-safe. */
#ifndef AB_RUNNER_H
#define AB_RUNNER_H

#include "backend/backend.h"
#include <jansson.h>

typedef struct ab_runners ab_runners;

typedef struct ab_runners_opts {
        ab_backend *backend; /* borrowed */
        const char
            *runtime_dir;    /* host dir with python/runner.py and js/runner.js (+ node_modules) */
        int warm;            /* run processes kept ready per language; 0 = 4 */
        int max_concurrency; /* runs at once; more are queued; 0 = 50 */
        int64_t timeout_ms, max_timeout_ms; /* 0 = 10000 / 60000 */
        int64_t memory_mb, max_memory_mb;   /* 0 = 64 / 256 */
        int64_t disk_mb, max_disk_mb;       /* 0 = 10 / 100 */
        int max_requests;                   /* httpRequest calls per run; 0 = 30 */
} ab_runners_opts;

/* Prepares the runner (nothing starts until the first run). */
int ab_runners_new(const ab_runners_opts *o, ab_runners **out, ab_err **err);
/* Stops every warm process and frees. The system box stays (it is reused). */
void ab_runners_free(ab_runners *r);

/* Runs one request body of POST /sandbox/js or /sandbox/python (lang "js" or
 * "python"). On success *out is the answer to send with HTTP 200
 * ({"success": true, "data": {...}} or {"success": false, "message": ...}).
 * AB_E_INVALID (HTTP 400, "Invalid request: ...") for a malformed body;
 * AB_E_UNAVAILABLE when the runner box cannot be made. */
int ab_runners_run(ab_runners *r, const char *lang, json_t *body, json_t **out, ab_err **err);

/* {"current", "queued", "max"} and warm process counts, for /health. */
json_t *ab_runners_stats(ab_runners *r);

/* The module policy of each language, for GET /sandbox/modules. */
json_t *ab_runners_modules(void);

#endif
