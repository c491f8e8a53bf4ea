/* Unit tests: the Prometheus rendering after known updates, line by line:
 * counters, cumulative histogram buckets with _sum and _count, gauges, label
 * escaping, unknown label values folded into "other", and concurrent updates. */
#include "base/metrics.h"
#include "base/util.h"
#include "tap.h"

#include <pthread.h>

/* True when `line` is one whole line of text. */
static bool has_line(const char *text, const char *line)
{
        size_t n = strlen(line);
        for (const char *p = text; (p = strstr(p, line)); p++)
                if ((p == text || p[-1] == '\n') && p[n] == '\n')
                        return true;
        return false;
}

#define LINE(text, line)                                                                           \
        do {                                                                                       \
                bool _ok = has_line(text, line);                                                   \
                tap_ok(_ok, "line: %s", line);                                                     \
        } while (0)

#define NO_LINE(text, line) tap_ok(!has_line(text, line), "no line: %s", line)

static void *hammer(void *arg)
{
        ab_metrics *m = arg;
        for (int i = 0; i < 10000; i++) {
                ab_metrics_http(m, 200);
                ab_metrics_exec(m, 0.002, "ok");
        }
        return NULL;
}

int main(void)
{
        ab_metrics *m = ab_metrics_new();

        ab_metrics_exec(m, 0.0005, "ok");       /* le 0.001 */
        ab_metrics_exec(m, 0.001, "ok");        /* le 0.001 (bucket bounds are inclusive) */
        ab_metrics_exec(m, 0.003, "error");     /* le 0.005 */
        ab_metrics_exec(m, 0.7, "timeout");     /* le 1 */
        ab_metrics_exec(m, 45, "ok");           /* le 60 */
        ab_metrics_exec(m, 120, "unavailable"); /* +Inf only */
        ab_metrics_exec(m, 1, "weird");         /* le 1, outcome other */
        for (int i = 0; i < 3; i++)
                ab_metrics_http(m, 200);
        ab_metrics_http(m, 404);
        ab_metrics_http(m, 503);
        ab_metrics_http(m, 42); /* not an HTTP status */
        ab_metrics_error(m, "not_found");
        ab_metrics_error(m, "not_found");
        ab_metrics_error(m, "limit_exceeded");
        ab_metrics_error(m, "bad\"code\\\nx"); /* must not reach the output raw */
        ab_metrics_op(m, "create", true);
        ab_metrics_op(m, "create", true);
        ab_metrics_op(m, "start", false);
        ab_metrics_op(m, "explode", true);

        static const char *const states[] = {"running", "stopped", "we\"ird\\st\nate"};
        static const int64_t counts[] = {3, 5, 1};
        ab_metrics_gauges g = {
            .box_states = states,
            .box_counts = counts,
            .n_states = 3,
            .pool_size = 2,
            .pool_target = 4,
            .execs_in_flight = 7,
            .sse_subscribers = 1,
            .uptime_s = 12.5,
        };
        char *t = ab_metrics_render(m, &g);
        tap_ok(t != NULL && t[strlen(t) - 1] == '\n', "render ends with a newline");

        LINE(t, "# HELP agentbox_boxes Boxes by lifecycle state.");
        LINE(t, "# TYPE agentbox_boxes gauge");
        LINE(t, "agentbox_boxes{state=\"running\"} 3");
        LINE(t, "agentbox_boxes{state=\"stopped\"} 5");
        LINE(t, "agentbox_boxes{state=\"we\\\"ird\\\\st\\nate\"} 1");

        LINE(t, "# TYPE agentbox_execs_total counter");
        LINE(t, "agentbox_execs_total{outcome=\"ok\"} 3");
        LINE(t, "agentbox_execs_total{outcome=\"error\"} 1");
        LINE(t, "agentbox_execs_total{outcome=\"timeout\"} 1");
        LINE(t, "agentbox_execs_total{outcome=\"unavailable\"} 1");
        LINE(t, "agentbox_execs_total{outcome=\"other\"} 1");

        LINE(t, "# TYPE agentbox_exec_duration_seconds histogram");
        LINE(t, "agentbox_exec_duration_seconds_bucket{le=\"0.001\"} 2");
        LINE(t, "agentbox_exec_duration_seconds_bucket{le=\"0.0025\"} 2");
        LINE(t, "agentbox_exec_duration_seconds_bucket{le=\"0.005\"} 3");
        LINE(t, "agentbox_exec_duration_seconds_bucket{le=\"0.01\"} 3");
        LINE(t, "agentbox_exec_duration_seconds_bucket{le=\"0.5\"} 3");
        LINE(t, "agentbox_exec_duration_seconds_bucket{le=\"1\"} 5");
        LINE(t, "agentbox_exec_duration_seconds_bucket{le=\"2.5\"} 5");
        LINE(t, "agentbox_exec_duration_seconds_bucket{le=\"30\"} 5");
        LINE(t, "agentbox_exec_duration_seconds_bucket{le=\"60\"} 6");
        LINE(t, "agentbox_exec_duration_seconds_bucket{le=\"+Inf\"} 7");
        LINE(t, "agentbox_exec_duration_seconds_sum 166.7045");
        LINE(t, "agentbox_exec_duration_seconds_count 7");
        /* The 16 buckets of the header, in order. */
        static const char *const les[] = {"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
                                          "0.1",   "0.25",   "0.5",   "1",    "2.5",   "5",
                                          "10",    "30",     "60",    "+Inf"};
        const char *p = t;
        bool in_order = true;
        for (size_t i = 0; i < AB_ARRAY_LEN(les); i++) {
                char want[96];
                snprintf(want, sizeof(want), "agentbox_exec_duration_seconds_bucket{le=\"%s\"}",
                         les[i]);
                const char *q = strstr(p, want);
                if (!q) {
                        in_order = false;
                        break;
                }
                p = q + 1;
        }
        tap_ok(in_order, "all 16 buckets present in order");
        size_t nb = 0;
        for (const char *q = t; (q = strstr(q, "_bucket{")); q++)
                nb++;
        TAP_IS_INT(nb, 16, "exactly 16 bucket lines");

        LINE(t, "# TYPE agentbox_execs_in_flight gauge");
        LINE(t, "agentbox_execs_in_flight 7");
        LINE(t, "# TYPE agentbox_http_requests_total counter");
        LINE(t, "agentbox_http_requests_total{code=\"200\"} 3");
        LINE(t, "agentbox_http_requests_total{code=\"404\"} 1");
        LINE(t, "agentbox_http_requests_total{code=\"503\"} 1");
        LINE(t, "agentbox_http_requests_total{code=\"other\"} 1");
        NO_LINE(t, "agentbox_http_requests_total{code=\"500\"} 0");

        LINE(t, "agentbox_errors_total{code=\"not_found\"} 2");
        LINE(t, "agentbox_errors_total{code=\"limit_exceeded\"} 1");
        LINE(t, "agentbox_errors_total{code=\"internal\"} 0");
        LINE(t, "agentbox_errors_total{code=\"other\"} 1");
        tap_ok(!strstr(t, "bad"), "an unknown error code never reaches the output");

        LINE(t, "# TYPE agentbox_lifecycle_ops_total counter");
        LINE(t, "agentbox_lifecycle_ops_total{op=\"create\",result=\"ok\"} 2");
        LINE(t, "agentbox_lifecycle_ops_total{op=\"create\",result=\"error\"} 0");
        LINE(t, "agentbox_lifecycle_ops_total{op=\"start\",result=\"error\"} 1");
        LINE(t, "agentbox_lifecycle_ops_total{op=\"ttl_delete\",result=\"ok\"} 0");
        LINE(t, "agentbox_lifecycle_ops_total{op=\"other\",result=\"ok\"} 1");

        LINE(t, "agentbox_pool_size 2");
        LINE(t, "agentbox_pool_target 4");
        LINE(t, "agentbox_sse_subscribers 1");
        LINE(t, "agentbox_uptime_seconds 12.5");
        LINE(t, "# TYPE agentbox_build_info gauge");
        LINE(t, "agentbox_build_info{version=\"" AGENTBOX_VERSION "\"} 1");

        /* Every non-comment line is "name{labels} value" or "name value". */
        bool shape = true;
        char *copy = xstrdup(t);
        for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l;
             l = strtok_r(NULL, "\n", &save)) {
                if (l[0] == '#')
                        continue;
                char *sp = strrchr(l, ' ');
                if (!sp || strncmp(l, "agentbox_", 9) != 0 || sp[1] == '\0')
                        shape = false;
        }
        free(copy);
        tap_ok(shape, "every sample line has a name and a value");
        free(t);

        /* Concurrent updates lose nothing. */
        ab_metrics *m2 = ab_metrics_new();
        pthread_t th[4];
        for (int i = 0; i < 4; i++)
                pthread_create(&th[i], NULL, hammer, m2);
        for (int i = 0; i < 4; i++)
                pthread_join(th[i], NULL);
        t = ab_metrics_render(m2, NULL);
        LINE(t, "agentbox_http_requests_total{code=\"200\"} 40000");
        LINE(t, "agentbox_execs_total{outcome=\"ok\"} 40000");
        LINE(t, "agentbox_exec_duration_seconds_bucket{le=\"0.0025\"} 40000");
        LINE(t, "agentbox_exec_duration_seconds_sum 80");
        LINE(t, "agentbox_execs_in_flight 0");
        free(t);
        ab_metrics_free(m2);
        ab_metrics_free(m);
        return tap_done();
}
