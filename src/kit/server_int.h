/* server_int.h - what the kit's files share (private to src/kit). */
#ifndef AB_KIT_SERVER_INT_H
#define AB_KIT_SERVER_INT_H

#include "kit/server.h"

/* Queues resp with the common headers: at once on MHD's thread, or kept in
 * r for MHD's thread when a worker answers (steals resp). resp.c */
enum MHD_Result kit_queue(ab_req *r, unsigned status, struct MHD_Response *resp);

/* Authenticates r for a route of level need from its head: sets r->scope
 * (and the caller's key), or answers 401/403 itself (*ok false). May read
 * the store (when kit_auth_may_block says so: on a worker). auth.c */
enum MHD_Result kit_authenticate(ab_req *r, auth_level need, bool *ok);
/* r acts with the stored API key k: its id, its own quotas; deleting the
 * key ends r (its stream). Clears k. auth.c */
void kit_take_key(ab_req *r, ab_api_key *k);
/* True when authenticating r for need may read the store. auth.c */
bool kit_auth_may_block(ab_req *r, auth_level need);

#endif
