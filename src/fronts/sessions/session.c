/* session.c - sessions (a thread id of the caller's app, its box made
 * lazily, its history in the store) and a thread's files: upload into
 * /mnt/user-data/uploads, download by path. */
#include "fronts/sessions/sessions_int.h"
#include "kit/files.h"
#include "kit/forward.h"
#include "kit/multipart.h"
#include "base/id.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#define UPLOAD_DIR       "/mnt/user-data/uploads"
#define UPLOAD_PARTS_MAX 256

bool session_id_ok(const char *id)
{
        size_t n = strlen(id);
        if (n == 0 || n > SESSION_ID_MAX || !strcmp(id, ".") || !strcmp(id, ".."))
                return false;
        for (const char *p = id; *p; p++)
                if (!(isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.'))
                        return false;
        return true;
}

bool session_check(ab_req *r, const char *id, enum MHD_Result *ret)
{
        if (!session_id_ok(id)) {
                *ret = resp_error(r, 400, "invalid_argument",
                                  "thread id: 1 to %d letters, digits, '.', '-' or '_'",
                                  SESSION_ID_MAX);
                return false;
        }
        ab_err *e = NULL;
        if (ab_store_chat_session_get(r->srv->store, r->scope, id, &e) < 0) {
                *ret = resp_err(r, e);
                return false;
        }
        return true;
}

int session_box(ab_server *s, const char *scope, const char *thread, char out[17], char **node,
                ab_err **err)
{
        ab_acquire_req q = {.thread_id = thread};
        ab_box_rec rec;
        bool created;
        *node = NULL;
        if (ab_manager_acquire(s->mgr, &q, scope, &rec, &created, err) < 0)
                return -1;
        snprintf(out, 17, "%s", rec.id);
        if (!kit_box_local(s, &rec))
                *node = steal_pointer(&rec.node);
        ab_box_rec_clear(&rec);
        return 0;
}

enum MHD_Result session_elsewhere(ab_req *r, const char *thread, const char *node)
{
        return resp_error(r, 409, "conflict",
                          "thread %s's box was just made on fleet node %s: send the request again",
                          thread, node);
}

/* POST /api/sessions {"thread_id"?}: a new thread (a random id unless the
 * client names one). The box is made by the first chat or upload. */
enum MHD_Result sessions_create(ab_req *r, const char *unused)
{
        ab_err *e = NULL;
        json_t *body;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        static const char *const known[] = {"thread_id", NULL};
        const char *tid = NULL;
        if (fields_known(body, known, NULL, &e) < 0 || field_str(body, "thread_id", &tid, &e) < 0) {
                json_decref(body);
                return resp_err(r, e);
        }
        char rnd[40];
        if (!tid) {
                ab_random_hex(rnd, sizeof(rnd), "t-", 16);
                tid = rnd;
        } else if (!session_id_ok(tid)) {
                json_decref(body);
                return resp_error(r, 400, "invalid_argument",
                                  "thread_id: 1 to %d letters, digits, '.', '-' or '_'",
                                  SESSION_ID_MAX);
        }
        _cleanup_free_ char *id = xstrdup(tid);
        json_decref(body);
        if (ab_store_chat_session_insert(r->srv->store, r->scope, id, &e) < 0) {
                if (e->code == AB_E_CONFLICT) {
                        ab_err_free(&e);
                        return resp_error(r, 409, "conflict", "session %s exists", id);
                }
                return resp_err(r, e);
        }
        return resp_json(r, 201, json_pack("{s:s}", "thread_id", id));
}

/* Deletes the boxes of thread id of scope's app (the admin's: of no app;
 * a filter without an app would match every app's thread of that id). */
static int delete_boxes(ab_server *s, const char *scope, const char *id, json_t *out, ab_err **err)
{
        ab_box_filter f = {.app_id = scope, .thread_id = id};
        ab_box_rec *v = NULL;
        size_t n = 0;
        if (ab_manager_list(s->mgr, &f, scope, &v, &n, err) < 0)
                return -1;
        int rc = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
                bool mine = scope ? v[i].app_id && !strcmp(v[i].app_id, scope) : !v[i].app_id;
                if (!mine)
                        continue;
                rc = ab_manager_delete(s->mgr, v[i].id, scope, err);
                if (rc == 0)
                        json_array_append_new(out, json_string(v[i].id));
        }
        ab_box_recs_free(v, n);
        return rc;
}

/* DELETE /api/sessions/{thread_id}: the thread's box and its history. */
enum MHD_Result sessions_delete(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (!session_check(r, id, &ret))
                return ret;
        ab_err *e = NULL;
        json_t *boxes = json_array();
        if (delete_boxes(r->srv, r->scope, id, boxes, &e) < 0 ||
            ab_store_chat_session_delete(r->srv->store, r->scope, id, &e) < 0) {
                json_decref(boxes);
                return resp_err(r, e);
        }
        return resp_json(r, 200, json_pack("{s:s,s:o}", "deleted", id, "boxes", boxes));
}

/* A part's file name as a single safe entry name, or NULL. */
static const char *upload_name(const kit_part *p)
{
        const char *n = p->filename ? kit_base_name(p->filename) : NULL;
        if (!n || !*n || !strcmp(n, ".") || !strcmp(n, "..") || strchr(n, '/') || strlen(n) > 255)
                return NULL;
        return n;
}

static int write_parts(ab_server *s, ab_use *u, const kit_part *parts, size_t n, json_t *files,
                       ab_err **err)
{
        for (size_t i = 0; i < n; i++) {
                if (!parts[i].filename)
                        continue; /* a plain form field */
                const char *name = upload_name(&parts[i]);
                if (!name)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "part %zu: filename must name a file (no '/', not "
                                          "'.' or '..')",
                                          i + 1);
                _cleanup_free_ char *path = xasprintf(UPLOAD_DIR "/%s", name);
                if (ab_manager_file_write(s->mgr, u, path, parts[i].data, parts[i].len, -1,
                                          ABC_W_MKPARENTS, 0, err) < 0)
                        return -1;
                json_array_append_new(files, json_pack("{s:s,s:s,s:I}", "name", name, "path", path,
                                                       "size", (json_int_t)parts[i].len));
        }
        if (!json_array_size(files))
                return ab_err_set(err, AB_E_INVALID, 0, "no file part (a part with a filename)");
        return 0;
}

