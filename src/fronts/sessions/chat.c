/* chat.c - POST /api/chat/{thread_id} {"message"}: one turn of the agent
 * loop (agent/loop.h) in the thread's box, streamed as Server-Sent Events
 * (docs/api.md, "Sessions and chat"): "text", "tool_call", "tool_result",
 * "error" and a last "done" with the usage.
 *
 * The turn runs on a thread of its own as the request's caller (its API
 * key's quotas); the events go through a pipe the answer streams. The
 * client's hang-up closes the pipe's other end: the model request and the
 * loop stop at their next check (at least once a second). One turn runs
 * per thread at once (a second is 409): the turns in flight are a list
 * here, in memory. In a fleet that holds for the fleet: a chat is passed on
 * to the node of its thread's box (routes.c, kit/forward.h), so every turn
 * of a thread runs on one node. */
#include "fronts/sessions/sessions_int.h"
#include "agent/loop.h"
#include "kit/exec.h"
#include "kit/forward.h"
#include "kit/toolcall.h"
#include "skills/skills.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define MESSAGE_MAX   (256 * 1024)      /* bytes of a user's message */
#define HISTORY_MAX   400               /* earlier messages sent back to the model */
#define HISTORY_BYTES (2 * 1024 * 1024) /* ... and their JSON at most */

/* The turns running now, by app and thread. */
typedef struct running {
        char *app; /* "" for the admin */
        char *thread;
        struct running *next;
} running;

static pthread_mutex_t running_lock = PTHREAD_MUTEX_INITIALIZER;
static running *running_head;
static atomic_bool stopping;

/* Claims the thread for one turn; false when a turn runs there. */
static bool running_claim(const char *app, const char *thread)
{
        pthread_mutex_lock(&running_lock);
        for (running *p = running_head; p; p = p->next)
                if (!strcmp(p->app, app ? app : "") && !strcmp(p->thread, thread)) {
                        pthread_mutex_unlock(&running_lock);
                        return false;
                }
        running *n = xzalloc(sizeof(*n));
        n->app = xstrdup(app ? app : "");
        n->thread = xstrdup(thread);
        n->next = running_head;
        running_head = n;
        pthread_mutex_unlock(&running_lock);
        return true;
}

static void running_release(const char *app, const char *thread)
{
        pthread_mutex_lock(&running_lock);
        for (running **pp = &running_head; *pp; pp = &(*pp)->next) {
                running *p = *pp;
                if (!strcmp(p->app, app ? app : "") && !strcmp(p->thread, thread)) {
                        *pp = p->next;
                        free(p->app);
                        free(p->thread);
                        free(p);
                        break;
                }
        }
        pthread_mutex_unlock(&running_lock);
}

void sessions_quiesce(void)
{
        atomic_store(&stopping, true);
}

/* ---- the turn's job ---- */

typedef struct chat_job {
        ab_server *srv;
        kit_caller caller;
        char *app; /* the caller's app, or NULL (the admin) */
        char *thread;
        char *box;
        char *message;
        char *base_url, *api_key, *model; /* copies of the app's llm settings */
        ab_config_llm llm;
        int fd;           /* the pipe's write end */
        atomic_bool gone; /* the client hung up */
        int64_t start_ms;
} chat_job;

static void job_free(chat_job *j)
{
        if (j->fd >= 0)
                close(j->fd);
        kit_caller_clear(&j->caller);
        free(j->app);
        free(j->thread);
        free(j->box);
        free(j->message);
        free(j->base_url);
        if (j->api_key)
                explicit_bzero(j->api_key, strlen(j->api_key));
        free(j->api_key);
        free(j->model);
        free(j);
}

/* True when the answer's reader is gone: the pipe's read end is closed. */
static bool job_stop(void *ud)
{
        chat_job *j = ud;
        if (atomic_load(&j->gone) || atomic_load(&stopping))
                return true;
        struct pollfd p = {.fd = j->fd, .events = 0};
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP))) {
                atomic_store(&j->gone, true);
                return true;
        }
        return false;
}

/* Writes one event (takes data); a failed write marks the client gone. */
static void emit(chat_job *j, const char *event, json_t *data)
{
        char *txt = json_dumps(data, JSON_COMPACT | JSON_ENSURE_ASCII);
        json_decref(data);
        if (!txt || atomic_load(&j->gone)) {
                free(txt);
                return;
        }
        char *frame = xasprintf("event: %s\ndata: %s\n\n", event, txt);
        free(txt);
        size_t len = strlen(frame), off = 0;
        while (off < len) {
                ssize_t w = write(j->fd, frame + off, len - off);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0) {
                        atomic_store(&j->gone, true);
                        break;
                }
                off += (size_t)w;
        }
        free(frame);
}

static void on_text(void *ud, const char *text, size_t n)
{
        emit(ud, "text", json_pack("{s:o}", "delta", json_bytes(text, n)));
}

static void on_call(void *ud, const char *id, const char *name, json_t *args)
{
        emit(ud, "tool_call",
             json_pack("{s:s,s:s,s:O}", "id", id, "name", name, "arguments", args));
}

