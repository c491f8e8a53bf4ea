#!/usr/bin/env python3
"""imagelib: container images made in memory for tests (Python 3 stdlib only).

Layers
    layer_tar(spec, compress=None) -> bytes
        spec maps a path in the image ("etc/motd" or "/etc/motd") to:
          b"..." or "..."                a regular file, mode 0644
          file(content, mode=, uid=, gid=)
          directory(mode=, uid=, gid=)
          symlink(target)
          hardlink(target)               target: an earlier path of the same layer
          WHITEOUT                       deletes the path of lower layers (".wh.NAME")
          OPAQUE                         (on a directory) hides what lower layers
                                         put in it (".wh..wh..opq" inside it)
        Parent directories are added as needed; entries are sorted, times fixed,
        so the same spec gives the same bytes (and digest). compress: None,
        "gzip".
    busybox_layer() -> bytes     /bin/busybox of this host (Debian's
        busybox-static) with sh, ls, cat, echo, env, id linked to it, and
        /etc/passwd, /etc/group with root and "app" (uid/gid 1000).

Images
    An image is a dict: {"layers": [layer bytes, ...], "config": config(...),
    "tags": ["busybox:latest", ...]}; config's rootfs.diff_ids are filled in
    from the layers when written.
    config(env=, workdir=, user=, entrypoint=, cmd=, arch="amd64", os="linux")
        -> the config blob as a dict.
    example_images() -> [app, base]: "example/app:1" (3 layers: busybox base;
        /etc/motd (and a hard link to it, /etc/motd.link), /data/a, /data/b
        (0600, owned by app), /opt/tool/x; then /data/a deleted and
        /opt/tool made opaque with a new /opt/tool/y) and "busybox:latest"
        (the same base layer only).

Archives
    write_docker_save(path, images, layout="legacy"|"blobs")  `docker save`
        format: manifest.json + config + layer files ("legacy": ID/layer.tar
        and HEX.json as Docker before 25; "blobs": blobs/sha256/HEX as 25+).
    write_oci_layout(path, images, ref_names=None)  an OCI image layout:
        oci-layout, index.json, blobs/sha256/*. ref_names[i] (default: the
        image's first tag) becomes org.opencontainers.image.ref.name.
    multi=True puts the images in one image index (a multi-platform image)
        named by the first one's tag.
    Both write a plain tar; `extra` (list of (name, bytes)) adds raw members,
    e.g. ("../x", b"") to test path checks.

CLI
    imagelib.py --write-example DIR   writes the archives test_image_store.c
        uses (see write_example's docstring).
"""
import copy
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile

WHITEOUT = {"type": "whiteout"}
OPAQUE = {"type": "opaque"}
MTIME = 1700000000


def file(content, mode=0o644, uid=0, gid=0):
    if isinstance(content, str):
        content = content.encode()
    return {"type": "file", "content": content, "mode": mode, "uid": uid, "gid": gid}


def directory(mode=0o755, uid=0, gid=0):
    return {"type": "dir", "mode": mode, "uid": uid, "gid": gid}


def symlink(target):
    return {"type": "symlink", "target": target}


def hardlink(target):
    return {"type": "hardlink", "target": target.lstrip("/")}


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _info(name, kind, mode=0o644, uid=0, gid=0, size=0):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = mode
    ti.uid, ti.gid = uid, gid
    ti.uname = ti.gname = ""
    ti.mtime = MTIME
    ti.size = size
    return ti


def layer_tar(spec, compress=None):
    entries = {}
    for path, v in spec.items():
        path = path.strip("/")
        if isinstance(v, (bytes, str)):
            v = file(v)
        if v["type"] == "whiteout":
            d, _, base = path.rpartition("/")
            path, v = (d + "/" if d else "") + ".wh." + base, file(b"")
        elif v["type"] == "opaque":
            entries.setdefault(path, directory())
            path, v = path + "/.wh..wh..opq", file(b"")
        entries[path] = v
    for path in list(entries):  # parents
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            entries.setdefault("/".join(parts[:i]), directory())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for path in sorted(entries):
            v = entries[path]
            t = v["type"]
            if t == "file":
                ti = _info(path, tarfile.REGTYPE, v["mode"], v["uid"], v["gid"], len(v["content"]))
                tf.addfile(ti, io.BytesIO(v["content"]))
            elif t == "dir":
                tf.addfile(_info(path, tarfile.DIRTYPE, v["mode"], v["uid"], v["gid"]))
            elif t in ("symlink", "hardlink"):
                ti = _info(path, tarfile.SYMTYPE if t == "symlink" else tarfile.LNKTYPE, 0o777)
                ti.linkname = v["target"]
                tf.addfile(ti)
            else:
                raise ValueError("unknown entry type %r for %s" % (t, path))
    data = buf.getvalue()
    if compress == "gzip":
        data = gzip.compress(data, mtime=0)
    elif compress:
        raise ValueError("compress: None or 'gzip'")
    return data


