/* parse.h - the request-body parsers of the routes, apart from what the
 * routes then do, so that each can be tested and fuzzed on its own
 * (tests/fuzz/fuzz_bodies.c). Each reads a JSON object (the body, already
 * parsed by req_json) into a typed request or fails with AB_E_INVALID naming
 * the field; none has a side effect. parse_acquire (POST /v1/sandboxes) is
 * in server.h. */
#ifndef AB_PARSE_H
#define AB_PARSE_H

#include "rest/rest.h"
#include "runners/runner.h"

/* An exec request (routes_box.c): command or argv, env, cwd, stdin, timeout. */
typedef struct exec_job exec_job;
/* POST /v1/sandboxes/{id}/exec: the exec fields of body into a new job
 * (free it with exec_job_free). Unknown fields are the caller's check. */
int parse_exec(json_t *body, exec_job **out, ab_err **err);
void exec_job_free(exec_job *j);
/* POST /v1/exec: body split into the acquire fields (*acq, a new object
 * that *q points into: release it after the acquire) and the exec fields
 * (*j), both parsed. */
int parse_exec_any(const ab_server *s, json_t *body, json_t **acq, ab_acquire_req *q,
                   ab_limits *lim, exec_job **j, ab_err **err);
/* POST /v1/keys {app_id, name?, quotas?, format?}: pointers into body;
 * *e2b_form when format is "e2b" (a secret in E2B's form), false for
 * "agentbox" or none; another format is AB_E_INVALID. */
int parse_key_create(json_t *body, const char **app, const char **name, ab_quota *quotas,
                     bool *e2b_form, ab_err **err);
/* POST /v1/sandboxes/{id}/tools/{name}: the tool's arguments, "args" or else
 * the whole body (*args is borrowed from body). */
int parse_box_tool(json_t *body, json_t **args, ab_err **err);
/* POST /v1/tools/{name}: the acquire fields (*acq, checked) and the tool's
 * arguments (*args: "args", or every other field); both new references. */
int parse_tool(json_t *body, json_t **acq, json_t **args, ab_err **err);
/* POST /sandbox/js|python {code, variables?, limits?}: strings and objects
 * stay borrowed from body. The messages are FastGPT's ("Invalid request: "). */
int run_req_parse(json_t *body, ab_run_req *q, ab_err **err);

#endif
