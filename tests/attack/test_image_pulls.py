#!/usr/bin/env python3
"""Image pulls are not a way in (issue 24, item 16).

An app key could make the server fetch from any address (loopback, private):
by the reference itself, by a registry's redirect, by a token realm, or by a
name that resolves inside. And a layer whose uncompressed digest did not
match the config's rootfs.diff_ids was accepted and boxes ran from it. Each
check below is one attack; it passes only when the attack fails.

Nothing here can send a packet off this machine: the test first moves itself
(and so the server) into a network and mount namespace of its own. The
"inside" victim is an HTTP service on the namespace's 127.0.0.1:80 that logs
every request. "ghcr.io" and "quay.io" are names of an /etc/hosts
bind-mounted in the test's mount namespace (plain HTTP allowed for them by
the config): ghcr.io is a fake registry in a second namespace at
198.51.100.10 that answers with a token realm or a redirect to the victim;
quay.io resolves to 127.0.0.1 itself. Both are in the default list of
registries apps may use, so the refusals come from the address checks.
Real images come from a registry on loopback (tests/lib/registry.py).
"""
import atexit
import ctypes
import gzip
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import threading

CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_isolated = os.geteuid() == 0 and _libc.unshare(CLONE_NEWNS | CLONE_NEWNET) == 0
if _isolated:
    _isolated = subprocess.run(["mount", "--make-rprivate", "/"]).returncode == 0 and \
        subprocess.run(["ip", "link", "set", "lo", "up"]).returncode == 0

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attacklib as al  # noqa: E402
import abserver  # noqa: E402
import registry  # noqa: E402

h = abserver.ServerHarness(budget=200)
if not _isolated:
    h.skip_all("needs root to make its own network and mount namespaces (nothing may leave the machine)")
why = registry.missing()
if why:
    h.skip_all(why)
if not os.path.exists("/bin/busybox"):
    h.skip_all("busybox-static is not installed (scripts/deps.sh installs it)")

OUT_IP, VETH_IP = "198.51.100.10", "198.51.100.1"
tag = "%x" % (os.getpid() & 0xffff)
NS_OUT = "abip-" + tag


def sh(*args, timeout=30):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)


procs = []


def cleanup():
    for p in procs:
        p.kill()
        p.wait()
    procs.clear()
    sh("ip", "netns", "del", NS_OUT)
    try:
        os.unlink("/run/netns/" + NS_OUT)
    except OSError:
        pass


atexit.register(cleanup)

etc = os.path.join(h.root, "etc")
os.makedirs(etc)
with open(os.path.join(etc, "hosts"), "w") as f:
    f.write("127.0.0.1 localhost\n%s ghcr.io\n127.0.0.1 quay.io\n" % OUT_IP)
with open(os.path.join(etc, "resolv.conf"), "w") as f:
    f.write("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
for name in ("hosts", "resolv.conf"):
    if sh("mount", "--bind", os.path.join(etc, name), "/etc/" + name).returncode != 0:
        h.skip_all("cannot bind-mount a test /etc/%s in the test's mount namespace" % name)

for c in [("ip", "netns", "add", NS_OUT),
          ("ip", "link", "add", "abipa" + tag, "type", "veth", "peer", "name", "abipb" + tag),
          ("ip", "link", "set", "abipb" + tag, "netns", NS_OUT),
          ("ip", "addr", "add", VETH_IP + "/24", "dev", "abipa" + tag),
          ("ip", "link", "set", "abipa" + tag, "up"),
          ("ip", "netns", "exec", NS_OUT, "ip", "addr", "add", OUT_IP + "/24", "dev", "abipb" + tag),
          ("ip", "netns", "exec", NS_OUT, "ip", "link", "set", "abipb" + tag, "up"),
          ("ip", "netns", "exec", NS_OUT, "ip", "link", "set", "lo", "up")]:
    r = sh(*c)
    if r.returncode != 0:
        cleanup()
        h.skip_all("cannot build the test network (%s: %s)" % (" ".join(c), r.stderr.strip()))

# ---- the victim: a service inside (127.0.0.1:80) that logs every request ----------
victim_hits = []
victim = socket.socket()
victim.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
victim.bind(("127.0.0.1", 80))
victim.listen(32)


def victim_loop():
    while True:
        try:
            c, _ = victim.accept()
        except OSError:
            return
        try:
            c.settimeout(2)
            line = c.recv(4096).split(b"\r\n")[0].decode(errors="replace")
            victim_hits.append(line)
            body = b'{"token":"inside-secret"}'
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(body), body))
        except OSError:
            pass
        c.close()


threading.Thread(target=victim_loop, daemon=True).start()

