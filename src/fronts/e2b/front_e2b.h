/* front_e2b.h - the E2B front (docs/compat-e2b.md): E2B's control-plane REST
 * API under /e2b (front_e2b.c) and envd, the API E2B's SDK talks to inside a
 * sandbox, under /e2b/envd (front_envd.c, envd_*.c: Connect RPC for processes and the
 * filesystem, /files, /health). The SDK is pointed here by E2B_API_URL and
 * E2B_SANDBOX_URL (or E2B_DOMAIN = ports_domain: envd on 49983-ID.ports_domain);
 * envd calls name their box by that host name or the E2b-Sandbox-Id header
 * and prove it with the X-Access-Token the create answer gave (or a URL
 * signed with it, on /files). */
#ifndef AB_FRONT_E2B_H
#define AB_FRONT_E2B_H

#include "kit/server.h"

/* envd's port in E2B's sandbox host names (49983-ID.DOMAIN): served by this
 * front on ports_domain's host names. */
#define E2B_ENVD_PORT 49983

#define E2B_TOKEN_LEN     64 /* the MAC: hex characters */
#define E2B_TOKEN_KEY_MAX 64 /* the longest key id a token carries */
/* The longest token: "<key id>.<MAC>" */
#define E2B_TOKEN_MAX (E2B_TOKEN_KEY_MAX + 1 + E2B_TOKEN_LEN)

/* The envd access token of the box rec: HMAC-SHA256 with the server's E2B
 * secret (DATA/e2b.secret, made at first use) of the box's id, its creation
 * (spec.creation, a random value each new box gets) and its app, so that it
 * survives a restart, opens no later box with the same id and no box of
 * another app, and needs no record of its own. With key_id (a store API
 * key's id: the caller's key), the MAC covers the key id too and the token
 * is "<key_id>.<MAC>": envd_authenticate then also wants the key to exist
 * and binds the call's connection to it. Without (the admin token, a key of
 * the config file, a token-less server's loopback caller), the MAC alone.
 * out gets the token + NUL (at most E2B_TOKEN_MAX characters). 0, or -1
 * with *err (err may be NULL) when the secret cannot be read or made or
 * key_id is not a key id ([A-Za-z0-9_-], 1 to E2B_TOKEN_KEY_MAX). */
int e2b_access_token(ab_server *s, const ab_box_rec *rec, const char *key_id,
                     char out[E2B_TOKEN_MAX + 1], ab_err **err);

/* Splits the access token tok (from a request: any bytes, NUL-terminated;
 * NULL is malformed) into the key id it carries: *key_id is NULL for a
 * key-less token (E2B_TOKEN_LEN characters), else a copy of the part before
 * the '.' (free it). Checks the shape only, not the MAC. False (and *key_id
 * NULL) for a malformed token. */
bool e2b_token_parse(const char *tok, char **key_id);

/* Authenticates an envd call from its head, before any body is read: the
 * box named by its host name (49983-ID.ports_domain) or else by
 * E2b-Sandbox-Id exists, X-Access-Token is the token of this creation of it
 * (or, on /files without X-Access-Token, the URL is signed with it:
 * envd_sign.c) and, for a key-bound token, its key still exists. Then sets
 * r->scope to the box's app (NULL: a box of the admin's), r->front_box to
 * its id and, for a key-bound token, r->key_id to the key, whose deletion
 * then shuts the connection (ab_conns_bind_key) (*ok true); else answers
 * 400 (no id, a host name and E2b-Sandbox-Id naming two boxes, a malformed
 * signature_expiration), 401 (a bad token or signature, an expired one, an unknown or deleted box,
 * a deleted key) or 500 itself. Reads the store: call it on a worker. */
enum MHD_Result envd_authenticate(ab_req *r, bool *ok);

/* Detaches this server's streams of box id's E2B processes and waits for
 * them (the processes die with the box): called when the front deletes a
 * box. */
void envd_forget_box(const char *id);

/* Detaches every E2B process and PTY stream (they live on in their boxes),
 * stops every watch and waits for their threads: at the server's stop,
 * before the manager goes. */
void envd_shutdown(void);

/* Control plane (front_e2b.c). `id` is the {sandboxID} segment. */
enum MHD_Result e2b_create(ab_req *r, const char *id);
enum MHD_Result e2b_list(ab_req *r, const char *id);
enum MHD_Result e2b_get(ab_req *r, const char *id);
enum MHD_Result e2b_kill(ab_req *r, const char *id);
enum MHD_Result e2b_timeout(ab_req *r, const char *id);
enum MHD_Result e2b_pause(ab_req *r, const char *id);
enum MHD_Result e2b_connect(ab_req *r, const char *id);
enum MHD_Result e2b_metrics(ab_req *r, const char *id);
enum MHD_Result e2b_fork(ab_req *r, const char *id);
enum MHD_Result e2b_snapshot(ab_req *r, const char *id);
enum MHD_Result e2b_network(ab_req *r, const char *id);
/* Routes the SDK has but agentbox does not serve: 501 in E2B's error shape. */
enum MHD_Result e2b_unsupported(ab_req *r, const char *id);

/* envd (front_envd.c, envd_proc.c, envd_files.c). `id` is the RPC method ("Start") of the service.
 */
enum MHD_Result envd_health(ab_req *r, const char *id);
enum MHD_Result envd_files_get(ab_req *r, const char *id);
enum MHD_Result envd_files_post(ab_req *r, const char *id);
enum MHD_Result envd_process_rpc(ab_req *r, const char *method);
enum MHD_Result envd_filesystem_rpc(ab_req *r, const char *method);

/* At create (and fork) of a sandbox: E2B's account `user`, its home
 * /home/user and the box's sudo, unless the image has them (envd_user.c,
 * docs/compat-e2b.md "Users"). Logged, never fatal. */
void e2b_user_setup(ab_server *s, const char *id);

#endif
