/* metrics.c - counters as arrays of atomics indexed by the known label values
 * (anything else lands in an "other" slot, so a caller can never grow the
 * label set), rendered on demand as Prometheus text format 0.0.4. */
#include "base/metrics.h"
#include "base/buf.h"
#include "base/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>

static const char *const outcomes[] = {"ok", "error", "timeout", "unavailable", "other"};
/* The names ab_code_name returns (common/err.c), then "other". */
static const char *const codes[] = {
    "internal",       "invalid_argument",  "not_found", "conflict",    "unavailable",
    "limit_exceeded", "permission_denied", "timeout",   "unsupported", "other",
};
static const char *const ops[] = {"create",        "start",      "stop",         "destroy",
                                  "pool_claim",    "idle_stop",  "lru_stop",     "ttl_delete",
                                  "pause",         "resume",     "idle_pause",   "lru_pause",
                                  "pressure_stop", "image_pull", "image_import", "image_remove",
                                  "fork",          "snapshot",   "other"};
static const char *const file_ops[] = {"stat",   "list",  "read",  "write",   "mkdir", "rename",
                                       "delete", "chmod", "chown", "symlink", "grep",  "other"};
static const char *const proxy_results[] = {"allowed", "denied", "error", "other"};
static const double buckets[] = {.001, .0025, .005, .01, .025, .05, .1, .25,
                                 .5,   1,     2.5,  5,   10,   30,  60};

#define N_OUTCOMES AB_ARRAY_LEN(outcomes)
#define N_CODES    AB_ARRAY_LEN(codes)
#define N_OPS      AB_ARRAY_LEN(ops)
#define N_PROXY    AB_ARRAY_LEN(proxy_results)
#define N_FILE_OPS AB_ARRAY_LEN(file_ops)
#define N_BUCKETS  (AB_ARRAY_LEN(buckets) + 1) /* the last one is +Inf */
#define N_STATUS   600                         /* slot 0 holds statuses outside 100..599 */

typedef atomic_uint_fast64_t counter;

struct ab_metrics {
        counter execs[N_OUTCOMES];
        counter exec_bucket[N_BUCKETS]; /* not cumulative; summed at render */
        counter exec_sum_ns;
        counter http[N_STATUS];
        counter errors[N_CODES];
        counter lifecycle[N_OPS][2]; /* [op][0 = ok, 1 = error] */
        counter proxy[N_PROXY];
        counter files[N_FILE_OPS][2]; /* [op][0 = ok, 1 = error] */
};

ab_metrics *ab_metrics_new(void)
{
        return xzalloc(sizeof(ab_metrics)); /* all-zero bytes are zero lock-free atomics */
}

void ab_metrics_free(ab_metrics *m)
{
        free(m);
}

/* Index of name in names (whose last entry is "other"); unknown or NULL -> "other". */
static size_t index_of(const char *const *names, size_t n, const char *name)
{
        if (name)
                for (size_t i = 0; i + 1 < n; i++)
                        if (strcmp(names[i], name) == 0)
                                return i;
        return n - 1;
}

static void inc(counter *c, uint64_t by)
{
        atomic_fetch_add_explicit(c, by, memory_order_relaxed);
}

static uint64_t get(counter *c)
{
        return atomic_load_explicit(c, memory_order_relaxed);
}

void ab_metrics_exec(ab_metrics *m, double seconds, const char *outcome)
{
        if (!(seconds >= 0) || isinf(seconds))
                seconds = 0; /* NaN, negative or infinite: a clock bug, not a data point */
        inc(&m->execs[index_of(outcomes, N_OUTCOMES, outcome)], 1);
        size_t b = 0;
        while (b < AB_ARRAY_LEN(buckets) && seconds > buckets[b])
                b++;
        inc(&m->exec_bucket[b], 1);
        double ns = seconds * 1e9;
        inc(&m->exec_sum_ns, ns >= 1.8e19 ? UINT64_MAX / 2 : (uint64_t)llround(ns));
}

void ab_metrics_http(ab_metrics *m, int status)
{
        inc(&m->http[status >= 100 && status < N_STATUS ? status : 0], 1);
}

