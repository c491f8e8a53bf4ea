/* envd_int.h - what the files of the E2B front's envd (front_envd.c: auth,
 * paths, entries, the filesystem calls, /health; envd_proc.c: processes and
 * PTYs; envd_watch.c: watches; envd_files.c: /files) share. Not a public
 * interface: only these files include it (and tests/fuzz/fuzz_multipart.c,
 * for envd_parse_multipart). */
#ifndef AB_ENVD_INT_H
#define AB_ENVD_INT_H

#include "http/connectrpc.h"
#include "fronts/e2b/front_e2b.h"

/* Keepalive events on long-lived streams, this often (s). */
#define ENVD_KEEPALIVE_S 15

/* The box a call is for, whose access token envd_authenticate checked from
 * the request's head (borrowed from r); r->scope is then the box's app. */
const char *envd_box(ab_req *r, enum MHD_Result *ret);
/* Who a call acts as (envd_user.c): E2B's user, from Authorization: Basic
 * base64("name:") or the username query parameter, "user" when neither.
 * In a box with E2B's account `user` (/home/user a folder of its own):
 * "user" is that account, "root" root with HOME /root. In an older box (a
 * /home/user link), "user" and "root" are root, as they always were.
 * Another name is that account of the box. */
typedef struct envd_who {
        char *user;       /* the exec's user: NULL = root */
        char *name;       /* USER of commands: NULL = left to the box */
        const char *home; /* HOME and default cwd of commands: NULL = E2B_HOME */
} envd_who;
void envd_who_of(ab_req *r, const char *box, envd_who *w);
void envd_who_clear(envd_who *w);
/* The folders above path that do not exist yet (deepest first, a strv in
 * *out), so that what a call makes can be given to its user. 0 or -1. */
int envd_missing_parents(ab_manager *m, ab_use *u, const char *path, char ***out, ab_err **err);
/* Checks, before a call makes anything for owner, that the box has that
 * account (E2B's `user` and uids pass). 0, or -1 with AB_E_INVALID. */
int envd_owner_check(ab_manager *m, ab_use *u, const char *owner, ab_err **err);
/* Gives path (when not NULL) and the folders made[] (a strv or NULL) to
 * owner (and, for E2B's `user`, its group); nothing when owner is NULL
 * (root's already). 0 or -1. */
int envd_give(ab_manager *m, ab_use *u, const char *owner, const char *path, char **made,
              ab_err **err);
/* Unary Connect errors: from an agentbox error (freed), or a code and text. */
enum MHD_Result envd_rpc_err(ab_req *r, ab_err *e);
enum MHD_Result envd_rpc_error(ab_req *r, const char *code, const char *msg);
/* True when the request is application/connect+json (enveloped). */
bool envd_enveloped(ab_req *r);
/* A stream that is over at once: its end envelope carries the error. */
enum MHD_Result envd_stream_error(ab_req *r, const char *code, const char *msg);

/* E2B's home: where relative paths resolve and commands start, as in E2B. */
#define E2B_HOME "/home/user"

/* base + "/" + rel (rel NULL or "": base), absolute: a relative base is
 * relative to E2B_HOME. Free it. */
char *envd_abs_path(const char *base, const char *rel);
/* The absolute, cleaned path a call names, as E2B's envd resolves it for
 * the call's user: "~" and "~/..." are in home, a relative path is relative
 * to home (NULL: E2B_HOME, the home of E2B's `user` and of every call in an
 * older box). "~name/..." (another account's home) is refused: NULL, with
 * AB_E_INVALID in *err. Free it. */
char *envd_call_path(const char *home, const char *path, ab_err **err);
/* The home of the call's user (envd_who_of's), where its relative paths
 * resolve: "/root" for root in a box with E2B's account, else E2B_HOME. */
const char *envd_call_home(ab_req *r, const char *box);
/* filesystem.EntryInfo of absolute path with st. */
json_t *envd_entry_info(const char *path, const abc_stat *st);

/* Runs fn inside a use of box id by scope (the call's app: r->scope); fn
 * reaches the box through the manager's file doors on u. */
