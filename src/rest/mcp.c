/* The MCP server: the JSON-RPC dispatcher both transports share, the tools
 * it exposes, and the Streamable HTTP transport (POST/DELETE /mcp) with its
 * sessions. */
#include "rest/mcp.h"
#include "kit/forward.h"
#include "base/log.h"
#include "base/id.h"

#include <pthread.h>
#include <stdarg.h>

#define RPC_PARSE_ERROR      -32700
#define RPC_INVALID_REQUEST  -32600
#define RPC_METHOD_NOT_FOUND -32601
#define RPC_INVALID_PARAMS   -32602
#define RPC_SERVER_ERROR     -32000
#define RPC_NO_SESSION       -32001

static const char *const versions[] = {AB_MCP_VERSION_LATEST, "2025-03-26", "2024-11-05"};

/* Arguments of the agent tools that pick the box rather than go to the tool. */
static const char *const box_keys[] = {"sandbox_id", "app_id",    "user_id",
                                       "chat_id",    "thread_id", NULL};

bool ab_mcp_version_supported(const char *v)
{
        for (size_t i = 0; v && i < AB_ARRAY_LEN(versions); i++)
                if (!strcmp(v, versions[i]))
                        return true;
        return false;
}

static json_t *rpc_error_v(json_t *id, int code, const char *fmt, va_list ap)
{
        char *msg = NULL;
        if (vasprintf(&msg, fmt, ap) < 0)
                abort();
        json_t *j =
            json_pack("{s:s,s:O,s:{s:i,s:o}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                      "error", "code", code, "message", json_bytes(msg, strlen(msg)));
        free(msg);
        return j;
}

json_t *ab_mcp_error(json_t *id, int code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        json_t *j = rpc_error_v(id, code, fmt, ap);
        va_end(ap);
        return j;
}

/* A method's failure: a JSON-RPC error code and message. */
typedef struct rpc_fail {
        int code;
        char *msg;
} rpc_fail;

static json_t *fail(rpc_fail *f, int code, const char *fmt, ...) AB_PRINTF(3, 4);
static json_t *fail(rpc_fail *f, int code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&f->msg, fmt, ap) < 0)
                abort();
        va_end(ap);
        f->code = code;
        return NULL;
}

/* ---- tools ------------------------------------------------------------ */

static json_t *str_prop(const char *desc)
{
        return json_pack("{s:s,s:s}", "type", "string", "description", desc);
}

static json_t *tool_def(const char *name, const char *desc, json_t *props, json_t *required)
{
        json_t *schema = json_pack("{s:s,s:o}", "type", "object", "properties", props);
        if (required)
                json_object_set_new(schema, "required", required);
        return json_pack("{s:s,s:s,s:o}", "name", name, "description", desc, "inputSchema", schema);
}

static json_t *key_props(void)
{
        return json_pack(
            "{s:o,s:o,s:o,s:o}", "app_id",
            str_prop("With user_id and chat_id: the box of this conversation (the same keys "
                     "always give the same box)."),
            "user_id", str_prop("See app_id."), "chat_id", str_prop("See app_id."), "thread_id",
            str_prop("Alternative to app_id+user_id+chat_id: the box of this thread."));
}

