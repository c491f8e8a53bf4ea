/* Per-app quotas: boxes, running boxes, disk (the sum of the disk limits),
 * execs in flight and the exec rate. Box counts come from the store (the
 * registry every server process shares) plus this process' reservations of
 * creates and starts in progress, checked and reserved under one lock, so
 * concurrent creates never pass a limit; execs in flight and the rate's
 * token bucket are counted here. */
#include "core/manager_int.h"
#include "net/policy.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/statvfs.h>
#include <unistd.h>

typedef struct mgr_app {
        struct mgr_app *next;
        char *name; /* the app id; "APP\nKEY_ID" for the bucket of a key with its own rate */
        int64_t execs;
        int64_t rsv_boxes, rsv_running, rsv_disk_mib; /* reservations in progress */
        ab_bucket bucket;
        int64_t rejected[AB_Q_N];
        double share;      /* in a fleet: this node's part of the app's exec rate */
        uint64_t share_ns; /* when share was counted (0 = never) */
} mgr_app;

struct mgr_quota {
        pthread_mutex_t lock;
        mgr_app *apps;
};

static _Thread_local const ab_caller *tl_caller;

void ab_manager_set_caller(const ab_caller *c)
{
        tl_caller = c;
}

/* A box's ceiling of pids when the host's own is larger: enough for any
 * build or test run, far from the host's pid space. */
#define HOST_PIDS_CEILING 32768

static int64_t host_pid_max(void)
{
        int64_t v = 0;
        FILE *f = fopen("/proc/sys/kernel/pid_max", "re");
        if (f) {
                long long n;
                if (fscanf(f, "%lld", &n) == 1 && n > 0)
                        v = n;
                fclose(f);
        }
        return v;
}

/* Fills the server's ceilings left "auto" (AB_QUOTA_INHERIT) from the host:
 * its CPUs, its RAM, its pid space and the size of the boxes' disk, never
 * below the server's own default limits (which must always fit). */
static void caps_fit_host(ab_manager *m)
{
        ab_limit_caps *c = &m->o.quotas.max_limits;
        const ab_limits *d = &m->o.limits;
        if (c->cpus < 0) {
                long n = sysconf(_SC_NPROCESSORS_ONLN);
                c->cpus = n > 0 ? (double)n : 0;
                if (c->cpus && c->cpus < d->cpus)
                        c->cpus = d->cpus;
        }
        if (c->memory_mib < 0) {
                long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
                c->memory_mib =
                    pages > 0 && psz > 0
                        ? (int64_t)(((unsigned __int128)pages * (unsigned long)psz) >> 20)
                        : 0;
                if (c->memory_mib && c->memory_mib < (int64_t)d->memory_mib)
                        c->memory_mib = (int64_t)d->memory_mib;
        }
        if (c->pids < 0) {
                int64_t pm = host_pid_max();
                c->pids = pm > 0 && pm < HOST_PIDS_CEILING ? pm : HOST_PIDS_CEILING;
                if (c->pids < (int64_t)d->pids)
                        c->pids = (int64_t)d->pids;
        }
        if (c->disk_mib < 0) {
                struct statvfs st;
                c->disk_mib = 0;
                if (m->o.disk_dir && statvfs(m->o.disk_dir, &st) == 0)
                        c->disk_mib =
                            (int64_t)(((unsigned __int128)st.f_blocks * st.f_frsize) >> 20);
                if (c->disk_mib && c->disk_mib < (int64_t)d->disk_mib)
                        c->disk_mib = (int64_t)d->disk_mib;
        }
        /* not given (options zeroed, as in tests and short-lived users): every mode */
        if (m->o.quotas.allowed_network <= 0)
                m->o.quotas.allowed_network = AB_QUOTA_NET_ALL;
}

void mgr_quota_init(ab_manager *m)
{
        m->quota = xzalloc(sizeof(*m->quota));
        pthread_mutex_init(&m->quota->lock, NULL);
        caps_fit_host(m);
}

