/* The OpenSandbox lifecycle API under /opensandbox/v1 (OpenSandbox's
 * specs/sandbox-lifecycle.yml as its JS SDK calls it): create, get, list,
 * delete, pause, resume, renew-expiration, metadata, endpoints. A thin
 * adapter: every request becomes one manager call with the caller's scope.
 * docs/compat-opensandbox.md says what maps to what. */
#include "fronts/opensandbox/front_osb.h"
#include "base/log.h"
#include "kit/parse.h"
#include "base/codec.h"
#include "base/id.h"
#include "base/mounts.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <time.h>

/* Metadata keys OpenSandbox reserves; the front keeps what the SDK sent and
 * agentbox has no field for (the image's name, the entrypoint) under them,
 * and never shows them as metadata. */
#define OSB_META_PREFIX "opensandbox.io/"
#define META_IMAGE      OSB_META_PREFIX "image"
#define META_ENTRYPOINT OSB_META_PREFIX "entrypoint"

#define LIST_PAGE_SIZE 20
#define LIST_PAGE_MAX  1000

/* ---- shared helpers ---------------------------------------------------- */

enum MHD_Result osb_error(ab_req *r, unsigned status, const char *code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *msg = NULL;
        if (vasprintf(&msg, fmt, ap) < 0)
                abort();
        va_end(ap);
        ab_metrics_error(r->srv->metrics, code);
        return resp_json(
            r, status,
            json_pack("{s:s,s:o}", "code", code, "message", json_bytes(msg, strlen(msg))));
}

enum MHD_Result osb_err(ab_req *r, ab_err *e, const char *prefix)
{
        char code[64];
        snprintf(code, sizeof(code), "%s%s", prefix, ab_code_name(e->code));
        for (char *c = code; *c; c++)
                *c = (char)toupper((unsigned char)*c);
        unsigned st = status_of(e->code);
        if (e->code == AB_E_UNSUPPORTED)
                snprintf(code, sizeof(code), "%sAPI_NOT_SUPPORTED", prefix);
        enum MHD_Result ret = osb_error(r, st, code, "%s", e->msg);
        ab_err_free(&e);
        return ret;
}

typedef struct query_ctx {
        const char *key;
        json_t *out;
} query_ctx;

static enum MHD_Result query_each(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
        query_ctx *c = cls;
        if (key && !strcmp(key, c->key))
                json_array_append_new(c->out, json_string(value ? value : ""));
        return MHD_YES;
}

json_t *osb_query_all(ab_req *r, const char *key)
{
        query_ctx c = {.key = key, .out = json_array()};
        MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, query_each, &c);
        return c.out;
}

int64_t osb_wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the box as OpenSandbox shows it ----------------------------------- */

/* OpenSandbox's state of a box. A stopped box is "Paused" (its files are
 * kept and any use or a resume starts it again); a box being deleted is
 * gone already (NULL): OpenSandbox answers 404 once a delete was accepted. */
static const char *osb_state(ab_box_status s)
{
        switch (s) {
        case AB_BOX_CREATING:
                return "Pending";
        case AB_BOX_RUNNING:
                return "Running";
        case AB_BOX_PAUSED:
        case AB_BOX_STOPPED:
                return "Paused";
        case AB_BOX_ERROR:
                return "Failed";
        default:
                return NULL;
        }
}

static json_t *user_metadata(const ab_box_rec *rec)
{
        json_t *m = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(rec->metadata, k, v)
        {
                if (strncmp(k, OSB_META_PREFIX, strlen(OSB_META_PREFIX)) != 0 && json_is_string(v))
                        json_object_set(m, k, v);
        }
        return m;
}

static json_t *box_entrypoint(const ab_box_rec *rec)
{
        const char *txt = json_string_value(json_object_get(rec->metadata, META_ENTRYPOINT));
        json_t *ep = txt ? json_loads(txt, 0, NULL) : NULL;
        if (json_is_array(ep))
                return ep;
        json_decref(ep);
        ep = json_object_get(rec->spec, "entrypoint");
        return json_is_array(ep) ? json_incref(ep) : json_array();
}

/* The Sandbox object (full: with image), or NULL for a box being deleted. */
static json_t *osb_box_json(const ab_box_rec *rec, bool full)
{
        const char *state = osb_state(rec->status);
        if (!state)
                return NULL;
        char created[AB_TIME_LEN];
        ab_time_rfc3339(rec->created_at, true, created);
        json_t *status = json_pack("{s:s}", "state", state);
        if (rec->status == AB_BOX_STOPPED)
                json_object_set_new(status, "reason", json_string("stopped"));
        if (rec->error)
                json_object_set_new(status, "message", json_string(rec->error));
        json_t *j =
            json_pack("{s:s,s:o,s:o,s:o,s:s}", "id", rec->id, "status", status, "metadata",
                      user_metadata(rec), "entrypoint", box_entrypoint(rec), "createdAt", created);
        if (rec->ttl_s > 0) {
                char exp[AB_TIME_LEN];
                ab_time_rfc3339(rec->created_at + rec->ttl_s * 1000, true, exp);
                json_object_set_new(j, "expiresAt", json_string(exp));
        }
        if (full) {
                const char *uri = json_string_value(json_object_get(rec->metadata, META_IMAGE));
                json_t *img = json_object_get(rec->spec, "image");
                if (!uri && json_is_object(img))
                        uri = json_string_value(json_object_get(img, "ref"));
                json_object_set_new(j, "image", json_pack("{s:s}", "uri", uri ? uri : "base"));
        }
        return j;
}

/* ---- create ------------------------------------------------------------ */

/* "500m" -> 0.5, "2" -> 2 (Kubernetes CPU quantities). */
int osb_parse_cpu(const char *s, double *out)
{
        char *end;
        double v = strtod(s, &end);
        if (end == s || !isfinite(v) || v <= 0)
                return -1;
        if (*end == 'm') {
                v /= 1000;
                end++;
        }
        if (*end)
                return -1;
        *out = v;
        return 0;
}

