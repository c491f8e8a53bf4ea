/* Unit tests: the store. One suite runs against every database it can open:
 * SQLite in a temporary folder always, PostgreSQL when AGENTBOX_TEST_PG_URL
 * names a server (scripts/pg.sh starts one). Each PostgreSQL run creates its
 * own database through that url and drops it at the end, so reruns start
 * clean. */
#include "store/store.h"
#include "tap.h"

#include <fcntl.h>
#include <ftw.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#define S(x) ((char *)(x))
/* Half the boxes test_box_cache reads in turn: together more than a
 * handle keeps (64). */
#define BOX_CACHE_MORE 40

typedef struct target {
        const char *kind; /* "sqlite" | "postgres" */
        char *url;
} target;

static const char *K = "-"; /* the target being tested, in every test name */

/* ---- checks ---- */

static char *vfmt(const char *fmt, va_list ap)
{
        char *s = NULL;
        if (vasprintf(&s, fmt, ap) < 0)
                abort();
        return s;
}

static void ok(int cond, const char *fmt, ...) AB_PRINTF(2, 3);
static void ok(int cond, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *name = vfmt(fmt, ap);
        va_end(ap);
        tap_ok(cond, "%s: %s", K, name);
}

static void is_int(long long got, long long want, const char *fmt, ...) AB_PRINTF(3, 4);
static void is_int(long long got, long long want, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *name = vfmt(fmt, ap);
        va_end(ap);
        tap_ok(got == want, "%s: %s", K, name);
        if (got != want)
                tap_diag("  got %lld, want %lld", got, want);
}

static void is_str(const char *got, const char *want, const char *fmt, ...) AB_PRINTF(3, 4);
static void is_str(const char *got, const char *want, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *name = vfmt(fmt, ap);
        va_end(ap);
        int eq = (got && want) ? strcmp(got, want) == 0 : got == want;
        tap_ok(eq, "%s: %s", K, name);
        if (!eq)
                tap_diag("  got \"%s\", want \"%s\"", got ? got : "(null)", want ? want : "(null)");
}

/* r >= 0 and no error; prints the error otherwise and releases it. */
static int no_err(int r, ab_err **e, const char *fmt, ...) AB_PRINTF(3, 4);
static int no_err(int r, ab_err **e, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *name = vfmt(fmt, ap);
        va_end(ap);
        tap_ok(r >= 0 && !*e, "%s: %s", K, name);
        if (*e)
                tap_diag("  error %s: %s", ab_code_name((*e)->code), (*e)->msg);
        ab_err_free(e);
        return r;
}

/* r < 0 with this code (and, when non-NULL, a message containing `has`). */
static void is_err(int r, ab_err **e, ab_code code, const char *has, const char *fmt, ...)
    AB_PRINTF(5, 6);
static void is_err(int r, ab_err **e, ab_code code, const char *has, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *name = vfmt(fmt, ap);
        va_end(ap);
        bool good = r < 0 && *e && (*e)->code == code && (!has || strstr((*e)->msg, has));
        tap_ok(good, "%s: %s", K, name);
        if (!good)
                tap_diag("  got r=%d %s: %s; want %s%s%s", r,
                         *e ? ab_code_name((*e)->code) : "no error", *e ? (*e)->msg : "",
                         ab_code_name(code), has ? " with " : "", has ? has : "");
        ab_err_free(e);
}

/* ---- raw access, behind the store's back ---- */

/* Runs sql on the target's database; the first cell of the result, if any,
 * goes to *out (malloc'd). 0 or -1. */
