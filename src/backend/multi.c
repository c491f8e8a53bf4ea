/* multi.c - one backend over several (backend.h, ab_multi_open): a server
 * whose boxes run on the native engine and on a Docker engine side by side.
 *
 * Which backend has a box is asked once (info on each, in order) and
 * remembered in a small table, forgotten when the box is destroyed; create
 * records it at once. The table is only a cache: after a restart it fills
 * again from the backends themselves, which stay the truth. */
#include "backend/backend.h"
#include "base/util.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MULTI_MAX 4

typedef struct owner {
        char *id;
        size_t idx;
} owner;

typedef struct multi {
        ab_backend base;
        ab_backend *b[MULTI_MAX];
        size_t n;
        size_t def; /* index of the default backend for creates */
        pthread_mutex_t mu;
        owner *own; /* unsorted; a few thousand boxes at most */
        size_t n_own, cap_own;
} multi;

static multi *M(ab_backend *b)
{
        return (multi *)b;
}

static bool cached(multi *m, const char *id, size_t *idx)
{
        bool hit = false;
        pthread_mutex_lock(&m->mu);
        for (size_t i = 0; i < m->n_own; i++) {
                if (strcmp(m->own[i].id, id) == 0) {
                        *idx = m->own[i].idx;
                        hit = true;
                        break;
                }
        }
        pthread_mutex_unlock(&m->mu);
        return hit;
}

static void remember(multi *m, const char *id, size_t idx)
{
        pthread_mutex_lock(&m->mu);
        for (size_t i = 0; i < m->n_own; i++) {
                if (strcmp(m->own[i].id, id) == 0) {
                        m->own[i].idx = idx;
                        pthread_mutex_unlock(&m->mu);
                        return;
                }
        }
        if (m->n_own == m->cap_own) {
                m->cap_own = m->cap_own ? m->cap_own * 2 : 64;
                m->own = xrealloc(m->own, m->cap_own * sizeof(*m->own));
        }
        m->own[m->n_own++] = (owner){xstrdup(id), idx};
        pthread_mutex_unlock(&m->mu);
}

static void forget(multi *m, const char *id)
{
        pthread_mutex_lock(&m->mu);
        for (size_t i = 0; i < m->n_own; i++) {
                if (strcmp(m->own[i].id, id) == 0) {
                        free(m->own[i].id);
                        m->own[i] = m->own[--m->n_own];
                        break;
                }
        }
        pthread_mutex_unlock(&m->mu);
}

/* The backend that has box id: AB_E_NOT_FOUND when none has it. */
static ab_backend *owner_of(multi *m, const char *id, ab_err **err)
{
        size_t idx;
        if (cached(m, id, &idx))
                return m->b[idx];
        for (size_t i = 0; i < m->n; i++) {
                ab_box_info info;
                ab_err *e = NULL;
                if (m->b[i]->ops->info(m->b[i], id, &info, &e) == 0) {
                        ab_box_info_clear(&info);
                        remember(m, id, i);
                        return m->b[i];
                }
                if (e->code != AB_E_NOT_FOUND) {
                        if (err && !*err)
                                *err = e;
                        else
                                ab_err_free(&e);
                        return NULL;
                }
                ab_err_free(&e);
        }
        ab_err_set(err, AB_E_NOT_FOUND, 0, "no box with id '%s'", id);
        return NULL;
}

static int index_of(multi *m, const char *name, size_t *idx)
{
        for (size_t i = 0; i < m->n; i++) {
                if (strcmp(m->b[i]->ops->name, name) == 0) {
                        *idx = i;
                        return 0;
                }
        }
        return -1;
}

static int unknown_backend(multi *m, const char *name, ab_err **err)
{
        char names[128];
        ab_backend_names(&m->base, names, sizeof(names));
        return ab_err_set(err, AB_E_INVALID, 0, "unknown backend '%s' (this server has: %s)", name,
                          names);
}

