"""kclient - a small Kubernetes API client (stdlib) for the stand-in's
kubelet and the test harness.

Client(kubeconfig_path) reads the current context's server, CA and token or
client certificate. request(method, path, body=None, ctype=...) returns
(status, decoded JSON or text); watch(path, params) yields the events of a
watch stream until it ends. Network errors raise OSError (ConnectionError
when the server is down, as during an API server restart).
"""

import base64
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse


def load_kubeconfig(path):
    with open(path) as f:
        cfg = json.load(f)
    ctx_name = cfg["current-context"]
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
    return cluster, user, ctx.get("namespace", "default")


class Client:
    def __init__(self, kubeconfig, timeout=30.0):
        cluster, user, self.namespace = load_kubeconfig(kubeconfig)
        u = urllib.parse.urlsplit(cluster["server"])
        self.host, self.port = u.hostname, u.port or 443
        self.timeout = timeout
        self.ctx = ssl.create_default_context()
        if "certificate-authority-data" in cluster:
            self.ctx.load_verify_locations(cadata=base64.b64decode(
                cluster["certificate-authority-data"]).decode())
        elif "certificate-authority" in cluster:
            self.ctx.load_verify_locations(cluster["certificate-authority"])
        self.token = user.get("token")
        if "client-certificate-data" in user:
            with tempfile.TemporaryDirectory() as d:
                crt, key = os.path.join(d, "c"), os.path.join(d, "k")
                with open(crt, "wb") as f:
                    f.write(base64.b64decode(user["client-certificate-data"]))
                with open(key, "wb") as f:
                    f.write(base64.b64decode(user["client-key-data"]))
                self.ctx.load_cert_chain(crt, key)
        elif "client-certificate" in user:
            self.ctx.load_cert_chain(user["client-certificate"], user["client-key"])

    def conn(self, timeout=None):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                           timeout=timeout or self.timeout)

    def headers(self, ctype=None):
        h = {"Accept": "application/json", "User-Agent": "standin-kclient"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if ctype:
            h["Content-Type"] = ctype
        return h

    def request(self, method, path, body=None, ctype="application/json", params=None):
        if params:
            path += "?" + urllib.parse.urlencode(params)
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        c = self.conn()
        try:
            c.request(method, path, body=data, headers=self.headers(ctype if data is not None else None))
            r = c.getresponse()
            raw = r.read()
        finally:
            c.close()
        if r.getheader("Content-Type", "").startswith("application/json"):
            return r.status, json.loads(raw)
        return r.status, raw.decode(errors="replace")

    def must(self, method, path, body=None, ctype="application/json", params=None, ok=(200, 201)):
        st, out = self.request(method, path, body, ctype, params)
        if st not in ok:
            raise ApiCallError(st, out)
        return out

    def watch(self, path, params, timeout=None):
        """Yield the events of one watch stream (dicts with type/object)."""
        q = dict(params)
        q["watch"] = "true"
        c = self.conn(timeout=timeout)
        try:
            c.request("GET", path + "?" + urllib.parse.urlencode(q), headers=self.headers())
            r = c.getresponse()
            if r.status != 200:
                raw = r.read()
                raise ApiCallError(r.status, json.loads(raw) if raw.startswith(b"{") else raw)
            while True:
                line = r.readline()
                if not line:
                    return
                line = line.strip()
                if line:
                    yield json.loads(line)
        finally:
            c.close()


class ApiCallError(Exception):
    def __init__(self, status, body):
        super().__init__("API answered %s: %s" % (status, body.get("message") if isinstance(body, dict)
                                                   else body))
        self.status, self.body = status, body


def pod_path(ns, name=None, sub=None):
    p = "/api/v1/namespaces/%s/pods" % ns
    if name:
        p += "/" + name
    if sub:
        p += "/" + sub
    return p
