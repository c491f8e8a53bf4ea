/* auth.h - the caller and auth of a request (kit/auth.c): the admin
 * token, configured and stored API keys, and the header forms the route
 * tables add (the OpenSandbox SDK's); the client's address and presence. */
#ifndef AB_KIT_AUTH_H
#define AB_KIT_AUTH_H

#include "kit/server.h"

/* Authenticates r as a route open to users (admin token or API key) would:
 * sets r->scope, or answers 401/403 (*ok false). May read the store. */
enum MHD_Result req_authenticate(ab_req *r, bool *ok);

/* True when tok is a credential of this server: the admin token, a
 * configured API key or one in the store (also when the store cannot tell).
 * May read the store: a worker only. */
bool req_is_credential(ab_req *r, const char *tok);

/* Constant-time comparison of two secrets. */
bool req_secret_eq(const char *a, const char *b);
/* True when the client connected from a loopback address. */
bool req_peer_loopback(ab_req *r);
/* True when the client has hung up (its socket was closed or broke): work
 * done only for its answer may stop. Safe from a worker thread. */
bool req_client_gone(ab_req *r);

#endif
