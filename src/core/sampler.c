/* Resource samples of running boxes on the event bus, and threshold alerts
 * (events and the webhook). */
#include "core/manager_int.h"

/* What the sampler remembers of a box between two samples. */
typedef struct sample_prev {
        char *id;
        uint64_t cpu_ns, at_ns;
        bool alerted[3];
        bool seen; /* sampled in this walk */
} sample_prev;

/* A round samples at most SAMPLE_PAGE boxes, the next page of a walk over the
 * running boxes by id: a round's cost does not grow with the number of boxes
 * (with many boxes, each is sampled less often). prev is sorted by id. */
#define SAMPLE_PAGE 50
typedef struct sampler {
        sample_prev *v;
        size_t n, cap;
        char *cursor; /* the last id of the walk's previous page; NULL = start */
} sampler;

static int prev_cmp(const void *key, const void *elem)
{
        return strcmp(key, ((const sample_prev *)elem)->id);
}

/* The entry of id, made (zeroed) when there is none. */
static sample_prev *prev_of(sampler *sp, const char *id)
{
        size_t lo = 0, hi = sp->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = prev_cmp(id, &sp->v[mid]);
                if (c == 0)
                        return &sp->v[mid];
                if (c < 0)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        if (sp->n == sp->cap) {
                sp->cap = sp->cap ? 2 * sp->cap : 64;
                sp->v = xrealloc(sp->v, sp->cap * sizeof(*sp->v));
        }
        memmove(&sp->v[lo + 1], &sp->v[lo], (sp->n - lo) * sizeof(*sp->v));
        sp->n++;
        sp->v[lo] = (sample_prev){.id = xstrdup(id)};
        return &sp->v[lo];
}

/* At the end of a walk: forgets boxes it did not sample (stopped, deleted). */
static void prev_prune(sampler *sp)
{
        size_t k = 0;
        for (size_t i = 0; i < sp->n; i++) {
                if (!sp->v[i].seen) {
                        free(sp->v[i].id);
                        continue;
                }
                sp->v[i].seen = false;
                sp->v[k++] = sp->v[i];
        }
        sp->n = k;
}

static void check_alert(ab_manager *m, sample_prev *p, const ab_box_rec *r, int which,
                        const char *metric, double value, double threshold)
{
        if (threshold <= 0)
                return;
        if (value >= threshold && !p->alerted[which]) {
                p->alerted[which] = true;
                json_t *d = json_pack("{s:s,s:f,s:f}", "metric", metric, "value_pct", value,
                                      "threshold_pct", threshold);
                mgr_emit(m, "alert", r, json_deep_copy(d));
                if (m->o.webhook) {
                        json_t *body = json_pack("{s:s,s:s,s:s?,s:I,s:o}", "type", "alert",
                                                 "box_id", r->id, "app_id", r->app_id, "time",
                                                 (json_int_t)mgr_wall_ms(), "data", d);
                        _cleanup_free_ char *txt = mgr_dump(body);
                        json_decref(body);
                        ab_webhook_post(m->o.webhook, txt);
                } else {
                        json_decref(d);
                }
                ab_log(AB_LOG_WARN, "alert", "box", r->id, "metric", metric, NULL);
        } else if (value < threshold * 0.9) {
                p->alerted[which] = false;
        }
}

static void sampler_clear(sampler *sp)
{
        for (size_t i = 0; i < sp->n; i++)
                free(sp->v[i].id);
        free(sp->v);
        free(sp->cursor);
        *sp = (sampler){0};
}

static void sample_once(ab_manager *m, sampler *sp)
{
        ab_box_filter f = {.provider = m->provider,
                           .status = AB_BOX_RUNNING,
                           .node = m->o.node_id,
                           .after_id = sp->cursor,
                           .limit = SAMPLE_PAGE};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, NULL) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                ab_box_rec *r = &rs[i];
                if (mgr_is_pool(r))
                        continue;
                ab_box_stats st;
                if (ab_manager_stats(m, r, &st, NULL) < 0)
                        continue;
                sample_prev *p = prev_of(sp, r->id);
                p->seen = true;
                uint64_t now = ab_now_ns();
                ab_limits l;
                mgr_limits_from_rec(m, r, &l);
                double cpu = -1;
                if (p->at_ns && now > p->at_ns && st.cpu_usage_ns >= p->cpu_ns)
                        cpu = 100.0 * (double)(st.cpu_usage_ns - p->cpu_ns) /
                              ((double)(now - p->at_ns) * (l.cpus > 0 ? l.cpus : 1));
                p->at_ns = now;
                p->cpu_ns = st.cpu_usage_ns;
                double mem =
                    st.memory_limit ? 100.0 * (double)st.memory_bytes / (double)st.memory_limit : 0;
                double disk = st.disk_limit_bytes
                                  ? 100.0 * (double)st.disk_used_bytes / (double)st.disk_limit_bytes
                                  : 0;
                json_t *d = json_pack(
                    "{s:f,s:I,s:I,s:f,s:I,s:I,s:I,s:f,s:I}", "cpu_pct", cpu < 0 ? 0.0 : cpu,
                    "memory_bytes", (json_int_t)st.memory_bytes, "memory_limit",
                    (json_int_t)st.memory_limit, "memory_pct", mem, "pids", (json_int_t)st.pids,
                    "disk_used_bytes", (json_int_t)st.disk_used_bytes, "disk_limit_bytes",
                    (json_int_t)st.disk_limit_bytes, "disk_pct", disk, "oom_kills",
                    (json_int_t)st.oom_kills);
                mgr_emit(m, "resource", r, d);
                check_alert(m, p, r, 0, "memory", mem, m->o.alert_memory_pct);
                if (cpu >= 0)
                        check_alert(m, p, r, 1, "cpu", cpu, m->o.alert_cpu_pct);
                check_alert(m, p, r, 2, "disk", disk, m->o.alert_disk_pct);
        }
        free(sp->cursor);
        sp->cursor = n == SAMPLE_PAGE ? xstrdup(rs[n - 1].id) : NULL;
        if (!sp->cursor)
                prev_prune(sp); /* the walk is over */
        ab_box_recs_free(rs, n);
}

void *mgr_sampler_main(void *arg)
{
        ab_manager *m = arg;
        sampler sp = {0};
        while (mgr_nap(m, m->o.sample_interval_ms, NULL))
                sample_once(m, &sp);
        sampler_clear(&sp);
        return NULL;
}
