/* Images over HTTP (docs/api.md "Images"): list, get, pull (progress as
 * server-sent events when asked), remove. The work is in src/image; this
 * file maps it to JSON and statuses. */
#include "rest/rest.h"

#include <fcntl.h>
#include <unistd.h>

static json_t *strv_json(char **v)
{
        json_t *a = json_array();
        for (char **p = v; p && *p; p++)
                json_array_append_new(a, json_string(*p));
        return a;
}

void ab_images_metrics(ab_server *s, ab_buf *b)
{
        ab_image *imgs = NULL;
        size_t n = 0;
        if (!s->images || ab_manager_image_list(s->mgr, NULL, &imgs, &n, NULL) < 0)
                return;
        uint64_t bytes = 0;
        for (size_t i = 0; i < n; i++)
                bytes += imgs[i].size;
        ab_image_list_free(imgs, n);
        ab_buf_printf(b,
                      "# HELP agentbox_images Images in the image store.\n"
                      "# TYPE agentbox_images gauge\nagentbox_images %zu\n"
                      "# HELP agentbox_images_bytes File data of the images' layers (a layer "
                      "shared by several images counts for each).\n"
                      "# TYPE agentbox_images_bytes gauge\nagentbox_images_bytes %llu\n",
                      n, (unsigned long long)bytes);
}

json_t *ab_image_json(const ab_image *img, const char *app)
{
        const ab_image_config *c = &img->config;
        json_t *names = json_array();
        for (char **p = img->names; p && *p; p++) {
                const char *shown = ab_image_name_shown(*p, app);
                if (shown)
                        json_array_append_new(names, json_string(shown));
        }
        json_t *cfg = json_pack("{s:o,s:o,s:o,s:o,s:o}", "env", strv_json(c->env), "entrypoint",
                                strv_json(c->entrypoint), "cmd", strv_json(c->cmd), "user",
                                c->user ? json_string(c->user) : json_null(), "workdir",
                                c->workdir ? json_string(c->workdir) : json_null());
        json_t *j =
            json_pack("{s:s,s:o,s:o,s:I,s:I,s:I,s:s?,s:s?,s:s?,s:o}", "id", img->id, "names", names,
                      "digests", strv_json(img->digests), "layers", (json_int_t)img->n_layers,
                      "size", (json_int_t)img->size, "created", (json_int_t)img->created, "os",
                      c->os, "architecture", c->arch, "source", img->source, "config", cfg);
        if (!app && img->apps) /* the admin sees whose private image it is */
                json_object_set_new(j, "apps", strv_json(img->apps));
        return j;
}

static bool have_store(ab_req *r, enum MHD_Result *ret)
{
        if (r->srv->images)
                return true;
        *ret = resp_error(r, 501, "unsupported", "this server has no image store");
        return false;
}

/* {"images": [...]} of the n images (as r's caller sees them); frees them. */
static json_t *images_json(ab_req *r, ab_image *imgs, size_t n)
{
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(a, ab_image_json(&imgs[i], r->scope));
        ab_image_list_free(imgs, n);
        return json_pack("{s:o}", "images", a);
}

enum MHD_Result route_images_list(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (!have_store(r, &ret))
                return ret;
        ab_err *e = NULL;
        ab_image *imgs = NULL;
        size_t n = 0;
        if (ab_manager_image_list(r->srv->mgr, r->scope, &imgs, &n, &e) < 0)
                return resp_err(r, e);
        return resp_json(r, 200, images_json(r, imgs, n));
}

enum MHD_Result route_image_get(ab_req *r, const char *ref)
{
        enum MHD_Result ret;
        if (!have_store(r, &ret))
                return ret;
        ab_err *e = NULL;
        ab_image img = {0};
        if (ab_manager_image_get(r->srv->mgr, r->scope, ref, &img, &e) < 0)
                return resp_err(r, e);
        json_t *j = ab_image_json(&img, r->scope);
        ab_image_clear(&img);
        return resp_json(r, 200, j);
}

enum MHD_Result route_image_delete(ab_req *r, const char *ref)
{
        enum MHD_Result ret;
        if (!have_store(r, &ret))
                return ret;
        ab_err *e = NULL;
        uint64_t freed = 0;
        if (ab_manager_image_remove(r->srv->mgr, r->scope, ref, &freed, &e) < 0)
                return resp_err(r, e);
        return resp_json(r, 200,
                         json_pack("{s:s,s:I}", "removed", ref, "freed", (json_int_t)freed));
}

/* A pull streamed as server-sent events: "progress" events, then "done"
 * with the image or "error". */
typedef struct pull_job {
        ab_manager *mgr;
        char *ref;
        char *app; /* the caller's app (NULL: the admin): how it sees the image */
        int fd;    /* the pipe the response reads */
        bool broken;
        uint64_t last_ms; /* download events are sent at most every 200 ms */
} pull_job;

