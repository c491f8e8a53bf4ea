/* sqlite.c - the SQLite driver: one connection per handle (store.c serialises
 * calls), WAL so readers never block the writer and several processes can
 * share the file, and a busy timeout so writers of other processes queue
 * rather than fail. */
#include "store/store_int.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <time.h>

#define BUSY_TIMEOUT_MS 5000
#define STMT_CACHE      64   /* prepared statements kept per handle */
#define AUTOCHECKPOINT  1000 /* frames: SQLite's default wal_autocheckpoint */

/* A statement prepared once and kept: parsing and planning the SQL costs
 * more than running it on the hot paths (an exec reads a box and writes its
 * activity and audit row). Kept statements are reset after every use, so
 * none holds a read snapshot between calls. */
typedef struct cached_stmt {
        sqlite3_stmt *st;
        uint64_t hash;
        uint64_t used; /* the handle's use counter when last used */
} cached_stmt;

typedef struct sqlite_store {
        ab_store base;
        sqlite3 *db;
        cached_stmt cache[STMT_CACHE];
        uint64_t uses;
        bool empty_wal_at_close; /* brief, and no other process had the database open */
        int wal_frames;          /* frames in the WAL after this handle's last commit */
} sqlite_store;

static const char *const v1[] = AB_STORE_SCHEMA_V1("INTEGER PRIMARY KEY AUTOINCREMENT");
static const char *const v2[] = AB_STORE_SCHEMA_V2;
static const char *const v3[] = AB_STORE_SCHEMA_V3;
static const char *const v4[] = AB_STORE_SCHEMA_V4;
static const char *const v5[] = AB_STORE_SCHEMA_V5;
static const char *const v6[] = AB_STORE_SCHEMA_V6;
static const char *const v7[] = AB_STORE_SCHEMA_V7;
static const char *const v8[] = AB_STORE_SCHEMA_V8;

static const ab_store_migration migrations[] = {
    {1, v1}, {2, v2}, {3, v3}, {4, v4}, {5, v5}, {6, v6}, {7, v7}, {8, v8},
};

static ab_code code_of(int rc)
{
        switch (rc) {
        case SQLITE_CONSTRAINT_UNIQUE:
        case SQLITE_CONSTRAINT_PRIMARYKEY:
                return AB_E_CONFLICT;
        default:
                break;
        }
        switch (rc & 0xff) {
        case SQLITE_CONSTRAINT:
                return AB_E_INVALID;
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
        case SQLITE_CANTOPEN:
        case SQLITE_PROTOCOL:
                return AB_E_UNAVAILABLE;
        case SQLITE_FULL: /* the filesystem is full: 507 */
                return AB_E_STORAGE;
        case SQLITE_READONLY:
        case SQLITE_PERM:
        case SQLITE_AUTH:
                return AB_E_PERMISSION;
        default:
                return AB_E_INTERNAL;
        }
}

static int fail(sqlite_store *q, int rc, const char *op, ab_err **err)
{
        return ab_err_set(err, code_of(rc), 0, "%s: %s", op, sqlite3_errmsg(q->db));
}

static int bind(sqlite3_stmt *st, const ab_sql_arg *args, size_t nargs)
{
        for (size_t i = 0; i < nargs; i++) {
                char name[24];
                snprintf(name, sizeof(name), "$%zu", i + 1);
                int idx = sqlite3_bind_parameter_index(st, name);
                if (!idx) /* not used by this statement */
                        continue;
                int rc;
                if (args[i].is_int)
                        rc = sqlite3_bind_int64(st, idx, args[i].num);
                else if (args[i].text)
                        rc = sqlite3_bind_text(st, idx, args[i].text, -1, SQLITE_STATIC);
                else
                        rc = sqlite3_bind_null(st, idx);
                if (rc != SQLITE_OK)
                        return rc;
        }
        return SQLITE_OK;
}

static uint64_t sql_hash(const char *sql)
{
        uint64_t h = 1469598103934665603ULL; /* FNV-1a */
        for (const unsigned char *p = (const unsigned char *)sql; *p; p++)
                h = (h ^ *p) * 1099511628211ULL;
        return h;
}

/* The prepared statement for sql: a kept one, or a new one that is kept in
 * place of the least recently used. Calls are serialised by store.c. */
