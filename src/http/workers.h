/* workers.h - the bounded pool of threads that run request handlers.
 *
 * The HTTP server's polling thread never blocks: a request whose handler may
 * (every route reaches the manager, the store or a box) is suspended and its
 * handler runs here. Threads are made on demand up to `max` (the cap on
 * requests in flight) and leave after a while idle, keeping a few, so a long
 * exec never queues a /health behind it and idle servers hold few threads.
 * Thread-safe. */
#ifndef AB_WORKERS_H
#define AB_WORKERS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ab_workers ab_workers;

/* A pool running at most max jobs at once, keeping up to keep_idle idle
 * threads. */
ab_workers *ab_workers_new(size_t max, size_t keep_idle);
/* Waits for the jobs in flight (ab_workers_drain) and frees. */
void ab_workers_free(ab_workers *w);

/* Reserves a slot for one job: true, or false when max jobs are in flight
 * or the pool is draining. A reserved slot must be used by
 * ab_workers_run. */
bool ab_workers_reserve(ab_workers *w);
/* Runs fn(arg) on a pool thread, in the slot reserved before. Never fails:
 * when no thread can be made, the job waits for a running one. */
void ab_workers_run(ab_workers *w, void (*fn)(void *arg), void *arg);

/* Jobs in flight (reserved, queued or running). */
size_t ab_workers_in_flight(ab_workers *w);
/* Refuses new reservations, then waits until no job is in flight. */
void ab_workers_drain(ab_workers *w);

#endif