static int multi_create(ab_backend *b, const ab_box_spec *spec, ab_err **err)
{
        multi *m = M(b);
        size_t idx = m->def;
        if (spec->backend && index_of(m, spec->backend, &idx) < 0)
                return unknown_backend(m, spec->backend, err);
        /* An id is one box on this server, whichever backend has it. */
        for (size_t i = 0; i < m->n; i++) {
                ab_box_info info;
                ab_err *e = NULL;
                if (i == idx)
                        continue;
                if (m->b[i]->ops->info(m->b[i], spec->id, &info, &e) == 0) {
                        ab_box_info_clear(&info);
                        return ab_err_set(err, AB_E_CONFLICT, 0,
                                          "box '%s' exists (on the %s backend)", spec->id,
                                          m->b[i]->ops->name);
                }
                ab_err_free(&e);
        }
        /* Remembered first: a create that fails half-way leaves a box (in
         * error or creating) that only this backend can destroy. */
        remember(m, spec->id, idx);
        return m->b[idx]->ops->create(m->b[idx], spec, err);
}

#define ROUTE(op, ...)                                                                             \
        ab_backend *o = owner_of(M(b), id, err);                                                   \
        if (!o)                                                                                    \
                return -1;                                                                         \
        return o->ops->op(o, __VA_ARGS__)

static int multi_start(ab_backend *b, const char *id, ab_err **err)
{
        ROUTE(start, id, err);
}

static int multi_stop(ab_backend *b, const char *id, ab_err **err)
{
        ROUTE(stop, id, err);
}

static int multi_pause(ab_backend *b, const char *id, ab_err **err)
{
        ROUTE(pause, id, err);
}

static int multi_resume(ab_backend *b, const char *id, ab_err **err)
{
        ROUTE(resume, id, err);
}

static int multi_info(ab_backend *b, const char *id, ab_box_info *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        ROUTE(info, id, out, err);
}

static int multi_connect(ab_backend *b, const char *id, ab_err **err)
{
        ROUTE(connect, id, err);
}

static void multi_release(ab_backend *b, const char *id, int fd)
{
        ab_backend *o = owner_of(M(b), id, NULL);
        if (o && o->ops->release)
                o->ops->release(o, id, fd);
        else
                close(fd);
}

static int multi_stats(ab_backend *b, const char *id, ab_box_stats *out, ab_err **err)
{
        ROUTE(stats, id, out, err);
}

static int multi_connect_unix(ab_backend *b, const char *id, const char *path, ab_err **err)
{
        ab_backend *o = owner_of(M(b), id, err);
        if (!o)
                return -1;
        if (!o->ops->connect_unix)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "the %s backend cannot reach a socket inside box %s",
                                  o->ops->name, id);
        return o->ops->connect_unix(o, id, path, err);
}

static int multi_port_connect(ab_backend *b, const char *id, uint16_t port, int timeout_ms,
                              ab_err **err)
{
        ab_backend *o = owner_of(M(b), id, err);
        if (!o)
                return -1;
        if (!o->ops->port_connect)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "the %s backend cannot reach a port of box %s", o->ops->name, id);
        return o->ops->port_connect(o, id, port, timeout_ms, err);
}

static int multi_image_config(ab_backend *b, const char *ref, json_t **out, ab_err **err)
{
        multi *m = M(b);
        ab_backend *d = m->b[m->def];
        *out = NULL;
        if (!d->ops->image_config)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "the %s backend runs images of agentbox's own store",
                                  d->ops->name);
        return d->ops->image_config(d, ref, out, err);
}

static int multi_destroy(ab_backend *b, const char *id, ab_err **err)
{
        ab_backend *o = owner_of(M(b), id, err);
        if (!o)
                return -1;
        int rc = o->ops->destroy(o, id, err);
        if (rc == 0)
                forget(M(b), id);
        return rc;
}

static int multi_disk_alloc(ab_backend *b, const char *id, uint64_t *bytes, ab_err **err)
{
        ab_backend *o = owner_of(M(b), id, err);
        if (!o)
                return -1;
        if (!o->ops->disk_alloc)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "the %s backend keeps no disk of its own for box %s",
                                  o->ops->name, id);
        return o->ops->disk_alloc(o, id, bytes, err);
}

