/* store.c - the store operations, written once for both drivers (see
 * store_int.h), ab_store_open's dispatch by url, and the schema migrations. */
#include "store/store_int.h"

#include <stddef.h>
#include <sys/stat.h>
#include <time.h>

#define BOX_COLS                                                                                   \
        "provider, id, backend_id, app_id, user_id, chat_id, thread_id, status, mode, "            \
        "created_at, last_active_at, idle_stop_s, ttl_s, limits, spec, metadata, error, "          \
        "idle_pause_s, node"
enum { BOX_NCOLS = 19 };

#define AUDIT_COLS                                                                                 \
        "provider, box_id, command, exit_code, timed_out, started_at, duration_ms, "               \
        "stdout_bytes, stderr_bytes"
#define KEY_COLS "key_id, key_hash, app_id, name, created_at, quotas"

/* Runs one statement with the arguments that follow (at least one). */
#define EXEC(s, op, sql, res, err, ...)                                                            \
        ({                                                                                         \
                const ab_sql_arg _args[] = {__VA_ARGS__};                                          \
                (s)->ops->exec((s), (op), (sql), _args, AB_ARRAY_LEN(_args), (res), (err));        \
        })
#define EXEC0(s, op, sql, res, err) (s)->ops->exec((s), (op), (sql), NULL, 0, (res), (err))

/* ---- records ---- */

void ab_box_rec_clear(ab_box_rec *r)
{
        if (!r)
                return;
        char **strs[] = {&r->provider, &r->id,        &r->backend_id, &r->app_id, &r->user_id,
                         &r->chat_id,  &r->thread_id, &r->error,      &r->node};
        for (size_t i = 0; i < AB_ARRAY_LEN(strs); i++)
                free(*strs[i]);
        json_decref(r->spec);
        json_decref(r->metadata);
        memset(r, 0, sizeof(*r));
}

void ab_box_recs_free(ab_box_rec *r, size_t n)
{
        if (!r)
                return;
        for (size_t i = 0; i < n; i++)
                ab_box_rec_clear(&r[i]);
        free(r);
}

void ab_exec_audits_free(ab_exec_audit *a, size_t n)
{
        if (!a)
                return;
        for (size_t i = 0; i < n; i++) {
                free(a[i].provider);
                free(a[i].box_id);
                free(a[i].command);
        }
        free(a);
}

void ab_api_key_clear(ab_api_key *k)
{
        if (!k)
                return;
        free(k->key_id);
        free(k->key_hash);
        free(k->app_id);
        free(k->name);
        memset(k, 0, sizeof(*k));
}

void ab_api_keys_free(ab_api_key *k, size_t n)
{
        if (!k)
                return;
        for (size_t i = 0; i < n; i++)
                ab_api_key_clear(&k[i]);
        free(k);
}

/* ---- results ---- */

char **ab_sql_res_add_row(ab_sql_res *res)
{
        if (res->nrows == res->cap) {
                res->cap = res->cap ? xmul(res->cap, 2) : 8;
                res->cells = xrealloc(res->cells, xmul(xmul(res->cap, res->ncols), sizeof(char *)));
        }
        char **row = res->cells + res->nrows * res->ncols;
        for (size_t c = 0; c < res->ncols; c++)
                row[c] = NULL;
        res->nrows++;
        return row;
}

void ab_sql_res_clear(ab_sql_res *res)
{
        if (!res->cells) {
                memset(res, 0, sizeof(*res));
                return;
        }
        for (size_t i = 0; i < res->nrows * res->ncols; i++)
                free(res->cells[i]);
        free(res->cells);
        memset(res, 0, sizeof(*res));
}

#define _cleanup_res_ __attribute__((cleanup(ab_sql_res_clear)))

static const char *cell(const ab_sql_res *r, size_t row, size_t col)
{
        return row < r->nrows && col < r->ncols ? r->cells[row * r->ncols + col] : NULL;
}

static char *take(ab_sql_res *r, size_t row, size_t col)
{
        return steal_pointer(&r->cells[row * r->ncols + col]);
}

static int64_t num(const ab_sql_res *r, size_t row, size_t col)
{
        const char *s = cell(r, row, col);
        return s ? strtoll(s, NULL, 10) : 0;
}

/* ---- locking ---- */

static ab_store *store_lock(ab_store *s)
{
        pthread_mutex_lock(&s->lock);
        return s;
}

static void store_unlockp(ab_store **s)
{
        if (*s)
                pthread_mutex_unlock(&(*s)->lock);
}

/* Holds the handle's mutex until the end of the enclosing block. */
#define STORE_LOCKED(s) __attribute__((cleanup(store_unlockp))) ab_store *_held = store_lock(s)

/* A write of box rows that may change a box's status or the set of boxes:
 * ab_store_box_gen moves (before the write: a reader that saw the old
 * generation reads again). */
static void box_changed(ab_store *s)
{
        atomic_fetch_add(&s->box_gen, 1);
}

uint64_t ab_store_box_gen(ab_store *s)
{
        return atomic_load(&s->box_gen);
}

/* ---- helpers ---- */

static int64_t wall_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The limits columns' JSON: the stored fields of ab_limits. */
static char *limits_text(const ab_limits *l)
{
        json_t *j = ab_limits_json(l);
        char *t = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(j);
        if (!t)
                abort();
        return t;
}

/* Parses a limits column; absent fields keep the built-in defaults. False
 * when there is none or it is not a JSON object. */
static bool limits_parse(const char *text, ab_limits *l)
{
        json_t *j = text ? json_loads(text, 0, NULL) : NULL;
        bool ok = ab_limits_from_json(j, l);
        json_decref(j);
        return ok;
}

/* A JSON object column, or NULL (absent, or not an object). */
static json_t *object_parse(const char *text)
{
        json_t *j = text ? json_loads(text, 0, NULL) : NULL;
        if (!json_is_object(j)) {
                json_decref(j);
                return NULL;
        }
        return j;
}

static char *object_text(const json_t *j)
{
        if (!j)
                return NULL;
        char *t = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
        if (!t)
                abort();
        return t;
}

static void row_to_box(ab_sql_res *r, size_t i, ab_box_rec *b)
{
        b->provider = take(r, i, 0);
        b->id = take(r, i, 1);
        b->backend_id = take(r, i, 2);
        b->app_id = take(r, i, 3);
        b->user_id = take(r, i, 4);
        b->chat_id = take(r, i, 5);
        b->thread_id = take(r, i, 6);
        b->status = ab_box_status_parse(cell(r, i, 7));
        b->mode = ab_box_mode_parse(cell(r, i, 8));
        b->created_at = num(r, i, 9);
        b->last_active_at = num(r, i, 10);
        b->idle_stop_s = num(r, i, 11);
        b->ttl_s = num(r, i, 12);
        b->has_limits = limits_parse(cell(r, i, 13), &b->limits);
        b->spec = object_parse(cell(r, i, 14));
        b->metadata = object_parse(cell(r, i, 15));
        b->error = take(r, i, 16);
        b->idle_pause_s = num(r, i, 17);
        b->node = take(r, i, 18);
        if (!b->status) {
                /* Written by a newer version, or by hand: visible, never silent. */
                free(b->error);
                b->error = xasprintf("unknown status \"%s\" in the store", cell(r, i, 7));
                b->status = AB_BOX_ERROR;
        }
        if (!b->mode)
                b->mode = AB_MODE_SESSION;
}

