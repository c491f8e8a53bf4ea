#!/usr/bin/env python3
"""The registry client (src/image/registry.c) against a real registry on
loopback (Debian's docker-registry, tests/lib/registry.py), through
tests/registry_get (its path in $AB_REGISTRY_GET, set by meson):

- pulls of gzip, zstd and uncompressed layers, OCI and Docker media types,
  by tag and by digest; every blob's bytes have its digest and unpack to the
  tar that was pushed; the config's fields come through
- an index (OCI and Docker list) resolves to linux/amd64; an index with only
  linux/arm64 is not_found naming linux/arm64
- an unknown repository, tag or digest is not_found naming the reference
- a registry not on loopback is spoken to over HTTPS unless listed as
  insecure (this machine's host name, when it resolves to 127.x)
- a closed port is unavailable; a 500, a manifest that is not JSON and a blob
  whose bytes do not match its digest are unavailable (and the blob is not
  kept); a blob transfer that stalls is unavailable after the stall timeout;
  a blob over the bound is limit_exceeded
- token auth (AuthProxy): the right credentials work with one token for the
  whole pull ("token" and "access_token" answers), a new one when it is
  refused midway; wrong or no credentials
  are permission_denied and the password appears in no message; Basic auth;
  redirected blobs
"""
import gzip
import hashlib
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abtest  # noqa: E402
import registry  # noqa: E402

h = abtest.Harness(need_root=False)
why = registry.missing()
if why:
    h.skip_all(why)
GET = os.environ.get("AB_REGISTRY_GET") or os.path.join(os.path.dirname(h.bin), "tests", "registry_get")
if not os.access(GET, os.X_OK):
    h.bail_out("registry_get not found at %s (build first, or run via meson test)" % GET)

PASSWORD = "s3cret-pw-0042"
_seq = [0]


