/* Ports of a box that need no auth (spec.public_ports), under its slot lock. */
#include "core/manager_int.h"

/* The index of port in the array a, or -1. */
static ssize_t port_index(json_t *a, int port)
{
        size_t i;
        json_t *v;
        json_array_foreach(a, i, v) if (json_integer_value(v) == port) return (ssize_t)i;
        return -1;
}

bool ab_box_port_public(const ab_box_rec *r, int port)
{
        json_t *a = json_object_get(r->spec, "public_ports");
        return json_is_array(a) && port_index(a, port) >= 0;
}

int ab_manager_set_port_public(ab_manager *m, const char *id, const char *scope, int port,
                               bool public, ab_box_rec *out, ab_err **err)
{
        if (port < 1 || port > 65535)
                return ab_err_set(err, AB_E_INVALID, 0, "port %d is not in 1..65535", port);
        memset(out, 0, sizeof(*out));
        slot *s = mgr_slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        ab_box_rec r = {0};
        int rc = mgr_get_scoped(m, id, scope, &r, err);
        if (rc == 0 && (r.status == AB_BOX_DELETING || r.status == AB_BOX_CREATING))
                rc = ab_err_set(err, AB_E_CONFLICT, 0, "box %s is being %s", id,
                                r.status == AB_BOX_DELETING ? "deleted" : "created");
        if (rc == 0) {
                if (!r.spec)
                        r.spec = json_object();
                json_t *a = json_object_get(r.spec, "public_ports");
                if (!json_is_array(a)) {
                        a = json_array();
                        json_object_set_new(r.spec, "public_ports", a);
                }
                ssize_t at = port_index(a, port);
                bool changed = public ? at < 0 : at >= 0;
                if (public && at < 0)
                        json_array_append_new(a, json_integer(port));
                else if (!public && at >= 0)
                        json_array_remove(a, (size_t)at);
                if (changed)
                        rc = ab_store_box_update(m->o.store, &r, err);
                if (rc == 0 && changed)
                        mgr_emit(m, public ? "box.port_public" : "box.port_private", &r,
                                 json_pack("{s:i}", "port", port));
        }
        if (rc == 0)
                *out = r;
        else
                ab_box_rec_clear(&r);
        pthread_mutex_unlock(&s->lock);
        mgr_slot_put(m, s);
        return rc;
}