/* "512Mi", "2Gi", "1G", "1048576" (bytes) -> MiB, rounded up. */
int osb_parse_mib(const char *s, uint64_t *out)
{
        char *end;
        double v = strtod(s, &end);
        if (end == s || !isfinite(v) || v <= 0)
                return -1;
        static const struct {
                const char *suffix;
                double bytes;
        } units[] = {{"", 1},
                     {"Ki", 1024.0},
                     {"Mi", 1048576.0},
                     {"Gi", 1073741824.0},
                     {"Ti", 1099511627776.0},
                     {"k", 1e3},
                     {"K", 1e3},
                     {"M", 1e6},
                     {"G", 1e9},
                     {"T", 1e12}};
        for (size_t i = 0; i < AB_ARRAY_LEN(units); i++) {
                if (strcmp(end, units[i].suffix))
                        continue;
                double mib = ceil(v * units[i].bytes / 1048576.0);
                if (mib < 1 || mib > 1e9)
                        return -1;
                *out = (uint64_t)mib;
                return 0;
        }
        return -1;
}

static int parse_resources(json_t *o, const ab_limits *defaults, ab_limits *lim, ab_err **err)
{
        *lim = *defaults;
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v)
        {
                const char *s = json_string_value(v);
                if (!s)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "resourceLimits.%s: must be a string", k);
                int rc = 0;
                if (!strcmp(k, "cpu"))
                        rc = osb_parse_cpu(s, &lim->cpus);
                else if (!strcmp(k, "memory"))
                        rc = osb_parse_mib(s, &lim->memory_mib);
                else if (!strcmp(k, "disk") || !strcmp(k, "ephemeral-storage"))
                        rc = osb_parse_mib(s, &lim->disk_mib);
                else if (!strcmp(k, "gpu") || !strcmp(k, "nvidia.com/gpu")) {
                        if (strcmp(s, "0"))
                                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                                  "resourceLimits.%s: this server has no GPUs", k);
                } /* other resources: nothing agentbox limits */
                if (rc < 0)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "resourceLimits.%s: \"%s\" is not a quantity (e.g. "
                                          "\"500m\" cpu, \"512Mi\" memory)",
                                          k, s);
        }
        return 0;
}

/* networkPolicy -> agentbox's network object (a new reference), or NULL
 * (absent: the server's default mode, which is none unless configured). */
int osb_parse_network(json_t *np, json_t **out, ab_err **err)
{
        *out = NULL;
        if (!np || json_is_null(np))
                return 0;
        if (!json_is_object(np))
                return ab_err_set(err, AB_E_INVALID, 0, "networkPolicy: must be an object");
        const char *def = json_string_value(json_object_get(np, "defaultAction"));
        if (!def)
                def = "deny";
        if (strcmp(def, "allow") && strcmp(def, "deny"))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "networkPolicy.defaultAction: must be \"allow\" or \"deny\"");
        json_t *allow = json_array(), *deny = json_array();
        json_t *rules = json_object_get(np, "egress");
        size_t i;
        json_t *rule;
        json_array_foreach(rules, i, rule)
        {
                const char *action = json_string_value(json_object_get(rule, "action"));
                const char *target = json_string_value(json_object_get(rule, "target"));
                if (!action || !target || (strcmp(action, "allow") && strcmp(action, "deny"))) {
                        json_decref(allow);
                        json_decref(deny);
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "networkPolicy.egress[%zu]: needs action "
                                          "(\"allow\"|\"deny\") and target",
                                          i);
                }
                json_array_append_new(strcmp(action, "allow") ? deny : allow, json_string(target));
        }
        if (!strcmp(def, "allow")) {
                if (json_array_size(deny)) {
                        json_decref(allow);
                        json_decref(deny);
                        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                          "networkPolicy: deny rules under defaultAction \"allow\" "
                                          "are not enforced by this server; use defaultAction "
                                          "\"deny\" with allow rules");
                }
                json_decref(allow);
                json_decref(deny);
                *out = json_pack("{s:s}", "mode", "full");
                return 0;
        }
        if (!json_array_size(allow)) {
                json_decref(allow);
                json_decref(deny);
                *out = json_pack("{s:s}", "mode", "none");
                return 0;
        }
        *out = json_pack("{s:s,s:o,s:o}", "mode", "allowlist", "allow", allow, "deny", deny);
        return 0;
}

/* OpenSandbox volumes -> agentbox volumes (pvc: a named volume) and mounts
 * (host: a host directory; the manager decides who may). */
int osb_parse_volumes(json_t *vols, json_t **volumes, json_t **mounts, ab_err **err)
{
        *volumes = NULL;
        *mounts = NULL;
        if (!vols || json_is_null(vols))
                return 0;
        if (!json_is_array(vols))
                return ab_err_set(err, AB_E_INVALID, 0, "volumes: must be a list");
        json_t *vs = json_array(), *ms = json_array();
        size_t i;
        json_t *v;
        json_array_foreach(vols, i, v)
        {
                const char *path = json_string_value(json_object_get(v, "mountPath"));
                bool ro = json_is_true(json_object_get(v, "readOnly"));
                json_t *pvc = json_object_get(v, "pvc"), *host = json_object_get(v, "host");
                const char *claim = json_string_value(json_object_get(pvc, "claimName"));
                const char *hp = json_string_value(json_object_get(host, "path"));
                json_t *subj = json_object_get(v, "subPath");
                const char *sub = json_string_value(subj);
                if ((subj && !json_is_null(subj) && !sub) ||
                    (sub && *sub && ab_volume_sub_check(sub, err) < 0)) {
                        json_decref(vs);
                        json_decref(ms);
                        if (!*err)
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "volumes[%zu].subPath: must be a string", i);
                        return ab_err_wrap(err, "volumes[%zu]", i);
                }
                if (sub && !*sub)
                        sub = NULL;
                if (path && claim) {
                        /* the volume's folder sub, made when missing, as a PVC's subPath */
                        json_t *o = json_pack("{s:s,s:s,s:b}", "name", claim, "path", path,
                                              "read_only", ro);
                        if (sub)
                                json_object_set_new(o, "sub_path", json_string(sub));
                        json_array_append_new(vs, o);
                } else if (path && hp) {
                        /* host path + subPath; the manager checks the result's real path
                         * against host_mount_prefixes */
                        _cleanup_free_ char *full = sub ? xasprintf("%s/%s", hp, sub) : xstrdup(hp);
                        json_array_append_new(ms, json_pack("{s:s,s:s,s:b}", "host_path", full,
                                                            "path", path, "read_only", ro));
                } else {
                        json_decref(vs);
                        json_decref(ms);
                        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                          "volumes[%zu]: only pvc (a named volume) and host "
                                          "volumes with a mountPath are supported",
                                          i);
                }
        }
        *volumes = vs;
        *mounts = ms;
        return 0;
}

