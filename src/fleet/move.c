/* move.c - a node's side of the crash-safety of moves (docs/fleet.md,
 * "Moving a box"): copies received here are adopted once the store names
 * this node their box's owner, or removed when it never will; boxes this
 * node still has on disk but the store gives to another node (a move that
 * ended while this node was away) are removed. Runs at start and from the
 * heartbeat thread. */
#include "fleet/fleet_int.h"
#include "base/log.h"
#include "base/util.h"

#include <pthread.h>
#include <time.h>

/* A complete copy whose box the store still gives to another node is kept
 * this long: its sender records the new owner seconds after the copy
 * completes, and gives up (leaving its box where it was) well before. */
#define STAGE_GRACE_S 600

static ab_backend *native_of(ab_fleet *f)
{
        ab_backend *b = ab_backend_find(ab_manager_backend(fleet_mgr(f)), "native");
        return b && b->move ? b : NULL;
}

/* The owner the store names for backend box id: 1 and *mine, 0 when the
 * store has no such record, -1 when it cannot be read. */
static int owner_of(ab_fleet *f, const char *id, bool *mine)
{
        ab_box_rec rec = {0};
        ab_err *e = NULL;
        const char *provider = ab_manager_backend(fleet_mgr(f))->ops->name;
        if (ab_store_box_get(fleet_store(f), provider, id, &rec, &e) < 0) {
                int r = e->code == AB_E_NOT_FOUND ? 0 : -1;
                ab_err_free(&e);
                return r;
        }
        bool same = rec.backend_id && !strcmp(rec.backend_id, id);
        *mine = rec.node && !strcmp(rec.node, ab_fleet_node(f));
        ab_box_rec_clear(&rec);
        return same ? 1 : 0;
}

typedef struct adopt_call {
        ab_fleet *f;
        ab_backend *b;
        const char *id;
} adopt_call;

/* Under the box's lock, so that a delete of it on this node comes before
 * (the record is gone: nothing adopted, the copy goes with the next sweep)
 * or after (it removes the adopted box), never between: adopts the copy
 * while the store still names this node its owner. */
static int adopt_locked(ab_manager *m, void *ud, ab_err **err)
{
        (void)m;
        adopt_call *c = ud;
        bool mine = false;
        if (owner_of(c->f, c->id, &mine) != 1 || !mine)
                return 0;
        return c->b->move->adopt(c->b, c->id, err);
}

/* Under the box's lock too: a commit of the box's move drops or adopts its
 * copy under it, and two removals of one folder at once trip each other. */
static int drop_locked(ab_manager *m, void *ud, ab_err **err)
{
        (void)m;
        adopt_call *c = ud;
        return c->b->move->drop(c->b, c->id, err);
}

static void sweep_staged(ab_fleet *f, ab_backend *b)
{
        char **ids = NULL;
        bool *complete = NULL;
        int64_t *age = NULL;
        if (b->move->staged(b, &ids, &complete, &age, NULL) < 0)
                return;
        for (size_t i = 0; ids[i]; i++) {
                bool mine = false;
                int o = owner_of(f, ids[i], &mine);
                _cleanup_err_ ab_err *e = NULL;
                if (o < 0)
                        continue; /* the store is away: decide later */
                if (o == 1 && mine && complete[i]) {
                        /* a conflict: the commit of its move adopts it now */
                        adopt_call c = {.f = f, .b = b, .id = ids[i]};
                        if (ab_manager_box_locked(fleet_mgr(f), ids[i], adopt_locked, &c, &e) < 0 &&
                            e->code != AB_E_CONFLICT)
                                ab_log(AB_LOG_WARN, "fleet: cannot adopt a moved box", "box",
                                       ids[i], "error", e->msg, NULL);
                        continue;
                }
                if (complete[i] && !(o == 1 && mine) && age[i] < STAGE_GRACE_S)
                        continue; /* its sender may record this node as the owner now */
                ab_log(AB_LOG_INFO, "fleet: removing a copy of a move that did not happen", "box",
                       ids[i], "complete", complete[i] ? "yes" : "no", NULL);
                adopt_call c = {.f = f, .b = b, .id = ids[i]};
                ab_manager_box_locked(fleet_mgr(f), ids[i], drop_locked, &c, NULL);
        }
        for (size_t i = 0; ids[i]; i++)
                free(ids[i]);
        free(ids);
        free(complete);
        free(age);
}

