/* envd_meta.c - file metadata of the E2B front's envd (envd_int.h): the
 * string pairs E2B's SDK sends with files.write(..., {metadata}) as
 * X-Metadata-KEY headers, kept in the store per box and path (store.h, "file
 * metadata": they survive a restart and go with the box), shown as an
 * entry's `metadata` by Stat, ListDir and the upload's answer, carried along
 * by Move and dropped by Remove. What changes files inside the box (a
 * command's mv or rm) is not seen: the metadata stays with the path. */
#include "fronts/e2b/envd_int.h"
#include "base/log.h"
#include "store/store.h"

#include <ctype.h>

#define META_PREFIX    "X-Metadata-"
#define META_KEYS_MAX  64   /* pairs on one upload */
#define META_KEY_MAX   128  /* bytes of a key */
#define META_VALUE_MAX 1024 /* bytes of a value */

typedef struct meta_scan {
        json_t *o;
        const char *bad; /* why the headers are refused, or NULL */
} meta_scan;

/* HTTP token characters (RFC 9110), what E2B's SDK allows in a key. */
static bool key_ok(const char *k)
{
        if (!*k || strlen(k) > META_KEY_MAX)
                return false;
        for (const char *p = k; *p; p++)
                if (!isalnum((unsigned char)*p) && !strchr("!#$%&'*+-.^_`|~", *p))
                        return false;
        return true;
}

/* Printable US-ASCII, what E2B's SDK allows in a value. */
static bool value_ok(const char *v)
{
        if (strlen(v) > META_VALUE_MAX)
                return false;
        for (const char *p = v; *p; p++)
                if (*p < 0x20 || *p > 0x7e)
                        return false;
        return true;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *name,
                                   const char *value)
{
        meta_scan *m = cls;
        size_t pl = strlen(META_PREFIX);
        if (!name || strncasecmp(name, META_PREFIX, pl))
                return MHD_YES;
        const char *key = name + pl;
        if (!key_ok(key) || !value || !value_ok(value)) {
                m->bad = "X-Metadata-*: a key of HTTP token characters (at most 128), a value of "
                         "printable US-ASCII (at most 1024)";
                return MHD_NO;
        }
        if (json_object_size(m->o) >= META_KEYS_MAX) {
                m->bad = "X-Metadata-*: at most 64 keys";
                return MHD_NO;
        }
        json_object_set_new(m->o, key, json_string(value));
        return MHD_YES;
}

int envd_meta_headers(ab_req *r, json_t **out, ab_err **err)
{
        *out = NULL;
        meta_scan m = {.o = json_object()};
        MHD_get_connection_values(r->conn, MHD_HEADER_KIND, scan_header, &m);
        if (m.bad) {
                json_decref(m.o);
                return ab_err_set(err, AB_E_INVALID, 0, "%s", m.bad);
        }
        if (json_object_size(m.o))
                *out = m.o;
        else
                json_decref(m.o);
        return 0;
}

/* The store's key of box: its provider and this creation of it. */
static int meta_key(ab_req *r, const char *box, ab_box_rec *rec, const char **creation,
                    ab_err **err)
{
        if (ab_manager_get(r->srv->mgr, box, r->scope, rec, err) < 0)
                return -1;
        *creation = json_string_value(json_object_get(rec->spec, "creation"));
        if (!*creation) /* a box from before creations: one for its whole life */
                *creation = "";
        return 0;
}

int envd_meta_set(ab_req *r, const char *box, const char *path, json_t *meta, ab_err **err)
{
        ab_box_rec rec;
        const char *creation;
        if (meta_key(r, box, &rec, &creation, err) < 0)
                return -1;
        int rc =
            ab_store_file_meta_set(r->srv->store, rec.provider, rec.id, creation, path, meta, err);
        ab_box_rec_clear(&rec);
        return rc;
}

json_t *envd_meta_under(ab_req *r, const char *box, const char *path)
{
        ab_box_rec rec;
        const char *creation;
        ab_err *e = NULL;
        json_t *o = NULL;
        if (meta_key(r, box, &rec, &creation, &e) == 0) {
                if (ab_store_file_meta_get(r->srv->store, rec.provider, rec.id, creation, path, &o,
                                           &e) < 0)
                        o = NULL;
                ab_box_rec_clear(&rec);
        }
        if (e) { /* entries without metadata rather than no entries */
                ab_log(AB_LOG_WARN, "e2b: file metadata unreadable", "box", box, "error", e->msg,
                       NULL);
                ab_err_free(&e);
        }
        return o ? o : json_object();
}

/* Logs what could not be kept in step with a move or removal. */
static void meta_step(const char *box, const char *what, int rc, ab_err **e)
{
        if (rc < 0) {
                ab_log(AB_LOG_WARN, "e2b: file metadata not updated", "box", box, "after", what,
                       "error", (*e)->msg, NULL);
                ab_err_free(e);
        }
}

void envd_meta_moved(ab_req *r, const char *box, const char *from, const char *to)
{
        ab_box_rec rec;
        const char *creation;
        ab_err *e = NULL;
        int rc = meta_key(r, box, &rec, &creation, &e);
        if (rc == 0) {
                rc = ab_store_file_meta_move(r->srv->store, rec.provider, rec.id, from, to, &e);
                ab_box_rec_clear(&rec);
        }
        meta_step(box, "a move", rc, &e);
}

void envd_meta_removed(ab_req *r, const char *box, const char *path)
{
        ab_box_rec rec;
        const char *creation;
        ab_err *e = NULL;
        int rc = meta_key(r, box, &rec, &creation, &e);
        if (rc == 0) {
                rc = ab_store_file_meta_delete(r->srv->store, rec.provider, rec.id, path, &e);
                ab_box_rec_clear(&rec);
        }
        meta_step(box, "a removal", rc, &e);
}

void envd_entry_meta(json_t *entry, json_t *map)
{
        const char *path = json_string_value(json_object_get(entry, "path"));
        json_t *m = path ? json_object_get(map, path) : NULL;
        json_object_set_new(entry, "metadata", m ? json_incref(m) : json_object());
}
