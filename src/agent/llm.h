/* llm.h - the client of an OpenAI-compatible chat-completions API (POST
 * {base_url}/chat/completions with "stream": true), for the agent loop.
 *
 * The answer streams as Server-Sent Events (sse.h) of chunks
 * {choices:[{delta:{content?, tool_calls?:[{index, id?, function:{name?,
 * arguments?}}]}, finish_reason}], usage?} ending with "data: [DONE]";
 * content goes to the caller's sink as it comes, tool calls are assembled
 * from their pieces (by index; several calls at once), usage is asked for
 * with stream_options.include_usage. A server that ignores "stream" and
 * answers one JSON chat completion is read the same way.
 *
 * The API key is sent in the Authorization header only and never appears in
 * an error message: text from the model server is scrubbed of it.
 * Thread-safe: each call has its own curl handle. */
#ifndef AB_AGENT_LLM_H
#define AB_AGENT_LLM_H

#include "base/buf.h"
#include "base/err.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Bounds on what a model may send back. */
#define AB_LLM_MAX_CALLS     64          /* tool calls in one answer */
#define AB_LLM_MAX_CALL_ARGS (1 << 20)   /* bytes of one call's arguments */
#define AB_LLM_MAX_CONTENT   (4u << 20)  /* bytes of one answer's text */
#define AB_LLM_MAX_ERROR     (64 * 1024) /* bytes of an error body kept */

typedef struct ab_llm_opts {
        const char *base_url; /* "http://host:port/v1": "/chat/completions" is appended */
        const char *api_key;  /* or NULL: no Authorization header */
        const char *model;    /* or NULL: no "model" field */
        int64_t max_tokens;   /* > 0: sent as max_tokens */
        double temperature;   /* >= 0: sent */
        int64_t deadline_ms;  /* CLOCK_MONOTONIC ms the whole request must end by */
        /* Or NULL: polled while the request runs (at least once a second);
         * true ends it (the client of the chat went away, the server stops). */
        bool (*stop)(void *ud);
        void *stop_ud;
} ab_llm_opts;

/* One tool call as assembled. */
typedef struct ab_llm_call {
        char *id;    /* the model's id ("call_..."), or a made-up one when it sent none */
        char *name;  /* the function's name */
        ab_buf args; /* the arguments' JSON text, concatenated from the pieces */
} ab_llm_call;

typedef struct ab_llm_reply {
        ab_buf content;     /* the answer's text */
        ab_llm_call *calls; /* by index, n_calls of them */
        size_t n_calls;
        char *finish_reason; /* "stop", "tool_calls", "length", ..., or NULL */
        bool has_usage;
        int64_t prompt_tokens, completion_tokens, total_tokens;
        bool done; /* "[DONE]" was seen */
        /* When the call failed: the model server's HTTP status (0: none, the
         * request failed before an answer) and whether it was cancelled. */
        long http_status;
        bool cancelled;
} ab_llm_reply;

/* Called with each piece of text as it arrives (not NUL-terminated). */
typedef void (*ab_llm_text_fn)(void *ud, const char *text, size_t n);

/* Feeds one SSE data payload (a chunk's JSON, or "[DONE]") into r, calling
 * text for content. AB_E_INVALID for a chunk that is not JSON or breaks the
 * shape; AB_E_LIMIT past the bounds above; an "error" object in the stream
 * (some servers send one mid-stream) is AB_E_UNAVAILABLE with its message.
 * Pure: for the client and the fuzz target. */
int ab_llm_feed_chunk(ab_llm_reply *r, const char *data, size_t len, ab_llm_text_fn text, void *ud,
                      ab_err **err);

/* Streams one chat completion of messages (an array of chat messages) with
 * tools (an array of function schemas, or NULL/empty: none) into *out
 * (release with ab_llm_reply_clear, also after a failure). Errors:
 * AB_E_INVALID a bad base_url; AB_E_UNAVAILABLE the server cannot be
 * reached, broke the stream, or answered an error (out->http_status and the
 * server's message: {"error":{"message"}} or the body's start);
 * AB_E_TIMEOUT past deadline_ms; AB_E_CONFLICT cancelled (out->cancelled). */
int ab_llm_chat(const ab_llm_opts *o, json_t *messages, json_t *tools, ab_llm_text_fn text,
                void *ud, ab_llm_reply *out, ab_err **err);

void ab_llm_reply_clear(ab_llm_reply *r);

/* Replaces every occurrence of secret (when non-empty) in s with
 * "[redacted]"; returns s (reallocated as needed). */
char *ab_llm_redact(char *s, const char *secret);

#endif
