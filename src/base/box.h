/* box.h - what every layer says about a box: its state and its mode, as
 * enums with their stable names (the names are what the store, the API and
 * events carry). */
#ifndef AB_BASE_BOX_H
#define AB_BASE_BOX_H

#include <stdbool.h>

typedef enum {
        AB_BOX_CREATING = 1,
        AB_BOX_RUNNING,
        AB_BOX_STOPPED,
        AB_BOX_DELETING,
        AB_BOX_ERROR,
        AB_BOX_PAUSED, /* frozen: processes and memory kept, no CPU */
} ab_box_status;

#define AB_BOX_STATUS_MAX AB_BOX_PAUSED

/* "creating", "running", ...; "unknown" for a value outside the enum. */
const char *ab_box_status_name(ab_box_status s);
/* The status named s, or 0 when s names none. */
ab_box_status ab_box_status_parse(const char *s);

typedef enum {
        AB_MODE_SESSION = 1, /* persistent (default) */
        AB_MODE_TASK,        /* deleted after its use ends */
        AB_MODE_POOL,        /* a warm pool box nobody owns yet */
        AB_MODE_SYSTEM,      /* the server's own box (the code runner's): never stored */
} ab_box_mode;

/* "session", "task", "pool", "system"; "unknown" outside the enum. */
const char *ab_box_mode_name(ab_box_mode m);
/* The mode named s, or 0 when s names none. */
ab_box_mode ab_box_mode_parse(const char *s);

#endif