static void boxes_from(ab_sql_res *r, ab_box_rec **out, size_t *n)
{
        *out = NULL;
        *n = r->nrows;
        if (!r->nrows)
                return;
        *out = xcalloc(r->nrows, sizeof(**out));
        for (size_t i = 0; i < r->nrows; i++)
                row_to_box(r, i, &(*out)[i]);
}

/* The text forms of a record's typed columns, owned while a statement runs. */
typedef struct box_text {
        char *limits, *spec, *metadata;
} box_text;

static void box_text_clear(box_text *t)
{
        free(t->limits);
        free(t->spec);
        free(t->metadata);
}
#define _cleanup_box_text_ __attribute__((cleanup(box_text_clear)))

/* The 19 columns of BOX_COLS as $1..$19 (t holds the JSON texts). */
static void box_args(const ab_box_rec *r, box_text *t, ab_sql_arg a[BOX_NCOLS])
{
        t->limits = r->has_limits ? limits_text(&r->limits) : NULL;
        t->spec = object_text(r->spec);
        t->metadata = object_text(r->metadata);
        const ab_sql_arg v[BOX_NCOLS] = {
            SQL_TEXT(r->provider),
            SQL_TEXT(r->id),
            SQL_TEXT(r->backend_id),
            SQL_TEXT(r->app_id),
            SQL_TEXT(r->user_id),
            SQL_TEXT(r->chat_id),
            SQL_TEXT(r->thread_id),
            SQL_TEXT(ab_box_status_name(r->status)),
            SQL_TEXT(ab_box_mode_name(r->mode)),
            SQL_INT(r->created_at),
            SQL_INT(r->last_active_at),
            SQL_INT(r->idle_stop_s),
            SQL_INT(r->ttl_s),
            SQL_TEXT(t->limits),
            SQL_TEXT(t->spec),
            SQL_TEXT(t->metadata),
            SQL_TEXT(r->error),
            SQL_INT(r->idle_pause_s),
            SQL_TEXT(r->node),
        };
        memcpy(a, v, sizeof(v));
}

static int check_box(const ab_box_rec *r, const char *what, ab_err **err)
{
        if (!r || !r->provider || !r->id || !ab_box_status_parse(ab_box_status_name(r->status)) ||
            !ab_box_mode_parse(ab_box_mode_name(r->mode)))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "%s: a box record needs provider, id, status and mode", what);
        return 0;
}

static int check_key(const char *provider, const char *id, const char *what, ab_err **err)
{
        if (!provider || !id)
                return ab_err_set(err, AB_E_INVALID, 0, "%s: provider and id are required", what);
        return 0;
}

static int not_found(ab_err **err, const char *op, const char *provider, const char *id)
{
        return ab_err_set(err, AB_E_NOT_FOUND, 0, "%s: no box '%s' of provider '%s'", op, id,
                          provider);
}

/* ---- migrations ---- */

static int latest_version(const ab_store *s)
{
        const ab_store_ops *o = s->ops;
        return o->n_migrations ? o->migrations[o->n_migrations - 1].version : 0;
}