static json_t *lifecycle_tools(void)
{
        json_t *create = key_props();
        json_object_set_new(create, "id",
                            str_prop("An explicit box id ([a-z0-9][a-z0-9_-]{0,62}) instead of "
                                     "keys."));
        json_object_set_new(create, "mode",
                            json_pack("{s:s,s:[s,s],s:s}", "type", "string", "enum", "session",
                                      "task", "description",
                                      "session (default): the box persists; task: deleted after "
                                      "its first tool call."));
        json_object_set_new(create, "env",
                            json_pack("{s:s,s:{s:s},s:s}", "type", "object", "additionalProperties",
                                      "type", "string", "description",
                                      "Environment variables of every command."));
        json_object_set_new(create, "ttl_s",
                            json_pack("{s:s,s:s}", "type", "integer", "description",
                                      "Delete the box this many seconds after creation."));
        json_t *list = key_props();
        json_object_set_new(list, "status",
                            json_pack("{s:s,s:[s,s,s,s,s,s]}", "type", "string", "enum", "creating",
                                      "running", "paused", "stopped", "deleting", "error"));
        json_t *a = json_array();
        json_array_append_new(
            a, tool_def("sandbox_create",
                        "Create or acquire a sandbox (an isolated Linux box with a persistent "
                        "/workspace). With app_id+user_id+chat_id or thread_id the same keys "
                        "always return the same box, created and started as needed. Returns the "
                        "box as JSON; its \"id\" is the sandbox_id the other tools take.",
                        create, NULL));
        json_array_append_new(a, tool_def("sandbox_list",
                                          "List sandboxes, optionally filtered by keys or status.",
                                          list, NULL));
        json_array_append_new(
            a, tool_def("sandbox_stop",
                        "Stop a sandbox: end its processes, keep its files. The next tool call "
                        "starts it again.",
                        json_pack("{s:o}", "sandbox_id", str_prop("The box to stop.")),
                        json_pack("[s]", "sandbox_id")));
        json_array_append_new(
            a, tool_def("sandbox_delete", "Delete a sandbox and all its files.",
                        json_pack("{s:o}", "sandbox_id", str_prop("The box to delete.")),
                        json_pack("[s]", "sandbox_id")));
        return a;
}

/* tools/list: the lifecycle tools, then every agent tool with the box keys
 * added to its parameters. */
static json_t *tools_list(void)
{
        json_t *out = lifecycle_tools();
        json_t *schemas = ab_tools_schemas();
        size_t i;
        json_t *s;
        json_array_foreach(schemas, i, s)
        {
                json_t *f = json_object_get(s, "function");
                const char *name = json_string_value(json_object_get(f, "name"));
                const char *desc = json_string_value(json_object_get(f, "description"));
                if (!name)
                        continue;
                json_t *params = json_object_get(f, "parameters");
                json_t *schema = json_is_object(params) ? json_deep_copy(params) : json_object();
                json_object_set_new(schema, "type", json_string("object"));
                json_t *props = json_object_get(schema, "properties");
                if (!json_is_object(props)) {
                        props = json_object();
                        json_object_set_new(schema, "properties", props);
                }
                json_object_update_missing_new(props, key_props());
                json_object_set_new(
                    props, "sandbox_id",
                    str_prop("The box to run in (from sandbox_create or sandbox_list). Or give "
                             "app_id+user_id+chat_id, or thread_id, to use the box of those keys "
                             "(created and started as needed)."));
                json_array_append_new(out, json_pack("{s:s,s:s,s:o}", "name", name, "description",
                                                     desc ? desc : "", "inputSchema", schema));
        }
        json_decref(schemas);
        return out;
}

static json_t *text_result(const char *text, bool is_error)
{
        return json_pack("{s:[{s:s,s:o}],s:b}", "content", "type", "text", "text",
                         json_bytes(text, strlen(text)), "isError", is_error);
}

static json_t *json_result(json_t *j)
{
        char *txt = json_dumps(j, JSON_INDENT(1) | JSON_REAL_PRECISION(12));
        json_decref(j);
        json_t *r = text_result(txt ? txt : "null", false);
        free(txt);
        return r;
}

static json_t *err_result(ab_err *e);

/* In a fleet, the node of box id when it is another node's (the caller
 * frees), else NULL: the call runs here. */
static char *remote_node(ab_mcp_conn *c, const char *id)
{
        ab_box_rec rec;
        if (!c->req || !c->srv->fleet || ab_manager_get(c->srv->mgr, id, c->scope, &rec, NULL) < 0)
                return NULL;
        char *node = kit_box_local(c->srv, &rec) ? NULL : steal_pointer(&rec.node);
        ab_box_rec_clear(&rec);
        return node;
}

