#!/usr/bin/env python3
"""Attacks on the host through a box's limits and network mode, with an
app's API key (docs/security.md "Ceilings of limits per app"). Each check
passes only when the attack fails:
- a box asking more memory, CPUs, pids or disk than the server's ceilings
  (quotas.max_limits: by default the host's RAM, CPUs, a pid ceiling and the
  size of the data folder's disk) is refused with 400 naming the ceiling,
  and nothing is made: on /v1/sandboxes, on a fork, on the OpenSandbox
  front (resourceLimits), and for a volume's size;
- an app may ask only the network modes it is allowed (allowed_network;
  full is not among the default's): full is refused at create, at a
  network change (PUT /v1/sandboxes/{id}/network), through E2B
  (allow_internet_access, PUT network) and OpenSandbox (networkPolicy
  defaultAction allow);
- an app's own ceilings (quotas.apps.APP.max_limits) hold below the
  server's, and an app granted full network gets it past the checks.
Boxes within the ceilings are still made, so the checks cannot pass by
refusing everything."""
import os
import secrets
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
KEY = "key-t-" + secrets.token_hex(8)      # app "tenant": the server's ceilings
h = abserver.ServerHarness(budget=200)
# The server's defaults are the point: no ceiling is configured here.
srv = h.start_server(name="ceilings", token=TOKEN, config={
    "idle_pause": "1h", "idle_stop": "2h", "network_full": True,
    "api_keys": [{"key": KEY, "app_id": "tenant"}]})


KEY_IDS = {}


def new_key(app, quotas):
    """An API key of app with its own quotas (POST /v1/keys), or None."""
    r = srv.post("/v1/keys", {"app_id": app, "quotas": quotas})
    h.eq(r.status, 201, "the admin makes a key of app %s with quotas %s" % (app, quotas), r.describe())
    if r.status != 201:
        return None
    KEY_IDS[app] = r.get("key_id")
    return r.get("key")