void mgr_quota_free(ab_manager *m)
{
        if (!m->quota)
                return;
        for (mgr_app *a = m->quota->apps, *next; a; a = next) {
                next = a->next;
                free(a->name);
                free(a);
        }
        pthread_mutex_destroy(&m->quota->lock);
        free(m->quota);
        m->quota = NULL;
}

/* The state of name, made on first use. Caller holds the quota lock. */
static mgr_app *app_get(struct mgr_quota *q, const char *name)
{
        for (mgr_app *a = q->apps; a; a = a->next)
                if (!strcmp(a->name, name))
                        return a;
        mgr_app *a = xzalloc(sizeof(*a));
        a->name = xstrdup(name);
        a->next = q->apps;
        q->apps = a;
        return a;
}

void ab_manager_quota_of(ab_manager *m, const char *app, const ab_quota *key, ab_quota *out)
{
        *out = m->o.quotas;
        for (size_t i = 0; app && i < m->o.n_app_quotas; i++)
                if (!strcmp(m->o.app_quotas[i].app_id, app))
                        ab_quota_apply(out, &m->o.app_quotas[i].q);
        if (!key && tl_caller)
                key = tl_caller->quotas;
        if (key)
                ab_quota_apply(out, key);
}

/* "APP" or "the server" in a ceiling's message. */
static const char *caps_owner(const char *app, char *buf, size_t len)
{
        if (!app)
                return "this server";
        snprintf(buf, len, "app \"%s\"", app);
        return buf;
}

static int caps_refuse(const char *what, const char *app, ab_err **err, const char *fmt, ...)
    AB_PRINTF(4, 5);
static int caps_refuse(const char *what, const char *app, ab_err **err, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *msg = NULL;
        if (vasprintf(&msg, fmt, ap) < 0)
                abort();
        va_end(ap);
        char buf[160];
        ab_log(AB_LOG_INFO, "over a ceiling", "app", app ? app : "", "ceiling", what, NULL);
        int r = ab_err_set(err, AB_E_INVALID, 0,
                           "%s: over the ceiling %s of %s (ask the operator "
                           "to raise it)",
                           msg, what, caps_owner(app, buf, sizeof(buf)));
        free(msg);
        return r;
}

static int limits_check(const ab_limit_caps *c, const char *app, const ab_limits *l, ab_err **err)
{
        if (c->cpus > 0 && l->cpus > c->cpus)
                return caps_refuse("max_limits.cpus", app, err, "limits.cpus %g > %g", l->cpus,
                                   c->cpus);
        if (c->memory_mib > 0 && l->memory_mib > (uint64_t)c->memory_mib)
                return caps_refuse("max_limits.memory_mib", app, err,
                                   "limits.memory_mib %" PRIu64 " MiB > %" PRId64 " MiB",
                                   l->memory_mib, c->memory_mib);
        if (c->pids > 0 && l->pids > (uint64_t)c->pids)
                return caps_refuse("max_limits.pids", app, err,
                                   "limits.pids %" PRIu64 " > %" PRId64, l->pids, c->pids);
        if (c->disk_mib > 0 && l->disk_mib > (uint64_t)c->disk_mib)
                return caps_refuse("max_limits.disk_mib", app, err,
                                   "limits.disk_mib %" PRIu64 " MiB > %" PRId64 " MiB", l->disk_mib,
                                   c->disk_mib);
        return 0;
}

