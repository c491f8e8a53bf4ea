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

/* The box a request is about (for forwarding it to the box's fleet node,
 * kit/forward.h): /opensandbox/v1/sandboxes/{id}/..., /opensandbox/execd/{id}/...,
 * /opensandbox/egress/{id}/... */
static const char *osb_box_of(ab_req *r)
{
        if (r->n_seg >= 4 && !strcmp(r->seg[1], "v1") && !strcmp(r->seg[2], "sandboxes"))
                return r->seg[3];
        if (r->n_seg >= 3 && (!strcmp(r->seg[1], "execd") || !strcmp(r->seg[1], "egress")))
                return r->seg[2];
        return NULL;
}

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
    .box_of = osb_box_of,
};
