/* E2B's control-plane REST API under /e2b (docs/compat-e2b.md), as the e2b
 * SDK calls it: sandboxes are agentbox boxes; templateID names an image
 * ("base" = the host base); timeout is the box's TTL, measured from now as
 * E2B does, ending in a delete, or in a pause with autoPause; E2B sandboxes
 * never idle-stop or idle-pause (their timeout is their life). Errors use
 * E2B's shape {"code": status, "message"} so the SDK maps them to its own
 * types (404 -> NotFoundError, 401 -> AuthenticationError). */
#include "fronts/e2b/front_e2b.h"
#include "base/log.h"
#include "kit/parse.h"
#include "base/codec.h"
#include "base/id.h"

#include <time.h>

/* The envd version the SDK is told: 0.6.4 lets it use every call this front
 * serves (closeStdin from 0.5.2, octet-stream and gzip uploads from 0.5.7,
 * file metadata from 0.6.2, watch entries from 0.6.3, watches with
 * allowNetworkMounts from 0.6.4: inotify in the box sees every mount) and
 * nothing older (the default user from 0.4.0). */
#define ENVD_VERSION      "0.6.4"
#define DEFAULT_TIMEOUT_S 300
#define CLIENT_ID         "agentbox"

static enum MHD_Result e2b_error(ab_req *r, unsigned status, const char *fmt, ...) AB_PRINTF(3, 4);

static enum MHD_Result e2b_error(ab_req *r, unsigned status, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *msg = NULL;
        if (vasprintf(&msg, fmt, ap) < 0)
                msg = NULL;
        va_end(ap);
        ab_metrics_error(r->srv->metrics, "e2b");
        enum MHD_Result ret =
            resp_json(r, status,
                      json_pack("{s:i,s:o}", "code", (int)status, "message",
                                msg ? json_bytes(msg, strlen(msg)) : json_string("error")));
        free(msg);
        return ret;
}

/* An agentbox error in E2B's shape (frees e). */
static enum MHD_Result e2b_err(ab_req *r, ab_err *e)
{
        unsigned st = status_of(e->code);
        enum MHD_Result ret = e2b_error(r, st, "%s", e->msg);
        ab_err_free(&e);
        return ret;
}

static enum MHD_Result no_content(ab_req *r)
{
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        return resp_send(r, 204, resp);
}

/* The time of day in ms since the epoch (box records count in it). */
static int64_t wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static json_t *iso_time(int64_t ms)
{
        char out[AB_TIME_LEN];
        ab_time_rfc3339(ms, true, out);
        return json_string(out);
}

static const char *template_of(const ab_box_rec *r)
{
        json_t *img = json_object_get(r->spec, "image");
        const char *ref = json_string_value(json_object_get(img, "ref"));
        return ref ? ref : "base";
}

/* E2B's state: running, or paused (a stopped box too: its files are kept
 * and a connect brings it back, as a paused E2B sandbox). */
static const char *state_of(const ab_box_rec *r)
{
        return r->status == AB_BOX_PAUSED || r->status == AB_BOX_STOPPED ? "paused" : "running";
}

/* A sandbox in E2B's shape: the fields of ListedSandbox, and with detail
 * those of SandboxDetail (the access token and domain). */
static json_t *sandbox_json(ab_req *r, const ab_box_rec *rec, bool detail)
{
        ab_limits l = r->srv->cfg->limits;
        if (rec->has_limits)
                l = rec->limits;
        int64_t end = rec->ttl_s > 0 ? rec->created_at + rec->ttl_s * 1000 : 0;
        json_t *j = json_pack(
            "{s:s,s:s,s:s,s:o,s:o,s:i,s:I,s:I,s:o,s:s,s:s}", "sandboxID", rec->id, "templateID",
            template_of(rec), "clientID", CLIENT_ID, "startedAt", iso_time(rec->created_at),
            "endAt", end ? iso_time(end) : iso_time(rec->created_at + 86400000ll * 365), "cpuCount",
            (int)(l.cpus > 0 ? (l.cpus < 1 ? 1 : l.cpus) : 1), "memoryMB", (json_int_t)l.memory_mib,
            "diskSizeMB", (json_int_t)l.disk_mib, "metadata",
            rec->metadata ? json_incref(rec->metadata) : json_object(), "state", state_of(rec),
            "envdVersion", ENVD_VERSION);
        if (detail) {
                /* a caller that a store API key authenticated gets a token
                 * bound to that key: deleting the key ends what it opens */
                char tok[E2B_TOKEN_MAX + 1];
                if (e2b_access_token(r->srv, rec, r->key_id, tok, NULL) == 0)
                        json_object_set_new(j, "envdAccessToken", json_string(tok));
                const char *dom = r->srv->cfg->ports_domain;
                json_object_set_new(j, "domain", dom && *dom ? json_string(dom) : json_null());
        }
        return j;
}

