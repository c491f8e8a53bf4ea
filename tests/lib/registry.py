"""registry - a real OCI registry on loopback for tests, and images to put in it.

Python 3 standard library only (zstd compression runs the `zstd` CLI). Uses
Debian's `docker-registry` (github.com/docker/distribution v2), no internet:

    import os, sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
    import registry

    why = registry.missing()              # None, or why the tests cannot run
    with registry.Registry(tmpdir) as reg:          # reg.host = "127.0.0.1:PORT"
        d = registry.push_image(reg.host, "me/tool", "1",
                                layers=[registry.tar_of({"etc/hello": b"hi\\n"})],
                                config={"config": {"Env": ["A=1"], "Cmd": ["sh"]}},
                                media="oci", compression="zstd")
        # d is the manifest digest "sha256:..." (a str), with .size, .media_type,
        # .manifest (bytes), .config_digest, .layer_digests, .diff_ids
        arm = registry.push_image(reg.host, "me/tool", "arm", [...], {"architecture": "arm64"})
        registry.push_index(reg.host, "me/tool", "multi",
                            [(arm, arm.size, "linux", "arm64"), (d, d.size, "linux", "amd64")])
        with registry.AuthProxy(reg.host, "user", "secret") as px:   # px.host
            ...                           # pull "127.0.0.1:PX/me/tool:1" with user/secret

Registry(tmpdir): a context manager; starts docker-registry on a free loopback
port with its storage in a fresh directory under tmpdir, waits (up to 20 s)
until GET /v2/ answers, and on exit stops it and removes that directory.
Its log is in .log_path while it runs (.log() returns the text).

push_image(host, repo, tag, layers, config, media="oci"|"docker",
compression="gzip"|"zstd"|"none"): layers are uncompressed tar bytes, bottom
first; config is the image config dict (copied; rootfs.diff_ids is filled in,
"architecture" defaults to "amd64" and "os" to "linux"). Pushes every blob
(POST /v2/<repo>/blobs/uploads/, PUT <location>?digest=) and the manifest
(PUT /v2/<repo>/manifests/<tag>); tag may be None (then the manifest is put by
its digest). Layer media types: OCI's for "oci"; for "docker" Docker's
rootfs.diff.tar.gzip for gzip, else OCI's tar / tar+zstd types (what BuildKit
writes). Returns the manifest digest as a Pushed (a str with attributes).

push_index(host, repo, tag, entries, media="oci"|"docker"): an OCI index (or a
Docker manifest list) of entries (digest, size, os, arch); each entry's
mediaType is that of the Pushed given, else the manifest type of `media`.
Returns its digest as a Pushed.

push_blob(host, repo, data) -> digest; tar_of({path: bytes}) -> tar bytes;
sha256(data) -> "sha256:HEX".

AuthProxy(upstream_host, user, password, mode="ok"): (user None: no auth at all,
only the faults of the mode) a threaded HTTP server
on loopback (.host = "127.0.0.1:PORT") in front of the registry, as Docker
Hub's token auth: every /v2/ request without a valid Bearer token gets 401
with WWW-Authenticate: Bearer realm="http://HOST/token",service="test",
scope="repository:REPO:pull"; GET /token issues a token ({"token": T}, or
{"access_token": T} with token_field="access_token") only to the right HTTP
basic credentials (401 otherwise); the rest is proxied to upstream. With
token_uses=N a token is accepted N times, then refused (as an expired one).
Modes:
  "ok"          as above
  "basic"       401 with WWW-Authenticate: Basic realm="test"; requests with
                the right basic credentials are proxied
  "garbage"     manifests are answered 200 with a body that is not JSON
  "bad_digest"  blobs are answered with one byte altered (same length)
  "redirect"    blobs are answered 307 to the upstream registry's URL
  "stall"       blobs: the headers and half the bytes, then nothing until the
                proxy is closed (or 60 s)
  "500"         every request is answered 500
Counters: .token_requests (GETs of /token), .requests (all requests).
"""

import base64
import contextlib
import copy
import gzip
import hashlib
import http.client
import http.server
import io
import json
import os
import secrets
import shutil
import socket
import signal
import socketserver
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.parse

