/* agentbox mcp: the MCP server on stdio. Newline-delimited JSON-RPC on
 * stdin/stdout, one message a line, answered in order; logs go to stderr.
 * Runs on the same pieces as `agentbox serve` (config, backend, store,
 * manager) without the HTTP server, with admin rights over the data folder's
 * boxes (whoever can run it can run the CLI on them anyway). Ends when stdin
 * does. */
#include "rest/mcp.h"
#include "cli/cli.h"
#include "base/log.h"

#include <fcntl.h>

static const char *mcp_usage =
    "Usage: agentbox [--data DIR] mcp [--config FILE] [--store URL]\n"
    "\n"
    "Serves the Model Context Protocol on stdin/stdout (newline-delimited\n"
    "JSON-RPC) for an MCP client that starts it, e.g. in a client's config:\n"
    "  {\"command\": \"agentbox\", \"args\": [\"--data\", \"/var/lib/agentbox\", \"mcp\"]}\n"
    "Tools: sandbox_create, sandbox_list, sandbox_stop, sandbox_delete and the\n"
    "agent tools of GET /v1/tools (docs/api.md, \"MCP\"). Logs go to stderr.\n"
    "\n"
    "Options: --data, --config and --store as for `agentbox serve`.\n";

int cli_mcp(int argc, char **argv, const char *data_flag)
{
        cli_service_args a = {.data = data_flag};
        int rc = cli_service_parse(argc, argv, "mcp", mcp_usage, false, &a);
        if (rc >= 0)
                return rc;
        /* Only JSON-RPC may reach stdout: answers go to a private copy of it,
         * and fd 1 becomes stderr for anything else that prints. */
        int out = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
        if (out < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
                fprintf(stderr, "agentbox mcp: cannot set up stdout: %s\n", strerror(errno));
                return EXIT_AGENTBOX;
        }
        _cleanup_err_ ab_err *e = NULL;
        cli_service svc;
        if (cli_service_open(&svc, &a, &e) < 0) {
                cli_error(e);
                close(out);
                return EXIT_AGENTBOX;
        }
        ab_log(AB_LOG_INFO, "agentbox mcp on stdio", "data", svc.cfg.data_dir, "version",
               AGENTBOX_VERSION, NULL);
        ab_mcp_conn c = {.srv = &svc.srv, .scope = NULL};
        _cleanup_free_ char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        rc = 0;
        while ((n = getline(&line, &cap, stdin)) >= 0) {
                while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                        n--;
                if (n == 0)
                        continue;
                json_t *resp = ab_mcp_handle_text(&c, line, (size_t)n);
                if (!resp)
                        continue;
                char *txt = json_dumps(resp, JSON_COMPACT);
                json_decref(resp);
                if (!txt)
                        abort();
                size_t len = strlen(txt);
                txt = xrealloc(txt, len + 2);
                txt[len++] = '\n';
                int wr = ab_write_all(out, txt, len);
                free(txt);
                if (wr < 0) {
                        ab_log(AB_LOG_WARN, "stdout closed; stopping", NULL);
                        break;
                }
        }
        close(out);
        cli_service_close(&svc);
        return rc;
}