BUSYBOX = "/bin/busybox"
PASSWD = "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n"
GROUP = "root:x:0:\napp:x:1000:\n"


def busybox_layer():
    with open(BUSYBOX, "rb") as f:
        bb = f.read()
    spec = {"bin/busybox": file(bb, 0o755)}
    for tool in ("sh", "ls", "cat", "echo", "env", "id"):
        spec["bin/" + tool] = symlink("busybox")
    spec["etc/passwd"] = PASSWD
    spec["etc/group"] = GROUP
    spec["home/app"] = directory(0o755, 1000, 1000)
    spec["tmp"] = directory(0o1777)
    return layer_tar(spec)


def config(env=None, workdir=None, user=None, entrypoint=None, cmd=None, arch="amd64",
           os="linux"):
    c = {"Env": env if env is not None else ["PATH=/bin:/usr/bin"]}
    if workdir:
        c["WorkingDir"] = workdir
    if user:
        c["User"] = user
    if entrypoint is not None:
        c["Entrypoint"] = entrypoint
    if cmd is not None:
        c["Cmd"] = cmd
    return {"architecture": arch, "os": os, "config": c,
            "rootfs": {"type": "layers", "diff_ids": []},
            "created": "2026-01-01T00:00:00Z"}


def _uncompressed(layer):
    return gzip.decompress(layer) if layer[:2] == b"\x1f\x8b" else layer


def config_blob(image):
    """The config bytes of image, diff_ids filled from its layers (unless the
    config already has some: a test may set wrong ones on purpose)."""
    c = copy.deepcopy(image["config"])
    if not c["rootfs"]["diff_ids"]:
        c["rootfs"]["diff_ids"] = [sha256(_uncompressed(l)) for l in image["layers"]]
    return json.dumps(c, sort_keys=True).encode()


def example_images():
    base = busybox_layer()
    add = layer_tar({
        "etc/motd": "welcome\n",
        "etc/motd.link": hardlink("etc/motd"),
        "data/a": "a\n",
        "data/b": file("b\n", 0o600, 1000, 1000),
        "opt/tool/x": file("#!/bin/sh\necho x\n", 0o755),
    })
    change = layer_tar({
        "data/a": WHITEOUT,
        "opt/tool": OPAQUE,
        "opt/tool/y": file("#!/bin/sh\necho y\n", 0o755),
    })
    app = {"layers": [base, add, change], "tags": ["example/app:1"],
           "config": config(env=["PATH=/bin", "GREETING=hi"], workdir="/data", user="app",
                            entrypoint=["/bin/sh", "-c"], cmd=["cat /etc/motd"])}
    bb = {"layers": [base], "tags": ["busybox:latest", "busybox:1.36"],
          "config": config(cmd=["sh"])}
    return [app, bb]


class _Tar:
    def __init__(self, path):
        self.tf = tarfile.open(path, "w", format=tarfile.PAX_FORMAT)
        self.dirs = set()

    def add(self, name, data):
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d and d not in self.dirs and not d.startswith(("/", "..")):
                self.dirs.add(d)
                self.tf.addfile(_info(d, tarfile.DIRTYPE, 0o755))
        self.tf.addfile(_info(name, tarfile.REGTYPE, 0o644, size=len(data)), io.BytesIO(data))

    def close(self):
        self.tf.close()


def write_docker_save(path, images, layout="legacy", extra=()):
    t = _Tar(path)
    manifest, written = [], set()
    for im in images:
        cfg = config_blob(im)
        if layout == "legacy":
            cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"
        else:
            cfg_name = "blobs/sha256/" + hashlib.sha256(cfg).hexdigest()
        layers = []
        for l in im["layers"]:
            h = hashlib.sha256(l).hexdigest()
            name = h + "/layer.tar" if layout == "legacy" else "blobs/sha256/" + h
            if name not in written:
                t.add(name, l)
                written.add(name)
            layers.append(name)
        if cfg_name not in written:
            t.add(cfg_name, cfg)
            written.add(cfg_name)
        manifest.append({"Config": cfg_name, "RepoTags": im.get("tags") or None,
                         "Layers": layers})
    t.add("manifest.json", json.dumps(manifest).encode())
    for name, data in extra:
        t.add(name, data)
    t.close()


