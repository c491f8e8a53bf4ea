/* fuzz_bodies - libFuzzer target for the JSON bodies of the routes: the
 * parse step of each route (rest/parse.h, parse_acquire in kit/server.h),
 * after req_json, on the input read as the body. The first byte picks the
 * route; the rest is the body. Agent tool calls go on into the tool itself
 * (ab_tool_run: its argument parsing and checks) against a fake box whose
 * init cannot be reached and whose exec prints a fixed text, so nothing runs
 * anywhere. Besides memory errors it checks the parsers' promises (a failure
 * carries a message, an AB_E_INVALID or AB_E_UNSUPPORTED error; what a
 * success hands out is consistent). Build and run with scripts/fuzz.sh. */
#include "rest/parse.h"
#include "net/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

static void failed(ab_err **e)
{
        check(*e && (*e)->msg && *(*e)->msg &&
              ((*e)->code == AB_E_INVALID || (*e)->code == AB_E_UNSUPPORTED));
        ab_err_free(e);
}

static int fake_connect(void *ud, ab_err **err)
{
        return ab_err_set(err, AB_E_UNAVAILABLE, 0, "no init in the fuzzer");
}

static int fake_exec(void *ud, const abc_exec_req *req, abc_output_fn out, void *out_ud,
                     abc_exec_res *res, ab_err **err)
{
        static const char text[] = "line one\nline two \xff\xfe\n";
        memset(res, 0, sizeof(*res));
        for (int i = 0; i < 3; i++)
                if (out(out_ud, 1 + (i & 1), text, sizeof(text) - 1) < 0)
                        break;
        res->exit_code = 1;
        res->stdout_bytes = res->stderr_bytes = sizeof(text) - 1;
        return 0;
}

static const char *const tool_names[] = {"bash",      "ls",         "glob",        "grep",
                                         "read_file", "write_file", "str_replace", "sandbox_shell",
                                         "nope"};

static void run_tool(uint8_t sel, json_t *args)
{
        ab_tool_box box = {.box_id = "fz", .connect = fake_connect, .exec = fake_exec};
        ab_tool_limits lim = {.bash_output_max = 64, .read_file_max = 64, .shell_max_lines = 3};
        ab_tool_result res = {0};
        ab_err *e = NULL;
        const char *name = tool_names[(sel >> 4) % AB_ARRAY_LEN(tool_names)];
        if (ab_tool_run(&box, &lim, name, args, &res, &e) == 0) {
                check(res.output != NULL);
                ab_tool_result_clear(&res);
        } else {
                check(e && e->msg);
                ab_err_free(&e);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        static ab_config cfg;
        static ab_server srv;
        if (!srv.cfg) {
                ab_config_default(&cfg);
                srv.cfg = &cfg;
        }
        uint8_t sel = data[0];
        ab_req r = {.body = (char *)data + 1, .body_len = size - 1};
        json_t *body = NULL;
        ab_err *e = NULL;
        if (req_json(&r, &body, &e) < 0) {
                check(e && e->code == AB_E_INVALID);
                ab_err_free(&e);
                return 0;
        }
        check(json_is_object(body));
        ab_acquire_req q;
        ab_limits lim;
        switch (sel % 8) {
        case 0: /* POST /v1/sandboxes */
                if (fields_known(body, acquire_fields, NULL, &e) < 0 ||
                    parse_acquire(&srv, body, &q, &lim, &e) < 0)
                        failed(&e);
                else if (q.limits) {
                        check(q.limits == &lim);
                        if (ab_limits_validate(&lim, &e) < 0) /* the manager's next check */
                                failed(&e);
                }
                break;
        case 1: { /* POST /v1/sandboxes/{id}/exec */
                exec_job *j = NULL;
                if (parse_exec(body, &j, &e) < 0)
                        failed(&e);
                else
                        exec_job_free(j);
                break;
        }
        case 2: { /* POST /v1/exec */
                exec_job *j = NULL;
                json_t *acq = NULL;
                if (parse_exec_any(&srv, body, &acq, &q, &lim, &j, &e) < 0) {
                        failed(&e);
                        check(!j);
                } else {
                        check(j && json_is_object(acq));
                        exec_job_free(j);
                        json_decref(acq);
                }
                break;
        }
        case 3: { /* POST /v1/keys */
                const char *app, *name;
                ab_quota quotas;
                bool e2b_form;
                if (parse_key_create(body, &app, &name, &quotas, &e2b_form, &e) < 0) {
                        failed(&e);
                        break;
                }
                check(app && *app);
                /* what a key's quotas (max_limits, allowed_network too) hold
                 * is valid and survives the store's JSON form */
                check(ab_quota_validate(&quotas, true, NULL) == 0);
                json_t *qj = ab_quota_json(&quotas, true);
                ab_quota back;
                check(ab_quota_from_json(qj, &back, NULL) == 0);
                json_decref(qj);
                check(back.max_boxes == quotas.max_boxes &&
                      back.max_limits.memory_mib == quotas.max_limits.memory_mib &&
                      back.max_limits.pids == quotas.max_limits.pids &&
                      back.max_limits.disk_mib == quotas.max_limits.disk_mib &&
                      back.allowed_network == quotas.allowed_network);
                break;
        }
        case 4: { /* POST /v1/sandboxes/{id}/tools/{name} */
                json_t *args;
                if (parse_box_tool(body, &args, &e) < 0)
                        failed(&e);
                else
                        run_tool(sel, args);
                break;
        }
        case 5: { /* POST /v1/tools/{name} */
                json_t *acq, *args;
                if (parse_tool(body, &acq, &args, &e) < 0) {
                        failed(&e);
                        break;
                }
                if (parse_acquire(&srv, acq, &q, &lim, &e) < 0)
                        failed(&e);
                else
                        run_tool(sel, args);
                json_decref(acq);
                json_decref(args);
                break;
        }
        case 6: { /* POST /sandbox/js|python */
                ab_run_req rq = {0};
                if (run_req_parse(body, &rq, &e) < 0)
                        failed(&e);
                else
                        check(rq.timeout_ms >= 0 && rq.memory_mb >= 0 && rq.disk_mb >= 0);
                break;
        }
        case 7: { /* PUT /v1/sandboxes/{id}/network, and "network" at create */
                ab_netpol pol;
                if (ab_netpol_parse(body, &pol, &e) < 0) {
                        check(e && e->msg);
                        ab_err_free(&e);
                } else {
                        ab_netpol_clear(&pol);
                }
                break;
        }
        }
        json_decref(body);
        return 0;
}
