/* routes.c - the OpenSandbox front's route table (docs/compat-opensandbox.md). */
#include "fronts/opensandbox/front_osb.h"
#include "fronts/opensandbox/opensandbox.h"

static const ab_route routes[] = {
    {"POST", "opensandbox/execd/*/files/upload", AUTH_USER, BODY_UPLOAD, route_osb_upload},
    /* execd and egress at the endpoints the lifecycle API gives
     * (.../proxy/{port}, as OpenSandbox's server proxy: the SDK's endpoint
     * ends with the port) */
    {"POST", "opensandbox/v1/sandboxes/*/proxy/44772/files/upload", AUTH_USER, BODY_UPLOAD,
     route_osb_upload},
    {"DELETE", "opensandbox/v1/sandboxes/*/proxy/18080/policy", AUTH_USER, BODY_JSON, route_osb},
    {"GET", "opensandbox/**", AUTH_USER, BODY_NONE, route_osb},
    {"POST", "opensandbox/**", AUTH_USER, BODY_JSON, route_osb},
    {"PATCH", "opensandbox/**", AUTH_USER, BODY_JSON, route_osb},
    {"DELETE", "opensandbox/egress/*/policy", AUTH_USER, BODY_JSON, route_osb},
    {"DELETE", "opensandbox/**", AUTH_USER, BODY_NONE, route_osb},
};

const ab_route_table ab_osb_routes = {
    .name = "opensandbox",
    .routes = routes,
    .n_routes = AB_ARRAY_LEN(routes),
    .key_header = "OPEN-SANDBOX-API-KEY", /* where the SDK sends its key */
    .box_upload_prefix = "opensandbox/",  /* both upload routes: {id} is their box */
    .request_id = true,                   /* as OpenSandbox's server answers */
    /* its threads (foreground commands, session runs, metrics watches) use
     * the manager: they end, and are waited for, before it is freed */
    .shutdown = execd_shutdown,
};