/* A REST call about box id on its fleet node, as the MCP caller: its JSON
 * answer, or an MCP error result. */
static json_t *remote_call(ab_mcp_conn *c, const char *node, const char *method, const char *target,
                           json_t *body, json_t **answer)
{
        *answer = NULL;
        _cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        _cleanup_buf_ ab_buf out = {0};
        unsigned status = 0;
        ab_err *e = NULL;
        if (kit_fleet_call(c->req, node, method, target, text, text ? strlen(text) : 0, &status,
                           &out, NULL, &e) < 0)
                return err_result(e);
        json_t *j = out.n ? json_loadb(out.p, out.n, 0, NULL) : NULL;
        if (status >= 300) {
                const char *msg =
                    json_string_value(json_object_get(json_object_get(j, "error"), "message"));
                json_t *res = text_result(msg ? msg : "the box's node refused the call", true);
                json_decref(j);
                return res;
        }
        *answer = j;
        return NULL;
}

/* A failure the model should see (a tool result with isError); frees e. */
static json_t *err_result(ab_err *e)
{
        char *txt = xasprintf("%s: %s", ab_code_name(e->code), e->msg);
        ab_err_free(&e);
        json_t *r = text_result(txt, true);
        free(txt);
        return r;
}

static json_t *call_lifecycle(ab_mcp_conn *c, const char *name, json_t *args)
{
        ab_err *e = NULL;
        ab_manager *m = c->srv->mgr;
        ab_box_rec rec;
        if (!strcmp(name, "sandbox_create")) {
                bool created;
                if (fields_known(args, acquire_fields, NULL, &e) < 0 ||
                    tools_acquire(c->srv, c->scope, args, &rec, &created, &e) < 0)
                        return err_result(e);
                json_t *j = box_json(c->srv, &rec);
                json_object_set_new(j, "created", json_boolean(created));
                ab_box_rec_clear(&rec);
                return json_result(j);
        }
        if (!strcmp(name, "sandbox_list")) {
                static const char *const known[] = {"app_id",    "user_id", "chat_id",
                                                    "thread_id", "status",  NULL};
                ab_box_filter f = {0};
                ab_box_rec *rs = NULL;
                size_t n = 0;
                const char *status = NULL;
                if (fields_known(args, known, NULL, &e) < 0 ||
                    field_str(args, "app_id", &f.app_id, &e) < 0 ||
                    field_str(args, "user_id", &f.user_id, &e) < 0 ||
                    field_str(args, "chat_id", &f.chat_id, &e) < 0 ||
                    field_str(args, "thread_id", &f.thread_id, &e) < 0 ||
                    field_str(args, "status", &status, &e) < 0 ||
                    (status && !(f.status = ab_box_status_parse(status)) &&
                     ab_err_set(&e, AB_E_INVALID, 0, "status: \"%s\" is not a box state", status) <
                         0) ||
                    ab_manager_list(m, &f, c->scope, &rs, &n, &e) < 0)
                        return err_result(e);
                json_t *a = json_array();
                for (size_t i = 0; i < n; i++)
                        json_array_append_new(a, box_json(c->srv, &rs[i]));
                ab_box_recs_free(rs, n);
                return json_result(json_pack("{s:o}", "sandboxes", a));
        }
        static const char *const known[] = {"sandbox_id", NULL};
        const char *id = NULL;
        if (fields_known(args, known, NULL, &e) < 0 || field_str(args, "sandbox_id", &id, &e) < 0)
                return err_result(e);
        if (!id)
                return text_result("sandbox_id: required", true);
        _cleanup_free_ char *node = remote_node(c, id);
        if (node) { /* another fleet node's box: stopped or deleted there */
                bool stop = !strcmp(name, "sandbox_stop");
                _cleanup_free_ char *target =
                    xasprintf("/v1/sandboxes/%s%s", id, stop ? "/stop" : "");
                json_t *ans = NULL, *empty = json_object();
                json_t *res = remote_call(c, node, stop ? "POST" : "DELETE", target,
                                          stop ? empty : NULL, &ans);
                json_decref(empty);
                return res ? res : json_result(ans);
        }
        if (!strcmp(name, "sandbox_stop")) {
                if (ab_manager_stop(m, id, c->scope, &rec, &e) < 0)
                        return err_result(e);
                json_t *j = box_json(c->srv, &rec);
                ab_box_rec_clear(&rec);
                return json_result(j);
        }
        if (ab_manager_delete(m, id, c->scope, &e) < 0)
                return err_result(e);
        return json_result(json_pack("{s:[s]}", "deleting", id));
}

