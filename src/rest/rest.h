/* rest.h - agentbox's own HTTP API (docs/api.md): the REST routes, MCP over
 * HTTP, the web console, the code runner's routes and the relay to boxes'
 * ports, and what those modules share. The table ab_rest_routes (routes.c)
 * lists them; `agentbox serve` registers it with the server (kit/server.h). */
#ifndef AB_REST_H
#define AB_REST_H

#include "kit/server.h"

/* Every route of agentbox's own API, with the code runner's token as its
 * AUTH_OWN, the relay to boxes' ports, and the terminals' and relays' stop. */
extern const ab_route_table ab_rest_routes;

/* The fields of POST /v1/sandboxes (NULL-terminated), and their parser:
 * fills *q (pointers into body, and lim when limits are given). */
extern const char *const acquire_fields[];
int parse_acquire(const ab_server *s, json_t *body, ab_acquire_req *q, ab_limits *lim,
                  ab_err **err);

/* Route handlers. `id` is the {id} path segment or NULL. */
enum MHD_Result route_health(ab_req *r, const char *id);
enum MHD_Result route_metrics(ab_req *r, const char *id);
enum MHD_Result route_box_create(ab_req *r, const char *id);
enum MHD_Result route_box_list(ab_req *r, const char *id);
enum MHD_Result route_box_delete_where(ab_req *r, const char *id);
enum MHD_Result route_box_get(ab_req *r, const char *id);
enum MHD_Result route_box_delete(ab_req *r, const char *id);
enum MHD_Result route_box_stop(ab_req *r, const char *id);
enum MHD_Result route_box_start(ab_req *r, const char *id);
enum MHD_Result route_box_pause(ab_req *r, const char *id);
enum MHD_Result route_box_resume(ab_req *r, const char *id);
enum MHD_Result route_box_network_put(ab_req *r, const char *id);
enum MHD_Result route_box_network_get(ab_req *r, const char *id);
enum MHD_Result route_box_exec(ab_req *r, const char *id);
enum MHD_Result route_box_fork(ab_req *r, const char *id);
enum MHD_Result route_box_snapshot(ab_req *r, const char *id);
enum MHD_Result route_exec(ab_req *r, const char *id);
enum MHD_Result route_events(ab_req *r, const char *id);
enum MHD_Result route_keys_list(ab_req *r, const char *id);
enum MHD_Result route_keys_create(ab_req *r, const char *id);
enum MHD_Result route_keys_delete(ab_req *r, const char *id);
enum MHD_Result route_key_get(ab_req *r, const char *id);
/* routes_nodes.c: the nodes of a fleet */
enum MHD_Result route_nodes_list(ab_req *r, const char *id);
enum MHD_Result route_node_drain(ab_req *r, const char *id);
enum MHD_Result route_node_undrain(ab_req *r, const char *id);
/* routes_move.c: a stopped native box moved to another fleet node, and the
 * node-to-node calls of the move (AUTH_FLEET) */
enum MHD_Result route_box_move(ab_req *r, const char *id);
enum MHD_Result route_fleet_move_recv(ab_req *r, const char *id);
enum MHD_Result route_fleet_move_disk(ab_req *r, const char *id);
enum MHD_Result route_fleet_move_commit(ab_req *r, const char *id);
enum MHD_Result route_fleet_move_abort(ab_req *r, const char *id);
/* Appends the per-app and disk series to the /metrics text (routes_quota.c). */
char *quota_metrics_append(ab_server *s, char *txt);
enum MHD_Result route_files_get(ab_req *r, const char *id);
/* The code runner's routes authenticate from the head (SANDBOX_TOKEN, else
 * the admin token, else loopback only): *ok, or an answer queued. */
enum MHD_Result runner_authenticate(ab_req *r, bool *ok);
enum MHD_Result route_sandbox_js(ab_req *r, const char *id);
enum MHD_Result route_sandbox_python(ab_req *r, const char *id);
enum MHD_Result route_sandbox_modules(ab_req *r, const char *id);
enum MHD_Result route_files_put(ab_req *r, const char *id);
enum MHD_Result route_files_delete(ab_req *r, const char *id);
enum MHD_Result route_skills_list(ab_req *r, const char *id);
enum MHD_Result route_skills_prompt(ab_req *r, const char *id);
enum MHD_Result route_skill_get(ab_req *r, const char *name);
enum MHD_Result route_skill_put(ab_req *r, const char *name);
/* POST /api/admin/skills: a skill as multipart/form-data (routes_skills_form.c). */
enum MHD_Result route_skill_form(ab_req *r, const char *unused);
enum MHD_Result route_skill_validate(ab_req *r, const char *name);
enum MHD_Result route_skill_delete(ab_req *r, const char *name);
/* routes_images.c */
enum MHD_Result route_images_list(ab_req *r, const char *id);
enum MHD_Result route_images_pull(ab_req *r, const char *id);
enum MHD_Result route_images_import(ab_req *r, const char *id);
enum MHD_Result route_image_get(ab_req *r, const char *ref);
enum MHD_Result route_image_delete(ab_req *r, const char *ref);
/* The image store's gauges (images, bytes) as Prometheus text. */
void ab_images_metrics(ab_server *s, ab_buf *b);
/* An image as the API and `agentbox image ls --json` show it to app (NULL:
 * the admin) (no host paths; of the names, those app sees, store.h). */
