/* fuzz_sse - libFuzzer target for what a model server sends the agent loop
 * (src/agent): the Server-Sent Events parser (agent/sse.h) fed in pieces
 * whose sizes come from the input, and each event's data through
 * ab_llm_feed_chunk (agent/llm.h), which assembles text and tool calls.
 * Besides memory errors it checks their promises: small bounds are never
 * passed (a longer line or event is AB_E_LIMIT with a message), the reply
 * stays within AB_LLM_MAX_CALLS calls and the content and argument bounds,
 * and a failure carries a message. Build and run with scripts/fuzz.sh. */
#include "agent/llm.h"
#include "agent/sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

#define LINE_MAX_T  4096
#define EVENT_MAX_T 8192

typedef struct ctx {
        ab_llm_reply reply;
        size_t text_seen;
        bool failed;
} ctx;

static void on_text(void *ud, const char *t, size_t n)
{
        ctx *c = ud;
        check(n > 0);
        c->text_seen += n;
}

static int on_event(void *ud, const char *event, const char *d, size_t len)
{
        ctx *c = ud;
        check(event && event[0]);
        check(len <= EVENT_MAX_T);
        check(strlen(d) <= len); /* NUL-terminated (data may hold a NUL) */
        if (c->failed)
                return 0;
        ab_err *e = NULL;
        if (ab_llm_feed_chunk(&c->reply, d, len, on_text, c, &e) < 0) {
                check(e && e->msg[0]);
                ab_err_free(&e);
                c->failed = true;
        }
        check(!e);
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        size_t piece = (size_t)data[0] % 17 + 1;
        data++;
        size--;
        ctx c = {0};
        ab_sse p;
        ab_sse_init(&p, LINE_MAX_T, EVENT_MAX_T, on_event, &c);
        for (size_t off = 0; off < size; off += piece) {
                size_t n = size - off < piece ? size - off : piece;
                ab_err *e = NULL;
                int rc = ab_sse_feed(&p, (const char *)data + off, n, &e);
                if (rc < 0) {
                        check(e && e->code == AB_E_LIMIT && e->msg[0]);
                        ab_err_free(&e);
                        break;
                }
                check(rc == 0 && !e);
        }
        ab_sse_free(&p);
        check(c.reply.n_calls <= AB_LLM_MAX_CALLS);
        check(c.reply.content.n == c.text_seen);
        check(c.reply.content.n <= AB_LLM_MAX_CONTENT);
        for (size_t i = 0; i < c.reply.n_calls; i++)
                check(c.reply.calls[i].args.n <= AB_LLM_MAX_CALL_ARGS);
        ab_llm_reply_clear(&c.reply);
        return 0;
}
