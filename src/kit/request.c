/* request.c - reading a request: query, headers, JSON body and fields, and
 * the box as the API shows it (kit/request.h). */
#include "kit/server_int.h"
#include "fleet/fleet.h"
#include "base/jsonnum.h"
#include "base/log.h"
#include "base/util.h"

/* ---- request helpers -------------------------------------------------- */

const char *req_query(ab_req *r, const char *key)
{
        return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *req_header(ab_req *r, const char *key)
{
        return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, key);
}

int req_json(ab_req *r, json_t **out, ab_err **err)
{
        *out = NULL;
        if (!r->body || r->body_len == 0) {
                *out = json_object();
                return 0;
        }
        json_error_t je;
        json_t *j = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &je);
        if (!j)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "invalid JSON body: %s (line %d, column %d)", je.text, je.line,
                                  je.column);
        if (!json_is_object(j)) {
                json_decref(j);
                return ab_err_set(err, AB_E_INVALID, 0, "the body must be a JSON object");
        }
        *out = j;
        return 0;
}

int field_str(json_t *o, const char *name, const char **out, ab_err **err)
{
        json_t *v = json_object_get(o, name);
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_string(v))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be a string", name);
        if (strlen(json_string_value(v)) != json_string_length(v))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must not contain NUL characters",
                                  name);
        *out = json_string_value(v);
        return 0;
}

int field_int(json_t *o, const char *name, int64_t *out, bool *present, ab_err **err)
{
        json_t *v = json_object_get(o, name);
        if (present)
                *present = false;
        if (!v || json_is_null(v))
                return 0;
        if (!ab_json_whole(v, out))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be an integer", name);
        if (present)
                *present = true;
        return 0;
}

int field_num(json_t *o, const char *name, double *out, bool *present, ab_err **err)
{
        json_t *v = json_object_get(o, name);
        if (present)
                *present = false;
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_number(v))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be a number", name);
        *out = json_number_value(v);
        if (present)
                *present = true;
        return 0;
}

int field_obj(json_t *o, const char *name, json_t **out, ab_err **err)
{
        json_t *v = json_object_get(o, name);
        if (!v || json_is_null(v))
                return 0;
        if (!json_is_object(v))
                return ab_err_set(err, AB_E_INVALID, 0, "%s: must be an object", name);
        *out = v;
        return 0;
}

int fields_known(json_t *o, const char *const *known, const char *where, ab_err **err)
{
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v)
        {
                bool ok = false;
                for (const char *const *p = known; *p && !ok; p++)
                        ok = !strcmp(*p, k);
                if (!ok)
                        return ab_err_set(err, AB_E_INVALID, 0, "%s%sunknown field \"%s\"",
                                          where ? where : "", where ? ": " : "", k);
        }
        return 0;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
        unsigned char c = s[0];
        if (c < 0x80)
                return 1;
        size_t len;
        uint32_t cp;
        if ((c & 0xe0) == 0xc0) {
                len = 2;
                cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
                len = 3;
                cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
                len = 4;
                cp = c & 0x07;
        } else {
                return 0;
        }
        if (len > n)
                return 0;
        for (size_t i = 1; i < len; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (s[i] & 0x3f);
        }
        static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return len;
}

json_t *json_bytes(const char *buf, size_t len)
{
        if (!buf || !len)
                return json_string("");
        const unsigned char *s = (const unsigned char *)buf;
        size_t i = 0;
        while (i < len) {
                size_t l = utf8_len(s + i, len - i);
                if (!l)
                        break;
                i += l;
        }
        if (i == len)
                return json_stringn(buf, len);
        char *out = xmalloc(xadd(xmul(len, 3), 1));
        size_t o = 0;
        for (i = 0; i < len;) {
                size_t l = utf8_len(s + i, len - i);
                if (l) {
                        memcpy(out + o, s + i, l);
                        o += l;
                        i += l;
                } else {
                        memcpy(out + o, "\xef\xbf\xbd", 3);
                        o += 3;
                        i++;
                }
        }
        json_t *j = json_stringn(out, o);
        free(out);
        return j;
}

static json_t *str_or_null(const char *s)
{
        return s ? json_bytes(s, strlen(s)) : json_null();
}

/* A fleet box's owner node; a box whose owner is down reads "unavailable". */
static void box_json_node(const ab_server *s, const ab_box_rec *r, json_t *j)
{
        json_object_set_new(j, "node", json_string(r->node));
        _cleanup_free_ char *url = NULL;
        ab_node_state st;
        if (!s->fleet || ab_fleet_owner(s->fleet, r->node, &url, &st) < 0 || st != AB_NODE_DOWN)
                return;
        json_object_set_new(j, "status", json_string("unavailable"));
        json_object_set_new(j, "error",
                            json_sprintf("its node %s is down (no heartbeat): the box is back "
                                         "when the node is",
                                         r->node));
}

json_t *box_json(const ab_server *s, const ab_box_rec *r)
{
        int64_t idle = r->idle_stop_s ? r->idle_stop_s : s->cfg->idle_stop_s;
        int64_t pause = r->idle_pause_s ? r->idle_pause_s : s->cfg->idle_pause_s;
        json_t *env = json_object_get(r->spec, "env");
        json_t *net = json_object_get(r->spec, "network");
        json_t *j = json_pack(
            "{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:I,s:I,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o}", "id",
            str_or_null(r->id), "status", json_string(ab_box_status_name(r->status)), "mode",
            json_string(ab_box_mode_name(r->mode)), "provider",
            str_or_null(json_string_value(json_object_get(r->spec, "backend")) ?: r->provider),
            "backend_id", str_or_null(r->backend_id), "app_id", str_or_null(r->app_id), "user_id",
            str_or_null(r->user_id), "chat_id", str_or_null(r->chat_id), "thread_id",
            str_or_null(r->thread_id), "created_at", (json_int_t)r->created_at, "last_active_at",
            (json_int_t)r->last_active_at, "idle_stop_s", (json_int_t)(idle > 0 ? idle : -1),
            "idle_pause_s", (json_int_t)(pause > 0 ? pause : -1), "ttl_s", (json_int_t)r->ttl_s,
            "limits", r->has_limits ? ab_limits_json(&r->limits) : json_null(), "network",
            net ? json_incref(net) : json_pack("{s:s,s:[],s:[]}", "mode", "none", "allow", "deny"),
            "env", env ? json_incref(env) : json_object(), "metadata",
            r->metadata ? json_incref(r->metadata) : json_object(), "error", str_or_null(r->error));
        if (r->node) /* a fleet's box (docs/fleet.md): its owner, and whether it is reachable */
                box_json_node(s, r, j);
        json_t *pub = json_object_get(r->spec, "public_ports"); /* docs/api.md, "Ports" */
        json_object_set_new(j, "public_ports",
                            json_is_array(pub) ? json_incref(pub) : json_array());
        /* the image a box was made from: its reference and id (null: the host base) */
        json_t *img = json_object_get(r->spec, "image");
        json_object_set_new(j, "image",
                            json_is_object(img)
                                ? json_pack("{s:O?,s:O?}", "ref", json_object_get(img, "ref"), "id",
                                            json_object_get(img, "id"))
                                : json_null());
        /* what the box mounts at every start (empty lists when nothing) */
        static const char *const lists[] = {"volumes", "mounts", "readonly_paths", "blocked_paths"};
        for (size_t i = 0; i < AB_ARRAY_LEN(lists); i++) {
                json_t *l = json_object_get(r->spec, lists[i]);
                json_object_set_new(j, lists[i], json_is_array(l) ? json_incref(l) : json_array());
        }
        return j;
}
