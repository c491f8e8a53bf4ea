/* fleet_int.h - between the fleet's files (private to src/fleet). */
#ifndef AB_FLEET_INT_H
#define AB_FLEET_INT_H

#include "fleet/fleet.h"

#include <pthread.h>

typedef struct fleet_events fleet_events;

/* Starts sending ev's events of this node (node) to the others over the
 * store and taking theirs from url's LISTEN into ev. Stop before ev is
 * freed. */
fleet_events *fleet_events_start(ab_events *ev, ab_store *store, const char *url, const char *node);
void fleet_events_stop(fleet_events *fe);

#endif
