#!/usr/bin/env python3
"""apiserver.py - a stand-in Kubernetes API server for the test suite.

Python 3 standard library only (plus the openssl CLI to make its
certificates). One process, threaded, HTTPS on 127.0.0.1. It serves the
subset of the Kubernetes REST API that agentbox's kubernetes backend and
the deploy manifests use, with the API's semantics: a global
resourceVersion, uid/creationTimestamp/generation, create/get/list/update/
patch/delete, label and field selectors, limit/continue, watch streams
(chunked JSON lines, bookmarks, timeoutSeconds, 410 Gone after
compaction), Status errors (400/401/404/409/410/415/422), graceful pod
deletion, finalizers (kubernetes.io/pvc-protection), ownerReference garbage
collection, generateName, and its state persisted in a JSON file so a
restart keeps objects and resourceVersions.

Built in beside the API: a "controller manager" (PVC binding to host-dir
volumes for known storage classes, PVC protection, garbage collection,
namespace deletion) and a scheduler (nodeSelector and taints/tolerations
against the Node objects the kubelet registers). Pods are run by
tests/k8s/kubelet.py, a separate process that talks to this server like a
real kubelet. tests/k8s/cluster.py starts both for a test; see
tests/k8s/README.md for what this stand-in does less than a real cluster.

Run by hand:

    python3 tests/k8s/apiserver.py --state-dir /tmp/k8s --port 6443
    # it prints "READY https://127.0.0.1:6443" and writes
    # /tmp/k8s/kubeconfig (bearer token) and /tmp/k8s/kubeconfig-cert
    # (client certificate); then:
    KUBECONFIG=/tmp/k8s/kubeconfig kubectl get pods -A
    # run pods on a Docker engine:
    DOCKER_HOST=unix:///run/agentbox-test-docker.sock \\
        python3 tests/k8s/kubelet.py --kubeconfig /tmp/k8s/kubeconfig \\
        --state-dir /tmp/k8s/kubelet

SIGTERM or SIGINT saves the state and exits at once (open watches are cut,
as when a real API server restarts); starting it again with the same
--state-dir and --port resumes with the same objects and resourceVersions.
POST /_standin/compact (authenticated) drops the watch history, so a watch
from any older resourceVersion gets 410 Gone.
"""

import argparse
import base64
import copy
import datetime
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dockerapi  # noqa: E402
import selectors_k8s as sel  # noqa: E402

VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-standin", "gitCommit": "standin",
           "gitTreeState": "clean", "buildDate": "2026-11-29T00:00:00Z", "goVersion": "go1.23",
           "compiler": "gc", "platform": "linux/amd64"}
MAX_BODY = 3 * 1024 * 1024  # a real API server's request limit is 3 MiB
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
STORAGE_CLASS = "standard"
# A controller's repeated event (a PVC that cannot bind, a pod that cannot be
# scheduled) is counted again at most this often.
EVENT_REPEAT_SECONDS = 10
PROVISIONER = "standin.k8s.io/hostpath"


class Res:
    """One served resource type."""

    def __init__(self, name, kind, group, version, namespaced, short=(), status=False, log=False,
                 verbs=None):
        self.name, self.kind, self.group, self.version = name, kind, group, version
        self.namespaced, self.short, self.status, self.log = namespaced, list(short), status, log
        self.verbs = verbs or ["create", "delete", "deletecollection", "get", "list", "patch",
                               "update", "watch"]

    @property
    def api_version(self):
        return self.group + "/" + self.version if self.group else self.version

    @property
    def singular(self):
        return self.kind.lower()


RESOURCES = [
    Res("pods", "Pod", "", "v1", True, ["po"], status=True, log=True),
    Res("persistentvolumeclaims", "PersistentVolumeClaim", "", "v1", True, ["pvc"], status=True),
    Res("persistentvolumes", "PersistentVolume", "", "v1", False, ["pv"], status=True),
    Res("secrets", "Secret", "", "v1", True),
    Res("configmaps", "ConfigMap", "", "v1", True, ["cm"]),
    Res("services", "Service", "", "v1", True, ["svc"], status=True),
    Res("serviceaccounts", "ServiceAccount", "", "v1", True, ["sa"]),
    Res("events", "Event", "", "v1", True, ["ev"]),
    Res("namespaces", "Namespace", "", "v1", False, ["ns"], status=True,
        verbs=["create", "delete", "get", "list", "patch", "update", "watch"]),
    Res("nodes", "Node", "", "v1", False, ["no"], status=True),
    Res("networkpolicies", "NetworkPolicy", "networking.k8s.io", "v1", True, ["netpol"]),
    Res("storageclasses", "StorageClass", "storage.k8s.io", "v1", False, ["sc"]),
    Res("runtimeclasses", "RuntimeClass", "node.k8s.io", "v1", False),
    Res("deployments", "Deployment", "apps", "v1", True, ["deploy"], status=True),
    Res("roles", "Role", "rbac.authorization.k8s.io", "v1", True),
    Res("rolebindings", "RoleBinding", "rbac.authorization.k8s.io", "v1", True),
]
BY_PATH = {(r.group, r.version, r.name): r for r in RESOURCES}
GROUPS = {}
for _r in RESOURCES:
    GROUPS.setdefault(_r.group, set()).add(_r.version)

# Field selectors each resource supports beyond metadata.name/namespace (as
# the real API server's field label conversion functions list them).
FIELDS = {
    "pods": {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
             "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"},
    "events": {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
               "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
               "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"},
    "secrets": {"type"},
    "namespaces": {"status.phase"},
    "nodes": {"spec.unschedulable"},
    "persistentvolumeclaims": set(),
}


# What the request being served asked for (fieldValidation) and the
# warnings it collects; unset in the controllers' thread.
REQ = threading.local()


class FieldValidator:
    """The Kubernetes OpenAPI schema at write time: a `node validate.mjs
    --serve` child answers, per object, the fields the schema does not have
    and the type errors. Unavailable (no node or no tests/k8s/node_modules):
    writes are not checked, and why is in self.why."""

    def __init__(self, enabled):
        here = os.path.dirname(os.path.abspath(__file__))
        self.argv = ["node", os.path.join(here, "validate.mjs"), "--serve"]
        self.proc = None
        self.lock = threading.Lock()
        self.why = None
        if not enabled:
            self.why = "disabled (--no-field-validation)"
        elif not shutil.which("node"):
            self.why = "node is not installed"
        elif not os.path.isdir(os.path.join(here, "node_modules", "kubernetes-models")):
            self.why = "tests/k8s/node_modules is missing (scripts/npm-deps.sh)"

    def check(self, obj):
        if self.why:
            return None
        with self.lock:
            for _ in range(2):
                if self.proc is None or self.proc.poll() is not None:
                    self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                try:
                    self.proc.stdin.write((json.dumps(obj) + "\n").encode())
                    self.proc.stdin.flush()
                    line = self.proc.stdout.readline()
                    if line:
                        return json.loads(line)
                except (OSError, ValueError):
                    pass
                self.proc = None
        return None


def field_path(path):
    return "".join("[%d]" % p if isinstance(p, int) else ("." if i else "") + p for i, p in enumerate(path))


class ApiError(Exception):
    """An error answered as a Status object."""

    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self):
        s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            s["details"] = self.details
        return s


def now_ts(offset=0.0):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def ts_seconds(ts):
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def not_found(res, name):
    grp = "" if not res.group else "." + res.group
    return ApiError(404, "NotFound", '%s%s "%s" not found' % (res.name, grp, name),
                    {"name": name, "group": res.group, "kind": res.name})


def invalid(res, name, causes):
    """422 Invalid; causes: [(field, message, reasonType)]."""
    grp = "" if not res.group else "." + res.group
    msgs = ["%s: %s" % (f, m) for f, m, _ in causes]
    message = '%s%s "%s" is invalid: %s' % (res.kind, grp, name or "", ", ".join(msgs) if len(msgs) == 1
                                            else "[" + ", ".join(msgs) + "]")
    return ApiError(422, "Invalid", message, {
        "name": name or "", "group": res.group, "kind": res.kind,
        "causes": [{"reason": t, "message": m, "field": f} for f, m, t in causes]})


def conflict(res, name):
    grp = "" if not res.group else "." + res.group
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s%s "%s": the object has been '
                    "modified; please apply your changes to the latest version and try again"
                    % (res.name, grp, name), {"name": name, "group": res.group, "kind": res.name})


# --- validation -------------------------------------------------------------

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
C_IDENT = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# Resources whose names are DNS-1123 labels (the rest are subdomains).
LABEL_NAMED = {"namespaces", "services"}


def check_dns_label(v):
    if len(v) > 63:
        return "must be no more than 63 characters"
    if not DNS1123_LABEL.match(v):
        return ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                "and must start and end with an alphanumeric character (e.g. 'my-name',  or "
                "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
    return None


def check_dns_subdomain(v):
    if len(v) > 253:
        return "must be no more than 253 characters"
    if not DNS1123_SUBDOMAIN.match(v):
        return ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
                "[a-z0-9])?)*')")
    return None


def check_qualified_name(k):
    """A label or annotation key: [prefix/]name."""
    if not isinstance(k, str) or not k:
        return "name part must be non-empty"
    prefix, _, name = k.rpartition("/")
    if "/" in k and not prefix:
        return "prefix part must be non-empty"
    if prefix and check_dns_subdomain(prefix):
        return "prefix part " + check_dns_subdomain(prefix)
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not LABEL_NAME.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
                "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "
                "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
    return None


def check_label_value(v):
    if not isinstance(v, str):
        return "must be a string"
    if len(v) > 63:
        return "must be no more than 63 characters"
    if v and not LABEL_NAME.match(v):
        return ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
                "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                "'my_value',  or '12345', regex used for validation is "
                "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
    return None


def check_annotation_value(v):
    return None if isinstance(v, str) else "values must be strings"