int mgr_caps_check(ab_manager *m, const char *app, const ab_limits *lim, json_t *network,
                   ab_err **err)
{
        ab_quota q;
        ab_manager_quota_of(m, app, NULL, &q);
        if (lim && limits_check(&q.max_limits, app, lim, err) < 0)
                return -1;
        if (!app || !network || q.allowed_network < 0)
                return 0;
        ab_netpol pol;
        if (ab_netpol_parse(network, &pol, err) < 0)
                return -1;
        const char *mode = ab_net_mode_name(pol.mode);
        ab_netpol_clear(&pol);
        if (!(q.allowed_network & ab_quota_net_bit(mode))) {
                json_t *allowed = ab_quota_net_json(q.allowed_network | AB_QUOTA_NET_NONE);
                char *names = json_dumps(allowed, JSON_COMPACT);
                json_decref(allowed);
                int r = caps_refuse("allowed_network", app, err,
                                    "network.mode \"%s\" is not allowed (allowed: %s)", mode,
                                    names ? names : "[\"none\"]");
                free(names);
                return r;
        }
        return 0;
}

int mgr_caps_check_volume(ab_manager *m, const char *app, uint64_t size_mib, ab_err **err)
{
        ab_quota q;
        ab_manager_quota_of(m, app, NULL, &q);
        int64_t cap = q.max_limits.disk_mib;
        if (cap > 0 && size_mib > (uint64_t)cap)
                return caps_refuse("max_limits.disk_mib", app, err,
                                   "size_mib %" PRIu64 " MiB > %" PRId64 " MiB", size_mib, cap);
        return 0;
}

static bool counted(const ab_box_rec *r)
{
        return r->app_id && r->mode != AB_MODE_POOL && r->mode != AB_MODE_SYSTEM;
}

static bool is_running(ab_box_status s)
{
        return s == AB_BOX_CREATING || s == AB_BOX_RUNNING || s == AB_BOX_PAUSED;
}

/* The images app pulled or made count against its disk (in whole MiB). */
static int image_usage(ab_manager *m, const char *app, ab_app_usage *u, ab_err **err)
{
        uint64_t bytes = 0;
        if (!m->o.images)
                return 0;
        if (ab_image_app_bytes(m->o.images, app, &bytes, err) < 0)
                return -1;
        u->image_mib = (int64_t)((bytes + (1u << 20) - 1) >> 20);
        u->disk_mib += u->image_mib;
        return 0;
}

/* The app's boxes in the store (skipping exclude) and its images. */
static int store_usage(ab_manager *m, const char *app, const char *exclude, ab_app_usage *u,
                       ab_err **err)
{
        ab_box_filter f = {.provider = m->provider, .app_id = app};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, err) < 0)
                return -1;
        for (size_t i = 0; i < n; i++) {
                const ab_box_rec *r = &rs[i];
                if (!counted(r) || r->status == AB_BOX_DELETING ||
                    (exclude && !strcmp(r->id, exclude)))
                        continue;
                u->boxes++;
                u->running += is_running(r->status);
                ab_limits l;
                mgr_limits_from_rec(m, r, &l);
                u->disk_mib += (int64_t)l.disk_mib;
        }
        ab_box_recs_free(rs, n);
        return image_usage(m, app, u, err);
}

static int refuse(ab_manager *m, mgr_app *a, ab_quota_kind k, const char *app, ab_err **err,
                  const char *fmt, ...) AB_PRINTF(6, 7);
static int refuse(ab_manager *m, mgr_app *a, ab_quota_kind k, const char *app, ab_err **err,
                  const char *fmt, ...)
{
        a->rejected[k]++;
        va_list ap;
        va_start(ap, fmt);
        char *what = NULL;
        if (vasprintf(&what, fmt, ap) < 0)
                abort();
        va_end(ap);
        ab_log(AB_LOG_INFO, "quota exceeded", "app", app, "quota", ab_quota_name(k), NULL);
        int r = ab_err_set(err, AB_E_QUOTA, 0, "quota %s of app \"%s\" exceeded: %s",
                           ab_quota_name(k), app, what);
        free(what);
        (void)m;
        return r;
}