static int raw(const target *t, const char *sql, char **out)
{
        if (out)
                *out = NULL;
        if (strcmp(t->kind, "sqlite") == 0) {
                sqlite3 *db = NULL;
                sqlite3_stmt *st = NULL;
                int r = -1;
                if (sqlite3_open_v2(t->url + 7, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
                        goto out;
                sqlite3_busy_timeout(db, 5000);
                if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
                        goto out;
                int rc = sqlite3_step(st);
                if (rc == SQLITE_ROW && out && sqlite3_column_text(st, 0))
                        *out = xstrdup((const char *)sqlite3_column_text(st, 0));
                r = (rc == SQLITE_ROW || rc == SQLITE_DONE) ? 0 : -1;
        out:
                if (r < 0)
                        tap_diag("  sqlite: %s", db ? sqlite3_errmsg(db) : "no memory");
                sqlite3_finalize(st);
                sqlite3_close(db);
                return r;
        }
        PGconn *c = PQconnectdb(t->url);
        PGresult *res = PQexec(c, sql);
        ExecStatusType st = PQresultStatus(res);
        int r = (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) ? 0 : -1;
        if (r < 0)
                tap_diag("  postgres: %s", PQerrorMessage(c));
        if (r == 0 && out && PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
                *out = xstrdup(PQgetvalue(res, 0, 0));
        PQclear(res);
        PQfinish(c);
        return r;
}

static long long raw_num(const target *t, const char *sql)
{
        _cleanup_free_ char *v = NULL;
        if (raw(t, sql, &v) < 0 || !v)
                return -1;
        return strtoll(v, NULL, 10);
}

static ab_store *open_store(const target *t, const char *what)
{
        ab_store *s = NULL;
        ab_err *e = NULL;
        no_err(ab_store_open(t->url, NULL, &s, &e), &e, "open (%s)", what);
        return s;
}

/* A box record whose strings are borrowed literals (never pass it to a free). */
static ab_box_rec box(const char *provider, const char *id, const char *status, const char *mode,
                      int64_t created_at, int64_t last_active_at)
{
        return (ab_box_rec){.provider = S(provider),
                            .id = S(id),
                            .backend_id = S(id),
                            .status = ab_box_status_parse(status),
                            .mode = ab_box_mode_parse(mode),
                            .created_at = created_at,
                            .last_active_at = last_active_at};
}

static int insert(ab_store *s, ab_box_rec r)
{
        ab_err *e = NULL;
        int ret = ab_store_box_insert(s, &r, &e);
        if (e)
                tap_diag("  insert %s/%s: %s", r.provider, r.id, e->msg);
        ab_err_free(&e);
        return ret;
}

/* The ids of a list, joined by commas ("" when empty), for one-line checks. */
static char *ids(const ab_box_rec *r, size_t n)
{
        char *s = xstrdup("");
        for (size_t i = 0; i < n; i++) {
                char *t = xasprintf("%s%s%s", s, i ? "," : "", r[i].id);
                free(s);
                s = t;
        }
        return s;
}

static char *list_ids(ab_store *s, ab_box_filter f)
{
        ab_box_rec *r = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        if (ab_store_box_list(s, &f, &r, &n, &e) < 0) {
                tap_diag("  list: %s", e->msg);
                ab_err_free(&e);
                return xstrdup("(error)");
        }
        char *out = ids(r, n);
        ab_box_recs_free(r, n);
        return out;
}

static char *idle_ids_of(ab_store *s, const char *provider, ab_idle_kind kind, int64_t now,
                         int64_t dflt)
{
        ab_box_rec *r = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        if (ab_store_box_list_idle(s, provider, kind, now, dflt, &r, &n, &e) < 0) {
                tap_diag("  list idle: %s", e->msg);
                ab_err_free(&e);
                return xstrdup("(error)");
        }
        char *out = ids(r, n);
        ab_box_recs_free(r, n);
        return out;
}

/* ---- the suite ---- */

/* Several processes open the same fresh database at the same moment: the
 * migration lock makes them take turns, none fails. */
static void test_concurrent_fresh_open(const target *t)
{
        enum { N = 4 };
        int go[2];
        if (pipe(go) < 0)
                abort();
        pid_t pids[N];
        for (int i = 0; i < N; i++) {
                pids[i] = fork();
                if (pids[i] == 0) {
                        close(go[1]);
                        char c;
                        (void)!read(go[0], &c, 1); /* EOF = go */
                        ab_store *s = NULL;
                        ab_err *e = NULL;
                        int v = 0;
                        int r = ab_store_open(t->url, NULL, &s, &e);
                        if (r == 0)
                                r = ab_store_schema_version(s, &v, &e);
                        if (e)
                                fprintf(stderr, "child %d: %s\n", i, e->msg);
                        ab_err_free(&e);
                        ab_store_close(s);
                        _exit(r == 0 && v >= 1 ? 0 : 1);
                }
        }
        close(go[0]);
        close(go[1]);
        int good = 0;
        for (int i = 0; i < N; i++) {
                int st = 0;
                waitpid(pids[i], &st, 0);
                good += WIFEXITED(st) && WEXITSTATUS(st) == 0;
        }
        is_int(good, N, "%d processes opening a fresh database at once all succeed", N);
}

/* Another handle holds the database's write lock (SQLite: BEGIN IMMEDIATE;
 * PostgreSQL: the migration's advisory lock): opening a database whose
 * schema is current must not wait for it (a CLI exec opens the store every
 * time). The open runs in a child that an alarm ends after 3 s (SQLite would
 * wait 5 s for the lock, PostgreSQL forever). */
static void test_open_while_locked(const target *t)
{
        bool lite = strcmp(t->kind, "sqlite") == 0;
        sqlite3 *db = NULL;
        PGconn *pg = NULL;
        bool locked = false;
        if (lite) {
                locked =
                    sqlite3_open_v2(t->url + 7, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
                    sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
        } else {
                pg = PQconnectdb(t->url);
                PGresult *r =
                    PQexec(pg, "BEGIN; SELECT pg_advisory_xact_lock(7215470930366857001)");
                locked = PQresultStatus(r) == PGRES_TUPLES_OK;
                PQclear(r);
        }
        ok(locked, "another handle holds the write lock");
        pid_t pid = fork();
        if (pid == 0) {
                alarm(3);
                ab_store *s = NULL;
                ab_err *e = NULL;
                int r = ab_store_open(t->url, NULL, &s, &e);
                if (e)
                        fprintf(stderr, "open: %s\n", e->msg);
                ab_store_close(s);
                _exit(r == 0 ? 0 : 1);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
           "a database at the latest schema opens without waiting for the write lock");
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
                tap_diag("  the open %s", WIFSIGNALED(st) ? "waited 3 s (alarm)" : "failed");
        if (lite) {
                sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
                sqlite3_close(db);
        } else {
                PQclear(PQexec(pg, "ROLLBACK"));
                PQfinish(pg);
        }
}

/* Undoes versions 8 (the keys-by-app index), 7 (file metadata) and 6 (the
 * fleet's table and column). */
static bool undo_v6(const target *t)
{
        return raw(t, "DROP INDEX api_keys_app", NULL) == 0 &&
               raw(t, "DELETE FROM schema_migrations WHERE version >= 8", NULL) == 0 &&
               raw(t, "DROP TABLE file_meta", NULL) == 0 &&
               raw(t, "DELETE FROM schema_migrations WHERE version >= 7", NULL) == 0 &&
               raw(t, "DROP TABLE nodes", NULL) == 0 &&
               raw(t, "DROP INDEX boxes_node", NULL) == 0 &&
               raw(t, "ALTER TABLE boxes DROP COLUMN node", NULL) == 0 &&
               raw(t, "DELETE FROM schema_migrations WHERE version >= 6", NULL) == 0;
}

/* Takes a database back to version 4: versions 6 (the fleet's) and 5 (the
 * chat tables) undone. */
static bool undo_v5(const target *t)
{
        return undo_v6(t) && raw(t, "DROP TABLE chat_messages", NULL) == 0 &&
               raw(t, "DROP TABLE chat_sessions", NULL) == 0 &&
               raw(t, "DELETE FROM schema_migrations WHERE version >= 5", NULL) == 0;
}

static void test_migrations(const target *t)
{
        ab_err *e = NULL;
        ab_store *s = open_store(t, "first");
        if (!s)
                return;
        is_str(ab_store_kind(s), t->kind, "kind");
        int v = 0, v2 = 0;
        no_err(ab_store_schema_version(s, &v, &e), &e, "schema version");
        ok(v >= 1, "schema version is at least 1 (got %d)", v);
        ab_store_close(s);
        is_int(raw_num(t, "SELECT COUNT(*) FROM schema_migrations"), v,
               "one schema_migrations row per version");

        s = open_store(t, "again");
        no_err(ab_store_schema_version(s, &v2, &e), &e, "schema version after reopen");
        is_int(v2, v, "reopening does not migrate again");
        ab_store_close(s);
        is_int(raw_num(t, "SELECT COUNT(*) FROM schema_migrations"), v,
               "still one row per version after reopen");

        ok(raw(t, "INSERT INTO schema_migrations (version, applied_at) VALUES (999, 0)", NULL) == 0,
           "pretend a newer agentbox migrated the database");
        s = NULL;
        is_err(ab_store_open(t->url, NULL, &s, &e), &e, AB_E_CONFLICT, "999",
               "a database with a newer schema is refused");
        ok(s == NULL, "no handle on refusal");
        ok(raw(t, "DELETE FROM schema_migrations WHERE version = 999", NULL) == 0,
           "back to the known version");
        s = open_store(t, "after the newer version is gone");
        ab_store_close(s);

        /* A database of version 4 with a box: versions 5 and 6 add the chat
         * tables and the fleet's nodes, and the box has no owner node. */
        ok(undo_v5(t) &&
               raw(t,
                   "INSERT INTO boxes (provider, id, backend_id, status, mode, created_at, "
                   "last_active_at) VALUES ('native', 'v4box', 'v4box', 'stopped', 'session', 1, "
                   "1)",
                   NULL) == 0,
           "make a version 4 database with a box");
        s = open_store(t, "a version 4 database");
        if (s) {
                no_err(ab_store_schema_version(s, &v2, &e), &e, "schema version after migration");
                ok(v2 >= 6, "migrated to version 6 or later (%d)", v2);
                ab_box_rec r = {0};
                no_err(ab_store_box_get(s, "native", "v4box", &r, &e), &e, "the box is there");
                ok(r.node == NULL, "... owned by no node");
                ab_box_rec_clear(&r);
                raw(t, "DELETE FROM boxes", NULL);
                ab_store_close(s);
        }

        /* A database of version 2 with a key: version 3 adds the keys' quotas. */
        ok(undo_v5(t) && raw(t, "ALTER TABLE api_keys DROP COLUMN quotas", NULL) == 0 &&
               raw(t, "DROP INDEX boxes_keys", NULL) == 0 &&
               raw(t, "DROP INDEX boxes_thread", NULL) == 0 &&
               raw(t, "DELETE FROM schema_migrations WHERE version >= 3", NULL) == 0 &&
               raw(t,
                   "INSERT INTO api_keys (key_id, key_hash, app_id, name, created_at) "
                   "VALUES ('k_old', 'hash_old', 'app_old', NULL, 5)",
                   NULL) == 0,
           "make a version 2 database with a key");
        s = open_store(t, "a version 2 database");
        if (s) {
                no_err(ab_store_schema_version(s, &v2, &e), &e, "schema version after migration");
                ok(v2 >= 3, "migrated to version 3 or later (%d)", v2);
                ab_api_key k;
                no_err(ab_store_key_get(s, "k_old", &k, &e), &e, "the old key is still there");
                ok(k.app_id && !strcmp(k.app_id, "app_old") && !k.has_quotas,
                   "... with no quotas of its own");
                ab_api_key_clear(&k);
                raw(t, "DELETE FROM api_keys WHERE key_id = 'k_old'", NULL);
                ab_store_close(s);
        }

        /* A database of version 3 with boxes of the first id scheme: version 4
         * keeps them and allows one box per keys (of an app) from then on. */
        ok(undo_v5(t) && raw(t, "DROP INDEX boxes_keys", NULL) == 0 &&
               raw(t, "DROP INDEX boxes_thread", NULL) == 0 &&
               raw(t, "DELETE FROM schema_migrations WHERE version >= 4", NULL) == 0,
           "make a version 3 database");
        static const char *const old_rows[] = {
            /* keys (app1, u-1, c): sha256("app1-u-1-c")[:16] */
            "('native', 'o_keys', 'o_keys', 'app1', 'u-1', 'c', NULL)",
            /* thread t of app1, and an admin's thread u (first scheme: no app in the id) */
            "('native', 'o_thr', 'o_thr', 'app1', NULL, NULL, 't')",
            "('native', 'o_thr_adm', 'o_thr_adm', NULL, NULL, NULL, 'u')",
            /* explicit ids: no keys */
            "('native', 'o_x1', 'o_x1', 'app1', NULL, NULL, NULL)",
            "('native', 'o_x2', 'o_x2', 'app1', NULL, NULL, NULL)",
        };
        bool all = true;
        for (size_t i = 0; i < sizeof(old_rows) / sizeof(old_rows[0]); i++) {
                _cleanup_free_ char *q = xasprintf(
                    "INSERT INTO boxes (provider, id, backend_id, app_id, user_id, chat_id, "
                    "thread_id, status, mode, created_at, last_active_at) VALUES %.*s, 'stopped', "
                    "'session', 1, 1)",
                    (int)strlen(old_rows[i]) - 1, old_rows[i]);
                all &= raw(t, q, NULL) == 0;
        }
        ok(all, "with boxes of keys, of threads and of explicit ids");
        s = open_store(t, "a version 3 database with boxes");
        if (s) {
                no_err(ab_store_schema_version(s, &v2, &e), &e, "schema version after migration");
                ok(v2 >= 4, "migrated to version 4 or later (%d)", v2);
                ab_box_rec r = {0};
                no_err(ab_store_box_get(s, "native", "o_keys", &r, &e), &e,
                       "the box of keys is there by its old id");
                ok(r.app_id && !strcmp(r.app_id, "app1") && r.user_id &&
                       !strcmp(r.user_id, "u-1") && r.chat_id && !strcmp(r.chat_id, "c"),
                   "... with its keys");
                ab_box_rec_clear(&r);
                no_err(ab_store_box_get(s, "native", "o_thr_adm", &r, &e), &e,
                       "the admin's thread box is there");
                ab_box_rec_clear(&r);
                static const struct {
                        const char *row;
                        bool conflict;
                        const char *what;
                } more[] = {
                    {"('native', 'n1', 'n1', 'app1', 'u-1', 'c', NULL)", true,
                     "a second box of the same keys is a conflict"},
                    {"('native', 'n2', 'n2', 'app2', 'u-1', 'c', NULL)", false,
                     "the same user and chat of another app is not"},
                    {"('native', 'n3', 'n3', 'app1', 'u', '1-c', NULL)", false,
                     "nor keys the first scheme confused with them"},
                    {"('native', 'n4', 'n4', 'app1', NULL, NULL, 't')", true,
                     "a second box of app1's thread t is a conflict"},
                    {"('native', 'n5', 'n5', 'app2', NULL, NULL, 't')", false,
                     "app2's thread t is not"},
                    {"('native', 'n6', 'n6', NULL, NULL, NULL, 'u')", true,
                     "a second box of the admin's thread u is a conflict"},
                    {"('native', 'n7', 'n7', 'app1', NULL, NULL, 'u')", false,
                     "app1's thread u is not"},
                    {"('native', 'n8', 'n8', 'app1', NULL, NULL, NULL)", false,
                     "boxes of explicit ids are not limited"},
                };
                for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++) {
                        _cleanup_free_ char *q = xasprintf(
                            "INSERT INTO boxes (provider, id, backend_id, app_id, user_id, "
                            "chat_id, thread_id, status, mode, created_at, last_active_at) VALUES "
                            "%.*s, 'stopped', 'session', 1, 1)",
                            (int)strlen(more[i].row) - 1, more[i].row);
                        ok((raw(t, q, NULL) != 0) == more[i].conflict, "%s", more[i].what);
                }
                raw(t, "DELETE FROM boxes", NULL);
                ab_store_close(s);
        }

        if (strcmp(t->kind, "sqlite") == 0) {
                _cleanup_free_ char *mode = NULL;
                raw(t, "PRAGMA journal_mode", &mode);
                is_str(mode, "wal", "journal mode is WAL");
                struct stat st;
                ok(stat(t->url + 7, &st) == 0 && (st.st_mode & 0777) == 0600,
                   "the database file is private (0600)");
        }
}

static void test_boxes(ab_store *s)
{
        ab_err *e = NULL;
        ab_box_rec full = {.provider = S("native"),
                           .id = S("b1"),
                           .backend_id = S("be-b1"),
                           .app_id = S("app"),
                           .user_id = S("user"),
                           .chat_id = S("chat"),
                           .thread_id = S("thread"),
                           .status = AB_BOX_RUNNING,
                           .mode = AB_MODE_SESSION,
                           .created_at = 1700000000123,
                           .last_active_at = 1700000000456,
                           .idle_stop_s = 600,
                           .idle_pause_s = 45,
                           .ttl_s = -1,
                           .has_limits = true,
                           .limits = {.cpus = 0.5,
                                      .memory_mib = 256,
                                      .pids = 64,
                                      .disk_mib = 512,
                                      .timeout_s = 30},
                           .spec = json_pack("{s:{s:s}}", "env", "A", "b 'c' \"d\""),
                           .metadata = json_pack("{s:s}", "k", "v"),
                           .error = S("none; DROP TABLE boxes; --")};
        no_err(ab_store_box_insert(s, &full, &e), &e, "insert a full record");
        ab_box_rec g;
        no_err(ab_store_box_get(s, "native", "b1", &g, &e), &e, "get it");
        is_str(g.provider, "native", "provider");
        is_str(g.id, "b1", "id");
        is_str(g.backend_id, "be-b1", "backend_id");
        ok(g.app_id && g.user_id && g.chat_id && g.thread_id && !strcmp(g.app_id, "app") &&
               !strcmp(g.user_id, "user") && !strcmp(g.chat_id, "chat") &&
               !strcmp(g.thread_id, "thread"),
           "acquire keys round-trip");
        ok(g.status == AB_BOX_RUNNING, "status");
        ok(g.mode == AB_MODE_SESSION, "mode");
        is_int(g.created_at, 1700000000123, "created_at");
        is_int(g.last_active_at, 1700000000456, "last_active_at");
        is_int(g.idle_stop_s, 600, "idle_stop_s");
        is_int(g.idle_pause_s, 45, "idle_pause_s");
        is_int(g.ttl_s, -1, "ttl_s");
        ok(g.has_limits && g.limits.cpus == 0.5 && g.limits.memory_mib == 256 &&
               g.limits.pids == 64 && g.limits.disk_mib == 512 && g.limits.timeout_s == 30,
           "limits round-trip, typed");
        ok(json_equal(g.spec, full.spec), "spec round-trip (quotes and all)");
        ok(json_equal(g.metadata, full.metadata), "metadata round-trip");
        is_str(g.error, full.error, "error text is data, not SQL");
        ab_box_rec_clear(&g);
        ok(g.id == NULL, "clear leaves an empty record");

        is_err(ab_store_box_insert(s, &full, &e), &e, AB_E_CONFLICT, "insert box native/b1",
               "inserting the same (provider, id) again is a conflict naming the operation");
        full.provider = S("other");
        no_err(ab_store_box_insert(s, &full, &e), &e, "the same id under another provider is fine");
        ab_box_rec bad = box("native", "bad", NULL, "session", 1, 1);
        is_err(ab_store_box_insert(s, &bad, &e), &e, AB_E_INVALID, NULL,
               "a record without status is invalid");

        /* NULL optional fields stay NULL (not ""). */
        ab_box_rec min = {.provider = S("native"),
                          .id = S("b2"),
                          .status = AB_BOX_CREATING,
                          .mode = AB_MODE_TASK,
                          .created_at = 5,
                          .last_active_at = 6};
        no_err(ab_store_box_insert(s, &min, &e), &e, "insert a minimal record");
        no_err(ab_store_box_get(s, "native", "b2", &g, &e), &e, "get it");
        ok(!g.backend_id && !g.app_id && !g.user_id && !g.chat_id && !g.thread_id &&
               !g.has_limits && !g.spec && !g.metadata && !g.error,
           "absent optional fields come back NULL");
        ok(g.idle_stop_s == 0 && g.idle_pause_s == 0 && g.ttl_s == 0, "zero numbers round-trip");
        ab_box_rec_clear(&g);

        /* Update replaces every column, NULLs included. */
        ab_box_rec up = full;
        up.provider = S("native");
        up.backend_id = S("be-new");
        up.status = AB_BOX_STOPPED;
        up.chat_id = NULL;
        up.metadata = NULL;
        up.error = NULL;
        up.last_active_at = 42;
        no_err(ab_store_box_update(s, &up, &e), &e, "update");
        no_err(ab_store_box_get(s, "native", "b1", &g, &e), &e, "get after update");
        ok(g.status == AB_BOX_STOPPED && g.backend_id && !strcmp(g.backend_id, "be-new") &&
               !g.chat_id && !g.metadata && !g.error && g.last_active_at == 42 && g.app_id &&
               !strcmp(g.app_id, "app"),
           "update replaced the columns (NULLs too)");
        ab_box_rec_clear(&g);
        up.id = S("nope");
        is_err(ab_store_box_update(s, &up, &e), &e, AB_E_NOT_FOUND, NULL,
               "updating an absent record is not_found");
        is_err(ab_store_box_get(s, "native", "nope", &g, &e), &e, AB_E_NOT_FOUND, "nope",
               "getting an absent record is not_found");
        is_err(ab_store_box_get(s, "nope", "b1", &g, &e), &e, AB_E_NOT_FOUND, NULL,
               "the provider is part of the key");

        /* touch */
        no_err(ab_store_box_touch(s, "native", "b1", 1000, &e), &e, "touch forward");
        no_err(ab_store_box_touch(s, "native", "b1", 500, &e), &e, "touch backward");
        no_err(ab_store_box_get(s, "native", "b1", &g, &e), &e, "get after touches");
        is_int(g.last_active_at, 1000, "an older touch never moves last_active_at back");
        ab_box_rec_clear(&g);
        is_err(ab_store_box_touch(s, "native", "nope", 1, &e), &e, AB_E_NOT_FOUND, NULL,
               "touching an absent record is not_found");

        /* exec_done: the activity and the audit row in one commit */
        ab_exec_audit done = {.provider = S("native"),
                              .box_id = S("b1"),
                              .command = S("done-cmd"),
                              .exit_code = 3,
                              .started_at = 1500,
                              .duration_ms = 4};
        no_err(ab_store_exec_done(s, &done, 2000, &e), &e, "exec_done");
        no_err(ab_store_box_get(s, "native", "b1", &g, &e), &e, "get after exec_done");
        is_int(g.last_active_at, 2000, "exec_done moves last_active_at");
        ab_box_rec_clear(&g);
        no_err(ab_store_exec_done(s, &done, 1200, &e), &e, "exec_done, older");
        no_err(ab_store_box_get(s, "native", "b1", &g, &e), &e, "get after an older exec_done");
        is_int(g.last_active_at, 2000, "... never moves it back");
        ab_box_rec_clear(&g);
        ab_exec_audit *da = NULL;
        size_t dn = 0;
        no_err(ab_store_audit_list(s, "native", "b1", 10, &da, &dn, &e), &e, "audit of b1");
        ok(dn == 2 && !strcmp(da[0].command, "done-cmd") && da[0].exit_code == 3 &&
               da[0].duration_ms == 4,
           "exec_done wrote its audit rows");
        ab_exec_audits_free(da, dn);
        done.box_id = S("nope");
        no_err(ab_store_exec_done(s, &done, 1, &e), &e, "exec_done of a box that is gone");
        no_err(ab_store_audit_list(s, "native", "nope", 10, &da, &dn, &e), &e, "audit of nope");
        is_int(dn, 1, "... records its row");
        ab_exec_audits_free(da, dn);
        done.command = NULL;
        is_err(ab_store_exec_done(s, &done, 1, &e), &e, AB_E_INVALID, NULL,
               "exec_done without a command is invalid");

        /* set_status: plain, compare-and-set, errors */
        no_err(ab_store_box_set_status(s, "native", "b1", AB_BOX_RUNNING, AB_BOX_STOPPED, NULL, &e),
               &e, "CAS stopped -> running");
        is_err(
            ab_store_box_set_status(s, "native", "b1", AB_BOX_DELETING, AB_BOX_STOPPED, NULL, &e),
            &e, AB_E_CONFLICT, "running",
            "CAS from the wrong status is a conflict naming the status");
        no_err(ab_store_box_get(s, "native", "b1", &g, &e), &e, "get after failed CAS");
        ok(g.status == AB_BOX_RUNNING, "a failed CAS changes nothing");
        ab_box_rec_clear(&g);
        no_err(ab_store_box_set_status(s, "native", "b1", AB_BOX_ERROR, 0, "disk full", &e), &e,
               "set error status with a reason");
        no_err(ab_store_box_get(s, "native", "b1", &g, &e), &e, "get");
        ok(g.status == AB_BOX_ERROR && g.error && !strcmp(g.error, "disk full"),
           "status and error set");
        ab_box_rec_clear(&g);
        no_err(ab_store_box_set_status(s, "native", "b1", AB_BOX_RUNNING, AB_BOX_ERROR, NULL, &e),
               &e, "CAS error -> running clearing the reason");
        no_err(ab_store_box_get(s, "native", "b1", &g, &e), &e, "get");
        ok(g.status == AB_BOX_RUNNING && !g.error, "a NULL error clears it");
        ab_box_rec_clear(&g);
        is_err(
            ab_store_box_set_status(s, "native", "nope", AB_BOX_RUNNING, AB_BOX_STOPPED, NULL, &e),
            &e, AB_E_NOT_FOUND, NULL, "CAS on an absent record is not_found");
        is_err(ab_store_box_set_status(s, "native", "nope", AB_BOX_RUNNING, 0, NULL, &e), &e,
               AB_E_NOT_FOUND, NULL, "set_status on an absent record is not_found");

        /* delete */
        no_err(ab_store_box_delete(s, "native", "b2", &e), &e, "delete");
        is_err(ab_store_box_get(s, "native", "b2", &g, &e), &e, AB_E_NOT_FOUND, NULL,
               "gone after delete");
        is_err(ab_store_box_delete(s, "native", "b2", &e), &e, AB_E_NOT_FOUND, NULL,
               "deleting twice is not_found");
        no_err(ab_store_box_get(s, "other", "b1", &g, &e), &e,
               "the other provider's record is untouched");
        ab_box_rec_clear(&g);
        json_decref(full.spec);
        json_decref(full.metadata);
}

static void test_list(ab_store *s)
{
        struct {
                const char *id, *app, *user, *chat, *thread, *status, *mode;
                int64_t created;
        } rows[] = {
            {"l3", "a1", "u1", "c1", NULL, "running", "session", 30},
            {"l1", "a1", "u1", "c2", NULL, "stopped", "session", 10},
            {"l2", "a2", "u2", "c1", "t1", "running", "task", 20},
            {"l0", "a1", "u2", NULL, "t2", "running", "session", 20},
            {"l4", NULL, NULL, NULL, NULL, "running", "pool", 40},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++) {
                ab_box_rec r = box("list", rows[i].id, rows[i].status, rows[i].mode,
                                   rows[i].created, rows[i].created);
                r.app_id = S(rows[i].app);
                r.user_id = S(rows[i].user);
                r.chat_id = S(rows[i].chat);
                r.thread_id = S(rows[i].thread);
                insert(s, r);
        }
        insert(s, box("list-other", "x", "running", "session", 1, 1));
        struct {
                ab_box_filter f;
                const char *want, *name;
        } cases[] = {
            {{.provider = "list"}, "l1,l0,l2,l3,l4", "provider; by created_at then id"},
            {{.provider = "list", .app_id = "a1"}, "l1,l0,l3", "app_id"},
            {{.provider = "list", .user_id = "u2"}, "l0,l2", "user_id"},
            {{.provider = "list", .chat_id = "c1"}, "l2,l3", "chat_id"},
            {{.provider = "list", .thread_id = "t2"}, "l0", "thread_id"},
            {{.provider = "list", .status = AB_BOX_STOPPED}, "l1", "status"},
            {{.provider = "list", .mode = AB_MODE_POOL}, "l4", "mode"},
            {{.provider = "list", .app_id = "a1", .user_id = "u1", .chat_id = "c1"},
             "l3",
             "app_id + user_id + chat_id"},
            {{.provider = "list",
              .app_id = "a1",
              .status = AB_BOX_RUNNING,
              .mode = AB_MODE_SESSION},
             "l0,l3",
             "app_id + status + mode"},
            {{.provider = "list", .app_id = "zzz"}, "", "no match"},
            {{.app_id = "a2"}, "l2", "without a provider"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++) {
                _cleanup_free_ char *got = list_ids(s, cases[i].f);
                is_str(got, cases[i].want, "list by %s", cases[i].name);
        }
        ab_box_rec *r = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        no_err(ab_store_box_list(s, NULL, &r, &n, &e), &e, "list without a filter");
        ok(n >= 6, "a NULL filter lists everything (%zu)", n);
        ab_box_recs_free(r, n);

        /* pages in id order after a cursor: a walk over every box a few at a time */
        struct {
                ab_box_filter f;
                const char *want, *name;
        } pages[] = {
            {{.provider = "list", .limit = 2}, "l0,l1", "first page of 2, by id"},
            {{.provider = "list", .limit = 2, .after_id = "l1"}, "l2,l3", "the page after l1"},
            {{.provider = "list", .limit = 2, .after_id = "l3"}, "l4", "the last, short page"},
            {{.provider = "list", .limit = 2, .after_id = "l4"}, "", "past the end: empty"},
            {{.provider = "list", .status = AB_BOX_RUNNING, .limit = 10, .after_id = "l0"},
             "l2,l3,l4",
             "a page with a status filter"},
            {{.provider = "list", .after_id = "l2"},
             "l1,l0,l2,l3,l4",
             "no limit: the cursor is unused"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(pages); i++) {
                _cleanup_free_ char *got = list_ids(s, pages[i].f);
                is_str(got, pages[i].want, "list %s", pages[i].name);
        }
}

static char *expired_ids(ab_store *s, const char *provider, int64_t now)
{
        ab_box_rec *r = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        if (ab_store_box_list_expired(s, provider, now, &r, &n, &e) < 0) {
                tap_diag("  list expired: %s", e->msg);
                ab_err_free(&e);
                return xstrdup("(error)");
        }
        char *out = ids(r, n);
        ab_box_recs_free(r, n);
        return out;
}

/* TTLs: only boxes past created_at + ttl_s are listed, however large a TTL. */
static void test_expired(ab_store *s)
{
        const int64_t now = 1800000000000;
        struct {
                const char *id, *status, *mode;
                int64_t age_ms, ttl_s;
        } rows[] = {
            {"t-past", "running", "session", 61000, 60},
            {"t-edge", "running", "session", 60000, 60}, /* exactly at it: not yet */
            {"t-young", "stopped", "session", 1000, 60},
            {"t-none", "running", "session", 999999999, 0},
            {"t-huge", "running", "session", 999999999, INT64_MAX},
            {"t-pool", "running", "pool", 999999999, 1},
            {"t-deleting", "deleting", "session", 999999999, 1},
            {"t-stopped", "stopped", "task", 120000, 60},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++) {
                ab_box_rec r =
                    box("ttl", rows[i].id, rows[i].status, rows[i].mode, now - rows[i].age_ms, now);
                r.ttl_s = rows[i].ttl_s;
                insert(s, r);
        }
        insert(s, box("ttl-other", "o", "running", "session", 1, 0));
        _cleanup_free_ char *got = expired_ids(s, "ttl", now);
        is_str(got, "t-stopped,t-past",
               "expired: past their TTL, oldest first; none, huge, pool, deleting excluded");
        _cleanup_free_ char *later = expired_ids(s, "ttl", now + 1);
        is_str(later, "t-stopped,t-past,t-edge", "a millisecond later the edge has passed");
        int64_t next = -1;
        ab_err *e = NULL;
        no_err(ab_store_box_next_ttl_end(s, "ttl", NULL, now, &next, &e), &e, "next TTL end");
        is_int(next, now, "the next end: the edge's, now (huge, pool, deleting left out)");
        no_err(ab_store_box_next_ttl_end(s, "ttl", NULL, now + 1, &next, &e), &e, "next TTL end");
        is_int(next, now - 1000 + 60000, "after it, the young box's end");
        no_err(ab_store_box_next_ttl_end(s, "ttl", "n1", now + 1, &next, &e), &e, "of a node");
        is_int(next, 0, "... a node with no boxes has none");
        no_err(ab_store_box_next_ttl_end(s, "none", NULL, now, &next, &e), &e, "no boxes");
        is_int(next, 0, "no TTL at all: 0");
}

/* The box generation moves with every insert, update, status change and
 * delete, and not with a touch. */
static void test_gen(ab_store *s)
{
        ab_err *e = NULL;
        uint64_t g0 = ab_store_box_gen(s);
        insert(s, box("gen", "g1", "running", "session", 1, 1));
        uint64_t g1 = ab_store_box_gen(s);
        ok(g1 != g0, "an insert moves the generation");
        no_err(ab_store_box_touch(s, "gen", "g1", 5, &e), &e, "touch");
        ok(ab_store_box_gen(s) == g1, "a touch does not");
        no_err(ab_store_box_set_status(s, "gen", "g1", AB_BOX_STOPPED, 0, NULL, &e), &e, "status");
        uint64_t g2 = ab_store_box_gen(s);
        ok(g2 != g1, "a status change does");
        no_err(ab_store_box_delete(s, "gen", "g1", &e), &e, "delete");
        ok(ab_store_box_gen(s) != g2, "a delete does");
}

static char *idle_ids(ab_store *s, const char *provider, int64_t now, int64_t dflt)
{
        return idle_ids_of(s, provider, AB_IDLE_STOP, now, dflt);
}

static void test_idle(ab_store *s)
{
        const int64_t now = 1800000000000;
        struct {
                const char *id, *status, *mode;
                int64_t idle_ago_ms, idle_stop_s;
        } rows[] = {
            {"i-default", "running", "session", 301000, 0},   /* past the 300 s default */
            {"i-edge", "running", "session", 300000, 0},      /* exactly at it: not yet */
            {"i-oldest", "running", "task", 400000, 0},       /* past, and older */
            {"i-short", "running", "session", 61000, 60},     /* own 60 s passed */
            {"i-long", "running", "session", 1000000, 3600},  /* own hour not passed */
            {"i-never", "running", "session", 999999999, -1}, /* never idles out */
            {"i-huge", "running", "session", 999999999, INT64_MAX},
            {"i-pool", "running", "pool", 999999999, 0},
            {"i-stopped", "stopped", "session", 999999999, 0},
            {"i-fresh", "running", "session", 0, 0},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++) {
                ab_box_rec r = box("idle", rows[i].id, rows[i].status, rows[i].mode, 1,
                                   now - rows[i].idle_ago_ms);
                r.idle_stop_s = rows[i].idle_stop_s;
                insert(s, r);
        }
        insert(s, box("idle-other", "o", "running", "session", 1, 0));
        _cleanup_free_ char *got = idle_ids(s, "idle", now, 300);
        is_str(got, "i-oldest,i-default,i-short",
               "idle: default and per-box deadlines, oldest first; never/pool/stopped excluded");
        _cleanup_free_ char *nodef = idle_ids(s, "idle", now, 0);
        is_str(nodef, "i-short", "idle with no server default: only boxes with their own");
        _cleanup_free_ char *later = idle_ids(s, "idle", now + 3600 * 1000, 300);
        is_str(later, "i-long,i-oldest,i-default,i-edge,i-short,i-fresh",
               "an hour later the long override has passed too");

        /* Paused boxes idle out (stop) like running ones; pausing looks at
         * running boxes and at idle_pause_s only. */
        struct {
                const char *id, *status;
                int64_t idle_ago_ms, idle_stop_s, idle_pause_s;
        } prow[] = {
            {"p-paused", "paused", 400000, 0, 0},   /* stop: past 300 s; pause: paused already */
            {"p-run", "running", 70000, 0, 0},      /* pause: past the 60 s default */
            {"p-own", "running", 20000, 0, 10},     /* pause: own 10 s passed */
            {"p-never", "running", 999999, -1, -1}, /* never pauses nor stops */
            {"p-late", "running", 70000, 0, 600},   /* own 600 s not passed */
            {"p-stopped", "stopped", 999999, 0, 0}, /* stopped: neither */
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(prow); i++) {
                ab_box_rec r =
                    box("pz", prow[i].id, prow[i].status, "session", 1, now - prow[i].idle_ago_ms);
                r.idle_stop_s = prow[i].idle_stop_s;
                r.idle_pause_s = prow[i].idle_pause_s;
                insert(s, r);
        }
        _cleanup_free_ char *stop = idle_ids_of(s, "pz", AB_IDLE_STOP, now, 300);
        is_str(stop, "p-paused", "idle stop: a paused box past its deadline qualifies");
        _cleanup_free_ char *pause = idle_ids_of(s, "pz", AB_IDLE_PAUSE, now, 60);
        is_str(pause, "p-run,p-own",
               "idle pause: running boxes past their own or the default pause deadline");
        _cleanup_free_ char *pnodef = idle_ids_of(s, "pz", AB_IDLE_PAUSE, now, 0);
        is_str(pnodef, "p-own", "idle pause with no server default: only boxes with their own");
}

static void test_count(ab_store *s)
{
        const char *st[] = {"running", "stopped", "running", "error"};
        for (size_t i = 0; i < AB_ARRAY_LEN(st); i++) {
                char id[8];
                snprintf(id, sizeof(id), "n%zu", i);
                insert(s, box("count", id, st[i], "session", 1, 1));
        }
        char **names = NULL;
        int64_t *counts = NULL;
        size_t n = 0;
        ab_err *e = NULL;
        no_err(ab_store_box_count_by_status(s, "count", &names, &counts, &n, &e), &e,
               "count by status");
        is_int(n, 3, "three statuses");
        if (n == 3) {
                ok(!strcmp(names[0], "error") && counts[0] == 1 && !strcmp(names[1], "running") &&
                       counts[1] == 2 && !strcmp(names[2], "stopped") && counts[2] == 1,
                   "error 1, running 2, stopped 1");
        }
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
        free(counts);
        no_err(ab_store_box_count_by_status(s, "count-none", &names, &counts, &n, &e), &e,
               "count for a provider without boxes");
        ok(n == 0 && !names && !counts, "nothing to count");
}

struct claimer {
        ab_store *s;
        char id[16];
        int r;
        char *backend_id;
        char *err;
};

static void *claim_thread(void *p)
{
        struct claimer *c = p;
        ab_box_rec r = box("race", c->id, "running", "session", 100, 100);
        r.backend_id = NULL;
        ab_err *e = NULL;
        c->r = ab_store_pool_claim(c->s, &r, &e);
        c->backend_id = r.backend_id;
        if (e)
                c->err = xstrdup(e->msg);
        ab_err_free(&e);
        return NULL;
}

static void test_pool(const target *t, ab_store *s, ab_store *s2)
{
        ab_err *e = NULL;
        ab_box_rec c = box("pool", "c1", "running", "session", 100, 100);
        c.app_id = S("app");
        c.backend_id = xstrdup("mine");
        is_int(ab_store_pool_claim(s, &c, &e), 0, "claim from an empty pool gives 0");
        ab_err_free(&e);
        is_str(c.backend_id, "mine", "and leaves backend_id alone");

        insert(s, box("pool", "p2", "running", "pool", 20, 20));
        insert(s, box("pool", "p1", "running", "pool", 10, 10));
        insert(s, box("pool", "p-stopped", "stopped", "pool", 1, 1));
        insert(s, box("pool-other", "q", "running", "pool", 1, 1));
        insert(s, box("pool", "s1", "running", "session", 1, 1));
        is_int(ab_store_pool_claim(s, &c, &e), 1, "claim takes a pooled box");
        ab_err_free(&e);
        is_str(c.backend_id, "p1", "the oldest pooled box's backend_id moves to the claim");
        free(c.backend_id);
        ab_box_rec g;
        no_err(ab_store_box_get(s, "pool", "c1", &g, &e), &e, "the claimed record exists");
        ok(g.mode == AB_MODE_SESSION && g.app_id && !strcmp(g.app_id, "app") && g.backend_id &&
               !strcmp(g.backend_id, "p1"),
           "with the claim's fields and the pooled backend_id");
        ab_box_rec_clear(&g);
        is_err(ab_store_box_get(s, "pool", "p1", &g, &e), &e, AB_E_NOT_FOUND, NULL,
               "the pooled record is gone");

        c.id = S("s1");
        c.backend_id = NULL;
        is_err(ab_store_pool_claim(s, &c, &e), &e, AB_E_CONFLICT, "s1",
               "claiming for an id that exists is a conflict");
        ok(c.backend_id == NULL, "and leaves the claim alone");
        _cleanup_free_ char *left =
            list_ids(s, (ab_box_filter){.provider = "pool", .mode = AB_MODE_POOL});
        is_str(left, "p-stopped,p2", "the pool is intact after the conflict");

        c.id = S("c2");
        is_int(ab_store_pool_claim(s, &c, &e), 1, "claim the last running pooled box");
        ab_err_free(&e);
        free(c.backend_id);
        c.id = S("c3");
        c.backend_id = NULL;
        is_int(ab_store_pool_claim(s, &c, &e), 0, "a stopped pooled box is never claimed");
        ab_err_free(&e);

        /* 8 threads on four handles (as if four processes, two threads each)
         * race for 5 boxes. */
        enum { POOL = 5, THREADS = 8 };
        ab_store *h[4] = {s, s2, open_store(t, "third handle"), open_store(t, "fourth handle")};
        if (!h[2] || !h[3]) {
                ab_store_close(h[2]);
                ab_store_close(h[3]);
                return;
        }
        for (int i = 0; i < POOL; i++) {
                char id[8];
                snprintf(id, sizeof(id), "r%d", i);
                ab_box_rec r = box("race", id, "running", "pool", 10 + i, 10 + i);
                r.backend_id = S(id);
                insert(s, r);
        }
        struct claimer cl[THREADS];
        pthread_t th[THREADS];
        for (int i = 0; i < THREADS; i++) {
                cl[i] = (struct claimer){.s = h[i % 4]};
                snprintf(cl[i].id, sizeof(cl[i].id), "t%d", i);
                pthread_create(&th[i], NULL, claim_thread, &cl[i]);
        }
        int got = 0, empty = 0, bad = 0;
        for (int i = 0; i < THREADS; i++)
                pthread_join(th[i], NULL);
        ab_store_close(h[2]);
        ab_store_close(h[3]);
        for (int i = 0; i < THREADS; i++) {
                if (cl[i].r == 1)
                        got++;
                else if (cl[i].r == 0)
                        empty++;
                else
                        bad++, tap_diag("  claim %s: %s", cl[i].id, cl[i].err);
        }
        is_int(got, POOL, "%d threads: %d claims succeed", THREADS, POOL);
        is_int(empty, THREADS - POOL, "and %d find the pool empty", THREADS - POOL);
        is_int(bad, 0, "and none fails");
        int distinct = 1;
        for (int i = 0; i < THREADS; i++)
                for (int j = i + 1; j < THREADS; j++)
                        if (cl[i].backend_id && cl[j].backend_id &&
                            !strcmp(cl[i].backend_id, cl[j].backend_id))
                                distinct = 0;
        ok(distinct, "no pooled box is claimed twice");
        for (int i = 0; i < THREADS; i++) {
                free(cl[i].backend_id);
                free(cl[i].err);
        }
        _cleanup_free_ char *pool_left =
            list_ids(s, (ab_box_filter){.provider = "race", .mode = AB_MODE_POOL});
        is_str(pool_left, "", "the pool is empty");
        ab_box_rec *r = NULL;
        size_t n = 0;
        no_err(ab_store_box_list(s, &(ab_box_filter){.provider = "race"}, &r, &n, &e), &e,
               "list the claimed boxes");
        is_int(n, POOL, "%d claimed records", POOL);
        ab_box_recs_free(r, n);
}

static void test_audit(ab_store *s)
{
        ab_err *e = NULL;
        struct {
                const char *box, *cmd;
                int exit_code;
                bool timed_out;
                int64_t started;
        } rows[] = {
            {"a", "echo 1", 0, false, 100},     {"a", "echo 2", 1, false, 200},
            {"b", "other", 0, false, 250},      {"a", "sleep 9", 137, true, 300},
            {"a", "same time", -1, false, 300}, {"a", "echo 0", 0, false, 50},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++) {
                ab_exec_audit a = {.provider = S("native"),
                                   .box_id = S(rows[i].box),
                                   .command = S(rows[i].cmd),
                                   .exit_code = rows[i].exit_code,
                                   .timed_out = rows[i].timed_out,
                                   .started_at = rows[i].started,
                                   .duration_ms = 7,
                                   .stdout_bytes = 5000000000LL,
                                   .stderr_bytes = 3};
                no_err(ab_store_audit_add(s, &a, &e), &e, "audit add %s", rows[i].cmd);
        }
        ab_exec_audit *a = NULL;
        size_t n = 0;
        no_err(ab_store_audit_list(s, "native", "a", 3, &a, &n, &e), &e, "audit list, limit 3");
        is_int(n, 3, "limit honoured");
        if (n == 3) {
                ok(!strcmp(a[0].command, "same time") && !strcmp(a[1].command, "sleep 9") &&
                       !strcmp(a[2].command, "echo 2"),
                   "newest first; equal times newest-added first");
                ok(a[1].timed_out && a[1].exit_code == 137 && a[0].exit_code == -1 &&
                       !a[0].timed_out,
                   "exit code and timeout round-trip");
                ok(a[1].started_at == 300 && a[1].duration_ms == 7 &&
                       a[1].stdout_bytes == 5000000000LL && a[1].stderr_bytes == 3 &&
                       !strcmp(a[1].provider, "native") && !strcmp(a[1].box_id, "a"),
                   "numbers past 32 bits and names round-trip");
        }
        ab_exec_audits_free(a, n);
        no_err(ab_store_audit_list(s, "native", "a", 100, &a, &n, &e), &e, "audit list all");
        is_int(n, 5, "all five of box a, none of box b");
        if (n == 5)
                is_str(a[4].command, "echo 0", "oldest last");
        ab_exec_audits_free(a, n);
        no_err(ab_store_audit_list(s, "native", "zzz", 10, &a, &n, &e), &e, "audit of no box");
        ok(n == 0 && !a, "empty");
        ab_exec_audit bad = {.provider = S("native"), .box_id = S("a")};
        is_err(ab_store_audit_add(s, &bad, &e), &e, AB_E_INVALID, NULL,
               "an audit without a command is invalid");
}

static void test_keys(ab_store *s)
{
        ab_err *e = NULL;
        ab_api_key k1 = {
            .key_id = S("k_1"), .key_hash = S("hash1"), .app_id = S("app1"), .created_at = 20};
        ab_api_key k2 = {.key_id = S("k_2"),
                         .key_hash = S("hash2"),
                         .app_id = S("app2"),
                         .name = S("ci"),
                         .created_at = 10,
                         .has_quotas = true};
        ab_quota_unset(&k2.quotas);
        k2.quotas.max_boxes = 3;
        k2.quotas.exec_rate = 1.5;
        no_err(ab_store_key_insert(s, &k1, &e), &e, "insert key 1 (no name)");
        no_err(ab_store_key_insert(s, &k2, &e), &e, "insert key 2");
        ab_api_key dup = k1;
        dup.key_hash = S("hash3");
        is_err(ab_store_key_insert(s, &dup, &e), &e, AB_E_CONFLICT, NULL,
               "a duplicate key_id is a conflict");
        dup = k2;
        dup.key_id = S("k_3");
        is_err(ab_store_key_insert(s, &dup, &e), &e, AB_E_CONFLICT, NULL,
               "a duplicate hash is a conflict");
        ab_api_key f;
        no_err(ab_store_key_find(s, "hash1", &f, &e), &e, "find by hash");
        ok(f.key_id && !strcmp(f.key_id, "k_1") && !strcmp(f.app_id, "app1") &&
               !strcmp(f.key_hash, "hash1") && !f.name && f.created_at == 20,
           "the key round-trips, NULL name included");
        ok(!f.has_quotas, "a key inserted without quotas has none");
        ab_api_key_clear(&f);
        no_err(ab_store_key_get(s, "k_2", &f, &e), &e, "get by key_id");
        ok(f.has_quotas && f.quotas.max_boxes == 3 && f.quotas.exec_rate == 1.5 &&
               f.quotas.max_running == AB_QUOTA_INHERIT,
           "the key's quotas round-trip (unset fields stay unset)");
        ab_api_key_clear(&f);
        is_err(ab_store_key_get(s, "k_nope", &f, &e), &e, AB_E_NOT_FOUND, NULL,
               "an unknown key_id is not_found");
        is_err(ab_store_key_find(s, "nope", &f, &e), &e, AB_E_NOT_FOUND, NULL,
               "an unknown hash is not_found");
        ab_api_key *l = NULL;
        size_t n = 0;
        no_err(ab_store_key_list(s, &l, &n, &e), &e, "list keys");
        ok(n == 2 && !strcmp(l[0].key_id, "k_2") && !strcmp(l[0].name, "ci") &&
               !strcmp(l[1].key_id, "k_1"),
           "both keys, oldest first");
        ab_api_keys_free(l, n);
        no_err(ab_store_key_list_app(s, "app1", &l, &n, &e), &e, "list the keys of app1");
        ok(n == 1 && !strcmp(l[0].key_id, "k_1") && !strcmp(l[0].app_id, "app1"),
           "the keys of one app: only its own");
        ab_api_keys_free(l, n);
        no_err(ab_store_key_list_app(s, "app3", &l, &n, &e), &e, "list the keys of app3");
        ok(n == 0 && !l, "an app without keys: none");
        no_err(ab_store_key_list_app(s, NULL, &l, &n, &e), &e, "list the keys of no app");
        ok(n == 0 && !l, "no app (the admin's boxes): no keys");
        no_err(ab_store_key_delete(s, "k_1", &e), &e, "delete key 1");
        is_err(ab_store_key_delete(s, "k_1", &e), &e, AB_E_NOT_FOUND, NULL,
               "deleting it again is not_found");
        is_err(ab_store_key_find(s, "hash1", &f, &e), &e, AB_E_NOT_FOUND, NULL,
               "a deleted key is not found");
        no_err(ab_store_key_list(s, &l, &n, &e), &e, "list keys");
        ok(n == 1 && !strcmp(l[0].key_id, "k_2"), "one key left");
        ab_api_keys_free(l, n);
}

struct racer {
        ab_store *s;
        pthread_barrier_t *bar;
        const char *id;
        int r;
        ab_code code;
};

static void *insert_thread(void *p)
{
        struct racer *x = p;
        ab_box_rec r = box("dup", x->id, "creating", "session", 1, 1);
        ab_err *e = NULL;
        pthread_barrier_wait(x->bar);
        x->r = ab_store_box_insert(x->s, &r, &e);
        x->code = e ? e->code : 0;
        ab_err_free(&e);
        return NULL;
}

static void test_chat(ab_store *s)
{
        ab_err *e = NULL;
        no_err(ab_store_chat_session_insert(s, "app1", "t1", &e), &e, "chat: a session");
        no_err(ab_store_chat_session_insert(s, NULL, "t1", &e), &e,
               "chat: the admin's session of the same id");
        is_err(ab_store_chat_session_insert(s, "app1", "t1", &e), &e, AB_E_CONFLICT, "t1",
               "chat: the same session twice is a conflict");
        no_err(ab_store_chat_session_get(s, "app1", "t1", &e), &e, "chat: the session is there");
        is_err(ab_store_chat_session_get(s, "app2", "t1", &e), &e, AB_E_NOT_FOUND, "t1",
               "chat: another app does not see it");
        const char *roles[] = {"user", "assistant"};
        const char *msgs[] = {"{\"role\":\"user\",\"content\":\"a\"}",
                              "{\"role\":\"assistant\",\"content\":\"b\"}"};
        no_err(ab_store_chat_append(s, "app1", "t1", roles, msgs, 2, &e), &e, "chat: append two");
        const char *more[] = {"{\"role\":\"user\",\"content\":\"c\"}"};
        no_err(ab_store_chat_append(s, "app1", "t1", roles, more, 1, &e), &e, "chat: append one");
        char **v = NULL;
        size_t n = 0;
        no_err(ab_store_chat_history(s, "app1", "t1", 10, &v, &n, &e), &e, "chat: history");
        ok(n == 3 && strstr(v[0], "\"a\"") && strstr(v[2], "\"c\""), "chat: in order (%zu)", n);
        ab_strvfreep(&v);
        no_err(ab_store_chat_history(s, "app1", "t1", 2, &v, &n, &e), &e, "chat: newest two");
        ok(n == 2 && strstr(v[0], "\"b\"") && strstr(v[1], "\"c\""),
           "chat: the newest, oldest first");
        ab_strvfreep(&v);
        no_err(ab_store_chat_history(s, NULL, "t1", 10, &v, &n, &e), &e, "chat: admin's history");
        ok(n == 0, "chat: the admin's thread of the same id has its own history");
        ab_strvfreep(&v);
        no_err(ab_store_chat_session_delete(s, "app1", "t1", &e), &e, "chat: delete");
        no_err(ab_store_chat_history(s, "app1", "t1", 10, &v, &n, &e), &e, "chat: history after");
        ok(n == 0, "chat: the delete took the messages");
        ab_strvfreep(&v);
        is_err(ab_store_chat_session_delete(s, "app1", "t1", &e), &e, AB_E_NOT_FOUND, "t1",
               "chat: deleting again is not found");
        is_err(ab_store_chat_append(s, "app1", "t1", roles, more, 1, &e), &e, AB_E_NOT_FOUND, "t1",
               "chat: no append to a deleted session");
        no_err(ab_store_chat_history(s, "app1", "t1", 10, &v, &n, &e), &e, "chat: still empty");
        ok(n == 0, "chat: the refused append left nothing");
        ab_strvfreep(&v);
        no_err(ab_store_chat_session_delete(s, NULL, "t1", &e), &e, "chat: delete the admin's");
}

/* File metadata (E2B's files.write metadata): by path and creation; moves,
 * removals and a box's delete carry it along or drop it. */
static json_t *meta_of(ab_store *s, const char *id, const char *creation, const char *path)
{
        ab_err *e = NULL;
        json_t *o = NULL;
        no_err(ab_store_file_meta_get(s, "native", id, creation, path, &o, &e), &e,
               "get file metadata under %s", path);
        return o ? o : json_object();
}

static void test_file_meta(ab_store *s)
{
        ab_err *e = NULL;
        ab_box_rec b = {.provider = S("native"),
                        .id = S("fm1"),
                        .backend_id = S("be-fm1"),
                        .status = AB_BOX_RUNNING,
                        .mode = AB_MODE_SESSION,
                        .created_at = 1};
        no_err(ab_store_box_insert(s, &b, &e), &e, "a box for file metadata");
        json_t *m1 = json_pack("{s:s,s:s}", "k", "v 1", "b", "it's");
        json_t *m2 = json_pack("{s:s}", "x", "y");
        no_err(ab_store_file_meta_set(s, "native", "fm1", "c1", "/d/a.txt", m1, &e), &e, "set a");
        no_err(ab_store_file_meta_set(s, "native", "fm1", "c1", "/d/sub/b.txt", m2, &e), &e,
               "set b");
        no_err(ab_store_file_meta_set(s, "native", "fm1", "c1", "/d2/c.txt", m2, &e), &e, "set c");
        json_t *o = meta_of(s, "fm1", "c1", "/d");
        ok(json_object_size(o) == 2 && json_equal(json_object_get(o, "/d/a.txt"), m1) &&
               json_equal(json_object_get(o, "/d/sub/b.txt"), m2),
           "get of a folder: what is kept under it (not /d2)");
        json_decref(o);
        o = meta_of(s, "fm1", "c2", "/");
        ok(json_object_size(o) == 0, "another creation of the box sees none of it");
        json_decref(o);
        no_err(ab_store_file_meta_move(s, "native", "fm1", "/d", "/e", &e), &e, "move /d to /e");
        o = meta_of(s, "fm1", "c1", "/");
        ok(json_object_size(o) == 3 && json_object_get(o, "/e/a.txt") &&
               json_object_get(o, "/e/sub/b.txt") && json_object_get(o, "/d2/c.txt"),
           "a move carries a folder's metadata along, /d2 untouched");
        json_decref(o);
        no_err(ab_store_file_meta_move(s, "native", "fm1", "/d2/c.txt", "/e/a.txt", &e), &e,
               "move a file onto another");
        o = meta_of(s, "fm1", "c1", "/e/a.txt");
        ok(json_object_size(o) == 1 && json_equal(json_object_get(o, "/e/a.txt"), m2),
           "the moved file's metadata replaces the target's");
        json_decref(o);
        no_err(ab_store_file_meta_set(s, "native", "fm1", "c1", "/e/a.txt", NULL, &e), &e,
               "set none");
        no_err(ab_store_file_meta_delete(s, "native", "fm1", "/e", &e), &e, "delete /e");
        o = meta_of(s, "fm1", "c1", "/");
        ok(json_object_size(o) == 0, "set none and a removal drop it");
        json_decref(o);
        no_err(ab_store_file_meta_set(s, "native", "fm1", "c1", "/f", m1, &e), &e, "set f");
        no_err(ab_store_box_delete(s, "native", "fm1", &e), &e, "delete the box");
        no_err(ab_store_box_insert(s, &b, &e), &e, "the same id again");
        o = meta_of(s, "fm1", "c1", "/");
        ok(json_object_size(o) == 0, "a box's delete drops its file metadata");
        json_decref(o);
        no_err(ab_store_box_delete(s, "native", "fm1", &e), &e, "clean up");
        json_decref(m1);
        json_decref(m2);
}

/* Two handles (as two processes would) create the same box at once: the
 * database's unique key lets exactly one win, the other gets a conflict. */
static void test_insert_race(ab_store *s, ab_store *s2)
{
        enum { ROUNDS = 20 };
        int good = 0;
        for (int i = 0; i < ROUNDS; i++) {
                char id[16];
                snprintf(id, sizeof(id), "race-%d", i);
                pthread_barrier_t bar;
                pthread_barrier_init(&bar, NULL, 2);
                struct racer x[2] = {{.s = s, .bar = &bar, .id = id},
                                     {.s = s2, .bar = &bar, .id = id}};
                pthread_t th[2];
                for (int j = 0; j < 2; j++)
                        pthread_create(&th[j], NULL, insert_thread, &x[j]);
                for (int j = 0; j < 2; j++)
                        pthread_join(th[j], NULL);
                pthread_barrier_destroy(&bar);
                int wins = (x[0].r == 0) + (x[1].r == 0);
                int conflicts = (x[0].r < 0 && x[0].code == AB_E_CONFLICT) +
                                (x[1].r < 0 && x[1].code == AB_E_CONFLICT);
                if (wins == 1 && conflicts == 1)
                        good++;
                else
                        tap_diag("  round %d: r=%d/%d codes %d/%d", i, x[0].r, x[1].r, x[0].code,
                                 x[1].code);
        }
        is_int(good, ROUNDS,
               "same id from two handles at once: exactly one insert wins (%d rounds)", ROUNDS);
}

/* The server drops our connection: the next operation reconnects once. */
static void test_pg_reconnect(const target *t, ab_store *s)
{
        ab_err *e = NULL;
        ok(raw(t,
               "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
               "WHERE datname = current_database() AND pid <> pg_backend_pid()",
               NULL) == 0,
           "terminate the store's connections");
        ab_box_rec g;
        no_err(ab_store_box_get(s, "native", "b1", &g, &e), &e,
               "the next operation reconnects and succeeds");
        ab_box_rec_clear(&g);
}

/* Fleet nodes (schema 5): heartbeats upsert, draining survives them; boxes
 * carry their owner node, lists filter by it, and a node claims only its
 * own pooled boxes. */
static void test_nodes(ab_store *s)
{
        ab_err *e = NULL;
        ab_node_rec a = {.id = S("na"),
                         .url = S("http://127.0.0.1:1"),
                         .started_at = 1,
                         .heartbeat_at = 10,
                         .running = 2,
                         .mem_total = 100,
                         .mem_avail = 50,
                         .disk_total = 1000,
                         .disk_avail = 400};
        no_err(ab_store_node_beat(s, &a, &e), &e, "first heartbeat registers a node");
        ab_node_rec b = {.id = S("nb"), .url = S("http://127.0.0.2:1"), .heartbeat_at = 11};
        no_err(ab_store_node_beat(s, &b, &e), &e, "a second node");
        no_err(ab_store_node_set_draining(s, "na", true, &e), &e, "drain na");
        a.heartbeat_at = 20;
        a.running = 3;
        no_err(ab_store_node_beat(s, &a, &e), &e, "another heartbeat of na");
        ab_node_rec g;
        no_err(ab_store_node_get(s, "na", &g, &e), &e, "get na");
        ok(g.heartbeat_at == 20 && g.running == 3 && g.draining && g.disk_avail == 400 && g.url &&
               !strcmp(g.url, "http://127.0.0.1:1"),
           "the heartbeat updated it and kept draining");
        ab_node_rec_clear(&g);
        ab_node_rec *ns = NULL;
        size_t n = 0;
        no_err(ab_store_node_list(s, &ns, &n, &e), &e, "list nodes");
        ok(n == 2 && !strcmp(ns[0].id, "na") && !strcmp(ns[1].id, "nb"), "two nodes by id");
        ab_node_recs_free(ns, n);
        is_err(ab_store_node_set_draining(s, "nc", true, &e), &e, AB_E_NOT_FOUND, "nc",
               "draining an unknown node");
        is_err(ab_store_node_get(s, "nc", &g, &e), &e, AB_E_NOT_FOUND, "nc", "get an unknown node");
        ab_node_rec bad = {.id = S("nd")};
        is_err(ab_store_node_beat(s, &bad, &e), &e, AB_E_INVALID, "url", "a node needs a url");

        ab_box_rec r = box("fleet", "fa", "running", "session", 1, 1);
        r.node = S("na");
        insert(s, r);
        r = box("fleet", "fb", "running", "session", 2, 2);
        r.node = S("nb");
        insert(s, r);
        insert(s, box("fleet", "fc", "running", "session", 3, 3));
        char *l = list_ids(s, (ab_box_filter){.provider = "fleet", .node = "na"});
        is_str(l, "fa", "the node filter lists one node's boxes");
        free(l);
        l = list_ids(s, (ab_box_filter){.provider = "fleet"});
        is_str(l, "fa,fb,fc", "without it, every node's");
        free(l);
        ab_box_rec got;
        no_err(ab_store_box_get(s, "fleet", "fb", &got, &e), &e, "get a node's box");
        is_str(got.node, "nb", "a box keeps its owner node");
        ab_box_rec_clear(&got);

        r = box("fleetpool", "pa", "running", "pool", 1, 1);
        r.node = S("na");
        insert(s, r);
        ab_box_rec c = box("fleetpool", "cb", "running", "session", 5, 5);
        c.node = S("nb");
        c.backend_id = xstrdup("cb");
        is_int(ab_store_pool_claim(s, &c, &e), 0, "node nb cannot claim node na's pooled box");
        ab_err_free(&e);
        c.node = S("na");
        is_int(ab_store_pool_claim(s, &c, &e), 1, "node na claims its own");
        ab_err_free(&e);
        free(c.backend_id);
}

/* A move's switch of owner (ab_store_box_set_node): a compare-and-set on
 * the owner and a stopped status; a box of no node is its sender's. Runs
 * after test_nodes (its boxes fa, fc). */
static void test_set_node(ab_store *s)
{
        ab_err *e = NULL;
        is_err(ab_store_box_set_node(s, "fleet", "fa", "nb", "na", &e), &e, AB_E_CONFLICT,
               "running", "a running box does not change owner");
        no_err(ab_store_box_set_status(s, "fleet", "fa", AB_BOX_STOPPED, 0, NULL, &e), &e,
               "stop fa");
        is_err(ab_store_box_set_node(s, "fleet", "fa", "nb", "nb", &e), &e, AB_E_CONFLICT, "na",
               "a switch from a node that is not the owner is a conflict naming the owner");
        no_err(ab_store_box_set_node(s, "fleet", "fa", "nb", "na", &e), &e, "switch na -> nb");
        ab_box_rec got;
        no_err(ab_store_box_get(s, "fleet", "fa", &got, &e), &e, "get fa");
        ok(got.node && !strcmp(got.node, "nb") && got.status == AB_BOX_STOPPED,
           "the store names the new owner, the box still stopped");
        ab_box_rec_clear(&got);
        is_err(ab_store_box_set_node(s, "fleet", "fa", "nb", "na", &e), &e, AB_E_CONFLICT, "nb",
               "the same switch again is a conflict: one owner at a time");
        is_err(ab_store_box_set_node(s, "fleet", "nope", "nb", "na", &e), &e, AB_E_NOT_FOUND, NULL,
               "an absent box is not_found");
        is_err(ab_store_box_set_node(s, "fleet", "fa", "", "na", &e), &e, AB_E_INVALID, NULL,
               "no node is invalid");
        no_err(ab_store_box_set_status(s, "fleet", "fc", AB_BOX_STOPPED, 0, NULL, &e), &e,
               "stop fc (no node)");
        no_err(ab_store_box_set_node(s, "fleet", "fc", "na", "nb", &e), &e,
               "a box of no node moves from the node that asks");
        no_err(ab_store_box_get(s, "fleet", "fc", &got, &e), &e, "get fc");
        is_str(got.node, "na", "... and is the new owner's");
        ab_box_rec_clear(&got);
}

/* The box records ab_store_box_get keeps (boxcache.c): a read after any
 * change sees it, whether the change went through this handle, another
 * handle, or another process's connection (raw SQL). */
static void get_check(ab_store *s, const char *id, const char *want_status, int64_t want_active,
                      const char *want_node, const char *what)
{
        ab_box_rec r = {0};
        ab_err *e = NULL;
        no_err(ab_store_box_get(s, "cache", id, &r, &e), &e, "get %s (%s)", id, what);
        is_str(ab_box_status_name(r.status), want_status, "%s: status", what);
        is_int(r.last_active_at, want_active, "%s: last_active_at", what);
        is_str(r.node ? r.node : "(none)", want_node, "%s: node", what);
        ab_box_rec_clear(&r);
}

static void test_box_cache(const target *t, ab_store *s, ab_store *s2)
{
        ab_err *e = NULL;
        ab_box_rec b = box("cache", "c1", "running", "session", 1, 10);
        b.spec = json_pack("{s:{s:s}}", "env", "A", "1");
        insert(s, b);
        json_decref(b.spec);
        get_check(s, "c1", "running", 10, "(none)", "first read");
        get_check(s, "c1", "running", 10, "(none)", "second read");

        /* the copy handed out is the caller's own */
        ab_box_rec r = {0};
        no_err(ab_store_box_get(s, "cache", "c1", &r, &e), &e, "get to change the copy");
        json_object_set_new(json_object_get(r.spec, "env"), "A", json_string("changed"));
        free(r.app_id);
        r.app_id = xstrdup("mine");
        ab_box_rec_clear(&r);
        no_err(ab_store_box_get(s, "cache", "c1", &r, &e), &e, "get after changing a copy");
        is_str(json_string_value(json_object_get(json_object_get(r.spec, "env"), "A")), "1",
               "a caller's change to its copy is not the next reader's");
        ok(r.app_id == NULL, "nor is its app_id");
        ab_box_rec_clear(&r);

        /* this handle's writes */
        no_err(ab_store_box_touch(s, "cache", "c1", 50, &e), &e, "touch");
        get_check(s, "c1", "running", 50, "(none)", "after a touch");
        no_err(ab_store_box_touch(s, "cache", "c1", 20, &e), &e, "touch back in time");
        get_check(s, "c1", "running", 50, "(none)", "a touch never moves it back");
        ab_exec_audit a = {.provider = S("cache"), .box_id = S("c1"), .command = S("true")};
        no_err(ab_store_exec_done(s, &a, 70, &e), &e, "exec done");
        get_check(s, "c1", "running", 70, "(none)", "after an exec's record");
        no_err(ab_store_box_set_status(s, "cache", "c1", AB_BOX_STOPPED, 0, NULL, &e), &e, "stop");
        get_check(s, "c1", "stopped", 70, "(none)", "after a status change");

        /* another handle's: another connection, as another process */
        get_check(s, "c1", "stopped", 70, "(none)", "cached again");
        no_err(ab_store_box_set_status(s2, "cache", "c1", AB_BOX_RUNNING, 0, NULL, &e), &e,
               "start through the second handle");
        get_check(s, "c1", "running", 70, "(none)", "after the second handle's status change");
        no_err(ab_store_box_touch(s2, "cache", "c1", 90, &e), &e,
               "touch through the second handle");
        get_check(s, "c1", "running", 90, "(none)", "after the second handle's touch");

        /* behind the store's back */
        ok(raw(t, "UPDATE boxes SET status = 'paused', node = 'n2' WHERE id = 'c1'", NULL) == 0,
           "raw update");
        get_check(s, "c1", "paused", 90, "n2", "after a raw update (status, node)");
        ok(raw(t, "DELETE FROM boxes WHERE id = 'c1'", NULL) == 0, "raw delete");
        is_err(ab_store_box_get(s, "cache", "c1", &r, &e), &e, AB_E_NOT_FOUND, NULL,
               "a box deleted by another process is not found");

        /* a deleted box is not served, nor one inserted again */
        insert(s, box("cache", "c2", "running", "session", 1, 5));
        get_check(s, "c2", "running", 5, "(none)", "c2");
        no_err(ab_store_box_delete(s2, "cache", "c2", &e), &e, "delete c2 (second handle)");
        is_err(ab_store_box_get(s, "cache", "c2", &r, &e), &e, AB_E_NOT_FOUND, NULL,
               "a box deleted through another handle is not found");
        insert(s2, box("cache", "c2", "stopped", "session", 1, 6));
        get_check(s, "c2", "stopped", 6, "(none)", "c2 made again");
        no_err(ab_store_box_delete(s, "cache", "c2", &e), &e, "delete c2");
        is_err(ab_store_box_get(s, "cache", "c2", &r, &e), &e, AB_E_NOT_FOUND, NULL,
               "a box deleted through this handle is not found");

        /* more boxes than entries: every read is still right */
        char id[16];
        for (int i = 0; i < 2 * BOX_CACHE_MORE; i++) {
                snprintf(id, sizeof(id), "m%d", i);
                insert(s, box("cache", id, "running", "session", 1, i));
        }
        bool all = true;
        for (int round = 0; round < 2; round++)
                for (int i = 0; i < 2 * BOX_CACHE_MORE; i++) {
                        snprintf(id, sizeof(id), "m%d", i);
                        ab_box_rec m = {0};
                        all &= ab_store_box_get(s, "cache", id, &m, &e) == 0 &&
                               m.last_active_at == i && !strcmp(m.id, id);
                        ab_err_free(&e);
                        ab_box_rec_clear(&m);
                }
        ok(all, "%d boxes read twice each, every record right", 2 * BOX_CACHE_MORE);
}

static void suite(const target *t)
{
        K = t->kind;
        test_concurrent_fresh_open(t);
        test_migrations(t);
        test_open_while_locked(t);
        ab_store *s = open_store(t, "main handle");
        ab_store *s2 = open_store(t, "second handle");
        if (!s || !s2) {
                ab_store_close(s);
                ab_store_close(s2);
                return;
        }
        test_boxes(s);
        test_list(s);
        test_idle(s);
        test_expired(s);
        test_gen(s);
        test_count(s);
        test_pool(t, s, s2);
        test_audit(s);
        test_keys(s);
        test_chat(s);
        test_file_meta(s);
        test_insert_race(s, s2);
        test_nodes(s);
        test_set_node(s);
        test_box_cache(t, s, s2);
        if (strcmp(t->kind, "postgres") == 0)
                test_pg_reconnect(t, s);
        ab_store_close(s);
        ab_store_close(s2);
}

/* ---- what does not depend on a database ---- */

static void test_open_errors(const char *tmp)
{
        K = "open";
        ab_store *s = NULL;
        ab_err *e = NULL;
        is_err(ab_store_open("mysql://u:secret@h/db", NULL, &s, &e), &e, AB_E_INVALID, "mysql",
               "an unknown url scheme is invalid");
        ab_store_open("mysql://u:secret@h/db", NULL, &s, &e);
        ok(e && !strstr(e->msg, "secret"), "the error does not show the url's password");
        ab_err_free(&e);
        is_err(ab_store_open("sqlite:", NULL, &s, &e), &e, AB_E_INVALID, NULL,
               "sqlite: without a path is invalid");
        is_err(ab_store_open(NULL, NULL, &s, &e), &e, AB_E_INVALID, NULL,
               "no url and no data folder is invalid");
        is_err(ab_store_open("postgres://127.0.0.1:1/nope?connect_timeout=5", NULL, &s, &e), &e,
               AB_E_UNAVAILABLE, "connect to PostgreSQL",
               "an unreachable PostgreSQL is unavailable, with libpq's message");
        _cleanup_free_ char *blocked = xasprintf("%s/file", tmp);
        int fd = open(blocked, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        close(fd);
        _cleanup_free_ char *under = xasprintf("sqlite:%s/db", blocked);
        is_err(ab_store_open(under, NULL, &s, &e), &e, AB_E_UNAVAILABLE, blocked,
               "a database path that cannot be created is unavailable");

        /* The default: DATA_DIR/agentbox.db, folders made private. */
        _cleanup_free_ char *data = xasprintf("%s/data/sub", tmp);
        no_err(ab_store_open("", data, &s, &e), &e, "open the default store in a new data folder");
        if (s)
                is_str(ab_store_kind(s), "sqlite", "the default is SQLite");
        ab_store_close(s);
        struct stat st;
        ok(stat(data, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700,
           "the data folder is made, mode 0700");
        _cleanup_free_ char *db = xasprintf("%s/agentbox.db", data);
        ok(stat(db, &st) == 0 && (st.st_mode & 0777) == 0600, "agentbox.db is made, mode 0600");
}

/* ---- PostgreSQL: a database of our own ---- */

/* The admin url with its database replaced by name. */
static char *with_db(const char *url, const char *name)
{
        const char *auth = strstr(url, "://");
        auth = auth ? auth + 3 : url;
        size_t path = strcspn(auth, "/?");
        const char *query = strchr(auth, '?');
        return xasprintf("%.*s/%s%s", (int)(auth - url + path), url, name, query ? query : "");
}

/* Runs "verb NAME tail" with the database name quoted as an identifier. */
static int admin(const char *url, const char *verb, const char *name, const char *tail)
{
        PGconn *c = PQconnectdb(url);
        if (PQstatus(c) != CONNECTION_OK) {
                tap_diag("  postgres admin: %s", PQerrorMessage(c));
                PQfinish(c);
                return -1;
        }
        char *id = PQescapeIdentifier(c, name, strlen(name));
        _cleanup_free_ char *sql = xasprintf("%s %s%s", verb, id, tail);
        PQfreemem(id);
        PGresult *r = PQexec(c, sql);
        int ret = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -1;
        if (ret < 0)
                tap_diag("  postgres admin: %s", PQerrorMessage(c));
        PQclear(r);
        PQfinish(c);
        return ret;
}

static void test_postgres(void)
{
        const char *url = getenv("AGENTBOX_TEST_PG_URL");
        if (!url || !*url) {
                printf("ok %d - postgres # SKIP AGENTBOX_TEST_PG_URL is not set "
                       "(scripts/pg.sh starts a server and prints the url to set it to)\n",
                       ++tap_n);
                return;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        _cleanup_free_ char *name =
            xasprintf("agentbox_test_%d_%lld", (int)getpid(), (long long)ts.tv_nsec);
        K = "postgres";
        if (admin(url, "CREATE DATABASE", name, "") < 0) {
                ok(0, "create the test database through AGENTBOX_TEST_PG_URL");
                return;
        }
        target t = {.kind = "postgres", .url = with_db(url, name)};
        suite(&t);
        K = "postgres";
        ok(admin(url, "DROP DATABASE", name, " WITH (FORCE)") == 0, "drop the test database");
        free(t.url);
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *f)
{
        return remove(path);
}

int main(void)
{
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        char tmp[] = "/tmp/ab-store-XXXXXX";
        if (!mkdtemp(tmp))
                tap_skip_all("mkdtemp failed");

        test_open_errors(tmp);

        target sq = {.kind = "sqlite", .url = xasprintf("sqlite:%s/store.db", tmp)};
        suite(&sq);
        free(sq.url);

        test_postgres();

        clock_gettime(CLOCK_MONOTONIC, &t1);
        tap_diag("%.2f s", (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
        if (nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
                tap_diag("could not remove %s", tmp);
        return tap_done();
}