static int multi_set_network(ab_backend *b, const char *id, const char *mode, ab_err **err)
{
        ab_backend *o = owner_of(M(b), id, err);
        if (!o)
                return -1;
        if (!o->ops->set_network)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "the %s backend leaves box %s's network to the server",
                                  o->ops->name, id);
        return o->ops->set_network(o, id, mode, err);
}

static int multi_fork(ab_backend *b, const char *src, const ab_box_spec *spec, ab_err **err)
{
        multi *m = M(b);
        ab_backend *o = owner_of(m, src, err);
        if (!o)
                return -1;
        if (!o->ops->fork)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "boxes of the %s backend cannot be forked", o->ops->name);
        size_t idx = 0;
        (void)index_of(m, o->ops->name, &idx);
        remember(m, spec->id, idx);
        return o->ops->fork(o, src, spec, err);
}

static int multi_snapshot(ab_backend *b, const char *id, int out_fd, ab_err **err)
{
        ab_backend *o = owner_of(M(b), id, err);
        if (!o)
                return -1;
        if (!o->ops->snapshot)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "boxes of the %s backend cannot be snapshotted", o->ops->name);
        return o->ops->snapshot(o, id, out_fd, err);
}

static int cmp_info(const void *a, const void *b)
{
        return strcmp(((const ab_box_info *)a)->id, ((const ab_box_info *)b)->id);
}

static int multi_list(ab_backend *b, ab_box_info **out, size_t *n, ab_err **err)
{
        multi *m = M(b);
        ab_box_info *all = NULL;
        size_t len = 0;
        for (size_t i = 0; i < m->n; i++) {
                ab_box_info *v = NULL;
                size_t k = 0;
                if (m->b[i]->ops->list(m->b[i], &v, &k, err) < 0) {
                        for (size_t j = 0; j < len; j++)
                                ab_box_info_clear(&all[j]);
                        free(all);
                        return -1;
                }
                all = xrealloc(all, (len + k + 1) * sizeof(*all));
                for (size_t j = 0; j < k; j++) {
                        remember(m, v[j].id, i);
                        all[len++] = v[j];
                }
                free(v);
        }
        if (len)
                qsort(all, len, sizeof(*all), cmp_info);
        *out = all;
        *n = len;
        return 0;
}

static void multi_free(ab_backend *b)
{
        multi *m = M(b);
        for (size_t i = 0; i < m->n; i++)
                m->b[i]->ops->free(m->b[i]);
        for (size_t i = 0; i < m->n_own; i++)
                free(m->own[i].id);
        free(m->own);
        pthread_mutex_destroy(&m->mu);
        free(m);
}

static ab_backend_ops multi_ops_for(const char *name)
{
        return (ab_backend_ops){
            .name = name,
            .create = multi_create,
            .start = multi_start,
            .stop = multi_stop,
            .pause = multi_pause,
            .resume = multi_resume,
            .destroy = multi_destroy,
            .info = multi_info,
            .list = multi_list,
            .connect = multi_connect,
            .release = multi_release,
            .stats = multi_stats,
            .connect_unix = multi_connect_unix,
            .free = multi_free,
            .disk_alloc = multi_disk_alloc,
            .fork = multi_fork,
            .snapshot = multi_snapshot,
            .image_config = multi_image_config,
            .set_network = multi_set_network,
            .port_connect = multi_port_connect,
        };
}

/* Volumes and sub-cgroups are backends[0]'s: each call goes to it with its
 * own handle (its tables read their backend's state from the handle they
 * are given, which the multi backend's is not). */
static ab_backend *first(ab_backend *b)
{
        return M(b)->b[0];
}

static int mv_create(ab_backend *b, const char *name, uint64_t size_mib, const char *app,
                     ab_err **err)
{
        ab_backend *t = first(b);
        return t->vol->create(t, name, size_mib, app, err);
}

