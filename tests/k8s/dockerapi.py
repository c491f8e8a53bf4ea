"""dockerapi - the few Docker Engine API calls the stand-in kubelet makes,
over the engine's unix socket (DOCKER_HOST=unix:///path), stdlib only.

Docker(host).call(method, path, body=None, params=None) returns (status,
decoded JSON or bytes). Never pulls: the kubelet checks images with
image_exists() and reports ErrImagePull for a missing one.
"""

import http.client
import json
import socket
import struct
import urllib.parse


class UnixConn(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.sock_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.sock_path)
        self.sock = s


class DockerError(Exception):
    def __init__(self, status, body):
        msg = body.get("message") if isinstance(body, dict) else body
        super().__init__("docker answered %s: %s" % (status, msg))
        self.status, self.message = status, msg


class Docker:
    def __init__(self, host):
        if not host.startswith("unix://"):
            raise ValueError("the stand-in kubelet speaks to Docker over a unix socket only: %r" % host)
        self.path = host[len("unix://"):]

    def call(self, method, path, body=None, params=None, timeout=60.0, ok=(200, 201, 204, 304)):
        if params:
            path += "?" + urllib.parse.urlencode(params)
        c = UnixConn(self.path, timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            c.request(method, "/v1.41" + path, body=data,
                      headers={"Content-Type": "application/json"} if data is not None else {})
            r = c.getresponse()
            raw = r.read()
        finally:
            c.close()
        out = raw
        if r.getheader("Content-Type", "").startswith("application/json") and raw:
            out = json.loads(raw)
        if ok and r.status not in ok:
            raise DockerError(r.status, out if isinstance(out, dict) else raw.decode(errors="replace"))
        return r.status, out

    def image_exists(self, image):
        st, _ = self.call("GET", "/images/%s/json" % urllib.parse.quote(image, safe=""), ok=None)
        return st == 200

    def containers(self, label):
        _, out = self.call("GET", "/containers/json",
                           params={"all": "1", "filters": json.dumps({"label": [label]})})
        return out

    def inspect(self, cid):
        st, out = self.call("GET", "/containers/%s/json" % cid, ok=None)
        return out if st == 200 else None

    def create(self, name, config):
        _, out = self.call("POST", "/containers/create", config, params={"name": name})
        return out["Id"]

    def start(self, cid):
        self.call("POST", "/containers/%s/start" % cid)

    def stop(self, cid, grace):
        self.call("POST", "/containers/%s/stop" % cid, params={"t": str(int(grace))},
                  timeout=grace + 30, ok=(204, 304, 404))

    def kill(self, cid, signal="SIGKILL"):
        self.call("POST", "/containers/%s/kill" % cid, params={"signal": signal}, ok=(204, 404, 409))

    def remove(self, cid):
        self.call("DELETE", "/containers/%s" % cid, params={"force": "1", "v": "1"}, ok=(204, 404, 409))

    def exec(self, cid, cmd, timeout=10.0):
        """Run cmd in the container; its exit code (-1 if it did not end in time)."""
        _, out = self.call("POST", "/containers/%s/exec" % cid, {"Cmd": cmd, "AttachStdout": True,
                                                                  "AttachStderr": True})
        eid = out["Id"]
        self.call("POST", "/exec/%s/start" % eid, {"Detach": False, "Tty": False}, timeout=timeout)
        _, info = self.call("GET", "/exec/%s/json" % eid)
        return info.get("ExitCode", -1) if not info.get("Running") else -1

    def logs_follow(self, cid, tail="all"):
        """Yield the container's output as it comes (stdout and stderr, no
        TTY) until it ends."""
        c = UnixConn(self.path, None)
        try:
            c.request("GET", "/v1.41/containers/%s/logs?%s" % (cid, urllib.parse.urlencode(
                {"follow": "1", "stdout": "1", "stderr": "1", "tail": tail})))
            r = c.getresponse()
            if r.status != 200:
                return
            while True:
                head = r.read(8)
                if len(head) < 8:
                    return
                n = struct.unpack(">I", head[4:8])[0]
                data = r.read(n)
                if not data:
                    return
                yield data
        finally:
            c.close()

    def logs(self, cid):
        """stdout and stderr interleaved, as bytes (a container without a TTY)."""
        st, raw = self.call("GET", "/containers/%s/logs" % cid, params={"stdout": "1", "stderr": "1"}, ok=None)
        if st != 200 or not isinstance(raw, bytes):
            return b""
        out, i = [], 0
        while i + 8 <= len(raw):
            n = struct.unpack(">I", raw[i + 4:i + 8])[0]
            out.append(raw[i + 8:i + 8 + n])
            i += 8 + n
        return b"".join(out)