json_t *ab_image_json(const ab_image *img, const char *app);
/* routes_volumes.c */
enum MHD_Result route_volume_create(ab_req *r, const char *id);
enum MHD_Result route_volumes_list(ab_req *r, const char *id);
enum MHD_Result route_volume_get(ab_req *r, const char *name);
enum MHD_Result route_volume_delete(ab_req *r, const char *name);
/* A volume as the API and `agentbox volume ls --json` show it (no host paths). */
json_t *ab_volume_json(const ab_volume_info *v);
enum MHD_Result route_tools_list(ab_req *r, const char *id);
enum MHD_Result route_tools_prompt(ab_req *r, const char *id);
enum MHD_Result route_box_tool(ab_req *r, const char *id);
enum MHD_Result route_tool(ab_req *r, const char *id);
enum MHD_Result route_mcp_post(ab_req *r, const char *id);
enum MHD_Result route_mcp_delete(ab_req *r, const char *id);
enum MHD_Result route_term_create(ab_req *r, const char *id);
enum MHD_Result route_term_list(ab_req *r, const char *id);
enum MHD_Result route_term_get(ab_req *r, const char *id);
enum MHD_Result route_term_delete(ab_req *r, const char *id);
enum MHD_Result route_term_resize(ab_req *r, const char *id);
/* Ends every attached terminal WebSocket (routes_term.c) and waits for their
 * threads; new upgrades are refused from then on. Before MHD_stop_daemon. */
void term_ws_shutdown(void);
/* Ports of boxes (routes_ports.c). ports_match (MHD's thread, first call)
 * claims a request for a box's port: /v1/sandboxes/{id}/ports/{port}[/...]
 * with any method (but PUT and DELETE of .../public), or any request whose
 * Host is PORT-ID.ports_domain; it sets r->proxy (a relay, kit/relay.h).
 * ports_open (a worker, before the body) authenticates (a public port needs
 * nothing), begins a use of the box, connects inside it and sends the head;
 * it answers errors itself (*done). The body and the answer (streamed, or
 * for a 101 the upgraded connection) are the relay's (kit/relay.h). */
bool ports_match(ab_req *r);
/* True when r's Host names a box's port (PORT-ID.ports_domain). */
bool ports_by_host(ab_req *r);
/* The box of a request ports_match claimed. */
const char *ports_box(ab_req *r);
enum MHD_Result ports_open(ab_req *r, bool *done);
enum MHD_Result route_port_public_put(ab_req *r, const char *id);
enum MHD_Result route_port_public_delete(ab_req *r, const char *id);
/* GET /v1/sandboxes/{id}/execs (routes_execs.c). */
enum MHD_Result route_box_execs(ab_req *r, const char *id);
/* The web console's files: / and /console/{name} (routes_console.c). */
enum MHD_Result route_console(ab_req *r, const char *name);

/* Tool calls (routes_tools.c), shared by the REST routes and the MCP server. */

/* Finds or creates, and starts, the box named by the acquire fields of o
 * (acquire_fields) like POST /v1/sandboxes. Other keys of o are ignored. */
int tools_acquire(ab_server *s, const char *scope, json_t *o, ab_box_rec *out, bool *created,
                  ab_err **err);
/* Runs agent tool `name` with args (borrowed) in box id, resuming it as
 * needed; bash sees the box env. *out is filled on success (clear it with
 * ab_tool_result_clear). -1 with *err: AB_E_NOT_FOUND unknown tool or box,
 * AB_E_INVALID bad arguments (the message names the argument),
 * AB_E_UNAVAILABLE the box cannot be reached. r (or NULL) is the HTTP
 * request that waits for the answer: a long tool stops when its client
 * hangs up. */
int tools_call(ab_server *s, ab_req *r, const char *scope, const char *id, const char *name,
               json_t *args, ab_tool_result *out, ab_err **err);

#endif