/* Checks and reserves boxes/running/disk of app. Caller holds the quota lock. */
static int reserve(ab_manager *m, const char *app, const char *exclude, int64_t boxes,
                   int64_t running, int64_t disk_mib, mgr_ticket *t, ab_err **err)
{
        ab_quota q;
        ab_manager_quota_of(m, app, NULL, &q);
        mgr_app *a = app_get(m->quota, app);
        if (q.max_boxes <= 0 && q.max_running <= 0 && q.max_disk_mib <= 0)
                goto ok; /* nothing to count */
        ab_app_usage u = {0};
        ab_err *e = NULL;
        if (store_usage(m, app, exclude, &u, &e) < 0) {
                ab_err_wrap(&e, "quotas of app \"%s\"", app);
                return mgr_propagate(err, e);
        }
        int64_t nb = u.boxes + a->rsv_boxes, nr = u.running + a->rsv_running,
                nd = u.disk_mib + a->rsv_disk_mib;
        if (boxes && ab_quota_over(q.max_boxes, nb, boxes))
                return refuse(m, a, AB_Q_BOXES, app, err,
                              "the limit is %" PRId64 " boxes and the app has %" PRId64
                              " (delete some first)",
                              q.max_boxes, nb);
        if (running && ab_quota_over(q.max_running, nr, running))
                return refuse(m, a, AB_Q_RUNNING, app, err,
                              "the limit is %" PRId64 " running boxes and %" PRId64
                              " run (stop some first)",
                              q.max_running, nr);
        if (disk_mib && ab_quota_over(q.max_disk_mib, nd, disk_mib))
                return refuse(m, a, AB_Q_DISK, app, err,
                              "the limit is %" PRId64 " MiB of disk over all boxes, %" PRId64
                              " MiB are in use and the new box asks for %" PRId64 " MiB",
                              q.max_disk_mib, nd, disk_mib);
ok:
        a->rsv_boxes += boxes;
        a->rsv_running += running;
        a->rsv_disk_mib += disk_mib;
        *t = (mgr_ticket){.app = a, .boxes = boxes, .running = running, .disk_mib = disk_mib};
        return 0;
}

/* In a fleet, the nodes' counts of an app take turns: a count and the
 * record it admits are one step for the whole fleet (held from the count
 * until mgr_quota_end, after the record is in the store). */
static int fleet_lock(ab_manager *m, const char *app, char **name, ab_err **err)
{
        *name = NULL;
        ab_quota q;
        ab_manager_quota_of(m, app, NULL, &q);
        if (!m->o.node_id || (q.max_boxes <= 0 && q.max_running <= 0 && q.max_disk_mib <= 0))
                return 0;
        char *n = xasprintf("agentbox quota %s", app);
        if (ab_store_lock(m->o.store, n, 30000, err) < 0) {
                free(n);
                return -1;
        }
        *name = n;
        return 0;
}

static void fleet_unlock(ab_manager *m, char **name)
{
        if (!*name)
                return;
        ab_store_unlock(m->o.store, *name);
        free(*name);
        *name = NULL;
}

int mgr_quota_create_begin(ab_manager *m, const char *app, uint64_t disk_mib, mgr_ticket *t,
                           ab_err **err)
{
        memset(t, 0, sizeof(*t));
        if (!app)
                return 0;
        char *lock = NULL;
        if (fleet_lock(m, app, &lock, err) < 0)
                return -1;
        pthread_mutex_lock(&m->quota->lock);
        int r = reserve(m, app, NULL, 1, 1, (int64_t)disk_mib, t, err);
        pthread_mutex_unlock(&m->quota->lock);
        if (r < 0)
                fleet_unlock(m, &lock);
        t->fleet_lock = lock;
        return r;
}