/* The answer to a create or connect: E2B's Sandbox. */
static enum MHD_Result sandbox_answer(ab_req *r, unsigned status, const ab_box_rec *rec)
{
        json_t *j = sandbox_json(r, rec, true);
        return resp_json(r, status, j);
}

/* A fresh sandbox id, as E2B's look: 20 lowercase letters and digits. */
static void new_id(char out[21])
{
        static const char abc[] = "abcdefghijklmnopqrstuvwxyz0123456789";
        unsigned char rnd[20];
        ab_random_bytes(rnd, sizeof(rnd));
        out[0] = abc[rnd[0] % 26]; /* a letter first */
        for (int i = 1; i < 20; i++)
                out[i] = abc[rnd[i] % 36];
        out[20] = 0;
}

/* Every value of o a string (metadata, envVars); AB_E_INVALID otherwise. */
static int strings_only(json_t *o, const char *what, ab_err **err)
{
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v)
        {
                if (!json_is_string(v))
                        return ab_err_set(err, AB_E_INVALID, 0, "%s.%s: must be a string", what, k);
        }
        return 0;
}

/* What a new sandbox's TTL holds while it is being set up (created, its
 * account `user` made): its own timeout is then set counted from the answer. */
#define SETUP_MARGIN_S 600

/* POST /v2/sandboxes (and /sandboxes) {templateID, timeout, metadata,
 * envVars, autoPause, allow_internet_access, ...} -> 201 Sandbox. */
enum MHD_Result e2b_create(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return e2b_err(r, e);
        const char *tpl = NULL;
        json_t *meta = NULL, *envs = NULL;
        int64_t timeout = DEFAULT_TIMEOUT_S;
        bool has_timeout = false;
        if (field_str(body, "templateID", &tpl, &e) < 0 ||
            field_obj(body, "metadata", &meta, &e) < 0 ||
            field_obj(body, "envVars", &envs, &e) < 0 ||
            field_int(body, "timeout", &timeout, &has_timeout, &e) < 0 ||
            (meta && strings_only(meta, "metadata", &e) < 0) ||
            (envs && strings_only(envs, "envVars", &e) < 0)) {
                json_decref(body);
                return e2b_err(r, e); /* invalid input: 400 */
        }
        if (!has_timeout)
                timeout = DEFAULT_TIMEOUT_S;
        if (timeout <= 0 || timeout > 86400 * 30) {
                json_decref(body);
                return e2b_error(r, 400, "timeout: must be 1..%d seconds", 86400 * 30);
        }
        bool auto_pause = json_is_true(json_object_get(body, "autoPause"));
        json_t *net = NULL;
        if (json_is_true(json_object_get(body, "allow_internet_access")))
                net = json_pack("{s:s}", "mode", "full");
        if (json_object_get(body, "volumeMounts") &&
            json_array_size(json_object_get(body, "volumeMounts")) > 0) {
                json_decref(body);
                return e2b_error(r, 501,
                                 "volumeMounts: not supported by agentbox's E2B front; "
                                 "use agentbox's volumes through /v1/sandboxes");
        }
        char sid[21];
        new_id(sid);
        ab_acquire_req q = {
            .id = sid,
            .env = envs,
            .metadata = meta,
            .network = net,
            .image = tpl && *tpl && strcmp(tpl, "base") ? tpl : NULL,
            .idle_pause_s = -1, /* an E2B sandbox lives until its timeout */
            .idle_stop_s = -1,
            .has_ttl = true,
            /* set again, counted from the answer, once the box is ready: a
             * create slower than the timeout must not find it expired */
            .ttl_s = timeout + SETUP_MARGIN_S,
        };
        ab_box_rec rec;
        bool created;
        int rc = ab_manager_acquire(r->srv->mgr, &q, r->scope, &rec, &created, &e);
        if (rc < 0 && net && e->code == AB_E_UNSUPPORTED) {
                /* E2B's SDK 2.45 asks for the internet on every create: a
                 * server that has no full network (config network.full:
                 * false, no iptables) gives its default network instead.
                 * An app's ceiling (allowed_network) still refuses it. */
                ab_err_free(&e);
                new_id(sid);
                q.network = NULL;
                rc = ab_manager_acquire(r->srv->mgr, &q, r->scope, &rec, &created, &e);
        }
        json_decref(net);
        json_decref(body);
        if (rc < 0) {
                if (e->code == AB_E_NOT_FOUND)
                        return e2b_error(r, 400, "template %s: %s", tpl ? tpl : "base", e->msg);
                return e2b_err(r, e);
        }
        e2b_user_setup(r->srv, sid);
        ab_box_rec_clear(&rec);
        if (ab_manager_set_ttl(r->srv->mgr, sid, r->scope, timeout, auto_pause ? "pause" : NULL,
                               &rec, &e) < 0) {
                ab_manager_delete(r->srv->mgr, sid, r->scope, NULL);
                return e2b_err(r, e);
        }
        enum MHD_Result ret = sandbox_answer(r, 201, &rec);
        ab_box_rec_clear(&rec);
        return ret;
}