def validate_meta(res, obj, causes):
    md = obj.get("metadata")
    name = md.get("name", "")
    if not name:
        causes.append(("metadata.name", "Required value: name or generateName is required",
                       "FieldValueRequired"))
    else:
        err = check_dns_label(name) if res.name in LABEL_NAMED else check_dns_subdomain(name)
        if err:
            causes.append(("metadata.name", 'Invalid value: "%s": %s' % (name, err), "FieldValueInvalid"))
    for field, check_value in (("labels", check_label_value), ("annotations", check_annotation_value)):
        m = md.get(field) or {}
        path = "metadata." + field
        if not isinstance(m, dict):
            causes.append((path, "Invalid value: must be a map", "FieldValueInvalid"))
            continue
        for k, v in m.items():
            for bad, err in ((k, check_qualified_name(k)), (v, check_value(v))):
                if err:
                    causes.append((path, 'Invalid value: "%s": %s' % (bad, err), "FieldValueInvalid"))
    for i, ref in enumerate(md.get("ownerReferences") or []):
        for f in ("apiVersion", "kind", "name", "uid"):
            if not (isinstance(ref, dict) and ref.get(f)):
                causes.append(("metadata.ownerReferences[%d].%s" % (i, f), "Required value",
                               "FieldValueRequired"))


def validate_containers(lst, path, causes, required):
    if not isinstance(lst, list) or (required and not lst):
        if required:
            causes.append((path, "Required value", "FieldValueRequired"))
        return
    names = set()
    for i, c in enumerate(lst):
        p = "%s[%d]" % (path, i)
        if not isinstance(c, dict):
            causes.append((p, "Invalid value: must be an object", "FieldValueInvalid"))
            continue
        n = c.get("name", "")
        if not n:
            causes.append((p + ".name", "Required value", "FieldValueRequired"))
        elif check_dns_label(n):
            causes.append((p + ".name", 'Invalid value: "%s": %s' % (n, check_dns_label(n)),
                           "FieldValueInvalid"))
        elif n in names:
            causes.append((p + ".name", 'Duplicate value: "%s"' % n, "FieldValueDuplicate"))
        names.add(n)
        if not c.get("image"):
            causes.append((p + ".image", "Required value", "FieldValueRequired"))
        for j, e in enumerate(c.get("env") or []):
            en = e.get("name", "") if isinstance(e, dict) else ""
            if not en:
                causes.append(("%s.env[%d].name" % (p, j), "Required value", "FieldValueRequired"))
        for j, port in enumerate(c.get("ports") or []):
            cp = port.get("containerPort") if isinstance(port, dict) else None
            if not isinstance(cp, int) or not 0 < cp < 65536:
                causes.append(("%s.ports[%d].containerPort" % (p, j),
                               "Invalid value: %r: must be between 1 and 65535, inclusive" % (cp,),
                               "FieldValueInvalid"))


def validate_object(res, obj):
    causes = []
    validate_meta(res, obj, causes)
    spec = obj.get("spec")
    if res.name == "pods":
        if not isinstance(spec, dict):
            causes.append(("spec.containers", "Required value", "FieldValueRequired"))
        else:
            validate_containers(spec.get("containers"), "spec.containers", causes, True)
            validate_containers(spec.get("initContainers") or [], "spec.initContainers", causes, False)
            vols = set()
            for i, v in enumerate(spec.get("volumes") or []):
                vn = v.get("name", "") if isinstance(v, dict) else ""
                if not vn or check_dns_label(vn):
                    causes.append(("spec.volumes[%d].name" % i, 'Invalid value: "%s"' % vn,
                                   "FieldValueInvalid"))
                vols.add(vn)
            for ci, c in enumerate((spec.get("containers") or []) + (spec.get("initContainers") or [])):
                for j, m in enumerate((c.get("volumeMounts") or []) if isinstance(c, dict) else []):
                    if m.get("name") not in vols:
                        causes.append(("spec.containers[%d].volumeMounts[%d].name" % (ci, j),
                                       'Not found: "%s"' % m.get("name"), "FieldValueNotFound"))
            rp = spec.get("restartPolicy", "Always")
            if rp not in ("Always", "OnFailure", "Never"):
                causes.append(("spec.restartPolicy", 'Unsupported value: "%s": supported values: '
                               '"Always", "OnFailure", "Never"' % rp, "FieldValueNotSupported"))
    elif res.name == "persistentvolumeclaims":
        if not isinstance(spec, dict) or not spec.get("accessModes"):
            causes.append(("spec.accessModes", "Required value: at least 1 access mode is required",
                           "FieldValueRequired"))
        req = ((spec or {}).get("resources") or {}).get("requests") or {}
        if "storage" not in req:
            causes.append(("spec.resources[storage]", "Required value", "FieldValueRequired"))
        elif parse_quantity(req["storage"]) is None:
            causes.append(("spec.resources.requests[storage]", 'Invalid value: "%s": quantities must match '
                           "the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
                           % req["storage"], "FieldValueInvalid"))
    elif res.name in ("secrets", "configmaps"):
        for k in (obj.get("data") or {}):
            if not C_IDENT.match(k) or len(k) > 253:
                causes.append(("data[%s]" % k, 'Invalid value: "%s": a valid config key must consist of '
                               "alphanumeric characters, '-', '_' or '.'" % k, "FieldValueInvalid"))
        if res.name == "secrets":
            for k, v in (obj.get("data") or {}).items():
                try:
                    base64.b64decode(v, validate=True)
                except (ValueError, TypeError):
                    causes.append(("data[%s]" % k, "Invalid value: illegal base64 data",
                                   "FieldValueInvalid"))
    elif res.name == "services":
        for i, p in enumerate(((spec or {}).get("ports")) or []):
            if not isinstance(p.get("port"), int) or not 0 < p["port"] < 65536:
                causes.append(("spec.ports[%d].port" % i, "Invalid value: must be between 1 and 65535",
                               "FieldValueInvalid"))
    elif res.name == "networkpolicies":
        if not isinstance(spec, dict) or not isinstance(spec.get("podSelector"), dict):
            causes.append(("spec.podSelector", "Required value", "FieldValueRequired"))
    elif res.name == "events":
        if not obj.get("involvedObject"):
            causes.append(("involvedObject", "Required value", "FieldValueRequired"))
    return causes


QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
SUFFIX = {"": 1, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60,
          "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def parse_quantity(q):
    """A resource quantity as a float (bytes, cores), or None if malformed."""
    if isinstance(q, (int, float)):
        return float(q)
    m = QUANTITY.match(str(q))
    if not m:
        return None
    try:
        num = float(m.group(1))
    except ValueError:
        return None
    suf = m.group(2)
    if suf in SUFFIX:
        return num * SUFFIX[suf]
    if suf[:1] in "eE":
        try:
            return num * 10 ** int(suf[1:])
        except ValueError:
            return None
    return None


# --- patches ----------------------------------------------------------------

def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge_patch(target, patch):
    """Strategic merge patch as far as the stand-in does it: maps merge as in
    a JSON merge patch; lists of objects that all have a "name" (containers,
    volumes, env, ports) or "type" (conditions) merge by that key;
    finalizers merge as a set; other lists are replaced; "$patch":
    "delete"/"replace" directives on list items and maps and
    $deleteFromPrimitiveList are honoured, other $ directives ignored."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: v for k, v in copy.deepcopy(patch).items() if k != "$patch"}
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            if isinstance(out.get(name), list) and isinstance(v, list):
                out[name] = [x for x in out[name] if x not in v]
            continue
        if k.startswith("$"):
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and v.get("$patch") == "delete":
            out.pop(k, None)
        elif k in MERGED_PRIMITIVE_LISTS and isinstance(v, list) and isinstance(out.get(k), list):
            out[k] = out[k] + [x for x in v if x not in out[k]]
        elif isinstance(v, list) and isinstance(out.get(k), list):
            out[k] = merge_list(out[k], v)
        else:
            out[k] = strategic_merge_patch(out.get(k), v)
    return out


# Lists of strings whose patch strategy is "merge" (metadata.finalizers):
# a strategic merge patch adds to them; $deleteFromPrimitiveList/NAME removes.
MERGED_PRIMITIVE_LISTS = {"finalizers"}


def merge_list(cur, patch):
    for key in ("name", "type", "containerPort", "mountPath", "ip"):
        if cur and patch and all(isinstance(x, dict) and key in x for x in cur) and \
                all(isinstance(x, dict) and key in x for x in patch):
            break
    else:
        return [x for x in copy.deepcopy(patch) if not (isinstance(x, dict) and x.get("$patch"))]
    out = copy.deepcopy(cur)
    for item in patch:
        idx = next((i for i, x in enumerate(out) if x[key] == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
        elif idx is None:
            out.append(copy.deepcopy(item))
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def json_pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", "json patch: invalid pointer %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc, ops):
    """RFC 6902 JSON patch."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json patch must be a list of operations")
    doc = copy.deepcopy(doc)

    def walk(parts):
        cur = doc
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        return cur

    def get(parts):
        cur = doc
        for p in parts:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        return cur

    def add(parts, value):
        parent = walk(parts)
        last = parts[-1]
        if isinstance(parent, list):
            parent.insert(len(parent) if last == "-" else int(last), value)
        else:
            parent[last] = value

    def remove(parts):
        parent = walk(parts)
        last = parts[-1]
        if isinstance(parent, list):
            return parent.pop(int(last))
        return parent.pop(last)

    for op in ops:
        try:
            kind, parts = op["op"], json_pointer(op["path"])
            if kind == "add":
                add(parts, copy.deepcopy(op["value"]))
            elif kind == "remove":
                remove(parts)
            elif kind == "replace":
                remove(parts)
                add(parts, copy.deepcopy(op["value"]))
            elif kind == "move":
                v = remove(json_pointer(op["from"]))
                add(parts, v)
            elif kind == "copy":
                add(parts, copy.deepcopy(get(json_pointer(op["from"]))))
            elif kind == "test":
                if get(parts) != op["value"]:
                    raise ApiError(422, "Invalid", "the server rejected our request due to an error in "
                                   "our request: testing value %s failed" % op["path"])
            else:
                raise ApiError(400, "BadRequest", "Unexpected kind: %s" % kind)
        except (KeyError, IndexError, ValueError, TypeError) as e:
            raise ApiError(422, "Invalid", "the server rejected our request due to an error in our "
                           "request: json patch %s operation does not apply: %s" % (op.get("op"), e))
    return doc


