/* node.c - this node's heartbeat in the store's nodes table, and the state
 * of every node as read from it (docs/fleet.md). */
#include "fleet/fleet_int.h"
#include "base/codec.h"
#include "base/id.h"
#include "base/log.h"
#include "base/util.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/statvfs.h>
#include <time.h>

struct ab_fleet {
        ab_fleet_opts o; /* the strings below are the copies */
        char *node, *url, *data_dir, *secret;
        int64_t started_at;
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t wake;
        bool stopping;
        bool beat_failed; /* the last heartbeat failed: logged once per outage */
        /* every node as of the last heartbeat (under lock): the owners'
         * URLs and states that requests for their boxes need */
        ab_node_rec *nodes;
        size_t n_nodes;
        fleet_events *events;
        fleet_mover *mover; /* what moves left, swept (move.c) */
};

ab_store *fleet_store(ab_fleet *f)
{
        return f->o.store;
}

ab_manager *fleet_mgr(ab_fleet *f)
{
        return f->o.mgr;
}

int64_t fleet_heartbeat_ms(ab_fleet *f)
{
        return f->o.heartbeat_ms;
}

static int64_t wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* MemTotal and MemAvailable of /proc/meminfo in bytes (0 when unknown). */
static void host_memory(int64_t *total, int64_t *avail)
{
        *total = *avail = 0;
        _cleanup_free_ char *buf = NULL;
        if (ab_read_file(AT_FDCWD, "/proc/meminfo", &buf, NULL) < 0)
                return;
        const char *t = strstr(buf, "MemTotal:"), *a = strstr(buf, "MemAvailable:");
        if (t)
                *total = strtoll(t + strlen("MemTotal:"), NULL, 10) * 1024;
        if (a)
                *avail = strtoll(a + strlen("MemAvailable:"), NULL, 10) * 1024;
}

static int64_t running_boxes(ab_fleet *f)
{
        ab_manager_counts c = {0};
        if (ab_manager_counts_get(f->o.mgr, &c, NULL) < 0)
                return 0;
        int64_t n = 0;
        for (size_t i = 0; i < c.n_states; i++)
                if (!strcmp(c.states[i], "running"))
                        n = c.counts[i];
        ab_manager_counts_clear(&c);
        return n;
}

static int beat(ab_fleet *f, ab_err **err)
{
        ab_node_rec n = {.id = f->node,
                         .url = f->url,
                         .started_at = f->started_at,
                         .heartbeat_at = wall_ms(),
                         .running = running_boxes(f)};
        host_memory(&n.mem_total, &n.mem_avail);
        struct statvfs sv;
        if (statvfs(f->data_dir, &sv) == 0) {
                n.disk_total = (int64_t)(sv.f_blocks * sv.f_frsize);
                n.disk_avail = (int64_t)(sv.f_bavail * sv.f_frsize);
        }
        return ab_store_node_beat(f->o.store, &n, err);
}

/* Reads every node into the cache (under f->lock). */
static void refresh_nodes(ab_fleet *f)
{
        ab_node_rec *ns = NULL;
        size_t n = 0;
        if (ab_store_node_list(f->o.store, &ns, &n, NULL) < 0)
                return; /* the store is away: the last view stands */
        pthread_mutex_lock(&f->lock);
        ab_node_recs_free(f->nodes, f->n_nodes);
        f->nodes = ns;
        f->n_nodes = n;
        pthread_mutex_unlock(&f->lock);
}

static void *heartbeat_main(void *arg)
{
        ab_fleet *f = arg;
        pthread_mutex_lock(&f->lock);
        while (!f->stopping) {
                fleet_wait_ms(&f->wake, &f->lock, f->o.heartbeat_ms);
                if (f->stopping)
                        break;
                pthread_mutex_unlock(&f->lock);
                _cleanup_err_ ab_err *e = NULL;
                int rc = beat(f, &e);
                refresh_nodes(f);
                pthread_mutex_lock(&f->lock);
                if (rc < 0 && !f->beat_failed)
                        ab_log(AB_LOG_WARN, "fleet: cannot record this node's heartbeat", "node",
                               f->node, "error", e->msg, NULL);
                else if (rc == 0 && f->beat_failed)
                        ab_log(AB_LOG_INFO, "fleet: heartbeats recorded again", "node", f->node,
                               NULL);
                f->beat_failed = rc < 0;
        }
        pthread_mutex_unlock(&f->lock);
        return NULL;
}

static void fleet_free(ab_fleet *f)
{
        free(f->node);
        free(f->url);
        free(f->data_dir);
        if (f->secret)
                explicit_bzero(f->secret, strlen(f->secret));
        free(f->secret);
        ab_node_recs_free(f->nodes, f->n_nodes);
        pthread_mutex_destroy(&f->lock);
        pthread_cond_destroy(&f->wake);
        free(f);
}

int ab_fleet_start(const ab_fleet_opts *o, ab_fleet **out, ab_err **err)
{
        *out = NULL;
        ab_fleet *f = xzalloc(sizeof(*f));
        f->o = *o;
        f->node = xstrdup(o->node);
        f->url = xstrdup(o->url);
        f->data_dir = xstrdup(o->data_dir);
        f->secret = xstrdup(o->secret);
        f->started_at = wall_ms();
        pthread_mutex_init(&f->lock, NULL);
        fleet_cond_init(&f->wake);
        if (beat(f, err) < 0) {
                fleet_free(f);
                return ab_err_wrap(err, "fleet: register node %s", o->node);
        }
        refresh_nodes(f);
        fleet_move_sweep(f, true); /* what moves left while this node was away */
        int e = pthread_create(&f->thread, NULL, heartbeat_main, f);
        if (e) {
                fleet_free(f);
                return ab_err_set(err, AB_E_INTERNAL, e, "fleet: cannot start the heartbeat");
        }
        if (o->events && o->store_url)
                f->events = fleet_events_start(o->events, o->store, o->store_url, o->node);
        f->mover = fleet_mover_start(f);
        ab_log(AB_LOG_INFO, "fleet: node registered", "node", f->node, "url", f->url, NULL);
        *out = f;
        return 0;
}

