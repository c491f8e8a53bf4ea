/* llm.c - the chat-completions client (llm.h): the request, the stream's
 * chunks assembled into a reply, error bodies, the deadline and cancel. */
#include "agent/llm.h"
#include "agent/sse.h"
#include "base/id.h"
#include "base/util.h"

#include <curl/curl.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define CALL_NAME_MAX 256
#define CALL_ID_MAX   256

void ab_llm_reply_clear(ab_llm_reply *r)
{
        ab_buf_free(&r->content);
        for (size_t i = 0; i < r->n_calls; i++) {
                free(r->calls[i].id);
                free(r->calls[i].name);
                ab_buf_free(&r->calls[i].args);
        }
        free(r->calls);
        free(r->finish_reason);
        *r = (ab_llm_reply){0};
}

char *ab_llm_redact(char *s, const char *secret)
{
        if (!s || !secret || !*secret)
                return s;
        size_t k = strlen(secret);
        if (!strstr(s, secret))
                return s;
        ab_buf b = {0};
        const char *p = s, *hit;
        while ((hit = strstr(p, secret))) {
                ab_buf_add(&b, p, (size_t)(hit - p));
                ab_buf_puts(&b, "[redacted]");
                p = hit + k;
        }
        ab_buf_puts(&b, p);
        free(s);
        return ab_buf_steal(&b);
}

/* ---- chunks ---- */

static int chunk_error(json_t *e, ab_err **err)
{
        json_t *m = json_is_object(e) ? json_object_get(e, "message") : e;
        return ab_err_set(err, AB_E_UNAVAILABLE, 0, "the model failed: %s",
                          json_is_string(m) ? json_string_value(m) : "an error in the stream");
}

static int add_call_piece(ab_llm_reply *r, json_t *tc, size_t pos, ab_err **err)
{
        if (!json_is_object(tc))
                return ab_err_set(err, AB_E_INVALID, 0, "a tool call piece is not an object");
        json_t *ji = json_object_get(tc, "index");
        json_int_t idx = json_is_integer(ji) ? json_integer_value(ji) : (json_int_t)pos;
        if (idx < 0 || idx >= AB_LLM_MAX_CALLS)
                return ab_err_set(err, AB_E_LIMIT, 0, "tool call index %lld is out of 0..%d",
                                  (long long)idx, AB_LLM_MAX_CALLS - 1);
        if ((size_t)idx >= r->n_calls) {
                r->calls = xrealloc(r->calls, ((size_t)idx + 1) * sizeof(*r->calls));
                memset(r->calls + r->n_calls, 0,
                       ((size_t)idx + 1 - r->n_calls) * sizeof(*r->calls));
                r->n_calls = (size_t)idx + 1;
        }
        ab_llm_call *c = &r->calls[idx];
        const char *id = json_string_value(json_object_get(tc, "id"));
        if (id && *id) {
                if (strlen(id) > CALL_ID_MAX)
                        return ab_err_set(err, AB_E_LIMIT, 0, "a tool call id is too long");
                free(c->id);
                c->id = xstrdup(id);
        }
        json_t *fn = json_object_get(tc, "function");
        if (!fn)
                return 0;
        if (!json_is_object(fn))
                return ab_err_set(err, AB_E_INVALID, 0, "a tool call's function is not an object");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (name && *name) { /* whole in one piece; a repeat replaces it, as OpenAI's client does */
                if (strlen(name) > CALL_NAME_MAX)
                        return ab_err_set(err, AB_E_LIMIT, 0, "a tool name is too long");
                free(c->name);
                c->name = xstrdup(name);
        }
        json_t *a = json_object_get(fn, "arguments");
        if (json_is_string(a)) {
                size_t n = json_string_length(a);
                if (c->args.n + n > AB_LLM_MAX_CALL_ARGS)
                        return ab_err_set(err, AB_E_LIMIT, 0,
                                          "a tool call's arguments are over %d bytes",
                                          AB_LLM_MAX_CALL_ARGS);
                ab_buf_add(&c->args, json_string_value(a), n);
        } else if (a && !json_is_null(a)) {
                return ab_err_set(err, AB_E_INVALID, 0, "a tool call's arguments are not a string");
        }
        return 0;
}

