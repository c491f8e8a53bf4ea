/* provisioner.c - DeerFlow's sandbox provisioner (its docker/provisioner
 * service's routes and answers) over agentbox's boxes: one box per sandbox
 * id and app (the box's thread key is "deerflow:" + the id, so two apps'
 * sandboxes of one id are two boxes), made by the manager with the app's
 * quotas, answered with a sandbox_url that points at this server's AIO
 * routes for the box. Errors as FastAPI answers them: {"detail": ...}. */
#include "fronts/aio/aio_int.h"

#include "base/id.h"
#include "base/util.h"

#include <ctype.h>
#include <string.h>
#include <sys/utsname.h>

#define MAX_EXTRA_MOUNTS 10 /* as DeerFlow's provisioner */
#define ID_MAX           64

static enum MHD_Result detail(ab_req *r, unsigned status, const char *msg)
{
        return resp_json(r, status, json_pack("{s:s}", "detail", msg));
}

static enum MHD_Result detail_err(ab_req *r, ab_err *e)
{
        enum MHD_Result ret = detail(r, status_of(e->code), e->msg);
        ab_err_free(&e);
        return ret;
}

enum MHD_Result aio_health(ab_req *r, const char *id)
{
        (void)id;
        return resp_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

/* DeerFlow's ids: letters, digits, '_' and '-' (its provisioner's
 * patterns), 1..max bytes. */
static bool safe_id(const char *s, size_t max)
{
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > max)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
                        return false;
        return true;
}

bool aio_sandbox_box_id(ab_req *r, const char *sid, char out[17])
{
        if (!safe_id(sid, ID_MAX))
                return false;
        _cleanup_free_ char *key = xasprintf(AIO_THREAD_KEY "%s", sid);
        ab_manager_thread_id(r->scope, key, out);
        return true;
}

/* A pod's phase for the box: DeerFlow takes "Running" as alive. A stopped
 * or paused box is "Running" too: its next call starts or thaws it. */
static const char *phase_of(ab_box_status s)
{
        switch (s) {
        case AB_BOX_CREATING:
                return "Pending";
        case AB_BOX_DELETING:
                return "Terminating";
        case AB_BOX_ERROR:
                return "Failed";
        default:
                return "Running";
        }
}

static json_t *sandbox_json(ab_req *r, const ab_box_rec *rec)
{
        const char *sid = json_string_value(json_object_get(rec->metadata, AIO_META_SANDBOX));
        const char *tok = json_string_value(json_object_get(rec->metadata, AIO_META_TOKEN));
        _cleanup_free_ char *base = aio_url_base(r);
        _cleanup_free_ char *url = xasprintf("%s/%s.%s", base, rec->id, tok ? tok : "");
        return json_pack("{s:s,s:s,s:s}", "sandbox_id", sid ? sid : "", "sandbox_url", url,
                         "status", phase_of(rec->status));
}

/* The box is one the provisioner made (a box of the app whose thread key
 * is another's is not shown). */
static bool is_sandbox(const ab_box_rec *rec)
{
        return rec->thread_id && !strncmp(rec->thread_id, AIO_THREAD_KEY, strlen(AIO_THREAD_KEY)) &&
               json_is_string(json_object_get(rec->metadata, AIO_META_SANDBOX)) &&
               json_is_string(json_object_get(rec->metadata, AIO_META_TOKEN));
}

/* extra_mounts [{host_path, container_path, read_only}] -> the box's
 * mounts: "volume:NAME" a named volume of the app, any other absolute
 * host_path a host directory (the manager allows those to the admin only,
 * under the configured host_mount_prefixes). New references in *volumes
 * and *mounts (NULL when none). */
