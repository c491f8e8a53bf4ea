/* Acquire: the box for a request's keys, found or made (from the warm pool
 * when it has one), running when this returns. Idempotent across threads and
 * processes: the store's unique (provider, id) decides who creates. */
#include "base/codec.h"
#include "core/manager_int.h"
#include "image/ref.h"
#include "net/net.h"

#include <openssl/evp.h>

/* ---- ids of keys ----
 *
 * An id derived from keys is the first 16 hex digits of sha256 over the keys
 * written as netstrings ("<length>:<bytes>,") after a tag naming the kind: no
 * two different key lists encode alike, and a thread id is hashed with its
 * app, so each app has threads of its own. Explicit ids of that shape (16 hex
 * digits) are the server's to give: an API key cannot make a box by one (see
 * mgr_new_id_check), so no app can take the id another app's keys lead to.
 * Boxes made before this scheme keep their ids (sha256 of "app-user-chat" or
 * of the thread id alone); acquire finds them by those when the row's keys are
 * the request's (legacy_id). */

static void sha_hex16(const char *s, char out[17])
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (!EVP_Digest(s, strlen(s), md, &len, EVP_sha256(), NULL))
                abort();
        ab_hex_encode(md, 8, out);
}

void ab_manager_key_id(const char *app_id, const char *user_id, const char *chat_id, char out[17])
{
        _cleanup_free_ char *s =
            xasprintf("agentbox-keys-v2,%zu:%s,%zu:%s,%zu:%s,", strlen(app_id), app_id,
                      strlen(user_id), user_id, strlen(chat_id), chat_id);
        sha_hex16(s, out);
}

void ab_manager_thread_id(const char *app_id, const char *thread_id, char out[17])
{
        /* the admin's threads (no app) have a tag of their own */
        _cleanup_free_ char *s =
            app_id ? xasprintf("agentbox-thread-v2,%zu:%s,%zu:%s,", strlen(app_id), app_id,
                               strlen(thread_id), thread_id)
                   : xasprintf("agentbox-thread-v2-admin,%zu:%s,", strlen(thread_id), thread_id);
        sha_hex16(s, out);
}

/* The ids of the first scheme, for boxes made before the second. */
static void legacy_key_id(const char *app, const char *user, const char *chat, char out[17])
{
        _cleanup_free_ char *s = xasprintf("%s-%s-%s", app, user, chat);
        sha_hex16(s, out);
}

bool mgr_id_derived_shape(const char *id)
{
        size_t n = 0;
        for (; id[n]; n++)
                if (!((id[n] >= '0' && id[n] <= '9') || (id[n] >= 'a' && id[n] <= 'f')))
                        return false;
        return n == 16;
}

int mgr_new_id_check(const ab_acquire_req *q, const char *scope, ab_err **err)
{
        if (scope && q->id && mgr_id_derived_shape(q->id))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "id: ids of 16 hex digits are the server's (derived from "
                                  "app_id+user_id+chat_id or thread_id); choose another id");
        return 0;
}

static bool str_eq(const char *a, const char *b)
{
        return a ? b && !strcmp(a, b) : !b;
}

bool mgr_rec_is_requested(const ab_box_rec *r, const ab_acquire_req *q, const char *app,
                          const char *scope)
{
        if (!mgr_scope_ok(r, scope))
                return false;
        if (q->thread_id)
                return str_eq(r->app_id, app) && str_eq(r->thread_id, q->thread_id) &&
                       !r->user_id && !r->chat_id;
        if (q->user_id || q->chat_id)
                return str_eq(r->app_id, app) && str_eq(r->user_id, q->user_id) &&
                       str_eq(r->chat_id, q->chat_id) && !r->thread_id;
        return true; /* an explicit id names the box itself */
}

/* Keys of a box made before the second scheme: when the store has no box at
 * id but one at the first scheme's id whose keys are the request's, id
 * becomes that one. A box at the old id with other keys (two key lists the
 * old scheme confused, or an id another app chose) is not the request's. */
