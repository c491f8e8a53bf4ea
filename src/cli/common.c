/* Error and usage messages every CLI verb prints the same way, and the
 * backends every verb opens. */
#include "cli/cli.h"
#include "base/log.h"

void cli_error(const ab_err *e)
{
        fprintf(stderr, "agentbox: %s\n", e ? e->msg : "unknown error");
        if (!e)
                return;
        if (e->code == AB_E_NOT_FOUND && strstr(e->msg, "no box"))
                fprintf(stderr, "hint: `agentbox ls` lists the boxes\n");
}

int cli_fail(ab_err **e)
{
        cli_error(*e);
        ab_err_free(e);
        return EXIT_AGENTBOX;
}

int cli_bad_option(ab_err **e, const char *opt)
{
        ab_err_wrap(e, "%s", opt);
        cli_error(*e);
        ab_err_free(e);
        return EXIT_USAGE;
}

int cli_usage_error(const char *fmt, const char *arg)
{
        fprintf(stderr, "agentbox: ");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        fprintf(stderr, fmt, arg ? arg : "");
#pragma GCC diagnostic pop
        fprintf(stderr, "\nRun 'agentbox --help' for usage.\n");
        return EXIT_USAGE;
}

/* The mock backend with the config's expectations and calls log. */
static int open_mock(const ab_config *cfg, const char *data_dir, ab_backend **out, ab_err **err)
{
        _cleanup_free_ char *log =
            cfg->mock_log && *cfg->mock_log ? NULL : xasprintf("%s/mock-calls.jsonl", data_dir);
        _cleanup_free_ char *state = xasprintf("%s/mock-state.json", data_dir);
        ab_mock_opts mo = {.expect_path = cfg->mock_expect,
                           .log_path = log ? log : cfg->mock_log,
                           .state_path = state};
        if (ab_mock_open(&mo, out, err) < 0)
                return ab_err_wrap(err, "the mock backend");
        return 0;
}

int cli_backend_open(const ab_config *cfg, const ab_native_opts *no, ab_backend **out, ab_err **err)
{
        /* A mock-only server needs no kernel features: native is not opened. */
        if (cfg->backend && strcmp(cfg->backend, "mock") == 0)
                return open_mock(cfg, no->data_dir, out, err);
        bool docker = (cfg->backend && strcmp(cfg->backend, "docker") == 0) || cfg->docker_host;
        bool mock = cfg->mock_expect && *cfg->mock_expect;
        ab_backend *v[4] = {NULL, NULL, NULL, NULL};
        size_t n = 0;
        bool k8s_default = cfg->backend && strcmp(cfg->backend, "kubernetes") == 0;
        ab_err *ne = NULL;
        /* Docker boxes bind DATA/skills as they are made: it is mounted first. */
        ab_native_opts nopts = *no;
        nopts.lazy_skills = no->lazy_skills && !docker;
        if (ab_native_open(&nopts, &v[n], &ne) == 0) {
                n++;
        } else if (k8s_default && !docker && !mock) {
                /* A server in a pod may lack what native boxes need (root,
                 * cgroups, loop devices): its boxes are the cluster's anyway. */
                ab_log(AB_LOG_WARN, "native boxes unavailable; kubernetes only", "error", ne->msg,
                       NULL);
                ab_err_free(&ne);
        } else {
                if (err && !*err)
                        *err = ne;
                else
                        ab_err_free(&ne);
                return -1;
        }
        if (docker) {
                _cleanup_free_ char *skills = xasprintf("%s/skills", no->data_dir);
                ab_docker_opts d = {.host = cfg->docker_host,
                                    .data_dir = no->data_dir,
                                    .init_path = no->init_path,
                                    .runtime = cfg->docker_runtime,
                                    .default_image = cfg->docker_image,
                                    .skills_dir = skills};
                if (ab_docker_open(&d, &v[n], err) < 0) {
                        ab_err_wrap(err, "the Docker backend");
                        goto fail;
                }
                n++;
        }
        if (mock) {
                if (open_mock(cfg, no->data_dir, &v[n], err) < 0)
                        goto fail;
                n++;
        }
        if ((cfg->backend && strcmp(cfg->backend, "kubernetes") == 0) || cfg->kubernetes) {
                ab_k8s_opts ko = {.settings_json = cfg->kubernetes, .data_dir = no->data_dir};
                if (ab_k8s_open(&ko, &v[n], err) < 0)
                        goto fail;
                n++;
        }
        if (n == 1) {
                *out = v[0];
                return 0;
        }
        return ab_multi_open(v, n, cfg->backend ? cfg->backend : "native", out, err);
fail:
        for (size_t i = 0; i < n; i++)
                v[i]->ops->free(v[i]);
        return -1;
}

int cli_backend_open_env(const char *data, bool quick, ab_backend **out, ab_err **err)
{
        ab_config cfg;
        ab_config_default(&cfg);
        int rc = ab_config_load_env(&cfg, err);
        if (rc == 0 && (rc = ab_config_validate(&cfg, err)) == 0) {
                ab_native_opts no = {.data_dir = data && *data ? data : "./data",
                                     .init_path = cfg.init_path,
                                     .no_sweeps = quick,
                                     .lazy_skills = true,
                                     .lazy_init = quick};
                rc = cli_backend_open(&cfg, &no, out, err);
        }
        ab_config_release(&cfg);
        return rc;
}
