/* A box's recorded network policy, applied to the running box (net/net.h). */
#include "core/manager_int.h"
#include "net/net.h"

/* The policy recorded in the box's spec (mode none when absent). */
static void rec_policy(const ab_box_rec *r, ab_netpol *out)
{
        memset(out, 0, sizeof(*out));
        if (r->spec && ab_netpol_parse(json_object_get(r->spec, "network"), out, NULL) < 0)
                memset(out, 0, sizeof(*out));
}

/* Makes the running box's network match its recorded policy. init_pid 0 =
 * ask the backend. Caller holds the slot lock. */
int mgr_net_sync(ab_manager *m, const ab_box_rec *r, pid_t init_pid, bool thorough, ab_err **err)
{
        if (!m->o.net)
                return 0;
        ab_netpol pol;
        /* A pod's network is the cluster's: the kubernetes backend enforces
         * the mode itself (a NetworkPolicy), there is no host netns to enter. */
        const char *be = mgr_rec_backend(r);
        ab_backend *bb = be ? ab_backend_pick(m->o.backend, be) : NULL;
        if (bb && bb->ops->set_network) {
                rec_policy(r, &pol);
                int rc = bb->ops->set_network(bb, r->backend_id, ab_net_mode_name(pol.mode), err);
                ab_netpol_clear(&pol);
                return rc;
        }
        rec_policy(r, &pol);
        int rc = 0;
        if (pol.mode != AB_NET_NONE || thorough || ab_net_active(m->o.net, r->id)) {
                if (!init_pid) {
                        ab_box_info info;
                        if (m->o.backend->ops->info(m->o.backend, r->backend_id, &info, err) < 0) {
                                ab_netpol_clear(&pol);
                                return -1;
                        }
                        init_pid = info.init_pid;
                        ab_box_info_clear(&info);
                }
                rc = init_pid
                         ? ab_net_apply(m->o.net, r->id, r->app_id, init_pid, &pol, thorough, err)
                         : ab_err_set(err, AB_E_UNAVAILABLE, 0, "box %s is not running", r->id);
        }
        ab_netpol_clear(&pol);
        if (rc < 0) {
                ab_log(AB_LOG_WARN, "box network not applied", "box", r->id, "error",
                       err && *err ? (*err)->msg : "?", NULL);
                mgr_emit(m, "box.error", r,
                         json_pack("{s:s}", "error", err && *err ? (*err)->msg : "network"));
        }
        return rc;
}
