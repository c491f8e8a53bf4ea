/* Quotas over HTTP: who a request counts against (the manager is told the
 * calling API key around the handler), GET /v1/keys/{id} (a key, its quotas
 * and its app's use), and the per-app and disk series of /metrics. */
#include "rest/rest.h"
#include "base/buf.h"

static json_t *usage_json(const ab_app_usage *u)
{
        json_t *rej = json_object();
        for (int k = 0; k < AB_Q_N; k++)
                json_object_set_new(rej, ab_quota_name((ab_quota_kind)k),
                                    json_integer(u->rejected[k]));
        return json_pack("{s:I,s:I,s:I,s:I,s:I,s:o}", "boxes", (json_int_t)u->boxes, "running",
                         (json_int_t)u->running, "disk_mib", (json_int_t)u->disk_mib, "image_mib",
                         (json_int_t)u->image_mib, "execs", (json_int_t)u->execs, "rejected", rej);
}

/* GET /v1/keys/{id}: {key_id, app_id, name, created_at, quotas (the key's
 * own), effective_quotas (what applies to its requests), usage (its app's)}. */
enum MHD_Result route_key_get(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        ab_api_key k;
        if (ab_store_key_get(r->srv->store, id, &k, &e) < 0)
                return resp_err(r, e);
        ab_app_usage u;
        if (ab_manager_app_usage(r->srv->mgr, k.app_id, &u, &e) < 0) {
                ab_api_key_clear(&k);
                return resp_err(r, e);
        }
        ab_quota eff;
        ab_manager_quota_of(r->srv->mgr, k.app_id, k.has_quotas ? &k.quotas : NULL, &eff);
        json_t *j =
            json_pack("{s:s,s:s,s:s?,s:I,s:o,s:o,s:o}", "key_id", k.key_id, "app_id", k.app_id,
                      "name", k.name, "created_at", (json_int_t)k.created_at, "quotas",
                      k.has_quotas ? ab_quota_json(&k.quotas, true) : json_object(),
                      "effective_quotas", ab_quota_json(&eff, false), "usage", usage_json(&u));
        ab_app_usage_clear(&u);
        ab_api_key_clear(&k);
        return resp_json(r, 200, j);
}

/* A Prometheus label value: \, " and newlines escaped. */
static void label(ab_buf *b, const char *v)
{
        for (const char *p = v; *p; p++) {
                if (*p == '\\' || *p == '"')
                        ab_buf_printf(b, "\\%c", *p);
                else if (*p == '\n')
                        ab_buf_puts(b, "\\n");
                else
                        ab_buf_add(b, p, 1);
        }
}

static void series(ab_buf *b, const char *name, const char *app, const char *quota, int64_t v)
{
        ab_buf_printf(b, "%s{app=\"", name);
        label(b, app);
        if (quota)
                ab_buf_printf(b, "\",quota=\"%s", quota);
        ab_buf_printf(b, "\"} %lld\n", (long long)v);
}

char *quota_metrics_append(ab_server *s, char *txt)
{
        ab_buf b = {0};
        ab_buf_puts(&b, txt);
        free(txt);
        ab_app_usage *us = NULL;
        size_t n = 0;
        if (ab_manager_app_usages(s->mgr, &us, &n, NULL) == 0) {
                static const struct {
                        const char *name, *help, *type;
                } heads[] = {
                    {"agentbox_app_boxes", "Boxes of the app (any state but deleting).", "gauge"},
                    {"agentbox_app_running", "Boxes of the app creating, running or paused.",
                     "gauge"},
                    {"agentbox_app_disk_limit_bytes", "Sum of the disk limits of the app's boxes.",
                     "gauge"},
                    {"agentbox_app_execs_in_flight", "Execs of the app running now.", "gauge"},
                    {"agentbox_quota_rejections_total",
                     "Requests refused by a quota of the app, by quota.", "counter"},
                };
                for (size_t h = 0; h < AB_ARRAY_LEN(heads); h++) {
                        ab_buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", heads[h].name,
                                      heads[h].help, heads[h].name, heads[h].type);
                        for (size_t i = 0; i < n; i++) {
                                const ab_app_usage *u = &us[i];
                                if (h == 4) {
                                        for (int k = 0; k < AB_Q_N; k++)
                                                series(&b, heads[h].name, u->app_id,
                                                       ab_quota_name((ab_quota_kind)k),
                                                       u->rejected[k]);
                                        continue;
                                }
                                int64_t v = h == 0   ? u->boxes
                                            : h == 1 ? u->running
                                            : h == 2 ? u->disk_mib * 1024 * 1024
                                                     : u->execs;
                                series(&b, heads[h].name, u->app_id, NULL, v);
                        }
                }
                ab_app_usages_free(us, n);
        }
        ab_disk_usage d;
        if (ab_manager_disk_usage(s->mgr, &d, NULL) == 0)
                ab_buf_printf(&b,
                              "# HELP agentbox_disk_free_bytes Free space of the data folder's "
                              "filesystem.\n# TYPE agentbox_disk_free_bytes gauge\n"
                              "agentbox_disk_free_bytes %llu\n"
                              "# HELP agentbox_disk_promised_bytes Disk space boxes were promised "
                              "and do not use yet.\n# TYPE agentbox_disk_promised_bytes gauge\n"
                              "agentbox_disk_promised_bytes %llu\n"
                              "# HELP agentbox_disk_balloon_bytes Space held back from running "
                              "boxes because the host is short.\n"
                              "# TYPE agentbox_disk_balloon_bytes gauge\n"
                              "agentbox_disk_balloon_bytes %llu\n"
                              "# HELP agentbox_disk_refused_total Creates refused for disk "
                              "space.\n# TYPE agentbox_disk_refused_total counter\n"
                              "agentbox_disk_refused_total %lld\n"
                              "# HELP agentbox_disk_guard_rounds_total Rounds of the full-disk "
                              "guard.\n# TYPE agentbox_disk_guard_rounds_total counter\n"
                              "agentbox_disk_guard_rounds_total %lld\n",
                              (unsigned long long)d.free_bytes,
                              (unsigned long long)d.promised_bytes,
                              (unsigned long long)d.balloon_bytes, (long long)d.refused,
                              (long long)d.guard_rounds);
        return ab_buf_steal(&b);
}
