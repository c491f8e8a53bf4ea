/* postgres.c - the PostgreSQL driver: one libpq connection per handle
 * (store.c serialises calls), every statement through PQexecParams with typed
 * parameters, and one reconnect when the server dropped the connection
 * outside a transaction. */
#include "store/store_int.h"

#include <ctype.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>

#define OID_INT8 20
#define OID_TEXT 25

typedef struct pg_store {
        ab_store base;
        PGconn *conn;
        bool in_tx; /* a statement may not be retried on a new connection */
} pg_store;

static const char *const v1[] = AB_STORE_SCHEMA_V1("BIGSERIAL PRIMARY KEY");
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

/* libpq messages end in a newline and may span lines; keep them on one. */
static char *one_line(const char *m)
{
        char *s = xstrdup(m && *m ? m : "unknown error");
        for (char *p = s; *p; p++)
                if (*p == '\n' || *p == '\r' || *p == '\t')
                        *p = ' ';
        size_t n = strlen(s);
        while (n && isspace((unsigned char)s[n - 1]))
                s[--n] = '\0';
        return s;
}

static ab_code code_of(const char *state, bool connected)
{
        if (!connected)
                return AB_E_UNAVAILABLE;
        if (!state)
                return AB_E_INTERNAL;
        if (strcmp(state, "23505") == 0) /* unique_violation */
                return AB_E_CONFLICT;
        if (strncmp(state, "23", 2) == 0) /* other integrity constraints */
                return AB_E_INVALID;
        if (strncmp(state, "08", 2) == 0 || strncmp(state, "57P", 3) == 0 ||
            strncmp(state, "53", 2) == 0 || strncmp(state, "40", 2) == 0)
                return AB_E_UNAVAILABLE; /* connection, shutdown, resources, retry */
        if (strcmp(state, "42501") == 0)
                return AB_E_PERMISSION;
        return AB_E_INTERNAL;
}

static int fail_result(pg_store *p, PGresult *r, const char *op, ab_err **err)
{
        bool connected = PQstatus(p->conn) == CONNECTION_OK;
        const char *primary = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        const char *detail = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL) : NULL;
        const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
        _cleanup_free_ char *msg = one_line(primary ? primary : PQerrorMessage(p->conn));
        _cleanup_free_ char *det = detail ? one_line(detail) : NULL;
        return ab_err_set(err, code_of(state, connected), 0, "%s: %s%s%s%s", op, msg,
                          det ? " (" : "", det ? det : "", det ? ")" : "");
}

/* Makes sure the connection is up, reconnecting once when it dropped. */
static int ensure_conn(pg_store *p, const char *op, ab_err **err)
{
        if (PQstatus(p->conn) == CONNECTION_OK)
                return 0;
        if (p->in_tx)
                return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                  "%s: the connection to PostgreSQL was lost in a transaction", op);
        PQreset(p->conn);
        if (PQstatus(p->conn) == CONNECTION_OK)
                return 0;
        _cleanup_free_ char *msg = one_line(PQerrorMessage(p->conn));
        return ab_err_set(err, AB_E_UNAVAILABLE, 0, "%s: cannot reconnect to PostgreSQL: %s", op,
                          msg);
}

static void collect(PGresult *r, ab_sql_res *res)
{
        int rows = PQntuples(r), cols = PQnfields(r);
        res->ncols = (size_t)cols;
        for (int i = 0; i < rows; i++) {
                char **row = ab_sql_res_add_row(res);
                for (int c = 0; c < cols; c++)
                        if (!PQgetisnull(r, i, c))
                                row[c] = xstrdup(PQgetvalue(r, i, c));
        }
        const char *n = PQcmdTuples(r);
        res->changes = n && *n ? strtoll(n, NULL, 10) : 0;
}

static int pg_exec(ab_store *s, const char *op, const char *sql, const ab_sql_arg *args,
                   size_t nargs, ab_sql_res *res, ab_err **err)
{
        pg_store *p = (pg_store *)s;
        const char *values[AB_SQL_MAX_ARGS];
        Oid types[AB_SQL_MAX_ARGS];
        char nums[AB_SQL_MAX_ARGS][24];
        if (nargs > AB_SQL_MAX_ARGS)
                abort(); /* a bug in store.c */
        for (size_t i = 0; i < nargs; i++) {
                if (args[i].is_int) {
                        snprintf(nums[i], sizeof(nums[i]), "%" PRId64, args[i].num);
                        values[i] = nums[i];
                        types[i] = OID_INT8;
                } else {
                        values[i] = args[i].text;
                        types[i] = OID_TEXT;
                }
        }
        for (int attempt = 0;; attempt++) {
                if (ensure_conn(p, op, err) < 0)
                        return -1;
                PGresult *r = PQexecParams(p->conn, sql, (int)nargs, types, values, NULL, NULL, 0);
                ExecStatusType st = PQresultStatus(r);
                if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
                        if (res)
                                collect(r, res);
                        PQclear(r);
                        return 0;
                }
                /* The server went away (restart, idle kill): try once on a new
                 * connection, unless a transaction's earlier statements are lost. */
                if (PQstatus(p->conn) != CONNECTION_OK && !p->in_tx && attempt == 0) {
                        PQclear(r);
                        continue;
                }
                int ret = fail_result(p, r, op, err);
                PQclear(r);
                return ret;
        }
}

static int pg_begin(ab_store *s, const char *op, ab_err **err)
{
        pg_store *p = (pg_store *)s;
        if (pg_exec(s, op, "BEGIN", NULL, 0, NULL, err) < 0)
                return -1;
        p->in_tx = true;
        return 0;
}