def pull(ref, env=None, timeout=60):
    """Runs registry_get; returns (rc, [json lines], stderr, outdir)."""
    _seq[0] += 1
    out = os.path.join(h.root, "out%d" % _seq[0])
    os.mkdir(out)
    e = dict(os.environ)
    for k in ("AB_REGISTRY_INSECURE", "AB_REGISTRY_CREDS", "AB_REGISTRY_MAX_BLOB", "AB_REGISTRY_STALL"):
        e.pop(k, None)
    e.update(env or {})
    p = subprocess.run([GET, ref, out], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    lines = []
    for l in p.stdout.splitlines():
        try:
            lines.append(json.loads(l))
        except ValueError:
            lines.append({"unparsable": l})
    return p.returncode, lines, p.stderr, out


def kind(lines, key):
    return [l for l in lines if key in l]


def error_of(lines):
    errs = kind(lines, "error")
    return (errs[0]["error"], errs[0]["message"]) if errs else (None, "")


def unpack(data, compression):
    if compression == "gzip":
        return gzip.decompress(data)
    if compression == "zstd":
        return subprocess.run(["zstd", "-d", "-q", "-c"], input=data, stdout=subprocess.PIPE,
                              check=True).stdout
    return data


def expect_error(ref, code, name, env=None, names=(), absent=()):
    rc, lines, err, out = pull(ref, env)
    got, msg = error_of(lines)
    h.ne(rc, 0, name + ": registry_get fails", err)
    h.eq(got, code, name + ": error code " + code, msg or err)
    for n in names:
        h.contains(msg, n, name + ": the message names " + n)
    for a in absent:
        h.not_contains(msg + err, a, name + ": the message does not show " + a)
    h.ok(not kind(lines, "ok"), name + ": no ok line")
    return lines, out


L1 = registry.tar_of({"etc/hello": b"hello\n", "etc/os-release": b"ID=test\n"})
L2 = registry.tar_of({"bin/tool": os.urandom(300000)})  # incompressible: a streamed blob
CONFIG = {"config": {"Env": ["PATH=/usr/bin:/bin", "A=1"], "WorkingDir": "/srv", "User": "1000:1000",
                     "Entrypoint": ["/bin/sh", "-c"], "Cmd": ["echo hi"]}}

with registry.Registry(h.root) as reg:
    H = reg.host
    pushed = {}
    for media in ("oci", "docker"):
        for comp in ("gzip", "zstd", "none"):
            tag = "%s-%s" % (media, comp)
            pushed[tag] = registry.push_image(H, "t/img", tag, [L1, L2], CONFIG, media=media, compression=comp)

    # ---- pulls ---------------------------------------------------------------
    for tag, d in pushed.items():
        rc, lines, err, out = pull("%s/t/img:%s" % (H, tag))
        if not h.eq(rc, 0, "%s: pull exits 0" % tag, err):
            continue
        mans = kind(lines, "manifest")
        h.eq([m["manifest"] for m in mans], [str(d)], "%s: the manifest digest is the pushed one" % tag)
        h.eq(mans[0]["media_type"], d.media_type, "%s: its media type is %s" % (tag, d.media_type))
        h.eq(mans[0]["index"], False, "%s: it is no index" % tag)
        blobs = kind(lines, "blob")
        h.eq([b["blob"] for b in blobs], [d.config_digest] + d.layer_digests,
             "%s: the config and both layers were fetched, in order" % tag)
        good = True
        for b in blobs:
            data = open(b["file"], "rb").read()
            good = good and registry.sha256(data) == b["blob"] and len(data) == b["bytes"]
        h.ok(good, "%s: every file has the bytes of its digest" % tag)
        comp = tag.split("-")[1]
        want = {"none": "tar"}.get(comp, comp)
        layers = blobs[1:]
        h.eq([b.get("compression") for b in layers], [want, want], "%s: layers are %s" % (tag, want))
        if len(layers) == 2:
            h.ok(unpack(open(layers[0]["file"], "rb").read(), want) == L1 and
                 unpack(open(layers[1]["file"], "rb").read(), want) == L2,
                 "%s: the layers unpack to the tars pushed" % tag)
        h.eq(kind(lines, "ok"), [{"ok": True}], "%s: ends ok" % tag)
        h.eq(os.listdir(out).count(d.config_digest[7:] + ".part"), 0, "%s: no .part file left" % tag)

    rc, lines, err, _ = pull("%s/t/img:oci-gzip" % H)
    cfg = kind(lines, "config")
    if h.eq(len(cfg), 1, "the config blob is parsed", err):
        c = cfg[0]
        h.eq((c["os"], c["arch"]), ("linux", "amd64"), "config: os and architecture")
        h.eq(c["env"], CONFIG["config"]["Env"], "config: Env")
        h.eq((c["workdir"], c["user"]), ("/srv", "1000:1000"), "config: WorkingDir and User")
        h.eq((c["entrypoint"], c["cmd"]), (["/bin/sh", "-c"], ["echo hi"]), "config: Entrypoint and Cmd")
        h.eq(c["diff_ids"], [registry.sha256(L1), registry.sha256(L2)], "config: rootfs.diff_ids")

    d = pushed["docker-gzip"]
    rc, lines, err, _ = pull("%s/t/img@%s" % (H, d))
    h.eq(rc, 0, "a pull by digest works", err)
    h.eq([m["manifest"] for m in kind(lines, "manifest")], [str(d)], "it fetched that manifest")
    rc, lines, err, _ = pull("%s/t/img:docker-gzip@%s" % (H, pushed["oci-none"]))
    h.eq([m["manifest"] for m in kind(lines, "manifest")], [str(pushed["oci-none"])],
         "tag and digest: the digest decides")

    # ---- indexes -------------------------------------------------------------
    arm = registry.push_image(H, "t/multi", None, [registry.tar_of({"arm": b"arm64\n"})],
                              {"architecture": "arm64"})
    amd = registry.push_image(H, "t/multi", None, [L1], CONFIG)
    s390 = registry.push_image(H, "t/multi", None, [registry.tar_of({"s": b"s\n"})],
                               {"architecture": "s390x"}, media="docker")
    idx = registry.push_index(H, "t/multi", "latest", [(arm, arm.size, "linux", "arm64"),
                                                       (amd, amd.size, "linux", "amd64")])
    rc, lines, err, _ = pull("%s/t/multi" % H)
    mans = kind(lines, "manifest")
    h.eq(rc, 0, "an OCI index: pull exits 0", err)
    h.eq([(m["manifest"], m["index"]) for m in mans], [(str(idx), True), (str(amd), False)],
         "an OCI index: the index, then the linux/amd64 manifest")
    h.eq([b["blob"] for b in kind(lines, "blob")], [amd.config_digest] + amd.layer_digests,
         "an OCI index: the amd64 image's blobs were fetched")
    amd_d = registry.push_image(H, "t/multi", None, [L2], {}, media="docker")
    lst = registry.push_index(H, "t/multi", "list", [(s390, s390.size, "linux", "s390x"),
                                                     (amd_d, amd_d.size, "linux", "amd64")], media="docker")
    rc, lines, err, _ = pull("%s/t/multi:list" % H)
    mans = kind(lines, "manifest")
    h.eq([(m["manifest"], m["media_type"]) for m in mans],
         [(str(lst), registry.MT_DOCKER_LIST), (str(amd_d), registry.MT_DOCKER_MANIFEST)],
         "a Docker manifest list: resolved to its linux/amd64 manifest")
    registry.push_index(H, "t/multi", "armonly", [(arm, arm.size, "linux", "arm64")])
    expect_error("%s/t/multi:armonly" % H, "not_found", "an index with only linux/arm64",
                 names=("linux/arm64", "linux/amd64"))

    # ---- not found, unreachable --------------------------------------------
    expect_error("%s/t/img:nosuchtag" % H, "not_found", "an unknown tag", names=(H, "t/img:nosuchtag"))
    expect_error("%s/t/nosuchrepo:1" % H, "not_found", "an unknown repository", names=(H, "t/nosuchrepo"))
    nod = "sha256:" + "0" * 64
    expect_error("%s/t/img@%s" % (H, nod), "not_found", "an unknown digest", names=(nod,))
    with registry.closed_port() as down:
        expect_error("%s/t/img:oci-gzip" % down, "unavailable", "a registry that is down", names=(down,))
    lines, _ = expect_error("%s/t/img:oci-gzip" % H, "limit_exceeded", "a blob over the bound",
                            env={"AB_REGISTRY_MAX_BLOB": "100000"})
    h.eq(len(kind(lines, "blob")), 2, "a blob over the bound: only the config and the small layer were kept")

    # ---- HTTPS unless loopback or listed insecure ---------------------------
    # A name for this machine that is not loopback by its spelling: the client
    # must speak TLS to it (and fail: the registry speaks plain HTTP) unless
    # it is listed in AB_REGISTRY_INSECURE.
    name = socket.gethostname()
    try:
        addr = socket.gethostbyname(name)
    except OSError:
        addr = ""
    if addr.startswith("127.") and name.lower() != "localhost" and "." not in name:
        other = "%s:%d" % (name, reg.port)
        expect_error("%s/t/img:oci-gzip" % other, "unavailable",
                     "a registry not on loopback by name is spoken to over HTTPS", names=(other,))
        rc, lines, err, _ = pull("%s/t/img:oci-gzip" % other, {"AB_REGISTRY_INSECURE": "x.example," + other})
        h.eq(rc, 0, "listed in the insecure registries, it is spoken to over plain HTTP", err)
    else:
        h.skip("HTTPS unless loopback or insecure", "the host name %r does not resolve to loopback" % name)

    # ---- auth and faults through the proxy ---------------------------------
    ref_of = lambda px, tag="oci-gzip": "%s/t/img:%s" % (px.host, tag)  # noqa: E731
    with registry.AuthProxy(H, "user", PASSWORD) as px:
        creds = {"AB_REGISTRY_CREDS": "%s=user:%s" % (px.host, PASSWORD)}
        rc, lines, err, _ = pull(ref_of(px), creds)
        h.eq(rc, 0, "token auth with the right credentials: pull works", err)
        h.eq(len(kind(lines, "blob")), 3, "token auth: all three blobs came")
        h.eq(px.token_requests, 1, "token auth: one token served the whole pull (cached)")
        expect_error(ref_of(px), "permission_denied", "token auth with a wrong password",
                     env={"AB_REGISTRY_CREDS": "%s=user:wrong-%s" % (px.host, PASSWORD)},
                     names=(px.host,), absent=(PASSWORD,))
        expect_error(ref_of(px), "permission_denied", "token auth without credentials", names=(px.host,))
        expect_error(ref_of(px), "permission_denied", "credentials for another registry are not sent",
                     env={"AB_REGISTRY_CREDS": "%s=user:%s" % (H, PASSWORD)})
        rc, lines, err, _ = pull(ref_of(px, "nosuch"), creds)
        h.eq(error_of(lines)[0], "not_found", "token auth: an unknown tag is still not_found", err)
    with registry.AuthProxy(H, "user", PASSWORD, token_uses=2) as px:
        rc, lines, err, _ = pull(ref_of(px), {"AB_REGISTRY_CREDS": "%s=user:%s" % (px.host, PASSWORD)})
        h.eq(rc, 0, "a token refused later in the pull (expired) is fetched again", err)
        h.eq(px.token_requests, 2, "two tokens served four requests of two uses each")
    with registry.AuthProxy(H, "user", PASSWORD, token_field="access_token") as px:
        rc, lines, err, _ = pull(ref_of(px), {"AB_REGISTRY_CREDS": "%s=user:%s" % (px.host, PASSWORD)})
        h.eq(rc, 0, "a token answered as access_token works", err)
    with registry.AuthProxy(H, "user", PASSWORD, mode="basic") as px:
        rc, lines, err, _ = pull(ref_of(px), {"AB_REGISTRY_CREDS": "%s=user:%s" % (px.host, PASSWORD)})
        h.eq(rc, 0, "Basic auth with the right credentials works", err)
        expect_error(ref_of(px), "permission_denied", "Basic auth with a wrong password",
                     env={"AB_REGISTRY_CREDS": "%s=user:nope" % px.host}, absent=(PASSWORD, "nope"))
        expect_error(ref_of(px), "permission_denied", "Basic auth without credentials")
    creds_for = lambda px: {"AB_REGISTRY_CREDS": "%s=user:%s" % (px.host, PASSWORD)}  # noqa: E731
    with registry.AuthProxy(H, "user", PASSWORD, mode="redirect") as px:
        rc, lines, err, _ = pull(ref_of(px, "oci-zstd"), creds_for(px))
        h.eq(rc, 0, "blobs redirected to another host are followed", err)
    with registry.AuthProxy(H, "user", PASSWORD, mode="garbage") as px:
        expect_error(ref_of(px), "unavailable", "a manifest that is not JSON", env=creds_for(px),
                     names=(px.host, "t/img:oci-gzip"))
    with registry.AuthProxy(H, "user", PASSWORD, mode="bad_digest") as px:
        d = pushed["oci-gzip"]
        lines, out = expect_error(ref_of(px), "unavailable", "a blob whose bytes do not match its digest",
                                  env=creds_for(px), names=(d.config_digest,))
        h.eq(kind(lines, "blob"), [], "a mismatched blob is not reported as fetched")
        h.eq(sorted(os.listdir(out)), [], "a mismatched blob leaves no file")
    with registry.AuthProxy(H, "user", PASSWORD, mode="stall") as px:
        env = dict(creds_for(px), AB_REGISTRY_STALL="2")
        t0 = time.monotonic()
        lines, out = expect_error(ref_of(px), "unavailable", "a blob transfer that stalls", env=env,
                                  names=(px.host, "timed out"))
        h.ok(time.monotonic() - t0 < 20, "a stalled transfer gives up after the stall timeout",
             "took %.1f s" % (time.monotonic() - t0))
        h.eq(sorted(os.listdir(out)), [], "a stalled blob leaves no file")
    with registry.AuthProxy(H, "user", PASSWORD, mode="500") as px:
        expect_error(ref_of(px), "unavailable", "a registry answering 500", env=creds_for(px),
                     names=(px.host,))

h.done()