/* Names that mean the server's host base rather than an image of the store. */
static bool is_base_image(const char *uri)
{
        static const char *const names[] = {
            "", "base", "base:latest", "host", "agentbox/base", "agentbox/base:latest", NULL};
        for (const char *const *n = names; *n; n++)
                if (!strcmp(uri, *n))
                        return true;
        return false;
}

typedef struct create_req {
        ab_acquire_req q;
        ab_limits lim;
        char id[24];
        json_t *meta, *network, *volumes, *mounts, *entrypoint;
} create_req;

static void create_req_clear(create_req *c)
{
        json_decref(c->meta);
        json_decref(c->network);
        json_decref(c->volumes);
        json_decref(c->mounts);
        json_decref(c->entrypoint);
}

static int parse_create(ab_server *s, json_t *body, create_req *c, ab_err **err)
{
        memset(c, 0, sizeof(*c));
        const char *uri = NULL;
        json_t *img = json_object_get(body, "image");
        if (json_is_object(img))
                uri = json_string_value(json_object_get(img, "uri"));
        else if (json_is_string(img))
                uri = json_string_value(img);
        const char *snap = json_string_value(json_object_get(body, "snapshotId"));
        if (!uri && snap)
                uri = snap; /* a snapshot is an image of the store */
        if (!uri)
                return ab_err_set(err, AB_E_INVALID, 0, "image.uri: required");
        c->q.image = is_base_image(uri) ? NULL : uri;
        c->meta = json_object();
        json_t *md = json_object_get(body, "metadata");
        const char *k;
        json_t *v;
        json_object_foreach(md, k, v)
        {
                if (!json_is_string(v))
                        return ab_err_set(err, AB_E_INVALID, 0, "metadata.%s: must be a string", k);
                if (!strncmp(k, OSB_META_PREFIX, strlen(OSB_META_PREFIX)))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "metadata.%s: keys starting with %s are reserved", k,
                                          OSB_META_PREFIX);
                json_object_set(c->meta, k, v);
        }
        json_object_set_new(c->meta, META_IMAGE, json_string(uri));
        json_t *ep = json_object_get(body, "entrypoint");
        if (ep && !json_is_null(ep)) {
                if (!json_is_array(ep))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "entrypoint: must be a list of strings");
                char *txt = json_dumps(ep, JSON_COMPACT);
                json_object_set_new(c->meta, META_ENTRYPOINT, json_string(txt ? txt : "[]"));
                free(txt);
                /* The SDK's default only keeps a container alive: an agentbox
                 * box lives without a program, so it is not run. */
                bool keepalive =
                    json_array_size(ep) == 3 &&
                    !strcmp(json_string_value(json_array_get(ep, 0)) ?: "", "tail") &&
                    !strcmp(json_string_value(json_array_get(ep, 1)) ?: "", "-f") &&
                    !strcmp(json_string_value(json_array_get(ep, 2)) ?: "", "/dev/null");
                if (json_array_size(ep) && !keepalive)
                        c->entrypoint = json_incref(ep);
        }
        c->q.entrypoint = c->entrypoint;
        json_t *res = json_object_get(body, "resourceLimits");
        if (json_is_object(res)) {
                if (parse_resources(res, &s->cfg->limits, &c->lim, err) < 0)
                        return -1;
                c->q.limits = &c->lim;
        }
        json_t *env = json_object_get(body, "env");
        if (env && !json_is_null(env)) {
                if (!json_is_object(env))
                        return ab_err_set(err, AB_E_INVALID, 0, "env: must be an object");
                c->q.env = env;
        }
        json_t *to = json_object_get(body, "timeout");
        c->q.has_ttl = true; /* no timeout: the box lives until deleted */
        if (json_is_integer(to) || json_is_real(to)) {
                double t = json_number_value(to);
                if (t < 1 || t > 1e9)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "timeout: must be a number of seconds >= 1");
                c->q.ttl_s = (int64_t)ceil(t);
        }
        if (osb_parse_network(json_object_get(body, "networkPolicy"), &c->network, err) < 0 ||
            osb_parse_volumes(json_object_get(body, "volumes"), &c->volumes, &c->mounts, err) < 0)
                return -1;
        c->q.network = c->network;
        c->q.volumes = c->volumes;
        c->q.mounts = c->mounts;
        c->q.metadata = c->meta;
        ab_random_hex(c->id, sizeof(c->id), "osb-", 8);
        c->q.id = c->id;
        return 0;
}

/* A pvc volume is a named volume; one that does not exist is made first
 * unless createIfNotExists is false (its size: storage, else the default
 * disk size). */
