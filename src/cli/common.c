/* Error and usage messages every CLI verb prints the same way, and the
 * backends every verb opens. */
#include "cli/cli.h"

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

int cli_backend_open(const ab_config *cfg, const ab_native_opts *no, ab_backend **out, ab_err **err)
{
        bool docker = (cfg->backend && strcmp(cfg->backend, "docker") == 0) || cfg->docker_host;
        ab_backend *v[2] = {NULL, NULL};
        if (ab_native_open(no, &v[0], err) < 0)
                return -1;
        if (!docker) {
                *out = v[0];
                return 0;
        }
        _cleanup_free_ char *skills = xasprintf("%s/skills", no->data_dir);
        ab_docker_opts d = {.host = cfg->docker_host,
                            .data_dir = no->data_dir,
                            .init_path = no->init_path,
                            .runtime = cfg->docker_runtime,
                            .default_image = cfg->docker_image,
                            .skills_dir = skills};
        if (ab_docker_open(&d, &v[1], err) < 0) {
                v[0]->ops->free(v[0]);
                return ab_err_wrap(err, "the Docker backend");
        }
        return ab_multi_open(v, 2, cfg->backend ? cfg->backend : "native", out, err);
}

int cli_backend_open_env(const char *data, ab_backend **out, ab_err **err)
{
        ab_config cfg;
        ab_config_default(&cfg);
        int rc = ab_config_load_env(&cfg, err);
        if (rc == 0 && (rc = ab_config_validate(&cfg, err)) == 0) {
                ab_native_opts no = {.data_dir = data && *data ? data : "./data",
                                     .init_path = cfg.init_path};
                rc = cli_backend_open(&cfg, &no, out, err);
        }
        ab_config_release(&cfg);
        return rc;
}