static void on_result(void *ud, const char *id, const char *name, const char *out, bool is_error)
{
        emit(ud, "tool_result",
             json_pack("{s:s,s:s,s:o,s:b}", "id", id, "name", name, "output",
                       json_bytes(out, strlen(out)), "is_error", is_error));
}

static int run_tool(void *ud, const char *name, json_t *args, ab_tool_result *out, ab_err **err)
{
        chat_job *j = ud;
        kit_tool_opts o = {.gone = job_stop,
                           .gone_ud = j,
                           .deadline_ms = j->start_ms + j->llm.timeout_ms,
                           .cancel_fd = j->fd};
        return kit_tool_call(j->srv, j->app, j->box, name, args, &o, out, err);
}

/* The system prompt: how the box's tools work, then the skills' names and
 * descriptions (each SKILL.md is read with read_file when the model needs it). */
static char *system_prompt(ab_server *s)
{
        _cleanup_free_ char *tools = ab_tools_prompt();
        ab_err *e = NULL;
        ab_skills sk;
        ab_skill_info *v = NULL;
        size_t n = 0;
        char *skills = NULL;
        if (ab_skills_open(s->cfg->data_dir, &sk, &e) == 0 && ab_skills_list(&sk, &v, &n, &e) == 0)
                skills = n ? ab_skills_prompt(v, n) : NULL;
        else
                ab_err_free(&e); /* no skills folder: a prompt without skills */
        ab_skills_close(&sk);
        ab_skill_infos_free(v, n);
        char *p = skills ? xasprintf("%s\n\n%s", tools, skills) : xstrdup(tools);
        free(skills);
        return p;
}

/* The history the model sees: the newest messages, at most HISTORY_MAX of
 * them and HISTORY_BYTES of JSON, never starting with tool answers whose
 * call was cut off. */
static json_t *load_history(chat_job *j, ab_err **err)
{
        _cleanup_strv_ char **v = NULL;
        size_t n = 0;
        if (ab_store_chat_history(j->srv->store, j->app, j->thread, HISTORY_MAX, &v, &n, err) < 0)
                return NULL;
        size_t first = n, bytes = 0;
        while (first > 0 && bytes + strlen(v[first - 1]) <= HISTORY_BYTES)
                bytes += strlen(v[--first]);
        json_t *a = json_array();
        for (size_t i = first; i < n; i++) {
                json_t *m = json_loads(v[i], 0, NULL);
                const char *role = json_string_value(json_object_get(m, "role"));
                if (!m || (!json_array_size(a) && role && !strcmp(role, "tool"))) {
                        json_decref(m);
                        continue;
                }
                json_array_append_new(a, m);
        }
        return a;
}

static void save_turn(chat_job *j, json_t *added)
{
        size_t n = json_array_size(added);
        if (!n)
                return;
        const char **roles = xcalloc(n, sizeof(*roles));
        char **texts = xcalloc(n, sizeof(*texts));
        for (size_t i = 0; i < n; i++) {
                json_t *m = json_array_get(added, i);
                roles[i] = json_string_value(json_object_get(m, "role"));
                texts[i] = json_dumps(m, JSON_COMPACT);
        }
        ab_err *e = NULL;
        if (ab_store_chat_append(j->srv->store, j->app, j->thread, roles,
                                 (const char *const *)texts, n, &e) < 0 &&
            e->code == AB_E_NOT_FOUND) {
                ab_err_free(&e); /* the session was deleted meanwhile: nothing to keep */
        } else if (e) {
                ab_log(AB_LOG_ERROR, "chat: the turn could not be saved", "thread", j->thread,
                       "error", e->msg, NULL);
                emit(j, "error",
                     json_pack("{s:s,s:s}", "code", ab_code_name(e->code), "message",
                               "the turn could not be saved to the history"));
                ab_err_free(&e);
        }
        for (size_t i = 0; i < n; i++)
                free(texts[i]);
        free(texts);
        free(roles);
}

static void emit_error(chat_job *j, const ab_err *e, long http_status)
{
        json_t *d = json_pack("{s:s,s:o}", "code", ab_code_name(e->code), "message",
                              json_bytes(e->msg, strlen(e->msg)));
        if (http_status)
                json_object_set_new(d, "status", json_integer(http_status));
        emit(j, "error", d);
}

/* Runs the turn and saves it; res is filled also when it fails. */
static void run_turn(chat_job *j, ab_agent_res *res)
{
        ab_err *e = NULL;
        _cleanup_free_ char *system = system_prompt(j->srv);
        json_t *tools = ab_tools_schemas();
        json_t *history = load_history(j, &e);
        if (!history) {
                emit_error(j, e, 0);
                ab_err_free(&e);
                *res = (ab_agent_res){.stop = "error"};
                json_decref(tools);
                return;
        }
        ab_agent_req q = {
            .llm =
                {
                    .base_url = j->base_url,
                    .api_key = j->api_key,
                    .model = j->model,
                    .max_tokens = j->llm.max_tokens,
                    .temperature = j->llm.temperature,
                    .deadline_ms = j->start_ms + j->llm.timeout_ms,
                    .stop = job_stop,
                    .stop_ud = j,
                },
            .max_steps = j->llm.max_steps,
            .system = system,
            .history = history,
            .message = j->message,
            .tools = tools,
            .run_tool = run_tool,
            .tool_ud = j,
            .sink = {.text = on_text, .tool_call = on_call, .tool_result = on_result, .ud = j},
        };
        if (ab_agent_run(&q, res, &e) < 0) {
                emit_error(j, e, res->http_status);
                ab_err_free(&e);
        }
        save_turn(j, res->added);
        json_decref(history);
        json_decref(tools);
}

