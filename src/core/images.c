/* Images: a box made from an image of the image store (image/store.h) holds
 * it while it exists, so neither a removal of its name nor a GC takes its
 * layers away; its record keeps what execs need of the image's config. */
#include "core/manager_int.h"

int mgr_image_resolve(ab_manager *m, const char *scope, const char *ref, ab_image *out,
                      ab_err **err)
{
        if (!m->o.images)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "image: this server has no image store");
        ab_err *e = NULL;
        if (ab_image_get_as(m->o.images, scope, ref, out, &e) == 0)
                return 0;
        if (e->code != AB_E_NOT_FOUND)
                return mgr_propagate(err, e);
        ab_err_free(&e);
        ab_log(AB_LOG_INFO, "pulling an image for a new box", "image", ref, NULL);
        int r = ab_manager_image_pull(m, scope, ref, NULL, NULL, out, err);
        if (r < 0)
                return ab_err_wrap(err, "image %s", ref);
        return 0;
}

int ab_manager_image_pull(ab_manager *m, const char *scope, const char *ref,
                          ab_image_progress_fn fn, void *ud, ab_image *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (!m->o.images)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "image: this server has no image store");
        mgr_ticket t = {0};
        uint64_t budget = 0;
        if (scope && mgr_quota_image_begin(m, scope, &budget, &t, err) < 0)
                return -1;
        int r = ab_image_pull_as(m->o.images, scope, budget, ref, fn, ud, out, err);
        mgr_quota_end(m, &t);
        ab_metrics_op(m->o.metrics, "image_pull", r == 0);
        return r;
}

static int no_store(ab_err **err)
{
        return ab_err_set(err, AB_E_UNSUPPORTED, 0, "this server has no image store");
}

int ab_manager_image_list(ab_manager *m, const char *scope, ab_image **out, size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        if (!m->o.images)
                return no_store(err);
        ab_image *all = NULL;
        size_t na = 0, k = 0;
        if (ab_image_list(m->o.images, &all, &na, err) < 0)
                return -1;
        for (size_t i = 0; i < na; i++) {
                if (ab_image_visible(&all[i], scope))
                        all[k++] = all[i];
                else
                        ab_image_clear(&all[i]);
        }
        *out = all;
        *n = k;
        return 0;
}

int ab_manager_image_get(ab_manager *m, const char *scope, const char *ref, ab_image *out,
                         ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (!m->o.images)
                return no_store(err);
        return ab_image_get_as(m->o.images, scope, ref, out, err);
}

int ab_manager_image_remove(ab_manager *m, const char *scope, const char *ref, uint64_t *freed,
                            ab_err **err)
{
        if (freed)
                *freed = 0;
        if (!m->o.images)
                return no_store(err);
        if (scope) { /* an app removes only what it sees */
                ab_image img = {0};
                if (ab_image_get_as(m->o.images, scope, ref, &img, err) < 0)
                        return -1;
                ab_image_clear(&img);
        }
        int r = ab_image_remove(m->o.images, ref, err);
        ab_metrics_op(m->o.metrics, "image_remove", r == 0);
        if (r < 0)
                return -1;
        return ab_image_gc(m->o.images, freed, err);
}

int ab_manager_image_import(ab_manager *m, int fd, const char *name, ab_image **out, size_t *n,
                            ab_err **err)
{
        *out = NULL;
        *n = 0;
        if (!m->o.images)
                return no_store(err);
        int r = ab_image_import(m->o.images, fd, name, NULL, NULL, out, n, err);
        ab_metrics_op(m->o.metrics, "image_import", r == 0);
        return r;
}

static json_t *strv_json(char **v)
{
        json_t *a = json_array();
        for (char **p = v; p && *p; p++)
                json_array_append_new(a, json_string(*p));
        return a;
}

json_t *mgr_image_spec(const char *ref, const ab_image *img)
{
        json_t *j = json_pack("{s:s,s:s,s:o}", "ref", ref ? ref : img->id, "id", img->id, "env",
                              strv_json(img->config.env));
        if (img->config.workdir && *img->config.workdir)
                json_object_set_new(j, "workdir", json_string(img->config.workdir));
        if (img->config.user && *img->config.user)
                json_object_set_new(j, "user", json_string(img->config.user));
        return j;
}