static int mv_get(ab_backend *b, const char *name, ab_volume_info *out, ab_err **err)
{
        ab_backend *t = first(b);
        return t->vol->get(t, name, out, err);
}

static int mv_list(ab_backend *b, ab_volume_info **out, size_t *n, ab_err **err)
{
        ab_backend *t = first(b);
        return t->vol->list(t, out, n, err);
}

static int mv_remove(ab_backend *b, const char *name, ab_err **err)
{
        ab_backend *t = first(b);
        return t->vol->remove(t, name, err);
}

static const ab_volume_ops multi_vol = {mv_create, mv_get, mv_list, mv_remove};

static int ms_create(ab_backend *b, const char *id, const char *sub, uint64_t memory_bytes,
                     uint64_t pids, pid_t host_pid, ab_err **err)
{
        ab_backend *t = first(b);
        return t->subcg->create(t, id, sub, memory_bytes, pids, host_pid, err);
}

static int ms_set_memory(ab_backend *b, const char *id, const char *sub, uint64_t bytes,
                         ab_err **err)
{
        ab_backend *t = first(b);
        return t->subcg->set_memory(t, id, sub, bytes, err);
}

static int ms_end(ab_backend *b, const char *id, const char *sub, uint64_t *oom_kills, ab_err **err)
{
        ab_backend *t = first(b);
        return t->subcg->end(t, id, sub, oom_kills, err);
}

static const ab_subcg_ops multi_subcg = {ms_create, ms_set_memory, ms_end};

/* The ops table lives with the multi backend (its name is backends[0]'s). */
typedef struct multi_box {
        multi m;
        ab_backend_ops ops;
} multi_box;

int ab_multi_open(ab_backend **backends, size_t n, const char *default_name, ab_backend **out,
                  ab_err **err)
{
        if (n == 0 || n > MULTI_MAX) {
                for (size_t i = 0; i < n; i++)
                        backends[i]->ops->free(backends[i]);
                return ab_err_set(err, AB_E_INVALID, 0, "between 1 and %d backends, not %zu",
                                  MULTI_MAX, n);
        }
        multi_box *mb = xzalloc(sizeof(*mb));
        multi *m = &mb->m;
        mb->ops = multi_ops_for(backends[0]->ops->name);
        m->base.ops = &mb->ops;
        m->base.subcg = backends[0]->subcg ? &multi_subcg : NULL;
        m->base.vol = backends[0]->vol ? &multi_vol : NULL;
        pthread_mutex_init(&m->mu, NULL);
        for (size_t i = 0; i < n; i++)
                m->b[m->n++] = backends[i];
        if (default_name && index_of(m, default_name, &m->def) < 0) {
                unknown_backend(m, default_name, err);
                multi_free(&m->base);
                return -1;
        }
        *out = &m->base;
        return 0;
}

ab_backend *ab_backend_find(ab_backend *b, const char *name)
{
        if (!b || !name)
                return NULL;
        if (b->ops->free == multi_free) {
                multi *m = M(b);
                size_t idx;
                return index_of(m, name, &idx) == 0 ? m->b[idx] : NULL;
        }
        return strcmp(b->ops->name, name) == 0 ? b : NULL;
}

const char *ab_backend_default(ab_backend *b)
{
        if (b->ops->free == multi_free)
                return M(b)->b[M(b)->def]->ops->name;
        return b->ops->name;
}

ab_backend *ab_backend_pick(ab_backend *b, const char *name)
{
        return ab_backend_find(b, name ? name : ab_backend_default(b));
}

void ab_backend_names(ab_backend *b, char *buf, size_t size)
{
        if (!size)
                return;
        buf[0] = '\0';
        if (b->ops->free != multi_free) {
                snprintf(buf, size, "%s", b->ops->name);
                return;
        }
        multi *m = M(b);
        for (size_t i = 0; i < m->n; i++) {
                size_t len = strlen(buf);
                if (len + 1 >= size)
                        break;
                snprintf(buf + len, size - len, "%s%s", i ? ", " : "", m->b[i]->ops->name);
        }
}