/* POST /api/files/{thread_id}/upload (multipart/form-data): each file part
 * into /mnt/user-data/uploads/NAME of the thread's box. */
enum MHD_Result sessions_upload(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (!session_check(r, id, &ret))
                return ret;
        if (r->upload_failed)
                return resp_error(r, 500, "internal", "the upload could not be spooled");
        _cleanup_free_ char *delim = kit_multipart_delim(req_header(r, "Content-Type"));
        if (!delim)
                return resp_error(r, 400, "invalid_argument",
                                  "expected multipart/form-data with a boundary");
        if (!r->upload_len)
                return resp_error(r, 400, "invalid_argument", "empty body");
        void *map = mmap(NULL, r->upload_len, PROT_READ, MAP_PRIVATE, r->upload_fd, 0);
        if (map == MAP_FAILED)
                return resp_error(r, 500, "internal", "mmap: %s", strerror(errno));
        ab_err *e = NULL;
        kit_part *parts = NULL;
        size_t n = 0;
        char box[17];
        _cleanup_free_ char *node = NULL;
        ab_use u;
        json_t *files = json_array();
        int rc = kit_multipart_split(map, r->upload_len, delim, UPLOAD_PARTS_MAX, &parts, &n, &e);
        if (rc == 0)
                rc = session_box(r->srv, r->scope, id, box, &node, &e);
        if (rc == 0 && node) {
                kit_parts_free(parts, n);
                munmap(map, r->upload_len);
                json_decref(files);
                return session_elsewhere(r, id, node);
        }
        if (rc == 0 && (rc = ab_manager_use_begin(r->srv->mgr, box, r->scope, &u, &e)) == 0) {
                rc = write_parts(r->srv, &u, parts, n, files, &e);
                ab_manager_use_end(r->srv->mgr, &u);
        }
        kit_parts_free(parts, n);
        munmap(map, r->upload_len);
        if (rc < 0) {
                json_decref(files);
                return resp_err(r, e);
        }
        return resp_json(r, 201, json_pack("{s:s,s:o}", "thread_id", id, "files", files));
}

/* GET /api/files/{thread_id}/download?path=: a file of the thread's box
 * (a relative path is under /mnt/user-data). */
enum MHD_Result sessions_download(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (!session_check(r, id, &ret))
                return ret;
        const char *q = req_query(r, "path");
        if (!q || !*q)
                return resp_error(r, 400, "invalid_argument", "path: required");
        _cleanup_free_ char *path = q[0] == '/' ? xstrdup(q) : xasprintf("/mnt/user-data/%s", q);
        ab_err *e = NULL;
        char box[17];
        _cleanup_free_ char *node = NULL;
        ab_use u;
        if (session_box(r->srv, r->scope, id, box, &node, &e) < 0)
                return resp_err(r, e);
        if (node)
                return session_elsewhere(r, id, node);
        if (ab_manager_use_begin(r->srv->mgr, box, r->scope, &u, &e) < 0)
                return resp_err(r, e);
        abc_stat st = {0};
        int rc = ab_manager_file_stat(r->srv->mgr, &u, path, false, &st, &e);
        free(st.link);
        free(st.owner);
        free(st.group);
        if (rc == 0 && st.type != ABC_FILE)
                rc = ab_err_set(&e, AB_E_INVALID, 0, "%s is not a regular file", path);
        if (rc < 0) {
                ab_manager_use_end(r->srv->mgr, &u);
                return resp_err(r, e);
        }
        _cleanup_free_ char *disp = xasprintf("attachment; filename=\"%s\"", kit_base_name(path));
        for (char *p = disp + 22; *p && p[1]; p++)
                if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
                        *p = '_';
        const char *const hdr[] = {"Content-Disposition", disp, NULL, NULL};
        return resp_box_file(r, &u, path, 0, 0, 200, hdr);
}
