/* sessions.h - the sessions front (docs/api.md, "Sessions and chat"): an
 * agent service over the boxes: sessions (a thread with a box made lazily
 * and its history), chat (the agent loop over an OpenAI-compatible model,
 * answered as Server-Sent Events) and a thread's files. serve.c registers
 * its table. */
#ifndef AB_SESSIONS_H
#define AB_SESSIONS_H

#include "kit/server.h"

/* /api/sessions, /api/chat/{thread_id}, /api/files/{thread_id}/...; its
 * stop ends the running chats. */
extern const ab_route_table ab_sessions_routes;

#endif
