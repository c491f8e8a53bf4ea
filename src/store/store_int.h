/* store_int.h - between store.c and the two drivers (sqlite.c, postgres.c).
 *
 * store.c writes every operation once, in SQL both databases accept, with
 * parameters named $1, $2, ... (SQLite takes them as named parameters). A
 * driver runs one statement at a time and returns its rows as text; the few
 * places where the dialects differ (schema, the claim's row lock, the
 * migration lock) are strings in the driver's ops. store.c holds the handle's
 * mutex around every operation, so a driver never sees two calls at once. */
#ifndef AB_STORE_INT_H
#define AB_STORE_INT_H

#include "store/store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* A bound parameter: text (NULL = SQL NULL) or a 64-bit integer. */
typedef struct ab_sql_arg {
        bool is_int;
        const char *text;
        int64_t num;
} ab_sql_arg;

#define SQL_TEXT(s)     ((ab_sql_arg){.is_int = false, .text = (s)})
#define SQL_INT(n)      ((ab_sql_arg){.is_int = true, .num = (int64_t)(n)})
#define AB_SQL_MAX_ARGS 32

/* The rows of a statement, every cell as text (NULL = SQL NULL), and the
 * number of rows an INSERT/UPDATE/DELETE changed. */
typedef struct ab_sql_res {
        size_t nrows, ncols;
        char **cells; /* nrows * ncols, row-major, owned */
        size_t cap;   /* rows allocated */
        int64_t changes;
} ab_sql_res;

/* Appends a row of res->ncols NULL cells and returns it for the driver to fill. */
char **ab_sql_res_add_row(ab_sql_res *res);
void ab_sql_res_clear(ab_sql_res *res);

/* One schema version: statements run in order inside the migration transaction. */
typedef struct ab_store_migration {
        int version;
        const char *const *stmts; /* NULL-terminated */
} ab_store_migration;

typedef struct ab_store_ops {
        const char *kind; /* "sqlite" | "postgres" */
        const ab_store_migration *migrations;
        size_t n_migrations;
        /* Run first in the migration transaction so that concurrent opens of a
         * fresh database take turns; NULL when begin() already excludes writers. */
        const char *migrate_lock;
        /* SELECT id, backend_id of one claimable pooled box of provider $1
         * and fleet node $2 (NULL: a box of no node), locked against concurrent claims until the
         * transaction ends. */
        const char *claim_select;
        /* SELECT whether the session lock named $1 was taken (true/1) and
         * the statement that releases it; NULL where one host's processes
         * need none (SQLite: the store's own locking). */
        const char *lock_try, *lock_release;
        /* SELECT that sends $2 on channel $1 to the store's listeners; NULL: none */
        const char *notify;
        /* SELECT of one integer that moves whenever another connection (any
         * process) commits a change to the database, and not on this
         * handle's own commits (SQLite: PRAGMA data_version); NULL where the
         * database cannot tell cheaply: box records are then never cached. */
        const char *outside_version;

        /* Runs one statement with args bound to $1..$nargs. res may be NULL.
         * On failure sets *err to "OP: database message" with the code that
         * fits (unique violation -> AB_E_CONFLICT, unreachable -> AB_E_UNAVAILABLE). */
        int (*exec)(ab_store *s, const char *op, const char *sql, const ab_sql_arg *args,
                    size_t nargs, ab_sql_res *res, ab_err **err);
        /* A write transaction that excludes other writers where the database
         * needs that for correctness (SQLite: BEGIN IMMEDIATE). */
        int (*begin)(ab_store *s, const char *op, ab_err **err);
        int (*commit)(ab_store *s, const char *op, ab_err **err);
        /* Best effort; a no-op when no transaction is open. */
        void (*rollback)(ab_store *s);
        void (*close)(ab_store *s);
} ab_store_ops;

/* A box record kept by ab_store_box_get (boxcache.c). */
typedef struct ab_box_cached {
        ab_box_rec rec; /* owned; rec.id NULL = a free entry */
        uint64_t gen;   /* the handle's box_gen when read */
        uint64_t ver;   /* the outside version read before it */
        uint64_t used;  /* the cache's use counter when last read */
} ab_box_cached;