static int ensure_volumes(ab_req *r, json_t *vols, ab_err **err)
{
        size_t i;
        json_t *v;
        json_array_foreach(vols, i, v)
        {
                json_t *pvc = json_object_get(v, "pvc");
                const char *claim = json_string_value(json_object_get(pvc, "claimName"));
                if (!claim || json_is_false(json_object_get(pvc, "createIfNotExists")))
                        continue;
                ab_volume_info vi = {0};
                ab_err *e = NULL;
                if (ab_manager_volume_get(r->srv->mgr, claim, r->scope, &vi, &e) == 0) {
                        ab_volume_info_clear(&vi);
                        continue;
                }
                if (e->code != AB_E_NOT_FOUND) {
                        *err = e;
                        return -1;
                }
                ab_err_free(&e);
                uint64_t mib = 0;
                const char *storage = json_string_value(json_object_get(pvc, "storage"));
                if (storage && osb_parse_mib(storage, &mib) < 0)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "volumes[%zu].pvc.storage: \"%s\" is not a quantity", i,
                                          storage);
                if (ab_manager_volume_create(r->srv->mgr, claim, mib, r->scope, &vi, &e) < 0 &&
                    e->code != AB_E_CONFLICT) { /* made meanwhile by another create: fine */
                        *err = e;
                        return -1;
                }
                ab_err_free(&e);
                ab_volume_info_clear(&vi);
        }
        return 0;
}

static bool snap_of(const ab_image *img, const char *app, const char **box, size_t *box_len,
                    const char **tag, const char **stored);
static bool snap_visible(ab_req *r, const char *box, size_t box_len);

/* An API key starts boxes only from snapshots of its own app's boxes: a
 * snapshot holds a box's files. */
static int check_snapshot_source(ab_req *r, const char *image, ab_err **err)
{
        ab_image img;
        if (!r->scope || !image || ab_manager_image_get(r->srv->mgr, NULL, image, &img, NULL) < 0)
                return 0; /* the admin's view: to tell a hidden snapshot */
        const char *box, *tag;
        size_t bl;
        bool hidden = !ab_image_visible(&img, r->scope) ||
                      (snap_of(&img, r->scope, &box, &bl, &tag, NULL) && !snap_visible(r, box, bl));
        ab_image_clear(&img);
        return hidden ? ab_err_set(err, AB_E_NOT_FOUND, 0, "no snapshot %s", image) : 0;
}

static enum MHD_Result osb_create(ab_req *r)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return osb_err(r, e, "SANDBOX::");
        create_req c;
        ab_box_rec rec;
        bool created;
        if (parse_create(r->srv, body, &c, &e) < 0 || check_snapshot_source(r, c.q.image, &e) < 0 ||
            ensure_volumes(r, json_object_get(body, "volumes"), &e) < 0 ||
            ab_manager_acquire(r->srv->mgr, &c.q, r->scope, &rec, &created, &e) < 0) {
                create_req_clear(&c);
                json_decref(body);
                return osb_err(r, e, "SANDBOX::");
        }
        create_req_clear(&c);
        json_decref(body);
        json_t *j = osb_box_json(&rec, false);
        ab_box_rec_clear(&rec);
        if (!j)
                return osb_error(r, 409, "SANDBOX::CONFLICT", "the new box is being deleted");
        return resp_json(r, 202, j);
}

/* ---- get, list, delete, pause, resume ---------------------------------- */

/* The box as the caller may see it; answers 404 itself (NULL). */
static int get_box(ab_req *r, const char *id, ab_box_rec *rec, enum MHD_Result *ret)
{
        ab_err *e = NULL;
        if (ab_manager_get(r->srv->mgr, id, r->scope, rec, &e) < 0) {
                *ret = osb_err(r, e, "SANDBOX::");
                return -1;
        }
        if (!osb_state(rec->status)) {
                ab_box_rec_clear(rec);
                *ret = osb_error(r, 404, "SANDBOX::NOT_FOUND", "sandbox %s not found", id);
                return -1;
        }
        return 0;
}

static enum MHD_Result osb_get(ab_req *r, const char *id)
{
        ab_box_rec rec;
        enum MHD_Result ret;
        if (get_box(r, id, &rec, &ret) < 0)
                return ret;
        json_t *j = osb_box_json(&rec, true);
        ab_box_rec_clear(&rec);
        return resp_json(r, 200, j);
}

static bool state_matches(const ab_box_rec *rec, json_t *states)
{
        if (!json_array_size(states))
                return true;
        const char *mine = osb_state(rec->status);
        size_t i;
        json_t *s;
        json_array_foreach(states, i, s)
        {
                if (mine && !strcasecmp(mine, json_string_value(s)))
                        return true;
        }
        return false;
}

static int64_t query_int(ab_req *r, const char *key, int64_t def, int64_t min, int64_t max)
{
        const char *s = req_query(r, key);
        if (!s)
                return def;
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || *end || v < min || v > max)
                return -1;
        return v;
}

static enum MHD_Result osb_list(ab_req *r)
{
        int64_t page = query_int(r, "page", 1, 1, 1000000);
        int64_t size = query_int(r, "pageSize", LIST_PAGE_SIZE, 1, LIST_PAGE_MAX);
        if (page < 0 || size < 0)
                return osb_error(r, 400, "SANDBOX::INVALID_ARGUMENT",
                                 "page must be >= 1 and pageSize 1..%d", LIST_PAGE_MAX);
        ab_err *e = NULL;
        ab_box_filter f = {0};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_manager_list(r->srv->mgr, &f, r->scope, &rs, &n, &e) < 0)
                return osb_err(r, e, "SANDBOX::");
        json_t *states = osb_query_all(r, "state");
        const char *meta = req_query(r, "metadata");
        json_t *items = json_array();
        int64_t total = 0;
        for (size_t i = 0; i < n; i++) {
                if (!osb_state(rs[i].status) || !state_matches(&rs[i], states) ||
                    !kit_meta_match(rs[i].metadata, meta, OSB_META_PREFIX))
                        continue;
                if (total >= (page - 1) * size && total < page * size)
                        json_array_append_new(items, osb_box_json(&rs[i], true));
                total++;
        }
        json_decref(states);
        ab_box_recs_free(rs, n);
        int64_t pages = (total + size - 1) / size;
        return resp_json(r, 200,
                         json_pack("{s:o,s:{s:I,s:I,s:I,s:I,s:b}}", "items", items, "pagination",
                                   "page", (json_int_t)page, "pageSize", (json_int_t)size,
                                   "totalItems", (json_int_t)total, "totalPages", (json_int_t)pages,
                                   "hasNextPage", page < pages));
}

static enum MHD_Result no_content(ab_req *r, unsigned status)
{
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        return resp_send(r, status, resp);
}

