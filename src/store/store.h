/* store.h - the service's durable records: boxes (after seed 000's
 * sandbox_instances), an audit of execs, and scoped API keys. One interface,
 * two implementations: SQLite (default, WAL, under the data folder) and
 * PostgreSQL. Migrations are versioned and run by ab_store_open.
 *
 * Thread-safety: a store handle may be used from many threads at once (each
 * implementation serialises or pools its connections). Several processes may
 * share one database: uniqueness of (provider, id) is enforced by the
 * database, so ab_store_box_insert is the cross-process "who creates this box"
 * decision. Times are unix milliseconds. */
#ifndef AB_STORE_H
#define AB_STORE_H

#include "base/box.h"
#include "base/err.h"
#include "base/limits.h"
#include "base/quota.h"
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct ab_store ab_store;

/* A box record, typed: enums for status and mode, parsed limits, and the
 * JSON columns as jansson values (parsed once, when the row is read).
 * Everything is owned by the record (free with ab_box_rec_clear); NULL means
 * "absent" for optional strings and objects. */
typedef struct ab_box_rec {
        char *provider;   /* backend name, e.g. "native" */
        char *id;         /* public id */
        char *backend_id; /* the backend's name of the box (differs for pooled boxes) */
        char *app_id, *user_id, *chat_id, *thread_id; /* acquire keys; optional */
        ab_box_status status;
        ab_box_mode mode;
        int64_t created_at;     /* ms */
        int64_t last_active_at; /* ms */
        int64_t idle_stop_s;    /* 0 = the server's default; <0 = never */
        int64_t idle_pause_s;   /* 0 = the server's default; <0 = never */
        int64_t ttl_s;          /* 0 = no TTL */
        bool has_limits;        /* false: the server's default limits apply */
        ab_limits limits;       /* cpus, memory_mib, pids, disk_mib, timeout_s (stored fields) */
        json_t *spec;           /* object: env, network, creator, creation...; or NULL */
        json_t *metadata;       /* object, or NULL */
        char *error;            /* why status is error, or NULL */
        char *node;             /* the fleet node that owns the box (docs/fleet.md), or NULL */
} ab_box_rec;

void ab_box_rec_clear(ab_box_rec *r);
void ab_box_recs_free(ab_box_rec *r, size_t n);

/* Filter for ab_store_box_list: NULL fields match anything. */
typedef struct ab_box_filter {
        const char *provider;
        const char *app_id, *user_id, *chat_id, *thread_id;
        ab_box_status status; /* 0 = any */
        ab_box_mode mode;     /* 0 = any */
        /* limit > 0: a page of at most limit records in id order, those with
         * an id after after_id (NULL = from the first); for walks over every
         * box a few at a time. */
        const char *after_id;
        size_t limit;
        const char *node; /* only this fleet node's boxes; NULL = any owner */
} ab_box_filter;

typedef struct ab_exec_audit {
        char *provider, *box_id;
        char *command;
        int exit_code;
        bool timed_out;
        int64_t started_at; /* ms */
        int64_t duration_ms;
        int64_t stdout_bytes, stderr_bytes;
} ab_exec_audit;

void ab_exec_audits_free(ab_exec_audit *a, size_t n);

typedef struct ab_api_key {
        char *key_id;   /* public handle, e.g. "k_3f2a..." */
        char *key_hash; /* hex sha256 of the secret; the secret itself is never stored */
        char *app_id;   /* the only app this key may see and touch */
        char *name;     /* free text, or NULL */
        int64_t created_at;
        bool has_quotas; /* false: the key has no quotas of its own (stored as NULL) */
        ab_quota quotas; /* with has_quotas: fields not set are AB_QUOTA_INHERIT */
} ab_api_key;

void ab_api_key_clear(ab_api_key *k);
void ab_api_keys_free(ab_api_key *k, size_t n);

/* Opens (and migrates) a store. url: NULL or "" = SQLite at DATA_DIR/agentbox.db;
 * "sqlite:PATH" = SQLite at PATH; "postgres://..." or "postgresql://..." =
 * PostgreSQL (libpq connection URI). AB_E_UNAVAILABLE when the database cannot
 * be reached, AB_E_INVALID for a bad url, AB_E_CONFLICT when the database
 * has a newer schema than this binary knows. */
