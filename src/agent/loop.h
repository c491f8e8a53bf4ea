/* loop.h - the agent loop of one chat message: the model is called with
 * the conversation and the tools' schemas; its tool calls (assembled from
 * the stream) run through the caller's run_tool and their results go back
 * to the model, until it answers without tool calls, max_steps model calls
 * were made, the deadline passes or the caller stops it.
 *
 * What happens is reported as it happens through ab_agent_sink (text
 * deltas, each call with its arguments, each result). The messages the
 * turn added (the user's, the assistant's, the tools') are handed back for
 * the history, always consistent: every assistant tool call is followed by
 * its tool message, also when the turn stopped early. */
#ifndef AB_AGENT_LOOP_H
#define AB_AGENT_LOOP_H

#include "agent/llm.h"
#include "tools/tools.h"

typedef struct ab_agent_sink {
        void (*text)(void *ud, const char *text, size_t n);
        void (*tool_call)(void *ud, const char *id, const char *name, json_t *args);
        void (*tool_result)(void *ud, const char *id, const char *name, const char *output,
                            bool is_error);
        void *ud;
} ab_agent_sink;

/* Runs a tool: as ab_tool_run (0 with a result, is_error for what the model
 * should see; -1 with *err for a failure of the box). */
typedef int (*ab_agent_tool_fn)(void *ud, const char *name, json_t *args, ab_tool_result *out,
                                ab_err **err);

typedef struct ab_agent_req {
        ab_llm_opts llm;     /* the model; its stop and deadline are checked between tool calls */
        int64_t max_steps;   /* model calls at most (>= 1) */
        const char *system;  /* the system prompt, or NULL */
        json_t *history;     /* earlier messages (array, borrowed), or NULL */
        const char *message; /* the user's new message */
        json_t *tools;       /* the tools' schemas (array, borrowed) */
        ab_agent_tool_fn run_tool;
        void *tool_ud;
        ab_agent_sink sink;
} ab_agent_req;

typedef struct ab_agent_res {
        json_t *added;    /* the messages this turn added, in order (owned) */
        int steps;        /* model calls made */
        const char *stop; /* "stop" (the model was done), "max_steps", "length" (the model's
                           * token limit), "error", "cancelled" (static strings) */
        int64_t prompt_tokens, completion_tokens, total_tokens; /* summed over the steps */
        long http_status; /* the model's status when it failed with one, else 0 */
} ab_agent_res;

/* Runs the turn. 0 when it ended without an error (stop, max_steps,
 * length); -1 with *err (llm.h's errors) when the model failed or was
 * cancelled (res->stop "error" or "cancelled"). res is filled in both
 * cases; release it with ab_agent_res_clear. */
int ab_agent_run(const ab_agent_req *q, ab_agent_res *res, ab_err **err);
void ab_agent_res_clear(ab_agent_res *res);

#endif
