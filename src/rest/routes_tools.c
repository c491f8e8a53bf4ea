/* Routes of docs/api.md "Tools": the agent tools' schemas and prompt, and a
 * tool call in a box (by id, or acquired by keys in the same call). The
 * tools themselves are src/tools; this file only finds the box and keeps it
 * in use (running, not idle-stopped) for the length of the call. */
#include "rest/parse.h"
#include "rest/rest.h"
#include "kit/toolcall.h"
#include "kit/forward.h"

static bool is_acquire_field(const char *k)
{
        for (const char *const *p = acquire_fields; *p; p++)
                if (!strcmp(*p, k))
                        return true;
        return false;
}

int tools_acquire(ab_server *s, const char *scope, json_t *o, ab_box_rec *out, bool *created,
                  ab_err **err)
{
        ab_acquire_req q;
        ab_limits lim;
        if (parse_acquire(s, o, &q, &lim, err) < 0)
                return -1;
        return ab_manager_acquire(s->mgr, &q, scope, out, created, err);
}

static bool req_gone(void *ud)
{
        return ud && req_client_gone(ud);
}

int tools_call(ab_server *s, ab_req *r, const char *scope, const char *id, const char *name,
               json_t *args, ab_tool_result *out, ab_err **err)
{
        kit_tool_opts o = {.gone = req_gone, .gone_ud = r, .cancel_fd = -1};
        return kit_tool_call(s, scope, id, name, args, &o, out, err);
}

/* ---- routes ----------------------------------------------------------- */

enum MHD_Result route_tools_list(ab_req *r, const char *id)
{
        return resp_json(r, 200, json_pack("{s:o}", "tools", ab_tools_schemas()));
}

enum MHD_Result route_tools_prompt(ab_req *r, const char *id)
{
        _cleanup_free_ char *p = ab_tools_prompt();
        return resp_json(r, 200, json_pack("{s:o}", "prompt", json_bytes(p, strlen(p))));
}

static json_t *result_json(ab_tool_result *res, const char *sandbox_id)
{
        const char *o = res->output ? res->output : "";
        json_t *j =
            json_pack("{s:o,s:b}", "output", json_bytes(o, strlen(o)), "is_error", res->is_error);
        if (sandbox_id)
                json_object_set_new(j, "sandbox_id", json_string(sandbox_id));
        ab_tool_result_clear(res);
        return j;
}

int parse_box_tool(json_t *body, json_t **args, ab_err **err)
{
        *args = body;
        if (!json_object_get(body, "args"))
                return 0;
        static const char *const known[] = {"args", NULL};
        if (fields_known(body, known, NULL, err) < 0 || field_obj(body, "args", args, err) < 0)
                return -1;
        return 0;
}

/* Pattern v1/sandboxes/{box}/tools/{name}: `id` is the last "*" (the tool),
 * the box is segment 2. */
enum MHD_Result route_box_tool(ab_req *r, const char *id)
{
        const char *box = r->seg[2], *name = id;
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        json_t *args;
        if (parse_box_tool(body, &args, &e) < 0) {
                json_decref(body);
                return resp_err(r, e);
        }
        ab_tool_result res;
        int rc = tools_call(r->srv, r, r->scope, box, name, args, &res, &e);
        json_decref(body);
        if (rc < 0)
                return resp_err(r, e);
        return resp_json(r, 200, result_json(&res, NULL));
}

int parse_tool(json_t *body, json_t **acq, json_t **args, ab_err **err)
{
        *acq = *args = NULL;
        json_t *a = json_object_get(body, "args");
        bool split = !a;
        if (a && !json_is_object(a))
                return ab_err_set(err, AB_E_INVALID, 0, "args: must be an object");
        json_t *q = json_object();
        a = split ? json_object() : json_incref(a);
        const char *k;
        json_t *v;
        json_object_foreach(body, k, v)
        {
                if (!strcmp(k, "args"))
                        continue;
                json_object_set(split && !is_acquire_field(k) ? a : q, k, v);
        }
        if (fields_known(q, acquire_fields, NULL, err) < 0) {
                json_decref(q);
                json_decref(a);
                return -1;
        }
        *acq = q;
        *args = a;
        return 0;
}

/* POST /v1/tools/{name}: the acquire fields pick (or make) the box; the
 * tool's arguments are "args", or else every other field. */
enum MHD_Result route_tool(ab_req *r, const char *name)
{
        ab_err *e = NULL;
        if (!ab_tool_exists(name))
                return resp_error(r, 404, "not_found", "unknown tool \"%s\"", name);
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        json_t *acq, *args;
        int prc = parse_tool(body, &acq, &args, &e);
        json_decref(body);
        if (prc < 0)
                return resp_err(r, e);
        ab_box_rec rec;
        bool created;
        if (tools_acquire(r->srv, r->scope, acq, &rec, &created, &e) < 0) {
                json_decref(acq);
                json_decref(args);
                return resp_err(r, e);
        }
        json_decref(acq);
        if (!kit_box_local(r->srv, &rec) && !r->forwarded) {
                /* the keys' box is another fleet node's: the whole call runs there */
                json_decref(args);
                _cleanup_free_ char *node = steal_pointer(&rec.node);
                ab_box_rec_clear(&rec);
                return kit_forward_buffered(r, node);
        }
        _cleanup_free_ char *sid = xstrdup(rec.id);
        ab_box_rec_clear(&rec);
        ab_tool_result res;
        int rc = tools_call(r->srv, r, r->scope, sid, name, args, &res, &e);
        json_decref(args);
        if (rc < 0)
                return resp_err(r, e);
        return resp_json(r, 200, result_json(&res, sid));
}