static enum MHD_Result osb_delete(ab_req *r, const char *id)
{
        ab_box_rec rec;
        enum MHD_Result ret;
        if (get_box(r, id, &rec, &ret) < 0)
                return ret;
        ab_box_rec_clear(&rec);
        ab_err *e = NULL;
        if (ab_manager_delete(r->srv->mgr, id, r->scope, &e) < 0)
                return osb_err(r, e, "SANDBOX::");
        return no_content(r, 204);
}

static enum MHD_Result osb_pause(ab_req *r, const char *id)
{
        ab_box_rec rec;
        enum MHD_Result ret;
        if (get_box(r, id, &rec, &ret) < 0)
                return ret;
        ab_box_status st = rec.status;
        ab_box_rec_clear(&rec);
        if (st == AB_BOX_STOPPED || st == AB_BOX_PAUSED) /* paused already */
                return no_content(r, 202);
        ab_err *e = NULL;
        if (ab_manager_pause(r->srv->mgr, id, r->scope, &rec, &e) < 0)
                return osb_err(r, e, "SANDBOX::");
        ab_box_rec_clear(&rec);
        return no_content(r, 202);
}

/* A paused box is thawed, a stopped one started (with its files); resuming a
 * running box is a no-op. */
static enum MHD_Result osb_resume(ab_req *r, const char *id)
{
        ab_box_rec rec;
        enum MHD_Result ret;
        if (get_box(r, id, &rec, &ret) < 0) /* a box being deleted is gone: 404 */
                return ret;
        ab_box_rec_clear(&rec);
        ab_err *e = NULL; /* paused or stopped: decided under the box's lock */
        if (ab_manager_ensure_running(r->srv->mgr, id, r->scope, NULL, NULL, &e) < 0)
                return osb_err(r, e, "SANDBOX::");
        return no_content(r, 202);
}

/* ---- renew, metadata, endpoints ---------------------------------------- */

static enum MHD_Result osb_renew(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return osb_err(r, e, "SANDBOX::");
        const char *exp = json_string_value(json_object_get(body, "expiresAt"));
        int64_t at = 0;
        if (!exp || ab_time_parse_rfc3339(exp, &at) < 0) {
                json_decref(body);
                return osb_error(r, 400, "SANDBOX::INVALID_ARGUMENT",
                                 "expiresAt: required, an RFC 3339 time");
        }
        json_decref(body);
        ab_box_rec rec;
        enum MHD_Result ret;
        if (get_box(r, id, &rec, &ret) < 0)
                return ret;
        int64_t created = rec.created_at;
        ab_box_rec_clear(&rec);
        if (at <= osb_wall_ms())
                return osb_error(r, 400, "SANDBOX::INVALID_ARGUMENT",
                                 "expiresAt: %s is not in the future", exp);
        (void)created;
        int64_t secs = (at - osb_wall_ms() + 999) / 1000; /* from now: the box ends at `at` */
        if (ab_manager_set_ttl(r->srv->mgr, id, r->scope, secs, NULL, &rec, &e) < 0)
                return osb_err(r, e, "SANDBOX::");
        char buf[AB_TIME_LEN];
        ab_time_rfc3339(rec.created_at + rec.ttl_s * 1000, true, buf);
        ab_box_rec_clear(&rec);
        return resp_json(r, 200, json_pack("{s:s}", "expiresAt", buf));
}

/* JSON Merge Patch of the metadata: null deletes a key. */
static enum MHD_Result osb_patch_metadata(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return osb_err(r, e, "SANDBOX::");
        ab_box_rec rec;
        enum MHD_Result ret;
        if (get_box(r, id, &rec, &ret) < 0) {
                json_decref(body);
                return ret;
        }
        json_t *m = rec.metadata ? json_deep_copy(rec.metadata) : json_object();
        ab_box_rec_clear(&rec);
        const char *k;
        json_t *v;
        json_object_foreach(body, k, v)
        {
                if (!strncmp(k, OSB_META_PREFIX, strlen(OSB_META_PREFIX)) ||
                    (!json_is_null(v) && !json_is_string(v))) {
                        json_decref(m);
                        json_decref(body);
                        return osb_error(r, 400, "SANDBOX::INVALID_ARGUMENT",
                                         "metadata.%s: must be a string or null, and keys "
                                         "starting with %s are reserved",
                                         k, OSB_META_PREFIX);
                }
                if (json_is_null(v))
                        json_object_del(m, k);
                else
                        json_object_set(m, k, v);
        }
        json_decref(body);
        int rc = ab_manager_set_metadata(r->srv->mgr, id, r->scope, m, &rec, &e);
        json_decref(m);
        if (rc < 0)
                return osb_err(r, e, "SANDBOX::");
        json_t *j = osb_box_json(&rec, true);
        ab_box_rec_clear(&rec);
        return j ? resp_json(r, 200, j)
                 : osb_error(r, 404, "SANDBOX::NOT_FOUND", "sandbox %s not found", id);
}

/* The address the client reached this server by, for endpoints. */
static char *server_host(ab_req *r)
{
        const char *h = req_header(r, "Host");
        bool ok = h && *h && strlen(h) < 256;
        for (const char *c = h; ok && *c; c++)
                ok = isalnum((unsigned char)*c) || strchr(".-:[]_", *c);
        return ok ? xstrdup(h) : xasprintf("127.0.0.1:%u", r->srv->http.port);
}

/* execd's endpoint is this server's execd front, the egress sidecar's its
 * egress front, both at .../sandboxes/{id}/proxy/{port} (OpenSandbox's
 * server proxy route: the SDK and OpenSandbox's own tests take an endpoint
 * that ends with its port); any other port, agentbox's port route (which
 * needs the caller's key: given back as an Authorization header to send). */