void ab_fleet_stop(ab_fleet *f)
{
        if (!f)
                return;
        pthread_mutex_lock(&f->lock);
        f->stopping = true;
        pthread_cond_signal(&f->wake);
        pthread_mutex_unlock(&f->lock);
        pthread_join(f->thread, NULL);
        fleet_mover_stop(f->mover);
        fleet_events_stop(f->events);
        fleet_free(f);
}

const char *ab_fleet_node(const ab_fleet *f)
{
        return f->node;
}

const char *ab_fleet_url(const ab_fleet *f)
{
        return f->url;
}

const char *ab_fleet_secret(const ab_fleet *f)
{
        return f->secret;
}

ab_node_state ab_node_state_at(const ab_node_rec *n, int64_t down_after_ms, int64_t now_ms)
{
        if (now_ms - n->heartbeat_at > down_after_ms)
                return AB_NODE_DOWN;
        return n->draining ? AB_NODE_DRAINING : AB_NODE_UP;
}

ab_node_state ab_fleet_node_state(const ab_fleet *f, const ab_node_rec *n, int64_t now_ms)
{
        return ab_node_state_at(n, f->o.down_after_ms, now_ms);
}

const char *ab_node_state_name(ab_node_state s)
{
        return s == AB_NODE_UP ? "up" : s == AB_NODE_DRAINING ? "draining" : "down";
}

json_t *ab_fleet_node_json(const ab_fleet *f, const ab_node_rec *n, int64_t now_ms)
{
        return ab_node_json(n, f->o.down_after_ms, now_ms);
}

json_t *ab_node_json(const ab_node_rec *n, int64_t down_after_ms, int64_t now_ms)
{
        char hb[AB_TIME_LEN], st[AB_TIME_LEN];
        ab_time_rfc3339(n->heartbeat_at, true, hb);
        ab_time_rfc3339(n->started_at, true, st);
        return json_pack(
            "{s:s,s:s,s:s,s:b,s:s,s:s,s:I,s:{s:I,s:I},s:{s:I,s:I}}", "id", n->id, "url", n->url,
            "state", ab_node_state_name(ab_node_state_at(n, down_after_ms, now_ms)), "draining",
            n->draining, "heartbeat_at", hb, "started_at", st, "running", (json_int_t)n->running,
            "memory", "total", (json_int_t)n->mem_total, "available", (json_int_t)n->mem_avail,
            "disk", "total", (json_int_t)n->disk_total, "available", (json_int_t)n->disk_avail);
}

int ab_fleet_node_get(ab_fleet *f, const char *id, ab_node_rec *out, ab_node_state *state,
                      ab_err **err)
{
        if (ab_store_node_get(f->o.store, id, out, err) < 0)
                return -1;
        *state = ab_fleet_node_state(f, out, wall_ms());
        return 0;
}

int ab_fleet_owner(ab_fleet *f, const char *node, char **url, ab_node_state *state)
{
        *url = NULL;
        int rc = -1;
        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < f->n_nodes; i++) {
                if (strcmp(f->nodes[i].id, node))
                        continue;
                *url = xstrdup(f->nodes[i].url);
                *state = ab_fleet_node_state(f, &f->nodes[i], wall_ms());
                rc = 0;
                break;
        }
        pthread_mutex_unlock(&f->lock);
        if (rc == 0)
                return 0;
        /* a node that joined after the last heartbeat */
        ab_node_rec n;
        if (ab_fleet_node_get(f, node, &n, state, NULL) < 0)
                return -1;
        *url = steal_pointer(&n.url);
        ab_node_rec_clear(&n);
        return 0;
}

static size_t random_below(size_t n)
{
        uint32_t v;
        ab_random_bytes(&v, sizeof(v));
        return v % n; /* a pick among a few nodes: the tiny bias does not matter */
}

/* True when a is the better home for a new box than b. */
static bool better(const ab_node_rec *a, const ab_node_rec *b)
{
        if (a->running != b->running)
                return a->running < b->running;
        return a->mem_avail > b->mem_avail;
}

int ab_fleet_place(ab_fleet *f, uint64_t mem_bytes, uint64_t disk_bytes, char **node, ab_err **err)
{
        *node = NULL;
        int64_t now = wall_ms();
        pthread_mutex_lock(&f->lock);
        size_t *ok = xcalloc(f->n_nodes + 1, sizeof(*ok));
        size_t n = 0;
        for (size_t i = 0; i < f->n_nodes; i++) {
                const ab_node_rec *c = &f->nodes[i];
                if (ab_fleet_node_state(f, c, now) == AB_NODE_UP &&
                    (c->mem_total == 0 || (uint64_t)c->mem_avail >= mem_bytes) &&
                    (c->disk_total == 0 || (uint64_t)c->disk_avail >= disk_bytes))
                        ok[n++] = i;
        }
        if (n) {
                size_t a = ok[random_below(n)], b = ok[random_below(n)];
                *node = xstrdup(f->nodes[better(&f->nodes[b], &f->nodes[a]) ? b : a].id);
        }
        pthread_mutex_unlock(&f->lock);
        free(ok);
        if (!*node)
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "no node of the fleet can take a new box now (every node is "
                                  "down, draining or short of memory or disk)");
        return 0;
}