# --- the store --------------------------------------------------------------

class Store:
    """Every object, the global resourceVersion, the watch history, saved to
    state.json after each write. One lock; watchers wait on its condition."""

    def __init__(self, state_dir, history_max, record_path):
        self.path = os.path.join(state_dir, "state.json")
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.objects = {}  # (resource, namespace, name) -> object
        self.rv = 0
        self.history = []  # [rv, type, resource, object, previous object]
        self.compacted = 0  # watch/continue from an rv below this: 410 Gone
        self.history_max = history_max
        self.record_path = record_path
        self.ip_counter = 0
        self.dirty = False
        self.save_cond = threading.Condition(self.lock)
        if os.path.exists(self.path):
            with open(self.path) as f:
                st = json.load(f)
            self.objects = {tuple(k.split("\x00")): v for k, v in st["objects"].items()}
            self.rv, self.history, self.compacted = st["rv"], st["history"], st["compacted"]
            self.ip_counter = st.get("ip_counter", 0)

    def mark_dirty(self):
        """Have the saver thread write state.json soon (within --save-delay);
        the caller holds the lock."""
        self.dirty = True
        self.save_cond.notify()

    def run_saver(self, delay):
        """Coalesce writes: one state.json per burst, not one per write."""
        while True:
            with self.lock:
                while not self.dirty:
                    self.save_cond.wait()
            time.sleep(delay)
            with self.lock:
                self.save()

    def save(self):
        self.dirty = False
        st = {"objects": {"\x00".join(k): v for k, v in self.objects.items()}, "rv": self.rv,
              "history": self.history, "compacted": self.compacted, "ip_counter": self.ip_counter}
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(st, f)
        os.replace(tmp, self.path)

    def next_rv(self):
        self.rv += 1
        return self.rv

    def record(self, verb, res, obj, who):
        if not self.record_path:
            return
        with open(self.record_path, "a") as f:
            f.write(json.dumps({"verb": verb, "resource": res.name, "user": who, "object": obj,
                                "warnings": list(getattr(REQ, "warnings", []))}) + "\n")

    def commit(self, etype, res, key, obj, prev):
        """Store (or remove, for DELETED) obj under key and log the event. The
        caller holds the lock and has set obj's resourceVersion."""
        if etype == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.history.append([int(obj["metadata"]["resourceVersion"]), etype, res.name, obj, prev])
        if len(self.history) > self.history_max:
            drop = len(self.history) - self.history_max
            self.compacted = self.history[drop - 1][0]
            del self.history[:drop]
        self.mark_dirty()
        self.cond.notify_all()

    def compact(self):
        with self.lock:
            self.history = []
            self.compacted = self.rv
            self.mark_dirty()
            self.cond.notify_all()

    def list(self, res, ns):
        return [o for (r, n, _), o in sorted(self.objects.items()) if r == res.name and (ns is None or
                                                                                         n == ns)]

    def by_uid(self):
        return {o["metadata"]["uid"]: (k, o) for k, o in self.objects.items()}


def get_field(obj, path):
    cur = obj
    for p in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(p)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


