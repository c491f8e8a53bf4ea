#!/usr/bin/env python3
"""An upgrade across the change of box ids (docs/api.md "Box ids"): boxes
of the first id scheme (16 hex digits of sha256(app-user-chat) and of
sha256(thread_id)) in a database of schema version 3 are still reached by
their keys and their old ids once a server of version 4 has migrated it,
with their files; new keys get ids of the new scheme; the migration adds
the one-box-per-keys indexes. On SQLite always, on PostgreSQL when
AGENTBOX_TEST_PG_URL is set (a database of its own, dropped at the end)."""
import os
import sqlite3
import subprocess
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import chat_box_id, legacy_chat_box_id, legacy_thread_box_id, thread_box_id  # noqa: E402

h = abserver.ServerHarness(budget=200)
TOKEN = "upgrade-admin-token-0123456789"
KEY = "upgrade-key-app-up-0123456789"
admin_url = os.environ.get("AGENTBOX_TEST_PG_URL")

OLD_KEYS = legacy_chat_box_id("up", "u", "c")
OLD_THREAD = legacy_thread_box_id("th")  # app up's thread
OLD_ADMIN_THREAD = legacy_thread_box_id("ath")  # the admin's thread


def to_version_3(run_sql):
    """What a database of the first scheme looks like: the boxes' keys, no
    version 4 (as the earlier agentbox left it)."""
    for sql in ("UPDATE boxes SET app_id = 'up', user_id = 'u', chat_id = 'c' WHERE id = '%s'" % OLD_KEYS,
                "UPDATE boxes SET app_id = 'up', thread_id = 'th' WHERE id = '%s'" % OLD_THREAD,
                "UPDATE boxes SET thread_id = 'ath' WHERE id = '%s'" % OLD_ADMIN_THREAD,
                "DROP INDEX boxes_keys", "DROP INDEX boxes_thread",
                # what versions 5 to 8 added: the chat's tables, the fleet's nodes
                # and boxes' owner node, file metadata, the keys-by-app index
                "DROP TABLE chat_messages", "DROP TABLE chat_sessions",
                "DROP TABLE nodes", "DROP INDEX boxes_node", "ALTER TABLE boxes DROP COLUMN node",
                "DROP TABLE file_meta", "DROP INDEX api_keys_app",
                "DELETE FROM schema_migrations WHERE version >= 4"):
        run_sql(sql)


def run(kind, store_url, sql_fns):
    """sql_fns(data) gives (run_sql, query_sql) on the server's database."""
    cfg = {"api_keys": [{"key": KEY, "app_id": "up"}], "idle_pause": "1h", "idle_stop": "2h"}
    data = h.new_data_dir(kind)
    run_sql, query_sql = sql_fns(data)
    if store_url:
        cfg["store"] = store_url
    srv = h.start_server(config=cfg, name="up-" + kind, token=TOKEN, data=data)
    for bid in (OLD_KEYS, OLD_THREAD, OLD_ADMIN_THREAD):
        r = srv.post("/v1/sandboxes", {"id": bid})
        h.eq(r.status, 201, "%s: the admin makes box %s (an id of the first scheme)" % (kind, bid), r.describe())
        r = srv.exec(bid, "echo kept-%s > /workspace/kept" % bid)
        h.eq(r.status, 200, "%s: a file in it" % kind, r.describe())
    srv.stop()
    to_version_3(run_sql)
    h.eq(query_sql("SELECT MAX(version) FROM schema_migrations"), "3", "%s: a database of version 3" % kind)

    srv.start()
    v = query_sql("SELECT MAX(version) FROM schema_migrations")
    h.ok(v.isdigit() and int(v) >= 4, "%s: migrated to version 4 and on (%s)" % (kind, v))
    for what, token, body, bid in (
            ("keys", KEY, {"user_id": "u", "chat_id": "c"}, OLD_KEYS),
            ("app up's thread", KEY, {"thread_id": "th"}, OLD_THREAD),
            ("the admin's thread", TOKEN, {"thread_id": "ath"}, OLD_ADMIN_THREAD)):
        r = srv.post("/v1/sandboxes", body, token=token)
        h.eq((r.status, r.get("id")), (200, bid), "%s: %s still acquire the old box" % (kind, what), r.describe())
        r = srv.exec(bid, "cat /workspace/kept", token=token)
        h.eq((r.status, r.get("stdout")), (200, "kept-%s\n" % bid), "%s: ... with its files, by its old id" % kind,
             r.describe())
    r = srv.post("/v1/sandboxes", {"thread_id": "th"}, token=TOKEN)
    h.ok(r.status == 201 and r.get("id") == thread_box_id("th") and r.get("app_id") is None,
         "%s: the admin's thread th is not app up's old box" % kind, r.describe())
    r = srv.post("/v1/sandboxes", {"user_id": "u2", "chat_id": "c2"}, token=KEY)
    h.eq((r.status, r.get("id")), (201, chat_box_id("up", "u2", "c2")), "%s: new keys, an id of the new scheme" % kind,
         r.describe())
    h.ok(query_sql("SELECT COUNT(*) FROM boxes WHERE app_id = 'up' AND user_id = 'u' AND chat_id = 'c'") == "1",
         "%s: one box of the keys" % kind)
    srv.stop()


# ---- SQLite ------------------------------------------------------------------------------

def sqlite_fns(data):
    path = os.path.join(data, "agentbox.db")

    def run_sql(sql):
        with sqlite3.connect(path) as c:
            c.execute(sql)

    def query_sql(sql):
        with sqlite3.connect(path) as c:
            v = c.execute(sql).fetchone()[0]
        return None if v is None else str(v)
    return run_sql, query_sql


run("sqlite", None, sqlite_fns)

# ---- PostgreSQL --------------------------------------------------------------------------

if admin_url:
    db = "agentbox_ids_%d" % os.getpid()

    def psql(url, sql):
        return subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql], capture_output=True,
                              text=True, timeout=30)

    r = psql(admin_url, "CREATE DATABASE %s" % db)
    if r.returncode != 0:
        h.bail_out("cannot create a test database: %s" % r.stderr.strip())
    u = urllib.parse.urlsplit(admin_url)
    url = urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + db, u.query, u.fragment))

    def pg_run(sql):
        r = psql(url, sql)
        h.ok(r.returncode == 0, "postgres: %s" % sql[:60], r.stderr)

    def pg_query(sql):
        r = psql(url, sql)
        return r.stdout.strip() if r.returncode == 0 else None

    try:
        run("postgres", url, lambda data: (pg_run, pg_query))
    finally:
        psql(admin_url, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)
else:
    h.ok(True, "postgres # SKIP AGENTBOX_TEST_PG_URL is not set")
h.done()