static int read_version(ab_store *s, const char *op, int *out, ab_err **err)
{
        _cleanup_res_ ab_sql_res res = {0};
        if (EXEC0(s, op, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations", &res, err) < 0)
                return -1;
        *out = (int)num(&res, 0, 0);
        return 0;
}

static int migrate_tx(ab_store *s, ab_err **err)
{
        const ab_store_ops *o = s->ops;
        const char *op = "migrate the schema";
        if (o->migrate_lock && EXEC0(s, op, o->migrate_lock, NULL, err) < 0)
                return -1;
        if (EXEC0(s, op,
                  "CREATE TABLE IF NOT EXISTS schema_migrations ("
                  "version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)",
                  NULL, err) < 0)
                return -1;
        int cur, known = latest_version(s);
        if (read_version(s, op, &cur, err) < 0)
                return -1;
        if (cur > known)
                return ab_err_set(err, AB_E_CONFLICT, 0,
                                  "the %s database has schema version %d but this agentbox "
                                  "knows only up to %d: upgrade agentbox or use another database",
                                  o->kind, cur, known);
        for (size_t i = 0; i < o->n_migrations; i++) {
                const ab_store_migration *m = &o->migrations[i];
                if (m->version <= cur)
                        continue;
                _cleanup_free_ char *mop =
                    xasprintf("migrate the schema to version %d", m->version);
                for (const char *const *st = m->stmts; *st; st++)
                        if (EXEC0(s, mop, *st, NULL, err) < 0)
                                return -1;
                if (EXEC(s, mop,
                         "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                         NULL, err, SQL_INT(m->version), SQL_INT(wall_ms())) < 0)
                        return -1;
        }
        return 0;
}

/* Runs body inside a write transaction: commit when it returns >= 0, else roll back. */
static int in_tx(ab_store *s, const char *op, int (*body)(ab_store *, void *, ab_err **), void *ctx,
                 ab_err **err)
{
        if (s->ops->begin(s, op, err) < 0)
                return -1;
        int r = body(s, ctx, err);
        if (r < 0 || s->ops->commit(s, op, err) < 0) {
                s->ops->rollback(s);
                return -1;
        }
        return r;
}

static int migrate_body(ab_store *s, void *ctx, ab_err **err)
{
        return migrate_tx(s, err);
}

/* True when the schema is at this agentbox's latest version, read without a
 * write transaction: every open after the first (a CLI exec opens the store
 * each time) then takes no write lock. Anything else (no table yet, an
 * older or newer version, an error) is for migrate_tx, which reads again
 * under the lock. The caller holds s->lock. */
static bool schema_current(ab_store *s)
{
        _cleanup_err_ ab_err *e = NULL;
        int cur;
        return read_version(s, "read the schema version", &cur, &e) == 0 &&
               cur == latest_version(s);
}

/* ---- open / close ---- */

/* mkdir -p with mode for the directories it creates. 0 or -errno. */
static int mkdir_p(const char *path, mode_t mode)
{
        _cleanup_free_ char *p = xstrdup(path);
        for (char *c = p + 1;; c++) {
                if (*c != '/' && *c != '\0')
                        continue;
                char saved = *c;
                *c = '\0';
                if (mkdir(p, mode) < 0 && errno != EEXIST)
                        return -errno;
                *c = saved;
                if (!saved)
                        break;
        }
        struct stat st;
        if (stat(path, &st) < 0)
                return -errno;
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static bool has_prefix(const char *s, const char *p)
{
        return strncmp(s, p, strlen(p)) == 0;
}

static int store_open(const char *url, const char *data_dir, bool brief, ab_store **out,
                      ab_err **err)
{
        *out = NULL;
        ab_store *s = NULL;
        int r;
        if (!url || !*url) {
                if (!data_dir || !*data_dir)
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "open store: no store url and no data folder");
                r = mkdir_p(data_dir, 0700);
                if (r < 0)
                        return ab_err_set(err, r == -EACCES ? AB_E_PERMISSION : AB_E_UNAVAILABLE,
                                          -r, "open store: cannot create data folder %s", data_dir);
                _cleanup_free_ char *path = xasprintf("%s/agentbox.db", data_dir);
                r = ab_store_sqlite_open(path, brief, &s, err);
        } else if (has_prefix(url, "sqlite:")) {
                if (!url[7])
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "open store: 'sqlite:' needs a path (sqlite:PATH)");
                r = ab_store_sqlite_open(url + 7, brief, &s, err);
        } else if (has_prefix(url, "postgres://") || has_prefix(url, "postgresql://")) {
                r = ab_store_pg_open(url, &s, err);
        } else {
                /* Only the scheme: the rest may hold a password. */
                size_t n = strcspn(url, ":/");
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "open store: unsupported store url scheme '%.*s': use "
                                  "sqlite:PATH or postgres://...",
                                  (int)(n > 32 ? 32 : n), url);
        }
        if (r < 0)
                return -1;
        pthread_mutex_init(&s->lock, NULL);
        {
                STORE_LOCKED(s);
                if (!schema_current(s))
                        r = in_tx(s, "migrate the schema", migrate_body, NULL, err);
        }
        if (r < 0) {
                ab_store_close(s);
                return -1;
        }
        *out = s;
        return 0;
}

int ab_store_open(const char *url, const char *data_dir, ab_store **out, ab_err **err)
{
        return store_open(url, data_dir, false, out, err);
}

int ab_store_open_brief(const char *url, const char *data_dir, ab_store **out, ab_err **err)
{
        return store_open(url, data_dir, true, out, err);
}

void ab_store_close(ab_store *s)
{
        if (!s)
                return;
        ab_box_cache_clear(s);
        pthread_mutex_destroy(&s->lock);
        s->ops->close(s);
}

const char *ab_store_kind(const ab_store *s)
{
        return s->ops->kind;
}

int ab_store_schema_version(ab_store *s, int *out, ab_err **err)
{
        STORE_LOCKED(s);
        return read_version(s, "read the schema version", out, err);
}

/* ---- boxes ---- */

int ab_store_box_insert(ab_store *s, const ab_box_rec *r, ab_err **err)
{
        if (check_box(r, "insert box", err) < 0)
                return -1;
        _cleanup_free_ char *op = xasprintf("insert box %s/%s", r->provider, r->id);
        ab_sql_arg a[BOX_NCOLS];
        _cleanup_box_text_ box_text t = {0};
        box_args(r, &t, a);
        STORE_LOCKED(s);
        box_changed(s);
        return s->ops->exec(s, op,
                            "INSERT INTO boxes (" BOX_COLS ") VALUES ($1, $2, $3, $4, $5, $6, "
                            "$7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)",
                            a, BOX_NCOLS, NULL, err);
}

/* The store's outside version (ab_store_ops.outside_version) into *ver;
 * false when it has none or cannot read it now (then nothing is cached).
 * The caller holds the lock. */
static bool outside_version(ab_store *s, uint64_t *ver)
{
        _cleanup_res_ ab_sql_res res = {0};
        _cleanup_err_ ab_err *e = NULL;
        if (!s->ops->outside_version ||
            s->ops->exec(s, "read the data version", s->ops->outside_version, NULL, 0, &res, &e) <
                0)
                return false;
        const char *v = cell(&res, 0, 0);
        char *end;
        if (!v || !*v)
                return false;
        errno = 0;
        *ver = strtoull(v, &end, 10);
        return errno == 0 && !*end;
}

int ab_store_box_get(ab_store *s, const char *provider, const char *id, ab_box_rec *out,
                     ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (check_key(provider, id, "get box", err) < 0)
                return -1;
        _cleanup_free_ char *op = xasprintf("get box %s/%s", provider, id);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        /* The outside version first: a commit between it and the SELECT
         * leaves an entry that the next read finds out of date. */
        uint64_t ver;
        bool cacheable = outside_version(s, &ver);
        if (cacheable && ab_box_cache_get(s, provider, id, ver, out))
                return 0;
        if (EXEC(s, op, "SELECT " BOX_COLS " FROM boxes WHERE provider = $1 AND id = $2", &res, err,
                 SQL_TEXT(provider), SQL_TEXT(id)) < 0)
                return -1;
        if (!res.nrows)
                return not_found(err, op, provider, id);
        row_to_box(&res, 0, out);
        if (cacheable)
                ab_box_cache_put(s, out, ver);
        return 0;
}

int ab_store_box_update(ab_store *s, const ab_box_rec *r, ab_err **err)
{
        if (check_box(r, "update box", err) < 0)
                return -1;
        _cleanup_free_ char *op = xasprintf("update box %s/%s", r->provider, r->id);
        _cleanup_res_ ab_sql_res res = {0};
        ab_sql_arg a[BOX_NCOLS];
        _cleanup_box_text_ box_text t = {0};
        box_args(r, &t, a);
        STORE_LOCKED(s);
        box_changed(s);
        if (s->ops->exec(s, op,
                         "UPDATE boxes SET backend_id = $3, app_id = $4, user_id = $5, "
                         "chat_id = $6, thread_id = $7, status = $8, mode = $9, "
                         "created_at = $10, last_active_at = $11, idle_stop_s = $12, "
                         "ttl_s = $13, limits = $14, spec = $15, metadata = $16, error = $17, "
                         "idle_pause_s = $18, node = $19 WHERE provider = $1 AND id = $2",
                         a, BOX_NCOLS, &res, err) < 0)
                return -1;
        return res.changes ? 0 : not_found(err, op, r->provider, r->id);
}

int ab_store_box_set_status(ab_store *s, const char *provider, const char *id, ab_box_status st,
                            ab_box_status exp, const char *error, ab_err **err)
{
        if (check_key(provider, id, "set box status", err) < 0)
                return -1;
        if (!ab_box_status_parse(ab_box_status_name(st)))
                return ab_err_set(err, AB_E_INVALID, 0, "set box status: no status");
        const char *status = ab_box_status_name(st);
        const char *expect = exp ? ab_box_status_name(exp) : NULL;
        _cleanup_free_ char *op = xasprintf("set status of box %s/%s to %s", provider, id, status);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        box_changed(s);
        int r;
        if (expect)
                r = EXEC(s, op,
                         "UPDATE boxes SET status = $3, error = $4 "
                         "WHERE provider = $1 AND id = $2 AND status = $5",
                         &res, err, SQL_TEXT(provider), SQL_TEXT(id), SQL_TEXT(status),
                         SQL_TEXT(error), SQL_TEXT(expect));
        else
                r = EXEC(s, op,
                         "UPDATE boxes SET status = $3, error = $4 WHERE provider = $1 AND id = $2",
                         &res, err, SQL_TEXT(provider), SQL_TEXT(id), SQL_TEXT(status),
                         SQL_TEXT(error));
        if (r < 0)
                return -1;
        if (res.changes)
                return 0;
        ab_sql_res_clear(&res);
        if (EXEC(s, op, "SELECT status FROM boxes WHERE provider = $1 AND id = $2", &res, err,
                 SQL_TEXT(provider), SQL_TEXT(id)) < 0)
                return -1;
        if (!res.nrows)
                return not_found(err, op, provider, id);
        return ab_err_set(err, AB_E_CONFLICT, 0, "%s: the box is %s, not %s", op, cell(&res, 0, 0),
                          expect ? expect : "(any)");
}

int ab_store_box_set_node(ab_store *s, const char *provider, const char *id, const char *node,
                          const char *expect, ab_err **err)
{
        if (check_key(provider, id, "move box", err) < 0)
                return -1;
        if (!node || !*node || !expect || !*expect)
                return ab_err_set(err, AB_E_INVALID, 0, "move box: no node");
        _cleanup_free_ char *op = xasprintf("move box %s/%s to node %s", provider, id, node);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        box_changed(s);
        if (EXEC(s, op,
                 "UPDATE boxes SET node = $3 WHERE provider = $1 AND id = $2 "
                 "AND (node = $4 OR node IS NULL) AND status = 'stopped'",
                 &res, err, SQL_TEXT(provider), SQL_TEXT(id), SQL_TEXT(node), SQL_TEXT(expect)) < 0)
                return -1;
        if (res.changes)
                return 0;
        ab_sql_res_clear(&res);
        if (EXEC(s, op, "SELECT node, status FROM boxes WHERE provider = $1 AND id = $2", &res, err,
                 SQL_TEXT(provider), SQL_TEXT(id)) < 0)
                return -1;
        if (!res.nrows)
                return not_found(err, op, provider, id);
        const char *owner = cell(&res, 0, 0);
        return ab_err_set(err, AB_E_CONFLICT, 0, "%s: the box is %s on node %s, not stopped on %s",
                          op, cell(&res, 0, 1), owner ? owner : "(none)", expect);
}

/* last_active_at = max(last_active_at, at_ms); the caller holds the lock. */
static int touch_locked(ab_store *s, const char *op, const char *provider, const char *id,
                        int64_t at_ms, ab_sql_res *res, ab_err **err)
{
        /* CASE rather than max()/GREATEST(): both dialects know it. */
        return EXEC(s, op,
                    "UPDATE boxes SET last_active_at = CASE WHEN last_active_at < $3 THEN $3 "
                    "ELSE last_active_at END WHERE provider = $1 AND id = $2",
                    res, err, SQL_TEXT(provider), SQL_TEXT(id), SQL_INT(at_ms));
}

int ab_store_box_touch(ab_store *s, const char *provider, const char *id, int64_t at_ms,
                       ab_err **err)
{
        if (check_key(provider, id, "touch box", err) < 0)
                return -1;
        _cleanup_free_ char *op = xasprintf("touch box %s/%s", provider, id);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (touch_locked(s, op, provider, id, at_ms, &res, err) < 0) {
                ab_box_cache_drop(s, provider, id);
                return -1;
        }
        ab_box_cache_touch(s, provider, id, at_ms);
        return res.changes ? 0 : not_found(err, op, provider, id);
}

int ab_store_box_delete(ab_store *s, const char *provider, const char *id, ab_err **err)
{
        if (check_key(provider, id, "delete box", err) < 0)
                return -1;
        _cleanup_free_ char *op = xasprintf("delete box %s/%s", provider, id);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        box_changed(s);
        if (EXEC(s, op, "DELETE FROM boxes WHERE provider = $1 AND id = $2", &res, err,
                 SQL_TEXT(provider), SQL_TEXT(id)) < 0)
                return -1;
        if (!res.changes)
                return not_found(err, op, provider, id);
        _cleanup_res_ ab_sql_res meta = {0};
        return EXEC(s, op, "DELETE FROM file_meta WHERE provider = $1 AND box_id = $2", &meta, err,
                    SQL_TEXT(provider), SQL_TEXT(id));
}

int ab_store_box_list(ab_store *s, const ab_box_filter *f, ab_box_rec **out, size_t *n,
                      ab_err **err)
{
        static const struct {
                const char *col;
                size_t off;
        } filters[] = {
            {"provider", offsetof(ab_box_filter, provider)},
            {"app_id", offsetof(ab_box_filter, app_id)},
            {"user_id", offsetof(ab_box_filter, user_id)},
            {"chat_id", offsetof(ab_box_filter, chat_id)},
            {"thread_id", offsetof(ab_box_filter, thread_id)},
            {"node", offsetof(ab_box_filter, node)},
        };
        *out = NULL;
        *n = 0;
        /* Only column names from the table above go into the text; values are bound. */
        _cleanup_free_ char *sql = xstrdup("SELECT " BOX_COLS " FROM boxes WHERE 1 = 1");
        ab_sql_arg a[AB_ARRAY_LEN(filters) + 3];
        size_t na = 0;
        const char *enums[2][2] = {
            {"status", f && f->status ? ab_box_status_name(f->status) : NULL},
            {"mode", f && f->mode ? ab_box_mode_name(f->mode) : NULL},
        };
        for (size_t i = 0; f && i < AB_ARRAY_LEN(filters) + 2; i++) {
                const char *col, *v;
                if (i < AB_ARRAY_LEN(filters)) {
                        col = filters[i].col;
                        v = *(const char *const *)((const char *)f + filters[i].off);
                } else {
                        col = enums[i - AB_ARRAY_LEN(filters)][0];
                        v = enums[i - AB_ARRAY_LEN(filters)][1];
                }
                if (!v)
                        continue;
                a[na++] = SQL_TEXT(v);
                char *t = xasprintf("%s AND %s = $%zu", sql, col, na);
                free(sql);
                sql = t;
        }
        char *t;
        if (f && f->limit) { /* a page, in id order, after the cursor */
                if (f->after_id) {
                        a[na++] = SQL_TEXT(f->after_id);
                        t = xasprintf("%s AND id > $%zu", sql, na);
                        free(sql);
                        sql = t;
                }
                t = xasprintf("%s ORDER BY id LIMIT %zu", sql, f->limit);
        } else {
                t = xasprintf("%s ORDER BY created_at, id", sql);
        }
        free(sql);
        sql = t;
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (s->ops->exec(s, "list boxes", sql, a, na, &res, err) < 0)
                return -1;
        boxes_from(&res, out, n);
        return 0;
}

int ab_store_box_list_idle(ab_store *s, const char *provider, ab_idle_kind kind, int64_t now_ms,
                           int64_t default_idle_s, ab_box_rec **out, size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        if (!provider)
                return ab_err_set(err, AB_E_INVALID, 0, "list idle boxes: no provider");
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        /* last_active_at + idle * 1000 < now, written as idle <= (now - last - 1) / 1000
         * so that no idle value, however large, overflows. A default <= 0 means the
         * server has none: only boxes with their own value qualify. Only the two
         * fixed texts below go into the SQL. */
        bool pause = kind == AB_IDLE_PAUSE;
        const char *col = pause ? "idle_pause_s" : "idle_stop_s";
        const char *states = pause ? "status = 'running'" : "status IN ('running', 'paused')";
        _cleanup_free_ char *sql =
            xasprintf("SELECT " BOX_COLS " FROM boxes WHERE provider = $1 AND %s "
                      "AND mode <> 'pool' AND (%s > 0 OR (%s = 0 AND $3 > 0)) "
                      "AND $2 - last_active_at > 0 "
                      "AND (CASE WHEN %s > 0 THEN %s ELSE $3 END) "
                      "<= ($2 - last_active_at - 1) / 1000 "
                      "ORDER BY last_active_at, id",
                      states, col, col, col, col);
        if (EXEC(s, "list idle boxes", sql, &res, err, SQL_TEXT(provider), SQL_INT(now_ms),
                 SQL_INT(default_idle_s)) < 0)
                return -1;
        boxes_from(&res, out, n);
        return 0;
}

int ab_store_box_list_expired(ab_store *s, const char *provider, int64_t now_ms, ab_box_rec **out,
                              size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        if (!provider)
                return ab_err_set(err, AB_E_INVALID, 0, "list expired boxes: no provider");
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        /* created_at + ttl_s * 1000 < now, written so that no ttl overflows */
        if (EXEC(s, "list expired boxes",
                 "SELECT " BOX_COLS " FROM boxes WHERE provider = $1 AND ttl_s > 0 "
                 "AND mode <> 'pool' AND status <> 'deleting' AND $2 - created_at > 0 "
                 "AND ttl_s <= ($2 - created_at - 1) / 1000 ORDER BY created_at, id",
                 &res, err, SQL_TEXT(provider), SQL_INT(now_ms)) < 0)
                return -1;
        boxes_from(&res, out, n);
        return 0;
}

int ab_store_box_next_ttl_end(ab_store *s, const char *provider, const char *node, int64_t now_ms,
                              int64_t *out, ab_err **err)
{
        *out = 0;
        if (!provider)
                return ab_err_set(err, AB_E_INVALID, 0, "next TTL end: no provider");
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        /* TTLs past MAX_TTL_S end beyond any reaper's horizon (and would
         * overflow the sum): left out. */
#define NEXT_TTL_SQL                                                                               \
        "SELECT MIN(created_at + ttl_s * 1000) FROM boxes WHERE provider = $1 AND ttl_s > 0 "      \
        "AND ttl_s < 1000000000000 AND mode <> 'pool' AND status <> 'deleting' "                   \
        "AND created_at + ttl_s * 1000 >= $2"
        int rc = node ? EXEC(s, "next TTL end", NEXT_TTL_SQL " AND node = $3", &res, err,
                             SQL_TEXT(provider), SQL_INT(now_ms), SQL_TEXT(node))
                      : EXEC(s, "next TTL end", NEXT_TTL_SQL, &res, err, SQL_TEXT(provider),
                             SQL_INT(now_ms));
#undef NEXT_TTL_SQL
        if (rc < 0)
                return -1;
        if (res.nrows && cell(&res, 0, 0))
                *out = num(&res, 0, 0);
        return 0;
}

int ab_store_box_count_by_status(ab_store *s, const char *provider, char ***statuses,
                                 int64_t **counts, size_t *n, ab_err **err)
{
        *statuses = NULL;
        *counts = NULL;
        *n = 0;
        if (!provider)
                return ab_err_set(err, AB_E_INVALID, 0, "count boxes: no provider");
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (EXEC(s, "count boxes by status",
                 "SELECT status, COUNT(*) FROM boxes WHERE provider = $1 "
                 "GROUP BY status ORDER BY status",
                 &res, err, SQL_TEXT(provider)) < 0)
                return -1;
        if (!res.nrows)
                return 0;
        *statuses = xcalloc(res.nrows, sizeof(char *));
        *counts = xcalloc(res.nrows, sizeof(int64_t));
        for (size_t i = 0; i < res.nrows; i++) {
                (*statuses)[i] = take(&res, i, 0);
                (*counts)[i] = num(&res, i, 1);
        }
        *n = res.nrows;
        return 0;
}

/* ---- warm pool ---- */

struct claim_ctx {
        const ab_box_rec *claim;
        const char *op;
        char *backend_id; /* out: the pooled box's */
};

static int claim_body(ab_store *s, void *p, ab_err **err)
{
        struct claim_ctx *c = p;
        const ab_box_rec *cl = c->claim;
        _cleanup_res_ ab_sql_res res = {0};
        box_changed(s);
        if (EXEC(s, c->op, "SELECT 1 FROM boxes WHERE provider = $1 AND id = $2", &res, err,
                 SQL_TEXT(cl->provider), SQL_TEXT(cl->id)) < 0)
                return -1;
        if (res.nrows)
                return ab_err_set(err, AB_E_CONFLICT, 0, "%s: box '%s' exists already", c->op,
                                  cl->id);
        ab_sql_res_clear(&res);
        if (EXEC(s, c->op, s->ops->claim_select, &res, err, SQL_TEXT(cl->provider),
                 SQL_TEXT(cl->node)) < 0)
                return -1;
        if (!res.nrows)
                return 0;
        _cleanup_free_ char *pool_id = take(&res, 0, 0);
        _cleanup_free_ char *backend_id = take(&res, 0, 1);
        if (!backend_id) /* a pooled box the backend knows by its own id */
                backend_id = xstrdup(pool_id);
        ab_sql_res_clear(&res);
        if (EXEC(s, c->op, "DELETE FROM boxes WHERE provider = $1 AND id = $2", &res, err,
                 SQL_TEXT(cl->provider), SQL_TEXT(pool_id)) < 0)
                return -1;
        if (res.changes != 1)
                return ab_err_set(err, AB_E_INTERNAL, 0, "%s: pooled box '%s' vanished", c->op,
                                  pool_id);
        ab_box_rec row = *cl;
        row.backend_id = backend_id;
        ab_sql_arg a[BOX_NCOLS];
        _cleanup_box_text_ box_text t = {0};
        box_args(&row, &t, a);
        if (s->ops->exec(s, c->op,
                         "INSERT INTO boxes (" BOX_COLS ") VALUES ($1, $2, $3, $4, $5, $6, "
                         "$7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)",
                         a, BOX_NCOLS, NULL, err) < 0)
                return -1;
        c->backend_id = steal_pointer(&backend_id);
        return 1;
}

int ab_store_pool_claim(ab_store *s, ab_box_rec *claim, ab_err **err)
{
        if (check_box(claim, "claim pooled box", err) < 0)
                return -1;
        _cleanup_free_ char *op =
            xasprintf("claim a pooled box of %s for %s", claim->provider, claim->id);
        struct claim_ctx c = {.claim = claim, .op = op};
        int r;
        {
                STORE_LOCKED(s);
                r = in_tx(s, op, claim_body, &c, err);
        }
        if (r == 1) {
                free(claim->backend_id);
                claim->backend_id = steal_pointer(&c.backend_id);
        }
        free(c.backend_id);
        return r;
}

/* ---- exec audit ---- */

static int audit_check(const ab_exec_audit *a, ab_err **err)
{
        if (!a || !a->provider || !a->box_id || !a->command)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "add exec audit: provider, box_id and command are required");
        return 0;
}

/* Inserts a's row; the caller holds the lock. */
static int audit_locked(ab_store *s, const char *op, const ab_exec_audit *a, ab_err **err)
{
        return EXEC(s, op,
                    "INSERT INTO exec_audit (" AUDIT_COLS ") VALUES ($1, $2, $3, $4, $5, $6, "
                    "$7, $8, $9)",
                    NULL, err, SQL_TEXT(a->provider), SQL_TEXT(a->box_id), SQL_TEXT(a->command),
                    SQL_INT(a->exit_code), SQL_INT(a->timed_out ? 1 : 0), SQL_INT(a->started_at),
                    SQL_INT(a->duration_ms), SQL_INT(a->stdout_bytes), SQL_INT(a->stderr_bytes));
}

int ab_store_audit_add(ab_store *s, const ab_exec_audit *a, ab_err **err)
{
        if (audit_check(a, err) < 0)
                return -1;
        _cleanup_free_ char *op = xasprintf("add exec audit of box %s/%s", a->provider, a->box_id);
        STORE_LOCKED(s);
        return audit_locked(s, op, a, err);
}

typedef struct exec_done {
        const char *op;
        const ab_exec_audit *a;
        int64_t touch_ms;
} exec_done;

static int exec_done_body(ab_store *s, void *ctx, ab_err **err)
{
        exec_done *d = ctx;
        if (touch_locked(s, d->op, d->a->provider, d->a->box_id, d->touch_ms, NULL, err) < 0)
                return -1;
        return audit_locked(s, d->op, d->a, err);
}

int ab_store_exec_done(ab_store *s, const ab_exec_audit *a, int64_t touch_ms, ab_err **err)
{
        if (audit_check(a, err) < 0 || check_key(a->provider, a->box_id, "record exec", err) < 0)
                return -1;
        _cleanup_free_ char *op = xasprintf("record exec in box %s/%s", a->provider, a->box_id);
        exec_done d = {.op = op, .a = a, .touch_ms = touch_ms};
        STORE_LOCKED(s);
        int r = in_tx(s, op, exec_done_body, &d, err);
        if (r < 0) /* rolled back, or not known to be */
                ab_box_cache_drop(s, a->provider, a->box_id);
        else
                ab_box_cache_touch(s, a->provider, a->box_id, touch_ms);
        return r;
}

int ab_store_audit_list(ab_store *s, const char *provider, const char *box_id, size_t limit,
                        ab_exec_audit **out, size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        if (check_key(provider, box_id, "list exec audits", err) < 0)
                return -1;
        _cleanup_free_ char *op = xasprintf("list exec audits of box %s/%s", provider, box_id);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (EXEC(s, op,
                 "SELECT " AUDIT_COLS " FROM exec_audit WHERE provider = $1 AND box_id = $2 "
                 "ORDER BY started_at DESC, id DESC LIMIT $3",
                 &res, err, SQL_TEXT(provider), SQL_TEXT(box_id),
                 SQL_INT(limit > INT64_MAX ? INT64_MAX : (int64_t)limit)) < 0)
                return -1;
        if (!res.nrows)
                return 0;
        ab_exec_audit *a = xcalloc(res.nrows, sizeof(*a));
        for (size_t i = 0; i < res.nrows; i++) {
                a[i].provider = take(&res, i, 0);
                a[i].box_id = take(&res, i, 1);
                a[i].command = take(&res, i, 2);
                a[i].exit_code = (int)num(&res, i, 3);
                a[i].timed_out = num(&res, i, 4) != 0;
                a[i].started_at = num(&res, i, 5);
                a[i].duration_ms = num(&res, i, 6);
                a[i].stdout_bytes = num(&res, i, 7);
                a[i].stderr_bytes = num(&res, i, 8);
        }
        *out = a;
        *n = res.nrows;
        return 0;
}

/* ---- API keys ---- */

static void row_to_key(ab_sql_res *r, size_t i, ab_api_key *k)
{
        k->key_id = take(r, i, 0);
        k->key_hash = take(r, i, 1);
        k->app_id = take(r, i, 2);
        k->name = take(r, i, 3);
        k->created_at = num(r, i, 4);
        json_t *q = object_parse(cell(r, i, 5));
        k->has_quotas = q && ab_quota_from_json(q, &k->quotas, NULL) == 0;
        if (!k->has_quotas)
                ab_quota_unset(&k->quotas);
        json_decref(q);
}

int ab_store_key_insert(ab_store *s, const ab_api_key *k, ab_err **err)
{
        if (!k || !k->key_id || !k->key_hash || !k->app_id)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "insert API key: key_id, key_hash and app_id are required");
        _cleanup_free_ char *op = xasprintf("insert API key %s", k->key_id);
        _cleanup_free_ char *quotas = NULL;
        if (k->has_quotas && !ab_quota_is_unset(&k->quotas)) {
                json_t *j = ab_quota_json(&k->quotas, true);
                quotas = object_text(j);
                json_decref(j);
        }
        STORE_LOCKED(s);
        return EXEC(s, op, "INSERT INTO api_keys (" KEY_COLS ") VALUES ($1, $2, $3, $4, $5, $6)",
                    NULL, err, SQL_TEXT(k->key_id), SQL_TEXT(k->key_hash), SQL_TEXT(k->app_id),
                    SQL_TEXT(k->name), SQL_INT(k->created_at), SQL_TEXT(quotas));
}