class Api:
    """The API's verbs over the store, with the built-in controllers."""

    def __init__(self, args):
        self.args = args
        self.store = Store(args.state_dir, args.history, os.path.join(args.state_dir, "recorded.jsonl"))
        self.stopping = False
        self.fields = FieldValidator(not args.no_field_validation)
        with self.store.lock:
            for ns in DEFAULT_NAMESPACES:
                if ("namespaces", "", ns) not in self.store.objects:
                    self.create(by_name("namespaces"), None, {"metadata": {"name": ns}}, "system")
            if ("storageclasses", "", STORAGE_CLASS) not in self.store.objects:
                self.create(by_name("storageclasses"), None, {
                    "metadata": {"name": STORAGE_CLASS, "annotations": {
                        "storageclass.kubernetes.io/is-default-class": "true"}},
                    "provisioner": PROVISIONER, "reclaimPolicy": "Delete",
                    "volumeBindingMode": "Immediate"}, "system")
            if ("serviceaccounts", "default", "default") not in self.store.objects:
                for ns in DEFAULT_NAMESPACES:
                    self.create(by_name("serviceaccounts"), ns, {"metadata": {"name": "default"}}, "system")

    # -- verbs --
    def get(self, res, ns, name):
        with self.store.lock:
            obj = self.store.objects.get((res.name, ns or "", name))
            if obj is None:
                raise not_found(res, name)
            return copy.deepcopy(obj)

    def list(self, res, ns, q):
        lsel = sel.parse_labels(q.get("labelSelector", ""))
        fsel = self.field_selector(res, q.get("fieldSelector", ""))
        limit = int(q.get("limit") or 0)
        cont = q.get("continue", "")
        with self.store.lock:
            rv = self.store.rv
            start = None
            if cont:
                try:
                    tok = json.loads(base64.b64decode(cont))
                    start, rv = tuple(tok["start"]), int(tok["rv"])
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "continue key is not valid: %s" % cont)
                if rv < self.store.compacted:
                    raise ApiError(410, "Expired", "The provided continue parameter is too old to "
                                   "display a consistent list result. You can start a new list without "
                                   "the continue parameter.")
            items, more = [], None
            for key, obj in sorted(self.store.objects.items()):
                if key[0] != res.name or (ns is not None and key[1] != ns):
                    continue
                if start is not None and key <= start:
                    continue
                if not sel.match_labels(lsel, obj) or not sel.match_fields(fsel, obj, get_field):
                    continue
                if limit and len(items) == limit:
                    more = items[-1]
                    break
                items.append(copy.deepcopy(obj))
        meta = {"resourceVersion": str(rv)}
        if more is not None:
            m = more["metadata"]
            meta["continue"] = base64.b64encode(json.dumps(
                {"start": [res.name, m.get("namespace", ""), m["name"]], "rv": rv}).encode()).decode()
        return {"kind": res.kind + "List", "apiVersion": res.api_version, "metadata": meta,
                "items": items}

    def field_selector(self, res, s):
        reqs = sel.parse_fields(s)
        allowed = {"metadata.name", "metadata.namespace"} | FIELDS.get(res.name, set())
        for f, _, _ in reqs:
            if f not in allowed:
                raise ApiError(400, "BadRequest", 'field label not supported: %s' % f)
        return reqs

    def prepare_new(self, res, ns, body):
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request was not a JSON object")
        kind, apiv = body.get("kind"), body.get("apiVersion")
        if kind and kind != res.kind:
            raise ApiError(400, "BadRequest", 'the kind in the data (%s) does not match the expected kind '
                           '(%s): no kind "%s" is registered for version "%s" at the path of this request'
                           % (kind, res.kind, kind, res.api_version))
        if apiv and apiv != res.api_version:
            raise ApiError(400, "BadRequest", 'the API version in the data (%s) does not match the '
                           'expected API version (%s)' % (apiv, res.api_version))
        obj = copy.deepcopy(body)
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        md = obj.get("metadata")
        if md is None:
            md = obj["metadata"] = {}
        if not isinstance(md, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if res.namespaced:
            if md.get("namespace") and md["namespace"] != ns:
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                               "namespace sent on the request")
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        return obj

    def check_fields(self, res, obj):
        """fieldValidation as a real API server does it for a request's body:
        a value of the wrong type is 400 BadRequest; fields the schema does
        not have are dropped with a Warning (Warn, the default), dropped
        silently (Ignore) or refused with 400 (Strict)."""
        mode = getattr(REQ, "fv", None)
        if mode is None:
            return
        if mode not in ("Ignore", "Warn", "Strict"):
            raise ApiError(400, "BadRequest", 'fieldValidation must be one of "Ignore", "Warn" or "Strict", not '
                           '"%s"' % mode)
        out = self.fields.check(obj)
        if not out:
            return
        if out["typeErrors"]:
            raise ApiError(400, "BadRequest", '%s in version "%s" cannot be handled as a %s: %s' % (
                res.kind, res.version, res.kind, "; ".join(out["typeErrors"])))
        unknown = [field_path(p) for p in out["unknown"]]
        if unknown and mode == "Strict":
            raise ApiError(400, "BadRequest", "strict decoding error: " + ", ".join(
                'unknown field "%s"' % u for u in unknown))
        for path in out["unknown"]:
            cur = obj
            for k in path[:-1]:
                cur = cur[k]
            cur.pop(path[-1], None)
        if mode == "Warn":
            REQ.warnings.extend('unknown field "%s"' % u for u in unknown)

    def check_namespace(self, res, ns):
        if not res.namespaced:
            return
        nso = self.store.objects.get(("namespaces", "", ns))
        if nso is None:
            raise ApiError(404, "NotFound", 'namespaces "%s" not found' % ns,
                           {"name": ns, "kind": "namespaces"})
        if nso["metadata"].get("deletionTimestamp"):
            raise ApiError(403, "Forbidden", 'unable to create new content in namespace %s because it is '
                           'being terminated' % ns, {"name": ns, "kind": "namespaces"})

    def create(self, res, ns, body, who, dry_run=False):
        obj = self.prepare_new(res, ns, body)
        self.check_fields(res, obj)
        md = obj["metadata"]
        with self.store.lock:
            self.check_namespace(res, ns)
            if not md.get("name") and md.get("generateName"):
                for _ in range(8):
                    name = md["generateName"][:58] + "".join(
                        secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
                    if (res.name, ns or "", name) not in self.store.objects:
                        break
                md["name"] = name
            self.defaults(res, obj)
            causes = validate_object(res, obj)
            if causes:
                raise invalid(res, md.get("name"), causes)
            self.admit(res, obj)
            key = (res.name, ns or "", md["name"])
            if key in self.store.objects:
                grp = "" if not res.group else "." + res.group
                raise ApiError(409, "AlreadyExists", '%s%s "%s" already exists' % (res.name, grp, md["name"]),
                               {"name": md["name"], "group": res.group, "kind": res.name})
            for f in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
                md.pop(f, None)
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = now_ts()
            md["generation"] = 1
            if dry_run:
                md["resourceVersion"] = str(self.store.rv)
                return obj
            md["resourceVersion"] = str(self.store.next_rv())
            self.store.commit("ADDED", res, key, obj, None)
            self.store.record("create", res, obj, who)
            return copy.deepcopy(obj)

    def admit(self, res, obj):
        """The admission plugins the stand-in has: RuntimeClass (a pod naming
        a RuntimeClass that does not exist is refused)."""
        rc = (obj.get("spec") or {}).get("runtimeClassName") if res.name == "pods" else None
        if rc and ("runtimeclasses", "", rc) not in self.store.objects:
            raise ApiError(403, "Forbidden", 'pods "%s" is forbidden: pod rejected: RuntimeClass "%s" not found'
                           % (obj["metadata"].get("name", ""), rc), {"name": obj["metadata"].get("name", ""),
                                                                     "kind": "pods"})

    def defaults(self, res, obj):
        """What the real API server's defaulting and admission add on create."""
        spec = obj.setdefault("spec", {}) if res.name in ("pods", "persistentvolumeclaims", "services",
                                                          "namespaces") else obj.get("spec")
        md = obj["metadata"]
        if res.name == "pods" and isinstance(spec, dict):
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("securityContext", {})
            spec.setdefault("enableServiceLinks", True)
            spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
            spec.setdefault("priority", 0)
            spec.setdefault("serviceAccountName", spec.get("serviceAccount", "default"))
            spec.setdefault("tolerations", [])
            for t, secs in (("node.kubernetes.io/not-ready", 300), ("node.kubernetes.io/unreachable", 300)):
                if isinstance(spec["tolerations"], list) and not any(
                        isinstance(x, dict) and x.get("key") == t for x in spec["tolerations"]):
                    spec["tolerations"].append({"key": t, "operator": "Exists", "effect": "NoExecute",
                                                "tolerationSeconds": secs})
            for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
                if not isinstance(c, dict):
                    continue
                c.setdefault("terminationMessagePath", "/dev/termination-log")
                c.setdefault("terminationMessagePolicy", "File")
                img = c.get("image") or ""
                latest = ":" not in img.rsplit("/", 1)[-1] or img.endswith(":latest")
                c.setdefault("imagePullPolicy", "Always" if latest and "@" not in img else "IfNotPresent")
                c.setdefault("resources", {})
                r = c["resources"] if isinstance(c["resources"], dict) else {}
                lim = r.get("limits") if isinstance(r.get("limits"), dict) else {}
                for k, v in lim.items():  # requests default to the limits
                    r.setdefault("requests", {}).setdefault(k, v)
                for p in c.get("ports") or []:
                    if isinstance(p, dict):
                        p.setdefault("protocol", "TCP")
            obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
        elif res.name == "persistentvolumeclaims" and isinstance(spec, dict):
            if "storageClassName" not in spec:
                spec["storageClassName"] = STORAGE_CLASS
            spec.setdefault("volumeMode", "Filesystem")
            fin = md.setdefault("finalizers", [])
            if "kubernetes.io/pvc-protection" not in fin:
                fin.append("kubernetes.io/pvc-protection")
            obj["status"] = {"phase": "Pending"}
        elif res.name == "services" and isinstance(spec, dict):
            spec.setdefault("type", "ClusterIP")
            spec.setdefault("sessionAffinity", "None")
            if spec.get("clusterIP") != "None":
                self.store.ip_counter += 1
                n = self.store.ip_counter
                spec["clusterIP"] = "10.96.%d.%d" % ((n >> 8) & 255, n & 255)
                spec["clusterIPs"] = [spec["clusterIP"]]
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
            spec.setdefault("internalTrafficPolicy", "Cluster")
            for p in spec.get("ports") or []:
                if isinstance(p, dict):
                    p.setdefault("protocol", "TCP")
                    p.setdefault("targetPort", p.get("port"))
            obj["status"] = {"loadBalancer": {}}
        elif res.name == "namespaces":
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
            md.setdefault("labels", {})
            if isinstance(md["labels"], dict):
                md["labels"]["kubernetes.io/metadata.name"] = md.get("name", "")
        elif res.name == "secrets":
            obj.setdefault("type", "Opaque")
            sd = obj.pop("stringData", None)
            if isinstance(sd, dict):
                data = obj.setdefault("data", {})
                for k, v in sd.items():
                    data[k] = base64.b64encode(str(v).encode()).decode()
        elif res.name == "networkpolicies" and isinstance(spec, dict):
            if "policyTypes" not in spec:
                spec["policyTypes"] = ["Ingress"] + (["Egress"] if "egress" in spec else [])

    def replace(self, res, ns, name, body, who, subresource=None, dry_run=False, precondition_rv=True):
        """PUT: the whole object (or its status). Conflict on a stale
        resourceVersion; the main resource keeps the old status and the
        status subresource keeps everything but the status."""
        obj = self.prepare_new(res, ns, body)
        self.check_fields(res, obj)
        md = obj["metadata"]
        if md.get("name") and md["name"] != name:
            raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the name on the "
                           "URL (%s)" % (md["name"], name))
        md["name"] = name
        with self.store.lock:
            key = (res.name, ns or "", name)
            old = self.store.objects.get(key)
            if old is None:
                raise not_found(res, name)
            want = md.get("resourceVersion")
            if want:
                if want != old["metadata"]["resourceVersion"]:
                    raise conflict(res, name)
            elif res.name == "pods" and precondition_rv:
                raise invalid(res, name, [("metadata.resourceVersion", "Invalid value: 0x0: must be "
                                           "specified for an update", "FieldValueInvalid")])
            if subresource == "status":
                new = copy.deepcopy(old)
                new["status"] = obj.get("status", {})
            else:
                new = obj
                if res.status or res.name == "pods":
                    if "status" in old:
                        new["status"] = copy.deepcopy(old["status"])
                    else:
                        new.pop("status", None)
                if res.name == "secrets":
                    sd = new.pop("stringData", None)
                    if isinstance(sd, dict):
                        for k, v in sd.items():
                            new.setdefault("data", {})[k] = base64.b64encode(str(v).encode()).decode()
                if res.name == "pods":
                    self.check_pod_update(res, old, new)
                om = old["metadata"]
                for f in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                          "generation"):
                    if f in om:
                        md[f] = om[f]
                    else:
                        md.pop(f, None)
                if om.get("deletionTimestamp"):
                    # finalizers may only be removed once deletion started
                    pass
                if new.get("spec") != old.get("spec"):
                    md["generation"] = om.get("generation", 1) + 1
                causes = validate_object(res, new)
                if causes:
                    raise invalid(res, name, causes)
            return self.write_update(res, key, old, new, who, "update", dry_run)

    def check_pod_update(self, res, old, new):
        def strip(spec):
            s = copy.deepcopy(spec or {})
            for c in (s.get("containers") or []) + (s.get("initContainers") or []):
                if isinstance(c, dict):
                    c.pop("image", None)
            s.pop("activeDeadlineSeconds", None)
            s.pop("tolerations", None)
            s.pop("terminationGracePeriodSeconds", None)
            s.pop("nodeName", None)  # set by the binding
            return s
        if strip(old.get("spec")) != strip(new.get("spec")):
            raise invalid(res, old["metadata"]["name"], [(
                "spec", "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
                "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set "
                "to 1 if it was previously negative)", "FieldValueForbidden")])
        if old.get("spec", {}).get("nodeName") and new.get("spec", {}).get("nodeName") != \
                old["spec"]["nodeName"]:
            new["spec"]["nodeName"] = old["spec"]["nodeName"]

    def write_update(self, res, key, old, new, who, verb, dry_run=False):
        md = new["metadata"]
        if dry_run:
            md["resourceVersion"] = old["metadata"]["resourceVersion"]
            return new
        if md.get("deletionTimestamp") and not md.get("finalizers") and not (
                res.name == "pods" and old.get("spec", {}).get("nodeName")) and not (
                res.name == "namespaces" and new.get("spec", {}).get("finalizers")):
            md["resourceVersion"] = str(self.store.next_rv())
            self.store.commit("DELETED", res, key, new, old)
            self.store.record(verb, res, new, who)
            return copy.deepcopy(new)
        if new == old:
            return copy.deepcopy(old)
        md["resourceVersion"] = str(self.store.next_rv())
        self.store.commit("MODIFIED", res, key, new, old)
        self.store.record(verb, res, new, who)
        return copy.deepcopy(new)

    def patch(self, res, ns, name, ctype, body, who, subresource=None, dry_run=False):
        try:
            p = json.loads(body)
        except ValueError as e:
            raise ApiError(400, "BadRequest", "error decoding patch: %s" % e)
        with self.store.lock:
            old = self.store.objects.get((res.name, ns or "", name))
            if old is None:
                raise not_found(res, name)
            if ctype == "application/merge-patch+json":
                new = merge_patch(old, p)
            elif ctype == "application/strategic-merge-patch+json":
                new = strategic_merge_patch(old, p)
            elif ctype == "application/json-patch+json":
                new = json_patch(old, p)
            else:
                raise ApiError(415, "UnsupportedMediaType", 'the body of the request was in an unknown '
                               'format - accepted media types include: application/json-patch+json, '
                               'application/merge-patch+json, application/strategic-merge-patch+json')
            if not isinstance(new, dict):
                raise ApiError(422, "Invalid", "the patch does not produce an object")
            # A patch is checked against the resourceVersion only when it carries one.
            if new["metadata"].get("resourceVersion") is None:
                new.setdefault("metadata", {})["resourceVersion"] = old["metadata"]["resourceVersion"]
            return self.replace(res, ns, name, new, who, subresource, dry_run)

    def delete(self, res, ns, name, opts, who, dry_run=False):
        with self.store.lock:
            key = (res.name, ns or "", name)
            old = self.store.objects.get(key)
            if old is None:
                raise not_found(res, name)
            pre = opts.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": Precondition '
                               'failed: UID in precondition: %s, UID in object meta: %s'
                               % (res.name, name, pre["uid"], old["metadata"]["uid"]))
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise conflict(res, name)
            new = copy.deepcopy(old)
            md = new["metadata"]
            policy = opts.get("propagationPolicy") or ("Orphan" if opts.get("orphanDependents") else
                                                        "Background")
            if policy not in ("Background", "Foreground", "Orphan"):
                raise invalid(res, name, [("propagationPolicy", 'Unsupported value: "%s"' % policy,
                                           "FieldValueNotSupported")])
            if dry_run:
                return new
            if policy == "Orphan":
                self.orphan(old["metadata"]["uid"], who)
            elif policy == "Foreground" and not md.get("deletionTimestamp"):
                md.setdefault("finalizers", []).append("foregroundDeletion")
            grace = opts.get("gracePeriodSeconds")
            if res.name == "pods":
                if grace is None:
                    grace = old["spec"].get("terminationGracePeriodSeconds", 30)
                grace = max(int(grace), 0)
                if not old["spec"].get("nodeName") or pod_terminal(old):
                    grace = 0
                cur = md.get("deletionGracePeriodSeconds")
                if grace == 0 and not md.get("finalizers"):
                    md.setdefault("deletionTimestamp", now_ts())
                    md["deletionGracePeriodSeconds"] = 0
                    md["resourceVersion"] = str(self.store.next_rv())
                    self.store.commit("DELETED", res, key, new, old)
                    return copy.deepcopy(new)
                if cur is None or grace < cur:
                    md["deletionTimestamp"] = now_ts(grace)
                    md["deletionGracePeriodSeconds"] = grace
                return self.write_update(res, key, old, new, who, "delete")
            if md.get("finalizers") or res.name == "namespaces":
                md.setdefault("deletionTimestamp", now_ts())
                md.setdefault("deletionGracePeriodSeconds", 0)
                if res.name == "namespaces":
                    new["status"]["phase"] = "Terminating"
                    # the namespace controller removes the contents, then the object
                return self.write_update(res, key, old, new, who, "delete")
            md["resourceVersion"] = str(self.store.next_rv())
            self.store.commit("DELETED", res, key, new, old)
            return copy.deepcopy(new)

    def orphan(self, uid, who):
        for key, obj in list(self.store.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == uid for r in refs):
                new = copy.deepcopy(obj)
                new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                if not new["metadata"]["ownerReferences"]:
                    del new["metadata"]["ownerReferences"]
                self.write_update(by_name(key[0]), key, obj, new, who, "orphan")

    # -- events --
    def event(self, obj, etype, reason, message, component):
        """Record an Event about obj (the caller holds the lock); a repeat
        bumps count and lastTimestamp as the event recorder does, at most
        every EVENT_REPEAT_SECONDS (the controllers run after every write)."""
        res = by_kind(obj["kind"])
        md = obj["metadata"]
        ns = md.get("namespace", "default")
        for key, ev in self.store.objects.items():
            if key[0] == "events" and key[1] == ns and ev["involvedObject"].get("uid") == md["uid"] and \
                    ev["reason"] == reason and ev["message"] == message:
                if time.time() - ts_seconds(ev["lastTimestamp"]) < EVENT_REPEAT_SECONDS:
                    return  # a controller retrying: counted again only after a while
                new = copy.deepcopy(ev)
                new["count"] = ev.get("count", 1) + 1
                new["lastTimestamp"] = now_ts()
                self.write_update(by_name("events"), key, ev, new, component, "update")
                return
        t = now_ts()
        self.create(by_name("events"), ns, {
            "metadata": {"name": "%s.%x" % (md["name"], time.time_ns())},
            "involvedObject": {"kind": obj["kind"], "namespace": ns if res.namespaced else "",
                               "name": md["name"], "uid": md["uid"], "apiVersion": obj["apiVersion"],
                               "resourceVersion": md["resourceVersion"]},
            "reason": reason, "message": message, "type": etype, "count": 1,
            "source": {"component": component}, "firstTimestamp": t, "lastTimestamp": t,
            "reportingComponent": component, "reportingInstance": ""}, component)

    # -- controllers --
    def run_controllers(self):
        """The scheduler, PV binder, PVC protection, garbage collector and
        namespace controller: each pass looks at every object (the stand-in's
        stores are small). Runs after every write and twice a second."""
        last = -1
        while not self.stopping:
            with self.store.lock:
                if self.store.rv == last:
                    self.store.cond.wait(0.5)
                last = self.store.rv
                try:
                    self.schedule()
                    self.bind_pvcs()
                    self.protect_pvcs()
                    self.collect_garbage()
                    self.delete_namespaces()
                except Exception as e:  # a controller bug must not stop the others
                    print("apiserver: controller error: %r" % e, file=sys.stderr, flush=True)
                    import traceback
                    traceback.print_exc()
                    time.sleep(0.5)

    def schedule(self):
        pods = by_name("pods")
        nodes = self.store.list(by_name("nodes"), None)
        for key, pod in list(self.store.objects.items()):
            if key[0] != "pods" or pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            if pod["spec"].get("schedulerName", "default-scheduler") != "default-scheduler":
                continue
            reasons = {}
            unbound = self.unbound_claims(pod)
            fit = None
            for node in nodes:
                why = node_fit_failure(pod, node)
                if why:
                    reasons[why] = reasons.get(why, 0) + 1
                elif fit is None:
                    fit = node
            if unbound:
                fit = None
                msg = "0/%d nodes are available: %s." % (len(nodes), unbound)
            else:
                msg = "0/%d nodes are available: %s. preemption: 0/%d nodes are available: %d Preemption " \
                      "is not helpful for scheduling." % (len(nodes), ", ".join(
                          "%d %s" % (n, r) for r, n in sorted(reasons.items())) or "no nodes registered",
                          len(nodes), len(nodes))
            new = copy.deepcopy(pod)
            st = new.setdefault("status", {})
            if fit is None:
                set_condition(st, "PodScheduled", "False", "Unschedulable", msg)
                if new != pod:
                    self.write_update(pods, key, pod, new, "default-scheduler", "update")
                    self.event(new, "Warning", "FailedScheduling", msg, "default-scheduler")
                continue
            new["spec"]["nodeName"] = fit["metadata"]["name"]
            set_condition(st, "PodScheduled", "True", None, None)
            self.write_update(pods, key, pod, new, "default-scheduler", "update")
            self.event(new, "Normal", "Scheduled", "Successfully assigned %s/%s to %s" % (
                key[1], key[2], fit["metadata"]["name"]), "default-scheduler")

    def unbound_claims(self, pod):
        for v in pod["spec"].get("volumes") or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if not claim:
                continue
            pvc = self.store.objects.get(("persistentvolumeclaims", pod["metadata"]["namespace"], claim))
            if pvc is None:
                return 'persistentvolumeclaim "%s" not found' % claim
            if pvc["metadata"].get("deletionTimestamp"):
                return 'persistentvolumeclaim "%s" is being deleted' % claim
            if pvc.get("status", {}).get("phase") != "Bound":
                return "pod has unbound immediate PersistentVolumeClaims"
        return None

    def bind_pvcs(self):
        pvcs, pvs = by_name("persistentvolumeclaims"), by_name("persistentvolumes")
        for key, pvc in list(self.store.objects.items()):
            if key[0] != "persistentvolumeclaims" or pvc["metadata"].get("deletionTimestamp"):
                continue
            if pvc.get("status", {}).get("phase") == "Bound":
                continue
            cls = pvc["spec"].get("storageClassName")
            sc = self.store.objects.get(("storageclasses", "", cls or ""))
            if not cls:
                self.event(pvc, "Normal", "FailedBinding", "no persistent volumes available for this claim "
                           "and no storage class is set", "persistentvolume-controller")
                continue
            if sc is None or sc.get("provisioner") != PROVISIONER:
                self.event(pvc, "Warning", "ProvisioningFailed", 'storageclass.storage.k8s.io "%s" not found'
                           % cls if sc is None else "no provisioner %s" % sc.get("provisioner"),
                           "persistentvolume-controller")
                continue
            pvname = "pvc-" + pvc["metadata"]["uid"]
            path = os.path.join(self.args.state_dir, "volumes", pvname)
            os.makedirs(path, exist_ok=True)
            os.chmod(path, 0o777)
            size = pvc["spec"]["resources"]["requests"]["storage"]
            if ("persistentvolumes", "", pvname) not in self.store.objects:
                self.create(pvs, None, {
                    "metadata": {"name": pvname, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
                                 "finalizers": ["kubernetes.io/pv-protection"]},
                    "spec": {"capacity": {"storage": size}, "accessModes": pvc["spec"]["accessModes"],
                             "hostPath": {"path": path, "type": "Directory"},
                             "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
                             "storageClassName": cls, "volumeMode": "Filesystem",
                             "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                          "namespace": key[1], "name": key[2],
                                          "uid": pvc["metadata"]["uid"]}}}, "persistentvolume-controller")
                pv = self.store.objects[("persistentvolumes", "", pvname)]
                npv = copy.deepcopy(pv)
                npv["status"] = {"phase": "Bound"}
                self.write_update(pvs, ("persistentvolumes", "", pvname), pv, npv, "persistentvolume-controller",
                                  "update")
            new = copy.deepcopy(pvc)
            new["spec"]["volumeName"] = pvname
            new["metadata"].setdefault("annotations", {})["pv.kubernetes.io/bind-completed"] = "yes"
            new["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"] = PROVISIONER
            self.write_update(pvcs, key, pvc, new, "persistentvolume-controller", "update")
            cur = self.store.objects[key]
            new = copy.deepcopy(cur)
            new["status"] = {"phase": "Bound", "accessModes": pvc["spec"]["accessModes"],
                             "capacity": {"storage": size}}
            self.write_update(pvcs, key, cur, new, "persistentvolume-controller", "update")
            self.event(new, "Normal", "ProvisioningSucceeded", "Successfully provisioned volume %s" % pvname,
                       PROVISIONER)
        # Released volumes of deleted claims go with reclaim policy Delete.
        claims = {o["metadata"]["uid"] for k, o in self.store.objects.items() if k[0] == "persistentvolumeclaims"}
        for key, pv in list(self.store.objects.items()):
            if key[0] != "persistentvolumes":
                continue
            ref = pv["spec"].get("claimRef") or {}
            if ref.get("uid") and ref["uid"] not in claims and \
                    pv["spec"].get("persistentVolumeReclaimPolicy") == "Delete":
                path = (pv["spec"].get("hostPath") or {}).get("path", "")
                if path.startswith(os.path.join(self.args.state_dir, "volumes") + "/"):
                    subprocess.run(["rm", "-rf", "--one-file-system", path], check=False)
                new = copy.deepcopy(pv)
                new["metadata"]["finalizers"] = []
                new["metadata"].setdefault("deletionTimestamp", now_ts())
                self.write_update(pvs, key, pv, new, "persistentvolume-controller", "delete")

    def protect_pvcs(self):
        for key, pvc in list(self.store.objects.items()):
            if key[0] != "persistentvolumeclaims" or not pvc["metadata"].get("deletionTimestamp"):
                continue
            fins = pvc["metadata"].get("finalizers") or []
            if "kubernetes.io/pvc-protection" not in fins:
                continue
            used = any(k[0] == "pods" and k[1] == key[1] and not pod_terminal(p) and any(
                (v.get("persistentVolumeClaim") or {}).get("claimName") == key[2]
                for v in p["spec"].get("volumes") or []) for k, p in self.store.objects.items())
            if used:
                continue
            new = copy.deepcopy(pvc)
            new["metadata"]["finalizers"] = [f for f in fins if f != "kubernetes.io/pvc-protection"]
            self.write_update(by_name("persistentvolumeclaims"), key, pvc, new, "pvc-protection-controller",
                              "update")

    def collect_garbage(self):
        uids = self.store.by_uid()
        for key, obj in list(self.store.objects.items()):
            if key not in self.store.objects:
                continue
            md = obj["metadata"]
            refs = md.get("ownerReferences") or []
            res = by_name(key[0])
            if refs and not md.get("deletionTimestamp") and not any(r.get("uid") in uids for r in refs):
                self.delete(res, key[1] or None, key[2], {}, "generic-garbage-collector")
                uids = self.store.by_uid()
            if md.get("deletionTimestamp") and "foregroundDeletion" in (md.get("finalizers") or []):
                deps = [(k, o) for k, o in self.store.objects.items() if any(
                    r.get("uid") == md["uid"] for r in o["metadata"].get("ownerReferences") or [])]
                for k, o in deps:
                    if not o["metadata"].get("deletionTimestamp"):
                        self.delete(by_name(k[0]), k[1] or None, k[2], {}, "generic-garbage-collector")
                if not deps:
                    cur = self.store.objects[key]
                    new = copy.deepcopy(cur)
                    new["metadata"]["finalizers"] = [f for f in md["finalizers"] if f != "foregroundDeletion"]
                    self.write_update(res, key, cur, new, "generic-garbage-collector", "update")
                uids = self.store.by_uid()

    def delete_namespaces(self):
        for key, ns in list(self.store.objects.items()):
            if key[0] != "namespaces" or not ns["metadata"].get("deletionTimestamp"):
                continue
            inside = [k for k in self.store.objects if k[1] == key[2] and by_name(k[0]).namespaced]
            for k in inside:
                o = self.store.objects.get(k)
                if o is not None and not o["metadata"].get("deletionTimestamp"):
                    self.delete(by_name(k[0]), k[1], k[2], {}, "namespace-controller")
            if not inside:
                new = copy.deepcopy(ns)
                new["spec"]["finalizers"] = []
                new["metadata"]["resourceVersion"] = str(self.store.next_rv())
                self.store.commit("DELETED", by_name("namespaces"), key, new, ns)