static void pull_send(pull_job *j, const char *event, json_t *data)
{
        char *txt = json_dumps(data, JSON_COMPACT);
        json_decref(data);
        if (!txt || j->broken) {
                free(txt);
                return;
        }
        char *frame = xasprintf("event: %s\ndata: %s\n\n", event, txt);
        free(txt);
        if (ab_write_all(j->fd, frame, strlen(frame)) < 0)
                j->broken = true;
        free(frame);
}

static void pull_progress(void *ud, const char *phase, const char *digest, uint64_t done,
                          uint64_t total)
{
        pull_job *j = ud;
        if (!strcmp(phase, "download") && done != total) {
                uint64_t now = ab_now_ms();
                if (now - j->last_ms < 200)
                        return;
                j->last_ms = now;
        }
        pull_send(j, "progress",
                  json_pack("{s:s,s:s?,s:I,s:I}", "phase", phase, "layer", digest, "done",
                            (json_int_t)done, "total", (json_int_t)total));
}

static void *pull_main(void *arg)
{
        pull_job *j = arg;
        ab_err *e = NULL;
        ab_image img = {0};
        int pr = ab_manager_image_pull(j->mgr, j->app, j->ref, pull_progress, j, &img, &e);
        if (pr < 0) {
                pull_send(j, "error",
                          json_pack("{s:s,s:o}", "code", ab_code_name(e->code), "message",
                                    json_bytes(e->msg, strlen(e->msg))));
                ab_err_free(&e);
        } else {
                pull_send(j, "done", ab_image_json(&img, j->app));
                ab_image_clear(&img);
        }
        close(j->fd);
        free(j->ref);
        free(j->app);
        free(j);
        return NULL;
}

static const char *const sse_headers[] = {"X-Accel-Buffering", "no", NULL, NULL};

/* POST /v1/images/import[?name=REF]: the body is a `docker save` or OCI
 * image-layout tarball (admin only: it fills the host's disk). */
enum MHD_Result route_images_import(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (!have_store(r, &ret))
                return ret;
        if (r->upload_len == 0 || r->upload_fd < 0)
                return resp_error(r, 400, "invalid_argument",
                                  "the body must be a `docker save` or OCI image-layout tarball");
        if (lseek(r->upload_fd, 0, SEEK_SET) < 0)
                return resp_error(r, 500, "internal", "seek upload: %s", strerror(errno));
        const char *name = req_query(r, "name");
        ab_err *e = NULL;
        ab_image *imgs = NULL;
        size_t n = 0;
        if (ab_manager_image_import(r->srv->mgr, r->upload_fd, name && *name ? name : NULL, &imgs,
                                    &n, &e) < 0)
                return resp_err(r, e);
        return resp_json(r, 201, images_json(r, imgs, n));
}

enum MHD_Result route_images_pull(ab_req *r, const char *id)
{
        enum MHD_Result ret;
        if (!have_store(r, &ret))
                return ret;
        ab_err *e = NULL;
        json_t *body = NULL;
        if (req_json(r, &body, &e) < 0)
                return resp_err(r, e);
        const char *ref = json_string_value(json_object_get(body, "ref"));
        if (!ref || !*ref) {
                json_decref(body);
                return resp_error(r, 400, "invalid",
                                  "ref: required (an image reference, "
                                  "e.g. \"busybox\" or \"localhost:5000/a:1\")");
        }
        _cleanup_free_ char *refc = xstrdup(ref);
        json_decref(body);
        const char *accept = req_header(r, "Accept");
        if (accept && strstr(accept, "text/event-stream")) {
                ab_stream_slot *slot = req_stream_slot(r, &ret);
                if (!slot)
                        return ret;
                int p[2];
                if (pipe2(p, O_CLOEXEC) < 0) {
                        ab_stream_slot_release(slot);
                        return resp_error(r, 500, "internal", "pipe: %s", strerror(errno));
                }
                pull_job *j = xzalloc(sizeof(*j));
                *j = (pull_job){.mgr = r->srv->mgr,
                                .ref = steal_pointer(&refc),
                                .app = r->scope ? xstrdup(r->scope) : NULL,
                                .fd = p[1]};
                if (spawn_detached(pull_main, j) < 0) {
                        close(p[0]);
                        close(p[1]);
                        free(j->ref);
                        free(j->app);
                        free(j);
                        ab_stream_slot_release(slot);
                        return resp_error(r, 503, "unavailable", "cannot start a thread");
                }
                return resp_stream_counted(r, 200, "text/event-stream", p[0], sse_headers, slot);
        }
        ab_image img = {0};
        if (ab_manager_image_pull(r->srv->mgr, r->scope, refc, NULL, NULL, &img, &e) < 0)
                return resp_err(r, e);
        json_t *j = ab_image_json(&img, r->scope);
        ab_image_clear(&img);
        return resp_json(r, 200, j);
}
