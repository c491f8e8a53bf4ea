#!/usr/bin/env python3
"""Egress never reaches the host itself (issue 24, item 9).

The egress proxy of allowlist boxes and the code runner's httpRequest refused
only fixed ranges (loopback, private, metadata, ...). An address the server's
host holds on a public interface was an ordinary outside address to them, so
a box (or a snippet) reached every service of the host listening on it, the
server's own API included. Each check below is one such attack; it passes
only when the attack fails.

Nothing here can send a packet off this machine: the test first moves itself
(and so the server and every box) into a network and mount namespace of its
own. The "host" holds 203.0.113.7 (TEST-NET-3, a public-range address) on a
dummy interface (a veth where the kernel lacks the dummy driver), and listens there with a service of its own and with the
server's API. "Outside" is a second namespace joined by a veth at
198.51.100.10; it answers, and redirects to the host's address. Names come
from an /etc/hosts bind-mounted in the test's mount namespace (and a
resolv.conf that points at nothing).
"""
import atexit
import ctypes
import json
import os
import socket
import subprocess
import sys
import threading

# ---- our own network and mount namespaces, before any thread exists --------------
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_isolated = os.geteuid() == 0 and _libc.unshare(CLONE_NEWNS | CLONE_NEWNET) == 0
if _isolated:
    _isolated = subprocess.run(["mount", "--make-rprivate", "/"]).returncode == 0 and \
        subprocess.run(["ip", "link", "set", "lo", "up"]).returncode == 0

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attacklib as al  # noqa: E402
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=200)
if not _isolated:
    h.skip_all("needs root to make its own network and mount namespaces (nothing may leave the machine)")

RUNNERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "runners")
HOST_IP, LATE_IP = "203.0.113.7", "203.0.113.8"
OUT_IP, VETH_IP = "198.51.100.10", "198.51.100.1"
tag = "%x" % (os.getpid() & 0xffff)
NS_OUT = "abho-" + tag


def sh(*args, timeout=30):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)


procs = []


def cleanup():
    for p in procs:
        p.kill()
        p.wait()
    procs.clear()
    sh("ip", "netns", "del", NS_OUT)
    try:  # the name file lives in the host's /run even though our mounts do not
        os.unlink("/run/netns/" + NS_OUT)
    except OSError:
        pass


atexit.register(cleanup)

etc = os.path.join(h.root, "etc")
os.makedirs(etc)
with open(os.path.join(etc, "hosts"), "w") as f:
    f.write("127.0.0.1 localhost\n%s hostself.test\n%s outside.test\n" % (HOST_IP, OUT_IP))