int mgr_quota_image_begin(ab_manager *m, const char *app, uint64_t *budget, mgr_ticket *t,
                          ab_err **err)
{
        memset(t, 0, sizeof(*t));
        *budget = 0;
        ab_quota q;
        ab_manager_quota_of(m, app, NULL, &q);
        if (q.max_disk_mib <= 0)
                return 0;
        pthread_mutex_lock(&m->quota->lock);
        mgr_app *a = app_get(m->quota, app);
        ab_app_usage u = {0};
        ab_err *e = NULL;
        int r = 0;
        if (store_usage(m, app, NULL, &u, &e) < 0) {
                ab_err_wrap(&e, "quotas of app \"%s\"", app);
                r = mgr_propagate(err, e);
        } else {
                int64_t used = u.disk_mib + a->rsv_disk_mib;
                if (used >= q.max_disk_mib)
                        r = refuse(m, a, AB_Q_DISK, app, err,
                                   "the limit is %" PRId64 " MiB of disk over all boxes and "
                                   "images, %" PRId64 " MiB are in use: nothing is left for an "
                                   "image",
                                   q.max_disk_mib, used);
                else
                        r = reserve(m, app, NULL, 0, 0, q.max_disk_mib - used, t, err);
        }
        pthread_mutex_unlock(&m->quota->lock);
        if (r == 0)
                *budget = (uint64_t)t->disk_mib << 20;
        return r;
}

int mgr_quota_start_begin(ab_manager *m, const ab_box_rec *r, mgr_ticket *t, ab_err **err)
{
        memset(t, 0, sizeof(*t));
        if (!counted(r))
                return 0;
        pthread_mutex_lock(&m->quota->lock);
        int rc = reserve(m, r->app_id, r->id, 0, 1, 0, t, err);
        pthread_mutex_unlock(&m->quota->lock);
        return rc;
}

/* Gives back what t reserved. Caller holds the quota lock. */
static void unreserve(mgr_ticket *t)
{
        mgr_app *a = t->app;
        a->rsv_boxes -= t->boxes;
        a->rsv_running -= t->running;
        a->rsv_disk_mib -= t->disk_mib;
}

void mgr_quota_end(ab_manager *m, mgr_ticket *t)
{
        fleet_unlock(m, &t->fleet_lock);
        if (!t->app)
                return;
        pthread_mutex_lock(&m->quota->lock);
        unreserve(t);
        pthread_mutex_unlock(&m->quota->lock);
        memset(t, 0, sizeof(*t));
}

int mgr_quota_commit(ab_manager *m, mgr_ticket *t, int (*fn)(void *arg), void *arg)
{
        if (!t->app) {
                int r = fn(arg);
                mgr_quota_end(m, t);
                return r;
        }
        /* quota lock, then the store's: the order reserve() takes them in */
        pthread_mutex_lock(&m->quota->lock);
        int r = fn(arg);
        unreserve(t);
        pthread_mutex_unlock(&m->quota->lock);
        fleet_unlock(m, &t->fleet_lock);
        memset(t, 0, sizeof(*t));
        return r;
}

typedef struct box_insert {
        ab_store *store;
        const ab_box_rec *r;
        ab_err **err;
} box_insert;

static int insert_fn(void *arg)
{
        box_insert *x = arg;
        return ab_store_box_insert(x->store, x->r, x->err);
}

int mgr_quota_insert(ab_manager *m, mgr_ticket *t, const ab_box_rec *r, ab_err **err)
{
        box_insert x = {.store = m->o.store, .r = r, .err = err};
        return mgr_quota_commit(m, t, insert_fn, &x);
}

/* The bucket of the exec rate: the app's, or the caller key's own when the
 * key sets a rate of its own. Caller holds the quota lock. */
static mgr_app *bucket_of(ab_manager *m, const char *app, mgr_app *a)
{
        if (!tl_caller || !tl_caller->key_id || !tl_caller->quotas ||
            (tl_caller->quotas->exec_rate == (double)AB_QUOTA_INHERIT &&
             tl_caller->quotas->exec_burst == (double)AB_QUOTA_INHERIT))
                return a;
        _cleanup_free_ char *name = xasprintf("%s\n%s", app, tl_caller->key_id);
        return app_get(m->quota, name);
}