static bool state_match(const ab_box_rec *rec, const char *states)
{
        if (!states || !*states)
                return true;
        _cleanup_free_ char *f = xstrdup(states);
        char *save = NULL;
        for (char *s = strtok_r(f, ",", &save); s; s = strtok_r(NULL, ",", &save))
                if (!strcmp(s, state_of(rec)))
                        return true;
        return false;
}

static int by_start(const void *a, const void *b)
{
        const ab_box_rec *x = a, *y = b;
        return x->created_at < y->created_at ? -1 : x->created_at > y->created_at;
}

/* GET /v2/sandboxes[?metadata=&state=&template=&startedAfter=&order=&limit=&nextToken=] (and
 * /sandboxes): the caller's boxes, E2B's ListedSandbox each, by start time
 * (order asc or desc: newest first, the default); with a limit, pages linked
 * by the x-next-token header (the offset of the next page). */
enum MHD_Result e2b_list(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        ab_box_filter f = {0};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        const char *ls = req_query(r, "limit"), *ts = req_query(r, "nextToken");
        const char *order = req_query(r, "order");
        char *end = NULL;
        long long limit = ls ? strtoll(ls, &end, 10) : 0;
        if (ls && (end == ls || *end || limit < 0 || limit > 100000))
                return e2b_error(r, 400, "limit: a number of sandboxes");
        long long skip = ts ? strtoll(ts, &end, 10) : 0;
        if (ts && (end == ts || *end || skip < 0))
                return e2b_error(r, 400, "nextToken: not a token of this server");
        if (order && strcmp(order, "asc") && strcmp(order, "desc"))
                return e2b_error(r, 400, "order: asc or desc");
        if (ab_manager_list(r->srv->mgr, &f, r->scope, &rs, &n, &e) < 0)
                return e2b_err(r, e);
        if (n > 1) /* no boxes: rs is NULL, which qsort must not get */
                qsort(rs, n, sizeof(*rs), by_start);
        bool desc = !order || !strcmp(order, "desc");
        const char *meta = req_query(r, "metadata");
        const char *state = req_query(r, "state");
        const char *tpl = req_query(r, "template");
        const char *after = req_query(r, "startedAfter");
        int64_t after_ms = 0;
        if (after && *after && ab_time_parse_rfc3339(after, &after_ms) < 0) {
                ab_box_recs_free(rs, n);
                return e2b_error(r, 400, "startedAfter: an RFC 3339 time");
        }
        json_t *a = json_array();
        long long seen = 0;
        bool more = false;
        for (size_t k = 0; k < n; k++) {
                ab_box_rec *b = &rs[desc ? n - 1 - k : k];
                if (b->status == AB_BOX_DELETING || b->status == AB_BOX_CREATING ||
                    !kit_meta_match(b->metadata, meta, NULL) || !state_match(b, state) ||
                    (tpl && *tpl && strcmp(tpl, template_of(b))) || b->created_at <= after_ms)
                        continue;
                if (seen++ < skip)
                        continue;
                if (limit && (long long)json_array_size(a) == limit) {
                        more = true;
                        break;
                }
                json_array_append_new(a, sandbox_json(r, b, false));
        }
        ab_box_recs_free(rs, n);
        char *txt = json_dumps(a, JSON_COMPACT);
        json_decref(a);
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(resp, "Content-Type", "application/json");
        if (more) {
                char next[32];
                snprintf(next, sizeof(next), "%lld", skip + limit);
                MHD_add_response_header(resp, "x-next-token", next);
        }
        return resp_send(r, 200, resp);
}