REGISTRY_BIN = "/usr/bin/docker-registry"
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """In the child before exec: SIGKILL when the test process dies."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
ZSTD_BIN = "zstd"

MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_OCI_TAR = "application/vnd.oci.image.layer.v1.tar"
MT_OCI_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MT_OCI_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
MT_DOCKER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def missing():
    """None when a registry can be run here, else the reason it cannot."""
    if not os.access(REGISTRY_BIN, os.X_OK):
        return "%s not found (Debian package docker-registry; scripts/deps.sh installs it)" % REGISTRY_BIN
    if shutil.which(ZSTD_BIN) is None:
        return "zstd CLI not found (Debian package zstd; scripts/deps.sh installs it)"
    return None


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tar_of(files):
    """Uncompressed tar bytes of {path: bytes} (regular files, mode 0644)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
        for path, data in files.items():
            ti = tarfile.TarInfo(path)
            ti.size = len(data)
            ti.mode = 0o644
            ti.mtime = 1700000000
            t.addfile(ti, io.BytesIO(data))
    return out.getvalue()


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(host, method, path, body=None, headers=None, timeout=30):
    """(status, headers dict with lower-case names, body bytes) of one request."""
    c = http.client.HTTPConnection(host, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


class Registry:
    """A docker-registry on 127.0.0.1:PORT, storage in a fresh dir under tmpdir."""

    def __init__(self, tmpdir, start_timeout=20.0):
        self.tmpdir = tmpdir
        self.start_timeout = start_timeout
        self.dir = None
        self.proc = None
        self.host = None
        self.port = None
        self.log_path = None

    def __enter__(self):
        why = missing()
        if why:
            raise RuntimeError(why)
        self.dir = tempfile.mkdtemp(prefix="registry-", dir=self.tmpdir)
        try:
            for _ in range(5):
                if self._start():
                    return self
            raise RuntimeError("docker-registry did not start; log:\n" + self.log())
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def _start(self):
        self.port = _free_port()
        self.host = "127.0.0.1:%d" % self.port
        data = os.path.join(self.dir, "data")
        os.makedirs(data, exist_ok=True)
        conf = os.path.join(self.dir, "config.yml")
        with open(conf, "w") as f:
            f.write("version: 0.1\n"
                    "log:\n  level: info\n  accesslog:\n    disabled: false\n"
                    "storage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\n"
                    "http:\n  addr: %s\n" % (data, self.host))
        self.log_path = os.path.join(self.dir, "registry.log")
        logf = open(self.log_path, "ab")
        try:
            # it dies with this process: a test killed by its timeout must
            # not leave a registry behind (it would keep a copy of the test's
            # mount namespace, and so its mounts and loop devices, alive)
            self.proc = subprocess.Popen([REGISTRY_BIN, "serve", conf], stdin=subprocess.DEVNULL,
                                         stdout=logf, stderr=logf, start_new_session=True,
                                         preexec_fn=_die_with_parent)
        finally:
            logf.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False  # e.g. the port was taken meanwhile: try another
            try:
                st, _, _ = _request(self.host, "GET", "/v2/", timeout=2)
                if st == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        self._stop()
        return False

    def _stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except (OSError, TypeError):
            return ""

    def __exit__(self, *exc):
        self._stop()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        return False


class Pushed(str):
    """A digest "sha256:..." with what was pushed under it."""

    size = 0
    media_type = None
    manifest = b""
    config_digest = None
    layer_digests = ()
    diff_ids = ()


def push_blob(host, repo, data):
    """Uploads data as one blob of repo (monolithic); returns its digest."""
    digest = sha256(data)
    st, hdr, body = _request(host, "POST", "/v2/%s/blobs/uploads/" % repo,
                             headers={"Content-Length": "0"})
    if st != 202 or "location" not in hdr:
        raise RuntimeError("blob upload start to %s/%s: HTTP %d %r" % (host, repo, st, body[:200]))
    loc = urllib.parse.urlsplit(hdr["location"])
    path = loc.path + "?" + (loc.query + "&" if loc.query else "") + "digest=" + urllib.parse.quote(digest)
    st, _, body = _request(loc.netloc or host, "PUT", path, body=data,
                           headers={"Content-Type": "application/octet-stream",
                                    "Content-Length": str(len(data))})
    if st != 201:
        raise RuntimeError("blob upload to %s/%s: HTTP %d %r" % (host, repo, st, body[:200]))
    return digest


def push_manifest(host, repo, ref, body, media_type):
    """PUTs a manifest (bytes) under ref (a tag or its digest); returns its digest."""
    st, hdr, resp = _request(host, "PUT", "/v2/%s/manifests/%s" % (repo, ref), body=body,
                             headers={"Content-Type": media_type})
    if st != 201:
        raise RuntimeError("manifest put to %s/%s:%s: HTTP %d %r" % (host, repo, ref, st, resp[:300]))
    return sha256(body)


def _compress(data, compression):
    if compression == "gzip":
        return gzip.compress(data, mtime=0)
    if compression == "zstd":
        return subprocess.run([ZSTD_BIN, "-q", "-c", "-3"], input=data, stdout=subprocess.PIPE,
                              check=True).stdout
    if compression == "none":
        return data
    raise ValueError("compression must be gzip, zstd or none, not %r" % compression)


def _layer_type(media, compression):
    if media == "docker" and compression == "gzip":
        return MT_DOCKER_GZIP
    return {"gzip": MT_OCI_GZIP, "zstd": MT_OCI_ZSTD, "none": MT_OCI_TAR}[compression]


def push_image(host, repo, tag, layers, config, media="oci", compression="gzip"):
    """Pushes an image (see the module docstring); returns its manifest digest (a Pushed)."""
    if media not in ("oci", "docker"):
        raise ValueError("media must be oci or docker, not %r" % media)
    cfg = copy.deepcopy(config or {})
    cfg.setdefault("architecture", "amd64")
    cfg.setdefault("os", "linux")
    diff_ids = [sha256(l) for l in layers]
    cfg["rootfs"] = {"type": "layers", "diff_ids": diff_ids}
    cfg_bytes = json.dumps(cfg, sort_keys=True).encode()
    cfg_digest = push_blob(host, repo, cfg_bytes)
    descs = []
    for l in layers:
        blob = _compress(l, compression)
        descs.append({"mediaType": _layer_type(media, compression), "size": len(blob),
                      "digest": push_blob(host, repo, blob)})
    mt = MT_OCI_MANIFEST if media == "oci" else MT_DOCKER_MANIFEST
    man = {"schemaVersion": 2, "mediaType": mt,
           "config": {"mediaType": MT_OCI_CONFIG if media == "oci" else MT_DOCKER_CONFIG,
                      "size": len(cfg_bytes), "digest": cfg_digest},
           "layers": descs}
    body = json.dumps(man, indent=2).encode()
    d = Pushed(push_manifest(host, repo, tag or sha256(body), body, mt))
    d.size, d.media_type, d.manifest = len(body), mt, body
    d.config_digest, d.layer_digests, d.diff_ids = cfg_digest, [x["digest"] for x in descs], diff_ids
    return d


def push_index(host, repo, tag, entries, media="oci"):
    """Pushes an index of (digest, size, os, arch) entries; returns its digest (a Pushed)."""
    if media not in ("oci", "docker"):
        raise ValueError("media must be oci or docker, not %r" % media)
    child = MT_OCI_MANIFEST if media == "oci" else MT_DOCKER_MANIFEST
    mans = []
    for digest, size, os_, arch in entries:
        mans.append({"mediaType": getattr(digest, "media_type", None) or child,
                     "digest": str(digest), "size": size,
                     "platform": {"os": os_, "architecture": arch}})
    mt = MT_OCI_INDEX if media == "oci" else MT_DOCKER_LIST
    body = json.dumps({"schemaVersion": 2, "mediaType": mt, "manifests": mans}, indent=2).encode()
    d = Pushed(push_manifest(host, repo, tag or sha256(body), body, mt))
    d.size, d.media_type, d.manifest = len(body), mt, body
    return d


class _ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class AuthProxy:
    """Token (or basic) auth and fault injection in front of a registry; see the module docstring."""

    MODES = ("ok", "basic", "garbage", "bad_digest", "redirect", "stall", "500")

    def __init__(self, upstream_host, user, password, mode="ok", token_field="token", token_uses=None):
        if mode not in self.MODES:
            raise ValueError("mode must be one of %s, not %r" % (", ".join(self.MODES), mode))
        self.upstream = upstream_host
        self.user, self.password, self.mode = user, password, mode
        self.token_field = token_field
        self.token_uses = token_uses
        self.tokens = {}  # token -> uses left (None: unbounded)
        self.token_requests = 0
        self.requests = 0
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._srv = None
        self._thread = None
        self.host = None

    def __enter__(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def do_GET(self):
                proxy._handle(self)

            do_HEAD = do_GET

        self._srv = _ThreadingServer(("127.0.0.1", 0), Handler)
        self.host = "127.0.0.1:%d" % self._srv.server_address[1]
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._closing.set()
        if self._srv:
            self._srv.shutdown()
            self._srv.server_close()
            self._thread.join(10)
            self._srv = None
        return False

    def _basic_ok(self, auth):
        want = base64.b64encode(("%s:%s" % (self.user, self.password)).encode()).decode()
        return auth == "Basic " + want

    @staticmethod
    def _send(h, status, body=b"", headers=()):
        h.send_response(status)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _handle(self, h):
        with self._lock:
            self.requests += 1
        if self.mode == "500":
            return self._send(h, 500, b'{"errors":[{"code":"UNKNOWN","message":"injected"}]}',
                              [("Content-Type", "application/json")])
        url = urllib.parse.urlsplit(h.path)
        auth = h.headers.get("Authorization", "")
        if url.path == "/token":
            with self._lock:
                self.token_requests += 1
            if not self._basic_ok(auth):
                return self._send(h, 401, b'{"details":"bad credentials"}',
                                  [("Content-Type", "application/json"),
                                   ("WWW-Authenticate", 'Basic realm="token"')])
            tok = secrets.token_hex(16)
            with self._lock:
                self.tokens[tok] = self.token_uses
            body = json.dumps({self.token_field: tok, "expires_in": 300}).encode()
            return self._send(h, 200, body, [("Content-Type", "application/json")])

        parts = url.path.split("/")
        repo = None
        for i, p in enumerate(parts):
            if p in ("manifests", "blobs") and i > 2:
                repo = "/".join(parts[2:i])
        if self.user is None:
            pass  # an open proxy: no auth, only the faults of its mode
        elif self.mode == "basic":
            if not self._basic_ok(auth):
                return self._send(h, 401, b'{"errors":[{"code":"UNAUTHORIZED","message":"login"}]}',
                                  [("Content-Type", "application/json"),
                                   ("WWW-Authenticate", 'Basic realm="test"')])
        else:
            good = False
            with self._lock:
                tok = auth[7:] if auth.startswith("Bearer ") else None
                if tok in self.tokens and self.tokens[tok] != 0:
                    good = True
                    if self.tokens[tok] is not None:
                        self.tokens[tok] -= 1
            if not good:
                chal = 'Bearer realm="http://%s/token",service="test"' % self.host
                if repo:
                    chal += ',scope="repository:%s:pull"' % repo
                return self._send(h, 401, b'{"errors":[{"code":"UNAUTHORIZED","message":"token"}]}',
                                  [("Content-Type", "application/json"), ("WWW-Authenticate", chal)])

        if self.mode == "garbage" and "/manifests/" in url.path:
            return self._send(h, 200, b"<html>this is not a manifest{",
                              [("Content-Type", MT_OCI_MANIFEST)])
        if self.mode == "redirect" and "/blobs/" in url.path:
            return self._send(h, 307, b"", [("Location", "http://%s%s" % (self.upstream, h.path))])

        fwd = {k: v for k, v in h.headers.items() if k.lower() in ("accept", "range")}
        try:
            st, hdr, body = _request(self.upstream, h.command, h.path, headers=fwd)
        except OSError as e:
            return self._send(h, 502, str(e).encode())
        if self.mode == "bad_digest" and "/blobs/" in url.path and st == 200 and body:
            body = bytes([body[0] ^ 0x55]) + body[1:]
        if self.mode == "stall" and "/blobs/" in url.path and st == 200 and h.command == "GET":
            h.send_response(200)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body[:len(body) // 2])
            h.wfile.flush()
            self._closing.wait(60)
            h.close_connection = True
            return None
        keep = [(k, v) for k, v in hdr.items()
                if k in ("content-type", "docker-content-digest", "location", "www-authenticate",
                         "docker-distribution-api-version")]
        if h.command == "HEAD":
            h.send_response(st)
            for k, v in keep:
                h.send_header(k, v)
            h.send_header("Content-Length", hdr.get("content-length", "0"))
            h.end_headers()
            return None
        return self._send(h, st, body, keep)


@contextlib.contextmanager
def closed_port():
    """A loopback host:port nothing listens on (for 'registry down' tests)."""
    yield "127.0.0.1:%d" % _free_port()
