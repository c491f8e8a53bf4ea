/* agentbox nodes: the nodes of a fleet as the shared store has them
 * (docs/fleet.md), read straight from the store the settings name. */
#include "cli/cli.h"
#include "fleet/fleet.h"

#include <inttypes.h>
#include <time.h>

static const char *nodes_usage =
    "Usage: agentbox nodes [--config FILE] [--store URL] [--json]\n"
    "\n"
    "Lists the nodes of the fleet sharing the store (docs/fleet.md): each node's id,\n"
    "state (up, draining, down: no heartbeat for fleet.down_after), URL, running\n"
    "boxes, and free memory and disk. The store is --store, else AGENTBOX_STORE,\n"
    "else the config file's store: (a fleet shares one postgres:// store).\n";

int cli_nodes(int argc, char **argv, const char *data_flag)
{
        cli_service_args a = {.data = data_flag};
        bool as_json = false;
        _cleanup_free_ char **rest = xcalloc((size_t)argc + 1, sizeof(char *));
        int n_rest = 0;
        for (int i = 0; i < argc; i++) {
                if (i > 0 && !strcmp(argv[i], "--json"))
                        as_json = true;
                else
                        rest[n_rest++] = argv[i];
        }
        int rc = cli_service_parse(n_rest, rest, "nodes", nodes_usage, false, &a);
        if (rc >= 0)
                return rc;
        _cleanup_err_ ab_err *e = NULL;
        ab_config cfg;
        ab_config_default(&cfg);
        if ((a.config && ab_config_load_file(&cfg, a.config, &e) < 0) ||
            ab_config_load_env(&cfg, &e) < 0) {
                ab_config_release(&cfg);
                return cli_fail(&e);
        }
        const char *url = a.store ? a.store : cfg.store_url;
        ab_store *s = NULL;
        if (ab_store_open(url, a.data ? a.data : cfg.data_dir, &s, &e) < 0) {
                ab_config_release(&cfg);
                return cli_fail(&e);
        }
        ab_node_rec *ns = NULL;
        size_t n = 0;
        if (ab_store_node_list(s, &ns, &n, &e) < 0) {
                ab_store_close(s);
                ab_config_release(&cfg);
                return cli_fail(&e);
        }
        int64_t now = (int64_t)time(NULL) * 1000;
        json_t *list = json_array();
        if (!as_json)
                printf("%-20s %-9s %-8s %-10s %-10s %s\n", "NODE", "STATE", "RUNNING", "MEM FREE",
                       "DISK FREE", "URL");
        for (size_t i = 0; i < n; i++) {
                if (as_json) {
                        json_array_append_new(list,
                                              ab_node_json(&ns[i], cfg.fleet.down_after_ms, now));
                        continue;
                }
                printf("%-20s %-9s %-8" PRId64 " %-10" PRId64 " %-10" PRId64 " %s\n", ns[i].id,
                       ab_node_state_name(ab_node_state_at(&ns[i], cfg.fleet.down_after_ms, now)),
                       ns[i].running, ns[i].mem_avail >> 20, ns[i].disk_avail >> 20, ns[i].url);
        }
        if (as_json) {
                json_t *j = json_pack("{s:o}", "nodes", list);
                char *t = json_dumps(j, JSON_INDENT(2));
                puts(t);
                free(t);
                json_decref(j);
        } else {
                json_decref(list);
                if (n)
                        printf("(memory and disk in MiB)\n");
        }
        ab_node_recs_free(ns, n);
        ab_store_close(s);
        ab_config_release(&cfg);
        return 0;
}
