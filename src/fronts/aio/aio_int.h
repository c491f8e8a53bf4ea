/* aio_int.h - what the files of DeerFlow's front share: the answers in
 * AIO's envelope, the box a call is for, and the handlers routes.c
 * dispatches to. Private to src/fronts/aio.
 *
 * The provisioner (provisioner.c) makes one box per DeerFlow sandbox id,
 * keyed per app, and answers a sandbox_url that names the box and a random
 * token kept in its metadata: the AIO routes (shell.c, files.c) under that
 * URL are authenticated by the token from the request's path, before any
 * body is read (routes.c), since DeerFlow's AIO client sends no key. */
#ifndef AB_AIO_INT_H
#define AB_AIO_INT_H

#include "fronts/aio/aio.h"

/* The metadata a provisioned box carries (kept with the box). */
#define AIO_META_SANDBOX "deerflow.sandbox_id"
#define AIO_META_THREAD  "deerflow.thread_id"
#define AIO_META_USER    "deerflow.user_id"
#define AIO_META_TOKEN   "deerflow.token"
/* The thread key of a sandbox's box: this prefix, then the sandbox id. */
#define AIO_THREAD_KEY "deerflow:"
/* The token of a sandbox URL: 32 hex digits. */
#define AIO_TOKEN_HEX 32

/* {"success": true, "message": "Operation successful", "data": data}
 * (steals data; NULL: null). */
enum MHD_Result aio_ok(ab_req *r, json_t *data);
/* {"success": false, "message": ..., "data": data} with status (steals data). */
enum MHD_Result aio_fail(ab_req *r, unsigned status, json_t *data, const char *fmt, ...)
    AB_PRINTF(4, 5);
/* aio_fail for e (freed), with the status fitting its code (status_of).
 * A bad or missing field is answered 422 instead, as AIO's validation
 * answers it (aio_body and the handlers' own). */
enum MHD_Result aio_err(ab_req *r, ab_err *e);

/* The box of the call (checked from the request's head: routes.c). */
const char *aio_box(const ab_req *r);
/* The box id of DeerFlow sandbox sid of r's caller's app into out[17];
 * false when sid is not a valid sandbox id (provisioner.c). */
bool aio_sandbox_box_id(ab_req *r, const char *sid, char out[17]);
/* Begins a use of the call's box; answers the error itself (-1). */
int aio_use(ab_req *r, ab_use *u, enum MHD_Result *ret);

/* Reads r's JSON body into *body; answers 422 itself (-1). */
int aio_body(ab_req *r, json_t **body, enum MHD_Result *ret);
/* Typed optional fields of a body (absent or null: *out unchanged, 0);
 * a wrong type is AB_E_INVALID naming the field. */
int aio_opt_str(json_t *o, const char *name, const char **out, ab_err **err);
int aio_opt_bool(json_t *o, const char *name, bool *out, ab_err **err);
/* A number of seconds (integer or not) in [0, max]: *ms in milliseconds. */
int aio_opt_secs(json_t *o, const char *name, double max, int64_t *ms, ab_err **err);
int aio_opt_int(json_t *o, const char *name, int64_t lo, int64_t hi, int64_t *out, ab_err **err);

/* The base of sandbox URLs for r: scheme and host as the caller reached
 * the server, then PREFIX/aio (free it). */
char *aio_url_base(ab_req *r);

/* ---- parse.c: pure parsers (no I/O), also fuzzed (tests/fuzz/fuzz_aio.c) ---- */

/* A sandbox URL's segment "{box}.{token}" (or "{box}" alone, for a caller
 * with a key): id (65 bytes) gets the box id, *token points into cap or
 * is NULL. 0, or -1 when cap is neither. */
int aio_cap_parse(const char *cap, char id[65], const char **token);
/* Where the output of the run with nonce lies in a terminal's output buf
 * (bn bytes), between its start mark and its end mark: *off and *len (a
 * partial end mark at the end is held back). 1 with *code when the end
 * mark is complete, else 0. *from_start: the start mark is in buf (else
 * the beginning was lost to init's ring). */
int aio_marks_scan(const char *buf, size_t bn, const char *nonce, size_t *off, size_t *len,
                   int *code, bool *from_start);
/* At most max characters (0: all) of n bytes at p as a JSON string
 * (invalid UTF-8 replaced): its head and tail with a marker between, as
 * AIO's truncation. A new reference. */
json_t *aio_text_cut(const char *p, size_t n, size_t max);
/* Lines [start, end) (0-based; end < 0: to the last) of buf (bn bytes):
 * *p and *n, within buf. */
void aio_lines_cut(const char *buf, size_t bn, int64_t start, int64_t end, const char **p,
                   size_t *n);
/* "1M", "500K", "2G", "1024" (a B may follow): bytes; -1 for anything else. */
int64_t aio_size_parse(const char *s);

/* ---- provisioner.c: DeerFlow's provisioner routes, each a route_fn (id:
 * the sandbox id of the path, or unused); answers and errors as its
 * FastAPI service gives them ({"detail": ...}) ---- */
enum MHD_Result aio_health(ab_req *r, const char *id);
enum MHD_Result aio_sandbox_create(ab_req *r, const char *id);
enum MHD_Result aio_sandbox_list(ab_req *r, const char *id);
enum MHD_Result aio_sandbox_get(ab_req *r, const char *id);
enum MHD_Result aio_sandbox_delete(ab_req *r, const char *id);
/* GET /v1/sandbox: the box as AIO's context shows it. */
enum MHD_Result aio_context(ab_req *r);

/* ---- shell.c: shell sessions (terminals kept by the box's init) and
 * /v1/bash/exec. Each handler answers the call of aio_box(r) in AIO's
 * envelope, its body read with aio_body ---- */
enum MHD_Result aio_shell_exec(ab_req *r);
enum MHD_Result aio_shell_view(ab_req *r);
enum MHD_Result aio_shell_wait(ab_req *r);
enum MHD_Result aio_shell_kill(ab_req *r);
enum MHD_Result aio_shell_write(ab_req *r);
enum MHD_Result aio_session_create(ab_req *r);
enum MHD_Result aio_session_list(ab_req *r);
enum MHD_Result aio_session_delete(ab_req *r, const char *sid);
enum MHD_Result aio_session_delete_all(ab_req *r);
enum MHD_Result aio_bash_exec(ab_req *r);
/* The server stops: synchronous execs and waits stop waiting within a
 * tick (they answer `running`); the commands go on in their shells. */
void aio_shell_quiesce(void);

/* ---- files.c: the file calls, through the manager's file doors (paths
 * are the box's, resolved by its init); errors carry AIO's
 * FileOperationError as data ---- */
enum MHD_Result aio_file_read(ab_req *r);
enum MHD_Result aio_file_write(ab_req *r);
enum MHD_Result aio_file_list(ab_req *r);
enum MHD_Result aio_file_find(ab_req *r);
enum MHD_Result aio_file_grep(ab_req *r);
enum MHD_Result aio_file_replace(ab_req *r);
enum MHD_Result aio_file_download(ab_req *r);

#endif
