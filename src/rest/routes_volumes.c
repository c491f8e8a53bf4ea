/* Named volumes over HTTP (docs/api.md "Volumes"): create, list, get,
 * delete. The work is in the manager (core/volumes.c) and the backend. */
#include "rest/rest.h"

/* A volume as the API and `agentbox volume ls --json` show it (no host paths). */
json_t *ab_volume_json(const ab_volume_info *v)
{
        json_t *boxes = json_array();
        for (char **p = v->boxes; p && *p; p++)
                json_array_append_new(boxes, json_string(*p));
        json_t *j = json_pack("{s:s,s:I,s:I,s:I,s:o}", "name", v->name, "size_mib",
                              (json_int_t)v->size_mib, "used_bytes", (json_int_t)v->used_bytes,
                              "created_at", (json_int_t)v->created_at, "boxes", boxes);
        if (v->owner)
                json_object_set_new(j, "app_id", json_string(v->owner));
        return j;
}

enum MHD_Result route_volume_create(ab_req *r, const char *id)
{
        static const char *const known[] = {"name", "size_mib", NULL};
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        const char *name = NULL;
        int64_t size = 0;
        bool has_size = false;
        ab_volume_info v;
        if (fields_known(body, known, NULL, &e) < 0 || field_str(body, "name", &name, &e) < 0 ||
            field_int(body, "size_mib", &size, &has_size, &e) < 0) {
                json_decref(body);
                return resp_err(r, e);
        }
        if (!name || (has_size && size <= 0)) {
                json_decref(body);
                return resp_error(r, 400, "invalid_argument",
                                  !name ? "name: required" : "size_mib: must be positive");
        }
        int rc = ab_manager_volume_create(r->srv->mgr, name, (uint64_t)size, r->scope, &v, &e);
        json_decref(body);
        if (rc < 0)
                return resp_err(r, e);
        json_t *j = ab_volume_json(&v);
        ab_volume_info_clear(&v);
        return resp_json(r, 201, j);
}

enum MHD_Result route_volumes_list(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        ab_volume_info *v = NULL;
        size_t n = 0;
        if (ab_manager_volume_list(r->srv->mgr, r->scope, &v, &n, &e) < 0)
                return resp_err(r, e);
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++) {
                json_array_append_new(a, ab_volume_json(&v[i]));
                ab_volume_info_clear(&v[i]);
        }
        free(v);
        return resp_json(r, 200, json_pack("{s:o}", "volumes", a));
}

enum MHD_Result route_volume_get(ab_req *r, const char *name)
{
        ab_err *e = NULL;
        ab_volume_info v;
        if (ab_manager_volume_get(r->srv->mgr, name, r->scope, &v, &e) < 0)
                return resp_err(r, e);
        json_t *j = ab_volume_json(&v);
        ab_volume_info_clear(&v);
        return resp_json(r, 200, j);
}

enum MHD_Result route_volume_delete(ab_req *r, const char *name)
{
        ab_err *e = NULL;
        if (ab_manager_volume_delete(r->srv->mgr, name, r->scope, &e) < 0)
                return resp_err(r, e);
        return resp_json(r, 200, json_pack("{s:s,s:b}", "name", name, "deleted", 1));
}
