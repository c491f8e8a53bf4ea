/* Error and usage messages every CLI verb prints the same way. */
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