void ab_metrics_error(ab_metrics *m, const char *code)
{
        inc(&m->errors[index_of(codes, N_CODES, code)], 1);
}

void ab_metrics_op(ab_metrics *m, const char *op, bool ok)
{
        inc(&m->lifecycle[index_of(ops, N_OPS, op)][ok ? 0 : 1], 1);
}

void ab_metrics_file(ab_metrics *m, const char *op, bool ok)
{
        inc(&m->files[index_of(file_ops, N_FILE_OPS, op)][ok ? 0 : 1], 1);
}

void ab_metrics_proxy(ab_metrics *m, const char *result)
{
        inc(&m->proxy[index_of(proxy_results, N_PROXY, result)], 1);
}

/* --- rendering --- */

/* A label value with \, " and newline escaped, as the text format requires. */
static void put_label(ab_buf *b, const char *s)
{
        for (; s && *s; s++) {
                switch (*s) {
                case '\\':
                        ab_buf_printf(b, "\\\\");
                        break;
                case '"':
                        ab_buf_printf(b, "\\\"");
                        break;
                case '\n':
                        ab_buf_printf(b, "\\n");
                        break;
                default:
                        ab_buf_printf(b, "%c", *s);
                }
        }
}

/* The shortest decimal that reads back as v (Prometheus parses Go-style floats). */
static void fmt_double(char out[32], double v)
{
        if (isnan(v)) {
                snprintf(out, 32, "NaN");
                return;
        }
        if (isinf(v)) {
                snprintf(out, 32, v > 0 ? "+Inf" : "-Inf");
                return;
        }
        if (v == trunc(v) && fabs(v) < 1e15) {
                snprintf(out, 32, "%.0f", v); /* 60, not 6e+01 */
                return;
        }
        for (int prec = 1; prec <= 17; prec++) {
                snprintf(out, 32, "%.*g", prec, v);
                if (strtod(out, NULL) == v)
                        return;
        }
}

static void put_double(ab_buf *b, double v)
{
        char s[32];
        fmt_double(s, v);
        ab_buf_printf(b, "%s", s);
}