/* An agent tool: the box keys pick the box (acquired by keys when there is
 * no sandbox_id), the other arguments go to the tool. */
static json_t *call_agent_tool(ab_mcp_conn *c, const char *name, json_t *args)
{
        ab_err *e = NULL;
        _cleanup_free_ char *id = NULL, *node = NULL;
        const char *sid = NULL;
        json_t *keys = json_object(), *targs = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(args, k, v)
        {
                bool is_key = false;
                for (const char *const *p = box_keys; *p && !is_key; p++)
                        is_key = !strcmp(*p, k);
                json_object_set(is_key ? keys : targs, k, v);
        }
        json_t *out = NULL;
        if (field_str(keys, "sandbox_id", &sid, &e) < 0) {
                out = err_result(e);
                goto done;
        }
        if (sid) {
                id = xstrdup(sid);
        } else if (json_object_size(keys) > 0) {
                ab_box_rec rec;
                bool created;
                if (tools_acquire(c->srv, c->scope, keys, &rec, &created, &e) < 0) {
                        out = err_result(e);
                        goto done;
                }
                id = xstrdup(rec.id);
                ab_box_rec_clear(&rec);
        } else {
                out = text_result("no sandbox: give sandbox_id (from sandbox_create), or "
                                  "app_id+user_id+chat_id, or thread_id",
                                  true);
                goto done;
        }
        node = remote_node(c, id);
        if (node) { /* another fleet node's box: the tool runs there */
                _cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/tools/%s", id, name);
                json_t *ans = NULL;
                out = remote_call(c, node, "POST", target, targs, &ans);
                if (!out) {
                        const char *o = json_string_value(json_object_get(ans, "output"));
                        out =
                            text_result(o ? o : "", json_is_true(json_object_get(ans, "is_error")));
                }
                json_decref(ans);
                goto done;
        }
        ab_tool_result res;
        if (tools_call(c->srv, NULL, c->scope, id, name, targs, &res, &e) < 0) {
                out = err_result(e);
                goto done;
        }
        out = text_result(res.output ? res.output : "", res.is_error);
        ab_tool_result_clear(&res);
done:
        json_decref(keys);
        json_decref(targs);
        return out;
}

static bool is_lifecycle(const char *name)
{
        return !strcmp(name, "sandbox_create") || !strcmp(name, "sandbox_list") ||
               !strcmp(name, "sandbox_stop") || !strcmp(name, "sandbox_delete");
}

static json_t *tools_call_method(ab_mcp_conn *c, json_t *params, rpc_fail *f)
{
        json_t *jn = json_object_get(params, "name");
        json_t *args = json_object_get(params, "arguments");
        if (!json_is_string(jn))
                return fail(f, RPC_INVALID_PARAMS, "name: required (a string)");
        const char *name = json_string_value(jn);
        if (args && !json_is_null(args) && !json_is_object(args))
                return fail(f, RPC_INVALID_PARAMS, "arguments: must be an object");
        json_t *a = json_is_object(args) ? json_incref(args) : json_object();
        json_t *out;
        if (is_lifecycle(name))
                out = call_lifecycle(c, name, a);
        else if (ab_tool_exists(name))
                out = call_agent_tool(c, name, a);
        else
                out = fail(f, RPC_INVALID_PARAMS, "Unknown tool: %s", name);
        json_decref(a);
        return out;
}