static enum MHD_Result osb_endpoint(ab_req *r, const char *id, const char *port_s)
{
        char *end;
        long port = strtol(port_s, &end, 10);
        if (end == port_s || *end || port < 1 || port > 65535)
                return osb_error(r, 400, "SANDBOX::INVALID_ARGUMENT", "port: must be 1..65535");
        ab_box_rec rec;
        enum MHD_Result ret;
        if (get_box(r, id, &rec, &ret) < 0)
                return ret;
        ab_box_rec_clear(&rec);
        _cleanup_free_ char *host = server_host(r);
        json_t *j;
        if (port == OSB_EXECD_PORT || port == OSB_EGRESS_PORT) {
                _cleanup_free_ char *ep =
                    xasprintf("%s/opensandbox/v1/sandboxes/%s/proxy/%ld", host, id, port);
                j = json_pack("{s:s}", "endpoint", ep);
        } else {
                _cleanup_free_ char *ep = xasprintf("%s/v1/sandboxes/%s/ports/%ld", host, id, port);
                j = json_pack("{s:s}", "endpoint", ep);
                const char *key = req_header(r, "OPEN-SANDBOX-API-KEY");
                const char *auth = req_header(r, "Authorization");
                json_t *hdr = json_object();
                if (auth)
                        json_object_set_new(hdr, "Authorization", json_string(auth));
                else if (key && *key)
                        json_object_set_new(hdr, "Authorization",
                                            json_pack("s++", "Bearer ", key, ""));
                json_object_set_new(j, "headers", hdr);
        }
        return resp_json(r, 200, j);
}

/* ---- the egress sidecar's policy API (/opensandbox/egress/{id}/policy) ---- */

/* agentbox's network object as OpenSandbox's NetworkPolicy. */
static json_t *policy_of(json_t *net)
{
        const char *mode = json_string_value(json_object_get(net, "mode"));
        json_t *rules = json_array();
        const char *lists[] = {"allow", "deny"};
        for (size_t l = 0; l < 2; l++) {
                size_t i;
                json_t *t;
                json_array_foreach(json_object_get(net, lists[l]), i, t)
                {
                        if (json_is_string(t))
                                json_array_append_new(
                                    rules, json_pack("{s:s,s:O}", "action", lists[l], "target", t));
                }
        }
        return json_pack("{s:s,s:o}", "defaultAction",
                         mode && !strcmp(mode, "full") ? "allow" : "deny", "egress", rules);
}

static enum MHD_Result policy_answer(ab_req *r, const ab_box_rec *rec)
{
        json_t *net = json_object_get(rec->spec, "network");
        const char *mode = json_string_value(json_object_get(net, "mode"));
        return resp_json(r, 200,
                         json_pack("{s:s,s:s,s:s,s:o}", "status", "ok", "mode",
                                   mode ? mode : "none", "enforcementMode", "proxy", "policy",
                                   policy_of(net)));
}

/* Removes target from the array a. */
static void drop_target(json_t *a, const char *target)
{
        for (size_t i = json_array_size(a); i-- > 0;)
                if (!strcmp(json_string_value(json_array_get(a, i)) ?: "", target))
                        json_array_remove(a, i);
}

/* GET: the policy; PATCH [{action, target}]: rules added or replaced;
 * DELETE [target]: rules removed. A box whose default is deny gets the
 * allowlist mode while it has allow rules (none without). */
static enum MHD_Result egress(ab_req *r, const char *id)
{
        ab_box_rec rec;
        enum MHD_Result ret;
        if (get_box(r, id, &rec, &ret) < 0)
                return ret;
        if (!strcmp(r->method, "GET")) {
                ret = policy_answer(r, &rec);
                ab_box_rec_clear(&rec);
                return ret;
        }
        bool patch = !strcmp(r->method, "PATCH");
        json_t *body = r->body_len ? json_loadb(r->body, r->body_len, 0, NULL) : NULL;
        json_t *net = json_object_get(rec.spec, "network");
        const char *mode = json_string_value(json_object_get(net, "mode"));
        bool full = mode && !strcmp(mode, "full");
        json_t *allow = json_deep_copy(json_object_get(net, "allow")),
               *deny = json_deep_copy(json_object_get(net, "deny"));
        if (!allow)
                allow = json_array();
        if (!deny)
                deny = json_array();
        ab_box_rec_clear(&rec);
        const char *bad = json_is_array(body) ? NULL : "the body must be a list";
        size_t i;
        json_t *it;
        json_array_foreach(body, i, it)
        {
                const char *target = patch ? json_string_value(json_object_get(it, "target"))
                                           : json_string_value(it);
                const char *action = patch ? json_string_value(json_object_get(it, "action")) : "";
                if (!target || !action ||
                    (patch && strcmp(action, "allow") && strcmp(action, "deny"))) {
                        bad = patch ? "each rule needs action (allow|deny) and target"
                                    : "each entry must be a target";
                        break;
                }
                drop_target(allow, target);
                drop_target(deny, target);
                if (patch && full && !strcmp(action, "deny")) {
                        bad = "deny rules under defaultAction allow (mode full) are not enforced "
                              "by this server";
                        break;
                }
                if (patch && !full)
                        json_array_append_new(strcmp(action, "allow") ? deny : allow,
                                              json_string(target));
        }
        json_decref(body);
        if (bad) {
                json_decref(allow);
                json_decref(deny);
                return osb_error(r, 400, "INVALID_REQUEST", "%s", bad);
        }
        json_t *nnet = full                     ? json_pack("{s:s}", "mode", "full")
                       : json_array_size(allow) ? json_pack("{s:s,s:o,s:o}", "mode", "allowlist",
                                                            "allow", allow, "deny", deny)
                                                : json_pack("{s:s}", "mode", "none");
        if (full || !json_array_size(allow)) {
                json_decref(allow);
                json_decref(deny);
        }
        ab_err *e = NULL;
        int rc = ab_manager_set_network(r->srv->mgr, id, r->scope, nnet, &rec, &e);
        json_decref(nnet);
        if (rc < 0)
                return osb_err(r, e, "EGRESS::");
        ret = policy_answer(r, &rec);
        ab_box_rec_clear(&rec);
        return ret;
}

/* The egress sidecar of box id (rest: the segments from r->seg[first]):
 * its policy; the credential vault is not offered. */