def pod_terminal(pod):
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def qos_class(spec):
    cs = (spec.get("containers") or []) if isinstance(spec, dict) else []
    lim_req = [((c.get("resources") or {}).get("limits") or {}, (c.get("resources") or {}).get("requests")
                or {}) for c in cs if isinstance(c, dict)]
    if not any(lim or req for lim, req in lim_req):
        return "BestEffort"
    if all(lim.get("cpu") and lim.get("memory") and (not req or req == {k: lim[k] for k in req})
           for lim, req in lim_req):
        return "Guaranteed"
    return "Burstable"


def set_condition(st, ctype, status, reason, message):
    conds = st.setdefault("conditions", [])
    for c in conds:
        if c["type"] == ctype:
            if c["status"] != status:
                c["lastTransitionTime"] = now_ts()
            c["status"] = status
            for k, v in (("reason", reason), ("message", message)):
                if v is None:
                    c.pop(k, None)
                else:
                    c[k] = v
            return
    c = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": now_ts()}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    conds.append(c)


def node_fit_failure(pod, node):
    spec = pod["spec"]
    labels = node["metadata"].get("labels") or {}
    if node.get("spec", {}).get("unschedulable"):
        return "node(s) were unschedulable"
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in node.get("status", {}).get("conditions") or [])
    if not ready:
        return "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return "node(s) didn't match Pod's node affinity/selector"
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in spec.get("tolerations") or []):
            return "node(s) had untolerated taint {%s: %s}" % (taint.get("key"), taint.get("value", ""))
    return None


