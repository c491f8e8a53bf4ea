/* fleet_int.h - between the fleet's files (private to src/fleet). */
#ifndef AB_FLEET_INT_H
#define AB_FLEET_INT_H

#include "fleet/fleet.h"

#include <pthread.h>
#include <time.h>

/* Waits on cv (mu held) until ms from now on CLOCK_MONOTONIC (cv must be
 * made with that clock), or a signal: the fleet's periodic threads. */
static inline void fleet_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t ns = ts.tv_nsec + (ms % 1000) * 1000000;
        ts.tv_sec += ms / 1000 + ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(cv, mu, &ts);
}

/* A condition variable on CLOCK_MONOTONIC, for fleet_wait_ms. */
static inline void fleet_cond_init(pthread_cond_t *cv)
{
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(cv, &ca);
        pthread_condattr_destroy(&ca);
}

typedef struct fleet_events fleet_events;

/* Starts sending ev's events of this node (node) to the others over the
 * store and taking theirs from url's LISTEN into ev. Stop before ev is
 * freed. */
fleet_events *fleet_events_start(ab_events *ev, ab_store *store, const char *url, const char *node);
void fleet_events_stop(fleet_events *fe);

/* The store, manager and heartbeat period of f (its options'). */
ab_store *fleet_store(ab_fleet *f);
ab_manager *fleet_mgr(ab_fleet *f);
int64_t fleet_heartbeat_ms(ab_fleet *f);

/* Settles what moves left on this node (move.c): complete copies whose box
 * the store gives to this node are adopted, copies of moves that did not
 * happen removed; with leftovers, the old copies of boxes the store gives to
 * another node are removed too. */
void fleet_move_sweep(ab_fleet *f, bool leftovers);

/* The thread that sweeps every heartbeat period (the old copies every 15),
 * or NULL when it cannot start (logged). Stop before f is freed. */
typedef struct fleet_mover fleet_mover;
fleet_mover *fleet_mover_start(ab_fleet *f);
void fleet_mover_stop(fleet_mover *m);

#endif
