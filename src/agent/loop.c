/* loop.c - the agent loop (loop.h). */
#include "agent/loop.h"
#include "base/util.h"

#include <string.h>

void ab_agent_res_clear(ab_agent_res *res)
{
        json_decref(res->added);
        *res = (ab_agent_res){0};
}

/* The assistant message of a reply: its text (null when none) and calls. */
static json_t *assistant_message(const ab_llm_reply *r)
{
        json_t *m = json_pack("{s:s}", "role", "assistant");
        json_object_set_new(m, "content",
                            r->content.n ? json_stringn(r->content.p, r->content.n) : json_null());
        if (!json_object_get(m, "content")) /* not UTF-8: keep what the model meant to say */
                json_object_set_new(m, "content", json_string("(the answer was not UTF-8)"));
        if (!r->n_calls)
                return m;
        json_t *calls = json_array();
        for (size_t i = 0; i < r->n_calls; i++) {
                const ab_llm_call *c = &r->calls[i];
                json_t *args = c->args.n ? json_stringn(c->args.p, c->args.n) : json_string("{}");
                json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:o}}", "id", c->id, "type",
                                                       "function", "function", "name",
                                                       c->name ? c->name : "", "arguments",
                                                       args ? args : json_string("{}")));
        }
        json_object_set_new(m, "tool_calls", calls);
        return m;
}

static json_t *tool_message(const char *id, const char *content)
{
        json_t *c = json_string(content);
        return json_pack("{s:s,s:s,s:o}", "role", "tool", "tool_call_id", id, "content",
                         c ? c : json_string("(the output was not UTF-8)"));
}

static bool stopped(const ab_agent_req *q)
{
        return q->llm.stop && q->llm.stop(q->llm.stop_ud);
}

/* Runs one call and adds its tool message. */
static void run_call(const ab_agent_req *q, const ab_llm_call *c, json_t *added, json_t *msgs)
{
        const char *name = c->name ? c->name : "";
        json_error_t je;
        json_t *args = c->args.n ? json_loadb(c->args.p, c->args.n, 0, &je) : json_object();
        if (q->sink.tool_call)
                q->sink.tool_call(q->sink.ud, c->id, name, args ? args : json_null());
        _cleanup_free_ char *text = NULL;
        bool is_error = true;
        if (!json_is_object(args)) {
                text = xasprintf("Error: the arguments of %s are not a JSON object", name);
        } else if (!ab_tool_exists(name)) {
                text = xasprintf("Error: there is no tool \"%s\"", name);
        } else {
                ab_tool_result tr = {0};
                ab_err *e = NULL;
                if (q->run_tool(q->tool_ud, name, args, &tr, &e) < 0) {
                        text = xasprintf("Error: %s", e->msg);
                        ab_err_free(&e);
                } else {
                        text = steal_pointer(&tr.output);
                        is_error = tr.is_error;
                        if (!text)
                                text = xstrdup("");
                }
                ab_tool_result_clear(&tr);
        }
        json_decref(args);
        if (q->sink.tool_result)
                q->sink.tool_result(q->sink.ud, c->id, name, text, is_error);
        json_t *m = tool_message(c->id, text);
        json_array_append(added, m);
        json_array_append_new(msgs, m);
}

/* Runs a reply's calls; those left when the turn stops get a message that
 * says so (the model expects an answer to every call). */
static void run_calls(const ab_agent_req *q, const ab_llm_reply *r, json_t *added, json_t *msgs)
{
        for (size_t i = 0; i < r->n_calls; i++) {
                if (stopped(q) || (int64_t)ab_now_ms() >= q->llm.deadline_ms) {
                        json_t *m = tool_message(r->calls[i].id, "Error: the turn was stopped "
                                                                 "before this call ran");
                        json_array_append(added, m);
                        json_array_append_new(msgs, m);
                        continue;
                }
                run_call(q, &r->calls[i], added, msgs);
        }
}

static void add_usage(ab_agent_res *res, const ab_llm_reply *r)
{
        res->prompt_tokens += r->prompt_tokens;
        res->completion_tokens += r->completion_tokens;
        res->total_tokens += r->total_tokens;
}

int ab_agent_run(const ab_agent_req *q, ab_agent_res *res, ab_err **err)
{
        *res = (ab_agent_res){.added = json_array(), .stop = "stop"};
        json_t *msgs = json_array();
        if (q->system && *q->system)
                json_array_append_new(
                    msgs, json_pack("{s:s,s:s}", "role", "system", "content", q->system));
        if (json_is_array(q->history))
                json_array_extend(msgs, q->history);
        json_t *user = json_pack("{s:s,s:s}", "role", "user", "content", q->message);
        json_array_append(res->added, user);
        json_array_append_new(msgs, user);
        int rc = 0;
        for (;;) {
                if (res->steps >= q->max_steps) {
                        res->stop = "max_steps";
                        break;
                }
                ab_llm_reply r;
                res->steps++;
                rc = ab_llm_chat(&q->llm, msgs, q->tools, q->sink.text, q->sink.ud, &r, err);
                add_usage(res, &r);
                if (rc < 0) {
                        res->stop = r.cancelled ? "cancelled" : "error";
                        res->http_status = r.http_status;
                        ab_llm_reply_clear(&r);
                        break;
                }
                json_t *m = assistant_message(&r);
                json_array_append(res->added, m);
                json_array_append_new(msgs, m);
                if (!r.n_calls) {
                        res->stop = r.finish_reason && !strcmp(r.finish_reason, "length") ? "length"
                                                                                          : "stop";
                        ab_llm_reply_clear(&r);
                        break;
                }
                run_calls(q, &r, res->added, msgs);
                ab_llm_reply_clear(&r);
                if (stopped(q)) {
                        res->stop = "cancelled";
                        rc = ab_err_set(err, AB_E_CONFLICT, 0, "the turn was cancelled");
                        break;
                }
        }
        json_decref(msgs);
        return rc;
}