static int add_delta(ab_llm_reply *r, json_t *delta, ab_llm_text_fn text, void *ud, ab_err **err)
{
        json_t *content = json_object_get(delta, "content");
        if (json_is_string(content) && json_string_length(content)) {
                size_t n = json_string_length(content);
                if (r->content.n + n > AB_LLM_MAX_CONTENT)
                        return ab_err_set(err, AB_E_LIMIT, 0, "the model's answer is over %u bytes",
                                          AB_LLM_MAX_CONTENT);
                ab_buf_add(&r->content, json_string_value(content), n);
                if (text)
                        text(ud, json_string_value(content), n);
        }
        json_t *calls = json_object_get(delta, "tool_calls");
        if (calls && !json_is_null(calls)) {
                if (!json_is_array(calls))
                        return ab_err_set(err, AB_E_INVALID, 0, "tool_calls is not an array");
                size_t i;
                json_t *tc;
                json_array_foreach(calls, i, tc) if (add_call_piece(r, tc, i, err) < 0) return -1;
        }
        return 0;
}

static void read_usage(ab_llm_reply *r, json_t *u)
{
        if (!json_is_object(u))
                return;
        r->has_usage = true;
        r->prompt_tokens = json_integer_value(json_object_get(u, "prompt_tokens"));
        r->completion_tokens = json_integer_value(json_object_get(u, "completion_tokens"));
        r->total_tokens = json_integer_value(json_object_get(u, "total_tokens"));
        if (!r->total_tokens)
                r->total_tokens = r->prompt_tokens + r->completion_tokens;
}

int ab_llm_feed_chunk(ab_llm_reply *r, const char *data, size_t len, ab_llm_text_fn text, void *ud,
                      ab_err **err)
{
        if (len == 6 && !memcmp(data, "[DONE]", 6)) {
                r->done = true;
                return 0;
        }
        json_error_t je;
        json_t *j = json_loadb(data, len, 0, &je);
        if (!json_is_object(j)) {
                json_decref(j);
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "the model sent a chunk that is not a JSON object");
        }
        int rc = 0;
        json_t *e = json_object_get(j, "error");
        if (e && !json_is_null(e)) {
                rc = chunk_error(e, err);
                goto out;
        }
        read_usage(r, json_object_get(j, "usage"));
        json_t *choices = json_object_get(j, "choices");
        if (choices && !json_is_array(choices)) {
                rc = ab_err_set(err, AB_E_INVALID, 0, "the chunk's choices is not an array");
                goto out;
        }
        size_t i;
        json_t *ch;
        json_array_foreach(choices, i, ch)
        {
                if (!json_is_object(ch))
                        continue;
                json_t *idx = json_object_get(ch, "index");
                if (json_is_integer(idx) && json_integer_value(idx) != 0)
                        continue; /* n > 1 is never asked for: only the first choice counts */
                json_t *delta = json_object_get(ch, "delta");
                if (json_is_object(delta) && (rc = add_delta(r, delta, text, ud, err)) < 0)
                        goto out;
                const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
                if (fr && strlen(fr) < 64) {
                        free(r->finish_reason);
                        r->finish_reason = xstrdup(fr);
                }
        }
out:
        json_decref(j);
        return rc;
}

/* ---- the request ---- */

typedef struct xfer {
        const ab_llm_opts *o;
        ab_llm_reply *r;
        ab_llm_text_fn text;
        void *ud;
        CURL *curl;
        ab_sse sse;
        bool streaming; /* a 2xx answer: the body is SSE */
        bool whole;     /* a 2xx answer in JSON: a server that does not stream */
        bool checked;   /* the status was looked at */
        ab_buf errbody; /* the body of an error answer (bounded) */
        ab_err *err;    /* what stopped the transfer from inside a callback */
} xfer;

static int on_event(void *ud, const char *event, const char *data, size_t len)
{
        xfer *x = ud;
        if (x->r->done)
                return 0;
        return ab_llm_feed_chunk(x->r, data, len, x->text, x->ud, &x->err) < 0 ? -1 : 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
        xfer *x = ud;
        size_t len = size * n;
        if (!x->checked) {
                long code = 0;
                curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code);
                x->r->http_status = code;
                char *ct = NULL;
                curl_easy_getinfo(x->curl, CURLINFO_CONTENT_TYPE, &ct);
                bool ok = code >= 200 && code < 300;
                x->whole = ok && ct && !strncasecmp(ct, "application/json", 16);
                x->streaming = ok && !x->whole;
                x->checked = true;
        }
        if (x->whole) { /* kept whole, up to the content's bound */
                if (x->errbody.n + len > AB_LLM_MAX_CONTENT + AB_LLM_MAX_ERROR) {
                        ab_err_set(&x->err, AB_E_LIMIT, 0, "the model's answer is too long");
                        return 0;
                }
                ab_buf_add(&x->errbody, p, len);
                return len;
        }
        if (!x->streaming) {
                if (x->errbody.n < AB_LLM_MAX_ERROR)
                        ab_buf_add(&x->errbody, p,
                                   len < AB_LLM_MAX_ERROR - x->errbody.n
                                       ? len
                                       : AB_LLM_MAX_ERROR - x->errbody.n);
                return len;
        }
        if (ab_sse_feed(&x->sse, p, len, &x->err) != 0)
                return 0; /* ends the transfer: CURLE_WRITE_ERROR */
        return len;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
        xfer *x = ud;
        (void)dt, (void)dn, (void)ut, (void)un;
        if (x->o->stop && x->o->stop(x->o->stop_ud)) {
                x->r->cancelled = true;
                return 1;
        }
        return 0;
}

