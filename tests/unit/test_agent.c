/* test_agent - the agent loop's model client without a network
 * (src/agent): the SSE parser (line ends, comments, multi-line data, events
 * split anywhere, bounds), the chunk assembler (text, tool calls in pieces,
 * parallel calls by index, usage, finish_reason, an error in the stream,
 * bounds) and the key's redaction. */
#include "agent/llm.h"
#include "agent/sse.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

typedef struct seen {
        ab_buf log; /* "event=data|" per event */
        int n;
} seen;

static int on_event(void *ud, const char *event, const char *data, size_t len)
{
        seen *s = ud;
        ab_buf_printf(&s->log, "%s=%.*s|", event, (int)len, data);
        s->n++;
        return 0;
}

/* Feeds text in pieces of `piece` bytes; returns the log. */
static char *parse(const char *text, size_t piece, int *rc)
{
        seen s = {0};
        ab_sse p;
        ab_sse_init(&p, 64, 128, on_event, &s);
        *rc = 0;
        size_t n = strlen(text);
        for (size_t off = 0; off < n && *rc == 0; off += piece) {
                ab_err *e = NULL;
                *rc = ab_sse_feed(&p, text + off, n - off < piece ? n - off : piece, &e);
                ab_err_free(&e);
        }
        ab_sse_free(&p);
        return ab_buf_steal(&s.log);
}

static void test_sse(void)
{
        const char *in = ": comment\r\ndata: one\n\nevent: x\ndata:two\ndata: three\r\n\r\n"
                         "data: cr\r\rid: 5\nretry: 3\n\ndata: no end";
        for (size_t piece = 1; piece <= 7; piece++) {
                int rc;
                char *log = parse(in, piece, &rc);
                tap_ok(rc == 0 && !strcmp(log, "message=one|x=two\nthree|message=cr|"),
                       "sse in pieces of %zu: LF, CRLF and CR ends, comments, events, joined data "
                       "(%s)",
                       piece, log);
                free(log);
        }
        int rc;
        char *log = parse("data: 0123456789012345678901234567890123456789012345678901234567890"
                          "123456789\n\n",
                          5, &rc);
        tap_ok(rc == -1 && !*log, "a line over max_line is refused before any event");
        free(log);
        log = parse("data: 01234567890123456789012345678901234567890123456789\ndata: "
                    "01234567890123456789012345678901234567890123456789\ndata: "
                    "01234567890123456789012345678901234567890123456789\n\n",
                    9, &rc);
        tap_ok(rc == -1, "an event over max_event is refused");
        free(log);
}

typedef struct texts {
        ab_buf b;
} texts;

static void on_text(void *ud, const char *t, size_t n)
{
        ab_buf_add(&((texts *)ud)->b, t, n);
}

static int feed(ab_llm_reply *r, texts *t, const char *chunk)
{
        ab_err *e = NULL;
        int rc = ab_llm_feed_chunk(r, chunk, strlen(chunk), on_text, t, &e);
        if (rc < 0)
                tap_diag("feed: %s", e->msg);
        ab_err_free(&e);
        return rc;
}