int ab_store_key_find(ab_store *s, const char *key_hash, ab_api_key *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (!key_hash)
                return ab_err_set(err, AB_E_INVALID, 0, "find API key: no hash");
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (EXEC(s, "find API key", "SELECT " KEY_COLS " FROM api_keys WHERE key_hash = $1", &res,
                 err, SQL_TEXT(key_hash)) < 0)
                return -1;
        if (!res.nrows)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "find API key: no such key");
        row_to_key(&res, 0, out);
        return 0;
}

static void rows_to_keys(ab_sql_res *res, ab_api_key **out, size_t *n)
{
        if (!res->nrows)
                return;
        *out = xcalloc(res->nrows, sizeof(**out));
        for (size_t i = 0; i < res->nrows; i++)
                row_to_key(res, i, &(*out)[i]);
        *n = res->nrows;
}

int ab_store_key_list(ab_store *s, ab_api_key **out, size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (EXEC0(s, "list API keys",
                  "SELECT " KEY_COLS " FROM api_keys ORDER BY created_at, key_id", &res, err) < 0)
                return -1;
        rows_to_keys(&res, out, n);
        return 0;
}

int ab_store_key_list_app(ab_store *s, const char *app_id, ab_api_key **out, size_t *n,
                          ab_err **err)
{
        *out = NULL;
        *n = 0;
        if (!app_id)
                return 0;
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (EXEC(s, "list API keys of an app",
                 "SELECT " KEY_COLS " FROM api_keys WHERE app_id = $1 ORDER BY created_at, key_id",
                 &res, err, SQL_TEXT(app_id)) < 0)
                return -1;
        rows_to_keys(&res, out, n);
        return 0;
}