def tolerates(tol, taint):
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    if tol.get("operator", "Equal") == "Exists":
        return not tol.get("key") or tol["key"] == taint.get("key")
    return tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", "")


def by_name(name):
    return next(r for r in RESOURCES if r.name == name)


def by_kind(kind):
    return next(r for r in RESOURCES if r.kind == kind)


# --- tables (kubectl get) ---------------------------------------------------

def age(obj):
    try:
        s = int(time.time() - ts_seconds(obj["metadata"]["creationTimestamp"]))
    except (KeyError, ValueError):
        return "<unknown>"
    if s < 120:
        return "%ds" % s
    if s < 7200:
        return "%dm" % (s // 60)
    return "%dh" % (s // 3600)


def table_row(res, obj):
    st = obj.get("status") or {}
    if res.name == "pods":
        cs = st.get("containerStatuses") or []
        ready = "%d/%d" % (sum(1 for c in cs if c.get("ready")), len(obj["spec"].get("containers") or []))
        status = st.get("phase", "Pending")
        for c in cs:
            w = (c.get("state") or {}).get("waiting") or (c.get("state") or {}).get("terminated")
            if w and w.get("reason"):
                status = w["reason"]
        if obj["metadata"].get("deletionTimestamp"):
            status = "Terminating"
        return [obj["metadata"]["name"], ready, status, sum(c.get("restartCount", 0) for c in cs), age(obj),
                st.get("podIP") or "<none>", obj["spec"].get("nodeName") or "<none>"]
    if res.name == "persistentvolumeclaims":
        return [obj["metadata"]["name"], st.get("phase", ""), obj["spec"].get("volumeName", ""),
                (st.get("capacity") or {}).get("storage", ""), age(obj)]
    return [obj["metadata"]["name"], age(obj)]


def table(res, objs, rv):
    cols = [("Name", "string", "name")]
    if res.name == "pods":
        cols += [("Ready", "string", ""), ("Status", "string", ""), ("Restarts", "integer", ""),
                 ("Age", "string", ""), ("IP", "string", "", 1), ("Node", "string", "", 1)]
    elif res.name == "persistentvolumeclaims":
        cols += [("Status", "string", ""), ("Volume", "string", ""), ("Capacity", "string", ""),
                 ("Age", "string", "")]
    else:
        cols += [("Age", "string", "")]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(rv)},
            "columnDefinitions": [{"name": c[0], "type": c[1], "format": c[2], "description": c[0],
                                   "priority": c[3] if len(c) > 3 else 0} for c in cols],
            "rows": [{"cells": table_row(res, o), "object": {
                "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": o["metadata"]}} for o in objs]}


# --- HTTP -------------------------------------------------------------------