static enum MHD_Result egress_route(ab_req *r, const char *id, size_t first)
{
        if (r->n_seg == first + 1 && !strcmp(r->seg[first], "policy"))
                return egress(r, id);
        return osb_error(r, 501, "EGRESS::API_NOT_SUPPORTED",
                         "the credential vault is not offered by agentbox");
}

/* ---- routing ----------------------------------------------------------- */

/* ---- snapshots: agentbox's snapshots are images of the store ------------- */

/* A snapshot of box B is the image named docker.io/osb-snapshots/B:TAG
 * (TAG: the name given, when it is a valid tag, else the time); its id is
 * the image's id, which a create takes as snapshotId (or image.uri). */
#define SNAP_REPO "docker.io/osb-snapshots/"

/* The box and tag of img when it is a snapshot made here, in a name app
 * (NULL: the admin) sees (pointers into that name; *stored, when not NULL,
 * gets the name as stored), else false. A snapshot made with an API key is
 * its app's private image: its name is "@APP/" SNAP_REPO "BOX:TAG"
 * (store.h). */
static bool snap_of(const ab_image *img, const char *app, const char **box, size_t *box_len,
                    const char **tag, const char **stored)
{
        for (char **n = img->names; n && *n; n++) {
                const char *name = ab_image_name_shown(*n, app);
                if (name && name[0] == '@' && (name = strstr(name, "/" SNAP_REPO)))
                        name++;
                if (!name || strncmp(name, SNAP_REPO, strlen(SNAP_REPO)))
                        continue;
                const char *b = name + strlen(SNAP_REPO), *colon = strchr(b, ':');
                if (!colon || colon == b)
                        continue;
                *box = b;
                *box_len = (size_t)(colon - b);
                *tag = colon + 1;
                if (stored)
                        *stored = *n;
                return true;
        }
        return false;
}

static json_t *snap_json(const ab_image *img, const char *box, size_t box_len, const char *tag)
{
        char at[AB_TIME_LEN];
        ab_time_rfc3339(img->created * 1000, true, at);
        return json_pack("{s:s,s:s%,s:s,s:{s:s,s:s},s:s}", "id", img->id, "sandboxId", box, box_len,
                         "name", tag, "status", "state", "Ready", "lastTransitionAt", at,
                         "createdAt", at);
}

/* May the caller see box's snapshots? Admin: always; an API key: while the
 * box is one of its app's. */
static bool snap_visible(ab_req *r, const char *box, size_t box_len)
{
        if (!r->scope)
                return true;
        _cleanup_free_ char *id = xstrndup(box, box_len);
        ab_box_rec rec;
        if (ab_manager_get(r->srv->mgr, id, r->scope, &rec, NULL) < 0)
                return false;
        ab_box_rec_clear(&rec);
        return true;
}

static bool tag_ok(const char *t)
{
        size_t n = strlen(t);
        if (!n || n > 128 || t[0] == '.' || t[0] == '-')
                return false;
        for (const char *c = t; *c; c++)
                if (!isalnum((unsigned char)*c) && !strchr("_.-", *c))
                        return false;
        return true;
}

static enum MHD_Result snap_create(ab_req *r, const char *id)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return osb_err(r, e, "SANDBOX::");
        const char *name = json_string_value(json_object_get(body, "name"));
        char tag[160];
        if (name && tag_ok(name))
                snprintf(tag, sizeof(tag), "%s", name);
        else
                snprintf(tag, sizeof(tag), "%lld", (long long)osb_wall_ms());
        json_decref(body);
        ab_box_rec rec;
        enum MHD_Result ret;
        if (get_box(r, id, &rec, &ret) < 0)
                return ret;
        ab_box_rec_clear(&rec);
        _cleanup_free_ char *ref = xasprintf(SNAP_REPO "%s:%s", id, tag);
        ab_image img;
        if (ab_manager_snapshot(r->srv->mgr, id, r->scope, ref, &img, &e) < 0)
                return osb_err(r, e, "SANDBOX::");
        json_t *j = snap_json(&img, id, strlen(id), tag);
        ab_image_clear(&img);
        return resp_json(r, 202, j);
}

/* The snapshot sid as the caller may see it; answers 404 itself. */
static int snap_get(ab_req *r, const char *sid, ab_image *img, const char **box, size_t *box_len,
                    const char **tag, enum MHD_Result *ret)
{
        ab_err *e = NULL;
        if (!r->srv->images) {
                *ret = osb_error(r, 501, "SANDBOX::API_NOT_SUPPORTED",
                                 "this server has no image store");
                return -1;
        }
        if (ab_manager_image_get(r->srv->mgr, r->scope, sid, img, &e) < 0) {
                ab_err_free(&e);
                *ret = osb_error(r, 404, "SANDBOX::NOT_FOUND", "no snapshot %s", sid);
                return -1;
        }
        if (!snap_of(img, r->scope, box, box_len, tag, NULL) || !snap_visible(r, *box, *box_len)) {
                ab_image_clear(img);
                *ret = osb_error(r, 404, "SANDBOX::NOT_FOUND", "no snapshot %s", sid);
                return -1;
        }
        return 0;
}