/* The box, or an answer: 404 in E2B's shape for a missing or deleted one. */
static int get_box(ab_req *r, const char *id, ab_box_rec *rec, enum MHD_Result *ret)
{
        ab_err *e = NULL;
        if (ab_manager_get(r->srv->mgr, id, r->scope, rec, &e) < 0) {
                *ret = e2b_err(r, e);
                return -1;
        }
        if (rec->status == AB_BOX_DELETING) {
                ab_box_rec_clear(rec);
                *ret = e2b_error(r, 404, "sandbox %s not found", id);
                return -1;
        }
        return 0;
}

enum MHD_Result e2b_get(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        ab_box_rec rec;
        if (get_box(r, id, &rec, &ret) < 0)
                return ret;
        json_t *j = sandbox_json(r, &rec, true);
        ab_box_rec_clear(&rec);
        return resp_json(r, 200, j);
}

/* DELETE /sandboxes/{id}: kill = delete (204; 404 when unknown). */
enum MHD_Result e2b_kill(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        ab_box_rec rec;
        if (get_box(r, id, &rec, &ret) < 0)
                return ret;
        ab_box_rec_clear(&rec);
        envd_forget_box(id);
        ab_err *e = NULL;
        if (ab_manager_delete(r->srv->mgr, id, r->scope, &e) < 0)
                return e2b_err(r, e);
        return no_content(r);
}

/* POST /sandboxes/{id}/timeout {timeout}: the sandbox ends timeout seconds
 * from now. */
enum MHD_Result e2b_timeout(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return e2b_err(r, e);
        int64_t t = 0;
        bool p = false;
        int rc = field_int(body, "timeout", &t, &p, &e);
        json_decref(body);
        if (rc < 0 || !p || t < 0) {
                ab_err_free(&e);
                return e2b_error(r, 400, "timeout: required, in seconds");
        }
        enum MHD_Result ret;
        ab_box_rec rec;
        if (get_box(r, id, &rec, &ret) < 0)
                return ret;
        ab_box_rec_clear(&rec);
        if (ab_manager_set_ttl(r->srv->mgr, id, r->scope, t > 0 ? t : 1, NULL, NULL, &e) < 0)
                return e2b_err(r, e);
        return no_content(r);
}

/* POST /sandboxes/{id}/pause: 204; 409 when paused already. */
enum MHD_Result e2b_pause(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        ab_box_rec rec;
        if (get_box(r, id, &rec, &ret) < 0)
                return ret;
        ab_box_status st = rec.status;
        ab_box_rec_clear(&rec);
        if (st == AB_BOX_PAUSED || st == AB_BOX_STOPPED)
                return e2b_error(r, 409, "sandbox %s is paused already", id);
        ab_err *e = NULL;
        if (ab_manager_pause(r->srv->mgr, id, r->scope, NULL, &e) < 0) {
                /* 409 means "paused already" to the SDK: a busy box is not that */
                if (e->code == AB_E_CONFLICT) {
                        ret = e2b_error(r, 400, "%s", e->msg);
                        ab_err_free(&e);
                        return ret;
                }
                if (e->code != AB_E_UNSUPPORTED)
                        return e2b_err(r, e);
                /* no freezer on this host: keep the files, as E2B's pause does */
                ab_err_free(&e);
                if (ab_manager_stop(r->srv->mgr, id, r->scope, NULL, &e) < 0)
                        return e2b_err(r, e);
        }
        return no_content(r);
}