static void legacy_id(ab_manager *m, const ab_acquire_req *q, const char *app, const char *scope,
                      char id[64])
{
        if (!q->thread_id && !q->user_id)
                return;
        ab_box_rec r = {0};
        if (ab_store_box_get(m->o.store, m->provider, id, &r, NULL) == 0) {
                ab_box_rec_clear(&r);
                return;
        }
        char old[17];
        if (q->thread_id)
                sha_hex16(q->thread_id, old);
        else
                legacy_key_id(app, q->user_id, q->chat_id, old);
        if (ab_store_box_get(m->o.store, m->provider, old, &r, NULL) < 0)
                return;
        if (mgr_rec_is_requested(&r, q, app, scope))
                snprintf(id, 64, "%s", old);
        ab_box_rec_clear(&r);
}

static bool limits_equal(const ab_limits *a, const ab_limits *b)
{
        return a->cpus == b->cpus && a->memory_mib == b->memory_mib && a->pids == b->pids &&
               a->disk_mib == b->disk_mib && a->timeout_s == b->timeout_s;
}

static int check_keys(ab_manager *m, const ab_acquire_req *q, const char *scope, const char **app,
                      char idbuf[64], ab_err **err)
{
        bool has_keys = q->app_id || q->user_id || q->chat_id;
        int kinds = !!q->id + !!has_keys + !!q->thread_id;
        if (kinds > 1)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "give one of: id, thread_id, or app_id+user_id+chat_id");
        *app = q->app_id;
        if (scope) {
                if (q->app_id && strcmp(q->app_id, scope))
                        return ab_err_set(err, AB_E_PERMISSION, 0,
                                          "this API key may only use app_id \"%s\"", scope);
                *app = scope;
        }
        if (has_keys) {
                const char *missing = !*app         ? "app_id"
                                      : !q->user_id ? "user_id"
                                      : !q->chat_id ? "chat_id"
                                                    : NULL;
                if (missing)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "%s: missing (app_id, user_id and chat_id go together)",
                                          missing);
                if (!**app || !*q->user_id || !*q->chat_id)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "app_id, user_id and chat_id must not be empty");
                ab_manager_key_id(*app, q->user_id, q->chat_id, idbuf);
        } else if (q->thread_id) {
                if (!*q->thread_id)
                        return ab_err_set(err, AB_E_INVALID, 0, "thread_id: must not be empty");
                ab_manager_thread_id(*app, q->thread_id, idbuf);
        } else if (q->id) {
                if (ab_id_check(q->id, err) < 0)
                        return ab_err_wrap(err, "id");
                if (!strncmp(q->id, POOL_PREFIX, strlen(POOL_PREFIX)))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "id: ids starting with \"" POOL_PREFIX
                                          "\" are reserved for the warm pool");
                if (!strncmp(q->id, SYSTEM_PREFIX, strlen(SYSTEM_PREFIX)))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "id: ids starting with \"" SYSTEM_PREFIX
                                          "\" are reserved for the server's own boxes");
                snprintf(idbuf, 64, "%s", q->id);
        } else {
                ab_id_random(idbuf);
        }
        if (q->mode && strcmp(q->mode, "session") && strcmp(q->mode, "task"))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "mode: must be \"session\" or \"task\", not \"%s\"", q->mode);
        if (q->idle_stop_s < -1)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "idle_stop_s: must be -1 (never), 0 (default) or positive");
        if (q->idle_pause_s < -1)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "idle_pause_s: must be -1 (never), 0 (default) or positive");
        if (q->has_ttl && q->ttl_s < 0)
                return ab_err_set(err, AB_E_INVALID, 0, "ttl_s: must be 0 (none) or positive");
        if (q->limits && ab_limits_validate(q->limits, err) < 0)
                return ab_err_wrap(err, "limits");
        if (q->network) {
                ab_netpol pol;
                if (ab_netpol_parse(q->network, &pol, err) < 0)
                        return -1;
                int r = 0;
                if (pol.mode != AB_NET_NONE && !m->o.net)
                        r = ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                       "network.mode \"%s\" is not available in this server",
                                       ab_net_mode_name(pol.mode));
                else if (m->o.net)
                        r = ab_net_check(m->o.net, &pol, err);
                ab_netpol_clear(&pol);
                if (r < 0)
                        return -1;
        }
        if (q->env) {
                const char *k;
                json_t *v;
                if (!json_is_object(q->env))
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "env: must be an object of strings");
                json_object_foreach(q->env, k, v)
                {
                        if (!json_is_string(v))
                                return ab_err_set(err, AB_E_INVALID, 0, "env.%s: must be a string",
                                                  k);
                        if (!*k || strchr(k, '='))
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "env: bad variable name \"%s\"", k);
                }
        }
        if (q->metadata && !json_is_object(q->metadata))
                return ab_err_set(err, AB_E_INVALID, 0, "metadata: must be an object");
        if (q->entrypoint) {
                size_t n = json_array_size(q->entrypoint);
                if (!json_is_array(q->entrypoint) || n == 0 || n > 256)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "entrypoint: must be a list of 1 to 256 strings (a "
                                          "program and its arguments)");
                for (size_t i = 0; i < n; i++) {
                        const char *w = json_string_value(json_array_get(q->entrypoint, i));
                        if (!w || (i == 0 && !*w))
                                return ab_err_set(err, AB_E_INVALID, 0,
                                                  "entrypoint[%zu]: must be a%s string", i,
                                                  i == 0 ? " non-empty" : "");
                }
        }
        if (q->backend && !ab_backend_find(m->o.backend, q->backend)) {
                char names[128];
                ab_backend_names(m->o.backend, names, sizeof(names));
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "backend: '%s' is not a backend of this server (it has: %s)",
                                  q->backend, names);
        }
        if (q->image) {
                if (!m->o.images && !mgr_engine_images(m, q->backend))
                        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                          "image: this server has no image store");
                ab_image_ref ref;
                if (strncmp(q->image, "sha256:", 7) && ab_image_ref_parse(q->image, &ref, err) < 0)
                        return ab_err_wrap(err, "image");
                if (strncmp(q->image, "sha256:", 7))
                        ab_image_ref_clear(&ref);
        }
        return 0;
}