static int stmt_get(sqlite_store *q, const char *sql, sqlite3_stmt **out)
{
        uint64_t h = sql_hash(sql);
        cached_stmt *victim = &q->cache[0];
        q->uses++;
        for (size_t i = 0; i < STMT_CACHE; i++) {
                cached_stmt *c = &q->cache[i];
                if (c->st && c->hash == h && strcmp(sqlite3_sql(c->st), sql) == 0) {
                        c->used = q->uses;
                        *out = c->st;
                        return SQLITE_OK;
                }
                if (!c->st || (victim->st && c->used < victim->used))
                        victim = c;
        }
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v3(q->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
        if (rc != SQLITE_OK)
                return rc;
        if (!st) /* only a comment or white space: nothing to keep */
                return SQLITE_MISUSE;
        sqlite3_finalize(victim->st);
        *victim = (cached_stmt){.st = st, .hash = h, .used = q->uses};
        *out = st;
        return SQLITE_OK;
}

static int sq_exec(ab_store *s, const char *op, const char *sql, const ab_sql_arg *args,
                   size_t nargs, ab_sql_res *res, ab_err **err)
{
        sqlite_store *q = (sqlite_store *)s;
        sqlite3_stmt *st = NULL;
        int rc = stmt_get(q, sql, &st);
        if (rc != SQLITE_OK)
                return fail(q, rc, op, err);
        rc = bind(st, args, nargs);
        if (rc != SQLITE_OK)
                goto fail;
        int ncols = sqlite3_column_count(st);
        if (res)
                res->ncols = (size_t)ncols;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                if (!res)
                        continue;
                char **row = ab_sql_res_add_row(res);
                for (int c = 0; c < ncols; c++) {
                        if (sqlite3_column_type(st, c) == SQLITE_NULL)
                                continue;
                        const char *t = (const char *)sqlite3_column_text(st, c);
                        if (!t) /* only on out-of-memory */
                                abort();
                        row[c] = xstrdup(t);
                }
        }
        if (rc != SQLITE_DONE)
                goto fail;
        if (res)
                res->changes = sqlite3_stmt_readonly(st) ? 0 : sqlite3_changes64(q->db);
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return 0;
fail:;
        int r = fail(q, rc, op, err);
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return r;
}

static int sq_begin(ab_store *s, const char *op, ab_err **err)
{
        /* IMMEDIATE takes the write lock now: a deferred transaction that reads
         * first and writes later can fail with BUSY without waiting. */
        return sq_exec(s, op, "BEGIN IMMEDIATE", NULL, 0, NULL, err);
}

static int sq_commit(ab_store *s, const char *op, ab_err **err)
{
        return sq_exec(s, op, "COMMIT", NULL, 0, NULL, err);
}

static void sq_rollback(ab_store *s)
{
        sqlite_store *q = (sqlite_store *)s;
        if (!sqlite3_get_autocommit(q->db))
                sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
}

static void sq_close(ab_store *s)
{
        sqlite_store *q = (sqlite_store *)s;
        if (q->empty_wal_at_close && q->wal_frames >= AB_STORE_BRIEF_WAL_FRAMES) {
                /* No waiting for others: a process that opened the database
                 * since and is reading it keeps the WAL (a server restarts it
                 * as it writes; another CLI command empties it as it closes). */
                sqlite3_busy_timeout(q->db, 0);
                sqlite3_wal_checkpoint_v2(q->db, "main", SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
        }
        for (size_t i = 0; i < STMT_CACHE; i++)
                sqlite3_finalize(q->cache[i].st);
        sqlite3_close(q->db);
        free(q);
}

static const ab_store_ops sqlite_ops = {
    .kind = "sqlite",
    .migrations = migrations,
    .n_migrations = AB_ARRAY_LEN(migrations),
    .migrate_lock = NULL, /* BEGIN IMMEDIATE already excludes other writers */
    /* The transaction holds the database's write lock: no row lock needed. */
    .claim_select = "SELECT id, backend_id FROM boxes WHERE provider = $1 AND mode = 'pool' "
                    "AND status = 'running' AND COALESCE(node, '') = COALESCE($2, '') ORDER BY "
                    "created_at, id LIMIT 1",
    /* Moves on other connections' commits only, which this handle's own
     * writes (box_gen) complement. */
    .outside_version = "PRAGMA data_version",
    .exec = sq_exec,
    .begin = sq_begin,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .close = sq_close,
};

/* Switching a fresh file to WAL takes an exclusive lock that the busy handler
 * does not always wait for; retry for as long as the busy timeout. */
static int set_wal(sqlite_store *q, const char *path, ab_err **err)
{
        uint64_t deadline = ab_now_ms() + BUSY_TIMEOUT_MS;
        for (;;) {
                ab_sql_res res = {0};
                ab_err *e = NULL;
                int r =
                    sq_exec(&q->base, "set WAL mode", "PRAGMA journal_mode=WAL", NULL, 0, &res, &e);
                if (r == 0) {
                        const char *mode = res.nrows && res.ncols ? res.cells[0] : NULL;
                        bool wal = mode && strcmp(mode, "wal") == 0;
                        if (!wal)
                                ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                           "open SQLite database %s: cannot use WAL mode "
                                           "(journal mode is %s): put it on a local filesystem",
                                           path, mode ? mode : "unknown");
                        ab_sql_res_clear(&res);
                        return wal ? 0 : -1;
                }
                ab_sql_res_clear(&res);
                if (e->code != AB_E_UNAVAILABLE || ab_now_ms() >= deadline) {
                        ab_err_set(err, e->code, 0, "open SQLite database %s: %s", path, e->msg);
                        ab_err_free(&e);
                        return -1;
                }
                ab_err_free(&e);
                nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
        }
}