/* ---- methods ---------------------------------------------------------- */

static const char *instructions =
    "agentbox runs these tools in isolated, persistent Linux boxes (sandboxes). "
    "Every agent tool takes the box to use: sandbox_id (from sandbox_create or "
    "sandbox_list), or app_id+user_id+chat_id, or thread_id, to use the box of "
    "those keys (created and started as needed). Files persist in /workspace.";

static json_t *initialize(ab_mcp_conn *c, json_t *params, rpc_fail *f)
{
        const char *want = json_string_value(json_object_get(params, "protocolVersion"));
        if (!want)
                return fail(f, RPC_INVALID_PARAMS, "protocolVersion: required (a string)");
        const char *v = ab_mcp_version_supported(want) ? want : AB_MCP_VERSION_LATEST;
        snprintf(c->version, sizeof(c->version), "%s", v);
        _cleanup_free_ char *prompt = ab_tools_prompt();
        _cleanup_free_ char *text = xasprintf("%s\n\n%s", instructions, prompt ? prompt : "");
        return json_pack("{s:s,s:{s:{s:b}},s:{s:s,s:s},s:o}", "protocolVersion", v, "capabilities",
                         "tools", "listChanged", 0, "serverInfo", "name", "agentbox", "version",
                         AGENTBOX_VERSION, "instructions", json_bytes(text, strlen(text)));
}

static json_t *dispatch(ab_mcp_conn *c, const char *method, json_t *params, rpc_fail *f)
{
        if (!strcmp(method, "initialize"))
                return initialize(c, params, f);
        if (!strcmp(method, "ping"))
                return json_object();
        if (!strcmp(method, "tools/list"))
                return json_pack("{s:o}", "tools", tools_list());
        if (!strcmp(method, "tools/call"))
                return tools_call_method(c, params, f);
        return fail(f, RPC_METHOD_NOT_FOUND, "Method not found: %s", method);
}

/* MCP narrows JSON-RPC: an id is a string or an integer, never null. */
static bool valid_id(json_t *id)
{
        return json_is_string(id) || json_is_integer(id);
}

static json_t *handle_one(ab_mcp_conn *c, json_t *m)
{
        if (!json_is_object(m))
                return ab_mcp_error(NULL, RPC_INVALID_REQUEST,
                                    "Invalid Request: a message must be a JSON object");
        json_t *id = json_object_get(m, "id");
        json_t *method = json_object_get(m, "method");
        const char *jv = json_string_value(json_object_get(m, "jsonrpc"));
        if (id && !valid_id(id))
                return ab_mcp_error(NULL, RPC_INVALID_REQUEST,
                                    "Invalid Request: id must be a string or an integer "
                                    "(not null)");
        if (!jv || strcmp(jv, "2.0"))
                return ab_mcp_error(id, RPC_INVALID_REQUEST,
                                    "Invalid Request: \"jsonrpc\" must be \"2.0\"");
        if (!method) {
                if (id && (json_object_get(m, "result") || json_object_get(m, "error")))
                        return NULL; /* a response: this server sends no requests */
                return ab_mcp_error(id, RPC_INVALID_REQUEST, "Invalid Request: method: required");
        }
        if (!json_is_string(method))
                return ab_mcp_error(id, RPC_INVALID_REQUEST,
                                    "Invalid Request: method must be a string");
        if (!id)
                return NULL; /* a notification (initialized, cancelled, ...): never answered */
        json_t *params = json_object_get(m, "params");
        if (params && !json_is_null(params) && !json_is_object(params))
                return ab_mcp_error(id, RPC_INVALID_PARAMS, "Invalid params: must be an object");
        json_t *empty = json_object();
        rpc_fail f = {0};
        json_t *res =
            dispatch(c, json_string_value(method), json_is_object(params) ? params : empty, &f);
        json_decref(empty);
        if (!res) {
                json_t *err = ab_mcp_error(id, f.code, "%s", f.msg);
                free(f.msg);
                return err;
        }
        return json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id, "result", res);
}

