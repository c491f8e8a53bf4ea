#!/usr/bin/env python3
"""Attacks through the zip download of a box's directory
(GET /v1/sandboxes/ID/files?path=DIR&format=zip). Whatever runs in a box
names its files as it likes and makes the links it likes; the person who
downloads the zip lists and unpacks it on their own machine.

- names with backslashes (a path separator, "..\\..", when unpacked on
  Windows), newlines, terminal escape sequences (ESC, the one-byte C1 CSI),
  bidirectional-text overrides and bytes that are not UTF-8 must reach the
  zip escaped (%XX), never raw;
- symlinks (to the box's secrets, to a host path, up the tree) are stored as
  links whose content is their target, never followed: no entry holds what
  they point to, also when the zipped path itself is a link;
- a file listed as a regular file and swapped for a link to a secret while
  the zip is being streamed is not read through the link.

Each check passes only when the attack fails."""
import http.client
import io
import os
import secrets
import stat
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=200)
S = h.start_server(config={"limits": {"disk": "256M", "memory": "256M", "timeout": "60s"}})

r = S.post("/v1/sandboxes", {"app_id": "zipapp", "user_id": "u", "chat_id": "zip"})
h.eq(r.status, 201, "a box to zip from", r.describe())
BOX = r.get("id") or "none"

SECRET = "ZIP-SECRET-" + secrets.token_hex(12)
BOX_SECRET = "/etc/agentbox-zip-secret-" + secrets.token_hex(4)
# a file on the host, outside every box
HOST_SECRET = os.path.join("/tmp", "agentbox-zip-host-%s" % secrets.token_hex(4))
with open(HOST_SECRET, "w") as f:
    f.write(SECRET)

# names as raw bytes (Python's os functions take bytes)
NAMES = {
    "backslash": b"..\\..\\evil-backslash.txt",
    "newline": b"new\nline.txt",
    "esc": b"esc\x1b[31mred\x1b]0;title\x07.txt",
    "c1_csi": b"csi\xc2\x9b2J.txt",
    "bidi": "bidi\u202egnp.exe".encode(),
    "not_utf8": b"bad\xff\xfe.txt",
    "carriage": b"cr\rhidden.txt",
}
PLAIN = {"percent": "100% plain.txt", "unicode": "caf\u00e9-\u65e5\u672c.txt"}

MAKE = r'''
import os, sys
secret, box_secret, host_secret = sys.argv[1], sys.argv[2], sys.argv[3]
names = [bytes.fromhex(x) for x in sys.argv[4].split(",")]
plain = sys.argv[5].split("/")
with open(box_secret, "w") as f:
    f.write(secret)
os.chmod(box_secret, 0o600)
os.makedirs("/workspace/z/sub", exist_ok=True)
os.chdir(b"/workspace/z")
for n in names:
    with open(n, "wb") as f:
        f.write(b"content of " + n)
    with open(b"sub/" + n, "wb") as f:
        f.write(b"sub " + n)
for n in plain:
    with open(n, "w") as f:
        f.write("plain " + n)
os.symlink(box_secret, "to-box-secret")
os.symlink(host_secret, "to-host-path")
os.symlink("/etc/shadow", "to-shadow")
os.symlink("../../../../..", "up-the-tree")
os.symlink(box_secret, "sub/" + "link\nwith-newline")
print("made")
'''


def sh(cmd, t=60):
    return S.exec(BOX, cmd, timeout=t, http_timeout=t + 30)


def py_in_box(script, *args):
    import base64
    import shlex
    b64 = base64.b64encode(script.encode()).decode()
    return sh('python3 -c "$(echo %s | base64 -d)" %s' % (b64, " ".join(shlex.quote(str(a)) for a in args)))


r = py_in_box(MAKE, SECRET, BOX_SECRET, HOST_SECRET, ",".join(n.hex() for n in NAMES.values()),
              "/".join(PLAIN.values()))
h.eq((r.get("exit_code"), (r.get("stdout") or "").strip()), (0, "made"),
     "the box made files with hostile names and links", r.describe()[:800])


def raw_name(zi):
    """The entry's name as the bytes in the archive."""
    return zi.filename.encode("utf-8" if zi.flag_bits & 0x800 else "cp437")


def unsafe(b):
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8"
    for c in s:
        o = ord(c)
        if o < 0x20 or o == 0x7F or c == "\\" or 0x80 <= o <= 0x9F or 0x202A <= o <= 0x202E or \
                0x2066 <= o <= 0x2069:
            return "U+%04X" % o
    return None


def get_zip(path):
    r = S.get(S.file_path(BOX, path, format="zip"), timeout=60)
    try:
        return r, zipfile.ZipFile(io.BytesIO(r.body))
    except zipfile.BadZipFile as e:
        h.diag("not a zip (%s): %s" % (e, r.describe()[:300]))
        return r, None


r, zf = get_zip("/workspace/z")
h.eq(r.status, 200, "the zip of the directory is served", r.describe()[:300])
infos = zf.infolist() if zf else []
bad = [(raw_name(zi), unsafe(raw_name(zi))) for zi in infos if unsafe(raw_name(zi))]
h.eq(bad, [], "no entry name carries a control character, an escape sequence, a backslash, a bidi "
     "override or bytes that are not UTF-8", repr([raw_name(zi) for zi in infos]))