int mgr_check_keys(ab_manager *m, const ab_acquire_req *q, const char *scope, const char **app,
                   char idbuf[64], ab_err **err)
{
        return check_keys(m, q, scope, app, idbuf, err);
}

/* Creates the backend box for a freshly inserted "creating" row (from img
 * when not NULL: held first, released again when the create fails). */
static int create_backend(ab_manager *m, ab_box_rec *r, const ab_limits *lim, const ab_image *img,
                          const mgr_mounts *mm, ab_err **err)
{
        ab_backend *b = m->o.backend;
        ab_box_spec spec = {.id = r->backend_id,
                            .limits = *lim,
                            .mounts = mm->v,
                            .n_mounts = mm->n,
                            .backend = mgr_rec_backend(r)};
        /* for a backend that enforces the mode itself (kubernetes) */
        const json_t *net = r->spec ? json_object_get(r->spec, "network") : NULL;
        spec.network = json_string_value(json_object_get(net, "mode"));
        if (spec.backend && mgr_engine_images(m, spec.backend)) {
                /* the engine's own image: a reference it pulls itself */
                const json_t *ri = mgr_rec_image(r);
                spec.image = ri ? json_string_value(json_object_get(ri, "ref")) : NULL;
        } else if (img) {
                if (mgr_image_hold(m, r->backend_id, img, err) < 0)
                        return -1;
                spec.layers = (const char *const *)img->layers;
                spec.image = img->id;
        }
        ab_err *e = NULL;
        uint64_t t0 = ab_now_ns();
        if (b->ops->create(b, &spec, &e) < 0) {
                if (img && e->code != AB_E_CONFLICT)
                        mgr_image_release(m, r->backend_id);
                if (e->code == AB_E_CONFLICT && !r->app_id) {
                        /* A box by this name exists (made by the CLI, or a
                         * record lost): the admin's, adopted. */
                        ab_err_free(&e);
                        return mgr_ensure_running(m, r, err) < 0 ? -1 : 0;
                }
                if (e->code == AB_E_CONFLICT) {
                        /* ... and never an app's: the caller records it as
                         * the admin's (ab_manager_adopt) */
                        ab_err_free(&e);
                        return ab_err_set(err, AB_E_CONFLICT, 0, "id \"%s\" belongs to another app",
                                          r->id);
                }
                ab_metrics_op(m->o.metrics, "create", false);
                ab_log(AB_LOG_WARN, "box cannot be created", "box", r->id, "error", e->msg, NULL);
                if (e->code == AB_E_NOT_FOUND || e->code == AB_E_INVALID ||
                    e->code == AB_E_UNSUPPORTED) {
                        /* a volume deleted meanwhile, a path the box's tree refuses, a
                         * mount the backend has no way to make (501, not 503: no retry
                         * helps) */
                        ab_err_wrap(&e, "box %s cannot be created", r->id);
                        return mgr_propagate(err, e);
                }
                /* the host's disk filled up under the create: say so (507) */
                ab_err_set(err,
                           e->code == AB_E_LIMIT || e->errnum == ENOSPC ? AB_E_STORAGE
                                                                        : AB_E_UNAVAILABLE,
                           0, "box %s cannot be created: %s", r->id, e->msg);
                ab_err_free(&e);
                return -1;
        }
        ab_metrics_op(m->o.metrics, "create", true);
        mgr_set_status(m, r, AB_BOX_RUNNING, NULL);
        if (img)
                mgr_image_own_folders(m, r);
        else if (spec.image)
                mgr_image_learn(m, r);
        mgr_entrypoint_start(m, r);
        mgr_emit(m, "box.created", r,
                 json_pack("{s:I,s:b}", "duration_ms", (json_int_t)((ab_now_ns() - t0) / 1000000),
                           "from_pool", 0));
        ab_log(AB_LOG_INFO, "box created", "box", r->id, NULL);
        return 0;
}