def _layer_type(l):
    return ("application/vnd.oci.image.layer.v1.tar+gzip" if l[:2] == b"\x1f\x8b"
            else "application/vnd.oci.image.layer.v1.tar")


def write_oci_layout(path, images, ref_names=None, extra=(), multi=False):
    t = _Tar(path)
    blobs = {}

    def blob(data):
        d = sha256(data)
        blobs.setdefault(d, data)
        return d

    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": []}
    descs = []
    for im in images:
        cfg = config_blob(im)
        m = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
             "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                        "digest": blob(cfg), "size": len(cfg)},
             "layers": [{"mediaType": _layer_type(l), "digest": blob(l), "size": len(l)}
                        for l in im["layers"]]}
        mb = json.dumps(m, sort_keys=True).encode()
        c = im["config"]
        descs.append({"mediaType": m["mediaType"], "digest": blob(mb), "size": len(mb),
                      "platform": {"os": c["os"], "architecture": c["architecture"]}})
    if multi:  # one image index of every platform, named by the first image's tag
        inner = {"schemaVersion": 2, "mediaType": index["mediaType"], "manifests": descs}
        ib = json.dumps(inner, sort_keys=True).encode()
        descs = [{"mediaType": index["mediaType"], "digest": blob(ib), "size": len(ib)}]
    for i, desc in enumerate(descs):
        name = ref_names[i] if ref_names else (images[i].get("tags") or [None])[0]
        if name:
            desc["annotations"] = {"org.opencontainers.image.ref.name": name}
        index["manifests"].append(desc)
    t.add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
    t.add("index.json", json.dumps(index).encode())
    for d in sorted(blobs):
        t.add("blobs/sha256/" + d[7:], blobs[d])
    for name, data in extra:
        t.add(name, data)
    t.close()