/* POST /v2/sandboxes/{id}/connect {timeout} (SDK 2.51; /sandboxes/{id}/connect
 * of SDK 2.45 and the older /sandboxes/{id}/resume): resumes a paused (or
 * starts a stopped) box and extends its timeout to at least timeout seconds
 * from now (never shortens it, as E2B's connect); 201 when it had to be
 * resumed, else 200. */
enum MHD_Result e2b_connect(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return e2b_err(r, e);
        int64_t t = 0;
        bool has_t = false;
        int rc = field_int(body, "timeout", &t, &has_t, &e);
        json_decref(body);
        if (rc < 0)
                return e2b_err(r, e); /* a bad timeout: 400 */
        enum MHD_Result ret;
        ab_box_rec rec;
        if (get_box(r, id, &rec, &ret) < 0) /* a box being deleted is gone: 404 */
                return ret;
        ab_box_rec_clear(&rec);
        bool resumed = false; /* decided under the box's lock, not from rec */
        if (ab_manager_ensure_running(r->srv->mgr, id, r->scope, &resumed, NULL, &e) < 0)
                return e2b_err(r, e);
        /* A connect sets the timeout when given, and restarts it after a
         * pause at the timeout (autoPause cleared it). */
        int64_t secs = has_t && t > 0 ? t : 0;
        ab_box_rec cur;
        if (get_box(r, id, &cur, &ret) < 0)
                return ret;
        if (!secs && cur.ttl_s == 0)
                secs = DEFAULT_TIMEOUT_S;
        if (secs && cur.ttl_s > 0 && cur.created_at + cur.ttl_s * 1000 >= wall_ms() + secs * 1000)
                secs = 0; /* it ends later already */
        if (secs) {
                ab_box_rec_clear(&cur);
                if (ab_manager_set_ttl(r->srv->mgr, id, r->scope, secs, NULL, &cur, &e) < 0)
                        return e2b_err(r, e);
        }
        ret = sandbox_answer(r, resumed ? 201 : 200, &cur);
        ab_box_rec_clear(&cur);
        return ret;
}

/* GET /sandboxes/{id}/metrics: one sample, now. */
enum MHD_Result e2b_metrics(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        ab_box_rec rec;
        if (get_box(r, id, &rec, &ret) < 0)
                return ret;
        json_t *a = json_array();
        ab_box_stats st;
        if ((rec.status == AB_BOX_RUNNING || rec.status == AB_BOX_PAUSED) &&
            ab_manager_stats(r->srv->mgr, &rec, &st, NULL) == 0) {
                ab_limits l = r->srv->cfg->limits;
                if (rec.has_limits)
                        l = rec.limits;
                int64_t now = wall_ms();
                /* CPU: the average since the box was made (one sample has no interval) */
                double cpus = l.cpus >= 1 ? l.cpus : 1;
                double secs = (double)(now - rec.created_at) / 1000.0;
                double pct = secs > 0 ? (double)st.cpu_usage_ns / 1e9 / secs / cpus * 100.0 : 0;
                json_array_append_new(
                    a,
                    json_pack("{s:o,s:f,s:i,s:I,s:I,s:I,s:I,s:I}", "timestamp", iso_time(now),
                              "cpuUsedPct", pct > 100 ? 100.0 : pct, "cpuCount",
                              (int)(l.cpus >= 1 ? l.cpus : 1), "memUsed",
                              (json_int_t)st.memory_bytes, "memTotal",
                              (json_int_t)(st.memory_limit ? st.memory_limit : l.memory_mib << 20),
                              "memCache", (json_int_t)0, "diskUsed", (json_int_t)st.disk_used_bytes,
                              "diskTotal", (json_int_t)st.disk_limit_bytes));
        }
        ab_box_rec_clear(&rec);
        return resp_json(r, 200, a);
}

/* One failed copy in a fork's answer: {"error": {code, message}} (frees *e). */
static void fork_error(json_t *a, ab_err **e)
{
        json_array_append_new(a, json_pack("{s:{s:i,s:o}}", "error", "code",
                                           (int)status_of((*e)->code), "message",
                                           json_bytes((*e)->msg, strlen((*e)->msg))));
        ab_err_free(e);
}

/* POST /sandboxes/{id}/fork {timeout, count}: count copies of the box's
 * files (agentbox forks disks, not memory: the copies start fresh). */