#define SHARE_TTL_NS 1000000000ull /* how long a node's share of a rate is reused */

/* In a fleet, this node's part of app's exec rate: its running boxes of the
 * app over the fleet's (at least one of its own: an exec is in one of
 * them), counted at most once a second. The fleet's nodes' parts add up to
 * the whole rate. 1 outside a fleet. */
static double rate_share(ab_manager *m, const char *app)
{
        if (!m->o.node_id)
                return 1.0;
        uint64_t now = ab_now_ns();
        pthread_mutex_lock(&m->quota->lock);
        mgr_app *a = app_get(m->quota, app);
        bool fresh = a->share_ns && now - a->share_ns < SHARE_TTL_NS;
        double share = a->share;
        pthread_mutex_unlock(&m->quota->lock);
        if (fresh)
                return share;
        ab_box_filter f = {.provider = m->provider, .app_id = app, .status = AB_BOX_RUNNING};
        ab_box_rec *rs = NULL;
        size_t n = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &n, NULL) < 0)
                return a->share_ns ? share : 1.0; /* the store is away: the last count */
        size_t own = 0, all = 0;
        for (size_t i = 0; i < n; i++) {
                if (mgr_is_pool(&rs[i]))
                        continue;
                all++;
                own += mgr_owns(m, &rs[i]);
        }
        ab_box_recs_free(rs, n);
        if (!own) {
                own = 1;
                all++;
        }
        share = (double)own / (double)all;
        pthread_mutex_lock(&m->quota->lock);
        a->share = share;
        a->share_ns = now;
        pthread_mutex_unlock(&m->quota->lock);
        return share;
}

/* max_execs and exec_rate; takes a token and counts the exec when take. */
static int exec_admit(ab_manager *m, const char *app, bool take, ab_err **err)
{
        ab_quota q;
        ab_manager_quota_of(m, app, NULL, &q);
        if (q.exec_rate > 0) {
                double share = rate_share(m, app);
                q.exec_rate *= share;
                if (q.exec_burst > 0)
                        q.exec_burst = q.exec_burst * share < 1 ? 1 : q.exec_burst * share;
        }
        pthread_mutex_lock(&m->quota->lock);
        mgr_app *a = app_get(m->quota, app);
        int r = 0;
        mgr_app *b = bucket_of(m, app, a);
        uint64_t now = ab_now_ns();
        if (ab_quota_over(q.max_execs, a->execs, 1))
                r = refuse(m, a, AB_Q_EXECS, app, err,
                           "the limit is %" PRId64 " execs at once and %" PRId64
                           " are running (wait for one to end)",
                           q.max_execs, a->execs);
        else if (!(take ? ab_bucket_take : ab_bucket_peek)(&b->bucket, q.exec_rate, q.exec_burst,
                                                           now))
                r = refuse(m, a, AB_Q_RATE, app, err,
                           "the limit is %g execs a second (bursts of %g) and the app used "
                           "them all (retry in %.0f ms)",
                           q.exec_rate, ab_bucket_size(q.exec_rate, q.exec_burst),
                           q.exec_rate > 0 ? (1.0 - b->bucket.tokens) / q.exec_rate * 1000 : 0);
        else if (take)
                a->execs++;
        pthread_mutex_unlock(&m->quota->lock);
        return r;
}

int mgr_quota_exec_begin(ab_manager *m, const ab_box_rec *r, ab_err **err)
{
        if (!counted(r))
                return 0;
        return exec_admit(m, r->app_id, true, err);
}

void mgr_quota_exec_end(ab_manager *m, const ab_box_rec *r)
{
        if (!counted(r))
                return;
        pthread_mutex_lock(&m->quota->lock);
        mgr_app *a = app_get(m->quota, r->app_id);
        if (a->execs > 0)
                a->execs--;
        pthread_mutex_unlock(&m->quota->lock);
}

int ab_manager_quota_exec_check(ab_manager *m, const char *app, ab_err **err)
{
        if (!app)
                return 0;
        return exec_admit(m, app, false, err);
}