with open("/proc/meminfo") as f:
    HOST_MIB = next(int(ln.split()[1]) // 1024 for ln in f if ln.startswith("MemTotal:"))
HOST_CPUS = os.cpu_count() or 1


def refused(r, ceiling, what):
    """The attack must be answered 400 naming the ceiling."""
    h.eq(r.status, 400, "%s: refused with 400" % what, r.describe())
    h.ok(ceiling in r.text,
         "%s: the answer names the ceiling %s" % (what, ceiling), r.describe())


def gone(box_id, what):
    h.eq(srv.get("/v1/sandboxes/" + box_id).status, 404, "%s: no box was made" % what)


# ---- the REST API: limits over the host's ---------------------------------------------------
attacks = [
    ("memory of 1 TiB", {"memory_mib": 1024 * 1024}, "max_limits.memory_mib"),
    ("memory above the host's RAM", {"memory_mib": HOST_MIB + 1024}, "max_limits.memory_mib"),
    ("1,024 CPUs", {"cpus": 1024}, "max_limits.cpus"),
    ("more CPUs than the host has", {"cpus": HOST_CPUS + 1}, "max_limits.cpus"),
    ("4M pids", {"pids": 1 << 22}, "max_limits.pids"),
    ("a 16 TiB disk", {"disk_mib": 16 * 1024 * 1024}, "max_limits.disk_mib"),
]
for i, (what, limits, ceiling) in enumerate(attacks):
    bid = "ceil-%d" % i
    r = srv.post("/v1/sandboxes", {"id": bid, "limits": limits}, token=KEY)
    refused(r, ceiling, "an app key asks %s" % what)
    gone(bid, what)

# the same with the admin token: the server's ceilings hold for everyone
r = srv.post("/v1/sandboxes", {"id": "ceil-admin", "limits": {"memory_mib": 1024 * 1024}})
refused(r, "max_limits.memory_mib", "the admin asks 1 TiB of memory")
gone("ceil-admin", "the admin's 1 TiB box")

# a volume is a disk on the host too
r = srv.post("/v1/volumes", {"name": "ceil-vol", "size_mib": 16 * 1024 * 1024}, token=KEY)
refused(r, "max_limits.disk_mib", "an app key asks a 16 TiB volume")
h.eq(srv.get("/v1/volumes/ceil-vol", token=KEY).status, 404, "a 16 TiB volume: none was made")

# ---- network mode full --------------------------------------------------------------------
r = srv.post("/v1/sandboxes", {"id": "ceil-net", "network": {"mode": "full"}}, token=KEY)
refused(r, "allowed_network", "an app key asks network mode full")
gone("ceil-net", "full network")

# a box within the ceilings is made (the checks do not refuse everything)
r = srv.post("/v1/sandboxes", {"id": "ceil-ok", "limits": {"memory_mib": 256, "cpus": 1}}, token=KEY)
h.eq(r.status, 201, "a box within the ceilings is made", r.describe())
r = srv.put("/v1/sandboxes/ceil-ok/network", {"mode": "full"}, token=KEY)
refused(r, "allowed_network", "an app key switches its box to network mode full")
r = srv.get("/v1/sandboxes/ceil-ok/network", token=KEY)
h.ok(r.status == 200 and (r.json or {}).get("mode") == "none",
     "... and the box's network is still none", r.describe())
r = srv.put("/v1/sandboxes/ceil-ok/network", {"mode": "allowlist", "allow": ["example.com"]}, token=KEY)
h.eq(r.status, 200, "an allowed mode (allowlist) is still set", r.describe())

# a fork may not raise the limits past the ceilings
r = srv.post("/v1/sandboxes/ceil-ok/fork", {"id": "ceil-fork", "limits": {"memory_mib": 1024 * 1024}},
             token=KEY)
refused(r, "max_limits.memory_mib", "a fork asks 1 TiB of memory")
gone("ceil-fork", "the fork")

# ---- an app's own ceilings, and an app granted full network ---------------------------------
KEY_S = new_key("small", {"max_limits": {"memory_mib": 256, "cpus": 1}})
if KEY_S:
    r = srv.post("/v1/sandboxes", {"id": "ceil-small", "limits": {"memory_mib": 512}}, token=KEY_S)
    refused(r, "max_limits.memory_mib", "app small asks 512 MiB over its 256 MiB ceiling")
    h.ok("small" in (r.err_message or ""), "... the message names the app", r.err_message)
    gone("ceil-small", "app small's box")
    r = srv.post("/v1/sandboxes", {"id": "ceil-small2", "limits": {"cpus": 2}}, token=KEY_S)
    refused(r, "max_limits.cpus", "app small asks 2 CPUs over its 1 CPU ceiling")
    gone("ceil-small2", "app small's second box")
    r = srv.get("/v1/keys/%s" % KEY_IDS["small"])
    eff = r.get("effective_quotas") or {}
    h.ok((eff.get("max_limits") or {}).get("memory_mib") == 256 and
         (eff.get("max_limits") or {}).get("cpus") == 1 and
         (eff.get("max_limits") or {}).get("pids", 0) > 0 and
         eff.get("allowed_network") == ["none", "allowlist"],
         "GET /v1/keys/{id} shows the key's ceilings over the server's (host-fit) ones", r.describe())
KEY_G = new_key("granted", {"allowed_network": ["none", "allowlist", "full"]})
if KEY_G:
    r = srv.post("/v1/sandboxes", {"id": "ceil-grant", "network": {"mode": "full"}}, token=KEY_G)
    h.ok(r.status != 400, "app granted (allowed_network has full) is not refused a full box", r.describe())

# ---- the E2B front ------------------------------------------------------------------------
r = srv.post("/e2b/sandboxes", {"templateID": "base", "allow_internet_access": True}, token=None,
             headers={"X-API-Key": KEY})
refused(r, "allowed_network", "E2B: an app key asks allow_internet_access")
r = srv.post("/e2b/sandboxes", {"templateID": "base"}, token=None, headers={"X-API-Key": KEY})
h.eq(r.status, 201, "E2B: a sandbox within the ceilings is made", r.describe())
esid = (r.json or {}).get("sandboxID", "")
if esid:
    r = srv.put("/e2b/sandboxes/%s/network" % esid, {}, token=None, headers={"X-API-Key": KEY})
    refused(r, "allowed_network", "E2B: an app key opens its sandbox's network (full)")
    r = srv.delete("/e2b/sandboxes/" + esid, token=None, headers={"X-API-Key": KEY})
    h.ok(r.status in (200, 204), "E2B: the sandbox is killed", r.describe())

# ---- the OpenSandbox front ----------------------------------------------------------------
OSB = {"OPEN-SANDBOX-API-KEY": KEY}
for what, res, ceiling in (("1 TiB of memory", {"memory": "1Ti"}, "max_limits.memory_mib"),
                           ("1,024 CPUs", {"cpu": "1024"}, "max_limits.cpus"),
                           ("a 16 TiB disk", {"ephemeral-storage": "16Ti"}, "max_limits.disk_mib")):
    r = srv.post("/opensandbox/v1/sandboxes", {"image": {"uri": "base"}, "resourceLimits": res},
                 token=None, headers=OSB)
    refused(r, ceiling, "OpenSandbox: an app key asks %s" % what)
r = srv.post("/opensandbox/v1/sandboxes", {"image": {"uri": "base"},
                                           "networkPolicy": {"defaultAction": "allow"}},
             token=None, headers=OSB)
refused(r, "allowed_network", "OpenSandbox: an app key asks networkPolicy defaultAction allow (full)")

boxes = [b for b in srv.list({"app_id": "tenant"}) or [] if b.get("status") != "deleting"]
h.eq(sorted(b.get("id") for b in boxes), ["ceil-ok"], "app tenant has only its one box within the ceilings")
# ---- the config's layers: the server's own ceiling, an app's entry above it ------------------
KEY_W = "key-w-" + secrets.token_hex(8)
srv2 = h.start_server(name="ceilings-cfg", token=TOKEN, config={
    "idle_pause": "1h", "idle_stop": "2h",
    "api_keys": [{"key": KEY, "app_id": "tenant"}, {"key": KEY_W, "app_id": "wide"}],
    "quotas": {"max_limits": {"memory": "512M"},
               "apps": {"wide": {"max_limits": {"memory": "1G"}, "allowed_network": ["none", "allowlist", "full"]}}}})
r = srv2.post("/v1/sandboxes", {"id": "cfg-t", "limits": {"memory_mib": 768}}, token=KEY)
refused(r, "max_limits.memory_mib", "config: app tenant asks 768 MiB over the server's 512 MiB ceiling")
h.ok("512" in r.text, "... the answer gives the ceiling (512 MiB)", r.describe())
r = srv2.post("/v1/sandboxes", {"id": "cfg-w", "limits": {"memory_mib": 768}}, token=KEY_W)
h.eq(r.status, 201, "config: app wide (its entry raises the ceiling to 1 GiB) gets 768 MiB", r.describe())
r = srv2.post("/v1/sandboxes", {"id": "cfg-w2", "limits": {"memory_mib": 2048}}, token=KEY_W)
refused(r, "max_limits.memory_mib", "config: app wide asks 2 GiB over its own 1 GiB ceiling")
r = srv2.put("/v1/sandboxes/cfg-w/network", {"mode": "full"}, token=KEY_W)
h.ok(r.status != 400, "config: app wide, allowed full network, may switch to it", r.describe())
h.done()