def write_example(d):
    """Writes into d:
      docker.tar      `docker save` (legacy paths) of example_images()
      docker-gz.tar   `docker save` (blobs/ paths) of one image
                      "gz/app:1" whose layers are gzip-compressed
      app-gz.tar      the app of docker.tar again (same config, so same id)
                      with gzip-compressed layers, named "example/app:gz"
      oci.tar         OCI layout of "localhost:5000/tools/oci:2": the busybox
                      base (shared with docker.tar) and a gzip layer
      oci-multi.tar   OCI layout of "multi/app:1": an image index of an arm64
                      and an amd64 image
      oci-arm-only.tar the same with the arm64 image only
      oci-tag.tar     OCI layout whose ref.name is only the tag "latest"
      bad-diffid.tar  docker save whose config's diff_id does not match the layer
      bad-blob.tar    OCI layout with a layer blob not matching its digest
      arm64.tar       docker save of an arm64 image
      no-manifest.tar a tar with neither manifest.json nor index.json
      dotdot.tar      docker.tar plus a member "../x"
      absolute.tar    docker.tar plus a member "/x"
      link-parent.tar a symlink "blobs" -> "/tmp" then a file "blobs/ab-imgstore-evil"
      link-file.tar   manifest.json a symlink to /etc/hostname (outside the archive)
      not-a-tar       random text
    and ids.json: {"app", "busybox", "gz", "oci", "oci-tag", "base-layer"} ids
    and digests the test compares with."""
    os.makedirs(d, exist_ok=True)
    app, bb = example_images()
    base = app["layers"][0]
    write_docker_save(os.path.join(d, "docker.tar"), [app, bb])
    gz = {"layers": [gzip.compress(base, mtime=0),
                     layer_tar({"etc/gz": "gz\n"}, compress="gzip")],
          "tags": ["gz/app:1"], "config": config(cmd=["sh"])}
    write_docker_save(os.path.join(d, "docker-gz.tar"), [gz], layout="blobs")
    app_gz = dict(app, layers=[gzip.compress(l, mtime=0) for l in app["layers"]],
                  tags=["example/app:gz"])
    write_docker_save(os.path.join(d, "app-gz.tar"), [app_gz], layout="blobs")
    oci = {"layers": [base, layer_tar({"etc/oci": "oci\n"}, compress="gzip")],
           "tags": ["localhost:5000/tools/oci:2"], "config": config(cmd=["id"])}
    write_oci_layout(os.path.join(d, "oci.tar"), [oci])
    multi_arm = {"layers": [layer_tar({"etc/arch": "arm64\n"})], "tags": ["multi/app:1"],
                 "config": config(arch="arm64")}
    multi_amd = {"layers": [base, layer_tar({"etc/arch": "amd64\n"})], "tags": ["multi/app:1"],
                 "config": config()}
    write_oci_layout(os.path.join(d, "oci-multi.tar"), [multi_arm, multi_amd], multi=True)
    write_oci_layout(os.path.join(d, "oci-arm-only.tar"), [multi_arm], multi=True)
    tagonly = {"layers": [base, layer_tar({"etc/tagonly": "t\n"})], "tags": ["latest"],
               "config": config(cmd=["ls"])}
    write_oci_layout(os.path.join(d, "oci-tag.tar"), [tagonly])
    bad = {"layers": [base, layer_tar({"etc/bad": "bad\n"})], "tags": ["bad/diffid:1"],
           "config": config()}
    bad["config"]["rootfs"]["diff_ids"] = [sha256(base), sha256(b"something else")]
    write_docker_save(os.path.join(d, "bad-diffid.tar"), [bad])
    _write_bad_blob(os.path.join(d, "bad-blob.tar"), base)
    arm = {"layers": [layer_tar({"etc/arm": "arm\n"})], "tags": ["arm/app:1"],
           "config": config(arch="arm64")}
    write_docker_save(os.path.join(d, "arm64.tar"), [arm])
    t = _Tar(os.path.join(d, "no-manifest.tar"))
    t.add("hello.txt", b"hello\n")
    t.close()
    write_docker_save(os.path.join(d, "dotdot.tar"), [app, bb], extra=[("../x", b"x")])
    write_docker_save(os.path.join(d, "absolute.tar"), [app, bb], extra=[("/x", b"x")])
    _write_evil_links(d)
    with open(os.path.join(d, "not-a-tar"), "w") as f:
        f.write("this is not a tar archive\n" * 40)
    ids = {"app": sha256(config_blob(app)), "busybox": sha256(config_blob(bb)),
           "gz": sha256(config_blob(gz)), "oci": sha256(config_blob(oci)),
           "oci-tag": sha256(config_blob(tagonly)), "multi": sha256(config_blob(multi_amd)), "base-layer": sha256(base),
           "app-layers": [sha256(l) for l in app["layers"]]}
    with open(os.path.join(d, "ids.json"), "w") as f:
        json.dump(ids, f, indent=1, sort_keys=True)


def _write_evil_links(d):
    for name, members in (
            ("link-parent.tar", [("blobs", "/tmp"), ("blobs/ab-imgstore-evil", b"x")]),
            ("link-file.tar", [("manifest.json", "/etc/hostname")])):
        with tarfile.open(os.path.join(d, name), "w", format=tarfile.PAX_FORMAT) as tf:
            for member, v in members:
                if isinstance(v, bytes):
                    tf.addfile(_info(member, tarfile.REGTYPE, size=len(v)), io.BytesIO(v))
                else:
                    ti = _info(member, tarfile.SYMTYPE, 0o777)
                    ti.linkname = v
                    tf.addfile(ti)


def _write_bad_blob(path, base):
    """An OCI layout whose second layer's bytes differ from its digest."""
    good = layer_tar({"etc/good": "good\n"})
    im = {"layers": [base, good], "tags": ["bad/blob:1"], "config": config()}
    tmp = path + ".tmp"
    write_oci_layout(tmp, [im])
    evil = layer_tar({"etc/good": "evil\n"})
    with tarfile.open(tmp) as src, tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as dst:
        for ti in src.getmembers():
            data = src.extractfile(ti).read() if ti.isfile() else None
            if ti.name == "blobs/sha256/" + sha256(good)[7:]:
                data = evil
                ti.size = len(evil)
            dst.addfile(ti, io.BytesIO(data) if data is not None else None)
    os.unlink(tmp)


def main(argv):
    if len(argv) == 3 and argv[1] == "--write-example":
        write_example(argv[2])
        return 0
    print(__doc__.split("CLI")[1].strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
