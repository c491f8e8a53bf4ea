/* initpool.h - connections to boxes' inits kept for the next request.
 *
 * An exec whose EXIT says AGAIN (proto.h) leaves init's session waiting for
 * another request on the same connection; keeping it saves the next
 * request a connect and init a session fork. The pool holds such
 * connections by box id, a few per box and a bounded number in all, for
 * AB_INITPOOL_IDLE_MS at most (init's session waits longer: a kept
 * connection is never one its session is about to drop). A connection is
 * checked before it is handed out: one its session hung up on (the box
 * stopped, restarted or was deleted, in this process or another) is closed
 * instead. Callers drop a box's connections when they stop, pause or delete
 * it. Thread-safe. */
#ifndef AB_INITPOOL_H
#define AB_INITPOOL_H

#include <pthread.h>
#include <stdint.h>

#define AB_INITPOOL_IDLE_MS 10000 /* < init's SESSION_IDLE_MS (30 s) */
#define AB_INITPOOL_SLOTS   32    /* kept connections in all */
#define AB_INITPOOL_PER_BOX 2     /* kept per box */

typedef struct ab_initpool_slot {
        char id[64]; /* box id ([a-z0-9][a-z0-9_-]{0,62}); "" when free */
        int fd;
        uint64_t since_ms;
} ab_initpool_slot;

typedef struct ab_initpool {
        pthread_mutex_t mu;
        ab_initpool_slot s[AB_INITPOOL_SLOTS];
} ab_initpool;

void ab_initpool_init(ab_initpool *p);
/* Closes every kept connection. */
void ab_initpool_clear(ab_initpool *p);

/* A kept connection to box id's init (the caller owns it), or -1. */
int ab_initpool_take(ab_initpool *p, const char *id);
/* Keeps fd (taken) for box id; closes it instead when the box has
 * AB_INITPOOL_PER_BOX kept already or id is too long. The oldest kept
 * connection makes room when the pool is full. */
void ab_initpool_put(ab_initpool *p, const char *id, int fd);
/* Closes box id's kept connections. */
void ab_initpool_drop(ab_initpool *p, const char *id);

#endif