static void header(ab_buf *b, const char *name, const char *type, const char *help)
{
        ab_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *ab_metrics_render(ab_metrics *m, const ab_metrics_gauges *g)
{
        static const ab_metrics_gauges none = {0};
        if (!g)
                g = &none;
        _cleanup_buf_ ab_buf b = {0};

        header(&b, "agentbox_boxes", "gauge", "Boxes by lifecycle state.");
        for (size_t i = 0; i < g->n_states; i++) {
                ab_buf_printf(&b, "agentbox_boxes{state=\"");
                put_label(&b, g->box_states[i]);
                ab_buf_printf(&b, "\"} %lld\n", (long long)g->box_counts[i]);
        }

        header(&b, "agentbox_execs_total", "counter", "Finished execs by outcome.");
        for (size_t i = 0; i < N_OUTCOMES; i++) {
                uint64_t v = get(&m->execs[i]);
                if (i + 1 < N_OUTCOMES || v)
                        ab_buf_printf(&b, "agentbox_execs_total{outcome=\"%s\"} %llu\n",
                                      outcomes[i], (unsigned long long)v);
        }

        header(&b, "agentbox_exec_duration_seconds", "histogram", "Wall time of finished execs.");
        uint64_t cum = 0;
        for (size_t i = 0; i < N_BUCKETS; i++) {
                cum += get(&m->exec_bucket[i]);
                char le[32];
                fmt_double(le, i < AB_ARRAY_LEN(buckets) ? buckets[i] : INFINITY);
                ab_buf_printf(&b, "agentbox_exec_duration_seconds_bucket{le=\"%s\"} %llu\n", le,
                              (unsigned long long)cum);
        }
        ab_buf_printf(&b, "agentbox_exec_duration_seconds_sum ");
        put_double(&b, (double)get(&m->exec_sum_ns) / 1e9);
        ab_buf_printf(&b, "\nagentbox_exec_duration_seconds_count %llu\n", (unsigned long long)cum);

        header(&b, "agentbox_execs_in_flight", "gauge", "Execs running now.");
        ab_buf_printf(&b, "agentbox_execs_in_flight %lld\n", (long long)g->execs_in_flight);

        header(&b, "agentbox_http_requests_total", "counter", "HTTP requests by status code.");
        for (size_t i = 100; i < N_STATUS; i++) {
                uint64_t v = get(&m->http[i]);
                if (v)
                        ab_buf_printf(&b, "agentbox_http_requests_total{code=\"%zu\"} %llu\n", i,
                                      (unsigned long long)v);
        }
        if (get(&m->http[0]))
                ab_buf_printf(&b, "agentbox_http_requests_total{code=\"other\"} %llu\n",
                              (unsigned long long)get(&m->http[0]));

        header(&b, "agentbox_errors_total", "counter", "Errors returned to clients by code.");
        for (size_t i = 0; i < N_CODES; i++) {
                uint64_t v = get(&m->errors[i]);
                if (i + 1 < N_CODES || v)
                        ab_buf_printf(&b, "agentbox_errors_total{code=\"%s\"} %llu\n", codes[i],
                                      (unsigned long long)v);
        }

        header(&b, "agentbox_lifecycle_ops_total", "counter",
               "Lifecycle operations by kind and result.");
        for (size_t i = 0; i < N_OPS; i++) {
                for (int r = 0; r < 2; r++) {
                        uint64_t v = get(&m->lifecycle[i][r]);
                        if (i + 1 < N_OPS || v)
                                ab_buf_printf(
                                    &b,
                                    "agentbox_lifecycle_ops_total{op=\"%s\",result=\"%s\"} "
                                    "%llu\n",
                                    ops[i], r ? "error" : "ok", (unsigned long long)v);
                }
        }

        header(&b, "agentbox_file_ops_total", "counter",
               "File operations on boxes (the manager's file doors) by kind and result.");
        for (size_t i = 0; i < N_FILE_OPS; i++) {
                for (int r = 0; r < 2; r++) {
                        uint64_t v = get(&m->files[i][r]);
                        if (i + 1 < N_FILE_OPS || v)
                                ab_buf_printf(&b,
                                              "agentbox_file_ops_total{op=\"%s\",result=\"%s\"} "
                                              "%llu\n",
                                              file_ops[i], r ? "error" : "ok",
                                              (unsigned long long)v);
                }
        }

        header(&b, "agentbox_proxy_connections_total", "counter",
               "Connections to the allowlist egress proxy by result.");
        for (size_t i = 0; i < N_PROXY; i++) {
                uint64_t v = get(&m->proxy[i]);
                if (i + 1 < N_PROXY || v)
                        ab_buf_printf(&b, "agentbox_proxy_connections_total{result=\"%s\"} %llu\n",
                                      proxy_results[i], (unsigned long long)v);
        }

        header(&b, "agentbox_pool_size", "gauge", "Warm boxes ready in the pool.");
        ab_buf_printf(&b, "agentbox_pool_size %lld\n", (long long)g->pool_size);
        header(&b, "agentbox_pool_target", "gauge", "Configured warm pool size.");
        ab_buf_printf(&b, "agentbox_pool_target %lld\n", (long long)g->pool_target);
        header(&b, "agentbox_sse_subscribers", "gauge", "Connected event stream subscribers.");
        ab_buf_printf(&b, "agentbox_sse_subscribers %lld\n", (long long)g->sse_subscribers);
        header(&b, "agentbox_uptime_seconds", "gauge", "Seconds since the server started.");
        ab_buf_printf(&b, "agentbox_uptime_seconds ");
        put_double(&b, g->uptime_s);
        ab_buf_printf(&b, "\n");
        header(&b, "agentbox_build_info", "gauge", "Build information; always 1.");
        ab_buf_printf(&b, "agentbox_build_info{version=\"");
        put_label(&b, AGENTBOX_VERSION);
        ab_buf_printf(&b, "\"} 1\n");
        return ab_buf_steal(&b);
}