int ab_store_key_get(ab_store *s, const char *key_id, ab_api_key *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        if (!key_id)
                return ab_err_set(err, AB_E_INVALID, 0, "get API key: no key id");
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (EXEC(s, "get API key", "SELECT " KEY_COLS " FROM api_keys WHERE key_id = $1", &res, err,
                 SQL_TEXT(key_id)) < 0)
                return -1;
        if (!res.nrows)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "API key %s: no such key", key_id);
        row_to_key(&res, 0, out);
        return 0;
}

int ab_store_key_delete(ab_store *s, const char *key_id, ab_err **err)
{
        if (!key_id)
                return ab_err_set(err, AB_E_INVALID, 0, "delete API key: no key id");
        _cleanup_free_ char *op = xasprintf("delete API key %s", key_id);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (EXEC(s, op, "DELETE FROM api_keys WHERE key_id = $1", &res, err, SQL_TEXT(key_id)) < 0)
                return -1;
        if (!res.changes)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "%s: no such key", op);
        return 0;
}

/* ---- chat sessions and their history ---- */

/* The admin's rows carry app_id '' (the column is part of the key). */
static const char *chat_app(const char *app_id)
{
        return app_id ? app_id : "";
}

int ab_store_chat_session_insert(ab_store *s, const char *app_id, const char *thread_id,
                                 ab_err **err)
{
        _cleanup_free_ char *op = xasprintf("create chat session %s", thread_id);
        STORE_LOCKED(s);
        return EXEC(s, op,
                    "INSERT INTO chat_sessions (app_id, thread_id, created_at) VALUES ($1, $2, $3)",
                    NULL, err, SQL_TEXT(chat_app(app_id)), SQL_TEXT(thread_id), SQL_INT(wall_ms()));
}

