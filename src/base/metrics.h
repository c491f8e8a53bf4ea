/* metrics.h - counters behind GET /metrics (Prometheus text exposition format
 * 0.0.4). Updates are lock-free atomics so the hot exec path pays nothing
 * noticeable; the renderer takes a snapshot. Thread-safe. */
#ifndef AB_METRICS_H
#define AB_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ab_metrics ab_metrics;

ab_metrics *ab_metrics_new(void);
void ab_metrics_free(ab_metrics *m);

/* One finished exec: its wall time and outcome ("ok" exit 0, "error" non-zero
 * exit, "timeout", "unavailable" the box could not be made available). */
void ab_metrics_exec(ab_metrics *m, double seconds, const char *outcome);
/* One HTTP request answered with `status`. */
void ab_metrics_http(ab_metrics *m, int status);
/* One error returned to a client, by stable code name (ab_code_name). */
void ab_metrics_error(ab_metrics *m, const char *code);
/* Lifecycle operations: "create", "start", "stop", "destroy", "pool_claim",
 * "idle_stop", "lru_stop", "ttl_delete", "pause", "resume", "idle_pause",
 * "lru_pause", "pressure_stop" (a paused box stopped because memory was
 * short), "image_pull", "image_import", "image_remove"; `ok` false counts a
 * failure. */
void ab_metrics_op(ab_metrics *m, const char *op, bool ok);

/* One file operation through the manager's file doors: "stat", "list",
 * "read", "write", "mkdir", "rename", "delete", "chmod", "chown", "symlink", "grep"; `ok`
 * false counts a failure (a missing path included). */
void ab_metrics_file(ab_metrics *m, const char *op, bool ok);

/* One connection to the allowlist egress proxy: "allowed", "denied" (by the
 * box's rules or an internal address) or "error" (bad request, no route). */
void ab_metrics_proxy(ab_metrics *m, const char *result);

/* Gauges the caller reads at render time. */
typedef struct ab_metrics_gauges {
        const char *const *box_states; /* state names ... */
        const int64_t *box_counts;     /* ... and the number of boxes in each */
        size_t n_states;
        int64_t pool_size, pool_target;
        int64_t execs_in_flight;
        int64_t sse_subscribers;
        double uptime_s;
} ab_metrics_gauges;

/* Renders everything as Prometheus text (malloc'd, NUL-terminated). Metric
 * names: agentbox_boxes{state}, agentbox_execs_total{outcome},
 * agentbox_exec_duration_seconds (histogram: buckets .001 .0025 .005 .01 .025
 * .05 .1 .25 .5 1 2.5 5 10 30 60 +Inf), agentbox_execs_in_flight,
 * agentbox_http_requests_total{code}, agentbox_errors_total{code},
 * agentbox_lifecycle_ops_total{op,result}, agentbox_pool_size,
 * agentbox_pool_target, agentbox_proxy_connections_total{result},
 * agentbox_sse_subscribers, agentbox_uptime_seconds,
 * agentbox_build_info{version}. */
char *ab_metrics_render(ab_metrics *m, const ab_metrics_gauges *g);

#endif
