/* fuzz_fleet_event - libFuzzer target for what a fleet node takes from the
 * others over the store's NOTIFY (base/events.h: ab_events_inject): any
 * bytes, as a line of JSON or not. Besides memory errors it checks its
 * promises: an event it takes joins the ring with the next sequence number
 * and the type, box and app it named, and is served to a waiter as one line
 * of JSON naming its node; anything else is -EINVAL and leaves the ring as
 * it was. Build and run with scripts/fuzz.sh. */
#include "base/events.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *line = xmalloc(size + 1); /* exactly the bytes and a NUL */
        memcpy(line, data, size);
        line[size] = 0;
        ab_events *ev = ab_events_new(4);
        int rc = ab_events_inject(ev, line);
        check(rc == 0 || rc == -EINVAL);
        check(ab_events_last_seq(ev) == (rc == 0 ? 1u : 0u));
        ab_event_view *v = NULL;
        size_t n = 0;
        bool dropped = false;
        check(ab_events_wait(ev, 0, 8, 0, &v, &n, &dropped) == 0);
        check(n == (rc == 0 ? 1u : 0u));
        if (n) {
                json_t *j = json_loads(v[0].json, 0, NULL);
                check(j && json_is_string(json_object_get(j, "node")));
                check(json_integer_value(json_object_get(j, "seq")) == 1);
                check(!strcmp(json_string_value(json_object_get(j, "type")), v[0].type));
                json_decref(j);
        }
        ab_event_views_free(v, n);
        ab_events_free(ev);
        free(line);
        return 0;
}