int ab_store_chat_session_get(ab_store *s, const char *app_id, const char *thread_id, ab_err **err)
{
        _cleanup_free_ char *op = xasprintf("read chat session %s", thread_id);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (EXEC(s, op, "SELECT created_at FROM chat_sessions WHERE app_id = $1 AND thread_id = $2",
                 &res, err, SQL_TEXT(chat_app(app_id)), SQL_TEXT(thread_id)) < 0)
                return -1;
        if (!res.nrows)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no session %s", thread_id);
        return 0;
}

int ab_store_chat_session_delete(ab_store *s, const char *app_id, const char *thread_id,
                                 ab_err **err)
{
        _cleanup_free_ char *op = xasprintf("delete chat session %s", thread_id);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (s->ops->begin(s, op, err) < 0)
                return -1;
        if (EXEC(s, op, "DELETE FROM chat_messages WHERE app_id = $1 AND thread_id = $2", NULL, err,
                 SQL_TEXT(chat_app(app_id)), SQL_TEXT(thread_id)) < 0 ||
            EXEC(s, op, "DELETE FROM chat_sessions WHERE app_id = $1 AND thread_id = $2", &res, err,
                 SQL_TEXT(chat_app(app_id)), SQL_TEXT(thread_id)) < 0) {
                s->ops->rollback(s);
                return -1;
        }
        if (s->ops->commit(s, op, err) < 0) {
                s->ops->rollback(s);
                return -1;
        }
        if (!res.changes)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no session %s", thread_id);
        return 0;
}