#define AB_BOX_CACHE_N 64

/* The common head of every driver's handle. */
struct ab_store {
        const ab_store_ops *ops;
        pthread_mutex_t lock;
        _Atomic uint64_t box_gen;                /* ab_store_box_gen */
        ab_box_cached box_cache[AB_BOX_CACHE_N]; /* under lock */
        uint64_t box_cache_uses;
};

/* The box record cache of a handle (boxcache.c), all under its lock. An
 * entry serves a read only while the handle's box_gen (every write of box
 * rows through this handle but touches) and the outside version (commits of
 * other connections and processes) are those it was read under; a touch
 * through this handle updates the entry's last_active_at as the row's. */

/* Copies the entry of (provider, id) into *out (a deep copy the caller
 * owns) when it is valid under `ver`; false (out untouched) otherwise. */
bool ab_box_cache_get(ab_store *s, const char *provider, const char *id, uint64_t ver,
                      ab_box_rec *out);
/* Keeps a copy of r, read under `ver` and the current box_gen (replacing
 * the entry of the same box, else a free or the least recently used one). */
void ab_box_cache_put(ab_store *s, const ab_box_rec *r, uint64_t ver);
/* The row's last_active_at became max(itself, at_ms) (a committed touch). */
void ab_box_cache_touch(ab_store *s, const char *provider, const char *id, int64_t at_ms);
/* Forgets the entry of (provider, id), if any. */
void ab_box_cache_drop(ab_store *s, const char *provider, const char *id);
/* Forgets every entry (at close). */
void ab_box_cache_clear(ab_store *s);

/* Driver constructors: connect and configure; store.c then migrates. They
 * fill s->ops; store.c initialises the mutex. */
int ab_store_sqlite_open(const char *path, bool brief, ab_store **out, ab_err **err);
int ab_store_pg_open(const char *url, ab_store **out, ab_err **err);

/* Schema version 1, the same for every dialect but for the type of the
 * audit table's auto-increment key (AUTO_ID). Released migrations never
 * change: a new version gets a new macro. */
#define AB_STORE_SCHEMA_V1(AUTO_ID)                                                                \
        {                                                                                          \
                "CREATE TABLE boxes ("                                                             \
                "provider TEXT NOT NULL, id TEXT NOT NULL, backend_id TEXT, "                      \
                "app_id TEXT, user_id TEXT, chat_id TEXT, thread_id TEXT, "                        \
                "status TEXT NOT NULL, mode TEXT NOT NULL, "                                       \
                "created_at BIGINT NOT NULL, last_active_at BIGINT NOT NULL, "                     \
                "idle_stop_s BIGINT NOT NULL DEFAULT 0, ttl_s BIGINT NOT NULL DEFAULT 0, "         \
                "limits TEXT, spec TEXT, metadata TEXT, error TEXT, "                              \
                "UNIQUE (provider, id))",                                                          \
                    "CREATE INDEX boxes_app_chat ON boxes (app_id, chat_id)",                      \
                    "CREATE INDEX boxes_status_active ON boxes (status, last_active_at)",          \
                    "CREATE TABLE exec_audit ("                                                    \
                    "id " AUTO_ID ", provider TEXT NOT NULL, box_id TEXT NOT NULL, "               \
                    "command TEXT NOT NULL, exit_code INTEGER NOT NULL, timed_out INTEGER NOT "    \
                    "NULL, started_at BIGINT NOT NULL, duration_ms BIGINT NOT NULL, "              \
                    "stdout_bytes BIGINT NOT NULL, stderr_bytes BIGINT NOT NULL)",                 \
                    "CREATE INDEX exec_audit_box ON exec_audit (provider, box_id, started_at)",    \
                    "CREATE TABLE api_keys ("                                                      \
                    "key_id TEXT NOT NULL UNIQUE, key_hash TEXT NOT NULL UNIQUE, app_id TEXT NOT " \
                    "NULL, name TEXT, created_at BIGINT NOT NULL)",                                \
                    NULL,                                                                          \
        }

/* Version 2: a box's own idle pause deadline (0 = the server's, <0 = never). */
#define AB_STORE_SCHEMA_V2                                                                         \
        {                                                                                          \
                "ALTER TABLE boxes ADD COLUMN idle_pause_s BIGINT NOT NULL DEFAULT 0", NULL,       \
        }