static void test_chunks(void)
{
        ab_llm_reply r = {0};
        texts t = {0};
        int rc = feed(&r, &t,
                      "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                      "\"content\":\"Hel\"}}]}");
        rc |= feed(&r, &t, "{\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}");
        rc |=
            feed(&r, &t,
                 "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"b\",\"type\":"
                 "\"function\",\"function\":{\"name\":\"ls\",\"arguments\":\"\"}},{\"index\":0,"
                 "\"id\":\"a\",\"function\":{\"name\":\"bash\",\"arguments\":\"{\\\"com\"}}]}}]}");
        rc |= feed(&r, &t,
                   "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{"
                   "\"arguments\":\"{}\"}},{\"index\":0,\"function\":{\"arguments\":\"mand\\\":"
                   "1}\"}}]}}]}");
        rc |= feed(&r, &t, "{\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}");
        rc |= feed(&r, &t,
                   "{\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,"
                   "\"total_tokens\":7}}");
        rc |= feed(&r, &t, "[DONE]");
        tap_ok(rc == 0, "a stream of text, two parallel calls in pieces, usage and [DONE]");
        tap_ok(r.content.n == 5 && !strcmp(r.content.p, "Hello") && t.b.n == 5 &&
                   !strcmp(t.b.p, "Hello"),
               "the text is kept and handed on as it comes");
        tap_ok(r.n_calls == 2 && !strcmp(r.calls[0].id, "a") && !strcmp(r.calls[0].name, "bash") &&
                   !strcmp(r.calls[0].args.p, "{\"command\":1}") && !strcmp(r.calls[1].id, "b") &&
                   !strcmp(r.calls[1].name, "ls") && !strcmp(r.calls[1].args.p, "{}"),
               "the calls are assembled by index");
        tap_ok(r.finish_reason && !strcmp(r.finish_reason, "tool_calls"), "finish_reason");
        tap_ok(r.has_usage && r.prompt_tokens == 3 && r.completion_tokens == 4 &&
                   r.total_tokens == 7 && r.done,
               "usage and done");
        ab_llm_reply_clear(&r);
        ab_buf_free(&t.b);

        ab_err *e = NULL;
        const char *bad[] = {
            "not json",
            "[1]",
            "{\"choices\":{}}",
            "{\"choices\":[{\"delta\":{\"tool_calls\":{}}}]}",
            "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":64}]}}]}",
            "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":-1}]}}]}",
            "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
            "3}}]}}]}",
            "{\"error\":{\"message\":\"quota exceeded\"}}",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                ab_llm_reply x = {0};
                rc = ab_llm_feed_chunk(&x, bad[i], strlen(bad[i]), NULL, NULL, &e);
                tap_ok(rc < 0 && e && e->msg[0], "a bad chunk is an error: %s (%s)", bad[i],
                       e ? e->msg : "none");
                if (i == 7)
                        tap_ok(e && e->code == AB_E_UNAVAILABLE && strstr(e->msg, "quota exceeded"),
                               "an error in the stream carries its message");
                ab_err_free(&e);
                ab_llm_reply_clear(&x);
        }
        /* Arguments past the bound. */
        ab_llm_reply x = {0};
        _cleanup_free_ char *big = xmalloc(70000);
        memset(big, 'a', 69999);
        big[69999] = 0;
        _cleanup_free_ char *chunk = xasprintf(
            "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":"
            "\"%s\"}}]}}]}",
            big);
        rc = 0;
        for (int i = 0; i < 20 && rc == 0; i++)
                rc = ab_llm_feed_chunk(&x, chunk, strlen(chunk), NULL, NULL, &e);
        tap_ok(rc < 0 && e && e->code == AB_E_LIMIT && x.calls[0].args.n <= AB_LLM_MAX_CALL_ARGS,
               "a call's arguments stop at AB_LLM_MAX_CALL_ARGS");
        ab_err_free(&e);
        ab_llm_reply_clear(&x);
}

static void test_redact(void)
{
        char *s = ab_llm_redact(xstrdup("key sk-123 and sk-123."), "sk-123");
        TAP_IS_STR(s, "key [redacted] and [redacted].", "every copy of the key is redacted");
        free(s);
        s = ab_llm_redact(xstrdup("nothing"), "");
        TAP_IS_STR(s, "nothing", "an empty key redacts nothing");
        free(s);
}

static void test_unreachable(void)
{
        ab_llm_opts o = {.base_url = "http://127.0.0.1:1/v1",
                         .api_key = "sk-secret-xyz",
                         .deadline_ms = (int64_t)ab_now_ms() + 5000};
        json_t *msgs = json_pack("[{s:s,s:s}]", "role", "user", "content", "hi");
        ab_llm_reply r;
        ab_err *e = NULL;
        int rc = ab_llm_chat(&o, msgs, NULL, NULL, NULL, &r, &e);
        tap_ok(rc < 0 && e && e->code == AB_E_UNAVAILABLE && !strstr(e->msg, "sk-secret"),
               "an unreachable model is AB_E_UNAVAILABLE, without the key (%s)", e ? e->msg : "");
        ab_err_free(&e);
        ab_llm_reply_clear(&r);
        o.base_url = "ftp://x";
        rc = ab_llm_chat(&o, msgs, NULL, NULL, NULL, &r, &e);
        tap_ok(rc < 0 && e && e->code == AB_E_INVALID, "a base_url that is not http(s) is invalid");
        ab_err_free(&e);
        ab_llm_reply_clear(&r);
        o.base_url = "http://127.0.0.1:1/v1";
        o.deadline_ms = (int64_t)ab_now_ms() - 1;
        rc = ab_llm_chat(&o, msgs, NULL, NULL, NULL, &r, &e);
        tap_ok(rc < 0 && e && e->code == AB_E_TIMEOUT, "a passed deadline is a timeout");
        ab_err_free(&e);
        ab_llm_reply_clear(&r);
        json_decref(msgs);
}

int main(void)
{
        test_sse();
        test_chunks();
        test_redact();
        test_unreachable();
        return tap_done();
}