void ab_app_usage_clear(ab_app_usage *u)
{
        free(u->app_id);
        memset(u, 0, sizeof(*u));
}

void ab_app_usages_free(ab_app_usage *u, size_t n)
{
        for (size_t i = 0; u && i < n; i++)
                ab_app_usage_clear(&u[i]);
        free(u);
}

/* Adds the live counts of app (execs, refusals) to u. */
static void add_live(ab_manager *m, const char *app, ab_app_usage *u)
{
        pthread_mutex_lock(&m->quota->lock);
        for (mgr_app *a = m->quota->apps; a; a = a->next) {
                if (strcmp(a->name, app))
                        continue;
                u->execs += a->execs;
                for (int k = 0; k < AB_Q_N; k++)
                        u->rejected[k] += a->rejected[k];
        }
        pthread_mutex_unlock(&m->quota->lock);
}

int ab_manager_app_usage(ab_manager *m, const char *app, ab_app_usage *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (store_usage(m, app, NULL, out, err) < 0)
                return -1;
        out->app_id = xstrdup(app);
        add_live(m, app, out);
        return 0;
}

static int usage_cmp(const void *a, const void *b)
{
        return strcmp(((const ab_app_usage *)a)->app_id, ((const ab_app_usage *)b)->app_id);
}

/* The entry of app in u[0..*n), added when missing. */
static ab_app_usage *usage_slot(ab_app_usage **u, size_t *n, size_t *cap, const char *app)
{
        for (size_t i = 0; i < *n; i++)
                if (!strcmp((*u)[i].app_id, app))
                        return &(*u)[i];
        if (*n == *cap)
                *u = xrealloc(*u, (*cap = *cap ? *cap * 2 : 8) * sizeof(**u));
        ab_app_usage *s = &(*u)[(*n)++];
        memset(s, 0, sizeof(*s));
        s->app_id = xstrdup(app);
        return s;
}

int ab_manager_app_usages(ab_manager *m, ab_app_usage **out, size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        ab_box_filter f = {.provider = m->provider};
        ab_box_rec *rs = NULL;
        size_t nr = 0, cap = 0;
        if (ab_store_box_list(m->o.store, &f, &rs, &nr, err) < 0)
                return -1;
        ab_app_usage *u = NULL;
        size_t nu = 0;
        for (size_t i = 0; i < nr; i++) {
                const ab_box_rec *r = &rs[i];
                if (!counted(r) || r->status == AB_BOX_DELETING)
                        continue;
                ab_app_usage *s = usage_slot(&u, &nu, &cap, r->app_id);
                s->boxes++;
                s->running += is_running(r->status);
                ab_limits l;
                mgr_limits_from_rec(m, r, &l);
                s->disk_mib += (int64_t)l.disk_mib;
        }
        ab_box_recs_free(rs, nr);
        for (size_t i = 0; i < nu; i++)
                if (image_usage(m, u[i].app_id, &u[i], err) < 0) {
                        ab_app_usages_free(u, nu);
                        return -1;
                }
        pthread_mutex_lock(&m->quota->lock);
        for (mgr_app *a = m->quota->apps; a; a = a->next) {
                if (strchr(a->name, '\n'))
                        continue; /* a key's bucket */
                bool any = a->execs > 0;
                for (int k = 0; k < AB_Q_N; k++)
                        any |= a->rejected[k] > 0;
                if (!any)
                        continue;
                ab_app_usage *s = usage_slot(&u, &nu, &cap, a->name);
                s->execs += a->execs;
                for (int k = 0; k < AB_Q_N; k++)
                        s->rejected[k] += a->rejected[k];
        }
        pthread_mutex_unlock(&m->quota->lock);
        if (nu)
                qsort(u, nu, sizeof(*u), usage_cmp);
        *out = u;
        *n = nu;
        return 0;
}