/* One acquire. With no_legacy the keys' id is the second scheme's even when
 * the store has a box of theirs at the first's; *retry asks for another round
 * (that box went away meanwhile). */
static int acquire_once(ab_manager *m, const ab_acquire_req *q, const char *scope, bool no_legacy,
                        ab_box_rec *out, bool *created, bool *retry, ab_err **err)
{
        char id[64];
        const char *app = NULL;
        memset(out, 0, sizeof(*out));
        *created = false;
        if (check_keys(m, q, scope, &app, id, err) < 0)
                return -1;
        char derived[64];
        snprintf(derived, sizeof(derived), "%s", id);
        if (!no_legacy)
                legacy_id(m, q, app, scope, id);
        ab_limits lim = m->o.limits;
        if (q->limits)
                lim = *q->limits;
        if (mgr_caps_check(m, app, &lim, q->network, err) < 0)
                return -1;
        /* Mounts are checked before anything is counted or recorded; an
         * existing box keeps its own. */
        mgr_mounts mm;
        if (mgr_mounts_parse(m, q, scope, &mm, err) < 0) {
                mgr_mounts_clear(&mm);
                return -1;
        }
        ab_backend *engine = mgr_engine_images(m, q->backend);
        bool eng = engine != NULL;
        for (size_t i = 0; eng && i < mm.n; i++) {
                if (mm.v[i].kind == AB_MOUNT_VOLUME || mm.v[i].kind == AB_MOUNT_READONLY) {
                        mgr_mounts_clear(&mm);
                        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                          "volumes and readonly_paths are not supported on the "
                                          "%s backend (mounts and blocked_paths are; "
                                          "docs/backends.md)",
                                          engine->ops->name);
                }
        }
        json_t *dimg = NULL; /* an engine-image box's image config, from its engine */
        bool pool_ok = m->o.pool_size > 0 && limits_equal(&lim, &m->o.limits) && !q->image &&
                       !mm.n && !q->backend;
        ab_image img = {0};
        bool have_img = false;
        bool legacy = strcmp(id, derived) != 0;

        slot *s = mgr_slot_get(m, id);
        pthread_mutex_lock(&s->lock);
        int rc = -1;
        /* an insert refused while no box is at id: the store has a box of
         * these keys at another id (its one-box-per-keys index) */
        int conflicts = 0;
        int64_t deadline = mgr_wall_ms() + WAIT_OTHER_MS;
        for (;;) {
                ab_err *e = NULL;
                ab_box_rec r = {0};
                if (ab_store_box_get(m->o.store, m->provider, id, &r, &e) == 0) {
                        if (!mgr_scope_ok(&r, scope)) {
                                ab_box_rec_clear(&r);
                                ab_err_set(err, AB_E_CONFLICT, 0,
                                           "id \"%s\" belongs to another app", id);
                                break;
                        }
                        if (!mgr_rec_is_requested(&r, q, app, scope)) {
                                /* the keys' id is another box's (one the admin named) */
                                ab_box_rec_clear(&r);
                                ab_err_set(err, AB_E_CONFLICT, 0,
                                           "id \"%s\" is another box's (its keys differ)", id);
                                break;
                        }
                        if (r.status == AB_BOX_CREATING && mgr_owns(m, &r)) {
                                /* (another fleet node's creator is no process here) */
                                const char *who = mgr_rec_creator(&r);
                                if (mgr_creator_dead(who) && mgr_recover_creating(m, &r)) {
                                        ab_box_rec_clear(&r);
                                        continue;
                                }
                        }
                        if (r.status == AB_BOX_CREATING || r.status == AB_BOX_DELETING) {
                                /* Another process (or our deleter) is at work on it. */
                                bool creating = r.status == AB_BOX_CREATING;
                                ab_box_rec_clear(&r);
                                if (mgr_wall_ms() > deadline) {
                                        ab_err_set(err, creating ? AB_E_UNAVAILABLE : AB_E_CONFLICT,
                                                   0, "box %s is still being %s; try again", id,
                                                   creating ? "created" : "deleted");
                                        break;
                                }
                                pthread_mutex_unlock(&s->lock);
                                mgr_sleep_ms(50);
                                pthread_mutex_lock(&s->lock);
                                continue;
                        }
                        if (!mgr_owns(m, &r)) {
                                /* another fleet node's box (it won a race for these
                                 * keys): as it is; the server passes a use on to it */
                                *out = r;
                                rc = 0;
                                break;
                        }
                        if (mgr_ensure_running(m, &r, err) < 0) {
                                ab_box_rec_clear(&r);
                                break;
                        }
                        int64_t now = mgr_wall_ms();
                        ab_store_box_touch(m->o.store, m->provider, id, now, NULL);
                        if (r.last_active_at < now)
                                r.last_active_at = now;
                        *out = r;
                        rc = 0;
                        break;
                }
                if (e->code != AB_E_NOT_FOUND) {
                        if (err && !*err)
                                *err = e;
                        else
                                ab_err_free(&e);
                        break;
                }
                ab_err_free(&e);
                if (legacy) {
                        *retry = true; /* the old box went away: a new one at the new id */
                        break;
                }
                if (mgr_new_id_check(q, scope, err) < 0)
                        break;
                /* A new box from an image: the image first (pulled when the
                 * store lacks it), before anything is counted or recorded. */
                if (eng && !dimg) {
                        /* may pull: the slot is free meanwhile, as for our images */
                        pthread_mutex_unlock(&s->lock);
                        int ir = engine->ops->image_config(engine, q->image, &dimg, err);
                        pthread_mutex_lock(&s->lock);
                        if (ir < 0) {
                                dimg = NULL;
                                break;
                        }
                        continue; /* the box may have been made meanwhile */
                }
                if (q->image && !have_img && !eng) {
                        pthread_mutex_unlock(&s->lock);
                        int ir = mgr_image_resolve(m, scope, q->image, &img, err);
                        pthread_mutex_lock(&s->lock);
                        if (ir < 0)
                                break;
                        have_img = true;
                        continue; /* the box may have been made meanwhile */
                }
                /* A new box: its volumes must exist (looked up only now: an
                 * existing box keeps its own). */
                if (mgr_mounts_volumes_check(m, &mm, scope, err) < 0)
                        break;
                /* The app's quotas first, before anything is made;
                 * the reservation holds until the record counts the box. */
                mgr_ticket qt;
                if (mgr_quota_create_begin(m, app, lim.disk_mib, &qt, err) < 0)
                        break;
                mgr_fill_new_rec(m, q, app, id, &lim, &r);
                if (have_img)
                        json_object_set_new(r.spec, "image", mgr_image_spec(q->image, &img));
                if (dimg)
                        json_object_set(r.spec, "image", dimg);
                if (mm.n)
                        json_object_update_new(r.spec, mgr_mounts_spec(mm.v, mm.n));
                if (pool_ok) {
                        r.status = AB_BOX_RUNNING;
                        int c = ab_store_pool_claim(m->o.store, &r, &e);
                        if (c != 0)
                                mgr_quota_end(m, &qt);
                        if (c == 1) {
                                mgr_wake_pool(m);
                                ab_metrics_op(m->o.metrics, "pool_claim", true);
                                mgr_emit(m, "box.created", &r,
                                         json_pack("{s:I,s:b}", "duration_ms", (json_int_t)0,
                                                   "from_pool", 1));
                                ab_log(AB_LOG_INFO, "box acquired from the pool", "box", id,
                                       "backend_id", r.backend_id, NULL);
                                if (mgr_net_sync(m, &r, 0, false, err) < 0) {
                                        ab_box_rec_clear(&r);
                                        break;
                                }
                                *out = r;
                                *created = true;
                                rc = 0;
                                break;
                        }
                        if (c < 0) {
                                ab_box_rec_clear(&r);
                                if (e->code == AB_E_CONFLICT && ++conflicts < 3) {
                                        ab_err_free(&e);
                                        continue; /* made meanwhile: take that one */
                                }
                                if (err && !*err)
                                        *err = e;
                                else
                                        ab_err_free(&e);
                                break;
                        }
                        r.status = AB_BOX_CREATING;
                }
                /* A new disk: the host's free space next. */
                /* (an engine-image box's files live on its engine's disk, not ours) */
                mgr_disk_ticket dt = {0};
                if (!eng && mgr_disk_admit(m, lim.disk_mib, &dt, err) < 0) {
                        mgr_quota_end(m, &qt);
                        ab_box_rec_clear(&r);
                        break;
                }
                int ins = mgr_quota_insert(m, &qt, &r, &e);
                if (ins < 0) {
                        mgr_disk_end(m, &dt);
                        ab_box_rec_clear(&r);
                        if (e->code == AB_E_CONFLICT && ++conflicts < 3) {
                                ab_err_free(&e);
                                continue; /* another process won: take its box */
                        }
                        if (e->code == AB_E_CONFLICT) {
                                ab_err_free(&e);
                                ab_err_set(err, AB_E_CONFLICT, 0,
                                           "a box of these keys exists under another id");
                                break;
                        }
                        if (err && !*err)
                                *err = e;
                        else
                                ab_err_free(&e);
                        break;
                }
                int made = create_backend(m, &r, &lim, have_img ? &img : NULL, &mm, err);
                mgr_disk_end(m, &dt);
                if (made < 0) {
                        ab_store_box_delete(m->o.store, m->provider, id, NULL);
                        if (err && *err && (*err)->code == AB_E_CONFLICT)
                                ab_manager_adopt(m, id, NULL); /* a box of the CLI's */
                        ab_box_rec_clear(&r);
                        break;
                }
                /* idle time counts from when the box is ready, not from the request */
                r.last_active_at = mgr_wall_ms();
                ab_store_box_touch(m->o.store, m->provider, id, r.last_active_at, NULL);
                if (mgr_net_sync(m, &r, 0, false, err) < 0) {
                        ab_box_rec_clear(&r); /* the box stays; a retry applies the policy */
                        break;
                }
                *out = r;
                *created = true;
                rc = 0;
                break;
        }
        pthread_mutex_unlock(&s->lock);
        mgr_slot_put(m, s);
        ab_image_clear(&img);
        json_decref(dimg);
        mgr_mounts_clear(&mm);
        if (rc == 0)
                mgr_enforce_cap(m, id);
        return rc;
}

int ab_manager_acquire(ab_manager *m, const ab_acquire_req *q, const char *scope, ab_box_rec *out,
                       bool *created, ab_err **err)
{
        bool retry = false;
        int rc = acquire_once(m, q, scope, false, out, created, &retry, err);
        if (rc < 0 && retry)
                rc = acquire_once(m, q, scope, true, out, created, &retry, err);
        return rc;
}