static int parse_mounts(json_t *em, json_t **volumes, json_t **mounts, ab_err **err)
{
        *volumes = *mounts = NULL;
        if (!em || json_is_null(em))
                return 0;
        if (!json_is_array(em))
                return ab_err_set(err, AB_E_INVALID, 0, "extra_mounts: must be a list");
        if (json_array_size(em) > MAX_EXTRA_MOUNTS)
                return ab_err_set(err, AB_E_INVALID, 0, "Too many extra mounts; max is %d",
                                  MAX_EXTRA_MOUNTS);
        json_t *vols = json_array(), *mnts = json_array();
        size_t i;
        json_t *m;
        json_array_foreach(em, i, m)
        {
                const char *host = json_string_value(json_object_get(m, "host_path"));
                const char *path = json_string_value(json_object_get(m, "container_path"));
                json_t *ro = json_object_get(m, "read_only");
                if (!host || !path || (ro && !json_is_boolean(ro))) {
                        json_decref(vols), json_decref(mnts);
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "extra_mounts[%zu]: needs host_path and container_path "
                                          "(strings) and an optional read_only (boolean)",
                                          i);
                }
                if (path[0] != '/') {
                        json_decref(vols), json_decref(mnts);
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "Extra mount path must be absolute: %s", path);
                }
                bool r = json_is_true(ro);
                if (!strncmp(host, "volume:", 7))
                        json_array_append_new(vols, json_pack("{s:s,s:s,s:b}", "name", host + 7,
                                                              "path", path, "read_only", r));
                else if (host[0] == '/')
                        json_array_append_new(mnts, json_pack("{s:s,s:s,s:b}", "host_path", host,
                                                              "path", path, "read_only", r));
                else {
                        json_decref(vols), json_decref(mnts);
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "Extra mount host path must be absolute or "
                                          "volume:NAME: %s",
                                          host);
                }
        }
        if (json_array_size(vols))
                *volumes = vols;
        else
                json_decref(vols);
        if (json_array_size(mnts))
                *mounts = mnts;
        else
                json_decref(mnts);
        return 0;
}

/* The create's fields; DeerFlow's others (include_legacy_skills,
 * provision_lark_cli_*: its Kubernetes pods' extras) are taken and left. */
static int parse_create(json_t *b, const char **sid, const char **thread, const char **user,
                        ab_err **err)
{
        *sid = *thread = *user = NULL;
        if (aio_opt_str(b, "sandbox_id", sid, err) < 0 ||
            aio_opt_str(b, "thread_id", thread, err) < 0 ||
            aio_opt_str(b, "user_id", user, err) < 0)
                return -1;
        if (!safe_id(*sid, ID_MAX))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "sandbox_id: required, 1..%d letters, digits, '_' or '-'",
                                  ID_MAX);
        if (*thread && !safe_id(*thread, ID_MAX))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "thread_id: 1..%d letters, digits, '_' or '-'", ID_MAX);
        if (*user && !safe_id(*user, 128))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "user_id: 1..128 letters, digits, '_' or '-'");
        return 0;
}

/* The box got no token (made under its thread key by another door): it
 * gets one now, so that its URL works. */
static int ensure_token(ab_req *r, ab_box_rec *rec, const char *sid, ab_err **err)
{
        if (json_is_string(json_object_get(rec->metadata, AIO_META_TOKEN)) &&
            json_is_string(json_object_get(rec->metadata, AIO_META_SANDBOX)))
                return 0;
        json_t *m = rec->metadata ? json_deep_copy(rec->metadata) : json_object();
        char tok[AIO_TOKEN_HEX + 1];
        ab_random_hex(tok, sizeof(tok), "", AIO_TOKEN_HEX / 2);
        json_object_set_new(m, AIO_META_TOKEN, json_string(tok));
        json_object_set_new(m, AIO_META_SANDBOX, json_string(sid));
        ab_box_rec nrec;
        int rc = ab_manager_set_metadata(r->srv->mgr, rec->id, r->scope, m, &nrec, err);
        json_decref(m);
        if (rc == 0) {
                ab_box_rec_clear(rec);
                *rec = nrec;
        }
        return rc;
}

/* POST /api/sandboxes: idempotent, as DeerFlow's provisioner (an existing
 * sandbox is answered as it is; its mounts are those of its create). */
enum MHD_Result aio_sandbox_create(ab_req *r, const char *id)
{
        (void)id;
        ab_err *e = NULL;
        json_t *b;
        if (req_json(r, &b, &e) < 0) {
                enum MHD_Result ret = detail(r, 422, e->msg);
                ab_err_free(&e);
                return ret;
        }
        const char *sid, *thread, *user;
        json_t *volumes = NULL, *mounts = NULL;
        if (parse_create(b, &sid, &thread, &user, &e) < 0 ||
            parse_mounts(json_object_get(b, "extra_mounts"), &volumes, &mounts, &e) < 0) {
                json_decref(b);
                enum MHD_Result ret = detail(r, 422, e->msg);
                ab_err_free(&e);
                return ret;
        }
        char tok[AIO_TOKEN_HEX + 1];
        ab_random_hex(tok, sizeof(tok), "", AIO_TOKEN_HEX / 2);
        json_t *meta = json_pack("{s:s,s:s}", AIO_META_SANDBOX, sid, AIO_META_TOKEN, tok);
        if (thread)
                json_object_set_new(meta, AIO_META_THREAD, json_string(thread));
        if (user)
                json_object_set_new(meta, AIO_META_USER, json_string(user));
        _cleanup_free_ char *key = xasprintf(AIO_THREAD_KEY "%s", sid);
        ab_acquire_req q = {
            .thread_id = key, .metadata = meta, .volumes = volumes, .mounts = mounts};
        ab_box_rec rec;
        bool created = false;
        int rc = ab_manager_acquire(r->srv->mgr, &q, r->scope, &rec, &created, &e);
        if (rc == 0 && !created && ensure_token(r, &rec, sid, &e) < 0) {
                ab_box_rec_clear(&rec);
                rc = -1;
        }
        json_decref(meta);
        json_decref(volumes);
        json_decref(mounts);
        json_decref(b);
        if (rc < 0)
                return detail_err(r, e);
        json_t *j = sandbox_json(r, &rec);
        ab_box_rec_clear(&rec);
        return resp_json(r, 200, j);
}