json_t *ab_mcp_handle(ab_mcp_conn *c, json_t *msg)
{
        if (!json_is_array(msg))
                return handle_one(c, msg);
        if (json_array_size(msg) == 0)
                return ab_mcp_error(NULL, RPC_INVALID_REQUEST, "Invalid Request: empty batch");
        json_t *out = json_array();
        size_t i;
        json_t *m;
        json_array_foreach(msg, i, m)
        {
                json_t *r = handle_one(c, m);
                if (r)
                        json_array_append_new(out, r);
        }
        if (json_array_size(out) == 0) {
                json_decref(out);
                return NULL;
        }
        return out;
}

json_t *ab_mcp_handle_text(ab_mcp_conn *c, const char *buf, size_t len)
{
        json_error_t je;
        json_t *msg = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
        if (!msg)
                return ab_mcp_error(NULL, RPC_PARSE_ERROR, "Parse error: %s (line %d, column %d)",
                                    je.text, je.line, je.column);
        json_t *r = ab_mcp_handle(c, msg);
        json_decref(msg);
        return r;
}

/* ---- Streamable HTTP: sessions ---------------------------------------- */

/* Sessions of this process: made by initialize, bound to the identity that
 * made them (admin or one app), ended by DELETE or when the table is full
 * (the least recently used goes). */
#define MAX_SESSIONS 4096

typedef struct session {
        char id[33];
        char *scope; /* NULL = admin */
        char version[16];
        uint64_t used_ns;
} session;

static pthread_mutex_t sessions_lock = PTHREAD_MUTEX_INITIALIZER;
static session sessions[MAX_SESSIONS];
static size_t n_sessions;

static bool same_scope(const char *a, const char *b)
{
        return (!a && !b) || (a && b && !strcmp(a, b));
}

/* Index of session id for scope, or -1. Called with the lock held. */
static ssize_t session_find(const char *id, const char *scope)
{
        for (size_t i = 0; i < n_sessions; i++)
                if (!strcmp(sessions[i].id, id) && same_scope(sessions[i].scope, scope))
                        return (ssize_t)i;
        return -1;
}

static int session_new(const char *scope, const char *version, char out[33])
{
        ab_random_hex(out, 33, "", 16);
        pthread_mutex_lock(&sessions_lock);
        size_t slot = n_sessions;
        if (n_sessions == MAX_SESSIONS) {
                slot = 0;
                for (size_t i = 1; i < n_sessions; i++)
                        if (sessions[i].used_ns < sessions[slot].used_ns)
                                slot = i;
                free(sessions[slot].scope);
        } else {
                n_sessions++;
        }
        session *s = &sessions[slot];
        memcpy(s->id, out, 33);
        s->scope = scope ? xstrdup(scope) : NULL;
        snprintf(s->version, sizeof(s->version), "%s", version);
        s->used_ns = ab_now_ns();
        pthread_mutex_unlock(&sessions_lock);
        return 0;
}

/* Marks session id used; copies its version. False when unknown. */
static bool session_touch(const char *id, const char *scope, char version[16])
{
        pthread_mutex_lock(&sessions_lock);
        ssize_t i = session_find(id, scope);
        if (i >= 0) {
                sessions[i].used_ns = ab_now_ns();
                memcpy(version, sessions[i].version, 16);
        }
        pthread_mutex_unlock(&sessions_lock);
        return i >= 0;
}

static bool session_end(const char *id, const char *scope)
{
        pthread_mutex_lock(&sessions_lock);
        ssize_t i = session_find(id, scope);
        if (i >= 0) {
                free(sessions[i].scope);
                sessions[i] = sessions[--n_sessions];
        }
        pthread_mutex_unlock(&sessions_lock);
        return i >= 0;
}