/* True when no other process has the database at path open: SQLite's unix
 * VFS holds a shared lock on byte 128 of PATH-shm (its "DMS" lock, fixed by
 * the WAL-index format every version shares) in every process that has the
 * WAL index open. Call it only while this process has no handle on the
 * database: closing the probe's descriptor drops every POSIX lock this
 * process holds on the file. */
static bool no_other_process(const char *path)
{
        _cleanup_free_ char *shm = xasprintf("%s-shm", path);
        _cleanup_close_ int fd = open(shm, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
        if (fd < 0)
                return errno == ENOENT; /* made by the first connection */
        struct flock f = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 128, .l_len = 1};
        return fcntl(fd, F_GETLK, &f) == 0 && f.l_type == F_UNLCK;
}

/* SQLite's own auto-checkpoint (a passive one at 1,000 frames), which a WAL
 * hook replaces, and a count of the frames for sq_close. */
static int on_wal_commit(void *ud, sqlite3 *db, const char *name, int frames)
{
        sqlite_store *q = ud;
        q->wal_frames = frames;
        if (frames >= AUTOCHECKPOINT)
                sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        return SQLITE_OK;
}

int ab_store_sqlite_open(const char *path, bool brief, ab_store **out, ab_err **err)
{
        *out = NULL;
        /* Create the file ourselves so that it is private from the start (SQLite
         * gives the -wal and -shm files the database's mode). */
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
        if (fd < 0)
                return ab_err_set(err, errno == EACCES ? AB_E_PERMISSION : AB_E_UNAVAILABLE, errno,
                                  "open SQLite database %s", path);
        close(fd);
        bool alone = brief && no_other_process(path);
        sqlite3 *db = NULL;
        int rc = sqlite3_open_v2(
            path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
        if (rc != SQLITE_OK) {
                ab_err_set(err, AB_E_UNAVAILABLE, 0, "open SQLite database %s: %s", path,
                           db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
                sqlite3_close(db);
                return -1;
        }
        sqlite3_extended_result_codes(db, 1);
        sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
        /* The WAL file stays between processes and commits alone checkpoint
         * (SQLite's auto-checkpoint): a CLI exec, which opens the store for one
         * audit row, would otherwise make, sync, checkpoint and delete the WAL
         * on every run. Committed rows are in the WAL either way. */
        int persist = 1;
        sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
        sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
        sqlite_store *q = xzalloc(sizeof(*q));
        q->base.ops = &sqlite_ops;
        q->db = db;
        if (alone) {
                q->empty_wal_at_close = true;
                sqlite3_wal_hook(db, on_wal_commit, q);
        }
        if (set_wal(q, path, err) < 0 ||
            sq_exec(&q->base, "open SQLite database: set synchronous", "PRAGMA synchronous=NORMAL",
                    NULL, 0, NULL, err) < 0) {
                sq_close(&q->base);
                return -1;
        }
        *out = &q->base;
        return 0;
}