int ab_store_chat_append(ab_store *s, const char *app_id, const char *thread_id,
                         const char *const *roles, const char *const *messages, size_t n,
                         ab_err **err)
{
        _cleanup_free_ char *op = xasprintf("append to chat %s", thread_id);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (s->ops->begin(s, op, err) < 0)
                return -1;
        /* The session may have been deleted while its turn ran: no orphans. */
        if (EXEC(s, op,
                 "SELECT (SELECT COUNT(*) FROM chat_sessions WHERE app_id = $1 AND thread_id = "
                 "$2), (SELECT COALESCE(MAX(seq), 0) FROM chat_messages WHERE app_id = $1 AND "
                 "thread_id = $2)",
                 &res, err, SQL_TEXT(chat_app(app_id)), SQL_TEXT(thread_id)) < 0)
                goto fail;
        if (num(&res, 0, 0) == 0) {
                ab_err_set(err, AB_E_NOT_FOUND, 0, "no session %s", thread_id);
                goto fail;
        }
        int64_t seq = num(&res, 0, 1), now = wall_ms();
        for (size_t i = 0; i < n; i++)
                if (EXEC(s, op,
                         "INSERT INTO chat_messages (app_id, thread_id, seq, role, message, "
                         "created_at) VALUES ($1, $2, $3, $4, $5, $6)",
                         NULL, err, SQL_TEXT(chat_app(app_id)), SQL_TEXT(thread_id),
                         SQL_INT(seq + 1 + (int64_t)i), SQL_TEXT(roles[i]), SQL_TEXT(messages[i]),
                         SQL_INT(now)) < 0)
                        goto fail;
        if (s->ops->commit(s, op, err) < 0)
                goto fail;
        return 0;
fail:
        s->ops->rollback(s);
        return -1;
}

int ab_store_chat_history(ab_store *s, const char *app_id, const char *thread_id, size_t limit,
                          char ***messages, size_t *n, ab_err **err)
{
        *messages = NULL;
        *n = 0;
        _cleanup_free_ char *op = xasprintf("read chat %s", thread_id);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        /* The newest `limit`, given oldest first. */
        if (EXEC(s, op,
                 "SELECT message FROM (SELECT seq, message FROM chat_messages WHERE app_id = $1 "
                 "AND thread_id = $2 ORDER BY seq DESC LIMIT $3) t ORDER BY seq",
                 &res, err, SQL_TEXT(chat_app(app_id)), SQL_TEXT(thread_id),
                 SQL_INT(limit > INT64_MAX ? INT64_MAX : (int64_t)limit)) < 0)
                return -1;
        char **v = xcalloc(res.nrows + 1, sizeof(*v));
        for (size_t i = 0; i < res.nrows; i++)
                v[i] = take(&res, i, 0);
        *messages = v;
        *n = res.nrows;
        return 0;
}
/* ---- fleet nodes ---- */

#define NODE_COLS                                                                                  \
        "id, url, draining, started_at, heartbeat_at, running, mem_total, mem_avail, "             \
        "disk_total, disk_avail"

void ab_node_rec_clear(ab_node_rec *n)
{
        if (!n)
                return;
        free(n->id);
        free(n->url);
        memset(n, 0, sizeof(*n));
}

void ab_node_recs_free(ab_node_rec *n, size_t count)
{
        if (!n)
                return;
        for (size_t i = 0; i < count; i++)
                ab_node_rec_clear(&n[i]);
        free(n);
}

static void row_to_node(ab_sql_res *r, size_t i, ab_node_rec *n)
{
        n->id = take(r, i, 0);
        n->url = take(r, i, 1);
        n->draining = num(r, i, 2) != 0;
        n->started_at = num(r, i, 3);
        n->heartbeat_at = num(r, i, 4);
        n->running = num(r, i, 5);
        n->mem_total = num(r, i, 6);
        n->mem_avail = num(r, i, 7);
        n->disk_total = num(r, i, 8);
        n->disk_avail = num(r, i, 9);
}

int ab_store_node_beat(ab_store *s, const ab_node_rec *n, ab_err **err)
{
        if (!n->id || !*n->id || !n->url || !*n->url)
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "node heartbeat: a node needs an id and a url");
        _cleanup_free_ char *op = xasprintf("heartbeat of node %s", n->id);
        STORE_LOCKED(s);
        return EXEC(s, op,
                    "INSERT INTO nodes (" NODE_COLS ") VALUES ($1, $2, 0, $3, $4, $5, $6, $7, $8, "
                    "$9) ON CONFLICT (id) DO UPDATE SET url = $2, started_at = $3, "
                    "heartbeat_at = $4, running = $5, mem_total = $6, mem_avail = $7, "
                    "disk_total = $8, disk_avail = $9",
                    NULL, err, SQL_TEXT(n->id), SQL_TEXT(n->url), SQL_INT(n->started_at),
                    SQL_INT(n->heartbeat_at), SQL_INT(n->running), SQL_INT(n->mem_total),
                    SQL_INT(n->mem_avail), SQL_INT(n->disk_total), SQL_INT(n->disk_avail));
}

int ab_store_node_list(ab_store *s, ab_node_rec **out, size_t *n, ab_err **err)
{
        *out = NULL;
        *n = 0;
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (EXEC0(s, "list nodes", "SELECT " NODE_COLS " FROM nodes ORDER BY id", &res, err) < 0)
                return -1;
        if (!res.nrows)
                return 0;
        *out = xcalloc(res.nrows, sizeof(**out));
        *n = res.nrows;
        for (size_t i = 0; i < res.nrows; i++)
                row_to_node(&res, i, &(*out)[i]);
        return 0;
}

int ab_store_node_get(ab_store *s, const char *id, ab_node_rec *out, ab_err **err)
{
        memset(out, 0, sizeof(*out));
        _cleanup_free_ char *op = xasprintf("get node %s", id);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (EXEC(s, op, "SELECT " NODE_COLS " FROM nodes WHERE id = $1", &res, err, SQL_TEXT(id)) <
            0)
                return -1;
        if (!res.nrows)
                return ab_err_set(err, AB_E_NOT_FOUND, 0, "no node \"%s\"", id);
        row_to_node(&res, 0, out);
        return 0;
}