static bool listed(const ab_box_rec *rs, size_t n, const char *id)
{
        for (size_t i = 0; i < n; i++)
                if (rs[i].backend_id && !strcmp(rs[i].backend_id, id))
                        return true;
        return false;
}

static void sweep_leftovers(ab_fleet *f, ab_backend *b)
{
        /* one read of this node's records; only boxes not among them are
         * looked up one by one */
        ab_box_filter flt = {.provider = ab_manager_backend(fleet_mgr(f))->ops->name,
                             .node = ab_fleet_node(f)};
        ab_box_rec *rs = NULL;
        size_t nr = 0;
        if (ab_store_box_list(fleet_store(f), &flt, &rs, &nr, NULL) < 0)
                return;
        ab_box_info *bi = NULL;
        size_t n = 0;
        if (b->ops->list(b, &bi, &n, NULL) < 0) {
                ab_box_recs_free(rs, nr);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                bool mine = true;
                if (bi[i].status != AB_BOX_STOPPED || listed(rs, nr, bi[i].id) ||
                    owner_of(f, bi[i].id, &mine) != 1 || mine)
                        continue;
                /* the store gives the box to another node: this copy is a
                 * moved box's old one */
                _cleanup_err_ ab_err *e = NULL;
                if (b->ops->destroy(b, bi[i].id, &e) < 0)
                        ab_log(AB_LOG_WARN, "fleet: cannot remove a moved box's old copy", "box",
                               bi[i].id, "error", e->msg, NULL);
                else
                        ab_log(AB_LOG_INFO, "fleet: removed a moved box's old copy", "box",
                               bi[i].id, NULL);
        }
        for (size_t i = 0; i < n; i++)
                ab_box_info_clear(&bi[i]);
        free(bi);
        ab_box_recs_free(rs, nr);
}

void fleet_move_sweep(ab_fleet *f, bool leftovers)
{
        ab_backend *b = native_of(f);
        if (!b)
                return;
        sweep_staged(f, b);
        if (leftovers)
                sweep_leftovers(f, b);
}

/* The sweeps run on a thread of their own: removing an old copy waits for
 * the box's lock (a move in progress holds it), which must never hold up
 * the heartbeat. */
struct fleet_mover {
        ab_fleet *f;
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool stop;
};

static void *mover_main(void *arg)
{
        fleet_mover *m = arg;
        int64_t period = fleet_heartbeat_ms(m->f);
        unsigned n = 0;
        pthread_mutex_lock(&m->mu);
        while (!m->stop) {
                fleet_wait_ms(&m->cv, &m->mu, period);
                if (m->stop)
                        break;
                pthread_mutex_unlock(&m->mu);
                fleet_move_sweep(m->f, ++n % 15 == 0);
                pthread_mutex_lock(&m->mu);
        }
        pthread_mutex_unlock(&m->mu);
        return NULL;
}

fleet_mover *fleet_mover_start(ab_fleet *f)
{
        fleet_mover *m = xzalloc(sizeof(*m));
        m->f = f;
        pthread_mutex_init(&m->mu, NULL);
        fleet_cond_init(&m->cv);
        if (pthread_create(&m->thread, NULL, mover_main, m) != 0) {
                ab_log(AB_LOG_WARN, "fleet: cannot start the sweeper of moves", NULL);
                pthread_mutex_destroy(&m->mu);
                pthread_cond_destroy(&m->cv);
                free(m);
                return NULL;
        }
        return m;
}

void fleet_mover_stop(fleet_mover *m)
{
        if (!m)
                return;
        pthread_mutex_lock(&m->mu);
        m->stop = true;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cv);
        free(m);
}
