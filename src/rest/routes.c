/* routes.c - the table of agentbox's own routes (docs/api.md), which
 * `agentbox serve` registers with the server. */
#include "rest/rest.h"
#include "kit/relay.h"

static const ab_route routes[] = {
    {"GET", "health", AUTH_ANY, BODY_NONE, route_health},
    {"POST", "sandbox/js", AUTH_OWN, BODY_JSON, route_sandbox_js},
    {"POST", "sandbox/python", AUTH_OWN, BODY_JSON, route_sandbox_python},
    {"GET", "sandbox/modules", AUTH_OWN, BODY_NONE, route_sandbox_modules},
    {"GET", "metrics", AUTH_USER, BODY_NONE, route_metrics},
    {"POST", "v1/sandboxes", AUTH_USER, BODY_JSON, route_box_create},
    {"GET", "v1/sandboxes", AUTH_USER, BODY_NONE, route_box_list},
    {"DELETE", "v1/sandboxes", AUTH_USER, BODY_NONE, route_box_delete_where},
    {"GET", "v1/sandboxes/*", AUTH_USER, BODY_NONE, route_box_get},
    {"DELETE", "v1/sandboxes/*", AUTH_USER, BODY_NONE, route_box_delete},
    {"POST", "v1/sandboxes/*/stop", AUTH_USER, BODY_JSON, route_box_stop},
    {"POST", "v1/sandboxes/*/start", AUTH_USER, BODY_JSON, route_box_start},
    {"POST", "v1/sandboxes/*/pause", AUTH_USER, BODY_JSON, route_box_pause},
    {"POST", "v1/sandboxes/*/resume", AUTH_USER, BODY_JSON, route_box_resume},
    {"POST", "v1/sandboxes/*/fork", AUTH_USER, BODY_JSON, route_box_fork},
    {"POST", "v1/sandboxes/*/snapshot", AUTH_USER, BODY_JSON, route_box_snapshot},
    {"GET", "v1/sandboxes/*/network", AUTH_USER, BODY_NONE, route_box_network_get},
    {"PUT", "v1/sandboxes/*/network", AUTH_USER, BODY_JSON, route_box_network_put},
    {"POST", "v1/sandboxes/*/exec", AUTH_USER, BODY_JSON, route_box_exec},
    {"GET", "v1/sandboxes/*/files", AUTH_USER, BODY_NONE, route_files_get},
    {"PUT", "v1/sandboxes/*/files", AUTH_USER, BODY_UPLOAD, route_files_put},
    {"DELETE", "v1/sandboxes/*/files", AUTH_USER, BODY_NONE, route_files_delete},
    {"GET", "v1/skills", AUTH_USER, BODY_NONE, route_skills_list},
    {"GET", "v1/skills/prompt", AUTH_USER, BODY_NONE, route_skills_prompt},
    {"GET", "v1/skills/*", AUTH_USER, BODY_NONE, route_skill_get},
    {"PUT", "v1/skills/*", AUTH_ADMIN, BODY_UPLOAD, route_skill_put},
    {"DELETE", "v1/skills/*", AUTH_ADMIN, BODY_NONE, route_skill_delete},
    {"POST", "v1/skills/*/validate", AUTH_USER, BODY_UPLOAD, route_skill_validate},
    /* The skills administration of the sessions API (docs/api.md, "Sessions and chat"). */
    {"GET", "api/admin/skills", AUTH_ADMIN, BODY_NONE, route_skills_list},
    {"POST", "api/admin/skills", AUTH_ADMIN, BODY_UPLOAD, route_skill_form},
    {"POST", "api/admin/skills/*", AUTH_ADMIN, BODY_UPLOAD, route_skill_put},
    {"PUT", "api/admin/skills/*", AUTH_ADMIN, BODY_UPLOAD, route_skill_put},
    {"POST", "api/admin/skills/*/validate", AUTH_ADMIN, BODY_UPLOAD, route_skill_validate},
    {"DELETE", "api/admin/skills/*", AUTH_ADMIN, BODY_NONE, route_skill_delete},
    {"POST", "v1/exec", AUTH_USER, BODY_JSON, route_exec},
    {"GET", "v1/tools", AUTH_USER, BODY_NONE, route_tools_list},
    {"GET", "v1/tools/prompt", AUTH_USER, BODY_NONE, route_tools_prompt},
    {"POST", "v1/tools/*", AUTH_USER, BODY_JSON, route_tool},
    {"POST", "v1/sandboxes/*/tools/*", AUTH_USER, BODY_JSON, route_box_tool},
    {"POST", "mcp", AUTH_USER, BODY_JSON, route_mcp_post},
    {"DELETE", "mcp", AUTH_USER, BODY_NONE, route_mcp_delete},
    {"GET", "v1/events", AUTH_USER, BODY_NONE, route_events},
    {"GET", "v1/keys", AUTH_ADMIN, BODY_NONE, route_keys_list},
    {"POST", "v1/keys", AUTH_ADMIN, BODY_JSON, route_keys_create},
    {"DELETE", "v1/keys/*", AUTH_ADMIN, BODY_NONE, route_keys_delete},
    {"POST", "v1/sandboxes/*/terminals", AUTH_USER, BODY_JSON, route_term_create},
    {"GET", "v1/sandboxes/*/terminals", AUTH_USER, BODY_NONE, route_term_list},
    {"GET", "v1/sandboxes/*/terminals/*", AUTH_USER, BODY_NONE, route_term_get},
    {"DELETE", "v1/sandboxes/*/terminals/*", AUTH_USER, BODY_NONE, route_term_delete},
    {"POST", "v1/sandboxes/*/terminals/*/resize", AUTH_USER, BODY_JSON, route_term_resize},
    {"GET", "v1/sandboxes/*/execs", AUTH_USER, BODY_NONE, route_box_execs},
    /* the web console (routes_console.c): static files, no auth (the token
     * is given to the page's scripts, never to these) */
    {"GET", "", AUTH_ANY, BODY_NONE, route_console},
    {"GET", "console/*", AUTH_ANY, BODY_NONE, route_console},
    {"GET", "v1/keys/*", AUTH_ADMIN, BODY_NONE, route_key_get},
    {"GET", "v1/images", AUTH_USER, BODY_NONE, route_images_list},
    {"POST", "v1/images", AUTH_USER, BODY_JSON, route_images_pull},
    {"POST", "v1/images/import", AUTH_ADMIN, BODY_UPLOAD, route_images_import},
    {"GET", "v1/images/**", AUTH_USER, BODY_NONE, route_image_get},
    {"PUT", "v1/sandboxes/*/ports/*/public", AUTH_USER, BODY_JSON, route_port_public_put},
    {"DELETE", "v1/sandboxes/*/ports/*/public", AUTH_USER, BODY_NONE, route_port_public_delete},
    {"DELETE", "v1/images/**", AUTH_ADMIN, BODY_NONE, route_image_delete},
    {"GET", "v1/volumes", AUTH_USER, BODY_NONE, route_volumes_list},
    {"POST", "v1/volumes", AUTH_USER, BODY_JSON, route_volume_create},
    {"GET", "v1/volumes/*", AUTH_USER, BODY_NONE, route_volume_get},
    {"DELETE", "v1/volumes/*", AUTH_USER, BODY_NONE, route_volume_delete},
    /* the nodes of a fleet (routes_nodes.c) */
    {"GET", "v1/nodes", AUTH_ADMIN, BODY_NONE, route_nodes_list},
    {"POST", "v1/nodes/*/drain", AUTH_ADMIN, BODY_NONE, route_node_drain},
    {"POST", "v1/nodes/*/undrain", AUTH_ADMIN, BODY_NONE, route_node_undrain},
    /* moves of boxes between nodes (routes_move.c) */
    {"POST", "v1/sandboxes/*/move", AUTH_USER, BODY_JSON, route_box_move},
    {"POST", "v1/fleet/moves", AUTH_FLEET, BODY_JSON, route_fleet_move_recv},
    {"GET", "v1/fleet/moves/*/disk", AUTH_FLEET, BODY_NONE, route_fleet_move_disk},
    {"POST", "v1/fleet/moves/*/commit", AUTH_FLEET, BODY_JSON, route_fleet_move_commit},
    {"POST", "v1/fleet/moves/*/abort", AUTH_FLEET, BODY_JSON, route_fleet_move_abort},
};

/* Terminal WebSockets and port relays hold upgraded connections of their
 * own: ended before the server stops. */
static void rest_quiesce(void)
{
        term_ws_shutdown();
        relay_shutdown();
}

static const ab_proxy_ops ports_proxy = {
    .match = ports_match,
    .by_host = ports_by_host,
    .box = ports_box,
    .open = ports_open,
    .body = relay_body,
    .answer = relay_answer,
    .free = relay_free,
};

const ab_route_table ab_rest_routes = {
    .name = "rest",
    .routes = routes,
    .n_routes = AB_ARRAY_LEN(routes),
    .authenticate = runner_authenticate, /* the code runner's /sandbox routes */
    .auth_blocks = true,                 /* it may look an API key up in the store */
    .box_upload_prefix = "v1/sandboxes/*/",
    .quiesce = rest_quiesce,
    .proxy = &ports_proxy,
};
