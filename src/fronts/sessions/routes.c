/* routes.c - the sessions front's route table (docs/api.md, "Sessions and
 * chat"). Every route is a user's: the thread ids are the caller's app's. */
#include "fronts/sessions/sessions_int.h"

static const ab_route routes[] = {
    {"POST", "api/sessions", AUTH_USER, BODY_JSON, sessions_create},
    {"DELETE", "api/sessions/*", AUTH_USER, BODY_NONE, sessions_delete},
    {"POST", "api/chat/*", AUTH_USER, BODY_JSON, sessions_chat},
    {"POST", "api/files/*/upload", AUTH_USER, BODY_UPLOAD, sessions_upload},
    {"GET", "api/files/*/download", AUTH_USER, BODY_NONE, sessions_download},
};

const ab_route_table ab_sessions_routes = {
    .name = "sessions",
    .routes = routes,
    .n_routes = AB_ARRAY_LEN(routes),
    .quiesce = sessions_quiesce,
};