/* GET /api/sandboxes: the app's sandboxes, {sandboxes, count}. */
enum MHD_Result aio_sandbox_list(ab_req *r, const char *id)
{
        (void)id;
        ab_box_filter f = {0};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        if (ab_manager_list(r->srv->mgr, &f, r->scope, &rs, &n, &e) < 0)
                return detail_err(r, e);
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                if (is_sandbox(&rs[i]) && rs[i].status != AB_BOX_DELETING)
                        json_array_append_new(a, sandbox_json(r, &rs[i]));
        ab_box_recs_free(rs, n);
        return resp_json(
            r, 200,
            json_pack("{s:o,s:I}", "sandboxes", a, "count", (json_int_t)json_array_size(a)));
}

/* The caller's sandbox sid: 1 with *rec, 0 when there is none, -1 with
 * *err. */
static int lookup_sandbox(ab_req *r, const char *sid, ab_box_rec *rec, ab_err **err)
{
        char id[17];
        if (!aio_sandbox_box_id(r, sid, id))
                return 0;
        if (ab_manager_get(r->srv->mgr, id, r->scope, rec, err) < 0) {
                if ((*err)->code != AB_E_NOT_FOUND)
                        return -1;
                ab_err_free(err);
                return 0;
        }
        if (is_sandbox(rec) && rec->status != AB_BOX_DELETING)
                return 1;
        ab_box_rec_clear(rec);
        return 0;
}

enum MHD_Result aio_sandbox_get(ab_req *r, const char *sid)
{
        ab_box_rec rec;
        ab_err *e = NULL;
        int rc = lookup_sandbox(r, sid, &rec, &e);
        if (rc < 0)
                return detail_err(r, e);
        if (rc == 0) {
                _cleanup_free_ char *msg = xasprintf("Sandbox '%s' not found", sid);
                return detail(r, 404, msg);
        }
        json_t *j = sandbox_json(r, &rec);
        ab_box_rec_clear(&rec);
        return resp_json(r, 200, j);
}

/* DELETE /api/sandboxes/{id}: {ok, sandbox_id}; one that is gone already
 * is answered the same, as DeerFlow's provisioner answers it. */
enum MHD_Result aio_sandbox_delete(ab_req *r, const char *sid)
{
        ab_box_rec rec;
        ab_err *e = NULL;
        int rc = lookup_sandbox(r, sid, &rec, &e);
        if (rc == 1) {
                rc = ab_manager_delete(r->srv->mgr, rec.id, r->scope, &e);
                ab_box_rec_clear(&rec);
                if (rc < 0 && e->code == AB_E_NOT_FOUND) {
                        ab_err_free(&e);
                        rc = 0;
                }
        }
        if (rc < 0)
                return detail_err(r, e);
        return resp_json(r, 200, json_pack("{s:b,s:s}", "ok", 1, "sandbox_id", sid));
}

/* GET /v1/sandbox: AIO's context (SandboxResponse: its fields beside the
 * envelope, every one its schema requires). */
enum MHD_Result aio_context(ab_req *r)
{
        struct utsname u;
        if (uname(&u) < 0)
                memset(&u, 0, sizeof(u));
        json_t *sys =
            json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:[]}", "os", "linux", "os_version", u.release,
                      "arch", u.machine, "user", "root", "home_dir", "/root", "workspace",
                      "/mnt/user-data/workspace", "timezone", "UTC", "occupied_ports");
        json_t *j = json_pack("{s:b,s:s,s:n,s:s,s:s,s:s,s:{s:o,s:{s:[],s:[]},s:[]}}", "success", 1,
                              "message", "Operation successful", "data", "home_dir", "/root",
                              "workspace", "/mnt/user-data/workspace", "version", AGENTBOX_VERSION,
                              "detail", "system", sys, "runtime", "python", "nodejs", "utils");
        return resp_json(r, 200, j);
}
