#!/usr/bin/env bash
# chaos.sh [--minutes M] [--clients N] [--seed S] - the chaos soak
# (bench/chaos.py; docs/testing.md, "Chaos soak"): a mixed workload from many
# clients against one `agentbox serve` that is SIGKILLed and restarted at
# random moments, then the invariants (box states, files as acknowledged, the
# store against the disk, no leaked loop device, cgroup, uid range, veth or
# iptables rule). Needs root; loopback only (it runs in a network namespace
# of its own). About M + 2 minutes (default M = 8). Not part of the suite.
# The code-runner snippets need ./scripts/npm-deps.sh (JS) first.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/agentbox ] || { meson setup build >/dev/null && ninja -C build >/dev/null; }
export AGENTBOX_BIN=${AGENTBOX_BIN:-$PWD/build/agentbox}
export AGENTBOX_INIT=${AGENTBOX_INIT:-$PWD/build/agentbox-init}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# --fleet: the same idea over a three-node fleet (bench/chaos_fleet.py; needs
# AGENTBOX_TEST_PG_URL, e.g. from scripts/pg.sh)
for a in "$@"; do
        [ "$a" = --fleet ] && exec python3 bench/chaos_fleet.py "$@"
done
exec python3 bench/chaos.py "$@"
