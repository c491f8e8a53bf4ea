#!/usr/bin/env python3
"""Attacks on the host's disk through archive uploads (PUT
/v1/sandboxes/{id}/files?extract=1; docs/security.md "Archive uploads and
the host's disk"). A zip of a few hundred KiB can hold hundreds of MiB of
zeros. Each check passes only when the attack fails:
- while the server extracts it, the server's files in DATA/tmp never hold
  more than the upload's own bytes (the entries go straight into the box,
  as its own writes): a zip bomb larger than the box's disk, and an archive
  of several entries that fits;
- the bomb is refused with 507 once the box's disk is full, the box uses no
  more than its disk limit, and it still works;
- an archive that fits is extracted whole (sizes as in the archive).
The server's open files are watched through /proc/PID/fd while the upload
runs (an unlinked temp file in DATA/tmp shows there, with its size)."""
import io
import os
import sys
import threading
import time
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

MIB = 1024 * 1024
h = abserver.ServerHarness(budget=200)
srv = h.start_server(name="archdisk", config={"idle_pause": "1h", "idle_stop": "2h"})
TMP = os.path.realpath(os.path.join(srv.data, "tmp"))
ZIP_HDR = {"Content-Type": "application/zip"}


def zeros_zip(entries):
    """A zip of {name: MiB of zeros} (deflated: about 1 KiB per MiB)."""
    buf = io.BytesIO()
    chunk = bytes(MIB)
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, mib in entries.items():
            with z.open(name, "w", force_zip64=True) as f:
                for _ in range(mib):
                    f.write(chunk)
    return buf.getvalue()


def tmp_bytes(pid):
    """Bytes on disk of the server's open files in DATA/tmp (deleted or not)."""
    total = 0
    fds = "/proc/%d/fd" % pid
    try:
        names = os.listdir(fds)
    except OSError:
        return 0
    for n in names:
        p = os.path.join(fds, n)
        try:
            target = os.readlink(p)
            if not target.startswith(TMP + "/"):
                continue
            st = os.stat(p)
            total += max(st.st_size, st.st_blocks * 512)
        except OSError:
            continue
    return total


def upload_watched(box, path, body):
    """PUTs body with extract=1 while watching DATA/tmp; (response, most bytes seen there)."""
    most = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            most[0] = max(most[0], tmp_bytes(srv.proc.pid))
            time.sleep(0.002)

    t = threading.Thread(target=watch)
    t.start()
    try:
        r = srv.put(srv.file_path(box, path, extract=1), body, headers=ZIP_HDR, timeout=120)
    finally:
        stop.set()
        t.join()
    return r, most[0]


def disk_used_mib(box):
    r = srv.exec(box, "du -sm --apparent-size /workspace | cut -f1")
    try:
        return int((r.get("stdout") or "").strip())
    except ValueError:
        return -1


# ---- a zip bomb: 256 MiB of zeros in a box with a 32 MiB disk ---------------------------------
BOX = "bomb"
r = srv.post("/v1/sandboxes", {"id": BOX, "limits": {"disk_mib": 32}})
h.eq(r.status, 201, "a box with a 32 MiB disk is made", r.describe())
bomb = zeros_zip({"zeros.bin": 256})
h.diag("the bomb: %d bytes of zip, 256 MiB inside" % len(bomb))
r, most = upload_watched(BOX, "boom", bomb)
h.eq(r.status, 507, "the bomb is refused once the box's disk is full (507)", r.describe())
h.ok(most <= len(bomb) + MIB,
     "while it was extracted the server held at most the upload's own bytes in DATA/tmp "
     "(%d bytes seen, the upload has %d)" % (most, len(bomb)))
used = disk_used_mib(BOX)
h.ok(0 <= used <= 32, "the box uses no more than its 32 MiB disk (%d MiB)" % used)
r = srv.exec(BOX, "echo still-$((6*7))")
h.eq(r.get("stdout"), "still-42\n", "the box still works", r.describe())

# ---- an archive that fits: 3 entries of 8 MiB into a 64 MiB disk ------------------------------
BOX2 = "fits"
r = srv.post("/v1/sandboxes", {"id": BOX2, "limits": {"disk_mib": 64}})
h.eq(r.status, 201, "a box with a 64 MiB disk is made", r.describe())
ok = zeros_zip({"a.bin": 8, "d/b.bin": 8, "d/e/c.bin": 8})
r, most = upload_watched(BOX2, "unz", ok)
h.eq((r.status, r.get("files")), (201, 3), "an archive that fits is extracted (201, 3 files)", r.describe())
h.ok(most <= len(ok) + MIB,
     "... and the server held at most the upload's own bytes in DATA/tmp (%d bytes seen, the upload "
     "has %d)" % (most, len(ok)))
r = srv.exec(BOX2, "stat -c %s /workspace/unz/a.bin /workspace/unz/d/b.bin /workspace/unz/d/e/c.bin")
h.eq((r.get("stdout") or "").split(), [str(8 * MIB)] * 3, "... every file whole in the box", r.describe())
h.eq(tmp_bytes(srv.proc.pid), 0, "nothing is left open in DATA/tmp after the uploads")
h.done()