int ab_store_open(const char *url, const char *data_dir, ab_store **out, ab_err **err);
/* ab_store_open for a handle that a command closes within moments (a CLI
 * exec), the only one on its database in this process. SQLite rebuilds its
 * WAL index from the whole WAL in the first connection of a process when
 * no other process has the database open, and a WAL that only such
 * commands write is never restarted: so when no other process has the
 * database open, closing this handle empties the WAL (a checkpoint that
 * truncates it) once it holds AB_STORE_BRIEF_WAL_FRAMES frames or more. A
 * server's handle is ab_store_open's. PostgreSQL: ab_store_open. */
int ab_store_open_brief(const char *url, const char *data_dir, ab_store **out, ab_err **err);
#define AB_STORE_BRIEF_WAL_FRAMES 100
void ab_store_close(ab_store *s);
/* "sqlite" or "postgres". */
const char *ab_store_kind(const ab_store *s);
/* The schema version after migrations. */
int ab_store_schema_version(ab_store *s, int *out, ab_err **err);

/* Inserts a new record. AB_E_CONFLICT when (provider, id) exists, or a
 * record of provider with the same app_id, user_id and chat_id (all three
 * set), or with the same thread_id and app_id (app_id NULL included): one
 * box per keys (schema version 4). */
int ab_store_box_insert(ab_store *s, const ab_box_rec *r, ab_err **err);
/* Reads one record. AB_E_NOT_FOUND when absent. */
int ab_store_box_get(ab_store *s, const char *provider, const char *id, ab_box_rec *out,
                     ab_err **err);
/* Replaces every column of the record (provider, id) with r's values.
 * AB_E_NOT_FOUND when absent. */
int ab_store_box_update(ab_store *s, const ab_box_rec *r, ab_err **err);
/* Sets status (and error, NULL clears it). When expect is non-zero the change
 * happens only if the current status equals expect; otherwise AB_E_CONFLICT.
 * AB_E_NOT_FOUND when absent. */
int ab_store_box_set_status(ab_store *s, const char *provider, const char *id, ab_box_status status,
                            ab_box_status expect, const char *error, ab_err **err);
/* A fleet's move of a box (docs/fleet.md): makes node the box's owner in
 * one step, only when its owner is expect and its status is stopped (a
 * compare-and-set: no moment with two owners or none). AB_E_CONFLICT
 * naming the owner and status when they are not those; AB_E_NOT_FOUND
 * when absent. */
int ab_store_box_set_node(ab_store *s, const char *provider, const char *id, const char *node,
                          const char *expect, ab_err **err);
/* Sets last_active_at = max(last_active_at, at_ms). AB_E_NOT_FOUND when absent. */
int ab_store_box_touch(ab_store *s, const char *provider, const char *id, int64_t at_ms,
                       ab_err **err);
/* Deletes the record. AB_E_NOT_FOUND when absent. */
int ab_store_box_delete(ab_store *s, const char *provider, const char *id, ab_err **err);
/* Records matching f, ordered by created_at then id (or a page by id:
 * f->limit). */
int ab_store_box_list(ab_store *s, const ab_box_filter *f, ab_box_rec **out, size_t *n,
                      ab_err **err);
/* Which idle deadline ab_store_box_list_idle looks at. */
typedef enum {
        AB_IDLE_PAUSE = 1, /* running boxes past their idle_pause_s */
        AB_IDLE_STOP,      /* running and paused boxes past their idle_stop_s */
} ab_idle_kind;

/* Non-pool records of provider whose idle deadline of `kind` has passed:
 * last_active_at + idle * 1000 < now_ms, where idle is the record's
 * idle_pause_s or idle_stop_s if > 0, else default_idle_s; records with a
 * value < 0 never qualify. Ordered by last_active_at (oldest first). */
int ab_store_box_list_idle(ab_store *s, const char *provider, ab_idle_kind kind, int64_t now_ms,
                           int64_t default_idle_s, ab_box_rec **out, size_t *n, ab_err **err);
/* Non-pool records of provider, not being deleted, whose TTL has passed:
 * ttl_s > 0 and created_at + ttl_s * 1000 < now_ms. */
int ab_store_box_list_expired(ab_store *s, const char *provider, int64_t now_ms, ab_box_rec **out,
                              size_t *n, ab_err **err);
