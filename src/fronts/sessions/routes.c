/* routes.c - the sessions front's route table (docs/api.md, "Sessions and
 * chat"). Every route is a user's: the thread ids are the caller's app's. */
#include "fronts/sessions/sessions_int.h"

#include <string.h>

static const ab_route routes[] = {
    {"POST", "api/sessions", AUTH_USER, BODY_JSON, sessions_create},
    {"DELETE", "api/sessions/*", AUTH_USER, BODY_NONE, sessions_delete},
    {"POST", "api/chat/*", AUTH_USER, BODY_JSON, sessions_chat},
    {"POST", "api/files/*/upload", AUTH_USER, BODY_UPLOAD, sessions_upload},
    {"GET", "api/files/*/download", AUTH_USER, BODY_NONE, sessions_download},
};

/* The box a request is about, for forwarding it to the box's fleet node
 * (kit/forward.h): the box of thread T of the caller's app for
 * /api/chat/T, /api/files/T/... and DELETE /api/sessions/T (its id is
 * derived from the app and T, so another app's thread never names it).
 * Kept in r->front_box. NULL for a create or a bad thread id (the route
 * answers). */
static const char *sessions_box_of(ab_req *r)
{
        if (r->n_seg < 3 || strcmp(r->seg[0], "api") != 0)
                return NULL;
        bool thread_route = !strcmp(r->seg[1], "chat") || !strcmp(r->seg[1], "files") ||
                            (!strcmp(r->seg[1], "sessions") && !strcmp(r->method, "DELETE"));
        if (!thread_route || !session_id_ok(r->seg[2]))
                return NULL;
        char id[17];
        ab_manager_thread_id(r->scope, r->seg[2], id);
        free(r->front_box);
        r->front_box = xstrdup(id);
        return r->front_box;
}

const ab_route_table ab_sessions_routes = {
    .name = "sessions",
    .routes = routes,
    .n_routes = AB_ARRAY_LEN(routes),
    .quiesce = sessions_quiesce,
    .box_of = sessions_box_of,
};