static enum MHD_Result snapshots(ab_req *r)
{
        /* segments: opensandbox v1 snapshots [{id}] */
        const char *m = r->method;
        enum MHD_Result ret;
        if (!r->srv->images)
                return osb_error(r, 501, "SANDBOX::API_NOT_SUPPORTED",
                                 "this server has no image store");
        if (r->n_seg == 4) {
                ab_image img;
                const char *box, *tag;
                size_t bl;
                if (snap_get(r, r->seg[3], &img, &box, &bl, &tag, &ret) < 0)
                        return ret;
                if (!strcmp(m, "GET")) {
                        json_t *j = snap_json(&img, box, bl, tag);
                        ab_image_clear(&img);
                        return resp_json(r, 200, j);
                }
                /* only the snapshot's name: the same image may have
                 * others (another app's identical snapshot) */
                ab_err *e = NULL;
                const char *stored = NULL;
                (void)snap_of(&img, r->scope, &box, &bl, &tag, &stored);
                int rc = ab_manager_image_remove(r->srv->mgr, r->scope, stored ? stored : img.id,
                                                 NULL, &e);
                ab_image_clear(&img);
                if (rc < 0)
                        return osb_err(r, e, "SANDBOX::");
                return no_content(r, 204);
        }
        int64_t page = query_int(r, "page", 1, 1, 1000000);
        int64_t size = query_int(r, "pageSize", LIST_PAGE_SIZE, 1, LIST_PAGE_MAX);
        if (page < 0 || size < 0)
                return osb_error(r, 400, "SANDBOX::INVALID_ARGUMENT",
                                 "page must be >= 1 and pageSize 1..%d", LIST_PAGE_MAX);
        const char *want_box = req_query(r, "sandboxId"), *want_name = req_query(r, "name");
        json_t *states = osb_query_all(r, "state");
        bool ready_ok = !json_array_size(states);
        for (size_t i = 0; i < json_array_size(states); i++)
                ready_ok |= !strcasecmp(json_string_value(json_array_get(states, i)), "Ready");
        json_decref(states);
        ab_image *imgs = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        if (ab_manager_image_list(r->srv->mgr, r->scope, &imgs, &n, &e) < 0)
                return osb_err(r, e, "SANDBOX::");
        json_t *items = json_array();
        int64_t total = 0;
        for (size_t i = 0; ready_ok && i < n; i++) {
                const char *box, *tag;
                size_t bl;
                if (!snap_of(&imgs[i], r->scope, &box, &bl, &tag, NULL) ||
                    (want_box && (strlen(want_box) != bl || strncmp(want_box, box, bl))) ||
                    (want_name && strcmp(want_name, tag)) || !snap_visible(r, box, bl))
                        continue;
                if (total >= (page - 1) * size && total < page * size)
                        json_array_append_new(items, snap_json(&imgs[i], box, bl, tag));
                total++;
        }
        ab_image_list_free(imgs, n);
        int64_t pages = (total + size - 1) / size;
        return resp_json(r, 200,
                         json_pack("{s:o,s:{s:I,s:I,s:I,s:I,s:b}}", "items", items, "pagination",
                                   "page", (json_int_t)page, "pageSize", (json_int_t)size,
                                   "totalItems", (json_int_t)total, "totalPages", (json_int_t)pages,
                                   "hasNextPage", page < pages));
}

/* .../sandboxes/{id}/proxy/{port}/...: execd (44772) and the egress
 * sidecar (18080) of box id, at the endpoints osb_endpoint gives; every
 * other port is agentbox's port route. */
static enum MHD_Result osb_proxy(ab_req *r, const char *id, const char *port)
{
        if (!strcmp(port, "44772"))
                return execd_route(r, id, 6);
        if (!strcmp(port, "18080"))
                return egress_route(r, id, 6);
        return osb_error(r, 404, "SANDBOX::NOT_FOUND",
                         "port %s: use its endpoint (GET .../endpoints/%s), agentbox's port route",
                         port, port);
}

static enum MHD_Result lifecycle(ab_req *r)
{
        /* segments: opensandbox v1 sandboxes {id} ... */
        const char *m = r->method;
        size_t n = r->n_seg;
        if (n == 4 && !strcmp(r->seg[2], "metrics") && !strcmp(r->seg[3], "events") &&
            !strcmp(m, "POST"))
                return no_content(r, 204); /* the SDK's create-latency report: not kept */
        if (n < 3 || strcmp(r->seg[2], "sandboxes")) {
                if ((n == 3 && !strcmp(m, "GET")) ||
                    (n == 4 && (!strcmp(m, "GET") || !strcmp(m, "DELETE"))))
                        if (!strcmp(r->seg[2], "snapshots"))
                                return snapshots(r);
                return osb_error(r, 404, "SANDBOX::NOT_FOUND", "no route %s /%s", m, r->path);
        }
        if (n == 3 && !strcmp(m, "POST"))
                return osb_create(r);
        if (n == 3 && !strcmp(m, "GET"))
                return osb_list(r);
        const char *id = n > 3 ? r->seg[3] : NULL;
        if (n == 4 && !strcmp(m, "GET"))
                return osb_get(r, id);
        if (n == 4 && !strcmp(m, "DELETE"))
                return osb_delete(r, id);
        const char *op = n > 4 ? r->seg[4] : "";
        if (n >= 7 && !strcmp(op, "proxy"))
                return osb_proxy(r, id, r->seg[5]);
        if (n == 5 && !strcmp(m, "POST") && !strcmp(op, "pause"))
                return osb_pause(r, id);
        if (n == 5 && !strcmp(m, "POST") && !strcmp(op, "resume"))
                return osb_resume(r, id);
        if (n == 5 && !strcmp(m, "POST") && !strcmp(op, "renew-expiration"))
                return osb_renew(r, id);
        if (n == 5 && !strcmp(m, "PATCH") && !strcmp(op, "metadata"))
                return osb_patch_metadata(r, id);
        if (n == 6 && !strcmp(m, "GET") && !strcmp(op, "endpoints"))
                return osb_endpoint(r, id, r->seg[5]);
        if (n == 5 && !strcmp(m, "POST") && !strcmp(op, "snapshots"))
                return snap_create(r, id);
        return osb_error(r, 404, "SANDBOX::NOT_FOUND", "no route %s /%s", m, r->path);
}

enum MHD_Result route_osb(ab_req *r, const char *rest)
{
        (void)rest;
        if (r->n_seg >= 2 && !strcmp(r->seg[1], "v1"))
                return lifecycle(r);
        if (r->n_seg >= 4 && !strcmp(r->seg[1], "egress"))
                return egress_route(r, r->seg[2], 3);
        if (r->n_seg >= 4 && !strcmp(r->seg[1], "execd"))
                return execd_route(r, r->seg[2], 3);
        return osb_error(r, 404, "NOT_FOUND", "no route %s /%s", r->method, r->path);
}