int mgr_image_hold(ab_manager *m, const char *bid, const ab_image *img, ab_err **err)
{
        return ab_image_hold(m->o.images, bid, img->id, err);
}

void mgr_image_release(ab_manager *m, const char *bid)
{
        if (!m->o.images)
                return;
        _cleanup_err_ ab_err *e = NULL;
        if (ab_image_release(m->o.images, bid, &e) < 0 || ab_image_gc(m->o.images, NULL, &e) < 0)
                ab_log(AB_LOG_WARN, "images: cannot release a box's image", "box", bid, "error",
                       e->msg, NULL);
}

/* An image whose User is not root: the box's own folders (/workspace and
 * the DeerFlow upload and output folders) are made that user's at create,
 * so that its execs can write where agents write. Best effort (an image
 * without chown keeps them root's): logged, not fatal. */
void mgr_image_own_folders(ab_manager *m, const ab_box_rec *r)
{
        const json_t *img = mgr_rec_image(r);
        const char *user = img ? json_string_value(json_object_get(img, "user")) : NULL;
        if (!user || !*user || !strcmp(user, "root") || !strcmp(user, "0") ||
            !strncmp(user, "0:", 2) || !strncmp(user, "root:", 5))
                return;
        const char *argv[] = {
            "chown", user, "/workspace", "/mnt/user-data/uploads", "/mnt/user-data/outputs", NULL};
        abc_exec_req q = {.argv = argv, .user = "0", .stdin_fd = -1, .timeout_ms = 10000};
        ab_backend *b = m->o.backend;
        ab_err *e = NULL;
        abc_exec_res res = {0};
        _cleanup_close_ int fd = b->ops->connect(b, r->backend_id, &e);
        if (fd < 0 || abc_exec(fd, &q, NULL, NULL, &res, &e) < 0 || res.exit_code != 0) {
                char code[16];
                snprintf(code, sizeof(code), "%d", res.exit_code);
                ab_log(AB_LOG_WARN, "cannot give the box's folders to its image's user", "box",
                       r->id, "user", user, "error", e ? e->msg : "chown failed", "exit_code", code,
                       NULL);
        }
        ab_err_free(&e);
}

void mgr_image_learn(ab_manager *m, ab_box_rec *r)
{
        json_t *img = (json_t *)mgr_rec_image(r);
        if (!img || json_object_get(img, "workdir") || json_object_get(img, "user"))
                return;
        ab_backend *b = m->o.backend;
        ab_box_info i;
        ab_err *e = NULL;
        if (b->ops->info(b, r->backend_id, &i, &e) < 0) {
                ab_err_free(&e);
                return;
        }
        bool learnt = i.image_workdir || i.image_user;
        if (i.image_workdir)
                json_object_set_new(img, "workdir", json_string(i.image_workdir));
        if (i.image_user)
                json_object_set_new(img, "user", json_string(i.image_user));
        ab_box_info_clear(&i);
        if (!learnt)
                return;
        if (ab_store_box_update(m->o.store, r, &e) < 0) {
                ab_log(AB_LOG_WARN, "cannot record the image's user and working directory", "box",
                       r->id, "error", e->msg, NULL);
                ab_err_free(&e);
        }
        mgr_image_own_folders(m, r);
}

const char *mgr_rec_backend(const ab_box_rec *r)
{
        return r->spec ? json_string_value(json_object_get(r->spec, "backend")) : NULL;
}

ab_backend *mgr_engine_images(ab_manager *m, const char *backend)
{
        ab_backend *b = ab_backend_pick(m->o.backend, backend);
        return b && b->ops->image_config ? b : NULL;
}

const json_t *mgr_rec_image(const ab_box_rec *r)
{
        json_t *i = r->spec ? json_object_get(r->spec, "image") : NULL;
        return json_is_object(i) ? i : NULL;
}