int ab_store_node_set_draining(ab_store *s, const char *id, bool draining, ab_err **err)
{
        _cleanup_free_ char *op = xasprintf("%s node %s", draining ? "drain" : "undrain", id);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (EXEC(s, op, "UPDATE nodes SET draining = $2 WHERE id = $1", &res, err, SQL_TEXT(id),
                 SQL_INT(draining)) < 0)
                return -1;
        return res.changes ? 0 : ab_err_set(err, AB_E_NOT_FOUND, 0, "no node \"%s\"", id);
}

/* ---- locks between processes ---- */

int ab_store_lock(ab_store *s, const char *name, int timeout_ms, ab_err **err)
{
        if (!s->ops->lock_try)
                return 0;
        int64_t end = wall_ms() + timeout_ms;
        for (;;) {
                _cleanup_res_ ab_sql_res res = {0};
                {
                        STORE_LOCKED(s);
                        if (EXEC(s, "take a lock", s->ops->lock_try, &res, err, SQL_TEXT(name)) < 0)
                                return -1;
                }
                const char *got = cell(&res, 0, 0);
                if (got && (!strcmp(got, "t") || !strcmp(got, "1")))
                        return 0;
                if (wall_ms() >= end)
                        return ab_err_set(err, AB_E_UNAVAILABLE, 0,
                                          "the lock \"%s\" is held elsewhere; try again", name);
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
        }
}

void ab_store_unlock(ab_store *s, const char *name)
{
        if (!s->ops->lock_release)
                return;
        STORE_LOCKED(s);
        EXEC(s, "release a lock", s->ops->lock_release, NULL, NULL, SQL_TEXT(name));
}

int ab_store_notify(ab_store *s, const char *channel, const char *payload, ab_err **err)
{
        if (!s->ops->notify)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "notify: the %s store has no notifications", s->ops->kind);
        STORE_LOCKED(s);
        return EXEC(s, "notify", s->ops->notify, NULL, err, SQL_TEXT(channel), SQL_TEXT(payload));
}

/* ---- file metadata ----------------------------------------------------------------- */

/* What the paths under path begin with: "/" for the root, else path + "/". */
static char *under_prefix(const char *path)
{
        return !strcmp(path, "/") ? xstrdup("/") : xasprintf("%s/", path);
}

/* Matches path $3 and the paths under it ($4, its under_prefix). */
#define META_UNDER "(path = $3 OR substr(path, 1, length(CAST($4 AS TEXT))) = $4)"

static int meta_drop(ab_store *s, const char *op, const char *provider, const char *id,
                     const char *path, ab_err **err)
{
        _cleanup_free_ char *pre = under_prefix(path);
        _cleanup_res_ ab_sql_res res = {0};
        return EXEC(s, op,
                    "DELETE FROM file_meta WHERE provider = $1 AND box_id = $2 AND " META_UNDER,
                    &res, err, SQL_TEXT(provider), SQL_TEXT(id), SQL_TEXT(path), SQL_TEXT(pre));
}

int ab_store_file_meta_set(ab_store *s, const char *provider, const char *id, const char *creation,
                           const char *path, json_t *meta, ab_err **err)
{
        if (check_key(provider, id, "set file metadata", err) < 0)
                return -1;
        if (!path || !creation)
                return ab_err_set(err, AB_E_INVALID, 0, "set file metadata: no path or creation");
        _cleanup_free_ char *op = xasprintf("set file metadata %s/%s %s", provider, id, path);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (!meta || !json_object_size(meta))
                return EXEC(s, op,
                            "DELETE FROM file_meta WHERE provider = $1 AND box_id = $2 AND "
                            "path = $3",
                            &res, err, SQL_TEXT(provider), SQL_TEXT(id), SQL_TEXT(path));
        _cleanup_free_ char *txt = json_dumps(meta, JSON_COMPACT | JSON_SORT_KEYS);
        return EXEC(s, op,
                    "INSERT INTO file_meta (provider, box_id, creation, path, metadata) "
                    "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (provider, box_id, path) "
                    "DO UPDATE SET creation = $3, metadata = $5",
                    &res, err, SQL_TEXT(provider), SQL_TEXT(id), SQL_TEXT(creation), SQL_TEXT(path),
                    SQL_TEXT(txt));
}

int ab_store_file_meta_get(ab_store *s, const char *provider, const char *id, const char *creation,
                           const char *path, json_t **out, ab_err **err)
{
        *out = NULL;
        if (check_key(provider, id, "get file metadata", err) < 0)
                return -1;
        if (!path || !creation)
                return ab_err_set(err, AB_E_INVALID, 0, "get file metadata: no path or creation");
        _cleanup_free_ char *pre = under_prefix(path);
        _cleanup_res_ ab_sql_res res = {0};
        STORE_LOCKED(s);
        if (EXEC(s, "get file metadata",
                 "SELECT path, metadata FROM file_meta WHERE provider = $1 AND box_id = $2 "
                 "AND " META_UNDER " AND creation = $5",
                 &res, err, SQL_TEXT(provider), SQL_TEXT(id), SQL_TEXT(path), SQL_TEXT(pre),
                 SQL_TEXT(creation)) < 0)
                return -1;
        json_t *o = json_object();
        for (size_t i = 0; i < res.nrows; i++) {
                const char *p = res.cells[i * res.ncols], *m = res.cells[i * res.ncols + 1];
                json_t *j = m ? json_loads(m, 0, NULL) : NULL;
                if (p && json_is_object(j))
                        json_object_set_new(o, p, j);
                else
                        json_decref(j);
        }
        *out = o;
        return 0;
}

int ab_store_file_meta_move(ab_store *s, const char *provider, const char *id, const char *from,
                            const char *to, ab_err **err)
{
        if (check_key(provider, id, "move file metadata", err) < 0)
                return -1;
        if (!from || !to)
                return ab_err_set(err, AB_E_INVALID, 0, "move file metadata: no path");
        if (!strcmp(from, to))
                return 0;
        _cleanup_free_ char *op = xasprintf("move file metadata %s/%s %s", provider, id, from);
        _cleanup_free_ char *pre = under_prefix(from), *to_pre = under_prefix(to);
        _cleanup_res_ ab_sql_res a = {0}, b = {0};
        STORE_LOCKED(s);
        if (s->ops->begin(s, op, err) < 0)
                return -1;
        if (meta_drop(s, op, provider, id, to, err) < 0 ||
            EXEC(s, op,
                 "UPDATE file_meta SET path = $4 WHERE provider = $1 AND box_id = $2 AND "
                 "path = $3",
                 &a, err, SQL_TEXT(provider), SQL_TEXT(id), SQL_TEXT(from), SQL_TEXT(to)) < 0 ||
            EXEC(s, op,
                 "UPDATE file_meta SET path = $4 || substr(path, length(CAST($3 AS TEXT)) "
                 "+ 1) "
                 "WHERE provider = $1 AND box_id = $2 AND "
                 "substr(path, 1, length(CAST($3 AS TEXT))) = $3",
                 &b, err, SQL_TEXT(provider), SQL_TEXT(id), SQL_TEXT(pre), SQL_TEXT(to_pre)) < 0 ||
            s->ops->commit(s, op, err) < 0) {
                s->ops->rollback(s);
                return -1;
        }
        return 0;
}

int ab_store_file_meta_delete(ab_store *s, const char *provider, const char *id, const char *path,
                              ab_err **err)
{
        if (check_key(provider, id, "delete file metadata", err) < 0)
                return -1;
        if (!path)
                return ab_err_set(err, AB_E_INVALID, 0, "delete file metadata: no path");
        STORE_LOCKED(s);
        return meta_drop(s, "delete file metadata", provider, id, path, err);
}
