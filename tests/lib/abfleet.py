"""A fleet of agentbox servers for the tests (docs/fleet.md): N servers on
127.0.0.1, 127.0.0.2, ... (placement local unless asked: a box lives on the
node that made it) sharing one PostgreSQL database of their own, made on the
suite's PostgreSQL
(AGENTBOX_TEST_PG_URL, scripts/pg.sh) and dropped by close(); one port for
all, a data dir each."""
import os
import subprocess
import urllib.parse

import abserver

SECRET = "fleet-secret-0123456789abcdef0123456789abcdef"
TOKEN = "fleet-admin-token-0123456789"


def psql(admin_url, sql):
    return subprocess.run(["psql", admin_url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql],
                          capture_output=True, text=True, timeout=30)


class Fleet:
    def __init__(self, h, n=3, config=None, heartbeat="300ms", down_after="1500ms", name="fleet",
                 placement="local"):
        self.h = h
        self.admin_url = os.environ.get("AGENTBOX_TEST_PG_URL")
        if not self.admin_url:
            h.skip_all("AGENTBOX_TEST_PG_URL is not set (scripts/test.sh starts PostgreSQL with "
                       "scripts/pg.sh): a fleet needs a shared PostgreSQL store")
        self.db = "agentbox_%s_%d" % (name, os.getpid())
        r = psql(self.admin_url, "CREATE DATABASE %s" % self.db)
        if r.returncode != 0:
            h.bail_out("cannot create a test database: %s" % r.stderr.strip())
        self.dropped = False
        u = urllib.parse.urlsplit(self.admin_url)
        self.store_url = urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + self.db, u.query, u.fragment))
        self.secret_file = os.path.join(h.root, "fleet.secret")
        fd = os.open(self.secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, (SECRET + "\n").encode())
        os.close(fd)
        self.port = abserver.free_port(tuple("127.0.0.%d" % (i + 1) for i in range(n)))
        self.nodes = []
        for i in range(n):
            host = "127.0.0.%d" % (i + 1)
            cfg = {"store": self.store_url,
                   "fleet": {"node": "n%d" % (i + 1), "url": "http://%s:%d" % (host, self.port),
                             "secret_file": self.secret_file, "heartbeat": heartbeat,
                             "down_after": down_after, "placement": placement}}
            cfg.update(config or {})
            data = h.data if i == 0 else h.new_data_dir("node%d" % (i + 1))
            s = h.server(config=cfg, token=TOKEN, name="n%d" % (i + 1), data=data, listen_host=host)
            s.host = host
            s.port = self.port
            self.nodes.append(s)
        for s in self.nodes:
            why = s.start(new_port=False)
            if why:
                self.close()  # bail_server exits at once
                h.bail_server(s, why)

    def two_apps(self):
        """Keys of two apps made on n1 (A's, B's) and app B's box there, with
        /workspace/b.txt holding "b-secret" (checked: the box is made on n1);
        returns (A's key, B's key, B's box id)."""
        n1 = self.nodes[0]
        ka = n1.post("/v1/keys", {"app_id": "appa"}).get("key") or "none"
        kb = n1.post("/v1/keys", {"app_id": "appb"}).get("key") or "none"
        r = n1.post("/v1/sandboxes", {"app_id": "appb", "user_id": "u", "chat_id": "c"}, token=kb)
        self.h.eq((r.status, r.get("node")), (201, "n1"), "app B's box on n1", r.describe())
        bb = r.get("id") or "none"
        n1.exec(bb, "echo b-secret > /workspace/b.txt", token=kb)
        return ka, kb, bb

    def node(self, name):
        return self.nodes[int(name[1:]) - 1]

    def _drop(self):
        if self.dropped:
            return
        self.dropped = True
        r = psql(self.admin_url, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % self.db)
        if r.returncode != 0:
            self.h.diag("could not drop %s: %s" % (self.db, r.stderr.strip()))

    def close(self):
        for s in self.nodes:
            s.stop()
        self._drop()
