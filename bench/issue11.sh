#!/usr/bin/env bash
# bench/issue11.sh - every speed target of the core reshape (issue 11) against
# its floor, in one run: box creation and resume (bench/speed.sh: bwrap and
# host floors, create at SCALE_N running boxes), exec (bench/exec.sh: argv and
# shell-string exec over HTTP against the host's own spawn, the CLI against
# nsenter) and pause/resume (bench/pause.sh: against writing the freezer file).
# Each part prints its own tables; the targets are gathered at the end.
#
#   sudo bench/issue11.sh                 # ~6 min
#   sudo SCALE_N=0 bench/issue11.sh       # ~2 min: no create-at-many-boxes series
#
# Knobs are passed on to the parts (BUILD, N, ROUNDS, SCALE_N, ...). The
# 2,000-running / 10,000-stopped run is bench/scale.sh (long; run it alone).
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
        echo "bench/issue11.sh: run as root (boxes need namespaces and cgroups)" >&2
        exit 2
fi
out=$(mktemp -d /var/tmp/agentbox-issue11.XXXXXX)
trap 'rm -rf "$out"' EXIT

rc=0
for part in speed exec pause; do
        echo "===== bench/$part.sh ====="
        "$ROOT/bench/$part.sh" 2>&1 | tee "$out/$part.log"
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "!! bench/$part.sh failed"; rc=1; }
        echo
done

echo "===== issue 11 targets (each against its floor, measured in this run) ====="
for part in speed exec pause; do
        grep -iE 'target|MISSED|LEAK' "$out/$part.log" | sed "s/^/[$part] /"
done
exit $rc
