/* routes.c - the E2B front's route table (docs/compat-e2b.md). */
#include "fronts/e2b/e2b.h"
#include "fronts/e2b/front_e2b.h"

static const ab_route routes[] = {
    {"POST", "e2b/v2/sandboxes", AUTH_USER, BODY_JSON, e2b_create},
    {"POST", "e2b/sandboxes", AUTH_USER, BODY_JSON, e2b_create},
    {"GET", "e2b/v2/sandboxes", AUTH_USER, BODY_NONE, e2b_list},
    {"GET", "e2b/sandboxes", AUTH_USER, BODY_NONE, e2b_list},
    {"GET", "e2b/sandboxes/*", AUTH_USER, BODY_NONE, e2b_get},
    {"DELETE", "e2b/sandboxes/*", AUTH_USER, BODY_NONE, e2b_kill},
    {"POST", "e2b/sandboxes/*/timeout", AUTH_USER, BODY_JSON, e2b_timeout},
    {"POST", "e2b/sandboxes/*/pause", AUTH_USER, BODY_JSON, e2b_pause},
    {"POST", "e2b/sandboxes/*/resume", AUTH_USER, BODY_JSON, e2b_connect},
    {"POST", "e2b/v2/sandboxes/*/connect", AUTH_USER, BODY_JSON, e2b_connect},
    {"POST", "e2b/sandboxes/*/connect", AUTH_USER, BODY_JSON, e2b_connect}, /* SDK 2.45 */
    {"GET", "e2b/sandboxes/*/metrics", AUTH_USER, BODY_NONE, e2b_metrics},
    {"POST", "e2b/sandboxes/*/fork", AUTH_USER, BODY_JSON, e2b_fork},
    {"POST", "e2b/sandboxes/*/snapshots", AUTH_USER, BODY_JSON, e2b_snapshot},
    {"PUT", "e2b/sandboxes/*/network", AUTH_USER, BODY_JSON, e2b_network},
    {"GET", "e2b/snapshots", AUTH_USER, BODY_NONE, e2b_unsupported},
    {"DELETE", "e2b/templates/*", AUTH_USER, BODY_NONE, e2b_unsupported},
    {"GET", "e2b/envd/health", AUTH_ANY, BODY_NONE, envd_health},
    {"GET", "e2b/envd/files", AUTH_OWN, BODY_NONE, envd_files_get},
    {"POST", "e2b/envd/files", AUTH_OWN, BODY_UPLOAD, envd_files_post},
    {"POST", "e2b/envd/process.Process/*", AUTH_OWN, BODY_JSON, envd_process_rpc},
    {"POST", "e2b/envd/filesystem.Filesystem/*", AUTH_OWN, BODY_JSON, envd_filesystem_rpc},
};

const ab_route_table ab_e2b_routes = {
    .name = "e2b",
    .routes = routes,
    .n_routes = AB_ARRAY_LEN(routes),
    .authenticate = envd_authenticate, /* a box's access token: its record */
    .auth_blocks = true,
    .shutdown = envd_shutdown,  /* its processes use the manager from threads of their own */
    .host_port = E2B_ENVD_PORT, /* envd on 49983-ID.ports_domain, as E2B's sandbox hosts */
    .host_prefix = "e2b/envd",
};