# ---- the fake registry outside: token realm and redirects to the victim ----------
FAKE = r'''
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
IP, FILES = sys.argv[1], sys.argv[2]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def send(self, code, hdrs=()):
        self.send_response(code)
        for k, v in hdrs:
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def do_GET(self):
        p = self.path
        if p == "/v2/" or p.startswith("/v2/realm/"):
            if self.headers.get("Authorization"):
                return self.send(404)
            return self.send(401, [("WWW-Authenticate",
                                    'Bearer realm="http://127.0.0.1/token",service="x",scope="repository:realm/img:pull"')])
        if p.startswith("/v2/redir/"):
            return self.send(307, [("Location", "http://127.0.0.1" + p)])
        # a static registry of the images the test wrote to FILES
        import json, os
        idx = json.load(open(os.path.join(FILES, "index.json")))
        if p in idx:
            body = open(os.path.join(FILES, idx[p][1]), "rb").read()
            self.send_response(200)
            self.send_header("Content-Type", idx[p][0])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        return self.send(404)
    def log_message(self, *a):
        pass
class S(HTTPServer):
    def server_bind(self):
        import socket
        socket.socket.bind(self.socket, self.server_address)
        self.server_name, self.server_port = IP, self.server_address[1]
print("ready", flush=True)
S((IP, 80), H).serve_forever()
'''
FILES = os.path.join(h.root, "outside-registry")
os.makedirs(FILES)
index = {}


def serve_image(repo, tagname, layers):
    """Puts an image (gzip layers, a true config) where the fake ghcr.io serves it."""
    cfg = {"config": {"Env": ["PATH=/bin"]}, "architecture": "amd64", "os": "linux",
           "rootfs": {"type": "layers", "diff_ids": [registry.sha256(l) for l in layers]}}
    blobs = [json.dumps(cfg, sort_keys=True).encode()] + [gzip.compress(l, mtime=0, compresslevel=1)
                                                          for l in layers]
    for b in blobs:
        d = registry.sha256(b)
        with open(os.path.join(FILES, d[7:]), "wb") as f:
            f.write(b)
        index["/v2/%s/blobs/%s" % (repo, d)] = ("application/octet-stream", d[7:])
    man = {"schemaVersion": 2, "mediaType": registry.MT_OCI_MANIFEST,
           "config": {"mediaType": registry.MT_OCI_CONFIG, "size": len(blobs[0]),
                      "digest": registry.sha256(blobs[0])},
           "layers": [{"mediaType": registry.MT_OCI_GZIP, "size": len(b), "digest": registry.sha256(b)}
                      for b in blobs[1:]]}
    mb = json.dumps(man).encode()
    with open(os.path.join(FILES, "m-" + registry.sha256(mb)[7:]), "wb") as f:
        f.write(mb)
    index["/v2/%s/manifests/%s" % (repo, tagname)] = (registry.MT_OCI_MANIFEST, "m-" + registry.sha256(mb)[7:])
    with open(os.path.join(FILES, "index.json"), "w") as f:
        json.dump(index, f)