class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, handler, api, ctx, token):
        super().__init__(addr, handler)
        self.api, self.ctx, self.token = api, ctx, token

    def get_request(self):
        sock, addr = self.socket.accept()
        return self.ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "agentbox-k8s-standin"

    def setup(self):
        # headers and body go out in separate writes: without this, Nagle and
        # the client's delayed ACK add 40 ms to every answer
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.settimeout(30)
        try:
            self.request.do_handshake()
        except (ssl.SSLError, OSError):
            self.close_connection = True
            self.request.close()
            raise
        self.request.settimeout(None)
        super().setup()

    def handle(self):
        try:
            super().handle()
        except (ssl.SSLError, ConnectionError, BrokenPipeError, TimeoutError):
            pass

    def log_message(self, fmt, *args):
        if self.server.api.args.verbose:
            sys.stderr.write("apiserver: %s %s\n" % (self.address_string(), fmt % args))

    def send_json(self, code, obj, extra=None):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        for w in getattr(REQ, "warnings", []):
            self.send_header("Warning", '299 - "%s"' % w.replace('"', '\\"'))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error_status(self, e):
        self.send_json(e.code, e.status())

    def user(self):
        """The caller from the request head: a bearer token or a verified
        client certificate; None if neither."""
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer ") and secrets.compare_digest(auth[7:].strip(), self.server.token):
            return "token-user"
        cert = self.request.getpeercert() if isinstance(self.request, ssl.SSLSocket) else None
        if cert:
            for rdn in cert.get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        return v
            return "cert-user"
        return None

    def read_body(self):
        """The request body, read once (after authentication) and kept, so
        that an error answered before a handler reads it leaves the
        connection in step."""
        if self.body is not None:
            return self.body
        n = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                line = self.rfile.readline(100).strip()
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline(100)
                    break
                data += self.rfile.read(size)
                self.rfile.readline(100)
                if len(data) > MAX_BODY:
                    self.close_connection = True
                    raise ApiError(413, "RequestEntityTooLarge", "Request entity too large")
            self.body = data
            return data
        if n > MAX_BODY:
            self.close_connection = True
            raise ApiError(413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728")
        self.body = self.rfile.read(n) if n else b""
        return self.body

    def json_body(self):
        ctype = self.headers.get("Content-Type", "")
        if "protobuf" in ctype or "cbor" in ctype:
            self.read_body()
            raise ApiError(415, "UnsupportedMediaType", 'the body of the request was in an unknown format - '
                           'accepted media types include: application/json, application/yaml')
        raw = self.read_body()
        try:
            return json.loads(raw or b"null")
        except ValueError as e:
            ctype = self.headers.get("Content-Type", "")
            if "yaml" in ctype:
                raise ApiError(415, "UnsupportedMediaType", "the stand-in reads JSON bodies only")
            raise ApiError(400, "BadRequest", "json: %s" % e)

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def dispatch(self, method):
        REQ.fv, REQ.warnings = None, []
        url = urllib.parse.urlsplit(self.path)
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        try:
            if url.path in ("/healthz", "/livez", "/readyz"):
                return self.send_text(200, "ok")
            if url.path == "/version":
                return self.send_json(200, VERSION)
            who = self.user()
            if who is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")  # and the connection closes
            self.who = who
            self.body = None
            self.read_body()
            REQ.fv = q.get("fieldValidation", "Warn") if method in ("POST", "PUT", "PATCH") else None
            REQ.warnings = []
            if url.path == "/_standin/compact" and method == "POST":
                self.server.api.store.compact()
                return self.send_json(200, {"compacted": self.server.api.store.compacted})
            if parts[:1] == ["api"] or parts[:1] == ["apis"]:
                return self.route(method, parts, q)
            if parts[:2] == ["openapi", "v3"]:
                return self.send_json(200, openapi_v3("/".join(parts[2:])))
            if parts == ["openapi", "v2"]:
                return self.send_openapi_v2()
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        except sel.SelectorError as e:
            self.send_error_status(ApiError(400, "BadRequest", str(e)))
        except ApiError as e:
            self.close_connection = self.close_connection or e.code in (401, 413)
            self.send_error_status(e)
        except (ConnectionError, BrokenPipeError, ssl.SSLError):
            self.close_connection = True
        except Exception as e:  # a bug: answer 500 as a Status, keep serving
            import traceback
            traceback.print_exc()
            self.send_error_status(ApiError(500, "InternalError", "Internal error occurred: %r" % e))

    def send_openapi_v2(self):
        """/openapi/v2 for clients that validate with it (kubectl before
        1.27): a swagger 2.0 document with no definitions, so their
        client-side validation finds no schema and passes objects on, as
        for a type the server does not publish. Protobuf (gnostic's
        openapi_v2.Document) when asked, else JSON."""
        if "protobuf" in self.headers.get("Accept", ""):
            def field(num, data):
                n, out = len(data), bytes([(num << 3) | 2])
                while n > 127:
                    out += bytes([(n & 127) | 128])
                    n >>= 7
                return out + bytes([n]) + data
            info = field(1, b"Kubernetes") + field(2, VERSION["gitVersion"].encode())
            data = field(1, b"2.0") + field(2, info)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")  # as kube-openapi serves it
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_json(200, {"swagger": "2.0", "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
                             "paths": {}, "definitions": {}})

    def send_text(self, code, text):
        data = text.encode() if isinstance(text, str) else text
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def route(self, method, parts, q):
        api = self.server.api
        if parts[0] == "api":
            group = ""
            if len(parts) == 1:
                return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                                            "serverAddress": self.host()}]})
            version, rest = parts[1], parts[2:]
        else:
            if len(parts) == 1:
                return self.send_json(200, api_group_list())
            group = parts[1]
            if len(parts) == 2:
                if group not in GROUPS or group == "":
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                return self.send_json(200, api_group(group))
            version, rest = parts[2], parts[3:]
        if version not in GROUPS.get(group, ()):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            return self.send_json(200, resource_list(group, version))
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        res = BY_PATH.get((group, version, rest[0]))
        if res is None or (ns is not None and not res.namespaced):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3 or (sub and not ((sub == "status" and res.status) or (sub == "log" and res.log) or
                                          (sub == "eviction" and res.name == "pods"))):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if res.namespaced and ns is None and name is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if res.namespaced and ns is None and method not in ("GET",):
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                           "resource")
        if ns is not None and check_dns_label(ns) and method == "POST":
            raise ApiError(404, "NotFound", 'namespaces "%s" not found' % ns)
        dry = "All" in q.get("dryRun", "")
        if name is None:
            if method == "GET":
                if q.get("watch") in ("1", "true", "True"):
                    return self.watch(res, ns, q)
                lst = api.list(res, ns, q)
                if "as=Table" in self.headers.get("Accept", ""):
                    return self.send_json(200, table(res, lst["items"], lst["metadata"]["resourceVersion"]))
                return self.send_json(200, lst)
            if method == "POST":
                body = self.json_body()
                return self.send_json(201, api.create(res, ns, body, self.who, dry))
            if method == "DELETE":
                opts = self.delete_options(q)
                lst = api.list(res, ns, q)
                out = []
                for o in lst["items"]:
                    try:
                        out.append(api.delete(res, ns, o["metadata"]["name"], opts, self.who, dry))
                    except ApiError as e:
                        if e.code != 404:
                            raise
                lst["items"] = out
                return self.send_json(200, lst)
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                           "resource")
        if sub == "eviction":
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", "method not allowed")
            return self.evict(res, ns, name)
        if sub == "log":
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", "method not allowed")
            return self.pod_log(res, ns, name, q)
        if method == "GET":
            obj = api.get(res, ns, name)
            if "as=Table" in self.headers.get("Accept", "") and sub is None:
                return self.send_json(200, table(res, [obj], obj["metadata"]["resourceVersion"]))
            return self.send_json(200, obj)
        if method == "PUT":
            body = self.json_body()
            return self.send_json(200, api.replace(res, ns, name, body, self.who, sub, dry))
        if method == "PATCH":
            ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
            return self.send_json(200, api.patch(res, ns, name, ctype, self.read_body(), self.who, sub, dry))
        if method == "DELETE" and sub is None:
            obj = api.delete(res, ns, name, self.delete_options(q), self.who, dry)
            if res.name != "pods" and not dry and (res.name, ns or "", name) not in api.store.objects:
                return self.send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                            "status": "Success", "details": {
                                                "name": name, "group": res.group, "kind": res.name,
                                                "uid": obj["metadata"]["uid"]}})
            return self.send_json(200, obj)
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def evict(self, res, ns, name):
        """POST pods/NAME/eviction (policy/v1 Eviction): API-initiated
        eviction, a delete with the Eviction's deleteOptions (there are no
        PodDisruptionBudgets here to refuse it)."""
        body = self.json_body()
        if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
            raise ApiError(400, "BadRequest", "the body must be a policy/v1 Eviction")
        if (body.get("metadata") or {}).get("name", name) != name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        opts = body.get("deleteOptions") or {}
        self.server.api.delete(res, ns, name, opts, self.who)
        self.send_json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                             "code": 201})

    def delete_options(self, q):
        """DeleteOptions from the body, overridden by the query's
        gracePeriodSeconds / propagationPolicy / orphanDependents."""
        opts = self.json_body() or {}
        if not isinstance(opts, dict):
            raise ApiError(400, "BadRequest", "DeleteOptions must be an object")
        if "gracePeriodSeconds" in q:
            try:
                opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
            except ValueError:
                raise ApiError(400, "BadRequest", "gracePeriodSeconds must be an integer")
        if "propagationPolicy" in q:
            opts["propagationPolicy"] = q["propagationPolicy"]
        if q.get("orphanDependents") in ("true", "false"):
            opts["orphanDependents"] = q["orphanDependents"] == "true"
        return opts

    def host(self):
        return "%s:%d" % self.server.server_address[:2]

    def pod_log(self, res, ns, name, q):
        pod = self.server.api.get(res, ns, name)
        containers = [c["name"] for c in pod["spec"]["containers"]]
        cname = q.get("container") or (containers[0] if len(containers) == 1 else None)
        if cname is None:
            raise ApiError(400, "BadRequest", "a container name must be specified for pod %s, choose one "
                           "of: [%s]" % (name, " ".join(containers)))
        names = containers + [c["name"] for c in pod["spec"].get("initContainers") or []]
        if cname not in names:
            raise ApiError(400, "BadRequest", "container %s is not valid for pod %s" % (cname, name))
        data = None
        if self.server.api.args.docker_host:
            # a running (or not yet removed) container: ask the engine
            d = dockerapi.Docker(self.server.api.args.docker_host)
            found = [c for c in d.containers("io.kubernetes.pod.uid=" + pod["metadata"]["uid"])
                     if c["Labels"].get("io.kubernetes.container.name") == cname]
            if found:
                cid = max(found, key=lambda c: c["Created"])["Id"]
                if q.get("follow") in ("true", "1"):
                    return self.follow_log(d, cid, q.get("tailLines") or "all")
                data = d.logs(cid)
        path = os.path.join(self.server.api.args.state_dir, "logs", "%s_%s.log" % (pod["metadata"]["uid"], cname))
        if data is None and os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
        if data is None:
            raise ApiError(400, "BadRequest", 'container "%s" in pod "%s" is waiting to start: '
                           'ContainerCreating' % (cname, name))
        tail = q.get("tailLines")
        if tail:
            data = b"\n".join(data.split(b"\n")[-(int(tail) + 1):])
        self.send_text(200, data)

    def follow_log(self, d, cid, tail):
        """pods/log?follow=true: the output as it comes, chunked, until the
        container ends or the client goes."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        for data in d.logs_follow(cid, tail):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def watch(self, res, ns, q):
        """A watch stream: chunked JSON lines from resourceVersion on."""
        api = self.server.api
        store = api.store
        lsel = sel.parse_labels(q.get("labelSelector", ""))
        fsel = api.field_selector(res, q.get("fieldSelector", ""))
        timeout = float(q.get("timeoutSeconds") or api.args.watch_timeout)
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true", "True")
        deadline = time.monotonic() + timeout
        rvq = q.get("resourceVersion", "")

        def matches(obj):
            return obj is not None and obj["metadata"].get("namespace", "") == (ns or obj["metadata"].get(
                "namespace", "")) and sel.match_labels(lsel, obj) and sel.match_fields(fsel, obj, get_field)

        with store.lock:
            if rvq in ("", "0"):
                since = store.rv
                initial = [{"type": "ADDED", "object": copy.deepcopy(o)} for o in store.list(res, ns)
                           if matches(o)]
                gone = False
            else:
                try:
                    since = int(rvq)
                except ValueError:
                    raise ApiError(400, "BadRequest", "invalid resource version: %s" % rvq)
                initial = []
                gone = since < store.compacted
                if since > store.rv:
                    raise ApiError(504, "Timeout", "Too large resource version: %d, current: %d" % (since, store.rv))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.close_connection = True

        as_table = "as=Table" in self.headers.get("Accept", "")

        def send(ev):
            if as_table and ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                obj = ev["object"]
                ev = {"type": ev["type"], "object": table(res, [obj], obj["metadata"]["resourceVersion"])}
            data = (json.dumps(ev) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        if gone:
            send({"type": "ERROR", "object": ApiError(
                410, "Expired", "too old resource version: %d (%d)" % (since, store.compacted)).status()})
            self.wfile.write(b"0\r\n\r\n")
            return
        for ev in initial:
            send(ev)
        last_bookmark = time.monotonic()
        while True:
            out = []
            with store.lock:
                if since < store.compacted:
                    out.append({"type": "ERROR", "object": ApiError(
                        410, "Expired", "too old resource version: %d (%d)" % (since, store.compacted)).status()})
                    since = None
                else:
                    for rv, etype, rname, obj, prev in store.history:
                        if rv <= since or rname != res.name:
                            continue
                        now_m, was_m = matches(obj), matches(prev)
                        if etype == "MODIFIED" and now_m and not was_m:
                            etype = "ADDED"
                        elif etype == "MODIFIED" and was_m and not now_m:
                            etype = "DELETED"
                        elif not now_m:
                            continue
                        out.append({"type": etype, "object": obj})
                    since = store.rv
                    if not out:
                        wait = min(deadline - time.monotonic(), api.args.bookmark_interval)
                        if wait > 0 and not api.stopping:
                            store.cond.wait(wait)
            for ev in out:
                send(ev)
            if since is None or time.monotonic() >= deadline or api.stopping:
                break
            if bookmarks and time.monotonic() - last_bookmark >= api.args.bookmark_interval:
                send({"type": "BOOKMARK", "object": {"kind": res.kind, "apiVersion": res.api_version,
                                                     "metadata": {"resourceVersion": str(since)}}})
                last_bookmark = time.monotonic()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def openapi_v3(gv):
    """The OpenAPI v3 discovery root, or one group-version's document: its
    paths and operations, each tagged with x-kubernetes-group-version-kind and
    the query parameters the server takes (kubectl looks for fieldValidation
    there to validate on the server). The stand-in publishes no component
    schemas: what it checks is in validate_object()."""
    gvs = ["api/v1"] + ["apis/%s/%s" % (g, v) for g in sorted(GROUPS) if g for v in sorted(GROUPS[g])]
    if not gv:
        return {"paths": {p: {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (p, VERSION["gitVersion"])}
                          for p in gvs}}
    if gv not in gvs:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    group, version = ("", "v1") if gv == "api/v1" else tuple(gv.split("/")[1:3])
    params = [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
              for n in ("dryRun", "fieldManager", "fieldValidation", "pretty")]
    paths = {}
    for r in RESOURCES:
        if r.group != group or r.version != version:
            continue
        gvk = {"group": group, "version": version, "kind": r.kind}
        ext = {"x-kubernetes-group-version-kind": gvk}
        base = "/" + gv + ("/namespaces/{namespace}/" if r.namespaced else "/") + r.name

        def op(action, oid):
            return dict(ext, **{"operationId": oid, "x-kubernetes-action": action, "parameters": params,
                                "responses": {"200": {"description": "OK"}}})
        kind = r.kind
        paths[base] = {"get": op("list", "list" + kind), "post": op("post", "create" + kind),
                       "delete": op("deletecollection", "deleteCollection" + kind)}
        paths[base + "/{name}"] = {"get": op("get", "read" + kind), "put": op("put", "replace" + kind),
                                   "patch": op("patch", "patch" + kind), "delete": op("delete", "delete" + kind)}
        if r.status:
            paths[base + "/{name}/status"] = {"get": op("get", "read%sStatus" % kind),
                                              "put": op("put", "replace%sStatus" % kind),
                                              "patch": op("patch", "patch%sStatus" % kind)}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": {}}}


def api_group(group):
    versions = [{"groupVersion": group + "/" + v, "version": v} for v in sorted(GROUPS[group])]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions,
            "preferredVersion": versions[0]}


def api_group_list():
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [api_group(g) for g in sorted(GROUPS) if g]}


def resource_list(group, version):
    out = []
    for r in RESOURCES:
        if r.group != group or r.version != version:
            continue
        ent = {"name": r.name, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
               "verbs": r.verbs}
        if r.short:
            ent["shortNames"] = r.short
        out.append(ent)
        if r.status:
            out.append({"name": r.name + "/status", "singularName": "", "namespaced": r.namespaced,
                        "kind": r.kind, "verbs": ["get", "patch", "update"]})
        if r.log:
            out.append({"name": r.name + "/log", "singularName": "", "namespaced": r.namespaced,
                        "kind": r.kind, "verbs": ["get"]})
        if r.name == "pods":
            out.append({"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy",
                        "version": "v1", "kind": "Eviction", "verbs": ["create"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": group + "/" + version if group else version, "resources": out}


# --- certificates and kubeconfigs -------------------------------------------

def openssl(*args):
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1/localhost and a client
    certificate (CN admin, O system:masters), made once per state dir."""
    os.makedirs(d, exist_ok=True)
    p = lambda n: os.path.join(d, n)  # noqa: E731
    if os.path.exists(p("client.crt")):
        return
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p("ca.key"), "-out", p("ca.crt"),
            "-days", "3650", "-subj", "/CN=standin-ca", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for name, subj, ext in (
            ("server", "/CN=kube-apiserver", "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes\n"
             "extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"),
            ("client", "/O=system:masters/CN=admin", "extendedKeyUsage=clientAuth\n"
             "keyUsage=critical,digitalSignature,keyEncipherment\n")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", p(name + ".key"), "-out", p(name + ".csr"),
                "-subj", subj)
        with open(p(name + ".ext"), "w") as f:
            f.write(ext)
        openssl("x509", "-req", "-in", p(name + ".csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"),
                "-CAcreateserial", "-out", p(name + ".crt"), "-days", "3650", "-extfile", p(name + ".ext"))
    for n in os.listdir(d):
        if n.endswith(".key"):
            os.chmod(p(n), 0o600)