/* The earliest end (created_at + ttl_s * 1000, ms) at or after now_ms of a
 * TTL of provider's non-pool boxes not being deleted (only node's when node
 * is set); 0 when there is none. */
int ab_store_box_next_ttl_end(ab_store *s, const char *provider, const char *node, int64_t now_ms,
                              int64_t *out, ab_err **err);
/* A number that moves whenever a box row is inserted, deleted, or has its
 * status or columns replaced through this handle (not on touch): a reader
 * that saw the same number twice knows no box changed through this handle
 * in between (writes by other processes or servers are not seen). */
uint64_t ab_store_box_gen(ab_store *s);
/* Counts of records of provider by status, as parallel arrays (status names
 * owned by the caller: free each and the arrays). */
int ab_store_box_count_by_status(ab_store *s, const char *provider, char ***statuses,
                                 int64_t **counts, size_t *n, ab_err **err);

/* Atomically turns one pooled box of provider (mode "pool", status
 * "running") of claim->node (a fleet node claims only its own) into the box described by claim: the
 * pooled record is deleted and claim is inserted with claim->backend_id set to the pooled box's
 * backend_id, in one transaction. Two concurrent claims never get the same
 * pooled box. Returns 1 when a box was claimed (claim->backend_id is then
 * replaced by a newly allocated string), 0 when the pool is empty,
 * AB_E_CONFLICT when claim's (provider, id) exists already (nothing changes). */
int ab_store_pool_claim(ab_store *s, ab_box_rec *claim, ab_err **err);

/* Appends one exec to the audit table. */
int ab_store_audit_add(ab_store *s, const ab_exec_audit *a, ab_err **err);
/* Records a finished exec in one transaction: its box's activity (as
 * ab_store_box_touch at touch_ms; a box that is gone is no error) and its
 * audit row (as ab_store_audit_add). One commit instead of two. */
int ab_store_exec_done(ab_store *s, const ab_exec_audit *a, int64_t touch_ms, ab_err **err);
/* The newest `limit` audits of a box (newest first). */
int ab_store_audit_list(ab_store *s, const char *provider, const char *box_id, size_t limit,
                        ab_exec_audit **out, size_t *n, ab_err **err);

/* API keys. Insert fails with AB_E_CONFLICT on a duplicate key_id or hash. */
int ab_store_key_insert(ab_store *s, const ab_api_key *k, ab_err **err);
/* Finds the key with this hash. AB_E_NOT_FOUND when absent. */
int ab_store_key_find(ab_store *s, const char *key_hash, ab_api_key *out, ab_err **err);
int ab_store_key_list(ab_store *s, ab_api_key **out, size_t *n, ab_err **err);
/* The keys of app app_id only (oldest first; none for NULL: a key always
 * has an app). */
int ab_store_key_list_app(ab_store *s, const char *app_id, ab_api_key **out, size_t *n,
                          ab_err **err);
/* The key with this key_id. AB_E_NOT_FOUND when absent. */
int ab_store_key_get(ab_store *s, const char *key_id, ab_api_key *out, ab_err **err);
int ab_store_key_delete(ab_store *s, const char *key_id, ab_err **err);

/* Chat sessions (POST /api/sessions) and their history, per app (NULL: the
 * admin) and thread id. Insert: AB_E_CONFLICT when the thread exists. Get:
 * 0, or AB_E_NOT_FOUND. Delete removes the session and its messages in one
 * transaction (AB_E_NOT_FOUND when there was no session). */
int ab_store_chat_session_insert(ab_store *s, const char *app_id, const char *thread_id,
                                 ab_err **err);
int ab_store_chat_session_get(ab_store *s, const char *app_id, const char *thread_id, ab_err **err);
int ab_store_chat_session_delete(ab_store *s, const char *app_id, const char *thread_id,
                                 ab_err **err);
/* Appends n messages (chat-completions messages as JSON text, with their
 * roles) after the thread's last, in one transaction; AB_E_NOT_FOUND (and
 * nothing written) when the session is gone. */
int ab_store_chat_append(ab_store *s, const char *app_id, const char *thread_id,
                         const char *const *roles, const char *const *messages, size_t n,
                         ab_err **err);
/* The thread's newest `limit` messages, oldest first: *messages is a new
 * NULL-terminated array of JSON texts (free with the strv cleanup). */
