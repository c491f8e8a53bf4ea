"""The E2B front at the edges where E2B's own service behaves in a way a
program may rely on (docs/compat-e2b.md), driven by both E2B JS SDKs the
project pins (tests/e2b/package.json: `e2b` 2.51.0 and `e2b-2.45.0`, an npm
alias of 2.45.0), one server for both: tests/e2b/edges.mjs checks connect
(SDK 2.45's /sandboxes/{id}/connect, a missing sandbox as
SandboxNotFoundError, a connect that only extends the timeout), isRunning
after pause, removing a missing file, a symlink's absolute target, a sandbox
killed while a command streams (TimeoutError), setTimeout(5000) ending the
sandbox at about 5 s, keys minted in E2B's form (`e2b_` + hex) that the
SDK's own key check accepts, gzip uploads, file metadata (written, read,
listed, carried by a rename, dropped by a rewrite or removal). Then, here
over plain HTTP: the envd version the answers carry, and file metadata
across a restart of the server.

Without node or the SDKs installed (and no way to install them) the file is
skipped."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import taprelay  # noqa: E402

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
E2B_DIR = os.path.join(ROOT, "tests", "e2b")
SDKS = taprelay.E2B_SDKS

h = abserver.ServerHarness(budget=240)
node = taprelay.need_e2b_sdks(h)

TOKEN = "e2b-edges-token-%s-0123456789" % os.getpid()
# a long reaper interval: a timeout must end the sandbox on time, not at a scan
srv = h.start_server(token=TOKEN, config={"reaper_interval": "60s"})

for sdk in SDKS:
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update({"E2B_API_URL": srv.url + "/e2b", "E2B_SANDBOX_URL": srv.url + "/e2b/envd", "E2B_API_KEY": TOKEN,
                "E2B_SDK_MODULE": sdk, "E2B_VALIDATE_API_KEY": "false"})
    taprelay.relay(h, [node, os.path.join(E2B_DIR, "edges.mjs"), srv.url, TOKEN], env, E2B_DIR,
                   label=sdk, timeout=150, min_checks=15)

r = srv.post("/e2b/v2/sandboxes", {"timeout": 600}, headers={"X-API-Key": TOKEN}, token=None)
h.ok(r.status == 201 and r.get("envdVersion") == "0.6.4", "the create answer: envdVersion 0.6.4", r.describe())
sid, tok = r.get("sandboxID") or "", r.get("envdAccessToken") or ""
ENVD = {"E2b-Sandbox-Id": sid, "X-Access-Token": tok}


def stat(path):
    return srv.request("POST", "/e2b/envd/filesystem.Filesystem/Stat", body={"path": path},
                       headers=dict(ENVD, **{"Content-Type": "application/json"}), token=None)


# file metadata: kept by the store, so a restart of the server keeps it
r = srv.request("POST", "/e2b/envd/files", body=b"kept", token=None, query={"path": "/tmp/kept.txt"},
                headers=dict(ENVD, **{"Content-Type": "application/octet-stream", "X-Metadata-Who": "me"}))
h.ok(r.status == 200 and isinstance(r.json, list) and r.json and r.json[0].get("metadata") == {"Who": "me"},
     "an upload with X-Metadata-Who: the entry carries it", r.describe())
r = srv.request("POST", "/e2b/envd/files", body=b"x", token=None, query={"path": "/tmp/bad.txt"},
                headers=dict(ENVD, **{"Content-Type": "application/octet-stream", "X-Metadata-K": "caf\u00e9"}))
h.eq(r.status, 400, "a metadata value that is not printable ASCII: 400", r.describe())
h.eq(stat("/tmp/bad.txt").status, 404, "... and nothing written")
srv.restart()
r = stat("/tmp/kept.txt")
h.ok(r.status == 200 and (r.get("entry") or {}).get("metadata") == {"Who": "me"},
     "after a restart of the server, Stat still has the metadata", r.describe())
srv.request("DELETE", "/e2b/sandboxes/" + sid, headers={"X-API-Key": TOKEN}, token=None)
h.done()