/* The request's body. */
static char *request_body(const ab_llm_opts *o, json_t *messages, json_t *tools)
{
        json_t *b = json_pack("{s:O,s:b,s:{s:b}}", "messages", messages, "stream", 1,
                              "stream_options", "include_usage", 1);
        if (o->model)
                json_object_set_new(b, "model", json_string(o->model));
        if (json_array_size(tools))
                json_object_set(b, "tools", tools);
        if (o->max_tokens > 0)
                json_object_set_new(b, "max_tokens", json_integer(o->max_tokens));
        if (o->temperature >= 0)
                json_object_set_new(b, "temperature", json_real(o->temperature));
        char *s = json_dumps(b, JSON_COMPACT);
        json_decref(b);
        return s;
}

/* A chat completion answered whole ({"choices":[{"message", "finish_reason"}],
 * "usage"}) read as if it had been one chunk of a stream. */
static int feed_whole(xfer *x, ab_err **err)
{
        json_error_t je;
        json_t *j = json_loadb(x->errbody.p ? x->errbody.p : "", x->errbody.n, 0, &je);
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
        json_t *msg = json_object_get(ch, "message");
        if (!json_is_object(msg)) {
                json_decref(j);
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "the model answered JSON that is not a chat completion");
        }
        json_t *fr = json_object_get(ch, "finish_reason");
        json_t *chunk = json_pack("{s:[{s:i,s:O,s:O}]}", "choices", "index", 0, "delta", msg,
                                  "finish_reason", fr ? fr : json_null());
        json_t *u = json_object_get(j, "usage");
        if (u)
                json_object_set(chunk, "usage", u);
        char *txt = json_dumps(chunk, JSON_COMPACT);
        int rc = ab_llm_feed_chunk(x->r, txt, strlen(txt), x->text, x->ud, err);
        free(txt);
        json_decref(chunk);
        json_decref(j);
        x->r->done = rc == 0;
        return rc;
}

/* The message of an error answer: {"error":{"message"}} (OpenAI and most
 * others), {"error":"..."} or {"message":"..."}, else the body's start. */
static char *error_message(const ab_buf *body)
{
        json_error_t je;
        json_t *j = body->n ? json_loadb(body->p, body->n, 0, &je) : NULL;
        const char *m = NULL;
        if (json_is_object(j)) {
                json_t *e = json_object_get(j, "error");
                m = json_is_object(e)   ? json_string_value(json_object_get(e, "message"))
                    : json_is_string(e) ? json_string_value(e)
                                        : json_string_value(json_object_get(j, "message"));
        }
        char *out;
        if (m)
                out = xstrdup(m);
        else if (body->n)
                out = xasprintf("%.*s", body->n > 500 ? 500 : (int)body->n, body->p);
        else
                out = xstrdup("(no body)");
        json_decref(j);
        return out;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
        /* Never cleaned up: other threads may call a model at any time. */
        curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* Sockets to the model must not leak into the boxes the server starts
 * meanwhile (a fork before their exec): a box's process would hold the
 * connection open after a cancel, and the model would never see it end. */
static curl_socket_t open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
        int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
        return fd < 0 ? CURL_SOCKET_BAD : fd;
}

static bool set_options(CURL *c, const char *url, const char *body, struct curl_slist *h,
                        long timeout_ms, xfer *x, char *errbuf)
{
        bool ok = curl_easy_setopt(c, CURLOPT_URL, url) == CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500
        ok = ok && curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK;
#else
        ok = ok &&
             curl_easy_setopt(c, CURLOPT_PROTOCOLS, CURLPROTO_HTTP | CURLPROTO_HTTPS) == CURLE_OK;
#endif
        ok = ok && curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_POSTFIELDS, body) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_HTTPHEADER, h) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_USERAGENT, "agentbox/" AGENTBOX_VERSION) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_WRITEDATA, x) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_XFERINFODATA, x) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf) == CURLE_OK;
        ok = ok && curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket) == CURLE_OK;
        return ok;
}