static void *chat_thread(void *arg)
{
        chat_job *j = arg;
        ab_agent_res res = {0};
        run_turn(j, &res);
        /* Before "done": a client may send the thread's next message at once. */
        running_release(j->app, j->thread);
        emit(j, "done",
             json_pack("{s:s,s:i,s:{s:I,s:I,s:I}}", "stop", res.stop, "steps", res.steps, "usage",
                       "prompt_tokens", (json_int_t)res.prompt_tokens, "completion_tokens",
                       (json_int_t)res.completion_tokens, "total_tokens",
                       (json_int_t)res.total_tokens));
        ab_agent_res_clear(&res);
        job_free(j);
        return NULL;
}

/* ---- the route ---- */

static int parse_message(ab_req *r, char **out, ab_err **err)
{
        json_t *body;
        if (req_json(r, &body, err) < 0)
                return -1;
        static const char *const known[] = {"message", NULL};
        const char *m = NULL;
        int rc = fields_known(body, known, NULL, err);
        if (rc == 0)
                rc = field_str(body, "message", &m, err);
        if (rc == 0 && (!m || !*m))
                rc = ab_err_set(err, AB_E_INVALID, 0, "message: required (a non-empty string)");
        if (rc == 0 && strlen(m) > MESSAGE_MAX)
                rc = ab_err_set(err, AB_E_INVALID, 0, "message: longer than %d bytes", MESSAGE_MAX);
        if (rc == 0)
                *out = xstrdup(m);
        json_decref(body);
        return rc;
}

static chat_job *job_new(ab_req *r, const char *thread, char *message, const ab_config_llm *l)
{
        chat_job *j = xzalloc(sizeof(*j));
        j->srv = r->srv;
        j->fd = -1;
        j->app = r->scope ? xstrdup(r->scope) : NULL;
        j->thread = xstrdup(thread);
        j->message = message;
        j->llm = *l;
        j->base_url = xstrdup(l->base_url);
        j->api_key = l->api_key ? xstrdup(l->api_key) : NULL;
        j->model = l->model ? xstrdup(l->model) : NULL;
        j->start_ms = (int64_t)ab_now_ms();
        return j;
}

/* Starts the turn's thread and answers with its stream; takes j. */
static enum MHD_Result start(ab_req *r, chat_job *j)
{
        enum MHD_Result ret;
        ab_stream_slot *slot = req_stream_slot(r, &ret);
        if (!slot) {
                running_release(j->app, j->thread);
                job_free(j);
                return ret;
        }
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
                ab_stream_slot_release(slot);
                running_release(j->app, j->thread);
                job_free(j);
                return resp_error(r, 500, "internal", "pipe: %s", strerror(errno));
        }
        j->fd = p[1];
        if (kit_exec_spawn(r, &j->caller, chat_thread, j) < 0) {
                close(p[0]);
                ab_stream_slot_release(slot);
                running_release(j->app, j->thread);
                job_free(j);
                return resp_error(r, 503, "unavailable", "no thread for the chat");
        }
        static const char *const hdr[] = {
            "Cache-Control", "no-cache", "X-Accel-Buffering", "no", NULL, NULL};
        return resp_stream_counted(r, 200, "text/event-stream", p[0], hdr, slot);
}

enum MHD_Result sessions_chat(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (!session_check(r, id, &ret))
                return ret;
        ab_err *e = NULL;
        char *message = NULL;
        if (parse_message(r, &message, &e) < 0)
                return resp_err(r, e);
        ab_config_llm l;
        ab_config_llm_for(r->srv->cfg, r->scope, &l);
        if (!l.base_url) {
                free(message);
                return resp_error(r, 503, "unavailable",
                                  "no model is configured: set llm.base_url in the config file");
        }
        if (!running_claim(r->scope, id)) {
                free(message);
                return resp_error(r, 409, "conflict",
                                  "a chat is running in thread %s: wait for its done event", id);
        }
        chat_job *j = job_new(r, id, message, &l);
        char box[17];
        _cleanup_free_ char *node = NULL;
        if (session_box(r->srv, r->scope, id, box, &node, &e) < 0 || node) {
                running_release(j->app, j->thread);
                job_free(j);
                if (node && !r->forwarded) /* its turn runs there, one at a time */
                        return kit_forward_buffered(r, node);
                return node ? session_elsewhere(r, id, node) : resp_err(r, e);
        }
        j->box = xstrdup(box);
        return start(r, j);
}
