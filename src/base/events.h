/* events.h - the in-process event bus behind GET /v1/events (SSE).
 *
 * Producers (the lifecycle manager, the exec path, the resource sampler)
 * emit events; each gets a sequence number, increasing from 1. The bus keeps
 * the newest `capacity` events in a ring so a subscriber that reconnects with
 * Last-Event-ID misses nothing still in the ring. Subscribers poll with
 * ab_events_wait, which blocks until something newer than their last seen
 * sequence exists. Thread-safe. */
#ifndef AB_EVENTS_H
#define AB_EVENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

typedef struct ab_events ab_events;

/* One delivered event: a copy owned by the receiver (ab_event_views_free). */
typedef struct ab_event_view {
        uint64_t seq;
        char *type;   /* e.g. "box.created", "exec", "resource", "alert" */
        char *app_id; /* the box's app, or NULL (used to scope API keys) */
        char *box_id; /* or NULL */
        char *json;   /* the whole event as one line of JSON:
                       * {"seq":N,"type":T,"time":ms,"box_id":..,"app_id":..,"data":{...}} */
} ab_event_view;

ab_events *ab_events_new(size_t capacity);
/* Wakes every waiter (they return at once with what they have) and frees. */
void ab_events_free(ab_events *ev);

/* Emits an event. `data` is stolen (may be NULL = {}). Returns its sequence number. */
uint64_t ab_events_emit(ab_events *ev, const char *type, const char *box_id, const char *app_id,
                        json_t *data);

/* Copies up to `max` events with seq > after into *out (oldest first; *n of
 * them), waiting up to timeout_ms (0 = do not wait, <0 = forever) while there
 * are none. *dropped is set to true when events after `after` already left
 * the ring (the subscriber fell behind). Returns 0, or -ESHUTDOWN after
 * ab_events_shutdown. */
int ab_events_wait(ab_events *ev, uint64_t after, size_t max, int timeout_ms, ab_event_view **out,
                   size_t *n, bool *dropped);
void ab_event_views_free(ab_event_view *v, size_t n);

/* The newest sequence number emitted so far (0 if none). */
uint64_t ab_events_last_seq(ab_events *ev);

/* Makes every current and future ab_events_wait return -ESHUTDOWN (server stopping). */
void ab_events_shutdown(ab_events *ev);

/* Sets fn(arg) to be called after every emit (and at shutdown), outside the
 * bus's lock, on the emitting thread: readers that do not block in
 * ab_events_wait (an event-driven HTTP server) learn there is news. fn must
 * be quick and must not call back into the bus. NULL clears it; when this
 * returns, a cleared fn is no longer running. */
void ab_events_set_notify(ab_events *ev, void (*fn)(void *arg), void *arg);

/* Several servers as one service (docs/fleet.md). set_node: every event
 * this process emits from now on carries "node": node (call before any
 * thread emits). set_tap: fn(arg, json) sees each event this process emits,
 * as its JSON line, on the emitting thread after the ring has it (quick, no
 * calls back into the bus; NULL clears it, and when this returns a cleared
 * fn is no longer running). inject: an event another node emitted (its JSON
 * line: type, time, node, box_id, app_id, data) joins the ring with a
 * sequence number of this bus; the tap does not see it. -EINVAL when the
 * line is not such an event. */
void ab_events_set_node(ab_events *ev, const char *node);
void ab_events_set_tap(ab_events *ev, void (*fn)(void *arg, const char *json), void *arg);
int ab_events_inject(ab_events *ev, const char *json);

#endif
