/* routes_nodes.c - the nodes of a fleet (docs/fleet.md): GET /v1/nodes and
 * POST /v1/nodes/{id}/drain|undrain, admin only. A server without fleet:
 * settings lists no nodes. */
#include "rest/rest.h"
#include "fleet/fleet.h"

#include <time.h>

enum MHD_Result route_nodes_list(ab_req *r, const char *id)
{
        (void)id;
        ab_fleet *f = r->srv->fleet;
        if (!f)
                return resp_json(r, 200, json_pack("{s:b,s:[]}", "fleet", false, "nodes"));
        ab_node_rec *ns = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        if (ab_store_node_list(r->srv->store, &ns, &n, &e) < 0)
                return resp_err(r, e);
        int64_t now = (int64_t)time(NULL) * 1000;
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++) {
                json_t *j = ab_fleet_node_json(f, &ns[i], now);
                json_object_set_new(j, "self", json_boolean(!strcmp(ns[i].id, ab_fleet_node(f))));
                json_array_append_new(a, j);
        }
        ab_node_recs_free(ns, n);
        return resp_json(
            r, 200,
            json_pack("{s:b,s:s,s:o}", "fleet", true, "node", ab_fleet_node(f), "nodes", a));
}

static enum MHD_Result set_draining(ab_req *r, const char *id, bool draining)
{
        ab_fleet *f = r->srv->fleet;
        if (!f)
                return resp_error(r, 404, "not_found",
                                  "this server is not in a fleet (no fleet: settings): it has "
                                  "no nodes to drain");
        ab_err *e = NULL;
        if (ab_store_node_set_draining(r->srv->store, id, draining, &e) < 0)
                return resp_err(r, e);
        ab_node_rec n;
        ab_node_state st;
        if (ab_fleet_node_get(f, id, &n, &st, &e) < 0)
                return resp_err(r, e);
        json_t *j = ab_fleet_node_json(f, &n, (int64_t)time(NULL) * 1000);
        ab_node_rec_clear(&n);
        return resp_json(r, 200, j);
}

enum MHD_Result route_node_drain(ab_req *r, const char *id)
{
        return set_draining(r, id, true);
}

enum MHD_Result route_node_undrain(ab_req *r, const char *id)
{
        return set_draining(r, id, false);
}