serve_image("small/img", "1", [registry.tar_of({"etc/small": os.urandom(256 * 1024)})])
serve_image("big/img", "1", [registry.tar_of({"etc/big": os.urandom(6 << 20)})])
procs.append(subprocess.Popen(["ip", "netns", "exec", NS_OUT, al.HOST_PY, "-c", FAKE, OUT_IP, FILES],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
if procs[-1].stdout.readline().strip() != "ready":
    cleanup()
    h.bail_out("the fake outside registry did not start")

# ---- a real registry on loopback, with one good image ------------------------------
reg = registry.Registry(h.root)
reg.__enter__()
atexit.register(lambda: reg.__exit__(None, None, None))
R = reg.host


def base_layer():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        with open("/bin/busybox", "rb") as f:
            data = f.read()
        ti = tarfile.TarInfo("bin/busybox")
        ti.size, ti.mode, ti.mtime = len(data), 0o755, 1700000000
        t.addfile(ti, io.BytesIO(data))
        for a in ("sh", "cat"):
            ti = tarfile.TarInfo("bin/" + a)
            ti.type, ti.linkname, ti.mode, ti.mtime = tarfile.SYMTYPE, "busybox", 0o777, 1700000000
            t.addfile(ti)
    return buf.getvalue()


BASE = base_layer()
TOP = registry.tar_of({"etc/marker": b"genuine\n"})
EVIL = registry.tar_of({"etc/marker": b"swapped\n"})
CONFIG = {"config": {"Env": ["PATH=/bin"]}}
registry.push_image(R, "attack/good", "1", [BASE, TOP], CONFIG)
registry.push_image(R, "attack/osb", "1", [BASE, TOP], {"config": {"Env": ["PATH=/bin", "FOR=osb"]}})


def push_raw(repo, tagname, layers, diff_ids):
    """Pushes gzip layers with a config whose rootfs is given as it is
    (diff_ids None: no rootfs at all). The config names the repository, so
    it is never the good image's config (which the store would reuse)."""
    cfg = {"config": {"Env": ["PATH=/bin", "REPO=" + repo]}, "architecture": "amd64", "os": "linux"}
    if diff_ids is not None:
        cfg["rootfs"] = {"type": "layers", "diff_ids": diff_ids}
    cb = json.dumps(cfg, sort_keys=True).encode()
    descs = []
    for l in layers:
        blob = gzip.compress(l, mtime=0)
        descs.append({"mediaType": registry.MT_OCI_GZIP, "size": len(blob),
                      "digest": registry.push_blob(R, repo, blob)})
    man = {"schemaVersion": 2, "mediaType": registry.MT_OCI_MANIFEST,
           "config": {"mediaType": registry.MT_OCI_CONFIG, "size": len(cb),
                      "digest": registry.push_blob(R, repo, cb)},
           "layers": descs}
    registry.push_manifest(R, repo, tagname, json.dumps(man).encode(), registry.MT_OCI_MANIFEST)


# the evil layer claims to be the genuine one (its config lists TOP's diff id)
push_raw("attack/swap", "1", [BASE, EVIL], [registry.sha256(BASE), registry.sha256(TOP)])
# a layer already in the store (from attack/good) under a config that lies about it
push_raw("attack/swap2", "1", [BASE, TOP], [registry.sha256(BASE), registry.sha256(EVIL)])
push_raw("attack/norootfs", "1", [BASE, EVIL], None)

ADMIN = "admin-" + al.token()
KEY = "appkey-" + al.token()
QKEY = "appqkey-" + al.token()
S = h.start_server(token=ADMIN, config={
    "limits": {"disk": "64M", "memory": "256M", "timeout": "30s"},
    "api_keys": [{"key": KEY, "app_id": "appa"}, {"key": QKEY, "app_id": "appq"}],
    "quotas": {"apps": {"appq": {"max_disk": "4M"}}},
    "registries": [{"host": "ghcr.io", "insecure": True}, {"host": "quay.io", "insecure": True}],
})
LAYERS = os.path.join(S.data, "images", "layers")


def layer_dirs():
    return sorted(x for x in os.listdir(LAYERS) if not x.startswith(".")) if os.path.isdir(LAYERS) else []


def pull(ref, token=None):
    return S.post("/v1/images", {"ref": ref}, token=token or ADMIN, timeout=60)


def has_image(name):
    return any(name in (i.get("names") or []) for i in (S.get("/v1/images").get("images") or []))


# ---- app keys and addresses ------------------------------------------------------------
r = pull("%s/attack/good:1" % R)
h.eq(r.status, 200, "control: the admin pulls from the loopback registry", r.describe())


def app_pull_attack(what, ref, expect_status=(403,)):
    mark = len(victim_hits)
    r = pull(ref, token=KEY)
    hits = victim_hits[mark:]
    h.ok(r.status in expect_status and not hits,
         "app key: %s is refused (%s)" % (what, "/".join(map(str, expect_status))),
         r.describe()[:700] + "\nvictim saw: %s" % hits)
    return r


r = app_pull_attack("a pull from a loopback registry by reference", "%s/attack/good:1" % R)
h.ok("app_registries" in r.describe(), "... and the answer names the setting that allows it", r.describe()[:500])
app_pull_attack("a pull from a registry name that resolves to loopback (quay.io -> 127.0.0.1)",
                "quay.io/attack/img:1")
r = app_pull_attack("a token realm on loopback (the fake ghcr.io's 401)", "ghcr.io/realm/img:1")
h.ok("127.0.0.1 (loopback)" in r.describe(), "... and the answer names the refused address", r.describe()[:500])
app_pull_attack("a redirect to loopback (the fake ghcr.io's 307)", "ghcr.io/redir/img:1")
r = S.post("/v1/sandboxes", {"image": "ghcr.io/realm/img:2"}, token=KEY, timeout=60)
h.ok(r.status >= 400 and not [x for x in victim_hits if "img" in x or "token" in x],
     "app key: a create that pulls (token realm on loopback) reaches nothing inside", r.describe()[:600])
# the same through the E2B and OpenSandbox fronts (a sandbox of a template / image pulls it)
mark = len(victim_hits)
r = S.post("/e2b/v2/sandboxes", {"templateID": "quay.io/attack/e2b:1", "timeout": 60}, token=None,
           headers={"X-API-Key": KEY}, timeout=60)
h.ok(r.status >= 400 and not victim_hits[mark:],
     "E2B: a sandbox whose templateID names a registry resolving to loopback reaches nothing inside",
     r.describe()[:500] + "\nvictim saw: %s" % victim_hits[mark:])
mark = len(victim_hits)
r = S.post("/opensandbox/v1/sandboxes", {"image": {"uri": "ghcr.io/realm/osb:1"}, "timeout": 60,
                                         "entrypoint": ["tail", "-f", "/dev/null"],
                                         "resourceLimits": {"cpu": "1", "memory": "256Mi"}},
           token=None, headers={"OPEN-SANDBOX-API-KEY": KEY}, timeout=60)
h.ok(r.status >= 400 and not victim_hits[mark:],
     "OpenSandbox: a sandbox whose image's registry sends its token realm to loopback reaches nothing inside",
     r.describe()[:500] + "\nvictim saw: %s" % victim_hits[mark:])
mark = len(victim_hits)
r = S.post("/opensandbox/v1/sandboxes", {"image": {"uri": "%s/attack/osb:1" % R}, "timeout": 60,
                                         "entrypoint": ["tail", "-f", "/dev/null"]},
           token=None, headers={"OPEN-SANDBOX-API-KEY": KEY}, timeout=60)
h.ok(r.status >= 400, "OpenSandbox: an app key's sandbox of an image on a loopback registry is refused",
     r.describe()[:500])

mark = len(victim_hits)
r = pull("ghcr.io/nothing/img:1", token=KEY)
h.eq((r.status, victim_hits[mark:]), (404, []),
     "control: the app key reaches the allowed outside registry itself (404 for an unknown repository)",
     r.describe()[:500])

# ---- layers against rootfs.diff_ids ----------------------------------------------------------
before = layer_dirs()
r = pull("%s/attack/swap:1" % R)
h.ok(r.status >= 400 and not has_image("%s/attack/swap:1" % R),
     "a layer whose uncompressed digest is not its diff id fails the pull", r.describe()[:600])
h.ok("diff id" in r.describe(), "... and the answer says which layer and diff id", r.describe()[:600])
evil_hex = registry.sha256(gzip.compress(EVIL, mtime=0))[7:]
abserver.wait_for(lambda: evil_hex not in layer_dirs(), timeout=10)
h.ok(evil_hex not in layer_dirs(), "... and the layer is not kept", "%s -> %s" % (before, layer_dirs()))
r = S.post("/v1/sandboxes", {"id": "swapbox", "image": "%s/attack/swap:1" % R})
out = (S.exec("swapbox", "cat /etc/marker").get("stdout") or "") if r.status == 201 else ""
h.ok(r.status != 201 and "swapped" not in out, "no box runs from the swapped layer", r.describe()[:500] + out)
S.delete("/v1/sandboxes/swapbox")

r = pull("%s/attack/swap2:1" % R)
h.ok(r.status >= 400 and not has_image("%s/attack/swap2:1" % R),
     "a config that lies about a layer already in the store fails the pull", r.describe()[:600])
r = pull("%s/attack/norootfs:1" % R)
h.ok(r.status >= 400 and not has_image("%s/attack/norootfs:1" % R),
     "a config without rootfs.diff_ids (nothing to check the layers against) fails the pull", r.describe()[:600])

r = S.post("/v1/sandboxes", {"id": "goodbox", "image": "%s/attack/good:1" % R})
out = (S.exec("goodbox", "cat /etc/marker").get("stdout") or "") if r.status == 201 else r.describe()
h.ok("genuine" in out, "control: a box of the good image runs and has its layer", out[:400])
S.delete("/v1/sandboxes/goodbox")

# ---- an app's images count against its disk quota ----------------------------------------
r = pull("ghcr.io/small/img:1", token=QKEY)
h.eq(r.status, 200, "control: an app with a 4 MiB disk quota pulls a 256 KiB image", r.describe()[:500])
before = layer_dirs()
r = pull("ghcr.io/big/img:1", token=QKEY)
h.ok(r.status == 429 and not has_image("ghcr.io/big/img:1"),
     "an app cannot store a 6 MiB image past its 4 MiB disk quota (429)", r.describe()[:600])
abserver.wait_for(lambda: layer_dirs() == before, timeout=10)
h.eq(layer_dirs(), before, "... and none of its layers is kept")
r = pull("ghcr.io/big/img:1")
h.eq(r.status, 200, "control: the admin pulls the same image (no app quota)", r.describe()[:500])
r = pull("ghcr.io/big/img:1", token=QKEY)
h.eq(r.status, 429, "an app pulling an image already in the store counts it too (429)", r.describe()[:500])

victim.close()
cleanup()
h.done()