enum MHD_Result e2b_fork(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return e2b_err(r, e);
        int64_t t = DEFAULT_TIMEOUT_S, count = 1;
        bool p;
        if (field_int(body, "timeout", &t, &p, &e) < 0 ||
            field_int(body, "count", &count, &p, &e) < 0) {
                json_decref(body);
                return e2b_err(r, e); /* invalid input: 400 */
        }
        json_decref(body);
        if (count < 1 || count > 16)
                return e2b_error(r, 400, "count: 1..16");
        if (t <= 0)
                t = DEFAULT_TIMEOUT_S;
        enum MHD_Result ret;
        ab_box_rec src;
        if (get_box(r, id, &src, &ret) < 0)
                return ret;
        json_t *a = json_array();
        for (int64_t i = 0; i < count; i++) {
                char sid[21];
                new_id(sid);
                ab_acquire_req q = {.id = sid,
                                    .metadata = src.metadata, /* E2B's forks keep it */
                                    .idle_pause_s = -1,
                                    .idle_stop_s = -1,
                                    .has_ttl = true,
                                    .ttl_s = t + SETUP_MARGIN_S}; /* set again below */
                ab_box_rec rec;
                if (ab_manager_fork(r->srv->mgr, id, &q, r->scope, &rec, &e) < 0) {
                        fork_error(a, &e);
                        continue;
                }
                e2b_user_setup(r->srv, sid);
                ab_box_rec_clear(&rec);
                if (ab_manager_set_ttl(r->srv->mgr, sid, r->scope, t, NULL, &rec, &e) < 0) {
                        ab_manager_delete(r->srv->mgr, sid, r->scope, NULL);
                        fork_error(a, &e);
                        continue;
                }
                json_array_append_new(a,
                                      json_pack("{s:o}", "sandbox", sandbox_json(r, &rec, true)));
                ab_box_rec_clear(&rec);
        }
        ab_box_rec_clear(&src);
        return resp_json(r, 200, a);
}

/* POST /sandboxes/{id}/snapshots {name}: an image of the box (agentbox's
 * snapshot: a box made from an image, with what it changed as a new layer);
 * its name is a templateID for new sandboxes. */
enum MHD_Result e2b_snapshot(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return e2b_err(r, e);
        const char *name = NULL;
        if (field_str(body, "name", &name, &e) < 0) {
                json_decref(body);
                return e2b_err(r, e); /* invalid input: 400 */
        }
        char gen[40];
        if (!name || !*name) {
                char sid[21];
                new_id(sid);
                snprintf(gen, sizeof(gen), "snapshot-%s:latest", sid);
                name = gen;
        }
        ab_image img;
        int rc = ab_manager_snapshot(r->srv->mgr, id, r->scope, name, &img, &e);
        ab_image_clear(&img);
        /* the name as given is the templateID */
        json_t *ans = rc < 0 ? NULL : json_pack("{s:s,s:[s]}", "snapshotID", name, "names", name);
        json_decref(body); /* name may point into it */
        return rc < 0 ? e2b_err(r, e) : resp_json(r, 201, ans);
}

/* PUT /sandboxes/{id}/network {allowOut, denyOut}: agentbox's network
 * policy: nothing denied or allowOut given = an allowlist (or full when it
 * is empty and nothing is denied); denyOut of everything = none. */
enum MHD_Result e2b_network(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return e2b_err(r, e);
        json_t *allow = json_object_get(body, "allowOut");
        json_t *deny = json_object_get(body, "denyOut");
        json_t *pol;
        if (json_array_size(allow) > 0)
                pol = json_pack("{s:s,s:O}", "mode", "allowlist", "allow", allow);
        else if (json_array_size(deny) > 0)
                pol = json_pack("{s:s}", "mode", "none");
        else
                pol = json_pack("{s:s}", "mode", "full");
        json_decref(body);
        ab_box_rec rec;
        int rc = ab_manager_set_network(r->srv->mgr, id, r->scope, pol, &rec, &e);
        json_decref(pol);
        if (rc < 0)
                return e2b_err(r, e);
        ab_box_rec_clear(&rec);
        return no_content(r);
}

enum MHD_Result e2b_unsupported(ab_req *r, const char *id)
{
        return e2b_error(r, 501,
                         "%s /%s: not supported by agentbox's E2B front "
                         "(docs/compat-e2b.md)",
                         r->method, r->path);
}