static int pg_commit(ab_store *s, const char *op, ab_err **err)
{
        pg_store *p = (pg_store *)s;
        PGresult *r = PQexec(p->conn, "COMMIT");
        int ret = 0;
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
                ret = fail_result(p, r, op, err);
        else if (strcmp(PQcmdStatus(r), "COMMIT") != 0) /* an aborted transaction rolls back */
                ret = ab_err_set(err, AB_E_INTERNAL, 0, "%s: the transaction was rolled back", op);
        PQclear(r);
        p->in_tx = false;
        return ret;
}

static void pg_rollback(ab_store *s)
{
        pg_store *p = (pg_store *)s;
        if (p->in_tx && PQstatus(p->conn) == CONNECTION_OK)
                PQclear(PQexec(p->conn, "ROLLBACK"));
        p->in_tx = false;
}

static void pg_close(ab_store *s)
{
        pg_store *p = (pg_store *)s;
        PQfinish(p->conn);
        free(p);
}

static const ab_store_ops pg_ops = {
    .kind = "postgres",
    .migrations = migrations,
    .n_migrations = AB_ARRAY_LEN(migrations),
    /* Concurrent CREATE TABLE IF NOT EXISTS can fail in PostgreSQL; the
     * transaction-scoped lock makes opens of a fresh database take turns. */
    .migrate_lock = "SELECT pg_advisory_xact_lock(7215470930366857001)",
    /* Concurrent claims skip each other's locked rows instead of waiting for
     * them (and then finding them gone). */
    .claim_select = "SELECT id, backend_id FROM boxes WHERE provider = $1 AND mode = 'pool' "
                    "AND status = 'running' AND COALESCE(node, '') = COALESCE($2, '') ORDER BY "
                    "created_at, id LIMIT 1 "
                    "FOR UPDATE SKIP LOCKED",
    .notify = "SELECT pg_notify($1, $2)",
    .lock_try = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
    .lock_release = "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
    .exec = pg_exec,
    .begin = pg_begin,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .close = pg_close,
};

static void quiet_notices(void *arg, const char *message)
{
        (void)arg;
        (void)message;
}

int ab_store_pg_open(const char *url, ab_store **out, ab_err **err)
{
        *out = NULL;
        char *perr = NULL;
        PQconninfoOption *opts = PQconninfoParse(url, &perr);
        if (!opts) {
                _cleanup_free_ char *msg = one_line(perr ? perr : "out of memory");
                PQfreemem(perr);
                return ab_err_set(err, AB_E_INVALID, 0, "open PostgreSQL store: bad url: %s", msg);
        }
        PQconninfoFree(opts);
        /* Defaults first: the url's own parameters override them. */
        const char *keys[] = {"connect_timeout", "application_name", "dbname", NULL};
        const char *vals[] = {"10", "agentbox", url, NULL};
        PGconn *c = PQconnectdbParams(keys, vals, 1);
        if (!c)
                abort(); /* libpq: out of memory */
        if (PQstatus(c) != CONNECTION_OK) {
                _cleanup_free_ char *msg = one_line(PQerrorMessage(c));
                PQfinish(c);
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "connect to PostgreSQL: %s", msg);
        }
        PQsetNoticeProcessor(c, quiet_notices, NULL);
        pg_store *p = xzalloc(sizeof(*p));
        p->base.ops = &pg_ops;
        p->conn = c;
        *out = &p->base;
        return 0;
}

/* ---- LISTEN ---- */

struct ab_store_listener {
        PGconn *conn;
};

int ab_store_listen(const char *url, const char *channel, ab_store_listener **out, ab_err **err)
{
        *out = NULL;
        for (const char *p = channel; *p; p++)
                if (!isalnum((unsigned char)*p) && *p != '_')
                        return ab_err_set(err, AB_E_INVALID, 0, "listen: bad channel name");
        if (!url || (strncmp(url, "postgres://", 11) && strncmp(url, "postgresql://", 13)))
                return ab_err_set(err, AB_E_UNSUPPORTED, 0, "listen: needs a PostgreSQL store");
        const char *keys[] = {"connect_timeout", "application_name", "dbname", NULL};
        const char *vals[] = {"10", "agentbox-listen", url, NULL};
        PGconn *c = PQconnectdbParams(keys, vals, 1);
        if (!c)
                abort();
        _cleanup_free_ char *sql = xasprintf("LISTEN %s", channel);
        PGresult *r = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
        if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) {
                _cleanup_free_ char *msg = one_line(PQerrorMessage(c));
                PQclear(r);
                PQfinish(c);
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "listen: %s", msg);
        }
        PQclear(r);
        PQsetNoticeProcessor(c, quiet_notices, NULL);
        ab_store_listener *l = xzalloc(sizeof(*l));
        l->conn = c;
        *out = l;
        return 0;
}

int ab_store_listen_wait(ab_store_listener *l, int timeout_ms,
                         void (*fn)(void *arg, const char *payload), void *arg, ab_err **err)
{
        struct pollfd p = {.fd = PQsocket(l->conn), .events = POLLIN};
        if (p.fd < 0 || PQstatus(l->conn) != CONNECTION_OK)
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "listen: the connection is gone");
        int n = poll(&p, 1, timeout_ms);
        if (n < 0 && errno != EINTR)
                return ab_err_set(err, AB_E_UNAVAILABLE, errno, "listen: poll");
        if (n > 0 && !PQconsumeInput(l->conn)) {
                _cleanup_free_ char *msg = one_line(PQerrorMessage(l->conn));
                return ab_err_set(err, AB_E_UNAVAILABLE, 0, "listen: %s", msg);
        }
        PGnotify *m;
        while ((m = PQnotifies(l->conn))) {
                fn(arg, m->extra);
                PQfreemem(m);
        }
        return 0;
}

void ab_store_listen_close(ab_store_listener *l)
{
        if (!l)
                return;
        PQfinish(l->conn);
        free(l);
}