/* Version 3: an API key's own quotas (JSON object, NULL = the app's). */
#define AB_STORE_SCHEMA_V3                                                                         \
        {                                                                                          \
                "ALTER TABLE api_keys ADD COLUMN quotas TEXT", NULL,                               \
        }

/* Version 4: one box per keys. Ids from keys changed scheme (docs/api.md,
 * "Box ids"); boxes of the first keep their ids, so the database, not the id
 * alone, keeps the keys of an app (and a thread id of an app, or of none) to
 * one box across server processes. Rows of the first scheme satisfy both:
 * it gave one id per keys and one per thread id. */
#define AB_STORE_SCHEMA_V4                                                                         \
        {                                                                                          \
                "CREATE UNIQUE INDEX boxes_keys ON boxes (provider, app_id, user_id, chat_id)",    \
                    "CREATE UNIQUE INDEX boxes_thread ON boxes (provider, COALESCE(app_id, ''), "  \
                    "thread_id) WHERE thread_id IS NOT NULL",                                      \
                    NULL,                                                                          \
        }

/* Version 5: chat sessions and their history (the agent loop of POST
 * /api/chat). app_id '' is the admin's. A message is one chat-completions
 * message as JSON (role, content, tool_calls, tool_call_id); seq orders them
 * within a thread. */
#define AB_STORE_SCHEMA_V5                                                                         \
        {                                                                                          \
                "CREATE TABLE chat_sessions (app_id TEXT NOT NULL, thread_id TEXT NOT NULL, "      \
                "created_at BIGINT NOT NULL, PRIMARY KEY (app_id, thread_id))",                    \
                    "CREATE TABLE chat_messages (app_id TEXT NOT NULL, thread_id TEXT NOT NULL, "  \
                    "seq BIGINT NOT NULL, role TEXT NOT NULL, message TEXT NOT NULL, "             \
                    "created_at BIGINT NOT NULL, PRIMARY KEY (app_id, thread_id, seq))",           \
                    NULL,                                                                          \
        }

/* Version 6: several servers as one service (docs/fleet.md): the nodes of a
 * fleet with their heartbeats and capacity, and the node that owns each box
 * (NULL: no owner, a single server's box). */
#define AB_STORE_SCHEMA_V6                                                                         \
        {                                                                                          \
                "CREATE TABLE nodes ("                                                             \
                "id TEXT NOT NULL PRIMARY KEY, url TEXT NOT NULL, "                                \
                "draining INTEGER NOT NULL DEFAULT 0, started_at BIGINT NOT NULL, "                \
                "heartbeat_at BIGINT NOT NULL, running BIGINT NOT NULL DEFAULT 0, "                \
                "mem_total BIGINT NOT NULL DEFAULT 0, mem_avail BIGINT NOT NULL DEFAULT 0, "       \
                "disk_total BIGINT NOT NULL DEFAULT 0, disk_avail BIGINT NOT NULL DEFAULT 0)",     \
                    "ALTER TABLE boxes ADD COLUMN node TEXT",                                      \
                    "CREATE INDEX boxes_node ON boxes (node)", NULL,                               \
        }

/* Version 7: file metadata of a box's files (E2B's files.write metadata),
 * by path, for one creation of the box (a later box with the same id sees
 * none of it). */
#define AB_STORE_SCHEMA_V7                                                                         \
        {                                                                                          \
                "CREATE TABLE file_meta (provider TEXT NOT NULL, box_id TEXT NOT NULL, "           \
                "creation TEXT NOT NULL, path TEXT NOT NULL, metadata TEXT NOT NULL, "             \
                "PRIMARY KEY (provider, box_id, path))",                                           \
                    NULL,                                                                          \
        }

/* Version 8: the keys of an app found without a scan (a signed E2B /files
 * URL is checked against the tokens of its box's app's keys). */
#define AB_STORE_SCHEMA_V8                                                                         \
        {                                                                                          \
                "CREATE INDEX api_keys_app ON api_keys (app_id, created_at)", NULL,                \
        }

#endif
