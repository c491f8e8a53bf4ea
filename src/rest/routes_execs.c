/* GET /v1/sandboxes/{id}/execs: a box's exec history, from the store's exec
 * audit table (every exec through the manager writes one row; docs/api.md). */
#include "rest/rest.h"

#define EXECS_DEFAULT_LIMIT 100
#define EXECS_MAX_LIMIT     1000

static json_t *audit_json(const ab_exec_audit *a)
{
        return json_pack("{s:o,s:i,s:b,s:I,s:I,s:I,s:I}", "command",
                         a->command ? json_bytes(a->command, strlen(a->command)) : json_string(""),
                         "exit_code", a->exit_code, "timed_out", a->timed_out, "started_at",
                         (json_int_t)a->started_at, "duration_ms", (json_int_t)a->duration_ms,
                         "stdout_bytes", (json_int_t)a->stdout_bytes, "stderr_bytes",
                         (json_int_t)a->stderr_bytes);
}

enum MHD_Result route_box_execs(ab_req *r, const char *id)
{
        size_t limit = EXECS_DEFAULT_LIMIT;
        const char *q = req_query(r, "limit");
        if (q) {
                char *end;
                errno = 0;
                unsigned long v = strtoul(q, &end, 10);
                if (errno || end == q || *end || v < 1 || v > EXECS_MAX_LIMIT)
                        return resp_error(r, 400, "invalid_argument",
                                          "limit: must be 1..%d, not \"%s\"", EXECS_MAX_LIMIT, q);
                limit = v;
        }
        ab_err *e = NULL;
        ab_box_rec rec;
        if (ab_manager_get(r->srv->mgr, id, r->scope, &rec, &e) < 0)
                return resp_err(r, e);
        ab_exec_audit *v = NULL;
        size_t n = 0;
        int rc = ab_store_audit_list(r->srv->store, rec.provider, rec.id, limit, &v, &n, &e);
        ab_box_rec_clear(&rec);
        if (rc < 0)
                return resp_err(r, e);
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(a, audit_json(&v[i]));
        ab_exec_audits_free(v, n);
        return resp_json(r, 200, json_pack("{s:o}", "execs", a));
}