typedef int (*box_fn)(ab_manager *m, ab_use *u, void *ud, ab_err **err);
int envd_with_box(ab_server *s, const char *id, const char *scope, box_fn fn, void *ud,
                  ab_err **err);
/* Stats path following symlinks (E2B's /home/user is one): *st is the
 * target's (st->link: the first link's target; free it); *real (when not
 * NULL) the path it resolved to (free it). */
int envd_stat_follow(ab_server *s, const char *box, const char *scope, const char *path,
                     abc_stat *st, char **real, ab_err **err);

/* One file of an upload: its path (malloc'd) and its bytes (borrowed from
 * the body). */
typedef struct up_file {
        char *path;
        const char *data;
        size_t len;
} up_file;
/* envd_files.c: splits a multipart/form-data body (kit/multipart.h; len bytes, not
 * NUL-terminated; NULL when len is 0) by the boundary of ctype into its
 * file parts (those with a filename): *out (free each path, then *out;
 * NULL when none), *n. The parts' data point into body. -1 with
 * AB_E_INVALID for a missing or bad boundary or a malformed body (*out
 * untouched). Fuzzed by tests/fuzz/fuzz_multipart.c. */
int envd_parse_multipart(const char *body, size_t len, const char *ctype, up_file **out, size_t *n,
                         ab_err **err);

/* envd_watch.c: filesystem.Filesystem/WatchDir (a stream) and the watcher
 * calls (CreateWatcher, GetWatcherEvents, RemoveWatcher). */
enum MHD_Result envd_watch_dir(ab_req *r, const char *box, json_t *msg);
enum MHD_Result envd_watcher_rpc(ab_req *r, const char *box, const char *method, json_t *msg);

/* envd_meta.c: file metadata (E2B's files.write metadata), kept in the
 * store per box and path. */
/* The X-Metadata-KEY headers of r: *out a new object (NULL when none);
 * AB_E_INVALID for a bad key or value, or too many (64 keys of at most 128
 * token characters, values of at most 1024 printable ASCII). */
int envd_meta_headers(ab_req *r, json_t **out, ab_err **err);
/* Keeps meta for path (absolute, as shown) of box (NULL or {}: drops it). */
int envd_meta_set(ab_req *r, const char *box, const char *path, json_t *meta, ab_err **err);
/* A new object, path -> metadata, for path and the paths under it; {} when
 * none or unreadable (logged). */
json_t *envd_meta_under(ab_req *r, const char *box, const char *path);
/* After a Move / a Remove: carries along / drops what is kept (failures
 * are logged: the operation itself is done). */
void envd_meta_moved(ab_req *r, const char *box, const char *from, const char *to);
void envd_meta_removed(ab_req *r, const char *box, const char *path);
/* Sets entry's "metadata" to map[entry.path] ({} when none). */
void envd_entry_meta(json_t *entry, json_t *map);

/* envd_sign.c: signed /files URLs (the SDK's uploadUrl, downloadUrl). */
/* True when r is a call a signed URL may make: GET or POST of /files with a
 * "signature" query parameter. */
bool envd_sign_asked(ab_req *r);
/* Checks the signature of such a call for box id (E2B's envd's v1 signing of
 * path, operation, username and the box's access token, and the expiration):
 * 1 when one of the box's tokens signed it and it has not expired (*rec
 * filled: clear it; *key_id the store API key that token is bound to, or
 * NULL: free it); 0 when not (*status 401, or 400 for a malformed
 * expiration; *why a static message); -1 with *err when the store or the
 * secret fails. Reads the store. */
int envd_sign_box(ab_req *r, const char *id, ab_box_rec *rec, char **key_id, unsigned *status,
                  const char **why, ab_err **err);
/* True when a and b are both NULL or the same string (apps). */
bool envd_same_app(const char *a, const char *b);

/* Shutdown halves (envd_shutdown): every process stream detached (the
 * processes and PTYs live on in their boxes), every watch stopped; each
 * waits for its threads (up to 10 s, 5 s). */
void envd_procs_stop(void);
void envd_watches_stop(void);

#endif