int ab_store_chat_history(ab_store *s, const char *app_id, const char *thread_id, size_t limit,
                          char ***messages, size_t *n, ab_err **err);
/* A lock over every process sharing the store, by name (PostgreSQL: a
 * session advisory lock; SQLite: nothing to take, 0). Waits up to
 * timeout_ms, retrying without holding the handle meanwhile; AB_E_UNAVAILABLE
 * when it could not be had. Taking it again on the same handle succeeds (the
 * holder is the process): threads of one process need their own lock. */
int ab_store_lock(ab_store *s, const char *name, int timeout_ms, ab_err **err);
void ab_store_unlock(ab_store *s, const char *name);

/* Messages between the processes sharing a PostgreSQL store (NOTIFY and
 * LISTEN; a message is at most 7999 bytes). notify: sends payload on
 * channel (AB_E_UNSUPPORTED for SQLite). listen: a connection of its own to
 * url listening on channel (a name of letters, digits and '_'); wait: up to
 * timeout_ms for messages, calling fn(arg, payload) for each; -1 with *err
 * when the connection broke (close it and listen again). */
int ab_store_notify(ab_store *s, const char *channel, const char *payload, ab_err **err);
typedef struct ab_store_listener ab_store_listener;
int ab_store_listen(const char *url, const char *channel, ab_store_listener **out, ab_err **err);
int ab_store_listen_wait(ab_store_listener *l, int timeout_ms,
                         void (*fn)(void *arg, const char *payload), void *arg, ab_err **err);
void ab_store_listen_close(ab_store_listener *l);

/* A node of a fleet: several servers sharing one store (docs/fleet.md).
 * Owned by the record (free with ab_node_rec_clear). */
typedef struct ab_node_rec {
        char *id;                       /* the node's id (fleet.node) */
        char *url;                      /* where the other nodes reach it (fleet.url) */
        bool draining;                  /* no new boxes are placed on it */
        int64_t started_at;             /* ms: when its server started */
        int64_t heartbeat_at;           /* ms: its last heartbeat */
        int64_t running;                /* its running boxes */
        int64_t mem_total, mem_avail;   /* bytes of its host's memory */
        int64_t disk_total, disk_avail; /* bytes of its data folder's filesystem */
} ab_node_rec;

void ab_node_rec_clear(ab_node_rec *n);
void ab_node_recs_free(ab_node_rec *n, size_t count);

/* A node's heartbeat: inserts n, or replaces the url, started_at,
 * heartbeat_at and capacity of the node with n->id (its draining flag is
 * kept). AB_E_INVALID without an id or url. */
int ab_store_node_beat(ab_store *s, const ab_node_rec *n, ab_err **err);
/* Every node, ordered by id. */
int ab_store_node_list(ab_store *s, ab_node_rec **out, size_t *n, ab_err **err);
/* The node with this id. AB_E_NOT_FOUND when absent. */
int ab_store_node_get(ab_store *s, const char *id, ab_node_rec *out, ab_err **err);
/* Sets or clears a node's draining flag. AB_E_NOT_FOUND when absent. */
int ab_store_node_set_draining(ab_store *s, const char *id, bool draining, ab_err **err);
/* ---- file metadata ---------------------------------------------------------
 * String pairs kept for files of a box (E2B's files.write metadata), by
 * absolute path, for one creation of the box (spec.creation): rows of
 * another creation are never returned and are replaced by a set. A box's
 * rows go with ab_store_box_delete. */

/* Sets the metadata of path (a JSON object; NULL or {}: removes it). */
int ab_store_file_meta_set(ab_store *s, const char *provider, const char *id, const char *creation,
                           const char *path, json_t *meta, ab_err **err);
/* *out: a new object, path -> metadata, for path and every path under it
 * (path + "/"); {} when none. */
int ab_store_file_meta_get(ab_store *s, const char *provider, const char *id, const char *creation,
                           const char *path, json_t **out, ab_err **err);
/* A rename: what was kept for from and the paths under it now is to's
 * (what to had is dropped). */
int ab_store_file_meta_move(ab_store *s, const char *provider, const char *id, const char *from,
                            const char *to, ab_err **err);
/* A removal: drops what is kept for path and the paths under it. */
int ab_store_file_meta_delete(ab_store *s, const char *provider, const char *id, const char *path,
                              ab_err **err);

#endif