static struct curl_slist *headers(const char *api_key)
{
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        h = curl_slist_append(h, "Accept: text/event-stream");
        h = curl_slist_append(h, "Expect:");
        if (api_key && *api_key) {
                char *a = xasprintf("Authorization: Bearer %s", api_key);
                h = curl_slist_append(h, a);
                explicit_bzero(a, strlen(a));
                free(a);
        }
        if (!h)
                abort();
        return h;
}

/* The error of a finished transfer, if any. */
static int transfer_result(xfer *x, CURLcode rc, const char *errbuf, ab_err **err)
{
        const ab_llm_opts *o = x->o;
        if (x->r->cancelled)
                return ab_err_set(err, AB_E_CONFLICT, 0, "the model request was cancelled");
        if (x->err) { /* the stream broke a rule */
                *err = x->err;
                x->err = NULL;
                (*err)->msg = ab_llm_redact((*err)->msg, o->api_key);
                return -1;
        }
        if (rc == CURLE_OPERATION_TIMEDOUT)
                return ab_err_set(err, AB_E_TIMEOUT, 0, "the model did not finish in time");
        if (rc != CURLE_OK) {
                _cleanup_free_ char *m =
                    ab_llm_redact(xstrdup(*errbuf ? errbuf : curl_easy_strerror(rc)), o->api_key);
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "the model cannot be reached: %s", m);
        }
        if (x->whole) {
                if (feed_whole(x, err) < 0) {
                        (*err)->msg = ab_llm_redact((*err)->msg, o->api_key);
                        return -1;
                }
                return 0;
        }
        if (!x->streaming) {
                _cleanup_free_ char *m = ab_llm_redact(error_message(&x->errbody), o->api_key);
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "the model answered HTTP %ld: %s",
                                  x->r->http_status, m);
        }
        if (!x->r->done && !x->r->finish_reason)
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "the model's stream ended early");
        return 0;
}

int ab_llm_chat(const ab_llm_opts *o, json_t *messages, json_t *tools, ab_llm_text_fn text,
                void *ud, ab_llm_reply *out, ab_err **err)
{
        *out = (ab_llm_reply){0};
        if (!o->base_url ||
            (strncmp(o->base_url, "http://", 7) && strncmp(o->base_url, "https://", 8)))
                return ab_err_set(err, AB_E_INVALID, 0, "llm.base_url is not an http(s) URL");
        int64_t left = o->deadline_ms - (int64_t)ab_now_ms();
        if (left <= 0)
                return ab_err_set(err, AB_E_TIMEOUT, 0, "the message's deadline has passed");
        pthread_once(&curl_once, curl_init);
        if (curl_init_rc != CURLE_OK)
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl: %s",
                                  curl_easy_strerror(curl_init_rc));
        size_t bl = strlen(o->base_url);
        _cleanup_free_ char *url =
            xasprintf("%.*s/chat/completions",
                      (int)(bl && o->base_url[bl - 1] == '/' ? bl - 1 : bl), o->base_url);
        _cleanup_free_ char *body = request_body(o, messages, tools);
        struct curl_slist *h = headers(o->api_key);
        CURL *c = curl_easy_init();
        if (!c) {
                curl_slist_free_all(h);
                return ab_err_set(err, AB_E_INTERNAL, 0, "libcurl: no handle");
        }
        xfer x = {.o = o, .r = out, .text = text, .ud = ud, .curl = c};
        ab_sse_init(&x.sse, 0, 0, on_event, &x);
        char errbuf[CURL_ERROR_SIZE] = "";
        int rc;
        if (!set_options(c, url, body, h, (long)left, &x, errbuf)) {
                rc = ab_err_set(err, AB_E_INTERNAL, 0, "libcurl: cannot set the request's options");
        } else {
                CURLcode cr = curl_easy_perform(c);
                rc = transfer_result(&x, cr, errbuf, err);
        }
        curl_easy_cleanup(c);
        curl_slist_free_all(h);
        ab_sse_free(&x.sse);
        ab_buf_free(&x.errbody);
        ab_err_free(&x.err);
        if (rc == 0)
                for (size_t i = 0; i < out->n_calls; i++)
                        if (!out->calls[i].id) {
                                char id[40];
                                ab_random_hex(id, sizeof(id), "call_", 12);
                                out->calls[i].id = xstrdup(id);
                        }
        return rc;
}