/* ---- Streamable HTTP: routes ------------------------------------------ */

/* Queues j (stolen; NULL = empty body) with status, and the session header. */
static enum MHD_Result mcp_reply(ab_req *r, unsigned status, json_t *j, const char *session_id)
{
        char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        struct MHD_Response *resp =
            txt ? MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE)
                : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (txt)
                MHD_add_response_header(resp, "Content-Type", "application/json");
        if (session_id)
                MHD_add_response_header(resp, "Mcp-Session-Id", session_id);
        return resp_send(r, status, resp);
}

static bool has_initialize(json_t *msg)
{
        if (json_is_object(msg)) {
                const char *m = json_string_value(json_object_get(msg, "method"));
                return m && !strcmp(m, "initialize");
        }
        size_t i;
        json_t *x;
        json_array_foreach(msg, i, x)
        {
                if (json_is_object(x) && has_initialize(x))
                        return true;
        }
        return false;
}

enum MHD_Result route_mcp_post(ab_req *r, const char *id)
{
        const char *pv = req_header(r, "MCP-Protocol-Version");
        if (pv && !ab_mcp_version_supported(pv))
                return mcp_reply(r, 400,
                                 ab_mcp_error(NULL, RPC_SERVER_ERROR,
                                              "Bad Request: unsupported MCP-Protocol-Version "
                                              "\"%s\" (this server speaks %s, 2025-03-26, "
                                              "2024-11-05)",
                                              pv, AB_MCP_VERSION_LATEST),
                                 NULL);
        json_error_t je;
        json_t *msg = json_loadb(r->body ? r->body : "", r->body_len, JSON_REJECT_DUPLICATES, &je);
        if (!msg)
                return mcp_reply(r, 400,
                                 ab_mcp_error(NULL, RPC_PARSE_ERROR,
                                              "Parse error: %s (line %d, column %d)", je.text,
                                              je.line, je.column),
                                 NULL);
        ab_mcp_conn c = {.srv = r->srv, .scope = r->scope, .req = r};
        bool init = has_initialize(msg);
        const char *sid = req_header(r, "Mcp-Session-Id");
        if (!init && !sid) {
                json_decref(msg);
                return mcp_reply(r, 400,
                                 ab_mcp_error(NULL, RPC_SERVER_ERROR,
                                              "Bad Request: Mcp-Session-Id header required "
                                              "(send initialize first)"),
                                 NULL);
        }
        if (!init && !session_touch(sid, r->scope, c.version)) {
                json_decref(msg);
                return mcp_reply(
                    r, 404,
                    ab_mcp_error(NULL, RPC_NO_SESSION, "Session not found: initialize a new one"),
                    NULL);
        }
        json_t *out = ab_mcp_handle(&c, msg);
        json_decref(msg);
        char new_sid[33];
        bool made = false;
        if (init && c.version[0]) {
                if (session_new(r->scope, c.version, new_sid) < 0) {
                        json_decref(out);
                        return resp_error(r, 500, "internal", "no randomness for a session id");
                }
                made = true;
        }
        if (!out)
                return mcp_reply(r, 202, NULL, NULL);
        return mcp_reply(r, 200, out, made ? new_sid : NULL);
}

enum MHD_Result route_mcp_delete(ab_req *r, const char *id)
{
        const char *sid = req_header(r, "Mcp-Session-Id");
        if (!sid)
                return mcp_reply(r, 400,
                                 ab_mcp_error(NULL, RPC_SERVER_ERROR,
                                              "Bad Request: Mcp-Session-Id header required"),
                                 NULL);
        if (!session_end(sid, r->scope))
                return mcp_reply(r, 404, ab_mcp_error(NULL, RPC_NO_SESSION, "Session not found"),
                                 NULL);
        return mcp_reply(r, 204, NULL, NULL);
}