by_name = {raw_name(zi): zi for zi in infos}


def esc(b):
    """What docs/api.md says an unsafe name becomes: each byte of an unsafe
    character as %XX."""
    out = b""
    i = 0
    while i < len(b):
        for n in (1, 2, 3, 4):
            try:
                c = b[i:i + n].decode("utf-8")
                break
            except UnicodeDecodeError:
                c = None
        if c is None:
            out += b"%%%02X" % b[i]
            i += 1
            continue
        if unsafe(b[i:i + n]):
            out += b"".join(b"%%%02X" % x for x in b[i:i + n])
        else:
            out += b[i:i + n]
        i += n
    return out


for k, n in NAMES.items():
    zi = by_name.get(esc(n))
    h.ok(zi is not None and zf.read(zi) == b"content of " + n,
         "%s: stored as %r with its content" % (k, esc(n)), repr(sorted(by_name))[:600])
    zi = by_name.get(b"sub/" + esc(n))
    h.ok(zi is not None and zf.read(zi) == b"sub " + n, "%s in a subdirectory: stored escaped too" % k)
for k, n in PLAIN.items():
    zi = by_name.get(n.encode())
    h.ok(zi is not None and zf.read(zi) == ("plain " + n).encode(), "%s name %r is kept as it is" % (k, n),
         repr(sorted(by_name))[:600])

for link, target in (("to-box-secret", BOX_SECRET), ("to-host-path", HOST_SECRET),
                     ("to-shadow", "/etc/shadow"), ("up-the-tree", "../../../../..")):
    zi = by_name.get(link.encode())
    h.ok(zi is not None and stat.S_ISLNK(zi.external_attr >> 16) and zf.read(zi) == target.encode(),
         "%s is stored as a symlink to %s" % (link, target), repr(zi))
zi = by_name.get(b"sub/link%0Awith-newline")
h.ok(zi is not None and stat.S_ISLNK(zi.external_attr >> 16), "a link with a newline in its name: a link, "
     "its name escaped", repr(sorted(by_name))[:600])
leaked = [raw_name(zi) for zi in infos if SECRET.encode() in zf.read(zi)] if zf else ["(no zip)"]
h.eq(leaked, [], "no entry holds what a link points to (the box's secret, a host file)")
h.ok(not any(n.startswith(b"up-the-tree/") for n in by_name), "the link up the tree is not walked")

# the zipped path itself a link
for p in ("/workspace/z/to-box-secret", "/workspace/z/to-host-path"):
    r, zf1 = get_zip(p)
    ents = zf1.infolist() if zf1 else []
    h.ok(r.status == 200 and len(ents) == 1 and stat.S_ISLNK(ents[0].external_attr >> 16)
         and SECRET.encode() not in zf1.read(ents[0]),
         "format=zip of the link %s: one symlink entry, not its target's content" % p.rsplit("/", 1)[1],
         r.describe()[:300])

# ---- a file swapped for a link while the zip streams ---------------------------------------
r = sh("set -e; mkdir -p /workspace/race; cd /workspace/race; head -c %d /dev/urandom > 0big.bin; "
       "head -c 200 /dev/zero | tr '\\0' v > victim.txt; echo ok" % (48 << 20))
h.eq((r.get("stdout") or "").strip(), "ok", "a big file first, then the victim file", r.describe()[:300])
conn = http.client.HTTPConnection(S.host, S.port, timeout=60)
hdrs = {"Authorization": "Bearer %s" % S.token} if S.token else {}
conn.request("GET", S.file_path(BOX, "/workspace/race", format="zip"), headers=hdrs)
resp = conn.getresponse()
first = resp.read(65536)  # the listing is done: the server is streaming 0big.bin
r = sh("cd /workspace/race && rm victim.txt && ln -s %s victim.txt && echo swapped" % BOX_SECRET)
h.eq((r.get("stdout") or "").strip(), "swapped", "the box swapped the listed file for a link to its secret "
     "while the zip streams", r.describe()[:300])
body = first + resp.read()
conn.close()
h.eq(resp.status, 200, "the zip streamed to its end")
victim, found = b"", False
try:
    zr = zipfile.ZipFile(io.BytesIO(body))
    vi = [zi for zi in zr.infolist() if zi.filename.endswith("victim.txt")]
    found = bool(vi)
    if vi:
        f = zr.open(vi[0])
        f._expected_crc = None  # what was streamed, whether or not its CRC matches
        victim = f.read()
except Exception as e:  # noqa: B902 - any failure to read it is reported, the check below decides
    h.diag("zip: %s" % e)
h.ok(found, "the zip holds the victim's entry (listed before the swap)", repr(body[:200]))
h.ok(SECRET.encode() not in victim, "the swapped entry does not hold the link's target (the box's secret)",
     repr(victim[:80]))
h.ok(SECRET.encode() not in body, "nothing in the streamed zip holds the secret")

os.unlink(HOST_SECRET)
h.done()
