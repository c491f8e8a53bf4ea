/* front_e2b.h - the E2B front (docs/compat-e2b.md): E2B's control-plane REST
 * API under /e2b (front_e2b.c) and envd, the API E2B's SDK talks to inside a
 * sandbox, under /e2b/envd (front_envd.c, envd_*.c: Connect RPC for processes and the
 * filesystem, /files, /health). The SDK is pointed here by E2B_API_URL and
 * E2B_SANDBOX_URL; envd calls name their box by the E2b-Sandbox-Id header and
 * prove it with the X-Access-Token the create answer gave. */
#ifndef AB_FRONT_E2B_H
#define AB_FRONT_E2B_H

#include "api/server.h"

#define E2B_TOKEN_LEN 64 /* hex characters */

/* The envd access token of the box rec: HMAC-SHA256 with the server's E2B
 * secret (DATA/e2b.secret, made at first use) of the box's id, its creation
 * (spec.creation, a random value each new box gets) and its app, so that it
 * survives a restart, opens no later box with the same id and no box of
 * another app, and needs no record of its own. out gets E2B_TOKEN_LEN hex
 * digits + NUL. 0, or -1 with *err when the secret cannot be read or made. */
int e2b_access_token(ab_server *s, const ab_box_rec *rec, char out[E2B_TOKEN_LEN + 1],
                     ab_err **err);

/* Authenticates an envd call from its head, before any body is read: the
 * box named by E2b-Sandbox-Id exists and X-Access-Token is the token of this
 * creation of it. Then sets r->scope to the box's app (NULL: a box of the
 * admin's) and r->front_box to its id (*ok true); else answers 400 (no id),
 * 401 (a bad token, an unknown or deleted box) or 500 itself. Reads the
 * store: call it on a worker. */
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

#endif