def kubeconfig(server, ca, user, namespace="default"):
    """A kubeconfig (JSON is YAML) for one user entry."""
    with open(ca, "rb") as f:
        ca_data = base64.b64encode(f.read()).decode()
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "standin", "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": "standin-user", "user": user}],
        "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "standin-user",
                                                     "namespace": namespace}}],
        "current-context": "standin"}, indent=1)


def write_kubeconfigs(state_dir, server, token, namespace="default"):
    """kubeconfig (bearer token) and kubeconfig-cert (client cert/key),
    both with the CA inline."""
    pki = os.path.join(state_dir, "pki")
    ca = os.path.join(pki, "ca.crt")

    def b64(n):
        with open(os.path.join(pki, n), "rb") as f:
            return base64.b64encode(f.read()).decode()
    for fname, user in (("kubeconfig", {"token": token}),
                        ("kubeconfig-cert", {"client-certificate-data": b64("client.crt"),
                                             "client-key-data": b64("client.key")})):
        path = os.path.join(state_dir, fname)
        with open(path + ".tmp", "w") as f:
            f.write(kubeconfig(server, ca, user, namespace))
        os.chmod(path + ".tmp", 0o600)
        os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state-dir", required=True, help="certificates, kubeconfigs, state.json, volumes")
    ap.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free one)")
    ap.add_argument("--token", help="the bearer token (default: made once, kept in STATE/token)")
    ap.add_argument("--history", type=int, default=1000,
                    help="watch events kept; a watch from an older resourceVersion gets 410 Gone")
    ap.add_argument("--bookmark-interval", type=float, default=5.0, help="seconds between BOOKMARK events")
    ap.add_argument("--watch-timeout", type=float, default=1800.0,
                    help="seconds a watch without timeoutSeconds lasts")
    ap.add_argument("--namespace", default="default",
                    help="the kubeconfigs' namespace (made if missing)")
    ap.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST", ""),
                    help="the kubelet's Docker engine (unix:///path), for pods/log of running containers")
    ap.add_argument("--save-delay", type=float, default=0.05,
                    help="seconds a write may wait to reach state.json (SIGTERM/SIGINT save at once)")
    ap.add_argument("--no-field-validation", action="store_true",
                    help="keep unknown fields and do not check types (no node validate.mjs child)")
    ap.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = ap.parse_args()
    os.makedirs(args.state_dir, exist_ok=True)
    args.state_dir = os.path.abspath(args.state_dir)
    make_pki(os.path.join(args.state_dir, "pki"))
    tok_path = os.path.join(args.state_dir, "token")
    token = args.token
    if token is None:
        if not os.path.exists(tok_path):
            with open(tok_path, "w") as f:
                f.write(secrets.token_hex(24))
            os.chmod(tok_path, 0o600)
        with open(tok_path) as f:
            token = f.read().strip()
    api = Api(args)
    pki = os.path.join(args.state_dir, "pki")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(pki, "server.crt"), os.path.join(pki, "server.key"))
    ctx.load_verify_locations(os.path.join(pki, "ca.crt"))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    srv = Server(("127.0.0.1", args.port), Handler, api, ctx, token)
    port = srv.server_address[1]
    url = "https://127.0.0.1:%d" % port
    write_kubeconfigs(args.state_dir, url, token, args.namespace)
    with api.store.lock:
        if ("namespaces", "", args.namespace) not in api.store.objects:
            api.create(by_name("namespaces"), None, {"metadata": {"name": args.namespace}}, "system")

    def stop(signum, frame):
        api.stopping = True
        with api.store.lock:
            api.store.save()
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=api.run_controllers, daemon=True).start()
    threading.Thread(target=api.store.run_saver, args=(args.save_delay,), daemon=True).start()
    print("READY %s" % url, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