with open(os.path.join(etc, "resolv.conf"), "w") as f:
    f.write("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
for name in ("hosts", "resolv.conf"):
    if sh("mount", "--bind", os.path.join(etc, name), "/etc/" + name).returncode != 0:
        h.skip_all("cannot bind-mount a test /etc/%s in the test's mount namespace" % name)

# the host's public interface: a dummy one, or where this kernel has no dummy
# driver one end of a veth pair (its peer, abhe, stays here unaddressed)
if sh("ip", "link", "add", "abhd" + tag, "type", "dummy").returncode != 0:
    r = sh("ip", "link", "add", "abhd" + tag, "type", "veth", "peer", "name", "abhe" + tag)
    if r.returncode != 0 or sh("ip", "link", "set", "abhe" + tag, "up").returncode != 0:
        h.skip_all("cannot make an interface for the host's public address: %s" % r.stderr.strip())
setup = [
    ("ip", "addr", "add", HOST_IP + "/32", "dev", "abhd" + tag),
    ("ip", "link", "set", "abhd" + tag, "up"),
    ("ip", "netns", "add", NS_OUT),
    ("ip", "link", "add", "abhoa" + tag, "type", "veth", "peer", "name", "abhob" + tag),
    ("ip", "link", "set", "abhob" + tag, "netns", NS_OUT),
    ("ip", "addr", "add", VETH_IP + "/24", "dev", "abhoa" + tag),
    ("ip", "link", "set", "abhoa" + tag, "up"),
    ("ip", "netns", "exec", NS_OUT, "ip", "addr", "add", OUT_IP + "/24", "dev", "abhob" + tag),
    ("ip", "netns", "exec", NS_OUT, "ip", "link", "set", "abhob" + tag, "up"),
    ("ip", "netns", "exec", NS_OUT, "ip", "link", "set", "lo", "up"),
]
for c in setup:
    r = sh(*c)
    if r.returncode != 0:
        cleanup()
        h.skip_all("cannot build the test network (%s: %s)" % (" ".join(c), r.stderr.strip()))

# ---- the host's own service: every address of the "host" namespace ----------------
host_hits = []
host_srv = socket.socket()
host_srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
host_srv.bind(("0.0.0.0", 0))
host_srv.listen(32)
HPORT = host_srv.getsockname()[1]


def host_loop():
    while True:
        try:
            c, a = host_srv.accept()
        except OSError:
            return
        host_hits.append(a[0])
        try:
            c.settimeout(2)
            c.recv(4096)
            body = b"HOST-SECRET"
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        except OSError:
            pass
        c.close()


threading.Thread(target=host_loop, daemon=True).start()

# ---- the outside: answers, and redirects to the host ------------------------------
OUTSIDE = r'''
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
IP, TARGET = sys.argv[1], sys.argv[2]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def do_GET(self):
        if self.path.startswith("/redir"):
            self.send_response(302)
            self.send_header("Location", TARGET)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = ("hello from outside " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class S(HTTPServer):
    def server_bind(self):
        import socket
        socket.socket.bind(self.socket, self.server_address)  # no getfqdn: no DNS
        self.server_name, self.server_port = IP, self.server_address[1]
print("ready", flush=True)
S((IP, 80), H).serve_forever()
'''
procs.append(subprocess.Popen(["ip", "netns", "exec", NS_OUT, al.HOST_PY, "-c", OUTSIDE, OUT_IP,
                               "http://%s:%d/via-redirect" % (HOST_IP, HPORT)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
if procs[-1].stdout.readline().strip() != "ready":
    cleanup()
    h.bail_out("the outside test server did not start")


def fetch_host(url):
    try:
        with socket.create_connection((url[0], url[1]), timeout=5) as c:
            c.sendall(b"GET / HTTP/1.0\r\n\r\n")
            got = b""
            while True:
                d = c.recv(4096)
                if not d:
                    return got
                got += d
    except OSError as e:
        return str(e).encode()


# controls: the test network works from the "host" itself
h.ok(b"HOST-SECRET" in fetch_host((HOST_IP, HPORT)), "control: the host's service answers on %s" % HOST_IP)
h.ok(b"hello from outside" in fetch_host((OUT_IP, 80)), "control: the host reaches the outside server")
host_hits.clear()

# ---- the server, listening on the host's public address ---------------------------
S = h.server(listen_host=HOST_IP, token=al.token(),
             env={"AGENTBOX_RUNNER_WARM": "1", "AGENTBOX_RUNNERS": os.environ.get("AGENTBOX_RUNNERS") or RUNNERS})
S.host = HOST_IP  # the harness talks to the server where it listens
why = S.start(abserver.SERVER_START_TIMEOUT)
if why:
    h.bail_server(S, why)
SPORT = S.port


def ex(box, cmd, t=30):
    return S.exec(box, cmd, timeout_s=t, http_timeout=t + 30)


def out_of(r):
    return (r.get("stdout") or "") + (r.get("stderr") or "") if isinstance(r.json, dict) else r.describe()


def curl(url, *extra, t=8):
    return out_of(ex("egress-h", "curl -sS -m %d %s '%s'; echo; echo rc=$?" % (t, " ".join(extra), url), t=t + 10))


r = S.post("/v1/sandboxes", {"id": "egress-h", "network": {"mode": "allowlist", "allow": ["*"]}})
h.eq(r.status, 201, "a box in allowlist mode that allows every name is created", r.describe())

out = curl("http://outside.test/ctl")
h.ok("hello from outside /ctl" in out, "control: the box reaches the outside through the proxy", out)


def proxy_attack(what, url, *extra, secret=b"HOST-SECRET"):
    mark = len(host_hits)
    out = curl(url, *extra)
    h.ok(secret.decode() not in out and len(host_hits) == mark,
         "proxy: %s is refused" % what, out[-600:] + " host hits: %s" % host_hits[mark:])
    return out


out = proxy_attack("the host's public address as a literal", "http://%s:%d/literal" % (HOST_IP, HPORT))
h.ok("403" in out or "not allowed" in out, "... with 403 from the proxy", out[-400:])
proxy_attack("a name that resolves to the host's address", "http://hostself.test:%d/name" % HPORT)
proxy_attack("a CONNECT tunnel to the host's address", "http://%s:%d/tunnel" % (HOST_IP, HPORT), "-p")
proxy_attack("the host's address in IPv4-mapped IPv6 form", "http://[::ffff:%s]:%d/mapped" % (HOST_IP, HPORT),
             "-g")
proxy_attack("a redirect from outside to the host's address (curl -L)", "http://outside.test/redir", "-L")
mark = len(host_hits)
out = curl("http://%s:%d/health" % (HOST_IP, SPORT), "-i")
h.ok(" 200 " not in out.split("\n")[0] and '"status"' not in out,
     "proxy: the server's own API on its listen address is refused", out[-600:])

# the same through a sandbox made by the OpenSandbox front (networkPolicy allows every target)
r = S.post("/opensandbox/v1/sandboxes", {"image": {"uri": "base"}, "timeout": 120,
                                         "entrypoint": ["tail", "-f", "/dev/null"],
                                         "networkPolicy": {"defaultAction": "deny",
                                                           "egress": [{"action": "allow", "target": "*"}]}},
           token=None, headers={"OPEN-SANDBOX-API-KEY": S.token})
osb_id = r.get("id") if r.status in (200, 201, 202) else None
h.ok(osb_id is not None, "an OpenSandbox sandbox with an allow-all egress policy is created", r.describe()[:400])
if osb_id:
    mark = len(host_hits)
    out = out_of(ex(osb_id, "curl -sS -m 8 http://%s:%d/osb; echo; echo rc=$?" % (HOST_IP, HPORT), t=20))
    h.ok("HOST-SECRET" not in out and len(host_hits) == mark,
         "proxy (OpenSandbox box): the host's public address is refused", out[-400:])
    S.delete("/v1/sandboxes/" + osb_id)

# an address the host takes after the server started is refused at once
r = sh("ip", "addr", "add", LATE_IP + "/32", "dev", "abhd" + tag)
h.ok(r.returncode == 0 and b"HOST-SECRET" in fetch_host((LATE_IP, HPORT)),
     "control: the host now also holds %s, its service answers there" % LATE_IP, r.stderr)
host_hits.clear()
proxy_attack("an address added to the host while the server runs", "http://%s:%d/late" % (LATE_IP, HPORT))

# ---- the code runner's httpRequest -----------------------------------------------


def py(code):
    return S.post("/sandbox/python", {"code": code}, timeout=90)


def runner_get(url):
    return py("def main():\n    try:\n        return http_request(%r).get('data')\n"
              "    except Exception as e:\n        return 'error: %%s' %% e\n" % url)


r = runner_get("http://%s/ctl" % OUT_IP)
h.ok("hello from outside /ctl" in json.dumps(r.json), "control: httpRequest reaches the outside", r.describe()[:600])
for what, url in (("the host's public address as a literal", "http://%s:%d/rl" % (HOST_IP, HPORT)),
                  ("a name that resolves to the host's address", "http://hostself.test:%d/rn" % HPORT),
                  ("a redirect from outside to the host's address", "http://%s/redir" % OUT_IP),
                  ("an address added to the host while the server runs", "http://%s:%d/rlate" % (LATE_IP, HPORT)),
                  ("the server's own API on its listen address", "http://%s:%d/health" % (HOST_IP, SPORT))):
    mark = len(host_hits)
    r = runner_get(url)
    body = json.dumps(r.json)
    h.ok("HOST-SECRET" not in body and '\\"status\\"' not in body and len(host_hits) == mark and
         "error" in body, "httpRequest: %s is refused" % what, r.describe()[:600])

S.delete("/v1/sandboxes/egress-h")
abserver.wait_for(lambda: S.get("/v1/sandboxes/egress-h").status == 404, timeout=30)
host_srv.close()
cleanup()
h.done()
